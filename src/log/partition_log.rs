//! The segments of one partition and the order in which batches reach them.
//!
//! Appends are synchronous and only touch memory: the batch gets its offsets and waits in
//! `pending`. The shard's group-commit task later hands all pending batches of all its
//! partitions to the disk at once ([`flush`]), rolling segments as they fill. Only that task
//! writes, so there is at most one write in flight per partition.

use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use bytes::Bytes;
use rill_shards::file::DirectFile;
use rill_shards::rt::ReadResult;

use super::error::LogError;
use super::segment::{
    cut, cut_and_sync, parse_segment_file_name, DirSync, FileRange, Segment, SegmentConfig,
    SegmentReader,
};
use crate::batch::HEADER_LEN;

/// A piece of a fetch response payload: whole batches, from memory or from a segment file.
pub enum ReadChunk {
    Memory(Bytes),
    File(ReadResult),
    /// A file range for sendfile; may end inside a batch.
    Sendfile(FileRange),
}

impl ReadChunk {
    /// The bytes, for chunks held in memory.
    pub fn as_slice(&self) -> Option<&[u8]> {
        match self {
            ReadChunk::Memory(b) => Some(b),
            ReadChunk::File(r) => Some(r),
            ReadChunk::Sendfile(_) => None,
        }
    }
    pub fn len(&self) -> usize {
        match self {
            ReadChunk::Memory(b) => b.len(),
            ReadChunk::File(r) => r.len(),
            ReadChunk::Sendfile(f) => f.len,
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Where a flush left the log: every offset below `offset` is written, and the data ends at
/// byte `position` of the segment starting at `segment_base`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Flushed {
    pub offset: u64,
    pub segment_base: u64,
    pub position: u64,
}

/// How fetches read segment files (`--file-reads`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileReads {
    /// O_DIRECT read into memory, then written to the socket; the default. Every read goes
    /// to the device (O_DIRECT bypasses the page cache), which on these machines is cheaper
    /// than filling the page cache: a cold sendfile costs the reader a first touch of every
    /// freshly read page (bench-harness/RESULTS.md, 2026-12-04: 2.1x the consume throughput).
    Copy,
    /// sendfile from the page cache to the socket, never through user space. Faster than
    /// `Copy` only while the data is already in the page cache (a repeated read).
    Sendfile,
}

impl std::str::FromStr for FileReads {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "copy" => Ok(FileReads::Copy),
            "sendfile" => Ok(FileReads::Sendfile),
            _ => Err(format!(
                "bad file read mode '{s}': expected copy or sendfile"
            )),
        }
    }
}

/// What opening a partition found.
#[derive(Debug, Default, Clone)]
pub struct Recovery {
    pub segments: usize,
    /// Bytes of a torn tail cut from the active segment.
    pub truncated_bytes: u64,
}

/// Offsets the log cannot serve: a segment missing or damaged, or acknowledged offsets
/// recovery did not find. Reads there are refused with an error naming the range.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hole {
    pub from: u64,
    pub to: u64,
    pub why: String,
}

/// Why a log refuses writes.
#[derive(Debug, Clone)]
struct Failure {
    why: String,
    /// A write, sync or allocation failed (a full or failing disk): reopening the log may
    /// work once the disk is back. Damaged data never heals by itself.
    retriable: bool,
}

pub struct PartitionLog {
    dir: PathBuf,
    cfg: SegmentConfig,
    /// The first offset still readable: the first segment's base, or higher after a
    /// truncation (persisted in `log-start-offset`).
    log_start: u64,
    /// Sorted by base offset; the last one is active.
    segments: Vec<Segment>,
    next_offset: u64,
    pending: Vec<Bytes>,
    /// The batches a flush is writing now (taken from `pending`): with `pending` they hold
    /// every offset from `written_offset` to the log end, which write caching serves from
    /// memory.
    in_flight: Vec<Bytes>,
    /// Bytes in `in_flight` and `pending`, kept as they change: write caching asks at every
    /// append.
    unwritten: usize,
    /// Offsets below this are written to their segment files.
    written_offset: u64,
    failed: Option<Failure>,
    /// Ranges of offsets that are lost or damaged (the log is failed when there are any).
    holes: Vec<Hole>,
    /// The base of a closed segment whose compacted files are being swapped in: retention
    /// and truncation leave it (and what follows) until the swap is over.
    swapping: Option<u64>,
}

/// A closed segment as the cleaner sees it.
#[derive(Debug, Clone)]
pub struct ClosedSegment {
    pub base_offset: u64,
    pub next_offset: u64,
    pub path: PathBuf,
    pub size: u64,
    pub max_timestamp: i64,
}

