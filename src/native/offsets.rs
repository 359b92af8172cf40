//! OffsetCommit and OffsetFetch ([`crate::broker::offsets`]).

use std::rc::Rc;

use super::{status, Reply};
use crate::broker::{offsets, Shard};
use crate::group::offsets_log::PartitionOffset;
use crate::protocol::frame::RequestFrame;
use crate::protocol::messages::{
    GroupStatusResponse, OffsetCommitRequest, OffsetFetchRequest, OffsetFetchResponse,
};
use crate::protocol::ApiKey;

pub async fn commit(shard: &Rc<Shard>, frame: &RequestFrame) -> Reply {
    let req: OffsetCommitRequest = match frame.decode_meta() {
        Ok(r) => r,
        Err(e) => return e.into(),
    };
    let committed = committed_offsets(req.offsets);
    let outcome = offsets::commit(
        shard,
        &req.group,
        &req.member_id,
        req.group_instance_id.as_deref(),
        req.generation,
        committed,
    );
    let (error_code, message) = status(shard, ApiKey::OffsetCommit, &outcome.await);
    Reply::meta(&GroupStatusResponse {
        error_code,
        message,
    })
}

pub fn fetch(shard: &Rc<Shard>, frame: &RequestFrame) -> Reply {
    let req: OffsetFetchRequest = match frame.decode_meta() {
        Ok(r) => r,
        Err(e) => return e.into(),
    };
    // No partitions named: every committed offset of the group (Kafka's null topics).
    let asked = (!req.partitions.is_empty()).then_some(req.partitions);
    let found = offsets::committed(shard, &req.group, asked);
    let (error_code, message) = status(shard, ApiKey::OffsetFetch, &found);
    Reply::meta(&OffsetFetchResponse {
        error_code,
        message,
        offsets: found
            .unwrap_or_default()
            .into_iter()
            .map(|c| match c.offset {
                Some(p) => (c.topic, c.partition, p.offset as i64, p.metadata),
                None => (c.topic, c.partition, -1, String::new()),
            })
            .collect(),
    })
}

/// The native protocol's (topic, partition, next offset, metadata) commits (it carries no
/// leader epoch).
pub(super) fn committed_offsets(offsets: Vec<(String, u32, u64, String)>) -> Vec<PartitionOffset> {
    offsets
        .into_iter()
        .map(|(topic, partition, offset, metadata)| PartitionOffset {
            topic,
            partition,
            offset,
            leader_epoch: None,
            metadata,
        })
        .collect()
}
