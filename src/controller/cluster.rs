//! Cluster membership and partition leadership: the sans-IO logic beside the raft core.
//!
//! Two halves:
//! - **Replicated** (applied by every voter, deterministic, in [`ClusterMetadata`]): broker
//!   registrations with their incarnation and rack ([`BrokerMember`]), fencing, controlled
//!   shutdown, replica placement, leader elections and the AlterPartition-like ISR change. These
//!   are the `impl ClusterMetadata` blocks below, called from `metadata.rs`.
//! - **Active controller only** ([`ClusterManager`]): heartbeat sessions. Heartbeats are not
//!   raft entries (a write per broker per second would flood the log, as in KRaft); the leader
//!   keeps each broker's session deadline in memory and proposes [`Command::FenceBroker`] when
//!   one passes. A new leader does not know its predecessor's deadlines, so it gives every
//!   broker a full session from the moment it takes over. Time is an argument (milliseconds on
//!   any monotonic clock); nothing here reads a clock.
//!
//! Rules, Kafka's where Kafka has one:
//! - Brokers registered with the single-node [`Command::RegisterBroker`] have no membership
//!   record, send no heartbeats and are never fenced: the one-node default behaves as before.
//! - A node id registered by a live broker (not fenced) refuses another incarnation
//!   (DUPLICATE_BROKER_REGISTRATION); a restarted broker retries until the old session ran out
//!   and the controller fenced it. A broker that began a controlled shutdown may be replaced at
//!   once: it asked to go.
//! - Fencing or shutting down broker `b`: `b` leaves every ISR it is in unless it is the last
//!   member (so the partition can come back with it); partitions `b` led get the first replica
//!   (preferred order) that is in the ISR and live, with the leader epoch bumped. None: the
//!   partition is offline (leader [`NO_LEADER`]), unless the topic sets
//!   `unclean.leader.election.enable=true`, which takes the first live replica and makes the ISR
//!   just that replica (acknowledged records may be lost: the user's choice).
//! - A broker coming back (registered again, or unfenced) leads the offline partitions whose ISR
//!   it is in (or, unclean, whose replicas it is in).
//! - Every leader or ISR change bumps the partition epoch; every leader change bumps the leader
//!   epoch (to [`NO_LEADER`] too, so a deposed leader is fenced by epoch).
//! - Placement over the live brokers: replicas on distinct brokers, and on distinct racks while
//!   racks remain (brokers without a rack fit anywhere); brokers in rack-alternating order (one
//!   of each rack in turn), partition `p`'s first replica `p` places after `topic_id % n`, so
//!   leaders spread evenly over brokers; the `k`-th partition of a topic a broker leads goes on
//!   its shard `(topic_id + k) % shards`. With one broker this is exactly the single-node
//!   placement (`(topic_id + p) % shards`).

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::metadata::{
    Applied, BrokerInfo, ClusterMetadata, Command, MetadataError, PartitionInfo,
};
use crate::protocol::error_code::ErrorCode;

/// `PartitionInfo::leader` of an offline partition (node ids are never 0).
pub const NO_LEADER: u32 = 0;
/// Kafka's `broker.session.timeout.ms` default.
pub const DEFAULT_SESSION_TIMEOUT_MS: u64 = 9000;
/// Kafka's `broker.heartbeat.interval.ms` default.
pub const DEFAULT_HEARTBEAT_INTERVAL_MS: u64 = 2000;
/// Registered brokers at most: bounds the membership map and the leader's session table.
pub const MAX_BROKERS: usize = 4096;
/// Longest rack name accepted.
pub const MAX_RACK_LEN: usize = 255;

/// Topic setting: acknowledgements with acks=all need this many in-sync replicas (1..=R).
pub const MIN_INSYNC_REPLICAS: &str = "min.insync.replicas";
/// Topic setting: elect an out-of-sync replica rather than stay offline (`true`/`false`).
pub const UNCLEAN_LEADER_ELECTION: &str = "unclean.leader.election.enable";
/// The topic settings the controller itself interprets (checked here, not by `topic_config`).
pub const CLUSTER_TOPIC_KEYS: &[&str] = &[MIN_INSYNC_REPLICAS, UNCLEAN_LEADER_ELECTION];

