//! Group membership over the wire (the coordinator shell): FindCoordinator routes to the
//! coordinating shard, joins and syncs complete rebalances, heartbeats and generations are
//! checked, and a silent member is removed at its session timeout.

use std::net::{SocketAddr, ToSocketAddrs};
use std::time::{Duration, Instant};

use rill::client::{Client, ClientConfig};
use rill::protocol::messages::*;
use rill::protocol::{ApiKey, ErrorCode};
use rill_testkit::{TestBroker, DEADLINE};

fn client(b: &TestBroker) -> Client {
    Client::connect(ClientConfig::new(b.bootstrap())).unwrap()
}

fn coordinator(c: &mut Client, bootstrap: SocketAddr, group: &str) -> SocketAddr {
    let (r, _): (FindCoordinatorResponse, _) = c
        .call(
            bootstrap,
            ApiKey::FindCoordinator,
            &FindCoordinatorRequest {
                group: group.into(),
            },
            &[],
        )
        .unwrap();
    assert_eq!(r.error_code, 0, "{}", r.message);
    (r.host.as_str(), r.port)
        .to_socket_addrs()
        .unwrap()
        .next()
        .unwrap()
}

fn join(c: &mut Client, at: SocketAddr, member: &str) -> JoinGroupResponse {
    let req = JoinGroupRequest {
        group: "g".into(),
        member_id: member.into(),
        group_instance_id: None,
        session_timeout_ms: 1_500,
        rebalance_timeout_ms: 20_000,
        protocol_type: "consumer".into(),
        protocols: vec![("range".into(), b"t".to_vec())],
    };
    c.call(at, ApiKey::JoinGroup, &req, &[]).unwrap().0
}

fn sync(
    c: &mut Client,
    at: SocketAddr,
    member: &str,
    generation: u32,
    assignments: Vec<(String, Vec<u8>)>,
) -> SyncGroupResponse {
    let req = SyncGroupRequest {
        group: "g".into(),
        member_id: member.into(),
        group_instance_id: None,
        generation,
        assignments,
    };
    c.call(at, ApiKey::SyncGroup, &req, &[]).unwrap().0
}

fn heartbeat(c: &mut Client, at: SocketAddr, member: &str, generation: u32) -> ErrorCode {
    let req = HeartbeatRequest {
        group: "g".into(),
        member_id: member.into(),
        group_instance_id: None,
        generation,
    };
    let (r, _): (GroupStatusResponse, _) = c.call(at, ApiKey::Heartbeat, &req, &[]).unwrap();
    ErrorCode::from_code(r.error_code)
}

#[test]
fn members_join_sync_heartbeat_and_expire_through_the_coordinator() {
    let b = TestBroker::start(2, &[]);
    let bootstrap: SocketAddr = b.bootstrap().parse().unwrap();
    let mut a = client(&b);
    let at = coordinator(&mut a, bootstrap, "g");
    // The other shard is not the coordinator and says so.
    let other: SocketAddr = if at.port() == b.port {
        format!("127.0.0.1:{}", b.port + 1).parse().unwrap()
    } else {
        bootstrap
    };
    let wrong = join(&mut a, other, "");
    assert_eq!(
        ErrorCode::from_code(wrong.error_code),
        ErrorCode::NotCoordinator,
        "{}",
        wrong.message
    );

    // A alone: generation 1, leader, its own assignment back.
    let ra = join(&mut a, at, "");
    assert_eq!((ra.error_code, ra.generation), (0, 1));
    // Every shard is asked: the group shows up whichever shard coordinates it.
    assert_eq!(
        a.list_groups().unwrap(),
        vec![("g".to_string(), "CompletingRebalance".to_string())]
    );
    let o = b.cli(&["group", "list"], None);
    assert!(o.status.success());
    assert_eq!(String::from_utf8_lossy(&o.stdout), "g\n");
    assert_eq!(ra.leader, ra.member_id);
    let sa = sync(
        &mut a,
        at,
        &ra.member_id,
        1,
        vec![(ra.member_id.clone(), b"p0,p1".to_vec())],
    );
    assert_eq!(sa.assignment, b"p0,p1");

    // B joins from another thread: its join waits until A rejoins.
    let bootstrap_s = b.bootstrap();
    let bj = std::thread::spawn(move || {
        let mut c = Client::connect(ClientConfig::new(bootstrap_s)).unwrap();
        let r = join(&mut c, at, "");
        (c, r)
    });
    let start = Instant::now();
    while heartbeat(&mut a, at, &ra.member_id, 1) != ErrorCode::RebalanceInProgress {
        assert!(start.elapsed() < DEADLINE, "A never heard of the rebalance");
        std::thread::sleep(Duration::from_millis(20));
    }
    let ra2 = join(&mut a, at, &ra.member_id);
    let (mut bc, rb) = bj.join().unwrap();
    assert_eq!((ra2.generation, rb.generation), (2, 2));
    assert_eq!(ra2.leader, ra.member_id, "the leader stays");
    assert_eq!(ra2.members.len(), 2);
    assert!(
        rb.members.is_empty(),
        "only the leader gets the member list"
    );

    // B's sync waits for the leader's assignment.
    let rb_id = rb.member_id.clone();
    let bs = std::thread::spawn(move || {
        let r = sync(&mut bc, at, &rb_id, 2, vec![]);
        (bc, r)
    });
    let plan = vec![
        (ra.member_id.clone(), b"p0".to_vec()),
        (rb.member_id.clone(), b"p1".to_vec()),
    ];
    assert_eq!(sync(&mut a, at, &ra.member_id, 2, plan).assignment, b"p0");
    let (mut bc, sb) = bs.join().unwrap();
    assert_eq!(sb.assignment, b"p1");

    // Stale generations and unknown members are refused; the group stays as it is.
    assert_eq!(
        heartbeat(&mut bc, at, &rb.member_id, 1),
        ErrorCode::IllegalGeneration
    );
    assert_eq!(
        heartbeat(&mut bc, at, "ghost", 2),
        ErrorCode::UnknownMemberId
    );
    assert_eq!(heartbeat(&mut bc, at, &rb.member_id, 2), ErrorCode::None);

    // B goes silent: at its session timeout it is removed, and A is told to rejoin.
    let start = Instant::now();
    loop {
        match heartbeat(&mut a, at, &ra.member_id, 2) {
            ErrorCode::None => {}
            ErrorCode::RebalanceInProgress => break,
            other => panic!("unexpected {other}"),
        }
        assert!(start.elapsed() < DEADLINE, "B was never expired");
        std::thread::sleep(Duration::from_millis(100));
    }
    let ra3 = join(&mut a, at, &ra.member_id);
    assert_eq!((ra3.generation, ra3.members.len()), (3, 1));
    assert_eq!(
        heartbeat(&mut bc, at, &rb.member_id, 2),
        ErrorCode::UnknownMemberId
    );
}

