//! Cluster metadata held by a Raft quorum (raft-rs).
//!
//! - [`metadata`]: the replicated state machine (brokers, topics, partition plans) and its rules.
//! - [`cluster`]: membership (registration, fencing, controlled shutdown), placement and
//!   leader elections of a cluster of brokers, and the active controller's heartbeat sessions.
//! - [`raft_log`]: durable raft storage under `<data-dir>/controller/` (CRC32C records, fsync,
//!   torn-tail truncation, snapshots + log compaction).
//! - [`core`]: the sans-IO raft node: events in, [`Action`]s out; deterministic tests drive it.
//! - this module: the thin shell, one `std::thread` running the core, ticking it every
//!   [`ControllerConfig::tick`] and answering [`ControllerHandle`]s over bounded flume channels.
//!
//! The core runs as a single voter (the broker's embedded controller) or as one voter of 3 or 5
//! ([`CoreConfig::voter`]; `quorum_tests.rs` and the simulator drive such quorums). This thread
//! shell has no transport yet: it would deliver [`Action::Send`] messages to other voters and
//! feed theirs to [`ControllerCore::step`], so `start` refuses more than one voter until it
//! exists.

pub mod cluster;
pub mod core;
pub mod metadata;
pub mod raft_log;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

pub use self::core::{Action, ControllerCore, CoreConfig, ProposalId};
pub use self::metadata::{
    Applied, BrokerInfo, ClusterMetadata, Command, MetadataError, MetadataLimits, PartitionInfo,
    TopicInfo,
};
pub use self::raft_log::{LogStore, StoreError};
use crate::protocol::error_code::ErrorCode;

/// Default capacity of the proposal queue into the controller thread.
pub const DEFAULT_QUEUE_CAPACITY: usize = 1024;
/// Default cap on proposals awaiting their raft entry.
pub const DEFAULT_MAX_PENDING: usize = 1024;
/// Default number of applied entries between snapshots.
pub const DEFAULT_COMPACT_EVERY: u64 = 1024;
/// Requests taken from the queue per loop turn (they share one fsync).
const MAX_BATCH: usize = 256;

/// Controller settings.
#[derive(Clone, Debug)]
pub struct ControllerConfig {
    /// The broker's data directory; the controller keeps its files in `<dir>/controller/`.
    pub dir: PathBuf,
    /// This node's raft id (non-zero).
    pub node_id: u64,
    /// Voters as (node id, `host:port`). Empty, or only this node: a single voter.
    pub voters: Vec<(u64, String)>,
    /// Raft tick; elections take 10 ticks, heartbeats 3.
    pub tick: Duration,
    pub limits: MetadataLimits,
    /// Capacity of the proposal queue; a full queue answers [`ControllerError::Overloaded`].
    pub queue_capacity: usize,
    /// Proposals awaiting their entry; past it, [`ControllerError::Overloaded`].
    pub max_pending: usize,
    /// Snapshot and compact the raft log after this many applied entries.
    pub compact_every: u64,
    /// Cluster id for a brand-new cluster; `None` draws a random 128-bit id (hex).
    pub cluster_id: Option<String>,
    /// After a storage failure (a full disk, say), how often the controller reopens its files
    /// to take writes again; proposals meanwhile fail with a storage error.
    pub storage_retry: Duration,
}

impl ControllerConfig {
    /// A single-voter controller for node `node_id` with defaults.
    pub fn new(dir: impl Into<PathBuf>, node_id: u64) -> ControllerConfig {
        ControllerConfig {
            dir: dir.into(),
            node_id,
            voters: Vec::new(),
            tick: Duration::from_millis(100),
            limits: MetadataLimits::default(),
            queue_capacity: DEFAULT_QUEUE_CAPACITY,
            max_pending: DEFAULT_MAX_PENDING,
            compact_every: DEFAULT_COMPACT_EVERY,
            cluster_id: None,
            storage_retry: Duration::from_secs(5),
        }
    }

