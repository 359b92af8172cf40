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
//! Recovery keeps, per pending message, its due time and place in `pending.log` (about 40
//! bytes), not its batch: [`DelayStore::read_batch`] reads the batch when it is due. A torn
//! record at the end of either file (a crash inside an append, never acknowledged) is cut; a
//! record that fails its CRC with data after it is damage and refuses the open.
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

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

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
/// Where a compaction writes before its renames; left over from a crash, removed at open.
const PENDING_NEXT: &str = "pending.next";
const FIRED_NEXT: &str = "fired.next";
/// Compaction waits for at least this many bytes of fired records.
pub const COMPACT_MIN_DEAD_BYTES: u64 = 64 << 20;
const MARK_LEN: usize = 24;
const FIRING: u8 = 1;
const FIRED_KIND: u8 = 2;
/// Fixed part of a pending record's body before the topic.
const BODY_FIXED: usize = 8 + 8 + 4 + 2;

/// A pending message as recovery knows it: where its batch is, not the batch.
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

/// Where a pending message's record lies in `pending.log`.
#[derive(Debug, Clone, Copy)]
struct Place {
    /// The record's first byte (its length field).
    at: u64,
    /// The whole record's length, header included.
    len: u32,
    /// The batch's offset within the record.
    batch_from: u32,
}

/// See the module docs.
pub struct DelayStore {
    dir: PathBuf,
    pending: File,
    pending_len: u64,
    fired: File,
    next_id: u64,
    /// Messages appended (or recovered) and not marked fired, by id: the files are emptied
    /// when none is left, compacted when the fired ones' bytes dominate.
    live: HashMap<u64, Place>,
    /// The bytes of `live`'s records.
    live_bytes: u64,
    /// Live messages with a *firing* mark: the log end it logged (a compaction keeps it).
    firing: HashMap<u64, u64>,
    compact_min_dead: u64,
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

impl DelayStore {
    /// Opens (creating) the store in `dir` and returns the messages not yet fired, in the
    /// order they were accepted.
    pub fn open(dir: &Path) -> Result<(DelayStore, Vec<PendingEntry>), DelayStoreError> {
        Self::open_with(dir, COMPACT_MIN_DEAD_BYTES)
    }

    /// [`DelayStore::open`] compacting once `compact_min_dead` bytes are fired (tests use
    /// small ones).
    pub fn open_with(
        dir: &Path,
        compact_min_dead: u64,
    ) -> Result<(DelayStore, Vec<PendingEntry>), DelayStoreError> {
        std::fs::create_dir_all(dir).map_err(io(dir))?;
        // A compaction a crash interrupted before its renames: the old files are whole.
        for name in [PENDING_NEXT, FIRED_NEXT] {
            match std::fs::remove_file(dir.join(name)) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(io(&dir.join(name))(e)),
            }
        }
        let pending_path = dir.join(PENDING);
        let fired_path = dir.join(FIRED);
        let mut pending = open_rw(&pending_path)?;
        let mut fired = open_rw(&fired_path)?;

        let bytes = read_all(&mut pending, &pending_path)?;
        let mut entries: Vec<(PendingEntry, Place)> = Vec::new();
        let mut at = 0usize;
        let mut next_id = 0u64;
        while at < bytes.len() {
            let whole = |need: usize| at + need <= bytes.len();
            if !whole(8) || !whole(8 + u32_at(&bytes, at) as usize) {
                break; // torn tail
            }
            let len = u32_at(&bytes, at) as usize;
            let body = &bytes[at + 8..at + 8 + len];
            if len < BODY_FIXED || crc32c::crc32c(body) != u32_at(&bytes, at + 4) {
                return Err(DelayStoreError::Damaged {
                    path: pending_path,
                    at: at as u64,
                });
            }
            let topic_len = u16::from_le_bytes([body[20], body[21]]) as usize;
            let topic = body
                .get(BODY_FIXED..BODY_FIXED + topic_len)
                .and_then(|t| std::str::from_utf8(t).ok())
                .ok_or_else(|| DelayStoreError::Damaged {
                    path: pending_path.clone(),
                    at: at as u64,
                })?;
            let id = u64_at(body, 0);
            next_id = next_id.max(id + 1);
            let place = Place {
                at: at as u64,
                len: (8 + len) as u32,
                batch_from: (8 + BODY_FIXED + topic_len) as u32,
            };
            entries.push((
                PendingEntry {
                    id,
                    due_ms: u64_at(body, 8) as i64,
                    topic: topic.to_string(),
                    partition: u32_at(body, 16),
                    firing_from: None,
                },
                place,
            ));
            at += 8 + len;
        }
        if at < bytes.len() {
            pending.set_len(at as u64).map_err(io(&pending_path))?;
            pending.sync_data().map_err(io(&pending_path))?;
        }
        let pending_len = at as u64;

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
        if whole_marks < marks.len() {
            fired.set_len(whole_marks as u64).map_err(io(&fired_path))?;
            fired.sync_data().map_err(io(&fired_path))?;
        }
        let mut live = HashMap::new();
        let mut live_bytes = 0;
        let mut firing = HashMap::new();
        let left: Vec<PendingEntry> = entries
            .into_iter()
            .filter_map(|(mut e, place)| {
                match state.get(&e.id) {
                    Some(None) => return None,
                    Some(Some(from)) => {
                        e.firing_from = Some(*from);
                        firing.insert(e.id, *from);
                    }
                    None => {}
                }
                live.insert(e.id, place);
                live_bytes += u64::from(place.len);
                Some(e)
            })
            .collect();
        let store = DelayStore {
            dir: dir.to_path_buf(),
            pending,
            pending_len,
            fired,
            next_id,
            live,
            live_bytes,
            firing,
            compact_min_dead,
        };
        Ok((store, left))
    }

