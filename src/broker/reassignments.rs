//! Partition reassignment, broker drains and preferred-leader elections as controller
//! proposals (the logic is the controller's, `controller::reassignment`). Each answers once
//! the change is submitted (committed and applied by every shard here), not once the data
//! moved: progress shows in the metadata (`adding`/`removing` per partition).

use std::rc::Rc;
use std::time::Duration;

use super::{topics, OpError, Shard};
use crate::controller::metadata::{Applied, Command};
use crate::protocol::ErrorCode;

/// A proposal refused because the partition changed meanwhile (an ISR change) is re-read and
/// sent again at most this many times.
const EPOCH_RETRIES: usize = 5;
/// Pause before such a retry (the local view catches up with the controller's).
const EPOCH_RETRY_PAUSE: Duration = Duration::from_millis(50);

/// Starts moving `topic`-`partition` to `replicas`, or cancels its running reassignment
/// (`None`).
pub async fn reassign(
    shard: &Rc<Shard>,
    topic: &str,
    partition: u32,
    replicas: Option<Vec<u32>>,
    timeout: Duration,
) -> Result<(), OpError> {
    let mut attempt = 0;
    loop {
        let partition_epoch = shard
            .controller
            .metadata()
            .topic(topic)
            .and_then(|t| t.partitions.get(partition as usize))
            .map_or(0, |p| p.partition_epoch);
        let cmd = Command::ReassignPartition {
            topic: topic.to_string(),
            partition,
            replicas: replicas.clone(),
            partition_epoch,
        };
        match topics::propose(shard, cmd, timeout).await {
            Err(e) if e.code == ErrorCode::InvalidUpdateVersion && attempt < EPOCH_RETRIES => {
                attempt += 1;
                shard.deadlines.sleep(EPOCH_RETRY_PAUSE).await;
            }
            other => return other,
        }
    }
}

/// One partition's part of a drain: its new replicas, or why it was not submitted.
pub struct DrainedPartition {
    pub topic: String,
    pub partition: u32,
    pub replicas: Vec<u32>,
    pub result: Result<(), OpError>,
}

/// Reassigns every partition with a replica on broker `node` to other live brokers (the
/// controller's drain plan), one reassignment per partition.
pub async fn drain_broker(
    shard: &Rc<Shard>,
    node: u32,
    timeout: Duration,
) -> Result<Vec<DrainedPartition>, OpError> {
    let plan = shard
        .controller
        .metadata()
        .drain_plan(node)
        .map_err(|e| OpError::new(e.code, e.message))?;
    let mut out = Vec::with_capacity(plan.len());
    for mv in plan {
        let result = reassign(
            shard,
            &mv.topic,
            mv.partition,
            Some(mv.replicas.clone()),
            timeout,
        )
        .await;
        out.push(DrainedPartition {
            topic: mv.topic,
            partition: mv.partition,
            replicas: mv.replicas,
            result,
        });
    }
    Ok(out)
}

/// Moves leadership to preferred replicas; returns how many partitions changed leader.
pub async fn elect_preferred(
    shard: &Rc<Shard>,
    topic: Option<String>,
    partition: Option<u32>,
    timeout: Duration,
) -> Result<usize, OpError> {
    match topics::propose_applied(shard, Command::ElectPreferred { topic, partition }, timeout)
        .await?
    {
        Applied::LeadersElected { changed } => Ok(changed),
        other => Err(OpError::new(
            ErrorCode::UnknownServerError,
            format!("unexpected answer {other:?}"),
        )),
    }
}
