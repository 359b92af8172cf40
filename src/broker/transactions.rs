//! Transactions on a shard, for both listeners: finding a transactional id's coordinator
//! (the leader of its `__transactions` partition), InitProducerId with a transactional id,
//! AddPartitionsToTxn, AddOffsetsToTxn and EndTxn, each an event of the partition's sans-IO
//! coordinator ([`crate::transactions::coordinator`], hosted in [`super::txn_host`]); and
//! what the coordinator asks for: records appended to `__transactions` with acks=all and
//! applied once durable, markers queued for `native::marker_sender` ([`markers_done`] is its
//! answer), timers, loading the log on becoming the partition's leader
//! ([`super::coordination`]).

use std::rc::Rc;
use std::time::{Duration, Instant};

use super::group_host::{offsets_partition, place_in, OFFSETS_TOPIC};
use super::internal_topics::{self, InternalTopic};
use super::offsets::as_coordinator_error;
use super::produce::{Acks, Appended};
use super::txn_host::Markers;
use super::{offsets_log, producer_ids, recv_until, OpError, Shard};
use crate::batch::{BatchBuilder, BatchView};
use crate::clock::now_ms;
use crate::controller::metadata::BrokerInfo;
use crate::partition::Partition;
use crate::protocol::ErrorCode;
use crate::transactions::coordinator::{Action, Event, RequestId, Response};
use crate::transactions::log_record::TxnLogRecord;
use crate::transactions::{partition_of, TopicPartition, TRANSACTIONS_TOPIC};

/// The ticker sleeps at most this long (a coordinator loaded meanwhile wakes it sooner).
const TICK_MAX: Duration = Duration::from_secs(1);

fn now() -> u64 {
    now_ms().max(0) as u64
}

fn not_ready() -> OpError {
    OpError::new(
        ErrorCode::CoordinatorNotAvailable,
        "the transaction state topic is not ready",
    )
}

fn check_id(transactional_id: &str) -> Result<(), OpError> {
    if transactional_id.is_empty() {
        return Err(OpError::new(
            ErrorCode::InvalidRequest,
            "an empty transactional id",
        ));
    }
    Ok(())
}

/// The broker and shard coordinating `transactional_id` (FindCoordinator key type 1).
pub fn coordinator(shard: &Shard, transactional_id: &str) -> Result<(BrokerInfo, u32), OpError> {
    check_id(transactional_id)?;
    let md = shard.metadata.borrow().clone();
    let Some(place) = place_in(&md, TRANSACTIONS_TOPIC, |n| {
        partition_of(transactional_id, n)
    }) else {
        internal_topics::ensure_created(shard, InternalTopic::Transactions);
        return Err(not_ready());
    };
    let info = md.brokers.get(&place.broker).ok_or_else(|| {
        OpError::new(
            ErrorCode::CoordinatorNotAvailable,
            format!("transactional id {transactional_id:?}: its partition has no leader"),
        )
    })?;
    Ok((info.clone(), place.shard))
}

/// The `__transactions` partition of `transactional_id` when this shard coordinates it, else
/// why not (as for groups: NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE,
/// COORDINATOR_LOAD_IN_PROGRESS).
fn coordinated_here(shard: &Shard, transactional_id: &str) -> Result<u32, OpError> {
    check_id(transactional_id)?;
    let place = place_in(&shard.metadata.borrow(), TRANSACTIONS_TOPIC, |n| {
        partition_of(transactional_id, n)
    });
    let Some(place) = place else {
        internal_topics::ensure_created(shard, InternalTopic::Transactions);
        return Err(not_ready());
    };
    if place.broker == 0 {
        return Err(OpError::new(
            ErrorCode::CoordinatorNotAvailable,
            format!("transactional id {transactional_id:?}: its partition has no leader"),
        ));
    }
    if place.broker != shard.cfg.node_id || place.shard as usize != shard.id {
        return Err(OpError::new(
            ErrorCode::NotCoordinator,
            format!(
                "transactional id {transactional_id:?} is coordinated by broker {} shard {}",
                place.broker, place.shard
            ),
        ));
    }
    if shard.controller.broker_fenced() {
        return Err(OpError::new(
            ErrorCode::NotCoordinator,
            "this broker is fenced: find the coordinator again",
        ));
    }
    match shard.txns.coordination(place.partition) {
        Some(super::group_host::Coordination::Active { epoch }) if epoch == place.leader_epoch => {
            Ok(place.partition)
        }
        _ => Err(OpError::new(
            ErrorCode::CoordinatorLoadInProgress,
            format!("transactional id {transactional_id:?}: loading its transaction state"),
        )),
    }
}

