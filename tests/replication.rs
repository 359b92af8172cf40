//! Partition replication on real broker processes (issue 14): the leader's epoch bookkeeping
//! over the native protocol (OffsetForLeaderEpoch) across a restart; 3 brokers with RF 3
//! whose replicas hold the same batches below the high watermark; the leader SIGKILLed
//! mid-produce losing nothing acknowledged, and rejoining; replica fetches that must be
//! refused. Waits are on conditions with generous deadlines; nothing is timed.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rill::client::producer::{Acks, Producer, ProducerConfig, ProducerRecord};
use rill::client::{Client, ClientConfig};
use rill::protocol::messages::{
    FetchPartition, FetchRequest, FetchResponse, OffsetForLeaderEpochPartition,
    OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse, ReplicaFetchPartition,
    ReplicaFetchRequest, ReplicaFetchResponse, NO_LEADER_EPOCH,
};
use rill::protocol::{ApiKey, ErrorCode};
use rill_testkit::{
    acks_all_producer, assert_replicas_equal, create_topic_rf3, partition_meta, produce_values,
    read_partition as read_all, wait_partition, TestBroker, TestCluster, DEADLINE, FAST_FENCING,
};

/// (error code, leader epoch, end offset) of one OffsetForLeaderEpoch question.
fn ask(
    b: &TestBroker,
    topic: &str,
    partition: u32,
    current: i32,
    epoch: i32,
) -> (ErrorCode, i32, i64) {
    let mut c = b.client();
    let md = c.refresh_metadata().expect("metadata");
    // An unknown topic has no route: ask the shard of partition t-0.
    let addr = match md.route(topic, partition) {
        Ok(r) => r.addr,
        Err(_) => md.route("t", 0).expect("route").addr,
    };
    let req = OffsetForLeaderEpochRequest {
        partitions: vec![OffsetForLeaderEpochPartition {
            topic: topic.into(),
            partition,
            current_leader_epoch: current,
            leader_epoch: epoch,
        }],
    };
    let (resp, _): (OffsetForLeaderEpochResponse, _) = c
        .call(addr, ApiKey::OffsetForLeaderEpoch, &req, &[])
        .expect("answered");
    let r = &resp.partitions[0];
    (
        ErrorCode::from_code(r.error_code),
        r.leader_epoch,
        r.end_offset,
    )
}

#[test]
fn offset_for_leader_epoch_over_the_wire_and_across_a_restart() {
    let mut b = TestBroker::start(2, &[]);
    let mut c = b.client();
    c.create_topic("t", 2, 1, vec![]).expect("created");
    produce_values(&b, "t", 1, (0..300).map(|i| format!("v{i}")));
    // One leader so far, epoch 0: it ends at the log end.
    assert_eq!(ask(&b, "t", 1, 0, 0), (ErrorCode::None, 0, 300));
    assert_eq!(
        ask(&b, "t", 1, NO_LEADER_EPOCH, 5),
        (ErrorCode::None, 0, 300)
    );
    assert_eq!(ask(&b, "t", 0, 0, 0), (ErrorCode::None, 0, 0));
    // A stale or future view of the leader is refused; bad input changes nothing.
    assert_eq!(ask(&b, "t", 1, 3, 0).0, ErrorCode::UnknownLeaderEpoch);
    assert_eq!(ask(&b, "t", 1, 0, -4).0, ErrorCode::InvalidRequest);
    assert_eq!(
        ask(&b, "nope", 0, 0, 0).0,
        ErrorCode::UnknownTopicOrPartition
    );
    assert_eq!(ask(&b, "t", 9, 0, 0).0, ErrorCode::UnknownTopicOrPartition);
    b.restart();
    // The leader-epoch file came back with the log; the epoch is the same.
    produce_values(&b, "t", 1, (300..310).map(|i| format!("v{i}")));
    assert_eq!(ask(&b, "t", 1, 0, 0), (ErrorCode::None, 0, 310));
    let file = rill_testkit::partition_dir(&b.data_dir(), "t", 1).join("leader-epoch");
    assert!(file.is_file(), "{} missing", file.display());
}

fn client_of(b: &TestBroker) -> Client {
    let mut cfg = ClientConfig::new(b.bootstrap());
    cfg.request_timeout = Duration::from_secs(60);
    Client::connect(cfg).expect("client")
}

