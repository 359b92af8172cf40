//! The follower side on a shard, a client of the native protocol: one fetch session per (leader broker, leader shard) that
//! this shard's follower replicas follow, each on its own connection to that shard's port
//! (no cross-core hop on either side). A session drives the partitions' sans-IO
//! [`crate::replication::Follower`]s ([`Partition::follower_need`]): it cuts divergent
//! tails, asks OffsetForLeaderEpoch after a leader or epoch change, and fetches; fetched
//! batches are appended at their own offsets through the shard's group commit, and the next
//! fetch goes only once they are durable, so each fetch reports a fresh durable log end.
//! One request in flight per session; errors back off.

use std::cell::RefCell;
use std::collections::HashSet;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::{Duration, Instant};

use futures_lite::{AsyncReadExt, AsyncWriteExt};
use rill_shards::rt::TcpStream;

use crate::auth::session::{inter_broker_mechanism, SaslClient};
use crate::broker::Shard;
use crate::net::shared_stream::SharedStream;
use crate::net::tls_stream;
use crate::partition::replica::FollowerNeed;
use crate::partition::Partition;
use crate::protocol::frame::{
    check_frame_len, encode_meta, encode_request, DecodeMeta, EncodeMeta, FrameBuf, RequestHeader,
    ResponseFrame,
};
use crate::protocol::frame_pool::backed_buffer;
use crate::protocol::messages::{
    OffsetForLeaderEpochPartition, OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse,
    ReplicaFetchPartition, ReplicaFetchRequest, ReplicaFetchResponse, SaslAuthenticateRequest,
    SaslAuthenticateResponse, SaslHandshakeRequest, SaslHandshakeResponse, NO_LEADER_EPOCH,
};
use crate::protocol::{ApiKey, ErrorCode};
use crate::replication::{EpochEnd, NO_EPOCH};

/// How long a leader may hold a caught-up follower's fetch.
pub const REPLICA_FETCH_MAX_WAIT: Duration = Duration::from_millis(500);
/// At most this many bytes per partition in one fetch answer...
pub const REPLICA_FETCH_PARTITION_BYTES: u32 = 1 << 20;
/// ...and in all (also capped at half of `--max-frame-bytes`).
pub const REPLICA_FETCH_MAX_BYTES: u32 = 8 << 20;
/// A connection to the leader's shard not made within this is retried.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// An answer later than the leader's wait plus this is given up (the connection closed).
const RESPONSE_MARGIN: Duration = Duration::from_secs(10);
/// Backoff after an error, doubling up to the maximum.
const BACKOFF_MIN: Duration = Duration::from_millis(50);
const BACKOFF_MAX: Duration = Duration::from_secs(2);
/// With nothing to ask or fetch (waiting for metadata), look again after this.
const IDLE_POLL: Duration = Duration::from_millis(100);
/// The manager looks for new sessions at least this often (and on every metadata change).
const MANAGER_POLL: Duration = Duration::from_secs(1);

/// A fetch session's key: the leader broker and its shard that owns the partitions.
type SessionKey = (u32, u32);

/// Runs the shard's fetch sessions until the shard stops.
pub async fn run(shard: Rc<Shard>) {
    let sessions: Rc<RefCell<HashSet<SessionKey>>> = Rc::default();
    loop {
        let changed = shard.replication_changed.listen();
        for key in wanted(&shard) {
            if sessions.borrow_mut().insert(key) {
                let (s, set) = (shard.clone(), sessions.clone());
                rill_shards::rt::spawn_local(async move {
                    session(&s, key).await;
                    set.borrow_mut().remove(&key);
                })
                .detach();
            }
        }
        let deadline = Instant::now() + MANAGER_POLL;
        futures_lite::future::or(changed, shard.deadlines.sleep_until(deadline)).await;
    }
}

/// The sessions this shard's follower replicas need.
fn wanted(shard: &Shard) -> HashSet<SessionKey> {
    shard
        .all_partitions()
        .iter()
        .filter_map(|p| session_of(shard, p))
        .collect()
}

