//! Deterministic simulation of a controller quorum (3 or 5 voters) and the brokers it manages.
//!
//! One seed drives everything: a small xorshift PRNG schedules ticks, client proposals (topic
//! creates and deletes), broker registrations, heartbeats, crashes, restarts and controlled
//! shutdowns, and a simulated network that drops, delays, duplicates, reorders and partitions
//! raft messages. Voters crash and restart from their persisted [`LogStore`] (temp directories,
//! on /dev/shm where it exists so fsyncs are cheap; removed when the run ends, also on failure).
//! raft-rs's own randomness (election timeouts) is pinned per node from the seed
//! ([`CoreConfig::fixed_election_timeout`]), and every map is ordered, so a seed replays exactly;
//! `same_seed_replays_exactly` checks that on a digest of every event.
//!
//! Checked after every step (a violation panics naming the seed and the step):
//! - at most one raft leader per term;
//! - a committed entry is never lost or changed (every voter's log agrees, up to its commit
//!   index, with every entry any voter ever saw committed);
//! - every voter applies the same sequence: the metadata after raft index `i` is the same on
//!   every voter that applied `i` (or installed a snapshot at `i`), and applied indexes only
//!   grow;
//! - every broker follows the same sequence, as a broker that is not a voter does
//!   (`observer.rs`): it takes a voter's whole metadata when it is not older than its own, and
//!   each one it takes is the state every voter had at that metadata index;
//! - no partition has two leaders in one leader epoch; leader and partition epochs never go
//!   back; a fenced or shutting-down broker leads nothing; a leader is live and in its ISR;
//!   replicas are distinct;
//! - at the end, with faults healed and every voter up, all voters converge on the same
//!   metadata (a liveness check in simulated steps, not in time).
//!
//! `RILL_SIM_SEED=N` replays seed N alone; `RILL_SIM_SEEDS=N` runs seeds 0..N (default
//! [`CI_SEEDS`]); `RILL_SIM_STEPS` changes the steps per seed. `scripts/sim-seeds.sh` runs
//! thousands in release mode.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;

use raft::eraftpb::Message;
use raft::{GetEntriesContext, Storage};

use super::cluster::{BrokerRegistration, BrokerState, ClusterManager, Heartbeat, NO_LEADER};
use super::core::{Action, ControllerCore, CoreConfig};
use super::metadata::{Applied, BrokerInfo, ClusterMetadata, Command};
use super::raft_log::LogStore;
use super::reassignment::Reassignment;
use super::ControllerError;

/// Seeds a plain `cargo test` runs (keeps the debug test well under a minute on 2 busy cores).
pub const CI_SEEDS: u64 = 32;
/// Simulated steps per seed; one step is 50 ms of simulated time.
pub const DEFAULT_STEPS: u64 = 2500;
const STEP_MS: u64 = 50;
/// Messages in flight at most; more are dropped (a bounded network, like a real one).
const MAX_IN_FLIGHT: usize = 4096;
/// Longest a message stays in flight, in steps.
const MAX_DELAY_STEPS: u64 = 8;
/// Quiet steps at the end for the voters to converge.
const SETTLE_STEPS: u64 = 600;
const SESSION_TIMEOUT_MS: u64 = 3_000;
const HEARTBEAT_EVERY_MS: u64 = 500;
const TOPIC_NAMES: u64 = 6;

/// xorshift64*: tiny, deterministic, good enough for scheduling (the replication simulator
/// uses it too).
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Rng {
        // splitmix64 of the seed, so seeds 0, 1, 2... start far apart (and never at 0).
        let mut z = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        Rng((z ^ (z >> 31)) | 1)
    }

    pub(crate) fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    /// True with probability `per_mille` / 1000.
    pub(crate) fn chance(&mut self, per_mille: u64) -> bool {
        self.below(1000) < per_mille
    }
}

struct Node {
    dir: std::path::PathBuf,
    core: Option<ControllerCore>,
    mgr: ClusterManager,
    /// Whether it was ready (current leader) after the previous step: a new active controller
    /// resets the heartbeat sessions.
    was_ready: bool,
    last_applied: u64,
    /// Log checked against the committed oracle up to here.
    checked: u64,
    /// (topic id, partition) -> (leader epoch, partition epoch) last seen applied here.
    epochs: BTreeMap<(u64, u32), (u32, u32)>,
    /// (topic id, partition) -> the reassignment last seen running here.
    reassigning: BTreeMap<(u64, u32), Reassignment>,
}

