//! A bound on how long a shard can sleep through a wake-up.
//!
//! glommio 0.9 sleeps on its main io_uring, which it links to its latency ring with a poll on
//! that ring's descriptor; timers and wake-ups sent from other threads (an eventfd read) both
//! complete on the latency ring. Under load (a saturated disk, a loaded CI machine; kernel
//! 6.18) wake-ups from the sendfile worker reached their shard 60-125 ms after they were sent
//! (normally tens of microseconds), clustered at this module's period: lost, and picked up by
//! the next nudge. Completions on the main ring do wake the shard, and every wake-up turn
//! consumes all rings, fires due timers and runs the queued cross-thread wake-ups.
//!
//! So each shard keeps a read pending on one end of a socket pair (a poll on the main ring)
//! and one thread per shard set writes a byte to every other end each [`MAX_PARK`]: a lost
//! wake-up costs at most that long, and an idle shard wakes ten times a second.

use std::cell::Cell;
use std::io::ErrorKind;
use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// Longest a shard sleeps without a wake-up on its main ring.
pub const MAX_PARK: Duration = Duration::from_millis(100);

thread_local! {
    static SEEN: Cell<u64> = const { Cell::new(0) };
}

/// Nudges this shard thread has read so far (0 off a shard).
pub fn seen() -> u64 {
    SEEN.with(Cell::get)
}

/// The thread that nudges every shard of a set; stopped on drop.
pub struct Nudger {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

/// Socket pairs for `count` shards: the nudger and the shards' ends.
pub fn start(count: usize) -> std::io::Result<(Nudger, Vec<UnixStream>)> {
    let mut ours = Vec::with_capacity(count);
    let mut theirs = Vec::with_capacity(count);
    for _ in 0..count {
        let (a, b) = UnixStream::pair()?;
        a.set_nonblocking(true)?;
        ours.push(a);
        theirs.push(b);
    }
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    let thread = std::thread::Builder::new()
        .name("rill-nudger".into())
        .spawn(move || {
            while !flag.load(Ordering::Acquire) {
                std::thread::park_timeout(MAX_PARK);
                for s in &ours {
                    // A full buffer means a nudge is already waiting; a closed end, a shard
                    // that ended. Neither matters.
                    // SAFETY: a 1-byte send from a valid buffer on an open socket.
                    unsafe {
                        libc::send(
                            s.as_raw_fd(),
                            [0u8].as_ptr().cast(),
                            1,
                            libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
                        )
                    };
                }
            }
        })?;
    Ok((
        Nudger {
            stop,
            thread: Some(thread),
        },
        theirs,
    ))
}

impl Drop for Nudger {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            let _ = t.join();
        }
    }
}

/// Reads nudges on this shard until the other end closes. Spawned detached on every shard.
pub(crate) async fn serve(end: UnixStream) {
    use futures_lite::AsyncReadExt;
    // SAFETY: the descriptor is open and owned: `into_raw_fd` gives up the std stream's claim.
    let mut end = unsafe { glommio::net::UnixStream::from_raw_fd(end.into_raw_fd()) };
    let mut buf = [0u8; 64];
    loop {
        match end.read(&mut buf).await {
            Ok(0) => return,
            Ok(n) => SEEN.with(|s| s.set(s.get() + n as u64)),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => {
                log::warn!("shard nudges stopped: {e}");
                return;
            }
        }
    }
}
