//! The `--metrics-listen` endpoint: a minimal HTTP/1.1 server on its own std threads, off the
//! shards, answering `GET /metrics` (and `HEAD`) with the text exposition; anything else gets
//! an error status. Every connection is answered once and closed (Prometheus opens a fresh
//! one or reuses none; keep-alive is not needed at one scrape per interval).
//!
//! Hostile input is bounded: a request head larger than [`MAX_HEAD_BYTES`] is answered 431, a
//! head not complete within [`READ_TIMEOUT`] (a client that connects and sends nothing, or
//! trickles) is answered 408, bytes that are not an HTTP/1.x request line 400; at most
//! [`MAX_CONNECTIONS`] are served at once, more are answered 503 by the accepting thread. The
//! server keeps serving after any of them.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::text::CONTENT_TYPE;

/// The largest request head (request line and headers) read; a scrape's is a few hundred bytes.
pub const MAX_HEAD_BYTES: usize = 8 << 10;
/// How long a client has to send its whole request head.
pub const READ_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a response may take to drain into the client's socket.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections served at once (each on its own short-lived thread).
pub const MAX_CONNECTIONS: usize = 8;

/// What a scrape answers: the exposition text.
pub type Render = Arc<dyn Fn() -> String + Send + Sync>;

/// The running endpoint.
pub struct MetricsServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl MetricsServer {
    /// Serves `listener` (bound by the caller, so a taken port fails the broker's start before
    /// anything else runs) on a `rill-metrics` thread until [`stop`](Self::stop).
    pub fn start(listener: TcpListener, render: Render) -> std::io::Result<MetricsServer> {
        MetricsServer::start_with(listener, render, READ_TIMEOUT)
    }

