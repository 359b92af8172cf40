//! Request handlers: decode the meta, act on the shard, encode the reply.

pub(crate) mod fetch;
pub(crate) mod groups;
mod list_offsets;
mod log_admin;
mod metadata;
pub(crate) mod offsets;
pub(crate) mod produce;
pub(crate) mod topics;

use std::rc::Rc;

use super::shard::Shard;
use crate::log::ReadChunk;
use crate::protocol::frame::{encode_meta, FrameError, RequestFrame};
use crate::protocol::{ApiKey, ErrorCode};

/// What a handler answers.
pub enum Reply {
    /// Nothing (a produce with acks=0).
    None,
    /// A frame-level error.
    Error(ErrorCode, String),
    /// An encoded meta body and payload chunks.
    Meta(Vec<u8>, Vec<ReadChunk>),
}

impl Reply {
    fn meta<T>(value: &T) -> Reply
    where
        T: crate::protocol::frame::EncodeMeta,
    {
        Reply::with_payload(value, Vec::new())
    }

    fn with_payload<T>(value: &T, chunks: Vec<ReadChunk>) -> Reply
    where
        T: crate::protocol::frame::EncodeMeta,
    {
        match encode_meta(value) {
            Ok(m) => Reply::Meta(m.to_vec(), chunks),
            Err(e) => Reply::Error(ErrorCode::UnknownServerError, e.to_string()),
        }
    }
}

impl From<FrameError> for Reply {
    fn from(e: FrameError) -> Reply {
        Reply::Error(e.code(), e.to_string())
    }
}

pub async fn dispatch(shard: &Rc<Shard>, frame: RequestFrame) -> Reply {
    let h = &frame.header;
    let Some(api) = ApiKey::from_u16(h.api_key) else {
        return Reply::Error(
            ErrorCode::InvalidRequest,
            format!("unknown api key {}", h.api_key),
        );
    };
    if !api.supports(h.api_version) {
        let (lo, hi) = api.versions();
        return Reply::Error(
            ErrorCode::UnsupportedVersion,
            format!(
                "{api:?} version {} is not supported (supported: {lo}..={hi})",
                h.api_version
            ),
        );
    }
    match api {
        ApiKey::ApiVersions => metadata::api_versions(),
        ApiKey::Metadata => metadata::metadata(shard, &frame),
        ApiKey::CreateTopics => topics::create(shard, &frame).await,
        ApiKey::DeleteTopics => topics::delete(shard, &frame).await,
        ApiKey::Produce => produce::produce(shard, frame).await,
        ApiKey::Fetch => fetch::fetch(shard, &frame).await,
        ApiKey::ListOffsets => list_offsets::list_offsets(shard, &frame).await,
        ApiKey::AlterTopicConfigs => topics::alter_config(shard, &frame).await,
        ApiKey::CreatePartitions => topics::create_partitions(shard, &frame).await,
        ApiKey::DeleteRecords => log_admin::delete_records(shard, &frame).await,
        ApiKey::DescribePartitions => log_admin::describe_partitions(shard, &frame),
        ApiKey::DecommissionPartition => topics::decommission(shard, &frame).await,
        ApiKey::FindCoordinator => groups::find_coordinator(shard, &frame),
        ApiKey::JoinGroup => groups::join(shard, &frame).await,
        ApiKey::SyncGroup => groups::sync(shard, &frame).await,
        ApiKey::Heartbeat => groups::heartbeat(shard, &frame),
        ApiKey::LeaveGroup => groups::leave(shard, &frame),
        ApiKey::OffsetCommit => offsets::commit(shard, &frame).await,
        ApiKey::OffsetFetch => offsets::fetch(shard, &frame),
        ApiKey::ListGroups => groups::list(shard),
        ApiKey::DescribeGroups => groups::describe(shard, &frame),
    }
}

/// Why a partition cannot be served here: unknown topic, or owned by another shard/broker.
pub(crate) fn locate_error(shard: &Shard, topic: &str, partition: u32) -> (ErrorCode, String) {
    let md = shard.metadata.borrow();
    match md.topic(topic) {
        None => (
            ErrorCode::UnknownTopicOrPartition,
            format!("unknown topic '{topic}'"),
        ),
        Some(t) if partition as usize >= t.partitions.len() => (
            ErrorCode::UnknownTopicOrPartition,
            format!(
                "topic '{topic}' has {} partitions, no partition {partition}",
                t.partitions.len()
            ),
        ),
        Some(t) => {
            let p = &t.partitions[partition as usize];
            if p.leader == shard.cfg.node_id && p.shard as usize == shard.id {
                match shard.applied.open_failure(t.id, partition) {
                    Some(why) => (
                        ErrorCode::KafkaStorageError,
                        format!("{topic}-{partition} cannot be opened: {why}"),
                    ),
                    None => (
                        ErrorCode::UnknownTopicOrPartition,
                        format!("{topic}-{partition} is not open yet"),
                    ),
                }
            } else {
                (
                    ErrorCode::NotLeaderOrFollower,
                    format!(
                        "{topic}-{partition} is on broker {} shard {}",
                        p.leader, p.shard
                    ),
                )
            }
        }
    }
}
