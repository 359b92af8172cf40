//! DeleteRecords and DescribePartitions ([`crate::broker::log_admin`]).

use std::rc::Rc;

use super::{status, Reply};
use crate::broker::log_admin::{delete_records as truncate, describe_partition};
use crate::broker::Shard;
use crate::protocol::frame::RequestFrame;
use crate::protocol::messages::{
    DeleteRecordsPartitionResult, DeleteRecordsRequest, DeleteRecordsResponse,
    DescribePartitionsRequest, DescribePartitionsResponse, PartitionState,
};
use crate::protocol::ApiKey;

pub async fn delete_records(shard: &Rc<Shard>, frame: &RequestFrame) -> Reply {
    let req: DeleteRecordsRequest = match frame.decode_meta() {
        Ok(r) => r,
        Err(e) => return e.into(),
    };
    let mut results = Vec::with_capacity(req.partitions.len());
    for d in req.partitions {
        let outcome = truncate(shard, &d.topic, d.partition, d.before_offset).await;
        let (error_code, message) = status(shard, ApiKey::DeleteRecords, &outcome);
        results.push(DeleteRecordsPartitionResult {
            topic: d.topic,
            partition: d.partition,
            error_code,
            message,
            low_watermark: outcome.unwrap_or(0),
        });
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
            let outcome = describe_partition(shard, &topic, partition);
            let (error_code, message) = status(shard, ApiKey::DescribePartitions, &outcome);
            let st = outcome.ok();
            PartitionState {
                topic,
                partition,
                error_code,
                message,
                log_start_offset: st.map_or(0, |s| s.log_start_offset),
                log_end_offset: st.map_or(0, |s| s.log_end_offset),
                high_watermark: st.map_or(0, |s| s.high_watermark),
                segments: st.map_or(0, |s| s.segments),
                size_bytes: st.map_or(0, |s| s.size_bytes),
            }
        })
        .collect();
    Reply::meta(&DescribePartitionsResponse { partitions })
}
