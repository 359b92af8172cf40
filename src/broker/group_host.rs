//! The groups a shard coordinates: the shell around [`crate::group::Group`]. A group lives
//! on the shard that owns its partition of `__consumer_offsets` (`murmur2(group) % N`);
//! requests park on a channel until the state machine's `Action` for them comes out.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;

use super::offsets::Position;
use crate::controller::metadata::ClusterMetadata;
use crate::group::consumer_group::{
    ConsumerGroup, ConsumerGroupConfig, ConsumerGroupDescription, Heartbeat, HeartbeatReply, Topics,
};
use crate::group::coordinator::{
    Action, Group, GroupConfig, GroupError, JoinRequest, JoinResult, MemberDescription,
    SyncRequest, Token,
};
use crate::group::offsets_log::{snapshot, CommitRecord, PartitionOffset};
use crate::protocol::ErrorCode;

/// The internal topic whose partitions place group coordinators.
pub const OFFSETS_TOPIC: &str = "__consumer_offsets";

/// The partition of `__consumer_offsets` that hosts `group`.
pub fn offsets_partition(group: &str, partitions: u32) -> u32 {
    crate::partitioner::partition_for_key(group.as_bytes(), partitions)
}

/// Where a group's coordinator is, from the metadata: the leader of the group's
/// `__consumer_offsets` partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CoordinatorPlace {
    /// The leading broker; 0 while the partition has no leader.
    pub broker: u32,
    pub shard: u32,
    /// The group's offsets partition and the topic's partition count.
    pub partition: u32,
    pub partitions: u32,
    pub leader_epoch: u32,
}

/// The coordinator of `group`, from the metadata (`None`: no offsets topic yet).
pub fn coordinator_of(md: &ClusterMetadata, group: &str) -> Option<CoordinatorPlace> {
    place_in(md, OFFSETS_TOPIC, |n| offsets_partition(group, n))
}

/// The leader of the partition of internal `topic` that `pick` chooses from its partition
/// count (`None`: no such topic yet).
pub fn place_in(
    md: &ClusterMetadata,
    topic: &str,
    pick: impl FnOnce(u32) -> u32,
) -> Option<CoordinatorPlace> {
    let t = md.topic(topic)?;
    let partitions = t.partitions.len() as u32;
    let p = t.partitions.get(pick(partitions) as usize)?;
    Some(CoordinatorPlace {
        broker: p.leader,
        shard: p.shard,
        partition: p.partition,
        partitions,
        leader_epoch: p.leader_epoch,
    })
}

/// Which protocol a group id is used with (ListGroups' `group_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupType {
    /// JoinGroup/SyncGroup, or only committed offsets.
    Classic,
    /// KIP-848: ConsumerGroupHeartbeat.
    Consumer,
}

impl GroupType {
    pub fn name(self) -> &'static str {
        match self {
            GroupType::Classic => "classic",
            GroupType::Consumer => "consumer",
        }
    }
}

/// One group as DescribeGroups shows it (a consumer group: its state, "consumer", its
/// assignor and group epoch, members without assignment bytes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupSummary {
    pub group: String,
    pub group_type: GroupType,
    /// Kafka's state name: Empty, PreparingRebalance, CompletingRebalance, Stable or Dead.
    pub state: String,
    /// e.g. "consumer"; empty when no member ever joined.
    pub protocol_type: String,
    /// The assignor chosen for the current generation; empty when there is none.
    pub protocol: String,
    pub generation: u32,
    /// Member id of the group leader; empty when there is none.
    pub leader: String,
    pub members: Vec<MemberDescription>,
}

/// A parked join or sync, with the group it waits on.
enum Waiter {
    Join(String, flume::Sender<Result<JoinResult, GroupError>>),
    Sync(String, flume::Sender<Result<Vec<u8>, GroupError>>),
}

impl Waiter {
    fn group(&self) -> &str {
        match self {
            Waiter::Join(g, _) | Waiter::Sync(g, _) => g,
        }
    }

    fn fail(self, e: GroupError) {
        match self {
            Waiter::Join(_, tx) => drop(tx.send(Err(e))),
            Waiter::Sync(_, tx) => drop(tx.send(Err(e))),
        }
    }
}

/// Whether this shard coordinates the groups of one `__consumer_offsets` partition it leads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Coordination {
    /// Leader at this epoch, reading the committed offsets from the partition: its groups
    /// get COORDINATOR_LOAD_IN_PROGRESS.
    Loading { epoch: u32 },
    /// Leader at this epoch with every committed offset loaded: it answers for its groups.
    Active { epoch: u32 },
}

/// Groups coordinated by one shard.
pub struct GroupHost {
    cfg: GroupConfig,
    /// `--max-groups-per-shard`: groups (with members or committed offsets) held at once.
    max_groups: usize,
    /// Per offsets partition: commit records appended since its last compaction.
    since_compaction: RefCell<HashMap<u32, usize>>,
    /// Per offsets partition: base offsets of commits appended but not yet durable. A
    /// compaction never truncates above the lowest of them.
    in_flight: RefCell<HashMap<u32, std::collections::BTreeSet<u64>>>,
    compacting: RefCell<std::collections::HashSet<u32>>,
    /// The offsets partitions this shard leads, and whether their groups are loaded.
    coordination: RefCell<HashMap<u32, Coordination>>,
    /// Fired when a load ends.
    loaded: event_listener::Event,
    /// Classic groups, and the committed offsets of every group (a consumer group's too:
    /// its entry here has no members).
    groups: RefCell<HashMap<String, Group>>,
    consumer_cfg: ConsumerGroupConfig,
    /// KIP-848 consumer groups. An id is in here or has classic members, never both.
    consumer_groups: RefCell<HashMap<String, ConsumerGroup>>,
    waiters: RefCell<HashMap<Token, Waiter>>,
    next_token: Cell<Token>,
    /// Per offsets partition and producer id: offsets a transaction committed
    /// (TxnOffsetCommit), durable in the log but the group's only once the transaction's
    /// commit marker lands on that partition (dropped on its abort marker).
    txn_offsets: RefCell<HashMap<u32, HashMap<i64, TxnOffsets>>>,
}

