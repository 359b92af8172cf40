//! The transactional producer (Kafka's `transactional.id`): records sent between
//! [`TransactionalProducer::begin`] and [`TransactionalProducer::commit`], and the consumer
//! offsets sent with them ([`TransactionalProducer::send_offsets_to_transaction`]), become
//! visible to read_committed consumers together, or not at all.
//!
//! It is the idempotent [`Producer`] with a fixed identity: the producer id and epoch the
//! transaction coordinator gave its transactional id at [`TransactionalProducer::init`]
//! (which fences every older instance and aborts their open transaction). Batches are marked
//! transactional and go out to a partition only once the coordinator has the partition in the
//! transaction (AddPartitionsToTxn, asked by the sender thread). The epoch never moves on its
//! own: a batch that fails makes the transaction abortable (every later send and the commit
//! fail), and the abort bumps the epoch when a failed batch may have left a sequence gap. A
//! newer epoch of the same transactional id makes the producer fenced: fatal.

use std::collections::{BTreeSet, HashSet};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::coordinator::check;
use super::producer::{Identity, Shared};
use super::{
    Client, ClientConfig, ClientError, DeliveryFuture, Offsets, Producer, ProducerConfig,
    ProducerRecord,
};
use crate::protocol::messages::{
    AddOffsetsToTxnRequest, AddPartitionsToTxnRequest, EndTxnRequest, GroupStatusResponse,
    TxnMarkerPartition, TxnOffsetCommitRequest,
};
use crate::protocol::{ApiKey, ErrorCode};

/// A transactional producer's own settings (Kafka's names).
#[derive(Debug, Clone)]
pub struct TransactionConfig {
    /// Names the producer across restarts (`transactional.id`): a new instance fences the
    /// old one and aborts its open transaction.
    pub transactional_id: String,
    /// An open transaction the coordinator hears nothing of for this long is aborted
    /// (`transaction.timeout.ms`; at most the broker's `--transaction-max-timeout-ms`).
    pub transaction_timeout: Duration,
}

impl TransactionConfig {
    /// Settings for `transactional_id` with Kafka's default timeout of 60 s.
    pub fn new(transactional_id: impl Into<String>) -> TransactionConfig {
        TransactionConfig {
            transactional_id: transactional_id.into(),
            transaction_timeout: Duration::from_secs(60),
        }
    }
}

/// The consumer group whose offsets a transaction commits (Kafka's
/// `ConsumerGroupMetadata`): a member names its id and generation so a zombie member's commit
/// is refused; outside any group, generation -1 and an empty member id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupMetadata {
    /// The group id.
    pub group: String,
    /// The member's generation, or -1.
    pub generation: i32,
    /// The member's id, or empty.
    pub member_id: String,
    /// A static member's instance id.
    pub group_instance_id: Option<String>,
}

impl GroupMetadata {
    /// A group committed to from outside its membership (manually assigned consumers).
    pub fn new(group: impl Into<String>) -> GroupMetadata {
        GroupMetadata {
            group: group.into(),
            generation: -1,
            member_id: String::new(),
            group_instance_id: None,
        }
    }
}

/// Why the open transaction cannot commit.
#[derive(Debug, Clone)]
pub(super) struct TxnError {
    fatal: bool,
    code: Option<ErrorCode>,
    pub(super) message: String,
}

impl TxnError {
    fn to_client_error(&self) -> ClientError {
        ClientError::Transaction {
            fatal: self.fatal,
            code: self.code,
            message: self.message.clone(),
        }
    }
}

/// The transaction a transactional producer shares with its sender thread.
pub(super) struct Txn {
    id: String,
    /// Begun and not committed or aborted yet.
    open: bool,
    /// Partitions the coordinator has in the open transaction.
    pub(super) added: HashSet<(Arc<str>, u32)>,
    /// The group offsets partition joined the transaction: it ends with EndTxn even without
    /// a partition of records.
    offsets_added: bool,
    /// Partitions whose batches wait for AddPartitionsToTxn (the sender asks).
    pub(super) to_add: BTreeSet<(Arc<str>, u32)>,
    /// No AddPartitionsToTxn before this (after a retriable refusal).
    pub(super) add_not_before: Instant,
    /// The coordinator as the sender thread last found it.
    coordinator: Option<SocketAddr>,
    /// Set once a send failed or the producer was fenced.
    pub(super) error: Option<TxnError>,
}

