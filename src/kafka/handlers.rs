//! Kafka requests answered from the same shard state the native handlers use.

use std::rc::Rc;
use std::time::{Duration, Instant};

use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::fetch_response::{
    AbortedTransaction, FetchableTopicResponse, LeaderIdAndEpoch, PartitionData,
};
use kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::produce_response::{PartitionProduceResponse, TopicProduceResponse};
use kafka_protocol::messages::{
    ApiVersionsResponse, BrokerId, FetchRequest, FetchResponse, ListOffsetsRequest,
    ListOffsetsResponse, MetadataRequest, MetadataResponse, ProduceRequest, ProduceResponse,
    ProducerId, RequestKind, ResponseKind, TopicName,
};
use kafka_protocol::protocol::StrBytes;

use super::fetch_response::PartitionRecords;
use super::records::to_stored_batch;
use super::{authorized_operations, groups, node_id, topic_uuid, versions};
use crate::broker::fetch::{self, FetchPartition};
use crate::broker::leader_epochs::{asked_epoch, check_leader_epoch, epoch_at};
use crate::broker::list_offsets::{list_offset, OffsetQuery};
use crate::broker::produce::{await_acks, AckWait, Acks, Appended, Origin, Produce};
use crate::broker::{locate, request_timeout, topics, OpError, Shard};
use crate::clock::now_ms;
use crate::controller::cluster::NO_LEADER;
use crate::controller::metadata::{validate_topic_name, ClusterMetadata, TopicInfo};
use crate::log::FileReads;
use crate::net::in_order::Later;
use crate::protocol::ErrorCode;

/// What a request comes to.
pub enum Handled {
    Answer(Box<ResponseKind>),
    /// No answer is due (a produce with acks=0); the request's memory stays taken until
    /// these writes are durable ([`crate::broker::produce::hold_until_acked`]).
    Unanswered(Vec<AckWait>),
    /// The answer once a produce's writes are acknowledged; the connection reads the next
    /// requests meanwhile and answers in order.
    Later(Later<ResponseKind>),
    /// A Fetch answer whose partitions carry no records yet: the records read for them go
    /// with it, converted while the answer is written
    /// ([`super::fetch_response::FetchReply`]).
    Fetch(Box<FetchResponse>, Vec<PartitionRecords>),
}

