//! The consumer group state machine driven by simulated members: each test checks, after
//! every step, the coordinator's invariants and that no partition is held by two live
//! members at once (as the members themselves see it).

use std::collections::{BTreeMap, BTreeSet};

use super::*;

const SESSION: u64 = 45_000;
const REBALANCE: i32 = 30_000;

/// A member as the client sees itself.
#[derive(Debug, Clone)]
struct Client {
    id: String,
    instance: Option<String>,
    epoch: i32,
    owned: BTreeSet<TopicPartition>,
    topics: Vec<String>,
    assignor: Option<String>,
    regex: Option<String>,
    /// Crashed or left: sends nothing more.
    dead: bool,
}

struct Sim {
    g: ConsumerGroup,
    topics: BTreeMap<String, u32>,
    clients: BTreeMap<String, Client>,
    now: u64,
}

fn tp(t: &str, p: u32) -> TopicPartition {
    (t.to_string(), p)
}

impl Sim {
    fn new(topics: &[(&str, u32)]) -> Sim {
        Sim {
            g: ConsumerGroup::new("g", ConsumerGroupConfig::default()),
            topics: topics.iter().map(|(t, n)| (t.to_string(), *n)).collect(),
            clients: BTreeMap::new(),
            now: 1_000,
        }
    }

    /// The checks every step ends with.
    fn check(&self) {
        self.g.check_invariants().unwrap();
        let mut seen: BTreeMap<&TopicPartition, &str> = BTreeMap::new();
        for c in self.clients.values().filter(|c| !c.dead) {
            for p in &c.owned {
                if let Some(other) = seen.insert(p, &c.id) {
                    panic!("{p:?} owned by {other} and {} at once", c.id);
                }
            }
        }
    }

    fn join_with(
        &mut self,
        name: &str,
        topics: &[&str],
        instance: Option<&str>,
        assignor: Option<&str>,
    ) {
        let c = Client {
            id: name.to_string(),
            instance: instance.map(str::to_string),
            epoch: 0,
            owned: BTreeSet::new(),
            topics: topics.iter().map(|t| t.to_string()).collect(),
            assignor: assignor.map(str::to_string),
            regex: None,
            dead: false,
        };
        self.clients.insert(name.to_string(), c);
        self.hb(name).unwrap();
    }

    fn join(&mut self, name: &str) {
        let topics: Vec<String> = self.topics.keys().cloned().collect();
        let topics: Vec<&str> = topics.iter().map(String::as_str).collect();
        self.join_with(name, &topics, None, None);
    }

    fn request(&self, name: &str) -> Heartbeat {
        let c = &self.clients[name];
        Heartbeat {
            member_id: c.id.clone(),
            member_epoch: c.epoch,
            instance_id: c.instance.clone(),
            rack_id: None,
            rebalance_timeout_ms: if c.epoch == 0 { REBALANCE } else { -1 },
            subscribed_topic_names: (c.epoch == 0).then(|| c.topics.clone()),
            subscribed_topic_regex: if c.epoch == 0 { c.regex.clone() } else { None },
            server_assignor: c.assignor.clone(),
            owned: Some(c.owned.iter().cloned().collect()),
            client_id: "cli".into(),
            client_host: "/127.0.0.1".into(),
        }
    }

    /// One heartbeat of a member, its reply applied as a client would (dropping revoked
    /// partitions at once, taking new ones).
    fn hb(&mut self, name: &str) -> Result<HeartbeatReply, GroupError> {
        let req = self.request(name);
        let topics = self.topics.clone();
        let out = self.g.heartbeat(self.now, req, &topics);
        let c = self.clients.get_mut(name).unwrap();
        match &out {
            Ok(r) => {
                c.id = r.member_id.clone();
                c.epoch = r.member_epoch;
                if let Some(a) = &r.assignment {
                    c.owned = a.iter().cloned().collect();
                }
            }
            Err(e)
                if e.code == ErrorCode::FencedMemberEpoch
                    || e.code == ErrorCode::UnknownMemberId =>
            {
                // The client gives up everything and rejoins next time.
                c.owned.clear();
                c.epoch = 0;
            }
            Err(_) => {}
        }
        self.check();
        out
    }

