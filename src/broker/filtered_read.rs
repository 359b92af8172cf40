//! The read of a tag-filtered fetch: stored batches are read into memory (never sendfile),
//! a batch whose tag summary rules the filter out is skipped without touching its body, and
//! the matching records of the others are rebuilt into new batches with their offsets
//! unchanged (one batch per run of consecutive matching records). What it costs: a copy of
//! every scanned batch, an rkyv walk of the batches that may match, and a re-encode of the
//! matching records; the unfiltered fetch path is untouched (zero-copy).

use bytes::Bytes;

use super::OpError;
use crate::batch::{aligned16, stamp_batch, BatchBuilder, BatchIter, BatchView, TagFilter};
use crate::log::{FileReads, ReadChunk};
use crate::partition::tail_cache::TailCache;
use crate::partition::{Partition, ReadLimits};
use crate::protocol::error_code::ErrorCode;

/// What a filtered read found.
pub struct FilteredRead {
    /// Rebuilt batches of the matching records, in offset order (one memory chunk).
    pub chunks: Vec<ReadChunk>,
    /// Past the last batch scanned: where the next fetch of the partition starts.
    pub next_offset: u64,
    /// The scan stopped at `max_scan_bytes` (not at the high watermark or at `max_bytes`):
    /// the fetch should answer now so the consumer moves on.
    pub scan_limited: bool,
}

impl FilteredRead {
    /// Bytes of rebuilt batches.
    pub fn bytes(&self) -> usize {
        self.chunks.iter().map(ReadChunk::len).sum()
    }
}

/// Reads `p` from `offset` until `max_bytes` of matching batches are rebuilt, the high
/// watermark is reached, or `max_scan_bytes` of stored batches were read.
pub async fn read_filtered(
    p: &Partition,
    offset: u64,
    max_bytes: usize,
    max_scan_bytes: usize,
    filter: &TagFilter,
    cache: &TailCache,
) -> Result<FilteredRead, OpError> {
    let mut out: Vec<u8> = Vec::new();
    let mut at = offset;
    let mut scanned = 0usize;
    // Each pass reads at least one whole batch or stops, so the loop ends.
    while at < p.high_watermark() && out.len() < max_bytes && scanned < max_scan_bytes {
        let limits = ReadLimits {
            max_bytes: max_bytes.min(max_scan_bytes - scanned).max(1),
            file_reads: FileReads::Copy,
        };
        let chunks = p.read(at, limits, cache).await?;
        let before = at;
        for chunk in &chunks {
            let Some(bytes) = chunk.as_slice() else {
                return Err(OpError::new(
                    ErrorCode::UnknownServerError,
                    "a copied read returned a sendfile range",
                ));
            };
            let bytes = aligned16(bytes);
            // Read chunks hold checked batches (the segment reader's check, or the append's).
            for batch in BatchIter::checked_before(&bytes) {
                let batch = batch.map_err(|e| corrupt(at, e))?;
                let h = batch.header();
                if h.next_offset() <= at {
                    continue;
                }
                scanned += batch.len();
                if filter.may_match(h.tag_summary()) {
                    rebuild_matching(&batch, at, filter, &mut out).map_err(|e| corrupt(at, e))?;
                }
                at = h.next_offset();
            }
        }
        if at == before {
            break;
        }
    }
    let scan_limited = scanned >= max_scan_bytes && at < p.high_watermark();
    let chunks = if out.is_empty() {
        Vec::new()
    } else {
        vec![ReadChunk::Memory(Bytes::from(out))]
    };
    Ok(FilteredRead {
        chunks,
        next_offset: at,
        scan_limited,
    })
}

fn corrupt(at: u64, e: crate::batch::BatchError) -> OpError {
    OpError::new(
        ErrorCode::CorruptMessage,
        format!("stored batch at offset {at}: {e}"),
    )
}

/// Appends to `out` the records of `batch` at or after `from` that match `filter`, as
/// batches of consecutive offsets stamped with their first offset and the stored append
/// time.
fn rebuild_matching(
    batch: &BatchView<'_>,
    from: u64,
    filter: &TagFilter,
    out: &mut Vec<u8>,
) -> Result<(), crate::batch::BatchError> {
    let append_time = batch.header().append_time_ms;
    let mut run: Option<(u64, BatchBuilder)> = None;
    let mut flush = |run: Option<(u64, BatchBuilder)>| -> Result<(), crate::batch::BatchError> {
        if let Some((base, mut b)) = run {
            let mut bytes = b.build()?;
            stamp_batch(&mut bytes, base, append_time);
            out.extend_from_slice(&bytes);
        }
        Ok(())
    };
    for r in batch.records()? {
        if r.offset < from {
            continue;
        }
        let tags: Vec<&str> = r.tags().collect();
        if !filter.matches(&tags) {
            continue;
        }
        let contiguous = run
            .as_ref()
            .is_some_and(|(base, b)| *base + b.len() as u64 == r.offset);
        if !contiguous {
            flush(run.take())?;
            run = Some((r.offset, BatchBuilder::new()));
        }
        let tags: Vec<String> = tags.into_iter().map(str::to_string).collect();
        if let Some((_, b)) = run.as_mut() {
            b.push_record(r.timestamp_ms, r.key(), r.value(), r.headers(), &tags);
        }
    }
    flush(run)
}
