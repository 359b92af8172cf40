//! One consumer group's coordinator: membership, generations, rebalances, heartbeats,
//! session expiry and committed offsets. Time comes in as milliseconds, replies go out as
//! [`Action`]s naming the request they answer: no clocks, no sockets, so every path can be
//! driven deterministically by tests.
//!
//! A crashed member (session expired) and a leaving member take the same path,
//! [`Group::remove_member`].

use std::collections::{BTreeMap, HashMap};

use super::offsets_log::PartitionOffset;
use crate::protocol::ErrorCode;

/// An opaque id the shell gives each request that waits for a reply.
pub type Token = u64;

/// Limits and defaults (Kafka's names in the doc comments).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupConfig {
    /// `group.min.session.timeout.ms`
    pub min_session_timeout_ms: u64,
    /// `group.max.session.timeout.ms`
    pub max_session_timeout_ms: u64,
    /// `group.max.size`
    pub max_members: usize,
    /// Largest metadata string stored with a committed offset.
    pub max_offset_metadata: usize,
    /// Partitions a group may hold committed offsets for (`--max-offsets-per-group`; Kafka
    /// has no such bound): a commit that would pass it is refused whole.
    pub max_offsets: usize,
    /// Part of every member id this coordinator hands out. Generations start over when a
    /// coordinator restarts (its groups are in memory), so member ids must differ between
    /// runs: else a member from before the restart would pass for the new member with its
    /// id. The shell sets a fresh value per run.
    pub incarnation: u64,
    /// `group.initial.rebalance.delay.ms`: the first generation of an empty group forms this
    /// long after its first join (each later join extends it, up to the rebalance timeout),
    /// so members that start together form one generation instead of rebalancing per member.
    pub initial_rebalance_delay_ms: u64,
}

impl Default for GroupConfig {
    fn default() -> Self {
        GroupConfig {
            min_session_timeout_ms: 1_000,
            max_session_timeout_ms: 300_000,
            max_members: 1_000,
            max_offset_metadata: 4096,
            max_offsets: 100_000,
            incarnation: 0,
            initial_rebalance_delay_ms: 3_000,
        }
    }
}

/// Where a group is in its life (Kafka's states).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupState {
    /// No members (offsets may still be stored).
    Empty,
    /// Waiting for every member to (re)join.
    PreparingRebalance,
    /// Joined; waiting for the leader's assignment.
    CompletingRebalance,
    Stable,
}

/// A refused request: a Kafka error code and a message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct GroupError {
    pub code: ErrorCode,
    pub message: String,
}

fn err(code: ErrorCode, message: impl Into<String>) -> GroupError {
    GroupError {
        code,
        message: message.into(),
    }
}

/// A JoinGroup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinRequest {
    /// Empty for a new member; the coordinator picks its id.
    pub member_id: String,
    /// Static membership (`group.instance.id`): survives restarts without a rebalance.
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub session_timeout_ms: u64,
    pub rebalance_timeout_ms: u64,
    pub protocol_type: String,
    /// Assignor names with the member's metadata (subscription), in preference order.
    pub protocols: Vec<(String, Vec<u8>)>,
}

/// A JoinGroup answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinResult {
    pub generation: u32,
    pub protocol: String,
    pub leader: String,
    pub member_id: String,
    /// For the leader only: every member with its metadata for the chosen protocol.
    pub members: Vec<(String, Option<String>, Vec<u8>)>,
}

/// A SyncGroup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyncRequest {
    pub member_id: String,
    /// The static instance id the member joined with, if any.
    pub group_instance_id: Option<String>,
    pub generation: u32,
    /// From the leader: every member's assignment; empty from the others.
    pub assignments: Vec<(String, Vec<u8>)>,
}

/// What the state machine asks the shell to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    JoinReply(Token, Result<JoinResult, GroupError>),
    /// The member's assignment for the generation.
    SyncReply(Token, Result<Vec<u8>, GroupError>),
}

/// One member as DescribeGroups shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberDescription {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub assignment: Vec<u8>,
}

/// A committed offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommittedOffset {
    pub offset: u64,
    pub leader_epoch: Option<i32>,
    pub metadata: String,
    pub commit_time_ms: u64,
}

#[derive(Debug, Clone)]
struct Member {
    instance_id: Option<String>,
    client_id: String,
    session_timeout_ms: u64,
    rebalance_timeout_ms: u64,
    protocols: Vec<(String, Vec<u8>)>,
    last_heard_ms: u64,
    pending_join: Option<Token>,
    pending_sync: Option<Token>,
    /// Joined in the current rebalance round.
    joined: bool,
    assignment: Vec<u8>,
}

/// One group.
#[derive(Debug)]
pub struct Group {
    pub id: String,
    cfg: GroupConfig,
    state: GroupState,
    generation: u32,
    protocol_type: Option<String>,
    protocol: Option<String>,
    leader: Option<String>,
    members: BTreeMap<String, Member>,
    /// Static instance id -> member id.
    instances: HashMap<String, String>,
    rebalance_deadline_ms: Option<u64>,
    /// While an empty group's first generation waits for more members: the join completes
    /// no earlier than this (`initial_rebalance_delay_ms`).
    initial_join_at_ms: Option<u64>,
    next_member: u64,
    offsets: BTreeMap<(String, u32), CommittedOffset>,
}

impl GroupState {
    /// Kafka's name of the state.
    pub fn name(self) -> &'static str {
        match self {
            GroupState::Empty => "Empty",
            GroupState::PreparingRebalance => "PreparingRebalance",
            GroupState::CompletingRebalance => "CompletingRebalance",
            GroupState::Stable => "Stable",
        }
    }
}

impl Group {
    pub fn new(id: impl Into<String>, cfg: GroupConfig) -> Group {
        Group {
            id: id.into(),
            cfg,
            state: GroupState::Empty,
            generation: 0,
            protocol_type: None,
            protocol: None,
            leader: None,
            members: BTreeMap::new(),
            instances: HashMap::new(),
            rebalance_deadline_ms: None,
            initial_join_at_ms: None,
            next_member: 0,
            offsets: BTreeMap::new(),
        }
    }

    pub fn state(&self) -> GroupState {
        self.state
    }
    pub fn generation(&self) -> u32 {
        self.generation
    }
    pub fn leader(&self) -> Option<&str> {
        self.leader.as_deref()
    }
    pub fn protocol(&self) -> Option<&str> {
        self.protocol.as_deref()
    }
    /// The protocol type the members joined with (e.g. "consumer"); kept once the group is
    /// empty again, as Kafka does. `None` until a member joined.
    pub fn protocol_type(&self) -> Option<&str> {
        self.protocol_type.as_deref()
    }
    pub fn member_ids(&self) -> Vec<String> {
        self.members.keys().cloned().collect()
    }
    /// Every member, for DescribeGroups and `rill group describe`.
    pub fn describe_members(&self) -> Vec<MemberDescription> {
        self.members
            .iter()
            .map(|(id, m)| MemberDescription {
                member_id: id.clone(),
                group_instance_id: m.instance_id.clone(),
                client_id: m.client_id.clone(),
                assignment: m.assignment.clone(),
            })
            .collect()
    }