    fn live(&self) -> Vec<String> {
        self.clients
            .iter()
            .filter(|(_, c)| !c.dead)
            .map(|(n, _)| n.clone())
            .collect()
    }

    /// Heartbeats every live member in turn until the group is stable (bounded).
    fn settle(&mut self) {
        for _ in 0..20 {
            for n in self.live() {
                let _ = self.hb(&n);
            }
            if self.g.state() == ConsumerGroupState::Stable {
                // One more round so every member has heard its final assignment.
                for n in self.live() {
                    let _ = self.hb(&n);
                }
                return;
            }
        }
        panic!("never stable: {:#?}", self.g.describe());
    }

    fn owned(&self, name: &str) -> BTreeSet<TopicPartition> {
        self.clients[name].owned.clone()
    }

    fn counts(&self) -> Vec<usize> {
        self.live().iter().map(|n| self.owned(n).len()).collect()
    }

    /// Every partition of every topic held by exactly one live member.
    fn assert_complete(&self) {
        let all: BTreeSet<TopicPartition> = self
            .topics
            .iter()
            .flat_map(|(t, n)| (0..*n).map(move |p| tp(t, p)))
            .collect();
        let held: BTreeSet<TopicPartition> =
            self.live().iter().flat_map(|n| self.owned(n)).collect();
        assert_eq!(held, all);
    }

    fn tick(&mut self, advance: u64) -> Vec<(String, Expiry)> {
        self.now += advance;
        let gone = self.g.tick(self.now);
        for (id, _) in &gone {
            if let Some(c) = self.clients.values_mut().find(|c| &c.id == id) {
                // Its process is gone (or will be fenced): it holds nothing any more.
                c.owned.clear();
                c.dead = true;
            }
        }
        self.check();
        gone
    }
}

#[test]
fn members_join_one_by_one_and_partitions_move_only_once_released() {
    let mut s = Sim::new(&[("t", 6)]);
    s.join("a");
    assert_eq!(s.owned("a").len(), 6, "the first member takes everything");
    assert_eq!(s.clients["a"].epoch, 1);
    assert_eq!(s.g.state(), ConsumerGroupState::Stable);

    // b joins: epoch 2; it is at the new epoch but gets nothing a still holds.
    s.join("b");
    assert_eq!(s.g.group_epoch(), 2);
    assert!(s.owned("b").is_empty(), "{:?}", s.owned("b"));
    assert_eq!(s.g.state(), ConsumerGroupState::Reconciling);
    // a is told to give 3 up; its epoch stays 1 until it did.
    let r = s.hb("a").unwrap();
    assert_eq!(r.member_epoch, 1);
    assert_eq!(r.assignment.as_ref().map(Vec::len), Some(3));
    // b still gets nothing: a has not confirmed the release yet.
    s.hb("b").unwrap();
    assert!(s.owned("b").is_empty());
    // a confirms (owned without them): epoch 2, and the partitions are free.
    assert_eq!(s.hb("a").unwrap().member_epoch, 2);
    let r = s.hb("b").unwrap();
    assert_eq!(r.assignment.as_ref().map(Vec::len), Some(3));
    assert_eq!(s.g.state(), ConsumerGroupState::Stable);

    s.join("c");
    s.settle();
    assert_eq!(s.counts(), vec![2, 2, 2]);
    s.assert_complete();
    let d = s.g.describe();
    assert_eq!((d.group_epoch, d.assignment_epoch), (3, 3));
    assert!(d
        .members
        .iter()
        .all(|m| m.member_epoch == 3 && m.assigned == m.target));
    assert_eq!(d.assignor, UNIFORM);
}

