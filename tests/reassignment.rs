//! Partition reassignment on real broker processes (issue 14, "reassignment without a dip"):
//! a partition moved off its leader and another replica under a continuous acks=all
//! producer, the ISR never below the replication factor while it moves; a broker drained the
//! same way; preferred leaders restored after a restart moved them; bad input refused with one
//! line and nothing changed. Waits are on conditions with generous deadlines; nothing is timed.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rill::client::producer::ProducerRecord;
use rill::client::{Client, ClientConfig};
use rill::protocol::messages::{PartitionMeta, TopicMeta};
use rill_testkit::{
    batches_below, has_partition_dir, partition_dir, read_partition, stored_batches, TestBroker,
    TestCluster, DEADLINE,
};

/// Sessions short enough that a killed broker is fenced within seconds, long enough that a
/// broker stopped for a couple of CLI calls is not.
const SESSIONS: &[&str] = &[
    "--broker-session-timeout-ms",
    "6000",
    "--broker-heartbeat-interval-ms",
    "500",
];

/// Three voters plus `extra` brokers that are not voters (node ids 4, 5, ...).
struct Cluster {
    c: TestCluster,
    extra: Vec<TestBroker>,
}

impl Cluster {
    fn start(extra: usize) -> Cluster {
        let c = TestCluster::start(3, 2, SESSIONS);
        c.wait_leader(&[1, 2, 3]);
        let mut brokers: Vec<TestBroker> = (0..extra)
            .map(|i| c.non_voter(4 + i as u32, 2, SESSIONS))
            .collect();
        for b in &mut brokers {
            b.launch();
        }
        for b in &mut brokers {
            b.wait_ready();
        }
        let cluster = Cluster { c, extra: brokers };
        // Every broker registered (placement uses them all).
        let n = 3 + extra;
        wait_for("every broker registered", || {
            client_of(cluster.get(1))
                .cluster_info()
                .is_ok_and(|i| i.brokers.iter().filter(|b| b.state == "alive").count() == n)
        });
        cluster
    }

    fn get(&self, id: u32) -> &TestBroker {
        match id {
            1..=3 => &self.c.nodes[id as usize - 1],
            _ => &self.extra[id as usize - 4],
        }
    }

    fn get_mut(&mut self, id: u32) -> &mut TestBroker {
        match id {
            1..=3 => &mut self.c.nodes[id as usize - 1],
            _ => &mut self.extra[id as usize - 4],
        }
    }

    fn ids(&self) -> Vec<u32> {
        (1..=3 + self.extra.len() as u32).collect()
    }
}

fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(start.elapsed() < DEADLINE, "timed out waiting: {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn client_of(b: &TestBroker) -> Client {
    let mut cfg = ClientConfig::new(b.bootstrap());
    cfg.request_timeout = Duration::from_secs(60);
    Client::connect(cfg).expect("client")
}

fn topic_meta(b: &TestBroker, topic: &str) -> Option<TopicMeta> {
    let mut c = Client::connect(ClientConfig::new(b.bootstrap())).ok()?;
    c.refresh_metadata().ok()?.topics.get(topic).cloned()
}

fn partition_meta(b: &TestBroker, topic: &str, p: u32) -> Option<PartitionMeta> {
    topic_meta(b, topic)?.partitions.get(p as usize).cloned()
}

fn sorted(mut v: Vec<u32>) -> Vec<u32> {
    v.sort_unstable();
    v
}

/// Creates `topic` with RF 3 and min.insync.replicas 2 and waits for full ISRs everywhere.
fn create(c: &Cluster, topic: &str, partitions: u32) {
    client_of(c.get(1))
        .create_topic(
            topic,
            partitions,
            3,
            vec![("min.insync.replicas".into(), "2".into())],
        )
        .expect("created");
    for id in c.ids() {
        for p in 0..partitions {
            wait_for(&format!("{topic}-{p} with a full ISR at {id}"), || {
                partition_meta(c.get(id), topic, p).is_some_and(|m| m.isr.len() == 3)
            });
        }
    }
}

/// A value of a size that varies with `i` (a few bytes to ~3 KiB).
fn value(i: usize) -> String {
    let len = (i * 7919) % 3000;
    format!("{i}:{}", "x".repeat(len))
}

/// A continuous, retrying acks=all producer over `partitions`, collecting what was
/// acknowledged where.
struct Load {
    stop: Arc<AtomicBool>,
    acked: Arc<Mutex<BTreeMap<(u32, u64), String>>>,
    thread: JoinHandle<usize>,
}