/// Delivers a request's event to its coordinator and waits for the answer, until
/// `deadline`. `make` builds the event from the request's handle and, when the coordinator
/// asked for one, a fresh producer id.
///
/// An answer of CONCURRENT_TRANSACTIONS (the id's last transaction still completing: its
/// markers being written, a matter of milliseconds) is not passed on at once: the request is
/// asked again each time a coordinator's append settles (`TxnHost::settled`), within
/// `--transaction-concurrent-wait-ms`. A
/// client polling for it instead waits a backoff each time: a read-process-write loop spent
/// most of each transaction so.
async fn request(
    shard: &Rc<Shard>,
    transactional_id: &str,
    deadline: Instant,
    make: impl Fn(RequestId, Option<i64>, u64) -> Event,
) -> Result<Response, OpError> {
    let patience = deadline.min(Instant::now() + shard.cfg.transaction_concurrent_wait);
    loop {
        let r = request_once(shard, transactional_id, deadline, &make).await?;
        let concurrent = matches!(
            r,
            Response::Done(Err(ErrorCode::ConcurrentTransactions))
                | Response::ProducerId(Err(ErrorCode::ConcurrentTransactions))
        );
        if !concurrent || Instant::now() >= patience {
            return Ok(r);
        }
        // A settled append may complete it; the short sleep covers one that came between
        // the answer and this wait.
        let acted = shard.txns.settled.listen();
        let next = patience.min(Instant::now() + CONCURRENT_RECHECK);
        futures_lite::future::or(acted, shard.deadlines.sleep_until(next)).await;
    }
}

/// How often a held CONCURRENT_TRANSACTIONS request is asked again at most without a
/// coordinator acting.
const CONCURRENT_RECHECK: Duration = Duration::from_millis(10);

async fn request_once(
    shard: &Rc<Shard>,
    transactional_id: &str,
    deadline: Instant,
    make: &impl Fn(RequestId, Option<i64>, u64) -> Event,
) -> Result<Response, OpError> {
    let mut k = coordinated_here(shard, transactional_id)?;
    let (req, rx) = shard.txns.register();
    let mut fresh = None;
    loop {
        let out = shard.txns.handle(k, make(req, fresh, now()));
        let allocate = out
            .iter()
            .any(|a| matches!(a, Action::AllocateProducerId { req: r } if *r == req));
        run_actions(shard, k, out);
        if !allocate {
            break;
        }
        match producer_ids::fresh_producer_id(shard, deadline).await {
            Ok(id) => fresh = Some(id),
            Err(e) => {
                shard.txns.forget(req);
                return Err(e);
            }
        }
        // The leadership may have moved while the id was allocated.
        match coordinated_here(shard, transactional_id) {
            Ok(again) => k = again,
            Err(e) => {
                shard.txns.forget(req);
                return Err(e);
            }
        }
    }
    match recv_until(shard, &rx, deadline).await {
        Some(Ok(r)) => Ok(r),
        Some(Err(_)) => Err(OpError::new(
            ErrorCode::NotCoordinator,
            "the coordinator went away",
        )),
        None => {
            shard.txns.forget(req);
            // Clients retry CONCURRENT_TRANSACTIONS; the change is still on its way.
            Err(OpError::new(
                ErrorCode::ConcurrentTransactions,
                "the transaction state was not stored in time",
            ))
        }
    }
}

fn deadline() -> Instant {
    Instant::now() + Duration::from_secs(30)
}

fn done(r: Response) -> Result<(), OpError> {
    match r {
        Response::Done(Ok(())) => Ok(()),
        Response::Done(Err(code)) | Response::ProducerId(Err(code)) => {
            Err(OpError::new(code, code.name().to_string()))
        }
        Response::ProducerId(Ok(_)) => Err(OpError::new(
            ErrorCode::UnknownServerError,
            "a producer id answered to a transaction request",
        )),
    }
}

