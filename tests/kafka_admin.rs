//! The Kafka admin APIs against real brokers: confluent-kafka's AdminClient and an idempotent
//! producer (tests/kafka/admin.py), and raw requests where a client would not send what is
//! checked. `.ci/run` installs confluent-kafka; without it these tests fail and say so.

use std::collections::{BTreeMap, BTreeSet};

use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::delete_topics_request::DeleteTopicState;
use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::{
    ApiKey, CreateTopicsRequest, CreateTopicsResponse, DeleteTopicsRequest, DeleteTopicsResponse,
    DescribeClusterRequest, DescribeClusterResponse, DescribeConfigsRequest,
    DescribeConfigsResponse, InitProducerIdRequest, InitProducerIdResponse, MetadataRequest,
    MetadataResponse, ProducerId, TopicName, TransactionalId,
};
use kafka_protocol::protocol::StrBytes;
use rill::client::StartFrom;
use rill_testkit::{TestBroker, DEADLINE};
use serde_json::Value;

fn admin_py(args: &[&str]) -> String {
    rill_testkit::kafka_script("admin.py", args)
}

/// Per-topic outcome of a create or delete: topic -> None (done) or Some(Kafka error code).
fn outcomes(out: &str) -> BTreeMap<String, Option<i64>> {
    out.lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            let code = v["error"].as_object().map(|e| e["code"].as_i64().unwrap());
            (v["topic"].as_str().unwrap().to_string(), code)
        })
        .collect()
}

fn create(b: &TestBroker, spec: Value, validate: bool) -> BTreeMap<String, Option<i64>> {
    let kafka = b.kafka_bootstrap();
    let spec = spec.to_string();
    let mut args = vec!["create", kafka.as_str(), spec.as_str()];
    if validate {
        args.push("validate");
    }
    outcomes(&admin_py(&args))
}

/// (value, source) of every config of a resource, or the error code.
fn describe_configs(
    b: &TestBroker,
    kind: &str,
    name: &str,
) -> Result<BTreeMap<String, (String, i64)>, i64> {
    let v: Value = serde_json::from_str(&admin_py(&[
        "describe-configs",
        &b.kafka_bootstrap(),
        kind,
        name,
    ]))
    .unwrap();
    if let Some(e) = v["error"].as_object() {
        return Err(e["code"].as_i64().unwrap());
    }
    Ok(v["configs"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, c)| {
            (
                k.clone(),
                (
                    c["value"].as_str().unwrap().to_string(),
                    c["source"].as_i64().unwrap(),
                ),
            )
        })
        .collect())
}

/// DescribeConfigs sources (Kafka's numbers).
const TOPIC_CONFIG: i64 = 1;
const STATIC_BROKER_CONFIG: i64 = 4;
const DEFAULT_CONFIG: i64 = 5;

use rill_testkit::kafka_call as call;

fn name(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.to_string()))
}

#[test]
fn topics_created_through_the_admin_client_are_the_native_topics_with_their_configs() {
    let b = TestBroker::start_kafka(2, &[]);
    let created = create(
        &b,
        serde_json::json!([
            {"name": "a", "partitions": 3, "rf": 1,
             "config": {"retention.ms": "60000", "segment.bytes": "1048576"}},
            {"name": "b", "partitions": -1, "rf": -1},
        ]),
        false,
    );
    assert_eq!(created["a"], None, "{created:?}");
    assert_eq!(created["b"], None, "{created:?}");
    let mut client = b.client();
    let a = client.describe_topic("a").unwrap();
    assert_eq!(a.partitions.len(), 3);
    let configs: BTreeMap<String, String> = a.configs.into_iter().collect();
    assert_eq!(
        configs.get("retention.ms").map(String::as_str),
        Some("60000")
    );
    assert_eq!(
        configs.get("segment.bytes").map(String::as_str),
        Some("1048576")
    );
    // -1 / -1: the broker defaults, one partition with one replica.
    let d = client.describe_topic("b").unwrap();
    assert_eq!(d.partitions.len(), 1);
    assert_eq!(d.partitions[0].replicas.len(), 1);
    assert!(d.configs.is_empty(), "{:?}", d.configs);
    // The CLI shows the same.
    let out = b.cli(&["topic", "describe", "a"], None);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("partitions 3"), "{text}");
    assert!(text.contains("config retention.ms=60000"), "{text}");
    // Usable at once through the native protocol: every partition is open on its shard.
    for p in 0..3 {
        rill_testkit::produce_values(&b, "a", p, [format!("v{p}")]);
    }
    assert_eq!(
        rill_testkit::consume_exactly(&b, "a", StartFrom::Beginning, 3).len(),
        3
    );
    // validate_only answers as a creation would, and creates nothing.
    let checked = create(
        &b,
        serde_json::json!([{"name": "c", "partitions": 2, "rf": 1,
                            "config": {"retention.bytes": "1000"}}]),
        true,
    );
    assert_eq!(checked["c"], None);
    let refused = create(
        &b,
        serde_json::json!([{"name": "a", "partitions": 1}]),
        true,
    );
    assert_eq!(refused["a"], Some(36), "TOPIC_ALREADY_EXISTS");
    client.refresh_metadata().unwrap();
    assert!(!client.list_topics().unwrap().contains(&"c".to_string()));
}