impl Load {
    fn start(bootstrap: String, topic: &'static str, partitions: Vec<u32>) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let acked: Arc<Mutex<BTreeMap<(u32, u64), String>>> = Arc::default();
        let (s, a) = (stop.clone(), acked.clone());
        let thread = std::thread::spawn(move || {
            let producer = rill_testkit::acks_all_producer(bootstrap);
            let mut failed = 0;
            let mut inflight = std::collections::VecDeque::new();
            let mut collect = |v: String, r: rill::client::DeliveryFuture| match r.wait() {
                Ok(md) => {
                    a.lock()
                        .unwrap()
                        .insert((md.partition, md.offset.expect("offset")), v);
                }
                Err(_) => failed += 1,
            };
            let mut i = 0usize;
            while !s.load(Ordering::SeqCst) {
                let v = value(i);
                let p = partitions[i % partitions.len()];
                let r = producer
                    .send(ProducerRecord::new(topic, v.as_bytes()).partition(p))
                    .expect("send");
                inflight.push_back((v, r));
                i += 1;
                // A bounded window: acknowledgements are collected as they come.
                while inflight.len() > 200 {
                    let (v, r) = inflight.pop_front().unwrap();
                    collect(v, r);
                }
            }
            let _ = producer.flush();
            for (v, r) in inflight {
                collect(v, r);
            }
            failed
        });
        Load {
            stop,
            acked,
            thread,
        }
    }

    fn acked(&self) -> usize {
        self.acked.lock().unwrap().len()
    }

    fn wait_acked(&self, n: usize) {
        wait_for(&format!("{n} acknowledged"), || self.acked() >= n);
    }

    fn finish(self) -> BTreeMap<(u32, u64), String> {
        self.stop.store(true, Ordering::SeqCst);
        let failed = self.thread.join().expect("producer thread");
        eprintln!("producer: {failed} sends failed after retries");
        Arc::try_unwrap(self.acked).unwrap().into_inner().unwrap()
    }
}

/// Polls a broker's metadata of `topic` until stopped: the smallest ISR each partition had,
/// and whether a reassignment was ever seen in progress.
struct IsrWatch {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<(BTreeMap<u32, usize>, bool)>,
}

impl IsrWatch {
    fn start(bootstrap: String, topic: &'static str, partitions: Vec<u32>) -> IsrWatch {
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut min: BTreeMap<u32, usize> = BTreeMap::new();
            let mut moving = false;
            let mut client: Option<Client> = None;
            while !s.load(Ordering::SeqCst) {
                if client.is_none() {
                    client = Client::connect(ClientConfig::new(bootstrap.clone())).ok();
                }
                let t = client
                    .as_mut()
                    .and_then(|c| c.refresh_metadata().ok())
                    .and_then(|md| md.topics.get(topic).cloned());
                match t {
                    Some(t) => {
                        for p in t
                            .partitions
                            .iter()
                            .filter(|p| partitions.contains(&p.partition))
                        {
                            let m = min.entry(p.partition).or_insert(usize::MAX);
                            *m = (*m).min(p.isr.len());
                            moving |= !p.adding.is_empty();
                        }
                    }
                    None => client = None,
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            (min, moving)
        });
        IsrWatch { stop, thread }
    }

    fn finish(self) -> (BTreeMap<u32, usize>, bool) {
        self.stop.store(true, Ordering::SeqCst);
        self.thread.join().expect("watch thread")
    }
}

