//! The partition's side of the idempotent producer: judging a leader's batches against the
//! producer state ([`super::producer_state`]), keeping that state with the log (every append
//! records its batches; retention forgets producers; cut tails and reopens take batches back),
//! rebuilding it at open from the snapshot and the batches after it, and writing the snapshot
//! when the log rolled a segment.

use std::path::Path;

use super::producer_snapshot::{self, SNAPSHOT_FILE};
use super::producer_state::{AbortedTxn, ProducerBatch, ProducerStates, SequenceError, Verdict};
use super::tail_cache::TailCache;
use super::{Partition, ReadLimits};
use crate::batch::BatchIter;
use crate::log::{FileReads, LogError};

/// Bytes read at a time when a partition rebuilds its producer state from the log.
const REBUILD_READ_BYTES: usize = 1 << 20;

impl Partition {
    /// Judges a produce's batches for this partition (each one's record count and producer
    /// fields, in order; they would be stamped from the log end on, duplicates taking no
    /// offsets). Changes nothing: the append records them. One refused batch refuses them all.
    pub fn admit_producer_batches(
        &self,
        batches: &[(u32, Option<ProducerBatch>)],
    ) -> Result<Vec<Verdict>, SequenceError> {
        let mut states = self.producers.borrow_mut();
        if batches.iter().all(|(_, b)| b.is_none()) {
            return Ok(vec![Verdict::Append; batches.len()]);
        }
        // Later batches of the same producer are judged after the earlier ones: recorded on
        // the state, then taken back.
        let undo = states.save(batches.iter().filter_map(|(_, b)| b.map(|b| b.producer_id)));
        let mut next = self.log_end_offset();
        let mut verdicts = Vec::with_capacity(batches.len());
        let mut refused = None;
        for (count, b) in batches {
            let v = match b {
                None => Ok(Verdict::Append),
                Some(b) => states.check(b),
            };
            match v {
                Ok(Verdict::Append) => {
                    if let Some(b) = b {
                        states.record(b, next);
                    }
                    next += u64::from(*count);
                    verdicts.push(Verdict::Append);
                }
                Ok(d) => verdicts.push(d),
                Err(e) => {
                    refused = Some(e);
                    break;
                }
            }
        }
        states.restore(undo);
        match refused {
            Some(e) => Err(e),
            None => Ok(verdicts),
        }
    }

    /// Records an appended batch (the leader's, a follower's replicated one, the broker's own)
    /// on the producer state, and in the journal while a rebuild runs.
    pub(super) fn record_producer_batch(&self, bytes: &[u8], base_offset: u64) {
        let b = match ProducerBatch::of_bytes(bytes) {
            Ok(Some(b)) => b,
            Ok(None) => return,
            Err(e) => {
                // Validated when appended (a client's control batch is refused, a replicated
                // one was validated by the fetcher): not expected.
                log::warn!(
                    "{}-{}: the batch at {base_offset} is left out of the producer state: {e}",
                    self.topic,
                    self.index
                );
                return;
            }
        };
        self.producers.borrow_mut().record(&b, base_offset);
        let mut journal = self.replay_journal.borrow_mut();
        if journal.0 > 0 {
            journal.1.push((b, base_offset));
        }
    }

    /// The last stable offset: the first offset of the oldest open transaction, else the high
    /// watermark (never above it, never below the log start: Kafka's). read_committed
    /// consumers read below it.
    pub fn last_stable_offset(&self) -> u64 {
        let hw = self.high_watermark();
        let lso = match self.producers.borrow().first_unstable_offset() {
            Some(first) => first.min(hw).max(self.log_start_offset().min(hw)),
            None => hw,
        };
        assert!(lso <= hw, "last stable offset {lso} <= high watermark {hw}");
        lso
    }

