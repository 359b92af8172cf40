//! Group administration against real brokers: DescribeGroups over the wire, OffsetFetch of
//! every committed offset, `rill group describe` and `rill group reset-offsets`.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use rill::client::{Client, ClientConfig};
use rill::group::consumer_protocol::{MemberAssignment, VERSION};
use rill::protocol::messages::*;
use rill::protocol::{ApiKey, ErrorCode};
use rill_testkit::{produce_values, TestBroker, DEADLINE};

/// Long enough that no member expires while a slow machine runs the CLI.
const SESSION_MS: u32 = 60_000;
const WAIT: Duration = Duration::from_secs(90);

fn client(b: &TestBroker, client_id: &str) -> Client {
    let mut cfg = ClientConfig::new(b.bootstrap());
    cfg.client_id = client_id.into();
    Client::connect(cfg).unwrap()
}

fn join_req(group: &str, member: &str) -> JoinGroupRequest {
    JoinGroupRequest {
        group: group.into(),
        member_id: member.into(),
        group_instance_id: None,
        session_timeout_ms: SESSION_MS,
        rebalance_timeout_ms: 20_000,
        protocol_type: "consumer".into(),
        protocols: vec![("range".into(), Vec::new())],
    }
}

fn sync_req(
    group: &str,
    member: &str,
    generation: u32,
    assignments: Vec<(String, Vec<u8>)>,
) -> SyncGroupRequest {
    SyncGroupRequest {
        group: group.into(),
        member_id: member.into(),
        group_instance_id: None,
        generation,
        assignments,
    }
}

fn assignment(partitions: &[(&str, u32)]) -> Vec<u8> {
    MemberAssignment {
        version: VERSION,
        partitions: partitions
            .iter()
            .map(|(t, p)| (t.to_string(), *p))
            .collect(),
        user_data: Vec::new(),
    }
    .encode()
}

/// One member joins `group` alone and syncs with `mine` as its assignment.
fn one_member(c: &mut Client, at: SocketAddr, group: &str, mine: Vec<u8>) -> String {
    let r = c.join_group(at, &join_req(group, ""), WAIT).unwrap();
    assert_eq!((r.generation, &r.leader), (1, &r.member_id));
    let got = c
        .sync_group(
            at,
            &sync_req(
                group,
                &r.member_id,
                1,
                vec![(r.member_id.clone(), mine.clone())],
            ),
            WAIT,
        )
        .unwrap();
    assert_eq!(got, mine);
    r.member_id
}

/// Two members through raw JoinGroup/SyncGroup calls: A joins alone, B joins (from another
/// thread: its join waits for the rebalance), A hears of it through its heartbeat and
/// rejoins, both sync generation 2 with `plan(a, b)` as the leader's assignments. Returns the
/// clients and member ids (leader first).
fn two_members(
    b: &TestBroker,
    group: &str,
    plan: impl FnOnce(&str, &str) -> Vec<(String, Vec<u8>)>,
) -> ((Client, String), (Client, String)) {
    let mut a = client(b, "client-a");
    let at = a.find_coordinator(group).unwrap();
    let a_id = one_member(&mut a, at, group, Vec::new());
    let bootstrap = b.bootstrap();
    let g = group.to_string();
    let bj = std::thread::spawn(move || {
        let mut cfg = ClientConfig::new(bootstrap);
        cfg.client_id = "client-b".into();
        let mut c = Client::connect(cfg).unwrap();
        let r = c.join_group(at, &join_req(&g, ""), WAIT).unwrap();
        (c, r)
    });
    let start = Instant::now();
    loop {
        match a.heartbeat(at, group, &a_id, 1) {
            Ok(()) => {}
            Err(e) if e.code() == Some(ErrorCode::RebalanceInProgress) => break,
            Err(e) => panic!("heartbeat: {e}"),
        }
        assert!(start.elapsed() < DEADLINE, "A never heard of the rebalance");
        std::thread::sleep(Duration::from_millis(20));
    }
    let ra = a.join_group(at, &join_req(group, &a_id), WAIT).unwrap();
    let (mut bc, rb) = bj.join().unwrap();
    assert_eq!((ra.generation, rb.generation), (2, 2));
    assert_eq!(ra.leader, a_id);
    let b_id = rb.member_id.clone();
    let g = group.to_string();
    let bid = b_id.clone();
    let bs = std::thread::spawn(move || {
        let r = bc.sync_group(at, &sync_req(&g, &bid, 2, vec![]), WAIT);
        (bc, r)
    });
    let plan = plan(&a_id, &b_id);
    let mine = plan.iter().find(|(m, _)| *m == a_id).unwrap().1.clone();
    assert_eq!(
        a.sync_group(at, &sync_req(group, &a_id, 2, plan.clone()), WAIT)
            .unwrap(),
        mine
    );
    let (bc, got) = bs.join().unwrap();
    assert_eq!(
        got.unwrap(),
        plan.iter().find(|(m, _)| *m == b_id).unwrap().1
    );
    ((a, a_id), (bc, b_id))
}

