//! The controller quorum's TCP transport: raft messages and controller RPCs between voters.
//!
//! One listener (`--controller-listen`) and, per peer voter, one outbound connection owned by a
//! writer thread. Each direction of a pair of voters is its own connection: a node writes only
//! on the connections it opened and reads only on those it accepted, so no connection needs a
//! read and a write side coordinated. std threads are fine here: the controller runs on its
//! own thread, never on a shard, and carries little traffic.
//!
//! Wire format: frames `[len u32 BE][kind u8][body]`, `len` counting kind and body, at most
//! `--controller-max-message-bytes` (64 KiB until the handshake is done, so an unauthenticated
//! peer cannot make this node buffer much). The first frame on a connection is a `HELLO`
//! (serde_json: protocol version, sender node id, the voters list it was started with, its
//! cluster id once known); the acceptor answers `HELLO_OK` or `HELLO_REFUSED` with a one-line
//! reason (voters lists that disagree, an unknown node id, another cluster) and logs the same
//! line. Then: `RAFT` (one protobuf `eraftpb::Message`), `FORWARD` and `FORWARD_REPLY` (a
//! proposal a follower forwards to the leader, and its outcome; serde_json), `PING` (keeps an
//! idle connection from looking dead). Anything else (a bad length, a kind out of place, an
//! undecodable body, a raft message claiming another sender) is logged and the connection
//! closed; nothing read from a socket can panic this node.
//!
//! Sending never blocks the controller: each peer has a bounded queue
//! ([`DEFAULT_PEER_QUEUE`] messages) that drops its oldest message when full (raft tolerates
//! loss and resends); the writer drains all it holds into one buffered write (batching). A
//! failed connection or write reports the peer unreachable, fails what was queued, and
//! reconnects with capped exponential backoff ([`BACKOFF_MIN`]..[`BACKOFF_MAX`]).
//! Snapshots are reported delivered once written and flushed, failed when dropped.

use std::collections::{HashMap, VecDeque};
use std::io::{BufWriter, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, RwLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use protobuf::Message as PbMessage;
use raft::eraftpb::{Message, MessageType};
use serde::{Deserialize, Serialize};

use super::metadata::{Applied, ClusterMetadata, MetadataError};
use super::{Call, ControllerError};
use crate::client::socket::Socket;
use crate::protocol::error_code::ErrorCode;

/// Version of the frames and handshake below; a peer speaking another is refused.
pub const PROTOCOL_VERSION: u32 = 1;
/// Default `--controller-max-message-bytes`: the largest frame sent or accepted. A raft
/// append carries at most 1 MiB of entries (`max_size_per_msg`); a snapshot is the whole
/// metadata as JSON, the one message that grows with the cluster.
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 16 << 20;
/// Default per-peer send queue, in messages; full: the oldest is dropped.
pub const DEFAULT_PEER_QUEUE: usize = 1024;
/// Frames a peer may send before its handshake is accepted are at most this large.
const MAX_HELLO_BYTES: usize = 64 << 10;
/// Inbound connections held at once (voters reconnect, so a few per peer); more are closed at
/// once, so a stranger opening sockets cannot take a thread each without bound.
pub const MAX_INBOUND_CONNECTIONS: usize = 32;
/// First and last reconnect delay; doubled after each failed attempt.
pub const BACKOFF_MIN: Duration = Duration::from_millis(100);
pub const BACKOFF_MAX: Duration = Duration::from_secs(5);
/// An outbound connection with nothing to send sends a `PING` this often ...
const PING_INTERVAL: Duration = Duration::from_secs(2);
/// ... and an inbound one that hears nothing for this long is closed (the peer reconnects).
const IDLE_TIMEOUT: Duration = Duration::from_secs(30);
/// Connecting, the handshake's answer, and one write may take this long at most.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// Events from the sockets to the controller thread; readers wait when it is full (TCP then
/// pushes back on the peer).
pub const EVENT_QUEUE: usize = 4096;

const KIND_HELLO: u8 = 1;
const KIND_HELLO_OK: u8 = 2;
const KIND_HELLO_REFUSED: u8 = 3;
const KIND_RAFT: u8 = 4;
const KIND_FORWARD: u8 = 5;
const KIND_FORWARD_REPLY: u8 = 6;
const KIND_PING: u8 = 7;
/// A non-voter broker's call (register, heartbeat, proposal) and its answer.
const KIND_OBSERVER_CALL: u8 = 8;
const KIND_OBSERVER_REPLY: u8 = 9;
/// A non-voter asks for the metadata; the voter then sends a `METADATA` (the whole applied
/// metadata) at once and after every change, `PING`s in between.
const KIND_METADATA_SUBSCRIBE: u8 = 10;
const KIND_METADATA: u8 = 11;
/// How long a voter waits for the controller's answer to a non-voter's call.
const OBSERVER_CALL_TIMEOUT: Duration = Duration::from_secs(60);

/// Transport errors with one-line messages.
#[derive(thiserror::Error, Debug, Clone, PartialEq)]
pub enum TransportError {
    #[error("cannot listen on {addr} for the controller (--controller-listen): {why}")]
    Listen { addr: String, why: String },
    #[error(
        "controller message of {bytes} bytes to node {to} exceeds --controller-max-message-bytes \
         {max}; not sent"
    )]
    TooLarge { to: u64, bytes: usize, max: usize },
    #[error("node {0} is not a controller voter")]
    UnknownPeer(u64),
    #[error("cannot encode a controller message: {0}")]
    Encode(String),
}

/// Settings of the transport.
#[derive(Clone, Debug)]
pub struct TransportConfig {
    pub node_id: u64,
    /// Every voter as (node id, `host:port`), this node included.
    pub voters: Vec<(u64, String)>,
    /// Where to listen (`--controller-listen`).
    pub listen: String,
    pub max_message_bytes: usize,
    pub peer_queue: usize,
    /// Mutual TLS with every peer, both ways (`--inter-broker-tls-ca`); `None`: plaintext.
    pub tls: Option<crate::tls::PeerTls>,
}

/// The handshake, the first frame on a connection.
#[derive(Serialize, Deserialize, Debug, Clone)]
struct Hello {
    version: u32,
    node_id: u64,
    voters: Vec<(u64, String)>,
    /// Empty until this node knows it.
    cluster_id: String,
    /// A broker that is not a voter (`--process-roles broker`): it follows the metadata and
    /// sends calls, on connections of its own; never a raft peer.
    #[serde(default)]
    observer: bool,
}

/// An error as it crosses the wire in a `FORWARD_REPLY`.
#[derive(Serialize, Deserialize, Debug, Clone)]
enum WireError {
    Metadata { code: i16, message: String },
    Storage(String),
    NotLeader,
    NotController { node_id: u64, leader_id: u64 },
    Timeout,
    Stopped,
    Overloaded(String),
    Other(String),
}

