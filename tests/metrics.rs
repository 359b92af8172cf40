//! `--metrics-listen`: a real broker scraped over HTTP after known traffic on both listeners
//! (values checked against what was sent and against the log's own accounting), hostile input
//! to the endpoint, and a scrape by a real Prometheus (Debian's `prometheus`; skipped with a
//! message where it is not installed, `.ci/run` installs it).

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::messages::{ApiKey, ProduceResponse};
use kafka_protocol::records::Record;
use rill::client::StartFrom;
use rill_testkit::{free_ports, kafka_call, TestBroker, DEADLINE};

/// A broker (one shard, Kafka listener on) serving metrics; returns it and the metrics address.
fn broker_with_metrics() -> (TestBroker, String) {
    let addr = format!("127.0.0.1:{}", free_ports(1));
    let b = TestBroker::start_kafka(1, &["--metrics-listen", &addr]);
    // The endpoint starts right after the shards announce themselves.
    wait_for("the metrics endpoint", || try_get(&addr, "/metrics").ok());
    (b, addr)
}

/// Polls `f` until it gives a value, up to [`DEADLINE`].
fn wait_for<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(start.elapsed() < DEADLINE, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// One HTTP/1.0 exchange: (status code, body).
fn http(addr: &str, request: &[u8]) -> std::io::Result<(u16, String)> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(DEADLINE))?;
    s.write_all(request)?;
    let mut out = Vec::new();
    s.read_to_end(&mut out)?;
    let text = String::from_utf8_lossy(&out).to_string();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("no status line in {text:?}")))?;
    Ok((status, body.to_string()))
}

fn try_get(addr: &str, path: &str) -> std::io::Result<String> {
    let req = format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n");
    match http(addr, req.as_bytes())? {
        (200, body) => Ok(body),
        (status, body) => Err(std::io::Error::other(format!("{status}: {body}"))),
    }
}

/// A scrape, parsed: (metric name, labels) -> value, every line checked for shape.
struct Scrape(Vec<(String, BTreeMap<String, String>, f64)>);

impl Scrape {
    fn get(addr: &str) -> Scrape {
        Scrape::get_ok(addr).expect("scrape")
    }

    /// A scrape, or `None` while the endpoint does not answer yet.
    fn get_ok(addr: &str) -> Option<Scrape> {
        let text = try_get(addr, "/metrics").ok()?;
        let mut out = Vec::new();
        for line in text
            .lines()
            .filter(|l| !l.starts_with('#') && !l.is_empty())
        {
            let (series, value) = line.rsplit_once(' ').expect("series value");
            let value: f64 = match value {
                "+Inf" => f64::INFINITY,
                v => v
                    .parse()
                    .unwrap_or_else(|_| panic!("bad value in {line:?}")),
            };
            let (name, labels) = match series.split_once('{') {
                Some((n, rest)) => (n, rest.strip_suffix('}').expect("closing brace")),
                None => (series, ""),
            };
            let labels = labels
                .split(',')
                .filter(|l| !l.is_empty())
                .map(|l| {
                    let (k, v) = l.split_once('=').expect("label=value");
                    let v = v.strip_prefix('"').and_then(|v| v.strip_suffix('"'));
                    (k.to_string(), v.expect("quoted").to_string())
                })
                .collect();
            out.push((name.to_string(), labels, value));
        }
        Some(Scrape(out))
    }

    /// The sum of the series of `name` that have all of `labels` (0 when none has).
    fn sum(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.0
            .iter()
            .filter(|(n, l, _)| {
                n == name
                    && labels
                        .iter()
                        .all(|(k, v)| l.get(*k).map(String::as_str) == Some(v))
            })
            .map(|(_, _, v)| v)
            .sum()
    }

    fn has(&self, name: &str, labels: &[(&str, &str)]) -> bool {
        self.0.iter().any(|(n, l, _)| {
            n == name
                && labels
                    .iter()
                    .all(|(k, v)| l.get(*k).map(String::as_str) == Some(v))
        })
    }
}

