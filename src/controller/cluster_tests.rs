//! Membership, placement and elections, applied to plain metadata (no raft).

use std::collections::BTreeMap;

use super::*;
use crate::controller::metadata::{shard_for, MetadataLimits, TopicInfo};

struct Md {
    md: ClusterMetadata,
    index: u64,
}

impl Md {
    fn new() -> Md {
        Md {
            md: ClusterMetadata::default(),
            index: 0,
        }
    }

    fn apply(&mut self, cmd: &Command) -> Result<Applied, MetadataError> {
        self.index += 1;
        let before = self.md.clone();
        let r = self.md.apply(self.index, cmd, &MetadataLimits::default());
        if r.is_err() {
            assert_eq!(self.md, before, "a refused command changed the metadata");
        }
        r
    }

    fn ok(&mut self, cmd: Command) -> Applied {
        self.apply(&cmd).unwrap_or_else(|e| panic!("{cmd:?}: {e}"))
    }

    fn err(&mut self, cmd: Command) -> MetadataError {
        let e = self.apply(&cmd).expect_err("accepted");
        assert!(!e.message.contains('\n'), "not one line: {e}");
        e
    }

    fn register(&mut self, id: u32, shards: u32, rack: Option<&str>) -> u64 {
        let Applied::MemberRegistered { broker_epoch, .. } = self.ok(Command::RegisterMember(reg(
            id,
            shards,
            rack,
            u64::from(id) * 100,
        ))) else {
            panic!()
        };
        broker_epoch
    }

    fn topic(&self, name: &str) -> &TopicInfo {
        &self.md.topics[name]
    }

    fn epoch(&self, id: u32) -> u64 {
        self.md.members[&id].broker_epoch
    }
}

fn reg(id: u32, shards: u32, rack: Option<&str>, incarnation: u64) -> BrokerRegistration {
    BrokerRegistration {
        broker: BrokerInfo {
            node_id: id,
            host: format!("10.0.0.{id}"),
            port: 9292,
            shards,
            kafka_port: Some(9092),
        },
        incarnation,
        rack: rack.map(str::to_string),
    }
}

fn create(name: &str, partitions: u32, rf: u16, configs: &[(&str, &str)]) -> Command {
    Command::CreateTopic {
        name: name.into(),
        partitions,
        replication_factor: rf,
        configs: configs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    }
}

fn fence(md: &Md, id: u32) -> Command {
    Command::FenceBroker {
        node_id: id,
        broker_epoch: md.epoch(id),
    }
}

/// Invariants every applied state keeps.
fn check(md: &ClusterMetadata) {
    for t in md.topics.values() {
        for p in &t.partitions {
            let mut r = p.replicas.clone();
            r.sort_unstable();
            r.dedup();
            assert_eq!(r.len(), p.replicas.len(), "replicas repeat: {p:?}");
            assert!(p.isr.iter().all(|b| p.replicas.contains(b)), "{p:?}");
            assert!(!p.isr.is_empty(), "{p:?}");
            if p.leader != NO_LEADER {
                assert!(p.isr.contains(&p.leader), "leader outside ISR: {p:?}");
                assert!(md.is_live(p.leader), "{} leads but is not live", p.leader);
                assert!(p.shard < md.brokers[&p.leader].shards);
            }
        }
    }
}

#[test]
fn three_brokers_twelve_partitions_rf3_spread_leaders_and_shards() {
    let mut m = Md::new();
    for id in 1..=3 {
        m.register(id, 2, None);
    }
    let Applied::TopicCreated(t) = m.ok(create("t", 12, 3, &[])) else {
        panic!()
    };
    let mut leaders: BTreeMap<u32, usize> = BTreeMap::new();
    let mut shards: BTreeMap<(u32, u32), usize> = BTreeMap::new();
    for p in &t.partitions {
        let mut r = p.replicas.clone();
        r.sort_unstable();
        assert_eq!(r, vec![1, 2, 3], "{p:?}");
        assert_eq!(p.leader, p.replicas[0], "first replica leads");
        assert_eq!(p.isr, p.replicas);
        *leaders.entry(p.leader).or_default() += 1;
        *shards.entry((p.leader, p.shard)).or_default() += 1;
    }
    assert_eq!(leaders, [(1, 4), (2, 4), (3, 4)].into_iter().collect());
    // Each broker's 4 partitions: 2 on each of its 2 shards.
    assert_eq!(shards.len(), 6, "{shards:?}");
    assert!(shards.values().all(|&n| n == 2), "{shards:?}");
    check(&m.md);
}

