//! WriteTxnMarkers (native key 36): decodes, calls [`crate::broker::txn_markers`], encodes.

use std::rc::Rc;
use std::time::Instant;

use super::{status, Reply};
use crate::batch::control::ControlKind;
use crate::broker::txn_markers::{write_txn_markers as write, MarkerWrite};
use crate::broker::{request_timeout, Shard};
use crate::clock::now_ms;
use crate::protocol::frame::RequestFrame;
use crate::protocol::messages::{
    TxnMarkerPartitionResult, TxnMarkerResult, WriteTxnMarkersRequest, WriteTxnMarkersResponse,
};
use crate::protocol::ApiKey;

pub async fn write_txn_markers(shard: &Rc<Shard>, frame: &RequestFrame) -> Reply {
    let req: WriteTxnMarkersRequest = match frame.decode_meta() {
        Ok(r) => r,
        Err(e) => return e.into(),
    };
    let markers: Vec<MarkerWrite> = req
        .markers
        .iter()
        .map(|m| MarkerWrite {
            producer_id: m.producer_id,
            producer_epoch: m.producer_epoch,
            kind: if m.commit {
                ControlKind::Commit
            } else {
                ControlKind::Abort
            },
            coordinator_epoch: m.coordinator_epoch,
            partitions: m
                .partitions
                .iter()
                .map(|p| (p.topic.clone(), p.partition))
                .collect(),
        })
        .collect();
    // Kafka's request has no timeout: the broker's request timeout bounds the wait.
    let deadline = Instant::now() + request_timeout(shard, 0);
    let outcomes = write(shard, &markers, now_ms(), deadline).await;
    let markers = markers
        .into_iter()
        .zip(outcomes)
        .map(|(m, outcomes)| TxnMarkerResult {
            producer_id: m.producer_id,
            partitions: m
                .partitions
                .into_iter()
                .zip(outcomes)
                .map(|((topic, partition), r)| {
                    let (error_code, message) = status(shard, ApiKey::WriteTxnMarkers, &r);
                    TxnMarkerPartitionResult {
                        topic,
                        partition,
                        error_code,
                        message,
                    }
                })
                .collect(),
        })
        .collect();
    Reply::meta(&WriteTxnMarkersResponse { markers })
}
