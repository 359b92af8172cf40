//! Consumer groups end to end: group consumers (in-process and `rill consume --group`
//! processes) against real brokers. Assertions are on the data each member read.

use std::collections::{BTreeMap, BTreeSet};
use std::io::BufRead;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rill::client::{
    Client, ClientConfig, ClientError, Delivery, GroupConsumer, GroupConsumerConfig,
    OffsetAndMetadata, OffsetReset, Offsets, ProducerRecord, RebalanceListener, TopicPartition,
};
use rill::protocol::messages::{JoinGroupRequest, SyncGroupRequest};
use rill::protocol::ErrorCode;
use rill_testkit::{producer, TestBroker, DEADLINE};

/// Test settings: short session and heartbeat so rebalances settle fast on a loaded machine.
fn config(group: &str, delivery: Delivery, assignor: &str) -> GroupConsumerConfig {
    let mut cfg = GroupConsumerConfig::new(group);
    cfg.delivery = delivery;
    cfg.assignors = vec![assignor.to_string()];
    cfg.session_timeout = Duration::from_secs(6);
    cfg.heartbeat_interval = Duration::from_millis(200);
    cfg.rebalance_timeout = Duration::from_secs(30);
    cfg.auto_commit_interval = Duration::from_millis(200);
    cfg.metadata_max_age = Duration::from_millis(300);
    cfg
}

/// Produces `per_partition` values `p{P}-{i}` to each partition and waits for the acks.
fn produce_spread(b: &TestBroker, topic: &str, partitions: u32, range: std::ops::Range<usize>) {
    let p = producer(b, 1 << 10);
    let mut reports = Vec::new();
    for i in range {
        for part in 0..partitions {
            let v = format!("p{part}-{i}");
            reports.push(
                p.send(ProducerRecord::new(topic, v.as_bytes()).partition(part))
                    .unwrap(),
            );
        }
    }
    p.flush().unwrap();
    for r in reports {
        r.wait().unwrap();
    }
}

fn all_values(partitions: u32, range: std::ops::Range<usize>) -> BTreeSet<String> {
    range
        .flat_map(|i| (0..partitions).map(move |p| format!("p{p}-{i}")))
        .collect()
}

fn partition_of(value: &str) -> u32 {
    value[1..value.find('-').unwrap()].parse().unwrap()
}

/// What one in-process member reports to the test.
#[derive(Default)]
struct MemberView {
    read: Vec<String>,
    member_id: String,
    assignment: Vec<TopicPartition>,
    generation: Option<u32>,
    polls: usize,
    events: Vec<(&'static str, Vec<TopicPartition>)>,
}

struct Recorder(Arc<Mutex<MemberView>>);

impl RebalanceListener for Recorder {
    fn on_assigned(&mut self, p: &[TopicPartition]) {
        self.0.lock().unwrap().events.push(("assigned", p.to_vec()));
    }
    fn on_revoked(&mut self, p: &[TopicPartition]) {
        self.0.lock().unwrap().events.push(("revoked", p.to_vec()));
    }
    fn on_lost(&mut self, p: &[TopicPartition]) {
        self.0.lock().unwrap().events.push(("lost", p.to_vec()));
    }
}

/// A group consumer polling on its own thread until `stop`, reporting what it reads.
struct Member {
    view: Arc<Mutex<MemberView>>,
    thread: Option<JoinHandle<()>>,
}

fn spawn_member(
    b: &TestBroker,
    topic: &str,
    cfg: GroupConsumerConfig,
    stop: Arc<AtomicBool>,
) -> Member {
    let view = Arc::new(Mutex::new(MemberView::default()));
    let v = view.clone();
    let bootstrap = b.bootstrap();
    let topic = topic.to_string();
    let thread = std::thread::spawn(move || {
        let mut c = GroupConsumer::new(ClientConfig::new(bootstrap), cfg).unwrap();
        c.set_listener(Box::new(Recorder(v.clone())));
        c.subscribe(&[&topic]).unwrap();
        while !stop.load(Ordering::SeqCst) {
            let records = c.poll(Duration::from_millis(100)).unwrap();
            let mut view = v.lock().unwrap();
            for r in records.iter() {
                view.read
                    .push(String::from_utf8(r.value().unwrap_or_default().to_vec()).unwrap());
            }
            view.assignment = c.assignment();
            view.generation = c.generation();
            view.member_id = c.member_id();
            view.polls += 1;
        }
        c.close().unwrap();
    });
    Member {
        view,
        thread: Some(thread),
    }
}

impl Member {
    fn join(&mut self) {
        self.thread.take().unwrap().join().unwrap();
    }