    /// [`start`](Self::start) with another head timeout (the tests' is long, so that what
    /// they hold open is still held when they look).
    fn start_with(
        listener: TcpListener,
        render: Render,
        read_timeout: Duration,
    ) -> std::io::Result<MetricsServer> {
        let addr = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = stop.clone();
        let thread = std::thread::Builder::new()
            .name("rill-metrics".into())
            .spawn(move || accept_loop(listener, render, stopping, read_timeout))?;
        Ok(MetricsServer {
            addr,
            stop,
            thread: Some(thread),
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops accepting (connections being answered finish on their own, within their
    /// timeouts).
    pub fn stop(mut self) {
        self.stop.store(true, Ordering::Release);
        // Wakes the blocking accept; it sees the flag and ends.
        let _ = TcpStream::connect_timeout(&loopback(self.addr), Duration::from_secs(1));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The address to connect to for a listener bound to `addr` (an unspecified IP is served on
/// loopback too).
fn loopback(addr: SocketAddr) -> SocketAddr {
    let ip = match addr.ip() {
        std::net::IpAddr::V4(ip) if ip.is_unspecified() => std::net::Ipv4Addr::LOCALHOST.into(),
        std::net::IpAddr::V6(ip) if ip.is_unspecified() => std::net::Ipv6Addr::LOCALHOST.into(),
        ip => ip,
    };
    SocketAddr::new(ip, addr.port())
}

fn accept_loop(
    listener: TcpListener,
    render: Render,
    stop: Arc<AtomicBool>,
    read_timeout: Duration,
) {
    let active = Arc::new(AtomicUsize::new(0));
    loop {
        let accepted = listener.accept();
        if stop.load(Ordering::Acquire) {
            return;
        }
        let mut stream = match accepted {
            Ok((s, _)) => s,
            Err(e) => {
                // Out of descriptors and the like: back off instead of spinning.
                log::warn!("metrics listener: accept failed: {e}");
                std::thread::sleep(Duration::from_millis(100));
                continue;
            }
        };
        if active.fetch_add(1, Ordering::AcqRel) >= MAX_CONNECTIONS {
            active.fetch_sub(1, Ordering::AcqRel);
            let _ = stream.set_write_timeout(Some(Duration::from_millis(100)));
            let _ = stream.write_all(&status_only(
                503,
                "Service Unavailable",
                "too many scrapes at once\n",
            ));
            let _ = stream.shutdown(Shutdown::Both);
            continue;
        }
        let render = render.clone();
        let done = ActiveGuard(active.clone());
        let spawned = std::thread::Builder::new()
            .name("rill-metrics-conn".into())
            .spawn(move || {
                let _done = done;
                serve(stream, &*render, read_timeout);
            });
        if let Err(e) = spawned {
            log::warn!("metrics listener: cannot start a connection thread: {e}");
        }
    }
}

/// Counts a connection being served until dropped.
struct ActiveGuard(Arc<AtomicUsize>);

impl Drop for ActiveGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Why a request head could not be read.
#[derive(Debug, PartialEq, Eq)]
enum HeadError {
    TooLarge,
    TimedOut,
    /// Closed or failed before a whole head: nobody to answer.
    Gone,
}

fn serve(
    mut stream: TcpStream,
    render: &(dyn Fn() -> String + Send + Sync),
    read_timeout: Duration,
) {
    let _ = stream.set_write_timeout(Some(WRITE_TIMEOUT));
    let response = match read_head(&mut stream, Instant::now() + read_timeout) {
        Ok(head) => respond(&head, render),
        Err(HeadError::TooLarge) => status_only(
            431,
            "Request Header Fields Too Large",
            "request head too large\n",
        ),
        Err(HeadError::TimedOut) => status_only(408, "Request Timeout", "no request in time\n"),
        Err(HeadError::Gone) => return,
    };
    let _ = stream.write_all(&response);
    let _ = stream.flush();
    let _ = stream.shutdown(Shutdown::Both);
}

/// Reads until the blank line ending the head, at most [`MAX_HEAD_BYTES`], by `deadline`.
fn read_head(stream: &mut impl ReadWithTimeout, deadline: Instant) -> Result<Vec<u8>, HeadError> {
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(HeadError::TimedOut);
        }
        stream.set_timeout(left).map_err(|_| HeadError::Gone)?;
        let n = match stream.read(&mut buf) {
            Ok(0) => return Err(HeadError::Gone),
            Ok(n) => n,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return Err(HeadError::TimedOut)
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => return Err(HeadError::Gone),
        };
        // Look for the end only where the new bytes could complete it.
        let from = head.len().saturating_sub(3);
        head.extend_from_slice(&buf[..n]);
        if let Some(end) = find_head_end(&head[from..]) {
            head.truncate(from + end);
            return Ok(head);
        }
        if head.len() > MAX_HEAD_BYTES {
            return Err(HeadError::TooLarge);
        }
    }
}

/// Where the head ends (after its blank line: CRLF CRLF, or bare LF LF as lenient servers
/// accept), if it does in `b`.
fn find_head_end(b: &[u8]) -> Option<usize> {
    for i in 0..b.len() {
        if b[i..].starts_with(b"\r\n\r\n") {
            return Some(i + 4);
        }
        if b[i..].starts_with(b"\n\n") {
            return Some(i + 2);
        }
    }
    None
}

/// A socket whose reads can be given a timeout (a seam for the unit tests).
trait ReadWithTimeout: Read {
    fn set_timeout(&mut self, t: Duration) -> std::io::Result<()>;
}

impl ReadWithTimeout for TcpStream {
    fn set_timeout(&mut self, t: Duration) -> std::io::Result<()> {
        self.set_read_timeout(Some(t))
    }
}

/// The answer to a complete request head.
fn respond(head: &[u8], render: &(dyn Fn() -> String + Send + Sync)) -> Vec<u8> {
    let Ok(head) = std::str::from_utf8(head) else {
        return status_only(400, "Bad Request", "request head is not UTF-8\n");
    };
    let line = head.lines().next().unwrap_or_default();
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return status_only(400, "Bad Request", "malformed request line\n");
    };
    if !version.starts_with("HTTP/1.") || method.is_empty() || !target.starts_with('/') {
        return status_only(400, "Bad Request", "malformed request line\n");
    }
    let path = target.split('?').next().unwrap_or(target);
    if path != "/metrics" {
        return status_only(404, "Not Found", "only /metrics is served here\n");
    }
    let head_only = match method {
        "GET" => false,
        "HEAD" => true,
        _ => {
            return response(
                405,
                "Method Not Allowed",
                "text/plain; charset=utf-8",
                "Allow: GET, HEAD\r\n",
                b"only GET and HEAD\n",
                false,
            )
        }
    };
    let body = render();
    response(200, "OK", CONTENT_TYPE, "", body.as_bytes(), head_only)
}

fn status_only(code: u16, reason: &str, body: &str) -> Vec<u8> {
    response(
        code,
        reason,
        "text/plain; charset=utf-8",
        "",
        body.as_bytes(),
        false,
    )
}

fn response(
    code: u16,
    reason: &str,
    content_type: &str,
    extra_headers: &str,
    body: &[u8],
    head_only: bool,
) -> Vec<u8> {
    let mut out = format!(
        "HTTP/1.1 {code} {reason}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\
         Connection: close\r\n{extra_headers}\r\n",
        body.len()
    )
    .into_bytes();
    if !head_only {
        out.extend_from_slice(body);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn render() -> String {
        "rill_up 1\n".into()
    }

    fn answer(head: &str) -> String {
        String::from_utf8(respond(head.as_bytes(), &render)).unwrap()
    }

    #[test]
    fn get_metrics_answers_the_exposition() {
        let a = answer("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
        assert!(a.starts_with("HTTP/1.1 200 OK\r\n"), "{a}");
        assert!(a.contains("Content-Type: text/plain; version=0.0.4"), "{a}");
        assert!(a.contains("Content-Length: 10\r\n"), "{a}");
        assert!(a.ends_with("\r\n\r\nrill_up 1\n"), "{a}");
        let q = answer("GET /metrics?x=1 HTTP/1.0\r\n\r\n");
        assert!(q.starts_with("HTTP/1.1 200 OK\r\n"), "{q}");
        let h = answer("HEAD /metrics HTTP/1.1\r\n\r\n");
        assert!(
            h.starts_with("HTTP/1.1 200 OK\r\n") && h.ends_with("\r\n\r\n"),
            "{h}"
        );
    }

    #[test]
    fn other_requests_get_error_statuses() {
        for (head, status) in [
            ("GET / HTTP/1.1\r\n\r\n", "404"),
            ("GET /metricsx HTTP/1.1\r\n\r\n", "404"),
            ("POST /metrics HTTP/1.1\r\n\r\n", "405"),
            ("GET /metrics\r\n\r\n", "400"),
            ("GET /metrics HTTP/2\r\n\r\n", "400"),
            ("GET  /metrics HTTP/1.1\r\n\r\n", "400"),
            ("\u{1}\u{2}garbage\r\n\r\n", "400"),
            ("", "400"),
        ] {
            let a = answer(head);
            assert!(
                a.starts_with(&format!("HTTP/1.1 {status} ")),
                "{head:?}: {a}"
            );
        }
        let bad = respond(&[0xff, 0xfe, b'\n', b'\n'], &render);
        assert!(bad.starts_with(b"HTTP/1.1 400 "));
    }

    /// Reads from a script of chunks; an empty chunk is a timeout.
    struct Script(Vec<Vec<u8>>);

    impl Read for Script {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            if self.0.is_empty() {
                return Ok(0);
            }
            let mut c = self.0.remove(0);
            if c.is_empty() {
                return Err(std::io::ErrorKind::WouldBlock.into());
            }
            let n = c.len().min(buf.len());
            let rest = c.split_off(n);
            buf[..n].copy_from_slice(&c);
            if !rest.is_empty() {
                self.0.insert(0, rest);
            }
            Ok(n)
        }
    }

    impl ReadWithTimeout for Script {
        fn set_timeout(&mut self, _: Duration) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn later() -> Instant {
        Instant::now() + Duration::from_secs(60)
    }

    #[test]
    fn heads_are_read_to_their_blank_line_across_reads() {
        let mut s = Script(vec![
            b"GET /metrics HT".to_vec(),
            b"TP/1.1\r\nHost: a\r".to_vec(),
            b"\n\r\nextra body".to_vec(),
        ]);
        let head = read_head(&mut s, later()).unwrap();
        assert_eq!(head, b"GET /metrics HTTP/1.1\r\nHost: a\r\n\r\n");
    }

    #[test]
    fn oversized_silent_and_vanishing_clients_are_refused() {
        let mut big = Script(vec![vec![b'a'; 1 << 20]]);
        assert_eq!(read_head(&mut big, later()), Err(HeadError::TooLarge));
        let mut silent = Script(vec![Vec::new()]);
        assert_eq!(read_head(&mut silent, later()), Err(HeadError::TimedOut));
        let mut gone = Script(vec![b"GET /met".to_vec()]);
        assert_eq!(read_head(&mut gone, later()), Err(HeadError::Gone));
        let mut past = Script(vec![b"GET /metrics HTTP/1.1\r\n\r\n".to_vec()]);
        assert_eq!(
            read_head(&mut past, Instant::now()),
            Err(HeadError::TimedOut)
        );
    }

    fn get(addr: SocketAddr, request: &[u8]) -> String {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        s.write_all(request).unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out
    }

    #[test]
    fn a_running_server_bounds_its_connections_and_stops() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let server =
            MetricsServer::start_with(listener, Arc::new(render), Duration::from_secs(60)).unwrap();
        let addr = server.local_addr();
        assert!(get(addr, b"GET /metrics HTTP/1.1\r\n\r\n").ends_with("\r\n\r\nrill_up 1\n"));
        // Connections that send nothing hold every slot (for the long timeout)...
        let silent: Vec<TcpStream> = (0..MAX_CONNECTIONS)
            .map(|_| TcpStream::connect(addr).unwrap())
            .collect();
        // ...so the next is answered 503 by the accepting thread (accepted in order, after
        // them), and serving resumes once they go.
        // (It sends nothing: a request left unread at the close could reset the connection
        // before the answer is read.)
        let busy = get(addr, b"");
        assert!(busy.starts_with("HTTP/1.1 503 "), "{busy}");
        drop(silent);
        let start = Instant::now();
        loop {
            let a = get(addr, b"GET /metrics HTTP/1.1\r\n\r\n");
            if a.starts_with("HTTP/1.1 200 ") {
                break;
            }
            assert!(start.elapsed() < Duration::from_secs(60), "{a}");
            std::thread::sleep(Duration::from_millis(20));
        }
        server.stop();
        assert!(
            TcpStream::connect(addr).is_err(),
            "stopped: nothing listens"
        );
    }
}