/// InitProducerId with a transactional id: the id's producer id and its next epoch.
pub async fn init_producer_id(
    shard: &Rc<Shard>,
    transactional_id: &str,
    timeout_ms: i32,
    producer_id: i64,
    producer_epoch: i16,
) -> Result<(i64, i16), OpError> {
    let r = request(shard, transactional_id, deadline(), |req, fresh, now_ms| {
        Event::InitProducerId {
            req,
            transactional_id: transactional_id.to_string(),
            timeout_ms,
            producer_id,
            producer_epoch,
            fresh_producer_id: fresh,
            now_ms,
        }
    })
    .await?;
    match r {
        Response::ProducerId(Ok(p)) => Ok(p),
        other => done(other).and(Err(OpError::new(
            ErrorCode::UnknownServerError,
            "no producer id answered",
        ))),
    }
}

/// The partitions among `partitions` that do not exist (AddPartitionsToTxn refuses them:
/// UNKNOWN_TOPIC_OR_PARTITION).
pub fn unknown_partitions(shard: &Shard, partitions: &[TopicPartition]) -> Vec<TopicPartition> {
    let md = shard.metadata.borrow();
    partitions
        .iter()
        .filter(|tp| {
            md.topic(&tp.topic)
                .is_none_or(|t| tp.partition as usize >= t.partitions.len())
        })
        .cloned()
        .collect()
}

/// AddPartitionsToTxn: the partitions join the producer's transaction (starting it).
pub async fn add_partitions(
    shard: &Rc<Shard>,
    transactional_id: &str,
    producer_id: i64,
    producer_epoch: i16,
    partitions: Vec<TopicPartition>,
) -> Result<(), OpError> {
    if !unknown_partitions(shard, &partitions).is_empty() {
        return Err(OpError::new(
            ErrorCode::UnknownTopicOrPartition,
            "a partition of the transaction does not exist",
        ));
    }
    let r = request(shard, transactional_id, deadline(), |req, _, now_ms| {
        Event::AddPartitions {
            req,
            transactional_id: transactional_id.to_string(),
            producer_id,
            producer_epoch,
            partitions: partitions.clone(),
            now_ms,
        }
    })
    .await?;
    done(r)
}

/// AddOffsetsToTxn: the group's `__consumer_offsets` partition joins the transaction (its
/// commit or abort marker makes the transaction's offset commits visible or drops them).
pub async fn add_offsets(
    shard: &Rc<Shard>,
    transactional_id: &str,
    producer_id: i64,
    producer_epoch: i16,
    group: &str,
) -> Result<(), OpError> {
    if group.is_empty() {
        return Err(OpError::new(ErrorCode::InvalidGroupId, "empty group id"));
    }
    let n = shard
        .metadata
        .borrow()
        .topic(OFFSETS_TOPIC)
        .map(|t| t.partitions.len() as u32);
    let Some(n) = n else {
        internal_topics::ensure_created(shard, InternalTopic::Offsets);
        return Err(OpError::new(
            ErrorCode::CoordinatorNotAvailable,
            "the offsets topic is not ready",
        ));
    };
    let tp = TopicPartition::new(OFFSETS_TOPIC, offsets_partition(group, n));
    add_partitions(
        shard,
        transactional_id,
        producer_id,
        producer_epoch,
        vec![tp],
    )
    .await
}

/// EndTxn: commits or aborts the producer's transaction; answered once the decision is
/// durable (the markers follow).
pub async fn end_txn(
    shard: &Rc<Shard>,
    transactional_id: &str,
    producer_id: i64,
    producer_epoch: i16,
    commit: bool,
) -> Result<(), OpError> {
    let r = request(shard, transactional_id, deadline(), |req, _, now_ms| {
        Event::EndTxn {
            req,
            transactional_id: transactional_id.to_string(),
            producer_id,
            producer_epoch,
            commit,
            now_ms,
        }
    })
    .await?;
    done(r)
}

