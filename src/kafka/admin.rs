//! Kafka admin APIs: CreateTopics, DeleteTopics, DescribeConfigs, DescribeCluster and
//! InitProducerId.
//!
//! Topic creation and deletion are the native handlers' controller proposals
//! ([`crate::server::handlers::topics::propose`]): answered once every shard of this broker
//! applied them, so a Kafka client can use a topic as soon as CreateTopics returns. Topic configs
//! pass the controller's validation (`topic_config`), the same as
//! `rill topic create --config`.
//!
//! InitProducerId hands out a producer id so that idempotent-by-default clients (the Java
//! producer, librdkafka with `enable.idempotence=true`, which fails fatally without one) work,
//! but **sequence numbers are not checked yet**: a retried batch the broker already stored is
//! stored again (at-least-once, as with rill's own producer). Ids come from a per-process
//! counter prefixed with the broker's node id ([`next_producer_id`]); nothing is persisted. An
//! idempotence implementation must allocate ids through the controller (a raft command
//! reserving blocks of ids, persisted with the cluster metadata, so they stay unique across
//! restarts and brokers) and rebuild each partition's producer state (last sequences per
//! producer id and epoch) from the log at recovery. Transactional ids are refused
//! (UNSUPPORTED_VERSION, as Kafka answers for features that are off).

use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;
use std::sync::atomic::{AtomicU32, Ordering};

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::create_topics_response::{
    CreatableTopicConfigs, CreatableTopicResult,
};
use kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResult, DescribeConfigsSynonym,
};
use kafka_protocol::messages::{
    CreateTopicsRequest, CreateTopicsResponse, DeleteTopicsRequest, DeleteTopicsResponse,
    DescribeClusterRequest, DescribeClusterResponse, DescribeConfigsRequest,
    DescribeConfigsResponse, InitProducerIdRequest, InitProducerIdResponse, MetadataRequest,
    MetadataResponse, ProducerId, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use uuid::Uuid;

use super::{node_id, topic_uuid};
use crate::controller::metadata::{validate_topic_name, ClusterMetadata, Command, MetadataLimits};
use crate::protocol::ErrorCode;
use crate::server::config::BrokerConfig;
use crate::server::handlers::topics::{propose, timeout_of};
use crate::server::shard::Shard;
use crate::topic_config::{self, TopicDefaults, TopicSettings};

/// Partitions of a topic created with `num_partitions = -1` (Kafka's `num.partitions`).
pub const DEFAULT_PARTITIONS: u32 = 1;
/// Replication factor of a topic created with `replication_factor = -1`
/// (Kafka's `default.replication.factor`).
pub const DEFAULT_REPLICATION_FACTOR: u16 = 1;

/// DescribeConfigs resource types (Kafka's `ConfigResource.Type`).
const RESOURCE_TOPIC: i8 = 2;
const RESOURCE_BROKER: i8 = 4;

/// Config sources (Kafka's `DescribeConfigsResponse.ConfigSource`).
const SOURCE_TOPIC: i8 = 1;
const SOURCE_STATIC_BROKER: i8 = 4;
const SOURCE_DEFAULT: i8 = 5;

/// Config types (Kafka's `DescribeConfigsResponse.ConfigType`).
const TYPE_BOOLEAN: i8 = 1;
const TYPE_STRING: i8 = 2;
const TYPE_INT: i8 = 3;
const TYPE_LONG: i8 = 5;
const TYPE_LIST: i8 = 7;

/// DescribeCluster endpoint types.
const ENDPOINT_BROKER: i8 = 1;
const ENDPOINT_CONTROLLER: i8 = 2;

fn s(v: impl Into<String>) -> StrBytes {
    StrBytes::from_string(v.into())
}

/// A per-topic refusal: Kafka error number and message.
type Refusal = (i16, String);

fn refusal(code: ErrorCode, message: impl Into<String>) -> Refusal {
    (code.code(), message.into())
}

// ---------------------------------------------------------------------------------------------
// CreateTopics

/// The controller command a Kafka topic creation asks for, or why it is refused before the
/// controller sees it. The controller then checks the name, existence, the partition limit,
/// the replication factor against the brokers and the configs.
fn plan_create(t: &CreatableTopic) -> Result<Command, Refusal> {
    let name = t.name.0.to_string();
    if !t.assignments.is_empty() {
        if t.num_partitions != -1 || t.replication_factor != -1 {
            return Err(refusal(
                ErrorCode::InvalidRequest,
                "both num_partitions/replication_factor and a manual assignment were given",
            ));
        }
        return Err((
            ResponseError::InvalidReplicaAssignment.code(),
            "manual replica assignment is not supported: rill places partitions itself \
             (give num_partitions and replication_factor)"
                .into(),
        ));
    }
    let partitions = match t.num_partitions {
        -1 => DEFAULT_PARTITIONS,
        n if n >= 1 => n as u32,
        n => {
            return Err(refusal(
                ErrorCode::InvalidPartitions,
                format!(
                    "num_partitions {n}: must be at least 1, or -1 for the broker default \
                     ({DEFAULT_PARTITIONS})"
                ),
            ))
        }
    };
    let replication_factor = match t.replication_factor {
        -1 => DEFAULT_REPLICATION_FACTOR,
        n if n >= 1 => n as u16,
        n => {
            return Err(refusal(
                ErrorCode::InvalidReplicationFactor,
                format!(
                    "replication_factor {n}: must be at least 1, or -1 for the broker default \
                     ({DEFAULT_REPLICATION_FACTOR})"
                ),
            ))
        }
    };
    let mut configs = BTreeMap::new();
    for c in &t.configs {
        let key = c.name.to_string();
        let Some(value) = &c.value else {
            return Err(refusal(
                ErrorCode::InvalidConfig,
                format!("config {key:?} has no value"),
            ));
        };
        if configs.insert(key.clone(), value.to_string()).is_some() {
            return Err(refusal(
                ErrorCode::InvalidConfig,
                format!("config {key:?} is given twice"),
            ));
        }
    }
    Ok(Command::CreateTopic {
        name,
        partitions,
        replication_factor,
        configs,
    })
}

/// Names given more than once in one request (Kafka refuses each with INVALID_REQUEST).
fn duplicates<'a>(names: impl Iterator<Item = &'a str>) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let mut dup = BTreeSet::new();
    for n in names {
        if !seen.insert(n) {
            dup.insert(n.to_string());
        }
    }
    dup
}

