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
    /// Where its batch lies in `pending.log`.
    batch_at: u64,
    batch_len: u32,
    /// Set when a *firing* mark (and no *fired*) was found: the target's log end before the
    /// interrupted append.
    pub firing_from: Option<u64>,
}

/// See the module docs.
pub struct DelayStore {
    dir: PathBuf,
    pending: File,
    pending_len: u64,
    fired: File,
    next_id: u64,
    /// Messages appended (or recovered) and not marked fired: the files are emptied at 0.
    live: usize,
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

impl DelayStore {
    /// Opens (creating) the store in `dir` and returns the messages not yet fired, in the
    /// order they were accepted.
    pub fn open(dir: &Path) -> Result<(DelayStore, Vec<PendingEntry>), DelayStoreError> {
        std::fs::create_dir_all(dir).map_err(io(dir))?;
        let pending_path = dir.join(PENDING);
        let fired_path = dir.join(FIRED);
        let mut pending = open_rw(&pending_path)?;
        let mut fired = open_rw(&fired_path)?;

        let bytes = read_all(&mut pending, &pending_path)?;
        let mut entries: Vec<PendingEntry> = Vec::new();
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
            let batch_at = (at + 8 + BODY_FIXED + topic_len) as u64;
            entries.push(PendingEntry {
                id,
                due_ms: u64_at(body, 8) as i64,
                topic: topic.to_string(),
                partition: u32_at(body, 16),
                batch_at,
                batch_len: (len - BODY_FIXED - topic_len) as u32,
                firing_from: None,
            });
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
        let left: Vec<PendingEntry> = entries
            .into_iter()
            .filter_map(|mut e| match state.get(&e.id) {
                Some(None) => None,
                Some(Some(from)) => {
                    e.firing_from = Some(*from);
                    Some(e)
                }
                None => Some(e),
            })
            .collect();
        let store = DelayStore {
            dir: dir.to_path_buf(),
            pending,
            pending_len,
            fired,
            next_id,
            live: left.len(),
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
        if self.live >= max_live {
            return Err(DelayStoreError::Full(self.live));
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
            batch_at: self.pending_len + 8 + (BODY_FIXED + topic.len()) as u64,
            batch_len: batch.len() as u32,
            firing_from: None,
        };
        self.pending_len += rec.len() as u64;
        self.next_id += 1;
        self.live += 1;
        Ok(entry)
    }

    /// Reads a pending message's batch.
    pub fn read_batch(&self, e: &PendingEntry) -> Result<Vec<u8>, DelayStoreError> {
        let mut b = vec![0u8; e.batch_len as usize];
        self.pending
            .read_exact_at(&mut b, e.batch_at)
            .map_err(io(&self.dir.join(PENDING)))?;
        Ok(b)
    }

    /// Records, synced, that `id` is about to be appended to its partition, whose log ends
    /// at `log_end`.
    pub fn mark_firing(&mut self, id: u64, log_end: u64) -> Result<(), DelayStoreError> {
        self.mark(FIRING, id, log_end)
    }

    /// Records, synced, that `id`'s append to its partition is durable (or that it has
    /// nowhere to go). Once per pending message.
    pub fn mark_fired(&mut self, id: u64) -> Result<(), DelayStoreError> {
        self.mark(FIRED_KIND, id, 0)?;
        self.live = self.live.saturating_sub(1);
        Ok(())
    }

    fn mark(&mut self, kind: u8, id: u64, offset: u64) -> Result<(), DelayStoreError> {
        let mut m = [0u8; MARK_LEN];
        m[0] = kind;
        m[8..16].copy_from_slice(&id.to_le_bytes());
        m[16..24].copy_from_slice(&offset.to_le_bytes());
        let crc = crc32c::crc32c(&m[8..]);
        m[4..8].copy_from_slice(&crc.to_le_bytes());
        self.fired
            .write_all(&m)
            .and_then(|()| self.fired.sync_data())
            .map_err(io(&self.dir.join(FIRED)))
    }

    /// Empties both files once every message appended is marked fired, so they do not grow
    /// without end (the count is kept under the same lock as the appends: a message accepted
    /// meanwhile keeps the files).
    pub fn reset_if_drained(&mut self) -> Result<(), DelayStoreError> {
        if self.live > 0 || self.pending_len == 0 {
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
        s.reset_if_drained().unwrap();
        assert_eq!(std::fs::metadata(d.path().join(PENDING)).unwrap().len(), 0);
        drop(s);
        let (_, left) = DelayStore::open(d.path()).unwrap();
        assert!(left.is_empty());
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
