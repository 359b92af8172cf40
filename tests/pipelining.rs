//! Pipelined connections: a client may send requests without waiting for answers. The broker
//! appends produces in arrival order, answers strictly in request order (also when a later
//! request fails at once while an earlier one waits for fdatasync), and reads no further than
//! `--max-in-flight-requests-per-connection` replies ahead of a client that does not read them,
//! while other connections are served.

use std::io::{ErrorKind, Write};
use std::net::TcpStream;
use std::os::fd::{AsRawFd, FromRawFd};
use std::time::{Duration, Instant};

use rill::batch::BatchBuilder;
use rill::client::StartFrom;
use rill::protocol::frame::{
    encode_meta, encode_request, read_frame_blocking, RequestHeader, ResponseFrame,
};
use rill::protocol::messages::{
    ApiVersionsRequest, ApiVersionsResponse, FetchPartition, FetchRequest, ProducePartition,
    ProduceRequest, ProduceResponse,
};
use rill::protocol::{ApiKey, ErrorCode};
use rill_testkit::{consume_exactly, produce_values, values, TestBroker, DEADLINE};

fn header(api: ApiKey, correlation_id: u32) -> RequestHeader {
    RequestHeader {
        api_key: api as u16,
        api_version: 0,
        correlation_id,
        client_id: "pipelining".into(),
    }
}

fn batch(values: &[String]) -> Vec<u8> {
    let mut bb = BatchBuilder::new();
    for v in values {
        bb.push(1, None, v.as_bytes(), &[], &[]);
    }
    bb.build().unwrap().to_vec()
}

fn produce(correlation: u32, topic: &str, partition: u32, batch: &[u8]) -> Vec<u8> {
    let meta = encode_meta(&ProduceRequest {
        acks: 1,
        timeout_ms: 60_000,
        partitions: vec![ProducePartition {
            topic: topic.into(),
            partition,
            payload_offset: 0,
            payload_len: batch.len() as u32,
        }],
    })
    .unwrap();
    encode_request(&header(ApiKey::Produce, correlation), &meta, &[batch]).unwrap()
}

fn api_versions(correlation: u32) -> Vec<u8> {
    let meta = encode_meta(&ApiVersionsRequest {}).unwrap();
    encode_request(&header(ApiKey::ApiVersions, correlation), &meta, &[]).unwrap()
}

fn response(s: &mut TcpStream) -> ResponseFrame {
    ResponseFrame::parse(read_frame_blocking(s, 64 << 20).expect("a response")).unwrap()
}

/// What one pipelined request is and what its answer must say.
enum Sent {
    /// Records appended to a partition.
    Appended(u32, Vec<String>),
    /// A produce refused with this code.
    Refused(ErrorCode),
    ApiVersions,
}

/// 40 requests sent in one write on one connection, to two partitions of a broker that
/// fdatasyncs every write: each earlier produce waits on fdatasync while later ones (among
/// them a corrupt batch, a produce to a missing topic and ApiVersions, all answerable at once)
/// are read and handled. Answers come in request order; each partition's offsets follow the
/// order the requests arrived in, and so do the records read back.
#[test]
fn pipelined_requests_are_answered_in_order_and_appended_in_arrival_order() {
    let b = TestBroker::start(1, &["--fsync", "always"]);
    let o = b.cli(&["topic", "create", "pipe", "--partitions", "2"], None);
    assert!(o.status.success(), "{o:?}");

    let mut wire = Vec::new();
    let mut sent = Vec::new();
    for c in 1..=40u32 {
        let (request, what) = match c % 10 {
            3 => {
                let mut bad = batch(&["corrupt".to_string()]);
                let last = bad.len() - 1;
                bad[last] ^= 0xff;
                (
                    produce(c, "pipe", 0, &bad),
                    Sent::Refused(ErrorCode::CorruptMessage),
                )
            }
            6 => (
                produce(c, "missing", 0, &batch(&["x".to_string()])),
                Sent::Refused(ErrorCode::UnknownTopicOrPartition),
            ),
            9 => (api_versions(c), Sent::ApiVersions),
            _ => {
                let partition = c % 2;
                let records: Vec<String> = (0..3).map(|i| format!("c{c}-r{i}")).collect();
                (
                    produce(c, "pipe", partition, &batch(&records)),
                    Sent::Appended(partition, records),
                )
            }
        };
        wire.extend_from_slice(&request);
        sent.push((c, what));
    }
    let mut s = TcpStream::connect(b.bootstrap()).unwrap();
    s.set_read_timeout(Some(DEADLINE)).unwrap();
    s.write_all(&wire).unwrap();

    let mut next_offset = [0u64; 2];
    let mut want = [Vec::new(), Vec::new()];
    for (c, what) in sent {
        let f = response(&mut s);
        assert_eq!(f.correlation_id, c, "answers in request order");
        match what {
            Sent::ApiVersions => {
                let r: ApiVersionsResponse = f.decode_meta().unwrap();
                assert!(!r.apis.is_empty());
            }
            Sent::Refused(code) => {
                let r: ProduceResponse = f.decode_meta().unwrap();
                assert_eq!(
                    ErrorCode::from_code(r.partitions[0].error_code),
                    code,
                    "{c}"
                );
            }
            Sent::Appended(p, records) => {
                let r: ProduceResponse = f.decode_meta().unwrap();
                let pr = &r.partitions[0];
                assert_eq!(pr.error_code, 0, "{c}: {}", pr.message);
                assert_eq!(
                    pr.base_offset as u64, next_offset[p as usize],
                    "request {c} appended in arrival order"
                );
                next_offset[p as usize] += records.len() as u64;
                want[p as usize].extend(records);
            }
        }
    }
    let got = consume_exactly(
        &b,
        "pipe",
        StartFrom::Beginning,
        want[0].len() + want[1].len(),
    );
    for p in 0..2u32 {
        let in_p: Vec<_> = got.iter().filter(|r| r.partition == p).cloned().collect();
        assert_eq!(values(&in_p), want[p as usize], "partition {p}");
    }
}

