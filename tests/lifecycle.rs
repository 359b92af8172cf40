//! The log's life cycle: retention by time and size, truncation that survives restarts,
//! adding partitions, topic settings, and bad input to all of them.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use rill::client::{
    ClientConfig, Consumer, ConsumerConfig, ProducerConfig, ProducerRecord, StartFrom,
};
use rill::protocol::ErrorCode;
use rill_testkit::{consume_exactly, producer, TestBroker, DEADLINE};

/// Produces `n` records of `size` bytes with the given timestamp to partition 0.
fn fill(b: &TestBroker, topic: &str, n: usize, size: usize, ts: i64, tag: &str) {
    let p = producer(b, 8 << 10);
    let reports: Vec<_> = (0..n)
        .map(|i| {
            let mut v = format!("{tag}-{i}-").into_bytes();
            v.resize(size, b'x');
            p.send(ProducerRecord::new(topic, &v).partition(0).timestamp(ts))
                .unwrap()
        })
        .collect();
    p.flush().unwrap();
    for r in reports {
        r.wait().unwrap();
    }
}

fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < DEADLINE, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn retention_by_time_deletes_old_segments_and_consumers_reset() {
    let b = TestBroker::start(1, &["--retention-check-interval-ms", "200"]);
    let mut admin = b.client();
    // Retention starts only once the segments are counted: with a 200 ms check interval it
    // would otherwise race the filling (and the count taken after it).
    let configs = vec![
        ("segment.bytes".to_string(), "65536".to_string()),
        ("retention.ms".to_string(), "-1".to_string()),
    ];
    admin.create_topic("aging", 1, 1, configs).unwrap();
    let now = rill::clock::now_ms();
    // Old records (two hours old) fill several segments, then fresh ones.
    fill(&b, "aging", 600, 1000, now - 2 * 3600 * 1000, "old");
    fill(&b, "aging", 200, 1000, now, "new");
    let before = admin.partition_state("aging", 0).unwrap();
    assert!(
        before.segments > 3,
        "expected several segments, got {}",
        before.segments
    );
    // A consumer positioned among the old records before retention runs...
    let mut c = Consumer::new(ClientConfig::new(b.bootstrap()), ConsumerConfig::default()).unwrap();
    c.assign("aging", None, StartFrom::Offset(10)).unwrap();
    admin
        .alter_topic_config("aging", vec![("retention.ms".into(), "3600000".into())])
        .unwrap();
    wait_until("retention to delete the old segments", || {
        let s = admin.partition_state("aging", 0).unwrap();
        s.log_start_offset > 0 && s.size_bytes < before.size_bytes
    });
    let after = admin.partition_state("aging", 0).unwrap();
    assert!(after.segments < before.segments);
    // Only old records went: every fresh record is still there.
    assert!(after.log_start_offset <= 600, "a fresh record was deleted");
    let got = consume_exactly(
        &b,
        "aging",
        StartFrom::Beginning,
        (800 - after.log_start_offset) as usize,
    );
    assert_eq!(got[0].offset, after.log_start_offset);
    let fresh: HashSet<_> = got
        .iter()
        .filter(|r| r.value.as_deref().unwrap_or_default().starts_with(b"new-"))
        .map(|r| r.offset)
        .collect();
    assert_eq!(fresh.len(), 200);
    // ...gets OFFSET_OUT_OF_RANGE on its next fetch and resets to the earliest offset.
    drop(c);
    let mut c = Consumer::new(ClientConfig::new(b.bootstrap()), ConsumerConfig::default()).unwrap();
    c.assign("aging", None, StartFrom::Offset(10)).unwrap();
    let mut first = None;
    wait_until("the consumer to reset", || {
        let r = c.poll(Duration::from_millis(200)).unwrap();
        first = r.iter().next().map(|r| r.offset());
        first.is_some()
    });
    assert_eq!(first, Some(after.log_start_offset));
    let mut strict = Consumer::new(
        ClientConfig::new(b.bootstrap()),
        ConsumerConfig {
            auto_offset_reset: rill::client::OffsetReset::Error,
            ..ConsumerConfig::default()
        },
    )
    .unwrap();
    strict.assign("aging", None, StartFrom::Offset(10)).unwrap();
    let err = loop {
        match strict.poll(Duration::from_millis(200)) {
            Err(e) => break e,
            Ok(r) => assert!(r.is_empty(), "records below the log start were served"),
        }
    };
    assert_eq!(err.code(), Some(ErrorCode::OffsetOutOfRange));
}