    /// The member id a static instance id belongs to now.
    pub fn member_of_instance(&self, instance: &str) -> Option<&str> {
        self.instances.get(instance).map(String::as_str)
    }

    /// A member's current assignment bytes.
    pub fn assignment(&self, member_id: &str) -> Option<&[u8]> {
        self.members.get(member_id).map(|m| m.assignment.as_slice())
    }

    /// JoinGroup: a new member, a rejoin, or a static member coming back.
    pub fn join(&mut self, now_ms: u64, req: JoinRequest, token: Token) -> Vec<Action> {
        let reply_err = |e: GroupError| vec![Action::JoinReply(token, Err(e))];
        if req.session_timeout_ms < self.cfg.min_session_timeout_ms
            || req.session_timeout_ms > self.cfg.max_session_timeout_ms
        {
            return reply_err(err(
                ErrorCode::InvalidSessionTimeout,
                format!(
                    "session timeout {} ms outside {}..={} ms",
                    req.session_timeout_ms,
                    self.cfg.min_session_timeout_ms,
                    self.cfg.max_session_timeout_ms
                ),
            ));
        }
        if req.protocols.is_empty() || req.protocol_type.is_empty() {
            return reply_err(err(
                ErrorCode::InconsistentGroupProtocol,
                "no protocol given",
            ));
        }
        if let Some(t) = &self.protocol_type {
            if !self.members.is_empty() && *t != req.protocol_type {
                return reply_err(err(
                    ErrorCode::InconsistentGroupProtocol,
                    format!(
                        "group uses protocol type {t:?}, not {:?}",
                        req.protocol_type
                    ),
                ));
            }
        }
        // Checked against the other members: one rejoining (by member id, or as the holder of
        // its static instance) may change its own assignors.
        let own = match (&req.group_instance_id, req.member_id.is_empty()) {
            (_, false) => Some(req.member_id.clone()),
            (Some(instance), true) => self.instances.get(instance).cloned(),
            (None, true) => None,
        };
        if !self.members.is_empty() && !self.has_common_protocol(&req.protocols, own.as_deref()) {
            return reply_err(err(
                ErrorCode::InconsistentGroupProtocol,
                "no assignor in common with the group's members",
            ));
        }
        // Resolve who this is.
        let mut fenced = Vec::new();
        let member_id = match (&req.group_instance_id, req.member_id.is_empty()) {
            (Some(instance), _) => match self.instances.get(instance).cloned() {
                Some(known) if !req.member_id.is_empty() && req.member_id != known => {
                    return reply_err(err(
                        ErrorCode::FencedInstanceId,
                        format!("instance {instance:?} belongs to member {known:?} now"),
                    ));
                }
                // The instance comes back without its member id (a restarted process, or a
                // second one started with the same instance id): as Kafka does, it gets a
                // fresh member id and takes over the old membership, whose holder is fenced
                // (FENCED_INSTANCE_ID from then on).
                Some(known) if req.member_id.is_empty() => {
                    let fresh = self.new_member_id(&req.client_id);
                    fenced = self.replace_member(&known, &fresh, instance);
                    fresh
                }
                Some(known) => known,
                None => self.new_member_id(&req.client_id),
            },
            (None, true) => self.new_member_id(&req.client_id),
            (None, false) => {
                if !self.members.contains_key(&req.member_id) {
                    return reply_err(err(
                        ErrorCode::UnknownMemberId,
                        format!("member {:?} is not in group {:?}", req.member_id, self.id),
                    ));
                }
                req.member_id.clone()
            }
        };
        let is_new = !self.members.contains_key(&member_id);
        if is_new && self.members.len() >= self.cfg.max_members {
            return reply_err(err(
                ErrorCode::GroupMaxSizeReached,
                format!(
                    "group {:?} has the maximum of {} members",
                    self.id, self.cfg.max_members
                ),
            ));
        }
        let unchanged = self
            .members
            .get(&member_id)
            .is_some_and(|m| m.protocols == req.protocols);
        // A static member coming back after a restart (its instance id known, its member id
        // forgotten): its metadata may differ from what it sent before (a cooperative member
        // lists what it owns, and a new process owns nothing yet).
        let static_restart = req.member_id.is_empty() && req.group_instance_id.is_some() && !is_new;
        if let Some(instance) = &req.group_instance_id {
            self.instances.insert(instance.clone(), member_id.clone());
        }
        self.protocol_type = Some(req.protocol_type.clone());
        let member = self
            .members
            .entry(member_id.clone())
            .or_insert_with(|| Member {
                instance_id: req.group_instance_id.clone(),
                client_id: req.client_id.clone(),
                session_timeout_ms: req.session_timeout_ms,
                rebalance_timeout_ms: req.rebalance_timeout_ms,
                protocols: Vec::new(),
                last_heard_ms: now_ms,
                pending_join: None,
                pending_sync: None,
                joined: false,
                assignment: Vec::new(),
            });
        member.protocols = req.protocols;
        member.session_timeout_ms = req.session_timeout_ms;
        member.rebalance_timeout_ms = req.rebalance_timeout_ms;
        member.last_heard_ms = now_ms;
        let mut out = fenced;
        // A second join replaces the first: answer the old one so nothing dangles.
        if let Some(old) = member.pending_join.replace(token) {
            out.push(Action::JoinReply(
                old,
                Err(err(
                    ErrorCode::RebalanceInProgress,
                    "superseded by a newer join",
                )),
            ));
        }
        member.joined = true;
        // A known member rejoining a stable group with the same subscription (a consumer
        // that lost its join reply), or a static member restarting that keeps the group's
        // protocol what it is (Kafka's rule; its metadata is not compared): no rebalance,
        // its assignment stays. The leader rejoining under its member id always rebalances:
        // it does so when the partitions it assigns changed (a static leader restarting
        // comes without its member id).
        let leader_asks =
            !req.member_id.is_empty() && self.leader.as_deref() == Some(member_id.as_str());
        let keeps_protocol = static_restart && self.choose_protocol() == self.protocol;
        if self.state == GroupState::Stable
            && !is_new
            && (unchanged || keeps_protocol)
            && !leader_asks
        {
            let m = self.members.get_mut(&member_id).expect("present");
            let t = m.pending_join.take().expect("just set");
            out.push(Action::JoinReply(t, Ok(self.join_result(&member_id))));
            return out;
        }
        let was_empty = self.state == GroupState::Empty;
        if self.state != GroupState::PreparingRebalance {
            self.prepare_rebalance(now_ms);
        }
        if was_empty || self.initial_join_at_ms.is_some() {
            self.delay_initial_join(now_ms);
        }
        out.extend(self.try_complete_join(now_ms));
        out
    }

