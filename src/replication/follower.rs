//! The follower side of one partition: reconcile with a new leader by leader epoch (Kafka's
//! OffsetForLeaderEpoch, KIP-101/279), truncate the divergent tail, then fetch, reporting the
//! durable log end and learning the high watermark.
//!
//! Records with the same epoch at the same offset are the same records (one leader per epoch
//! writes them), so the follower keeps exactly the prefix up to where its last common epoch
//! ends on both sides.

use super::epochs::{EpochEnd, LeaderEpochs, NO_EPOCH};
use super::leader::ReplicaFetch;
use super::ReplicationError;
use crate::protocol::ErrorCode;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FollowerAction {
    /// Ask the leader where `epoch` ends in its log (OffsetForLeaderEpoch).
    AskEpochEnd { leader: u32, epoch: u32 },
    /// Cut the local log (and its leader-epoch cache) to end at `offset`.
    Truncate { offset: u64 },
    /// Drop the whole local log and start it again, empty, at `offset`: where the leader's
    /// log starts (the base of the batch holding its log start, which DeleteRecords may put
    /// inside a batch), past this follower's log end (retention or DeleteRecords removed
    /// what it needed; Kafka's truncateFullyAndStartAt).
    StartAt { offset: u64 },
    /// Fetch from the leader.
    Fetch { leader: u32, fetch: ReplicaFetch },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Waiting for the answer about this epoch.
    Reconciling(u32),
    Fetching,
    /// The leader says this follower's epoch is stale: wait for the metadata.
    Waiting,
}

#[derive(Debug)]
pub struct Follower {
    leader: u32,
    leader_epoch: u32,
    phase: Phase,
    /// End of what is written locally (where the next fetch reads from).
    log_end: u64,
    /// End of what is durable as `--fsync` promises (what the leader counts).
    durable_end: u64,
    high_watermark: u64,
}

impl Follower {
    /// Starts following `leader` at `leader_epoch` with a local log ending (durably) at
    /// `log_end`, its epochs and the high watermark it knew. Returns its first action.
    pub fn new(
        leader: u32,
        leader_epoch: u32,
        epochs: &LeaderEpochs,
        log_end: u64,
        high_watermark: u64,
    ) -> (Follower, FollowerAction) {
        let mut f = Follower {
            leader,
            leader_epoch,
            phase: Phase::Fetching,
            log_end,
            durable_end: log_end,
            high_watermark: high_watermark.min(log_end),
        };
        let first = match epochs.latest() {
            Some((epoch, _)) => {
                f.phase = Phase::Reconciling(epoch);
                FollowerAction::AskEpochEnd { leader, epoch }
            }
            // Records without epochs (or none at all): only the high watermark is known safe.
            None if log_end > f.high_watermark => {
                f.log_end = f.high_watermark;
                f.durable_end = f.high_watermark;
                FollowerAction::Truncate {
                    offset: f.high_watermark,
                }
            }
            None => f.fetch_action(),
        };
        (f, first)
    }

    pub fn leader(&self) -> u32 {
        self.leader
    }

    pub fn leader_epoch(&self) -> u32 {
        self.leader_epoch
    }

    pub fn high_watermark(&self) -> u64 {
        self.high_watermark
    }

    pub fn log_end(&self) -> u64 {
        self.log_end
    }

    pub fn is_fetching(&self) -> bool {
        self.phase == Phase::Fetching
    }

    /// The next fetch (the caller sends one whenever none is in flight and it is fetching).
    pub fn fetch_action(&self) -> FollowerAction {
        FollowerAction::Fetch {
            leader: self.leader,
            fetch: ReplicaFetch {
                leader_epoch: self.leader_epoch,
                fetch_offset: self.log_end,
                log_end: self.durable_end,
            },
        }
    }

    /// The leader's answer to [`FollowerAction::AskEpochEnd`]. Returns what to do: truncate
    /// then fetch, or ask again about an older epoch this follower has and the leader's
    /// answer skipped.
    pub fn on_epoch_end(
        &mut self,
        asked: u32,
        answer: EpochEnd,
        epochs: &LeaderEpochs,
    ) -> Result<Vec<FollowerAction>, ReplicationError> {
        if self.phase != Phase::Reconciling(asked) {
            return Ok(Vec::new()); // a late answer to an earlier question
        }
        let cut = if answer.epoch == NO_EPOCH {
            answer.end_offset
        } else {
            let mine = epochs.end_for(answer.epoch, self.log_end);
            if mine.epoch != answer.epoch && mine.epoch != NO_EPOCH {
                // The leader's epoch is one this follower never wrote: where does the
                // newest epoch this follower has below it end on the leader?
                self.phase = Phase::Reconciling(mine.epoch);
                return Ok(vec![FollowerAction::AskEpochEnd {
                    leader: self.leader,
                    epoch: mine.epoch,
                }]);
            }
            answer.end_offset.min(mine.end_offset)
        };
        let cut = cut.min(self.log_end);
        if cut < self.high_watermark {
            return Err(ReplicationError::TruncationBelowHighWatermark {
                offset: cut,
                high_watermark: self.high_watermark,
            });
        }
        self.phase = Phase::Fetching;
        let mut actions = Vec::new();
        if cut < self.log_end {
            self.log_end = cut;
            self.durable_end = self.durable_end.min(cut);
            actions.push(FollowerAction::Truncate { offset: cut });
        }
        actions.push(self.fetch_action());
        Ok(actions)
    }

