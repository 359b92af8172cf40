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

pub async fn produce(shard: &Rc<Shard>, frame: &RequestFrame) -> Reply {
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
    let mut waits = Vec::new();
    for (i, pp) in req.partitions.iter().enumerate() {
        let mut result = ProducePartitionResult {
            topic: pp.topic.clone(),
            partition: pp.partition,
            error_code: 0,
            message: String::new(),
            base_offset: -1,
            log_append_time_ms: -1,
            log_start_offset: -1,
        };
        let Some(p) = shard.partition(&pp.topic, pp.partition) else {
            let (code, msg) = locate_error(shard, &pp.topic, pp.partition);
            result.error_code = code.code();
            result.message = msg;
            results.push(result);
            continue;
        };
        let batches = match frame
            .payload_slice(pp.payload_offset, pp.payload_len)
            .map_err(|e| e.to_string())
            .and_then(|b| validate_all(b).map_err(|e| e.to_string()))
        {
            Ok(b) => b,
            Err(msg) => {
                result.error_code = ErrorCode::CorruptMessage.code();
                result.message = msg;
                results.push(result);
                continue;
            }
        };
        if p.is_decommissioned() {
            result.error_code = ErrorCode::PolicyViolation.code();
            result.message = format!(
                "{}-{} is decommissioned: writes stopped",
                pp.topic, pp.partition
            );
            results.push(result);
            continue;
        }
        let max = p.settings().max_message_bytes;
        if let Some(big) = batches.iter().find(|b| b.len() > max) {
            result.error_code = ErrorCode::MessageTooLarge.code();
            result.message = format!(
                "a batch of {} bytes exceeds max.message.bytes {max}",
                big.len()
            );
            results.push(result);
            continue;
        }
        match p.append(&batches, now, &shard.cache) {
            Ok((first, next)) => {
                shard.group_commit.mark_dirty(&p);
                result.base_offset = first as i64;
                result.log_append_time_ms = now;
                result.log_start_offset = p.log_start_offset() as i64;
                if req.acks != 0 {
                    waits.push((i, p.wait_for_ack(next - 1)));
                }
            }
            Err(e) => {
                result.error_code = e.code().code();
                result.message = e.to_string();
            }
        }
        results.push(result);
    }
    if req.acks == 0 {
        return Reply::None;
    }
    let max = shard.cfg.max_produce_timeout;
    let timeout = if req.timeout_ms == 0 {
        max
    } else {
        Duration::from_millis(u64::from(req.timeout_ms)).min(max)
    };
    let deadline = Instant::now() + timeout;
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
        results[i].error_code = code.code();
        results[i].message = msg;
    }
    Reply::meta(&ProduceResponse {
        partitions: results,
    })
}
