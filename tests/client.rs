//! The client library against real brokers: ordering and delivery reports across a broker
//! restart, back-pressure against a stopped broker, keyless records spread over partitions,
//! and use from tokio and from threads.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rill::client::{
    Acks, ClientConfig, ClientError, Producer, ProducerConfig, ProducerRecord, StartFrom,
};
use rill_testkit::{consume_exactly, TestBroker, DEADLINE};

fn config(b: &TestBroker) -> ClientConfig {
    ClientConfig::new(b.bootstrap())
}

#[test]
fn per_key_order_and_delivery_reports_hold_across_a_broker_restart() {
    let mut b = TestBroker::start(2, &[]);
    b.client().create_topic("ordered", 4, 1, vec![]).unwrap();
    const N: usize = 20_000;
    const KEYS: usize = 50;
    let bootstrap = b.bootstrap();
    let sender = std::thread::spawn(move || {
        let p = Producer::new(
            ClientConfig::new(bootstrap),
            ProducerConfig {
                acks: Acks::All,
                linger: Duration::from_millis(1),
                batch_bytes: 4 << 10,
                max_in_flight: 5,
                retry_backoff: Duration::from_millis(50),
                request_timeout: Duration::from_secs(10),
                ..ProducerConfig::default()
            },
        )
        .unwrap();
        let mut reports = Vec::with_capacity(N);
        for i in 0..N {
            let key = format!("key-{}", i % KEYS);
            let value = format!("{}:{}", i % KEYS, i / KEYS);
            let report = p
                .send(ProducerRecord::new("ordered", value.as_bytes()).key(key.as_bytes()))
                .unwrap();
            reports.push((i % KEYS, value, report));
        }
        p.flush().unwrap();
        reports
            .into_iter()
            .map(|(k, v, r)| (k, v, r.wait()))
            .collect::<Vec<_>>()
    });
    // Restart the broker once a quarter of the records are stored.
    let mut admin = b.client();
    let start = Instant::now();
    loop {
        let stored: u64 = (0..4)
            .map(|p| admin.list_offset("ordered", p, -1).unwrap().unwrap_or(0))
            .sum();
        if stored >= (N / 4) as u64 {
            break;
        }
        assert!(start.elapsed() < DEADLINE, "producer made no progress");
        std::thread::sleep(Duration::from_millis(5));
    }
    b.restart();
    let reports = sender.join().unwrap();

    let total: u64 = {
        let mut admin = b.client();
        (0..4)
            .map(|p| admin.list_offset("ordered", p, -1).unwrap().unwrap_or(0))
            .sum()
    };
    // Retries after the restart may store a batch twice (no idempotent producer yet), never lose one.
    assert!(total >= N as u64, "only {total} of {N} records stored");
    let got = consume_exactly(&b, "ordered", StartFrom::Beginning, total as usize);
    let at: HashMap<(u32, u64), &[u8]> = got
        .iter()
        .map(|r| {
            (
                (r.partition, r.offset),
                r.value.as_deref().unwrap_or_default(),
            )
        })
        .collect();
    let mut last_offset: HashMap<usize, (u32, u64)> = HashMap::new();
    for (key, value, report) in &reports {
        let md = report
            .as_ref()
            .expect("every record delivered despite the restart");
        let place = (md.partition, md.offset.unwrap());
        // The report names the record's place in the log...
        assert_eq!(
            at.get(&place).copied(),
            Some(value.as_bytes()),
            "report for {value} is wrong"
        );
        // ...and one key's reports grow in send order: per-key order held across retries.
        if let Some(prev) = last_offset.insert(*key, place) {
            assert_eq!(prev.0, place.0, "key moved partition");
            assert!(
                place.1 > prev.1,
                "key {key}: {value} stored before an earlier record"
            );
        }
    }
}

