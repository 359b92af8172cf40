//! What the replicas of a partition store, read straight from their segment files (for tests
//! that every replica holds the same batches below the high watermark), and a partition's
//! leader and ISR as a broker's metadata shows them.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use rill::batch::BatchHeader;
use rill::client::{
    Acks, Client, ClientConfig, Consumer, ConsumerConfig, Producer, ProducerConfig, StartFrom,
};
use rill::protocol::messages::PartitionMeta;

use crate::{partition_dir, segment_files, TestBroker, TestCluster, DEADLINE};

/// Every whole batch in a replica's segment files: base offset -> the batch's bytes.
pub fn stored_batches(dir: &Path) -> BTreeMap<u64, Vec<u8>> {
    let mut out = BTreeMap::new();
    for f in segment_files(dir) {
        let bytes = std::fs::read(&f).expect("segment");
        let mut at = 0usize;
        while at + rill::batch::HEADER_LEN <= bytes.len() {
            let Some(h) = BatchHeader::decode(&bytes[at..]) else {
                break; // preallocated zeros
            };
            let end = at + h.length as usize;
            if h.length == 0 || end > bytes.len() {
                break;
            }
            out.insert(h.base_offset, bytes[at..end].to_vec());
            at = end;
        }
    }
    out
}

/// The batches wholly below `hw`.
pub fn batches_below(batches: &BTreeMap<u64, Vec<u8>>, hw: u64) -> Vec<(u64, Vec<u8>)> {
    batches
        .iter()
        .filter(|(_, b)| BatchHeader::decode(b).is_some_and(|h| h.next_offset() <= hw))
        .map(|(o, b)| (*o, b.clone()))
        .collect()
}

/// Waits until every replica of `topic`-`p` (one on each of the cluster's brokers) holds
/// exactly the leader's batches below the high watermark `hw` (a follower may still be
/// writing the newest ones), and checks that they cover `0..hw` contiguously.
pub fn assert_replicas_equal(c: &TestCluster, topic: &str, p: u32, hw: u64) {
    let start = Instant::now();
    loop {
        let all: Vec<Vec<(u64, Vec<u8>)>> = c
            .nodes
            .iter()
            .map(|b| batches_below(&stored_batches(&partition_dir(&b.data_dir(), topic, p)), hw))
            .collect();
        let covered = all[0]
            .last()
            .and_then(|(_, b)| BatchHeader::decode(b))
            .map_or(0, |h| h.next_offset());
        if covered == hw && all.iter().all(|r| *r == all[0]) {
            // Contiguous: each batch starts where the previous ended.
            let mut next = all[0].first().map_or(0, |(o, _)| *o);
            for (o, b) in &all[0] {
                assert_eq!(*o, next, "{topic}-{p}: a gap before {o}");
                next = BatchHeader::decode(b).unwrap().next_offset();
            }
            return;
        }
        assert!(
            start.elapsed() < DEADLINE,
            "{topic}-{p}: replicas differ below {hw}: {:?}",
            all.iter()
                .map(|r| (r.len(), r.last().map(|(o, _)| *o)))
                .collect::<Vec<_>>()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Partition `p` of `topic` as broker `b` sees it (None: no answer or no such partition).
pub fn partition_meta(b: &TestBroker, topic: &str, p: u32) -> Option<PartitionMeta> {
    let mut c = Client::connect(b.client_config()).ok()?;
    let md = c.refresh_metadata().ok()?;
    md.topics.get(topic)?.partitions.get(p as usize).cloned()
}

/// Waits until `f` holds for partition `p` as broker `b` sees it, and returns it.
pub fn wait_partition(
    b: &TestBroker,
    topic: &str,
    p: u32,
    what: &str,
    f: impl Fn(&PartitionMeta) -> bool,
) -> PartitionMeta {
    let start = Instant::now();
    loop {
        if let Some(m) = partition_meta(b, topic, p) {
            if f(&m) {
                return m;
            }
        }
        assert!(
            start.elapsed() < DEADLINE,
            "{topic}-{p}: {what}: {:?}",
            partition_meta(b, topic, p)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Flags that make a SIGKILLed broker fenced (and its partitions re-led) within seconds.
pub const FAST_FENCING: &[&str] = &[
    "--broker-session-timeout-ms",
    "3000",
    "--broker-heartbeat-interval-ms",
    "500",
];

/// Creates `topic` with RF 3 and `configs`, and waits until every broker's metadata shows
/// each partition with a leader (CreateTopics answers once the broker asked applied it; the
/// others follow a moment later).
pub fn create_topic_rf3(c: &TestCluster, topic: &str, partitions: u32, configs: &[(&str, &str)]) {
    let mut cfg = c.nodes[0].client_config();
    cfg.request_timeout = Duration::from_secs(60);
    Client::connect(cfg)
        .expect("client")
        .create_topic(
            topic,
            partitions,
            3,
            configs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        )
        .expect("RF 3 on 3 brokers");
    for b in &c.nodes {
        for p in 0..partitions {
            wait_partition(b, topic, p, "known with a leader", |m| m.leader != 0);
        }
    }
}

/// Reads `topic`-`p` from offset 0 up to `hw` through `bootstrap`: offset -> value.
pub fn read_partition(bootstrap: String, topic: &str, p: u32, hw: u64) -> BTreeMap<u64, Vec<u8>> {
    let mut cfg = ClientConfig::new(bootstrap);
    cfg.request_timeout = Duration::from_secs(30);
    let mut c = Consumer::new(cfg, ConsumerConfig::default()).expect("consumer");
    c.assign(topic, Some(vec![p]), StartFrom::Beginning)
        .expect("assign");
    let mut out = BTreeMap::new();
    let start = Instant::now();
    while c.position(topic, p).unwrap_or(0) < hw {
        match c.poll(Duration::from_millis(200)) {
            Ok(records) => {
                for r in records.iter() {
                    out.insert(r.offset(), r.value().unwrap_or_default().to_vec());
                }
            }
            Err(e) => eprintln!("poll: {e}"),
        }
        assert!(
            start.elapsed() < DEADLINE,
            "read only to {:?} of {hw}",
            c.position(topic, p)
        );
    }
    out
}

/// The producer replication tests drive: acks=all, a 2 ms linger, 16 KiB batches, retries
/// 200 ms apart (a failover takes seconds).
pub fn acks_all_producer(bootstrap: String) -> Producer {
    Producer::new(
        ClientConfig::new(bootstrap),
        ProducerConfig {
            acks: Acks::All,
            linger: Duration::from_millis(2),
            batch_bytes: 16 << 10,
            retry_backoff: Duration::from_millis(200),
            ..ProducerConfig::default()
        },
    )
    .expect("producer")
}