fn create_result(name: &TopicName, outcome: Result<(), Refusal>) -> CreatableTopicResult {
    let mut r = CreatableTopicResult::default();
    r.name = name.clone();
    r.error_message = None;
    r.configs = None;
    if let Err((code, message)) = outcome {
        r.error_code = code;
        r.error_message = Some(s(message));
    }
    r
}

/// Fills in what a created (or validated) topic looks like (v5+: partitions, replication
/// factor, effective configs; v7: topic id).
fn describe_created(
    r: &mut CreatableTopicResult,
    cmd: &Command,
    defaults: &TopicDefaults,
    id: Option<u64>,
) {
    let Command::CreateTopic {
        partitions,
        replication_factor,
        configs,
        ..
    } = cmd
    else {
        return;
    };
    r.num_partitions = *partitions as i32;
    r.replication_factor = *replication_factor as i16;
    r.configs = Some(
        topic_entries(configs, defaults)
            .into_iter()
            .map(|e| {
                let mut c = CreatableTopicConfigs::default();
                c.name = s(e.name);
                c.value = Some(s(e.value));
                c.read_only = e.read_only;
                c.config_source = e.source;
                c
            })
            .collect(),
    );
    if let Some(id) = id {
        r.topic_id = topic_uuid(id);
    }
}

pub async fn create_topics(shard: &Rc<Shard>, req: CreateTopicsRequest) -> CreateTopicsResponse {
    let timeout = timeout_of(shard, u32::try_from(req.timeout_ms).unwrap_or(0));
    let limits = MetadataLimits {
        max_partitions_per_topic: shard.cfg.max_partitions_per_topic,
    };
    let dup = duplicates(req.topics.iter().map(|t| t.name.0.as_str()));
    let mut reported = BTreeSet::new();
    let mut response = CreateTopicsResponse::default();
    for t in &req.topics {
        let name = t.name.0.to_string();
        if dup.contains(&name) {
            if reported.insert(name) {
                let refused = refusal(ErrorCode::InvalidRequest, "duplicate topic name");
                response.topics.push(create_result(&t.name, Err(refused)));
            }
            continue;
        }
        let cmd = match plan_create(t) {
            Ok(cmd) => cmd,
            Err(refused) => {
                response.topics.push(create_result(&t.name, Err(refused)));
                continue;
            }
        };
        let outcome = if req.validate_only {
            shard
                .controller
                .metadata()
                .validate(&cmd, &limits)
                .map_err(|e| (e.code.code(), e.message))
        } else {
            let r = propose(shard, name.clone(), cmd.clone(), timeout).await;
            if r.error_code == ErrorCode::None.code() {
                Ok(())
            } else {
                Err((r.error_code, r.message))
            }
        };
        let ok = outcome.is_ok();
        let mut result = create_result(&t.name, outcome);
        if ok {
            let id = if req.validate_only {
                None
            } else {
                shard.metadata.borrow().topic(&name).map(|t| t.id)
            };
            describe_created(&mut result, &cmd, &shard.cfg.topic_defaults, id);
        }
        response.topics.push(result);
    }
    response
}

// ---------------------------------------------------------------------------------------------
// DeleteTopics

/// One topic a DeleteTopics request names: by name (all versions) or by id (v6+).
#[derive(Debug, Clone, PartialEq)]
enum Deletion {
    /// To propose: the name and the topic's id (nil when unknown: the controller refuses it).
    Propose(String, Uuid),
    /// Refused before the controller: (name, id, code, message).
    Refused(Option<String>, Uuid, i16, String),
}

/// Resolves what a DeleteTopics request names against the metadata, with Kafka's refusals:
/// neither or both of name and id, unknown ids, duplicates.
fn plan_deletions(md: &ClusterMetadata, req: &DeleteTopicsRequest) -> Vec<Deletion> {
    let mut asked: Vec<(Option<String>, Uuid)> = req
        .topic_names
        .iter()
        .map(|n| (Some(n.0.to_string()), Uuid::nil()))
        .collect();
    asked.extend(
        req.topics
            .iter()
            .map(|t| (t.name.as_ref().map(|n| n.0.to_string()), t.topic_id)),
    );
    let id_of = |name: &str| md.topic(name).map_or(Uuid::nil(), |t| topic_uuid(t.id));
    let mut plan: Vec<Deletion> = asked
        .into_iter()
        .map(|(name, id)| match (name, id.is_nil()) {
            (Some(name), true) => {
                let id = id_of(&name);
                Deletion::Propose(name, id)
            }
            (Some(name), false) => Deletion::Refused(
                Some(name),
                id,
                ErrorCode::InvalidRequest.code(),
                "give a topic name or a topic id, not both".into(),
            ),
            (None, true) => Deletion::Refused(
                None,
                id,
                ErrorCode::InvalidRequest.code(),
                "neither a topic name nor a topic id was given".into(),
            ),
            (None, false) => match md.topics.values().find(|t| topic_uuid(t.id) == id) {
                Some(t) => Deletion::Propose(t.name.clone(), id),
                None => Deletion::Refused(
                    None,
                    id,
                    ErrorCode::UnknownTopicId.code(),
                    format!("no topic has id {id}"),
                ),
            },
        })
        .collect();
    let dup = duplicates(plan.iter().filter_map(|d| match d {
        Deletion::Propose(name, _) => Some(name.as_str()),
        Deletion::Refused(..) => None,
    }));
    let mut reported = BTreeSet::new();
    plan.retain_mut(|d| {
        let Deletion::Propose(name, id) = d else {
            return true;
        };
        if !dup.contains(name.as_str()) {
            return true;
        }
        let first = reported.insert(name.clone());
        *d = Deletion::Refused(
            Some(name.clone()),
            *id,
            ErrorCode::InvalidRequest.code(),
            "duplicate topic name".into(),
        );
        first
    });
    plan
}

