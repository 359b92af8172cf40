//! The durable side of one shard's delayed messages, two append-only files in its own
//! directory (`<data>/delay/<shard>/`), written with plain blocking I/O (the shard runs these
//! calls on its blocking pool) and synced before a call returns:
//!
//! - `pending.log`: every accepted delayed message, `[len u32][crc32c u32][body]`, the body
//!   `[id u64][due ms i64][partition u32][topic len u16][topic][batch]`. Written before the
//!   producer is answered.
//! - `fired.log`: fixed 24-byte marks `[kind u8][0; 3][crc32c u32 of bytes 8..24][id u64]
//!   [offset u64]`: *firing* (the target's log end before its append) is written before the
//!   message is appended to its partition, *fired* once that append is durable. On restart a
//!   message with no mark fires; one with only *firing* is looked for in its partition from
//!   that offset (the caller's job), so a crash between the two marks fires it once.
//!
//! **Memory is bounded** (`--delay-memory-bytes`): only the messages next due are in memory
//! (the *window*: every live message whose key, due time then id, is at most
//! `window_end`; at most `max_loaded` of them, plus what a burst of accepts adds before
//! the caller unloads). The others are on disk only, found again through `pending.idx`
//! ([`super::index`], about 50 bytes a message): [`DelayStore::refill`] reads it and takes
//! the earliest ones past the window. Invariants: every loaded message's key is at most
//! `window_end`, every one past it is live and not loaded, and so is never fired yet
//! (fired messages were loaded: `window_end` never drops below the largest key fired
//! since the files were last rewritten). The open streams `pending.log` (its memory is the
//! window and the *fired* marks, not the file) and rebuilds the index.
//!
//! A torn record at the end of either file (a crash inside an append, never acknowledged)
//! is cut; a record that fails its CRC with data after it is damage and refuses the open.
//!
//! Messages fire in due order, not in the order they were written, so `pending.log` fills
//! with fired records while others stay pending: with delayed traffic that never pauses it
//! would grow without end. Once the fired records' bytes reach both the live ones' and the
//! compaction threshold (64 MiB), the live records are copied to `pending.next` and the
//! *firing* marks of live messages to `fired.next` (after a mark that keeps the next id
//! above every id used), each synced, then renamed over `pending.log`, then `fired.log`. A
//! crash between the renames leaves the new `pending.log` beside the old `fired.log`, whose
//! marks say the same of every live message. So the files stay within about twice the live
//! bytes plus the threshold, and the copying costs at most about as much as the appends.

use std::collections::{BinaryHeap, HashMap};
use std::fs::{File, OpenOptions};
use std::io::{BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use super::index::{IndexReader, IndexRecord};
use crate::batch::{u32_at, u64_at};

/// Why the delay store failed.
#[derive(Debug, thiserror::Error)]
pub enum DelayStoreError {
    #[error("delay store {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("delay store {path}: damaged record at byte {at}")]
    Damaged { path: PathBuf, at: u64 },
    #[error("{0} delayed messages are pending on this shard (--max-delayed-per-shard)")]
    Full(usize),
}

const PENDING: &str = "pending.log";
const FIRED: &str = "fired.log";
const INDEX: &str = "pending.idx";
/// Where a compaction writes before its renames; left over from a crash, removed at open.
const PENDING_NEXT: &str = "pending.next";
const FIRED_NEXT: &str = "fired.next";
const INDEX_NEXT: &str = "pending.idx.next";
/// Compaction waits for at least this many bytes of fired records.
pub const COMPACT_MIN_DEAD_BYTES: u64 = 64 << 20;
const MARK_LEN: usize = 24;
const FIRING: u8 = 1;
const FIRED_KIND: u8 = 2;
/// Fixed part of a pending record's body before the topic.
const BODY_FIXED: usize = 8 + 8 + 4 + 2;

/// Firing order: due time, then id (acceptance order).
type Key = (i64, u64);

/// A pending message in memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingEntry {
    pub id: u64,
    pub due_ms: i64,
    pub topic: String,
    pub partition: u32,
    /// Set when a *firing* mark (and no *fired*) was found: the target's log end before the
    /// interrupted append.
    pub firing_from: Option<u64>,
}

impl PendingEntry {
    pub fn key(&self) -> Key {
        (self.due_ms, self.id)
    }
}

/// Where a loaded message's record lies in `pending.log`.
#[derive(Debug, Clone, Copy)]
struct Place {
    at: u64,
    /// The whole record's length, header included.
    len: u32,
    /// The batch's offset within the record.
    batch_from: u32,
    due_ms: i64,
}

/// How many messages are in memory and on disk only: read by the shard without the
/// store's lock, to decide when to unload or refill.
#[derive(Debug, Default)]
pub struct WindowCounts {
    pub loaded: AtomicUsize,
    pub paged_out: AtomicUsize,
}

/// What accepting a message gave.
pub struct Accepted {
    pub entry: PendingEntry,
    /// In the window: the caller arms it. Otherwise it is on disk only until a refill.
    pub loaded: bool,
}

/// See the module docs.
pub struct DelayStore {
    dir: PathBuf,
    pending: File,
    pending_len: u64,
    fired: File,
    index: File,
    next_id: u64,
    /// The window's messages by id.
    loaded: HashMap<u64, Place>,
    /// Live messages past the window (on disk only).
    paged_out: usize,
    /// `None`: every live message is loaded.
    window_end: Option<Key>,
    /// The largest key fired since the files were last rewritten (see the invariants).
    fired_max: Option<Key>,
    /// The bytes of every live message's record.
    live_bytes: u64,
    /// The key of the last id given (a compaction keeps ids above it).
    last_key: Option<Key>,
    /// Live messages with a *firing* mark: the log end it logged (a compaction keeps it).
    firing: HashMap<u64, u64>,
    compact_min_dead: u64,
    max_loaded: usize,
    counts: Arc<WindowCounts>,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> DelayStoreError + '_ {
    move |source| DelayStoreError::Io {
        path: path.to_path_buf(),
        source,
    }
}

fn open_rw(path: &Path) -> Result<File, DelayStoreError> {
    OpenOptions::new()
        .read(true)
        .append(true)
        .create(true)
        .open(path)
        .map_err(io(path))
}

