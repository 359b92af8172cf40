//! One socket read by a connection's reader and written by its writer at the same time, on
//! one shard thread. glommio keeps separate readiness sources for the two directions, so a
//! read and a write may both be pending; each poll borrows the socket only for its call.
//! The socket is plain or carries TLS ([`super::tls_stream`]); a TLS one never takes
//! sendfile ranges (the bytes must be sealed in user space), so its listener reads files by
//! copy ([`SharedStream::is_tls`]).

use std::cell::RefCell;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};

use futures_lite::{AsyncRead, AsyncWrite};
use rill_shards::rt::{Preallocated, TcpStream};

use super::tls_stream::TlsStream;

/// Bytes a plain socket reads ahead of what was asked. A small request then arrives in one
/// `recv` (its length prefix and its body together) instead of two; a read at least this
/// large, with nothing read ahead, goes straight into the caller's buffer (a large produce
/// frame is not copied twice). 8 KiB of memory per connection.
pub const READ_AHEAD_BYTES: usize = 8 << 10;

enum Socket {
    Plain(TcpStream<Preallocated>),
    Tls(Box<TlsStream>),
}

#[derive(Clone)]
pub struct SharedStream(Rc<RefCell<Socket>>);

impl SharedStream {
    pub fn new(stream: TcpStream) -> SharedStream {
        let stream = stream.buffered_with(Preallocated::new(READ_AHEAD_BYTES));
        SharedStream(Rc::new(RefCell::new(Socket::Plain(stream))))
    }

    /// A socket whose TLS handshake is done.
    pub fn tls(stream: TlsStream) -> SharedStream {
        SharedStream(Rc::new(RefCell::new(Socket::Tls(Box::new(stream)))))
    }

    pub fn fd(&self) -> RawFd {
        match &*self.0.borrow() {
            Socket::Plain(s) => s.as_raw_fd(),
            Socket::Tls(s) => s.tcp().as_raw_fd(),
        }
    }

    /// Whether the bytes are sealed by TLS: then nothing may be written to the socket
    /// behind the session's back (no sendfile).
    pub fn is_tls(&self) -> bool {
        matches!(&*self.0.borrow(), Socket::Tls(_))
    }

    /// The subject of the certificate a mutual-TLS client presented (RFC 2253).
    pub fn tls_client_dn(&self) -> Option<String> {
        match &*self.0.borrow() {
            Socket::Plain(_) => None,
            Socket::Tls(s) => s.client_dn(),
        }
    }
}

impl AsyncRead for SharedStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        match &mut *self.0.borrow_mut() {
            Socket::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Socket::Tls(s) => s.poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for SharedStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match &mut *self.0.borrow_mut() {
            Socket::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Socket::Tls(s) => s.poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut *self.0.borrow_mut() {
            Socket::Plain(s) => Pin::new(s).poll_flush(cx),
            Socket::Tls(s) => s.poll_flush(cx),
        }
    }

    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut *self.0.borrow_mut() {
            Socket::Plain(s) => Pin::new(s).poll_close(cx),
            Socket::Tls(s) => s.poll_close(cx),
        }
    }
}