#[test]
fn a_leaving_member_hands_its_partitions_to_the_others() {
    let mut s = Sim::new(&[("t", 4)]);
    for n in ["a", "b"] {
        s.join(n);
    }
    s.settle();
    let a_id = s.clients["a"].id.clone();
    let mut leave = s.request("a");
    leave.member_epoch = LEAVE_EPOCH;
    let r = s.g.heartbeat(s.now, leave, &four).unwrap();
    assert_eq!(r.member_epoch, LEAVE_EPOCH);
    s.clients.get_mut("a").unwrap().dead = true;
    assert_eq!(s.g.member_epoch(&a_id), None);
    s.settle();
    assert_eq!(s.owned("b").len(), 4);
    // Unknown afterwards.
    let mut again = s.request("a");
    again.member_epoch = 3;
    let e = s.g.heartbeat(s.now, again, &four).unwrap_err();
    assert_eq!(e.code, ErrorCode::UnknownMemberId);
}

#[test]
fn a_silent_member_is_removed_after_its_session_timeout() {
    let mut s = Sim::new(&[("t", 4)]);
    for n in ["a", "b"] {
        s.join(n);
    }
    s.settle();
    // b keeps heartbeating, a goes silent.
    s.now += SESSION / 2;
    s.hb("b").unwrap();
    assert!(
        s.tick(SESSION / 2).is_empty(),
        "a is still within its session"
    );
    let gone = s.tick(10);
    assert_eq!(gone, vec![(s.clients["a"].id.clone(), Expiry::Session)]);
    s.settle();
    assert_eq!(s.owned("b").len(), 4);
}

#[test]
fn a_member_that_does_not_revoke_in_time_is_removed() {
    let mut s = Sim::new(&[("t", 4)]);
    s.join("a");
    s.join("b");
    // a hears it must revoke, then only heartbeats still claiming everything.
    s.hb("a").unwrap();
    let stuck: Vec<TopicPartition> = (0..4).map(|p| tp("t", p)).collect();
    for _ in 0..3 {
        s.now += 5_000;
        let mut req = s.request("a");
        req.owned = Some(stuck.clone());
        s.g.heartbeat(s.now, req, &four).unwrap();
        s.hb("b").unwrap();
        s.tick(0);
    }
    assert!(s.owned("b").is_empty(), "b never gets a partition a claims");
    s.now += REBALANCE as u64;
    s.hb("b").unwrap();
    let gone = s.tick(1);
    assert_eq!(gone, vec![(s.clients["a"].id.clone(), Expiry::Revocation)]);
    s.settle();
    assert_eq!(s.owned("b").len(), 4);
}

#[test]
fn stale_epochs_are_fenced_and_the_member_rejoins() {
    let mut s = Sim::new(&[("t", 4)]);
    s.join("a");
    s.join("b");
    s.settle();
    let epoch = s.clients["a"].epoch;
    // Ahead of the coordinator: fenced.
    let mut req = s.request("a");
    req.member_epoch = epoch + 1;
    let e = s.g.heartbeat(s.now, req, &four).unwrap_err();
    assert_eq!(e.code, ErrorCode::FencedMemberEpoch, "{e}");
    // The previous epoch with a subset of what it holds: a lost reply, accepted.
    let mut req = s.request("a");
    req.member_epoch = 1;
    s.g.heartbeat(s.now, req.clone(), &four).unwrap();
    // The previous epoch claiming more than it holds: fenced.
    req.owned = Some((0..4).map(|p| tp("t", p)).collect());
    let e = s.g.heartbeat(s.now, req, &four).unwrap_err();
    assert_eq!(e.code, ErrorCode::FencedMemberEpoch);
    // An epoch far behind: fenced; the client drops everything and rejoins with epoch 0
    // under its member id, and gets its share back.
    s.clients.get_mut("a").unwrap().epoch = -5 + 5; // 0: rejoin
    s.clients.get_mut("a").unwrap().owned.clear();
    let r = s.hb("a").unwrap();
    assert!(r.member_epoch > 0 && r.assignment.is_some());
    s.settle();
    assert_eq!(s.counts(), vec![2, 2]);
    // Commits: the member's current epoch only.
    let a = s.clients["a"].clone();
    s.g.validate_offset_commit(&a.id, a.epoch).unwrap();
    let e = s.g.validate_offset_commit(&a.id, a.epoch - 1).unwrap_err();
    assert_eq!(e.code, ErrorCode::StaleMemberEpoch);
    let e = s.g.validate_offset_commit("nobody", a.epoch).unwrap_err();
    assert_eq!(e.code, ErrorCode::UnknownMemberId);
    let e = s.g.validate_offset_commit("", -1).unwrap_err();
    assert_eq!(
        e.code,
        ErrorCode::UnknownMemberId,
        "outsiders only commit to empty groups"
    );
    s.g.validate_offset_fetch(None, -1).unwrap();
    s.g.validate_offset_fetch(Some(&a.id), a.epoch).unwrap();
    assert_eq!(
        s.g.validate_offset_fetch(Some(&a.id), a.epoch + 1)
            .unwrap_err()
            .code,
        ErrorCode::StaleMemberEpoch
    );
}

