//! One segment file: `<base offset>.log`, appended with 4 KiB-aligned O_DIRECT writes.
//!
//! O_DIRECT writes whole pages, so the segment keeps a copy of its partial last page and each
//! flush rewrites that page with the new bytes after it. Rewriting identical old bytes is safe
//! under a torn write: whatever part of the page lands, the old bytes in it are unchanged.
//! Active segments are preallocated (an overwrite plus fdatasync is cheaper than a growing
//! append), so the file is longer than its data; the data ends at the first place that is not a
//! valid batch, which recovery finds by scanning.

use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::Arc;

use bytes::Bytes;
use rill_shards::rt::{DmaFile, DmaOpenOptions, ReadResult};

use super::error::LogError;
use super::index::SparseIndex;
use super::scan::{scan, ScanStop, ScannedBatch};
use crate::batch::BatchView;

/// Alignment of O_DIRECT writes.
pub const PAGE: u64 = 4096;
/// How much recovery and index rebuilds read at a time.
const SCAN_CHUNK: usize = 4 << 20;

/// Settings a segment needs.
#[derive(Debug, Clone)]
pub struct SegmentConfig {
    pub segment_bytes: u64,
    /// A non-empty active segment older than this rolls at the next write (`segment.ms`).
    pub segment_age: Option<std::time::Duration>,
    pub index_interval_bytes: u32,
    pub preallocate: bool,
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
}

