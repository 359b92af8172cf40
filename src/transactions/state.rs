//! Kafka's `TransactionState` and one transactional id's metadata (Kafka's
//! `TransactionMetadata`), as the coordinator keeps it and as its log records carry it.

use std::collections::BTreeSet;

use super::TopicPartition;

/// Where a transactional id's current transaction is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TxnState {
    /// No transaction yet (after InitProducerId).
    Empty,
    /// Partitions were added: a transaction is open.
    Ongoing,
    /// EndTxn(commit) is durable: commit markers are being written.
    PrepareCommit,
    /// EndTxn(abort), a timeout or a fencing InitProducerId is durable: abort markers are
    /// being written.
    PrepareAbort,
    /// Every commit marker is written.
    CompleteCommit,
    /// Every abort marker is written.
    CompleteAbort,
    /// Expired: the id is being removed (its tombstone written).
    Dead,
    /// The epoch is being bumped to fence a producer before aborting its transaction. Only
    /// ever a transition's target in memory: the record written is PrepareAbort.
    PrepareEpochFence,
}

impl TxnState {
    /// The state's code in a log record (Kafka's ids).
    pub fn code(self) -> u8 {
        match self {
            TxnState::Empty => 0,
            TxnState::Ongoing => 1,
            TxnState::PrepareCommit => 2,
            TxnState::PrepareAbort => 3,
            TxnState::CompleteCommit => 4,
            TxnState::CompleteAbort => 5,
            TxnState::Dead => 6,
            TxnState::PrepareEpochFence => 7,
        }
    }

    pub fn from_code(code: u8) -> Option<TxnState> {
        Some(match code {
            0 => TxnState::Empty,
            1 => TxnState::Ongoing,
            2 => TxnState::PrepareCommit,
            3 => TxnState::PrepareAbort,
            4 => TxnState::CompleteCommit,
            5 => TxnState::CompleteAbort,
            6 => TxnState::Dead,
            7 => TxnState::PrepareEpochFence,
            _ => return None,
        })
    }

    /// Kafka's valid previous states: `from -> self` is a legal transition.
    pub fn may_follow(self, from: TxnState) -> bool {
        use TxnState::*;
        match self {
            Empty => matches!(from, Empty | CompleteCommit | CompleteAbort),
            Ongoing => matches!(from, Ongoing | Empty | CompleteCommit | CompleteAbort),
            PrepareCommit => from == Ongoing,
            PrepareAbort => matches!(from, Ongoing | PrepareEpochFence),
            CompleteCommit => from == PrepareCommit,
            CompleteAbort => from == PrepareAbort,
            Dead => matches!(from, Empty | CompleteCommit | CompleteAbort),
            PrepareEpochFence => from == Ongoing,
        }
    }

    /// A transaction whose outcome is decided and whose markers are being written.
    pub fn is_prepared(self) -> bool {
        matches!(self, TxnState::PrepareCommit | TxnState::PrepareAbort)
    }

    /// No transaction open: the id may start one, or expire.
    pub fn is_idle(self) -> bool {
        matches!(
            self,
            TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort
        )
    }
}

/// Kafka bumps an epoch up to `i16::MAX - 1`, then hands out a new producer id.
pub const MAX_EPOCH: i16 = i16::MAX - 1;

/// No epoch yet (Kafka's `RecordBatch.NO_PRODUCER_EPOCH`).
pub const NO_EPOCH: i16 = -1;

/// No producer id (Kafka's `RecordBatch.NO_PRODUCER_ID`).
pub const NO_PRODUCER_ID: i64 = -1;

/// A transactional id's metadata: what its log record holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnMetadata {
    pub producer_id: i64,
    pub producer_epoch: i16,
    /// The id and epoch before the last bump (KIP-360): a producer retrying an
    /// InitProducerId whose answer it lost is recognised by them.
    pub last_producer_id: i64,
    pub last_producer_epoch: i16,
    /// The client's `transaction.timeout.ms`.
    pub timeout_ms: u32,
    pub state: TxnState,
    /// The partitions of the open (or prepared) transaction.
    pub partitions: BTreeSet<TopicPartition>,
    /// When the current transaction started (its first AddPartitions), ms since the epoch.
    pub txn_start_ms: u64,
    /// The last change, ms since the epoch (idle ids expire from it).
    pub last_update_ms: u64,
}

impl TxnMetadata {
    /// A new id's metadata: its producer id, no epoch yet (the first InitProducerId bumps
    /// it to 0).
    pub fn new(producer_id: i64, timeout_ms: u32, now_ms: u64) -> TxnMetadata {
        TxnMetadata {
            producer_id,
            producer_epoch: NO_EPOCH,
            last_producer_id: NO_PRODUCER_ID,
            last_producer_epoch: NO_EPOCH,
            timeout_ms,
            state: TxnState::Empty,
            partitions: BTreeSet::new(),
            txn_start_ms: 0,
            last_update_ms: now_ms,
        }
    }

    /// The epoch cannot be bumped again: a new producer id is needed.
    pub fn epoch_exhausted(&self) -> bool {
        self.producer_epoch >= MAX_EPOCH
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: [TxnState; 8] = [
        TxnState::Empty,
        TxnState::Ongoing,
        TxnState::PrepareCommit,
        TxnState::PrepareAbort,
        TxnState::CompleteCommit,
        TxnState::CompleteAbort,
        TxnState::Dead,
        TxnState::PrepareEpochFence,
    ];

    #[test]
    fn codes_round_trip_and_unknown_codes_are_refused() {
        for s in ALL {
            assert_eq!(TxnState::from_code(s.code()), Some(s));
        }
        assert_eq!(TxnState::from_code(8), None);
        assert_eq!(TxnState::from_code(255), None);
    }

    #[test]
    fn transitions_are_kafkas() {
        use TxnState::*;
        let legal: Vec<(TxnState, TxnState)> = ALL
            .iter()
            .flat_map(|&from| ALL.iter().map(move |&to| (from, to)))
            .filter(|&(from, to)| to.may_follow(from))
            .collect();
        let expected = vec![
            (Empty, Empty),
            (Empty, Ongoing),
            (Empty, Dead),
            (Ongoing, Ongoing),
            (Ongoing, PrepareCommit),
            (Ongoing, PrepareAbort),
            (Ongoing, PrepareEpochFence),
            (PrepareCommit, CompleteCommit),
            (PrepareAbort, CompleteAbort),
            (CompleteCommit, Empty),
            (CompleteCommit, Ongoing),
            (CompleteCommit, Dead),
            (CompleteAbort, Empty),
            (CompleteAbort, Ongoing),
            (CompleteAbort, Dead),
            (PrepareEpochFence, PrepareAbort),
        ];
        assert_eq!(legal, expected);
    }
}
