//! Opening a segment: checking what its file holds against its index and itself, and making
//! an active segment writable again. The partition decides what damage means
//! (`PartitionLog::open`): only it knows which offsets were acknowledged.

use std::path::PathBuf;

use rill_shards::file::DirectFile;

use super::error::LogError;
use super::index::SparseIndex;
use super::scan::{ScanStep, ScanStop, SegmentScan};
use super::segment::{allocation_for, index_paths, Segment, SegmentConfig};
use crate::batch::{BatchError, MAGIC, OLDEST_READABLE_VERSION, VERSION};

/// What [`Segment::open`] found.
#[derive(Debug, Default)]
pub struct SegmentCheck {
    /// The file's length.
    pub file_len: u64,
    /// Set when the file holds something other than whole batches after its data.
    pub damage: Option<Damage>,
}

/// Data of a segment file that is not whole, valid batches.
#[derive(Debug, Clone)]
pub struct Damage {
    /// Where the valid data ends.
    pub at: u64,
    pub what: String,
    /// Non-zero bytes seen after `at` (a torn or corrupt tail as opposed to zeros).
    pub garbage: u64,
}

impl Segment {
    /// Opens an existing segment, checking it against itself: a closed segment is trusted
    /// when its index files are intact and record the file's length, else it is scanned and
    /// must be whole batches to its last byte; an active one (the last of a partition) is
    /// always scanned batch by batch. Nothing is cut or rewritten here: what the scan found is
    /// reported, and the partition decides ([`repair_tail`](Self::repair_tail)), since only
    /// it knows which offsets were acknowledged.
    pub async fn open(
        path: PathBuf,
        base_offset: u64,
        active: bool,
        cfg: &SegmentConfig,
    ) -> Result<(Segment, SegmentCheck), LogError> {
        let file = DirectFile::open(&path, false, cfg.sync_writes)
            .await
            .map_err(|e| LogError::io(&path, e))?;
        let file_len = file.file_size().await.map_err(|e| LogError::io(&path, e))?;
        let (idx_path, tidx_path) = index_paths(&path);
        let mut recorded = None;
        if !active {
            if let (Ok(idx), Ok(tidx)) = (std::fs::read(&idx_path), std::fs::read(&tidx_path)) {
                if let Some((index, extent)) =
                    SparseIndex::decode(base_offset, cfg.index_interval_bytes, &idx, &tidx)
                {
                    if extent.size == file_len {
                        let mut seg = Segment::from_parts(
                            path,
                            file,
                            base_offset,
                            file_len,
                            extent.next_offset,
                            index,
                            cfg,
                        )?;
                        seg.closed = true;
                        return Ok((seg, SegmentCheck::default()));
                    }
                    recorded = Some(extent);
                }
            }
        }
        let mut scan =
            SegmentScan::new(&file, &path, 0, file_len, Some(base_offset), cfg.scan_bytes);
        let mut index = SparseIndex::new(cfg.index_interval_bytes);
        let mut next = base_offset;
        let (end, stop) = loop {
            match scan.next().await? {
                ScanStep::Batch(b) => {
                    index.on_batch(b.base_offset, b.position as u32, b.len, b.max_timestamp);
                    next = b.next_offset;
                }
                ScanStep::End { position, stop } => break (position, stop),
            }
        };
        if let Some(ScanStop::Invalid {
            error: BatchError::BadMagic(magic, version),
            ..
        }) = &stop
        {
            // Another build's batch format is not damage: cutting it would delete data. A
            // version 1 batch is whole under version 1's CRC (bytes 24..length); a flipped
            // version field of a version 2 batch is not, and is damage like any other.
            // A batch of a version newer than this build reads (a later build wrote it, and
            // this one was started on its data) is whole under today's CRCs: refused alike.
            let whole = match *version {
                1 => scan.is_whole_v1_batch(end),
                v if v > VERSION => scan.is_whole_checksummed_batch(end),
                _ => false,
            };
            if *magic == MAGIC && whole {
                return Err(LogError::Corrupt {
                    path,
                    position: end,
                    what: format!(
                        "batch format version {version} is not supported by this build \
                         (it reads versions {OLDEST_READABLE_VERSION} to {VERSION}); the file is left untouched"
                    ),
                });
            }
        }
        let garbage = scan.garbage_after(end);
        let damage = match (stop, recorded) {
            (_, Some(extent)) if extent.size != end || extent.next_offset != next => Some(Damage {
                at: end,
                what: format!(
                    "holds {end} bytes of batches (offsets {base_offset}..{next}) but held {} \
                         bytes (offsets up to {}) when it was closed",
                    extent.size, extent.next_offset
                ),
                garbage,
            }),
            // Zeros after an active segment's data are its preallocated space.
            (Some(ScanStop::Invalid { .. }), _) if active && garbage == 0 => None,
            (Some(stop), _) => Some(Damage {
                at: end,
                what: stop.corrupt(&path).to_string(),
                garbage,
            }),
            (None, _) => None,
        };
        let mut seg = Segment::from_parts(path, file, base_offset, end, next, index, cfg)?;
        seg.closed = !active;
        if !active && damage.is_none() {
            // Best effort: a closed segment without index files is scanned again next time.
            if let Err(e) = seg.index_write().write().await {
                log::warn!("{}: cannot rewrite its index: {e}", seg.path.display());
            }
        }
        Ok((seg, SegmentCheck { file_len, damage }))
    }

    /// Cuts the zeros after a closed segment's data and writes its index files: what a roll
    /// left when its cut (not synced) did not reach the disk before a crash. Best effort: the
    /// data reads the same either way, and a failure leaves the segment to be scanned again.
    pub async fn cut_after_data(&self) {
        let cut = async {
            super::segment::cut_and_sync(self.file.clone(), self.path.clone(), self.written)
                .await?;
            self.index_write().write().await
        };
        if let Err(e) = cut.await {
            log::warn!("{}: cannot cut it to its data: {e}", self.path.display());
        }
    }

    /// Makes an active segment writable after [`open`](Self::open): cuts whatever follows its
    /// data (a torn tail, or the preallocated space), preallocates again so that the bytes
    /// after the data read as zeros (garbage must never pass for a batch later), and syncs.
    pub async fn repair_tail(
        &mut self,
        file_len: u64,
        cfg: &SegmentConfig,
    ) -> Result<(), LogError> {
        let end = self.written;
        if end < file_len {
            self.file
                .truncate(end)
                .await
                .map_err(|e| LogError::io(&*self.path, e))?;
        }
        self.allocated = end;
        let allocated = allocation_for(end, cfg);
        if allocated > end {
            self.file
                .pre_allocate(allocated, false)
                .await
                .map_err(|e| LogError::io(&*self.path, e))?;
            self.allocated = allocated;
        }
        // Also after a failed fdatasync: what was written before is made durable now.
        self.file
            .fdatasync()
            .await
            .map_err(|e| LogError::io(&*self.path, e))?;
        self.load_tail_page().await
    }
}
