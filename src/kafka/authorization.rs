//! ACL enforcement on the Kafka listener, as Kafka's `KafkaApis` checks each request: on when
//! the listener authenticates (`--kafka-sasl-mechanisms`), for the connection's principal
//! (`User:<name>`) and address. A request is looked at before it is handled:
//! - APIs with per-topic items (Produce, Fetch, ListOffsets, OffsetCommit, OffsetForLeaderEpoch,
//!   Metadata) lose the topics the caller may not use, are handled without them, and the
//!   answer gets those topics back with TOPIC_AUTHORIZATION_FAILED (Metadata of every topic
//!   just leaves them out);
//! - APIs on one group or the cluster are answered at once with GROUP_/CLUSTER_AUTHORIZATION_FAILED;
//! - admin APIs with several items are refused whole when any item is refused, each item
//!   carrying the code (Kafka refuses item by item; a refused admin request names what it
//!   lacked either way).
//!
//! The rules (which operation on which resource) are Kafka's; the decision is
//! [`crate::broker::acls`]'s.

use std::collections::HashSet;

use kafka_protocol::messages::alter_configs_response::AlterConfigsResourceResponse;
use kafka_protocol::messages::create_acls_response::AclCreationResult;
use kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use kafka_protocol::messages::create_topics_response::CreatableTopicResult;
use kafka_protocol::messages::delete_acls_response::DeleteAclsFilterResult;
use kafka_protocol::messages::delete_groups_response::DeletableGroupResult;
use kafka_protocol::messages::delete_records_response::{
    DeleteRecordsPartitionResult, DeleteRecordsTopicResult,
};
use kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use kafka_protocol::messages::describe_configs_response::DescribeConfigsResult;
use kafka_protocol::messages::describe_groups_response::DescribedGroup;
use kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use kafka_protocol::messages::metadata_response::MetadataResponseTopic;
use kafka_protocol::messages::offset_commit_response::{
    OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use kafka_protocol::messages::offset_for_leader_epoch_response::{
    EpochEndOffset, OffsetForLeaderTopicResult,
};
use kafka_protocol::messages::produce_response::{PartitionProduceResponse, TopicProduceResponse};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;

use super::transactions::OPERATION_NOT_ATTEMPTED;
use crate::auth::acl::{Operation, ResourceType};
use crate::broker::acls::{self, Caller};
use crate::broker::Shard;
use crate::protocol::ErrorCode;

const TOPIC: ErrorCode = ErrorCode::TopicAuthorizationFailed;
const GROUP: ErrorCode = ErrorCode::GroupAuthorizationFailed;
const CLUSTER: ErrorCode = ErrorCode::ClusterAuthorizationFailed;

/// What becomes of a request.
pub enum Checked {
    /// Handle it, then put the refused items back into the answer.
    Handle(Box<RequestKind>, Refused),
    /// Answer this instead.
    Answer(Box<ResponseKind>),
    /// An API without a rule, from a caller without every right on the cluster.
    Close,
}

/// Items taken out of a request, to answer as refused.
#[derive(Default)]
pub struct Refused {
    /// Topic names and their partitions.
    topics: Vec<(TopicName, Vec<i32>)>,
    /// Metadata of every topic: leave out what the caller may not describe.
    filter_metadata: bool,
    /// ListGroups: leave out the groups the caller may not describe.
    filter_groups: bool,
}

fn may(shard: &Shard, c: &Caller, op: Operation, rt: ResourceType, name: &str) -> bool {
    acls::authorized(shard, c, op, rt, name)
}

fn topic_ok(shard: &Shard, c: &Caller, op: Operation, name: &str) -> bool {
    may(shard, c, op, ResourceType::Topic, name)
}

fn group_ok(shard: &Shard, c: &Caller, op: Operation, name: &str) -> bool {
    may(shard, c, op, ResourceType::Group, name)
}

fn cluster_ok(shard: &Shard, c: &Caller, op: Operation) -> bool {
    acls::on_cluster(shard, c, op)
}

/// Splits `items` into those the caller may `op` on (kept in the request) and the refused
/// ones' names and partitions.
fn split_topics<T>(
    shard: &Shard,
    c: &Caller,
    op: Operation,
    items: &mut Vec<T>,
    name: impl Fn(&T) -> TopicName,
    partitions: impl Fn(&T) -> Vec<i32>,
) -> Vec<(TopicName, Vec<i32>)> {
    let mut refused = Vec::new();
    items.retain(|t| {
        let n = name(t);
        let ok = topic_ok(shard, c, op, &n);
        if !ok {
            refused.push((n, partitions(t)));
        }
        ok
    });
    refused
}

fn msg(code: ErrorCode) -> Option<StrBytes> {
    Some(StrBytes::from_static_str(match code {
        ErrorCode::TopicAuthorizationFailed => "not authorized on the topic",
        ErrorCode::GroupAuthorizationFailed => "not authorized on the group",
        _ => "not authorized on the cluster",
    }))
}

/// Looks at `request` (of `version`: a refusal carries only the fields it has) for `caller`
/// (authorization is on).
pub fn check(shard: &Shard, caller: &Caller, version: i16, request: RequestKind) -> Checked {
    let c = caller;
    let handle = |r: RequestKind, refused: Refused| Checked::Handle(Box::new(r), refused);
    let answer = |r: ResponseKind| Checked::Answer(Box::new(r));
    let topics_only = |topics| Refused {
        topics,
        ..Refused::default()
    };
    match request {
        RequestKind::ApiVersions(_)
        | RequestKind::SaslHandshake(_)
        | RequestKind::SaslAuthenticate(_) => handle(request, Refused::default()),
        RequestKind::Produce(mut r) => {
            let refused = split_topics(
                shard,
                c,
                Operation::Write,
                &mut r.topic_data,
                |t| t.name.clone(),
                |t| t.partition_data.iter().map(|p| p.index).collect(),
            );
            handle(RequestKind::Produce(r), topics_only(refused))
        }
        RequestKind::Fetch(mut r) => {
            // Topic ids (v13+) are named from the metadata, as the fetch handler does.
            let md = shard.metadata.borrow();
            let named = |t: &fetch_request::FetchTopic| {
                if t.topic.is_empty() {
                    let name = md
                        .topics
                        .values()
                        .find(|i| super::topic_uuid(i.id) == t.topic_id)
                        .map(|i| i.name.clone())
                        .unwrap_or_default();
                    TopicName(StrBytes::from_string(name))
                } else {
                    t.topic.clone()
                }
            };
            let mut refused = Vec::new();
            r.topics.retain(|t| {
                let n = named(t);
                // An unknown id is the handler's to answer.
                let ok = n.is_empty() || topic_ok(shard, c, Operation::Read, &n);
                if !ok {
                    refused.push((n, t.partitions.iter().map(|p| p.partition).collect()));
                }
                ok
            });
            drop(md);
            handle(RequestKind::Fetch(r), topics_only(refused))
        }
        RequestKind::ListOffsets(mut r) => {
            let refused = split_topics(
                shard,
                c,
                Operation::Describe,
                &mut r.topics,
                |t| t.name.clone(),
                |t| t.partitions.iter().map(|p| p.partition_index).collect(),
            );
            handle(RequestKind::ListOffsets(r), topics_only(refused))
        }
        RequestKind::OffsetForLeaderEpoch(mut r) => {
            let refused = split_topics(
                shard,
                c,
                Operation::Describe,
                &mut r.topics,
                |t| t.topic.clone(),
                |t| t.partitions.iter().map(|p| p.partition).collect(),
            );
            handle(RequestKind::OffsetForLeaderEpoch(r), topics_only(refused))
        }
        RequestKind::Metadata(mut r) => {
            let mut refused = Refused::default();
            match r.topics.as_mut() {
                None => refused.filter_metadata = true,
                Some(topics) => {
                    let existing: HashSet<String> =
                        shard.metadata.borrow().topics.keys().cloned().collect();
                    topics.retain(|t| {
                        let Some(n) = t.name.clone() else {
                            return true;
                        };
                        // Describing needs DESCRIBE; an auto-creation needs CREATE as well.
                        let ok = topic_ok(shard, c, Operation::Describe, &n)
                            && (existing.contains(&*n.0)
                                || !r.allow_auto_topic_creation
                                || cluster_ok(shard, c, Operation::Create)
                                || topic_ok(shard, c, Operation::Create, &n));
                        if !ok {
                            refused.topics.push((n, Vec::new()));
                        }
                        ok
                    });
                }
            }
            handle(RequestKind::Metadata(r), refused)
        }
        RequestKind::FindCoordinator(r) => {
            let rt = if r.key_type == 1 {
                ResourceType::TransactionalId
            } else {
                ResourceType::Group
            };
            let code = if r.key_type == 1 {
                ErrorCode::TransactionalIdAuthorizationFailed
            } else {
                GROUP
            };
            let keys: Vec<StrBytes> = if r.coordinator_keys.is_empty() {
                vec![r.key.clone()]
            } else {
                r.coordinator_keys.clone()
            };
            if keys
                .iter()
                .all(|k| may(shard, c, Operation::Describe, rt, k))
            {
                return handle(RequestKind::FindCoordinator(r), Refused::default());
            }
            let mut out = FindCoordinatorResponse::default();
            if version >= 4 {
                // v4+ answers per key, nothing at the top.
                out.coordinators = keys
                    .into_iter()
                    .map(|k| {
                        let mut x = Coordinator::default();
                        x.key = k;
                        x.node_id = BrokerId(-1);
                        x.port = -1;
                        x.error_code = code.code();
                        x.error_message = msg(code);
                        x
                    })
                    .collect();
            } else {
                out.error_code = code.code();
                if version >= 1 {
                    out.error_message = msg(code);
                }
                out.node_id = BrokerId(-1);
                out.port = -1;
            }
            answer(ResponseKind::FindCoordinator(out))
        }
        RequestKind::JoinGroup(r) => {
            if group_ok(shard, c, Operation::Read, &r.group_id) {
                return handle(RequestKind::JoinGroup(r), Refused::default());
            }
            let mut out = JoinGroupResponse::default();
            out.error_code = GROUP.code();
            out.generation_id = -1;
            answer(ResponseKind::JoinGroup(out))
        }
        RequestKind::SyncGroup(r) => {
            if group_ok(shard, c, Operation::Read, &r.group_id) {
                return handle(RequestKind::SyncGroup(r), Refused::default());
            }
            let mut out = SyncGroupResponse::default();
            out.error_code = GROUP.code();
            answer(ResponseKind::SyncGroup(out))
        }
        RequestKind::Heartbeat(r) => {
            if group_ok(shard, c, Operation::Read, &r.group_id) {
                return handle(RequestKind::Heartbeat(r), Refused::default());
            }
            let mut out = HeartbeatResponse::default();
            out.error_code = GROUP.code();
            answer(ResponseKind::Heartbeat(out))
        }
        RequestKind::ConsumerGroupHeartbeat(r) => {
            // Kafka: READ on the group, DESCRIBE on every subscribed topic.
            let code = if !group_ok(shard, c, Operation::Read, &r.group_id) {
                GROUP
            } else if r
                .subscribed_topic_names
                .iter()
                .flatten()
                .any(|t| !topic_ok(shard, c, Operation::Describe, t))
            {
                TOPIC
            } else {
                return handle(RequestKind::ConsumerGroupHeartbeat(r), Refused::default());
            };
            let mut out = kafka_protocol::messages::ConsumerGroupHeartbeatResponse::default();
            out.error_code = code.code();
            out.error_message = msg(code);
            answer(ResponseKind::ConsumerGroupHeartbeat(out))
        }
        RequestKind::ConsumerGroupDescribe(r) => {
            if r.group_ids
                .iter()
                .all(|g| group_ok(shard, c, Operation::Describe, g))
            {
                return handle(RequestKind::ConsumerGroupDescribe(r), Refused::default());
            }
            let mut out = kafka_protocol::messages::ConsumerGroupDescribeResponse::default();
            out.groups = r
                .group_ids
                .iter()
                .map(|g| {
                    let mut x =
                        kafka_protocol::messages::consumer_group_describe_response::DescribedGroup::default();
                    x.group_id = g.clone();
                    x.error_code = GROUP.code();
                    x.error_message = msg(GROUP);
                    x.authorized_operations = i32::MIN;
                    x
                })
                .collect();
            answer(ResponseKind::ConsumerGroupDescribe(out))
        }
        RequestKind::LeaveGroup(r) => {
            if group_ok(shard, c, Operation::Read, &r.group_id) {
                return handle(RequestKind::LeaveGroup(r), Refused::default());
            }
            let mut out = LeaveGroupResponse::default();
            out.error_code = GROUP.code();
            answer(ResponseKind::LeaveGroup(out))
        }
        RequestKind::OffsetCommit(mut r) => {
            if !group_ok(shard, c, Operation::Read, &r.group_id) {
                let mut out = OffsetCommitResponse::default();
                out.topics = r
                    .topics
                    .iter()
                    .map(|t| {
                        commit_topic(
                            &t.name,
                            t.partitions.iter().map(|p| p.partition_index),
                            GROUP,
                        )
                    })
                    .collect();
                return answer(ResponseKind::OffsetCommit(out));
            }
            let refused = split_topics(
                shard,
                c,
                Operation::Read,
                &mut r.topics,
                |t| t.name.clone(),
                |t| t.partitions.iter().map(|p| p.partition_index).collect(),
            );
            handle(RequestKind::OffsetCommit(r), topics_only(refused))
        }
        RequestKind::OffsetFetch(r) => {
            let mut groups: Vec<&str> = r.groups.iter().map(|g| &*g.group_id.0).collect();
            if groups.is_empty() {
                groups.push(&r.group_id);
            }
            if groups
                .iter()
                .all(|g| group_ok(shard, c, Operation::Describe, g))
            {
                return handle(RequestKind::OffsetFetch(r), Refused::default());
            }
            let mut out = OffsetFetchResponse::default();
            if version >= 8 {
                out.groups = r
                    .groups
                    .iter()
                    .map(|g| {
                        let mut x = offset_fetch_response::OffsetFetchResponseGroup::default();
                        x.group_id = g.group_id.clone();
                        x.error_code = GROUP.code();
                        x
                    })
                    .collect();
            } else if version >= 2 {
                out.error_code = GROUP.code();
            } else {
                // v1 has no top-level code: each partition asked carries it.
                out.topics = r
                    .topics
                    .iter()
                    .flatten()
                    .map(|t| {
                        let mut x = offset_fetch_response::OffsetFetchResponseTopic::default();
                        x.name = t.name.clone();
                        x.partitions = t
                            .partition_indexes
                            .iter()
                            .map(|p| {
                                let mut y =
                                    offset_fetch_response::OffsetFetchResponsePartition::default();
                                y.partition_index = *p;
                                y.committed_offset = -1;
                                y.error_code = GROUP.code();
                                y
                            })
                            .collect();
                        x
                    })
                    .collect();
            }
            answer(ResponseKind::OffsetFetch(out))
        }
        RequestKind::DescribeGroups(r) => {
            if r.groups
                .iter()
                .all(|g| group_ok(shard, c, Operation::Describe, g))
            {
                return handle(RequestKind::DescribeGroups(r), Refused::default());
            }
            let mut out = DescribeGroupsResponse::default();
            out.groups = r
                .groups
                .iter()
                .map(|g| {
                    let mut x = DescribedGroup::default();
                    x.group_id = g.clone();
                    x.error_code = GROUP.code();
                    if version >= 6 {
                        x.error_message = msg(GROUP);
                    }
                    x
                })
                .collect();
            answer(ResponseKind::DescribeGroups(out))
        }
        RequestKind::ListGroups(r) => {
            // Kafka lists every group to a caller who may describe the cluster, else the
            // groups it may describe.
            let refused = Refused {
                filter_groups: !cluster_ok(shard, c, Operation::Describe),
                ..Refused::default()
            };
            handle(RequestKind::ListGroups(r), refused)
        }
        RequestKind::DeleteGroups(r) => {
            if r.groups_names
                .iter()
                .all(|g| group_ok(shard, c, Operation::Delete, g))
            {
                return handle(RequestKind::DeleteGroups(r), Refused::default());
            }
            let mut out = DeleteGroupsResponse::default();
            out.results = r
                .groups_names
                .iter()
                .map(|g| {
                    let mut x = DeletableGroupResult::default();
                    x.group_id = g.clone();
                    x.error_code = GROUP.code();
                    x
                })
                .collect();
            answer(ResponseKind::DeleteGroups(out))
        }
        RequestKind::OffsetDelete(r) => {
            if group_ok(shard, c, Operation::Delete, &r.group_id)
                && r.topics
                    .iter()
                    .all(|t| topic_ok(shard, c, Operation::Read, &t.name))
            {
                return handle(RequestKind::OffsetDelete(r), Refused::default());
            }
            let mut out = OffsetDeleteResponse::default();
            out.error_code = GROUP.code();
            answer(ResponseKind::OffsetDelete(out))
        }
        RequestKind::CreateTopics(r) => {
            let ok = cluster_ok(shard, c, Operation::Create)
                || r.topics
                    .iter()
                    .all(|t| topic_ok(shard, c, Operation::Create, &t.name));
            if ok {
                return handle(RequestKind::CreateTopics(r), Refused::default());
            }
            let mut out = CreateTopicsResponse::default();
            out.topics = r
                .topics
                .iter()
                .map(|t| {
                    let mut x = CreatableTopicResult::default();
                    x.name = t.name.clone();
                    x.error_code = TOPIC.code();
                    x.error_message = msg(TOPIC);
                    x.num_partitions = -1;
                    x.replication_factor = -1;
                    x
                })
                .collect();
            answer(ResponseKind::CreateTopics(out))
        }
        RequestKind::DeleteTopics(r) => {
            let names: Vec<TopicName> = r
                .topic_names
                .iter()
                .cloned()
                .chain(r.topics.iter().filter_map(|t| t.name.clone()))
                .collect();
            if names
                .iter()
                .all(|n| topic_ok(shard, c, Operation::Delete, n))
            {
                return handle(RequestKind::DeleteTopics(r), Refused::default());
            }
            let mut out = DeleteTopicsResponse::default();
            out.responses = names
                .into_iter()
                .map(|n| {
                    let mut x = DeletableTopicResult::default();
                    x.name = Some(n);
                    x.error_code = TOPIC.code();
                    if version >= 5 {
                        x.error_message = msg(TOPIC);
                    }
                    x
                })
                .collect();
            answer(ResponseKind::DeleteTopics(out))
        }
        RequestKind::CreatePartitions(r) => {
            if r.topics
                .iter()
                .all(|t| topic_ok(shard, c, Operation::Alter, &t.name))
            {
                return handle(RequestKind::CreatePartitions(r), Refused::default());
            }
            let mut out = CreatePartitionsResponse::default();
            out.results = r
                .topics
                .iter()
                .map(|t| {
                    let mut x = CreatePartitionsTopicResult::default();
                    x.name = t.name.clone();
                    x.error_code = TOPIC.code();
                    x.error_message = msg(TOPIC);
                    x
                })
                .collect();
            answer(ResponseKind::CreatePartitions(out))
        }
        RequestKind::DeleteRecords(r) => {
            if r.topics
                .iter()
                .all(|t| topic_ok(shard, c, Operation::Delete, &t.name))
            {
                return handle(RequestKind::DeleteRecords(r), Refused::default());
            }
            let mut out = DeleteRecordsResponse::default();
            out.topics = r
                .topics
                .iter()
                .map(|t| {
                    let mut x = DeleteRecordsTopicResult::default();
                    x.name = t.name.clone();
                    x.partitions = t
                        .partitions
                        .iter()
                        .map(|p| {
                            let mut y = DeleteRecordsPartitionResult::default();
                            y.partition_index = p.partition_index;
                            y.low_watermark = -1;
                            y.error_code = TOPIC.code();
                            y
                        })
                        .collect();
                    x
                })
                .collect();
            answer(ResponseKind::DeleteRecords(out))
        }
        RequestKind::DescribeConfigs(r) => {
            let items: Vec<(i8, StrBytes)> = r
                .resources
                .iter()
                .map(|x| (x.resource_type, x.resource_name.clone()))
                .collect();
            if configs_ok(shard, c, Operation::DescribeConfigs, &items) {
                return handle(RequestKind::DescribeConfigs(r), Refused::default());
            }
            let mut out = DescribeConfigsResponse::default();
            out.results = items
                .into_iter()
                .map(|(rt, name)| {
                    let mut x = DescribeConfigsResult::default();
                    let code = config_code(rt);
                    x.error_code = code.code();
                    x.error_message = msg(code);
                    x.resource_type = rt;
                    x.resource_name = name;
                    x
                })
                .collect();
            answer(ResponseKind::DescribeConfigs(out))
        }
        RequestKind::AlterConfigs(r) => {
            let items: Vec<(i8, StrBytes)> = r
                .resources
                .iter()
                .map(|x| (x.resource_type, x.resource_name.clone()))
                .collect();
            if configs_ok(shard, c, Operation::AlterConfigs, &items) {
                return handle(RequestKind::AlterConfigs(r), Refused::default());
            }
            let mut out = AlterConfigsResponse::default();
            out.responses = config_refusals(items);
            answer(ResponseKind::AlterConfigs(out))
        }
        RequestKind::IncrementalAlterConfigs(r) => {
            let items: Vec<(i8, StrBytes)> = r
                .resources
                .iter()
                .map(|x| (x.resource_type, x.resource_name.clone()))
                .collect();
            if configs_ok(shard, c, Operation::AlterConfigs, &items) {
                return handle(RequestKind::IncrementalAlterConfigs(r), Refused::default());
            }
            let mut out = IncrementalAlterConfigsResponse::default();
            out.responses = config_refusals(items)
                .into_iter()
                .map(|a| {
                    let mut x =
                        incremental_alter_configs_response::AlterConfigsResourceResponse::default();
                    x.error_code = a.error_code;
                    x.error_message = a.error_message;
                    x.resource_type = a.resource_type;
                    x.resource_name = a.resource_name;
                    x
                })
                .collect();
            answer(ResponseKind::IncrementalAlterConfigs(out))
        }
        RequestKind::DescribeCluster(r) => {
            if cluster_ok(shard, c, Operation::Describe) {
                return handle(RequestKind::DescribeCluster(r), Refused::default());
            }
            let mut out = DescribeClusterResponse::default();
            out.error_code = CLUSTER.code();
            out.error_message = msg(CLUSTER);
            answer(ResponseKind::DescribeCluster(out))
        }
        RequestKind::DescribeLogDirs(r) => {
            if cluster_ok(shard, c, Operation::Describe) {
                return handle(RequestKind::DescribeLogDirs(r), Refused::default());
            }
            let mut out = DescribeLogDirsResponse::default();
            // Before v3 there is no code to give: no directory is described (as Kafka).
            if version >= 3 {
                out.error_code = CLUSTER.code();
            }
            answer(ResponseKind::DescribeLogDirs(out))
        }
        RequestKind::ListPartitionReassignments(r) => {
            if cluster_ok(shard, c, Operation::Describe) {
                return handle(
                    RequestKind::ListPartitionReassignments(r),
                    Refused::default(),
                );
            }
            let mut out = ListPartitionReassignmentsResponse::default();
            out.error_code = CLUSTER.code();
            out.error_message = msg(CLUSTER);
            answer(ResponseKind::ListPartitionReassignments(out))
        }
        RequestKind::AlterPartitionReassignments(r) => {
            if cluster_ok(shard, c, Operation::Alter) {
                return handle(
                    RequestKind::AlterPartitionReassignments(r),
                    Refused::default(),
                );
            }
            let mut out = AlterPartitionReassignmentsResponse::default();
            out.error_code = CLUSTER.code();
            out.error_message = msg(CLUSTER);
            answer(ResponseKind::AlterPartitionReassignments(out))
        }
        RequestKind::ElectLeaders(r) => {
            if cluster_ok(shard, c, Operation::Alter) {
                return handle(RequestKind::ElectLeaders(r), Refused::default());
            }
            let mut out = ElectLeadersResponse::default();
            if version >= 1 {
                out.error_code = CLUSTER.code();
            } else {
                // v0 has no top-level code: each partition asked carries it.
                out.replica_election_results = r
                    .topic_partitions
                    .iter()
                    .flatten()
                    .map(|t| {
                        let mut x = elect_leaders_response::ReplicaElectionResult::default();
                        x.topic = t.topic.clone();
                        x.partition_result = t
                            .partitions
                            .iter()
                            .map(|p| {
                                let mut y = elect_leaders_response::PartitionResult::default();
                                y.partition_id = *p;
                                y.error_code = CLUSTER.code();
                                y.error_message = msg(CLUSTER);
                                y
                            })
                            .collect();
                        x
                    })
                    .collect();
            }
            answer(ResponseKind::ElectLeaders(out))
        }
        RequestKind::DescribeUserScramCredentials(r) => {
            if cluster_ok(shard, c, Operation::Describe) {
                return handle(
                    RequestKind::DescribeUserScramCredentials(r),
                    Refused::default(),
                );
            }
            let mut out = DescribeUserScramCredentialsResponse::default();
            out.error_code = CLUSTER.code();
            out.error_message = msg(CLUSTER);
            answer(ResponseKind::DescribeUserScramCredentials(out))
        }
        RequestKind::AlterUserScramCredentials(r) => {
            if cluster_ok(shard, c, Operation::Alter) {
                return handle(
                    RequestKind::AlterUserScramCredentials(r),
                    Refused::default(),
                );
            }
            let mut out = AlterUserScramCredentialsResponse::default();
            out.results = r
                .deletions
                .iter()
                .map(|d| d.name.clone())
                .chain(r.upsertions.iter().map(|u| u.name.clone()))
                .map(|user| {
                    let mut x =
                        alter_user_scram_credentials_response::AlterUserScramCredentialsResult::default();
                    x.user = user;
                    x.error_code = CLUSTER.code();
                    x.error_message = msg(CLUSTER);
                    x
                })
                .collect();
            answer(ResponseKind::AlterUserScramCredentials(out))
        }
        RequestKind::DescribeAcls(r) => {
            if cluster_ok(shard, c, Operation::Describe) {
                return handle(RequestKind::DescribeAcls(r), Refused::default());
            }
            let mut out = DescribeAclsResponse::default();
            out.error_code = CLUSTER.code();
            out.error_message = msg(CLUSTER);
            answer(ResponseKind::DescribeAcls(out))
        }
        RequestKind::CreateAcls(r) => {
            if cluster_ok(shard, c, Operation::Alter) {
                return handle(RequestKind::CreateAcls(r), Refused::default());
            }
            let mut out = CreateAclsResponse::default();
            out.results = r
                .creations
                .iter()
                .map(|_| {
                    let mut x = AclCreationResult::default();
                    x.error_code = CLUSTER.code();
                    x.error_message = msg(CLUSTER);
                    x
                })
                .collect();
            answer(ResponseKind::CreateAcls(out))
        }
        RequestKind::DeleteAcls(r) => {
            if cluster_ok(shard, c, Operation::Alter) {
                return handle(RequestKind::DeleteAcls(r), Refused::default());
            }
            let mut out = DeleteAclsResponse::default();
            out.filter_results = r
                .filters
                .iter()
                .map(|_| {
                    let mut x = DeleteAclsFilterResult::default();
                    x.error_code = CLUSTER.code();
                    x.error_message = msg(CLUSTER);
                    x
                })
                .collect();
            answer(ResponseKind::DeleteAcls(out))
        }
        RequestKind::DescribeClientQuotas(r) => {
            if cluster_ok(shard, c, Operation::DescribeConfigs) {
                return handle(RequestKind::DescribeClientQuotas(r), Refused::default());
            }
            let mut out = DescribeClientQuotasResponse::default();
            out.error_code = CLUSTER.code();
            out.error_message = msg(CLUSTER);
            answer(ResponseKind::DescribeClientQuotas(out))
        }
        RequestKind::AlterClientQuotas(r) => {
            if cluster_ok(shard, c, Operation::AlterConfigs) {
                return handle(RequestKind::AlterClientQuotas(r), Refused::default());
            }
            let mut out = AlterClientQuotasResponse::default();
            out.entries = r
                .entries
                .iter()
                .map(|e| {
                    let refusal = (CLUSTER, "not authorized on the cluster".to_string());
                    super::admin::quota_alter_result(e, Some(refusal))
                })
                .collect();
            answer(ResponseKind::AlterClientQuotas(out))
        }
        RequestKind::InitProducerId(r) => {
            // Kafka 3+: an idempotent producer needs IDEMPOTENT_WRITE on the cluster or
            // WRITE on some topic; a transactional one WRITE on its transactional id.
            let ok = match &r.transactional_id {
                Some(id) => may(
                    shard,
                    c,
                    Operation::Write,
                    ResourceType::TransactionalId,
                    id,
                ),
                None => {
                    cluster_ok(shard, c, Operation::IdempotentWrite)
                        || acls::on_any(shard, c, Operation::Write, ResourceType::Topic)
                }
            };
            if ok {
                return handle(RequestKind::InitProducerId(r), Refused::default());
            }
            let mut out = InitProducerIdResponse::default();
            out.error_code = if r.transactional_id.is_some() {
                ErrorCode::TransactionalIdAuthorizationFailed.code()
            } else {
                CLUSTER.code()
            };
            out.producer_id = ProducerId(-1);
            out.producer_epoch = -1;
            answer(ResponseKind::InitProducerId(out))
        }
        // Transactions (Kafka's rules): WRITE on the transactional id, and WRITE on each topic
        // added, READ on the group whose offsets are sent (and on their topics).
        RequestKind::AddPartitionsToTxn(r) => {
            let id_ok = may(
                shard,
                c,
                Operation::Write,
                ResourceType::TransactionalId,
                &r.v3_and_below_transactional_id,
            );
            let refused: Vec<&TopicName> = r
                .v3_and_below_topics
                .iter()
                .filter(|t| !topic_ok(shard, c, Operation::Write, &t.name))
                .map(|t| &t.name)
                .collect();
            if id_ok && refused.is_empty() {
                return handle(RequestKind::AddPartitionsToTxn(r), Refused::default());
            }
            let mut out = AddPartitionsToTxnResponse::default();
            for t in &r.v3_and_below_topics {
                let code = if !id_ok {
                    ErrorCode::TransactionalIdAuthorizationFailed.code()
                } else if refused.contains(&&t.name) {
                    TOPIC.code()
                } else {
                    OPERATION_NOT_ATTEMPTED
                };
                let mut tr =
                    add_partitions_to_txn_response::AddPartitionsToTxnTopicResult::default();
                tr.name = t.name.clone();
                for &p in &t.partitions {
                    let mut pr =
                        add_partitions_to_txn_response::AddPartitionsToTxnPartitionResult::default(
                        );
                    pr.partition_index = p;
                    pr.partition_error_code = code;
                    tr.results_by_partition.push(pr);
                }
                out.results_by_topic_v3_and_below.push(tr);
            }
            answer(ResponseKind::AddPartitionsToTxn(out))
        }
        RequestKind::AddOffsetsToTxn(r) => {
            let code = if !may(
                shard,
                c,
                Operation::Write,
                ResourceType::TransactionalId,
                &r.transactional_id,
            ) {
                ErrorCode::TransactionalIdAuthorizationFailed
            } else if !group_ok(shard, c, Operation::Read, &r.group_id) {
                GROUP
            } else {
                return handle(RequestKind::AddOffsetsToTxn(r), Refused::default());
            };
            let mut out = AddOffsetsToTxnResponse::default();
            out.error_code = code.code();
            answer(ResponseKind::AddOffsetsToTxn(out))
        }
        RequestKind::EndTxn(r) => {
            if may(
                shard,
                c,
                Operation::Write,
                ResourceType::TransactionalId,
                &r.transactional_id,
            ) {
                return handle(RequestKind::EndTxn(r), Refused::default());
            }
            let mut out = EndTxnResponse::default();
            out.error_code = ErrorCode::TransactionalIdAuthorizationFailed.code();
            out.producer_id = ProducerId(-1);
            out.producer_epoch = -1;
            answer(ResponseKind::EndTxn(out))
        }
        RequestKind::TxnOffsetCommit(r) => {
            let code = if !may(
                shard,
                c,
                Operation::Write,
                ResourceType::TransactionalId,
                &r.transactional_id,
            ) {
                ErrorCode::TransactionalIdAuthorizationFailed
            } else if !group_ok(shard, c, Operation::Read, &r.group_id) {
                GROUP
            } else if r
                .topics
                .iter()
                .any(|t| !topic_ok(shard, c, Operation::Read, &t.name))
            {
                TOPIC
            } else {
                return handle(RequestKind::TxnOffsetCommit(r), Refused::default());
            };
            let mut out = TxnOffsetCommitResponse::default();
            for t in &r.topics {
                let mut tr = txn_offset_commit_response::TxnOffsetCommitResponseTopic::default();
                tr.name = t.name.clone();
                for p in &t.partitions {
                    let mut pr =
                        txn_offset_commit_response::TxnOffsetCommitResponsePartition::default();
                    pr.partition_index = p.partition_index;
                    pr.error_code = code.code();
                    tr.partitions.push(pr);
                }
                out.topics.push(tr);
            }
            answer(ResponseKind::TxnOffsetCommit(out))
        }
        // Every API the listener serves is above; one without its rule here is served to
        // those who may do anything on the cluster, and closes the connection of others
        // (there is no answer to build without knowing its shape).
        other => {
            if cluster_ok(shard, c, Operation::All) {
                handle(other, Refused::default())
            } else {
                Checked::Close
            }
        }
    }
}

/// A config resource's (Kafka's ConfigResource types: 2 topic, 4 broker, 8 broker logger)
/// check: topics by name, everything else on the cluster.
fn configs_ok(shard: &Shard, c: &Caller, op: Operation, items: &[(i8, StrBytes)]) -> bool {
    items.iter().all(|(rt, name)| match rt {
        2 => topic_ok(shard, c, op, name),
        _ => cluster_ok(shard, c, op),
    })
}

fn config_code(resource_type: i8) -> ErrorCode {
    if resource_type == 2 {
        TOPIC
    } else {
        CLUSTER
    }
}

fn config_refusals(items: Vec<(i8, StrBytes)>) -> Vec<AlterConfigsResourceResponse> {
    items
        .into_iter()
        .map(|(rt, name)| {
            let mut x = AlterConfigsResourceResponse::default();
            let code = config_code(rt);
            x.error_code = code.code();
            x.error_message = msg(code);
            x.resource_type = rt;
            x.resource_name = name;
            x
        })
        .collect()
}

fn commit_topic(
    name: &TopicName,
    partitions: impl Iterator<Item = i32>,
    code: ErrorCode,
) -> OffsetCommitResponseTopic {
    let mut t = OffsetCommitResponseTopic::default();
    t.name = name.clone();
    t.partitions = partitions
        .map(|p| {
            let mut x = OffsetCommitResponsePartition::default();
            x.partition_index = p;
            x.error_code = code.code();
            x
        })
        .collect();
    t
}

impl Refused {
    pub fn is_empty(&self) -> bool {
        self.topics.is_empty() && !self.filter_metadata && !self.filter_groups
    }

    /// Puts the refused items into `response` (of `version`).
    pub fn apply(self, shard: &Shard, caller: &Caller, version: i16, response: &mut ResponseKind) {
        let code = TOPIC.code();
        match response {
            ResponseKind::Produce(r) => {
                for (name, partitions) in self.topics {
                    let mut t = TopicProduceResponse::default();
                    t.name = name;
                    t.partition_responses = partitions
                        .into_iter()
                        .map(|p| {
                            let mut x = PartitionProduceResponse::default();
                            x.index = p;
                            x.error_code = code;
                            x.base_offset = -1;
                            x.log_append_time_ms = -1;
                            x.log_start_offset = -1;
                            x
                        })
                        .collect();
                    r.responses.push(t);
                }
            }
            ResponseKind::Fetch(r) => {
                let md = shard.metadata.borrow();
                for (name, partitions) in self.topics {
                    let mut t = FetchableTopicResponse::default();
                    // v13+ names topics by id only.
                    if version >= 13 {
                        if let Some(info) = md.topics.get(&*name.0) {
                            t.topic_id = super::topic_uuid(info.id);
                        }
                    } else {
                        t.topic = name;
                    }
                    t.partitions = partitions
                        .into_iter()
                        .map(|p| {
                            let mut x = PartitionData::default();
                            x.partition_index = p;
                            x.error_code = code;
                            x.high_watermark = -1;
                            x.last_stable_offset = -1;
                            x.log_start_offset = -1;
                            x
                        })
                        .collect();
                    r.responses.push(t);
                }
            }
            ResponseKind::ListOffsets(r) => {
                for (name, partitions) in self.topics {
                    let mut t = ListOffsetsTopicResponse::default();
                    t.name = name;
                    t.partitions = partitions
                        .into_iter()
                        .map(|p| {
                            let mut x = ListOffsetsPartitionResponse::default();
                            x.partition_index = p;
                            x.error_code = code;
                            x.offset = -1;
                            x.timestamp = -1;
                            x
                        })
                        .collect();
                    r.topics.push(t);
                }
            }
            ResponseKind::OffsetForLeaderEpoch(r) => {
                for (name, partitions) in self.topics {
                    let mut t = OffsetForLeaderTopicResult::default();
                    t.topic = name;
                    t.partitions = partitions
                        .into_iter()
                        .map(|p| {
                            let mut x = EpochEndOffset::default();
                            x.partition = p;
                            x.error_code = code;
                            x.leader_epoch = -1;
                            x.end_offset = -1;
                            x
                        })
                        .collect();
                    r.topics.push(t);
                }
            }
            ResponseKind::OffsetCommit(r) => {
                for (name, partitions) in self.topics {
                    r.topics
                        .push(commit_topic(&name, partitions.into_iter(), TOPIC));
                }
            }
            ResponseKind::Metadata(r) => {
                if self.filter_metadata {
                    r.topics.retain(|t| {
                        t.name
                            .as_ref()
                            .is_none_or(|n| topic_ok(shard, caller, Operation::Describe, n))
                    });
                }
                for (name, _) in self.topics {
                    let mut t = MetadataResponseTopic::default();
                    t.name = Some(name);
                    t.error_code = code;
                    r.topics.push(t);
                }
            }
            ResponseKind::ListGroups(r) if self.filter_groups => {
                r.groups
                    .retain(|g| group_ok(shard, caller, Operation::Describe, &g.group_id));
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use bytes::BytesMut;

    use super::*;
    use crate::broker::tests::on_broker;

    fn name(s: &str) -> TopicName {
        TopicName(StrBytes::from_string(s.to_string()))
    }

    /// A request of `api` naming topic `t` partition 0, group `g` and transactional id `x`
    /// wherever it names one.
    fn sample(api: ApiKey) -> Option<RequestKind> {
        let t = || name("t");
        let g = || GroupId(StrBytes::from_static_str("g"));
        Some(match api {
            ApiKey::Produce => {
                let mut r = ProduceRequest::default();
                let mut td = produce_request::TopicProduceData::default();
                td.name = t();
                td.partition_data = vec![produce_request::PartitionProduceData::default()];
                r.topic_data = vec![td];
                RequestKind::Produce(r)
            }
            ApiKey::Fetch => {
                let mut r = FetchRequest::default();
                let mut ft = fetch_request::FetchTopic::default();
                ft.topic = t();
                ft.partitions = vec![fetch_request::FetchPartition::default()];
                r.topics = vec![ft];
                RequestKind::Fetch(r)
            }
            ApiKey::ListOffsets => {
                let mut r = ListOffsetsRequest::default();
                let mut lt = list_offsets_request::ListOffsetsTopic::default();
                lt.name = t();
                lt.partitions = vec![list_offsets_request::ListOffsetsPartition::default()];
                r.topics = vec![lt];
                RequestKind::ListOffsets(r)
            }
            ApiKey::Metadata => {
                let mut r = MetadataRequest::default();
                let mut mt = metadata_request::MetadataRequestTopic::default();
                mt.name = Some(t());
                r.topics = Some(vec![mt]);
                RequestKind::Metadata(r)
            }
            ApiKey::OffsetForLeaderEpoch => {
                let mut r = OffsetForLeaderEpochRequest::default();
                let mut ot = offset_for_leader_epoch_request::OffsetForLeaderTopic::default();
                ot.topic = t();
                ot.partitions =
                    vec![offset_for_leader_epoch_request::OffsetForLeaderPartition::default()];
                r.topics = vec![ot];
                RequestKind::OffsetForLeaderEpoch(r)
            }
            ApiKey::CreateTopics => {
                let mut r = CreateTopicsRequest::default();
                let mut ct = create_topics_request::CreatableTopic::default();
                ct.name = t();
                r.topics = vec![ct];
                RequestKind::CreateTopics(r)
            }
            ApiKey::DeleteTopics => {
                let mut r = DeleteTopicsRequest::default();
                r.topic_names = vec![t()];
                RequestKind::DeleteTopics(r)
            }
            ApiKey::InitProducerId => RequestKind::InitProducerId(InitProducerIdRequest::default()),
            ApiKey::DescribeConfigs => {
                let mut r = DescribeConfigsRequest::default();
                let mut x = describe_configs_request::DescribeConfigsResource::default();
                x.resource_type = 2;
                x.resource_name = StrBytes::from_static_str("t");
                r.resources = vec![x];
                RequestKind::DescribeConfigs(r)
            }
            ApiKey::DescribeCluster => RequestKind::DescribeCluster(Default::default()),
            ApiKey::FindCoordinator => {
                let mut r = FindCoordinatorRequest::default();
                r.key = StrBytes::from_static_str("g");
                r.coordinator_keys = vec![StrBytes::from_static_str("g")];
                RequestKind::FindCoordinator(r)
            }
            ApiKey::JoinGroup => {
                let mut r = JoinGroupRequest::default();
                r.group_id = g();
                RequestKind::JoinGroup(r)
            }
            ApiKey::SyncGroup => {
                let mut r = SyncGroupRequest::default();
                r.group_id = g();
                RequestKind::SyncGroup(r)
            }
            ApiKey::Heartbeat => {
                let mut r = HeartbeatRequest::default();
                r.group_id = g();
                RequestKind::Heartbeat(r)
            }
            ApiKey::LeaveGroup => {
                let mut r = LeaveGroupRequest::default();
                r.group_id = g();
                RequestKind::LeaveGroup(r)
            }
            ApiKey::OffsetCommit => {
                let mut r = OffsetCommitRequest::default();
                r.group_id = g();
                let mut ot = offset_commit_request::OffsetCommitRequestTopic::default();
                ot.name = t();
                ot.partitions =
                    vec![offset_commit_request::OffsetCommitRequestPartition::default()];
                r.topics = vec![ot];
                RequestKind::OffsetCommit(r)
            }
            ApiKey::OffsetFetch => {
                let mut r = OffsetFetchRequest::default();
                r.group_id = g();
                let mut ot = offset_fetch_request::OffsetFetchRequestTopic::default();
                ot.name = t();
                ot.partition_indexes = vec![0];
                r.topics = Some(vec![ot]);
                let mut og = offset_fetch_request::OffsetFetchRequestGroup::default();
                og.group_id = g();
                r.groups = vec![og];
                RequestKind::OffsetFetch(r)
            }
            ApiKey::DescribeGroups => {
                let mut r = DescribeGroupsRequest::default();
                r.groups = vec![g()];
                RequestKind::DescribeGroups(r)
            }
            ApiKey::ListGroups => RequestKind::ListGroups(Default::default()),
            ApiKey::ConsumerGroupHeartbeat => {
                let mut r = kafka_protocol::messages::ConsumerGroupHeartbeatRequest::default();
                r.group_id = g();
                r.subscribed_topic_names = Some(vec![t()]);
                RequestKind::ConsumerGroupHeartbeat(r)
            }
            ApiKey::ConsumerGroupDescribe => {
                let mut r = kafka_protocol::messages::ConsumerGroupDescribeRequest::default();
                r.group_ids = vec![g()];
                RequestKind::ConsumerGroupDescribe(r)
            }
            ApiKey::CreatePartitions => {
                let mut r = CreatePartitionsRequest::default();
                let mut ct = create_partitions_request::CreatePartitionsTopic::default();
                ct.name = t();
                r.topics = vec![ct];
                RequestKind::CreatePartitions(r)
            }
            ApiKey::DeleteRecords => {
                let mut r = DeleteRecordsRequest::default();
                let mut dt = delete_records_request::DeleteRecordsTopic::default();
                dt.name = t();
                dt.partitions = vec![delete_records_request::DeleteRecordsPartition::default()];
                r.topics = vec![dt];
                RequestKind::DeleteRecords(r)
            }
            ApiKey::DescribeLogDirs => RequestKind::DescribeLogDirs(Default::default()),
            ApiKey::AlterConfigs => {
                let mut r = AlterConfigsRequest::default();
                let mut x = alter_configs_request::AlterConfigsResource::default();
                x.resource_type = 2;
                x.resource_name = StrBytes::from_static_str("t");
                r.resources = vec![x];
                RequestKind::AlterConfigs(r)
            }
            ApiKey::IncrementalAlterConfigs => {
                let mut r = IncrementalAlterConfigsRequest::default();
                let mut x = incremental_alter_configs_request::AlterConfigsResource::default();
                x.resource_type = 4;
                x.resource_name = StrBytes::from_static_str("1");
                r.resources = vec![x];
                RequestKind::IncrementalAlterConfigs(r)
            }
            ApiKey::DeleteGroups => {
                let mut r = DeleteGroupsRequest::default();
                r.groups_names = vec![g()];
                RequestKind::DeleteGroups(r)
            }
            ApiKey::OffsetDelete => {
                let mut r = OffsetDeleteRequest::default();
                r.group_id = g();
                RequestKind::OffsetDelete(r)
            }
            ApiKey::AlterPartitionReassignments => {
                RequestKind::AlterPartitionReassignments(Default::default())
            }
            ApiKey::ListPartitionReassignments => {
                RequestKind::ListPartitionReassignments(Default::default())
            }
            ApiKey::ElectLeaders => {
                let mut r = ElectLeadersRequest::default();
                let mut tp = elect_leaders_request::TopicPartitions::default();
                tp.topic = t();
                tp.partitions = vec![0];
                r.topic_partitions = Some(vec![tp]);
                RequestKind::ElectLeaders(r)
            }
            ApiKey::DescribeUserScramCredentials => {
                RequestKind::DescribeUserScramCredentials(Default::default())
            }
            ApiKey::AlterUserScramCredentials => {
                let mut r = AlterUserScramCredentialsRequest::default();
                let mut d =
                    alter_user_scram_credentials_request::ScramCredentialDeletion::default();
                d.name = StrBytes::from_static_str("u");
                r.deletions = vec![d];
                RequestKind::AlterUserScramCredentials(r)
            }
            ApiKey::DescribeAcls => RequestKind::DescribeAcls(Default::default()),
            ApiKey::CreateAcls => {
                let mut r = CreateAclsRequest::default();
                r.creations = vec![create_acls_request::AclCreation::default()];
                RequestKind::CreateAcls(r)
            }
            ApiKey::DeleteAcls => {
                let mut r = DeleteAclsRequest::default();
                r.filters = vec![delete_acls_request::DeleteAclsFilter::default()];
                RequestKind::DeleteAcls(r)
            }
            ApiKey::DescribeClientQuotas => RequestKind::DescribeClientQuotas(Default::default()),
            ApiKey::AlterClientQuotas => {
                let mut r = AlterClientQuotasRequest::default();
                r.entries = vec![alter_client_quotas_request::EntryData::default()];
                RequestKind::AlterClientQuotas(r)
            }
            ApiKey::AddPartitionsToTxn => {
                let mut r = AddPartitionsToTxnRequest::default();
                r.v3_and_below_transactional_id = TransactionalId(StrBytes::from_static_str("x"));
                let mut tp = add_partitions_to_txn_request::AddPartitionsToTxnTopic::default();
                tp.name = t();
                tp.partitions = vec![0];
                r.v3_and_below_topics = vec![tp];
                RequestKind::AddPartitionsToTxn(r)
            }
            ApiKey::AddOffsetsToTxn => {
                let mut r = AddOffsetsToTxnRequest::default();
                r.transactional_id = TransactionalId(StrBytes::from_static_str("x"));
                r.group_id = g();
                RequestKind::AddOffsetsToTxn(r)
            }
            ApiKey::EndTxn => {
                let mut r = EndTxnRequest::default();
                r.transactional_id = TransactionalId(StrBytes::from_static_str("x"));
                RequestKind::EndTxn(r)
            }
            ApiKey::TxnOffsetCommit => {
                let mut r = TxnOffsetCommitRequest::default();
                r.transactional_id = TransactionalId(StrBytes::from_static_str("x"));
                r.group_id = g();
                let mut tt = txn_offset_commit_request::TxnOffsetCommitRequestTopic::default();
                tt.name = t();
                tt.partitions =
                    vec![txn_offset_commit_request::TxnOffsetCommitRequestPartition::default()];
                r.topics = vec![tt];
                RequestKind::TxnOffsetCommit(r)
            }
            _ => return None,
        })
    }

    /// The empty answer of `api`, for the refused items to be put into.
    fn empty_answer(api: ApiKey) -> ResponseKind {
        match api {
            ApiKey::Produce => ResponseKind::Produce(Default::default()),
            ApiKey::Fetch => ResponseKind::Fetch(Default::default()),
            ApiKey::ListOffsets => ResponseKind::ListOffsets(Default::default()),
            ApiKey::Metadata => ResponseKind::Metadata(Default::default()),
            ApiKey::OffsetForLeaderEpoch => ResponseKind::OffsetForLeaderEpoch(Default::default()),
            ApiKey::OffsetCommit => ResponseKind::OffsetCommit(Default::default()),
            ApiKey::ListGroups => ResponseKind::ListGroups(Default::default()),
            other => panic!("{other:?} has no refused items"),
        }
    }

    /// Every served API at every served version, asked by a principal with no right at all:
    /// the refusal (or the answer with the refused items put back) encodes at that version.
    /// (A field a version does not have fails the encoding, which closed the connection.)
    #[test]
    fn every_refusal_encodes_at_every_served_version() {
        on_broker(|shard| async move {
            let caller = Caller::user("nobody", "127.0.0.1".into());
            let mut checked = 0;
            for &(api, lo, hi) in super::super::versions::SUPPORTED {
                if matches!(
                    api,
                    ApiKey::ApiVersions | ApiKey::SaslHandshake | ApiKey::SaslAuthenticate
                ) {
                    continue;
                }
                let Some(_) = sample(api) else {
                    panic!("{api:?} is served: give it a sample request here");
                };
                // Produce v0-2 are advertised but refused before any handling.
                let lo = match api {
                    ApiKey::Produce => super::super::versions::MIN_DECODED_PRODUCE,
                    _ => lo,
                };
                for version in lo..=hi {
                    let request = sample(api).expect("checked");
                    let response = match check(&shard, &caller, version, request) {
                        Checked::Answer(r) => *r,
                        Checked::Handle(_, refused) => {
                            let mut r = empty_answer(api);
                            refused.apply(&shard, &caller, version, &mut r);
                            r
                        }
                        Checked::Close => panic!("{api:?} v{version} closes the connection"),
                    };
                    let mut buf = BytesMut::new();
                    response
                        .encode(&mut buf, version)
                        .unwrap_or_else(|e| panic!("{api:?} v{version}: {e:#}"));
                    checked += 1;
                }
            }
            assert!(checked > 100, "{checked} versions checked");
        });
    }
}
