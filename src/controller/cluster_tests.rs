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

fn reassign(m: &Md, topic: &str, partition: u32, replicas: Option<Vec<u32>>) -> Command {
    Command::ReassignPartition {
        topic: topic.into(),
        partition,
        replicas,
        partition_epoch: m.topic(topic).partitions[partition as usize].partition_epoch,
    }
}

/// The partition's leader adds `joining` to the ISR, as a caught-up follower makes it do.
fn isr_join(m: &mut Md, topic: &str, joining: u32) -> Applied {
    let p = m.topic(topic).partitions[0].clone();
    let mut isr = p.isr.clone();
    isr.push(joining);
    m.ok(Command::AlterPartition {
        topic: topic.into(),
        partition: 0,
        leader: p.leader,
        leader_epoch: p.leader_epoch,
        partition_epoch: p.partition_epoch,
        isr,
    })
}

#[test]
fn reassignment_adds_first_and_removes_only_once_the_new_replicas_are_in_sync() {
    let mut m = Md::new();
    for id in 1..=5 {
        m.register(id, 2, None);
    }
    m.ok(create("t", 1, 3, &[(MIN_INSYNC_REPLICAS, "2")]));
    let p0 = m.topic("t").partitions[0].clone();
    let leader = p0.leader;
    // Keep one old follower, drop the leader and the other, add two new brokers.
    let kept = p0.replicas[1];
    let new: Vec<u32> = (1..=5).filter(|b| !p0.replicas.contains(b)).collect();
    let target = vec![new[0], kept, new[1]];
    m.ok(reassign(&m, "t", 0, Some(target.clone())));
    let p = m.topic("t").partitions[0].clone();
    assert_eq!(
        p.leader, leader,
        "the leader stays while replicas are added"
    );
    assert_eq!(p.isr, p0.isr, "nobody leaves the ISR yet");
    assert_eq!(&p.replicas[..3], &target[..], "the target comes first");
    assert_eq!(p.replicas.len(), 5, "the union of old and new");
    let r = p.reassignment.clone().expect("running");
    assert_eq!(r.adding(), new);
    assert_eq!(
        r.removing(),
        p0.replicas
            .iter()
            .copied()
            .filter(|b| !target.contains(b))
            .collect::<Vec<_>>()
    );
    assert_eq!(p.partition_epoch, p0.partition_epoch + 1);
    check(&m.md);
    // A second one is refused while this one runs.
    let e = m.err(reassign(&m, "t", 0, Some(vec![1, 2, 3])));
    assert_eq!(e.code, ErrorCode::ReassignmentInProgress, "{e}");
    // The first new replica catches up: nothing is removed yet.
    isr_join(&mut m, "t", new[0]);
    let p = m.topic("t").partitions[0].clone();
    assert_eq!(p.isr.len(), 4);
    assert!(p.reassignment.is_some());
    // The second: the reassignment completes in the same step.
    let Applied::PartitionAltered(done) = isr_join(&mut m, "t", new[1]) else {
        panic!()
    };
    assert_eq!(done.replicas, target);
    assert_eq!(done.reassignment, None);
    let mut isr = done.isr.clone();
    isr.sort_unstable();
    let mut want = target.clone();
    want.sort_unstable();
    assert_eq!(isr, want, "the ISR is the whole new replica set");
    assert_eq!(done.leader, new[0], "the removed leader handed over");
    assert_eq!(done.leader_epoch, p0.leader_epoch + 1);
    check(&m.md);
}

#[test]
fn a_cancelled_reassignment_puts_the_original_replicas_back() {
    let mut m = Md::new();
    for id in 1..=4 {
        m.register(id, 1, None);
    }
    m.ok(create("t", 1, 3, &[]));
    // A plan made before home shards: the reassignment pins the leader's shard index.
    m.md.topics.get_mut("t").unwrap().partitions[0].home_shard = None;
    let p0 = m.topic("t").partitions[0].clone();
    let new = (1..=4).find(|b| !p0.replicas.contains(b)).unwrap();
    m.ok(reassign(
        &m,
        "t",
        0,
        Some(vec![new, p0.replicas[1], p0.replicas[2]]),
    ));
    assert_eq!(m.topic("t").partitions[0].home_shard, Some(p0.shard));
    isr_join(&mut m, "t", new);
    assert_eq!(m.topic("t").partitions[0].reassignment, None);
    assert_eq!(m.topic("t").partitions[0].leader, new);

    // Cancel one that is still adding a replica.
    let p1 = m.topic("t").partitions[0].clone();
    let back = p0.leader;
    let target = vec![p1.replicas[0], p1.replicas[1], p1.replicas[2], back];
    m.ok(reassign(&m, "t", 0, Some(target)));
    assert!(m.topic("t").partitions[0].reassignment.is_some());
    let e = m.err(Command::ReassignPartition {
        topic: "t".into(),
        partition: 0,
        replicas: None,
        partition_epoch: 0,
    });
    assert_eq!(e.code, ErrorCode::InvalidUpdateVersion, "{e}");
    m.ok(reassign(&m, "t", 0, None));
    let p = m.topic("t").partitions[0].clone();
    assert_eq!(p.replicas, p1.replicas);
    assert_eq!(p.isr, p1.isr);
    assert_eq!(p.leader, p1.leader);
    assert_eq!(p.reassignment, None);
    let e = m.err(reassign(&m, "t", 0, None));
    assert_eq!(e.code, ErrorCode::NoReassignmentInProgress, "{e}");
    check(&m.md);
}

