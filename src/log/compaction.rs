//! Log compaction (`cleanup.policy=compact`): the file work of rewriting one closed segment
//! keeping the latest record of each key, and the crash-safe swap of the rewritten files.
//!
//! Everything here is blocking `std::fs` work, run on the executor's blocking pool by the
//! partition's cleaner (`partition::cleaner`), never on a shard thread.
//!
//! Records keep their offsets. A batch's records have contiguous offsets (base + index), so a
//! stored batch loses records by being rebuilt as one batch per run of surviving contiguous
//! offsets (in the current format, stamped with its first offset and the source batch's
//! append time): offsets have gaps between batches, never inside one.
//!
//! **Swap** of a cleaned segment `<base>.log` (and its `.index`, `.timeindex`):
//! 1. the cleaned files are written as `<name>.cleaned` and fdatasynced;
//! 2. the two index files are renamed to `<name>.swap`, the directory synced;
//! 3. `<base>.log.cleaned` is renamed to `<base>.log.swap`, the directory synced: the commit
//!    point (every cleaned file is durable before it);
//! 4. each `.swap` is renamed over its original, the directory synced.
//!
//! At open ([`finish_or_undo_swaps`]) a `<base>.log.swap` is finished (step 4); without one,
//! any `.cleaned` or `.swap` file is removed and the original segment stays. Either way a
//! segment is wholly the old or wholly the new one, and the new one dropped only records whose
//! key has a later record elsewhere in the log.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use rkyv::util::AlignedVec;

use super::error::LogError;
use super::index::{SegmentExtent, SparseIndex};
use super::segment::{index_paths, sync_dir};
use crate::batch::{
    BatchBuilder, BatchHeader, BatchView, RecordView, FLAG_CONTROL, FLAG_TRANSACTIONAL, HEADER_LEN,
};

/// Memory a key takes in a [`KeyMap`] beside its bytes (hash table slot, box, offset).
pub const KEY_ENTRY_OVERHEAD: usize = 48;

/// No stored batch is this large; a length past it is damage, never an allocation.
const MAX_BATCH_BYTES: usize = 1 << 30;

/// Suffix of a cleaned file being written, and of one staged for the swap.
const CLEANED: &str = "cleaned";
const SWAP: &str = "swap";

/// The latest offset of each key, over a range of segments, in bounded memory
/// (`--log-cleaner-dedupe-buffer-bytes`): keys are kept whole, so two keys never collide.
#[derive(Debug, Default)]
pub struct KeyMap {
    latest: HashMap<Box<[u8]>, u64>,
    used: usize,
    capacity: usize,
}

impl KeyMap {
    pub fn new(capacity_bytes: usize) -> KeyMap {
        KeyMap {
            latest: HashMap::new(),
            used: 0,
            capacity: capacity_bytes,
        }
    }

    /// Bytes the map accounts for.
    pub fn used(&self) -> usize {
        self.used
    }

    pub fn len(&self) -> usize {
        self.latest.len()
    }

    pub fn is_empty(&self) -> bool {
        self.latest.is_empty()
    }

    /// The latest offset recorded for `key`.
    pub fn latest(&self, key: &[u8]) -> Option<u64> {
        self.latest.get(key).copied()
    }

    /// Adds the keys of one segment (`keys`: key -> its latest offset there, all above every
    /// offset already mapped) if they fit; returns whether they did (nothing is added if not).
    pub fn add_segment(&mut self, keys: HashMap<Box<[u8]>, u64>) -> bool {
        let new: usize = keys
            .keys()
            .filter(|k| !self.latest.contains_key(*k))
            .map(|k| k.len() + KEY_ENTRY_OVERHEAD)
            .sum();
        if self.used + new > self.capacity {
            return false;
        }
        self.used += new;
        for (k, offset) in keys {
            let slot = self.latest.entry(k).or_insert(offset);
            *slot = (*slot).max(offset);
        }
        true
    }
}