    /// The first generation of an empty group waits `initial_rebalance_delay_ms` after each
    /// join for more members, never past the rebalance deadline (Kafka's delayed initial join).
    fn delay_initial_join(&mut self, now_ms: u64) {
        let delay = self.cfg.initial_rebalance_delay_ms;
        if delay == 0 {
            return;
        }
        let at = now_ms + delay;
        let at = self.rebalance_deadline_ms.map_or(at, |d| at.min(d));
        self.initial_join_at_ms = Some(at);
    }

    /// Moves the membership of `old` (a static member's) to `fresh`: its assignment,
    /// leadership and generation stay; requests parked for `old` are answered
    /// FENCED_INSTANCE_ID.
    fn replace_member(&mut self, old: &str, fresh: &str, instance: &str) -> Vec<Action> {
        let mut out = Vec::new();
        let Some(mut m) = self.members.remove(old) else {
            return out;
        };
        let fenced = || {
            err(
                ErrorCode::FencedInstanceId,
                format!("instance {instance:?} joined again"),
            )
        };
        if let Some(t) = m.pending_join.take() {
            out.push(Action::JoinReply(t, Err(fenced())));
        }
        if let Some(t) = m.pending_sync.take() {
            out.push(Action::SyncReply(t, Err(fenced())));
        }
        self.members.insert(fresh.to_string(), m);
        self.instances
            .insert(instance.to_string(), fresh.to_string());
        if self.leader.as_deref() == Some(old) {
            self.leader = Some(fresh.to_string());
        }
        out
    }

    /// A request naming a static instance that now belongs to another member comes from the
    /// instance's old holder: FENCED_INSTANCE_ID (fatal to it, so two processes with one
    /// instance id do not take the membership from each other in turn).
    fn check_instance(&self, member_id: &str, instance: Option<&str>) -> Result<(), GroupError> {
        match instance.and_then(|i| self.instances.get(i).map(|m| (i, m))) {
            Some((i, holder)) if holder != member_id => Err(err(
                ErrorCode::FencedInstanceId,
                format!("instance {i:?} belongs to member {holder:?} now"),
            )),
            _ => Ok(()),
        }
    }

    fn new_member_id(&mut self, client_id: &str) -> String {
        self.next_member += 1;
        let client = if client_id.is_empty() {
            "member"
        } else {
            client_id
        };
        format!("{client}-{:x}-{}", self.cfg.incarnation, self.next_member)
    }

    fn has_common_protocol(&self, protocols: &[(String, Vec<u8>)], own: Option<&str>) -> bool {
        protocols.iter().any(|(name, _)| {
            self.members
                .iter()
                .filter(|(id, _)| Some(id.as_str()) != own)
                .all(|(_, m)| m.protocols.iter().any(|(n, _)| n == name))
        })
    }

    fn prepare_rebalance(&mut self, now_ms: u64) {
        self.state = GroupState::PreparingRebalance;
        let timeout = self
            .members
            .values()
            .map(|m| m.rebalance_timeout_ms)
            .max()
            .unwrap_or(0);
        self.rebalance_deadline_ms = Some(now_ms + timeout);
        for m in self.members.values_mut() {
            m.assignment.clear();
            // Members waiting on a sync of the old generation must rejoin.
            m.joined = m.pending_join.is_some();
        }
    }

    /// Completes the join phase once every member rejoined (or, from `tick`, at the deadline,
    /// dropping those that did not).
    fn try_complete_join(&mut self, now_ms: u64) -> Vec<Action> {
        if self.state != GroupState::PreparingRebalance {
            return Vec::new();
        }
        let all_joined = self.members.values().all(|m| m.joined);
        let deadline_passed = self.rebalance_deadline_ms.is_some_and(|d| now_ms >= d);
        if !all_joined && !deadline_passed {
            return Vec::new();
        }
        if self.initial_join_at_ms.is_some_and(|at| now_ms < at) {
            return Vec::new();
        }
        self.initial_join_at_ms = None;
        let mut out = Vec::new();
        let stragglers: Vec<String> = self
            .members
            .iter()
            .filter(|(_, m)| !m.joined)
            .map(|(id, _)| id.clone())
            .collect();
        for id in stragglers {
            out.extend(self.drop_member(&id));
        }
        if self.members.is_empty() {
            self.state = GroupState::Empty;
            self.leader = None;
            self.protocol = None;
            self.generation += 1;
            return out;
        }
        self.generation += 1;
        self.protocol = self.choose_protocol();
        if self
            .leader
            .as_ref()
            .is_none_or(|l| !self.members.contains_key(l))
        {
            self.leader = self.members.keys().next().cloned();
        }
        self.state = GroupState::CompletingRebalance;
        self.rebalance_deadline_ms = None;
        let ids: Vec<String> = self.members.keys().cloned().collect();
        for id in ids {
            let result = self.join_result(&id);
            let m = self.members.get_mut(&id).expect("present");
            m.joined = false;
            m.last_heard_ms = now_ms;
            if let Some(t) = m.pending_join.take() {
                out.push(Action::JoinReply(t, Ok(result)));
            }
        }
        out
    }

    /// The first protocol of the leader-to-be's list that every member supports.
    fn choose_protocol(&self) -> Option<String> {
        let first = self.members.values().next()?;
        first
            .protocols
            .iter()
            .map(|(n, _)| n)
            .find(|name| {
                self.members
                    .values()
                    .all(|m| m.protocols.iter().any(|(n, _)| n == *name))
            })
            .cloned()
    }

    fn join_result(&self, member_id: &str) -> JoinResult {
        let protocol = self.protocol.clone().unwrap_or_default();
        let leader = self.leader.clone().unwrap_or_default();
        let members = if leader == member_id {
            self.members
                .iter()
                .map(|(id, m)| {
                    let meta = m
                        .protocols
                        .iter()
                        .find(|(n, _)| *n == protocol)
                        .map(|(_, md)| md.clone())
                        .unwrap_or_default();
                    (id.clone(), m.instance_id.clone(), meta)
                })
                .collect()
        } else {
            Vec::new()
        };
        JoinResult {
            generation: self.generation,
            protocol,
            leader,
            member_id: member_id.to_string(),
            members,
        }
    }

    /// Validates a member id and generation against the group.
    fn check_member(&self, member_id: &str, generation: u32) -> Result<(), GroupError> {
        if !self.members.contains_key(member_id) {
            return Err(err(
                ErrorCode::UnknownMemberId,
                format!("member {member_id:?} is not in group {:?}", self.id),
            ));
        }
        if generation != self.generation {
            return Err(err(
                ErrorCode::IllegalGeneration,
                format!(
                    "generation {generation} is not the group's generation {}",
                    self.generation
                ),
            ));
        }
        Ok(())
    }

