//! Kafka requests answered from the same shard state the native handlers use.

use std::rc::Rc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
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
    RequestKind, ResponseKind, TopicName,
};
use kafka_protocol::protocol::StrBytes;

use super::records::{to_kafka_batches, to_stored_batch};
use super::{groups, node_id, topic_uuid, versions};
use crate::batch::BatchView;
use crate::clock::now_ms;
use crate::controller::metadata::{ClusterMetadata, TopicInfo};
use crate::log::FileReads;
use crate::partition::ReadLimits;
use crate::protocol::messages::{EARLIEST_TIMESTAMP, LATEST_TIMESTAMP};
use crate::protocol::ErrorCode;
use crate::server::handlers::fetch::wait_for_data;
use crate::server::handlers::locate_error;
use crate::server::handlers::produce::await_acks;
use crate::server::shard::Shard;

/// Answers one request; `None` when no answer is due (a produce with acks=0).
pub async fn handle(
    shard: &Rc<Shard>,
    version: i16,
    client_id: Option<&str>,
    request: RequestKind,
) -> Option<ResponseKind> {
    Some(match request {
        RequestKind::ApiVersions(_) => ResponseKind::ApiVersions(api_versions()),
        RequestKind::Metadata(r) => ResponseKind::Metadata(metadata(shard, &r)),
        RequestKind::Produce(r) => ResponseKind::Produce(produce(shard, r).await?),
        RequestKind::Fetch(r) => ResponseKind::Fetch(fetch(shard, version, r).await),
        RequestKind::ListOffsets(r) => ResponseKind::ListOffsets(list_offsets(shard, r).await),
        RequestKind::FindCoordinator(r) => {
            ResponseKind::FindCoordinator(groups::find_coordinator(shard, version, r))
        }
        RequestKind::JoinGroup(r) => {
            ResponseKind::JoinGroup(groups::join(shard, client_id.unwrap_or_default(), r).await)
        }
        RequestKind::SyncGroup(r) => ResponseKind::SyncGroup(groups::sync(shard, r).await),
        RequestKind::Heartbeat(r) => ResponseKind::Heartbeat(groups::heartbeat(shard, r)),
        RequestKind::LeaveGroup(r) => ResponseKind::LeaveGroup(groups::leave(shard, version, r)),
        RequestKind::OffsetCommit(r) => ResponseKind::OffsetCommit(groups::commit(shard, r).await),
        RequestKind::OffsetFetch(r) => {
            ResponseKind::OffsetFetch(groups::fetch_offsets(shard, version, r))
        }
        RequestKind::DescribeGroups(r) => {
            ResponseKind::DescribeGroups(groups::describe(shard, version, r))
        }
        RequestKind::ListGroups(r) => ResponseKind::ListGroups(groups::list(shard, r)),
        RequestKind::CreateTopics(r) => {
            ResponseKind::CreateTopics(super::admin::create_topics(shard, r).await)
        }
        RequestKind::DeleteTopics(r) => {
            ResponseKind::DeleteTopics(super::admin::delete_topics(shard, version, r).await)
        }
        RequestKind::DescribeConfigs(r) => {
            ResponseKind::DescribeConfigs(super::admin::describe_configs(shard, &r))
        }
        RequestKind::DescribeCluster(r) => ResponseKind::DescribeCluster(
            super::admin::describe_cluster(&r, metadata(shard, &super::admin::brokers_only())),
        ),
        RequestKind::InitProducerId(r) => {
            ResponseKind::InitProducerId(super::admin::init_producer_id(shard, &r))
        }
        // `versions::SUPPORTED` lets nothing else through.
        _ => return None,
    })
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

fn metadata(shard: &Shard, req: &MetadataRequest) -> MetadataResponse {
    let md = shard.metadata.borrow().clone();
    let mut r = MetadataResponse::default();
    r.cluster_id = Some(StrBytes::from_string(md.cluster_id.clone()));
    r.controller_id = BrokerId(node_id(md.controller_id as u32, 0));
    for b in md.brokers.values() {
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
        mt.partitions = t
            .partitions
            .iter()
            .map(|p| {
                let leader = BrokerId(node_id(p.leader, p.shard));
                let mut mp = MetadataResponsePartition::default();
                mp.partition_index = p.partition as i32;
                mp.leader_id = leader;
                mp.leader_epoch = p.leader_epoch as i32;
                mp.replica_nodes = vec![leader];
                mp.isr_nodes = vec![leader];
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
                        mt.error_code = kafka_error(ErrorCode::UnknownTopicOrPartition);
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

async fn produce(shard: &Rc<Shard>, req: ProduceRequest) -> Option<ProduceResponse> {
    let now = now_ms();
    let md = shard.metadata.borrow().clone();
    let mut response = ProduceResponse::default();
    let mut waits = Vec::new();
    let bad_acks = !(-1..=1).contains(&req.acks);
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
            let outcome = match (&topic, u32::try_from(pd.index)) {
                _ if bad_acks => Err((
                    ErrorCode::InvalidRequiredAcks,
                    format!("acks must be 0, 1 or -1, not {}", req.acks),
                )),
                (Some(t), Ok(index)) => {
                    append(shard, t, index, pd.records.as_ref(), now).map(|(p, base, next)| {
                        pr.base_offset = base as i64;
                        pr.log_start_offset = p.log_start_offset() as i64;
                        (p, next)
                    })
                }
                _ => Err((
                    ErrorCode::UnknownTopicOrPartition,
                    "unknown topic or partition".to_string(),
                )),
            };
            match outcome {
                Ok((p, next)) => {
                    if req.acks != 0 {
                        let slot = (response.responses.len(), tr.partition_responses.len());
                        waits.push((slot, p.wait_for_ack(next - 1)));
                    }
                }
                Err((code, message)) => {
                    pr.error_code = kafka_error(code);
                    pr.error_message = Some(StrBytes::from_string(message));
                }
            }
            tr.partition_responses.push(pr);
        }
        response.responses.push(tr);
    }
    if req.acks == 0 {
        return None;
    }
    let slots: Vec<(usize, usize)> = waits.iter().map(|(s, _)| *s).collect();
    let indexed = waits
        .into_iter()
        .enumerate()
        .map(|(i, (_, rx))| (i, rx))
        .collect();
    let timeout = u32::try_from(req.timeout_ms.max(0)).unwrap_or(0);
    for (i, code, message) in await_acks(shard, indexed, timeout).await {
        let (t, p) = slots[i];
        let pr = &mut response.responses[t].partition_responses[p];
        pr.error_code = kafka_error(code);
        pr.error_message = Some(StrBytes::from_string(message));
        pr.base_offset = -1;
    }
    Some(response)
}

type Appended = (Rc<crate::partition::Partition>, u64, u64);

/// Converts and appends one partition's records: (partition, base offset, next offset).
fn append(
    shard: &Rc<Shard>,
    topic: &str,
    index: u32,
    records: Option<&bytes::Bytes>,
    now: i64,
) -> Result<Appended, (ErrorCode, String)> {
    let Some(p) = shard.partition(topic, index) else {
        return Err(locate_error(shard, topic, index));
    };
    let records = records.ok_or((ErrorCode::CorruptMessage, "no records".to_string()))?;
    p.check_produce(records.len())?;
    let batch = to_stored_batch(records, p.max_message_bytes())?;
    let view =
        BatchView::validate(&batch).map_err(|e| (ErrorCode::CorruptMessage, e.to_string()))?;
    let (base, next) = p
        .append(&[view], now, &shard.cache)
        .map_err(|e| (e.code(), e.to_string()))?;
    shard.group_commit.mark_dirty(&p);
    Ok((p, base, next))
}

/// One asked partition: (topic name if known, partition index, offset, partition max bytes).
type Asked = (Option<String>, i32, i64, i32);

async fn fetch(shard: &Rc<Shard>, version: i16, req: FetchRequest) -> FetchResponse {
    let md = shard.metadata.borrow().clone();
    let wait = Duration::from_millis(req.max_wait_ms.max(0) as u64).min(shard.cfg.max_fetch_wait);
    let deadline = Instant::now() + wait;
    let max_total = (req.max_bytes.max(1) as usize).min(shard.cfg.max_frame_bytes / 2);
    let asked: Vec<Vec<Asked>> = req
        .topics
        .iter()
        .map(|t| {
            let topic = resolve_topic(&md, &t.topic, t.topic_id);
            t.partitions
                .iter()
                .map(|p| {
                    (
                        topic.clone(),
                        p.partition,
                        p.fetch_offset,
                        p.partition_max_bytes,
                    )
                })
                .collect()
        })
        .collect();
    loop {
        let mut listeners = Vec::new();
        let mut response = FetchResponse::default();
        let mut total = 0usize;
        let mut any_error = false;
        for (t, parts) in req.topics.iter().zip(&asked) {
            let mut tr = FetchableTopicResponse::default();
            tr.topic = t.topic.clone();
            tr.topic_id = t.topic_id;
            for (topic, index, offset, part_max) in parts {
                let mut pd = PartitionData::default();
                pd.partition_index = *index;
                pd.high_watermark = -1;
                pd.last_stable_offset = -1;
                pd.log_start_offset = -1;
                let located = match (topic, u32::try_from(*index)) {
                    (Some(topic), Ok(i)) => shard
                        .partition(topic, i)
                        .ok_or_else(|| locate_error(shard, topic, i).0),
                    (None, _) if version >= 13 => Err(ErrorCode::UnknownTopicId),
                    _ => Err(ErrorCode::UnknownTopicOrPartition),
                };
                let p = match located {
                    Ok(p) => p,
                    Err(code) => {
                        pd.error_code = kafka_error(code);
                        any_error = true;
                        tr.partitions.push(pd);
                        continue;
                    }
                };
                listeners.push(p.listen());
                pd.high_watermark = p.high_watermark() as i64;
                pd.last_stable_offset = pd.high_watermark;
                pd.log_start_offset = p.log_start_offset() as i64;
                let room = max_total.saturating_sub(total);
                if room == 0 && total > 0 {
                    tr.partitions.push(pd);
                    continue;
                }
                let limits = ReadLimits {
                    max_bytes: (part_max.max(&1).to_owned() as usize).min(room.max(1)),
                    file_reads: FileReads::Copy,
                };
                let Ok(at) = u64::try_from(*offset) else {
                    pd.error_code = kafka_error(ErrorCode::OffsetOutOfRange);
                    any_error = true;
                    tr.partitions.push(pd);
                    continue;
                };
                match p.read(at, limits, &shard.cache).await {
                    Ok(chunks) => {
                        let mut out = BytesMut::new();
                        for c in &chunks {
                            if let Err(e) =
                                to_kafka_batches(c.as_slice().unwrap_or_default(), &mut out)
                            {
                                log::error!("kafka fetch {topic:?}-{index}: {e}");
                                pd.error_code = kafka_error(ErrorCode::CorruptMessage);
                                any_error = true;
                                break;
                            }
                        }
                        total += out.len();
                        pd.records = Some(out.freeze());
                    }
                    Err(e) => {
                        pd.error_code = kafka_error(e.code());
                        any_error = true;
                    }
                }
                tr.partitions.push(pd);
            }
            response.responses.push(tr);
        }
        let enough = total >= req.min_bytes.max(1) as usize || any_error;
        if enough || listeners.is_empty() || Instant::now() >= deadline {
            return response;
        }
        wait_for_data(shard, listeners, deadline).await;
    }
}

async fn list_offsets(shard: &Rc<Shard>, req: ListOffsetsRequest) -> ListOffsetsResponse {
    let mut response = ListOffsetsResponse::default();
    for t in &req.topics {
        let mut tr = ListOffsetsTopicResponse::default();
        tr.name = t.name.clone();
        for lp in &t.partitions {
            let mut pr = ListOffsetsPartitionResponse::default();
            pr.partition_index = lp.partition_index;
            pr.offset = -1;
            pr.timestamp = -1;
            let topic = t.name.0.as_str();
            let located = u32::try_from(lp.partition_index)
                .ok()
                .and_then(|i| shard.partition(topic, i).ok_or(i).ok());
            match located {
                None => {
                    let code = match u32::try_from(lp.partition_index) {
                        Ok(i) => locate_error(shard, topic, i).0,
                        Err(_) => ErrorCode::UnknownTopicOrPartition,
                    };
                    pr.error_code = kafka_error(code);
                }
                Some(p) => match lp.timestamp {
                    EARLIEST_TIMESTAMP => pr.offset = p.log_start_offset() as i64,
                    LATEST_TIMESTAMP => pr.offset = p.high_watermark() as i64,
                    ts if ts < 0 => pr.error_code = kafka_error(ErrorCode::InvalidRequest),
                    ts => match p.offset_for_timestamp(ts).await {
                        Ok(Some((offset, at))) => {
                            pr.offset = offset as i64;
                            pr.timestamp = at;
                        }
                        // Nothing at or after: -1, as Kafka answers.
                        Ok(None) => {}
                        Err(e) => pr.error_code = kafka_error(e.code()),
                    },
                },
            }
            tr.partitions.push(pr);
        }
        response.topics.push(tr);
    }
    response
}