/// The partition's state from its leader, asked through `b` (whose metadata may lag a
/// leader change by a moment: asked again until it routes right).
fn leader_state(b: &TestBroker, topic: &str, p: u32) -> rill::protocol::messages::PartitionState {
    let start = Instant::now();
    loop {
        let mut c = client_of(b);
        match c
            .refresh_metadata()
            .map(|_| ())
            .and_then(|_| c.partition_state(topic, p))
        {
            Ok(s) => return s,
            Err(e) => assert!(start.elapsed() < DEADLINE, "{topic}-{p}: {e}"),
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// After a move: every acknowledged record of `topic`-`p` reads back at its offset from the
/// leader, and every replica holds exactly the leader's batches below the high watermark.
fn check_partition(c: &Cluster, topic: &str, p: u32, acked: &BTreeMap<(u32, u64), String>) {
    let m = partition_meta(c.get(1), topic, p).expect("metadata");
    let leader = c.get(m.leader);
    let hw = leader_state(leader, topic, p).high_watermark;
    let mine: Vec<_> = acked.iter().filter(|((q, _), _)| *q == p).collect();
    assert!(!mine.is_empty(), "{topic}-{p}: nothing acknowledged");
    assert!(
        mine.iter().all(|((_, o), _)| *o < hw),
        "acknowledged past the high watermark {hw}"
    );
    let read = read_partition(leader.bootstrap(), topic, p, hw);
    for ((_, o), v) in mine {
        assert_eq!(
            read.get(o).map(|b| b.as_slice()),
            Some(v.as_bytes()),
            "{topic}-{p} offset {o}"
        );
    }
    let start = Instant::now();
    loop {
        let all: Vec<Vec<(u64, Vec<u8>)>> = m
            .replicas
            .iter()
            .map(|&b| {
                batches_below(
                    &stored_batches(&partition_dir(&c.get(b).data_dir(), topic, p)),
                    hw,
                )
            })
            .collect();
        let covered = all[0]
            .last()
            .and_then(|(_, b)| rill::batch::BatchHeader::decode(b))
            .map_or(0, |h| h.next_offset());
        if covered == hw && all.iter().all(|r| *r == all[0]) {
            let mut next = 0;
            for (o, b) in &all[0] {
                assert_eq!(*o, next, "{topic}-{p}: a gap before {o}");
                next = rill::batch::BatchHeader::decode(b).unwrap().next_offset();
            }
            return;
        }
        assert!(
            start.elapsed() < DEADLINE,
            "{topic}-{p}: replicas {:?} differ below {hw}: {:?}",
            m.replicas,
            all.iter()
                .map(|r| (r.len(), r.last().map(|(o, _)| *o)))
                .collect::<Vec<_>>()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// `rill topic reassign` through `b`, then waits until the move completed.
fn move_and_wait(b: &TestBroker, topic: &str, p: u32, replicas: &[u32]) {
    let list = replicas
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(",");
    let p_s = p.to_string();
    cli_ok(
        b,
        &[
            "topic",
            "reassign",
            topic,
            "--partition",
            &p_s,
            "--replicas",
            &list,
        ],
    );
    wait_for(&format!("{topic}-{p} moved to {replicas:?}"), || {
        partition_meta(b, topic, p).is_some_and(|m| m.adding.is_empty() && m.replicas == replicas)
    });
}

/// Runs the CLI expecting success; returns its stdout.
fn cli_ok(b: &TestBroker, args: &[&str]) -> String {
    let out = b.cli(args, None);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs the CLI expecting a refusal: non-zero exit, one line naming `what`.
fn cli_refused(b: &TestBroker, args: &[&str], what: &str) {
    let out = b.cli(args, None);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{args:?} was accepted");
    assert_eq!(
        err.trim().lines().count(),
        1,
        "{args:?}: not one line: {err}"
    );
    assert!(err.contains(what), "{args:?}: {err} does not say {what:?}");
}

#[test]
fn reassignment_under_load_keeps_the_isr_at_the_replication_factor_and_loses_nothing() {
    let c = Cluster::start(2);
    create(&c, "m", 5);
    // Only brokers that are not controller voters are held still below (a stopped voter
    // would stall the quorum, not the move): pick partitions a non-voter does not hold.
    let t = topic_meta(c.get(1), "m").expect("metadata");
    let missing_non_voter = |p: &PartitionMeta| (4..=5).find(|b| !p.replicas.contains(b));
    let moving: Vec<&PartitionMeta> = t
        .partitions
        .iter()
        .filter(|p| missing_non_voter(p).is_some())
        .collect();
    assert!(moving.len() >= 2, "{t:?}");
    let p0 = moving[0].clone();
    let pa = p0.partition;
    let held = missing_non_voter(&p0).unwrap();
    // Drop the leader and one follower; keep the other; add the two brokers not holding it,
    // the one held still last.
    let kept = *p0.replicas.iter().find(|&&b| b != p0.leader).unwrap();
    let dropped: Vec<u32> = p0.replicas.iter().copied().filter(|&b| b != kept).collect();
    let mut new: Vec<u32> = c
        .ids()
        .into_iter()
        .filter(|b| !p0.replicas.contains(b) && *b != held)
        .collect();
    new.push(held);
    assert_eq!(new.len(), 2);
    let target = vec![new[0], kept, new[1]];
    let pa_s = pa.to_string();

    let load = Load::start(c.get(kept).bootstrap(), "m", vec![pa]);
    let watch = IsrWatch::start(c.get(kept).bootstrap(), "m", vec![pa]);
    load.wait_acked(2000);
    // One new replica held still for a moment, so the move is seen in progress.
    c.get(held).signal(libc::SIGSTOP);
    let list = target
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(",");
    let reassign = ["topic", "reassign", "m", "--partition", &pa_s, "--replicas"];
    let out = cli_ok(c.get(1), &[&reassign[..], &[&list]].concat());
    assert!(out.contains("reassigning to replicas"), "{out}");
    // (`topic describe m` would wait on the held broker's partitions; the CLI's line is
    // checked on a topic it does not lead, below.)
    let during = partition_meta(c.get(1), "m", pa).unwrap();
    let mut adding = new.clone();
    adding.sort_unstable_by_key(|b| target.iter().position(|t| t == b));
    assert_eq!((during.adding, during.removing), (adding, dropped.clone()));
    c.get(held).signal(libc::SIGCONT);

    wait_for("the reassignment completes", || {
        partition_meta(c.get(1), "m", pa).is_some_and(|m| {
            m.adding.is_empty() && sorted(m.replicas.clone()) == sorted(target.clone())
        })
    });
    let done = partition_meta(c.get(1), "m", pa).unwrap();
    assert!(target.contains(&done.leader), "{done:?}");
    assert_eq!(sorted(done.isr.clone()), sorted(target.clone()));
    // Records keep being acknowledged by the new leader.
    let n = load.acked();
    load.wait_acked(n + 500);
    let acked = load.finish();
    let (min_isr, moving_seen) = watch.finish();
    assert!(moving_seen, "the watcher saw the move in progress");
    assert_eq!(
        min_isr.get(&pa).copied(),
        Some(3),
        "the ISR fell below 3: {min_isr:?}"
    );
    check_partition(&c, "m", pa, &acked);
    for b in &dropped {
        wait_for(&format!("broker {b} removed its copy"), || {
            !has_partition_dir(&c.get(*b).data_dir(), "m", pa)
        });
    }

    // Progress in `topic describe`, a second move refused, a cancel: a one-partition topic
    // gets a replica that cannot catch up (held still: a broker that is not the controller
    // leader, whose quorum goes on), then is put back.
    // RF 2 leaves three brokers out, so one is neither broker 1 nor the controller leader.
    client_of(c.get(1))
        .create_topic("one", 1, 2, vec![])
        .expect("created");
    wait_for("one-0 with a full ISR", || {
        partition_meta(c.get(1), "one", 0).is_some_and(|m| m.isr.len() == 2)
    });
    let p1 = partition_meta(c.get(1), "one", 0).unwrap();
    let controller = c.c.controller_seen_by(1) as u32;
    let z = *c
        .ids()
        .iter()
        .find(|b| !p1.replicas.contains(b) && **b != controller && **b != 1)
        .unwrap();
    c.get(z).signal(libc::SIGSTOP);
    let moved = format!("{z},{}", p1.replicas[1]);
    let reassign = ["topic", "reassign", "one", "--partition", "0", "--replicas"];
    cli_ok(c.get(1), &[&reassign[..], &[&moved]].concat());
    let described = cli_ok(c.get(1), &["topic", "describe", "one"]);
    let want = format!("reassigning adding [{z}] removing [{}]", p1.replicas[0]);
    assert!(described.contains(&want), "{described} lacks {want}");
    cli_refused(
        c.get(1),
        &[&reassign[..], &["1,2,3"]].concat(),
        "REASSIGNMENT_IN_PROGRESS",
    );
    let out = cli_ok(
        c.get(1),
        &["topic", "reassign", "one", "--partition", "0", "--cancel"],
    );
    assert!(out.contains("cancelled"), "{out}");
    c.get(z).signal(libc::SIGCONT);
    let after = partition_meta(c.get(1), "one", 0).unwrap();
    assert_eq!(after.replicas, p1.replicas);
    assert!(
        after.adding.is_empty() && after.removing.is_empty(),
        "{after:?}"
    );
    let described = cli_ok(c.get(1), &["topic", "describe", "one"]);
    assert!(!described.contains("reassigning"), "{described}");
    wait_for("z holds no copy of the cancelled move", || {
        !has_partition_dir(&c.get(z).data_dir(), "one", 0)
    });
}

#[test]
fn drain_broker_under_load_then_elect_preferred_after_a_restart() {
    let mut c = Cluster::start(1);
    create(&c, "d", 4);
    let before = topic_meta(c.get(1), "d").unwrap();
    let on4: Vec<u32> = before
        .partitions
        .iter()
        .filter(|p| p.replicas.contains(&4))
        .map(|p| p.partition)
        .collect();
    assert!(!on4.is_empty(), "{before:?}");

    // Bad input: one line, non-zero exit, nothing changed.
    let bad = [
        ("topic reassign nope --partition 0 --replicas 1,2,3", "nope"),
        ("topic reassign d --partition 9 --replicas 1,2,3", "d-9"),
        (
            "topic reassign d --partition 0 --replicas 1,2,9",
            "broker 9",
        ),
        ("topic reassign d --partition 0 --replicas 1,1,2", "twice"),
        (
            "topic reassign d --partition 0 --replicas 1",
            "min.insync.replicas",
        ),
        (
            "topic reassign d --partition 0 --cancel",
            "NO_REASSIGNMENT_IN_PROGRESS",
        ),
        ("cluster drain-broker 9", "broker 9"),
        ("cluster elect-preferred --topic nope", "nope"),
    ];
    for (args, what) in bad {
        let args: Vec<&str> = args.split(' ').collect();
        cli_refused(c.get(1), &args, what);
    }
    assert_eq!(
        topic_meta(c.get(1), "d").unwrap(),
        before,
        "a refused request changed the topic"
    );

    let all: Vec<u32> = (0..4).collect();
    let load = Load::start(c.get(1).bootstrap(), "d", all.clone());
    let watch = IsrWatch::start(c.get(1).bootstrap(), "d", all.clone());
    load.wait_acked(2000);
    let out = cli_ok(c.get(1), &["cluster", "drain-broker", "4", "--wait"]);
    assert!(
        out.contains("broker 4 holds no partition replicas"),
        "{out}"
    );
    let n = load.acked();
    load.wait_acked(n + 500);
    let acked = load.finish();
    let (min_isr, _) = watch.finish();
    assert!(
        min_isr.values().all(|&m| m == 3),
        "an ISR fell below 3: {min_isr:?}"
    );
    let drained = topic_meta(c.get(1), "d").unwrap();
    for p in &drained.partitions {
        assert!(!p.replicas.contains(&4), "{p:?}");
        assert_eq!(p.replicas.len(), 3);
        assert!(p.adding.is_empty(), "{p:?}");
    }
    for &p in &all {
        check_partition(&c, "d", p, &acked);
    }
    for &p in &on4 {
        wait_for("broker 4 removed its copies", || {
            !has_partition_dir(&c.get(4).data_dir(), "d", p)
        });
    }

    // A restart moves leadership away from a preferred leader; elect-preferred brings it back.
    let victim = drained.partitions[0].replicas[0];
    c.get_mut(victim).kill();
    wait_for("leadership moved off the killed broker", || {
        topic_meta(c.get(4), "d").is_some_and(|t| {
            t.partitions
                .iter()
                .all(|p| p.leader != victim && p.leader != 0)
        })
    });
    c.get_mut(victim).start_again();
    c.get_mut(victim).wait_ready();
    wait_for("the restarted broker is back in every ISR", || {
        topic_meta(c.get(4), "d").is_some_and(|t| t.partitions.iter().all(|p| p.isr.len() == 3))
    });
    let moved = topic_meta(c.get(4), "d").unwrap();
    assert!(
        moved.partitions.iter().any(|p| p.leader != p.replicas[0]),
        "{moved:?}"
    );
    let out = cli_ok(c.get(4), &["cluster", "elect-preferred"]);
    assert!(out.contains("moved to their preferred leader"), "{out}");
    wait_for("every partition led by its preferred replica", || {
        topic_meta(c.get(1), "d")
            .is_some_and(|t| t.partitions.iter().all(|p| p.leader == p.replicas[0]))
    });
    // A new replica of a partition whose log start moved (DeleteRecords) starts there: it
    // cannot fetch from 0, so it restarts empty at the leader's log start and catches up.
    let p0 = partition_meta(c.get(1), "d", 0).unwrap();
    let leader_dir = partition_dir(&c.get(p0.leader).data_dir(), "d", 0);
    let bases: Vec<u64> = stored_batches(&leader_dir).into_keys().collect();
    let start = bases[bases.len() / 2];
    assert!(start > 0);
    // A leader just elected learns the high watermark from its followers' next fetches
    // (as in Kafka); DeleteRecords stops at it.
    wait_for("the new leader's high watermark is back", || {
        leader_state(c.get(1), "d", 0).high_watermark > start
    });
    let out = cli_ok(
        c.get(1),
        &[
            "topic",
            "truncate",
            "d",
            "--partition",
            "0",
            "--before",
            &start.to_string(),
        ],
    );
    assert!(
        out.contains(&format!("log start offset is now {start}")),
        "{out}"
    );
    let target: Vec<u32> = vec![4, p0.replicas[1], p0.replicas[2]];
    move_and_wait(c.get(1), "d", 0, &target);
    let m = partition_meta(c.get(1), "d", 0).unwrap();
    let state = leader_state(c.get(m.leader), "d", 0);
    assert_eq!(state.log_start_offset, start);
    let hw = state.high_watermark;
    let from = |b: u32| -> Vec<(u64, Vec<u8>)> {
        batches_below(
            &stored_batches(&partition_dir(&c.get(b).data_dir(), "d", 0)),
            hw,
        )
        .into_iter()
        .filter(|(o, _)| *o >= start)
        .collect()
    };
    wait_for(
        "the new replica holds the leader's batches from its log start",
        || from(4) == from(m.leader),
    );
    // Nothing below the log start was copied: the new replica starts exactly there.
    let first = stored_batches(&partition_dir(&c.get(4).data_dir(), "d", 0))
        .into_keys()
        .next();
    assert_eq!(first, Some(start));
    // A replica moved away while its broker is down: on restart its copy is set aside
    // (under stray/, removed after --stray-log-retention-ms), not served nor left in topics/.
    c.get_mut(4).kill();
    move_and_wait(c.get(1), "d", 0, &[1, 2, 3]);

    assert!(has_partition_dir(&c.get(4).data_dir(), "d", 0));
    c.get_mut(4).start_again();
    c.get_mut(4).wait_ready();
    assert!(!has_partition_dir(&c.get(4).data_dir(), "d", 0));
    let strays: Vec<String> = std::fs::read_dir(c.get(4).data_dir().join("stray"))
        .expect("stray dir")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        strays
            .iter()
            .any(|n| n.starts_with("d~") && n.contains("-0.stray-")),
        "{strays:?}"
    );
    // And the cluster serves: a record produced now reads back.
    let tail = Load::start(c.get(2).bootstrap(), "d", vec![0]);
    tail.wait_acked(50);
    tail.finish();
}

/// Runs tests/kafka/reassign_kafkajs.js; returns its one JSON line.
fn kafkajs(args: &[&str]) -> serde_json::Value {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/kafka");
    let out = std::process::Command::new("node")
        .arg("reassign_kafkajs.js")
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| panic!("cannot run node ({e}): run .ci/run, or npm ci in {dir}"));
    assert!(
        out.status.success(),
        "reassign_kafkajs.js {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("one JSON object")
}

/// Runs `tests/kafka/admin.py elect-leaders`: (topic, partition) -> Kafka error code or 0.
fn elect_leaders(bootstrap: &str, kind: &str, partitions: &[&str]) -> BTreeMap<(String, i64), i64> {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/kafka/admin.py");
    let mut args = vec![script, "elect-leaders", bootstrap, kind];
    args.extend(partitions);
    let out = std::process::Command::new("python3")
        .args(&args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run python3 ({e}): run .ci/run"));
    assert!(
        out.status.success(),
        "admin.py elect-leaders: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).expect("JSON");
            let code = v["error"]["code"].as_i64().unwrap_or(0);
            let key = (
                v["topic"].as_str().unwrap().to_string(),
                v["partition"].as_i64().unwrap(),
            );
            (key, code)
        })
        .collect()
}

#[test]
fn kafka_admin_clients_move_a_partition_list_the_move_and_elect_preferred_leaders() {
    // Sessions long enough that a broker stopped while its move is listed stays registered.
    let long = [
        "--broker-session-timeout-ms",
        "60000",
        "--broker-heartbeat-interval-ms",
        "500",
    ];
    let mut c = TestCluster::start_kafka(3, 1, &long);
    c.wait_leader(&[1, 2, 3]);
    c.add_broker(1, &long, true);
    wait_for("every broker registered", || {
        client_of(&c.nodes[0])
            .cluster_info()
            .is_ok_and(|i| i.brokers.iter().filter(|b| b.state == "alive").count() == 4)
    });
    // The partition moves to the broker that is not a voter (Kafka's admin clients send to
    // the controller, which must not be the broker stopped below): the first topic placed
    // without it.
    let topic = (0..8)
        .map(|i| format!("kr{i}"))
        .find(|t| {
            client_of(&c.nodes[0])
                .create_topic(t, 1, 3, vec![("min.insync.replicas".into(), "2".into())])
                .expect("created");
            wait_for(&format!("{t}-0 with a full ISR"), || {
                partition_meta(&c.nodes[0], t, 0).is_some_and(|m| m.isr.len() == 3)
            });
            !partition_meta(&c.nodes[0], t, 0)
                .unwrap()
                .replicas
                .contains(&4)
        })
        .expect("a topic placed without broker 4");
    let topic = topic.as_str();
    let from = partition_meta(&c.nodes[0], topic, 0).unwrap().replicas;
    // Asked about the partition throughout: a broker that stays up and keeps it.
    let watch = from[1] as usize - 1;
    let spare = 4;
    let mut acked: BTreeMap<u64, String> = BTreeMap::new();
    let mut send = |from_i: usize, to_i: usize| {
        let p = rill_testkit::acks_all_producer(c.nodes[watch].bootstrap());
        let values: Vec<String> = (from_i..to_i).map(value).collect();
        let handles: Vec<_> = values
            .iter()
            .map(|v| {
                p.send(ProducerRecord::new(topic, v.as_bytes()).partition(0))
                    .expect("send")
            })
            .collect();
        let _ = p.flush();
        for (v, h) in values.into_iter().zip(handles) {
            let offset = h.wait().expect("acks=all").offset.expect("offset");
            acked.insert(offset, v);
        }
    };
    send(0, 300);

    // The new replica cannot catch up while stopped: the move stays listed.
    let target = vec![spare, from[1], from[2]];
    let target_s = target
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(",");
    let kafka = c.kafka_bootstrap(u64::from(from[1]));
    c.nodes[spare as usize - 1].signal(libc::SIGSTOP);
    let r = kafkajs(&["alter", &kafka, topic, "0", &target_s]);
    assert!(r["error"].is_null(), "{r}");
    let listed = kafkajs(&["list", &kafka]);
    let topics = listed["topics"].as_array().expect("topics");
    assert_eq!(topics.len(), 1, "{listed}");
    assert_eq!(topics[0]["name"], topic, "{listed}");
    let p = &topics[0]["partitions"][0];
    assert_eq!(p["partition"], 0, "{listed}");
    assert_eq!(p["addingReplicas"], serde_json::json!([spare]), "{listed}");
    assert_eq!(
        p["removingReplicas"],
        serde_json::json!([from[0]]),
        "{listed}"
    );
    let mut union = target.clone();
    union.push(from[0]);
    assert_eq!(p["replicas"], serde_json::json!(union), "{listed}");
    // Refused with Kafka's errors, nothing changed: a second move while one runs, a topic
    // that does not exist.
    let again = kafkajs(&[
        "alter",
        &kafka,
        topic,
        "0",
        &from
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(","),
    ]);
    assert_eq!(
        again["error"]["type"], "REASSIGNMENT_IN_PROGRESS",
        "{again}"
    );
    let nope = kafkajs(&["alter", &kafka, "nope", "0", &target_s]);
    assert_eq!(
        nope["error"]["type"], "UNKNOWN_TOPIC_OR_PARTITION",
        "{nope}"
    );
    assert_eq!(kafkajs(&["list", &kafka]), listed);
    // What kafkajs would not send: v1 with the replication factor change refused, a cancel
    // of a move that is not running, a negative broker id.
    let refused = |t: &str, replicas: Option<Vec<i32>>, version: i16, allow_rf: bool| {
        use kafka_protocol::messages::alter_partition_reassignments_request::{
            ReassignablePartition, ReassignableTopic,
        };
        use kafka_protocol::messages::{
            AlterPartitionReassignmentsRequest as Req, AlterPartitionReassignmentsResponse as Resp,
            ApiKey, BrokerId, TopicName,
        };
        let mut p = ReassignablePartition::default();
        p.partition_index = 0;
        p.replicas = replicas.map(|r| r.into_iter().map(BrokerId).collect());
        let mut t_ = ReassignableTopic::default();
        t_.name = TopicName(kafka_protocol::protocol::StrBytes::from_string(t.into()));
        t_.partitions = vec![p];
        let mut req = Req::default();
        req.timeout_ms = 30_000;
        req.allow_replication_factor_change = allow_rf;
        req.topics = vec![t_];
        let r: Resp =
            rill_testkit::kafka_call(&kafka, ApiKey::AlterPartitionReassignments, version, &req);
        r.responses[0].partitions[0].error_code
    };
    assert_eq!(
        refused("nope", None, 1, true),
        3,
        "UNKNOWN_TOPIC_OR_PARTITION"
    );
    assert_eq!(
        refused(topic, Some(vec![-1, 2, 3]), 0, true),
        39,
        "INVALID_REPLICA_ASSIGNMENT"
    );
    assert_eq!(
        kafkajs(&["list", &kafka]),
        listed,
        "a refused request changed the move"
    );

    c.nodes[spare as usize - 1].signal(libc::SIGCONT);
    wait_for("kr-0 moved", || {
        partition_meta(&c.nodes[watch], topic, 0)
            .is_some_and(|m| m.adding.is_empty() && m.replicas == target)
    });
    let done = kafkajs(&["list", &kafka]);
    assert_eq!(done["topics"], serde_json::json!([]), "{done}");
    let two: Vec<i32> = target[1..].iter().map(|&b| b as i32).collect();
    assert_eq!(
        refused(topic, Some(two.clone()), 1, false),
        38,
        "INVALID_REPLICATION_FACTOR"
    );
    assert_eq!(
        refused(topic, None, 1, true),
        85,
        "NO_REASSIGNMENT_IN_PROGRESS"
    );
    assert_eq!(
        partition_meta(&c.nodes[watch], topic, 0).unwrap().replicas,
        target
    );
    send(300, 400);
    let hw = acked.keys().last().unwrap() + 1;
    let batches = |b: u32| {
        batches_below(
            &stored_batches(&partition_dir(
                &c.nodes[b as usize - 1].data_dir(),
                topic,
                0,
            )),
            hw,
        )
    };
    wait_for("the new replica holds the leader's batches", || {
        let leader = partition_meta(&c.nodes[watch], topic, 0).unwrap().leader;
        let theirs = batches(leader);
        !theirs.is_empty() && target.iter().all(|&b| batches(b) == theirs)
    });

    // A controlled shutdown moves leadership off the preferred replica; ElectLeaders brings
    // it back, once; a partition that does not exist is refused.
    assert_eq!(
        partition_meta(&c.nodes[watch], topic, 0).unwrap().leader,
        spare
    );
    c.nodes[spare as usize - 1].terminate();
    wait_for("leadership moved off the stopped broker", || {
        partition_meta(&c.nodes[watch], topic, 0)
            .is_some_and(|m| m.leader != spare && m.leader != 0)
    });
    c.nodes[spare as usize - 1].start_again();
    c.nodes[spare as usize - 1].wait_ready();
    wait_for("the restarted broker back in the ISR", || {
        partition_meta(&c.nodes[watch], topic, 0).is_some_and(|m| m.isr.len() == 3)
    });
    let kafka = c.kafka_bootstrap(1);
    let r = elect_leaders(
        &kafka,
        "preferred",
        &[&format!("{topic}:0"), &format!("{topic}:5")],
    );
    assert_eq!(r[&(topic.to_string(), 0)], 0, "{r:?}");
    assert_eq!(
        r[&(topic.to_string(), 5)],
        3,
        "UNKNOWN_TOPIC_OR_PARTITION: {r:?}"
    );
    wait_for("the preferred replica leads again", || {
        partition_meta(&c.nodes[watch], topic, 0).is_some_and(|m| m.leader == spare)
    });
    let r = elect_leaders(&kafka, "preferred", &[&format!("{topic}:0")]);
    assert_eq!(r[&(topic.to_string(), 0)], 84, "ELECTION_NOT_NEEDED: {r:?}");
    let r = elect_leaders(&kafka, "unclean", &[&format!("{topic}:0")]);
    assert_eq!(r[&(topic.to_string(), 0)], 84, "ELECTION_NOT_NEEDED: {r:?}");

    // Everything acknowledged reads back where it was acknowledged.
    let read = read_partition(c.nodes[spare as usize - 1].bootstrap(), topic, 0, hw);
    for (o, v) in &acked {
        assert_eq!(
            read.get(o)
                .map(|b| String::from_utf8_lossy(b).into_owned())
                .as_ref(),
            Some(v),
            "offset {o}"
        );
    }
}
