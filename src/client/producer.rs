//! The producer: per-partition accumulators with the latency/throughput dial (`linger`,
//! `batch_bytes`), a sender thread that ships ready batches over pipelined connections, retries
//! with backoff inside a delivery timeout, bounded buffer memory with back-pressure, and a
//! delivery report per record.
//!
//! Ordering: a batch stays in its partition's queue, in send order, until it is answered; one
//! that fails with a retriable error is sent again from where it is, so per-key order holds
//! across retries and broker restarts. Without idempotence a partition has one request in
//! flight. With it, up to `max_in_flight` requests of together at most 5 batches (what the
//! broker remembers per producer): the broker refuses a batch whose predecessor is missing
//! (OUT_OF_ORDER_SEQUENCE_NUMBER), so when an earlier request fails the later ones come back
//! refused or stored, and nothing goes out again until every request of the partition has
//! been answered; then the queue is resent from its first unanswered batch, each retry
//! carrying exactly the batches of one earlier request (a duplicate's offsets and a new
//! batch's are not contiguous).
//!
//! Idempotence (on by default, `idempotence`; with acks 1 or all): the producer gets a
//! producer id at start, and numbers each partition's batches with sequences when it first
//! sends them; a retry sends the same bytes, so a batch whose acknowledgement was lost is
//! answered by the broker with the offsets it got the first time instead of being stored
//! again. A numbered batch that fails for good (or a broker that lost the producer's state:
//! OUT_OF_ORDER_SEQUENCE_NUMBER, UNKNOWN_PRODUCER_ID, INVALID_PRODUCER_EPOCH for the first
//! unanswered batch of its partition) makes the producer bump its epoch (KIP-360) once nothing
//! is in flight, and number its batches from 0 again. Several partitions (of one shard) share a request, and
//! `max_in_flight` requests may be pipelined on a connection.

use rustc_hash::FxHashMap;
use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use event_listener::{Event, EventListener, Listener};

use super::batch_buffers::{BatchBuffers, BatchBytes};
use super::pipeline::{Completion, PayloadChunk, PipelinedConnection};
use super::transactional::Txn;
use super::{Client, ClientConfig, ClientError, MetadataCache};
use crate::batch::BatchBuilder;
use crate::partitioner::{keyed_partition, sticky_partition};
use crate::protocol::frame::encode_meta;
use crate::protocol::messages::{ProducePartition, ProduceRequest, ProduceResponse};
use crate::protocol::{ApiKey, ErrorCode, ResponseFrame};

/// The durability a producer asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Acks {
    /// Fire and forget: no response, no offset in the delivery report.
    None,
    /// The leader stored it as durably as its `--fsync` promises.
    Leader,
    /// Every in-sync replica has it (the leader alone until replication exists).
    All,
}

impl Acks {
    /// The `acks` value sent in a produce request: 0, 1 or -1.
    pub fn wire(self) -> i16 {
        match self {
            Acks::None => 0,
            Acks::Leader => 1,
            Acks::All => -1,
        }
    }
}

impl std::str::FromStr for Acks {
    type Err = String;
    fn from_str(s: &str) -> Result<Acks, String> {
        match s {
            "0" => Ok(Acks::None),
            "1" => Ok(Acks::Leader),
            "all" | "-1" => Ok(Acks::All),
            _ => Err(format!("bad acks '{s}': expected 0, 1 or all")),
        }
    }
}

/// Producer settings (Kafka's names where they exist).
#[derive(Debug, Clone)]
pub struct ProducerConfig {
    /// How many replicas must store a batch before it is acknowledged (`acks`).
    pub acks: Acks,
    /// How long a batch waits for more records before it is sent (`linger.ms`).
    pub linger: Duration,
    /// A batch is sent once its records reach this many bytes (`batch.size`).
    pub batch_bytes: usize,
    /// Requests awaiting an answer per connection (`max.in.flight.requests.per.connection`).
    pub max_in_flight: usize,
    /// Bytes of one partition's batches a produce request carries at most (always at least
    /// one batch; default 1 MiB). Larger requests cost fewer round trips; smaller ones wait
    /// less behind each other on a busy shard.
    pub partition_request_bytes: usize,
    /// Retries of a retriable failure, within `delivery_timeout`.
    pub retries: u32,
    /// How long a failed batch waits before it is retried (`retry.backoff.ms`).
    pub retry_backoff: Duration,
    /// A record fails if not acknowledged this long after `send` (`delivery.timeout.ms`).
    pub delivery_timeout: Duration,
    /// How long a produce request may wait for its answer (`request.timeout.ms`).
    pub request_timeout: Duration,
    /// Bytes of records buffered before `send` blocks (`buffer.memory`).
    pub buffer_memory: usize,
    /// How long `send` blocks for buffer memory or metadata before failing (`max.block.ms`).
    pub max_block: Duration,
    /// Metadata is refreshed at least this often, so new partitions and moved leaders are
    /// seen without an error first (`metadata.max.age.ms`).
    pub metadata_max_age: Duration,
    /// Producer id and sequences, so retries are never stored twice (`enable.idempotence`;
    /// applies with acks 1 and all).
    pub idempotence: bool,
    /// Told of every produce request the broker answers (none by default): a per-request
    /// latency for benchmarks, at no per-record cost.
    pub request_observer: Option<RequestObserver>,
}

/// One produce request's round trip, as a [`RequestObserver`] sees it.
#[derive(Debug, Clone, Copy)]
pub struct RequestTiming {
    /// When the connection's writer started writing the request to the socket (after any wait
    /// for an in-flight slot).
    pub written: Instant,
    /// When its response had been read, before the delivery reports were settled.
    pub answered: Instant,
    /// Batches the request carried (of one or more partitions).
    pub batches: usize,
}

/// Called once per produce request that got a response (whatever the response says), on the
/// connection's reader thread: keep it short. Not called with acks=0 (the broker does not
/// answer) nor for a request that failed without a response (its connection broke).
#[derive(Clone)]
pub struct RequestObserver(pub Arc<dyn Fn(RequestTiming) + Send + Sync>);

impl std::fmt::Debug for RequestObserver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RequestObserver(..)")
    }
}

impl Default for ProducerConfig {
    fn default() -> Self {
        ProducerConfig {
            acks: Acks::All,
            linger: Duration::from_millis(5),
            batch_bytes: 256 << 10,
            max_in_flight: 5,
            partition_request_bytes: DEFAULT_PARTITION_REQUEST_BYTES,
            retries: u32::MAX,
            retry_backoff: Duration::from_millis(100),
            delivery_timeout: Duration::from_secs(120),
            request_timeout: Duration::from_secs(30),
            buffer_memory: 64 << 20,
            max_block: Duration::from_secs(60),
            metadata_max_age: Duration::from_secs(60),
            idempotence: true,
            request_observer: None,
        }
    }
}

/// One record to send. Build with [`ProducerRecord::new`] and the setters.
#[derive(Debug, Clone, Copy)]
pub struct ProducerRecord<'a> {
    /// The topic to send to.
    pub topic: &'a str,
    /// The partition to send to; `None` lets the partitioner choose.
    pub partition: Option<u32>,
    /// The record's key; without a partition, its murmur2 hash picks one (as in Kafka).
    pub key: Option<&'a [u8]>,
    /// The record's value (its payload); `None` sends a null value (a Kafka tombstone), which
    /// an empty value is not.
    pub value: Option<&'a [u8]>,
    /// Headers as (name, value) pairs, as Kafka headers: a list, sent in this order, repeated
    /// names included; a value `None` is a null header value.
    pub headers: &'a [(String, Option<Vec<u8>>)],
    /// Tags: string labels stored beside the payload.
    pub tags: &'a [String],
    /// Milliseconds since the epoch; now when `None`.
    pub timestamp_ms: Option<i64>,
}

