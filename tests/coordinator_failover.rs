//! Group coordinators follow the leadership of their `__consumer_offsets` partition (issues
//! 13 and 14): on 3 brokers the offsets topic is created with 3 replicas, a group's
//! coordinator moves when its broker is SIGKILLed or stopped with SIGTERM, every
//! acknowledged commit is still there (read from another broker), a restarted member
//! resumes exactly after the committed offsets, and the killed broker, restarted, rejoins
//! the ISR of the offsets partitions. With rill's group consumer and with a Kafka client
//! (confluent-kafka, `tests/kafka/clients.py`, which `.ci/run` installs).

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rill::client::producer::{Acks, Producer, ProducerConfig, ProducerRecord};
use rill::client::{
    Client, ClientConfig, Delivery, GroupConsumer, GroupConsumerConfig, OffsetAndMetadata, Offsets,
};
use rill::protocol::messages::PartitionMeta;
use rill_testkit::{TestCluster, DEADLINE};

const OFFSETS_TOPIC: &str = "__consumer_offsets";
const TOPIC: &str = "orders";
const PARTITIONS: u32 = 6;
const RECORDS: usize = 3000;

/// A SIGKILLed broker is fenced (its partitions re-led) within seconds; groups form at once.
const FLAGS: &[&str] = &[
    "--broker-session-timeout-ms",
    "3000",
    "--broker-heartbeat-interval-ms",
    "500",
    "--group-initial-rebalance-delay-ms",
    "0",
];

fn wait_until(what: &str, cond: impl FnMut() -> bool) {
    wait_showing(what, cond, String::new);
}