/// The tail cache gives its memory back while less than `--tail-cache-min-available-bytes` is
/// available: under a minimum no machine has it holds nothing and a consumer reads every
/// record from the files; with no minimum it holds what was just produced.
#[test]
fn the_tail_cache_gives_memory_back_while_the_machine_is_short() {
    const LIMIT: &str = "67108864";
    for (min, short) in [("1152921504606846976", true), ("0", false)] {
        let addr = format!("127.0.0.1:{}", free_ports(1));
        let flags = [
            "--metrics-listen",
            &addr,
            "--tail-cache-bytes",
            LIMIT,
            "--tail-cache-min-available-bytes",
            min,
        ];
        let b = TestBroker::start(1, &flags);
        let shard0 = [("shard", "0")];
        let budget = wait_for("the cache's budget", || {
            let s = Scrape::get_ok(&addr)?;
            let budget = s.sum("rill_tail_cache_budget_bytes", &shard0);
            (!short || budget == 0.0).then_some(budget)
        });
        if !short {
            assert_eq!(budget, LIMIT.parse::<f64>().unwrap());
        }
        b.client().create_topic("c", 1, 1, Vec::new()).unwrap();
        rill_testkit::produce_values(&b, "c", 0, (0..500).map(|i| format!("value-{i:05}")));
        rill_testkit::consume_exactly(&b, "c", StartFrom::Beginning, 500);
        let s = Scrape::get(&addr);
        let held = s.sum("rill_tail_cache_bytes", &shard0);
        let hits = s.sum("rill_tail_cache_hits_total", &shard0);
        if short {
            assert_eq!((held, hits), (0.0, 0.0), "min {min}");
            assert_eq!(s.sum("rill_tail_cache_budget_bytes", &shard0), 0.0);
        } else {
            assert!(held > 0.0, "min {min}: nothing cached");
        }
    }
}

fn kafka_record(offset: i64, value: &str) -> Record {
    rill_testkit::kafka_record(offset, None, Some(Bytes::from(value.to_string())))
}

/// A raw Kafka Produce of `n` records to `partition`; its partition error code.
fn kafka_produce(b: &TestBroker, topic: &str, partition: i32, n: i64) -> i16 {
    let records: Vec<Record> = (0..n).map(|i| kafka_record(i, &format!("k{i}"))).collect();
    let req = rill_testkit::kafka_produce_request(topic, partition, &records, 10_000);
    let r: ProduceResponse = kafka_call(&b.kafka_bootstrap(), ApiKey::Produce, 9, &req);
    r.responses[0].partition_responses[0].error_code
}

