//! The cross-shard mesh: bounded flume channels between every pair of shards.
//!
//! Each ordered pair of shards (including a shard and itself) has its own bounded channel, so a
//! shard flooding one peer cannot use up another sender's capacity, and messages from one
//! sender arrive in the order sent. Each shard also has one inbound channel for threads that are
//! not shards (the controller thread, tests); those messages arrive with `from ==`
//! [`EXTERNAL`]. The mesh carries control traffic only: batch hand-offs, never one message per
//! record (a cross-core wake-up costs tens of microseconds).
//!
//! Flume rather than glommio's `shared_channel`/`channel_mesh`: those are unsound in glommio
//! 0.9.0 (issue 700).

use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

/// The `from` value of messages sent by a thread that is not a shard ([`MeshSender`],
/// [`MeshEndpoint::sender_to`]).
pub const EXTERNAL: usize = usize::MAX;

/// Why a mesh operation failed. The message is dropped in every case.
#[derive(thiserror::Error, Debug, Clone, Copy, PartialEq, Eq)]
pub enum MeshError {
    /// The channel to `shard` is at capacity (only from the `try_` methods).
    #[error("mesh channel to shard {0} is full")]
    Full(usize),
    /// The other side is gone: the receiving shard's endpoint was dropped (on send), or every
    /// sender into this shard was dropped and nothing is left to receive (on recv).
    #[error("mesh peer is gone")]
    Disconnected,
    /// There is no shard with this index.
    #[error("no shard {shard} in a mesh of {shards}")]
    NoSuchShard {
        /// The index asked for.
        shard: usize,
        /// The number of shards.
        shards: usize,
    },
}

type Tx<M> = flume::Sender<(usize, M)>;
type Rx<M> = flume::Receiver<(usize, M)>;

/// The full set of channels, before it is split into per-shard endpoints.
pub struct Mesh<M> {
    shards: usize,
    /// `tx[from][to]`
    tx: Vec<Vec<Tx<M>>>,
    /// `rx[to][from]`, with the external channel at index `shards`.
    rx: Vec<Vec<Rx<M>>>,
    /// The external channel into each shard.
    ext_tx: Vec<Tx<M>>,
}

impl<M: Send + 'static> Mesh<M> {
    /// Creates a mesh for `shards` shards. Every channel (each ordered pair of shards, and the
    /// external channel into each shard) holds at most `capacity` messages (at least 1).
    pub fn new(shards: usize, capacity: usize) -> Self {
        let capacity = capacity.max(1);
        let mut tx: Vec<Vec<Tx<M>>> = (0..shards).map(|_| Vec::with_capacity(shards)).collect();
        let mut rx: Vec<Vec<Rx<M>>> = (0..shards)
            .map(|_| Vec::with_capacity(shards + 1))
            .collect();
        for inbound in rx.iter_mut() {
            for outbound in tx.iter_mut() {
                let (s, r) = flume::bounded(capacity);
                outbound.push(s);
                inbound.push(r);
            }
        }
        let mut ext_tx = Vec::with_capacity(shards);
        for inbound in rx.iter_mut() {
            let (s, r) = flume::bounded(capacity);
            ext_tx.push(s);
            inbound.push(r);
        }
        Mesh {
            shards,
            tx,
            rx,
            ext_tx,
        }
    }

    /// The number of shards.
    pub fn shards(&self) -> usize {
        self.shards
    }

    /// A handle for threads that are not shards to send into the mesh. Call it before
    /// [`Mesh::take_endpoints`]; it may be cloned and kept for as long as needed.
    pub fn external_sender(&self) -> MeshSender<M> {
        MeshSender {
            tx: self.ext_tx.clone(),
        }
    }

    /// Splits the mesh into its endpoints: endpoint `i` belongs to shard `i`. Move each into its
    /// shard (for instance through a [`crate::PerShard`]).
    pub fn take_endpoints(self) -> Vec<MeshEndpoint<M>> {
        let shards = self.shards;
        self.tx
            .into_iter()
            .zip(self.rx)
            .enumerate()
            .map(|(id, (tx, rx))| MeshEndpoint {
                id,
                shards,
                tx,
                rx,
                next: Cell::new(0),
            })
            .collect()
    }
}