/// Answers one request.
pub async fn handle(
    shard: &Rc<Shard>,
    version: i16,
    client_id: Option<&str>,
    request: RequestKind,
) -> Handled {
    Handled::Answer(Box::new(match request {
        RequestKind::ApiVersions(_) => ResponseKind::ApiVersions(api_versions()),
        RequestKind::Metadata(r) => ResponseKind::Metadata(metadata(shard, &r).await),
        RequestKind::Produce(r) => return produce(shard, r),
        RequestKind::Fetch(r) => {
            let (response, records) = fetch(shard, version, r).await;
            return Handled::Fetch(Box::new(response), records);
        }
        RequestKind::ListOffsets(r) => {
            ResponseKind::ListOffsets(list_offsets(shard, version, r).await)
        }
        RequestKind::OffsetForLeaderEpoch(r) => ResponseKind::OffsetForLeaderEpoch(
            super::leader_epochs::offset_for_leader_epoch_api(shard, &r),
        ),
        RequestKind::FindCoordinator(r) => {
            ResponseKind::FindCoordinator(groups::find_coordinator(shard, version, r))
        }
        RequestKind::JoinGroup(r) => {
            ResponseKind::JoinGroup(groups::join(shard, client_id.unwrap_or_default(), r).await)
        }
        RequestKind::SyncGroup(r) => ResponseKind::SyncGroup(groups::sync(shard, r).await),
        RequestKind::Heartbeat(r) => ResponseKind::Heartbeat(groups::heartbeat(shard, r)),
        RequestKind::LeaveGroup(r) => ResponseKind::LeaveGroup(groups::leave(shard, version, r)),
        RequestKind::OffsetCommit(r) => {
            ResponseKind::OffsetCommit(groups::commit(shard, version, r).await)
        }
        RequestKind::OffsetFetch(r) => {
            ResponseKind::OffsetFetch(groups::fetch_offsets(shard, version, r))
        }
        RequestKind::DescribeGroups(r) => {
            ResponseKind::DescribeGroups(groups::describe(shard, version, r))
        }
        RequestKind::ListGroups(r) => ResponseKind::ListGroups(groups::list(shard, r)),
        RequestKind::ConsumerGroupHeartbeat(r) => ResponseKind::ConsumerGroupHeartbeat(
            groups::consumer_heartbeat(shard, client_id.unwrap_or_default(), r),
        ),
        RequestKind::ConsumerGroupDescribe(r) => {
            ResponseKind::ConsumerGroupDescribe(groups::consumer_describe(shard, version, r))
        }
        RequestKind::DeleteGroups(r) => {
            ResponseKind::DeleteGroups(groups::delete_groups(shard, &r).await)
        }
        RequestKind::OffsetDelete(r) => {
            ResponseKind::OffsetDelete(groups::offset_delete(shard, &r).await)
        }
        RequestKind::CreateTopics(r) => {
            ResponseKind::CreateTopics(super::admin::create_topics(shard, r).await)
        }
        RequestKind::DeleteTopics(r) => {
            ResponseKind::DeleteTopics(super::admin::delete_topics(shard, version, r).await)
        }
        RequestKind::CreatePartitions(r) => {
            ResponseKind::CreatePartitions(super::admin::create_partitions(shard, &r).await)
        }
        RequestKind::DeleteRecords(r) => {
            ResponseKind::DeleteRecords(super::admin::delete_records(shard, &r).await)
        }
        RequestKind::DescribeLogDirs(r) => {
            ResponseKind::DescribeLogDirs(super::admin::describe_log_dirs(shard, version, &r).await)
        }
        RequestKind::AlterConfigs(r) => {
            ResponseKind::AlterConfigs(super::admin::alter_configs(shard, &r).await)
        }
        RequestKind::IncrementalAlterConfigs(r) => ResponseKind::IncrementalAlterConfigs(
            super::admin::incremental_alter_configs(shard, &r).await,
        ),
        RequestKind::DescribeConfigs(r) => {
            ResponseKind::DescribeConfigs(super::admin::describe_configs(shard, &r))
        }
        RequestKind::DescribeCluster(r) => {
            ResponseKind::DescribeCluster(super::admin::describe_cluster(
                &r,
                metadata(shard, &super::admin::brokers_only()).await,
            ))
        }
        RequestKind::AlterPartitionReassignments(r) => ResponseKind::AlterPartitionReassignments(
            super::admin::alter_partition_reassignments(shard, version, &r).await,
        ),
        RequestKind::ListPartitionReassignments(r) => ResponseKind::ListPartitionReassignments(
            super::admin::list_partition_reassignments(shard, &r),
        ),
        RequestKind::ElectLeaders(r) => {
            ResponseKind::ElectLeaders(super::admin::elect_leaders(shard, version, &r).await)
        }
        RequestKind::DescribeUserScramCredentials(r) => ResponseKind::DescribeUserScramCredentials(
            super::admin::describe_user_scram_credentials(shard, &r),
        ),
        RequestKind::AlterUserScramCredentials(r) => ResponseKind::AlterUserScramCredentials(
            super::admin::alter_user_scram_credentials(shard, r).await,
        ),
        RequestKind::InitProducerId(r) => {
            ResponseKind::InitProducerId(super::admin::init_producer_id(shard, version, &r).await)
        }
        RequestKind::AddPartitionsToTxn(r) => ResponseKind::AddPartitionsToTxn(
            super::transactions::add_partitions_to_txn(shard, version, &r).await,
        ),
        RequestKind::AddOffsetsToTxn(r) => ResponseKind::AddOffsetsToTxn(
            super::transactions::add_offsets_to_txn(shard, version, &r).await,
        ),
        RequestKind::TxnOffsetCommit(r) => ResponseKind::TxnOffsetCommit(
            super::transactions::txn_offset_commit(shard, version, &r).await,
        ),
        RequestKind::EndTxn(r) => {
            ResponseKind::EndTxn(super::transactions::end_txn(shard, version, &r).await)
        }
        RequestKind::CreateAcls(r) => {
            ResponseKind::CreateAcls(super::admin::create_acls(shard, r).await)
        }
        RequestKind::DescribeAcls(r) => {
            ResponseKind::DescribeAcls(super::admin::describe_acls(shard, &r))
        }
        RequestKind::DeleteAcls(r) => {
            ResponseKind::DeleteAcls(super::admin::delete_acls(shard, r).await)
        }
        RequestKind::DescribeClientQuotas(r) => {
            ResponseKind::DescribeClientQuotas(super::admin::describe_client_quotas(shard, &r))
        }
        RequestKind::AlterClientQuotas(r) => {
            ResponseKind::AlterClientQuotas(super::admin::alter_client_quotas(shard, r).await)
        }
        // `versions::SUPPORTED` lets nothing else through.
        _ => return Handled::Unanswered(Vec::new()),
    }))
}