impl From<&ControllerError> for WireError {
    fn from(e: &ControllerError) -> WireError {
        match e {
            ControllerError::Metadata(m) => WireError::Metadata {
                code: m.code.code(),
                message: m.message.clone(),
            },
            ControllerError::Storage(s) => WireError::Storage(s.clone()),
            ControllerError::NotLeader => WireError::NotLeader,
            ControllerError::NotController { node_id, leader_id } => WireError::NotController {
                node_id: *node_id,
                leader_id: *leader_id,
            },
            ControllerError::Timeout => WireError::Timeout,
            ControllerError::Stopped => WireError::Stopped,
            ControllerError::Overloaded(s) => WireError::Overloaded(s.clone()),
            other => WireError::Other(other.to_string()),
        }
    }
}

impl From<WireError> for ControllerError {
    fn from(e: WireError) -> ControllerError {
        match e {
            WireError::Metadata { code, message } => {
                ControllerError::Metadata(MetadataError::new(ErrorCode::from_code(code), message))
            }
            WireError::Storage(s) => ControllerError::Storage(s),
            WireError::NotLeader => ControllerError::NotLeader,
            WireError::NotController { node_id, leader_id } => {
                ControllerError::NotController { node_id, leader_id }
            }
            WireError::Timeout => ControllerError::Timeout,
            WireError::Stopped => ControllerError::Stopped,
            WireError::Overloaded(s) => ControllerError::Overloaded(s),
            WireError::Other(s) => ControllerError::Unreachable(s),
        }
    }
}

#[derive(Serialize, Deserialize)]
struct ForwardBody {
    id: u64,
    call: Call,
}

#[derive(Serialize, Deserialize)]
struct ForwardReplyBody {
    id: u64,
    /// Raft index of the entry (0 when refused before proposing).
    index: u64,
    result: Result<Applied, WireError>,
}

/// What the controller sends to a peer.
pub enum Outgoing {
    Raft(Message),
    /// A proposal this follower forwards to the leader; `id` is the follower's.
    Forward {
        id: u64,
        call: Call,
    },
    /// The leader's answer to a forwarded proposal.
    ForwardReply {
        id: u64,
        index: u64,
        result: Result<Applied, ControllerError>,
    },
}

/// What a message dropped unsent was, for the controller to account for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tag {
    Plain,
    /// A raft snapshot: reported failed, so raft sends another.
    Snapshot,
    /// A forwarded proposal (the follower's id): it never reached the leader, so it is safe
    /// to forward again.
    Forward(u64),
}

/// What the transport tells the controller thread.
pub enum NetEvent {
    /// A raft message from peer `msg.from` (checked against the connection's handshake).
    Raft(Message),
    /// Peer `from` forwards a proposal.
    Forward { from: u64, id: u64, call: Call },
    /// The leader `from` answers forwarded proposal `id`.
    ForwardReply {
        from: u64,
        id: u64,
        index: u64,
        result: Result<Applied, ControllerError>,
    },
    /// Connecting or writing to `peer` failed.
    Unreachable(u64),
    /// A snapshot to `to` was written out (true) or dropped (false).
    Snapshot { to: u64, delivered: bool },
    /// A message to `to` was dropped before it was sent (its connection failed).
    Dropped { to: u64, tag: Tag },
    /// `peer` refused this node's handshake; `reason` is its one-line answer.
    Refused { peer: u64, reason: String },
    /// A non-voter broker's call, answered on `reply`.
    ObserverCall {
        from: u64,
        call: Call,
        reply: flume::Sender<Result<Applied, ControllerError>>,
    },
    /// A non-voter subscribes to the metadata: every change from now on (the current first).
    Subscribe(
        flume::Sender<Arc<ClusterMetadata>>,
        flume::Receiver<Arc<ClusterMetadata>>,
    ),
}

struct Queued {
    bytes: Vec<u8>,
    tag: Tag,
}

struct QueueState {
    frames: VecDeque<Queued>,
    /// Dropped for a full queue since the last log line, and when that line was written.
    dropped: u64,
    last_drop_log: Option<Instant>,
}

/// A peer's bounded send queue and its writer thread's wake-up.
struct Peer {
    id: u64,
    addr: String,
    queue: Mutex<QueueState>,
    wake: Condvar,
    capacity: usize,
}

impl Peer {
    fn lock(&self) -> MutexGuard<'_, QueueState> {
        // Plain data behind the lock: a panic elsewhere leaves it consistent.
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }
}

struct Inner {
    cfg: TransportConfig,
    /// The voters list as compared in handshakes (sorted by id).
    voters: Vec<(u64, String)>,
    cluster_id: RwLock<String>,
    stopped: AtomicBool,
    events: flume::Sender<NetEvent>,
    /// Live inbound connections by peer id, to close an older one when the peer reconnects
    /// and all of them at stop.
    inbound: Mutex<HashMap<u64, Socket>>,
    inbound_count: AtomicUsize,
    /// Millisecond stamp of the last logged refusal or bad frame (at most one per second, so
    /// a stranger cannot flood the log).
    last_bad_log_ms: AtomicU64,
    started: Instant,
    readers: Mutex<Vec<JoinHandle<()>>>,
    /// Non-voter brokers' connections by a serial number, closed at stop.
    observers: Mutex<HashMap<u64, Socket>>,
    next_observer: AtomicU64,
    /// The controller's applied index, sent with each answer to a non-voter's call (it waits
    /// until its own metadata is that far).
    applied: AtomicU64,
}

/// The running transport: a listener thread, one writer thread per peer, one reader thread per
/// accepted connection.
pub struct Transport {
    inner: Arc<Inner>,
    peers: HashMap<u64, Arc<Peer>>,
    local_addr: SocketAddr,
    threads: Vec<JoinHandle<()>>,
}

