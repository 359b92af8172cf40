//! The idempotent producer end to end against real broker processes: a retried batch is
//! stored once and answered with its first offsets (lost acknowledgements through a proxy,
//! after a SIGKILL and a restart, after a failover), bad sequences and epochs are refused with
//! Kafka's errors and nothing is appended, and producer ids stay unique across restarts.

use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, Instant};

use rill::batch::{BatchBuilder, BatchIter};
use rill::client::{Client, ClientConfig, Producer, ProducerConfig, ProducerRecord};
use rill::protocol::ErrorCode;
use rill_testkit::{
    create_topic_rf3, partition_dir, read_partition, wait_partition, FrameLength, ResponseDropper,
    TestBroker, TestCluster, DEADLINE, FAST_FENCING,
};

const TIMEOUT: Duration = Duration::from_secs(30);

/// A batch of `n` records `tag-0`.. numbered (`id`, `epoch`, `seq`).
fn batch(id: i64, epoch: i16, seq: i32, n: u32, tag: &str) -> Vec<u8> {
    let mut b = BatchBuilder::new().producer(id, epoch, seq);
    for i in 0..n {
        let v = format!("{tag}-{i}");
        b.push_record(1_700_000_000_000, None, Some(v.as_bytes()), [], &[]);
    }
    b.build().expect("batch").to_vec()
}

/// Produces one batch (acks=all); its base offset or the broker's error code.
fn send(c: &mut Client, topic: &str, p: u32, b: &[u8]) -> Result<u64, ErrorCode> {
    match c.produce_raw(topic, p, &[b], -1, TIMEOUT) {
        Ok(Some(r)) => Ok(r.base_offset as u64),
        Ok(None) => panic!("acks=all answers"),
        Err(e) => Err(e
            .code()
            .unwrap_or_else(|| panic!("not a broker error: {e}"))),
    }
}

fn log_end(c: &mut Client, topic: &str, p: u32) -> u64 {
    c.list_offset(topic, p, -1)
        .expect("list offsets")
        .expect("an end")
}

/// Every record value of `topic`-`p` below the log end, by offset (read straight from the
/// broker's fetch answers).
fn stored(c: &mut Client, topic: &str, p: u32) -> BTreeMap<u64, String> {
    let end = log_end(c, topic, p);
    let mut out = BTreeMap::new();
    let mut at = 0;
    while at < end {
        let (_, frame) = c
            .fetch(topic, p, at, Duration::ZERO, 1, 1 << 20)
            .expect("fetch");
        let before = at;
        for b in BatchIter::new(frame.payload()) {
            let b = b.expect("batch");
            let base = b.header().base_offset;
            for (i, r) in b.records().expect("records").enumerate() {
                let v = String::from_utf8(r.value().expect("value").to_vec()).unwrap();
                out.insert(base + i as u64, v);
            }
            at = b.header().next_offset();
        }
        assert!(at > before, "a fetch at {at} moved nothing (end {end})");
    }
    out
}

fn code(r: Result<u64, ErrorCode>) -> ErrorCode {
    r.expect_err("refused")
}

