//! The transaction coordinator of one `__transactions` partition, sans-IO: requests, timer
//! ticks, log appends becoming durable and marker results come in as [`Event`]s; what to do
//! comes out as [`Action`]s (append this record with acks=all, answer this request, write
//! these markers, allocate a producer id). Kafka's `TransactionCoordinator` semantics:
//!
//! - Every change of an id's metadata is first appended to the log; only once it is durable
//!   ([`Event::Appended`]) does it become the id's state and is the request answered. While
//!   one change is in flight (Kafka's `pendingState`) other requests of the id get
//!   CONCURRENT_TRANSACTIONS, which clients retry.
//! - InitProducerId gives a transactional id its producer id (allocated once) and bumps its
//!   epoch, so the older epoch is fenced (PRODUCER_FENCED). An open transaction is aborted
//!   first, with the epoch bumped (answered CONCURRENT_TRANSACTIONS until the abort is done).
//!   An exhausted epoch gets a new producer id.
//! - EndTxn makes PrepareCommit/PrepareAbort durable, answers, then writes the markers to
//!   every partition of the transaction (retried with backoff until written), then appends
//!   CompleteCommit/CompleteAbort.
//! - A transaction Ongoing longer than its timeout is aborted with an epoch bump (Kafka's
//!   `abortTimedOutTransactions`); an idle id unused for the expiration time is removed (a
//!   tombstone).
//! - Becoming the partition's leader loads the ids from the log and resumes the markers of
//!   every prepared transaction; being deposed drops everything (the new leader resumes).

use std::collections::{BTreeMap, BTreeSet};

use super::log_record::TxnLogRecord;
use super::state::{TxnMetadata, TxnState, NO_EPOCH};
use super::TopicPartition;
use crate::protocol::ErrorCode;

/// A request's handle, chosen by the shell, echoed in its answer.
pub type RequestId = u64;

/// The coordinator's limits.
#[derive(Debug, Clone)]
pub struct CoordinatorConfig {
    /// Kafka's `transaction.max.timeout.ms`: a longer client timeout is refused
    /// (INVALID_TRANSACTION_TIMEOUT).
    pub max_timeout_ms: u32,
    /// Kafka's `transactional.id.expiration.ms`: an idle id unused this long is removed.
    pub id_expiration_ms: u64,
    /// Transactional ids one coordinator (partition) keeps at most; a new one past it is
    /// refused (POLICY_VIOLATION) until ids expire.
    pub max_transactional_ids: usize,
    /// Partitions one transaction may span at most.
    pub max_partitions_per_txn: usize,
    /// Marker retries wait from this...
    pub marker_backoff_min_ms: u64,
    /// ...doubling up to this.
    pub marker_backoff_max_ms: u64,
}

impl Default for CoordinatorConfig {
    fn default() -> CoordinatorConfig {
        CoordinatorConfig {
            max_timeout_ms: 900_000,
            id_expiration_ms: 7 * 24 * 3600 * 1000,
            max_transactional_ids: 100_000,
            max_partitions_per_txn: 10_000,
            marker_backoff_min_ms: 100,
            marker_backoff_max_ms: 10_000,
        }
    }
}

