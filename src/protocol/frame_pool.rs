//! Reused request frame buffers, so a frame is not zero-filled again on every read.
//!
//! A request is read into initialised memory (the socket read takes `&mut [u8]`); fresh
//! memory must be zero-filled first, which costs about as much as receiving the bytes. A
//! buffer that goes back to a pool keeps its initialised bytes, so the next frame of a like
//! size is read over the old bytes without zeroing: only the part past the old length is
//! zero-filled. The old bytes are never seen: the frame is cut to what was read.
//!
//! The pool is per thread (a shard is a thread), so a [`PooledFrame`] holds no handle to it
//! and stays `Send` (a produce keeps its frame as `Bytes::from_owner`); dropped on any thread,
//! it goes to that thread's pool. Bounded: buffers under [`MIN_POOLED_FRAME`] (zeroing them
//! is cheap) or over [`MAX_POOLED_FRAME`] are freed, and the idle buffers of a thread never
//! hold more than [`FRAME_POOL_BYTES`] of capacity (beside `--max-request-memory-bytes`,
//! see ARCHITECTURE.md Limits).

use std::cell::RefCell;
use std::ops::{Deref, DerefMut};

use super::frame::FrameBuf;

/// Idle frame capacity one thread keeps for reuse.
pub const FRAME_POOL_BYTES: usize = 32 << 20;
/// Largest buffer kept for reuse: rill's producer puts up to 8 MiB of one partition's
/// batches in a request, and with 4 MiB here its requests of four 1 MiB batches were
/// zero-filled every time (11% of a produce-bound broker's CPU).
pub const MAX_POOLED_FRAME: usize = 16 << 20;
/// Smallest buffer kept for reuse.
pub const MIN_POOLED_FRAME: usize = 64 << 10;

/// Idle buffers of one thread, at their initialised length.
struct Idle {
    bufs: Vec<FrameBuf>,
    /// Sum of the capacities in `bufs`.
    bytes: usize,
}

thread_local! {
    static IDLE: RefCell<Idle> = const { RefCell::new(Idle { bufs: Vec::new(), bytes: 0 }) };
}

/// A frame buffer that goes back to its thread's pool when dropped. Only its first `len`
/// bytes are the frame; the buffer stays at its initialised length so that a reuse knows how
/// much need not be zeroed.
#[derive(Default)]
pub struct PooledFrame {
    buf: FrameBuf,
    len: usize,
}

impl PooledFrame {
    /// An empty frame with room for `len` bytes: in the idle buffer of the smallest capacity
    /// that holds `len` but not twice `len` (a small frame kept in the tail cache must not pin
    /// a large buffer), if `len` is at least [`MIN_POOLED_FRAME`] (its old bytes still in it, unseen: see [`PooledFrame::initialise`]),
    /// else in a new buffer with room for `first` bytes.
    pub fn take(len: usize, first: usize) -> PooledFrame {
        // A small frame would hold a large buffer for little gain.
        let reused = (len >= MIN_POOLED_FRAME)
            .then(|| {
                IDLE.with(|idle| {
                    let mut idle = idle.borrow_mut();
                    let best = idle
                        .bufs
                        .iter()
                        .enumerate()
                        .filter(|(_, b)| (len..=len.saturating_mul(2)).contains(&b.capacity()))
                        .min_by_key(|(_, b)| b.capacity())
                        .map(|(i, _)| i)?;
                    let buf = idle.bufs.swap_remove(best);
                    idle.bytes -= buf.capacity();
                    Some(buf)
                })
            })
            .flatten();
        PooledFrame {
            buf: reused.unwrap_or_else(|| FrameBuf::with_capacity(first)),
            len: 0,
        }
    }

    /// Makes the frame `len` bytes long, to be overwritten by the caller: bytes never
    /// initialised are zero-filled, those a former frame left are not (they are the caller's
    /// to overwrite; nothing past `len` is ever seen).
    pub fn initialise(&mut self, len: usize) {
        if self.buf.len() < len {
            self.buf.resize(len, 0);
        }
        self.len = len;
    }

    /// Room for a frame of `len` bytes in one allocation (exact: the length is known and
    /// charged), so growing it step by step never moves it.
    /// New memory is backed at once: until the tail cache is full every large frame is fresh
    /// memory, and a fault per page as it is zero-filled and read cost more than the read.
    /// The bytes were charged to the request memory first, so a client that announces a
    /// frame and sends nothing holds no more than that budget.
    ///
    /// The new buffer is asked of the allocator zeroed (`calloc`) and counts as initialised
    /// throughout: fresh pages are zero already, so the frame is not zero-filled a second
    /// time, in user space, before each read (4.7% of a producing broker's samples while
    /// its tail cache filled; RESULTS.md, 2026-12-06).
    pub fn reserve_for(&mut self, len: usize) {
        if len <= self.buf.capacity() {
            return;
        }
        let mut grown = backed_buffer(len);
        let old = std::mem::take(&mut self.buf);
        grown[..old.len()].copy_from_slice(&old);
        self.buf = grown;
    }

