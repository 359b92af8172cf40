//! The producer's batch buffers, reused. A sealed batch's bytes go back to the pool when the
//! last holder (its partition queue, a request being written) lets go, and the next open
//! batch is written into them. A fresh buffer of a batch's size is faulted in page by page as
//! records are written: zeroing those pages was 11% of the producer's CPU with 1 MiB batches
//! (RESULTS.md, 2026-12-04 "this session").
//!
//! The pool keeps as many buffers as the producer's `buffer_memory` holds batches, as Kafka's
//! `BufferPool` keeps free batches up to `buffer.memory`: a producer ahead of its broker has
//! that many batches queued, and an answer hands several back at once. A bound of 8 freed the
//! rest of such a burst, and the batches after it faulted their pages in again (RESULTS.md,
//! 2026-12-04 "fifth": page faults ~42 k -> ~31 k per 2 M messages).

use std::ops::Deref;
use std::sync::{Arc, Mutex};

use rkyv::util::AlignedVec;

/// Spare batch buffers of one producer.
#[derive(Debug)]
pub struct BatchBuffers {
    free: Mutex<Vec<AlignedVec<16>>>,
    /// The capacity new batches ask for; a buffer grown past twice this (a record larger than
    /// a batch) is freed rather than kept.
    capacity: usize,
    /// Buffers kept at most; past it, buffers are freed.
    max_kept: usize,
}

impl BatchBuffers {
    /// A pool of buffers of `capacity` bytes that keeps at most `memory` bytes of them (and
    /// at least one).
    pub fn new(capacity: usize, memory: usize) -> Arc<BatchBuffers> {
        Arc::new(BatchBuffers {
            free: Mutex::new(Vec::new()),
            capacity,
            max_kept: (memory / capacity.max(1)).max(1),
        })
    }

    /// An empty buffer, with room for `capacity` bytes if it was used before.
    pub fn take(&self) -> AlignedVec<16> {
        self.free
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .pop()
            .unwrap_or_default()
    }

    /// The capacity new batches are built with.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    fn give_back(&self, mut buf: AlignedVec<16>) {
        if buf.capacity() < self.capacity || buf.capacity() > self.capacity.saturating_mul(2) {
            return;
        }
        buf.clear();
        let mut free = self.free.lock().unwrap_or_else(|e| e.into_inner());
        if free.len() < self.max_kept {
            free.push(buf);
        }
    }

    /// Buffers kept now.
    #[cfg(test)]
    pub fn kept(&self) -> usize {
        self.free.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

/// A sealed batch's bytes; they return to their pool when dropped.
#[derive(Debug)]
pub struct BatchBytes {
    bytes: AlignedVec<16>,
    pool: Arc<BatchBuffers>,
}

impl BatchBytes {
    pub fn new(bytes: AlignedVec<16>, pool: Arc<BatchBuffers>) -> BatchBytes {
        BatchBytes { bytes, pool }
    }

    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        self.bytes.as_mut_slice()
    }
}

impl Deref for BatchBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.bytes
    }
}

impl AsRef<[u8]> for BatchBytes {
    fn as_ref(&self) -> &[u8] {
        &self.bytes
    }
}

/// A copy (a batch renumbered while a request still holds the old bytes) with a buffer of
/// its own.
impl Clone for BatchBytes {
    fn clone(&self) -> BatchBytes {
        let mut bytes = self.pool.take();
        bytes.extend_from_slice(&self.bytes);
        BatchBytes {
            bytes,
            pool: self.pool.clone(),
        }
    }
}

impl Drop for BatchBytes {
    fn drop(&mut self) {
        self.pool.give_back(std::mem::take(&mut self.bytes));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_come_back_empty_and_keep_their_room_up_to_the_bound() {
        let pool = BatchBuffers::new(4096, 6 * 4096 + 100);
        let batches: Vec<BatchBytes> = (0..6 + 3)
            .map(|i| {
                let mut b = pool.take();
                b.reserve(pool.capacity());
                b.extend_from_slice(&[i as u8; 100]);
                BatchBytes::new(b, pool.clone())
            })
            .collect();
        assert_eq!(&batches[5][..], &[5u8; 100][..]);
        let copy = batches[5].clone();
        assert_eq!(&copy[..], &batches[5][..]);
        drop(copy);
        drop(batches);
        assert_eq!(pool.kept(), 6);
        let b = pool.take();
        assert!(b.is_empty() && b.capacity() >= 4096);
        // Too small (never reserved) or grown past twice the batch size: not kept.
        let before = pool.kept();
        drop(BatchBytes::new(AlignedVec::new(), pool.clone()));
        let mut big = AlignedVec::<16>::new();
        big.reserve(3 * 4096);
        drop(BatchBytes::new(big, pool.clone()));
        assert_eq!(pool.kept(), before);
    }
}
