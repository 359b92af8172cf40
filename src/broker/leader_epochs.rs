//! OffsetForLeaderEpoch: where a leader epoch ends in a partition's log, answered by its
//! leader from the leader-epoch cache (`replication::LeaderEpochs::end_for`). A follower of a
//! new leader asks it before fetching, to find its divergent tail; a consumer asks it to
//! validate its position after a leader change.

use std::rc::Rc;

use super::{locate, OpError, Shard};
use crate::partition::Partition;
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
    let p = check_leader_epoch(shard, topic, partition, current_leader_epoch)?;
    let epochs = p.leader_epochs().ok_or_else(|| {
        OpError::new(
            ErrorCode::NotLeaderOrFollower,
            format!("{topic}-{partition} is not led here yet"),
        )
    })?;
    Ok(epochs.end_for(leader_epoch, p.log_end_offset()))
}

/// The partition, once the asker's view of its leader epoch (`current_leader_epoch`, when
/// given) matches this replica's: older is FENCED_LEADER_EPOCH (the asker should refresh its
/// metadata), newer UNKNOWN_LEADER_EPOCH (this broker has not applied it yet). Kafka checks
/// the same in Fetch, ListOffsets and OffsetForLeaderEpoch.
pub fn check_leader_epoch(
    shard: &Shard,
    topic: &str,
    partition: u32,
    current_leader_epoch: Option<u32>,
) -> Result<Rc<Partition>, OpError> {
    let p = locate(shard, topic, partition)?;
    let current = p.leader_epoch();
    let refused = match current_leader_epoch {
        Some(got) if got < current => Some(ReplicationError::FencedEpoch { got, current }),
        Some(got) if got > current => Some(ReplicationError::UnknownEpoch { got, current }),
        _ => None,
    };
    match refused {
        Some(e) => Err(OpError::new(e.code(), format!("{topic}-{partition}: {e}"))),
        None => Ok(p),
    }
}

/// A Kafka or native `current_leader_epoch` field: negative (-1) asks for no check.
pub fn asked_epoch(current_leader_epoch: i32) -> Option<u32> {
    u32::try_from(current_leader_epoch).ok()
}

/// The leader epoch the record at `offset` was appended in (at the log end: the epoch the
/// next one will be), the newest epoch starting at or below it, as Kafka's ListOffsets
/// answers; `None` below the first epoch this log recorded (batches from before leader
/// epochs) or when the partition is not led here.
pub fn epoch_at(p: &Partition, offset: u64) -> Option<u32> {
    let epochs = p.leader_epochs()?;
    let entries = epochs.entries();
    let at_or_below = entries.partition_point(|&(_, start)| start <= offset);
    entries.get(at_or_below.checked_sub(1)?).map(|&(e, _)| e)
}