/// What a broker registers with ([`Command::RegisterMember`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BrokerRegistration {
    /// Node id, host, native port of shard 0 (shard `i` on `port + i`), shards, Kafka port.
    pub broker: BrokerInfo,
    /// Random per process start: tells a restart from a second broker with the same id.
    pub incarnation: u64,
    #[serde(default)]
    pub rack: Option<String>,
}

/// Liveness of a member broker.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum BrokerState {
    /// Registered and heartbeating: may lead and be in ISRs.
    Active,
    /// Missed its session: leads nothing, in no ISR (but as a last member); must not acknowledge.
    Fenced,
    /// Asked for a controlled shutdown: leadership moved away; fenced when its session ends.
    ShuttingDown,
}

/// The replicated membership record of a broker registered with [`Command::RegisterMember`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BrokerMember {
    pub incarnation: u64,
    pub rack: Option<String>,
    /// Raft index of the registration (Kafka's broker epoch): heartbeats and fences name it, so
    /// a message about an older registration cannot touch a newer one.
    pub broker_epoch: u64,
    pub state: BrokerState,
}

/// Refusals of the active controller's membership calls.
#[derive(thiserror::Error, Debug, Clone, PartialEq)]
pub enum ClusterError {
    #[error("broker {node_id} is not registered; register before heartbeating")]
    UnknownBroker { node_id: u32 },
    #[error(
        "broker {node_id}: broker epoch {got} is stale (the registration's is {current}); \
         register again"
    )]
    StaleBrokerEpoch {
        node_id: u32,
        got: u64,
        current: u64,
    },
    #[error(transparent)]
    Metadata(#[from] MetadataError),
}

impl ClusterError {
    pub fn code(&self) -> ErrorCode {
        match self {
            ClusterError::UnknownBroker { .. } | ClusterError::StaleBrokerEpoch { .. } => {
                ErrorCode::StaleBrokerEpoch
            }
            ClusterError::Metadata(e) => e.code,
        }
    }
}

fn duplicate_registration(node_id: u32, live: u64, incarnation: u64) -> MetadataError {
    MetadataError::new(
        ErrorCode::DuplicateBrokerRegistration,
        format!(
            "node id {node_id} is already registered by a live broker (incarnation {live:016x}); \
             incarnation {incarnation:016x} is refused until that one is fenced (after \
             broker.session.timeout.ms without heartbeats): is another broker using node id \
             {node_id}?"
        ),
    )
}

fn stale_epoch(node_id: u32, got: u64, current: Option<u64>) -> MetadataError {
    match current {
        Some(current) => MetadataError::new(
            ErrorCode::StaleBrokerEpoch,
            format!("broker {node_id}: broker epoch {got} is stale (current {current})"),
        ),
        None => MetadataError::new(
            ErrorCode::StaleBrokerEpoch,
            format!("broker {node_id} is not a registered member"),
        ),
    }
}

/// Whether the topic allows unclean leader election.
pub fn unclean_enabled(configs: &BTreeMap<String, String>) -> bool {
    configs
        .get(UNCLEAN_LEADER_ELECTION)
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("true"))
}

/// Checks the controller's own topic settings for a topic of replication factor `rf` and
/// returns the other settings (for `topic_config::validate`).
pub fn split_cluster_configs(
    configs: &BTreeMap<String, String>,
    rf: usize,
) -> Result<BTreeMap<String, String>, MetadataError> {
    let mut rest = configs.clone();
    if let Some(v) = rest.remove(MIN_INSYNC_REPLICAS) {
        match v.trim().parse::<u64>() {
            Ok(n) if n >= 1 && n <= rf as u64 => {}
            _ => {
                return Err(MetadataError::new(
                    ErrorCode::InvalidConfig,
                    format!(
                        "invalid {MIN_INSYNC_REPLICAS}={v:?}: must be 1..={rf} (the replication \
                         factor)"
                    ),
                ))
            }
        }
    }
    if let Some(v) = rest.remove(UNCLEAN_LEADER_ELECTION) {
        if !v.trim().eq_ignore_ascii_case("true") && !v.trim().eq_ignore_ascii_case("false") {
            return Err(MetadataError::new(
                ErrorCode::InvalidConfig,
                format!("invalid {UNCLEAN_LEADER_ELECTION}={v:?}: must be true or false"),
            ));
        }
    }
    Ok(rest)
}