    /// The directory holding the controller's files.
    pub fn controller_dir(&self) -> PathBuf {
        self.dir.join("controller")
    }
}

/// Errors of the controller.
#[derive(thiserror::Error, Debug, Clone, PartialEq)]
pub enum ControllerError {
    /// The command was refused by the metadata rules.
    #[error(transparent)]
    Metadata(#[from] MetadataError),
    /// Reading or writing the controller's files failed (the message names the file).
    #[error("{0}")]
    Storage(String),
    #[error("this node is not the controller leader")]
    NotLeader,
    /// A proposal reached a voter that is not the raft leader; retry at `leader_id`.
    #[error("{}", not_controller_text(*node_id, *leader_id))]
    NotController {
        /// The voter that refused.
        node_id: u64,
        /// The leader it knows (0: none known, an election is under way).
        leader_id: u64,
    },
    #[error("timed out waiting for the controller")]
    Timeout,
    #[error("the controller is stopped")]
    Stopped,
    /// Too many proposals queued or pending; retry later.
    #[error("controller overloaded: {0}")]
    Overloaded(String),
    /// Bad [`ControllerConfig`].
    #[error("controller configuration: {0}")]
    Config(String),
}

impl ControllerError {
    /// The wire error code for this error.
    pub fn code(&self) -> ErrorCode {
        match self {
            ControllerError::Metadata(e) => e.code,
            ControllerError::Storage(_) => ErrorCode::KafkaStorageError,
            ControllerError::NotLeader
            | ControllerError::NotController { .. }
            | ControllerError::Stopped => ErrorCode::NotController,
            ControllerError::Timeout | ControllerError::Overloaded(_) => ErrorCode::RequestTimedOut,
            ControllerError::Config(_) => ErrorCode::InvalidRequest,
        }
    }
}

fn not_controller_text(node_id: u64, leader_id: u64) -> String {
    if leader_id == 0 {
        format!("controller node {node_id} is not the leader and no leader is known (an election is under way); retry")
    } else {
        format!("controller node {node_id} is not the leader; the leader is node {leader_id}")
    }
}

type Reply = flume::Sender<Result<Applied, ControllerError>>;

enum Request {
    Propose { cmd: Command, reply: Reply },
    Shutdown,
}

struct Subscriber {
    tx: flume::Sender<Arc<ClusterMetadata>>,
    /// Our clone of the subscriber's receiver, used to drop the oldest update when full.
    rx: flume::Receiver<Arc<ClusterMetadata>>,
}

impl Subscriber {
    /// Delivers `md`, dropping the oldest queued update when full; false once the subscriber
    /// has gone away.
    fn deliver(&self, md: &Arc<ClusterMetadata>) -> bool {
        if self.tx.receiver_count() <= 1 {
            return false;
        }
        loop {
            match self.tx.try_send(md.clone()) {
                Ok(()) => return true,
                Err(flume::TrySendError::Full(_)) => {
                    let _ = self.rx.try_recv();
                }
                Err(flume::TrySendError::Disconnected(_)) => return false,
            }
        }
    }
}

struct State {
    metadata: Arc<ClusterMetadata>,
    ready: bool,
    /// Why the controller thread ended (set once it has).
    stopped: Option<ControllerError>,
    subscribers: Vec<Subscriber>,
}

struct Shared {
    state: Mutex<State>,
    changed: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic elsewhere while holding the lock leaves consistent data (plain assignments).
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The running controller: one thread owning the raft core and its storage.
pub struct Controller {
    handle: ControllerHandle,
    thread: Option<JoinHandle<()>>,
}

/// A cheap, cloneable, `Send` handle to the controller.
#[derive(Clone)]
pub struct ControllerHandle {
    tx: flume::Sender<Request>,
    capacity: usize,
    shared: Arc<Shared>,
}

/// Opens the controller's storage under `<cfg.dir>/controller/`, starts its thread and campaigns.
pub fn start(cfg: ControllerConfig) -> Result<Controller, ControllerError> {
    if cfg.node_id == 0 {
        return Err(ControllerError::Config("node id must be non-zero".into()));
    }
    if cfg.voters.iter().any(|(id, _)| *id != cfg.node_id) {
        return Err(ControllerError::Config(format!(
            "multi-voter quorum not supported yet (voters {:?}, this node {})",
            cfg.voters.iter().map(|(id, _)| *id).collect::<Vec<_>>(),
            cfg.node_id
        )));
    }
    if cfg.tick.is_zero() {
        return Err(ControllerError::Config("tick must be positive".into()));
    }
    let store = LogStore::open(&cfg.controller_dir())
        .map_err(|e| ControllerError::Storage(e.to_string()))?;
    let core_cfg = CoreConfig {
        node_id: cfg.node_id,
        voters: vec![cfg.node_id],
        election_tick: 10,
        heartbeat_tick: 3,
        limits: cfg.limits.clone(),
        max_pending: cfg.max_pending,
        compact_every: cfg.compact_every,
        cluster_id: cfg.cluster_id.clone().unwrap_or_else(random_cluster_id),
        fixed_election_timeout: None,
    };
    let mut core = ControllerCore::new(core_cfg.clone(), store)?;
    let first = core.ready()?;

    let capacity = cfg.queue_capacity.max(1);
    let (tx, rx) = flume::bounded(capacity);
    let shared = Arc::new(Shared {
        state: Mutex::new(State {
            metadata: Arc::new(ClusterMetadata::default()),
            ready: false,
            stopped: None,
            subscribers: Vec::new(),
        }),
        changed: Condvar::new(),
    });
    let mut worker = Worker {
        core,
        rx,
        shared: shared.clone(),
        tick: cfg.tick,
        waiters: HashMap::new(),
        dir: cfg.controller_dir(),
        core_cfg,
        storage_retry: cfg.storage_retry,
    };
    worker.handle_actions(first);
    let thread = std::thread::Builder::new()
        .name("rill-controller".into())
        .spawn(move || worker.run())
        .map_err(|e| ControllerError::Storage(format!("spawn controller thread: {e}")))?;
    Ok(Controller {
        handle: ControllerHandle {
            tx,
            capacity,
            shared,
        },
        thread: Some(thread),
    })
}

impl Controller {
    pub fn handle(&self) -> ControllerHandle {
        self.handle.clone()
    }