fn commit(
    c: &mut Client,
    at: SocketAddr,
    member: &str,
    generation: i32,
    offset: u64,
) -> (ErrorCode, String) {
    let req = OffsetCommitRequest {
        group: "g".into(),
        member_id: member.into(),
        group_instance_id: None,
        generation,
        offsets: vec![
            ("t".into(), 0, offset, format!("meta-{offset}")),
            ("t".into(), 1, offset + 1, String::new()),
        ],
    };
    let (r, _): (GroupStatusResponse, _) = c.call(at, ApiKey::OffsetCommit, &req, &[]).unwrap();
    (ErrorCode::from_code(r.error_code), r.message)
}

fn fetch(c: &mut Client, at: SocketAddr) -> Vec<(String, u32, i64, String)> {
    let req = OffsetFetchRequest {
        group: "g".into(),
        partitions: vec![("t".into(), 0), ("t".into(), 1), ("t".into(), 2)],
    };
    let (r, _): (OffsetFetchResponse, _) = c.call(at, ApiKey::OffsetFetch, &req, &[]).unwrap();
    assert_eq!(r.error_code, 0, "{}", r.message);
    r.offsets
}

#[test]
fn committed_offsets_are_checked_durable_and_survive_a_restart() {
    let mut b = TestBroker::start(2, &[]);
    let bootstrap: SocketAddr = b.bootstrap().parse().unwrap();
    let mut a = client(&b);
    let at = coordinator(&mut a, bootstrap, "g");
    let r = join(&mut a, at, "");
    assert_eq!(
        sync(
            &mut a,
            at,
            &r.member_id,
            1,
            vec![(r.member_id.clone(), b"all".to_vec())]
        )
        .error_code,
        0
    );
    // Refused: a stale generation, an unknown member, an outsider while the group has members.
    assert_eq!(
        commit(&mut a, at, &r.member_id, 0, 5).0,
        ErrorCode::IllegalGeneration
    );
    assert_eq!(
        commit(&mut a, at, "ghost", 1, 5).0,
        ErrorCode::UnknownMemberId
    );
    assert_eq!(commit(&mut a, at, "", -1, 5).0, ErrorCode::UnknownMemberId);
    assert!(
        fetch(&mut a, at).iter().all(|(_, _, o, _)| *o == -1),
        "a refused commit was stored"
    );
    // Accepted, then replaced by a later commit.
    assert_eq!(commit(&mut a, at, &r.member_id, 1, 10).0, ErrorCode::None);
    assert_eq!(commit(&mut a, at, &r.member_id, 1, 42).0, ErrorCode::None);
    let want = vec![
        ("t".to_string(), 0, 42, "meta-42".to_string()),
        ("t".to_string(), 1, 43, String::new()),
        ("t".to_string(), 2, -1, String::new()),
    ];
    assert_eq!(fetch(&mut a, at), want);
    // A restart replays them from __consumer_offsets.
    b.restart();
    let mut c = client(&b);
    let at = coordinator(&mut c, bootstrap, "g");
    assert_eq!(fetch(&mut c, at), want);
    // The group has no members now: an outside commit (reset-offsets) is allowed.
    assert_eq!(commit(&mut c, at, "", -1, 7).0, ErrorCode::None);
    assert_eq!(fetch(&mut c, at)[0].2, 7);
}