pub async fn delete_topics(
    shard: &Rc<Shard>,
    version: i16,
    req: DeleteTopicsRequest,
) -> DeleteTopicsResponse {
    let timeout = timeout_of(shard, u32::try_from(req.timeout_ms).unwrap_or(0));
    let plan = plan_deletions(&shard.metadata.borrow(), &req);
    let mut response = DeleteTopicsResponse::default();
    for d in plan {
        let mut r = DeletableTopicResult::default();
        let (name, id, code, message) = match d {
            Deletion::Refused(name, id, code, message) => (name, id, code, message),
            Deletion::Propose(name, id) => {
                let cmd = Command::DeleteTopic { name: name.clone() };
                let done = propose(shard, name.clone(), cmd, timeout).await;
                (Some(name), id, done.error_code, done.message)
            }
        };
        r.name = match name {
            Some(n) => Some(TopicName(s(n))),
            // Named by an id we do not know (v6+): null, as Kafka answers.
            None if version >= 6 => None,
            // Before v6 the name is not nullable (and every topic is named by it).
            None => Some(TopicName(s(""))),
        };
        r.topic_id = id;
        r.error_code = code;
        r.error_message = (code != 0).then(|| s(message));
        response.responses.push(r);
    }
    response
}

// ---------------------------------------------------------------------------------------------
// DescribeConfigs

