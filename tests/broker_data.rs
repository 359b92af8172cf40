//! The data path end to end against real broker processes: keyed produce and consume,
//! durability across restarts and SIGKILL, torn-tail recovery, replay, long polling.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rill::client::{Acks, Producer, ProducerConfig, ProducerRecord, StartFrom};
use rill_testkit::{
    consume_exactly, consumer, partition_dir, produce_values, produce_values_in_batches, producer,
    segment_files, values, TestBroker, DEADLINE,
};

#[test]
fn hundred_thousand_keyed_messages_come_back_complete_in_per_key_order() {
    let b = TestBroker::start(2, &[]);
    let mut client = b.client();
    client.create_topic("keyed", 4, 1, vec![]).unwrap();
    // Metadata: partitions on both shards, each shard on its own port.
    let md = client.metadata().clone();
    let routes: Vec<_> = (0..4).map(|p| md.route("keyed", p).unwrap()).collect();
    let shards: HashSet<u32> = routes.iter().map(|r| r.shard).collect();
    assert_eq!(shards, HashSet::from([0, 1]));
    for r in &routes {
        assert_eq!(u32::from(r.addr.port()), u32::from(b.port) + r.shard);
    }

    let p = producer(&b, 64 << 10);
    const N: usize = 100_000;
    const KEYS: usize = 97;
    let mut reports = Vec::with_capacity(N);
    for i in 0..N {
        let key = format!("key-{}", i % KEYS);
        let value = format!("{}:{}", i % KEYS, i / KEYS);
        let record = ProducerRecord::new("keyed", value.as_bytes())
            .key(key.as_bytes())
            .timestamp(1_700_000_000_000);
        let report = p.send(record).unwrap();
        reports.push((value, report));
    }
    p.flush().unwrap();
    // Every delivery report names the offset the consumer finds the record at.
    let mut reported: HashMap<(u32, u64), String> = HashMap::new();
    for (value, report) in reports {
        let md = report.wait().unwrap();
        assert!(reported
            .insert((md.partition, md.offset.unwrap()), value)
            .is_none());
    }
    assert_eq!(reported.len(), N);

    let got = consume_exactly(&b, "keyed", StartFrom::Beginning, N);
    for r in &got {
        assert_eq!(
            reported[&(r.partition, r.offset)].as_bytes(),
            r.value.as_deref().unwrap_or_default()
        );
    }
    let mut next_seq: HashMap<String, usize> = HashMap::new();
    let mut key_partition: HashMap<Vec<u8>, u32> = HashMap::new();
    let mut seen_partitions = HashSet::new();
    for r in &got {
        let key = r.key.clone().unwrap();
        seen_partitions.insert(r.partition);
        // One key, one partition (murmur2), as Kafka's partitioner.
        let part = *key_partition.entry(key.clone()).or_insert(r.partition);
        assert_eq!(part, r.partition);
        assert_eq!(rill::partitioner::partition_for_key(&key, 4), r.partition);
        let value = String::from_utf8(r.value.clone().unwrap_or_default()).unwrap();
        let (k, seq) = value.split_once(':').unwrap();
        let want = next_seq.entry(k.to_string()).or_insert(0);
        assert_eq!(seq.parse::<usize>().unwrap(), *want, "key {k} out of order");
        *want += 1;
    }
    assert_eq!(next_seq.len(), KEYS);
    assert_eq!(seen_partitions.len(), 4);
}

