//! The controller's metadata and the topic data beside it: a damaged or missing `raft.log`
//! stops the broker instead of costing every topic its data, and topic directories the
//! metadata does not know are set aside, never deleted at start.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use rill::client::StartFrom;
use rill_testkit::{consume_exactly, produce_values, values, TestBroker, DEADLINE};

/// Every file under `dir`, by path relative to it, with its bytes.
fn files_under(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<PathBuf, Vec<u8>>) {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(root, &p, out);
            } else {
                let rel = p.strip_prefix(root).unwrap().to_path_buf();
                out.insert(rel, std::fs::read(&p).unwrap());
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

/// Starts `rill broker` on `b`'s data dir and ports (while `b` is stopped) and waits for it to
/// exit by itself; a broker that starts instead is killed and fails the test.
fn start_refused(b: &TestBroker) -> (String, std::process::ExitStatus) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_rill"))
        .arg("broker")
        .arg("--data-dir")
        .arg(b.data_dir())
        .arg("--listen")
        .arg(b.bootstrap())
        .args(["--shards", &b.shards.to_string(), "--kafka-listen", "off"])
        .env("RUST_LOG", "off")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn rill broker");
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > DEADLINE {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the broker started instead of refusing");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let o = child.wait_with_output().unwrap();
    (String::from_utf8_lossy(&o.stderr).into_owned(), o.status)
}

fn assert_refused(b: &TestBroker, needles: &[&str]) {
    let (err, status) = start_refused(b);
    assert!(!status.success(), "exit {status}: {err}");
    assert_eq!(
        err.trim_end().lines().count(),
        1,
        "one line expected: {err:?}"
    );
    assert!(err.starts_with("rill: error: "), "{err:?}");
    for n in needles {
        assert!(err.contains(n), "{err:?} should name {n:?}");
    }
}

/// Record start offsets of a controller log (12-byte header, then `[len u32][crc u32][len]`).
fn record_offsets(log: &[u8]) -> Vec<usize> {
    let mut out = Vec::new();
    let mut pos = 12;
    while pos + 8 <= log.len() {
        out.push(pos);
        let len = u32::from_le_bytes(log[pos..pos + 4].try_into().unwrap()) as usize;
        pos += 8 + len;
    }
    assert_eq!(
        pos,
        log.len(),
        "a cleanly stopped broker leaves whole records"
    );
    out
}

#[test]
fn a_damaged_or_missing_raft_log_refuses_to_start_and_keeps_every_topic_byte() {
    let mut b = TestBroker::start(1, &[]);
    let topics = ["alpha", "beta", "gamma"];
    for t in topics {
        let o = b.cli(&["topic", "create", t, "--partitions", "2"], None);
        assert!(o.status.success(), "{o:?}");
        for p in 0..2 {
            produce_values(&b, t, p, (0..50).map(|i| format!("{t}-{p}-{i}")));
        }
    }
    let status = b.terminate();
    assert!(status.success(), "{}", b.log_text());

    let data = b.data_dir();
    let topics_dir = data.join("topics");
    let log_path = data.join("controller").join("raft.log");
    let before = files_under(&topics_dir);
    let dirs = std::fs::read_dir(&topics_dir).unwrap().count();
    assert_eq!(
        dirs,
        topics.len() + 1,
        "three topics and __consumer_offsets"
    );
    let good = std::fs::read(&log_path).unwrap();
    let offs = record_offsets(&good);
    assert!(offs.len() > 4, "{} records", offs.len());

    // One byte flipped in a record in the middle: corruption, not a torn tail.
    let mid = offs[offs.len() / 2];
    let mut bad = good.clone();
    bad[mid + 8 + 1] ^= 0x20;
    std::fs::write(&log_path, &bad).unwrap();
    assert_refused(&b, &["raft.log", &format!("at byte {mid}")]);
    assert_eq!(
        std::fs::read(&log_path).unwrap(),
        bad,
        "the log must not be cut"
    );
    assert_eq!(files_under(&topics_dir), before, "topic files changed");

    // The log gone: refused too, and nothing is created in its place.
    std::fs::remove_file(&log_path).unwrap();
    assert_refused(
        &b,
        &[
            "controller metadata is missing",
            &format!("{dirs} topic directories"),
        ],
    );
    assert!(!log_path.exists(), "a new log was created");
    assert_eq!(files_under(&topics_dir), before, "topic files changed");

    // Emptied (as if newly created) is the same.
    std::fs::write(&log_path, b"").unwrap();
    assert_refused(&b, &["controller metadata is missing"]);
    assert_eq!(files_under(&topics_dir), before, "topic files changed");

    // The intact log back: every topic and every record is there.
    std::fs::write(&log_path, &good).unwrap();
    b.start_again();
    for t in topics {
        let mut got = values(&consume_exactly(&b, t, StartFrom::Beginning, 100));
        got.sort();
        let mut want: Vec<String> = (0..2)
            .flat_map(|p| (0..50).map(move |i| format!("{t}-{p}-{i}")))
            .collect();
        want.sort();
        assert_eq!(got, want, "topic {t}");
    }
    // (The broker makes `stray/` at start; nothing was set aside into it.)
    let strays = std::fs::read_dir(data.join("stray")).map_or(0, |d| d.count());
    assert_eq!(strays, 0, "nothing is stray: {}", b.log_text());
    b.kill();
}

#[test]
fn an_unknown_topic_directory_is_set_aside_intact_and_removed_only_after_retention() {
    let mut b = TestBroker::start(1, &[]);
    let o = b.cli(&["topic", "create", "kept", "--partitions", "1"], None);
    assert!(o.status.success(), "{o:?}");
    produce_values(&b, "kept", 0, (0..20).map(|i| format!("kept-{i}")));
    assert!(b.terminate().success(), "{}", b.log_text());

    let data = b.data_dir();
    let topics_dir = data.join("topics");
    let kept_dir = std::fs::read_dir(&topics_dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("kept~")
        })
        .unwrap();
    // An unknown name, and a known name with an unknown id (a copy of kept's files).
    let ghost = topics_dir.join("ghost~999");
    std::fs::create_dir_all(ghost.join("0")).unwrap();
    std::fs::write(
        ghost.join("0").join("00000000000000000000.log"),
        b"ghost data",
    )
    .unwrap();
    let twin = topics_dir.join("kept~4242");
    std::fs::create_dir_all(&twin).unwrap();
    for (rel, bytes) in files_under(&kept_dir) {
        let to = twin.join(rel);
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::write(to, bytes).unwrap();
    }
    let ghost_files = files_under(&ghost);
    let twin_files = files_under(&twin);

    b.start_again();
    let log = b.log_text();
    assert!(!ghost.exists() && !twin.exists(), "not set aside: {log}");
    let stray = data.join("stray");
    let set_aside = |prefix: &str| -> PathBuf {
        std::fs::read_dir(&stray)
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .find(|p| {
                let n = p.file_name().unwrap().to_string_lossy().into_owned();
                n.starts_with(&format!("{prefix}.stray-"))
            })
            .unwrap_or_else(|| panic!("{prefix} not under {}: {log}", stray.display()))
    };
    assert_eq!(files_under(&set_aside("ghost~999")), ghost_files);
    assert_eq!(files_under(&set_aside("kept~4242")), twin_files);
    for name in ["ghost~999", "kept~4242"] {
        assert!(
            log.lines()
                .any(|l| l.contains("WARN") && l.contains(name) && l.contains("set aside")),
            "no WARN for {name}: {log}"
        );
    }
    assert!(!log.contains("removing files of deleted topic"), "{log}");
    // The known topic is untouched and serves.
    let got = values(&consume_exactly(&b, "kept", StartFrom::Beginning, 20));
    assert_eq!(
        got,
        (0..20).map(|i| format!("kept-{i}")).collect::<Vec<_>>()
    );

    // Past --stray-log-retention-ms (from RILL_*), the sweep removes them, and only them.
    assert!(b.terminate().success(), "{}", b.log_text());
    b.env = vec![("RILL_STRAY_LOG_RETENTION_MS".into(), "1500".into())];
    b.extra = vec!["--retention-check-interval-ms".into(), "200".into()];
    b.start_again();
    let start = Instant::now();
    while std::fs::read_dir(&stray).unwrap().count() > 0 {
        assert!(
            start.elapsed() < DEADLINE,
            "strays not removed: {}",
            b.log_text()
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert!(
        b.log_text().contains("removed stray topic directory"),
        "{}",
        b.log_text()
    );
    let got = values(&consume_exactly(&b, "kept", StartFrom::Beginning, 20));
    assert_eq!(got.len(), 20);
    b.kill();

    // A bad value is a one-line error.
    let o = rill_testkit::cli(
        "127.0.0.1:1",
        &["broker", "--stray-log-retention-ms", "-2"],
        None,
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert_eq!(err.trim_end().lines().count(), 1, "{err:?}");
    assert!(err.contains("--stray-log-retention-ms"), "{err:?}");
}