pub fn api_versions() -> ApiVersionsResponse {
    let mut r = ApiVersionsResponse::default();
    r.api_keys = versions::SUPPORTED
        .iter()
        .map(|&(api, lo, hi)| {
            let mut v = ApiVersion::default();
            v.api_key = api as i16;
            v.min_version = lo;
            v.max_version = hi;
            v
        })
        .collect();
    r
}

fn name(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.to_string()))
}

fn kafka_error(code: ErrorCode) -> i16 {
    code.code()
}

/// Metadata: asked topics that do not exist are created first when the request allows it and
/// the broker auto-creates (`--auto-create-topics`), as Kafka does.
async fn metadata(shard: &Rc<Shard>, req: &MetadataRequest) -> MetadataResponse {
    // Why an asked name has no topic: an invalid name, auto-creation off or refused.
    let mut missing: Vec<(String, ErrorCode)> = Vec::new();
    for name in req.topics.iter().flatten().filter_map(|t| t.name.as_ref()) {
        let name = name.0.as_str();
        if shard.metadata.borrow().topic(name).is_some() {
            continue;
        }
        let refused = if let Err(e) = validate_topic_name(name) {
            e.code
        } else if req.allow_auto_topic_creation {
            match topics::auto_create(shard, name).await {
                Ok(()) => continue,
                Err(e) => e.code,
            }
        } else {
            ErrorCode::UnknownTopicOrPartition
        };
        missing.push((name.to_string(), refused));
    }
    let md = shard.metadata.borrow().clone();
    let mut r = MetadataResponse::default();
    r.cluster_id = Some(StrBytes::from_string(md.cluster_id.clone()));
    r.controller_id = BrokerId(node_id(md.controller_id as u32, 0));
    // Asked only in v8..v10 (later versions moved it to DescribeCluster), so the field stays
    // "not provided" for the versions that cannot encode it.
    r.cluster_authorized_operations =
        authorized_operations::cluster(req.include_cluster_authorized_operations);
    // Live brokers only (a fenced one leads nothing), as Kafka lists unfenced brokers.
    for b in md.brokers.values().filter(|b| md.is_live(b.node_id)) {
        let Some(port) = b.kafka_port else { continue };
        for s in 0..b.shards {
            let mut broker = MetadataResponseBroker::default();
            broker.node_id = BrokerId(node_id(b.node_id, s));
            broker.host = StrBytes::from_string(b.host.clone());
            broker.port = i32::from(port) + s as i32;
            r.brokers.push(broker);
        }
    }
    let topic = |t: &TopicInfo| {
        let mut mt = MetadataResponseTopic::default();
        mt.name = Some(name(&t.name));
        mt.topic_id = topic_uuid(t.id);
        mt.is_internal = t.name.starts_with("__");
        mt.topic_authorized_operations =
            authorized_operations::topic(req.include_topic_authorized_operations);
        mt.partitions = t
            .partitions
            .iter()
            .map(|p| {
                // A replica is named by the Kafka node of the shard holding it; an offline
                // partition's leader is -1, as Kafka's.
                let replica = |b: &u32| BrokerId(node_id(*b, md.replica_shard(t.id, p, *b)));
                let mut mp = MetadataResponsePartition::default();
                mp.partition_index = p.partition as i32;
                mp.leader_id = if p.leader == NO_LEADER {
                    BrokerId(-1)
                } else {
                    BrokerId(node_id(p.leader, p.shard))
                };
                if p.leader == NO_LEADER {
                    mp.error_code = kafka_error(ErrorCode::LeaderNotAvailable);
                }
                mp.leader_epoch = p.leader_epoch as i32;
                mp.replica_nodes = p.replicas.iter().map(replica).collect();
                mp.isr_nodes = p.isr.iter().map(replica).collect();
                mp
            })
            .collect();
        mt
    };
    r.topics = match &req.topics {
        None => md.topics.values().map(topic).collect(),
        Some(asked) => asked
            .iter()
            .map(|a| {
                let found = match &a.name {
                    Some(n) => md.topic(n),
                    None => md.topics.values().find(|t| topic_uuid(t.id) == a.topic_id),
                };
                match found {
                    Some(t) => topic(t),
                    None => {
                        let mut mt = MetadataResponseTopic::default();
                        mt.name = a.name.clone();
                        mt.topic_id = a.topic_id;
                        let code = a
                            .name
                            .as_ref()
                            .and_then(|n| missing.iter().find(|(m, _)| m == n.0.as_str()))
                            .map_or(ErrorCode::UnknownTopicOrPartition, |(_, c)| *c);
                        mt.error_code = kafka_error(code);
                        mt
                    }
                }
            })
            .collect(),
    };
    r
}

