//! The appender of a segment: turning batches into one page-aligned DMA write (the partial
//! last page rewritten with the new bytes after it), preallocating a step ahead, and
//! recording what completed.

use std::path::Path;
use std::rc::Rc;

use bytes::Bytes;
use futures_util::stream::{self, StreamExt};
use rill_shards::file::DirectFile;

use super::error::LogError;
use super::segment::{Segment, PAGE};
use crate::batch::BatchView;

/// Largest single DMA write by default (`--file-write-bytes`): a round's bytes go out in pieces
/// of this size, several at once (`--file-writes-in-flight`). One big write needs one big DMA
/// buffer outside glommio's registered pool; one moderate write at a time left the device idle
/// while the shard did its other work between two writes (RESULTS, 2026-12-04 seventh).
pub const WRITE_BYTES: usize = 2 << 20;

/// Default DMA writes in flight per partition (`--file-writes-in-flight`).
pub const WRITES_IN_FLIGHT: usize = 4;

/// A prepared DMA write: the partial last page plus the new batches, page-padded, cut at page
/// boundaries into pieces that are written at once (they share no page, so they may complete
/// in any order).
pub struct WriteJob {
    pub(super) file: Rc<DirectFile>,
    pub(super) path: Rc<Path>,
    /// (file position, bytes), page-aligned and disjoint, in file order.
    pub(super) pieces: Vec<(u64, rill_shards::rt::DmaBuffer)>,
    pub(super) new_size: u64,
    /// Extend the preallocated space to this length first.
    pub(super) allocate_to: Option<u64>,
    /// Pieces written at once, at most.
    pub(super) in_flight: usize,
}

impl WriteJob {
    /// Performs the write; returns the size the segment has once it completed. On an error
    /// every piece has still finished (none is left in flight), and the log must be failed:
    /// some pieces may have reached the file and others not.
    pub async fn run(self) -> Result<u64, LogError> {
        if let Some(to) = self.allocate_to {
            self.file
                .pre_allocate(to, false)
                .await
                .map_err(|e| LogError::io(&*self.path, e))?;
        }
        let file = &self.file;
        // Every piece runs to its end, also after one failed: none is left in flight.
        let results: Vec<std::io::Result<()>> = stream::iter(self.pieces)
            .map(|(position, buf)| async move {
                let len = buf.len();
                match file.write_at(buf, position).await {
                    Ok(written) if written == len => Ok(()),
                    Ok(_) => Err(std::io::Error::new(
                        std::io::ErrorKind::WriteZero,
                        "short O_DIRECT write",
                    )),
                    Err(e) => Err(e),
                }
            })
            .buffer_unordered(self.in_flight.max(1))
            .collect()
            .await;
        for r in results {
            r.map_err(|e| LogError::io(&*self.path, e))?;
        }
        Ok(self.new_size)
    }
}

/// Fills a write's pieces from its byte stream, allocating each as the stream reaches it.
struct Pieces<'a> {
    file: &'a DirectFile,
    /// Bytes of a piece (a multiple of the page).
    piece: u64,
    /// The stream's file position, and its end (page-padded).
    start: u64,
    end: u64,
    /// Bytes put so far.
    at: u64,
    done: Vec<(u64, rill_shards::rt::DmaBuffer)>,
}

