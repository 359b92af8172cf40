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
//! - [`transport`]: the voters' TCP transport (raft messages, forwarded proposals).
//!
//! The core runs as a single voter (the broker's embedded controller, no transport) or as one
//! voter of 3 or 5 ([`CoreConfig::voter`]): then this shell delivers [`Action::Send`] messages
//! over the [`transport`] and feeds the peers' to [`ControllerCore::step`]. A proposal made on a
//! follower is **forwarded** to the leader over the same transport; the leader answers with the
//! outcome and its raft index, and the follower answers its caller once it has applied that
//! index itself, so "answered" still means "visible in this node's metadata". While no leader
//! is known (an election), proposals wait (parked) until one is, up to
//! [`ControllerConfig::forward_timeout`].

pub mod acls;
pub mod broker_session;
pub mod cluster;
pub mod core;
pub mod metadata;
mod observer;
pub mod raft_log;
pub mod reassignment;
pub mod transport;
pub mod users;

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use self::cluster::{BrokerRegistration, ClusterError, ClusterManager, Heartbeat};
pub use self::core::{Action, ControllerCore, CoreConfig, ProposalId};
pub use self::metadata::{
    Applied, BrokerInfo, ClusterMetadata, Command, MetadataError, MetadataLimits, PartitionInfo,
    TopicInfo,
};
pub use self::raft_log::{LogStore, StoreError};
use self::transport::{NetEvent, Outgoing, Tag, Transport, TransportConfig};
use crate::protocol::error_code::ErrorCode;

/// Default capacity of the proposal queue into the controller thread.
pub const DEFAULT_QUEUE_CAPACITY: usize = 1024;
/// Default cap on proposals awaiting their raft entry.
pub const DEFAULT_MAX_PENDING: usize = 1024;
/// Default number of applied entries between snapshots.
pub const DEFAULT_COMPACT_EVERY: u64 = 1024;
/// Requests taken from the queue per loop turn (they share one fsync).
const MAX_BATCH: usize = 256;
/// Default [`ControllerConfig::forward_timeout`].
pub const DEFAULT_FORWARD_TIMEOUT: Duration = Duration::from_secs(30);
/// A forwarded proposal refused as "not the leader" is sent on to the leader named in the
/// refusal at most this many times (leadership moving while it travels); then the refusal is
/// the answer.
const MAX_FORWARD_HOPS: u32 = 8;

/// Controller settings.
#[derive(Clone, Debug)]
pub struct ControllerConfig {
    /// The broker's data directory; the controller keeps its files in `<dir>/controller/`.
    pub dir: PathBuf,
    /// This node's raft id (non-zero).
    pub node_id: u64,
    /// Voters as (node id, `host:port`). Empty, or only this node: a single voter with no
    /// transport. Otherwise 3 or 5 voters, this node among them.
    pub voters: Vec<(u64, String)>,
    /// Where the transport listens (`--controller-listen`); `None`: this node's address in
    /// `voters`.
    pub listen: Option<String>,
    /// Largest transport frame sent or accepted (`--controller-max-message-bytes`).
    pub max_message_bytes: usize,
    /// Messages queued per peer before the oldest is dropped.
    pub peer_queue: usize,
    /// How long a follower holds a proposal it forwarded (or parked while no leader is
    /// known) before answering [`ControllerError::Timeout`].
    pub forward_timeout: Duration,
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
    /// `--broker-session-timeout-ms`: as the active controller, fence a member broker whose
    /// last heartbeat is older than this.
    pub broker_session_timeout: Duration,
    /// This broker is not a voter (`--process-roles broker`): it follows the metadata of the
    /// quorum in `voters` ([`observer`]) and keeps no controller files.
    pub observer: bool,
    /// Mutual TLS on the quorum's transport (`--inter-broker-tls-ca`); `None`: plaintext.
    pub tls: Option<crate::tls::PeerTls>,
}

impl ControllerConfig {
    /// A single-voter controller for node `node_id` with defaults.
    pub fn new(dir: impl Into<PathBuf>, node_id: u64) -> ControllerConfig {
        ControllerConfig {
            dir: dir.into(),
            node_id,
            voters: Vec::new(),
            listen: None,
            max_message_bytes: transport::DEFAULT_MAX_MESSAGE_BYTES,
            peer_queue: transport::DEFAULT_PEER_QUEUE,
            forward_timeout: DEFAULT_FORWARD_TIMEOUT,
            tick: Duration::from_millis(100),
            limits: MetadataLimits::default(),
            queue_capacity: DEFAULT_QUEUE_CAPACITY,
            max_pending: DEFAULT_MAX_PENDING,
            compact_every: DEFAULT_COMPACT_EVERY,
            cluster_id: None,
            storage_retry: Duration::from_secs(5),
            broker_session_timeout: Duration::from_millis(cluster::DEFAULT_SESSION_TIMEOUT_MS),
            observer: false,
            tls: None,
        }
    }

    /// The directory holding the controller's files.
    pub fn controller_dir(&self) -> PathBuf {
        self.dir.join("controller")
    }