struct SimBroker {
    id: u32,
    shards: u32,
    rack: Option<String>,
    incarnation: u64,
    broker_epoch: Option<u64>,
    up: bool,
    want_shutdown: bool,
    next_heartbeat_ms: u64,
    /// The metadata this broker follows (pushed by a voter, as to a non-voter broker).
    followed: Arc<ClusterMetadata>,
}

struct InFlight {
    at: u64,
    seq: u64,
    msg: Message,
}

#[derive(Default, Debug, Clone, Copy)]
pub struct Stats {
    pub leaders: u64,
    pub applied: u64,
    pub topics_created: u64,
    pub fences: u64,
    pub shutdowns: u64,
    pub snapshots: u64,
    pub crashes: u64,
    pub dropped: u64,
    /// Metadata states brokers took from voters.
    pub followed: u64,
    /// Reassignments seen completing (replicas became the target) on some voter.
    pub reassignments_completed: u64,
}

struct Sim {
    seed: u64,
    rng: Rng,
    step: u64,
    nodes: BTreeMap<u64, Node>,
    brokers: Vec<SimBroker>,
    net: Vec<InFlight>,
    seq: u64,
    /// One side of a network partition (None: healed).
    side: Option<BTreeSet<u64>>,
    compact_every: u64,
    leaders_by_term: BTreeMap<u64, u64>,
    committed: BTreeMap<u64, (u64, Vec<u8>)>,
    applied: BTreeMap<u64, String>,
    /// Metadata (as JSON, no controller id) by its own `applied_index`: the same on every voter.
    by_metadata_index: BTreeMap<u64, String>,
    partition_leaders: BTreeMap<(u64, u32, u32), u32>,
    digest: u64,
    stats: Stats,
    _base: tempfile::TempDir,
}

pub(crate) fn fnv(mut h: u64, bytes: &[u8]) -> u64 {
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x100_0000_01b3);
    }
    h
}

fn sim_base() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    let b = tempfile::Builder::new().prefix("rill-sim-").tempdir_in(shm);
    match b {
        Ok(d) if shm.is_dir() => d,
        _ => tempfile::Builder::new()
            .prefix("rill-sim-")
            .tempdir()
            .expect("temp dir"),
    }
}

impl Sim {
    fn new(seed: u64) -> Sim {
        let mut rng = Rng::new(seed);
        let voters = if rng.below(2) == 0 { 3 } else { 5 };
        let base = sim_base();
        let mut nodes = BTreeMap::new();
        for id in 1..=voters {
            let dir = base.path().join(format!("voter-{id}"));
            nodes.insert(
                id,
                Node {
                    dir,
                    core: None,
                    mgr: ClusterManager::new(SESSION_TIMEOUT_MS),
                    was_ready: false,
                    last_applied: 0,
                    checked: 0,
                    epochs: BTreeMap::new(),
                    reassigning: BTreeMap::new(),
                },
            );
        }
        let racks = rng.below(3) == 0;
        let brokers = (1..=3 + rng.below(2) as u32)
            .map(|id| SimBroker {
                id,
                shards: 1 + rng.below(3) as u32,
                rack: racks.then(|| format!("rack-{}", id % 2)),
                incarnation: rng.next(),
                broker_epoch: None,
                up: true,
                want_shutdown: false,
                next_heartbeat_ms: 0,
                followed: Arc::new(ClusterMetadata::default()),
            })
            .collect();
        let mut sim = Sim {
            seed,
            rng,
            step: 0,
            nodes,
            brokers,
            net: Vec::new(),
            seq: 0,
            side: None,
            compact_every: 0,
            leaders_by_term: BTreeMap::new(),
            committed: BTreeMap::new(),
            applied: BTreeMap::new(),
            by_metadata_index: BTreeMap::new(),
            partition_leaders: BTreeMap::new(),
            digest: 0xcbf2_9ce4_8422_2325,
            stats: Stats::default(),
            _base: base,
        };
        // Small compaction intervals make snapshots to lagging voters common.
        sim.compact_every = 8 + sim.rng.below(40);
        let ids: Vec<u64> = sim.nodes.keys().copied().collect();
        for id in ids {
            sim.start(id);
        }
        sim
    }

    fn fail(&self, what: impl std::fmt::Display) -> ! {
        panic!(
            "simulation seed {} step {}: {what} (replay: RILL_SIM_SEED={} cargo test --lib \
             controller::sim)",
            self.seed, self.step, self.seed
        )
    }

    fn now_ms(&self) -> u64 {
        self.step * STEP_MS
    }

    fn note(&mut self, bytes: &[u8]) {
        self.digest = fnv(self.digest, bytes);
    }

