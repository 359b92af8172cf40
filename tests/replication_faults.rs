//! Replication under faults on real broker processes (issue 14), what a payments user asks of
//! it: a leader cut off from the other brokers acknowledges no acks=all write, is deposed and
//! cuts its divergent tail once it is back; a slow follower leaves the ISR and rejoins; 20
//! rounds of SIGKILLing leaders under a keyed acks=all producer lose no acknowledged record
//! and break no key's order; a Kafka client (librdkafka) loses nothing acknowledged across a
//! leader's SIGKILL. The network faults run each broker in its own network namespace
//! ([`NetLab`]). Waits are on conditions with generous deadlines; nothing is timed.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rill::client::producer::{Acks, Producer, ProducerConfig, ProducerRecord};
use rill::client::ClientConfig;
use rill_testkit::{
    assert_replicas_equal, create_topic_rf3, partition_meta, read_partition, wait_partition,
    NetLab, Rng, TestCluster, DEADLINE, FAST_FENCING,
};

/// One record whose acknowledgement came back.
#[derive(Clone, Debug)]
struct Acked {
    partition: u32,
    offset: u64,
    key: String,
    /// The order it was sent in (per producer).
    seq: usize,
    value: String,
}

/// A value of a size that varies with `seq` (a few bytes to ~3 KiB).
fn value_of(key: &str, seq: usize) -> String {
    format!("{key}:{seq}:{}", "x".repeat((seq * 7919) % 3000))
}

fn producer(bootstrap: String, acks: Acks, retries: u32, timeout: Duration) -> Producer {
    Producer::new(
        ClientConfig::new(bootstrap),
        ProducerConfig {
            acks,
            linger: Duration::from_millis(2),
            batch_bytes: 16 << 10,
            retries,
            retry_backoff: Duration::from_millis(200),
            request_timeout: timeout,
            delivery_timeout: timeout.max(Duration::from_secs(120)),
            // A moved leader is learnt of soon even without an error first.
            metadata_max_age: Duration::from_secs(2),
            ..ProducerConfig::default()
        },
    )
    .expect("producer")
}