#[test]
fn bad_create_requests_get_kafka_errors_per_topic() {
    let b = TestBroker::start_kafka(1, &[]);
    b.client().create_topic("taken", 1, 1, vec![]).unwrap();
    let out = create(
        &b,
        serde_json::json!([
            {"name": "taken", "partitions": 1, "rf": 1},
            {"name": "zero", "partitions": 0, "rf": 1},
            {"name": "huge", "partitions": 100000, "rf": 1},
            {"name": "rf3", "partitions": 1, "rf": 3},
            {"name": "rf0", "partitions": 1, "rf": 0},
            {"name": "badvalue", "partitions": 1, "config": {"retention.ms": "soon"}},
            {"name": "badkey", "partitions": 1, "config": {"cleanup.policy": "compacted"}},
            {"name": "bad/name", "partitions": 1},
            {"name": "fine", "partitions": 2, "config": {"max.message.bytes": "2000000"}},
        ]),
        false,
    );
    let expected: BTreeMap<String, Option<i64>> = [
        ("taken", Some(36)), // TOPIC_ALREADY_EXISTS
        ("zero", Some(37)),  // INVALID_PARTITIONS
        ("huge", Some(37)),  // over --max-partitions-per-topic
        ("rf3", Some(38)),   // INVALID_REPLICATION_FACTOR: one broker
        ("rf0", Some(38)),
        ("badvalue", Some(40)), // INVALID_CONFIG
        ("badkey", Some(40)),   // not delete, compact or both
        ("bad/name", Some(17)), // INVALID_TOPIC_EXCEPTION
        ("fine", None),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    assert_eq!(out, expected);
    let mut client = b.client();
    client.refresh_metadata().unwrap();
    let topics: BTreeSet<String> = client.list_topics().unwrap().into_iter().collect();
    assert_eq!(
        topics,
        ["fine", "taken"].iter().map(|s| s.to_string()).collect()
    );
    let fine = client.describe_topic("fine").unwrap();
    assert_eq!(fine.partitions.len(), 2);
    assert_eq!(
        fine.configs,
        vec![("max.message.bytes".into(), "2000000".into())]
    );
    // What librdkafka will not send: a manual assignment, a null config value, a duplicate.
    let mut manual = CreatableTopic::default();
    manual.name = name("manual");
    manual.num_partitions = -1;
    manual.replication_factor = -1;
    manual.assignments = vec![Default::default()];
    let mut dup = CreatableTopic::default();
    dup.name = name("twice");
    dup.num_partitions = 1;
    dup.replication_factor = 1;
    let mut req = CreateTopicsRequest::default();
    req.topics = vec![manual, dup.clone(), dup];
    req.timeout_ms = 30_000;
    let r: CreateTopicsResponse = call(&b.kafka_bootstrap(), ApiKey::CreateTopics, 7, &req);
    let codes: Vec<(String, i16)> = r
        .topics
        .iter()
        .map(|t| (t.name.0.to_string(), t.error_code))
        .collect();
    assert_eq!(
        codes,
        vec![("manual".into(), 39), ("twice".into(), 42)],
        "INVALID_REPLICA_ASSIGNMENT, INVALID_REQUEST"
    );
}

#[test]
fn deleting_through_kafka_reclaims_the_topic_and_its_files() {
    let b = TestBroker::start_kafka(2, &[]);
    let kafka = b.kafka_bootstrap();
    assert_eq!(
        create(
            &b,
            serde_json::json!([{"name": "gone", "partitions": 2}]),
            false
        )["gone"],
        None
    );
    rill_testkit::produce_values(&b, "gone", 0, (0..50).map(|i| format!("v{i}")));
    rill_testkit::produce_values(&b, "gone", 1, (0..50).map(|i| format!("w{i}")));
    let dirs = [
        rill_testkit::partition_dir(&b.data_dir(), "gone", 0),
        rill_testkit::partition_dir(&b.data_dir(), "gone", 1),
    ];
    assert!(dirs.iter().all(|d| d.exists()));
    let deleted = outcomes(&admin_py(&["delete", &kafka, "gone", "never-was"]));
    assert_eq!(deleted["gone"], None);
    assert_eq!(deleted["never-was"], Some(3), "UNKNOWN_TOPIC_OR_PARTITION");
    // The answer comes once every shard applied the deletion: the files are gone.
    for d in &dirs {
        assert!(!d.exists(), "{} still exists", d.display());
    }
    assert!(b.client().describe_topic("gone").is_err());
    // The name is free again, and the new topic starts empty.
    assert_eq!(
        create(
            &b,
            serde_json::json!([{"name": "gone", "partitions": 1}]),
            false
        )["gone"],
        None
    );
    let again = b.client().describe_topic("gone").unwrap();
    assert_eq!(again.partitions.len(), 1);
    assert_eq!(again.partitions[0].log_end_offset, 0);
    // DeleteTopics v6 names topics by id (the id Metadata gives); unknown ids are refused.
    let mut md_req = MetadataRequest::default();
    md_req.topics = None;
    let md: MetadataResponse = call(&kafka, ApiKey::Metadata, 12, &md_req);
    let id = md
        .topics
        .iter()
        .find(|t| t.name.as_ref().is_some_and(|n| n.0.as_str() == "gone"))
        .unwrap()
        .topic_id;
    let by_id = |id| {
        let mut t = DeleteTopicState::default();
        t.name = None;
        t.topic_id = id;
        t
    };
    let mut req = DeleteTopicsRequest::default();
    req.topics = vec![by_id(id), by_id(uuid::Uuid::from_u128(12345))];
    req.timeout_ms = 30_000;
    let r: DeleteTopicsResponse = call(&kafka, ApiKey::DeleteTopics, 6, &req);
    assert_eq!(r.responses.len(), 2);
    assert_eq!(r.responses[0].error_code, 0);
    assert_eq!(r.responses[0].name.as_ref().unwrap().0.as_str(), "gone");
    assert_eq!(r.responses[0].topic_id, id);
    assert_eq!(r.responses[1].error_code, 100, "UNKNOWN_TOPIC_ID");
    assert!(b.client().describe_topic("gone").is_err());
}

#[test]
fn describe_configs_reports_what_was_set_and_the_broker_flags() {
    let b = TestBroker::start_kafka(2, &["--retention-bytes", "5000000"]);
    assert_eq!(
        create(
            &b,
            serde_json::json!([{"name": "t", "partitions": 1,
                                "config": {"retention.ms": "60000", "segment.bytes": "2097152"}}]),
            false
        )["t"],
        None
    );
    let c = describe_configs(&b, "topic", "t").unwrap();
    assert_eq!(c["retention.ms"], ("60000".into(), TOPIC_CONFIG));
    assert_eq!(c["segment.bytes"], ("2097152".into(), TOPIC_CONFIG));
    assert_eq!(
        c["retention.bytes"],
        ("5000000".into(), STATIC_BROKER_CONFIG)
    );
    assert_eq!(c["segment.ms"], ("604800000".into(), DEFAULT_CONFIG));
    assert_eq!(
        c["max.message.bytes"],
        ((16 << 20).to_string(), DEFAULT_CONFIG)
    );
    assert_eq!(c["cleanup.policy"], ("delete".into(), DEFAULT_CONFIG));
    // Compaction settings, as set through the admin client.
    assert_eq!(
        create(
            &b,
            serde_json::json!([{"name": "cmp", "partitions": 1,
                                "config": {"cleanup.policy": "compact,delete",
                                           "min.cleanable.dirty.ratio": "0.2"}}]),
            false
        )["cmp"],
        None
    );
    let cmp = describe_configs(&b, "topic", "cmp").unwrap();
    assert_eq!(
        cmp["cleanup.policy"],
        ("compact,delete".into(), TOPIC_CONFIG)
    );
    assert_eq!(
        cmp["min.cleanable.dirty.ratio"],
        ("0.2".into(), TOPIC_CONFIG)
    );
    assert_eq!(
        cmp["delete.retention.ms"],
        ("86400000".into(), DEFAULT_CONFIG)
    );
    // A change made through the native protocol shows at once.
    b.client()
        .alter_topic_config("t", vec![("retention.ms".into(), "120000".into())])
        .unwrap();
    let c = describe_configs(&b, "topic", "t").unwrap();
    assert_eq!(c["retention.ms"], ("120000".into(), TOPIC_CONFIG));
    assert_eq!(describe_configs(&b, "topic", "nope"), Err(3));
    // Each shard answers for its own Kafka node.
    for node in ["1000", "1001"] {
        let c = describe_configs(&b, "broker", node).unwrap();
        assert_eq!(c["node.id"].0, node);
        assert_eq!(
            c["log.retention.bytes"],
            ("5000000".into(), STATIC_BROKER_CONFIG)
        );
        assert_eq!(c["log.retention.ms"], ("1209600000".into(), DEFAULT_CONFIG));
        assert_eq!(c["num.partitions"].0, "1");
        assert_eq!(c["auto.create.topics.enable"].0, "true");
    }
    // Another broker's id (librdkafka would wait for that broker: sent raw) and a resource
    // type rill does not have (BROKER_LOGGER) get their own errors beside a good one.
    let resource = |kind: i8, name: &str| {
        let mut r = DescribeConfigsResource::default();
        r.resource_type = kind;
        r.resource_name = StrBytes::from_string(name.to_string());
        r.configuration_keys = None;
        r
    };
    let mut req = DescribeConfigsRequest::default();
    req.resources = vec![resource(4, "7000"), resource(8, "1000"), resource(2, "t")];
    for version in 1..=4 {
        let r: DescribeConfigsResponse =
            call(&b.kafka_bootstrap(), ApiKey::DescribeConfigs, version, &req);
        let codes: Vec<i16> = r.results.iter().map(|r| r.error_code).collect();
        assert_eq!(codes, vec![42, 42, 0], "v{version}");
        // Every topic setting rill has (write.caching the newest, off by default).
        assert_eq!(
            r.results[2].configs.len(),
            rill::topic_config::KNOWN.len(),
            "v{version}"
        );
        let caching = r.results[2]
            .configs
            .iter()
            .find(|c| c.name.as_str() == "write.caching")
            .expect("write.caching described");
        assert_eq!(
            caching.value.as_ref().map(|v| v.as_str()),
            Some("false"),
            "v{version}"
        );
    }
}

#[test]
fn describe_cluster_lists_every_shard_as_metadata_does() {
    let b = TestBroker::start_kafka(2, &[]);
    let v: Value =
        serde_json::from_str(&admin_py(&["describe-cluster", &b.kafka_bootstrap()])).unwrap();
    let port = b.kafka_port.unwrap() as i64;
    assert_eq!(
        v["nodes"],
        serde_json::json!([[1000, "127.0.0.1", port], [1001, "127.0.0.1", port + 1]])
    );
    assert_eq!(v["controller"], 1000);
    let cluster_id = b.client().cluster_info().unwrap().cluster_id;
    assert_eq!(v["cluster_id"].as_str().unwrap(), cluster_id);
    // Every version agrees with Metadata, on every shard.
    for shard in 0..2 {
        let addr = format!("127.0.0.1:{}", port + shard);
        let md: MetadataResponse = call(&addr, ApiKey::Metadata, 12, &MetadataRequest::default());
        for version in 0..=2 {
            let r: DescribeClusterResponse = call(
                &addr,
                ApiKey::DescribeCluster,
                version,
                &DescribeClusterRequest::default(),
            );
            assert_eq!(r.error_code, 0);
            assert_eq!(Some(&r.cluster_id), md.cluster_id.as_ref());
            assert_eq!(r.controller_id, md.controller_id);
            let nodes: Vec<(i32, i32)> =
                r.brokers.iter().map(|n| (n.broker_id.0, n.port)).collect();
            let expected: Vec<(i32, i32)> =
                md.brokers.iter().map(|n| (n.node_id.0, n.port)).collect();
            assert_eq!(nodes, expected, "v{version} on shard {shard}");
        }
    }
    // The controller endpoint type is not served by a broker.
    let mut req = DescribeClusterRequest::default();
    req.endpoint_type = 2;
    let r: DescribeClusterResponse = call(&b.kafka_bootstrap(), ApiKey::DescribeCluster, 1, &req);
    assert_eq!(r.error_code, 114, "MISMATCHED_ENDPOINT_TYPE");
}

#[test]
fn an_idempotent_confluent_kafka_producer_writes_and_its_messages_read_back() {
    let b = TestBroker::start_kafka(2, &[]);
    b.client().create_topic("t", 4, 1, vec![]).unwrap();
    let kafka = b.kafka_bootstrap();
    let mut ids = BTreeSet::new();
    for round in ["r0", "r1"] {
        let v: Value = serde_json::from_str(&admin_py(&[
            "produce-idempotent",
            &kafka,
            "t",
            "1000",
            round,
        ]))
        .unwrap();
        assert_eq!(v["delivered"], 1000);
        let id = v["producer_id"]
            .as_i64()
            .unwrap_or_else(|| panic!("round {round}: no producer id assigned: {v}"));
        assert!(id >= 0, "an id from the controller's blocks: {id}");
        assert_eq!(v["epoch"], 0);
        ids.insert(id);
    }
    assert_eq!(ids.len(), 2, "each producer gets its own id");
    let mut read = rill_testkit::consume_exactly(&b, "t", StartFrom::Beginning, 2000);
    read.sort_by_key(|r| (r.partition, r.offset));
    let mut last: BTreeMap<(String, String), i64> = BTreeMap::new();
    let mut values = BTreeSet::new();
    for r in &read {
        let value = String::from_utf8(r.value.clone().unwrap_or_default()).unwrap();
        let mut parts = value.split(':');
        let (run, key, seq) = (
            parts.next().unwrap(),
            parts.next().unwrap(),
            parts.next().unwrap(),
        );
        assert_eq!(r.key.as_deref(), Some(key.as_bytes()), "{value}");
        let seq: i64 = seq.parse().unwrap();
        // Per producer and key, in the order sent.
        let prev = last
            .insert((run.to_string(), key.to_string()), seq)
            .unwrap_or(-1);
        assert!(seq > prev, "{run} {key}: {seq} after {prev}");
        values.insert(value.clone());
    }
    assert_eq!(values.len(), 2000, "every message once");
}

/// confluent-kafka with `enable.idempotence=true` through a proxy that loses every third
/// response: librdkafka retries with the same sequences, and the broker stores every message
/// exactly once, at the offset its delivery report names.
#[test]
fn an_idempotent_confluent_kafka_producer_with_lost_responses_stores_each_message_once() {
    let b = TestBroker::start_kafka(1, &["--advertised-host", "127.0.0.2"]);
    let port = b.kafka_port.expect("kafka listener");
    let proxy = rill_testkit::ResponseDropper::start(
        "127.0.0.2",
        &[port],
        3,
        rill_testkit::FrameLength::Kafka,
    );
    // The native listener (read back below) is advertised there too: passed through whole.
    let _native = rill_testkit::ResponseDropper::start(
        "127.0.0.2",
        &[b.port],
        u64::MAX,
        rill_testkit::FrameLength::Native,
    );
    b.client().create_topic("lossy", 3, 1, vec![]).unwrap();
    let v: Value = serde_json::from_str(&admin_py(&[
        "produce-idempotent-reports",
        &b.kafka_bootstrap(),
        "lossy",
        "20000",
        "run",
    ]))
    .unwrap();
    assert_eq!(v["delivered"], 20000, "{}", v["delivered"]);
    assert!(
        proxy.dropped() >= 2,
        "only {} responses dropped",
        proxy.dropped()
    );
    proxy.stop_dropping();
    let mut reported = BTreeMap::new();
    for r in v["reports"].as_array().unwrap() {
        let (p, o) = (r[0].as_u64().unwrap() as u32, r[1].as_u64().unwrap());
        let value = r[2].as_str().unwrap().to_string();
        assert!(
            reported.insert((p, o), value).is_none(),
            "{p}@{o} reported twice"
        );
    }
    let read = rill_testkit::consume_exactly(&b, "lossy", StartFrom::Beginning, 20000);
    for r in &read {
        let value = String::from_utf8(r.value.clone().unwrap_or_default()).unwrap();
        assert_eq!(reported.get(&(r.partition, r.offset)), Some(&value));
    }
}

#[test]
fn init_producer_id_bumps_epochs_and_serves_transactional_ids() {
    let b = TestBroker::start_kafka(1, &[]);
    let kafka = b.kafka_bootstrap();
    let mut req = InitProducerIdRequest::default();
    req.transactional_id = None;
    req.transaction_timeout_ms = 60_000;
    let first: InitProducerIdResponse = call(&kafka, ApiKey::InitProducerId, 4, &req);
    assert_eq!((first.error_code, first.producer_epoch), (0, 0));
    let second: InitProducerIdResponse = call(&kafka, ApiKey::InitProducerId, 0, &req);
    assert_ne!(first.producer_id, second.producer_id);
    // KIP-360: a producer recovering from an error keeps its id with the next epoch.
    req.producer_id = first.producer_id;
    req.producer_epoch = 0;
    let bumped: InitProducerIdResponse = call(&kafka, ApiKey::InitProducerId, 5, &req);
    assert_eq!(
        (bumped.producer_id, bumped.producer_epoch),
        (first.producer_id, 1)
    );
    req.transactional_id = Some(TransactionalId(StrBytes::from_static_str("txn")));
    req.producer_id = ProducerId(-1);
    req.producer_epoch = -1;
    // A transactional id gets its own producer id from its transaction coordinator, once
    // `__transactions` exists (COORDINATOR_NOT_AVAILABLE / _LOAD_IN_PROGRESS until then).
    let start = std::time::Instant::now();
    let txn = loop {
        let r: InitProducerIdResponse = call(&kafka, ApiKey::InitProducerId, 5, &req);
        if r.error_code == 0 {
            break r;
        }
        assert!([14, 15].contains(&r.error_code), "{r:?}");
        assert!(start.elapsed() < DEADLINE);
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert_eq!(txn.producer_epoch, 0);
    assert!(![first.producer_id, second.producer_id].contains(&txn.producer_id));
}

/// Kafka's default: a producer's first metadata request for a missing topic creates it
/// (`--num-partitions` partitions); a request that does not allow it, a broker started with
/// `--auto-create-topics false`, an invalid and an internal name create nothing.
#[test]
fn a_kafka_producer_creates_a_missing_topic_on_first_use() {
    let b = TestBroker::start_kafka(2, &["--num-partitions", "3"]);
    let kafka = b.kafka_bootstrap();
    let v: Value = serde_json::from_str(&admin_py(&[
        "produce-idempotent",
        &kafka,
        "auto",
        "200",
        "a",
    ]))
    .unwrap();
    assert_eq!(v["delivered"], 200, "{v}");
    let mut c = b.client();
    assert_eq!(c.refresh_metadata().unwrap().partitions("auto").unwrap(), 3);
    assert_eq!(
        rill_testkit::consume_exactly(&b, "auto", StartFrom::Beginning, 200).len(),
        200
    );

    let ask = |addr: &str, names: &[&str], allow: bool| -> Vec<(String, i16)> {
        let mut req = MetadataRequest::default();
        req.allow_auto_topic_creation = allow;
        req.topics = Some(
            names
                .iter()
                .map(|n| {
                    let mut t =
                        kafka_protocol::messages::metadata_request::MetadataRequestTopic::default();
                    t.name = Some(name(n));
                    t
                })
                .collect(),
        );
        let r: MetadataResponse = call(addr, ApiKey::Metadata, 9, &req);
        r.topics
            .iter()
            .map(|t| (t.name.as_ref().unwrap().0.to_string(), t.error_code))
            .collect()
    };
    let got = ask(&kafka, &["not-allowed"], false);
    assert_eq!(
        got,
        vec![("not-allowed".to_string(), 3)],
        "UNKNOWN_TOPIC_OR_PARTITION"
    );
    let got = ask(&kafka, &["bad name", "__internal", "made"], true);
    assert_eq!(
        got,
        vec![
            ("bad name".to_string(), 17),
            ("__internal".to_string(), 3),
            ("made".to_string(), 0)
        ],
        "INVALID_TOPIC_EXCEPTION, not created, created"
    );
    let md = c.refresh_metadata().unwrap();
    assert!(md.topics.contains_key("made"));
    assert!(
        !md.topics.contains_key("not-allowed") && !md.topics.contains_key("__internal"),
        "{:?}",
        md.topics.keys()
    );

    let off = TestBroker::start_kafka(1, &["--auto-create-topics", "false"]);
    let got = ask(&off.kafka_bootstrap(), &["wanted"], true);
    assert_eq!(got, vec![("wanted".to_string(), 3)]);
}

/// CreatePartitions, DeleteRecords (to an offset and to the high watermark) and
/// DescribeLogDirs are codecs over rill's own operations: what they do shows natively.
#[test]
fn partitions_and_records_are_administered_through_the_admin_client() {
    let b = TestBroker::start_kafka(2, &[]);
    let kafka = b.kafka_bootstrap();
    let mut c = b.client();
    c.create_topic("grow", 2, 1, vec![]).unwrap();
    let lines = |out: String| outcomes(&out);
    let refused = lines(admin_py(&["create-partitions", &kafka, "grow", "1"]));
    assert_eq!(
        refused["grow"],
        Some(37),
        "INVALID_PARTITIONS: fewer than now"
    );
    let checked = lines(admin_py(&[
        "create-partitions",
        &kafka,
        "grow",
        "5",
        "validate",
    ]));
    assert_eq!(checked["grow"], None);
    assert_eq!(c.refresh_metadata().unwrap().partitions("grow").unwrap(), 2);
    let grown = lines(admin_py(&["create-partitions", &kafka, "grow", "5"]));
    assert_eq!(grown["grow"], None);
    assert_eq!(c.refresh_metadata().unwrap().partitions("grow").unwrap(), 5);
    let unknown = lines(admin_py(&["create-partitions", &kafka, "nope", "3"]));
    assert_eq!(unknown["nope"], Some(3));

    rill_testkit::produce_values(&b, "grow", 1, (0..10).map(|i| format!("v{i}")));
    let v: Value =
        serde_json::from_str(&admin_py(&["delete-records", &kafka, "grow", "1", "4"])).unwrap();
    assert_eq!(v["low_watermark"], 4, "{v}");
    let v: Value =
        serde_json::from_str(&admin_py(&["delete-records", &kafka, "grow", "1", "-1"])).unwrap();
    assert_eq!(v["low_watermark"], 10, "to the high watermark: {v}");
    let v: Value =
        serde_json::from_str(&admin_py(&["delete-records", &kafka, "grow", "1", "99"])).unwrap();
    assert_eq!(v["error"]["code"], 1, "OFFSET_OUT_OF_RANGE: {v}");
    assert_eq!(
        c.list_offset("grow", 1, -2).unwrap(),
        Some(10),
        "the log start moved"
    );

    // Each shard (Kafka node) lists the partitions it leads, with their sizes.
    let mut sizes = BTreeMap::new();
    for node in 0..2u16 {
        let port: u16 = kafka.rsplit(':').next().unwrap().parse().unwrap();
        let addr = format!("127.0.0.1:{}", port + node);
        let mut all = kafka_protocol::messages::DescribeLogDirsRequest::default();
        all.topics = None;
        let r: kafka_protocol::messages::DescribeLogDirsResponse =
            call(&addr, ApiKey::DescribeLogDirs, 4, &all);
        assert_eq!(r.results.len(), 1);
        let dir = &r.results[0];
        assert!(dir.total_bytes > 0 && dir.usable_bytes > 0, "{dir:?}");
        for t in &dir.topics {
            for p in &t.partitions {
                let dup = sizes.insert((t.name.0.to_string(), p.partition_index), p.partition_size);
                assert!(dup.is_none(), "listed by two nodes: {t:?}");
            }
        }
    }
    for p in 0..5 {
        assert!(sizes.contains_key(&("grow".to_string(), p)), "{sizes:?}");
    }
    assert!(sizes[&("grow".to_string(), 1)] > 0);
}

/// AlterConfigs replaces a topic's settings, IncrementalAlterConfigs changes one at a time;
/// both are validated as `topic create --config` is, and what they do shows natively.
#[test]
fn topic_settings_change_through_alter_configs_and_incremental_alter_configs() {
    let b = TestBroker::start_kafka(1, &[]);
    let kafka = b.kafka_bootstrap();
    let mut c = b.client();
    c.create_topic(
        "conf",
        1,
        1,
        vec![
            ("retention.ms".into(), "1000".into()),
            ("segment.bytes".into(), "1048576".into()),
        ],
    )
    .unwrap();
    let configs = |c: &mut rill::client::Client| -> BTreeMap<String, String> {
        c.describe_topic("conf")
            .unwrap()
            .configs
            .into_iter()
            .collect()
    };
    let error =
        |out: String| -> Value { serde_json::from_str::<Value>(&out).unwrap()["error"].clone() };
    let inc = |spec: &str| {
        error(admin_py(&[
            "incremental-alter-configs",
            &kafka,
            "topic",
            "conf",
            spec,
        ]))
    };

    assert_eq!(
        inc(r#"[["retention.ms", "SET", "5000"], ["segment.bytes", "DELETE", null]]"#),
        Value::Null
    );
    assert_eq!(
        configs(&mut c),
        BTreeMap::from([("retention.ms".to_string(), "5000".to_string())]),
        "set one, removed the other"
    );
    let bad = inc(r#"[["retention.ms", "SET", "soon"]]"#);
    assert_eq!(bad["code"], 40, "INVALID_CONFIG: {bad}");
    let bad = inc(r#"[["retentoin.ms", "DELETE", null]]"#);
    assert_eq!(bad["code"], 40, "INVALID_CONFIG for an unknown key: {bad}");
    let bad = inc(r#"[["retention.ms", "APPEND", "1"]]"#);
    assert_eq!(bad["code"], 40, "not a list: {bad}");
    assert_eq!(
        configs(&mut c)["retention.ms"],
        "5000",
        "refusals changed nothing"
    );

    let set = error(admin_py(&[
        "alter-configs",
        &kafka,
        "topic",
        "conf",
        r#"{"max.message.bytes": "65536"}"#,
    ]));
    assert_eq!(set, Value::Null);
    assert_eq!(
        configs(&mut c),
        BTreeMap::from([("max.message.bytes".to_string(), "65536".to_string())]),
        "AlterConfigs replaces every setting"
    );
    let unknown = error(admin_py(&["alter-configs", &kafka, "topic", "nope", "{}"]));
    assert_eq!(unknown["code"], 3, "{unknown}");
    let broker = error(admin_py(&[
        "incremental-alter-configs",
        &kafka,
        "broker",
        "1000",
        r#"[["log.retention.ms", "SET", "1"]]"#,
    ]));
    assert_eq!(broker["code"], 42, "broker settings are flags: {broker}");
}

/// DeleteGroups removes a group without members and its committed offsets, for good (its
/// tombstones replay after a restart); OffsetDelete removes one partition's offset unless a
/// member subscribes to the topic.
#[test]
fn groups_and_their_offsets_are_deleted_for_good() {
    let mut b = TestBroker::start_kafka(1, &[]);
    let kafka = b.kafka_bootstrap();
    let mut c = b.client();
    c.create_topic("t", 1, 1, vec![]).unwrap();
    c.create_topic("other", 1, 1, vec![]).unwrap();
    let commit = |c: &mut rill::client::Client, group: &str, topic: &str, offset: u64| {
        let at = c.find_coordinator(group).unwrap();
        c.commit_offsets(
            at,
            group,
            "",
            -1,
            vec![(topic.into(), 0, offset, String::new())],
        )
        .unwrap();
    };
    let committed = |c: &mut rill::client::Client, group: &str| -> Vec<(String, u64)> {
        let at = c.find_coordinator(group).unwrap();
        c.fetch_offsets(at, group, vec![])
            .unwrap()
            .into_iter()
            .filter_map(|(topic, _, offset, _)| Some((topic, offset?)))
            .collect()
    };
    commit(&mut c, "gone", "t", 5);
    commit(&mut c, "kept", "t", 7);
    commit(&mut c, "busy", "t", 1);
    commit(&mut c, "busy", "other", 2);

    // A live member of "busy", subscribed to t.
    let mut cfg = rill::client::GroupConsumerConfig::new("busy");
    cfg.session_timeout = std::time::Duration::from_secs(30);
    let mut member =
        rill::client::GroupConsumer::new(rill::client::ClientConfig::new(b.bootstrap()), cfg)
            .unwrap();
    member.subscribe(&["t"]).unwrap();
    let start = std::time::Instant::now();
    while member.assignment().is_empty() {
        assert!(
            start.elapsed() < DEADLINE,
            "the member never got its assignment"
        );
        member.poll(std::time::Duration::from_millis(100)).unwrap();
    }

    // ListGroups v5: state and type filters, case-insensitive as Kafka's.
    let list = |states: &[&str], types: &[&str]| -> BTreeSet<String> {
        let mut req = kafka_protocol::messages::ListGroupsRequest::default();
        req.states_filter = states
            .iter()
            .map(|s| StrBytes::from_string(s.to_string()))
            .collect();
        req.types_filter = types
            .iter()
            .map(|s| StrBytes::from_string(s.to_string()))
            .collect();
        let r: kafka_protocol::messages::ListGroupsResponse =
            call(&kafka, ApiKey::ListGroups, 5, &req);
        assert_eq!(r.error_code, 0);
        r.groups
            .iter()
            .inspect(|g| assert_eq!(g.group_type.as_str(), "classic"))
            .map(|g| g.group_id.0.to_string())
            .collect()
    };
    let all: BTreeSet<String> = ["busy", "gone", "kept"].map(String::from).into();
    assert_eq!(list(&[], &[]), all);
    assert_eq!(list(&[], &["Classic"]), all);
    assert!(list(&[], &["consumer"]).is_empty());
    assert_eq!(list(&["stable"], &[]), BTreeSet::from(["busy".to_string()]));
    assert_eq!(
        list(&["Empty"], &[]),
        BTreeSet::from(["gone".to_string(), "kept".to_string()])
    );

    let deleted = outcomes(&admin_py(&[
        "delete-groups",
        &kafka,
        "gone",
        "busy",
        "never",
    ]));
    assert_eq!(deleted["gone"], None);
    assert_eq!(deleted["busy"], Some(68), "NON_EMPTY_GROUP");
    assert_eq!(deleted["never"], Some(69), "GROUP_ID_NOT_FOUND");
    assert!(committed(&mut c, "gone").is_empty());

    let mut req = kafka_protocol::messages::OffsetDeleteRequest::default();
    req.group_id = kafka_protocol::messages::GroupId(StrBytes::from_static_str("busy"));
    for topic in ["t", "other"] {
        let mut t =
            kafka_protocol::messages::offset_delete_request::OffsetDeleteRequestTopic::default();
        t.name = name(topic);
        let mut p =
            kafka_protocol::messages::offset_delete_request::OffsetDeleteRequestPartition::default(
            );
        p.partition_index = 0;
        t.partitions.push(p);
        req.topics.push(t);
    }
    let at = c.find_coordinator("busy").unwrap().to_string();
    let port: u16 = at.rsplit(':').next().unwrap().parse().unwrap();
    let kafka_port: u16 = kafka.rsplit(':').next().unwrap().parse().unwrap();
    let native_port: u16 = b.bootstrap().rsplit(':').next().unwrap().parse().unwrap();
    let coordinator = format!("127.0.0.1:{}", kafka_port + (port - native_port));
    let r: kafka_protocol::messages::OffsetDeleteResponse =
        call(&coordinator, ApiKey::OffsetDelete, 0, &req);
    assert_eq!(r.error_code, 0);
    let codes: Vec<i16> = r
        .topics
        .iter()
        .map(|t| t.partitions[0].error_code)
        .collect();
    assert_eq!(
        codes,
        vec![86, 0],
        "GROUP_SUBSCRIBED_TO_TOPIC for t, removed for other"
    );
    assert_eq!(committed(&mut c, "busy"), vec![("t".to_string(), 1)]);
    drop(member);

    b.restart();
    let mut c = b.client();
    assert!(
        committed(&mut c, "gone").is_empty(),
        "the tombstones replay"
    );
    assert_eq!(committed(&mut c, "busy"), vec![("t".to_string(), 1)]);
    assert_eq!(committed(&mut c, "kept"), vec![("t".to_string(), 7)]);
}