/// Creates `topic` (RF 3, min.insync.replicas 2) and waits until every broker's metadata
/// shows each partition with a leader (CreateTopics answers once the broker asked applied
/// it; the others follow a moment later).
fn create_replicated(c: &TestCluster, topic: &str, partitions: u32) {
    create_with_min_insync(c, topic, partitions, 2);
}

fn create_with_min_insync(c: &TestCluster, topic: &str, partitions: u32, min_insync: u32) {
    let min_insync = min_insync.to_string();
    create_topic_rf3(
        c,
        topic,
        partitions,
        &[("min.insync.replicas", &min_insync)],
    );
}

/// A value of a size that varies with `i` (a few bytes to ~3 KiB).
fn value(i: usize) -> String {
    let len = (i * 7919) % 3000;
    format!("{i}:{}", "x".repeat(len))
}

/// Partition 0's log end offset, from DescribePartitions at its leader.
fn partition_end(b: &TestBroker, topic: &str) -> u64 {
    let mut c = client_of(b);
    c.refresh_metadata().expect("metadata");
    c.partition_state(topic, 0)
        .expect("describe")
        .log_end_offset
}

#[test]
fn three_replicas_hold_the_same_batches_below_the_high_watermark() {
    let c = TestCluster::start(3, 2, FAST_FENCING);
    c.wait_leader(&[1, 2, 3]);
    create_replicated(&c, "r", 2);
    // Replicas on distinct brokers, all in the ISR.
    for p in 0..2 {
        let m = wait_partition(&c.nodes[0], "r", p, "a full ISR", |m| m.isr.len() == 3);
        let mut r = m.replicas.clone();
        r.sort_unstable();
        assert_eq!(r, vec![1, 2, 3]);
    }
    let producer = acks_all_producer(c.nodes[1].bootstrap());
    let n = 3000;
    let reports: Vec<_> = (0..n)
        .map(|i| {
            let v = value(i);
            let r = producer
                .send(ProducerRecord::new("r", v.as_bytes()).partition((i % 2) as u32))
                .expect("send");
            (i, r)
        })
        .collect();
    producer.flush().expect("flush");
    let mut acked: BTreeMap<(u32, u64), String> = BTreeMap::new();
    for (i, r) in reports {
        let md = r.wait().expect("acks=all with a full ISR");
        acked.insert((md.partition, md.offset.expect("offset")), value(i));
    }
    for p in 0..2u32 {
        let m = partition_meta(&c.nodes[0], "r", p).expect("metadata");
        let leader = &c.nodes[m.leader as usize - 1];
        let hw = acked.keys().filter(|(q, _)| *q == p).count() as u64;
        // Consumers see exactly what was acknowledged, where it was acknowledged.
        let read = read_all(leader.bootstrap(), "r", p, hw);
        for ((q, o), v) in acked.iter().filter(|((q, _), _)| *q == p) {
            assert_eq!(
                read.get(o).map(|b| b.as_slice()),
                Some(v.as_bytes()),
                "{q}-{o}"
            );
        }
        assert_replicas_equal(&c, "r", p, hw);
    }
    // A follower's shard serves no consumer: NOT_LEADER_OR_FOLLOWER, not its copy.
    let m = partition_meta(&c.nodes[0], "r", 0).expect("metadata");
    let follower = m
        .replicas
        .iter()
        .find(|&&b| b != m.leader)
        .copied()
        .unwrap();
    let f = &c.nodes[follower as usize - 1];
    let base: std::net::SocketAddr = f.bootstrap().parse().unwrap();
    // The shard holding it: the same as the leader's (replicated partitions sit on one
    // shard index on every broker).
    let addr = std::net::SocketAddr::new(base.ip(), base.port() + m.shard as u16);
    let req = FetchRequest {
        max_wait_ms: 0,
        min_bytes: 1,
        max_bytes: 1 << 20,
        partitions: vec![FetchPartition {
            topic: "r".into(),
            partition: 0,
            offset: 0,
            max_bytes: 1 << 20,
        }],
    };
    let mut fc = client_of(f);
    let (resp, _): (FetchResponse, _) = fc.call(addr, ApiKey::Fetch, &req, &[]).expect("answered");
    assert_eq!(
        ErrorCode::from_code(resp.partitions[0].error_code),
        ErrorCode::NotLeaderOrFollower,
        "{}",
        resp.partitions[0].message
    );
}

