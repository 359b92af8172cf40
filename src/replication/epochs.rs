//! The leader-epoch cache: for each leader epoch that wrote to a replica's log, the offset of
//! its first record. It answers Kafka's OffsetForLeaderEpoch (the end offset of an epoch) and
//! gives a follower its truncation point after a leader change. Plain data: the log layer
//! persists its entries (`log::leader_epoch`).

use super::ReplicationError;

/// `(leader epoch, start offset)`.
pub type EpochEntry = (u32, u64);

/// Sentinel for "no epoch at or below the one asked" (Kafka's UNDEFINED_EPOCH is -1 in i32).
pub const NO_EPOCH: u32 = u32::MAX;

/// Entries strictly increasing in epoch and non-decreasing in start offset (asserted).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LeaderEpochs {
    entries: Vec<EpochEntry>,
}

/// The answer to OffsetForLeaderEpoch: the largest epoch at or below the one asked and the
/// offset where it ends (the next epoch's start, or the log end for the latest).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EpochEnd {
    /// [`NO_EPOCH`] when this log has no epoch at or below the one asked.
    pub epoch: u32,
    pub end_offset: u64,
}

impl LeaderEpochs {
    /// Entries as persisted; refuses an order no correct writer produces.
    pub fn from_entries(entries: Vec<EpochEntry>) -> Result<LeaderEpochs, ReplicationError> {
        let ordered = entries
            .windows(2)
            .all(|w| w[0].0 < w[1].0 && w[0].1 <= w[1].1);
        if !ordered || entries.iter().any(|e| e.0 == NO_EPOCH) {
            return Err(ReplicationError::EpochsOutOfOrder(entries));
        }
        Ok(LeaderEpochs { entries })
    }

    pub fn entries(&self) -> &[EpochEntry] {
        &self.entries
    }

    /// The latest epoch and its start offset.
    pub fn latest(&self) -> Option<EpochEntry> {
        self.entries.last().copied()
    }

    /// Records that `epoch` writes from `start_offset` on (a leader taking over, or a follower
    /// appending the first batch of a newer epoch). Returns whether the cache changed (and
    /// must be persisted). An epoch older than the latest is refused: epochs never go back.
    pub fn assign(&mut self, epoch: u32, start_offset: u64) -> Result<bool, ReplicationError> {
        if let Some((last, last_start)) = self.latest() {
            if epoch == last {
                return Ok(false);
            }
            if epoch < last || start_offset < last_start {
                return Err(ReplicationError::EpochWentBack {
                    epoch,
                    start_offset,
                    latest: last,
                    latest_start: last_start,
                });
            }
        }
        if epoch == NO_EPOCH {
            return Err(ReplicationError::EpochsOutOfOrder(vec![(
                epoch,
                start_offset,
            )]));
        }
        self.entries.push((epoch, start_offset));
        Ok(true)
    }

    /// OffsetForLeaderEpoch on a log whose end is `log_end`.
    pub fn end_for(&self, epoch: u32, log_end: u64) -> EpochEnd {
        let at_or_below = self.entries.partition_point(|e| e.0 <= epoch);
        if at_or_below == 0 {
            // Nothing that old here: everything this log holds is newer, so the asker keeps
            // nothing past where this log's epochs begin.
            let end_offset = self.entries.first().map_or(log_end, |e| e.1);
            return EpochEnd {
                epoch: NO_EPOCH,
                end_offset,
            };
        }
        let (found, _) = self.entries[at_or_below - 1];
        let end_offset = self
            .entries
            .get(at_or_below)
            .map_or(log_end, |next| next.1)
            .min(log_end);
        EpochEnd {
            epoch: found,
            end_offset,
        }
    }

