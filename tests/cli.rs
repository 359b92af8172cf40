//! The `rill` CLI as users drive it: produce stdin lines, consume them back, and one-line errors.

use rill_testkit::{cli, TestBroker};

fn text(o: &std::process::Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn produce_and_consume_lines_with_keys() {
    let b = TestBroker::start(2, &[]);
    let o = b.cli(&["topic", "create", "lines", "--partitions", "3"], None);
    assert!(o.status.success(), "{:?}", text(&o));
    let input: String = (0..300)
        .map(|i| format!("user{}|event {i}\n", i % 7))
        .collect();
    let o = b.cli(
        &["produce", "lines", "--key-separator", "|", "--acks", "all"],
        Some(&input),
    );
    assert!(o.status.success(), "{:?}", text(&o));
    let o = b.cli(
        &[
            "consume",
            "lines",
            "--from",
            "beginning",
            "-n",
            "300",
            "--print-key",
            "--timeout-ms",
            "20000",
        ],
        None,
    );
    assert!(o.status.success(), "{:?}", text(&o));
    let (out, _) = text(&o);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 300);
    // Per key, events come back in the order produced.
    for k in 0..7 {
        let prefix = format!("user{k}\t");
        let events: Vec<usize> = lines
            .iter()
            .filter_map(|l| l.strip_prefix(&prefix))
            .map(|e| e.trim_start_matches("event ").parse().unwrap())
            .collect();
        let want: Vec<usize> = (0..300).filter(|i| i % 7 == k).collect();
        assert_eq!(events, want, "key user{k}");
    }
    // --timeout-ms ends a consume that has nothing more to read.
    let o = b.cli(
        &["consume", "lines", "--from", "end", "--timeout-ms", "300"],
        None,
    );
    assert!(o.status.success());
    assert_eq!(text(&o).0, "");
    let o = b.cli(&["topic", "list"], None);
    assert_eq!(text(&o).0.trim(), "lines");
}

fn assert_one_line_error(o: &std::process::Output, needle: &str) {
    let (out, err) = text(o);
    assert!(!o.status.success(), "should fail: {out}{err}");
    assert_eq!(
        err.trim_end().lines().count(),
        1,
        "one line expected: {err:?}"
    );
    assert!(err.contains(needle), "{err:?} should name {needle:?}");
}

#[test]
fn cli_errors_are_one_line_and_exit_non_zero() {
    // Unreachable broker: nothing listens on a port we just freed.
    let port = rill_testkit::free_ports(1);
    let o = cli(&format!("127.0.0.1:{port}"), &["topic", "list"], None);
    assert_one_line_error(&o, "cannot reach broker");
    let b = TestBroker::start(1, &["--auto-create-topics", "false"]);
    let o = b.cli(&["consume", "nope", "-n", "1"], None);
    assert_one_line_error(&o, "unknown topic 'nope'");
    let o = b.cli(&["produce", "nope"], Some("x\n"));
    assert_one_line_error(&o, "unknown topic 'nope'");
    let o = b.cli(&["topic", "--bogus"], None);
    assert_one_line_error(&o, "--bogus");
    let o = b.cli(&["topic", "create", "bad name!", "--partitions", "1"], None);
    assert_one_line_error(&o, "bad name!");
    let o = b.cli(&["topic", "create", "zero", "--partitions", "0"], None);
    assert_one_line_error(&o, "INVALID_PARTITIONS");
    let o = b.cli(&["produce", "x", "--acks", "2"], None);
    assert_one_line_error(&o, "acks");
    let o = cli("127.0.0.1:1", &["broker", "--fsync", "sometimes"], None);
    assert_one_line_error(&o, "fsync");
}

#[test]
fn delete_topic_removes_its_files_and_a_new_topic_of_that_name_starts_empty() {
    let b = TestBroker::start(2, &[]);
    assert!(b
        .cli(&["topic", "create", "gone", "--partitions", "2"], None)
        .status
        .success());
    let o = b.cli(&["produce", "gone"], Some("one\ntwo\nthree\n"));
    assert!(o.status.success(), "{:?}", text(&o));
    let topic_dirs = || -> Vec<String> {
        std::fs::read_dir(b.data_dir().join("topics"))
            .map(|d| {
                d.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|n| n.starts_with("gone~"))
                    .collect()
            })
            .unwrap_or_default()
    };
    assert_eq!(topic_dirs().len(), 1);
    let o = b.cli(&["topic", "delete", "gone"], None);
    assert!(o.status.success(), "{:?}", text(&o));
    assert!(topic_dirs().is_empty(), "files left: {:?}", topic_dirs());
    let o = b.cli(&["consume", "gone", "-n", "1"], None);
    assert_one_line_error(&o, "unknown topic 'gone'");
    let o = b.cli(&["topic", "delete", "gone"], None);
    assert_one_line_error(&o, "UNKNOWN_TOPIC_OR_PARTITION");
    assert!(b
        .cli(&["topic", "create", "gone", "--partitions", "2"], None)
        .status
        .success());
    let o = b.cli(&["consume", "gone", "--timeout-ms", "500"], None);
    assert!(o.status.success());
    assert_eq!(
        text(&o).0,
        "",
        "a re-created topic must not see the old records"
    );
}

