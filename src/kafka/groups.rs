//! The group and offset APIs for Kafka clients: the same coordinator and committed offsets
//! the native protocol uses ([`crate::broker::groups`], [`crate::broker::offsets`]), so Kafka consumers and rill
//! consumers can share a group (both write Kafka's ConsumerProtocol member metadata).

use std::rc::Rc;

use kafka_protocol::messages::consumer_group_describe_response::{
    Assignment as DescribeAssignment, DescribedGroup as ConsumerDescribedGroup,
    Member as ConsumerDescribedMember, TopicPartitions as DescribeTopicPartitions,
};
use kafka_protocol::messages::consumer_group_heartbeat_response::{
    Assignment as HeartbeatAssignment, TopicPartitions as HeartbeatTopicPartitions,
};
use kafka_protocol::messages::delete_groups_response::DeletableGroupResult;
use kafka_protocol::messages::describe_groups_response::{DescribedGroup, DescribedGroupMember};
use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::join_group_response::JoinGroupResponseMember;
use kafka_protocol::messages::leave_group_response::MemberResponse;
use kafka_protocol::messages::list_groups_response::ListedGroup;
use kafka_protocol::messages::offset_commit_response::{
    OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use kafka_protocol::messages::offset_delete_response::{
    OffsetDeleteResponsePartition, OffsetDeleteResponseTopic,
};
use kafka_protocol::messages::offset_fetch_response::{
    OffsetFetchResponseGroup, OffsetFetchResponsePartition, OffsetFetchResponsePartitions,
    OffsetFetchResponseTopic, OffsetFetchResponseTopics,
};
use kafka_protocol::messages::{
    BrokerId, ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse,
    ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse, DeleteGroupsRequest,
    DeleteGroupsResponse, DescribeGroupsRequest, DescribeGroupsResponse, FindCoordinatorRequest,
    FindCoordinatorResponse, GroupId, HeartbeatRequest, HeartbeatResponse, JoinGroupRequest,
    JoinGroupResponse, LeaveGroupRequest, LeaveGroupResponse, ListGroupsRequest,
    ListGroupsResponse, OffsetCommitRequest, OffsetCommitResponse, OffsetDeleteRequest,
    OffsetDeleteResponse, OffsetFetchRequest, OffsetFetchResponse, SyncGroupRequest,
    SyncGroupResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;

use super::{authorized_operations, node_id, topic_uuid};
use crate::broker::group_host::GroupType;
use crate::broker::groups::{self, coordinated_here, Leaving};
use crate::broker::offsets::{self, Committed, Position};
use crate::broker::{OpError, Shard};
use crate::group::consumer_group::Heartbeat;
use crate::group::coordinator::{JoinRequest, SyncRequest};
use crate::group::offsets_log::PartitionOffset;
use crate::protocol::ErrorCode;

fn text(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}

/// Where a group's (key type 0) or transactional id's (key type 1) coordinator is, as Kafka
/// node, host and port.
fn locate(shard: &Shard, key_type: i8, key: &str) -> Result<(i32, String, i32), OpError> {
    let (info, s) = match key_type {
        0 => groups::coordinator(shard, key)?,
        1 => crate::broker::transactions::coordinator(shard, key)?,
        other => {
            return Err(OpError::new(
                ErrorCode::InvalidRequest,
                format!("coordinator key type {other}"),
            ))
        }
    };
    let port = info.kafka_port.ok_or_else(|| {
        OpError::new(
            ErrorCode::CoordinatorNotAvailable,
            format!("broker {} has no Kafka listener", info.node_id),
        )
    })?;
    Ok((
        node_id(info.node_id, s),
        info.host,
        i32::from(port) + s as i32,
    ))
}

pub fn find_coordinator(
    shard: &Shard,
    version: i16,
    req: FindCoordinatorRequest,
) -> FindCoordinatorResponse {
    let mut r = FindCoordinatorResponse::default();
    let answer = |key: &str| locate(shard, req.key_type, key);
    if version >= 4 {
        for key in &req.coordinator_keys {
            let mut c = Coordinator::default();
            c.key = key.clone();
            match answer(key) {
                Ok((node, host, port)) => {
                    c.node_id = BrokerId(node);
                    c.host = text(&host);
                    c.port = port;
                }
                Err(e) => {
                    c.node_id = BrokerId(-1);
                    c.port = -1;
                    c.error_code = e.code.code();
                    c.error_message = Some(text(&e.message));
                }
            }
            r.coordinators.push(c);
        }
        return r;
    }
    match answer(&req.key) {
        Ok((node, host, port)) => {
            r.node_id = BrokerId(node);
            r.host = text(&host);
            r.port = port;
        }
        Err(e) => {
            r.node_id = BrokerId(-1);
            r.port = -1;
            r.error_code = e.code.code();
            r.error_message = Some(text(&e.message));
        }
    }
    r
}

pub async fn join(shard: &Rc<Shard>, client_id: &str, req: JoinGroupRequest) -> JoinGroupResponse {
    let mut r = JoinGroupResponse::default();
    r.generation_id = -1;
    r.member_id = req.member_id.clone();
    let group = req.group_id.0.to_string();
    let refuse = |mut r: JoinGroupResponse, code: ErrorCode| {
        r.error_code = code.code();
        r
    };
    if let Err(e) = coordinated_here(shard, &group) {
        return refuse(r, e.code);
    }
    let (Ok(session), Ok(rebalance)) = (
        u32::try_from(req.session_timeout_ms),
        u32::try_from(req.rebalance_timeout_ms.max(req.session_timeout_ms)),
    ) else {
        return refuse(r, ErrorCode::InvalidSessionTimeout);
    };
    let joined = groups::join(
        shard,
        &group,
        JoinRequest {
            member_id: req.member_id.to_string(),
            group_instance_id: req.group_instance_id.as_ref().map(|s| s.to_string()),
            client_id: client_id.to_string(),
            session_timeout_ms: u64::from(session),
            rebalance_timeout_ms: u64::from(rebalance),
            protocol_type: req.protocol_type.to_string(),
            protocols: req
                .protocols
                .iter()
                .map(|p| (p.name.to_string(), p.metadata.to_vec()))
                .collect(),
        },
    );
    match joined.await {
        Ok(j) => {
            r.generation_id = j.generation as i32;
            r.protocol_type = Some(req.protocol_type.clone());
            r.protocol_name = Some(text(&j.protocol));
            r.leader = text(&j.leader);
            r.member_id = text(&j.member_id);
            r.members = j
                .members
                .into_iter()
                .map(|(id, instance, metadata)| {
                    let mut m = JoinGroupResponseMember::default();
                    m.member_id = text(&id);
                    m.group_instance_id = instance.as_deref().map(text);
                    m.metadata = metadata.into();
                    m
                })
                .collect();
            r
        }
        Err(e) => refuse(r, e.code),
    }
}

pub async fn sync(shard: &Rc<Shard>, req: SyncGroupRequest) -> SyncGroupResponse {
    let mut r = SyncGroupResponse::default();
    let group = req.group_id.0.to_string();
    let result = match u32::try_from(req.generation_id) {
        Err(_) => Err(OpError::new(
            ErrorCode::IllegalGeneration,
            "negative generation",
        )),
        Ok(generation) => {
            let sync = SyncRequest {
                member_id: req.member_id.to_string(),
                group_instance_id: req.group_instance_id.as_ref().map(|i| i.to_string()),
                generation,
                assignments: req
                    .assignments
                    .iter()
                    .map(|a| (a.member_id.to_string(), a.assignment.to_vec()))
                    .collect(),
            };
            groups::sync(shard, &group, sync).await
        }
    };
    match result {
        Ok(assignment) => {
            r.protocol_type = req.protocol_type.clone();
            r.protocol_name = req.protocol_name.clone();
            r.assignment = assignment.into();
        }
        Err(e) => r.error_code = e.code.code(),
    }
    r
}

pub fn heartbeat(shard: &Shard, req: HeartbeatRequest) -> HeartbeatResponse {
    let mut r = HeartbeatResponse::default();
    let group = req.group_id.0.to_string();
    let result = match u32::try_from(req.generation_id) {
        Ok(g) => groups::heartbeat(
            shard,
            &group,
            &req.member_id,
            req.group_instance_id.as_deref(),
            g,
        ),
        Err(_) => Err(OpError::new(
            ErrorCode::IllegalGeneration,
            "negative generation",
        )),
    };
    if let Err(e) = result {
        r.error_code = e.code.code();
    }
    r
}

pub fn leave(shard: &Shard, version: i16, req: LeaveGroupRequest) -> LeaveGroupResponse {
    let mut r = LeaveGroupResponse::default();
    let group = req.group_id.0.to_string();
    if let Err(e) = coordinated_here(shard, &group) {
        r.error_code = e.code.code();
        return r;
    }
    if version < 3 {
        if let Err(e) = groups::leave(shard, &group, Leaving::Member(&req.member_id)) {
            r.error_code = e.code.code();
        }
        return r;
    }
    // v3+: a batch of members, each answered on its own.
    for m in &req.members {
        let mut mr = MemberResponse::default();
        mr.member_id = m.member_id.clone();
        mr.group_instance_id = m.group_instance_id.clone();
        let who = match (&m.member_id, &m.group_instance_id) {
            (id, _) if !id.is_empty() => Some(Leaving::Member(id.as_str())),
            // A static member leaving by instance id.
            (_, Some(instance)) => Some(Leaving::Instance(instance.as_str())),
            (_, None) => None,
        };
        let outcome = match who {
            Some(who) => groups::leave(shard, &group, who),
            None => Err(OpError::new(ErrorCode::UnknownMemberId, String::new())),
        };
        if let Err(e) = outcome {
            mr.error_code = e.code.code();
        }
        r.members.push(mr);
    }
    r
}

pub async fn commit(
    shard: &Rc<Shard>,
    version: i16,
    req: OffsetCommitRequest,
) -> OffsetCommitResponse {
    let group = req.group_id.0.to_string();
    // Kafka: a member of a consumer-protocol group commits with v9+, whose
    // generation field is its member epoch.
    let old_version_member = version < 9
        && req.generation_id_or_member_epoch >= 0
        && groups::group_type(shard, &group) == GroupType::Consumer;
    let mut offsets = Vec::new();
    let mut bad = Vec::new();
    for t in &req.topics {
        for p in &t.partitions {
            match commit_record(
                &t.name,
                p.partition_index,
                p.committed_offset,
                p.committed_leader_epoch,
                p.committed_metadata.as_ref(),
            ) {
                Some(o) => offsets.push(o),
                None => bad.push((t.name.clone(), p.partition_index)),
            }
        }
    }
    let outcome = if old_version_member {
        Err(OpError::new(
            ErrorCode::UnsupportedVersion,
            "OffsetCommit version 9 or above must be used by members using the consumer group protocol",
        ))
    } else {
        offsets::commit(
            shard,
            &group,
            &req.member_id,
            req.group_instance_id.as_ref().map(|i| i.as_str()),
            req.generation_id_or_member_epoch,
            offsets,
        )
        .await
    };
    let code = match &outcome {
        Ok(()) => ErrorCode::None,
        Err(e) => e.code,
    };
    let mut r = OffsetCommitResponse::default();
    for t in &req.topics {
        let mut tr = OffsetCommitResponseTopic::default();
        tr.name = t.name.clone();
        tr.topic_id = t.topic_id;
        for p in &t.partitions {
            let mut pr = OffsetCommitResponsePartition::default();
            pr.partition_index = p.partition_index;
            let invalid = bad
                .iter()
                .any(|(n, i)| *n == t.name && *i == p.partition_index);
            pr.error_code = if invalid {
                ErrorCode::InvalidRequest.code()
            } else {
                code.code()
            };
            tr.partitions.push(pr);
        }
        r.topics.push(tr);
    }
    r
}

/// (topic, partition) -> committed position for one group: the asked partitions, or every
/// committed one when `asked` is `None`.
type ByTopic = Vec<(String, Vec<(i32, Option<Position>)>)>;

fn committed(
    shard: &Shard,
    group: &str,
    asked: Option<Vec<(String, Vec<i32>)>>,
) -> Result<ByTopic, OpError> {
    let Some(topics) = asked else {
        let mut out: ByTopic = Vec::new();
        for c in offsets::committed(shard, group, None)? {
            let entry = (c.partition as i32, c.offset);
            match out.last_mut() {
                Some((last, parts)) if *last == c.topic => parts.push(entry),
                _ => out.push((c.topic, vec![entry])),
            }
        }
        return Ok(out);
    };
    // A negative partition index has nothing committed; the others are asked for.
    let valid = topics
        .iter()
        .flat_map(|(t, parts)| {
            parts
                .iter()
                .filter_map(|&p| u32::try_from(p).ok().map(|p| (t.clone(), p)))
        })
        .collect();
    let mut found = offsets::committed(shard, group, Some(valid))?.into_iter();
    Ok(topics
        .into_iter()
        .map(|(t, parts)| {
            let got = parts
                .into_iter()
                .map(|p| {
                    let c = if p >= 0 {
                        found.next().and_then(|c: Committed| c.offset)
                    } else {
                        None
                    };
                    (p, c)
                })
                .collect();
            (t, got)
        })
        .collect())
}

/// OffsetFetch's `committed_leader_epoch`: -1 when none was committed.
fn leader_epoch(c: &Option<Position>) -> i32 {
    c.as_ref().and_then(|c| c.leader_epoch).unwrap_or(-1)
}

pub fn fetch_offsets(shard: &Shard, version: i16, req: OffsetFetchRequest) -> OffsetFetchResponse {
    let mut r = OffsetFetchResponse::default();
    if version >= 8 {
        for g in &req.groups {
            let group = g.group_id.0.to_string();
            let mut gr = OffsetFetchResponseGroup::default();
            gr.group_id = g.group_id.clone();
            let asked = g.topics.as_ref().map(|ts| {
                ts.iter()
                    .map(|t| (t.name.0.to_string(), t.partition_indexes.clone()))
                    .collect()
            });
            // v9: a consumer group's member asks with its id and epoch (Kafka checks them).
            let checked = offsets::check_fetch(
                shard,
                &group,
                g.member_id.as_ref().map(|m| m.as_str()),
                g.member_epoch,
            );
            let found = match checked.and_then(|()| committed(shard, &group, asked)) {
                Ok(found) => found,
                Err(e) => {
                    gr.error_code = e.code.code();
                    r.groups.push(gr);
                    continue;
                }
            };
            for (t, parts) in found {
                let mut tr = OffsetFetchResponseTopics::default();
                tr.name = TopicName(text(&t));
                for (p, c) in parts {
                    let mut pr = OffsetFetchResponsePartitions::default();
                    pr.partition_index = p;
                    pr.committed_leader_epoch = leader_epoch(&c);
                    pr.committed_offset = c.as_ref().map_or(-1, |c| c.offset as i64);
                    pr.metadata = Some(text(c.as_ref().map_or("", |c| c.metadata.as_str())));
                    tr.partitions.push(pr);
                }
                gr.topics.push(tr);
            }
            r.groups.push(gr);
        }
        return r;
    }
    let group = req.group_id.0.to_string();
    let asked = req.topics.as_ref().map(|ts| {
        ts.iter()
            .map(|t| (t.name.0.to_string(), t.partition_indexes.clone()))
            .collect()
    });
    let found = committed(shard, &group, asked);
    if let Err(e) = &found {
        let code = e.code;
        r.error_code = code.code();
        if version < 2 {
            // v1 has no top-level error code (the encoder drops it, which would read as "no
            // offsets committed"): Kafka answers each asked partition with the error.
            for t in req.topics.iter().flatten() {
                let mut tr = OffsetFetchResponseTopic::default();
                tr.name = t.name.clone();
                for &p in &t.partition_indexes {
                    let mut pr = OffsetFetchResponsePartition::default();
                    pr.partition_index = p;
                    pr.committed_offset = -1;
                    pr.error_code = code.code();
                    tr.partitions.push(pr);
                }
                r.topics.push(tr);
            }
        }
        return r;
    }
    for (t, parts) in found.unwrap_or_default() {
        let mut tr = OffsetFetchResponseTopic::default();
        tr.name = TopicName(text(&t));
        for (p, c) in parts {
            let mut pr = OffsetFetchResponsePartition::default();
            pr.partition_index = p;
            pr.committed_leader_epoch = leader_epoch(&c);
            pr.committed_offset = c.as_ref().map_or(-1, |c| c.offset as i64);
            pr.metadata = Some(text(c.as_ref().map_or("", |c| c.metadata.as_str())));
            tr.partitions.push(pr);
        }
        r.topics.push(tr);
    }
    r
}

pub fn describe(shard: &Shard, version: i16, req: DescribeGroupsRequest) -> DescribeGroupsResponse {
    let mut r = DescribeGroupsResponse::default();
    for g in &req.groups {
        let group = g.0.to_string();
        let mut dg = DescribedGroup::default();
        dg.group_id = g.clone();
        let d = match groups::describe(shard, &group) {
            Ok(d) => d,
            Err(e) => {
                dg.error_code = e.code.code();
                // Only v6+ has the field; the encoder refuses a set field an older version
                // lacks (which closed the connection instead of answering NOT_COORDINATOR).
                if version >= 6 {
                    dg.error_message = Some(text(&e.message));
                }
                r.groups.push(dg);
                continue;
            }
        };
        dg.authorized_operations = authorized_operations::group(req.include_authorized_operations);
        if d.group_type == GroupType::Consumer {
            // Kafka's DescribeGroups describes classic groups only: a consumer group reads
            // as Dead there (ConsumerGroupDescribe describes it).
            dg.group_state = text("Dead");
            r.groups.push(dg);
            continue;
        }
        dg.group_state = text(&d.state);
        dg.protocol_type = text(&d.protocol_type);
        dg.protocol_data = text(&d.protocol);
        dg.members = d
            .members
            .into_iter()
            .map(|m| {
                let mut dm = DescribedGroupMember::default();
                dm.member_id = text(&m.member_id);
                dm.group_instance_id = m.group_instance_id.as_deref().map(text);
                dm.client_id = text(&m.client_id);
                dm.member_assignment = m.assignment.into();
                dm
            })
            .collect();
        r.groups.push(dg);
    }
    r
}

pub fn list(shard: &Shard, req: ListGroupsRequest) -> ListGroupsResponse {
    let mut r = ListGroupsResponse::default();
    for g in groups::list(shard) {
        // Filters (v4 states, v5 types) match case-insensitively, as Kafka's do.
        let wanted = |filter: &[StrBytes], value: &str| {
            filter.is_empty() || filter.iter().any(|f| f.eq_ignore_ascii_case(value))
        };
        let group_type = g.group_type.name();
        if !wanted(&req.states_filter, &g.state) || !wanted(&req.types_filter, group_type) {
            continue;
        }
        let mut lg = ListedGroup::default();
        lg.group_id = GroupId(text(&g.group));
        lg.protocol_type = text(&g.protocol_type);
        lg.group_state = text(&g.state);
        lg.group_type = text(group_type);
        r.groups.push(lg);
    }
    r
}

/// DeleteGroups: each group is deleted by its coordinator (NOT_COORDINATOR elsewhere), only
/// without members (NON_EMPTY_GROUP), GROUP_ID_NOT_FOUND for one never seen.
pub async fn delete_groups(shard: &Rc<Shard>, req: &DeleteGroupsRequest) -> DeleteGroupsResponse {
    let mut r = DeleteGroupsResponse::default();
    for g in &req.groups_names {
        let mut dr = DeletableGroupResult::default();
        dr.group_id = g.clone();
        if let Err(e) = offsets::delete_group(shard, &g.0).await {
            dr.error_code = e.code.code();
        }
        r.results.push(dr);
    }
    r
}

/// OffsetDelete: the group's committed offsets of the named partitions, except those of
/// topics a member subscribes to (GROUP_SUBSCRIBED_TO_TOPIC, per partition).
pub async fn offset_delete(shard: &Rc<Shard>, req: &OffsetDeleteRequest) -> OffsetDeleteResponse {
    let mut r = OffsetDeleteResponse::default();
    let asked: Vec<(String, u32)> = req
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions.iter().filter_map(|p| {
                u32::try_from(p.partition_index)
                    .ok()
                    .map(|i| (t.name.0.to_string(), i))
            })
        })
        .collect();
    let mut results = match offsets::delete_offsets(shard, &req.group_id.0, asked).await {
        Ok(results) => results.into_iter(),
        Err(e) => {
            r.error_code = e.code.code();
            return r;
        }
    };
    for t in &req.topics {
        let mut tr = OffsetDeleteResponseTopic::default();
        tr.name = t.name.clone();
        for p in &t.partitions {
            let mut pr = OffsetDeleteResponsePartition::default();
            pr.partition_index = p.partition_index;
            let outcome = if p.partition_index < 0 {
                Err(ErrorCode::UnknownTopicOrPartition)
            } else {
                results.next().unwrap_or(Ok(())).map_err(|e| e.code)
            };
            if let Err(code) = outcome {
                pr.error_code = code.code();
            }
            tr.partitions.push(pr);
        }
        r.topics.push(tr);
    }
    r
}

