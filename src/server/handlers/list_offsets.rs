//! ListOffsets: earliest, latest (the high watermark), or the first offset at or after a time.

use std::rc::Rc;

use super::{locate_error, Reply};
use crate::protocol::frame::RequestFrame;
use crate::protocol::messages::{
    ListOffsetsPartitionResult, ListOffsetsRequest, ListOffsetsResponse, EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
};
use crate::server::shard::Shard;

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
        match shard.partition(&lp.topic, lp.partition) {
            None => {
                let (code, msg) = locate_error(shard, &lp.topic, lp.partition);
                r.error_code = code.code();
                r.message = msg;
            }
            Some(p) => match lp.timestamp {
                EARLIEST_TIMESTAMP => r.offset = p.log_start_offset() as i64,
                LATEST_TIMESTAMP => r.offset = p.high_watermark() as i64,
                ts if ts < 0 => {
                    r.error_code = crate::protocol::ErrorCode::InvalidRequest.code();
                    r.message = format!("bad timestamp {ts}");
                }
                ts => match p.offset_for_timestamp(ts).await {
                    Ok(Some((offset, at))) => {
                        r.offset = offset as i64;
                        r.timestamp = at;
                    }
                    Ok(None) => {}
                    Err(e) => {
                        r.error_code = e.code().code();
                        r.message = e.to_string();
                    }
                },
            },
        }
        results.push(r);
    }
    Reply::meta(&ListOffsetsResponse {
        partitions: results,
    })
}
