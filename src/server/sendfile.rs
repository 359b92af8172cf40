//! sendfile off the executor thread: a page-cache miss blocks this worker, never the shard.
//! The connection waits for each range to be sent before writing anything else, so bytes stay
//! in order on the socket. Only started with `--file-reads sendfile`.

use std::os::unix::io::{AsRawFd, RawFd};
use std::time::{Duration, Instant};

use crate::log::segment::FileRange;

/// Ranges queued per shard before a connection waits for room.
const QUEUE: usize = 256;
/// How long one range may take to drain into a slow consumer's socket.
const SEND_TIMEOUT: Duration = Duration::from_secs(30);

struct Job {
    socket: RawFd,
    range: FileRange,
    done: flume::Sender<std::io::Result<()>>,
}

#[derive(Clone)]
pub struct SendfileWorker {
    jobs: flume::Sender<Job>,
}

impl SendfileWorker {
    pub fn start(shard: usize) -> std::io::Result<SendfileWorker> {
        let (tx, rx) = flume::bounded::<Job>(QUEUE);
        std::thread::Builder::new()
            .name(format!("rill-sendfile-{shard}"))
            .spawn(move || {
                for job in rx.iter() {
                    let r = send_range(job.socket, &job.range);
                    let _ = job.done.send(r);
                }
            })?;
        Ok(SendfileWorker { jobs: tx })
    }

    /// Sends `range` to `socket`; the socket must stay open until this returns.
    pub async fn send(&self, socket: RawFd, range: FileRange) -> std::io::Result<()> {
        let (done, wait) = flume::bounded(1);
        self.jobs
            .send_async(Job {
                socket,
                range,
                done,
            })
            .await
            .map_err(|_| std::io::Error::other("sendfile worker stopped"))?;
        wait.recv_async()
            .await
            .map_err(|_| std::io::Error::other("sendfile worker stopped"))?
    }
}

fn send_range(socket: RawFd, range: &FileRange) -> std::io::Result<()> {
    let mut offset = range.position as libc::off_t;
    let mut left = range.len;
    let deadline = Instant::now() + SEND_TIMEOUT;
    while left > 0 {
        // SAFETY: both descriptors are open for the duration of the call (the caller holds
        // the socket, the range holds the file); offset is a valid pointer.
        let n = unsafe { libc::sendfile(socket, range.file.as_raw_fd(), &mut offset, left) };
        if n > 0 {
            left -= n as usize;
            continue;
        }
        if n == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "segment shorter than its range",
            ));
        }
        let err = std::io::Error::last_os_error();
        match err.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::EAGAIN) => {
                // The socket is non-blocking (the executor owns it): wait until it drains.
                if Instant::now() >= deadline {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        "consumer too slow",
                    ));
                }
                let mut pfd = libc::pollfd {
                    fd: socket,
                    events: libc::POLLOUT,
                    revents: 0,
                };
                // SAFETY: one valid pollfd.
                unsafe { libc::poll(&mut pfd, 1, 100) };
            }
            _ => return Err(err),
        }
    }
    Ok(())
}