#[test]
fn three_shards_each_spread_leaders_and_replicas_and_a_leader_change_keeps_the_shard() {
    // With 3 brokers and 3 shards, `(topic_id + p) % 3` gives each broker's leaders a single
    // shard (every broker leads one residue of p): placement must spread them anyway.
    let mut m = Md::new();
    for id in 1..=3 {
        m.register(id, 3, None);
    }
    let Applied::TopicCreated(t) = m.ok(create("t", 12, 3, &[])) else {
        panic!()
    };
    let mut leaders: BTreeMap<(u32, u32), usize> = BTreeMap::new();
    let mut replicas: BTreeMap<(u32, u32), usize> = BTreeMap::new();
    for p in &t.partitions {
        *leaders.entry((p.leader, p.shard)).or_default() += 1;
        for &b in &p.replicas {
            *replicas
                .entry((b, m.md.replica_shard(t.id, p, b)))
                .or_default() += 1;
        }
    }
    for b in 1..=3 {
        let per_shard: Vec<usize> = (0..3)
            .map(|s| leaders.get(&(b, s)).copied().unwrap_or(0))
            .collect();
        assert_eq!(
            per_shard.iter().sum::<usize>(),
            4,
            "broker {b}: {leaders:?}"
        );
        assert!(
            per_shard.iter().all(|&n| (1..=2).contains(&n)),
            "broker {b}'s leaders over its shards: {per_shard:?}"
        );
        for s in 0..3 {
            assert_eq!(replicas[&(b, s)], 4, "replicas per shard: {replicas:?}");
        }
    }
    // A failover elects followers that already hold the partition on that same shard.
    let held: BTreeMap<(u32, u32), u32> = t
        .partitions
        .iter()
        .flat_map(|p| {
            p.replicas
                .iter()
                .map(|&b| ((p.partition, b), m.md.replica_shard(t.id, p, b)))
                .collect::<Vec<_>>()
        })
        .collect();
    let f = fence(&m, 1);
    m.ok(f);
    for p in &m.topic("t").partitions {
        assert_ne!(p.leader, 1);
        assert_eq!(p.shard, held[&(p.partition, p.leader)], "{p:?}");
        for &b in &p.replicas {
            assert_eq!(m.md.replica_shard(t.id, p, b), held[&(p.partition, b)]);
        }
    }
    check(&m.md);
}

#[test]
fn two_brokers_two_shards_use_both_shards() {
    // The single-node formula (topic_id + p) % shards would put every partition of one broker
    // on the same shard here (p has one parity per broker).
    let mut m = Md::new();
    m.register(1, 2, None);
    m.register(2, 2, None);
    let Applied::TopicCreated(t) = m.ok(create("t", 8, 1, &[])) else {
        panic!()
    };
    for b in [1, 2] {
        let mut s: Vec<u32> = t
            .partitions
            .iter()
            .filter(|p| p.leader == b)
            .map(|p| p.shard)
            .collect();
        s.sort_unstable();
        assert_eq!(s, vec![0, 0, 1, 1], "broker {b}");
    }
}

#[test]
fn replicas_go_on_distinct_racks() {
    let mut m = Md::new();
    m.register(1, 1, Some("a"));
    m.register(2, 1, Some("a"));
    m.register(3, 1, Some("b"));
    m.register(4, 1, Some("b"));
    m.register(5, 1, Some("c"));
    let Applied::TopicCreated(t) = m.ok(create("t", 10, 3, &[])) else {
        panic!()
    };
    let racks: BTreeMap<u32, String> =
        m.md.members
            .iter()
            .map(|(&b, mm)| (b, mm.rack.clone().unwrap()))
            .collect();
    let rack = |b: u32| racks[&b].clone();
    let mut leaders: BTreeMap<u32, usize> = BTreeMap::new();
    for p in &t.partitions {
        let mut racks: Vec<String> = p.replicas.iter().map(|&b| rack(b)).collect();
        racks.sort();
        assert_eq!(racks, vec!["a", "b", "c"], "{p:?}");
        *leaders.entry(p.leader).or_default() += 1;
    }
    assert_eq!(leaders.values().copied().collect::<Vec<_>>(), vec![2; 5]);
    // More replicas than racks: distinct racks first, then any other broker.
    let Applied::TopicCreated(t) = m.ok(create("u", 5, 5, &[])) else {
        panic!()
    };
    for p in &t.partitions {
        let first3: std::collections::BTreeSet<String> =
            p.replicas[..3].iter().map(|&b| rack(b)).collect();
        assert_eq!(first3.len(), 3, "{p:?}");
    }
    check(&m.md);
}

