//! The group consumer: a member of a consumer group that subscribes to topics and consumes
//! the partitions the group assigns it.
//!
//! Two threads do the work. The application's thread runs [`GroupConsumer::poll`], and every
//! rebalance happens inside it (join, the leader's assignment, sync, revocations and the
//! listener's callbacks), so the application never sees partitions change under its feet
//! between two polls. A heartbeat thread beats every `heartbeat_interval`, so a slow
//! application keeps its session; a commit thread sends the commits in the order they were
//! asked for. Each has its own connection, so a commit waiting on a slow disk never holds a
//! heartbeat back.
//! Fetching is the assign-mode [`Consumer`] underneath.
//!
//! Delivery semantics are named options ([`Delivery`]): commit before processing
//! (at-most-once), commit after processing (at-least-once), or commit by hand.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::{
    Client, ClientConfig, ClientError, Consumer, ConsumerConfig, OffsetReset, Records, StartFrom,
};
use crate::group::assignor::{self, MemberSubscription, TopicPartition};
use crate::group::consumer_protocol::{
    MemberAssignment, Subscription, CONSUMER_PROTOCOL_TYPE, VERSION,
};
use crate::protocol::messages::{JoinGroupRequest, JoinGroupResponse, SyncGroupRequest};
use crate::protocol::{ErrorCode, FrameError};

/// How long a join or sync may wait beyond the rebalance timeout (the coordinator's own
/// slack plus a margin) before the client gives up on the connection.
const JOIN_SLACK: Duration = Duration::from_secs(10);

/// Pause between attempts after a coordinator error.
const RETRY_BACKOFF: Duration = Duration::from_millis(100);

/// When commits happen, which decides what a crash costs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery {
    /// Commit before processing: `poll` commits the positions after its records before it
    /// returns them. A crash loses the records being processed; none is read twice.
    AtMostOnce,
    /// Commit after processing: the records a poll returned count as processed once the
    /// application polls again; their positions are committed every `auto_commit_interval`,
    /// before a partition is revoked, and on close. A crash re-delivers what was processed
    /// since the last commit; nothing is lost.
    AtLeastOnce,
    /// The application commits with [`GroupConsumer::commit_sync`],
    /// [`GroupConsumer::commit_async`] or [`GroupConsumer::commit_offsets_sync`].
    Manual,
}

/// Group consumer settings (Kafka's names in the doc comments).
#[derive(Debug, Clone)]
pub struct GroupConsumerConfig {
    /// The group to join (`group.id`).
    pub group: String,
    /// Static membership (`group.instance.id`): a restart within the session timeout keeps
    /// the assignment without a rebalance.
    pub group_instance_id: Option<String>,
    /// Assignor names in preference order (`partition.assignment.strategy`): `range`,
    /// `roundrobin`, `cooperative-sticky`. The cooperative protocol is used when every one
    /// of them is cooperative; otherwise every rebalance revokes everything first (eager).
    pub assignors: Vec<String>,
    /// A member not heard of for this long is removed (`session.timeout.ms`).
    pub session_timeout: Duration,
    /// How often the heartbeat thread beats (`heartbeat.interval.ms`).
    pub heartbeat_interval: Duration,
    /// How long a rebalance waits for members to rejoin (`max.poll.interval.ms`): an
    /// application must poll at least this often.
    pub rebalance_timeout: Duration,
    /// When offsets are committed.
    pub delivery: Delivery,
    /// How often at-least-once commits (`auto.commit.interval.ms`).
    pub auto_commit_interval: Duration,
    /// How often the group leader checks whether the subscribed topics' partition counts
    /// changed, and rebalances if they did (`metadata.max.age.ms`).
    pub metadata_max_age: Duration,
    /// Fetch settings and `auto.offset.reset` (used where the group has no committed offset).
    pub consumer: ConsumerConfig,
}

impl GroupConsumerConfig {
    /// Defaults for `group`: cooperative-sticky, 10 s session, 1 s heartbeat, 60 s rebalance
    /// timeout, at-least-once with a 5 s auto-commit interval, 5 s metadata age.
    pub fn new(group: impl Into<String>) -> GroupConsumerConfig {
        GroupConsumerConfig {
            group: group.into(),
            group_instance_id: None,
            assignors: vec!["cooperative-sticky".into()],
            session_timeout: Duration::from_secs(10),
            heartbeat_interval: Duration::from_secs(1),
            rebalance_timeout: Duration::from_secs(60),
            delivery: Delivery::AtLeastOnce,
            auto_commit_interval: Duration::from_secs(5),
            metadata_max_age: Duration::from_secs(5),
            consumer: ConsumerConfig::default(),
        }
    }

    fn cooperative(&self) -> bool {
        !self.assignors.is_empty() && self.assignors.iter().all(|a| a == "cooperative-sticky")
    }
}

