//! Durable raft storage for the controller, under `<data-dir>/controller/`.
//!
//! Two files:
//! - `raft.log`: a 12-byte header (`RILLRAFT`, format version u32 LE) then records
//!   `[payload len u32 LE][CRC32C of payload u32 LE][payload]`, payload = kind byte + protobuf.
//!   Kinds: an entry, a hard state, a conf state. Replay keeps the last hard state and conf state,
//!   and an entry at index `i` replaces every entry at `>= i` (raft's conflict truncation).
//! - `snapshot`: one record of the same framing holding a raft `Snapshot` whose data is the
//!   serde_json of the [`ClusterMetadata`](super::metadata::ClusterMetadata) at its index. It is
//!   replaced atomically (write a temp file, fsync, rename, fsync the directory).
//!
//! Compaction writes the snapshot first, then rewrites `raft.log` with the current hard state,
//! conf state and the entries after the snapshot (temp file + rename). A crash between the two
//! steps leaves entries already covered by the snapshot in the log; replay skips them.
//!
//! Crash safety: records are fsynced (`sync_data`) before [`LogStore::persist`] returns when asked
//! to sync, which is before raft is told the entries are persisted. A crash mid-write can only
//! damage the last write, so on open a bad record is a **torn tail**, cut off, only when it is
//! the last thing in the file: a short frame header, a payload running past the end of the file,
//! a CRC mismatch on a record ending exactly at the end of the file, or a bad record followed by
//! nothing but zeros (the file size reached the disk, the data did not). A bad record followed by
//! anything else is **corruption** (a flipped byte in the middle, say), and so is any bad record
//! after which a CRC-valid record starts at some later byte: open fails with an error naming the
//! file and the byte offset, and the file is left as it is. Cutting there would drop every
//! record after it, topics included, and the broker would then treat their data as unknown.
//! A record whose CRC matches but does not decode, a gap in entry indexes, a bad header, a bad
//! snapshot file (written atomically, so never torn), a snapshot without `raft.log`, and a
//! commit index past the last entry with no snapshot (a lost snapshot file) are corruption too.
//! After a failed write the store refuses further writes (a hole in the file would hide later
//! records); the controller thread opens it again, which cuts the torn tail (`mod.rs`).

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use protobuf::Message as PbMessage;
use raft::eraftpb::{ConfState, Entry, HardState, Snapshot};
use raft::{GetEntriesContext, RaftState, Storage, StorageError};

/// Name of the raft log file inside the controller directory.
pub const LOG_FILE: &str = "raft.log";
/// Name of the snapshot file inside the controller directory.
pub const SNAPSHOT_FILE: &str = "snapshot";

const MAGIC: &[u8; 8] = b"RILLRAFT";
const VERSION: u32 = 1;
const HEADER_LEN: usize = 12;
const FRAME_LEN: usize = 8;
const MAX_RECORD: usize = 256 << 20;

const KIND_ENTRY: u8 = 1;
const KIND_HARD_STATE: u8 = 2;
const KIND_CONF_STATE: u8 = 3;
const KIND_SNAPSHOT: u8 = 4;

/// A storage failure, naming the file.
#[derive(thiserror::Error, Debug, Clone, PartialEq)]
#[error("controller storage {}: {message}", path.display())]
pub struct StoreError {
    pub path: PathBuf,
    pub message: String,
}

impl StoreError {
    fn new(path: &Path, message: impl std::fmt::Display) -> Self {
        StoreError {
            path: path.to_path_buf(),
            message: message.to_string(),
        }
    }
}

/// Raft storage persisted to disk; implements [`raft::Storage`].
pub struct LogStore {
    dir: PathBuf,
    log_path: PathBuf,
    snap_path: PathBuf,
    file: File,
    hard_state: HardState,
    conf_state: ConfState,
    /// The latest snapshot (default: none, index 0).
    snapshot: Snapshot,
    /// Entries after the snapshot, contiguous: `entries[0].index == snapshot index + 1`.
    entries: Vec<Entry>,
    /// Bytes of torn tail dropped when this store was opened.
    truncated_bytes: u64,
    failed: bool,
}

fn header() -> [u8; HEADER_LEN] {
    let mut h = [0u8; HEADER_LEN];
    h[..8].copy_from_slice(MAGIC);
    h[8..].copy_from_slice(&VERSION.to_le_bytes());
    h
}

fn frame(kind: u8, body: &[u8], out: &mut Vec<u8>) {
    let len = body.len() + 1;
    let mut crc = crc32c::crc32c(&[kind]);
    crc = crc32c::crc32c_append(crc, body);
    out.extend_from_slice(&(len as u32).to_le_bytes());
    out.extend_from_slice(&crc.to_le_bytes());
    out.push(kind);
    out.extend_from_slice(body);
}