#[test]
fn bad_reassignments_are_one_line_errors_and_change_nothing() {
    let mut m = Md::new();
    for id in 1..=4 {
        m.register(id, 1, None);
    }
    m.ok(create("t", 2, 2, &[(MIN_INSYNC_REPLICAS, "2")]));
    let f = fence(&m, 4);
    m.ok(f);
    let cases: Vec<(Command, ErrorCode)> = vec![
        (
            Command::ReassignPartition {
                topic: "nope".into(),
                partition: 0,
                replicas: Some(vec![1, 2]),
                partition_epoch: 0,
            },
            ErrorCode::UnknownTopicOrPartition,
        ),
        (
            Command::ReassignPartition {
                topic: "t".into(),
                partition: 9,
                replicas: Some(vec![1, 2]),
                partition_epoch: 0,
            },
            ErrorCode::UnknownTopicOrPartition,
        ),
        (
            reassign(&m, "t", 0, Some(vec![])),
            ErrorCode::InvalidReplicaAssignment,
        ),
        (
            reassign(&m, "t", 0, Some(vec![1, 1])),
            ErrorCode::InvalidReplicaAssignment,
        ),
        (
            reassign(&m, "t", 0, Some(vec![1, 9])),
            ErrorCode::InvalidReplicaAssignment,
        ),
        (
            reassign(&m, "t", 0, Some(vec![1])),
            ErrorCode::InvalidReplicaAssignment,
        ),
        (
            reassign(&m, "t", 1, None),
            ErrorCode::NoReassignmentInProgress,
        ),
        (
            Command::ElectPreferred {
                topic: Some("nope".into()),
                partition: None,
            },
            ErrorCode::UnknownTopicOrPartition,
        ),
        (
            Command::ElectPreferred {
                topic: Some("t".into()),
                partition: Some(5),
            },
            ErrorCode::UnknownTopicOrPartition,
        ),
    ];
    for (cmd, want) in cases {
        let e = m.err(cmd.clone());
        assert_eq!(e.code, want, "{cmd:?}: {e}");
    }
    // A fenced broker cannot be added (it could not catch up).
    let p = m.topic("t").partitions[0].clone();
    if !p.replicas.contains(&4) {
        let e = m.err(reassign(&m, "t", 0, Some(vec![p.replicas[0], 4])));
        assert!(e.message.contains("fenced"), "{e}");
    }
}

#[test]
fn elect_preferred_moves_leadership_back_to_the_first_replica() {
    let mut m = Md::new();
    for id in 1..=3 {
        m.register(id, 1, None);
    }
    m.ok(create("t", 3, 3, &[]));
    let before = m.topic("t").partitions.clone();
    // Broker 1 goes away and comes back: the partitions it led moved.
    let f = fence(&m, 1);
    m.ok(f);
    let epoch = m.epoch(1);
    m.ok(Command::UnfenceBroker {
        node_id: 1,
        broker_epoch: epoch,
    });
    // It rejoins the ISRs it left (its leaders catch it up).
    for i in 0..3u32 {
        let p = m.topic("t").partitions[i as usize].clone();
        if !p.isr.contains(&1) {
            let mut isr = p.isr.clone();
            isr.push(1);
            m.ok(Command::AlterPartition {
                topic: "t".into(),
                partition: i,
                leader: p.leader,
                leader_epoch: p.leader_epoch,
                partition_epoch: p.partition_epoch,
                isr,
            });
        }
    }
    let moved = m
        .topic("t")
        .partitions
        .iter()
        .filter(|p| p.leader != p.replicas[0])
        .count();
    assert!(moved > 0, "broker 1 led something before the fence");
    let Applied::LeadersElected { changed } = m.ok(Command::ElectPreferred {
        topic: None,
        partition: None,
    }) else {
        panic!()
    };
    assert_eq!(changed, moved);
    for (p, b) in m.topic("t").partitions.iter().zip(&before) {
        assert_eq!(p.leader, b.leader, "preferred leader back");
        assert!(p.leader_epoch > b.leader_epoch || p.leader == b.leader);
    }
    let Applied::LeadersElected { changed } = m.ok(Command::ElectPreferred {
        topic: Some("t".into()),
        partition: Some(0),
    }) else {
        panic!()
    };
    assert_eq!(changed, 0, "nothing to do twice");
    check(&m.md);
}

