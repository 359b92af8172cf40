//! sendfile off the executor thread: a page-cache miss blocks this worker, never the shard.
//! The connection waits for each range to be sent before writing anything else, so bytes stay
//! in order on the socket. Only started with `--file-reads sendfile`.
//!
//! One slow reader must cost only its own connection. glommio drives sockets through io_uring
//! and leaves them blocking, so a plain sendfile(2) on a full socket buffer sleeps in the
//! kernel for as long as the reader does not read, and every other range queued behind it
//! waits. So the worker owns a range's socket only while the range is in flight (the native
//! connection is strictly sequential: no io_uring operation is on that socket meanwhile),
//! makes it O_NONBLOCK for that time and restores its flags before it answers, and multiplexes:
//! a job whose socket is full is parked, the others go on, and one poll(2) over the parked
//! sockets (and an eventfd that says "new job") waits until one drains or the earliest deadline
//! passes. A job past its deadline fails with `TimedOut`; the connection then closes.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::log::segment::FileRange;

/// Ranges queued per shard before a connection waits for room (the channel's bound).
pub const QUEUE: usize = 256;
/// Ranges in progress at once per worker, parked ones included; past it the worker takes no new
/// job until one ends (its own deadline bounds how long that takes).
pub const MAX_IN_PROGRESS: usize = 1024;
/// Most bytes one sendfile call moves before the worker turns to the next job: a fast consumer
/// of a large range does not hold the others back.
const SLICE: usize = 1 << 20;
/// A completion noticed later than this after the worker sent it is logged: a shard that
/// sleeps through wake-ups from other threads (see `rill_shards::nudge::MAX_PARK`).
const LATE_WAKE: Duration = Duration::from_millis(50);
/// Longest single poll(2) wait, so that a lost wake-up could never stall the worker for long.
const MAX_POLL: Duration = Duration::from_millis(500);

struct Job {
    /// A duplicate of the connection's descriptor: the worker never writes to a descriptor
    /// number the connection may have closed and the kernel handed to someone else.
    socket: OwnedFd,
    range: FileRange,
    deadline: Instant,
    /// The result and when the worker sent it.
    done: flume::Sender<(std::io::Result<()>, Instant)>,
}

#[derive(Clone)]
pub struct SendfileWorker {
    jobs: flume::Sender<Job>,
    wake: Arc<OwnedFd>,
}

impl SendfileWorker {
    pub fn start(shard: usize) -> std::io::Result<SendfileWorker> {
        let (tx, rx) = flume::bounded::<Job>(QUEUE);
        // SAFETY: plain eventfd creation; the result is checked.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: `fd` is a fresh descriptor owned by nobody else.
        let wake = Arc::new(unsafe { OwnedFd::from_raw_fd(fd) });
        let worker_wake = wake.clone();
        std::thread::Builder::new()
            .name(format!("rill-sendfile-{shard}"))
            .spawn(move || run(rx, &worker_wake))?;
        Ok(SendfileWorker { jobs: tx, wake })
    }

    /// Sends `range` to `socket`, failing with `TimedOut` once `deadline` passes. The socket
    /// must not be used by anyone else until this returns (its flags change meanwhile).
    pub async fn send(
        &self,
        socket: RawFd,
        range: FileRange,
        deadline: Instant,
    ) -> std::io::Result<()> {
        // SAFETY: `socket` is open (the caller holds it); the duplicate is checked.
        let dup = unsafe { libc::fcntl(socket, libc::F_DUPFD_CLOEXEC, 0) };
        if dup < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: a fresh descriptor owned by nobody else.
        let socket = unsafe { OwnedFd::from_raw_fd(dup) };
        let (done, wait) = flume::bounded(1);
        self.jobs
            .send_async(Job {
                socket,
                range,
                deadline,
                done,
            })
            .await
            .map_err(|_| std::io::Error::other("sendfile worker stopped"))?;
        wake(&self.wake);
        let (result, sent) = wait
            .recv_async()
            .await
            .map_err(|_| std::io::Error::other("sendfile worker stopped"))?;
        let late = sent.elapsed();
        if late > LATE_WAKE {
            log::warn!("a sendfile completion reached its shard {late:?} after it was sent");
        }
        result
    }
}

fn wake(fd: &OwnedFd) {
    let one: u64 = 1;
    // SAFETY: an 8-byte write to an eventfd; EAGAIN (counter full) still leaves it readable.
    unsafe { libc::write(fd.as_raw_fd(), (&one as *const u64).cast(), 8) };
}

