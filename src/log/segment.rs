//! One segment file: `<base offset>.log`, appended with 4 KiB-aligned O_DIRECT writes. This
//! file holds the segment itself (creation, closing, removal, its index); its appender
//! (`appender.rs`), its reader (`reader.rs`) and its open-time checks (`recovery.rs`) live
//! beside it.
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

use rill_shards::file::DirectFile;

pub use super::appender::WriteJob;
use super::error::LogError;
use super::index::{SegmentExtent, SparseIndex};
pub use super::reader::{FileRange, SegmentReader};
pub use super::recovery::{Damage, SegmentCheck};

/// Alignment of O_DIRECT writes.
pub const PAGE: u64 = 4096;
/// How much recovery, index rebuilds and time lookups read at a time, by default.
pub const SCAN_BYTES: usize = 4 << 20;
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
    /// Largest single DMA write (`--file-write-bytes`, a multiple of the page): a write is cut
    /// into pieces of this size.
    pub write_bytes: usize,
    /// DMA writes in flight per partition at most (`--file-writes-in-flight`).
    pub writes_in_flight: usize,
    /// How much a scan reads at a time ([`SCAN_BYTES`]; smaller in tests, so that reads end
    /// inside batches and headers often).
    pub scan_bytes: usize,
    /// Segments are opened O_DSYNC (`--fsync always`): each write is durable when it
    /// completes, so a round needs no fdatasync after its writes.
    pub sync_writes: bool,
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

pub(super) fn index_paths(path: &Path) -> (PathBuf, PathBuf) {
    (
        path.with_extension("index"),
        path.with_extension("timeindex"),
    )
}

pub struct Segment {
    pub base_offset: u64,
    /// When this process created or opened the segment (the clock `segment.ms` runs on).
    pub(super) opened_at: std::time::Instant,
    /// A buffered (page cache) descriptor for sendfile reads; writes stay O_DIRECT.
    pub(super) read_fd: Arc<std::fs::File>,
    pub(super) path: Rc<Path>,
    pub(super) file: Rc<DirectFile>,
    /// Bytes assigned to batches (including those handed to a write not yet completed).
    pub(super) assigned: u64,
    /// Bytes whose DMA write completed: reads never go past this.
    pub(super) written: u64,
    /// The offset after the last batch assigned to this segment.
    pub(super) next_offset: u64,
    pub(super) index: SparseIndex,
    /// Copy of the bytes in `[align_down(assigned), assigned)`.
    pub(super) tail_page: Vec<u8>,
    /// Closed segments are read-only and truncated to their data.
    pub(super) closed: bool,
    /// Written bytes not yet covered by an fdatasync.
    pub(super) unsynced: bool,
    pub(super) scan_bytes: usize,
    /// The file's length, fallocated ahead of the data (= the data for a closed segment).
    pub(super) allocated: u64,
    /// The preallocation step (`None`: no preallocation).
    pub(super) step: Option<u64>,
    /// Preallocation never goes past the segment's roll size.
    pub(super) max_allocation: u64,
    /// The sync of the directory entry of a segment a roll created, till it is awaited.
    dir_sync: Option<DirSync>,
}

/// A directory sync running behind (see [`Segment::create_rolled`]).
pub type DirSync = rill_shards::rt::Task<Result<(), LogError>>;

impl Segment {
    /// Creates a new, empty active segment, its directory entry durable.
    pub async fn create(
        dir: &Path,
        base_offset: u64,
        cfg: &SegmentConfig,
    ) -> Result<Segment, LogError> {
        let seg = Self::create_file(dir, base_offset, cfg).await?;
        // The new file's directory entry must be durable before anything acknowledged lives
        // in it. On the blocking pool: a directory sync waits for a journal commit, which on
        // a disk busy with writes can take far longer than the sync itself, and inline it
        // stopped the whole shard (every partition and connection on it) meanwhile.
        let d = dir.to_path_buf();
        rill_shards::rt::spawn_blocking(move || sync_dir(&d)).await?;
        Ok(seg)
    }

    /// Creates the segment a roll moves to; the sync of its directory entry runs behind, for
    /// the next [`take_dir_sync`](Self::take_dir_sync) to await. On a disk busy with writes
    /// that sync waits for a journal commit (182 and 296 ms seen, RESULTS.md 2026-12-04
    /// "fifth"), and every request of the group-commit round waited with it. With `--fsync
    /// always` the round's sync awaits it beside the fdatasync, so an acknowledgement still
    /// waits for it; with `never`, whose writes are not made durable either, it does not.
    pub async fn create_rolled(
        dir: &Path,
        base_offset: u64,
        cfg: &SegmentConfig,
    ) -> Result<Segment, LogError> {
        let mut seg = Self::create_file(dir, base_offset, cfg).await?;
        let d = dir.to_path_buf();
        seg.dir_sync = Some(rill_shards::rt::spawn_local(async move {
            rill_shards::rt::spawn_blocking(move || sync_dir(&d)).await
        }));
        Ok(seg)
    }

    /// The sync of this segment's directory entry still running or not yet awaited, if any.
    pub fn take_dir_sync(&mut self) -> Option<DirSync> {
        self.dir_sync.take()
    }

