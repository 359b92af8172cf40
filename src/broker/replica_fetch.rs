//! ReplicaFetch, the leader's side: a follower broker's shard asks for many partitions at
//! once, saying where each stands; the leader's [`crate::replication::Leader`] records its
//! progress (the high watermark and the ISR follow from it) and the stored batches from its
//! fetch offset go back as they are, below the leader's durable end. Long-polls while there
//! is nothing new, up to `max_wait` (capped by `--max-fetch-wait-ms`).

use std::time::{Duration, Instant};

use futures_util::future::select_all;

use super::{locate, OpError, Shard};
use crate::clock::now_ms;
use crate::log::ReadChunk;
use crate::partition::ReadLimits;
use crate::protocol::ErrorCode;
use crate::replication::ReplicaFetch;

/// One partition of a replica fetch.
#[derive(Clone, Debug)]
pub struct ReplicaFetchPartition {
    pub topic: String,
    pub partition: u32,
    pub fetch: ReplicaFetch,
    pub max_bytes: usize,
}

#[derive(Clone, Debug)]
pub struct ReplicaFetchRequest {
    pub replica_id: u32,
    pub broker_epoch: u64,
    pub partitions: Vec<ReplicaFetchPartition>,
    pub max_wait: Duration,
    pub max_bytes: usize,
}

/// What one partition answered.
#[derive(Default)]
pub struct ReplicaRead {
    pub high_watermark: u64,
    pub log_start_offset: u64,
    pub chunks: Vec<ReadChunk>,
}

impl ReplicaRead {
    pub fn len(&self) -> usize {
        self.chunks.iter().map(ReadChunk::len).sum()
    }
    pub fn is_empty(&self) -> bool {
        self.chunks.is_empty()
    }
}

/// A follower whose registration is older than the one the metadata holds is a zombie of a
/// previous process: refused, nothing recorded.
fn check_broker_epoch(shard: &Shard, replica_id: u32, broker_epoch: u64) -> Result<(), OpError> {
    let md = shard.metadata.borrow();
    match md.members.get(&replica_id) {
        Some(m) if broker_epoch < m.broker_epoch => Err(OpError::new(
            ErrorCode::StaleBrokerEpoch,
            format!(
                "broker {replica_id}: broker epoch {broker_epoch} is older than its \
                 registration's {}",
                m.broker_epoch
            ),
        )),
        _ => Ok(()),
    }
}

/// Where a follower may start copying a partition on this shard (0: not here): a refused
/// follower learns it, and one whose fetch offset is below it starts its log over there.
/// It is the base of the batch holding the log start
/// ([`crate::partition::Partition::replica_start`]).
pub async fn replica_start(shard: &Shard, topic: &str, partition: u32) -> u64 {
    let Ok(p) = locate(shard, topic, partition) else {
        return 0;
    };
    match p.replica_start().await {
        Ok(start) => start,
        Err(e) => {
            log::warn!("{topic}-{partition}: where replicas may start: {e}");
            p.log_start_offset()
        }
    }
}

/// Answers a replica fetch: one result per partition, in request order.
pub async fn replica_fetch(
    shard: &Shard,
    req: &ReplicaFetchRequest,
) -> Vec<Result<ReplicaRead, OpError>> {
    let deadline = Instant::now() + req.max_wait.min(shard.cfg.max_fetch_wait);
    let max_total = req.max_bytes.min(shard.cfg.max_frame_bytes / 2).max(1);
    let epoch_ok = check_broker_epoch(shard, req.replica_id, req.broker_epoch);
    let now = u64::try_from(now_ms()).unwrap_or(0);
    // Progress is recorded once, as the fetch arrives; the long poll only re-reads.
    let mut accepted: Vec<Result<u64, OpError>> = req
        .partitions
        .iter()
        .map(|fp| {
            epoch_ok.clone()?;
            let p = locate(shard, &fp.topic, fp.partition)?;
            p.on_replica_fetch(req.replica_id, fp.fetch, now)
                .map_err(|e| OpError::new(e.code(), format!("{}-{}: {e}", fp.topic, fp.partition)))
        })
        .collect();
    // A follower learns a moved high watermark at once (it is its own next safe point).
    let mut first_hws: Option<Vec<u64>> = None;
    loop {
        let mut listeners = Vec::new();
        let mut results = Vec::with_capacity(req.partitions.len());
        let mut total = 0usize;
        for (fp, ok) in req.partitions.iter().zip(&mut accepted) {
            if let Err(e) = ok {
                results.push(Err(e.clone()));
                continue;
            }
            let p = match locate(shard, &fp.topic, fp.partition) {
                Ok(p) => p,
                Err(e) => {
                    results.push(Err(e));
                    continue;
                }
            };
            listeners.push(p.listen());
            let mut read = ReplicaRead {
                high_watermark: p.high_watermark(),
                log_start_offset: p.log_start_offset(),
                chunks: Vec::new(),
            };
            let room = max_total.saturating_sub(total);
            if room > 0 {
                let limits = ReadLimits {
                    max_bytes: fp.max_bytes.min(room).max(1),
                    file_reads: shard.cfg.file_reads,
                };
                match p
                    .read_replica(fp.fetch.fetch_offset, limits, &shard.cache)
                    .await
                {
                    Ok(chunks) => {
                        read.chunks = chunks;
                        total += read.len();
                    }
                    Err(e) => {
                        results.push(Err(e.into()));
                        continue;
                    }
                }
            }
            results.push(Ok(read));
        }
        let any_error = results.iter().any(Result::is_err);
        let hws: Vec<u64> = results
            .iter()
            .map(|r| r.as_ref().map_or(0, |r| r.high_watermark))
            .collect();
        let hw_moved = first_hws.as_ref().is_some_and(|f| *f != hws);
        first_hws.get_or_insert(hws);
        if total > 0 || any_error || hw_moved || listeners.is_empty() || Instant::now() >= deadline
        {
            return results;
        }
        drop(results);
        futures_lite::future::or(
            async {
                select_all(listeners).await;
            },
            shard.deadlines.sleep_until(deadline),
        )
        .await;
    }
}
