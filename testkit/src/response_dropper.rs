//! A fault-injecting TCP proxy for client traffic that loses acknowledgements: it passes
//! requests on, and drops some responses whole (a frame of rill's native protocol or of
//! Kafka's, both a 4-byte length and a body) and closes the connection instead, so the
//! client sees its request fail after the broker carried it out, and retries it.
//!
//! A broker advertises the proxy with `--advertised-host 127.0.0.2` while listening on
//! 127.0.0.1: clients bootstrap directly, and their produce connections (to the advertised
//! address) go through the proxy, which listens on 127.0.0.2 on the same ports.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// How the length prefix of a response frame is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrameLength {
    /// rill's native protocol: u32 little-endian.
    Native,
    /// Kafka's: i32 big-endian.
    Kafka,
}

/// Proxies from `listen` to `target` for every port of `ports`.
pub struct ResponseDropper {
    stop: Arc<AtomicBool>,
    /// Set by [`ResponseDropper::stop_dropping`]: every response passes from then on.
    lossless: Arc<AtomicBool>,
    addrs: Vec<SocketAddr>,
    /// Responses passed on and dropped so far.
    pub passed: Arc<AtomicU64>,
    pub dropped: Arc<AtomicU64>,
    /// The most requests one connection had sent and not had answered (dropped answers
    /// count as answered): more than 1 shows the client pipelining.
    pub max_outstanding: Arc<AtomicU64>,
}

impl ResponseDropper {
    /// Listens on `listen_host:port` for each port and forwards to `127.0.0.1:port`; of every
    /// `every` responses (counted over all connections), one is dropped.
    pub fn start(listen_host: &str, ports: &[u16], every: u64, framing: FrameLength) -> Self {
        assert!(every >= 2, "dropping every response lets nothing through");
        let stop = Arc::new(AtomicBool::new(false));
        let lossless = Arc::new(AtomicBool::new(false));
        let passed = Arc::new(AtomicU64::new(0));
        let dropped = Arc::new(AtomicU64::new(0));
        let max_outstanding = Arc::new(AtomicU64::new(0));
        let mut addrs = Vec::new();
        for &port in ports {
            let listener = TcpListener::bind((listen_host, port)).expect("proxy bind");
            addrs.push(listener.local_addr().expect("addr"));
            let target: SocketAddr = ([127, 0, 0, 1], port).into();
            let counters = Counters {
                stop: stop.clone(),
                lossless: lossless.clone(),
                passed: passed.clone(),
                dropped: dropped.clone(),
                max_outstanding: max_outstanding.clone(),
            };
            std::thread::spawn(move || {
                for conn in listener.incoming() {
                    if counters.stop.load(Ordering::SeqCst) {
                        return;
                    }
                    let Ok(conn) = conn else { continue };
                    let counters = counters.clone();
                    std::thread::spawn(move || {
                        let _ = proxy_one(conn, target, every, framing, &counters);
                    });
                }
            });
        }
        ResponseDropper {
            stop,
            lossless,
            addrs,
            passed,
            dropped,
            max_outstanding,
        }
    }

    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::SeqCst)
    }

    /// Passes every response from now on (to read back what was stored through it).
    pub fn stop_dropping(&self) {
        self.lossless.store(true, Ordering::SeqCst);
    }
}

#[derive(Clone)]
struct Counters {
    stop: Arc<AtomicBool>,
    lossless: Arc<AtomicBool>,
    passed: Arc<AtomicU64>,
    dropped: Arc<AtomicU64>,
    max_outstanding: Arc<AtomicU64>,
}

impl Drop for ResponseDropper {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        for a in &self.addrs {
            let _ = TcpStream::connect_timeout(a, Duration::from_secs(1));
        }
    }
}

fn proxy_one(
    client: TcpStream,
    target: SocketAddr,
    every: u64,
    framing: FrameLength,
    counters: &Counters,
) -> std::io::Result<()> {
    let Counters {
        stop,
        lossless,
        passed,
        dropped,
        max_outstanding,
    } = counters;
    let server = TcpStream::connect_timeout(&target, Duration::from_secs(5))?;
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (mut c_in, mut s_out) = (client.try_clone()?, server.try_clone()?);
    // Requests on this connection not answered yet.
    let outstanding = Arc::new(AtomicU64::new(0));
    let (up_outstanding, up_max) = (outstanding.clone(), max_outstanding.clone());
    // Requests pass frame by frame (the same length prefix as responses), counted.
    let up = std::thread::spawn(move || {
        loop {
            let mut len = [0u8; 4];
            if c_in.read_exact(&mut len).is_err() {
                break;
            }
            let n = frame_len(len, framing);
            if n > 256 << 20 {
                break;
            }
            let mut body = vec![0u8; n];
            if c_in.read_exact(&mut body).is_err() {
                break;
            }
            let now = up_outstanding.fetch_add(1, Ordering::SeqCst) + 1;
            up_max.fetch_max(now, Ordering::SeqCst);
            if s_out.write_all(&len).is_err() || s_out.write_all(&body).is_err() {
                break;
            }
        }
        let _ = s_out.shutdown(Shutdown::Both);
        let _ = c_in.shutdown(Shutdown::Both);
    });
    // Responses pass frame by frame; a dropped one ends the connection.
    let (mut s_in, mut c_out) = (server, client);
    loop {
        if stop.load(Ordering::SeqCst) {
            break;
        }
        let mut len = [0u8; 4];
        if s_in.read_exact(&mut len).is_err() {
            break;
        }
        let n = frame_len(len, framing);
        if n > 256 << 20 {
            break;
        }
        let mut body = vec![0u8; n];
        if s_in.read_exact(&mut body).is_err() {
            break;
        }
        // Saturating: an acks=0 request has no answer, so counts can only be upper bounds.
        let _ = outstanding.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |o| {
            Some(o.saturating_sub(1))
        });
        let count = passed.load(Ordering::SeqCst) + dropped.load(Ordering::SeqCst) + 1;
        if count % every == 0 && !lossless.load(Ordering::SeqCst) {
            dropped.fetch_add(1, Ordering::SeqCst);
            break;
        }
        passed.fetch_add(1, Ordering::SeqCst);
        if c_out.write_all(&len).is_err() || c_out.write_all(&body).is_err() {
            break;
        }
    }
    let _ = c_out.shutdown(Shutdown::Both);
    let _ = s_in.shutdown(Shutdown::Both);
    let _ = up.join();
    Ok(())
}

fn frame_len(len: [u8; 4], framing: FrameLength) -> usize {
    match framing {
        FrameLength::Native => u32::from_le_bytes(len) as usize,
        FrameLength::Kafka => u32::from_be_bytes(len) as usize,
    }
}
