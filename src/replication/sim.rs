//! Deterministic simulation of one partition replicated on 3 to 5 brokers by the sans-IO
//! [`Leader`] and [`Follower`], under the real controller's state machines: the cluster
//! metadata ([`ClusterMetadata`]: placement, elections from the ISR on fencing, AlterPartition
//! accepted only for the current leader and epochs) and the active controller's heartbeat
//! sessions ([`ClusterManager`]: registration, a restarted broker refused until its old session
//! runs out, then fenced and registered again, fences when sessions run out, unfences on
//! heartbeats). Raft itself is not simulated here (the controller simulator does that): the
//! controller is one node whose commands apply at once.
//!
//! One seed drives everything (the controller simulator's PRNG): acks=all produces to whoever
//! believes it leads, durability flushes, crashes that lose what was not durable (the log
//! tail; the leader-epoch file and the high-watermark checkpoint keep what was written),
//! restarts, a network that drops, delays, duplicates and reorders, and network partitions
//! (the controller is node 0 on the network; a partition cuts two sides apart, or any set of
//! links, so A may hear B and C while B and C do not hear each other).
//!
//! Checked after every step (a violation panics naming the seed and the step):
//! - a leader's high watermark never goes back within its epoch;
//! - at most one broker acknowledges in a leader epoch;
//! - every acknowledged record is, durably and unchanged, on every broker of the controller's
//!   ISR (so on whichever it elects next);
//! - every broker's log below the high watermark it knows equals the committed log (what any
//!   leader ever had below its high watermark, which itself never changes);
//! - at the end, healed and quiet: one leader, all brokers in the ISR, the high watermark at
//!   the log end and every log equal to the leader's.
//!
//! `RILL_SIM_SEED=N` replays seed N alone; `RILL_SIM_SEEDS=N` runs N seeds (from
//! `RILL_SIM_SEED_START`); `RILL_SIM_STEPS` changes the steps per seed.

use std::collections::{BTreeMap, BTreeSet};

use super::epochs::{EpochEnd, EpochEntry, LeaderEpochs};
use super::follower::{Follower, FollowerAction};
use super::leader::{IsrProposal, Leader, LeaderAction, LeaderConfig, PartitionView, ReplicaFetch};
use crate::controller::cluster::{BrokerRegistration, ClusterManager, Heartbeat};
use crate::controller::metadata::{BrokerInfo, MetadataLimits};
use crate::controller::sim::{env_u64, fnv, replay_on_failure, seeds_from_env, Rng};
use crate::controller::{Applied, ClusterMetadata, Command};
use crate::protocol::ErrorCode;

const CI_SEEDS: u64 = 24;
const DEFAULT_STEPS: u64 = 3000;
const STEP_MS: u64 = 50;
/// Replicas of the partition: 3 to this many, drawn from the seed.
const MAX_BROKERS: u32 = 5;
/// The controller's node on the simulated network.
const CONTROLLER: u32 = 0;
const NO_LEADER: u32 = u32::MAX;
/// Steps without a heartbeat from a broker before the controller fences it.
const SESSION_STEPS: u64 = 30;
const TOPIC: &str = "t";
const MAX_DELAY_STEPS: u64 = 3;
/// A request unanswered this long is sent again.
const RESEND_STEPS: u64 = 6;
/// Records per fetch answer at most.
const FETCH_MAX: usize = 5;
const SETTLE_STEPS: u64 = 400;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Rec {
    epoch: u32,
    value: u64,
}

#[derive(Clone, Debug)]
enum Body {
    Fetch(ReplicaFetch),
    FetchAnswer {
        leader_epoch: u32,
        start: u64,
        result: Result<(Vec<Rec>, u64), ErrorCode>,
    },
    AskEpoch {
        leader_epoch: u32,
        epoch: u32,
    },
    EpochAnswer {
        leader_epoch: u32,
        asked: u32,
        result: Result<EpochEnd, ErrorCode>,
    },
    Alter(IsrProposal),
    AlterAnswer {
        leader_epoch: u32,
        result: Result<(), ErrorCode>,
    },
}

#[derive(Clone, Debug)]
struct Msg {
    at: u64,
    seq: u64,
    from: u32,
    to: u32,
    body: Body,
}

enum Role {
    None,
    Leader(Leader),
    Follower {
        f: Follower,
        /// Step the outstanding request was sent (None: nothing in flight).
        sent: Option<u64>,
        asked: Option<u32>,
    },
}