impl Txn {
    fn new(id: String) -> Txn {
        Txn {
            id,
            open: false,
            added: HashSet::new(),
            offsets_added: false,
            to_add: BTreeSet::new(),
            add_not_before: Instant::now(),
            coordinator: None,
            error: None,
        }
    }

    /// Notes a failure of the open transaction: the first one is kept, unless a fatal one
    /// comes after it.
    pub(super) fn fail(&mut self, code: Option<ErrorCode>, message: &str, fatal: bool) {
        if self.error.as_ref().is_none_or(|e| fatal && !e.fatal) {
            self.error = Some(TxnError {
                fatal,
                code,
                message: message.to_string(),
            });
        }
    }

    /// Ends the transaction on the producer's side.
    fn close(&mut self) {
        self.open = false;
        self.added.clear();
        self.offsets_added = false;
        self.to_add.clear();
        self.error = None;
    }
}

/// How soon AddPartitionsToTxn is asked again after CONCURRENT_TRANSACTIONS.
const CONCURRENT_TRANSACTIONS_BACKOFF: Duration = Duration::from_millis(5);

/// How long to wait before retrying after `e`: CONCURRENT_TRANSACTIONS is the coordinator
/// still writing the last transaction's markers, a matter of milliseconds, so it is retried
/// sooner than `retry_backoff` (as Kafka's client does for AddPartitionsToTxn).
fn backoff(e: &ClientError, retry_backoff: Duration) -> Duration {
    match e.code() {
        Some(ErrorCode::ConcurrentTransactions) => {
            retry_backoff.min(CONCURRENT_TRANSACTIONS_BACKOFF)
        }
        _ => retry_backoff,
    }
}

/// When the sender should next ask AddPartitionsToTxn, if partitions wait for it.
pub(super) fn add_due(t: &Txn) -> Option<Instant> {
    (!t.to_add.is_empty() && t.error.is_none()).then_some(t.add_not_before)
}

/// A broker answer that means a newer epoch of the transactional id took over.
pub(super) fn is_fenced(code: ErrorCode) -> bool {
    matches!(
        code,
        ErrorCode::ProducerFenced
            | ErrorCode::InvalidProducerEpoch
            | ErrorCode::TransactionalIdAuthorizationFailed
    )
}

/// The coordinator moved or is not up: found again at the next attempt.
fn coordinator_lost(e: &ClientError) -> bool {
    e.is_unreachable()
        || matches!(
            e.code(),
            Some(ErrorCode::NotCoordinator | ErrorCode::CoordinatorNotAvailable)
        )
}

/// One call to the transaction coordinator of `id`, found first if `coordinator` is unknown
/// (and forgotten when it answers that it moved).
fn coordinator_call<T>(
    client: &mut Client,
    coordinator: &mut Option<SocketAddr>,
    id: &str,
    f: impl FnOnce(&mut Client, SocketAddr) -> Result<T, ClientError>,
) -> Result<T, ClientError> {
    let at = match *coordinator {
        Some(at) => at,
        None => {
            let at = client.find_txn_coordinator(id)?;
            *coordinator = Some(at);
            at
        }
    };
    let r = f(client, at);
    if r.as_ref().err().is_some_and(coordinator_lost) {
        *coordinator = None;
    }
    r
}

/// `f` until it succeeds, fails for good, or `deadline` passes (retriable failures wait
/// [`backoff`] before the next attempt).
fn with_retries<T>(
    deadline: Instant,
    retry_backoff: Duration,
    mut f: impl FnMut() -> Result<T, ClientError>,
) -> Result<T, ClientError> {
    loop {
        match f() {
            Err(e) if e.is_retriable() => {
                let wait = backoff(&e, retry_backoff);
                if Instant::now() + wait >= deadline {
                    return Err(e);
                }
                log::debug!("transactional producer: retried after: {e}");
                std::thread::sleep(wait);
            }
            r => return r,
        }
    }
}

impl Client {
    /// A call to a coordinator answered with a status (the transaction APIs).
    fn status_call<Req>(
        &mut self,
        at: SocketAddr,
        api: ApiKey,
        req: &Req,
    ) -> Result<(), ClientError>
    where
        Req: crate::protocol::frame::EncodeMeta,
    {
        let (r, _): (GroupStatusResponse, _) = self.call(at, api, req, &[])?;
        check(r.error_code, &r.message)
    }
}

