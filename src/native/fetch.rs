//! Fetch: the stored batches go out as they are (sendfile ranges or tail-cache bytes) after
//! the meta naming each partition's slice of the payload ([`crate::broker::fetch`]).

use std::rc::Rc;
use std::time::Duration;

use super::Reply;
use crate::broker::fetch::{self, FetchPartition};
use crate::broker::Shard;
use crate::log::ReadChunk;
use crate::protocol::frame::RequestFrame;
use crate::protocol::messages::{FetchPartitionResult, FetchRequest, FetchResponse};

pub async fn fetch(shard: &Rc<Shard>, frame: &RequestFrame) -> Reply {
    let req: FetchRequest = match frame.decode_meta() {
        Ok(r) => r,
        Err(e) => return e.into(),
    };
    let op = fetch::FetchRequest {
        partitions: req
            .partitions
            .iter()
            .map(|fp| FetchPartition {
                topic: fp.topic.clone(),
                partition: fp.partition,
                offset: fp.offset,
                max_bytes: fp.max_bytes as usize,
            })
            .collect(),
        min_bytes: req.min_bytes as usize,
        max_wait: Duration::from_millis(u64::from(req.max_wait_ms)),
        max_bytes: req.max_bytes as usize,
        file_reads: shard.cfg.file_reads,
    };
    let reads = fetch::fetch(shard, &op).await;
    let mut results = Vec::with_capacity(reads.len());
    let mut chunks: Vec<ReadChunk> = Vec::new();
    let mut total = 0usize;
    for (fp, read) in req.partitions.iter().zip(reads) {
        let mut r = FetchPartitionResult {
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
            Err(e) => {
                r.error_code = e.code.code();
                r.message = e.message;
            }
        }
        results.push(r);
    }
    Reply::with_payload(
        &FetchResponse {
            partitions: results,
        },
        chunks,
    )
}