#[test]
fn retention_bytes_keeps_a_partition_under_the_limit_plus_one_segment() {
    let b = TestBroker::start(1, &["--retention-check-interval-ms", "200"]);
    let mut admin = b.client();
    admin
        .create_topic(
            "sized",
            1,
            1,
            vec![("segment.bytes".into(), "65536".into())],
        )
        .unwrap();
    fill(&b, "sized", 1000, 1000, rill::clock::now_ms(), "v");
    let full = admin.partition_state("sized", 0).unwrap();
    assert!(full.size_bytes > 500_000);
    // Turn the limit on later: settings apply to a running partition.
    admin
        .alter_topic_config("sized", vec![("retention.bytes".into(), "200000".into())])
        .unwrap();
    wait_until("size retention", || {
        admin.partition_state("sized", 0).unwrap().size_bytes <= 200_000 + 65_536 + 16_384
    });
    let s = admin.partition_state("sized", 0).unwrap();
    assert!(s.log_start_offset > 0);
    assert_eq!(
        s.log_end_offset, 1000,
        "retention never touches the end of the log"
    );
    let got = consume_exactly(
        &b,
        "sized",
        StartFrom::Beginning,
        (1000 - s.log_start_offset) as usize,
    );
    assert_eq!(got.last().unwrap().offset, 999);
}

#[test]
fn truncation_survives_a_restart_and_bad_truncations_change_nothing() {
    let mut b = TestBroker::start(2, &["--segment-bytes", "65536"]);
    let mut admin = b.client();
    admin.create_topic("cut", 2, 1, vec![]).unwrap();
    fill(&b, "cut", 500, 500, rill::clock::now_ms(), "r");
    assert_eq!(admin.truncate("cut", 0, 300).unwrap(), 300);
    // Past the log end, an unknown partition, an unknown topic: errors, no change.
    let e = admin.truncate("cut", 0, 501).unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::OffsetOutOfRange), "{e}");
    assert!(e.to_string().contains("past the log end"), "{e}");
    assert!(admin.truncate("cut", 9, 1).is_err());
    assert!(admin.truncate("nope", 0, 1).is_err());
    assert_eq!(
        admin.partition_state("cut", 0).unwrap().log_start_offset,
        300
    );
    // Truncating below the current start is a no-op, not a move back.
    assert_eq!(admin.truncate("cut", 0, 100).unwrap(), 300);
    b.restart();
    let mut admin = b.client();
    let s = admin.partition_state("cut", 0).unwrap();
    assert_eq!((s.log_start_offset, s.high_watermark), (300, 500));
    assert_eq!(admin.list_offset("cut", 0, -2).unwrap(), Some(300));
    let got = consume_exactly(&b, "cut", StartFrom::Beginning, 200);
    assert_eq!(got[0].offset, 300);
    assert_eq!(got[0].value.as_deref().unwrap_or_default()[..6], *b"r-300-");
    // The CLI names the problem in one line.
    let o = b.cli(
        &[
            "topic",
            "truncate",
            "cut",
            "--partition",
            "0",
            "--before",
            "9999",
        ],
        None,
    );
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.contains("past the log end"), "{err}");
}