#[test]
fn broker_flags_come_from_a_config_file_and_rill_variables() {
    // Precedence: flag > RILL_* variable > --config file > default.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("broker.toml");
    std::fs::write(&file, "fsync = \"interval:50\"\nsegment_bytes = 1048576\n").unwrap();
    let path = file.to_str().unwrap().to_string();
    let b = TestBroker::start(1, &["--config", &path]);
    assert!(
        b.log_text().contains("fsync interval:50"),
        "{}",
        b.log_text()
    );
    drop(b);
    let b = TestBroker::start_with_env(1, &["--config", &path], &[("RILL_FSYNC", "never")]);
    assert!(b.log_text().contains("fsync never"), "{}", b.log_text());
    drop(b);
    std::fs::write(&file, "no_such_flag = 1\n").unwrap();
    let o = cli("127.0.0.1:1", &["broker", "--config", &path], None);
    assert_one_line_error(&o, "unknown key 'no_such_flag'");
}

#[test]
fn sigterm_stops_the_broker_cleanly_and_keeps_the_data() {
    let mut b = TestBroker::start(2, &["--fsync", "never"]);
    assert!(b
        .cli(&["topic", "create", "calm", "--partitions", "2"], None)
        .status
        .success());
    let input: String = (0..500).map(|i| format!("line-{i}\n")).collect();
    assert!(b
        .cli(&["produce", "calm", "--acks", "1"], Some(&input))
        .status
        .success());
    let status = b.terminate();
    assert!(status.success(), "exit status {status}: {}", b.log_text());
    assert!(b.log_text().contains("stopped cleanly"), "{}", b.log_text());
    b.start_again();
    let o = b.cli(
        &["consume", "calm", "-n", "500", "--timeout-ms", "20000"],
        None,
    );
    let (out, _) = text(&o);
    let mut got: Vec<&str> = out.lines().collect();
    got.sort_unstable();
    let mut want: Vec<String> = (0..500).map(|i| format!("line-{i}")).collect();
    want.sort_unstable();
    assert_eq!(got, want);
}

#[test]
fn a_second_broker_on_the_same_ports_is_refused() {
    let b = TestBroker::start(2, &[]);
    let bootstrap = b.bootstrap();
    let o = broker_that_must_refuse(&[
        "--shards",
        "2",
        "--kafka-listen",
        "off",
        "--port-release-wait-ms",
        "300",
        "--listen",
        &bootstrap,
    ]);
    assert!(!o.status.success());
    let (_, err) = text(&o);
    let last = err.trim_end().lines().last().unwrap_or_default();
    assert!(
        last.starts_with("rill: error: cannot listen on") && last.contains("another process"),
        "{err}"
    );
    // The first broker still serves.
    assert!(b.cli(&["topic", "list"], None).status.success());
}

/// A port whose last server closed its connections first holds them in TIME_WAIT for a
/// minute. Every other server binds there (SO_REUSEADDR); so must the broker's shards, native
/// and Kafka. A CI run once failed a broker's start on such a port, left by a test before it.
#[test]
fn a_broker_starts_on_ports_a_plain_server_just_closed_connections_on() {
    use std::io::Read;
    let native = rill_testkit::free_ports(2);
    let kafka = rill_testkit::free_ports(2);
    for port in [native, native + 1, kafka, kafka + 1] {
        let server = std::net::TcpListener::bind(("127.0.0.1", port)).unwrap();
        let mut client = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        drop(server.accept().unwrap());
        // The client sees the server's close first: TIME_WAIT is on the server's side.
        assert_eq!(client.read(&mut [0u8; 1]).unwrap(), 0);
    }
    let kafka_listen = format!("127.0.0.1:{kafka}");
    let mut b = TestBroker::unstarted(
        2,
        &[
            "--kafka-listen".into(),
            kafka_listen,
            "--port-release-wait-ms".into(),
            "300".into(),
        ],
    );
    b.port = native;
    b.kafka_port = Some(kafka);
    b.launch();
    b.wait_ready();
    let o = b.cli(
        &["topic", "create", "after-time-wait", "--partitions", "2"],
        None,
    );
    assert!(o.status.success(), "{:?}", text(&o));
    for port in [kafka, kafka + 1] {
        std::net::TcpStream::connect(("127.0.0.1", port)).expect("a Kafka shard listens");
    }
}