/// A keyed acks=all producer with retries, running until stopped: what it had acknowledged.
struct Traffic {
    acked: Arc<Mutex<Vec<Acked>>>,
    failed: Arc<Mutex<Vec<String>>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Traffic {
    /// Sends to `topic` through `bootstrap`, `keys` keys in turn (partitioned by key), or to
    /// `partition` only; at most `per_s` records a second, if given (the data a test leaves
    /// on a shared disk stays bounded).
    fn start(
        bootstrap: String,
        topic: &str,
        keys: usize,
        partition: Option<u32>,
        per_s: Option<u32>,
    ) -> Traffic {
        let acked: Arc<Mutex<Vec<Acked>>> = Arc::default();
        let failed: Arc<Mutex<Vec<String>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        // A request stuck on a broker cut off mid-request is given up (and retried at the new
        // leader) after 10 s.
        let p = producer(bootstrap, Acks::All, u32::MAX, Duration::from_secs(10));
        let thread =
            {
                let (acked, failed, stop) = (acked.clone(), failed.clone(), stop.clone());
                let topic = topic.to_string();
                std::thread::spawn(move || {
                    let mut inflight = std::collections::VecDeque::new();
                    let settle =
                        |(key, seq, r): (String, usize, rill::client::producer::DeliveryFuture)| {
                            match r.wait() {
                                Ok(md) => acked.lock().unwrap().push(Acked {
                                    partition: md.partition,
                                    offset: md.offset.expect("an offset"),
                                    value: value_of(&key, seq),
                                    key,
                                    seq,
                                }),
                                Err(e) => failed.lock().unwrap().push(format!("{key}:{seq}: {e}")),
                            }
                        };
                    let mut seq = 0usize;
                    let began = Instant::now();
                    while !stop.load(Ordering::SeqCst) {
                        if let Some(rate) = per_s {
                            let due = Duration::from_secs_f64(seq as f64 / f64::from(rate));
                            if let Some(ahead) = due.checked_sub(began.elapsed()) {
                                std::thread::sleep(ahead);
                            }
                        }
                        let key = format!("key{}", seq % keys);
                        let v = value_of(&key, seq);
                        let mut rec = ProducerRecord::new(&topic, v.as_bytes()).key(key.as_bytes());
                        if let Some(p) = partition {
                            rec = rec.partition(p);
                        }
                        let r = p.send(rec).expect("send");
                        inflight.push_back((key, seq, r));
                        seq += 1;
                        // A bounded window: acknowledgements are collected as they come.
                        while inflight.len() > 200 {
                            settle(inflight.pop_front().unwrap());
                        }
                    }
                    let _ = p.flush();
                    inflight.into_iter().for_each(settle);
                })
            };
        Traffic {
            acked,
            failed,
            stop,
            thread: Some(thread),
        }
    }

    fn acked(&self) -> usize {
        self.acked.lock().unwrap().len()
    }

    /// Waits until `n` more records than now are acknowledged.
    fn wait_more(&self, n: usize, what: &str) {
        let target = self.acked() + n;
        let start = Instant::now();
        while self.acked() < target {
            assert!(
                start.elapsed() < DEADLINE,
                "{what}: only {} of {target} acknowledged; failures: {:?}",
                self.acked(),
                self.failed
                    .lock()
                    .unwrap()
                    .iter()
                    .take(5)
                    .collect::<Vec<_>>()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Stops sending, waits for the last answers, and checks that none failed (retries
    /// outlast every fault the tests make); what was acknowledged.
    fn finish(mut self) -> Vec<Acked> {
        self.stop.store(true, Ordering::SeqCst);
        self.thread.take().unwrap().join().expect("producer thread");
        let acked = self.acked.lock().unwrap().clone();
        let failed = self.failed.lock().unwrap().clone();
        eprintln!("{} acknowledged, {} failed", acked.len(), failed.len());
        assert!(
            failed.is_empty(),
            "failed: {:?}",
            &failed[..failed.len().min(5)]
        );
        acked
    }
}

impl Drop for Traffic {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// Sends `values` to `topic`-0 through `bootstrap` and collects each one's outcome (the
/// offset, or the error).
fn send_all(
    bootstrap: String,
    acks: Acks,
    retries: u32,
    timeout: Duration,
    topic: &str,
    values: &[String],
) -> Vec<Result<u64, String>> {
    let p = producer(bootstrap, acks, retries, timeout);
    let reports: Vec<_> = values
        .iter()
        .map(|v| p.send(ProducerRecord::new(topic, v.as_bytes()).partition(0)))
        .collect();
    let _ = p.flush();
    reports
        .into_iter()
        .map(|r| {
            r.map_err(|e| e.to_string())?
                .wait()
                .map(|md| md.offset.expect("an offset"))
                .map_err(|e| e.to_string())
        })
        .collect()
}

/// Checks every acknowledged record of `topic` against what its partition's leader serves
/// (each at the offset its acknowledgement gave), each key's records in the order they were
/// sent, and every replica's batches equal below the last acknowledged offset.
fn check_acknowledged(c: &TestCluster, topic: &str, partitions: u32, acked: &[Acked]) {
    for p in 0..partitions {
        let mine: Vec<&Acked> = acked.iter().filter(|a| a.partition == p).collect();
        let Some(hw) = mine.iter().map(|a| a.offset + 1).max() else {
            continue;
        };
        let m = wait_partition(&c.nodes[0], topic, p, "a full ISR", |m| m.isr.len() == 3);
        let leader = &c.nodes[m.leader as usize - 1];
        let read = read_partition(leader.bootstrap(), topic, p, hw);
        for a in &mine {
            assert_eq!(
                read.get(&a.offset)
                    .map(|v| String::from_utf8_lossy(v).into_owned()),
                Some(a.value.clone()),
                "{topic}-{p}: record {}:{} acknowledged at offset {}",
                a.key,
                a.seq,
                a.offset
            );
        }
        assert_replicas_equal(c, topic, p, hw);
    }
    // Per-key order: a key's acknowledged records sit in the order they were sent.
    let mut by_key: BTreeMap<&str, Vec<&Acked>> = BTreeMap::new();
    for a in acked {
        by_key.entry(&a.key).or_default().push(a);
    }
    for (key, mut recs) in by_key {
        recs.sort_by_key(|a| a.seq);
        for w in recs.windows(2) {
            assert!(
                w[0].partition == w[1].partition && w[0].offset < w[1].offset,
                "{key}: record {} at {}-{} but the later {} at {}-{}",
                w[0].seq,
                w[0].partition,
                w[0].offset,
                w[1].seq,
                w[1].partition,
                w[1].offset
            );
        }
    }
}

/// Waits until broker `via` shows every partition of `topic` with all 3 replicas in its ISR.
fn wait_full_isrs(c: &TestCluster, via: u64, topic: &str, partitions: u32) {
    for p in 0..partitions {
        wait_partition(&c.nodes[via as usize - 1], topic, p, "a full ISR", |m| {
            m.isr.len() == 3
        });
    }
}

#[test]
fn a_leader_cut_off_from_the_other_brokers_is_deposed_and_cuts_its_divergent_tail() {
    let lab = NetLab::new(3);
    let c = TestCluster::start_in(&lab, 3, 1, FAST_FENCING, false);
    c.wait_leader(&[1, 2, 3]);
    create_topic_rf3(&c, "cut", 1, &[("min.insync.replicas", "2")]);
    let first = wait_partition(&c.nodes[0], "cut", 0, "a full ISR", |m| m.isr.len() == 3);
    let old = u64::from(first.leader);
    let others: Vec<u64> = (1..=3).filter(|&b| b != old).collect();
    let old_addr = c.nodes[old as usize - 1].bootstrap();
    let values = |from: usize, to: usize| -> Vec<String> {
        (from..to).map(|i| value_of("cut", i)).collect()
    };
    let long = Duration::from_secs(30);
    let mut acked: BTreeMap<u64, String> = BTreeMap::new();
    let sent = values(0, 300);
    for (v, r) in sent
        .iter()
        .zip(send_all(old_addr.clone(), Acks::All, 5, long, "cut", &sent))
    {
        acked.insert(r.expect("acks=all with a full ISR"), v.clone());
    }

    // Its controller and replication links go; its clients still reach it.
    lab.isolate_from_brokers(old);
    // acks=1 is the leader's word alone: it may take these while it still believes it leads.
    let leader_only = values(300, 310);
    let leader_only_acked: Vec<(u64, String)> = leader_only
        .iter()
        .zip(send_all(
            old_addr.clone(),
            Acks::Leader,
            0,
            long,
            "cut",
            &leader_only,
        ))
        .filter_map(|(v, r)| Some((r.ok()?, v.clone())))
        .collect();
    // acks=all needs a second replica, and none can reach it: nothing is acknowledged.
    let refused = values(310, 330);
    let outcomes = send_all(
        old_addr.clone(),
        Acks::All,
        0,
        Duration::from_secs(5),
        "cut",
        &refused,
    );
    assert!(
        outcomes.iter().all(Result::is_err),
        "a leader cut off from every follower acknowledged acks=all writes: {outcomes:?}"
    );
    // The controller (a majority without it) elects a new leader from the ISR, newer epoch.
    let after = wait_partition(
        &c.nodes[others[0] as usize - 1],
        "cut",
        0,
        "a new leader from the ISR",
        |m| {
            others.contains(&u64::from(m.leader))
                && first.isr.contains(&m.leader)
                && m.leader_epoch > first.leader_epoch
        },
    );
    // Writes go on at the new leader.
    let new_addr = c.nodes[after.leader as usize - 1].bootstrap();
    let sent = values(400, 700);
    for (v, r) in sent
        .iter()
        .zip(send_all(new_addr, Acks::All, 5, long, "cut", &sent))
    {
        acked.insert(r.expect("acks=all at the new leader"), v.clone());
    }

    lab.rejoin_brokers(old);
    // It learns it was deposed, follows, and is back in the ISR at the new epoch.
    wait_partition(
        &c.nodes[others[0] as usize - 1],
        "cut",
        0,
        "the old leader back in the ISR",
        |m| m.isr.contains(&(old as u32)) && m.leader_epoch == after.leader_epoch,
    );
    wait_partition(
        &c.nodes[old as usize - 1],
        "cut",
        0,
        "the old leader naming the new one",
        |m| m.leader == after.leader && m.leader_epoch == after.leader_epoch,
    );
    let hw = acked.keys().last().unwrap() + 1;
    let read = read_partition(c.nodes[after.leader as usize - 1].bootstrap(), "cut", 0, hw);
    for (o, v) in &acked {
        assert_eq!(
            read.get(o).map(|b| String::from_utf8_lossy(b).into_owned()),
            Some(v.clone()),
            "offset {o}"
        );
    }
    // What only the cut-off leader took is gone: the new leader wrote other records there.
    for (o, v) in &leader_only_acked {
        assert_ne!(
            read.get(o).map(|b| String::from_utf8_lossy(b).into_owned()),
            Some(v.clone()),
            "offset {o}: an acks=1 record of the deposed leader survived"
        );
    }
    if !leader_only_acked.is_empty() {
        let log = c.nodes[old as usize - 1].log_text();
        assert!(
            log.contains("cut the divergent tail"),
            "the deposed leader never cut its tail:\n{log}"
        );
    }
    eprintln!(
        "the cut-off leader took {} acks=1 records, refused {} acks=all ones",
        leader_only_acked.len(),
        outcomes.len()
    );
    assert_replicas_equal(&c, "cut", 0, hw);
}

#[test]
fn a_leader_cut_off_entirely_loses_its_partitions_and_rejoins_after_the_link_heals() {
    let lab = NetLab::new(3);
    let c = TestCluster::start_in(&lab, 3, 1, FAST_FENCING, false);
    c.wait_leader(&[1, 2, 3]);
    let partitions = 3;
    create_topic_rf3(&c, "gone", partitions, &[("min.insync.replicas", "2")]);
    let before: Vec<_> = (0..partitions)
        .map(|p| wait_partition(&c.nodes[0], "gone", p, "a full ISR", |m| m.isr.len() == 3))
        .collect();
    let victim = u64::from(before[0].leader);
    let via = (1..=3u64).find(|&b| b != victim).unwrap();
    let traffic = Traffic::start(
        c.nodes[via as usize - 1].bootstrap(),
        "gone",
        12,
        None,
        None,
    );
    traffic.wait_more(300, "before the cut");
    // Every link: the other brokers, the controller and the clients lose it at once.
    lab.cut(victim);
    let t = Instant::now();
    for (p, m) in before.iter().enumerate() {
        if u64::from(m.leader) == victim {
            wait_partition(
                &c.nodes[via as usize - 1],
                "gone",
                p as u32,
                "a new leader",
                |n| {
                    u64::from(n.leader) != victim
                        && n.leader != 0
                        && n.leader_epoch > m.leader_epoch
                },
            );
        }
    }
    eprintln!("{:?}: partitions moved off broker {victim}", t.elapsed());
    traffic.wait_more(300, "while it is cut off");
    eprintln!("{:?}: 300 more acknowledged", t.elapsed());
    lab.heal(victim);
    wait_full_isrs(&c, via, "gone", partitions);
    traffic.wait_more(300, "after it rejoined");
    let acked = traffic.finish();
    check_acknowledged(&c, "gone", partitions, &acked);
}

/// Sessions far longer than a test: a stopped or slowed broker stays registered (however
/// late its heartbeats), so only its lag can take it out of an ISR.
const LONG_SESSIONS: &[&str] = &[
    "--broker-session-timeout-ms",
    "600000",
    "--broker-heartbeat-interval-ms",
    "2000",
];

/// Creates `topic` (1 partition, RF 3, min.insync.replicas 2, `replica.lag.time.max.ms` 1500
/// and `configs`), waits for a full ISR; its metadata and a follower that is not the
/// controller (whose raft traffic is not what the caller tests).
fn lagging_topic(
    c: &TestCluster,
    controller: u64,
    topic: &str,
    configs: &[(&str, &str)],
) -> (rill::protocol::messages::PartitionMeta, u32) {
    let mut all = vec![
        ("min.insync.replicas", "2"),
        ("replica.lag.time.max.ms", "1500"),
    ];
    all.extend_from_slice(configs);
    create_topic_rf3(c, topic, 1, &all);
    let m = wait_partition(&c.nodes[0], topic, 0, "a full ISR", |m| m.isr.len() == 3);
    let follower = (1..=3u32)
        .find(|&b| b != m.leader && u64::from(b) != controller)
        .unwrap();
    (m, follower)
}

#[test]
fn a_slow_follower_leaves_the_isr_and_rejoins_once_its_link_is_fast_again() {
    let lab = NetLab::new(3);
    let c = TestCluster::start_in(&lab, 3, 1, LONG_SESSIONS, false);
    let controller = c.wait_leader(&[1, 2, 3]);
    let (m, slow) = lagging_topic(&c, controller, "slow", &[]);
    let leader = &c.nodes[m.leader as usize - 1];
    let traffic = Traffic::start(leader.bootstrap(), "slow", 10, Some(0), None);
    traffic.wait_more(300, "before");
    // 200 kbit/s, and 2 MiB more on the leader at once (acks=1, so not gated by the slow
    // follower): 80 s of transfer behind, whatever pace the loaded producer keeps, so it
    // cannot catch up within the 1.5 s lag time.
    lab.slow(u64::from(slow), 200, 1000);
    let bulk = producer(leader.bootstrap(), Acks::Leader, 3, Duration::from_secs(30));
    let big = vec![b'b'; 4096];
    let sent: Vec<_> = (0..512)
        .map(|_| {
            bulk.send(ProducerRecord::new("slow", &big).key(b"bulk").partition(0))
                .expect("send")
        })
        .collect();
    for r in sent {
        r.wait().expect("acks=1 with the leader up");
    }
    let shrunk = wait_partition(leader, "slow", 0, "the slow follower out of the ISR", |m| {
        !m.isr.contains(&slow)
    });
    assert_eq!(shrunk.leader, m.leader, "the leader stays");
    assert_eq!(shrunk.isr.len(), 2, "{shrunk:?}");
    // acks=all goes on with the other two (min.insync.replicas 2).
    traffic.wait_more(500, "with the slow follower out");
    lab.unslow(u64::from(slow));
    wait_partition(leader, "slow", 0, "the follower back in the ISR", |m| {
        m.isr.contains(&slow)
    });
    traffic.wait_more(300, "after it rejoined");
    let acked = traffic.finish();
    check_acknowledged(&c, "slow", 1, &acked);
}

/// SIGKILLs broker `victim`, which leads `topic`-`p` as `m` says, and waits until another
/// broker names a new leader at a newer epoch; returns that broker's id.
fn kill_leader(
    c: &mut TestCluster,
    victim: u64,
    topic: &str,
    p: u32,
    m: &rill::protocol::messages::PartitionMeta,
) -> u64 {
    c.node(victim).kill();
    let witness = (1..=3u64).find(|&b| b != victim).unwrap();
    wait_partition(
        &c.nodes[witness as usize - 1],
        topic,
        p,
        "a new leader",
        |n| u64::from(n.leader) != victim && n.leader != 0 && n.leader_epoch > m.leader_epoch,
    );
    witness
}

#[test]
fn twenty_rounds_of_sigkilling_leaders_lose_no_acknowledged_record_and_keep_key_order() {
    let mut rng = Rng::seeded();
    let partitions = 4;
    let mut c = TestCluster::start(3, 1, FAST_FENCING);
    c.wait_leader(&[1, 2, 3]);
    create_topic_rf3(&c, "kill", partitions, &[("min.insync.replicas", "2")]);
    for p in 0..partitions {
        wait_partition(&c.nodes[0], "kill", p, "a full ISR", |m| m.isr.len() == 3);
    }
    let traffic = Traffic::start(c.nodes[0].bootstrap(), "kill", 16, None, Some(300));
    traffic.wait_more(200, "before the first round");
    for round in 0..20 {
        // Some partition's leader, at a random moment.
        let p = rng.below(u64::from(partitions)) as u32;
        std::thread::sleep(Duration::from_millis(rng.below(1500)));
        let m = partition_meta(&c.nodes[0], "kill", p).expect("metadata");
        let victim = u64::from(m.leader);
        eprintln!(
            "round {round}: SIGKILL broker {victim}, leader of kill-{p} at epoch {}",
            m.leader_epoch
        );
        let witness = kill_leader(&mut c, victim, "kill", p, &m);
        c.node(victim).start_again();
        wait_full_isrs(&c, witness, "kill", partitions);
        traffic.wait_more(100, &format!("after round {round}"));
    }
    let acked = traffic.finish();
    check_acknowledged(&c, "kill", partitions, &acked);
}

/// A `clients.py` process whose stdout lines are collected as they come.
struct PythonClient {
    child: std::process::Child,
    lines: Arc<Mutex<Vec<String>>>,
    reader: Option<JoinHandle<()>>,
}

impl PythonClient {
    fn start(args: &[&str]) -> PythonClient {
        use std::io::BufRead;
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/kafka/clients.py");
        let mut child = std::process::Command::new("python3")
            .arg(script)
            .args(args)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| {
                panic!("python3 ({e}): run .ci/run, or pip install confluent-kafka")
            });
        let out = child.stdout.take().unwrap();
        let lines: Arc<Mutex<Vec<String>>> = Arc::default();
        let reader = {
            let lines = lines.clone();
            std::thread::spawn(move || {
                for l in std::io::BufReader::new(out).lines() {
                    let Ok(l) = l else { break };
                    lines.lock().unwrap().push(l);
                }
            })
        };
        PythonClient {
            child,
            lines,
            reader: Some(reader),
        }
    }

    fn count(&self) -> usize {
        self.lines.lock().unwrap().len()
    }

    /// Waits for it to exit successfully; its lines.
    fn finish(mut self) -> Vec<String> {
        let start = Instant::now();
        let status = loop {
            if let Some(s) = self.child.try_wait().expect("wait") {
                break s;
            }
            assert!(start.elapsed() < 3 * DEADLINE, "clients.py did not finish");
            std::thread::sleep(Duration::from_millis(50));
        };
        self.reader.take().unwrap().join().unwrap();
        assert!(status.success(), "clients.py failed: {status}");
        self.lines.lock().unwrap().clone()
    }
}

impl Drop for PythonClient {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn a_kafka_producer_loses_no_acknowledged_record_when_the_leader_is_sigkilled() {
    let mut c = TestCluster::start_kafka(3, 1, FAST_FENCING);
    c.wait_leader(&[1, 2, 3]);
    let partitions = 2;
    create_topic_rf3(&c, "ck", partitions, &[("min.insync.replicas", "2")]);
    let first = wait_partition(&c.nodes[0], "ck", 0, "a full ISR", |m| m.isr.len() == 3);
    let bootstrap = (1..=3)
        .map(|id| c.kafka_bootstrap(id))
        .collect::<Vec<_>>()
        .join(",");
    let count = 12000;
    let producer =
        PythonClient::start(&["produce-acked", &bootstrap, "ck", &count.to_string(), "800"]);
    let start = Instant::now();
    while producer.count() < 2000 {
        assert!(
            start.elapsed() < DEADLINE,
            "only {} delivered",
            producer.count()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let victim = u64::from(first.leader);
    let killed_at = producer.count();
    let witness = kill_leader(&mut c, victim, "ck", 0, &first);
    c.node(victim).start_again();
    let lines = producer.finish();
    let (last, delivered) = lines.split_last().expect("output");
    assert_eq!(
        last, "failed 0",
        "every record delivered (retried across the election)"
    );
    assert_eq!(delivered.len(), count);
    assert!(killed_at < count, "the leader died while the producer ran");
    // Every acknowledged record is read back by a Kafka consumer at its reported offset.
    let mut acked: BTreeMap<(u32, u64), String> = BTreeMap::new();
    for l in delivered {
        let mut f = l.splitn(3, '\t');
        let (p, o, v) = (f.next().unwrap(), f.next().unwrap(), f.next().unwrap());
        acked.insert((p.parse().unwrap(), o.parse().unwrap()), v.to_string());
    }
    for p in 0..partitions {
        wait_partition(&c.nodes[witness as usize - 1], "ck", p, "a full ISR", |m| {
            m.isr.len() == 3
        });
        let read = PythonClient::start(&[
            "consume-to-end",
            &c.kafka_bootstrap(witness),
            "ck",
            &p.to_string(),
        ])
        .finish();
        let read: BTreeMap<u64, String> = read
            .iter()
            .map(|l| {
                let j: serde_json::Value = serde_json::from_str(l).expect("json");
                (
                    j["offset"].as_u64().unwrap(),
                    j["value"].as_str().unwrap().to_string(),
                )
            })
            .collect();
        for ((q, o), v) in acked.range((p, 0)..(p + 1, 0)) {
            assert_eq!(read.get(o), Some(v), "{q}-{o}");
        }
        let hw = acked
            .range((p, 0)..(p + 1, 0))
            .map(|((_, o), _)| o + 1)
            .max()
            .unwrap_or(0);
        assert_replicas_equal(&c, "ck", p, hw);
    }
}

#[test]
fn a_client_whose_bootstrap_broker_died_asks_another_for_metadata() {
    let mut c = TestCluster::start(3, 1, FAST_FENCING);
    c.wait_leader(&[1, 2, 3]);
    create_topic_rf3(&c, "boot", 3, &[("min.insync.replicas", "2")]);
    let before: Vec<_> = (0..3)
        .map(|p| wait_partition(&c.nodes[0], "boot", p, "a full ISR", |m| m.isr.len() == 3))
        .collect();
    let mut client =
        rill::client::Client::connect(ClientConfig::new(c.nodes[0].bootstrap())).expect("client");
    client.refresh_metadata().expect("metadata");
    c.node(1).kill();
    // Its partitions move; the client learns where from the brokers it knew of.
    let start = Instant::now();
    loop {
        let md = client
            .refresh_metadata()
            .expect("metadata from a live broker while the bootstrap one is down");
        let moved = (0..3).all(|p| {
            let m = &md.topics["boot"].partitions[p];
            m.leader != 1
                && m.leader != 0
                && (before[p].leader != 1 || m.leader_epoch > before[p].leader_epoch)
        });
        if moved {
            break;
        }
        assert!(
            start.elapsed() < DEADLINE,
            "partitions never moved off broker 1"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Partition 0's (log start, log end) at broker `b`, from DescribePartitions at its shard.
fn log_range(b: &rill_testkit::TestBroker, topic: &str) -> Option<(u64, u64)> {
    let mut c = rill::client::Client::connect(ClientConfig::new(b.bootstrap())).ok()?;
    c.refresh_metadata().ok()?;
    let s = c.partition_state(topic, 0).ok()?;
    Some((s.log_start_offset, s.log_end_offset))
}

#[test]
fn a_follower_whose_next_records_were_deleted_by_retention_starts_over_at_the_leaders_log_start() {
    // Retention runs twice a second.
    let mut flags = LONG_SESSIONS.to_vec();
    flags.extend(["--retention-check-interval-ms", "500"]);
    let c = TestCluster::start(3, 1, &flags);
    let controller = c.wait_leader(&[1, 2, 3]);
    let small_segments = [("segment.bytes", "65536"), ("retention.bytes", "262144")];
    let (m, behind) = lagging_topic(&c, controller, "ret", &small_segments);
    let leader = &c.nodes[m.leader as usize - 1];
    let values = |from: usize, to: usize| -> Vec<String> {
        (from..to).map(|i| value_of("ret", i)).collect()
    };
    let long = Duration::from_secs(30);
    let mut acked: BTreeMap<u64, String> = BTreeMap::new();
    let mut send = |from: usize, to: usize| {
        let sent = values(from, to);
        for (v, r) in sent.iter().zip(send_all(
            leader.bootstrap(),
            Acks::All,
            5,
            long,
            "ret",
            &sent,
        )) {
            acked.insert(r.expect("acks=all with two in the ISR"), v.clone());
        }
    };
    send(0, 100);
    let stopped = &c.nodes[behind as usize - 1];
    let (_, its_end) = log_range(stopped, "ret").expect("the follower's log");
    stopped.signal(libc::SIGSTOP);
    wait_partition(
        leader,
        "ret",
        0,
        "the stopped follower out of the ISR",
        |m| !m.isr.contains(&behind),
    );
    // Megabytes more: retention deletes the leader's oldest segments, those the stopped
    // follower would fetch next among them.
    let mut next = 100;
    let start = Instant::now();
    while log_range(leader, "ret").is_none_or(|(s, _)| s <= its_end) {
        send(next, next + 200);
        next += 200;
        assert!(
            start.elapsed() < DEADLINE,
            "retention never passed {its_end}"
        );
    }
    stopped.signal(libc::SIGCONT);
    wait_partition(leader, "ret", 0, "the follower back in the ISR", |m| {
        m.isr.contains(&behind)
    });
    send(next, next + 100);
    assert!(
        stopped.log_text().contains("started the log over"),
        "{}",
        stopped.log_text()
    );
    // What the leader still has is read back where it was acknowledged. Its start is taken
    // after the read: retention (every 500 ms) may delete more from the front meanwhile, and
    // what is still there after the read was there all through it (a start taken before the
    // read failed CI once, the last 100 records having pushed it over retention again).
    let hw = acked.keys().last().unwrap() + 1;
    let read = read_partition(leader.bootstrap(), "ret", 0, hw);
    let (leader_start, _) = log_range(leader, "ret").expect("leader's log");
    for (o, v) in acked.range(leader_start..) {
        assert_eq!(
            read.get(o).map(|b| String::from_utf8_lossy(b).into_owned()),
            Some(v.clone()),
            "offset {o}"
        );
    }
    // ...and every replica holds the same batches from where all of them start.
    let start = Instant::now();
    loop {
        let all: Vec<Vec<(u64, Vec<u8>)>> = c
            .nodes
            .iter()
            .map(|b| {
                let dir = rill_testkit::partition_dir(&b.data_dir(), "ret", 0);
                rill_testkit::stored_batches(&dir).into_iter().collect()
            })
            .collect();
        let from = all
            .iter()
            .map(|r| r.first().map_or(0, |(o, _)| *o))
            .max()
            .unwrap();
        let common: Vec<Vec<&(u64, Vec<u8>)>> = all
            .iter()
            .map(|r| {
                r.iter()
                    .filter(|(o, b)| {
                        *o >= from
                            && rill::batch::BatchHeader::decode(b)
                                .is_some_and(|h| h.next_offset() <= hw)
                    })
                    .collect()
            })
            .collect();
        if !common[0].is_empty() && common.iter().all(|r| *r == common[0]) {
            break;
        }
        assert!(
            start.elapsed() < DEADLINE,
            "replicas differ in {from}..{hw}: {:?}",
            common
                .iter()
                .map(|r| (
                    r.len(),
                    r.first().map(|(o, _)| *o),
                    r.last().map(|(o, _)| *o)
                ))
                .collect::<Vec<_>>()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn a_follower_behind_a_log_start_inside_a_batch_starts_over_at_that_batch() {
    let c = TestCluster::start(3, 1, LONG_SESSIONS);
    let controller = c.wait_leader(&[1, 2, 3]);
    let (m, behind) = lagging_topic(&c, controller, "mid", &[]);
    let leader = &c.nodes[m.leader as usize - 1];
    let long = Duration::from_secs(30);
    let mut acked: BTreeMap<u64, String> = BTreeMap::new();
    let mut send = |from: usize, to: usize| {
        let sent: Vec<String> = (from..to).map(|i| value_of("mid", i)).collect();
        for (v, r) in sent.iter().zip(send_all(
            leader.bootstrap(),
            Acks::All,
            5,
            long,
            "mid",
            &sent,
        )) {
            acked.insert(r.expect("acks=all with two in the ISR"), v.clone());
        }
    };
    send(0, 100);
    let stopped = &c.nodes[behind as usize - 1];
    let (_, its_end) = log_range(stopped, "mid").expect("the follower's log");
    stopped.signal(libc::SIGSTOP);
    wait_partition(
        leader,
        "mid",
        0,
        "the stopped follower out of the ISR",
        |m| !m.isr.contains(&behind),
    );
    send(100, 600);
    // DeleteRecords up to the second record of a batch the stopped follower never had.
    let leader_dir = rill_testkit::partition_dir(&leader.data_dir(), "mid", 0);
    let base = rill_testkit::stored_batches(&leader_dir)
        .into_iter()
        .filter_map(|(o, b)| rill::batch::BatchHeader::decode(&b).map(|h| (o, h.record_count)))
        .find(|&(o, n)| o > its_end && n >= 2)
        .map(|(o, _)| o)
        .expect("a batch of several records past the follower's end");
    let cut = base + 1;
    let mut cl = rill::client::Client::connect(ClientConfig::new(leader.bootstrap())).unwrap();
    assert_eq!(cl.truncate("mid", 0, cut).unwrap(), cut);
    stopped.signal(libc::SIGCONT);
    wait_partition(leader, "mid", 0, "the follower back in the ISR", |m| {
        m.isr.contains(&behind)
    });
    send(600, 700);
    // It holds the leader's batches from the one the log start lies in.
    let hw = acked.keys().last().unwrap() + 1;
    let start = Instant::now();
    loop {
        let from_base = |b: &rill_testkit::TestBroker| -> Vec<(u64, Vec<u8>)> {
            let dir = rill_testkit::partition_dir(&b.data_dir(), "mid", 0);
            rill_testkit::batches_below(&rill_testkit::stored_batches(&dir), hw)
                .into_iter()
                .filter(|(o, _)| *o >= base)
                .collect()
        };
        let (mine, theirs) = (from_base(stopped), from_base(leader));
        // Its own log start then follows the leader's, inside that batch.
        let its_start = std::fs::read(
            rill_testkit::partition_dir(&stopped.data_dir(), "mid", 0).join("log-start-offset"),
        )
        .ok()
        .and_then(|b| Some(u64::from_le_bytes(b.get(..8)?.try_into().ok()?)));
        if !mine.is_empty() && mine == theirs && mine[0].0 == base && its_start == Some(cut) {
            break;
        }
        assert!(
            start.elapsed() < DEADLINE,
            "follower from {:?} (log start {its_start:?}), leader from {:?}",
            mine.first().map(|(o, _)| *o),
            theirs.first().map(|(o, _)| *o)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // Everything acknowledged from the log start on reads back where it was acknowledged.
    let read = read_partition(leader.bootstrap(), "mid", 0, hw);
    for (o, v) in acked.range(cut..) {
        assert_eq!(
            read.get(o).map(|b| String::from_utf8_lossy(b).into_owned()),
            Some(v.clone()),
            "offset {o}"
        );
    }
}