#[test]
fn a_static_member_comes_back_to_its_partitions_without_a_rebalance() {
    let mut s = Sim::new(&[("t", 4)]);
    s.join_with("a", &["t"], Some("host-a"), None);
    s.join_with("b", &["t"], Some("host-b"), None);
    s.settle();
    let before = s.owned("a");
    let epoch = s.g.group_epoch();
    // a restarts: leaves with -2, its partitions wait for it.
    let mut req = s.request("a");
    req.member_epoch = LEAVE_STATIC_EPOCH;
    assert_eq!(
        s.g.heartbeat(s.now, req, &four).unwrap().member_epoch,
        LEAVE_STATIC_EPOCH
    );
    s.clients.get_mut("a").unwrap().owned.clear();
    s.hb("b").unwrap();
    assert_eq!(s.owned("b").len(), 2, "b gets nothing of a's");
    assert_eq!(s.g.group_epoch(), epoch, "no rebalance");
    // Another process claiming a live instance is refused.
    let mut thief = s.request("b");
    thief.member_id = "thief".into();
    thief.member_epoch = 0;
    thief.owned = Some(Vec::new());
    thief.subscribed_topic_names = Some(vec!["t".into()]);
    thief.rebalance_timeout_ms = REBALANCE;
    let e = s.g.heartbeat(s.now, thief, &four).unwrap_err();
    assert_eq!(e.code, ErrorCode::UnreleasedInstanceId);
    // a comes back under a new member id with its instance id: same partitions.
    let c = s.clients.get_mut("a").unwrap();
    c.id = "a-restarted".into();
    c.epoch = 0;
    s.hb("a").unwrap();
    assert_eq!(s.owned("a"), before);
    assert_eq!(s.g.group_epoch(), epoch);
    // The old member id is fenced as an instance holder.
    let mut old = s.request("b");
    old.instance_id = Some("host-a".into());
    let e = s.g.heartbeat(s.now, old, &four).unwrap_err();
    assert_eq!(e.code, ErrorCode::FencedInstanceId);
    // A static member away past its session is removed for good.
    let mut req = s.request("a");
    req.member_epoch = LEAVE_STATIC_EPOCH;
    s.g.heartbeat(s.now, req, &four).unwrap();
    s.clients.get_mut("a").unwrap().owned.clear();
    s.clients.get_mut("a").unwrap().dead = true;
    s.now += SESSION / 2;
    s.hb("b").unwrap();
    s.tick(SESSION / 2 + 1);
    s.settle();
    assert_eq!(s.owned("b").len(), 4);
}