impl ClusterMetadata {
    /// Whether broker `node` may lead and be in ISRs: registered, and (for members) active.
    pub fn is_live(&self, node: u32) -> bool {
        self.brokers.contains_key(&node)
            && self
                .members
                .get(&node)
                .is_none_or(|m| m.state == BrokerState::Active)
    }

    /// `alive`, `fenced` or `shutting-down` (a single-node broker is always alive).
    pub fn broker_state_name(&self, node: u32) -> &'static str {
        match self.members.get(&node).map(|m| m.state) {
            None | Some(BrokerState::Active) => "alive",
            Some(BrokerState::Fenced) => "fenced",
            Some(BrokerState::ShuttingDown) => "shutting-down",
        }
    }

    /// Live brokers, sorted by id.
    pub fn live_brokers(&self) -> Vec<u32> {
        self.brokers
            .keys()
            .copied()
            .filter(|&b| self.is_live(b))
            .collect()
    }

    /// Partitions broker `node` leads.
    pub fn led_by(&self, node: u32) -> usize {
        self.topics
            .values()
            .flat_map(|t| &t.partitions)
            .filter(|p| p.leader == node)
            .count()
    }

    fn member_epoch_check(&self, node_id: u32, broker_epoch: u64) -> Result<(), MetadataError> {
        match self.members.get(&node_id) {
            Some(m) if m.broker_epoch == broker_epoch => Ok(()),
            Some(m) => Err(stale_epoch(node_id, broker_epoch, Some(m.broker_epoch))),
            None => Err(stale_epoch(node_id, broker_epoch, None)),
        }
    }

    /// Validation of the membership and leadership commands.
    pub(super) fn validate_cluster(&self, cmd: &Command) -> Result<(), MetadataError> {
        let bad = |msg: String| Err(MetadataError::new(ErrorCode::InvalidRequest, msg));
        match cmd {
            Command::RegisterMember(reg) => {
                let b = &reg.broker;
                if b.node_id == 0 {
                    return bad("broker node id must be non-zero".into());
                }
                if b.shards == 0 {
                    return bad(format!("broker {} registered with 0 shards", b.node_id));
                }
                if b.host.is_empty() {
                    return bad(format!("broker {} registered without a host", b.node_id));
                }
                if reg
                    .rack
                    .as_ref()
                    .is_some_and(|r| r.is_empty() || r.len() > MAX_RACK_LEN)
                {
                    return bad(format!(
                        "broker {}: rack must be 1..={MAX_RACK_LEN} bytes",
                        b.node_id
                    ));
                }
                if !self.brokers.contains_key(&b.node_id) && self.brokers.len() >= MAX_BROKERS {
                    return bad(format!("cluster already has {MAX_BROKERS} brokers"));
                }
                if let Some(m) = self.members.get(&b.node_id) {
                    if m.incarnation != reg.incarnation && m.state == BrokerState::Active {
                        return Err(duplicate_registration(
                            b.node_id,
                            m.incarnation,
                            reg.incarnation,
                        ));
                    }
                }
                Ok(())
            }
            Command::FenceBroker {
                node_id,
                broker_epoch,
            } => {
                self.member_epoch_check(*node_id, *broker_epoch)?;
                if self.members[node_id].state == BrokerState::Fenced {
                    return bad(format!("broker {node_id} is already fenced"));
                }
                Ok(())
            }
            Command::UnfenceBroker {
                node_id,
                broker_epoch,
            } => {
                self.member_epoch_check(*node_id, *broker_epoch)?;
                if self.members[node_id].state != BrokerState::Fenced {
                    return bad(format!("broker {node_id} is not fenced"));
                }
                Ok(())
            }
            Command::ControlledShutdown {
                node_id,
                broker_epoch,
            } => {
                self.member_epoch_check(*node_id, *broker_epoch)?;
                if self.members[node_id].state != BrokerState::Active {
                    return bad(format!(
                        "broker {node_id} is {:?}, not active",
                        self.members[node_id].state
                    ));
                }
                Ok(())
            }
            Command::AlterPartition {
                topic,
                partition,
                leader,
                leader_epoch,
                partition_epoch,
                isr,
            } => {
                let p = self.partition(topic, *partition)?;
                if *leader != p.leader || *leader == NO_LEADER {
                    return Err(MetadataError::new(
                        ErrorCode::NotLeaderOrFollower,
                        format!(
                            "{topic}-{partition}: broker {leader} is not the leader (leader {})",
                            p.leader
                        ),
                    ));
                }
                if *leader_epoch != p.leader_epoch {
                    return Err(MetadataError::new(
                        ErrorCode::FencedLeaderEpoch,
                        format!(
                            "{topic}-{partition}: leader epoch {leader_epoch}, current {}",
                            p.leader_epoch
                        ),
                    ));
                }
                if *partition_epoch != p.partition_epoch {
                    return Err(MetadataError::new(
                        ErrorCode::InvalidUpdateVersion,
                        format!(
                            "{topic}-{partition}: partition epoch {partition_epoch}, current {}",
                            p.partition_epoch
                        ),
                    ));
                }
                let distinct: BTreeSet<u32> = isr.iter().copied().collect();
                if distinct.len() != isr.len() || !isr.contains(leader) {
                    return bad(format!(
                        "{topic}-{partition}: ISR {isr:?} must hold the leader and no broker twice"
                    ));
                }
                if let Some(b) = isr
                    .iter()
                    .find(|b| !p.replicas.contains(b) || !self.is_live(**b))
                {
                    return Err(MetadataError::new(
                        ErrorCode::IneligibleReplica,
                        format!(
                            "{topic}-{partition}: broker {b} cannot join the ISR (not a live \
                             replica of {:?})",
                            p.replicas
                        ),
                    ));
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }

    pub(super) fn partition(
        &self,
        topic: &str,
        partition: u32,
    ) -> Result<&PartitionInfo, MetadataError> {
        self.topics
            .get(topic)
            .and_then(|t| t.partitions.get(partition as usize))
            .ok_or_else(|| {
                MetadataError::new(
                    ErrorCode::UnknownTopicOrPartition,
                    format!("unknown partition {topic}-{partition}"),
                )
            })
    }

    /// Applies a validated membership or leadership command.
    pub(super) fn apply_cluster(
        &mut self,
        index: u64,
        cmd: &Command,
    ) -> Result<Applied, MetadataError> {
        let vanished = || MetadataError::new(ErrorCode::UnknownTopicOrPartition, "vanished");
        Ok(match cmd {
            Command::RegisterMember(reg) => {
                let node_id = reg.broker.node_id;
                self.register_broker(&reg.broker);
                self.members.insert(
                    node_id,
                    BrokerMember {
                        incarnation: reg.incarnation,
                        rack: reg.rack.clone(),
                        broker_epoch: index,
                        state: BrokerState::Active,
                    },
                );
                let elected = self.elect_returning(node_id);
                self.complete_reassignments();
                Applied::MemberRegistered {
                    node_id,
                    broker_epoch: index,
                    elected,
                }
            }
            Command::FenceBroker { node_id, .. } | Command::ControlledShutdown { node_id, .. } => {
                let fence = matches!(cmd, Command::FenceBroker { .. });
                let m = self.members.get_mut(node_id).ok_or_else(vanished)?;
                m.state = if fence {
                    BrokerState::Fenced
                } else {
                    BrokerState::ShuttingDown
                };
                let changed = self.remove_broker(*node_id);
                Applied::BrokerStateChanged {
                    node_id: *node_id,
                    partitions_changed: changed,
                }
            }
            Command::UnfenceBroker { node_id, .. } => {
                let m = self.members.get_mut(node_id).ok_or_else(vanished)?;
                m.state = BrokerState::Active;
                let changed = self.elect_returning(*node_id);
                self.complete_reassignments();
                Applied::BrokerStateChanged {
                    node_id: *node_id,
                    partitions_changed: changed,
                }
            }
            Command::AlterPartition {
                topic,
                partition,
                isr,
                ..
            } => {
                let p = self
                    .topics
                    .get_mut(topic)
                    .and_then(|t| t.partitions.get_mut(*partition as usize))
                    .ok_or_else(vanished)?;
                p.isr = isr.clone();
                p.partition_epoch += 1;
                self.complete_reassignment(topic, *partition);
                Applied::PartitionAltered(self.partition(topic, *partition)?.clone())
            }
            other => {
                return Err(MetadataError::new(
                    ErrorCode::InvalidRequest,
                    format!("not a cluster command: {other:?}"),
                ))
            }
        })
    }

    /// Moves leadership and ISR membership away from `gone` (fenced or shutting down);
    /// returns how many partitions changed.
    fn remove_broker(&mut self, gone: u32) -> usize {
        let live: BTreeSet<u32> = self
            .live_brokers()
            .into_iter()
            .filter(|&b| b != gone)
            .collect();
        let shards: BTreeMap<u32, u32> = self.brokers.iter().map(|(&b, i)| (b, i.shards)).collect();
        let mut changed = 0;
        for topic in self.topics.values_mut() {
            let unclean = unclean_enabled(&topic.configs);
            for p in topic.partitions.iter_mut() {
                let before = (p.leader, p.isr.clone());
                if p.isr.len() > 1 {
                    p.isr.retain(|&b| b != gone);
                }
                if p.leader == gone {
                    let clean = p
                        .replicas
                        .iter()
                        .copied()
                        .find(|b| p.isr.contains(b) && live.contains(b));
                    let unclean_pick = || p.replicas.iter().copied().find(|b| live.contains(b));
                    match clean {
                        Some(b) => set_leader(p, b, topic.id, &shards),
                        None => match unclean.then(unclean_pick).flatten() {
                            Some(b) => {
                                set_leader(p, b, topic.id, &shards);
                                p.isr = vec![b];
                            }
                            None => p.leader = NO_LEADER,
                        },
                    }
                }
                changed += bump_epochs(p, before);
            }
        }
        changed
    }

    /// `back` just became live: it leads the offline partitions it can.
    fn elect_returning(&mut self, back: u32) -> usize {
        let shards: BTreeMap<u32, u32> = self.brokers.iter().map(|(&b, i)| (b, i.shards)).collect();
        let mut changed = 0;
        for topic in self.topics.values_mut() {
            let unclean = unclean_enabled(&topic.configs);
            for p in topic.partitions.iter_mut() {
                if p.leader != NO_LEADER || !p.replicas.contains(&back) {
                    continue;
                }
                let before = (p.leader, p.isr.clone());
                if p.isr.contains(&back) {
                    set_leader(p, back, topic.id, &shards);
                } else if unclean {
                    set_leader(p, back, topic.id, &shards);
                    p.isr = vec![back];
                }
                changed += bump_epochs(p, before);
            }
        }
        changed
    }

    /// Live brokers in rack-alternating order: sorted racks, one broker of each in turn
    /// (brokers without a rack form one group, first). No racks: sorted ids.
    fn placement_order(&self) -> Vec<u32> {
        let mut groups: BTreeMap<Option<&str>, Vec<u32>> = BTreeMap::new();
        for b in self.live_brokers() {
            let rack = self.members.get(&b).and_then(|m| m.rack.as_deref());
            groups.entry(rack).or_default().push(b);
        }
        let longest = groups.values().map(Vec::len).max().unwrap_or(0);
        (0..longest)
            .flat_map(|i| groups.values().filter_map(move |g| g.get(i).copied()))
            .collect()
    }

    /// Replica plan for a new topic (or the whole plan of one grown to `partitions`); the caller
    /// checked `1 <= rf <= live brokers`.
    pub(super) fn place(&self, topic_id: u64, partitions: u32, rf: u16) -> Vec<PartitionInfo> {
        let order = self.placement_order();
        let n = order.len().max(1) as u64;
        let start = topic_id % n;
        let rack = |b: u32| self.members.get(&b).and_then(|m| m.rack.as_deref());
        let mut led: BTreeMap<u32, u64> = BTreeMap::new();
        (0..partitions)
            .map(|p| {
                let first = start + u64::from(p);
                let ring = |j: u64| order[((first + j) % n) as usize];
                let mut replicas: Vec<u32> = Vec::with_capacity(usize::from(rf));
                let mut racks: BTreeSet<&str> = BTreeSet::new();
                // First pass: distinct racks; second: any broker not chosen yet.
                for rack_aware in [true, false] {
                    for j in 0..n {
                        if replicas.len() >= usize::from(rf) {
                            break;
                        }
                        let b = ring(j);
                        if replicas.contains(&b) {
                            continue;
                        }
                        if rack_aware && rack(b).is_some_and(|r| racks.contains(r)) {
                            continue;
                        }
                        replicas.push(b);
                        racks.extend(rack(b));
                    }
                }
                let leader = replicas.first().copied().unwrap_or(NO_LEADER);
                let k = led.entry(leader).or_insert(0);
                let shards = self.brokers.get(&leader).map_or(1, |b| b.shards.max(1));
                // The leader's k-th partition goes on its shard k (from an offset per topic), so
                // each broker's leaders spread over its shards; the offset per leader's place
                // in the ring spreads the followers' copies too (every replica holds it on the
                // same shard index, `shard_on`).
                let rank = first % n;
                let shard = if rf > 1 {
                    ((topic_id + *k + rank) % u64::from(shards)) as u32
                } else {
                    ((topic_id + *k) % u64::from(shards)) as u32
                };
                *k += 1;
                PartitionInfo {
                    partition: p,
                    leader,
                    shard,
                    isr: replicas.clone(),
                    replicas,
                    leader_epoch: 0,
                    partition_epoch: 0,
                    decommissioned: false,
                    reassignment: None,
                    home_shard: Some(shard),
                }
            })
            .collect()
    }
}

impl ClusterMetadata {
    /// The shard of broker `broker` that holds `p` of topic `topic_id`: the leader's is in
    /// the plan; another replica's is the one it would take on becoming leader.
    pub fn replica_shard(&self, topic_id: u64, p: &PartitionInfo, broker: u32) -> u32 {
        if broker == p.leader {
            return p.shard;
        }
        p.shard_on(topic_id, self.brokers.get(&broker).map_or(1, |b| b.shards))
    }
}

pub(super) fn set_leader(
    p: &mut PartitionInfo,
    b: u32,
    topic_id: u64,
    shards: &BTreeMap<u32, u32>,
) {
    p.leader = b;
    p.shard = p.shard_on(topic_id, shards.get(&b).copied().unwrap_or(1));
}

/// Bumps the epochs of a partition that changed since `before` (leader, ISR); 1 if it did.
pub(super) fn bump_epochs(p: &mut PartitionInfo, before: (u32, Vec<u32>)) -> usize {
    if p.leader == before.0 && p.isr == before.1 {
        return 0;
    }
    if p.leader != before.0 {
        p.leader_epoch += 1;
    }
    p.partition_epoch += 1;
    1
}

/// A broker's heartbeat to the active controller.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Heartbeat {
    pub node_id: u32,
    pub broker_epoch: u64,
    /// The broker wants a controlled shutdown (SIGTERM).
    pub want_shutdown: bool,
}

/// The answer to a heartbeat, from the applied metadata.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeartbeatReply {
    /// The broker is fenced: it must not acknowledge writes (it leads nothing).
    pub fenced: bool,
    /// A controlled shutdown is under way.
    pub shutting_down: bool,
    /// Shutting down and leading nothing any more: the broker may stop.
    pub shutdown_ready: bool,
}

