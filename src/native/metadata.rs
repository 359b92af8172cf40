//! ApiVersions and Metadata: answered from the shard's copy of the cluster metadata.

use std::rc::Rc;

use super::Reply;
use crate::broker::{topics, Shard};
use crate::protocol::frame::RequestFrame;
use crate::protocol::messages::{
    ApiVersionRange, ApiVersionsResponse, BrokerMeta, MetadataRequest, MetadataResponse,
    PartitionMeta, TopicMeta,
};
use crate::protocol::{ApiKey, ErrorCode};

pub fn api_versions() -> Reply {
    Reply::meta(&ApiVersionsResponse {
        apis: ApiKey::ALL
            .iter()
            .map(|k| {
                let (lo, hi) = k.versions();
                ApiVersionRange {
                    api_key: *k as u16,
                    min_version: lo,
                    max_version: hi,
                }
            })
            .collect(),
        broker_version: env!("CARGO_PKG_VERSION").to_string(),
    })
}

/// Metadata; of every topic, only those `caller` may describe when ACLs apply (as Kafka).
pub async fn metadata(
    shard: &Rc<Shard>,
    frame: &RequestFrame,
    caller: Option<&crate::broker::acls::Caller>,
) -> Reply {
    let req: MetadataRequest = match frame.decode_meta() {
        Ok(r) => r,
        Err(e) => return e.into(),
    };
    // Bounded by the frame the request came in; each creation is one controller proposal.
    let mut refused = Vec::new();
    for name in &req.create {
        if shard.metadata.borrow().topic(name).is_none() {
            if let Err(e) = topics::auto_create(shard, name).await {
                refused.push((name.clone(), e.code));
            }
        }
    }
    let md = shard.metadata.borrow().clone();
    let topic_meta = |t: &crate::controller::metadata::TopicInfo| TopicMeta {
        name: t.name.clone(),
        id: t.id,
        error_code: 0,
        partitions: t
            .partitions
            .iter()
            .map(|p| PartitionMeta {
                partition: p.partition,
                error_code: 0,
                leader: p.leader,
                shard: p.shard,
                leader_epoch: p.leader_epoch,
                replicas: p.replicas.clone(),
                isr: p.isr.clone(),
                decommissioned: p.decommissioned,
                adding: p
                    .reassignment
                    .as_ref()
                    .map(|r| r.adding())
                    .unwrap_or_default(),
                removing: p
                    .reassignment
                    .as_ref()
                    .map(|r| r.removing())
                    .unwrap_or_default(),
            })
            .collect(),
        configs: t
            .configs
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
    };
    let topics = match &req.topics {
        None => md
            .topics
            .values()
            .filter(|t| {
                caller.is_none_or(|c| {
                    crate::broker::acls::authorized(
                        shard,
                        c,
                        crate::auth::acl::Operation::Describe,
                        crate::auth::acl::ResourceType::Topic,
                        &t.name,
                    )
                })
            })
            .map(topic_meta)
            .collect(),
        Some(names) => names
            .iter()
            .map(|n| match md.topic(n) {
                Some(t) => topic_meta(t),
                None => TopicMeta {
                    name: n.clone(),
                    id: 0,
                    error_code: refused
                        .iter()
                        .find(|(r, _)| r == n)
                        .map_or(ErrorCode::UnknownTopicOrPartition, |(_, c)| *c)
                        .code(),
                    partitions: Vec::new(),
                    configs: Vec::new(),
                },
            })
            .collect(),
    };
    let voters = if shard.cfg.controller_voters.is_empty() {
        vec![u64::from(shard.cfg.node_id)]
    } else {
        shard
            .cfg
            .controller_voters
            .iter()
            .map(|(id, _)| *id)
            .collect()
    };
    Reply::meta(&MetadataResponse {
        cluster_id: md.cluster_id.clone(),
        controller_id: md.controller_id,
        voters,
        // Every registered broker with its state; fenced ones lead nothing, so clients
        // route nothing to them.
        brokers: md
            .brokers
            .values()
            .map(|b| BrokerMeta {
                node_id: b.node_id,
                host: b.host.clone(),
                port: b.port,
                shards: b.shards,
                state: md.broker_state_name(b.node_id).to_string(),
                rack: md.members.get(&b.node_id).and_then(|m| m.rack.clone()),
            })
            .collect(),
        topics,
    })
}
