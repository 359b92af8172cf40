//! DescribeConfigs: a topic's effective settings and where each comes from, and a subset of
//! the broker's flags under Kafka's names. Both catalogues are tables: `TOPIC_KEYS` for
//! topic settings, `BROKER_KEYS` for broker settings.

use std::collections::BTreeMap;

use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResult, DescribeConfigsSynonym,
};
use kafka_protocol::messages::{DescribeConfigsRequest, DescribeConfigsResponse};

use super::{refusal, s, Refusal};
use crate::broker::BrokerConfig;
use crate::broker::Shard;
use crate::controller::metadata::{validate_topic_name, ClusterMetadata};
use crate::kafka::node_id;
use crate::protocol::ErrorCode;
use crate::topic_config::{self, TopicDefaults, TopicSettings};

/// DescribeConfigs resource types (Kafka's `ConfigResource.Type`).
pub(super) const RESOURCE_TOPIC: i8 = 2;
pub(super) const RESOURCE_BROKER: i8 = 4;

/// Config sources (Kafka's `DescribeConfigsResponse.ConfigSource`).
const SOURCE_TOPIC: i8 = 1;
const SOURCE_STATIC_BROKER: i8 = 4;
const SOURCE_DEFAULT: i8 = 5;

/// Config types (Kafka's `DescribeConfigsResponse.ConfigType`).
const TYPE_BOOLEAN: i8 = 1;
const TYPE_STRING: i8 = 2;
const TYPE_INT: i8 = 3;
const TYPE_LONG: i8 = 5;
const TYPE_DOUBLE: i8 = 6;
const TYPE_LIST: i8 = 7;

/// One config as DescribeConfigs (and CreateTopics v5+) reports it.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Entry {
    pub name: &'static str,
    pub value: String,
    pub source: i8,
    pub read_only: bool,
    pub config_type: i8,
    pub doc: &'static str,
    /// Most specific first, as Kafka lists synonyms.
    pub synonyms: Vec<Synonym>,
}

/// Where a config's value could come from: its name at that level, the value there, and
/// the source (`SOURCE_*`).
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Synonym {
    pub name: &'static str,
    pub value: String,
    pub source: i8,
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
        name: topic_config::CLEANUP_POLICY,
        broker: "log.cleanup.policy",
        config_type: TYPE_LIST,
        read_only: false,
        doc: "delete: closed segments past retention.ms or retention.bytes are deleted; \
              compact: closed segments are rewritten keeping the latest record of each key; \
              compact,delete: both.",
    },
    TopicKey {
        name: topic_config::DELETE_RETENTION_MS,
        broker: "log.cleaner.delete.retention.ms",
        config_type: TYPE_LONG,
        read_only: false,
        doc: "How long compaction keeps a tombstone that is the latest record of its key.",
    },
    TopicKey {
        name: topic_config::MAX_COMPACTION_LAG_MS,
        broker: "log.cleaner.max.compaction.lag.ms",
        config_type: TYPE_LONG,
        read_only: false,
        doc: "A closed segment is compacted at the latest this long after its newest record.",
    },
    TopicKey {
        name: topic_config::MIN_CLEANABLE_DIRTY_RATIO,
        broker: "log.cleaner.min.cleanable.ratio",
        config_type: TYPE_DOUBLE,
        read_only: false,
        doc: "Compaction starts once this share of the closed bytes is new since the last one.",
    },
    TopicKey {
        name: topic_config::MIN_COMPACTION_LAG_MS,
        broker: "log.cleaner.min.compaction.lag.ms",
        config_type: TYPE_LONG,
        read_only: false,
        doc: "A record stays uncompacted at least this long.",
    },
    TopicKey {
        name: topic_config::MAX_MESSAGE_BYTES,
        broker: "message.max.bytes",
        config_type: TYPE_LONG,
        read_only: false,
        doc: "The largest record batch a produce may carry.",
    },
    TopicKey {
        name: crate::replication::REPLICA_LAG_TIME_MAX_MS,
        broker: "replica.lag.time.max.ms",
        config_type: TYPE_LONG,
        read_only: false,
        doc: "A follower that has not caught up with the leader's log end this long leaves \
              the ISR.",
    },
    TopicKey {
        name: topic_config::WRITE_CACHING,
        broker: "write_caching_default",
        config_type: TYPE_BOOLEAN,
        read_only: false,
        doc: "Acknowledge produces once in the leader's memory (every ISR member's) and write \
              behind: a crash loses what was not written yet.",
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
        topic_config::CLEANUP_POLICY => t.cleanup.to_string(),
        topic_config::DELETE_RETENTION_MS => millis(Some(t.delete_retention), -1),
        topic_config::MIN_CLEANABLE_DIRTY_RATIO => {
            (f64::from(t.min_cleanable_dirty_ppm) / 1e6).to_string()
        }
        topic_config::MIN_COMPACTION_LAG_MS => millis(Some(t.min_compaction_lag), -1),
        topic_config::MAX_COMPACTION_LAG_MS => millis(t.max_compaction_lag, i64::MAX),
        crate::replication::REPLICA_LAG_TIME_MAX_MS => t.replica_lag_time_max_ms.to_string(),
        topic_config::WRITE_CACHING => t.write_caching.to_string(),
        // Every name of TOPIC_KEYS is matched above.
        _ => String::new(),
    }
}

