//! Walking the batches of a segment region: what recovery, index rebuilds and reads share.

use crate::batch::{BatchError, BatchView};

/// One batch found by a scan, by position in the segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScannedBatch {
    pub position: u64,
    pub len: u32,
    pub base_offset: u64,
    pub next_offset: u64,
    pub max_timestamp: i64,
}

/// Where a scan of a buffer stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScanStop {
    /// The buffer ended exactly after a batch.
    End,
    /// A batch header at `position` says it is `need` bytes long, more than the buffer has.
    Truncated { position: u64, need: usize },
    /// Bytes at `position` are not a valid batch (torn write, zeros, garbage).
    Invalid { position: u64, error: BatchError },
    /// The batch at `position` does not continue the offsets (expected `expected`).
    Discontiguous {
        position: u64,
        expected: u64,
        found: u64,
    },
}

/// Checks (header + CRC) and lists consecutive batches in `buf`, which starts at segment
/// position `start`. `expected_offset` is the offset the first batch must start at, if known.
pub fn scan(
    buf: &[u8],
    start: u64,
    mut expected_offset: Option<u64>,
    out: &mut Vec<ScannedBatch>,
) -> ScanStop {
    let mut at = 0usize;
    loop {
        let position = start + at as u64;
        if at == buf.len() {
            return ScanStop::End;
        }
        let view = match BatchView::parse_checked(&buf[at..]) {
            Ok(v) => v,
            Err(BatchError::Truncated { need, have }) if have >= crate::batch::HEADER_LEN => {
                return ScanStop::Truncated { position, need };
            }
            Err(error) => return ScanStop::Invalid { position, error },
        };
        let h = view.header();
        if h.record_count == 0 {
            return ScanStop::Invalid {
                position,
                error: BatchError::Empty,
            };
        }
        if let Some(expected) = expected_offset {
            if h.base_offset != expected {
                return ScanStop::Discontiguous {
                    position,
                    expected,
                    found: h.base_offset,
                };
            }
        }
        out.push(ScannedBatch {
            position,
            len: h.length,
            base_offset: h.base_offset,
            next_offset: h.next_offset(),
            max_timestamp: h.max_timestamp_ms,
        });
        expected_offset = Some(h.next_offset());
        at += view.len();
    }
}