struct Broker {
    up: bool,
    incarnation: u64,
    log: Vec<Rec>,
    /// Records `..durable` survive a crash.
    durable: usize,
    epochs: LeaderEpochs,
    /// The leader-epoch file: rewritten (and fsynced) at every change.
    epochs_file: Vec<EpochEntry>,
    /// The high-watermark checkpoint.
    hw_file: u64,
    role: Role,
    /// The partition as this broker last applied it.
    known: Option<PartitionView>,
}

struct Controller {
    md: ClusterMetadata,
    sessions: ClusterManager,
    /// Raft index of the last command applied.
    index: u64,
    /// Each broker's registration (incarnation, broker epoch), once accepted.
    registered: BTreeMap<u32, (u64, u64)>,
}

impl Controller {
    /// Applies commands the controller decided on (one raft entry each); a refused one
    /// changes nothing and says why.
    fn apply(&mut self, cmds: Vec<Command>) -> Result<Vec<Applied>, ErrorCode> {
        let mut out = Vec::new();
        for cmd in cmds {
            self.index += 1;
            let applied = self
                .md
                .apply(self.index, &cmd, &MetadataLimits::default())
                .map_err(|e| e.code)?;
            out.push(applied);
        }
        Ok(out)
    }

    /// The partition as the metadata has it.
    fn view(&self) -> PartitionView {
        let p = &self.md.topics[TOPIC].partitions[0];
        PartitionView {
            leader: if p.leader == crate::controller::cluster::NO_LEADER {
                NO_LEADER
            } else {
                p.leader
            },
            leader_epoch: p.leader_epoch,
            partition_epoch: p.partition_epoch,
            replicas: p.replicas.clone(),
            isr: p.isr.clone(),
        }
    }
}

impl Controller {
    /// A broker (re)registers; returns its broker epoch.
    fn register(&mut self, b: u32, incarnation: u64, now_ms: u64) -> Result<u64, ErrorCode> {
        let cmds = self
            .sessions
            .register(&self.md, &registration(b, incarnation), now_ms)
            .map_err(|e| e.code())?;
        let epoch = self.apply(cmds)?.into_iter().find_map(|a| match a {
            Applied::MemberRegistered { broker_epoch, .. } => Some(broker_epoch),
            _ => None,
        });
        let epoch = epoch.expect("a registration applied registers");
        self.registered.insert(b, (incarnation, epoch));
        Ok(epoch)
    }
}

fn registration(b: u32, incarnation: u64) -> BrokerRegistration {
    BrokerRegistration {
        broker: BrokerInfo {
            node_id: b,
            host: format!("10.0.0.{b}"),
            port: 9292,
            shards: 1,
            kafka_port: None,
        },
        incarnation,
        rack: None,
    }
}

#[derive(Default, Debug, Clone, Copy)]
struct Stats {
    acked: u64,
    refused: u64,
    elections: u64,
    isr_changes: u64,
    truncations: u64,
    crashes: u64,
    dropped: u64,
}

struct Sim {
    seed: u64,
    rng: Rng,
    step: u64,
    cfg: LeaderConfig,
    brokers: BTreeMap<u32, Broker>,
    ctl: Controller,
    net: Vec<Msg>,
    seq: u64,
    /// Links cut by a network partition, (lower id, higher id): two sides, or any links at
    /// all (not transitive: A hears B and C, B does not hear C).
    cut: BTreeSet<(u32, u32)>,
    next_value: u64,
    next_request: u64,
    /// Request id -> (broker, epoch, offset, value) of acks=all appends waiting.
    waiting: BTreeMap<u64, (u32, u32, u64, u64)>,
    /// offset -> record acknowledged there.
    acked: BTreeMap<u64, Rec>,
    ack_leader: BTreeMap<u32, u32>,
    committed: Vec<Rec>,
    hw_seen: BTreeMap<(u32, u32), u64>,
    digest: u64,
    stats: Stats,
}