/// One producer's pending transactional offsets on one offsets partition: group -> offsets,
/// the latest per topic partition.
type TxnOffsets = HashMap<String, Vec<PartitionOffset>>;

/// A value that differs between runs of the broker (and between its shards): the wall clock
/// hashed with std's randomly keyed hasher.
fn fresh_incarnation() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    h.write_u128(now);
    h.finish()
}

impl GroupHost {
    /// The groups of one coordinator run: `cfg.incarnation` is replaced by a fresh value, so
    /// member ids never repeat those of an earlier run.
    pub fn new(cfg: GroupConfig, max_groups: usize) -> GroupHost {
        GroupHost {
            cfg: GroupConfig {
                incarnation: fresh_incarnation(),
                ..cfg
            },
            max_groups,
            since_compaction: RefCell::new(HashMap::new()),
            in_flight: RefCell::new(HashMap::new()),
            compacting: RefCell::new(std::collections::HashSet::new()),
            coordination: RefCell::new(HashMap::new()),
            loaded: event_listener::Event::new(),
            groups: RefCell::new(HashMap::new()),
            consumer_cfg: ConsumerGroupConfig {
                max_members: cfg.max_members,
                ..ConsumerGroupConfig::default()
            },
            consumer_groups: RefCell::new(HashMap::new()),
            waiters: RefCell::new(HashMap::new()),
            next_token: Cell::new(1),
            txn_offsets: RefCell::new(HashMap::new()),
        }
    }

    /// The settings of consumer groups (`--group-consumer-*`); member ids keep this run's
    /// incarnation.
    pub fn with_consumer_config(mut self, c: ConsumerGroupConfig) -> GroupHost {
        self.consumer_cfg = ConsumerGroupConfig {
            incarnation: self.cfg.incarnation,
            ..c
        };
        self
    }

    fn token(&self) -> Token {
        let t = self.next_token.get();
        self.next_token.set(t + 1);
        t
    }

    fn deliver(&self, actions: Vec<Action>) {
        let mut waiters = self.waiters.borrow_mut();
        for a in actions {
            match a {
                Action::JoinReply(t, r) => {
                    if let Some(Waiter::Join(_, tx)) = waiters.remove(&t) {
                        let _ = tx.send(r);
                    }
                }
                Action::SyncReply(t, r) => {
                    if let Some(Waiter::Sync(_, tx)) = waiters.remove(&t) {
                        let _ = tx.send(r);
                    }
                }
            }
        }
    }

    /// JoinGroup; the receiver answers when the rebalance completes.
    pub fn join(
        &self,
        now_ms: u64,
        group: &str,
        req: JoinRequest,
    ) -> flume::Receiver<Result<JoinResult, GroupError>> {
        let (tx, rx) = flume::bounded(1);
        let token = self.token();
        let waiter = Waiter::Join(group.to_string(), tx);
        self.waiters.borrow_mut().insert(token, waiter);
        let consumer_members = self
            .consumer_groups
            .borrow()
            .get(group)
            .map(ConsumerGroup::member_count);
        match consumer_members {
            Some(0) => {
                // An empty consumer group becomes a classic one (Kafka converts it too);
                // its committed offsets stay.
                self.consumer_groups.borrow_mut().remove(group);
            }
            Some(_) => {
                let e = GroupError {
                    code: ErrorCode::InconsistentGroupProtocol,
                    message: format!(
                        "group {group:?} is a consumer group (group.protocol=consumer) with members"
                    ),
                };
                self.deliver(vec![Action::JoinReply(token, Err(e))]);
                return rx;
            }
            None => {}
        }
        if let Err(e) = self.check_room(group) {
            // GROUP_MAX_SIZE_REACHED: the refusal JoinGroup clients report as such, not retry.
            let e = GroupError {
                code: crate::protocol::ErrorCode::GroupMaxSizeReached,
                ..e
            };
            self.deliver(vec![Action::JoinReply(token, Err(e))]);
            return rx;
        }
        let actions = {
            let mut groups = self.groups.borrow_mut();
            let g = groups
                .entry(group.to_string())
                .or_insert_with(|| Group::new(group, self.cfg.clone()));
            let actions = g.join(now_ms, req, token);
            // A refused first join leaves nothing behind: made-up group ids cost no memory.
            if g.member_ids().is_empty() && !g.has_offsets() {
                groups.remove(group);
            }
            actions
        };
        self.deliver(actions);
        rx
    }

    /// SyncGroup; the receiver answers once the leader's assignment is in.
    pub fn sync(
        &self,
        now_ms: u64,
        group: &str,
        req: SyncRequest,
    ) -> Result<flume::Receiver<Result<Vec<u8>, GroupError>>, GroupError> {
        let (tx, rx) = flume::bounded(1);
        let token = self.token();
        let actions = {
            let mut groups = self.groups.borrow_mut();
            let g = groups.get_mut(group).ok_or_else(|| unknown_group(group))?;
            let waiter = Waiter::Sync(group.to_string(), tx);
            self.waiters.borrow_mut().insert(token, waiter);
            g.sync(now_ms, req, token)
        };
        self.deliver(actions);
        Ok(rx)
    }

    pub fn heartbeat(
        &self,
        now_ms: u64,
        group: &str,
        member_id: &str,
        instance: Option<&str>,
        generation: u32,
    ) -> Result<(), GroupError> {
        let mut groups = self.groups.borrow_mut();
        let g = groups.get_mut(group).ok_or_else(|| unknown_group(group))?;
        g.heartbeat(now_ms, member_id, instance, generation)
    }

