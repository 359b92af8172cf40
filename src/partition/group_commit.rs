//! The shard's group commit: one task writes every partition's pending batches, then (with
//! `--fsync always`) one fdatasync per touched file covers every batch appended since the last
//! round, so concurrent producers share the cost. Appends made while a round is on disk wait
//! for the next round: that is the coalescing. A write-caching partition, whose producers do
//! not wait for the write, joins a round only once enough is pending or its oldest append
//! waited long enough ([`Partition::write_deferred_until`]).

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Instant;

use event_listener::Event;
use futures_util::future::join_all;

use super::Partition;
use crate::log::FsyncPolicy;
use crate::metrics::{Histogram, HistogramSnapshot};
use crate::protocol::ErrorCode;

pub struct GroupCommit {
    /// Partitions with pending appends, each with when it was first marked since its last
    /// write.
    dirty: RefCell<Vec<(Rc<Partition>, Instant)>>,
    wake: Event,
    policy: FsyncPolicy,
    /// A round is on disk now.
    busy: std::cell::Cell<bool>,
    /// A clean stop waits: nothing is deferred any more.
    draining: std::cell::Cell<bool>,
    /// Notified at the end of every round.
    idle: Event,
    /// Bytes the rounds wrote since the shard started (the checkpoint's byte trigger).
    written: std::cell::Cell<u64>,
    /// The `written` a waiter of [`written_reaches`](Self::written_reaches) wants (u64::MAX:
    /// none), and its wake-up: one when it is reached, not one per round.
    written_target: std::cell::Cell<u64>,
    written_reached: Event,
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
            busy: std::cell::Cell::new(false),
            draining: std::cell::Cell::new(false),
            idle: Event::new(),
            written: std::cell::Cell::new(0),
            written_target: std::cell::Cell::new(u64::MAX),
            written_reached: Event::new(),
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
        match dirty.iter().find(|(d, _)| Rc::ptr_eq(d, p)) {
            // Still deferred: the round task's timer for it stands, no wake per append.
            Some((_, since)) if p.write_deferred_until(*since, Instant::now()).is_some() => return,
            Some(_) => {}
            None => dirty.push((p.clone(), Instant::now())),
        }
        drop(dirty);
        self.wake.notify(1);
    }

    /// The task body: runs rounds until the shard stops.
    pub async fn run(self: Rc<Self>) {
        loop {
            let listener = self.wake.listen();
            let (dirty, next) = self.take_due(Instant::now());
            if dirty.is_empty() {
                match next {
                    None => listener.await,
                    Some(at) => {
                        let nap =
                            rill_shards::rt::sleep(at.saturating_duration_since(Instant::now()));
                        futures_util::future::select(listener, std::pin::pin!(nap)).await;
                    }
                }
                continue;
            }
            drop(listener);
            self.busy.set(true);
            self.round(dirty).await;
            self.busy.set(false);
            self.idle.notify(usize::MAX);
        }
    }

    /// Takes the dirty partitions due for a round now; the others stay, and the earliest
    /// instant one of them is due is returned.
    fn take_due(&self, now: Instant) -> (Vec<Rc<Partition>>, Option<Instant>) {
        let mut dirty = self.dirty.borrow_mut();
        let mut due = Vec::with_capacity(dirty.len());
        let mut next: Option<Instant> = None;
        let draining = self.draining.get();
        dirty.retain(|(p, since)| {
            match p.write_deferred_until(*since, now).filter(|_| !draining) {
                None => {
                    due.push(p.clone());
                    false
                }
                Some(at) => {
                    next = Some(next.map_or(at, |n| n.min(at)));
                    true
                }
            }
        });
        (due, next)
    }

    /// Bytes the rounds wrote since the shard started.
    pub fn written_bytes(&self) -> u64 {
        self.written.get()
    }

    /// Waits until the rounds wrote `bytes` in all since the shard started (one waiter: the
    /// shard's checkpoint task).
    pub async fn written_reaches(&self, bytes: u64) {
        loop {
            let listener = self.written_reached.listen();
            if self.written.get() >= bytes {
                return;
            }
            self.written_target.set(bytes);
            listener.await;
        }
    }

    /// Waits until every append made so far went through a round (for a clean shutdown:
    /// the caller stopped taking appends first). Nothing is deferred from then on.
    pub async fn quiesce(&self) {
        self.draining.set(true);
        loop {
            let listener = self.idle.listen();
            if !self.busy.get() && self.dirty.borrow().is_empty() {
                return;
            }
            self.wake.notify(1);
            listener.await;
        }
    }

    async fn round(&self, dirty: Vec<Rc<Partition>>) {
        // Read before the flushes take the pending batches (nothing awaits in between).
        let bytes: usize = dirty.iter().map(|p| p.pending_bytes()).sum();
        self.round_bytes.observe(bytes as u64);
        self.round_partitions.observe(dirty.len() as u64);
        let started = std::time::Instant::now();
        let results = join_all(dirty.iter().map(|p| p.flush())).await;
        self.write.observe_duration(started.elapsed());
        self.written.set(self.written.get() + bytes as u64);
        if self.written.get() >= self.written_target.get() {
            self.written_target.set(u64::MAX);
            self.written_reached.notify(1);
        }
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
        if self.policy == FsyncPolicy::Always {
            // Each partition syncs its own files (all at once) and fails itself on an error.
            join_all(written.iter().map(|(p, _)| self.timed_sync(p))).await;
        }
        for (p, flushed) in written {
            if p.failure().is_none() {
                p.advance(flushed);
            }
        }
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
