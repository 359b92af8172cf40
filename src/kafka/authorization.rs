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

/// Looks at `request` for `caller` (authorization is on).
pub fn check(shard: &Shard, caller: &Caller, request: RequestKind) -> Checked {
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
            out.error_code = code.code();
            out.error_message = msg(code);
            out.node_id = BrokerId(-1);
            out.port = -1;
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
            out.error_code = GROUP.code();
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
                    x.error_message = msg(GROUP);
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
                    x.error_message = msg(TOPIC);
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
            out.error_code = CLUSTER.code();
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
            out.error_code = CLUSTER.code();
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
                    let mut x = alter_client_quotas_response::EntryData::default();
                    x.error_code = CLUSTER.code();
                    x.error_message = msg(CLUSTER);
                    x.entity = e
                        .entity
                        .iter()
                        .map(|p| {
                            let mut d = alter_client_quotas_response::EntityData::default();
                            d.entity_type = p.entity_type.clone();
                            d.entity_name = p.entity_name.clone();
                            d
                        })
                        .collect();
                    x
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

    /// Puts the refused items into `response`.
    pub fn apply(self, shard: &Shard, caller: &Caller, response: &mut ResponseKind) {
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
                    if let Some(info) = md.topics.get(&*name.0) {
                        t.topic_id = super::topic_uuid(info.id);
                    }
                    t.topic = name;
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
