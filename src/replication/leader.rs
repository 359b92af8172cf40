//! The leader side of one partition: followers' progress, the ISR, the high watermark and the
//! acks=all requests waiting for it.
//!
//! Safety rests on three rules (Kafka's ISR protocol):
//! - the high watermark is the minimum durable log end over the *maximal* ISR (the accepted
//!   ISR plus any member an unaccepted proposal adds), so every record below it is on every
//!   broker the controller could elect; it never goes back within an epoch;
//! - an ISR change takes effect only once the controller accepted it (a leader cut off from
//!   the controller cannot shrink its ISR and so cannot acknowledge alone);
//! - a follower joins only once its log reaches the high watermark and this epoch's start.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use super::ReplicationError;
use crate::protocol::ErrorCode;

/// Per-partition settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeaderConfig {
    /// `min.insync.replicas`: acks=all needs an ISR at least this large.
    pub min_insync_replicas: usize,
    /// `replica.lag.time.max.ms`.
    pub replica_lag_time_max_ms: u64,
    /// An ISR proposal neither answered nor visible in the metadata this long is sent again
    /// (the same proposal: the controller's partition-epoch check makes a repeat harmless).
    pub isr_proposal_retry_ms: u64,
}

/// The partition as the controller last applied it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartitionView {
    pub leader: u32,
    pub leader_epoch: u32,
    pub partition_epoch: u32,
    pub replicas: Vec<u32>,
    pub isr: Vec<u32>,
}

/// An ISR change for the controller (an AlterPartition naming the epochs it read).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IsrProposal {
    pub leader_epoch: u32,
    pub partition_epoch: u32,
    pub isr: Vec<u32>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LeaderAction {
    /// An acks=all request finished: `Ok` once every ISR member has its records.
    Acked {
        id: u64,
        result: Result<(), ErrorCode>,
    },
    /// Send this ISR change to the controller; act on it once the metadata shows it.
    ProposeIsr(IsrProposal),
}

/// What a follower says in each replica fetch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplicaFetch {
    /// The leader epoch the follower follows.
    pub leader_epoch: u32,
    /// Where it reads from: the end of what it has written.
    pub fetch_offset: u64,
    /// Its log end as durable as its `--fsync` promises (at most `fetch_offset`).
    pub log_end: u64,
}

#[derive(Clone, Copy, Debug)]
struct Progress {
    /// Durable log end last reported in this epoch; None until its first fetch.
    log_end: Option<u64>,
    last_caught_up_ms: u64,
    last_fetch_ms: u64,
    /// The leader's log end when the follower last fetched.
    leader_end_at_last_fetch: u64,
}

#[derive(Clone, Copy, Debug)]
struct Waiting {
    id: u64,
    end_offset: u64,
}

#[derive(Debug)]
pub struct Leader {
    me: u32,
    cfg: LeaderConfig,
    leader_epoch: u32,
    partition_epoch: u32,
    replicas: Vec<u32>,
    isr: BTreeSet<u32>,
    pending: Option<IsrProposal>,
    proposed_at_ms: u64,
    followers: BTreeMap<u32, Progress>,
    /// Log end written (what followers can fetch).
    log_end: u64,
    /// Log end as durable as `--fsync` promises (what counts for the high watermark).
    durable_end: u64,
    /// Where this epoch's records start: a joining follower must have reached it.
    epoch_start: u64,
    high_watermark: u64,
    /// In append order, so by end offset. Bounded by the produce path's in-flight limit.
    waiting: VecDeque<Waiting>,
    deposed: bool,
    actions: Vec<LeaderAction>,
}

impl Leader {
    /// Takes over at `view.leader_epoch` with the local log ending at `log_end` (all of it
    /// durable: a new leader serves only what survived) and the high watermark it knew.
    pub fn new(
        me: u32,
        cfg: LeaderConfig,
        view: &PartitionView,
        log_end: u64,
        high_watermark: u64,
        now_ms: u64,
    ) -> Result<Leader, ReplicationError> {
        if view.leader != me || !view.isr.contains(&me) {
            return Err(ReplicationError::NotLeader {
                leader_epoch: view.leader_epoch,
            });
        }
        let mut leader = Leader {
            me,
            cfg,
            leader_epoch: view.leader_epoch,
            partition_epoch: view.partition_epoch,
            replicas: view.replicas.clone(),
            isr: view.isr.iter().copied().collect(),
            pending: None,
            proposed_at_ms: now_ms,
            followers: BTreeMap::new(),
            log_end,
            durable_end: log_end,
            epoch_start: log_end,
            high_watermark: high_watermark.min(log_end),
            waiting: VecDeque::new(),
            deposed: false,
            actions: Vec::new(),
        };
        leader.track_replicas(now_ms);
        Ok(leader)
    }