    fn start(&mut self, id: u64) {
        let voters: Vec<u64> = self.nodes.keys().copied().collect();
        let timeout = 10 + self.rng.below(10) as usize;
        let node = self.nodes.get_mut(&id).expect("node");
        let store = match LogStore::open(&node.dir) {
            Ok(s) => s,
            Err(e) => self.fail(format!("voter {id} cannot reopen its store: {e}")),
        };
        let mut cfg = CoreConfig::voter(id, voters, format!("sim-{}", self.seed));
        cfg.compact_every = self.compact_every;
        cfg.fixed_election_timeout = Some(timeout);
        let core = match ControllerCore::new(cfg, store) {
            Ok(c) => c,
            Err(e) => self.fail(format!("voter {id} cannot restart: {e}")),
        };
        let node = self.nodes.get_mut(&id).expect("node");
        // Applied indexes restart from the snapshot: replaying entries is allowed to repeat.
        node.last_applied = core.applied_index();
        node.checked = 0;
        // It replays from its snapshot: the epochs it saw later come again, in order.
        node.epochs.clear();
        node.was_ready = false;
        node.core = Some(core);
        self.note(&[b'S', id as u8]);
    }

    fn crash(&mut self, id: u64) {
        if let Some(node) = self.nodes.get_mut(&id) {
            node.core = None;
        }
        self.net.retain(|m| m.msg.to != id);
        self.stats.crashes += 1;
        self.note(&[b'C', id as u8]);
    }

    fn connected(&self, a: u64, b: u64) -> bool {
        match &self.side {
            Some(side) => side.contains(&a) == side.contains(&b),
            None => true,
        }
    }

    fn send(&mut self, msg: Message) {
        if !self.connected(msg.from, msg.to) || self.rng.chance(50) {
            self.stats.dropped += 1;
            return;
        }
        let copies = if self.rng.chance(20) { 2 } else { 1 };
        for _ in 0..copies {
            if self.net.len() >= MAX_IN_FLIGHT {
                self.stats.dropped += 1;
                return;
            }
            let at = self.step + self.rng.below(MAX_DELAY_STEPS + 1);
            self.seq += 1;
            self.net.push(InFlight {
                at,
                seq: self.seq,
                msg: msg.clone(),
            });
        }
    }

    /// ready() on node `id` and everything it returns.
    fn pump(&mut self, id: u64) {
        let Some(core) = self.nodes.get_mut(&id).and_then(|n| n.core.as_mut()) else {
            return;
        };
        let actions = match core.ready() {
            Ok(a) => a,
            Err(e) => self.fail(format!("voter {id}: ready failed: {e}")),
        };
        for a in actions {
            match a {
                Action::Send(m) => self.send(m),
                Action::Applied {
                    index,
                    metadata,
                    proposal,
                    result,
                } => {
                    self.stats.applied += 1;
                    if proposal.is_some() && matches!(result, Ok(Applied::TopicCreated(_))) {
                        self.stats.topics_created += 1;
                    }
                    self.check_applied(id, index, &metadata, false);
                }
                Action::SnapshotInstalled { index, metadata } => {
                    self.stats.snapshots += 1;
                    if let Some(n) = self.nodes.get_mut(&id) {
                        n.checked = 0;
                    }
                    self.check_applied(id, index, &metadata, true);
                }
                Action::LeaderChanged {
                    leader_id, term, ..
                } => {
                    self.note(&[b'L', id as u8, leader_id as u8, term as u8]);
                }
                Action::Dropped { .. } => {}
            }
        }
    }

    fn propose(&mut self, id: u64, cmd: &Command) {
        let Some(core) = self.nodes.get_mut(&id).and_then(|n| n.core.as_mut()) else {
            return;
        };
        match core.propose(cmd) {
            Ok(_) => self.note(format!("P{id}{cmd:?}").as_bytes()),
            // Refusals are part of the game: not the leader, invalid now, too many pending.
            Err(ControllerError::NotController { .. })
            | Err(ControllerError::NotLeader)
            | Err(ControllerError::Metadata(_))
            | Err(ControllerError::Overloaded(_)) => {}
            Err(e) => self.fail(format!("voter {id}: propose failed: {e}")),
        }
        self.pump(id);
    }