#[test]
fn duplicates_are_answered_with_their_first_offsets_and_bad_sequences_are_refused() {
    let b = TestBroker::start(1, &[]);
    let mut c = b.client();
    c.create_topic("idem", 1, 1, vec![]).unwrap();
    let (id, epoch) = c.init_producer_id(None).unwrap();
    assert!(id >= 0 && epoch == 0);

    let first = batch(id, 0, 0, 10, "a");
    assert_eq!(send(&mut c, "idem", 0, &first), Ok(0));
    // Another producer's record in between: a duplicate is found by its numbers, not by
    // being the last batch.
    let (other, _) = c.init_producer_id(None).unwrap();
    assert_ne!(other, id);
    assert_eq!(send(&mut c, "idem", 0, &batch(other, 0, 0, 1, "x")), Ok(10));
    assert_eq!(
        send(&mut c, "idem", 0, &first),
        Ok(0),
        "a retry gets its first offset"
    );
    let second = batch(id, 0, 10, 5, "b");
    assert_eq!(send(&mut c, "idem", 0, &second), Ok(11));
    assert_eq!(send(&mut c, "idem", 0, &first), Ok(0));
    assert_eq!(send(&mut c, "idem", 0, &second), Ok(11));
    assert_eq!(log_end(&mut c, "idem", 0), 16);

    // Bad input: each refused with Kafka's error, nothing appended.
    assert_eq!(
        code(send(&mut c, "idem", 0, &batch(id, 0, 16, 1, "gap"))),
        ErrorCode::OutOfOrderSequenceNumber
    );
    assert_eq!(
        code(send(&mut c, "idem", 0, &batch(id, 0, 12, 3, "overlap"))),
        ErrorCode::OutOfOrderSequenceNumber
    );
    assert_eq!(
        code(send(
            &mut c,
            "idem",
            0,
            &batch(id, 1, 3, 1, "new-epoch-not-at-0")
        )),
        ErrorCode::OutOfOrderSequenceNumber
    );
    let (unknown, _) = c.init_producer_id(None).unwrap();
    assert_eq!(
        code(send(&mut c, "idem", 0, &batch(unknown, 0, 7, 1, "unknown"))),
        ErrorCode::UnknownProducerId
    );
    // A KIP-360 bump keeps the id; the new epoch starts at 0 and fences the old one.
    let bumped = c.init_producer_id(Some((id, 0))).unwrap();
    assert_eq!(bumped, (id, 1));
    assert_eq!(send(&mut c, "idem", 0, &batch(id, 1, 0, 2, "c")), Ok(16));
    assert_eq!(
        code(send(&mut c, "idem", 0, &batch(id, 0, 15, 1, "stale"))),
        ErrorCode::InvalidProducerEpoch
    );
    assert_eq!(
        code(send(&mut c, "idem", 0, &second)),
        ErrorCode::InvalidProducerEpoch,
        "the old epoch's batches are fenced too"
    );
    assert_eq!(log_end(&mut c, "idem", 0), 18);

    let got = stored(&mut c, "idem", 0);
    let mut want: Vec<String> = (0..10).map(|i| format!("a-{i}")).collect();
    want.push("x-0".into());
    want.extend((0..5).map(|i| format!("b-{i}")));
    want.extend((0..2).map(|i| format!("c-{i}")));
    assert_eq!(got.into_values().collect::<Vec<_>>(), want);
}