fn read_all(f: &mut File, path: &Path) -> Result<Vec<u8>, DelayStoreError> {
    let mut bytes = Vec::new();
    f.seek(SeekFrom::Start(0)).map_err(io(path))?;
    f.read_to_end(&mut bytes).map_err(io(path))?;
    Ok(bytes)
}

fn mark_bytes(kind: u8, id: u64, offset: u64) -> [u8; MARK_LEN] {
    let mut m = [0u8; MARK_LEN];
    m[0] = kind;
    m[8..16].copy_from_slice(&id.to_le_bytes());
    m[16..24].copy_from_slice(&offset.to_le_bytes());
    let crc = crc32c::crc32c(&m[8..]);
    m[4..8].copy_from_slice(&crc.to_le_bytes());
    m
}

fn sync_dir(dir: &Path) -> Result<(), DelayStoreError> {
    File::open(dir).and_then(|d| d.sync_all()).map_err(io(dir))
}

/// Keeps the `cap` smallest keys pushed (a max-heap of them).
struct Earliest {
    heap: BinaryHeap<(Key, u64)>,
    items: HashMap<u64, IndexRecord>,
    cap: usize,
    /// Every key pushed past the window (kept or not).
    seen: usize,
}

impl Earliest {
    fn new(cap: usize) -> Self {
        Earliest {
            heap: BinaryHeap::new(),
            items: HashMap::new(),
            cap,
            seen: 0,
        }
    }

    fn push(&mut self, rec: IndexRecord) {
        self.seen += 1;
        if self.cap == 0 {
            return;
        }
        let key = rec.key();
        if self.heap.len() == self.cap {
            match self.heap.peek() {
                Some(&(top, id)) if key < top => {
                    self.heap.pop();
                    self.items.remove(&id);
                }
                _ => return,
            }
        }
        self.heap.push((key, rec.id));
        self.items.insert(rec.id, rec);
    }

    /// The kept records by key, and whether some past them were left out.
    fn into_sorted(self) -> (Vec<IndexRecord>, bool) {
        let more = self.seen > self.heap.len();
        let mut items = self.items;
        let mut out: Vec<IndexRecord> = self
            .heap
            .into_sorted_vec()
            .into_iter()
            .filter_map(|(_, id)| items.remove(&id))
            .collect();
        out.sort_by_key(IndexRecord::key);
        (out, more)
    }
}

/// Brings the message `r` indexes into the window `loaded`: its entry, with its *firing*
/// mark if it has one.
fn load(
    r: IndexRecord,
    loaded: &mut HashMap<u64, Place>,
    firing: &HashMap<u64, u64>,
) -> PendingEntry {
    let place = Place {
        at: r.at,
        len: r.len,
        batch_from: r.batch_from,
        due_ms: r.due_ms,
    };
    loaded.insert(r.id, place);
    PendingEntry {
        id: r.id,
        due_ms: r.due_ms,
        firing_from: firing.get(&r.id).copied(),
        topic: r.topic,
        partition: r.partition,
    }
}

/// The record of a message in `pending.log`.
fn pending_record(id: u64, due_ms: i64, topic: &str, partition: u32, batch: &[u8]) -> Vec<u8> {
    let mut body = Vec::with_capacity(BODY_FIXED + topic.len() + batch.len());
    body.extend_from_slice(&id.to_le_bytes());
    body.extend_from_slice(&due_ms.to_le_bytes());
    body.extend_from_slice(&partition.to_le_bytes());
    body.extend_from_slice(&(topic.len() as u16).to_le_bytes());
    body.extend_from_slice(topic.as_bytes());
    body.extend_from_slice(batch);
    let mut rec = Vec::with_capacity(8 + body.len());
    rec.extend_from_slice(&(body.len() as u32).to_le_bytes());
    rec.extend_from_slice(&crc32c::crc32c(&body).to_le_bytes());
    rec.extend_from_slice(&body);
    rec
}

impl DelayStore {
    /// Opens (creating) the store in `dir` with every message in memory (no bound; tests).
    pub fn open(dir: &Path) -> Result<(DelayStore, Vec<PendingEntry>), DelayStoreError> {
        Self::open_with(dir, COMPACT_MIN_DEAD_BYTES, usize::MAX)
    }

    /// Opens (creating) the store in `dir`, compacting once `compact_min_dead` bytes are
    /// fired and keeping at most `max_loaded` messages in memory; returns those, by key.
    pub fn open_with(
        dir: &Path,
        compact_min_dead: u64,
        max_loaded: usize,
    ) -> Result<(DelayStore, Vec<PendingEntry>), DelayStoreError> {
        std::fs::create_dir_all(dir).map_err(io(dir))?;
        // A compaction a crash interrupted before its renames: the old files are whole.
        for name in [PENDING_NEXT, FIRED_NEXT, INDEX_NEXT] {
            match std::fs::remove_file(dir.join(name)) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(io(&dir.join(name))(e)),
            }
        }
        let pending_path = dir.join(PENDING);
        let fired_path = dir.join(FIRED);
        let index_path = dir.join(INDEX);
        let pending = open_rw(&pending_path)?;
        let mut fired = open_rw(&fired_path)?;
        let mut next_id = 0u64;

        // The marks first: they decide which records are live.
        let marks = read_all(&mut fired, &fired_path)?;
        let mut state: HashMap<u64, Option<u64>> = HashMap::new();
        let whole_marks = marks.len() / MARK_LEN * MARK_LEN;
        for (i, m) in marks[..whole_marks].chunks_exact(MARK_LEN).enumerate() {
            if crc32c::crc32c(&m[8..]) != u32_at(m, 4) || !matches!(m[0], FIRING | FIRED_KIND) {
                return Err(DelayStoreError::Damaged {
                    path: fired_path,
                    at: (i * MARK_LEN) as u64,
                });
            }
            let id = u64_at(m, 8);
            // A mark left by a reset cut short must not match a new message's id.
            next_id = next_id.max(id + 1);
            if m[0] == FIRED_KIND {
                state.insert(id, None);
            } else {
                state.entry(id).or_insert(Some(u64_at(m, 16)));
            }
        }
        drop(marks);
        if whole_marks < fired.metadata().map_err(io(&fired_path))?.len() as usize {
            fired.set_len(whole_marks as u64).map_err(io(&fired_path))?;
            fired.sync_data().map_err(io(&fired_path))?;
        }

