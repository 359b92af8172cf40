//! The sparse offset and time index of one segment.
//!
//! An entry is taken at the first batch and then at the first batch after every
//! `index_interval_bytes` of log. Each entry names a batch's base offset, its byte position,
//! and the largest timestamp of every batch *before* it, so a time lookup may start at the last
//! entry whose earlier records are all older than the time asked for.

/// One index point.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexEntry {
    pub offset: u64,
    pub position: u32,
    pub max_timestamp_before: i64,
}

/// The in-memory index of a segment, persisted as `<base>.index` (relative offset, position)
/// and `<base>.timeindex` (timestamp, relative offset) when the segment is closed.
#[derive(Debug, Clone, Default)]
pub struct SparseIndex {
    entries: Vec<IndexEntry>,
    interval: u32,
    bytes_since_entry: u32,
    max_timestamp: i64,
}

const INDEX_ENTRY: usize = 8;
const TIME_ENTRY: usize = 12;
/// max timestamp (8), bytes since the last entry (4), size (8), next offset (8), CRC (4).
const TRAILER: usize = 32;

/// What a closed segment holds, as recorded in its index trailer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentExtent {
    /// Bytes of batch data (the file's length once closed).
    pub size: u64,
    /// The offset after its last record.
    pub next_offset: u64,
}

impl SparseIndex {
    pub fn new(interval: u32) -> Self {
        SparseIndex {
            entries: Vec::new(),
            interval: interval.max(1),
            bytes_since_entry: 0,
            max_timestamp: i64::MIN,
        }
    }

    /// Records a batch appended at `position`. Positions and offsets must grow.
    pub fn on_batch(&mut self, offset: u64, position: u32, len: u32, max_timestamp: i64) {
        if let Some(last) = self.entries.last() {
            assert!(
                offset > last.offset && position > last.position,
                "index must grow"
            );
        }
        if self.entries.is_empty() || self.bytes_since_entry >= self.interval {
            self.entries.push(IndexEntry {
                offset,
                position,
                max_timestamp_before: self.max_timestamp,
            });
            self.bytes_since_entry = 0;
        }
        self.bytes_since_entry = self.bytes_since_entry.saturating_add(len);
        self.max_timestamp = self.max_timestamp.max(max_timestamp);
    }

    /// Where to start scanning for `offset`: the (position, base offset) of the last entry
    /// at or before it; `None` before the first entry (scan from the segment's start).
    pub fn entry_for_offset(&self, offset: u64) -> Option<(u32, u64)> {
        match self.entries.partition_point(|e| e.offset <= offset) {
            0 => None,
            i => Some((self.entries[i - 1].position, self.entries[i - 1].offset)),
        }
    }

    /// The byte position to start scanning from for `offset`.
    pub fn position_for_offset(&self, offset: u64) -> u32 {
        self.entry_for_offset(offset).map_or(0, |(p, _)| p)
    }

    /// The byte position to start scanning from for the first record at or after `ts`.
    pub fn position_for_timestamp(&self, ts: i64) -> u32 {
        match self
            .entries
            .partition_point(|e| e.max_timestamp_before < ts)
        {
            0 => 0,
            i => self.entries[i - 1].position,
        }
    }