#[test]
fn bad_replication_factor_and_min_insync_are_one_line_errors() {
    let mut m = Md::new();
    for id in 1..=3 {
        m.register(id, 1, None);
    }
    let f = fence(&m, 3);
    m.ok(f);
    let before = m.md.clone();
    let e = m.err(create("t", 3, 3, &[]));
    assert_eq!(e.code, ErrorCode::InvalidReplicationFactor);
    assert!(e.message.contains("live brokers, 2"), "{e}");
    for (v, why) in [("3", "above R"), ("0", "zero"), ("x", "not a number")] {
        let e = m.err(create("t", 1, 2, &[(MIN_INSYNC_REPLICAS, v)]));
        assert_eq!(e.code, ErrorCode::InvalidConfig, "{why}");
        assert!(e.message.contains("min.insync.replicas"), "{e}");
        assert!(e.message.contains("1..=2"), "{e}");
    }
    let e = m.err(create("t", 1, 2, &[(UNCLEAN_LEADER_ELECTION, "yes")]));
    assert_eq!(e.code, ErrorCode::InvalidConfig);
    assert_eq!(m.md, before, "nothing stored");
    m.ok(create(
        "t",
        1,
        2,
        &[
            (MIN_INSYNC_REPLICAS, "2"),
            (UNCLEAN_LEADER_ELECTION, "false"),
        ],
    ));
    // Altered later, it is checked against the topic's replication factor.
    let alter = |v: &str| Command::AlterTopicConfig {
        name: "t".into(),
        configs: [(MIN_INSYNC_REPLICAS.to_string(), v.to_string())]
            .into_iter()
            .collect(),
    };
    assert_eq!(m.err(alter("3")).code, ErrorCode::InvalidConfig);
    m.ok(alter("1"));
    // Kafka's AlterConfigs path (ChangeTopicConfig) checks and removes them the same way.
    let change = |set: &[(&str, &str)], unset: &[&str]| Command::ChangeTopicConfig {
        name: "t".into(),
        set: set
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        unset: unset.iter().map(|k| k.to_string()).collect(),
        replace: false,
    };
    assert_eq!(
        m.err(change(&[(MIN_INSYNC_REPLICAS, "3")], &[])).code,
        ErrorCode::InvalidConfig
    );
    m.ok(change(
        &[(MIN_INSYNC_REPLICAS, "2")],
        &[UNCLEAN_LEADER_ELECTION],
    ));
    assert_eq!(
        m.topic("t")
            .configs
            .get(MIN_INSYNC_REPLICAS)
            .map(String::as_str),
        Some("2")
    );
    assert!(!m.topic("t").configs.contains_key(UNCLEAN_LEADER_ELECTION));
    // Other keys still go through topic_config.
    assert_eq!(
        m.err(create("u", 1, 1, &[("bogus", "1")])).code,
        ErrorCode::InvalidConfig
    );
}

#[test]
fn duplicate_node_id_is_refused_while_the_old_broker_lives() {
    let mut m = Md::new();
    let mut mgr = ClusterManager::new(DEFAULT_SESSION_TIMEOUT_MS);
    let cmds = mgr.register(&m.md, &reg(1, 1, None, 0xaaaa), 0).unwrap();
    assert_eq!(cmds.len(), 1);
    m.ok(cmds[0].clone());
    // The active controller polls every tick: the session starts when the registration applied.
    assert!(mgr.poll(&m.md, 0).is_empty());
    m.ok(create("t", 2, 1, &[]));
    // A second process claiming node id 1, 5 s later: the first one's session still runs.
    let clash = reg(1, 1, None, 0xbbbb);
    let err = mgr.register(&m.md, &clash, 5_000).unwrap_err();
    assert_eq!(err.code(), ErrorCode::DuplicateBrokerRegistration);
    let text = err.to_string();
    assert!(
        text.contains("node id 1") && text.contains("000000000000aaaa"),
        "{text}"
    );
    assert!(!text.contains('\n'));
    // Applied directly (a stale proposal), the state machine refuses it too.
    assert_eq!(
        m.err(Command::RegisterMember(clash.clone())).code,
        ErrorCode::DuplicateBrokerRegistration
    );
    // The same incarnation retrying is fine.
    assert_eq!(
        mgr.register(&m.md, &reg(1, 1, None, 0xaaaa), 5_000)
            .unwrap()
            .len(),
        1
    );
    // After the session ran out (no heartbeat since 0), a restart is accepted: fence the old
    // registration, then register the new one.
    let cmds = mgr.register(&m.md, &clash, 9_001).unwrap();
    assert!(matches!(cmds[0], Command::FenceBroker { node_id: 1, .. }));
    for c in cmds {
        m.ok(c);
    }
    assert_eq!(m.md.members[&1].incarnation, 0xbbbb);
    assert_eq!(m.md.members[&1].state, BrokerState::Active);
    // Its partitions went offline at the fence and came back with it, epochs bumped twice.
    for p in &m.topic("t").partitions {
        assert_eq!(p.leader, 1);
        assert_eq!(p.leader_epoch, 2, "{p:?}");
    }
    check(&m.md);
}