/// Called on the application's thread, inside `poll`, when the assignment changes.
pub trait RebalanceListener: Send {
    /// These partitions were added to the assignment; records of them follow.
    fn on_assigned(&mut self, _partitions: &[TopicPartition]) {}
    /// These partitions are taken away in an orderly rebalance (after at-least-once
    /// committed them). With the cooperative protocol only the partitions that move are.
    fn on_revoked(&mut self, _partitions: &[TopicPartition]) {}
    /// These partitions were lost: the group removed this member (its session expired or it
    /// was fenced), so another member may already own them; nothing was committed for them.
    fn on_lost(&mut self, _partitions: &[TopicPartition]) {}
}

/// A committed offset (Kafka's `OffsetAndMetadata`): the next offset to read, and text the
/// application stores beside it (empty unless given). The coordinator refuses metadata
/// longer than its limit (4096 bytes) with OFFSET_METADATA_TOO_LARGE.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OffsetAndMetadata {
    /// The next offset to read.
    pub offset: u64,
    /// Free text stored with the offset.
    pub metadata: String,
}

impl OffsetAndMetadata {
    /// An offset without metadata.
    pub fn new(offset: u64) -> OffsetAndMetadata {
        OffsetAndMetadata {
            offset,
            metadata: String::new(),
        }
    }

    /// An offset with metadata.
    pub fn with_metadata(offset: u64, metadata: impl Into<String>) -> OffsetAndMetadata {
        OffsetAndMetadata {
            offset,
            metadata: metadata.into(),
        }
    }
}

/// Offsets to commit, or committed, per partition.
pub type Offsets = BTreeMap<TopicPartition, OffsetAndMetadata>;

/// A commit handed to the commit thread; its result arrives later.
pub struct PendingCommit(flume::Receiver<Result<(), ClientError>>);

impl PendingCommit {
    /// Blocks until the commit is durable or failed.
    pub fn wait(self) -> Result<(), ClientError> {
        self.0
            .recv()
            .unwrap_or_else(|_| Err(ClientError::Invalid("the group consumer stopped".into())))
    }
    /// Waits for the result without blocking a thread.
    pub async fn done(self) -> Result<(), ClientError> {
        self.0
            .recv_async()
            .await
            .unwrap_or_else(|_| Err(ClientError::Invalid("the group consumer stopped".into())))
    }
    /// The result if it is in.
    pub fn try_result(&self) -> Option<Result<(), ClientError>> {
        self.0.try_recv().ok()
    }
}

/// What the application thread and the background threads share.
#[derive(Debug, Default)]
struct Membership {
    coordinator: Option<SocketAddr>,
    member_id: String,
    /// The generation the member is in; `None` while it (re)joins.
    generation: Option<u32>,
    /// The coordinator asked for a rebalance (a heartbeat or commit said so).
    rejoin: bool,
    /// The coordinator no longer has this member in its generation.
    fenced: Option<ErrorCode>,
}

fn lock(m: &Mutex<Membership>) -> MutexGuard<'_, Membership> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A commit for the commit thread.
struct CommitJob {
    offsets: Offsets,
    done: flume::Sender<Result<(), ClientError>>,
}

/// A member of a consumer group.
pub struct GroupConsumer {
    cfg: GroupConsumerConfig,
    client: Client,
    consumer: Consumer,
    topics: Vec<String>,
    listener: Option<Box<dyn RebalanceListener>>,
    shared: Arc<Mutex<Membership>>,
    commits: Option<flume::Sender<CommitJob>>,
    /// Dropped to stop the heartbeat thread.
    heartbeats: Option<flume::Sender<()>>,
    /// The heartbeat and commit threads.
    background: Vec<std::thread::JoinHandle<()>>,
    owned: BTreeSet<TopicPartition>,
    /// Per owned partition: the offset after the last record handed to the application
    /// (its start offset before the first).
    delivered: BTreeMap<TopicPartition, u64>,
    leader: bool,
    /// Partition counts of the subscribed topics when the group last assigned.
    partition_counts: BTreeMap<String, u32>,
    last_auto_commit: Instant,
    last_metadata_check: Instant,
    /// At-most-once: records fetched whose commit did not go through yet (a rebalance was
    /// in progress); handed out after the commit succeeds, dropped if the partition moves.
    held: Option<Records>,
    closed: bool,
}

