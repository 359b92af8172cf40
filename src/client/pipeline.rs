//! A pipelined connection to one shard, driven by two I/O threads of its own: a writer that
//! sends requests in submission order (at most `max_in_flight` awaiting an answer) and a
//! reader that hands each response to the completion registered with its request. Responses
//! come back in request order (the broker answers a connection's requests in order).
//! A submit finding nothing queued and a slot free writes the request itself: the hand-off
//! to the writer thread is a wake-up on the latency path, the dearer on a loaded machine.
//! Threads, not an async runtime: the client works the same under tokio, glommio or none.

use std::collections::VecDeque;
use std::io::IoSlice;
use std::net::{Shutdown, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::error::ClientError;
use super::socket::Socket;
use crate::protocol::frame::{
    encode_request_head, read_frame_blocking, RequestHeader, ResponseFrame,
};
use crate::protocol::{ApiKey, FrameError};

/// Called with the response to a request (on the connection's reader thread; keep it short)
/// and when the request went out: the writer's clock right before it wrote the request to the
/// socket (`None` if it never was), so a caller can time the round trip alone, without the
/// wait in the submit queue.
pub type Completion = Box<dyn FnOnce(Result<ResponseFrame, ClientError>, Option<Instant>) + Send>;

/// Requests queued to the writer before `submit` blocks.
const SUBMIT_QUEUE: usize = 1024;

/// Requests up to this size may be written by the submitting thread: small ones are where the
/// hand-off to the writer thread is a large share of the latency, and they fit a socket's send
/// buffer, so the submitter (a producer's sender, serving every shard) rarely waits in the
/// write. Larger ones go through the writer thread.
const INLINE_WRITE_MAX: usize = 256 << 10;

/// A piece of request payload shared with its owner (a producer's encoded batch).
pub type PayloadChunk = Arc<dyn AsRef<[u8]> + Send + Sync>;

struct Outgoing {
    correlation_id: u32,
    head: Vec<u8>,
    payload: Vec<PayloadChunk>,
    completion: Option<Completion>,
}

/// Writes the head and every payload chunk with as few syscalls as the kernel allows.
fn write_request(socket: &mut Socket, out: &Outgoing) -> std::io::Result<()> {
    let mut slices: Vec<IoSlice<'_>> = Vec::with_capacity(1 + out.payload.len());
    slices.push(IoSlice::new(&out.head));
    slices.extend(out.payload.iter().map(|p| IoSlice::new((**p).as_ref())));
    socket.write_all_vectored(&mut slices)
}

/// Requests awaiting an answer: correlation id, completion, when the request was written.
type InFlight = Arc<Mutex<VecDeque<(u32, Completion, Instant)>>>;

/// The writing half, shared by the writer thread and submits that write inline. A request is
/// registered in [`InFlight`] and written under the socket lock, so the in-flight order is
/// the order on the wire.
struct WriteSide {
    socket: Mutex<Socket>,
    /// Requests queued to the writer thread and not yet written by it: a submit writes
    /// inline only when there are none (it would overtake them).
    queued: AtomicUsize,
    inflight: InFlight,
    /// One token per request awaiting an answer (bounded by `max_in_flight`).
    slots: flume::Sender<()>,
    dead: Arc<AtomicBool>,
    addr: SocketAddr,
}

impl WriteSide {
    /// Registers `out` (if it expects an answer) and writes it; on a failed write the
    /// connection dies and every request waiting on it fails. The caller holds the lock.
    fn write(&self, socket: &mut Socket, mut out: Outgoing) {
        if let Some(c) = out.completion.take() {
            // Stamped after the wait for a slot: the round trip starts with the write.
            let written = Instant::now();
            if let Ok(mut q) = self.inflight.lock() {
                q.push_back((out.correlation_id, c, written));
            }
        }
        if let Err(e) = write_request(socket, &out) {
            self.dead.store(true, Ordering::Release);
            let _ = socket.shutdown(Shutdown::Both);
            fail_all(self.addr, &self.inflight, &e.to_string());
        }
    }

    /// Writes `out` on the caller's thread when nothing is queued before it, the socket is
    /// free and (for a request expecting an answer) a slot is; else hands it back.
    fn try_write_inline(&self, out: Outgoing) -> Option<Outgoing> {
        let len = out.head.len()
            + out
                .payload
                .iter()
                .map(|p| (**p).as_ref().len())
                .sum::<usize>();
        if len > INLINE_WRITE_MAX {
            return Some(out);
        }
        let Ok(mut socket) = self.socket.try_lock() else {
            return Some(out);
        };
        if self.queued.load(Ordering::Acquire) != 0 {
            return Some(out);
        }
        if out.completion.is_some() && self.slots.try_send(()).is_err() {
            return Some(out);
        }
        self.write(&mut socket, out);
        None
    }
}

/// A connection to one broker shard that keeps up to `max_in_flight` requests awaiting answers.
pub struct PipelinedConnection {
    addr: SocketAddr,
    tx: Option<flume::Sender<Outgoing>>,
    write_side: Arc<WriteSide>,
    next_correlation: AtomicU32,
    dead: Arc<AtomicBool>,
    client_id: String,
    socket: Socket,
}

impl PipelinedConnection {
    /// Connects and starts the I/O threads; requests fail after `request_timeout` without answer.
    pub fn connect(
        addr: SocketAddr,
        cfg: &super::ClientConfig,
        request_timeout: Duration,
        max_in_flight: usize,
        max_response_bytes: usize,
    ) -> Result<PipelinedConnection, ClientError> {
        // Connected (and authenticated) one request at a time, then pipelined.
        let socket = super::connection::Connection::connect(
            addr,
            cfg.connect_timeout,
            &cfg.client_id,
            cfg.tls.as_ref(),
            cfg.sasl.as_ref(),
        )?
        .into_socket();
        let io_err = |source| ClientError::Io {
            addr: addr.to_string(),
            source,
        };
        let reader = socket.try_clone().map_err(io_err)?;
        let writer = socket.try_clone().map_err(io_err)?;
        // The read timeout only counts while requests are waiting (see the reader loop).
        reader
            .set_read_timeout(Some(request_timeout))
            .map_err(io_err)?;
        let (tx, rx) = flume::bounded::<Outgoing>(SUBMIT_QUEUE);
        let (slots_tx, slots_rx) = flume::bounded::<()>(max_in_flight.max(1));
        let inflight: InFlight = Arc::new(Mutex::new(VecDeque::new()));
        let dead = Arc::new(AtomicBool::new(false));
        let write_side = Arc::new(WriteSide {
            socket: Mutex::new(writer),
            queued: AtomicUsize::new(0),
            inflight: inflight.clone(),
            slots: slots_tx,
            dead: dead.clone(),
            addr,
        });
        {
            let write_side = write_side.clone();
            std::thread::Builder::new()
                .name(format!("rill-client-w-{addr}"))
                .spawn(move || write_loop(&write_side, rx))
                .map_err(io_err)?;
        }
        {
            let (inflight, dead) = (inflight.clone(), dead.clone());
            std::thread::Builder::new()
                .name(format!("rill-client-r-{addr}"))
                .spawn(move || {
                    read_loop(addr, reader, max_response_bytes, slots_rx, inflight, dead)
                })
                .map_err(io_err)?;
        }
        Ok(PipelinedConnection {
            addr,
            tx: Some(tx),
            write_side,
            next_correlation: AtomicU32::new(1),
            dead,
            client_id: cfg.client_id.clone(),
            socket,
        })
    }

    /// The shard address this connection talks to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// A connection that failed; drop it and connect again.
    pub fn is_dead(&self) -> bool {
        self.dead.load(Ordering::Acquire)
    }

    /// Queues a request. With a completion, it is called once with the response or the error;
    /// without one, no response is expected (a produce with acks=0). The payload chunks are
    /// written to the socket as they are, never copied into the request.
    pub fn submit(
        &self,
        api: ApiKey,
        meta: &[u8],
        payload: Vec<PayloadChunk>,
        completion: Option<Completion>,
    ) -> Result<(), ClientError> {
        self.submit_version(api, 0, meta, payload, completion)
    }

    /// As [`Self::submit`], at version `api_version` of the API.
    pub fn submit_version(
        &self,
        api: ApiKey,
        api_version: u16,
        meta: &[u8],
        payload: Vec<PayloadChunk>,
        completion: Option<Completion>,
    ) -> Result<(), ClientError> {
        let correlation_id = self.next_correlation.fetch_add(1, Ordering::Relaxed);
        let header = RequestHeader {
            api_key: api as u16,
            api_version,
            correlation_id,
            client_id: self.client_id.clone(),
        };
        let payload_len = payload.iter().map(|p| (**p).as_ref().len()).sum();
        let head = encode_request_head(&header, meta, payload_len)
            .map_err(|e| ClientError::Invalid(e.to_string()))?;
        let closed = || closed(self.addr);
        if self.is_dead() {
            return Err(closed());
        }
        let tx = self.tx.as_ref().ok_or_else(closed)?;
        let out = Outgoing {
            correlation_id,
            head,
            payload,
            completion,
        };
        let Some(out) = self.write_side.try_write_inline(out) else {
            return Ok(());
        };
        self.write_side.queued.fetch_add(1, Ordering::AcqRel);
        tx.send(out).map_err(|e| {
            self.write_side.queued.fetch_sub(1, Ordering::AcqRel);
            drop(e);
            closed()
        })
    }
}

impl Drop for PipelinedConnection {
    fn drop(&mut self) {
        // Closing the queue ends the writer; shutting the socket ends the reader.
        self.tx.take();
        let _ = self.socket.shutdown(Shutdown::Both);
    }
}

fn closed(addr: SocketAddr) -> ClientError {
    ClientError::Io {
        addr: addr.to_string(),
        source: std::io::Error::new(std::io::ErrorKind::BrokenPipe, "connection closed"),
    }
}

fn fail_all(addr: SocketAddr, inflight: &InFlight, why: &str) {
    let drained: Vec<_> = inflight
        .lock()
        .map(|mut q| q.drain(..).collect())
        .unwrap_or_default();
    for (_, c, written) in drained {
        c(
            Err(ClientError::Io {
                addr: addr.to_string(),
                source: std::io::Error::new(std::io::ErrorKind::ConnectionAborted, why.to_string()),
            }),
            Some(written),
        );
    }
}

fn write_loop(w: &WriteSide, rx: flume::Receiver<Outgoing>) {
    for out in rx.iter() {
        write_queued(w, out);
        w.queued.fetch_sub(1, Ordering::AcqRel);
    }
    if let Ok(socket) = w.socket.lock() {
        let _ = socket.shutdown(Shutdown::Both);
    }
}

/// The writer thread's part for one queued request: wait for a slot (outside the socket lock,
/// so that it never blocks a reader of the lock), then register and write it.
fn write_queued(w: &WriteSide, out: Outgoing) {
    let fail = |out: Outgoing| {
        if let Some(c) = out.completion {
            c(Err(closed(w.addr)), None);
        }
    };
    if w.dead.load(Ordering::Acquire) {
        return fail(out);
    }
    // Waits while max_in_flight requests are unanswered; fails if the reader is gone.
    if out.completion.is_some() && w.slots.send(()).is_err() {
        return fail(out);
    }
    match w.socket.lock() {
        Ok(mut socket) => w.write(&mut socket, out),
        Err(_) => fail(out),
    }
}

fn read_loop(
    addr: SocketAddr,
    mut socket: Socket,
    max_response_bytes: usize,
    slots: flume::Receiver<()>,
    inflight: InFlight,
    dead: Arc<AtomicBool>,
) {
    loop {
        let buf = match read_frame_blocking(&mut socket, max_response_bytes) {
            Ok(b) => b,
            Err(FrameError::Io(e))
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                let waiting = inflight.lock().map(|q| !q.is_empty()).unwrap_or(false);
                if !waiting && !dead.load(Ordering::Acquire) {
                    continue;
                }
                dead.store(true, Ordering::Release);
                let _ = socket.shutdown(Shutdown::Both);
                fail_all(addr, &inflight, "no response within the request timeout");
                return;
            }
            Err(e) => {
                dead.store(true, Ordering::Release);
                let _ = socket.shutdown(Shutdown::Both);
                fail_all(addr, &inflight, &e.to_string());
                return;
            }
        };
        let next = inflight.lock().ok().and_then(|mut q| q.pop_front());
        let _ = slots.try_recv();
        let Some((correlation_id, completion, written)) = next else {
            dead.store(true, Ordering::Release);
            let _ = socket.shutdown(Shutdown::Both);
            return;
        };
        completion(
            super::connection::parse_response(addr, buf, correlation_id),
            Some(written),
        );
    }
}
