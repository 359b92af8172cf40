//! A partition on its shard: its log, its high watermark, and who waits on it.
//!
//! Single node (until replication): the high watermark is the offset below which data is as
//! durable as `--fsync` promises (fsynced for `always`, written for `interval`/`never`).
//! Producers are acknowledged and consumers see records only below it, so a consumer never
//! reads a record that a crash could take back.

pub mod cleaner;
pub mod group_commit;
mod idempotence;
pub use idempotence::snapshot_producers;
pub mod producer_snapshot;
pub mod producer_state;
pub mod read_ahead;
#[cfg(test)]
mod read_ahead_tests;
pub mod replica;
pub mod tail_cache;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod write_caching_tests;

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::rc::Rc;
use std::time::Instant;

use event_listener::Event;
use futures_util::future::join_all;

use crate::batch::BatchView;
use crate::log::partition_log::{self, PartitionLog};
use crate::log::segment::SegmentReader;
use crate::log::{FileReads, Flushed, FsyncPolicy, LogError, ReadChunk};
use crate::protocol::ErrorCode;
use crate::replication::LeaderEpochs;
use crate::topic_config::TopicSettings;
use rill_shards::rt::ReadResult;
use tail_cache::TailCache;

/// A producer waiting for its batch to reach the high watermark.
struct AckWaiter {
    offset: u64,
    done: flume::Sender<Result<(), ErrorCode>>,
}

pub struct Partition {
    pub topic: Rc<str>,
    pub topic_id: u64,
    pub index: u32,
    /// Shard-unique key of this partition in the tail cache.
    pub cache_key: u64,
    /// Owned: the group commit and the shard ask the partition (flush, sync, reopen), and it
    /// marks itself failed.
    log: RefCell<PartitionLog>,
    high_watermark: Cell<u64>,
    /// Where the data below the high watermark ends on disk (for sendfile ranges).
    hw_position: Cell<Flushed>,
    acks: RefCell<VecDeque<AckWaiter>>,
    /// Fetches long-polling this partition; notified when the high watermark moves.
    data: Event,
    fsync: FsyncPolicy,
    deleted: Cell<bool>,
    decommissioned: Cell<bool>,
    /// The topic's settings over the broker defaults; replaced when its configs change.
    settings: RefCell<TopicSettings>,
    /// The high watermark last written to the partition's checkpoint file.
    checkpointed: Cell<u64>,
    /// The epochs this log holds (its leader-epoch file); loaded by the first [`Self::lead`].
    epochs: RefCell<Option<LeaderEpochs>>,
    /// The leader epoch stamped into appended batches (set by [`Self::lead`]).
    leader_epoch: Cell<u32>,
    /// Stored bytes appended, and handed to fetches, since this process opened it (metrics).
    bytes_in: Cell<u64>,
    bytes_out: Cell<u64>,
    /// Where the local log is written, as durable as `--fsync` promises: what acks=1 waits
    /// for and what followers may fetch. With one replica it is the high watermark.
    durable: Cell<Flushed>,
    /// The end producers are acknowledged to and a replicated role counts as this replica's:
    /// the durable end, or with write caching the log end while the bytes not yet written
    /// stay within `--write-caching-max-bytes`. Never goes back within a log.
    acked: Cell<u64>,
    /// One replica, leader of several, or follower ([`replica`]).
    role: RefCell<replica::Role>,
    /// Idempotent producers' last batches here: moved by every append, cut with the log
    /// ([`idempotence`]).
    producers: RefCell<producer_state::ProducerStates>,
    /// The segment count and log end at the last producer-state snapshot (written again
    /// after a roll).
    snapshot_segments: Cell<usize>,
    snapshot_end: Cell<Option<u64>>,
    /// The producer state as it was after the append that rolled a segment, and the log end
    /// it covers: written as the snapshot once the log is durable to that end.
    roll_snapshot: RefCell<Option<(producer_state::ProducerStates, u64)>>,
    /// Segments the log had at the last flush (segments roll when flushed).
    flushed_segments: Cell<usize>,
    /// While the producer state is rebuilt from the log: how many rebuilds run, and the
    /// producer batches appended meanwhile (each rebuild replays those from its start).
    replay_journal: RefCell<(usize, Vec<(producer_state::ProducerBatch, u64)>)>,
    /// The copy read started for this partition's next fetch, if any.
    read_ahead: read_ahead::ReadAheadSlot,
}

/// What `DescribePartitions` reports about one partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionStats {
    pub log_start_offset: u64,
    pub log_end_offset: u64,
    pub high_watermark: u64,
    pub segments: u32,
    pub size_bytes: u64,
}