impl<'a> ProducerRecord<'a> {
    /// Adds this record to `b` with `timestamp_ms` (its own, or the time of sending).
    pub(crate) fn push_into(&self, b: &mut BatchBuilder, timestamp_ms: i64) {
        b.push_record(
            timestamp_ms,
            self.key,
            self.value,
            self.headers.iter().map(|(k, v)| (k.as_str(), v.as_deref())),
            self.tags,
        );
    }

    /// A record of `value` for `topic`, with no key, partition, headers, tags or timestamp.
    pub fn new(topic: &'a str, value: &'a [u8]) -> Self {
        ProducerRecord {
            topic,
            partition: None,
            key: None,
            value: Some(value),
            headers: &[],
            tags: &[],
            timestamp_ms: None,
        }
    }
    /// A tombstone for `key` in `topic`: a record with a null value, which compacted topics
    /// and changelog readers take as "deleted".
    pub fn tombstone(topic: &'a str, key: &'a [u8]) -> Self {
        let mut r = ProducerRecord::new(topic, &[]).key(key);
        r.value = None;
        r
    }
    /// Sets the key.
    pub fn key(mut self, key: &'a [u8]) -> Self {
        self.key = Some(key);
        self
    }
    /// Sends to this partition instead of letting the partitioner choose.
    pub fn partition(mut self, p: u32) -> Self {
        self.partition = Some(p);
        self
    }
    /// Sets the headers.
    pub fn headers(mut self, h: &'a [(String, Option<Vec<u8>>)]) -> Self {
        self.headers = h;
        self
    }
    /// Sets the tags.
    pub fn tags(mut self, t: &'a [String]) -> Self {
        self.tags = t;
        self
    }
    /// Sets the timestamp (milliseconds since the epoch) instead of the send time.
    pub fn timestamp(mut self, ms: i64) -> Self {
        self.timestamp_ms = Some(ms);
        self
    }
    fn size(&self) -> usize {
        self.key.map_or(0, <[u8]>::len)
            + self.value.map_or(0, <[u8]>::len)
            + self
                .headers
                .iter()
                .map(|(k, v)| k.len() + v.as_ref().map_or(0, Vec::len))
                .sum::<usize>()
            + self.tags.iter().map(String::len).sum::<usize>()
            + 32
    }
}

/// Where a record landed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordMetadata {
    /// The topic the record was sent to.
    pub topic: Arc<str>,
    /// The partition the record was sent to.
    pub partition: u32,
    /// `None` with acks=0 (the broker does not answer).
    pub offset: Option<u64>,
    /// The record's own timestamp.
    pub timestamp_ms: i64,
    /// When the broker appended it (-1 with acks=0).
    pub append_time_ms: i64,
}

/// A custom partitioner: (topic, key, partition count) -> partition, or `None` for the default.
pub type Partitioner = Arc<dyn Fn(&str, Option<&[u8]>, u32) -> Option<u32> + Send + Sync>;

#[derive(Debug, Clone)]
struct BatchAck {
    base_offset: Option<u64>,
    timestamp_ms: i64,
}

#[derive(Debug, Clone)]
struct DeliveryFailure {
    code: Option<ErrorCode>,
    message: String,
}

/// The outcome of one batch, shared by the delivery reports of its records.
struct BatchSlot {
    /// Where the batch's records go: kept here once per batch, not in each record's
    /// [`DeliveryFuture`] (an `Arc<str>` allocated per record and freed on the thread that
    /// took the report was a tenth of a producing thread's time). The batch's own copy: the
    /// reports' clones of it do not contend with the producing thread's use of its name.
    topic: Arc<str>,
    partition: u32,
    result: OnceLock<Result<BatchAck, DeliveryFailure>>,
    /// When the result was settled (set before it).
    settled_at: OnceLock<Instant>,
    done: Event,
}

impl BatchSlot {
    fn new(topic: Arc<str>, partition: u32) -> Arc<BatchSlot> {
        Arc::new(BatchSlot {
            topic,
            partition,
            result: OnceLock::new(),
            settled_at: OnceLock::new(),
            done: Event::new(),
        })
    }
    fn complete(&self, r: Result<BatchAck, DeliveryFailure>) {
        let _ = self.settled_at.set(Instant::now());
        let _ = self.result.set(r);
        self.done.notify(usize::MAX);
    }
}

/// The delivery report of one record: wait for it blocking ([`wait`](Self::wait)) or `.await` it.
pub struct DeliveryFuture {
    slot: Arc<BatchSlot>,
    index: u32,
    timestamp_ms: i64,
    listener: Option<EventListener>,
}

impl DeliveryFuture {
    fn resolve(
        &self,
        r: &Result<BatchAck, DeliveryFailure>,
    ) -> Result<RecordMetadata, ClientError> {
        match r {
            Ok(ack) => Ok(RecordMetadata {
                topic: self.slot.topic.clone(),
                partition: self.slot.partition,
                offset: ack.base_offset.map(|b| b + u64::from(self.index)),
                timestamp_ms: self.timestamp_ms,
                append_time_ms: ack.timestamp_ms,
            }),
            Err(f) => Err(match f.code {
                Some(code) => ClientError::broker(code, f.message.clone()),
                None => ClientError::Delivery(f.message.clone()),
            }),
        }
    }

    /// The report, if it is in.
    pub fn try_get(&self) -> Option<Result<RecordMetadata, ClientError>> {
        self.slot.result.get().map(|r| self.resolve(r))
    }

    /// [`wait`](Self::wait), and when the report was settled (the batch acknowledged or
    /// failed): a latency measured to it does not depend on when the report is looked at.
    pub fn wait_settled(self) -> (Result<RecordMetadata, ClientError>, Instant) {
        let result = self.wait_here();
        // Set before the result that `wait_here` returned.
        let at = self
            .slot
            .settled_at
            .get()
            .copied()
            .unwrap_or_else(Instant::now);
        (result, at)
    }

    /// Blocks until the record is acknowledged or failed.
    pub fn wait(self) -> Result<RecordMetadata, ClientError> {
        self.wait_here()
    }

    fn wait_here(&self) -> Result<RecordMetadata, ClientError> {
        loop {
            if let Some(r) = self.try_get() {
                return r;
            }
            let listener = self.slot.done.listen();
            if let Some(r) = self.try_get() {
                return r;
            }
            listener.wait();
        }
    }
}

impl std::future::Future for DeliveryFuture {
    type Output = Result<RecordMetadata, ClientError>;
    fn poll(mut self: std::pin::Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        loop {
            if let Some(r) = self.try_get() {
                return Poll::Ready(r);
            }
            match self.listener.as_mut() {
                None => self.listener = Some(self.slot.done.listen()),
                Some(l) => match std::pin::Pin::new(l).poll(cx) {
                    Poll::Ready(()) => self.listener = None,
                    Poll::Pending => {
                        return match self.try_get() {
                            Some(r) => Poll::Ready(r),
                            None => Poll::Pending,
                        }
                    }
                },
            }
        }
    }
}

struct OpenBatch {
    builder: BatchBuilder,
    /// Where its buffer goes back to once the sealed batch is dropped.
    buffers: Arc<BatchBuffers>,
    slot: Arc<BatchSlot>,
    created: Instant,
    bytes: usize,
}

