//! The producer-state snapshot file (Kafka's `<offset>.snapshot`): the state of every producer
//! as of an offset, so a restart replays only the batches after it instead of the whole log.
//!
//! One file per partition, `producer-state`, replaced atomically. Layout (little-endian):
//! magic `RPS1`, the offset it covers (u64: every batch below it is in the state), the
//! producer count (u32), per producer: id (i64), epoch (i16), last timestamp (i64), batch
//! count (u8), per batch: first and last sequence (i32 each), base and last offset (u64
//! each); then CRC32C of everything before it. A file that does not decode, or that claims
//! offsets past the log end, is ignored: the state is rebuilt from the log.

use super::producer_state::{BatchMeta, ProducerStates, BATCHES_KEPT};

pub const SNAPSHOT_FILE: &str = "producer-state";
const MAGIC: &[u8; 4] = b"RPS1";

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
    if r.take(4)? != MAGIC {
        return None;
    }
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
        states.restore_entry(id, epoch, last_timestamp, batches)?;
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
    use crate::partition::producer_state::ProducerBatch;

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