    /// The aborted transactions a read of `from..to` must know of (see
    /// [`ProducerStates::aborted_overlapping`]).
    pub fn aborted_transactions(&self, from: u64, to: u64) -> Vec<AbortedTxn> {
        self.producers.borrow().aborted_overlapping(from, to)
    }

    /// What this partition knows of producer `id`: (epoch, last sequence, last offset).
    pub fn producer_position(&self, id: i64) -> Option<(i16, i32, u64)> {
        let states = self.producers.borrow();
        let e = states.get(id)?;
        e.last().map(|m| (e.epoch, m.last_seq, m.last_offset))
    }

    /// How many producers this partition tracks.
    pub fn producer_count(&self) -> usize {
        self.producers.borrow().len()
    }

    /// Forgets producers idle for `ttl` (`--producer-id-expiration-ms`).
    pub fn expire_producers(&self, now_ms: i64, ttl: std::time::Duration) {
        let ttl_ms = i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX);
        let n = self.producers.borrow_mut().expire(now_ms, ttl_ms);
        if n > 0 {
            log::debug!("{}-{}: {n} idle producers expired", self.topic, self.index);
        }
    }

    /// The log starts at `start` now: producers with no batch left are forgotten.
    pub(super) fn forget_producers_before(&self, start: u64) {
        let n = self.producers.borrow_mut().drop_before(start);
        if n > 0 {
            log::debug!(
                "{}-{}: forgot {n} producers whose batches are all below {start}",
                self.topic,
                self.index
            );
        }
    }

    /// Loads the producer state at open: the snapshot (if it is whole and not past the log
    /// end) and the batches after it, else every batch of the log. A read error of the log
    /// fails the open (dedupe would silently not hold); a bad snapshot never does.
    pub async fn load_producer_state(&self, cache: &TailCache) -> Result<(), LogError> {
        let dir = self.dir();
        let (start, end) = (self.log_start_offset(), self.log_end_offset());
        let d = dir.clone();
        let snapshot =
            rill_shards::rt::spawn_blocking(move || std::fs::read(d.join(SNAPSHOT_FILE)).ok())
                .await;
        let (states, from) = match snapshot.as_deref().map(producer_snapshot::decode) {
            Some(Some((states, at))) if at <= end => (states, at.max(start)),
            Some(_) => {
                log::warn!(
                    "{}-{}: ignoring a damaged or stale {SNAPSHOT_FILE} (the log ends at {end}): \
                     rebuilding producer state from the log",
                    self.topic,
                    self.index
                );
                (ProducerStates::new(), start)
            }
            None => (ProducerStates::new(), start),
        };
        let mut states = self.replay_producers(states, from, end, cache).await?;
        states.replicated_to(self.high_watermark());
        *self.producers.borrow_mut() = states;
        // The next snapshot is due at the next roll (or a clean stop), not at once: an
        // empty partition writes none.
        self.snapshot_segments
            .set(self.log.borrow().segment_count());
        self.flushed_segments.set(self.log.borrow().segment_count());
        self.forget_producers_before(start);
        log::debug!(
            "{}-{}: producer state: {} producers, replayed offsets {from}..{end}",
            self.topic,
            self.index,
            self.producer_count()
        );
        Ok(())
    }

    /// `states` with the producer batches of offsets `from..end` (in the log) recorded.
    async fn replay_producers(
        &self,
        mut states: ProducerStates,
        from: u64,
        end: u64,
        cache: &TailCache,
    ) -> Result<ProducerStates, LogError> {
        let limits = ReadLimits {
            max_bytes: REBUILD_READ_BYTES,
            file_reads: FileReads::Copy,
        };
        let mut at = from;
        while at < end {
            let chunks = match self.read_below(at, at, end, None, limits, cache).await {
                Ok(c) => c,
                Err(e) => {
                    // A range recovery found missing or damaged (the log then refuses writes):
                    // its producers are not known, the rest of the log still is.
                    let hole = self
                        .log
                        .borrow()
                        .holes()
                        .iter()
                        .find(|h| h.from <= at && at < h.to)
                        .map(|h| h.to);
                    match hole {
                        Some(to) if to > at => {
                            log::warn!(
                                "{}-{}: producer state: skipped the unreadable offsets {at}..{to}",
                                self.topic,
                                self.index
                            );
                            at = to;
                            continue;
                        }
                        _ if self.log.borrow().failure().is_some() => {
                            // It takes no writes: the state matters again only after a
                            // reopen, which rebuilds it.
                            log::warn!(
                                "{}-{}: producer state read up to {at} only: {e}",
                                self.topic,
                                self.index
                            );
                            break;
                        }
                        _ => return Err(e),
                    }
                }
            };
            let before = at;
            for c in &chunks {
                let Some(bytes) = c.as_slice() else { break };
                for b in BatchIter::new(bytes) {
                    let b = b.map_err(|e| LogError::Failed(e.to_string()))?;
                    let h = *b.header();
                    if h.next_offset() <= at {
                        continue;
                    }
                    states.replay(b.bytes(), h.base_offset);
                    at = h.next_offset();
                }
            }
            if at == before {
                // Nothing more below `end` (a compacted tail): done.
                break;
            }
        }
        Ok(states)
    }

    /// The log was cut to end at its current end (a follower's divergent tail, a reopen that
    /// lost unwritten batches): takes their batches out of the state (rebuilding it from the
    /// log when a producer lost every batch it had) and drops the snapshot, which may name
    /// them. Call it before any await after the cut: appends made meanwhile would be cut too.
    /// With `rebuild`, the state is read from the log whatever the cut left (a reopen: the
    /// state may have been loaded while the log was failed, short of its unreadable ranges).
    pub(super) async fn cut_producer_state(
        &self,
        cache: &TailCache,
        rebuild: bool,
    ) -> Result<(), LogError> {
        let end = self.log_end_offset();
        let complete = self.producers.borrow_mut().truncate_to(end) && !rebuild;
        self.snapshot_end.set(None);
        *self.roll_snapshot.borrow_mut() = None;
        remove_snapshot(&self.dir()).await;
        if complete {
            return Ok(());
        }
        // Rebuilt aside: appends made while the log is read (at `end` and after) are recorded
        // on the live state and in the journal, and replayed on the rebuilt one.
        let from = {
            let mut j = self.replay_journal.borrow_mut();
            j.0 += 1;
            j.1.len()
        };
        let rebuilt = self
            .replay_producers(ProducerStates::new(), self.log_start_offset(), end, cache)
            .await;
        let journal = {
            let mut j = self.replay_journal.borrow_mut();
            let mine = j.1[from..].to_vec();
            j.0 -= 1;
            if j.0 == 0 {
                j.1.clear();
            }
            mine
        };
        let mut rebuilt = rebuilt?;
        for (b, at) in &journal {
            rebuilt.record(b, *at);
        }
        rebuilt.replicated_to(self.high_watermark());
        *self.producers.borrow_mut() = rebuilt;
        Ok(())
    }

    /// The log starts over empty: so does the producer state.
    pub(super) async fn clear_producer_state(&self) {
        self.snapshot_end.set(None);
        *self.roll_snapshot.borrow_mut() = None;
        remove_snapshot(&self.dir()).await;
        *self.producers.borrow_mut() = ProducerStates::new();
    }

    /// A flush rolled a segment and the log now ends at `end`: the state as it is now is the
    /// next snapshot, written once the log is durable to `end` (Kafka snapshots at every roll,
    /// so a restart after a crash replays at most about a segment). Not while the state is
    /// being rebuilt (it is not whole), nor for a partition without producers.
    pub(super) fn producer_state_rolled(&self, end: u64) {
        let states = self.producers.borrow();
        if states.is_empty() || self.replay_journal.borrow().0 > 0 {
            return;
        }
        *self.roll_snapshot.borrow_mut() = Some((states.clone(), end));
    }

    /// The producer-state snapshot to write now, if one is due (see [`snapshot_producers`]).
    fn producer_snapshot_due(&self, force: bool) -> Option<SnapshotJob> {
        if self.failure().is_some() || self.is_deleted() {
            return None;
        }
        let segments = self.log.borrow().segment_count();
        let (bytes, end) = if force {
            let end = self.log_end_offset();
            let durable = self.durable_end() == end && !self.log.borrow().has_pending();
            let due =
                !self.producers.borrow().is_empty() || segments != self.snapshot_segments.get();
            if !due || !durable || self.snapshot_end.get() == Some(end) {
                return None;
            }
            (
                producer_snapshot::encode(&self.producers.borrow(), end),
                end,
            )
        } else {
            let durable_end = self.durable_end();
            let ready =
                matches!(&*self.roll_snapshot.borrow(), Some((_, end)) if *end <= durable_end);
            if !ready {
                return None;
            }
            let (states, end) = self.roll_snapshot.borrow_mut().take()?;
            (producer_snapshot::encode(&states, end), end)
        };
        *self.roll_snapshot.borrow_mut() = None;
        Some(SnapshotJob {
            dir: self.dir(),
            bytes,
            end,
            segments,
        })
    }

    /// Its snapshot's file was written: it is the partition's, unless the log was cut while
    /// it was written (it may name batches that are gone).
    async fn producer_snapshot_written(&self, end: u64, segments: usize) {
        if self.log_end_offset() < end {
            remove_snapshot(&self.dir()).await;
            return;
        }
        self.snapshot_segments.set(segments);
        self.snapshot_end.set(Some(end));
    }
}

