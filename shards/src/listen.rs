//! Listening sockets for the shards.
//!
//! glommio's `TcpListener::bind` sets SO_REUSEPORT only. Linux then refuses the bind while the
//! port holds a TIME_WAIT connection from a socket without SO_REUSEPORT, for instance a
//! connection that a plain (std) server on that port closed first. Such a port looks free to
//! every other check, and it stays refused for the whole TIME_WAIT (60 s). A CI run hit it: a
//! broker's start failed with EADDRINUSE on a port that a test before it had used. Every
//! server sets SO_REUSEADDR for this reason. Setting both here lets a shard's listener bind over
//! any TIME_WAIT. Its accepted connections inherit both options, so a std server (the metrics
//! endpoint, the controller transport) binds over their TIME_WAIT too. A live listener still
//! refuses the bind unless it also set SO_REUSEPORT, which only shard listeners do.

use std::net::SocketAddr;
use std::os::fd::{FromRawFd, IntoRawFd};

use glommio::net::TcpListener;
use socket2::{Domain, Protocol, SockAddr, Socket, Type};

/// The listen backlog, glommio's own: connections the kernel holds for a busy shard.
pub const LISTEN_BACKLOG: i32 = 1024;

/// A listener on `addr` for the calling shard's executor, with SO_REUSEADDR and SO_REUSEPORT.
///
/// # Panics
/// When called outside a glommio executor (as glommio's own `bind` does).
pub fn listen(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let domain = if addr.is_ipv6() {
        Domain::IPV6
    } else {
        Domain::IPV4
    };
    let socket = Socket::new(domain, Type::STREAM, Some(Protocol::TCP))?;
    socket.set_reuse_address(true)?;
    socket.set_reuse_port(true)?;
    socket.bind(&SockAddr::from(addr))?;
    socket.listen(LISTEN_BACKLOG)?;
    // SAFETY: the fd is a bound, listening TCP socket that `into_raw_fd` gave up; the
    // listener takes sole ownership of it.
    Ok(unsafe { TcpListener::from_raw_fd(socket.into_raw_fd()) })
}