/// Reads the batches of a closed segment file in order, each fully validated (both CRCs,
/// rkyv) into one reused 16-aligned buffer.
struct FileBatches {
    path: PathBuf,
    file: BufReader<File>,
    position: u64,
    len: u64,
    buf: AlignedVec<16>,
}

impl FileBatches {
    fn open(path: &Path) -> Result<FileBatches, LogError> {
        let f = File::open(path).map_err(|e| LogError::io(path, e))?;
        let len = f.metadata().map_err(|e| LogError::io(path, e))?.len();
        Ok(FileBatches {
            path: path.to_path_buf(),
            file: BufReader::with_capacity(1 << 20, f),
            position: 0,
            len,
            buf: AlignedVec::new(),
        })
    }

    fn corrupt(&self, what: String) -> LogError {
        LogError::Corrupt {
            path: self.path.clone(),
            position: self.position,
            what,
        }
    }

    /// The next batch and its position, or `None` at the end of the file. A closed segment
    /// is whole batches to its last byte: anything else is damage, and compaction stops.
    fn next_batch(&mut self) -> Result<Option<(u64, BatchView<'_>)>, LogError> {
        if self.position >= self.len {
            return Ok(None);
        }
        self.buf.clear();
        self.buf.resize(HEADER_LEN, 0);
        let path = self.path.clone();
        self.file
            .read_exact(&mut self.buf[..])
            .map_err(|e| LogError::io(&path, e))?;
        let Some(h) = BatchHeader::decode(&self.buf) else {
            return Err(self.corrupt("short header".into()));
        };
        let length = h.length as usize;
        if !(HEADER_LEN..=MAX_BATCH_BYTES).contains(&length)
            || self.position + length as u64 > self.len
        {
            return Err(self.corrupt(format!("a batch claims {length} bytes")));
        }
        self.buf.resize(length, 0);
        self.file
            .read_exact(&mut self.buf[HEADER_LEN..])
            .map_err(|e| LogError::io(&path, e))?;
        let at = self.position;
        self.position += length as u64;
        match BatchView::validate(&self.buf) {
            Ok(v) => Ok(Some((at, v))),
            Err(e) => Err(LogError::Corrupt {
                path,
                position: at,
                what: e.to_string(),
            }),
        }
    }
}

/// A record or batch of the segment at `path` that does not decode (position `at`).
fn corrupt_at(path: &Path, at: u64) -> impl Fn(crate::batch::BatchError) -> LogError + '_ {
    move |e| LogError::Corrupt {
        path: path.to_path_buf(),
        position: at,
        what: e.to_string(),
    }
}

/// The keys of one segment with the latest offset of each there.
pub fn segment_keys(path: &Path) -> Result<HashMap<Box<[u8]>, u64>, LogError> {
    let mut keys: HashMap<Box<[u8]>, u64> = HashMap::new();
    let mut batches = FileBatches::open(path)?;
    while let Some((at, b)) = batches.next_batch()? {
        if kept_whole(&b) {
            continue;
        }
        for r in b.records().map_err(corrupt_at(path, at))? {
            // Produce refuses keyless records on compacted topics; older ones are kept.
            if let Some(k) = r.key() {
                match keys.get_mut(k) {
                    Some(o) => *o = r.offset,
                    None => {
                        keys.insert(k.into(), r.offset);
                    }
                }
            }
        }
    }
    Ok(keys)
}

/// What decides a record's fate in a cleaning.
#[derive(Debug, Clone, Copy)]
pub struct CleanRules {
    /// A tombstone that is its key's latest record goes once its batch was appended before
    /// this (now - `delete.retention.ms`); until then consumers can see the deletion.
    pub tombstones_before_ms: i64,
    pub index_interval_bytes: u32,
}

/// What rewriting one segment did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Cleaned {
    pub kept: u64,
    pub dropped: u64,
    pub bytes_before: u64,
    pub bytes_after: u64,
}

