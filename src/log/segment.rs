//! One segment file: `<base offset>.log`, appended with 4 KiB-aligned O_DIRECT writes.
//!
//! O_DIRECT writes whole pages, so the segment keeps a copy of its partial last page and each
//! flush rewrites that page with the new bytes after it. Rewriting identical old bytes is safe
//! under a torn write: whatever part of the page lands, the old bytes in it are unchanged.
//! Active segments are preallocated in steps ahead of the writes (an overwrite plus fdatasync
//! is cheaper than a growing append), so the file is longer than its data; the data ends at the first place that is not a
//! valid batch, which recovery finds by scanning.

use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::Arc;

use bytes::Bytes;
use rill_shards::rt::{DmaFile, DmaOpenOptions, ReadResult};

use super::error::LogError;
use super::index::{SegmentExtent, SparseIndex};
use super::scan::{ScanStep, ScanStop, SegmentScan};
use crate::batch::BatchView;

/// Alignment of O_DIRECT writes.
pub const PAGE: u64 = 4096;
/// How much recovery, index rebuilds and time lookups read at a time, by default.
pub const SCAN_BYTES: usize = 4 << 20;
/// How much a sendfile read's header walk reads at a time: the walk runs from the index entry
/// before the offset (`--index-interval-bytes` apart) to the batch holding it.
const HEADER_WALK_BYTES: usize = 16 << 10;

/// Settings a segment needs.
#[derive(Debug, Clone)]
pub struct SegmentConfig {
    pub segment_bytes: u64,
    /// A non-empty active segment older than this rolls at the next write (`segment.ms`).
    pub segment_age: Option<std::time::Duration>,
    pub index_interval_bytes: u32,
    pub preallocate: bool,
    /// With `preallocate`, the space is fallocated this much at a time, ahead of the writes
    /// (`--preallocate-step-bytes`): an empty partition holds one step, not a whole segment.
    pub preallocate_step: u64,
    /// How much a scan reads at a time ([`SCAN_BYTES`]; smaller in tests, so that reads end
    /// inside batches and headers often).
    pub scan_bytes: usize,
}

pub fn segment_file_name(base_offset: u64) -> String {
    format!("{base_offset:020}.log")
}