/// Limits on a fetch of one partition.
#[derive(Debug, Clone, Copy)]
pub struct ReadLimits {
    pub max_bytes: usize,
    pub file_reads: FileReads,
}

impl Partition {
    pub fn new(
        topic: Rc<str>,
        topic_id: u64,
        index: u32,
        cache_key: u64,
        mut log: PartitionLog,
        fsync: FsyncPolicy,
        settings: TopicSettings,
    ) -> Partition {
        log.set_segment_limits(settings.segment_bytes, settings.segment_age);
        let end = log.end_position();
        let hw = end.offset;
        Partition {
            hw_position: Cell::new(end),
            durable: Cell::new(end),
            acked: Cell::new(end.offset),
            role: RefCell::new(replica::Role::Single),
            topic,
            topic_id,
            index,
            cache_key,
            log: RefCell::new(log),
            high_watermark: Cell::new(hw),
            bytes_in: Cell::new(0),
            bytes_out: Cell::new(0),
            acks: RefCell::new(VecDeque::new()),
            data: Event::new(),
            fsync,
            deleted: Cell::new(false),
            decommissioned: Cell::new(false),
            settings: RefCell::new(settings),
            checkpointed: Cell::new(0),
            epochs: RefCell::new(None),
            leader_epoch: Cell::new(0),
            producers: RefCell::new(producer_state::ProducerStates::new()),
            snapshot_segments: Cell::new(0),
            snapshot_end: Cell::new(None),
            roll_snapshot: RefCell::new(None),
            flushed_segments: Cell::new(0),
            replay_journal: RefCell::new((0, Vec::new())),
            read_ahead: Rc::new(RefCell::new(None)),
        }
    }

    /// This broker leads the partition at `epoch` (from the metadata): records that the epoch
    /// starts at the log end in the leader-epoch file (loaded on the first call and cut to the
    /// log end, since it may be durable before the records it names), durably, before any
    /// batch is stamped with it. A damaged file, or an epoch older than the file's latest, is
    /// an error naming the file. File I/O runs on the blocking pool.
    pub async fn lead(&self, epoch: u32) -> Result<(), LogError> {
        let dir = self.dir();
        let corrupt = |what: String| LogError::Corrupt {
            path: dir.join(crate::log::leader_epoch::LEADER_EPOCH_FILE),
            position: 0,
            what,
        };
        let loaded = self.epochs.borrow().clone();
        let mut epochs = match loaded {
            Some(e) => e,
            None => {
                let d = dir.clone();
                let entries = rill_shards::rt::spawn_blocking(move || {
                    crate::log::leader_epoch::read_leader_epochs(&d)
                })
                .await?;
                LeaderEpochs::from_entries(entries).map_err(|e| corrupt(e.to_string()))?
            }
        };
        let log_end = self.log_end_offset();
        let mut changed = epochs.truncate_to(log_end);
        changed |= epochs
            .assign(epoch, log_end)
            .map_err(|e| corrupt(e.to_string()))?;
        if changed {
            let entries = epochs.entries().to_vec();
            let d = dir.clone();
            rill_shards::rt::spawn_blocking(move || {
                crate::log::leader_epoch::write_leader_epochs(&d, &entries)
            })
            .await?;
        }
        *self.epochs.borrow_mut() = Some(epochs);
        self.leader_epoch.set(epoch);
        Ok(())
    }

    /// The leader epoch appended batches are stamped with.
    pub fn leader_epoch(&self) -> u32 {
        self.leader_epoch.get()
    }

    /// The epochs this log holds, once [`Self::lead`] loaded them.
    pub fn leader_epochs(&self) -> Option<LeaderEpochs> {
        self.epochs.borrow().clone()
    }

    /// Marks the partition decommissioned (from the metadata): writes are refused from now on.
    pub fn set_decommissioned(&self, yes: bool) {
        self.decommissioned.set(yes);
    }

    pub fn is_decommissioned(&self) -> bool {
        self.decommissioned.get()
    }

    pub fn settings(&self) -> TopicSettings {
        self.settings.borrow().clone()
    }

    /// Whether a producer may write a batch of `len` bytes here: not decommissioned, and within
    /// the topic's `max.message.bytes`. Asked by the produce handler of either protocol.
    pub fn check_produce(&self, len: usize) -> Result<(), (ErrorCode, String)> {
        if self.is_decommissioned() {
            return Err((
                ErrorCode::PolicyViolation,
                format!(
                    "{}-{} is decommissioned: writes stopped",
                    self.topic, self.index
                ),
            ));
        }
        check_message_bytes(len, self.max_message_bytes())
    }

