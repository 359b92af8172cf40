//! Log compaction end to end: a compacted topic keeps the latest record of each key with its
//! offset, readers see gaps and every key's latest value while the cleaner runs, tombstones
//! stay for `delete.retention.ms` and then go, and a SIGKILL in the middle of a compaction
//! loses nothing.

use std::collections::BTreeMap;
use std::ops::Range;
use std::path::Path;
use std::time::{Duration, Instant};

use rill::client::{ClientError, ProducerRecord, StartFrom};
use rill::protocol::ErrorCode;
use rill_testkit::{consumer, partition_dir, producer, segment_files, TestBroker, DEADLINE};

const KEYS: u64 = 1000;

/// (offset, key, value or `None` for a tombstone).
type Rec = (u64, String, Option<String>);
type Latest = BTreeMap<String, Option<String>>;

fn broker(io_bytes_per_tick: u64) -> TestBroker {
    let io = io_bytes_per_tick.to_string();
    TestBroker::start(
        1,
        &[
            "--log-cleaner-backoff-ms",
            "100",
            "--log-cleaner-io-bytes-per-tick",
            &io,
        ],
    )
}

/// A one-partition compacted topic of 64 KiB segments, compacted as soon as anything is dirty.
fn create_compacted(b: &TestBroker, topic: &str, extra: &[(&str, &str)]) {
    let mut configs: Vec<(String, String)> = [
        ("cleanup.policy", "compact"),
        ("segment.bytes", "65536"),
        ("min.cleanable.dirty.ratio", "0.01"),
    ]
    .iter()
    .chain(extra)
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    configs.dedup_by(|a, b| a.0 == b.0);
    b.client().create_topic(topic, 1, 1, configs).unwrap();
}

/// The key of update `i`: pseudo-random (splitmix64), so keys are updated at uneven
/// intervals and every segment keeps some latest values and loses others.
fn key_of(i: u64) -> String {
    let mut z = i.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    format!("k{}", (z ^ (z >> 31)) % KEYS)
}

/// Produces updates `range` (value `v<i>`), or tombstones of their keys, and records the
/// latest value of each key in `latest`.
fn produce(b: &TestBroker, topic: &str, range: Range<u64>, tombstones: bool, latest: &mut Latest) {
    let p = producer(b, 64 << 10);
    let keys: Vec<String> = range.clone().map(key_of).collect();
    let values: Vec<String> = range.clone().map(|i| format!("v{i}")).collect();
    let reports: Vec<_> = keys
        .iter()
        .zip(&values)
        .map(|(k, v)| {
            let r = if tombstones {
                ProducerRecord::tombstone(topic, k.as_bytes())
            } else {
                ProducerRecord::new(topic, v.as_bytes()).key(k.as_bytes())
            };
            p.send(r.partition(0)).unwrap()
        })
        .collect();
    p.flush().unwrap();
    for r in reports {
        if let Err(e) = r.wait() {
            panic!("{e}: {}", b.log_text());
        }
    }
    for (k, v) in keys.into_iter().zip(values) {
        latest.insert(k, (!tombstones).then_some(v));
    }
}

/// Every record of partition 0 from the log start to the high watermark, checking that
/// offsets only grow.
fn read_all(b: &TestBroker, topic: &str) -> Vec<Rec> {
    let hw = b
        .client()
        .list_offset(topic, 0, rill::protocol::messages::LATEST_TIMESTAMP)
        .unwrap()
        .unwrap();
    let mut c = consumer(b, topic, StartFrom::Beginning);
    let mut out: Vec<Rec> = Vec::new();
    let start = Instant::now();
    // The log's last record is its key's latest: never compacted away.
    while out.last().is_none_or(|r| r.0 + 1 < hw) {
        assert!(start.elapsed() < DEADLINE, "read {} records", out.len());
        for r in c.poll(Duration::from_millis(200)).unwrap().to_owned() {
            if let Some(last) = out.last() {
                assert!(r.offset > last.0, "offset {} after {}", r.offset, last.0);
            }
            let text = |b: Vec<u8>| String::from_utf8(b).unwrap();
            out.push((r.offset, text(r.key.unwrap()), r.value.map(text)));
        }
    }
    out
}

fn latest_of(records: &[Rec]) -> Latest {
    records
        .iter()
        .map(|(_, k, v)| (k.clone(), v.clone()))
        .collect()
}

/// Bytes of the partition's segment files.
fn log_bytes(dir: &Path) -> u64 {
    segment_files(dir)
        .iter()
        .map(|p| std::fs::metadata(p).map_or(0, |m| m.len()))
        .sum()
}

