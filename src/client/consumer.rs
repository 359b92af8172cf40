//! The consumer (assign mode): a fetcher thread keeps the next fetch in flight while the
//! application works on the current one (prefetching), and `poll` hands back the fetched
//! responses whole: records are read in place from them, never copied one by one.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::pipeline::{Completion, PipelinedConnection};
use super::txn_skip::TxnSkipper;
use super::{Client, ClientConfig, ClientError};
use crate::batch::{BatchError, BatchIter, RecordView, TagFilter};
use crate::protocol::frame::encode_meta;
use crate::protocol::messages::{
    AbortedTransaction, FetchPartition, FetchPartitionResult, FetchRequest, FetchRequestV1,
    FetchResponse, FetchResponseV1, FilteredFetchRequest, FilteredFetchResponse,
    ListOffsetsPartition, ListOffsetsRequest, ListOffsetsResponse, EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
};
pub use crate::protocol::Isolation;
use crate::protocol::{ApiKey, ErrorCode, ResponseFrame};

/// The pause between offset lookups while a partition's leader moves (Kafka's
/// `retry.backoff.ms` default).
const RESOLVE_BACKOFF: Duration = Duration::from_millis(100);

/// Where a consumer starts reading a partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartFrom {
    /// The earliest offset still in the log (the log start offset).
    Beginning,
    /// The partition's high watermark: only records written from now on.
    End,
    /// This exact offset.
    Offset(u64),
    /// The first record at or after this time (ms since the epoch); the end if none is.
    Timestamp(i64),
}

/// What to do when the position is no longer (or not yet) in the log (`auto.offset.reset`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OffsetReset {
    /// Jump to the earliest offset still in the log.
    Earliest,
    /// Jump to the high watermark, skipping to records written from now on.
    Latest,
    /// Fail the poll with OFFSET_OUT_OF_RANGE.
    Error,
}

/// Consumer settings (Kafka's names where they exist).
#[derive(Debug, Clone)]
pub struct ConsumerConfig {
    /// The broker answers once this many bytes are ready or `fetch_max_wait` passed.
    pub fetch_min_bytes: u32,
    /// How long the broker may hold a fetch waiting for `fetch_min_bytes` (`fetch.max.wait.ms`).
    pub fetch_max_wait: Duration,
    /// Bytes per fetch response (`fetch.max.bytes`).
    pub fetch_max_bytes: u32,
    /// Bytes per partition per fetch (`max.partition.fetch.bytes`).
    pub partition_max_bytes: u32,
    /// Fetched responses buffered ahead of `poll`.
    pub prefetch: usize,
    /// What to do when a partition's position is out of range (`auto.offset.reset`).
    pub auto_offset_reset: OffsetReset,
    /// Only records with these tags, filtered by the broker (a native feature: rill's
    /// FilteredFetch). Their offsets are unchanged, so positions jump over the records
    /// skipped; group commits work as usual.
    pub tags: Option<TagFilter>,
    /// read_uncommitted (default: every record below the high watermark) or read_committed
    /// (only below the last stable offset, aborted transactions' records skipped; Kafka's
    /// `isolation.level`). Control batches (transaction markers) are never handed out. A
    /// filtered fetch (`tags`) reads uncommitted.
    pub isolation: Isolation,
}

impl Default for ConsumerConfig {
    fn default() -> Self {
        ConsumerConfig {
            fetch_min_bytes: 1,
            fetch_max_wait: Duration::from_millis(500),
            fetch_max_bytes: 16 << 20,
            partition_max_bytes: 4 << 20,
            prefetch: 2,
            auto_offset_reset: OffsetReset::Earliest,
            tags: None,
            isolation: Isolation::ReadUncommitted,
        }
    }
}

/// One partition's part of a fetch response.
struct FetchedPartition {
    frame: Arc<ResponseFrame>,
    topic: Arc<str>,
    partition: u32,
    payload_offset: u32,
    payload_len: u32,
    /// Records below this offset (the front of the first batch) are skipped.
    from_offset: u64,
    /// Base offsets of the batches not handed out (control batches, aborted transactions'
    /// batches under read_committed), in order.
    skipped: Vec<u64>,
    next_offset: u64,
    records: usize,
}

/// The records of one poll, read in place from the fetched responses.
#[derive(Default)]
pub struct Records {
    parts: Vec<FetchedPartition>,
}

/// A record of a [`Records`], borrowed from the fetched response.
#[derive(Debug, Clone, Copy)]
pub struct ConsumerRecord<'a> {
    /// The topic the record was read from.
    pub topic: &'a str,
    /// The partition the record was read from.
    pub partition: u32,
    /// The record itself, read in place from its batch.
    pub record: RecordView<'a>,
}

