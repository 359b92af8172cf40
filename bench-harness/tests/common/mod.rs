//! A real `rill broker` process for rill-bench's tests, and rill-bench runs with `--json`.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// A broker on free loopback ports, SIGKILLed on drop.
pub struct Broker {
    child: Child,
    pub dir: tempfile::TempDir,
    /// Native protocol, shard i on port + i.
    pub bootstrap: String,
    /// Kafka protocol, shard i on port + i, when started with it.
    #[allow(
        dead_code,
        reason = "tests/kafka_driver.rs uses it; each test binary compiles this module whole"
    )]
    pub kafka_bootstrap: Option<String>,
}

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The `rill` binary next to `rill-bench` (cargo builds both for `cargo test --workspace`).
pub fn rill_binary() -> PathBuf {
    let bench = PathBuf::from(env!("CARGO_BIN_EXE_rill-bench"));
    let rill = bench.with_file_name("rill");
    assert!(
        rill.exists(),
        "{} is missing: run `cargo test --workspace` (or `cargo build --bin rill` first)",
        rill.display()
    );
    rill
}

fn wait_listening(port: u16, deadline: Instant) {
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err()
        || std::net::TcpStream::connect(("127.0.0.1", port + 1)).is_err()
    {
        assert!(Instant::now() < deadline, "broker did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
}

impl Broker {
    /// Two shards, `--fsync never`, with or without the Kafka listener.
    pub fn start(kafka: bool) -> Broker {
        Self::start_with(kafka, &[])
    }

    /// As [`Broker::start`], with more broker flags.
    pub fn start_with(kafka: bool, extra: &[&str]) -> Broker {
        let dir = tempfile::tempdir().unwrap();
        // testkit's ports: below the ephemeral range, and held by this process only.
        let port = rill_testkit::free_ports(2);
        let kafka_port = kafka.then(|| rill_testkit::free_ports(2));
        let bootstrap = format!("127.0.0.1:{port}");
        let kafka_listen = kafka_port
            .map(|p| format!("127.0.0.1:{p}"))
            .unwrap_or_else(|| "off".into());
        let child = Command::new(rill_binary())
            .args(["broker", "--shards", "2", "--fsync", "never"])
            .args(["--listen", &bootstrap, "--kafka-listen", &kafka_listen])
            .arg("--data-dir")
            .arg(dir.path().join("data"))
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let b = Broker {
            child,
            dir,
            bootstrap,
            kafka_bootstrap: kafka_port.map(|p| format!("127.0.0.1:{p}")),
        };
        let deadline = Instant::now() + Duration::from_secs(120);
        wait_listening(port, deadline);
        if let Some(p) = kafka_port {
            wait_listening(p, deadline);
        }
        b
    }

    /// `rill topic create NAME --partitions N` against this broker.
    #[allow(
        dead_code,
        reason = "tests/kafka_driver.rs uses it; each test binary compiles this module whole"
    )]
    pub fn create_topic(&self, name: &str, partitions: u32) {
        let out = Command::new(rill_binary())
            .args(["topic", "create", name, "--partitions"])
            .arg(partitions.to_string())
            .args(["-b", &self.bootstrap])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "topic create failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// Runs rill-bench with `args` and `--json FILE`; its output and the parsed JSON (None when
/// it failed).
pub fn bench(dir: &Path, name: &str, args: &[&str]) -> (Output, Option<serde_json::Value>) {
    let json = dir.join(format!("{name}.json"));
    let out = Command::new(env!("CARGO_BIN_EXE_rill-bench"))
        .args(args)
        .arg("--json")
        .arg(&json)
        .output()
        .unwrap();
    let v = out
        .status
        .success()
        .then(|| serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap());
    (out, v)
}

/// Like `bench`, failing the test when rill-bench fails.
pub fn bench_ok(dir: &Path, name: &str, args: &[&str]) -> serde_json::Value {
    let (out, v) = bench(dir, name, args);
    v.unwrap_or_else(|| {
        panic!(
            "rill-bench {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// The latency percentiles of a report, checked present and non-decreasing.
pub fn percentiles(v: &serde_json::Value) -> Vec<f64> {
    percentiles_of(v, "latency_us")
}

/// The percentiles of the report's latency object `key`, checked present and non-decreasing.
pub fn percentiles_of(v: &serde_json::Value, key: &str) -> Vec<f64> {
    let l = &v[key];
    let q: Vec<f64> = ["p50", "p99", "p999", "p9999", "max"]
        .iter()
        .map(|k| l[k].as_f64().unwrap_or_else(|| panic!("{key}.{k} missing")))
        .collect();
    assert!(
        q.windows(2).all(|w| w[0] <= w[1]),
        "percentiles must not decrease: {q:?}"
    );
    q
}

/// A loopback address for a broker's `--metrics-listen`.
pub fn free_metrics_addr() -> String {
    format!("127.0.0.1:{}", rill_testkit::free_ports(1))
}

/// The broker's count of Produce requests on `listener` ("native" or "kafka"), over its
/// shards, from `--metrics-listen`.
pub fn produce_requests_served(metrics: &str, listener: &str) -> Option<u64> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(metrics).ok()?;
    s.write_all(format!("GET /metrics HTTP/1.0\r\nHost: {metrics}\r\n\r\n").as_bytes())
        .ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    let total = text
        .lines()
        .filter(|l| {
            l.starts_with("rill_requests_total{")
                && l.contains(&format!("listener=\"{listener}\""))
                && l.contains("api=\"Produce\"")
        })
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum::<f64>();
    Some(total as u64)
}
