//! Per-partition idempotent-producer state (Kafka's ProducerStateManager, sans-IO): for each
//! producer id, its epoch and the sequence ranges and offsets of its last [`BATCHES_KEPT`]
//! batches, so a retried batch is recognised and answered with the offsets it got the first
//! time instead of being stored twice.
//!
//! Rules (Kafka's `ProducerAppendInfo`, checked in this order):
//! - a batch whose epoch and sequence range equal one of the producer's last batches is a
//!   duplicate: acknowledged with the original offsets, not appended;
//! - an epoch below the producer's is refused: INVALID_PRODUCER_EPOCH;
//! - a newer epoch must start at sequence 0 (Kafka 2.x+ epoch bump), else
//!   OUT_OF_ORDER_SEQUENCE_NUMBER;
//! - the same epoch must continue at last sequence + 1 (wrapping after `i32::MAX` to 0), else
//!   OUT_OF_ORDER_SEQUENCE_NUMBER;
//! - a producer this partition does not know must start at sequence 0, else
//!   UNKNOWN_PRODUCER_ID (Kafka 2.4's rule: clients answer it with a KIP-360 epoch bump, which
//!   starts again at 0; later Kafka accepts any sequence there, which gives up dedupe for the
//!   first batch after a producer's state expired).
//!
//! The state moves at append time, before the batch is durable, so a retry of a batch still in
//! the group commit is a duplicate like any other; its acknowledgement waits for the original
//! offsets to be as durable as the request asks (see `broker::produce`). Appends that never
//! became durable (a failed write, a follower's cut tail) are taken back by
//! [`ProducerStates::truncate_to`] or a rebuild from the log.
//!
//! Batches without a producer id (`producer_id < 0`) and the broker's own delayed-message
//! batches (whose producer id field holds a message id) are not tracked.
//!
//! Transactions (Kafka's `ProducerAppendInfo.appendDataBatch`/`appendEndTxnMarker`): a
//! producer's first transactional batch opens its transaction at that batch's offset; a
//! non-transactional batch while it is open is refused (INVALID_TXN_STATE). A control batch
//! (a transaction marker, [`crate::batch::control`]) is not sequenced (base sequence -1): an
//! epoch older than the producer's is refused (INVALID_PRODUCER_EPOCH, Kafka 2.7+), a
//! coordinator epoch older than the last one seen TRANSACTION_COORDINATOR_FENCED; otherwise
//! it closes the open transaction, if any (an aborted one goes to the aborted list that
//! read_committed fetches are told about), records the coordinator epoch and moves the
//! producer to the marker's epoch. A marker for a producer with no open transaction is
//! written anyway and changes nothing else (Kafka's). Replayed and replicated batches are not
//! judged (the leader did), only recorded.

use std::collections::{HashMap, VecDeque};

use crate::batch::control::{ControlError, ControlKind, ControlRecord};
use crate::batch::sequence::in_sequence;
pub use crate::batch::sequence::increment_sequence;
use crate::batch::{
    aligned16, BatchHeader, BatchView, FLAG_CONTROL, FLAG_DELAYED, FLAG_TRANSACTIONAL,
};
use crate::protocol::ErrorCode;

/// Batches remembered per producer: the most a producer may have in flight per partition
/// (Kafka's `max.in.flight.requests.per.connection` limit with idempotence).
pub const BATCHES_KEPT: usize = 5;

/// No coordinator epoch seen yet (Kafka's -1).
pub const NO_COORDINATOR_EPOCH: i32 = -1;

/// One stored batch of a producer: its sequence range and offsets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchMeta {
    pub first_seq: i32,
    pub last_seq: i32,
    pub base_offset: u64,
    pub last_offset: u64,
}

/// What a partition knows of one producer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProducerEntry {
    pub epoch: i16,
    /// Oldest first; at most [`BATCHES_KEPT`], all of `epoch`. Empty only for a producer known
    /// here by its markers alone, or whose marker moved it to a newer epoch.
    batches: VecDeque<BatchMeta>,
    /// When its last batch was appended (the leader's clock, stamped in the header): idle
    /// producers expire by it ([`ProducerStates::expire`]).
    pub last_timestamp: i64,
    /// The first offset of its open transaction (its first transactional batch since the last
    /// marker).
    pub txn_first_offset: Option<u64>,
    /// The coordinator epoch of its last marker ([`NO_COORDINATOR_EPOCH`] before any).
    pub coordinator_epoch: i32,
    /// The offset of its last marker: a cut below it takes back what the marker did, which
    /// only a rebuild from the log knows.
    pub last_marker_offset: Option<u64>,
}

impl ProducerEntry {
    pub fn new(epoch: i16, last_timestamp: i64) -> ProducerEntry {
        ProducerEntry {
            epoch,
            batches: VecDeque::with_capacity(BATCHES_KEPT),
            last_timestamp,
            txn_first_offset: None,
            coordinator_epoch: NO_COORDINATOR_EPOCH,
            last_marker_offset: None,
        }
    }

    /// Its last data batch, if it has one here.
    pub fn last(&self) -> Option<&BatchMeta> {
        self.batches.back()
    }

    pub fn batches(&self) -> impl Iterator<Item = &BatchMeta> {
        self.batches.iter()
    }

    /// The last offset it wrote here (data or marker).
    fn last_offset(&self) -> Option<u64> {
        let data = self.last().map(|m| m.last_offset);
        data.max(self.last_marker_offset)
    }
}