#[test]
fn a_drain_plan_replaces_the_broker_everywhere_and_spreads_the_load() {
    let mut m = Md::new();
    for id in 1..=4 {
        m.register(id, 1, None);
    }
    m.ok(create("t", 8, 3, &[]));
    let plan = m.md.drain_plan(2).expect("a plan");
    let held = m
        .topic("t")
        .partitions
        .iter()
        .filter(|p| p.replicas.contains(&2))
        .count();
    assert_eq!(plan.len(), held);
    let mut gained: BTreeMap<u32, usize> = BTreeMap::new();
    for mv in &plan {
        assert!(!mv.replicas.contains(&2), "{mv:?}");
        let mut r = mv.replicas.clone();
        r.sort_unstable();
        r.dedup();
        assert_eq!(r.len(), 3, "distinct brokers: {mv:?}");
        let before = &m.topic("t").partitions[mv.partition as usize].replicas;
        let new: Vec<u32> = mv
            .replicas
            .iter()
            .copied()
            .filter(|b| !before.contains(b))
            .collect();
        assert_eq!(new.len(), 1);
        *gained.entry(new[0]).or_default() += 1;
    }
    // 8 partitions x 3 replicas on 4 brokers: 6 each; broker 2's 6 go where there is room
    // (each partition has exactly one broker it is not on yet, so no choice here).
    assert_eq!(gained.values().sum::<usize>(), held);
    for mv in plan {
        m.ok(mv.command());
    }
    for p in &m.topic("t").partitions {
        let moving = p
            .reassignment
            .as_ref()
            .is_some_and(|r| r.removing() == vec![2]);
        assert_eq!(moving, p.replicas.contains(&2), "{p:?}");
    }
    assert_eq!(
        m.md.drain_plan(2).expect("nothing more to plan"),
        Vec::new(),
        "partitions moving away from 2 are left to finish"
    );
    assert_eq!(
        m.md.drain_plan(9).unwrap_err().code,
        ErrorCode::InvalidReplicaAssignment
    );
    check(&m.md);
}

#[test]
fn a_reassignment_adding_replicas_past_the_per_shard_limit_is_refused() {
    let mut m = Md::new();
    for id in 1..=4 {
        m.register(id, 1, None);
    }
    // 4 live shards x 2: room for 8 replicas, all taken.
    let limits = MetadataLimits {
        max_partitions_per_shard: 2,
        ..MetadataLimits::default()
    };
    m.ok(create("a", 2, 3, &[]));
    m.ok(create("b", 2, 1, &[]));
    let replicas = m.topic("a").partitions[0].replicas.clone();
    let spare = (1..=4).find(|b| !replicas.contains(b)).unwrap();
    // A move to the spare holds 4 replicas of a-0 while it runs: one past the room.
    let target = vec![spare, replicas[1], replicas[2]];
    let cmd = reassign(&m, "a", 0, Some(target.clone()));
    let before = m.md.clone();
    let e = m.md.apply(99, &cmd, &limits).expect_err("past the room");
    assert_eq!(e.code, ErrorCode::InvalidPartitions, "{e}");
    assert!(e.message.contains("--max-partitions-per-shard"), "{e}");
    assert_eq!(m.md, before, "a refused move changed the metadata");
    // Reordering the replicas it has adds none: room enough.
    let mut reordered = replicas.clone();
    reordered.rotate_left(1);
    let cmd = reassign(&m, "a", 0, Some(reordered));
    m.md.apply(100, &cmd, &limits).expect("no replica added");
    // With room again (b deleted), the move is accepted.
    m.ok(Command::DeleteTopic { name: "b".into() });
    let cmd = reassign(&m, "a", 1, Some(target_for(&m, 1)));
    m.md.apply(101, &cmd, &limits)
        .expect("room after the delete");
}

/// A target for `a`-`p` swapping its first replica for a broker that does not hold it.
fn target_for(m: &Md, p: usize) -> Vec<u32> {
    let replicas = m.topic("a").partitions[p].replicas.clone();
    let spare = (1..=4).find(|b| !replicas.contains(b)).unwrap();
    vec![spare, replicas[1], replicas[2]]
}
