//! Seeded schedules: two producer instances sharing a transactional id, appends that become
//! durable late or fail, markers written partly, time jumps, failovers (the in-flight
//! appends of the deposed leader made durable or lost at random) - and after each step the
//! safety rules, at the end liveness.
//!
//! Safety: the durable log's states of an id follow Kafka's transitions; markers are only
//! ever sent for an outcome the log holds (PrepareCommit/PrepareAbort of that producer id and
//! epoch); a Complete record is durable only once every partition of the transaction has its
//! marker; a request is answered success only for the producer id and epoch the log holds.
//! Liveness: with appends and markers succeeding again and time passing, every transaction
//! ends (committed or aborted) and nothing stays in flight.

use std::collections::BTreeSet;

use super::coordinator::{Action, CoordinatorConfig, Event, Response, TxnCoordinator};
use super::log_record::TxnLogRecord;
use super::state::{TxnMetadata, TxnState};
use super::TopicPartition;

const ID: &str = "tx";

use crate::batch::test_support::Rng;

#[derive(Debug, Clone, Copy, PartialEq)]
enum Ask {
    Init(usize),
    Add(usize, i64, i16),
    End(usize, i64, i16, bool),
}

struct Sim {
    c: TxnCoordinator,
    rng: Rng,
    now: u64,
    coordinator_epoch: i32,
    log: Vec<TxnLogRecord>,
    appends: Vec<(u64, TxnLogRecord)>,
    sends: Vec<(i64, i16, bool, Vec<TopicPartition>)>,
    /// Markers on the partitions: (partition, producer id, epoch, commit).
    markers: BTreeSet<(TopicPartition, i64, i16, bool)>,
    instances: [Option<(i64, i16)>; 2],
    asks: Vec<(u64, Ask)>,
    next_req: u64,
    next_pid: i64,
    failing: bool,
}

impl Sim {
    fn durable(&self) -> Option<&TxnMetadata> {
        self.log
            .iter()
            .rev()
            .find(|r| r.transactional_id == ID)
            .and_then(|r| r.metadata.as_ref())
    }

    fn feed(&mut self, ev: Event) {
        let mut queue = vec![ev];
        while let Some(ev) = queue.pop() {
            let again = ev.clone();
            for a in self.c.handle(ev) {
                match a {
                    Action::Append { seq, record } => self.appends.push((seq, record)),
                    Action::AllocateProducerId { .. } => {
                        self.next_pid += 1;
                        let Event::InitProducerId {
                            req,
                            transactional_id,
                            timeout_ms,
                            producer_id,
                            producer_epoch,
                            now_ms,
                            ..
                        } = again.clone()
                        else {
                            panic!("an id for an InitProducerId")
                        };
                        queue.push(Event::InitProducerId {
                            req,
                            transactional_id,
                            timeout_ms,
                            producer_id,
                            producer_epoch,
                            fresh_producer_id: Some(self.next_pid),
                            now_ms,
                        });
                    }
                    Action::SendMarkers {
                        producer_id,
                        producer_epoch,
                        commit,
                        coordinator_epoch,
                        partitions,
                        ..
                    } => {
                        // Markers only for the outcome the log holds.
                        let d = self.durable().expect("markers of a logged id");
                        let want = if commit {
                            TxnState::PrepareCommit
                        } else {
                            TxnState::PrepareAbort
                        };
                        assert_eq!(
                            (d.state, d.producer_id, d.producer_epoch),
                            (want, producer_id, producer_epoch)
                        );
                        assert!(partitions.iter().all(|p| d.partitions.contains(p)));
                        assert_eq!(coordinator_epoch, self.coordinator_epoch);
                        self.sends
                            .push((producer_id, producer_epoch, commit, partitions));
                    }
                    Action::Respond { req, response } => self.answered(req, response),
                }
            }
        }
    }