/// The session a follower partition belongs to (none while it has no leader).
fn session_of(shard: &Shard, p: &Partition) -> Option<SessionKey> {
    let (leader, _) = p.following()?;
    let md = shard.metadata.borrow();
    let info = md.topic(&p.topic)?.partitions.get(p.index as usize)?;
    (info.leader == leader && md.brokers.contains_key(&leader)).then_some((leader, info.shard))
}

async fn session(shard: &Rc<Shard>, key: SessionKey) {
    let mut conn: Option<Conn> = None;
    let mut backoff = BACKOFF_MIN;
    let mut logged = false;
    loop {
        let parts: Vec<Rc<Partition>> = shard
            .all_partitions()
            .into_iter()
            .filter(|p| session_of(shard, p) == Some(key))
            .collect();
        if parts.is_empty() {
            return;
        }
        match round(shard, key, &mut conn, &parts).await {
            Ok(()) => {
                backoff = BACKOFF_MIN;
                logged = false;
            }
            Err(e) => {
                // One line per outage, not one per retry.
                if !logged {
                    log::warn!(
                        "shard {}: replica fetch from broker {} shard {}: {e}",
                        shard.id,
                        key.0,
                        key.1
                    );
                    logged = true;
                }
                conn = None;
                shard.deadlines.sleep_until(Instant::now() + backoff).await;
                backoff = (backoff * 2).min(BACKOFF_MAX);
            }
        }
    }
}

/// One step of a session: truncations, then questions, else one fetch.
async fn round(
    shard: &Rc<Shard>,
    key: SessionKey,
    conn: &mut Option<Conn>,
    parts: &[Rc<Partition>],
) -> Result<(), String> {
    for p in parts {
        match p.follower_need() {
            FollowerNeed::StartAt(offset) => {
                p.wait_durable(&shard.deadlines).await;
                p.restart_replica_at(offset, &shard.cache)
                    .await
                    .map_err(|e| {
                        format!("{}-{}: starting over at {offset}: {e}", p.topic, p.index)
                    })?;
            }
            FollowerNeed::Truncate(offset) => {
                p.wait_durable(&shard.deadlines).await;
                p.truncate_replica(offset, &shard.cache)
                    .await
                    .map_err(|e| format!("{}-{}: truncating to {offset}: {e}", p.topic, p.index))?;
            }
            _ => {}
        }
    }
    if conn.is_none() {
        *conn = Some(Conn::connect(shard, leader_addr(shard, key)?).await?);
    }
    let Some(c) = conn.as_mut() else {
        return Err("no connection".into());
    };
    let asks: Vec<(Rc<Partition>, u32, u32)> = parts
        .iter()
        .filter_map(|p| match (p.follower_need(), p.following()) {
            (FollowerNeed::AskEpochEnd(e), Some((_, current))) => Some((p.clone(), e, current)),
            _ => None,
        })
        .collect();
    if !asks.is_empty() {
        return ask_epoch_ends(shard, c, &asks).await;
    }
    let fetches: Vec<_> = parts
        .iter()
        .filter_map(|p| match p.follower_need() {
            FollowerNeed::Fetch(f) => Some((p.clone(), f, p.following())),
            _ => None,
        })
        .collect();
    if fetches.is_empty() {
        shard
            .deadlines
            .sleep_until(Instant::now() + IDLE_POLL)
            .await;
        return Ok(());
    }
    let node = shard.cfg.node_id;
    let broker_epoch = shard
        .metadata
        .borrow()
        .members
        .get(&node)
        .map_or(0, |m| m.broker_epoch);
    let req = ReplicaFetchRequest {
        replica_id: node,
        broker_epoch,
        max_wait_ms: REPLICA_FETCH_MAX_WAIT.as_millis() as u32,
        max_bytes: REPLICA_FETCH_MAX_BYTES.min((shard.cfg.max_frame_bytes / 2) as u32),
        partitions: fetches
            .iter()
            .map(|(p, f, _)| ReplicaFetchPartition {
                topic: p.topic.to_string(),
                partition: p.index,
                leader_epoch: f.leader_epoch,
                fetch_offset: f.fetch_offset,
                log_end: f.log_end,
                max_bytes: REPLICA_FETCH_PARTITION_BYTES,
            })
            .collect(),
    };
    let (resp, frame): (ReplicaFetchResponse, ResponseFrame) = c
        .call(shard, ApiKey::ReplicaFetch, &req, REPLICA_FETCH_MAX_WAIT)
        .await?;
    if resp.partitions.len() != fetches.len() {
        return Err(format!(
            "answered {} partitions of {}",
            resp.partitions.len(),
            fetches.len()
        ));
    }
    let payload = frame.into_payload();
    let mut errors = 0;
    let mut appended = Vec::new();
    for ((p, _, asked_as), r) in fetches.iter().zip(&resp.partitions) {
        if p.following() != *asked_as {
            continue; // the role changed while the fetch was out
        }
        if r.error_code != 0 {
            errors += 1;
            let code = ErrorCode::from_code(r.error_code);
            log::debug!(
                "{}-{}: replica fetch refused: {}",
                p.topic,
                p.index,
                r.message
            );
            p.on_replica_fetch_error(code, r.log_start_offset);
            continue;
        }
        let (at, len) = (r.payload_offset as usize, r.payload_len as usize);
        let end = at
            .checked_add(len)
            .filter(|e| *e <= payload.len())
            .ok_or_else(|| format!("{}-{}: payload range out of bounds", p.topic, p.index))?;
        if len > 0 {
            let bytes = payload.slice(end - len..end);
            match p.append_replica(bytes, &shard.cache).await {
                Ok(_) => {
                    shard.group_commit.mark_dirty(p);
                    appended.push(p.clone());
                }
                Err((code, why)) => {
                    errors += 1;
                    log::warn!("{}-{}: replica append: {why} ({code:?})", p.topic, p.index);
                }
            }
        }
        p.on_leader_high_watermark(r.high_watermark);
        follow_log_start(p, r.log_start_offset).await;
    }
    // The next fetch reports these as durable (what the leader's high watermark counts; under
    // write caching, appended is enough).
    for p in &appended {
        p.wait_acknowledged(&shard.deadlines).await;
    }
    if errors == fetches.len() {
        return Err(format!(
            "every partition refused: {}",
            resp.partitions[0].message
        ));
    }
    Ok(())
}