    pub fn leave(&self, now_ms: u64, group: &str, member_id: &str) -> Result<(), GroupError> {
        let actions = {
            let mut groups = self.groups.borrow_mut();
            let g = groups.get_mut(group).ok_or_else(|| unknown_group(group))?;
            g.leave(now_ms, member_id)?
        };
        self.deliver(actions);
        Ok(())
    }

    /// The member id a static instance id of `group` belongs to now.
    pub fn member_of_instance(&self, group: &str, instance: &str) -> Option<String> {
        self.groups
            .borrow()
            .get(group)
            .and_then(|g| g.member_of_instance(instance).map(str::to_string))
    }

    /// (group, state) of every group this shard coordinates, sorted.
    pub fn list(&self) -> Vec<(String, String)> {
        let consumer = self.consumer_groups.borrow();
        let mut out: Vec<_> = self
            .groups
            .borrow()
            .values()
            .filter(|g| !consumer.contains_key(&g.id))
            .map(|g| (g.id.clone(), g.state().name().to_string()))
            .chain(
                consumer
                    .values()
                    .map(|g| (g.id.clone(), g.state().name().to_string())),
            )
            .collect();
        out.sort();
        out
    }

    /// DescribeGroups for one group this shard coordinates. A group never seen here (no
    /// member joined, no offset committed) is described as Kafka does: state "Dead", no
    /// members, no error.
    pub fn describe(&self, group: &str) -> GroupSummary {
        if let Some(cg) = self.consumer_groups.borrow().get(group) {
            let d = cg.describe();
            return GroupSummary {
                group: group.to_string(),
                group_type: GroupType::Consumer,
                state: d.state.name().to_string(),
                protocol_type: "consumer".into(),
                protocol: d.assignor,
                generation: d.group_epoch.max(0) as u32,
                leader: String::new(),
                members: d
                    .members
                    .into_iter()
                    .map(|m| MemberDescription {
                        member_id: m.member_id,
                        group_instance_id: m.instance_id,
                        client_id: m.client_id,
                        assignment: Vec::new(),
                    })
                    .collect(),
            };
        }
        let groups = self.groups.borrow();
        let Some(g) = groups.get(group) else {
            return GroupSummary {
                group: group.to_string(),
                group_type: GroupType::Classic,
                state: "Dead".into(),
                protocol_type: String::new(),
                protocol: String::new(),
                generation: 0,
                leader: String::new(),
                members: Vec::new(),
            };
        };
        GroupSummary {
            group: group.to_string(),
            group_type: GroupType::Classic,
            state: g.state().name().to_string(),
            protocol_type: g.protocol_type().unwrap_or_default().to_string(),
            protocol: g.protocol().unwrap_or_default().to_string(),
            generation: g.generation(),
            leader: g.leader().unwrap_or_default().to_string(),
            members: g.describe_members(),
        }
    }

    /// Expires sessions and rebalance deadlines of every group.
    pub fn tick(&self, now_ms: u64) {
        let mut actions = Vec::new();
        for g in self.groups.borrow_mut().values_mut() {
            let (a, expired) = g.tick(now_ms);
            for id in expired {
                log::info!("group {}: member {id} missed its session timeout", g.id);
            }
            actions.extend(a);
        }
        self.deliver(actions);
        for g in self.consumer_groups.borrow_mut().values_mut() {
            for (id, why) in g.tick(now_ms) {
                log::info!(
                    "consumer group {}: member {id} removed ({why:?} timeout)",
                    g.id
                );
            }
        }
    }

    /// Forgets a waiter whose request gave up (timed out), so it does not pile up.
    pub fn abandon_waiters(&self) {
        self.waiters.borrow_mut().retain(|_, w| match w {
            Waiter::Join(_, tx) => !tx.is_disconnected(),
            Waiter::Sync(_, tx) => !tx.is_disconnected(),
        });
    }
}

/// KIP-848 consumer groups.
impl GroupHost {
    /// ConsumerGroupHeartbeat. A group id with classic members is refused
    /// (GROUP_ID_NOT_FOUND, as Kafka); one with only committed offsets becomes a consumer
    /// group. `partitions` gives a topic's partition count from the metadata.
    pub fn consumer_heartbeat(
        &self,
        now_ms: u64,
        group: &str,
        req: Heartbeat,
        topics: &dyn Topics,
    ) -> Result<HeartbeatReply, GroupError> {
        if self
            .groups
            .borrow()
            .get(group)
            .is_some_and(|g| !g.member_ids().is_empty())
        {
            return Err(GroupError {
                code: ErrorCode::GroupIdNotFound,
                message: format!("Group {group} is not a consumer group"),
            });
        }
        let mut consumer = self.consumer_groups.borrow_mut();
        let created = !consumer.contains_key(group);
        if created {
            if req.member_epoch != 0 {
                // Kafka keeps membership in its log; rill rebuilds it from members
                // rejoining (after a restart or a coordinator move): a member of a group
                // this coordinator does not know rejoins.
                return Err(GroupError {
                    code: ErrorCode::UnknownMemberId,
                    message: format!(
                        "Member {} is not a member of group {group}: rejoin",
                        req.member_id
                    ),
                });
            }
            drop(consumer);
            self.check_room(group).map_err(|e| GroupError {
                code: ErrorCode::GroupMaxSizeReached,
                ..e
            })?;
            consumer = self.consumer_groups.borrow_mut();
        }
        let g = consumer
            .entry(group.to_string())
            .or_insert_with(|| ConsumerGroup::new(group, self.consumer_cfg.clone()));
        let out = g.heartbeat(now_ms, req, topics);
        // A refused first heartbeat leaves nothing behind.
        if created && g.is_empty() {
            consumer.remove(group);
        }
        out
    }

