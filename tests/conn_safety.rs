//! Connections that misbehave cost only themselves: a client that stops reading a sendfile
//! fetch is cut off after `--fetch-send-timeout-ms` while other consumers of the shard are
//! served; idle connections are closed after `--connection-idle-timeout-ms` and free the
//! connection cap; `--max-connections-per-ip` refuses one address's excess on both listeners
//! while other addresses connect; group APIs sent to a shard that does not coordinate the
//! group answer NOT_COORDINATOR on both protocols, at every served version.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd};
use std::time::{Duration, Instant};

use bytes::{Buf, BytesMut};
use rill::client::{ClientConfig, ConsumerConfig, ProducerRecord, StartFrom};
use rill::protocol::frame::{encode_meta, encode_request, RequestHeader};
use rill::protocol::messages as native;
use rill::protocol::{ApiKey, ErrorCode};
use rill_testkit::{consume_exactly, producer, values, TestBroker, DEADLINE};

/// A TCP connection to `to` from `from` (any 127.x address is local on Linux, so a test can
/// act as several client hosts), optionally with a tiny receive buffer (set before connect, so
/// the advertised window stays small).
fn connect_from(from: Ipv4Addr, to: SocketAddr, rcvbuf: Option<i32>) -> TcpStream {
    // SAFETY: plain socket calls on a descriptor this function owns; results are checked.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        assert!(fd >= 0, "socket: {}", std::io::Error::last_os_error());
        let stream = TcpStream::from_raw_fd(fd);
        if let Some(size) = rcvbuf {
            let rc = libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_RCVBUF,
                (&size as *const i32).cast(),
                std::mem::size_of::<i32>() as libc::socklen_t,
            );
            assert_eq!(rc, 0, "SO_RCVBUF");
        }
        let sin = |ip: Ipv4Addr, port: u16| libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: port.to_be(),
            sin_addr: libc::in_addr {
                s_addr: u32::from(ip).to_be(),
            },
            sin_zero: [0; 8],
        };
        let local = sin(from, 0);
        let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
        let rc = libc::bind(fd, (&local as *const libc::sockaddr_in).cast(), len);
        assert_eq!(rc, 0, "bind {from}: {}", std::io::Error::last_os_error());
        let SocketAddr::V4(to4) = to else {
            panic!("IPv4 only")
        };
        let remote = sin(*to4.ip(), to4.port());
        let rc = libc::connect(fd, (&remote as *const libc::sockaddr_in).cast(), len);
        assert_eq!(rc, 0, "connect {to}: {}", std::io::Error::last_os_error());
        stream
    }
}

fn addr(port: u16) -> SocketAddr {
    SocketAddr::from((Ipv4Addr::LOCALHOST, port))
}

/// Bytes waiting in a socket's receive queue.
fn queued(s: &TcpStream) -> usize {
    let mut n: libc::c_int = 0;
    // SAFETY: FIONREAD writes one int.
    unsafe { libc::ioctl(s.as_raw_fd(), libc::FIONREAD, &mut n) };
    n.max(0) as usize
}

/// Reads until the peer closes; returns the bytes read, `None` if still open past `DEADLINE`.
fn read_to_close(s: &mut TcpStream) -> Option<usize> {
    s.set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    let start = Instant::now();
    let mut total = 0;
    let mut buf = vec![0u8; 1 << 20];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return Some(total),
            Ok(n) => total += n,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return Some(total),
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    || e.kind() == std::io::ErrorKind::TimedOut => {}
            Err(e) => panic!("read: {e}"),
        }
        if start.elapsed() > DEADLINE {
            return None;
        }
    }
}

/// True when the broker closed `s` (EOF or reset) within `wait`; false if it is still open.
fn closed_within(s: &mut TcpStream, wait: Duration) -> bool {
    s.set_read_timeout(Some(wait)).unwrap();
    let mut b = [0u8; 64];
    match s.read(&mut b) {
        Ok(0) => true,
        Ok(_) => panic!("unexpected bytes on an idle connection"),
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => true,
        Err(_) => false,
    }
}

fn native_request<T: rill::protocol::frame::EncodeMeta>(api: ApiKey, meta: &T) -> Vec<u8> {
    let meta = encode_meta(meta).unwrap();
    let header = RequestHeader {
        api_key: api as u16,
        api_version: 0,
        correlation_id: 1,
        client_id: "conn-safety".into(),
    };
    encode_request(&header, &meta, &[]).unwrap()
}

