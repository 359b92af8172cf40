//! `--max-request-memory-bytes`: a per-shard budget for the request bytes its connections
//! hold, on both listeners. A length prefix only announces a size; memory is taken from the
//! budget before it is allocated, and a reader that would exceed the budget waits (inside its
//! read, so `--connection-idle-timeout-ms` bounds the wait) without blocking the shard.
//!
//! A request is read in two steps, each charged before it is allocated: its first
//! [`FIRST_STEP`] bytes, then, once those have arrived, the rest in one reservation. A client
//! that announces 64 MiB and sends a few bytes holds at most [`FIRST_STEP`]; only a client
//! that really sends gets the rest reserved, and a reservation is whole, so two large readers
//! never each hold half of what both need. A new buffer is zero-filled as bytes arrive, in
//! steps of [`FILL_STEP`], so resident memory follows the bytes received; a reused one
//! (`protocol::frame_pool`, bounded beside this budget) is not zeroed again.
//!
//! The grant is released when the request's handler returns, except for a produce nobody
//! waits for (acks=0): its grant is kept until its writes are durable, so a client that never
//! waits for answers cannot pile up unwritten bytes faster than the disk takes them. A produce
//! keeps slices of the request frame alive after that (the tail cache and the pending writes,
//! `Bytes::from_owner`), but that memory is bounded by `--tail-cache-bytes` and by the group
//! commit draining pending writes; counting it here too would let data that legitimately lives
//! on exhaust the budget.
//!
//! Waiters are woken together and whoever fits takes its share (not first come, first
//! served): a large request stuck behind stalled ones must not hold up the small requests of
//! every other connection of the shard.

use std::cell::Cell;
use std::rc::Rc;

use futures_lite::{AsyncRead, AsyncReadExt};

use crate::protocol::frame::{check_frame_len, FrameError};
use crate::protocol::frame_pool::PooledFrame;

/// Bytes of a request charged before the client has sent them.
pub const FIRST_STEP: usize = 64 << 10;
/// Bytes zero-filled (made resident) ahead of the bytes read.
const FILL_STEP: usize = 1 << 20;

/// The budget of one shard.
pub struct RequestMemory {
    capacity: usize,
    used: Cell<usize>,
    released: event_listener::Event,
}

/// Bytes taken from a [`RequestMemory`]; given back on drop.
pub struct Grant {
    pool: Rc<RequestMemory>,
    bytes: usize,
}

impl Drop for Grant {
    fn drop(&mut self) {
        if self.bytes > 0 {
            self.pool.used.set(self.pool.used.get() - self.bytes);
            self.pool.released.notify(usize::MAX);
        }
    }
}

impl RequestMemory {
    pub fn new(capacity: usize) -> Rc<RequestMemory> {
        Rc::new(RequestMemory {
            capacity,
            used: Cell::new(0),
            released: event_listener::Event::new(),
        })
    }

    /// Bytes granted now.
    pub fn used(&self) -> usize {
        self.used.get()
    }

    /// An empty grant, grown with [`Grant::grow`].
    pub fn empty(self: &Rc<Self>) -> Grant {
        Grant {
            pool: self.clone(),
            bytes: 0,
        }
    }

    fn try_take(&self, bytes: usize) -> bool {
        let used = self.used.get();
        if used + bytes <= self.capacity {
            self.used.set(used + bytes);
            return true;
        }
        false
    }
}

impl Grant {
    /// Adds `bytes` to the grant, waiting until the budget has them. A request that could
    /// never fit (more than the whole budget) is refused at once.
    pub async fn grow(&mut self, bytes: usize) -> Result<(), FrameError> {
        let total = self.bytes + bytes;
        if total > self.pool.capacity {
            return Err(FrameError::OverBudget {
                len: total,
                budget: self.pool.capacity,
            });
        }
        loop {
            if self.pool.try_take(bytes) {
                break;
            }
            let released = self.pool.released.listen();
            // Checked again after listening: a release in between would be missed.
            if self.pool.try_take(bytes) {
                break;
            }
            released.await;
        }
        self.bytes = total;
        Ok(())
    }
}

/// Reads one native request frame (little-endian length prefix, then the frame).
pub async fn read_frame<R: AsyncRead + Unpin>(
    r: &mut R,
    max: usize,
    pool: &Rc<RequestMemory>,
) -> Result<(PooledFrame, Grant), FrameError> {
    let mut len = [0u8; 4];
    match r.read_exact(&mut len).await {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Err(FrameError::Closed),
        Err(e) => return Err(e.into()),
    }
    let len = check_frame_len(u32::from_le_bytes(len), max)?;
    read_body(r, len, pool).await
}