/// A tiny deterministic generator, so failures can be replayed.
fn xorshift(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

/// The broker reads a plain socket ahead of the frame it is parsing (`READ_AHEAD_BYTES`): 80
/// produce frames of 60 B to ~5x that size, sent in random pieces (1 B to 24 KiB, sometimes a
/// pause between them) so that frames start and end at every kind of place relative to what
/// one read returns: in the middle of a length prefix, past the read-ahead, several frames in
/// one piece. Every frame is answered in order, and every record reads back as it was sent.
#[test]
fn frames_cut_anywhere_and_read_ahead_arrive_whole_and_in_order() {
    let b = TestBroker::start(1, &[]);
    let o = b.cli(&["topic", "create", "cuts", "--partitions", "1"], None);
    assert!(o.status.success(), "{o:?}");

    let ahead = rill::net::shared_stream::READ_AHEAD_BYTES;
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut wire = Vec::new();
    let mut sent = Vec::new();
    for c in 1..=80u32 {
        let value_len = (xorshift(&mut seed) % (5 * ahead as u64)) as usize;
        let records: Vec<String> = (0..1 + c % 3)
            .map(|i| {
                let fill = char::from(b'a' + (c % 26) as u8);
                format!("c{c}-r{i}-{}", fill.to_string().repeat(value_len / 3))
            })
            .collect();
        wire.extend_from_slice(&produce(c, "cuts", 0, &batch(&records)));
        sent.push((c, records));
    }
    let mut s = TcpStream::connect(b.bootstrap()).unwrap();
    s.set_nodelay(true).unwrap();
    s.set_read_timeout(Some(DEADLINE)).unwrap();
    let mut at = 0;
    while at < wire.len() {
        let piece = 1 + (xorshift(&mut seed) % (24 << 10)) as usize;
        let end = wire.len().min(at + piece);
        s.write_all(&wire[at..end]).unwrap();
        if xorshift(&mut seed).is_multiple_of(4) {
            std::thread::sleep(Duration::from_millis(1));
        }
        at = end;
    }

    let mut next_offset = 0u64;
    let mut want = Vec::new();
    for (c, records) in sent {
        let f = response(&mut s);
        assert_eq!(f.correlation_id, c, "answers in request order");
        let r: ProduceResponse = f.decode_meta().unwrap();
        let pr = &r.partitions[0];
        assert_eq!(pr.error_code, 0, "{c}: {}", pr.message);
        assert_eq!(pr.base_offset as u64, next_offset, "request {c}");
        next_offset += records.len() as u64;
        want.extend(records);
    }
    let got = consume_exactly(&b, "cuts", StartFrom::Beginning, want.len());
    assert_eq!(values(&got), want);
}

/// A socket with small kernel buffers, so that a client that stops reading fills them soon.
fn small_buffered(to: &str) -> TcpStream {
    let addr: std::net::SocketAddr = to.parse().unwrap();
    // SAFETY: plain socket calls on a descriptor this function owns; results are checked.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        assert!(fd >= 0);
        let s = TcpStream::from_raw_fd(fd);
        for opt in [libc::SO_RCVBUF, libc::SO_SNDBUF] {
            let size: libc::c_int = 4096;
            let rc = libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                opt,
                (&size as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            );
            assert_eq!(rc, 0);
        }
        let std::net::SocketAddr::V4(to4) = addr else {
            panic!("IPv4 only")
        };
        let sin = libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: to4.port().to_be(),
            sin_addr: libc::in_addr {
                s_addr: u32::from(*to4.ip()).to_be(),
            },
            sin_zero: [0; 8],
        };
        let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
        let rc = libc::connect(fd, (&sin as *const libc::sockaddr_in).cast(), len);
        assert_eq!(rc, 0, "connect: {}", std::io::Error::last_os_error());
        s
    }
}