#[test]
fn acknowledged_messages_survive_clean_restart_and_sigkill() {
    let mut b = TestBroker::start(2, &["--fsync", "always"]);
    b.client().create_topic("durable", 2, 1, vec![]).unwrap();
    produce_values(&b, "durable", 0, (0..250).map(|i| format!("a{i}")));
    produce_values(&b, "durable", 1, (250..500).map(|i| format!("a{i}")));
    b.restart();
    let got = consume_exactly(&b, "durable", StartFrom::Beginning, 500);
    let values: HashSet<_> = got
        .iter()
        .map(|r| r.value.clone().unwrap_or_default())
        .collect();
    assert_eq!(values.len(), 500);

    // Produce from a thread, recording what was acknowledged, and SIGKILL the broker mid-run.
    let acked: Arc<Mutex<Vec<String>>> = Arc::new(Mutex::new(Vec::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let bootstrap = b.bootstrap();
    let (acked2, stop2) = (acked.clone(), stop.clone());
    let t = std::thread::spawn(move || {
        let p = Producer::new(
            rill::client::ClientConfig::new(bootstrap),
            ProducerConfig {
                acks: Acks::All,
                linger: Duration::ZERO,
                retries: 0,
                ..ProducerConfig::default()
            },
        )
        .unwrap();
        let mut i = 0u64;
        while !stop2.load(Ordering::Relaxed) {
            let v = format!("b{i}");
            let sent =
                p.send(ProducerRecord::new("durable", v.as_bytes()).partition((i % 2) as u32));
            match sent.and_then(|r| r.wait()) {
                Ok(_) => acked2.lock().unwrap().push(v),
                Err(_) => break,
            }
            i += 1;
        }
    });
    let start = Instant::now();
    while acked.lock().unwrap().len() < 300 {
        assert!(start.elapsed() < DEADLINE, "producer made no progress");
        std::thread::sleep(Duration::from_millis(10));
    }
    b.kill();
    stop.store(true, Ordering::Relaxed);
    t.join().unwrap();
    let acked = acked.lock().unwrap().clone();
    b.restart();
    let mut c = consumer(&b, "durable", StartFrom::Beginning);
    let mut seen = HashSet::new();
    let mut per_partition: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
    let start = Instant::now();
    loop {
        let batch = c.poll(Duration::from_millis(200)).unwrap().to_owned();
        if batch.is_empty() && acked.iter().all(|v| seen.contains(v.as_bytes())) {
            break;
        }
        for r in batch {
            per_partition.entry(r.partition).or_default().push(r.offset);
            seen.insert(r.value.unwrap_or_default());
        }
        assert!(
            start.elapsed() < DEADLINE,
            "acknowledged messages missing after SIGKILL"
        );
    }
    for v in &acked {
        assert!(seen.contains(v.as_bytes()), "acknowledged {v} lost");
    }
    for offsets in per_partition.values() {
        assert!(
            offsets.windows(2).all(|w| w[1] == w[0] + 1),
            "offsets not contiguous"
        );
    }
}

#[test]
fn garbage_at_the_active_segment_tail_is_cut_and_appends_continue() {
    let mut b = TestBroker::start(1, &[]);
    b.client().create_topic("torn", 1, 1, vec![]).unwrap();
    produce_values(&b, "torn", 0, (0..100).map(|i| format!("m{i}")));
    b.kill();
    // Find where the valid batches end and write garbage there, as a torn write would.
    let dir = partition_dir(&b.data_dir(), "torn", 0);
    let seg = segment_files(&dir).pop().unwrap();
    let bytes = std::fs::read(&seg).unwrap();
    let mut aligned = rkyv::util::AlignedVec::<16>::new();
    aligned.extend_from_slice(&bytes);
    let end: usize = rill::batch::BatchIter::new(&aligned)
        .map_while(Result::ok)
        .map(|v| v.len())
        .sum();
    assert!(end > 0);
    let mut f = std::fs::OpenOptions::new().write(true).open(&seg).unwrap();
    use std::io::{Seek, SeekFrom};
    f.seek(SeekFrom::Start(end as u64)).unwrap();
    let garbage: Vec<u8> = (0..3000u32)
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8 | 1)
        .collect();
    f.write_all(&garbage).unwrap();
    f.sync_all().unwrap();
    drop(f);
    b.restart();
    assert!(
        b.log_text().contains("bytes of torn data"),
        "recovery did not report the cut"
    );
    let got = consume_exactly(&b, "torn", StartFrom::Beginning, 100);
    assert_eq!(got.last().unwrap().value.as_deref(), Some(&b"m99"[..]));
    produce_values(&b, "torn", 0, (100..110).map(|i| format!("m{i}")));
    let got = consume_exactly(&b, "torn", StartFrom::Beginning, 110);
    let want: Vec<String> = (0..110).map(|i| format!("m{i}")).collect();
    assert_eq!(values(&got), want);
    assert_eq!(got.last().unwrap().offset, 109);
}

#[test]
fn replay_from_the_tail_cache() {
    replay_from_beginning_offset_and_timestamp(&[]);
}

#[test]
fn replay_from_segment_files_by_copy() {
    replay_from_beginning_offset_and_timestamp(&[
        "--tail-cache-bytes",
        "0",
        "--file-reads",
        "copy",
    ]);
}

#[test]
fn replay_from_segment_files_by_sendfile() {
    replay_from_beginning_offset_and_timestamp(&[
        "--tail-cache-bytes",
        "0",
        "--file-reads",
        "sendfile",
    ]);
}

/// `--tail-cache-pre-touch` backs the tail cache's memory at start (the broker's RSS holds it
/// before any request), and batches large enough for the frame arena, which is carved from
/// that memory, are stored and read back whole.
#[test]
fn a_pre_touched_tail_cache_is_backed_at_start_and_serves_large_batches() {
    const CACHE: usize = 96 << 20;
    let cache = CACHE.to_string();
    let plain = TestBroker::start(1, &["--tail-cache-bytes", &cache]);
    let plain_kib = plain.status_kib("VmRSS");
    drop(plain);
    let b = TestBroker::start(1, &["--tail-cache-bytes", &cache, "--tail-cache-pre-touch"]);
    let touched_kib = b.status_kib("VmRSS");
    assert!(
        touched_kib >= (CACHE >> 10) as u64,
        "RSS {touched_kib} KiB after a pre-touch of {} KiB",
        CACHE >> 10
    );
    assert!(
        plain_kib + ((CACHE >> 10) as u64) / 2 < touched_kib,
        "without the flag RSS is {plain_kib} KiB, with it {touched_kib} KiB"
    );
    assert!(b
        .log_text()
        .contains("--tail-cache-pre-touch: backed 96 MiB"));
    b.client().create_topic("big", 1, 1, vec![]).unwrap();
    // Batches of about 1 MiB: requests the arena carves from pre-touched chunks.
    let sent: Vec<String> = (0..600)
        .map(|i| format!("{i:05}-{}", "v".repeat(4000 + (i * 37) % 3000)))
        .collect();
    produce_values_in_batches(&b, "big", 0, 1 << 20, sent.clone());
    let got = consume_exactly(&b, "big", StartFrom::Beginning, sent.len());
    assert_eq!(values(&got), sent);
}

fn replay_from_beginning_offset_and_timestamp(extra: &[&str]) {
    let mut flags = vec!["--segment-bytes", "65536"];
    flags.extend_from_slice(extra);
    let b = TestBroker::start(2, &flags);
    b.client().create_topic("replay", 1, 1, vec![]).unwrap();
    let p = producer(&b, 2 << 10);
    // Three runs of records with client timestamps 1000 apart.
    for (run, ts) in [(0, 10_000i64), (1, 11_000), (2, 12_000)] {
        for i in 0..400 {
            let v = format!("r{run}-{i}-{}", "x".repeat(100));
            p.send(
                ProducerRecord::new("replay", v.as_bytes())
                    .partition(0)
                    .timestamp(ts + i),
            )
            .unwrap();
        }
    }
    p.flush().unwrap();
    let dir = partition_dir(&b.data_dir(), "replay", 0);
    assert!(segment_files(&dir).len() > 1, "expected several segments");
    let first = consume_exactly(&b, "replay", StartFrom::Beginning, 1200);
    let second = consume_exactly(&b, "replay", StartFrom::Beginning, 1200);
    assert_eq!(first, second);
    assert!(first.iter().enumerate().all(|(i, r)| r.offset == i as u64));
    let from_offset = consume_exactly(&b, "replay", StartFrom::Offset(777), 1200 - 777);
    assert_eq!(from_offset[0].offset, 777);
    assert_eq!(from_offset[..], first[777..]);
    // Before everything, between runs, inside a run, after everything.
    let at = |ts| {
        let mut c = b.client();
        c.list_offset("replay", 0, ts).unwrap()
    };
    assert_eq!(at(1), Some(0));
    assert_eq!(at(10_500), Some(400));
    assert_eq!(at(11_000), Some(400));
    assert_eq!(at(11_123), Some(523));
    assert_eq!(at(99_999), None);
    let from_ts = consume_exactly(&b, "replay", StartFrom::Timestamp(12_000), 400);
    assert_eq!(from_ts[..], first[800..]);
}

#[test]
fn long_poll_returns_the_message_produced_while_it_waits() {
    let b = TestBroker::start(1, &[]);
    let mut client = b.client();
    client.create_topic("poll", 1, 1, vec![]).unwrap();
    let bootstrap = b.bootstrap();
    let (started_tx, started_rx) = std::sync::mpsc::channel();
    let waiter = std::thread::spawn(move || {
        let mut c =
            rill::client::Client::connect(rill::client::ClientConfig::new(bootstrap)).unwrap();
        started_tx.send(()).unwrap();
        // Waits up to 60 s for one byte: returns early only because data arrived.
        let (r, frame) = c
            .fetch("poll", 0, 0, Duration::from_secs(60), 1, 1 << 20)
            .unwrap();
        let payload = frame
            .payload_slice(r.payload_offset, r.payload_len)
            .unwrap()
            .to_vec();
        let mut aligned = rkyv::util::AlignedVec::<16>::new();
        aligned.extend_from_slice(&payload);
        let values: Vec<Vec<u8>> = rill::batch::BatchIter::new(&aligned)
            .flat_map(|b| {
                b.unwrap()
                    .records()
                    .unwrap()
                    .map(|r| r.value().unwrap_or_default().to_vec())
                    .collect::<Vec<_>>()
            })
            .collect();
        values
    });
    started_rx.recv().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let p = producer(&b, 1);
    let report = p
        .send(ProducerRecord::new("poll", b"wake-up").partition(0))
        .unwrap();
    report.wait().unwrap();
    let values = waiter.join().unwrap();
    assert_eq!(values, vec![b"wake-up".to_vec()]);
}

/// A producer that never waits for answers (acks=0) is held to `--max-request-memory-bytes`
/// until its writes are durable, and every record still lands: with a budget (16 MiB, above
/// the producer's largest request of 8 MiB) half of what is sent, a grant never given back
/// would stall the connection for good.
#[test]
fn unanswered_produces_are_held_to_the_request_budget_and_all_land() {
    let b = TestBroker::start(
        1,
        &[
            "--fsync",
            "always",
            "--max-request-memory-bytes",
            "16777216",
        ],
    );
    b.client().create_topic("fire", 1, 1, vec![]).unwrap();
    let p = Producer::new(
        rill::client::ClientConfig::new(b.bootstrap()),
        ProducerConfig {
            acks: Acks::None,
            linger: Duration::ZERO,
            batch_bytes: 64 << 10,
            ..ProducerConfig::default()
        },
    )
    .unwrap();
    let value = vec![b'x'; 4000];
    for i in 0..8000u32 {
        let mut v = i.to_be_bytes().to_vec();
        v.extend_from_slice(&value);
        p.send(ProducerRecord::new("fire", &v[..]).partition(0))
            .unwrap();
    }
    p.flush().unwrap();
    let got = consume_exactly(&b, "fire", StartFrom::Beginning, 8000);
    let ids: HashSet<u32> = got
        .iter()
        .map(|r| {
            u32::from_be_bytes(
                r.value.as_deref().unwrap_or_default()[..4]
                    .try_into()
                    .unwrap(),
            )
        })
        .collect();
    assert_eq!(ids.len(), 8000);
}

/// Seen from outside: a batch larger than the tail cache, right after batches it holds,
/// left consumers at its offset with empty fetches ("no data yet") until something newer was
/// appended, though the batch was on disk.
#[test]
fn a_batch_larger_than_the_tail_cache_is_read_from_disk_after_cached_ones() {
    for reads in ["sendfile", "copy"] {
        let b = TestBroker::start(1, &["--tail-cache-bytes", "65536", "--file-reads", reads]);
        b.client().create_topic("wide", 1, 1, vec![]).unwrap();
        let p = producer(&b, 1 << 20);
        let small: Vec<String> = (0..10).map(|i| format!("small-{i}")).collect();
        for v in &small {
            p.send(ProducerRecord::new("wide", v.as_bytes()).partition(0))
                .unwrap();
        }
        p.flush().unwrap();
        // One batch of 200 KiB: more than the whole cache.
        let big = "b".repeat(200 << 10);
        p.send(ProducerRecord::new("wide", big.as_bytes()).partition(0))
            .unwrap();
        p.flush().unwrap();
        let got = consume_exactly(&b, "wide", StartFrom::Beginning, 11);
        let mut want = small.clone();
        want.push(big.clone());
        assert_eq!(values(&got), want, "--file-reads {reads}");
    }
}