#[test]
fn added_partitions_are_used_by_keyed_producers_and_consumers() {
    let b = TestBroker::start(2, &[]);
    let mut admin = b.client();
    admin.create_topic("grow", 2, 1, vec![]).unwrap();
    let p = rill::client::Producer::new(
        ClientConfig::new(b.bootstrap()),
        ProducerConfig {
            metadata_max_age: Duration::from_millis(100),
            linger: Duration::from_millis(1),
            ..ProducerConfig::default()
        },
    )
    .unwrap();
    let o = b.cli(&["topic", "add-partitions", "grow", "--count", "5"], None);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    wait_until("the producer to see 5 partitions", || {
        p.partitions_for("grow").unwrap() == 5
    });
    let mut used = HashSet::new();
    let reports: Vec<_> = (0..500)
        .map(|i| {
            let key = format!("key-{i}");
            p.send(ProducerRecord::new("grow", b"v").key(key.as_bytes()))
                .unwrap()
        })
        .collect();
    for r in reports {
        used.insert(r.wait().unwrap().partition);
    }
    assert_eq!(used, (0..5).collect::<HashSet<u32>>());
    let got = consume_exactly(&b, "grow", StartFrom::Beginning, 500);
    assert_eq!(
        got.iter()
            .map(|r| r.partition)
            .collect::<HashSet<_>>()
            .len(),
        5
    );
    // Shrinking, or a count past the limit, is refused.
    let e = admin.add_partitions("grow", 3).unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::InvalidPartitions));
}

#[test]
fn bad_topic_settings_are_refused_with_clear_errors() {
    let b = TestBroker::start(1, &[]);
    for (cfg, needle) in [
        ("retention.ms=-5", "retention.ms"),
        ("retention.ms=soon", "retention.ms"),
        ("segment.bytes=100", "segment.bytes"),
        ("retentoin.ms=1", "unknown topic config"),
    ] {
        let o = b.cli(
            &["topic", "create", "t", "--partitions", "1", "--config", cfg],
            None,
        );
        assert!(!o.status.success(), "{cfg} was accepted");
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
        assert!(
            err.contains("INVALID_CONFIG") && err.contains(needle),
            "{err}"
        );
    }
    assert!(b
        .cli(&["topic", "create", "t", "--partitions", "1"], None)
        .status
        .success());
    let o = b.cli(
        &[
            "topic",
            "alter-config",
            "t",
            "--config",
            "retention.bytes=-7",
        ],
        None,
    );
    assert!(!o.status.success());
    let o = b.cli(
        &[
            "topic",
            "alter-config",
            "missing",
            "--config",
            "retention.ms=5",
        ],
        None,
    );
    assert!(String::from_utf8_lossy(&o.stderr).contains("UNKNOWN_TOPIC_OR_PARTITION"));
    let o = b.cli(
        &[
            "topic",
            "alter-config",
            "t",
            "--config",
            "retention.ms=60000",
        ],
        None,
    );
    assert!(o.status.success());
    let o = b.cli(&["topic", "describe", "t"], None);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("config retention.ms=60000"), "{out}");
    assert!(
        !out.contains("retention.bytes"),
        "a refused setting was stored: {out}"
    );
    assert!(out.contains("segments 1 bytes 0"), "{out}");
}

