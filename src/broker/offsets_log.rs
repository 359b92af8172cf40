//! The shell around `group::offsets_log`: committed offsets appended to, replayed from and
//! compacted in the shard's `__consumer_offsets` partitions. A group's partition lives on its
//! coordinator's shard, so every call here is local.

use std::rc::Rc;

use super::group_host::OFFSETS_TOPIC;
use super::shard::Shard;
use crate::batch::control::{ControlKind, ControlRecord};
use crate::batch::{BatchBuilder, BatchHeader, BatchIter, BatchView, RecordView};
use crate::batch::{FLAG_CONTROL, FLAG_TRANSACTIONAL};
use crate::clock::now_ms;
use crate::group::offsets_log::{CommitRecord, OffsetsRecord};
use crate::log::{FileReads, LogError};
use crate::partition::{Partition, ReadLimits};
use crate::protocol::ErrorCode;

/// Records per appended batch (a compaction snapshot may hold many).
const RECORDS_PER_BATCH: usize = 1024;

/// Appends records (commits, tombstones) to an offsets partition, in batches of at most
/// [`RECORDS_PER_BATCH`]: (base offset of the first, next offset after the last). Not durable
/// yet: the caller marks the partition dirty and waits for the ack. With `producer` (id,
/// epoch) the batches are that producer's transactional batches (TxnOffsetCommit), which
/// the transaction's marker commits or aborts.
pub fn append(
    shard: &Shard,
    p: &Partition,
    records: &[OffsetsRecord],
    now: i64,
    producer: Option<(i64, i16)>,
) -> Result<Option<(u64, u64)>, (ErrorCode, String)> {
    let mut range: Option<(u64, u64)> = None;
    for chunk in records.chunks(RECORDS_PER_BATCH) {
        let mut builder = BatchBuilder::new();
        if let Some((id, epoch)) = producer {
            // Kafka's coordinator writes sequence 0: the epoch is what is checked.
            builder = builder.producer(id, epoch, 0);
        }
        for r in chunk {
            let (key, value) = r.encode();
            builder.push(now, Some(&key), &value, &[], &[]);
        }
        let internal = |e: &dyn std::fmt::Display| (ErrorCode::UnknownServerError, e.to_string());
        let mut bytes = builder.build().map_err(|e| internal(&e))?;
        if producer.is_some() {
            crate::batch::add_flags(&mut bytes, FLAG_TRANSACTIONAL);
        }
        let view = BatchView::validate(&bytes).map_err(|e| internal(&e))?;
        let (base, next) = p
            .append(&[view], now, &shard.cache)
            .map_err(|e| (e.code(), e.to_string()))?;
        range = Some((range.map_or(base, |r| r.0), next));
    }
    Ok(range)
}

/// Loads the committed offsets of one `__consumer_offsets` partition into the shard's
/// groups, reading it from the log start to the high watermark. `current` is asked after
/// every read (each an await): once it says no (the leadership moved meanwhile), the replay
/// stops, so two loads of one partition never interleave. True when it read to the end.
pub async fn replay(shard: &Rc<Shard>, p: &Partition, current: impl Fn() -> bool) -> bool {
    let end = p.high_watermark();
    let mut loaded = 0usize;
    let read = read_records(shard, p, current, |h, r| {
        let time = r.timestamp_ms.max(0) as u64;
        // A transaction's end: its offsets become the groups' (commit) or are dropped.
        if h.flags & FLAG_CONTROL != 0 {
            if let Ok(m) = ControlRecord::parse(r.key(), r.value()) {
                let commit = m.kind == ControlKind::Commit;
                shard
                    .groups
                    .end_txn_offsets(p.index, h.producer_id, commit, time);
            }
            return;
        }
        // A tombstone's value is empty (or null, as a Kafka-style one would be).
        let value = r.value().unwrap_or_default();
        match OffsetsRecord::decode(r.key().unwrap_or_default(), value) {
            // TxnOffsetCommit: pending until the transaction's marker.
            Some(OffsetsRecord::Commit(c)) if h.flags & FLAG_TRANSACTIONAL != 0 => {
                shard
                    .groups
                    .add_txn_offsets(p.index, h.producer_id, &c.group, vec![c.committed]);
            }
            Some(OffsetsRecord::Commit(c)) => {
                shard
                    .groups
                    .store_commit(&c.group, time, "", vec![c.committed]);
                loaded += 1;
            }
            Some(OffsetsRecord::Removed {
                group,
                topic,
                partition,
            }) => shard.groups.remove_offsets(&group, &[(topic, partition)]),
            None => {}
        }
    })
    .await;
    if read {
        log::info!(
            "shard {}: loaded {loaded} committed offsets from {OFFSETS_TOPIC}-{} (offsets below {end})",
            shard.id,
            p.index
        );
    }
    read
}

