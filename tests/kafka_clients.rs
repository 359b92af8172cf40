//! Real Kafka clients against rill's Kafka listener: confluent-kafka (Python, a current
//! librdkafka) and kcat (Debian's, librdkafka 2.0: the client of the Produce v0-2 trap).
//! `.ci/run` installs both; without them these tests fail and say how to install them.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Output, Stdio};

use rill::client::StartFrom;
use rill::partitioner::partition_for_key;
use rill_testkit::{TestBroker, DEADLINE};

fn run(program: &str, args: &[&str], stdin: Option<&str>) -> Output {
    let mut child = rill_testkit::external(program)
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| {
            panic!("cannot run {program} ({e}): run .ci/run, or install kcat (apt) and confluent-kafka (pip)")
        });
    if let Some(input) = stdin {
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
    }
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{program} {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn python(args: &[&str]) -> String {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/kafka/clients.py");
    let mut all = vec![script];
    all.extend_from_slice(args);
    String::from_utf8(run("python3", &all, None).stdout).unwrap()
}

fn kcat(args: &[&str], stdin: Option<&str>) -> String {
    String::from_utf8(run("kcat", args, stdin).stdout).unwrap()
}

/// A line the Python side printed: a message, or an assignment event (`group` mode).
#[derive(Debug, Default, serde::Deserialize)]
#[serde(default)]
struct Consumed {
    partition: u32,
    offset: u64,
    key: Option<String>,
    value: String,
    headers: Vec<(String, String)>,
    timestamp: i64,
    assigned: Option<Vec<(String, u32)>>,
    revoked: Option<Vec<(String, u32)>>,
}

fn consumed(json_lines: &str) -> Vec<Consumed> {
    json_lines
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn confluent_kafka_produces_keyed_messages_and_reads_them_in_per_key_order() {
    let b = TestBroker::start_kafka(2, &[]);
    b.client().create_topic("t", 4, 1, vec![]).unwrap();
    let kafka = b.kafka_bootstrap();
    let topics = python(&["topics", &kafka]);
    assert!(topics.lines().any(|t| t == "t"), "{topics}");
    let delivered = python(&["produce", &kafka, "t", "10000", "none"]);
    // Same key -> partition mapping as rill's own client (Kafka's murmur2).
    let mut partitions_used = std::collections::BTreeSet::new();
    for line in delivered.lines() {
        let (p, key) = line.split_once('\t').unwrap();
        let p: u32 = p.parse().unwrap();
        assert_eq!(p, partition_for_key(key.as_bytes(), 4), "key {key}");
        partitions_used.insert(p);
    }
    assert_eq!(delivered.lines().count(), 10_000);
    assert_eq!(partitions_used.len(), 4);
    // Consumed in a group with committed offsets: a first run stops after 4,000, a second
    // run of the same group resumes where the first committed.
    let first = consumed(&python(&["group", &kafka, "t", "g", "range", "4000", "30"]));
    assert_eq!(first.iter().filter(|m| m.key.is_some()).count(), 4_000);
    let second = consumed(&python(&["group", &kafka, "t", "g", "range", "10000", "5"]));
    let read: Vec<&Consumed> = first
        .iter()
        .chain(&second)
        .filter(|m| m.key.is_some())
        .collect();
    assert_eq!(read.len(), 10_000, "nothing read twice, nothing missing");
    let mut last: BTreeMap<String, i64> = BTreeMap::new();
    for m in &read {
        let key = m.key.clone().unwrap();
        let (k, seq) = m.value.split_once(':').unwrap();
        assert_eq!(k, key);
        let seq: i64 = seq.parse().unwrap();
        let prev = last.insert(key.clone(), seq).unwrap_or(-1);
        assert!(seq > prev, "key {key}: {seq} after {prev}");
        assert_eq!(m.headers, vec![("src".to_string(), "ck".to_string())]);
    }
    assert_eq!(last.len(), 50);
    // The same messages through the native protocol.
    let native = rill_testkit::consume_exactly(&b, "t", StartFrom::Beginning, 10_000);
    assert_eq!(native.len(), 10_000);
}

#[test]
fn compressed_batches_are_accepted_and_read_back_intact() {
    let b = TestBroker::start_kafka(1, &[]);
    let kafka = b.kafka_bootstrap();
    for (i, codec) in ["gzip", "snappy", "lz4", "zstd"].iter().enumerate() {
        let topic = format!("c{i}");
        b.client().create_topic(&topic, 2, 1, vec![]).unwrap();
        python(&["produce", &kafka, &topic, "500", codec]);
        let read = consumed(&python(&["consume", &kafka, &topic, "2", "500"]));
        let mut values: Vec<String> = read.iter().map(|m| m.value.clone()).collect();
        values.sort();
        let mut expected: Vec<String> = (0..500).map(|i| format!("key{}:{i}", i % 50)).collect();
        expected.sort();
        assert_eq!(values, expected, "{codec}");
        let native = rill_testkit::consume_exactly(&b, &topic, StartFrom::Beginning, 500);
        assert_eq!(native.len(), 500, "{codec} through the native protocol");
    }
}

#[test]
fn kcat_lists_produces_and_consumes_from_an_offset() {
    let b = TestBroker::start_kafka(2, &[]);
    b.client().create_topic("t", 2, 1, vec![]).unwrap();
    let kafka = b.kafka_bootstrap();
    let listing = kcat(&["-b", &kafka, "-L"], None);
    assert!(listing.contains("2 brokers:"), "{listing}");
    assert!(
        listing.contains(&format!("broker 1000 at {kafka}")),
        "{listing}"
    );
    assert!(
        listing.contains("topic \"t\" with 2 partitions"),
        "{listing}"
    );
    let lines: String = (0..20).map(|i| format!("k{i}:value {i}\n")).collect();
    kcat(
        &[
            "-b", &kafka, "-P", "-t", "t", "-p", "1", "-K:", "-H", "via=kcat",
        ],
        Some(&lines),
    );
    // Read through the native protocol, byte for byte, with keys.
    let out = b.cli(
        &[
            "consume",
            "t",
            "--from",
            "beginning",
            "-n",
            "20",
            "--timeout-ms",
            "20000",
            "--print-key",
        ],
        None,
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let expected: String = (0..20).map(|i| format!("k{i}\tvalue {i}\n")).collect();
    assert_eq!(text, expected);
    // kcat from offset 15 of partition 1.
    let tail = kcat(
        &[
            "-b",
            &kafka,
            "-C",
            "-t",
            "t",
            "-p",
            "1",
            "-o",
            "15",
            "-c",
            "5",
            "-e",
            "-f",
            "%o %k %s %h\n",
        ],
        None,
    );
    let expected: String = (15..20)
        .map(|i| format!("{i} k{i} value {i} via=kcat\n"))
        .collect();
    assert_eq!(tail, expected);
}

#[test]
fn a_message_from_rill_produce_reads_the_same_through_confluent_kafka() {
    let b = TestBroker::start_kafka(2, &[]);
    b.client().create_topic("t", 3, 1, vec![]).unwrap();
    let out = b.cli(
        &[
            "produce",
            "t",
            "--key-separator",
            "=",
            "--header",
            "trace=abc",
            "--header",
            "n=1",
        ],
        Some("alpha=first value\nbeta=second value\ngamma=\u{e9}t\u{e9}\n"),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let read = consumed(&python(&["consume", &b.kafka_bootstrap(), "t", "3", "3"]));
    let mut got: Vec<(String, String, u32, u64)> = read
        .iter()
        .map(|m| {
            assert_eq!(
                m.headers,
                vec![
                    ("trace".to_string(), "abc".to_string()),
                    ("n".to_string(), "1".to_string())
                ]
            );
            (
                m.key.clone().unwrap(),
                m.value.clone(),
                m.partition,
                m.offset,
            )
        })
        .collect();
    got.sort();
    let expected = [
        ("alpha", "first value"),
        ("beta", "second value"),
        ("gamma", "\u{e9}t\u{e9}"),
    ];
    for ((k, v, p, _), (ek, ev)) in got.iter().zip(expected) {
        assert_eq!((k.as_str(), v.as_str()), (ek, ev));
        assert_eq!(
            *p,
            partition_for_key(ek.as_bytes(), 3),
            "same partition for key {ek}"
        );
    }
    // The same offsets and timestamps through the native protocol.
    let native = rill_testkit::consume_exactly(&b, "t", StartFrom::Beginning, 3);
    for m in &read {
        let n = native
            .iter()
            .find(|r| r.value.as_deref() == Some(m.value.as_bytes()))
            .expect("read natively");
        assert_eq!((n.partition, n.offset), (m.partition, m.offset));
        assert_eq!(n.timestamp_ms, m.timestamp, "timestamp of {}", m.value);
        assert!(n.timestamp_ms > 1_700_000_000_000);
    }
}

/// Sends raw bytes; true when the broker closed the connection without answering.
fn closed_without_answer(kafka: &str, bytes: &[u8]) -> bool {
    let mut s = TcpStream::connect(kafka).unwrap();
    s.set_read_timeout(Some(DEADLINE)).unwrap();
    let _ = s.write_all(bytes);
    let mut buf = [0u8; 64];
    matches!(s.read(&mut buf), Ok(0) | Err(_))
}

fn frame(key: i16, version: i16, rest: &[u8]) -> Vec<u8> {
    let mut body = Vec::new();
    body.extend_from_slice(&key.to_be_bytes());
    body.extend_from_slice(&version.to_be_bytes());
    body.extend_from_slice(&42i32.to_be_bytes());
    body.extend_from_slice(rest);
    let mut f = (body.len() as i32).to_be_bytes().to_vec();
    f.extend(body);
    f
}

#[test]
fn malformed_kafka_requests_close_the_connection_and_the_broker_keeps_serving() {
    let b = TestBroker::start_kafka(1, &[]);
    b.client().create_topic("t", 1, 1, vec![]).unwrap();
    let kafka = b.kafka_bootstrap();
    assert!(
        closed_without_answer(&kafka, &(-1i32).to_be_bytes()),
        "negative size"
    );
    assert!(
        closed_without_answer(&kafka, &(1i32 << 30).to_be_bytes()),
        "oversized"
    );
    assert!(
        closed_without_answer(&kafka, &frame(9999, 0, &[])),
        "unknown api key"
    );
    assert!(
        closed_without_answer(&kafka, &frame(3, 99, &[])),
        "unsupported version"
    );
    assert!(
        closed_without_answer(&kafka, &frame(0, 2, &[0, 0])),
        "Produce v2"
    );
    assert!(
        closed_without_answer(&kafka, &frame(3, 1, &[0, 40, b'x'])),
        "truncated header"
    );
    assert!(
        closed_without_answer(&kafka, &frame(1, 11, &[0, 0, 0, 0, 0, 0, 0, 7])),
        "truncated fetch"
    );
    // ApiVersions at a version we do not serve: answered (v0, UNSUPPORTED_VERSION = 35).
    let mut s = TcpStream::connect(&kafka).unwrap();
    s.set_read_timeout(Some(DEADLINE)).unwrap();
    s.write_all(&frame(18, 99, &[])).unwrap();
    let mut head = [0u8; 10];
    s.read_exact(&mut head).unwrap();
    assert_eq!(
        i32::from_be_bytes(head[4..8].try_into().unwrap()),
        42,
        "correlation id"
    );
    assert_eq!(i16::from_be_bytes(head[8..10].try_into().unwrap()), 35);
    // Still serving both protocols.
    let listing = kcat(&["-b", &kafka, "-L"], None);
    assert!(listing.contains("topic \"t\""), "{listing}");
    rill_testkit::produce_values(&b, "t", 0, (0..3).map(|i| format!("v{i}")));
    assert_eq!(
        rill_testkit::consume_exactly(&b, "t", StartFrom::Beginning, 3).len(),
        3
    );
}

#[test]
fn a_produce_with_garbage_records_is_refused_per_partition() {
    use bytes::{Buf, Bytes, BytesMut};
    use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
    use kafka_protocol::messages::{ProduceRequest, ProduceResponse, RequestHeader, TopicName};
    use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
    let b = TestBroker::start_kafka(1, &[]);
    b.client().create_topic("t", 1, 1, vec![]).unwrap();
    let mut partition = PartitionProduceData::default();
    partition.index = 0;
    partition.records = Some(Bytes::from(vec![0x5au8; 120]));
    let mut topic = TopicProduceData::default();
    topic.name = TopicName(StrBytes::from_static_str("t"));
    topic.partition_data = vec![partition];
    let mut req = ProduceRequest::default();
    req.acks = -1;
    req.timeout_ms = 10_000;
    req.topic_data = vec![topic];
    let mut header = RequestHeader::default();
    header.request_api_key = 0;
    header.request_api_version = 9;
    header.correlation_id = 5;
    let mut body = BytesMut::new();
    header.encode(&mut body, 2).unwrap();
    req.encode(&mut body, 9).unwrap();
    let mut s = TcpStream::connect(b.kafka_bootstrap()).unwrap();
    s.set_read_timeout(Some(DEADLINE)).unwrap();
    s.write_all(&(body.len() as i32).to_be_bytes()).unwrap();
    s.write_all(&body).unwrap();
    let mut len = [0u8; 4];
    s.read_exact(&mut len).unwrap();
    let mut resp = vec![0u8; i32::from_be_bytes(len) as usize];
    s.read_exact(&mut resp).unwrap();
    let mut resp = Bytes::from(resp);
    assert_eq!(resp.get_i32(), 5, "correlation id");
    let _tagged = resp.get_u8(); // response header v1: no tagged fields
    let r = ProduceResponse::decode(&mut resp, 9).unwrap();
    let p = &r.responses[0].partition_responses[0];
    assert_eq!(p.error_code, 2, "CORRUPT_MESSAGE: {:?}", p.error_message);
    // Nothing was stored.
    let d = b.client().describe_topic("t").unwrap();
    assert_eq!(d.partitions[0].log_end_offset, 0);
}

/// A `clients.py group` process whose lines are collected as they come.
struct PythonMember {
    child: std::process::Child,
    lines: std::sync::Arc<std::sync::Mutex<Vec<Consumed>>>,
}

impl PythonMember {
    fn start(kafka: &str, topic: &str, group: &str, strategy: &str) -> PythonMember {
        use std::io::BufRead;
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/kafka/clients.py");
        let mut child = Command::new("python3")
            .args([
                script, "group", kafka, topic, group, strategy, "1000000", "300",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("python3 (run .ci/run, or pip install confluent-kafka)");
        let out = child.stdout.take().unwrap();
        let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let l = lines.clone();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
                l.lock().unwrap().push(serde_json::from_str(&line).unwrap());
            }
        });
        PythonMember { child, lines }
    }

    /// Its assignment after the latest event.
    fn assignment(&self) -> Vec<(String, u32)> {
        let mut now: Vec<(String, u32)> = Vec::new();
        for l in self.lines.lock().unwrap().iter() {
            if let Some(a) = &l.assigned {
                now.extend(a.iter().cloned());
            }
            if let Some(r) = &l.revoked {
                now.retain(|tp| !r.contains(tp));
            }
        }
        now.sort();
        now.dedup();
        now
    }

    fn values(&self) -> Vec<(u32, String)> {
        self.lines
            .lock()
            .unwrap()
            .iter()
            .filter(|l| l.key.is_some() || !l.value.is_empty())
            .map(|l| (l.partition, l.value.clone()))
            .collect()
    }
}

impl Drop for PythonMember {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let start = std::time::Instant::now();
    while !cond() {
        assert!(start.elapsed() < DEADLINE, "timed out waiting for {what}");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

#[test]
fn a_kafka_consumer_and_a_rill_consumer_share_one_group() {
    use rill::client::{ClientConfig, Delivery, GroupConsumer, GroupConsumerConfig};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};
    let b = TestBroker::start_kafka(2, &[]);
    b.client().create_topic("t", 4, 1, vec![]).unwrap();
    let kafka = PythonMember::start(&b.kafka_bootstrap(), "t", "mixed", "range");
    wait_until("the Kafka consumer owning all four partitions", || {
        kafka.assignment().len() == 4
    });
    // A rill member joins the same group through the native protocol.
    let stop = Arc::new(AtomicBool::new(false));
    // (assignment, (partition, value) read) of the rill member.
    type View = (Vec<(String, u32)>, Vec<(u32, String)>);
    let rill_view: Arc<Mutex<View>> = Arc::default();
    let rill_member = {
        let (stop, view, bootstrap) = (stop.clone(), rill_view.clone(), b.bootstrap());
        std::thread::spawn(move || {
            let mut cfg = GroupConsumerConfig::new("mixed");
            cfg.assignors = vec!["range".into()];
            cfg.delivery = Delivery::AtLeastOnce;
            cfg.session_timeout = std::time::Duration::from_secs(6);
            cfg.heartbeat_interval = std::time::Duration::from_millis(300);
            let mut c = GroupConsumer::new(ClientConfig::new(bootstrap), cfg).unwrap();
            c.subscribe(&["t"]).unwrap();
            while !stop.load(Ordering::SeqCst) {
                let records = c.poll(std::time::Duration::from_millis(100)).unwrap();
                let mut v = view.lock().unwrap();
                for r in records.iter() {
                    v.1.push((
                        r.partition,
                        String::from_utf8(r.value().unwrap_or_default().to_vec()).unwrap(),
                    ));
                }
                v.0 = c.assignment();
            }
            c.close().unwrap();
        })
    };
    wait_until("the two members splitting the four partitions", || {
        let mine = rill_view.lock().unwrap().0.clone();
        let theirs = kafka.assignment();
        let mut all: Vec<_> = mine.iter().chain(&theirs).cloned().collect();
        all.sort();
        mine.len() == 2
            && theirs.len() == 2
            && all == (0..4).map(|p| ("t".to_string(), p)).collect::<Vec<_>>()
    });
    let rill_parts: Vec<u32> = rill_view
        .lock()
        .unwrap()
        .0
        .iter()
        .map(|(_, p)| *p)
        .collect();
    for p in 0..4u32 {
        rill_testkit::produce_values(&b, "t", p, (0..100).map(|i| format!("p{p}-{i}")));
    }
    wait_until("all 400 messages read by one member or the other", || {
        rill_view.lock().unwrap().1.len() + kafka.values().len() >= 400
    });
    stop.store(true, Ordering::SeqCst);
    rill_member.join().unwrap();
    let rill_read = rill_view.lock().unwrap().1.clone();
    let kafka_read = kafka.values();
    assert!(
        rill_read.iter().all(|(p, _)| rill_parts.contains(p)),
        "rill read outside its partitions"
    );
    assert!(
        kafka_read.iter().all(|(p, _)| !rill_parts.contains(p)),
        "Kafka read outside its partitions"
    );
    let mut all: Vec<String> = rill_read
        .into_iter()
        .chain(kafka_read)
        .map(|(_, v)| v)
        .collect();
    all.sort();
    let mut expected: Vec<String> = (0..4)
        .flat_map(|p| (0..100).map(move |i| format!("p{p}-{i}")))
        .collect();
    expected.sort();
    assert_eq!(all, expected, "every message read once");
}