/// A producer-state snapshot to write: where, what, and the log end and segment count it
/// was taken at.
struct SnapshotJob {
    dir: std::path::PathBuf,
    bytes: Vec<u8>,
    end: u64,
    segments: usize,
}

/// Writes the producer-state snapshot of every partition that needs one: at a clean stop
/// (`force`) the state at the log end, for a partition with producers or whose log rolled
/// since open; periodically (`!force`) the state saved at the last roll, once the log is
/// durable to that roll's end. Only from a log that is not failed (a full disk's last blocks
/// are not spent on files that only save a rescan), and never naming a batch a crash could
/// take back. All the files in one job of the blocking pool: a job per partition, awaited in
/// turn, made a checkpoint of many partitions several times slower (RESULTS.md, 2026-12-05
/// fourteenth). A snapshot that fails is logged; the next start replays more of the log.
/// Returns how many were written.
pub async fn snapshot_producers<P>(partitions: &[P], force: bool) -> usize
where
    P: std::ops::Deref<Target = Partition>,
{
    let mut due: Vec<(&Partition, SnapshotJob)> = partitions
        .iter()
        .filter_map(|p| p.producer_snapshot_due(force).map(|j| (&**p, j)))
        .collect();
    if due.is_empty() {
        return 0;
    }
    let files: Vec<(std::path::PathBuf, &str, Vec<u8>)> = due
        .iter_mut()
        .map(|(_, j)| (j.dir.clone(), SNAPSHOT_FILE, std::mem::take(&mut j.bytes)))
        .collect();
    let results = rill_shards::rt::spawn_blocking(move || {
        crate::log::partition_log::replace_files(&files, 1)
    })
    .await;
    let mut written = 0;
    for ((p, job), r) in due.iter().zip(results) {
        match r {
            Ok(()) => {
                p.producer_snapshot_written(job.end, job.segments).await;
                written += 1;
            }
            Err(e) => log::warn!("{}-{}: producer-state snapshot: {e}", p.topic, p.index),
        }
    }
    written
}

async fn remove_snapshot(dir: &Path) {
    let path = dir.join(SNAPSHOT_FILE);
    let _ = rill_shards::rt::spawn_blocking(move || std::fs::remove_file(path)).await;
}