/// Called by the sender thread: asks the coordinator to add the partitions whose batches wait
/// for it. Whether it changed anything the sender should act on at once.
pub(super) fn add_partitions(shared: &Arc<Shared>, client: &mut Client) -> bool {
    let (id, producer, partitions, mut coordinator) = {
        let mut st = shared.lock();
        let producer = st.identity.as_ref().and_then(|i| i.current);
        let Some(t) = st.txn.as_mut() else {
            return false;
        };
        if t.to_add.is_empty() || t.error.is_some() || Instant::now() < t.add_not_before {
            return false;
        }
        let Some(producer) = producer else {
            return false;
        };
        (
            t.id.clone(),
            producer,
            std::mem::take(&mut t.to_add),
            t.coordinator,
        )
    };
    let req = AddPartitionsToTxnRequest {
        transactional_id: id.clone(),
        producer_id: producer.0,
        producer_epoch: producer.1,
        partitions: partitions
            .iter()
            .map(|(topic, partition)| TxnMarkerPartition {
                topic: topic.to_string(),
                partition: *partition,
            })
            .collect(),
    };
    let r = coordinator_call(client, &mut coordinator, &id, |c, at| {
        c.status_call(at, ApiKey::AddPartitionsToTxn, &req)
    });
    let mut st = shared.lock();
    let Some(t) = st.txn.as_mut() else {
        return false;
    };
    t.coordinator = coordinator;
    match r {
        Ok(()) => t.added.extend(partitions),
        // Retriable (the coordinator is busy with the last transaction, or moved): the batches
        // wait, within their delivery timeout.
        Err(e) if e.is_retriable() => {
            log::debug!("transactional producer: AddPartitionsToTxn retried after: {e}");
            t.add_not_before = Instant::now() + backoff(&e, shared.cfg.retry_backoff);
            return false;
        }
        Err(e) => {
            let fatal = e.code().is_some_and(is_fenced);
            t.fail(e.code(), &format!("AddPartitionsToTxn: {e}"), fatal);
        }
    }
    drop(st);
    shared.wake();
    true
}

/// Calls from the application's thread: the coordinators and the client that reaches them.
struct Calls {
    client: Client,
    txn_coordinator: Option<SocketAddr>,
}

impl Calls {
    /// `f` at `id`'s transaction coordinator (found again when it moved), retried within
    /// `cfg.max_block`.
    fn at_coordinator<T>(
        &mut self,
        cfg: &ProducerConfig,
        id: &str,
        mut f: impl FnMut(&mut Client, SocketAddr) -> Result<T, ClientError>,
    ) -> Result<T, ClientError> {
        let deadline = Instant::now() + cfg.max_block;
        with_retries(deadline, cfg.retry_backoff, || {
            coordinator_call(&mut self.client, &mut self.txn_coordinator, id, &mut f)
        })
    }
}

/// A transactional producer: `init`, then `begin`, `send`s (and
/// `send_offsets_to_transaction`), `commit` or `abort`, again and again. Thread-safe like
/// [`Producer`]; one transaction is open at a time.
pub struct TransactionalProducer {
    producer: Producer,
    txn_cfg: TransactionConfig,
    calls: Mutex<Calls>,
}

impl TransactionalProducer {
    /// Connects and gets the transactional id's producer id and epoch from its coordinator
    /// (Kafka's `initTransactions`): every older instance is fenced, and its open
    /// transaction aborted first (waited for up to `max_block`).
    pub fn init(
        client_cfg: ClientConfig,
        cfg: ProducerConfig,
        txn_cfg: TransactionConfig,
    ) -> Result<TransactionalProducer, ClientError> {
        if txn_cfg.transactional_id.is_empty() {
            return Err(ClientError::Invalid("the transactional id is empty".into()));
        }
        if !cfg.idempotence || cfg.acks != super::Acks::All {
            return Err(ClientError::Invalid(
                "a transactional producer is idempotent and uses acks=all".into(),
            ));
        }
        let timeout_ms = i32::try_from(txn_cfg.transaction_timeout.as_millis())
            .map_err(|_| ClientError::Invalid("the transaction timeout is too long".into()))?;
        let mut calls = Calls {
            client: Client::connect(client_cfg.clone())?,
            txn_coordinator: None,
        };
        let id = txn_cfg.transactional_id.clone();
        let current = calls.at_coordinator(&cfg, &id, |c, at| {
            c.init_transactional_producer_id(at, &id, timeout_ms, None)
        })?;
        log::debug!("transactional producer '{id}': producer id and epoch {current:?}");
        let sender_client = Client::connect(client_cfg.clone())?;
        let producer = Producer::start(
            sender_client,
            client_cfg,
            cfg,
            None,
            Some(Identity {
                current: Some(current),
                ..Identity::default()
            }),
            Some(Txn::new(id)),
        )?;
        Ok(TransactionalProducer {
            producer,
            txn_cfg,
            calls: Mutex::new(calls),
        })
    }

