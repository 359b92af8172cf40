//! OffsetForLeaderEpoch: where a leader epoch ends in a partition's log, answered by its
//! leader from the leader-epoch cache (`replication::LeaderEpochs::end_for`). A follower of a
//! new leader asks it before fetching, to find its divergent tail; a consumer asks it to
//! validate its position after a leader change.

use super::{locate, OpError, Shard};
use crate::protocol::error_code::ErrorCode;
use crate::replication::{EpochEnd, ReplicationError};

/// The end of `leader_epoch` in `topic`-`partition`. With `current_leader_epoch`, the asker's
/// view of the leader is checked first: older is FENCED_LEADER_EPOCH, newer
/// UNKNOWN_LEADER_EPOCH (this broker has not applied it yet).
pub fn offset_for_leader_epoch(
    shard: &Shard,
    topic: &str,
    partition: u32,
    current_leader_epoch: Option<u32>,
    leader_epoch: u32,
) -> Result<EpochEnd, OpError> {
    let p = locate(shard, topic, partition)?;
    let current = p.leader_epoch();
    if let Some(asked) = current_leader_epoch {
        let refused = if asked < current {
            Some(ReplicationError::FencedEpoch {
                got: asked,
                current,
            })
        } else if asked > current {
            Some(ReplicationError::UnknownEpoch {
                got: asked,
                current,
            })
        } else {
            None
        };
        if let Some(e) = refused {
            return Err(OpError::new(e.code(), format!("{topic}-{partition}: {e}")));
        }
    }
    let epochs = p.leader_epochs().ok_or_else(|| {
        OpError::new(
            ErrorCode::NotLeaderOrFollower,
            format!("{topic}-{partition} is not led here yet"),
        )
    })?;
    Ok(epochs.end_for(leader_epoch, p.log_end_offset()))
}