/// The producer fields of a batch about to be appended (or replayed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProducerBatch {
    pub producer_id: i64,
    pub epoch: i16,
    pub first_seq: i32,
    pub record_count: u32,
    /// The batch's append time (0 before the leader stamped it).
    pub max_timestamp: i64,
    /// Part of a transaction (Kafka's transactional attribute).
    pub transactional: bool,
    /// A control batch's marker: such a batch is not sequenced.
    pub marker: Option<ControlRecord>,
}

/// A transaction that ended with an abort marker: read_committed consumers skip its records
/// (Kafka's `AbortedTxn`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AbortedTxn {
    pub producer_id: i64,
    pub first_offset: u64,
    /// The abort marker's offset.
    pub last_offset: u64,
}

impl ProducerBatch {
    /// The producer fields of a data batch headed `h` (its control flag ignored: see
    /// [`Self::of_view`]), `None` for a batch no producer state tracks.
    pub fn of(h: &BatchHeader) -> Option<ProducerBatch> {
        if h.producer_id < 0 || h.flags & FLAG_DELAYED != 0 || h.record_count == 0 {
            return None;
        }
        Some(ProducerBatch {
            producer_id: h.producer_id,
            epoch: h.producer_epoch,
            first_seq: h.base_sequence,
            record_count: h.record_count,
            max_timestamp: h.append_time_ms,
            transactional: h.flags & FLAG_TRANSACTIONAL != 0,
            marker: None,
        })
    }

    /// The producer fields of a batch, reading the marker of a control batch (whose record
    /// needs the body: copied aside when the bytes are not aligned, markers are small).
    pub fn of_view(view: &BatchView<'_>) -> Result<Option<ProducerBatch>, ControlError> {
        let Some(mut b) = ProducerBatch::of(view.header()) else {
            return Ok(None);
        };
        if view.header().flags & FLAG_CONTROL != 0 {
            let bytes = aligned16(view.bytes());
            let v = BatchView::parse_header(&bytes)?;
            b.marker = Some(ControlRecord::of_batch(&v)?);
        }
        Ok(Some(b))
    }

    /// The producer fields of the stored batch `bytes` (a header, and for a control batch its
    /// record).
    pub fn of_bytes(bytes: &[u8]) -> Result<Option<ProducerBatch>, ControlError> {
        ProducerBatch::of_view(&BatchView::parse_header(bytes)?)
    }

    /// The sequence of the last record (Kafka's `DefaultRecordBatch.incrementSequence`: past
    /// `i32::MAX` sequences go on from 0).
    pub fn last_seq(&self) -> i32 {
        increment_sequence(self.first_seq, self.record_count.saturating_sub(1))
    }
}

/// What to do with a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// New and in order: append it.
    Append,
    /// Already stored: answer with these offsets.
    Duplicate(BatchMeta),
}

/// Why a batch is refused (nothing of it is appended).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SequenceError {
    #[error("producer {producer_id}: epoch {epoch} is older than its current epoch {current}")]
    StaleEpoch {
        producer_id: i64,
        epoch: i16,
        current: i16,
    },
    #[error(
        "producer {producer_id} epoch {epoch}: sequence {found} out of order, expected {expected}"
    )]
    OutOfOrder {
        producer_id: i64,
        epoch: i16,
        found: i32,
        expected: i32,
    },
    #[error(
        "producer {producer_id} is unknown to this partition and its batch starts at sequence \
         {found}, not 0"
    )]
    UnknownProducer { producer_id: i64, found: i32 },
    #[error(
        "producer {producer_id}: a non-transactional batch while its transaction (from offset \
         {txn_first_offset}) is open"
    )]
    NotTransactional {
        producer_id: i64,
        txn_first_offset: u64,
    },
    #[error(
        "producer {producer_id}: marker of coordinator epoch {found}, older than the {current} \
         already seen"
    )]
    CoordinatorFenced {
        producer_id: i64,
        found: i32,
        current: i32,
    },
}

impl SequenceError {
    /// Kafka's error code for it.
    pub fn code(&self) -> ErrorCode {
        match self {
            SequenceError::StaleEpoch { .. } => ErrorCode::InvalidProducerEpoch,
            SequenceError::OutOfOrder { .. } => ErrorCode::OutOfOrderSequenceNumber,
            SequenceError::UnknownProducer { .. } => ErrorCode::UnknownProducerId,
            SequenceError::NotTransactional { .. } => ErrorCode::InvalidTxnState,
            SequenceError::CoordinatorFenced { .. } => ErrorCode::TransactionCoordinatorFenced,
        }
    }
}

/// Entries saved before a request's batches were applied, to undo them if a later batch of
/// the same request is refused.
pub struct Undo {
    entries: Vec<(i64, Option<ProducerEntry>)>,
    aborted: usize,
    unreplicated: usize,
}

/// Every producer's state in one partition.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProducerStates {
    producers: HashMap<i64, ProducerEntry>,
    /// Aborted transactions, in the order of their markers (so by `last_offset`), from the
    /// log start on.
    aborted: VecDeque<AbortedTxn>,
    /// Transactions ended by a marker the high watermark may not have passed yet, as (first
    /// offset, marker offset) in marker order: they hold the last stable offset until it
    /// does (Kafka's `unreplicatedTxns`), so read_committed never reads a transaction whose
    /// marker a leader change could take back. In memory only (see [`Self::replicated_to`]).
    unreplicated: VecDeque<(u64, u64)>,
    /// Whether a transaction was ever recorded here: the last stable offset of a partition
    /// without any is its high watermark, found without a look at every producer (a fetch
    /// asks for it on every read).
    transactional: TxnSeen,
}