#[test]
fn a_decommissioned_partition_stops_writes_drains_and_is_reclaimed() {
    let b = TestBroker::start(2, &["--retention-check-interval-ms", "200"]);
    let mut admin = b.client();
    admin
        .create_topic(
            "retire",
            3,
            1,
            vec![("retention.ms".into(), "3600000".into())],
        )
        .unwrap();
    let old = rill::clock::now_ms() - 2 * 3600 * 1000;
    fill(&b, "retire", 300, 500, old, "old");
    let o = b.cli(
        &["topic", "decommission", "retire", "--partition", "0"],
        None,
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // Writes to it are refused; keyed and unkeyed records go to the other partitions.
    let p = producer(&b, 1 << 10);
    let e = p
        .send(ProducerRecord::new("retire", b"x").partition(0))
        .unwrap()
        .wait()
        .unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::PolicyViolation), "{e}");
    let mut used = HashSet::new();
    let reports: Vec<_> = (0..200)
        .map(|i| {
            let key = format!("k{i}");
            p.send(ProducerRecord::new("retire", b"new").key(key.as_bytes()))
                .unwrap()
        })
        .chain((0..50).map(|_| p.send(ProducerRecord::new("retire", b"new")).unwrap()))
        .collect();
    for r in reports {
        used.insert(r.wait().unwrap().partition);
    }
    assert!(
        !used.contains(&0),
        "a record went to the decommissioned partition"
    );
    // Its data is past retention: it is drained by nobody in time, so retention takes it all,
    // including the segment that would otherwise stay active forever.
    wait_until("the decommissioned partition's files to go", || {
        let s = admin.partition_state("retire", 0).unwrap();
        s.size_bytes == 0 && s.log_start_offset == 300
    });
    let s = admin.partition_state("retire", 0).unwrap();
    assert_eq!((s.log_end_offset, s.high_watermark), (300, 300));
    // The last writable partitions cannot all go.
    admin.decommission("retire", 1).unwrap();
    let e = admin.decommission("retire", 2).unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::InvalidPartitions), "{e}");
    let e = admin.decommission("retire", 0).unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::InvalidPartitions), "{e}");
}

#[test]
fn a_decommissioned_partition_keeps_serving_reads_until_retention() {
    let b = TestBroker::start(1, &[]);
    let mut admin = b.client();
    admin.create_topic("drain", 2, 1, vec![]).unwrap();
    fill(&b, "drain", 100, 100, rill::clock::now_ms(), "d");
    admin.decommission("drain", 0).unwrap();
    let got = consume_exactly(&b, "drain", StartFrom::Beginning, 100);
    assert!(got.iter().all(|r| r.partition == 0));
    assert_eq!(got.last().unwrap().offset, 99);
}

#[test]
fn retention_during_heavy_produce_and_consume_loses_nothing_in_the_window() {
    let b = TestBroker::start(
        2,
        &[
            "--retention-check-interval-ms",
            "50",
            "--tail-cache-bytes",
            "0",
        ],
    );
    let mut admin = b.client();
    let configs = vec![
        ("segment.bytes".to_string(), "65536".to_string()),
        ("retention.bytes".to_string(), "262144".to_string()),
    ];
    admin.create_topic("churn", 1, 1, configs).unwrap();
    let bootstrap = b.bootstrap();
    // A consumer reads from the start all along; it may fall behind the retention window and
    // be reset, but every record it gets must be the one the producer stored at that offset.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reader = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut c =
                Consumer::new(ClientConfig::new(bootstrap), ConsumerConfig::default()).unwrap();
            c.assign("churn", None, StartFrom::Beginning).unwrap();
            let mut seen = Vec::new();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let records = c
                    .poll(Duration::from_millis(100))
                    .expect("no corrupt or failed fetch");
                seen.extend(
                    records
                        .iter()
                        .map(|r| (r.offset(), r.value().unwrap_or_default().to_vec())),
                );
            }
            seen
        })
    };
    let p = producer(&b, 16 << 10);
    let mut reports = Vec::new();
    for i in 0..6000 {
        let mut v = format!("c-{i}-").into_bytes();
        v.resize(300, b'z');
        reports.push((
            v.clone(),
            p.send(ProducerRecord::new("churn", &v).partition(0))
                .unwrap(),
        ));
    }
    p.flush().unwrap();
    let mut by_offset = std::collections::HashMap::new();
    for (v, r) in reports {
        by_offset.insert(r.wait().unwrap().offset.unwrap(), v);
    }
    wait_until("retention to trim the partition", || {
        admin.partition_state("churn", 0).unwrap().size_bytes <= 262_144 + 65_536 + 16_384
    });
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let seen = reader.join().unwrap();
    assert!(!seen.is_empty());
    assert!(
        seen.windows(2).all(|w| w[1].0 > w[0].0),
        "offsets went back or repeated"
    );
    for (offset, value) in &seen {
        assert_eq!(
            by_offset.get(offset),
            Some(value),
            "offset {offset} served the wrong bytes"
        );
    }
    // Everything inside the window is there, intact.
    let s = admin.partition_state("churn", 0).unwrap();
    assert!(s.log_start_offset > 0, "retention never ran");
    let window = consume_exactly(
        &b,
        "churn",
        StartFrom::Beginning,
        (6000 - s.log_start_offset) as usize,
    );
    for r in &window {
        assert_eq!(Some(&by_offset[&r.offset]), r.value.as_ref());
    }
}