impl Sim {
    fn new(seed: u64) -> Sim {
        let mut rng = Rng::new(seed);
        let brokers = 3 + rng.below(u64::from(MAX_BROKERS) - 2) as u32;
        let cfg = LeaderConfig {
            min_insync_replicas: 1 + rng.below(u64::from(brokers) - 1) as usize,
            replica_lag_time_max_ms: (10 + rng.below(40)) * STEP_MS,
            isr_proposal_retry_ms: 20 * STEP_MS,
        };
        let replicas: Vec<u32> = (1..=brokers).collect();
        let mut ctl = Controller {
            md: ClusterMetadata::default(),
            sessions: ClusterManager::new(SESSION_STEPS * STEP_MS),
            index: 0,
            registered: BTreeMap::new(),
        };
        for &b in &replicas {
            ctl.register(b, 1, 0)
                .unwrap_or_else(|e| panic!("broker {b} cannot register: {e:?}"));
        }
        let create = Command::CreateTopic {
            name: TOPIC.into(),
            partitions: 1,
            replication_factor: brokers as u16,
            configs: BTreeMap::new(),
        };
        ctl.apply(vec![create])
            .unwrap_or_else(|e| panic!("the topic: {e:?}"));
        let brokers = replicas
            .iter()
            .map(|&b| {
                let broker = Broker {
                    up: true,
                    incarnation: 1,
                    log: Vec::new(),
                    durable: 0,
                    epochs: LeaderEpochs::default(),
                    epochs_file: Vec::new(),
                    hw_file: 0,
                    role: Role::None,
                    known: None,
                };
                (b, broker)
            })
            .collect();
        Sim {
            seed,
            rng,
            step: 0,
            cfg,
            brokers,
            ctl,
            net: Vec::new(),
            seq: 0,
            cut: BTreeSet::new(),
            next_value: 1,
            next_request: 1,
            waiting: BTreeMap::new(),
            acked: BTreeMap::new(),
            ack_leader: BTreeMap::new(),
            committed: Vec::new(),
            hw_seen: BTreeMap::new(),
            digest: 0xcbf2_9ce4_8422_2325,
            stats: Stats::default(),
        }
    }

    fn fail(&self, what: impl std::fmt::Display) -> ! {
        panic!(
            "replication simulation seed {} step {}: {what} (replay: RILL_SIM_SEED={} cargo \
             test --lib replication::sim)",
            self.seed, self.step, self.seed
        )
    }

    fn now_ms(&self) -> u64 {
        self.step * STEP_MS
    }

    fn note(&mut self, bytes: &[u8]) {
        self.digest = fnv(self.digest, bytes);
    }

    fn connected(&self, a: u32, b: u32) -> bool {
        !self.cut.contains(&(a.min(b), a.max(b)))
    }

    fn send(&mut self, from: u32, to: u32, body: Body) {
        if !self.connected(from, to) || self.rng.chance(40) {
            self.stats.dropped += 1;
            return;
        }
        // The controller link is a request/response connection: in order, never duplicated
        // (what lets a leader trust a refusal; see `Leader::on_proposal_refused`).
        let ordered = from == CONTROLLER || to == CONTROLLER;
        if ordered {
            self.seq += 1;
            let m = Msg {
                at: self.step + 1,
                seq: self.seq,
                from,
                to,
                body,
            };
            self.net.push(m);
            return;
        }
        let copies = if self.rng.chance(20) { 2 } else { 1 };
        for _ in 0..copies {
            self.seq += 1;
            let at = self.step + self.rng.below(MAX_DELAY_STEPS + 1);
            self.net.push(Msg {
                at,
                seq: self.seq,
                from,
                to,
                body: body.clone(),
            });
        }
    }

    // ---- storage of one broker ----

    fn persist_epochs(&mut self, b: u32) {
        let br = self.brokers.get_mut(&b).expect("broker");
        br.epochs_file = br.epochs.entries().to_vec();
    }

    fn assign_epoch(&mut self, b: u32, epoch: u32, start: u64) {
        let br = self.brokers.get_mut(&b).expect("broker");
        match br.epochs.assign(epoch, start) {
            Ok(true) => self.persist_epochs(b),
            Ok(false) => {}
            Err(e) => self.fail(format!("broker {b}: {e}")),
        }
    }

    fn truncate(&mut self, b: u32, offset: u64) {
        let br = self.brokers.get_mut(&b).expect("broker");
        br.log.truncate(offset as usize);
        br.durable = br.durable.min(br.log.len());
        if br.epochs.truncate_to(offset) {
            self.persist_epochs(b);
        }
        self.stats.truncations += 1;
        self.note(&[b'T', b as u8]);
    }

    fn crash(&mut self, b: u32) {
        let br = self.brokers.get_mut(&b).expect("broker");
        br.up = false;
        br.log.truncate(br.durable);
        br.role = Role::None;
        br.known = None;
        // Recovery: the epoch file, cut to what the log kept.
        let mut epochs = match LeaderEpochs::from_entries(br.epochs_file.clone()) {
            Ok(e) => e,
            Err(e) => self.fail(format!("broker {b}: epoch file: {e}")),
        };
        let br = self.brokers.get_mut(&b).expect("broker");
        epochs.truncate_to(br.log.len() as u64);
        br.epochs = epochs;
        br.hw_file = br.hw_file.min(br.log.len() as u64);
        self.waiting.retain(|_, w| w.0 != b);
        self.net.retain(|m| m.to != b);
        self.stats.crashes += 1;
        self.note(&[b'C', b as u8]);
    }