impl GroupConsumer {
    /// Connects and starts the background threads; nothing is joined before the first poll
    /// after [`subscribe`](Self::subscribe).
    pub fn new(
        client_cfg: ClientConfig,
        cfg: GroupConsumerConfig,
    ) -> Result<GroupConsumer, ClientError> {
        if cfg.group.is_empty() {
            return Err(ClientError::Invalid("the group id is empty".into()));
        }
        if let Some(bad) = cfg
            .assignors
            .iter()
            .find(|a| assignor::by_name(a).is_none())
        {
            return Err(ClientError::Invalid(format!(
                "unknown assignor '{bad}' (range, roundrobin, cooperative-sticky)"
            )));
        }
        if cfg.assignors.is_empty() {
            return Err(ClientError::Invalid("no assignor given".into()));
        }
        let client = Client::connect(client_cfg.clone())?;
        let consumer = Consumer::new(client_cfg.clone(), cfg.consumer.clone())?;
        let shared = Arc::new(Mutex::new(Membership::default()));
        let (tx, rx) = flume::bounded(64);
        let (stop_heartbeats, heartbeats_stopped) = flume::bounded::<()>(1);
        // Heartbeats and commits on threads (and connections) of their own: a commit waiting
        // for a slow disk never delays a heartbeat past the session timeout.
        let member = || -> Result<Background, ClientError> {
            Ok(Background {
                client: Client::connect(client_cfg.clone())?,
                group: cfg.group.clone(),
                instance: cfg.group_instance_id.clone(),
                shared: shared.clone(),
                interval: cfg.heartbeat_interval,
            })
        };
        let (committer, heartbeater) = (member()?, member()?);
        let spawn = |name: &str, f: Box<dyn FnOnce() + Send>| {
            std::thread::Builder::new()
                .name(name.into())
                .spawn(f)
                .map_err(|e| ClientError::Invalid(format!("cannot start {name}: {e}")))
        };
        let background = vec![
            spawn(
                "rill-group-commits",
                Box::new(move || committer.commits(rx)),
            )?,
            spawn(
                "rill-group-heartbeats",
                Box::new(move || heartbeater.heartbeats(heartbeats_stopped)),
            )?,
        ];
        Ok(GroupConsumer {
            cfg,
            client,
            consumer,
            topics: Vec::new(),
            listener: None,
            shared,
            commits: Some(tx),
            heartbeats: Some(stop_heartbeats),
            background,
            owned: BTreeSet::new(),
            delivered: BTreeMap::new(),
            leader: false,
            partition_counts: BTreeMap::new(),
            last_auto_commit: Instant::now(),
            last_metadata_check: Instant::now(),
            held: None,
            closed: false,
        })
    }

    /// Sets the callbacks for assignment changes.
    pub fn set_listener(&mut self, listener: Box<dyn RebalanceListener>) {
        self.listener = Some(listener);
    }

    /// Subscribes to `topics` (replacing any earlier subscription); the next poll joins the
    /// group, or rejoins it if this member already is in.
    pub fn subscribe(&mut self, topics: &[&str]) -> Result<(), ClientError> {
        if topics.is_empty() || topics.iter().any(|t| t.is_empty()) {
            return Err(ClientError::Invalid(
                "subscribe to at least one topic".into(),
            ));
        }
        let mut topics: Vec<String> = topics.iter().map(|t| t.to_string()).collect();
        topics.sort();
        topics.dedup();
        self.topics = topics;
        lock(&self.shared).rejoin = true;
        Ok(())
    }

    /// The member id the coordinator gave this member (empty before the first join).
    pub fn member_id(&self) -> String {
        lock(&self.shared).member_id.clone()
    }

    /// The generation this member is in, if it is in one.
    pub fn generation(&self) -> Option<u32> {
        lock(&self.shared).generation
    }

    /// The group, member and generation, for offsets a transactional producer commits
    /// ([`super::TransactionalProducer::send_offsets_to_transaction`]): the coordinator
    /// refuses them once this member is no longer in that generation.
    pub fn group_metadata(&self) -> super::GroupMetadata {
        let m = lock(&self.shared);
        super::GroupMetadata {
            group: self.cfg.group.clone(),
            generation: m
                .generation
                .and_then(|g| i32::try_from(g).ok())
                .unwrap_or(-1),
            member_id: m.member_id.clone(),
            group_instance_id: self.cfg.group_instance_id.clone(),
        }
    }

    /// The partitions assigned to this member now.
    pub fn assignment(&self) -> Vec<TopicPartition> {
        self.owned.iter().cloned().collect()
    }

    /// The offset after the last record handed out for an owned partition.
    pub fn position(&self, topic: &str, partition: u32) -> Option<u64> {
        self.delivered.get(&(topic.to_string(), partition)).copied()
    }

    /// Per owned partition: how many records the high watermark is ahead of the position
    /// (partitions not fetched yet are missing).
    pub fn lag(&self) -> BTreeMap<TopicPartition, u64> {
        self.delivered
            .iter()
            .filter_map(|((t, p), &at)| {
                let hw = self.consumer.high_watermark(t, *p)?;
                Some(((t.clone(), *p), hw.saturating_sub(at)))
            })
            .collect()
    }

    /// The group's committed offsets, with their metadata, of `partitions` (from the
    /// coordinator); partitions without a committed offset are missing.
    pub fn committed(&mut self, partitions: &[TopicPartition]) -> Result<Offsets, ClientError> {
        self.fetch_committed(partitions.to_vec())
    }