    /// Appends an accepted message and syncs it; returns its entry (the id it was given).
    /// Refused with [`DelayStoreError::Full`] when `max_live` are pending.
    pub fn append(
        &mut self,
        due_ms: i64,
        topic: &str,
        partition: u32,
        batch: &[u8],
        max_live: usize,
    ) -> Result<PendingEntry, DelayStoreError> {
        if self.live.len() >= max_live {
            return Err(DelayStoreError::Full(self.live.len()));
        }
        let path = self.dir.join(PENDING);
        let id = self.next_id;
        let topic_len = u16::try_from(topic.len()).map_err(|_| {
            io(&path)(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "topic name too long",
            ))
        })?;
        let mut body = Vec::with_capacity(BODY_FIXED + topic.len() + batch.len());
        body.extend_from_slice(&id.to_le_bytes());
        body.extend_from_slice(&due_ms.to_le_bytes());
        body.extend_from_slice(&partition.to_le_bytes());
        body.extend_from_slice(&topic_len.to_le_bytes());
        body.extend_from_slice(topic.as_bytes());
        body.extend_from_slice(batch);
        let len = u32::try_from(body.len()).map_err(|_| {
            io(&path)(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "delayed batch too large",
            ))
        })?;
        let mut rec = Vec::with_capacity(8 + body.len());
        rec.extend_from_slice(&len.to_le_bytes());
        rec.extend_from_slice(&crc32c::crc32c(&body).to_le_bytes());
        rec.extend_from_slice(&body);
        let written = self
            .pending
            .write_all(&rec)
            .and_then(|()| self.pending.sync_data());
        if let Err(e) = written {
            // Leave no half record behind an error the producer is told about.
            let _ = self.pending.set_len(self.pending_len);
            return Err(io(&path)(e));
        }
        let entry = PendingEntry {
            id,
            due_ms,
            topic: topic.to_string(),
            partition,
            firing_from: None,
        };
        let place = Place {
            at: self.pending_len,
            len: rec.len() as u32,
            batch_from: (8 + BODY_FIXED + topic.len()) as u32,
        };
        self.live.insert(id, place);
        self.live_bytes += u64::from(place.len);
        self.pending_len += rec.len() as u64;
        self.next_id += 1;
        Ok(entry)
    }

    /// Reads a pending message's batch.
    pub fn read_batch(&self, e: &PendingEntry) -> Result<Vec<u8>, DelayStoreError> {
        let path = self.dir.join(PENDING);
        let place = self.live.get(&e.id).ok_or_else(|| {
            io(&path)(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!("delayed message {} is not pending", e.id),
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
        self.mark(FIRING, id, log_end)?;
        if self.live.contains_key(&id) {
            self.firing.insert(id, log_end);
        }
        Ok(())
    }

    /// Records, synced, that `id`'s append to its partition is durable (or that it has
    /// nowhere to go). Once per pending message.
    pub fn mark_fired(&mut self, id: u64) -> Result<(), DelayStoreError> {
        self.mark(FIRED_KIND, id, 0)?;
        if let Some(place) = self.live.remove(&id) {
            self.live_bytes -= u64::from(place.len);
        }
        self.firing.remove(&id);
        Ok(())
    }

    fn mark(&mut self, kind: u8, id: u64, offset: u64) -> Result<(), DelayStoreError> {
        self.fired
            .write_all(&mark_bytes(kind, id, offset))
            .and_then(|()| self.fired.sync_data())
            .map_err(io(&self.dir.join(FIRED)))
    }

    /// The bytes of `pending.log`.
    pub fn file_bytes(&self) -> u64 {
        self.pending_len
    }

    /// Empties the files when nothing is pending, or compacts them when the fired records'
    /// bytes reach both the live ones' and the threshold (module docs).
    pub fn reclaim(&mut self) -> Result<(), DelayStoreError> {
        if self.live.is_empty() {
            return self.reset_if_drained();
        }
        let dead = self.pending_len - self.live_bytes;
        if dead < self.compact_min_dead || dead < self.live_bytes {
            return Ok(());
        }
        self.compact()
    }

    fn compact(&mut self) -> Result<(), DelayStoreError> {
        let (pending_next, fired_next) = (self.dir.join(PENDING_NEXT), self.dir.join(FIRED_NEXT));
        let mut order: Vec<(u64, Place)> = self.live.iter().map(|(id, p)| (*id, *p)).collect();
        order.sort_by_key(|(_, p)| p.at);
        // The live records, in their order, to pending.next.
        let mut moved = HashMap::with_capacity(order.len());
        let written = (|| -> Result<u64, DelayStoreError> {
            let mut out = std::io::BufWriter::with_capacity(
                1 << 20,
                File::create(&pending_next).map_err(io(&pending_next))?,
            );
            let mut at = 0u64;
            let mut rec = Vec::new();
            for (id, place) in &order {
                rec.resize(place.len as usize, 0);
                self.pending
                    .read_exact_at(&mut rec, place.at)
                    .map_err(io(&self.dir.join(PENDING)))?;
                out.write_all(&rec).map_err(io(&pending_next))?;
                moved.insert(*id, Place { at, ..*place });
                at += u64::from(place.len);
            }
            let f = out
                .into_inner()
                .map_err(|e| io(&pending_next)(e.into_error()))?;
            f.sync_all().map_err(io(&pending_next))?;
            // The marks a live message needs, after one that keeps ids above all used (the
            // last id, unless it is live: then pending.log holds it).
            let mut marks = Vec::with_capacity((self.firing.len() + 1) * MARK_LEN);
            if let Some(last) = self.next_id.checked_sub(1) {
                if !self.live.contains_key(&last) {
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
                let _ = std::fs::remove_file(&pending_next);
                let _ = std::fs::remove_file(&fired_next);
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
        self.live = moved;
        let fired_path = self.dir.join(FIRED);
        std::fs::rename(&fired_next, &fired_path).map_err(io(&fired_path))?;
        sync_dir(&self.dir)?;
        self.fired = open_rw(&fired_path)?;
        Ok(())
    }

    /// Empties both files once every message appended is marked fired, so they do not grow
    /// without end (the count is kept under the same lock as the appends: a message accepted
    /// meanwhile keeps the files).
    fn reset_if_drained(&mut self) -> Result<(), DelayStoreError> {
        if !self.live.is_empty() || self.pending_len == 0 {
            return Ok(());
        }
        // pending.log first: a crash between the two leaves marks of ids that are no longer
        // pending (ignored; ids continue above them), never fired messages without marks.
        self.pending
            .set_len(0)
            .map_err(io(&self.dir.join(PENDING)))?;
        self.pending
            .sync_data()
            .map_err(io(&self.dir.join(PENDING)))?;
        self.fired.set_len(0).map_err(io(&self.dir.join(FIRED)))?;
        self.fired.sync_data().map_err(io(&self.dir.join(FIRED)))?;
        self.pending_len = 0;
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
        let a = s.append(100, "t", 0, b"batch-a", usize::MAX).unwrap();
        let b = s.append(50, "u", 3, b"batch-bb", usize::MAX).unwrap();
        let c = s.append(70, "t", 1, b"c", usize::MAX).unwrap();
        assert_eq!((a.id, b.id, c.id), (0, 1, 2));
        s.mark_firing(b.id, 40).unwrap();
        s.mark_fired(b.id).unwrap();
        s.mark_firing(c.id, 9).unwrap();
        drop(s);
        let (s, left) = DelayStore::open(d.path()).unwrap();
        assert_eq!(left.len(), 2);
        assert_eq!((left[0].id, left[0].due_ms, &*left[0].topic), (0, 100, "t"));
        assert_eq!(left[0].firing_from, None);
        assert_eq!(
            (left[1].id, left[1].partition, left[1].firing_from),
            (2, 1, Some(9))
        );
        assert_eq!(s.read_batch(&left[0]).unwrap(), b"batch-a");
        assert_eq!(s.read_batch(&left[1]).unwrap(), b"c");
    }

    #[test]
    fn ids_stay_unique_across_reopens_and_a_drained_store_is_emptied() {
        let d = tempdir();
        let (mut s, _) = DelayStore::open(d.path()).unwrap();
        let a = s.append(1, "t", 0, b"x", usize::MAX).unwrap();
        assert!(matches!(
            s.append(1, "t", 0, b"x", 1),
            Err(DelayStoreError::Full(1))
        ));
        drop(s);
        let (mut s, left) = DelayStore::open(d.path()).unwrap();
        let b = s.append(2, "t", 0, b"y", usize::MAX).unwrap();
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
        let (mut s, _) = DelayStore::open_with(d.path(), MIN_DEAD).unwrap();
        let mut rng = crate::batch::test_support::Rng(7);
        // id -> (batch, firing mark)
        let mut want: std::collections::BTreeMap<u64, (Vec<u8>, Option<u64>)> = Default::default();
        let mut compactions = 0;
        let mut appended_bytes = 0u64;
        for round in 0..6000u64 {
            let len = 1 + (rng.next() % 2000) as usize;
            let batch: Vec<u8> = (0..len).map(|i| (i as u64 ^ round) as u8).collect();
            let e = s.append(round as i64, "t", 3, &batch, usize::MAX).unwrap();
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
                let (again, left) = DelayStore::open_with(d.path(), MIN_DEAD).unwrap();
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
        let next = s.append(0, "t", 0, b"x", usize::MAX).unwrap();
        assert!(next.id >= 6000, "id {} reused", next.id);
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
