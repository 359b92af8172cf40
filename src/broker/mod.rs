//! The broker's operations, protocol-neutral: what a produce, a fetch, a list-offsets, a topic
//! change or a group request does to this shard's state, with typed results. Both listeners
//! are codecs over this layer ([`crate::native`], [`crate::kafka`]): decode, call an operation
//! here, encode. Nothing here knows a wire format; what replication adds (follower fetches,
//! ISR-aware acks) goes here once and both protocols get it.
//!
//! - [`shard`]: one shard's state (its partitions, tail cache, group commit, groups, metadata).
//! - [`produce`], [`fetch`], [`list_offsets`], [`log_admin`]: the data path and its admin.
//! - [`topics`]: topic changes as controller proposals, answered once every shard applied them.
//! - [`reassignments`]: partition reassignment, broker drains, preferred-leader elections.
//! - [`metrics`]: what a shard reports to a metrics scrape.
//! - [`groups`], [`offsets`]: group membership and committed offsets, over [`group_host`]
//!   (the shell around the sans-IO coordinator) and [`offsets_log`] (`__consumer_offsets`);
//!   [`coordination`]: which groups a shard coordinates follows the leadership of their
//!   offsets partitions; [`internal_topics`]: creating `__consumer_offsets` and
//!   `__transactions`.
//! - [`transactions`]: the transaction APIs, over [`txn_host`] (the shell around the sans-IO
//!   transaction coordinators; its markers go out through `native::marker_sender`).

pub mod acls;
pub mod config;
pub mod coordination;
pub mod fetch;
pub mod filtered_read;
pub mod group_host;
pub mod groups;
pub mod internal_topics;
pub mod leader_epochs;
pub mod list_offsets;
pub mod log_admin;
pub mod machine_memory;
pub mod metrics;
pub mod offsets;
pub mod offsets_log;
pub mod produce;
pub mod producer_ids;
pub mod quotas;
pub mod reassignments;
pub mod replica_fetch;
pub mod shard;
pub mod topics;
pub mod transactions;
pub mod txn_host;
pub mod txn_markers;
pub mod users;

#[cfg(test)]
pub(crate) mod tests;

use std::rc::Rc;
use std::time::{Duration, Instant};

pub use config::BrokerConfig;
pub use shard::Shard;

use crate::partition::Partition;
use crate::protocol::error_code::ErrorCode;

/// An operation refused: the error code both protocols put on the wire, and why.
#[derive(thiserror::Error, Debug, Clone, PartialEq, Eq)]
#[error("{message}")]
pub struct OpError {
    pub code: ErrorCode,
    pub message: String,
}

impl OpError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> OpError {
        OpError {
            code,
            message: message.into(),
        }
    }
}

impl From<(ErrorCode, String)> for OpError {
    fn from((code, message): (ErrorCode, String)) -> OpError {
        OpError { code, message }
    }
}

impl From<crate::log::LogError> for OpError {
    fn from(e: crate::log::LogError) -> OpError {
        OpError::new(e.code(), e.to_string())
    }
}

impl From<crate::group::coordinator::GroupError> for OpError {
    fn from(e: crate::group::coordinator::GroupError) -> OpError {
        OpError {
            code: e.code,
            message: e.message,
        }
    }
}

/// The partition if this shard leads it and may take writes: as [`locate`], and also
/// NOT_LEADER_OR_FOLLOWER when this broker is fenced (a cluster member whose session ran out)
/// or the metadata moved the leadership away from an open partition.
pub fn locate_leader(shard: &Shard, topic: &str, partition: u32) -> Result<Rc<Partition>, OpError> {
    if shard.controller.broker_fenced() {
        return Err(OpError::new(
            ErrorCode::NotLeaderOrFollower,
            format!(
                "broker {} is fenced (no heartbeat answered within the session timeout): it \
                 leads no partition until the controller unfences it",
                shard.cfg.node_id
            ),
        ));
    }
    let p = locate(shard, topic, partition)?;
    let md = shard.metadata.borrow();
    // Only a metadata that names another leader refuses: a partition is opened before the
    // shard's metadata view moves to the version that placed it here.
    let moved = md
        .topic(topic)
        .filter(|t| t.id == p.topic_id)
        .and_then(|t| t.partitions.get(partition as usize))
        .is_some_and(|pi| pi.leader != shard.cfg.node_id || pi.shard as usize != shard.id);
    if moved {
        return Err(OpError::new(
            ErrorCode::NotLeaderOrFollower,
            format!("{topic}-{partition}: this broker is not its leader any more"),
        ));
    }
    Ok(p)
}

/// The partition if this shard owns it, else why it cannot be served here: unknown topic or
/// partition, owned by another shard or broker, or not openable on this one.
pub fn locate(shard: &Shard, topic: &str, partition: u32) -> Result<Rc<Partition>, OpError> {
    if let Some(p) = shard.partition(topic, partition) {
        if let Some((leader, epoch)) = p.following() {
            return Err(OpError::new(
                ErrorCode::NotLeaderOrFollower,
                format!("{topic}-{partition}: broker {leader} leads it (leader epoch {epoch})"),
            ));
        }
        return Ok(p);
    }
    let md = shard.metadata.borrow();
    let (code, message) = match md.topic(topic) {
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
    };
    Err(OpError { code, message })
}

/// A request's timeout in milliseconds, capped by `--max-produce-timeout-ms`; 0 means the cap.
pub fn request_timeout(shard: &Shard, ms: u32) -> Duration {
    let max = shard.cfg.max_produce_timeout;
    if ms == 0 {
        max
    } else {
        Duration::from_millis(u64::from(ms)).min(max)
    }
}

/// What `rx` answers, or `None` once `deadline` passes (on the shard's timer wheel).
async fn recv_until<T>(
    shard: &Shard,
    rx: &flume::Receiver<T>,
    deadline: Instant,
) -> Option<Result<T, flume::RecvError>> {
    futures_lite::future::or(async { Some(rx.recv_async().await) }, async {
        shard.deadlines.sleep_until(deadline).await;
        None
    })
    .await
}
