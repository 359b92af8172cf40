//! Walking the batches of a segment file: the one scanner that recovery, index rebuilds, time
//! lookups and copy reads share.
//!
//! A batch is judged whole, never by where a read buffer ended: when a header or a batch runs
//! past the bytes read so far, the window is read again from that batch, as large as the batch
//! needs. Only a batch that claims to run past the end of the data is torn.

use std::path::Path;

use rill_shards::file::DirectFile;
use rill_shards::rt::ReadResult;

use super::error::LogError;
use crate::batch::{BatchError, BatchView, HEADER_LEN};

/// No batch is this large (the frame limit is far below it): a length past it is corruption,
/// and a scan never allocates a window for it.
const MAX_BATCH_BYTES: usize = 1 << 30;

/// One batch found by a scan, by position in the segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScannedBatch {
    pub position: u64,
    pub len: u32,
    pub base_offset: u64,
    pub next_offset: u64,
    pub max_timestamp: i64,
}

impl ScannedBatch {
    /// The position after the batch.
    pub fn end(&self) -> u64 {
        self.position + u64::from(self.len)
    }
}

/// Why a scan stopped before the end of the data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScanStop {
    /// A batch (or its header) at `position` needs `need` bytes, more than the data has left.
    Truncated { position: u64, need: usize },
    /// Bytes at `position` are not a valid batch (torn write, zeros, garbage, a flipped bit).
    Invalid { position: u64, error: BatchError },
    /// The batch at `position` starts below the offsets before it (at least `expected`).
    Discontiguous {
        position: u64,
        expected: u64,
        found: u64,
    },
}

impl ScanStop {
    pub fn position(&self) -> u64 {
        match self {
            ScanStop::Truncated { position, .. }
            | ScanStop::Invalid { position, .. }
            | ScanStop::Discontiguous { position, .. } => *position,
        }
    }

    /// The stop as a corruption error of the file at `path`.
    pub fn corrupt(&self, path: &Path) -> LogError {
        let what = match self {
            ScanStop::Truncated { need, .. } => {
                format!("a batch of {need} bytes runs past the end of the data")
            }
            ScanStop::Invalid { error, .. } => error.to_string(),
            ScanStop::Discontiguous {
                expected, found, ..
            } => format!("batch starts at offset {found}, expected at least {expected}"),
        };
        LogError::Corrupt {
            path: path.to_path_buf(),
            position: self.position(),
            what,
        }
    }
}

/// One step of a scan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScanStep {
    Batch(ScannedBatch),
    /// No further batch: the data ends at `position`; `stop` says why when that is not the end
    /// the scan was given (zeros after the data are a stop of kind `Invalid` too).
    End {
        position: u64,
        stop: Option<ScanStop>,
    },
}

/// What the bytes already read say about the next batch.
enum Parse {
    Step(ScanStep),
    /// The next batch (or its header) needs this many bytes from the current position.
    NeedMore(usize),
}

/// A forward scan over `[start, end)` of a segment file, batch by batch, header + CRC checked,
/// offsets checked to grow once the first batch (or `expected`) is known (gaps are legal:
/// compaction leaves them).
pub struct SegmentScan<'f> {
    file: &'f DirectFile,
    path: &'f Path,
    end: u64,
    /// How much to read at a time (more when one batch is larger).
    chunk: usize,
    window: Option<ReadResult>,
    window_start: u64,
    position: u64,
    expected: Option<u64>,
    /// Check headers only (their CRC, length, contiguous offsets) and step over bodies
    /// without reading them: a walk to a position, not a validation of the data.
    headers_only: bool,
}

