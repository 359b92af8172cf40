//! ListOffsets: earliest, latest (the high watermark), the first offset at or after a time, or
//! the record with the largest timestamp.

use super::{locate, OpError, Shard};
use crate::protocol::error_code::ErrorCode;

/// The special timestamps of a ListOffsets query, Kafka's numbers (both protocols use them;
/// the broker's operations know no wire format, so they are named here).
const LATEST_TIMESTAMP: i64 = -1;
const EARLIEST_TIMESTAMP: i64 = -2;
const MAX_TIMESTAMP: i64 = -3;
/// EARLIEST_LOCAL_TIMESTAMP (ListOffsets v8, tiered storage).
const EARLIEST_LOCAL_TIMESTAMP: i64 = -4;

/// Which offset a ListOffsets asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OffsetQuery {
    Earliest,
    Latest,
    /// The last stable offset (the latest a read_committed consumer may read to).
    LastStable,
    /// The first record with a timestamp at or after this (milliseconds).
    AtOrAfter(i64),
    /// The record with the largest timestamp (Kafka's MAX_TIMESTAMP, KIP-734).
    MaxTimestamp,
}

impl OffsetQuery {
    /// The protocols' encoding (Kafka's): -1 latest, -2 earliest, -3 max timestamp, -4
    /// earliest local (rill keeps every segment locally, so the earliest), else a timestamp
    /// (>= 0).
    pub fn from_timestamp(ts: i64) -> Result<OffsetQuery, OpError> {
        match ts {
            EARLIEST_TIMESTAMP | EARLIEST_LOCAL_TIMESTAMP => Ok(OffsetQuery::Earliest),
            LATEST_TIMESTAMP => Ok(OffsetQuery::Latest),
            MAX_TIMESTAMP => Ok(OffsetQuery::MaxTimestamp),
            ts if ts < 0 => Err(OpError::new(
                ErrorCode::InvalidRequest,
                format!("bad timestamp {ts}"),
            )),
            ts => Ok(OffsetQuery::AtOrAfter(ts)),
        }
    }
}

/// A found offset, with the timestamp of its record when the query was by time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FoundOffset {
    pub offset: u64,
    pub timestamp: Option<i64>,
}

/// The offset `query` names in `topic`-`partition`; `None` when nothing is at or after
/// the time asked (or, for the max timestamp, the partition has no record).
pub async fn list_offset(
    shard: &Shard,
    topic: &str,
    partition: u32,
    query: OffsetQuery,
) -> Result<Option<FoundOffset>, OpError> {
    let p = locate(shard, topic, partition)?;
    Ok(match query {
        OffsetQuery::Earliest => Some(FoundOffset {
            offset: p.log_start_offset(),
            timestamp: None,
        }),
        OffsetQuery::Latest => Some(FoundOffset {
            offset: p.high_watermark(),
            timestamp: None,
        }),
        OffsetQuery::LastStable => Some(FoundOffset {
            offset: p.last_stable_offset(),
            timestamp: None,
        }),
        OffsetQuery::AtOrAfter(ts) => {
            p.offset_for_timestamp(ts)
                .await?
                .map(|(offset, at)| FoundOffset {
                    offset,
                    timestamp: Some(at),
                })
        }
        OffsetQuery::MaxTimestamp => {
            p.offset_of_max_timestamp()
                .await?
                .map(|(offset, at)| FoundOffset {
                    offset,
                    timestamp: Some(at),
                })
        }
    })
}
