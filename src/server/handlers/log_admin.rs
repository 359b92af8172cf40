//! DeleteRecords (history truncation) and DescribePartitions (log start/end, segments, bytes
//! on disk), answered by the shard that owns each partition.

use std::rc::Rc;

use super::{locate_error, Reply};
use crate::protocol::frame::RequestFrame;
use crate::protocol::messages::{
    DeleteRecordsPartitionResult, DeleteRecordsRequest, DeleteRecordsResponse,
    DescribePartitionsRequest, DescribePartitionsResponse, PartitionState,
};
use crate::protocol::ErrorCode;
use crate::server::shard::Shard;

pub async fn delete_records(shard: &Rc<Shard>, frame: &RequestFrame) -> Reply {
    let req: DeleteRecordsRequest = match frame.decode_meta() {
        Ok(r) => r,
        Err(e) => return e.into(),
    };
    let mut results = Vec::with_capacity(req.partitions.len());
    for d in req.partitions {
        let mut r = DeleteRecordsPartitionResult {
            topic: d.topic.clone(),
            partition: d.partition,
            error_code: 0,
            message: String::new(),
            low_watermark: 0,
        };
        match shard.partition(&d.topic, d.partition) {
            None => {
                let (code, msg) = locate_error(shard, &d.topic, d.partition);
                r.error_code = code.code();
                r.message = msg;
            }
            Some(p) => match p.truncate_before(d.before_offset).await {
                Ok(start) => r.low_watermark = start,
                Err(e) => {
                    r.error_code = e.code().code();
                    r.message = match e.code() {
                        ErrorCode::OffsetOutOfRange => format!(
                            "cannot truncate {}-{} before offset {}: past the log end {}",
                            d.topic,
                            d.partition,
                            d.before_offset,
                            p.high_watermark()
                        ),
                        _ => e.to_string(),
                    };
                    r.low_watermark = p.log_start_offset();
                }
            },
        }
        results.push(r);
    }
    Reply::meta(&DeleteRecordsResponse {
        partitions: results,
    })
}

pub fn describe_partitions(shard: &Rc<Shard>, frame: &RequestFrame) -> Reply {
    let req: DescribePartitionsRequest = match frame.decode_meta() {
        Ok(r) => r,
        Err(e) => return e.into(),
    };
    let partitions = req
        .partitions
        .into_iter()
        .map(|(topic, partition)| {
            let mut s = PartitionState {
                topic: topic.clone(),
                partition,
                error_code: 0,
                message: String::new(),
                log_start_offset: 0,
                log_end_offset: 0,
                high_watermark: 0,
                segments: 0,
                size_bytes: 0,
            };
            match shard.partition(&topic, partition) {
                None => {
                    let (code, msg) = locate_error(shard, &topic, partition);
                    s.error_code = code.code();
                    s.message = msg;
                }
                Some(p) => {
                    let st = p.stats();
                    s.log_start_offset = st.log_start_offset;
                    s.log_end_offset = st.log_end_offset;
                    s.high_watermark = st.high_watermark;
                    s.segments = st.segments;
                    s.size_bytes = st.size_bytes;
                }
            }
            s
        })
        .collect();
    Reply::meta(&DescribePartitionsResponse { partitions })
}
