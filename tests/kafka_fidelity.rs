//! Record fidelity on the Kafka listener, checked on the wire with raw requests: what a fetch
//! inside a stored batch returns, and records (null values, empty values, duplicate and null
//! headers) read back exactly as written through either protocol.

use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::{ApiKey, FetchResponse, TopicName};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::{BatchDecodeInfo, RecordBatchDecoder};
use rill::client::{Acks, ClientConfig, Producer, ProducerConfig, ProducerRecord};
use rill_testkit::TestBroker;

use rill_testkit::kafka_call as call;

/// The raw `records` bytes of one partition fetched from `offset` (Fetch v12, by name).
fn fetch_records(addr: &str, topic: &str, partition: i32, offset: i64) -> Bytes {
    let req = rill_testkit::kafka_fetch_request(topic, partition, offset, -1);
    let r: FetchResponse = call(addr, ApiKey::Fetch, 12, &req);
    let pd = &r.responses[0].partitions[0];
    assert_eq!(pd.error_code, 0, "fetch {topic}-{partition} at {offset}");
    pd.records.clone().unwrap_or_default()
}

/// The batch headers (offsets, counts, CRCs checked by kafka-protocol) of fetched records.
fn batches(records: &Bytes) -> Vec<BatchDecodeInfo> {
    RecordBatchDecoder::decode_batch_info(&mut records.clone()).expect("valid record batches")
}

/// A producer whose batches close only at `flush`: each call of `produce_batch` stores one
/// rill batch.
fn batch_producer(b: &TestBroker) -> Producer {
    Producer::new(
        ClientConfig::new(b.bootstrap()),
        ProducerConfig {
            acks: Acks::All,
            linger: Duration::from_secs(3600),
            batch_bytes: 8 << 20,
            ..ProducerConfig::default()
        },
    )
    .unwrap()
}

fn produce_batch(p: &Producer, topic: &str, first: usize, count: usize) {
    let values: Vec<String> = (first..first + count).map(|i| format!("v{i}")).collect();
    let reports: Vec<_> = values
        .iter()
        .map(|v| {
            p.send(ProducerRecord::new(topic, v.as_bytes()).partition(0))
                .unwrap()
        })
        .collect();
    p.flush().unwrap();
    for r in reports {
        r.wait().unwrap();
    }
}

#[test]
fn a_fetch_inside_a_batch_returns_that_batch_whole_and_nothing_wholly_below_the_offset() {
    let b = TestBroker::start_kafka(1, &[]);
    b.client().create_topic("t", 1, 1, vec![]).unwrap();
    let p = batch_producer(&b);
    produce_batch(&p, "t", 0, 100);
    let kafka = b.kafka_bootstrap();

    // One stored batch of 100 records comes back as one RecordBatch, from anywhere inside it.
    for at in [0i64, 37, 99] {
        let records = fetch_records(&kafka, "t", 0, at);
        let got = batches(&records);
        assert_eq!(got.len(), 1, "fetch at {at}: {got:?}");
        assert_eq!(got[0].min_offset, 0);
        assert_eq!(got[0].record_count, 100);
        let decoded = RecordBatchDecoder::decode_all(&mut records.clone()).unwrap();
        let offsets: Vec<i64> = decoded[0].records.iter().map(|r| r.offset).collect();
        assert_eq!(offsets, (0..100).collect::<Vec<_>>());
        assert!(*offsets.last().unwrap() >= at);
    }

    // Two more batches: a fetch inside the second skips the first, which ends below it.
    produce_batch(&p, "t", 100, 100);
    produce_batch(&p, "t", 200, 100);
    for (at, want) in [
        (37i64, vec![0i64, 100, 200]),
        (137, vec![100, 200]),
        (200, vec![200]),
    ] {
        let got = batches(&fetch_records(&kafka, "t", 0, at));
        let bases: Vec<i64> = got.iter().map(|b| b.min_offset).collect();
        assert_eq!(bases, want, "fetch at {at}");
        for b in &got {
            assert_eq!(b.record_count, 100);
            let last = b.min_offset + i64::from(b.record_count) - 1;
            assert!(last >= at, "fetch at {at}: {b:?}");
        }
    }
    // At the log end: nothing.
    assert!(fetch_records(&kafka, "t", 0, 300).is_empty());
}

