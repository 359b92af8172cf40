//! Fetch: the stored batches go out as they are (sendfile ranges or tail-cache bytes) after
//! the meta naming each partition's slice of the payload ([`crate::broker::fetch`]).
//! FilteredFetch: the same with a tag filter; the payload holds rebuilt batches of the
//! matching records and each partition says where its next fetch starts.

use std::rc::Rc;
use std::time::Duration;

use super::Reply;
use crate::batch::TagFilter;
use crate::broker::fetch::{self, FetchPartition, Isolation, PartitionRead};
use crate::broker::{OpError, Shard};
use crate::log::{FileReads, ReadChunk};
use crate::metrics::Listener;
use crate::protocol::error_code::ErrorCode;
use crate::protocol::frame::RequestFrame;
use crate::protocol::messages::{
    AbortedTransaction, FetchPartitionResult, FetchPartitionResultV1, FetchRequest, FetchRequestV1,
    FetchResponse, FetchResponseV1, FilteredFetchPartitionResult, FilteredFetchRequest,
    FilteredFetchResponse,
};
use crate::protocol::ApiKey;

pub async fn fetch(shard: &Rc<Shard>, frame: &RequestFrame, file_reads: FileReads) -> Reply {
    if frame.header.api_version >= 1 {
        return fetch_v1(shard, frame, file_reads).await;
    }
    let req: FetchRequest = match frame.decode_meta() {
        Ok(r) => r,
        Err(e) => return e.into(),
    };
    let (results, chunks) = read(shard, &req, None, Isolation::default(), file_reads).await;
    count_errors(shard, ApiKey::Fetch, &results);
    Reply::with_payload(
        &FetchResponse {
            partitions: results.into_iter().map(|(r, _)| r.result).collect(),
        },
        chunks,
    )
}

/// Version 1: an isolation level; the last stable offsets and aborted transactions back.
async fn fetch_v1(shard: &Rc<Shard>, frame: &RequestFrame, file_reads: FileReads) -> Reply {
    let req: FetchRequestV1 = match frame.decode_meta() {
        Ok(r) => r,
        Err(e) => return e.into(),
    };
    let Some(isolation) = Isolation::from_wire(req.isolation) else {
        return Reply::Error(
            ErrorCode::InvalidRequest,
            format!(
                "isolation level {} (0 read_uncommitted, 1 read_committed)",
                req.isolation
            ),
        );
    };
    let (results, chunks) = read(shard, &req.fetch, None, isolation, file_reads).await;
    count_errors(shard, ApiKey::Fetch, &results);
    Reply::with_payload(
        &FetchResponseV1 {
            partitions: results.into_iter().map(|(r, _)| r).collect(),
        },
        chunks,
    )
}

pub async fn filtered_fetch(shard: &Rc<Shard>, frame: &RequestFrame) -> Reply {
    let req: FilteredFetchRequest = match frame.decode_meta() {
        Ok(r) => r,
        Err(e) => return e.into(),
    };
    let Some(filter) = TagFilter::new(req.tags, req.match_all) else {
        return Reply::Error(
            ErrorCode::InvalidRequest,
            "a filtered fetch needs at least one tag".into(),
        );
    };
    let (results, chunks) = read(
        shard,
        &req.fetch,
        Some(filter),
        Isolation::default(),
        FileReads::Copy,
    )
    .await;
    count_errors(shard, ApiKey::FilteredFetch, &results);
    let partitions = req
        .fetch
        .partitions
        .iter()
        .zip(results)
        .map(|(fp, (result, next))| FilteredFetchPartitionResult {
            result: result.result,
            next_offset: next.unwrap_or(fp.offset),
        })
        .collect();
    Reply::with_payload(&FilteredFetchResponse { partitions }, chunks)
}

/// Counts each refused partition of the answer (metrics).
fn count_errors(shard: &Shard, api: ApiKey, results: &[(FetchPartitionResultV1, Option<u64>)]) {
    for (r, _) in results {
        shard
            .metrics
            .wire_error(Listener::Native, api.name(), r.result.error_code);
    }
}

/// Runs the fetch operation: each partition's result meta (with a filtered read's next
/// offset) and the payload chunks they name.
async fn read(
    shard: &Rc<Shard>,
    req: &FetchRequest,
    filter: Option<TagFilter>,
    isolation: Isolation,
    file_reads: FileReads,
) -> (Vec<(FetchPartitionResultV1, Option<u64>)>, Vec<ReadChunk>) {
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
        file_reads,
        filter,
        isolation,
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
        let mut next = None;
        let mut last_stable_offset = 0;
        let mut aborted = Vec::new();
        match read {
            Ok(read) => {
                let PartitionRead {
                    high_watermark,
                    log_start_offset,
                    next_offset,
                    ..
                } = read;
                last_stable_offset = read.last_stable_offset;
                aborted = read
                    .aborted
                    .iter()
                    .map(|a| AbortedTransaction {
                        producer_id: a.producer_id,
                        first_offset: a.first_offset,
                    })
                    .collect();
                r.high_watermark = high_watermark;
                r.log_start_offset = log_start_offset;
                let len = read.len();
                r.payload_len = len as u32;
                total += len;
                next = next_offset;
                chunks.extend(read.chunks);
            }
            Err(OpError { code, message }) => {
                r.error_code = code.code();
                r.message = message;
            }
        }
        let r = FetchPartitionResultV1 {
            result: r,
            last_stable_offset,
            aborted,
        };
        results.push((r, next));
    }
    (results, chunks)
}
