//! The coordinator's transitions and errors, one scenario each, driven by hand.

use super::coordinator::{Action, CoordinatorConfig, Event, Response, TxnCoordinator};
use super::log_record::TxnLogRecord;
use super::state::{TxnState, MAX_EPOCH};
use super::TopicPartition;
use crate::protocol::ErrorCode;

const ID: &str = "payments";

/// A coordinator whose appends are made durable at once (unless told otherwise) and whose
/// durable records are kept, as the partition's log would.
struct H {
    c: TxnCoordinator,
    log: Vec<TxnLogRecord>,
    now: u64,
    req: u64,
    next_pid: i64,
    /// Actions not yet consumed by the test (markers to send, answers).
    out: Vec<Action>,
    auto_durable: bool,
    in_flight: Vec<(u64, TxnLogRecord)>,
}

fn tp(t: &str, p: u32) -> TopicPartition {
    TopicPartition::new(t, p)
}

impl H {
    fn new() -> H {
        H::with(CoordinatorConfig::default())
    }

    fn with(cfg: CoordinatorConfig) -> H {
        let mut h = H {
            c: TxnCoordinator::new(cfg),
            log: Vec::new(),
            now: 1_000_000,
            req: 0,
            next_pid: 1000,
            out: Vec::new(),
            auto_durable: true,
            in_flight: Vec::new(),
        };
        h.feed(Event::BecameLeader {
            coordinator_epoch: 1,
            records: Vec::new(),
            now_ms: h.now,
        });
        h
    }