impl<'a> Pieces<'a> {
    fn new(file: &'a DirectFile, start: u64, end: u64, piece_bytes: usize) -> Pieces<'a> {
        let piece = (piece_bytes as u64 / PAGE).max(1) * PAGE;
        let count = (end - start).div_ceil(piece) as usize;
        Pieces {
            file,
            piece,
            start,
            end,
            at: 0,
            done: Vec::with_capacity(count),
        }
    }

    fn put(&mut self, mut src: &[u8]) {
        while !src.is_empty() {
            let offset = (self.at % self.piece) as usize;
            if offset == 0 {
                let position = self.start + self.at;
                let len = self.piece.min(self.end - position) as usize;
                self.done.push((position, self.file.alloc_dma_buffer(len)));
            }
            let (_, buf) = self.done.last_mut().expect("a piece was started");
            let out = &mut buf.as_bytes_mut()[offset..];
            let n = out.len().min(src.len());
            out[..n].copy_from_slice(&src[..n]);
            src = &src[n..];
            self.at += n as u64;
        }
    }

    /// Zero-pads the last piece to its end; returns the pieces.
    fn finish(mut self) -> Vec<(u64, rill_shards::rt::DmaBuffer)> {
        let offset = (self.at % self.piece) as usize;
        if offset != 0 {
            let (_, buf) = self.done.last_mut().expect("a piece was started");
            buf.as_bytes_mut()[offset..].fill(0);
        }
        debug_assert_eq!(
            self.done.iter().map(|(_, b)| b.len() as u64).sum::<u64>(),
            self.end - self.start
        );
        self.done
    }
}

impl Segment {
    /// Assigns `batches` (whole, stamped, contiguous with this segment) to the file and
    /// returns the DMA write that stores them, in pieces of at most `piece_bytes`, `in_flight`
    /// of them at once. Only one job per segment may run at a time: the shard's flusher
    /// guarantees it.
    pub fn prepare_write(
        &mut self,
        batches: &[Bytes],
        piece_bytes: usize,
        in_flight: usize,
    ) -> WriteJob {
        assert!(!self.closed, "write to a closed segment");
        let page_start = self.assigned / PAGE * PAGE;
        let data_len: usize = batches.iter().map(Bytes::len).sum();
        let total = (self.tail_page.len() + data_len) as u64;
        let padded = total.div_ceil(PAGE) * PAGE;
        let mut out = Pieces::new(&self.file, page_start, page_start + padded, piece_bytes);
        out.put(&self.tail_page);
        for b in batches {
            let view = BatchView::parse_header(b).expect("appended batches were validated");
            let h = view.header();
            assert_eq!(
                h.base_offset, self.next_offset,
                "offsets must be contiguous"
            );
            self.index.on_batch(
                h.base_offset,
                (page_start + out.at) as u32,
                h.length,
                h.max_timestamp_ms,
            );
            self.next_offset = h.next_offset();
            out.put(b);
        }
        let pieces = out.finish();
        let new_size = page_start + total;
        // The new partial last page lies in the last piece (pieces end on page boundaries).
        let new_page_start = new_size / PAGE * PAGE;
        let keep = (new_size - new_page_start) as usize;
        let (last_position, last) = pieces.last().expect("a write has a piece");
        let from = (new_page_start - last_position) as usize;
        self.tail_page.clear();
        self.tail_page
            .extend_from_slice(&last.as_bytes()[from..from + keep]);
        self.assigned = new_size;
        let write_end = page_start + padded;
        let allocate_to = match self.step {
            Some(step) if write_end > self.allocated => {
                let to = write_end
                    .div_ceil(step)
                    .saturating_mul(step)
                    .min(self.max_allocation.max(write_end));
                self.allocated = to;
                Some(to)
            }
            _ => None,
        };
        WriteJob {
            file: self.file.clone(),
            path: self.path.clone(),
            pieces,
            new_size,
            allocate_to,
            in_flight,
        }
    }

    /// Records that a write finished: its bytes are now readable.
    pub fn complete_write(&mut self, new_size: u64) {
        assert!(new_size >= self.written, "written size must grow");
        self.written = new_size;
        // An O_DSYNC write is durable already.
        self.unsynced = !self.file.sync_writes();
    }

    /// The file, for an fdatasync when it has unsynced writes.
    pub fn take_unsynced(&mut self) -> Option<(Rc<DirectFile>, Rc<Path>)> {
        if std::mem::take(&mut self.unsynced) {
            Some((self.file.clone(), self.path.clone()))
        } else {
            None
        }
    }
}