    pub fn capacity(&self) -> usize {
        self.buf.capacity()
    }

    /// Idle buffers and their capacity on this thread.
    pub fn idle() -> (usize, usize) {
        IDLE.with(|idle| {
            let idle = idle.borrow();
            (idle.bufs.len(), idle.bytes)
        })
    }
}

/// A buffer of `len` zero bytes (its length and capacity), backed now. In the broker a
/// buffer of about 1 MiB shares huge pages with its neighbours (`memory::frame_arena`: in
/// memory the broker backed at its start with `--tail-cache-pre-touch`), else it is the
/// global allocator's; either way it is freed through the global allocator. For a request
/// frame, and for a batch the broker builds and keeps in the tail cache (a Kafka produce's),
/// which are fresh memory until the tail cache is full.
pub fn backed_buffer(len: usize) -> FrameBuf {
    let layout = std::alloc::Layout::from_size_align(len.max(1), FrameBuf::ALIGNMENT)
        .expect("a buffer length is bounded by --max-frame-bytes");
    let ptr = crate::memory::frame_arena::alloc_frame_zeroed(len).or_else(|| {
        // SAFETY: a non-zero size (at least 1).
        std::ptr::NonNull::new(unsafe { std::alloc::alloc_zeroed(layout) })
    });
    let Some(ptr) = ptr else {
        std::alloc::handle_alloc_error(layout)
    };
    // SAFETY: `ptr` holds `layout.size()` bytes, all written (zeroed) by the allocator.
    unsafe { crate::memory::populate_for_write(ptr.as_ptr(), layout.size()) };
    // SAFETY: what `AlignedVec::into_parts` would give: a block of the global allocator with
    // the layout `AlignedVec` frees with (capacity `layout.size()`, its alignment), its first
    // `len` bytes (all of them) initialised.
    unsafe { FrameBuf::from_parts(ptr, len, layout.size()) }
}

/// Sizes only: the bytes past the frame are a former frame's, and the frame may be large.
impl std::fmt::Debug for PooledFrame {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PooledFrame")
            .field("len", &self.len)
            .field("capacity", &self.buf.capacity())
            .finish()
    }
}

impl From<FrameBuf> for PooledFrame {
    fn from(buf: FrameBuf) -> PooledFrame {
        PooledFrame {
            len: buf.len(),
            buf,
        }
    }
}

impl Drop for PooledFrame {
    fn drop(&mut self) {
        let cap = self.buf.capacity();
        if !(MIN_POOLED_FRAME..=MAX_POOLED_FRAME).contains(&cap) {
            return;
        }
        let buf = std::mem::take(&mut self.buf);
        // `try_with`: a frame dropped while its thread exits is simply freed.
        let _ = IDLE.try_with(|idle| {
            let mut idle = idle.borrow_mut();
            if idle.bytes + cap <= FRAME_POOL_BYTES {
                idle.bytes += cap;
                idle.bufs.push(buf);
            }
        });
    }
}

impl Deref for PooledFrame {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

impl DerefMut for PooledFrame {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.buf[..self.len]
    }
}

