//! InitProducerId over the Kafka protocol: decodes, calls the broker operation
//! ([`crate::broker::producer_ids`]: ids reserved in blocks from the controller, KIP-360
//! epoch bumps, transactional ids given to their transaction coordinator), encodes. Sequences are checked at append
//! by each partition's producer state (`crate::partition::producer_state`).

use std::rc::Rc;
use std::time::{Duration, Instant};

use kafka_protocol::messages::{InitProducerIdRequest, InitProducerIdResponse, ProducerId};

use crate::broker::producer_ids::{self, InitProducer};
use crate::broker::Shard;

pub async fn init_producer_id(
    shard: &Rc<Shard>,
    version: i16,
    req: &InitProducerIdRequest,
) -> InitProducerIdResponse {
    let ask = InitProducer {
        transactional_id: req.transactional_id.as_ref().map(|t| t.0.to_string()),
        producer_id: req.producer_id.0,
        epoch: req.producer_epoch,
        transaction_timeout_ms: req.transaction_timeout_ms,
    };
    // The request carries no timeout of its own: a produce's bound.
    let deadline = Instant::now() + shard.cfg.max_produce_timeout.min(Duration::from_secs(30));
    let mut r = InitProducerIdResponse::default();
    match producer_ids::init_producer_id(shard, &ask, deadline).await {
        Ok((id, epoch)) => {
            r.producer_id = ProducerId(id);
            r.producer_epoch = epoch;
        }
        Err(e) => {
            // PRODUCER_FENCED is known from v4 on (KIP-588).
            r.error_code = crate::kafka::transactions::code_for(&e, version, 4);
            r.producer_id = ProducerId(-1);
            r.producer_epoch = -1;
        }
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kafka::admin::test_support::{round_trip, served};
    use kafka_protocol::messages::ApiKey;

    #[test]
    fn responses_encode_at_every_served_version() {
        let mut r = InitProducerIdResponse::default();
        r.producer_id = ProducerId(1);
        round_trip(&r, served(ApiKey::InitProducerId));
    }
}
