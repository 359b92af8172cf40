//! Produce: validate each batch once (CRC + rkyv), append, and answer once the data is below
//! the high watermark (acks 1/all) or not at all (acks 0).

use std::rc::Rc;
use std::time::{Duration, Instant};

use crate::clock::now_ms;

use super::{locate_error, Reply};
use crate::batch::{BatchError, BatchView};
use crate::protocol::frame::RequestFrame;
use crate::protocol::messages::{ProducePartitionResult, ProduceRequest, ProduceResponse};
use crate::protocol::ErrorCode;
use crate::server::shard::Shard;

/// Splits a partition's payload into validated batches.
fn validate_all(mut bytes: &[u8]) -> Result<Vec<BatchView<'_>>, BatchError> {
    let mut out = Vec::new();
    if bytes.is_empty() {
        return Err(BatchError::Empty);
    }
    while !bytes.is_empty() {
        let v = BatchView::validate(bytes)?;
        bytes = &bytes[v.len()..];
        out.push(v);
    }
    Ok(out)
}

/// One partition's accepted batches: (offset in the frame buffer, length, record count).
struct Accepted {
    result: usize,
    partition: Rc<crate::partition::Partition>,
    batches: Vec<(usize, usize, u32)>,
}

pub async fn produce(shard: &Rc<Shard>, frame: RequestFrame) -> Reply {
    let req: ProduceRequest = match frame.decode_meta() {
        Ok(r) => r,
        Err(e) => return e.into(),
    };
    if !(-1..=1).contains(&req.acks) {
        return Reply::Error(
            ErrorCode::InvalidRequiredAcks,
            format!("acks must be 0, 1 or -1 (all), not {}", req.acks),
        );
    }
    let now = now_ms();
    let mut results = Vec::with_capacity(req.partitions.len());
    let mut accepted: Vec<Accepted> = Vec::new();
    // Phase 1: validate everything against the frame as it arrived.
    for pp in &req.partitions {
        let mut result = ProducePartitionResult {
            topic: pp.topic.clone(),
            partition: pp.partition,
            error_code: 0,
            message: String::new(),
            base_offset: -1,
            log_append_time_ms: -1,
            log_start_offset: -1,
        };
        let refuse = |result: &mut ProducePartitionResult, code: ErrorCode, msg: String| {
            result.error_code = code.code();
            result.message = msg;
        };
        let Some(p) = shard.partition(&pp.topic, pp.partition) else {
            let (code, msg) = locate_error(shard, &pp.topic, pp.partition);
            refuse(&mut result, code, msg);
            results.push(result);
            continue;
        };
        if accepted.iter().any(|a| Rc::ptr_eq(&a.partition, &p)) {
            refuse(
                &mut result,
                ErrorCode::InvalidRequest,
                "partition listed twice in one request".into(),
            );
            results.push(result);
            continue;
        }
        let payload = match frame.payload_slice(pp.payload_offset, pp.payload_len) {
            Ok(b) => b,
            Err(e) => {
                refuse(&mut result, ErrorCode::CorruptMessage, e.to_string());
                results.push(result);
                continue;
            }
        };
        let batches = match validate_all(payload) {
            Ok(b) => b,
            Err(e) => {
                refuse(&mut result, ErrorCode::CorruptMessage, e.to_string());
                results.push(result);
                continue;
            }
        };
        if let Some(Err((code, msg))) = batches
            .iter()
            .map(|b| p.check_produce(b.len()))
            .find(Result::is_err)
        {
            refuse(&mut result, code, msg);
            results.push(result);
            continue;
        }
        let start = pp.payload_offset as usize;
        let mut at = start;
        let mut list = Vec::with_capacity(batches.len());
        for b in &batches {
            list.push((at, b.len(), b.header().record_count));
            at += b.len();
        }
        accepted.push(Accepted {
            result: results.len(),
            partition: p,
            batches: list,
        });
        results.push(result);
    }
    // Phase 2: stamp offsets and append time into the frame's own memory, then keep slices of
    // it: the producer's bytes are stored without a copy (the DMA write copies them once).
    // Nothing awaits between reading each log end and appending, so no other append interleaves.
    let (mut buf, payload_start) = frame.into_parts();
    for a in &accepted {
        let mut next = a.partition.log_end_offset();
        for (at, len, count) in &a.batches {
            let s = payload_start + at;
            crate::batch::stamp_batch(&mut buf[s..s + len], next, now);
            next += u64::from(*count);
        }
    }
    let frame_bytes = bytes::Bytes::from_owner(buf);
    let mut waits = Vec::new();
    for a in accepted {
        let slices: Vec<(bytes::Bytes, u32)> = a
            .batches
            .iter()
            .map(|(at, len, count)| {
                let s = payload_start + at;
                (frame_bytes.slice(s..s + len), *count)
            })
            .collect();
        let result = &mut results[a.result];
        match a.partition.append_stamped(slices, &shard.cache) {
            Ok((first, next)) => {
                shard.group_commit.mark_dirty(&a.partition);
                result.base_offset = first as i64;
                result.log_append_time_ms = now;
                result.log_start_offset = a.partition.log_start_offset() as i64;
                if req.acks != 0 {
                    waits.push((a.result, a.partition.wait_for_ack(next - 1)));
                }
            }
            Err(e) => {
                result.error_code = e.code().code();
                result.message = e.to_string();
            }
        }
    }
    if req.acks == 0 {
        return Reply::None;
    }
    for (i, code, message) in await_acks(shard, waits, req.timeout_ms).await {
        results[i].error_code = code.code();
        results[i].message = message;
    }
    Reply::meta(&ProduceResponse {
        partitions: results,
    })
}

/// Waits for each (index, ack) until the request's timeout (capped by
/// `--max-produce-timeout-ms`; 0 means the cap); returns the ones that failed, by index.
pub(crate) async fn await_acks(
    shard: &Shard,
    waits: Vec<(usize, flume::Receiver<Result<(), ErrorCode>>)>,
    timeout_ms: u32,
) -> Vec<(usize, ErrorCode, String)> {
    let max = shard.cfg.max_produce_timeout;
    let timeout = if timeout_ms == 0 {
        max
    } else {
        Duration::from_millis(u64::from(timeout_ms)).min(max)
    };
    let deadline = Instant::now() + timeout;
    let mut failed = Vec::new();
    for (i, rx) in waits {
        let outcome = futures_lite::future::or(async { Some(rx.recv_async().await) }, async {
            shard.deadlines.sleep_until(deadline).await;
            None
        })
        .await;
        let (code, msg) = match outcome {
            Some(Ok(Ok(()))) => continue,
            Some(Ok(Err(code))) => (code, "the write failed".to_string()),
            Some(Err(_)) => (
                ErrorCode::UnknownServerError,
                "the partition went away".to_string(),
            ),
            None => (
                ErrorCode::RequestTimedOut,
                "not durable within the request timeout".to_string(),
            ),
        };
        failed.push((i, code, msg));
    }
    failed
}