    /// Delivers an event and everything it leads to (appends durable, producer ids given).
    fn feed(&mut self, ev: Event) {
        let mut queue = vec![ev];
        while let Some(ev) = queue.pop() {
            let retry = ev.clone();
            for a in self.c.handle(ev) {
                match a {
                    Action::Append { seq, record } if self.auto_durable => {
                        self.log.push(record);
                        queue.push(Event::Appended {
                            seq,
                            now_ms: self.now,
                        });
                    }
                    Action::Append { seq, record } => self.in_flight.push((seq, record)),
                    Action::AllocateProducerId { .. } => {
                        let Event::InitProducerId {
                            req,
                            transactional_id,
                            timeout_ms,
                            producer_id,
                            producer_epoch,
                            now_ms,
                            ..
                        } = retry.clone()
                        else {
                            panic!("an id is allocated for InitProducerId")
                        };
                        self.next_pid += 1;
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
                    other => self.out.push(other),
                }
            }
        }
    }

    fn answer(&mut self, req: u64) -> Option<Response> {
        let i = self
            .out
            .iter()
            .position(|a| matches!(a, Action::Respond { req: r, .. } if *r == req))?;
        match self.out.remove(i) {
            Action::Respond { response, .. } => Some(response),
            _ => unreachable!(),
        }
    }

    fn init(
        &mut self,
        timeout_ms: i32,
        expected: Option<(i64, i16)>,
    ) -> Result<(i64, i16), ErrorCode> {
        self.req += 1;
        let req = self.req;
        let (producer_id, producer_epoch) = expected.unwrap_or((-1, -1));
        self.feed(Event::InitProducerId {
            req,
            transactional_id: ID.to_string(),
            timeout_ms,
            producer_id,
            producer_epoch,
            fresh_producer_id: None,
            now_ms: self.now,
        });
        match self.answer(req) {
            Some(Response::ProducerId(r)) => r,
            other => panic!("InitProducerId answered {other:?}"),
        }
    }

    fn add(&mut self, p: (i64, i16), parts: &[TopicPartition]) -> Option<Result<(), ErrorCode>> {
        self.req += 1;
        let req = self.req;
        self.feed(Event::AddPartitions {
            req,
            transactional_id: ID.to_string(),
            producer_id: p.0,
            producer_epoch: p.1,
            partitions: parts.to_vec(),
            now_ms: self.now,
        });
        match self.answer(req) {
            Some(Response::Done(r)) => Some(r),
            None => None,
            other => panic!("AddPartitions answered {other:?}"),
        }
    }

    fn end(&mut self, p: (i64, i16), commit: bool) -> Option<Result<(), ErrorCode>> {
        self.end_of(ID, p, commit)
    }

    fn end_of(&mut self, id: &str, p: (i64, i16), commit: bool) -> Option<Result<(), ErrorCode>> {
        self.req += 1;
        let req = self.req;
        self.feed(Event::EndTxn {
            req,
            transactional_id: id.to_string(),
            producer_id: p.0,
            producer_epoch: p.1,
            commit,
            now_ms: self.now,
        });
        match self.answer(req) {
            Some(Response::Done(r)) => Some(r),
            None => None,
            other => panic!("EndTxn answered {other:?}"),
        }
    }

    /// The marker sends asked for so far (taken).
    fn sends(&mut self) -> Vec<(i64, i16, bool, i32, Vec<TopicPartition>)> {
        let mut v = Vec::new();
        self.out.retain(|a| match a {
            Action::SendMarkers {
                producer_id,
                producer_epoch,
                commit,
                coordinator_epoch,
                partitions,
                ..
            } => {
                v.push((
                    *producer_id,
                    *producer_epoch,
                    *commit,
                    *coordinator_epoch,
                    partitions.clone(),
                ));
                false
            }
            _ => true,
        });
        v
    }

    fn markers_done(&mut self, p: (i64, i16), written: &[TopicPartition]) {
        self.feed(Event::MarkersDone {
            transactional_id: ID.to_string(),
            producer_id: p.0,
            producer_epoch: p.1,
            written: written.to_vec(),
            now_ms: self.now,
        });
    }

    fn state(&self) -> TxnState {
        self.c.describe(ID).expect("known id").state
    }

    fn tick(&mut self, advance_ms: u64) {
        self.now += advance_ms;
        self.feed(Event::Tick { now_ms: self.now });
    }
}

#[test]
fn a_committed_transaction_goes_through_every_state() {
    let mut h = H::new();
    let p = h.init(60_000, None).unwrap();
    assert_eq!(p, (1001, 0));
    assert_eq!(h.state(), TxnState::Empty);
    let parts = [tp("a", 0), tp("b", 1)];
    assert_eq!(h.add(p, &parts), Some(Ok(())));
    assert_eq!(
        h.add(p, &parts[..1]),
        Some(Ok(())),
        "already in: answered at once"
    );
    assert_eq!(h.state(), TxnState::Ongoing);
    assert_eq!(h.end(p, true), Some(Ok(())));
    assert_eq!(h.state(), TxnState::PrepareCommit);
    assert_eq!(h.sends(), vec![(1001, 0, true, 1, parts.to_vec())]);
    h.markers_done(p, &parts);
    assert_eq!(h.state(), TxnState::CompleteCommit);
    assert!(h.c.describe(ID).unwrap().partitions.is_empty());
    let states: Vec<TxnState> = h
        .log
        .iter()
        .map(|r| r.metadata.as_ref().unwrap().state)
        .collect();
    assert_eq!(
        states,
        [
            TxnState::Empty,
            TxnState::Ongoing,
            TxnState::PrepareCommit,
            TxnState::CompleteCommit
        ]
    );
    // A retried EndTxn: the same outcome succeeds, the other is refused.
    assert_eq!(h.end(p, true), Some(Ok(())));
    assert_eq!(h.end(p, false), Some(Err(ErrorCode::InvalidTxnState)));
    // The next transaction at the same epoch.
    assert_eq!(h.add(p, &[tp("c", 0)]), Some(Ok(())));
    assert_eq!(h.end(p, false), Some(Ok(())));
    assert_eq!(h.sends(), vec![(1001, 0, false, 1, vec![tp("c", 0)])]);
    assert_eq!(
        h.end(p, false),
        Some(Err(ErrorCode::ConcurrentTransactions))
    );
    assert_eq!(h.end(p, true), Some(Err(ErrorCode::InvalidTxnState)));
    assert_eq!(
        h.add(p, &[tp("c", 0)]),
        Some(Err(ErrorCode::ConcurrentTransactions))
    );
    h.markers_done(p, &[tp("c", 0)]);
    assert_eq!(h.state(), TxnState::CompleteAbort);
}

#[test]
fn bad_requests_get_kafkas_errors_and_change_nothing() {
    let mut h = H::new();
    assert_eq!(
        h.end((5, 0), true),
        Some(Err(ErrorCode::InvalidProducerIdMapping))
    );
    assert_eq!(
        h.add((5, 0), &[tp("a", 0)]),
        Some(Err(ErrorCode::InvalidProducerIdMapping))
    );
    assert_eq!(h.init(0, None), Err(ErrorCode::InvalidTransactionTimeout));
    assert_eq!(h.init(-1, None), Err(ErrorCode::InvalidTransactionTimeout));
    assert_eq!(
        h.init(900_001, None),
        Err(ErrorCode::InvalidTransactionTimeout)
    );
    assert!(h.log.is_empty() && h.c.describe(ID).is_none());
    let p = h.init(900_000, None).unwrap();
    let log = h.log.len();
    assert_eq!(
        h.end((p.0 + 1, p.1), true),
        Some(Err(ErrorCode::InvalidProducerIdMapping))
    );
    assert_eq!(
        h.end((p.0, p.1 + 1), true),
        Some(Err(ErrorCode::ProducerFenced))
    );
    assert_eq!(
        h.end(p, true),
        Some(Err(ErrorCode::InvalidTxnState)),
        "nothing open"
    );
    assert_eq!(
        h.add((p.0, p.1 - 1), &[tp("a", 0)]),
        Some(Err(ErrorCode::ProducerFenced))
    );
    assert_eq!(h.log.len(), log, "nothing written");
    assert_eq!(h.state(), TxnState::Empty);
}

#[test]
fn a_new_instance_fences_the_old_one_and_aborts_its_transaction() {
    let mut h = H::new();
    let old = h.init(60_000, None).unwrap();
    h.add(old, &[tp("a", 0)]).unwrap().unwrap();
    // The new instance: its first try aborts the open transaction with a bumped epoch.
    assert_eq!(h.init(60_000, None), Err(ErrorCode::ConcurrentTransactions));
    assert_eq!(h.state(), TxnState::PrepareAbort);
    let sends = h.sends();
    assert_eq!(sends, vec![(old.0, old.1 + 1, false, 1, vec![tp("a", 0)])]);
    // Until the markers are written it retries.
    assert_eq!(h.init(60_000, None), Err(ErrorCode::ConcurrentTransactions));
    h.markers_done((old.0, old.1 + 1), &[tp("a", 0)]);
    assert_eq!(h.state(), TxnState::CompleteAbort);
    let new = h.init(60_000, None).unwrap();
    assert_eq!(new, (old.0, old.1 + 2));
    // The zombie is fenced everywhere.
    assert_eq!(
        h.add(old, &[tp("b", 0)]),
        Some(Err(ErrorCode::ProducerFenced))
    );
    assert_eq!(h.end(old, true), Some(Err(ErrorCode::ProducerFenced)));
    assert_eq!(h.init(60_000, Some(old)), Err(ErrorCode::ProducerFenced));
    assert_eq!(h.add(new, &[tp("b", 0)]), Some(Ok(())));
}

#[test]
fn a_kip360_retry_gets_the_same_epoch_and_an_exhausted_epoch_a_new_id() {
    let mut h = H::new();
    let p0 = h.init(60_000, None).unwrap();
    let p1 = h.init(60_000, Some(p0)).unwrap();
    assert_eq!(p1, (p0.0, p0.1 + 1));
    // The answer was lost: the same request again gets the same epoch, nothing written.
    let log = h.log.len();
    assert_eq!(h.init(60_000, Some(p0)), Ok(p1));
    assert_eq!(h.log.len(), log);
    // Exhaust the epoch: load a record at MAX_EPOCH.
    let mut m = h.c.describe(ID).unwrap().clone();
    m.producer_epoch = MAX_EPOCH;
    h.feed(Event::BecameLeader {
        coordinator_epoch: 2,
        records: vec![TxnLogRecord {
            transactional_id: ID.to_string(),
            metadata: Some(m),
        }],
        now_ms: h.now,
    });
    let fresh = h.init(60_000, Some((p0.0, MAX_EPOCH))).unwrap();
    assert_ne!(fresh.0, p0.0);
    assert_eq!(fresh.1, 0);
    let meta = h.c.describe(ID).unwrap();
    assert_eq!(
        (meta.last_producer_id, meta.last_producer_epoch),
        (p0.0, MAX_EPOCH)
    );
    // The retry of that (its answer lost) gets the new id, not another one.
    assert_eq!(h.init(60_000, Some((p0.0, MAX_EPOCH))), Ok(fresh));
}

#[test]
fn a_timed_out_transaction_is_aborted_with_an_epoch_bump() {
    let mut h = H::new();
    let p = h.init(10_000, None).unwrap();
    h.add(p, &[tp("a", 0), tp("a", 1)]).unwrap().unwrap();
    h.tick(9_999);
    assert_eq!(h.state(), TxnState::Ongoing);
    assert_eq!(h.c.next_wakeup_ms(), Some(h.now + 1));
    h.tick(1);
    assert_eq!(h.state(), TxnState::PrepareAbort);
    let sends = h.sends();
    assert_eq!(
        sends,
        vec![(p.0, p.1 + 1, false, 1, vec![tp("a", 0), tp("a", 1)])]
    );
    // The producer finds out at its next request.
    assert_eq!(h.end(p, true), Some(Err(ErrorCode::ProducerFenced)));
    h.markers_done((p.0, p.1 + 1), &[tp("a", 0), tp("a", 1)]);
    assert_eq!(h.state(), TxnState::CompleteAbort);
}

#[test]
fn failed_markers_are_retried_with_growing_backoff_until_written() {
    let mut h = H::new();
    let p = h.init(60_000, None).unwrap();
    let parts = [tp("a", 0), tp("b", 0)];
    h.add(p, &parts).unwrap().unwrap();
    h.end(p, true).unwrap().unwrap();
    assert_eq!(h.sends().len(), 1);
    // a-0 written, b-0 not: only b-0 again, after 200 ms (100 doubled).
    h.markers_done(p, &parts[..1]);
    assert_eq!(h.c.next_wakeup_ms(), Some(h.now + 200));
    h.tick(199);
    assert!(h.sends().is_empty());
    h.tick(1);
    assert_eq!(h.sends(), vec![(p.0, p.1, true, 1, vec![tp("b", 0)])]);
    h.markers_done(p, &[]);
    assert_eq!(h.c.next_wakeup_ms(), Some(h.now + 400));
    // Capped at the maximum.
    for _ in 0..20 {
        h.tick(10_000);
        assert_eq!(h.sends().len(), 1);
        h.markers_done(p, &[]);
    }
    assert_eq!(h.c.next_wakeup_ms(), Some(h.now + 10_000));
    // A stale answer (an older epoch) changes nothing.
    h.markers_done((p.0, p.1 - 1), &parts);
    assert_eq!(h.state(), TxnState::PrepareCommit);
    h.tick(10_000);
    h.sends();
    h.markers_done(p, &parts[1..]);
    assert_eq!(h.state(), TxnState::CompleteCommit);
}

#[test]
fn deposed_mid_commit_the_next_leader_finishes_it_from_the_log() {
    let mut h = H::new();
    let p = h.init(60_000, None).unwrap();
    h.add(p, &[tp("a", 0)]).unwrap().unwrap();
    h.auto_durable = false;
    assert_eq!(h.end(p, true), None, "answered once durable");
    // Deposed before the PrepareCommit is durable: answered NOT_COORDINATOR.
    h.req += 0;
    let req = h.req;
    h.feed(Event::Deposed);
    assert_eq!(
        h.answer(req),
        Some(Response::Done(Err(ErrorCode::NotCoordinator)))
    );
    assert_eq!(h.end(p, true), Some(Err(ErrorCode::NotCoordinator)));
    // The record made it to the log after all (the old leader's append was replicated):
    // the new leader loads it and writes the markers at its own epoch.
    let (seq, rec) = h.in_flight.pop().unwrap();
    h.log.push(rec);
    h.auto_durable = true;
    h.feed(Event::Appended { seq, now_ms: h.now }); // too late: ignored
    h.feed(Event::BecameLeader {
        coordinator_epoch: 7,
        records: h.log.clone(),
        now_ms: h.now,
    });
    assert_eq!(h.state(), TxnState::PrepareCommit);
    assert_eq!(h.sends(), vec![(p.0, p.1, true, 7, vec![tp("a", 0)])]);
    // The client's retried EndTxn: still being completed.
    assert_eq!(h.end(p, true), Some(Err(ErrorCode::ConcurrentTransactions)));
    h.markers_done(p, &[tp("a", 0)]);
    assert_eq!(h.end(p, true), Some(Ok(())));
}

#[test]
fn a_failed_append_answers_its_request_and_keeps_the_old_state() {
    let mut h = H::new();
    let p = h.init(60_000, None).unwrap();
    h.auto_durable = false;
    assert_eq!(h.add(p, &[tp("a", 0)]), None);
    let (seq, _) = h.in_flight.pop().unwrap();
    h.feed(Event::AppendFailed {
        seq,
        error: ErrorCode::NotEnoughReplicas,
        now_ms: h.now,
    });
    assert_eq!(
        h.answer(h.req),
        Some(Response::Done(Err(ErrorCode::NotEnoughReplicas)))
    );
    assert_eq!(h.state(), TxnState::Empty);
    // A brand-new id whose first record failed is forgotten.
    h.req += 1;
    let req = h.req;
    h.feed(Event::InitProducerId {
        req,
        transactional_id: "other".into(),
        timeout_ms: 1000,
        producer_id: -1,
        producer_epoch: -1,
        fresh_producer_id: None,
        now_ms: h.now,
    });
    let (seq, _) = h.in_flight.pop().unwrap();
    h.feed(Event::AppendFailed {
        seq,
        error: ErrorCode::NotCoordinator,
        now_ms: h.now,
    });
    assert_eq!(
        h.answer(req),
        Some(Response::ProducerId(Err(ErrorCode::NotCoordinator)))
    );
    assert!(h.c.describe("other").is_none());
}

#[test]
fn idle_ids_expire_and_the_number_of_ids_is_bounded() {
    let mut h = H::with(CoordinatorConfig {
        id_expiration_ms: 50_000,
        max_transactional_ids: 1,
        ..CoordinatorConfig::default()
    });
    let p = h.init(60_000, None).unwrap();
    h.req += 1;
    let req = h.req;
    h.feed(Event::InitProducerId {
        req,
        transactional_id: "second".into(),
        timeout_ms: 1000,
        producer_id: -1,
        producer_epoch: -1,
        fresh_producer_id: None,
        now_ms: h.now,
    });
    assert_eq!(
        h.answer(req),
        Some(Response::ProducerId(Err(ErrorCode::PolicyViolation)))
    );
    h.tick(49_999);
    assert!(h.c.describe(ID).is_some());
    h.tick(1);
    assert!(h.c.describe(ID).is_none());
    assert_eq!(h.log.last().unwrap().metadata, None, "a tombstone");
    assert_eq!(
        h.end(p, true),
        Some(Err(ErrorCode::InvalidProducerIdMapping))
    );
    // A reload of the log agrees.
    h.feed(Event::BecameLeader {
        coordinator_epoch: 2,
        records: h.log.clone(),
        now_ms: h.now,
    });
    assert!(h.c.describe(ID).is_none());
    // An Ongoing transaction does not expire (it times out instead).
    let p = h.init(60_000, None).unwrap();
    h.add(p, &[tp("a", 0)]).unwrap().unwrap();
    assert_eq!(h.c.next_wakeup_ms(), Some(h.now + 60_000));
}

#[test]
fn a_transaction_without_markers_to_write_completes_at_once() {
    // Loaded in PrepareAbort with no partitions (as a fenced empty transaction could be).
    let mut h = H::new();
    h.init(60_000, None).unwrap();
    let mut m = h.c.describe(ID).unwrap().clone();
    m.state = TxnState::PrepareAbort;
    h.feed(Event::BecameLeader {
        coordinator_epoch: 3,
        records: vec![TxnLogRecord {
            transactional_id: ID.into(),
            metadata: Some(m),
        }],
        now_ms: h.now,
    });
    assert_eq!(h.state(), TxnState::CompleteAbort);
    assert!(h.sends().is_empty());
}

#[test]
fn requests_before_loading_are_not_coordinated_here() {
    let mut c = TxnCoordinator::new(CoordinatorConfig::default());
    let out = c.handle(Event::EndTxn {
        req: 1,
        transactional_id: ID.into(),
        producer_id: 1,
        producer_epoch: 0,
        commit: true,
        now_ms: 0,
    });
    assert_eq!(
        out,
        vec![Action::Respond {
            req: 1,
            response: Response::Done(Err(ErrorCode::NotCoordinator))
        }]
    );
    assert_eq!(c.next_wakeup_ms(), None);
}