/// One partition's commit as a Kafka client sent it (OffsetCommit, TxnOffsetCommit); `None`
/// for a negative partition or offset.
pub(super) fn commit_record(
    topic: &TopicName,
    partition: i32,
    offset: i64,
    leader_epoch: i32,
    metadata: Option<&StrBytes>,
) -> Option<PartitionOffset> {
    Some(PartitionOffset {
        topic: topic.0.to_string(),
        partition: u32::try_from(partition).ok()?,
        offset: u64::try_from(offset).ok()?,
        // -1: the client did not know the epoch (and OffsetCommit v2..v5 do not carry it).
        leader_epoch: (leader_epoch >= 0).then_some(leader_epoch),
        metadata: metadata.map(|m| m.to_string()).unwrap_or_default(),
    })
}

/// ConsumerGroupHeartbeat 0-1 (KIP-848): topic ids resolved to names through the
/// metadata (owned partitions of topics it no longer knows are dropped: they are gone),
/// the broker operation called, the assignment's names turned back into ids.
pub fn consumer_heartbeat(
    shard: &Shard,
    client_id: &str,
    req: ConsumerGroupHeartbeatRequest,
) -> ConsumerGroupHeartbeatResponse {
    let mut r = ConsumerGroupHeartbeatResponse::default();
    r.member_epoch = req.member_epoch;
    let md = shard.metadata.borrow().clone();
    let owned = req.topic_partitions.as_ref().map(|tps| {
        tps.iter()
            .filter_map(|t| {
                md.topics
                    .values()
                    .find(|i| topic_uuid(i.id) == t.topic_id)
                    .map(|i| (i.name.clone(), &t.partitions))
            })
            .flat_map(|(name, parts)| {
                parts
                    .iter()
                    .filter_map(move |p| u32::try_from(*p).ok().map(|p| (name.clone(), p)))
            })
            .collect()
    });
    let hb = Heartbeat {
        member_id: req.member_id.to_string(),
        member_epoch: req.member_epoch,
        instance_id: req.instance_id.as_ref().map(|s| s.to_string()),
        rack_id: req.rack_id.as_ref().map(|s| s.to_string()),
        rebalance_timeout_ms: req.rebalance_timeout_ms,
        subscribed_topic_names: req
            .subscribed_topic_names
            .as_ref()
            .map(|ts| ts.iter().map(|t| t.0.to_string()).collect()),
        subscribed_topic_regex: req.subscribed_topic_regex.as_ref().map(|s| s.to_string()),
        server_assignor: req.server_assignor.as_ref().map(|s| s.to_string()),
        owned,
        client_id: client_id.to_string(),
        client_host: String::new(),
    };
    match groups::consumer_heartbeat(shard, &req.group_id.0, hb) {
        Ok(reply) => {
            r.member_id = Some(text(&reply.member_id));
            r.member_epoch = reply.member_epoch;
            r.heartbeat_interval_ms = reply.heartbeat_interval_ms;
            r.assignment = reply.assignment.map(|tps| {
                let mut a = HeartbeatAssignment::default();
                a.topic_partitions = by_topic_id(&md, &tps)
                    .into_iter()
                    .map(|(id, _, parts)| {
                        let mut t = HeartbeatTopicPartitions::default();
                        t.topic_id = id;
                        t.partitions = parts;
                        t
                    })
                    .collect();
                a
            });
        }
        Err(e) => {
            r.error_code = e.code.code();
            r.error_message = Some(text(&e.message));
        }
    }
    r
}