/// One replica fetch of `topic`-`p` sent straight to `addr`; its error code.
fn replica_fetch(
    cl: &mut Client,
    addr: std::net::SocketAddr,
    replica_id: u32,
    topic: &str,
    p: u32,
    epoch: u32,
    offset: u64,
) -> ErrorCode {
    // Not older than any registration: the checks below are of the partition's state.
    replica_fetch_as(cl, addr, (replica_id, u64::MAX), topic, p, epoch, offset)
}

/// As [`replica_fetch`], naming the asker's broker epoch too.
fn replica_fetch_as(
    cl: &mut Client,
    addr: std::net::SocketAddr,
    (replica_id, broker_epoch): (u32, u64),
    topic: &str,
    p: u32,
    epoch: u32,
    offset: u64,
) -> ErrorCode {
    let req = ReplicaFetchRequest {
        replica_id,
        broker_epoch,
        max_wait_ms: 0,
        max_bytes: 1 << 20,
        partitions: vec![ReplicaFetchPartition {
            topic: topic.into(),
            partition: p,
            leader_epoch: epoch,
            fetch_offset: offset,
            log_end: offset,
            max_bytes: 1 << 20,
        }],
    };
    let (resp, _): (ReplicaFetchResponse, _) = cl
        .call(addr, ApiKey::ReplicaFetch, &req, &[])
        .expect("answered");
    ErrorCode::from_code(resp.partitions[0].error_code)
}

/// What [`kill_the_leader_mid_produce`] leaves: the cluster, the partition's metadata after
/// the new leader took over and once the ISR is whole again, and what was read back.
struct AfterKill {
    c: TestCluster,
    after: rill::protocol::messages::PartitionMeta,
    m: rill::protocol::messages::PartitionMeta,
    hw: u64,
    read: BTreeMap<u64, Vec<u8>>,
}