/// True when `s` does not become writable within `wait`.
fn stays_unwritable(s: &TcpStream, wait: Duration) -> bool {
    let mut p = libc::pollfd {
        fd: s.as_raw_fd(),
        events: libc::POLLOUT,
        revents: 0,
    };
    // SAFETY: one pollfd.
    let n = unsafe { libc::poll(&mut p, 1, wait.as_millis() as libc::c_int) };
    n == 0
}

/// A client that sends produces and fetches and never reads the answers: once its replies fill
/// the socket, the broker keeps at most the in-flight bound of them and stops reading, so the
/// client's writes block (a broker reading on would drain them); other connections are
/// served meanwhile, and the stuck one is closed after --fetch-send-timeout-ms.
#[test]
fn a_client_that_never_reads_replies_stops_being_read() {
    let b = TestBroker::start(
        1,
        &[
            "--max-in-flight-requests-per-connection",
            "2",
            "--fetch-send-timeout-ms",
            "5000",
            // Fetches answered from memory: no sendfile barrier, only the bound stops reading.
            "--file-reads",
            "copy",
        ],
    );
    let o = b.cli(&["topic", "create", "deaf", "--partitions", "1"], None);
    assert!(o.status.success(), "{o:?}");
    let o = b.cli(&["topic", "create", "others", "--partitions", "1"], None);
    assert!(o.status.success(), "{o:?}");

    // Large replies fill the broker's socket buffer after a few requests.
    produce_values(
        &b,
        "deaf",
        0,
        (0..8).map(|i| format!("{i}").repeat(100_000)),
    );
    let fetch = encode_request(
        &header(ApiKey::Fetch, 2),
        &encode_meta(&FetchRequest {
            max_wait_ms: 0,
            min_bytes: 1,
            max_bytes: 1 << 20,
            partitions: vec![FetchPartition {
                topic: "deaf".into(),
                partition: 0,
                offset: 0,
                max_bytes: 1 << 20,
            }],
        })
        .unwrap(),
        &[],
    )
    .unwrap();
    let mut request = produce(1, "deaf", 0, &batch(&["never read".to_string()]));
    request.extend_from_slice(&fetch);

    let s = small_buffered(&b.bootstrap());
    s.set_nonblocking(true).unwrap();
    let mut pending: &[u8] = &request;
    let mut requests = 0u64;
    let start = Instant::now();
    loop {
        assert!(
            start.elapsed() < DEADLINE,
            "the broker read on after {requests} requests"
        );
        match (&s).write(pending) {
            Ok(n) => {
                pending = &pending[n..];
                if pending.is_empty() {
                    requests += 1;
                    pending = &request;
                }
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                if stays_unwritable(&s, Duration::from_secs(1)) {
                    break;
                }
            }
            Err(e) => panic!("write after {requests} requests: {e}"),
        }
    }
    assert!(
        requests > 2,
        "{requests} requests before the broker stopped"
    );

    // Other connections of the shard are served while this one is stuck.
    produce_values(&b, "others", 0, (0..20).map(|i| format!("o{i}")));
    let got = consume_exactly(&b, "others", StartFrom::Beginning, 20);
    assert_eq!(
        values(&got),
        (0..20).map(|i| format!("o{i}")).collect::<Vec<_>>()
    );

    // The stuck connection is closed once a reply has not drained for 5 s: reset, since
    // the broker drops it with our unread requests in its buffer (reading here would unstick
    // it, so the socket is only polled for the error).
    let mut p = libc::pollfd {
        fd: s.as_raw_fd(),
        events: 0,
        revents: 0,
    };
    // SAFETY: one pollfd; POLLERR and POLLHUP are reported whatever `events` asks.
    let n = unsafe { libc::poll(&mut p, 1, DEADLINE.as_millis() as libc::c_int) };
    assert_eq!(n, 1, "the stuck connection stayed open");
    assert!(p.revents & (libc::POLLERR | libc::POLLHUP) != 0);
}