    /// ConsumerGroupDescribe: GROUP_ID_NOT_FOUND for an unknown or classic group.
    pub fn describe_consumer(&self, group: &str) -> Result<ConsumerGroupDescription, GroupError> {
        self.consumer_groups
            .borrow()
            .get(group)
            .map(ConsumerGroup::describe)
            .ok_or_else(|| GroupError {
                code: ErrorCode::GroupIdNotFound,
                message: if self.groups.borrow().contains_key(group) {
                    format!("Group {group} is not a consumer group")
                } else {
                    format!("Group {group} not found.")
                },
            })
    }

    /// Whether `group` is a consumer group here.
    pub fn group_type(&self, group: &str) -> GroupType {
        if self.consumer_groups.borrow().contains_key(group) {
            GroupType::Consumer
        } else {
            GroupType::Classic
        }
    }

    /// DeleteGroups of an empty consumer group: its membership record goes (its offsets go
    /// through `remove_offsets`).
    pub fn forget_empty_consumer_group(&self, group: &str) {
        let mut consumer = self.consumer_groups.borrow_mut();
        if consumer.get(group).is_some_and(ConsumerGroup::is_empty) {
            consumer.remove(group);
        }
    }

    /// OffsetFetch v9+ with a member id and epoch: checked against a consumer group
    /// (Kafka's `validateOffsetFetch`); classic groups are not checked.
    pub fn check_fetch(
        &self,
        group: &str,
        member_id: Option<&str>,
        member_epoch: i32,
    ) -> Result<(), GroupError> {
        match self.consumer_groups.borrow().get(group) {
            Some(cg) => cg.validate_offset_fetch(member_id, member_epoch),
            None => Ok(()),
        }
    }

    /// Topic metadata changed: every consumer group re-reads its subscribed topics (new
    /// partitions, created or deleted topics bump its epoch and recompute its target).
    pub fn topics_changed(&self, topics: &dyn Topics) {
        for g in self.consumer_groups.borrow_mut().values_mut() {
            g.topics_changed(topics);
        }
    }
}

fn unknown_group(group: &str) -> GroupError {
    GroupError {
        code: crate::protocol::ErrorCode::UnknownMemberId,
        message: format!("group {group:?} has no members here"),
    }
}

impl GroupHost {
    /// Validates a commit against the group; a group not known yet is checked as an empty
    /// one (commits from outside a group, as reset-offsets does) and created only when the
    /// commit is stored.
    pub fn check_commit(
        &self,
        group: &str,
        member_id: &str,
        instance: Option<&str>,
        generation: i32,
        offsets: &[PartitionOffset],
    ) -> Result<(), GroupError> {
        if let Some(cg) = self.consumer_groups.borrow().get(group) {
            // A consumer group: the generation field carries the member epoch (KIP-848).
            cg.validate_offset_commit(member_id, generation)?;
            return match self.groups.borrow().get(group) {
                Some(g) => g.check_offset_limits(offsets),
                None => {
                    Group::new(group, self.cfg.clone()).check_offset_limits(offsets)?;
                    self.check_room(group)
                }
            };
        }
        match self.groups.borrow().get(group) {
            Some(g) => g.check_commit(member_id, instance, generation, offsets),
            None => {
                Group::new(group, self.cfg.clone())
                    .check_commit(member_id, instance, generation, offsets)?;
                // Room for the group it creates (INVALID_COMMIT_OFFSET_SIZE, as a commit
                // past the per-group bound: the commit cannot be stored, not retriable).
                self.check_room(group)
            }
        }
    }

    /// Whether a group not held yet may be created: `--max-groups-per-shard`. Refusals carry
    /// INVALID_COMMIT_OFFSET_SIZE; a join turns it into GROUP_MAX_SIZE_REACHED.
    fn check_room(&self, group: &str) -> Result<(), GroupError> {
        let groups = self.groups.borrow();
        let consumer = self.consumer_groups.borrow();
        // Ids held: classic or offsets entries, plus consumer groups without offsets yet.
        let held = groups.len() + consumer.keys().filter(|g| !groups.contains_key(*g)).count();
        if groups.contains_key(group) || consumer.contains_key(group) || held < self.max_groups {
            return Ok(());
        }
        Err(GroupError {
            code: crate::protocol::ErrorCode::InvalidCommitOffsetSize,
            message: format!(
                "this coordinator holds the maximum of {} groups (--max-groups-per-shard)",
                self.max_groups
            ),
        })
    }

    /// Stores a checked commit once it is durable (or one replayed from the log at start,
    /// `member_id` empty): the coordinator's [`Group::store_commit`].
    /// A transaction's offsets (TxnOffsetCommit of `producer_id`) are durable in offsets
    /// partition `k`: pending until the transaction ends there. A later commit of the same
    /// partition in the same transaction replaces the earlier one.
    pub fn add_txn_offsets(
        &self,
        k: u32,
        producer_id: i64,
        group: &str,
        offsets: Vec<PartitionOffset>,
    ) {
        let mut all = self.txn_offsets.borrow_mut();
        let pending = all
            .entry(k)
            .or_default()
            .entry(producer_id)
            .or_default()
            .entry(group.to_string())
            .or_default();
        for o in offsets {
            pending.retain(|p| (p.topic.as_str(), p.partition) != (o.topic.as_str(), o.partition));
            pending.push(o);
        }
    }

    /// A transaction marker of `producer_id` landed on offsets partition `k`: its pending
    /// offsets become the groups' committed offsets (commit) or are dropped (abort).
    pub fn end_txn_offsets(&self, k: u32, producer_id: i64, commit: bool, now_ms: u64) {
        let pending = self
            .txn_offsets
            .borrow_mut()
            .get_mut(&k)
            .and_then(|m| m.remove(&producer_id));
        if let (true, Some(groups)) = (commit, pending) {
            for (group, offsets) in groups {
                self.store_commit(&group, now_ms, "", offsets);
            }
        }
    }