    fn answered(&mut self, req: u64, response: Response) {
        let i = self
            .asks
            .iter()
            .position(|(r, _)| *r == req)
            .expect("an answer to a request asked");
        let (_, ask) = self.asks.remove(i);
        let d = self.durable().cloned();
        match (ask, response) {
            (Ask::Init(i), Response::ProducerId(Ok(p))) => {
                let d = d.expect("an id handed out is durable");
                assert_eq!((d.producer_id, d.producer_epoch), p);
                self.instances[i] = Some(p);
            }
            (Ask::Add(_, pid, epoch), Response::Done(Ok(()))) => {
                let d = d.expect("added to a logged id");
                assert_eq!((d.producer_id, d.producer_epoch), (pid, epoch));
                assert_eq!(d.state, TxnState::Ongoing);
            }
            (Ask::End(_, pid, epoch, commit), Response::Done(Ok(()))) => {
                let d = d.expect("ended a logged id");
                assert_eq!((d.producer_id, d.producer_epoch), (pid, epoch));
                let ok = if commit {
                    [TxnState::PrepareCommit, TxnState::CompleteCommit]
                } else {
                    [TxnState::PrepareAbort, TxnState::CompleteAbort]
                };
                assert!(ok.contains(&d.state), "{commit} answered in {:?}", d.state);
            }
            (_, Response::ProducerId(Err(_)) | Response::Done(Err(_))) => {}
            (ask, r) => panic!("{ask:?} answered {r:?}"),
        }
    }

    /// Makes an in-flight append durable: checks the transition it logs.
    fn make_durable(&mut self, i: usize) -> u64 {
        let (seq, rec) = self.appends.remove(i);
        let before = self.durable().cloned();
        if let (Some(b), Some(m)) = (&before, &rec.metadata) {
            let same_producer = b.producer_id == m.producer_id;
            assert!(
                m.state.may_follow(b.state) || (m.state == TxnState::Empty && b.state.is_idle()),
                "{:?} -> {:?}",
                b.state,
                m.state
            );
            if same_producer {
                assert!(m.producer_epoch >= b.producer_epoch, "epochs never go back");
            }
            if matches!(m.state, TxnState::CompleteCommit | TxnState::CompleteAbort) {
                let commit = m.state == TxnState::CompleteCommit;
                assert_eq!(
                    (b.producer_id, b.producer_epoch),
                    (m.producer_id, m.producer_epoch)
                );
                for tp in &b.partitions {
                    assert!(
                        self.markers.contains(&(
                            tp.clone(),
                            m.producer_id,
                            m.producer_epoch,
                            commit
                        )),
                        "completed without the marker on {tp:?}"
                    );
                }
            }
            if m.state.is_prepared() && b.state == TxnState::Ongoing {
                assert_eq!(m.partitions, b.partitions);
            }
        }
        self.log.push(rec);
        seq
    }

    fn ask(&mut self, ask: Ask) {
        self.next_req += 1;
        let req = self.next_req;
        self.asks.push((req, ask));
        let now_ms = self.now;
        let ev = match ask {
            Ask::Init(_) => Event::InitProducerId {
                req,
                transactional_id: ID.into(),
                timeout_ms: 20_000,
                producer_id: -1,
                producer_epoch: -1,
                fresh_producer_id: None,
                now_ms,
            },
            Ask::Add(_, producer_id, producer_epoch) => {
                let n = 1 + self.rng.below(3) as u32;
                let partitions = (0..n)
                    .map(|_| TopicPartition::new("t", self.rng.below(4) as u32))
                    .collect();
                Event::AddPartitions {
                    req,
                    transactional_id: ID.into(),
                    producer_id,
                    producer_epoch,
                    partitions,
                    now_ms,
                }
            }
            Ask::End(_, producer_id, producer_epoch, commit) => Event::EndTxn {
                req,
                transactional_id: ID.into(),
                producer_id,
                producer_epoch,
                commit,
                now_ms,
            },
        };
        self.feed(ev);
    }

    fn deliver_markers(&mut self, i: usize, all: bool) {
        let (pid, epoch, commit, parts) = self.sends.remove(i);
        let written: Vec<TopicPartition> = parts
            .into_iter()
            .filter(|_| all || self.rng.below(2) == 0)
            .collect();
        for tp in &written {
            self.markers.insert((tp.clone(), pid, epoch, commit));
        }
        self.feed(Event::MarkersDone {
            transactional_id: ID.into(),
            producer_id: pid,
            producer_epoch: epoch,
            written,
            now_ms: self.now,
        });
    }