impl PartitionLog {
    /// Opens (or creates) the partition directory and checks what it holds: closed segments
    /// against their indexes and each other (contiguous offsets), the active one batch by
    /// batch, and the whole against the last checkpointed high watermark. A torn tail past
    /// every acknowledged offset is cut; anything else that is missing or damaged (a hole
    /// between segments, a shortened or corrupt closed segment, acknowledged offsets the
    /// active segment no longer holds) leaves every file as it is and opens the log failed:
    /// read-only, reads inside the damage refused with an error naming the range, and its
    /// offsets never reused. A log that cannot be repaired for lack of space opens failed too.
    pub async fn open(
        dir: PathBuf,
        cfg: SegmentConfig,
    ) -> Result<(PartitionLog, Recovery), LogError> {
        if !dir.exists() {
            std::fs::create_dir_all(&dir).map_err(|e| LogError::io(&dir, e))?;
            // Make the new directory chain durable up to the data dir's topics folder.
            let mut d = dir.as_path();
            for _ in 0..3 {
                match d.parent() {
                    Some(parent) => {
                        super::segment::sync_dir(parent)?;
                        d = parent;
                    }
                    None => break,
                }
            }
        }
        // A compaction cut short: finished if it committed, else its files go (both keep
        // every key's latest record).
        super::compaction::finish_or_undo_swaps(&dir)?;
        let mut bases = Vec::new();
        for entry in std::fs::read_dir(&dir).map_err(|e| LogError::io(&dir, e))? {
            let entry = entry.map_err(|e| LogError::io(&dir, e))?;
            if let Some(base) = entry.file_name().to_str().and_then(parse_segment_file_name) {
                bases.push(base);
            }
        }
        bases.sort_unstable();
        let acknowledged = read_offset_file(&dir, HIGH_WATERMARK_FILE);
        let log_start_checkpoint = read_offset_file(&dir, LOG_START_FILE);
        let mut recovery = Recovery::default();
        let mut holes = Vec::new();
        let mut segments: Vec<Segment> = Vec::with_capacity(bases.len().max(1));
        let mut active_check = None;
        for (i, base) in bases.iter().enumerate() {
            let active = i + 1 == bases.len();
            let path = dir.join(super::segment::segment_file_name(*base));
            let (seg, check) = Segment::open(path, *base, active, &cfg).await?;
            if let Some(prev) = segments.last() {
                if seg.base_offset < prev.next_offset() {
                    return Err(LogError::Corrupt {
                        path: seg.path().to_path_buf(),
                        position: 0,
                        what: format!(
                            "segment starts at offset {} inside the previous one (ends at {})",
                            seg.base_offset,
                            prev.next_offset()
                        ),
                    });
                }
                if seg.base_offset > prev.next_offset() {
                    holes.push(Hole {
                        from: prev.next_offset(),
                        to: seg.base_offset,
                        why: format!(
                            "no segment holds them: {} ends at {} and {} starts at {}",
                            prev.path().display(),
                            prev.next_offset(),
                            seg.path().display(),
                            seg.base_offset
                        ),
                    });
                }
            }
            match check.damage {
                // Zeros after the data, and every offset here (the next segment starts where
                // this one ends): a roll's cut that a crash kept from the disk.
                Some(d)
                    if !active
                        && d.garbage == 0
                        && bases.get(i + 1) == Some(&seg.next_offset()) =>
                {
                    log::info!(
                        "{}: cutting {} bytes of zeros after its data (a roll's cut lost in a crash)",
                        seg.path().display(),
                        check.file_len - d.at
                    );
                    seg.cut_after_data().await;
                    segments.push(seg);
                    continue;
                }
                Some(d) if !active => {
                    // The gap to the next segment becomes a hole; say why here.
                    log::error!("{}: damaged: {}", seg.path().display(), d.what);
                    if let Some(next) = bases.get(i + 1) {
                        if seg.next_offset() < *next {
                            holes.push(Hole {
                                from: seg.next_offset(),
                                to: *next,
                                why: format!("{} is damaged: {}", seg.path().display(), d.what),
                            });
                        }
                    }
                    segments.push(seg);
                    continue;
                }
                damage => active_check = Some((check.file_len, damage)),
            }
            segments.push(seg);
        }
        // Later holes were pushed with the segment after them; keep them in offset order.
        holes.sort_by_key(|h| h.from);
        holes.dedup_by(|b, a| a.from == b.from && a.to == b.to);
        if segments.is_empty() {
            // A log whose files are all gone resumes past every offset it ever handed out.
            let start = log_start_checkpoint
                .unwrap_or(0)
                .max(acknowledged.unwrap_or(0));
            segments.push(Segment::create(&dir, start, &cfg).await?);
            active_check = Some((0, None));
            if let Some(acked) = acknowledged.filter(|a| *a > log_start_checkpoint.unwrap_or(0)) {
                holes.push(Hole {
                    from: log_start_checkpoint.unwrap_or(0),
                    to: acked,
                    why: "every segment file is missing".into(),
                });
            }
        }
        let found_end = segments.last().map_or(0, Segment::next_offset);
        if let Some(acked) = acknowledged.filter(|a| *a > found_end) {
            holes.push(Hole {
                from: found_end,
                to: acked,
                why: format!(
                    "acknowledged (high watermark checkpoint {acked}) but recovery found data \
                     only up to {found_end}"
                ),
            });
        }
        let mut failed = None;
        if let Some(h) = holes.first() {
            failed = Some(Failure {
                why: format!(
                    "offsets {}..{} are missing or damaged: {}",
                    h.from, h.to, h.why
                ),
                retriable: false,
            });
        } else if let Some((file_len, damage)) = active_check {
            let active = segments.last_mut().expect("a log has an active segment");
            if let Some(d) = &damage {
                log::warn!(
                    "{}: cut {} bytes of torn data after offset {} ({}): none of it was \
                     acknowledged",
                    active.path().display(),
                    file_len - d.at,
                    active.next_offset(),
                    d.what
                );
                recovery.truncated_bytes = d.garbage.max(1);
            }
            if let Err(e) = active.repair_tail(file_len, &cfg).await {
                // Typically a full disk: the data is intact, so serve it read-only.
                failed = Some(Failure {
                    why: format!("cannot prepare the log for writes: {e}"),
                    retriable: true,
                });
            }
        }
        let log_end = found_end.max(acknowledged.unwrap_or(0));
        if let Some(f) = &failed {
            log::error!("{}: opened read-only: {}", dir.display(), f.why);
            if let Some(active) = segments.last_mut() {
                active.freeze();
            }
        }
        recovery.segments = segments.len();
        let first_base = segments.first().map_or(0, |s| s.base_offset);
        let log_start = log_start_checkpoint.unwrap_or(0).clamp(first_base, log_end);
        Ok((
            PartitionLog {
                dir,
                cfg,
                log_start,
                segments,
                next_offset: log_end,
                pending: Vec::new(),
                in_flight: Vec::new(),
                unwritten: 0,
                written_offset: log_end,
                failed,
                holes,
                swapping: None,
            },
            recovery,
        ))
    }