#[test]
fn more_partitions_and_deleted_topics_bump_the_epoch_and_reassign() {
    let mut s = Sim::new(&[("t", 2), ("u", 2)]);
    s.join("a");
    s.join("b");
    s.settle();
    let epoch = s.g.group_epoch();
    s.topics.insert("t".into(), 6);
    s.hb("a").unwrap();
    assert_eq!(s.g.group_epoch(), epoch + 1);
    s.settle();
    s.assert_complete();
    assert_eq!(s.counts(), vec![4, 4]);
    s.topics.remove("u");
    s.hb("b").unwrap();
    assert_eq!(s.g.group_epoch(), epoch + 2);
    s.settle();
    s.assert_complete();
    assert!(s
        .live()
        .iter()
        .all(|n| s.owned(n).iter().all(|(t, _)| t == "t")));
    // A topic created after the members subscribed to it.
    s.topics.insert("u".into(), 3);
    let topics = s.topics.clone();
    s.g.topics_changed(&topics);
    assert_eq!(s.g.group_epoch(), epoch + 3);
    s.settle();
    s.assert_complete();
}

#[test]
fn requests_kafka_refuses_are_refused() {
    let mut g = ConsumerGroup::new(
        "g",
        ConsumerGroupConfig {
            max_members: 1,
            ..Default::default()
        },
    );
    let join = |id: &str| Heartbeat {
        member_id: id.into(),
        member_epoch: 0,
        rebalance_timeout_ms: REBALANCE,
        subscribed_topic_names: Some(vec!["t".into()]),
        owned: Some(Vec::new()),
        ..Default::default()
    };
    let t = |_: &str| Some(1);
    let mut regex = join("a");
    regex.subscribed_topic_regex = Some("t(".into());
    assert_eq!(
        g.heartbeat(0, regex, &t).unwrap_err().code,
        ErrorCode::InvalidRegularExpression
    );
    let mut assignor = join("a");
    assignor.server_assignor = Some("sticky".into());
    assert_eq!(
        g.heartbeat(0, assignor, &t).unwrap_err().code,
        ErrorCode::UnsupportedAssignor
    );
    let mut no_topics = join("a");
    no_topics.subscribed_topic_names = None;
    assert_eq!(
        g.heartbeat(0, no_topics, &t).unwrap_err().code,
        ErrorCode::InvalidRequest
    );
    let mut bad_epoch = join("a");
    bad_epoch.member_epoch = -3;
    assert_eq!(
        g.heartbeat(0, bad_epoch, &t).unwrap_err().code,
        ErrorCode::InvalidRequest
    );
    assert!(g.is_empty(), "refusals leave nothing behind");
    // A member id the client did not choose is made up; the group is bounded.
    let r = g.heartbeat(0, join(""), &t).unwrap();
    assert!(!r.member_id.is_empty());
    assert_eq!(r.assignment, Some(vec![tp("t", 0)]));
    assert_eq!(r.heartbeat_interval_ms, 5_000);
    assert_eq!(
        g.heartbeat(0, join("b"), &t).unwrap_err().code,
        ErrorCode::GroupMaxSizeReached
    );
}

/// The target a set of members gets, joined in the given order.
fn target_of(
    order: &[&str],
    topics: &[(&str, u32)],
    assignor: &str,
) -> BTreeMap<String, Vec<TopicPartition>> {
    let mut s = Sim::new(topics);
    let names: Vec<&str> = topics.iter().map(|(t, _)| *t).collect();
    for n in order {
        s.join_with(n, &names, None, Some(assignor));
    }
    s.g.describe()
        .members
        .into_iter()
        .map(|m| (m.member_id, m.target))
        .collect()
}