/// Reads a request body of `len` bytes (its length prefix already read and checked against
/// `--max-frame-bytes`) into 16-aligned memory charged to `pool`: a reused frame buffer when
/// one fits (see `protocol::frame_pool`), so only bytes never initialised are zero-filled.
pub async fn read_body<R: AsyncRead + Unpin>(
    r: &mut R,
    len: usize,
    pool: &Rc<RequestMemory>,
) -> Result<(PooledFrame, Grant), FrameError> {
    let mut grant = pool.empty();
    // Refused before anything is waited for: a request larger than the whole budget.
    if len > pool.capacity {
        return Err(FrameError::OverBudget {
            len,
            budget: pool.capacity,
        });
    }
    let first = len.min(FIRST_STEP);
    grant.grow(first).await?;
    // A reused buffer is read over its old bytes; the frame is only what was read.
    let mut buf = PooledFrame::take(len, first);
    buf.initialise(first);
    r.read_exact(&mut buf[..first]).await?;
    if len > first {
        grant.grow(len - first).await?;
        buf.reserve_for(len);
        let mut at = first;
        while at < len {
            let end = len.min(at + FILL_STEP);
            buf.initialise(end);
            r.read_exact(&mut buf[at..end]).await?;
            at = end;
        }
    }
    debug_assert_eq!(buf.len(), len);
    Ok((buf, grant))
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_lite::future::{block_on, poll_once};

    #[test]
    fn waits_for_released_bytes_and_refuses_what_never_fits() {
        let pool = RequestMemory::new(100);
        block_on(async {
            let mut a = pool.empty();
            a.grow(60).await.unwrap();
            let mut b = pool.empty();
            let mut wait = Box::pin(b.grow(50));
            assert!(poll_once(&mut wait).await.is_none(), "must wait");
            // A small request still fits beside the waiting one.
            let mut c = pool.empty();
            c.grow(40).await.unwrap();
            drop(c);
            drop(a);
            wait.await.unwrap();
            assert_eq!(pool.used(), 50);
            assert!(matches!(
                pool.empty().grow(101).await,
                Err(FrameError::OverBudget {
                    len: 101,
                    budget: 100
                })
            ));
        });
        assert_eq!(pool.used(), 0);
    }

    #[test]
    fn a_body_is_charged_in_two_steps() {
        let pool = RequestMemory::new(FIRST_STEP + 10);
        block_on(async {
            let data = vec![7u8; FIRST_STEP + 10];
            let (buf, grant) = read_body(&mut &data[..], data.len(), &pool).await.unwrap();
            assert_eq!(&buf[..], &data[..]);
            assert_eq!(pool.used(), FIRST_STEP + 10);
            drop(grant);
            // Cut short after the first step: only that much was charged while reading.
            let short = &data[..FIRST_STEP + 5];
            assert!(read_body(&mut &short[..], data.len(), &pool).await.is_err());
            assert!(matches!(
                read_body(&mut &data[..], FIRST_STEP + 11, &pool).await,
                Err(FrameError::OverBudget { .. })
            ));
        });
        assert_eq!(pool.used(), 0);
    }

    #[test]
    fn a_frame_read_into_a_reused_buffer_shows_only_its_own_bytes() {
        let pool = RequestMemory::new(4 << 20);
        block_on(async {
            let long = vec![0xaau8; (2 << 20) + 5];
            let (buf, grant) = read_body(&mut &long[..], long.len(), &pool).await.unwrap();
            let at = buf.as_ptr();
            drop((buf, grant));
            // Shorter, then longer than the frame before, over the same allocation.
            for len in [(1 << 20) + 3, (2 << 20) + 5, (1 << 20) + 17] {
                let data: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
                let (buf, grant) = read_body(&mut &data[..], len, &pool).await.unwrap();
                assert_eq!(buf.as_ptr(), at, "reused");
                assert_eq!(buf.len(), len);
                assert!(
                    buf[..] == data[..],
                    "only the bytes read, none of the old ones"
                );
                assert_eq!(pool.used(), len);
                drop((buf, grant));
            }
            // A read cut short still returns its buffer for reuse, and is an error.
            let short = vec![1u8; 1 << 20];
            assert!(read_body(&mut &short[..], 2 << 20, &pool).await.is_err());
            let data = vec![3u8; (1 << 20) + 17];
            let (buf, _grant) = read_body(&mut &data[..], data.len(), &pool).await.unwrap();
            assert_eq!(buf.as_ptr(), at);
            assert!(buf.iter().all(|&b| b == 3));
        });
        assert_eq!(pool.used(), 0);
    }
}
