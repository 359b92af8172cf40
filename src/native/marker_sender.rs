//! Writes transactions' markers: per coordinator shard and partition leader (broker and
//! shard), one WriteTxnMarkers request (native key 36) at a time on one connection,
//! batching every marker queued for that leader meanwhile (Kafka's
//! `TransactionMarkerChannelManager`). A transaction hears which of its partitions have
//! their marker; its coordinator retries the others with backoff, re-reading the leaders
//! from the metadata each time (a leader moved is found again).

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::time::Duration;

use super::replica_fetcher::{leader_addr, Conn};
use crate::broker::transactions::markers_done;
use crate::broker::txn_host::Markers;
use crate::broker::Shard;
use crate::protocol::messages::{
    TxnMarker, TxnMarkerPartition, WriteTxnMarkersRequest, WriteTxnMarkersResponse,
};
use crate::protocol::ErrorCode;
use crate::transactions::TopicPartition;

/// Markers one request carries at most (the rest wait for the next).
const MAX_MARKERS_PER_REQUEST: usize = 500;
/// Queued markers per leader at most; past it a transaction's markers to that leader are
/// answered not written (its coordinator retries after a backoff).
const MAX_QUEUED_PER_LEADER: usize = 10_000;
/// A leader's answer comes once its markers are committed: give it this long.
const MARKER_WAIT: Duration = Duration::from_secs(30);

/// A leader: (broker, shard).
type Leader = (u32, u32);

/// A marker waiting for its leader's request, and where to say which partitions it wrote.
struct Queued {
    marker: TxnMarker,
    reply: flume::Sender<Vec<TopicPartition>>,
}

/// The shard's marker queues, one per leader, each drained by one task.
#[derive(Default)]
struct Sender {
    queues: RefCell<HashMap<Leader, Vec<Queued>>>,
    conns: RefCell<HashMap<Leader, Conn>>,
}

/// Sends the markers the shard's transaction coordinators queue, until the shard stops.
pub async fn run(shard: Rc<Shard>) {
    let sender = Rc::new(Sender::default());
    loop {
        let queued = shard.txns.markers_queued.listen();
        for m in shard.txns.take_markers() {
            let (shard, sender) = (shard.clone(), sender.clone());
            rill_shards::rt::spawn_local(async move {
                let written = write(&shard, &sender, &m).await;
                markers_done(&shard, m, written);
            })
            .detach();
        }
        queued.await;
    }
}

/// The partitions whose marker is written (or which are gone for good: a deleted topic or
/// partition has nothing to mark).
async fn write(shard: &Rc<Shard>, sender: &Rc<Sender>, m: &Markers) -> Vec<TopicPartition> {
    let mut written = Vec::new();
    let mut by_leader: HashMap<Leader, Vec<TxnMarkerPartition>> = HashMap::new();
    {
        let md = shard.metadata.borrow();
        for tp in &m.partitions {
            let info = md
                .topic(&tp.topic)
                .map(|t| t.partitions.get(tp.partition as usize));
            match info {
                None | Some(None) => written.push(tp.clone()),
                Some(Some(pi)) if pi.leader != 0 => by_leader
                    .entry((pi.leader, pi.shard))
                    .or_default()
                    .push(TxnMarkerPartition {
                        topic: tp.topic.clone(),
                        partition: tp.partition,
                    }),
                // No leader now: retried.
                Some(Some(_)) => {}
            }
        }
    }
    let mut replies = Vec::new();
    for (leader, partitions) in by_leader {
        let (tx, rx) = flume::bounded(1);
        let marker = TxnMarker {
            producer_id: m.producer_id,
            producer_epoch: m.producer_epoch,
            commit: m.commit,
            coordinator_epoch: m.coordinator_epoch,
            partitions,
        };
        // A leader's queue exists while its drain task runs: a new one starts a task.
        let start = {
            let mut queues = sender.queues.borrow_mut();
            let existed = queues.contains_key(&leader);
            let q = queues.entry(leader).or_default();
            if q.len() >= MAX_QUEUED_PER_LEADER {
                continue; // not written: retried
            }
            q.push(Queued { marker, reply: tx });
            !existed
        };
        if start {
            rill_shards::rt::spawn_local(drain(shard.clone(), sender.clone(), leader)).detach();
        }
        replies.push(rx);
    }
    for rx in replies {
        if let Ok(w) = rx.recv_async().await {
            written.extend(w);
        }
    }
    written
}

/// Sends the leader's queued markers, a request at a time, until its queue is empty.
async fn drain(shard: Rc<Shard>, sender: Rc<Sender>, leader: Leader) {
    loop {
        let batch: Vec<Queued> = {
            let mut queues = sender.queues.borrow_mut();
            let Some(q) = queues.get_mut(&leader) else {
                return;
            };
            if q.is_empty() {
                queues.remove(&leader);
                return;
            }
            let n = q.len().min(MAX_MARKERS_PER_REQUEST);
            q.drain(..n).collect()
        };
        let results = request(&shard, &sender, leader, &batch).await;
        for (q, w) in batch.into_iter().zip(results) {
            let _ = q.reply.try_send(w);
        }
    }
}

/// One WriteTxnMarkers request to `leader`: per queued marker, its partitions written.
async fn request(
    shard: &Rc<Shard>,
    sender: &Sender,
    leader: Leader,
    batch: &[Queued],
) -> Vec<Vec<TopicPartition>> {
    let none = || batch.iter().map(|_| Vec::new()).collect();
    let conn = sender.conns.borrow_mut().remove(&leader);
    let mut conn = match conn {
        Some(c) => c,
        None => {
            let addr = match leader_addr(shard, leader) {
                Ok(a) => a,
                Err(e) => {
                    log::debug!("markers to broker {} shard {}: {e}", leader.0, leader.1);
                    return none();
                }
            };
            match Conn::connect(shard, addr).await {
                Ok(c) => c,
                Err(e) => {
                    log::debug!("markers to broker {} shard {}: {e}", leader.0, leader.1);
                    return none();
                }
            }
        }
    };
    let req = WriteTxnMarkersRequest {
        markers: batch.iter().map(|q| q.marker.clone()).collect(),
    };
    let answer: Result<(WriteTxnMarkersResponse, _), String> = conn
        .call_key(
            shard,
            crate::protocol::ApiKey::WriteTxnMarkers as u16,
            "WriteTxnMarkers",
            &req,
            MARKER_WAIT,
        )
        .await;
    let resp = match answer {
        Ok((r, _)) => r,
        Err(e) => {
            log::debug!("markers to broker {} shard {}: {e}", leader.0, leader.1);
            return none();
        }
    };
    sender.conns.borrow_mut().insert(leader, conn);
    batch
        .iter()
        .enumerate()
        .map(|(i, q)| {
            let Some(r) = resp.markers.get(i) else {
                return Vec::new();
            };
            q.marker
                .partitions
                .iter()
                .zip(&r.partitions)
                .filter(|(_, pr)| done(pr.error_code))
                .map(|(p, _)| TopicPartition::new(p.topic.clone(), p.partition))
                .collect()
        })
        .collect()
}

/// Whether a partition's answer ends its marker: written, or refused for good because a
/// newer producer epoch or coordinator has taken over there (Kafka's coordinator stops
/// sending then too); every other error is retried.
fn done(code: i16) -> bool {
    matches!(
        ErrorCode::from_code(code),
        ErrorCode::None | ErrorCode::InvalidProducerEpoch | ErrorCode::TransactionCoordinatorFenced
    )
}