/// A native ApiVersions round trip on `s`: true when answered.
fn native_answers(s: &mut TcpStream) -> bool {
    s.set_read_timeout(Some(DEADLINE)).unwrap();
    if s.write_all(&native_request(
        ApiKey::ApiVersions,
        &native::ApiVersionsRequest {},
    ))
    .is_err()
    {
        return false;
    }
    rill::protocol::frame::read_frame_blocking(s, 1 << 20).is_ok()
}

/// A Kafka ApiVersions v0 round trip on `s`: true when answered.
fn kafka_answers(s: &mut TcpStream) -> bool {
    use kafka_protocol::messages::{ApiVersionsRequest, RequestHeader};
    use kafka_protocol::protocol::Encodable;
    s.set_read_timeout(Some(DEADLINE)).unwrap();
    let mut h = RequestHeader::default();
    h.request_api_key = 18;
    h.request_api_version = 0;
    h.correlation_id = 3;
    let mut body = BytesMut::new();
    h.encode(&mut body, 1).unwrap();
    ApiVersionsRequest::default().encode(&mut body, 0).unwrap();
    let mut frame = (body.len() as i32).to_be_bytes().to_vec();
    frame.extend_from_slice(&body);
    if s.write_all(&frame).is_err() {
        return false;
    }
    let mut len = [0u8; 4];
    if s.read_exact(&mut len).is_err() {
        return false;
    }
    let mut body = vec![0u8; i32::from_be_bytes(len).max(0) as usize];
    s.read_exact(&mut body).is_ok()
}