/// A topic's effective settings: set on the topic (TOPIC_CONFIG), or the broker's default,
/// given by a flag (STATIC_BROKER_CONFIG) or built in (DEFAULT_CONFIG).
pub(super) fn topic_entries(
    configs: &BTreeMap<String, String>,
    defaults: &TopicDefaults,
) -> Vec<Entry> {
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
                synonyms.push(Synonym {
                    name: k.name,
                    value: value.clone(),
                    source: SOURCE_TOPIC,
                });
                SOURCE_TOPIC
            } else {
                broker_source
            };
            synonyms.push(Synonym {
                name: k.broker,
                value: broker_value,
                source: broker_source,
            });
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

/// A broker setting DescribeConfigs reports, under Kafka's name. Broker settings cannot be
/// changed at run time, so all are read-only.
struct BrokerKey {
    name: &'static str,
    config_type: i8,
    doc: &'static str,
    /// Reported as set by the broker (STATIC_BROKER_CONFIG) even at its default: it names
    /// this node or where it keeps its data, so no built-in default applies.
    always_static: bool,
    /// Its value on the Kafka node of shard `shard`.
    value: fn(cfg: &BrokerConfig, shard: u32) -> String,
}

/// The broker-wide topic defaults, as the topic settings they stand for.
fn topic_defaults(cfg: &BrokerConfig) -> TopicSettings {
    TopicSettings::resolve(&BTreeMap::new(), &cfg.topic_defaults)
}