/// Reads an internal partition (`__consumer_offsets`, `__transactions`) from its log start
/// to its high watermark, handing `f` each record (with its batch's header) in order. `current` is asked after every
/// read (each an await): once it says no, the read stops (false). A hole in the log is
/// skipped (logged): the records after it are newer than any lost in it.
pub async fn read_records(
    shard: &Shard,
    p: &Partition,
    current: impl Fn() -> bool,
    mut f: impl FnMut(&BatchHeader, &RecordView<'_>),
) -> bool {
    let mut at = p.log_start_offset();
    let end = p.high_watermark();
    while at < end {
        let limits = ReadLimits {
            max_bytes: 1 << 20,
            file_reads: FileReads::Copy,
        };
        let read = p.read(at, limits, &shard.cache).await;
        if !current() {
            return false;
        }
        let chunks = match read {
            Ok(c) if !c.is_empty() => c,
            Ok(_) => break,
            Err(LogError::Missing { from, to, why }) if to > at => {
                log::error!(
                    "reading {}-{}: records at offsets {from}..{to} are lost ({why}); \
                     reading the rest",
                    p.topic,
                    p.index
                );
                at = to;
                continue;
            }
            Err(e) => {
                log::error!("reading {}-{}: {e}", p.topic, p.index);
                break;
            }
        };
        let before = at;
        for chunk in &chunks {
            let buf = crate::batch::aligned16(chunk.as_slice().unwrap_or_default());
            for batch in BatchIter::new(&buf).map_while(Result::ok) {
                let Ok(records) = batch.records() else { break };
                let h = *batch.header();
                for r in records {
                    if r.offset < at {
                        continue;
                    }
                    at = r.offset + 1;
                    f(&h, &r);
                }
            }
        }
        if at == before {
            break; // no progress: never spin
        }
    }
    true
}

/// Compacts an offsets partition: appends a snapshot of the latest commit of every group it
/// hosts, waits until that is durable, then truncates the log below it (Kafka compacts by key;
/// snapshot-and-truncate keeps the same latest-per-key content with the log's own tools).
pub async fn compact(shard: &Rc<Shard>, p: &Rc<Partition>, records: Vec<CommitRecord>) {
    let records: Vec<OffsetsRecord> = records.into_iter().map(OffsetsRecord::Commit).collect();
    let (base, next) = match append(shard, p, &records, now_ms(), None) {
        Ok(Some(range)) => range,
        // No commit recorded at all: the whole history is obsolete.
        Ok(None) => (p.log_end_offset(), p.log_end_offset()),
        Err((_, e)) => {
            log::warn!("{OFFSETS_TOPIC}-{}: compaction append failed: {e}", p.index);
            return;
        }
    };
    if next > base {
        shard.group_commit.mark_dirty(p);
        // In every ISR member, as commits are.
        let rx = p.wait_for_all(next);
        if !matches!(rx.recv_async().await, Ok(Ok(()))) {
            return;
        }
    }
    // Deposed meanwhile: the new leader compacts its own log (see `coordination`).
    if p.is_follower() {
        return;
    }
    let point = shard
        .groups
        .compaction_point(p.index, base)
        .min(p.high_watermark());
    match p.truncate_before(point).await {
        Ok(start) => log::info!(
            "{OFFSETS_TOPIC}-{}: compacted, log starts at {start}",
            p.index
        ),
        Err(e) => log::warn!(
            "{OFFSETS_TOPIC}-{}: compaction truncate failed: {e}",
            p.index
        ),
    }
}