#[test]
fn a_scrape_counts_what_both_listeners_were_sent() {
    let (b, addr) = broker_with_metrics();
    b.client().create_topic("m", 1, 1, Vec::new()).unwrap();
    const NATIVE: usize = 300;
    const KAFKA_REQUESTS: usize = 3;
    const PER_KAFKA_REQUEST: i64 = 5;
    rill_testkit::produce_values(&b, "m", 0, (0..NATIVE).map(|i| format!("value-{i:05}")));
    for _ in 0..KAFKA_REQUESTS {
        assert_eq!(kafka_produce(&b, "m", 0, PER_KAFKA_REQUEST), 0);
    }
    // A partition that does not exist: refused, counted by its error name.
    assert_eq!(
        kafka_produce(&b, "m", 7, 1),
        3,
        "UNKNOWN_TOPIC_OR_PARTITION"
    );
    let total = NATIVE + KAFKA_REQUESTS * PER_KAFKA_REQUEST as usize;
    rill_testkit::consume_exactly(&b, "m", StartFrom::Beginning, total);
    // Errors of other APIs' answers, one on each listener: a native ListOffsets with a bad
    // timestamp, a Kafka Heartbeat of a member no group has.
    assert!(b.client().list_offset("m", 0, -100).is_err());
    let mut hb = kafka_protocol::messages::HeartbeatRequest::default();
    hb.group_id = kafka_protocol::messages::GroupId("nobody".into());
    hb.generation_id = 1;
    hb.member_id = "m".into();
    let hb: kafka_protocol::messages::HeartbeatResponse =
        kafka_call(&b.kafka_bootstrap(), ApiKey::Heartbeat, 4, &hb);
    assert_ne!(hb.error_code, 0);
    let heartbeat_error = rill::protocol::ErrorCode::from_code(hb.error_code).name();

    // Held open while scraped: the connection gauges see them.
    let native = TcpStream::connect(b.bootstrap()).unwrap();
    let kafka = TcpStream::connect(b.kafka_bootstrap()).unwrap();
    let held = wait_for("the held connections to be counted", || {
        let s = Scrape::get(&addr);
        let open = |l| s.sum("rill_connections", &[("shard", "0"), ("listener", l)]);
        (open("native") >= 1.0 && open("kafka") >= 1.0).then_some(s)
    });
    drop(held);

    let shard0 = ("shard", "0");
    // A fetch is timed when answered: the consumer's last long poll may still be waiting
    // (up to its max wait) after it was dropped.
    let s = wait_for("every fetch to be answered", || {
        let s = Scrape::get(&addr);
        let fetches = s.sum("rill_requests_total", &[shard0, ("api", "Fetch")]);
        let timed = s.sum("rill_fetch_duration_seconds_count", &[shard0]);
        (fetches >= 1.0 && timed == fetches).then_some(s)
    });
    assert_eq!(s.sum("rill_shard_up", &[shard0]), 1.0);
    let requests = |listener, api| {
        s.sum(
            "rill_requests_total",
            &[shard0, ("listener", listener), ("api", api)],
        )
    };
    // Exactly the raw Kafka produces sent; the native producer sent at least one.
    assert_eq!(requests("kafka", "Produce"), (KAFKA_REQUESTS + 1) as f64);
    assert!(requests("native", "Produce") >= 1.0);
    assert!(requests("native", "Fetch") >= 1.0);
    assert!(requests("native", "Metadata") >= 1.0);
    assert_eq!(
        s.sum(
            "rill_request_errors_total",
            &[
                ("listener", "kafka"),
                ("api", "Produce"),
                ("code", "UNKNOWN_TOPIC_OR_PARTITION")
            ]
        ),
        1.0
    );
    assert_eq!(
        s.sum(
            "rill_request_errors_total",
            &[
                ("listener", "native"),
                ("api", "ListOffsets"),
                ("code", "INVALID_REQUEST")
            ]
        ),
        1.0
    );
    assert_eq!(
        s.sum("rill_request_errors_total", &[("listener", "native")]),
        1.0,
        "nothing else native was refused"
    );
    assert_eq!(
        s.sum(
            "rill_request_errors_total",
            &[
                ("listener", "kafka"),
                ("api", "Heartbeat"),
                ("code", heartbeat_error)
            ]
        ),
        1.0
    );
    assert_eq!(
        s.sum("rill_request_errors_total", &[("listener", "kafka")]),
        2.0,
        "nothing else Kafka was refused"
    );
    // Every produce (both listeners) is one latency observation, every fetch too.
    let all = |api| requests("native", api) + requests("kafka", api);
    assert_eq!(
        s.sum("rill_produce_duration_seconds_count", &[shard0]),
        all("Produce")
    );
    assert_eq!(
        s.sum(
            "rill_produce_duration_seconds_bucket",
            &[shard0, ("le", "+Inf")]
        ),
        all("Produce")
    );
    assert!(s.sum("rill_produce_duration_seconds_sum", &[shard0]) > 0.0);
    assert_eq!(
        s.sum("rill_fetch_duration_seconds_count", &[shard0]),
        all("Fetch")
    );

    // Bytes in: exactly what the log holds (one segment, nothing deleted), by its own count.
    let mut c = b.client();
    let stored = c.describe_topic("m").unwrap().partitions[0].size_bytes as f64;
    let m0 = [shard0, ("topic", "m"), ("partition", "0")];
    let bytes_in = s.sum("rill_partition_bytes_in_total", &m0);
    assert!(
        stored > (total * 11) as f64,
        "{stored} bytes for {total} records"
    );
    assert_eq!(bytes_in, stored);
    // Everything was fetched once at least (a fetch cut inside a batch re-reads it).
    assert!(s.sum("rill_partition_bytes_out_total", &m0) >= bytes_in);
    assert_eq!(s.sum("rill_partition_high_watermark", &m0), total as f64);
    assert!(!s.has(
        "rill_partition_bytes_in_total",
        &[("topic", "m"), ("partition", "7")]
    ));
    // This shard's only writes were those appends (no group committed offsets): its
    // group-commit rounds wrote exactly those bytes, each write O_DSYNC (--fsync always), so
    // no round called fdatasync.
    assert_eq!(
        s.sum("rill_group_commit_round_bytes_sum", &[shard0]),
        bytes_in
    );
    let rounds = s.sum("rill_group_commit_round_bytes_count", &[shard0]);
    assert!(rounds >= 1.0);
    assert_eq!(
        s.sum("rill_group_commit_round_partitions_count", &[shard0]),
        rounds
    );
    assert_eq!(
        s.sum("rill_fdatasync_duration_seconds_count", &[shard0]),
        0.0
    );
    // Every round wrote, and its writes were timed once.
    assert_eq!(
        s.sum("rill_group_commit_write_duration_seconds_count", &[shard0]),
        rounds
    );
    assert!(s.sum("rill_group_commit_write_duration_seconds_sum", &[shard0]) > 0.0);
    // Read-ahead is per shard, reported even when idle.
    assert!(s.has("rill_read_ahead_started_total", &[shard0]));
    assert!(s.has("rill_read_ahead_bytes", &[shard0]));
    // The consumer read the tail it had just written.
    assert!(s.sum("rill_tail_cache_hits_total", &[shard0]) >= 1.0);
    assert!(s.has("rill_tail_cache_misses_total", &[shard0]));
    // The embedded single voter leads.
    assert_eq!(s.sum("rill_controller_leader", &[]), 1.0);
    assert!(s.sum("rill_controller_term", &[]) >= 1.0);
    let committed = s.sum("rill_controller_committed_index", &[]);
    let applied = s.sum("rill_controller_applied_index", &[]);
    assert!(
        applied >= 1.0 && applied <= committed,
        "{applied} / {committed}"
    );

    // Closed connections leave the gauges.
    drop((native, kafka, c));
    wait_for("the connection gauges to fall to 0", || {
        let s = Scrape::get(&addr);
        (s.sum("rill_connections", &[shard0]) == 0.0).then_some(())
    });
}

