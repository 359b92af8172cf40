//! `rill-bench loopback`: the machine's floor for an acknowledged request, no broker. Every
//! request is answered (and, with `--sync-dir`, written durably first), at the paced rate.

// No broker here: common's broker half goes unused in this binary.
#[allow(dead_code)]
mod common;

use common::{bench, bench_ok, percentiles, percentiles_of};

fn loopback(dir: &std::path::Path, name: &str, extra: &[&str]) -> serde_json::Value {
    let mut args = vec![
        "loopback",
        "--rate",
        "2000",
        "--messages",
        "1000",
        "--connections",
        "2",
        "--warmup-secs",
        "0",
    ];
    args.extend_from_slice(extra);
    bench_ok(dir, name, &args)
}

/// Each request is written before its answer, in either durability mode; the latency from
/// the intended send time is never below the one from the send.
#[test]
fn every_request_is_written_durably_before_its_answer() {
    let dir = tempfile::tempdir().unwrap();
    let files = tempfile::tempdir().unwrap();
    let sync_dir = files.path().to_str().unwrap().to_string();
    for mode in ["dsync", "fdatasync"] {
        let v = loopback(
            dir.path(),
            mode,
            &[
                "--sync-dir",
                &sync_dir,
                "--sync-mode",
                mode,
                "--request-bytes",
                "5000",
            ],
        );
        assert_eq!(v["workload"], "loopback");
        assert_eq!(v["messages"], 1000);
        assert_eq!(v["bytes"], 1000 * 5000);
        assert_eq!(v["settings"]["sync"], mode);
        assert_eq!(v["settings"]["answers"], 1000, "{mode}");
        assert_eq!(v["settings"]["durable_writes"], 1000, "{mode}");
        // Paced at 2,000 a second: 1,000 requests take half a second at least.
        assert!(v["seconds"].as_f64().unwrap() >= 0.49, "{v}");
        let corrected = percentiles(&v);
        let from_send = percentiles_of(&v, "latency_from_send_us");
        assert!(from_send[0] >= 1.0, "a durable round trip takes time");
        for (s, c) in from_send.iter().zip(&corrected) {
            assert!(
                s <= c,
                "from send {from_send:?} above intended {corrected:?}"
            );
        }
        // The servers' files went with the run.
        assert_eq!(
            std::fs::read_dir(files.path()).unwrap().count(),
            0,
            "{mode}"
        );
    }
}

#[test]
fn without_a_sync_dir_requests_are_answered_and_nothing_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let v = loopback(dir.path(), "plain", &[]);
    assert_eq!(v["settings"]["answers"], 1000);
    assert_eq!(v["settings"]["durable_writes"], 0);
    assert!(v["settings"]["sync"].is_null());
}

#[test]
fn impossible_settings_are_refused_with_a_reason() {
    let dir = tempfile::tempdir().unwrap();
    for (flag, value) in [
        ("--rate", "0"),
        ("--connections", "0"),
        ("--request-bytes", "0"),
    ] {
        let (out, v) = bench(dir.path(), "bad", &["loopback", flag, value]);
        assert!(!out.status.success() && v.is_none(), "{flag} {value}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(flag), "{flag}: {err}");
    }
    let (out, _) = bench(
        dir.path(),
        "missing",
        &["loopback", "--sync-dir", "/nonexistent/rill-bench"],
    );
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--sync-dir"));
}