/// The leader's log start moved (DeleteRecords, the offsets log's compaction): the follower
/// moves its own with it, as Kafka's followers do, up to its own high watermark (the rest
/// with a later fetch), so what the leader made unreadable or removed goes here too and a
/// follower taking over serves the same log.
async fn follow_log_start(p: &Partition, leader_log_start: u64) {
    let start = leader_log_start.min(p.high_watermark());
    if start <= p.log_start_offset() {
        return;
    }
    if let Err(e) = p.truncate_before(start).await {
        log::warn!(
            "{}-{}: moving the log start to the leader's {start}: {e}",
            p.topic,
            p.index
        );
    }
}

async fn ask_epoch_ends(
    shard: &Rc<Shard>,
    c: &mut Conn,
    asks: &[(Rc<Partition>, u32, u32)],
) -> Result<(), String> {
    let req = OffsetForLeaderEpochRequest {
        partitions: asks
            .iter()
            .map(|(p, e, current)| OffsetForLeaderEpochPartition {
                topic: p.topic.to_string(),
                partition: p.index,
                current_leader_epoch: i32::try_from(*current).unwrap_or(NO_LEADER_EPOCH),
                leader_epoch: i32::try_from(*e).unwrap_or(i32::MAX),
            })
            .collect(),
    };
    let (resp, _): (OffsetForLeaderEpochResponse, _) = c
        .call(shard, ApiKey::OffsetForLeaderEpoch, &req, Duration::ZERO)
        .await?;
    let mut refused = None;
    for ((p, asked, _), r) in asks.iter().zip(&resp.partitions) {
        if r.error_code != 0 {
            refused = Some(format!("{}-{}: {}", p.topic, p.index, r.message));
            continue;
        }
        let answer = EpochEnd {
            epoch: u32::try_from(r.leader_epoch).unwrap_or(NO_EPOCH),
            end_offset: u64::try_from(r.end_offset).unwrap_or(0),
        };
        p.on_epoch_end(*asked, answer);
    }
    match refused {
        // The leader may not have applied its leadership yet: back off and ask again.
        Some(why) if resp.partitions.iter().all(|r| r.error_code != 0) => Err(why),
        _ => Ok(()),
    }
}