impl<'f> SegmentScan<'f> {
    pub fn new(
        file: &'f DirectFile,
        path: &'f Path,
        start: u64,
        end: u64,
        expected: Option<u64>,
        chunk: usize,
    ) -> SegmentScan<'f> {
        SegmentScan {
            file,
            path,
            end,
            chunk: chunk.max(HEADER_LEN),
            window: None,
            window_start: start,
            position: start,
            expected,
            headers_only: false,
        }
    }

    /// The same scan checking headers only (see `headers_only`).
    pub fn headers_only(mut self) -> Self {
        self.headers_only = true;
        self
    }

    /// Where the next batch would start.
    pub fn position(&self) -> u64 {
        self.position
    }

    fn available(&self) -> &[u8] {
        match &self.window {
            Some(w) => {
                let from = self.position - self.window_start;
                if from >= w.len() as u64 {
                    &[]
                } else {
                    &w[from as usize..]
                }
            }
            None => &[],
        }
    }

    fn parse(&mut self) -> Parse {
        let position = self.position;
        if position >= self.end {
            return Parse::Step(ScanStep::End {
                position,
                stop: None,
            });
        }
        let parsed = if self.headers_only {
            BatchView::check_header(self.available()).and_then(|h| {
                if position + u64::from(h.length) > self.end {
                    Err(BatchError::Truncated {
                        need: h.length as usize,
                        have: 0,
                    })
                } else {
                    Ok(h)
                }
            })
        } else {
            BatchView::parse_checked(self.available()).map(|v| *v.header())
        };
        let h = match parsed {
            Ok(h) => h,
            Err(BatchError::Truncated { need, .. }) => {
                if need > MAX_BATCH_BYTES {
                    return Parse::Step(ScanStep::End {
                        position,
                        stop: Some(ScanStop::Invalid {
                            position,
                            error: BatchError::TooLarge(need),
                        }),
                    });
                }
                if position + need as u64 > self.end {
                    return Parse::Step(ScanStep::End {
                        position,
                        stop: Some(ScanStop::Truncated { position, need }),
                    });
                }
                return Parse::NeedMore(need);
            }
            Err(error) => {
                return Parse::Step(ScanStep::End {
                    position,
                    stop: Some(ScanStop::Invalid { position, error }),
                })
            }
        };
        if h.record_count == 0 {
            return Parse::Step(ScanStep::End {
                position,
                stop: Some(ScanStop::Invalid {
                    position,
                    error: BatchError::Empty,
                }),
            });
        }
        // Offsets only grow; compaction leaves gaps between batches (never inside one).
        if let Some(expected) = self.expected {
            if h.base_offset < expected {
                return Parse::Step(ScanStep::End {
                    position,
                    stop: Some(ScanStop::Discontiguous {
                        position,
                        expected,
                        found: h.base_offset,
                    }),
                });
            }
        }
        let b = ScannedBatch {
            position,
            len: h.length,
            base_offset: h.base_offset,
            next_offset: h.next_offset(),
            max_timestamp: h.max_timestamp_ms,
        };
        self.expected = Some(b.next_offset);
        self.position = b.end();
        Parse::Step(ScanStep::Batch(b))
    }

    /// Reads the window again from the current position, at least `need` bytes.
    async fn refill(&mut self, need: usize) -> Result<(), LogError> {
        let len = (self.chunk.max(need) as u64).min(self.end - self.position) as usize;
        let rr = self
            .file
            .read_at(self.position, len)
            .await
            .map_err(|e| LogError::io(self.path, e))?;
        if rr.len() < need.min(len) {
            return Err(LogError::Corrupt {
                path: self.path.to_path_buf(),
                position: self.position,
                what: format!("file ends early: read {} of {len} bytes", rr.len()),
            });
        }
        self.window_start = self.position;
        self.window = Some(rr);
        Ok(())
    }

    /// The next batch, reading as much as it needs.
    pub async fn next(&mut self) -> Result<ScanStep, LogError> {
        loop {
            match self.parse() {
                Parse::Step(s) => return Ok(s),
                Parse::NeedMore(need) => self.refill(need).await?,
            }
        }
    }

    /// The next batch; `None` at the end of the data, and an error where the data is not
    /// whole, valid batches (what readers of written data want: it has no torn tail).
    pub async fn next_batch(&mut self) -> Result<Option<ScannedBatch>, LogError> {
        match self.next().await? {
            ScanStep::Batch(b) => Ok(Some(b)),
            ScanStep::End { stop: None, .. } => Ok(None),
            ScanStep::End { stop: Some(s), .. } => Err(s.corrupt(self.path)),
        }
    }

    /// The next batch if it lies wholly in the bytes already read.
    pub fn next_in_window(&mut self) -> Option<ScanStep> {
        match self.parse() {
            Parse::Step(s) => Some(s),
            Parse::NeedMore(_) => None,
        }
    }

    /// The bytes of a batch the last step returned (it lies in the current window).
    pub fn bytes(&self, b: &ScannedBatch) -> &[u8] {
        let w = self.window.as_ref().expect("a batch was read");
        let from = (b.position - self.window_start) as usize;
        &w[from..from + b.len as usize]
    }

    /// `[from, to)` of the current window without copying (both ends inside it).
    pub fn slice(&self, from: u64, to: u64) -> Option<ReadResult> {
        let w = self.window.as_ref()?;
        ReadResult::slice(w, (from - self.window_start) as usize, (to - from) as usize)
    }

    /// Whether the bytes at `position` (in the window) are a whole batch of format version 1,
    /// whose CRC covered bytes 24..length and which had no header CRC.
    pub fn is_whole_v1_batch(&self, position: u64) -> bool {
        let Some(w) = &self.window else { return false };
        if position < self.window_start {
            return false;
        }
        let at = (position - self.window_start) as usize;
        let Some(h) = w.get(at..).and_then(crate::batch::BatchHeader::decode) else {
            return false;
        };
        let len = h.length as usize;
        len > HEADER_LEN
            && w.get(at..at + len)
                .is_some_and(|b| crc32c::crc32c(&b[24..]) == h.crc)
    }

    /// Whether the bytes at `position` (in the window) are a whole batch under the CRCs of
    /// version 2 and later (header CRC and body CRC both match): a batch of a newer format
    /// version, written by a later build, is whole by this test.
    pub fn is_whole_checksummed_batch(&self, position: u64) -> bool {
        let Some(w) = &self.window else { return false };
        if position < self.window_start {
            return false;
        }
        let at = (position - self.window_start) as usize;
        let Some(h) = w.get(at..).and_then(crate::batch::BatchHeader::decode) else {
            return false;
        };
        let len = h.length as usize;
        len >= HEADER_LEN
            && w.get(at..at + len).is_some_and(|b| {
                crate::batch::header_checksum(b) == h.header_crc
                    && crate::batch::body_checksum(b) == h.crc
            })
    }

    /// Non-zero bytes from `position` to the end of the window: how much garbage (as opposed
    /// to preallocated zeros) follows where the data ends.
    pub fn garbage_after(&self, position: u64) -> u64 {
        let Some(w) = &self.window else { return 0 };
        if position < self.window_start || position - self.window_start >= w.len() as u64 {
            return 0;
        }
        let rest = &w[(position - self.window_start) as usize..];
        rest.iter()
            .rposition(|x| *x != 0)
            .map_or(0, |i| i as u64 + 1)
    }
}