impl<'a> ConsumerRecord<'a> {
    /// The record's offset in its partition.
    pub fn offset(&self) -> u64 {
        self.record.offset
    }
    /// The timestamp the producer gave the record, in milliseconds since the epoch.
    pub fn timestamp_ms(&self) -> i64 {
        self.record.timestamp_ms
    }
    /// The record's key, if it has one.
    pub fn key(&self) -> Option<&'a [u8]> {
        self.record.key()
    }
    /// The record's value (its payload); `None` for a null value (a Kafka tombstone), which
    /// an empty value is not.
    pub fn value(&self) -> Option<&'a [u8]> {
        self.record.value()
    }
    /// The record's headers as (name, value) pairs, as Kafka headers: in the order sent,
    /// repeated names included; a value `None` is null.
    pub fn headers(&self) -> impl ExactSizeIterator<Item = (&'a str, Option<&'a [u8]>)> + 'a {
        self.record.headers()
    }
    /// The record's tags: string labels stored beside the payload.
    pub fn tags(&self) -> impl Iterator<Item = &'a str> + 'a {
        self.record.tags()
    }
    /// An owned copy, for keeping a record beyond the poll.
    pub fn to_owned(&self) -> ConsumedRecord {
        ConsumedRecord {
            topic: self.topic.to_string(),
            partition: self.partition,
            offset: self.offset(),
            timestamp_ms: self.timestamp_ms(),
            key: self.key().map(<[u8]>::to_vec),
            value: self.value().map(<[u8]>::to_vec),
            headers: self
                .headers()
                .map(|(k, v)| (k.to_string(), v.map(<[u8]>::to_vec)))
                .collect(),
            tags: self.tags().map(str::to_string).collect(),
        }
    }
}

/// An owned record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumedRecord {
    /// The topic the record was read from.
    pub topic: String,
    /// The partition the record was read from.
    pub partition: u32,
    /// The record's offset in its partition.
    pub offset: u64,
    /// The timestamp the producer gave the record, in milliseconds since the epoch.
    pub timestamp_ms: i64,
    /// The record's key, if it has one.
    pub key: Option<Vec<u8>>,
    /// The record's value (its payload); `None` for a null value (a Kafka tombstone).
    pub value: Option<Vec<u8>>,
    /// The record's headers as (name, value) pairs, as Kafka headers: in the order sent,
    /// repeated names included; a value `None` is null.
    pub headers: Vec<(String, Option<Vec<u8>>)>,
    /// The record's tags: string labels stored beside the payload.
    pub tags: Vec<String>,
}

impl FetchedPartition {
    fn iter(&self) -> impl Iterator<Item = ConsumerRecord<'_>> + '_ {
        let payload = self
            .frame
            .payload_slice(self.payload_offset, self.payload_len)
            .unwrap_or_default();
        let from = self.from_offset;
        let skipped = &self.skipped;
        BatchIter::new(payload)
            .map_while(Result::ok)
            .filter(move |b| skipped.binary_search(&b.header().base_offset).is_err())
            .flat_map(|b| b.records().into_iter().flatten())
            .filter(move |r| r.offset >= from)
            .map(move |record| ConsumerRecord {
                topic: &self.topic,
                partition: self.partition,
                record,
            })
    }
}

impl Records {
    /// The records in fetch order (per partition, offset order).
    pub fn iter(&self) -> impl Iterator<Item = ConsumerRecord<'_>> + '_ {
        self.parts.iter().flat_map(FetchedPartition::iter)
    }
    /// How many records this poll returned.
    pub fn count(&self) -> usize {
        self.parts.iter().map(|p| p.records).sum()
    }
    /// Whether this poll returned no records.
    pub fn is_empty(&self) -> bool {
        self.count() == 0
    }
    /// Owned copies of every record.
    pub fn to_owned(&self) -> Vec<ConsumedRecord> {
        self.iter().map(|r| r.to_owned()).collect()
    }
    /// (topic, partition, offset after the last record) for each partition in these records.
    pub fn positions(&self) -> impl Iterator<Item = (&str, u32, u64)> + '_ {
        self.parts
            .iter()
            .map(|p| (&*p.topic, p.partition, p.next_offset))
    }
    /// Keeps only the records of partitions `keep` accepts.
    pub(crate) fn retain_partitions(&mut self, mut keep: impl FnMut(&str, u32) -> bool) {
        self.parts.retain(|p| keep(&p.topic, p.partition));
    }
}

/// A partition's (index, start offset) as an assign resolved it.
type Resolved = Vec<(u32, u64)>;

enum Command {
    Assign {
        epoch: u64,
        topic: String,
        partitions: Option<Vec<u32>>,
        from: StartFrom,
        done: flume::Sender<Result<Resolved, ClientError>>,
    },
    Unassign {
        epoch: u64,
        partitions: Vec<(String, u32)>,
        done: flume::Sender<()>,
    },
    Seek {
        epoch: u64,
        topic: String,
        partition: u32,
        from: StartFrom,
    },
}

