//! `rill-bench produce --messages 100000 --json out.json` against a real broker writes the
//! documented shape with values that agree with each other.

mod common;

use common::{bench_ok, percentiles, Broker};

#[test]
fn produce_writes_the_documented_json_shape() {
    let broker = Broker::start(false);
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
}