/// A hint, not state: equal whatever it holds, so a rebuilt state equals the live one.
#[derive(Debug, Clone, Copy, Default)]
struct TxnSeen(bool);

impl PartialEq for TxnSeen {
    fn eq(&self, _: &TxnSeen) -> bool {
        true
    }
}

impl Eq for TxnSeen {}

impl ProducerStates {
    pub fn new() -> ProducerStates {
        ProducerStates::default()
    }

    pub fn len(&self) -> usize {
        self.producers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.producers.is_empty() && self.aborted.is_empty()
    }

    pub fn get(&self, producer_id: i64) -> Option<&ProducerEntry> {
        self.producers.get(&producer_id)
    }

    /// Judges a batch a producer sends (no change: see [`Self::record`]).
    pub fn check(&self, b: &ProducerBatch) -> Result<Verdict, SequenceError> {
        if let Some(m) = &b.marker {
            return self.check_marker(b, m);
        }
        let Some(e) = self.producers.get(&b.producer_id) else {
            if b.first_seq != 0 {
                return Err(SequenceError::UnknownProducer {
                    producer_id: b.producer_id,
                    found: b.first_seq,
                });
            }
            return Ok(Verdict::Append);
        };
        if b.epoch == e.epoch {
            let last_seq = b.last_seq();
            if let Some(m) = e
                .batches
                .iter()
                .find(|m| m.first_seq == b.first_seq && m.last_seq == last_seq)
            {
                return Ok(Verdict::Duplicate(*m));
            }
        }
        if b.epoch < e.epoch {
            return Err(SequenceError::StaleEpoch {
                producer_id: b.producer_id,
                epoch: b.epoch,
                current: e.epoch,
            });
        }
        let out_of_order = |expected| SequenceError::OutOfOrder {
            producer_id: b.producer_id,
            epoch: b.epoch,
            found: b.first_seq,
            expected,
        };
        match e.last() {
            // A newer epoch starts at 0.
            _ if b.epoch > e.epoch && b.first_seq != 0 => return Err(out_of_order(0)),
            _ if b.epoch > e.epoch => {}
            // Known here by its markers only: as an unknown producer.
            None if b.first_seq != 0 => {
                return Err(SequenceError::UnknownProducer {
                    producer_id: b.producer_id,
                    found: b.first_seq,
                })
            }
            None => {}
            Some(last) if !in_sequence(last.last_seq, b.first_seq) => {
                return Err(out_of_order(increment_sequence(last.last_seq, 1)))
            }
            Some(_) => {}
        }
        check_txn_state(e, b).map(|()| Verdict::Append)
    }

    fn check_marker(&self, b: &ProducerBatch, m: &ControlRecord) -> Result<Verdict, SequenceError> {
        let Some(e) = self.producers.get(&b.producer_id) else {
            return Ok(Verdict::Append);
        };
        if b.epoch < e.epoch {
            return Err(SequenceError::StaleEpoch {
                producer_id: b.producer_id,
                epoch: b.epoch,
                current: e.epoch,
            });
        }
        if m.coordinator_epoch < e.coordinator_epoch {
            return Err(SequenceError::CoordinatorFenced {
                producer_id: b.producer_id,
                found: m.coordinator_epoch,
                current: e.coordinator_epoch,
            });
        }
        Ok(Verdict::Append)
    }

    /// Records a batch stored at `base_offset` (a checked append, or a replayed or replicated
    /// one, which is not judged: the leader did). A new epoch forgets the older one's batches.
    pub fn record(&mut self, b: &ProducerBatch, base_offset: u64) {
        let e = self
            .producers
            .entry(b.producer_id)
            .or_insert_with(|| ProducerEntry::new(b.epoch, b.max_timestamp));
        if e.epoch != b.epoch {
            e.epoch = b.epoch;
            e.batches.clear();
        }
        e.last_timestamp = b.max_timestamp;
        if let Some(m) = b.marker {
            if let Some(first_offset) = e.txn_first_offset.take() {
                self.unreplicated.push_back((first_offset, base_offset));
                if m.kind == ControlKind::Abort {
                    debug_assert!(
                        self.aborted
                            .back()
                            .is_none_or(|a| a.last_offset < base_offset),
                        "markers are recorded in order"
                    );
                    self.aborted.push_back(AbortedTxn {
                        producer_id: b.producer_id,
                        first_offset,
                        last_offset: base_offset,
                    });
                }
            }
            e.coordinator_epoch = m.coordinator_epoch;
            e.last_marker_offset = Some(base_offset);
            return;
        }
        let meta = BatchMeta {
            first_seq: b.first_seq,
            last_seq: b.last_seq(),
            base_offset,
            last_offset: base_offset + u64::from(b.record_count.max(1)) - 1,
        };
        if let Some(last) = e.batches.back() {
            debug_assert!(
                last.last_offset < base_offset,
                "batches are recorded in order"
            );
        }
        if b.transactional && e.txn_first_offset.is_none() {
            e.txn_first_offset = Some(base_offset);
            self.transactional = TxnSeen(true);
        }
        if e.batches.len() == BATCHES_KEPT {
            e.batches.pop_front();
        }
        e.batches.push_back(meta);
        assert!(e.batches.len() <= BATCHES_KEPT);
    }

    /// Records the stored batch `bytes`, if it is a producer's. A control batch whose marker
    /// does not read is left out (logged): it was validated when it was appended.
    pub fn replay(&mut self, bytes: &[u8], base_offset: u64) {
        match ProducerBatch::of_bytes(bytes) {
            Ok(Some(b)) => self.record(&b, base_offset),
            Ok(None) => {}
            Err(e) => log::warn!("producer state: the batch at {base_offset} is skipped: {e}"),
        }
    }