const BROKER_KEYS: &[BrokerKey] = &[
    BrokerKey {
        name: "node.id",
        config_type: TYPE_INT,
        doc: "This Kafka node: broker id * 1000 + shard.",
        always_static: true,
        value: |c, shard| node_id(c.node_id, shard).to_string(),
    },
    BrokerKey {
        name: "advertised.listeners",
        config_type: TYPE_LIST,
        doc: "Where Kafka clients reach this node.",
        always_static: true,
        value: |c, shard| {
            format!(
                "PLAINTEXT://{}:{}",
                c.advertised_host,
                c.kafka_listen.map_or(0, |a| u32::from(a.port()) + shard)
            )
        },
    },
    BrokerKey {
        name: "log.dirs",
        config_type: TYPE_STRING,
        doc: "The broker's data directory.",
        always_static: true,
        value: |c, _| c.data_dir.display().to_string(),
    },
    BrokerKey {
        name: "num.partitions",
        config_type: TYPE_INT,
        doc: "Partitions of an auto-created topic or one created with num_partitions -1.",
        always_static: false,
        value: |c, _| c.num_partitions.to_string(),
    },
    BrokerKey {
        name: "default.replication.factor",
        config_type: TYPE_INT,
        doc:
            "Replication factor of an auto-created topic or one created with replication_factor -1.",
        always_static: false,
        value: |c, _| c.default_replication_factor.to_string(),
    },
    BrokerKey {
        name: "auto.create.topics.enable",
        config_type: TYPE_BOOLEAN,
        doc: "Whether a topic asked for in metadata is created when missing.",
        always_static: false,
        value: |c, _| c.auto_create_topics.to_string(),
    },
    BrokerKey {
        name: "log.cleanup.policy",
        config_type: TYPE_LIST,
        doc: "The cleanup.policy of topics that set none.",
        always_static: false,
        value: |_, _| "delete".to_string(),
    },
    BrokerKey {
        name: "log.retention.ms",
        config_type: TYPE_LONG,
        doc: "--retention-ms: default retention.ms of topics.",
        always_static: false,
        value: |c, _| topic_value(topic_config::RETENTION_MS, &topic_defaults(c)),
    },
    BrokerKey {
        name: "log.retention.bytes",
        config_type: TYPE_LONG,
        doc: "--retention-bytes: default retention.bytes of topics.",
        always_static: false,
        value: |c, _| topic_value(topic_config::RETENTION_BYTES, &topic_defaults(c)),
    },
    BrokerKey {
        name: "log.segment.bytes",
        config_type: TYPE_LONG,
        doc: "--segment-bytes: default segment.bytes of topics.",
        always_static: false,
        value: |c, _| topic_value(topic_config::SEGMENT_BYTES, &topic_defaults(c)),
    },
    BrokerKey {
        name: "log.roll.ms",
        config_type: TYPE_LONG,
        doc: "--segment-ms: default segment.ms of topics.",
        always_static: false,
        value: |c, _| topic_value(topic_config::SEGMENT_MS, &topic_defaults(c)),
    },
    BrokerKey {
        name: "message.max.bytes",
        config_type: TYPE_LONG,
        doc: "--max-message-bytes: default max.message.bytes of topics.",
        always_static: false,
        value: |c, _| topic_value(topic_config::MAX_MESSAGE_BYTES, &topic_defaults(c)),
    },
    BrokerKey {
        name: "log.retention.check.interval.ms",
        config_type: TYPE_LONG,
        doc: "--retention-check-interval-ms: how often each shard applies retention.",
        always_static: false,
        value: |c, _| millis(Some(c.retention_check_interval), -1),
    },
    BrokerKey {
        name: "log.index.interval.bytes",
        config_type: TYPE_INT,
        doc: "--index-interval-bytes: log bytes between two sparse index entries.",
        always_static: false,
        value: |c, _| c.index_interval_bytes.to_string(),
    },
    BrokerKey {
        name: "log.preallocate",
        config_type: TYPE_BOOLEAN,
        doc: "--preallocate: new segment files are fallocated to segment.bytes.",
        always_static: false,
        value: |c, _| c.preallocate.to_string(),
    },
    BrokerKey {
        name: "socket.request.max.bytes",
        config_type: TYPE_INT,
        doc: "--max-frame-bytes: the largest request accepted.",
        always_static: false,
        value: |c, _| c.max_frame_bytes.to_string(),
    },
    BrokerKey {
        name: "offsets.topic.num.partitions",
        config_type: TYPE_INT,
        doc: "--offsets-topic-partitions: partitions of __consumer_offsets.",
        always_static: false,
        value: |c, _| c.offsets_topic_partitions.to_string(),
    },
    BrokerKey {
        name: "transaction.state.log.num.partitions",
        config_type: TYPE_INT,
        doc: "--transaction-state-partitions: partitions of __transactions.",
        always_static: false,
        value: |c, _| c.transaction_state_partitions.to_string(),
    },
    BrokerKey {
        name: "transaction.max.timeout.ms",
        config_type: TYPE_INT,
        doc: "--transaction-max-timeout-ms: the longest transaction.timeout.ms allowed.",
        always_static: false,
        value: |c, _| c.transaction_max_timeout_ms.to_string(),
    },
    BrokerKey {
        name: "transactional.id.expiration.ms",
        config_type: TYPE_INT,
        doc: "--transactional-id-expiration-ms: idle transactional ids are forgotten after it.",
        always_static: false,
        value: |c, _| c.transactional_id_expiration_ms.to_string(),
    },
];

fn broker_entries(cfg: &BrokerConfig, shard: u32) -> Vec<Entry> {
    let mut baseline = BrokerConfig::new(cfg.data_dir.clone(), cfg.listen, cfg.cores.clone());
    baseline.node_id = cfg.node_id;
    baseline.advertised_host = cfg.advertised_host.clone();
    baseline.kafka_listen = cfg.kafka_listen;
    BROKER_KEYS
        .iter()
        .map(|k| {
            let value = (k.value)(cfg, shard);
            let source = if k.always_static || value != (k.value)(&baseline, shard) {
                SOURCE_STATIC_BROKER
            } else {
                SOURCE_DEFAULT
            };
            Entry {
                name: k.name,
                synonyms: vec![Synonym {
                    name: k.name,
                    value: value.clone(),
                    source,
                }],
                value,
                source,
                read_only: true,
                config_type: k.config_type,
                doc: k.doc,
            }
        })
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
                    .map(|syn| {
                        let mut d = DescribeConfigsSynonym::default();
                        d.name = s(syn.name);
                        d.value = Some(s(syn.value));
                        d.source = syn.source;
                        d
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kafka::admin::test_support::{metadata, round_trip, served};
    use kafka_protocol::messages::ApiKey;
    use std::net::SocketAddr;

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
    fn responses_encode_at_every_served_version() {
        let configs = describe(
            vec![
                resource(RESOURCE_TOPIC, "a", None),
                resource(RESOURCE_BROKER, "1000", None),
            ],
            &config(),
        );
        round_trip(&configs, served(ApiKey::DescribeConfigs));
    }
}