    /// OffsetFetch from the coordinator, found again (within the request timeout) when it
    /// moved or the connection to it broke.
    fn fetch_committed(&mut self, partitions: Vec<TopicPartition>) -> Result<Offsets, ClientError> {
        let deadline = Instant::now() + self.client.config().request_timeout;
        let got = loop {
            let r = self.coordinator().and_then(|at| {
                self.client
                    .fetch_offsets(at, &self.cfg.group, partitions.clone())
            });
            match r {
                Err(e) if coordinator_error(&e) && Instant::now() < deadline => {
                    lock(&self.shared).coordinator = None;
                    std::thread::sleep(RETRY_BACKOFF);
                }
                r => break r?,
            }
        };
        Ok(got
            .into_iter()
            .filter_map(|(t, p, o, metadata)| {
                Some((
                    (t, p),
                    OffsetAndMetadata {
                        offset: o?,
                        metadata,
                    },
                ))
            })
            .collect())
    }

    /// Records of the owned partitions, waiting up to `timeout` when there are none. Joins
    /// the group first when needed; rebalances happen here, callbacks included.
    pub fn poll(&mut self, timeout: Duration) -> Result<Records, ClientError> {
        let deadline = Instant::now() + timeout;
        if self.topics.is_empty() {
            return Err(ClientError::Invalid("poll before subscribe".into()));
        }
        self.ensure_member()?;
        if self.cfg.delivery == Delivery::AtLeastOnce
            && self.last_auto_commit.elapsed() >= self.cfg.auto_commit_interval
        {
            self.last_auto_commit = Instant::now();
            // Asynchronous: its outcome matters only as "committed up to here or earlier".
            let _ = self.commit_async();
        }
        let records = match self.held.take() {
            Some(r) => r,
            None => self
                .consumer
                .poll(deadline.saturating_duration_since(Instant::now()))?,
        };
        if records.is_empty() {
            return Ok(records);
        }
        if self.cfg.delivery == Delivery::AtMostOnce {
            let offsets = records
                .positions()
                .map(|(t, p, at)| ((t.to_string(), p), OffsetAndMetadata::new(at)))
                .collect();
            if let Err(e) = self.commit_now(offsets) {
                // Not committed, so not handed out: after the rebalance they go out if the
                // partition stayed here, else its next owner reads them.
                self.held = Some(records);
                return if rebalance_error(&e) {
                    Ok(Records::default())
                } else {
                    Err(e)
                };
            }
        }
        for (t, p, at) in records.positions() {
            self.delivered.insert((t.to_string(), p), at);
        }
        Ok(records)
    }

    /// Commits the positions of every record handed out so far and waits for it.
    pub fn commit_sync(&mut self) -> Result<(), ClientError> {
        let offsets = self.delivered_offsets(None);
        self.commit_now(offsets)
    }

    /// Commits the positions of every record handed out so far, in the background; commits
    /// are sent in the order they were asked for.
    pub fn commit_async(&mut self) -> PendingCommit {
        let offsets = self.delivered_offsets(None);
        self.send_commit(offsets)
    }

    /// Commits explicit offsets (the next offset to read of each partition, with its
    /// metadata) and waits. A refused commit (e.g. OFFSET_METADATA_TOO_LARGE) stores none of
    /// them: the previous commits stay.
    pub fn commit_offsets_sync(&mut self, offsets: &Offsets) -> Result<(), ClientError> {
        self.commit_now(offsets.clone())
    }

    /// Commits explicit offsets in the background, in order with the other commits.
    pub fn commit_offsets_async(&mut self, offsets: &Offsets) -> PendingCommit {
        self.send_commit(offsets.clone())
    }

    /// Leaves the group: at-least-once commits what was handed out, the listener sees the
    /// partitions revoked, and the coordinator reassigns them at once (a static member does
    /// not leave: its instance keeps the assignment until its session times out).
    pub fn close(mut self) -> Result<(), ClientError> {
        self.shutdown()
    }

    fn delivered_offsets(&self, only: Option<&BTreeSet<TopicPartition>>) -> Offsets {
        self.delivered
            .iter()
            .filter(|(tp, _)| only.is_none_or(|o| o.contains(*tp)))
            .map(|(tp, &at)| (tp.clone(), OffsetAndMetadata::new(at)))
            .collect()
    }

    fn send_commit(&mut self, offsets: Offsets) -> PendingCommit {
        let (done, rx) = flume::bounded(1);
        if offsets.is_empty() {
            let _ = done.send(Ok(()));
        } else if let Some(tx) = &self.commits {
            if let Err(flume::SendError(job)) = tx.send(CommitJob { offsets, done }) {
                let _ = job.done.send(Err(ClientError::Invalid(
                    "the group consumer stopped".into(),
                )));
            }
        }
        PendingCommit(rx)
    }