    /// Saves the entries of `ids` before [`Self::record`]s that may be undone.
    pub fn save(&self, ids: impl Iterator<Item = i64>) -> Undo {
        let mut saved: Vec<(i64, Option<ProducerEntry>)> = Vec::new();
        for id in ids {
            if !saved.iter().any(|(s, _)| *s == id) {
                saved.push((id, self.producers.get(&id).cloned()));
            }
        }
        Undo {
            entries: saved,
            aborted: self.aborted.len(),
            unreplicated: self.unreplicated.len(),
        }
    }

    /// Puts back what [`Self::save`] saved.
    pub fn restore(&mut self, undo: Undo) {
        for (id, entry) in undo.entries {
            match entry {
                Some(e) => {
                    self.producers.insert(id, e);
                }
                None => {
                    self.producers.remove(&id);
                }
            }
        }
        self.aborted.truncate(undo.aborted);
        self.unreplicated.truncate(undo.unreplicated);
    }

    /// Forgets batches at or after `end` (a cut log tail): a transaction that began in the cut
    /// is not open any more, an abort whose marker was cut is not aborted. Returns false when
    /// a producer lost every batch it had here, or a marker (whose transaction is open again):
    /// what it had before is not known any more, and the state must be rebuilt from the log.
    #[must_use]
    pub fn truncate_to(&mut self, end: u64) -> bool {
        let mut complete = true;
        self.producers.retain(|_, e| {
            let had = e.batches.len();
            while e.batches.back().is_some_and(|m| m.base_offset >= end) {
                e.batches.pop_back();
            }
            if e.last_marker_offset.is_some_and(|m| m >= end) || (had > 0 && e.batches.is_empty()) {
                complete = false;
                return false;
            }
            if e.txn_first_offset.is_some_and(|f| f >= end) {
                e.txn_first_offset = None;
            }
            true
        });
        while self.aborted.back().is_some_and(|a| a.last_offset >= end) {
            self.aborted.pop_back();
        }
        while self.unreplicated.back().is_some_and(|u| u.1 >= end) {
            self.unreplicated.pop_back();
        }
        complete
    }

    /// Retention or DeleteRecords moved the log start to `start`: producers whose batches are
    /// all gone are forgotten (Kafka's `truncateHead`; their next batch must start at 0), but
    /// not one whose transaction is open; aborted transactions wholly below go too.
    pub fn drop_before(&mut self, start: u64) -> usize {
        let before = self.producers.len();
        self.producers.retain(|_, e| {
            e.txn_first_offset.is_some() || e.last_offset().is_some_and(|o| o >= start)
        });
        while self.aborted.front().is_some_and(|a| a.last_offset < start) {
            self.aborted.pop_front();
        }
        before - self.producers.len()
    }

    /// Puts back an entry read from a snapshot; `None` (nothing changed) unless its batches
    /// are at most [`BATCHES_KEPT`] in growing offsets.
    pub fn restore_entry(
        &mut self,
        producer_id: i64,
        entry: ProducerEntry,
        batches: Vec<BatchMeta>,
    ) -> Option<()> {
        let ordered = batches
            .windows(2)
            .all(|w| w[0].last_offset < w[1].base_offset)
            && batches.iter().all(|m| m.base_offset <= m.last_offset);
        if producer_id < 0 || batches.len() > BATCHES_KEPT || !ordered {
            return None;
        }
        if batches.is_empty() && entry.last_marker_offset.is_none() {
            return None;
        }
        if entry.txn_first_offset.is_some() {
            self.transactional = TxnSeen(true);
        }
        self.producers.insert(
            producer_id,
            ProducerEntry {
                batches: batches.into(),
                ..entry
            },
        );
        Some(())
    }

    /// Puts back an aborted transaction read from a snapshot; `None` unless it comes after
    /// the ones before it.
    pub fn restore_aborted(&mut self, a: AbortedTxn) -> Option<()> {
        let after = self
            .aborted
            .back()
            .is_none_or(|b| b.last_offset < a.last_offset);
        if !after || a.first_offset > a.last_offset || a.producer_id < 0 {
            return None;
        }
        self.aborted.push_back(a);
        Some(())
    }

    /// Forgets producers whose last batch was appended `ttl_ms` or more before `now_ms`
    /// (Kafka's `producer.id.expiration.ms`), except those with an open transaction: the
    /// state stays bounded by the producers that wrote recently. Returns how many went.
    pub fn expire(&mut self, now_ms: i64, ttl_ms: i64) -> usize {
        let before = self.producers.len();
        self.producers.retain(|_, e| {
            e.txn_first_offset.is_some() || now_ms.saturating_sub(e.last_timestamp) < ttl_ms
        });
        before - self.producers.len()
    }

    /// Every entry, for a snapshot.
    pub fn entries(&self) -> impl Iterator<Item = (i64, &ProducerEntry)> {
        self.producers.iter().map(|(id, e)| (*id, e))
    }

    /// The first offset of the oldest transaction still open, or ended by a marker the high
    /// watermark has not passed: the last stable offset is there (or at the high watermark,
    /// if that is lower).
    pub fn first_unstable_offset(&self) -> Option<u64> {
        if !self.transactional.0 {
            return None;
        }
        let open = self.producers.values().filter_map(|e| e.txn_first_offset);
        open.chain(self.unreplicated.iter().map(|u| u.0)).min()
    }