/// The native address of the leader's shard: its base port plus the shard index.
pub(crate) fn leader_addr(
    shard: &Shard,
    (leader, lshard): SessionKey,
) -> Result<SocketAddr, String> {
    let md = shard.metadata.borrow();
    let b = md
        .brokers
        .get(&leader)
        .ok_or_else(|| format!("broker {leader} is not registered"))?;
    let port = u16::try_from(u32::from(b.port) + lshard)
        .map_err(|_| format!("broker {leader} shard {lshard}: port out of range"))?;
    let ip: std::net::IpAddr = b
        .host
        .parse()
        .map_err(|_| format!("broker {leader}: bad host {:?}", b.host))?;
    Ok(SocketAddr::new(ip, port))
}

/// A client connection from a shard to another broker's shard: one request at a time.
/// Plain, or TLS when the cluster's native listeners speak it (`--inter-broker-tls-ca`).
pub(crate) struct Conn {
    stream: SharedStream,
    correlation: u32,
}

impl Conn {
    /// Connects, runs the TLS handshake if any and authenticates if the cluster does, all
    /// within [`CONNECT_TIMEOUT`].
    pub(crate) async fn connect(shard: &Shard, addr: SocketAddr) -> Result<Conn, String> {
        let deadline = Instant::now() + CONNECT_TIMEOUT;
        let dial = async {
            let tcp = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
            let _ = tcp.set_nodelay(true);
            match &shard.cfg.inter_broker_tls {
                None => Ok(SharedStream::new(tcp)),
                Some(peer) => {
                    let tls = &peer.client;
                    tls_stream::connect(tcp, tls.config.clone(), tls.name_for(addr))
                        .await
                        .map(SharedStream::tls)
                        .map_err(|e| format!("TLS: {e}"))
                }
            }
        };
        let stream = futures_lite::future::or(async { Some(dial.await) }, async {
            shard.deadlines.sleep_until(deadline).await;
            None
        })
        .await
        .ok_or_else(|| format!("connecting to {addr}: timed out"))?
        .map_err(|e| format!("connecting to {addr}: {e}"))?;
        let mut conn = Conn {
            stream,
            correlation: 0,
        };
        // The cluster's native listeners authenticate: so does this broker, as the
        // inter-broker user.
        if let Some((user, password)) = &shard.cfg.inter_broker_sasl {
            if let Some(mechanism) = inter_broker_mechanism(&shard.cfg.native_sasl_mechanisms) {
                conn.authenticate(shard, mechanism, user, password)
                    .await
                    .map_err(|e| format!("authenticating to {addr} as {user:?}: {e}"))?;
            }
        }
        Ok(conn)
    }

