//! OffsetCommit and OffsetFetch. A commit is appended to the group's partition of
//! `__consumer_offsets` (on this same shard) and answered once it is as durable as `--fsync`
//! promises; only then does the coordinator's memory take it.

use std::rc::Rc;

use super::groups::not_here;
use super::produce::await_acks;
use super::Reply;
use crate::clock::now_ms;
use crate::group::offsets_log::{CommitRecord, PartitionOffset};
use crate::protocol::frame::RequestFrame;
use crate::protocol::messages::{
    GroupStatusResponse, OffsetCommitRequest, OffsetFetchRequest, OffsetFetchResponse,
};
use crate::protocol::ErrorCode;
use crate::server::groups::{offsets_partition, OFFSETS_TOPIC};
use crate::server::offsets_log;
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
    let offsets = req
        .offsets
        .into_iter()
        .map(|(topic, partition, offset, metadata)| PartitionOffset {
            topic,
            partition,
            offset,
            metadata,
        })
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
    offsets: Vec<PartitionOffset>,
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
    let records: Vec<CommitRecord> = offsets
        .iter()
        .map(|o| CommitRecord {
            group: group.to_string(),
            committed: o.clone(),
        })
        .collect();
    let Some((base, next)) = offsets_log::append(shard, &p, &records, now)? else {
        return Ok(());
    };
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
        .store_commit(group, now.max(0) as u64, member_id, offsets);
    if let Some(records) =
        shard
            .groups
            .begin_compaction(p.index, n, shard.cfg.offsets_compact_every)
    {
        offsets_log::compact(shard, &p, records).await;
        shard.groups.end_compaction(p.index);
    }
    Ok(())
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
            .map(|o| (o.topic, o.partition, o.offset as i64, o.metadata))
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
