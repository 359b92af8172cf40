//! OffsetCommit and OffsetFetch. A commit is appended to the group's partition of
//! `__consumer_offsets` (on this same shard) and answered once it is as durable as `--fsync`
//! promises; only then does the coordinator's memory take it.

use std::rc::Rc;
use std::time::Instant;

use super::groups::not_here;
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
    if let Some((code, msg)) = not_here(shard, &req.group) {
        return status(code, msg);
    }
    if req.group.contains('\0') {
        return status(
            ErrorCode::InvalidGroupId,
            "a group id cannot contain NUL".into(),
        );
    }
    let offsets: Vec<((String, u32), u64, String)> = req
        .offsets
        .into_iter()
        .map(|(t, p, o, m)| ((t, p), o, m))
        .collect();
    if let Err(e) = shard
        .groups
        .check_commit(&req.group, &req.member_id, req.generation, &offsets)
    {
        return status(e.code, e.message);
    }
    if offsets.is_empty() {
        return status(ErrorCode::None, String::new());
    }
    let n = shard
        .metadata
        .borrow()
        .topic(OFFSETS_TOPIC)
        .map_or(1, |t| t.partitions.len() as u32);
    let Some(p) = shard.partition(OFFSETS_TOPIC, offsets_partition(&req.group, n)) else {
        return status(
            ErrorCode::CoordinatorNotAvailable,
            "the offsets partition is not open".into(),
        );
    };
    let now = now_ms();
    let mut builder = BatchBuilder::new();
    for ((topic, partition), offset, metadata) in &offsets {
        let (key, value) = encode_commit(&req.group, topic, *partition, *offset, metadata);
        builder.push(now, Some(&key), &value, &[], &[]);
    }
    let bytes = match builder.build() {
        Ok(b) => b,
        Err(e) => return status(ErrorCode::UnknownServerError, e.to_string()),
    };
    let view = match BatchView::validate(&bytes) {
        Ok(v) => v,
        Err(e) => return status(ErrorCode::UnknownServerError, e.to_string()),
    };
    let next = match p.append(&[view], now, &shard.cache) {
        Ok((_, next)) => next,
        Err(e) => return status(e.code(), e.to_string()),
    };
    shard.group_commit.mark_dirty(&p);
    let deadline = Instant::now() + shard.cfg.max_produce_timeout;
    let rx = p.wait_for_ack(next - 1);
    let acked = futures_lite::future::or(async { Some(rx.recv_async().await) }, async {
        shard.deadlines.sleep_until(deadline).await;
        None
    })
    .await;
    match acked {
        Some(Ok(Ok(()))) => {
            shard
                .groups
                .store_offsets(&req.group, now.max(0) as u64, offsets);
            status(ErrorCode::None, String::new())
        }
        Some(Ok(Err(code))) => status(code, "the commit could not be stored".into()),
        Some(Err(_)) => status(
            ErrorCode::UnknownServerError,
            "the offsets partition went away".into(),
        ),
        None => status(
            ErrorCode::RequestTimedOut,
            "the commit was not durable in time".into(),
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