    /// A compacted topic keeps the latest record per key, so a record without a key has no
    /// place in it: refused as Kafka does (INVALID_RECORD), naming the record.
    pub fn check_keys(&self, batch: &BatchView<'_>) -> Result<(), (ErrorCode, String)> {
        if !self.settings.borrow().cleanup.compact {
            return Ok(());
        }
        let records = batch
            .records()
            .map_err(|e| (ErrorCode::CorruptMessage, e.to_string()))?;
        for (i, r) in records.enumerate() {
            if r.key().is_none() {
                return Err((
                    ErrorCode::InvalidRecord,
                    format!(
                        "{}-{} is compacted (cleanup.policy={}): record {i} of the batch has \
                         no key",
                        self.topic,
                        self.index,
                        self.settings.borrow().cleanup
                    ),
                ));
            }
        }
        Ok(())
    }

    /// The topic's `max.message.bytes`.
    pub fn max_message_bytes(&self) -> usize {
        self.settings.borrow().max_message_bytes
    }

    /// Takes new topic settings (an altered config); segment limits apply from the next roll.
    pub fn set_settings(&self, settings: TopicSettings) {
        self.log
            .borrow_mut()
            .set_segment_limits(settings.segment_bytes, settings.segment_age);
        *self.settings.borrow_mut() = settings;
    }

    pub fn stats(&self) -> PartitionStats {
        let log = self.log.borrow();
        PartitionStats {
            log_start_offset: log.log_start_offset(),
            log_end_offset: log.next_offset(),
            high_watermark: self.high_watermark.get(),
            segments: log.segment_count() as u32,
            size_bytes: log.size_bytes(),
        }
    }

    /// DeleteRecords: makes offsets below `offset` unreadable (at most the high watermark) and
    /// deletes the segments wholly below it. Returns the new log start offset.
    pub async fn truncate_before(&self, offset: u64) -> Result<u64, LogError> {
        let hw = self.high_watermark.get();
        let (gone, dir, start) = {
            let mut log = self.log.borrow_mut();
            let gone = log.truncate_before(offset, hw)?;
            (gone, log.dir().to_path_buf(), log.log_start_offset())
        };
        self.forget_producers_before(start);
        partition_log::remove_segments(&dir, gone).await?;
        Ok(start)
    }

    /// Retention: deletes up to `max` closed segments past the topic's time or size limit.
    /// Returns how many went.
    pub async fn enforce_retention(&self, now_ms: i64, max: usize) -> Result<usize, LogError> {
        let s = self.settings();
        if self.decommissioned.get() {
            // No write will ever roll its active segment: retire it once all of its data is
            // past retention, so every file can go.
            partition_log::retire_if_expired(&self.log, now_ms, s.retention).await?;
        }
        let (gone, dir) = {
            let mut log = self.log.borrow_mut();
            // A compact-only topic keeps its segments whatever their age or size (Kafka).
            let (retention, retention_bytes) = if s.cleanup.delete {
                (s.retention, s.retention_bytes)
            } else {
                (None, None)
            };
            let gone = log.expire(now_ms, retention, retention_bytes, max);
            (gone, log.dir().to_path_buf())
        };
        self.forget_producers_before(self.log_start_offset());
        let n = gone.len();
        if n > 0 {
            log::info!(
                "{}-{}: retention deleted {n} segments",
                self.topic,
                self.index
            );
        }
        partition_log::remove_segments(&dir, gone).await?;
        Ok(n)
    }

    pub fn high_watermark(&self) -> u64 {
        self.high_watermark.get()
    }

    pub fn log_start_offset(&self) -> u64 {
        self.log.borrow().log_start_offset()
    }

    pub fn log_end_offset(&self) -> u64 {
        self.log.borrow().next_offset()
    }

    pub fn fsync(&self) -> FsyncPolicy {
        self.fsync
    }

