//! Which fetched batches a consumer hands out (Kafka's consumer `CompletedFetch`): never a
//! control batch (a transaction marker); under read_committed, not a transactional batch of
//! an aborted transaction. The broker names the aborted transactions overlapping the fetched
//! range (producer id, first offset); walking the batches in offset order, a producer is
//! "aborted" from its transaction's first offset until its abort marker.

use std::collections::HashSet;

use crate::batch::control::{ControlKind, ControlRecord};
use crate::batch::{BatchView, FLAG_CONTROL, FLAG_TRANSACTIONAL};
use crate::protocol::messages::AbortedTransaction;

pub(crate) struct TxnSkipper {
    committed: bool,
    /// Not yet reached, by first offset, the last first.
    pending: Vec<AbortedTransaction>,
    /// Producers inside an aborted transaction at the current batch.
    aborted: HashSet<i64>,
}

impl TxnSkipper {
    /// `committed`: read_committed; `aborted`: the fetch response's list for the partition.
    pub(crate) fn new(committed: bool, mut aborted: Vec<AbortedTransaction>) -> TxnSkipper {
        aborted.sort_by_key(|a| std::cmp::Reverse(a.first_offset));
        TxnSkipper {
            committed,
            pending: aborted,
            aborted: HashSet::new(),
        }
    }

    /// Whether batch `b` (the next one, in offset order) is withheld from the application.
    pub(crate) fn skips(&mut self, b: &BatchView<'_>) -> bool {
        let h = b.header();
        let control = h.flags & FLAG_CONTROL != 0;
        if self.committed && h.producer_id >= 0 {
            while self
                .pending
                .last()
                .is_some_and(|a| a.first_offset <= h.last_offset())
            {
                if let Some(a) = self.pending.pop() {
                    self.aborted.insert(a.producer_id);
                }
            }
            let abort_marker =
                control && ControlRecord::of_batch(b).is_ok_and(|m| m.kind == ControlKind::Abort);
            if abort_marker {
                self.aborted.remove(&h.producer_id);
            } else if h.flags & FLAG_TRANSACTIONAL != 0 && self.aborted.contains(&h.producer_id) {
                return true;
            }
        }
        control
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::{add_flags, aligned16, BatchBuilder, BatchIter};

    fn data(pid: i64, base: u64, transactional: bool) -> Vec<u8> {
        let mut b = BatchBuilder::new().producer(pid, 0, base as i32);
        b.push_record(1, None, Some(b"v"), [], &[]);
        let mut out = b.build().unwrap();
        if transactional {
            add_flags(&mut out, FLAG_TRANSACTIONAL);
        }
        let mut v = out.to_vec();
        crate::batch::stamp_batch(&mut v, base, 1);
        v
    }

    fn marker(pid: i64, base: u64, kind: ControlKind) -> Vec<u8> {
        let m = ControlRecord {
            kind,
            coordinator_epoch: 0,
        };
        let mut v = m.batch(pid, 0, 1).unwrap().to_vec();
        crate::batch::stamp_batch(&mut v, base, 1);
        v
    }

    #[test]
    fn markers_are_never_handed_out_and_aborted_batches_only_under_read_committed() {
        // 0: p1 txn (aborted at 3), 1: p2 txn (committed at 4), 2: plain p3, 3: abort p1,
        // 4: commit p2, 5: p1 txn again (a later transaction, not aborted).
        let mut log = Vec::new();
        log.extend(data(1, 0, true));
        log.extend(data(2, 1, true));
        log.extend(data(3, 2, false));
        log.extend(marker(1, 3, ControlKind::Abort));
        log.extend(marker(2, 4, ControlKind::Commit));
        log.extend(data(1, 5, true));
        let log = aligned16(&log);
        let aborted = vec![AbortedTransaction {
            producer_id: 1,
            first_offset: 0,
        }];
        let kept = |committed: bool| {
            let mut s = TxnSkipper::new(committed, aborted.clone());
            BatchIter::new(&log)
                .map(|b| b.unwrap())
                .filter(|b| !s.skips(b))
                .map(|b| b.header().base_offset)
                .collect::<Vec<_>>()
        };
        assert_eq!(kept(false), vec![0, 1, 2, 5]);
        assert_eq!(kept(true), vec![1, 2, 5]);
    }
}
