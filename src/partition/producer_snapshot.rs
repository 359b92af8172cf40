//! The producer-state snapshot file (Kafka's `<offset>.snapshot`): the state of every producer
//! as of an offset, so a restart replays only the batches after it instead of the whole log.
//!
//! One file per partition, `producer-state`, replaced atomically. Layout (little-endian):
//! magic `RPS2`, the offset it covers (u64: every batch below it is in the state), the
//! producer count (u32), per producer: id (i64), epoch (i16), last timestamp (i64), batch
//! count (u8), per batch: first and last sequence (i32 each), base and last offset (u64
//! each), then its open transaction's first offset, its last marker's offset (u64 each,
//! `u64::MAX`: none) and the coordinator epoch of its last marker (i32); then the aborted
//! transactions (u32 count; producer id i64, first and last offset u64 each, in marker
//! order); then CRC32C of everything before it. Version 1 (`RPS1`: no transaction fields,
//! no aborted list) still reads. A file that does not decode, or that claims offsets past
//! the log end, is ignored: the state is rebuilt from the log.

use super::producer_state::{
    AbortedTxn, BatchMeta, ProducerEntry, ProducerStates, BATCHES_KEPT, NO_COORDINATOR_EPOCH,
};

pub const SNAPSHOT_FILE: &str = "producer-state";
const MAGIC_V1: &[u8; 4] = b"RPS1";
const MAGIC: &[u8; 4] = b"RPS2";
const NONE: u64 = u64::MAX;