/// Kafka's sticky partitioner: keyless records go to one partition until a batch's worth went
/// there (in one batch, or in several sent by the linger), then move on to the next. (The
/// producer once moved on only when a batch filled to exactly its size, which
/// records of one size never hit: every keyless record of a producer went to one partition,
/// and `rill-bench produce` loaded one shard of two.)
#[test]
fn keyless_records_spread_over_every_partition_batch_by_batch() {
    let b = TestBroker::start(2, &[]);
    b.client().create_topic("spread", 4, 1, vec![]).unwrap();
    const N: usize = 2_000;
    // Batches end by overflow (a long linger), then by linger (a short one).
    for (linger, per_batch) in [(Duration::from_secs(2), 10), (Duration::from_millis(1), 1)] {
        let producers: Vec<Producer> = (0..2)
            .map(|_| {
                Producer::new(
                    config(&b),
                    ProducerConfig {
                        linger,
                        batch_bytes: 10 * 1_100,
                        ..ProducerConfig::default()
                    },
                )
                .unwrap()
            })
            .collect();
        for p in &producers {
            let mut reports = Vec::with_capacity(N);
            for i in 0..N {
                let value = vec![b'v'; 1_000 + i % 7];
                reports.push(p.send(ProducerRecord::new("spread", &value)).unwrap());
                if per_batch == 1 && i % 50 == 49 {
                    // Let the linger send what is open.
                    p.flush().unwrap();
                }
            }
            p.flush().unwrap();
            let mut per_partition = [0usize; 4];
            let flushed = Instant::now();
            for r in reports {
                let (meta, settled) = r.wait_settled();
                // Settled by the flush that returned before, not when looked at.
                assert!(settled <= flushed);
                per_partition[meta.unwrap().partition as usize] += 1;
            }
            assert_eq!(per_partition.iter().sum::<usize>(), N);
            for (partition, n) in per_partition.iter().enumerate() {
                // Batch by batch in turn: no partition is short of its share by more than a
                // few batches.
                assert!(
                    *n >= N / 4 - 60,
                    "linger {linger:?}: partition {partition} got {n} of {N}: {per_partition:?}"
                );
            }
        }
    }
}

#[test]
fn a_producer_against_a_stopped_broker_blocks_then_fails_with_bounded_memory() {
    let mut b = TestBroker::start(1, &[]);
    b.client().create_topic("stalled", 1, 1, vec![]).unwrap();
    const BUFFER: usize = 64 << 10;
    let p = Producer::new(
        config(&b),
        ProducerConfig {
            acks: Acks::All,
            linger: Duration::ZERO,
            buffer_memory: BUFFER,
            max_block: Duration::from_millis(500),
            delivery_timeout: Duration::from_secs(2),
            request_timeout: Duration::from_secs(1),
            retry_backoff: Duration::from_millis(50),
            ..ProducerConfig::default()
        },
    )
    .unwrap();
    p.partitions_for("stalled").unwrap();
    b.kill();
    let value = vec![7u8; 1024];
    let start = Instant::now();
    let mut reports = Vec::new();
    let err = loop {
        match p.send(ProducerRecord::new("stalled", &value)) {
            Ok(r) => reports.push(r),
            Err(e) => break e,
        }
        assert!(
            p.buffered_bytes() <= BUFFER + 2048,
            "buffer grew past its bound"
        );
        assert!(start.elapsed() < DEADLINE, "send never blocked");
    };
    assert!(matches!(err, ClientError::Timeout(_)), "{err}");
    assert!(err.to_string().contains("buffer memory"), "{err}");
    assert!(!reports.is_empty());
    // What was buffered fails once the delivery timeout passes, and the memory comes back.
    let first = reports.remove(0).wait();
    assert!(
        first.is_err(),
        "a record was acknowledged by a stopped broker"
    );
    let start = Instant::now();
    while p.buffered_bytes() > 0 {
        assert!(start.elapsed() < DEADLINE, "buffered records never expired");
        std::thread::sleep(Duration::from_millis(20));
    }
    for r in reports {
        assert!(r.wait().is_err());
    }
}

