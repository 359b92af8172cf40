//! A blocking socket, plain or TLS, shared by a writer thread and a reader thread (each
//! holds a clone): a client's connection to one shard, and the controller quorum's
//! connections between brokers (`controller::transport`, which also accepts with it).
//!
//! rustls is sans-IO: the reader reads ciphertext from the socket without holding the
//! session, then opens it under the session's lock; the writer seals under the lock and
//! writes outside it (in order: it takes the send lock before letting the session go). So a
//! writer blocked on a full socket never stops the reader from draining responses. What the
//! reader's processing leaves to send (a key update, an alert) goes out only if no write is
//! under way; otherwise with the writer's next write.

use std::io::{self, IoSlice, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use rustls::{ClientConnection, Connection, ServerConnection};

use crate::tls::ClientTls;

/// Ciphertext read from the socket at once (one TLS record and its framing fit).
const INBOX_BYTES: usize = 18 * 1024;

struct Session {
    session: Mutex<Connection>,
    /// Held while sealed bytes are written, so records reach the socket in sealing order.
    send: Mutex<()>,
}

/// A connected socket (its TLS handshake done, with TLS).
pub struct Socket {
    tcp: TcpStream,
    tls: Option<Arc<Session>>,
    /// Ciphertext read but not yet handed to the session (`pos..end`).
    inbox: Vec<u8>,
    pos: usize,
    end: usize,
}

fn poisoned() -> io::Error {
    io::Error::other("TLS session lock poisoned")
}

fn tls_error(e: rustls::Error) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, e)
}

impl Socket {
    /// Connects within `timeout`, and with `tls` runs the handshake within it too: an
    /// untrusted, expired or misnamed broker certificate fails here.
    pub fn connect(
        addr: SocketAddr,
        timeout: Duration,
        tls: Option<&ClientTls>,
    ) -> io::Result<Socket> {
        Self::connect_named(addr, None, timeout, tls)
    }

    /// [`Socket::connect`] to `addr`, which `host` (a name or an address) resolved to: a
    /// DNS name is what the certificate must carry (unless `tls` names another).
    pub fn connect_named(
        addr: SocketAddr,
        host: Option<&str>,
        timeout: Duration,
        tls: Option<&ClientTls>,
    ) -> io::Result<Socket> {
        let tcp = TcpStream::connect_timeout(&addr, timeout)?;
        let _ = tcp.set_nodelay(true);
        match tls {
            None => Ok(Socket::plain(tcp)),
            Some(t) => {
                let name = match host {
                    Some(h) => t.name_for_host(h, addr),
                    None => t.name_for(addr),
                };
                let session = ClientConnection::new(t.config.clone(), name).map_err(tls_error)?;
                Socket::handshake(tcp, session.into(), timeout)
            }
        }
    }

    /// The server side of a TLS handshake on an accepted `tcp`, within `timeout`: a client
    /// without a certificate the configuration's verifier accepts fails here.
    pub fn accept(
        tcp: TcpStream,
        config: Arc<rustls::ServerConfig>,
        timeout: Duration,
    ) -> io::Result<Socket> {
        let session = ServerConnection::new(config).map_err(tls_error)?;
        Socket::handshake(tcp, session.into(), timeout)
    }

    /// A socket without TLS.
    pub fn plain(tcp: TcpStream) -> Socket {
        Socket::with(tcp, None)
    }

    fn handshake(
        mut tcp: TcpStream,
        mut session: Connection,
        timeout: Duration,
    ) -> io::Result<Socket> {
        // Writes may be large: the session takes whole writes (no partial ones).
        session.set_buffer_limit(None);
        tcp.set_read_timeout(Some(timeout))?;
        tcp.set_write_timeout(Some(timeout))?;
        while session.is_handshaking() {
            session.complete_io(&mut tcp)?;
        }
        tcp.set_read_timeout(None)?;
        tcp.set_write_timeout(None)?;
        let tls = Arc::new(Session {
            session: Mutex::new(session),
            send: Mutex::new(()),
        });
        Ok(Socket::with(tcp, Some(tls)))
    }