    pub fn leader_epoch(&self) -> u32 {
        self.leader_epoch
    }

    pub fn high_watermark(&self) -> u64 {
        self.high_watermark
    }

    pub fn isr(&self) -> Vec<u32> {
        self.isr.iter().copied().collect()
    }

    /// True once the controller (or its refusal) showed that another leader took over.
    pub fn is_deposed(&self) -> bool {
        self.deposed
    }

    /// What the caller must do now.
    pub fn take_actions(&mut self) -> Vec<LeaderAction> {
        std::mem::take(&mut self.actions)
    }

    /// Before appending an acks=all batch: refused (nothing appended) when deposed or the ISR
    /// is smaller than `min.insync.replicas`.
    pub fn admit(&self) -> Result<(), ReplicationError> {
        self.check_leading()?;
        if self.isr.len() < self.cfg.min_insync_replicas {
            return Err(ReplicationError::NotEnoughReplicas {
                isr: self.isr.len(),
                min: self.cfg.min_insync_replicas,
            });
        }
        Ok(())
    }

    /// Before serving a consumer or an acks=1 append: only the leader of its epoch does.
    pub fn check_leading(&self) -> Result<(), ReplicationError> {
        if self.deposed {
            return Err(ReplicationError::NotLeader {
                leader_epoch: self.leader_epoch,
            });
        }
        Ok(())
    }

    /// The local log now ends (written) at `log_end`.
    pub fn appended(&mut self, log_end: u64) {
        assert!(
            log_end >= self.log_end,
            "a leader's log end never goes back"
        );
        self.log_end = log_end;
    }

    /// The local log is durable (as `--fsync` promises) up to `durable_end`.
    pub fn durable(&mut self, durable_end: u64) {
        assert!(
            durable_end <= self.log_end,
            "durable end {durable_end} past the log end {}",
            self.log_end
        );
        self.durable_end = self.durable_end.max(durable_end);
        self.advance();
    }

    /// An acks=all batch ending at `end_offset` (exclusive) was appended: answered by a
    /// [`LeaderAction::Acked`] once the high watermark passes it (maybe at once).
    pub fn wait(&mut self, id: u64, end_offset: u64) {
        if self.deposed {
            self.actions.push(LeaderAction::Acked {
                id,
                result: Err(ErrorCode::NotLeaderOrFollower),
            });
            return;
        }
        self.waiting.push_back(Waiting { id, end_offset });
        self.complete_waits();
    }

    /// A replica fetch from `follower`: validates it, records its progress, maybe proposes
    /// it back into the ISR, and returns the high watermark to send with the data.
    pub fn on_fetch(
        &mut self,
        follower: u32,
        fetch: ReplicaFetch,
        now_ms: u64,
    ) -> Result<u64, ReplicationError> {
        self.check_leading()?;
        if follower == self.me || !self.replicas.contains(&follower) {
            return Err(ReplicationError::NotAReplica {
                broker: follower,
                replicas: self.replicas.clone(),
            });
        }
        if fetch.leader_epoch < self.leader_epoch {
            return Err(ReplicationError::FencedEpoch {
                got: fetch.leader_epoch,
                current: self.leader_epoch,
            });
        }
        if fetch.leader_epoch > self.leader_epoch {
            return Err(ReplicationError::UnknownEpoch {
                got: fetch.leader_epoch,
                current: self.leader_epoch,
            });
        }
        if fetch.fetch_offset > self.log_end || fetch.log_end > fetch.fetch_offset {
            return Err(ReplicationError::PastLogEnd {
                offset: fetch.fetch_offset.max(fetch.log_end),
                log_end: self.log_end,
            });
        }
        let leader_end = self.log_end;
        let p = self.followers.entry(follower).or_insert(Progress {
            log_end: None,
            last_caught_up_ms: now_ms,
            last_fetch_ms: now_ms,
            leader_end_at_last_fetch: leader_end,
        });
        // Kafka's rule: caught up now if it reached the leader's end; caught up as of its
        // previous fetch if it reached the end the leader had then (steady load never makes
        // a keeping-up follower look behind).
        if fetch.log_end >= leader_end {
            p.last_caught_up_ms = now_ms;
        } else if fetch.log_end >= p.leader_end_at_last_fetch {
            p.last_caught_up_ms = p.last_caught_up_ms.max(p.last_fetch_ms);
        }
        p.log_end = Some(fetch.log_end);
        p.last_fetch_ms = now_ms;
        p.leader_end_at_last_fetch = leader_end;
        let joins = !self.isr.contains(&follower)
            && self.pending.is_none()
            && fetch.log_end >= self.high_watermark
            && fetch.log_end >= self.epoch_start;
        if joins {
            let mut isr = self.isr.clone();
            isr.insert(follower);
            self.propose(isr, now_ms);
        }
        self.advance();
        Ok(self.high_watermark)
    }

