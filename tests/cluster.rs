//! A controller quorum of real `rill broker` processes on 127.0.0.1: 3 voters elect a leader,
//! topic changes made through any broker reach all, the leader SIGKILLed mid-traffic loses
//! nothing acknowledged, a cut-off voter cannot commit and catches up, bad voter lists are
//! one-line errors. Waits are on conditions with generous deadlines; nothing is timed.

use std::collections::BTreeMap;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rill::client::{Client, ClientConfig};
use rill::protocol::messages::PartitionMeta;
use rill_testkit::{rill_bin, TestBroker, TestCluster, DEADLINE};

fn client(c: &TestCluster, id: u64, timeout: Duration) -> Client {
    let mut cfg = ClientConfig::new(c.nodes[id as usize - 1].bootstrap());
    cfg.request_timeout = timeout;
    Client::connect(cfg).expect("client")
}

#[test]
fn three_voters_elect_a_leader_and_topic_changes_reach_every_broker() {
    let c = TestCluster::start(3, 1, &[]);
    let leader = c.wait_leader(&[1, 2, 3]);
    // Every broker registered through the quorum, wherever the leader is.
    for id in 1..=3 {
        let mut cl = client(&c, id, Duration::from_secs(60));
        let info = cl.cluster_info().unwrap();
        assert_eq!(
            info.brokers.iter().map(|b| b.node_id).collect::<Vec<_>>(),
            vec![1, 2, 3]
        );
    }
    // A create through each broker (two of them followers: forwarded to the leader).
    for id in 1..=3u64 {
        let mut cl = client(&c, id, Duration::from_secs(60));
        cl.create_topic(&format!("via-{id}"), 3, 1, vec![])
            .unwrap_or_else(|e| panic!("create through node {id} (leader {leader}): {e}"));
    }
    let want: BTreeMap<String, usize> = (1..=3).map(|id| (format!("via-{id}"), 3)).collect();
    for id in 1..=3 {
        c.wait_topics(id, "all three topics", |t| *t == want);
    }
    // A refusal through a follower comes back as the leader's answer.
    let follower = (1..=3).find(|&id| id != leader).unwrap();
    let err = client(&c, follower, Duration::from_secs(60))
        .create_topic("via-1", 1, 1, vec![])
        .unwrap_err();
    assert!(err.to_string().contains("already exists"), "{err}");
    // Three brokers: a replication factor above their number is refused.
    let err = client(&c, follower, Duration::from_secs(60))
        .create_topic("replicated", 1, 4, vec![])
        .unwrap_err();
    assert!(err.to_string().contains("replication factor"), "{err}");
    // A delete through a follower.
    client(&c, follower, Duration::from_secs(60))
        .delete_topic("via-2")
        .unwrap();
    for id in 1..=3 {
        c.wait_topics(id, "via-2 deleted", |t| {
            !t.contains_key("via-2") && t.len() == 2
        });
    }
}

/// What the traffic thread saw acknowledged.
#[derive(Default, Debug)]
struct Acked {
    created: Vec<String>,
    deleted: Vec<String>,
    /// Operations that failed: their outcome is unknown (applied or not).
    unknown: Vec<String>,
}