/// Carries out a coordinator's actions (of `__transactions` partition `k`).
pub fn run_actions(shard: &Rc<Shard>, k: u32, actions: Vec<Action>) {
    for a in actions {
        match a {
            Action::Respond { req, response } => shard.txns.respond(req, response),
            Action::Append { seq, record } => append(shard, k, seq, record),
            Action::SendMarkers {
                transactional_id,
                producer_id,
                producer_epoch,
                commit,
                coordinator_epoch,
                partitions,
            } => shard.txns.queue_markers(Markers {
                coordinator: k,
                transactional_id,
                producer_id,
                producer_epoch,
                commit,
                coordinator_epoch,
                partitions,
            }),
            // Only a request asks for one; it allocates and delivers itself again.
            Action::AllocateProducerId { .. } => {}
        }
    }
    shard.txns.wake.notify(usize::MAX);
}

/// The marker sender wrote the markers of `written` partitions of `m` (the others are
/// retried by the coordinator).
pub fn markers_done(shard: &Rc<Shard>, m: Markers, written: Vec<TopicPartition>) {
    let k = m.coordinator;
    let out = shard.txns.handle(
        k,
        Event::MarkersDone {
            transactional_id: m.transactional_id,
            producer_id: m.producer_id,
            producer_epoch: m.producer_epoch,
            written,
            now_ms: now(),
        },
    );
    run_actions(shard, k, out);
}

/// Appends a coordinator's record to its partition; the coordinator hears when it is
/// durable (acks=all) or failed.
fn append(shard: &Rc<Shard>, k: u32, seq: u64, record: TxnLogRecord) {
    let failed = move |shard: &Rc<Shard>, e: OpError| {
        let error = as_coordinator_error(e, "transaction state").code;
        let out = shard.txns.handle(
            k,
            Event::AppendFailed {
                seq,
                error,
                now_ms: now(),
            },
        );
        run_actions(shard, k, out);
    };
    let Some(p) = shard.partition(TRANSACTIONS_TOPIC, k) else {
        return failed(
            shard,
            OpError::new(ErrorCode::NotLeaderOrFollower, "the partition is not here"),
        );
    };
    let appended = append_records(shard, &p, std::slice::from_ref(&record));
    let (base, next) = match appended {
        Ok(r) => r,
        Err(e) => return failed(shard, e),
    };
    shard.txns.append_started(k);
    shard.group_commit.mark_dirty(&p);
    let shard = shard.clone();
    rill_shards::rt::spawn_local(async move {
        let stored = Appended {
            partition: p.clone(),
            base_offset: base,
            next_offset: next,
            acks: Acks::All,
        }
        .durable(&shard)
        .await;
        shard.txns.append_settled(k);
        shard.txns.settled.notify(usize::MAX);
        match stored {
            Ok(()) => {
                let out = shard.txns.handle(k, Event::Appended { seq, now_ms: now() });
                run_actions(&shard, k, out);
            }
            Err(e) => failed(&shard, e),
        }
        // Every `--transaction-state-compact-every` records a snapshot of every id's state
        // is appended and, once durable, the log below it truncated (as the offsets topic
        // is compacted): the log is bounded by the ids it holds, not by their history.
        let every = shard.cfg.transaction_state_compact_every;
        if let Some(records) = shard.txns.begin_compaction(k, every) {
            compact(&shard, &p, records).await;
            shard.txns.end_compaction(k);
        }
    })
    .detach();
}

/// Compacts a `__transactions` partition: appends `records` (every id's state, taken with
/// no append in flight), waits until they are durable, then truncates the log below them.
async fn compact(shard: &Rc<Shard>, p: &Rc<Partition>, records: Vec<TxnLogRecord>) {
    let epoch = p.leader_epoch();
    let (base, next) = if records.is_empty() {
        // No id left: the whole history is obsolete.
        (p.log_end_offset(), p.log_end_offset())
    } else {
        match append_records(shard, p, &records) {
            Ok(r) => r,
            Err(e) => {
                log::warn!(
                    "{TRANSACTIONS_TOPIC}-{}: compaction append failed: {e}",
                    p.index
                );
                return;
            }
        }
    };
    if next > base {
        shard.group_commit.mark_dirty(p);
        let rx = p.wait_for_all(next);
        if !matches!(rx.recv_async().await, Ok(Ok(()))) {
            return;
        }
    }
    // Deposed meanwhile: the new leader compacts its own log.
    if p.is_follower() || p.leader_epoch() != epoch {
        return;
    }
    match p.truncate_before(base.min(p.high_watermark())).await {
        Ok(start) => log::info!(
            "{TRANSACTIONS_TOPIC}-{}: compacted ({} ids), log starts at {start}",
            p.index,
            records.len()
        ),
        Err(e) => log::warn!(
            "{TRANSACTIONS_TOPIC}-{}: compaction truncate failed: {e}",
            p.index
        ),
    }
}