/// Transaction markers and transactional batches are kept whole and their keys are not
/// mapped: a marker's key is Kafka's control record bytes, not a user key, and a
/// transactional record may belong to an aborted transaction, which must not displace the
/// committed value of its key (Kafka's cleaner tracks aborted transactions instead; this
/// keeps them all, see ARCHITECTURE.md).
fn kept_whole(b: &BatchView<'_>) -> bool {
    b.header().flags & (FLAG_CONTROL | FLAG_TRANSACTIONAL) != 0
}

/// Whether compaction keeps `record` (of a batch appended at `append_ms`).
fn keeps(map: &KeyMap, rules: &CleanRules, record: &RecordView<'_>, append_ms: i64) -> bool {
    let Some(key) = record.key() else {
        return true;
    };
    match map.latest(key) {
        Some(latest) if latest > record.offset => false,
        // Its key's latest record (or one the map does not cover): kept, unless it is a
        // tombstone past delete.retention.ms.
        _ => !(record.value().is_none() && append_ms < rules.tombstones_before_ms),
    }
}

fn suffixed(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_os_string();
    name.push(".");
    name.push(suffix);
    PathBuf::from(name)
}

/// Rewrites the closed segment at `path` (offsets `base_offset..next_offset`) keeping what
/// [`keeps`] keeps, as `<name>.cleaned` files (data and both indexes, each fdatasynced; the
/// index trailer keeps `next_offset`, so the segments still chain). `None`, with nothing
/// written, when every record stays.
pub fn clean_segment(
    path: &Path,
    base_offset: u64,
    next_offset: u64,
    map: &KeyMap,
    rules: &CleanRules,
) -> Result<Option<Cleaned>, LogError> {
    // A read pass first: a segment that loses nothing is not rewritten.
    let mut dropped = 0u64;
    let mut batches = FileBatches::open(path)?;
    let bytes_before = batches.len;
    while let Some((at, b)) = batches.next_batch()? {
        if kept_whole(&b) {
            continue;
        }
        let append_ms = b.header().append_time_ms;
        for r in b.records().map_err(corrupt_at(path, at))? {
            if !keeps(map, rules, &r, append_ms) {
                dropped += 1;
            }
        }
    }
    if dropped == 0 {
        return Ok(None);
    }
    let out_path = suffixed(path, CLEANED);
    let out = File::create(&out_path).map_err(|e| LogError::io(&out_path, e))?;
    let mut out = BufWriter::with_capacity(1 << 20, out);
    let mut index = SparseIndex::new(rules.index_interval_bytes);
    let mut position = 0u64;
    let mut kept = 0u64;
    let mut batches = FileBatches::open(path)?;
    while let Some((at, b)) = batches.next_batch()? {
        if kept_whole(&b) {
            let h = b.header();
            index.on_batch(h.base_offset, position as u32, h.length, h.max_timestamp_ms);
            out.write_all(b.bytes())
                .map_err(|e| LogError::io(&out_path, e))?;
            position += b.len() as u64;
            kept += u64::from(h.record_count);
            continue;
        }
        let append_ms = b.header().append_time_ms;
        let corrupt = corrupt_at(path, at);
        // Runs of surviving records with contiguous offsets, each one new batch.
        let mut run: Option<(u64, BatchBuilder)> = None;
        let mut runs = Vec::new();
        let mut last = None;
        for r in b.records().map_err(&corrupt)? {
            if !keeps(map, rules, &r, append_ms) {
                continue;
            }
            if last.is_some_and(|l: u64| l + 1 != r.offset) {
                runs.extend(run.take());
            }
            let (_, builder) = run.get_or_insert_with(|| (r.offset, BatchBuilder::new()));
            let tags: Vec<String> = r.tags().map(str::to_string).collect();
            builder.push_record(r.timestamp_ms, r.key(), r.value(), r.headers(), &tags);
            last = Some(r.offset);
            kept += 1;
        }
        runs.extend(run);
        for (first, mut builder) in runs {
            let mut bytes = builder.build().map_err(&corrupt)?;
            crate::batch::stamp_batch(&mut bytes, first, append_ms);
            let view = BatchView::parse_header(&bytes).map_err(&corrupt)?;
            let h = view.header();
            index.on_batch(first, position as u32, h.length, h.max_timestamp_ms);
            out.write_all(&bytes)
                .map_err(|e| LogError::io(&out_path, e))?;
            position += bytes.len() as u64;
        }
    }
    let out = out
        .into_inner()
        .map_err(|e| LogError::io(&out_path, e.into_error()))?;
    out.sync_data().map_err(|e| LogError::io(&out_path, e))?;
    let (idx, tidx) = index.encode(
        base_offset,
        SegmentExtent {
            size: position,
            next_offset,
        },
    );
    let (idx_path, tidx_path) = index_paths(path);
    // The time index first: the offset index's trailer covers both.
    write_synced(&suffixed(&tidx_path, CLEANED), &tidx)?;
    write_synced(&suffixed(&idx_path, CLEANED), &idx)?;
    Ok(Some(Cleaned {
        kept,
        dropped,
        bytes_before,
        bytes_after: position,
    }))
}