impl OpenBatch {
    /// Encodes the batch for sending; on failure hands back what its records need to fail.
    /// Whether a record of `size` bytes may join this batch: an empty batch takes any record.
    fn fits(&self, size: usize, cfg: &ProducerConfig) -> bool {
        self.builder.is_empty() || self.builder.estimated_bytes() + size <= cfg.batch_bytes
    }

    fn seal(mut self, now: Instant) -> Result<SealedBatch, (Arc<BatchSlot>, usize, String)> {
        let records = self.builder.len() as u32;
        match self.builder.build() {
            Ok(encoded) => Ok(SealedBatch {
                id: NEXT_BATCH_ID.fetch_add(1, Ordering::Relaxed),
                request: 0,
                in_flight: false,
                acked: false,
                maybe_stored: false,
                refused: false,
                encoded: Arc::new(BatchBytes::new(encoded, self.buffers)),
                records,
                slot: self.slot,
                created: self.created,
                bytes: self.bytes,
                attempts: 0,
                not_before: now,
                last_error: None,
                sequence: None,
            }),
            Err(e) => Err((self.slot, self.bytes, e.to_string())),
        }
    }
}

/// Counts the producers made in this process (each starts its sticky choices elsewhere).
static NEXT_PRODUCER: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// Names sealed batches (unique in the process): a request's answer finds its batches by it.
static NEXT_BATCH_ID: AtomicU64 = AtomicU64::new(1);

struct SealedBatch {
    id: u64,
    /// The request that first carried it under its current numbering: a retry carries
    /// exactly the batches of one such request.
    request: u64,
    /// Sent and not answered yet.
    in_flight: bool,
    /// Answered and reported, kept only while an earlier batch of its partition is not:
    /// it still counts in what the broker remembers after that one (see `next_to_send`).
    acked: bool,
    /// Sent under its current numbering and not refused by the broker's sequence check: the
    /// broker may hold it, so it is never numbered again (that would store it twice).
    maybe_stored: bool,
    /// Refused by the broker's sequence check at its last attempt: not stored, and no batch
    /// of its partition after it can be.
    refused: bool,
    encoded: Arc<BatchBytes>,
    records: u32,
    slot: Arc<BatchSlot>,
    created: Instant,
    bytes: usize,
    attempts: u32,
    not_before: Instant,
    /// Why the last attempt failed, named when the delivery timeout ends the retries.
    last_error: Option<String>,
    /// The (epoch, base sequence) it was sent with (idempotence): kept by its retries.
    sequence: Option<(i16, i32)>,
}

#[derive(Default)]
struct PartitionQueue {
    open: Option<OpenBatch>,
    /// Sealed batches in send order, those in flight included (they leave when answered;
    /// one answered behind an unanswered one stays, `acked`, until that one is).
    ready: VecDeque<SealedBatch>,
    /// Batches of `ready` in flight, and the requests carrying them.
    in_flight_batches: usize,
    in_flight_requests: usize,
}

/// Seals `q`'s open batch into its send queue; a batch that cannot be built fails (its slot
/// and why are returned, its bytes and count released).
fn seal_open(
    q: &mut PartitionQueue,
    buffered: &mut usize,
    outstanding: &mut usize,
) -> Option<(Arc<BatchSlot>, String)> {
    match q.open.take()?.seal(Instant::now()) {
        Ok(b) => {
            q.ready.push_back(b);
            None
        }
        Err((slot, bytes, why)) => {
            *buffered -= bytes;
            *outstanding -= 1;
            Some((slot, why))
        }
    }
}

impl PartitionQueue {
    /// Whether another request may go out now: one at a time without idempotence, up to
    /// `max_requests` with it.
    fn window_open(&self, idempotent: bool, max_requests: usize) -> bool {
        if idempotent {
            self.in_flight_requests < max_requests.max(1)
        } else {
            self.in_flight_requests == 0
        }
    }

    /// Where the next request starts: the first batch neither in flight nor answered,
    /// provided no batch after it is in flight (else an earlier request failed while later
    /// ones are out: wait for their answers, then resend in order).
    ///
    /// With idempotence the queue's first batch is the oldest one the broker may hold
    /// without the producer knowing, and a retry of it is recognised only while it is among
    /// the last 5 batches the broker stored for the partition: so a batch goes out only at a
    /// position below 5, whatever was answered behind the first one meanwhile (an answer
    /// can come back on a new connection while the first one's was lost on the old).
    fn next_to_send(&self, idempotent: bool) -> Option<usize> {
        let i = self.ready.iter().position(|b| !b.in_flight && !b.acked)?;
        let behind_in_flight = self.ready.iter().skip(i).any(|b| b.in_flight);
        (!behind_in_flight && (!idempotent || i < MAX_IDEMPOTENT_BATCHES)).then_some(i)
    }

    /// Batches the broker may hold that are not answered yet: an epoch bump waits for them.
    fn unresolved(&self) -> bool {
        self.in_flight_batches > 0
            || self
                .ready
                .iter()
                .take_while(|b| !b.refused)
                .any(|b| b.maybe_stored)
    }

    /// Drops the answered batches at the front (reported already).
    fn drop_answered_front(&mut self) {
        while self.ready.front().is_some_and(|b| b.acked) {
            self.ready.pop_front();
        }
    }
}

/// The idempotent producer's identity and whether it must bump its epoch.
#[derive(Default)]
pub(super) struct Identity {
    /// (producer id, epoch) from InitProducerId.
    pub(super) current: Option<(i64, i16)>,
    /// A numbered batch failed for good, or the broker lost track: bump before sending more
    /// (a transactional producer bumps when the transaction is aborted).
    pub(super) bump_wanted: bool,
    /// Each partition's next base sequence in the current epoch. Kept apart from the
    /// partition queues, which come and go with the traffic: a sequence never starts over
    /// within an epoch.
    pub(super) next_seq: FxHashMap<(Arc<str>, u32), i32>,
}

#[derive(Default)]
pub(super) struct State {
    /// Looked up at every send, as `sticky` is: Fx hashing (the keys are the producer's own
    /// topics; SipHash was 5% of the producer).
    queues: FxHashMap<(Arc<str>, u32), PartitionQueue>,
    /// The topic of the last send, shared: its records' queue keys and batches reuse it
    /// rather than allocate a name per record.
    last_topic: Option<Arc<str>>,
    buffered: usize,
    /// Batches sent and not yet answered, plus batches queued.
    outstanding: usize,
    /// Per topic, the partition keyless records go to now and the bytes sent there so far.
    sticky: FxHashMap<String, (u32, usize)>,
    /// Advances at every new sticky choice (seeded from the process id).
    sticky_turn: u32,
    metadata: Arc<MetadataCache>,
    /// Counts successful metadata refreshes.
    metadata_version: u64,
    metadata_wanted: bool,
    /// Topics a send named that the metadata did not list: the next refresh asks the broker
    /// to create them (it does if it auto-creates topics, as Kafka's producers ask).
    unknown_topics: BTreeSet<String>,
    flush_wanted: bool,
    closed: bool,
    /// Present with idempotence.
    pub(super) identity: Option<Identity>,
    /// Present for a transactional producer.
    pub(super) txn: Option<Txn>,
}

impl State {
    /// `topic` as a shared name, allocated only when it differs from the last send's.
    fn topic_name(&mut self, topic: &str) -> Arc<str> {
        match &self.last_topic {
            Some(t) if **t == *topic => t.clone(),
            _ => self.last_topic.insert(Arc::from(topic)).clone(),
        }
    }
}

