//! InitProducerId (native key 35): decodes, calls [`crate::broker::producer_ids`], encodes.

use std::rc::Rc;
use std::time::Instant;

use super::{status, Reply};
use crate::broker::producer_ids::{self, InitProducer};
use crate::broker::{request_timeout, Shard};
use crate::protocol::frame::RequestFrame;
use crate::protocol::messages::{InitProducerIdRequest, InitProducerIdResponse};
use crate::protocol::ApiKey;

pub async fn init_producer_id(shard: &Rc<Shard>, frame: &RequestFrame) -> Reply {
    let req: InitProducerIdRequest = match frame.decode_meta() {
        Ok(r) => r,
        Err(e) => return e.into(),
    };
    let deadline = Instant::now() + request_timeout(shard, req.timeout_ms);
    let ask = InitProducer {
        transactional_id: req.transactional_id,
        producer_id: req.producer_id,
        epoch: req.producer_epoch,
        transaction_timeout_ms: req.transaction_timeout_ms,
    };
    let r = producer_ids::init_producer_id(shard, &ask, deadline).await;
    let (error_code, message) = status(shard, ApiKey::InitProducerId, &r);
    let (producer_id, producer_epoch) = r.unwrap_or((-1, -1));
    Reply::meta(&InitProducerIdResponse {
        error_code,
        message,
        producer_id,
        producer_epoch,
    })
}
