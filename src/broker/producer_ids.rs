//! InitProducerId for both listeners: a fresh producer id from this shard's block (blocks
//! are reserved from the controller, [`Command::AllocateProducerIds`], so ids are unique
//! across brokers and restarts), or a KIP-360 epoch bump that keeps the id. With a
//! transactional id the transaction coordinator answers ([`super::transactions`]).

use std::cell::Cell;
use std::rc::Rc;
use std::time::Instant;

use super::{recv_until, OpError, Shard};
use crate::controller::metadata::{Applied, Command};
use crate::protocol::ErrorCode;

/// Producer ids a shard reserves at a time (Kafka's block is 1000 too).
pub const PRODUCER_ID_BLOCK: u32 = 1000;

pub use crate::transactions::state::MAX_EPOCH;

/// A shard's reserved producer ids not handed out yet: `next..end`.
#[derive(Default)]
pub struct ProducerIdBlock {
    next: Cell<u64>,
    end: Cell<u64>,
}

impl ProducerIdBlock {
    fn take(&self) -> Option<i64> {
        let n = self.next.get();
        if n >= self.end.get() {
            return None;
        }
        self.next.set(n + 1);
        i64::try_from(n).ok()
    }

    fn refill(&self, first: u64, count: u32) {
        self.next.set(first);
        self.end.set(first + u64::from(count));
    }
}

/// What InitProducerId asks: `producer_id`/`epoch` are -1 for a new producer, or the
/// producer's current ones for a bump.
#[derive(Debug, Clone, Default)]
pub struct InitProducer {
    pub transactional_id: Option<String>,
    pub producer_id: i64,
    pub epoch: i16,
    /// The producer's `transaction.timeout.ms` (with a transactional id).
    pub transaction_timeout_ms: i32,
}

/// Answers InitProducerId: (producer id, epoch).
pub async fn init_producer_id(
    shard: &Rc<Shard>,
    req: &InitProducer,
    deadline: Instant,
) -> Result<(i64, i16), OpError> {
    if let Some(id) = req.transactional_id.as_deref().filter(|t| !t.is_empty()) {
        return super::transactions::init_producer_id(
            shard,
            id,
            req.transaction_timeout_ms,
            req.producer_id,
            req.epoch,
        )
        .await;
    }
    match bumped(req.producer_id, req.epoch) {
        Some(kept) => Ok(kept),
        None => Ok((fresh_producer_id(shard, deadline).await?, 0)),
    }
}

/// A producer that hit an error asks to bump its epoch and keep its id (KIP-360); an
/// exhausted epoch, or none, needs a new id.
fn bumped(id: i64, epoch: i16) -> Option<(i64, i16)> {
    (id >= 0 && (0..MAX_EPOCH).contains(&epoch)).then(|| (id, epoch + 1))
}

/// A producer id never handed out before, from this shard's block (refilled from the
/// controller when empty).
pub async fn fresh_producer_id(shard: &Rc<Shard>, deadline: Instant) -> Result<i64, OpError> {
    if let Some(id) = shard.producer_ids.take() {
        return Ok(id);
    }
    let rx = shard.controller.propose(Command::AllocateProducerIds {
        node_id: shard.cfg.node_id,
        count: PRODUCER_ID_BLOCK,
    });
    match recv_until(shard, &rx, deadline).await {
        Some(Ok(Ok(Applied::ProducerIdsAllocated { first, count }))) => {
            // Another request of this shard may have refilled meanwhile: its rest is
            // dropped, never handed out twice.
            shard.producer_ids.refill(first, count);
            shard.producer_ids.take().ok_or_else(|| {
                OpError::new(ErrorCode::UnknownServerError, "an empty producer id block")
            })
        }
        Some(Ok(Ok(other))) => Err(OpError::new(
            ErrorCode::UnknownServerError,
            format!("the controller answered {other:?} to a producer id allocation"),
        )),
        Some(Ok(Err(e))) => Err(OpError::new(e.code(), e.to_string())),
        Some(Err(_)) => Err(OpError::new(
            ErrorCode::UnknownServerError,
            "the controller stopped",
        )),
        None => Err(OpError::new(
            ErrorCode::RequestTimedOut,
            "the controller did not allocate producer ids in time",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn epochs_bump_and_blocks_hand_out_each_id_once() {
        assert_eq!(bumped(42, 4), Some((42, 5)));
        assert_eq!(bumped(42, MAX_EPOCH), None);
        assert_eq!(bumped(-1, -1), None);
        let b = ProducerIdBlock::default();
        assert_eq!(b.take(), None);
        b.refill(1000, 2);
        assert_eq!(
            (b.take(), b.take(), b.take()),
            (Some(1000), Some(1001), None)
        );
    }
}