    /// The high watermark reached `hw`: transactions whose markers are below it are stable.
    /// (Not in the snapshot: a state loaded from one takes the markers it covers as below the
    /// high watermark; the ones replayed from the log after it are judged against it.)
    pub fn replicated_to(&mut self, hw: u64) {
        while self.unreplicated.front().is_some_and(|u| u.1 < hw) {
            self.unreplicated.pop_front();
        }
    }

    /// Every aborted transaction, in marker order.
    pub fn aborted(&self) -> impl Iterator<Item = &AbortedTxn> {
        self.aborted.iter()
    }

    /// The aborted transactions a read of offsets `from..to` must know of: those whose abort
    /// marker is at or after `from` and whose first offset is below `to` (Kafka's
    /// `collectAbortedTxns`).
    pub fn aborted_overlapping(&self, from: u64, to: u64) -> Vec<AbortedTxn> {
        let i = self.aborted.partition_point(|a| a.last_offset < from);
        self.aborted
            .range(i..)
            .filter(|a| a.first_offset < to)
            .copied()
            .collect()
    }
}

/// A data batch against its producer's open transaction: a non-transactional one while it is
/// open is refused (Kafka's `updateCurrentTxnFirstOffset`).
fn check_txn_state(e: &ProducerEntry, b: &ProducerBatch) -> Result<(), SequenceError> {
    match e.txn_first_offset {
        Some(first) if !b.transactional => Err(SequenceError::NotTransactional {
            producer_id: b.producer_id,
            txn_first_offset: first,
        }),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(id: i64, epoch: i16, seq: i32, n: u32) -> ProducerBatch {
        ProducerBatch {
            producer_id: id,
            epoch,
            first_seq: seq,
            record_count: n,
            max_timestamp: 7,
            transactional: false,
            marker: None,
        }
    }

    fn txn(id: i64, epoch: i16, seq: i32, n: u32) -> ProducerBatch {
        ProducerBatch {
            transactional: true,
            ..batch(id, epoch, seq, n)
        }
    }

    fn marker(id: i64, epoch: i16, kind: ControlKind, coordinator_epoch: i32) -> ProducerBatch {
        ProducerBatch {
            first_seq: -1,
            record_count: 1,
            transactional: true,
            marker: Some(ControlRecord {
                kind,
                coordinator_epoch,
            }),
            ..batch(id, epoch, -1, 1)
        }
    }

    #[test]
    fn transactions_open_commit_abort_and_feed_the_aborted_list() {
        let mut s = ProducerStates::new();
        // Producer 1: plain, then a transaction from offset 2, committed at 6.
        s.record(&batch(1, 0, 0, 2), 0);
        assert_eq!(s.check(&txn(1, 0, 2, 2)), Ok(Verdict::Append));
        s.record(&txn(1, 0, 2, 2), 2);
        assert_eq!(s.first_unstable_offset(), Some(2));
        // Producer 2 opens one at 4, then producer 1 goes on in its own at 5.
        s.record(&txn(2, 3, 0, 1), 4);
        s.record(&txn(1, 0, 4, 1), 5);
        assert_eq!(s.get(1).and_then(|e| e.txn_first_offset), Some(2));
        assert_eq!(s.first_unstable_offset(), Some(2), "the oldest open one");
        let commit = marker(1, 0, ControlKind::Commit, 0);
        assert_eq!(s.check(&commit), Ok(Verdict::Append));
        s.record(&commit, 6);
        assert_eq!(
            s.first_unstable_offset(),
            Some(2),
            "until the high watermark passes its marker"
        );
        s.replicated_to(6);
        assert_eq!(s.first_unstable_offset(), Some(2));
        s.replicated_to(7);
        assert_eq!(s.first_unstable_offset(), Some(4));
        assert_eq!(s.aborted().count(), 0, "a commit is not aborted");
        // Sequences go on across transactions of one epoch.
        assert_eq!(s.check(&txn(1, 0, 5, 1)), Ok(Verdict::Append));
        // Producer 2's is aborted at 7.
        s.record(&marker(2, 3, ControlKind::Abort, 0), 7);
        s.replicated_to(8);
        assert_eq!(s.first_unstable_offset(), None);
        let a = AbortedTxn {
            producer_id: 2,
            first_offset: 4,
            last_offset: 7,
        };
        assert_eq!(s.aborted().copied().collect::<Vec<_>>(), vec![a]);
        assert_eq!(s.aborted_overlapping(0, 4), vec![]);
        assert_eq!(s.aborted_overlapping(0, 5), vec![a]);
        assert_eq!(s.aborted_overlapping(7, 100), vec![a]);
        assert_eq!(s.aborted_overlapping(8, 100), vec![]);
        // A marker for a producer with no open transaction is written and changes nothing
        // but the epochs; one for a producer unknown here too.
        let before = s.get(1).cloned();
        s.record(&marker(1, 0, ControlKind::Abort, 1), 8);
        assert_eq!(s.aborted().count(), 1);
        assert_eq!(s.get(1).map(|e| e.coordinator_epoch), Some(1));
        assert_eq!(
            s.get(1).map(|e| e.batches().count()),
            before.map(|e| e.batches().count())
        );
        assert_eq!(
            s.check(&marker(9, 0, ControlKind::Commit, 0)),
            Ok(Verdict::Append)
        );
        s.record(&marker(9, 0, ControlKind::Commit, 0), 9);
        // Known by its marker only: its first batch starts at 0.
        assert_eq!(
            s.check(&batch(9, 0, 4, 1)).map_err(|e| e.code()),
            Err(ErrorCode::UnknownProducerId)
        );
        assert_eq!(s.check(&batch(9, 0, 0, 1)), Ok(Verdict::Append));
    }

    #[test]
    fn transaction_rules_refuse_with_kafkas_codes() {
        let mut s = ProducerStates::new();
        s.record(&txn(1, 2, 0, 3), 0);
        s.record(&marker(1, 2, ControlKind::Commit, 5), 3);
        s.record(&txn(1, 2, 3, 1), 4);
        // A plain batch inside the open transaction.
        assert_eq!(
            s.check(&batch(1, 2, 4, 1)).map_err(|e| e.code()),
            Err(ErrorCode::InvalidTxnState)
        );
        assert_eq!(s.check(&txn(1, 2, 4, 1)), Ok(Verdict::Append));
        // A marker of an older producer epoch.
        assert_eq!(
            s.check(&marker(1, 1, ControlKind::Commit, 5))
                .map_err(|e| e.code()),
            Err(ErrorCode::InvalidProducerEpoch)
        );
        // A marker of an older coordinator.
        assert_eq!(
            s.check(&marker(1, 2, ControlKind::Abort, 4))
                .map_err(|e| e.code()),
            Err(ErrorCode::TransactionCoordinatorFenced)
        );
        assert_eq!(
            s.check(&marker(1, 2, ControlKind::Abort, 5)),
            Ok(Verdict::Append)
        );
        // A marker of a newer epoch (the coordinator bumped it, fencing the producer) ends the
        // transaction and moves the producer: the old epoch is refused afterwards.
        s.record(&marker(1, 3, ControlKind::Abort, 6), 5);
        assert_eq!(
            s.get(1).map(|e| (e.epoch, e.batches().count())),
            Some((3, 0))
        );
        assert_eq!(
            s.aborted().map(|a| a.first_offset).collect::<Vec<_>>(),
            vec![4]
        );
        assert_eq!(
            s.check(&txn(1, 2, 4, 1)).map_err(|e| e.code()),
            Err(ErrorCode::InvalidProducerEpoch)
        );
        assert_eq!(s.check(&batch(1, 3, 0, 1)), Ok(Verdict::Append));
        // An open transaction is not expired nor dropped by retention.
        s.record(&txn(2, 0, 0, 1), 6);
        assert_eq!(s.expire(1_000_000, 10), 1, "producer 1 goes, 2 stays");
        assert_eq!(s.drop_before(100), 0);
        s.replicated_to(7);
        assert_eq!(s.first_unstable_offset(), Some(6));
        assert_eq!(s.aborted().count(), 0, "the abort below 100 went");
    }

    #[test]
    fn a_cut_tail_reopens_a_transaction_whose_marker_was_cut() {
        let log = [
            (txn(1, 0, 0, 2), 0u64),
            (batch(2, 0, 0, 1), 2),
            (txn(3, 0, 0, 1), 3),
            (marker(1, 0, ControlKind::Abort, 0), 4),
            (marker(3, 0, ControlKind::Commit, 0), 5),
            (txn(2, 0, 1, 1), 6),
        ];
        let rebuild = |n: usize| {
            let mut r = ProducerStates::new();
            for (b, at) in &log[..n] {
                r.record(b, *at);
            }
            r.replicated_to(u64::MAX);
            r
        };
        let full = rebuild(log.len());
        assert_eq!(full.first_unstable_offset(), Some(6));
        assert_eq!(full.aborted().count(), 1);
        // Cut at 6: producer 2's transaction began in the cut; nothing else changes.
        let mut s = full.clone();
        assert!(s.truncate_to(6));
        assert_eq!(s.first_unstable_offset(), None);
        assert_eq!(s, rebuild(5));
        // Cut at 4: both markers go, so must be rebuilt; the rebuild has both transactions
        // open again and no abort.
        let mut s = full.clone();
        assert!(!s.truncate_to(4), "a cut marker needs a rebuild");
        assert_eq!(s.aborted().count(), 0);
        let r = rebuild(3);
        assert_eq!(r.first_unstable_offset(), Some(0));
        assert_eq!(r.get(3).and_then(|e| e.txn_first_offset), Some(3));
    }

    #[test]
    fn in_order_appends_duplicates_and_gaps() {
        let mut s = ProducerStates::new();
        let b0 = batch(1, 0, 0, 10);
        assert_eq!(s.check(&b0), Ok(Verdict::Append));
        s.record(&b0, 100);
        let b1 = batch(1, 0, 10, 5);
        assert_eq!(s.check(&b1), Ok(Verdict::Append));
        s.record(&b1, 200);
        // A retry of either is answered with its first offsets.
        assert_eq!(
            s.check(&b0),
            Ok(Verdict::Duplicate(BatchMeta {
                first_seq: 0,
                last_seq: 9,
                base_offset: 100,
                last_offset: 109
            }))
        );
        assert!(matches!(
            s.check(&b1),
            Ok(Verdict::Duplicate(BatchMeta {
                base_offset: 200,
                ..
            }))
        ));
        // A gap, or an overlap that is no whole earlier batch, is out of order.
        assert_eq!(
            s.check(&batch(1, 0, 16, 1)).map_err(|e| e.code()),
            Err(ErrorCode::OutOfOrderSequenceNumber)
        );
        assert_eq!(
            s.check(&batch(1, 0, 5, 5)).map_err(|e| e.code()),
            Err(ErrorCode::OutOfOrderSequenceNumber)
        );
        assert_eq!(s.check(&batch(1, 0, 15, 1)), Ok(Verdict::Append));
    }

    #[test]
    fn epochs_unknown_producers_and_wrapping() {
        let mut s = ProducerStates::new();
        assert_eq!(
            s.check(&batch(9, 0, 3, 1)).map_err(|e| e.code()),
            Err(ErrorCode::UnknownProducerId)
        );
        s.record(&batch(9, 2, 0, 3), 0);
        assert_eq!(
            s.check(&batch(9, 1, 3, 1)).map_err(|e| e.code()),
            Err(ErrorCode::InvalidProducerEpoch)
        );
        // Even a retry of an older epoch's batch is refused once the epoch moved on.
        assert_eq!(
            s.check(&batch(9, 1, 0, 3)).map_err(|e| e.code()),
            Err(ErrorCode::InvalidProducerEpoch)
        );
        // A new epoch starts at 0.
        assert_eq!(
            s.check(&batch(9, 3, 3, 1)).map_err(|e| e.code()),
            Err(ErrorCode::OutOfOrderSequenceNumber)
        );
        assert_eq!(s.check(&batch(9, 3, 0, 1)), Ok(Verdict::Append));
        s.record(&batch(9, 3, 0, 1), 3);
        assert_eq!(s.get(9).map(|e| e.batches().count()), Some(1));
        // Sequences wrap from i32::MAX to 0.
        let near = batch(5, 0, i32::MAX - 1, 4);
        assert_eq!(near.last_seq(), 1);
        s.record(&batch(5, 0, i32::MAX - 2, 3), 10);
        assert_eq!(
            s.get(5).and_then(|e| e.last()).map(|m| m.last_seq),
            Some(i32::MAX)
        );
        assert_eq!(s.check(&batch(5, 0, 0, 1)), Ok(Verdict::Append));
        assert_eq!(
            s.check(&batch(5, 0, 1, 1)).map_err(|e| e.code()),
            Err(ErrorCode::OutOfOrderSequenceNumber)
        );
    }

    #[test]
    fn only_the_last_five_batches_are_remembered() {
        let mut s = ProducerStates::new();
        for i in 0..7 {
            s.record(&batch(1, 0, i, 1), i as u64);
        }
        assert_eq!(s.get(1).map(|e| e.batches().count()), Some(BATCHES_KEPT));
        assert!(matches!(
            s.check(&batch(1, 0, 2, 1)),
            Ok(Verdict::Duplicate(_))
        ));
        // Older than the window: no longer recognised, and not in sequence either.
        assert_eq!(
            s.check(&batch(1, 0, 1, 1)).map_err(|e| e.code()),
            Err(ErrorCode::OutOfOrderSequenceNumber)
        );
    }

    #[test]
    fn truncation_retention_and_undo() {
        let mut s = ProducerStates::new();
        s.record(&batch(1, 0, 0, 2), 0);
        s.record(&batch(2, 0, 0, 2), 2);
        s.record(&batch(1, 0, 2, 2), 4);
        assert!(s.truncate_to(4));
        assert_eq!(s.get(1).and_then(|e| e.last()).map(|m| m.last_seq), Some(1));
        // Producer 2 loses its only batch: what came before is unknown.
        assert!(!s.truncate_to(2));
        assert!(s.get(2).is_none());
        s.record(&batch(3, 0, 0, 1), 10);
        assert_eq!(s.drop_before(5), 1);
        // Idle producers expire by their last append time.
        let mut idle = s.clone();
        idle.record(
            &ProducerBatch {
                max_timestamp: 1_000,
                ..batch(8, 0, 0, 1)
            },
            20,
        );
        assert_eq!(
            idle.expire(1_000 + 500, 600),
            1,
            "producer 3 (appended at 7) goes"
        );
        assert!(idle.get(8).is_some());
        assert_eq!(idle.expire(1_000 + 600, 600), 1);
        assert!(idle.is_empty());
        assert!(s.get(1).is_none() && s.get(3).is_some());
        let before = s.clone();
        let undo = s.save([3, 4, 3].into_iter());
        s.record(&batch(3, 0, 1, 1), 11);
        s.record(&batch(4, 0, 0, 1), 12);
        s.restore(undo);
        assert_eq!(s, before);
    }

    /// Random transactional and plain batches of three producers, commits and aborts, and cut
    /// tails: a cut state that claims to be complete has the open transactions, the aborted
    /// list and the last stable offset of a rebuild from the remaining log.
    #[test]
    fn random_transactions_and_cuts_match_a_rebuild() {
        for seed in 1..60u64 {
            let mut rng = Rng(seed.wrapping_mul(0x2545_F491_4F6C_DD1D));
            let mut s = ProducerStates::new();
            let mut log: Vec<(ProducerBatch, u64)> = Vec::new();
            let mut end = 0u64;
            let mut seq = [0i32; 3];
            for _ in 0..300 {
                let p = rng.below(3) as usize;
                let id = p as i64 + 1;
                let b = match rng.below(8) {
                    0..=3 => {
                        let b = txn(id, 0, seq[p], 1 + rng.below(3) as u32);
                        seq[p] = increment_sequence(seq[p], b.record_count);
                        b
                    }
                    4 => ProducerBatch {
                        producer_id: -1,
                        ..batch(id, 0, -1, 1)
                    },
                    5 | 6 => {
                        let kind = if rng.below(2) == 0 {
                            ControlKind::Commit
                        } else {
                            ControlKind::Abort
                        };
                        marker(id, 0, kind, 0)
                    }
                    _ => {
                        let keep = log.len().saturating_sub(rng.below(4) as usize);
                        log.truncate(keep);
                        end = log
                            .last()
                            .map_or(0, |(b, at)| at + u64::from(b.record_count));
                        let mut rebuilt = ProducerStates::new();
                        for (b, at) in log.iter().filter(|(b, _)| b.producer_id >= 0) {
                            rebuilt.record(b, *at);
                        }
                        rebuilt.replicated_to(u64::MAX);
                        let mut cut = s.clone();
                        let complete = cut.truncate_to(end);
                        cut.replicated_to(u64::MAX);
                        if complete {
                            assert_eq!(
                                cut.first_unstable_offset(),
                                rebuilt.first_unstable_offset(),
                                "seed {seed}: LSO after a cut at {end}"
                            );
                            assert_eq!(
                                cut.aborted().collect::<Vec<_>>(),
                                rebuilt.aborted().collect::<Vec<_>>(),
                                "seed {seed}: aborted after a cut at {end}"
                            );
                            for (id, e) in rebuilt.entries() {
                                let c = cut.get(id).map(|c| c.txn_first_offset);
                                assert_eq!(c, Some(e.txn_first_offset), "seed {seed}: {id}");
                            }
                        }
                        s = rebuilt;
                        for (p, n) in seq.iter_mut().enumerate() {
                            *n = s
                                .get(p as i64 + 1)
                                .and_then(|e| e.last())
                                .map_or(0, |m| increment_sequence(m.last_seq, 1));
                        }
                        continue;
                    }
                };
                if b.producer_id >= 0 {
                    assert!(s.check(&b).is_ok(), "seed {seed}: {b:?}: {:?}", s.check(&b));
                    s.record(&b, end);
                }
                log.push((b, end));
                end += u64::from(b.record_count);
            }
        }
    }

    use crate::batch::test_support::Rng;

    /// Random producers sending, retrying old batches and cut tails, against a model that keeps
    /// every stored batch: a new batch is appended exactly when the model says it is next, a
    /// retry of one of the last five is answered with its stored offsets, and the state after
    /// a cut equals a rebuild from the remaining log.
    #[test]
    fn random_appends_duplicates_and_truncations_match_a_model() {
        for seed in 1..40u64 {
            let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15));
            let mut s = ProducerStates::new();
            // The log: (batch, base offset), in order.
            let mut log: Vec<(ProducerBatch, u64)> = Vec::new();
            let mut end;
            // Per producer: next sequence, epoch.
            let mut next = [(0i32, 0i16); 3];
            // Producer 3 starts near the top of the sequences, so they wrap.
            let high = batch(3, 0, i32::MAX - 40, 1);
            s.record(&high, 0);
            log.push((high, 0));
            end = 1;
            next[2] = (i32::MAX - 39, 0);
            for _ in 0..400 {
                let p = rng.below(3) as usize;
                let id = p as i64 + 1;
                match rng.below(10) {
                    0..=5 => {
                        let n = 1 + rng.below(4) as u32;
                        let b = batch(id, next[p].1, next[p].0, n);
                        match s.check(&b) {
                            Ok(Verdict::Append) => {}
                            other => panic!("seed {seed}: in-order batch {b:?}: {other:?}"),
                        }
                        s.record(&b, end);
                        log.push((b, end));
                        end += u64::from(n);
                        next[p].0 = increment_sequence(b.first_seq, n);
                    }
                    6 | 7 => {
                        // A retry of one of this producer's stored batches.
                        let mine: Vec<_> = log
                            .iter()
                            .filter(|(b, _)| b.producer_id == id && b.epoch == next[p].1)
                            .collect();
                        if mine.is_empty() {
                            continue;
                        }
                        let back = rng.below(mine.len() as u64) as usize;
                        let (b, at) = mine[mine.len() - 1 - back];
                        let v = s.check(b);
                        if back < BATCHES_KEPT {
                            assert!(
                                matches!(v, Ok(Verdict::Duplicate(m)) if m.base_offset == *at),
                                "seed {seed}: retry {back} back: {v:?}"
                            );
                        } else {
                            assert!(v.is_err(), "seed {seed}: an old retry is refused");
                        }
                    }
                    8 => {
                        // An epoch bump.
                        next[p] = (0, next[p].1 + 1);
                    }
                    _ => {
                        // A cut tail (a follower's divergent records).
                        let cut = rng.below(4) as usize;
                        let keep = log.len().saturating_sub(cut);
                        log.truncate(keep);
                        end = log
                            .last()
                            .map_or(0, |(b, at)| at + u64::from(b.record_count));
                        let mut rebuilt = ProducerStates::new();
                        for (b, at) in &log {
                            rebuilt.record(b, *at);
                        }
                        let mut cut_state = s.clone();
                        if cut_state.truncate_to(end) {
                            for (id, e) in cut_state.entries() {
                                let r = rebuilt.get(id).expect("a kept producer is in the log");
                                // The cut state may remember fewer batches than a rebuild.
                                let kept: Vec<_> = e.batches().collect();
                                let all: Vec<_> = r.batches().collect();
                                assert!(all.ends_with(&kept), "seed {seed}");
                            }
                        }
                        s = rebuilt;
                        // Producers go on from what the log holds of them.
                        for (p, n) in next.iter_mut().enumerate() {
                            match s.get(p as i64 + 1) {
                                Some(e) => {
                                    let seq =
                                        e.last().map_or(0, |m| increment_sequence(m.last_seq, 1));
                                    *n = (seq, e.epoch)
                                }
                                None => *n = (0, n.1),
                            }
                        }
                    }
                }
            }
        }
    }
}
