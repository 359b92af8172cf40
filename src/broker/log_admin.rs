//! DeleteRecords (history truncation) and DescribePartitions (log start/end, segments, bytes
//! on disk), done by the shard that owns each partition.

use super::{locate, OpError, Shard};
use crate::partition::PartitionStats;
use crate::protocol::error_code::ErrorCode;

/// Moves the log start of `topic`-`partition` up to `before`; returns the new log start.
pub async fn delete_records(
    shard: &Shard,
    topic: &str,
    partition: u32,
    before: u64,
) -> Result<u64, OpError> {
    let p = locate(shard, topic, partition)?;
    p.truncate_before(before).await.map_err(|e| match e.code() {
        ErrorCode::OffsetOutOfRange => OpError::new(
            ErrorCode::OffsetOutOfRange,
            format!(
                "cannot truncate {topic}-{partition} before offset {before}: past the log end {}",
                p.high_watermark()
            ),
        ),
        _ => e.into(),
    })
}

/// The log's offsets, segments and bytes on disk.
pub fn describe_partition(
    shard: &Shard,
    topic: &str,
    partition: u32,
) -> Result<PartitionStats, OpError> {
    Ok(locate(shard, topic, partition)?.stats())
}