/// One size-prefixed Kafka request.
fn kafka_request<R: kafka_protocol::protocol::Encodable>(
    api: kafka_protocol::messages::ApiKey,
    version: i16,
    correlation: i32,
    req: &R,
) -> Vec<u8> {
    use kafka_protocol::messages::RequestHeader;
    use kafka_protocol::protocol::{Encodable, StrBytes};
    let mut header = RequestHeader::default();
    header.request_api_key = api as i16;
    header.request_api_version = version;
    header.correlation_id = correlation;
    header.client_id = Some(StrBytes::from_static_str("pipelining"));
    let mut body = bytes::BytesMut::new();
    header
        .encode(&mut body, api.request_header_version(version))
        .unwrap();
    req.encode(&mut body, version).unwrap();
    let mut out = (body.len() as i32).to_be_bytes().to_vec();
    out.extend_from_slice(&body);
    out
}

/// A Kafka Produce v9 (acks=all) of `values` to partition 0 of `topic`.
fn kafka_produce(correlation: i32, topic: &str, values: &[String]) -> Vec<u8> {
    use kafka_protocol::messages::ApiKey as KafkaApi;

    use kafka_protocol::records::Record;
    let records: Vec<Record> = values
        .iter()
        .enumerate()
        .map(|(i, v)| {
            rill_testkit::kafka_record(i as i64, None, Some(bytes::Bytes::from(v.clone())))
        })
        .collect();
    let req = rill_testkit::kafka_produce_request(topic, 0, &records, 60_000);
    kafka_request(KafkaApi::Produce, 9, correlation, &req)
}

/// The Kafka listener pipelines as the native one (librdkafka sends up to 5 requests at
/// once): 20 requests in one write to a broker that fdatasyncs every write, among them a
/// produce to a missing topic and ApiVersions; answered in request order, offsets in arrival
/// order, the records read back in that order.
#[test]
fn kafka_pipelined_requests_are_answered_in_order() {
    use bytes::Buf;
    use kafka_protocol::messages::{
        ApiKey as KafkaApi, ApiVersionsRequest as KafkaApiVersions,
        ApiVersionsResponse as KafkaApiVersionsResponse, ProduceResponse as KafkaProduceResponse,
        ResponseHeader,
    };
    use kafka_protocol::protocol::Decodable;
    use std::io::Read;

    let b = TestBroker::start_kafka(1, &["--fsync", "always"]);
    let o = b.cli(&["topic", "create", "kp", "--partitions", "1"], None);
    assert!(o.status.success(), "{o:?}");
    let mut wire = Vec::new();
    let mut want = Vec::new();
    for c in 1..=20i32 {
        wire.extend(match c % 7 {
            3 => kafka_produce(c, "missing", &["x".to_string()]),
            5 => kafka_request(KafkaApi::ApiVersions, 0, c, &KafkaApiVersions::default()),
            _ => {
                let values: Vec<String> = (0..2).map(|i| format!("c{c}-{i}")).collect();
                want.extend(values.clone());
                kafka_produce(c, "kp", &values)
            }
        });
    }
    let mut s = TcpStream::connect(b.kafka_bootstrap()).unwrap();
    s.set_read_timeout(Some(DEADLINE)).unwrap();
    s.write_all(&wire).unwrap();
    let mut next_offset = 0i64;
    for c in 1..=20i32 {
        let mut len = [0u8; 4];
        s.read_exact(&mut len).unwrap();
        let mut resp = vec![0u8; i32::from_be_bytes(len) as usize];
        s.read_exact(&mut resp).unwrap();
        let mut resp = bytes::Bytes::from(resp);
        let api = if c % 7 == 5 {
            KafkaApi::ApiVersions
        } else {
            KafkaApi::Produce
        };
        let version = if api == KafkaApi::Produce { 9 } else { 0 };
        let h = ResponseHeader::decode(&mut resp, api.response_header_version(version)).unwrap();
        assert_eq!(h.correlation_id, c, "answers in request order");
        match c % 7 {
            5 => {
                let r = KafkaApiVersionsResponse::decode(&mut resp, 0).unwrap();
                assert!(!r.api_keys.is_empty());
            }
            3 => {
                let r = KafkaProduceResponse::decode(&mut resp, 9).unwrap();
                let pr = &r.responses[0].partition_responses[0];
                assert_eq!(
                    ErrorCode::from_code(pr.error_code),
                    ErrorCode::UnknownTopicOrPartition
                );
            }
            _ => {
                let r = KafkaProduceResponse::decode(&mut resp, 9).unwrap();
                let pr = &r.responses[0].partition_responses[0];
                assert_eq!(pr.error_code, 0, "{c}: {:?}", pr.error_message);
                assert_eq!(pr.base_offset, next_offset, "request {c} in arrival order");
                next_offset += 2;
            }
        }
        assert_eq!(resp.remaining(), 0);
    }
    let got = consume_exactly(&b, "kp", StartFrom::Beginning, want.len());
    assert_eq!(values(&got), want);
}