fn drain(fd: &OwnedFd) {
    let mut v: u64 = 0;
    // SAFETY: an 8-byte read from a non-blocking eventfd.
    unsafe { libc::read(fd.as_raw_fd(), (&mut v as *mut u64).cast(), 8) };
}

/// A job the worker has taken.
struct InProgress {
    job: Job,
    offset: libc::off_t,
    left: usize,
    /// The socket's file status flags before the worker made it non-blocking.
    saved_flags: Option<libc::c_int>,
    /// Worth a sendfile now: new, or poll said the socket drained.
    writable: bool,
}

impl InProgress {
    fn new(job: Job) -> InProgress {
        let fd = job.socket.as_raw_fd();
        // SAFETY: fcntl on an owned descriptor.
        let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
        let saved_flags = (flags >= 0 && flags & libc::O_NONBLOCK == 0).then_some(flags);
        if let Some(f) = saved_flags {
            // SAFETY: as above. Should it fail, sendfile may block: no worse than before.
            unsafe { libc::fcntl(fd, libc::F_SETFL, f | libc::O_NONBLOCK) };
        }
        InProgress {
            offset: job.range.position as libc::off_t,
            left: job.range.len,
            saved_flags,
            writable: true,
            job,
        }
    }

    /// One sendfile call. `Some` when the job is over.
    fn step(&mut self) -> Option<std::io::Result<()>> {
        if self.left == 0 {
            return Some(Ok(()));
        }
        // SAFETY: both descriptors are open (the job owns the socket's duplicate, the range
        // holds the file); offset is a valid pointer.
        let n = unsafe {
            libc::sendfile(
                self.job.socket.as_raw_fd(),
                self.job.range.file.as_raw_fd(),
                &mut self.offset,
                self.left.min(SLICE),
            )
        };
        if n > 0 {
            self.left -= n as usize;
            return (self.left == 0).then_some(Ok(()));
        }
        if n == 0 {
            return Some(Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "segment shorter than its range",
            )));
        }
        let err = std::io::Error::last_os_error();
        match err.raw_os_error() {
            Some(libc::EINTR) => None,
            Some(libc::EAGAIN) => {
                self.writable = false;
                None
            }
            _ => Some(Err(err)),
        }
    }

    /// Restores the socket's flags (before the connection's next io_uring operation on it,
    /// which could otherwise see EAGAIN) and answers.
    fn finish(self, result: std::io::Result<()>) {
        if let Some(f) = self.saved_flags {
            // SAFETY: fcntl on an owned descriptor.
            unsafe { libc::fcntl(self.job.socket.as_raw_fd(), libc::F_SETFL, f) };
        }
        let _ = self.job.done.send((result, Instant::now()));
    }
}

fn too_slow() -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        "consumer too slow: the response did not drain within --fetch-send-timeout-ms",
    )
}