#[test]
fn the_client_works_from_a_tokio_application() {
    let b = TestBroker::start(2, &[]);
    b.client().create_topic("async", 2, 1, vec![]).unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .unwrap();
    let cfg = config(&b);
    let got: Vec<String> = rt.block_on(async move {
        let p = Producer::new(cfg.clone(), ProducerConfig::default()).unwrap();
        let mut offsets = Vec::new();
        for i in 0..200 {
            let v = format!("async-{i}");
            let md = p
                .send(ProducerRecord::new("async", v.as_bytes()).partition(i % 2))
                .unwrap()
                .await
                .unwrap();
            offsets.push(md.offset.unwrap());
        }
        assert_eq!(
            offsets.iter().filter(|o| **o == 0).count(),
            2,
            "each partition starts at 0"
        );
        let mut c = rill::client::Consumer::new(cfg, Default::default()).unwrap();
        c.assign("async", None, StartFrom::Beginning).unwrap();
        let mut values = Vec::new();
        while values.len() < 200 {
            let records = tokio::time::timeout(DEADLINE, c.next_records())
                .await
                .expect("records in time")
                .unwrap();
            values.extend(
                records
                    .iter()
                    .map(|r| String::from_utf8(r.value().unwrap_or_default().to_vec()).unwrap()),
            );
        }
        values
    });
    let mut got = got;
    got.sort();
    let mut want: Vec<String> = (0..200).map(|i| format!("async-{i}")).collect();
    want.sort();
    assert_eq!(got, want);
}

#[test]
fn the_client_works_from_plain_threads() {
    let b = TestBroker::start(2, &[]);
    b.client().create_topic("threads", 3, 1, vec![]).unwrap();
    let p = Arc::new(Producer::new(config(&b), ProducerConfig::default()).unwrap());
    let senders: Vec<_> = (0..4)
        .map(|t| {
            let p = p.clone();
            std::thread::spawn(move || {
                let reports: Vec<_> = (0..1000)
                    .map(|i| {
                        let v = format!("t{t}-{i}");
                        p.send(
                            ProducerRecord::new("threads", v.as_bytes())
                                .key(format!("t{t}").as_bytes()),
                        )
                        .unwrap()
                    })
                    .collect();
                let n = reports.len();
                for r in reports {
                    r.wait().unwrap();
                }
                n
            })
        })
        .collect();
    let sent: usize = senders.into_iter().map(|t| t.join().unwrap()).sum();
    assert_eq!(sent, 4000);
    let got = std::thread::spawn({
        let b_cfg = b.bootstrap();
        move || {
            let mut c =
                rill::client::Consumer::new(ClientConfig::new(b_cfg), Default::default()).unwrap();
            c.assign("threads", None, StartFrom::Beginning).unwrap();
            let mut out = Vec::new();
            let start = Instant::now();
            while out.len() < 4000 {
                out.extend(c.poll(Duration::from_millis(200)).unwrap().to_owned());
                assert!(start.elapsed() < DEADLINE);
            }
            out
        }
    })
    .join()
    .unwrap();
    // Per thread (one key each), values come back in the order sent.
    for t in 0..4 {
        let prefix = format!("t{t}-");
        let seq: Vec<usize> = got
            .iter()
            .filter_map(|r| {
                std::str::from_utf8(r.value.as_deref().unwrap_or_default())
                    .unwrap()
                    .strip_prefix(&prefix)
                    .map(|s| s.parse().unwrap())
            })
            .collect();
        assert_eq!(seq, (0..1000).collect::<Vec<_>>());
    }
}