/// What the active controller does with a heartbeat.
#[derive(Clone, Debug, PartialEq)]
pub struct HeartbeatOutcome {
    pub reply: HeartbeatReply,
    /// A command to propose (unfence a fenced broker that is back, begin a shutdown).
    pub propose: Option<Command>,
}

#[derive(Clone, Copy, Debug)]
struct Session {
    broker_epoch: u64,
    deadline_ms: u64,
}

/// The active controller's heartbeat sessions (soft state, not replicated).
#[derive(Debug)]
pub struct ClusterManager {
    session_timeout_ms: u64,
    /// One per member that is not fenced; at most [`MAX_BROKERS`].
    sessions: BTreeMap<u32, Session>,
}

impl ClusterManager {
    pub fn new(session_timeout_ms: u64) -> ClusterManager {
        ClusterManager {
            session_timeout_ms: session_timeout_ms.max(1),
            sessions: BTreeMap::new(),
        }
    }

    pub fn session_timeout_ms(&self) -> u64 {
        self.session_timeout_ms
    }

    /// This node just became the active controller: every broker gets a full session from
    /// `now` (the previous leader's heartbeat times died with its leadership).
    pub fn reset(&mut self, md: &ClusterMetadata, now_ms: u64) {
        self.sessions.clear();
        self.sync(md, now_ms);
    }