    /// Whether a transaction holds an uncommitted offset of `group` for `topic`-`partition`
    /// (Kafka's UNSTABLE_OFFSET_COMMIT for an OffsetFetch that requires stable offsets).
    pub fn has_pending_txn_offset(&self, group: &str, topic: &str, partition: u32) -> bool {
        self.txn_offsets
            .borrow()
            .values()
            .flat_map(|m| m.values())
            .any(|g| {
                g.get(group).is_some_and(|os| {
                    os.iter()
                        .any(|o| o.topic == topic && o.partition == partition)
                })
            })
    }

    pub fn store_commit(
        &self,
        group: &str,
        now_ms: u64,
        member_id: &str,
        offsets: Vec<PartitionOffset>,
    ) {
        let mut groups = self.groups.borrow_mut();
        let g = groups
            .entry(group.to_string())
            .or_insert_with(|| Group::new(group, self.cfg.clone()));
        g.store_commit(now_ms, member_id, offsets);
    }

    /// Every committed offset of a group, sorted by topic and partition (OffsetFetch with
    /// no partitions named).
    pub fn all_committed(&self, group: &str) -> Vec<PartitionOffset> {
        self.groups
            .borrow()
            .get(group)
            .map_or_else(Vec::new, |g| g.all_committed().collect())
    }

    /// Every committed offset of every group this shard coordinates, as (group, topic,
    /// partition, offset), for a metrics scrape (lag).
    pub fn every_committed(&self) -> Vec<(String, String, u32, u64)> {
        self.groups
            .borrow()
            .values()
            .flat_map(|g| {
                g.all_committed()
                    .map(|c| (g.id.clone(), c.topic, c.partition, c.offset))
            })
            .collect()
    }

    /// Forgets committed offsets of `group` (a tombstone replayed, or one being written); a
    /// group left with neither members nor offsets is gone.
    pub fn remove_offsets(&self, group: &str, partitions: &[(String, u32)]) {
        let mut groups = self.groups.borrow_mut();
        if let Some(g) = groups.get_mut(group) {
            g.remove_offsets(partitions);
            if g.member_ids().is_empty() && !g.has_offsets() {
                groups.remove(group);
            }
        }
    }

    /// DeleteGroups: the partitions whose offsets go, once the group is checked: known here
    /// (GROUP_ID_NOT_FOUND) and without members (NON_EMPTY_GROUP).
    pub fn deletable(&self, group: &str) -> Result<Vec<(String, u32)>, GroupError> {
        if let Some(cg) = self.consumer_groups.borrow().get(group) {
            if !cg.is_empty() {
                return Err(GroupError {
                    code: ErrorCode::NonEmptyGroup,
                    message: format!("group {group:?} has members"),
                });
            }
            return Ok(self
                .all_committed(group)
                .into_iter()
                .map(|o| (o.topic, o.partition))
                .collect());
        }
        let groups = self.groups.borrow();
        let g = groups.get(group).ok_or_else(|| GroupError {
            code: crate::protocol::ErrorCode::GroupIdNotFound,
            message: format!("group {group:?} does not exist"),
        })?;
        if !g.member_ids().is_empty() {
            return Err(GroupError {
                code: crate::protocol::ErrorCode::NonEmptyGroup,
                message: format!("group {group:?} has members"),
            });
        }
        Ok(g.all_committed().map(|o| (o.topic, o.partition)).collect())
    }

    /// Topics the members of `group` subscribe to (OffsetDelete keeps their offsets), or
    /// GROUP_ID_NOT_FOUND.
    pub fn subscribed_topics(
        &self,
        group: &str,
    ) -> Result<std::collections::BTreeSet<String>, GroupError> {
        if let Some(cg) = self.consumer_groups.borrow().get(group) {
            return Ok(cg.subscribed_topics());
        }
        self.groups
            .borrow()
            .get(group)
            .map(Group::subscribed_topics)
            .ok_or_else(|| GroupError {
                code: crate::protocol::ErrorCode::GroupIdNotFound,
                message: format!("group {group:?} does not exist"),
            })
    }

    /// The committed offset of a partition for a group.
    pub fn committed(&self, group: &str, topic: &str, partition: u32) -> Option<Position> {
        self.groups
            .borrow()
            .get(group)
            .and_then(|g| g.committed(topic, partition))
            .map(|c| Position {
                offset: c.offset,
                leader_epoch: c.leader_epoch,
                metadata: c.metadata.clone(),
            })
    }
}

impl GroupHost {
    /// A commit record was appended at `base` to offsets partition `p`.
    pub fn commit_appended(&self, p: u32, base: u64, records: usize) {
        self.in_flight
            .borrow_mut()
            .entry(p)
            .or_default()
            .insert(base);
        *self.since_compaction.borrow_mut().entry(p).or_default() += records;
    }

    /// The commit at `base` is durable (or failed).
    pub fn commit_settled(&self, p: u32, base: u64) {
        if let Some(s) = self.in_flight.borrow_mut().get_mut(&p) {
            s.remove(&base);
        }
    }

    /// If partition `p` took `every` commit records since its last compaction (and none is
    /// running), starts one: returns the snapshot records (the latest commit of every group
    /// hosted there) and marks the compaction running.
    pub fn begin_compaction(
        &self,
        p: u32,
        partitions: u32,
        every: usize,
    ) -> Option<Vec<CommitRecord>> {
        let due = self.since_compaction.borrow().get(&p).copied().unwrap_or(0) >= every;
        // The snapshot holds committed offsets only: while a transaction's offsets are
        // pending here, the log below them must stay for a reload to find them.
        let pending_txn = self
            .txn_offsets
            .borrow()
            .get(&p)
            .is_some_and(|m| !m.is_empty());
        if !due || pending_txn || !self.compacting.borrow_mut().insert(p) {
            return None;
        }
        self.since_compaction.borrow_mut().insert(p, 0);
        let groups = self.groups.borrow();
        Some(snapshot(
            groups
                .values()
                .filter(|g| offsets_partition(&g.id, partitions) == p),
        ))
    }