#[test]
fn null_and_empty_values_and_header_values_stay_apart_through_both_protocols() {
    use kafka_protocol::indexmap::IndexMap;

    use kafka_protocol::messages::ProduceResponse;
    use kafka_protocol::records::Record;
    use rill::client::StartFrom;

    let b = TestBroker::start_kafka(1, &[]);
    b.client().create_topic("t", 1, 1, vec![]).unwrap();
    let kafka = b.kafka_bootstrap();

    // Native in, Kafka out: a tombstone, an empty value, a null and an empty header value.
    let p = batch_producer(&b);
    let headers = vec![("n".to_string(), None), ("e".to_string(), Some(Vec::new()))];
    let sent = [
        p.send(
            ProducerRecord::tombstone("t", b"k")
                .partition(0)
                .headers(&headers),
        )
        .unwrap(),
        p.send(ProducerRecord::new("t", b"").key(b"k").partition(0))
            .unwrap(),
    ];
    p.flush().unwrap();
    for r in sent {
        r.wait().unwrap();
    }
    let sets = RecordBatchDecoder::decode_all(&mut fetch_records(&kafka, "t", 0, 0)).unwrap();
    let got: Vec<&Record> = sets.iter().flat_map(|s| &s.records).collect();
    assert_eq!(got.len(), 2);
    assert_eq!(got[0].value, None, "a tombstone reads as null");
    assert_eq!(
        got[1].value.as_deref(),
        Some(&b""[..]),
        "an empty value reads as empty"
    );
    let h: Vec<(&str, Option<&[u8]>)> = got[0]
        .headers
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_deref()))
        .collect();
    assert_eq!(h, vec![("n", None), ("e", Some(&b""[..]))]);

    // Kafka in, native out.
    let record = |offset: i64, value: Option<&'static [u8]>, header: Option<&'static [u8]>| {
        let mut headers = IndexMap::new();
        headers.insert(
            StrBytes::from_static_str("h"),
            header.map(Bytes::from_static),
        );
        let mut r = rill_testkit::kafka_record(
            offset,
            Some(Bytes::from_static(b"k")),
            value.map(Bytes::from_static),
        );
        r.headers = headers;
        r
    };
    let records = [record(0, None, Some(b"")), record(1, Some(b""), None)];
    let req = rill_testkit::kafka_produce_request("t", 0, &records, 10_000);
    let r: ProduceResponse = call(&kafka, ApiKey::Produce, 9, &req);
    let pr = &r.responses[0].partition_responses[0];
    assert_eq!(pr.error_code, 0, "{:?}", pr.error_message);
    assert_eq!(pr.base_offset, 2);
    let native = rill_testkit::consume_exactly(&b, "t", StartFrom::Offset(2), 2);
    assert_eq!(native[0].value, None);
    assert_eq!(native[0].headers, vec![("h".to_string(), Some(Vec::new()))]);
    assert_eq!(native[1].value, Some(Vec::new()));
    assert_eq!(native[1].headers, vec![("h".to_string(), None)]);
}

/// One line a client script printed: a record it read in some phase.
#[derive(Debug, serde::Deserialize)]
struct ClientRead {
    phase: String,
    partition: u32,
    offset: u64,
    key: Option<String>,
    value: Option<String>,
    headers: Vec<(String, Option<String>)>,
}

/// What record `i` of a script's produce is (the scripts' docs say the same).
type Expected = (String, Option<String>, Vec<(String, Option<String>)>);