    /// Forgets epochs that start at or past `offset` (the log was truncated to end there).
    /// Returns whether the cache changed.
    pub fn truncate_to(&mut self, offset: u64) -> bool {
        let keep = self.entries.partition_point(|e| e.1 < offset);
        let changed = keep < self.entries.len();
        self.entries.truncate(keep);
        changed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cache(entries: &[EpochEntry]) -> LeaderEpochs {
        LeaderEpochs::from_entries(entries.to_vec()).expect("ordered")
    }

    #[test]
    fn end_of_an_epoch_is_the_next_ones_start_or_the_log_end() {
        let c = cache(&[(0, 0), (2, 10), (5, 30)]);
        let at = |e| c.end_for(e, 42);
        assert_eq!(
            at(0),
            EpochEnd {
                epoch: 0,
                end_offset: 10
            }
        );
        // Epoch 1 never wrote here: the largest below it answers.
        assert_eq!(
            at(1),
            EpochEnd {
                epoch: 0,
                end_offset: 10
            }
        );
        assert_eq!(
            at(2),
            EpochEnd {
                epoch: 2,
                end_offset: 30
            }
        );
        assert_eq!(
            at(4),
            EpochEnd {
                epoch: 2,
                end_offset: 30
            }
        );
        assert_eq!(
            at(5),
            EpochEnd {
                epoch: 5,
                end_offset: 42
            }
        );
        assert_eq!(
            at(9),
            EpochEnd {
                epoch: 5,
                end_offset: 42
            }
        );
        let newer = cache(&[(3, 7)]);
        assert_eq!(
            newer.end_for(1, 20),
            EpochEnd {
                epoch: NO_EPOCH,
                end_offset: 7
            }
        );
        assert_eq!(
            LeaderEpochs::default().end_for(4, 0),
            EpochEnd {
                epoch: NO_EPOCH,
                end_offset: 0
            }
        );
    }

    #[test]
    fn assign_keeps_epochs_increasing_and_truncate_drops_the_tail() {
        let mut c = LeaderEpochs::default();
        assert!(c.assign(1, 0).expect("first"));
        assert!(!c.assign(1, 5).expect("same epoch"));
        assert!(c.assign(3, 5).expect("newer"));
        assert!(matches!(
            c.assign(2, 9),
            Err(ReplicationError::EpochWentBack { epoch: 2, .. })
        ));
        assert!(c.assign(4, 4).is_err(), "a start offset cannot go back");
        assert_eq!(c.entries(), &[(1, 0), (3, 5)]);
        assert!(c.truncate_to(5));
        assert_eq!(c.entries(), &[(1, 0)]);
        assert!(!c.truncate_to(5));
        assert!(c.truncate_to(0));
        assert!(c.entries().is_empty());
    }

    /// Against a brute-force model: a log as the epoch of each record, the cache built by
    /// assigning each record's epoch in order (as a follower appending does), truncated at
    /// random points. `end_for(e)` must be the offset after the last record of an epoch <= e
    /// (or where the first record of a newer epoch sits), whatever the layout.
    #[test]
    fn end_for_matches_a_brute_force_model_over_random_logs() {
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        for _ in 0..500 {
            let mut log: Vec<u32> = Vec::new();
            let mut epoch = next(3) as u32;
            for _ in 0..next(60) {
                if next(5) == 0 {
                    epoch += 1 + next(3) as u32;
                }
                log.push(epoch);
            }
            let mut c = LeaderEpochs::default();
            for (offset, &e) in log.iter().enumerate() {
                c.assign(e, offset as u64).expect("in order");
            }
            if next(3) == 0 {
                let cut = next(log.len() as u64 + 1) as usize;
                log.truncate(cut);
                c.truncate_to(cut as u64);
            }
            let end = log.len() as u64;
            for asked in 0..epoch + 3 {
                let got = c.end_for(asked, end);
                let at_or_below = log.iter().rposition(|&e| e <= asked);
                let want = match at_or_below {
                    Some(i) => EpochEnd {
                        epoch: log[i],
                        end_offset: i as u64 + 1,
                    },
                    None => EpochEnd {
                        epoch: NO_EPOCH,
                        end_offset: if log.is_empty() { end } else { 0 },
                    },
                };
                assert_eq!(got, want, "log {log:?}, asked {asked}");
            }
        }
    }

    #[test]
    fn persisted_entries_out_of_order_are_refused() {
        assert!(LeaderEpochs::from_entries(vec![(2, 0), (1, 5)]).is_err());
        assert!(LeaderEpochs::from_entries(vec![(1, 5), (2, 4)]).is_err());
        assert!(LeaderEpochs::from_entries(vec![(1, 5), (1, 6)]).is_err());
        assert!(LeaderEpochs::from_entries(vec![(1, 5), (2, 5)]).is_ok());
    }
}