impl Transport {
    /// Binds `cfg.listen` and starts the threads; events arrive on the returned receiver.
    pub fn start(
        cfg: TransportConfig,
    ) -> Result<(Transport, flume::Receiver<NetEvent>), TransportError> {
        let listener = TcpListener::bind(&cfg.listen).map_err(|e| TransportError::Listen {
            addr: cfg.listen.clone(),
            why: e.to_string(),
        })?;
        let local_addr = listener.local_addr().map_err(|e| TransportError::Listen {
            addr: cfg.listen.clone(),
            why: e.to_string(),
        })?;
        let (tx, rx) = flume::bounded(EVENT_QUEUE);
        let mut voters = cfg.voters.clone();
        voters.sort();
        let inner = Arc::new(Inner {
            voters,
            cluster_id: RwLock::new(String::new()),
            stopped: AtomicBool::new(false),
            events: tx,
            inbound: Mutex::new(HashMap::new()),
            inbound_count: AtomicUsize::new(0),
            last_bad_log_ms: AtomicU64::new(0),
            started: Instant::now(),
            readers: Mutex::new(Vec::new()),
            observers: Mutex::new(HashMap::new()),
            next_observer: AtomicU64::new(0),
            applied: AtomicU64::new(0),
            cfg,
        });
        let mut peers = HashMap::new();
        let mut threads = Vec::new();
        for (id, addr) in inner
            .cfg
            .voters
            .iter()
            .filter(|(id, _)| *id != inner.cfg.node_id)
        {
            let peer = Arc::new(Peer {
                id: *id,
                addr: addr.clone(),
                queue: Mutex::new(QueueState {
                    frames: VecDeque::new(),
                    dropped: 0,
                    last_drop_log: None,
                }),
                wake: Condvar::new(),
                capacity: inner.cfg.peer_queue.max(1),
            });
            peers.insert(*id, peer.clone());
            let inner = inner.clone();
            threads.push(spawn(&format!("rill-ctl-to-{id}"), move || {
                writer_loop(&inner, &peer)
            })?);
        }
        let acceptor_inner = inner.clone();
        threads.push(spawn("rill-ctl-accept", move || {
            accept_loop(&acceptor_inner, listener)
        })?);
        Ok((
            Transport {
                inner,
                peers,
                local_addr,
                threads,
            },
            rx,
        ))
    }

    /// The address the listener is bound to.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Tells the handshakes which cluster this node belongs to (once it knows).
    /// The controller's applied index (see `Inner::applied`).
    pub fn set_applied(&self, index: u64) {
        self.inner.applied.store(index, Ordering::Release);
    }

    pub fn set_cluster_id(&self, id: &str) {
        let mut c = self
            .inner
            .cluster_id
            .write()
            .unwrap_or_else(|e| e.into_inner());
        if *c != id {
            *c = id.to_string();
        }
    }

    /// Queues `msg` for `to` without blocking. Returns the messages dropped to make room (the
    /// oldest, when the queue is full): the caller accounts for them (see [`Tag`]).
    pub fn send(&self, to: u64, msg: Outgoing) -> Result<Vec<Tag>, TransportError> {
        let peer = self.peers.get(&to).ok_or(TransportError::UnknownPeer(to))?;
        let (kind, tag, body) = match msg {
            Outgoing::Raft(m) => {
                let tag = if m.get_msg_type() == MessageType::MsgSnapshot {
                    Tag::Snapshot
                } else {
                    Tag::Plain
                };
                let body = m
                    .write_to_bytes()
                    .map_err(|e| TransportError::Encode(e.to_string()))?;
                (KIND_RAFT, tag, body)
            }
            Outgoing::Forward { id, call } => (
                KIND_FORWARD,
                Tag::Forward(id),
                serde_json::to_vec(&ForwardBody { id, call })
                    .map_err(|e| TransportError::Encode(e.to_string()))?,
            ),
            Outgoing::ForwardReply { id, index, result } => (
                KIND_FORWARD_REPLY,
                Tag::Plain,
                serde_json::to_vec(&ForwardReplyBody {
                    id,
                    index,
                    result: result.map_err(|e| WireError::from(&e)),
                })
                .map_err(|e| TransportError::Encode(e.to_string()))?,
            ),
        };
        let max = self.inner.cfg.max_message_bytes;
        if body.len() + 1 > max {
            return Err(TransportError::TooLarge {
                to,
                bytes: body.len() + 1,
                max,
            });
        }
        let mut q = peer.lock();
        let mut dropped = Vec::new();
        while q.frames.len() >= peer.capacity {
            if let Some(old) = q.frames.pop_front() {
                dropped.push(old.tag);
                q.dropped += 1;
            }
        }
        if q.dropped > 0
            && q.last_drop_log
                .is_none_or(|t| t.elapsed() >= Duration::from_secs(10))
        {
            log::warn!(
                "controller: send queue to node {to} full ({} messages): dropped the oldest {} \
                 (raft resends)",
                peer.capacity,
                q.dropped
            );
            q.dropped = 0;
            q.last_drop_log = Some(Instant::now());
        }
        q.frames.push_back(Queued {
            bytes: frame(kind, &body),
            tag,
        });
        drop(q);
        peer.wake.notify_one();
        Ok(dropped)
    }

    /// Stops every thread and closes every connection.
    pub fn stop(mut self) {
        self.stop_inner();
    }

    fn stop_inner(&mut self) {
        if self.inner.stopped.swap(true, Ordering::SeqCst) {
            return;
        }
        for p in self.peers.values() {
            // Take the lock so a writer between its check and its wait cannot miss this.
            let _q = p.lock();
            p.wake.notify_all();
        }
        // Wake the acceptor with a connection of our own.
        let mut wake = self.local_addr;
        if wake.ip().is_unspecified() {
            wake.set_ip(match wake {
                SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
                SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
            });
        }
        let _ = TcpStream::connect_timeout(&wake, CONNECT_TIMEOUT);
        for (_, s) in self.inner.lock_inbound().drain() {
            let _ = s.shutdown(Shutdown::Both);
        }
        for (_, s) in self
            .inner
            .observers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain()
        {
            let _ = s.shutdown(Shutdown::Both);
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        let readers: Vec<_> =
            std::mem::take(&mut *self.inner.readers.lock().unwrap_or_else(|e| e.into_inner()));
        for t in readers {
            let _ = t.join();
        }
    }
}

impl Drop for Transport {
    fn drop(&mut self) {
        self.stop_inner();
    }
}

impl Inner {
    fn lock_inbound(&self) -> MutexGuard<'_, HashMap<u64, Socket>> {
        self.inbound.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn hello(&self) -> Hello {
        Hello {
            version: PROTOCOL_VERSION,
            node_id: self.cfg.node_id,
            voters: self.voters.clone(),
            cluster_id: self
                .cluster_id
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
            observer: false,
        }
    }

    /// Whether to log one more line about a bad peer (at most one a second).
    fn may_log_bad(&self) -> bool {
        let now = self.started.elapsed().as_millis() as u64 + 1000;
        let last = self.last_bad_log_ms.load(Ordering::Relaxed);
        now >= last + 1000
            && self
                .last_bad_log_ms
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
    }