#[test]
fn consumer_group_lag_is_the_high_watermark_minus_the_commit() {
    let (b, addr) = broker_with_metrics();
    b.client().create_topic("lag", 1, 1, Vec::new()).unwrap();
    rill_testkit::produce_values(&b, "lag", 0, (0..50).map(|i| i.to_string()));
    let out = b.cli(
        &[
            "group",
            "reset-offsets",
            "g",
            "--topic",
            "lag",
            "--to",
            "20",
        ],
        None,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let s = Scrape::get(&addr);
    assert_eq!(
        s.sum(
            "rill_consumer_group_lag",
            &[("group", "g"), ("topic", "lag"), ("partition", "0")]
        ),
        30.0
    );
    assert_eq!(s.sum("rill_consumer_group_lag_omitted", &[]), 0.0);
}

#[test]
fn hostile_input_gets_an_error_and_the_endpoint_keeps_serving() {
    let (_b, addr) = broker_with_metrics();
    // A 1 MiB request line: refused once the head passes its bound (or the connection is
    // reset while the rest is still being sent: either way no answer is a scrape).
    let mut big = b"GET /".to_vec();
    big.resize(1 << 20, b'a');
    big.extend_from_slice(b" HTTP/1.1\r\n\r\n");
    match http(&addr, &big) {
        Ok((status, _)) => assert_eq!(status, 431),
        Err(e) => assert!(
            matches!(
                e.kind(),
                std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::BrokenPipe
            ),
            "{e}"
        ),
    }
    for (request, status) in [
        (&b"\x00\x01\x02garbage\xff\r\n\r\n"[..], 400),
        (b"GET / HTTP/1.1\r\n\r\n", 404),
        (b"POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n", 405),
        (b"GET /metrics SPDY/3\r\n\r\n", 400),
    ] {
        let (got, _) = http(&addr, request).unwrap();
        assert_eq!(got, status, "{:?}", String::from_utf8_lossy(request));
    }
    // A client that connects and sends nothing is answered (408) and closed within the
    // endpoint's read timeout (5 s), not held forever; meanwhile others are served.
    let started = Instant::now();
    let mut silent = TcpStream::connect(&addr).unwrap();
    silent.set_read_timeout(Some(DEADLINE)).unwrap();
    assert!(try_get(&addr, "/metrics")
        .unwrap()
        .contains("rill_shard_up"));
    let mut answer = String::new();
    silent.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 408 "), "{answer:?}");
    assert!(started.elapsed() < DEADLINE);
    let body = try_get(&addr, "/metrics").expect("still serving");
    assert!(body.contains("rill_controller_leader 1\n"), "{body}");
}

#[test]
fn off_by_default_and_set_by_environment_too() {
    let b = TestBroker::start(1, &[]);
    assert!(
        !b.log_text().contains("Prometheus metrics on"),
        "no metrics endpoint by default: {}",
        b.log_text()
    );
    drop(b);
    // RILL_* fallbacks (and so `--config` keys) work as for every flag.
    let addr = format!("127.0.0.1:{}", free_ports(1));
    let b = TestBroker::start_with_env(1, &[], &[("RILL_METRICS_LISTEN", &addr)]);
    assert!(b
        .log_text()
        .contains(&format!("Prometheus metrics on http://{addr}/metrics")));
    let s = wait_for("the metrics endpoint", || try_get(&addr, "/metrics").ok());
    assert!(s.contains("rill_shard_up{shard=\"0\"} 1\n"), "{s}");
}

/// Debian's `prometheus`, if installed.
fn prometheus_bin() -> Option<std::path::PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join("prometheus"))
        .find(|p| p.is_file())
}