    /// SyncGroup: the leader hands in the assignment; everyone gets their share.
    pub fn sync(&mut self, now_ms: u64, req: SyncRequest, token: Token) -> Vec<Action> {
        if let Err(e) = self
            .check_instance(&req.member_id, req.group_instance_id.as_deref())
            .and_then(|()| self.check_member(&req.member_id, req.generation))
        {
            return vec![Action::SyncReply(token, Err(e))];
        }
        match self.state {
            GroupState::PreparingRebalance => {
                return vec![Action::SyncReply(
                    token,
                    Err(err(
                        ErrorCode::RebalanceInProgress,
                        "the group is rebalancing: rejoin",
                    )),
                )]
            }
            GroupState::Stable => {
                let a = self.members[&req.member_id].assignment.clone();
                return vec![Action::SyncReply(token, Ok(a))];
            }
            GroupState::Empty => {
                return vec![Action::SyncReply(
                    token,
                    Err(err(ErrorCode::UnknownMemberId, "the group is empty")),
                )]
            }
            GroupState::CompletingRebalance => {}
        }
        let mut out = Vec::new();
        {
            let m = self.members.get_mut(&req.member_id).expect("checked");
            m.last_heard_ms = now_ms;
            if let Some(old) = m.pending_sync.replace(token) {
                out.push(Action::SyncReply(
                    old,
                    Err(err(ErrorCode::RebalanceInProgress, "superseded")),
                ));
            }
        }
        if self.leader.as_deref() == Some(req.member_id.as_str()) {
            for (id, assignment) in req.assignments {
                if let Some(m) = self.members.get_mut(&id) {
                    m.assignment = assignment;
                }
            }
            self.state = GroupState::Stable;
            for m in self.members.values_mut() {
                if let Some(t) = m.pending_sync.take() {
                    out.push(Action::SyncReply(t, Ok(m.assignment.clone())));
                }
            }
        }
        out
    }

    /// Heartbeat: keeps the member's session alive and tells it when to rejoin.
    pub fn heartbeat(
        &mut self,
        now_ms: u64,
        member_id: &str,
        instance: Option<&str>,
        generation: u32,
    ) -> Result<(), GroupError> {
        self.check_instance(member_id, instance)?;
        if !self.members.contains_key(member_id) {
            return Err(err(
                ErrorCode::UnknownMemberId,
                format!("member {member_id:?} is not in group {:?}", self.id),
            ));
        }
        self.members
            .get_mut(member_id)
            .expect("checked")
            .last_heard_ms = now_ms;
        if self.state == GroupState::PreparingRebalance {
            return Err(err(
                ErrorCode::RebalanceInProgress,
                "the group is rebalancing: rejoin",
            ));
        }
        self.check_member(member_id, generation)
    }

    /// LeaveGroup: the member goes now (same path as a crash detected by session timeout).
    pub fn leave(&mut self, now_ms: u64, member_id: &str) -> Result<Vec<Action>, GroupError> {
        if !self.members.contains_key(member_id) {
            return Err(err(
                ErrorCode::UnknownMemberId,
                format!("member {member_id:?} is not in group {:?}", self.id),
            ));
        }
        Ok(self.remove_member(now_ms, member_id))
    }

    /// Removes a member and rebalances the rest: the one code path for leaving and crashing.
    pub fn remove_member(&mut self, now_ms: u64, member_id: &str) -> Vec<Action> {
        let mut out = self.drop_member(member_id);
        if self.members.is_empty() {
            self.state = GroupState::Empty;
            self.leader = None;
            self.protocol = None;
            self.generation += 1;
            return out;
        }
        if self.state != GroupState::PreparingRebalance {
            self.prepare_rebalance(now_ms);
        }
        out.extend(self.try_complete_join(now_ms));
        out
    }

    fn drop_member(&mut self, member_id: &str) -> Vec<Action> {
        let Some(m) = self.members.remove(member_id) else {
            return Vec::new();
        };
        if let Some(instance) = &m.instance_id {
            if self.instances.get(instance).map(String::as_str) == Some(member_id) {
                self.instances.remove(instance);
            }
        }
        let gone = || err(ErrorCode::UnknownMemberId, "removed from the group");
        let mut out = Vec::new();
        if let Some(t) = m.pending_join {
            out.push(Action::JoinReply(t, Err(gone())));
        }
        if let Some(t) = m.pending_sync {
            out.push(Action::SyncReply(t, Err(gone())));
        }
        out
    }

    /// Time passes: expires sessions and rebalance deadlines. Returns the replies that became
    /// due and the ids of members whose session expired.
    pub fn tick(&mut self, now_ms: u64) -> (Vec<Action>, Vec<String>) {
        let expired: Vec<String> = self
            .members
            .iter()
            .filter(|(_, m)| {
                m.pending_join.is_none()
                    && now_ms.saturating_sub(m.last_heard_ms) > m.session_timeout_ms
            })
            .map(|(id, _)| id.clone())
            .collect();
        let mut out = Vec::new();
        for id in &expired {
            out.extend(self.remove_member(now_ms, id));
        }
        out.extend(self.try_complete_join(now_ms));
        (out, expired)
    }

    /// Whether the group accepts this commit: from a member of the current generation, or
    /// (generation -1 and no member id) from a consumer outside any group while the group has
    /// no members. Nothing is stored: the shell makes a commit durable first, then calls
    /// [`Group::store_commit`].
    pub fn check_commit(
        &self,
        member_id: &str,
        instance: Option<&str>,
        generation: i32,
        offsets: &[PartitionOffset],
    ) -> Result<(), GroupError> {
        // Before the member check: a replaced static member must learn it is fenced, not
        // that it is unknown (it would rejoin without a member id and take the instance back).
        self.check_instance(member_id, instance)?;
        if generation < 0 && member_id.is_empty() {
            if !self.members.is_empty() {
                return Err(err(
                    ErrorCode::UnknownMemberId,
                    "the group has members: commit as one of them",
                ));
            }
        } else {
            self.check_member(member_id, generation as u32)?;
            // While the group prepares a rebalance the generation is still valid: members
            // commit what they processed before they rejoin (Kafka accepts these too). Once
            // the join completed, the old generation's assignment is void.
            if self.state == GroupState::CompletingRebalance {
                return Err(err(
                    ErrorCode::RebalanceInProgress,
                    "the group is rebalancing",
                ));
            }
        }
        self.check_offset_limits(offsets)
    }