/// A segment roll saves the producer state, written as the snapshot once the log is durable
/// past it: after a SIGKILL (no clean stop) the restart replays only the log after the last
/// roll's snapshot, and dedupe still holds for batches on both sides of it.
#[test]
fn a_roll_snapshot_shortens_the_replay_after_a_sigkill() {
    let mut b = TestBroker::start_with_env(
        1,
        &[
            "--segment-bytes",
            "65536",
            "--replica-high-watermark-checkpoint-interval-ms",
            "100",
        ],
        &[("RUST_LOG", "info,rill::partition::idempotence=debug")],
    );
    let mut c = b.client();
    c.create_topic("rolls", 1, 1, vec![]).unwrap();
    let (id, _) = c.init_producer_id(None).unwrap();
    let mut batches = Vec::new();
    for i in 0..60 {
        let bt = batch(id, 0, i * 50, 50, &format!("r{i}"));
        assert_eq!(send(&mut c, "rolls", 0, &bt), Ok(i as u64 * 50));
        batches.push(bt);
    }
    let dir = partition_dir(&b.data_dir(), "rolls", 0);
    let deadline = Instant::now() + Duration::from_secs(60);
    while !dir.join("producer-state").exists() {
        assert!(
            Instant::now() < deadline,
            "no producer-state snapshot after the rolls of 60 batches"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    b.kill();
    b.start_again();
    let mut c = b.client();
    for (i, bt) in batches.iter().enumerate().skip(55) {
        assert_eq!(
            send(&mut c, "rolls", 0, bt),
            Ok(i as u64 * 50),
            "retry of batch {i}"
        );
    }
    let next = batch(id, 0, 60 * 50, 50, "new");
    assert_eq!(send(&mut c, "rolls", 0, &next), Ok(3000));
    let log = b.log_text();
    let replayed = log
        .lines()
        .rev()
        .find_map(|l| {
            l.contains("rolls-0: producer state")
                .then(|| l.rsplit("replayed offsets ").next())
                .flatten()
        })
        .expect("the open logs its replay");
    let (from, end) = replayed.split_once("..").expect("FROM..END");
    let (from, end): (u64, u64) = (from.trim().parse().unwrap(), end.trim().parse().unwrap());
    assert!(end >= 3000, "{replayed}");
    assert!(
        from > 0,
        "the restart replayed the whole log ({replayed}): no roll snapshot was used"
    );
}

/// A clean stop writes every partition's producer snapshot (all in one job of the shard's
/// blocking pool), each its own partition's: after the restart, a retry of each partition's
/// last batch is answered with that partition's offsets.
#[test]
fn a_clean_stop_snapshots_every_partition_s_producers() {
    let mut b = TestBroker::start(1, &[]);
    let mut c = b.client();
    let partitions = 6u32;
    c.create_topic("snaps", partitions, 1, vec![]).unwrap();
    let (id, _) = c.init_producer_id(None).unwrap();
    let mut last = Vec::new();
    for p in 0..partitions {
        // p + 1 batches of 10 records: each partition's last batch at its own offset.
        for i in 0..=p {
            let bt = batch(id, 0, (i * 10) as i32, 10, &format!("p{p}-{i}"));
            assert_eq!(send(&mut c, "snaps", p, &bt), Ok(u64::from(i) * 10));
            if i == p {
                last.push(bt);
            }
        }
    }
    b.terminate();
    for p in 0..partitions {
        let dir = partition_dir(&b.data_dir(), "snaps", p);
        assert!(dir.join("producer-state").exists(), "partition {p}");
    }
    b.start_again();
    let mut c = b.client();
    for (p, bt) in (0..partitions).zip(&last) {
        assert_eq!(
            send(&mut c, "snaps", p, bt),
            Ok(u64::from(p) * 10),
            "partition {p}"
        );
        assert_eq!(log_end(&mut c, "snaps", p), u64::from(p + 1) * 10);
    }
}

#[test]
fn producer_state_survives_a_sigkill_a_clean_restart_and_a_damaged_snapshot() {
    // Small segments: the state must come from several of them (and their snapshot).
    let mut b = TestBroker::start(1, &["--segment-bytes", "65536"]);
    let mut c = b.client();
    c.create_topic("dur", 1, 1, vec![]).unwrap();
    let (id, _) = c.init_producer_id(None).unwrap();
    let mut batches = Vec::new();
    let mut seq = 0;
    for i in 0..60 {
        let bt = batch(id, 0, seq, 50, &format!("r{i}"));
        seq += 50;
        assert_eq!(send(&mut c, "dur", 0, &bt), Ok(u64::from(i as u32) * 50));
        batches.push(bt);
    }
    let end = 3000;
    let dir = partition_dir(&b.data_dir(), "dur", 0);

    let retry_all_recent = |c: &mut Client| {
        for (i, bt) in batches.iter().enumerate().skip(55) {
            assert_eq!(
                send(c, "dur", 0, bt),
                Ok(i as u64 * 50),
                "retry of batch {i}"
            );
        }
        assert_eq!(log_end(c, "dur", 0), end);
    };

    // SIGKILL right after the writes: rebuilt from the log (no snapshot was due yet, or one
    // from a roll: both must do).
    b.kill();
    b.start_again();
    let mut c = b.client();
    retry_all_recent(&mut c);

    // A clean stop writes the snapshot; the restart starts from it.
    b.terminate();
    assert!(
        dir.join("producer-state").exists(),
        "a clean stop writes the snapshot"
    );
    b.start_again();
    let mut c = b.client();
    retry_all_recent(&mut c);

    // A damaged snapshot is ignored: rebuilt from the log, the partition opens.
    b.terminate();
    let snap = dir.join("producer-state");
    let mut bytes = std::fs::read(&snap).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0xff;
    std::fs::write(&snap, bytes).unwrap();
    b.start_again();
    let mut c = b.client();
    retry_all_recent(&mut c);
    // And the producer goes on in sequence.
    assert_eq!(
        send(&mut c, "dur", 0, &batch(id, 0, seq, 1, "next")),
        Ok(end)
    );
    assert_eq!(
        code(send(&mut c, "dur", 0, &batch(id, 0, seq + 5, 1, "gap"))),
        ErrorCode::OutOfOrderSequenceNumber
    );
    assert_eq!(stored(&mut c, "dur", 0).len(), end as usize + 1);
}

#[test]
fn producer_ids_come_from_the_controller_and_stay_unique_across_restarts() {
    let mut b = TestBroker::start(2, &[]);
    let mut seen = HashSet::new();
    for round in 0..3 {
        // Both shards hand out ids (each from its own block).
        for shard in 0..2u16 {
            let addr = format!("127.0.0.1:{}", b.port + shard);
            let mut c = Client::connect(ClientConfig::new(addr)).unwrap();
            for _ in 0..5 {
                let (id, epoch) = c.init_producer_id(None).unwrap();
                assert_eq!(epoch, 0);
                assert!(seen.insert(id), "round {round}: id {id} handed out twice");
            }
        }
        b.kill();
        b.start_again();
    }
}

/// A producer whose every third response is lost: each lost one is retried, and every record
/// is stored exactly once, at the offset its delivery report names.
#[test]
fn lost_acknowledgements_make_the_producer_retry_and_every_record_is_stored_once() {
    lossy_producer_run(4, 20_000);
}

/// One partition, so a connection has more than one request in flight only if the producer
/// pipelines a partition's requests (with idempotence: up to 5 batches in flight); responses
/// lost in between make the later requests come back refused out of order, and the producer
/// resends in order.
#[test]
fn a_partition_pipelines_its_requests_and_keeps_order_through_lost_acknowledgements() {
    let proxy = lossy_producer_run(1, 20_000);
    let most = proxy
        .max_outstanding
        .load(std::sync::atomic::Ordering::SeqCst);
    assert!(
        most >= 2,
        "at most {most} request(s) of one partition were in flight"
    );
}

/// Sends `n` keyed records to a `partitions`-partition topic through a proxy that drops every
/// third response; checks every record is stored once, at the offset its report named, and
/// each partition holds its records in send order.
fn lossy_producer_run(partitions: u32, n: usize) -> ResponseDropper {
    let b = TestBroker::start(2, &["--advertised-host", "127.0.0.2"]);
    let proxy = ResponseDropper::start("127.0.0.2", &[b.port, b.port + 1], 3, FrameLength::Native);
    let mut admin = b.client();
    admin.create_topic("lossy", partitions, 1, vec![]).unwrap();
    let producer = Producer::new(
        ClientConfig::new(b.bootstrap()),
        ProducerConfig {
            linger: Duration::from_millis(1),
            batch_bytes: 4 << 10,
            retry_backoff: Duration::from_millis(20),
            ..ProducerConfig::default()
        },
    )
    .unwrap();
    let mut reports = Vec::with_capacity(n);
    for i in 0..n {
        let v = format!("v{i:06}-{}", "x".repeat(100));
        let key = format!("k{}", i % 31);
        let r = producer
            .send(ProducerRecord::new("lossy", v.as_bytes()).key(key.as_bytes()))
            .unwrap();
        reports.push((v, r));
    }
    producer.flush().unwrap();
    let mut reported = BTreeMap::new();
    for (v, r) in reports {
        let md = r.wait().unwrap();
        assert!(
            reported
                .insert((md.partition, md.offset.unwrap()), v)
                .is_none(),
            "two records reported at one offset"
        );
    }
    assert!(
        proxy.dropped() >= 10,
        "the proxy dropped only {} responses",
        proxy.dropped()
    );
    proxy.stop_dropping();
    let mut total = 0;
    for p in 0..partitions {
        let got = stored(&mut admin, "lossy", p);
        total += got.len();
        let mut last_sent = None;
        for (o, v) in got {
            assert_eq!(
                reported.get(&(p, o)),
                Some(&v),
                "{p}@{o}: stored, not reported"
            );
            // `v{index}-...`: a partition's records are stored in the order they were sent.
            let sent: usize = v[1..7].parse().expect("a send index");
            assert!(
                last_sent < Some(sent),
                "{p}@{o}: record {sent} stored after record {last_sent:?}"
            );
            last_sent = Some(sent);
        }
    }
    assert_eq!(total, n, "every record once, no duplicate");
    proxy
}

/// A batch acknowledged by the leader (acks=all: on every replica) and then retried at the
/// new leader after the old one died: the new leader knows it from the replicated log.
#[test]
fn a_retry_to_the_new_leader_after_a_failover_is_answered_as_a_duplicate() {
    let mut c = TestCluster::start(3, 1, FAST_FENCING);
    create_topic_rf3(&c, "fo", 1, &[]);
    let boot = c.nodes[0].bootstrap();
    let mut client = Client::connect(ClientConfig::new(boot.clone())).unwrap();
    let (id, _) = client.init_producer_id(None).unwrap();
    let mut batches = Vec::new();
    for i in 0..8 {
        let bt = batch(id, 0, i * 20, 20, &format!("f{i}"));
        assert_eq!(
            send(&mut client, "fo", 0, &bt),
            Ok(u64::from(i as u32) * 20)
        );
        batches.push(bt);
    }
    let old = wait_partition(&c.nodes[0], "fo", 0, "a leader", |m| m.leader != 0).leader;
    c.node(u64::from(old)).kill();
    let alive: Vec<usize> = (0..3).filter(|i| *i as u32 + 1 != old).collect();
    let witness = &c.nodes[alive[0]];
    wait_partition(witness, "fo", 0, "a new leader", |m| {
        m.leader != 0 && m.leader != old
    });
    let mut client = Client::connect(ClientConfig::new(witness.bootstrap())).unwrap();
    let start = Instant::now();
    // The retries of the last five batches: duplicates at the new leader.
    for (i, bt) in batches.iter().enumerate().skip(3) {
        loop {
            let _ = client.refresh_metadata();
            match send(&mut client, "fo", 0, bt) {
                Ok(o) => {
                    assert_eq!(o, i as u64 * 20, "retry of batch {i}");
                    break;
                }
                Err(e) if e.is_retriable() && start.elapsed() < DEADLINE => {
                    std::thread::sleep(Duration::from_millis(100));
                }
                Err(e) => panic!("retry of batch {i}: {e}"),
            }
        }
    }
    assert_eq!(
        send(&mut client, "fo", 0, &batch(id, 0, 160, 1, "next")),
        Ok(160)
    );
    let got = read_partition(witness.bootstrap(), "fo", 0, 161);
    assert_eq!(got.len(), 161);
}

/// A producer that sends one record at a time, waiting for each: its partition queues empty
/// between sends, and its sequences must go on (a sequence that started over would be taken
/// for a retry and never stored).
#[test]
fn one_record_at_a_time_every_record_is_stored_at_its_own_offset() {
    let b = TestBroker::start(1, &[]);
    let mut c = b.client();
    c.create_topic("seq", 2, 1, vec![]).unwrap();
    let p = Producer::new(
        ClientConfig::new(b.bootstrap()),
        ProducerConfig {
            linger: Duration::ZERO,
            ..ProducerConfig::default()
        },
    )
    .unwrap();
    let mut offsets = HashSet::new();
    for i in 0..200u32 {
        let v = format!("s{i}");
        let md = p
            .send(ProducerRecord::new("seq", v.as_bytes()).partition(i % 2))
            .unwrap()
            .wait()
            .unwrap();
        assert!(offsets.insert((md.partition, md.offset.unwrap())));
    }
    let stored: usize = (0..2).map(|p| stored(&mut c, "seq", p).len()).sum();
    assert_eq!(stored, 200);
}