fn run(rx: flume::Receiver<Job>, wake: &OwnedFd) {
    let mut jobs: Vec<InProgress> = Vec::new();
    let mut pfds: Vec<libc::pollfd> = Vec::new();
    let mut open = true;
    loop {
        if jobs.is_empty() {
            if !open {
                return;
            }
            // Nothing in progress: sleep on the channel itself.
            match rx.recv() {
                Ok(j) => jobs.push(InProgress::new(j)),
                Err(_) => return,
            }
        }
        while open && jobs.len() < MAX_IN_PROGRESS {
            match rx.try_recv() {
                Ok(j) => jobs.push(InProgress::new(j)),
                Err(flume::TryRecvError::Empty) => break,
                Err(flume::TryRecvError::Disconnected) => open = false,
            }
        }
        // One call per writable job, then deadlines.
        let now = Instant::now();
        let mut i = 0;
        while i < jobs.len() {
            let outcome = if jobs[i].job.deadline <= now {
                Some(Err(too_slow()))
            } else if jobs[i].writable {
                jobs[i].step()
            } else {
                None
            };
            match outcome {
                Some(r) => jobs.swap_remove(i).finish(r),
                None => i += 1,
            }
        }
        let busy = jobs.iter().any(|j| j.writable);
        let parked: Vec<usize> = (0..jobs.len()).filter(|&i| !jobs[i].writable).collect();
        if parked.is_empty() && busy {
            continue;
        }
        // Wait for a parked socket to drain, a new job, or the earliest deadline; only look
        // (timeout 0) while other jobs can make progress.
        pfds.clear();
        pfds.extend(parked.iter().map(|&i| libc::pollfd {
            fd: jobs[i].job.socket.as_raw_fd(),
            events: libc::POLLOUT,
            revents: 0,
        }));
        pfds.push(libc::pollfd {
            fd: wake.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        });
        let timeout_ms = if busy || (!rx.is_empty() && jobs.len() < MAX_IN_PROGRESS) {
            0
        } else {
            let earliest = jobs.iter().map(|j| j.job.deadline).min();
            let wait = earliest.map_or(MAX_POLL, |d| d.saturating_duration_since(Instant::now()));
            // Round up so that a deadline 0.4 ms away does not spin.
            wait.min(MAX_POLL).as_millis() as libc::c_int + 1
        };
        // SAFETY: `pfds` is a valid array of its length.
        let n = unsafe { libc::poll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, timeout_ms) };
        if n <= 0 {
            continue; // timeout or EINTR: the loop re-checks deadlines
        }
        for (k, &i) in parked.iter().enumerate() {
            if pfds[k].revents != 0 {
                // POLLOUT, or POLLERR/POLLHUP, which the next sendfile reports.
                jobs[i].writable = true;
            }
        }
        if pfds[parked.len()].revents != 0 {
            drain(wake);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};

    fn file_of(len: usize) -> (tempfile::TempDir, Arc<std::fs::File>) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("seg");
        let mut f = std::fs::File::create(&path).unwrap();
        let data: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
        f.write_all(&data).unwrap();
        (dir, Arc::new(std::fs::File::open(&path).unwrap()))
    }

    fn pair() -> (TcpStream, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let a = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (b, _) = l.accept().unwrap();
        (a, b)
    }

    fn job(
        socket: &TcpStream,
        file: &Arc<std::fs::File>,
        len: usize,
        deadline: Instant,
    ) -> (Job, flume::Receiver<(std::io::Result<()>, Instant)>) {
        // SAFETY: duplicating an open descriptor.
        let dup = unsafe { libc::fcntl(socket.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 0) };
        assert!(dup >= 0);
        let (done, wait) = flume::bounded(1);
        let j = Job {
            // SAFETY: `dup` is a fresh descriptor owned by nobody else.
            socket: unsafe { OwnedFd::from_raw_fd(dup) },
            range: FileRange {
                file: file.clone(),
                position: 0,
                len,
            },
            deadline,
            done,
        };
        (j, wait)
    }

    /// A reader that never reads is parked until its deadline while another socket's range
    /// is sent in full, and the blocking flag of both sockets is restored.
    #[test]
    fn a_stalled_socket_does_not_hold_up_another() {
        let len = 16 << 20;
        let (_dir, file) = file_of(len);
        let (tx, rx) = flume::bounded(QUEUE);
        // SAFETY: plain eventfd creation.
        let wake = Arc::new(unsafe {
            OwnedFd::from_raw_fd(libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC))
        });
        let w = wake.clone();
        let worker = std::thread::spawn(move || run(rx, &w));

        let (stalled_server, _stalled_client) = pair();
        let (fast_server, mut fast_client) = pair();
        let start = Instant::now();
        let (j1, stalled) = job(&stalled_server, &file, len, start + Duration::from_secs(2));
        tx.send(j1).unwrap();
        wake_fd(&wake);
        let (j2, fast) = job(&fast_server, &file, len, start + Duration::from_secs(60));
        tx.send(j2).unwrap();
        wake_fd(&wake);
        let mut got = vec![0u8; len];
        fast_client.read_exact(&mut got).unwrap();
        assert!(got.iter().enumerate().all(|(i, b)| *b == (i % 251) as u8));
        assert!(fast.recv().unwrap().0.is_ok());
        let err = stalled.recv().unwrap().0.unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::TimedOut);
        assert!(start.elapsed() >= Duration::from_secs(2));
        for s in [&stalled_server, &fast_server] {
            // SAFETY: fcntl on an open descriptor.
            let flags = unsafe { libc::fcntl(s.as_raw_fd(), libc::F_GETFL) };
            assert_eq!(flags & libc::O_NONBLOCK, 0, "blocking flag restored");
        }
        drop(tx);
        worker.join().unwrap();
    }

    fn wake_fd(fd: &OwnedFd) {
        wake(fd)
    }
}
