//! Fetch: whole batches from the tail cache or the segment files, with long polling (min
//! bytes, max wait) driven by the shard's timer wheel.

use std::rc::Rc;
use std::time::{Duration, Instant};

use futures_util::future::select_all;

use super::filtered_read::read_filtered;
use super::{locate, OpError, Shard};
use crate::batch::TagFilter;
use crate::log::{FileReads, ReadChunk};
use crate::partition::producer_state::AbortedTxn;
use crate::partition::{Partition, ReadLimits};

pub use crate::protocol::isolation::Isolation;

/// One partition a fetch asks for.
#[derive(Clone, Debug)]
pub struct FetchPartition {
    pub topic: String,
    pub partition: u32,
    pub offset: u64,
    /// At most this many bytes from this partition (at least one batch is always whole).
    pub max_bytes: usize,
}

/// A fetch: its partitions, and how long and for how much to wait.
#[derive(Clone, Debug)]
pub struct FetchRequest {
    pub partitions: Vec<FetchPartition>,
    /// Answer once this many bytes are there (at least 1)...
    pub min_bytes: usize,
    /// ...or this long has passed (capped by `--max-fetch-wait-ms`).
    pub max_wait: Duration,
    /// At most this many bytes in all (capped at half of `--max-frame-bytes`).
    pub max_bytes: usize,
    /// How file-resident data is returned: sendfile ranges need a codec that writes the
    /// stored bytes as they are.
    pub file_reads: FileReads,
    /// Only records with these tags ([`super::filtered_read`]); `None`: every record, the
    /// stored batches as they are.
    pub filter: Option<TagFilter>,
    /// read_uncommitted (below the high watermark) or read_committed (below the last stable
    /// offset). A filtered fetch reads uncommitted.
    pub isolation: Isolation,
}

/// What one partition answered.
#[derive(Default)]
pub struct PartitionRead {
    pub high_watermark: u64,
    pub last_stable_offset: u64,
    /// read_committed: the aborted transactions the returned range overlaps (Kafka's
    /// `aborted_transactions`); empty for read_uncommitted.
    pub aborted: Vec<AbortedTxn>,
    pub log_start_offset: u64,
    /// Whole stored batches, in offset order; empty when nothing is there yet (or the
    /// response was already full).
    pub chunks: Vec<ReadChunk>,
    /// A filtered fetch's position after every batch it scanned (matching or not); `None`
    /// for an unfiltered fetch, whose position follows the batches returned.
    pub next_offset: Option<u64>,
}

impl PartitionRead {
    pub fn len(&self) -> usize {
        self.chunks.iter().map(ReadChunk::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.chunks.is_empty()
    }
}

/// Reads every asked partition, one result each in request order, waiting (listening
/// before reading, so data arriving in between is not missed) until `min_bytes` are there,
/// a partition answers an error, or `max_wait` passes.
pub async fn fetch(shard: &Shard, req: &FetchRequest) -> Vec<Result<PartitionRead, OpError>> {
    let deadline = Instant::now() + req.max_wait.min(shard.cfg.max_fetch_wait);
    // The response must fit a frame the client accepts; leave room for the meta.
    let max_total = req.max_bytes.min(shard.cfg.max_frame_bytes / 2).max(1);
    // A filtered fetch does not rescan, on each wake-up, what it found nothing in.
    let mut scan_from: Vec<u64> = req.partitions.iter().map(|fp| fp.offset).collect();
    loop {
        let mut scan_limited = false;
        let mut listeners = Vec::new();
        let mut results = Vec::with_capacity(req.partitions.len());
        // The partition of each result, to count what the answer hands out (metrics).
        let mut read_from: Vec<Option<Rc<Partition>>> = Vec::with_capacity(req.partitions.len());
        let mut total = 0usize;
        let mut any_error = false;
        for (i, fp) in req.partitions.iter().enumerate() {
            let p = match locate(shard, &fp.topic, fp.partition) {
                Ok(p) => p,
                Err(e) => {
                    any_error = true;
                    results.push(Err(e));
                    read_from.push(None);
                    continue;
                }
            };
            listeners.push(p.listen());
            read_from.push(Some(p.clone()));
            let mut read = PartitionRead {
                high_watermark: p.high_watermark(),
                last_stable_offset: p.last_stable_offset(),
                aborted: Vec::new(),
                log_start_offset: p.log_start_offset(),
                chunks: Vec::new(),
                next_offset: req.filter.as_ref().map(|_| scan_from[i]),
            };
            let room = max_total.saturating_sub(total);
            if room > 0 || total == 0 {
                let max_bytes = fp.max_bytes.min(room).max(1);
                if let Some(filter) = &req.filter {
                    let scan = shard.cfg.max_filter_scan_bytes;
                    match read_filtered(&p, scan_from[i], max_bytes, scan, filter, &shard.cache)
                        .await
                    {
                        Ok(r) => {
                            if r.chunks.is_empty() {
                                scan_from[i] = r.next_offset;
                            }
                            scan_limited |= r.scan_limited;
                            total += r.bytes();
                            read.chunks = r.chunks;
                            read.next_offset = Some(r.next_offset);
                        }
                        Err(e) => {
                            any_error = true;
                            results.push(Err(e));
                            continue;
                        }
                    }
                    results.push(Ok(read));
                    continue;
                }
                let limits = ReadLimits {
                    max_bytes,
                    file_reads: req.file_reads,
                };
                let chunks = match req.isolation {
                    Isolation::ReadUncommitted => p.read(fp.offset, limits, &shard.cache).await,
                    Isolation::ReadCommitted => {
                        let lso = read.last_stable_offset;
                        read.aborted = p.aborted_transactions(fp.offset, lso);
                        p.read_stable(fp.offset, lso, limits, &shard.cache).await
                    }
                };
                match chunks {
                    Ok(chunks) => {
                        read.chunks = chunks;
                        total += read.len();
                    }
                    Err(e) => {
                        any_error = true;
                        results.push(Err(e.into()));
                        continue;
                    }
                }
            }
            results.push(Ok(read));
        }
        let enough = total >= req.min_bytes.max(1) || any_error || scan_limited;
        if enough || listeners.is_empty() || Instant::now() >= deadline {
            count_bytes_out(&read_from, &results);
            return results;
        }
        drop(results);
        wait_for_data(shard, listeners, deadline).await;
    }
}

/// Counts each partition's bytes in the answer (a long poll's passes that found too little
/// are not answers). `read_from[i]` is the partition `results[i]` was read from.
fn count_bytes_out(
    read_from: &[Option<Rc<Partition>>],
    results: &[Result<PartitionRead, OpError>],
) {
    for (p, r) in read_from.iter().zip(results) {
        if let (Some(p), Ok(read)) = (p, r) {
            p.count_bytes_out(read.len());
        }
    }
}

/// A long poll's wait: until one of the partitions gets data or the deadline passes (the
/// caller re-reads either way; a spurious wake-up just loops).
async fn wait_for_data(
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