    /// Fetched records were written locally up to `log_end`.
    pub fn appended(&mut self, log_end: u64) {
        assert!(
            log_end >= self.log_end,
            "a follower's log end never goes back"
        );
        self.log_end = log_end;
    }

    /// The local log is durable up to `durable_end`.
    pub fn durable(&mut self, durable_end: u64) {
        assert!(durable_end <= self.log_end, "durable past the log end");
        self.durable_end = self.durable_end.max(durable_end);
    }

    /// A fetch answer carried the leader's high watermark: below it (and below the local log
    /// end) records are committed. Never goes back.
    pub fn on_high_watermark(&mut self, leader_high_watermark: u64) {
        let hw = leader_high_watermark.min(self.log_end);
        self.high_watermark = self.high_watermark.max(hw);
    }

    /// The leader refused a fetch, saying where its log starts (0 if unknown). Returns what
    /// to do now (nothing: wait for metadata or retry the fetch later).
    pub fn on_fetch_error(
        &mut self,
        code: ErrorCode,
        leader_log_start: u64,
        epochs: &LeaderEpochs,
    ) -> Vec<FollowerAction> {
        match code {
            // What this follower needs next is gone from the leader: no prefix it holds can
            // be completed, so it starts over where the leader's log starts. Nothing below
            // that is lost: the leader only deletes below its high watermark, which every
            // ISR member already holds.
            ErrorCode::OffsetOutOfRange if leader_log_start > self.log_end => {
                assert!(
                    self.high_watermark <= self.log_end,
                    "a follower's high watermark is within its log"
                );
                self.phase = Phase::Fetching;
                self.log_end = leader_log_start;
                self.durable_end = leader_log_start;
                // As the shell raises the partition's: no later cut may go below it.
                self.high_watermark = leader_log_start;
                vec![
                    FollowerAction::StartAt {
                        offset: leader_log_start,
                    },
                    self.fetch_action(),
                ]
            }
            // The leader's log is shorter than this follower thought: reconcile again.
            ErrorCode::OffsetOutOfRange => match epochs.latest() {
                Some((epoch, _)) => {
                    self.phase = Phase::Reconciling(epoch);
                    vec![FollowerAction::AskEpochEnd {
                        leader: self.leader,
                        epoch,
                    }]
                }
                None => Vec::new(),
            },
            // This follower's epoch is old: newer metadata is on its way and decides.
            ErrorCode::FencedLeaderEpoch => {
                self.phase = Phase::Waiting;
                Vec::new()
            }
            // The leader has not applied its own leadership yet, or a transient error: the
            // caller asks again after its backoff.
            _ => Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn epochs(entries: &[(u32, u64)]) -> LeaderEpochs {
        LeaderEpochs::from_entries(entries.to_vec()).expect("ordered")
    }

    #[test]
    fn divergent_tail_is_cut_where_the_common_epoch_ends() {
        // Follower wrote epoch 3 at 10..20 as a leader that lost; the new leader (epoch 4)
        // has epoch 2 to 14, then its own.
        let mine = epochs(&[(1, 0), (2, 5), (3, 10)]);
        let (mut f, first) = Follower::new(7, 4, &mine, 20, 8);
        assert_eq!(
            first,
            FollowerAction::AskEpochEnd {
                leader: 7,
                epoch: 3
            }
        );
        let leader_says = EpochEnd {
            epoch: 2,
            end_offset: 14,
        };
        let actions = f.on_epoch_end(3, leader_says, &mine).expect("reconciled");
        // Epoch 2 ends at 10 here, at 14 there: the follower keeps 0..10.
        assert_eq!(actions[0], FollowerAction::Truncate { offset: 10 });
        assert_eq!(
            actions[1],
            FollowerAction::Fetch {
                leader: 7,
                fetch: ReplicaFetch {
                    leader_epoch: 4,
                    fetch_offset: 10,
                    log_end: 10
                }
            }
        );
    }

    #[test]
    fn an_epoch_the_follower_never_wrote_leads_to_a_second_question() {
        let mine = epochs(&[(1, 0), (3, 10)]);
        let (mut f, _) = Follower::new(7, 5, &mine, 20, 0);
        let leader_says = EpochEnd {
            epoch: 2,
            end_offset: 12,
        };
        let again = f.on_epoch_end(3, leader_says, &mine).expect("asks again");
        assert_eq!(
            again,
            vec![FollowerAction::AskEpochEnd {
                leader: 7,
                epoch: 1
            }]
        );
        assert!(f
            .on_epoch_end(3, leader_says, &mine)
            .expect("late")
            .is_empty());
        let actions = f
            .on_epoch_end(
                1,
                EpochEnd {
                    epoch: 1,
                    end_offset: 6,
                },
                &mine,
            )
            .expect("reconciled");
        assert_eq!(actions[0], FollowerAction::Truncate { offset: 6 });
        assert_eq!(f.log_end(), 6);
    }

    #[test]
    fn nothing_to_cut_fetches_at_once_and_the_high_watermark_never_goes_back() {
        let mine = epochs(&[(1, 0)]);
        let (mut f, _) = Follower::new(2, 1, &mine, 5, 3);
        let actions = f
            .on_epoch_end(
                1,
                EpochEnd {
                    epoch: 1,
                    end_offset: 9,
                },
                &mine,
            )
            .expect("ok");
        assert_eq!(actions.len(), 1, "{actions:?}");
        f.appended(9);
        f.durable(9);
        f.on_high_watermark(12);
        assert_eq!(f.high_watermark(), 9, "not past the local log end");
        f.on_high_watermark(4);
        assert_eq!(f.high_watermark(), 9);
    }

    #[test]
    fn a_cut_below_the_high_watermark_is_an_error_not_a_loss() {
        let mine = epochs(&[(1, 0)]);
        let (mut f, _) = Follower::new(2, 3, &mine, 10, 8);
        let r = f.on_epoch_end(
            1,
            EpochEnd {
                epoch: 1,
                end_offset: 5,
            },
            &mine,
        );
        assert_eq!(
            r,
            Err(ReplicationError::TruncationBelowHighWatermark {
                offset: 5,
                high_watermark: 8
            })
        );
        assert_eq!(f.log_end(), 10);
    }

    #[test]
    fn a_follower_behind_the_leaders_log_start_restarts_empty_there() {
        // A new replica (empty) of a partition whose leader deleted records below 1000.
        let (mut f, first) = Follower::new(2, 3, &LeaderEpochs::default(), 0, 0);
        assert!(matches!(first, FollowerAction::Fetch { .. }));
        let actions = f.on_fetch_error(ErrorCode::OffsetOutOfRange, 1000, &LeaderEpochs::default());
        assert_eq!(actions[0], FollowerAction::StartAt { offset: 1000 });
        assert_eq!(
            actions[1],
            FollowerAction::Fetch {
                leader: 2,
                fetch: ReplicaFetch {
                    leader_epoch: 3,
                    fetch_offset: 1000,
                    log_end: 1000
                }
            }
        );
        assert_eq!((f.log_end(), f.high_watermark()), (1000, 1000));
        // Out of range above the leader's start (its log is shorter): reconcile by epoch.
        let mine = epochs(&[(1, 0)]);
        let (mut g, _) = Follower::new(2, 3, &mine, 50, 10);
        let actions = g.on_fetch_error(ErrorCode::OffsetOutOfRange, 5, &mine);
        assert_eq!(
            actions,
            vec![FollowerAction::AskEpochEnd {
                leader: 2,
                epoch: 1
            }]
        );
    }

    #[test]
    fn a_log_without_epochs_keeps_only_its_high_watermark() {
        let (f, first) = Follower::new(2, 3, &LeaderEpochs::default(), 10, 4);
        assert_eq!(first, FollowerAction::Truncate { offset: 4 });
        assert_eq!(f.log_end(), 4);
    }

    #[test]
    fn a_follower_behind_the_leaders_log_start_starts_over_there() {
        let mine = epochs(&[(1, 0)]);
        let (mut f, _) = Follower::new(2, 3, &mine, 40, 30);
        f.on_epoch_end(
            1,
            EpochEnd {
                epoch: 1,
                end_offset: 500,
            },
            &mine,
        )
        .expect("nothing to cut");
        // Retention on the leader deleted 0..100: its log starts past this follower's end.
        let actions = f.on_fetch_error(ErrorCode::OffsetOutOfRange, 100, &mine);
        assert_eq!(
            actions,
            vec![
                FollowerAction::StartAt { offset: 100 },
                FollowerAction::Fetch {
                    leader: 2,
                    fetch: ReplicaFetch {
                        leader_epoch: 3,
                        fetch_offset: 100,
                        log_end: 100
                    }
                }
            ]
        );
        assert_eq!((f.log_end(), f.high_watermark()), (100, 100));
        assert!(f.is_fetching());
        // A log start within its log: the leader's log is shorter, reconcile as before.
        let (mut g, _) = Follower::new(2, 3, &mine, 40, 30);
        assert_eq!(
            g.on_fetch_error(ErrorCode::OffsetOutOfRange, 10, &mine),
            vec![FollowerAction::AskEpochEnd {
                leader: 2,
                epoch: 1
            }]
        );
        assert_eq!(g.log_end(), 40);
    }
}
