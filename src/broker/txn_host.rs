//! The transaction coordinators a shard hosts: one sans-IO [`TxnCoordinator`] per
//! `__transactions` partition it leads, whether each is loaded, and the requests waiting for
//! their answers, and the markers waiting to be sent. The glue that appends, loads and ticks
//! is [`super::transactions`]; markers go out through `native::marker_sender`, which takes
//! them from [`TxnHost::take_markers`] (the broker layer speaks no wire protocol).

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, VecDeque};

use super::group_host::Coordination;
use crate::transactions::coordinator::{
    Action, CoordinatorConfig, Event, RequestId, Response, TxnCoordinator,
};
use crate::transactions::log_record::TxnLogRecord;
use crate::transactions::state::TxnMetadata;
use crate::transactions::TopicPartition;

/// One transaction's markers to write, for the coordinator of `__transactions` partition
/// `coordinator`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Markers {
    pub coordinator: u32,
    pub transactional_id: String,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub commit: bool,
    pub coordinator_epoch: i32,
    pub partitions: Vec<TopicPartition>,
}

/// Transaction coordinators hosted by one shard.
pub struct TxnHost {
    cfg: CoordinatorConfig,
    /// The `__transactions` partitions this shard leads, and whether they are loaded.
    coordination: RefCell<HashMap<u32, Coordination>>,
    /// Kept across leaderships: its append sequence numbers never repeat, so the answer to an
    /// append of an earlier leadership is recognised as stale.
    coordinators: RefCell<HashMap<u32, TxnCoordinator>>,
    waiters: RefCell<HashMap<RequestId, flume::Sender<Response>>>,
    next_req: Cell<RequestId>,
    /// Fired after a coordinator acted: its timers may be earlier than the ticker sleeps for.
    pub wake: event_listener::Event,
    /// Fired when a coordinator's append settled (durable or failed): a transaction moved on,
    /// so a request held on CONCURRENT_TRANSACTIONS may go through. Not on every action: a
    /// held request asked again acts itself, and woke the ticker and itself in turn, a loop
    /// that starved the shard (each transaction took a second in a cluster).
    pub settled: event_listener::Event,
    /// Markers to send (at most one entry per prepared transaction: the coordinator sends a
    /// transaction's markers again only once it heard how the last send went).
    outbox: RefCell<VecDeque<Markers>>,
    /// Fired when markers are queued.
    pub markers_queued: event_listener::Event,
    /// Per partition: records appended since its last compaction, appends not yet durable
    /// (or failed), and whether a compaction runs.
    since_compaction: RefCell<HashMap<u32, usize>>,
    in_flight: RefCell<HashMap<u32, usize>>,
    compacting: RefCell<std::collections::HashSet<u32>>,
}

impl TxnHost {
    pub fn new(cfg: CoordinatorConfig) -> TxnHost {
        TxnHost {
            cfg,
            coordination: RefCell::default(),
            coordinators: RefCell::default(),
            waiters: RefCell::default(),
            next_req: Cell::new(1),
            wake: event_listener::Event::new(),
            settled: event_listener::Event::new(),
            outbox: RefCell::default(),
            markers_queued: event_listener::Event::new(),
            since_compaction: RefCell::default(),
            in_flight: RefCell::default(),
            compacting: RefCell::default(),
        }
    }

    pub fn coordination(&self, k: u32) -> Option<Coordination> {
        self.coordination.borrow().get(&k).copied()
    }

    /// Every `__transactions` partition led here, with its state.
    pub fn coordinated(&self) -> Vec<(u32, Coordination)> {
        let mut v: Vec<_> = self
            .coordination
            .borrow()
            .iter()
            .map(|(k, c)| (*k, *c))
            .collect();
        v.sort_by_key(|(k, _)| *k);
        v
    }

    /// Led here at `epoch`: loading. What an earlier leadership held is dropped first (the
    /// returned actions answer its waiting requests).
    pub fn begin_load(&self, k: u32, epoch: u32) -> Vec<Action> {
        let out = self.unload(k);
        self.coordination
            .borrow_mut()
            .insert(k, Coordination::Loading { epoch });
        out
    }

    /// The load at `epoch` read `records`: the coordinator takes them and answers from now
    /// on. `None` when the leadership moved meanwhile.
    pub fn finish_load(
        &self,
        k: u32,
        epoch: u32,
        records: Vec<TxnLogRecord>,
        now_ms: u64,
    ) -> Option<Vec<Action>> {
        let mut c = self.coordination.borrow_mut();
        if c.get(&k) != Some(&Coordination::Loading { epoch }) {
            return None;
        }
        c.insert(k, Coordination::Active { epoch });
        drop(c);
        let coordinator_epoch = i32::try_from(epoch).unwrap_or(i32::MAX);
        let out = self.handle(
            k,
            Event::BecameLeader {
                coordinator_epoch,
                records,
                now_ms,
            },
        );
        self.wake.notify(usize::MAX);
        Some(out)
    }