    /// Its thread still runs (a failed poll ends it).
    fn alive(&self) -> bool {
        self.thread.as_ref().is_some_and(|t| !t.is_finished())
    }
}

/// Waits until `cond` holds, panicking with `what` at the deadline.
fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < DEADLINE, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The members agree on one generation and their assignments split `partitions` exactly.
fn settled(members: &[&Member], topic: &str, partitions: u32) -> bool {
    let views: Vec<_> = members.iter().map(|m| m.view.lock().unwrap()).collect();
    let generations: BTreeSet<_> = views.iter().map(|v| v.generation).collect();
    if generations.len() != 1 || generations.contains(&None) {
        return false;
    }
    let mut all: Vec<TopicPartition> = views.iter().flat_map(|v| v.assignment.clone()).collect();
    all.sort();
    let expected: Vec<TopicPartition> = (0..partitions).map(|p| (topic.to_string(), p)).collect();
    all == expected && views.iter().all(|v| !v.assignment.is_empty())
}

#[test]
fn three_members_split_six_partitions_and_read_every_message_once() {
    let b = TestBroker::start(2, &[]);
    b.client().create_topic("t", 6, 1, vec![]).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let mut members: Vec<Member> = (0..3)
        .map(|_| {
            spawn_member(
                &b,
                "t",
                config("g", Delivery::AtLeastOnce, "range"),
                stop.clone(),
            )
        })
        .collect();
    wait_until("three members sharing six partitions", || {
        settled(&members.iter().collect::<Vec<_>>(), "t", 6)
    });
    let assignments: Vec<Vec<TopicPartition>> = members
        .iter()
        .map(|m| m.view.lock().unwrap().assignment.clone())
        .collect();
    for a in &assignments {
        assert_eq!(
            a.len(),
            2,
            "range gives each of 3 members 2 of 6: {assignments:?}"
        );
    }
    produce_spread(&b, "t", 6, 0..100);
    let total = || -> usize {
        members
            .iter()
            .map(|m| m.view.lock().unwrap().read.len())
            .sum()
    };
    wait_until("600 messages read", || total() >= 600);
    // Give duplicates a chance to show: every member polls a few more times.
    let polls: Vec<usize> = members
        .iter()
        .map(|m| m.view.lock().unwrap().polls)
        .collect();
    wait_until("a few more polls", || {
        members
            .iter()
            .zip(&polls)
            .all(|(m, &n)| m.view.lock().unwrap().polls >= n + 3)
    });
    stop.store(true, Ordering::SeqCst);
    for m in &mut members {
        m.join();
    }
    let mut seen = BTreeMap::new();
    for (i, m) in members.iter().enumerate() {
        let view = m.view.lock().unwrap();
        for v in &view.read {
            *seen.entry(v.clone()).or_insert(0) += 1;
            assert!(
                assignments[i].contains(&("t".to_string(), partition_of(v))),
                "member {i} read {v} outside its assignment {:?}",
                assignments[i]
            );
        }
    }
    assert_eq!(
        seen.keys().cloned().collect::<BTreeSet<_>>(),
        all_values(6, 0..100)
    );
    assert!(
        seen.values().all(|&n| n == 1),
        "duplicates: {:?}",
        seen.iter().filter(|(_, &n)| n > 1).collect::<Vec<_>>()
    );
}

/// A `rill consume --group` process whose printed lines are collected as they come.
struct CliMember {
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
    reader: Option<JoinHandle<()>>,
}

fn spawn_cli_member(b: &TestBroker, group: &str, delivery: &str) -> CliMember {
    let mut child = Command::new(env!("CARGO_BIN_EXE_rill"))
        .args(["-b", &b.bootstrap(), "consume", "t", "--group", group])
        .args(["--delivery", delivery, "--session-timeout-ms", "3000"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let out = child.stdout.take().unwrap();
    let lines = Arc::new(Mutex::new(Vec::new()));
    let l = lines.clone();
    let reader = std::thread::spawn(move || {
        for line in std::io::BufReader::new(out).lines() {
            let Ok(line) = line else { break };
            l.lock().unwrap().push(line);
        }
    });
    CliMember {
        child,
        lines,
        reader: Some(reader),
    }
}

impl CliMember {
    fn stop(&mut self) -> Vec<String> {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(r) = self.reader.take() {
            r.join().unwrap();
        }
        self.lines.lock().unwrap().clone()
    }
}

impl Drop for CliMember {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Three `consume --group` processes; one is SIGKILLed while messages flow. Returns every
/// member's lines (the killed one first) and the values produced.
fn kill_a_member_mid_stream(delivery: &str) -> (Vec<Vec<String>>, BTreeSet<String>) {
    let b = TestBroker::start(2, &[]);
    b.client().create_topic("t", 6, 1, vec![]).unwrap();
    let mut members: Vec<CliMember> = (0..3)
        .map(|_| spawn_cli_member(&b, "g", delivery))
        .collect();
    // Every member read something: the group is formed and consuming.
    let mut next = 0;
    wait_until("every member reading", || {
        produce_spread(&b, "t", 6, next..next + 5);
        next += 5;
        members.iter().all(|m| !m.lines.lock().unwrap().is_empty())
    });
    // Messages keep flowing while one member is killed.
    let flowing = Arc::new(AtomicBool::new(true));
    let produced_to = Arc::new(AtomicUsize::new(next));
    let producer_thread = {
        let (flowing, produced_to) = (flowing.clone(), produced_to.clone());
        let p = producer(&b, 1 << 10);
        std::thread::spawn(move || {
            let mut i = produced_to.load(Ordering::SeqCst);
            while flowing.load(Ordering::SeqCst) {
                let reports: Vec<_> = (0..6)
                    .map(|part| {
                        let v = format!("p{part}-{i}");
                        p.send(ProducerRecord::new("t", v.as_bytes()).partition(part))
                            .unwrap()
                    })
                    .collect();
                for r in reports {
                    r.wait().unwrap();
                }
                i += 1;
                produced_to.store(i, Ordering::SeqCst);
            }
        })
    };
    let before = produced_to.load(Ordering::SeqCst);
    wait_until("messages flowing", || {
        produced_to.load(Ordering::SeqCst) >= before + 20
    });
    let killed = members[0].stop();
    let killed_at = produced_to.load(Ordering::SeqCst);
    let killed_partitions: BTreeSet<u32> = killed.iter().map(|v| partition_of(v)).collect();
    wait_until("messages flowing after the kill", || {
        produced_to.load(Ordering::SeqCst) >= killed_at + 20
    });
    flowing.store(false, Ordering::SeqCst);
    producer_thread.join().unwrap();
    let end = produced_to.load(Ordering::SeqCst);
    let produced = all_values(6, 0..end);
    // The survivors take over the killed member's partitions: everything produced after
    // the kill is read.
    let after_kill = all_values(6, killed_at..end);
    let started = Instant::now();
    wait_until(
        "the survivors reading everything produced after the kill",
        || {
            let read: BTreeSet<String> = members[1..]
                .iter()
                .flat_map(|m| m.lines.lock().unwrap().clone())
                .collect();
            after_kill.is_subset(&read)
        },
    );
    eprintln!(
        "{delivery}: member with partitions {killed_partitions:?} killed; the survivors caught \
         up {:?} later",
        started.elapsed()
    );
    let mut all = vec![killed];
    for m in &mut members[1..] {
        all.push(m.stop());
    }
    (all, produced)
}

#[test]
fn at_least_once_loses_nothing_when_a_member_is_killed() {
    let (lines, produced) = kill_a_member_mid_stream("at-least-once");
    let read: BTreeSet<String> = lines.iter().flatten().cloned().collect();
    let missing: Vec<_> = produced.difference(&read).collect();
    assert!(missing.is_empty(), "lost: {missing:?}");
    let total: usize = lines.iter().map(Vec::len).sum();
    eprintln!(
        "at-least-once: {} messages, {} read, {} duplicates (the uncommitted window)",
        produced.len(),
        total,
        total - read.len()
    );
}

#[test]
fn at_most_once_reads_nothing_twice_when_a_member_is_killed() {
    let (lines, produced) = kill_a_member_mid_stream("at-most-once");
    let mut seen = BTreeMap::new();
    for v in lines.iter().flatten() {
        *seen.entry(v.clone()).or_insert(0) += 1;
    }
    let twice: Vec<_> = seen.iter().filter(|(_, &n)| n > 1).collect();
    assert!(twice.is_empty(), "read twice: {twice:?}");
    let killed_partitions: BTreeSet<u32> = lines[0].iter().map(|v| partition_of(v)).collect();
    let gap: Vec<_> = produced.iter().filter(|v| !seen.contains_key(*v)).collect();
    // A gap may only be what the killed member had committed but not printed.
    assert!(
        gap.iter()
            .all(|v| killed_partitions.contains(&partition_of(v))),
        "messages of partitions the killed member never owned went missing: {gap:?}"
    );
    eprintln!(
        "at-most-once: {} messages, {} read once, gap of {} (committed by the killed member, \
         never printed): {:?}",
        produced.len(),
        seen.len(),
        gap.len(),
        gap.iter().take(10).collect::<Vec<_>>()
    );
}

#[test]
fn a_member_joining_with_cooperative_sticky_revokes_only_what_moves() {
    let b = TestBroker::start(2, &[]);
    b.client().create_topic("t", 6, 1, vec![]).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let cfg = || config("g", Delivery::AtLeastOnce, "cooperative-sticky");
    let mut a = spawn_member(&b, "t", cfg(), stop.clone());
    let mut bm = spawn_member(&b, "t", cfg(), stop.clone());
    wait_until("two members sharing six partitions", || {
        settled(&[&a, &bm], "t", 6)
    });
    // Busy: messages flow through the join.
    let flowing = Arc::new(AtomicBool::new(true));
    let producer_thread = {
        let flowing = flowing.clone();
        let p = producer(&b, 1 << 10);
        std::thread::spawn(move || {
            let mut i = 0;
            while flowing.load(Ordering::SeqCst) {
                for part in 0..6 {
                    let v = format!("p{part}-{i}");
                    let _ = p.send(ProducerRecord::new("t", v.as_bytes()).partition(part));
                }
                p.flush().unwrap();
                i += 1;
            }
            i
        })
    };
    wait_until("both members reading", || {
        a.view.lock().unwrap().read.len() > 50 && bm.view.lock().unwrap().read.len() > 50
    });
    let before: Vec<BTreeSet<TopicPartition>> = [&a, &bm]
        .iter()
        .map(|m| {
            let mut v = m.view.lock().unwrap();
            v.events.clear();
            v.assignment.iter().cloned().collect()
        })
        .collect();
    let mut c = spawn_member(&b, "t", cfg(), stop.clone());
    wait_until("three members sharing six partitions", || {
        settled(&[&a, &bm, &c], "t", 6)
    });
    let read_before: Vec<usize> = [&a, &bm]
        .iter()
        .map(|m| m.view.lock().unwrap().read.len())
        .collect();
    wait_until("the old members still reading after the join", || {
        [&a, &bm]
            .iter()
            .zip(&read_before)
            .all(|(m, &n)| m.view.lock().unwrap().read.len() > n)
    });
    flowing.store(false, Ordering::SeqCst);
    let rounds = producer_thread.join().unwrap();
    stop.store(true, Ordering::SeqCst);
    let c_assignment: BTreeSet<TopicPartition> =
        c.view.lock().unwrap().assignment.iter().cloned().collect();
    assert_eq!(c_assignment.len(), 2, "the newcomer takes its share");
    for (m, before) in [&a, &bm].iter().zip(&before) {
        let view = m.view.lock().unwrap();
        let after: BTreeSet<TopicPartition> = view.assignment.iter().cloned().collect();
        let moved: BTreeSet<TopicPartition> = before.difference(&after).cloned().collect();
        assert!(after.is_subset(before), "an old member gained partitions");
        let revoked: BTreeSet<TopicPartition> = view
            .events
            .iter()
            .filter(|(kind, _)| *kind == "revoked")
            .flat_map(|(_, p)| p.clone())
            .collect();
        assert_eq!(
            revoked, moved,
            "revoked exactly the partitions that moved (kept {after:?}); events {:?}",
            view.events
        );
        assert!(moved.is_subset(&c_assignment));
        assert!(
            !view.events.iter().any(|(kind, _)| *kind == "lost"),
            "nothing lost"
        );
    }
    a.join();
    bm.join();
    c.join();
    eprintln!("{rounds} rounds of 6 messages flowed through the join");
}

#[test]
fn two_groups_each_read_the_whole_topic() {
    let b = TestBroker::start(2, &[]);
    b.client().create_topic("t", 3, 1, vec![]).unwrap();
    produce_spread(&b, "t", 3, 0..100);
    let stop = Arc::new(AtomicBool::new(false));
    let mut g1 = spawn_member(
        &b,
        "t",
        config("g1", Delivery::AtLeastOnce, "range"),
        stop.clone(),
    );
    let mut g2 = spawn_member(
        &b,
        "t",
        config("g2", Delivery::AtMostOnce, "roundrobin"),
        stop.clone(),
    );
    wait_until("both groups read 300", || {
        g1.view.lock().unwrap().read.len() >= 300 && g2.view.lock().unwrap().read.len() >= 300
    });
    stop.store(true, Ordering::SeqCst);
    g1.join();
    g2.join();
    for g in [&g1, &g2] {
        let read = g.view.lock().unwrap().read.clone();
        assert_eq!(read.len(), 300);
        assert_eq!(
            read.into_iter().collect::<BTreeSet<_>>(),
            all_values(3, 0..100)
        );
    }
}

#[test]
fn committed_offsets_survive_a_broker_restart() {
    let mut b = TestBroker::start(2, &[]);
    b.client().create_topic("t", 4, 1, vec![]).unwrap();
    produce_spread(&b, "t", 4, 0..100);
    let tps: Vec<TopicPartition> = (0..4).map(|p| ("t".to_string(), p)).collect();
    // Never subscribes, only reads commits; it lives through the restart.
    let mut watcher = GroupConsumer::new(
        ClientConfig::new(b.bootstrap()),
        config("g", Delivery::Manual, "range"),
    )
    .unwrap();
    assert!(watcher.committed(&tps).unwrap().is_empty());
    let mut first = Vec::new();
    let committed = {
        let mut c = GroupConsumer::new(
            ClientConfig::new(b.bootstrap()),
            config("g", Delivery::Manual, "range"),
        )
        .unwrap();
        c.subscribe(&["t"]).unwrap();
        let start = Instant::now();
        while first.len() < 150 {
            assert!(start.elapsed() < DEADLINE);
            let records = c.poll(Duration::from_millis(200)).unwrap();
            first.extend(
                records
                    .iter()
                    .map(|r| String::from_utf8(r.value().unwrap_or_default().to_vec()).unwrap()),
            );
        }
        c.commit_sync().unwrap();
        let committed = c.committed(&tps).unwrap();
        assert_eq!(committed.len(), 4);
        for (tp, o) in &committed {
            assert_eq!(Some(o.offset), c.position(&tp.0, tp.1));
            assert_eq!(o.metadata, "", "commit_sync stores no metadata");
        }
        // The same positions again, each with its own metadata.
        let with_metadata: Offsets = committed
            .iter()
            .map(|(tp, o)| {
                let text = format!("{}-{} read up to {}", tp.0, tp.1, o.offset);
                (tp.clone(), OffsetAndMetadata::with_metadata(o.offset, text))
            })
            .collect();
        c.commit_offsets_sync(&with_metadata).unwrap();
        assert_eq!(c.committed(&tps).unwrap(), with_metadata);
        assert_eq!(watcher.committed(&tps).unwrap(), with_metadata);
        c.close().unwrap();
        with_metadata
    };
    assert_eq!(
        committed.values().map(|o| o.offset).sum::<u64>() as usize,
        first.len()
    );
    b.restart();
    // The watcher's coordinator connection died with the broker: it finds it again.
    assert_eq!(
        watcher.committed(&tps).unwrap(),
        committed,
        "offsets and metadata after the restart"
    );
    let mut c = GroupConsumer::new(
        ClientConfig::new(b.bootstrap()),
        config("g", Delivery::Manual, "range"),
    )
    .unwrap();
    assert_eq!(c.committed(&tps).unwrap(), committed);
    c.subscribe(&["t"]).unwrap();
    let mut second: Vec<(u32, u64, String)> = Vec::new();
    let start = Instant::now();
    while first.len() + second.len() < 400 {
        assert!(
            start.elapsed() < DEADLINE,
            "only {} after the restart",
            second.len()
        );
        let records = c.poll(Duration::from_millis(200)).unwrap();
        second.extend(records.iter().map(|r| {
            (
                r.partition,
                r.offset(),
                String::from_utf8(r.value().unwrap_or_default().to_vec()).unwrap(),
            )
        }));
    }
    for p in 0..4u32 {
        let lowest = second
            .iter()
            .filter(|(q, _, _)| *q == p)
            .map(|(_, o, _)| *o)
            .min();
        let resumed = committed.get(&("t".to_string(), p)).map_or(0, |o| o.offset);
        if resumed < 100 {
            assert_eq!(lowest, Some(resumed), "partition {p} resumes at its commit");
        }
    }
    let mut all: Vec<String> = first;
    all.extend(second.into_iter().map(|(_, _, v)| v));
    let unique: BTreeSet<String> = all.iter().cloned().collect();
    assert_eq!(all.len(), 400, "nothing read twice across the restart");
    assert_eq!(unique, all_values(4, 0..100));
}

#[test]
fn a_group_takes_in_partitions_added_to_its_topic() {
    let b = TestBroker::start(2, &[]);
    b.client().create_topic("t", 2, 1, vec![]).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let mut m = spawn_member(
        &b,
        "t",
        config("g", Delivery::AtLeastOnce, "cooperative-sticky"),
        stop.clone(),
    );
    wait_until("the member owns both partitions", || settled(&[&m], "t", 2));
    b.client().add_partitions("t", 4).unwrap();
    wait_until("the member owns all four partitions", || {
        settled(&[&m], "t", 4)
    });
    produce_spread(&b, "t", 4, 0..10);
    wait_until("40 messages read", || {
        m.view.lock().unwrap().read.len() >= 40
    });
    stop.store(true, Ordering::SeqCst);
    m.join();
    let read: BTreeSet<String> = m.view.lock().unwrap().read.iter().cloned().collect();
    assert_eq!(read, all_values(4, 0..10));
}

#[test]
fn stale_and_unknown_members_are_refused_and_the_group_stays_consistent() {
    let b = TestBroker::start(2, &[]);
    b.client().create_topic("t", 2, 1, vec![]).unwrap();
    produce_spread(&b, "t", 2, 0..50);
    let mut c = GroupConsumer::new(
        ClientConfig::new(b.bootstrap()),
        config("g", Delivery::Manual, "range"),
    )
    .unwrap();
    c.subscribe(&["t"]).unwrap();
    let mut read = 0;
    let start = Instant::now();
    while read < 40 {
        assert!(start.elapsed() < DEADLINE);
        read += c.poll(Duration::from_millis(200)).unwrap().count();
    }
    let member = c.member_id();
    let generation = c.generation().unwrap();
    let mut rogue = b.client();
    let at = rogue.find_coordinator("g").unwrap();
    let offsets = vec![("t".to_string(), 0u32, 999u64, String::new())];
    let code = |r: Result<(), rill::client::ClientError>| r.unwrap_err().code();
    assert_eq!(
        code(rogue.commit_offsets(at, "g", "nobody", generation as i32, offsets.clone())),
        Some(ErrorCode::UnknownMemberId)
    );
    assert_eq!(
        code(rogue.commit_offsets(at, "g", &member, generation as i32 - 1, offsets.clone())),
        Some(ErrorCode::IllegalGeneration)
    );
    assert_eq!(
        code(rogue.commit_offsets(at, "g", "", -1, offsets.clone())),
        Some(ErrorCode::UnknownMemberId),
        "a commit from outside a group with live members"
    );
    assert_eq!(
        code(rogue.heartbeat(at, "g", "nobody", generation)),
        Some(ErrorCode::UnknownMemberId)
    );
    assert_eq!(
        code(rogue.heartbeat(at, "g", &member, generation + 5)),
        Some(ErrorCode::IllegalGeneration)
    );
    // None of that moved the group: the member commits and reads on in its generation.
    c.commit_sync().unwrap();
    assert_eq!(c.generation(), Some(generation));
    let committed = c
        .committed(&[("t".to_string(), 0), ("t".to_string(), 1)])
        .unwrap();
    assert!(committed.values().all(|o| o.offset <= 50), "{committed:?}");
    assert_eq!(
        committed.values().map(|o| o.offset).sum::<u64>() as usize,
        read
    );
    while read < 100 {
        assert!(start.elapsed() < DEADLINE);
        read += c.poll(Duration::from_millis(200)).unwrap().count();
    }
    assert_eq!(read, 100);
    // A member that left is fenced: its heartbeats are refused.
    let fenced_member = member.clone();
    c.close().unwrap();
    assert_eq!(
        code(rogue.heartbeat(at, "g", &fenced_member, generation)),
        Some(ErrorCode::UnknownMemberId)
    );
}

/// Polls `c` until it has read `n` values (failing past `n`), returning them.
fn read_values(c: &mut GroupConsumer, n: usize) -> Vec<String> {
    let mut read = Vec::new();
    let start = Instant::now();
    while read.len() < n {
        assert!(
            start.elapsed() < DEADLINE,
            "read {} of {n}: {read:?}",
            read.len()
        );
        let records = c.poll(Duration::from_millis(200)).unwrap();
        read.extend(
            records
                .iter()
                .map(|r| String::from_utf8(r.value().unwrap_or_default().to_vec()).unwrap()),
        );
    }
    assert_eq!(read.len(), n, "more than expected: {read:?}");
    read
}

#[test]
fn oversized_offset_metadata_is_refused_and_the_previous_commit_stays() {
    let b = TestBroker::start(2, &[]);
    b.client().create_topic("t", 2, 1, vec![]).unwrap();
    produce_spread(&b, "t", 2, 0..10);
    let mut c = GroupConsumer::new(
        ClientConfig::new(b.bootstrap()),
        config("g", Delivery::Manual, "range"),
    )
    .unwrap();
    c.subscribe(&["t"]).unwrap();
    read_values(&mut c, 20);
    let generation = c.generation();
    let (tp0, tp1) = (("t".to_string(), 0), ("t".to_string(), 1));
    let both = [tp0.clone(), tp1.clone()];
    // The coordinator's limit is 4096 bytes of metadata: at the limit is fine.
    let at_limit: Offsets = [
        (
            tp0.clone(),
            OffsetAndMetadata::with_metadata(4, "m".repeat(4096)),
        ),
        (tp1.clone(), OffsetAndMetadata::with_metadata(6, "small")),
    ]
    .into();
    c.commit_offsets_sync(&at_limit).unwrap();
    assert_eq!(c.committed(&both).unwrap(), at_limit);
    // One byte over, for one partition of two: the whole commit is refused, by both calls.
    let too_big: Offsets = [
        (
            tp0.clone(),
            OffsetAndMetadata::with_metadata(8, "m".repeat(4097)),
        ),
        (tp1.clone(), OffsetAndMetadata::new(9)),
    ]
    .into();
    let e = c.commit_offsets_sync(&too_big).unwrap_err();
    assert_eq!(
        e.code(),
        Some(ErrorCode::OffsetMetadataTooLarge),
        "sync: {e}"
    );
    let e = c.commit_offsets_async(&too_big).wait().unwrap_err();
    assert_eq!(
        e.code(),
        Some(ErrorCode::OffsetMetadataTooLarge),
        "async: {e}"
    );
    assert_eq!(
        c.committed(&both).unwrap(),
        at_limit,
        "the previous commit stays"
    );
    // A refusal is not a fence: the member commits on in its generation.
    let fine: Offsets = [(tp1.clone(), OffsetAndMetadata::new(10))].into();
    c.commit_offsets_sync(&fine).unwrap();
    assert_eq!(c.generation(), generation);
    let committed = c.committed(&both).unwrap();
    assert_eq!(committed[&tp0], at_limit[&tp0]);
    assert_eq!(committed[&tp1], OffsetAndMetadata::new(10));
    c.close().unwrap();
}

#[test]
fn lag_per_partition_follows_new_data_without_polls() {
    let b = TestBroker::start(2, &[]);
    b.client().create_topic("t", 3, 1, vec![]).unwrap();
    produce_spread(&b, "t", 3, 0..20);
    let mut c = GroupConsumer::new(
        ClientConfig::new(b.bootstrap()),
        config("g", Delivery::Manual, "range"),
    )
    .unwrap();
    c.subscribe(&["t"]).unwrap();
    read_values(&mut c, 60);
    let owned = c.assignment();
    assert_eq!(owned.len(), 3);
    let lag_of = |behind: u64| -> BTreeMap<TopicPartition, u64> {
        owned
            .iter()
            .map(|tp| (tp.clone(), if tp.1 == 1 { behind } else { 0 }))
            .collect()
    };
    assert_eq!(c.lag(), lag_of(0), "everything read");
    // Rounds of 3 records to partition 1 while the application does not poll: more rounds
    // than the fetcher may queue for the application (prefetch 2).
    let p = producer(&b, 1 << 10);
    let mut behind = 0u64;
    for round in 0..6 {
        let reports: Vec<_> = (0..3)
            .map(|i| {
                let v = format!("p1-{}", 20 + behind + i);
                p.send(ProducerRecord::new("t", v.as_bytes()).partition(1))
                    .unwrap()
            })
            .collect();
        p.flush().unwrap();
        for r in reports {
            r.wait().unwrap();
        }
        behind += 3;
        wait_until(&format!("lag {behind} on t-1 after round {round}"), || {
            c.lag() == lag_of(behind)
        });
    }
    // Polling reads exactly the new records, and the lag is back to 0.
    let read = read_values(&mut c, behind as usize);
    let expected: Vec<String> = (20..20 + behind).map(|i| format!("p1-{i}")).collect();
    assert_eq!(read, expected);
    assert_eq!(c.lag(), lag_of(0));
    c.close().unwrap();
}

/// A static member (instance id) and a dynamic one; the static one is closed (no LeaveGroup)
/// and recreated with its instance id within the session timeout.
fn static_member_restarts_without_a_rebalance(assignor: &str) {
    let b = TestBroker::start(2, &[]);
    b.client().create_topic("t", 4, 1, vec![]).unwrap();
    produce_spread(&b, "t", 4, 0..10);
    let mut static_cfg = config("g", Delivery::AtLeastOnce, assignor);
    static_cfg.group_instance_id = Some("static-a".into());
    // The static member joins first, so it is the group's leader.
    let stop_s = Arc::new(AtomicBool::new(false));
    let mut s = spawn_member(&b, "t", static_cfg.clone(), stop_s.clone());
    wait_until("the static member owning everything", || {
        settled(&[&s], "t", 4)
    });
    let stop_d = Arc::new(AtomicBool::new(false));
    let mut d = spawn_member(
        &b,
        "t",
        config("g", Delivery::AtLeastOnce, assignor),
        stop_d.clone(),
    );
    wait_until("two members sharing four partitions", || {
        settled(&[&s, &d], "t", 4)
    });
    wait_until("the first 40 messages read", || {
        s.view.lock().unwrap().read.len() + d.view.lock().unwrap().read.len() >= 40
    });
    let (s_id, s_assignment, generation) = {
        let v = s.view.lock().unwrap();
        (v.member_id.clone(), v.assignment.clone(), v.generation)
    };
    let d_assignment = {
        let mut v = d.view.lock().unwrap();
        v.events.clear();
        v.read.clear();
        v.assignment.clone()
    };
    stop_s.store(true, Ordering::SeqCst);
    s.join();
    let stop_s2 = Arc::new(AtomicBool::new(false));
    let mut s2 = spawn_member(&b, "t", static_cfg, stop_s2.clone());
    wait_until("the static member back", || {
        let v = s2.view.lock().unwrap();
        v.generation.is_some() && !v.assignment.is_empty()
    });
    {
        let v = s2.view.lock().unwrap();
        // As Kafka does: a fresh member id takes the instance's membership over.
        assert_ne!(v.member_id, s_id, "a fresh member id");
        assert_eq!(v.assignment, s_assignment, "the same assignment");
        assert_eq!(v.generation, generation, "the same generation");
        assert_eq!(
            v.events,
            vec![("assigned", s_assignment.clone())],
            "its listener sees its partitions assigned, nothing else"
        );
    }
    // The dynamic member polls and heartbeats on, unaware.
    let polls = d.view.lock().unwrap().polls;
    wait_until("the dynamic member polling on", || {
        d.view.lock().unwrap().polls >= polls + 10
    });
    let described = b.client().describe_group("g").unwrap();
    assert_eq!(
        (described.state.as_str(), Some(described.generation)),
        ("Stable", generation)
    );
    assert_eq!(described.members.len(), 2);
    {
        let v = d.view.lock().unwrap();
        assert_eq!(v.generation, generation, "no rebalance");
        assert_eq!(v.assignment, d_assignment);
        assert!(v.events.is_empty(), "no revocation: {:?}", v.events);
    }
    // New messages: each member reads those of its partitions, the static one resuming at
    // what its previous instance committed on close (nothing twice).
    produce_spread(&b, "t", 4, 10..20);
    wait_until("the next 40 messages read", || {
        s2.view.lock().unwrap().read.len() + d.view.lock().unwrap().read.len() >= 40
    });
    stop_s2.store(true, Ordering::SeqCst);
    stop_d.store(true, Ordering::SeqCst);
    s2.join();
    d.join();
    for (m, owned) in [(&s2, &s_assignment), (&d, &d_assignment)] {
        let read: Vec<String> = m.view.lock().unwrap().read.clone();
        let expected: BTreeSet<String> = all_values(4, 10..20)
            .into_iter()
            .filter(|v| owned.contains(&("t".to_string(), partition_of(v))))
            .collect();
        assert_eq!(read.len(), expected.len(), "{read:?}");
        assert_eq!(read.into_iter().collect::<BTreeSet<_>>(), expected);
    }
}

#[test]
fn a_static_member_restarts_without_a_rebalance_cooperative() {
    static_member_restarts_without_a_rebalance("cooperative-sticky");
}

#[test]
fn a_static_member_restarts_without_a_rebalance_eager() {
    static_member_restarts_without_a_rebalance("range");
}

#[test]
fn a_join_that_fails_after_the_coordinator_answered_fails_every_poll_and_close_leaves() {
    let b = TestBroker::start(2, &[]);
    b.client().create_topic("t", 2, 1, vec![]).unwrap();
    produce_spread(&b, "t", 2, 0..10);
    let mut admin = b.client();
    let at = admin.find_coordinator("g").unwrap();
    // Partition 0 has a committed offset, partition 1 none, and the reset policy is 'error'.
    admin
        .commit_offsets(at, "g", "", -1, vec![("t".into(), 0, 5, String::new())])
        .unwrap();
    let mut cfg = config("g", Delivery::Manual, "range");
    cfg.consumer.auto_offset_reset = OffsetReset::Error;
    let view = Arc::new(Mutex::new(MemberView::default()));
    let mut c = GroupConsumer::new(ClientConfig::new(b.bootstrap()), cfg.clone()).unwrap();
    c.set_listener(Box::new(Recorder(view.clone())));
    c.subscribe(&["t"]).unwrap();
    for attempt in 0..3 {
        let e = match c.poll(Duration::from_millis(200)) {
            Ok(r) => panic!(
                "poll {attempt} went on with a partial assignment {:?} ({} records)",
                c.assignment(),
                r.count()
            ),
            Err(e) => e,
        };
        assert!(e.to_string().contains("t-1"), "{e}");
        assert!(c.assignment().is_empty(), "{:?}", c.assignment());
        assert_eq!(c.generation(), None);
    }
    assert!(
        view.lock().unwrap().events.is_empty(),
        "the listener heard of no partition: {:?}",
        view.lock().unwrap().events
    );
    // Closing leaves the group, so the offsets can be set from outside at once.
    c.close().unwrap();
    admin
        .commit_offsets(at, "g", "", -1, vec![("t".into(), 1, 3, String::new())])
        .unwrap();
    let mut c = GroupConsumer::new(ClientConfig::new(b.bootstrap()), cfg).unwrap();
    c.subscribe(&["t"]).unwrap();
    let read: BTreeSet<String> = read_values(&mut c, 12).into_iter().collect();
    let expected: BTreeSet<String> = (5..10)
        .map(|i| format!("p0-{i}"))
        .chain((3..10).map(|i| format!("p1-{i}")))
        .collect();
    assert_eq!(read, expected);
    c.close().unwrap();
}

/// JoinGroup then SyncGroup for a lone member of `group`: (member id, generation).
fn join_alone(client: &mut Client, at: std::net::SocketAddr, group: &str) -> (String, u32) {
    let wait = Duration::from_secs(30);
    let joined = client
        .join_group(
            at,
            &JoinGroupRequest {
                group: group.into(),
                member_id: String::new(),
                group_instance_id: None,
                session_timeout_ms: 30_000,
                rebalance_timeout_ms: 10_000,
                protocol_type: "consumer".into(),
                protocols: vec![("range".into(), Vec::new())],
            },
            wait,
        )
        .unwrap();
    client
        .sync_group(
            at,
            &SyncGroupRequest {
                group: group.into(),
                member_id: joined.member_id.clone(),
                group_instance_id: None,
                generation: joined.generation,
                assignments: vec![(joined.member_id.clone(), Vec::new())],
            },
            wait,
        )
        .unwrap();
    (joined.member_id, joined.generation)
}

#[test]
fn member_ids_are_not_reused_after_a_coordinator_restart() {
    let mut b = TestBroker::start(2, &[]);
    let mut client = b.client();
    let at = client.find_coordinator("g").unwrap();
    let (before, _) = join_alone(&mut client, at, "g");
    b.restart();
    let mut client = b.client();
    let at = client.find_coordinator("g").unwrap();
    let (after, generation) = join_alone(&mut client, at, "g");
    assert_ne!(before, after, "a new member got the id of one from before");
    // The member from before the restart is a stranger, even in the generation that exists
    // now.
    let code = |r: Result<(), ClientError>| r.unwrap_err().code();
    assert_eq!(
        code(client.heartbeat(at, "g", &before, generation)),
        Some(ErrorCode::UnknownMemberId)
    );
    let offsets = vec![("t".to_string(), 0, 1, String::new())];
    assert_eq!(
        code(client.commit_offsets(at, "g", &before, generation as i32, offsets)),
        Some(ErrorCode::UnknownMemberId)
    );
    client.heartbeat(at, "g", &after, generation).unwrap();
}

#[test]
fn a_member_keeps_consuming_across_a_coordinator_restart() {
    let mut b = TestBroker::start(2, &[]);
    b.client().create_topic("t", 2, 1, vec![]).unwrap();
    // A group coordinated by the shard that is not the bootstrap one, so the member's only
    // connection to it is the one the restart breaks.
    let mut client = b.client();
    let group = (0..100)
        .map(|i| format!("g{i}"))
        .find(|g| client.find_coordinator(g).unwrap().port() != b.port)
        .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let mut m = spawn_member(
        &b,
        "t",
        config(&group, Delivery::AtLeastOnce, "cooperative-sticky"),
        stop.clone(),
    );
    wait_until("the member owning both partitions", || {
        m.alive() && settled(&[&m], "t", 2)
    });
    produce_spread(&b, "t", 2, 0..10);
    wait_until("20 messages read", || {
        m.alive() && m.view.lock().unwrap().read.len() >= 20
    });
    let before = {
        let mut v = m.view.lock().unwrap();
        v.events.clear();
        v.member_id.clone()
    };
    b.restart();
    produce_spread(&b, "t", 2, 10..20);
    let after_restart = all_values(2, 10..20);
    wait_until("everything produced after the restart read", || {
        assert!(m.alive(), "the member's poll failed");
        let read: BTreeSet<String> = m.view.lock().unwrap().read.iter().cloned().collect();
        after_restart.is_subset(&read)
    });
    stop.store(true, Ordering::SeqCst);
    m.join();
    let v = m.view.lock().unwrap();
    assert_ne!(
        v.member_id, before,
        "a new member of the restarted coordinator"
    );
    assert!(
        v.events.iter().any(|(kind, _)| *kind == "lost"),
        "the old membership is lost: {:?}",
        v.events
    );
    let read: BTreeSet<String> = v.read.iter().cloned().collect();
    assert_eq!(read, all_values(2, 0..20));
}

/// Two processes started with one static instance id: the second takes the membership over
/// with a fresh member id (as Kafka does), and the first is fenced for good
/// (FENCED_INSTANCE_ID from its poll) instead of taking it back in turn.
#[test]
fn a_second_process_with_the_same_instance_id_fences_the_first() {
    let _ = env_logger::builder().is_test(true).try_init();
    let b = TestBroker::start(1, &[]);
    b.client().create_topic("t", 2, 1, vec![]).unwrap();
    let mut cfg = config("g", Delivery::AtLeastOnce, "range");
    cfg.group_instance_id = Some("one".into());
    let settled = |c: &mut GroupConsumer| {
        let start = Instant::now();
        while c.assignment().is_empty() {
            assert!(start.elapsed() < DEADLINE, "no assignment");
            c.poll(Duration::from_millis(100)).unwrap();
        }
    };
    let mut first = GroupConsumer::new(ClientConfig::new(b.bootstrap()), cfg.clone()).unwrap();
    first.subscribe(&["t"]).unwrap();
    settled(&mut first);
    let mut second = GroupConsumer::new(ClientConfig::new(b.bootstrap()), cfg).unwrap();
    second.subscribe(&["t"]).unwrap();
    settled(&mut second);
    assert_eq!(
        second.assignment().len(),
        2,
        "the whole membership taken over"
    );
    // A commit from the old holder is refused as fenced, not as an unknown member: on
    // UNKNOWN_MEMBER_ID it would rejoin without a member id and take the instance back.
    let offsets: Offsets = [(("t".to_string(), 0), OffsetAndMetadata::new(0))]
        .into_iter()
        .collect();
    let refused = first.commit_offsets_sync(&offsets).unwrap_err();
    assert_eq!(
        refused.code(),
        Some(ErrorCode::FencedInstanceId),
        "{refused}"
    );
    let start = Instant::now();
    let fenced = loop {
        assert!(
            start.elapsed() < DEADLINE,
            "the first member was never fenced"
        );
        match first.poll(Duration::from_millis(100)) {
            Ok(_) => continue,
            Err(e) => break e,
        }
    };
    assert_eq!(fenced.code(), Some(ErrorCode::FencedInstanceId), "{fenced}");
    // The second keeps its membership.
    for _ in 0..20 {
        second.poll(Duration::from_millis(50)).unwrap();
    }
    let described = b.client().describe_group("g").unwrap();
    assert_eq!(described.members.len(), 1);
    assert_eq!(described.state, "Stable");
}