    fn check_applied(&mut self, id: u64, index: u64, md: &Arc<ClusterMetadata>, snapshot: bool) {
        let node = self.nodes.get_mut(&id).expect("node");
        if index <= node.last_applied && !(snapshot && index == node.last_applied) {
            let last = node.last_applied;
            self.fail(format!(
                "voter {id} applied index {index} after {last} (applied must only grow)"
            ));
        }
        node.last_applied = index;
        let mut plain = (**md).clone();
        plain.controller_id = 0;
        let json = serde_json::to_string(&plain).expect("metadata encodes");
        self.note(json.as_bytes());
        match self.applied.get(&index) {
            Some(seen) if *seen != json => self.fail(format!(
                "voter {id} has other metadata after index {index} than another voter:\n{json}\nvs\n{seen}"
            )),
            Some(_) => {}
            None => {
                self.applied.insert(index, json.clone());
            }
        }
        match self.by_metadata_index.get(&md.applied_index) {
            Some(seen) if *seen != json => self.fail(format!(
                "voter {id} has other metadata at metadata index {} than another voter:\n{json}\nvs\n{seen}",
                md.applied_index
            )),
            Some(_) => {}
            None => {
                self.by_metadata_index.insert(md.applied_index, json);
            }
        }
        // Partition invariants, and epochs that only grow along this voter's sequence.
        for t in md.topics.values() {
            for p in &t.partitions {
                let key = (t.id, p.partition, p.leader_epoch);
                if let Some(&other) = self.partition_leaders.get(&key) {
                    if other != p.leader {
                        self.fail(format!(
                            "{}-{} has leaders {other} and {} in leader epoch {}",
                            t.name, p.partition, p.leader, p.leader_epoch
                        ));
                    }
                } else {
                    self.partition_leaders.insert(key, p.leader);
                }
                let node = self.nodes.get_mut(&id).expect("node");
                let now = (p.leader_epoch, p.partition_epoch);
                if let Some(&before) = node.epochs.get(&(t.id, p.partition)) {
                    if now.0 < before.0 || now.1 < before.1 {
                        self.fail(format!(
                            "{}-{}: epochs went back from {before:?} to {now:?} on voter {id}",
                            t.name, p.partition
                        ));
                    }
                }
                let prev_pe = node.epochs.get(&(t.id, p.partition)).map(|e| e.1);
                node.epochs.insert((t.id, p.partition), now);
                // A reassignment: the union, target first, while it runs; then exactly the
                // target with every replica in the ISR, or (cancelled) the original again.
                let before = node.reassigning.remove(&(t.id, p.partition));
                if let Some(r) = &p.reassignment {
                    let mut union = r.target.clone();
                    union.extend(r.removing());
                    if p.replicas != union {
                        self.fail(format!(
                            "{}-{}: replicas {:?} during a move {r:?}",
                            t.name, p.partition, p.replicas
                        ));
                    }
                    node.reassigning.insert((t.id, p.partition), r.clone());
                } else if let Some(r) = before.filter(|_| {
                    // One command apart (several may apply between two looks): completing
                    // takes the AlterPartition and the completion, a cancel one step.
                    prev_pe.is_some_and(|pe| p.partition_epoch <= pe + 2)
                }) {
                    // (Completing asserts in the controller itself that every target
                    // replica is in the ISR: a violation panics inside this apply.)
                    if p.replicas == r.target {
                        self.stats.reassignments_completed += 1;
                    } else if p.replicas != r.original {
                        self.fail(format!(
                            "{}-{}: a move {r:?} ended with replicas {:?}",
                            t.name, p.partition, p.replicas
                        ));
                    }
                }
                if p.isr.is_empty() {
                    self.fail(format!("{}-{}: empty ISR {p:?}", t.name, p.partition));
                }
                let distinct: BTreeSet<u32> = p.replicas.iter().copied().collect();
                if distinct.len() != p.replicas.len() || p.isr.iter().any(|b| !distinct.contains(b))
                {
                    self.fail(format!(
                        "{}-{}: bad replicas/ISR {p:?}",
                        t.name, p.partition
                    ));
                }
                if p.leader != NO_LEADER {
                    if let Some(m) = md.members.get(&p.leader) {
                        if m.state != BrokerState::Active {
                            self.fail(format!(
                                "{}-{} is led by broker {} which is {:?}",
                                t.name, p.partition, p.leader, m.state
                            ));
                        }
                    }
                    if !p.isr.contains(&p.leader) {
                        self.fail(format!(
                            "{}-{}: leader outside ISR {p:?}",
                            t.name, p.partition
                        ));
                    }
                }
            }
        }
    }

