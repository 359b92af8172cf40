//! ListOffsets: earliest, latest (the high watermark), or the first offset at or after a time
//! ([`crate::broker::list_offsets`]).

use std::rc::Rc;

use super::{count_refusal, Reply};
use crate::broker::list_offsets::{list_offset, OffsetQuery};
use crate::broker::Shard;
use crate::protocol::frame::RequestFrame;
use crate::protocol::messages::{
    ListOffsetsPartitionResult, ListOffsetsRequest, ListOffsetsResponse,
};
use crate::protocol::ApiKey;

pub async fn list_offsets(shard: &Rc<Shard>, frame: &RequestFrame) -> Reply {
    let req: ListOffsetsRequest = match frame.decode_meta() {
        Ok(r) => r,
        Err(e) => return e.into(),
    };
    let mut results = Vec::with_capacity(req.partitions.len());
    for lp in &req.partitions {
        let mut r = ListOffsetsPartitionResult {
            topic: lp.topic.clone(),
            partition: lp.partition,
            error_code: 0,
            message: String::new(),
            offset: -1,
            timestamp: -1,
        };
        let found = match OffsetQuery::from_timestamp(lp.timestamp) {
            Ok(q) => list_offset(shard, &lp.topic, lp.partition, q).await,
            Err(e) => Err(e),
        };
        match found {
            Ok(Some(f)) => {
                r.offset = f.offset as i64;
                r.timestamp = f.timestamp.unwrap_or(-1);
            }
            // Nothing at or after the time: -1.
            Ok(None) => {}
            Err(e) => {
                count_refusal(shard, ApiKey::ListOffsets, e.code);
                r.error_code = e.code.code();
                r.message = e.message;
            }
        }
        results.push(r);
    }
    Reply::meta(&ListOffsetsResponse {
        partitions: results,
    })
}