pub(super) struct Shared {
    pub(super) cfg: ProducerConfig,
    client_cfg: ClientConfig,
    state: Mutex<State>,
    /// Signalled when memory frees, metadata arrives or a batch completes.
    changed: Condvar,
    wake_tx: flume::Sender<()>,
    partitioner: Option<Partitioner>,
    buffers: Arc<BatchBuffers>,
}

impl Shared {
    pub(super) fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
    pub(super) fn wake(&self) {
        let _ = self.wake_tx.try_send(());
    }
}

/// A thread-safe producer: share it (`Arc`) between threads and tasks.
pub struct Producer {
    pub(super) shared: Arc<Shared>,
    sender: Option<std::thread::JoinHandle<()>>,
}

impl Producer {
    /// Connects (for metadata) and starts the sender thread.
    pub fn new(client_cfg: ClientConfig, cfg: ProducerConfig) -> Result<Producer, ClientError> {
        Self::with_partitioner(client_cfg, cfg, None)
    }

    /// Like [`new`](Self::new), with a custom partitioner consulted before the default one.
    pub fn with_partitioner(
        client_cfg: ClientConfig,
        cfg: ProducerConfig,
        partitioner: Option<Partitioner>,
    ) -> Result<Producer, ClientError> {
        if cfg.batch_bytes == 0 || cfg.buffer_memory == 0 {
            return Err(ClientError::Invalid(
                "batch bytes and buffer memory must be at least 1".into(),
            ));
        }
        let mut client = Client::connect(client_cfg.clone())?;
        let identity = if cfg.idempotence && cfg.acks != Acks::None {
            Some(Identity {
                current: Some(init_producer_id(&mut client, &cfg)?),
                ..Identity::default()
            })
        } else {
            None
        };
        Self::start(client, client_cfg, cfg, partitioner, identity, None)
    }

    /// Starts the sender thread on `client` with the producer's identity (idempotence) and
    /// transaction (a transactional producer).
    pub(super) fn start(
        client: Client,
        client_cfg: ClientConfig,
        cfg: ProducerConfig,
        partitioner: Option<Partitioner>,
        identity: Option<Identity>,
        txn: Option<Txn>,
    ) -> Result<Producer, ClientError> {
        let (wake_tx, wake_rx) = flume::bounded(1);
        // Room for a full batch (the dial plus the array padding and header and tag structs
        // its estimate leaves out), so a batch's buffer, written in place, is not moved as it
        // grows.
        let buffers = BatchBuffers::new(
            cfg.batch_bytes.saturating_add(cfg.batch_bytes / 8),
            cfg.buffer_memory,
        );
        let shared = Arc::new(Shared {
            buffers,
            cfg,
            client_cfg,
            state: Mutex::new(State {
                metadata: Arc::new(client.metadata().clone()),
                // Producers of one process start on different partitions, as Kafka's pick at
                // random.
                sticky_turn: std::process::id()
                    .wrapping_add(NEXT_PRODUCER.fetch_add(1, Ordering::Relaxed)),
                identity,
                txn,
                ..State::default()
            }),
            changed: Condvar::new(),
            wake_tx,
            partitioner,
        });
        let s = shared.clone();
        let sender = std::thread::Builder::new()
            .name("rill-producer".into())
            .spawn(move || Sender::new(s, client, wake_rx).run())
            .map_err(|e| ClientError::Invalid(format!("cannot start the producer thread: {e}")))?;
        Ok(Producer {
            shared,
            sender: Some(sender),
        })
    }