/// The snapshot of `states` as of `offset`.
pub fn encode(states: &ProducerStates, offset: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(16 + states.len() * (19 + BATCHES_KEPT * 24));
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&offset.to_le_bytes());
    out.extend_from_slice(&(states.len() as u32).to_le_bytes());
    let mut entries: Vec<_> = states.entries().collect();
    // Same state, same bytes.
    entries.sort_by_key(|(id, _)| *id);
    for (id, e) in entries {
        out.extend_from_slice(&id.to_le_bytes());
        out.extend_from_slice(&e.epoch.to_le_bytes());
        out.extend_from_slice(&e.last_timestamp.to_le_bytes());
        let batches: Vec<_> = e.batches().collect();
        out.push(batches.len() as u8);
        for m in batches {
            out.extend_from_slice(&m.first_seq.to_le_bytes());
            out.extend_from_slice(&m.last_seq.to_le_bytes());
            out.extend_from_slice(&m.base_offset.to_le_bytes());
            out.extend_from_slice(&m.last_offset.to_le_bytes());
        }
        out.extend_from_slice(&e.txn_first_offset.unwrap_or(NONE).to_le_bytes());
        out.extend_from_slice(&e.last_marker_offset.unwrap_or(NONE).to_le_bytes());
        out.extend_from_slice(&e.coordinator_epoch.to_le_bytes());
    }
    let aborted: Vec<_> = states.aborted().collect();
    out.extend_from_slice(&(aborted.len() as u32).to_le_bytes());
    for a in aborted {
        out.extend_from_slice(&a.producer_id.to_le_bytes());
        out.extend_from_slice(&a.first_offset.to_le_bytes());
        out.extend_from_slice(&a.last_offset.to_le_bytes());
    }
    let crc = crc32c::crc32c(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// Reads a snapshot: the state and the offset it covers; `None` for anything damaged.
pub fn decode(bytes: &[u8]) -> Option<(ProducerStates, u64)> {
    let body_len = bytes.len().checked_sub(4)?;
    let (body, crc) = bytes.split_at(body_len);
    if crc32c::crc32c(body).to_le_bytes() != crc {
        return None;
    }
    let mut r = Reader(body);
    let v2 = match r.take(4)? {
        m if m == MAGIC => true,
        m if m == MAGIC_V1 => false,
        _ => return None,
    };
    let offset = r.u64()?;
    let count = r.u32()?;
    let mut states = ProducerStates::new();
    for _ in 0..count {
        let id = r.u64()? as i64;
        let epoch = r.take(2).map(|b| i16::from_le_bytes([b[0], b[1]]))?;
        let last_timestamp = r.u64()? as i64;
        let n = usize::from(*r.take(1)?.first()?);
        if n > BATCHES_KEPT {
            return None;
        }
        let mut batches = Vec::with_capacity(n);
        for _ in 0..n {
            let m = BatchMeta {
                first_seq: r.u32()? as i32,
                last_seq: r.u32()? as i32,
                base_offset: r.u64()?,
                last_offset: r.u64()?,
            };
            if m.last_offset >= offset {
                return None;
            }
            batches.push(m);
        }
        let mut entry = ProducerEntry::new(epoch, last_timestamp);
        if v2 {
            let below = |o: u64| (o == NONE || o < offset).then_some((o != NONE).then_some(o));
            entry.txn_first_offset = below(r.u64()?)?;
            entry.last_marker_offset = below(r.u64()?)?;
            entry.coordinator_epoch = r.u32()? as i32;
            if entry.coordinator_epoch < NO_COORDINATOR_EPOCH {
                return None;
            }
        }
        states.restore_entry(id, entry, batches)?;
    }
    if v2 {
        for _ in 0..r.u32()? {
            let a = AbortedTxn {
                producer_id: r.u64()? as i64,
                first_offset: r.u64()?,
                last_offset: r.u64()?,
            };
            if a.last_offset >= offset {
                return None;
            }
            states.restore_aborted(a)?;
        }
    }
    if !r.0.is_empty() || states.len() != count as usize {
        return None;
    }
    Some((states, offset))
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Some(a)
    }
    fn u32(&mut self) -> Option<u32> {
        self.take(4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn u64(&mut self) -> Option<u64> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Some(u64::from_le_bytes(a))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::control::{ControlKind, ControlRecord};
    use crate::partition::producer_state::ProducerBatch;

    fn txn_state() -> ProducerStates {
        let data = |id: i64, seq: i32, transactional: bool| ProducerBatch {
            producer_id: id,
            epoch: 1,
            first_seq: seq,
            record_count: 2,
            max_timestamp: 1000,
            transactional,
            marker: None,
        };
        let marker = |id: i64, kind| ProducerBatch {
            first_seq: -1,
            record_count: 1,
            transactional: true,
            marker: Some(ControlRecord {
                kind,
                coordinator_epoch: 4,
            }),
            ..data(id, -1, true)
        };
        let mut s = ProducerStates::new();
        s.record(&data(1, 0, true), 0);
        s.record(&data(2, 0, true), 2);
        s.record(&data(3, 0, false), 4);
        s.record(&marker(1, ControlKind::Abort), 6);
        s.record(&data(1, 2, true), 7);
        s.record(&marker(2, ControlKind::Commit), 9);
        s.record(&marker(7, ControlKind::Commit), 10);
        // The snapshot covers what is below the high watermark.
        s.replicated_to(11);
        s
    }

    #[test]
    fn transactions_round_trip_and_version_1_still_reads() {
        let s = txn_state();
        assert_eq!(s.first_unstable_offset(), Some(7));
        assert_eq!(s.aborted().count(), 1);
        let bytes = encode(&s, 11);
        assert_eq!(decode(&bytes), Some((s.clone(), 11)));
        // An open transaction or an abort at or past the covered offset is refused.
        assert_eq!(decode(&encode(&s, 8)), None);
        // Version 1: the layout before transactions.
        let mut v1 = Vec::new();
        v1.extend_from_slice(b"RPS1");
        v1.extend_from_slice(&30u64.to_le_bytes());
        v1.extend_from_slice(&1u32.to_le_bytes());
        v1.extend_from_slice(&5i64.to_le_bytes());
        v1.extend_from_slice(&2i16.to_le_bytes());
        v1.extend_from_slice(&77i64.to_le_bytes());
        v1.push(1);
        for v in [0i32, 9] {
            v1.extend_from_slice(&v.to_le_bytes());
        }
        for v in [20u64, 29] {
            v1.extend_from_slice(&v.to_le_bytes());
        }
        let crc = crc32c::crc32c(&v1);
        v1.extend_from_slice(&crc.to_le_bytes());
        let (old, at) = decode(&v1).expect("version 1 reads");
        assert_eq!(at, 30);
        let e = old.get(5).expect("producer 5");
        assert_eq!(
            (e.epoch, e.last_timestamp, e.txn_first_offset),
            (2, 77, None)
        );
        assert_eq!(
            e.last().map(|m| (m.first_seq, m.last_seq, m.base_offset)),
            Some((0, 9, 20))
        );
        assert_eq!(old.aborted().count(), 0);
    }

    #[test]
    fn round_trips_and_refuses_damage() {
        let mut s = ProducerStates::new();
        for i in 0..8 {
            let b = ProducerBatch {
                producer_id: 1 + i64::from(i % 3),
                epoch: 2,
                first_seq: i * 10,
                record_count: 10,
                max_timestamp: 1000 + i64::from(i),
                transactional: false,
                marker: None,
            };
            s.record(&b, u64::from(i as u32) * 10);
        }
        let bytes = encode(&s, 80);
        assert_eq!(decode(&bytes), Some((s.clone(), 80)));
        assert_eq!(
            decode(&encode(&ProducerStates::new(), 0)),
            Some((ProducerStates::new(), 0))
        );
        // Every flipped byte and every cut is caught.
        for i in 0..bytes.len() {
            let mut bad = bytes.clone();
            bad[i] ^= 0x10;
            assert_eq!(decode(&bad), None, "flipped byte {i}");
            assert_eq!(decode(&bytes[..i]), None, "cut at {i}");
        }
        // A snapshot claiming batches at or past its own offset is refused.
        assert_eq!(decode(&encode(&s, 79)), None);
    }
}
