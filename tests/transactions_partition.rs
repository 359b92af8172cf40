//! Transactions on the partition side, against real broker processes: transactional batches
//! of several producers interleaved with plain ones, ended by WriteTxnMarkers (native key 36)
//! commits and aborts, one left open. read_uncommitted sees every data record (never a
//! marker); read_committed sees the committed and plain ones only and stops at the open
//! transaction's first offset (the last stable offset), with the aborted transactions named;
//! the same after a SIGKILL and after a clean restart, through confluent-kafka and kcat too,
//! and on a follower elected leader. Bad markers and batches are refused with Kafka's codes,
//! nothing appended.

use std::io::Write;
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use rill::batch::control::{ControlKind, ControlRecord};
use rill::batch::{add_flags, BatchBuilder, BatchIter, FLAG_CONTROL, FLAG_TRANSACTIONAL};
use rill::client::{Client, ClientConfig, Consumer, ConsumerConfig, Isolation, StartFrom};
use rill::protocol::messages::{
    TxnMarker, TxnMarkerPartition, WriteTxnMarkersRequest, WriteTxnMarkersResponse,
};
use rill::protocol::{ApiKey, ErrorCode};
use rill_testkit::{
    create_topic_rf3, kafka_call, kafka_produce_request, wait_partition, TestBroker, TestCluster,
    DEADLINE, FAST_FENCING,
};

const TIMEOUT: Duration = Duration::from_secs(30);
const TS: i64 = 1_700_000_000_000;

fn build(id: i64, epoch: i16, seq: i32, values: &[&str], transactional: bool) -> Vec<u8> {
    let mut b = BatchBuilder::new().producer(id, epoch, seq);
    for v in values {
        b.push_record(TS, None, Some(v.as_bytes()), [], &[]);
    }
    let mut out = b.build().expect("batch");
    if transactional {
        add_flags(&mut out, FLAG_TRANSACTIONAL);
    }
    out.to_vec()
}

/// A transactional batch of producer `id`.
fn txn(id: i64, epoch: i16, seq: i32, value: &str) -> Vec<u8> {
    build(id, epoch, seq, &[value], true)
}

/// A batch without a producer id.
fn plain(value: &str) -> Vec<u8> {
    build(-1, -1, -1, &[value], false)
}

/// Produces one batch (acks=all); its base offset or the broker's error code.
fn send(c: &mut Client, topic: &str, b: &[u8]) -> Result<u64, ErrorCode> {
    match c.produce_raw(topic, 0, &[b], -1, TIMEOUT) {
        Ok(Some(r)) => Ok(r.base_offset as u64),
        Ok(None) => panic!("acks=all answers"),
        Err(e) => Err(e
            .code()
            .unwrap_or_else(|| panic!("not a broker error: {e}"))),
    }
}

/// WriteTxnMarkers of one marker to `topic`-0, sent to its leader's shard.
fn marker(
    c: &mut Client,
    topic: &str,
    id: i64,
    epoch: i16,
    kind: ControlKind,
    coordinator_epoch: i32,
) -> ErrorCode {
    let _ = c.refresh_metadata();
    let route = c.metadata().route(topic, 0).expect("a route");
    let req = WriteTxnMarkersRequest {
        markers: vec![TxnMarker {
            producer_id: id,
            producer_epoch: epoch,
            commit: kind == ControlKind::Commit,
            coordinator_epoch,
            partitions: vec![TxnMarkerPartition {
                topic: topic.to_string(),
                partition: 0,
            }],
        }],
    };
    let (resp, _): (WriteTxnMarkersResponse, _) = c
        .call(route.addr, ApiKey::WriteTxnMarkers, &req, &[])
        .expect("WriteTxnMarkers answered");
    assert_eq!(resp.markers.len(), 1);
    assert_eq!(resp.markers[0].producer_id, id);
    let p = &resp.markers[0].partitions[0];
    assert_eq!((p.topic.as_str(), p.partition), (topic, 0));
    ErrorCode::from_code(p.error_code)
}

fn log_end(c: &mut Client, topic: &str) -> u64 {
    c.list_offset(topic, 0, -1)
        .expect("list offsets")
        .expect("an end")
}

/// What a read_committed fetch from 0 answers: (last stable offset, aborted transactions as
/// (producer id, first offset), the offset after the last batch returned).
fn committed_view(c: &mut Client, topic: &str) -> (u64, Vec<(i64, u64)>, u64) {
    let (r, frame) = c
        .fetch_isolated(
            topic,
            0,
            0,
            Duration::ZERO,
            1,
            1 << 20,
            Isolation::ReadCommitted,
        )
        .expect("fetch v1");
    let mut end = 0;
    for b in BatchIter::new(frame.payload()) {
        end = b.expect("batch").header().next_offset();
    }
    let aborted = r
        .aborted
        .iter()
        .map(|a| (a.producer_id, a.first_offset))
        .collect();
    (r.last_stable_offset, aborted, end)
}