    /// Partitions of `topic`. An unknown topic gets one metadata refresh (waited for up to
    /// `max_block`); if the refreshed metadata does not list it either, it does not exist.
    pub fn partitions_for(&self, topic: &str) -> Result<u32, ClientError> {
        let mut st = self.shared.lock();
        if let Ok(n) = st.metadata.partitions(topic) {
            return Ok(n);
        }
        // The clock is read only off the hot path: most sends know their topic.
        let deadline = Instant::now() + self.shared.cfg.max_block;
        let asked_at = st.metadata_version;
        loop {
            if let Ok(n) = st.metadata.partitions(topic) {
                return Ok(n);
            }
            if Instant::now() >= deadline || st.closed || st.metadata_version > asked_at {
                st.unknown_topics.remove(topic);
                return Err(ClientError::UnknownTopic(topic.to_string()));
            }
            st.metadata_wanted = true;
            if st.unknown_topics.len() < MAX_UNKNOWN_TOPICS {
                st.unknown_topics.insert(topic.to_string());
            }
            self.shared.wake();
            st = self
                .shared
                .changed
                .wait_timeout(st, Duration::from_millis(100))
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// Buffers a record for its partition's next batch. Blocks while buffer memory is full (up
    /// to `max_block`). The returned report resolves when the batch is acknowledged or fails.
    pub fn send(&self, record: ProducerRecord<'_>) -> Result<DeliveryFuture, ClientError> {
        let size = record.size();
        let cfg = &self.shared.cfg;
        let mut st = self.shared.lock();
        // One lock per record: the topic is known but for a producer's first sends.
        let n = match st.metadata.partitions(record.topic) {
            Ok(n) => n,
            Err(_) => {
                drop(st);
                let n = self.partitions_for(record.topic)?;
                st = self.shared.lock();
                n
            }
        };
        let mut deadline = None;
        while st.buffered > 0 && st.buffered + size > cfg.buffer_memory {
            if st.closed {
                return Err(ClientError::Invalid("producer is closed".into()));
            }
            let now = Instant::now();
            let deadline = *deadline.get_or_insert(now + cfg.max_block);
            if now >= deadline {
                return Err(ClientError::Timeout(format!(
                    "buffer memory ({} bytes) full for {:?}: the broker is not keeping up or is unreachable",
                    cfg.buffer_memory, cfg.max_block
                )));
            }
            st = self
                .shared
                .changed
                .wait_timeout(st, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        let topic = st.topic_name(record.topic);
        let mut full = false;
        // Batches that could not be built (at most two: the sticky partition's, this one's).
        let mut failed = Vec::new();
        let mut sticky_placed = false;
        let partition = match record.partition {
            Some(p) if p < n => p,
            Some(p) => {
                return Err(ClientError::UnknownPartition {
                    topic: record.topic.to_string(),
                    partition: p,
                    partitions: n,
                })
            }
            None => match (
                self.shared
                    .partitioner
                    .as_ref()
                    .and_then(|f| f(record.topic, record.key, n)),
                record.key,
            ) {
                (Some(p), _) if p < n => p,
                (_, Some(k)) => {
                    keyed_partition(k, n, &st.metadata.writable_partitions(record.topic))
                }
                (_, None) => {
                    sticky_placed = true;
                    let State {
                        sticky,
                        sticky_turn,
                        metadata,
                        queues,
                        buffered,
                        outstanding,
                        ..
                    } = &mut *st;
                    // Kafka's sticky partitioner (KIP-794): keyless records stay on one
                    // partition until a batch's worth went there, then move on to the next;
                    // a record that does not fit the partition's open batch moves on at once
                    // and the batch, full, goes out. Moving on only when a batch filled to
                    // exactly its size left every keyless record of a producer on one
                    // partition; moving on whenever a batch was sent put records, with
                    // linger 0, behind the partition whose request was still in flight.
                    let mut stays = None;
                    if let Some((p, produced)) = sticky.get_mut(record.topic) {
                        let q = queues.get_mut(&(topic.clone(), *p));
                        let overflows = q
                            .as_ref()
                            .and_then(|q| q.open.as_ref())
                            .is_some_and(|o| !o.fits(size, cfg));
                        if overflows || *produced + size > cfg.batch_bytes {
                            sticky.remove(record.topic);
                        } else {
                            *produced += size;
                            stays = Some(*p);
                        }
                        if let (true, Some(q)) = (overflows, q) {
                            failed.extend(seal_open(q, buffered, outstanding));
                            full = true;
                        }
                    }
                    match stays {
                        Some(p) => p,
                        None => {
                            // Each new sticky choice moves on from the last one.
                            *sticky_turn = sticky_turn.wrapping_add(1);
                            let writable = metadata.writable_partitions(record.topic);
                            let p = sticky_partition(*sticky_turn, n, &writable);
                            sticky.insert(record.topic.to_string(), (p, size));
                            p
                        }
                    }
                }
            },
        };
        let timestamp_ms = record.timestamp_ms.unwrap_or_else(crate::clock::now_ms);
        let created;
        let fut = {
            let State {
                queues,
                sticky,
                outstanding,
                buffered,
                ..
            } = &mut *st;
            let q = queues.entry((topic.clone(), partition)).or_default();
            // A record that would push the open batch past `batch_bytes` starts a new one:
            // batches never outgrow the dial (nor the broker's frame limit).
            if q.open.as_ref().is_some_and(|o| !o.fits(size, cfg)) {
                full = true;
                failed.extend(seal_open(q, buffered, outstanding));
            }
            // A new batch wakes the sender, which may sleep with no batch due (up to its
            // 100 ms tick): it learns when this one is due (an open-loop run at 5,000 msg/s
            // saw p99 76 ms from that sleep).
            created = q.open.is_none();
            let open = q.open.get_or_insert_with(|| {
                *outstanding += 1;
                let buffers = &self.shared.buffers;
                OpenBatch {
                    builder: BatchBuilder::with_buffer(buffers.take(), buffers.capacity()),
                    buffers: buffers.clone(),
                    slot: BatchSlot::new(Arc::from(&*topic), partition),
                    created: Instant::now(),
                    bytes: 0,
                }
            });
            let index = open.builder.len() as u32;
            record.push_into(&mut open.builder, timestamp_ms);
            open.bytes += size;
            if open.builder.estimated_bytes() >= cfg.batch_bytes {
                full = true;
                // The sticky partition's batch is full: the next keyless record moves on.
                if sticky_placed {
                    sticky.remove(record.topic);
                }
            }
            DeliveryFuture {
                slot: open.slot.clone(),
                index,
                timestamp_ms,
                listener: None,
            }
        };
        st.buffered += size;
        // Before the lock goes, as in `finish`: `flush` counts these as done.
        let any_failed = !failed.is_empty();
        for (slot, why) in failed {
            slot.complete(Err(DeliveryFailure {
                code: None,
                message: why,
            }));
        }
        drop(st);
        if any_failed {
            self.shared.changed.notify_all();
        }
        // A record joining an open batch needs no wake, linger 0 included: the sender was
        // woken when the batch opened and left it open only because the partition's window
        // is full, and the answer that opens the window wakes it again. Waking it at every
        // send cost a futex wake and a context switch per record at linger 0.
        if full || created {
            self.shared.wake();
        }
        Ok(fut)
    }

    /// Sends every buffered record now and waits until all are acknowledged or failed.
    pub fn flush(&self) -> Result<(), ClientError> {
        self.flush_until(None)
    }

    /// Bytes of records buffered and not yet acknowledged.
    pub fn buffered_bytes(&self) -> usize {
        self.shared.lock().buffered
    }
}

impl Drop for Producer {
    fn drop(&mut self) {
        let _ = self.flush_until(Some(Instant::now() + self.shared.cfg.delivery_timeout));
        self.shared.lock().closed = true;
        self.shared.wake();
        self.shared.changed.notify_all();
        if let Some(t) = self.sender.take() {
            let _ = t.join();
        }
    }
}

impl Producer {
    /// Sends everything buffered and waits for the outcomes, until `deadline` if given.
    pub(super) fn flush_until(&self, deadline: Option<Instant>) -> Result<(), ClientError> {
        let mut st = self.shared.lock();
        while st.outstanding > 0 && deadline.is_none_or(|d| Instant::now() < d) {
            if st.closed {
                return Err(ClientError::Invalid("producer is closed".into()));
            }
            st.flush_wanted = true;
            self.shared.wake();
            st = self
                .shared
                .changed
                .wait_timeout(st, Duration::from_millis(50))
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        st.flush_wanted = false;
        Ok(())
    }
}

/// Batches of one partition sent together, oldest first (they stay in the partition's
/// queue, marked in flight, until answered).
struct Sent {
    topic: Arc<str>,
    partition: u32,
    /// Their ids and encoded bytes.
    batches: Vec<(u64, Arc<BatchBytes>)>,
}

/// Bytes of batches of one partition a request carries by default, as Kafka's
/// `max.request.size`: measured 2026-12-04 (RESULTS), 1 MiB requests gave 1.12x the
/// throughput of 8 MiB ones with 1 MiB batches, and a fifth of the per-request latency.
pub const DEFAULT_PARTITION_REQUEST_BYTES: usize = 1 << 20;
/// Batches of one partition an idempotent request carries at most: the broker remembers a
/// producer's last 5 per partition, so a retry of the whole request is recognised.
const MAX_IDEMPOTENT_BATCHES: usize = 5;
/// Unknown topics one metadata refresh asks the broker to create, at most.
const MAX_UNKNOWN_TOPICS: usize = 64;

struct Sender {
    shared: Arc<Shared>,
    client: Client,
    wake_rx: flume::Receiver<()>,
    connections: HashMap<std::net::SocketAddr, PipelinedConnection>,
}

impl Sender {
    fn new(shared: Arc<Shared>, client: Client, wake_rx: flume::Receiver<()>) -> Sender {
        Sender {
            shared,
            client,
            wake_rx,
            connections: HashMap::new(),
        }
    }

    fn run(mut self) {
        let mut refreshed = Instant::now();
        loop {
            self.bump_epoch_if_wanted();
            let (sendable, next_wake, closed, want_md) = self.collect();
            if want_md || refreshed.elapsed() >= self.shared.cfg.metadata_max_age {
                self.refresh_metadata();
                refreshed = Instant::now();
            }
            if !sendable.is_empty() {
                self.send(sendable);
            }
            if closed {
                return;
            }
            if super::transactional::add_partitions(&self.shared, &mut self.client) {
                continue; // partitions joined the transaction: their batches may go now
            }
            let wait = next_wake.map_or(Duration::from_millis(100), |t| {
                t.saturating_duration_since(Instant::now())
            });
            let _ = self
                .wake_rx
                .recv_timeout(wait.min(Duration::from_millis(100)));
        }
    }

    /// Bumps the producer epoch (KIP-360) once a bump is wanted and no request is in flight:
    /// every partition numbers its batches from 0 again, in the new epoch.
    fn bump_epoch_if_wanted(&mut self) {
        let current = {
            let st = self.shared.lock();
            if st.txn.is_some() {
                return; // a transactional producer bumps when its transaction is aborted
            }
            match &st.identity {
                // Not while the broker may hold a batch numbered in this epoch whose answer
                // is not known: numbered again in the next one, it would be stored twice.
                Some(i) if i.bump_wanted && !st.queues.values().any(PartitionQueue::unresolved) => {
                    i.current
                }
                _ => return,
            }
        };
        match self.client.init_producer_id(current) {
            Ok(next) => {
                log::info!("idempotent producer: epoch bumped from {current:?} to {next:?}");
                let mut st = self.shared.lock();
                if let Some(i) = st.identity.as_mut() {
                    i.current = Some(next);
                    i.bump_wanted = false;
                    // A new epoch numbers every partition from 0.
                    i.next_seq.clear();
                }
            }
            Err(e) => log::warn!("idempotent producer: epoch bump failed (retried): {e}"),
        }
    }

    fn refresh_metadata(&mut self) {
        let create: Vec<String> = std::mem::take(&mut self.shared.lock().unknown_topics)
            .into_iter()
            .collect();
        let md = self
            .client
            .refresh_metadata_creating(create)
            .map(|m| Arc::new(m.clone()));
        let mut st = self.shared.lock();
        st.metadata_wanted = false;
        if let Ok(md) = md {
            st.metadata = md;
            st.metadata_version += 1;
        }
        drop(st);
        self.shared.changed.notify_all();
    }

    /// Seals due batches, expires old ones, and takes those that may be sent now.
    fn collect(&mut self) -> (Vec<Sent>, Option<Instant>, bool, bool) {
        let cfg = &self.shared.cfg;
        let now = Instant::now();
        let mut st = self.shared.lock();
        let flush = st.flush_wanted;
        let mut next_wake: Option<Instant> = None;
        let mut sendable = Vec::new();
        let mut failed = Vec::new();
        let mut freed = 0usize;
        let mut finished = 0usize;
        let identity = st.identity.as_ref().map(|i| (i.current, i.bump_wanted));
        // While a bump is wanted nothing new goes out (only what the broker may hold).
        let paused = identity.is_some_and(|(_, bump)| bump);
        let mut expired_numbered = false;
        let mut next_seq = st
            .identity
            .as_mut()
            .map(|i| std::mem::take(&mut i.next_seq))
            .unwrap_or_default();
        let idempotent = identity.is_some();
        let max_requests = cfg.max_in_flight;
        // Taken out for the loop over the queues, put back after it.
        let mut txn = st.txn.take();
        for ((topic, partition), q) in st.queues.iter_mut() {
            // A lingered batch is sealed only when it can go out now: while the partition
            // cannot send (its window is full) it keeps filling (that is where batches grow
            // when linger is 0).
            let sendable_now = q.window_open(idempotent, max_requests)
                && q.ready.iter().all(|b| b.in_flight || b.acked);
            if let Some(open) = &q.open {
                let due = open.created + cfg.linger;
                let full = open.builder.estimated_bytes() >= cfg.batch_bytes;
                if full || ((flush || now >= due) && sendable_now) {
                    match q.open.take().expect("checked").seal(now) {
                        Ok(b) => q.ready.push_back(b),
                        Err((slot, bytes, why)) => {
                            freed += bytes;
                            finished += 1;
                            failed.push((slot, why));
                        }
                    }
                } else if sendable_now {
                    next_wake = Some(next_wake.map_or(due, |w| w.min(due)));
                }
            }
            // Expire what waited too long (never a batch in flight: its answer decides).
            while q.ready.front().is_some_and(|b| {
                !b.in_flight && now.duration_since(b.created) >= cfg.delivery_timeout
            }) {
                let b = q.ready.pop_front().expect("checked");
                q.drop_answered_front();
                freed += b.bytes;
                finished += 1;
                // Its sequence may be stored or not: the next ones would leave a gap.
                expired_numbered |= b.sequence.is_some();
                let mut why = format!(
                    "not delivered within the delivery timeout of {:?}",
                    cfg.delivery_timeout
                );
                if let Some(last) = &b.last_error {
                    why.push_str(&format!("; last error: {last}"));
                }
                failed.push((b.slot, why));
            }
            if let Some(t) = txn.as_mut() {
                // A transaction that can only be aborted sends nothing more: what is not in
                // flight fails (its sequences may leave a gap: the abort bumps the epoch).
                if let Some(e) = &t.error {
                    let why = format!("the transaction cannot commit: {}", e.message);
                    if let Some(o) = q.open.take() {
                        freed += o.bytes;
                        finished += 1;
                        failed.push((o.slot, why.clone()));
                    }
                    let mut kept = VecDeque::with_capacity(q.ready.len());
                    for b in q.ready.drain(..) {
                        if b.in_flight || b.acked {
                            kept.push_back(b);
                            continue;
                        }
                        freed += b.bytes;
                        finished += 1;
                        expired_numbered |= b.sequence.is_some();
                        failed.push((b.slot, why.clone()));
                    }
                    q.ready = kept;
                    q.drop_answered_front();
                    continue;
                }
                // A partition's records go out once the coordinator has it in the
                // transaction (AddPartitionsToTxn, sent by `run`).
                let key = (topic.clone(), *partition);
                if !t.added.contains(&key) {
                    if !q.ready.is_empty() {
                        t.to_add.insert(key);
                    }
                    continue;
                }
            }
            if !q.window_open(idempotent, max_requests) {
                continue;
            }
            let Some(first) = q.next_to_send(idempotent) else {
                continue;
            };
            let not_before = q.ready[first].not_before;
            if not_before > now {
                next_wake = Some(next_wake.map_or(not_before, |w| w.min(not_before)));
                continue;
            }
            // With idempotence the batches sent stay within what the broker remembers per
            // producer (`next_to_send`), and a request carries either only batches of one
            // earlier request (a retry: a group whose stored offsets are contiguous) or only
            // new ones: a duplicate's offsets and a new batch's are not contiguous. While a
            // bump is wanted only batches the broker may hold go out (with their numbers):
            // their answers settle them before the new epoch numbers anything.
            let room = MAX_IDEMPOTENT_BATCHES.saturating_sub(first);
            let request = NEXT_BATCH_ID.fetch_add(1, Ordering::Relaxed);
            let mut batches = Vec::new();
            let mut bytes = 0;
            let mut kind: Option<Option<u64>> = None;
            for b in q.ready.range_mut(first..) {
                let this_kind = b.sequence.map(|_| b.request);
                let fits = batches.is_empty()
                    || (bytes + b.encoded.len() <= cfg.partition_request_bytes
                        && (!idempotent || (batches.len() < room && kind == Some(this_kind))));
                if !fits || b.not_before > now || b.acked || (paused && !b.maybe_stored) {
                    break;
                }
                kind = Some(this_kind);
                bytes += b.encoded.len();
                if let Some((Some(producer), _)) = identity {
                    let next = next_seq.entry((topic.clone(), *partition)).or_insert(0);
                    if number(next, b, producer, txn.is_some()) {
                        b.request = request;
                    }
                }
                b.in_flight = true;
                b.maybe_stored = idempotent;
                b.refused = false;
                batches.push((b.id, b.encoded.clone()));
            }
            if batches.is_empty() {
                continue;
            }
            q.in_flight_batches += batches.len();
            q.in_flight_requests += 1;
            sendable.push(Sent {
                topic: topic.clone(),
                partition: *partition,
                batches,
            });
        }
        st.queues
            .retain(|_, q| q.open.is_some() || !q.ready.is_empty());
        if let (Some(t), Some((_, why))) = (txn.as_mut(), failed.first()) {
            t.fail(None, why, false);
        }
        if let Some(due) = txn.as_ref().and_then(super::transactional::add_due) {
            next_wake = Some(next_wake.map_or(due, |w| w.min(due)));
        }
        st.txn = txn;
        if let Some(i) = st.identity.as_mut() {
            i.next_seq = next_seq;
        }
        st.buffered -= freed;
        st.outstanding -= finished;
        if expired_numbered {
            if let Some(i) = st.identity.as_mut() {
                i.bump_wanted = true;
            }
        }
        let closed = st.closed && st.queues.is_empty();
        let want_md = st.metadata_wanted;
        // Before the lock goes, as in `finish`: `flush` counts these as done.
        for (slot, message) in failed {
            slot.complete(Err(DeliveryFailure {
                code: None,
                message,
            }));
        }
        drop(st);
        if finished > 0 {
            self.shared.changed.notify_all();
        }
        (sendable, next_wake, closed, want_md)
    }

    fn send(&mut self, sendable: Vec<Sent>) {
        let md = self.shared.lock().metadata.clone();
        let mut by_addr: HashMap<std::net::SocketAddr, Vec<Sent>> = HashMap::new();
        for s in sendable {
            match md.route(&s.topic, s.partition) {
                Ok(r) => by_addr.entry(r.addr).or_default().push(s),
                Err(e) => finish(&self.shared, vec![s], Err(e)),
            }
        }
        for (addr, group) in by_addr {
            if self
                .connections
                .get(&addr)
                .is_some_and(PipelinedConnection::is_dead)
            {
                self.connections.remove(&addr);
            }
            if !self.connections.contains_key(&addr) {
                let cfg = &self.shared.client_cfg;
                match PipelinedConnection::connect(
                    addr,
                    cfg,
                    self.shared.cfg.request_timeout,
                    self.shared.cfg.max_in_flight,
                    super::connection::DEFAULT_MAX_RESPONSE_BYTES,
                ) {
                    Ok(c) => {
                        self.connections.insert(addr, c);
                    }
                    Err(e) => {
                        finish(&self.shared, group, Err(e));
                        continue;
                    }
                }
            }
            let conn = self.connections.get(&addr).expect("inserted above");
            let mut partitions = Vec::with_capacity(group.len());
            let mut at = 0u32;
            for s in &group {
                let len = s.batches.iter().map(|b| b.1.len()).sum::<usize>() as u32;
                partitions.push(ProducePartition {
                    topic: s.topic.to_string(),
                    partition: s.partition,
                    payload_offset: at,
                    payload_len: len,
                });
                at += len;
            }
            let acks = self.shared.cfg.acks;
            let req = ProduceRequest {
                acks: acks.wire(),
                timeout_ms: self
                    .shared
                    .cfg
                    .request_timeout
                    .as_millis()
                    .min(u128::from(u32::MAX)) as u32,
                partitions,
            };
            let meta = match encode_meta(&req) {
                Ok(m) => m,
                Err(e) => {
                    finish(
                        &self.shared,
                        group,
                        Err(ClientError::Invalid(e.to_string())),
                    );
                    continue;
                }
            };
            let payload = || -> Vec<PayloadChunk> {
                group
                    .iter()
                    .flat_map(|s| s.batches.iter().map(|b| b.1.clone() as PayloadChunk))
                    .collect()
            };
            if acks == Acks::None {
                let r = conn.submit(ApiKey::Produce, &meta, payload(), None);
                finish(&self.shared, group, r.map(|()| None));
                continue;
            }
            let shared = self.shared.clone();
            let chunks = payload();
            let batches = group.iter().map(|s| s.batches.len()).sum();
            let group = Arc::new(Mutex::new(Some(group)));
            let g2 = group.clone();
            let observer = self.shared.cfg.request_observer.clone();
            let completion: Completion =
                Box::new(move |r: Result<ResponseFrame, ClientError>, written| {
                    if let (Some(o), Some(written), Ok(_)) = (&observer, written, &r) {
                        (o.0)(RequestTiming {
                            written,
                            answered: Instant::now(),
                            batches,
                        });
                    }
                    if let Some(group) = g2.lock().ok().and_then(|mut g| g.take()) {
                        finish(&shared, group, r.map(Some));
                    }
                });
            if let Err(e) = conn.submit(ApiKey::Produce, &meta, chunks, Some(completion)) {
                if let Some(group) = group.lock().ok().and_then(|mut g| g.take()) {
                    finish(&self.shared, group, Err(e));
                }
            }
        }
    }
}

/// Settles the batches of one request: acknowledged, requeued for a retry, or failed.
/// `Ok(None)` is an acks=0 send that was queued.
fn finish(
    shared: &Arc<Shared>,
    group: Vec<Sent>,
    result: Result<Option<ResponseFrame>, ClientError>,
) {
    let cfg = &shared.cfg;
    let per_partition: Vec<Result<BatchAck, (bool, DeliveryFailure)>> = match &result {
        Ok(None) => group
            .iter()
            .map(|_| {
                Ok(BatchAck {
                    base_offset: None,
                    timestamp_ms: -1,
                })
            })
            .collect(),
        Ok(Some(frame)) => match frame.decode_meta::<ProduceResponse>() {
            Ok(resp) => group
                .iter()
                .map(|s| {
                    let r = resp
                        .partitions
                        .iter()
                        .find(|r| r.partition == s.partition && *r.topic == *s.topic);
                    match r {
                        Some(r) if r.error_code == 0 => Ok(BatchAck {
                            base_offset: u64::try_from(r.base_offset).ok(),
                            timestamp_ms: r.log_append_time_ms,
                        }),
                        Some(r) => {
                            let code = ErrorCode::from_code(r.error_code);
                            Err((
                                code.is_retriable(),
                                DeliveryFailure {
                                    code: Some(code),
                                    message: r.message.clone(),
                                },
                            ))
                        }
                        None => Err((
                            true,
                            DeliveryFailure {
                                code: None,
                                message: "partition missing from the produce response".into(),
                            },
                        )),
                    }
                })
                .collect(),
            Err(e) => group
                .iter()
                .map(|_| {
                    Err((
                        false,
                        DeliveryFailure {
                            code: None,
                            message: e.to_string(),
                        },
                    ))
                })
                .collect(),
        },
        Err(e) => group
            .iter()
            .map(|_| {
                Err((
                    e.is_retriable(),
                    DeliveryFailure {
                        code: e.code(),
                        message: e.to_string(),
                    },
                ))
            })
            .collect(),
    };
    let now = Instant::now();
    let mut done = Vec::new();
    let mut st = shared.lock();
    let idempotent = st.identity.is_some();
    for (s, r) in group.into_iter().zip(per_partition) {
        let State {
            queues,
            identity,
            buffered,
            outstanding,
            metadata_wanted,
            txn,
            ..
        } = &mut *st;
        let Some(q) = queues.get_mut(&(s.topic.clone(), s.partition)) else {
            debug_assert!(false, "an answered partition has a queue");
            continue;
        };
        // The request's batches, still in the queue in send order (nothing else removes a
        // batch in flight).
        let Some(at) = q.ready.iter().position(|b| b.id == s.batches[0].0) else {
            debug_assert!(false, "an answered batch is in its queue");
            continue;
        };
        let n = s.batches.len();
        debug_assert!(q
            .ready
            .range(at..at + n)
            .map(|b| b.id)
            .eq(s.batches.iter().map(|b| b.0)));
        q.in_flight_batches -= n;
        q.in_flight_requests -= 1;
        // An earlier batch of the partition is unanswered or being resent: the broker refused
        // these only because their predecessor was missing.
        let behind_a_retry = at > 0;
        let sent = q.ready.range_mut(at..at + n);
        let mut oldest = now;
        let mut attempts = 0;
        for b in sent {
            b.in_flight = false;
            oldest = oldest.min(b.created);
            attempts = attempts.max(b.attempts);
        }
        let out_of_order = matches!(
            &r,
            Err((_, DeliveryFailure { code: Some(c), .. }))
                if matches!(
                    c,
                    ErrorCode::OutOfOrderSequenceNumber
                        | ErrorCode::UnknownProducerId
                        | ErrorCode::InvalidProducerEpoch
                )
        );
        // The broker lost this producer's state or refused its numbering: a new epoch numbers
        // the batch again (it was not stored), and it is retried. Behind a retry, the same
        // refusal only says an earlier batch is missing: resent in order, same numbers.
        let renumber = idempotent && out_of_order && !behind_a_retry;
        // A transactional producer never renumbers within its transaction: the batch fails,
        // the transaction can only be aborted, and the abort bumps the epoch. A newer epoch
        // of its transactional id fenced it: nothing it sends will be taken again.
        let fenced = txn.is_some()
            && matches!(
                &r,
                Err((_, DeliveryFailure { code: Some(c), .. }))
                    if super::transactional::is_fenced(*c)
            );
        let r = match r {
            Err((_, f)) if fenced || (txn.is_some() && renumber) => Err((false, f)),
            Err((_, f)) if idempotent && out_of_order => Err((true, f)),
            other => other,
        };
        if renumber {
            if let Some(i) = identity.as_mut() {
                i.bump_wanted = true;
            }
        }
        match r {
            Err((true, f))
                if (attempts < cfg.retries || behind_a_retry)
                    && now.duration_since(oldest) < cfg.delivery_timeout =>
            {
                log::debug!("{}-{}: retrying after: {}", s.topic, s.partition, f.message);
                // They stay where they are in the queue: per-key order holds.
                let last = match f.code {
                    Some(code) => format!("{}: {}", code.name(), f.message),
                    None => f.message.clone(),
                };
                for batch in q.ready.range_mut(at..at + n) {
                    if renumber {
                        batch.sequence = None;
                    }
                    if out_of_order {
                        batch.maybe_stored = false;
                        batch.refused = true;
                    }
                    if !behind_a_retry {
                        batch.attempts += 1;
                    }
                    batch.not_before = now + cfg.retry_backoff;
                    batch.last_error = Some(last.clone());
                }
                *metadata_wanted = true;
            }
            Err((_, f)) => {
                let mut numbered = false;
                for b in q.ready.drain(at..at + n) {
                    numbered |= b.sequence.is_some();
                    *buffered -= b.bytes;
                    *outstanding -= 1;
                    done.push((b.slot, Err(f.clone())));
                }
                if let Some(t) = txn.as_mut() {
                    t.fail(f.code, &f.message, fenced);
                }
                if numbered {
                    if let Some(i) = identity.as_mut() {
                        i.bump_wanted = true;
                    }
                }
            }
            Ok(ack) => {
                // The batches were stored back to back from the first one's base offset.
                let mut base = ack.base_offset;
                for b in q.ready.range_mut(at..at + n) {
                    *buffered -= b.bytes;
                    *outstanding -= 1;
                    let this = BatchAck {
                        base_offset: base,
                        timestamp_ms: ack.timestamp_ms,
                    };
                    base = base.map(|o| o + u64::from(b.records));
                    done.push((b.slot.clone(), Ok(this)));
                    b.acked = true;
                    b.maybe_stored = false;
                }
            }
        }
        q.drop_answered_front();
    }
    // Completed before the lock goes: `flush` returns once `outstanding` is 0, and every
    // report it counted must be settled by then (a CI run saw one settled after).
    for (slot, r) in done {
        slot.complete(r);
    }
    drop(st);
    shared.changed.notify_all();
    shared.wake();
}

/// Numbers a batch about to be sent for the first time in `producer`'s epoch (a retry keeps
/// its numbers): the partition's next sequence (`next_seq`, moved on), written into the batch
/// header (marked transactional for a transactional producer). Whether it numbered it.
fn number(
    next_seq: &mut i32,
    b: &mut SealedBatch,
    producer: (i64, i16),
    transactional: bool,
) -> bool {
    let (id, epoch) = producer;
    if b.sequence.is_some_and(|(e, _)| e == epoch) {
        return false;
    }
    let seq = *next_seq;
    let encoded = Arc::make_mut(&mut b.encoded);
    crate::batch::set_producer(encoded.as_mut_slice(), id, epoch, seq, transactional);
    *next_seq = crate::batch::sequence::increment_sequence(seq, b.records);
    b.sequence = Some((epoch, seq));
    true
}

/// A producer id for a new idempotent producer, retrying retriable failures (no controller
/// leader during an election, a broker restarting) for up to `max_block`, as `send` waits
/// for metadata.
fn init_producer_id(client: &mut Client, cfg: &ProducerConfig) -> Result<(i64, i16), ClientError> {
    client.retrying(
        cfg.max_block,
        cfg.retry_backoff,
        "idempotent producer: InitProducerId",
        |c| c.init_producer_id(None),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(state: &str) -> SealedBatch {
        let now = Instant::now();
        SealedBatch {
            id: NEXT_BATCH_ID.fetch_add(1, Ordering::Relaxed),
            request: 0,
            in_flight: state == "in flight",
            acked: state == "acked",
            maybe_stored: matches!(state, "in flight" | "lost answer"),
            refused: state == "refused",
            encoded: Arc::new(BatchBytes::new(
                rkyv::util::AlignedVec::new(),
                BatchBuffers::new(0, 0),
            )),
            records: 1,
            slot: BatchSlot::new("t".into(), 0),
            created: now,
            bytes: 0,
            attempts: 0,
            not_before: now,
            last_error: None,
            sequence: None,
        }
    }

    fn queue(states: &[&str]) -> PartitionQueue {
        let ready: VecDeque<_> = states.iter().map(|s| batch(s)).collect();
        let in_flight_batches = ready.iter().filter(|b| b.in_flight).count();
        PartitionQueue {
            open: None,
            ready,
            in_flight_batches,
            in_flight_requests: in_flight_batches,
        }
    }

    /// The defect a lossy CI run once showed: the first batch's answer lost on one connection
    /// while the next ones were answered on another; new batches kept going while fewer
    /// than 5 were in flight, the broker forgot the first one, and its retry was refused and
    /// numbered again: stored twice. Nothing goes out at position 5 or later.
    #[test]
    fn no_batch_goes_out_past_what_the_broker_remembers_behind_an_unanswered_one() {
        let q = queue(&["in flight", "acked", "acked", "acked", "acked", "new"]);
        assert_eq!(q.next_to_send(true), None);
        let q = queue(&["in flight", "acked", "acked", "acked", "new"]);
        assert_eq!(q.next_to_send(true), Some(4));
        // The first one's retry goes out where it is; a batch behind an unanswered one waits.
        let q = queue(&["lost answer", "acked", "acked", "acked", "acked", "new"]);
        assert_eq!(q.next_to_send(true), Some(0));
        let q = queue(&["lost answer", "in flight", "new"]);
        assert_eq!(q.next_to_send(true), None);
        // Without idempotence nothing is remembered: one request at a time, from the front.
        let q = queue(&["new", "new"]);
        assert_eq!(q.next_to_send(false), Some(0));
    }

    /// An epoch bump numbers batches again: it must wait while the broker may hold one whose
    /// answer is unknown, but not for batches behind a refused one (they cannot be stored).
    #[test]
    fn an_epoch_bump_waits_for_every_batch_the_broker_may_hold() {
        assert!(queue(&["in flight"]).unresolved());
        assert!(queue(&["lost answer", "new"]).unresolved());
        assert!(queue(&["new", "lost answer"]).unresolved());
        assert!(!queue(&["refused", "lost answer", "new"]).unresolved());
        assert!(!queue(&["new", "new"]).unresolved());
        let mut q = queue(&["acked", "acked", "lost answer", "acked"]);
        q.drop_answered_front();
        assert_eq!(q.ready.len(), 2);
        assert!(q.ready[0].maybe_stored && q.ready[1].acked);
    }
}