    /// Why `hello` is refused, if it is.
    fn check_hello(&self, hello: &Hello) -> Result<(), String> {
        let me = self.cfg.node_id;
        if hello.version != PROTOCOL_VERSION {
            return Err(format!(
                "node {} speaks controller protocol version {}, node {me} version \
                 {PROTOCOL_VERSION}",
                hello.node_id, hello.version
            ));
        }
        let mut theirs = hello.voters.clone();
        theirs.sort();
        if theirs != self.voters {
            return Err(format!(
                "controller voters disagree: node {} was started with --controller-voters {}, \
                 node {me} with {}; every voter must be given the same list",
                hello.node_id,
                voters_text(&theirs),
                voters_text(&self.voters)
            ));
        }
        let voter = self.voters.iter().any(|(id, _)| *id == hello.node_id);
        if hello.observer && voter {
            return Err(format!(
                "node {} connected as a broker that is not a voter, but it is a voter of {} \
                 (two brokers with node id {}?)",
                hello.node_id,
                voters_text(&self.voters),
                hello.node_id
            ));
        }
        if !hello.observer && (hello.node_id == me || !voter) {
            return Err(format!(
                "node {} is not another voter of {} (this is node {me})",
                hello.node_id,
                voters_text(&self.voters)
            ));
        }
        let ours = self.cluster_id.read().unwrap_or_else(|e| e.into_inner());
        if !ours.is_empty() && !hello.cluster_id.is_empty() && *ours != hello.cluster_id {
            return Err(format!(
                "node {} belongs to cluster {}, node {me} to cluster {}: their data dirs come \
                 from different clusters",
                hello.node_id, hello.cluster_id, *ours
            ));
        }
        Ok(())
    }
}

/// `1@h:p,2@h:p` as given on the command line.
pub fn voters_text(voters: &[(u64, String)]) -> String {
    voters
        .iter()
        .map(|(id, a)| format!("{id}@{a}"))
        .collect::<Vec<_>>()
        .join(",")
}

fn spawn(name: &str, f: impl FnOnce() + Send + 'static) -> Result<JoinHandle<()>, TransportError> {
    std::thread::Builder::new()
        .name(name.into())
        .spawn(f)
        .map_err(|e| TransportError::Listen {
            addr: name.into(),
            why: format!("cannot start a thread: {e}"),
        })
}

fn frame(kind: u8, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(5 + body.len());
    out.extend_from_slice(&((body.len() + 1) as u32).to_be_bytes());
    out.push(kind);
    out.extend_from_slice(body);
    out
}

/// Why a frame could not be read.
#[derive(Debug)]
enum ReadError {
    Io(std::io::Error),
    /// The peer closed the connection between frames.
    Closed,
    Bad(String),
}

/// Reads one frame of at most `max` bytes (kind included). The body buffer grows with the
/// bytes actually received, so a length alone allocates nothing.
fn read_frame(s: &mut impl Read, max: usize) -> Result<(u8, Vec<u8>), ReadError> {
    let mut len = [0u8; 4];
    match s.read_exact(&mut len) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Err(ReadError::Closed),
        Err(e) => return Err(ReadError::Io(e)),
    }
    let len = u32::from_be_bytes(len) as usize;
    if len == 0 {
        return Err(ReadError::Bad("empty frame".into()));
    }
    if len > max {
        return Err(ReadError::Bad(format!(
            "frame of {len} bytes exceeds the limit of {max} (--controller-max-message-bytes)"
        )));
    }
    let mut buf = Vec::new();
    s.by_ref()
        .take(len as u64)
        .read_to_end(&mut buf)
        .map_err(ReadError::Io)?;
    if buf.len() != len {
        return Err(ReadError::Bad(format!(
            "connection closed inside a frame ({} of {len} bytes)",
            buf.len()
        )));
    }
    let kind = buf.remove(0);
    Ok((kind, buf))
}

fn accept_loop(inner: &Arc<Inner>, listener: TcpListener) {
    loop {
        let accepted = listener.accept();
        if inner.stopped.load(Ordering::SeqCst) {
            return;
        }
        let (stream, peer) = match accepted {
            Ok(x) => x,
            Err(e) => {
                // Out of descriptors and the like: back off instead of spinning.
                log::warn!("controller: accept failed: {e}");
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
        };
        if inner.inbound_count.fetch_add(1, Ordering::SeqCst) >= MAX_INBOUND_CONNECTIONS {
            inner.inbound_count.fetch_sub(1, Ordering::SeqCst);
            if inner.may_log_bad() {
                log::warn!(
                    "controller: refused a connection from {peer}: {MAX_INBOUND_CONNECTIONS} \
                     inbound connections already open"
                );
            }
            continue;
        }
        let reader_inner = inner.clone();
        let spawned = std::thread::Builder::new()
            .name("rill-ctl-from".into())
            .spawn(move || {
                serve_inbound(&reader_inner, stream, peer);
                reader_inner.inbound_count.fetch_sub(1, Ordering::SeqCst);
            });
        match spawned {
            Ok(h) => {
                let mut readers = inner.readers.lock().unwrap_or_else(|e| e.into_inner());
                readers.retain(|h| !h.is_finished());
                readers.push(h);
            }
            Err(e) => {
                inner.inbound_count.fetch_sub(1, Ordering::SeqCst);
                log::warn!("controller: cannot start a reader thread for {peer}: {e}");
            }
        }
    }
}

/// One accepted connection: the handshake, then frames until it closes or misbehaves.
fn serve_inbound(inner: &Arc<Inner>, tcp: TcpStream, addr: SocketAddr) {
    let _ = tcp.set_nodelay(true);
    let bad = |why: &str| {
        if inner.may_log_bad() {
            log::warn!("controller: closed the connection from {addr}: {why}");
        }
    };
    let mut s = match &inner.cfg.tls {
        None => Socket::plain(tcp),
        // A peer without a certificate of the inter-broker CAs gets no further.
        Some(tls) => match Socket::accept(tcp, tls.server.clone(), HANDSHAKE_TIMEOUT) {
            Ok(s) => s,
            Err(e) => return bad(&format!("TLS handshake failed: {e}")),
        },
    };
    let _ = s.set_read_timeout(Some(HANDSHAKE_TIMEOUT));
    let _ = s.set_write_timeout(Some(WRITE_TIMEOUT));
    let hello = match read_frame(&mut s, MAX_HELLO_BYTES) {
        Ok((KIND_HELLO, body)) => match serde_json::from_slice::<Hello>(&body) {
            Ok(h) => h,
            Err(e) => return bad(&format!("undecodable handshake: {e}")),
        },
        Ok((kind, _)) => return bad(&format!("frame kind {kind} before the handshake")),
        Err(ReadError::Closed) => return,
        Err(ReadError::Io(e)) => return bad(&format!("handshake: {e}")),
        Err(ReadError::Bad(why)) => return bad(&format!("handshake: {why}")),
    };
    if let Err(reason) = inner.check_hello(&hello) {
        // Both sides say it: here, and the peer when it reads the refusal.
        log::error!(
            "controller: refused node {} at {addr}: {reason}",
            hello.node_id
        );
        let _ = s.write_all(&frame(KIND_HELLO_REFUSED, reason.as_bytes()));
        return;
    }
    if s.write_all(&frame(KIND_HELLO_OK, &[])).is_err() {
        return;
    }
    let from = hello.node_id;
    if hello.observer {
        let serial = inner.next_observer.fetch_add(1, Ordering::Relaxed);
        if let Ok(clone) = s.try_clone() {
            let mut obs = inner.observers.lock().unwrap_or_else(|e| e.into_inner());
            if inner.stopped.load(Ordering::SeqCst) {
                return;
            }
            obs.insert(serial, clone);
        }
        serve_observer(inner, s, from);
        inner
            .observers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&serial);
        return;
    }
    if let Ok(clone) = s.try_clone() {
        if inner.stopped.load(Ordering::SeqCst) {
            return;
        }
        if let Some(old) = inner.lock_inbound().insert(from, clone) {
            // The peer reconnected: its old connection is dead to it.
            let _ = old.shutdown(Shutdown::Both);
        }
    }
    log::info!("controller: node {from} connected from {addr}");
    let _ = s.set_read_timeout(Some(IDLE_TIMEOUT));
    let max = inner.cfg.max_message_bytes;
    let why = loop {
        let (kind, body) = match read_frame(&mut s, max) {
            Ok(f) => f,
            Err(ReadError::Closed) => break None,
            Err(ReadError::Io(e)) => break Some(e.to_string()),
            Err(ReadError::Bad(why)) => break Some(why),
        };
        let event = match decode(kind, &body, from) {
            Ok(Some(ev)) => ev,
            Ok(None) => continue,
            Err(why) => break Some(why),
        };
        if inner.events.send(event).is_err() {
            break None; // the controller stopped
        }
    };
    if let Some(why) = why {
        if !inner.stopped.load(Ordering::SeqCst) {
            bad(&format!("node {from}: {why}"));
        }
    }
    let mut map = inner.lock_inbound();
    // Forget it unless a newer connection from the same peer took its place.
    if map
        .get(&from)
        .and_then(|c| c.peer_addr().ok())
        .is_none_or(|a| a == addr)
    {
        map.remove(&from);
    }
}

