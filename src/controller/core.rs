//! The sans-IO controller: a `raft::RawNode` over [`LogStore`] and the metadata state machine.
//!
//! Events go in ([`ControllerCore::propose`], [`ControllerCore::tick`],
//! [`ControllerCore::step`]); [`ControllerCore::ready`] persists what raft asks for (in-process,
//! fsynced) and returns [`Action`]s: raft messages to send to peers and applied results. No
//! threads, clocks or sockets, so tests drive it deterministically.
//!
//! Proposals are matched to their entries by (raft index, term), recorded when proposed: when the
//! entry at that index is applied with the same term, it is the proposal; with another term (a new
//! leader replaced it) the proposal is reported [`Action::Dropped`].

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use protobuf::Message as PbMessage;
use raft::eraftpb::{ConfChange, ConfChangeV2, Entry, EntryType, Message, Snapshot};
use raft::{ProgressState, RawNode, SnapshotStatus, StateRole};

use super::metadata::{Applied, ClusterMetadata, Command, MetadataError, MetadataLimits};
use super::raft_log::LogStore;
use super::ControllerError;
use crate::protocol::error_code::ErrorCode;

/// Identifies a proposal made through [`ControllerCore::propose`] (unique per core instance).
pub type ProposalId = u64;

/// Parameters of the core.
#[derive(Clone, Debug)]
pub struct CoreConfig {
    /// This node's raft id (non-zero).
    pub node_id: u64,
    /// Initial voters of a fresh cluster (must include `node_id`); ignored once the store holds a
    /// configuration.
    pub voters: Vec<u64>,
    /// Ticks without a leader before a follower campaigns.
    pub election_tick: usize,
    /// Ticks between leader heartbeats.
    pub heartbeat_tick: usize,
    pub limits: MetadataLimits,
    /// Proposals awaiting their entry; more are refused with [`ControllerError::Overloaded`].
    pub max_pending: usize,
    /// Take a snapshot and compact the log after this many applied entries.
    pub compact_every: u64,
    /// The id the first leader of an empty cluster proposes (random in production).
    pub cluster_id: String,
    /// `Some(t)`: this node's election timeout is exactly `t` ticks (`t >= election_tick`)
    /// instead of raft's random pick in `[election_tick, 2 * election_tick)`. raft-rs draws
    /// that pick from `thread_rng`, which a seeded simulation cannot replay; the simulator
    /// chooses `t` per node from its own seed instead. Production leaves `None`.
    pub fixed_election_timeout: Option<usize>,
}

impl CoreConfig {
    /// Defaults for a single voter `node_id`.
    pub fn single(node_id: u64, cluster_id: impl Into<String>) -> CoreConfig {
        CoreConfig {
            node_id,
            voters: vec![node_id],
            election_tick: 10,
            heartbeat_tick: 3,
            limits: MetadataLimits::default(),
            max_pending: 1024,
            compact_every: 1024,
            cluster_id: cluster_id.into(),
            fixed_election_timeout: None,
        }
    }

    /// Defaults for node `node_id` of a quorum of `voters` (3 or 5, say).
    pub fn voter(node_id: u64, voters: Vec<u64>, cluster_id: impl Into<String>) -> CoreConfig {
        CoreConfig {
            voters,
            ..CoreConfig::single(node_id, cluster_id)
        }
    }
}

/// Output of [`ControllerCore::ready`].
#[derive(Debug)]
pub enum Action {
    /// A raft message for peer `msg.to` (multi-voter; never produced by a single voter).
    /// Everything it depends on (hard state, entries, snapshot) is already durable when
    /// [`ControllerCore::ready`] returns it, so the shell may send it at once.
    Send(Message),
    /// A command entry was applied. `proposal` is set when this core proposed it; `metadata` is
    /// the state right after it.
    Applied {
        /// Raft index of the entry.
        index: u64,
        proposal: Option<ProposalId>,
        result: Result<Applied, MetadataError>,
        metadata: Arc<ClusterMetadata>,
    },
    /// The proposal's entry was replaced by another leader's: it will never apply.
    Dropped { proposal: ProposalId },
    /// A snapshot from the leader replaced the metadata (this voter was too far behind for
    /// the leader's log); `metadata` is the state at raft index `index`.
    SnapshotInstalled {
        index: u64,
        metadata: Arc<ClusterMetadata>,
    },
    /// The raft leader changed (`leader_id` 0: unknown); `metadata.controller_id` follows it.
    LeaderChanged {
        leader_id: u64,
        term: u64,
        metadata: Arc<ClusterMetadata>,
    },
}