/// One shard's end of the mesh: senders to every shard and receivers from every shard.
///
/// `Send` (move it into its shard), not `Sync`: one shard owns it.
pub struct MeshEndpoint<M> {
    id: usize,
    shards: usize,
    /// `tx[to]`
    tx: Vec<Tx<M>>,
    /// `rx[from]`, external channel last.
    rx: Vec<Rx<M>>,
    /// Where the next receive starts looking, so that no sender is starved.
    next: Cell<usize>,
}

impl<M> MeshEndpoint<M> {
    /// The shard this endpoint belongs to.
    pub fn id(&self) -> usize {
        self.id
    }

    /// The number of shards in the mesh.
    pub fn shards(&self) -> usize {
        self.shards
    }

    fn tx_to(&self, shard: usize) -> Result<&Tx<M>, MeshError> {
        self.tx.get(shard).ok_or(MeshError::NoSuchShard {
            shard,
            shards: self.shards,
        })
    }

    /// Sends `msg` to `shard` (which may be this shard), waiting while its channel is full:
    /// this is the back-pressure.
    pub async fn send_to(&self, shard: usize, msg: M) -> Result<(), MeshError> {
        self.tx_to(shard)?
            .send_async((self.id, msg))
            .await
            .map_err(|_| MeshError::Disconnected)
    }

    /// Sends `msg` to `shard` if its channel has room, else returns [`MeshError::Full`].
    pub fn try_send_to(&self, shard: usize, msg: M) -> Result<(), MeshError> {
        self.tx_to(shard)?
            .try_send((self.id, msg))
            .map_err(|e| match e {
                flume::TrySendError::Full(_) => MeshError::Full(shard),
                flume::TrySendError::Disconnected(_) => MeshError::Disconnected,
            })
    }

    /// Receives the next message from any shard or from outside, as `(from, msg)`; `from` is
    /// [`EXTERNAL`] for messages from non-shard threads. Channels are scanned round-robin so a
    /// busy sender cannot starve the others; each sender's messages arrive in order.
    ///
    /// Fails with [`MeshError::Disconnected`] only when every other endpoint and every external
    /// sender is gone and nothing is left to receive (messages this shard might still send to
    /// itself do not keep it waiting).
    pub async fn recv(&self) -> Result<(usize, M), MeshError> {
        Recv {
            ep: self,
            futs: Vec::new(),
        }
        .await
    }

    /// Receives a message if one is waiting, without waiting. `Ok(None)` means nothing queued.
    pub fn try_recv(&self) -> Result<Option<(usize, M)>, MeshError> {
        let n = self.rx.len();
        let start = self.next.get();
        for k in 0..n {
            let i = (start + k) % n;
            if let Ok(m) = self.rx[i].try_recv() {
                self.next.set((i + 1) % n);
                return Ok(Some(m));
            }
        }
        if self.others_alive() {
            Ok(None)
        } else {
            Err(MeshError::Disconnected)
        }
    }

    /// Whether anyone but this endpoint can still send to this shard. The endpoint's own sender
    /// into its shard-to-self channel does not count.
    fn others_alive(&self) -> bool {
        self.rx
            .iter()
            .enumerate()
            .any(|(i, r)| r.sender_count() > usize::from(i == self.id))
    }

    /// A plain flume sender on this shard's channel to `shard`, for a helper thread working on
    /// this shard's behalf (it may block on it, a shard must not). The caller stamps `from`:
    /// this shard's [`id`](Self::id), or [`EXTERNAL`]. It shares the channel's capacity and
    /// ordering with [`MeshEndpoint::send_to`], and keeps the channel open while it lives.
    /// Panics if `shard >= self.shards()`.
    pub fn sender_to(&self, shard: usize) -> flume::Sender<(usize, M)> {
        self.tx[shard].clone()
    }
}