    /// The limits every commit meets whoever sends it (a classic member, a consumer-protocol
    /// member checked by its own group, or an outsider): metadata size and the bound on
    /// partitions with committed offsets.
    pub fn check_offset_limits(&self, offsets: &[PartitionOffset]) -> Result<(), GroupError> {
        if let Some(o) = offsets
            .iter()
            .find(|o| o.metadata.len() > self.cfg.max_offset_metadata)
        {
            return Err(err(
                ErrorCode::OffsetMetadataTooLarge,
                format!(
                    "metadata of {}-{} exceeds {} bytes",
                    o.topic, o.partition, self.cfg.max_offset_metadata
                ),
            ));
        }
        let new: std::collections::HashSet<_> = offsets
            .iter()
            .map(|o| (o.topic.as_str(), o.partition))
            .filter(|(t, p)| self.committed(t, *p).is_none())
            .collect();
        // Commits in flight are checked against what is stored, so concurrent ones may pass
        // the bound together by what they add (bounded by the connections committing).
        if self.offsets.len() + new.len() > self.cfg.max_offsets {
            // Kafka's answer to a commit it cannot store for its size: not retriable, the
            // client fails this commit only.
            return Err(err(
                ErrorCode::InvalidCommitOffsetSize,
                format!(
                    "group {:?} would hold {} committed offsets, more than the maximum of {} \
                     (--max-offsets-per-group)",
                    self.id,
                    self.offsets.len() + new.len(),
                    self.cfg.max_offsets
                ),
            ));
        }
        Ok(())
    }

    /// Stores a commit that [`Group::check_commit`] accepted and the shell made durable, or
    /// one replayed from the log (`member_id` empty). A commit is a sign of life: the
    /// committing member's session is refreshed, as Kafka does.
    pub fn store_commit(
        &mut self,
        now_ms: u64,
        member_id: &str,
        offsets: impl IntoIterator<Item = PartitionOffset>,
    ) {
        if let Some(m) = self.members.get_mut(member_id) {
            m.last_heard_ms = now_ms;
        }
        for o in offsets {
            self.offsets.insert(
                (o.topic, o.partition),
                CommittedOffset {
                    offset: o.offset,
                    leader_epoch: o.leader_epoch,
                    metadata: o.metadata,
                    commit_time_ms: now_ms,
                },
            );
        }
    }

