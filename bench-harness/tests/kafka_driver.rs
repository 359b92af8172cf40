//! `rill-bench --driver kafka` (librdkafka) against rill's Kafka listener: produce (creating
//! the topic through CreateTopics), consume and e2e write the same JSON as the native driver,
//! with the counts they should have, and what librdkafka produced reads back through the
//! native protocol.

mod common;

use common::{bench_ok, free_metrics_addr, percentiles, produce_requests_served, Broker};

const MESSAGES: u64 = 20_000;
const BYTES: u64 = 200;

fn assert_counts(v: &serde_json::Value, workload: &str, messages: u64) {
    assert_eq!(v["workload"], workload);
    assert_eq!(v["messages"], messages, "{v}");
    assert_eq!(v["bytes"], messages * BYTES);
    assert!(v["seconds"].as_f64().unwrap() > 0.0);
    assert!(v["msgs_per_sec"].as_f64().unwrap() > 0.0);
    assert!(v["mb_per_sec"].as_f64().unwrap() > 0.0);
}

#[test]
fn kafka_driver_produces_consumes_and_measures_end_to_end_through_the_kafka_listener() {
    let broker = Broker::start(true);
    let kafka = broker.kafka_bootstrap.clone().unwrap();
    let dir = broker.dir.path();
    let n = MESSAGES.to_string();
    let size = BYTES.to_string();
    let common = ["--topic", "kt", "--message-bytes", &size];

    let kafka_args = |workload: &'static str, extra: &[&'static str]| {
        let mut args = vec![workload, "--driver", "kafka", "-b", &kafka];
        args.extend_from_slice(&common);
        args.extend_from_slice(extra);
        args
    };
    let mut args = kafka_args("produce", &["--acks", "all"]);
    args.extend(["--messages", &n]);
    let produced = bench_ok(dir, "produce", &args);
    assert_counts(&produced, "produce", MESSAGES);
    assert_eq!(produced["settings"]["driver"], "kafka");
    assert!(produced["settings"]["client"]
        .as_str()
        .unwrap()
        .starts_with("librdkafka "));
    assert!(
        percentiles(&produced)[0] >= 1.0,
        "p50 must be a real latency"
    );
    // librdkafka's requests are not seen one by one: no per-request figures.
    assert!(produced.get("request_latency_us").is_none());
    assert!(produced.get("requests").is_none());

    let mut args = kafka_args("consume", &[]);
    args.extend(["--messages", &n]);
    let consumed = bench_ok(dir, "consume", &args);
    assert_counts(&consumed, "consume", MESSAGES);

    // The same records through the native protocol.
    let native = bench_ok(
        dir,
        "native-consume",
        &[
            "consume",
            "-b",
            &broker.bootstrap,
            "--topic",
            "kt",
            "--messages",
            &n,
        ],
    );
    assert_counts(&native, "consume", MESSAGES);

    // Open loop: every message arrives, with a latency.
    let mut args = kafka_args("e2e", &["--rate", "2000", "--linger-ms", "0"]);
    args.extend(["--messages", "2000"]);
    let e2e = bench_ok(dir, "e2e", &args);
    assert_counts(&e2e, "e2e", 2000);
    assert!(percentiles(&e2e)[0] >= 1.0, "p50 must be a real latency");
}

/// A topic that exists keeps its partition count (no CreateTopics): consume reads all three
/// partitions of a topic rill created, although `--partitions` says 2.
#[test]
fn kafka_driver_uses_an_existing_topic_as_it_is() {
    let broker = Broker::start(true);
    let kafka = broker.kafka_bootstrap.clone().unwrap();
    let dir = broker.dir.path();
    broker.create_topic("three", 3);
    let native = bench_ok(
        dir,
        "native-produce",
        &[
            "produce",
            "-b",
            &broker.bootstrap,
            "--topic",
            "three",
            "--keyed",
            "--messages",
            "3000",
            "--message-bytes",
            "200",
        ],
    );
    assert_counts(&native, "produce", 3000);
    let consumed = bench_ok(
        dir,
        "consume",
        &[
            "consume",
            "--driver",
            "kafka",
            "-b",
            &kafka,
            "--topic",
            "three",
            "--messages",
            "3000",
            "--message-bytes",
            "200",
        ],
    );
    assert_counts(&consumed, "consume", 3000);
}

/// With `--rate` and `--burst N` librdkafka too sends each burst as one produce request to the
/// producer's own partition: rill-bench flushes at the end of each burst, so a linger far
/// longer than the run neither holds a burst back nor merges two (librdkafka wants its
/// delivery timeout, 120 s here, above the linger).
#[test]
fn kafka_driver_sends_a_paced_burst_as_one_produce_request() {
    let metrics = free_metrics_addr();
    let broker = Broker::start_with(true, &["--metrics-listen", &metrics]);
    let kafka = broker.kafka_bootstrap.clone().unwrap();
    let size = BYTES.to_string();
    let v = bench_ok(
        broker.dir.path(),
        "burst",
        &[
            "produce",
            "--driver",
            "kafka",
            "-b",
            &kafka,
            "--topic",
            "kb",
            "--message-bytes",
            &size,
            "--messages",
            "1000",
            "--rate",
            "5000",
            "--burst",
            "50",
            "--linger-ms",
            "60000",
            "--producers",
            "2",
            "--partitions",
            "2",
        ],
    );
    assert_counts(&v, "produce", 1000);
    assert_eq!(produce_requests_served(&metrics, "kafka"), Some(1000 / 50));
}