/// Future of [`MeshEndpoint::recv`]: one flume receive future per inbound channel, polled
/// round-robin from where the previous receive stopped.
struct Recv<'a, M> {
    ep: &'a MeshEndpoint<M>,
    futs: Vec<Option<flume::r#async::RecvFut<'a, (usize, M)>>>,
}

impl<M> Future for Recv<'_, M> {
    type Output = Result<(usize, M), MeshError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let ep = this.ep;
        // Fast path, and the only path when something is queued: no wakers registered.
        match ep.try_recv() {
            Ok(Some(m)) => return Poll::Ready(Ok(m)),
            Err(e) => return Poll::Ready(Err(e)),
            Ok(None) => {}
        }
        let n = ep.rx.len();
        if this.futs.is_empty() {
            this.futs = ep.rx.iter().map(|r| Some(r.recv_async())).collect();
        }
        let start = ep.next.get();
        for k in 0..n {
            let i = (start + k) % n;
            let Some(fut) = this.futs[i].as_mut() else {
                continue;
            };
            match Pin::new(fut).poll(cx) {
                Poll::Ready(Ok(m)) => {
                    ep.next.set((i + 1) % n);
                    this.futs[i] = None;
                    return Poll::Ready(Ok(m));
                }
                Poll::Ready(Err(_)) => this.futs[i] = None,
                Poll::Pending => {}
            }
        }
        if ep.others_alive() {
            return Poll::Pending;
        }
        // Every other sender is gone, but one may have sent just before leaving, after its
        // channel was polled above: look once more before reporting the end.
        match ep.try_recv() {
            Ok(Some(m)) => Poll::Ready(Ok(m)),
            Ok(None) | Err(_) => Poll::Ready(Err(MeshError::Disconnected)),
        }
    }
}

/// A sender for threads that are not shards: reaches every shard through its external channel.
/// Messages arrive with `from ==` [`EXTERNAL`]. `Clone`, `Send` and `Sync`.
pub struct MeshSender<M> {
    tx: Vec<Tx<M>>,
}

impl<M> Clone for MeshSender<M> {
    fn clone(&self) -> Self {
        MeshSender {
            tx: self.tx.clone(),
        }
    }
}

impl<M> MeshSender<M> {
    /// The number of shards.
    pub fn shards(&self) -> usize {
        self.tx.len()
    }

    fn tx_to(&self, shard: usize) -> Result<&Tx<M>, MeshError> {
        self.tx.get(shard).ok_or(MeshError::NoSuchShard {
            shard,
            shards: self.tx.len(),
        })
    }

    /// Sends `msg` to `shard`, blocking the calling thread while the channel is full. Do not call
    /// it on a shard (it would block the executor): shards use [`MeshEndpoint::send_to`].
    pub fn send_to(&self, shard: usize, msg: M) -> Result<(), MeshError> {
        self.tx_to(shard)?
            .send((EXTERNAL, msg))
            .map_err(|_| MeshError::Disconnected)
    }

    /// Sends `msg` to `shard` if its external channel has room.
    pub fn try_send_to(&self, shard: usize, msg: M) -> Result<(), MeshError> {
        self.tx_to(shard)?
            .try_send((EXTERNAL, msg))
            .map_err(|e| match e {
                flume::TrySendError::Full(_) => MeshError::Full(shard),
                flume::TrySendError::Disconnected(_) => MeshError::Disconnected,
            })
    }

    /// Sends a clone of `msg` to every shard, blocking while a channel is full. Stops at the
    /// first shard that is gone and returns [`MeshError::Disconnected`]; earlier shards got it.
    pub fn broadcast(&self, msg: M) -> Result<(), MeshError>
    where
        M: Clone,
    {
        for shard in 0..self.tx.len() {
            self.send_to(shard, msg.clone())?;
        }
        Ok(())
    }
}
