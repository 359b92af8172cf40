//! Deterministic tests of [`ControllerCore`] as one voter of 3: elections, replication,
//! refusals on followers, the persist-before-send rule, restarts and snapshots to a lagging
//! voter. A tiny in-memory network moves [`Action::Send`] messages; nothing sleeps.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;

use raft::eraftpb::{Message, MessageType};
use raft::Storage;

use super::core::{Action, ControllerCore, CoreConfig};
use super::metadata::{Applied, BrokerInfo, ClusterMetadata, Command};
use super::raft_log::LogStore;
use super::ControllerError;
use crate::protocol::error_code::ErrorCode;

const VOTERS: [u64; 3] = [1, 2, 3];

struct Net {
    dirs: BTreeMap<u64, tempfile::TempDir>,
    cores: BTreeMap<u64, ControllerCore>,
    /// Nodes cut off: messages from or to them are dropped.
    cut: BTreeSet<u64>,
    queue: VecDeque<Message>,
    /// Every applied command outcome per node, in order: (raft index, metadata after it).
    applied: BTreeMap<u64, Vec<(u64, Arc<ClusterMetadata>)>>,
    snapshots_sent: usize,
    snapshots_installed: BTreeMap<u64, usize>,
    compact_every: u64,
}

impl Net {
    fn new(compact_every: u64) -> Net {
        let mut net = Net {
            dirs: BTreeMap::new(),
            cores: BTreeMap::new(),
            cut: BTreeSet::new(),
            queue: VecDeque::new(),
            applied: BTreeMap::new(),
            snapshots_sent: 0,
            snapshots_installed: BTreeMap::new(),
            compact_every,
        };
        for id in VOTERS {
            net.dirs.insert(id, tempfile::tempdir().unwrap());
            net.start(id);
        }
        net
    }

    fn start(&mut self, id: u64) {
        let store = LogStore::open(self.dirs[&id].path()).unwrap();
        let mut cfg = CoreConfig::voter(id, VOTERS.to_vec(), "quorum-test");
        cfg.compact_every = self.compact_every;
        // Distinct timeouts: node 1 times out first, deterministically.
        cfg.fixed_election_timeout = Some(10 + 3 * (id as usize - 1));
        let core = ControllerCore::new(cfg, store).unwrap();
        assert!(!core.is_leader(), "a voter of 3 must not lead on its own");
        self.cores.insert(id, core);
    }

    fn crash(&mut self, id: u64) {
        self.cores.remove(&id);
        self.queue.retain(|m| m.to != id);
    }

    /// Runs ready() on every node, checks the persist-before-send rule on what it sends, and
    /// queues the messages.
    fn drain(&mut self) {
        for (&id, core) in self.cores.iter_mut() {
            for a in core.ready().unwrap() {
                match a {
                    Action::Send(m) => {
                        check_persisted_before_send(core.store(), &m);
                        if m.get_msg_type() == MessageType::MsgSnapshot {
                            self.snapshots_sent += 1;
                        }
                        if !self.cut.contains(&m.from) && !self.cut.contains(&m.to) {
                            self.queue.push_back(m);
                        }
                    }
                    Action::Applied {
                        index, metadata, ..
                    } => self.applied.entry(id).or_default().push((index, metadata)),
                    Action::SnapshotInstalled { index, metadata } => {
                        *self.snapshots_installed.entry(id).or_default() += 1;
                        self.applied.entry(id).or_default().push((index, metadata));
                    }
                    _ => {}
                }
            }
        }
    }

    fn deliver(&mut self) {
        while let Some(m) = self.queue.pop_front() {
            if let Some(core) = self.cores.get_mut(&m.to) {
                core.step(m).unwrap();
            }
        }
    }

    fn round(&mut self) {
        self.drain();
        self.deliver();
        self.drain();
        self.deliver();
        for core in self.cores.values_mut() {
            core.tick();
        }
    }

    /// Rounds until one node is ready; returns it.
    fn leader(&mut self) -> u64 {
        for _ in 0..500 {
            self.round();
            let ready: Vec<u64> = self
                .cores
                .iter()
                .filter(|(_, c)| c.is_ready())
                .map(|(&id, _)| id)
                .collect();
            assert!(ready.len() <= 1, "two ready leaders: {ready:?}");
            if let Some(&id) = ready.first() {
                return id;
            }
        }
        panic!("no leader elected");
    }

    /// Proposes at `at` and rounds until every live, connected node applied it.
    fn run(&mut self, at: u64, cmd: &Command) -> Applied {
        self.cores.get_mut(&at).unwrap().propose(cmd).unwrap();
        for _ in 0..200 {
            self.round();
            let target = self.cores[&at].applied_index();
            let done = self
                .cores
                .iter()
                .filter(|(id, _)| !self.cut.contains(id))
                .all(|(_, c)| c.applied_index() >= target);
            if done && self.cores[&at].pending_len() == 0 {
                let md = self.cores[&at].metadata().clone();
                return applied_of(&md, cmd);
            }
        }
        panic!("proposal never applied everywhere");
    }
}

/// What `cmd` did, read back from the metadata (the test only needs brokers and topics).
fn applied_of(md: &ClusterMetadata, cmd: &Command) -> Applied {
    match cmd {
        Command::RegisterBroker(_) => Applied::BrokerRegistered,
        Command::CreateTopic { name, .. } => Applied::TopicCreated(md.topics[name].clone()),
        other => panic!("not used here: {other:?}"),
    }
}