/// What happens to the coordinator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// This shard leads the partition at `coordinator_epoch` (its leader epoch); `records`
    /// are the partition's committed records in log order.
    BecameLeader {
        coordinator_epoch: i32,
        records: Vec<TxnLogRecord>,
        now_ms: u64,
    },
    /// This shard no longer leads the partition.
    Deposed,
    /// InitProducerId with a transactional id. `producer_id`/`producer_epoch` are -1, or the
    /// producer's current ones (KIP-360). `fresh_producer_id` is a never-used id when the
    /// shell was asked for one ([`Action::AllocateProducerId`]); then the same request is
    /// delivered again with it.
    InitProducerId {
        req: RequestId,
        transactional_id: String,
        timeout_ms: i32,
        producer_id: i64,
        producer_epoch: i16,
        fresh_producer_id: Option<i64>,
        now_ms: u64,
    },
    /// AddPartitionsToTxn, and AddOffsetsToTxn with the group's offsets partition.
    AddPartitions {
        req: RequestId,
        transactional_id: String,
        producer_id: i64,
        producer_epoch: i16,
        partitions: Vec<TopicPartition>,
        now_ms: u64,
    },
    EndTxn {
        req: RequestId,
        transactional_id: String,
        producer_id: i64,
        producer_epoch: i16,
        commit: bool,
        now_ms: u64,
    },
    /// Time passed: timeouts, marker retries, expiration.
    Tick { now_ms: u64 },
    /// The append `seq` is durable (every in-sync replica has it).
    Appended { seq: u64, now_ms: u64 },
    /// The append `seq` failed; a request waiting on it is answered `error`.
    AppendFailed {
        seq: u64,
        error: ErrorCode,
        now_ms: u64,
    },
    /// The answer to an [`Action::SendMarkers`]: the markers of `written` partitions are
    /// committed there (or the partition is gone for good); the others are retried.
    MarkersDone {
        transactional_id: String,
        producer_id: i64,
        producer_epoch: i16,
        written: Vec<TopicPartition>,
        now_ms: u64,
    },
}

/// An answer to a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Response {
    /// InitProducerId: (producer id, epoch).
    ProducerId(Result<(i64, i16), ErrorCode>),
    /// AddPartitions, EndTxn.
    Done(Result<(), ErrorCode>),
}

/// What the shell is to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Append the record to the partition (acks=all), then deliver [`Event::Appended`] or
    /// [`Event::AppendFailed`] with `seq`.
    Append {
        seq: u64,
        record: TxnLogRecord,
    },
    Respond {
        req: RequestId,
        response: Response,
    },
    /// Allocate a producer id and deliver the InitProducerId `req` again with it.
    AllocateProducerId {
        req: RequestId,
    },
    /// Write the markers (native WriteTxnMarkers to each partition's leader), then deliver
    /// [`Event::MarkersDone`].
    SendMarkers {
        transactional_id: String,
        producer_id: i64,
        producer_epoch: i16,
        commit: bool,
        coordinator_epoch: i32,
        partitions: Vec<TopicPartition>,
    },
}

/// What follows once a change is durable.
#[derive(Debug, Clone)]
enum Then {
    Answer(RequestId, Response),
    /// EndTxn: answer success, then write the markers.
    AnswerThenMarkers(RequestId),
    /// An abort the coordinator decided (timeout, fencing): write the markers.
    Markers,
    /// A Complete record: nothing more.
    Nothing,
    /// A tombstone: forget the id.
    Remove,
}

#[derive(Debug, Clone)]
struct Pending {
    seq: u64,
    target: TxnMetadata,
    then: Then,
}

/// The markers of a prepared transaction still to be written.
#[derive(Debug, Clone)]
struct Markers {
    remaining: BTreeSet<TopicPartition>,
    attempt: u32,
    in_flight: bool,
    retry_at_ms: u64,
}

#[derive(Debug, Clone)]
struct Entry {
    /// The durable metadata.
    meta: TxnMetadata,
    pending: Option<Pending>,
    /// Set while the state is prepared.
    markers: Option<Markers>,
}

/// The coordinator of one `__transactions` partition.
#[derive(Debug)]
pub struct TxnCoordinator {
    cfg: CoordinatorConfig,
    /// The leader epoch it coordinates at; `None` while not leading.
    epoch: Option<i32>,
    entries: BTreeMap<String, Entry>,
    /// The id each append in flight is for.
    appends: BTreeMap<u64, String>,
    next_seq: u64,
}

fn respond(req: RequestId, response: Response) -> Action {
    Action::Respond { req, response }
}

fn done(req: RequestId, r: Result<(), ErrorCode>) -> Action {
    respond(req, Response::Done(r))
}

fn init_answer(req: RequestId, r: Result<(i64, i16), ErrorCode>) -> Action {
    respond(req, Response::ProducerId(r))
}

impl TxnCoordinator {
    pub fn new(cfg: CoordinatorConfig) -> TxnCoordinator {
        assert!(
            cfg.marker_backoff_min_ms > 0 && cfg.marker_backoff_min_ms <= cfg.marker_backoff_max_ms
        );
        TxnCoordinator {
            cfg,
            epoch: None,
            entries: BTreeMap::new(),
            appends: BTreeMap::new(),
            next_seq: 0,
        }
    }

