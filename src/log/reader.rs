//! Reading a segment: sendfile ranges (headers walked and checked), copy reads and time
//! lookups (every batch checked), from a snapshot that holds no borrow of the log.

use std::path::Path;
use std::rc::Rc;
use std::sync::Arc;

use rill_shards::file::DirectFile;
use rill_shards::rt::ReadResult;

use super::error::LogError;
use super::scan::{ScanStep, ScanStop, ScannedBatch, SegmentScan};
use super::segment::PAGE;
use crate::batch::BatchView;

/// How much a sendfile read's header walk reads at a time: the walk runs from the index entry
/// before the offset (`--index-interval-bytes` apart) to the batch holding it.
const HEADER_WALK_BYTES: usize = 16 << 10;

/// A snapshot of what a read of one segment needs, so no borrow of the log is held across
/// the I/O. Reads never go past the bytes written when the snapshot was taken.
pub struct SegmentReader {
    pub base_offset: u64,
    pub(super) file: Rc<DirectFile>,
    pub(super) read_fd: Arc<std::fs::File>,
    pub(super) path: Rc<Path>,
    pub(super) written: u64,
    pub(super) position: u64,
    /// The base offset the batch at `position` must have (from the index), when known.
    pub(super) expected: Option<u64>,
    pub(super) scan_bytes: usize,
}

/// Whole batches read by copy, and the offset after the last of them.
pub struct CopiedBatches {
    pub bytes: ReadResult,
    pub next_offset: u64,
}

/// A byte range of a segment file to hand to sendfile.
#[derive(Debug, Clone)]
pub struct FileRange {
    pub file: Arc<std::fs::File>,
    pub position: u64,
    pub len: usize,
}

impl SegmentReader {
    /// For sendfile: the byte range from the batch holding `offset`, `max_bytes` long (at least
    /// that whole batch), ending at or before `limit_position` (the high watermark's byte
    /// position). Only headers are read, with async DMA reads (a blocking read on the shard
    /// thread would stall it on a cache miss), each checked (CRC, length, contiguous offsets);
    /// the range may end in the middle of a batch, which consumers drop, as Kafka's do. The
    /// bytes inside the range are checked by the consumer.
    pub async fn file_range(
        &self,
        offset: u64,
        max_bytes: usize,
        limit_position: u64,
    ) -> Result<Option<FileRange>, LogError> {
        let limit = limit_position.min(self.written);
        Ok(self.first_batch_from(offset, limit).await?.map(|b| {
            let end = (b.position + (max_bytes as u64).max(u64::from(b.len))).min(limit);
            FileRange {
                file: self.read_fd.clone(),
                position: b.position,
                len: (end - b.position) as usize,
            }
        }))
    }

    /// The base offset of the first batch holding `offset` or a later one (compaction may
    /// have removed the record itself). `None`: no such batch yet.
    pub async fn batch_base(&self, offset: u64) -> Result<Option<u64>, LogError> {
        Ok(self
            .first_batch_from(offset, self.written)
            .await?
            .map(|b| b.base_offset))
    }

    /// The first batch holding `offset` or a later one, ending before `limit` (a byte
    /// position), found by walking headers only (each checked).
    async fn first_batch_from(
        &self,
        offset: u64,
        limit: u64,
    ) -> Result<Option<ScannedBatch>, LogError> {
        let mut scan = SegmentScan::new(
            &self.file,
            &self.path,
            self.position,
            limit,
            self.expected,
            HEADER_WALK_BYTES,
        )
        .headers_only();
        loop {
            match scan.next().await? {
                ScanStep::Batch(b) if b.next_offset <= offset => continue,
                ScanStep::Batch(b) => return Ok(Some(b)),
                // Nothing past the limit is visible yet.
                ScanStep::End {
                    stop: None | Some(ScanStop::Truncated { .. }),
                    ..
                } => return Ok(None),
                ScanStep::End { stop: Some(s), .. } => return Err(s.corrupt(&self.path)),
            }
        }
    }

    /// Reads whole batches starting with the one holding `offset`, up to `max_bytes` (at least
    /// one batch), stopping before `limit_offset`. Every batch is checked (header, CRC,
    /// contiguous offsets); the bytes are returned as read from the file, not copied.
    pub async fn read(
        self,
        offset: u64,
        max_bytes: usize,
        limit_offset: u64,
    ) -> Result<Option<CopiedBatches>, LogError> {
        let mut scan = self.scan(Self::copy_read_bytes(max_bytes));
        let first = loop {
            match scan.next_batch().await? {
                Some(b) if b.next_offset <= offset => continue,
                Some(b) => break b,
                None => return Ok(None),
            }
        };
        if first.base_offset >= limit_offset {
            return Ok(None);
        }
        let (mut stop_at, mut next_offset) = (first.end(), first.next_offset);
        // Batches after the first are taken while they are already read and fit.
        while let Some(ScanStep::Batch(b)) = scan.next_in_window() {
            if b.base_offset >= limit_offset || (b.end() - first.position) as usize > max_bytes {
                break;
            }
            (stop_at, next_offset) = (b.end(), b.next_offset);
        }
        Ok(scan
            .slice(first.position, stop_at)
            .map(|bytes| CopiedBatches { bytes, next_offset }))
    }

    /// The bytes a copy read of `max_bytes` holds in memory at most (its read window).
    pub fn copy_read_bytes(max_bytes: usize) -> usize {
        (max_bytes as u64 + 2 * PAGE).max(64 << 10) as usize
    }

    /// The segment file this reader reads: a compaction swap or a reopen (after truncation)
    /// replaces it, so a read from another file object may be stale.
    pub fn file(&self) -> &Rc<DirectFile> {
        &self.file
    }

    /// The first (offset, timestamp) of a record at or after `ts` below `limit_offset`.
    pub async fn find_timestamp(
        self,
        ts: i64,
        limit_offset: u64,
    ) -> Result<Option<(u64, i64)>, LogError> {
        let mut scan = self.scan(self.scan_bytes);
        while let Some(b) = scan.next_batch().await? {
            if b.base_offset >= limit_offset {
                return Ok(None);
            }
            if b.max_timestamp < ts {
                continue;
            }
            let corrupt = |e: crate::batch::BatchError| LogError::Corrupt {
                path: self.path.to_path_buf(),
                position: b.position,
                what: e.to_string(),
            };
            let view = BatchView::parse_header(scan.bytes(&b)).map_err(corrupt)?;
            for r in view.records().map_err(corrupt)? {
                if r.offset >= limit_offset {
                    return Ok(None);
                }
                if r.timestamp_ms >= ts {
                    return Ok(Some((r.offset, r.timestamp_ms)));
                }
            }
        }
        Ok(None)
    }

    /// A checked scan from the reader's position to the written end.
    fn scan(&self, chunk: usize) -> SegmentScan<'_> {
        SegmentScan::new(
            &self.file,
            &self.path,
            self.position,
            self.written,
            self.expected,
            chunk,
        )
    }
}