    fn restart(&mut self, b: u32) {
        let br = self.brokers.get_mut(&b).expect("broker");
        br.up = true;
        br.incarnation += 1;
        self.note(&[b'R', b as u8]);
    }

    fn flush(&mut self, b: u32) {
        let br = self.brokers.get_mut(&b).expect("broker");
        br.durable = br.log.len();
        let end = br.durable as u64;
        match &mut br.role {
            Role::Leader(l) => l.durable(end),
            Role::Follower { f, .. } => f.durable(end),
            Role::None => {}
        }
        self.leader_actions(b);
    }

    fn hw_of(&self, b: u32) -> u64 {
        match &self.brokers[&b].role {
            Role::Leader(l) => l.high_watermark(),
            Role::Follower { f, .. } => f.high_watermark(),
            Role::None => 0,
        }
    }

    // ---- the controller ----

    /// Counts and notes what changed in the partition since `before`.
    fn ctl_changed(&mut self, before: &PartitionView) {
        let after = self.ctl.view();
        if after.leader != before.leader {
            self.stats.elections += 1;
        }
        if after.leader_epoch != before.leader_epoch {
            let e = after.leader_epoch;
            self.note(&[b'E', (e & 0xff) as u8]);
        }
    }

    /// Heartbeats and registrations from the brokers that can reach the controller (a
    /// restarted one is refused until its old session ran out), then fences for the sessions
    /// that ran out.
    fn ctl_step(&mut self) {
        let now = self.now_ms();
        let before = self.ctl.view();
        let ids: Vec<u32> = self.brokers.keys().copied().collect();
        for b in ids {
            let br = &self.brokers[&b];
            if !br.up || !self.connected(b, CONTROLLER) {
                continue;
            }
            let inc = br.incarnation;
            match self.ctl.registered.get(&b) {
                Some(&(i, broker_epoch)) if i == inc => {
                    let hb = Heartbeat {
                        node_id: b,
                        broker_epoch,
                        want_shutdown: false,
                    };
                    match self.ctl.sessions.heartbeat(&self.ctl.md, &hb, now) {
                        Ok(out) => {
                            if let Some(cmd) = out.propose {
                                if let Err(e) = self.ctl.apply(vec![cmd]) {
                                    self.fail(format!("broker {b}'s heartbeat proposal: {e:?}"));
                                }
                            }
                        }
                        Err(e) => self.fail(format!("broker {b}'s heartbeat: {e}")),
                    }
                }
                _ => {
                    // Refused (a duplicate) while the previous incarnation's session runs.
                    let _ = self.ctl.register(b, inc, now);
                }
            }
        }
        for fence in self.ctl.sessions.poll(&self.ctl.md, now) {
            let _ = self.ctl.apply(vec![fence]);
        }
        self.ctl_changed(&before);
    }

    fn ctl_alter(&mut self, from: u32, p: &IsrProposal) -> Result<(), ErrorCode> {
        let before = self.ctl.view();
        self.ctl.apply(vec![Command::AlterPartition {
            topic: TOPIC.into(),
            partition: 0,
            leader: from,
            leader_epoch: p.leader_epoch,
            partition_epoch: p.partition_epoch,
            isr: p.isr.clone(),
        }])?;
        self.stats.isr_changes += 1;
        self.ctl_changed(&before);
        Ok(())
    }

    // ---- brokers applying metadata ----

