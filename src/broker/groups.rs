//! Group membership: finding a group's coordinator, JoinGroup, SyncGroup, Heartbeat,
//! LeaveGroup, DescribeGroups and ListGroups, done by the shard that coordinates the group
//! (ListGroups: by every shard, for the groups it coordinates).

use std::time::{Duration, Instant};

use super::group_host::{coordinator_of, Coordination, GroupSummary, GroupType};
use super::internal_topics::{self, InternalTopic};
use super::{recv_until, OpError, Shard};
use crate::clock::now_ms;
use crate::controller::metadata::BrokerInfo;
use crate::group::consumer_group::{ConsumerGroupDescription, Heartbeat, HeartbeatReply, Topics};
use crate::group::coordinator::{GroupError, JoinRequest, JoinResult, SyncRequest};
use crate::protocol::error_code::ErrorCode;

/// Extra time a join or sync may wait beyond the rebalance timeout before it gives up.
const REPLY_SLACK: Duration = Duration::from_secs(5);

fn now() -> u64 {
    now_ms().max(0) as u64
}

/// `Ok` when this shard coordinates `group`, else why not: NOT_COORDINATOR names where (or
/// says this broker is fenced), COORDINATOR_NOT_AVAILABLE while there is no offsets topic or
/// the group's partition has no leader, COORDINATOR_LOAD_IN_PROGRESS while this shard, its
/// new leader, loads the committed offsets.
pub fn coordinated_here(shard: &Shard, group: &str) -> Result<(), OpError> {
    if group.is_empty() {
        return Err(OpError::new(ErrorCode::InvalidGroupId, "empty group id"));
    }
    let place = coordinator_of(&shard.metadata.borrow(), group);
    let Some(place) = place else {
        internal_topics::ensure_created(shard, InternalTopic::Offsets);
        return Err(not_ready());
    };
    if place.broker == 0 {
        return Err(OpError::new(
            ErrorCode::CoordinatorNotAvailable,
            format!("group {group:?}: its offsets partition has no leader"),
        ));
    }
    if place.broker != shard.cfg.node_id || place.shard as usize != shard.id {
        return Err(OpError::new(
            ErrorCode::NotCoordinator,
            format!(
                "group {group:?} is coordinated by broker {} shard {}",
                place.broker, place.shard
            ),
        ));
    }
    // Cut off from the controller: another broker may lead the partition by now.
    if shard.controller.broker_fenced() {
        return Err(OpError::new(
            ErrorCode::NotCoordinator,
            "this broker is fenced: find the coordinator again",
        ));
    }
    match shard.groups.coordination(place.partition) {
        Some(Coordination::Active { epoch }) if epoch == place.leader_epoch => Ok(()),
        _ => Err(OpError::new(
            ErrorCode::CoordinatorLoadInProgress,
            format!("group {group:?}: loading its committed offsets"),
        )),
    }
}

fn not_ready() -> OpError {
    OpError::new(
        ErrorCode::CoordinatorNotAvailable,
        "the offsets topic is not ready",
    )
}

/// The broker and shard coordinating `group` (FindCoordinator).
pub fn coordinator(shard: &Shard, group: &str) -> Result<(BrokerInfo, u32), OpError> {
    if group.is_empty() {
        return Err(OpError::new(ErrorCode::InvalidGroupId, "empty group id"));
    }
    let md = shard.metadata.borrow().clone();
    let Some(place) = coordinator_of(&md, group) else {
        internal_topics::ensure_created(shard, InternalTopic::Offsets);
        return Err(not_ready());
    };
    let info = md.brokers.get(&place.broker).ok_or_else(|| {
        OpError::new(
            ErrorCode::CoordinatorNotAvailable,
            format!("group {group:?}: its offsets partition has no leader"),
        )
    })?;
    Ok((info.clone(), place.shard))
}

/// Waits for a parked join or sync, at most `limit`; one that gives up leaves no waiter.
async fn wait<T>(
    shard: &Shard,
    rx: flume::Receiver<Result<T, GroupError>>,
    limit: Duration,
) -> Result<T, OpError> {
    match recv_until(shard, &rx, Instant::now() + limit).await {
        Some(Ok(r)) => r.map_err(OpError::from),
        Some(Err(_)) => Err(OpError::new(
            ErrorCode::UnknownServerError,
            "the group went away",
        )),
        None => {
            drop(rx);
            shard.groups.abandon_waiters();
            Err(OpError::new(
                ErrorCode::RebalanceInProgress,
                "the rebalance did not complete in time: rejoin",
            ))
        }
    }
}