/// The controller state machine.
pub struct ControllerCore {
    raw: RawNode<LogStore>,
    node_id: u64,
    limits: MetadataLimits,
    max_pending: usize,
    compact_every: u64,
    cluster_id: String,
    metadata: Arc<ClusterMetadata>,
    /// raft index -> (term, proposal)
    pending: BTreeMap<u64, (u64, ProposalId)>,
    next_proposal: ProposalId,
    /// Raft index of the last applied entry (any kind).
    applied: u64,
    snapshot_index: u64,
    leader_id: u64,
    init_proposed: bool,
    actions: Vec<Action>,
    /// Peers this leader sent a snapshot to -> ticks since. raft-rs pauses a peer in
    /// snapshot state until the transport reports the snapshot delivered or failed; a
    /// snapshot lost in transit without a report would stall that peer for good (the
    /// simulator found this), so after [`SNAPSHOT_TIMEOUT_TICKS`] the core reports the failure
    /// itself and raft sends a fresh one. At most one entry per voter.
    snapshots_in_flight: BTreeMap<u64, usize>,
    election_tick: usize,
}

/// Ticks a sent snapshot may take before the core counts it lost, in election timeouts.
pub const SNAPSHOT_TIMEOUT_ELECTIONS: usize = 2;

fn storage_err(e: impl fmt::Display) -> ControllerError {
    ControllerError::Storage(e.to_string())
}

impl ControllerCore {
    /// Builds the core over an opened store; a single voter campaigns at once and is leader when
    /// this returns.
    pub fn new(cfg: CoreConfig, mut store: LogStore) -> Result<ControllerCore, ControllerError> {
        if cfg.node_id == 0 {
            return Err(ControllerError::Config("node id must be non-zero".into()));
        }
        if !store.is_initialized() {
            if !cfg.voters.contains(&cfg.node_id) {
                return Err(ControllerError::Config(format!(
                    "voters {:?} do not include this node {}",
                    cfg.voters, cfg.node_id
                )));
            }
            store.initialize(cfg.voters.clone()).map_err(storage_err)?;
        }
        let cs = store.conf_state();
        if !cs.voters.contains(&cfg.node_id) && !cs.learners.contains(&cfg.node_id) {
            return Err(ControllerError::Config(format!(
                "{} belongs to a quorum of voters {:?} that does not include node {}",
                store.dir().display(),
                cs.voters,
                cfg.node_id
            )));
        }
        let snap = store.snapshot_ref();
        let snapshot_index = snap.get_metadata().index;
        let metadata = if snapshot_index > 0 {
            metadata_from_snapshot(snap, store.dir())?
        } else {
            ClusterMetadata::default()
        };
        let single_voter = store.conf_state().voters == [cfg.node_id]
            && store.conf_state().learners.is_empty()
            && store.conf_state().voters_outgoing.is_empty();

        // raft picks a timeout in [min, max): with max = min + 1 the pick is `t` itself.
        let (min_election_tick, max_election_tick) = match cfg.fixed_election_timeout {
            Some(t) => {
                let t = t.max(cfg.election_tick);
                (t, t + 1)
            }
            None => (0, 0),
        };
        let raft_cfg = raft::Config {
            id: cfg.node_id,
            election_tick: cfg.election_tick,
            heartbeat_tick: cfg.heartbeat_tick,
            min_election_tick,
            max_election_tick,
            applied: snapshot_index,
            max_size_per_msg: 1 << 20,
            max_inflight_msgs: 256,
            check_quorum: true,
            pre_vote: true,
            ..Default::default()
        };
        raft_cfg
            .validate()
            .map_err(|e| ControllerError::Config(format!("raft config: {e}")))?;
        let mut raw = RawNode::new(&raft_cfg, store, &raft_logger())
            .map_err(|e| ControllerError::Storage(format!("raft init: {e}")))?;
        if single_voter {
            raw.campaign()
                .map_err(|e| ControllerError::Storage(format!("raft campaign: {e}")))?;
        }
        Ok(ControllerCore {
            raw,
            node_id: cfg.node_id,
            limits: cfg.limits,
            max_pending: cfg.max_pending.max(1),
            compact_every: cfg.compact_every.max(1),
            cluster_id: cfg.cluster_id,
            metadata: Arc::new(metadata),
            pending: BTreeMap::new(),
            next_proposal: 1,
            applied: snapshot_index,
            snapshot_index,
            leader_id: 0,
            init_proposed: false,
            actions: Vec::new(),
            snapshots_in_flight: BTreeMap::new(),
            election_tick: cfg.election_tick.max(1),
        })
    }