/// Parses the frame at the start of `buf`: `Some((payload, frame length))`, `None` if it is
/// short or its CRC does not match.
fn parse_frame(buf: &[u8]) -> Option<(&[u8], usize)> {
    if buf.len() < FRAME_LEN {
        return None;
    }
    let len = u32::from_le_bytes(buf[0..4].try_into().ok()?) as usize;
    let crc = u32::from_le_bytes(buf[4..8].try_into().ok()?);
    if len == 0 || len > MAX_RECORD || buf.len() - FRAME_LEN < len {
        return None;
    }
    let payload = &buf[FRAME_LEN..FRAME_LEN + len];
    (crc32c::crc32c(payload) == crc).then_some((payload, FRAME_LEN + len))
}

/// Whether a CRC-valid log record (entry, hard state or conf state) starts at `buf[0]`.
fn valid_record_at(buf: &[u8]) -> bool {
    // The kind byte is checked before the CRC: most offsets fail it for free.
    buf.get(FRAME_LEN)
        .is_some_and(|k| matches!(*k, KIND_ENTRY | KIND_HARD_STATE | KIND_CONF_STATE))
        && parse_frame(buf).is_some()
}

/// Decides what the bad frame at the start of `rest` (at byte `pos` of the log) is: `Ok` for a
/// torn tail that may be cut, `Err(why)` for corruption. A torn write only damages the last
/// record written, so the bad frame must be the last thing in the file.
fn classify_bad_frame(rest: &[u8], pos: usize) -> Result<&'static str, String> {
    if rest.len() < FRAME_LEN {
        return Ok("short record header");
    }
    // One flipped byte (in a length, a CRC or a payload) leaves every later record intact: any
    // of them, found at whatever byte it starts, proves the bad frame was not the last write.
    if let Some(q) = (1..rest.len()).find(|&q| valid_record_at(&rest[q..])) {
        return Err(format!(
            "corrupt record at byte {pos}: bad length or CRC, yet a valid record follows at \
             byte {}",
            pos + q
        ));
    }
    let len = u32::from_le_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
    if rest.iter().all(|&b| b == 0) {
        return Ok("zero-filled tail");
    }
    if len == 0 {
        return Err(format!(
            "corrupt record at byte {pos}: zero length, followed by non-zero bytes"
        ));
    }
    let end = FRAME_LEN.saturating_add(len);
    if len > MAX_RECORD || end > rest.len() {
        return Ok("record running past the end of the file");
    }
    if end == rest.len() {
        return Ok("bad CRC on the last record");
    }
    if rest[end..].iter().all(|&b| b == 0) {
        return Ok("bad CRC on the last record, zeros after it");
    }
    Err(format!(
        "corrupt record at byte {pos}: bad CRC, followed by {} more bytes",
        rest.len() - end
    ))
}

/// Whether `dir` holds controller state: a snapshot, or a `raft.log` longer than its header.
/// A missing or empty log is what a brand-new broker starts from.
pub fn has_state(dir: &Path) -> Result<bool, StoreError> {
    let snap_path = dir.join(SNAPSHOT_FILE);
    match fs::metadata(&snap_path) {
        Ok(_) => return Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(StoreError::new(&snap_path, format!("stat: {e}"))),
    }
    let log_path = dir.join(LOG_FILE);
    match fs::metadata(&log_path) {
        Ok(m) => Ok(m.len() > HEADER_LEN as u64),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(StoreError::new(&log_path, format!("stat: {e}"))),
    }
}

fn sync_dir(dir: &Path) -> Result<(), StoreError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| StoreError::new(dir, format!("fsync directory: {e}")))
}

/// Writes `bytes` to `path` atomically: temp file, fsync, rename, fsync the directory.
fn write_atomic(dir: &Path, path: &Path, bytes: &[u8]) -> Result<(), StoreError> {
    let tmp = path.with_extension("tmp");
    let res = (|| {
        let mut f = File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_data()?;
        fs::rename(&tmp, path)
    })();
    res.map_err(|e| StoreError::new(path, format!("write: {e}")))?;
    sync_dir(dir)
}

fn encode<M: PbMessage>(path: &Path, m: &M) -> Result<Vec<u8>, StoreError> {
    m.write_to_bytes()
        .map_err(|e| StoreError::new(path, format!("encode: {e}")))
}