    /// At most one leader per term; committed entries never change.
    fn check_quorum(&mut self) {
        let mut violations = Vec::new();
        let mut new_committed = Vec::new();
        for (&id, node) in &mut self.nodes {
            let Some(core) = &node.core else { continue };
            if core.is_leader() {
                match self.leaders_by_term.get(&core.term()) {
                    Some(&other) if other != id => violations.push(format!(
                        "voters {other} and {id} both lead term {}",
                        core.term()
                    )),
                    Some(_) => {}
                    None => {
                        self.leaders_by_term.insert(core.term(), id);
                        self.stats.leaders += 1;
                    }
                }
            }
            let store = core.store();
            let first = store.first_index().unwrap_or(1);
            let from = node.checked.max(first.saturating_sub(1)) + 1;
            let to = core.committed_index().min(store.last_index().unwrap_or(0));
            if from <= to {
                let ents = match store.entries(from, to + 1, None, GetEntriesContext::empty(false))
                {
                    Ok(e) => e,
                    Err(e) => {
                        violations.push(format!("voter {id}: entries {from}..={to}: {e}"));
                        continue;
                    }
                };
                for e in ents {
                    match self.committed.get(&e.index) {
                        Some((term, data)) if *term != e.term || data[..] != e.data[..] => {
                            violations.push(format!(
                                "voter {id}: committed entry {} changed (term {} -> {})",
                                e.index, term, e.term
                            ))
                        }
                        Some(_) => {}
                        None => new_committed.push((e.index, (e.term, e.data.to_vec()))),
                    }
                }
                node.checked = to;
            }
        }
        self.committed.extend(new_committed);
        if let Some(v) = violations.first() {
            self.fail(v);
        }
    }

    fn leader(&self) -> Option<u64> {
        self.nodes
            .iter()
            .filter(|(_, n)| n.core.as_ref().is_some_and(|c| c.is_ready()))
            .max_by_key(|(_, n)| n.core.as_ref().map(|c| c.term()))
            .map(|(&id, _)| id)
    }

    fn faults(&mut self) {
        let ids: Vec<u64> = self.nodes.keys().copied().collect();
        let pick = ids[self.rng.below(ids.len() as u64) as usize];
        let up = self.nodes[&pick].core.is_some();
        if up && self.rng.chance(4) {
            self.crash(pick);
        } else if !up && self.rng.chance(30) {
            self.start(pick);
        }
        if self.side.is_none() && self.rng.chance(3) {
            let side: BTreeSet<u64> = ids
                .iter()
                .copied()
                .filter(|_| self.rng.below(2) == 0)
                .collect();
            self.note(format!("X{side:?}").as_bytes());
            self.side = Some(side);
        } else if self.side.is_some() && self.rng.chance(15) {
            self.side = None;
            self.note(b"H");
        }
    }

    fn deliver(&mut self) {
        let step = self.step;
        let mut due: Vec<InFlight> = Vec::new();
        let mut i = 0;
        while i < self.net.len() {
            if self.net[i].at <= step {
                due.push(self.net.swap_remove(i));
            } else {
                i += 1;
            }
        }
        due.sort_by_key(|m| (m.at, m.seq));
        for m in due {
            let (from, to) = (m.msg.from, m.msg.to);
            if !self.connected(from, to) {
                self.stats.dropped += 1;
                continue;
            }
            let Some(core) = self.nodes.get_mut(&to).and_then(|n| n.core.as_mut()) else {
                continue;
            };
            let kind = m.msg.get_msg_type() as u8;
            if let Err(e) = core.step(m.msg) {
                self.fail(format!("voter {to}: step failed: {e}"));
            }
            self.note(&[b'D', from as u8, to as u8, kind]);
            self.pump(to);
        }
    }

    fn clients(&mut self) {
        if !self.rng.chance(60) {
            return;
        }
        let ids: Vec<u64> = self.nodes.keys().copied().collect();
        // Clients mostly find the leader, sometimes knock on a follower.
        let at = match self.leader() {
            Some(l) if self.rng.below(4) != 0 => l,
            _ => ids[self.rng.below(ids.len() as u64) as usize],
        };
        let name = format!("t{}", self.rng.below(TOPIC_NAMES));
        let cmd = if self.rng.below(3) == 0 {
            Command::DeleteTopic { name }
        } else {
            let mut configs = BTreeMap::new();
            if self.rng.below(3) == 0 {
                configs.insert(
                    super::cluster::UNCLEAN_LEADER_ELECTION.to_string(),
                    "true".to_string(),
                );
            }
            Command::CreateTopic {
                name,
                partitions: 1 + self.rng.below(4) as u32,
                replication_factor: 1 + self.rng.below(3) as u16,
                configs,
            }
        };
        self.propose(at, &cmd);
    }

