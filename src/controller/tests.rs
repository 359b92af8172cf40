//! Tests of the controller thread shell.

use std::collections::BTreeMap;
use std::time::Duration;

use super::*;

const WAIT: Duration = Duration::from_secs(20);

fn config(dir: &std::path::Path) -> ControllerConfig {
    let mut cfg = ControllerConfig::new(dir, 1);
    cfg.tick = Duration::from_millis(10);
    cfg
}

fn broker(id: u32) -> Command {
    Command::RegisterBroker(BrokerInfo {
        node_id: id,
        host: "127.0.0.1".into(),
        port: 9292,
        shards: 2,
        kafka_port: None,
    })
}

fn create(name: &str) -> Command {
    let mut configs = BTreeMap::new();
    configs.insert("retention.ms".to_string(), "1000".to_string());
    Command::CreateTopic {
        name: name.into(),
        partitions: 4,
        replication_factor: 1,
        configs,
    }
}

#[test]
fn start_propose_subscribe_restart() {
    let dir = tempfile::tempdir().unwrap();
    let ctl = start(config(dir.path())).unwrap();
    let handle = ctl.handle();
    let md = handle.wait_ready(WAIT).unwrap();
    assert_eq!(md.controller_id, 1);
    assert_eq!(md.cluster_id.len(), 32, "{}", md.cluster_id);
    let cluster_id = md.cluster_id.clone();
    assert!(dir
        .path()
        .join("controller")
        .join(raft_log::LOG_FILE)
        .exists());

    let updates = handle.subscribe(16);
    let first = updates.recv_timeout(WAIT).unwrap();
    assert_eq!(first.cluster_id, cluster_id);

    let res = handle.propose(broker(1)).recv_timeout(WAIT).unwrap();
    assert_eq!(res, Ok(Applied::BrokerRegistered));
    let res = handle.propose(create("orders")).recv_timeout(WAIT).unwrap();
    let Ok(Applied::TopicCreated(topic)) = res else {
        panic!("{res:?}")
    };
    assert_eq!(topic.name, "orders");
    assert_eq!(topic.partitions.len(), 4);
    assert_eq!(topic.configs["retention.ms"], "1000");

    // The subscriber sees the broker, then the topic.
    let seen = loop {
        let md = updates.recv_timeout(WAIT).unwrap();
        if md.topic("orders").is_some() {
            break md;
        }
    };
    assert_eq!(seen.topic("orders"), Some(&topic));
    assert_eq!(handle.metadata().topic("orders"), Some(&topic));

    // Errors come back with their code.
    let err = handle
        .propose(create("orders"))
        .recv_timeout(WAIT)
        .unwrap()
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::TopicAlreadyExists);

    let before = handle.metadata();
    ctl.shutdown();
    // The subscription closes and the handle reports the stop.
    while updates.recv_timeout(WAIT).is_ok() {}
    assert_eq!(handle.wait_ready(WAIT), Err(ControllerError::Stopped));
    let err = handle
        .propose(create("late"))
        .recv_timeout(WAIT)
        .unwrap()
        .unwrap_err();
    assert_eq!(err, ControllerError::Stopped);

    let ctl = start(config(dir.path())).unwrap();
    let md = ctl.handle().wait_ready(WAIT).unwrap();
    assert_eq!(md, before);
    assert_eq!(md.topic("orders"), Some(&topic));
    assert_eq!(md.cluster_id, cluster_id);
    ctl.shutdown();
}

#[test]
fn slow_subscriber_keeps_the_latest() {
    let dir = tempfile::tempdir().unwrap();
    let ctl = start(config(dir.path())).unwrap();
    let handle = ctl.handle();
    handle.wait_ready(WAIT).unwrap();
    let updates = handle.subscribe(1);
    handle
        .propose(broker(1))
        .recv_timeout(WAIT)
        .unwrap()
        .unwrap();
    for name in ["a", "b", "c"] {
        handle
            .propose(create(name))
            .recv_timeout(WAIT)
            .unwrap()
            .unwrap();
    }
    // Capacity 1: only the newest update is queued.
    let md = updates.try_recv().unwrap();
    assert!(md.topic("c").is_some());
    assert!(updates.try_recv().is_err());
    drop(ctl);
}