#[test]
fn sigkill_the_leader_while_topics_are_created_and_deleted() {
    let mut c = TestCluster::start(3, 1, &[]);
    let leader = c.wait_leader(&[1, 2, 3]);
    let others: Vec<u64> = (1..=3).filter(|&id| id != leader).collect();
    let addrs: Vec<String> = others
        .iter()
        .map(|&id| c.nodes[id as usize - 1].bootstrap())
        .collect();
    let acked = Arc::new(Mutex::new(Acked::default()));
    let stop = Arc::new(AtomicBool::new(false));
    // Creates t0, t1, ... and deletes every third one two steps later, through the
    // followers in turn (so every change is forwarded to the leader about to die).
    let traffic = {
        let acked = acked.clone();
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut k = 0usize;
            while !stop.load(Ordering::SeqCst) {
                let mut cfg = ClientConfig::new(addrs[k % addrs.len()].clone());
                cfg.request_timeout = Duration::from_secs(20);
                let Ok(mut cl) = Client::connect(cfg) else {
                    k += 1;
                    continue;
                };
                let name = format!("t{k}");
                match cl.create_topic(&name, 2, 1, vec![]) {
                    Ok(()) => acked.lock().unwrap().created.push(name),
                    Err(_) => acked.lock().unwrap().unknown.push(name),
                }
                if k % 3 == 2 {
                    let victim = format!("t{}", k - 2);
                    let known = acked.lock().unwrap().created.contains(&victim);
                    if known {
                        match cl.delete_topic(&victim) {
                            Ok(()) => acked.lock().unwrap().deleted.push(victim),
                            Err(_) => acked.lock().unwrap().unknown.push(victim),
                        }
                    }
                }
                k += 1;
            }
        })
    };
    let wait_acked = |n: usize| {
        let start = Instant::now();
        while acked.lock().unwrap().created.len() < n {
            assert!(start.elapsed() < DEADLINE, "traffic stalled: {:?}", acked);
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    wait_acked(8);
    c.node(leader).kill();
    let before_kill = acked.lock().unwrap().created.len();
    // A new leader among the other two takes over and the traffic goes on.
    let new_leader = c.wait_leader(&others);
    assert_ne!(new_leader, leader);
    wait_acked(before_kill + 8);
    stop.store(true, Ordering::SeqCst);
    traffic.join().unwrap();
    let acked = acked.lock().unwrap();
    eprintln!(
        "leader {leader} killed after {before_kill} creates; new leader {new_leader}; \
         {} creates and {} deletes acknowledged, {} unknown",
        acked.created.len(),
        acked.deleted.len(),
        acked.unknown.len()
    );

    let check = |topics: &BTreeMap<String, usize>| -> Result<(), String> {
        for name in &acked.created {
            let deleted = acked.deleted.contains(name);
            let unsure = acked.unknown.contains(name);
            match (topics.get(name), deleted, unsure) {
                (None, false, false) => return Err(format!("acknowledged {name} is missing")),
                (Some(_), true, _) => return Err(format!("deleted {name} is back")),
                _ => {}
            }
        }
        // Nothing half-applied: every topic there has all its partitions.
        if let Some((n, p)) = topics.iter().find(|(_, &p)| p != 2) {
            return Err(format!("{n} has {p} partitions"));
        }
        Ok(())
    };
    let survivors: Vec<_> = others
        .iter()
        .map(|&id| c.wait_topics(id, "the acknowledged changes", |t| check(t).is_ok()))
        .collect();
    // Both survivors hold the same metadata.
    c.wait_topics(others[1], "the same topics as the other survivor", |t| {
        *t == survivors[0]
    });
    // The killed voter comes back and catches up with the same topics.
    c.node(leader).start_again();
    let after = c.topics_on(others[0]).unwrap();
    c.wait_topics(leader, "caught up after the restart", |t| *t == after);
}

#[test]
fn a_cut_off_voter_cannot_commit_and_catches_up_after_the_link_heals() {
    let c = TestCluster::start_with_proxies(3, 1, &[]);
    let leader = c.wait_leader(&[1, 2, 3]);
    let cut = (1..=3).find(|&id| id != leader).unwrap();
    let other = (1..=3).find(|&id| id != leader && id != cut).unwrap();
    client(&c, cut, Duration::from_secs(60))
        .create_topic("before", 1, 1, vec![])
        .unwrap();
    c.wait_topics(cut, "before", |t| t.contains_key("before"));

    c.isolate(cut);
    // Through the cut-off voter nothing commits: its proposal cannot reach a quorum.
    let err = client(&c, cut, Duration::from_secs(5))
        .create_topic("from-the-cut-one", 1, 1, vec![])
        .expect_err("a cut-off voter committed a topic");
    eprintln!("create through the cut-off voter: {err}");
    // The other two still form a quorum and commit.
    client(&c, other, Duration::from_secs(60))
        .create_topic("during", 1, 1, vec![])
        .unwrap();
    c.wait_topics(leader, "during", |t| t.contains_key("during"));
    c.wait_topics(other, "during", |t| t.contains_key("during"));
    assert!(
        !c.topics_on(cut).unwrap().contains_key("during"),
        "a cut-off voter applied an entry"
    );

    c.heal(cut);
    let want = c.topics_on(leader).unwrap();
    c.wait_topics(cut, "caught up after the link healed", |t| {
        t.contains_key("during")
            && t.keys()
                .all(|k| want.contains_key(k) || k == "from-the-cut-one")
    });
    // And it serves proposals again.
    client(&c, cut, Duration::from_secs(60))
        .create_topic("after", 1, 1, vec![])
        .unwrap();
    c.wait_topics(leader, "after", |t| t.contains_key("after"));
}

/// Runs `rill broker` with `args` expecting it to fail at once; returns stderr's last line.
fn refused(args: &[&str]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(rill_bin())
        .arg("broker")
        .arg("--data-dir")
        .arg(dir.path())
        .args(["--kafka-listen", "off", "--listen", "127.0.0.1:1"])
        .args(args)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "{args:?} started: {stderr}");
    let last = stderr.lines().last().unwrap_or_default().to_string();
    assert!(last.starts_with("rill: error: "), "{args:?}: {stderr}");
    last
}

