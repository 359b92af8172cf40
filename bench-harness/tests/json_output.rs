//! `rill-bench produce --messages 100000 --json out.json` against a real broker writes the
//! documented shape with values that agree with each other.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

struct Broker(Child);

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The `rill` binary next to `rill-bench` (cargo builds both for `cargo test --workspace`).
fn rill_binary() -> PathBuf {
    let bench = PathBuf::from(env!("CARGO_BIN_EXE_rill-bench"));
    let rill = bench.with_file_name("rill");
    assert!(
        rill.exists(),
        "{} is missing: run `cargo test --workspace` (or `cargo build --bin rill` first)",
        rill.display()
    );
    rill
}

fn free_port_pair() -> u16 {
    loop {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let p = l.local_addr().unwrap().port();
        if p < 65000 && TcpListener::bind(("127.0.0.1", p + 1)).is_ok() {
            return p;
        }
    }
}

#[test]
fn produce_writes_the_documented_json_shape() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port_pair();
    let bootstrap = format!("127.0.0.1:{port}");
    let _broker = Broker(
        Command::new(rill_binary())
            .args([
                "broker",
                "--shards",
                "2",
                "--kafka-listen",
                "off",
                "--fsync",
                "never",
                "--listen",
                &bootstrap,
            ])
            .arg("--data-dir")
            .arg(dir.path().join("data"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let start = Instant::now();
    while std::net::TcpStream::connect(&bootstrap).is_err()
        || std::net::TcpStream::connect(("127.0.0.1", port + 1)).is_err()
    {
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "broker did not start"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = dir.path().join("out.json");
    let status = Command::new(env!("CARGO_BIN_EXE_rill-bench"))
        .args([
            "produce",
            "--messages",
            "100000",
            "-b",
            &bootstrap,
            "--message-bytes",
            "200",
        ])
        .arg("--json")
        .arg(&out)
        .status()
        .unwrap();
    assert!(status.success());
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    assert_eq!(v["workload"], "produce");
    assert_eq!(v["messages"], 100_000);
    assert_eq!(v["bytes"], 100_000 * 200);
    let seconds = v["seconds"].as_f64().unwrap();
    assert!(seconds > 0.0);
    let rate = v["msgs_per_sec"].as_f64().unwrap();
    assert!((rate - 100_000.0 / seconds).abs() / rate < 1e-6);
    let mb = v["mb_per_sec"].as_f64().unwrap();
    assert!((mb - 100_000.0 * 200.0 / seconds / 1e6).abs() / mb < 1e-6);
    let l = &v["latency_us"];
    let q: Vec<f64> = ["p50", "p99", "p999", "p9999", "max"]
        .iter()
        .map(|k| {
            l[k].as_f64()
                .unwrap_or_else(|| panic!("latency_us.{k} missing"))
        })
        .collect();
    assert!(q[0] >= 1.0, "p50 must be a real latency");
    assert!(
        q.windows(2).all(|w| w[0] <= w[1]),
        "percentiles must not decrease: {q:?}"
    );
}