/// As Kafka's brokers do by default, a topic produced to for the first time is created with
/// `--num-partitions` partitions; a consumer alone does not create one; internal and invalid
/// names never are.
#[test]
fn producing_to_a_missing_topic_creates_it_with_the_broker_defaults() {
    let b = TestBroker::start(1, &["--num-partitions", "3"]);
    let o = b.cli(
        &["consume", "later", "-n", "1", "--timeout-ms", "200"],
        None,
    );
    assert!(
        !o.status.success(),
        "a consumer created the topic: {:?}",
        text(&o)
    );
    let o = b.cli(&["produce", "fresh", "--partition", "2"], Some("hello\n"));
    assert!(o.status.success(), "{:?}", text(&o));
    let o = b.cli(&["topic", "describe", "fresh"], None);
    assert!(o.status.success(), "{:?}", text(&o));
    let described = text(&o).0;
    assert_eq!(
        rill::client::Client::connect(rill::client::ClientConfig::new(b.bootstrap()))
            .unwrap()
            .metadata()
            .partitions("fresh")
            .unwrap(),
        3,
        "{described}"
    );
    let o = b.cli(
        &["consume", "fresh", "--from", "beginning", "-n", "1"],
        None,
    );
    assert_eq!(text(&o).0.trim(), "hello");
    let o = b.cli(&["produce", "bad name!"], Some("x\n"));
    assert!(!o.status.success());
    let o = b.cli(&["produce", "__internal"], Some("x\n"));
    assert!(!o.status.success());
    let o = b.cli(&["topic", "list"], None);
    let listed = text(&o).0;
    assert!(
        !listed.contains("bad name") && !listed.contains("__internal"),
        "{listed}"
    );
}

/// `--max-partitions-per-shard` bounds the partition replicas a cluster holds (here one shard
/// of 20, 8 of them `__consumer_offsets`): a create past it is a one-line error naming the
/// flag, and nothing is created.
#[test]
fn creating_past_the_partitions_per_shard_limit_is_refused() {
    let b = TestBroker::start(1, &["--max-partitions-per-shard", "20"]);
    let o = b.cli(&["topic", "create", "fits", "--partitions", "12"], None);
    assert!(o.status.success(), "{:?}", text(&o));
    let o = b.cli(&["topic", "create", "over", "--partitions", "1"], None);
    assert_one_line_error(&o, "--max-partitions-per-shard");
    let o = b.cli(&["topic", "list"], None);
    assert!(!text(&o).0.contains("over"), "{:?}", text(&o));
}

/// Every line of a `--log-format json` broker's log as (level, target, msg); panics on a line
/// that is not one json object with the four keys.
fn json_lines(log: &str) -> Vec<(String, String, String)> {
    log.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let v: serde_json::Value =
                serde_json::from_str(l).unwrap_or_else(|e| panic!("not json ({e}): {l:?}"));
            let field = |k: &str| {
                v.get(k)
                    .and_then(|x| x.as_str())
                    .unwrap_or_else(|| panic!("no {k:?} in {l}"))
                    .to_string()
            };
            assert!(field("ts").starts_with("20"), "{l}");
            (field("level"), field("target"), field("msg"))
        })
        .collect()
}