    fn with(tcp: TcpStream, tls: Option<Arc<Session>>) -> Socket {
        let inbox = if tls.is_some() {
            vec![0; INBOX_BYTES]
        } else {
            Vec::new()
        };
        Socket {
            tcp,
            tls,
            inbox,
            pos: 0,
            end: 0,
        }
    }

    /// Another handle on the same socket and session (for a second thread).
    pub fn try_clone(&self) -> io::Result<Socket> {
        Ok(Socket::with(self.tcp.try_clone()?, self.tls.clone()))
    }

    /// Bounds each blocking read (a timed-out read leaves the session intact).
    pub fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        self.tcp.set_read_timeout(t)
    }

    /// Bounds each blocking write.
    pub fn set_write_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        self.tcp.set_write_timeout(t)
    }

    /// The address of the other end.
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.tcp.peer_addr()
    }

    /// Shuts the socket down (every clone's reads and writes end).
    pub fn shutdown(&self, how: Shutdown) -> io::Result<()> {
        self.tcp.shutdown(how)
    }

    /// Writes `bufs` whole: plain with vectored writes, never copied; under TLS sealed
    /// together and written at once.
    pub fn write_all_vectored(&mut self, slices: &mut [IoSlice<'_>]) -> io::Result<()> {
        let Some(tls) = self.tls.clone() else {
            let mut bufs = slices;
            while !bufs.is_empty() {
                match self.tcp.write_vectored(bufs) {
                    Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                    Ok(n) => IoSlice::advance_slices(&mut bufs, n),
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(e),
                }
            }
            return Ok(());
        };
        let mut session = tls.session.lock().map_err(|_| poisoned())?;
        for s in slices.iter() {
            session.writer().write_all(s)?;
        }
        self.send_sealed(&tls, session, true)
    }

    /// Writes what the session has sealed. `wait`: take the send lock even if another
    /// thread holds it (the writer); otherwise leave the bytes for the next write.
    fn send_sealed(
        &mut self,
        tls: &Session,
        mut session: MutexGuard<'_, Connection>,
        wait: bool,
    ) -> io::Result<()> {
        if !session.wants_write() {
            return Ok(());
        }
        let send = match wait {
            true => tls.send.lock().map_err(|_| poisoned())?,
            false => match tls.send.try_lock() {
                Ok(g) => g,
                Err(_) => return Ok(()),
            },
        };
        let mut sealed = Vec::new();
        while session.wants_write() {
            session.write_tls(&mut sealed)?;
        }
        drop(session);
        self.tcp.write_all(&sealed)?;
        drop(send);
        Ok(())
    }
}

impl Read for Socket {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let Some(tls) = self.tls.clone() else {
            return self.tcp.read(buf);
        };
        loop {
            {
                let mut session = tls.session.lock().map_err(|_| poisoned())?;
                match session.reader().read(buf) {
                    Ok(n) => return Ok(n),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(e) => return Err(e),
                }
            }
            if self.pos == self.end {
                // Blocking, without the session: the writer keeps sealing meanwhile.
                let n = self.tcp.read(&mut self.inbox)?;
                (self.pos, self.end) = (0, n);
            }
            let mut session = tls.session.lock().map_err(|_| poisoned())?;
            let mut ciphertext = &self.inbox[self.pos..self.end];
            // An empty slice tells the session the peer closed.
            let n = session.read_tls(&mut ciphertext)?;
            self.pos += n;
            if let Err(e) = session.process_new_packets() {
                let _ = self.send_sealed(&tls, session, false);
                return Err(tls_error(e));
            }
            self.send_sealed(&tls, session, false)?;
        }
    }
}

impl Write for Socket {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.write_all_vectored(&mut [IoSlice::new(buf)])?;
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl AsRawFd for Socket {
    fn as_raw_fd(&self) -> RawFd {
        self.tcp.as_raw_fd()
    }
}