    /// Sessions follow the metadata: one per unfenced member, restarted when its registration
    /// (broker epoch) changed.
    fn sync(&mut self, md: &ClusterMetadata, now_ms: u64) {
        self.sessions.retain(|id, s| {
            md.members
                .get(id)
                .is_some_and(|m| m.state != BrokerState::Fenced && m.broker_epoch == s.broker_epoch)
        });
        for (&id, m) in &md.members {
            if m.state != BrokerState::Fenced && !self.sessions.contains_key(&id) {
                self.sessions.insert(
                    id,
                    Session {
                        broker_epoch: m.broker_epoch,
                        deadline_ms: now_ms + self.session_timeout_ms,
                    },
                );
            }
        }
    }

    fn alive(&self, node_id: u32, broker_epoch: u64, now_ms: u64) -> bool {
        self.sessions
            .get(&node_id)
            .is_some_and(|s| s.broker_epoch == broker_epoch && s.deadline_ms > now_ms)
    }

    /// A registration: the commands to propose, or a refusal. A node id whose live broker has
    /// another incarnation is refused while that broker's session runs; once it ran out, the
    /// old registration is fenced first, in the same batch.
    pub fn register(
        &mut self,
        md: &ClusterMetadata,
        reg: &BrokerRegistration,
        now_ms: u64,
    ) -> Result<Vec<Command>, ClusterError> {
        self.sync(md, now_ms);
        let node_id = reg.broker.node_id;
        let register = Command::RegisterMember(reg.clone());
        let Some(old) = md.members.get(&node_id) else {
            md.validate_cluster(&register)?;
            return Ok(vec![register]);
        };
        if old.incarnation == reg.incarnation || old.state != BrokerState::Active {
            md.validate_cluster(&register)?;
            return Ok(vec![register]);
        }
        if self.alive(node_id, old.broker_epoch, now_ms) {
            return Err(duplicate_registration(node_id, old.incarnation, reg.incarnation).into());
        }
        let fence = Command::FenceBroker {
            node_id,
            broker_epoch: old.broker_epoch,
        };
        let mut after = md.clone();
        after.validate_cluster(&fence)?;
        after.apply_cluster(0, &fence)?;
        after.validate_cluster(&register)?;
        Ok(vec![fence, register])
    }