/// Partitions grouped per topic, named by topic id (topics gone from the metadata dropped).
fn by_topic_id(
    md: &crate::controller::metadata::ClusterMetadata,
    tps: &[(String, u32)],
) -> Vec<(uuid::Uuid, String, Vec<i32>)> {
    let mut out: Vec<(uuid::Uuid, String, Vec<i32>)> = Vec::new();
    for (topic, p) in tps {
        let Some(info) = md.topic(topic) else {
            continue;
        };
        let id = topic_uuid(info.id);
        match out.last_mut() {
            Some((last, _, parts)) if *last == id => parts.push(*p as i32),
            _ => out.push((id, topic.clone(), vec![*p as i32])),
        }
    }
    out
}

/// ConsumerGroupDescribe 0: each group from its coordinator (NOT_COORDINATOR elsewhere),
/// GROUP_ID_NOT_FOUND for a classic or unknown group, as Kafka answers.
pub fn consumer_describe(
    shard: &Shard,
    version: i16,
    req: ConsumerGroupDescribeRequest,
) -> ConsumerGroupDescribeResponse {
    let md = shard.metadata.borrow().clone();
    let assignment = |tps: &[(String, u32)]| {
        let mut a = DescribeAssignment::default();
        a.topic_partitions = by_topic_id(&md, tps)
            .into_iter()
            .map(|(id, name, parts)| {
                let mut t = DescribeTopicPartitions::default();
                t.topic_id = id;
                t.topic_name = TopicName(text(&name));
                t.partitions = parts;
                t
            })
            .collect();
        a
    };
    let mut r = ConsumerGroupDescribeResponse::default();
    for g in &req.group_ids {
        let mut dg = ConsumerDescribedGroup::default();
        dg.group_id = g.clone();
        dg.authorized_operations = authorized_operations::group(req.include_authorized_operations);
        match groups::consumer_describe(shard, &g.0) {
            Ok(d) => {
                dg.group_state = text(d.state.name());
                dg.group_epoch = d.group_epoch;
                dg.assignment_epoch = d.assignment_epoch;
                dg.assignor_name = text(&d.assignor);
                dg.members = d
                    .members
                    .iter()
                    .map(|m| {
                        let mut dm = ConsumerDescribedMember::default();
                        dm.member_id = text(&m.member_id);
                        dm.instance_id = m.instance_id.as_deref().map(text);
                        dm.rack_id = m.rack_id.as_deref().map(text);
                        dm.member_epoch = m.member_epoch;
                        dm.client_id = text(&m.client_id);
                        dm.client_host = text(&m.client_host);
                        dm.subscribed_topic_regex = m.subscribed_regex.as_deref().map(text);
                        dm.subscribed_topic_names = m
                            .subscribed_topics
                            .iter()
                            .map(|t| TopicName(text(t)))
                            .collect();
                        dm.assignment = assignment(&m.assigned);
                        dm.target_assignment = assignment(&m.target);
                        if version >= 1 {
                            dm.member_type = 1; // uses the consumer protocol
                        }
                        dm
                    })
                    .collect();
            }
            Err(e) => {
                dg.error_code = e.code.code();
                dg.error_message = Some(text(&e.message));
            }
        }
        r.groups.push(dg);
    }
    r
}