impl LogStore {
    /// Opens (creating if needed) the store in `dir`, recovering from a torn tail.
    pub fn open(dir: &Path) -> Result<LogStore, StoreError> {
        fs::create_dir_all(dir).map_err(|e| StoreError::new(dir, format!("create: {e}")))?;
        let log_path = dir.join(LOG_FILE);
        let snap_path = dir.join(SNAPSHOT_FILE);

        // The snapshot is written whole and renamed into place, so any damage is corruption.
        let (snapshot, has_snapshot) = match fs::read(&snap_path) {
            Ok(bytes) => {
                let corrupt = |why: String| {
                    StoreError::new(&snap_path, format!("corrupt snapshot file: {why}"))
                };
                let (payload, used) = parse_frame(&bytes).ok_or_else(|| {
                    corrupt(format!(
                        "bad length or CRC in the record at byte 0 ({} bytes in the file)",
                        bytes.len()
                    ))
                })?;
                if used != bytes.len() {
                    return Err(corrupt(format!(
                        "{} unexpected bytes at byte {used}",
                        bytes.len() - used
                    )));
                }
                if payload[0] != KIND_SNAPSHOT {
                    return Err(corrupt(format!(
                        "record kind {} at byte 0 is not a snapshot",
                        payload[0]
                    )));
                }
                let snap = Snapshot::parse_from_bytes(&payload[1..])
                    .map_err(|e| corrupt(format!("record at byte 0 does not decode: {e}")))?;
                (snap, true)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => (Snapshot::default(), false),
            Err(e) => return Err(StoreError::new(&snap_path, format!("read: {e}"))),
        };

        // Read before creating anything: a missing log must not be mistaken for a new one.
        let bytes = match fs::read(&log_path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(StoreError::new(&log_path, format!("read: {e}"))),
        };
        if bytes.len() < HEADER_LEN && has_snapshot {
            // Compaction rewrites the log after the snapshot, and a new store has no snapshot:
            // a snapshot beside a missing or empty log means the log was lost.
            return Err(StoreError::new(
                &log_path,
                format!(
                    "missing or empty ({} bytes) while the snapshot {} exists: the entries \
                     after the snapshot are lost",
                    bytes.len(),
                    snap_path.display()
                ),
            ));
        }
        let file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .open(&log_path)
            .map_err(|e| StoreError::new(&log_path, format!("open: {e}")))?;

        let mut store = LogStore {
            dir: dir.to_path_buf(),
            log_path: log_path.clone(),
            snap_path,
            file,
            hard_state: HardState::default(),
            conf_state: ConfState::default(),
            snapshot,
            entries: Vec::new(),
            truncated_bytes: 0,
            failed: false,
        };

        let hdr = header();
        if bytes.len() < HEADER_LEN {
            if !hdr.starts_with(&bytes) {
                return Err(StoreError::new(
                    &log_path,
                    "not a rill controller log (bad header at byte 0)",
                ));
            }
            // New file, or a crash while writing the header.
            store.rewrite_log()?;
            return store.finish_open();
        }
        if bytes[..8] != hdr[..8] {
            return Err(StoreError::new(
                &log_path,
                "not a rill controller log (bad header at byte 0)",
            ));
        }
        if bytes[8..HEADER_LEN] != hdr[8..] {
            return Err(StoreError::new(
                &log_path,
                "unsupported controller log format version (at byte 8)",
            ));
        }

        let mut pos = HEADER_LEN;
        let mut conf_state = None;
        let mut torn = "";
        while pos < bytes.len() {
            let Some((payload, used)) = parse_frame(&bytes[pos..]) else {
                torn = classify_bad_frame(&bytes[pos..], pos)
                    .map_err(|why| StoreError::new(&log_path, why))?;
                break;
            };
            let body = &payload[1..];
            let bad = |what: &str, e: &dyn std::fmt::Display| {
                StoreError::new(
                    &log_path,
                    format!("corrupt {what} record at byte {pos}: {e}"),
                )
            };
            match payload[0] {
                KIND_ENTRY => {
                    let e = Entry::parse_from_bytes(body).map_err(|e| bad("entry", &e))?;
                    store.replay_entry(e, pos)?;
                }
                KIND_HARD_STATE => {
                    store.hard_state =
                        HardState::parse_from_bytes(body).map_err(|e| bad("hard state", &e))?;
                }
                KIND_CONF_STATE => {
                    conf_state =
                        Some(ConfState::parse_from_bytes(body).map_err(|e| bad("conf state", &e))?);
                }
                k => return Err(bad("unknown", &format!("kind {k}"))),
            }
            pos += used;
        }
        if pos < bytes.len() {
            let dropped = (bytes.len() - pos) as u64;
            log::warn!(
                "{}: truncating {dropped} bytes of torn tail at byte {pos} ({torn})",
                log_path.display()
            );
            store
                .file
                .set_len(pos as u64)
                .and_then(|_| store.file.sync_data())
                .map_err(|e| StoreError::new(&log_path, format!("truncate torn tail: {e}")))?;
            store.truncated_bytes = dropped;
        }
        store.conf_state = conf_state.unwrap_or_else(|| store.snapshot_conf_state());
        store.finish_open()
    }

    fn snapshot_conf_state(&self) -> ConfState {
        self.snapshot.get_metadata().get_conf_state().clone()
    }

    fn finish_open(mut self) -> Result<LogStore, StoreError> {
        if self.conf_state == ConfState::default() {
            self.conf_state = self.snapshot_conf_state();
        }
        let meta = self.snapshot.get_metadata();
        let (snap_index, snap_term) = (meta.index, meta.term);
        let hs = &mut self.hard_state;
        hs.term = hs.term.max(snap_term);
        hs.commit = hs.commit.max(snap_index);
        let last = self.last();
        if self.hard_state.commit > last && snap_index == 0 {
            // Entries are fsynced before they commit, so only a lost snapshot file (the log
            // after compaction starts past it) leaves a commit index with nothing under it.
            return Err(StoreError::new(
                &self.log_path,
                format!(
                    "the hard state commits entry {} but the log ends at entry {last} and there \
                     is no snapshot ({} is missing)",
                    self.hard_state.commit,
                    self.snap_path.display()
                ),
            ));
        }
        if self.hard_state.commit > last {
            log::warn!(
                "{}: commit index {} beyond the last entry {last}; clamped",
                self.log_path.display(),
                self.hard_state.commit
            );
            self.hard_state.commit = last;
        }
        Ok(self)
    }

    fn replay_entry(&mut self, e: Entry, pos: usize) -> Result<(), StoreError> {
        let snap_index = self.snapshot.get_metadata().index;
        if e.index <= snap_index {
            return Ok(()); // covered by the snapshot (crash during compaction)
        }
        let next = self.last() + 1;
        if e.index > next {
            return Err(StoreError::new(
                &self.log_path,
                format!(
                    "entry {} at byte {pos} leaves a gap after entry {}{}",
                    e.index,
                    next - 1,
                    if snap_index == 0 {
                        " (no snapshot file: it may be missing)"
                    } else {
                        ""
                    }
                ),
            ));
        }
        self.entries.truncate((e.index - snap_index - 1) as usize);
        self.entries.push(e);
        Ok(())
    }

    fn first(&self) -> u64 {
        self.snapshot.get_metadata().index + 1
    }

    fn last(&self) -> u64 {
        match self.entries.last() {
            Some(e) => e.index,
            None => self.snapshot.get_metadata().index,
        }
    }

    /// The directory holding the files.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Path of the raft log file.
    pub fn log_path(&self) -> &Path {
        &self.log_path
    }

    /// Bytes of torn tail dropped when this store was opened (0 after a clean shutdown).
    pub fn truncated_bytes(&self) -> u64 {
        self.truncated_bytes
    }

    /// Whether a conf state was ever stored (a fresh store needs [`LogStore::initialize`]).
    pub fn is_initialized(&self) -> bool {
        self.conf_state != ConfState::default()
    }

    pub fn hard_state(&self) -> &HardState {
        &self.hard_state
    }

    pub fn conf_state(&self) -> &ConfState {
        &self.conf_state
    }

    /// The latest snapshot (index 0 and empty data when there is none).
    pub fn snapshot_ref(&self) -> &Snapshot {
        &self.snapshot
    }

    /// Number of entries held after the snapshot.
    pub fn entry_count(&self) -> usize {
        self.entries.len()
    }

    /// Sets the initial voters of a fresh store.
    pub fn initialize(&mut self, voters: Vec<u64>) -> Result<(), StoreError> {
        self.set_conf_state(ConfState {
            voters,
            ..Default::default()
        })
    }

    fn check_writable(&self) -> Result<(), StoreError> {
        if self.failed {
            Err(StoreError::new(
                &self.log_path,
                "an earlier write failed; the store is read-only until reopened",
            ))
        } else {
            Ok(())
        }
    }

    fn write_records(&mut self, buf: &[u8], sync: bool) -> Result<(), StoreError> {
        self.check_writable()?;
        let res =
            self.file.write_all(buf).and_then(
                |_| {
                    if sync {
                        self.file.sync_data()
                    } else {
                        Ok(())
                    }
                },
            );
        res.map_err(|e| {
            self.failed = true;
            StoreError::new(&self.log_path, format!("write: {e}"))
        })
    }

    /// Appends `entries` (replacing any at or after the first one's index) and records `hs`,
    /// fsyncing before returning when `sync`.
    pub fn persist(
        &mut self,
        entries: &[Entry],
        hs: Option<&HardState>,
        sync: bool,
    ) -> Result<(), StoreError> {
        if let Some(first) = entries.first() {
            if first.index < self.first() || first.index > self.last() + 1 {
                return Err(StoreError::new(
                    &self.log_path,
                    format!(
                        "append of entry {} outside [{}, {}]",
                        first.index,
                        self.first(),
                        self.last() + 1
                    ),
                ));
            }
        }
        let mut buf = Vec::new();
        for e in entries {
            frame(KIND_ENTRY, &encode(&self.log_path, e)?, &mut buf);
        }
        if let Some(hs) = hs {
            frame(KIND_HARD_STATE, &encode(&self.log_path, hs)?, &mut buf);
        }
        if buf.is_empty() {
            return Ok(());
        }
        self.write_records(&buf, sync)?;
        if let Some(first) = entries.first() {
            let keep = (first.index - self.first()) as usize;
            self.entries.truncate(keep);
            self.entries.extend_from_slice(entries);
        }
        if let Some(hs) = hs {
            self.hard_state = hs.clone();
        }
        Ok(())
    }

    /// Records a new commit index without fsync (losing it only delays applying after a crash).
    pub fn set_commit(&mut self, commit: u64) -> Result<(), StoreError> {
        let mut hs = self.hard_state.clone();
        hs.commit = commit;
        self.persist(&[], Some(&hs), false)
    }

    /// Records a new configuration (after a conf change is applied), fsynced.
    pub fn set_conf_state(&mut self, cs: ConfState) -> Result<(), StoreError> {
        let mut buf = Vec::new();
        frame(KIND_CONF_STATE, &encode(&self.log_path, &cs)?, &mut buf);
        self.write_records(&buf, true)?;
        self.conf_state = cs;
        Ok(())
    }

    /// Takes a snapshot at `index` (applied) holding `data` and drops the entries it covers.
    pub fn compact(&mut self, index: u64, data: Vec<u8>) -> Result<(), StoreError> {
        self.check_writable()?;
        if index <= self.snapshot.get_metadata().index {
            return Ok(());
        }
        let term = self
            .term(index)
            .map_err(|e| StoreError::new(&self.log_path, format!("compact to {index}: {e}")))?;
        let mut snap = Snapshot {
            data: data.into(),
            ..Default::default()
        };
        let meta = snap.mut_metadata();
        meta.index = index;
        meta.term = term;
        meta.set_conf_state(self.conf_state.clone());
        self.install_snapshot(snap)
    }

    /// Replaces the state with a snapshot received from the leader.
    pub fn apply_snapshot(&mut self, snap: Snapshot) -> Result<(), StoreError> {
        self.check_writable()?;
        let meta = snap.get_metadata();
        if meta.index < self.first() {
            return Err(StoreError::new(
                &self.snap_path,
                format!(
                    "snapshot at {} is older than the stored one at {}",
                    meta.index,
                    self.first() - 1
                ),
            ));
        }
        self.hard_state.term = self.hard_state.term.max(meta.term);
        self.hard_state.commit = self.hard_state.commit.max(meta.index);
        self.conf_state = meta.get_conf_state().clone();
        self.install_snapshot(snap)
    }

    /// Writes `snap` (index within or after the log) and rewrites the log without the entries
    /// it covers.
    fn install_snapshot(&mut self, snap: Snapshot) -> Result<(), StoreError> {
        let index = snap.get_metadata().index;
        let term = snap.get_metadata().term;
        let mut buf = Vec::new();
        frame(KIND_SNAPSHOT, &encode(&self.snap_path, &snap)?, &mut buf);
        if let Err(e) = write_atomic(&self.dir, &self.snap_path, &buf) {
            self.failed = true;
            return Err(e);
        }
        // Keep entries after the snapshot only if they continue from it.
        let keep_from = if self.last() >= index && self.term(index).ok() == Some(term) {
            (index + 1 - self.first()) as usize
        } else {
            self.entries.len()
        };
        self.entries.drain(..keep_from);
        if self.entries.first().is_some_and(|e| e.index != index + 1) {
            self.entries.clear();
        }
        self.snapshot = snap;
        if let Err(e) = self.rewrite_log() {
            self.failed = true;
            return Err(e);
        }
        Ok(())
    }

    /// Rewrites `raft.log` from memory: header, hard state, conf state, entries.
    fn rewrite_log(&mut self) -> Result<(), StoreError> {
        let mut buf = header().to_vec();
        frame(
            KIND_HARD_STATE,
            &encode(&self.log_path, &self.hard_state)?,
            &mut buf,
        );
        frame(
            KIND_CONF_STATE,
            &encode(&self.log_path, &self.conf_state)?,
            &mut buf,
        );
        for e in &self.entries {
            frame(KIND_ENTRY, &encode(&self.log_path, e)?, &mut buf);
        }
        write_atomic(&self.dir, &self.log_path, &buf)?;
        self.file = OpenOptions::new()
            .read(true)
            .append(true)
            .open(&self.log_path)
            .map_err(|e| StoreError::new(&self.log_path, format!("open: {e}")))?;
        Ok(())
    }
}

impl Storage for LogStore {
    fn initial_state(&self) -> raft::Result<RaftState> {
        Ok(RaftState::new(
            self.hard_state.clone(),
            self.conf_state.clone(),
        ))
    }