#[test]
fn uniform_assignor_is_balanced_and_deterministic() {
    let topics = [("t", 7), ("u", 5)];
    let a = target_of(&["m1", "m2", "m3"], &topics, UNIFORM);
    let b = target_of(&["m3", "m1", "m2"], &topics, UNIFORM);
    let counts: Vec<usize> = a.values().map(Vec::len).collect();
    assert_eq!(counts.iter().sum::<usize>(), 12);
    assert!(
        counts.iter().max().unwrap() - counts.iter().min().unwrap() <= 1,
        "{counts:?}"
    );
    // Same members, same topics: the same target, whatever the join order (the sticky
    // assignor only sees the previous target, which is the same at every step).
    let c = target_of(&["m1", "m2", "m3"], &topics, UNIFORM);
    assert_eq!(a, c);
    assert_eq!(b.values().map(Vec::len).sum::<usize>(), 12);
}

#[test]
fn range_assignor_gives_contiguous_ranges_per_topic() {
    let a = target_of(&["m1", "m2", "m3"], &[("t", 7), ("u", 5)], RANGE);
    let b = target_of(&["m2", "m3", "m1"], &[("t", 7), ("u", 5)], RANGE);
    assert_eq!(a, b, "range ignores the join order");
    let of = |m: &str, t: &str| -> Vec<u32> {
        a[m].iter()
            .filter(|(x, _)| x == t)
            .map(|(_, p)| *p)
            .collect()
    };
    assert_eq!(of("m1", "t"), vec![0, 1, 2]);
    assert_eq!(of("m2", "t"), vec![3, 4]);
    assert_eq!(of("m3", "t"), vec![5, 6]);
    assert_eq!(of("m1", "u"), vec![0, 1]);
    assert_eq!(of("m3", "u"), vec![4]);
    // The group says which assignor it used.
    let mut s = Sim::new(&[("t", 3)]);
    s.join_with("a", &["t"], None, Some(RANGE));
    assert_eq!(s.g.describe().assignor, RANGE);
}

/// xorshift64*: a seeded schedule without a dependency.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

#[test]
fn random_schedules_never_give_a_partition_to_two_members() {
    for seed in 1..=40u64 {
        let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        let mut s = Sim::new(&[("t", 5), ("u", 3)]);
        let mut next = 0;
        // Static members away for a restart (left with -2), by client name.
        let mut away: Vec<String> = Vec::new();
        for _ in 0..300 {
            match rng.below(12) {
                0 | 1 if s.live().len() < 6 => {
                    next += 1;
                    let topics: &[&str] = if rng.below(3) == 0 {
                        &["t"]
                    } else {
                        &["t", "u"]
                    };
                    let name = format!("m{next}");
                    let instance = (rng.below(3) == 0).then(|| format!("i{next}"));
                    s.join_with(&name, topics, instance.as_deref(), None);
                }
                6 => {
                    // A static member leaves for a restart: its partitions wait for it.
                    let statics: Vec<String> = s
                        .live()
                        .into_iter()
                        .filter(|n| s.clients[n].instance.is_some())
                        .collect();
                    if let Some(n) = statics.get(rng.below(statics.len().max(1) as u64) as usize) {
                        let mut req = s.request(n);
                        req.member_epoch = LEAVE_STATIC_EPOCH;
                        let _ = s.g.heartbeat(s.now, req, &none);
                        let c = s.clients.get_mut(n).unwrap();
                        c.dead = true;
                        c.owned.clear();
                        away.push(n.clone());
                        s.check();
                    }
                }
                7 if !away.is_empty() => {
                    // ... and comes back under a new member id (or finds it expired and
                    // joins afresh).
                    let n = away.remove(rng.below(away.len() as u64) as usize);
                    next += 1;
                    let c = s.clients.get_mut(&n).unwrap();
                    c.dead = false;
                    c.epoch = 0;
                    c.owned.clear();
                    c.id = format!("{n}-restart{next}");
                    let _ = s.hb(&n);
                }
                2 => {
                    // A clean leave.
                    let live = s.live();
                    if let Some(n) = live.get(rng.below(live.len().max(1) as u64) as usize) {
                        let mut req = s.request(n);
                        req.member_epoch = LEAVE_EPOCH;
                        let _ = s.g.heartbeat(s.now, req, &none);
                        let c = s.clients.get_mut(n).unwrap();
                        c.dead = true;
                        c.owned.clear();
                        s.check();
                    }
                }
                3 => {
                    // Time passes; members not heard from expire.
                    let advance = rng.below(SESSION / 2);
                    s.tick(advance);
                }
                4 if rng.below(10) == 0 => {
                    let n = s.topics["t"] + 1;
                    s.topics.insert("t".into(), n);
                }
                5 => {
                    // A member crashes (stops heartbeating, keeps nothing when it is gone).
                    let live = s.live();
                    if let Some(n) = live.get(rng.below(live.len().max(1) as u64) as usize) {
                        let c = s.clients.get_mut(n).unwrap();
                        c.dead = true;
                        c.owned.clear();
                    }
                }
                _ => {
                    let live = s.live();
                    if let Some(n) = live.get(rng.below(live.len().max(1) as u64) as usize) {
                        s.now += rng.below(3_000);
                        let n = n.clone();
                        let _ = s.hb(&n);
                    }
                }
            }
        }
        // Quiet: the living heartbeat, the dead expire, and the living converge on a
        // complete assignment.
        for _ in 0..((SESSION + REBALANCE as u64) / 5_000 + 1) {
            s.now += 5_000;
            for n in s.live() {
                let _ = s.hb(&n);
            }
            s.tick(0);
        }
        if s.live().is_empty() {
            continue;
        }
        s.settle();
        let all_subscribe_u = s.live().iter().any(|n| s.clients[n].topics.len() == 2);
        if all_subscribe_u {
            s.assert_complete();
        }
        let d = s.g.describe();
        assert!(
            d.members.iter().all(|m| m.assigned == m.target),
            "seed {seed}"
        );
    }
}