struct Fetched {
    epoch: u64,
    result: Result<Vec<FetchedPartition>, ClientError>,
}

/// The high watermark of each partition as its latest fetch reported it, written by the
/// fetcher thread (for lag).
type HighWatermarks = Arc<Mutex<HashMap<(Arc<str>, u32), u64>>>;

/// An assign-mode consumer with a prefetching fetcher thread.
pub struct Consumer {
    commands: Option<flume::Sender<Command>>,
    fetched: flume::Receiver<Fetched>,
    /// Fetches taken off `fetched` while waiting for the fetcher to answer a command (the
    /// fetcher may be blocked handing one over), in order, ahead of the channel.
    backlog: VecDeque<Fetched>,
    /// Bumped by every assign, unassign and seek; a fetch carries the epoch the fetcher had.
    epoch: u64,
    /// Per partition: the epoch of its last assign, unassign or seek. Fetched data of a
    /// partition from before that is stale; other partitions' data in the same fetch is not.
    changed: HashMap<(String, u32), u64>,
    assigned: BTreeSet<(String, u32)>,
    positions: BTreeMap<(String, u32), u64>,
    high_watermarks: HighWatermarks,
    fetcher: Option<std::thread::JoinHandle<()>>,
}

impl Consumer {
    /// Connects and starts the fetcher thread; nothing is fetched before [`assign`](Self::assign).
    pub fn new(client_cfg: ClientConfig, cfg: ConsumerConfig) -> Result<Consumer, ClientError> {
        let client = Client::connect(client_cfg)?;
        let (cmd_tx, cmd_rx) = flume::bounded(64);
        let (out_tx, out_rx) = flume::bounded(cfg.prefetch.max(1));
        let high_watermarks = HighWatermarks::default();
        let fetcher = Fetcher::new(client, cfg, cmd_rx, out_tx, high_watermarks.clone());
        let handle = std::thread::Builder::new()
            .name("rill-consumer".into())
            .spawn(move || fetcher.run())
            .map_err(|e| ClientError::Invalid(format!("cannot start the fetcher thread: {e}")))?;
        Ok(Consumer {
            commands: Some(cmd_tx),
            fetched: out_rx,
            backlog: VecDeque::new(),
            epoch: 0,
            changed: HashMap::new(),
            assigned: BTreeSet::new(),
            positions: BTreeMap::new(),
            high_watermarks,
            fetcher: Some(handle),
        })
    }

    fn command(&self, c: Command) -> Result<(), ClientError> {
        self.commands
            .as_ref()
            .and_then(|tx| tx.send(c).ok())
            .ok_or_else(|| ClientError::Invalid("the consumer's fetcher stopped".into()))
    }

    /// Adds `partitions` of `topic` (all when `None`) to the assignment, positioned by `from`.
    /// Returns the partitions assigned.
    pub fn assign(
        &mut self,
        topic: &str,
        partitions: Option<Vec<u32>>,
        from: StartFrom,
    ) -> Result<Vec<u32>, ClientError> {
        self.epoch += 1;
        let (done, wait) = flume::bounded(1);
        self.command(Command::Assign {
            epoch: self.epoch,
            topic: topic.to_string(),
            partitions,
            from,
            done,
        })?;
        let resolved = self.await_fetcher(wait)??;
        for &(p, at) in &resolved {
            let key = (topic.to_string(), p);
            self.changed.insert(key.clone(), self.epoch);
            self.assigned.insert(key.clone());
            self.positions.insert(key, at);
        }
        Ok(resolved.into_iter().map(|(p, _)| p).collect())
    }

    /// Removes partitions from the assignment: nothing more is fetched or returned for them,
    /// including records already prefetched.
    pub fn unassign(&mut self, partitions: &[(String, u32)]) -> Result<(), ClientError> {
        if partitions.is_empty() {
            return Ok(());
        }
        self.epoch += 1;
        let (done, wait) = flume::bounded(1);
        self.command(Command::Unassign {
            epoch: self.epoch,
            partitions: partitions.to_vec(),
            done,
        })?;
        self.await_fetcher(wait)?;
        let mut hw = self
            .high_watermarks
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        for key in partitions {
            self.changed.insert(key.clone(), self.epoch);
            self.assigned.remove(key);
            self.positions.remove(key);
            hw.remove(&(Arc::from(key.0.as_str()), key.1));
        }
        Ok(())
    }

    /// Waits for the fetcher's answer to a command, taking fetched responses aside meanwhile:
    /// a fetcher blocked handing over a response would never read the command.
    fn await_fetcher<T>(&mut self, reply: flume::Receiver<T>) -> Result<T, ClientError> {
        enum Got<T> {
            Reply(Result<T, flume::RecvError>),
            Fetched(Result<Fetched, flume::RecvError>),
        }
        loop {
            let got = flume::Selector::new()
                .recv(&reply, Got::Reply)
                .recv(&self.fetched, Got::Fetched)
                .wait();
            match got {
                Got::Reply(Ok(t)) => return Ok(t),
                Got::Fetched(Ok(f)) => self.backlog.push_back(f),
                Got::Reply(Err(_)) | Got::Fetched(Err(_)) => {
                    return Err(ClientError::Invalid(
                        "the consumer's fetcher stopped".into(),
                    ))
                }
            }
        }
    }

