//! Fetch: whole batches from the tail cache or the segment files, with long polling
//! (min bytes, max wait) driven by the shard's timer wheel.

use std::rc::Rc;
use std::time::{Duration, Instant};

use futures_util::future::select_all;

use super::{locate_error, Reply};
use crate::log::ReadChunk;
use crate::partition::ReadLimits;
use crate::protocol::frame::RequestFrame;
use crate::protocol::messages::{FetchPartitionResult, FetchRequest, FetchResponse};
use crate::server::shard::Shard;

pub async fn fetch(shard: &Rc<Shard>, frame: &RequestFrame) -> Reply {
    let req: FetchRequest = match frame.decode_meta() {
        Ok(r) => r,
        Err(e) => return e.into(),
    };
    let wait = Duration::from_millis(u64::from(req.max_wait_ms)).min(shard.cfg.max_fetch_wait);
    let deadline = Instant::now() + wait;
    // The response must fit a frame the client accepts; leave room for the meta.
    let max_total = (req.max_bytes as usize)
        .min(shard.cfg.max_frame_bytes / 2)
        .max(1);
    loop {
        let parts: Vec<_> = req
            .partitions
            .iter()
            .map(|fp| shard.partition(&fp.topic, fp.partition))
            .collect();
        // Listen before reading, so data arriving in between is not missed.
        let listeners: Vec<_> = parts.iter().flatten().map(|p| p.listen()).collect();
        let mut results = Vec::with_capacity(req.partitions.len());
        let mut chunks: Vec<ReadChunk> = Vec::new();
        let mut total = 0usize;
        let mut any_error = false;
        for (fp, p) in req.partitions.iter().zip(&parts) {
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
            let Some(p) = p else {
                let (code, msg) = locate_error(shard, &fp.topic, fp.partition);
                r.error_code = code.code();
                r.message = msg;
                any_error = true;
                results.push(r);
                continue;
            };
            r.high_watermark = p.high_watermark();
            r.log_start_offset = p.log_start_offset();
            let room = max_total.saturating_sub(total);
            if room > 0 || total == 0 {
                let limits = ReadLimits {
                    max_bytes: (fp.max_bytes as usize).min(room).max(1),
                    file_reads: shard.cfg.file_reads,
                };
                match p.read(fp.offset, limits, &shard.cache).await {
                    Ok(got) => {
                        let len: usize = got.iter().map(ReadChunk::len).sum();
                        r.payload_len = len as u32;
                        total += len;
                        chunks.extend(got);
                    }
                    Err(e) => {
                        r.error_code = e.code().code();
                        r.message = e.to_string();
                        any_error = true;
                    }
                }
            }
            results.push(r);
        }
        let enough = total >= req.min_bytes.max(1) as usize || any_error;
        if enough || listeners.is_empty() || Instant::now() >= deadline {
            return Reply::with_payload(
                &FetchResponse {
                    partitions: results,
                },
                chunks,
            );
        }
        drop(chunks);
        wait_for_data(shard, listeners, deadline).await;
    }
}

/// A long poll's wait: until one of the partitions gets data or the deadline passes (the
/// caller re-reads either way; a spurious wake-up just loops).
pub(crate) async fn wait_for_data(
    shard: &Shard,
    listeners: Vec<event_listener::EventListener>,
    deadline: Instant,
) {
    futures_lite::future::or(
        async {
            select_all(listeners).await;
        },
        shard.deadlines.sleep_until(deadline),
    )
    .await;
}