/// As [`wait_until`]; a timeout also says what `show` tells of the state then.
fn wait_showing(what: &str, mut cond: impl FnMut() -> bool, show: impl Fn() -> String) {
    let start = Instant::now();
    while !cond() {
        assert!(
            start.elapsed() < DEADLINE,
            "timed out waiting for {what} {}",
            show()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn client_via(c: &TestCluster, id: u32) -> Client {
    let mut cfg = ClientConfig::new(c.nodes[id as usize - 1].bootstrap());
    cfg.request_timeout = Duration::from_secs(60);
    Client::connect(cfg).expect("client")
}

/// The broker whose native ports include `addr`'s.
fn broker_at(c: &TestCluster, addr: SocketAddr) -> u32 {
    let i = c
        .nodes
        .iter()
        .position(|b| (b.port..b.port + b.shards as u16).contains(&addr.port()))
        .unwrap_or_else(|| panic!("no broker listens on {addr}"));
    i as u32 + 1
}

/// The broker coordinating `group`, as broker `via` answers FindCoordinator, once it
/// names one for which `ok` holds (the first ask creates the offsets topic).
fn coordinator(c: &TestCluster, via: u32, group: &str, ok: impl Fn(u32) -> bool) -> u32 {
    let mut found = 0;
    wait_until(
        &format!("a coordinator of {group} via broker {via}"),
        || {
            let Ok(mut client) =
                Client::connect(ClientConfig::new(c.nodes[via as usize - 1].bootstrap()))
            else {
                return false;
            };
            found = client
                .find_coordinator(group)
                .map_or(0, |addr| broker_at(c, addr));
            found != 0 && ok(found)
        },
    );
    found
}

/// The committed offsets of `group` (partition -> next offset to read), asked of its
/// coordinator through broker `via`, once it answers.
fn committed(c: &TestCluster, via: u32, group: &str) -> BTreeMap<u32, u64> {
    let mut got = BTreeMap::new();
    wait_until(&format!("the offsets of {group} via broker {via}"), || {
        let mut client = client_via(c, via);
        let Ok(at) = client.find_coordinator(group) else {
            return false;
        };
        match client.fetch_offsets(at, group, Vec::new()) {
            Ok(offsets) => {
                got = offsets
                    .into_iter()
                    .filter(|(t, ..)| t == TOPIC)
                    .filter_map(|(_, p, o, _)| o.map(|o| (p, o)))
                    .collect();
                true
            }
            Err(_) => false,
        }
    });
    got
}

fn offsets_partitions(c: &TestCluster, via: u32) -> Vec<PartitionMeta> {
    let mut client = client_via(c, via);
    client
        .refresh_metadata()
        .ok()
        .and_then(|md| md.topics.get(OFFSETS_TOPIC).map(|t| t.partitions.clone()))
        .unwrap_or_default()
}

/// The offsets topic as broker `via` sees it, once every partition has 3 replicas in sync.
fn wait_offsets_topic_in_sync(c: &TestCluster, via: u32, members: &[u32]) -> Vec<PartitionMeta> {
    let mut parts = Vec::new();
    wait_until(
        "every offsets partition with its 3 replicas in sync",
        || {
            parts = offsets_partitions(c, via);
            !parts.is_empty()
                && parts.iter().all(|p| {
                    p.replicas.len() == 3
                        && members.iter().all(|m| p.isr.contains(m))
                        && p.leader != 0
                })
        },
    );
    parts
}

/// `orders` with 6 partitions, 3 replicas, min.insync 2, and RECORDS acks=all keyed records
/// of 0-3 KiB in small batches; returns each partition's end offset.
fn topic_with_records(c: &TestCluster) -> BTreeMap<u32, u64> {
    client_via(c, 1)
        .create_topic(
            TOPIC,
            PARTITIONS,
            3,
            vec![("min.insync.replicas".into(), "2".into())],
        )
        .expect("created");
    let producer = Producer::new(
        ClientConfig::new(c.nodes[0].bootstrap()),
        ProducerConfig {
            acks: Acks::All,
            linger: Duration::from_millis(2),
            batch_bytes: 4 << 10,
            ..ProducerConfig::default()
        },
    )
    .expect("producer");
    let pending: Vec<_> = (0..RECORDS)
        .map(|i| {
            let value = format!("{i}:{}", "v".repeat((i * 7919) % 3000));
            producer
                .send(
                    ProducerRecord::new(TOPIC, value.as_bytes())
                        .key(format!("k{}", i % 97).as_bytes()),
                )
                .expect("send")
        })
        .collect();
    let mut ends: BTreeMap<u32, u64> = BTreeMap::new();
    for r in pending {
        let md = r.wait().expect("acknowledged");
        let end = ends.entry(md.partition).or_default();
        *end = (*end).max(md.offset.expect("offset") + 1);
    }
    assert_eq!(
        ends.len(),
        PARTITIONS as usize,
        "every partition has records"
    );
    ends
}

/// What a rill group member did: the (partition, offset) of every record it processed, and
/// the offsets of its last acknowledged commit.
#[derive(Default)]
struct Progress {
    processed: Vec<(u32, u64)>,
    acked: BTreeMap<u32, u64>,
    /// Commits acknowledged so far.
    commits: usize,
}

/// A rill group member on its own thread: polls small fetches, processes records (the first
/// `limit`; later ones are dropped unprocessed and never committed) and commits the
/// positions after those it processed synchronously after each poll, until stopped.
struct Member {
    progress: Arc<Mutex<Progress>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Member {
    fn start(bootstrap: String, group: &str, limit: usize) -> Member {
        let progress: Arc<Mutex<Progress>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let (p, s, group) = (progress.clone(), stop.clone(), group.to_string());
        let thread = std::thread::spawn(move || {
            let mut cfg = GroupConsumerConfig::new(group);
            cfg.delivery = Delivery::Manual;
            cfg.session_timeout = Duration::from_secs(6);
            cfg.heartbeat_interval = Duration::from_millis(300);
            cfg.consumer.partition_max_bytes = 4 << 10;
            cfg.consumer.fetch_max_bytes = 16 << 10;
            let mut client = ClientConfig::new(bootstrap);
            client.request_timeout = Duration::from_secs(15);
            let mut consumer = GroupConsumer::new(client, cfg).expect("group consumer");
            consumer.subscribe(&[TOPIC]).expect("subscribe");
            let mut positions: BTreeMap<u32, u64> = BTreeMap::new();
            while !s.load(Ordering::SeqCst) {
                // A poll fails while the coordinator moves; the next one rejoins.
                let Ok(records) = consumer.poll(Duration::from_millis(100)) else {
                    continue;
                };
                {
                    let mut p = p.lock().unwrap();
                    for r in records.iter() {
                        if p.processed.len() >= limit {
                            break;
                        }
                        p.processed.push((r.partition, r.offset()));
                        positions.insert(r.partition, r.offset() + 1);
                    }
                }
                // Only partitions still assigned: a commit naming another member's is refused.
                let owned: BTreeSet<u32> =
                    consumer.assignment().into_iter().map(|(_, p)| p).collect();
                let offsets: Offsets = positions
                    .iter()
                    .filter(|(part, _)| owned.contains(part))
                    .map(|(part, at)| ((TOPIC.to_string(), *part), OffsetAndMetadata::new(*at)))
                    .collect();
                if offsets.is_empty() {
                    continue;
                }
                if consumer.commit_offsets_sync(&offsets).is_ok() {
                    let mut p = p.lock().unwrap();
                    for ((_, part), o) in &offsets {
                        p.acked.insert(*part, o.offset);
                    }
                    p.commits += 1;
                }
            }
            let _ = consumer.close();
        });
        Member {
            progress,
            stop,
            thread: Some(thread),
        }
    }

    fn processed(&self) -> usize {
        self.progress.lock().unwrap().processed.len()
    }

    fn commits(&self) -> usize {
        self.progress.lock().unwrap().commits
    }

    fn stop(mut self) -> Progress {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            t.join().expect("member thread");
        }
        std::mem::take(&mut *self.progress.lock().unwrap())
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// The committed offsets hold every acknowledged commit: per partition at least the last
/// acknowledged offset, and never past what was processed (a commit whose answer was lost
/// in the failover may have been stored too).
fn assert_commits_kept(committed: &BTreeMap<u32, u64>, p: &Progress) {
    for (part, acked) in &p.acked {
        let at = committed.get(part).copied().unwrap_or(0);
        let processed_end = p
            .processed
            .iter()
            .filter(|(q, _)| q == part)
            .map(|(_, o)| o + 1)
            .max()
            .unwrap_or(0);
        assert!(
            at >= *acked && at <= processed_end,
            "partition {part}: committed {at}, last acknowledged {acked}, processed below \
             {processed_end}"
        );
    }
}

/// A second member resumes exactly at the committed offsets and reads to the ends: nothing
/// skipped, nothing before the committed offset read again.
fn assert_resumes_exactly(
    bootstrap: String,
    group: &str,
    committed: &BTreeMap<u32, u64>,
    ends: &BTreeMap<u32, u64>,
) {
    let member = Member::start(bootstrap, group, usize::MAX);
    let left: usize = ends
        .iter()
        .map(|(p, end)| (end - committed.get(p).copied().unwrap_or(0)) as usize)
        .sum();
    wait_until("the restarted member reading to the end", || {
        member.processed() >= left
    });
    let p = member.stop();
    assert_read_once(&p.processed, committed, ends);
}

/// `read` (partition, offset) holds every record of each partition from `from` (0 when not
/// named) to its end, once and in order, and nothing else.
fn assert_read_once(read: &[(u32, u64)], from: &BTreeMap<u32, u64>, ends: &BTreeMap<u32, u64>) {
    let mut per_partition: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
    for (part, o) in read {
        per_partition.entry(*part).or_default().push(*o);
    }
    for (part, end) in ends {
        let start = from.get(part).copied().unwrap_or(0);
        assert_eq!(
            per_partition.remove(part).unwrap_or_default(),
            (start..*end).collect::<Vec<_>>(),
            "partition {part}: every record from {start} to the end {end}, each once"
        );
    }
    assert!(
        per_partition.is_empty(),
        "other partitions read: {per_partition:?}"
    );
}

/// 3 brokers (2 shards each) with `orders` written, the offsets topic in sync, and the
/// broker coordinating `group` (the victim), a survivor and the third broker.
struct Failover {
    c: TestCluster,
    ends: BTreeMap<u32, u64>,
    victim: u32,
    survivor: u32,
    third: u32,
}

impl Failover {
    fn start(kafka: bool, group: &str) -> Failover {
        let c = if kafka {
            TestCluster::start_kafka(3, 2, FLAGS)
        } else {
            TestCluster::start(3, 2, FLAGS)
        };
        c.wait_leader(&[1, 2, 3]);
        let ends = topic_with_records(&c);
        let victim = coordinator(&c, 1, group, |_| true);
        wait_offsets_topic_in_sync(&c, 1, &[1, 2, 3]);
        let survivor = (1..=3u32).find(|&b| b != victim).unwrap();
        let third = (1..=3u32).find(|&b| b != victim && b != survivor).unwrap();
        Failover {
            c,
            ends,
            victim,
            survivor,
            third,
        }
    }

    fn bootstrap(&self, id: u32) -> String {
        self.c.nodes[id as usize - 1].bootstrap()
    }
}

#[test]
fn sigkill_of_the_coordinator_keeps_every_acknowledged_commit_of_a_rill_group() {
    let group = "payments";
    let mut f = Failover::start(false, group);
    let (victim, survivor, third) = (f.victim, f.survivor, f.third);
    // The offsets topic: 3 replicas per partition, leaders spread over the brokers.
    let parts = wait_offsets_topic_in_sync(&f.c, 1, &[1, 2, 3]);
    assert_eq!(parts.len(), 8, "--offsets-topic-partitions default");
    let leaders: BTreeSet<u32> = parts.iter().map(|p| p.leader).collect();
    assert!(
        leaders.len() >= 2,
        "offsets partition leaders spread: {leaders:?}"
    );
    let member = Member::start(f.bootstrap(survivor), group, RECORDS / 2);
    wait_until("commits acknowledged before the kill", || {
        member.commits() >= 5
    });
    f.c.node(u64::from(victim)).kill();
    let moved = coordinator(&f.c, survivor, group, |b| b != victim);
    assert_ne!(moved, victim);
    // The member rejoins at the new coordinator and its commits go on being acknowledged.
    let before = member.commits();
    wait_showing(
        "commits acknowledged by the new coordinator",
        || member.commits() >= before + 5 && member.processed() >= RECORDS / 2,
        || {
            let p = member.progress.lock().unwrap();
            format!(
                "(commits {} from {before}, processed {}, acknowledged {:?})",
                p.commits,
                p.processed.len(),
                p.acked
            )
        },
    );
    let progress = member.stop();
    let seen = committed(&f.c, third, group);
    assert_commits_kept(&seen, &progress);
    assert_eq!(
        seen,
        committed(&f.c, survivor, group),
        "one answer whoever is asked"
    );
    assert_resumes_exactly(f.bootstrap(third), group, &seen, &f.ends);
    // The killed broker comes back and rejoins the ISR of every offsets partition.
    f.c.node(u64::from(victim)).start_again();
    wait_offsets_topic_in_sync(&f.c, survivor, &[1, 2, 3]);
    // It serves the same committed offsets, whoever coordinates now.
    assert_eq!(
        committed(&f.c, victim, group),
        f.ends,
        "the resumed member committed to the ends"
    );
}

#[test]
fn sigterm_of_the_coordinator_moves_the_group_with_its_commits() {
    let group = "settlements";
    let mut f = Failover::start(false, group);
    let (victim, survivor) = (f.victim, f.survivor);
    let member = Member::start(f.bootstrap(survivor), group, usize::MAX);
    wait_until("commits acknowledged before the stop", || {
        member.commits() >= 5
    });
    let status = f.c.node(u64::from(victim)).terminate();
    assert!(status.success(), "controlled shutdown exits 0");
    let moved = coordinator(&f.c, survivor, group, |b| b != victim);
    assert_ne!(moved, victim);
    let total: usize = f.ends.values().map(|e| *e as usize).sum();
    // The group carries on to the end of every partition, committing as it goes.
    wait_until("the member processing every record", || {
        let p = member.progress.lock().unwrap();
        let distinct: BTreeSet<_> = p.processed.iter().collect();
        distinct.len() >= total && p.acked == f.ends
    });
    let progress = member.stop();
    let seen = committed(&f.c, survivor, group);
    assert_commits_kept(&seen, &progress);
    assert_eq!(seen, f.ends, "the last acknowledged commits, at the ends");
}

/// Runs `clients.py group` (confluent-kafka) until it read `max` records or `idle_s` passed
/// without one; it commits every 200 records and at the end, synchronously. Returns the
/// (partition, offset) of each record it read.
fn kafka_group_run(bootstrap: &str, group: &str, max: usize, idle_s: u32) -> Vec<(u32, u64)> {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/kafka/clients.py");
    let out = Command::new("python3")
        .args([
            script,
            "group",
            bootstrap,
            TOPIC,
            group,
            "range",
            &max.to_string(),
            &idle_s.to_string(),
        ])
        .stdin(Stdio::null())
        .output()
        .expect("python3 (run .ci/run, or pip install confluent-kafka)");
    assert!(
        out.status.success(),
        "clients.py group failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .filter_map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            Some((
                v.get("partition")?.as_u64()? as u32,
                v.get("offset")?.as_u64()?,
            ))
        })
        .collect()
}

#[test]
fn sigkill_of_the_coordinator_keeps_the_commits_of_a_kafka_client_group() {
    let group = "ledger";
    let mut f = Failover::start(true, group);
    let (victim, survivor, third) = (f.victim, f.survivor, f.third);
    let (at_survivor, at_third) = (
        f.c.kafka_bootstrap(u64::from(survivor)),
        f.c.kafka_bootstrap(u64::from(third)),
    );
    // A Kafka consumer reads part of the records and commits what it read.
    let first = kafka_group_run(&at_survivor, group, 1100, 30);
    assert_eq!(first.len(), 1100);
    let mut positions: BTreeMap<u32, u64> = BTreeMap::new();
    for (p, o) in &first {
        let at = positions.entry(*p).or_default();
        *at = (*at).max(o + 1);
    }
    assert_eq!(
        committed(&f.c, third, group),
        positions,
        "the Kafka client's commits"
    );
    f.c.node(u64::from(victim)).kill();
    coordinator(&f.c, survivor, group, |b| b != victim);
    // Read from another broker, after the failover: every commit is there.
    assert_eq!(
        committed(&f.c, third, group),
        positions,
        "kept through the failover"
    );
    // A new Kafka consumer resumes exactly there and reads the rest, each record once.
    let left: usize = f.ends.values().map(|e| *e as usize).sum::<usize>() - first.len();
    let second = kafka_group_run(&at_third, group, left, 30);
    assert_read_once(&second, &positions, &f.ends);
    assert_eq!(
        committed(&f.c, survivor, group),
        f.ends,
        "committed to the ends"
    );
    f.c.node(u64::from(victim)).start_again();
    wait_offsets_topic_in_sync(&f.c, survivor, &[1, 2, 3]);
}

/// A cluster with the topic's records (their ends), the broker leading partition 0 and
/// another one to connect through.
fn cluster_led_elsewhere() -> (TestCluster, BTreeMap<u32, u64>, u32, u32) {
    let c = TestCluster::start(3, 2, FLAGS);
    c.wait_leader(&[1, 2, 3]);
    let ends = topic_with_records(&c);
    let leader_of_0 = client_via(&c, 1)
        .refresh_metadata()
        .expect("metadata")
        .topics[TOPIC]
        .partitions[0]
        .leader;
    let via = (1..=3u32).find(|&b| b != leader_of_0).unwrap();
    (c, ends, leader_of_0, via)
}

/// The assign-mode consumer under the group consumer: a broker leading some of its
/// partitions dies while it reads; it goes on reading the other shards at once and follows
/// the moved leaders (a connect refused by the dead broker used to stop every fetch, for
/// good: the route was never refreshed).
#[test]
fn a_consumer_reads_on_when_a_leaders_broker_dies() {
    use rill::client::consumer::{Consumer, ConsumerConfig};
    use rill::client::StartFrom;
    let (mut c, ends, leader_of_0, via) = cluster_led_elsewhere();
    let cfg = ConsumerConfig {
        partition_max_bytes: 4 << 10,
        ..ConsumerConfig::default()
    };
    let mut consumer = Consumer::new(
        ClientConfig::new(c.nodes[via as usize - 1].bootstrap()),
        cfg,
    )
    .expect("consumer");
    consumer
        .assign(TOPIC, None, StartFrom::Beginning)
        .expect("assign");
    let mut read: Vec<(u32, u64)> = Vec::new();
    let mut poll = |read: &mut Vec<(u32, u64)>| {
        if let Ok(records) = consumer.poll(Duration::from_millis(100)) {
            read.extend(records.iter().map(|r| (r.partition, r.offset())));
        }
    };
    wait_until("a first part read", || {
        poll(&mut read);
        read.len() >= 100
    });
    c.node(u64::from(leader_of_0)).kill();
    wait_until("every record read after the leader's broker died", || {
        poll(&mut read);
        read.len() >= RECORDS
    });
    assert_read_once(&read, &BTreeMap::new(), &ends);
}

/// A partition assigned after its leader's broker died, while the consumer's cached metadata
/// still names that broker: the offset lookup follows the moved leader instead of failing.
/// It failed at once with "cannot reach broker", and a group member given such a partition
/// failed every rebalance the same way for as long as its cache stayed stale (a member
/// stopped for two minutes after its coordinator's broker was SIGKILLed).
#[test]
fn a_partition_assigned_after_its_leaders_broker_died_is_looked_up_at_the_new_leader() {
    use rill::client::consumer::{Consumer, ConsumerConfig};
    use rill::client::StartFrom;
    let (mut c, ends, leader_of_0, via) = cluster_led_elsewhere();
    let mut consumer = Consumer::new(
        ClientConfig::new(c.nodes[via as usize - 1].bootstrap()),
        ConsumerConfig::default(),
    )
    .expect("consumer");
    // The fetcher's metadata is cached here, with partition 0 led by `leader_of_0`.
    consumer
        .assign(TOPIC, Some(vec![1]), StartFrom::Beginning)
        .expect("assign partition 1");
    c.node(u64::from(leader_of_0)).kill();
    // Both lookups: the high watermark (at most the end: a new leader's may lag a moment),
    // then the log start, which is read from.
    consumer
        .assign(TOPIC, Some(vec![0]), StartFrom::End)
        .expect("assign partition 0 at its end");
    let end = consumer.position(TOPIC, 0).expect("a position");
    assert!(end <= ends[&0], "end {end} of {}", ends[&0]);
    consumer
        .unassign(&[(TOPIC.to_string(), 0)])
        .expect("unassign");
    consumer
        .assign(TOPIC, Some(vec![0]), StartFrom::Beginning)
        .expect("assign partition 0 from its start");
    assert_eq!(consumer.position(TOPIC, 0), Some(0));
    let mut read: Vec<(u32, u64)> = Vec::new();
    wait_until("partition 0 read from its new leader", || {
        if let Ok(records) = consumer.poll(Duration::from_millis(100)) {
            read.extend(records.iter().map(|r| (r.partition, r.offset())));
        }
        read.iter().filter(|(p, _)| *p == 0).count() as u64 >= ends[&0]
    });
    let zero: Vec<u64> = read.iter().filter(|(p, _)| *p == 0).map(|r| r.1).collect();
    assert_eq!(
        zero,
        (0..ends[&0]).collect::<Vec<_>>(),
        "partition 0, once, in order"
    );
}

/// A replica's log start offset, from its `log-start-offset` file (0 while there is none).
fn log_start_on(b: &rill_testkit::TestBroker, topic: &str, p: u32) -> u64 {
    let file = rill_testkit::partition_dir(&b.data_dir(), topic, p).join("log-start-offset");
    std::fs::read(file)
        .ok()
        .and_then(|bytes| Some(u64::from_le_bytes(bytes.get(..8)?.try_into().ok()?)))
        .unwrap_or(0)
}

/// The offsets log's compaction on a replicated partition: the leader snapshots and moves its
/// log start, the followers move theirs with it (so their disks do not keep every commit),
/// and a follower taking over as coordinator loads the same committed offsets from the
/// compacted log.
#[test]
fn a_compacted_offsets_partition_compacts_its_followers_and_fails_over_intact() {
    let group = "compacted";
    let mut flags = FLAGS.to_vec();
    flags.extend(["--offsets-compact-every", "20"]);
    let mut c = TestCluster::start(3, 2, &flags);
    c.wait_leader(&[1, 2, 3]);
    client_via(&c, 1)
        .create_topic(TOPIC, PARTITIONS, 3, Vec::new())
        .expect("created");
    let victim = coordinator(&c, 1, group, |_| true);
    wait_offsets_topic_in_sync(&c, 1, &[1, 2, 3]);
    let survivor = (1..=3u32).find(|&b| b != victim).unwrap();
    // Commits from outside the group (as reset-offsets does): 100 rounds over 6 partitions.
    let mut client = client_via(&c, survivor);
    let mut last: BTreeMap<u32, u64> = BTreeMap::new();
    for round in 0..100u64 {
        let at = client.find_coordinator(group).expect("coordinator");
        let offsets: Vec<(String, u32, u64, String)> = (0..PARTITIONS)
            .map(|p| {
                (
                    TOPIC.to_string(),
                    p,
                    round * 10 + u64::from(p),
                    String::new(),
                )
            })
            .collect();
        client
            .commit_offsets(at, group, "", -1, offsets.clone())
            .expect("commit acknowledged");
        last.extend(offsets.into_iter().map(|(_, p, o, _)| (p, o)));
    }
    let partition = rill::partitioner::partition_for_key(group.as_bytes(), 8);
    for b in &c.nodes {
        wait_showing(
            "every replica of the group's offsets partition past its first commits",
            || log_start_on(b, OFFSETS_TOPIC, partition) > 0,
            || format!("(log start {})", log_start_on(b, OFFSETS_TOPIC, partition)),
        );
    }
    assert_eq!(committed(&c, survivor, group), last);
    c.node(u64::from(victim)).kill();
    coordinator(&c, survivor, group, |b| b != victim);
    assert_eq!(
        committed(&c, survivor, group),
        last,
        "the new coordinator loads the compacted log"
    );
}
