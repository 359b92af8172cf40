//! OffsetCommit and OffsetFetch. A commit is appended to the group's partition of
//! `__consumer_offsets` (on this same shard) and answered once it is as durable as `--fsync`
//! promises; only then does the coordinator's memory take it.

use std::rc::Rc;

use super::groups::not_here;
use super::produce::await_acks;
use super::Reply;
use crate::batch::{BatchBuilder, BatchView};
use crate::clock::now_ms;
use crate::protocol::frame::RequestFrame;
use crate::protocol::messages::{
    GroupStatusResponse, OffsetCommitRequest, OffsetFetchRequest, OffsetFetchResponse,
};
use crate::protocol::ErrorCode;
use crate::server::groups::{encode_commit, offsets_partition, OFFSETS_TOPIC};
use crate::server::shard::Shard;

fn status(code: ErrorCode, message: String) -> Reply {
    Reply::meta(&GroupStatusResponse {
        error_code: code.code(),
        message,
    })
}

pub async fn commit(shard: &Rc<Shard>, frame: &RequestFrame) -> Reply {
    let req: OffsetCommitRequest = match frame.decode_meta() {
        Ok(r) => r,
        Err(e) => return e.into(),
    };
    let offsets: Vec<((String, u32), u64, String)> = req
        .offsets
        .into_iter()
        .map(|(t, p, o, m)| ((t, p), o, m))
        .collect();
    match commit_offsets(shard, &req.group, &req.member_id, req.generation, offsets).await {
        Ok(()) => status(ErrorCode::None, String::new()),
        Err((code, message)) => status(code, message),
    }
}

/// OffsetCommit for either protocol: checked against the group, appended to the group's
/// `__consumer_offsets` partition, and stored in the coordinator once durable.
pub(crate) async fn commit_offsets(
    shard: &Rc<Shard>,
    group: &str,
    member_id: &str,
    generation: i32,
    offsets: Vec<((String, u32), u64, String)>,
) -> Result<(), (ErrorCode, String)> {
    if let Some(refused) = not_here(shard, group) {
        return Err(refused);
    }
    if group.contains('\0') {
        return Err((
            ErrorCode::InvalidGroupId,
            "a group id cannot contain NUL".into(),
        ));
    }
    shard
        .groups
        .check_commit(group, member_id, generation, &offsets)
        .map_err(|e| (e.code, e.message))?;
    if offsets.is_empty() {
        return Ok(());
    }
    let n = shard
        .metadata
        .borrow()
        .topic(OFFSETS_TOPIC)
        .map_or(1, |t| t.partitions.len() as u32);
    let Some(p) = shard.partition(OFFSETS_TOPIC, offsets_partition(group, n)) else {
        return Err((
            ErrorCode::CoordinatorNotAvailable,
            "the offsets partition is not open".into(),
        ));
    };
    let now = now_ms();
    let mut builder = BatchBuilder::new();
    for ((topic, partition), offset, metadata) in &offsets {
        let (key, value) = encode_commit(group, topic, *partition, *offset, metadata);
        builder.push(now, Some(&key), &value, &[], &[]);
    }
    let bytes = builder
        .build()
        .map_err(|e| (ErrorCode::UnknownServerError, e.to_string()))?;
    let view =
        BatchView::validate(&bytes).map_err(|e| (ErrorCode::UnknownServerError, e.to_string()))?;
    let (base, next) = p
        .append(&[view], now, &shard.cache)
        .map_err(|e| (e.code(), e.to_string()))?;
    shard.groups.commit_appended(p.index, base, offsets.len());
    shard.group_commit.mark_dirty(&p);
    // Timeout 0: the `--max-produce-timeout-ms` cap, as a produce would wait.
    let failed = await_acks(shard, vec![(0, p.wait_for_ack(next - 1))], 0).await;
    shard.groups.commit_settled(p.index, base);
    if let Some((_, code, why)) = failed.into_iter().next() {
        return Err((code, format!("the commit was not stored: {why}")));
    }
    shard
        .groups
        .store_offsets(group, now.max(0) as u64, offsets);
    if let Some(records) =
        shard
            .groups
            .begin_compaction(p.index, n, shard.cfg.offsets_compact_every)
    {
        compact(shard, &p, records).await;
        shard.groups.end_compaction(p.index);
    }
    Ok(())
}

/// Compacts an offsets partition: appends a snapshot of the latest commit of every group it
/// hosts, waits until that is durable, then truncates the log below it (Kafka compacts by key;
/// snapshot-and-truncate keeps the same latest-per-key content with the log's own tools).
async fn compact(
    shard: &Rc<Shard>,
    p: &Rc<crate::partition::Partition>,
    records: Vec<(Vec<u8>, Vec<u8>)>,
) {
    let now = now_ms();
    let mut snapshot_base = None;
    let mut last_next = None;
    for chunk in records.chunks(1024) {
        let mut builder = BatchBuilder::new();
        for (k, v) in chunk {
            builder.push(now, Some(k), v, &[], &[]);
        }
        let Ok(bytes) = builder.build() else { return };
        let Ok(view) = BatchView::validate(&bytes) else {
            return;
        };
        match p.append(&[view], now, &shard.cache) {
            Ok((base, next)) => {
                snapshot_base.get_or_insert(base);
                last_next = Some(next);
            }
            Err(e) => {
                log::warn!("{OFFSETS_TOPIC}-{}: compaction append failed: {e}", p.index);
                return;
            }
        }
    }
    // No commit recorded at all: the whole history is obsolete.
    let (base, next) = match (snapshot_base, last_next) {
        (Some(b), Some(n)) => (b, n),
        _ => (p.log_end_offset(), p.log_end_offset()),
    };
    if next > base {
        shard.group_commit.mark_dirty(p);
        let rx = p.wait_for_ack(next - 1);
        if !matches!(rx.recv_async().await, Ok(Ok(()))) {
            return;
        }
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

pub fn fetch(shard: &Rc<Shard>, frame: &RequestFrame) -> Reply {
    let req: OffsetFetchRequest = match frame.decode_meta() {
        Ok(r) => r,
        Err(e) => return e.into(),
    };
    let mut resp = OffsetFetchResponse {
        error_code: 0,
        message: String::new(),
        offsets: Vec::new(),
    };
    if let Some((code, msg)) = not_here(shard, &req.group) {
        resp.error_code = code.code();
        resp.message = msg;
        return Reply::meta(&resp);
    }
    if req.partitions.is_empty() {
        // No partitions named: every committed offset of the group (Kafka's null topics).
        resp.offsets = shard
            .groups
            .all_committed(&req.group)
            .into_iter()
            .map(|(t, p, o, m)| (t, p, o as i64, m))
            .collect();
        return Reply::meta(&resp);
    }
    resp.offsets = req
        .partitions
        .into_iter()
        .map(|(t, p)| match shard.groups.committed(&req.group, &t, p) {
            Some((o, m)) => (t, p, o as i64, m),
            None => (t, p, -1, String::new()),
        })
        .collect();
    Reply::meta(&resp)
}