/// raft's rule: a vote or an append acknowledgement goes out only once what it promises is
/// on disk. `ready()` returns messages after persisting, so the store already holds it.
fn check_persisted_before_send(store: &LogStore, m: &Message) {
    let hs = store.hard_state();
    // A pre-vote names the term the node would campaign in, without moving to it.
    let pre_vote = matches!(
        m.get_msg_type(),
        MessageType::MsgRequestPreVote | MessageType::MsgRequestPreVoteResponse
    );
    assert!(
        pre_vote || hs.term >= m.term,
        "message of term {} sent before the term was persisted ({})",
        m.term,
        hs.term
    );
    match m.get_msg_type() {
        MessageType::MsgRequestVoteResponse if !m.reject => {
            assert_eq!(
                hs.vote, m.to,
                "vote for {} sent before it was persisted",
                m.to
            );
        }
        MessageType::MsgAppendResponse if !m.reject => {
            let last = store.last_index().unwrap();
            assert!(
                last >= m.index,
                "append of {} acknowledged with only {last} persisted",
                m.index
            );
        }
        MessageType::MsgAppend => {
            if let Some(e) = m.entries.last() {
                assert!(store.last_index().unwrap() >= e.index);
            }
        }
        _ => {}
    }
}

fn broker(id: u32) -> Command {
    Command::RegisterBroker(BrokerInfo {
        node_id: id,
        host: "127.0.0.1".into(),
        port: 9292,
        shards: 2,
        kafka_port: None,
    })
}

fn create(name: &str) -> Command {
    Command::CreateTopic {
        name: name.into(),
        partitions: 2,
        replication_factor: 1,
        configs: BTreeMap::new(),
    }
}

/// The metadata without the per-node `controller_id`.
fn replicated(md: &ClusterMetadata) -> ClusterMetadata {
    ClusterMetadata {
        controller_id: 0,
        ..md.clone()
    }
}

#[test]
fn three_voters_elect_one_leader_and_replicate() {
    let mut net = Net::new(1024);
    let leader = net.leader();
    assert_eq!(leader, 1, "node 1 has the shortest election timeout");
    net.run(leader, &broker(1));
    let Applied::TopicCreated(t) = net.run(leader, &create("orders")) else {
        panic!()
    };
    assert_eq!(t.partitions.len(), 2);
    let want = replicated(net.cores[&leader].metadata());
    assert_eq!(want.cluster_id, "quorum-test");
    for (id, core) in &net.cores {
        assert_eq!(&replicated(core.metadata()), &want, "node {id}");
        assert_eq!(core.metadata().controller_id, leader, "node {id}");
    }
    // Every node applied the same sequence of (index, metadata).
    let seq = |id: u64| -> Vec<(u64, ClusterMetadata)> {
        net.applied[&id]
            .iter()
            .map(|(i, md)| (*i, replicated(md)))
            .collect()
    };
    assert_eq!(seq(2), seq(1));
    assert_eq!(seq(3), seq(1));
    assert!(seq(1).len() >= 3, "init, broker, topic: {:?}", seq(1).len());
}

#[test]
fn a_follower_refuses_proposals_naming_the_leader() {
    let mut net = Net::new(1024);
    let leader = net.leader();
    let follower = *VOTERS.iter().find(|&&id| id != leader).unwrap();
    let err = net
        .cores
        .get_mut(&follower)
        .unwrap()
        .propose(&broker(1))
        .unwrap_err();
    assert_eq!(
        err,
        ControllerError::NotController {
            node_id: follower,
            leader_id: leader
        }
    );
    assert_eq!(err.code(), ErrorCode::NotController);
    assert!(
        err.to_string()
            .contains(&format!("the leader is node {leader}")),
        "{err}"
    );
    assert_eq!(net.cores[&follower].pending_len(), 0);
}

#[test]
fn a_new_leader_keeps_every_committed_entry_and_a_restarted_voter_catches_up() {
    let mut net = Net::new(1024);
    let first = net.leader();
    net.run(first, &broker(1));
    net.run(first, &create("a"));
    let before = replicated(net.cores[&first].metadata());
    net.crash(first);
    let second = net.leader();
    assert_ne!(second, first);
    assert_eq!(replicated(net.cores[&second].metadata()), before);
    net.run(second, &create("b"));
    // The old leader restarts from its files and catches up.
    net.start(first);
    for _ in 0..100 {
        net.round();
    }
    let want = replicated(net.cores[&second].metadata());
    assert!(want.topics.contains_key("b"));
    assert_eq!(replicated(net.cores[&first].metadata()), want);
    assert!(!net.cores[&first].is_leader());
}

#[test]
fn a_lagging_voter_gets_a_snapshot() {
    let mut net = Net::new(3);
    let leader = net.leader();
    let lagging = 3;
    assert_ne!(leader, lagging);
    net.cut.insert(lagging);
    net.run(leader, &broker(1));
    for name in ["a", "b", "c", "d", "e", "f"] {
        net.run(leader, &create(name));
    }
    let first = net.cores[&leader].store().first_index().unwrap();
    assert!(
        first > 4,
        "the leader compacted its log (first index {first})"
    );
    assert!(net.cores[&lagging].metadata().topics.is_empty());
    net.cut.clear();
    for _ in 0..100 {
        net.round();
    }
    assert!(net.snapshots_sent >= 1, "no snapshot sent");
    assert!(net.snapshots_installed.get(&lagging).copied().unwrap_or(0) >= 1);
    let want = replicated(net.cores[&leader].metadata());
    assert_eq!(want.topics.len(), 6);
    assert_eq!(replicated(net.cores[&lagging].metadata()), want);
    // And it survives a restart from the installed snapshot.
    net.crash(lagging);
    net.start(lagging);
    assert_eq!(replicated(net.cores[&lagging].metadata()), want);
}