    /// Stops the thread (pending proposals get [`ControllerError::Stopped`]) and joins it.
    pub fn shutdown(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        if let Some(thread) = self.thread.take() {
            // Blocks only while the queue is full; fails at once if the thread has ended.
            let _ = self.handle.tx.send(Request::Shutdown);
            if thread.join().is_err() {
                log::error!("controller thread panicked");
            }
        }
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        self.stop();
    }
}

impl ControllerHandle {
    /// Validates locally, proposes, and answers once the entry is applied (or the error).
    /// Never blocks: a full queue answers [`ControllerError::Overloaded`] at once.
    /// When the answer arrives, [`ControllerHandle::metadata`] and subscribers already have it.
    pub fn propose(&self, cmd: Command) -> flume::Receiver<Result<Applied, ControllerError>> {
        let (reply, rx) = flume::bounded(1);
        if let Some(e) = self.shared.lock().stopped.clone() {
            let _ = reply.send(Err(e));
            return rx;
        }
        match self.tx.try_send(Request::Propose { cmd, reply }) {
            Ok(()) => {}
            Err(flume::TrySendError::Full(Request::Propose { reply, .. })) => {
                let _ = reply.send(Err(ControllerError::Overloaded(format!(
                    "controller queue full ({} requests)",
                    self.capacity
                ))));
            }
            Err(flume::TrySendError::Disconnected(Request::Propose { reply, .. })) => {
                let _ = reply.send(Err(ControllerError::Stopped));
            }
            Err(_) => {}
        }
        rx
    }