#[test]
fn bad_voter_lists_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let two = vec![(1, "127.0.0.1:9393".into()), (2, "127.0.0.1:9394".into())];
    let missing = vec![
        (2, "127.0.0.1:9393".into()),
        (3, "127.0.0.1:9394".into()),
        (4, "127.0.0.1:9395".into()),
    ];
    let twice = vec![
        (1, "127.0.0.1:9393".into()),
        (1, "127.0.0.1:9394".into()),
        (2, "127.0.0.1:9395".into()),
    ];
    for (voters, want) in [
        (two, "2 voters"),
        (missing, "is not one of the voters"),
        (twice, "listed twice"),
    ] {
        let mut cfg = config(dir.path());
        cfg.voters = voters;
        let err = start(cfg).err().unwrap();
        assert!(matches!(err, ControllerError::Config(_)), "{err}");
        assert!(err.to_string().contains(want), "{err}");
    }
    let mut cfg = config(dir.path());
    cfg.voters = vec![(1, "127.0.0.1:9393".into())];
    start(cfg).unwrap().shutdown();
    // That directory now holds a single-voter cluster: it cannot become one of three.
    let mut cfg = config(dir.path());
    cfg.voters = free_voters(3);
    let err = start(cfg).err().unwrap();
    assert!(err.to_string().contains("changing the voters"), "{err}");
}

fn free_voters(n: u64) -> Vec<(u64, String)> {
    // Bound and released at once: another process could take a port meanwhile, which only
    // makes this test fail to listen, never pass wrongly.
    (1..=n)
        .map(|id| {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            (id, l.local_addr().unwrap().to_string())
        })
        .collect()
}

/// Waits until `f` holds, polling.
fn until(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    while !f() {
        assert!(std::time::Instant::now() < deadline, "timed out: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn three_voters_over_tcp_elect_forward_and_fail_over() {
    let voters = free_voters(3);
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let open = |i: usize| {
        let mut cfg = ControllerConfig::new(dirs[i].path(), i as u64 + 1);
        cfg.voters = voters.clone();
        cfg.tick = Duration::from_millis(20);
        start(cfg).unwrap()
    };
    let mut nodes: Vec<Option<Controller>> = (0..3).map(|i| Some(open(i))).collect();
    let handles: Vec<ControllerHandle> = nodes.iter().flatten().map(|c| c.handle()).collect();
    for h in &handles {
        h.wait_ready(Duration::from_secs(120)).unwrap();
    }
    let leader = handles[0].metadata().controller_id;
    assert!((1..=3).contains(&leader));
    let follower = (0..3).find(|&i| i as u64 + 1 != leader).unwrap();

    // Proposals through a follower are forwarded, and answered once the follower applied them.
    let fh = &handles[follower];
    fh.propose(broker(1)).recv_timeout(WAIT).unwrap().unwrap();
    let created = fh.propose(create("t")).recv_timeout(WAIT).unwrap().unwrap();
    assert!(matches!(created, Applied::TopicCreated(_)), "{created:?}");
    assert!(fh.metadata().topic("t").is_some());
    // A refusal comes back typed.
    let err = fh
        .propose(create("t"))
        .recv_timeout(WAIT)
        .unwrap()
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::TopicAlreadyExists, "{err}");
    for h in &handles {
        until("every voter applies t", || {
            h.metadata().topic("t").is_some()
        });
    }

    // The leader stops: the others elect a new one and take proposals again.
    nodes[leader as usize - 1].take().unwrap().shutdown();
    let rest: Vec<&ControllerHandle> = (0..3)
        .filter(|&i| i as u64 + 1 != leader)
        .map(|i| &handles[i])
        .collect();
    until("a new leader", || {
        rest.iter().all(|h| {
            let c = h.metadata().controller_id;
            c != 0 && c != leader
        })
    });
    rest[0]
        .propose(create("after"))
        .recv_timeout(Duration::from_secs(120))
        .unwrap()
        .unwrap();
    until("both apply it", || {
        rest.iter().all(|h| h.metadata().topic("after").is_some())
    });

    // Back: the old leader catches up.
    nodes[leader as usize - 1] = Some(open(leader as usize - 1));
    let back = nodes[leader as usize - 1].as_ref().unwrap().handle();
    until("the old leader catches up", || {
        back.metadata().topic("after").is_some()
    });
}

#[test]
fn corrupt_log_is_a_storage_error_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let cdir = dir.path().join("controller");
    std::fs::create_dir_all(&cdir).unwrap();
    std::fs::write(cdir.join(raft_log::LOG_FILE), b"garbage garbage garbage").unwrap();
    let err = start(config(dir.path())).err().unwrap();
    assert_eq!(err.code(), ErrorCode::KafkaStorageError);
    assert!(err.to_string().contains(raft_log::LOG_FILE), "{err}");
}