    /// A heartbeat: renews the session and says what to propose.
    pub fn heartbeat(
        &mut self,
        md: &ClusterMetadata,
        hb: &Heartbeat,
        now_ms: u64,
    ) -> Result<HeartbeatOutcome, ClusterError> {
        self.sync(md, now_ms);
        let Some(m) = md.members.get(&hb.node_id) else {
            return Err(ClusterError::UnknownBroker {
                node_id: hb.node_id,
            });
        };
        if m.broker_epoch != hb.broker_epoch {
            return Err(ClusterError::StaleBrokerEpoch {
                node_id: hb.node_id,
                got: hb.broker_epoch,
                current: m.broker_epoch,
            });
        }
        self.sessions.insert(
            hb.node_id,
            Session {
                broker_epoch: m.broker_epoch,
                deadline_ms: now_ms + self.session_timeout_ms,
            },
        );
        let epoch = m.broker_epoch;
        let propose = match m.state {
            BrokerState::Fenced => Some(Command::UnfenceBroker {
                node_id: hb.node_id,
                broker_epoch: epoch,
            }),
            BrokerState::Active if hb.want_shutdown => Some(Command::ControlledShutdown {
                node_id: hb.node_id,
                broker_epoch: epoch,
            }),
            _ => None,
        };
        let shutting_down = m.state == BrokerState::ShuttingDown;
        Ok(HeartbeatOutcome {
            reply: HeartbeatReply {
                fenced: m.state == BrokerState::Fenced,
                shutting_down,
                shutdown_ready: shutting_down && md.led_by(hb.node_id) == 0,
            },
            propose,
        })
    }

    /// Fences for the sessions that ran out by `now_ms`. A fence proposed gives the session
    /// one more timeout before it is proposed again (a lost proposal is retried, a pending one
    /// is not repeated every tick).
    pub fn poll(&mut self, md: &ClusterMetadata, now_ms: u64) -> Vec<Command> {
        self.sync(md, now_ms);
        let mut out = Vec::new();
        for (&node_id, s) in self.sessions.iter_mut() {
            if s.deadline_ms <= now_ms {
                out.push(Command::FenceBroker {
                    node_id,
                    broker_epoch: s.broker_epoch,
                });
                s.deadline_ms = now_ms + self.session_timeout_ms;
            }
        }
        out
    }
}

#[cfg(test)]
#[path = "cluster_tests.rs"]
mod tests;