    fn step(&mut self) {
        match self.rng.below(100) {
            0..=9 => {
                let i = self.rng.below(2) as usize;
                self.ask(Ask::Init(i));
            }
            10..=29 => {
                let i = self.rng.below(2) as usize;
                if let Some((pid, epoch)) = self.instances[i] {
                    self.ask(Ask::Add(i, pid, epoch));
                }
            }
            30..=39 => {
                let i = self.rng.below(2) as usize;
                if let Some((pid, epoch)) = self.instances[i] {
                    let commit = self.rng.below(3) != 0;
                    self.ask(Ask::End(i, pid, epoch, commit));
                }
            }
            40..=64 if !self.appends.is_empty() => {
                let i = self.rng.below(self.appends.len() as u64) as usize;
                if self.failing && self.rng.below(4) == 0 {
                    let (seq, _) = self.appends.remove(i);
                    self.feed(Event::AppendFailed {
                        seq,
                        error: crate::protocol::ErrorCode::NotEnoughReplicas,
                        now_ms: self.now,
                    });
                } else {
                    let seq = self.make_durable(i);
                    self.feed(Event::Appended {
                        seq,
                        now_ms: self.now,
                    });
                }
            }
            65..=84 if !self.sends.is_empty() => {
                let i = self.rng.below(self.sends.len() as u64) as usize;
                let all = !self.failing || self.rng.below(2) == 0;
                self.deliver_markers(i, all);
            }
            85..=96 => {
                self.now += self.rng.below(6_000);
                self.feed(Event::Tick { now_ms: self.now });
            }
            97..=99 if self.failing => {
                // Failover: the old leader's appends in flight reach the log or not; its
                // marker requests in flight are written or not; the new leader loads.
                while !self.appends.is_empty() {
                    if self.rng.below(2) == 0 {
                        self.make_durable(0);
                    } else {
                        self.appends.remove(0);
                    }
                }
                for (pid, epoch, commit, parts) in std::mem::take(&mut self.sends) {
                    for tp in parts {
                        if self.rng.below(2) == 0 {
                            self.markers.insert((tp, pid, epoch, commit));
                        }
                    }
                }
                self.feed(Event::Deposed);
                assert!(self.asks.is_empty(), "every request answered at deposition");
                self.coordinator_epoch += 1;
                self.feed(Event::BecameLeader {
                    coordinator_epoch: self.coordinator_epoch,
                    records: self.log.clone(),
                    now_ms: self.now,
                });
            }
            _ => {}
        }
    }
}

/// (commits, aborts, failovers) the schedule went through.
fn run(seed: u64, steps: usize) -> [usize; 3] {
    let mut sim = Sim {
        c: TxnCoordinator::new(CoordinatorConfig {
            id_expiration_ms: 3_600_000,
            ..CoordinatorConfig::default()
        }),
        rng: Rng(seed | 1),
        now: 1_000_000,
        coordinator_epoch: 1,
        log: Vec::new(),
        appends: Vec::new(),
        sends: Vec::new(),
        markers: BTreeSet::new(),
        instances: [None, None],
        asks: Vec::new(),
        next_req: 0,
        next_pid: 100,
        failing: true,
    };
    sim.feed(Event::BecameLeader {
        coordinator_epoch: 1,
        records: Vec::new(),
        now_ms: sim.now,
    });
    for _ in 0..steps {
        sim.step();
    }
    // Liveness: everything succeeds from now on and time passes.
    sim.failing = false;
    for round in 0.. {
        assert!(round < 1000, "seed {seed}: the coordinator does not settle");
        while !sim.appends.is_empty() {
            let seq = sim.make_durable(0);
            sim.feed(Event::Appended {
                seq,
                now_ms: sim.now,
            });
        }
        while !sim.sends.is_empty() {
            sim.deliver_markers(0, true);
        }
        let settled = sim.c.describe(ID).is_none_or(|m| m.state.is_idle());
        if settled && sim.appends.is_empty() && sim.sends.is_empty() {
            break;
        }
        sim.now += 30_000;
        sim.feed(Event::Tick { now_ms: sim.now });
    }
    // Memory agrees with the log.
    assert_eq!(sim.c.describe(ID), sim.durable(), "seed {seed}");
    assert!(sim.asks.is_empty(), "seed {seed}: requests left unanswered");
    let count = |s: TxnState| {
        sim.log
            .iter()
            .filter(|r| r.metadata.as_ref().is_some_and(|m| m.state == s))
            .count()
    };
    [
        count(TxnState::CompleteCommit),
        count(TxnState::CompleteAbort),
        sim.coordinator_epoch as usize - 1,
    ]
}

#[test]
fn seeded_schedules_keep_the_rules() {
    let mut seen = [0usize; 3];
    for seed in 0..400u64 {
        let r = run(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15), 400);
        for (s, n) in seen.iter_mut().zip(r) {
            *s += n;
        }
    }
    // The schedules do reach commits, aborts and failovers.
    assert!(seen.iter().all(|&n| n > 100), "{seen:?}");
    eprintln!("commits, aborts, failovers: {seen:?}");
}