/// The topic a Kafka request names, by name or (newer versions) by id.
fn resolve_topic(md: &ClusterMetadata, topic: &TopicName, id: uuid::Uuid) -> Option<String> {
    if !topic.0.is_empty() {
        return Some(topic.0.to_string());
    }
    md.topics
        .values()
        .find(|t| topic_uuid(t.id) == id)
        .map(|t| t.name.clone())
}

/// Converts and appends now (in arrival order: no await before the append); answers once the
/// writes are acknowledged, or (acks=0) hands back the writes nobody waits for.
fn produce(shard: &Rc<Shard>, req: ProduceRequest) -> Handled {
    let now = now_ms();
    let md = shard.metadata.borrow().clone();
    let acks = Acks::parse(req.acks);
    let deadline =
        Instant::now() + request_timeout(shard, u32::try_from(req.timeout_ms.max(0)).unwrap_or(0));
    let mut response = ProduceResponse::default();
    let mut waits = Vec::new();
    // (topic, partition) response index of each wait's slot.
    let mut slots = Vec::new();
    for td in &req.topic_data {
        let mut tr = TopicProduceResponse::default();
        tr.name = td.name.clone();
        tr.topic_id = td.topic_id;
        let topic = resolve_topic(&md, &td.name, td.topic_id);
        for pd in &td.partition_data {
            let mut pr = PartitionProduceResponse::default();
            pr.index = pd.index;
            pr.base_offset = -1;
            pr.log_append_time_ms = -1;
            pr.log_start_offset = -1;
            let outcome = match (&acks, &topic, u32::try_from(pd.index)) {
                (Err(e), _, _) => Err(e.clone()),
                (Ok(acks), Some(t), Ok(index)) => {
                    append(shard, t, index, pd.records.as_ref(), now, *acks)
                }
                _ => Err(OpError::new(
                    ErrorCode::UnknownTopicOrPartition,
                    "unknown topic or partition",
                )),
            };
            match outcome {
                Ok(a) => {
                    pr.base_offset = a.base_offset as i64;
                    pr.log_start_offset = a.partition.log_start_offset() as i64;
                    waits.push(a.ack(slots.len()));
                    slots.push((response.responses.len(), tr.partition_responses.len()));
                }
                Err(e) => {
                    pr.error_code = e.code.code();
                    pr.error_message = Some(StrBytes::from_string(e.message));
                }
            }
            tr.partition_responses.push(pr);
        }
        response.responses.push(tr);
    }
    if acks == Ok(Acks::None) {
        return Handled::Unanswered(waits);
    }
    let shard = shard.clone();
    Handled::Later(Box::pin(async move {
        for (i, e) in await_acks(&shard, waits, deadline).await {
            let (t, p) = slots[i];
            let pr = &mut response.responses[t].partition_responses[p];
            pr.error_code = e.code.code();
            pr.error_message = Some(StrBytes::from_string(e.message));
            pr.base_offset = -1;
        }
        ResponseKind::Produce(response)
    }))
}