impl AsRef<[u8]> for PooledFrame {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl AsMut<[u8]> for PooledFrame {
    fn as_mut(&mut self) -> &mut [u8] {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Drops what this test thread pooled, so each test starts empty.
    fn drain() {
        IDLE.with(|idle| {
            let mut idle = idle.borrow_mut();
            idle.bufs.clear();
            idle.bytes = 0;
        });
    }

    /// A new frame of `len` bytes (not from the pool).
    fn filled(len: usize, byte: u8) -> PooledFrame {
        let mut buf = FrameBuf::with_capacity(len);
        buf.resize(len, byte);
        PooledFrame::from(buf)
    }

    #[test]
    fn a_backed_buffer_is_zeroed_aligned_and_as_long_as_asked() {
        for len in [0, 1, 4095, 4096, 300 << 10, (1 << 20) + 17, 5 << 20] {
            let mut b = backed_buffer(len);
            assert_eq!(b.len(), len);
            assert!(b.capacity() >= len.max(1));
            assert_eq!(b.as_ptr() as usize % FrameBuf::ALIGNMENT, 0);
            assert!(b.iter().all(|&x| x == 0), "{len}");
            // Writable to its end, and grows like any buffer.
            b.extend_from_slice(b"tail");
            assert_eq!(&b[len..], b"tail");
        }
    }

    #[test]
    fn the_producers_largest_requests_are_pooled() {
        drain();
        // Its largest request by default: one partition's batch bytes plus the request's head,
        // and eight times that (a producer set to larger requests).
        for largest in
            [1, 8].map(|n| n * crate::client::DEFAULT_PARTITION_REQUEST_BYTES + (64 << 10))
        {
            assert!(largest <= MAX_POOLED_FRAME);
            let f = filled(largest, 1);
            let at = f.as_ptr();
            drop(f);
            let g = PooledFrame::take(largest, MIN_POOLED_FRAME);
            assert_eq!(g.as_ptr(), at, "taken again, not zero-filled anew");
        }
    }

    #[test]
    fn a_dropped_buffer_is_reused_with_its_bytes_initialised() {
        drain();
        let f = filled(1 << 20, 7);
        let at = f.as_ptr();
        drop(f);
        assert_eq!(PooledFrame::idle().0, 1);
        let mut g = PooledFrame::take(1 << 20, MIN_POOLED_FRAME);
        assert_eq!(g.as_ptr(), at, "the same allocation");
        assert_eq!(g.len(), 0, "an empty frame");
        assert_eq!(PooledFrame::idle(), (0, 0));
        g.initialise(1000);
        assert_eq!(g.len(), 1000);
        assert!(g.iter().all(|&b| b == 7), "not zeroed again");
        // Past the old length, only the new tail is zero-filled.
        drop(g);
        let mut h = PooledFrame::take(1 << 20, 0);
        h.initialise((1 << 20) + 16);
        assert!(h[..1 << 20].iter().all(|&b| b == 7));
        assert!(h[1 << 20..].iter().all(|&b| b == 0));
        drain();
    }

    #[test]
    fn the_smallest_buffer_that_fits_is_taken() {
        drain();
        drop(filled(2 << 20, 1));
        drop(filled(MIN_POOLED_FRAME, 2));
        drop(filled(1 << 20, 3));
        let mut f = PooledFrame::take(1000 << 10, 0);
        assert!(f.capacity() >= 1000 << 10 && f.capacity() < 2 << 20);
        f.initialise(1);
        assert_eq!(f[0], 3);
        // Nothing fits: a new, empty buffer.
        let big = PooledFrame::take(3 << 20, 10);
        assert_eq!((big.len(), big.capacity()), (0, 10));
        assert_eq!(PooledFrame::idle().0, 2);
        // None holds it without wasting half: a new buffer.
        let mid = PooledFrame::take(100 << 10, 7);
        assert_eq!(mid.capacity(), 7);
        assert_eq!(PooledFrame::idle().0, 2);
        // A small frame takes no pooled buffer.
        let small = PooledFrame::take(100, 100);
        assert_eq!(small.capacity(), 100);
        assert_eq!(PooledFrame::idle().0, 2);
        drain();
    }

    #[test]
    fn too_small_and_too_large_buffers_are_not_pooled() {
        drain();
        drop(filled(MIN_POOLED_FRAME / 2, 1));
        drop(filled(MAX_POOLED_FRAME + 16, 1));
        assert_eq!(PooledFrame::idle(), (0, 0));
        drop(filled(MAX_POOLED_FRAME, 1));
        assert_eq!(PooledFrame::idle().0, 1);
        drain();
    }

    #[test]
    fn the_idle_total_is_bounded() {
        drain();
        let frames: Vec<_> = (0..2 * FRAME_POOL_BYTES / MAX_POOLED_FRAME)
            .map(|_| filled(MAX_POOLED_FRAME, 1))
            .collect();
        drop(frames);
        let (count, bytes) = PooledFrame::idle();
        assert!(bytes <= FRAME_POOL_BYTES, "{bytes}");
        assert_eq!(count, FRAME_POOL_BYTES / MAX_POOLED_FRAME);
        drain();
    }

    #[test]
    fn a_buffer_dropped_on_another_thread_goes_to_that_threads_pool() {
        drain();
        let f = filled(1 << 20, 1);
        let there = std::thread::spawn(move || {
            drop(f);
            PooledFrame::idle().0
        })
        .join()
        .unwrap();
        assert_eq!(there, 1);
        assert_eq!(PooledFrame::idle().0, 0);
    }
}