    /// Appends validated batches (the payload of one produce for this partition). Returns the
    /// base offset of the first and the offset after the last.
    pub fn append(
        &self,
        batches: &[BatchView<'_>],
        now_ms: i64,
        cache: &TailCache,
    ) -> Result<(u64, u64), LogError> {
        let mut stamped = Vec::with_capacity(batches.len());
        let mut next = self.log_end_offset();
        for b in batches {
            let mut owned = bytes::BytesMut::from(b.bytes());
            crate::batch::stamp_leader(&mut owned, next, now_ms, self.stamp_epoch());
            next += u64::from(b.header().record_count);
            stamped.push((owned.freeze(), b.header().record_count));
        }
        self.append_stamped(stamped, cache)
    }

    /// The epoch this partition knows producer `id` at (from its batches or markers).
    pub fn producer_epoch(&self, id: i64) -> Option<i16> {
        self.producers.borrow().get(id).map(|e| e.epoch)
    }

    /// The leader epoch as the batch header holds it (i32, as Kafka's).
    pub fn stamp_epoch(&self) -> i32 {
        i32::try_from(self.leader_epoch.get()).unwrap_or(i32::MAX)
    }

    /// Appends validated batches whose base offsets were stamped from this partition's log
    /// end (see the produce handler). Returns the first offset and the offset after the last.
    pub fn append_stamped(
        &self,
        batches: Vec<(bytes::Bytes, u32)>,
        cache: &TailCache,
    ) -> Result<(u64, u64), LogError> {
        if self.is_follower() {
            // Only the fetcher writes a follower's log, at the leader's offsets.
            return Err(LogError::Failed(format!(
                "{}-{} is a follower replica here",
                self.topic, self.index
            )));
        }
        let (first, end) = self.append_unchecked(batches, cache)?;
        self.leader_appended(end);
        self.acknowledge(self.ackable_end());
        Ok((first, end))
    }

    /// Appends stamped batches at the log end, whatever the role.
    fn append_unchecked(
        &self,
        batches: Vec<(bytes::Bytes, u32)>,
        cache: &TailCache,
    ) -> Result<(u64, u64), LogError> {
        if self.deleted.get() {
            return Err(LogError::Failed("partition is being deleted".into()));
        }
        let mut log = self.log.borrow_mut();
        let first = log.next_offset();
        for (bytes, count) in batches {
            let base = log.next_offset();
            let len = bytes.len() as u64;
            log.append_stamped(bytes.clone(), count)?;
            self.record_producer_batch(&bytes, base);
            self.bytes_in.set(self.bytes_in.get() + len);
            cache.insert(self.cache_key, base, log.next_offset(), bytes);
        }
        Ok((first, log.next_offset()))
    }

    /// Counts stored bytes a fetch answered with (once per answer, not per long-poll pass).
    pub fn count_bytes_out(&self, n: usize) {
        self.bytes_out.set(self.bytes_out.get() + n as u64);
    }

    /// (bytes appended, bytes served to fetches) since this process opened the partition.
    pub fn traffic(&self) -> (u64, u64) {
        (self.bytes_in.get(), self.bytes_out.get())
    }

    /// Bytes appended and not yet handed to a write (what the next group-commit round takes).
    pub fn pending_bytes(&self) -> usize {
        self.log.borrow().pending_bytes()
    }

    /// A receiver that completes when `offset` is written locally as durably as `--fsync`
    /// promises (acks=1; with one replica that is the high watermark, so acks=all too).
    pub fn wait_for_ack(&self, offset: u64) -> flume::Receiver<Result<(), ErrorCode>> {
        let (tx, rx) = flume::bounded(1);
        if offset < self.acked.get() {
            let _ = tx.send(Ok(()));
        } else if let Some(f) = self.log.borrow().failure() {
            log::debug!("ack refused: {f}");
            let _ = tx.send(Err(ErrorCode::KafkaStorageError));
        } else {
            self.acks
                .borrow_mut()
                .push_back(AckWaiter { offset, done: tx });
        }
        rx
    }

    /// A flush left the log durable (as `--fsync` promises) up to `to`: wakes the acks=1
    /// waits below it and moves the high watermark (with one replica to `to` itself; a
    /// leader's moves with its ISR, a follower's with its leader's).
    pub fn advance(&self, to: Flushed) {
        let end = to.offset;
        let old = self.durable.get().offset;
        assert!(end >= old, "durable end never goes back ({old} -> {end})");
        assert!(
            end <= self.log.borrow().next_offset(),
            "durable end <= log end"
        );
        if end == old {
            return;
        }
        self.durable.set(to);
        let (segments, log_end) = {
            let log = self.log.borrow();
            (log.segment_count(), log.next_offset())
        };
        if segments != self.flushed_segments.replace(segments) {
            self.producer_state_rolled(log_end);
        }
        if end == self.high_watermark.get() {
            // Write caching raised the high watermark first: its byte position is known now.
            self.hw_position.set(to);
        }
        self.acknowledge(self.ackable_end());
        // Waits for the durable end (role changes) listen here too.
        self.data.notify(usize::MAX);
    }

    /// Where producers may be acknowledged to now: the durable end, or with write caching
    /// the log end, unless the bytes not yet written passed the bound (then the disk first).
    fn ackable_end(&self) -> u64 {
        let durable = self.durable.get().offset;
        if !self.write_caching() {
            return durable;
        }
        let log = self.log.borrow();
        let max = self.settings.borrow().write_caching_max_bytes;
        if log.failure().is_some() || log.unwritten_bytes() > max {
            return durable;
        }
        log.next_offset()
    }

    /// When the group commit should write the batches pending here since `since` (when the
    /// partition was marked dirty): now (`None`), or not before the instant returned. Without
    /// write caching, now: producers wait for the write. With it, the acknowledged bytes are
    /// written behind once `--write-caching-flush-bytes` are pending (at most half the
    /// `--write-caching-max-bytes` bound, so acknowledgements keep coming from memory) or
    /// `--write-caching-flush-ms` after `since`. A failed or deleted partition is due at once
    /// (its flush reports the failure, as before).
    pub fn write_deferred_until(&self, since: Instant, now: Instant) -> Option<Instant> {
        if !self.write_caching() || self.is_deleted() {
            return None;
        }
        let (behind, max) = {
            let s = self.settings.borrow();
            (s.write_behind, s.write_caching_max_bytes)
        };
        let log = self.log.borrow();
        let due_bytes = behind.bytes.min(max / 2);
        if log.failure().is_some() || log.pending_bytes() >= due_bytes {
            return None;
        }
        let at = since.checked_add(behind.delay)?;
        (at > now).then_some(at)
    }

    /// Whether produces here are acknowledged from memory (`write.caching`; never for an
    /// internal topic, whose records the broker's own state is rebuilt from).
    pub fn write_caching(&self) -> bool {
        self.settings.borrow().write_caching && !self.topic.starts_with("__")
    }

    /// Acknowledges producers below `end` and hands it to the replication role (with one
    /// replica, the high watermark moves to it). Never goes back.
    fn acknowledge(&self, end: u64) {
        if end <= self.acked.get() {
            return;
        }
        self.acked.set(end);
        let mut acks = self.acks.borrow_mut();
        while acks.front().is_some_and(|w| w.offset < end) {
            if let Some(w) = acks.pop_front() {
                let _ = w.done.send(Ok(()));
            }
        }
        drop(acks);
        if !self.replica_durable(end) {
            self.raise_high_watermark(end);
        }
        // Followers long-poll on the acknowledged end, consumers on the high watermark.
        self.data.notify(usize::MAX);
    }

    /// Moves the high watermark up to `hw` (never back, never past the log end); its byte
    /// position is known when it is the durable end.
    fn raise_high_watermark(&self, hw: u64) {
        let old = self.high_watermark.get();
        assert!(hw >= old, "high watermark never goes back ({old} -> {hw})");
        assert!(
            hw <= self.log.borrow().next_offset(),
            "high watermark <= log end"
        );
        if hw == old {
            return;
        }
        self.high_watermark.set(hw);
        // Transactions whose markers it passed are stable now: the LSO moves with it.
        self.producers.borrow_mut().replicated_to(hw);
        let d = self.durable.get();
        if d.offset == hw {
            self.hw_position.set(d);
        }
        self.data.notify(usize::MAX);
    }

    /// The local log's durable end (what acks=1 waited for, what followers may fetch).
    pub fn durable_end(&self) -> u64 {
        self.durable.get().offset
    }

    /// Fails every waiting producer (storage fault or deletion).
    pub fn fail_waiters(&self, code: ErrorCode) {
        for w in self.acks.borrow_mut().drain(..) {
            let _ = w.done.send(Err(code));
        }
        self.data.notify(usize::MAX);
    }

    pub fn mark_deleted(&self) {
        self.deleted.set(true);
        self.fail_waiters(ErrorCode::UnknownTopicOrPartition);
    }

    pub fn is_deleted(&self) -> bool {
        self.deleted.get()
    }

    /// A listener that fires when new data becomes visible.
    pub fn listen(&self) -> event_listener::EventListener {
        self.data.listen()
    }

    /// Reads whole batches from `offset`, below the high watermark: from the tail cache when
    /// it holds them, else from the segment file.
    pub async fn read(
        &self,
        offset: u64,
        limits: ReadLimits,
        cache: &TailCache,
    ) -> Result<Vec<ReadChunk>, LogError> {
        let hw = self.high_watermark.get();
        let at = self.hw_position.get();
        // A replicated high watermark may sit between flushes: its byte position is not known,
        // so file data is copied, bounded by offset.
        let position = (at.offset == hw).then_some(at);
        self.read_below(offset, self.log_start_offset(), hw, position, limits, cache)
            .await
    }

    /// read_committed: whole batches from `offset` below the last stable offset `lso` (as
    /// [`Partition::last_stable_offset`] gave it); nothing for an offset between it and the
    /// high watermark (the consumer waits there for the transaction to end).
    pub async fn read_stable(
        &self,
        offset: u64,
        lso: u64,
        limits: ReadLimits,
        cache: &TailCache,
    ) -> Result<Vec<ReadChunk>, LogError> {
        let hw = self.high_watermark.get();
        debug_assert!(
            lso <= hw,
            "the last stable offset is below the high watermark"
        );
        if offset > hw {
            return Err(LogError::OffsetOutOfRange {
                offset,
                start: self.log_start_offset(),
                end: hw,
            });
        }
        if offset > lso {
            return Ok(Vec::new());
        }
        let at = self.hw_position.get();
        let position = (at.offset == hw && lso == hw).then_some(at);
        self.read_below(
            offset,
            self.log_start_offset(),
            lso,
            position,
            limits,
            cache,
        )
        .await
    }

    /// For a follower's fetch: whole batches from `offset` below the local acknowledged end
    /// (the durable end; the log end under write caching).
    pub async fn read_replica(
        &self,
        offset: u64,
        limits: ReadLimits,
        cache: &TailCache,
    ) -> Result<Vec<ReadChunk>, LogError> {
        let d = self.durable.get();
        let end = self.acked.get();
        let start = self.log_start_offset();
        // Below the log start, a follower may still copy the batch it lies in.
        let lowest = if offset < start {
            self.replica_start().await?
        } else {
            start
        };
        self.read_below(
            offset,
            lowest,
            end,
            (d.offset == end).then_some(d),
            limits,
            cache,
        )
        .await
    }

    /// Where a follower may start copying this log: the base of the batch holding the log
    /// start. DeleteRecords may put the log start inside a batch, and followers copy batches
    /// whole, so a follower starting over begins at that batch (as Kafka's does) and moves its
    /// log start up to the leader's once its high watermark passes it.
    pub async fn replica_start(&self) -> Result<u64, LogError> {
        let start = self.log_start_offset();
        let reader = self.log.borrow().reader_for_offset(start)?;
        Ok(reader
            .batch_base(start)
            .await?
            .map_or(start, |b| b.min(start)))
    }

    /// Reads whole batches from `offset` (not below `start`) below `hw` (whose byte position,
    /// when known, bounds sendfile ranges).
    async fn read_below(
        &self,
        offset: u64,
        start: u64,
        hw: u64,
        hw_position: Option<Flushed>,
        limits: ReadLimits,
        cache: &TailCache,
    ) -> Result<Vec<ReadChunk>, LogError> {
        if offset < start || offset > hw {
            return Err(LogError::OffsetOutOfRange {
                offset,
                start,
                end: hw,
            });
        }
        if offset == hw {
            return Ok(Vec::new());
        }
        if let Some(chunks) = cache.read(self.cache_key, offset, hw, limits.max_bytes) {
            return Ok(chunks.into_iter().map(ReadChunk::Memory).collect());
        }
        let written = {
            let log = self.log.borrow();
            let written = log.end_position();
            if offset >= written.offset {
                // Acknowledged under write caching and not written yet: served from memory.
                let chunks = log.read_unwritten(offset, hw, limits.max_bytes);
                return Ok(chunks.into_iter().map(ReadChunk::Memory).collect());
            }
            written
        };
        // Under write caching the bound may be past what is written: the file ends there.
        let hw_position = hw_position.or((hw >= written.offset).then_some(written));
        // A compacted segment may hold nothing at or after `offset` (its last records were
        // superseded): the read goes on in the next segment, below the high watermark.
        let mut at = offset;
        loop {
            let reader = self.log.borrow().reader_for_offset(at)?;
            let base = reader.base_offset;
            let chunk = if let (FileReads::Sendfile, Some(hw_at)) = (limits.file_reads, hw_position)
            {
                // Segments before the high watermark's segment are wholly below it.
                let limit = if reader.base_offset < hw_at.segment_base {
                    u64::MAX
                } else {
                    hw_at.position
                };
                reader
                    .file_range(at, limits.max_bytes, limit)
                    .await?
                    .map(ReadChunk::Sendfile)
            } else {
                self.copy_read(reader, at, limits.max_bytes, hw, written.offset, cache)
                    .await?
                    .map(ReadChunk::File)
            };
            if let Some(chunk) = chunk {
                return Ok(vec![chunk]);
            }
            match self.log.borrow().segment_after(base) {
                Some(next) if next < hw => at = next,
                _ => return Ok(Vec::new()),
            }
        }
    }

    /// A copy read of `reader`'s segment from `offset` below `limit`: taken from the read
    /// started ahead for it, if there is one, and when more is on disk past it (below
    /// `written`), the next read is started ahead ([`read_ahead`]).
    async fn copy_read(
        &self,
        reader: SegmentReader,
        offset: u64,
        max_bytes: usize,
        limit: u64,
        written: u64,
        cache: &TailCache,
    ) -> Result<Option<ReadResult>, LogError> {
        let ahead = self
            .read_ahead
            .borrow_mut()
            .take()
            .filter(|a| a.answers(&reader, offset, max_bytes, limit));
        // A read-ahead that found nothing or failed is no answer on its own: the log is read
        // now (a lasting fault shows there, a passing one is not served).
        let got = match ahead {
            Some(a) => a.take(cache.read_ahead()).await.ok().flatten(),
            None => None,
        };
        let got = match got {
            Some(g) => Some(g),
            None => reader.read(offset, max_bytes, limit).await?,
        };
        let Some(got) = got else {
            return Ok(None);
        };
        let next = got.next_offset;
        if next < written.min(limit) && !self.deleted.get() {
            let reader = self.log.borrow().reader_for_offset(next);
            if let Ok(reader) = reader {
                read_ahead::ReadAhead::start(
                    cache.read_ahead(),
                    &self.read_ahead,
                    reader,
                    next,
                    max_bytes,
                    limit,
                );
            }
        }
        Ok(Some(got.bytes))
    }

    /// The first offset with a timestamp at or after `ts` (below the high watermark).
    pub async fn offset_for_timestamp(&self, ts: i64) -> Result<Option<(u64, i64)>, LogError> {
        let hw = self.high_watermark.get();
        let reader = self.log.borrow().reader_for_timestamp(ts);
        match reader {
            Some(r) => r.find_timestamp(ts, hw).await,
            None => Ok(None),
        }
    }

    /// The offset and timestamp of the record with the largest timestamp (the first such
    /// record if several share it; timestamps are the producers' create times, so not always
    /// the last record's), below the high watermark; `None` while there is none. No record
    /// is later than the max, so it is the first record at or after the max timestamp in the
    /// segment holding it: the time index finds it with a bounded scan.
    pub async fn offset_of_max_timestamp(&self) -> Result<Option<(u64, i64)>, LogError> {
        let hw = self.high_watermark.get();
        let reader = self.log.borrow().reader_for_max_timestamp();
        match reader {
            Some((ts, r)) => r.find_timestamp(ts, hw).await,
            None => Ok(None),
        }
    }

    /// The high watermark to checkpoint, if it moved since the last checkpoint, with the
    /// partition's directory (for [`checkpoint_high_watermarks`]). Only what is durable is
    /// checkpointed: under write caching the high watermark runs ahead of the disk, and a
    /// crash losing that unwritten tail is the promised loss, not damage to refuse.
    fn high_watermark_to_checkpoint(&self) -> Option<(std::path::PathBuf, u64)> {
        let hw = self.high_watermark.get().min(self.durable.get().offset);
        if hw <= self.checkpointed.get() || self.deleted.get() {
            return None;
        }
        Some((self.log.borrow().dir().to_path_buf(), hw))
    }

    /// Reopens a log that failed for a reason reopening may cure (a full or failing disk):
    /// recovery checks the files again, and if they hold every acknowledged offset the
    /// partition takes writes again. Batches that were appended but never written are gone
    /// (their producers were refused), so the tail cache forgets the partition. Returns
    /// whether the partition is writable again.
    pub async fn try_reopen(&self, cache: &TailCache) -> Result<bool, LogError> {
        let (dir, cfg) = {
            let log = self.log.borrow();
            if !log.can_retry() || self.deleted.get() {
                return Ok(false);
            }
            (log.dir().to_path_buf(), log.config().clone())
        };
        let (mut log, _) = PartitionLog::open(dir, cfg).await?;
        if self.deleted.get() || log.failure().is_some() {
            return Ok(false);
        }
        let hw = self.high_watermark.get();
        if self.is_replicated_leader() && log.next_offset() < self.log_end_offset() {
            // The leader's state counted the lost (never written) batches as appended, and a
            // log end never goes back within an epoch: this replica waits for a restart.
            let why = format!(
                "reopened after a storage failure, the log ends at {} below the {} its \
                 leader state counted",
                log.next_offset(),
                self.log_end_offset()
            );
            self.log.borrow_mut().fail_for_good(why);
            return Ok(false);
        }
        if log.next_offset() < hw {
            let why = format!(
                "reopened after a storage failure, the log ends at {} below the high \
                 watermark {hw}",
                log.next_offset()
            );
            self.log.borrow_mut().fail_for_good(why);
            return Ok(false);
        }
        let s = self.settings();
        log.set_segment_limits(s.segment_bytes, s.segment_age);
        let end = log.end_position();
        cache.forget(self.cache_key);
        *self.log.borrow_mut() = log;
        // Batches appended but never written are gone: so are they from the producer state,
        // which is rebuilt from the log if it was loaded while the log was failed.
        self.cut_producer_state(cache, true).await?;
        if end.offset > self.durable.get().offset {
            // Written before the failure and synced by the reopen: durable now.
            self.advance(end);
        } else {
            self.durable.set(end);
            self.acked.set(end.offset);
            if end.offset == hw {
                self.hw_position.set(end);
            }
        }
        log::info!(
            "{}-{}: storage recovered, writes resume at offset {}",
            self.topic,
            self.index,
            end.offset
        );
        Ok(true)
    }

    /// fdatasyncs the files this partition wrote since its last sync. A failure marks the log
    /// failed (retriably: the shard reopens it) and fails the producers waiting. Returns how many files it synced.
    pub async fn sync(&self) -> Result<usize, LogError> {
        let (files, dir_syncs) = {
            let mut log = self.log.borrow_mut();
            (log.take_unsynced(), log.take_dir_syncs())
        };
        // A new segment's directory entry (a roll's, synced behind) is made durable with it.
        let (results, dir_results) = futures_lite::future::zip(
            join_all(files.iter().map(|(f, _)| f.fdatasync())),
            join_all(dir_syncs),
        )
        .await;
        let failed = files
            .iter()
            .zip(results)
            .find_map(|((_, path), r)| r.err().map(|e| ("fdatasync", LogError::io(&**path, e))))
            .or_else(|| {
                dir_results
                    .into_iter()
                    .find_map(|r| r.err().map(|e| ("directory sync", e)))
            });
        if let Some((what, e)) = failed {
            self.log.borrow_mut().fail(format!("{what}: {e}"));
            self.fail_waiters(ErrorCode::KafkaStorageError);
            return Err(e);
        }
        Ok(files.len())
    }

    /// Why the log refuses writes, if it does.
    pub fn failure(&self) -> Option<String> {
        self.log.borrow().failure().map(str::to_string)
    }

    /// Failed for a reason reopening may cure (see [`try_reopen`](Self::try_reopen)).
    pub fn can_retry(&self) -> bool {
        self.log.borrow().can_retry()
    }

    /// The partition's directory.
    pub fn dir(&self) -> std::path::PathBuf {
        self.log.borrow().dir().to_path_buf()
    }

    /// Writes pending batches; see [`partition_log::flush`].
    pub async fn flush(&self) -> Result<Option<Flushed>, LogError> {
        partition_log::flush(&self.log).await
    }
}

/// Writes the high watermark checkpoint of every partition whose high watermark moved since
/// its last one (recovery refuses to hand out offsets below it again: see
/// [`PartitionLog::open`]), `threads` files at once, in one job of the executor's blocking
/// pool, off the shard thread. A partition whose checkpoint failed is logged and written at
/// the next one. Returns how many were written.
pub async fn checkpoint_high_watermarks<P>(partitions: &[P], threads: usize) -> usize
where
    P: std::ops::Deref<Target = Partition>,
{
    let (due, entries): (Vec<_>, Vec<_>) = partitions
        .iter()
        .filter_map(|p| {
            let (dir, hw) = p.high_watermark_to_checkpoint()?;
            Some(((&**p, hw), (dir, hw)))
        })
        .unzip();
    if due.is_empty() {
        return 0;
    }
    let results = rill_shards::rt::spawn_blocking(move || {
        partition_log::write_high_watermarks(entries, threads)
    })
    .await;
    let mut written = 0;
    for ((p, hw), r) in due.iter().zip(results) {
        match r {
            Ok(()) => {
                p.checkpointed.set(p.checkpointed.get().max(*hw));
                written += 1;
            }
            Err(e) => log::warn!("{}-{}: high watermark checkpoint: {e}", p.topic, p.index),
        }
    }
    written
}

/// A batch of `len` bytes against a topic's `max.message.bytes` (MESSAGE_TOO_LARGE past it).
pub fn check_message_bytes(len: usize, max: usize) -> Result<(), (ErrorCode, String)> {
    if len > max {
        return Err((
            ErrorCode::MessageTooLarge,
            format!("a batch of {len} bytes exceeds max.message.bytes {max}"),
        ));
    }
    Ok(())
}
