//! TLS on the listeners (`--tls-listeners`, `--tls-cert`, `--tls-key`, `--tls-client-ca`,
//! `--tls-handshake-timeout-ms`): rill's client, its CLI, confluent-kafka and kcat over TLS;
//! untrusted, expired and missing certificates refused; broken and stalled handshakes and
//! garbage on a TLS port leave the broker serving others. Certificates are made in the test
//! (`rill_testkit::tls`, rcgen).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use rill::client::{
    Client, ClientConfig, Consumer, ConsumerConfig, Isolation, Producer, ProducerConfig,
    ProducerRecord, StartFrom, TransactionConfig, TransactionalProducer,
};
use rill::protocol::ErrorCode;
use rill_testkit::tls::TestCerts;
use rill_testkit::{
    assert_replicas_equal, consume_exactly, create_topic_rf3, produce_values, rill_bin, values,
    wait_partition, TestBroker, TestCluster, DEADLINE, FAST_FENCING,
};

/// Values of many sizes, up to 200 KiB, so responses span many TLS records and partial
/// socket writes.
fn sized_values(n: usize) -> Vec<String> {
    (0..n)
        .map(|i| {
            let len = match i % 50 {
                0 => 200 << 10,
                1..=5 => 16 << 10,
                _ => 1000,
            };
            let head = format!("v{i}:");
            head.clone() + &"x".repeat(len - head.len())
        })
        .collect()
}

