//! `rill-bench loopback`: the machine's floor for an acknowledged request, with no broker.
//! Each connection's client thread sends a request at its paced turn and waits for the
//! answer; a server thread per connection reads the request and answers at once, or (with
//! `--sync-dir`) first writes it to a file of its own with O_DIRECT and O_DSYNC, the least a
//! broker that acknowledges durable writes can do. The same paced, coordinated omission
//! corrected measure as `rill-bench produce --rate`, so a broker's acknowledgement latency
//! can be read against what the machine's wake-ups, loopback and disk cost by themselves
//! (fio's figures are a hot loop in one thread, without a round trip or an idle gap).

use std::fs::File;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use clap::{Args, ValueEnum};
use hdrhistogram::Histogram;
use rkyv::util::AlignedVec;

use crate::report::{new_histogram, record, Latency, Report};

#[derive(Args, Debug, Clone)]
pub struct LoopbackArgs {
    /// Requests per second over all connections.
    #[arg(long, default_value_t = 10_000)]
    pub rate: u64,
    /// Requests to send over all connections.
    #[arg(long, default_value_t = 100_000)]
    pub messages: u64,
    /// Connections, each with one request in flight at a time.
    #[arg(long, default_value_t = 2)]
    pub connections: usize,
    #[arg(long, default_value_t = 1024)]
    pub request_bytes: usize,
    /// Write each request to a file in this directory (one per connection, written with
    /// zeros first, so every write overwrites written space) with O_DIRECT, durably, before
    /// answering it.
    #[arg(long)]
    pub sync_dir: Option<PathBuf>,
    /// How a write is made durable: dsync (the file opened O_DSYNC, as `rill broker
    /// --fsync always` writes segments) or fdatasync (a write, then fdatasync, as fio's
    /// `--fdatasync=1`).
    #[arg(long, value_enum, default_value_t = SyncMode::Dsync)]
    pub sync_mode: SyncMode,
    /// Latencies of requests meant to go out in the first seconds are not recorded (0, as
    /// `rill-bench produce`).
    #[arg(long, default_value_t = 0.0)]
    pub warmup_secs: f64,
}

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncMode {
    Dsync,
    Fdatasync,
}

/// The answer's size: what a produce acknowledgement about carries.
const ANSWER_BYTES: usize = 16;
/// A server's file: its writes go round in it.
const SYNC_FILE_BYTES: u64 = 64 << 20;
/// O_DIRECT's alignment for buffer, offset and length.
const PAGE: usize = 4096;
/// The largest request: one server's write buffer.
const MAX_REQUEST_BYTES: usize = 1 << 20;

pub fn run(a: LoopbackArgs) -> Result<Report, String> {
    if a.rate == 0 || a.connections == 0 || a.messages == 0 {
        return Err("--rate, --connections and --messages must be above 0".into());
    }
    if a.request_bytes == 0 || a.request_bytes > MAX_REQUEST_BYTES {
        return Err(format!("--request-bytes must be 1 to {MAX_REQUEST_BYTES}"));
    }
    let listener = TcpListener::bind("127.0.0.1:0").map_err(|e| format!("bind: {e}"))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let dir = match &a.sync_dir {
        Some(d) => Some(
            tempfile::Builder::new()
                .prefix("rill-bench-loopback")
                .tempdir_in(d)
                .map_err(|e| format!("--sync-dir {}: {e}", d.display()))?,
        ),
        None => None,
    };
    let mut servers = Vec::with_capacity(a.connections);
    let mut clients = Vec::with_capacity(a.connections);
    let start = Instant::now() + Duration::from_millis(100);
    let warmup_end = start + Duration::from_secs_f64(a.warmup_secs.max(0.0));
    let per_connection_rate = a.rate as f64 / a.connections as f64;
    for c in 0..a.connections {
        let file = match &dir {
            Some(d) => Some(sync_file(&d.path().join(format!("c{c}")), a.sync_mode)?),
            None => None,
        };
        let stream = TcpStream::connect(addr).map_err(|e| format!("connect: {e}"))?;
        let (served, _) = listener.accept().map_err(|e| format!("accept: {e}"))?;
        let request_bytes = a.request_bytes;
        let mode = a.sync_mode;
        servers.push(std::thread::spawn(move || {
            serve(served, request_bytes, file.as_ref().map(|f| (f, mode)))
        }));
        let count = a.messages / a.connections as u64
            + u64::from((c as u64) < a.messages % a.connections as u64);
        clients.push(std::thread::spawn(move || {
            send_paced(
                stream,
                request_bytes,
                count,
                per_connection_rate,
                start,
                warmup_end,
            )
        }));
    }
    let mut from_intended = new_histogram();
    let mut from_send = new_histogram();
    for c in clients {
        let (h, s) = c
            .join()
            .map_err(|_| "client thread panicked".to_string())??;
        from_intended.add(&h).map_err(|e| e.to_string())?;
        from_send.add(&s).map_err(|e| e.to_string())?;
    }
    let elapsed = start.elapsed();
    let mut served = Served::default();
    for s in servers {
        let one = s
            .join()
            .map_err(|_| "server thread panicked".to_string())??;
        served.answers += one.answers;
        served.durable_writes += one.durable_writes;
    }
    let settings = serde_json::json!({
        "rate": a.rate, "connections": a.connections, "request_bytes": a.request_bytes,
        "sync": a.sync_dir.is_some().then(|| format!("{:?}", a.sync_mode).to_lowercase()),
        "warmup_secs": a.warmup_secs,
        "answers": served.answers, "durable_writes": served.durable_writes,
    });
    let mut report = Report::new(
        "loopback",
        a.messages,
        a.messages * a.request_bytes as u64,
        elapsed,
        &from_intended,
        settings,
    );
    report.latency_from_send_us = Some(Latency::of(&from_send));
    Ok(report)
}