    /// The partitions assigned now.
    pub fn assignment(&self) -> Vec<(String, u32)> {
        self.assigned.iter().cloned().collect()
    }

    /// A partition's high watermark as its latest fetch reported it; `None` before the first
    /// fetch of the partition answered.
    pub fn high_watermark(&self, topic: &str, partition: u32) -> Option<u64> {
        self.high_watermarks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&(Arc::from(topic), partition))
            .copied()
    }

    /// How far a partition's position is behind its high watermark (as of the latest fetch).
    pub fn lag(&self, topic: &str, partition: u32) -> Option<u64> {
        let position = self.position(topic, partition)?;
        Some(
            self.high_watermark(topic, partition)?
                .saturating_sub(position),
        )
    }

    /// Moves one partition's position; records fetched before are dropped.
    pub fn seek(
        &mut self,
        topic: &str,
        partition: u32,
        from: StartFrom,
    ) -> Result<(), ClientError> {
        self.epoch += 1;
        let key = (topic.to_string(), partition);
        self.changed.insert(key.clone(), self.epoch);
        self.positions.remove(&key);
        self.command(Command::Seek {
            epoch: self.epoch,
            topic: topic.to_string(),
            partition,
            from,
        })
    }

    /// The offset after the last record `poll` returned for a partition (its start offset
    /// until then; `None` after a seek until the next records of it).
    pub fn position(&self, topic: &str, partition: u32) -> Option<u64> {
        self.positions.get(&(topic.to_string(), partition)).copied()
    }

    /// The next non-empty set of records, for async code: await it under your runtime's
    /// timeout (e.g. `tokio::time::timeout`). It never blocks a thread.
    pub async fn next_records(&mut self) -> Result<Records, ClientError> {
        while let Some(got) = self.backlog.pop_front() {
            if let Some(records) = self.accept(got)? {
                return Ok(records);
            }
        }
        loop {
            let got = self
                .fetched
                .recv_async()
                .await
                .map_err(|_| ClientError::Invalid("the consumer's fetcher stopped".into()))?;
            if let Some(records) = self.accept(got)? {
                return Ok(records);
            }
        }
    }

    /// Keeps the partitions of a fetch that no later seek, assign or unassign made stale.
    fn accept(&mut self, got: Fetched) -> Result<Option<Records>, ClientError> {
        let mut parts = match got.result {
            Ok(parts) => parts,
            Err(_) if got.epoch < self.epoch => return Ok(None),
            Err(e) => return Err(e),
        };
        parts.retain(|p| {
            let key = (p.topic.to_string(), p.partition);
            self.changed.get(&key).is_none_or(|&e| e <= got.epoch) && self.assigned.contains(&key)
        });
        if parts.is_empty() {
            return Ok(None);
        }
        for p in &parts {
            self.positions
                .insert((p.topic.to_string(), p.partition), p.next_offset);
        }
        Ok(Some(Records { parts }))
    }

    /// Records fetched so far, waiting up to `timeout` when there are none.
    pub fn poll(&mut self, timeout: Duration) -> Result<Records, ClientError> {
        let deadline = Instant::now() + timeout;
        while let Some(got) = self.backlog.pop_front() {
            if let Some(records) = self.accept(got)? {
                return Ok(records);
            }
        }
        loop {
            let got = match self.fetched.recv_deadline(deadline) {
                Ok(f) => f,
                Err(flume::RecvTimeoutError::Timeout) => return Ok(Records::default()),
                Err(flume::RecvTimeoutError::Disconnected) => {
                    return Err(ClientError::Invalid(
                        "the consumer's fetcher stopped".into(),
                    ))
                }
            };
            if let Some(records) = self.accept(got)? {
                return Ok(records);
            }
        }
    }
}

impl Drop for Consumer {
    fn drop(&mut self) {
        // Closing both channels stops the fetcher wherever it waits (a long poll ends within
        // `fetch_max_wait`).
        self.commands.take();
        drop(std::mem::replace(&mut self.fetched, flume::bounded(1).1));
        if let Some(t) = self.fetcher.take() {
            let _ = t.join();
        }
    }
}

/// A partition and the offset a fetch asked it for.
type Asked = Vec<((Arc<str>, u32), u64)>;