#[test]
fn native_client_and_cli_produce_and_consume_over_tls() {
    let certs = TestCerts::new();
    let flags = certs.broker_flags("native,kafka", &certs.server, false);
    let b = TestBroker::start_tls(2, true, &flags, Some(certs.client_tls(false)));
    assert!(b
        .log_text()
        .contains("TLS on the native and kafka listener(s)"));
    b.client().create_topic("sealed", 2, 1, vec![]).unwrap();
    let sent = sized_values(1200);
    produce_values(&b, "sealed", 1, sent.clone());
    let got = consume_exactly(&b, "sealed", StartFrom::Beginning, sent.len());
    assert_eq!(values(&got), sent, "every value, in order, over TLS");

    // The CLI with --tls-ca.
    let ca = certs.ca_str();
    let out = cli(
        &b,
        &["--tls-ca", ca, "produce", "sealed", "--partition", "0"],
        Some("a\nb\nc\n"),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = cli(
        &b,
        &[
            "--tls-ca",
            ca,
            "consume",
            "sealed",
            "--partition",
            "0",
            "--from",
            "beginning",
            "-n",
            "3",
        ],
        None,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "a\nb\nc\n");

    // A plaintext client on the TLS listener gets nothing.
    let plain = Client::connect(rill::client::ClientConfig::new(b.bootstrap()));
    assert!(
        plain.is_err(),
        "a plaintext client was served on a TLS listener"
    );
    let out = cli(&b, &["topic", "list"], None);
    assert!(
        !out.status.success(),
        "the plaintext CLI was served on a TLS listener"
    );
}

#[test]
fn untrusted_and_expired_broker_certificates_are_refused() {
    let certs = TestCerts::new();
    for (server, why) in [
        (&certs.untrusted_server, "UnknownIssuer"),
        (&certs.expired_server, "certificate expired"),
    ] {
        let flags = certs.broker_flags("native", server, false);
        let mut b = TestBroker::unstarted(1, &flags);
        b.launch();
        wait_announced(&b);
        let mut cfg = b.client_config();
        cfg.tls = Some(certs.client_tls(false));
        let err = Client::connect(cfg)
            .err()
            .expect("a refused certificate was accepted");
        assert!(err.to_string().contains(why), "refused, but for: {err}");
        let out = cli(&b, &["--tls-ca", certs.ca_str(), "topic", "list"], None);
        assert!(!out.status.success());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("certificate"), "the CLI says why: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
    }
}

#[test]
fn mutual_tls_refuses_clients_without_a_trusted_certificate() {
    let certs = TestCerts::new();
    let mut flags = certs.broker_flags("native", &certs.server, true);
    // The certificate names the principal, and ACLs apply: this one may do anything.
    flags.extend(["--super-users".into(), "User:CN=client".into()]);
    let b = TestBroker::start_tls(1, false, &flags, Some(certs.client_tls(true)));
    let mut with_cert = b.client();
    with_cert.create_topic("mutual", 1, 1, vec![]).unwrap();

    let mut no_cert = b.client_config();
    no_cert.tls = Some(certs.client_tls(false));
    assert!(
        Client::connect(no_cert).is_err(),
        "served a client without a certificate"
    );
    let mut wrong_cert = b.client_config();
    wrong_cert.tls = Some(
        rill::tls::ClientTls::load(
            &certs.ca,
            Some((&certs.untrusted_client.cert, &certs.untrusted_client.key)),
            None,
        )
        .unwrap(),
    );
    assert!(
        Client::connect(wrong_cert).is_err(),
        "served an untrusted client certificate"
    );
    assert!(
        b.log_text().contains("TLS handshake failed"),
        "the broker logs the refusals"
    );

    let sent = sized_values(200);
    produce_values(&b, "mutual", 0, sent.clone());
    let got = consume_exactly(&b, "mutual", StartFrom::Beginning, sent.len());
    assert_eq!(values(&got), sent);
}

#[test]
fn kafka_clients_over_tls_beside_a_plaintext_native_listener() {
    let certs = TestCerts::new();
    let flags = certs.broker_flags("kafka", &certs.server, false);
    // Native stays plaintext: the harness's own client needs no TLS.
    let b = TestBroker::start_tls(2, true, &flags, None);
    assert!(b.log_text().contains("TLS on the kafka listener(s)"));
    b.client().create_topic("kt", 2, 1, vec![]).unwrap();
    let kafka = b.kafka_bootstrap();
    let ssl = format!(
        r#"{{"security.protocol": "SSL", "ssl.ca.location": "{}"}}"#,
        certs.ca_str()
    );
    let produced = python(&ssl, &["produce", &kafka, "kt", "500", "none"]);
    assert_eq!(produced.lines().count(), 500, "every message delivered");
    let consumed = python(&ssl, &["consume", &kafka, "kt", "2", "500"]);
    let mut got: Vec<String> = consumed
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["value"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    got.sort_by_key(|v| v.rsplit(':').next().unwrap().parse::<u32>().unwrap());
    let want: Vec<String> = (0..500).map(|i| format!("key{}:{i}", i % 50)).collect();
    assert_eq!(got, want, "every message read back over TLS");

    // The same records through the plaintext native listener.
    let native = consume_exactly(&b, "kt", StartFrom::Beginning, 500);
    assert_eq!(native.len(), 500);

    // kcat (Debian's librdkafka) lists metadata over TLS.
    let md = run(
        "kcat",
        &[
            "-b",
            &kafka,
            "-X",
            "security.protocol=ssl",
            "-X",
            &format!("ssl.ca.location={}", certs.ca_str()),
            "-L",
        ],
        &[],
    );
    let md = String::from_utf8_lossy(&md.stdout);
    assert!(md.contains("topic \"kt\" with 2 partitions"), "{md}");

    // Plaintext on the TLS Kafka port fails the handshake; the broker keeps serving.
    let mut plain = TcpStream::connect(&kafka).unwrap();
    let api_versions = [0u8, 0, 0, 10, 0, 18, 0, 0, 0, 0, 0, 1, 0, 0];
    let _ = plain.write_all(&api_versions);
    assert_closed_by_broker(&mut plain);
    let md = run(
        "kcat",
        &[
            "-b",
            &kafka,
            "-X",
            "security.protocol=ssl",
            "-X",
            &format!("ssl.ca.location={}", certs.ca_str()),
            "-L",
        ],
        &[],
    );
    assert!(String::from_utf8_lossy(&md.stdout).contains("topic \"kt\""));
}

#[test]
fn broken_stalled_and_garbage_handshakes_leave_the_broker_serving() {
    let certs = TestCerts::new();
    let mut flags = certs.broker_flags("native,kafka", &certs.server, false);
    let metrics = format!("127.0.0.1:{}", rill_testkit::free_ports(1));
    flags.extend([
        "--tls-handshake-timeout-ms".to_string(),
        "1000".to_string(),
        "--metrics-listen".to_string(),
        metrics.clone(),
    ]);
    let b = TestBroker::start_tls(1, true, &flags, Some(certs.client_tls(false)));
    b.client().create_topic("busy", 1, 1, vec![]).unwrap();

    // A handshake that never finishes: half a ClientHello, then silence. Kept open while
    // others are served; the broker closes it after --tls-handshake-timeout-ms (the idle
    // timeout is 10 minutes, so a close within the test's deadline is the handshake's).
    let hello = client_hello();
    let mut stalled = TcpStream::connect(b.bootstrap()).unwrap();
    stalled.write_all(&hello[..hello.len() / 2]).unwrap();
    let mut silent = TcpStream::connect(b.kafka_bootstrap()).unwrap();

    // A handshake cut in the middle, and garbage, on both ports.
    for addr in [b.bootstrap(), b.kafka_bootstrap()] {
        let mut cut = TcpStream::connect(&addr).unwrap();
        cut.write_all(&hello[..hello.len() / 3]).unwrap();
        drop(cut);
        let mut garbage = TcpStream::connect(&addr).unwrap();
        let junk: Vec<u8> = (0..64 << 10)
            .map(|i: u32| (i.wrapping_mul(2654435761) >> 13) as u8)
            .collect();
        let _ = garbage.write_all(&junk);
        assert_closed_by_broker(&mut garbage);
    }

    // Others are served meanwhile.
    let sent = sized_values(300);
    produce_values(&b, "busy", 0, sent.clone());
    assert_eq!(
        values(&consume_exactly(&b, "busy", StartFrom::Beginning, 300)),
        sent
    );

    assert_closed_by_broker(&mut stalled);
    assert_closed_by_broker(&mut silent);
    assert!(
        b.log_text().contains("--tls-handshake-timeout-ms"),
        "the timeout is logged: {}",
        b.log_text()
    );
    // And still serving after.
    assert_eq!(
        values(&consume_exactly(&b, "busy", StartFrom::Beginning, 300)),
        sent
    );
    // Counted: the stalled and silent ones timed out, the cut and garbage ones failed (two
    // per listener; the harness's own readiness probes add plain connects), and the served
    // clients' handshakes went through.
    let text = rill_testkit::scrape_metrics(&metrics);
    let count = |listener: &str, result: &str| -> u64 {
        let series = format!(
            "rill_tls_handshakes_total{{shard=\"0\",listener=\"{listener}\",result=\"{result}\"}} "
        );
        text.lines()
            .find_map(|l| l.strip_prefix(&series))
            .map_or(0, |v| v.trim().parse().unwrap())
    };
    for listener in ["native", "kafka"] {
        assert_eq!(count(listener, "timeout"), 1, "{listener}: {text}");
        assert!(count(listener, "failed") >= 2, "{listener}: {text}");
    }
    assert!(count("native", "ok") >= 1, "{text}");
}

#[test]
fn bad_tls_flags_are_refused_with_one_line() {
    let certs = TestCerts::new();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("d");
    let data = data.to_str().unwrap();
    let missing = dir.path().join("missing.pem");
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["--tls-listeners", "kafka"], "--tls-cert"),
        (
            vec![
                "--tls-listeners",
                "http",
                "--tls-cert",
                certs.server.cert_str(),
                "--tls-key",
                certs.server.key_str(),
            ],
            "unknown listener 'http'",
        ),
        (
            vec![
                "--tls-cert",
                missing.to_str().unwrap(),
                "--tls-key",
                certs.server.key_str(),
            ],
            "missing.pem",
        ),
        (
            vec![
                "--tls-cert",
                certs.server.cert_str(),
                "--tls-key",
                certs.server.cert_str(),
            ],
            "private key",
        ),
        (
            vec!["--tls-client-ca", certs.ca_str()],
            "need a TLS listener",
        ),
        (
            vec![
                "--tls-cert",
                certs.server.cert_str(),
                "--tls-key",
                certs.server.key_str(),
                "--tls-handshake-timeout-ms",
                "0",
            ],
            "--tls-handshake-timeout-ms",
        ),
        // A cluster's brokers fetch from each other's TLS native listeners: they must know
        // whom to trust.
        (
            vec![
                "--tls-cert",
                certs.server.cert_str(),
                "--tls-key",
                certs.server.key_str(),
                "--node-id",
                "1",
                "--controller-voters",
                "1@127.0.0.1:1,2@127.0.0.1:2,3@127.0.0.1:3",
            ],
            "needs --inter-broker-tls-ca",
        ),
        (
            vec!["--inter-broker-tls-ca", certs.ca_str()],
            "--inter-broker-tls-ca needs TLS on the native listener",
        ),
        (
            vec![
                "--tls-cert",
                certs.server.cert_str(),
                "--tls-key",
                certs.server.key_str(),
                "--inter-broker-tls-ca",
                missing.to_str().unwrap(),
            ],
            "missing.pem",
        ),
        (
            vec!["--inter-broker-tls-server-name", "broker1"],
            "needs --inter-broker-tls-ca",
        ),
    ];
    for (flags, why) in cases {
        let out = Command::new(rill_bin())
            .args(["broker", "--data-dir", data, "--shards", "1"])
            .args(&flags)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{flags:?} was accepted");
        assert!(stderr.contains(why), "{flags:?}: {stderr}");
        assert!(stderr.lines().count() == 1, "{flags:?}: one line: {stderr}");
    }
    let out = Command::new(rill_bin())
        .args([
            "-b",
            "127.0.0.1:1",
            "--tls-client-cert",
            certs.client.cert_str(),
            "topic",
            "list",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--tls-client-key"));
}

/// A native client with a certificate (mutual TLS, no SASL) is the principal its subject
/// names, as on the Kafka listener: refused without an ACL, served with one.
#[test]
fn a_native_mutual_tls_client_is_the_principal_its_certificate_names() {
    let certs = TestCerts::new();
    let mut flags = certs.broker_flags("native", &certs.server, true);
    flags.extend(["--super-users".into(), "User:CN=client".into()]);
    let b = TestBroker::start_tls(1, false, &flags, Some(certs.client_tls(true)));
    b.client().create_topic("certified", 1, 1, vec![]).unwrap();
    let sent = values_of(&["c1", "c2"]);
    produce_values(&b, "certified", 0, sent.clone());
    // Another certificate of the trusted CA: CN=server.
    let mut other = b.client_config();
    other.tls = Some(
        rill::tls::ClientTls::load(
            &certs.ca,
            Some((&certs.server.cert, &certs.server.key)),
            None,
        )
        .unwrap(),
    );
    let read = |cfg: ClientConfig| -> Result<Vec<String>, rill::client::ClientError> {
        let mut c = Consumer::new(cfg, Default::default())?;
        c.assign("certified", Some(vec![0]), StartFrom::Beginning)?;
        let mut got = Vec::new();
        let start = Instant::now();
        while got.len() < 2 {
            let records = c.poll(Duration::from_millis(200))?;
            got.extend(
                records
                    .iter()
                    .map(|r| String::from_utf8(r.value().unwrap().to_vec()).unwrap()),
            );
            assert!(start.elapsed() < DEADLINE, "read {got:?}");
        }
        Ok(got)
    };
    // The CLI as the super user (CN=client) grants CN=server `operation` on the topic.
    let allow = |operation: &str| {
        let out = cli(
            &b,
            &[
                "--tls-ca",
                certs.ca_str(),
                "--tls-client-cert",
                certs.client.cert_str(),
                "--tls-client-key",
                certs.client.key_str(),
                "acl",
                "add",
                "--allow-principal",
                "User:CN=server",
                "--operation",
                operation,
                "--topic",
                "certified",
            ],
            None,
        );
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    // Without DESCRIBE the topic is hidden from CN=server; with it, the fetch is refused.
    let e = read(other.clone()).expect_err("read without an ACL");
    assert!(e.to_string().contains("unknown topic"), "{e}");
    allow("describe");
    let e = read(other.clone()).expect_err("read without a READ ACL");
    assert_eq!(e.code(), Some(ErrorCode::TopicAuthorizationFailed), "{e}");
    allow("read");
    assert_eq!(read(other).expect("read with an ACL"), sent);
}

fn values_of(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

/// A cluster whose native listeners speak mutual TLS: followers fetch from leaders, a
/// restarted broker catches up, the transaction coordinator writes markers to other
/// brokers' leaders and a non-voter follows the quorum's metadata, all over TLS
/// (`--inter-broker-tls-ca`: the controller quorum's port too), each broker presenting its
/// certificate (whose principal is a super user).
#[test]
fn brokers_replicate_fail_over_and_write_markers_to_each_other_over_mutual_tls() {
    let certs = TestCerts::new();
    let mut flags = certs.broker_flags("native", &certs.server, true);
    flags.extend(
        [
            "--inter-broker-tls-ca",
            certs.ca_str(),
            "--super-users",
            "User:CN=server;User:CN=client",
        ]
        .map(String::from),
    );
    flags.extend(FAST_FENCING.iter().map(|s| s.to_string()));
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let mut c = TestCluster::start_tls(3, 1, &flags, certs.client_tls(true));
    c.wait_leader(&[1, 2, 3]);
    create_topic_rf3(&c, "sealed", 3, &[("min.insync.replicas", "3")]);
    let cfg = c.nodes[0].client_config();
    // acks=all with min.insync.replicas 3: acknowledged once both followers fetched it.
    let send = |values: &[String]| {
        let p = Producer::new(cfg.clone(), ProducerConfig::default()).expect("producer");
        let reports: Vec<_> = values
            .iter()
            .enumerate()
            .map(|(i, v)| {
                p.send(ProducerRecord::new("sealed", v.as_bytes()).partition(i as u32 % 3))
                    .expect("send")
            })
            .collect();
        p.flush().expect("flush");
        for r in reports {
            r.wait().expect("acknowledged by all three replicas");
        }
    };
    let mut sent = sized_values(150);
    send(&sent);

    // The leader of partition 0 dies: another takes over; back, it catches up over TLS and
    // rejoins the ISR (min.insync.replicas 3 needs it for the next acknowledgements).
    let old =
        u64::from(wait_partition(&c.nodes[0], "sealed", 0, "a leader", |m| m.leader != 0).leader);
    c.node(old).kill();
    let alive: Vec<usize> = (0..3).filter(|i| *i as u64 + 1 != old).collect();
    wait_partition(&c.nodes[alive[0]], "sealed", 0, "a new leader", |m| {
        m.leader != 0 && u64::from(m.leader) != old
    });
    c.node(old).restart();
    for p in 0..3 {
        wait_partition(&c.nodes[alive[0]], "sealed", p, "a full ISR", |m| {
            m.isr.len() == 3
        });
    }
    let more: Vec<String> = (0..60).map(|i| format!("after-{i}")).collect();
    send(&more);
    sent.extend(more);

    // A transaction over the three partitions, led by different brokers: its coordinator
    // writes the commit markers to the other brokers over TLS.
    let txn = TransactionConfig {
        transactional_id: "sealed-txn".into(),
        transaction_timeout: Duration::from_secs(60),
    };
    let tp =
        TransactionalProducer::init(cfg.clone(), ProducerConfig::default(), txn).expect("init");
    tp.begin().expect("begin");
    let committed: Vec<String> = (0..3).map(|i| format!("txn-{i}")).collect();
    for (i, v) in committed.iter().enumerate() {
        tp.send(ProducerRecord::new("sealed", v.as_bytes()).partition(i as u32))
            .expect("send");
    }
    tp.commit().expect("commit");
    sent.extend(committed);

    // read_committed reaches past the markers on every partition: all of it, each
    // partition in order.
    let consumer_cfg = ConsumerConfig {
        isolation: Isolation::ReadCommitted,
        ..ConsumerConfig::default()
    };
    let mut consumer = Consumer::new(cfg.clone(), consumer_cfg).expect("consumer");
    consumer
        .assign("sealed", None, StartFrom::Beginning)
        .expect("assign");
    let mut got: Vec<Vec<String>> = vec![Vec::new(); 3];
    let start = Instant::now();
    while got.iter().map(Vec::len).sum::<usize>() < sent.len() {
        for r in consumer
            .poll(Duration::from_millis(200))
            .expect("poll")
            .iter()
        {
            let v = String::from_utf8(r.value().unwrap().to_vec()).unwrap();
            got[r.partition as usize].push(v);
        }
        assert!(start.elapsed() < DEADLINE, "read {got:?}");
    }
    for (p, got) in got.iter().enumerate() {
        let want: Vec<String> = sent
            .iter()
            .filter(|v| partition_of(&sent, v) == p)
            .cloned()
            .collect();
        assert_eq!(got, &want, "partition {p}");
    }
    // Every replica holds the same batches.
    let mut client = Client::connect(cfg).expect("client");
    for p in 0..3 {
        let hw = client
            .list_offset("sealed", p, rill::protocol::messages::LATEST_TIMESTAMP)
            .expect("list offsets")
            .expect("an end");
        assert_replicas_equal(&c, "sealed", p, hw);
    }
    // A broker that is not a voter follows the quorum's metadata over TLS too.
    let id = c.add_broker(1, &flags, false);
    wait_partition(c.node(id), "sealed", 2, "known", |m| m.leader != 0);
}

/// The partition the test sent `v` to: the values were sent round robin, each phase from
/// partition 0.
fn partition_of(sent: &[String], v: &str) -> usize {
    let i = sent.iter().position(|s| s == v).unwrap();
    match v {
        _ if v.starts_with("txn-") => v[4..].parse().unwrap(),
        _ if v.starts_with("after-") => v[6..].parse::<usize>().unwrap() % 3,
        _ => i % 3,
    }
}

/// The first flight of a real TLS client (rustls), to cut.
fn client_hello() -> Vec<u8> {
    let certs = TestCerts::new();
    let tls = certs.client_tls(false);
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let mut c = rustls::ClientConnection::new(tls.config, name).unwrap();
    let mut out = Vec::new();
    while c.wants_write() {
        c.write_tls(&mut out).unwrap();
    }
    assert!(out.len() > 100, "a ClientHello");
    out
}

/// Waits until the broker closes `s` (EOF or reset), reading and dropping what it sends.
fn assert_closed_by_broker(s: &mut TcpStream) {
    s.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let start = Instant::now();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return,
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => return,
        }
        assert!(
            start.elapsed() < DEADLINE,
            "the broker never closed the connection"
        );
    }
}

/// Waits for the broker's "ready" line (its TLS listeners may refuse the harness's client).
fn wait_announced(b: &TestBroker) {
    let start = Instant::now();
    while !b.log_text().contains(" ready: ") {
        assert!(
            start.elapsed() < DEADLINE,
            "broker not ready: {}",
            b.log_text()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn cli(b: &TestBroker, args: &[&str], stdin: Option<&str>) -> Output {
    b.cli(args, stdin)
}

fn python(extra_config: &str, args: &[&str]) -> String {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/kafka/clients.py");
    let mut all = vec![script];
    all.extend_from_slice(args);
    let out = run("python3", &all, &[("KAFKA_CLIENT_CONFIG", extra_config)]);
    String::from_utf8(out.stdout).unwrap()
}

fn run(program: &str, args: &[&str], env: &[(&str, &str)]) -> Output {
    let out = rill_testkit::external(program)
        .args(args)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| {
            panic!("cannot run {program} ({e}): run .ci/run, or install kcat (apt) and confluent-kafka (pip)")
        });
    assert!(
        out.status.success(),
        "{program} {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}
