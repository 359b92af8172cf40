//! Partition replication as sans-IO state machines (events in, actions out; no runtime, no
//! clock, no I/O): the leader side ([`leader::Leader`]: followers' progress, the ISR as the
//! controller last accepted it, the high watermark, acks=all waits, ISR shrink/expand
//! proposals), the follower side ([`follower::Follower`]: fetch position, divergence check by
//! leader epoch, truncation, the high watermark learnt from the leader) and the leader-epoch
//! cache ([`epochs::LeaderEpochs`]). `sim` runs them against a model controller with crashes
//! and a faulty network. See ARCHITECTURE.md "Replication".

pub mod epochs;
pub mod follower;
pub mod leader;
#[cfg(test)]
mod sim;

use crate::protocol::ErrorCode;

pub use epochs::{EpochEnd, EpochEntry, LeaderEpochs, NO_EPOCH};
pub use follower::{Follower, FollowerAction};
pub use leader::{IsrProposal, Leader, LeaderAction, LeaderConfig, PartitionView, ReplicaFetch};

/// `replica.lag.time.max.ms` (topic setting and `--replica-lag-time-max-ms`): a follower
/// that has not caught up with the leader's log end for this long leaves the ISR (Kafka's
/// default).
pub const DEFAULT_REPLICA_LAG_TIME_MAX_MS: u64 = 30_000;
/// The topic setting's name.
pub const REPLICA_LAG_TIME_MAX_MS: &str = "replica.lag.time.max.ms";

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReplicationError {
    #[error("this broker no longer leads the partition (leader epoch {leader_epoch})")]
    NotLeader { leader_epoch: u32 },
    #[error("broker {broker} is not a replica of the partition (replicas {replicas:?})")]
    NotAReplica { broker: u32, replicas: Vec<u32> },
    #[error("leader epoch {got} is older than the current {current}")]
    FencedEpoch { got: u32, current: u32 },
    #[error("leader epoch {got} is newer than this leader's {current}")]
    UnknownEpoch { got: u32, current: u32 },
    #[error("the ISR has {isr} members, fewer than min.insync.replicas {min}")]
    NotEnoughReplicas { isr: usize, min: usize },
    #[error("offset {offset} is past the log end {log_end}")]
    PastLogEnd { offset: u64, log_end: u64 },
    #[error(
        "leader epoch {epoch} starting at {start_offset} would go back before epoch {latest} \
         starting at {latest_start}"
    )]
    EpochWentBack {
        epoch: u32,
        start_offset: u64,
        latest: u32,
        latest_start: u64,
    },
    #[error("leader epochs out of order: {0:?}")]
    EpochsOutOfOrder(Vec<EpochEntry>),
    #[error("truncating to {offset} would drop records below the high watermark {high_watermark}")]
    TruncationBelowHighWatermark { offset: u64, high_watermark: u64 },
}

impl ReplicationError {
    /// The Kafka error code a peer or client sees.
    pub fn code(&self) -> ErrorCode {
        match self {
            ReplicationError::NotLeader { .. } | ReplicationError::NotAReplica { .. } => {
                ErrorCode::NotLeaderOrFollower
            }
            ReplicationError::FencedEpoch { .. } => ErrorCode::FencedLeaderEpoch,
            ReplicationError::UnknownEpoch { .. } => ErrorCode::UnknownLeaderEpoch,
            ReplicationError::NotEnoughReplicas { .. } => ErrorCode::NotEnoughReplicas,
            ReplicationError::PastLogEnd { .. } => ErrorCode::OffsetOutOfRange,
            ReplicationError::EpochWentBack { .. }
            | ReplicationError::EpochsOutOfOrder(_)
            | ReplicationError::TruncationBelowHighWatermark { .. } => ErrorCode::KafkaStorageError,
        }
    }
}