#[test]
fn log_format_json_writes_one_object_per_line_from_start_to_stop() {
    let mut b = TestBroker::start(1, &["--log-format", "json"]);
    let o = b.cli(&["topic", "create", "logged", "--partitions", "2"], None);
    assert!(o.status.success(), "{:?}", text(&o));
    let o = b.cli(&["produce", "logged", "--partition", "1"], Some("a\nb\n"));
    assert!(o.status.success(), "{:?}", text(&o));
    assert!(b.terminate().success());
    let lines = json_lines(&b.log_text());
    let has = |level: &str, target: &str, needle: &str| {
        lines
            .iter()
            .any(|(l, t, m)| l == level && t == target && m.contains(needle))
    };
    assert!(
        has("INFO", "rill", " ready: native protocol on "),
        "{lines:?}"
    );
    assert!(
        has("INFO", "rill::broker::shard", "opened logged-1"),
        "{lines:?}"
    );
    assert!(has("INFO", "rill", "stopped cleanly"), "{lines:?}");
    // The text format, the default, is not json.
    let t = TestBroker::start(1, &[]);
    assert!(t.log_text().lines().any(|l| l.starts_with("rill: broker ")));
    // A format rill does not have: one line, exit 2, nothing started.
    let o = std::process::Command::new(rill_testkit::rill_bin())
        .args(["broker", "--log-format", "xml"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let (_, err) = text(&o);
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.contains("xml"), "{err}");
    // A broker that cannot start says why in one json line too.
    let o = std::process::Command::new(rill_testkit::rill_bin())
        .args(["broker", "--log-format", "json", "--fsync", "sometimes"])
        .output()
        .unwrap();
    assert!(!o.status.success());
    let (_, err) = text(&o);
    let lines = json_lines(&err);
    assert_eq!(lines.len(), 1, "{err}");
    assert_eq!(lines[0].0, "ERROR");
    assert!(lines[0].2.starts_with("rill: error: --fsync"), "{lines:?}");
}

#[test]
fn json_log_lines_of_a_request_path_name_the_shard_and_the_connection() {
    let mut b = TestBroker::start_kafka(
        1,
        &[
            "--log-format",
            "json",
            "--kafka-sasl-mechanisms",
            "SCRAM-SHA-256",
        ],
    );
    let o = b.cli(&["topic", "create", "ctx", "--partitions", "1"], None);
    assert!(o.status.success(), "{:?}", text(&o));
    // A Kafka client with a wrong password: the broker logs the refusal on its connection.
    let kcat = rill_testkit::external("kcat")
        .args(["-b", &b.kafka_bootstrap(), "-m", "5", "-L"])
        .args(["-X", "security.protocol=SASL_PLAINTEXT"])
        .args(["-X", "sasl.mechanisms=SCRAM-SHA-256"])
        .args(["-X", "sasl.username=nobody", "-X", "sasl.password=wrong"])
        .stdin(std::process::Stdio::null())
        .output()
        .expect("kcat (run .ci/run, or apt-get install kcat)");
    assert!(!kcat.status.success());
    assert!(b.terminate().success());
    let lines: Vec<serde_json::Value> = b
        .log_text()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not json ({e}): {l:?}")))
        .collect();
    let find = |needle: &str| {
        lines
            .iter()
            .find(|v| v["msg"].as_str().is_some_and(|m| m.contains(needle)))
            .unwrap_or_else(|| panic!("no line with {needle:?}: {lines:?}"))
    };
    let opened = find("opened ctx-0");
    assert_eq!(opened["shard"], 0, "{opened}");
    assert!(opened.get("conn").is_none(), "{opened}");
    let refused = find("SASL refused; closing");
    assert_eq!(refused["shard"], 0, "{refused}");
    let conn = refused["conn"].as_str().unwrap_or_default();
    assert!(conn.starts_with("kafka/127.0.0.1:"), "{refused}");
    // Lines of the process itself name neither.
    let ready = find(" ready: native protocol on ");
    assert!(
        ready.get("shard").is_none() && ready.get("conn").is_none(),
        "{ready}"
    );
}

/// Runs `rill broker ARGS` in a fresh data dir, expecting it to exit by itself (a broker that
/// started would run until killed: that is a failure here).
fn broker_that_must_refuse(args: &[&str]) -> std::process::Output {
    let dir = tempfile::tempdir().unwrap();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_rill"))
        .arg("broker")
        .args(args)
        .arg("--data-dir")
        .arg(dir.path())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let start = std::time::Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > rill_testkit::DEADLINE {
            let _ = child.kill();
            panic!("the broker started with {args:?}");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

/// Each shard listens on the next port, and the shards' listeners share ports (SO_REUSEPORT):
/// a Kafka range laid over the native one would bind, and the kernel would hand each client
/// to one protocol or the other at random. Such flags are refused before anything binds.
#[test]
fn listener_port_ranges_that_overlap_are_refused() {
    let p = rill_testkit::free_ports(4);
    let native = format!("127.0.0.1:{p}");
    let next = format!("127.0.0.1:{}", p + 1);
    let apart = format!("127.0.0.1:{}", p + 2);
    let any = format!("0.0.0.0:{}", p + 1);
    // Each case's flags come after `--shards 2`; the native listener is on `native` unless
    // the case names another.
    for (flags, needle) in [
        (vec!["--kafka-listen", &next], "--kafka-listen"),
        (vec!["--kafka-listen", &any], "--kafka-listen"),
        (
            vec!["--kafka-listen", &apart, "--metrics-listen", &next],
            "--metrics-listen",
        ),
        (
            vec!["--listen", "127.0.0.1:65535", "--kafka-listen", "off"],
            "65536",
        ),
    ] {
        let mut args = vec!["--shards", "2"];
        if !flags.contains(&"--listen") {
            args.extend(["--listen", native.as_str()]);
        }
        args.extend(flags);
        let o = broker_that_must_refuse(&args);
        assert_one_line_error(&o, needle);
        if needle != "65536" {
            assert_one_line_error(&o, "overlap");
        }
    }
}