    /// The voter ids, checked: this node among them, no id twice, and 1 (this node alone),
    /// 3 or 5 of them (an even count tolerates no more failures than one fewer voter, and two
    /// voters none at all).
    pub fn voter_ids(&self) -> Result<Vec<u64>, ControllerError> {
        if self.voters.is_empty() {
            return Ok(vec![self.node_id]);
        }
        let mut ids: Vec<u64> = self.voters.iter().map(|(id, _)| *id).collect();
        ids.sort_unstable();
        if let Some(w) = ids.windows(2).find(|w| w[0] == w[1]) {
            return Err(ControllerError::Config(format!(
                "voter id {} is listed twice",
                w[0]
            )));
        }
        if !ids.contains(&self.node_id) {
            return Err(ControllerError::Config(format!(
                "this node ({}) is not one of the voters {ids:?}",
                self.node_id
            )));
        }
        if ![1, 3, 5].contains(&ids.len()) {
            return Err(ControllerError::Config(format!(
                "{} voters: a controller quorum has 1, 3 or 5 voters",
                ids.len()
            )));
        }
        Ok(ids)
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
    /// The leader a proposal was forwarded to could not be reached, or the proposal could
    /// not be sent: its outcome is unknown (as after a timeout).
    #[error("{0}")]
    Unreachable(String),
    /// Other voters refused this node's handshake (voters lists that disagree, another
    /// cluster) before it ever joined a quorum.
    #[error("{0}")]
    Refused(String),
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
            ControllerError::Timeout
            | ControllerError::Overloaded(_)
            | ControllerError::Unreachable(_) => ErrorCode::RequestTimedOut,
            ControllerError::Config(_) | ControllerError::Refused(_) => ErrorCode::InvalidRequest,
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

/// What a caller asks of the controller. A follower forwards it to the leader (serde: it
/// crosses the transport in a `FORWARD`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Call {
    /// A metadata change (a raft entry).
    Propose(Command),
    /// A broker joins: the active controller's [`ClusterManager`] turns it into commands
    /// (answered with [`Applied::MemberRegistered`] once applied) or refuses it.
    Register(BrokerRegistration),
    /// A broker's heartbeat: renews its session in the active controller's memory, no raft
    /// entry; answered at once with [`Applied::Heartbeat`].
    Heartbeat(Heartbeat),
}

enum Request {
    Call { call: Call, reply: Reply },
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

/// This voter's raft state after its last pass (metrics).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RaftStatus {
    /// The raft leader: the active controller.
    pub is_leader: bool,
    pub term: u64,
    pub committed_index: u64,
    pub applied_index: u64,
}

struct State {
    metadata: Arc<ClusterMetadata>,
    ready: bool,
    /// `None` until the voter's first pass, and on a broker that is not a voter.
    raft: Option<RaftStatus>,
    /// Set while the controller's files refuse writes (a full disk): it retries, serving
    /// the metadata it last applied.
    storage_failure: Option<ControllerError>,
    /// Why the controller thread ended (set once it has).
    stopped: Option<ControllerError>,
    subscribers: Vec<Subscriber>,
}

struct Shared {
    state: Mutex<State>,
    changed: Condvar,
    /// This broker must not acknowledge writes: its heartbeats say it is fenced, or none got
    /// through for a session timeout (set by [`broker_session`]; read on every produce).
    broker_fenced: std::sync::atomic::AtomicBool,
}

impl Shared {
    fn new() -> Arc<Shared> {
        Arc::new(Shared {
            state: Mutex::new(State {
                metadata: Arc::new(ClusterMetadata::default()),
                ready: false,
                raft: None,
                storage_failure: None,
                stopped: None,
                subscribers: Vec::new(),
            }),
            changed: Condvar::new(),
            broker_fenced: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// The controller ended for `reason`: callers get it, subscriptions close.
    fn mark_stopped(&self, reason: ControllerError) {
        let mut state = self.lock();
        state.ready = false;
        state.stopped = Some(reason);
        state.subscribers.clear();
        self.changed.notify_all();
    }

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

/// Opens the controller's storage under `<cfg.dir>/controller/`, starts its thread (and, with
/// several voters, the transport) and campaigns.
pub fn start(cfg: ControllerConfig) -> Result<Controller, ControllerError> {
    if cfg.node_id == 0 {
        return Err(ControllerError::Config("node id must be non-zero".into()));
    }
    if cfg.observer {
        return observer::start(cfg);
    }
    let ids = cfg.voter_ids()?;
    if cfg.tick.is_zero() {
        return Err(ControllerError::Config("tick must be positive".into()));
    }
    let store = LogStore::open(&cfg.controller_dir())
        .map_err(|e| ControllerError::Storage(e.to_string()))?;
    if store.is_initialized() {
        // The voters of an existing cluster live in its log; raft-rs would silently keep
        // them, so a changed flag is refused rather than half obeyed.
        let mut stored = store.conf_state().voters.clone();
        stored.sort_unstable();
        if stored != ids {
            return Err(ControllerError::Config(format!(
                "{} holds a quorum of voters {stored:?}, but this node was started with voters \
                 {ids:?} (changing the voters of a cluster is not supported)",
                cfg.controller_dir().display()
            )));
        }
    }
    let core_cfg = CoreConfig {
        node_id: cfg.node_id,
        voters: ids.clone(),
        election_tick: 10,
        heartbeat_tick: 3,
        limits: cfg.limits.clone(),
        max_pending: cfg.max_pending,
        compact_every: cfg.compact_every,
        cluster_id: cfg.cluster_id.clone().unwrap_or_else(random_cluster_id),
        fixed_election_timeout: None,
    };
    let (transport, net_rx, net_tx) = if ids.len() > 1 {
        let listen = match &cfg.listen {
            Some(l) => l.clone(),
            None => cfg
                .voters
                .iter()
                .find(|(id, _)| *id == cfg.node_id)
                .map(|(_, a)| a.clone())
                .unwrap_or_default(),
        };
        let (t, rx) = Transport::start(TransportConfig {
            node_id: cfg.node_id,
            voters: cfg.voters.clone(),
            listen,
            max_message_bytes: cfg.max_message_bytes,
            peer_queue: cfg.peer_queue,
            tls: cfg.tls.clone(),
        })
        .map_err(|e| ControllerError::Config(e.to_string()))?;
        (Some(t), rx, None)
    } else {
        // A single voter has no transport; its event channel never yields (the sender is
        // kept so it never disconnects either).
        let (tx, rx) = flume::bounded(1);
        (None, rx, Some(tx))
    };
    let mut core = ControllerCore::new(core_cfg.clone(), store)?;
    let shared = Shared::new();
    // A start on a full disk: raft cannot persist its new term, but what the files hold is
    // committed and already applied (entries apply before the new ones persist). Publish that
    // and start in recovery, so the broker serves what it has, read-only, until space is back.
    let (first, failed) = match core.ready() {
        Ok(actions) => (actions, None),
        Err(e @ ControllerError::Storage(_)) => {
            let mut state = shared.lock();
            publish(&mut state, core.metadata().clone());
            state.storage_failure = Some(e.clone());
            (Vec::new(), Some(e))
        }
        Err(e) => return Err(e),
    };

    let capacity = cfg.queue_capacity.max(1);
    let (tx, rx) = flume::bounded(capacity);
    let mut worker = Worker {
        core,
        rx,
        shared: shared.clone(),
        tick: cfg.tick,
        waiters: HashMap::new(),
        dir: cfg.controller_dir(),
        core_cfg,
        storage_retry: cfg.storage_retry,
        transport,
        net_rx,
        _net_tx: net_tx,
        voters: ids.len(),
        forward_timeout: cfg.forward_timeout,
        max_pending: cfg.max_pending.max(1),
        forwarded: HashMap::new(),
        next_forward: 1,
        parked: VecDeque::new(),
        deferred: Vec::new(),
        refused_by: BTreeSet::new(),
        ever_ready: false,
        fatal: None,
        sessions: None,
        session_timeout_ms: u64::try_from(cfg.broker_session_timeout.as_millis())
            .unwrap_or(u64::MAX),
        clock_start: Instant::now(),
        last_fence_check_ms: 0,
    };
    if failed.is_none() {
        worker.handle_actions(first);
    }
    let thread = std::thread::Builder::new()
        .name("rill-controller".into())
        .spawn(move || worker.run(failed))
        .map_err(|e| ControllerError::Storage(format!("spawn controller thread: {e}")))?;
    Ok(Controller::running(tx, capacity, shared, thread))
}

impl Controller {
    /// The controller whose `thread` takes requests from `tx` and publishes into `shared`.
    fn running(
        tx: flume::Sender<Request>,
        capacity: usize,
        shared: Arc<Shared>,
        thread: JoinHandle<()>,
    ) -> Controller {
        Controller {
            handle: ControllerHandle {
                tx,
                capacity,
                shared,
            },
            thread: Some(thread),
        }
    }

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
        self.call(Call::Propose(cmd))
    }

    /// Registers a member broker with the active controller (wherever it is): answered with
    /// [`Applied::MemberRegistered`] once applied here, or the refusal (a live broker with
    /// this node id and another incarnation: DUPLICATE_BROKER_REGISTRATION).
    pub fn register(
        &self,
        reg: BrokerRegistration,
    ) -> flume::Receiver<Result<Applied, ControllerError>> {
        self.call(Call::Register(reg))
    }

    /// Sends a member broker's heartbeat to the active controller: answered with
    /// [`Applied::Heartbeat`].
    pub fn heartbeat(&self, hb: Heartbeat) -> flume::Receiver<Result<Applied, ControllerError>> {
        self.call(Call::Heartbeat(hb))
    }

    /// Whether this broker is fenced (see [`broker_session`]): it must not acknowledge writes.
    pub fn broker_fenced(&self) -> bool {
        self.shared
            .broker_fenced
            .load(std::sync::atomic::Ordering::Acquire)
    }

    fn set_broker_fenced(&self, fenced: bool) {
        self.shared
            .broker_fenced
            .store(fenced, std::sync::atomic::Ordering::Release);
    }

    fn call(&self, call: Call) -> flume::Receiver<Result<Applied, ControllerError>> {
        let (reply, rx) = flume::bounded(1);
        if let Some(e) = self.shared.lock().stopped.clone() {
            let _ = reply.send(Err(e));
            return rx;
        }
        match self.tx.try_send(Request::Call { call, reply }) {
            Ok(()) => {}
            Err(flume::TrySendError::Full(Request::Call { reply, .. })) => {
                let _ = reply.send(Err(ControllerError::Overloaded(format!(
                    "controller queue full ({} requests)",
                    self.capacity
                ))));
            }
            Err(flume::TrySendError::Disconnected(Request::Call { reply, .. })) => {
                let _ = reply.send(Err(ControllerError::Stopped));
            }
            Err(_) => {}
        }
        rx
    }

    /// This voter's raft state after its controller's last pass (`None` on a non-voter).
    pub fn raft_status(&self) -> Option<RaftStatus> {
        self.shared.lock().raft
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
        subscribe_with(&self.shared, tx, rx.clone());
        rx
    }

    /// Waits until the metadata is current and returns it: a single voter is the leader with
    /// every committed entry applied; a voter of a quorum knows a leader (or is it) and has
    /// applied every entry it knows committed, so proposals made through it are answered.
    /// While its storage refuses writes it answers that failure at once: the metadata it
    /// serves meanwhile ([`Self::metadata`]) is what its files hold, current but read-only.
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
            if let Some(e) = &state.storage_failure {
                return Err(e.clone());
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

/// Who waits for a proposal's outcome.
enum Waiter {
    /// A caller on this node.
    Local(Reply),
    /// A follower that forwarded it: answered over the transport with its id.
    Remote { peer: u64, id: u64 },
}

/// A proposal this follower forwarded to the leader `to`.
struct Forwarded {
    reply: Reply,
    call: Call,
    to: u64,
    deadline: Instant,
    hops: u32,
}

/// A proposal waiting for a leader to be known.
struct Parked {
    reply: Reply,
    call: Call,
    deadline: Instant,
    hops: u32,
}

/// A forwarded proposal the leader applied at `index`, answered once this node applied it too.
struct Deferred {
    index: u64,
    reply: Reply,
    result: Result<Applied, ControllerError>,
    deadline: Instant,
}

struct Worker {
    core: ControllerCore,
    rx: flume::Receiver<Request>,
    shared: Arc<Shared>,
    tick: Duration,
    waiters: HashMap<ProposalId, Waiter>,
    /// To reopen the core from its files after a storage failure.
    dir: PathBuf,
    core_cfg: CoreConfig,
    storage_retry: Duration,
    /// `None` for a single voter.
    transport: Option<Transport>,
    net_rx: flume::Receiver<NetEvent>,
    /// Keeps a single voter's (empty) event channel connected.
    _net_tx: Option<flume::Sender<NetEvent>>,
    voters: usize,
    forward_timeout: Duration,
    /// Forwarded + parked + deferred proposals at most (past it: Overloaded).
    max_pending: usize,
    forwarded: HashMap<u64, Forwarded>,
    next_forward: u64,
    parked: VecDeque<Parked>,
    deferred: Vec<Deferred>,
    /// Voters that refused this node's handshake or sent one this node refused.
    refused_by: BTreeSet<u64>,
    /// Set once this node's metadata was current: refusals after that are only logged.
    ever_ready: bool,
    /// Set when the worker must stop (a quorum refused this node).
    fatal: Option<ControllerError>,
    /// The member brokers' heartbeat sessions, while this node is the active controller (a
    /// ready leader); dropped when it is not.
    sessions: Option<ClusterManager>,
    session_timeout_ms: u64,
    /// The sessions' clock (monotonic milliseconds since the worker started).
    clock_start: Instant,
    /// When sessions were last checked for expiry (see `fence_expired_sessions`).
    last_fence_check_ms: u64,
}

/// How a call made here went.
enum Outcome {
    /// Proposed: answered when the entry is applied.
    Pending(ProposalId),
    /// Answered already (a heartbeat).
    Done(Applied),
}

/// A refusal of the active controller's membership logic, as the caller sees it.
fn cluster_refusal(e: ClusterError) -> ControllerError {
    match e {
        ClusterError::Metadata(m) => ControllerError::Metadata(m),
        other => ControllerError::Metadata(MetadataError::new(other.code(), other.to_string())),
    }
}

/// One input to the loop.
enum Input {
    Request(Result<Request, flume::RecvError>),
    Net(Result<NetEvent, flume::RecvError>),
}

impl Worker {
    /// `failed`: the storage failure the controller started with, if it did.
    fn run(mut self, mut failed: Option<ControllerError>) {
        let reason = loop {
            let reason = failed.take().unwrap_or_else(|| self.run_loop());
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
            self.answer_all(&reason);
            if !self.recover(&reason) {
                break ControllerError::Stopped;
            }
        };
        self.answer_all(&reason);
        if let Some(t) = self.transport.take() {
            t.stop();
        }
        self.shared.mark_stopped(reason);
        // Requests still queued are answered by dropping their reply senders (the receivers see
        // a disconnect); answer them properly instead.
        for req in self.rx.drain() {
            if let Request::Call { reply, .. } = req {
                let _ = reply.send(Err(ControllerError::Stopped));
            }
        }
    }

    /// Answers every proposal waiting on this node (local, forwarded, parked, deferred) with
    /// `reason`. Followers whose proposals this leader held learn by their own timeout.
    fn answer_all(&mut self, reason: &ControllerError) {
        for (_, w) in self.waiters.drain() {
            if let Waiter::Local(reply) = w {
                let _ = reply.send(Err(reason.clone()));
            }
        }
        for (_, f) in self.forwarded.drain() {
            let _ = f.reply.send(Err(reason.clone()));
        }
        for p in self.parked.drain(..) {
            let _ = p.reply.send(Err(reason.clone()));
        }
        for d in self.deferred.drain(..) {
            let _ = d.reply.send(Err(reason.clone()));
        }
    }

    /// Runs until shutdown (`Stopped`), a storage error or a fatal refusal.
    fn run_loop(&mut self) -> ControllerError {
        let mut next_tick = Instant::now() + self.tick;
        loop {
            let now = Instant::now();
            if now >= next_tick {
                self.core.tick();
                self.on_tick(now);
                next_tick = now + self.tick;
            } else {
                let input = flume::Selector::new()
                    .recv(&self.rx, Input::Request)
                    .recv(&self.net_rx, Input::Net)
                    .wait_deadline(next_tick);
                // A timeout is the tick.
                let mut next = input.ok();
                for _ in 0..MAX_BATCH {
                    let Some(input) = next.take() else { break };
                    match input {
                        Input::Request(Ok(req)) => {
                            if self.handle_request(req) {
                                return ControllerError::Stopped;
                            }
                        }
                        Input::Request(Err(_)) => return ControllerError::Stopped,
                        Input::Net(Ok(ev)) => {
                            if let Err(e) = self.handle_net(ev) {
                                return e;
                            }
                        }
                        // Only when the transport is gone, which the worker alone stops.
                        Input::Net(Err(_)) => {}
                    }
                    next = match self.rx.try_recv() {
                        Ok(r) => Some(Input::Request(Ok(r))),
                        Err(_) => self.net_rx.try_recv().ok().map(|e| Input::Net(Ok(e))),
                    };
                }
            }
            if let Some(e) = self.fatal.take() {
                return e;
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
        {
            let mut state = self.shared.lock();
            state.ready = false;
            state.storage_failure = Some(reason.clone());
        }
        self.shared.changed.notify_all();
        loop {
            let retry_at = Instant::now() + self.storage_retry;
            loop {
                match self.rx.recv_deadline(retry_at) {
                    Ok(Request::Call { reply, .. }) => {
                        let _ = reply.send(Err(reason.clone()));
                    }
                    Ok(Request::Shutdown) | Err(flume::RecvTimeoutError::Disconnected) => {
                        return false;
                    }
                    Err(flume::RecvTimeoutError::Timeout) => break,
                }
            }
            // What the peers sent meanwhile is stale: raft resends.
            for _ in self.net_rx.drain() {}
            match self.reopen() {
                Ok(first) => {
                    log::info!("controller storage recovered: {}", self.dir.display());
                    self.shared.lock().storage_failure = None;
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
            Request::Call { call, reply } => {
                let deadline = Instant::now() + self.forward_timeout;
                self.submit(call, reply, deadline, 0);
                false
            }
            Request::Shutdown => true,
        }
    }

    /// Monotonic milliseconds for the heartbeat sessions.
    fn now_ms(&self) -> u64 {
        u64::try_from(self.clock_start.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// The heartbeat sessions while this node is the active controller, started (every
    /// member gets a full session) when it became so; `None`, and forgotten, otherwise.
    fn sessions(&mut self) -> Option<&mut ClusterManager> {
        if !self.core.is_ready() {
            self.sessions = None;
            return None;
        }
        let now = self.now_ms();
        let timeout = self.session_timeout_ms;
        let md = self.core.metadata().clone();
        Some(self.sessions.get_or_insert_with(|| {
            let mut m = ClusterManager::new(timeout);
            m.reset(&md, now);
            m
        }))
    }

    /// As the active controller: proposes a fence for every member whose session ran out.
    /// After a stall of this thread (a slow disk under a proposal's fsync, the process not
    /// scheduled) of half a session or more, every member gets a fresh session instead: their
    /// heartbeats may be waiting in the queue behind the stall.
    fn fence_expired_sessions(&mut self) {
        let now = self.now_ms();
        let stalled = now.saturating_sub(self.last_fence_check_ms) >= self.session_timeout_ms / 2;
        self.last_fence_check_ms = now;
        let md = self.core.metadata().clone();
        let Some(sessions) = self.sessions() else {
            return;
        };
        if stalled {
            log::warn!("controller: stalled for half a broker session; sessions restarted");
            sessions.reset(&md, now);
            return;
        }
        for cmd in sessions.poll(&md, now) {
            log::warn!("controller: broker session expired: {cmd:?}");
            // No one waits: a lost fence is proposed again one session later.
            if let Err(e) = self.core.propose(&cmd) {
                log::info!("controller: fence not proposed: {e}");
            }
        }
    }

    /// Handles `call` on this node: proposes it (a leader), or answers it from the heartbeat
    /// sessions (the active controller); else refuses with NotController naming the leader.
    fn local(&mut self, call: &Call) -> Result<Outcome, ControllerError> {
        let not_controller = ControllerError::NotController {
            node_id: self.core.node_id(),
            leader_id: self.core.leader_id(),
        };
        let now = self.now_ms();
        let md = self.core.metadata().clone();
        match call {
            Call::Propose(cmd) => Ok(Outcome::Pending(self.core.propose(cmd)?)),
            Call::Register(reg) => {
                let Some(sessions) = self.sessions() else {
                    return Err(not_controller);
                };
                let cmds = sessions.register(&md, reg, now).map_err(cluster_refusal)?;
                // A fence of the old incarnation, then the registration: answered with the
                // registration's outcome.
                let mut last = None;
                for cmd in &cmds {
                    last = Some(self.core.propose(cmd)?);
                }
                last.map(Outcome::Pending).ok_or(not_controller)
            }
            Call::Heartbeat(hb) => {
                let Some(sessions) = self.sessions() else {
                    return Err(not_controller);
                };
                let out = sessions.heartbeat(&md, hb, now).map_err(cluster_refusal)?;
                if let Some(cmd) = out.propose {
                    // The broker heartbeats again and the command is proposed again.
                    if let Err(e) = self.core.propose(&cmd) {
                        log::info!("controller: {cmd:?} not proposed: {e}");
                    }
                }
                Ok(Outcome::Done(Applied::Heartbeat(out.reply)))
            }
        }
    }

    /// Proposes `cmd` here if this node leads, else forwards it to the leader, else (no leader
    /// known) parks it until one is.
    fn submit(&mut self, call: Call, reply: Reply, deadline: Instant, hops: u32) {
        match self.local(&call) {
            Ok(Outcome::Pending(id)) => {
                self.waiters.insert(id, Waiter::Local(reply));
            }
            Ok(Outcome::Done(applied)) => {
                let _ = reply.send(Ok(applied));
            }
            Err(ControllerError::NotController { node_id, leader_id })
                if self.transport.is_some() && hops < MAX_FORWARD_HOPS =>
            {
                if self.forwarded.len() + self.parked.len() + self.deferred.len()
                    >= self.max_pending
                {
                    let _ = reply.send(Err(ControllerError::Overloaded(format!(
                        "{} proposals already forwarded or waiting for a controller leader",
                        self.max_pending
                    ))));
                } else if leader_id != 0 && leader_id != node_id {
                    self.forward(leader_id, call, reply, deadline, hops);
                } else {
                    self.parked.push_back(Parked {
                        reply,
                        call,
                        deadline,
                        hops,
                    });
                }
            }
            Err(e) => {
                let _ = reply.send(Err(e));
            }
        }
    }

    fn forward(&mut self, to: u64, call: Call, reply: Reply, deadline: Instant, hops: u32) {
        let Some(t) = &self.transport else { return };
        let id = self.next_forward;
        self.next_forward += 1;
        let sent = t.send(
            to,
            Outgoing::Forward {
                id,
                call: call.clone(),
            },
        );
        match sent {
            Ok(dropped) => {
                self.forwarded.insert(
                    id,
                    Forwarded {
                        reply,
                        call,
                        to,
                        deadline,
                        hops: hops + 1,
                    },
                );
                self.account_dropped(to, dropped);
            }
            Err(e) => {
                let _ = reply.send(Err(ControllerError::Unreachable(e.to_string())));
            }
        }
    }

    /// Messages to `to` that were dropped unsent: a snapshot is reported failed (raft sends
    /// another), a forwarded proposal waits for the next leader.
    fn account_dropped(&mut self, to: u64, tags: Vec<Tag>) {
        for tag in tags {
            match tag {
                Tag::Plain => {}
                Tag::Snapshot => self.core.report_snapshot(to, false),
                Tag::Forward(id) => {
                    if let Some(f) = self.forwarded.remove(&id) {
                        // Never sent, so never applied: safe to send again.
                        self.parked.push_back(Parked {
                            reply: f.reply,
                            call: f.call,
                            deadline: f.deadline,
                            hops: f.hops,
                        });
                    }
                }
            }
        }
    }

    fn send(&mut self, to: u64, msg: Outgoing) {
        let Some(t) = &self.transport else {
            // A single voter has no one to send to (raft never asks it to).
            return;
        };
        let is_snapshot = matches!(&msg, Outgoing::Raft(m)
            if m.get_msg_type() == raft::eraftpb::MessageType::MsgSnapshot);
        match t.send(to, msg) {
            Ok(dropped) => self.account_dropped(to, dropped),
            Err(e) => {
                log::error!("controller: {e}");
                if is_snapshot {
                    self.core.report_snapshot(to, false);
                }
                self.core.report_unreachable(to);
            }
        }
    }

    /// One event from the transport. An error stops the worker (a storage error reopens).
    fn handle_net(&mut self, ev: NetEvent) -> Result<(), ControllerError> {
        match ev {
            NetEvent::Raft(msg) => {
                let from = msg.from;
                // raft-rs panics on some inconsistent messages (a peer's bug or a forged
                // frame from a voter's address): start over from the files rather than die.
                let stepped =
                    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.core.step(msg)));
                match stepped {
                    Ok(r) => r?,
                    Err(_) => {
                        return Err(ControllerError::Storage(format!(
                            "raft panicked on a message from node {from}; restarting the \
                             controller from its files"
                        )))
                    }
                }
            }
            NetEvent::Forward { from, id, call } => match self.local(&call) {
                Ok(Outcome::Pending(pid)) => {
                    self.waiters.insert(pid, Waiter::Remote { peer: from, id });
                }
                Ok(Outcome::Done(applied)) => self.send(
                    from,
                    Outgoing::ForwardReply {
                        id,
                        index: 0,
                        result: Ok(applied),
                    },
                ),
                Err(e) => self.send(
                    from,
                    Outgoing::ForwardReply {
                        id,
                        index: 0,
                        result: Err(e),
                    },
                ),
            },
            NetEvent::ForwardReply {
                id, index, result, ..
            } => {
                let Some(f) = self.forwarded.remove(&id) else {
                    return Ok(()); // answered already (timed out)
                };
                match result {
                    Ok(applied) if index > self.core.applied_index() => {
                        self.deferred.push(Deferred {
                            index,
                            reply: f.reply,
                            result: Ok(applied),
                            deadline: f.deadline,
                        })
                    }
                    // Refused before proposing, or dropped by a deposed leader: never
                    // applied, so it may go to the leader now known.
                    Err(ControllerError::NotController { .. })
                    | Err(ControllerError::NotLeader) => {
                        self.submit(f.call, f.reply, f.deadline, f.hops)
                    }
                    other => {
                        let _ = f.reply.send(other);
                    }
                }
            }
            NetEvent::Unreachable(peer) => {
                self.core.report_unreachable(peer);
                // Sent, then the connection failed: the leader may or may not have it.
                let lost: Vec<u64> = self
                    .forwarded
                    .iter()
                    .filter(|(_, f)| f.to == peer)
                    .map(|(&id, _)| id)
                    .collect();
                for id in lost {
                    if let Some(f) = self.forwarded.remove(&id) {
                        let _ = f.reply.send(Err(ControllerError::Unreachable(format!(
                            "the controller leader (node {peer}) became unreachable after the \
                             proposal was sent; its outcome is unknown"
                        ))));
                    }
                }
            }
            NetEvent::ObserverCall { from, call, reply } => {
                log::trace!("controller: call from broker {from}: {call:?}");
                let deadline = Instant::now() + self.forward_timeout;
                self.submit(call, reply, deadline, 0);
            }
            NetEvent::Subscribe(tx, rx) => subscribe_with(&self.shared, tx, rx),
            NetEvent::Snapshot { to, delivered } => self.core.report_snapshot(to, delivered),
            NetEvent::Dropped { to, tag } => self.account_dropped(to, vec![tag]),
            NetEvent::Refused { peer, reason } => {
                self.refused_by.insert(peer);
                let majority = self.voters / 2 + 1;
                // Refused by so many voters that the rest cannot make a quorum: this node's
                // configuration is the odd one out. A node that already served keeps going
                // (the refusals are logged by the transport).
                if !self.ever_ready && self.voters - self.refused_by.len() < majority {
                    self.fatal = Some(ControllerError::Refused(reason));
                }
            }
        }
        Ok(())
    }

    /// Every tick: parked proposals try again (a leader may be known now); whatever waited
    /// past its deadline is answered with a timeout.
    fn on_tick(&mut self, now: Instant) {
        self.fence_expired_sessions();
        for p in std::mem::take(&mut self.parked) {
            if p.reply.is_disconnected() {
                // The caller gave up (its own timeout): proposing it later would apply a
                // change whose requester was told it failed.
                continue;
            }
            if now >= p.deadline {
                let _ = p.reply.send(Err(ControllerError::Timeout));
            } else if self.core.leader_id() != 0 {
                self.submit(p.call, p.reply, p.deadline, p.hops);
            } else {
                self.parked.push_back(p);
            }
        }
        let expired: Vec<u64> = self
            .forwarded
            .iter()
            .filter(|(_, f)| now >= f.deadline)
            .map(|(&id, _)| id)
            .collect();
        for id in expired {
            if let Some(f) = self.forwarded.remove(&id) {
                let _ = f.reply.send(Err(ControllerError::Timeout));
            }
        }
        let (late, keep): (Vec<_>, Vec<_>) = std::mem::take(&mut self.deferred)
            .into_iter()
            .partition(|d| now >= d.deadline);
        self.deferred = keep;
        for d in late {
            // Applied by the leader, not yet here: the change is made, this node lags.
            let _ = d.reply.send(Err(ControllerError::Timeout));
        }
    }

    fn handle_actions(&mut self, actions: Vec<Action>) {
        for action in actions {
            match action {
                Action::Send(msg) => {
                    let to = msg.to;
                    self.send(to, Outgoing::Raft(msg));
                }
                Action::Applied {
                    index,
                    proposal,
                    result,
                    metadata,
                } => {
                    // Publish first: whoever gets the answer sees the change in metadata(),
                    // and a non-voter answered waits until its metadata is this far.
                    publish(&mut self.shared.lock(), metadata);
                    if let Some(t) = &self.transport {
                        t.set_applied(self.core.metadata().applied_index);
                    }
                    match proposal.and_then(|id| self.waiters.remove(&id)) {
                        Some(Waiter::Local(reply)) => {
                            let _ = reply.send(result.map_err(ControllerError::Metadata));
                        }
                        Some(Waiter::Remote { peer, id }) => self.send(
                            peer,
                            Outgoing::ForwardReply {
                                id,
                                index,
                                result: result.map_err(ControllerError::Metadata),
                            },
                        ),
                        None => {}
                    }
                }
                Action::Dropped { proposal } => match self.waiters.remove(&proposal) {
                    Some(Waiter::Local(reply)) => {
                        let _ = reply.send(Err(ControllerError::NotLeader));
                    }
                    Some(Waiter::Remote { peer, id }) => self.send(
                        peer,
                        Outgoing::ForwardReply {
                            id,
                            index: 0,
                            result: Err(ControllerError::NotLeader),
                        },
                    ),
                    None => {}
                },
                Action::LeaderChanged { metadata, .. }
                | Action::SnapshotInstalled { metadata, .. } => {
                    publish(&mut self.shared.lock(), metadata)
                }
            }
        }
        // Forwarded proposals the leader applied, now applied here too.
        let applied = self.core.applied_index();
        if self.deferred.iter().any(|d| d.index <= applied) {
            let (done, wait): (Vec<_>, Vec<_>) = std::mem::take(&mut self.deferred)
                .into_iter()
                .partition(|d| d.index <= applied);
            self.deferred = wait;
            for d in done {
                let _ = d.reply.send(d.result);
            }
        }
        let ready = self.core.is_ready() || (self.voters > 1 && self.follower_current());
        self.ever_ready |= ready;
        if let Some(t) = &self.transport {
            t.set_applied(self.core.metadata().applied_index);
            let id = &self.core.metadata().cluster_id;
            if !id.is_empty() {
                t.set_cluster_id(id);
            }
        }
        let mut state = self.shared.lock();
        state.ready = ready;
        state.raft = Some(RaftStatus {
            is_leader: self.core.is_leader(),
            term: self.core.term(),
            committed_index: self.core.committed_index(),
            applied_index: self.core.applied_index(),
        });
        self.shared.changed.notify_all();
    }

    /// A follower's metadata is current: it knows a leader, has applied all it knows
    /// committed, and the cluster is named.
    fn follower_current(&self) -> bool {
        let leader = self.core.leader_id();
        leader != 0
            && leader != self.core.node_id()
            && self.core.applied_index() >= self.core.committed_index()
            && !self.core.metadata().cluster_id.is_empty()
    }
}

/// Adds a subscriber sending on `tx` (see [`ControllerHandle::subscribe`]).
/// `rx` is a clone of the subscriber's end, kept to drop the oldest update when it is full.
fn subscribe_with(
    shared: &Shared,
    tx: flume::Sender<Arc<ClusterMetadata>>,
    rx: flume::Receiver<Arc<ClusterMetadata>>,
) {
    let mut state = shared.lock();
    if state.stopped.is_none() {
        let sub = Subscriber { tx, rx };
        sub.deliver(&state.metadata);
        state.subscribers.push(sub);
    }
}

fn publish(state: &mut State, metadata: Arc<ClusterMetadata>) {
    if Arc::ptr_eq(&state.metadata, &metadata) {
        return;
    }
    state.subscribers.retain(|s| s.deliver(&metadata));
    state.metadata = metadata;
}

/// A random 128-bit cluster id in hex.
fn random_cluster_id() -> String {
    format!("{:016x}{:016x}", random_u64(0), random_u64(1))
}

/// A random 64-bit number (a cluster id half, a broker incarnation), from std's randomly
/// keyed hasher, the clock, the pid and `salt`.
pub fn random_u64(salt: u8) -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(nanos);
    h.write_u32(std::process::id());
    h.write_u8(salt);
    h.finish()
}

#[cfg(test)]
mod quorum_tests;
#[cfg(test)]
pub(crate) mod sim;
#[cfg(test)]
mod tests;