/// A Prometheus process, killed (by its pid) and its data dir removed when dropped.
struct Prometheus {
    child: Child,
    addr: String,
    _dir: tempfile::TempDir,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Prometheus {
    /// Scrapes `target` every second; its TSDB in a temp dir, its API on a free loopback port.
    fn start(bin: &std::path::Path, target: &str) -> Prometheus {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n\
                 scrape_configs:\n  - job_name: rill\n    static_configs:\n      - targets: ['{target}']\n"
            ),
        )
        .unwrap();
        let addr = format!("127.0.0.1:{}", free_ports(1));
        let log = std::fs::File::create(dir.path().join("prometheus.log")).unwrap();
        let child = Command::new(bin)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address={addr}"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start prometheus");
        Prometheus {
            child,
            addr,
            _dir: dir,
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self._dir.path().join("prometheus.log")).unwrap_or_default()
    }

    /// An instant query's single value, if it has exactly one result.
    fn query(&self, promql: &str) -> Option<f64> {
        let encoded: String = promql
            .bytes()
            .map(|c| match c {
                b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'_' => (c as char).to_string(),
                _ => format!("%{c:02X}"),
            })
            .collect();
        let body = try_get(&self.addr, &format!("/api/v1/query?query={encoded}")).ok()?;
        let v: serde_json::Value = serde_json::from_str(&body).ok()?;
        let result = v["data"]["result"].as_array()?;
        if result.len() != 1 {
            return None;
        }
        result[0]["value"][1].as_str()?.parse().ok()
    }
}

#[test]
fn a_real_prometheus_scrapes_the_broker() {
    let Some(bin) = prometheus_bin() else {
        eprintln!(
            "skipped: no `prometheus` on PATH (Debian package `prometheus`; .ci/run installs it)"
        );
        return;
    };
    let (b, addr) = broker_with_metrics();
    b.client().create_topic("prom", 1, 1, Vec::new()).unwrap();
    rill_testkit::produce_values(&b, "prom", 0, (0..40).map(|i| i.to_string()));
    let p = Prometheus::start(&bin, &addr);
    // `up` is 1 only once a scrape was fetched and parsed whole.
    let start = Instant::now();
    while p.query("up{job=\"rill\"}") != Some(1.0) {
        assert!(
            start.elapsed() < DEADLINE,
            "prometheus never scraped the broker: {}",
            p.log()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // Each value as of the latest scrape (a scrape that timed out on a loaded machine makes
    // the series stale until the next: wait for it).
    let value = |q: &str, ok: &dyn Fn(f64) -> bool| {
        let start = Instant::now();
        loop {
            match p.query(q) {
                Some(v) if ok(v) => return v,
                other => assert!(start.elapsed() < DEADLINE, "{q}: {other:?}: {}", p.log()),
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    };
    value(
        "rill_partition_high_watermark{job=\"rill\",topic=\"prom\",partition=\"0\"}",
        &|v| v == 40.0,
    );
    value("rill_controller_leader{job=\"rill\"}", &|v| v == 1.0);
    value(
        "sum(rill_produce_duration_seconds_count{job=\"rill\"})",
        &|n| n >= 1.0,
    );
    // Histograms are usable as histograms: a p99 inside the buckets.
    value(
        "histogram_quantile(0.99, sum by (le) (rill_produce_duration_seconds_bucket{job=\"rill\"}))",
        &|q| q > 0.0 && q <= 30.0,
    );
}
