//! One socket read by a connection's reader and written by its writer at the same time, on
//! one shard thread. glommio keeps separate readiness sources for the two directions, so a
//! read and a write may both be pending; each poll borrows the socket only for its call.

use std::cell::RefCell;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};

use futures_lite::{AsyncRead, AsyncWrite};
use rill_shards::rt::TcpStream;

#[derive(Clone)]
pub struct SharedStream(Rc<RefCell<TcpStream>>);

impl SharedStream {
    pub fn new(stream: TcpStream) -> SharedStream {
        SharedStream(Rc::new(RefCell::new(stream)))
    }

    pub fn fd(&self) -> RawFd {
        self.0.borrow().as_raw_fd()
    }
}

impl AsyncRead for SharedStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut *self.0.borrow_mut()).poll_read(cx, buf)
    }
}

impl AsyncWrite for SharedStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut *self.0.borrow_mut()).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.0.borrow_mut()).poll_flush(cx)
    }

    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.0.borrow_mut()).poll_close(cx)
    }
}
