//! ReplicaFetch (native key 21, [`crate::broker::replica_fetch`]): the stored batches go out
//! as they are after the meta naming each partition's slice of the payload.

use std::rc::Rc;
use std::time::Duration;

use super::Reply;
use crate::broker::replica_fetch::{self, ReplicaFetchPartition};
use crate::broker::{OpError, Shard};
use crate::log::ReadChunk;
use crate::protocol::frame::RequestFrame;
use crate::protocol::messages::{
    ReplicaFetchPartitionResult, ReplicaFetchRequest, ReplicaFetchResponse,
};
use crate::replication::ReplicaFetch;

pub async fn replica_fetch(shard: &Rc<Shard>, frame: &RequestFrame) -> Reply {
    let req: ReplicaFetchRequest = match frame.decode_meta() {
        Ok(r) => r,
        Err(e) => return e.into(),
    };
    let op = replica_fetch::ReplicaFetchRequest {
        replica_id: req.replica_id,
        broker_epoch: req.broker_epoch,
        partitions: req
            .partitions
            .iter()
            .map(|fp| ReplicaFetchPartition {
                topic: fp.topic.clone(),
                partition: fp.partition,
                fetch: ReplicaFetch {
                    leader_epoch: fp.leader_epoch,
                    fetch_offset: fp.fetch_offset,
                    log_end: fp.log_end,
                },
                max_bytes: fp.max_bytes as usize,
            })
            .collect(),
        max_wait: Duration::from_millis(u64::from(req.max_wait_ms)),
        max_bytes: req.max_bytes as usize,
    };
    let reads = replica_fetch::replica_fetch(shard, &op).await;
    let mut partitions = Vec::with_capacity(reads.len());
    let mut chunks: Vec<ReadChunk> = Vec::new();
    let mut total = 0usize;
    for (fp, read) in req.partitions.iter().zip(reads) {
        let mut r = ReplicaFetchPartitionResult {
            topic: fp.topic.clone(),
            partition: fp.partition,
            error_code: 0,
            message: String::new(),
            high_watermark: 0,
            log_start_offset: 0,
            payload_offset: total as u32,
            payload_len: 0,
        };
        match read {
            Ok(read) => {
                r.high_watermark = read.high_watermark;
                r.log_start_offset = read.log_start_offset;
                let len = read.len();
                r.payload_len = len as u32;
                total += len;
                chunks.extend(read.chunks);
            }
            Err(OpError { code, message }) => {
                r.error_code = code.code();
                r.message = message;
                r.log_start_offset =
                    replica_fetch::replica_start(shard, &fp.topic, fp.partition).await;
            }
        }
        partitions.push(r);
    }
    Reply::with_payload(&ReplicaFetchResponse { partitions }, chunks)
}
