//! The appender of a segment: turning batches into one page-aligned DMA write (the partial
//! last page rewritten with the new bytes after it), preallocating a step ahead, and
//! recording what completed.

use std::path::Path;
use std::rc::Rc;

use bytes::Bytes;
use rill_shards::file::DirectFile;

use super::error::LogError;
use super::segment::{Segment, PAGE};
use crate::batch::BatchView;

/// A prepared DMA write: the partial last page plus the new batches, page-padded.
pub struct WriteJob {
    pub(super) file: Rc<DirectFile>,
    pub(super) path: Rc<Path>,
    pub(super) position: u64,
    pub(super) buf: rill_shards::rt::DmaBuffer,
    pub(super) new_size: u64,
    /// Extend the preallocated space to this length first.
    pub(super) allocate_to: Option<u64>,
}

impl WriteJob {
    /// Performs the write; returns the size the segment has once it completed.
    pub async fn run(self) -> Result<u64, LogError> {
        if let Some(to) = self.allocate_to {
            self.file
                .pre_allocate(to, false)
                .await
                .map_err(|e| LogError::io(&*self.path, e))?;
        }
        let len = self.buf.len();
        let written = self
            .file
            .write_at(self.buf, self.position)
            .await
            .map_err(|e| LogError::io(&*self.path, e))?;
        if written != len {
            return Err(LogError::io(
                &*self.path,
                std::io::Error::new(std::io::ErrorKind::WriteZero, "short O_DIRECT write"),
            ));
        }
        Ok(self.new_size)
    }
}

impl Segment {
    /// Assigns `batches` (whole, stamped, contiguous with this segment) to the file and
    /// returns the DMA write that stores them. Only one write per segment may be in flight:
    /// the shard's flusher guarantees it.
    pub fn prepare_write(&mut self, batches: &[Bytes]) -> WriteJob {
        assert!(!self.closed, "write to a closed segment");
        let page_start = self.assigned / PAGE * PAGE;
        let data_len: usize = batches.iter().map(Bytes::len).sum();
        let total = self.tail_page.len() + data_len;
        let padded = (total as u64).div_ceil(PAGE) * PAGE;
        let mut buf = self.file.alloc_dma_buffer(padded as usize);
        let out = buf.as_bytes_mut();
        out[..self.tail_page.len()].copy_from_slice(&self.tail_page);
        let mut at = self.tail_page.len();
        for b in batches {
            let view = BatchView::parse_header(b).expect("appended batches were validated");
            let h = view.header();
            assert_eq!(
                h.base_offset, self.next_offset,
                "offsets must be contiguous"
            );
            self.index.on_batch(
                h.base_offset,
                (page_start + at as u64) as u32,
                h.length,
                h.max_timestamp_ms,
            );
            self.next_offset = h.next_offset();
            out[at..at + b.len()].copy_from_slice(b);
            at += b.len();
        }
        out[at..].fill(0);
        let new_size = page_start + total as u64;
        let new_page_start = new_size / PAGE * PAGE;
        let keep = (new_size - new_page_start) as usize;
        let from = (new_page_start - page_start) as usize;
        self.tail_page.clear();
        self.tail_page.extend_from_slice(&out[from..from + keep]);
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
            position: page_start,
            buf,
            new_size,
            allocate_to,
        }
    }

    /// Records that a write finished: its bytes are now readable.
    pub fn complete_write(&mut self, new_size: u64) {
        assert!(new_size >= self.written, "written size must grow");
        self.written = new_size;
        self.unsynced = true;
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