/// One config as DescribeConfigs (and CreateTopics v5+) reports it.
#[derive(Debug, Clone, PartialEq)]
struct Entry {
    name: &'static str,
    value: String,
    source: i8,
    read_only: bool,
    config_type: i8,
    doc: &'static str,
    /// (name, value, source), most specific first, as Kafka lists synonyms.
    synonyms: Vec<(&'static str, String, i8)>,
}

/// A topic setting: its topic-level name, the broker setting it falls back to (Kafka's names),
/// its type, whether it can be changed, and what it does in rill.
struct TopicKey {
    name: &'static str,
    broker: &'static str,
    config_type: i8,
    read_only: bool,
    doc: &'static str,
}

const TOPIC_KEYS: &[TopicKey] = &[
    TopicKey {
        name: "cleanup.policy",
        broker: "log.cleanup.policy",
        config_type: TYPE_LIST,
        read_only: true,
        doc: "Always delete: rill has no log compaction; whole segments past retention.ms or \
              retention.bytes are deleted.",
    },
    TopicKey {
        name: topic_config::MAX_MESSAGE_BYTES,
        broker: "message.max.bytes",
        config_type: TYPE_LONG,
        read_only: false,
        doc: "The largest record batch a produce may carry.",
    },
    TopicKey {
        name: topic_config::RETENTION_BYTES,
        broker: "log.retention.bytes",
        config_type: TYPE_LONG,
        read_only: false,
        doc: "Per partition: the oldest closed segments are deleted past this size (-1: no \
              limit).",
    },
    TopicKey {
        name: topic_config::RETENTION_MS,
        broker: "log.retention.ms",
        config_type: TYPE_LONG,
        read_only: false,
        doc: "Closed segments whose newest record is older are deleted (-1: keep forever).",
    },
    TopicKey {
        name: topic_config::SEGMENT_BYTES,
        broker: "log.segment.bytes",
        config_type: TYPE_LONG,
        read_only: false,
        doc: "A segment rolls before it would pass this size.",
    },
    TopicKey {
        name: topic_config::SEGMENT_MS,
        broker: "log.roll.ms",
        config_type: TYPE_LONG,
        read_only: false,
        doc: "A non-empty active segment older than this rolls at the next append.",
    },
];

fn millis(d: Option<std::time::Duration>, none: i64) -> String {
    d.map_or(none, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .to_string()
}

/// The value of a topic setting, as Kafka writes it.
fn topic_value(key: &str, t: &TopicSettings) -> String {
    match key {
        topic_config::MAX_MESSAGE_BYTES => t.max_message_bytes.to_string(),
        topic_config::RETENTION_BYTES => t
            .retention_bytes
            .map_or(-1, |b| i64::try_from(b).unwrap_or(i64::MAX))
            .to_string(),
        topic_config::RETENTION_MS => millis(t.retention, -1),
        topic_config::SEGMENT_BYTES => t.segment_bytes.to_string(),
        // Never rolling by age; Kafka has no "off" value for segment.ms.
        topic_config::SEGMENT_MS => millis(t.segment_age, i64::MAX),
        _ => "delete".to_string(),
    }
}

/// A topic's effective settings: set on the topic (TOPIC_CONFIG), or the broker's default,
/// given by a flag (STATIC_BROKER_CONFIG) or built in (DEFAULT_CONFIG).
fn topic_entries(configs: &BTreeMap<String, String>, defaults: &TopicDefaults) -> Vec<Entry> {
    let none = BTreeMap::new();
    let effective = TopicSettings::resolve(configs, defaults);
    let broker = TopicSettings::resolve(&none, defaults);
    let builtin = TopicSettings::resolve(&none, &TopicDefaults::default());
    TOPIC_KEYS
        .iter()
        .map(|k| {
            let value = topic_value(k.name, &effective);
            let broker_value = topic_value(k.name, &broker);
            let broker_source = if broker_value == topic_value(k.name, &builtin) {
                SOURCE_DEFAULT
            } else {
                SOURCE_STATIC_BROKER
            };
            let mut synonyms = Vec::new();
            let source = if configs.contains_key(k.name) {
                synonyms.push((k.name, value.clone(), SOURCE_TOPIC));
                SOURCE_TOPIC
            } else {
                broker_source
            };
            synonyms.push((k.broker, broker_value, broker_source));
            Entry {
                name: k.name,
                value,
                source,
                read_only: k.read_only,
                config_type: k.config_type,
                doc: k.doc,
                synonyms,
            }
        })
        .collect()
}

/// The broker settings DescribeConfigs reports, under Kafka's names, for the Kafka node of
/// `shard`: (name, value, type, doc, always static). Broker settings cannot be changed at run
/// time, so all are read-only.
fn broker_values(
    cfg: &BrokerConfig,
    shard: u32,
) -> Vec<(&'static str, String, i8, &'static str, bool)> {
    let d = TopicSettings::resolve(&BTreeMap::new(), &cfg.topic_defaults);
    let kafka_port = cfg.kafka_listen.map_or(0, |a| u32::from(a.port()) + shard);
    vec![
        (
            "node.id",
            node_id(cfg.node_id, shard).to_string(),
            TYPE_INT,
            "This Kafka node: broker id * 1000 + shard.",
            true,
        ),
        (
            "advertised.listeners",
            format!("PLAINTEXT://{}:{kafka_port}", cfg.advertised_host),
            TYPE_LIST,
            "Where Kafka clients reach this node.",
            true,
        ),
        (
            "log.dirs",
            cfg.data_dir.display().to_string(),
            TYPE_STRING,
            "The broker's data directory.",
            true,
        ),
        (
            "num.partitions",
            DEFAULT_PARTITIONS.to_string(),
            TYPE_INT,
            "Partitions of a topic created with num_partitions -1.",
            false,
        ),
        (
            "default.replication.factor",
            DEFAULT_REPLICATION_FACTOR.to_string(),
            TYPE_INT,
            "Replication factor of a topic created with replication_factor -1.",
            false,
        ),
        (
            "auto.create.topics.enable",
            "false".to_string(),
            TYPE_BOOLEAN,
            "rill never creates topics on first use.",
            false,
        ),
        (
            "log.cleanup.policy",
            "delete".to_string(),
            TYPE_LIST,
            "Always delete: rill has no log compaction.",
            false,
        ),
        (
            "log.retention.ms",
            topic_value(topic_config::RETENTION_MS, &d),
            TYPE_LONG,
            "--retention-ms: default retention.ms of topics.",
            false,
        ),
        (
            "log.retention.bytes",
            topic_value(topic_config::RETENTION_BYTES, &d),
            TYPE_LONG,
            "--retention-bytes: default retention.bytes of topics.",
            false,
        ),
        (
            "log.segment.bytes",
            topic_value(topic_config::SEGMENT_BYTES, &d),
            TYPE_LONG,
            "--segment-bytes: default segment.bytes of topics.",
            false,
        ),
        (
            "log.roll.ms",
            topic_value(topic_config::SEGMENT_MS, &d),
            TYPE_LONG,
            "--segment-ms: default segment.ms of topics.",
            false,
        ),
        (
            "message.max.bytes",
            topic_value(topic_config::MAX_MESSAGE_BYTES, &d),
            TYPE_LONG,
            "--max-message-bytes: default max.message.bytes of topics.",
            false,
        ),
        (
            "log.retention.check.interval.ms",
            millis(Some(cfg.retention_check_interval), -1),
            TYPE_LONG,
            "--retention-check-interval-ms: how often each shard applies retention.",
            false,
        ),
        (
            "log.index.interval.bytes",
            cfg.index_interval_bytes.to_string(),
            TYPE_INT,
            "--index-interval-bytes: log bytes between two sparse index entries.",
            false,
        ),
        (
            "log.preallocate",
            cfg.preallocate.to_string(),
            TYPE_BOOLEAN,
            "--preallocate: new segment files are fallocated to segment.bytes.",
            false,
        ),
        (
            "socket.request.max.bytes",
            cfg.max_frame_bytes.to_string(),
            TYPE_INT,
            "--max-frame-bytes: the largest request accepted.",
            false,
        ),
        (
            "offsets.topic.num.partitions",
            cfg.offsets_topic_partitions.to_string(),
            TYPE_INT,
            "--offsets-topic-partitions: partitions of __consumer_offsets.",
            false,
        ),
    ]
}

fn broker_entries(cfg: &BrokerConfig, shard: u32) -> Vec<Entry> {
    let mut baseline = BrokerConfig::new(cfg.data_dir.clone(), cfg.listen, cfg.cores.clone());
    baseline.node_id = cfg.node_id;
    baseline.advertised_host = cfg.advertised_host.clone();
    baseline.kafka_listen = cfg.kafka_listen;
    broker_values(cfg, shard)
        .into_iter()
        .zip(broker_values(&baseline, shard))
        .map(
            |((name, value, config_type, doc, fixed), (_, default, ..))| {
                let source = if fixed || value != default {
                    SOURCE_STATIC_BROKER
                } else {
                    SOURCE_DEFAULT
                };
                Entry {
                    name,
                    synonyms: vec![(name, value.clone(), source)],
                    value,
                    source,
                    read_only: true,
                    config_type,
                    doc,
                }
            },
        )
        .collect()
}

/// The shard of this broker a BROKER resource names (its Kafka node id), `Ok(None)` for the
/// cluster-wide default resource (""), or the refusal Kafka gives for another broker's id.
fn broker_resource(cfg: &BrokerConfig, name: &str) -> Result<Option<u32>, Refusal> {
    if name.is_empty() {
        return Ok(None);
    }
    let shards = cfg.cores.len().max(1) as u32;
    let ours = (0..shards).find(|&s| node_id(cfg.node_id, s).to_string() == name);
    ours.map(Some).ok_or_else(|| {
        refusal(
            ErrorCode::InvalidRequest,
            format!(
                "unexpected broker id {name:?}: this broker's Kafka nodes are {}..={} \
                 (or \"\" for cluster defaults)",
                node_id(cfg.node_id, 0),
                node_id(cfg.node_id, shards - 1)
            ),
        )
    })
}

fn describe_resource(
    md: &ClusterMetadata,
    cfg: &BrokerConfig,
    resource: &DescribeConfigsResource,
    synonyms: bool,
    documentation: bool,
) -> DescribeConfigsResult {
    let mut r = DescribeConfigsResult::default();
    r.resource_type = resource.resource_type;
    r.resource_name = resource.resource_name.clone();
    r.error_message = None;
    let name = resource.resource_name.as_str();
    let entries = match resource.resource_type {
        RESOURCE_TOPIC => match (validate_topic_name(name), md.topic(name)) {
            (Err(e), _) => Err((e.code.code(), e.message)),
            (Ok(()), None) => Err(refusal(
                ErrorCode::UnknownTopicOrPartition,
                format!("unknown topic {name:?}"),
            )),
            (Ok(()), Some(t)) => Ok(topic_entries(&t.configs, &cfg.topic_defaults)),
        },
        // No dynamic cluster-wide defaults exist: nothing to list for "".
        RESOURCE_BROKER => broker_resource(cfg, name)
            .map(|shard| shard.map_or_else(Vec::new, |s| broker_entries(cfg, s))),
        other => Err(refusal(
            ErrorCode::InvalidRequest,
            format!("resource type {other} is not supported (only topics, 2, and brokers, 4)"),
        )),
    };
    let entries = match entries {
        Ok(e) => e,
        Err((code, message)) => {
            r.error_code = code;
            r.error_message = Some(s(message));
            return r;
        }
    };
    let keys = resource.configuration_keys.as_ref();
    r.configs = entries
        .into_iter()
        .filter(|e| keys.is_none_or(|k| k.iter().any(|k| k.as_str() == e.name)))
        .map(|e| {
            let mut c = DescribeConfigsResourceResult::default();
            c.name = s(e.name);
            c.value = Some(s(e.value));
            c.read_only = e.read_only;
            c.config_source = e.source;
            c.config_type = e.config_type;
            c.documentation = documentation.then(|| s(e.doc));
            if synonyms {
                c.synonyms = e
                    .synonyms
                    .into_iter()
                    .map(|(name, value, source)| {
                        let mut syn = DescribeConfigsSynonym::default();
                        syn.name = s(name);
                        syn.value = Some(s(value));
                        syn.source = source;
                        syn
                    })
                    .collect();
            }
            c
        })
        .collect();
    r
}

fn describe_configs_with(
    md: &ClusterMetadata,
    cfg: &BrokerConfig,
    req: &DescribeConfigsRequest,
) -> DescribeConfigsResponse {
    let mut response = DescribeConfigsResponse::default();
    response.results = req
        .resources
        .iter()
        .map(|r| describe_resource(md, cfg, r, req.include_synonyms, req.include_documentation))
        .collect();
    response
}

pub fn describe_configs(shard: &Shard, req: &DescribeConfigsRequest) -> DescribeConfigsResponse {
    let md = shard.metadata.borrow().clone();
    describe_configs_with(&md, &shard.cfg, req)
}

// ---------------------------------------------------------------------------------------------
// DescribeCluster

/// The Metadata request whose answer [`describe_cluster`] is built from: no topics.
pub fn brokers_only() -> MetadataRequest {
    let mut r = MetadataRequest::default();
    r.topics = Some(Vec::new());
    r
}

/// Kafka's ACL operations a client may do on the cluster; rill has no authorization, so all.
const CLUSTER_OPERATIONS: &[i32] = &[
    5,  // CREATE
    7,  // ALTER
    8,  // DESCRIBE
    9,  // CLUSTER_ACTION
    10, // DESCRIBE_CONFIGS
    11, // ALTER_CONFIGS
    12, // IDEMPOTENT_WRITE
];

/// DescribeCluster from the answer Metadata gives (`metadata(shard, &brokers_only())`): the
/// same cluster id, controller and nodes, every shard of every broker its own node.
pub fn describe_cluster(
    req: &DescribeClusterRequest,
    md: MetadataResponse,
) -> DescribeClusterResponse {
    let mut r = DescribeClusterResponse::default();
    match req.endpoint_type {
        ENDPOINT_BROKER => {}
        ENDPOINT_CONTROLLER => {
            r.error_code = ResponseError::MismatchedEndpointType.code();
            r.error_message = Some(s(
                "this is a broker endpoint; rill's controller has no Kafka endpoint",
            ));
            return r;
        }
        other => {
            r.error_code = ResponseError::UnsupportedEndpointType.code();
            r.error_message = Some(s(format!("unknown endpoint type {other}")));
            return r;
        }
    }
    r.cluster_id = md.cluster_id.unwrap_or_default();
    r.controller_id = md.controller_id;
    r.brokers = md
        .brokers
        .into_iter()
        .map(|b| {
            let mut d = DescribeClusterBroker::default();
            d.broker_id = b.node_id;
            d.host = b.host;
            d.port = b.port;
            d.rack = b.rack;
            d
        })
        .collect();
    if req.include_cluster_authorized_operations {
        r.cluster_authorized_operations = CLUSTER_OPERATIONS.iter().map(|op| 1 << op).sum();
    }
    r
}

// ---------------------------------------------------------------------------------------------
// InitProducerId

/// Producer ids handed out by this broker process so far.
static PRODUCER_IDS: AtomicU32 = AtomicU32::new(0);

/// A fresh producer id: the broker's node id in the high 32 bits (so brokers never hand out the
/// same id), a per-process counter in the low 32. Unique within one broker run only (and until
/// 2^32 ids); see the module comment for what idempotence will need instead.
fn next_producer_id(broker: u32) -> i64 {
    let n = PRODUCER_IDS.fetch_add(1, Ordering::Relaxed);
    (i64::from(broker & 0x7fff_ffff) << 32) | i64::from(n)
}

/// Kafka bumps an epoch up to `i16::MAX - 1`, then hands out a new producer id.
const MAX_EPOCH: i16 = i16::MAX - 1;

fn init_producer_id_with(
    req: &InitProducerIdRequest,
    fresh: impl FnOnce() -> i64,
) -> InitProducerIdResponse {
    let mut r = InitProducerIdResponse::default();
    if req
        .transactional_id
        .as_ref()
        .is_some_and(|t| !t.0.is_empty())
    {
        r.error_code = ErrorCode::UnsupportedVersion.code();
        r.producer_id = ProducerId(-1);
        r.producer_epoch = -1;
        return r;
    }
    // v3+: a producer that hit an error asks to bump its epoch (KIP-360) and keep its id.
    let (id, epoch) = (req.producer_id.0, req.producer_epoch);
    if id >= 0 && (0..MAX_EPOCH).contains(&epoch) {
        r.producer_id = ProducerId(id);
        r.producer_epoch = epoch + 1;
    } else {
        r.producer_id = ProducerId(fresh());
        r.producer_epoch = 0;
    }
    r
}

pub fn init_producer_id(shard: &Shard, req: &InitProducerIdRequest) -> InitProducerIdResponse {
    init_producer_id_with(req, || next_producer_id(shard.cfg.node_id))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::metadata::{BrokerInfo, TopicInfo};
    use kafka_protocol::messages::create_topics_request::{
        CreatableReplicaAssignment, CreatableTopicConfig,
    };
    use kafka_protocol::messages::delete_topics_request::DeleteTopicState;
    use kafka_protocol::messages::metadata_response::MetadataResponseBroker;
    use kafka_protocol::messages::{BrokerId, TransactionalId};
    use kafka_protocol::protocol::{Decodable, Encodable};
    use std::net::SocketAddr;

    fn topic(
        name: &str,
        partitions: i32,
        rf: i16,
        configs: &[(&str, Option<&str>)],
    ) -> CreatableTopic {
        let mut t = CreatableTopic::default();
        t.name = TopicName(s(name));
        t.num_partitions = partitions;
        t.replication_factor = rf;
        t.configs = configs
            .iter()
            .map(|(k, v)| {
                let mut c = CreatableTopicConfig::default();
                c.name = s(*k);
                c.value = v.map(s);
                c
            })
            .collect();
        t
    }

    fn code_of(r: Result<Command, Refusal>) -> i16 {
        r.unwrap_err().0
    }

    #[test]
    fn create_plans_apply_kafka_defaults_and_refuse_bad_shapes() {
        let Ok(Command::CreateTopic {
            partitions,
            replication_factor,
            configs,
            ..
        }) = plan_create(&topic("t", -1, -1, &[("retention.ms", Some("5"))]))
        else {
            panic!("not planned")
        };
        assert_eq!((partitions, replication_factor), (1, 1));
        assert_eq!(configs["retention.ms"], "5");
        let Ok(Command::CreateTopic { partitions, .. }) = plan_create(&topic("t", 7, 1, &[]))
        else {
            panic!()
        };
        assert_eq!(partitions, 7);
        assert_eq!(code_of(plan_create(&topic("t", 0, 1, &[]))), 37);
        assert_eq!(code_of(plan_create(&topic("t", -2, 1, &[]))), 37);
        assert_eq!(code_of(plan_create(&topic("t", 1, 0, &[]))), 38);
        assert_eq!(code_of(plan_create(&topic("t", 1, -3, &[]))), 38);
        assert_eq!(
            code_of(plan_create(&topic("t", 1, 1, &[("retention.ms", None)]))),
            40
        );
        assert_eq!(
            code_of(plan_create(&topic(
                "t",
                1,
                1,
                &[("retention.ms", Some("1")), ("retention.ms", Some("2"))]
            ))),
            40
        );
        let mut manual = topic("t", -1, -1, &[]);
        manual.assignments = vec![CreatableReplicaAssignment::default()];
        assert_eq!(code_of(plan_create(&manual)), 39);
        manual.num_partitions = 3;
        assert_eq!(code_of(plan_create(&manual)), 42);
    }

    fn metadata() -> ClusterMetadata {
        let mut md = ClusterMetadata {
            cluster_id: "c1".into(),
            ..Default::default()
        };
        md.brokers.insert(
            1,
            BrokerInfo {
                node_id: 1,
                host: "127.0.0.1".into(),
                port: 9292,
                shards: 2,
                kafka_port: Some(9092),
            },
        );
        for (name, id, configs) in [
            (
                "a",
                1,
                vec![("retention.ms", "60000"), ("segment.bytes", "1048576")],
            ),
            ("b", 2, vec![]),
        ] {
            md.topics.insert(
                name.into(),
                TopicInfo {
                    name: name.into(),
                    id,
                    partitions: Vec::new(),
                    configs: configs
                        .into_iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect(),
                },
            );
        }
        md
    }

    fn deletion_request(names: &[&str], by_state: &[(Option<&str>, Uuid)]) -> DeleteTopicsRequest {
        let mut r = DeleteTopicsRequest::default();
        r.topic_names = names.iter().map(|n| TopicName(s(*n))).collect();
        r.topics = by_state
            .iter()
            .map(|(n, id)| {
                let mut t = DeleteTopicState::default();
                t.name = n.map(|n| TopicName(s(n)));
                t.topic_id = *id;
                t
            })
            .collect();
        r
    }

    #[test]
    fn deletions_resolve_ids_and_refuse_duplicates_and_ambiguity() {
        let md = metadata();
        let plan = plan_deletions(&md, &deletion_request(&["a", "nope", "b", "b"], &[]));
        assert_eq!(
            plan,
            vec![
                Deletion::Propose("a".into(), topic_uuid(1)),
                Deletion::Propose("nope".into(), Uuid::nil()),
                Deletion::Refused(
                    Some("b".into()),
                    topic_uuid(2),
                    42,
                    "duplicate topic name".into()
                ),
            ]
        );
        let unknown = Uuid::from_u128(7);
        let plan = plan_deletions(
            &md,
            &deletion_request(
                &[],
                &[
                    (None, topic_uuid(2)),
                    (None, unknown),
                    (None, Uuid::nil()),
                    (Some("a"), topic_uuid(1)),
                ],
            ),
        );
        assert_eq!(plan[0], Deletion::Propose("b".into(), topic_uuid(2)));
        assert!(matches!(&plan[1], Deletion::Refused(None, id, 100, _) if *id == unknown));
        assert!(matches!(&plan[2], Deletion::Refused(None, _, 42, _)));
        assert!(matches!(&plan[3], Deletion::Refused(Some(n), _, 42, _) if n == "a"));
    }

    fn config() -> BrokerConfig {
        let listen: SocketAddr = "127.0.0.1:9292".parse().unwrap();
        let mut c = BrokerConfig::new("/data".into(), listen, vec![0, 1]);
        c.kafka_listen = Some("127.0.0.1:9092".parse().unwrap());
        c
    }

    fn resource(kind: i8, name: &str, keys: Option<&[&str]>) -> DescribeConfigsResource {
        let mut r = DescribeConfigsResource::default();
        r.resource_type = kind;
        r.resource_name = s(name);
        r.configuration_keys = keys.map(|k| k.iter().map(|k| s(*k)).collect());
        r
    }

    fn describe(
        resources: Vec<DescribeConfigsResource>,
        cfg: &BrokerConfig,
    ) -> DescribeConfigsResponse {
        let mut req = DescribeConfigsRequest::default();
        req.resources = resources;
        req.include_synonyms = true;
        req.include_documentation = true;
        describe_configs_with(&metadata(), cfg, &req)
    }

    fn values(r: &DescribeConfigsResult) -> BTreeMap<String, (String, i8)> {
        r.configs
            .iter()
            .map(|c| {
                (
                    c.name.to_string(),
                    (
                        c.value.as_deref().unwrap_or_default().to_string(),
                        c.config_source,
                    ),
                )
            })
            .collect()
    }

    #[test]
    fn topic_configs_report_effective_values_and_where_they_come_from() {
        let mut cfg = config();
        cfg.topic_defaults.retention_bytes = Some(1 << 30);
        let r = describe(vec![resource(RESOURCE_TOPIC, "a", None)], &cfg);
        let a = &r.results[0];
        assert_eq!(a.error_code, 0);
        let v = values(a);
        assert_eq!(v["retention.ms"], ("60000".into(), SOURCE_TOPIC));
        assert_eq!(v["segment.bytes"], ("1048576".into(), SOURCE_TOPIC));
        assert_eq!(
            v["retention.bytes"],
            ((1u64 << 30).to_string(), SOURCE_STATIC_BROKER)
        );
        assert_eq!(v["segment.ms"], ("604800000".into(), SOURCE_DEFAULT));
        assert_eq!(
            v["max.message.bytes"],
            ((16 << 20).to_string(), SOURCE_DEFAULT)
        );
        assert_eq!(v["cleanup.policy"], ("delete".into(), SOURCE_DEFAULT));
        let retention = a
            .configs
            .iter()
            .find(|c| c.name.as_str() == "retention.ms")
            .unwrap();
        let syn: Vec<(&str, i8)> = retention
            .synonyms
            .iter()
            .map(|s| (s.name.as_str(), s.source))
            .collect();
        assert_eq!(
            syn,
            vec![
                ("retention.ms", SOURCE_TOPIC),
                ("log.retention.ms", SOURCE_DEFAULT)
            ]
        );
        assert_eq!(retention.synonyms[1].value.as_deref(), Some("1209600000"));
        assert!(retention.documentation.is_some());
        // Every setting rill knows is reported.
        for k in topic_config::KNOWN {
            assert!(v.contains_key(*k), "{k} missing");
        }
        // Asked keys only; unknown ones are left out.
        let r = describe(
            vec![resource(
                RESOURCE_TOPIC,
                "b",
                Some(&["retention.ms", "no.such.key"]),
            )],
            &cfg,
        );
        let v = values(&r.results[0]);
        assert_eq!(v.len(), 1);
        assert_eq!(v["retention.ms"], ("1209600000".into(), SOURCE_DEFAULT));
    }

    #[test]
    fn bad_resources_get_their_own_errors() {
        let cfg = config();
        let r = describe(
            vec![
                resource(RESOURCE_TOPIC, "nope", None),
                resource(RESOURCE_TOPIC, "bad/name", None),
                resource(RESOURCE_BROKER, "2000", None),
                resource(RESOURCE_BROKER, "x", None),
                resource(8, "1000", None),
                resource(RESOURCE_TOPIC, "b", None),
            ],
            &cfg,
        );
        let codes: Vec<i16> = r.results.iter().map(|r| r.error_code).collect();
        assert_eq!(codes, vec![3, 17, 42, 42, 42, 0]);
        assert!(r.results[..5]
            .iter()
            .all(|r| r.configs.is_empty() && r.error_message.is_some()));
        assert_eq!(r.results[2].resource_name.as_str(), "2000");
    }

    #[test]
    fn broker_configs_use_kafka_names_and_mark_flags_set() {
        let mut cfg = config();
        cfg.topic_defaults.retention = None;
        cfg.index_interval_bytes = 8192;
        let r = describe(
            vec![
                resource(RESOURCE_BROKER, "1001", None),
                resource(RESOURCE_BROKER, "", None),
            ],
            &cfg,
        );
        let b = &r.results[0];
        assert_eq!(b.error_code, 0);
        let v = values(b);
        assert_eq!(v["node.id"], ("1001".into(), SOURCE_STATIC_BROKER));
        assert_eq!(
            v["advertised.listeners"],
            ("PLAINTEXT://127.0.0.1:9093".into(), SOURCE_STATIC_BROKER)
        );
        assert_eq!(v["log.retention.ms"], ("-1".into(), SOURCE_STATIC_BROKER));
        assert_eq!(
            v["log.index.interval.bytes"],
            ("8192".into(), SOURCE_STATIC_BROKER)
        );
        assert_eq!(
            v["log.segment.bytes"],
            ((128 << 20).to_string(), SOURCE_DEFAULT)
        );
        assert_eq!(v["num.partitions"], ("1".into(), SOURCE_DEFAULT));
        assert!(b.configs.iter().all(|c| c.read_only));
        // Cluster-wide dynamic defaults: none exist.
        assert_eq!(r.results[1].error_code, 0);
        assert!(r.results[1].configs.is_empty());
    }

    #[test]
    fn describe_cluster_lists_what_metadata_lists() {
        let mut md = MetadataResponse::default();
        md.cluster_id = Some(s("c1"));
        md.controller_id = BrokerId(1000);
        for shard in 0..3 {
            let mut b = MetadataResponseBroker::default();
            b.node_id = BrokerId(1000 + shard);
            b.host = s("h");
            b.port = 9092 + shard;
            md.brokers.push(b);
        }
        let mut req = DescribeClusterRequest::default();
        let r = describe_cluster(&req, md.clone());
        assert_eq!(r.error_code, 0);
        assert_eq!(r.cluster_id.as_str(), "c1");
        assert_eq!(r.controller_id, BrokerId(1000));
        let nodes: Vec<(i32, i32)> = r.brokers.iter().map(|b| (b.broker_id.0, b.port)).collect();
        assert_eq!(nodes, vec![(1000, 9092), (1001, 9093), (1002, 9094)]);
        assert_eq!(r.cluster_authorized_operations, i32::MIN);
        req.include_cluster_authorized_operations = true;
        let r = describe_cluster(&req, md.clone());
        assert_ne!(
            r.cluster_authorized_operations & (1 << 12),
            0,
            "IDEMPOTENT_WRITE"
        );
        req.endpoint_type = ENDPOINT_CONTROLLER;
        assert_eq!(describe_cluster(&req, md.clone()).error_code, 114);
        req.endpoint_type = 9;
        assert_eq!(describe_cluster(&req, md).error_code, 115);
    }

    #[test]
    fn producer_ids_are_fresh_epochs_bump_and_transactions_are_refused() {
        let a = next_producer_id(3);
        let b = next_producer_id(3);
        assert_ne!(a, b);
        assert_eq!(a >> 32, 3);
        assert!(next_producer_id(u32::MAX) >= 0);
        let mut req = InitProducerIdRequest::default();
        req.transactional_id = None;
        let r = init_producer_id_with(&req, || 42);
        assert_eq!(
            (r.error_code, r.producer_id.0, r.producer_epoch),
            (0, 42, 0)
        );
        req.transactional_id = Some(TransactionalId(s("")));
        assert_eq!(init_producer_id_with(&req, || 43).producer_id.0, 43);
        // KIP-360 epoch bump keeps the id; an exhausted epoch gets a new id.
        req.producer_id = ProducerId(42);
        req.producer_epoch = 4;
        let r = init_producer_id_with(&req, || panic!("no new id"));
        assert_eq!((r.producer_id.0, r.producer_epoch), (42, 5));
        req.producer_epoch = MAX_EPOCH;
        let r = init_producer_id_with(&req, || 44);
        assert_eq!((r.producer_id.0, r.producer_epoch), (44, 0));
        req.transactional_id = Some(TransactionalId(s("txn")));
        let r = init_producer_id_with(&req, || panic!("no id for transactions"));
        assert_eq!((r.error_code, r.producer_id.0), (35, -1));
    }

    /// Every response encodes at every served version and decodes back.
    #[test]
    fn responses_encode_at_every_served_version() {
        use kafka_protocol::messages::ApiKey;
        let cfg = config();
        let mut created = create_result(&TopicName(s("t")), Ok(()));
        let cmd = plan_create(&topic("t", 2, 1, &[("retention.ms", Some("10"))])).unwrap();
        describe_created(&mut created, &cmd, &TopicDefaults::default(), Some(5));
        let failed = create_result(&TopicName(s("u")), Err((36, "exists".into())));
        let mut create = CreateTopicsResponse::default();
        create.topics = vec![created, failed];
        let configs = describe(
            vec![
                resource(RESOURCE_TOPIC, "a", None),
                resource(RESOURCE_BROKER, "1000", None),
            ],
            &cfg,
        );
        fn round_trip<T: Encodable + Decodable>(v: &T, versions: (i16, i16)) {
            for version in versions.0..=versions.1 {
                let mut buf = bytes::BytesMut::new();
                v.encode(&mut buf, version)
                    .unwrap_or_else(|e| panic!("v{version}: {e}"));
                let mut b = buf.freeze();
                T::decode(&mut b, version).unwrap_or_else(|e| panic!("v{version}: {e}"));
            }
        }
        let range = |api| super::super::versions::range(api).expect("served");
        round_trip(&create, range(ApiKey::CreateTopics));
        round_trip(&configs, range(ApiKey::DescribeConfigs));
        let mut deleted = DeleteTopicsResponse::default();
        let mut d = DeletableTopicResult::default();
        d.name = Some(TopicName(s("t")));
        deleted.responses.push(d);
        round_trip(&deleted, range(ApiKey::DeleteTopics));
        let cluster = describe_cluster(
            &DescribeClusterRequest::default(),
            MetadataResponse::default(),
        );
        round_trip(&cluster, range(ApiKey::DescribeCluster));
        let mut req = InitProducerIdRequest::default();
        req.transactional_id = None;
        round_trip(
            &init_producer_id_with(&req, || 1),
            range(ApiKey::InitProducerId),
        );
    }
}