/// A non-voter broker's connection: calls answered one at a time, or (after a
/// `METADATA_SUBSCRIBE`) the metadata pushed on every change.
fn serve_observer(inner: &Arc<Inner>, mut s: Socket, from: u64) {
    let _ = s.set_read_timeout(Some(IDLE_TIMEOUT));
    let max = inner.cfg.max_message_bytes;
    loop {
        let (kind, body) = match read_frame(&mut s, max) {
            Ok(f) => f,
            Err(_) => return,
        };
        match kind {
            KIND_PING => {}
            KIND_OBSERVER_CALL => {
                let Ok(call) = serde_json::from_slice::<ObserverCallBody>(&body) else {
                    return;
                };
                let (reply, rx) = flume::bounded(1);
                let ev = NetEvent::ObserverCall {
                    from,
                    call: call.call,
                    reply,
                };
                if inner.events.send(ev).is_err() {
                    return;
                }
                let result = rx
                    .recv_timeout(OBSERVER_CALL_TIMEOUT)
                    .unwrap_or(Err(ControllerError::Timeout));
                let body = ForwardReplyBody {
                    id: call.id,
                    index: inner.applied.load(Ordering::Acquire),
                    result: result.map_err(|e| WireError::from(&e)),
                };
                let Ok(bytes) = serde_json::to_vec(&body) else {
                    return;
                };
                if s.write_all(&frame(KIND_OBSERVER_REPLY, &bytes)).is_err() {
                    return;
                }
            }
            KIND_METADATA_SUBSCRIBE => return push_metadata(inner, s),
            other => {
                if inner.may_log_bad() {
                    log::warn!("controller: broker {from} sent frame kind {other}; closed");
                }
                return;
            }
        }
    }
}

/// Sends the metadata to a subscribed non-voter on every change (the newest only, when it
/// reads slowly), a `PING` when nothing changed for a while; ends when a write fails.
fn push_metadata(inner: &Arc<Inner>, mut s: Socket) {
    let (tx, rx) = flume::bounded(1);
    if inner
        .events
        .send(NetEvent::Subscribe(tx, rx.clone()))
        .is_err()
    {
        return;
    }
    loop {
        let bytes = match rx.recv_timeout(PING_INTERVAL) {
            Ok(md) => match serde_json::to_vec(&*md) {
                Ok(b) => frame(KIND_METADATA, &b),
                Err(_) => return,
            },
            Err(flume::RecvTimeoutError::Timeout) => frame(KIND_PING, &[]),
            Err(flume::RecvTimeoutError::Disconnected) => return,
        };
        if inner.stopped.load(Ordering::SeqCst) || s.write_all(&bytes).is_err() {
            return;
        }
    }
}

#[derive(Serialize, Deserialize)]
struct ObserverCallBody {
    id: u64,
    call: Call,
}

/// A non-voter broker's side of the transport: connections to the voters.
#[derive(Clone, Debug)]
pub struct ObserverLink {
    pub node_id: u64,
    pub voters: Vec<(u64, String)>,
    pub max_message_bytes: usize,
    /// TLS to the voters (`--inter-broker-tls-ca`): the quorum's port asks for this broker's
    /// certificate.
    pub tls: Option<crate::tls::ClientTls>,
}

/// Why a non-voter could not reach a voter.
#[derive(Debug, Clone, PartialEq)]
pub enum ObserverError {
    /// Try another voter, or later.
    Failed(String),
    /// The voter refused this broker (voters lists that disagree, a node id that is a
    /// voter's): retrying cannot help.
    Refused(String),
}

impl ObserverLink {
    fn hello(&self) -> Hello {
        let mut voters = self.voters.clone();
        voters.sort();
        Hello {
            version: PROTOCOL_VERSION,
            node_id: self.node_id,
            voters,
            cluster_id: String::new(),
            observer: true,
        }
    }

    /// A connection to voter `addr`, handshake done.
    pub fn connect(&self, addr: &str) -> Result<Socket, ObserverError> {
        handshake(addr, &self.hello(), self.tls.as_ref()).map_err(|e| match e {
            ConnectError::Failed(why) => ObserverError::Failed(format!("{addr}: {why}")),
            ConnectError::Refused(why) => ObserverError::Refused(why),
        })
    }

    /// One call on `s`: the answer and the answering voter's applied index.
    pub fn call(
        &self,
        s: &mut Socket,
        id: u64,
        call: Call,
    ) -> Result<(Result<Applied, ControllerError>, u64), String> {
        let body = serde_json::to_vec(&ObserverCallBody { id, call }).map_err(|e| e.to_string())?;
        s.write_all(&frame(KIND_OBSERVER_CALL, &body))
            .map_err(|e| e.to_string())?;
        let _ = s.set_read_timeout(Some(OBSERVER_CALL_TIMEOUT + CONNECT_TIMEOUT));
        match read_frame(s, self.max_message_bytes) {
            Ok((KIND_OBSERVER_REPLY, body)) => {
                let r: ForwardReplyBody =
                    serde_json::from_slice(&body).map_err(|e| e.to_string())?;
                if r.id != id {
                    return Err(format!("answer to call {} while waiting for {id}", r.id));
                }
                Ok((r.result.map_err(ControllerError::from), r.index))
            }
            Ok((kind, _)) => Err(format!("unexpected frame kind {kind}")),
            Err(e) => Err(format!("{e:?}")),
        }
    }