    /// Where a compaction of `p` whose snapshot starts at `snapshot_base` may truncate: below
    /// the snapshot, and below any commit not yet durable (it is not in the snapshot).
    pub fn compaction_point(&self, p: u32, snapshot_base: u64) -> u64 {
        let lowest = self
            .in_flight
            .borrow()
            .get(&p)
            .and_then(|s| s.iter().next().copied());
        lowest.map_or(snapshot_base, |l| l.min(snapshot_base))
    }

    pub fn end_compaction(&self, p: u32) {
        self.compacting.borrow_mut().remove(&p);
    }
}

impl GroupHost {
    /// Where offsets partition `p` stands here (`None`: not led here).
    pub fn coordination(&self, p: u32) -> Option<Coordination> {
        self.coordination.borrow().get(&p).copied()
    }

    /// Every offsets partition led here, with its state.
    pub fn coordinated(&self) -> Vec<(u32, Coordination)> {
        let mut v: Vec<_> = self
            .coordination
            .borrow()
            .iter()
            .map(|(p, c)| (*p, *c))
            .collect();
        v.sort_by_key(|(p, _)| *p);
        v
    }

    /// This shard leads offsets partition `p` at `epoch` and starts loading its groups.
    /// Whatever it held of them from an earlier leadership is dropped first.
    pub fn begin_load(&self, p: u32, partitions: u32, epoch: u32) {
        self.unload(p, partitions);
        self.coordination
            .borrow_mut()
            .insert(p, Coordination::Loading { epoch });
    }

    /// The load of `p` at `epoch` is done: its groups are answered for from now on. False
    /// when the leadership changed meanwhile (the caller drops what it loaded).
    pub fn finish_load(&self, p: u32, epoch: u32) -> bool {
        let mut c = self.coordination.borrow_mut();
        let current = c.get(&p) == Some(&Coordination::Loading { epoch });
        if current {
            c.insert(p, Coordination::Active { epoch });
        }
        drop(c);
        self.loaded.notify(usize::MAX);
        current
    }

    /// Waits until no offsets partition in `which` is loading.
    pub async fn wait_loaded(&self, which: &[u32]) {
        loop {
            let l = self.loaded.listen();
            let loading = which
                .iter()
                .any(|p| matches!(self.coordination(*p), Some(Coordination::Loading { .. })));
            if !loading {
                return;
            }
            l.await;
        }
    }