    /// Operators move partitions (start, cancel, elect preferred leaders) and leaders catch
    /// new replicas up (an AlterPartition adding a live replica to the ISR), against the
    /// leader's current metadata.
    fn reassignments(&mut self) {
        if !self.rng.chance(80) {
            return;
        }
        let Some(leader) = self.leader() else { return };
        let Some(md) = self
            .nodes
            .get(&leader)
            .and_then(|n| n.core.as_ref())
            .map(|c| c.metadata().clone())
        else {
            return;
        };
        let parts: Vec<(&String, &super::metadata::PartitionInfo)> = md
            .topics
            .iter()
            .flat_map(|(n, t)| t.partitions.iter().map(move |p| (n, p)))
            .collect();
        if parts.is_empty() {
            return;
        }
        let (name, p) = parts[self.rng.below(parts.len() as u64) as usize];
        let live: Vec<u32> = md.live_brokers();
        let cmd = match self.rng.below(10) {
            0..=2 if !live.is_empty() => {
                let mut pool = live.clone();
                let n = 1 + self.rng.below(pool.len().min(3) as u64) as usize;
                let mut target = Vec::with_capacity(n);
                for _ in 0..n {
                    target.push(pool.remove(self.rng.below(pool.len() as u64) as usize));
                }
                Command::ReassignPartition {
                    topic: name.clone(),
                    partition: p.partition,
                    replicas: Some(target),
                    partition_epoch: p.partition_epoch,
                }
            }
            3 => Command::ReassignPartition {
                topic: name.clone(),
                partition: p.partition,
                replicas: None,
                partition_epoch: p.partition_epoch,
            },
            4 => Command::ElectPreferred {
                topic: None,
                partition: None,
            },
            _ => {
                let Some(&joining) = p
                    .replicas
                    .iter()
                    .find(|b| !p.isr.contains(b) && live.contains(b))
                else {
                    return;
                };
                if p.leader == NO_LEADER {
                    return;
                }
                let mut isr = p.isr.clone();
                isr.push(joining);
                Command::AlterPartition {
                    topic: name.clone(),
                    partition: p.partition,
                    leader: p.leader,
                    leader_epoch: p.leader_epoch,
                    partition_epoch: p.partition_epoch,
                    isr,
                }
            }
        };
        self.propose(leader, &cmd);
    }

    fn brokers(&mut self) {
        let now = self.now_ms();
        let Some(leader) = self.leader() else { return };
        for i in 0..self.brokers.len() {
            // Crashes, restarts and controlled shutdowns of brokers.
            let (crash, restart, stop) =
                (self.rng.chance(2), self.rng.chance(8), self.rng.chance(1));
            let incarnation = self.rng.next();
            let b = &mut self.brokers[i];
            if b.up && crash {
                b.up = false;
                let id = b.id as u8;
                self.note(&[b'b', id]);
                continue;
            }
            if !b.up {
                if restart {
                    b.up = true;
                    b.want_shutdown = false;
                    b.incarnation = incarnation;
                    b.broker_epoch = None;
                }
                continue;
            }
            if b.broker_epoch.is_some() && !b.want_shutdown && stop {
                b.want_shutdown = true;
            }
            if now < b.next_heartbeat_ms {
                continue;
            }
            b.next_heartbeat_ms = now + HEARTBEAT_EVERY_MS;
            let node = self.nodes.get_mut(&leader).expect("leader");
            let Some(core) = node.core.as_ref() else {
                return;
            };
            let md = core.metadata().clone();
            let b = &mut self.brokers[i];
            // Learn the broker epoch once the registration applied.
            if b.broker_epoch.is_none() {
                if let Some(m) = md.members.get(&b.id) {
                    if m.incarnation == b.incarnation {
                        b.broker_epoch = Some(m.broker_epoch);
                    }
                }
            }
            let cmds = match b.broker_epoch {
                None => {
                    let reg = BrokerRegistration {
                        broker: BrokerInfo {
                            node_id: b.id,
                            host: format!("10.0.0.{}", b.id),
                            port: 9292,
                            shards: b.shards,
                            kafka_port: None,
                        },
                        incarnation: b.incarnation,
                        rack: b.rack.clone(),
                    };
                    node.mgr.register(&md, &reg, now).unwrap_or_default()
                }
                Some(epoch) => {
                    let hb = Heartbeat {
                        node_id: b.id,
                        broker_epoch: epoch,
                        want_shutdown: b.want_shutdown,
                    };
                    match node.mgr.heartbeat(&md, &hb, now) {
                        Ok(out) => {
                            if out.reply.shutdown_ready {
                                // Stops, as a SIGTERMed broker would once it leads nothing.
                                b.up = false;
                                self.stats.shutdowns += 1;
                            }
                            out.propose.into_iter().collect()
                        }
                        Err(_) => {
                            // Stale or unknown: register again.
                            b.broker_epoch = None;
                            Vec::new()
                        }
                    }
                }
            };
            for c in cmds {
                self.propose(leader, &c);
            }
        }
    }