    /// Subscribes `s` to the metadata.
    pub fn subscribe(&self, s: &mut Socket) -> Result<(), String> {
        let _ = s.set_read_timeout(Some(IDLE_TIMEOUT));
        s.write_all(&frame(KIND_METADATA_SUBSCRIBE, &[]))
            .map_err(|e| e.to_string())
    }

    /// The next frame on a subscribed connection: metadata, or `None` for a keepalive.
    pub fn next_metadata(&self, s: &mut Socket) -> Result<Option<ClusterMetadata>, String> {
        match read_frame(s, self.max_message_bytes) {
            Ok((KIND_PING, _)) => Ok(None),
            Ok((KIND_METADATA, body)) => serde_json::from_slice(&body)
                .map(Some)
                .map_err(|e| e.to_string()),
            Ok((kind, _)) => Err(format!("unexpected frame kind {kind}")),
            Err(e) => Err(format!("{e:?}")),
        }
    }
}

/// A frame from verified peer `from` as an event (`None`: nothing to deliver).
fn decode(kind: u8, body: &[u8], from: u64) -> Result<Option<NetEvent>, String> {
    match kind {
        KIND_RAFT => {
            // The protobuf decoder is fed network bytes: a panic in it must not take the
            // controller down.
            let parsed = std::panic::catch_unwind(|| Message::parse_from_bytes(body));
            let msg = match parsed {
                Ok(Ok(m)) => m,
                Ok(Err(e)) => return Err(format!("undecodable raft message: {e}")),
                Err(_) => return Err("undecodable raft message (decoder panicked)".into()),
            };
            if msg.from != from {
                return Err(format!(
                    "raft message claims to be from node {}, connection is from node {from}",
                    msg.from
                ));
            }
            Ok(Some(NetEvent::Raft(msg)))
        }
        KIND_FORWARD => {
            let f: ForwardBody = serde_json::from_slice(body)
                .map_err(|e| format!("undecodable forwarded proposal: {e}"))?;
            Ok(Some(NetEvent::Forward {
                from,
                id: f.id,
                call: f.call,
            }))
        }
        KIND_FORWARD_REPLY => {
            let r: ForwardReplyBody = serde_json::from_slice(body)
                .map_err(|e| format!("undecodable forwarded answer: {e}"))?;
            Ok(Some(NetEvent::ForwardReply {
                from,
                id: r.id,
                index: r.index,
                result: r.result.map_err(ControllerError::from),
            }))
        }
        KIND_PING => Ok(None),
        other => Err(format!("unexpected frame kind {other}")),
    }
}

/// Why an outbound connection could not be set up.
enum ConnectError {
    Failed(String),
    Refused(String),
}

fn connect(inner: &Inner, peer: &Peer) -> Result<Socket, ConnectError> {
    let tls = inner.cfg.tls.as_ref().map(|t| &t.client);
    handshake(&peer.addr, &inner.hello(), tls)
}

/// Connects to `addr` (with TLS, if `tls`) and sends `hello`; the stream once the peer
/// accepted it.
fn handshake(
    addr: &str,
    hello: &Hello,
    tls: Option<&crate::tls::ClientTls>,
) -> Result<Socket, ConnectError> {
    let fail = |e: &dyn std::fmt::Display| ConnectError::Failed(e.to_string());
    let addrs: Vec<SocketAddr> = addr.to_socket_addrs().map_err(|e| fail(&e))?.collect();
    // The host as written (a DNS name is what the peer's certificate must carry).
    let host = addr
        .rsplit_once(':')
        .map(|(h, _)| h.trim_start_matches('[').trim_end_matches(']'));
    let mut last = ConnectError::Failed(format!("{addr} resolves to no address"));
    for a in addrs {
        match Socket::connect_named(a, host, CONNECT_TIMEOUT, tls) {
            Ok(mut s) => {
                let _ = s.set_write_timeout(Some(WRITE_TIMEOUT));
                let _ = s.set_read_timeout(Some(HANDSHAKE_TIMEOUT));
                let hello = serde_json::to_vec(hello).map_err(|e| fail(&e))?;
                s.write_all(&frame(KIND_HELLO, &hello))
                    .map_err(|e| fail(&e))?;
                return match read_frame(&mut s, MAX_HELLO_BYTES) {
                    Ok((KIND_HELLO_OK, _)) => Ok(s),
                    Ok((KIND_HELLO_REFUSED, reason)) => Err(ConnectError::Refused(
                        String::from_utf8_lossy(&reason).into_owned(),
                    )),
                    Ok((kind, _)) => Err(ConnectError::Failed(format!(
                        "answered the handshake with frame kind {kind}"
                    ))),
                    Err(ReadError::Closed) => Err(ConnectError::Failed(
                        "closed the connection during the handshake".into(),
                    )),
                    Err(ReadError::Io(e)) => Err(fail(&e)),
                    Err(ReadError::Bad(why)) => Err(ConnectError::Failed(why)),
                };
            }
            Err(e) => last = fail(&e),
        }
    }
    Err(last)
}