/// The files of the broker process `pid` open but removed, under `dir`, with their sizes.
fn removed_open_files(pid: u32, dir: &std::path::Path) -> Vec<(String, u64)> {
    let dir = dir.to_string_lossy().into_owned();
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return Vec::new();
    };
    fds.flatten()
        .filter_map(|fd| {
            let target = std::fs::read_link(fd.path()).ok()?;
            let target = target.to_string_lossy().into_owned();
            if !(target.starts_with(&dir) && target.ends_with(" (deleted)")) {
                return None;
            }
            // The link leads to the open file itself: its size as it is now.
            let size = std::fs::metadata(fd.path()).ok()?.len();
            Some((target, size))
        })
        .collect()
}

#[test]
fn a_deleted_topics_files_go_at_once_and_their_space_comes_back_in_steps() {
    // Slow steps, so the shrinking can be watched: 1 MiB each, 50 ms apart.
    let b = TestBroker::start(
        1,
        &[
            "--file-delete-step-bytes",
            "1048576",
            "--file-delete-step-pause-us",
            "50000",
        ],
    );
    let pid = b.pid().expect("broker pid");
    let data = b.data_dir();
    let mut admin = b.client();
    let configs = vec![("segment.bytes".to_string(), (64u64 << 20).to_string())];
    admin.create_topic("bulky", 1, 1, configs).unwrap();
    // 24 MiB of records: the active segment is preallocated past them, in 16 MiB steps.
    fill(&b, "bulky", 24 * 1024, 1024, rill::clock::now_ms(), "bulk");
    let segment = rill_testkit::segment_files(&rill_testkit::partition_dir(&data, "bulky", 0))
        .into_iter()
        .find(|p| p.extension().is_some_and(|x| x == "log"))
        .expect("a segment file");
    let allocated = std::fs::metadata(&segment).unwrap().len();
    assert!(allocated >= 24 << 20, "segment of {allocated} bytes");

    admin.delete_topic("bulky").unwrap();
    assert!(
        !rill_testkit::has_partition_dir(&data, "bulky", 0),
        "the directory goes with the delete"
    );
    // The segment is still open, unlinked, and shrinks a step at a time: seen smaller than
    // it was and larger than nothing at least once, then closed.
    let mut sizes = Vec::new();
    let start = Instant::now();
    loop {
        let open = removed_open_files(pid, &data);
        if let Some((_, size)) = open.iter().find(|(t, _)| t.contains(".log")) {
            sizes.push(*size);
        } else if !sizes.is_empty() || start.elapsed() > Duration::from_secs(2) {
            break;
        }
        assert!(start.elapsed() < DEADLINE, "still open: {open:?}");
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(
        sizes.iter().any(|s| *s < allocated && *s > 0),
        "the removed segment was not seen shrinking in steps: {} sizes, first {:?}, last {:?}",
        sizes.len(),
        sizes.first(),
        sizes.last()
    );
    assert!(sizes.windows(2).all(|w| w[1] <= w[0]), "sizes only go down");
    wait_until("every removed file to be closed", || {
        removed_open_files(pid, &data).is_empty()
    });
    // A topic of the same name starts empty.
    admin.create_topic("bulky", 1, 1, Vec::new()).unwrap();
    assert_eq!(admin.partition_state("bulky", 0).unwrap().size_bytes, 0);
}
