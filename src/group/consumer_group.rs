//! One KIP-848 consumer group (`group.protocol=consumer`): ConsumerGroupHeartbeat in, the
//! member's epoch and assignment out, as Apache Kafka's `GroupMetadataManager`,
//! `ConsumerGroup` and `CurrentAssignmentBuilder` do it. The coordinator computes the
//! assignment itself (the `uniform` or `range` assignor) and hands it out incrementally:
//!
//! - every change of membership, subscription or subscribed topics' partitions bumps the
//!   **group epoch**; the **target assignment** is recomputed at once and stamped with it
//!   (the assignment epoch);
//! - a member converges to its target one heartbeat at a time: first it is told to give up
//!   what moves away (its epoch stays), and only once its heartbeat's owned partitions show
//!   them released are they free; it gets a partition only when no other member still holds
//!   it (assigned or being revoked). Its **member epoch** becomes the assignment epoch once
//!   it has nothing left to revoke;
//! - a member that does not revoke within its rebalance timeout, or is not heard from within
//!   the session timeout, is removed and its partitions are free.
//!
//! Sans-IO: time comes in as `now_ms`, topic metadata as a lookup, the reply goes out as a
//! value. Partition ownership is kept in one map (`owners`) so that no partition can be held
//! by two members; [`ConsumerGroup::check_invariants`] checks it after every event in debug
//! builds and in the tests.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::assignor::{self, Assignor, MemberSubscription, TopicPartition};
use super::coordinator::GroupError;
use crate::protocol::ErrorCode;

/// The epoch a member leaves with.
pub const LEAVE_EPOCH: i32 = -1;
/// The epoch a static member leaves with when it means to come back (its assignment is
/// kept for it until its session times out).
pub const LEAVE_STATIC_EPOCH: i32 = -2;

/// The server-side assignors, as Kafka names them.
pub const UNIFORM: &str = "uniform";
pub const RANGE: &str = "range";
pub const ASSIGNORS: &[&str] = &[UNIFORM, RANGE];

/// Limits and defaults (Kafka's names in the doc comments).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerGroupConfig {
    /// `group.consumer.session.timeout.ms`
    pub session_timeout_ms: u64,
    /// `group.consumer.heartbeat.interval.ms`
    pub heartbeat_interval_ms: u64,
    /// `group.consumer.assignors`: the first one is the default.
    pub assignors: Vec<String>,
    /// `group.consumer.max.size` (rill: `--group-max-size`, shared with classic groups).
    pub max_members: usize,
    /// Part of member ids the coordinator makes up (for clients that send none): differs
    /// between runs, as `GroupConfig::incarnation`.
    pub incarnation: u64,
}

impl Default for ConsumerGroupConfig {
    fn default() -> Self {
        ConsumerGroupConfig {
            session_timeout_ms: 45_000,
            heartbeat_interval_ms: 5_000,
            assignors: vec![UNIFORM.into(), RANGE.into()],
            max_members: 1_000,
            incarnation: 0,
        }
    }
}

/// What the group reads of the cluster's topics.
pub trait Topics {
    /// A topic's partition count; `None`: no such topic.
    fn partitions(&self, topic: &str) -> Option<u32>;
    /// Every topic a regular expression subscription may match (internal topics left out).
    fn names(&self) -> Vec<String>;
}

/// A lookup of partition counts alone: regular expressions match nothing through it.
impl<F: Fn(&str) -> Option<u32>> Topics for F {
    fn partitions(&self, topic: &str) -> Option<u32> {
        self(topic)
    }
    fn names(&self) -> Vec<String> {
        Vec::new()
    }
}

impl Topics for BTreeMap<String, u32> {
    fn partitions(&self, topic: &str) -> Option<u32> {
        self.get(topic).copied()
    }
    fn names(&self) -> Vec<String> {
        self.keys().cloned().collect()
    }
}

/// Compiled regular expressions are bounded (the `regex` crate's size limit), so a member
/// cannot make the coordinator hold a huge automaton.
const REGEX_SIZE_LIMIT: usize = 1 << 20;

/// A ConsumerGroupHeartbeat, decoded. `None` fields did not change since the member's last
/// heartbeat (Kafka's nulls).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Heartbeat {
    pub member_id: String,
    pub member_epoch: i32,
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    /// -1: unchanged.
    pub rebalance_timeout_ms: i32,
    pub subscribed_topic_names: Option<Vec<String>>,
    pub subscribed_topic_regex: Option<String>,
    pub server_assignor: Option<String>,
    /// The partitions the member owns now (topic ids already resolved to names).
    pub owned: Option<Vec<TopicPartition>>,
    pub client_id: String,
    pub client_host: String,
}

/// The answer to a heartbeat.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeartbeatReply {
    pub member_id: String,
    pub member_epoch: i32,
    pub heartbeat_interval_ms: i32,
    /// The partitions the member may own now, when it must be told (joined, changed, or the
    /// member reported something else); `None`: keep what you have.
    pub assignment: Option<Vec<TopicPartition>>,
}