    /// Time passes: ISR members that lagged past `replica.lag.time.max.ms` are proposed out;
    /// an unanswered proposal is sent again.
    pub fn tick(&mut self, now_ms: u64) {
        if self.deposed {
            return;
        }
        if let Some(p) = &self.pending {
            if now_ms.saturating_sub(self.proposed_at_ms) >= self.cfg.isr_proposal_retry_ms {
                self.actions.push(LeaderAction::ProposeIsr(p.clone()));
                self.proposed_at_ms = now_ms;
            }
            return;
        }
        let lag = self.cfg.replica_lag_time_max_ms;
        let laggards: Vec<u32> = self
            .isr
            .iter()
            .copied()
            .filter(|b| *b != self.me)
            .filter(|b| {
                self.followers
                    .get(b)
                    .is_none_or(|p| now_ms.saturating_sub(p.last_caught_up_ms) > lag)
            })
            .collect();
        if !laggards.is_empty() {
            let isr = self.isr.iter().copied().filter(|b| !laggards.contains(b));
            self.propose(isr.collect(), now_ms);
        }
    }

    /// The controller applied a change of this partition (or a proposal was refused and the
    /// caller re-read it). Another leader or epoch deposes this one; a newer partition epoch
    /// replaces the ISR.
    pub fn on_partition(&mut self, view: &PartitionView, now_ms: u64) {
        if view.leader != self.me || view.leader_epoch != self.leader_epoch {
            self.depose();
            return;
        }
        if view.partition_epoch <= self.partition_epoch {
            return;
        }
        self.partition_epoch = view.partition_epoch;
        self.replicas = view.replicas.clone();
        self.isr = view.isr.iter().copied().collect();
        // The controller's state supersedes whatever was in flight.
        self.pending = None;
        self.track_replicas(now_ms);
        self.advance();
    }

    /// The controller refused a proposal. A stale leader epoch or leadership means another
    /// leader exists: stop acknowledging now rather than when the metadata arrives. A stale
    /// partition epoch means the controller changed the partition (maybe by accepting this
    /// very proposal, sent twice): keep counting the proposed members until the metadata
    /// shows which. Any other refusal was of this partition epoch, so nothing was applied.
    pub fn on_proposal_refused(&mut self, code: ErrorCode) {
        match code {
            ErrorCode::FencedLeaderEpoch | ErrorCode::NotLeaderOrFollower => self.depose(),
            ErrorCode::InvalidUpdateVersion => {}
            _ => self.pending = None,
        }
    }

    fn depose(&mut self) {
        self.deposed = true;
        self.pending = None;
        for w in self.waiting.drain(..) {
            self.actions.push(LeaderAction::Acked {
                id: w.id,
                result: Err(ErrorCode::NotLeaderOrFollower),
            });
        }
    }

    fn propose(&mut self, isr: BTreeSet<u32>, now_ms: u64) {
        let proposal = IsrProposal {
            leader_epoch: self.leader_epoch,
            partition_epoch: self.partition_epoch,
            isr: isr.into_iter().collect(),
        };
        self.pending = Some(proposal.clone());
        self.proposed_at_ms = now_ms;
        self.actions.push(LeaderAction::ProposeIsr(proposal));
    }