    /// This shard no longer leads offsets partition `p` (of `partitions`): its groups, their
    /// members and offsets are dropped (the new leader loads them from its replica), parked
    /// joins and syncs get NOT_COORDINATOR, and its compaction bookkeeping is reset.
    pub fn unload(&self, p: u32, partitions: u32) {
        self.coordination.borrow_mut().remove(&p);
        self.txn_offsets.borrow_mut().remove(&p);
        let of_p = |g: &str| offsets_partition(g, partitions) == p;
        self.groups.borrow_mut().retain(|id, _| !of_p(id));
        self.consumer_groups.borrow_mut().retain(|id, _| !of_p(id));
        let gone: Vec<Waiter> = {
            let mut waiters = self.waiters.borrow_mut();
            let tokens: Vec<Token> = waiters
                .iter()
                .filter(|(_, w)| of_p(w.group()))
                .map(|(t, _)| *t)
                .collect();
            tokens.iter().filter_map(|t| waiters.remove(t)).collect()
        };
        for w in gone {
            w.fail(GroupError {
                code: crate::protocol::ErrorCode::NotCoordinator,
                message: "the group's coordinator moved: find it again".into(),
            });
        }
        self.in_flight.borrow_mut().remove(&p);
        self.since_compaction.borrow_mut().remove(&p);
        self.compacting.borrow_mut().remove(&p);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Groups that form at their first join (no initial rebalance delay), as most tests want.
    fn no_delay() -> GroupConfig {
        GroupConfig {
            initial_rebalance_delay_ms: 0,
            ..GroupConfig::default()
        }
    }

    fn join_req(member: &str) -> JoinRequest {
        JoinRequest {
            member_id: member.to_string(),
            group_instance_id: Some("host-a".into()),
            client_id: "cli".into(),
            session_timeout_ms: 10_000,
            rebalance_timeout_ms: 30_000,
            protocol_type: "consumer".into(),
            protocols: vec![("range".into(), Vec::new())],
        }
    }

    #[test]
    fn transactional_offsets_count_only_once_their_commit_marker_lands() {
        let host = GroupHost::new(no_delay(), 10);
        let at = |o: u64| vec![PartitionOffset::new("t", 0, o)];
        host.add_txn_offsets(3, 100, "g", at(5));
        host.add_txn_offsets(3, 100, "g", at(7)); // the same transaction, later
        host.add_txn_offsets(3, 200, "g", at(9));
        assert_eq!(host.committed("g", "t", 0), None);
        assert!(host.has_pending_txn_offset("g", "t", 0));
        // Producer 200 aborts: its offsets are gone; 100 commits: its latest counts.
        host.end_txn_offsets(3, 200, false, 1);
        host.end_txn_offsets(3, 100, true, 2);
        assert_eq!(host.committed("g", "t", 0).map(|p| p.offset), Some(7));
        assert!(!host.has_pending_txn_offset("g", "t", 0));
        // A marker with nothing pending, or on another partition, changes nothing.
        host.end_txn_offsets(3, 100, true, 3);
        host.add_txn_offsets(4, 300, "g", at(11));
        host.end_txn_offsets(3, 300, true, 4);
        assert_eq!(host.committed("g", "t", 0).map(|p| p.offset), Some(7));
        // Unloading the partition drops what is pending there.
        host.unload(4, 8);
        host.end_txn_offsets(4, 300, true, 5);
        assert!(!host.has_pending_txn_offset("g", "t", 0));
    }

    #[test]
    fn a_restarted_host_hands_out_new_member_ids() {
        let first_id = || {
            let host = GroupHost::new(no_delay(), 10);
            let mut req = join_req("");
            req.group_instance_id = None;
            host.join(0, "g", req)
                .try_recv()
                .unwrap()
                .unwrap()
                .member_id
        };
        assert_ne!(first_id(), first_id());
    }

    #[test]
    fn refused_requests_for_unknown_groups_leave_nothing_behind() {
        let host = GroupHost::new(no_delay(), 10);
        let mut bad = join_req("");
        bad.session_timeout_ms = 1; // below the minimum
        assert!(host.join(0, "made-up", bad).try_recv().unwrap().is_err());
        let commit = [PartitionOffset::new("t", 0, 5)];
        assert!(host
            .check_commit("other", "nobody", None, 3, &commit)
            .is_err());
        // A commit from outside a group passes the check and creates nothing yet.
        assert!(host.check_commit("third", "", None, -1, &commit).is_ok());
        assert!(host.list().is_empty(), "{:?}", host.list());
        assert_eq!(host.describe("made-up").state, "Dead");
    }

    #[test]
    fn describing_groups_known_and_unknown() {
        let host = GroupHost::new(no_delay(), 10);
        let dead = host.describe("nobody");
        assert_eq!(dead.state, "Dead");
        assert!(dead.members.is_empty() && dead.protocol_type.is_empty());
        assert_eq!(dead.group, "nobody");

        let joined = host.join(0, "g", join_req("")).try_recv().unwrap().unwrap();
        let d = host.describe("g");
        assert_eq!(d.state, "CompletingRebalance");
        let rx = host
            .sync(
                1,
                "g",
                SyncRequest {
                    member_id: joined.member_id.clone(),
                    group_instance_id: None,
                    generation: joined.generation,
                    assignments: vec![(joined.member_id.clone(), b"mine".to_vec())],
                },
            )
            .unwrap();
        assert_eq!(rx.try_recv().unwrap().unwrap(), b"mine");
        let d = host.describe("g");
        assert_eq!(
            (
                d.state.as_str(),
                d.protocol_type.as_str(),
                d.protocol.as_str(),
                d.generation,
                d.leader.as_str()
            ),
            ("Stable", "consumer", "range", 1, joined.member_id.as_str())
        );
        assert_eq!(
            d.members,
            vec![MemberDescription {
                member_id: joined.member_id.clone(),
                group_instance_id: Some("host-a".into()),
                client_id: "cli".into(),
                assignment: b"mine".to_vec(),
            }]
        );
        // Gone again: Empty (not Dead), the group is still known.
        host.leave(2, "g", &joined.member_id).unwrap();
        let d = host.describe("g");
        assert_eq!((d.state.as_str(), d.members.len()), ("Empty", 0));
    }

    #[test]
    fn all_committed_offsets_of_a_group_sorted() {
        let host = GroupHost::new(no_delay(), 10);
        assert!(host.all_committed("g").is_empty());
        let o = PartitionOffset::new;
        host.store_commit("g", 0, "", vec![o("u", 0, 9), o("t", 1, 5), o("t", 0, 3)]);
        host.store_commit("other", 0, "", vec![o("t", 0, 1)]);
        host.store_commit("g", 1, "", vec![o("t", 1, 6)]);
        let mut u = o("u", 0, 9);
        u.metadata = "m".into();
        host.store_commit("g", 2, "", vec![u.clone()]);
        assert_eq!(host.all_committed("g"), vec![o("t", 0, 3), o("t", 1, 6), u]);
        // A group with offsets only (nobody joined) is Empty, not Dead.
        assert_eq!(host.describe("other").state, "Empty");
    }

    #[test]
    fn groups_per_shard_are_bounded() {
        let host = GroupHost::new(no_delay(), 2);
        let o = [PartitionOffset::new("t", 0, 1)];
        host.store_commit("a", 0, "", o.to_vec());
        let mut req = join_req("");
        req.group_instance_id = None;
        host.join(0, "b", req.clone()).try_recv().unwrap().unwrap();
        let e = host
            .join(0, "c", req.clone())
            .try_recv()
            .unwrap()
            .unwrap_err();
        assert_eq!(
            e.code,
            crate::protocol::ErrorCode::GroupMaxSizeReached,
            "{e}"
        );
        assert!(e.message.contains("--max-groups-per-shard"), "{e}");
        let e = host.check_commit("c", "", None, -1, &o).unwrap_err();
        assert_eq!(e.code, crate::protocol::ErrorCode::InvalidCommitOffsetSize);
        // Groups already held keep working.
        host.check_commit("a", "", None, -1, &o).unwrap();
        assert_eq!(host.describe("b").members.len(), 1);
        assert_eq!(host.list().len(), 2);
    }

    fn consumer_join(member: &str) -> Heartbeat {
        Heartbeat {
            member_id: member.into(),
            member_epoch: 0,
            rebalance_timeout_ms: 30_000,
            subscribed_topic_names: Some(vec!["t".into()]),
            owned: Some(Vec::new()),
            ..Heartbeat::default()
        }
    }

    #[test]
    fn a_group_id_is_classic_or_consumer_and_empty_ones_convert() {
        let host = GroupHost::new(no_delay(), 10);
        let topics = |_: &str| Some(2);
        // Offsets only (an empty classic group): a consumer member converts it, the offsets
        // stay.
        host.store_commit("g", 0, "", vec![PartitionOffset::new("t", 0, 4)]);
        let r = host
            .consumer_heartbeat(0, "g", consumer_join("m"), &topics)
            .unwrap();
        assert_eq!(r.member_epoch, 1);
        assert_eq!(host.group_type("g"), GroupType::Consumer);
        assert_eq!(host.committed("g", "t", 0).map(|p| p.offset), Some(4));
        assert_eq!(host.list(), vec![("g".to_string(), "Stable".to_string())]);
        let d = host.describe("g");
        assert_eq!(
            (d.group_type, d.protocol_type.as_str(), d.members.len()),
            (GroupType::Consumer, "consumer", 1)
        );
        // Commits carry the member epoch.
        let o = [PartitionOffset::new("t", 1, 9)];
        host.check_commit("g", "m", None, 1, &o).unwrap();
        let e = host.check_commit("g", "m", None, 0, &o).unwrap_err();
        assert_eq!(e.code, ErrorCode::StaleMemberEpoch);
        // A classic member cannot join while it has members; nor can it be deleted.
        let mut req = join_req("");
        req.group_instance_id = None;
        let e = host
            .join(0, "g", req.clone())
            .try_recv()
            .unwrap()
            .unwrap_err();
        assert_eq!(e.code, ErrorCode::InconsistentGroupProtocol);
        assert_eq!(
            host.deletable("g").unwrap_err().code,
            ErrorCode::NonEmptyGroup
        );
        // Once the member left, a classic member converts it back.
        let mut leave = consumer_join("m");
        leave.member_epoch = -1;
        host.consumer_heartbeat(0, "g", leave, &topics).unwrap();
        assert_eq!(host.deletable("g").unwrap(), vec![("t".to_string(), 0)]);
        let joined = host.join(0, "g", req).try_recv().unwrap().unwrap();
        assert_eq!(host.group_type("g"), GroupType::Classic);
        // A classic group with members refuses consumer members.
        let e = host
            .consumer_heartbeat(0, "g", consumer_join("n"), &topics)
            .unwrap_err();
        assert_eq!(e.code, ErrorCode::GroupIdNotFound);
        assert_eq!(
            host.describe_consumer("g").unwrap_err().code,
            ErrorCode::GroupIdNotFound
        );
        host.leave(0, "g", &joined.member_id).unwrap();
        // A member of a group this coordinator does not know (a restart) rejoins.
        let mut lost = consumer_join("m");
        lost.member_epoch = 3;
        let e = host
            .consumer_heartbeat(0, "other", lost, &topics)
            .unwrap_err();
        assert_eq!(e.code, ErrorCode::UnknownMemberId);
        assert_eq!(
            host.group_type("other"),
            GroupType::Classic,
            "nothing created"
        );
    }

    #[test]
    fn consumer_groups_count_against_the_shard_bound_and_unload_with_their_partition() {
        let host = GroupHost::new(no_delay(), 2);
        let topics = |_: &str| Some(1);
        host.consumer_heartbeat(0, "a", consumer_join("m"), &topics)
            .unwrap();
        host.store_commit("b", 0, "", vec![PartitionOffset::new("t", 0, 1)]);
        let e = host
            .consumer_heartbeat(0, "c", consumer_join("m"), &topics)
            .unwrap_err();
        assert_eq!(e.code, ErrorCode::GroupMaxSizeReached);
        let o = [PartitionOffset::new("t", 0, 1)];
        assert_eq!(
            host.check_commit("c", "", None, -1, &o).unwrap_err().code,
            ErrorCode::InvalidCommitOffsetSize
        );
        // Held groups keep working; the consumer group's offsets do not count twice.
        host.store_commit("a", 0, "", o.to_vec());
        assert_eq!(host.list().len(), 2);
        // Sessions expire on the shard's tick.
        host.tick(45_001);
        assert_eq!(host.describe("a").state, "Empty");
        host.unload(offsets_partition("a", 8), 8);
        assert_eq!(host.group_type("a"), GroupType::Classic);
    }

    /// Two groups on different offsets partitions (of 8): the shard leading both loses one.
    fn groups_on_two_partitions() -> (&'static str, &'static str) {
        let a = "alpha";
        let b = (0..100)
            .map(|i| format!("g{i}"))
            .find(|g| offsets_partition(g, 8) != offsets_partition(a, 8))
            .expect("another partition");
        (a, Box::leak(b.into_boxed_str()))
    }

    #[test]
    fn unloading_a_partition_drops_only_its_groups_and_fails_their_parked_joins() {
        let (a, b) = groups_on_two_partitions();
        let (pa, pb) = (offsets_partition(a, 8), offsets_partition(b, 8));
        let host = GroupHost::new(GroupConfig::default(), 10);
        for (p, epoch) in [(pa, 3), (pb, 5)] {
            host.begin_load(p, 8, epoch);
            assert_eq!(host.coordination(p), Some(Coordination::Loading { epoch }));
            assert!(host.finish_load(p, epoch));
            assert_eq!(host.coordination(p), Some(Coordination::Active { epoch }));
        }
        for g in [a, b] {
            host.store_commit(g, 0, "", vec![PartitionOffset::new("t", 0, 7)]);
        }
        // With the initial rebalance delay the join stays parked.
        let mut req = join_req("");
        req.group_instance_id = None;
        let parked = host.join(0, a, req);
        assert!(parked.try_recv().is_err(), "parked");
        host.unload(pa, 8);
        assert_eq!(host.coordination(pa), None);
        let refused = parked.try_recv().expect("answered").unwrap_err();
        assert_eq!(refused.code, crate::protocol::ErrorCode::NotCoordinator);
        assert!(
            host.all_committed(a).is_empty(),
            "dropped with its partition"
        );
        assert_eq!(
            host.all_committed(b).len(),
            1,
            "the other partition's group stays"
        );
        // A load finishing after its partition was unloaded (or re-led) does not activate.
        host.begin_load(pa, 8, 4);
        host.unload(pa, 8);
        assert!(!host.finish_load(pa, 4));
        assert_eq!(host.coordination(pa), None);
    }
}