struct Fetcher {
    client: Client,
    cfg: ConsumerConfig,
    positions: BTreeMap<(Arc<str>, u32), u64>,
    epoch: u64,
    commands: flume::Receiver<Command>,
    out: flume::Sender<Fetched>,
    /// One pipelined connection per shard, each with at most one fetch in flight, so a
    /// long poll on an idle shard never delays data from a busy one.
    shards: HashMap<SocketAddr, PipelinedConnection>,
    /// Shard -> the offsets its in-flight fetch asked for.
    in_flight: HashMap<SocketAddr, Asked>,
    responses_tx: flume::Sender<(SocketAddr, Result<ResponseFrame, ClientError>)>,
    responses: flume::Receiver<(SocketAddr, Result<ResponseFrame, ClientError>)>,
    high_watermarks: HighWatermarks,
}

impl Fetcher {
    fn new(
        client: Client,
        cfg: ConsumerConfig,
        commands: flume::Receiver<Command>,
        out: flume::Sender<Fetched>,
        high_watermarks: HighWatermarks,
    ) -> Fetcher {
        let (responses_tx, responses) = flume::unbounded();
        Fetcher {
            client,
            cfg,
            positions: BTreeMap::new(),
            epoch: 0,
            commands,
            out,
            shards: HashMap::new(),
            in_flight: HashMap::new(),
            responses_tx,
            responses,
            high_watermarks,
        }
    }

    fn run(mut self) {
        loop {
            // Apply commands; with nothing assigned and nothing in flight, wait for one.
            loop {
                let idle = self.positions.is_empty() && self.in_flight.is_empty();
                let cmd = if idle {
                    match self.commands.recv() {
                        Ok(c) => Some(c),
                        Err(_) => return,
                    }
                } else {
                    match self.commands.try_recv() {
                        Ok(c) => Some(c),
                        Err(flume::TryRecvError::Empty) => None,
                        Err(flume::TryRecvError::Disconnected) => return,
                    }
                };
                match cmd {
                    Some(c) => self.apply(c),
                    None => break,
                }
            }
            if let Err(e) = self.issue_fetches() {
                // A broker restarting or a leader moving: keep trying, as Kafka consumers do;
                // the application sees empty polls meanwhile, not errors.
                if e.is_retriable() {
                    log::debug!("fetch not sent ({e}); retrying");
                    std::thread::sleep(Duration::from_millis(100));
                    continue;
                }
                if self
                    .out
                    .send(Fetched {
                        epoch: self.epoch,
                        result: Err(e),
                    })
                    .is_err()
                {
                    return;
                }
                std::thread::sleep(Duration::from_millis(100));
                continue;
            }
            let (addr, response) = match self.responses.recv_timeout(Duration::from_millis(100)) {
                Ok(r) => r,
                Err(flume::RecvTimeoutError::Timeout) => continue,
                Err(flume::RecvTimeoutError::Disconnected) => return,
            };
            let asked = self.in_flight.remove(&addr).unwrap_or_default();
            let result = match response {
                Ok(frame) => self.take_response(frame, &asked),
                Err(e) if e.is_retriable() => {
                    log::debug!(
                        "fetch from {addr} failed ({e}); retrying after a metadata refresh"
                    );
                    self.shards.remove(&addr);
                    let _ = self.client.refresh_metadata();
                    std::thread::sleep(Duration::from_millis(50));
                    continue;
                }
                Err(e) => Err(e),
            };
            if matches!(&result, Ok(parts) if parts.is_empty()) {
                continue;
            }
            // Blocks while `prefetch` responses wait for the application: back-pressure.
            // Meanwhile no fetch reports the high watermarks, so they are asked for (lag
            // keeps up with new data while the application does not poll).
            let mut fetched = Fetched {
                epoch: self.epoch,
                result,
            };
            let every = self.cfg.fetch_max_wait.max(Duration::from_millis(100));
            loop {
                match self.out.send_timeout(fetched, every) {
                    Ok(()) => break,
                    Err(flume::SendTimeoutError::Timeout(back)) => {
                        fetched = back;
                        self.refresh_high_watermarks();
                    }
                    Err(flume::SendTimeoutError::Disconnected(_)) => return,
                }
            }
        }
    }

    /// Records a high watermark; a late answer to an earlier request never moves it back.
    fn note_high_watermark(&self, key: &(Arc<str>, u32), hw: u64) {
        let mut all = self
            .high_watermarks
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let at = all.entry(key.clone()).or_insert(hw);
        *at = (*at).max(hw);
    }