    fn track_replicas(&mut self, now_ms: u64) {
        let replicas = &self.replicas;
        self.followers.retain(|b, _| replicas.contains(b));
        for &b in &self.replicas {
            if b != self.me {
                // A member starts its grace period now; it counts for nothing until it fetches.
                self.followers.entry(b).or_insert(Progress {
                    log_end: None,
                    last_caught_up_ms: now_ms,
                    last_fetch_ms: now_ms,
                    leader_end_at_last_fetch: self.log_end,
                });
            }
        }
    }

    /// Moves the high watermark to the maximal ISR's minimum durable log end, never back.
    fn advance(&mut self) {
        if self.deposed {
            return;
        }
        let mut members = self.isr.clone();
        if let Some(p) = &self.pending {
            members.extend(p.isr.iter().copied());
        }
        let mut min = self.durable_end;
        for b in members.iter().filter(|b| **b != self.me) {
            match self.followers.get(b).and_then(|p| p.log_end) {
                Some(end) => min = min.min(end),
                // A member not heard from in this epoch holds the high watermark where it is.
                None => return,
            }
        }
        if min > self.high_watermark {
            self.high_watermark = min;
        }
        assert!(
            self.high_watermark <= self.log_end,
            "high watermark {} past the log end {}",
            self.high_watermark,
            self.log_end
        );
        self.complete_waits();
    }