    /// The latest applied metadata.
    pub fn metadata(&self) -> &Arc<ClusterMetadata> {
        &self.metadata
    }

    pub fn node_id(&self) -> u64 {
        self.node_id
    }

    pub fn is_leader(&self) -> bool {
        self.raw.raft.state == StateRole::Leader
    }

    /// Known leader (0: none).
    pub fn leader_id(&self) -> u64 {
        self.raw.raft.leader_id
    }

    /// Current raft term.
    pub fn term(&self) -> u64 {
        self.raw.raft.term
    }

    /// Role, vote and election timer, for diagnostics.
    pub fn raft_status(&self) -> String {
        let r = &self.raw.raft;
        format!(
            "{:?} vote {} elapsed {}/{}",
            r.state,
            r.vote,
            r.election_elapsed,
            r.randomized_election_timeout()
        )
    }

    /// Raft commit index as this node knows it.
    pub fn committed_index(&self) -> u64 {
        self.raw.raft.raft_log.committed
    }

    /// The voters of the current configuration.
    pub fn voters(&self) -> Vec<u64> {
        self.raw.store().conf_state().voters.clone()
    }

    /// Raft index of the last applied entry.
    pub fn applied_index(&self) -> u64 {
        self.applied
    }

    /// Proposals awaiting their entry.
    pub fn pending_len(&self) -> usize {
        self.pending.len()
    }

    pub fn limits(&self) -> &MetadataLimits {
        &self.limits
    }

    /// The storage (read-only; for inspection).
    pub fn store(&self) -> &LogStore {
        self.raw.store()
    }

    /// Leader, with an entry of its own term committed, everything committed applied and the
    /// cluster id set: the metadata is current and proposals are accepted.
    pub fn is_ready(&self) -> bool {
        let log = &self.raw.raft.raft_log;
        self.is_leader()
            && log.term(log.committed).ok() == Some(self.raw.raft.term)
            && self.applied >= log.committed
            && !self.metadata.cluster_id.is_empty()
    }

    /// Validates `cmd` against the applied metadata and proposes it. The outcome comes later from
    /// [`ControllerCore::ready`] as [`Action::Applied`] (or [`Action::Dropped`]).
    ///
    /// Only the leader takes proposals: a follower refuses with
    /// [`ControllerError::NotController`] naming the leader it knows (Kafka's NOT_CONTROLLER), so
    /// the caller retries there. raft-rs could forward a follower's proposal to the leader, but
    /// the follower would never learn the entry's index, so it could not tell the caller the
    /// outcome; a refusal the caller can act on is the clean choice.
    pub fn propose(&mut self, cmd: &Command) -> Result<ProposalId, ControllerError> {
        if !self.is_leader() {
            return Err(ControllerError::NotController {
                node_id: self.node_id,
                leader_id: self.raw.raft.leader_id,
            });
        }
        if self.pending.len() >= self.max_pending {
            return Err(ControllerError::Overloaded(format!(
                "{} controller proposals already pending",
                self.pending.len()
            )));
        }
        self.metadata
            .validate(cmd, &self.limits)
            .map_err(ControllerError::Metadata)?;
        let (index, term) = self.propose_raw(cmd)?;
        let id = self.next_proposal;
        self.next_proposal += 1;
        self.pending.insert(index, (term, id));
        Ok(id)
    }

    fn propose_raw(&mut self, cmd: &Command) -> Result<(u64, u64), ControllerError> {
        let data = serde_json::to_vec(cmd).map_err(|e| {
            ControllerError::Metadata(MetadataError::new(
                ErrorCode::InvalidRequest,
                format!("cannot encode command: {e}"),
            ))
        })?;
        let before = self.raw.raft.raft_log.last_index();
        match self.raw.propose(Vec::new(), data) {
            Ok(()) => {}
            Err(raft::Error::ProposalDropped) => return Err(ControllerError::NotLeader),
            Err(e) => return Err(storage_err(format!("raft propose: {e}"))),
        }
        let index = self.raw.raft.raft_log.last_index();
        if index != before + 1 {
            return Err(ControllerError::NotLeader);
        }
        Ok((index, self.raw.raft.term))
    }