/// Requests of every size share one connection per shard: small ones are written by the
/// producer's sender itself, large ones by the connection's writer thread, several in flight.
/// Each delivery report names the offset its record was stored at, and every key's records
/// are stored in send order.
#[test]
fn requests_small_and_large_interleaved_keep_order_and_their_reports() {
    let b = TestBroker::start(2, &[]);
    b.client().create_topic("sizes", 4, 1, vec![]).unwrap();
    const N: usize = 600;
    let p = Producer::new(
        config(&b),
        ProducerConfig {
            acks: Acks::All,
            linger: Duration::from_millis(1),
            batch_bytes: 64 << 10,
            max_in_flight: 5,
            ..ProducerConfig::default()
        },
    )
    .unwrap();
    // Sizes from a few bytes to past the inline bound (256 KiB), in a fixed pseudo-random mix.
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut sent = Vec::with_capacity(N);
    for i in 0..N {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let len = match x % 10 {
            0 => 300_000 + (x % 200_000) as usize,
            1..=3 => 20_000 + (x % 60_000) as usize,
            _ => 8 + (x % 900) as usize,
        };
        let key = format!("k{}", i % 8);
        let mut value = format!("{key}:{i}:").into_bytes();
        value.resize(len.max(value.len()), b'x');
        let report = p
            .send(ProducerRecord::new("sizes", &value).key(key.as_bytes()))
            .unwrap();
        sent.push((key, value, report));
    }
    p.flush().unwrap();
    let records = consume_exactly(&b, "sizes", StartFrom::Beginning, N);
    let stored: HashMap<(u32, u64), &Vec<u8>> = records
        .iter()
        .map(|r| ((r.partition, r.offset), r.value.as_ref().unwrap()))
        .collect();
    let mut last: HashMap<String, (u32, u64)> = HashMap::new();
    for (key, value, report) in sent {
        let meta = report.wait().unwrap();
        let at = (
            meta.partition,
            meta.offset.expect("acks=all reports the offset"),
        );
        assert_eq!(stored.get(&at).map(|v| v.as_slice()), Some(&value[..]));
        if let Some(prev) = last.insert(key.clone(), at) {
            assert_eq!(prev.0, at.0, "{key} moved partition");
            assert!(prev.1 < at.1, "{key}: stored out of send order");
        }
    }
}

/// `partition_request_bytes` bounds what one request carries of a partition: at one batch's
/// size, every request carries one batch, however many wait behind the one in flight.
#[test]
fn a_request_carries_at_most_partition_request_bytes_of_a_partition() {
    use rill::client::{RequestObserver, RequestTiming};
    use std::sync::Mutex;
    let b = TestBroker::start(1, &[]);
    b.client().create_topic("bounded", 1, 1, vec![]).unwrap();
    let per_request: Arc<Mutex<Vec<usize>>> = Arc::default();
    let seen = per_request.clone();
    let p = Producer::new(
        config(&b),
        ProducerConfig {
            linger: Duration::from_millis(1),
            batch_bytes: 4 << 10,
            partition_request_bytes: 5 << 10,
            max_in_flight: 1,
            request_observer: Some(RequestObserver(Arc::new(move |t: RequestTiming| {
                seen.lock().unwrap().push(t.batches)
            }))),
            ..ProducerConfig::default()
        },
    )
    .unwrap();
    const N: usize = 2_000;
    let reports: Vec<_> = (0..N)
        .map(|i| {
            let value = format!("{i:04}").repeat(256);
            p.send(ProducerRecord::new("bounded", value.as_bytes()).partition(0))
                .unwrap()
        })
        .collect();
    p.flush().unwrap();
    for r in reports {
        r.wait().unwrap();
    }
    let per_request = per_request.lock().unwrap().clone();
    // 1 KiB records in 4 KiB batches: about N / 4 batches, each its own request.
    assert!(per_request.len() >= N / 5, "{} requests", per_request.len());
    assert!(
        per_request.iter().all(|&n| n == 1),
        "requests of several batches: {per_request:?}"
    );
    assert_eq!(
        consume_exactly(&b, "bounded", StartFrom::Beginning, N).len(),
        N
    );
}