#[test]
fn a_broker_past_its_session_is_fenced_and_its_leaders_move_to_the_isr() {
    let mut m = Md::new();
    let mut mgr = ClusterManager::new(9_000);
    for id in 1..=3 {
        for c in mgr
            .register(&m.md, &reg(id, 2, None, id.into()), 0)
            .unwrap()
        {
            m.ok(c);
        }
    }
    m.ok(create("rf3", 6, 3, &[]));
    m.ok(create("rf1", 3, 1, &[]));
    let before = m.md.clone();
    // Brokers 1 and 3 heartbeat every 2 s; broker 2 stops after t=0.
    let mut now = 0;
    let mut fenced_at = None;
    while now < 20_000 {
        now += 2_000;
        for id in [1, 3] {
            let hb = Heartbeat {
                node_id: id,
                broker_epoch: m.epoch(id),
                want_shutdown: false,
            };
            let out = mgr.heartbeat(&m.md, &hb, now).unwrap();
            assert!(!out.reply.fenced && out.propose.is_none());
        }
        for c in mgr.poll(&m.md, now) {
            assert_eq!(c, fence(&m, 2), "only broker 2 expires");
            m.ok(c);
            fenced_at.get_or_insert(now);
        }
    }
    assert_eq!(fenced_at, Some(10_000), "fenced at the first poll past 9 s");
    assert_eq!(m.md.members[&2].state, BrokerState::Fenced);
    assert_eq!(m.md.led_by(2), 0, "a fenced broker leads nothing");
    for (old, new) in before.topics["rf3"]
        .partitions
        .iter()
        .zip(&m.topic("rf3").partitions)
    {
        assert!(!new.isr.contains(&2), "{new:?}");
        if old.leader == 2 {
            assert_ne!(new.leader, NO_LEADER);
            assert!(old.isr.contains(&new.leader));
            assert_eq!(new.leader_epoch, old.leader_epoch + 1);
            // The next replica in preferred order.
            let pos = new.replicas.iter().position(|&b| b == 2).unwrap();
            assert_eq!(new.leader, new.replicas[(pos + 1) % 3]);
        } else {
            assert_eq!(new.leader, old.leader);
            assert_eq!(new.leader_epoch, old.leader_epoch);
        }
        assert_eq!(new.partition_epoch, old.partition_epoch + 1);
    }
    // RF 1 partitions on broker 2 have no one else: offline, broker 2 kept as the last ISR.
    let offline: Vec<PartitionInfo> = m
        .topic("rf1")
        .partitions
        .iter()
        .filter(|p| p.replicas == [2])
        .cloned()
        .collect();
    assert_eq!(offline.len(), 1);
    assert_eq!(offline[0].leader, NO_LEADER);
    assert_eq!(offline[0].isr, vec![2]);
    check(&m.md);
    // A fenced broker cannot join an ISR, and a replication factor counts live brokers only.
    assert_eq!(
        m.err(create("x", 1, 3, &[])).code,
        ErrorCode::InvalidReplicationFactor
    );
    // Broker 2 heartbeats again: told it is fenced, unfenced, and leads its offline partition.
    let hb = Heartbeat {
        node_id: 2,
        broker_epoch: m.epoch(2),
        want_shutdown: false,
    };
    let out = mgr.heartbeat(&m.md, &hb, now).unwrap();
    assert!(out.reply.fenced);
    let unfence = out.propose.unwrap();
    assert_eq!(
        unfence,
        Command::UnfenceBroker {
            node_id: 2,
            broker_epoch: m.epoch(2)
        }
    );
    m.ok(unfence);
    let p = m
        .topic("rf1")
        .partitions
        .iter()
        .find(|p| p.replicas == [2])
        .unwrap();
    assert_eq!(p.leader, 2);
    assert_eq!(p.leader_epoch, offline[0].leader_epoch + 1);
    assert!(mgr.poll(&m.md, now + 1).is_empty());
    // Stale epochs are refused.
    let stale = Heartbeat {
        node_id: 2,
        broker_epoch: 1,
        want_shutdown: false,
    };
    assert_eq!(
        mgr.heartbeat(&m.md, &stale, now).unwrap_err().code(),
        ErrorCode::StaleBrokerEpoch
    );
    assert_eq!(
        m.err(Command::FenceBroker {
            node_id: 2,
            broker_epoch: 1
        })
        .code,
        ErrorCode::StaleBrokerEpoch
    );
    check(&m.md);
}