    async fn create_file(
        dir: &Path,
        base_offset: u64,
        cfg: &SegmentConfig,
    ) -> Result<Segment, LogError> {
        let path = dir.join(segment_file_name(base_offset));
        let file = DirectFile::open(&path, true, cfg.sync_writes)
            .await
            .map_err(|e| LogError::io(&path, e))?;
        let allocated = allocation_for(0, cfg);
        if allocated > 0 {
            file.pre_allocate(allocated, false)
                .await
                .map_err(|e| LogError::io(&path, e))?;
        }
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
            dir_sync: None,
        })
    }

    /// Makes the segment read-only without touching its file (a partition that failed).
    pub fn freeze(&mut self) {
        self.closed = true;
        self.tail_page = Vec::new();
    }

    pub(super) fn from_parts(
        path: PathBuf,
        file: DirectFile,
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
            dir_sync: None,
        })
    }

    pub(super) async fn load_tail_page(&mut self) -> Result<(), LogError> {
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

    /// Starts closing an active segment: the caller truncates the preallocated space with
    /// [`cut`] or [`cut_and_sync`] (outside any borrow) and then calls
    /// [`finish_close`](Self::finish_close).
    pub fn begin_close(&self) -> (Rc<DirectFile>, Rc<Path>, u64) {
        (self.file.clone(), self.path.clone(), self.written)
    }

    /// Marks the segment closed (read-only); returns the write of its index files, for the
    /// caller to await outside any borrow. Until they are durable a restart scans the segment.
    /// `synced`: the close made the data durable ([`cut_and_sync`]); else its writes stay
    /// for the next fdatasync of the log ([`take_unsynced`](Self::take_unsynced)).
    pub fn finish_close(&mut self, synced: bool) -> IndexWrite {
        self.closed = true;
        if synced {
            self.unsynced = false;
        }
        self.tail_page = Vec::new();
        self.index_write()
    }

    pub(super) fn index_write(&self) -> IndexWrite {
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

/// The index files of a segment to write (the time index first: the offset index's trailer
/// covers both). Written on the executor's blocking pool, and not synced: they are a cache of
/// what a scan finds. A crash that loses or tears them leaves files whose checksum or
/// recorded length does not match, and the segment is scanned at open instead
/// (`Segment::open`); its data was cut and fdatasynced before. Their fdatasync, at a roll on
/// a disk busy with writes, waited for a journal commit that the whole group-commit round
/// waited for (322 ms seen, RESULTS 2026-12-04 seventh).
pub struct IndexWrite {
    files: [(PathBuf, Vec<u8>); 2],
}

impl IndexWrite {
    pub async fn write(self) -> Result<(), LogError> {
        rill_shards::rt::spawn_blocking(move || {
            for (path, bytes) in &self.files {
                std::fs::write(path, bytes).map_err(|e| LogError::io(path, e))?;
            }
            Ok(())
        })
        .await
    }
}

/// Cuts a closing segment's file to its data (its preallocated space goes), not synced: a
/// crash before the cut is durable leaves zeros after the data, which
/// [`Segment::open`] cuts again.
pub async fn cut(file: &DirectFile, path: &Path, len: u64) -> Result<(), LogError> {
    file.truncate(len).await.map_err(|e| LogError::io(path, e))
}

/// Cuts a closing segment's file to its data and makes that durable.
pub async fn cut_and_sync(file: Rc<DirectFile>, path: Rc<Path>, len: u64) -> Result<(), LogError> {
    cut(&file, &path, len).await?;
    file.fdatasync().await.map_err(|e| LogError::io(&*path, e))
}

/// How far to preallocate an active segment whose data ends at `end`: to the next step past
/// it (one step for an empty segment), never beyond the roll size; 0 without preallocation.
pub(super) fn allocation_for(end: u64, cfg: &SegmentConfig) -> u64 {
    if !cfg.preallocate || cfg.preallocate_step == 0 {
        return 0;
    }
    let step = cfg.preallocate_step;
    let want = (end / step + 1).saturating_mul(step);
    want.min(cfg.segment_bytes.max(end))
}

pub(super) fn open_read_fd(path: &Path) -> Result<Arc<std::fs::File>, LogError> {
    std::fs::File::open(path)
        .map(Arc::new)
        .map_err(|e| LogError::io(path, e))
}

/// fsyncs a directory so that entries created or removed in it survive a power loss.
pub fn sync_dir(dir: &Path) -> Result<(), LogError> {
    rill_shards::file::faults::check(dir, rill_shards::file::faults::FileOp::DirSync)
        .map_err(|e| LogError::io(dir, e))?;
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| LogError::io(dir, e))
}

pub(super) fn write_synced(path: &Path, bytes: &[u8]) -> Result<(), LogError> {
    use std::io::Write;
    let mut f = std::fs::File::create(path).map_err(|e| LogError::io(path, e))?;
    f.write_all(bytes).map_err(|e| LogError::io(path, e))?;
    rill_shards::file::faults::check(path, rill_shards::file::faults::FileOp::Fdatasync)
        .and_then(|()| f.sync_data())
        .map_err(|e| LogError::io(path, e))
}