/// Connects to `peer`, sends what its queue holds, reconnects after failures.
fn writer_loop(inner: &Inner, peer: &Peer) {
    let mut backoff = BACKOFF_MIN;
    let mut logged_down = false;
    while !inner.stopped.load(Ordering::SeqCst) {
        match connect(inner, peer) {
            Ok(stream) => {
                log::info!("controller: connected to node {} at {}", peer.id, peer.addr);
                backoff = BACKOFF_MIN;
                logged_down = false;
                let why = write_until_error(inner, peer, stream);
                if inner.stopped.load(Ordering::SeqCst) {
                    return;
                }
                log::warn!(
                    "controller: connection to node {} at {} failed: {why}; reconnecting",
                    peer.id,
                    peer.addr
                );
            }
            Err(ConnectError::Refused(reason)) => {
                log::error!(
                    "controller: node {} at {} refused this node: {reason}",
                    peer.id,
                    peer.addr
                );
                let _ = inner.events.send(NetEvent::Refused {
                    peer: peer.id,
                    reason,
                });
            }
            Err(ConnectError::Failed(why)) => {
                if !logged_down {
                    log::info!(
                        "controller: cannot reach node {} at {}: {why} (retrying up to every \
                         {BACKOFF_MAX:?})",
                        peer.id,
                        peer.addr
                    );
                    logged_down = true;
                }
            }
        }
        // Unsent messages are stale by the next connection: fail them now, so raft and the
        // forwarding follower know at once.
        fail_queued(inner, peer);
        let _ = inner.events.send(NetEvent::Unreachable(peer.id));
        let until = Instant::now() + backoff;
        let mut q = peer.lock();
        while !inner.stopped.load(Ordering::SeqCst) {
            let now = Instant::now();
            if now >= until {
                break;
            }
            q = peer
                .wake
                .wait_timeout(q, until - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        drop(q);
        backoff = (backoff * 2).min(BACKOFF_MAX);
    }
}

fn fail_queued(inner: &Inner, peer: &Peer) {
    let frames: Vec<Queued> = peer.lock().frames.drain(..).collect();
    for f in frames {
        let ev = match f.tag {
            Tag::Plain => continue,
            Tag::Snapshot => NetEvent::Snapshot {
                to: peer.id,
                delivered: false,
            },
            tag @ Tag::Forward(_) => NetEvent::Dropped { to: peer.id, tag },
        };
        let _ = inner.events.send(ev);
    }
}

/// Sends batches until a write fails or the transport stops; returns why it ended.
fn write_until_error(inner: &Inner, peer: &Peer, stream: Socket) -> String {
    let mut out = BufWriter::with_capacity(256 << 10, stream);
    loop {
        let batch: Vec<Queued> = {
            let mut q = peer.lock();
            if q.frames.is_empty() && !inner.stopped.load(Ordering::SeqCst) {
                q = peer
                    .wake
                    .wait_timeout(q, PING_INTERVAL)
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
            }
            if inner.stopped.load(Ordering::SeqCst) {
                return "stopped".into();
            }
            q.frames.drain(..).collect()
        };
        let result = if batch.is_empty() {
            out.write_all(&frame(KIND_PING, &[]))
                .and_then(|()| out.flush())
        } else {
            batch
                .iter()
                .try_for_each(|f| out.write_all(&f.bytes))
                .and_then(|()| out.flush())
        };
        let ok = result.is_ok();
        for f in &batch {
            let ev = match f.tag {
                Tag::Snapshot => NetEvent::Snapshot {
                    to: peer.id,
                    delivered: ok,
                },
                tag @ Tag::Forward(_) if !ok => NetEvent::Dropped { to: peer.id, tag },
                _ => continue,
            };
            let _ = inner.events.send(ev);
        }
        if let Err(e) = result {
            return e.to_string();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::Command;

    fn cfg(node: u64, voters: &[(u64, String)]) -> TransportConfig {
        TransportConfig {
            node_id: node,
            voters: voters.to_vec(),
            listen: voters
                .iter()
                .find(|(id, _)| *id == node)
                .map(|(_, a)| a.clone())
                .unwrap(),
            max_message_bytes: 1 << 20,
            peer_queue: 8,
            tls: None,
        }
    }

    /// A CA named `ca_name` and a certificate it signed for 127.0.0.1, as PEM files in
    /// `dir`: (CA, certificate, key).
    fn certs(
        dir: &std::path::Path,
        ca_name: &str,
    ) -> (std::path::PathBuf, std::path::PathBuf, std::path::PathBuf) {
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca.distinguished_name
            .push(rcgen::DnType::CommonName, ca_name);
        let ca_pem = ca.self_signed(&ca_key).unwrap().pem();
        let key = rcgen::KeyPair::generate().unwrap();
        let leaf = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()]).unwrap();
        let issuer = rcgen::Issuer::from_params(&ca, &ca_key);
        let cert = leaf.signed_by(&key, &issuer).unwrap();
        let files = [
            dir.join(format!("{ca_name}-ca.pem")),
            dir.join(format!("{ca_name}.pem")),
            dir.join(format!("{ca_name}.key")),
        ];
        std::fs::write(&files[0], ca_pem).unwrap();
        std::fs::write(&files[1], cert.pem()).unwrap();
        std::fs::write(&files[2], key.serialize_pem()).unwrap();
        let [a, b, c] = files;
        (a, b, c)
    }

    /// With `--inter-broker-tls-ca`, voters talk over mutual TLS; a plaintext node and one
    /// whose certificate another CA signed never get a connection accepted.
    #[test]
    fn a_tls_quorum_accepts_only_peers_with_a_certificate_of_its_cas() {
        let dir = tempfile::tempdir().unwrap();
        let (ca, cert, key) = certs(dir.path(), "quorum");
        let (_, other_cert, other_key) = certs(dir.path(), "stranger");
        let tls = crate::tls::PeerTls::load(&cert, &key, &ca, None).unwrap();
        let voters = vec![(1, free_addr()), (2, free_addr()), (3, free_addr())];
        let start = |node: u64, tls: Option<crate::tls::PeerTls>| {
            let mut c = cfg(node, &voters);
            c.tls = tls;
            Transport::start(c).unwrap()
        };
        let (t1, rx1) = start(1, Some(tls.clone()));
        let (t2, rx2) = start(2, Some(tls.clone()));
        let raft = |ev| match ev {
            NetEvent::Raft(m) => Some(m),
            _ => None,
        };
        let m = deliver(&t1, 2, || Outgoing::Raft(raft_msg(1, 2)), &rx2, raft);
        assert_eq!((m.from, m.to), (1, 2));
        let m = deliver(&t2, 1, || Outgoing::Raft(raft_msg(2, 1)), &rx1, raft);
        assert_eq!((m.from, m.to), (2, 1));
        // Node 3 in plaintext, then with a certificate the quorum's CAs did not sign (it
        // trusts them, so only node 1's check can refuse it): its connection attempts to
        // node 1 fail, so nothing it sends is delivered.
        let stranger = crate::tls::PeerTls {
            client: crate::tls::ClientTls::load(&ca, Some((&other_cert, &other_key)), None)
                .unwrap(),
            server: tls.server.clone(),
        };
        for tls3 in [None, Some(stranger)] {
            let (t3, rx3) = start(3, tls3);
            // Returns once node 3 reports node 1 unreachable.
            deliver(
                &t3,
                1,
                || Outgoing::Raft(raft_msg(3, 1)),
                &rx3,
                |ev| matches!(ev, NetEvent::Unreachable(1)).then_some(()),
            );
            t3.stop();
            while let Ok(ev) = rx1.try_recv() {
                if let NetEvent::Raft(m) = ev {
                    assert_ne!(m.from, 3, "a message of the refused node was delivered");
                }
            }
        }
    }

    fn free_addr() -> String {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().to_string()
    }

    fn raft_msg(from: u64, to: u64) -> Message {
        let mut m = Message::default();
        m.set_msg_type(MessageType::MsgHeartbeat);
        m.from = from;
        m.to = to;
        m.term = 7;
        m
    }

    fn next_raft(rx: &flume::Receiver<NetEvent>) -> Message {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            match rx.recv_deadline(deadline).expect("an event") {
                NetEvent::Raft(m) => return m,
                _ => continue,
            }
        }
    }

    /// Sends what `make` builds from `t` to `to` until `rx` yields an event `want` accepts:
    /// a message queued while a connection attempt fails is dropped (raft resends; so does
    /// this test).
    fn deliver<T>(
        t: &Transport,
        to: u64,
        make: impl Fn() -> Outgoing,
        rx: &flume::Receiver<NetEvent>,
        want: impl Fn(NetEvent) -> Option<T>,
    ) -> T {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            assert!(Instant::now() < deadline, "never delivered");
            t.send(to, make()).unwrap();
            let round = Instant::now() + Duration::from_millis(500);
            while let Ok(ev) = rx.recv_deadline(round) {
                if let Some(x) = want(ev) {
                    return x;
                }
            }
        }
    }

    #[test]
    fn two_nodes_exchange_raft_messages_and_forwards() {
        let voters = vec![(1, free_addr()), (2, free_addr()), (3, free_addr())];
        let (t1, rx1) = Transport::start(cfg(1, &voters)).unwrap();
        let (t2, rx2) = Transport::start(cfg(2, &voters)).unwrap();
        let raft = |ev| match ev {
            NetEvent::Raft(m) => Some(m),
            _ => None,
        };
        let m = deliver(&t1, 2, || Outgoing::Raft(raft_msg(1, 2)), &rx2, raft);
        assert_eq!((m.from, m.to, m.term), (1, 2, 7));
        let m = deliver(&t2, 1, || Outgoing::Raft(raft_msg(2, 1)), &rx1, raft);
        assert_eq!(m.from, 2);
        let forward = || Outgoing::Forward {
            id: 9,
            call: Call::Propose(Command::DeleteTopic { name: "t".into() }),
        };
        let (from, id, call) = deliver(&t2, 1, forward, &rx1, |ev| match ev {
            NetEvent::Forward { from, id, call } => Some((from, id, call)),
            _ => None,
        });
        assert_eq!((from, id), (2, 9));
        assert_eq!(
            call,
            Call::Propose(Command::DeleteTopic { name: "t".into() })
        );
        let reply = || Outgoing::ForwardReply {
            id: 9,
            index: 5,
            result: Err(ControllerError::NotController {
                node_id: 1,
                leader_id: 3,
            }),
        };
        let (id, index, result) = deliver(&t1, 2, reply, &rx2, |ev| match ev {
            NetEvent::ForwardReply {
                id, index, result, ..
            } => Some((id, index, result)),
            _ => None,
        });
        assert_eq!((id, index), (9, 5));
        assert_eq!(
            result,
            Err(ControllerError::NotController {
                node_id: 1,
                leader_id: 3
            })
        );
        t1.stop();
        t2.stop();
    }

    #[test]
    fn oversized_messages_are_refused_and_full_queues_drop_the_oldest() {
        let voters = vec![(1, free_addr()), (2, free_addr()), (3, free_addr())];
        let mut c = cfg(1, &voters);
        c.max_message_bytes = 64;
        let (t1, _rx1) = Transport::start(c).unwrap();
        let mut big = raft_msg(1, 2);
        big.set_context(vec![7u8; 100].into());
        let err = t1.send(2, Outgoing::Raft(big)).err().unwrap();
        assert!(
            matches!(err, TransportError::TooLarge { to: 2, .. }),
            "{err}"
        );
        assert!(err.to_string().contains("--controller-max-message-bytes"));
        assert_eq!(
            t1.send(9, Outgoing::Raft(raft_msg(1, 9))).err(),
            Some(TransportError::UnknownPeer(9))
        );
        // Node 3 is not running: its queue (8) fills, then drops the oldest. Some may be
        // failed by the writer meanwhile, so only "never more than 8 queued" is certain.
        let mut dropped = 0;
        for i in 0..20 {
            let mut s = raft_msg(1, 3);
            if i == 0 {
                s.set_msg_type(MessageType::MsgSnapshot);
            }
            dropped += t1.send(3, Outgoing::Raft(s)).unwrap().len();
        }
        assert!(t1.peers[&3].lock().frames.len() <= 8);
        let _ = dropped;
        t1.stop();
    }

    /// Connects to `addr` as a raw socket and returns what the node answers (if anything)
    /// before closing.
    fn raw(addr: &str, bytes: &[u8]) -> Vec<u8> {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        let _ = s.write_all(bytes);
        let _ = s.shutdown(Shutdown::Write);
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out);
        out
    }

    #[test]
    fn hostile_input_closes_the_connection_and_disagreeing_voters_are_refused() {
        let voters = vec![(1, free_addr()), (2, free_addr()), (3, free_addr())];
        let (t1, rx1) = Transport::start(cfg(1, &voters)).unwrap();
        let addr = voters[0].1.clone();
        // A huge length before any handshake, garbage, an empty frame, a raft frame first.
        assert!(raw(&addr, &[0xff, 0xff, 0xff, 0xff, 1]).is_empty());
        assert!(raw(&addr, b"GET / HTTP/1.1\r\n\r\n").is_empty());
        assert!(raw(&addr, &[0, 0, 0, 0]).is_empty());
        assert!(raw(&addr, &frame(KIND_RAFT, b"junk")).is_empty());
        assert!(raw(&addr, &frame(KIND_HELLO, b"{not json")).is_empty());

        // A hello with another voters list: refused with the reason.
        let mut other = voters.clone();
        other[2].1 = "127.0.0.1:1".into();
        let hello = Hello {
            version: PROTOCOL_VERSION,
            node_id: 2,
            voters: other,
            cluster_id: String::new(),
            observer: false,
        };
        let answer = raw(
            &addr,
            &frame(KIND_HELLO, &serde_json::to_vec(&hello).unwrap()),
        );
        assert_eq!(answer.get(4), Some(&KIND_HELLO_REFUSED), "{answer:?}");
        let reason = String::from_utf8_lossy(&answer[5..]).into_owned();
        assert!(reason.contains("voters disagree"), "{reason}");
        assert!(!reason.contains('\n'));

        // A good hello, then a raft message claiming another sender: closed, not delivered.
        let hello = Hello {
            version: PROTOCOL_VERSION,
            node_id: 2,
            voters: voters.clone(),
            cluster_id: String::new(),
            observer: false,
        };
        let mut bytes = frame(KIND_HELLO, &serde_json::to_vec(&hello).unwrap());
        bytes.extend(frame(KIND_RAFT, &raft_msg(3, 1).write_to_bytes().unwrap()));
        bytes.extend(frame(KIND_RAFT, &raft_msg(2, 1).write_to_bytes().unwrap()));
        let answer = raw(&addr, &bytes);
        assert_eq!(answer.get(4), Some(&KIND_HELLO_OK));
        // A good hello and a good message: delivered.
        let mut bytes = frame(KIND_HELLO, &serde_json::to_vec(&hello).unwrap());
        bytes.extend(frame(KIND_RAFT, &raft_msg(2, 1).write_to_bytes().unwrap()));
        raw(&addr, &bytes);
        let m = next_raft(&rx1);
        assert_eq!(m.from, 2, "the forged message was delivered");
        t1.stop();
    }
}
