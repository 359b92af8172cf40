//! Produce: the request's payload holds each partition's batches in the stored format; they
//! are validated, stamped and appended where they arrived ([`crate::broker::produce`]).

use std::rc::Rc;
use std::time::Instant;

use super::Reply;
use crate::broker::produce::{await_acks, Acks, Origin, Produce};
use crate::broker::{request_timeout, OpError, Shard};
use crate::clock::now_ms;
use crate::metrics::Listener;
use crate::protocol::frame::RequestFrame;
use crate::protocol::messages::{ProducePartitionResult, ProduceRequest, ProduceResponse};
use crate::protocol::{ApiKey, ErrorCode};

/// Validates and appends now (in arrival order: no await before the append), and answers
/// once the writes are acknowledged.
pub fn produce(shard: &Rc<Shard>, frame: RequestFrame) -> Reply {
    let req: ProduceRequest = match frame.decode_meta() {
        Ok(r) => r,
        Err(e) => return e.into(),
    };
    let acks = match Acks::parse(req.acks) {
        Ok(a) => a,
        Err(e) => return Reply::Error(e.code, e.message),
    };
    let deadline = Instant::now() + request_timeout(shard, req.timeout_ms);
    let now = now_ms();
    let mut results: Vec<ProducePartitionResult> = req
        .partitions
        .iter()
        .map(|pp| ProducePartitionResult {
            topic: pp.topic.clone(),
            partition: pp.partition,
            error_code: 0,
            message: String::new(),
            base_offset: -1,
            log_append_time_ms: -1,
            log_start_offset: -1,
        })
        .collect();
    let refuse = |r: &mut ProducePartitionResult, e: OpError| {
        r.error_code = e.code.code();
        r.message = e.message;
    };
    // Validated against the frame as it arrived; (slot in `produce`, result index).
    let mut produce = Produce::with_acks(acks);
    let mut staged = Vec::new();
    for (i, pp) in req.partitions.iter().enumerate() {
        let outcome = frame
            .payload_slice(pp.payload_offset, pp.payload_len)
            .map_err(|e| OpError::new(ErrorCode::CorruptMessage, e.to_string()))
            .and_then(|payload| {
                produce.stage(
                    shard,
                    &pp.topic,
                    pp.partition,
                    payload,
                    pp.payload_offset as usize,
                    Origin::Client,
                )
            });
        match outcome {
            Ok(slot) => staged.push((slot, i)),
            Err(e) => refuse(&mut results[i], e),
        }
    }
    // The producer's bytes are stored without a copy (the DMA write copies them once).
    let (buf, payload_start) = frame.into_parts();
    let appended = produce.append(shard, buf, payload_start, now);
    let mut waits = Vec::new();
    for ((_, i), outcome) in staged.into_iter().zip(appended) {
        let r = &mut results[i];
        match outcome {
            Ok(a) => {
                r.base_offset = a.base_offset as i64;
                r.log_append_time_ms = now;
                r.log_start_offset = a.partition.log_start_offset() as i64;
                waits.push(a.ack(i));
            }
            Err(e) => refuse(r, e),
        }
    }
    if acks == Acks::None {
        count_errors(shard, &results);
        return Reply::Unanswered(waits);
    }
    let shard = shard.clone();
    Reply::Later(Box::pin(async move {
        for (i, e) in await_acks(&shard, waits, deadline).await {
            refuse(&mut results[i], e);
        }
        count_errors(&shard, &results);
        Reply::meta(&ProduceResponse {
            partitions: results,
        })
    }))
}

/// Counts each refused partition of the answer (metrics).
fn count_errors(shard: &Shard, results: &[ProducePartitionResult]) {
    for r in results {
        shard
            .metrics
            .wire_error(Listener::Native, ApiKey::Produce.name(), r.error_code);
    }
}