/// Every value the native consumer hands out at `isolation`, reading until its position
/// reaches `stop`.
fn consume(bootstrap: String, topic: &str, isolation: Isolation, stop: u64) -> Vec<String> {
    let cfg = ConsumerConfig {
        isolation,
        fetch_max_wait: Duration::from_millis(100),
        ..ConsumerConfig::default()
    };
    let mut c = Consumer::new(ClientConfig::new(bootstrap), cfg).expect("consumer");
    c.assign(topic, Some(vec![0]), StartFrom::Beginning)
        .expect("assign");
    let start = Instant::now();
    let mut out = Vec::new();
    loop {
        let records = c.poll(Duration::from_millis(200)).expect("poll");
        let n = records.count();
        out.extend(
            records
                .iter()
                .map(|r| String::from_utf8(r.value().expect("a value").to_vec()).unwrap()),
        );
        if n == 0 && c.position(topic, 0).is_some_and(|p| p >= stop) {
            return out;
        }
        assert!(
            start.elapsed() < DEADLINE,
            "{isolation:?}: position {:?} never reached {stop}; got {out:?}",
            c.position(topic, 0)
        );
    }
}

fn run(program: &str, args: &[&str]) -> Output {
    let child = rill_testkit::external(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| {
            panic!("cannot run {program} ({e}): run .ci/run, or install kcat (apt) and confluent-kafka (pip)")
        });
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{program} {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn lines(out: Output) -> Vec<String> {
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}

/// confluent-kafka's consumer at `isolation`, until its position reaches `stop`.
fn confluent(kafka: &str, topic: &str, isolation: &str, stop: u64) -> Vec<String> {
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/kafka/isolated_consume.py"
    );
    lines(run(
        "python3",
        &[script, kafka, topic, "0", isolation, &stop.to_string()],
    ))
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

#[test]
fn read_committed_sees_committed_and_plain_records_up_to_the_last_stable_offset() {
    let mut b = TestBroker::start_kafka(1, &[]);
    let mut c = b.client();
    c.create_topic("tx", 1, 1, vec![]).unwrap();
    let (a, _) = c.init_producer_id(None).unwrap();
    let (bb, _) = c.init_producer_id(None).unwrap();
    let (cc, _) = c.init_producer_id(None).unwrap();

    assert_eq!(send(&mut c, "tx", &plain("p0")), Ok(0));
    assert_eq!(send(&mut c, "tx", &txn(a, 0, 0, "a0")), Ok(1));
    assert_eq!(send(&mut c, "tx", &txn(bb, 0, 0, "b0")), Ok(2));
    assert_eq!(send(&mut c, "tx", &plain("p1")), Ok(3));
    assert_eq!(send(&mut c, "tx", &txn(cc, 0, 0, "c0")), Ok(4));
    assert_eq!(send(&mut c, "tx", &txn(a, 0, 1, "a1")), Ok(5));
    assert_eq!(send(&mut c, "tx", &txn(bb, 0, 1, "b1")), Ok(6));
    assert_eq!(
        marker(&mut c, "tx", a, 0, ControlKind::Commit, 0),
        ErrorCode::None
    );
    assert_eq!(
        marker(&mut c, "tx", bb, 0, ControlKind::Abort, 0),
        ErrorCode::None
    );
    assert_eq!(log_end(&mut c, "tx"), 9, "each marker takes an offset");
    assert_eq!(send(&mut c, "tx", &plain("p2")), Ok(9));

    // Bad input, each refused with Kafka's code and nothing appended. A marker of an older
    // producer epoch:
    let (d, d0) = c.init_producer_id(None).unwrap();
    let (d_again, d1) = c.init_producer_id(Some((d, d0))).unwrap();
    assert_eq!((d_again, d1), (d, d0 + 1));
    assert_eq!(send(&mut c, "tx", &txn(d, d1, 0, "d0")), Ok(10));
    assert_eq!(
        marker(&mut c, "tx", d, d0, ControlKind::Commit, 5),
        ErrorCode::InvalidProducerEpoch
    );
    assert_eq!(log_end(&mut c, "tx"), 11);
    assert_eq!(
        marker(&mut c, "tx", d, d1, ControlKind::Commit, 5),
        ErrorCode::None
    );
    assert_eq!(send(&mut c, "tx", &txn(d, d1, 1, "d1")), Ok(12));
    // A marker of an older coordinator:
    assert_eq!(
        marker(&mut c, "tx", d, d1, ControlKind::Abort, 4),
        ErrorCode::TransactionCoordinatorFenced
    );
    assert_eq!(log_end(&mut c, "tx"), 13);
    assert_eq!(
        marker(&mut c, "tx", d, d1, ControlKind::Abort, 5),
        ErrorCode::None
    );
    // A plain batch of a producer inside its open transaction:
    assert_eq!(
        send(&mut c, "tx", &build(cc, 0, 1, &["c-plain"], false)),
        Err(ErrorCode::InvalidTxnState)
    );
    // A control batch from a client, native or Kafka:
    let forged = ControlRecord {
        kind: ControlKind::Commit,
        coordinator_epoch: 9,
    }
    .batch(cc, 0, TS)
    .unwrap();
    assert_eq!(send(&mut c, "tx", &forged), Err(ErrorCode::InvalidRecord));
    let kafka = b.kafka_bootstrap();
    let kafka_marker = kafka_protocol::records::Record {
        transactional: true,
        control: true,
        producer_id: cc,
        producer_epoch: 0,
        key: Some(bytes::Bytes::from_static(&[0, 0, 0, 1])),
        value: Some(bytes::Bytes::from_static(&[0, 0, 0, 0, 0, 9])),
        sequence: -1,
        ..rill_testkit::kafka_record(0, None, None)
    };
    let resp: kafka_protocol::messages::ProduceResponse = kafka_call(
        &kafka,
        kafka_protocol::messages::ApiKey::Produce,
        9,
        &kafka_produce_request("tx", 0, &[kafka_marker], 30_000),
    );
    assert_eq!(
        resp.responses[0].partition_responses[0].error_code,
        ErrorCode::InvalidRecord.code()
    );
    // A transactional batch without a producer id:
    assert_eq!(
        send(&mut c, "tx", &build(-1, -1, -1, &["x"], true)),
        Err(ErrorCode::InvalidRecord)
    );
    assert_eq!(log_end(&mut c, "tx"), 14, "nothing appended");
    assert_eq!(send(&mut c, "tx", &plain("p3")), Ok(14));

    // Producer cc's transaction (from 4) is open: the last stable offset is there.
    let all_data = strings(&[
        "p0", "a0", "b0", "p1", "c0", "a1", "b1", "p2", "d0", "d1", "p3",
    ]);
    let committed_so_far = strings(&["p0", "a0", "p1"]);
    let check_open = |b: &TestBroker, when: &str| {
        let mut c = b.client();
        assert_eq!(
            committed_view(&mut c, "tx"),
            (4, vec![(bb, 2)], 4),
            "{when}: LSO 4, b's abort named, data up to 4 only"
        );
        assert_eq!(log_end(&mut c, "tx"), 15, "{when}");
        assert_eq!(
            consume(b.bootstrap(), "tx", Isolation::ReadUncommitted, 15),
            all_data,
            "{when}: read_uncommitted: every data record, no marker"
        );
        assert_eq!(
            consume(b.bootstrap(), "tx", Isolation::ReadCommitted, 4),
            committed_so_far,
            "{when}: read_committed"
        );
        // read_committed's end is the LSO: a consumer starting there misses nothing of the
        // open transaction.
        let cfg = ConsumerConfig {
            isolation: Isolation::ReadCommitted,
            ..ConsumerConfig::default()
        };
        let mut end = Consumer::new(ClientConfig::new(b.bootstrap()), cfg).unwrap();
        end.assign("tx", Some(vec![0]), StartFrom::End).unwrap();
        assert_eq!(end.position("tx", 0), Some(4), "{when}");
        // Kafka's ListOffsets read_committed answers the LSO as the latest offset.
        let mut lp =
            kafka_protocol::messages::list_offsets_request::ListOffsetsPartition::default();
        lp.partition_index = 0;
        lp.timestamp = -1;
        let mut lt = kafka_protocol::messages::list_offsets_request::ListOffsetsTopic::default();
        lt.name = kafka_protocol::messages::TopicName(
            kafka_protocol::protocol::StrBytes::from_static_str("tx"),
        );
        lt.partitions = vec![lp];
        let mut req = kafka_protocol::messages::ListOffsetsRequest::default();
        req.replica_id = (-1).into();
        req.isolation_level = 1;
        req.topics = vec![lt];
        let resp: kafka_protocol::messages::ListOffsetsResponse = kafka_call(
            &b.kafka_bootstrap(),
            kafka_protocol::messages::ApiKey::ListOffsets,
            5,
            &req,
        );
        assert_eq!(resp.topics[0].partitions[0].offset, 4, "{when}");
        // Kafka's Fetch read_committed: the LSO, the aborted list, no batch from the LSO on.
        let mut req = rill_testkit::kafka_fetch_request("tx", 0, 0, -1);
        req.isolation_level = 1;
        let resp: kafka_protocol::messages::FetchResponse = kafka_call(
            &b.kafka_bootstrap(),
            kafka_protocol::messages::ApiKey::Fetch,
            11,
            &req,
        );
        let pd = &resp.responses[0].partitions[0];
        assert_eq!(
            (pd.error_code, pd.high_watermark, pd.last_stable_offset),
            (0, 15, 4)
        );
        let aborted: Vec<(i64, i64)> = pd
            .aborted_transactions
            .iter()
            .flatten()
            .map(|a| (a.producer_id.0, a.first_offset))
            .collect();
        assert_eq!(aborted, vec![(bb, 2)], "{when}");
        let mut records = pd.records.clone().expect("records");
        let batches = kafka_protocol::records::RecordBatchDecoder::decode_all(&mut records)
            .expect("kafka batches");
        let offsets: Vec<i64> = batches
            .iter()
            .flat_map(|s| &s.records)
            .map(|r| r.offset)
            .collect();
        assert_eq!(
            offsets,
            vec![0, 1, 2, 3],
            "{when}: up to the LSO, aborted ones included"
        );
    };
    check_open(&b, "before any restart");
    assert_eq!(
        confluent(&kafka, "tx", "read_committed", 4),
        committed_so_far,
        "confluent-kafka read_committed"
    );
    assert_eq!(
        confluent(&kafka, "tx", "read_uncommitted", 15),
        all_data,
        "confluent-kafka read_uncommitted"
    );

    // The same answers after a SIGKILL (the state rebuilt from the log) and after a clean
    // stop (from the snapshot).
    b.restart();
    b.wait_ready();
    check_open(&b, "after a SIGKILL");
    b.terminate();
    b.start_again();
    b.wait_ready();
    check_open(&b, "after a clean restart");

    // cc commits: everything committed is readable, the aborted ones never.
    let mut c = b.client();
    assert_eq!(
        marker(&mut c, "tx", cc, 0, ControlKind::Commit, 0),
        ErrorCode::None
    );
    assert_eq!(send(&mut c, "tx", &plain("p4")), Ok(16));
    let committed = strings(&["p0", "a0", "p1", "c0", "a1", "p2", "d0", "p3", "p4"]);
    assert_eq!(
        committed_view(&mut c, "tx"),
        (17, vec![(bb, 2), (d, 12)], 17)
    );
    assert_eq!(
        consume(b.bootstrap(), "tx", Isolation::ReadCommitted, 17),
        committed
    );
    let mut everything = all_data.clone();
    everything.push("p4".into());
    assert_eq!(
        consume(b.bootstrap(), "tx", Isolation::ReadUncommitted, 17),
        everything
    );
    let kafka = b.kafka_bootstrap();
    assert_eq!(confluent(&kafka, "tx", "read_committed", 17), committed);
    assert_eq!(confluent(&kafka, "tx", "read_uncommitted", 17), everything);
    // kcat (librdkafka reads committed by default): read_uncommitted to the end.
    let kcat = lines(run(
        "kcat",
        &[
            "-b",
            &kafka,
            "-C",
            "-t",
            "tx",
            "-p",
            "0",
            "-o",
            "beginning",
            "-e",
            "-q",
            "-X",
            "isolation.level=read_uncommitted",
            "-f",
            "%s\\n",
        ],
    ));
    assert_eq!(kcat, everything, "kcat read_uncommitted");
    // rill consume --isolation (DESIGN.md).
    let cli = |isolation: &str, n: usize| {
        let o = b.cli(
            &[
                "consume",
                "tx",
                "--from",
                "beginning",
                "--isolation",
                isolation,
                "-n",
                &n.to_string(),
                "--timeout-ms",
                "20000",
            ],
            None,
        );
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        lines(o)
    };
    assert_eq!(cli("read_committed", committed.len()), committed);
    assert_eq!(cli("read_uncommitted", everything.len()), everything);
    let o = b.cli(&["consume", "tx", "--isolation", "serializable"], None);
    assert!(!o.status.success(), "an unknown isolation is refused");
    // A marker to a `__consumer_offsets` partition (a producer with no open transaction
    // there: written, nothing else changes).
    assert_eq!(
        marker(&mut c, "__consumer_offsets", a, 0, ControlKind::Commit, 0),
        ErrorCode::None
    );
    // The stored markers are control batches.
    let (_, frame) = c.fetch("tx", 0, 7, Duration::ZERO, 1, 1 << 20).unwrap();
    let first = BatchIter::new(frame.payload()).next().unwrap().unwrap();
    assert_eq!(first.header().flags, FLAG_CONTROL | FLAG_TRANSACTIONAL);
    assert_eq!(
        ControlRecord::of_batch(&first).unwrap(),
        ControlRecord {
            kind: ControlKind::Commit,
            coordinator_epoch: 0
        }
    );
    let _ = std::io::stderr().flush();
}

#[test]
fn a_follower_elected_leader_answers_read_committed_the_same() {
    let mut cl = TestCluster::start(3, 1, FAST_FENCING);
    create_topic_rf3(&cl, "rtx", 1, &[("min.insync.replicas", "2")]);
    create_topic_rf3(&cl, "all3", 1, &[("min.insync.replicas", "3")]);
    let mut c = Client::connect(ClientConfig::new(cl.nodes[0].bootstrap())).unwrap();
    let (a, _) = c.init_producer_id(None).unwrap();
    let (bb, _) = c.init_producer_id(None).unwrap();
    let (cc, _) = c.init_producer_id(None).unwrap();
    assert_eq!(send(&mut c, "rtx", &txn(a, 0, 0, "a0")), Ok(0));
    assert_eq!(send(&mut c, "rtx", &txn(bb, 0, 0, "b0")), Ok(1));
    assert_eq!(send(&mut c, "rtx", &plain("p0")), Ok(2));
    assert_eq!(
        marker(&mut c, "rtx", a, 0, ControlKind::Commit, 0),
        ErrorCode::None
    );
    assert_eq!(
        marker(&mut c, "rtx", bb, 0, ControlKind::Abort, 0),
        ErrorCode::None
    );
    assert_eq!(send(&mut c, "rtx", &plain("p1")), Ok(5));
    assert_eq!(send(&mut c, "rtx", &txn(cc, 0, 0, "c0")), Ok(6));
    assert_eq!(send(&mut c, "rtx", &plain("p2")), Ok(7));
    let expected = (6, vec![(bb, 1)], 6);
    assert_eq!(committed_view(&mut c, "rtx"), expected);

    let old = wait_partition(&cl.nodes[0], "rtx", 0, "a leader", |m| m.leader != 0).leader;
    cl.node(u64::from(old)).kill();
    let alive: Vec<usize> = (0..3).filter(|i| *i as u32 + 1 != old).collect();
    let witness = &cl.nodes[alive[0]];
    wait_partition(witness, "rtx", 0, "a new leader", |m| {
        m.leader != 0 && m.leader != old
    });
    let mut c = Client::connect(ClientConfig::new(witness.bootstrap())).unwrap();
    // The new leader's high watermark reaches the log end once the other follower fetched.
    let start = Instant::now();
    loop {
        let _ = c.refresh_metadata();
        match c.fetch_isolated(
            "rtx",
            0,
            0,
            Duration::ZERO,
            1,
            1 << 20,
            Isolation::ReadCommitted,
        ) {
            Ok((r, _)) if r.result.high_watermark == 8 => break,
            _ => {}
        }
        assert!(
            start.elapsed() < DEADLINE,
            "the new leader's high watermark never reached 8"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(committed_view(&mut c, "rtx"), expected);
    assert_eq!(
        consume(witness.bootstrap(), "rtx", Isolation::ReadCommitted, 6),
        strings(&["a0", "p0", "p1"])
    );
    // The transaction goes on at the new leader: cc's commit opens the rest.
    assert_eq!(
        marker(&mut c, "rtx", cc, 0, ControlKind::Commit, 0),
        ErrorCode::None
    );
    assert_eq!(committed_view(&mut c, "rtx"), (9, vec![(bb, 1)], 9));
    assert_eq!(
        consume(witness.bootstrap(), "rtx", Isolation::ReadCommitted, 9),
        strings(&["a0", "p0", "p1", "c0", "p2"])
    );
    // A marker needs min.insync.replicas in-sync replicas, as an acks=all produce: refused
    // with NOT_ENOUGH_REPLICAS once the ISR lost the dead broker, nothing appended.
    wait_partition(witness, "all3", 0, "an ISR of 2", |m| {
        m.leader != 0 && m.leader != old && m.isr.len() == 2
    });
    let _ = c.refresh_metadata();
    assert_eq!(
        marker(&mut c, "all3", a, 0, ControlKind::Commit, 0),
        ErrorCode::NotEnoughReplicas
    );
    assert_eq!(log_end(&mut c, "all3"), 0);
}