#[test]
fn the_offsets_log_is_compacted_and_keeps_the_latest_commit_of_each_key() {
    let mut b = TestBroker::start(
        1,
        &[
            "--offsets-compact-every",
            "6",
            "--offsets-topic-partitions",
            "1",
        ],
    );
    let bootstrap: SocketAddr = b.bootstrap().parse().unwrap();
    let mut a = client(&b);
    let at = coordinator(&mut a, bootstrap, "g");
    let r = join(&mut a, at, "");
    assert_eq!(sync(&mut a, at, &r.member_id, 1, vec![]).error_code, 0);
    for i in 0..40 {
        assert_eq!(commit(&mut a, at, &r.member_id, 1, i).0, ErrorCode::None);
    }
    let s = a.partition_state("__consumer_offsets", 0).unwrap();
    // 80 commit records went in; compaction left the log starting far into them.
    assert!(s.log_start_offset >= 60, "never compacted: {s:?}");
    let want = vec![
        ("t".to_string(), 0, 39, "meta-39".to_string()),
        ("t".to_string(), 1, 40, String::new()),
        ("t".to_string(), 2, -1, String::new()),
    ];
    assert_eq!(fetch(&mut a, at), want);
    b.restart();
    let mut c = client(&b);
    let at = coordinator(&mut c, bootstrap, "g");
    assert_eq!(
        fetch(&mut c, at),
        want,
        "the compacted log replays to the latest commits"
    );
}

/// `--max-groups-per-shard` and `--max-offsets-per-group` bound what commits from outside any
/// group (which need no member) and joins make the coordinator hold.
#[test]
fn groups_and_committed_offsets_are_bounded() {
    let b = TestBroker::start(
        1,
        &[
            "--max-groups-per-shard",
            "2",
            "--max-offsets-per-group",
            "3",
        ],
    );
    let bootstrap: SocketAddr = b.bootstrap().parse().unwrap();
    let mut c = client(&b);
    let commit = |c: &mut Client, group: &str, parts: std::ops::Range<u32>| {
        let req = OffsetCommitRequest {
            group: group.into(),
            member_id: String::new(),
            group_instance_id: None,
            generation: -1,
            offsets: parts
                .map(|p| ("no-such-topic".into(), p, 1, String::new()))
                .collect(),
        };
        let (r, _): (GroupStatusResponse, _) =
            c.call(bootstrap, ApiKey::OffsetCommit, &req, &[]).unwrap();
        (ErrorCode::from_code(r.error_code), r.message)
    };
    assert_eq!(commit(&mut c, "g1", 0..2).0, ErrorCode::None);
    assert_eq!(
        commit(&mut c, "g1", 1..3).0,
        ErrorCode::None,
        "one new offset: 3 held"
    );
    let (code, why) = commit(&mut c, "g1", 3..4);
    assert_eq!(code, ErrorCode::InvalidCommitOffsetSize, "{why}");
    assert!(why.contains("--max-offsets-per-group"), "{why}");
    assert_eq!(commit(&mut c, "g2", 0..1).0, ErrorCode::None);
    let (code, why) = commit(&mut c, "g3", 0..1);
    assert_eq!(code, ErrorCode::InvalidCommitOffsetSize, "{why}");
    assert!(why.contains("--max-groups-per-shard"), "{why}");
    let req = JoinGroupRequest {
        group: "g3".into(),
        member_id: String::new(),
        group_instance_id: None,
        session_timeout_ms: 10_000,
        rebalance_timeout_ms: 20_000,
        protocol_type: "consumer".into(),
        protocols: vec![("range".into(), b"t".to_vec())],
    };
    let (r, _): (JoinGroupResponse, _) = c.call(bootstrap, ApiKey::JoinGroup, &req, &[]).unwrap();
    assert_eq!(
        ErrorCode::from_code(r.error_code),
        ErrorCode::GroupMaxSizeReached,
        "{}",
        r.message
    );
    let listed = b.cli(&["group", "list"], None);
    let listed = String::from_utf8_lossy(&listed.stdout);
    assert!(
        listed.contains("g1") && listed.contains("g2") && !listed.contains("g3"),
        "{listed}"
    );
}
