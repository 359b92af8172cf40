//! WriteTxnMarkers (the partition side of a transaction's end): a transaction coordinator
//! asks the leader of each partition of a transaction to append its commit or abort marker
//! ([`crate::batch::control`]). Each marker goes through the normal append path (judged by
//! the producer state: a stale producer epoch INVALID_PRODUCER_EPOCH, an older coordinator
//! TRANSACTION_COORDINATOR_FENCED; stamped; group commit) and is answered once committed:
//! the high watermark past it (acks=all, so NOT_ENOUGH_REPLICAS below
//! `min.insync.replicas`), or the timeout. Works for any partition, `__consumer_offsets`'
//! included. The request goes to the shard leading the partitions (as a produce does).

use std::rc::Rc;
use std::time::Instant;

use super::group_host::OFFSETS_TOPIC;
use super::produce::{await_acks, Acks, Origin, Produce};
use super::{OpError, Shard};
use crate::batch::control::{ControlKind, ControlRecord};
use crate::protocol::ErrorCode;

/// One marker for one producer's transaction, to the partitions it touched.
#[derive(Debug, Clone)]
pub struct MarkerWrite {
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub kind: ControlKind,
    pub coordinator_epoch: i32,
    pub partitions: Vec<(String, u32)>,
}

/// Appends every marker to every partition at once (in request order, no await between
/// them), then waits until each is committed or `deadline`. One result per marker and
/// partition, in order.
pub async fn write_txn_markers(
    shard: &Rc<Shard>,
    markers: &[MarkerWrite],
    now_ms: i64,
    deadline: Instant,
) -> Vec<Vec<Result<(), OpError>>> {
    let mut results: Vec<Vec<Result<(), OpError>>> = Vec::with_capacity(markers.len());
    let mut waits = Vec::new();
    // (marker, partition) of each wait's slot.
    let mut slots = Vec::new();
    for (m, marker) in markers.iter().enumerate() {
        let mut rs = Vec::with_capacity(marker.partitions.len());
        let record = ControlRecord {
            kind: marker.kind,
            coordinator_epoch: marker.coordinator_epoch,
        };
        for (p, (topic, partition)) in marker.partitions.iter().enumerate() {
            match append_marker(shard, marker, &record, topic, *partition, now_ms) {
                Ok(a) => {
                    waits.push(a.ack(slots.len()));
                    slots.push((m, p));
                    rs.push(Ok(()));
                }
                Err(e) => rs.push(Err(e)),
            }
        }
        results.push(rs);
    }
    for (slot, e) in await_acks(shard, waits, deadline).await {
        let (m, p) = slots[slot];
        results[m][p] = Err(e);
    }
    // A marker committed on an offsets partition ends the producer's transactional offsets
    // there: its commit makes them the groups' (Kafka's `handleTxnCompletion`, after the
    // marker is replicated); a reload replays the same from the log.
    for &(m, p) in &slots {
        let marker = &markers[m];
        let (topic, partition) = &marker.partitions[p];
        if results[m][p].is_ok() && topic == OFFSETS_TOPIC {
            shard.groups.end_txn_offsets(
                *partition,
                marker.producer_id,
                marker.kind == ControlKind::Commit,
                u64::try_from(now_ms).unwrap_or(0),
            );
        }
    }
    results
}

/// Stages and appends one marker batch to `topic`-`partition` (the shard must lead it).
fn append_marker(
    shard: &Rc<Shard>,
    marker: &MarkerWrite,
    record: &ControlRecord,
    topic: &str,
    partition: u32,
    now_ms: i64,
) -> Result<super::produce::Appended, OpError> {
    let bytes = record
        .batch(marker.producer_id, marker.producer_epoch, now_ms)
        .map_err(|e| OpError::new(ErrorCode::InvalidRecord, e.to_string()))?;
    let mut produce = Produce::markers(Acks::All);
    produce.stage(shard, topic, partition, &bytes, 0, Origin::BuiltHere)?;
    produce
        .append(shard, bytes, 0, now_ms)
        .pop()
        .unwrap_or_else(|| {
            Err(OpError::new(
                ErrorCode::UnknownServerError,
                "the marker was not appended",
            ))
        })
}