    fn apply_view(&mut self, b: u32, view: PartitionView) {
        let now = self.now_ms();
        let br = self.brokers.get_mut(&b).expect("broker");
        if let Some(k) = &br.known {
            if view.leader_epoch < k.leader_epoch || view.partition_epoch <= k.partition_epoch {
                return;
            }
        }
        br.known = Some(view.clone());
        // A leader of this epoch takes the ISR change; anything else ends its leadership.
        let kept = match &mut br.role {
            Role::Leader(l) => {
                l.on_partition(&view, now);
                Some(!l.is_deposed())
            }
            _ => None,
        };
        if let Some(keep) = kept {
            self.leader_actions(b);
            if keep {
                return;
            }
        }
        let br = self.brokers.get_mut(&b).expect("broker");
        if let Role::Follower { f, .. } = &br.role {
            if f.leader() == view.leader && f.leader_epoch() == view.leader_epoch {
                return;
            }
        }
        let hw = self.hw_of(b).max(self.brokers[&b].hw_file);
        // A new role starts from what is durable (a real broker flushes on the change).
        self.flush(b);
        let br = self.brokers.get_mut(&b).expect("broker");
        let log_end = br.log.len() as u64;
        let hw = hw.min(log_end);
        if view.leader == b {
            match Leader::new(b, self.cfg, &view, log_end, hw, now) {
                Ok(l) => br.role = Role::Leader(l),
                Err(e) => self.fail(format!("broker {b} cannot lead: {e}")),
            }
            self.assign_epoch(b, view.leader_epoch, log_end);
            self.note(&[b'L', b as u8]);
        } else if view.leader == NO_LEADER {
            br.role = Role::None;
        } else {
            let (f, first) = Follower::new(view.leader, view.leader_epoch, &br.epochs, log_end, hw);
            br.role = Role::Follower {
                f,
                sent: None,
                asked: None,
            };
            self.follower_actions(b, vec![first]);
        }
    }

    // ---- actions out of the state machines ----

    fn leader_actions(&mut self, b: u32) {
        let Role::Leader(l) = &mut self.brokers.get_mut(&b).expect("broker").role else {
            return;
        };
        let epoch = l.leader_epoch();
        for a in l.take_actions() {
            match a {
                LeaderAction::Acked { id, result } => {
                    let Some((node, e, offset, value)) = self.waiting.remove(&id) else {
                        continue;
                    };
                    if node != b || e != epoch {
                        self.fail(format!("broker {b} answered request {id} of {node}/{e}"));
                    }
                    if result.is_ok() {
                        self.record_ack(b, e, offset, value);
                    } else {
                        self.stats.refused += 1;
                    }
                }
                LeaderAction::ProposeIsr(p) => self.send(b, CONTROLLER, Body::Alter(p)),
            }
        }
    }

    fn record_ack(&mut self, b: u32, epoch: u32, offset: u64, value: u64) {
        if let Some(&other) = self.ack_leader.get(&epoch) {
            if other != b {
                self.fail(format!(
                    "brokers {other} and {b} both acknowledged in epoch {epoch}"
                ));
            }
        }
        self.ack_leader.insert(epoch, b);
        let rec = Rec { epoch, value };
        if self.acked.insert(offset, rec).is_some() {
            self.fail(format!("offset {offset} acknowledged twice"));
        }
        self.stats.acked += 1;
        self.note(&offset.to_le_bytes());
    }

    fn follower_actions(&mut self, b: u32, actions: Vec<FollowerAction>) {
        for a in actions {
            match a {
                FollowerAction::Truncate { offset } => self.truncate(b, offset),
                // The simulated leaders delete nothing, so their logs all start at 0.
                FollowerAction::StartAt { offset } => {
                    self.fail(format!("broker {b} started its log over at {offset}"))
                }
                FollowerAction::AskEpochEnd { leader, epoch } => {
                    let step = self.step;
                    let br = self.brokers.get_mut(&b).expect("broker");
                    let Role::Follower { f, sent, asked } = &mut br.role else {
                        return;
                    };
                    let leader_epoch = f.leader_epoch();
                    *sent = Some(step);
                    *asked = Some(epoch);
                    let body = Body::AskEpoch {
                        leader_epoch,
                        epoch,
                    };
                    self.send(b, leader, body);
                }
                FollowerAction::Fetch { leader, fetch } => {
                    let step = self.step;
                    let br = self.brokers.get_mut(&b).expect("broker");
                    let Role::Follower { sent, asked, .. } = &mut br.role else {
                        return;
                    };
                    *sent = Some(step);
                    *asked = None;
                    self.send(b, leader, Body::Fetch(fetch));
                }
            }
        }
    }

    // ---- message handling ----