    /// Ranges the log cannot serve.
    pub fn holes(&self) -> &[Hole] {
        &self.holes
    }

    fn hole_at(&self, offset: u64) -> Option<&Hole> {
        self.holes
            .iter()
            .find(|h| h.from <= offset && offset < h.to)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The first offset still readable.
    pub fn log_start_offset(&self) -> u64 {
        self.log_start
    }

    /// Applies a topic's segment settings (they may change while the partition runs).
    pub fn set_segment_limits(
        &mut self,
        segment_bytes: u64,
        segment_age: Option<std::time::Duration>,
    ) {
        self.cfg.segment_bytes = segment_bytes;
        self.cfg.segment_age = segment_age;
    }

    /// Moves the log start to `offset` (at most `limit`, the high watermark) and detaches the
    /// segments wholly below it; the caller deletes their files. The new start is durable
    /// before this returns (DeleteRecords must survive a restart).
    pub fn truncate_before(&mut self, offset: u64, limit: u64) -> Result<Vec<Segment>, LogError> {
        if offset > limit {
            return Err(LogError::OffsetOutOfRange {
                offset,
                start: self.log_start,
                end: limit,
            });
        }
        if offset <= self.log_start {
            return Ok(Vec::new());
        }
        write_offset_file(&self.dir, LOG_START_FILE, offset)?;
        self.log_start = offset;
        let mut gone = Vec::new();
        while self.segments.len() > 1
            && self.segments[0].next_offset() <= offset
            && self.swapping != Some(self.segments[0].base_offset)
        {
            gone.push(self.segments.remove(0));
        }
        Ok(gone)
    }

    /// Detaches closed segments past the retention limits, oldest first, at most `max` of
    /// them (bounded work per tick); the caller deletes their files. By time: the segment's
    /// newest record is older than `retention`. By size: the partition would stay at or over
    /// `retention_bytes` without it. The active segment is never removed.
    pub fn expire(
        &mut self,
        now_ms: i64,
        retention: Option<std::time::Duration>,
        retention_bytes: Option<u64>,
        max: usize,
    ) -> Vec<Segment> {
        let mut size = self.size_bytes();
        let mut gone = Vec::new();
        while gone.len() < max && self.segments.len() > 1 {
            let first = &self.segments[0];
            if self.swapping == Some(first.base_offset) {
                break;
            }
            let too_old = retention.is_some_and(|r| {
                first.max_timestamp() < now_ms.saturating_sub(r.as_millis() as i64)
            });
            let too_big =
                retention_bytes.is_some_and(|limit| size.saturating_sub(first.size()) >= limit);
            if !(too_old || too_big) {
                break;
            }
            size -= first.size();
            gone.push(self.segments.remove(0));
        }
        if let Some(first) = self.segments.first() {
            self.log_start = self.log_start.max(first.base_offset);
        }
        gone
    }

    /// The offset the next appended record gets (log end offset).
    pub fn next_offset(&self) -> u64 {
        self.next_offset
    }

    /// Offsets below this are written to disk (not necessarily fsynced).
    pub fn written_offset(&self) -> u64 {
        self.written_offset
    }

    /// Where the written data ends.
    pub fn end_position(&self) -> Flushed {
        let active = self.segments.last().expect("a log has an active segment");
        Flushed {
            offset: self.written_offset,
            segment_base: active.base_offset,
            position: active.written(),
        }
    }

    pub fn segment_count(&self) -> usize {
        self.segments.len()
    }

    pub fn size_bytes(&self) -> u64 {
        self.segments.iter().map(Segment::size).sum()
    }

    pub fn failure(&self) -> Option<&str> {
        self.failed.as_ref().map(|f| f.why.as_str())
    }

    /// Failed for a reason that reopening may cure (a full or failing disk).
    pub fn can_retry(&self) -> bool {
        self.failed.as_ref().is_some_and(|f| f.retriable)
    }

    /// The settings the log was opened with (to reopen it).
    pub fn config(&self) -> &SegmentConfig {
        &self.cfg
    }

    /// Assigns offsets to a validated batch and queues it for the next flush. Returns the
    /// stamped bytes (what will be on disk) for the tail cache.
    /// Queues a validated batch already stamped with this log's next offset.
    pub fn append_stamped(&mut self, batch: Bytes, record_count: u32) -> Result<(), LogError> {
        if let Some(f) = &self.failed {
            return Err(LogError::Failed(f.why.clone()));
        }
        assert!(batch.len() >= HEADER_LEN && record_count > 0);
        let header = crate::batch::BatchHeader::decode(&batch).expect("length checked");
        assert_eq!(
            header.base_offset, self.next_offset,
            "appended offsets must be contiguous"
        );
        self.next_offset += u64::from(record_count);
        self.unwritten += batch.len();
        self.pending.push(batch);
        Ok(())
    }

    /// Bytes of the batches appended and not yet taken by a flush.
    pub fn pending_bytes(&self) -> usize {
        self.pending.iter().map(Bytes::len).sum()
    }

    /// Bytes appended and not yet written: pending plus the flush in flight (what write
    /// caching acknowledged from memory, at most).
    pub fn unwritten_bytes(&self) -> usize {
        debug_assert_eq!(
            self.unwritten,
            self.in_flight
                .iter()
                .chain(&self.pending)
                .map(Bytes::len)
                .sum::<usize>(),
            "the unwritten count follows the batches"
        );
        self.unwritten
    }

    /// Whole batches not yet written (from `offset`, at or past the written offset), from the
    /// one holding `offset`, ending at or below `limit`, up to `max_bytes` (at least one).
    pub fn read_unwritten(&self, offset: u64, limit: u64, max_bytes: usize) -> Vec<Bytes> {
        debug_assert!(
            offset >= self.written_offset,
            "written data is read from its file"
        );
        let mut out = Vec::new();
        let mut total = 0;
        for b in self.in_flight.iter().chain(&self.pending) {
            let h = crate::batch::BatchHeader::decode(b).expect("appended batches were validated");
            let next = h.next_offset();
            if next <= offset {
                continue;
            }
            if out.is_empty() && h.base_offset > offset {
                // Not held here (cut by a truncation): no answer rather than a gap.
                break;
            }
            if next > limit || (!out.is_empty() && total + b.len() > max_bytes) {
                break;
            }
            total += b.len();
            out.push(b.clone());
        }
        out
    }

    pub fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    /// Files with writes not yet covered by an fdatasync.
    pub fn take_unsynced(&mut self) -> Vec<(Rc<DirectFile>, Rc<Path>)> {
        self.segments
            .iter_mut()
            .filter_map(Segment::take_unsynced)
            .collect()
    }

    /// The directory syncs of rolled-to segments not yet awaited: an fsync awaits them with
    /// the files' fdatasyncs.
    pub fn take_dir_syncs(&mut self) -> Vec<DirSync> {
        self.segments
            .iter_mut()
            .filter_map(Segment::take_dir_sync)
            .collect()
    }

    /// Marks the log failed: appends are refused from now on, reads continue.
    pub fn fail(&mut self, why: String) {
        log::error!("{}: storage failed: {why}", self.dir.display());
        self.failed.get_or_insert(Failure {
            why,
            retriable: true,
        });
    }

    /// Marks the log failed for a reason reopening cannot cure (acknowledged data missing).
    pub fn fail_for_good(&mut self, why: String) {
        log::error!("{}: storage failed for good: {why}", self.dir.display());
        self.failed = Some(Failure {
            why,
            retriable: false,
        });
    }

    /// A reader for the segment holding `offset`, if it is stored.
    pub fn reader_for_offset(&self, offset: u64) -> Result<SegmentReader, LogError> {
        if let Some(h) = self.hole_at(offset) {
            return Err(LogError::Missing {
                from: h.from,
                to: h.to,
                why: h.why.clone(),
            });
        }
        let i = self.segments.partition_point(|s| s.base_offset <= offset);
        if i == 0 || offset >= self.next_offset {
            return Err(LogError::OffsetOutOfRange {
                offset,
                start: self.log_start_offset(),
                end: self.next_offset,
            });
        }
        Ok(self.segments[i - 1].reader_for_offset(offset))
    }

    /// A reader for the first segment that may hold a record at or after `ts`.
    pub fn reader_for_timestamp(&self, ts: i64) -> Option<SegmentReader> {
        self.segments
            .iter()
            .find_map(|s| s.reader_for_timestamp(ts))
    }

    /// The largest record timestamp of the log, with a reader for the first segment holding
    /// it (positioned by its time index); `None` for a log without records. Each segment's
    /// max timestamp is kept in its index (and its trailer once closed), so this reads no file.
    pub fn reader_for_max_timestamp(&self) -> Option<(i64, SegmentReader)> {
        // The first segment of the largest: Kafka answers the first record with the max.
        let top = self
            .segments
            .iter()
            .fold(None::<&Segment>, |top, s| match top {
                Some(t) if t.max_timestamp() >= s.max_timestamp() => Some(t),
                _ => Some(s),
            })?;
        let ts = top.max_timestamp();
        if ts == i64::MIN {
            return None;
        }
        top.reader_for_timestamp(ts).map(|r| (ts, r))
    }

    /// The closed segments, oldest first (the active one never is compacted).
    pub fn closed_segments(&self) -> Vec<ClosedSegment> {
        self.segments[..self.segments.len().saturating_sub(1)]
            .iter()
            .filter(|s| s.is_closed())
            .map(|s| ClosedSegment {
                base_offset: s.base_offset,
                next_offset: s.next_offset(),
                path: s.path().to_path_buf(),
                size: s.size(),
                max_timestamp: s.max_timestamp(),
            })
            .collect()
    }

    /// The base of the segment after the one starting at `base`, if any.
    pub fn segment_after(&self, base: u64) -> Option<u64> {
        let i = self.segments.partition_point(|s| s.base_offset <= base);
        self.segments.get(i).map(|s| s.base_offset)
    }

    /// Starts swapping compacted files in for the closed segment at `base`: `false` when it is
    /// gone (retention, truncation) or the log failed, and the cleaning is given up.
    pub fn begin_swap(&mut self, base: u64) -> bool {
        let present = self.segments[..self.segments.len().saturating_sub(1)]
            .iter()
            .any(|s| s.base_offset == base && s.is_closed());
        if !present || self.failed.is_some() || self.swapping.is_some() {
            return false;
        }
        self.swapping = Some(base);
        true
    }

    /// Ends a swap: `cleaned` (the segment reopened from its new files) replaces the old one,
    /// whose readers keep reading the old file until they finish; `None` if the swap failed.
    pub fn end_swap(&mut self, cleaned: Option<Segment>) {
        let Some(base) = self.swapping.take() else {
            return;
        };
        if let Some(seg) = cleaned {
            assert_eq!(seg.base_offset, base, "a swap replaces its own segment");
            if let Some(old) = self.segments.iter_mut().find(|s| s.base_offset == base) {
                assert_eq!(
                    old.next_offset(),
                    seg.next_offset(),
                    "a compacted segment keeps its offsets"
                );
                *old = seg;
            }
        }
    }
}

const LOG_START_FILE: &str = "log-start-offset";
/// The last high watermark checkpointed: offsets below it were acknowledged, so recovery must
/// find them (and never hand them out again).
const HIGH_WATERMARK_FILE: &str = "high-watermark";

/// An offset checkpoint (u64 + CRC32C), if present and intact. A torn one is ignored with a
/// warning: the segments still bound it.
fn read_offset_file(dir: &Path, name: &str) -> Option<u64> {
    let bytes = std::fs::read(dir.join(name)).ok()?;
    if bytes.len() != 12 || crc32c::crc32c(&bytes[..8]).to_le_bytes() != bytes[8..12] {
        log::warn!("{}: ignoring a damaged {name}", dir.display());
        return None;
    }
    Some(u64::from_le_bytes(bytes[..8].try_into().ok()?))
}

/// Replaces an offset checkpoint atomically (see [`replace_file`]).
fn write_offset_file(dir: &Path, name: &str, offset: u64) -> Result<(), LogError> {
    replace_file(dir, name, &offset_file_bytes(offset))
}

/// An offset checkpoint's bytes: the offset, then its CRC32C.
fn offset_file_bytes(offset: u64) -> Vec<u8> {
    let mut bytes = offset.to_le_bytes().to_vec();
    bytes.extend_from_slice(&crc32c::crc32c(&offset.to_le_bytes()).to_le_bytes());
    bytes
}

/// Replaces `dir/name` atomically: write a temporary file, sync, rename, sync the directory.
/// A temporary file left by a failure is removed: on a full disk it would hold blocks the
/// broker needs back. Blocking: run it off the shard thread where it is frequent.
pub(crate) fn replace_file(dir: &Path, name: &str, bytes: &[u8]) -> Result<(), LogError> {
    let tmp = dir.join(format!("{name}.tmp"));
    let renamed = super::segment::write_synced(&tmp, bytes)
        .and_then(|()| std::fs::rename(&tmp, dir.join(name)).map_err(|e| LogError::io(&tmp, e)));
    if let Err(e) = renamed {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    super::segment::sync_dir(dir)
}

/// [`replace_file`] for each `(directory, name, bytes)`, on up to `threads` threads at once.
/// Each file costs an fdatasync and a directory fsync, each a device flush that waits for
/// what the device's cache holds, and flushes asked together are served together: one at a
/// time, a checkpoint of 1,000 partitions took up to 1.8 s on the bench VM under a full
/// produce (RESULTS.md, 2026-12-05 fourteenth session). Blocking; run as one job of the
/// blocking pool, so that no other job of the pool replaces a file beside it meanwhile.
/// Returns each file's result, in order.
pub(crate) fn replace_files(
    files: &[(PathBuf, &str, Vec<u8>)],
    threads: usize,
) -> Vec<Result<(), LogError>> {
    let threads = threads.clamp(1, files.len().max(1));
    let write_share = |k: usize| -> Vec<(usize, Result<(), LogError>)> {
        (k..files.len())
            .step_by(threads)
            .map(|i| (i, replace_file(&files[i].0, files[i].1, &files[i].2)))
            .collect()
    };
    let mut results: Vec<(usize, Result<(), LogError>)> = if threads == 1 {
        write_share(0)
    } else {
        std::thread::scope(|s| {
            let write_share = &write_share;
            let spawned: Vec<_> = (1..threads)
                .map(|k| {
                    std::thread::Builder::new()
                        .name("rill-replace-files".into())
                        .spawn_scoped(s, move || write_share(k))
                        .map_err(|_| k)
                })
                .collect();
            let mut all = write_share(0);
            for t in spawned {
                // A share whose thread could not start (a thread limit) is written here.
                let share = match t {
                    Ok(handle) => handle
                        .join()
                        .unwrap_or_else(|p| std::panic::resume_unwind(p)),
                    Err(k) => write_share(k),
                };
                all.extend(share);
            }
            all
        })
    };
    results.sort_unstable_by_key(|(i, _)| *i);
    results.into_iter().map(|(_, r)| r).collect()
}

/// How far compaction has cleaned the partition: offsets below it hold at most one record per
/// key the last cleaning mapped (Kafka's cleaner offset checkpoint).
const CLEANER_OFFSET_FILE: &str = "cleaner-offset";

pub fn read_cleaner_offset(dir: &Path) -> Option<u64> {
    read_offset_file(dir, CLEANER_OFFSET_FILE)
}

/// Blocking (a synced file): on the executor's blocking pool.
pub fn write_cleaner_offset(dir: &Path, offset: u64) -> Result<(), LogError> {
    write_offset_file(dir, CLEANER_OFFSET_FILE, offset)
}

/// Records that offsets below `high_watermark` were acknowledged (see [`PartitionLog::open`]).
pub fn write_high_watermark(dir: &Path, high_watermark: u64) -> Result<(), LogError> {
    write_offset_file(dir, HIGH_WATERMARK_FILE, high_watermark)
}

/// [`write_high_watermark`] for each `(partition directory, high watermark)`, on up to
/// `threads` threads at once (see [`replace_files`]). Blocking. Returns each entry's result,
/// in order.
pub fn write_high_watermarks(
    entries: Vec<(PathBuf, u64)>,
    threads: usize,
) -> Vec<Result<(), LogError>> {
    let files: Vec<(PathBuf, &str, Vec<u8>)> = entries
        .into_iter()
        .map(|(dir, hw)| (dir, HIGH_WATERMARK_FILE, offset_file_bytes(hw)))
        .collect();
    replace_files(&files, threads)
}

/// For a partition that takes no more writes: when every record of its active segment is past
/// `retention`, closes it and starts an empty, unpreallocated one at the log end, so that
/// retention can delete all the data. Does nothing while a write is in flight.
pub async fn retire_if_expired(
    cell: &RefCell<PartitionLog>,
    now_ms: i64,
    retention: Option<std::time::Duration>,
) -> Result<(), LogError> {
    let Some(retention) = retention else {
        return Ok(());
    };
    let (file, path, len, dir, cfg, base) = {
        let log = cell.borrow();
        let active = log.segments.last().expect("a log has an active segment");
        let idle = !log.has_pending() && log.written_offset == log.next_offset;
        if log.failed.is_some() {
            // A failed log's files are left exactly as they are.
            return Ok(());
        }
        let expired = active.max_timestamp() < now_ms.saturating_sub(retention.as_millis() as i64);
        if active.is_empty() || !idle || !expired {
            return Ok(());
        }
        let (file, path, len) = active.begin_close();
        let mut cfg = log.cfg.clone();
        cfg.preallocate = false;
        (file, path, len, log.dir.clone(), cfg, active.next_offset())
    };
    cut_and_sync(file, path, len).await?;
    let (index, dir_sync) = {
        let mut log = cell.borrow_mut();
        let active = log.segments.last_mut().expect("active");
        (active.finish_close(true), active.take_dir_sync())
    };
    if let Some(d) = dir_sync {
        d.await?;
    }
    index.write().await?;
    let seg = Segment::create(&dir, base, &cfg).await?;
    cell.borrow_mut().segments.push(seg);
    Ok(())
}

/// Deletes detached segments' files and makes the deletions durable.
/// On the executor's blocking pool: unlinking a large file can take milliseconds. Their
/// blocks are freed behind, in steps (`file_removal`).
pub async fn remove_segments(dir: &Path, segments: Vec<Segment>) -> Result<(), LogError> {
    if segments.is_empty() {
        return Ok(());
    }
    let paths: Vec<PathBuf> = segments.iter().flat_map(Segment::file_paths).collect();
    drop(segments);
    let dir = dir.to_path_buf();
    rill_shards::rt::spawn_blocking(move || {
        for p in &paths {
            match super::file_removal::remove_file(p) {
                Ok(()) => {}
                // A closed segment may have no index files (they are rebuilt when missing).
                Err(e)
                    if e.kind() == std::io::ErrorKind::NotFound
                        && p.extension().is_some_and(|x| x != "log") => {}
                Err(e) => return Err(LogError::io(p, e)),
            }
        }
        super::segment::sync_dir(&dir)
    })
    .await
}

/// Writes every pending batch of the partition to its segments, rolling as they fill.
/// Returns the new written offset, or `None` when nothing was pending.
pub async fn flush(cell: &RefCell<PartitionLog>) -> Result<Option<Flushed>, LogError> {
    let batches = {
        let mut log = cell.borrow_mut();
        if let Some(f) = &log.failed {
            return Err(LogError::Failed(f.why.clone()));
        }
        if log.pending.is_empty() {
            return Ok(None);
        }
        let batches = std::mem::take(&mut log.pending);
        log.in_flight.clone_from(&batches);
        batches
    };
    match write_batches(cell, &batches).await {
        Ok(next) => {
            let mut log = cell.borrow_mut();
            // On a failure they stay: acknowledged under write caching, readable till a reopen.
            log.in_flight.clear();
            let written: usize = batches.iter().map(Bytes::len).sum();
            log.unwritten -= written;
            assert!(next >= log.written_offset, "written offset must grow");
            log.written_offset = next;
            Ok(Some(log.end_position()))
        }
        Err(e) => {
            cell.borrow_mut().fail(e.to_string());
            Err(e)
        }
    }
}

/// A segment roll taking this long is logged with its parts (the group-commit round waits for
/// it).
const SLOW_ROLL: std::time::Duration = std::time::Duration::from_millis(20);

async fn write_batches(cell: &RefCell<PartitionLog>, batches: &[Bytes]) -> Result<u64, LogError> {
    let mut i = 0;
    let mut next = cell.borrow().written_offset;
    while i < batches.len() {
        let roll = {
            let log = cell.borrow();
            let active = log.segments.last().expect("a log has an active segment");
            let full = active.size() + batches[i].len() as u64 > log.cfg.segment_bytes;
            let old = log.cfg.segment_age.is_some_and(|a| active.age() >= a);
            !active.is_empty() && (full || old)
        };
        if roll {
            let started = std::time::Instant::now();
            let (file, path, len) = cell.borrow().segments.last().expect("active").begin_close();
            // Cut, not synced: the round does not wait for the old segment's fdatasync (100-260
            // ms on a disk busy with writes, RESULTS.md 2026-12-05), as Kafka flushes a rolled
            // segment behind. Its writes stay unsynced: an fsync (`always`: this round's,
            // `interval`: the next) covers them with the new segment's. With `never` nothing
            // is synced anyway; a crash before the cut is durable leaves zeros after the old
            // segment's data, which opening it cuts again.
            cut(&file, &path, len).await?;
            let cut_took = started.elapsed();
            let (dir, cfg, base, index, dir_sync) = {
                let mut log = cell.borrow_mut();
                let active = log.segments.last_mut().expect("active");
                let base = active.next_offset();
                let index = active.finish_close(false);
                // Its own roll's directory sync, if no fsync awaited it (`never`): long done by
                // now, and its failure fails the log here rather than going unseen.
                let dir_sync = active.take_dir_sync();
                (log.dir.clone(), log.cfg.clone(), base, index, dir_sync)
            };
            if let Some(d) = dir_sync {
                d.await?;
            }
            index.write().await?;
            let indexed = started.elapsed();
            let seg = Segment::create_rolled(&dir, base, &cfg).await?;
            cell.borrow_mut().segments.push(seg);
            // The round waits for the roll: a slow one is every waiting request's latency.
            if started.elapsed() >= SLOW_ROLL {
                log::info!(
                    "{}: rolling to segment {base} took {} ms (old segment cut {} ms, its \
                     indexes written {} ms, new segment created {} ms)",
                    dir.display(),
                    started.elapsed().as_millis(),
                    cut_took.as_millis(),
                    (indexed - cut_took).as_millis(),
                    (started.elapsed() - indexed).as_millis()
                );
            }
        }
        let (job, j) = {
            let mut log = cell.borrow_mut();
            let limit = log.cfg.segment_bytes;
            let (piece, in_flight) = (log.cfg.write_bytes, log.cfg.writes_in_flight);
            // One job holds what its pieces in flight write at once (at least one batch).
            let job_bytes = piece.saturating_mul(in_flight.max(1));
            let active = log.segments.last_mut().expect("active");
            let mut size = active.size();
            let mut j = i;
            let mut chunk = 0usize;
            while j < batches.len()
                && (j == i
                    || (size + batches[j].len() as u64 <= limit
                        && chunk + batches[j].len() <= job_bytes))
            {
                size += batches[j].len() as u64;
                chunk += batches[j].len();
                j += 1;
            }
            (active.prepare_write(&batches[i..j], piece, in_flight), j)
        };
        let new_size = job.run().await?;
        let mut log = cell.borrow_mut();
        let active = log.segments.last_mut().expect("active");
        active.complete_write(new_size);
        next = active.next_offset();
        i = j;
    }
    Ok(next)
}

/// The last checkpointed high watermark, if any (a replicated partition starts from it).
pub fn read_high_watermark(dir: &Path) -> Option<u64> {
    read_offset_file(dir, HIGH_WATERMARK_FILE)
}

/// Cuts a follower's log to end at `offset` (a batch boundary: where the leader's and its
/// common prefix ends) and opens it again. The files are cut on the blocking pool: later
/// segments removed, the one holding `offset` cut at that batch (its indexes go: as the
/// active segment it is scanned on open). The caller holds no pending writes.
pub async fn truncate_tail(
    dir: PathBuf,
    cfg: SegmentConfig,
    offset: u64,
) -> Result<PartitionLog, LogError> {
    let d = dir.clone();
    rill_shards::rt::spawn_blocking(move || cut_tail_files(&d, offset)).await?;
    reopen_ending_at(dir, cfg, offset, "cut to").await
}

/// Opens a log whose files were just changed to end at `offset`; anything else (or a failed
/// log) is an error naming `what` was done.
async fn reopen_ending_at(
    dir: PathBuf,
    cfg: SegmentConfig,
    offset: u64,
    what: &str,
) -> Result<PartitionLog, LogError> {
    let (log, _) = PartitionLog::open(dir.clone(), cfg).await?;
    if log.next_offset() != offset || log.failure().is_some() {
        return Err(LogError::Failed(format!(
            "{}: {what} {offset}, the log reopened at {}..{}{}",
            dir.display(),
            log.log_start_offset(),
            log.next_offset(),
            log.failure().map(|f| format!(" ({f})")).unwrap_or_default()
        )));
    }
    Ok(log)
}

/// Drops every segment of a follower's log and opens it again, empty, starting at `offset`
/// (the leader's log start, past this log's end: what lay between is deleted there). The new
/// start is made durable before any file goes: a crash in between reopens the old files ending
/// below it, and the follower starts over again. The caller holds no pending writes.
pub async fn start_empty_at(
    dir: PathBuf,
    cfg: SegmentConfig,
    offset: u64,
) -> Result<PartitionLog, LogError> {
    let d = dir.clone();
    rill_shards::rt::spawn_blocking(move || remove_every_segment(&d, offset)).await?;
    let log = reopen_ending_at(dir, cfg, offset, "started over at").await?;
    if log.log_start_offset() != offset {
        return Err(LogError::Failed(format!(
            "{}: started over at {offset}, the log reopened starting at {}",
            log.dir().display(),
            log.log_start_offset()
        )));
    }
    Ok(log)
}

fn remove_every_segment(dir: &Path, start: u64) -> Result<(), LogError> {
    write_offset_file(dir, LOG_START_FILE, start)?;
    for entry in std::fs::read_dir(dir).map_err(|e| LogError::io(dir, e))? {
        let entry = entry.map_err(|e| LogError::io(dir, e))?;
        if entry
            .file_name()
            .to_str()
            .and_then(parse_segment_file_name)
            .is_none()
        {
            continue;
        }
        remove_segment_files(&entry.path())?;
    }
    super::segment::sync_dir(dir)
}

/// Removes a segment file and its index files (those may be missing).
fn remove_segment_files(segment: &Path) -> Result<(), LogError> {
    let (idx, tidx) = super::segment::index_paths(segment);
    for f in [segment.to_path_buf(), idx, tidx] {
        match super::file_removal::remove_file(&f) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(LogError::io(&f, e)),
        }
    }
    Ok(())
}

fn cut_tail_files(dir: &Path, offset: u64) -> Result<(), LogError> {
    use std::os::unix::fs::FileExt;
    let mut bases = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(|e| LogError::io(dir, e))? {
        let entry = entry.map_err(|e| LogError::io(dir, e))?;
        if let Some(base) = entry.file_name().to_str().and_then(parse_segment_file_name) {
            bases.push(base);
        }
    }
    bases.sort_unstable();
    let Some(&keep) = bases.iter().rev().find(|b| **b <= offset) else {
        return Err(LogError::Failed(format!(
            "{}: no segment holds offset {offset}",
            dir.display()
        )));
    };
    let path = dir.join(super::segment::segment_file_name(keep));
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .map_err(|e| LogError::io(&path, e))?;
    let len = file.metadata().map_err(|e| LogError::io(&path, e))?.len();
    // Walk the batch headers from the segment's start to the batch at `offset`.
    let (mut pos, mut next) = (0u64, keep);
    let mut head = [0u8; HEADER_LEN];
    while next < offset {
        let corrupt = |what: String| LogError::Corrupt {
            path: path.clone(),
            position: pos,
            what,
        };
        if pos + HEADER_LEN as u64 > len {
            return Err(corrupt(format!("the segment ends before offset {offset}")));
        }
        file.read_exact_at(&mut head, pos)
            .map_err(|e| LogError::io(&path, e))?;
        let h = crate::batch::BatchHeader::decode(&head)
            .ok_or_else(|| corrupt("not a batch header".into()))?;
        if h.base_offset != next || h.length < HEADER_LEN as u32 {
            return Err(corrupt(format!(
                "a batch at {} where {next} was due",
                h.base_offset
            )));
        }
        if h.next_offset() > offset {
            return Err(corrupt(format!("offset {offset} is inside a batch")));
        }
        pos += u64::from(h.length);
        next = h.next_offset();
    }
    for &base in bases.iter().filter(|b| **b > keep) {
        remove_segment_files(&dir.join(super::segment::segment_file_name(base)))?;
    }
    file.set_len(pos).map_err(|e| LogError::io(&path, e))?;
    file.sync_all().map_err(|e| LogError::io(&path, e))?;
    let (idx, tidx) = super::segment::index_paths(&path);
    for f in [idx, tidx] {
        let _ = std::fs::remove_file(f);
    }
    super::segment::sync_dir(dir)
}