    /// The latest applied metadata.
    pub fn metadata(&self) -> Arc<ClusterMetadata> {
        self.shared.lock().metadata.clone()
    }

    /// Every metadata change from now on, starting with the current metadata. The channel holds
    /// at most `capacity` (at least 1) updates: when a slow subscriber lets it fill up, the
    /// oldest queued update is dropped, so the newest is always delivered (each update is a full
    /// snapshot; only the latest matters). The channel closes when the controller stops.
    pub fn subscribe(&self, capacity: usize) -> flume::Receiver<Arc<ClusterMetadata>> {
        let (tx, rx) = flume::bounded(capacity.max(1));
        let mut state = self.shared.lock();
        if state.stopped.is_none() {
            let sub = Subscriber { tx, rx: rx.clone() };
            sub.deliver(&state.metadata);
            state.subscribers.push(sub);
        }
        rx
    }

    /// Waits until this node is the leader and every committed entry is applied; returns the
    /// metadata then.
    pub fn wait_ready(&self, timeout: Duration) -> Result<Arc<ClusterMetadata>, ControllerError> {
        let deadline = Instant::now() + timeout;
        let mut state = self.shared.lock();
        loop {
            if let Some(e) = &state.stopped {
                return Err(e.clone());
            }
            if state.ready {
                return Ok(state.metadata.clone());
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(ControllerError::Timeout);
            }
            state = self
                .shared
                .changed
                .wait_timeout(state, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }
}

struct Worker {
    core: ControllerCore,
    rx: flume::Receiver<Request>,
    shared: Arc<Shared>,
    tick: Duration,
    waiters: HashMap<ProposalId, Reply>,
    /// To reopen the core from its files after a storage failure.
    dir: PathBuf,
    core_cfg: CoreConfig,
    storage_retry: Duration,
}

impl Worker {
    fn run(mut self) {
        let reason = loop {
            let reason = self.run_loop();
            let ControllerError::Storage(msg) = &reason else {
                break reason;
            };
            // A failed write leaves the file and the in-memory raft state unknown to each
            // other: answer what waits, then start over from the files (a restart without the
            // restart), once the disk takes writes again.
            log::error!(
                "controller storage failed: {msg}; reopening it every {:?}",
                self.storage_retry
            );
            for (_, reply) in self.waiters.drain() {
                let _ = reply.send(Err(reason.clone()));
            }
            if !self.recover(&reason) {
                break ControllerError::Stopped;
            }
        };
        for (_, reply) in self.waiters.drain() {
            let _ = reply.send(Err(reason.clone()));
        }
        let mut state = self.shared.lock();
        state.ready = false;
        state.stopped = Some(reason);
        state.subscribers.clear();
        self.shared.changed.notify_all();
        drop(state);
        // Requests still queued are answered by dropping their reply senders (the receivers see
        // a disconnect); answer them properly instead.
        for req in self.rx.drain() {
            if let Request::Propose { reply, .. } = req {
                let _ = reply.send(Err(ControllerError::Stopped));
            }
        }
    }

    /// Runs until shutdown (`Stopped`) or a storage error.
    fn run_loop(&mut self) -> ControllerError {
        let mut next_tick = Instant::now() + self.tick;
        loop {
            let now = Instant::now();
            if now >= next_tick {
                self.core.tick();
                next_tick = now + self.tick;
            } else {
                match self.rx.recv_deadline(next_tick) {
                    Ok(req) => {
                        if self.handle_request(req) {
                            return ControllerError::Stopped;
                        }
                        for _ in 0..MAX_BATCH {
                            let Ok(req) = self.rx.try_recv() else { break };
                            if self.handle_request(req) {
                                return ControllerError::Stopped;
                            }
                        }
                    }
                    Err(flume::RecvTimeoutError::Timeout) => {}
                    Err(flume::RecvTimeoutError::Disconnected) => return ControllerError::Stopped,
                }
            }
            match self.core.ready() {
                Ok(actions) => self.handle_actions(actions),
                Err(e) => return e,
            }
        }
    }

    /// After a storage failure: refuses proposals with `reason` and reopens the store every
    /// `storage_retry` until a new core is up (true) or the controller is shut down (false).
    fn recover(&mut self, reason: &ControllerError) -> bool {
        self.shared.lock().ready = false;
        self.shared.changed.notify_all();
        loop {
            let retry_at = Instant::now() + self.storage_retry;
            loop {
                match self.rx.recv_deadline(retry_at) {
                    Ok(Request::Propose { reply, .. }) => {
                        let _ = reply.send(Err(reason.clone()));
                    }
                    Ok(Request::Shutdown) | Err(flume::RecvTimeoutError::Disconnected) => {
                        return false;
                    }
                    Err(flume::RecvTimeoutError::Timeout) => break,
                }
            }
            match self.reopen() {
                Ok(first) => {
                    log::info!("controller storage recovered: {}", self.dir.display());
                    self.handle_actions(first);
                    return true;
                }
                Err(e) => log::debug!("controller storage still failing: {e}"),
            }
        }
    }

    /// A new core from the files (recovery cuts what a failed write left torn); replaces the
    /// old one only when it is up, so a failed attempt leaves nothing half done.
    fn reopen(&mut self) -> Result<Vec<Action>, ControllerError> {
        let store =
            LogStore::open(&self.dir).map_err(|e| ControllerError::Storage(e.to_string()))?;
        let mut core = ControllerCore::new(self.core_cfg.clone(), store)?;
        let first = core.ready()?;
        self.core = core;
        Ok(first)
    }

    /// Returns true on shutdown.
    fn handle_request(&mut self, req: Request) -> bool {
        match req {
            Request::Propose { cmd, reply } => {
                match self.core.propose(&cmd) {
                    Ok(id) => {
                        self.waiters.insert(id, reply);
                    }
                    Err(e) => {
                        let _ = reply.send(Err(e));
                    }
                }
                false
            }
            Request::Shutdown => true,
        }
    }

    fn handle_actions(&mut self, actions: Vec<Action>) {
        let mut state = self.shared.lock();
        for action in actions {
            match action {
                Action::Send(msg) => {
                    // No transport yet (single voter): nothing to send to.
                    log::debug!("controller: no transport for raft message to {}", msg.to);
                }
                Action::Applied {
                    proposal,
                    result,
                    metadata,
                    ..
                } => {
                    // Publish first: whoever gets the answer sees the change in metadata().
                    publish(&mut state, metadata);
                    if let Some(reply) = proposal.and_then(|id| self.waiters.remove(&id)) {
                        let _ = reply.send(result.map_err(ControllerError::Metadata));
                    }
                }
                Action::Dropped { proposal } => {
                    if let Some(reply) = self.waiters.remove(&proposal) {
                        let _ = reply.send(Err(ControllerError::NotLeader));
                    }
                }
                Action::LeaderChanged { metadata, .. }
                | Action::SnapshotInstalled { metadata, .. } => publish(&mut state, metadata),
            }
        }
        state.ready = self.core.is_ready();
        self.shared.changed.notify_all();
    }
}

fn publish(state: &mut State, metadata: Arc<ClusterMetadata>) {
    if Arc::ptr_eq(&state.metadata, &metadata) {
        return;
    }
    state.subscribers.retain(|s| s.deliver(&metadata));
    state.metadata = metadata;
}

/// A random 128-bit cluster id in hex, from std's randomly keyed hasher, the clock and the pid.
fn random_cluster_id() -> String {
    use std::hash::{BuildHasher, Hasher};
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    let mut id = 0u128;
    for half in 0u8..2 {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u128(nanos);
        h.write_u32(std::process::id());
        h.write_u8(half);
        id = (id << 64) | u128::from(h.finish());
    }
    format!("{id:032x}")
}

#[cfg(test)]
mod quorum_tests;
#[cfg(test)]
pub(crate) mod sim;
#[cfg(test)]
mod tests;