/// A retrying acks=all producer writes to `k` (RF 3, `configs`) while its leader is
/// SIGKILLed; the killed broker comes back. Asserts every acknowledged record reads back at
/// its offset and the replicas hold the same batches.
fn kill_the_leader_mid_produce(configs: &[(&str, &str)]) -> AfterKill {
    let mut c = TestCluster::start(3, 1, FAST_FENCING);
    c.wait_leader(&[1, 2, 3]);
    create_topic_rf3(&c, "k", 1, configs);
    let first = wait_partition(&c.nodes[0], "k", 0, "a full ISR", |m| m.isr.len() == 3);
    let victim = first.leader;
    // A retrying acks=all producer through a broker that survives.
    let via = (1..=3u32).find(|&b| b != victim).unwrap();
    let acked: Arc<Mutex<BTreeMap<u64, String>>> = Arc::default();
    let failed = Arc::new(Mutex::new(0usize));
    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let traffic = {
        let (acked, failed, stop, sent) =
            (acked.clone(), failed.clone(), stop.clone(), sent.clone());
        let producer = acks_all_producer(c.nodes[via as usize - 1].bootstrap());
        std::thread::spawn(move || {
            let mut i = 0usize;
            let mut inflight = std::collections::VecDeque::new();
            while !stop.load(Ordering::SeqCst) {
                let v = value(i);
                let r = producer
                    .send(
                        ProducerRecord::new("k", v.as_bytes())
                            .key(format!("key{}", i % 7).as_bytes())
                            .partition(0),
                    )
                    .expect("send");
                inflight.push_back((v, r));
                i += 1;
                sent.store(i, Ordering::SeqCst);
                // Keep a bounded window so acknowledgements are collected as they come.
                while inflight.len() > 200 {
                    let (v, r) = inflight.pop_front().unwrap();
                    match r.wait() {
                        Ok(md) => {
                            acked.lock().unwrap().insert(md.offset.unwrap(), v);
                        }
                        Err(_) => *failed.lock().unwrap() += 1,
                    }
                }
            }
            let _ = producer.flush();
            for (v, r) in inflight {
                match r.wait() {
                    Ok(md) => {
                        acked.lock().unwrap().insert(md.offset.unwrap(), v);
                    }
                    Err(_) => *failed.lock().unwrap() += 1,
                }
            }
        })
    };
    let wait_acked = |n: usize| {
        let start = Instant::now();
        while acked.lock().unwrap().len() < n {
            assert!(
                start.elapsed() < DEADLINE,
                "only {} acknowledged",
                acked.lock().unwrap().len()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    wait_acked(500);
    c.node(u64::from(victim)).kill();
    // A new leader from the ISR, at a newer epoch.
    let after = wait_partition(&c.nodes[via as usize - 1], "k", 0, "a new leader", |m| {
        m.leader != victim && m.leader != 0 && m.leader_epoch > first.leader_epoch
    });
    let before_restart = acked.lock().unwrap().len();
    wait_acked(before_restart + 500);
    // The killed broker comes back, catches up, and is in the ISR again.
    c.node(u64::from(victim)).start_again();
    c.node(u64::from(victim)).wait_ready();
    wait_partition(
        &c.nodes[via as usize - 1],
        "k",
        0,
        "the old leader back in the ISR",
        |m| m.isr.contains(&victim),
    );
    let n = acked.lock().unwrap().len();
    wait_acked(n + 300);
    stop.store(true, Ordering::SeqCst);
    traffic.join().unwrap();
    let acked = acked.lock().unwrap().clone();
    assert!(acked.len() >= n + 300);
    // Every acknowledged record is where its acknowledgement said.
    let m = wait_partition(&c.nodes[via as usize - 1], "k", 0, "a full ISR", |m| {
        m.isr.len() == 3
    });
    let leader = &c.nodes[m.leader as usize - 1];
    let hw = acked.keys().last().unwrap() + 1;
    let read = read_all(leader.bootstrap(), "k", 0, hw);
    for (o, v) in &acked {
        assert_eq!(
            read.get(o).map(|b| b.as_slice()),
            Some(v.as_bytes()),
            "offset {o}"
        );
    }
    // The rejoined broker truncated whatever it had beyond what the others kept.
    assert_replicas_equal(&c, "k", 0, hw);
    AfterKill {
        c,
        after,
        m,
        hw,
        read,
    }
}

#[test]
fn sigkill_the_leader_mid_produce_loses_nothing_acknowledged_and_it_rejoins() {
    let AfterKill {
        c,
        after,
        m,
        hw,
        read,
    } = kill_the_leader_mid_produce(&[("min.insync.replicas", "2")]);
    let leader = &c.nodes[m.leader as usize - 1];
    // Bad replica fetches at the new leader: each refused, nothing changed.
    let mut cl = client_of(leader);
    let md = cl.refresh_metadata().expect("metadata").clone();
    let addr = md.route("k", 0).expect("route").addr;
    let epoch = m.leader_epoch;
    let follower = m.replicas.iter().copied().find(|&b| b != m.leader).unwrap();
    assert!(after.leader_epoch <= epoch);
    assert_eq!(
        replica_fetch(&mut cl, addr, 9, "k", 0, epoch, 0),
        ErrorCode::NotLeaderOrFollower,
        "a broker that is not a replica"
    );
    assert_eq!(
        replica_fetch(&mut cl, addr, m.leader, "k", 0, epoch, 0),
        ErrorCode::NotLeaderOrFollower,
        "the leader itself"
    );
    assert_eq!(
        replica_fetch(&mut cl, addr, follower, "k", 0, epoch - 1, 0),
        ErrorCode::FencedLeaderEpoch,
        "a stale leader epoch"
    );
    assert_eq!(
        replica_fetch(&mut cl, addr, follower, "k", 0, epoch + 1, 0),
        ErrorCode::UnknownLeaderEpoch,
        "a future leader epoch"
    );
    assert_eq!(
        replica_fetch(&mut cl, addr, follower, "k", 0, epoch, hw + 1_000_000),
        ErrorCode::OffsetOutOfRange,
        "an offset past the log end"
    );
    assert_eq!(
        replica_fetch_as(&mut cl, addr, (follower, 0), "k", 0, epoch, 0),
        ErrorCode::StaleBrokerEpoch,
        "an older registration of a replica"
    );
    // At a follower's shard the partition has no leader: refused too.
    let f = &c.nodes[follower as usize - 1];
    let faddr: std::net::SocketAddr = f.bootstrap().parse().unwrap();
    assert_eq!(
        replica_fetch(&mut cl, faddr, m.leader, "k", 0, epoch, 0),
        ErrorCode::NotLeaderOrFollower,
        "a follower's shard"
    );
    // Nothing changed: the ISR is whole and the data the same.
    let m2 = partition_meta(leader, "k", 0).unwrap();
    assert_eq!((m2.isr.len(), m2.leader_epoch), (3, epoch));
    assert_eq!(read_all(leader.bootstrap(), "k", 0, hw), read);
}

/// Under write caching a leader acknowledges acks=all once every ISR member has the records
/// in memory (followers count what they appended, not what they wrote): SIGKILLing it loses
/// nothing acknowledged, since the survivors write behind what they hold.
#[test]
fn write_caching_loses_nothing_acknowledged_when_the_leader_is_killed() {
    let a = kill_the_leader_mid_produce(&[("min.insync.replicas", "2"), ("write.caching", "true")]);
    assert!(a.hw > 1_000 && a.read.len() as u64 >= a.hw);
    // The setting is the topic's, as DescribeConfigs tells it.
    let leader = &a.c.nodes[a.m.leader as usize - 1];
    let out = leader.cli(&["topic", "describe", "k"], None);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("write.caching=true"), "{text}");
}

#[test]
fn a_stopped_follower_leaves_the_isr_after_the_lag_time_and_rejoins() {
    // Sessions far longer than the test: only the lag can take the follower out of the ISR.
    let c = TestCluster::start(
        3,
        1,
        &[
            "--replica-lag-time-max-ms",
            "1500",
            "--broker-session-timeout-ms",
            "600000",
            "--broker-heartbeat-interval-ms",
            "2000",
        ],
    );
    c.wait_leader(&[1, 2, 3]);
    create_replicated(&c, "s", 1);
    // A topic that needs all three in its ISR for acks=all.
    create_with_min_insync(&c, "all3", 1, 3);
    let m = wait_partition(&c.nodes[0], "s", 0, "a full ISR", |m| m.isr.len() == 3);
    let m3 = partition_meta(&c.nodes[0], "all3", 0).expect("metadata");
    // Stop a broker that leads neither.
    let stopped = (1..=3u32)
        .find(|&b| b != m.leader && b != m3.leader)
        .unwrap();
    let live = m.leader;
    let send = |from: usize, to: usize| -> BTreeMap<u64, String> {
        let p = acks_all_producer(c.nodes[live as usize - 1].bootstrap());
        let reports: Vec<_> = (from..to)
            .map(|i| {
                let v = value(i);
                (
                    v.clone(),
                    p.send(ProducerRecord::new("s", v.as_bytes()).partition(0))
                        .unwrap_or_else(|e| panic!("record {i}: {e:?}")),
                )
            })
            .collect();
        p.flush().unwrap();
        reports
            .into_iter()
            .map(|(v, r)| {
                (
                    r.wait()
                        .expect("acks=all with min.insync 2")
                        .offset
                        .unwrap(),
                    v,
                )
            })
            .collect()
    };
    let mut acked = send(0, 200);
    c.nodes[stopped as usize - 1].signal(libc::SIGSTOP);
    let shrunk = wait_partition(
        &c.nodes[live as usize - 1],
        "s",
        0,
        "the stopped one out",
        |m| m.isr.len() == 2 && !m.isr.contains(&stopped),
    );
    assert_eq!(shrunk.leader, live, "the leader stays");
    // acks=all goes on with the two left (min.insync.replicas 2)...
    acked.extend(send(200, 400));
    // ...but not where the topic asks for three: NOT_ENOUGH_REPLICAS, nothing appended.
    let leader3 = &c.nodes[m3.leader as usize - 1];
    wait_partition(leader3, "all3", 0, "the stopped one out", |m| {
        m.isr.len() == 2
    });
    let before = partition_end(leader3, "all3");
    let p = Producer::new(
        ClientConfig::new(leader3.bootstrap()),
        ProducerConfig {
            acks: Acks::All,
            retries: 0,
            ..ProducerConfig::default()
        },
    )
    .expect("producer");
    let r = p
        .send(ProducerRecord::new("all3", b"refused").partition(0))
        .expect("send");
    p.flush().unwrap();
    let e = r
        .wait()
        .expect_err("min.insync.replicas 3 with an ISR of 2");
    assert_eq!(e.code(), Some(ErrorCode::NotEnoughReplicas), "{e}");
    assert_eq!(partition_end(leader3, "all3"), before, "nothing appended");
    c.nodes[stopped as usize - 1].signal(libc::SIGCONT);
    wait_partition(
        &c.nodes[live as usize - 1],
        "s",
        0,
        "the follower back",
        |m| m.isr.contains(&stopped),
    );
    acked.extend(send(400, 500));
    let hw = acked.keys().last().unwrap() + 1;
    let read = read_all(c.nodes[live as usize - 1].bootstrap(), "s", 0, hw);
    for (o, v) in &acked {
        assert_eq!(
            read.get(o).map(|b| b.as_slice()),
            Some(v.as_bytes()),
            "offset {o}"
        );
    }
    assert_replicas_equal(&c, "s", 0, hw);
}

#[test]
fn a_deposed_leader_cuts_the_records_only_it_had_and_follows_the_new_leader() {
    // acks=1 records that only the leader had are lost with it (acks=1 promises no more);
    // the new leader writes other records at their offsets, and the old leader, restarted,
    // must cut its tail there (OffsetForLeaderEpoch) before it follows.
    let mut c = TestCluster::start(
        3,
        1,
        &[
            "--broker-session-timeout-ms",
            "10000",
            "--broker-heartbeat-interval-ms",
            "500",
        ],
    );
    c.wait_leader(&[1, 2, 3]);
    create_replicated(&c, "d", 1);
    let first = wait_partition(&c.nodes[0], "d", 0, "a full ISR", |m| m.isr.len() == 3);
    let victim = first.leader;
    let followers: Vec<u32> = (1..=3).filter(|&b| b != victim).collect();
    let produce = |bootstrap: String, acks: Acks, from: usize, to: usize| {
        let p = Producer::new(
            ClientConfig::new(bootstrap),
            ProducerConfig {
                acks,
                linger: Duration::from_millis(2),
                retry_backoff: Duration::from_millis(200),
                ..ProducerConfig::default()
            },
        )
        .expect("producer");
        let reports: Vec<_> = (from..to)
            .map(|i| {
                let v = value(i);
                let r = p.send(ProducerRecord::new("d", v.as_bytes()).partition(0));
                (v, r.expect("send"))
            })
            .collect();
        p.flush().unwrap();
        reports
            .into_iter()
            .map(|(v, r)| (r.wait().expect("acknowledged").offset.unwrap(), v))
            .collect::<BTreeMap<u64, String>>()
    };
    let leader_addr = c.nodes[victim as usize - 1].bootstrap();
    let mut all = produce(leader_addr.clone(), Acks::All, 0, 100);
    // The followers cannot fetch for a moment: acks=1 records reach the leader alone...
    for &f in &followers {
        c.nodes[f as usize - 1].signal(libc::SIGSTOP);
    }
    // A fetch the followers had in flight may still carry the first of them to their
    // sockets; nothing can carry the second: no fetch of theirs is outstanding any more.
    produce(leader_addr.clone(), Acks::Leader, 100, 105);
    let only_leader = produce(leader_addr, Acks::Leader, 105, 110);
    // ...and it dies with them.
    c.node(u64::from(victim)).kill();
    for &f in &followers {
        c.nodes[f as usize - 1].signal(libc::SIGCONT);
    }
    let via_i = followers[0] as usize - 1;
    let after = wait_partition(&c.nodes[via_i], "d", 0, "a new leader", |m| {
        m.leader != victim && m.leader != 0 && m.leader_epoch > first.leader_epoch
    });
    // The new leader writes its own records where the lost ones were.
    all.extend(produce(c.nodes[via_i].bootstrap(), Acks::All, 200, 300));
    assert!(
        only_leader.keys().all(|o| all.contains_key(o)),
        "the new leader reused the offsets only the old one had: {:?}",
        all.keys().skip(95).take(20).collect::<Vec<_>>()
    );
    c.node(u64::from(victim)).start_again();
    c.node(u64::from(victim)).wait_ready();
    wait_partition(
        &c.nodes[via_i],
        "d",
        0,
        "the old leader back in the ISR",
        |m| m.isr.contains(&victim) && m.leader_epoch == after.leader_epoch,
    );
    let log = c.nodes[victim as usize - 1].log_text();
    assert!(
        log.contains("cut the divergent tail"),
        "the old leader never cut its tail:\n{log}"
    );
    let hw = all.keys().last().unwrap() + 1;
    let leader = &c.nodes[after.leader as usize - 1];
    let read = read_all(leader.bootstrap(), "d", 0, hw);
    for (o, v) in &all {
        assert_eq!(
            read.get(o).map(|b| b.as_slice()),
            Some(v.as_bytes()),
            "offset {o}"
        );
    }
    assert_replicas_equal(&c, "d", 0, hw);
}