/// Converts one partition's records to a stored batch (checked against the topic's
/// `max.message.bytes` before and after) and appends it.
fn append(
    shard: &Rc<Shard>,
    topic: &str,
    index: u32,
    records: Option<&bytes::Bytes>,
    now: i64,
    acks: Acks,
) -> Result<Appended, OpError> {
    let p = locate(shard, topic, index)?;
    let records = records.ok_or(OpError::new(ErrorCode::CorruptMessage, "no records"))?;
    p.check_produce(records.len())?;
    let batch = to_stored_batch(records, p.max_message_bytes())?;
    let mut produce = Produce::with_acks(acks);
    produce.stage(shard, topic, index, &batch, 0, Origin::BuiltHere)?;
    produce
        .append(shard, batch, 0, now)
        .pop()
        .unwrap_or_else(|| {
            Err(OpError::new(
                ErrorCode::UnknownServerError,
                "nothing appended",
            ))
        })
}

/// The answer without records, and the records read for its partitions.
async fn fetch(
    shard: &Rc<Shard>,
    version: i16,
    req: FetchRequest,
) -> (FetchResponse, Vec<PartitionRecords>) {
    let md = shard.metadata.borrow().clone();
    // Each asked partition: what to read, or why it cannot be asked for.
    let mut asked: Vec<Result<FetchPartition, ErrorCode>> = Vec::new();
    for t in &req.topics {
        let topic = resolve_topic(&md, &t.topic, t.topic_id);
        for p in &t.partitions {
            asked.push(match (&topic, u32::try_from(p.partition)) {
                (Some(topic), Ok(partition)) => match (
                    epoch_refused(shard, topic, partition, p.current_leader_epoch),
                    u64::try_from(p.fetch_offset),
                ) {
                    (Some(code), _) => Err(code),
                    (None, Ok(offset)) => Ok(FetchPartition {
                        topic: topic.clone(),
                        partition,
                        offset,
                        max_bytes: p.partition_max_bytes.max(1) as usize,
                    }),
                    (None, Err(_)) => Err(ErrorCode::OffsetOutOfRange),
                },
                (None, _) if version >= 13 => Err(ErrorCode::UnknownTopicId),
                _ => Err(ErrorCode::UnknownTopicOrPartition),
            });
        }
    }
    let refused = asked.iter().any(Result::is_err);
    let op = fetch::FetchRequest {
        partitions: asked.iter().flatten().cloned().collect(),
        min_bytes: req.min_bytes.max(1) as usize,
        // A refused partition answers at once, as a failed read does.
        max_wait: if refused {
            Duration::ZERO
        } else {
            Duration::from_millis(req.max_wait_ms.max(0) as u64)
        },
        max_bytes: req.max_bytes.max(1) as usize,
        // Converted to Kafka's format on the way out: the bytes are needed here.
        file_reads: FileReads::Copy,
        filter: None,
        // v4+; an unknown level reads uncommitted, as before.
        isolation: fetch::Isolation::from_wire(req.isolation_level).unwrap_or_default(),
    };
    let committed = op.isolation == fetch::Isolation::ReadCommitted;
    let mut reads = fetch::fetch(shard, &op).await.into_iter();
    let mut asked = asked.into_iter();
    let mut response = FetchResponse::default();
    let mut records = Vec::new();
    for t in &req.topics {
        let mut tr = FetchableTopicResponse::default();
        tr.topic = t.topic.clone();
        tr.topic_id = t.topic_id;
        for p in &t.partitions {
            let mut pd = PartitionData::default();
            pd.partition_index = p.partition;
            pd.high_watermark = -1;
            pd.last_stable_offset = -1;
            pd.log_start_offset = -1;
            let read = match asked.next() {
                Some(Ok(_)) => reads
                    .next()
                    .unwrap_or_else(|| Err(OpError::new(ErrorCode::UnknownServerError, "no read"))),
                Some(Err(code)) => Err(OpError::new(code, String::new())),
                None => Err(OpError::new(ErrorCode::UnknownServerError, "no read")),
            };
            match read {
                Ok(read) => {
                    pd.high_watermark = read.high_watermark as i64;
                    pd.last_stable_offset = read.last_stable_offset as i64;
                    if committed && version >= 4 {
                        pd.aborted_transactions = Some(
                            read.aborted
                                .iter()
                                .map(|a| {
                                    let mut t = AbortedTransaction::default();
                                    t.producer_id = ProducerId(a.producer_id);
                                    t.first_offset = a.first_offset as i64;
                                    t
                                })
                                .collect(),
                        );
                    }
                    pd.log_start_offset = read.log_start_offset as i64;
                    // Converted as the answer is written.
                    records.push(PartitionRecords {
                        topic: t.topic.clone(),
                        topic_id: t.topic_id,
                        partition: p.partition,
                        from: u64::try_from(p.fetch_offset).unwrap_or(0),
                        chunks: read.chunks,
                    });
                }
                Err(e) => {
                    pd.error_code = e.code.code();
                    // Where the client should go instead (v12+), as Metadata would answer.
                    if matches!(
                        e.code,
                        ErrorCode::FencedLeaderEpoch | ErrorCode::NotLeaderOrFollower
                    ) {
                        if let Some(topic) = resolve_topic(&md, &t.topic, t.topic_id) {
                            pd.current_leader = current_leader(&md, &topic, p.partition);
                        }
                    }
                }
            }
            tr.partitions.push(pd);
        }
        response.responses.push(tr);
    }
    (response, records)
}

