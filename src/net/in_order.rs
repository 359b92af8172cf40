//! The replies of one pipelined connection: a reader queues each request's reply (ready, or a
//! future such as a produce's acknowledgement wait) in arrival order, one writer takes them in
//! that order, awaits each and writes it. At most `--max-in-flight-requests-per-connection`
//! replies are queued or being written; past it the reader waits, so a client that never
//! reads its replies stops being read (its writer is stuck on a full socket until the send
//! deadline closes the connection).

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use rill_shards::Deadlines;

use super::conn_limits::after;

/// A reply that may still wait for something (an acknowledgement) before it can be written.
pub type Later<T> = Pin<Box<dyn Future<Output = T>>>;

pub struct InOrder<T> {
    max: usize,
    queue: RefCell<VecDeque<Later<T>>>,
    /// Queued replies plus the one the writer holds.
    in_flight: Cell<usize>,
    closed: Cell<bool>,
    changed: event_listener::Event,
}

impl<T> InOrder<T> {
    pub fn new(max: usize) -> InOrder<T> {
        assert!(max >= 1, "at least one request in flight");
        InOrder {
            max,
            queue: RefCell::new(VecDeque::with_capacity(max)),
            in_flight: Cell::new(0),
            closed: Cell::new(false),
            changed: event_listener::Event::new(),
        }
    }

    /// Replies queued or being written.
    pub fn in_flight(&self) -> usize {
        self.in_flight.get()
    }

    async fn wait_until(&self, ready: impl Fn(&Self) -> bool) {
        loop {
            if ready(self) {
                return;
            }
            let changed = self.changed.listen();
            // Checked again after listening: a change in between would be missed.
            if ready(self) {
                return;
            }
            changed.await;
        }
    }

    /// Waits until fewer than `max` replies are in flight: the reader waits here before it
    /// reads the next request, so at most `max` requests are read and unanswered (with 1, a
    /// connection reads its next request only once the previous reply is written).
    pub async fn room(&self) {
        self.wait_until(|q| q.in_flight.get() < q.max).await
    }

    /// Queues the next reply once fewer than `max` are in flight.
    pub async fn push(&self, reply: Later<T>) {
        self.room().await;
        self.queue.borrow_mut().push_back(reply);
        self.in_flight.set(self.in_flight.get() + 1);
        assert!(self.in_flight.get() <= self.max);
        self.changed.notify(usize::MAX);
    }

    /// Queues a reply that is ready now.
    pub async fn push_ready(&self, reply: T)
    where
        T: 'static,
    {
        self.push(Box::pin(std::future::ready(reply))).await
    }

    /// No more replies will be queued: the writer ends after the last one.
    pub fn close(&self) {
        self.closed.set(true);
        self.changed.notify(usize::MAX);
    }

    /// Waits until every queued reply is written.
    pub async fn drained(&self) {
        self.wait_until(|q| q.in_flight.get() == 0).await
    }

    /// The oldest reply once it is ready (still in flight until [`InOrder::written`]);
    /// `None` once closed and empty.
    pub async fn next(&self) -> Option<T> {
        self.wait_until(|q| q.closed.get() || !q.queue.borrow().is_empty())
            .await;
        let reply = self.queue.borrow_mut().pop_front()?;
        Some(reply.await)
    }

    /// The reply [`InOrder::next`] gave is written.
    pub fn written(&self) {
        assert!(self.in_flight.get() > 0, "written without a reply");
        self.in_flight.set(self.in_flight.get() - 1);
        self.changed.notify(usize::MAX);
    }

    /// `read`'s output, or `None` (and `read` dropped) once the connection has been idle for
    /// `idle`: nothing in flight and nothing read meanwhile. A request being handled or a
    /// reply waiting for its acknowledgement is not idle.
    pub async fn unless_idle<R>(
        &self,
        deadlines: &Deadlines,
        idle: Duration,
        read: impl Future<Output = R>,
    ) -> Option<R> {
        futures_lite::future::or(async { Some(read.await) }, async {
            self.drained().await;
            deadlines.sleep_until(after(idle)).await;
            None
        })
        .await
    }

    /// Runs a connection's reader and writer together. When the reader is done, what it
    /// queued is still answered, then the writer ends; a writer that stops (a write failed or
    /// missed its deadline) ends the reader too.
    pub async fn serve(
        &self,
        reading: impl Future<Output = ()>,
        writing: impl Future<Output = ()>,
    ) {
        let reading = async {
            reading.await;
            self.close();
            std::future::pending::<()>().await
        };
        futures_lite::future::or(writing, reading).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_lite::future::{block_on, poll_once};

    #[test]
    fn replies_come_out_in_order_and_the_bound_holds() {
        let q: InOrder<u32> = InOrder::new(2);
        block_on(async {
            let (tx, rx) = flume::bounded::<()>(1);
            // The first reply waits (an acknowledgement); the second is ready at once.
            q.push(Box::pin(async move {
                let _ = rx.recv_async().await;
                1
            }))
            .await;
            q.push_ready(2).await;
            assert_eq!(q.in_flight(), 2);
            // The reader may not read a third request, nor queue its reply.
            assert!(poll_once(Box::pin(q.room())).await.is_none(), "no room");
            let mut third = Box::pin(q.push_ready(3));
            assert!(poll_once(&mut third).await.is_none(), "the bound is 2");
            let mut first = Box::pin(q.next());
            assert!(
                poll_once(&mut first).await.is_none(),
                "the ready second reply must not overtake the waiting first"
            );
            tx.send(()).unwrap();
            assert_eq!(first.await, Some(1));
            assert!(
                poll_once(&mut third).await.is_none(),
                "still 2 in flight until the first is written"
            );
            q.written();
            third.await;
            assert_eq!(q.next().await, Some(2));
            q.written();
            assert_eq!(q.next().await, Some(3));
            q.written();
            q.close();
            assert_eq!(q.next().await, None);
            q.drained().await;
        });
    }
}