    /// The leader epoch it coordinates at, `None` while it does not.
    pub fn coordinator_epoch(&self) -> Option<i32> {
        self.epoch
    }

    /// An id's durable metadata (DescribeTransactions).
    pub fn describe(&self, transactional_id: &str) -> Option<&TxnMetadata> {
        self.entries.get(transactional_id).map(|e| &e.meta)
    }

    /// Every id's durable metadata (ListTransactions).
    pub fn list(&self) -> impl Iterator<Item = (&str, &TxnMetadata)> {
        self.entries.iter().map(|(k, e)| (k.as_str(), &e.meta))
    }

    /// When the next [`Event::Tick`] has something to do, if ever.
    pub fn next_wakeup_ms(&self) -> Option<u64> {
        self.epoch?;
        self.entries
            .values()
            .filter(|e| e.pending.is_none())
            .filter_map(|e| match (&e.markers, e.meta.state) {
                (Some(m), _) if !m.in_flight => Some(m.retry_at_ms),
                (Some(_), _) => None,
                (None, TxnState::Ongoing) => {
                    Some(e.meta.txn_start_ms + u64::from(e.meta.timeout_ms))
                }
                (None, s) if s.is_idle() => Some(e.meta.last_update_ms + self.cfg.id_expiration_ms),
                _ => None,
            })
            .min()
    }

    pub fn handle(&mut self, event: Event) -> Vec<Action> {
        let mut out = Vec::new();
        match event {
            Event::BecameLeader {
                coordinator_epoch,
                records,
                now_ms,
            } => self.load(coordinator_epoch, records, now_ms, &mut out),
            Event::Deposed => self.deposed(&mut out),
            Event::InitProducerId {
                req,
                transactional_id,
                timeout_ms,
                producer_id,
                producer_epoch,
                fresh_producer_id,
                now_ms,
            } => {
                let r = self.init_producer_id(
                    req,
                    &transactional_id,
                    timeout_ms,
                    (producer_id >= 0).then_some((producer_id, producer_epoch)),
                    fresh_producer_id,
                    now_ms,
                    &mut out,
                );
                if let Err(e) = r {
                    out.push(init_answer(req, Err(e)));
                }
            }
            Event::AddPartitions {
                req,
                transactional_id,
                producer_id,
                producer_epoch,
                partitions,
                now_ms,
            } => {
                let r = self.add_partitions(
                    req,
                    &transactional_id,
                    producer_id,
                    producer_epoch,
                    partitions,
                    now_ms,
                    &mut out,
                );
                if let Err(e) = r {
                    out.push(done(req, Err(e)));
                }
            }
            Event::EndTxn {
                req,
                transactional_id,
                producer_id,
                producer_epoch,
                commit,
                now_ms,
            } => {
                let r = self.end_txn(
                    req,
                    &transactional_id,
                    producer_id,
                    producer_epoch,
                    commit,
                    now_ms,
                    &mut out,
                );
                if let Err(e) = r {
                    out.push(done(req, Err(e)));
                }
            }
            Event::Tick { now_ms } => self.tick(now_ms, &mut out),
            Event::Appended { seq, now_ms } => self.appended(seq, now_ms, &mut out),
            Event::AppendFailed { seq, error, now_ms } => {
                self.append_failed(seq, error, now_ms, &mut out)
            }
            Event::MarkersDone {
                transactional_id,
                producer_id,
                producer_epoch,
                written,
                now_ms,
            } => self.markers_done(
                &transactional_id,
                producer_id,
                producer_epoch,
                written,
                now_ms,
                &mut out,
            ),
        }
        out
    }