/// Where a member is in its reconciliation (Kafka's `MemberState`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemberState {
    /// Holds its whole target at the assignment epoch.
    Stable,
    /// Must release partitions first (its epoch stays until it did).
    UnrevokedPartitions,
    /// At the assignment epoch, waiting for partitions other members still hold.
    UnreleasedPartitions,
}

/// The group's state as ListGroups and ConsumerGroupDescribe name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConsumerGroupState {
    Empty,
    Assigning,
    Reconciling,
    Stable,
}

impl ConsumerGroupState {
    pub fn name(self) -> &'static str {
        match self {
            ConsumerGroupState::Empty => "Empty",
            ConsumerGroupState::Assigning => "Assigning",
            ConsumerGroupState::Reconciling => "Reconciling",
            ConsumerGroupState::Stable => "Stable",
        }
    }
}

#[derive(Debug, Clone)]
struct Member {
    instance_id: Option<String>,
    rack_id: Option<String>,
    client_id: String,
    client_host: String,
    /// Topics subscribed by name.
    topics: BTreeSet<String>,
    /// A regular expression subscription (matched against whole topic names), and the
    /// topics it matched when last resolved.
    regex: Option<(String, regex::Regex)>,
    regex_topics: BTreeSet<String>,
    assignor: Option<String>,
    rebalance_timeout_ms: u64,
    epoch: i32,
    previous_epoch: i32,
    state: MemberState,
    /// Partitions the member may consume.
    assigned: BTreeSet<TopicPartition>,
    /// Partitions it was told to give up and has not confirmed yet: still its own.
    revoking: BTreeSet<TopicPartition>,
    last_heard_ms: u64,
    /// Set while it has partitions to revoke: removed if it has not by then.
    revoke_deadline_ms: Option<u64>,
    /// The assignment last sent, so unchanged ones are not repeated.
    sent: Option<BTreeSet<TopicPartition>>,
}

/// One member as ConsumerGroupDescribe shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerMemberDescription {
    pub member_id: String,
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    pub member_epoch: i32,
    pub client_id: String,
    pub client_host: String,
    pub subscribed_topics: Vec<String>,
    pub subscribed_regex: Option<String>,
    pub assigned: Vec<TopicPartition>,
    pub target: Vec<TopicPartition>,
}

/// A consumer group as ConsumerGroupDescribe shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerGroupDescription {
    pub state: ConsumerGroupState,
    pub group_epoch: i32,
    pub assignment_epoch: i32,
    pub assignor: String,
    pub members: Vec<ConsumerMemberDescription>,
}

/// Why a member was removed by [`ConsumerGroup::tick`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expiry {
    Session,
    Revocation,
}

/// A subscription's pattern, matched against whole topic names (as Kafka's RE2/J
/// `matcher(topic).matches()`); INVALID_REGULAR_EXPRESSION when it does not compile.
fn compile(pattern: &str) -> Result<(String, regex::Regex), GroupError> {
    regex::RegexBuilder::new(&format!("^(?:{pattern})$"))
        .size_limit(REGEX_SIZE_LIMIT)
        .build()
        .map(|re| (pattern.to_string(), re))
        .map_err(|e| {
            err(
                ErrorCode::InvalidRegularExpression,
                format!("SubscribedTopicRegex {pattern:?} is not a valid regular expression: {e}"),
            )
        })
}

/// The topics a pattern matches.
fn matching(re: &regex::Regex, names: &[String]) -> BTreeSet<String> {
    names.iter().filter(|t| re.is_match(t)).cloned().collect()
}

fn err(code: ErrorCode, message: impl Into<String>) -> GroupError {
    GroupError {
        code,
        message: message.into(),
    }
}

/// One consumer group.
#[derive(Debug)]
pub struct ConsumerGroup {
    pub id: String,
    cfg: ConsumerGroupConfig,
    group_epoch: i32,
    assignment_epoch: i32,
    members: BTreeMap<String, Member>,
    /// Static instance id -> member id.
    instances: HashMap<String, String>,
    /// Member id -> the partitions it should own at `assignment_epoch`.
    target: BTreeMap<String, BTreeSet<TopicPartition>>,
    /// Every partition some member holds (assigned or being revoked) -> that member. The
    /// only record of ownership: a partition has at most one owner by construction.
    owners: BTreeMap<TopicPartition, String>,
    /// Subscribed topic -> how many members subscribe to it.
    subscribed: BTreeMap<String, usize>,
    /// Subscribed topics that exist -> their partition count, as the target was computed.
    topic_partitions: BTreeMap<String, u32>,
    /// The assignor the target was computed with.
    assignor: String,
    next_member: u64,
}

