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

    /// SIGTERM: the member stops reading, commits what it printed and closes (leaving the
    /// group); waits for it to exit.
    fn terminate(&mut self) {
        // SAFETY: kill(2) on our own child's pid with a plain signal number.
        let rc = unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM) };
        assert_eq!(rc, 0);
        let start = std::time::Instant::now();
        while self.child.try_wait().unwrap().is_none() {
            assert!(
                start.elapsed() < DEADLINE,
                "the member did not exit on SIGTERM"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        assert!(self.child.wait().unwrap().success(), "the member failed");
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

/// The coordinator of `group` as Kafka clients find it (FindCoordinator v3).
fn kafka_coordinator(kafka: &str, group: &str) -> String {
    use kafka_protocol::messages::{ApiKey, FindCoordinatorRequest, FindCoordinatorResponse};
    use kafka_protocol::protocol::StrBytes;
    let mut req = FindCoordinatorRequest::default();
    req.key = StrBytes::from_string(group.to_string());
    let mut found = None;
    wait_until("the group's coordinator", || {
        let r: FindCoordinatorResponse =
            rill_testkit::kafka_call(kafka, ApiKey::FindCoordinator, 3, &req);
        found = (r.error_code == 0).then(|| format!("{}:{}", r.host, r.port));
        found.is_some()
    });
    found.unwrap()
}

/// A `clients.py describe-group` answer.
#[derive(Debug, serde::Deserialize)]
struct GroupDescription {
    #[serde(rename = "type")]
    group_type: String,
    state: String,
    assignor: String,
    members: Vec<MemberView>,
    listed_type: Option<String>,
}

#[derive(Debug, serde::Deserialize)]
struct MemberView {
    member_id: String,
    assignment: Vec<(String, u32)>,
}

/// KIP-848 with librdkafka (`group.protocol=consumer`): two members share a topic, every
/// record is read once; one member closes and the other takes over from its commits; the
/// group is described and listed as a consumer group; a classic JoinGroup cannot join it;
/// committed offsets survive a broker restart and a new member resumes from them.
#[test]
fn kip848_consumers_share_partitions_and_take_over_from_committed_offsets() {
    use kafka_protocol::messages::{ApiKey, JoinGroupRequest, JoinGroupResponse};
    use kafka_protocol::protocol::StrBytes;
    let mut b = TestBroker::start_kafka(2, &["--group-consumer-heartbeat-interval-ms", "500"]);
    b.client().create_topic("t", 4, 1, vec![]).unwrap();
    let kafka = b.kafka_bootstrap();
    let all: Vec<(String, u32)> = (0..4).map(|p| ("t".to_string(), p)).collect();
    let mut first = PythonMember::start(&kafka, "t", "kip848", "consumer");
    wait_until("the first member owning all four partitions", || {
        first.assignment() == all
    });
    let mut second = PythonMember::start(&kafka, "t", "kip848", "consumer:range");
    wait_until("the two members splitting the four partitions", || {
        let (a, b) = (first.assignment(), second.assignment());
        let mut both: Vec<_> = a.iter().chain(&b).cloned().collect();
        both.sort();
        a.len() == 2 && b.len() == 2 && both == all
    });
    let produce = |b: &TestBroker, round: usize| {
        for p in 0..4u32 {
            rill_testkit::produce_values(b, "t", p, (0..100).map(|i| format!("r{round}-p{p}-{i}")));
        }
    };
    produce(&b, 0);
    wait_until("400 records read between the two", || {
        first.values().len() + second.values().len() >= 400
    });
    let firsts: Vec<u32> = first.assignment().iter().map(|(_, p)| *p).collect();
    assert!(
        first.values().iter().all(|(p, _)| firsts.contains(p)),
        "read outside its share"
    );
    assert!(
        second.values().iter().all(|(p, _)| !firsts.contains(p)),
        "read outside its share"
    );

    // The group as the AdminClient sees it (ConsumerGroupDescribe, ListGroups v5).
    let d: GroupDescription =
        serde_json::from_str(&python(&["describe-group", &kafka, "kip848"])).unwrap();
    assert_eq!(d.group_type, "CONSUMER", "{d:?}");
    assert_eq!(d.listed_type.as_deref(), Some("CONSUMER"), "{d:?}");
    assert_eq!(d.state, "STABLE", "{d:?}");
    assert_eq!(d.assignor, "range", "the member's server_assignor: {d:?}");
    assert_eq!(d.members.len(), 2, "{d:?}");
    let mut described: Vec<(String, u32)> = d
        .members
        .iter()
        .flat_map(|m| m.assignment.clone())
        .collect();
    described.sort();
    assert_eq!(described, all, "{d:?}");
    assert!(d.members.iter().all(|m| !m.member_id.is_empty()));

    // A classic member cannot join a consumer group with members.
    let coordinator = kafka_coordinator(&kafka, "kip848");
    let mut join = JoinGroupRequest::default();
    join.group_id = kafka_protocol::messages::GroupId(StrBytes::from_static_str("kip848"));
    join.session_timeout_ms = 10_000;
    join.rebalance_timeout_ms = 10_000;
    join.protocol_type = StrBytes::from_static_str("consumer");
    let mut proto =
        kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol::default();
    proto.name = StrBytes::from_static_str("range");
    join.protocols.push(proto);
    let r: JoinGroupResponse = rill_testkit::kafka_call(&coordinator, ApiKey::JoinGroup, 5, &join);
    assert_eq!(r.error_code, 23, "INCONSISTENT_GROUP_PROTOCOL");

    // The second member closes (committing what it read): the first takes everything and
    // goes on from the second's commits.
    second.terminate();
    wait_until("the first member owning all four partitions again", || {
        first.assignment() == all
    });
    produce(&b, 1);
    wait_until("800 records read in all", || {
        first.values().len() + second.values().len() >= 800
    });
    first.terminate();
    let mut read: Vec<String> = first
        .values()
        .into_iter()
        .chain(second.values())
        .map(|(_, v)| v)
        .collect();
    read.sort();
    let mut expected: Vec<String> = (0..2)
        .flat_map(|r| (0..4).flat_map(move |p| (0..100).map(move |i| format!("r{r}-p{p}-{i}"))))
        .collect();
    expected.sort();
    assert_eq!(read, expected, "every record read exactly once");

    // Committed offsets survive a restart; membership is rebuilt by the member joining.
    b.restart();
    produce(&b, 2);
    let third = PythonMember::start(&b.kafka_bootstrap(), "t", "kip848", "consumer");
    wait_until("the 400 new records read", || third.values().len() >= 400);
    let mut got: Vec<String> = third.values().into_iter().map(|(_, v)| v).collect();
    got.sort();
    let mut expected: Vec<String> = (0..4)
        .flat_map(|p| (0..100).map(move |i| format!("r2-p{p}-{i}")))
        .collect();
    expected.sort();
    assert_eq!(
        got, expected,
        "the new member resumed at the committed offsets"
    );
}

/// KIP-848's rules on the wire: epochs and fencing in ConsumerGroupHeartbeat, member epochs
/// in OffsetCommit v9 / OffsetFetch v9, a group id either classic or consumer, regex
/// subscriptions refused, ConsumerGroupDescribe, ListGroups' type filter, DeleteGroups.
#[test]
fn kip848_epochs_and_group_types_on_the_wire() {
    use kafka_protocol::messages::consumer_group_heartbeat_request::TopicPartitions;
    use kafka_protocol::messages::offset_commit_request::{
        OffsetCommitRequestPartition, OffsetCommitRequestTopic,
    };
    use kafka_protocol::messages::offset_fetch_request::{
        OffsetFetchRequestGroup, OffsetFetchRequestTopics,
    };
    use kafka_protocol::messages::*;
    use kafka_protocol::protocol::StrBytes;
    let b = TestBroker::start_kafka(1, &["--group-initial-rebalance-delay-ms", "0"]);
    b.client().create_topic("t", 2, 1, vec![]).unwrap();
    let kafka = b.kafka_bootstrap();
    let coordinator = kafka_coordinator(&kafka, "cg");
    let s = |v: &str| StrBytes::from_string(v.to_string());
    let heartbeat = |epoch: i32, owned: Option<Vec<i32>>| {
        let mut r = ConsumerGroupHeartbeatRequest::default();
        r.group_id = GroupId(s("cg"));
        r.member_id = s("member-1");
        r.member_epoch = epoch;
        r.rebalance_timeout_ms = if epoch == 0 { 30_000 } else { -1 };
        r.subscribed_topic_names = (epoch == 0).then(|| vec![TopicName(s("t"))]);
        r.topic_partitions = owned.map(|parts| {
            let mut tp = TopicPartitions::default();
            tp.topic_id = Default::default();
            tp.partitions = parts;
            if tp.partitions.is_empty() {
                Vec::new()
            } else {
                vec![tp]
            }
        });
        r
    };
    let call = |r: &ConsumerGroupHeartbeatRequest| -> ConsumerGroupHeartbeatResponse {
        rill_testkit::kafka_call(&coordinator, ApiKey::ConsumerGroupHeartbeat, 1, r)
    };
    let joined = call(&heartbeat(0, Some(vec![])));
    assert_eq!(joined.error_code, 0, "{:?}", joined.error_message);
    assert_eq!(joined.member_epoch, 1);
    assert_eq!(joined.heartbeat_interval_ms, 5_000, "the default interval");
    let assignment = joined.assignment.expect("the first answer assigns");
    assert_eq!(assignment.topic_partitions.len(), 1);
    let topic_id = assignment.topic_partitions[0].topic_id;
    assert_eq!(assignment.topic_partitions[0].partitions, vec![0, 1]);
    // An epoch the coordinator never gave: fenced. An unknown member: unknown.
    let mut ahead = heartbeat(7, None);
    ahead.topic_partitions = None;
    assert_eq!(call(&ahead).error_code, 110, "FENCED_MEMBER_EPOCH");
    let mut stranger = heartbeat(1, None);
    stranger.member_id = s("nobody");
    assert_eq!(call(&stranger).error_code, 25, "UNKNOWN_MEMBER_ID");
    let mut regex = heartbeat(0, Some(vec![]));
    regex.member_id = s("member-2");
    regex.subscribed_topic_regex = Some(s("t("));
    assert_eq!(call(&regex).error_code, 128, "INVALID_REGULAR_EXPRESSION");
    let mut owned = heartbeat(1, Some(vec![0, 1]));
    owned.topic_partitions.as_mut().unwrap()[0].topic_id = topic_id;
    let steady = call(&owned);
    assert_eq!((steady.error_code, steady.member_epoch), (0, 1));
    assert!(
        steady.assignment.is_none(),
        "nothing changed: no assignment repeated"
    );

    // OffsetCommit v9 carries the member epoch: a stale one is refused.
    let commit_at = |version: i16, epoch: i32, offset: i64| -> OffsetCommitResponse {
        let mut r = OffsetCommitRequest::default();
        r.group_id = GroupId(s("cg"));
        r.member_id = s("member-1");
        r.generation_id_or_member_epoch = epoch;
        let mut t = OffsetCommitRequestTopic::default();
        t.name = TopicName(s("t"));
        let mut p = OffsetCommitRequestPartition::default();
        p.partition_index = 0;
        p.committed_offset = offset;
        p.committed_leader_epoch = -1;
        t.partitions.push(p);
        r.topics.push(t);
        rill_testkit::kafka_call(&coordinator, ApiKey::OffsetCommit, version, &r)
    };
    let commit = |epoch: i32, offset: i64| commit_at(9, epoch, offset);
    let old = commit_at(8, 1, 5);
    assert_eq!(
        old.topics[0].partitions[0].error_code, 35,
        "UNSUPPORTED_VERSION below v9"
    );
    assert_eq!(
        commit(0, 5).topics[0].partitions[0].error_code,
        113,
        "STALE_MEMBER_EPOCH"
    );
    assert_eq!(commit(1, 5).topics[0].partitions[0].error_code, 0);
    let fetch = |epoch: i32| -> OffsetFetchResponse {
        let mut r = OffsetFetchRequest::default();
        let mut g = OffsetFetchRequestGroup::default();
        g.group_id = GroupId(s("cg"));
        g.member_id = Some(s("member-1"));
        g.member_epoch = epoch;
        let mut t = OffsetFetchRequestTopics::default();
        t.name = TopicName(s("t"));
        t.partition_indexes = vec![0];
        g.topics = Some(vec![t]);
        r.groups.push(g);
        rill_testkit::kafka_call(&coordinator, ApiKey::OffsetFetch, 9, &r)
    };
    let f = fetch(1);
    assert_eq!(f.groups[0].error_code, 0);
    assert_eq!(f.groups[0].topics[0].partitions[0].committed_offset, 5);
    assert_eq!(fetch(3).groups[0].error_code, 113, "STALE_MEMBER_EPOCH");

    // Described and listed as a consumer group.
    let mut describe = ConsumerGroupDescribeRequest::default();
    describe.group_ids = vec![GroupId(s("cg")), GroupId(s("classic"))];
    let d: ConsumerGroupDescribeResponse =
        rill_testkit::kafka_call(&coordinator, ApiKey::ConsumerGroupDescribe, 0, &describe);
    let cg = &d.groups[0];
    assert_eq!(cg.error_code, 0);
    assert_eq!(
        (cg.group_state.as_str(), cg.group_epoch, cg.assignment_epoch),
        ("Stable", 1, 1)
    );
    assert_eq!(cg.assignor_name.as_str(), "uniform");
    assert_eq!(cg.members.len(), 1);
    assert_eq!(cg.members[0].member_id.as_str(), "member-1");
    assert_eq!(
        cg.members[0].assignment.topic_partitions[0].partitions,
        vec![0, 1]
    );
    assert_eq!(d.groups[1].error_code, 69, "GROUP_ID_NOT_FOUND");
    let list = |types: &[&str]| -> Vec<(String, String)> {
        let mut r = ListGroupsRequest::default();
        r.types_filter = types.iter().map(|t| s(t)).collect();
        let l: ListGroupsResponse = rill_testkit::kafka_call(&kafka, ApiKey::ListGroups, 5, &r);
        l.groups
            .iter()
            .map(|g| (g.group_id.0.to_string(), g.group_type.to_string()))
            .collect()
    };
    assert_eq!(
        list(&["consumer"]),
        vec![("cg".to_string(), "consumer".to_string())]
    );
    assert!(list(&["classic"]).is_empty());
    let dg: DescribeGroupsResponse = {
        let mut r = DescribeGroupsRequest::default();
        r.groups = vec![GroupId(s("cg"))];
        rill_testkit::kafka_call(&coordinator, ApiKey::DescribeGroups, 5, &r)
    };
    assert_eq!(
        dg.groups[0].group_state.as_str(),
        "Dead",
        "not a classic group"
    );

    // A classic group with members refuses consumer-protocol members.
    let classic_coordinator = kafka_coordinator(&kafka, "classic");
    let mut join = JoinGroupRequest::default();
    join.group_id = GroupId(s("classic"));
    join.session_timeout_ms = 10_000;
    join.rebalance_timeout_ms = 10_000;
    join.protocol_type = s("consumer");
    let mut proto =
        kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol::default();
    proto.name = s("range");
    join.protocols.push(proto);
    let mut r: JoinGroupResponse =
        rill_testkit::kafka_call(&classic_coordinator, ApiKey::JoinGroup, 5, &join);
    if r.error_code == 79 {
        // MEMBER_ID_REQUIRED (v4+): join again with the id handed out.
        join.member_id = r.member_id.clone();
        r = rill_testkit::kafka_call(&classic_coordinator, ApiKey::JoinGroup, 5, &join);
    }
    assert_eq!(r.error_code, 0);
    let mut to_classic = heartbeat(0, Some(vec![]));
    to_classic.group_id = GroupId(s("classic"));
    let refused: ConsumerGroupHeartbeatResponse = rill_testkit::kafka_call(
        &classic_coordinator,
        ApiKey::ConsumerGroupHeartbeat,
        1,
        &to_classic,
    );
    assert_eq!(refused.error_code, 69, "GROUP_ID_NOT_FOUND");

    // Non-empty consumer groups are not deleted; once the member left, the group is.
    let delete = || -> i16 {
        let mut r = DeleteGroupsRequest::default();
        r.groups_names = vec![GroupId(s("cg"))];
        let d: DeleteGroupsResponse =
            rill_testkit::kafka_call(&coordinator, ApiKey::DeleteGroups, 2, &r);
        d.results[0].error_code
    };
    assert_eq!(delete(), 68, "NON_EMPTY_GROUP");
    let left = call(&heartbeat(-1, None));
    assert_eq!((left.error_code, left.member_epoch), (0, -1));
    assert_eq!(delete(), 0);
    assert_eq!(
        fetch(-1).groups[0].topics[0].partitions[0].committed_offset,
        -1
    );
    assert!(list(&["consumer"]).is_empty());
}

/// A KIP-848 regular expression subscription through librdkafka (`^` topics): the broker
/// resolves it, and a topic created later that matches joins the assignment.
#[test]
fn kip848_regex_subscription_follows_new_topics() {
    let b = TestBroker::start_kafka(1, &["--group-consumer-heartbeat-interval-ms", "500"]);
    let mut c = b.client();
    c.create_topic("re-a", 2, 1, vec![]).unwrap();
    c.create_topic("re-b", 1, 1, vec![]).unwrap();
    c.create_topic("other", 1, 1, vec![]).unwrap();
    let member = PythonMember::start(&b.kafka_bootstrap(), "^re-.*", "kip848-re", "consumer");
    let tp = |t: &str, p: u32| (t.to_string(), p);
    wait_until("the matching topics assigned", || {
        member.assignment() == vec![tp("re-a", 0), tp("re-a", 1), tp("re-b", 0)]
    });
    // The broker holds the pattern (librdkafka sends it, it does not resolve it itself).
    let coordinator = kafka_coordinator(&b.kafka_bootstrap(), "kip848-re");
    let mut describe = kafka_protocol::messages::ConsumerGroupDescribeRequest::default();
    describe.group_ids = vec![kafka_protocol::messages::GroupId(
        kafka_protocol::protocol::StrBytes::from_static_str("kip848-re"),
    )];
    let d: kafka_protocol::messages::ConsumerGroupDescribeResponse = rill_testkit::kafka_call(
        &coordinator,
        kafka_protocol::messages::ApiKey::ConsumerGroupDescribe,
        0,
        &describe,
    );
    let regex = d.groups[0].members[0].subscribed_topic_regex.clone();
    assert!(regex.is_some_and(|r| r.contains("re-")), "{d:?}");
    c.create_topic("re-c", 2, 1, vec![]).unwrap();
    wait_until("the new matching topic assigned", || {
        member.assignment()
            == vec![
                tp("re-a", 0),
                tp("re-a", 1),
                tp("re-b", 0),
                tp("re-c", 0),
                tp("re-c", 1),
            ]
    });
    rill_testkit::produce_values(&b, "re-c", 1, ["new".to_string()]);
    rill_testkit::produce_values(&b, "other", 0, ["not mine".to_string()]);
    wait_until("the record of the new topic read", || {
        member.values().contains(&(1, "new".to_string()))
    });
    assert!(member.values().iter().all(|(_, v)| v != "not mine"));
}