fn text(o: &std::process::Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn assert_one_line_error(o: &std::process::Output, needle: &str) {
    let (out, err) = text(o);
    assert!(!o.status.success(), "should fail: {out}{err}");
    assert_eq!(
        err.trim_end().lines().count(),
        1,
        "one line expected: {err:?}"
    );
    assert!(err.contains(needle), "{err:?} should name {needle:?}");
}

/// The rows of `out` whose first two columns are `topic` and `partition`, split on spaces.
fn row(out: &str, topic: &str, partition: u32) -> Vec<String> {
    let rows: Vec<Vec<String>> = out
        .lines()
        .map(|l| l.split_whitespace().map(str::to_string).collect::<Vec<_>>())
        .filter(|c| c.len() >= 2 && c[0] == topic && c[1] == partition.to_string())
        .collect();
    assert_eq!(rows.len(), 1, "one row for {topic}-{partition} in:\n{out}");
    rows[0].clone()
}

fn committed(c: &mut Client, group: &str, topic: &str) -> Vec<Option<u64>> {
    let at = c.find_coordinator(group).unwrap();
    let parts = (0..2).map(|p| (topic.to_string(), p)).collect();
    c.fetch_offsets(at, group, parts)
        .unwrap()
        .into_iter()
        .map(|(_, _, o, _)| o)
        .collect()
}

#[test]
fn describe_groups_over_the_wire() {
    let b = TestBroker::start(2, &[]);
    let ((mut a, a_id), (_bc, b_id)) = two_members(&b, "g", |a, b| {
        vec![
            (a.to_string(), assignment(&[("t", 0), ("t", 2)])),
            (b.to_string(), assignment(&[("t", 1)])),
        ]
    });
    let d = a.describe_group("g").unwrap();
    assert_eq!(d.error_code, 0, "{}", d.message);
    assert_eq!(
        (
            d.group.as_str(),
            d.state.as_str(),
            d.protocol_type.as_str(),
            d.protocol.as_str(),
            d.generation,
            d.leader.as_str()
        ),
        ("g", "Stable", "consumer", "range", 2, a_id.as_str())
    );
    assert_eq!(d.members.len(), 2);
    let member = |id: &str| d.members.iter().find(|m| m.member_id == id).unwrap();
    assert_eq!(member(&a_id).client_id, "client-a");
    assert_eq!(member(&b_id).client_id, "client-b");
    assert_eq!(member(&b_id).group_instance_id, None);
    let decoded = |id: &str| {
        MemberAssignment::decode(&member(id).assignment)
            .unwrap()
            .partitions
    };
    assert_eq!(
        decoded(&a_id),
        vec![("t".to_string(), 0), ("t".to_string(), 2)]
    );
    assert_eq!(decoded(&b_id), vec![("t".to_string(), 1)]);

    // A group nobody ever used: "Dead", no members, not an error (as Kafka).
    let dead = a.describe_group("nobody").unwrap();
    assert_eq!(
        (dead.state.as_str(), dead.members.len(), dead.error_code),
        ("Dead", 0, 0)
    );

    // The shard that does not coordinate "g" answers NOT_COORDINATOR for it.
    let at = a.find_coordinator("g").unwrap();
    let other: SocketAddr = if at.port() == b.port {
        format!("127.0.0.1:{}", b.port + 1).parse().unwrap()
    } else {
        b.bootstrap().parse().unwrap()
    };
    let req = DescribeGroupsRequest {
        groups: vec!["g".into()],
    };
    let (r, _): (DescribeGroupsResponse, _) =
        a.call(other, ApiKey::DescribeGroups, &req, &[]).unwrap();
    assert_eq!(r.groups.len(), 1);
    assert_eq!(
        ErrorCode::from_code(r.groups[0].error_code),
        ErrorCode::NotCoordinator,
        "{}",
        r.groups[0].message
    );
    assert!(r.groups[0].members.is_empty());
}

#[test]
fn offset_fetch_of_no_partitions_returns_every_committed_offset() {
    let b = TestBroker::start(2, &[]);
    let mut c = client(&b, "tool");
    let at = c.find_coordinator("g").unwrap();
    assert!(
        c.fetch_offsets(at, "g", vec![]).unwrap().is_empty(),
        "nothing committed yet"
    );
    let offsets = vec![
        ("u".to_string(), 0, 9, "m".to_string()),
        ("t".to_string(), 1, 5, String::new()),
        ("t".to_string(), 0, 3, "x".to_string()),
    ];
    c.commit_offsets(at, "g", "", -1, offsets).unwrap();
    c.commit_offsets(at, "g", "", -1, vec![("t".into(), 1, 6, String::new())])
        .unwrap();
    // Another group's commits stay out of it.
    let at_h = c.find_coordinator("h").unwrap();
    c.commit_offsets(at_h, "h", "", -1, vec![("t".into(), 0, 1, String::new())])
        .unwrap();
    assert_eq!(
        c.fetch_offsets(at, "g", vec![]).unwrap(),
        vec![
            ("t".to_string(), 0, Some(3), "x".to_string()),
            ("t".to_string(), 1, Some(6), String::new()),
            ("u".to_string(), 0, Some(9), "m".to_string()),
        ]
    );
    // The same over the raw API: every offset, none of them -1.
    let req = OffsetFetchRequest {
        group: "g".into(),
        partitions: vec![],
    };
    let (r, _): (OffsetFetchResponse, _) = c.call(at, ApiKey::OffsetFetch, &req, &[]).unwrap();
    assert_eq!(r.error_code, 0, "{}", r.message);
    assert_eq!(
        r.offsets
            .iter()
            .map(|(t, p, o, _)| (t.as_str(), *p, *o))
            .collect::<Vec<_>>(),
        vec![("t", 0, 3), ("t", 1, 6), ("u", 0, 9)]
    );
}

#[test]
fn cli_group_describe_shows_members_commits_log_ends_and_lag() {
    let b = TestBroker::start(2, &[]);
    let o = b.cli(&["topic", "create", "t", "--partitions", "2"], None);
    assert!(o.status.success(), "{:?}", text(&o));
    let o = b.cli(&["topic", "create", "u", "--partitions", "1"], None);
    assert!(o.status.success(), "{:?}", text(&o));
    produce_values(&b, "t", 0, (0..10).map(|i| format!("a{i}")));
    produce_values(&b, "t", 1, (0..4).map(|i| format!("b{i}")));
    produce_values(&b, "u", 0, (0..2).map(|i| format!("c{i}")));
    // Commits from outside the group, before anyone joins.
    let mut tool = client(&b, "tool");
    let at = tool.find_coordinator("g").unwrap();
    tool.commit_offsets(
        at,
        "g",
        "",
        -1,
        vec![
            ("t".into(), 0, 3, String::new()),
            ("u".into(), 0, 1, String::new()),
        ],
    )
    .unwrap();

    // A has t-0 and t-1; B is some other client whose assignment is not rill's format.
    let ((_a, a_id), (_bc, b_id)) = two_members(&b, "g", |a, b| {
        vec![
            (a.to_string(), assignment(&[("t", 0), ("t", 1)])),
            (b.to_string(), b"\xffnot a rill assignment".to_vec()),
        ]
    });
    let o = b.cli(&["group", "describe", "g"], None);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}{err}");
    let first = out.lines().next().unwrap();
    for want in ["group g", "state Stable", "protocol range", "generation 2"] {
        assert!(first.contains(want), "{first:?} should say {want:?}");
    }
    assert!(out.contains("TOPIC"), "{out}");
    let member_row = |id: &str| -> Vec<String> {
        out.lines()
            .map(|l| l.split_whitespace().map(str::to_string).collect::<Vec<_>>())
            .find(|c| c.first().map(String::as_str) == Some(id))
            .unwrap_or_else(|| panic!("no member row for {id} in:\n{out}"))
    };
    assert_eq!(member_row(&a_id), [a_id.as_str(), "client-a", "-", "2"]);
    assert_eq!(
        member_row(&b_id),
        [b_id.as_str(), "client-b", "-", "?"],
        "an undecodable assignment shows as ?"
    );
    // TOPIC PARTITION MEMBER COMMITTED LOG-END LAG
    assert_eq!(row(&out, "t", 0), ["t", "0", a_id.as_str(), "3", "10", "7"]);
    assert_eq!(
        row(&out, "t", 1),
        ["t", "1", a_id.as_str(), "-", "4", "-"],
        "nothing committed: no lag"
    );
    assert_eq!(
        row(&out, "u", 0),
        ["u", "0", "-", "1", "2", "1"],
        "committed but assigned to no member"
    );

    let o = b.cli(&["group", "describe", "nobody"], None);
    assert_one_line_error(&o, "group 'nobody' does not exist");
}