#[test]
fn bad_voter_flags_are_one_line_errors() {
    let three = "1@127.0.0.1:19001,2@127.0.0.1:19002,3@127.0.0.1:19003";
    let cases: &[(&[&str], &str)] = &[
        (
            &["--node-id", "4", "--controller-voters", three],
            "does not list this node",
        ),
        (
            &[
                "--node-id",
                "1",
                "--controller-voters",
                "1@127.0.0.1:19001,2@127.0.0.1:19002",
            ],
            "lists 2 voters",
        ),
        (
            &[
                "--node-id",
                "1",
                "--controller-voters",
                "1@127.0.0.1:19001,2@127.0.0.1:19002,3@127.0.0.1:19003,4@127.0.0.1:19004",
            ],
            "lists 4 voters",
        ),
        (
            &[
                "--node-id",
                "1",
                "--controller-voters",
                "1@127.0.0.1:19001,1@127.0.0.1:19002,3@127.0.0.1:19003",
            ],
            "listed twice",
        ),
        (
            &[
                "--node-id",
                "1",
                "--controller-voters",
                "1@127.0.0.1,2@127.0.0.1:19002,3@127.0.0.1:19003",
            ],
            "expected HOST:PORT",
        ),
        (
            &[
                "--node-id",
                "1",
                "--controller-voters",
                "1@127.0.0.1:x,2@h:2,3@h:3",
            ],
            "the port must be",
        ),
        (
            &["--controller-listen", "127.0.0.1:19001"],
            "--controller-listen needs",
        ),
        (
            &["--process-roles", "broker"],
            "must list its 3 or 5 voters",
        ),
        (&["--process-roles", "borker"], "unknown role"),
    ];
    for (args, want) in cases {
        let line = refused(args);
        assert!(line.contains(want), "{args:?}: {line}");
    }
}