    fn complete_waits(&mut self) {
        while let Some(w) = self.waiting.front().copied() {
            if w.end_offset > self.high_watermark {
                break;
            }
            self.waiting.pop_front();
            // The records are on the whole ISR, but the ISR shrank below the minimum while
            // they waited: the producer learns they are less safe than it asked.
            let result = if self.isr.len() >= self.cfg.min_insync_replicas {
                Ok(())
            } else {
                Err(ErrorCode::NotEnoughReplicasAfterAppend)
            };
            self.actions.push(LeaderAction::Acked { id: w.id, result });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LAG: u64 = 30_000;

    fn view(epoch: u32, pepoch: u32, isr: &[u32]) -> PartitionView {
        PartitionView {
            leader: 1,
            leader_epoch: epoch,
            partition_epoch: pepoch,
            replicas: vec![1, 2, 3],
            isr: isr.to_vec(),
        }
    }

    fn leader(min_isr: usize, log_end: u64) -> Leader {
        let cfg = LeaderConfig {
            min_insync_replicas: min_isr,
            replica_lag_time_max_ms: LAG,
            isr_proposal_retry_ms: LAG * 10,
        };
        Leader::new(1, cfg, &view(4, 7, &[1, 2, 3]), log_end, 0, 0).expect("leads")
    }

    fn fetch(epoch: u32, end: u64) -> ReplicaFetch {
        ReplicaFetch {
            leader_epoch: epoch,
            fetch_offset: end,
            log_end: end,
        }
    }

    fn append(l: &mut Leader, id: u64, end: u64) {
        l.admit().expect("admitted");
        l.appended(end);
        l.durable(end);
        l.wait(id, end);
    }

    #[test]
    fn acks_all_waits_for_every_isr_member_and_the_high_watermark_is_their_minimum() {
        let mut l = leader(2, 0);
        append(&mut l, 1, 10);
        assert!(l.take_actions().is_empty());
        assert_eq!(l.on_fetch(2, fetch(4, 10), 10), Ok(0), "3 not heard from");
        assert_eq!(l.on_fetch(3, fetch(4, 4), 10), Ok(4));
        assert!(l.take_actions().is_empty());
        append(&mut l, 2, 12);
        assert_eq!(l.on_fetch(3, fetch(4, 10), 20), Ok(10));
        assert_eq!(
            l.take_actions(),
            vec![LeaderAction::Acked {
                id: 1,
                result: Ok(())
            }]
        );
        // A follower reporting less (it cannot, but a bug could) does not move it back.
        assert_eq!(l.on_fetch(2, fetch(4, 12), 30), Ok(10));
        assert_eq!(l.high_watermark(), 10);
    }

    #[test]
    fn lagging_follower_is_proposed_out_and_acks_continue_once_accepted() {
        let mut l = leader(2, 0);
        append(&mut l, 1, 5);
        l.on_fetch(2, fetch(4, 5), 100).expect("fetch");
        l.tick(LAG);
        assert!(l.take_actions().is_empty(), "3 is within its grace period");
        l.tick(LAG + 1);
        let shrink = IsrProposal {
            leader_epoch: 4,
            partition_epoch: 7,
            isr: vec![1, 2],
        };
        assert_eq!(l.take_actions(), vec![LeaderAction::ProposeIsr(shrink)]);
        assert_eq!(
            l.high_watermark(),
            0,
            "nothing acts on a proposal before it is accepted"
        );
        l.on_partition(&view(4, 8, &[1, 2]), LAG + 2);
        assert_eq!(l.high_watermark(), 5);
        assert_eq!(
            l.take_actions(),
            vec![LeaderAction::Acked {
                id: 1,
                result: Ok(())
            }]
        );
        // 3 catches up to the high watermark: proposed back; the high watermark waits for it.
        append(&mut l, 2, 9);
        l.on_fetch(3, fetch(4, 5), LAG + 3).expect("fetch");
        let expand = IsrProposal {
            leader_epoch: 4,
            partition_epoch: 8,
            isr: vec![1, 2, 3],
        };
        assert_eq!(l.take_actions(), vec![LeaderAction::ProposeIsr(expand)]);
        l.on_fetch(2, fetch(4, 9), LAG + 4).expect("fetch");
        assert_eq!(l.high_watermark(), 5, "the pending member holds it");
        l.on_fetch(3, fetch(4, 9), LAG + 5).expect("fetch");
        assert_eq!(l.high_watermark(), 9);
    }

    #[test]
    fn isr_below_min_refuses_before_append_and_after_append() {
        let mut l = leader(2, 0);
        append(&mut l, 1, 3);
        l.on_fetch(2, fetch(4, 0), 1).expect("fetch");
        // The controller shrinks the ISR to the leader alone (it fenced 2 and 3).
        l.on_partition(&view(4, 9, &[1]), 2);
        assert_eq!(
            l.take_actions(),
            vec![LeaderAction::Acked {
                id: 1,
                result: Err(ErrorCode::NotEnoughReplicasAfterAppend)
            }]
        );
        assert_eq!(
            l.admit().map_err(|e| e.code()),
            Err(ErrorCode::NotEnoughReplicas)
        );
    }

    #[test]
    fn a_deposed_leader_fails_its_waits_and_serves_nothing() {
        let mut l = leader(1, 0);
        append(&mut l, 1, 3);
        l.on_partition(
            &PartitionView {
                leader: 2,
                ..view(5, 8, &[2, 3])
            },
            5,
        );
        assert_eq!(
            l.take_actions(),
            vec![LeaderAction::Acked {
                id: 1,
                result: Err(ErrorCode::NotLeaderOrFollower)
            }]
        );
        assert!(l.is_deposed());
        assert_eq!(
            l.on_fetch(2, fetch(4, 3), 6).map_err(|e| e.code()),
            Err(ErrorCode::NotLeaderOrFollower)
        );
        assert!(l.admit().is_err());
        let mut l = leader(1, 0);
        l.on_proposal_refused(ErrorCode::FencedLeaderEpoch);
        assert!(l.is_deposed(), "the controller's refusal deposes too");
    }

    #[test]
    fn bad_fetches_are_refused_and_change_nothing() {
        let mut l = leader(2, 0);
        append(&mut l, 1, 5);
        let code = |r: Result<u64, ReplicationError>| r.map_err(|e| e.code());
        assert_eq!(
            code(l.on_fetch(9, fetch(4, 5), 1)),
            Err(ErrorCode::NotLeaderOrFollower)
        );
        assert_eq!(
            code(l.on_fetch(2, fetch(3, 5), 1)),
            Err(ErrorCode::FencedLeaderEpoch)
        );
        assert_eq!(
            code(l.on_fetch(2, fetch(5, 5), 1)),
            Err(ErrorCode::UnknownLeaderEpoch)
        );
        assert_eq!(
            code(l.on_fetch(2, fetch(4, 6), 1)),
            Err(ErrorCode::OffsetOutOfRange)
        );
        l.on_fetch(3, fetch(4, 5), 1).expect("fetch");
        assert_eq!(
            l.high_watermark(),
            0,
            "2's refused fetches counted for nothing"
        );
        assert!(l.take_actions().is_empty());
    }
}