#[test]
fn a_new_active_controller_gives_every_broker_a_full_session() {
    let mut m = Md::new();
    let mut old = ClusterManager::new(9_000);
    m.ok(old
        .register(&m.md, &reg(1, 1, None, 1), 0)
        .unwrap()
        .remove(0));
    // The new leader takes over at t=8 s, knowing nothing of heartbeats.
    let mut new = ClusterManager::new(9_000);
    new.reset(&m.md, 8_000);
    assert!(new.poll(&m.md, 16_999).is_empty());
    assert_eq!(new.poll(&m.md, 17_000).len(), 1);
    // Proposed once per session timeout, not every poll.
    assert!(new.poll(&m.md, 17_001).is_empty());
}

#[test]
fn controlled_shutdown_moves_leadership_first() {
    let mut m = Md::new();
    let mut mgr = ClusterManager::new(9_000);
    for id in 1..=2 {
        m.ok(mgr
            .register(&m.md, &reg(id, 1, None, id.into()), 0)
            .unwrap()
            .remove(0));
    }
    m.ok(create("t", 4, 2, &[]));
    assert_eq!(m.md.led_by(1), 2);
    let hb = |m: &Md, want| Heartbeat {
        node_id: 1,
        broker_epoch: m.epoch(1),
        want_shutdown: want,
    };
    let out = mgr.heartbeat(&m.md, &hb(&m, true), 1_000).unwrap();
    assert!(!out.reply.shutdown_ready);
    m.ok(out.propose.unwrap());
    assert_eq!(m.md.members[&1].state, BrokerState::ShuttingDown);
    assert_eq!(m.md.led_by(1), 0);
    assert!(m
        .topic("t")
        .partitions
        .iter()
        .all(|p| p.leader == 2 && p.isr == [2]));
    let out = mgr.heartbeat(&m.md, &hb(&m, true), 2_000).unwrap();
    assert!(out.reply.shutting_down && out.reply.shutdown_ready);
    assert_eq!(out.propose, None, "no second shutdown proposal");
    // A restarted broker 1 (new incarnation) may register at once: the old one asked to go.
    let cmds = mgr.register(&m.md, &reg(1, 1, None, 77), 2_500).unwrap();
    assert_eq!(cmds.len(), 1);
    m.ok(cmds[0].clone());
    check(&m.md);
}

#[test]
fn unclean_election_only_when_the_topic_allows_it() {
    let mut m = Md::new();
    for id in 1..=2 {
        m.register(id, 1, None);
    }
    // Topic ids 1 and 3: the same first broker for partition 0 of both.
    m.ok(create("clean", 1, 2, &[]));
    m.ok(create("pad", 1, 1, &[]));
    m.ok(create("dirty", 1, 2, &[(UNCLEAN_LEADER_ELECTION, "true")]));
    // Both partitions: the leader shrinks the ISR to itself (the follower lags).
    for t in ["clean", "dirty"] {
        let p = m.topic(t).partitions[0].clone();
        m.ok(Command::AlterPartition {
            topic: t.into(),
            partition: 0,
            leader: p.leader,
            leader_epoch: p.leader_epoch,
            partition_epoch: p.partition_epoch,
            isr: vec![p.leader],
        });
    }
    let leader = m.topic("clean").partitions[0].leader;
    assert_eq!(m.topic("dirty").partitions[0].leader, leader);
    let other = 3 - leader;
    let f = fence(&m, leader);
    m.ok(f);
    let clean = &m.topic("clean").partitions[0];
    assert_eq!((clean.leader, clean.isr.clone()), (NO_LEADER, vec![leader]));
    let dirty = &m.topic("dirty").partitions[0];
    assert_eq!((dirty.leader, dirty.isr.clone()), (other, vec![other]));
    assert_eq!(dirty.leader_epoch, 1);
    check(&m.md);
}