    fn deliver(&mut self, m: Msg) {
        let now = self.now_ms();
        if m.to == CONTROLLER {
            if let Body::Alter(p) = &m.body {
                let result = self.ctl_alter(m.from, p);
                let body = Body::AlterAnswer {
                    leader_epoch: p.leader_epoch,
                    result,
                };
                self.send(CONTROLLER, m.from, body);
            }
            return;
        }
        let b = m.to;
        if !self.brokers[&b].up {
            return;
        }
        match m.body {
            Body::Fetch(fetch) => {
                let br = self.brokers.get_mut(&b).expect("broker");
                let result = match &mut br.role {
                    Role::Leader(l) => l.on_fetch(m.from, fetch, now).map_err(|e| e.code()),
                    _ => Err(ErrorCode::NotLeaderOrFollower),
                };
                let result = result.map(|hw| {
                    let from = fetch.fetch_offset as usize;
                    let to = br.log.len().min(from + FETCH_MAX);
                    (br.log[from..to].to_vec(), hw)
                });
                self.leader_actions(b);
                let body = Body::FetchAnswer {
                    leader_epoch: fetch.leader_epoch,
                    start: fetch.fetch_offset,
                    result,
                };
                self.send(b, m.from, body);
            }
            Body::AskEpoch {
                leader_epoch,
                epoch,
            } => {
                let br = &self.brokers[&b];
                let result = match &br.role {
                    Role::Leader(l) if !l.is_deposed() => {
                        if leader_epoch < l.leader_epoch() {
                            Err(ErrorCode::FencedLeaderEpoch)
                        } else if leader_epoch > l.leader_epoch() {
                            Err(ErrorCode::UnknownLeaderEpoch)
                        } else {
                            Ok(br.epochs.end_for(epoch, br.log.len() as u64))
                        }
                    }
                    _ => Err(ErrorCode::NotLeaderOrFollower),
                };
                let body = Body::EpochAnswer {
                    leader_epoch,
                    asked: epoch,
                    result,
                };
                self.send(b, m.from, body);
            }
            Body::EpochAnswer {
                leader_epoch,
                asked,
                result,
            } => {
                let br = self.brokers.get_mut(&b).expect("broker");
                let Role::Follower { f, sent, .. } = &mut br.role else {
                    return;
                };
                if f.leader() != m.from || f.leader_epoch() != leader_epoch {
                    return;
                }
                *sent = None;
                let actions = match result {
                    Ok(answer) => f.on_epoch_end(asked, answer, &br.epochs),
                    Err(code) => Ok(f.on_fetch_error(code, 0, &br.epochs)),
                };
                match actions {
                    Ok(a) => self.follower_actions(b, a),
                    Err(e) => self.fail(format!("broker {b}: {e}")),
                }
            }
            Body::FetchAnswer {
                leader_epoch,
                start,
                result,
            } => self.on_fetch_answer(b, m.from, leader_epoch, start, result),
            Body::AlterAnswer {
                leader_epoch,
                result,
            } => {
                let br = self.brokers.get_mut(&b).expect("broker");
                if let (Role::Leader(l), Err(code)) = (&mut br.role, result) {
                    if l.leader_epoch() == leader_epoch {
                        l.on_proposal_refused(code);
                        self.leader_actions(b);
                    }
                }
            }
            Body::Alter(_) => {}
        }
    }

    fn on_fetch_answer(
        &mut self,
        b: u32,
        from: u32,
        leader_epoch: u32,
        start: u64,
        result: Result<(Vec<Rec>, u64), ErrorCode>,
    ) {
        let br = self.brokers.get_mut(&b).expect("broker");
        let Role::Follower { f, sent, asked } = &mut br.role else {
            return;
        };
        let current = f.leader() == from && f.leader_epoch() == leader_epoch;
        if !current || !f.is_fetching() || asked.is_some() || f.log_end() != start {
            return; // a late or duplicated answer
        }
        *sent = None;
        let (records, hw) = match result {
            Ok(r) => r,
            Err(code) => {
                let actions = f.on_fetch_error(code, 0, &br.epochs);
                self.follower_actions(b, actions);
                return;
            }
        };
        let mut offset = start;
        for r in records {
            if r.epoch > leader_epoch {
                self.fail(format!(
                    "broker {b} fetched epoch {} from {leader_epoch}",
                    r.epoch
                ));
            }
            self.assign_epoch(b, r.epoch, offset);
            self.brokers.get_mut(&b).expect("broker").log.push(r);
            offset += 1;
        }
        let br = self.brokers.get_mut(&b).expect("broker");
        if let Role::Follower { f, .. } = &mut br.role {
            f.appended(offset);
            f.on_high_watermark(hw);
        }
    }

    // ---- one step ----

