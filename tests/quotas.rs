//! Client quotas (issue 18): `rill quota set|list`; a Kafka producer over its produce byte
//! rate is throttled to within 10% of the quota over a 10 s window (after its first burst)
//! and keeps its connection; a native producer under a client-id quota is paced too; bad
//! quota input is refused with one line.

use std::process::Command;
use std::time::{Duration, Instant};

use rill::client::{ClientConfig, Producer, ProducerConfig, ProducerRecord};
use rill_testkit::TestBroker;
use serde_json::Value;

fn cli_ok(b: &TestBroker, args: &[&str]) -> String {
    let out = b.cli(args, None);
    assert!(
        out.status.success(),
        "rill {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).to_string()
}

#[test]
fn a_kafka_producer_over_its_quota_is_throttled_to_it_and_keeps_its_connection() {
    let b = TestBroker::start_kafka(1, &[]);
    b.client().create_topic("metered", 1, 1, vec![]).unwrap();
    const QUOTA: f64 = 400_000.0;
    let out = cli_ok(
        &b,
        &[
            "quota",
            "set",
            "--client-id",
            "hog",
            "--producer-byte-rate",
            "400000",
        ],
    );
    assert_eq!(out.trim(), "quotas of client-id=hog set");
    let list = cli_ok(&b, &["quota", "list"]);
    assert_eq!(list.trim(), "client-id=hog\tproducer_byte_rate=400000");

    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/kafka/quota_produce.py");
    // 14 s of producing 16 KiB values as fast as allowed; measured over the last 10 s (the
    // first seconds spend the initial burst).
    let out = Command::new("python3")
        .args([
            script,
            &b.kafka_bootstrap(),
            "metered",
            "hog",
            "14",
            "4",
            "16384",
        ])
        .output()
        .expect("python3 (run .ci/run, or pip install confluent-kafka)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let rate = v["window_bytes"].as_f64().unwrap() / v["window_s"].as_f64().unwrap();
    eprintln!("produce quota {QUOTA} B/s: {rate:.0} B/s of values over 10 s ({v})");
    // Record batches weigh a little more than their values (headers, varints): well under 1%
    // at 16 KiB values.
    assert!(
        (rate - QUOTA).abs() <= QUOTA * 0.10,
        "{rate:.0} B/s of values over 10 s against a quota of {QUOTA} B/s: {v}"
    );
    assert_eq!(v["failed"], 0, "{v}");
    assert_eq!(v["connects"], 1, "one connection to the broker, kept: {v}");
    assert_eq!(v["disconnects"], 0, "{v}");
    assert_eq!(v["throttled"], true, "the responses told the client: {v}");
}

#[test]
fn a_native_producer_is_paced_by_its_client_id_quota_and_bad_quotas_are_refused() {
    let b = TestBroker::start(1, &[]);
    b.client().create_topic("paced", 1, 1, vec![]).unwrap();
    cli_ok(
        &b,
        &[
            "quota",
            "set",
            "--client-id-default",
            "--producer-byte-rate",
            "200000",
        ],
    );
    let mut cfg = ClientConfig::new(b.bootstrap());
    cfg.client_id = "anyone".into();
    let producer = Producer::new(cfg, ProducerConfig::default()).unwrap();
    let value = vec![7u8; 8192];
    // 1.2 MB at 200 KB/s with a 200 KB burst: at least 5 s.
    let start = Instant::now();
    for _ in 0..150 {
        producer.send(ProducerRecord::new("paced", &value)).unwrap();
    }
    producer.flush().unwrap();
    let took = start.elapsed();
    assert!(
        took >= Duration::from_secs(4),
        "1.2 MB under a 200 KB/s quota took only {took:?}"
    );
    // Removing the quota lifts it.
    cli_ok(
        &b,
        &[
            "quota",
            "set",
            "--client-id-default",
            "--remove",
            "producer_byte_rate",
        ],
    );
    assert_eq!(cli_ok(&b, &["quota", "list"]).trim(), "");

    for (args, why) in [
        (
            vec!["quota", "set", "--producer-byte-rate", "1"],
            "name --user",
        ),
        (
            vec!["quota", "set", "--user", "u", "--producer-byte-rate=-5"],
            "must be a positive finite number",
        ),
        (
            vec!["quota", "set", "--user", "u", "--remove", "bytes"],
            "unknown quota key 'bytes'",
        ),
        (vec!["quota", "set", "--user", "u"], "or --remove a key"),
    ] {
        let out = b.cli(&args, None);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} succeeded");
        assert!(err.contains(why), "{args:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
    }
}