/// A client that asks for a large file-backed range and never reads its socket must not stall
/// the shard's other fetches (they share its sendfile worker), and is disconnected once its
/// response has not drained within --fetch-send-timeout-ms.
#[test]
fn a_client_that_stops_reading_costs_only_its_own_connection() {
    const SEND_TIMEOUT_MS: u64 = 3000;
    let b = TestBroker::start(
        1,
        &[
            // Nothing is served from the tail cache: every fetch goes through sendfile.
            "--tail-cache-bytes",
            "65536",
            "--fsync",
            "never",
            "--fetch-send-timeout-ms",
            &SEND_TIMEOUT_MS.to_string(),
        ],
    );
    let mut c = b.client();
    c.create_topic("big", 1, 1, Default::default()).unwrap();
    c.create_topic("small", 1, 1, Default::default()).unwrap();
    // 24 MiB: far more than a socket's send buffer and a tiny receive window hold.
    let p = producer(&b, 1 << 20);
    let value = vec![b'x'; 1000];
    let reports: Vec<_> = (0..24 * 1024)
        .map(|_| {
            p.send(ProducerRecord::new("big", &value[..]).partition(0))
                .unwrap()
        })
        .collect();
    let small: Vec<String> = (0..20_000).map(|i| format!("small-{i:05}")).collect();
    let reports2: Vec<_> = small
        .iter()
        .map(|v| {
            p.send(ProducerRecord::new("small", v.as_bytes()).partition(0))
                .unwrap()
        })
        .collect();
    p.flush().unwrap();
    for r in reports.into_iter().chain(reports2) {
        r.wait()
            .unwrap_or_else(|e| panic!("produce: {e}: {}", b.log_text()));
    }

    // The stalled client: one fetch of the whole big partition, then it never reads.
    let mut slow = connect_from(Ipv4Addr::LOCALHOST, addr(b.port), Some(4096));
    let fetch = native::FetchRequest {
        max_wait_ms: 0,
        min_bytes: 1,
        max_bytes: 24 << 20,
        partitions: vec![native::FetchPartition {
            topic: "big".into(),
            partition: 0,
            offset: 0,
            max_bytes: 24 << 20,
        }],
    };
    let sent_at = Instant::now();
    slow.write_all(&native_request(ApiKey::Fetch, &fetch))
        .unwrap();
    // Until its receive queue holds data: its range is being sent (and is stuck).
    while queued(&slow) == 0 {
        assert!(
            sent_at.elapsed() < DEADLINE,
            "the big fetch was never answered: {}",
            b.log_text()
        );
        std::thread::sleep(Duration::from_millis(20));
    }

    // Another consumer of the same shard reads every record meanwhile (measured here: in
    // 0.3-0.4 s; before the fix it got none in 120 s).
    let mut cons = rill_testkit::consumer(&b, "small", StartFrom::Beginning);
    let mut got = Vec::new();
    let start = Instant::now();
    while got.len() < small.len() {
        got.extend(cons.poll(Duration::from_millis(200)).unwrap().to_owned());
        assert!(
            start.elapsed() < DEADLINE,
            "only {} of {} records beside the stalled client: {}",
            got.len(),
            small.len(),
            b.log_text()
        );
    }
    assert_eq!(values(&got), small);
    drop(cons);

    // The stalled connection is closed once its reply is past the send timeout (the broker
    // says so), its response cut short.
    let start = Instant::now();
    while !b.log_text().contains("--fetch-send-timeout-ms") {
        assert!(
            start.elapsed() < DEADLINE,
            "the slow connection was never timed out: {}",
            b.log_text()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut head = [0u8; 4];
    slow.set_read_timeout(Some(DEADLINE)).unwrap();
    slow.read_exact(&mut head).unwrap();
    let frame_len = u32::from_le_bytes(head) as usize;
    assert!(frame_len > 20 << 20, "the fetch answered {frame_len} bytes");
    let rest = read_to_close(&mut slow).unwrap_or_else(|| {
        panic!(
            "the broker never closed the slow connection: {}",
            b.log_text()
        )
    });
    assert!(
        rest < frame_len,
        "the slow client got its whole response ({rest} of {frame_len} bytes)"
    );
    assert!(sent_at.elapsed() >= Duration::from_millis(SEND_TIMEOUT_MS));

    // And the shard still serves the big partition to a client that reads.
    let mut cons =
        rill::client::Consumer::new(ClientConfig::new(b.bootstrap()), ConsumerConfig::default())
            .unwrap();
    cons.assign("big", Some(vec![0]), StartFrom::Beginning)
        .unwrap();
    let mut n = 0;
    let start = Instant::now();
    while n < 24 * 1024 {
        n += cons.poll(Duration::from_millis(200)).unwrap().count();
        assert!(
            start.elapsed() < DEADLINE,
            "only {n} big records: {}",
            b.log_text()
        );
    }
    assert_eq!(n, 24 * 1024);
}

/// Idle sockets that fill the connection cap are closed after the idle timeout, on both
/// listeners; then real clients connect and work. A long poll longer than the idle timeout
/// is not idle.
#[test]
fn idle_connections_are_closed_and_free_the_cap() {
    const CAP: usize = 8;
    // The idle timeout comes from a --config file (as every broker flag can).
    let conf_dir = tempfile::tempdir().unwrap();
    let conf = conf_dir.path().join("broker.toml");
    std::fs::write(&conf, "connection-idle-timeout-ms = 3000\n").unwrap();
    let b = TestBroker::start_kafka(
        1,
        &[
            "--max-connections-per-shard",
            &CAP.to_string(),
            "--config",
            conf.to_str().unwrap(),
        ],
    );
    let kafka = addr(b.kafka_port.unwrap());
    // Fill each listener's cap with answered (so admitted) connections, left idle: the
    // harness's readiness checks may still hold a slot for a moment, so refused ones retry.
    let fill = |to: SocketAddr, answers: fn(&mut TcpStream) -> bool| -> Vec<TcpStream> {
        let start = Instant::now();
        let mut held = Vec::new();
        while held.len() < CAP {
            let mut s = TcpStream::connect(to).unwrap();
            if answers(&mut s) {
                held.push(s);
            }
            assert!(start.elapsed() < DEADLINE, "cannot fill the cap of {to}");
        }
        held
    };
    let mut idle_native = fill(addr(b.port), native_answers);
    let mut idle_kafka = fill(kafka, kafka_answers);
    // Full: one more is refused (closed at once) on each listener.
    let mut extra = TcpStream::connect(addr(b.port)).unwrap();
    assert!(!native_answers(&mut extra));
    let mut extra_k = TcpStream::connect(kafka).unwrap();
    assert!(!kafka_answers(&mut extra_k));

    // Past the idle timeout every idle socket is closed by the broker.
    for s in idle_native.iter_mut().chain(idle_kafka.iter_mut()) {
        let start = Instant::now();
        while !closed_within(s, Duration::from_millis(500)) {
            assert!(start.elapsed() < DEADLINE, "an idle connection stayed open");
        }
    }
    assert!(b.log_text().contains("refused a connection"));

    // Real clients get in again: native admin calls and a Kafka request.
    let mut c = b.client();
    c.create_topic("t", 1, 1, Default::default()).unwrap();
    rill_testkit::produce_values(&b, "t", 0, (0..10).map(|i| format!("v{i}")));
    let got = consume_exactly(&b, "t", StartFrom::Beginning, 10);
    assert_eq!(values(&got).len(), 10);
    let mut k = TcpStream::connect(kafka).unwrap();
    assert!(kafka_answers(&mut k));

    // A long poll (5 s) longer than the idle timeout (3 s) is answered, not cut off.
    let started = Instant::now();
    let (r, _) = c
        .fetch("t", 0, 10, Duration::from_millis(5000), 1, 1 << 20)
        .unwrap();
    assert_eq!(r.error_code, 0);
    assert!(started.elapsed() >= Duration::from_millis(4500));
}

/// A client idle longer than the broker's idle timeout goes on working: the producer and the
/// admin client reconnect.
#[test]
fn clients_survive_the_broker_closing_their_idle_connections() {
    let b = TestBroker::start_with_env(
        1,
        &["--connection-idle-timeout-ms", "1000"],
        &[("RUST_LOG", "info,rill::native::connection=debug")],
    );
    let mut c = b.client();
    c.create_topic("t", 1, 1, Default::default()).unwrap();
    let p = producer(&b, 1 << 10);
    p.send(ProducerRecord::new("t", &b"first"[..]).partition(0))
        .unwrap()
        .wait()
        .unwrap();
    // The broker closes the idle connections: the admin client's, the producer's metadata
    // connection and its produce connection.
    let start = Instant::now();
    while b
        .log_text()
        .matches("(--connection-idle-timeout-ms); closing")
        .count()
        < 3
    {
        assert!(start.elapsed() < DEADLINE, "{}", b.log_text());
        std::thread::sleep(Duration::from_millis(100));
    }
    p.send(ProducerRecord::new("t", &b"second"[..]).partition(0))
        .unwrap()
        .wait()
        .unwrap();
    assert_eq!(c.list_topics().unwrap(), vec!["t".to_string()]);
    let got = consume_exactly(&b, "t", StartFrom::Beginning, 2);
    assert_eq!(values(&got), vec!["first", "second"]);
}

/// --max-connections-per-ip refuses one address's excess on both listeners, while another
/// address still connects, and a freed slot is usable again.
#[test]
fn max_connections_per_ip_refuses_only_that_address() {
    const PER_IP: usize = 3;
    // Set through the environment (as every broker flag can be).
    let b = TestBroker::start_kafka_with_env(1, &[], &[("RILL_MAX_CONNECTIONS_PER_IP", "3")]);
    for (port, answers) in [
        (b.port, native_answers as fn(&mut TcpStream) -> bool),
        (b.kafka_port.unwrap(), kafka_answers),
    ] {
        let to = addr(port);
        // The harness's readiness checks may still hold slots for a moment: wait until
        // 127.0.0.1 holds exactly PER_IP answered connections.
        let start = Instant::now();
        let mut held: Vec<TcpStream> = Vec::new();
        while held.len() < PER_IP {
            let mut s = connect_from(Ipv4Addr::LOCALHOST, to, None);
            if answers(&mut s) {
                held.push(s);
            }
            assert!(
                start.elapsed() < DEADLINE,
                "cannot open {PER_IP} connections"
            );
        }
        let mut excess = connect_from(Ipv4Addr::LOCALHOST, to, None);
        assert!(
            !answers(&mut excess),
            "a 4th connection from 127.0.0.1 on {to} was served"
        );
        // Another client address is not affected.
        let mut other: Vec<TcpStream> = (0..PER_IP)
            .map(|_| connect_from(Ipv4Addr::new(127, 0, 0, 2), to, None))
            .collect();
        for s in &mut other {
            assert!(answers(s), "127.0.0.2 was refused on {to}");
        }
        // A freed slot is given to the next connection.
        drop(held.pop());
        let start = Instant::now();
        loop {
            let mut s = connect_from(Ipv4Addr::LOCALHOST, to, None);
            if answers(&mut s) {
                break;
            }
            assert!(start.elapsed() < DEADLINE, "the freed slot never came back");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    let log = b.log_text();
    assert!(log.contains("--max-connections-per-ip 3 reached"), "{log}");
}

/// Kafka's NOT_COORDINATOR.
const NOT_COORDINATOR: i16 = 16;

/// One raw Kafka request on its own connection; `None` when the broker closed it instead of
/// answering.
fn kafka_call<Req, Resp>(
    to: SocketAddr,
    api: kafka_protocol::messages::ApiKey,
    version: i16,
    req: &Req,
) -> Option<Resp>
where
    Req: kafka_protocol::protocol::Encodable,
    Resp: kafka_protocol::protocol::Decodable,
{
    use kafka_protocol::messages::{RequestHeader, ResponseHeader};
    use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
    let mut header = RequestHeader::default();
    header.request_api_key = api as i16;
    header.request_api_version = version;
    header.correlation_id = 5;
    header.client_id = Some(StrBytes::from_static_str("conn-safety"));
    let mut body = BytesMut::new();
    header
        .encode(&mut body, api.request_header_version(version))
        .unwrap();
    req.encode(&mut body, version)
        .unwrap_or_else(|e| panic!("{api:?} v{version}: {e}"));
    let mut s = TcpStream::connect(to).unwrap();
    s.set_read_timeout(Some(DEADLINE)).unwrap();
    s.write_all(&(body.len() as i32).to_be_bytes()).unwrap();
    s.write_all(&body).unwrap();
    let mut len = [0u8; 4];
    s.read_exact(&mut len).ok()?;
    let mut resp = vec![0u8; i32::from_be_bytes(len) as usize];
    s.read_exact(&mut resp).unwrap();
    let mut resp = bytes::Bytes::from(resp);
    ResponseHeader::decode(&mut resp, api.response_header_version(version)).unwrap();
    let r = Resp::decode(&mut resp, version).unwrap();
    assert!(!resp.has_remaining(), "{api:?} v{version}: bytes left");
    Some(r)
}

/// Every group and offset API, sent to a shard that does not coordinate the group, answers
/// NOT_COORDINATOR (native, and Kafka at every served version) instead of failing to encode
/// its answer and closing the connection.
#[test]
fn group_apis_on_a_non_coordinator_shard_answer_not_coordinator() {
    use kafka_protocol::messages::{self as k, ApiKey as K, GroupId, TopicName};
    use kafka_protocol::protocol::StrBytes;
    let b = TestBroker::start_kafka(2, &[]);
    let mut c = b.client();
    let group = "payments";
    let coordinator = c.find_coordinator(group).unwrap();
    let shard = coordinator.port() - b.port;
    let other = 1 - shard;
    let native_other = addr(b.port + other);
    let kafka_other = addr(b.kafka_port.unwrap() + other);

    // Native: a raw call per API.
    let (d, _): (native::DescribeGroupsResponse, _) = c
        .call(
            native_other,
            ApiKey::DescribeGroups,
            &native::DescribeGroupsRequest {
                groups: vec![group.into()],
            },
            &[],
        )
        .unwrap();
    assert_eq!(d.groups.len(), 1);
    assert_eq!(d.groups[0].error_code, ErrorCode::NotCoordinator.code());
    assert_eq!(d.groups[0].group, group);
    let (o, _): (native::OffsetFetchResponse, _) = c
        .call(
            native_other,
            ApiKey::OffsetFetch,
            &native::OffsetFetchRequest {
                group: group.into(),
                partitions: vec![("t".into(), 0)],
            },
            &[],
        )
        .unwrap();
    assert_eq!(o.error_code, ErrorCode::NotCoordinator.code());
    let (h, _): (native::GroupStatusResponse, _) = c
        .call(
            native_other,
            ApiKey::Heartbeat,
            &native::HeartbeatRequest {
                group: group.into(),
                member_id: "m".into(),
                group_instance_id: None,
                generation: 1,
            },
            &[],
        )
        .unwrap();
    assert_eq!(h.error_code, ErrorCode::NotCoordinator.code());
    let (cm, _): (native::GroupStatusResponse, _) = c
        .call(
            native_other,
            ApiKey::OffsetCommit,
            &native::OffsetCommitRequest {
                group: group.into(),
                member_id: String::new(),
                group_instance_id: None,
                generation: -1,
                offsets: vec![("t".into(), 0, 1, String::new())],
            },
            &[],
        )
        .unwrap();
    assert_eq!(cm.error_code, ErrorCode::NotCoordinator.code());
    // The coordinator itself describes the group (unknown to it: "Dead").
    assert_eq!(c.describe_group(group).unwrap().state, "Dead");

    // Kafka: every served version of every group API.
    let gid = || GroupId(StrBytes::from_static_str("payments"));
    let s = StrBytes::from_static_str;
    for v in 0..=5 {
        let mut r = k::DescribeGroupsRequest::default();
        r.groups = vec![gid()];
        let resp: k::DescribeGroupsResponse = kafka_call(kafka_other, K::DescribeGroups, v, &r)
            .unwrap_or_else(|| panic!("DescribeGroups v{v}: connection closed"));
        assert_eq!(
            resp.groups[0].error_code, NOT_COORDINATOR,
            "DescribeGroups v{v}"
        );
    }
    for v in 0..=9 {
        let mut r = k::JoinGroupRequest::default();
        r.group_id = gid();
        r.session_timeout_ms = 10_000;
        if v >= 1 {
            r.rebalance_timeout_ms = 10_000;
        }
        r.protocol_type = s("consumer");
        let mut p = k::join_group_request::JoinGroupRequestProtocol::default();
        p.name = s("range");
        r.protocols = vec![p];
        let resp: k::JoinGroupResponse = kafka_call(kafka_other, K::JoinGroup, v, &r)
            .unwrap_or_else(|| panic!("JoinGroup v{v}: connection closed"));
        assert_eq!(resp.error_code, NOT_COORDINATOR, "JoinGroup v{v}");
    }
    for v in 0..=5 {
        let mut r = k::SyncGroupRequest::default();
        r.group_id = gid();
        r.generation_id = 1;
        r.member_id = s("m");
        if v >= 5 {
            r.protocol_type = Some(s("consumer"));
            r.protocol_name = Some(s("range"));
        }
        let resp: k::SyncGroupResponse = kafka_call(kafka_other, K::SyncGroup, v, &r)
            .unwrap_or_else(|| panic!("SyncGroup v{v}: connection closed"));
        assert_eq!(resp.error_code, NOT_COORDINATOR, "SyncGroup v{v}");
    }
    for v in 0..=4 {
        let mut r = k::HeartbeatRequest::default();
        r.group_id = gid();
        r.generation_id = 1;
        r.member_id = s("m");
        let resp: k::HeartbeatResponse = kafka_call(kafka_other, K::Heartbeat, v, &r)
            .unwrap_or_else(|| panic!("Heartbeat v{v}: connection closed"));
        assert_eq!(resp.error_code, NOT_COORDINATOR, "Heartbeat v{v}");
    }
    for v in 0..=5 {
        let mut r = k::LeaveGroupRequest::default();
        r.group_id = gid();
        if v >= 3 {
            let mut m = k::leave_group_request::MemberIdentity::default();
            m.member_id = s("m");
            r.members = vec![m];
        } else {
            r.member_id = s("m");
        }
        let resp: k::LeaveGroupResponse = kafka_call(kafka_other, K::LeaveGroup, v, &r)
            .unwrap_or_else(|| panic!("LeaveGroup v{v}: connection closed"));
        assert_eq!(resp.error_code, NOT_COORDINATOR, "LeaveGroup v{v}");
    }
    for v in 2..=9 {
        let mut r = k::OffsetCommitRequest::default();
        r.group_id = gid();
        r.generation_id_or_member_epoch = -1;
        let mut t = k::offset_commit_request::OffsetCommitRequestTopic::default();
        t.name = TopicName(s("t"));
        let mut p = k::offset_commit_request::OffsetCommitRequestPartition::default();
        p.committed_offset = 1;
        t.partitions = vec![p];
        r.topics = vec![t];
        let resp: k::OffsetCommitResponse = kafka_call(kafka_other, K::OffsetCommit, v, &r)
            .unwrap_or_else(|| panic!("OffsetCommit v{v}: connection closed"));
        assert_eq!(
            resp.topics[0].partitions[0].error_code, NOT_COORDINATOR,
            "OffsetCommit v{v}"
        );
    }
    for v in 1..=9 {
        let mut r = k::OffsetFetchRequest::default();
        if v >= 8 {
            let mut g = k::offset_fetch_request::OffsetFetchRequestGroup::default();
            g.group_id = gid();
            let mut t = k::offset_fetch_request::OffsetFetchRequestTopics::default();
            t.name = TopicName(s("t"));
            t.partition_indexes = vec![0];
            g.topics = Some(vec![t]);
            r.groups = vec![g];
        } else {
            r.group_id = gid();
            let mut t = k::offset_fetch_request::OffsetFetchRequestTopic::default();
            t.name = TopicName(s("t"));
            t.partition_indexes = vec![0];
            r.topics = Some(vec![t]);
        }
        let resp: k::OffsetFetchResponse = kafka_call(kafka_other, K::OffsetFetch, v, &r)
            .unwrap_or_else(|| panic!("OffsetFetch v{v}: connection closed"));
        let code = match v {
            8.. => resp.groups[0].error_code,
            // v1 has no top-level error code: the partition carries it.
            1 => resp.topics[0].partitions[0].error_code,
            _ => resp.error_code,
        };
        assert_eq!(code, NOT_COORDINATOR, "OffsetFetch v{v}");
    }
    for v in 0..=1 {
        let mut r = k::ConsumerGroupHeartbeatRequest::default();
        r.group_id = gid();
        r.member_id = s("m");
        r.rebalance_timeout_ms = 10_000;
        r.subscribed_topic_names = Some(vec![TopicName(s("t"))]);
        r.topic_partitions = Some(Vec::new());
        let resp: k::ConsumerGroupHeartbeatResponse =
            kafka_call(kafka_other, K::ConsumerGroupHeartbeat, v, &r)
                .unwrap_or_else(|| panic!("ConsumerGroupHeartbeat v{v}: connection closed"));
        assert_eq!(
            resp.error_code, NOT_COORDINATOR,
            "ConsumerGroupHeartbeat v{v}"
        );
    }
    for v in 0..=1 {
        let mut r = k::ConsumerGroupDescribeRequest::default();
        r.group_ids = vec![gid()];
        let resp: k::ConsumerGroupDescribeResponse =
            kafka_call(kafka_other, K::ConsumerGroupDescribe, v, &r)
                .unwrap_or_else(|| panic!("ConsumerGroupDescribe v{v}: connection closed"));
        assert_eq!(
            resp.groups[0].error_code, NOT_COORDINATOR,
            "ConsumerGroupDescribe v{v}"
        );
    }
}

/// Opens `n` connections to `port` that each announce a frame of `announced` bytes, send
/// `header` (the length prefix) and 16 more bytes, then stall.
fn stallers(port: u16, n: usize, header: [u8; 4]) -> Vec<TcpStream> {
    (0..n)
        .map(|_| {
            let mut s = TcpStream::connect(addr(port)).expect("connect");
            s.write_all(&header).unwrap();
            s.write_all(&[0u8; 16]).unwrap();
            s
        })
        .collect()
}

/// What the memory attack measured: broker RSS (KiB) before it, peak RSS (VmHWM) after it,
/// and the producer's round trips beside it.
struct MemoryAttack {
    before_kib: u64,
    peak_kib: u64,
    after_kib: u64,
}

/// 500 native and 500 Kafka connections announce 64 MiB frames and stall after a few bytes;
/// 8 more announce 60 MiB and send 48 MiB of it, then stall. Meanwhile another client
/// produces and consumes. `budget`: `--max-request-memory-bytes` (None: the default).
fn memory_attack(budget: Option<&str>) -> (TestBroker, MemoryAttack) {
    let mut extra = vec!["--fsync", "never"];
    if let Some(b) = budget {
        extra.extend(["--max-request-memory-bytes", b]);
    }
    let b = TestBroker::start_kafka(1, &extra);
    let kafka = b.kafka_port.unwrap();
    let mut c = b.client();
    c.create_topic("t", 1, 1, Default::default()).unwrap();
    let round = |n: usize, tag: &str| {
        let sent: Vec<String> = (0..n).map(|i| format!("{tag}-{i:05}")).collect();
        let p = producer(&b, 16 << 10);
        let reports: Vec<_> = sent
            .iter()
            .map(|v| {
                p.send(ProducerRecord::new("t", v.as_bytes()).partition(0))
                    .unwrap()
            })
            .collect();
        p.flush().unwrap();
        let first = reports
            .into_iter()
            .map(|r| {
                r.wait()
                    .unwrap_or_else(|e| panic!("produce: {e}: {}", b.log_text()))
            })
            .filter_map(|m| m.offset)
            .min()
            .unwrap();
        let got = consume_exactly(&b, "t", StartFrom::Offset(first), n);
        assert_eq!(values(&got), sent);
    };
    round(2000, "before");
    let before_kib = b.status_kib("VmRSS");

    let frame = 64u32 << 20;
    let mut held = stallers(b.port, 500, frame.to_le_bytes());
    held.extend(stallers(kafka, 500, (frame as i32).to_be_bytes()));
    let chunk = std::sync::Arc::new(vec![0u8; 1 << 20]);
    let senders: Vec<_> = (0..8)
        .map(|_| {
            let chunk = chunk.clone();
            let port = b.port;
            std::thread::spawn(move || {
                let mut s = TcpStream::connect(addr(port)).expect("connect");
                // Past this the broker is not reading us (no budget left): stop sending.
                s.set_write_timeout(Some(Duration::from_secs(3))).unwrap();
                let _ = s.write_all(&(60u32 << 20).to_le_bytes());
                for _ in 0..48 {
                    if s.write_all(&chunk).is_err() {
                        break;
                    }
                }
                s
            })
        })
        .collect();
    held.extend(senders.into_iter().map(|t| t.join().unwrap()));

    // Another client keeps producing and consuming beside them.
    for r in 0..3 {
        round(2000, &format!("during{r}"));
    }
    let attack = MemoryAttack {
        before_kib,
        peak_kib: b.status_kib("VmHWM"),
        after_kib: b.status_kib("VmRSS"),
    };
    eprintln!(
        "budget {budget:?}: RSS before {} MiB, peak {} MiB, after {} MiB",
        attack.before_kib >> 10,
        attack.peak_kib >> 10,
        attack.after_kib >> 10
    );
    drop(held);
    (b, attack)
}

/// Request memory is bounded by --max-request-memory-bytes (default 128 MiB per shard), not
/// by what length prefixes announce: 1008 connections announcing 60-64 MiB frames leave the
/// broker's RSS under the budget plus its memory before (the overhead: 64 MiB for the
/// producer's data in the tail cache, connection state and allocator slack), and another
/// client produces and consumes meanwhile.
#[test]
fn announced_frames_wait_for_request_memory() {
    const BUDGET_MIB: u64 = 128;
    const OVERHEAD_MIB: u64 = 64;
    let (b, m) = memory_attack(None);
    assert!(
        m.peak_kib < m.before_kib + ((BUDGET_MIB + OVERHEAD_MIB) << 10),
        "peak RSS {} MiB, {} MiB before: {}",
        m.peak_kib >> 10,
        m.before_kib >> 10,
        b.log_text()
    );
}

/// The same attack with a budget too large to matter, for RESULTS.md: what the budget saves.
#[test]
#[ignore]
fn announced_frames_without_a_budget() {
    memory_attack(Some(&(8u64 << 30).to_string()));
}

/// A request larger than the whole budget is refused with an error naming the flag (set here
/// by its RILL_ variable), not waited on.
#[test]
fn a_request_larger_than_the_budget_is_refused() {
    let b = TestBroker::start_with_env(1, &[], &[("RILL_MAX_REQUEST_MEMORY_BYTES", "1048576")]);
    let mut s = TcpStream::connect(addr(b.port)).unwrap();
    s.write_all(&(2u32 << 20).to_le_bytes()).unwrap();
    s.write_all(&[0u8; 64]).unwrap();
    let mut reply = Vec::new();
    s.set_read_timeout(Some(DEADLINE)).unwrap();
    let _ = s.read_to_end(&mut reply);
    assert!(reply.len() > 10, "no answer: {}", b.log_text());
    let code = i16::from_le_bytes([reply[8], reply[9]]);
    assert_eq!(ErrorCode::from_code(code), ErrorCode::InvalidRequest);
    let text = String::from_utf8_lossy(&reply);
    assert!(text.contains("--max-request-memory-bytes"), "{text}");
    // Smaller requests are served.
    let mut c = b.client();
    c.create_topic("t", 1, 1, Default::default()).unwrap();
}