    fn produce(&mut self) {
        let leaders: Vec<u32> = self
            .brokers
            .iter()
            .filter(|(_, br)| br.up && matches!(&br.role, Role::Leader(l) if !l.is_deposed()))
            .map(|(&b, _)| b)
            .collect();
        if leaders.is_empty() {
            return;
        }
        let b = leaders[self.rng.below(leaders.len() as u64) as usize];
        let value = self.next_value;
        self.next_value += 1;
        let id = self.next_request;
        self.next_request += 1;
        let br = self.brokers.get_mut(&b).expect("broker");
        let Role::Leader(l) = &mut br.role else {
            return;
        };
        if l.admit().is_err() {
            self.stats.refused += 1;
            return;
        }
        let epoch = l.leader_epoch();
        let offset = br.log.len() as u64;
        br.log.push(Rec { epoch, value });
        l.appended(offset + 1);
        self.waiting.insert(id, (b, epoch, offset, value));
        l.wait(id, offset + 1);
        self.leader_actions(b);
        self.note(&value.to_le_bytes());
    }

    fn faults(&mut self) {
        let ids: Vec<u32> = self.brokers.keys().copied().collect();
        for b in ids {
            if self.brokers[&b].up {
                if self.rng.chance(4) {
                    self.crash(b);
                }
            } else if self.rng.chance(60) {
                self.restart(b);
            }
        }
        if self.cut.is_empty() && self.rng.chance(6) {
            let n = self.brokers.len() as u32;
            let links = (0..=n).flat_map(|a| (a + 1..=n).map(move |b| (a, b)));
            if self.rng.below(2) == 0 {
                let side: BTreeSet<u32> = (0..=n).filter(|_| self.rng.below(2) == 0).collect();
                self.cut = links
                    .filter(|(a, b)| side.contains(a) != side.contains(b))
                    .collect();
            } else {
                let all: Vec<(u32, u32)> = links.collect();
                self.cut = all.into_iter().filter(|_| self.rng.below(3) == 0).collect();
            }
            self.note(&[b'P', self.cut.len() as u8]);
        } else if !self.cut.is_empty() && self.rng.chance(25) {
            self.cut.clear();
        }
    }

    fn step_once(&mut self, faults: bool) {
        self.step += 1;
        if faults {
            self.faults();
            if self.rng.chance(400) {
                self.produce();
            }
        }
        self.ctl_step();
        // Metadata reaches the brokers that can hear the controller, sometimes late.
        let ids: Vec<u32> = self.brokers.keys().copied().collect();
        for &b in &ids {
            let br = &self.brokers[&b];
            let registered = self
                .ctl
                .registered
                .get(&b)
                .is_some_and(|r| r.0 == br.incarnation);
            if br.up && registered && self.connected(b, CONTROLLER) && self.rng.chance(600) {
                let view = self.ctl.view();
                self.apply_view(b, view);
            }
        }
        // The network.
        let mut due: Vec<Msg> = Vec::new();
        let mut later = Vec::new();
        for m in std::mem::take(&mut self.net) {
            if m.at <= self.step {
                due.push(m);
            } else {
                later.push(m);
            }
        }
        self.net = later;
        due.sort_by_key(|m| (m.at, m.seq));
        for m in due {
            self.deliver(m);
        }
        // Durability, ticks, fetches.
        let now = self.now_ms();
        for &b in &ids {
            if !self.brokers[&b].up {
                continue;
            }
            if self.rng.chance(300) {
                self.flush(b);
            }
            if self.rng.chance(100) {
                let hw = self.hw_of(b);
                let br = self.brokers.get_mut(&b).expect("broker");
                br.hw_file = br.hw_file.max(hw);
            }
            let step = self.step;
            let br = self.brokers.get_mut(&b).expect("broker");
            let next = match &mut br.role {
                Role::Leader(l) => {
                    l.tick(now);
                    None
                }
                Role::Follower { f, sent, asked } => {
                    let idle = sent.is_none_or(|s| step - s >= RESEND_STEPS);
                    match *asked {
                        _ if !idle => None,
                        Some(epoch) => Some(FollowerAction::AskEpochEnd {
                            leader: f.leader(),
                            epoch,
                        }),
                        None if f.is_fetching() => Some(f.fetch_action()),
                        None => None,
                    }
                }
                Role::None => None,
            };
            self.leader_actions(b);
            if let Some(action) = next {
                self.follower_actions(b, vec![action]);
            }
        }
        self.check();
    }

    // ---- invariants ----

