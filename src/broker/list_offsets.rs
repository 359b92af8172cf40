//! ListOffsets: earliest, latest (the high watermark), or the first offset at or after a time.

use super::{locate, OpError, Shard};
use crate::protocol::error_code::ErrorCode;

/// Which offset a ListOffsets asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OffsetQuery {
    Earliest,
    Latest,
    /// The first record with a timestamp at or after this (milliseconds).
    AtOrAfter(i64),
}

impl OffsetQuery {
    /// The protocols' encoding: -2 earliest, -1 latest, else a timestamp (>= 0).
    pub fn from_timestamp(ts: i64) -> Result<OffsetQuery, OpError> {
        match ts {
            -2 => Ok(OffsetQuery::Earliest),
            -1 => Ok(OffsetQuery::Latest),
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
/// the time asked.
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
        OffsetQuery::AtOrAfter(ts) => {
            p.offset_for_timestamp(ts)
                .await?
                .map(|(offset, at)| FoundOffset {
                    offset,
                    timestamp: Some(at),
                })
        }
    })
}
