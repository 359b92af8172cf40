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
    // Three brokers, but no partition replication yet: a replication factor above 1 is
    // refused rather than stored as replicas that would hold no data.
    let err = client(&c, follower, Duration::from_secs(60))
        .create_topic("replicated", 1, 3, vec![])
        .unwrap_err();
    assert!(
        err.to_string().contains("replication is not built"),
        "{err}"
    );
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
        (&["--process-roles", "broker"], "not supported yet"),
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
    let ports: Vec<u16> = (0..4)
        .map(|_| {
            std::net::TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port()
        })
        .collect();
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
    n3.launch();
    let status = n3.wait_exit();
    assert!(!status.success());
    let log = n3.log_text();
    let last = log.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("rill: error: ") && last.contains("controller voters disagree"),
        "{log}"
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
