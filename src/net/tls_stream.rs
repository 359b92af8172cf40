//! TLS over a shard's socket: rustls is sans-IO, so the bytes it seals and opens are moved
//! here, on the shard that owns the connection, through glommio's non-blocking socket.
//!
//! The handshake runs before the connection is split into its reader and writer
//! ([`handshake`]), bounded by `--tls-handshake-timeout-ms`. After it, the reader only reads
//! the socket and the writer only writes it: glommio keeps one waker per direction, so a
//! reader that waited on write readiness would steal the writer's wake-up. Anything the
//! reader's processing leaves to send (a TLS 1.3 key update, an alert) waits in the session
//! for the writer's next write or flush.

use std::io::{self, Read, Write};
use std::pin::Pin;
use std::task::{Context, Poll};

use futures_lite::{AsyncRead, AsyncWrite};
use rill_shards::rt::TcpStream;
use rustls::pki_types::ServerName;
use rustls::{ClientConnection, Connection, ServerConnection};

/// A socket and its TLS session: the server's side of a listener's connection, or the
/// client's side of a connection this broker opened to another ([`connect`]).
pub struct TlsStream {
    tcp: TcpStream,
    session: Connection,
}

/// The socket seen as blocking I/O that answers `WouldBlock` where the poll is pending
/// (the waker is registered then), which is what rustls's `read_tls` / `write_tls` take.
struct PollIo<'a, 'b> {
    tcp: &'a mut TcpStream,
    cx: &'a mut Context<'b>,
}

impl Read for PollIo<'_, '_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match Pin::new(&mut *self.tcp).poll_read(self.cx, buf) {
            Poll::Ready(r) => r,
            Poll::Pending => Err(io::ErrorKind::WouldBlock.into()),
        }
    }
}

impl Write for PollIo<'_, '_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match Pin::new(&mut *self.tcp).poll_write(self.cx, buf) {
            Poll::Ready(r) => r,
            Poll::Pending => Err(io::ErrorKind::WouldBlock.into()),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

fn tls_error(e: rustls::Error) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, e)
}

impl TlsStream {
    pub fn tcp(&self) -> &TcpStream {
        &self.tcp
    }

    /// The subject of the client's certificate, when it presented one (mutual TLS: the
    /// listener's `--tls-client-ca` verified it in the handshake).
    pub fn client_dn(&self) -> Option<String> {
        let cert = self.session.peer_certificates()?.first()?;
        crate::tls::principal::subject_dn(cert)
    }

    /// Reads TLS records until plaintext is available (or the peer closed). Never writes.
    pub fn poll_read(&mut self, cx: &mut Context<'_>, buf: &mut [u8]) -> Poll<io::Result<usize>> {
        loop {
            match self.session.reader().read(buf) {
                Ok(n) => return Poll::Ready(Ok(n)),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Poll::Ready(Err(e)),
            }
            let mut io = PollIo {
                tcp: &mut self.tcp,
                cx,
            };
            match self.session.read_tls(&mut io) {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Poll::Pending,
                Err(e) => return Poll::Ready(Err(e)),
            }
            // Bad records are an error: the connection closes (the alert, if any, is not
            // waited for).
            self.session.process_new_packets().map_err(tls_error)?;
        }
    }

    /// Seals `buf` after sending what was sealed before (so at most one buffer's worth of
    /// ciphertext waits in the session), then sends what it can without waiting.
    pub fn poll_write(&mut self, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        match self.poll_send_sealed(cx) {
            Poll::Ready(Ok(())) => {}
            Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
            Poll::Pending => return Poll::Pending,
        }
        let n = self.session.writer().write(buf)?;
        match self.poll_send_sealed(cx) {
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            // Accepted: what is left goes out on the next write or flush.
            _ => Poll::Ready(Ok(n)),
        }
    }

    /// Sends every sealed byte.
    pub fn poll_flush(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.poll_send_sealed(cx)
    }

    fn poll_send_sealed(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.session.wants_write() {
            let mut io = PollIo {
                tcp: &mut self.tcp,
                cx,
            };
            match self.session.write_tls(&mut io) {
                Ok(0) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Poll::Pending,
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
        Poll::Ready(Ok(()))
    }

    /// Sends a close_notify (best effort: never waits) and shuts the socket's write side.
    pub fn poll_close(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.session.send_close_notify();
        if self.poll_send_sealed(cx).is_pending() {
            return Poll::Pending;
        }
        Pin::new(&mut self.tcp).poll_close(cx)
    }
}

/// Runs the server side of a TLS handshake on `tcp` to its end. The caller bounds it in time.
pub async fn handshake(
    tcp: TcpStream,
    config: std::sync::Arc<rustls::ServerConfig>,
) -> io::Result<TlsStream> {
    let session = ServerConnection::new(config).map_err(tls_error)?;
    run_handshake(tcp, session.into()).await
}

/// Runs the client side of a TLS handshake on `tcp`, checking the server's certificate
/// against `name`. The caller bounds it in time.
pub async fn connect(
    tcp: TcpStream,
    config: std::sync::Arc<rustls::ClientConfig>,
    name: ServerName<'static>,
) -> io::Result<TlsStream> {
    let session = ClientConnection::new(config, name).map_err(tls_error)?;
    run_handshake(tcp, session.into()).await
}

async fn run_handshake(tcp: TcpStream, session: Connection) -> io::Result<TlsStream> {
    let mut stream = TlsStream { tcp, session };
    std::future::poll_fn(|cx| stream.poll_handshake(cx)).await?;
    Ok(stream)
}

impl TlsStream {
    fn poll_handshake(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        loop {
            // Both directions are polled here, before a reader and a writer exist.
            match self.poll_send_sealed(cx) {
                Poll::Ready(Ok(())) => {}
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            }
            if !self.session.is_handshaking() {
                return Poll::Ready(Ok(()));
            }
            let mut io = PollIo {
                tcp: &mut self.tcp,
                cx,
            };
            match self.session.read_tls(&mut io) {
                Ok(0) => {
                    return Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "the peer closed during the TLS handshake",
                    )))
                }
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Poll::Pending,
                Err(e) => return Poll::Ready(Err(e)),
            }
            if let Err(e) = self.session.process_new_packets() {
                // Tell the client why (a best-effort alert), then fail.
                let _ = self.poll_send_sealed(cx);
                return Poll::Ready(Err(tls_error(e)));
            }
        }
    }
}