    /// The high watermark of every assigned partition by ListOffsets `latest` (one request
    /// per shard), for while no fetch is in flight to report them. Failures are skipped: the
    /// next fetch or refresh reports them.
    fn refresh_high_watermarks(&mut self) {
        let mut by_addr: BTreeMap<SocketAddr, Vec<ListOffsetsPartition>> = BTreeMap::new();
        for (topic, partition) in self.positions.keys() {
            if let Ok(route) = self.client.metadata().route(topic, *partition) {
                by_addr
                    .entry(route.addr)
                    .or_default()
                    .push(ListOffsetsPartition {
                        topic: topic.to_string(),
                        partition: *partition,
                        timestamp: LATEST_TIMESTAMP,
                    });
            }
        }
        for (addr, partitions) in by_addr {
            let req = ListOffsetsRequest { partitions };
            let got: Result<(ListOffsetsResponse, _), _> =
                self.client.call(addr, ApiKey::ListOffsets, &req, &[]);
            let Ok((resp, _)) = got else { continue };
            for r in resp.partitions {
                let key = (Arc::from(r.topic.as_str()), r.partition);
                if !self.positions.contains_key(&key) {
                    continue; // not asked for
                }
                if let (0, Ok(hw)) = (r.error_code, u64::try_from(r.offset)) {
                    self.note_high_watermark(&key, hw);
                }
            }
        }
    }

    /// Sends a fetch to every shard holding assigned partitions that has none in flight.
    fn issue_fetches(&mut self) -> Result<(), ClientError> {
        let mut by_addr: BTreeMap<SocketAddr, Asked> = BTreeMap::new();
        for (key, &offset) in &self.positions {
            let route = match self.client.metadata().route(&key.0, key.1) {
                Ok(r) => r,
                Err(_) => {
                    self.client.refresh_metadata()?;
                    self.client.metadata().route(&key.0, key.1)?
                }
            };
            if !self.in_flight.contains_key(&route.addr) {
                by_addr
                    .entry(route.addr)
                    .or_default()
                    .push((key.clone(), offset));
            }
        }
        for (addr, asked) in by_addr {
            if self
                .shards
                .get(&addr)
                .is_some_and(PipelinedConnection::is_dead)
            {
                self.shards.remove(&addr);
            }
            if !self.shards.contains_key(&addr) {
                let cfg = self.client.config();
                let conn = PipelinedConnection::connect(
                    addr,
                    cfg,
                    cfg.request_timeout + self.cfg.fetch_max_wait,
                    1,
                    super::connection::DEFAULT_MAX_RESPONSE_BYTES,
                );
                match conn {
                    Ok(conn) => {
                        self.shards.insert(addr, conn);
                    }
                    // The shard's broker is down (its partitions are being re-led): the other
                    // shards are fetched from now, and these partitions are routed again with
                    // fresh metadata at the next round (paced by the wait for responses).
                    // Returning here instead left every partition unfetched, and the stale
                    // route was never refreshed: a consumer stopped for good when a leader's
                    // broker stopped.
                    Err(e) if e.is_retriable() => {
                        log::debug!("fetch from {addr} not sent ({e}); refreshing metadata");
                        let _ = self.client.refresh_metadata();
                        continue;
                    }
                    Err(e) => return Err(e),
                }
            }
            let req = FetchRequest {
                max_wait_ms: self
                    .cfg
                    .fetch_max_wait
                    .as_millis()
                    .min(u128::from(u32::MAX)) as u32,
                min_bytes: self.cfg.fetch_min_bytes,
                max_bytes: self.cfg.fetch_max_bytes,
                partitions: asked
                    .iter()
                    .map(|((topic, p), offset)| FetchPartition {
                        topic: topic.to_string(),
                        partition: *p,
                        offset: *offset,
                        max_bytes: self.cfg.partition_max_bytes,
                    })
                    .collect(),
            };
            // read_committed needs Fetch v1 (the isolation level and the aborted list).
            let (api, version, meta) = match &self.cfg.tags {
                None if self.cfg.isolation == Isolation::ReadCommitted => (
                    ApiKey::Fetch,
                    1,
                    encode_meta(&FetchRequestV1 {
                        fetch: req,
                        isolation: self.cfg.isolation.to_wire(),
                    }),
                ),
                None => (ApiKey::Fetch, 0, encode_meta(&req)),
                Some(filter) => (
                    ApiKey::FilteredFetch,
                    0,
                    encode_meta(&FilteredFetchRequest {
                        fetch: req,
                        tags: filter.tags().to_vec(),
                        match_all: filter.is_all(),
                    }),
                ),
            };
            let meta = meta.map_err(|e| ClientError::Invalid(e.to_string()))?;
            let tx = self.responses_tx.clone();
            let completion: Completion = Box::new(move |r, _written| {
                let _ = tx.send((addr, r));
            });
            self.shards
                .get(&addr)
                .expect("inserted above")
                .submit_version(api, version, &meta, Vec::new(), Some(completion))?;
            self.in_flight.insert(addr, asked);
        }
        Ok(())
    }