/// Parses `<base offset>.log`.
pub fn parse_segment_file_name(name: &str) -> Option<u64> {
    let digits = name.strip_suffix(".log")?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

fn index_paths(path: &Path) -> (PathBuf, PathBuf) {
    (
        path.with_extension("index"),
        path.with_extension("timeindex"),
    )
}

/// A prepared DMA write: the partial last page plus the new batches, page-padded.
pub struct WriteJob {
    file: Rc<DmaFile>,
    path: Rc<Path>,
    position: u64,
    buf: rill_shards::rt::DmaBuffer,
    new_size: u64,
    /// Extend the preallocated space to this length first.
    allocate_to: Option<u64>,
}

impl WriteJob {
    /// Performs the write; returns the size the segment has once it completed.
    pub async fn run(self) -> Result<u64, LogError> {
        if let Some(to) = self.allocate_to {
            self.file
                .pre_allocate(to, false)
                .await
                .map_err(|e| LogError::io(&*self.path, e))?;
        }
        let len = self.buf.len();
        let written = self
            .file
            .write_at(self.buf, self.position)
            .await
            .map_err(|e| LogError::io(&*self.path, e))?;
        if written != len {
            return Err(LogError::io(
                &*self.path,
                std::io::Error::new(std::io::ErrorKind::WriteZero, "short O_DIRECT write"),
            ));
        }
        Ok(self.new_size)
    }
}

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

pub struct Segment {
    pub base_offset: u64,
    /// When this process created or opened the segment (the clock `segment.ms` runs on).
    opened_at: std::time::Instant,
    /// A buffered (page cache) descriptor for sendfile reads; writes stay O_DIRECT.
    read_fd: Arc<std::fs::File>,
    path: Rc<Path>,
    file: Rc<DmaFile>,
    /// Bytes assigned to batches (including those handed to a write not yet completed).
    assigned: u64,
    /// Bytes whose DMA write completed: reads never go past this.
    written: u64,
    /// The offset after the last batch assigned to this segment.
    next_offset: u64,
    index: SparseIndex,
    /// Copy of the bytes in `[align_down(assigned), assigned)`.
    tail_page: Vec<u8>,
    /// Closed segments are read-only and truncated to their data.
    closed: bool,
    /// Written bytes not yet covered by an fdatasync.
    unsynced: bool,
    scan_bytes: usize,
    /// The file's length, fallocated ahead of the data (= the data for a closed segment).
    allocated: u64,
    /// The preallocation step (`None`: no preallocation).
    step: Option<u64>,
    /// Preallocation never goes past the segment's roll size.
    max_allocation: u64,
}

impl Segment {
    /// Creates a new, empty active segment.
    pub async fn create(
        dir: &Path,
        base_offset: u64,
        cfg: &SegmentConfig,
    ) -> Result<Segment, LogError> {
        let path = dir.join(segment_file_name(base_offset));
        let file = DmaOpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .dma_open(&path)
            .await
            .map_err(|e| LogError::io(&path, e))?;
        let allocated = allocation_for(0, cfg);
        if allocated > 0 {
            file.pre_allocate(allocated, false)
                .await
                .map_err(|e| LogError::io(&path, e))?;
        }
        // The new file's directory entry must be durable before anything acknowledged lives
        // in it. A rare, small metadata sync: done inline.
        sync_dir(dir)?;
        let read_fd = open_read_fd(&path)?;
        Ok(Segment {
            base_offset,
            opened_at: std::time::Instant::now(),
            read_fd,
            path: path.into(),
            file: Rc::new(file),
            assigned: 0,
            written: 0,
            next_offset: base_offset,
            index: SparseIndex::new(cfg.index_interval_bytes),
            tail_page: Vec::new(),
            closed: false,
            unsynced: false,
            scan_bytes: cfg.scan_bytes,
            allocated,
            step: (cfg.preallocate && cfg.preallocate_step > 0).then_some(cfg.preallocate_step),
            max_allocation: cfg.segment_bytes,
        })
    }

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
        let file = DmaOpenOptions::new()
            .read(true)
            .write(true)
            .dma_open(&path)
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

    /// Makes the segment read-only without touching its file (a partition that failed).
    pub fn freeze(&mut self) {
        self.closed = true;
        self.tail_page = Vec::new();
    }

    fn from_parts(
        path: PathBuf,
        file: DmaFile,
        base_offset: u64,
        size: u64,
        next_offset: u64,
        index: SparseIndex,
        cfg: &SegmentConfig,
    ) -> Result<Segment, LogError> {
        Ok(Segment {
            base_offset,
            opened_at: std::time::Instant::now(),
            read_fd: open_read_fd(&path)?,
            path: path.into(),
            file: Rc::new(file),
            assigned: size,
            written: size,
            next_offset,
            index,
            tail_page: Vec::new(),
            closed: false,
            unsynced: false,
            scan_bytes: cfg.scan_bytes,
            allocated: size,
            step: (cfg.preallocate && cfg.preallocate_step > 0).then_some(cfg.preallocate_step),
            max_allocation: cfg.segment_bytes,
        })
    }

    async fn load_tail_page(&mut self) -> Result<(), LogError> {
        let page_start = self.assigned / PAGE * PAGE;
        let len = (self.assigned - page_start) as usize;
        self.tail_page.clear();
        if len > 0 {
            let rr = self
                .file
                .read_at(page_start, len)
                .await
                .map_err(|e| LogError::io(&*self.path, e))?;
            self.tail_page.extend_from_slice(&rr[..len]);
        }
        Ok(())
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn size(&self) -> u64 {
        self.assigned
    }

    pub fn written(&self) -> u64 {
        self.written
    }

    pub fn next_offset(&self) -> u64 {
        self.next_offset
    }

    pub fn is_empty(&self) -> bool {
        self.next_offset == self.base_offset
    }

    pub fn max_timestamp(&self) -> i64 {
        self.index.max_timestamp()
    }

    pub fn is_closed(&self) -> bool {
        self.closed
    }

    /// How long ago this process created or opened the segment.
    pub fn age(&self) -> std::time::Duration {
        self.opened_at.elapsed()
    }

    /// Assigns `batches` (whole, stamped, contiguous with this segment) to the file and
    /// returns the DMA write that stores them. Only one write per segment may be in flight:
    /// the shard's flusher guarantees it.
    pub fn prepare_write(&mut self, batches: &[Bytes]) -> WriteJob {
        assert!(!self.closed, "write to a closed segment");
        let page_start = self.assigned / PAGE * PAGE;
        let data_len: usize = batches.iter().map(Bytes::len).sum();
        let total = self.tail_page.len() + data_len;
        let padded = (total as u64).div_ceil(PAGE) * PAGE;
        let mut buf = self.file.alloc_dma_buffer(padded as usize);
        let out = buf.as_bytes_mut();
        out[..self.tail_page.len()].copy_from_slice(&self.tail_page);
        let mut at = self.tail_page.len();
        for b in batches {
            let view = BatchView::parse_header(b).expect("appended batches were validated");
            let h = view.header();
            assert_eq!(
                h.base_offset, self.next_offset,
                "offsets must be contiguous"
            );
            self.index.on_batch(
                h.base_offset,
                (page_start + at as u64) as u32,
                h.length,
                h.max_timestamp_ms,
            );
            self.next_offset = h.next_offset();
            out[at..at + b.len()].copy_from_slice(b);
            at += b.len();
        }
        out[at..].fill(0);
        let new_size = page_start + total as u64;
        let new_page_start = new_size / PAGE * PAGE;
        let keep = (new_size - new_page_start) as usize;
        let from = (new_page_start - page_start) as usize;
        self.tail_page.clear();
        self.tail_page.extend_from_slice(&out[from..from + keep]);
        self.assigned = new_size;
        let write_end = page_start + padded;
        let allocate_to = match self.step {
            Some(step) if write_end > self.allocated => {
                let to = write_end
                    .div_ceil(step)
                    .saturating_mul(step)
                    .min(self.max_allocation.max(write_end));
                self.allocated = to;
                Some(to)
            }
            _ => None,
        };
        WriteJob {
            file: self.file.clone(),
            path: self.path.clone(),
            position: page_start,
            buf,
            new_size,
            allocate_to,
        }
    }

    /// Records that a write finished: its bytes are now readable.
    pub fn complete_write(&mut self, new_size: u64) {
        assert!(new_size >= self.written, "written size must grow");
        self.written = new_size;
        self.unsynced = true;
    }

    /// The file, for an fdatasync when it has unsynced writes.
    pub fn take_unsynced(&mut self) -> Option<(Rc<DmaFile>, Rc<Path>)> {
        if std::mem::take(&mut self.unsynced) {
            Some((self.file.clone(), self.path.clone()))
        } else {
            None
        }
    }

    /// Starts closing an active segment: the caller truncates the preallocated space with
    /// [`cut_and_sync`] (outside any borrow) and then calls [`finish_close`](Self::finish_close).
    pub fn begin_close(&self) -> (Rc<DmaFile>, Rc<Path>, u64) {
        (self.file.clone(), self.path.clone(), self.written)
    }

    /// Marks the segment closed (read-only); returns the write of its index files, for the
    /// caller to await outside any borrow. Until they are durable a restart scans the segment.
    pub fn finish_close(&mut self) -> IndexWrite {
        self.closed = true;
        self.unsynced = false;
        self.tail_page = Vec::new();
        self.index_write()
    }

    fn index_write(&self) -> IndexWrite {
        let extent = SegmentExtent {
            size: self.written,
            next_offset: self.next_offset,
        };
        let (idx, tidx) = self.index.encode(self.base_offset, extent);
        let (idx_path, tidx_path) = index_paths(&self.path);
        IndexWrite {
            files: [(tidx_path, tidx), (idx_path, idx)],
        }
    }

    /// A reader positioned by the offset index for `offset`.
    pub fn reader_for_offset(&self, offset: u64) -> SegmentReader {
        let (position, expected) = self
            .index
            .entry_for_offset(offset)
            .map_or((0, self.base_offset), |(p, o)| (u64::from(p), o));
        self.reader_at(position, expected)
    }

    /// A reader positioned by the time index for `ts`; `None` if every record is older.
    pub fn reader_for_timestamp(&self, ts: i64) -> Option<SegmentReader> {
        if self.index.max_timestamp() < ts {
            return None;
        }
        let position = u64::from(self.index.position_for_timestamp(ts));
        // The batch there starts wherever the index says; contiguity is checked from it on.
        Some(self.reader_at(position, u64::MAX))
    }

    fn reader_at(&self, position: u64, expected: u64) -> SegmentReader {
        SegmentReader {
            base_offset: self.base_offset,
            file: self.file.clone(),
            read_fd: self.read_fd.clone(),
            path: self.path.clone(),
            written: self.written,
            position,
            expected: (expected != u64::MAX).then_some(expected),
            scan_bytes: self.scan_bytes,
        }
    }

    /// The segment's files (log last), for their removal.
    pub fn file_paths(&self) -> [PathBuf; 3] {
        let (a, b) = index_paths(&self.path);
        [a, b, self.path.to_path_buf()]
    }
}

/// The index files of a segment to write, each synced (the time index first: the offset
/// index's trailer covers both). Written on the executor's blocking pool.
pub struct IndexWrite {
    files: [(PathBuf, Vec<u8>); 2],
}

impl IndexWrite {
    pub async fn write(self) -> Result<(), LogError> {
        rill_shards::rt::spawn_blocking(move || {
            for (path, bytes) in &self.files {
                write_synced(path, bytes)?;
            }
            Ok(())
        })
        .await
    }
}

/// A snapshot of what a read of one segment needs, so no borrow of the log is held across
/// the I/O. Reads never go past the bytes written when the snapshot was taken.
pub struct SegmentReader {
    pub base_offset: u64,
    file: Rc<DmaFile>,
    read_fd: Arc<std::fs::File>,
    path: Rc<Path>,
    written: u64,
    position: u64,
    /// The base offset the batch at `position` must have (from the index), when known.
    expected: Option<u64>,
    scan_bytes: usize,
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
                ScanStep::Batch(b) => {
                    let end = (b.position + (max_bytes as u64).max(u64::from(b.len))).min(limit);
                    return Ok(Some(FileRange {
                        file: self.read_fd.clone(),
                        position: b.position,
                        len: (end - b.position) as usize,
                    }));
                }
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
    ) -> Result<Option<ReadResult>, LogError> {
        let mut scan = self.scan((max_bytes as u64 + 2 * PAGE).max(64 << 10) as usize);
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
        let mut stop_at = first.end();
        // Batches after the first are taken while they are already read and fit.
        while let Some(ScanStep::Batch(b)) = scan.next_in_window() {
            if b.base_offset >= limit_offset || (b.end() - first.position) as usize > max_bytes {
                break;
            }
            stop_at = b.end();
        }
        Ok(scan.slice(first.position, stop_at))
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

/// Cuts a closing segment's file to its data and makes that durable.
pub async fn cut_and_sync(file: Rc<DmaFile>, path: Rc<Path>, len: u64) -> Result<(), LogError> {
    file.truncate(len)
        .await
        .map_err(|e| LogError::io(&*path, e))?;
    file.fdatasync().await.map_err(|e| LogError::io(&*path, e))
}

/// How far to preallocate an active segment whose data ends at `end`: to the next step past
/// it (one step for an empty segment), never beyond the roll size; 0 without preallocation.
fn allocation_for(end: u64, cfg: &SegmentConfig) -> u64 {
    if !cfg.preallocate || cfg.preallocate_step == 0 {
        return 0;
    }
    let step = cfg.preallocate_step;
    let want = (end / step + 1).saturating_mul(step);
    want.min(cfg.segment_bytes.max(end))
}

fn open_read_fd(path: &Path) -> Result<Arc<std::fs::File>, LogError> {
    std::fs::File::open(path)
        .map(Arc::new)
        .map_err(|e| LogError::io(path, e))
}

/// fsyncs a directory so that entries created or removed in it survive a power loss.
pub fn sync_dir(dir: &Path) -> Result<(), LogError> {
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| LogError::io(dir, e))
}

fn write_synced(path: &Path, bytes: &[u8]) -> Result<(), LogError> {
    use std::io::Write;
    let mut f = std::fs::File::create(path).map_err(|e| LogError::io(path, e))?;
    f.write_all(bytes).map_err(|e| LogError::io(path, e))?;
    f.sync_data().map_err(|e| LogError::io(path, e))
}