    fn commit_now(&mut self, offsets: Offsets) -> Result<(), ClientError> {
        self.send_commit(offsets).wait()
    }

    fn coordinator(&mut self) -> Result<SocketAddr, ClientError> {
        if let Some(at) = lock(&self.shared).coordinator {
            return Ok(at);
        }
        let at = self.client.find_coordinator(&self.cfg.group)?;
        lock(&self.shared).coordinator = Some(at);
        Ok(at)
    }

    fn callback(&mut self, f: impl FnOnce(&mut dyn RebalanceListener)) {
        if let Some(l) = self.listener.as_mut() {
            f(l.as_mut());
        }
    }

    /// Drops partitions from the assignment (and their fetched, undelivered records).
    fn release(&mut self, partitions: &BTreeSet<TopicPartition>) -> Result<(), ClientError> {
        let list: Vec<TopicPartition> = partitions.iter().cloned().collect();
        self.consumer.unassign(&list)?;
        for tp in &list {
            self.owned.remove(tp);
            self.delivered.remove(tp);
        }
        if let Some(held) = self.held.as_mut() {
            held.retain_partitions(|t, p| !partitions.contains(&(t.to_string(), p)));
        }
        Ok(())
    }

    /// An orderly revocation: at-least-once commits first, then the listener, then release.
    fn revoke(&mut self, partitions: BTreeSet<TopicPartition>) -> Result<(), ClientError> {
        if partitions.is_empty() {
            return Ok(());
        }
        if self.cfg.delivery == Delivery::AtLeastOnce {
            let offsets = self.delivered_offsets(Some(&partitions));
            if let Err(e) = self.commit_now(offsets) {
                log::warn!(
                    "group {}: commit before revoking failed ({e}); the next owner re-reads \
                     from the last commit",
                    self.cfg.group
                );
            }
        }
        let list: Vec<TopicPartition> = partitions.iter().cloned().collect();
        self.callback(|l| l.on_revoked(&list));
        self.release(&partitions)
    }

    /// Joins or rejoins when the group or this member needs it.
    fn ensure_member(&mut self) -> Result<(), ClientError> {
        let fenced = lock(&self.shared).fenced.take();
        if let Some(code) = fenced {
            self.lose_all(code)?;
            let mut m = lock(&self.shared);
            m.generation = None;
            if code == ErrorCode::FencedInstanceId {
                return Err(ClientError::broker(
                    code,
                    "another consumer took this group instance id",
                ));
            }
            if code == ErrorCode::UnknownMemberId {
                m.member_id.clear();
            }
        }
        if self.leader && self.last_metadata_check.elapsed() >= self.cfg.metadata_max_age {
            self.last_metadata_check = Instant::now();
            if self.client.refresh_metadata().is_ok() && self.counts() != self.partition_counts {
                log::info!(
                    "group {}: partition counts changed; rebalancing",
                    self.cfg.group
                );
                lock(&self.shared).rejoin = true;
            }
        }
        let needed = {
            let m = lock(&self.shared);
            m.generation.is_none() || m.rejoin
        };
        if needed {
            self.join()?;
        }
        Ok(())
    }

    /// The coordinator no longer counts this member in (removed, fenced, or a generation it
    /// left): every owned partition may belong to another member already, so they are lost
    /// (`on_lost`, nothing committed for them), not kept while the member rejoins.
    fn lose_all(&mut self, code: ErrorCode) -> Result<(), ClientError> {
        let lost = self.owned.clone();
        if lost.is_empty() {
            return Ok(());
        }
        let list: Vec<TopicPartition> = lost.iter().cloned().collect();
        log::warn!(
            "group {}: this member was removed ({code}); {} partitions lost",
            self.cfg.group,
            list.len()
        );
        self.callback(|l| l.on_lost(&list));
        self.release(&lost)
    }

    /// Partition counts of the subscribed topics in the cached metadata.
    fn counts(&self) -> BTreeMap<String, u32> {
        self.topics
            .iter()
            .filter_map(|t| Some((t.clone(), self.client.metadata().partitions(t).ok()?)))
            .collect()
    }

