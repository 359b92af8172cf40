//! Writes a transaction's markers: per coordinator shard, one WriteTxnMarkers request (native
//! key 36) per partition leader's shard, batching the markers of that leader; the answer
//! names what is written, the coordinator retries the rest with backoff.

use std::rc::Rc;

use super::Shard;
use crate::transactions::coordinator::Event;
use crate::transactions::TopicPartition;

/// One transaction's markers to write.
#[derive(Debug, Clone)]
pub struct Markers {
    pub transactional_id: String,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub commit: bool,
    pub coordinator_epoch: i32,
    pub partitions: Vec<TopicPartition>,
}

/// Sends the markers, then tells coordinator `k` which were written.
pub fn send(shard: &Rc<Shard>, k: u32, m: Markers) {
    let shard = shard.clone();
    rill_shards::rt::spawn_local(async move {
        let written: Vec<TopicPartition> = Vec::new();
        let out = shard.txns.handle(
            k,
            Event::MarkersDone {
                transactional_id: m.transactional_id,
                producer_id: m.producer_id,
                producer_epoch: m.producer_epoch,
                written,
                now_ms: crate::clock::now_ms().max(0) as u64,
            },
        );
        super::transactions::run_actions(&shard, k, out);
    })
    .detach();
}