    /// The producer id and epoch its records carry.
    pub fn producer_id(&self) -> (i64, i16) {
        self.identity()
    }

    /// Opens a transaction.
    pub fn begin(&self) -> Result<(), ClientError> {
        let mut st = self.producer.shared.lock();
        let t = txn_of(&mut st);
        if let Some(e) = t.error.as_ref().filter(|e| e.fatal) {
            return Err(e.to_client_error());
        }
        if t.open {
            return Err(ClientError::Invalid("a transaction is open already".into()));
        }
        t.open = true;
        Ok(())
    }

    /// Sends a record in the open transaction (its delivery report resolves when it is
    /// written, not when the transaction commits).
    pub fn send(&self, record: ProducerRecord<'_>) -> Result<DeliveryFuture, ClientError> {
        self.usable()?;
        self.producer.send(record)
    }

    /// Sends what is buffered and waits for every delivery report (the transaction stays
    /// open).
    pub fn flush(&self) -> Result<(), ClientError> {
        self.producer.flush()
    }

    /// Partitions of `topic` (as [`Producer::partitions_for`]).
    pub fn partitions_for(&self, topic: &str) -> Result<u32, ClientError> {
        self.producer.partitions_for(topic)
    }

    /// Commits `offsets` for `group` as part of the open transaction: they take effect if and
    /// when it commits (the read-process-write loop's input position).
    pub fn send_offsets_to_transaction(
        &self,
        offsets: &Offsets,
        group: &GroupMetadata,
    ) -> Result<(), ClientError> {
        self.usable()?;
        let (producer_id, producer_epoch) = self.identity();
        let id = &self.txn_cfg.transactional_id;
        let add = AddOffsetsToTxnRequest {
            transactional_id: id.clone(),
            producer_id,
            producer_epoch,
            group: group.group.clone(),
        };
        self.txn_call(ApiKey::AddOffsetsToTxn, &add)?;
        txn_of(&mut self.producer.shared.lock()).offsets_added = true;
        let commit = TxnOffsetCommitRequest {
            transactional_id: id.clone(),
            group: group.group.clone(),
            producer_id,
            producer_epoch,
            member_id: group.member_id.clone(),
            group_instance_id: group.group_instance_id.clone(),
            generation: group.generation,
            offsets: offsets
                .iter()
                .map(|((t, p), o)| (t.clone(), *p, o.offset, o.metadata.clone()))
                .collect(),
        };
        let cfg = &self.producer.shared.cfg;
        let mut calls = self.calls();
        let client = &mut calls.client;
        let r = with_retries(Instant::now() + cfg.max_block, cfg.retry_backoff, || {
            let at = client.find_coordinator(&group.group)?;
            client.status_call(at, ApiKey::TxnOffsetCommit, &commit)
        });
        drop(calls);
        self.settle(r, "TxnOffsetCommit")
    }

    /// Sends what is buffered, waits for it, and commits the transaction: its records and
    /// offsets become visible together. Fails if a send of the transaction failed (then
    /// [`abort`](Self::abort)); a failure that leaves the outcome unknown (a timeout) may be
    /// retried.
    pub fn commit(&self) -> Result<(), ClientError> {
        self.usable()?;
        self.producer.flush()?;
        self.usable()?;
        self.end(true)
    }