    /// The largest timestamp of any batch in the segment (`i64::MIN` when empty).
    pub fn max_timestamp(&self) -> i64 {
        self.max_timestamp
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Encodes the two index files of a closed segment holding `extent`.
    pub fn encode(&self, base_offset: u64, extent: SegmentExtent) -> (Vec<u8>, Vec<u8>) {
        let mut idx = Vec::with_capacity(self.entries.len() * INDEX_ENTRY + TRAILER);
        let mut tidx = Vec::with_capacity(self.entries.len() * TIME_ENTRY);
        for e in &self.entries {
            let rel = (e.offset - base_offset) as u32;
            idx.extend_from_slice(&rel.to_le_bytes());
            idx.extend_from_slice(&e.position.to_le_bytes());
            tidx.extend_from_slice(&e.max_timestamp_before.to_le_bytes());
            tidx.extend_from_slice(&rel.to_le_bytes());
        }
        // The trailer: the segment's max timestamp, bytes since the last entry, its data size
        // and next offset (so a shortened segment or a missing next one is noticed at open),
        // and a CRC of both files, so a torn or stale index is rebuilt instead of trusted.
        idx.extend_from_slice(&self.max_timestamp.to_le_bytes());
        idx.extend_from_slice(&self.bytes_since_entry.to_le_bytes());
        idx.extend_from_slice(&extent.size.to_le_bytes());
        idx.extend_from_slice(&extent.next_offset.to_le_bytes());
        let crc = crc32c::crc32c_append(crc32c::crc32c(&idx), &tidx);
        idx.extend_from_slice(&crc.to_le_bytes());
        (idx, tidx)
    }

    /// Decodes index files written by [`encode`](Self::encode) with the extent they record;
    /// `None` if they are torn or inconsistent.
    pub fn decode(
        base_offset: u64,
        interval: u32,
        idx: &[u8],
        tidx: &[u8],
    ) -> Option<(SparseIndex, SegmentExtent)> {
        if idx.len() < TRAILER
            || !(idx.len() - TRAILER).is_multiple_of(INDEX_ENTRY)
            || !tidx.len().is_multiple_of(TIME_ENTRY)
        {
            return None;
        }
        let n = (idx.len() - TRAILER) / INDEX_ENTRY;
        if tidx.len() / TIME_ENTRY != n {
            return None;
        }
        let body = &idx[..idx.len() - 4];
        let crc = u32::from_le_bytes(idx[idx.len() - 4..].try_into().ok()?);
        if crc32c::crc32c_append(crc32c::crc32c(body), tidx) != crc {
            return None;
        }
        let t = n * INDEX_ENTRY;
        let extent = SegmentExtent {
            size: u64::from_le_bytes(idx[t + 12..t + 20].try_into().ok()?),
            next_offset: u64::from_le_bytes(idx[t + 20..t + 28].try_into().ok()?),
        };
        if extent.next_offset < base_offset {
            return None;
        }
        let mut index = SparseIndex::new(interval);
        for i in 0..n {
            let rel = u32::from_le_bytes(idx[i * 8..i * 8 + 4].try_into().ok()?);
            let position = u32::from_le_bytes(idx[i * 8 + 4..i * 8 + 8].try_into().ok()?);
            let ts = i64::from_le_bytes(tidx[i * 12..i * 12 + 8].try_into().ok()?);
            let trel = u32::from_le_bytes(tidx[i * 12 + 8..i * 12 + 12].try_into().ok()?);
            let offset = base_offset + u64::from(rel);
            if trel != rel || u64::from(position) >= extent.size || offset >= extent.next_offset {
                return None;
            }
            let entry = IndexEntry {
                offset,
                position,
                max_timestamp_before: ts,
            };
            if let Some(last) = index.entries.last() {
                if entry.offset <= last.offset || entry.position <= last.position {
                    return None;
                }
            }
            index.entries.push(entry);
        }
        index.max_timestamp = i64::from_le_bytes(idx[t..t + 8].try_into().ok()?);
        index.bytes_since_entry = u32::from_le_bytes(idx[t + 8..t + 12].try_into().ok()?);
        Some((index, extent))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> SparseIndex {
        let mut ix = SparseIndex::new(100);
        // batches of 60 bytes, 10 records each, timestamps 1000, 1010, ...
        for i in 0..10u64 {
            ix.on_batch(100 + i * 10, (i * 60) as u32, 60, 1000 + i as i64 * 10);
        }
        ix
    }

    #[test]
    fn lookups() {
        let ix = sample();
        assert_eq!(ix.len(), 5); // every second batch crosses 100 bytes
        assert_eq!(ix.position_for_offset(0), 0);
        assert_eq!(ix.position_for_offset(100), 0);
        assert_eq!(ix.position_for_offset(125), 120);
        assert_eq!(ix.position_for_offset(10_000), 480);
        assert_eq!(ix.position_for_timestamp(0), 0);
        // entries at batches 0,2,4,6,8; before batch 4 the max ts is 1030 < 1045
        assert_eq!(ix.position_for_timestamp(1045), 240);
        assert_eq!(ix.position_for_timestamp(1040), 240);
        assert_eq!(ix.position_for_timestamp(1030), 120);
        assert_eq!(ix.max_timestamp(), 1090);
    }

    #[test]
    fn encode_decode_and_reject_torn() {
        let ix = sample();
        let extent = SegmentExtent {
            size: 600,
            next_offset: 200,
        };
        let (a, b) = ix.encode(100, extent);
        let (back, ext) = SparseIndex::decode(100, 100, &a, &b).unwrap();
        assert_eq!(back.entries, ix.entries);
        assert_eq!(back.max_timestamp(), 1090);
        assert_eq!(ext, extent);
        assert!(SparseIndex::decode(100, 100, &a[..a.len() - 1], &b).is_none());
        assert!(SparseIndex::decode(100, 100, &a, &b[..b.len() - 12]).is_none());
        for i in 0..a.len() {
            let mut c = a.clone();
            c[i] ^= 1;
            assert!(
                SparseIndex::decode(100, 100, &c, &b).is_none(),
                "flip at {i}"
            );
        }
        // An extent that the entries do not fit is refused even with a valid CRC.
        let (a, b) = ix.encode(
            100,
            SegmentExtent {
                size: 100,
                next_offset: 200,
            },
        );
        assert!(SparseIndex::decode(100, 100, &a, &b).is_none());
    }
}