    fn load(&mut self, epoch: i32, records: Vec<TxnLogRecord>, now_ms: u64, out: &mut Vec<Action>) {
        self.deposed(out);
        self.epoch = Some(epoch);
        for r in records {
            match r.metadata {
                Some(meta) if meta.state != TxnState::Dead => {
                    self.entries.insert(
                        r.transactional_id,
                        Entry {
                            meta,
                            pending: None,
                            markers: None,
                        },
                    );
                }
                _ => {
                    self.entries.remove(&r.transactional_id);
                }
            }
        }
        let prepared: Vec<String> = self
            .entries
            .iter()
            .filter(|(_, e)| e.meta.state.is_prepared())
            .map(|(k, _)| k.clone())
            .collect();
        for id in prepared {
            self.start_markers(&id, now_ms, out);
        }
    }

    fn deposed(&mut self, out: &mut Vec<Action>) {
        for e in self.entries.values() {
            match e.pending.as_ref().map(|p| &p.then) {
                Some(Then::Answer(req, Response::ProducerId(_))) => {
                    out.push(init_answer(*req, Err(ErrorCode::NotCoordinator)))
                }
                Some(Then::Answer(req, Response::Done(_)) | Then::AnswerThenMarkers(req)) => {
                    out.push(done(*req, Err(ErrorCode::NotCoordinator)))
                }
                _ => {}
            }
        }
        self.epoch = None;
        self.entries.clear();
        self.appends.clear();
    }

    /// The id's entry for a request of producer (`producer_id`, `producer_epoch`): Kafka's
    /// checks, in its order.
    fn entry_of(
        &mut self,
        id: &str,
        producer_id: i64,
        producer_epoch: i16,
    ) -> Result<&mut Entry, ErrorCode> {
        if self.epoch.is_none() {
            return Err(ErrorCode::NotCoordinator);
        }
        let e = self
            .entries
            .get_mut(id)
            .ok_or(ErrorCode::InvalidProducerIdMapping)?;
        if e.meta.producer_id != producer_id {
            return Err(ErrorCode::InvalidProducerIdMapping);
        }
        if e.meta.producer_epoch != producer_epoch {
            return Err(ErrorCode::ProducerFenced);
        }
        if e.pending.is_some() {
            return Err(ErrorCode::ConcurrentTransactions);
        }
        Ok(e)
    }

    /// Starts the append of `target` for `id`, `then` once durable.
    fn begin(&mut self, id: &str, target: TxnMetadata, then: Then, out: &mut Vec<Action>) {
        let e = self.entries.get_mut(id).expect("an entry is begun on");
        assert!(e.pending.is_none(), "one change of an id at a time");
        let record_state = match target.state {
            // The fence is an in-memory step: the record is the abort it leads to.
            TxnState::PrepareEpochFence => TxnState::PrepareAbort,
            s => s,
        };
        assert!(
            target.state.may_follow(e.meta.state)
                || (e.meta.producer_epoch == NO_EPOCH && target.state == TxnState::Empty),
            "{:?} -> {:?}",
            e.meta.state,
            target.state
        );
        let seq = self.next_seq;
        self.next_seq += 1;
        let metadata = (record_state != TxnState::Dead).then(|| TxnMetadata {
            state: record_state,
            ..target.clone()
        });
        let target = TxnMetadata {
            state: record_state,
            ..target
        };
        e.pending = Some(Pending { seq, target, then });
        self.appends.insert(seq, id.to_string());
        out.push(Action::Append {
            seq,
            record: TxnLogRecord {
                transactional_id: id.to_string(),
                metadata,
            },
        });
    }