#[test]
fn a_voter_started_with_another_voters_list_is_refused_and_exits() {
    // Nodes 1 and 2 agree; node 3 is given another address for itself.
    let ports: Vec<u16> = (0..4).map(|_| rill_testkit::free_ports(1)).collect();
    let good = format!(
        "1@127.0.0.1:{},2@127.0.0.1:{},3@127.0.0.1:{}",
        ports[0], ports[1], ports[2]
    );
    let bad = format!(
        "1@127.0.0.1:{},2@127.0.0.1:{},3@127.0.0.1:{}",
        ports[0], ports[1], ports[3]
    );
    let node = |id: usize, voters: &str| {
        TestBroker::unstarted(
            1,
            &[
                "--node-id".to_string(),
                id.to_string(),
                "--controller-voters".to_string(),
                voters.to_string(),
            ],
        )
    };
    let mut n1 = node(1, &good);
    let mut n2 = node(2, &good);
    n1.launch();
    n2.launch();
    n1.wait_ready();
    n2.wait_ready();
    let mut n3 = node(3, &bad);
    let last = exit_line(&mut n3);
    assert!(
        last.starts_with("rill: error: ") && last.contains("controller voters disagree"),
        "{last}"
    );
    // Both sides say it, and the two that agree keep serving.
    let start = Instant::now();
    while !n1.log_text().contains("controller voters disagree") {
        assert!(
            start.elapsed() < DEADLINE,
            "node 1 never logged the refusal"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(n1.is_running() && n2.is_running());
    n1.client().create_topic("still-up", 1, 1, vec![]).unwrap();
}

/// Short broker sessions, so fencing shows within a test (the defaults are Kafka's 9 s / 2 s;
/// not shorter: a loaded 2-core CI machine can starve a process for a second or two).
const FAST_SESSIONS: &[&str] = &[
    "--broker-session-timeout-ms",
    "4000",
    "--broker-heartbeat-interval-ms",
    "400",
];

/// Topic `topic`'s partitions in broker `id`'s metadata; `None` when it does not answer.
fn partitions_on(c: &TestCluster, id: u64, topic: &str) -> Option<Vec<PartitionMeta>> {
    let mut cl = Client::connect(ClientConfig::new(c.nodes[id as usize - 1].bootstrap())).ok()?;
    let md = cl.refresh_metadata().ok()?;
    md.topics.get(topic).map(|t| t.partitions.clone())
}

/// Waits until `f` holds for `topic`'s partitions as broker `id` sees them.
fn wait_partitions(
    c: &TestCluster,
    id: u64,
    topic: &str,
    what: &str,
    f: impl Fn(&[PartitionMeta]) -> bool,
) -> Vec<PartitionMeta> {
    let start = Instant::now();
    loop {
        let ps = partitions_on(c, id, topic);
        if let Some(ps) = ps.as_ref().filter(|ps| f(ps)) {
            return ps.clone();
        }
        assert!(
            start.elapsed() < DEADLINE,
            "node {id}: {what}; {topic}: {ps:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The partitions broker `node` leads.
fn led_by(ps: &[PartitionMeta], node: u32) -> Vec<u32> {
    ps.iter()
        .filter(|p| p.leader == node)
        .map(|p| p.partition)
        .collect()
}

/// A broker other than `not` that leads some partition of `ps`.
fn a_leader_other_than(ps: &[PartitionMeta], not: u64) -> u64 {
    (1..=3u64)
        .find(|&id| id != not && !led_by(ps, id as u32).is_empty())
        .expect("partitions spread over the brokers")
}

/// Produces one small batch straight to the leader `broker` names in its own metadata.
fn produce_once(c: &TestCluster, broker: u64, topic: &str, partition: u32) -> Result<(), String> {
    let mut cl = client(c, broker, Duration::from_secs(10));
    cl.refresh_metadata().map_err(|e| e.to_string())?;
    let mut bb = rill::batch::BatchBuilder::new();
    bb.push(1, None, b"probe", &[], &[]);
    let batch = bb.build().map_err(|e| e.to_string())?.to_vec();
    cl.produce_raw(topic, partition, &[&batch], 1, Duration::from_secs(10))
        .map(|_| ())
        .map_err(|e| e.to_string())
}

#[test]
fn a_sigkilled_broker_is_fenced_and_its_partitions_come_back_when_it_restarts() {
    let mut c = TestCluster::start(3, 2, FAST_SESSIONS);
    let leader = c.wait_leader(&[1, 2, 3]);
    client(&c, leader, Duration::from_secs(60))
        .create_topic("spread", 6, 1, vec![])
        .unwrap();
    let before = wait_partitions(&c, leader, "spread", "6 partitions", |ps| ps.len() == 6);
    // Leaders spread evenly over the three brokers.
    for b in 1..=3 {
        assert_eq!(led_by(&before, b).len(), 2, "{before:?}");
    }
    let victim = a_leader_other_than(&before, leader);
    let lost = led_by(&before, victim as u32);
    let values: Vec<String> = (0..40).map(|i| format!("kept-{i}")).collect();
    rill_testkit::produce_values(c.node(victim), "spread", lost[0], values.clone());

    let killed = Instant::now();
    c.node(victim).kill();
    // Fenced once its session (4 s) runs out: its RF 1 partitions have no other in-sync
    // replica, so they go offline with a bumped leader epoch; the others keep their leaders.
    let offline = wait_partitions(
        &c,
        leader,
        "spread",
        "the victim's partitions offline",
        |ps| lost.iter().all(|&p| ps[p as usize].leader == 0),
    );
    assert!(
        killed.elapsed() < Duration::from_secs(4 + 30),
        "fenced only after {:?}",
        killed.elapsed()
    );
    // The tools show it: the broker fenced, its partitions offline with their ISR.
    let info = cli_text(&c, leader, &["cluster", "info"]);
    assert!(info.contains(&format!("broker {victim} fenced")), "{info}");
    assert!(info.contains("voters 1,2,3"), "{info}");
    assert!(info.contains(&format!("controller {leader}")), "{info}");
    let described = cli_text(&c, leader, &["topic", "describe", "spread"]);
    assert!(
        described.contains(&format!(
            "partition {} leader none (offline) epoch {} replicas [{victim}] isr [{victim}]",
            lost[0], offline[lost[0] as usize].leader_epoch
        )),
        "{described}"
    );
    for (b, a) in before.iter().zip(&offline) {
        if lost.contains(&b.partition) {
            assert!(a.leader_epoch > b.leader_epoch, "{b:?} -> {a:?}");
            assert_eq!(
                a.isr,
                vec![victim as u32],
                "the last ISR member stays: {a:?}"
            );
        } else {
            assert_eq!((a.leader, a.leader_epoch), (b.leader, b.leader_epoch));
        }
    }

    // Restarted (a new incarnation): it registers again and leads its partitions again,
    // with their data.
    c.node(victim).start_again();
    c.node(victim).wait_ready();
    let back = wait_partitions(&c, leader, "spread", "the victim leads again", |ps| {
        lost.iter().all(|&p| ps[p as usize].leader == victim as u32)
    });
    for &p in &lost {
        assert!(back[p as usize].leader_epoch > offline[p as usize].leader_epoch);
    }
    let info = cli_text(&c, leader, &["cluster", "info"]);
    assert!(info.contains(&format!("broker {victim} alive")), "{info}");
    let got = rill_testkit::consume_exactly(
        c.node(victim),
        "spread",
        rill::client::StartFrom::Beginning,
        values.len(),
    );
    assert_eq!(rill_testkit::values(&got), values);
    wait_until("the restarted broker takes produces", || {
        produce_once(&c, victim, "spread", lost[1]).is_ok()
    });
}

#[test]
fn sigterm_moves_leadership_away_before_the_broker_stops() {
    // Sessions far longer than the test waits: only the controlled shutdown can move the
    // leadership in time.
    let mut c = TestCluster::start(
        3,
        1,
        &[
            "--broker-session-timeout-ms",
            "120000",
            "--broker-heartbeat-interval-ms",
            "250",
        ],
    );
    let leader = c.wait_leader(&[1, 2, 3]);
    client(&c, leader, Duration::from_secs(60))
        .create_topic("moved", 6, 1, vec![])
        .unwrap();
    let before = wait_partitions(&c, leader, "moved", "6 partitions", |ps| ps.len() == 6);
    let victim = a_leader_other_than(&before, leader);
    let lost = led_by(&before, victim as u32);
    assert!(c.node(victim).terminate().success());
    assert!(
        c.node(victim).log_text().contains("controlled shutdown"),
        "{}",
        c.node(victim).log_text()
    );
    let start = Instant::now();
    let after = wait_partitions(&c, leader, "moved", "the victim leads nothing", |ps| {
        led_by(ps, victim as u32).is_empty()
    });
    assert!(
        start.elapsed() < Duration::from_secs(60),
        "{:?}",
        start.elapsed()
    );
    let info = cli_text(&c, leader, &["cluster", "info"]);
    assert!(
        info.contains(&format!("broker {victim} shutting-down")),
        "{info}"
    );
    for &p in &lost {
        assert_eq!(
            after[p as usize].leader, 0,
            "RF 1: offline, {:?}",
            after[p as usize]
        );
        assert!(after[p as usize].leader_epoch > before[p as usize].leader_epoch);
    }
}

#[test]
fn the_controller_leader_cut_off_fences_itself_and_serves_again_after_the_link_heals() {
    let c = TestCluster::start_with_proxies(3, 1, FAST_SESSIONS);
    let leader = c.wait_leader(&[1, 2, 3]);
    client(&c, leader, Duration::from_secs(60))
        .create_topic("cut", 3, 1, vec![])
        .unwrap();
    let before = wait_partitions(&c, leader, "cut", "3 partitions", |ps| ps.len() == 3);
    let mine = led_by(&before, leader as u32);
    assert_eq!(mine.len(), 1, "{before:?}");
    wait_until("the leader takes produces", || {
        produce_once(&c, leader, "cut", mine[0]).is_ok()
    });

    c.isolate(leader);
    let others: Vec<u64> = (1..=3).filter(|&id| id != leader).collect();
    let new_leader = c.wait_leader(&others);
    // The cut-off broker learns nothing from the quorum: with no heartbeat answered for a
    // session it fences itself and refuses produces to the partition it still thinks it leads.
    wait_until("the cut-off broker refuses produces", || {
        produce_once(&c, leader, "cut", mine[0])
            .is_err_and(|e| e.contains("NOT_LEADER_OR_FOLLOWER") && e.contains("fenced"))
    });
    // The new controller fenced it: its partition is offline.
    wait_partitions(
        &c,
        new_leader,
        "cut",
        "the cut-off broker's partition offline",
        |ps| ps[mine[0] as usize].leader == 0,
    );

    c.heal(leader);
    wait_partitions(
        &c,
        new_leader,
        "cut",
        "the healed broker leads again",
        |ps| ps[mine[0] as usize].leader == leader as u32,
    );
    wait_until("the healed broker takes produces", || {
        produce_once(&c, leader, "cut", mine[0]).is_ok()
    });
}

/// Launches `b`, expects it to exit with a failure, and returns its log's last line.
fn exit_line(b: &mut TestBroker) -> String {
    b.launch();
    let status = b.wait_exit();
    let log = b.log_text();
    assert!(!status.success(), "{log}");
    log.lines().last().unwrap_or_default().to_string()
}

/// `rill <args>` against broker `id`; its stdout (it must succeed).
fn cli_text(c: &TestCluster, id: u64, args: &[&str]) -> String {
    let out = c.nodes[id as usize - 1].cli(args, None);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn wait_until(what: &str, f: impl Fn() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(start.elapsed() < DEADLINE, "{what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_broker_that_is_not_a_voter_joins_and_a_second_one_with_its_node_id_is_refused() {
    let c = TestCluster::start(3, 1, FAST_SESSIONS);
    let leader = c.wait_leader(&[1, 2, 3]);
    // Metadata made before the broker exists: it gets it all when it joins.
    for i in 0..20 {
        client(&c, leader, Duration::from_secs(60))
            .create_topic(&format!("before-{i}"), 1, 1, vec![])
            .unwrap();
    }
    let kafka4 = rill_testkit::free_ports(2);
    let kafka_flag = format!("127.0.0.1:{kafka4}");
    let mut b4 = c.non_voter(
        4,
        2,
        &[FAST_SESSIONS, &["--kafka-listen", &kafka_flag]].concat(),
    );
    b4.launch();
    b4.wait_ready();
    let mut cl4 = Client::connect(ClientConfig::new(b4.bootstrap())).unwrap();
    let topics = cl4.refresh_metadata().unwrap().topics.clone();
    for i in 0..20 {
        assert!(topics.contains_key(&format!("before-{i}")), "{topics:?}");
    }
    // It registered: every voter lists it.
    for id in 1..=3 {
        let info = client(&c, id, Duration::from_secs(60))
            .cluster_info()
            .unwrap();
        assert!(
            info.brokers.iter().any(|b| b.node_id == 4 && b.shards == 2),
            "{info:?}"
        );
    }
    // A create through it is answered once its own metadata has the topic, and leaders
    // spread over all four brokers, it included.
    cl4.create_topic("after-join", 8, 1, vec![]).unwrap();
    let md = cl4
        .refresh_metadata()
        .unwrap()
        .topics
        .get("after-join")
        .cloned();
    let md = md.expect("the create is answered once the broker's own metadata has it");
    for b in 1..=4 {
        assert_eq!(led_by(&md.partitions, b).len(), 2, "{md:?}");
    }
    // The voters see the same partition plan (each applies it a moment later).
    for id in 1..=3 {
        let on = wait_partitions(&c, id, "after-join", "8 partitions", |ps| ps.len() == 8);
        assert_eq!(on, md.partitions);
    }
    let mine = led_by(&md.partitions, 4)[0];
    let values: Vec<String> = (0..30).map(|i| format!("via-4-{i}")).collect();
    rill_testkit::produce_values(&b4, "after-join", mine, values.clone());
    let got = rill_testkit::consume_exactly(
        &b4,
        "after-join",
        rill::client::StartFrom::Beginning,
        values.len(),
    );
    assert_eq!(rill_testkit::values(&got), values);
    // Kafka Metadata names leaders, replicas and ISR by the Kafka node of the shard holding
    // them (broker * 1000 + shard), with the leader epoch.
    let kmd: kafka_protocol::messages::MetadataResponse = rill_testkit::kafka_call(
        &kafka_flag,
        kafka_protocol::messages::ApiKey::Metadata,
        12,
        &kafka_protocol::messages::MetadataRequest::default().with_topics(None),
    );
    let kt = kmd
        .topics
        .iter()
        .find(|t| t.name.as_ref().map(|n| n.0.as_str()) == Some("after-join"))
        .expect("after-join in Kafka metadata");
    for kp in &kt.partitions {
        let p = &md.partitions[kp.partition_index as usize];
        let node = (p.leader * 1000 + p.shard) as i32;
        assert_eq!(kp.leader_id.0, node, "{kp:?}");
        assert_eq!(kp.leader_epoch, p.leader_epoch as i32);
        assert_eq!(
            kp.replica_nodes.iter().map(|n| n.0).collect::<Vec<_>>(),
            vec![node]
        );
        assert_eq!(
            kp.isr_nodes.iter().map(|n| n.0).collect::<Vec<_>>(),
            vec![node]
        );
    }

    // A second broker with node id 4 (another data dir, another incarnation): refused while
    // the first heartbeats; it exits with one line naming the node id.
    let mut dup = c.non_voter(4, 1, FAST_SESSIONS);
    let last = exit_line(&mut dup);
    assert!(
        last.starts_with("rill: error: ")
            && last.contains("node id 4")
            && last.contains("already registered"),
        "{last}"
    );
    // The first one still serves.
    produce_once(&c, leader, "before-0", 0).unwrap();
    // min.insync.replicas above the replication factor: one line, nothing stored.
    let err = cl4
        .create_topic(
            "strict",
            1,
            1,
            vec![("min.insync.replicas".to_string(), "2".to_string())],
        )
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("min.insync.replicas") && !err.contains('\n'),
        "{err}"
    );
    assert!(!cl4
        .refresh_metadata()
        .unwrap()
        .topics
        .contains_key("strict"));
    rill_testkit::produce_values(&b4, "after-join", mine, ["still".to_string()]);

    // SIGKILLed and restarted (its data dir holds topics but no controller files): it waits
    // out its old session, registers again and serves its partitions with their data.
    b4.restart();
    b4.wait_ready();
    wait_partitions(&c, leader, "after-join", "broker 4 leads again", |ps| {
        led_by(ps, 4).len() == 2
    });
    let got = rill_testkit::consume_exactly(
        &b4,
        "after-join",
        rill::client::StartFrom::Beginning,
        values.len() + 1,
    );
    let mut want = values.clone();
    want.push("still".to_string());
    assert_eq!(rill_testkit::values(&got), want);
}

#[test]
fn non_voter_flags_that_cannot_work_are_one_line_errors() {
    let voters = "1@127.0.0.1:1,2@127.0.0.1:2,3@127.0.0.1:3";
    for (args, want) in [
        (
            vec![
                "--node-id",
                "2",
                "--process-roles",
                "broker",
                "--controller-voters",
                voters,
            ],
            "is in --controller-voters",
        ),
        (
            vec!["--node-id", "4", "--process-roles", "broker"],
            "must list its 3 or 5 voters",
        ),
    ] {
        let e = refused(&args);
        assert!(e.contains(want), "{args:?}: {e}");
    }
}

#[test]
fn rf3_placement_over_three_brokers_of_two_shards() {
    // Two shards each: a broker may not run more shards than the machine has cores (2 here).
    let c = TestCluster::start(3, 2, FAST_SESSIONS);
    c.wait_leader(&[1, 2, 3]);
    client(&c, 2, Duration::from_secs(60))
        .create_topic(
            "placed",
            12,
            3,
            vec![("min.insync.replicas".to_string(), "2".to_string())],
        )
        .expect("RF 3 over 3 live brokers");
    // Every broker sees the same plan: each partition with a leader and all three in its ISR.
    let ps = wait_partitions(&c, 1, "placed", "12 partitions, full ISRs", |ps| {
        ps.len() == 12 && ps.iter().all(|p| p.leader != 0 && p.isr.len() == 3)
    });
    for id in 2..=3 {
        let on = wait_partitions(&c, id, "placed", "the same plan", |on| on == ps);
        assert_eq!(on, ps);
    }
    let mut per_shard: BTreeMap<(u32, u32), usize> = BTreeMap::new();
    for p in &ps {
        let mut r = p.replicas.clone();
        r.sort_unstable();
        assert_eq!(r, vec![1, 2, 3], "three distinct brokers: {p:?}");
        assert_eq!(
            p.leader, p.replicas[0],
            "the preferred replica leads: {p:?}"
        );
        assert!(p.shard < 2, "{p:?}");
        *per_shard.entry((p.leader, p.shard)).or_default() += 1;
    }
    for b in 1..=3u32 {
        assert_eq!(led_by(&ps, b).len(), 4, "broker {b} leads 4: {ps:?}");
        let counts: Vec<usize> = (0..2)
            .map(|s| per_shard.get(&(b, s)).copied().unwrap_or(0))
            .collect();
        assert_eq!(counts, vec![2, 2], "broker {b}'s leaders over its 2 shards");
    }
    // Every broker stores every partition.
    for b in &c.nodes {
        for p in 0..12 {
            let dir = rill_testkit::partition_dir(&b.data_dir(), "placed", p);
            assert!(dir.is_dir(), "{} missing", dir.display());
        }
    }
    // `topic describe` shows each partition's leader, epoch, replicas and ISR.
    let text = cli_text(&c, 3, &["topic", "describe", "placed"]);
    for p in &ps {
        let line = text
            .lines()
            .find(|l| {
                l.trim_start()
                    .starts_with(&format!("partition {} ", p.partition))
            })
            .unwrap_or_else(|| panic!("partition {} in {text}", p.partition));
        assert!(
            line.contains(&format!("leader broker {} shard {}", p.leader, p.shard))
                && line.contains(&format!("replicas {:?}", p.replicas))
                && line.contains(&format!("isr {:?}", p.isr))
                && line.contains(&format!("epoch {}", p.leader_epoch)),
            "{line}"
        );
    }
    // acks=all (min.insync.replicas 2) is answered on every partition: each leader's shard
    // and its followers' shards hold and replicate it.
    let producer = rill_testkit::producer(&c.nodes[0], 1 << 10);
    let reports: Vec<_> = (0..12u32)
        .map(|p| {
            let v = format!("to-{p}");
            producer
                .send(rill::client::ProducerRecord::new("placed", v.as_bytes()).partition(p))
                .unwrap()
        })
        .collect();
    producer.flush().unwrap();
    for (p, r) in reports.into_iter().enumerate() {
        let md = r.wait().unwrap_or_else(|e| panic!("partition {p}: {e}"));
        assert_eq!((md.partition, md.offset), (p as u32, Some(0)));
    }
}