    /// Brokers that are up take a random running voter's metadata now and then, keeping it
    /// when it is not older than theirs (a voter cut off or behind serves an older one).
    fn follow_metadata(&mut self) {
        let voters: Vec<u64> = self
            .nodes
            .iter()
            .filter(|(_, n)| n.core.is_some())
            .map(|(&id, _)| id)
            .collect();
        if voters.is_empty() {
            return;
        }
        for i in 0..self.brokers.len() {
            let pick = voters[self.rng.below(voters.len() as u64) as usize];
            if !self.brokers[i].up || !self.rng.chance(300) {
                continue;
            }
            let Some(core) = self.nodes.get(&pick).and_then(|n| n.core.as_ref()) else {
                continue;
            };
            let md = core.metadata().clone();
            let b = &self.brokers[i];
            if md.applied_index < b.followed.applied_index {
                continue;
            }
            let mut plain = (*md).clone();
            plain.controller_id = 0;
            let json = serde_json::to_string(&plain).expect("metadata encodes");
            if md.applied_index > 0 && self.by_metadata_index.get(&md.applied_index) != Some(&json)
            {
                let id = b.id;
                self.fail(format!(
                    "broker {id} took metadata at index {} from voter {pick} that no voter \
                     applied there:\n{json}",
                    md.applied_index
                ));
            }
            self.brokers[i].followed = md;
            self.stats.followed += 1;
        }
    }

    /// The active controller's duties: reset sessions when it takes over, fence the expired.
    fn controller_duties(&mut self) {
        let now = self.now_ms();
        let ids: Vec<u64> = self.nodes.keys().copied().collect();
        for id in ids {
            let node = self.nodes.get_mut(&id).expect("node");
            let Some(core) = node.core.as_ref() else {
                node.was_ready = false;
                continue;
            };
            let ready = core.is_ready();
            let md = core.metadata().clone();
            if ready && !node.was_ready {
                node.mgr.reset(&md, now);
            }
            node.was_ready = ready;
            if !ready {
                continue;
            }
            let cmds = node.mgr.poll(&md, now);
            for c in cmds {
                if matches!(c, Command::FenceBroker { .. }) {
                    self.stats.fences += 1;
                }
                self.propose(id, &c);
            }
        }
    }

    fn tick(&mut self) {
        let ids: Vec<u64> = self.nodes.keys().copied().collect();
        for id in ids {
            // Each voter ticks on about half the steps: clocks drift apart.
            if self.rng.below(2) == 0 {
                if let Some(core) = self.nodes.get_mut(&id).and_then(|n| n.core.as_mut()) {
                    core.tick();
                }
                self.pump(id);
            }
        }
    }

    /// One step; `faults`: voters crash and the network partitions; `quiet`: no proposals at
    /// all (clients, brokers and controller duties pause), so the voters can converge.
    fn run_step(&mut self, faults: bool, quiet: bool) {
        self.step += 1;
        if faults {
            self.faults();
        }
        self.deliver();
        self.tick();
        if !quiet {
            self.clients();
            self.reassignments();
            self.brokers();
            self.follow_metadata();
            self.controller_duties();
        }
        self.check_quorum();
    }

    /// The distinct metadata states of the running voters (who leads aside).
    fn states(&self) -> BTreeSet<String> {
        self.nodes
            .values()
            .filter_map(|n| n.core.as_ref())
            .map(|c| {
                let mut md = (**c.metadata()).clone();
                md.controller_id = 0;
                serde_json::to_string(&md).expect("encodes")
            })
            .collect()
    }

    /// Every voter up, one state among them, and a ready leader.
    fn converged(&self) -> bool {
        self.states().len() == 1 && self.leader().is_some()
    }