    /// Aborts the open transaction: records not sent yet fail, those written are never
    /// handed to read_committed consumers, and its offsets are not committed.
    pub fn abort(&self) -> Result<(), ClientError> {
        {
            let mut st = self.producer.shared.lock();
            let t = txn_of(&mut st);
            if let Some(e) = t.error.as_ref().filter(|e| e.fatal) {
                return Err(e.to_client_error());
            }
            if !t.open {
                return Err(ClientError::Invalid("no transaction is open".into()));
            }
            // The sender fails whatever is not in flight; what is in flight is answered.
            t.fail(None, "the transaction is being aborted", false);
        }
        self.producer.shared.wake();
        self.producer.flush()?;
        self.end(false)?;
        self.bump_epoch_if_wanted()
    }

    /// EndTxn (if the coordinator has anything of the transaction), then the transaction is
    /// over on this side too.
    fn end(&self, commit: bool) -> Result<(), ClientError> {
        let (producer_id, producer_epoch) = self.identity();
        let joined = {
            let mut st = self.producer.shared.lock();
            let t = txn_of(&mut st);
            !t.added.is_empty() || t.offsets_added
        };
        if joined {
            let req = EndTxnRequest {
                transactional_id: self.txn_cfg.transactional_id.clone(),
                producer_id,
                producer_epoch,
                commit,
            };
            self.txn_call(ApiKey::EndTxn, &req)?;
        }
        txn_of(&mut self.producer.shared.lock()).close();
        Ok(())
    }

    /// After an abort: a failed batch may have left a sequence gap, so the next transaction
    /// starts in a new epoch (KIP-360: InitProducerId naming the current id and epoch).
    fn bump_epoch_if_wanted(&self) -> Result<(), ClientError> {
        let current = {
            let st = self.producer.shared.lock();
            match &st.identity {
                Some(i) if i.bump_wanted => i.current,
                _ => return Ok(()),
            }
        };
        let id = &self.txn_cfg.transactional_id;
        let timeout_ms = self.txn_cfg.transaction_timeout.as_millis() as i32;
        let r = self
            .calls()
            .at_coordinator(&self.producer.shared.cfg, id, |c, at| {
                c.init_transactional_producer_id(at, id, timeout_ms, current)
            });
        let next = self.settle(r, "InitProducerId")?;
        log::info!("transactional producer '{id}': epoch bumped from {current:?} to {next:?}");
        let mut st = self.producer.shared.lock();
        if let Some(i) = st.identity.as_mut() {
            i.current = Some(next);
            i.bump_wanted = false;
            i.next_seq.clear();
        }
        Ok(())
    }

    /// A call to the transaction coordinator, retried within `max_block`.
    fn txn_call<Req>(&self, api: ApiKey, req: &Req) -> Result<(), ClientError>
    where
        Req: crate::protocol::frame::EncodeMeta,
    {
        let id = &self.txn_cfg.transactional_id;
        let r = self
            .calls()
            .at_coordinator(&self.producer.shared.cfg, id, |c, at| {
                c.status_call(at, api, req)
            });
        self.settle(r, api.name())
    }

    /// A coordinator's refusal: fenced is fatal; a timeout leaves the transaction as it was
    /// (the call may be retried); anything else makes it abortable.
    fn settle<T>(&self, r: Result<T, ClientError>, what: &str) -> Result<T, ClientError> {
        let e = match r {
            Ok(v) => return Ok(v),
            Err(e) => e,
        };
        if e.is_retriable() {
            return Err(e);
        }
        let fatal = e.code().is_some_and(is_fenced);
        let mut st = self.producer.shared.lock();
        let t = txn_of(&mut st);
        t.fail(e.code(), &format!("{what}: {e}"), fatal);
        Err(t.error.as_ref().expect("just set").to_client_error())
    }

    /// An open transaction that can still commit.
    fn usable(&self) -> Result<(), ClientError> {
        let mut st = self.producer.shared.lock();
        let t = txn_of(&mut st);
        if let Some(e) = &t.error {
            return Err(e.to_client_error());
        }
        if !t.open {
            return Err(ClientError::Invalid(
                "no transaction is open: call begin first".into(),
            ));
        }
        Ok(())
    }

    fn identity(&self) -> (i64, i16) {
        self.producer
            .shared
            .lock()
            .identity
            .as_ref()
            .and_then(|i| i.current)
            .expect("a transactional producer has a producer id")
    }

    fn calls(&self) -> MutexGuard<'_, Calls> {
        self.calls.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A transactional producer's transaction (it always has one).
fn txn_of(st: &mut super::producer::State) -> &mut Txn {
    st.txn
        .as_mut()
        .expect("a transactional producer has a transaction")
}