    /// Every committed offset of the group, sorted by topic and partition.
    pub fn all_committed(&self) -> impl Iterator<Item = PartitionOffset> + '_ {
        self.offsets
            .iter()
            .map(|((topic, partition), c)| PartitionOffset {
                topic: topic.clone(),
                partition: *partition,
                offset: c.offset,
                leader_epoch: c.leader_epoch,
                metadata: c.metadata.clone(),
            })
    }

    /// Forgets the committed offsets of `partitions` (DeleteGroups, OffsetDelete); the
    /// shell writes their tombstones.
    pub fn remove_offsets(&mut self, partitions: &[(String, u32)]) {
        for key in partitions {
            self.offsets.remove(key);
        }
    }

    /// Topics the members subscribe to, from their consumer-protocol metadata (every
    /// protocol they offered: each names the same subscription). Empty for a group of
    /// another protocol type, or without members.
    pub fn subscribed_topics(&self) -> std::collections::BTreeSet<String> {
        if self.protocol_type.as_deref() != Some("consumer") {
            return Default::default();
        }
        self.members
            .values()
            .flat_map(|m| m.protocols.iter())
            .filter_map(|(_, metadata)| {
                super::consumer_protocol::Subscription::decode(metadata).ok()
            })
            .flat_map(|s| s.topics)
            .collect()
    }

    /// Whether the group stores any committed offset.
    pub fn has_offsets(&self) -> bool {
        !self.offsets.is_empty()
    }

    /// The committed offset of a partition, if any.
    pub fn committed(&self, topic: &str, partition: u32) -> Option<&CommittedOffset> {
        self.offsets.get(&(topic.to_string(), partition))
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

    /// A commit as the shell runs it: checked, (made durable,) stored.
    fn commit(
        g: &mut Group,
        now_ms: u64,
        member_id: &str,
        generation: i32,
        offsets: &[PartitionOffset],
    ) -> Result<(), GroupError> {
        g.check_commit(member_id, None, generation, offsets)?;
        g.store_commit(now_ms, member_id, offsets.to_vec());
        Ok(())
    }

    fn join_req(member: &str, instance: Option<&str>, topics: &str) -> JoinRequest {
        JoinRequest {
            member_id: member.to_string(),
            group_instance_id: instance.map(str::to_string),
            client_id: "c".into(),
            session_timeout_ms: 10_000,
            rebalance_timeout_ms: 30_000,
            protocol_type: "consumer".into(),
            protocols: vec![("range".into(), topics.as_bytes().to_vec())],
        }
    }

    fn joined(actions: &[Action], token: Token) -> JoinResult {
        actions
            .iter()
            .find_map(|a| match a {
                Action::JoinReply(t, Ok(r)) if *t == token => Some(r.clone()),
                _ => None,
            })
            .unwrap_or_else(|| panic!("no join reply for {token} in {actions:?}"))
    }

    fn synced(actions: &[Action], token: Token) -> Vec<u8> {
        actions
            .iter()
            .find_map(|a| match a {
                Action::SyncReply(t, Ok(r)) if *t == token => Some(r.clone()),
                _ => None,
            })
            .unwrap_or_else(|| panic!("no sync reply for {token} in {actions:?}"))
    }

    /// Two members through a full rebalance; returns their ids (leader first).
    fn two_members(g: &mut Group) -> (String, String) {
        let a = g.join(0, join_req("", None, "t"), 1);
        let ra = joined(&a, 1);
        assert_eq!(ra.generation, 1);
        assert_eq!(ra.leader, ra.member_id);
        // The leader syncs; the group is stable with one member.
        let s = g.sync(
            1,
            SyncRequest {
                member_id: ra.member_id.clone(),
                group_instance_id: None,
                generation: 1,
                assignments: vec![(ra.member_id.clone(), b"all".to_vec())],
            },
            2,
        );
        assert_eq!(synced(&s, 2), b"all");
        // A second member starts a rebalance; the first learns it from its heartbeat.
        let b = g.join(2, join_req("", None, "t"), 3);
        assert!(b.is_empty(), "the join waits for the others");
        assert_eq!(
            g.heartbeat(3, &ra.member_id, None, 1).unwrap_err().code,
            ErrorCode::RebalanceInProgress
        );
        let a2 = g.join(4, join_req(&ra.member_id, None, "t"), 4);
        let (r1, r2) = (joined(&a2, 4), joined(&a2, 3));
        assert_eq!(r1.generation, 2);
        assert_eq!(
            r1.leader, ra.member_id,
            "the leader stays while it is a member"
        );
        assert_eq!(r1.members.len(), 2, "the leader sees every member");
        assert!(r2.members.is_empty());
        (r1.member_id, r2.member_id)
    }

    /// Members that start together form one first generation: the join of an empty group
    /// waits the initial delay after each join, never past the rebalance deadline.
    #[test]
    fn an_empty_group_waits_the_initial_delay_for_more_members() {
        let cfg = GroupConfig {
            initial_rebalance_delay_ms: 3_000,
            ..GroupConfig::default()
        };
        let mut g = Group::new("g", cfg);
        assert!(g.join(0, join_req("", None, "t"), 1).is_empty(), "waits");
        assert!(
            g.join(2_000, join_req("", None, "t"), 2).is_empty(),
            "extended"
        );
        assert!(
            g.tick(4_999).0.is_empty(),
            "3 s after the last join, not before"
        );
        let (out, _) = g.tick(5_000);
        let (a, b) = (joined(&out, 1), joined(&out, 2));
        assert_eq!(
            (a.generation, b.generation),
            (1, 1),
            "one generation for both"
        );
        assert_eq!(g.state(), GroupState::CompletingRebalance);

        // Joins keep coming: the delay ends at the rebalance deadline all the same.
        let mut g = Group::new(
            "h",
            GroupConfig {
                initial_rebalance_delay_ms: 3_000,
                ..GroupConfig::default()
            },
        );
        let mut req = join_req("", None, "t");
        req.rebalance_timeout_ms = 4_000;
        assert!(g.join(0, req.clone(), 1).is_empty());
        assert!(g.join(2_500, req.clone(), 2).is_empty());
        assert!(g.join(3_900, req, 3).is_empty());
        let (out, _) = g.tick(4_000);
        assert_eq!(out.len(), 3, "completed at the deadline: {out:?}");
    }

    #[test]
    fn a_rejoining_leader_rebalances_a_rejoining_follower_does_not() {
        let mut g = Group::new("g", no_delay());
        let (leader, follower) = two_members(&mut g);
        let out = g.sync(
            5,
            SyncRequest {
                member_id: leader.clone(),
                group_instance_id: None,
                generation: 2,
                assignments: vec![
                    (leader.clone(), b"l".to_vec()),
                    (follower.clone(), b"f".to_vec()),
                ],
            },
            10,
        );
        synced(&out, 10);
        assert_eq!(g.state(), GroupState::Stable);
        // The follower asks again with the same subscription: its current generation back.
        let out = g.join(6, join_req(&follower, None, "t"), 11);
        assert_eq!(joined(&out, 11).generation, 2);
        assert_eq!(g.state(), GroupState::Stable);
        // The leader asks again (partition counts changed): a new round for everyone.
        let out = g.join(7, join_req(&leader, None, "t"), 12);
        assert!(out.is_empty(), "waits for the follower: {out:?}");
        assert_eq!(g.state(), GroupState::PreparingRebalance);
        let out = g.join(8, join_req(&follower, None, "t"), 13);
        assert_eq!(
            (joined(&out, 12).generation, joined(&out, 13).generation),
            (3, 3)
        );
    }

    #[test]
    fn join_sync_heartbeat_round_trip() {
        let mut g = Group::new("g", no_delay());
        let (leader, follower) = two_members(&mut g);
        assert_eq!(g.state(), GroupState::CompletingRebalance);
        // The follower's sync waits for the leader's.
        assert!(g
            .sync(
                5,
                SyncRequest {
                    member_id: follower.clone(),
                    group_instance_id: None,
                    generation: 2,
                    assignments: vec![]
                },
                10
            )
            .is_empty());
        let out = g.sync(
            6,
            SyncRequest {
                member_id: leader.clone(),
                group_instance_id: None,
                generation: 2,
                assignments: vec![
                    (leader.clone(), b"p0".to_vec()),
                    (follower.clone(), b"p1".to_vec()),
                ],
            },
            11,
        );
        assert_eq!(synced(&out, 10), b"p1");
        assert_eq!(synced(&out, 11), b"p0");
        assert_eq!(g.state(), GroupState::Stable);
        assert!(g.heartbeat(7, &follower, None, 2).is_ok());
    }

    #[test]
    fn stale_generations_and_unknown_members_are_refused() {
        let mut g = Group::new("g", no_delay());
        let (leader, follower) = two_members(&mut g);
        let out = g.sync(
            5,
            SyncRequest {
                member_id: leader.clone(),
                group_instance_id: None,
                generation: 2,
                assignments: vec![],
            },
            7,
        );
        synced(&out, 7);
        assert_eq!(
            g.heartbeat(6, &follower, None, 1).unwrap_err().code,
            ErrorCode::IllegalGeneration
        );
        assert_eq!(
            g.heartbeat(6, "ghost", None, 2).unwrap_err().code,
            ErrorCode::UnknownMemberId
        );
        let e = commit(&mut g, 6, "ghost", 2, &[PartitionOffset::new("t", 0, 5)]).unwrap_err();
        assert_eq!(e.code, ErrorCode::UnknownMemberId);
        let e = commit(&mut g, 6, &follower, 1, &[PartitionOffset::new("t", 0, 5)]).unwrap_err();
        assert_eq!(e.code, ErrorCode::IllegalGeneration);
        assert!(
            g.committed("t", 0).is_none(),
            "a refused commit stored nothing"
        );
        commit(
            &mut g,
            6,
            &follower,
            2,
            &[PartitionOffset {
                metadata: "m".into(),
                ..PartitionOffset::new("t", 0, 5)
            }],
        )
        .unwrap();
        assert_eq!(g.committed("t", 0).unwrap().offset, 5);
        let e = g.join(7, join_req("ghost", None, "t"), 9);
        assert!(
            matches!(&e[0], Action::JoinReply(9, Err(e)) if e.code == ErrorCode::UnknownMemberId)
        );
        assert_eq!(
            g.state(),
            GroupState::Stable,
            "bad input did not disturb the group"
        );
        assert_eq!(g.generation(), 2);
    }

    #[test]
    fn a_crashed_member_is_removed_at_its_session_timeout_like_a_leaver() {
        let mut g = Group::new("g", no_delay());
        let (leader, follower) = two_members(&mut g);
        let out = g.sync(
            5,
            SyncRequest {
                member_id: leader.clone(),
                group_instance_id: None,
                generation: 2,
                assignments: vec![],
            },
            7,
        );
        synced(&out, 7);
        // The leader keeps heartbeating; the follower goes silent.
        for t in (1_000..=9_000).step_by(1_000) {
            g.heartbeat(t, &leader, None, 2).unwrap();
            assert!(g.tick(t).1.is_empty());
        }
        g.heartbeat(10_000, &leader, None, 2).unwrap();
        let (_, expired) = g.tick(10_006);
        assert_eq!(expired, vec![follower.clone()]);
        assert_eq!(g.state(), GroupState::PreparingRebalance);
        assert_eq!(
            g.heartbeat(10_007, &follower, None, 2).unwrap_err().code,
            ErrorCode::UnknownMemberId
        );
        // The survivor rejoins alone: generation 3 with one member.
        let out = g.join(10_008, join_req(&leader, None, "t"), 20);
        let r = joined(&out, 20);
        assert_eq!((r.generation, r.members.len()), (3, 1));
    }

    #[test]
    fn rebalance_deadline_drops_members_that_do_not_rejoin() {
        let mut g = Group::new("g", no_delay());
        let (leader, follower) = two_members(&mut g);
        let out = g.sync(
            5,
            SyncRequest {
                member_id: leader.clone(),
                group_instance_id: None,
                generation: 2,
                assignments: vec![],
            },
            7,
        );
        synced(&out, 7);
        // A third member triggers a rebalance; only the leader rejoins.
        assert!(g.join(100, join_req("", None, "t"), 30).is_empty());
        assert!(g.join(101, join_req(&leader, None, "t"), 31).is_empty());
        let (out, _) = g.tick(100 + 30_000);
        let r = joined(&out, 31);
        assert_eq!(r.generation, 3);
        assert_eq!(r.members.len(), 2);
        assert!(!r.members.iter().any(|(id, _, _)| *id == follower));
    }

    #[test]
    fn a_static_member_restarting_keeps_its_assignment_without_a_rebalance() {
        let mut g = Group::new("g", no_delay());
        let a = g.join(0, join_req("", Some("host-a"), "t"), 1);
        let ra = joined(&a, 1);
        let s = g.sync(
            1,
            SyncRequest {
                member_id: ra.member_id.clone(),
                group_instance_id: None,
                generation: 1,
                assignments: vec![(ra.member_id.clone(), b"mine".to_vec())],
            },
            2,
        );
        synced(&s, 2);
        // Restarted: it forgot its member id but has its instance id. As Kafka does, it gets
        // a fresh member id and the membership (generation, assignment); the old id is fenced.
        let out = g.join(5, join_req("", Some("host-a"), "t"), 3);
        let r = joined(&out, 3);
        assert_ne!(r.member_id, ra.member_id, "a fresh member id");
        assert_eq!(r.generation, 1);
        assert_eq!(g.state(), GroupState::Stable);
        assert_eq!(
            g.member_ids(),
            vec![r.member_id.clone()],
            "one member, not two"
        );
        assert_eq!(
            g.heartbeat(5, &ra.member_id, Some("host-a"), 1)
                .unwrap_err()
                .code,
            ErrorCode::FencedInstanceId,
            "the old holder of the instance is fenced"
        );
        // Its commits too: answered UNKNOWN_MEMBER_ID, it would rejoin without a member id
        // and take the instance back (the two processes would then swap it forever).
        let commit = [PartitionOffset {
            topic: "t".into(),
            partition: 0,
            offset: 1,
            leader_epoch: None,
            metadata: String::new(),
        }];
        assert_eq!(
            g.check_commit(&ra.member_id, Some("host-a"), 1, &commit)
                .unwrap_err()
                .code,
            ErrorCode::FencedInstanceId
        );
        g.check_commit(&r.member_id, Some("host-a"), 1, &commit)
            .unwrap();
        g.heartbeat(5, &r.member_id, Some("host-a"), 1).unwrap();
        let s = g.sync(
            6,
            SyncRequest {
                member_id: r.member_id.clone(),
                group_instance_id: None,
                generation: 1,
                assignments: vec![],
            },
            4,
        );
        assert_eq!(synced(&s, 4), b"mine");
        // Someone claiming the instance with another member id is fenced.
        let out = g.join(7, join_req("impostor", Some("host-a"), "t"), 5);
        assert!(
            matches!(&out[0], Action::JoinReply(5, Err(e)) if e.code == ErrorCode::FencedInstanceId)
        );
    }

    /// A static member (joined first, so the leader, "host-a") and a dynamic one, stable in
    /// generation 2 with assignments "a" and "b". The follower offers `follower_protocols`.
    fn static_and_dynamic(g: &mut Group, follower_protocols: &[&str]) -> (String, String) {
        let with = |mut r: JoinRequest, names: &[&str], meta: &str| {
            r.protocols = names
                .iter()
                .map(|n| (n.to_string(), meta.as_bytes().to_vec()))
                .collect();
            r
        };
        let ra = joined(
            &g.join(
                0,
                with(join_req("", Some("host-a"), ""), &["range"], "t"),
                1,
            ),
            1,
        );
        synced(
            &g.sync(
                1,
                SyncRequest {
                    member_id: ra.member_id.clone(),
                    group_instance_id: None,
                    generation: 1,
                    assignments: vec![(ra.member_id.clone(), b"a".to_vec())],
                },
                2,
            ),
            2,
        );
        let follower_join = with(join_req("", None, ""), follower_protocols, "t");
        assert!(g.join(2, follower_join, 3).is_empty());
        let leader_join = with(
            join_req(&ra.member_id, Some("host-a"), ""),
            &["range"],
            "t owns a",
        );
        let out = g.join(3, leader_join, 4);
        let (leader, follower) = (joined(&out, 4).member_id, joined(&out, 3).member_id);
        let out = g.sync(
            4,
            SyncRequest {
                member_id: leader.clone(),
                group_instance_id: None,
                generation: 2,
                assignments: vec![
                    (leader.clone(), b"a".to_vec()),
                    (follower.clone(), b"b".to_vec()),
                ],
            },
            5,
        );
        synced(&out, 5);
        assert_eq!((g.state(), g.generation()), (GroupState::Stable, 2));
        (leader, follower)
    }

    #[test]
    fn a_static_member_restarting_with_other_metadata_keeps_generation_and_assignment() {
        let mut g = Group::new("g", no_delay());
        let (leader, follower) = static_and_dynamic(&mut g, &["range"]);
        // Restarted: no member id, and its (cooperative) metadata no longer lists what it
        // owned. Its protocol stays the group's: no rebalance.
        let out = g.join(10, join_req("", Some("host-a"), "t owns nothing"), 6);
        let r = joined(&out, 6);
        assert_ne!(r.member_id, leader, "a fresh member id");
        assert_eq!(r.generation, 2);
        assert_eq!(g.state(), GroupState::Stable);
        assert!(
            g.heartbeat(11, &follower, None, 2).is_ok(),
            "the follower is not disturbed"
        );
        let s = g.sync(
            12,
            SyncRequest {
                member_id: r.member_id.clone(),
                group_instance_id: Some("host-a".into()),
                generation: 2,
                assignments: vec![],
            },
            7,
        );
        assert_eq!(synced(&s, 7), b"a");
        assert_eq!(g.assignment(&follower), Some(&b"b"[..]));
    }

    #[test]
    fn a_static_member_restarting_into_another_protocol_rebalances() {
        let mut g = Group::new("g", no_delay());
        let (_, follower) = static_and_dynamic(&mut g, &["range", "roundrobin"]);
        // Back with only another assignor: the group's protocol must change.
        let mut restarted = join_req("", Some("host-a"), "t");
        restarted.protocols = vec![("roundrobin".into(), b"t".to_vec())];
        assert!(
            g.join(10, restarted, 6).is_empty(),
            "waits for the follower"
        );
        assert_eq!(g.state(), GroupState::PreparingRebalance);
        assert_eq!(
            g.heartbeat(11, &follower, None, 2).unwrap_err().code,
            ErrorCode::RebalanceInProgress
        );
    }

    #[test]
    fn member_ids_differ_between_coordinator_runs() {
        let id = |incarnation| {
            let cfg = GroupConfig {
                incarnation,
                ..no_delay()
            };
            let mut g = Group::new("g", cfg);
            joined(&g.join(0, join_req("", None, "t"), 1), 1).member_id
        };
        assert_ne!(id(1), id(2));
        assert_eq!(id(3), id(3));
    }

    #[test]
    fn bad_joins_are_refused() {
        let mut g = Group::new("g", no_delay());
        let mut short = join_req("", None, "t");
        short.session_timeout_ms = 10;
        assert!(
            matches!(&g.join(0, short, 1)[0], Action::JoinReply(1, Err(e)) if e.code == ErrorCode::InvalidSessionTimeout)
        );
        let r = joined(&g.join(0, join_req("", None, "t"), 2), 2);
        let mut other = join_req("", None, "t");
        other.protocols = vec![("roundrobin".into(), vec![])];
        assert!(
            matches!(&g.join(1, other, 3)[0], Action::JoinReply(3, Err(e)) if e.code == ErrorCode::InconsistentGroupProtocol)
        );
        let cfg = GroupConfig {
            max_members: 1,
            ..no_delay()
        };
        let mut small = Group::new("s", cfg);
        joined(&small.join(0, join_req("", None, "t"), 1), 1);
        assert!(
            matches!(&small.join(0, join_req("", None, "t"), 2)[0], Action::JoinReply(2, Err(e)) if e.code == ErrorCode::GroupMaxSizeReached)
        );
        assert_eq!(g.member_ids(), vec![r.member_id]);
    }

    /// One member joined and synced at `now`: the group is Stable.
    fn one_stable_member(g: &mut Group, now: u64) -> JoinResult {
        let r = joined(&g.join(now, join_req("", None, "t"), 1), 1);
        let sync = SyncRequest {
            member_id: r.member_id.clone(),
            group_instance_id: None,
            generation: r.generation,
            assignments: vec![],
        };
        synced(&g.sync(now, sync, 2), 2);
        r
    }

    #[test]
    fn leaving_empties_the_group_and_keeps_offsets() {
        let mut g = Group::new("g", no_delay());
        let r = one_stable_member(&mut g, 1);
        commit(
            &mut g,
            2,
            &r.member_id,
            1,
            &[PartitionOffset::new("t", 3, 42)],
        )
        .unwrap();
        g.leave(3, &r.member_id).unwrap();
        assert_eq!(g.state(), GroupState::Empty);
        assert_eq!(g.committed("t", 3).unwrap().offset, 42);
        // With no members, a consumer outside the group may commit (reset-offsets).
        commit(&mut g, 4, "", -1, &[PartitionOffset::new("t", 3, 7)]).unwrap();
        assert_eq!(g.committed("t", 3).unwrap().offset, 7);
        assert_eq!(
            g.leave(5, &r.member_id).unwrap_err().code,
            ErrorCode::UnknownMemberId
        );
    }

    #[test]
    fn a_group_describes_its_protocol_members_and_assignments() {
        let mut g = Group::new("g", no_delay());
        assert_eq!((g.protocol_type(), g.protocol()), (None, None));
        let (leader, follower) = two_members(&mut g);
        let out = g.sync(
            5,
            SyncRequest {
                member_id: leader.clone(),
                group_instance_id: None,
                generation: 2,
                assignments: vec![
                    (leader.clone(), b"p0".to_vec()),
                    (follower.clone(), b"p1".to_vec()),
                ],
            },
            7,
        );
        synced(&out, 7);
        assert_eq!(g.protocol_type(), Some("consumer"));
        assert_eq!(g.protocol(), Some("range"));
        let members = g.describe_members();
        let by_id = |id: &str| members.iter().find(|m| m.member_id == id).unwrap();
        assert_eq!(members.len(), 2);
        assert_eq!(by_id(&leader).assignment, b"p0");
        assert_eq!(by_id(&follower).assignment, b"p1");
        assert_eq!(by_id(&follower).client_id, "c");
        // Everyone leaves: no members, no protocol, but the protocol type stays (Kafka too).
        g.leave(6, &follower).unwrap();
        g.leave(7, &leader).unwrap();
        assert_eq!(g.state(), GroupState::Empty);
        assert!(g.describe_members().is_empty());
        assert_eq!((g.protocol_type(), g.protocol()), (Some("consumer"), None));
    }

    #[test]
    fn committed_offsets_per_group_are_bounded() {
        let cfg = GroupConfig {
            max_offsets: 3,
            ..no_delay()
        };
        let mut g = Group::new("g", cfg);
        let o = PartitionOffset::new;
        commit(&mut g, 1, "", -1, &[o("t", 0, 1), o("t", 1, 1)]).unwrap();
        // Replacing stored ones and adding one more is within the bound, twice the same too.
        commit(
            &mut g,
            2,
            "",
            -1,
            &[o("t", 0, 2), o("u", 0, 1), o("u", 0, 2)],
        )
        .unwrap();
        let e = commit(&mut g, 3, "", -1, &[o("t", 0, 3), o("v", 0, 1)]).unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidCommitOffsetSize, "{e}");
        assert!(e.message.contains("--max-offsets-per-group"), "{e}");
        assert_eq!(g.committed("t", 0).unwrap().offset, 2, "refused whole");
        assert_eq!(g.all_committed().count(), 3);
    }

    #[test]
    fn a_commit_refreshes_the_members_session() {
        let mut g = Group::new("g", no_delay());
        let r = one_stable_member(&mut g, 0);
        // Session 10 s: commits every 6 s keep the member without a heartbeat.
        for t in [6_000, 12_000, 18_000] {
            commit(
                &mut g,
                t,
                &r.member_id,
                r.generation as i32,
                &[PartitionOffset::new("t", 0, t)],
            )
            .unwrap();
            let (_, expired) = g.tick(t + 5_000);
            assert!(expired.is_empty(), "expired at {t}");
        }
        let (_, expired) = g.tick(18_000 + 10_001);
        assert_eq!(expired, vec![r.member_id]);
    }
}