    /// No longer led here: the coordinator forgets everything (the new leader loads it from
    /// its replica); the returned actions answer waiting requests NOT_COORDINATOR.
    pub fn unload(&self, k: u32) -> Vec<Action> {
        self.coordination.borrow_mut().remove(&k);
        self.since_compaction.borrow_mut().remove(&k);
        self.coordinators
            .borrow_mut()
            .get_mut(&k)
            .map_or_else(Vec::new, |c| c.handle(Event::Deposed))
    }

    /// Delivers an event to partition `k`'s coordinator.
    pub fn handle(&self, k: u32, event: Event) -> Vec<Action> {
        let mut cs = self.coordinators.borrow_mut();
        let c = cs
            .entry(k)
            .or_insert_with(|| TxnCoordinator::new(self.cfg.clone()));
        c.handle(event)
    }

    /// A record of partition `k` is appended (not durable yet).
    pub fn append_started(&self, k: u32) {
        *self.in_flight.borrow_mut().entry(k).or_default() += 1;
        *self.since_compaction.borrow_mut().entry(k).or_default() += 1;
    }

    /// An append of partition `k` is durable or failed.
    pub fn append_settled(&self, k: u32) {
        if let Some(n) = self.in_flight.borrow_mut().get_mut(&k) {
            *n = n.saturating_sub(1);
        }
    }

    /// Partition `k` is due a compaction (`every` records since the last) and may have one
    /// now: loaded, no compaction running, and no append in flight, so the coordinator's
    /// memory is exactly its log (a snapshot taken with an append in flight could carry an
    /// older state of an id than that append, and replay after it). The snapshot to append:
    /// every id's record.
    pub fn begin_compaction(&self, k: u32, every: usize) -> Option<Vec<TxnLogRecord>> {
        let due = self.since_compaction.borrow().get(&k).copied().unwrap_or(0) >= every;
        let idle = self.in_flight.borrow().get(&k).copied().unwrap_or(0) == 0;
        let active = matches!(self.coordination(k), Some(Coordination::Active { .. }));
        if !due || !idle || !active || !self.compacting.borrow_mut().insert(k) {
            return None;
        }
        self.since_compaction.borrow_mut().insert(k, 0);
        let cs = self.coordinators.borrow();
        let c = cs.get(&k)?;
        Some(
            c.list()
                .map(|(id, m)| TxnLogRecord {
                    transactional_id: id.to_string(),
                    metadata: Some(m.clone()),
                })
                .collect(),
        )
    }

    pub fn end_compaction(&self, k: u32) {
        self.compacting.borrow_mut().remove(&k);
    }

    /// Queues a transaction's markers for the marker sender.
    pub fn queue_markers(&self, m: Markers) {
        self.outbox.borrow_mut().push_back(m);
        self.markers_queued.notify(usize::MAX);
    }

    /// Every queued marker send.
    pub fn take_markers(&self) -> Vec<Markers> {
        self.outbox.borrow_mut().drain(..).collect()
    }

    /// A handle for a new request and where its answer will come.
    pub fn register(&self) -> (RequestId, flume::Receiver<Response>) {
        let req = self.next_req.get();
        self.next_req.set(req + 1);
        let (tx, rx) = flume::bounded(1);
        self.waiters.borrow_mut().insert(req, tx);
        (req, rx)
    }

    /// A request gave up waiting.
    pub fn forget(&self, req: RequestId) {
        self.waiters.borrow_mut().remove(&req);
    }

    pub fn respond(&self, req: RequestId, response: Response) {
        if let Some(tx) = self.waiters.borrow_mut().remove(&req) {
            let _ = tx.try_send(response);
        }
    }

    /// The earliest timer of the loaded coordinators (ms since the epoch).
    pub fn next_wakeup_ms(&self) -> Option<u64> {
        let active = self.coordinated();
        let cs = self.coordinators.borrow();
        active
            .iter()
            .filter(|(_, c)| matches!(c, Coordination::Active { .. }))
            .filter_map(|(k, _)| cs.get(k)?.next_wakeup_ms())
            .min()
    }

    /// The loaded partitions.
    pub fn active(&self) -> Vec<u32> {
        self.coordinated()
            .into_iter()
            .filter(|(_, c)| matches!(c, Coordination::Active { .. }))
            .map(|(k, _)| k)
            .collect()
    }

    /// A transactional id's metadata, from partition `k`'s coordinator.
    pub fn describe(&self, k: u32, transactional_id: &str) -> Option<TxnMetadata> {
        self.coordinators
            .borrow()
            .get(&k)?
            .describe(transactional_id)
            .cloned()
    }

    /// Every transactional id of the loaded coordinators, with its metadata.
    pub fn list(&self) -> Vec<(String, TxnMetadata)> {
        let cs = self.coordinators.borrow();
        self.active()
            .iter()
            .filter_map(|k| cs.get(k))
            .flat_map(|c| c.list().map(|(id, m)| (id.to_string(), m.clone())))
            .collect()
    }
}