/// Records appended in batches of at most 1024 (not durable yet): (first offset, next).
fn append_records(
    shard: &Shard,
    p: &Partition,
    records: &[TxnLogRecord],
) -> Result<(u64, u64), OpError> {
    p.admit_all().map_err(OpError::from)?;
    let mut range: Option<(u64, u64)> = None;
    for chunk in records.chunks(1024) {
        let (base, next) = append_batch(shard, p, chunk)?;
        range = Some((range.map_or(base, |r| r.0), next));
    }
    range.ok_or_else(|| OpError::new(ErrorCode::UnknownServerError, "no record to append"))
}

fn append_batch(
    shard: &Shard,
    p: &Partition,
    records: &[TxnLogRecord],
) -> Result<(u64, u64), OpError> {
    let mut b = BatchBuilder::new();
    for record in records {
        let value = record.value();
        b.push_record(
            now_ms(),
            Some(&record.key()),
            value.as_deref(),
            std::iter::empty(),
            &[],
        );
    }
    let internal =
        |e: &dyn std::fmt::Display| OpError::new(ErrorCode::UnknownServerError, e.to_string());
    let bytes = b.build().map_err(|e| internal(&e))?;
    let view = BatchView::validate(&bytes).map_err(|e| internal(&e))?;
    p.append(&[view], now_ms(), &shard.cache)
        .map_err(|e| OpError::new(e.code(), e.to_string()))
}

/// Reads a `__transactions` partition's records for a load (`None`: the leadership moved
/// meanwhile). A record that does not decode is logged and skipped: a damaged record never
/// stops the coordinator, and a later record of its id replaces it.
pub async fn read_log(
    shard: &Rc<Shard>,
    p: &Partition,
    current: impl Fn() -> bool,
) -> Option<Vec<TxnLogRecord>> {
    let mut records = Vec::new();
    let mut damaged = 0usize;
    let read = offsets_log::read_records(shard, p, current, |_, r| {
        match TxnLogRecord::decode(r.key().unwrap_or_default(), r.value()) {
            Ok(rec) => records.push(rec),
            Err(e) => {
                damaged += 1;
                if damaged == 1 {
                    log::error!(
                        "{TRANSACTIONS_TOPIC}-{}: record at offset {}: {e}; skipped",
                        p.index,
                        r.offset
                    );
                }
            }
        }
    })
    .await;
    if !read {
        return None;
    }
    log::info!(
        "shard {}: loaded {} transaction records from {TRANSACTIONS_TOPIC}-{} ({damaged} damaged)",
        shard.id,
        records.len(),
        p.index
    );
    Some(records)
}

/// The coordinators' timers (transaction timeouts, marker retries, expirations), until the
/// shard stops.
pub async fn run_timers(shard: Rc<Shard>) {
    loop {
        let woken = shard.txns.wake.listen();
        let now_ms = now();
        let next = shard
            .txns
            .next_wakeup_ms()
            .map_or(TICK_MAX, |at| {
                Duration::from_millis(at.saturating_sub(now_ms))
            })
            .min(TICK_MAX);
        if next > Duration::ZERO {
            let sleep = shard.deadlines.sleep_until(Instant::now() + next);
            futures_lite::future::or(woken, sleep).await;
            continue;
        }
        drop(woken);
        let now_ms = now();
        for k in shard.txns.active() {
            let out = shard.txns.handle(k, Event::Tick { now_ms });
            run_actions(&shard, k, out);
        }
        // Due timers just ran: the next is in the future (or a millisecond away at most).
        let l = shard.txns.wake.listen();
        let pause = shard
            .deadlines
            .sleep_until(Instant::now() + Duration::from_millis(1));
        futures_lite::future::or(l, pause).await;
    }
}
