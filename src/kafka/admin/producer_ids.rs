//! InitProducerId hands out a producer id so that idempotent-by-default clients (the Java
//! producer, librdkafka with `enable.idempotence=true`, which fails fatally without one) work,
//! but **sequence numbers are not checked yet**: a retried batch the broker already stored is
//! stored again (at-least-once, as with rill's own producer). Ids come from a per-process
//! counter prefixed with the broker's node id ([`next_producer_id`]); nothing is persisted. An
//! idempotence implementation must allocate ids through the controller (a raft command
//! reserving blocks of ids, persisted with the cluster metadata, so they stay unique across
//! restarts and brokers) and rebuild each partition's producer state (last sequences per
//! producer id and epoch) from the log at recovery. Transactional ids are refused
//! (UNSUPPORTED_VERSION, as Kafka answers for features that are off).

use std::sync::atomic::{AtomicU32, Ordering};

use kafka_protocol::messages::{InitProducerIdRequest, InitProducerIdResponse, ProducerId};

use crate::broker::Shard;
use crate::protocol::ErrorCode;

/// Producer ids handed out by this broker process so far.
static PRODUCER_IDS: AtomicU32 = AtomicU32::new(0);

/// A fresh producer id: the broker's node id in the high 32 bits (so brokers never hand out the
/// same id), a per-process counter in the low 32. Unique within one broker run only (and until
/// 2^32 ids); see the module comment for what idempotence will need instead.
fn next_producer_id(broker: u32) -> i64 {
    let n = PRODUCER_IDS.fetch_add(1, Ordering::Relaxed);
    (i64::from(broker & 0x7fff_ffff) << 32) | i64::from(n)
}

/// Kafka bumps an epoch up to `i16::MAX - 1`, then hands out a new producer id.
const MAX_EPOCH: i16 = i16::MAX - 1;

fn init_producer_id_with(
    req: &InitProducerIdRequest,
    fresh: impl FnOnce() -> i64,
) -> InitProducerIdResponse {
    let mut r = InitProducerIdResponse::default();
    if req
        .transactional_id
        .as_ref()
        .is_some_and(|t| !t.0.is_empty())
    {
        r.error_code = ErrorCode::UnsupportedVersion.code();
        r.producer_id = ProducerId(-1);
        r.producer_epoch = -1;
        return r;
    }
    // v3+: a producer that hit an error asks to bump its epoch (KIP-360) and keep its id.
    let (id, epoch) = (req.producer_id.0, req.producer_epoch);
    if id >= 0 && (0..MAX_EPOCH).contains(&epoch) {
        r.producer_id = ProducerId(id);
        r.producer_epoch = epoch + 1;
    } else {
        r.producer_id = ProducerId(fresh());
        r.producer_epoch = 0;
    }
    r
}

pub fn init_producer_id(shard: &Shard, req: &InitProducerIdRequest) -> InitProducerIdResponse {
    init_producer_id_with(req, || next_producer_id(shard.cfg.node_id))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kafka::admin::s;
    use crate::kafka::admin::test_support::{round_trip, served};
    use kafka_protocol::messages::{ApiKey, TransactionalId};

    #[test]
    fn producer_ids_are_fresh_epochs_bump_and_transactions_are_refused() {
        let a = next_producer_id(3);
        let b = next_producer_id(3);
        assert_ne!(a, b);
        assert_eq!(a >> 32, 3);
        assert!(next_producer_id(u32::MAX) >= 0);
        let mut req = InitProducerIdRequest::default();
        req.transactional_id = None;
        let r = init_producer_id_with(&req, || 42);
        assert_eq!(
            (r.error_code, r.producer_id.0, r.producer_epoch),
            (0, 42, 0)
        );
        req.transactional_id = Some(TransactionalId(s("")));
        assert_eq!(init_producer_id_with(&req, || 43).producer_id.0, 43);
        // KIP-360 epoch bump keeps the id; an exhausted epoch gets a new id.
        req.producer_id = ProducerId(42);
        req.producer_epoch = 4;
        let r = init_producer_id_with(&req, || panic!("no new id"));
        assert_eq!((r.producer_id.0, r.producer_epoch), (42, 5));
        req.producer_epoch = MAX_EPOCH;
        let r = init_producer_id_with(&req, || 44);
        assert_eq!((r.producer_id.0, r.producer_epoch), (44, 0));
        req.transactional_id = Some(TransactionalId(s("txn")));
        let r = init_producer_id_with(&req, || panic!("no id for transactions"));
        assert_eq!((r.error_code, r.producer_id.0), (35, -1));
    }

    #[test]
    fn responses_encode_at_every_served_version() {
        let mut req = InitProducerIdRequest::default();
        req.transactional_id = None;
        round_trip(
            &init_producer_id_with(&req, || 1),
            served(ApiKey::InitProducerId),
        );
    }
}