        // pending.log, streamed: the live records go to a new index, the earliest
        // `max_loaded` into memory.
        let mut index_out =
            BufWriter::with_capacity(1 << 20, File::create(&index_path).map_err(io(&index_path))?);
        let mut rd = BufReader::with_capacity(
            1 << 20,
            File::open(&pending_path).map_err(io(&pending_path))?,
        );
        let file_len = pending.metadata().map_err(io(&pending_path))?.len();
        let mut earliest = Earliest::new(max_loaded);
        let mut firing = HashMap::new();
        let (mut live_bytes, mut live_count) = (0u64, 0usize);
        let mut last_key: Option<Key> = None;
        let mut at = 0u64;
        let mut head = [0u8; 8];
        let mut body = Vec::new();
        let mut encoded = Vec::new();
        loop {
            if at + 8 > file_len || rd.read_exact(&mut head).is_err() {
                break; // the end, or a torn header
            }
            let len = u32_at(&head, 0) as usize;
            if at + 8 + len as u64 > file_len {
                break; // torn body
            }
            body.resize(len, 0);
            rd.read_exact(&mut body).map_err(io(&pending_path))?;
            let damaged = || DelayStoreError::Damaged {
                path: pending_path.clone(),
                at,
            };
            if len < BODY_FIXED || crc32c::crc32c(&body) != u32_at(&head, 4) {
                return Err(damaged());
            }
            let topic_len = u16::from_le_bytes([body[20], body[21]]) as usize;
            let topic = body
                .get(BODY_FIXED..BODY_FIXED + topic_len)
                .and_then(|t| std::str::from_utf8(t).ok())
                .ok_or_else(damaged)?;
            let id = u64_at(&body, 0);
            next_id = next_id.max(id + 1);
            if last_key.is_none_or(|(_, last)| id > last) {
                last_key = Some((u64_at(&body, 8) as i64, id));
            }
            let rec = IndexRecord {
                id,
                due_ms: u64_at(&body, 8) as i64,
                at,
                len: (8 + len) as u32,
                batch_from: (8 + BODY_FIXED + topic_len) as u32,
                partition: u32_at(&body, 16),
                topic: topic.to_string(),
            };
            at += 8 + len as u64;
            match state.get(&id) {
                Some(None) => continue,
                Some(Some(from)) => {
                    firing.insert(id, *from);
                }
                None => {}
            }
            live_bytes += u64::from(rec.len);
            live_count += 1;
            encoded.clear();
            rec.encode(&mut encoded);
            index_out.write_all(&encoded).map_err(io(&index_path))?;
            earliest.push(rec);
        }
        drop(rd);
        index_out.flush().map_err(io(&index_path))?;
        drop(index_out);
        if at < file_len {
            pending.set_len(at).map_err(io(&pending_path))?;
            pending.sync_data().map_err(io(&pending_path))?;
        }
        let (first, more) = earliest.into_sorted();
        let window_end = match more {
            true => first.last().map(IndexRecord::key),
            false => None,
        };
        let mut loaded = HashMap::with_capacity(first.len());
        let entries: Vec<PendingEntry> = first
            .into_iter()
            .map(|r| load(r, &mut loaded, &firing))
            .collect();
        let counts = Arc::new(WindowCounts::default());
        let store = DelayStore {
            dir: dir.to_path_buf(),
            pending,
            pending_len: at,
            fired,
            index: open_rw(&index_path)?,
            next_id,
            paged_out: live_count - loaded.len(),
            loaded,
            window_end,
            fired_max: None,
            live_bytes,
            last_key,
            firing,
            compact_min_dead,
            max_loaded,
            counts,
        };
        store.publish_counts();
        Ok((store, entries))
    }

    /// The window's sizes, shared with the shard.
    pub fn counts(&self) -> Arc<WindowCounts> {
        self.counts.clone()
    }

    fn publish_counts(&self) {
        self.counts
            .loaded
            .store(self.loaded.len(), Ordering::Relaxed);
        self.counts
            .paged_out
            .store(self.paged_out, Ordering::Relaxed);
    }

    /// Messages pending, in memory or not.
    pub fn live(&self) -> usize {
        self.loaded.len() + self.paged_out
    }

    /// Appends an accepted message and syncs it; returns its entry (the id it was given) and
    /// whether it is in the window. Refused with [`DelayStoreError::Full`] when `max_live`
    /// are pending.
    pub fn append(
        &mut self,
        due_ms: i64,
        topic: &str,
        partition: u32,
        batch: &[u8],
        max_live: usize,
    ) -> Result<Accepted, DelayStoreError> {
        let item = (due_ms, topic.to_string(), partition, batch.to_vec());
        let mut out = self.append_all(std::slice::from_ref(&item), max_live)?;
        out.pop().unwrap_or(Err(DelayStoreError::Full(self.live())))
    }

    /// Appends messages (due ms, topic, partition, batch) under one sync (a group commit):
    /// each gets its own answer ([`DelayStoreError::Full`] past `max_live`, or a batch too
    /// large); a failed write or sync fails them all and leaves none behind.
    pub fn append_all(
        &mut self,
        items: &[(i64, String, u32, Vec<u8>)],
        max_live: usize,
    ) -> Result<Vec<Result<Accepted, DelayStoreError>>, DelayStoreError> {
        let path = self.dir.join(PENDING);
        let invalid = |why: &str| {
            io(&path)(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                why.to_string(),
            ))
        };
        let start_len = self.pending_len;
        let mut records = Vec::new();
        let mut index = Vec::new();
        // Per item: its answer, or where its record lies and its entry.
        let mut planned: Vec<Result<(Place, PendingEntry), DelayStoreError>> = Vec::new();
        let (mut at, mut id, mut live) = (self.pending_len, self.next_id, self.live());
        for (due_ms, topic, partition, batch) in items {
            if live >= max_live {
                planned.push(Err(DelayStoreError::Full(live)));
                continue;
            }
            if topic.len() > usize::from(u16::MAX) {
                planned.push(Err(invalid("topic name too long")));
                continue;
            }
            if BODY_FIXED + topic.len() + batch.len() > u32::MAX as usize - 8 {
                planned.push(Err(invalid("delayed batch too large")));
                continue;
            }
            let rec = pending_record(id, *due_ms, topic, *partition, batch);
            let place = Place {
                at,
                len: rec.len() as u32,
                batch_from: (8 + BODY_FIXED + topic.len()) as u32,
                due_ms: *due_ms,
            };
            IndexRecord {
                id,
                due_ms: *due_ms,
                at,
                len: place.len,
                batch_from: place.batch_from,
                partition: *partition,
                topic: topic.clone(),
            }
            .encode(&mut index);
            records.extend_from_slice(&rec);
            planned.push(Ok((
                place,
                PendingEntry {
                    id,
                    due_ms: *due_ms,
                    topic: topic.clone(),
                    partition: *partition,
                    firing_from: None,
                },
            )));
            at += rec.len() as u64;
            id += 1;
            live += 1;
        }
        if !records.is_empty() {
            // The index entries before the sync: a message the producer is told about is
            // one a refill can find (the index itself is rebuilt at open: no sync).
            let written = self
                .pending
                .write_all(&records)
                .and_then(|()| self.index.write_all(&index))
                .and_then(|()| self.pending.sync_data());
            if let Err(e) = written {
                // Leave no half record behind an error the producers are told about.
                let _ = self.pending.set_len(start_len);
                let _ = self.rewrite_index_tail();
                return Err(io(&path)(e));
            }
        }
        let out = planned
            .into_iter()
            .map(|p| {
                let (place, entry) = p?;
                self.pending_len += u64::from(place.len);
                self.next_id = entry.id + 1;
                self.live_bytes += u64::from(place.len);
                self.last_key = Some(entry.key());
                let loaded = self.window_end.is_none_or(|end| entry.key() <= end);
                match loaded {
                    true => {
                        self.loaded.insert(entry.id, place);
                    }
                    false => self.paged_out += 1,
                }
                Ok(Accepted { entry, loaded })
            })
            .collect();
        self.publish_counts();
        Ok(out)
    }

    /// After a failed append: rewrites the index without records past `pending.log`'s end
    /// (the failed append may have written one).
    fn rewrite_index_tail(&mut self) -> Result<(), DelayStoreError> {
        let path = self.dir.join(INDEX);
        let mut keep = Vec::new();
        let mut rd = IndexReader::new(BufReader::new(File::open(&path).map_err(io(&path))?));
        while let Ok(Some(r)) = rd.next_record() {
            if r.at + u64::from(r.len) <= self.pending_len {
                r.encode(&mut keep);
            }
        }
        std::fs::write(&path, &keep).map_err(io(&path))?;
        self.index = open_rw(&path)?;
        Ok(())
    }

    /// Reads a loaded message's batch.
    pub fn read_batch(&self, e: &PendingEntry) -> Result<Vec<u8>, DelayStoreError> {
        let path = self.dir.join(PENDING);
        let place = self.loaded.get(&e.id).ok_or_else(|| {
            io(&path)(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!("delayed message {} is not in memory", e.id),
            ))
        })?;
        let mut b = vec![0u8; (place.len - place.batch_from) as usize];
        self.pending
            .read_exact_at(&mut b, place.at + u64::from(place.batch_from))
            .map_err(io(&path))?;
        Ok(b)
    }

    /// Records, synced, that `id` is about to be appended to its partition, whose log ends
    /// at `log_end`.
    pub fn mark_firing(&mut self, id: u64, log_end: u64) -> Result<(), DelayStoreError> {
        self.mark_firing_all(&[(id, log_end)])
    }

    /// Records, synced, that `id`'s append to its partition is durable (or that it has
    /// nowhere to go). Once per pending message, a loaded one.
    pub fn mark_fired(&mut self, id: u64) -> Result<(), DelayStoreError> {
        self.mark_fired_all(&[id])
    }

    /// [`DelayStore::mark_firing`] for a round of messages, under one sync.
    pub fn mark_firing_all(&mut self, marks: &[(u64, u64)]) -> Result<(), DelayStoreError> {
        let bytes: Vec<u8> = marks
            .iter()
            .flat_map(|(id, log_end)| mark_bytes(FIRING, *id, *log_end))
            .collect();
        self.write_marks(&bytes)?;
        for (id, log_end) in marks {
            if self.loaded.contains_key(id) {
                self.firing.insert(*id, *log_end);
            }
        }
        Ok(())
    }

    /// [`DelayStore::mark_fired`] for a round of messages, under one sync.
    pub fn mark_fired_all(&mut self, ids: &[u64]) -> Result<(), DelayStoreError> {
        let bytes: Vec<u8> = ids
            .iter()
            .flat_map(|id| mark_bytes(FIRED_KIND, *id, 0))
            .collect();
        self.write_marks(&bytes)?;
        for id in ids {
            if let Some(place) = self.loaded.remove(id) {
                self.live_bytes -= u64::from(place.len);
                let key = (place.due_ms, *id);
                self.fired_max = Some(self.fired_max.map_or(key, |m| m.max(key)));
            }
            self.firing.remove(id);
        }
        self.publish_counts();
        Ok(())
    }

    fn write_marks(&mut self, bytes: &[u8]) -> Result<(), DelayStoreError> {
        if bytes.is_empty() {
            return Ok(());
        }
        self.fired
            .write_all(bytes)
            .and_then(|()| self.fired.sync_data())
            .map_err(io(&self.dir.join(FIRED)))
    }

    /// Takes `candidates` (loaded messages the caller took out of its timer, the latest
    /// first to go) out of memory, as far as the invariants allow: returns those that must
    /// stay (the caller arms them again). The window then ends at the latest message kept.
    pub fn unload(&mut self, candidates: Vec<(u64, PendingEntry)>) -> Vec<(u64, PendingEntry)> {
        let leaving: std::collections::HashSet<u64> =
            candidates.iter().map(|(_, e)| e.id).collect();
        let kept_max = self
            .loaded
            .iter()
            .filter(|(id, _)| !leaving.contains(id))
            .map(|(id, p)| (p.due_ms, *id))
            .max();
        let end = match (kept_max, self.fired_max) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        let mut refused = Vec::new();
        for (at, e) in candidates {
            // Messages mid-firing stay (their marks are in memory only while loaded).
            let stays = self.firing.contains_key(&e.id)
                || e.firing_from.is_some()
                || end.is_some_and(|end| e.key() <= end)
                || !self.loaded.contains_key(&e.id);
            if stays {
                refused.push((at, e));
            } else {
                self.loaded.remove(&e.id);
                self.paged_out += 1;
            }
        }
        // Every message kept is at most the new end; everything past it is paged out.
        if self.paged_out > 0 {
            let refused_max = refused.iter().map(|(_, e)| e.key()).max();
            let end = match (end, refused_max) {
                (Some(a), Some(b)) => Some(a.max(b)),
                (a, b) => a.or(b),
            };
            self.window_end = Some(end.unwrap_or((i64::MIN, 0)));
        }
        self.publish_counts();
        refused
    }

    /// Brings the earliest messages past the window into memory, up to half of
    /// `max_loaded` (the other half is room for accepts before the next unload, so an
    /// unload and a refill do not follow each other): returns them, by key (the caller
    /// arms them). Reads the whole index.
    pub fn refill(&mut self) -> Result<Vec<PendingEntry>, DelayStoreError> {
        let Some(end) = self.window_end else {
            return Ok(Vec::new());
        };
        let room = (self.max_loaded / 2).saturating_sub(self.loaded.len());
        if room == 0 {
            return Ok(Vec::new());
        }
        let path = self.dir.join(INDEX);
        let mut earliest = Earliest::new(room);
        let mut rd = IndexReader::new(BufReader::with_capacity(
            1 << 20,
            File::open(&path).map_err(io(&path))?,
        ));
        loop {
            match rd.next_record() {
                Ok(Some(r)) => {
                    if r.key() > end && !self.loaded.contains_key(&r.id) {
                        earliest.push(r);
                    }
                }
                Ok(None) => break,
                Err(_) => {
                    return Err(DelayStoreError::Damaged { path, at: rd.at });
                }
            }
        }
        let (next, more) = earliest.into_sorted();
        self.window_end = match more {
            true => next.last().map(IndexRecord::key),
            false => None,
        };
        self.paged_out -= next.len().min(self.paged_out);
        let entries = next
            .into_iter()
            .map(|r| load(r, &mut self.loaded, &self.firing))
            .collect();
        self.publish_counts();
        Ok(entries)
    }

    /// The bytes of `pending.log`.
    pub fn file_bytes(&self) -> u64 {
        self.pending_len
    }

    /// Empties the files when nothing is pending, or compacts them when the fired records'
    /// bytes reach both the live ones' and the threshold (module docs).
    pub fn reclaim(&mut self) -> Result<(), DelayStoreError> {
        if self.live() == 0 {
            return self.reset_if_drained();
        }
        let dead = self.pending_len - self.live_bytes;
        if dead < self.compact_min_dead || dead < self.live_bytes {
            return Ok(());
        }
        self.compact()
    }

    /// Whether the index record `r` is of a live message (see the invariants).
    fn is_live(&self, r: &IndexRecord) -> bool {
        self.loaded.contains_key(&r.id) || self.window_end.is_some_and(|end| r.key() > end)
    }

    fn compact(&mut self) -> Result<(), DelayStoreError> {
        let pending_next = self.dir.join(PENDING_NEXT);
        let fired_next = self.dir.join(FIRED_NEXT);
        let index_next = self.dir.join(INDEX_NEXT);
        let index_path = self.dir.join(INDEX);
        // The live records, in their order, to pending.next; their index to its own.
        let mut moved = HashMap::with_capacity(self.loaded.len());
        let written = (|| -> Result<u64, DelayStoreError> {
            let mut out = BufWriter::with_capacity(
                1 << 20,
                File::create(&pending_next).map_err(io(&pending_next))?,
            );
            let mut index_out = BufWriter::with_capacity(
                1 << 20,
                File::create(&index_next).map_err(io(&index_next))?,
            );
            let mut rd = IndexReader::new(BufReader::with_capacity(
                1 << 20,
                File::open(&index_path).map_err(io(&index_path))?,
            ));
            let mut at = 0u64;
            let mut rec = Vec::new();
            let mut encoded = Vec::new();
            loop {
                let r = match rd.next_record() {
                    Ok(Some(r)) => r,
                    Ok(None) => break,
                    Err(_) => {
                        return Err(DelayStoreError::Damaged {
                            path: index_path.clone(),
                            at: rd.at,
                        })
                    }
                };
                if !self.is_live(&r) {
                    continue;
                }
                rec.resize(r.len as usize, 0);
                self.pending
                    .read_exact_at(&mut rec, r.at)
                    .map_err(io(&self.dir.join(PENDING)))?;
                out.write_all(&rec).map_err(io(&pending_next))?;
                let r = IndexRecord { at, ..r };
                encoded.clear();
                r.encode(&mut encoded);
                index_out.write_all(&encoded).map_err(io(&index_next))?;
                if self.loaded.contains_key(&r.id) {
                    moved.insert(r.id, at);
                }
                at += u64::from(r.len);
            }
            index_out.flush().map_err(io(&index_next))?;
            let f = out
                .into_inner()
                .map_err(|e| io(&pending_next)(e.into_error()))?;
            f.sync_all().map_err(io(&pending_next))?;
            // The marks a live message needs, after one that keeps ids above all used (the
            // last id, unless it is live: then pending.log holds it).
            let mut marks = Vec::with_capacity((self.firing.len() + 1) * MARK_LEN);
            if let Some((due_ms, last)) = self.last_key {
                let live = self.loaded.contains_key(&last)
                    || self.window_end.is_some_and(|end| (due_ms, last) > end);
                if !live {
                    marks.extend_from_slice(&mark_bytes(FIRED_KIND, last, 0));
                }
            }
            for (id, from) in &self.firing {
                marks.extend_from_slice(&mark_bytes(FIRING, *id, *from));
            }
            let mut f = File::create(&fired_next).map_err(io(&fired_next))?;
            f.write_all(&marks)
                .and_then(|()| f.sync_all())
                .map_err(io(&fired_next))?;
            Ok(at)
        })();
        let new_len = match written {
            Ok(n) => n,
            Err(e) => {
                for p in [&pending_next, &fired_next, &index_next] {
                    let _ = std::fs::remove_file(p);
                }
                return Err(e);
            }
        };
        let pending_path = self.dir.join(PENDING);
        std::fs::rename(&pending_next, &pending_path).map_err(io(&pending_path))?;
        sync_dir(&self.dir)?;
        // From here the new pending.log is the store's, whatever happens to fired.log (the
        // old one says the same of every live message).
        self.pending = open_rw(&pending_path)?;
        self.pending_len = new_len;
        for (id, at) in moved {
            if let Some(p) = self.loaded.get_mut(&id) {
                p.at = at;
            }
        }
        self.fired_max = None;
        std::fs::rename(&index_next, &index_path).map_err(io(&index_path))?;
        self.index = open_rw(&index_path)?;
        let fired_path = self.dir.join(FIRED);
        std::fs::rename(&fired_next, &fired_path).map_err(io(&fired_path))?;
        sync_dir(&self.dir)?;
        self.fired = open_rw(&fired_path)?;
        Ok(())
    }

    /// Empties the files once every message appended is marked fired, so they do not grow
    /// without end (the count is kept under the same lock as the appends: a message accepted
    /// meanwhile keeps the files).
    fn reset_if_drained(&mut self) -> Result<(), DelayStoreError> {
        if self.live() > 0 || self.pending_len == 0 {
            return Ok(());
        }
        // pending.log first: a crash between the two leaves marks of ids that are no longer
        // pending (ignored; ids continue above them), never fired messages without marks.
        for name in [PENDING, INDEX, FIRED] {
            let path = self.dir.join(name);
            let f = match name {
                PENDING => &self.pending,
                INDEX => &self.index,
                _ => &self.fired,
            };
            f.set_len(0).map_err(io(&path))?;
            f.sync_data().map_err(io(&path))?;
        }
        self.pending_len = 0;
        self.window_end = None;
        self.fired_max = None;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tempdir() -> tempfile::TempDir {
        tempfile::tempdir().unwrap()
    }

    #[test]
    fn accepted_messages_survive_a_reopen_until_fired() {
        let d = tempdir();
        let (mut s, left) = DelayStore::open(d.path()).unwrap();
        assert!(left.is_empty());
        let a = s.append(100, "t", 0, b"batch-a", usize::MAX).unwrap().entry;
        let b = s.append(50, "u", 3, b"batch-bb", usize::MAX).unwrap().entry;
        let c = s.append(70, "t", 1, b"c", usize::MAX).unwrap().entry;
        assert_eq!((a.id, b.id, c.id), (0, 1, 2));
        s.mark_firing(b.id, 40).unwrap();
        s.mark_fired(b.id).unwrap();
        s.mark_firing(c.id, 9).unwrap();
        drop(s);
        let (s, left) = DelayStore::open(d.path()).unwrap();
        // By due time.
        assert_eq!(left.len(), 2);
        assert_eq!((left[1].id, left[1].due_ms, &*left[1].topic), (0, 100, "t"));
        assert_eq!(left[1].firing_from, None);
        assert_eq!(
            (left[0].id, left[0].partition, left[0].firing_from),
            (2, 1, Some(9))
        );
        assert_eq!(s.read_batch(&left[1]).unwrap(), b"batch-a");
        assert_eq!(s.read_batch(&left[0]).unwrap(), b"c");
    }

    #[test]
    fn ids_stay_unique_across_reopens_and_a_drained_store_is_emptied() {
        let d = tempdir();
        let (mut s, _) = DelayStore::open(d.path()).unwrap();
        let a = s.append(1, "t", 0, b"x", usize::MAX).unwrap().entry;
        assert!(matches!(
            s.append(1, "t", 0, b"x", 1),
            Err(DelayStoreError::Full(1))
        ));
        drop(s);
        let (mut s, left) = DelayStore::open(d.path()).unwrap();
        let b = s.append(2, "t", 0, b"y", usize::MAX).unwrap().entry;
        assert!(b.id > a.id);
        assert_eq!(left.len(), 1);
        for e in [&a, &b] {
            s.mark_fired(e.id).unwrap();
        }
        s.reclaim().unwrap();
        assert_eq!(std::fs::metadata(d.path().join(PENDING)).unwrap().len(), 0);
        drop(s);
        let (_, left) = DelayStore::open(d.path()).unwrap();
        assert!(left.is_empty());
    }

    /// Delayed traffic that never drains: messages of random sizes accepted and fired out of
    /// order, some left mid-firing, with reopens (a crash between a compaction's renames
    /// among them): `pending.log` stays within twice the live bytes plus the threshold, and
    /// every live message reads back whole, with its id and firing mark.
    #[test]
    fn compaction_keeps_the_files_bounded_under_traffic_that_never_drains() {
        const MIN_DEAD: u64 = 64 << 10;
        let d = tempdir();
        let (mut s, _) = DelayStore::open_with(d.path(), MIN_DEAD, usize::MAX).unwrap();
        let mut rng = crate::batch::test_support::Rng(7);
        // id -> (batch, firing mark)
        let mut want: std::collections::BTreeMap<u64, (Vec<u8>, Option<u64>)> = Default::default();
        let mut compactions = 0;
        let mut appended_bytes = 0u64;
        for round in 0..6000u64 {
            let len = 1 + (rng.next() % 2000) as usize;
            let batch: Vec<u8> = (0..len).map(|i| (i as u64 ^ round) as u8).collect();
            let e = s
                .append(round as i64, "t", 3, &batch, usize::MAX)
                .unwrap()
                .entry;
            appended_bytes += len as u64;
            want.insert(e.id, (batch, None));
            // Keep about 200 pending; fire a random one of them (not the oldest).
            while want.len() > 200 {
                let ids: Vec<u64> = want.keys().copied().collect();
                let id = ids[(rng.next() % ids.len() as u64) as usize];
                if rng.next().is_multiple_of(4) && want[&id].1.is_none() {
                    // Left mid-firing: a crash between the marks, as recovery sees it.
                    s.mark_firing(id, round).unwrap();
                    want.get_mut(&id).unwrap().1 = Some(round);
                    continue;
                }
                s.mark_fired(id).unwrap();
                want.remove(&id);
                let before = s.file_bytes();
                s.reclaim().unwrap();
                if s.file_bytes() < before {
                    compactions += 1;
                }
            }
            assert!(
                s.file_bytes() <= 2 * s.live_bytes + MIN_DEAD + 4096,
                "pending.log {} bytes for {} live",
                s.file_bytes(),
                s.live_bytes
            );
            if round % 1500 == 1499 {
                // A reopen; the second one as if a crash came between a compaction's
                // renames (the new pending.log beside the old fired.log).
                let old_fired = std::fs::read(d.path().join(FIRED)).unwrap();
                let at = s.file_bytes();
                s.compact().unwrap();
                assert!(s.file_bytes() <= at);
                if round == 2999 {
                    std::fs::write(d.path().join(FIRED), &old_fired).unwrap();
                }
                drop(s);
                let (again, left) = DelayStore::open_with(d.path(), MIN_DEAD, usize::MAX).unwrap();
                s = again;
                let got: std::collections::BTreeMap<u64, Option<u64>> =
                    left.iter().map(|e| (e.id, e.firing_from)).collect();
                let marks: std::collections::BTreeMap<u64, Option<u64>> =
                    want.iter().map(|(id, (_, m))| (*id, *m)).collect();
                assert_eq!(got, marks, "round {round}");
            }
            if round % 500 == 0 {
                for (id, (batch, _)) in &want {
                    let e = PendingEntry {
                        id: *id,
                        due_ms: 0,
                        topic: String::new(),
                        partition: 0,
                        firing_from: None,
                    };
                    assert_eq!(&s.read_batch(&e).unwrap(), batch, "message {id}");
                }
            }
        }
        assert!(compactions > 10, "{compactions} compactions");
        assert!(appended_bytes > 20 * MIN_DEAD);
        // Ids stay above every id used, across compactions and reopens.
        let next = s.append(0, "t", 0, b"x", usize::MAX).unwrap().entry;
        assert!(next.id >= 6000, "id {} reused", next.id);
    }

    /// The store driven as the shard drives it, with room for 40 messages in memory and
    /// thousands pending: accepts at random due times, firing as time moves (some appends
    /// failing and retried a second later, before or after their *firing* mark), the
    /// latest half unloaded when over the bound, refills at a quarter full, compactions and
    /// reopens along the way. Every message fires once, never early, those never retried
    /// in key order, and memory stays within the bound.
    #[test]
    fn paging_fires_every_message_once_in_order_within_the_memory_bound() {
        const MAX_LOADED: usize = 40;
        for seed in 1..6u64 {
            let d = tempdir();
            let open = || DelayStore::open_with(d.path(), 16 << 10, MAX_LOADED).unwrap();
            let (mut s, first) = open();
            assert!(first.is_empty());
            let mut rng = crate::batch::test_support::Rng(seed * 0x9e37_79b9);
            // The shard's timer: loaded messages by (when to fire, id).
            let mut wheel: std::collections::BTreeMap<(i64, u64), PendingEntry> =
                Default::default();
            let arm = |w: &mut std::collections::BTreeMap<(i64, u64), PendingEntry>,
                       at: i64,
                       e: PendingEntry| {
                w.insert((at, e.id), e);
            };
            let mut accepted: HashMap<u64, i64> = HashMap::new();
            let mut retried: std::collections::HashSet<u64> = Default::default();
            let mut fired: Vec<(Key, i64)> = Vec::new();
            let mut now = 0i64;
            let (mut unloads, mut refills, mut compactions) = (0, 0, 0);
            let batch_of = |id: u64| -> Vec<u8> { vec![id as u8; 1 + (id % 300) as usize] };
            for step in 0..6000 {
                // Accepts outrun firing, then firing catches up (compactions then).
                let accepts = if step < 2500 { 6 } else { 2 };
                let roll = rng.next() % 10;
                match roll {
                    r if r < accepts => {
                        let due = now + (rng.next() % 1_000_000) as i64;
                        let id = s.next_id;
                        let a = s.append(due, "t", 0, &batch_of(id), usize::MAX).unwrap();
                        accepted.insert(a.entry.id, due);
                        if a.loaded {
                            arm(&mut wheel, due, a.entry);
                        }
                        if s.counts.loaded.load(Ordering::Relaxed) > MAX_LOADED {
                            // As the queue does: by key, the latest half.
                            let mut all: Vec<(u64, PendingEntry)> = std::mem::take(&mut wheel)
                                .into_iter()
                                .map(|((at, _), e)| (at as u64, e))
                                .collect();
                            all.sort_by_key(|(_, e)| e.key());
                            let upper = all.split_off(all.len() / 2);
                            unloads += 1;
                            for (at, e) in all.into_iter().chain(s.unload(upper)) {
                                arm(&mut wheel, at as i64, e);
                            }
                        }
                    }
                    r if r < 9 => {
                        now += (rng.next() % 1_000) as i64;
                        loop {
                            if s.counts.paged_out.load(Ordering::Relaxed) > 0
                                && s.counts.loaded.load(Ordering::Relaxed) <= MAX_LOADED / 4
                            {
                                refills += 1;
                                for e in s.refill().unwrap() {
                                    arm(&mut wheel, e.due_ms, e);
                                }
                            }
                            let Some((&(at, id), _)) = wheel.first_key_value() else {
                                break;
                            };
                            if at > now {
                                break;
                            }
                            let mut e = wheel.remove(&(at, id)).unwrap();
                            assert_eq!(s.read_batch(&e).unwrap(), batch_of(e.id), "seed {seed}");
                            match rng.next() % 20 {
                                // The append failed before the firing mark, or after it.
                                0 | 1 => {
                                    if rng.next().is_multiple_of(2) {
                                        s.mark_firing(e.id, 7).unwrap();
                                        e.firing_from = Some(7);
                                    }
                                    retried.insert(e.id);
                                    arm(&mut wheel, now + 1_000, e);
                                    continue;
                                }
                                _ => {}
                            }
                            s.mark_firing(e.id, 0).unwrap();
                            s.mark_fired(e.id).unwrap();
                            fired.push((e.key(), now));
                            let before = s.file_bytes();
                            s.reclaim().unwrap();
                            compactions += usize::from(s.file_bytes() < before && s.live() > 0);
                        }
                    }
                    _ => {
                        if step % 7 == 0 {
                            drop(s);
                            let (again, entries) = open();
                            s = again;
                            wheel.clear();
                            for e in entries {
                                arm(&mut wheel, e.due_ms, e);
                            }
                        }
                    }
                }
                assert!(s.counts.loaded.load(Ordering::Relaxed) <= MAX_LOADED);
                assert_eq!(wheel.len(), s.counts.loaded.load(Ordering::Relaxed));
            }
            // Everything left, in time.
            now = i64::MAX;
            loop {
                for e in s.refill().unwrap() {
                    arm(&mut wheel, e.due_ms, e);
                }
                let Some((_, e)) = wheel.pop_first() else {
                    break;
                };
                s.mark_fired(e.id).unwrap();
                fired.push((e.key(), now));
            }
            assert_eq!(s.live(), 0);
            assert!(
                unloads > 10 && refills > 10 && compactions > 2 && retried.len() > 50,
                "seed {seed}: {unloads} unloads, {refills} refills, {compactions} \
                 compactions, {} retried",
                retried.len()
            );
            let mut ids: Vec<u64> = fired.iter().map(|((_, id), _)| *id).collect();
            ids.sort_unstable();
            ids.dedup();
            assert_eq!(ids.len(), fired.len(), "seed {seed}: a message fired twice");
            assert_eq!(
                ids.len(),
                accepted.len(),
                "seed {seed}: a message never fired"
            );
            let in_order: Vec<Key> = fired
                .iter()
                .map(|(k, _)| *k)
                .filter(|(_, id)| !retried.contains(id))
                .collect();
            for w in in_order.windows(2) {
                assert!(w[0] < w[1], "seed {seed}: out of order: {w:?}");
            }
            for ((due, _), at) in &fired {
                assert!(at >= due, "seed {seed}: fired early");
            }
        }
    }

    /// A message that fired out of key order (the one before it is being retried) is not
    /// brought back by a refill after an unload: the window never ends below it.
    #[test]
    fn a_refill_never_brings_back_a_message_fired_out_of_order() {
        let d = tempdir();
        let (mut s, _) = DelayStore::open_with(d.path(), u64::MAX, 4).unwrap();
        let a = s.append(10, "t", 0, b"a", usize::MAX).unwrap().entry;
        let b = s.append(20, "t", 0, b"b", usize::MAX).unwrap().entry;
        let c = s.append(30, "t", 0, b"c", usize::MAX).unwrap().entry;
        // a's append failed and waits for its retry; b fires.
        s.mark_fired(b.id).unwrap();
        let kept = s.unload(vec![(30, c.clone())]);
        assert!(kept.is_empty(), "c goes back to disk");
        assert_eq!(s.live(), 2);
        let back = s.refill().unwrap();
        assert_eq!(back.iter().map(|e| e.id).collect::<Vec<_>>(), vec![c.id]);
        s.mark_fired(a.id).unwrap();
        s.mark_fired(c.id).unwrap();
        assert_eq!(s.live(), 0);
    }

    /// A group commit answers each message: those past `max_live` are refused, the others
    /// stored, with consecutive ids, and all there after a reopen.
    #[test]
    fn a_group_commit_answers_each_message() {
        let d = tempdir();
        let (mut s, _) = DelayStore::open(d.path()).unwrap();
        let items: Vec<(i64, String, u32, Vec<u8>)> = (0..5)
            .map(|i| {
                (
                    100 - i as i64,
                    format!("t{i}"),
                    i,
                    vec![i as u8; 10 + i as usize],
                )
            })
            .collect();
        let answers = s.append_all(&items, 3).unwrap();
        let ids: Vec<Option<u64>> = answers
            .iter()
            .map(|a| a.as_ref().ok().map(|a| a.entry.id))
            .collect();
        assert_eq!(ids, vec![Some(0), Some(1), Some(2), None, None]);
        assert!(matches!(answers[3], Err(DelayStoreError::Full(3))));
        drop(s);
        let (s, left) = DelayStore::open(d.path()).unwrap();
        assert_eq!(left.iter().map(|e| e.id).collect::<Vec<_>>(), vec![2, 1, 0]);
        for e in &left {
            assert_eq!(s.read_batch(e).unwrap(), items[e.id as usize].3);
            assert_eq!(e.topic, items[e.id as usize].1);
        }
    }

    #[test]
    fn a_torn_tail_is_cut_and_damage_refuses_the_open() {
        let d = tempdir();
        let (mut s, _) = DelayStore::open(d.path()).unwrap();
        s.append(1, "t", 0, b"first", usize::MAX).unwrap();
        s.append(2, "t", 0, b"second", usize::MAX).unwrap();
        s.mark_firing(0, 5).unwrap();
        drop(s);
        let pending = d.path().join(PENDING);
        let fired = d.path().join(FIRED);
        let full = std::fs::read(&pending).unwrap();
        // A crash inside the second append, and inside a mark.
        std::fs::write(&pending, &full[..full.len() - 3]).unwrap();
        let mut f = OpenOptions::new().append(true).open(&fired).unwrap();
        f.write_all(&[2, 0, 0]).unwrap();
        drop(f);
        let (_, left) = DelayStore::open(d.path()).unwrap();
        assert_eq!(left.len(), 1);
        assert_eq!(left[0].firing_from, Some(5));
        assert_eq!(std::fs::metadata(&fired).unwrap().len(), MARK_LEN as u64);
        // A flipped byte inside the first record, with a record after it: damage.
        let mut bad = full.clone();
        bad[12] ^= 1;
        std::fs::write(&pending, &bad).unwrap();
        assert!(matches!(
            DelayStore::open(d.path()),
            Err(DelayStoreError::Damaged { at: 0, .. })
        ));
    }
}
