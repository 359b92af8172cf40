//! Leader epochs on the Kafka listener, with raw requests on the wire (issue 14): Kafka's
//! OffsetForLeaderEpoch (API 23), `current_leader_epoch` checked in Fetch and ListOffsets, and
//! served batches carrying the epoch they were appended in, the one Metadata names. A stale
//! (fenced) epoch needs a leader change; the codec's unit test in src/kafka/leader_epochs.rs
//! moves a partition to a new epoch by hand and covers it.

use bytes::Bytes;
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::offset_for_leader_epoch_request::{
    OffsetForLeaderPartition, OffsetForLeaderTopic,
};
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, ApiVersionsResponse, FetchResponse, ListOffsetsRequest,
    ListOffsetsResponse, MetadataRequest, MetadataResponse, OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::RecordBatchDecoder;
use rill::protocol::ErrorCode;
use rill_testkit::kafka_call as call;
use rill_testkit::{produce_values, TestBroker};

fn name(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.to_string()))
}

/// (error, leader epoch, end offset) of one OffsetForLeaderEpoch question.
fn ask(
    addr: &str,
    version: i16,
    (topic, partition): (&str, i32),
    current: i32,
    epoch: i32,
) -> (ErrorCode, i32, i64) {
    let mut q = OffsetForLeaderPartition::default();
    q.partition = partition;
    q.current_leader_epoch = current;
    q.leader_epoch = epoch;
    let mut t = OffsetForLeaderTopic::default();
    t.topic = name(topic);
    t.partitions = vec![q];
    let mut req = OffsetForLeaderEpochRequest::default();
    req.replica_id = (-1).into();
    req.topics = vec![t];
    let r: OffsetForLeaderEpochResponse = call(addr, ApiKey::OffsetForLeaderEpoch, version, &req);
    assert_eq!(r.topics[0].topic, name(topic));
    let e = &r.topics[0].partitions[0];
    assert_eq!(e.partition, partition);
    (
        ErrorCode::from_code(e.error_code),
        e.leader_epoch,
        e.end_offset,
    )
}

/// (error, records) of a Fetch v12 of `topic`-0 from offset 0.
fn fetch(addr: &str, topic: &str, current: i32) -> (ErrorCode, Bytes) {
    let req = rill_testkit::kafka_fetch_request(topic, 0, 0, current);
    let r: FetchResponse = call(addr, ApiKey::Fetch, 12, &req);
    let pd = &r.responses[0].partitions[0];
    (
        ErrorCode::from_code(pd.error_code),
        pd.records.clone().unwrap_or_default(),
    )
}

/// (error, offset, its leader epoch) of a ListOffsets v7 of `topic`-0's log end.
fn latest(addr: &str, topic: &str, current: i32) -> (ErrorCode, i64, i32) {
    let mut p = ListOffsetsPartition::default();
    p.partition_index = 0;
    p.current_leader_epoch = current;
    p.timestamp = -1;
    let mut t = ListOffsetsTopic::default();
    t.name = name(topic);
    t.partitions = vec![p];
    let mut req = ListOffsetsRequest::default();
    req.replica_id = (-1).into();
    req.topics = vec![t];
    let r: ListOffsetsResponse = call(addr, ApiKey::ListOffsets, 7, &req);
    let pr = &r.topics[0].partitions[0];
    (
        ErrorCode::from_code(pr.error_code),
        pr.offset,
        pr.leader_epoch,
    )
}

#[test]
fn offset_for_leader_epoch_and_current_leader_epoch_on_the_kafka_listener() {
    let b = TestBroker::start_kafka(1, &[]);
    b.client().create_topic("t", 1, 1, vec![]).unwrap();
    produce_values(&b, "t", 0, (0..300).map(|i| format!("v{i}")));
    let kafka = b.kafka_bootstrap();

    let versions: ApiVersionsResponse = call(
        &kafka,
        ApiKey::ApiVersions,
        3,
        &ApiVersionsRequest::default(),
    );
    let api = versions
        .api_keys
        .iter()
        .find(|k| k.api_key == ApiKey::OffsetForLeaderEpoch as i16)
        .expect("OffsetForLeaderEpoch advertised");
    assert_eq!((api.min_version, api.max_version), (2, 4));

    // The epoch Metadata names for t-0.
    let mut mt = MetadataRequestTopic::default();
    mt.name = Some(name("t"));
    let mut mreq = MetadataRequest::default();
    mreq.topics = Some(vec![mt]);
    let md: MetadataResponse = call(&kafka, ApiKey::Metadata, 12, &mreq);
    let epoch = md.topics[0].partitions[0].leader_epoch;
    assert!(epoch >= 0, "{epoch}");

    for v in 2..=4 {
        // The current epoch ends at the log end, asked with or without the current epoch.
        assert_eq!(
            ask(&kafka, v, ("t", 0), epoch, epoch),
            (ErrorCode::None, epoch, 300),
            "v{v}"
        );
        assert_eq!(
            ask(&kafka, v, ("t", 0), -1, epoch + 5),
            (ErrorCode::None, epoch, 300),
            "v{v}"
        );
        // A view of the leader newer than this broker's: not known here yet.
        assert_eq!(
            ask(&kafka, v, ("t", 0), epoch + 1, epoch),
            (ErrorCode::UnknownLeaderEpoch, -1, -1),
            "v{v}"
        );
        for unknown in [("t", 1), ("nope", 0)] {
            assert_eq!(
                ask(&kafka, v, unknown, epoch, epoch),
                (ErrorCode::UnknownTopicOrPartition, -1, -1),
                "v{v} {unknown:?}"
            );
        }
    }

    // Fetch and ListOffsets: a future epoch is refused, the current one or none is served.
    let (code, records) = fetch(&kafka, "t", epoch + 1);
    assert_eq!(code, ErrorCode::UnknownLeaderEpoch);
    assert!(records.is_empty());
    assert_eq!(
        latest(&kafka, "t", epoch + 1),
        (ErrorCode::UnknownLeaderEpoch, -1, -1)
    );
    for current in [epoch, -1] {
        assert_eq!(latest(&kafka, "t", current), (ErrorCode::None, 300, epoch));
        let (code, records) = fetch(&kafka, "t", current);
        assert_eq!(code, ErrorCode::None);
        let infos = RecordBatchDecoder::decode_batch_info(&mut records.clone()).expect("batches");
        assert!(!infos.is_empty());
        // Every served batch carries the leader epoch it was appended in: Metadata's.
        let sets = RecordBatchDecoder::decode_all(&mut records.clone()).expect("records");
        let served: Vec<i32> = sets
            .iter()
            .flat_map(|s| &s.records)
            .map(|r| r.partition_leader_epoch)
            .collect();
        assert_eq!(served.len(), 300);
        assert!(served.iter().all(|e| *e == epoch), "{served:?}");
    }
}