    /// One rebalance from this member's side: join, (as the leader) assign, sync, apply.
    fn join(&mut self) -> Result<(), ClientError> {
        let cooperative = self.cfg.cooperative();
        if !cooperative {
            // Eager: everything is given up before joining.
            self.revoke(self.owned.clone())?;
        } else if self.cfg.delivery == Delivery::AtLeastOnce {
            // Partitions that move resume where this member got to.
            let offsets = self.delivered_offsets(None);
            let _ = self.commit_now(offsets);
        }
        let wait = self.cfg.rebalance_timeout + JOIN_SLACK;
        let deadline = Instant::now() + wait + self.cfg.session_timeout;
        loop {
            if Instant::now() >= deadline {
                return Err(ClientError::Timeout(format!(
                    "could not join group '{}' within {:?}",
                    self.cfg.group,
                    wait + self.cfg.session_timeout
                )));
            }
            let at = match self.coordinator() {
                Ok(at) => at,
                Err(e) if coordinator_error(&e) => {
                    std::thread::sleep(RETRY_BACKOFF);
                    continue;
                }
                Err(e) => return Err(e),
            };
            let member_id = {
                let mut m = lock(&self.shared);
                m.generation = None;
                m.rejoin = false;
                m.fenced = None;
                m.member_id.clone()
            };
            let owned: Vec<TopicPartition> = if cooperative {
                self.owned.iter().cloned().collect()
            } else {
                Vec::new()
            };
            let metadata = Subscription {
                version: VERSION,
                topics: self.topics.clone(),
                owned,
                user_data: Vec::new(),
            }
            .encode();
            let req = JoinGroupRequest {
                group: self.cfg.group.clone(),
                member_id,
                group_instance_id: self.cfg.group_instance_id.clone(),
                session_timeout_ms: millis(self.cfg.session_timeout),
                rebalance_timeout_ms: millis(self.cfg.rebalance_timeout),
                protocol_type: CONSUMER_PROTOCOL_TYPE.into(),
                protocols: self
                    .cfg
                    .assignors
                    .iter()
                    .map(|a| (a.clone(), metadata.clone()))
                    .collect(),
            };
            let joined = match self.client.join_group(at, &req, wait) {
                Ok(j) => j,
                Err(e) => {
                    self.retry_or_fail(e)?;
                    continue;
                }
            };
            {
                let mut m = lock(&self.shared);
                m.member_id = joined.member_id.clone();
                m.generation = Some(joined.generation);
            }
            let revoked = match self.sync_and_apply(at, &joined, wait) {
                Ok(revoked) => revoked,
                Err(e) => {
                    // Not in this generation after all: the next attempt (or poll) joins
                    // again rather than carrying on with no or half an assignment.
                    lock(&self.shared).generation = None;
                    self.retry_or_fail(e)?;
                    continue;
                }
            };
            self.last_metadata_check = Instant::now();
            log::info!(
                "group {}: member {} generation {} owns {} partitions",
                self.cfg.group,
                joined.member_id,
                joined.generation,
                self.owned.len()
            );
            // Cooperative: partitions given up are handed out by one more round.
            if cooperative && revoked {
                continue;
            }
            return Ok(());
        }
    }

    /// The rest of a join once the coordinator answered it: (as the leader) assign, sync,
    /// apply. Returns whether anything was revoked.
    fn sync_and_apply(
        &mut self,
        at: SocketAddr,
        joined: &JoinGroupResponse,
        wait: Duration,
    ) -> Result<bool, ClientError> {
        self.leader = joined.leader == joined.member_id;
        let assignments = if self.leader {
            self.assign_as_leader(joined)?
        } else {
            Vec::new()
        };
        let sync = SyncGroupRequest {
            group: self.cfg.group.clone(),
            member_id: joined.member_id.clone(),
            group_instance_id: self.cfg.group_instance_id.clone(),
            generation: joined.generation,
            assignments,
        };
        let bytes = self.client.sync_group(at, &sync, wait)?;
        let assignment = MemberAssignment::decode(&bytes).map_err(|e| {
            ClientError::Invalid(format!("the group leader's assignment is unreadable: {e}"))
        })?;
        self.apply(assignment.partitions)
    }

    /// After a failed join, sync or apply: `Ok` to try again, `Err` when it cannot work.
    fn retry_or_fail(&mut self, e: ClientError) -> Result<(), ClientError> {
        match e.code() {
            Some(code @ ErrorCode::UnknownMemberId) => {
                lock(&self.shared).member_id.clear();
                self.lose_all(code)
            }
            Some(code @ ErrorCode::IllegalGeneration) => self.lose_all(code),
            Some(ErrorCode::RebalanceInProgress) => Ok(()),
            _ if coordinator_error(&e) => {
                lock(&self.shared).coordinator = None;
                std::thread::sleep(RETRY_BACKOFF);
                Ok(())
            }
            _ => Err(e),
        }
    }