    /// Advances raft's logical clock by one tick.
    pub fn tick(&mut self) {
        self.raw.tick();
        if self.snapshots_in_flight.is_empty() {
            return;
        }
        let limit = self.election_tick * SNAPSHOT_TIMEOUT_ELECTIONS;
        let mut lost = Vec::new();
        let prs = self.raw.raft.prs();
        self.snapshots_in_flight.retain(|&to, ticks| {
            *ticks += 1;
            let waiting = prs
                .get(to)
                .is_some_and(|p| p.state == ProgressState::Snapshot);
            if waiting && *ticks >= limit {
                lost.push(to);
            }
            waiting && *ticks < limit
        });
        for to in lost {
            self.raw.report_snapshot(to, SnapshotStatus::Failure);
        }
    }

    /// The transport's report on a snapshot sent to `to`: delivered, or failed (raft then
    /// probes the peer and sends another).
    pub fn report_snapshot(&mut self, to: u64, delivered: bool) {
        self.snapshots_in_flight.remove(&to);
        let status = if delivered {
            SnapshotStatus::Finish
        } else {
            SnapshotStatus::Failure
        };
        self.raw.report_snapshot(to, status);
    }

    /// The transport could not reach `to`: raft slows appends to it down to probes.
    pub fn report_unreachable(&mut self, to: u64) {
        self.raw.report_unreachable(to);
    }

    /// Feeds a raft message from a peer. Messages addressed to another node and local message
    /// types (which only this node may generate) are ignored: a misrouted or forged packet must
    /// not make this node campaign or propose.
    pub fn step(&mut self, msg: Message) -> Result<(), ControllerError> {
        if msg.to != self.node_id || raft::raw_node::is_local_msg(msg.get_msg_type()) {
            return Ok(());
        }
        match self.raw.step(msg) {
            Ok(()) => Ok(()),
            // Messages from unknown peers or stray local messages are ignored, as etcd does.
            Err(raft::Error::StepPeerNotFound) | Err(raft::Error::StepLocalMsg) => Ok(()),
            Err(e) => Err(storage_err(format!("raft step: {e}"))),
        }
    }

    /// Persists and applies everything raft has ready; returns what the shell must do.
    /// A storage error is fatal for this core (reopen from disk to recover).
    ///
    /// Ordering (raft's rule: persist, then send): messages are collected while the ready
    /// states are handled and only returned when this function returns, after every entry, hard
    /// state and snapshot of those ready states is durable in the [`LogStore`] (fsynced when
    /// raft asks). raft-rs allows a leader to send its appends before persisting them, which
    /// would save one fsync of latency; the controller's traffic is small, so it takes the
    /// simpler rule that holds for every message type. On a storage error nothing is sent.
    pub fn ready(&mut self) -> Result<Vec<Action>, ControllerError> {
        match self.ready_inner() {
            Ok(()) => Ok(std::mem::take(&mut self.actions)),
            Err(e) => {
                self.actions.clear();
                Err(e)
            }
        }
    }

    fn ready_inner(&mut self) -> Result<(), ControllerError> {
        loop {
            if !self.raw.has_ready() {
                if self.maybe_init_cluster()? {
                    continue;
                }
                break;
            }
            let mut rd = self.raw.ready();
            if let Some(ss) = rd.ss() {
                let leader = ss.leader_id;
                self.on_leader(leader);
            }
            self.send(rd.take_messages());
            if !rd.snapshot().is_empty() {
                let snap = rd.snapshot().clone();
                self.install_snapshot(snap)?;
            }
            let committed = rd.take_committed_entries();
            self.apply_entries(committed)?;
            let hs = rd.hs().cloned();
            let sync = rd.must_sync();
            self.raw
                .mut_store()
                .persist(rd.entries(), hs.as_ref(), sync)
                .map_err(storage_err)?;
            self.send(rd.take_persisted_messages());
            let mut light = self.raw.advance(rd);
            if let Some(commit) = light.commit_index() {
                self.raw
                    .mut_store()
                    .set_commit(commit)
                    .map_err(storage_err)?;
            }
            self.send(light.take_messages());
            self.apply_entries(light.take_committed_entries())?;
            self.raw.advance_apply_to(self.applied);
            self.maybe_compact()?;
        }
        Ok(())
    }

    fn send(&mut self, msgs: Vec<Message>) {
        for m in &msgs {
            if m.get_msg_type() == raft::eraftpb::MessageType::MsgSnapshot {
                self.snapshots_in_flight.insert(m.to, 0);
            }
        }
        self.actions.extend(msgs.into_iter().map(Action::Send));
    }

    fn on_leader(&mut self, leader: u64) {
        if leader == self.leader_id {
            return;
        }
        self.leader_id = leader;
        self.init_proposed = false;
        Arc::make_mut(&mut self.metadata).controller_id = leader;
        self.actions.push(Action::LeaderChanged {
            leader_id: leader,
            term: self.raw.raft.term,
            metadata: self.metadata.clone(),
        });
    }

