//! `rill-bench produce --messages 100000 --json out.json` against a real broker writes the
//! documented shape with values that agree with each other.

mod common;

use common::{
    bench_ok, free_metrics_addr, percentiles, percentiles_of, produce_requests_served, Broker,
};

#[test]
fn produce_writes_the_documented_json_shape() {
    let broker = Broker::start(false);
    let started = std::time::Instant::now();
    let v = bench_ok(
        broker.dir.path(),
        "out",
        &[
            "produce",
            "--messages",
            "100000",
            "-b",
            &broker.bootstrap,
            "--message-bytes",
            "200",
        ],
    );
    assert_eq!(v["workload"], "produce");
    assert_eq!(v["messages"], 100_000);
    assert_eq!(v["bytes"], 100_000 * 200);
    let seconds = v["seconds"].as_f64().unwrap();
    assert!(seconds > 0.0);
    let rate = v["msgs_per_sec"].as_f64().unwrap();
    assert!((rate - 100_000.0 / seconds).abs() / rate < 1e-6);
    let mb = v["mb_per_sec"].as_f64().unwrap();
    assert!((mb - 100_000.0 * 200.0 / seconds / 1e6).abs() / mb < 1e-6);
    assert_eq!(v["settings"]["driver"], "native");
    let q = percentiles(&v);
    assert!(q[0] >= 1.0, "p50 must be a real latency");
    // The client's own CPU, in seconds: some was spent (20 MB built and sent), and no more
    // than its threads could have used in the time the command ran.
    let wall = started.elapsed().as_secs_f64();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    let user = v["cpu_seconds"]["user"].as_f64().expect("cpu_seconds.user");
    let system = v["cpu_seconds"]["system"]
        .as_f64()
        .expect("cpu_seconds.system");
    assert!(user > 0.0 && system >= 0.0, "cpu {user} + {system} s");
    assert!(
        user + system <= wall * cores + 0.05,
        "cpu {user} + {system} s in {wall:.2} s on {cores} cores"
    );
}

#[test]
fn produce_times_every_produce_request_the_broker_answered() {
    let metrics = free_metrics_addr();
    let broker = Broker::start_with(false, &["--metrics-listen", &metrics]);
    // Small batches and a short linger: hundreds of requests over both shards.
    let v = bench_ok(
        broker.dir.path(),
        "requests",
        &[
            "produce",
            "--messages",
            "50000",
            "-b",
            &broker.bootstrap,
            "--message-bytes",
            "200",
            "--batch-bytes",
            "16384",
            "--linger-ms",
            "1",
            "--producers",
            "2",
        ],
    );
    let requests = v["requests"].as_u64().expect("requests in the report");
    // 10 MB in batches of at most 16 KiB (several may share a request, at most 5 per
    // partition with idempotence): far more than a handful of requests.
    assert!(requests >= 50_000 * 200 / (5 * 2 * 16384), "{requests}");
    // Only rill-bench produced: the broker served exactly the requests it timed.
    let served = produce_requests_served(&metrics, "native").expect("metrics scrape");
    assert_eq!(
        requests, served,
        "requests timed vs Produce requests served"
    );
    let q = percentiles_of(&v, "request_latency_us");
    assert!(q[0] >= 1.0, "a round trip takes time: {q:?}");
    // Each request was written and answered within the run.
    let wall_us = v["seconds"].as_f64().unwrap() * 1e6;
    assert!(q[4] <= wall_us, "max {} us > the run's {wall_us} us", q[4]);
    assert_eq!(
        v["settings"]["request_latency"],
        "per produce request, from its write to the socket to its response"
    );
}

/// e2e reports its latency two ways: from each message's intended send time (corrected for
/// coordinated omission) and from its `send` call. A message is never sent before it was
/// intended, so every percentile of the second is at most the first's.
#[test]
fn e2e_reports_latency_from_the_intended_time_and_from_the_send_call() {
    let broker = Broker::start(false);
    let v = bench_ok(
        broker.dir.path(),
        "e2e",
        &[
            "e2e",
            "-b",
            &broker.bootstrap,
            "--rate",
            "5000",
            "--messages",
            "5000",
            "--linger-ms",
            "0",
            "--message-bytes",
            "100",
        ],
    );
    assert_eq!(v["workload"], "e2e");
    assert_eq!(v["messages"], 5000);
    let corrected = percentiles(&v);
    let from_send = percentiles_of(&v, "latency_from_send_us");
    assert!(from_send[0] >= 1.0, "p50 must be a real latency");
    for (s, c) in from_send.iter().zip(&corrected) {
        assert!(
            s <= c,
            "from send {from_send:?} above intended {corrected:?}"
        );
    }
}

/// With `--rate` and `--burst N`, each burst goes out as one produce request, answered before
/// the next burst (Iggy's bench shape): rill-bench flushes at the end of each burst, so even a
/// linger far longer than the run does not hold a burst back or merge two, and sends it to the
/// producer's own partition (the sticky partitioner, 70 of these records a partition at
/// 16 KiB batches, would split every other burst of 50).
#[test]
fn a_paced_burst_is_one_produce_request() {
    let metrics = free_metrics_addr();
    let broker = Broker::start_with(false, &["--metrics-listen", &metrics]);
    let v = bench_ok(
        broker.dir.path(),
        "burst",
        &[
            "produce",
            "-b",
            &broker.bootstrap,
            "--messages",
            "1000",
            "--message-bytes",
            "200",
            "--rate",
            "5000",
            "--burst",
            "50",
            "--linger-ms",
            "600000",
            "--batch-bytes",
            "16384",
            "--producers",
            "2",
            "--partitions",
            "2",
        ],
    );
    assert_eq!(v["messages"], 1000);
    assert_eq!(v["requests"], 1000 / 50, "one request per burst: {v}");
    assert_eq!(produce_requests_served(&metrics, "native"), Some(1000 / 50));
}