fn write_synced(path: &Path, bytes: &[u8]) -> Result<(), LogError> {
    let mut f = File::create(path).map_err(|e| LogError::io(path, e))?;
    f.write_all(bytes).map_err(|e| LogError::io(path, e))?;
    f.sync_data().map_err(|e| LogError::io(path, e))
}

fn rename(from: &Path, to: &Path) -> Result<(), LogError> {
    std::fs::rename(from, to).map_err(|e| LogError::io(from, e))
}

/// The steps of [`swap_in`], to stop after one in tests (a crash there).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum SwapStep {
    /// The index files are staged as `.swap`.
    IndexesStaged,
    /// `<base>.log.swap` exists: the swap will be finished at open.
    Committed,
    /// Every file is in place.
    Done,
}

/// Swaps the `.cleaned` files of the segment at `path` in (see the module doc), stopping
/// after `stop_after` (tests: a crash there).
pub fn swap_in(path: &Path, stop_after: SwapStep) -> Result<(), LogError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let (idx, tidx) = index_paths(path);
    for p in [&tidx, &idx] {
        rename(&suffixed(p, CLEANED), &suffixed(p, SWAP))?;
    }
    sync_dir(dir)?;
    if stop_after == SwapStep::IndexesStaged {
        return Ok(());
    }
    rename(&suffixed(path, CLEANED), &suffixed(path, SWAP))?;
    sync_dir(dir)?;
    if stop_after == SwapStep::Committed {
        return Ok(());
    }
    finish(path)?;
    sync_dir(dir)
}

/// Step 4: every `.swap` of the segment at `path` over its original; the data file last, so
/// a crash in between finds `<base>.log.swap` again and finishes.
fn finish(path: &Path) -> Result<(), LogError> {
    let (idx, tidx) = index_paths(path);
    for p in [&tidx, &idx] {
        let staged = suffixed(p, SWAP);
        if staged.exists() {
            rename(&staged, p)?;
        }
    }
    // The replaced segment's blocks are freed behind, in steps.
    let staged = suffixed(path, SWAP);
    super::file_removal::rename_over(&staged, path).map_err(|e| LogError::io(&staged, e))
}

/// Removes the `.cleaned` files of the segment at `path` (a cleaning given up).
pub fn discard_cleaned(path: &Path) {
    let (idx, tidx) = index_paths(path);
    for p in [path, &idx, &tidx] {
        let _ = super::file_removal::remove_file(&suffixed(p, CLEANED));
    }
}