    /// Where `from` is in a partition. A leader that moved or died is looked up again with
    /// fresh metadata, for up to the request timeout, as Kafka's consumer retries its offset
    /// lookups: the cached route may still name a broker killed a moment ago, and failing
    /// at once failed every rebalance that gave this consumer such a partition, for as long
    /// as the cache stayed stale.
    fn resolve(
        &mut self,
        topic: &str,
        partition: u32,
        from: StartFrom,
    ) -> Result<u64, ClientError> {
        // read_committed's end is the last stable offset (Kafka's consumer asks ListOffsets
        // read_committed): a fetch at the high watermark names it.
        let stable_end = self.cfg.isolation == Isolation::ReadCommitted && self.cfg.tags.is_none();
        let within = self.client.config().request_timeout;
        let what = format!("{topic}-{partition}: offset lookup");
        self.client
            .retrying(within, RESOLVE_BACKOFF, &what, |client| {
                Ok(match from {
                    StartFrom::Beginning => client
                        .list_offset(topic, partition, EARLIEST_TIMESTAMP)?
                        .unwrap_or(0),
                    StartFrom::End => {
                        let hw = client
                            .list_offset(topic, partition, LATEST_TIMESTAMP)?
                            .unwrap_or(0);
                        if stable_end {
                            let (r, _) = client.fetch_isolated(
                                topic,
                                partition,
                                hw,
                                Duration::ZERO,
                                1,
                                1,
                                Isolation::ReadCommitted,
                            )?;
                            r.last_stable_offset.min(hw)
                        } else {
                            hw
                        }
                    }
                    StartFrom::Offset(o) => o,
                    StartFrom::Timestamp(ts) => match client.list_offset(topic, partition, ts)? {
                        Some(o) => o,
                        None => client
                            .list_offset(topic, partition, LATEST_TIMESTAMP)?
                            .unwrap_or(0),
                    },
                })
            })
    }

    fn apply(&mut self, c: Command) {
        match c {
            Command::Assign {
                epoch,
                topic,
                partitions,
                from,
                done,
            } => {
                self.epoch = epoch;
                let r = (|| {
                    // Unknown topic, or a partition beyond the cached count (partitions were
                    // added): the cache is stale, refresh it once.
                    let cached = self.client.metadata().partitions(&topic).ok();
                    let beyond = |n: u32| {
                        partitions
                            .as_ref()
                            .is_some_and(|ps| ps.iter().any(|&p| p >= n))
                    };
                    let n = match cached {
                        Some(n) if !beyond(n) => n,
                        _ => {
                            self.client.refresh_metadata()?;
                            self.client.metadata().partitions(&topic)?
                        }
                    };
                    let parts = partitions.unwrap_or_else(|| (0..n).collect());
                    let name: Arc<str> = Arc::from(topic.as_str());
                    let mut resolved = Vec::with_capacity(parts.len());
                    for p in &parts {
                        if *p >= n {
                            return Err(ClientError::UnknownPartition {
                                topic: topic.clone(),
                                partition: *p,
                                partitions: n,
                            });
                        }
                        resolved.push((*p, self.resolve(&topic, *p, from)?));
                    }
                    for &(p, at) in &resolved {
                        self.positions.insert((name.clone(), p), at);
                    }
                    Ok(resolved)
                })();
                let _ = done.send(r);
            }
            Command::Unassign {
                epoch,
                partitions,
                done,
            } => {
                self.epoch = epoch;
                for (topic, p) in partitions {
                    self.positions.remove(&(Arc::from(topic.as_str()), p));
                }
                let _ = done.send(());
            }
            Command::Seek {
                epoch,
                topic,
                partition,
                from,
            } => {
                self.epoch = epoch;
                match self.resolve(&topic, partition, from) {
                    Ok(at) => {
                        self.positions
                            .insert((Arc::from(topic.as_str()), partition), at);
                    }
                    Err(e) => {
                        let _ = self.out.send(Fetched {
                            epoch,
                            result: Err(e),
                        });
                    }
                }
            }
        }
    }

