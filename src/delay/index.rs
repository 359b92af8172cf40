//! `pending.idx`: one small record per message in `pending.log` (its due time, id, target
//! and where its record lies), so that bringing the next pending messages into memory reads
//! about 50 bytes per message, not the batches. Derived data: rebuilt from `pending.log` at
//! every open, appended (unsynced) after each accepted message, rewritten by a compaction.
//!
//! Record: `[id u64][due i64][at u64][len u32][batch_from u32][partition u32][topic len u16]
//! [0u16][topic][crc32c u32 of what precedes]`.

use std::io::Read;

use crate::batch::{u32_at, u64_at};

/// The fixed part of a record, before the topic.
const FIXED: usize = 40;

/// What the index says of one message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexRecord {
    pub id: u64,
    pub due_ms: i64,
    /// The message's record in `pending.log`: its first byte, its length (header
    /// included) and the batch's offset within it.
    pub at: u64,
    pub len: u32,
    pub batch_from: u32,
    pub partition: u32,
    pub topic: String,
}

impl IndexRecord {
    /// Firing order: due time, then acceptance (ids grow).
    pub fn key(&self) -> (i64, u64) {
        (self.due_ms, self.id)
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        let start = out.len();
        out.extend_from_slice(&self.id.to_le_bytes());
        out.extend_from_slice(&self.due_ms.to_le_bytes());
        out.extend_from_slice(&self.at.to_le_bytes());
        out.extend_from_slice(&self.len.to_le_bytes());
        out.extend_from_slice(&self.batch_from.to_le_bytes());
        out.extend_from_slice(&self.partition.to_le_bytes());
        // Topic names are at most u16::MAX bytes (checked when the message is accepted).
        out.extend_from_slice(&(self.topic.len() as u16).to_le_bytes());
        out.extend_from_slice(&[0, 0]);
        out.extend_from_slice(self.topic.as_bytes());
        let crc = crc32c::crc32c(&out[start..]);
        out.extend_from_slice(&crc.to_le_bytes());
    }
}

/// Reads records one by one from the start of an index file.
pub struct IndexReader<R> {
    r: R,
    buf: Vec<u8>,
    /// Bytes read so far (where a bad record starts).
    pub at: u64,
}

impl<R: Read> IndexReader<R> {
    pub fn new(r: R) -> Self {
        IndexReader {
            r,
            buf: Vec::with_capacity(FIXED + 64),
            at: 0,
        }
    }

    /// The next record; `Ok(None)` at the end; `Err` for a torn or damaged one (the index
    /// is rebuilt from `pending.log` at open, so this is damage after the open).
    pub fn next_record(&mut self) -> std::io::Result<Option<IndexRecord>> {
        let bad =
            |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_string());
        self.buf.resize(FIXED, 0);
        match read_full(&mut self.r, &mut self.buf)? {
            0 => return Ok(None),
            n if n < FIXED => return Err(bad("a torn index record")),
            _ => {}
        }
        let topic_len = u16::from_le_bytes([self.buf[36], self.buf[37]]) as usize;
        self.buf.resize(FIXED + topic_len + 4, 0);
        if read_full(&mut self.r, &mut self.buf[FIXED..])? < topic_len + 4 {
            return Err(bad("a torn index record"));
        }
        let body = FIXED + topic_len;
        if crc32c::crc32c(&self.buf[..body]) != u32_at(&self.buf, body) {
            return Err(bad(&format!("a damaged index record at byte {}", self.at)));
        }
        let topic = std::str::from_utf8(&self.buf[FIXED..body])
            .map_err(|_| bad("an index record's topic is not UTF-8"))?
            .to_string();
        let b = &self.buf;
        let rec = IndexRecord {
            id: u64_at(b, 0),
            due_ms: u64_at(b, 8) as i64,
            at: u64_at(b, 16),
            len: u32_at(b, 24),
            batch_from: u32_at(b, 28),
            partition: u32_at(b, 32),
            topic,
        };
        self.at += (body + 4) as u64;
        Ok(Some(rec))
    }
}

/// Reads until `buf` is full or the end; how many bytes it read.
fn read_full(r: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_damage_is_an_error() {
        let recs: Vec<IndexRecord> = (0..50u64)
            .map(|i| IndexRecord {
                id: i,
                due_ms: 1_000 - i as i64,
                at: i * 77,
                len: 77,
                batch_from: 30,
                partition: i as u32 % 3,
                topic: "t".repeat(i as usize % 7),
            })
            .collect();
        let mut bytes = Vec::new();
        for r in &recs {
            r.encode(&mut bytes);
        }
        let mut rd = IndexReader::new(&bytes[..]);
        let mut got = Vec::new();
        while let Some(r) = rd.next_record().unwrap() {
            got.push(r);
        }
        assert_eq!(got, recs);
        let mut bad = bytes.clone();
        bad[100] ^= 1;
        let mut rd = IndexReader::new(&bad[..]);
        assert!((0..50).any(|_| rd.next_record().is_err()));
        let mut rd = IndexReader::new(&bytes[..bytes.len() - 2]);
        assert!((0..50).any(|_| rd.next_record().is_err()));
    }
}