/// A file of `SYNC_FILE_BYTES` written with zeros and synced, opened for O_DIRECT writes
/// (and O_DSYNC in that mode).
fn sync_file(path: &Path, mode: SyncMode) -> Result<File, String> {
    let zeros = vec![0u8; 1 << 20];
    let mut f = File::create(path).map_err(|e| format!("{}: {e}", path.display()))?;
    for _ in 0..SYNC_FILE_BYTES / zeros.len() as u64 {
        f.write_all(&zeros).map_err(|e| e.to_string())?;
    }
    f.sync_all().map_err(|e| e.to_string())?;
    std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(match mode {
            SyncMode::Dsync => libc::O_DIRECT | libc::O_DSYNC,
            SyncMode::Fdatasync => libc::O_DIRECT,
        })
        .open(path)
        .map_err(|e| format!("{}: O_DIRECT: {e}", path.display()))
}

/// What the servers did: requests answered, and written durably before their answer.
#[derive(Default)]
struct Served {
    answers: u64,
    durable_writes: u64,
}

/// Answers each request on `stream` until the client closes it, writing it to `file` first
/// when there is one.
fn serve(
    mut stream: TcpStream,
    request_bytes: usize,
    file: Option<(&File, SyncMode)>,
) -> Result<Served, String> {
    let mut served = Served::default();
    stream.set_nodelay(true).map_err(|e| e.to_string())?;
    // O_DIRECT: the buffer, its length and the file offset page-aligned.
    let pages = request_bytes.div_ceil(PAGE) * PAGE;
    let mut buf = AlignedVec::<PAGE>::with_capacity(pages);
    buf.resize(pages, 0);
    let write_len = buf.len() as u64;
    let mut offset = 0u64;
    let answer = [0u8; ANSWER_BYTES];
    loop {
        match stream.read_exact(&mut buf[..request_bytes]) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(served),
            Err(e) => return Err(format!("server read: {e}")),
        }
        if let Some((f, mode)) = file {
            f.write_all_at(&buf, offset)
                .map_err(|e| format!("server write: {e}"))?;
            if mode == SyncMode::Fdatasync {
                f.sync_data()
                    .map_err(|e| format!("server fdatasync: {e}"))?;
            }
            served.durable_writes += 1;
            offset = (offset + write_len) % (SYNC_FILE_BYTES - SYNC_FILE_BYTES % write_len);
        }
        stream
            .write_all(&answer)
            .map_err(|e| format!("server answer: {e}"))?;
        served.answers += 1;
    }
}

/// Sends `count` requests at `rate` per second from `start`, one in flight; returns the
/// latencies from each request's intended time and from its send, after `warmup_end`.
fn send_paced(
    mut stream: TcpStream,
    request_bytes: usize,
    count: u64,
    rate: f64,
    start: Instant,
    warmup_end: Instant,
) -> Result<(Histogram<u64>, Histogram<u64>), String> {
    stream.set_nodelay(true).map_err(|e| e.to_string())?;
    let request = vec![b'r'; request_bytes];
    let mut answer = [0u8; ANSWER_BYTES];
    let mut from_intended = new_histogram();
    let mut from_send = new_histogram();
    for i in 0..count {
        let intended = start + Duration::from_secs_f64(i as f64 / rate);
        let now = Instant::now();
        if intended > now {
            std::thread::sleep(intended - now);
        }
        let sent = Instant::now();
        stream
            .write_all(&request)
            .map_err(|e| format!("client write: {e}"))?;
        stream
            .read_exact(&mut answer)
            .map_err(|e| format!("client read: {e}"))?;
        let done = Instant::now();
        if intended >= warmup_end {
            record(&mut from_intended, done - intended);
            record(&mut from_send, done - sent);
        }
    }
    Ok((from_intended, from_send))
}