    fn check(&mut self) {
        let ids: Vec<u32> = self.brokers.keys().copied().collect();
        for &b in &ids {
            let br = &self.brokers[&b];
            if !br.up {
                continue;
            }
            if let Role::Leader(l) = &br.role {
                let hw = l.high_watermark();
                let key = (b, l.leader_epoch());
                if self.hw_seen.get(&key).is_some_and(|&seen| hw < seen) {
                    self.fail(format!("broker {b}'s high watermark went back to {hw}"));
                }
                self.hw_seen.insert(key, hw);
                // What a leader has below its high watermark is committed, forever.
                let hw = hw as usize;
                let common = self.committed.len().min(hw);
                if br.log[..common] != self.committed[..common] {
                    self.fail(format!("leader {b} changed committed records below {hw}"));
                }
                if hw > self.committed.len() {
                    let more = br.log[self.committed.len()..hw].to_vec();
                    self.committed.extend(more);
                }
            }
        }
        for &b in &ids {
            let br = &self.brokers[&b];
            let hw = self.hw_of(b) as usize;
            if br.up && (hw > self.committed.len() || br.log[..hw] != self.committed[..hw]) {
                self.fail(format!(
                    "broker {b} differs from the committed log below {hw}"
                ));
            }
        }
        let isr = self.ctl.view().isr;
        for (&offset, rec) in &self.acked {
            if self.committed.get(offset as usize) != Some(rec) {
                self.fail(format!("acknowledged record at {offset} is not committed"));
            }
            for b in &isr {
                let br = &self.brokers[b];
                if (br.durable as u64) <= offset || br.log[offset as usize] != *rec {
                    self.fail(format!(
                        "acknowledged record at {offset} is not durable on ISR member {b} \
                         (ISR {isr:?})"
                    ));
                }
            }
        }
    }

    fn run(mut self, steps: u64) -> (u64, Stats) {
        for _ in 0..steps {
            self.step_once(true);
        }
        // Heal, restart everyone, keep quiet; then everything must have converged.
        self.cut.clear();
        let ids: Vec<u32> = self.brokers.keys().copied().collect();
        for &b in &ids {
            if !self.brokers[&b].up {
                self.restart(b);
            }
        }
        for _ in 0..SETTLE_STEPS {
            self.step_once(false);
            for &b in &ids {
                self.flush(b);
            }
        }
        let v = self.ctl.view();
        if v.leader == NO_LEADER || v.isr.len() != self.brokers.len() {
            self.fail(format!("not converged after healing: {v:?}"));
        }
        let leader = &self.brokers[&v.leader];
        let Role::Leader(l) = &leader.role else {
            self.fail(format!("broker {} does not lead after healing", v.leader));
        };
        if l.high_watermark() != leader.log.len() as u64 {
            self.fail(format!(
                "high watermark {} short of the log end {} after healing",
                l.high_watermark(),
                leader.log.len()
            ));
        }
        for &b in &ids {
            if self.brokers[&b].log != leader.log {
                self.fail(format!(
                    "broker {b}'s log differs from the leader's after healing"
                ));
            }
        }
        (self.digest, self.stats)
    }
}

fn run_seed(seed: u64, steps: u64) -> (u64, Stats) {
    replay_on_failure("replication simulation", seed, || Sim::new(seed).run(steps))
}

#[test]
fn seeded_replication_keeps_every_invariant() {
    let steps = env_u64("RILL_SIM_STEPS").unwrap_or(DEFAULT_STEPS);
    let seeds = seeds_from_env(CI_SEEDS);
    let mut total = Stats::default();
    for &seed in &seeds {
        let (_, s) = run_seed(seed, steps);
        total.acked += s.acked;
        total.refused += s.refused;
        total.elections += s.elections;
        total.isr_changes += s.isr_changes;
        total.truncations += s.truncations;
        total.crashes += s.crashes;
        total.dropped += s.dropped;
    }
    eprintln!("simulated {} seeds x {steps} steps: {total:?}", seeds.len());
    // The faults and the protocol happened (else the checks checked nothing).
    if seeds.len() as u64 >= CI_SEEDS {
        let n = seeds.len() as u64;
        assert!(total.acked > 100 * n, "{total:?}");
        assert!(total.elections > n, "{total:?}");
        assert!(total.isr_changes > n, "{total:?}");
        assert!(total.truncations > 0 && total.crashes > 0, "{total:?}");
        assert!(total.refused > 0 && total.dropped > 0, "{total:?}");
    }
}

#[test]
fn same_seed_replays_exactly() {
    let a = run_seed(7, 600);
    assert_eq!(
        a.0,
        run_seed(7, 600).0,
        "seed 7 did not replay the same events"
    );
    assert_ne!(
        a.0,
        run_seed(8, 600).0,
        "different seeds ran the same events"
    );
}