    /// The leader's job: every member's partitions, by the chosen assignor.
    fn assign_as_leader(
        &mut self,
        joined: &JoinGroupResponse,
    ) -> Result<Vec<(String, Vec<u8>)>, ClientError> {
        let assignor = assignor::by_name(&joined.protocol).ok_or_else(|| {
            ClientError::Invalid(format!(
                "the group chose unknown assignor '{}'",
                joined.protocol
            ))
        })?;
        let members: Vec<MemberSubscription> = joined
            .members
            .iter()
            .map(|(id, _, meta)| {
                let sub = Subscription::decode(meta).unwrap_or_else(|e| {
                    log::warn!("group {}: member {id} sent an unreadable subscription ({e}); it gets nothing", self.cfg.group);
                    Subscription::default()
                });
                MemberSubscription {
                    member_id: id.clone(),
                    topics: sub.topics,
                    owned: sub.owned,
                }
            })
            .collect();
        self.client.refresh_metadata()?;
        let topics: BTreeSet<&String> = members.iter().flat_map(|m| &m.topics).collect();
        let partitions: BTreeMap<String, u32> = topics
            .into_iter()
            .filter_map(|t| Some((t.clone(), self.client.metadata().partitions(t).ok()?)))
            .collect();
        let target = assignor.assign(&members, &partitions);
        let given = if joined.protocol == "cooperative-sticky" {
            assignor::without_unrevoked(&members, &target)
        } else {
            target
        };
        Ok(given
            .into_iter()
            .map(|(id, partitions)| {
                let a = MemberAssignment {
                    version: VERSION,
                    partitions,
                    user_data: Vec::new(),
                };
                (id, a.encode())
            })
            .collect())
    }

    /// Takes a new assignment: revokes what left, positions what came. Returns whether
    /// anything was revoked.
    fn apply(&mut self, partitions: Vec<TopicPartition>) -> Result<bool, ClientError> {
        let new: BTreeSet<TopicPartition> = partitions
            .into_iter()
            .filter(|(t, _)| self.topics.contains(t))
            .collect();
        let revoked: BTreeSet<TopicPartition> = self.owned.difference(&new).cloned().collect();
        let any_revoked = !revoked.is_empty();
        self.revoke(revoked)?;
        let added: Vec<TopicPartition> = new.difference(&self.owned).cloned().collect();
        if !added.is_empty() {
            // Where every added partition starts is settled before any is taken, and a
            // failure part way gives back those taken: none is ever half-assigned (owned and
            // fetched, but never announced to the listener).
            let committed = self.fetch_committed(added.clone())?;
            let mut starts = Vec::with_capacity(added.len());
            for (topic, partition) in &added {
                let offset = committed.get(&(topic.clone(), *partition));
                let from = match (offset, self.cfg.consumer.auto_offset_reset) {
                    (Some(o), _) => StartFrom::Offset(o.offset),
                    (None, OffsetReset::Earliest) => StartFrom::Beginning,
                    (None, OffsetReset::Latest) => StartFrom::End,
                    (None, OffsetReset::Error) => {
                        return Err(ClientError::Invalid(format!(
                            "{topic}-{partition}: group '{}' has no committed offset and the \
                             offset reset policy is 'error'",
                            self.cfg.group
                        )))
                    }
                };
                starts.push(((topic.clone(), *partition), from));
            }
            let mut taken: Vec<TopicPartition> = Vec::with_capacity(starts.len());
            for ((topic, partition), from) in starts {
                if let Err(e) = self.consumer.assign(&topic, Some(vec![partition]), from) {
                    let _ = self.consumer.unassign(&taken);
                    for tp in &taken {
                        self.owned.remove(tp);
                        self.delivered.remove(tp);
                    }
                    return Err(e);
                }
                let start = self.consumer.position(&topic, partition).unwrap_or(0);
                self.delivered.insert((topic.clone(), partition), start);
                self.owned.insert((topic.clone(), partition));
                taken.push((topic, partition));
            }
            self.callback(|l| l.on_assigned(&taken));
        }
        self.partition_counts = self.counts();
        Ok(any_revoked)
    }

    fn shutdown(&mut self) -> Result<(), ClientError> {
        if self.closed {
            return Ok(());
        }
        self.closed = true;
        let (in_group, member) = {
            let m = lock(&self.shared);
            (m.generation.is_some(), m.member_id.clone())
        };
        let mut result = Ok(());
        if in_group {
            let owned = self.owned.clone();
            if self.cfg.delivery == Delivery::AtLeastOnce {
                let offsets = self.delivered_offsets(Some(&owned));
                result = self.commit_now(offsets);
            }
            let list: Vec<TopicPartition> = owned.into_iter().collect();
            self.callback(|l| l.on_revoked(&list));
        }
        // Also out of a generation (a join that failed part way): the coordinator may still
        // count this member, and would wait for its session to expire.
        if self.cfg.group_instance_id.is_none() && !member.is_empty() {
            if let Ok(at) = self.coordinator() {
                let _ = self.client.leave_group(at, &self.cfg.group, &member);
            }
        }
        self.commits.take();
        self.heartbeats.take();
        for t in self.background.drain(..) {
            let _ = t.join();
        }
        result
    }
}

impl Drop for GroupConsumer {
    fn drop(&mut self) {
        if let Err(e) = self.shutdown() {
            log::warn!("group {}: closing: {e}", self.cfg.group);
        }
    }
}