#[test]
fn cli_reset_offsets_is_refused_while_members_live_then_moves_offsets() {
    let b = TestBroker::start(2, &[]);
    let o = b.cli(&["topic", "create", "t", "--partitions", "2"], None);
    assert!(o.status.success(), "{:?}", text(&o));
    produce_values(&b, "t", 0, (0..10).map(|i| format!("a{i}")));
    produce_values(&b, "t", 1, (0..6).map(|i| format!("b{i}")));
    let mut c = client(&b, "member");
    assert_eq!(c.truncate("t", 0, 2).unwrap(), 2, "t-0 starts at 2");

    let at = c.find_coordinator("g").unwrap();
    let id = one_member(&mut c, at, "g", assignment(&[("t", 0), ("t", 1)]));
    c.commit_offsets(
        at,
        "g",
        &id,
        1,
        vec![
            ("t".into(), 0, 5, String::new()),
            ("t".into(), 1, 5, String::new()),
        ],
    )
    .unwrap();
    let o = b.cli(
        &[
            "group",
            "reset-offsets",
            "g",
            "--topic",
            "t",
            "--to",
            "earliest",
        ],
        None,
    );
    assert_one_line_error(
        &o,
        "group 'g' has 1 live member: stop it before resetting offsets",
    );
    assert_eq!(committed(&mut c, "g", "t"), [Some(5), Some(5)], "unchanged");

    c.leave_group(at, "g", &id).unwrap();
    let reset = |to: &str| {
        let o = b.cli(
            &["group", "reset-offsets", "g", "--topic", "t", "--to", to],
            None,
        );
        let (out, err) = text(&o);
        assert!(o.status.success(), "--to {to}: {out}{err}");
        (out, err)
    };
    let (out, _) = reset("earliest");
    assert_eq!(committed(&mut c, "g", "t"), [Some(2), Some(0)]);
    assert_eq!(row(&out, "t", 0), ["t", "0", "2"]);
    assert_eq!(row(&out, "t", 1), ["t", "1", "0"]);
    reset("latest");
    assert_eq!(committed(&mut c, "g", "t"), [Some(10), Some(6)]);
    let (_, err) = reset("4");
    assert_eq!(committed(&mut c, "g", "t"), [Some(4), Some(4)]);
    assert!(err.is_empty(), "nothing clamped: {err:?}");
    let (out, err) = reset("8");
    assert_eq!(
        committed(&mut c, "g", "t"),
        [Some(8), Some(6)],
        "clamped to t-1's log end"
    );
    assert_eq!(row(&out, "t", 1), ["t", "1", "6"]);
    assert!(
        err.contains("t-1") && err.contains("using 6"),
        "the clamp is reported: {err:?}"
    );
    assert!(!err.contains("t-0"), "{err:?}");
    reset("0");
    assert_eq!(
        committed(&mut c, "g", "t"),
        [Some(2), Some(0)],
        "clamped up to t-0's log start"
    );

    // Bad input: one line, non-zero exit, nothing moved.
    let o = b.cli(
        &[
            "group",
            "reset-offsets",
            "g",
            "--topic",
            "t",
            "--to",
            "soon",
        ],
        None,
    );
    assert_one_line_error(&o, "--to 'soon'");
    let o = b.cli(
        &[
            "group",
            "reset-offsets",
            "g",
            "--topic",
            "nope",
            "--to",
            "latest",
        ],
        None,
    );
    assert_one_line_error(&o, "unknown topic 'nope'");
    assert_eq!(committed(&mut c, "g", "t"), [Some(2), Some(0)]);
}