/// The headers record `i` gets (or is read back with), by client.
type HeadersOf = fn(u64) -> Vec<(&'static str, Option<String>)>;

fn expected_record(i: u64, headers: HeadersOf) -> Expected {
    let value = match i % 5 {
        0 => None,
        1 => Some(String::new()),
        _ => Some(format!("v{i}")),
    };
    let headers = if i % 4 == 3 {
        Vec::new()
    } else {
        headers(i)
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect()
    };
    (format!("k{}", i % 7), value, headers)
}

/// kafka-python sends headers as the list given: repeated names interleaved (it takes no
/// null header value).
fn kafka_python_headers(i: u64) -> Vec<(&'static str, Option<String>)> {
    let s = |v: &str| Some(v.to_string());
    vec![
        ("a", s("1")),
        ("a", s("2")),
        ("b", s("x")),
        ("a", Some(i.to_string())),
        ("e", s("")),
    ]
}

/// kafkajs sends headers from an object: a name's values together (it takes no null header
/// value either).
fn kafkajs_headers(i: u64) -> Vec<(&'static str, Option<String>)> {
    let s = |v: &str| Some(v.to_string());
    vec![
        ("a", s("1")),
        ("a", s("2")),
        ("a", Some(i.to_string())),
        ("b", s("x")),
        ("e", s("")),
    ]
}

/// What the test produces natively for the clients to read: repeated names interleaved, a
/// null and an empty header value.
fn native_headers(i: u64) -> Vec<(&'static str, Option<String>)> {
    let s = |v: &str| Some(v.to_string());
    vec![
        ("a", s("1")),
        ("a", s("2")),
        ("b", s("x")),
        ("a", Some(i.to_string())),
        ("n", None),
        ("e", s("")),
    ]
}

/// The native records as kafkajs hands them back: an object, a repeated name's values in one
/// array at the name's first place.
fn native_headers_grouped(i: u64) -> Vec<(&'static str, Option<String>)> {
    let s = |v: &str| Some(v.to_string());
    vec![
        ("a", s("1")),
        ("a", s("2")),
        ("a", Some(i.to_string())),
        ("b", s("x")),
        ("n", None),
        ("e", s("")),
    ]
}

/// Produces records 0..20 of `native_headers` to partition 0 of `topic` with rill's client.
fn produce_native(b: &TestBroker, topic: &str) {
    let p = batch_producer(b);
    let records: Vec<Expected> = (0..20)
        .map(|i| expected_record(i, native_headers))
        .collect();
    let headers: Vec<Vec<(String, Option<Vec<u8>>)>> = records
        .iter()
        .map(|(_, _, h)| {
            h.iter()
                .map(|(k, v)| (k.clone(), v.clone().map(String::into_bytes)))
                .collect()
        })
        .collect();
    let reports: Vec<_> = records
        .iter()
        .zip(&headers)
        .map(|((key, value, _), h)| {
            let mut r = ProducerRecord::tombstone(topic, key.as_bytes())
                .partition(0)
                .headers(h);
            r.value = value.as_deref().map(str::as_bytes);
            p.send(r).unwrap()
        })
        .collect();
    p.flush().unwrap();
    for r in reports {
        r.wait().unwrap();
    }
}

/// Runs a client script against a fresh broker and checks every record it read, in each
/// phase, and every record as stored (read natively), against what it produced.
fn client_matrix(
    program: &str,
    script: &str,
    install: &str,
    headers: HeadersOf,
    native_seen_as: HeadersOf,
) {
    let b = TestBroker::start_kafka(1, &[]);
    b.client().create_topic("fid", 1, 1, vec![]).unwrap();
    b.client().create_topic("native", 1, 1, vec![]).unwrap();
    produce_native(&b, "native");
    let kafka = b.kafka_bootstrap();
    let path = format!("{}/tests/kafka/{script}", env!("CARGO_MANIFEST_DIR"));
    let out = rill_testkit::external(program)
        .args([path.as_str(), &kafka, "fid", "g", "native"])
        .output()
        .unwrap_or_else(|e| panic!("cannot run {program} ({e}): {install}"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{script} failed ({install} if a module is missing): {stderr}"
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    let mut lines = stdout.lines();
    let version = lines.next().expect("a version line");
    eprintln!("{script}: {version}");
    let reads: Vec<ClientRead> = lines
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();

    let phase =
        |name: &str| -> Vec<&ClientRead> { reads.iter().filter(|r| r.phase == name).collect() };
    for (name, from) in [("group1", 0u64), ("group2", 37), ("seek", 50)] {
        let got = phase(name);
        let to = if name == "group1" { 37 } else { 100 };
        let offsets: Vec<u64> = got.iter().map(|r| r.offset).collect();
        assert_eq!(
            offsets,
            (from..to).collect::<Vec<_>>(),
            "{script} {name}: every record once, none below the position"
        );
        for r in got {
            assert_eq!(r.partition, 0);
            let want = expected_record(r.offset, headers);
            assert_eq!(
                (
                    r.key.clone().unwrap_or_default(),
                    r.value.clone(),
                    r.headers.clone()
                ),
                want,
                "{script} {name} offset {}",
                r.offset
            );
        }
    }

    let offsets: Vec<u64> = phase("native").iter().map(|r| r.offset).collect();
    assert_eq!(offsets, (0..20).collect::<Vec<_>>(), "{script} native");
    for r in phase("native") {
        let want = expected_record(r.offset, native_seen_as);
        assert_eq!(
            (
                r.key.clone().unwrap_or_default(),
                r.value.clone(),
                r.headers.clone()
            ),
            want,
            "{script} reading native offset {}",
            r.offset
        );
    }

    // The produce was one batch, so the commit and the seek fell inside it.
    let stored = batches(&fetch_records(&kafka, "fid", 0, 50));
    assert_eq!(stored.len(), 1, "{stored:?}");
    assert_eq!((stored[0].min_offset, stored[0].record_count), (0, 100));

    // As stored, read natively: headers in the order sent, repeated names and nulls kept.
    let native = rill_testkit::consume_exactly(&b, "fid", rill::client::StartFrom::Beginning, 100);
    for r in &native {
        let text = |v: &Option<Vec<u8>>| v.as_ref().map(|v| String::from_utf8(v.clone()).unwrap());
        let got: Expected = (
            text(&r.key).unwrap_or_default(),
            text(&r.value),
            r.headers
                .iter()
                .map(|(k, v)| (k.clone(), text(v)))
                .collect(),
        );
        assert_eq!(
            got,
            expected_record(r.offset, headers),
            "native read of {}",
            r.offset
        );
    }
}

#[test]
fn kafka_python_keeps_every_record_offset_header_and_null() {
    client_matrix(
        "python3",
        "fidelity_kafka_python.py",
        "run .ci/run, or pip install kafka-python==3.0.12",
        kafka_python_headers,
        native_headers,
    );
}

#[test]
fn kafkajs_keeps_every_record_offset_header_and_null() {
    client_matrix(
        "node",
        "fidelity_kafkajs.js",
        "run .ci/run, or npm ci --prefix tests/kafka",
        kafkajs_headers,
        native_headers_grouped,
    );
}

#[test]
fn cli_headers_go_in_order_with_repeats_and_a_bare_name_is_a_null_value() {
    let b = TestBroker::start(1, &[]);
    b.client().create_topic("h", 1, 1, vec![]).unwrap();
    let out = b.cli(
        &[
            "produce", "h", "--header", "a=1", "--header", "b=x", "--header", "a=2", "--header",
            "n", "--header", "e=",
        ],
        Some("one\n"),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got = rill_testkit::consume_exactly(&b, "h", rill::client::StartFrom::Beginning, 1);
    let s = |v: &str| Some(v.as_bytes().to_vec());
    assert_eq!(
        got[0].headers,
        vec![
            ("a".to_string(), s("1")),
            ("b".to_string(), s("x")),
            ("a".to_string(), s("2")),
            ("n".to_string(), None),
            ("e".to_string(), s("")),
        ]
    );
    assert_eq!(got[0].value.as_deref(), Some(&b"one"[..]));
}

/// OffsetCommit at `version` of (partition, offset, committed leader epoch) for topic t.
fn commit_offsets(addr: &str, version: i16, group: &str, parts: &[(i32, i64, i32)]) {
    use kafka_protocol::messages::offset_commit_request::{
        OffsetCommitRequestPartition, OffsetCommitRequestTopic,
    };
    use kafka_protocol::messages::{GroupId, OffsetCommitRequest, OffsetCommitResponse};
    let mut t = OffsetCommitRequestTopic::default();
    t.name = TopicName(StrBytes::from_static_str("t"));
    for &(partition, offset, epoch) in parts {
        let mut p = OffsetCommitRequestPartition::default();
        p.partition_index = partition;
        p.committed_offset = offset;
        p.committed_leader_epoch = epoch;
        t.partitions.push(p);
    }
    let mut req = OffsetCommitRequest::default();
    req.group_id = GroupId(StrBytes::from_string(group.to_string()));
    req.generation_id_or_member_epoch = -1;
    req.topics = vec![t];
    let r: OffsetCommitResponse = call(addr, ApiKey::OffsetCommit, version, &req);
    for p in &r.topics[0].partitions {
        assert_eq!(p.error_code, 0, "commit v{version} {p:?}");
    }
}

/// OffsetFetch (v5..v7 shape) of topic t's partitions: (partition, offset, leader epoch).
fn fetch_offsets(addr: &str, version: i16, group: &str, parts: &[i32]) -> Vec<(i32, i64, i32)> {
    use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
    use kafka_protocol::messages::{GroupId, OffsetFetchRequest, OffsetFetchResponse};
    let mut t = OffsetFetchRequestTopic::default();
    t.name = TopicName(StrBytes::from_static_str("t"));
    t.partition_indexes = parts.to_vec();
    let mut req = OffsetFetchRequest::default();
    req.group_id = GroupId(StrBytes::from_string(group.to_string()));
    req.topics = Some(vec![t]);
    let r: OffsetFetchResponse = call(addr, ApiKey::OffsetFetch, version, &req);
    assert_eq!(r.error_code, 0);
    r.topics[0]
        .partitions
        .iter()
        .map(|p| {
            assert_eq!(p.error_code, 0);
            (
                p.partition_index,
                p.committed_offset,
                p.committed_leader_epoch,
            )
        })
        .collect()
}

#[test]
fn offset_commit_keeps_the_committed_leader_epoch_across_a_restart() {
    let mut b = TestBroker::start_kafka(1, &[]);
    b.client().create_topic("t", 3, 1, vec![]).unwrap();
    let kafka = b.kafka_bootstrap();
    // v8 carries the epoch; -1 means the client did not know it; v5 has no epoch field.
    commit_offsets(&kafka, 8, "g", &[(0, 10, 5), (1, 20, -1)]);
    commit_offsets(&kafka, 5, "g", &[(2, 30, 9)]);
    let want = vec![(0, 10, 5), (1, 20, -1), (2, 30, -1)];
    assert_eq!(fetch_offsets(&kafka, 7, "g", &[0, 1, 2]), want);
    // A later commit without an epoch replaces the epoch too.
    commit_offsets(&kafka, 8, "h", &[(0, 1, 3)]);
    commit_offsets(&kafka, 8, "h", &[(0, 2, -1)]);
    assert_eq!(fetch_offsets(&kafka, 7, "h", &[0]), vec![(0, 2, -1)]);
    // Read back from __consumer_offsets after a crash.
    b.restart();
    let kafka = b.kafka_bootstrap();
    assert_eq!(fetch_offsets(&kafka, 7, "g", &[0, 1, 2]), want);
    // OffsetFetch v4 has no epoch field: the offsets alone.
    let v4: Vec<i64> = fetch_offsets(&kafka, 4, "g", &[0, 1, 2])
        .iter()
        .map(|p| p.1)
        .collect();
    assert_eq!(v4, vec![10, 20, 30]);
}

#[test]
fn authorized_operations_are_every_supported_one_when_asked_and_absent_otherwise() {
    use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
    use kafka_protocol::messages::{
        DescribeGroupsRequest, DescribeGroupsResponse, GroupId, MetadataRequest, MetadataResponse,
    };
    // Kafka without an authorizer: every operation of the resource type (READ 3, WRITE 4,
    // CREATE 5, DELETE 6, ALTER 7, DESCRIBE 8, CLUSTER_ACTION 9, DESCRIBE_CONFIGS 10,
    // ALTER_CONFIGS 11, IDEMPOTENT_WRITE 12).
    let bits = |ops: &[i32]| ops.iter().map(|op| 1 << op).sum::<i32>();
    let topic_ops = bits(&[3, 4, 5, 6, 7, 8, 10, 11]);
    let cluster_ops = bits(&[5, 7, 8, 9, 10, 11, 12]);
    let group_ops = bits(&[3, 6, 8]);

    let b = TestBroker::start_kafka(1, &[]);
    b.client().create_topic("t", 1, 1, vec![]).unwrap();
    let kafka = b.kafka_bootstrap();
    let metadata = |version: i16, asked: bool| -> MetadataResponse {
        let mut t = MetadataRequestTopic::default();
        t.name = Some(TopicName(StrBytes::from_static_str("t")));
        let mut req = MetadataRequest::default();
        req.topics = Some(vec![t]);
        req.include_topic_authorized_operations = asked;
        req.include_cluster_authorized_operations = asked && version <= 10;
        call(&kafka, ApiKey::Metadata, version, &req)
    };
    for version in [8i16, 10, 12] {
        let r = metadata(version, true);
        assert_eq!(r.topics[0].error_code, 0);
        assert_eq!(
            r.topics[0].topic_authorized_operations, topic_ops,
            "v{version}"
        );
        if version <= 10 {
            assert_eq!(r.cluster_authorized_operations, cluster_ops, "v{version}");
        }
        let r = metadata(version, false);
        assert_eq!(
            r.topics[0].topic_authorized_operations,
            i32::MIN,
            "v{version}"
        );
        assert_eq!(r.cluster_authorized_operations, i32::MIN, "v{version}");
    }

    commit_offsets(&kafka, 8, "g", &[(0, 1, -1)]);
    for asked in [true, false] {
        let mut req = DescribeGroupsRequest::default();
        req.groups = vec![GroupId(StrBytes::from_static_str("g"))];
        req.include_authorized_operations = asked;
        let r: DescribeGroupsResponse = call(&kafka, ApiKey::DescribeGroups, 5, &req);
        assert_eq!(r.groups[0].error_code, 0);
        let want = if asked { group_ops } else { i32::MIN };
        assert_eq!(r.groups[0].authorized_operations, want, "asked: {asked}");
    }
}

/// ListOffsets (Kafka) of partition 0 of `topic` at a special timestamp: (offset, timestamp).
fn list_offset(addr: &str, version: i16, topic: &str, timestamp: i64) -> (i64, i64) {
    use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
    use kafka_protocol::messages::{ListOffsetsRequest, ListOffsetsResponse};
    let mut p = ListOffsetsPartition::default();
    p.partition_index = 0;
    p.timestamp = timestamp;
    let mut t = ListOffsetsTopic::default();
    t.name = TopicName(StrBytes::from_string(topic.to_string()));
    t.partitions = vec![p];
    let mut req = ListOffsetsRequest::default();
    req.replica_id = (-1).into();
    req.topics = vec![t];
    let r: ListOffsetsResponse = call(addr, ApiKey::ListOffsets, version, &req);
    let pr = &r.topics[0].partitions[0];
    assert_eq!(pr.error_code, 0, "v{version} at {timestamp}");
    (pr.offset, pr.timestamp)
}

#[test]
fn max_timestamp_is_the_record_with_the_largest_create_time_across_segments_and_restarts() {
    let mut b = TestBroker::start_kafka(1, &[]);
    let mut c = b.client();
    let small = vec![("segment.bytes".to_string(), "65536".to_string())];
    c.create_topic("t", 1, 1, small).unwrap();
    c.create_topic("empty", 1, 1, vec![]).unwrap();
    let kafka = b.kafka_bootstrap();
    // A partition without records has no max: -1, -1 (as Kafka answers).
    assert_eq!(list_offset(&kafka, 7, "empty", -3), (-1, -1));

    // 400 records of 1 KiB (several segments), create times rising except two records in the
    // first segment and one in the last holding the largest: the first of them is the answer.
    let base = 1_700_000_000_000i64;
    let top = base + 10_000_000;
    let p = rill_testkit::producer(&b, 16 << 10);
    let value = vec![b'v'; 1024];
    let reports: Vec<_> = (0..400i64)
        .map(|i| {
            let ts = if [37, 38, 390].contains(&i) {
                top
            } else {
                base + i
            };
            p.send(
                ProducerRecord::new("t", value.as_slice())
                    .partition(0)
                    .timestamp(ts),
            )
            .unwrap()
        })
        .collect();
    p.flush().unwrap();
    for r in reports {
        r.wait().unwrap();
    }
    let dir = rill_testkit::partition_dir(&b.data_dir(), "t", 0);
    let segments = rill_testkit::segment_files(&dir).len();
    assert!(segments >= 4, "{segments} segments");
    let check = |kafka: &str, c: &mut rill::client::Client| {
        for version in [7i16, 8] {
            assert_eq!(list_offset(kafka, version, "t", -3), (37, top));
        }
        // Earliest local (v8) is the earliest: every segment is local.
        assert_eq!(list_offset(kafka, 8, "t", -4).0, 0);
        assert_eq!(
            c.list_offset("t", 0, rill::protocol::messages::MAX_TIMESTAMP)
                .unwrap(),
            Some(37),
            "native"
        );
    };
    check(&kafka, &mut c);
    // Closed segments reopen from their index trailers (max timestamp kept there).
    b.restart();
    let kafka = b.kafka_bootstrap();
    check(&kafka, &mut b.client());
}

/// Kafka batches large enough that the broker builds their rill batches in its frame arena
/// (1-2 MiB each, records of many sizes) are stored and served exactly, through both
/// protocols, from memory and from disk after a restart in the middle; with and without the
/// arena's memory backed at start.
#[test]
fn large_kafka_batches_are_stored_whole_and_read_back_exactly_across_a_restart() {
    use kafka_protocol::messages::ProduceResponse;
    for flags in [
        &[][..],
        &["--tail-cache-pre-touch", "--tail-cache-bytes", "67108864"][..],
    ] {
        let mut b = TestBroker::start_kafka(1, flags);
        b.client().create_topic("big", 1, 1, vec![]).unwrap();
        // A value's size and bytes from its offset: 1 byte to 4 KiB.
        let value = |o: u64| {
            let len = 1 + (o.wrapping_mul(2_654_435_761) % 4096) as usize;
            let mut v = format!("v{o}-").into_bytes();
            v.resize(len.max(v.len()), b'a' + (o % 26) as u8);
            v
        };
        let mut next = 0u64;
        for round in 0..6 {
            if round == 3 {
                b.restart();
            }
            let count = 600 + round * 150;
            let records: Vec<_> = (next..next + count)
                .map(|o| rill_testkit::kafka_record(o as i64, None, Some(Bytes::from(value(o)))))
                .collect();
            let req = rill_testkit::kafka_produce_request("big", 0, &records, 10_000);
            let r: ProduceResponse = call(&b.kafka_bootstrap(), ApiKey::Produce, 9, &req);
            let pr = &r.responses[0].partition_responses[0];
            assert_eq!(
                (pr.error_code, pr.base_offset),
                (0, next as i64),
                "{flags:?} round {round}"
            );
            next += count;
        }
        // Native: every record, in order.
        let got = rill_testkit::consume_exactly(
            &b,
            "big",
            rill::client::StartFrom::Beginning,
            next as usize,
        );
        for (i, r) in got.iter().enumerate() {
            assert_eq!(r.offset, i as u64, "{flags:?}");
            assert_eq!(
                r.value.as_deref(),
                Some(&value(i as u64)[..]),
                "{flags:?} offset {i}"
            );
        }
        // Kafka: batch by batch, the same records.
        let mut at = 0u64;
        while at < next {
            let records = fetch_records(&b.kafka_bootstrap(), "big", 0, at as i64);
            let sets = RecordBatchDecoder::decode_all(&mut records.clone()).unwrap();
            assert!(!sets.is_empty(), "{flags:?}: nothing at {at}");
            for r in sets.iter().flat_map(|s| &s.records) {
                let o = r.offset as u64;
                assert_eq!(
                    r.value.as_deref(),
                    Some(&value(o)[..]),
                    "{flags:?} offset {o}"
                );
                at = at.max(o + 1);
            }
        }
        assert_eq!(at, next);
    }
}