impl ConsumerGroup {
    pub fn new(id: impl Into<String>, cfg: ConsumerGroupConfig) -> ConsumerGroup {
        let assignor = cfg
            .assignors
            .first()
            .cloned()
            .unwrap_or_else(|| UNIFORM.into());
        ConsumerGroup {
            id: id.into(),
            cfg,
            group_epoch: 0,
            assignment_epoch: 0,
            members: BTreeMap::new(),
            instances: HashMap::new(),
            target: BTreeMap::new(),
            owners: BTreeMap::new(),
            subscribed: BTreeMap::new(),
            topic_partitions: BTreeMap::new(),
            assignor,
            next_member: 0,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    pub fn member_count(&self) -> usize {
        self.members.len()
    }

    pub fn group_epoch(&self) -> i32 {
        self.group_epoch
    }

    pub fn assignment_epoch(&self) -> i32 {
        self.assignment_epoch
    }

    pub fn state(&self) -> ConsumerGroupState {
        if self.members.is_empty() {
            ConsumerGroupState::Empty
        } else if self.group_epoch > self.assignment_epoch {
            ConsumerGroupState::Assigning
        } else if self.members.values().any(|m| {
            (m.epoch != self.assignment_epoch && m.epoch != LEAVE_STATIC_EPOCH)
                || m.state != MemberState::Stable
        }) {
            ConsumerGroupState::Reconciling
        } else {
            ConsumerGroupState::Stable
        }
    }

    /// A member's epoch, if it is a member.
    pub fn member_epoch(&self, member_id: &str) -> Option<i32> {
        self.members.get(member_id).map(|m| m.epoch)
    }

    /// The partitions a member may consume now.
    pub fn assigned(&self, member_id: &str) -> Option<Vec<TopicPartition>> {
        self.members
            .get(member_id)
            .map(|m| m.assigned.iter().cloned().collect())
    }

    /// Topics the members subscribe to (OffsetDelete keeps their offsets).
    pub fn subscribed_topics(&self) -> BTreeSet<String> {
        self.subscribed.keys().cloned().collect()
    }

    /// ConsumerGroupHeartbeat. `partitions` gives a topic's partition count (`None`: no
    /// such topic now).
    pub fn heartbeat(
        &mut self,
        now_ms: u64,
        req: Heartbeat,
        topics: &dyn Topics,
    ) -> Result<HeartbeatReply, GroupError> {
        let out = self.heartbeat_inner(now_ms, req, topics);
        debug_assert_eq!(self.check_invariants(), Ok(()));
        out
    }

    fn validate(&self, req: &Heartbeat) -> Result<(), GroupError> {
        let invalid = |m: &str| Err(err(ErrorCode::InvalidRequest, m));
        if req.instance_id.as_deref() == Some("") {
            return invalid("InstanceId can't be empty.");
        }
        if req.rack_id.as_deref() == Some("") {
            return invalid("RackId can't be empty.");
        }
        match req.member_epoch {
            0 => {
                if req.rebalance_timeout_ms < 0 {
                    return invalid("RebalanceTimeoutMs must be provided in first request.");
                }
                if req.owned.as_ref().is_some_and(|o| !o.is_empty()) {
                    return invalid("TopicPartitions must be empty when (re-)joining.");
                }
                let names = req
                    .subscribed_topic_names
                    .as_ref()
                    .is_some_and(|t| !t.is_empty());
                let regex = req
                    .subscribed_topic_regex
                    .as_ref()
                    .is_some_and(|r| !r.is_empty());
                if !names && !regex {
                    return invalid(
                        "SubscribedTopicNames or SubscribedTopicRegex must be set in first request.",
                    );
                }
            }
            e if e > 0 || e == LEAVE_EPOCH => {
                if req.member_id.is_empty() {
                    return invalid("MemberId can't be empty.");
                }
            }
            LEAVE_STATIC_EPOCH => {
                if req.member_id.is_empty() {
                    return invalid("MemberId can't be empty.");
                }
                if req.instance_id.is_none() {
                    return invalid("InstanceId can't be null.");
                }
            }
            _ => return invalid("MemberEpoch is invalid."),
        }
        if let Some(a) = &req.server_assignor {
            if !self.cfg.assignors.iter().any(|k| k == a) {
                return Err(err(
                    ErrorCode::UnsupportedAssignor,
                    format!(
                        "ServerAssignor {a} is not supported. Supported assignors: {}.",
                        self.cfg.assignors.join(", ")
                    ),
                ));
            }
        }
        Ok(())
    }

    fn heartbeat_inner(
        &mut self,
        now_ms: u64,
        req: Heartbeat,
        topics: &dyn Topics,
    ) -> Result<HeartbeatReply, GroupError> {
        self.validate(&req)?;
        if req.member_epoch == LEAVE_EPOCH || req.member_epoch == LEAVE_STATIC_EPOCH {
            return self.leave(now_ms, &req);
        }
        // Compiled before anything changes: a bad pattern is refused whole. An empty one
        // clears the member's regular expression.
        let regex = match req.subscribed_topic_regex.as_deref() {
            None => None,
            Some("") => Some(None),
            Some(pattern) => Some(Some(compile(pattern)?)),
        };
        let member_id = if req.member_epoch == 0 {
            self.join(&req)?
        } else {
            self.check_known(&req)?;
            req.member_id.clone()
        };
        let mut changed = false;
        {
            let m = self
                .members
                .get_mut(&member_id)
                .ok_or_else(|| err(ErrorCode::UnknownMemberId, "member vanished"))?;
            m.last_heard_ms = now_ms;
            if req.rebalance_timeout_ms >= 0 {
                m.rebalance_timeout_ms = req.rebalance_timeout_ms as u64;
            }
            if req.rack_id.is_some() {
                m.rack_id = req.rack_id.clone();
            }
            m.client_id = req.client_id.clone();
            m.client_host = req.client_host.clone();
            if let Some(a) = &req.server_assignor {
                if m.assignor.as_ref() != Some(a) {
                    m.assignor = Some(a.clone());
                    changed = true;
                }
            }
        }
        if let Some(names) = &req.subscribed_topic_names {
            let names: BTreeSet<String> = names.iter().cloned().collect();
            changed |= self.set_subscription(&member_id, names);
        }
        if let Some(regex) = regex {
            changed |= self.set_regex(&member_id, regex, topics);
        }
        if req.member_epoch == 0 && !self.target.contains_key(&member_id) {
            changed = true; // a new member
        }
        changed |= self.refresh_topics(topics);
        if changed {
            self.group_epoch += 1;
        }
        if self.group_epoch > self.assignment_epoch {
            self.compute_target();
        }
        // The member's confirmation: owned partitions without those it was revoking.
        if let Some(owned) = &req.owned {
            self.acknowledge(&member_id, owned);
        }
        self.reconcile(now_ms, &member_id);
        let m = self
            .members
            .get_mut(&member_id)
            .ok_or_else(|| err(ErrorCode::UnknownMemberId, "member vanished"))?;
        let differs_from_owned = req
            .owned
            .as_ref()
            .is_some_and(|o| o.iter().cloned().collect::<BTreeSet<_>>() != m.assigned);
        let assignment = if req.member_epoch == 0
            || m.sent.as_ref() != Some(&m.assigned)
            || differs_from_owned
        {
            m.sent = Some(m.assigned.clone());
            Some(m.assigned.iter().cloned().collect())
        } else {
            None
        };
        Ok(HeartbeatReply {
            member_id,
            member_epoch: m.epoch,
            heartbeat_interval_ms: self.cfg.heartbeat_interval_ms.min(i32::MAX as u64) as i32,
            assignment,
        })
    }

    /// A heartbeat with epoch 0: a new member, a member rejoining after it was fenced (it
    /// starts over, holding nothing), or a static member coming back.
    fn join(&mut self, req: &Heartbeat) -> Result<String, GroupError> {
        if let Some(instance) = &req.instance_id {
            if let Some(old) = self.instances.get(instance).cloned() {
                let old_epoch = self
                    .members
                    .get(&old)
                    .map_or(LEAVE_STATIC_EPOCH, |m| m.epoch);
                if old == req.member_id {
                    self.reset_member(&old);
                    return Ok(old);
                }
                if old_epoch != LEAVE_STATIC_EPOCH {
                    return Err(err(
                        ErrorCode::UnreleasedInstanceId,
                        format!(
                            "Static member {} with instance id {instance} cannot join the group \
                             because the instance id is owned by member {old}.",
                            req.member_id
                        ),
                    ));
                }
                // The static member is back under a new member id: it takes over the old
                // one's target without a rebalance; the old one's partitions are free.
                let fresh = self.pick_member_id(req);
                let prior = self.remove_quietly(&old);
                let target = self.target.remove(&old).unwrap_or_default();
                self.target.insert(fresh.clone(), target);
                let mut m = self.fresh_member(req);
                if let Some(p) = prior {
                    m.topics = p.topics;
                    m.regex = p.regex;
                    m.regex_topics = p.regex_topics;
                    m.assignor = p.assignor;
                }
                for t in m.topics.union(&m.regex_topics) {
                    *self.subscribed.entry(t.clone()).or_default() += 1;
                }
                self.members.insert(fresh.clone(), m);
                self.instances.insert(instance.clone(), fresh.clone());
                return Ok(fresh);
            }
        }
        if !req.member_id.is_empty() && self.members.contains_key(&req.member_id) {
            self.reset_member(&req.member_id);
            return Ok(req.member_id.clone());
        }
        if self.members.len() >= self.cfg.max_members {
            return Err(err(
                ErrorCode::GroupMaxSizeReached,
                format!(
                    "The consumer group has reached its maximum capacity of {} members.",
                    self.cfg.max_members
                ),
            ));
        }
        let id = self.pick_member_id(req);
        let m = self.fresh_member(req);
        self.members.insert(id.clone(), m);
        if let Some(instance) = &req.instance_id {
            self.instances.insert(instance.clone(), id.clone());
        }
        Ok(id)
    }

    fn pick_member_id(&mut self, req: &Heartbeat) -> String {
        if !req.member_id.is_empty() && !self.members.contains_key(&req.member_id) {
            return req.member_id.clone();
        }
        loop {
            self.next_member += 1;
            let id = format!(
                "{}-{:x}-{}",
                req.client_id, self.cfg.incarnation, self.next_member
            );
            if !self.members.contains_key(&id) {
                return id;
            }
        }
    }

    fn fresh_member(&self, req: &Heartbeat) -> Member {
        Member {
            instance_id: req.instance_id.clone(),
            rack_id: req.rack_id.clone(),
            client_id: req.client_id.clone(),
            client_host: req.client_host.clone(),
            topics: BTreeSet::new(),
            regex: None,
            regex_topics: BTreeSet::new(),
            assignor: None,
            rebalance_timeout_ms: req.rebalance_timeout_ms.max(0) as u64,
            epoch: 0,
            previous_epoch: 0,
            state: MemberState::Stable,
            assigned: BTreeSet::new(),
            revoking: BTreeSet::new(),
            last_heard_ms: 0,
            revoke_deadline_ms: None,
            sent: None,
        }
    }

    /// A known member joining again (epoch 0): it dropped everything it owned.
    fn reset_member(&mut self, member_id: &str) {
        self.release_all(member_id);
        if let Some(m) = self.members.get_mut(member_id) {
            m.epoch = 0;
            m.previous_epoch = 0;
            m.state = MemberState::Stable;
            m.revoke_deadline_ms = None;
            m.sent = None;
        }
    }

    fn release_all(&mut self, member_id: &str) {
        if let Some(m) = self.members.get_mut(member_id) {
            for tp in std::mem::take(&mut m.assigned)
                .into_iter()
                .chain(std::mem::take(&mut m.revoking))
            {
                if self.owners.get(&tp).map(String::as_str) == Some(member_id) {
                    self.owners.remove(&tp);
                }
            }
        }
    }

    /// Checks a heartbeat of a member that says it is in the group (epoch > 0).
    fn check_known(&self, req: &Heartbeat) -> Result<(), GroupError> {
        let Some(m) = self.members.get(&req.member_id) else {
            return Err(err(
                ErrorCode::UnknownMemberId,
                format!(
                    "Member {} is not a member of group {}.",
                    req.member_id, self.id
                ),
            ));
        };
        if let Some(instance) = &req.instance_id {
            if self.instances.get(instance) != Some(&req.member_id) {
                return Err(err(
                    ErrorCode::FencedInstanceId,
                    format!(
                        "Static member {} with instance id {instance} was fenced.",
                        req.member_id
                    ),
                ));
            }
        }
        let fenced = || {
            Err(err(
                ErrorCode::FencedMemberEpoch,
                format!(
                    "The consumer group member has epoch {} but the coordinator knows {}. The \
                     member must abandon all its partitions and rejoin.",
                    req.member_epoch, m.epoch
                ),
            ))
        };
        if req.member_epoch > m.epoch {
            return fenced();
        }
        if req.member_epoch < m.epoch {
            // The reply with the bumped epoch may have been lost: accepted when it comes
            // with the previous epoch and owns nothing it no longer has.
            let subset = req
                .owned
                .as_ref()
                .is_some_and(|o| o.iter().all(|tp| m.assigned.contains(tp)));
            if req.member_epoch != m.previous_epoch || !subset {
                return fenced();
            }
        }
        Ok(())
    }

    fn leave(&mut self, now_ms: u64, req: &Heartbeat) -> Result<HeartbeatReply, GroupError> {
        let member_id = match &req.instance_id {
            Some(instance) => {
                let Some(holder) = self.instances.get(instance).cloned() else {
                    return Err(err(
                        ErrorCode::UnknownMemberId,
                        format!("Instance id {instance} is unknown."),
                    ));
                };
                if holder != req.member_id {
                    return Err(err(
                        ErrorCode::FencedInstanceId,
                        format!(
                            "Static member {} with instance id {instance} was fenced by member {holder}.",
                            req.member_id
                        ),
                    ));
                }
                holder
            }
            None => req.member_id.clone(),
        };
        if !self.members.contains_key(&member_id) {
            return Err(err(
                ErrorCode::UnknownMemberId,
                format!("Member {member_id} is not a member of group {}.", self.id),
            ));
        }
        if req.member_epoch == LEAVE_STATIC_EPOCH {
            // Away for a restart: the assignment waits for it (its partitions stay its own
            // until the session times out), nobody else rebalances.
            if let Some(m) = self.members.get_mut(&member_id) {
                m.epoch = LEAVE_STATIC_EPOCH;
                m.last_heard_ms = now_ms;
            }
        } else {
            self.remove_member(&member_id);
        }
        Ok(HeartbeatReply {
            member_id,
            member_epoch: req.member_epoch,
            heartbeat_interval_ms: 0,
            assignment: None,
        })
    }

    /// Removes a member (left, expired or fenced): its partitions are free, the group epoch
    /// bumps and the target is recomputed for the others.
    pub fn remove_member(&mut self, member_id: &str) {
        if self.remove_quietly(member_id).is_some() {
            self.target.remove(member_id);
            self.group_epoch += 1;
            self.compute_target();
        }
        debug_assert_eq!(self.check_invariants(), Ok(()));
    }

    /// Takes a member out (its partitions free, its subscription gone) without a rebalance.
    fn remove_quietly(&mut self, member_id: &str) -> Option<Member> {
        self.release_all(member_id);
        let m = self.members.remove(member_id)?;
        if let Some(i) = &m.instance_id {
            if self.instances.get(i).map(String::as_str) == Some(member_id) {
                self.instances.remove(i);
            }
        }
        for t in m.topics.union(&m.regex_topics) {
            self.unsubscribe(t);
        }
        Some(m)
    }

    fn unsubscribe(&mut self, topic: &str) {
        if let Some(n) = self.subscribed.get_mut(topic) {
            *n -= 1;
            if *n == 0 {
                self.subscribed.remove(topic);
            }
        }
    }

    /// Sets a member's topics by name; true when its subscription changed.
    fn set_subscription(&mut self, member_id: &str, names: BTreeSet<String>) -> bool {
        let Some(m) = self.members.get(member_id) else {
            return false;
        };
        let regex_topics = m.regex_topics.clone();
        self.set_topics(member_id, names, regex_topics)
    }

    /// Sets (`Some`) or clears (`None`) a member's regular expression and resolves it;
    /// true when the pattern changed.
    fn set_regex(
        &mut self,
        member_id: &str,
        regex: Option<(String, regex::Regex)>,
        topics: &dyn Topics,
    ) -> bool {
        let Some(m) = self.members.get_mut(member_id) else {
            return false;
        };
        if m.regex.as_ref().map(|(p, _)| p) == regex.as_ref().map(|(p, _)| p) {
            return false;
        }
        let resolved = regex
            .as_ref()
            .map(|(_, re)| matching(re, &topics.names()))
            .unwrap_or_default();
        m.regex = regex;
        let names = m.topics.clone();
        self.set_topics(member_id, names, resolved);
        true
    }

    /// Replaces a member's named and regex-matched topics, keeping the subscriber counts;
    /// true when their union changed.
    fn set_topics(
        &mut self,
        member_id: &str,
        names: BTreeSet<String>,
        regex_topics: BTreeSet<String>,
    ) -> bool {
        let Some(m) = self.members.get_mut(member_id) else {
            return false;
        };
        if m.topics == names && m.regex_topics == regex_topics {
            return false;
        }
        let old: BTreeSet<String> = m.topics.union(&m.regex_topics).cloned().collect();
        let new: BTreeSet<String> = names.union(&regex_topics).cloned().collect();
        m.topics = names;
        m.regex_topics = regex_topics;
        for t in &old {
            self.unsubscribe(t);
        }
        for t in &new {
            *self.subscribed.entry(t.clone()).or_default() += 1;
        }
        old != new
    }

    /// Re-matches every regular expression subscription against the topics now; true when
    /// a member's topics changed.
    fn resolve_regexes(&mut self, topics: &dyn Topics) -> bool {
        let with_regex: Vec<String> = self
            .members
            .iter()
            .filter(|(_, m)| m.regex.is_some())
            .map(|(id, _)| id.clone())
            .collect();
        if with_regex.is_empty() {
            return false;
        }
        let names = topics.names();
        let mut changed = false;
        for id in with_regex {
            let Some(m) = self.members.get(&id) else {
                continue;
            };
            let Some((_, re)) = &m.regex else {
                continue;
            };
            let resolved = matching(re, &names);
            let named = m.topics.clone();
            changed |= self.set_topics(&id, named, resolved);
        }
        changed
    }

    /// Re-reads the partition counts of the subscribed topics; true when they changed
    /// (a topic created, deleted or given more partitions).
    fn refresh_topics(&mut self, topics: &dyn Topics) -> bool {
        let now: BTreeMap<String, u32> = self
            .subscribed
            .keys()
            .filter_map(|t| topics.partitions(t).map(|n| (t.clone(), n)))
            .collect();
        if now == self.topic_partitions {
            return false;
        }
        self.topic_partitions = now;
        true
    }

    /// Topic metadata changed (the shell calls this on metadata updates): the group epoch
    /// bumps and the target is recomputed when a subscribed topic is affected.
    pub fn topics_changed(&mut self, topics: &dyn Topics) {
        // Both run: a regex's new match changes the subscription, then its partitions.
        let resolved = self.resolve_regexes(topics);
        if self.refresh_topics(topics) | resolved {
            self.group_epoch += 1;
            self.compute_target();
        }
        debug_assert_eq!(self.check_invariants(), Ok(()));
    }

    /// The assignor: the one most members ask for (ties: the configured order), else the
    /// default, as Kafka chooses.
    fn choose_assignor(&self) -> String {
        let mut votes: BTreeMap<&str, usize> = BTreeMap::new();
        for m in self.members.values() {
            if let Some(a) = &m.assignor {
                *votes.entry(a.as_str()).or_default() += 1;
            }
        }
        let best = self
            .cfg
            .assignors
            .iter()
            .filter_map(|a| votes.get(a.as_str()).map(|n| (a, *n)))
            .fold(None::<(&String, usize)>, |best, (a, n)| match best {
                Some((_, bn)) if bn >= n => best,
                _ => Some((a, n)),
            });
        best.map(|(a, _)| a.clone())
            .or_else(|| self.cfg.assignors.first().cloned())
            .unwrap_or_else(|| UNIFORM.into())
    }

    /// Recomputes the target assignment at the group epoch. `uniform` is the
    /// cooperative-sticky assignor over the previous target (balanced, moving as little as
    /// it can); `range` is Kafka's range assignor.
    fn compute_target(&mut self) {
        self.assignor = self.choose_assignor();
        let subs: Vec<MemberSubscription> = self
            .members
            .iter()
            .map(|(id, m)| MemberSubscription {
                member_id: id.clone(),
                topics: m.topics.union(&m.regex_topics).cloned().collect(),
                owned: self
                    .target
                    .get(id)
                    .map(|t| t.iter().cloned().collect())
                    .unwrap_or_default(),
            })
            .collect();
        let a: &dyn Assignor = if self.assignor == RANGE {
            &assignor::Range
        } else {
            &assignor::CooperativeSticky
        };
        let result = a.assign(&subs, &self.topic_partitions);
        self.target = result
            .into_iter()
            .map(|(id, tps)| (id, tps.into_iter().collect()))
            .collect();
        self.assignment_epoch = self.group_epoch;
    }

    /// The member confirmed what it owns: partitions it was revoking and no longer lists
    /// are free now.
    fn acknowledge(&mut self, member_id: &str, owned: &[TopicPartition]) {
        let Some(m) = self.members.get_mut(member_id) else {
            return;
        };
        if m.revoking.is_empty() {
            return;
        }
        let still: BTreeSet<TopicPartition> = m
            .revoking
            .iter()
            .filter(|tp| owned.contains(tp))
            .cloned()
            .collect();
        let released: Vec<TopicPartition> = m.revoking.difference(&still).cloned().collect();
        m.revoking = still;
        for tp in released {
            if self.owners.get(&tp).map(String::as_str) == Some(member_id) {
                self.owners.remove(&tp);
            }
        }
    }

    /// Moves a member one step towards its target (Kafka's `CurrentAssignmentBuilder`).
    fn reconcile(&mut self, now_ms: u64, member_id: &str) {
        let target = self.target.get(member_id).cloned().unwrap_or_default();
        let assignment_epoch = self.assignment_epoch;
        let Some(m) = self.members.get_mut(member_id) else {
            return;
        };
        if m.epoch == LEAVE_STATIC_EPOCH {
            return;
        }
        // What it holds but must give up now (the target may have moved again meanwhile).
        let to_revoke: BTreeSet<TopicPartition> = m.assigned.difference(&target).cloned().collect();
        if !to_revoke.is_empty() || !m.revoking.is_empty() {
            m.assigned.retain(|tp| target.contains(tp));
            m.revoking.extend(to_revoke);
            if !m.revoking.is_empty() {
                if m.state != MemberState::UnrevokedPartitions {
                    m.revoke_deadline_ms = Some(now_ms.saturating_add(m.rebalance_timeout_ms));
                }
                m.state = MemberState::UnrevokedPartitions;
                return;
            }
        }
        m.revoke_deadline_ms = None;
        // Nothing left to revoke: it gets what is free of its target, and the epoch.
        let mut waiting = false;
        for tp in target.difference(&m.assigned.clone()) {
            match self.owners.get(tp) {
                None => {
                    self.owners.insert(tp.clone(), member_id.to_string());
                    m.assigned.insert(tp.clone());
                }
                Some(o) if o == member_id => {
                    m.assigned.insert(tp.clone());
                }
                Some(_) => waiting = true,
            }
        }
        if m.epoch != assignment_epoch {
            m.previous_epoch = m.epoch;
            m.epoch = assignment_epoch;
        }
        m.state = if waiting {
            MemberState::UnreleasedPartitions
        } else {
            MemberState::Stable
        };
    }

    /// Expires sessions (static members away included) and revocations not done within
    /// the rebalance timeout; returns who was removed and why.
    pub fn tick(&mut self, now_ms: u64) -> Vec<(String, Expiry)> {
        let session = self.cfg.session_timeout_ms;
        let gone: Vec<(String, Expiry)> = self
            .members
            .iter()
            .filter_map(|(id, m)| {
                if now_ms.saturating_sub(m.last_heard_ms) > session {
                    Some((id.clone(), Expiry::Session))
                } else if m.revoke_deadline_ms.is_some_and(|d| now_ms > d) {
                    Some((id.clone(), Expiry::Revocation))
                } else {
                    None
                }
            })
            .collect();
        for (id, _) in &gone {
            self.remove_member(id);
        }
        gone
    }

    /// OffsetCommit from a member of this group (Kafka's `validateOffsetCommit`): an epoch
    /// below zero from outside the group is accepted only while the group is empty.
    pub fn validate_offset_commit(
        &self,
        member_id: &str,
        member_epoch: i32,
    ) -> Result<(), GroupError> {
        if member_epoch < 0 && self.members.is_empty() {
            return Ok(());
        }
        self.validate_member_epoch(member_id, member_epoch)
    }

    /// OffsetFetch v9+ naming a member (Kafka's `validateOffsetFetch`): no member id and a
    /// negative epoch is an admin's fetch.
    pub fn validate_offset_fetch(
        &self,
        member_id: Option<&str>,
        member_epoch: i32,
    ) -> Result<(), GroupError> {
        match member_id {
            None if member_epoch < 0 => Ok(()),
            id => self.validate_member_epoch(id.unwrap_or(""), member_epoch),
        }
    }

    fn validate_member_epoch(&self, member_id: &str, member_epoch: i32) -> Result<(), GroupError> {
        let m = self.members.get(member_id).ok_or_else(|| {
            err(
                ErrorCode::UnknownMemberId,
                format!("Member {member_id} is not a member of group {}.", self.id),
            )
        })?;
        if m.epoch != member_epoch {
            return Err(err(
                ErrorCode::StaleMemberEpoch,
                format!(
                    "The received member epoch {member_epoch} does not match the expected \
                     member epoch {}.",
                    m.epoch
                ),
            ));
        }
        Ok(())
    }

    pub fn describe(&self) -> ConsumerGroupDescription {
        ConsumerGroupDescription {
            state: self.state(),
            group_epoch: self.group_epoch,
            assignment_epoch: self.assignment_epoch,
            assignor: self.assignor.clone(),
            members: self
                .members
                .iter()
                .map(|(id, m)| ConsumerMemberDescription {
                    member_id: id.clone(),
                    instance_id: m.instance_id.clone(),
                    rack_id: m.rack_id.clone(),
                    member_epoch: m.epoch,
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    subscribed_topics: m.topics.union(&m.regex_topics).cloned().collect(),
                    subscribed_regex: m.regex.as_ref().map(|(p, _)| p.clone()),
                    assigned: m.assigned.iter().cloned().collect(),
                    target: self
                        .target
                        .get(id)
                        .map(|t| t.iter().cloned().collect())
                        .unwrap_or_default(),
                })
                .collect(),
        }
    }

    /// The ownership rules: every partition a member holds (assigned or revoking) is in
    /// `owners` under that member and no other member holds it; assigned and revoking are
    /// disjoint; the target gives each partition to one member; epochs are ordered.
    pub fn check_invariants(&self) -> Result<(), String> {
        let mut seen: BTreeMap<&TopicPartition, &str> = BTreeMap::new();
        for (id, m) in &self.members {
            if let Some(tp) = m.assigned.intersection(&m.revoking).next() {
                return Err(format!("{id} both holds and revokes {tp:?}"));
            }
            for tp in m.assigned.iter().chain(&m.revoking) {
                if let Some(other) = seen.insert(tp, id) {
                    return Err(format!("{tp:?} owned by {other} and {id}"));
                }
                if self.owners.get(tp) != Some(id) {
                    return Err(format!(
                        "{tp:?} held by {id} but owners say {:?}",
                        self.owners.get(tp)
                    ));
                }
            }
            if m.epoch > self.assignment_epoch {
                return Err(format!(
                    "{id} at epoch {} past the assignment epoch",
                    m.epoch
                ));
            }
        }
        if seen.len() != self.owners.len() {
            return Err(format!(
                "owners lists {} partitions, members hold {}",
                self.owners.len(),
                seen.len()
            ));
        }
        let mut targeted = BTreeSet::new();
        for (id, tps) in &self.target {
            if !self.members.contains_key(id) {
                return Err(format!("target names {id}, not a member"));
            }
            for tp in tps {
                if !targeted.insert(tp) {
                    return Err(format!("{tp:?} targeted twice"));
                }
            }
        }
        if self.assignment_epoch > self.group_epoch {
            return Err("assignment epoch past the group epoch".into());
        }
        Ok(())
    }
}

#[cfg(test)]
#[path = "consumer_group_tests.rs"]
mod tests;