    fn run(mut self, steps: u64) -> (u64, Stats) {
        for _ in 0..steps {
            self.run_step(true, false);
        }
        // Heal everything; every voter up; the quorum must converge.
        self.side = None;
        let down: Vec<u64> = self
            .nodes
            .iter()
            .filter(|(_, n)| n.core.is_none())
            .map(|(&id, _)| id)
            .collect();
        for id in down {
            self.start(id);
        }
        for _ in 0..SETTLE_STEPS {
            self.run_step(false, false);
        }
        // Quiet: no proposals. A late election may still be under way when a fixed number of
        // steps ends (a leader's heartbeats can be unlucky on a lossy network), so run until
        // the voters agree under a ready leader, within a bound.
        for i in 0..3 * SETTLE_STEPS {
            self.run_step(false, true);
            if i >= SETTLE_STEPS && self.converged() {
                break;
            }
        }
        let states = self.states();
        let views: Vec<String> = self
            .nodes
            .iter()
            .filter_map(|(id, n)| n.core.as_ref().map(|c| (id, c)))
            .map(|(id, c)| {
                format!(
                    "voter {id}: {} term {} leader {} applied {} committed {} last {}",
                    c.raft_status(),
                    c.term(),
                    c.leader_id(),
                    c.applied_index(),
                    c.committed_index(),
                    c.store().last_index().unwrap_or(0)
                )
            })
            .collect();
        if states.len() != 1 {
            self.fail(format!(
                "voters did not converge after healing: {} distinct states; {}",
                states.len(),
                views.join("; ")
            ));
        }
        if self.leader().is_none() {
            self.fail(format!(
                "no ready leader after healing; {}",
                views.join("; ")
            ));
        }
        (self.digest, self.stats)
    }
}

pub(crate) fn env_u64(name: &str) -> Option<u64> {
    let v = std::env::var(name).ok()?;
    match v.trim().parse() {
        Ok(n) => Some(n),
        Err(_) => panic!("{name}={v:?} is not a number"),
    }
}

/// Runs `run` for `seed`; a failure (a violated invariant or a panic inside) names the seed
/// and how to replay it. Shared with the replication simulator.
pub(crate) fn replay_on_failure<T>(what: &str, seed: u64, run: impl FnOnce() -> T) -> T {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(run)) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("{what} seed {seed} FAILED; replay it with RILL_SIM_SEED={seed}");
            std::panic::resume_unwind(e)
        }
    }
}

/// The seeds to run: `RILL_SIM_SEED` alone, else `RILL_SIM_SEEDS` (default `ci_seeds`) from
/// `RILL_SIM_SEED_START` (default 0).
pub(crate) fn seeds_from_env(ci_seeds: u64) -> Vec<u64> {
    match env_u64("RILL_SIM_SEED") {
        Some(s) => vec![s],
        None => {
            let start = env_u64("RILL_SIM_SEED_START").unwrap_or(0);
            (start..start + env_u64("RILL_SIM_SEEDS").unwrap_or(ci_seeds)).collect()
        }
    }
}

/// Runs one seed; a failure (a violated invariant or a panic inside raft) names the seed.
pub fn run_seed(seed: u64, steps: u64) -> (u64, Stats) {
    replay_on_failure("simulation", seed, || Sim::new(seed).run(steps))
}

#[test]
fn seeded_quorum_and_brokers_keep_every_invariant() {
    let steps = env_u64("RILL_SIM_STEPS").unwrap_or(DEFAULT_STEPS);
    let seeds = seeds_from_env(CI_SEEDS);
    let mut total = Stats::default();
    for &seed in &seeds {
        let (_, s) = run_seed(seed, steps);
        total.leaders += s.leaders;
        total.applied += s.applied;
        total.fences += s.fences;
        total.snapshots += s.snapshots;
        total.crashes += s.crashes;
        total.shutdowns += s.shutdowns;
        total.dropped += s.dropped;
        total.topics_created += s.topics_created;
        total.followed += s.followed;
        total.reassignments_completed += s.reassignments_completed;
    }
    eprintln!("simulated {} seeds x {steps} steps: {total:?}", seeds.len());
    // The faults and the protocol actually happened (else the checks above checked nothing).
    if seeds.len() >= CI_SEEDS as usize {
        assert!(total.leaders > seeds.len() as u64, "{total:?}");
        assert!(total.crashes > 0 && total.dropped > 0, "{total:?}");
        assert!(total.fences > 0, "no broker was ever fenced: {total:?}");
        assert!(
            total.snapshots > 0,
            "no snapshot was ever installed: {total:?}"
        );
        assert!(
            total.shutdowns > 0,
            "no controlled shutdown completed: {total:?}"
        );
        assert!(total.applied > 100 * seeds.len() as u64, "{total:?}");
        assert!(
            total.reassignments_completed > 0,
            "no reassignment ever completed: {total:?}"
        );
        assert!(
            total.followed > 100 * seeds.len() as u64,
            "brokers rarely followed the metadata: {total:?}"
        );
    }
}

#[test]
fn same_seed_replays_exactly() {
    let a = run_seed(7, 800);
    let b = run_seed(7, 800);
    assert_eq!(a.0, b.0, "seed 7 did not replay the same events");
    let c = run_seed(8, 800);
    assert_ne!(a.0, c.0, "different seeds ran the same events");
}
