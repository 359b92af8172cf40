//! DelayedProduce: one batch kept by the partition's shard and appended at its delivery time
//! ([`crate::delay::queue`]); answered once it is durable in the shard's delay store.

use std::rc::Rc;

use super::{status, Reply};
use crate::broker::Shard;
use crate::protocol::frame::RequestFrame;
use crate::protocol::messages::{DelayedProduceRequest, DelayedProduceResponse};
use crate::protocol::ApiKey;

pub async fn delayed_produce(shard: &Rc<Shard>, frame: &RequestFrame) -> Reply {
    let req: DelayedProduceRequest = match frame.decode_meta() {
        Ok(r) => r,
        Err(e) => return e.into(),
    };
    let batch = crate::batch::aligned16(frame.payload());
    let r =
        crate::delay::queue::accept(shard, &req.topic, req.partition, req.deliver_at_ms, &batch)
            .await;
    let (error_code, message) = status(shard, ApiKey::DelayedProduce, &r);
    Reply::meta(&DelayedProduceResponse {
        error_code,
        message,
    })
}
