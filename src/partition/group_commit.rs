//! The shard's group commit: one task writes every partition's pending batches, then (with
//! `--fsync always`) one fdatasync per touched file covers every batch appended since the last
//! round, so concurrent producers share the cost. Appends made while a round writes wait for
//! the next round: that is the coalescing. The next round's writes start while a round syncs
//! (a partition's sync takes its unsynced files first, so a write that lands during it is
//! synced by the next round), and rounds advance in order.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Instant;

use event_listener::Event;
use futures_util::future::{join, join_all, select, Either, LocalBoxFuture};

use super::Partition;
use crate::log::Flushed;
use crate::log::FsyncPolicy;
use crate::metrics::{Histogram, HistogramSnapshot};
use crate::protocol::ErrorCode;

pub struct GroupCommit {
    dirty: RefCell<Vec<Rc<Partition>>>,
    wake: Event,
    policy: FsyncPolicy,
    /// Rounds writing or syncing now (at most two: one syncs while the next writes).
    rounds: std::cell::Cell<u32>,
    /// Notified at the end of every round.
    idle: Event,
    /// Bytes and partitions each round wrote, and each partition's fdatasync (metrics).
    round_bytes: Histogram,
    round_partitions: Histogram,
    /// Each round's writes (every partition's DMA writes, run together).
    write: Histogram,
    fdatasync: Histogram,
}

/// What the group commit reports to a scrape.
pub struct GroupCommitStats {
    pub round_bytes: HistogramSnapshot,
    pub round_partitions: HistogramSnapshot,
    pub write: HistogramSnapshot,
    pub fdatasync: HistogramSnapshot,
}

impl GroupCommit {
    pub fn new(policy: FsyncPolicy) -> Rc<GroupCommit> {
        Rc::new(GroupCommit {
            dirty: RefCell::new(Vec::new()),
            wake: Event::new(),
            policy,
            rounds: std::cell::Cell::new(0),
            idle: Event::new(),
            round_bytes: Histogram::bytes(),
            round_partitions: Histogram::count(),
            write: Histogram::latency(),
            fdatasync: Histogram::latency(),
        })
    }

    pub fn stats(&self) -> GroupCommitStats {
        GroupCommitStats {
            round_bytes: self.round_bytes.snapshot(),
            round_partitions: self.round_partitions.snapshot(),
            write: self.write.snapshot(),
            fdatasync: self.fdatasync.snapshot(),
        }
    }

    /// Schedules a partition with pending appends for the next round.
    pub fn mark_dirty(&self, p: &Rc<Partition>) {
        let mut dirty = self.dirty.borrow_mut();
        if !dirty.iter().any(|d| Rc::ptr_eq(d, p)) {
            dirty.push(p.clone());
        }
        drop(dirty);
        self.wake.notify(1);
    }

    /// The task body: runs rounds until the shard stops. With `--fsync always` a round's
    /// fdatasync overlaps the next round's writes (a produce that arrives during a sync waits
    /// for that sync, not for a whole round after it); rounds still advance in order, and at
    /// most one round syncs while the next writes.
    pub async fn run(self: Rc<Self>) {
        let mut syncing: Option<LocalBoxFuture<'static, ()>> = None;
        loop {
            let listener = self.wake.listen();
            let dirty = std::mem::take(&mut *self.dirty.borrow_mut());
            if dirty.is_empty() {
                match syncing.take() {
                    // A sync is on: wait for it or for new appends, whichever comes first.
                    Some(s) => match select(s, listener).await {
                        Either::Left(((), _)) => self.round_done(),
                        Either::Right(((), s)) => syncing = Some(s),
                    },
                    None => listener.await,
                }
                continue;
            }
            drop(listener);
            self.rounds.set(self.rounds.get() + 1);
            let write = self.write(dirty);
            let written = match syncing.take() {
                // The previous round's sync must end before this round's begins (order, and
                // the bound of one round syncing).
                Some(s) => {
                    let ((), written) = join(s, write).await;
                    self.round_done();
                    written
                }
                None => write.await,
            };
            if self.policy == FsyncPolicy::Always {
                syncing = Some(Box::pin(self.clone().sync_then_advance(written)));
            } else {
                advance(written);
                self.round_done();
            }
        }
    }

    fn round_done(&self) {
        self.rounds.set(self.rounds.get() - 1);
        self.idle.notify(usize::MAX);
    }

    /// Waits until every append made so far went through a round (for a clean shutdown:
    /// the caller stopped taking appends first).
    pub async fn quiesce(&self) {
        loop {
            let listener = self.idle.listen();
            if self.rounds.get() == 0 && self.dirty.borrow().is_empty() {
                return;
            }
            self.wake.notify(1);
            listener.await;
        }
    }

    /// A round's writes: every dirty partition's pending batches, all at once. Returns the
    /// partitions written and how far.
    async fn write(&self, dirty: Vec<Rc<Partition>>) -> Vec<(Rc<Partition>, Flushed)> {
        // Read before the flushes take the pending batches (nothing awaits in between).
        let bytes: usize = dirty.iter().map(|p| p.pending_bytes()).sum();
        self.round_bytes.observe(bytes as u64);
        self.round_partitions.observe(dirty.len() as u64);
        let started = std::time::Instant::now();
        let results = join_all(dirty.iter().map(|p| p.flush())).await;
        self.write.observe_duration(started.elapsed());
        let mut written = Vec::with_capacity(dirty.len());
        for (p, r) in dirty.iter().zip(results) {
            match r {
                Ok(Some(next)) => written.push((p.clone(), next)),
                Ok(None) => {}
                Err(e) => {
                    log::error!("{}-{}: write failed: {e}", p.topic, p.index);
                    p.fail_waiters(ErrorCode::KafkaStorageError);
                }
            }
        }
        written
    }

    /// A round's fdatasyncs (each partition syncs its own files, all at once, and fails
    /// itself on an error), then its advance.
    async fn sync_then_advance(self: Rc<Self>, written: Vec<(Rc<Partition>, Flushed)>) {
        join_all(written.iter().map(|(p, _)| self.timed_sync(p))).await;
        advance(written);
    }

    /// For `--fsync interval:MS` and a clean stop: fdatasync every partition's unsynced
    /// files; a partition whose sync fails marks itself failed.
    pub async fn sync_all(&self, partitions: &[Rc<Partition>]) {
        join_all(partitions.iter().map(|p| self.timed_sync(p))).await;
    }

    /// Syncs a partition, timing it when it had files to sync (a partition with nothing
    /// unsynced would record a zero that no disk took).
    async fn timed_sync(&self, p: &Partition) {
        let started = Instant::now();
        if let Ok(files) = p.sync().await {
            if files > 0 {
                self.fdatasync.observe_duration(started.elapsed());
            }
        }
    }
}

/// Moves each written partition's durable end, unless it failed meanwhile (its own write or
/// sync, or a later round's write that failed while this one synced).
fn advance(written: Vec<(Rc<Partition>, Flushed)>) {
    for (p, flushed) in written {
        if p.failure().is_none() {
            p.advance(flushed);
        }
    }
}