    /// The first leader of an empty cluster names it, once its view is current.
    fn maybe_init_cluster(&mut self) -> Result<bool, ControllerError> {
        if self.init_proposed || !self.metadata.cluster_id.is_empty() {
            return Ok(false);
        }
        let log = &self.raw.raft.raft_log;
        let current = self.is_leader()
            && log.term(log.committed).ok() == Some(self.raw.raft.term)
            && self.applied >= log.committed;
        if !current {
            return Ok(false);
        }
        self.init_proposed = true;
        let cmd = Command::InitCluster {
            cluster_id: self.cluster_id.clone(),
        };
        match self.propose_raw(&cmd) {
            Ok(_) => Ok(true),
            Err(ControllerError::NotLeader) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Removes proposals up to `index`: the one at (`index`, `term`) is returned, others dropped.
    fn take_pending(&mut self, index: u64, term: u64) -> Option<ProposalId> {
        while let Some((&i, &(t, id))) = self.pending.first_key_value() {
            if i > index {
                break;
            }
            self.pending.remove(&i);
            if i == index && t == term {
                return Some(id);
            }
            self.actions.push(Action::Dropped { proposal: id });
        }
        None
    }

    fn apply_entries(&mut self, entries: Vec<Entry>) -> Result<(), ControllerError> {
        for e in entries {
            if e.index <= self.applied {
                continue;
            }
            match e.get_entry_type() {
                EntryType::EntryNormal if e.data.is_empty() => {
                    // A new leader's empty entry.
                    self.take_pending(e.index, e.term);
                }
                EntryType::EntryNormal => {
                    let result = match serde_json::from_slice::<Command>(&e.data) {
                        Ok(cmd) => match self.metadata.validate(&cmd, &self.limits) {
                            Ok(()) => {
                                Arc::make_mut(&mut self.metadata).apply(e.index, &cmd, &self.limits)
                            }
                            Err(err) => Err(err),
                        },
                        Err(err) => Err(MetadataError::new(
                            ErrorCode::CorruptMessage,
                            format!("undecodable command at raft index {}: {err}", e.index),
                        )),
                    };
                    let proposal = self.take_pending(e.index, e.term);
                    self.actions.push(Action::Applied {
                        index: e.index,
                        proposal,
                        result,
                        metadata: self.metadata.clone(),
                    });
                }
                EntryType::EntryConfChange => {
                    let cc = ConfChange::parse_from_bytes(&e.data)
                        .map_err(|err| storage_err(format!("conf change {}: {err}", e.index)))?;
                    let cs = self.raw.apply_conf_change(&cc);
                    self.store_conf_state(cs)?;
                    self.take_pending(e.index, e.term);
                }
                EntryType::EntryConfChangeV2 => {
                    let cc = ConfChangeV2::parse_from_bytes(&e.data)
                        .map_err(|err| storage_err(format!("conf change {}: {err}", e.index)))?;
                    let cs = self.raw.apply_conf_change(&cc);
                    self.store_conf_state(cs)?;
                    self.take_pending(e.index, e.term);
                }
            }
            self.applied = e.index;
        }
        Ok(())
    }

    fn store_conf_state(
        &mut self,
        cs: raft::Result<raft::eraftpb::ConfState>,
    ) -> Result<(), ControllerError> {
        let cs = cs.map_err(|e| storage_err(format!("apply conf change: {e}")))?;
        self.raw.mut_store().set_conf_state(cs).map_err(storage_err)
    }

    fn install_snapshot(&mut self, snap: Snapshot) -> Result<(), ControllerError> {
        let index = snap.get_metadata().index;
        let mut md = metadata_from_snapshot(&snap, self.raw.store().dir())?;
        self.raw
            .mut_store()
            .apply_snapshot(snap)
            .map_err(storage_err)?;
        md.controller_id = self.leader_id;
        self.metadata = Arc::new(md);
        self.applied = index;
        self.snapshot_index = index;
        self.actions.push(Action::SnapshotInstalled {
            index,
            metadata: self.metadata.clone(),
        });
        let dropped: Vec<u64> = self.pending.range(..=index).map(|(&i, _)| i).collect();
        for i in dropped {
            if let Some((_, id)) = self.pending.remove(&i) {
                self.actions.push(Action::Dropped { proposal: id });
            }
        }
        Ok(())
    }

    fn maybe_compact(&mut self) -> Result<(), ControllerError> {
        if self.applied < self.snapshot_index + self.compact_every {
            return Ok(());
        }
        self.compact()
    }

    /// Snapshots the applied metadata and drops the log entries it covers.
    pub fn compact(&mut self) -> Result<(), ControllerError> {
        if self.applied <= self.snapshot_index {
            return Ok(());
        }
        let data = serde_json::to_vec(&*self.metadata)
            .map_err(|e| storage_err(format!("encode snapshot: {e}")))?;
        self.raw
            .mut_store()
            .compact(self.applied, data)
            .map_err(storage_err)?;
        self.snapshot_index = self.applied;
        Ok(())
    }
}

fn metadata_from_snapshot(
    snap: &Snapshot,
    dir: &std::path::Path,
) -> Result<ClusterMetadata, ControllerError> {
    let mut md: ClusterMetadata = serde_json::from_slice(&snap.data).map_err(|e| {
        ControllerError::Storage(format!(
            "controller storage {}: snapshot at index {} holds undecodable metadata: {e}",
            dir.join(super::raft_log::SNAPSHOT_FILE).display(),
            snap.get_metadata().index
        ))
    })?;
    md.controller_id = 0;
    Ok(md)
}

/// A slog logger forwarding raft-rs's records to the `log` crate (target `raft`).
pub fn raft_logger() -> slog::Logger {
    slog::Logger::root(LogBridge, slog::o!())
}

struct LogBridge;

struct KvText(String);

impl slog::Serializer for KvText {
    fn emit_arguments(&mut self, key: slog::Key, val: &fmt::Arguments) -> slog::Result {
        use fmt::Write;
        let _ = write!(self.0, " {key}={val}");
        Ok(())
    }
}

impl slog::Drain for LogBridge {
    type Ok = ();
    type Err = slog::Never;

    fn log(&self, record: &slog::Record, values: &slog::OwnedKVList) -> Result<(), slog::Never> {
        let level = match record.level() {
            slog::Level::Critical | slog::Level::Error => log::Level::Error,
            slog::Level::Warning => log::Level::Warn,
            slog::Level::Info => log::Level::Info,
            slog::Level::Debug => log::Level::Debug,
            slog::Level::Trace => log::Level::Trace,
        };
        if !log::log_enabled!(target: "raft", level) {
            return Ok(());
        }
        let mut kv = KvText(String::new());
        let _ = slog::KV::serialize(&record.kv(), record, &mut kv);
        let _ = slog::KV::serialize(values, record, &mut kv);
        log::log!(target: "raft", level, "{}{}", record.msg(), kv.0);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::fs::OpenOptions;
    use std::io::Write;
    use std::path::Path;

    use super::*;
    use crate::controller::metadata::BrokerInfo;
    use crate::controller::raft_log::LOG_FILE;

    fn open(dir: &Path, compact_every: u64) -> ControllerCore {
        let store = LogStore::open(dir).unwrap();
        let mut cfg = CoreConfig::single(1, "test-cluster");
        cfg.compact_every = compact_every;
        let mut core = ControllerCore::new(cfg, store).unwrap();
        settle(&mut core);
        core
    }

    /// Drives the core until it is ready (leader, applied, cluster id set).
    fn settle(core: &mut ControllerCore) {
        for _ in 0..100 {
            let actions = core.ready().unwrap();
            assert!(!actions.iter().any(|a| matches!(a, Action::Send(_))));
            if core.is_ready() {
                return;
            }
            core.tick();
        }
        panic!("controller core never became ready");
    }

    /// Proposes and drives the core until the proposal's outcome.
    fn run(core: &mut ControllerCore, cmd: Command) -> Result<Applied, ControllerError> {
        let id = core.propose(&cmd)?;
        for _ in 0..100 {
            for a in core.ready().unwrap() {
                match a {
                    Action::Applied {
                        proposal: Some(p),
                        result,
                        metadata,
                        ..
                    } if p == id => {
                        assert!(Arc::ptr_eq(&metadata, core.metadata()));
                        return result.map_err(ControllerError::Metadata);
                    }
                    Action::Dropped { proposal } if proposal == id => {
                        return Err(ControllerError::NotLeader)
                    }
                    _ => {}
                }
            }
            core.tick();
        }
        panic!("proposal {id} never applied");
    }

    fn broker(id: u32, shards: u32) -> Command {
        Command::RegisterBroker(BrokerInfo {
            node_id: id,
            host: "127.0.0.1".into(),
            port: 9292,
            shards,
            kafka_port: Some(9092),
        })
    }

    fn create(name: &str, partitions: u32, rf: u16) -> Command {
        Command::CreateTopic {
            name: name.into(),
            partitions,
            replication_factor: rf,
            configs: BTreeMap::new(),
        }
    }

    fn code(r: Result<impl fmt::Debug, ControllerError>) -> ErrorCode {
        r.expect_err("expected an error").code()
    }

    #[test]
    fn single_voter_is_leader_without_ticks() {
        let dir = tempfile::tempdir().unwrap();
        let store = LogStore::open(dir.path()).unwrap();
        let mut core = ControllerCore::new(CoreConfig::single(1, "c"), store).unwrap();
        assert!(core.is_leader());
        let actions = core.ready().unwrap();
        assert!(core.is_ready());
        assert!(matches!(
            actions[0],
            Action::LeaderChanged { leader_id: 1, .. }
        ));
        assert!(actions.iter().any(|a| matches!(
            a,
            Action::Applied {
                proposal: None,
                result: Ok(Applied::ClusterInitialized),
                ..
            }
        )));
        drop(core);
        // The directory now belongs to node 1.
        let store = LogStore::open(dir.path()).unwrap();
        let err = ControllerCore::new(CoreConfig::single(2, "c"), store)
            .err()
            .unwrap();
        assert!(matches!(err, ControllerError::Config(_)), "{err}");
    }

    #[test]
    fn single_voter_leads_and_applies_topics() {
        let dir = tempfile::tempdir().unwrap();
        let mut core = open(dir.path(), 1024);
        assert!(core.is_leader());
        assert_eq!(core.leader_id(), 1);
        let md = core.metadata().clone();
        assert_eq!(md.cluster_id, "test-cluster");
        assert_eq!(md.controller_id, 1);

        assert_eq!(run(&mut core, broker(1, 2)), Ok(Applied::BrokerRegistered));
        let Applied::TopicCreated(a) = run(&mut core, create("a", 4, 1)).unwrap() else {
            panic!("not created")
        };
        let Applied::TopicCreated(b) = run(&mut core, create("b", 1, 1)).unwrap() else {
            panic!("not created")
        };
        assert_eq!((a.id, b.id), (1, 2));
        let shards: Vec<u32> = a.partitions.iter().map(|p| p.shard).collect();
        assert_eq!(shards, vec![1, 0, 1, 0]);
        let Applied::TopicDeleted(gone) =
            run(&mut core, Command::DeleteTopic { name: "a".into() }).unwrap()
        else {
            panic!("not deleted")
        };
        assert_eq!(gone, a);

        let md = core.metadata();
        assert_eq!(md.topics.keys().collect::<Vec<_>>(), vec!["b"]);
        assert_eq!(md.topic("b"), Some(&b));
        assert_eq!(md.next_topic_id, 3);
        assert_eq!(md.brokers[&1].shards, 2);
        assert_eq!(md.applied_index, core.applied_index());
        assert_eq!(core.pending_len(), 0);
    }

    #[test]
    fn invalid_commands_are_refused_and_change_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let mut core = open(dir.path(), 1024);
        assert_eq!(
            code(run(&mut core, create("t", 1, 1))),
            ErrorCode::InvalidReplicationFactor
        );
        run(&mut core, broker(1, 1)).unwrap();
        run(&mut core, create("t", 1, 1)).unwrap();
        let before = core.metadata().clone();
        let applied = core.applied_index();

        let mut empty_key = BTreeMap::new();
        empty_key.insert(String::new(), "v".to_string());
        let cases = [
            (create("bad name", 1, 1), ErrorCode::InvalidTopic),
            (create("..", 1, 1), ErrorCode::InvalidTopic),
            (create(&"x".repeat(250), 1, 1), ErrorCode::InvalidTopic),
            (create("u", 0, 1), ErrorCode::InvalidPartitions),
            (create("u", 10_001, 1), ErrorCode::InvalidPartitions),
            (create("u", 1, 0), ErrorCode::InvalidReplicationFactor),
            (create("u", 1, 2), ErrorCode::InvalidReplicationFactor),
            (create("t", 1, 1), ErrorCode::TopicAlreadyExists),
            (
                Command::CreateTopic {
                    name: "u".into(),
                    partitions: 1,
                    replication_factor: 1,
                    configs: empty_key,
                },
                ErrorCode::InvalidConfig,
            ),
            (
                Command::DeleteTopic {
                    name: "nope".into(),
                },
                ErrorCode::UnknownTopicOrPartition,
            ),
        ];
        for (cmd, want) in cases {
            let err = run(&mut core, cmd.clone()).expect_err("accepted");
            assert_eq!(err.code(), want, "{cmd:?}: {err}");
            assert!(!err.to_string().is_empty());
        }
        assert_eq!(core.metadata(), &before);
        assert_eq!(core.applied_index(), applied);

        // Two conflicting proposals in flight: the second fails when applied.
        let first = core.propose(&create("dup", 1, 1)).unwrap();
        let second = core.propose(&create("dup", 1, 1)).unwrap();
        let mut results = BTreeMap::new();
        for _ in 0..10 {
            for a in core.ready().unwrap() {
                if let Action::Applied {
                    proposal: Some(p),
                    result,
                    ..
                } = a
                {
                    results.insert(p, result.map_err(|e| e.code));
                }
            }
        }
        assert!(matches!(results[&first], Ok(Applied::TopicCreated(_))));
        assert_eq!(results[&second], Err(ErrorCode::TopicAlreadyExists));
        assert_eq!(core.metadata().topics.len(), 2);
    }

    #[test]
    fn pending_proposals_are_capped() {
        let dir = tempfile::tempdir().unwrap();
        let store = LogStore::open(dir.path()).unwrap();
        let mut cfg = CoreConfig::single(1, "c");
        cfg.max_pending = 2;
        let mut core = ControllerCore::new(cfg, store).unwrap();
        settle(&mut core);
        core.propose(&broker(1, 1)).unwrap();
        core.propose(&broker(2, 1)).unwrap();
        let err = core.propose(&broker(3, 1)).unwrap_err();
        assert!(matches!(err, ControllerError::Overloaded(_)), "{err}");
        assert_eq!(err.code(), ErrorCode::RequestTimedOut);
        core.ready().unwrap();
        assert_eq!(core.pending_len(), 0);
        core.propose(&broker(3, 1)).unwrap();
    }

    fn populate(core: &mut ControllerCore) {
        run(core, broker(1, 2)).unwrap();
        run(core, broker(2, 1)).unwrap();
        for name in ["a", "b", "c", "d"] {
            run(core, create(name, 3, 2)).unwrap();
        }
        run(core, Command::DeleteTopic { name: "b".into() }).unwrap();
    }

    #[test]
    fn metadata_survives_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let mut core = open(dir.path(), 1024);
        populate(&mut core);
        let before = core.metadata().clone();
        assert_eq!(before.topics["d"].id, 4);
        drop(core);

        let mut core = open(dir.path(), 1024);
        assert_eq!(core.metadata(), &before);
        assert_eq!(core.store().truncated_bytes(), 0);
        // Ids continue after a restart.
        let Applied::TopicCreated(e) = run(&mut core, create("e", 1, 1)).unwrap() else {
            panic!()
        };
        assert_eq!(e.id, 5);
    }

    #[test]
    fn torn_tail_is_truncated_on_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let mut core = open(dir.path(), 1024);
        populate(&mut core);
        let before = core.metadata().clone();
        drop(core);

        let path = dir.path().join(LOG_FILE);
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        // A frame header promising 4000 bytes, then a few bytes of garbage.
        f.write_all(&[0xa0, 0x0f, 0, 0, 0xde, 0xad, 0xbe, 0xef, 1, 2, 3])
            .unwrap();
        drop(f);
        let mut core = open(dir.path(), 1024);
        assert_eq!(core.store().truncated_bytes(), 11);
        assert_eq!(core.metadata(), &before);
        run(&mut core, create("after", 1, 1)).unwrap();
        drop(core);

        // Random garbage with a plausible length and a bad CRC.
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(&[8, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12])
            .unwrap();
        drop(f);
        let core = open(dir.path(), 1024);
        assert_eq!(core.store().truncated_bytes(), 16);
        assert!(core.metadata().topic("after").is_some());
    }

    #[test]
    fn compaction_then_reopen_keeps_metadata() {
        let dir = tempfile::tempdir().unwrap();
        let mut core = open(dir.path(), 3);
        populate(&mut core);
        let snap_index = core.store().snapshot_ref().get_metadata().index;
        assert!(snap_index > 0, "no snapshot taken");
        assert!(core.store().entry_count() < 3);
        let before = core.metadata().clone();
        drop(core);

        let mut core = open(dir.path(), 3);
        assert_eq!(core.metadata(), &before);
        let Applied::TopicCreated(e) = run(&mut core, create("e", 1, 1)).unwrap() else {
            panic!()
        };
        assert_eq!(e.id, 5);
        core.compact().unwrap();
        assert_eq!(core.store().entry_count(), 0);
        let before = core.metadata().clone();
        drop(core);
        let core = open(dir.path(), 3);
        assert_eq!(core.metadata(), &before);
    }
}