fn four(_: &str) -> Option<u32> {
    Some(4)
}

fn none(_: &str) -> Option<u32> {
    None
}

#[test]
fn a_regular_expression_subscription_follows_the_topics_it_matches() {
    let mut s = Sim::new(&[("orders-eu", 2), ("orders-us", 2), ("payments", 2)]);
    s.clients.insert(
        "a".into(),
        Client {
            id: "a".into(),
            instance: None,
            epoch: 0,
            owned: BTreeSet::new(),
            topics: Vec::new(),
            assignor: None,
            regex: Some("orders-.*".into()),
            dead: false,
        },
    );
    s.hb("a").unwrap();
    assert_eq!(
        s.owned("a")
            .into_iter()
            .map(|(t, _)| t)
            .collect::<BTreeSet<_>>(),
        ["orders-eu", "orders-us"].map(String::from).into()
    );
    let d = s.g.describe();
    assert_eq!(d.members[0].subscribed_regex.as_deref(), Some("orders-.*"));
    // Whole names only: "orders-" is not a prefix match of "xorders-eu".
    s.topics.insert("xorders-eu".into(), 1);
    // A new matching topic: the group learns of it from the metadata and rebalances.
    s.topics.insert("orders-asia".into(), 3);
    let epoch = s.g.group_epoch();
    let topics = s.topics.clone();
    s.g.topics_changed(&topics);
    assert_eq!(s.g.group_epoch(), epoch + 1);
    s.settle();
    assert_eq!(s.owned("a").len(), 7);
    assert!(s.owned("a").iter().all(|(t, _)| t.starts_with("orders-")));
    // A second member by name shares what both subscribe to.
    s.join_with("b", &["orders-us", "payments"], None, None);
    s.settle();
    assert!(s
        .owned("b")
        .iter()
        .all(|(t, _)| t == "orders-us" || t == "payments"));
    assert_eq!(s.owned("a").len() + s.owned("b").len(), 9);
    // A topic deleted: gone from the regex's match and from the assignment.
    s.topics.remove("orders-asia");
    let topics = s.topics.clone();
    s.g.topics_changed(&topics);
    s.settle();
    assert!(s.owned("a").iter().all(|(t, _)| t != "orders-asia"));
}
