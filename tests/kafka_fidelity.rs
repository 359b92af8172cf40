//! Record fidelity on the Kafka listener, checked on the wire with raw requests: what a fetch
//! inside a stored batch returns, and records (null values, empty values, duplicate and null
//! headers) read back exactly as written through either protocol.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::{
    ApiKey, FetchRequest, FetchResponse, RequestHeader, ResponseHeader, TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use kafka_protocol::records::{BatchDecodeInfo, RecordBatchDecoder};
use rill::client::{Acks, ClientConfig, Producer, ProducerConfig, ProducerRecord};
use rill_testkit::{TestBroker, DEADLINE};

/// One raw Kafka request on its own connection.
fn call<Req: Encodable, Resp: Decodable>(addr: &str, api: ApiKey, version: i16, req: &Req) -> Resp {
    let mut header = RequestHeader::default();
    header.request_api_key = api as i16;
    header.request_api_version = version;
    header.correlation_id = 7;
    header.client_id = Some(StrBytes::from_static_str("kafka_fidelity-test"));
    let mut body = BytesMut::new();
    header
        .encode(&mut body, api.request_header_version(version))
        .unwrap();
    req.encode(&mut body, version).unwrap();
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(DEADLINE)).unwrap();
    s.write_all(&(body.len() as i32).to_be_bytes()).unwrap();
    s.write_all(&body).unwrap();
    let mut len = [0u8; 4];
    s.read_exact(&mut len)
        .unwrap_or_else(|e| panic!("{api:?} v{version}: no answer ({e})"));
    let mut resp = vec![0u8; i32::from_be_bytes(len) as usize];
    s.read_exact(&mut resp).unwrap();
    let mut resp = Bytes::from(resp);
    let h = ResponseHeader::decode(&mut resp, api.response_header_version(version)).unwrap();
    assert_eq!(h.correlation_id, 7);
    let r = Resp::decode(&mut resp, version).unwrap();
    assert_eq!(
        resp.remaining(),
        0,
        "{api:?} v{version}: bytes after the body"
    );
    r
}

/// The raw `records` bytes of one partition fetched from `offset` (Fetch v12, by name).
fn fetch_records(addr: &str, topic: &str, partition: i32, offset: i64) -> Bytes {
    let mut p = FetchPartition::default();
    p.partition = partition;
    p.fetch_offset = offset;
    p.current_leader_epoch = -1;
    p.last_fetched_epoch = -1;
    p.log_start_offset = -1;
    p.partition_max_bytes = 1 << 20;
    let mut t = FetchTopic::default();
    t.topic = TopicName(StrBytes::from_string(topic.to_string()));
    t.partitions = vec![p];
    let mut req = FetchRequest::default();
    req.replica_id = (-1).into();
    req.max_wait_ms = 0;
    req.min_bytes = 1;
    req.max_bytes = 16 << 20;
    req.session_epoch = -1;
    req.topics = vec![t];
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