    fn entries(
        &self,
        low: u64,
        high: u64,
        max_size: impl Into<Option<u64>>,
        _context: GetEntriesContext,
    ) -> raft::Result<Vec<Entry>> {
        if low < self.first() {
            return Err(raft::Error::Store(StorageError::Compacted));
        }
        if high > self.last() + 1 || low > high {
            return Err(raft::Error::Store(StorageError::Unavailable));
        }
        let first = self.first();
        let mut ents = self.entries[(low - first) as usize..(high - first) as usize].to_vec();
        raft::util::limit_size(&mut ents, max_size.into());
        Ok(ents)
    }

    fn term(&self, idx: u64) -> raft::Result<u64> {
        let meta = self.snapshot.get_metadata();
        if idx == meta.index {
            return Ok(meta.term);
        }
        if idx < self.first() {
            return Err(raft::Error::Store(StorageError::Compacted));
        }
        if idx > self.last() {
            return Err(raft::Error::Store(StorageError::Unavailable));
        }
        Ok(self.entries[(idx - self.first()) as usize].term)
    }

    fn first_index(&self) -> raft::Result<u64> {
        Ok(self.first())
    }

    fn last_index(&self) -> raft::Result<u64> {
        Ok(self.last())
    }

    fn snapshot(&self, request_index: u64, _to: u64) -> raft::Result<Snapshot> {
        if self.snapshot.get_metadata().index < request_index
            || self.snapshot.get_metadata().index == 0
        {
            return Err(raft::Error::Store(
                StorageError::SnapshotTemporarilyUnavailable,
            ));
        }
        Ok(self.snapshot.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(index: u64, term: u64, data: &[u8]) -> Entry {
        Entry {
            index,
            term,
            data: data.to_vec().into(),
            ..Default::default()
        }
    }

    fn hs(term: u64, vote: u64, commit: u64) -> HardState {
        HardState {
            term,
            vote,
            commit,
            ..Default::default()
        }
    }

    #[test]
    fn persists_and_reopens() {
        let dir = tempfile::tempdir().unwrap();
        {
            let mut s = LogStore::open(dir.path()).unwrap();
            assert!(!s.is_initialized());
            s.initialize(vec![1]).unwrap();
            s.persist(
                &[entry(1, 1, b"a"), entry(2, 1, b"b"), entry(3, 1, b"c")],
                Some(&hs(1, 1, 0)),
                true,
            )
            .unwrap();
            // Conflict: a new leader overwrites 3.
            s.persist(&[entry(3, 2, b"C")], Some(&hs(2, 1, 0)), true)
                .unwrap();
            s.set_commit(3).unwrap();
        }
        let s = LogStore::open(dir.path()).unwrap();
        assert_eq!(s.truncated_bytes(), 0);
        assert_eq!(s.conf_state().voters, vec![1]);
        assert_eq!(s.hard_state(), &hs(2, 1, 3));
        assert_eq!(s.first_index().unwrap(), 1);
        assert_eq!(s.last_index().unwrap(), 3);
        let ents = s
            .entries(1, 4, None, GetEntriesContext::empty(false))
            .unwrap();
        assert_eq!(ents[2], entry(3, 2, b"C"));
        assert_eq!(s.term(3).unwrap(), 2);
    }

    #[test]
    fn torn_tail_is_truncated_and_garbage_header_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        {
            let mut s = LogStore::open(dir.path()).unwrap();
            s.initialize(vec![1]).unwrap();
            s.persist(&[entry(1, 1, b"a"), entry(2, 1, b"b")], None, true)
                .unwrap();
        }
        let path = dir.path().join(LOG_FILE);
        let good_len = fs::metadata(&path).unwrap().len();
        // A record cut short: a full frame header promising more bytes than exist.
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(&[200, 0, 0, 0, 1, 2, 3, 4, KIND_ENTRY, 9, 9])
            .unwrap();
        drop(f);
        let s = LogStore::open(dir.path()).unwrap();
        assert_eq!(s.truncated_bytes(), 11);
        assert_eq!(s.last_index().unwrap(), 2);
        assert_eq!(fs::metadata(&path).unwrap().len(), good_len);
        drop(s);

        fs::write(&path, b"definitely not a raft log").unwrap();
        let err = LogStore::open(dir.path()).err().unwrap();
        assert!(err.to_string().contains(LOG_FILE), "{err}");

        // A CRC-valid record that does not decode is corruption, not a torn write.
        let mut bytes = header().to_vec();
        frame(KIND_ENTRY, &[0xff, 0xff, 0xff], &mut bytes);
        fs::write(&path, &bytes).unwrap();
        let err = LogStore::open(dir.path()).err().unwrap();
        assert!(err.to_string().contains(LOG_FILE), "{err}");
    }

    #[test]
    fn compaction_survives_reopen_and_corrupt_snapshot_is_named() {
        let dir = tempfile::tempdir().unwrap();
        {
            let mut s = LogStore::open(dir.path()).unwrap();
            s.initialize(vec![1]).unwrap();
            let ents: Vec<Entry> = (1..=5).map(|i| entry(i, 1, b"x")).collect();
            s.persist(&ents, Some(&hs(1, 1, 5)), true).unwrap();
            s.compact(3, b"state".to_vec()).unwrap();
            assert_eq!(s.first_index().unwrap(), 4);
            assert_eq!(s.term(3).unwrap(), 1);
            assert!(s
                .entries(2, 4, None, GetEntriesContext::empty(false))
                .is_err());
            s.persist(&[entry(6, 2, b"y")], None, true).unwrap();
        }
        let s = LogStore::open(dir.path()).unwrap();
        assert_eq!(s.snapshot_ref().get_metadata().index, 3);
        assert_eq!(&s.snapshot_ref().data[..], b"state");
        assert_eq!(
            s.snapshot_ref().get_metadata().get_conf_state().voters,
            vec![1]
        );
        assert_eq!((s.first_index().unwrap(), s.last_index().unwrap()), (4, 6));
        assert_eq!(s.hard_state().commit, 5);
        drop(s);

        let snap = dir.path().join(SNAPSHOT_FILE);
        let mut bytes = fs::read(&snap).unwrap();
        let n = bytes.len();
        bytes[n - 1] ^= 0xff;
        fs::write(&snap, &bytes).unwrap();
        let err = LogStore::open(dir.path()).err().unwrap();
        assert!(err.to_string().contains(SNAPSHOT_FILE), "{err}");
    }
    /// Start offsets of the records of a well-formed log file.
    fn record_offsets(bytes: &[u8]) -> Vec<usize> {
        let mut out = Vec::new();
        let mut pos = HEADER_LEN;
        while pos < bytes.len() {
            out.push(pos);
            let (_, used) = parse_frame(&bytes[pos..]).expect("well-formed log");
            pos += used;
        }
        out
    }

    /// A log whose last record is entry 5 (entries 1-4 and a hard state come before it).
    fn five_entry_log(dir: &Path) -> Vec<u8> {
        let mut s = LogStore::open(dir).unwrap();
        s.initialize(vec![1]).unwrap();
        let ents: Vec<Entry> = (1..=4).map(|i| entry(i, 1, b"create topic")).collect();
        s.persist(&ents, Some(&hs(1, 1, 0)), true).unwrap();
        s.persist(&[entry(5, 1, b"create another topic")], None, true)
            .unwrap();
        drop(s);
        fs::read(dir.join(LOG_FILE)).unwrap()
    }

    #[test]
    fn a_flipped_byte_before_the_last_record_is_corruption_naming_file_and_offset() {
        let dir = tempfile::tempdir().unwrap();
        let good = five_entry_log(dir.path());
        let offs = record_offsets(&good);
        let last = *offs.last().unwrap();
        let path = dir.path().join(LOG_FILE);
        // Every record but the last, each at its length, CRC, kind and payload bytes.
        for &off in &offs[..offs.len() - 1] {
            let len = u32::from_le_bytes(good[off..off + 4].try_into().unwrap()) as usize;
            for (what, at) in [
                ("length low byte", off),
                ("length high byte", off + 3),
                ("crc", off + 5),
                ("kind", off + FRAME_LEN),
                ("last payload byte", off + FRAME_LEN + len - 1),
            ] {
                let mut bytes = good.clone();
                bytes[at] ^= 0x40;
                fs::write(&path, &bytes).unwrap();
                let err = LogStore::open(dir.path())
                    .err()
                    .unwrap_or_else(|| panic!("flip of {what} of record at {off} opened"));
                let msg = err.to_string();
                assert!(msg.contains("raft.log"), "{msg}");
                assert!(
                    msg.contains(&format!("at byte {off}")),
                    "{what} of record at {off}: {msg}"
                );
                assert_eq!(msg.lines().count(), 1, "{msg}");
                // Nothing was cut: the file is kept for the operator.
                assert_eq!(fs::read(&path).unwrap(), bytes, "{what} at {off}");
            }
        }
        // The intact file still opens whole.
        fs::write(&path, &good).unwrap();
        let s = LogStore::open(dir.path()).unwrap();
        assert_eq!(s.last_index().unwrap(), 5);
        assert_eq!(s.truncated_bytes(), 0);
        assert!(last > offs[0]);
    }

    #[test]
    fn a_torn_last_record_is_cut_and_earlier_records_stay() {
        let dir = tempfile::tempdir().unwrap();
        let good = five_entry_log(dir.path());
        let last = *record_offsets(&good).last().unwrap();
        let path = dir.path().join(LOG_FILE);
        let mut cases: Vec<(&str, Vec<u8>)> = Vec::new();
        // A bad CRC on the last record (its payload half written).
        let mut b = good.clone();
        let n = b.len();
        b[n - 2] ^= 0x01;
        cases.push(("payload byte", b));
        let mut b = good.clone();
        b[last + 4] ^= 0x01;
        cases.push(("crc byte", b));
        // Short payload, short header.
        cases.push(("short payload", good[..good.len() - 3].to_vec()));
        cases.push(("short header", good[..last + 5].to_vec()));
        // The file size reached the disk, the data did not.
        let mut b = good.clone();
        b[last..].fill(0);
        cases.push(("zeroed record", b));
        let mut b = good.clone();
        b[last + FRAME_LEN + 2..].fill(0);
        b.extend_from_slice(&[0; 100]);
        cases.push(("zeroed half and zeros after", b));
        for (what, bytes) in cases {
            fs::write(&path, &bytes).unwrap();
            let s = LogStore::open(dir.path()).unwrap_or_else(|e| panic!("{what}: {e}"));
            assert_eq!(s.truncated_bytes(), (bytes.len() - last) as u64, "{what}");
            assert_eq!(s.last_index().unwrap(), 4, "{what}");
            let ents = s
                .entries(1, 5, None, GetEntriesContext::empty(false))
                .unwrap();
            assert_eq!(
                ents,
                (1..=4)
                    .map(|i| entry(i, 1, b"create topic"))
                    .collect::<Vec<_>>(),
                "{what}"
            );
            assert_eq!(s.hard_state().term, 1, "{what}");
            drop(s);
            assert_eq!(fs::read(&path).unwrap(), good[..last], "{what}");
        }
    }

    #[test]
    fn bad_crc_on_the_last_record_with_more_bytes_after_it_is_corruption() {
        let dir = tempfile::tempdir().unwrap();
        let mut bytes = five_entry_log(dir.path());
        let last = *record_offsets(&bytes).last().unwrap();
        bytes[last + 5] ^= 0x01;
        bytes.extend_from_slice(b"more bytes that are not a record");
        let path = dir.path().join(LOG_FILE);
        fs::write(&path, &bytes).unwrap();
        let err = LogStore::open(dir.path()).err().unwrap().to_string();
        assert!(
            err.contains("raft.log") && err.contains(&format!("at byte {last}")),
            "{err}"
        );
        assert_eq!(fs::read(&path).unwrap(), bytes);
    }

    #[test]
    fn a_lost_log_or_snapshot_is_an_error_not_an_empty_store() {
        let dir = tempfile::tempdir().unwrap();
        assert!(!has_state(dir.path()).unwrap());
        {
            let mut s = LogStore::open(dir.path()).unwrap();
            // A new store: a log of just its header, hard state and conf state.
            assert!(!s.is_initialized());
            s.initialize(vec![1]).unwrap();
            let ents: Vec<Entry> = (1..=5).map(|i| entry(i, 1, b"x")).collect();
            s.persist(&ents, Some(&hs(1, 1, 5)), true).unwrap();
            s.compact(5, b"state".to_vec()).unwrap();
        }
        assert!(has_state(dir.path()).unwrap());
        let log = dir.path().join(LOG_FILE);
        let snap = dir.path().join(SNAPSHOT_FILE);
        let (log_bytes, snap_bytes) = (fs::read(&log).unwrap(), fs::read(&snap).unwrap());

        // The log gone (or emptied) beside a snapshot.
        fs::remove_file(&log).unwrap();
        let err = LogStore::open(dir.path()).err().unwrap().to_string();
        assert!(err.contains("raft.log") && err.contains("missing"), "{err}");
        assert!(!log.exists(), "open must not create the missing log");
        fs::write(&log, b"").unwrap();
        assert!(LogStore::open(dir.path()).is_err());

        // The snapshot gone beside a compacted log that commits entry 5.
        fs::write(&log, &log_bytes).unwrap();
        fs::remove_file(&snap).unwrap();
        let err = LogStore::open(dir.path()).err().unwrap().to_string();
        assert!(err.contains("snapshot"), "{err}");

        // A flipped byte anywhere in the snapshot names the file and the offset.
        for at in [0, 4, FRAME_LEN, snap_bytes.len() / 2, snap_bytes.len() - 1] {
            let mut b = snap_bytes.clone();
            b[at] ^= 0x10;
            fs::write(&snap, &b).unwrap();
            let err = LogStore::open(dir.path()).err().unwrap().to_string();
            assert!(
                err.contains(SNAPSHOT_FILE) && err.contains("at byte"),
                "{at}: {err}"
            );
        }
        fs::write(&snap, &snap_bytes).unwrap();
        let s = LogStore::open(dir.path()).unwrap();
        assert_eq!(s.snapshot_ref().get_metadata().index, 5);
    }
}