/// Waits until the partition reads back as at most `max` records; returns them.
fn wait_compacted(b: &TestBroker, topic: &str, max: usize) -> Vec<Rec> {
    let start = Instant::now();
    loop {
        let all = read_all(b, topic);
        if all.len() <= max {
            return all;
        }
        assert!(
            start.elapsed() < DEADLINE,
            "still {} records: {}",
            all.len(),
            b.log_text()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn updates_compact_to_the_latest_value_per_key_and_readers_during_compaction_see_each() {
    // 256 KiB per 100 ms: the pass takes seconds, so the reader below overlaps it.
    let b = broker(256 << 10);
    create_compacted(&b, "c", &[]);
    let mut latest = Latest::new();
    produce(&b, "c", 0..100_000, false, &mut latest);
    assert_eq!(latest.len(), KEYS as usize);
    let dir = partition_dir(&b.data_dir(), "c", 0);
    let before = log_bytes(&dir);
    assert!(segment_files(&dir).len() > 50, "many closed segments");

    // Readers while the cleaner rewrites segments: each sees every key's latest value.
    let mut passes = 0;
    let start = Instant::now();
    let compacted = loop {
        let all = read_all(&b, "c");
        assert_eq!(latest_of(&all), latest, "a read during compaction");
        passes += 1;
        // Closed segments hold each key at most once; the active segment (64 KiB) is left.
        if all.len() <= 3 * KEYS as usize {
            break all;
        }
        assert!(
            start.elapsed() < DEADLINE,
            "never compacted: {}",
            b.log_text()
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(passes > 1, "the compaction was not read while running");
    let offsets: Vec<u64> = compacted.iter().map(|r| r.0).collect();
    assert!(
        offsets.windows(2).any(|w| w[1] > w[0] + 1),
        "offsets keep gaps"
    );
    let after = log_bytes(&dir);
    assert!(after * 4 < before, "{before} bytes before, {after} after");

    // A restart reopens the compacted segments from their files and indexes.
    let mut b = b;
    b.restart();
    assert_eq!(latest_of(&read_all(&b, "c")), latest);
    // Later updates compact too.
    produce(&b, "c", 100_000..120_000, false, &mut latest);
    let all = wait_compacted(&b, "c", 3 * KEYS as usize);
    assert_eq!(latest_of(&all), latest);
}

#[test]
fn tombstones_stay_for_delete_retention_and_then_their_keys_disappear() {
    let b = broker(16 << 20);
    create_compacted(&b, "t", &[("delete.retention.ms", "3600000")]);
    let mut latest = Latest::new();
    produce(&b, "t", 0..20_000, false, &mut latest);
    // Tombstones for the keys of updates 20000..20100, then enough updates to close their
    // segment (each key of those no longer updated: the tombstone stays their latest).
    produce(&b, "t", 20_000..20_100, true, &mut latest);
    let deleted: Vec<String> = latest
        .iter()
        .filter(|(_, v)| v.is_none())
        .map(|(k, _)| k.clone())
        .collect();
    assert!(deleted.len() > 50, "{} keys deleted", deleted.len());
    produce_live(&b, &deleted, &mut latest);
    let all = wait_compacted(&b, "t", 3 * KEYS as usize);
    assert_eq!(latest_of(&all), latest);
    for k in &deleted {
        let of_key: Vec<&Rec> = all.iter().filter(|r| &r.1 == k).collect();
        assert_eq!(of_key.len(), 1, "{k}: only its tombstone: {of_key:?}");
        assert_eq!(of_key[0].2, None);
    }

    // delete.retention.ms=0: the next compaction drops the tombstones, and the keys are gone.
    b.client()
        .alter_topic_config("t", vec![("delete.retention.ms".into(), "0".into())])
        .unwrap();
    produce_live(&b, &deleted, &mut latest);
    let start = Instant::now();
    loop {
        let all = read_all(&b, "t");
        let left = all.iter().filter(|r| deleted.contains(&r.1)).count();
        let mut want = latest.clone();
        want.retain(|_, v| v.is_some());
        if left == 0 {
            assert_eq!(latest_of(&all), want);
            break;
        }
        assert!(start.elapsed() < DEADLINE, "{left} tombstones left");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// 5,000 updates of keys that are not in `deleted`: closes the segments holding tombstones.
fn produce_live(b: &TestBroker, deleted: &[String], latest: &mut Latest) {
    let p = producer(b, 64 << 10);
    let mut reports = Vec::new();
    let mut sent = Vec::new();
    let mut i = 1_000_000u64;
    while sent.len() < 5_000 {
        let k = key_of(i);
        i += 1;
        if deleted.contains(&k) {
            continue;
        }
        sent.push((k, format!("v{i}")));
    }
    for (k, v) in &sent {
        reports.push(
            p.send(
                ProducerRecord::new("t", v.as_bytes())
                    .key(k.as_bytes())
                    .partition(0),
            )
            .unwrap(),
        );
    }
    p.flush().unwrap();
    for r in reports {
        r.wait().unwrap();
    }
    for (k, v) in sent {
        latest.insert(k, Some(v));
    }
}

#[test]
fn a_sigkill_in_the_middle_of_compaction_loses_no_latest_value() {
    // 64 KiB per 100 ms: about one segment per tick, so a pass takes seconds.
    let mut b = broker(64 << 10);
    create_compacted(&b, "k", &[]);
    let mut latest = Latest::new();
    produce(&b, "k", 0..60_000, false, &mut latest);
    let dir = partition_dir(&b.data_dir(), "k", 0);
    let sizes = |dir: &Path| -> Vec<u64> {
        segment_files(dir)
            .iter()
            .map(|p| std::fs::metadata(p).map_or(0, |m| m.len()))
            .collect()
    };
    let initial = sizes(&dir);
    for round in 0..3 {
        // Kill as soon as a cleaned file is being written or swapped, or a segment shrank.
        let start = Instant::now();
        let before = sizes(&dir);
        loop {
            let mid_swap = std::fs::read_dir(&dir).unwrap().any(|e| {
                let name = e.unwrap().file_name().into_string().unwrap();
                name.ends_with(".cleaned") || name.ends_with(".swap")
            });
            if mid_swap || sizes(&dir) != before {
                break;
            }
            assert!(
                start.elapsed() < DEADLINE,
                "round {round}: no compaction seen"
            );
            std::thread::sleep(Duration::from_millis(2));
        }
        b.kill();
        b.start_again();
        assert_eq!(latest_of(&read_all(&b, "k")), latest, "round {round}");
    }
    assert_ne!(sizes(&dir), initial);
    let all = wait_compacted(&b, "k", 3 * KEYS as usize);
    assert_eq!(latest_of(&all), latest);
    // No crash's leftover stays: a pass running now has its own `.cleaned` file for a while
    // (seen on a loaded machine), so wait for one without any.
    let start = Instant::now();
    loop {
        let leftovers: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n.ends_with(".cleaned") || n.ends_with(".swap"))
            .collect();
        if leftovers.is_empty() {
            break;
        }
        assert!(start.elapsed() < DEADLINE, "{leftovers:?} stay");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn compacted_topics_refuse_records_without_a_key_and_bad_settings() {
    let b = broker(16 << 20);
    create_compacted(&b, "c", &[]);
    let p = producer(&b, 1 << 10);
    let r = p
        .send(ProducerRecord::new("c", b"no key").partition(0))
        .unwrap()
        .wait();
    match r {
        Err(ClientError::Broker { code, message }) => {
            assert_eq!(code, ErrorCode::InvalidRecord);
            assert!(message.contains("no key"), "{message}");
        }
        other => panic!("a keyless record was not refused: {other:?}"),
    }
    p.send(ProducerRecord::new("c", b"v").key(b"k").partition(0))
        .unwrap()
        .wait()
        .expect("a keyed record");
    for (key, value) in [
        ("cleanup.policy", "compacted"),
        ("min.cleanable.dirty.ratio", "2"),
        ("delete.retention.ms", "-5"),
    ] {
        let e = b
            .client()
            .create_topic("bad", 1, 1, vec![(key.into(), value.into())])
            .unwrap_err();
        assert!(e.to_string().contains(key), "{e}");
    }
}

#[test]
fn confluent_kafka_reads_a_compacted_topic_with_its_gaps() {
    let b = TestBroker::start_kafka(
        1,
        &[
            "--log-cleaner-backoff-ms",
            "100",
            "--log-cleaner-io-bytes-per-tick",
            "16777216",
        ],
    );
    create_compacted(&b, "c", &[]);
    let mut latest = Latest::new();
    produce(&b, "c", 0..20_000, false, &mut latest);
    let native = wait_compacted(&b, "c", 3 * KEYS as usize);
    assert_eq!(latest_of(&native), latest);
    assert_ne!(native[0].0, 0, "the log starts in a gap");
    // The cleaner may go on compacting while the Kafka client reads: compare a read with
    // native reads before and after it that agree (the log was quiet meanwhile).
    let start = Instant::now();
    loop {
        let before = read_all(&b, "c");
        let read = confluent_read_to_end(&b, "c");
        let after = read_all(&b, "c");
        if before == after {
            assert_eq!(read, after, "the same records at the same offsets");
            assert_eq!(latest_of(&after), latest);
            return;
        }
        assert!(
            start.elapsed() < DEADLINE,
            "the log never stayed the same across a read"
        );
    }
}

/// (offset, key, value) of every record of partition 0, read by confluent-kafka.
fn confluent_read_to_end(b: &TestBroker, topic: &str) -> Vec<Rec> {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/kafka/clients.py");
    let out = std::process::Command::new("python3")
        .args([script, "consume-to-end", &b.kafka_bootstrap(), topic, "0"])
        .output()
        .expect("python3 (run .ci/run, or pip install confluent-kafka)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            (
                v["offset"].as_u64().unwrap(),
                v["key"].as_str().unwrap().to_string(),
                v["value"].as_str().map(str::to_string),
            )
        })
        .collect()
}