    /// The SASL exchange (as the client library's `Connection` runs it).
    async fn authenticate(
        &mut self,
        shard: &Shard,
        mechanism: &str,
        user: &str,
        password: &str,
    ) -> Result<(), String> {
        let mut client = SaslClient::new(mechanism, user, password)
            .ok_or_else(|| format!("unknown SASL mechanism {mechanism}"))?;
        let req = SaslHandshakeRequest {
            mechanism: mechanism.to_string(),
        };
        let (r, _): (SaslHandshakeResponse, _) = self
            .call(shard, ApiKey::SaslHandshake, &req, Duration::ZERO)
            .await?;
        if r.error_code != 0 {
            return Err(format!(
                "SaslHandshake {mechanism}: {} (the broker offers {:?})",
                ErrorCode::from_code(r.error_code).name(),
                r.mechanisms
            ));
        }
        let mut message = client.first();
        // PLAIN takes one round, SCRAM two.
        for _ in 0..3 {
            let req = SaslAuthenticateRequest {
                auth_bytes: message,
            };
            let (r, _): (SaslAuthenticateResponse, _) = self
                .call(shard, ApiKey::SaslAuthenticate, &req, Duration::ZERO)
                .await?;
            if r.error_code != 0 {
                return Err(format!(
                    "{}: {}",
                    ErrorCode::from_code(r.error_code).name(),
                    r.message
                ));
            }
            match client.next(&r.auth_bytes).map_err(|e| e.to_string())? {
                Some(next) => message = next,
                None => return Ok(()),
            }
        }
        Err("the broker asked for more SASL rounds than the mechanism has".into())
    }

    /// Sends one request and reads its answer, within `wait` (the leader's long poll) plus
    /// a margin.
    pub(crate) async fn call<Req, Resp>(
        &mut self,
        shard: &Shard,
        api: ApiKey,
        req: &Req,
        wait: Duration,
    ) -> Result<(Resp, ResponseFrame), String>
    where
        Req: EncodeMeta,
        Resp: DecodeMeta,
    {
        self.call_key(shard, api as u16, api.name(), req, wait)
            .await
    }

    /// [`Conn::call`] by the API's wire number (`name` for errors): for an API the peer may
    /// serve before this build names it.
    pub(crate) async fn call_key<Req, Resp>(
        &mut self,
        shard: &Shard,
        api_key: u16,
        api: &str,
        req: &Req,
        wait: Duration,
    ) -> Result<(Resp, ResponseFrame), String>
    where
        Req: EncodeMeta,
        Resp: DecodeMeta,
    {
        self.correlation = self.correlation.wrapping_add(1);
        let header = RequestHeader {
            api_key,
            api_version: 0,
            correlation_id: self.correlation,
            client_id: format!("replica-{}", shard.cfg.node_id),
        };
        let meta = encode_meta(req).map_err(|e| e.to_string())?;
        let wire = encode_request(&header, &meta, &[]).map_err(|e| e.to_string())?;
        let max = shard.cfg.max_frame_bytes;
        let io = async {
            self.stream
                .write_all(&wire)
                .await
                .map_err(|e| format!("sending: {e}"))?;
            // A TLS session may hold sealed bytes until flushed.
            self.stream
                .flush()
                .await
                .map_err(|e| format!("sending: {e}"))?;
            let mut len = [0u8; 4];
            self.stream
                .read_exact(&mut len)
                .await
                .map_err(|e| format!("reading: {e}"))?;
            let len = check_frame_len(u32::from_le_bytes(len), max).map_err(|e| e.to_string())?;
            // Its batches stay in the follower's tail cache: fresh memory until that is
            // full, backed at once (in the broker's frame arena) as a request frame is.
            let mut buf = backed_buffer(len);
            self.stream
                .read_exact(&mut buf)
                .await
                .map_err(|e| format!("reading: {e}"))?;
            Ok::<FrameBuf, String>(buf)
        };
        let deadline = Instant::now() + wait + RESPONSE_MARGIN;
        let buf = futures_lite::future::or(async { Some(io.await) }, async {
            shard.deadlines.sleep_until(deadline).await;
            None
        })
        .await
        .ok_or_else(|| format!("{api}: no answer in time"))??;
        let frame = ResponseFrame::parse(buf).map_err(|e| e.to_string())?;
        if frame.correlation_id != self.correlation {
            return Err(format!("{api}: answer to another request"));
        }
        if frame.error != ErrorCode::None {
            let why = frame
                .decode_meta::<crate::protocol::messages::ErrorBody>()
                .map(|b| b.message)
                .unwrap_or_default();
            return Err(format!("{api} refused: {:?} {why}", frame.error));
        }
        let resp = frame.decode_meta::<Resp>().map_err(|e| e.to_string())?;
        Ok((resp, frame))
    }
}