    #[allow(clippy::too_many_arguments)]
    fn init_producer_id(
        &mut self,
        req: RequestId,
        id: &str,
        timeout_ms: i32,
        expected: Option<(i64, i16)>,
        fresh: Option<i64>,
        now_ms: u64,
        out: &mut Vec<Action>,
    ) -> Result<(), ErrorCode> {
        if self.epoch.is_none() {
            return Err(ErrorCode::NotCoordinator);
        }
        let timeout = u32::try_from(timeout_ms)
            .ok()
            .filter(|&t| t > 0 && t <= self.cfg.max_timeout_ms)
            .ok_or(ErrorCode::InvalidTransactionTimeout)?;
        if !self.entries.contains_key(id) {
            if self.entries.len() >= self.cfg.max_transactional_ids {
                return Err(ErrorCode::PolicyViolation);
            }
            let Some(pid) = fresh else {
                out.push(Action::AllocateProducerId { req });
                return Ok(());
            };
            self.entries.insert(
                id.to_string(),
                Entry {
                    meta: TxnMetadata::new(pid, timeout, now_ms),
                    pending: None,
                    markers: None,
                },
            );
        }
        let e = self.entries.get(id).expect("inserted above");
        if e.pending.is_some() {
            return Err(ErrorCode::ConcurrentTransactions);
        }
        let m = &e.meta;
        // Kafka's `isValidProducerId`: the expected id is this one, or the one before an
        // exhausted epoch gave a new id (a retry whose answer was lost).
        if let Some((pid, epoch)) = expected {
            let valid = m.producer_epoch == NO_EPOCH
                || pid == m.producer_id
                || (pid == m.last_producer_id && epoch >= super::state::MAX_EPOCH);
            if !valid {
                return Err(ErrorCode::ProducerFenced);
            }
        }
        match m.state {
            TxnState::PrepareCommit
            | TxnState::PrepareAbort
            | TxnState::PrepareEpochFence
            | TxnState::Dead => Err(ErrorCode::ConcurrentTransactions),
            TxnState::Ongoing => {
                // Fence the open transaction's producer and abort it; the client retries.
                let mut target = m.clone();
                if !m.epoch_exhausted() {
                    target.producer_epoch += 1;
                }
                target.state = TxnState::PrepareEpochFence;
                target.last_update_ms = now_ms;
                self.begin(id, target, Then::Markers, out);
                Err(ErrorCode::ConcurrentTransactions)
            }
            TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort => {
                let mut target = m.clone();
                target.timeout_ms = timeout;
                target.state = TxnState::Empty;
                target.partitions.clear();
                target.txn_start_ms = 0;
                target.last_update_ms = now_ms;
                if m.epoch_exhausted() {
                    let Some(pid) = fresh.filter(|&p| p != m.producer_id) else {
                        out.push(Action::AllocateProducerId { req });
                        return Ok(());
                    };
                    target.last_producer_id = m.producer_id;
                    target.last_producer_epoch = m.producer_epoch;
                    target.producer_id = pid;
                    target.producer_epoch = 0;
                } else {
                    match expected {
                        Some((pid, epoch))
                            if m.producer_epoch != NO_EPOCH && epoch != m.producer_epoch =>
                        {
                            let retried_bump =
                                pid == m.producer_id && epoch == m.last_producer_epoch;
                            let retried_new_id = pid != m.producer_id && pid == m.last_producer_id;
                            if retried_bump || retried_new_id {
                                // A retry of a bump already done: the current id and epoch.
                                out.push(init_answer(req, Ok((m.producer_id, m.producer_epoch))));
                                return Ok(());
                            }
                            return Err(ErrorCode::ProducerFenced);
                        }
                        _ => {
                            target.last_producer_id = m.producer_id;
                            target.last_producer_epoch = m.producer_epoch;
                            target.producer_epoch = m.producer_epoch + 1;
                        }
                    }
                }
                let answer = Response::ProducerId(Ok((target.producer_id, target.producer_epoch)));
                self.begin(id, target, Then::Answer(req, answer), out);
                Ok(())
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn add_partitions(
        &mut self,
        req: RequestId,
        id: &str,
        producer_id: i64,
        producer_epoch: i16,
        partitions: Vec<TopicPartition>,
        now_ms: u64,
        out: &mut Vec<Action>,
    ) -> Result<(), ErrorCode> {
        let max = self.cfg.max_partitions_per_txn;
        let e = self.entry_of(id, producer_id, producer_epoch)?;
        let m = &e.meta;
        match m.state {
            TxnState::Ongoing
            | TxnState::Empty
            | TxnState::CompleteCommit
            | TxnState::CompleteAbort => {}
            _ => return Err(ErrorCode::ConcurrentTransactions),
        }
        if m.state == TxnState::Ongoing && partitions.iter().all(|p| m.partitions.contains(p)) {
            out.push(done(req, Ok(())));
            return Ok(());
        }
        let mut target = m.clone();
        if m.state != TxnState::Ongoing {
            target.partitions.clear();
            target.txn_start_ms = now_ms;
        }
        target.partitions.extend(partitions);
        if target.partitions.len() > max {
            return Err(ErrorCode::PolicyViolation);
        }
        target.state = TxnState::Ongoing;
        target.last_update_ms = now_ms;
        self.begin(id, target, Then::Answer(req, Response::Done(Ok(()))), out);
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn end_txn(
        &mut self,
        req: RequestId,
        id: &str,
        producer_id: i64,
        producer_epoch: i16,
        commit: bool,
        now_ms: u64,
        out: &mut Vec<Action>,
    ) -> Result<(), ErrorCode> {
        let e = self.entry_of(id, producer_id, producer_epoch)?;
        let m = &e.meta;
        use TxnState::*;
        match (m.state, commit) {
            (Ongoing, _) => {
                let mut target = m.clone();
                target.state = if commit { PrepareCommit } else { PrepareAbort };
                target.last_update_ms = now_ms;
                self.begin(id, target, Then::AnswerThenMarkers(req), out);
                Ok(())
            }
            // A retry of an EndTxn that is done: the same outcome succeeds.
            (CompleteCommit, true) | (CompleteAbort, false) => {
                out.push(done(req, Ok(())));
                Ok(())
            }
            (PrepareCommit, true) | (PrepareAbort, false) => Err(ErrorCode::ConcurrentTransactions),
            _ => Err(ErrorCode::InvalidTxnState),
        }
    }

    fn appended(&mut self, seq: u64, now_ms: u64, out: &mut Vec<Action>) {
        let Some(id) = self.appends.remove(&seq) else {
            return; // from before a deposition
        };
        let e = self
            .entries
            .get_mut(&id)
            .expect("an append's id has an entry");
        let p = e.pending.take().expect("an append in flight is pending");
        assert_eq!(p.seq, seq);
        e.meta = p.target;
        match p.then {
            Then::Answer(req, response) => out.push(respond(req, response)),
            Then::AnswerThenMarkers(req) => {
                out.push(done(req, Ok(())));
                self.start_markers(&id, now_ms, out);
            }
            Then::Markers => self.start_markers(&id, now_ms, out),
            Then::Nothing => {}
            Then::Remove => {
                self.entries.remove(&id);
            }
        }
    }

    fn append_failed(&mut self, seq: u64, error: ErrorCode, now_ms: u64, out: &mut Vec<Action>) {
        let Some(id) = self.appends.remove(&seq) else {
            return;
        };
        let backoff = self.backoff(0);
        let e = self
            .entries
            .get_mut(&id)
            .expect("an append's id has an entry");
        let p = e.pending.take().expect("an append in flight is pending");
        match p.then {
            Then::Answer(req, Response::ProducerId(_)) => out.push(init_answer(req, Err(error))),
            Then::Answer(req, Response::Done(_)) | Then::AnswerThenMarkers(req) => {
                out.push(done(req, Err(error)))
            }
            // The Complete record: tried again after a backoff (the markers are written).
            Then::Nothing => {
                e.markers = Some(Markers {
                    remaining: BTreeSet::new(),
                    attempt: 1,
                    in_flight: false,
                    retry_at_ms: now_ms + backoff,
                })
            }
            // A timeout abort or an expiration: the next tick tries again.
            Then::Markers | Then::Remove => {}
        }
        // A new id whose first record never became durable was never handed out.
        if e.meta.producer_epoch == NO_EPOCH {
            self.entries.remove(&id);
        }
    }

    fn backoff(&self, attempt: u32) -> u64 {
        let ms = self.cfg.marker_backoff_min_ms << attempt.min(20);
        ms.min(self.cfg.marker_backoff_max_ms)
    }

    fn start_markers(&mut self, id: &str, now_ms: u64, out: &mut Vec<Action>) {
        let epoch = self.epoch.expect("markers are written by a leader");
        let e = self.entries.get_mut(id).expect("markers of a known id");
        assert!(e.meta.state.is_prepared());
        e.markers = Some(Markers {
            remaining: e.meta.partitions.clone(),
            attempt: 0,
            in_flight: true,
            retry_at_ms: now_ms,
        });
        if e.meta.partitions.is_empty() {
            self.complete(id, now_ms, out);
            return;
        }
        out.push(send_markers(id, &e.meta, epoch, &e.meta.partitions));
    }

    /// Every marker is written: the Complete record.
    fn complete(&mut self, id: &str, now_ms: u64, out: &mut Vec<Action>) {
        let e = self.entries.get_mut(id).expect("completing a known id");
        e.markers = None;
        let mut target = e.meta.clone();
        target.state = match e.meta.state {
            TxnState::PrepareCommit => TxnState::CompleteCommit,
            TxnState::PrepareAbort => TxnState::CompleteAbort,
            s => unreachable!("completing a transaction in {s:?}"),
        };
        target.partitions.clear();
        target.last_update_ms = now_ms;
        self.begin(id, target, Then::Nothing, out);
    }

    fn markers_done(
        &mut self,
        id: &str,
        producer_id: i64,
        producer_epoch: i16,
        written: Vec<TopicPartition>,
        now_ms: u64,
        out: &mut Vec<Action>,
    ) {
        let Some(e) = self.entries.get_mut(id) else {
            return;
        };
        let current = e.meta.producer_id == producer_id
            && e.meta.producer_epoch == producer_epoch
            && e.pending.is_none();
        let Some(m) = e.markers.as_mut().filter(|m| current && m.in_flight) else {
            return; // stale: from before a deposition or for an older transaction
        };
        for tp in &written {
            m.remaining.remove(tp);
        }
        if m.remaining.is_empty() {
            self.complete(id, now_ms, out);
            return;
        }
        m.attempt += 1;
        m.in_flight = false;
        let attempt = m.attempt;
        let at = now_ms + self.backoff(attempt);
        if let Some(m) = self.entries.get_mut(id).and_then(|e| e.markers.as_mut()) {
            m.retry_at_ms = at;
        }
    }

    fn tick(&mut self, now_ms: u64, out: &mut Vec<Action>) {
        let Some(epoch) = self.epoch else { return };
        let ids: Vec<String> = self.entries.keys().cloned().collect();
        for id in ids {
            let e = &self.entries[&id];
            if e.pending.is_some() {
                continue;
            }
            let m = &e.meta;
            if let Some(mk) = &e.markers {
                if mk.in_flight || now_ms < mk.retry_at_ms {
                    continue;
                }
                if mk.remaining.is_empty() {
                    self.complete(&id, now_ms, out);
                } else {
                    out.push(send_markers(&id, m, epoch, &mk.remaining));
                    if let Some(mk) = self.entries.get_mut(&id).and_then(|e| e.markers.as_mut()) {
                        mk.in_flight = true;
                    }
                }
            } else if m.state == TxnState::Ongoing
                && now_ms >= m.txn_start_ms + u64::from(m.timeout_ms)
            {
                // Kafka aborts a timed-out transaction with an epoch bump: its producer is
                // fenced and cannot go on writing into the aborted transaction.
                let mut target = m.clone();
                if !m.epoch_exhausted() {
                    target.producer_epoch += 1;
                }
                target.state = TxnState::PrepareEpochFence;
                target.last_update_ms = now_ms;
                self.begin(&id, target, Then::Markers, out);
            } else if m.state.is_idle() && now_ms >= m.last_update_ms + self.cfg.id_expiration_ms {
                let mut target = m.clone();
                target.state = TxnState::Dead;
                target.last_update_ms = now_ms;
                self.begin(&id, target, Then::Remove, out);
            }
        }
    }
}

fn send_markers(
    id: &str,
    m: &TxnMetadata,
    coordinator_epoch: i32,
    partitions: &BTreeSet<TopicPartition>,
) -> Action {
    Action::SendMarkers {
        transactional_id: id.to_string(),
        producer_id: m.producer_id,
        producer_epoch: m.producer_epoch,
        commit: m.state == TxnState::PrepareCommit,
        coordinator_epoch,
        partitions: partitions.iter().cloned().collect(),
    }
}