impl WriteJob {
    /// Performs the write; returns the size the segment has once it completed.
    pub async fn run(self) -> Result<u64, LogError> {
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
        if cfg.preallocate {
            file.pre_allocate(cfg.segment_bytes, false)
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
        })
    }

    /// Opens an existing segment. `active` segments (the last of a partition) are always
    /// scanned batch by batch and a torn or corrupt tail is cut off; closed ones are trusted
    /// when their index files are intact, else scanned and their indexes rebuilt.
    /// Returns the segment and the number of bytes of garbage cut from its tail.
    pub async fn open(
        path: PathBuf,
        base_offset: u64,
        next_offset_hint: Option<u64>,
        active: bool,
        cfg: &SegmentConfig,
    ) -> Result<(Segment, u64), LogError> {
        let file = DmaOpenOptions::new()
            .read(true)
            .write(true)
            .dma_open(&path)
            .await
            .map_err(|e| LogError::io(&path, e))?;
        let file_len = file.file_size().await.map_err(|e| LogError::io(&path, e))?;
        let (idx_path, tidx_path) = index_paths(&path);
        if !active {
            if let (Ok(idx), Ok(tidx), Some(next)) = (
                std::fs::read(&idx_path),
                std::fs::read(&tidx_path),
                next_offset_hint,
            ) {
                if let Some(index) = SparseIndex::decode(
                    base_offset,
                    cfg.index_interval_bytes,
                    &idx,
                    &tidx,
                    file_len.max(1),
                ) {
                    let mut seg =
                        Segment::from_parts(path, file, base_offset, file_len, next, index)?;
                    seg.closed = true;
                    return Ok((seg, 0));
                }
            }
        }
        let (batches, end, garbage) = scan_file(&file, &path, base_offset, file_len).await?;
        let mut index = SparseIndex::new(cfg.index_interval_bytes);
        for b in &batches {
            index.on_batch(b.base_offset, b.position as u32, b.len, b.max_timestamp);
        }
        let next = batches.last().map_or(base_offset, |b| b.next_offset);
        if end < file_len {
            // Cut the torn tail or the preallocated zeros, then re-preallocate: bytes after the
            // data must read as zeros so that garbage can never pass for a batch later.
            file.truncate(end)
                .await
                .map_err(|e| LogError::io(&path, e))?;
            if active && cfg.preallocate {
                file.pre_allocate(cfg.segment_bytes.max(end), false)
                    .await
                    .map_err(|e| LogError::io(&path, e))?;
            }
            file.fdatasync().await.map_err(|e| LogError::io(&path, e))?;
        }
        let mut seg = Segment::from_parts(path, file, base_offset, end, next, index)?;
        if !active {
            seg.closed = true;
            seg.write_index_files()?;
        } else {
            seg.load_tail_page().await?;
        }
        Ok((seg, garbage))
    }

    fn from_parts(
        path: PathBuf,
        file: DmaFile,
        base_offset: u64,
        size: u64,
        next_offset: u64,
        index: SparseIndex,
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
        WriteJob {
            file: self.file.clone(),
            path: self.path.clone(),
            position: page_start,
            buf,
            new_size,
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

    /// Marks the segment closed (read-only) and persists its indexes.
    pub fn finish_close(&mut self) -> Result<(), LogError> {
        self.closed = true;
        self.unsynced = false;
        self.tail_page = Vec::new();
        self.write_index_files()
    }

    fn write_index_files(&self) -> Result<(), LogError> {
        let (idx, tidx) = self.index.encode(self.base_offset);
        let (idx_path, tidx_path) = index_paths(&self.path);
        write_synced(&tidx_path, &tidx)?;
        write_synced(&idx_path, &idx)
    }

    /// Deletes the segment's index files.
    pub fn remove_index_files(&self) {
        let (a, b) = index_paths(&self.path);
        let _ = std::fs::remove_file(a);
        let _ = std::fs::remove_file(b);
    }

    /// A reader positioned by the offset index for `offset`.
    pub fn reader_for_offset(&self, offset: u64) -> SegmentReader {
        SegmentReader {
            base_offset: self.base_offset,
            file: self.file.clone(),
            read_fd: self.read_fd.clone(),
            path: self.path.clone(),
            written: self.written,
            position: u64::from(self.index.position_for_offset(offset)),
        }
    }

    /// A reader positioned by the time index for `ts`; `None` if every record is older.
    pub fn reader_for_timestamp(&self, ts: i64) -> Option<SegmentReader> {
        if self.index.max_timestamp() < ts {
            return None;
        }
        Some(SegmentReader {
            base_offset: self.base_offset,
            file: self.file.clone(),
            read_fd: self.read_fd.clone(),
            path: self.path.clone(),
            written: self.written,
            position: u64::from(self.index.position_for_timestamp(ts)),
        })
    }

    /// Deletes the segment's files.
    pub async fn remove(self) -> Result<(), LogError> {
        self.remove_index_files();
        std::fs::remove_file(&self.path).map_err(|e| LogError::io(&*self.path, e))
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
    /// position). Only headers are read (through the page cache); the range may end in the
    /// middle of a batch, which consumers drop, as Kafka's do.
    pub fn file_range(
        &self,
        offset: u64,
        max_bytes: usize,
        limit_position: u64,
    ) -> Result<Option<FileRange>, LogError> {
        use std::os::unix::fs::FileExt;
        let limit = limit_position.min(self.written);
        let mut position = self.position;
        let mut header = [0u8; crate::batch::HEADER_LEN];
        loop {
            if position + crate::batch::HEADER_LEN as u64 > limit {
                return Ok(None);
            }
            self.read_fd
                .read_exact_at(&mut header, position)
                .map_err(|e| LogError::io(&*self.path, e))?;
            let h =
                crate::batch::BatchHeader::decode(&header).ok_or_else(|| LogError::Corrupt {
                    path: self.path.to_path_buf(),
                    position,
                    what: "short header".into(),
                })?;
            if h.magic != crate::batch::MAGIC || (h.length as usize) <= crate::batch::HEADER_LEN {
                return Err(LogError::Corrupt {
                    path: self.path.to_path_buf(),
                    position,
                    what: "not a batch header".into(),
                });
            }
            let len = u64::from(h.length);
            if h.next_offset() > offset {
                if position + len > limit {
                    return Ok(None);
                }
                let end = (position + (max_bytes as u64).max(len)).min(limit);
                return Ok(Some(FileRange {
                    file: self.read_fd.clone(),
                    position,
                    len: (end - position) as usize,
                }));
            }
            position += len;
        }
    }

    /// Reads whole batches starting with the one holding `offset`, up to `max_bytes` (at least
    /// one batch), stopping before `limit_offset`. Returns the bytes as read from the file.
    pub async fn read(
        self,
        offset: u64,
        max_bytes: usize,
        limit_offset: u64,
    ) -> Result<Option<ReadResult>, LogError> {
        let mut position = self.position;
        let end = self.written;
        let mut want = (max_bytes as u64 + 2 * PAGE).max(64 << 10);
        loop {
            if position >= end {
                return Ok(None);
            }
            let len = want.min(end - position) as usize;
            let rr = self
                .file
                .read_at(position, len)
                .await
                .map_err(|e| LogError::io(&*self.path, e))?;
            let mut found = Vec::new();
            let stop = scan(&rr, position, None, &mut found);
            let first = found.iter().position(|b| b.next_offset > offset);
            match first {
                Some(i) => {
                    let start = found[i].position;
                    let mut stop_at = start + u64::from(found[i].len);
                    for b in &found[i + 1..] {
                        if b.base_offset >= limit_offset
                            || (stop_at - start) as usize + b.len as usize > max_bytes
                        {
                            break;
                        }
                        stop_at = b.position + u64::from(b.len);
                    }
                    if found[i].base_offset >= limit_offset {
                        return Ok(None);
                    }
                    let rel = (start - position) as usize;
                    return Ok(ReadResult::slice(&rr, rel, (stop_at - start) as usize));
                }
                None => match stop {
                    ScanStop::Truncated { position: p, need } => {
                        // Skip the whole batches before it and read the big one whole.
                        position = p;
                        want = want.max(need as u64);
                    }
                    ScanStop::End => match found.last() {
                        Some(last) => position = last.position + u64::from(last.len),
                        None => return Ok(None),
                    },
                    ScanStop::Invalid { position: p, error } => {
                        return Err(LogError::Corrupt {
                            path: self.path.to_path_buf(),
                            position: p,
                            what: error.to_string(),
                        })
                    }
                    ScanStop::Discontiguous { position: p, .. } => {
                        return Err(LogError::Corrupt {
                            path: self.path.to_path_buf(),
                            position: p,
                            what: "offsets not contiguous".into(),
                        })
                    }
                },
            }
        }
    }

    /// The first (offset, timestamp) of a record at or after `ts` below `limit_offset`.
    pub async fn find_timestamp(
        self,
        ts: i64,
        limit_offset: u64,
    ) -> Result<Option<(u64, i64)>, LogError> {
        let mut position = self.position;
        while position < self.written {
            let len = (SCAN_CHUNK as u64).min(self.written - position) as usize;
            let rr = self
                .file
                .read_at(position, len)
                .await
                .map_err(|e| LogError::io(&*self.path, e))?;
            let mut found = Vec::new();
            let stop = scan(&rr, position, None, &mut found);
            for b in &found {
                if b.base_offset >= limit_offset {
                    return Ok(None);
                }
                if b.max_timestamp < ts {
                    continue;
                }
                let rel = (b.position - position) as usize;
                let view =
                    BatchView::parse_header(&rr[rel..rel + b.len as usize]).map_err(|e| {
                        LogError::Corrupt {
                            path: self.path.to_path_buf(),
                            position: b.position,
                            what: e.to_string(),
                        }
                    })?;
                let records = view.records().map_err(|e| LogError::Corrupt {
                    path: self.path.to_path_buf(),
                    position: b.position,
                    what: e.to_string(),
                })?;
                for r in records {
                    if r.offset >= limit_offset {
                        return Ok(None);
                    }
                    if r.timestamp_ms >= ts {
                        return Ok(Some((r.offset, r.timestamp_ms)));
                    }
                }
            }
            match (stop, found.last()) {
                (ScanStop::Truncated { position: p, need }, _) if need > SCAN_CHUNK => {
                    return Err(LogError::Corrupt {
                        path: self.path.to_path_buf(),
                        position: p,
                        what: format!("batch of {need} bytes exceeds the scan window"),
                    })
                }
                (ScanStop::Truncated { position: p, .. }, _) => position = p,
                (_, Some(last)) if last.position + u64::from(last.len) > position => {
                    position = last.position + u64::from(last.len)
                }
                _ => return Ok(None),
            }
        }
        Ok(None)
    }
}

/// Cuts a closing segment's file to its data and makes that durable.
pub async fn cut_and_sync(file: Rc<DmaFile>, path: Rc<Path>, len: u64) -> Result<(), LogError> {
    file.truncate(len)
        .await
        .map_err(|e| LogError::io(&*path, e))?;
    file.fdatasync().await.map_err(|e| LogError::io(&*path, e))
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

/// Scans a whole segment file from the start. Returns the valid batches, where the valid data
/// ends, and how many bytes of non-zero garbage followed it (a torn or corrupt tail).
async fn scan_file(
    file: &DmaFile,
    path: &Path,
    base_offset: u64,
    file_len: u64,
) -> Result<(Vec<ScannedBatch>, u64, u64), LogError> {
    let mut batches = Vec::new();
    let mut position = 0u64;
    let mut expected = Some(base_offset);
    let mut want = SCAN_CHUNK as u64;
    loop {
        if position >= file_len {
            return Ok((batches, position, 0));
        }
        let len = want.min(file_len - position) as usize;
        let rr = file
            .read_at(position, len)
            .await
            .map_err(|e| LogError::io(path, e))?;
        let before = batches.len();
        let stop = scan(&rr, position, expected, &mut batches);
        if let Some(last) = batches[before..].last() {
            expected = Some(last.next_offset);
        }
        let resume = batches
            .last()
            .map_or(0, |b| b.position + u64::from(b.len))
            .max(position);
        match stop {
            ScanStop::End => {
                position = resume;
                want = SCAN_CHUNK as u64;
            }
            ScanStop::Truncated { position: p, need } => {
                if p + need as u64 > file_len {
                    // A batch that claims to run past the file: torn.
                    let garbage = nonzero_tail(&rr[(p - position) as usize..]);
                    return Ok((batches, p, garbage));
                }
                position = p;
                want = want.max(need as u64);
            }
            ScanStop::Invalid { position: p, .. } | ScanStop::Discontiguous { position: p, .. } => {
                let garbage = nonzero_tail(&rr[(p - position) as usize..]);
                return Ok((batches, p, garbage));
            }
        }
    }
}

fn nonzero_tail(b: &[u8]) -> u64 {
    b.iter().rposition(|x| *x != 0).map_or(0, |i| i as u64 + 1)
}