/// Why a Fetch or ListOffsets of `topic`-`partition` is refused for the asker's
/// `current_leader_epoch` (-1: not checked), as Kafka checks it.
fn epoch_refused(
    shard: &Shard,
    topic: &str,
    partition: u32,
    current_leader_epoch: i32,
) -> Option<ErrorCode> {
    let asked = asked_epoch(current_leader_epoch)?;
    check_leader_epoch(shard, topic, partition, Some(asked))
        .err()
        .map(|e| e.code)
}

/// A partition's leader and leader epoch as Metadata answers them.
fn current_leader(md: &ClusterMetadata, topic: &str, partition: i32) -> LeaderIdAndEpoch {
    let mut l = LeaderIdAndEpoch::default();
    let found = md
        .topic(topic)
        .and_then(|t| t.partitions.get(usize::try_from(partition).ok()?));
    if let Some(p) = found.filter(|p| p.leader != NO_LEADER) {
        l.leader_id = BrokerId(node_id(p.leader, p.shard));
        l.leader_epoch = i32::try_from(p.leader_epoch).unwrap_or(i32::MAX);
    }
    l
}

async fn list_offsets(
    shard: &Rc<Shard>,
    version: i16,
    req: ListOffsetsRequest,
) -> ListOffsetsResponse {
    let mut response = ListOffsetsResponse::default();
    for t in &req.topics {
        let mut tr = ListOffsetsTopicResponse::default();
        tr.name = t.name.clone();
        for lp in &t.partitions {
            let mut pr = ListOffsetsPartitionResponse::default();
            pr.partition_index = lp.partition_index;
            pr.offset = -1;
            pr.timestamp = -1;
            let found = match (
                u32::try_from(lp.partition_index),
                OffsetQuery::from_timestamp(lp.timestamp),
            ) {
                (Ok(i), Ok(q)) => {
                    let topic = t.name.0.as_str();
                    match epoch_refused(shard, topic, i, lp.current_leader_epoch) {
                        Some(code) => Err(OpError::new(code, "")),
                        // read_committed (v2+): the latest offset is the last stable one.
                        None if q == OffsetQuery::Latest && req.isolation_level == 1 => {
                            list_offset(shard, topic, i, OffsetQuery::LastStable).await
                        }
                        None => list_offset(shard, topic, i, q).await,
                    }
                }
                (Err(_), _) => Err(OpError::new(ErrorCode::UnknownTopicOrPartition, "")),
                (_, Err(e)) => Err(e),
            };
            match found {
                Ok(Some(f)) => {
                    pr.offset = f.offset as i64;
                    pr.timestamp = f.timestamp.unwrap_or(-1);
                    // The epoch a client keeps with this position to validate it later (v4+:
                    // the codec refuses the field set in older versions).
                    let epoch = u32::try_from(lp.partition_index)
                        .ok()
                        .filter(|_| version >= 4)
                        .and_then(|i| locate(shard, t.name.0.as_str(), i).ok())
                        .and_then(|p| epoch_at(&p, f.offset));
                    pr.leader_epoch = epoch.map_or(-1, |e| i32::try_from(e).unwrap_or(i32::MAX));
                }
                // Nothing at or after: -1, as Kafka answers.
                Ok(None) => {}
                Err(e) => pr.error_code = e.code.code(),
            }
            tr.partitions.push(pr);
        }
        response.topics.push(tr);
    }
    response
}