/// JoinGroup: answers once the rebalance completes (or its timeout, plus a slack, passes).
pub async fn join(shard: &Shard, group: &str, req: JoinRequest) -> Result<JoinResult, OpError> {
    coordinated_here(shard, group)?;
    let limit = Duration::from_millis(req.rebalance_timeout_ms) + REPLY_SLACK;
    let rx = shard.groups.join(now(), group, req);
    wait(shard, rx, limit).await
}

/// SyncGroup: the member's assignment, once the leader's is in.
pub async fn sync(shard: &Shard, group: &str, req: SyncRequest) -> Result<Vec<u8>, OpError> {
    coordinated_here(shard, group)?;
    let rx = shard.groups.sync(now(), group, req)?;
    wait(shard, rx, shard.cfg.max_produce_timeout).await
}

/// Heartbeat; `instance` is the static instance id the member joined with, if any (its old
/// holder is told FENCED_INSTANCE_ID).
pub fn heartbeat(
    shard: &Shard,
    group: &str,
    member_id: &str,
    instance: Option<&str>,
    generation: u32,
) -> Result<(), OpError> {
    coordinated_here(shard, group)?;
    Ok(shard
        .groups
        .heartbeat(now(), group, member_id, instance, generation)?)
}

/// Who leaves a group: a member by id, or a static member by its instance id.
pub enum Leaving<'a> {
    Member(&'a str),
    Instance(&'a str),
}

pub fn leave(shard: &Shard, group: &str, who: Leaving<'_>) -> Result<(), OpError> {
    coordinated_here(shard, group)?;
    let member = match who {
        Leaving::Member(id) => id.to_string(),
        Leaving::Instance(instance) => shard
            .groups
            .member_of_instance(group, instance)
            .ok_or_else(|| OpError::new(ErrorCode::UnknownMemberId, String::new()))?,
    };
    Ok(shard.groups.leave(now(), group, &member)?)
}

pub fn describe(shard: &Shard, group: &str) -> Result<GroupSummary, OpError> {
    coordinated_here(shard, group)?;
    Ok(shard.groups.describe(group))
}

/// Every group this shard coordinates, sorted by id.
pub fn list(shard: &Shard) -> Vec<GroupSummary> {
    shard
        .groups
        .list()
        .into_iter()
        .map(|(group, _)| shard.groups.describe(&group))
        .collect()
}

/// The shard's metadata as consumer groups read it: partition counts, and the topic names
/// a regular expression subscription may match (internal `__` topics left out, as Kafka
/// leaves its internal topics out).
struct ShardTopics<'a>(&'a Shard);

impl Topics for ShardTopics<'_> {
    fn partitions(&self, topic: &str) -> Option<u32> {
        self.0
            .metadata
            .borrow()
            .topic(topic)
            .map(|t| t.partitions.len() as u32)
    }

    fn names(&self) -> Vec<String> {
        self.0
            .metadata
            .borrow()
            .topics
            .keys()
            .filter(|t| !t.starts_with("__"))
            .cloned()
            .collect()
    }
}

/// ConsumerGroupHeartbeat (KIP-848): answered at once with the member's epoch and, when it
/// changed, its assignment.
pub fn consumer_heartbeat(
    shard: &Shard,
    group: &str,
    req: Heartbeat,
) -> Result<HeartbeatReply, OpError> {
    coordinated_here(shard, group)?;
    Ok(shard
        .groups
        .consumer_heartbeat(now(), group, req, &ShardTopics(shard))?)
}

/// ConsumerGroupDescribe of one group.
pub fn consumer_describe(shard: &Shard, group: &str) -> Result<ConsumerGroupDescription, OpError> {
    coordinated_here(shard, group)?;
    Ok(shard.groups.describe_consumer(group)?)
}

/// After a metadata change: consumer groups whose subscribed topics changed rebalance.
pub fn topics_changed(shard: &Shard) {
    shard.groups.topics_changed(&ShardTopics(shard));
}

/// Whether `group` is a KIP-848 consumer group on this shard (classic otherwise).
pub fn group_type(shard: &Shard, group: &str) -> GroupType {
    shard.groups.group_type(group)
}