/// At open: finishes every committed swap of the partition directory and removes what an
/// unfinished cleaning left (see the module doc). Returns how many swaps it finished.
pub fn finish_or_undo_swaps(dir: &Path) -> Result<usize, LogError> {
    let mut names = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(|e| LogError::io(dir, e))? {
        let entry = entry.map_err(|e| LogError::io(dir, e))?;
        if let Some(name) = entry.file_name().to_str() {
            names.push(name.to_string());
        }
    }
    let mut finished = 0;
    let mut touched = false;
    for name in &names {
        if let Some(log) = name.strip_suffix(&format!(".{SWAP}")) {
            if log.ends_with(".log") {
                finish(&dir.join(log))?;
                log::warn!(
                    "{}: finished a compaction swap cut short",
                    dir.join(log).display()
                );
                finished += 1;
                touched = true;
            }
        }
    }
    for name in &names {
        let leftover = name.ends_with(&format!(".{CLEANED}"))
            || (name.ends_with(&format!(".{SWAP}")) && !name.ends_with(&format!(".log.{SWAP}")));
        let path = dir.join(name);
        if leftover && path.exists() {
            super::file_removal::remove_file(&path).map_err(|e| LogError::io(&path, e))?;
            touched = true;
        }
    }
    if touched {
        sync_dir(dir)?;
    }
    Ok(finished)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One stored batch of `records` (key, value or `None` for a tombstone) from `base`,
    /// appended at `append_ms`.
    fn batch(base: u64, append_ms: i64, records: &[(&str, Option<&str>)]) -> Vec<u8> {
        let mut b = BatchBuilder::new();
        for (i, (k, v)) in records.iter().enumerate() {
            let no_headers: [(&str, Option<&[u8]>); 0] = [];
            b.push_record(
                1_000 + i as i64,
                Some(k.as_bytes()),
                v.map(str::as_bytes),
                no_headers,
                &[],
            );
        }
        let mut bytes = b.build().expect("batch");
        crate::batch::stamp_batch(&mut bytes, base, append_ms);
        bytes.to_vec()
    }

    type Rec = (u64, String, Option<String>);

    fn read(path: &Path) -> Vec<Rec> {
        let mut out = Vec::new();
        let mut batches = FileBatches::open(path).expect("open");
        while let Some((_, b)) = batches.next_batch().expect("whole batches") {
            for r in b.records().expect("records") {
                out.push((
                    r.offset,
                    String::from_utf8(r.key().unwrap().to_vec()).unwrap(),
                    r.value().map(|v| String::from_utf8(v.to_vec()).unwrap()),
                ));
            }
        }
        out
    }

    /// A partition directory with one closed segment at offset 100 (offsets 100..110) and
    /// a later one (110..113) that updates some of its keys.
    fn segments(dir: &Path) -> (PathBuf, PathBuf) {
        let first = dir.join(super::super::segment::segment_file_name(100));
        let mut data = batch(
            100,
            5,
            &[("a", Some("a1")), ("b", Some("b1")), ("c", Some("c1"))],
        );
        data.extend(batch(
            103,
            5,
            &[
                ("a", Some("a2")),
                ("d", None),
                ("e", Some("e1")),
                ("b", Some("b2")),
                ("f", None),
                ("c", Some("c2")),
                ("g", Some("g1")),
            ],
        ));
        std::fs::write(&first, &data).unwrap();
        let second = dir.join(super::super::segment::segment_file_name(110));
        std::fs::write(
            &second,
            batch(
                110,
                50,
                &[("a", Some("a3")), ("g", None), ("h", Some("h1"))],
            ),
        )
        .unwrap();
        (first, second)
    }

    fn map_of(paths: &[&Path], capacity: usize) -> (KeyMap, usize) {
        let mut map = KeyMap::new(capacity);
        let mut mapped = 0;
        for p in paths {
            if !map.add_segment(segment_keys(p).expect("keys")) {
                break;
            }
            mapped += 1;
        }
        (map, mapped)
    }

    #[test]
    fn transactional_and_control_batches_are_kept_whole_and_map_no_key() {
        use crate::batch::control::{ControlKind, ControlRecord};
        let dir = tempfile::tempdir().unwrap();
        let path = dir
            .path()
            .join(super::super::segment::segment_file_name(100));
        let mut data = batch(100, 5, &[("a", Some("a1")), ("b", Some("b1"))]);
        let mut txn = BatchBuilder::new().producer(5, 0, 0);
        txn.push_record(1_000, Some(b"a"), Some(b"a-aborted"), [], &[]);
        let mut txn = txn.build().unwrap();
        crate::batch::add_flags(&mut txn, FLAG_TRANSACTIONAL);
        crate::batch::stamp_batch(&mut txn, 102, 5);
        data.extend_from_slice(&txn);
        let marker = ControlRecord {
            kind: ControlKind::Abort,
            coordinator_epoch: 0,
        };
        let mut m = marker.batch(5, 0, 1_000).unwrap();
        crate::batch::stamp_batch(&mut m, 103, 5);
        data.extend_from_slice(&m);
        data.extend(batch(104, 5, &[("b", Some("b2"))]));
        std::fs::write(&path, &data).unwrap();
        let keys = segment_keys(&path).unwrap();
        assert_eq!(keys.len(), 2, "a and b only: {keys:?}");
        assert_eq!(keys.get(&b"a"[..]), Some(&100));
        let (map, _) = map_of(&[&path], 1 << 20);
        let rules = CleanRules {
            tombstones_before_ms: 0,
            index_interval_bytes: 64,
        };
        let c = clean_segment(&path, 100, 105, &map, &rules)
            .unwrap()
            .unwrap();
        assert_eq!((c.kept, c.dropped), (4, 1), "only b1 goes");
        swap_in(&path, SwapStep::Done).unwrap();
        let offsets: Vec<u64> = read(&path).iter().map(|r| r.0).collect();
        assert_eq!(offsets, vec![100, 102, 103, 104]);
        let mut batches = FileBatches::open(&path).unwrap();
        let mut flags = Vec::new();
        while let Some((_, b)) = batches.next_batch().unwrap() {
            flags.push((
                b.header().base_offset,
                b.header().flags,
                b.header().producer_id,
            ));
        }
        assert_eq!(
            flags,
            vec![
                (100, 0, -1),
                (102, FLAG_TRANSACTIONAL, 5),
                (103, FLAG_CONTROL | FLAG_TRANSACTIONAL, 5),
                (104, 0, -1)
            ]
        );
    }

    #[test]
    fn the_key_map_is_bounded_and_keeps_the_latest_offset() {
        let dir = tempfile::tempdir().unwrap();
        let (first, second) = segments(dir.path());
        let (map, mapped) = map_of(&[&first, &second], 1 << 20);
        assert_eq!(mapped, 2);
        assert_eq!(map.latest(b"a"), Some(110));
        assert_eq!(map.latest(b"c"), Some(108));
        assert_eq!(map.len(), 8);
        assert_eq!(map.used(), 8 * (1 + KEY_ENTRY_OVERHEAD));
        // Room for the first segment's 7 keys only: the second is not added at all.
        let (map, mapped) = map_of(&[&first, &second], 7 * (1 + KEY_ENTRY_OVERHEAD));
        assert_eq!(mapped, 1);
        assert_eq!(map.latest(b"a"), Some(103));
        assert_eq!(map.latest(b"h"), None);
    }

    #[test]
    fn cleaning_keeps_the_latest_record_per_key_with_its_offset_and_expired_tombstones_go() {
        let dir = tempfile::tempdir().unwrap();
        let (first, second) = segments(dir.path());
        let (map, _) = map_of(&[&first, &second], 1 << 20);
        let rules = CleanRules {
            tombstones_before_ms: 0,
            index_interval_bytes: 64,
        };
        let c = clean_segment(&first, 100, 110, &map, &rules)
            .expect("cleaned")
            .expect("something dropped");
        // a1 b1 c1 a2 go (later values here), g1 too (a tombstone of g follows at 111).
        assert_eq!((c.kept, c.dropped), (5, 5));
        swap_in(&first, SwapStep::Done).unwrap();
        let s = |v: &str| Some(v.to_string());
        assert_eq!(
            read(&first),
            vec![
                (104, "d".into(), None),
                (105, "e".into(), s("e1")),
                (106, "b".into(), s("b2")),
                (107, "f".into(), None),
                (108, "c".into(), s("c2")),
            ]
        );
        // The index trailer keeps the segment's offsets; readers find batches by it.
        let (idx, tidx) = index_paths(&first);
        let (index, extent) = SparseIndex::decode(
            100,
            64,
            &std::fs::read(idx).unwrap(),
            &std::fs::read(tidx).unwrap(),
        )
        .expect("index");
        assert_eq!(extent.next_offset, 110);
        assert_eq!(extent.size, std::fs::metadata(&first).unwrap().len());
        assert_eq!(index.entry_for_offset(100), None);
        assert_eq!(index.entry_for_offset(104).map(|e| e.1), Some(104));

        // Tombstones appended (at 5) before the horizon go; the second segment's (at 50)
        // would stay.
        let (map, _) = map_of(&[&first, &second], 1 << 20);
        let rules = CleanRules {
            tombstones_before_ms: 10,
            index_interval_bytes: 64,
        };
        clean_segment(&first, 100, 110, &map, &rules)
            .unwrap()
            .expect("tombstones dropped");
        swap_in(&first, SwapStep::Done).unwrap();
        let keys: Vec<u64> = read(&first).iter().map(|r| r.0).collect();
        assert_eq!(keys, vec![105, 106, 108]);
        let c = clean_segment(&second, 110, 113, &map, &rules).unwrap();
        assert_eq!(c, None, "nothing to drop: not rewritten");
        assert!(!suffixed(&second, CLEANED).exists());
    }

    #[test]
    fn a_swap_cut_short_is_finished_once_committed_and_undone_before() {
        for stop in [SwapStep::IndexesStaged, SwapStep::Committed] {
            let dir = tempfile::tempdir().unwrap();
            let (first, second) = segments(dir.path());
            let before = read(&first);
            let (map, _) = map_of(&[&first, &second], 1 << 20);
            let rules = CleanRules {
                tombstones_before_ms: 0,
                index_interval_bytes: 64,
            };
            clean_segment(&first, 100, 110, &map, &rules)
                .unwrap()
                .unwrap();
            swap_in(&first, stop).unwrap();
            // A crash here; the next open:
            let finished = finish_or_undo_swaps(dir.path()).unwrap();
            let after = read(&first);
            if stop == SwapStep::Committed {
                assert_eq!(finished, 1);
                assert_eq!(after.len(), 5, "the cleaned segment");
            } else {
                assert_eq!(finished, 0);
                assert_eq!(after, before, "the original segment");
            }
            // Either way the index matches the data file, and nothing else is left.
            let (idx, tidx) = index_paths(&first);
            let (_, extent) = SparseIndex::decode(
                100,
                64,
                &std::fs::read(&idx).unwrap_or_default(),
                &std::fs::read(&tidx).unwrap_or_default(),
            )
            .unwrap_or((
                SparseIndex::new(64),
                SegmentExtent {
                    size: std::fs::metadata(&first).unwrap().len(),
                    next_offset: 110,
                },
            ));
            assert_eq!(extent.size, std::fs::metadata(&first).unwrap().len());
            let mut names: Vec<String> = std::fs::read_dir(dir.path())
                .unwrap()
                .map(|e| e.unwrap().file_name().into_string().unwrap())
                .collect();
            names.sort();
            assert!(
                names
                    .iter()
                    .all(|n| !n.ends_with(".cleaned") && !n.ends_with(".swap")),
                "{stop:?}: {names:?}"
            );
            // Every key's latest value is readable in one of the two segments.
            let mut latest = HashMap::new();
            for (o, k, v) in read(&first).into_iter().chain(read(&second)) {
                latest.insert(k, (o, v));
            }
            assert_eq!(latest["a"], (110, Some("a3".to_string())));
            assert_eq!(latest["b"], (106, Some("b2".to_string())));
            assert_eq!(latest["c"], (108, Some("c2".to_string())));
        }
    }
}