#[test]
fn alter_partition_needs_the_current_leader_and_epochs() {
    let mut m = Md::new();
    for id in 1..=3 {
        m.register(id, 1, None);
    }
    m.ok(create("t", 1, 2, &[]));
    let p = m.topic("t").partitions[0].clone();
    let follower = p.replicas[1];
    let outsider = (1..=3).find(|b| !p.replicas.contains(b)).unwrap();
    let alter = |leader, le, pe, isr: Vec<u32>| Command::AlterPartition {
        topic: "t".into(),
        partition: 0,
        leader,
        leader_epoch: le,
        partition_epoch: pe,
        isr,
    };
    let (le, pe) = (p.leader_epoch, p.partition_epoch);
    let cases = [
        (
            alter(follower, le, pe, vec![follower]),
            ErrorCode::NotLeaderOrFollower,
        ),
        (
            alter(p.leader, le + 1, pe, vec![p.leader]),
            ErrorCode::FencedLeaderEpoch,
        ),
        (
            alter(p.leader, le, pe + 1, vec![p.leader]),
            ErrorCode::InvalidUpdateVersion,
        ),
        (
            alter(p.leader, le, pe, vec![p.leader, outsider]),
            ErrorCode::IneligibleReplica,
        ),
        (
            alter(p.leader, le, pe, vec![follower]),
            ErrorCode::InvalidRequest,
        ),
        (
            alter(p.leader, le, pe, vec![p.leader, p.leader]),
            ErrorCode::InvalidRequest,
        ),
    ];
    for (cmd, want) in cases {
        assert_eq!(m.err(cmd.clone()).code, want, "{cmd:?}");
    }
    let Applied::PartitionAltered(after) = m.ok(alter(p.leader, le, pe, vec![p.leader])) else {
        panic!()
    };
    assert_eq!(after.partition_epoch, pe + 1);
    assert_eq!(after.leader_epoch, le);
    // The same request again is stale now.
    assert_eq!(
        m.err(alter(p.leader, le, pe, vec![p.leader])).code,
        ErrorCode::InvalidUpdateVersion
    );
    // A fenced follower cannot rejoin.
    let f = fence(&m, follower);
    m.ok(f);
    let isr = vec![p.leader, follower];
    assert_eq!(
        m.err(alter(p.leader, le, pe + 1, isr)).code,
        ErrorCode::IneligibleReplica
    );
}

#[test]
fn single_node_metadata_is_unchanged() {
    // The one-node default registers with the old command: no membership, the old placement,
    // and JSON without the new map (a snapshot reads as before).
    let mut m = Md::new();
    m.ok(Command::RegisterBroker(reg(1, 4, None, 0).broker));
    let Applied::TopicCreated(t) = m.ok(create("t", 6, 1, &[])) else {
        panic!()
    };
    let shards: Vec<u32> = t.partitions.iter().map(|p| p.shard).collect();
    assert_eq!(
        shards,
        (0..6).map(|p| shard_for(t.id, p, 4)).collect::<Vec<_>>()
    );
    assert!(m.md.members.is_empty());
    let json = serde_json::to_string(&m.md).unwrap();
    assert!(!json.contains("members"), "{json}");
    // A snapshot written before this change (no partition_epoch, no home_shard, no members)
    // still reads.
    let mut before = m.md.clone();
    for t in before.topics.values_mut() {
        for p in &mut t.partitions {
            p.home_shard = None;
        }
    }
    let old = serde_json::to_string(&before)
        .unwrap()
        .replace(",\"partition_epoch\":0", "");
    assert!(!old.contains("partition_epoch") && !old.contains("home_shard"));
    let back: ClusterMetadata = serde_json::from_str(&old).unwrap();
    assert_eq!(back, before);
    assert!(m.md.is_live(1));
}