fn millis(d: Duration) -> u32 {
    d.as_millis().min(u128::from(u32::MAX)) as u32
}

/// The coordinator moved or is not reachable: find it again and retry.
fn coordinator_error(e: &ClientError) -> bool {
    match e {
        ClientError::Broker { code, .. } => matches!(
            code,
            ErrorCode::NotCoordinator
                | ErrorCode::CoordinatorNotAvailable
                | ErrorCode::CoordinatorLoadInProgress
                | ErrorCode::RequestTimedOut
        ),
        // The coordinator closed the connection (it restarted): a new one may work.
        ClientError::Frame {
            source: FrameError::Closed,
            ..
        } => true,
        _ => e.is_retriable(),
    }
}

/// The group is rebalancing or dropped this member: the next poll rejoins.
fn rebalance_error(e: &ClientError) -> bool {
    matches!(
        e.code(),
        Some(
            ErrorCode::RebalanceInProgress
                | ErrorCode::IllegalGeneration
                | ErrorCode::UnknownMemberId
        )
    )
}

/// A background thread's state: the heartbeat thread, or the thread that sends commits in the
/// order they were asked for. Each has its own connection.
struct Background {
    client: Client,
    group: String,
    /// The static instance id, if any (a heartbeat names it, to learn it was taken over).
    instance: Option<String>,
    shared: Arc<Mutex<Membership>>,
    interval: Duration,
}

impl Background {
    /// Sends commits until the consumer closes.
    fn commits(mut self, jobs: flume::Receiver<CommitJob>) {
        while let Ok(job) = jobs.recv() {
            let r = self.commit(job.offsets);
            let _ = job.done.send(r);
        }
    }

    /// Heartbeats every `interval` until `stop` is dropped.
    fn heartbeats(mut self, stop: flume::Receiver<()>) {
        loop {
            match stop.recv_timeout(self.interval) {
                Err(flume::RecvTimeoutError::Timeout) => self.heartbeat(),
                _ => return,
            }
        }
    }

    fn coordinator(&mut self) -> Result<SocketAddr, ClientError> {
        if let Some(at) = lock(&self.shared).coordinator {
            return Ok(at);
        }
        let at = self.client.find_coordinator(&self.group)?;
        lock(&self.shared).coordinator = Some(at);
        Ok(at)
    }

    /// What a refusal from the coordinator means for the membership.
    fn note_refusal(&self, e: &ClientError, member_id: &str, generation: u32) {
        let mut m = lock(&self.shared);
        // A refusal for a generation this member already left is old news.
        if m.generation != Some(generation) || m.member_id != member_id {
            return;
        }
        match e.code() {
            Some(ErrorCode::RebalanceInProgress) => m.rejoin = true,
            Some(
                c @ (ErrorCode::UnknownMemberId
                | ErrorCode::IllegalGeneration
                | ErrorCode::FencedInstanceId),
            ) => m.fenced = Some(c),
            _ if coordinator_error(e) => m.coordinator = None,
            _ => {}
        }
    }

    fn heartbeat(&mut self) {
        let (member_id, generation) = {
            let m = lock(&self.shared);
            match m.generation {
                Some(g) => (m.member_id.clone(), g),
                None => return,
            }
        };
        let at = match self.coordinator() {
            Ok(at) => at,
            Err(_) => return,
        };
        if let Err(e) = self.client.heartbeat_as(
            at,
            &self.group,
            &member_id,
            self.instance.as_deref(),
            generation,
        ) {
            self.note_refusal(&e, &member_id, generation);
        }
    }

    fn commit(&mut self, offsets: Offsets) -> Result<(), ClientError> {
        let offsets: Vec<(String, u32, u64, String)> = offsets
            .into_iter()
            .map(|((t, p), o)| (t, p, o.offset, o.metadata))
            .collect();
        let deadline = Instant::now() + self.client.config().request_timeout;
        loop {
            let (member_id, generation) = {
                let m = lock(&self.shared);
                match m.generation {
                    Some(g) => (m.member_id.clone(), g),
                    None => {
                        return Err(ClientError::broker(
                            ErrorCode::RebalanceInProgress,
                            "the member is not in a generation of the group",
                        ))
                    }
                }
            };
            let result = self.coordinator().and_then(|at| {
                self.client.commit_offsets_as(
                    at,
                    &self.group,
                    &member_id,
                    self.instance.as_deref(),
                    generation as i32,
                    offsets.clone(),
                )
            });
            match result {
                Ok(()) => return Ok(()),
                Err(e) if coordinator_error(&e) && Instant::now() < deadline => {
                    lock(&self.shared).coordinator = None;
                    std::thread::sleep(RETRY_BACKOFF);
                }
                Err(e) => {
                    self.note_refusal(&e, &member_id, generation);
                    return Err(e);
                }
            }
        }
    }
}