    /// Validates a fetch response and moves the positions it answered. Partitions whose
    /// position changed while the fetch was in flight (a seek) are dropped.
    fn take_response(
        &mut self,
        frame: ResponseFrame,
        asked: &[((Arc<str>, u32), u64)],
    ) -> Result<Vec<FetchedPartition>, ClientError> {
        let invalid = |e: crate::protocol::frame::FrameError| ClientError::Invalid(e.to_string());
        // A filtered fetch's partitions say where their next fetch starts.
        let filtered = self.cfg.tags.is_some();
        let committed = !filtered && self.cfg.isolation == Isolation::ReadCommitted;
        type Answer = (FetchPartitionResult, Option<u64>, Vec<AbortedTransaction>);
        let partitions: Vec<Answer> = if filtered {
            let resp: FilteredFetchResponse = frame.decode_meta().map_err(invalid)?;
            resp.partitions
                .into_iter()
                .map(|p| (p.result, Some(p.next_offset), Vec::new()))
                .collect()
        } else if committed {
            let resp: FetchResponseV1 = frame.decode_meta().map_err(invalid)?;
            resp.partitions
                .into_iter()
                .map(|p| (p.result, None, p.aborted))
                .collect()
        } else {
            let resp: FetchResponse = frame.decode_meta().map_err(invalid)?;
            resp.partitions
                .into_iter()
                .map(|p| (p, None, Vec::new()))
                .collect()
        };
        let frame = Arc::new(frame);
        let mut out = Vec::new();
        for (r, scanned_to, aborted) in partitions {
            let Some((key, from)) = asked
                .iter()
                .find(|((t, p), _)| **t == *r.topic && *p == r.partition)
                .cloned()
            else {
                continue;
            };
            if self.positions.get(&key) != Some(&from) {
                continue;
            }
            let topic = key.0.clone();
            match ErrorCode::from_code(r.error_code) {
                ErrorCode::None => self.note_high_watermark(&key, r.high_watermark),
                ErrorCode::OffsetOutOfRange => {
                    let to = match self.cfg.auto_offset_reset {
                        OffsetReset::Earliest => StartFrom::Beginning,
                        OffsetReset::Latest => StartFrom::End,
                        OffsetReset::Error => {
                            return Err(ClientError::broker(ErrorCode::OffsetOutOfRange, r.message))
                        }
                    };
                    let at = self.resolve(&topic, r.partition, to)?;
                    log::warn!(
                        "{topic}-{}: offset {from} out of range, reset to {at}",
                        r.partition
                    );
                    self.positions.insert(key, at);
                    continue;
                }
                // Damaged or missing data on the broker's disk: retrying reads the same bytes,
                // so the application is told (Kafka's consumers raise it too).
                ErrorCode::CorruptMessage => {
                    return Err(ClientError::broker(
                        ErrorCode::CorruptMessage,
                        format!("{topic}-{} at offset {from}: {}", r.partition, r.message),
                    ))
                }
                code if code.is_retriable() => {
                    let _ = self.client.refresh_metadata();
                    continue;
                }
                code => return Err(ClientError::broker(code, r.message)),
            }
            let payload = frame
                .payload_slice(r.payload_offset, r.payload_len)
                .map_err(|e| ClientError::Invalid(e.to_string()))?;
            // Validate every batch once here (both CRCs, rkyv, offsets growing from the one
            // asked for; compaction and tag filters leave gaps between batches, so a batch may start past the
            // offset before it): untrusted bytes, and the broker's sendfile path does not read
            // them.
            let corrupt = |what: String| {
                ClientError::broker(
                    ErrorCode::CorruptMessage,
                    format!("{topic}-{} fetched at offset {from}: {what}", r.partition),
                )
            };
            // Records before a damaged batch are delivered; the next fetch starts at the damage
            // and reports it.
            let mut next = from;
            let mut records = 0usize;
            let mut expected: Option<u64> = None;
            let mut valid_len = 0usize;
            let mut whole = true;
            let mut skip = TxnSkipper::new(committed, aborted);
            let mut skipped = Vec::new();
            for batch in BatchIter::new(payload) {
                // Offsets and the body checked once each (rkyv validation is the cost here).
                let checked = match &batch {
                    Ok(b) => {
                        let h = b.header();
                        match expected {
                            None if h.next_offset() <= from => Err(format!(
                                "the first batch ends at offset {}, before {from}",
                                h.next_offset()
                            )),
                            Some(want) if h.base_offset < want => Err(format!(
                                "a batch starts at offset {} inside one that ends at {want}",
                                h.base_offset
                            )),
                            _ => b
                                .records()
                                .map(|body| (b, body.filter(|rec| rec.offset >= from).count()))
                                .map_err(|e| e.to_string()),
                        }
                    }
                    // A sendfile range may end inside a batch: the rest comes next fetch.
                    Err(BatchError::Truncated { .. }) => {
                        whole = false;
                        break;
                    }
                    Err(e) => Err(e.to_string()),
                };
                let (b, count) = match checked {
                    Ok(ok) => ok,
                    Err(_) if next > from => {
                        whole = false;
                        break;
                    }
                    Err(what) => return Err(corrupt(what)),
                };
                let h = b.header();
                expected = Some(h.next_offset());
                if skip.skips(b) {
                    skipped.push(h.base_offset);
                } else {
                    records += count;
                }
                next = next.max(h.next_offset());
                valid_len += b.len();
            }
            // Past the batches the broker skipped, unless the response was cut short here.
            if let Some(scanned_to) = scanned_to.filter(|_| whole) {
                next = next.max(scanned_to);
            }
            if next > from {
                self.positions.insert(key, next);
                out.push(FetchedPartition {
                    frame: frame.clone(),
                    topic,
                    partition: r.partition,
                    payload_offset: r.payload_offset,
                    payload_len: valid_len as u32,
                    from_offset: from,
                    skipped,
                    next_offset: next,
                    records,
                });
            }
        }
        Ok(out)
    }
}
