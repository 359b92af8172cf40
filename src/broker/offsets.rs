//! Committed offsets: OffsetCommit appends to the group's partition of `__consumer_offsets`
//! (on this same shard) and answers once the commit is as durable as `--fsync` promises;
//! only then does the coordinator's memory take it. OffsetFetch reads that memory.

use std::rc::Rc;

use super::group_host::{offsets_partition, OFFSETS_TOPIC};
use super::groups::coordinated_here;
use super::produce::Appended;
use super::{offsets_log, OpError, Shard};
use crate::clock::now_ms;
use crate::group::offsets_log::{CommitRecord, OffsetsRecord, PartitionOffset};
use crate::partition::Partition;
use crate::protocol::error_code::ErrorCode;

/// The group's partition of `__consumer_offsets` (on this shard, its coordinator) and the
/// topic's partition count.
fn offsets_partition_of(shard: &Shard, group: &str) -> Result<(Rc<Partition>, u32), OpError> {
    let n = shard
        .metadata
        .borrow()
        .topic(OFFSETS_TOPIC)
        .map_or(1, |t| t.partitions.len() as u32);
    let p = shard
        .partition(OFFSETS_TOPIC, offsets_partition(group, n))
        .ok_or_else(|| {
            OpError::new(
                ErrorCode::CoordinatorNotAvailable,
                "the offsets partition is not open",
            )
        })?;
    Ok((p, n))
}

/// OffsetCommit: checked against the group, appended to the group's `__consumer_offsets`
/// partition, and stored in the coordinator once durable.
pub async fn commit(
    shard: &Rc<Shard>,
    group: &str,
    member_id: &str,
    instance: Option<&str>,
    generation: i32,
    offsets: Vec<PartitionOffset>,
) -> Result<(), OpError> {
    committable_group(shard, group)?;
    shard
        .groups
        .check_commit(group, member_id, instance, generation, &offsets)?;
    if offsets.is_empty() {
        return Ok(());
    }
    let (p, n) = offsets_partition_of(shard, group)?;
    p.admit_all()
        .map_err(|e| as_coordinator_error(e.into(), "commit"))?;
    let led_at = shard.groups.coordination(p.index);
    let now = now_ms();
    let records: Vec<OffsetsRecord> = offsets
        .iter()
        .map(|o| {
            OffsetsRecord::Commit(CommitRecord {
                group: group.to_string(),
                committed: o.clone(),
            })
        })
        .collect();
    let appended = offsets_log::append(shard, &p, &records, now, None)
        .map_err(|e| as_coordinator_error(e.into(), "commit"))?;
    let Some((base, next)) = appended else {
        return Ok(());
    };
    shard.groups.commit_appended(p.index, base, offsets.len());
    shard.group_commit.mark_dirty(&p);
    let stored = Appended {
        partition: p.clone(),
        base_offset: base,
        next_offset: next,
        acks: crate::broker::produce::Acks::All,
    }
    .durable(shard)
    .await;
    shard.groups.commit_settled(p.index, base);
    stored.map_err(|e| as_coordinator_error(e, "commit"))?;
    if shard.groups.coordination(p.index) != led_at {
        // Deposed while waiting: the new leader loads this commit from its replica (it was
        // in every ISR member), and the member retries there.
        return Err(OpError::new(
            ErrorCode::NotCoordinator,
            "the group's coordinator moved while the commit was stored: find it again",
        ));
    }
    shard
        .groups
        .store_commit(group, now.max(0) as u64, member_id, offsets);
    if let Some(records) =
        shard
            .groups
            .begin_compaction(p.index, n, shard.cfg.offsets_compact_every)
    {
        offsets_log::compact(shard, &p, records).await;
        shard.groups.end_compaction(p.index);
    }
    Ok(())
}

/// TxnOffsetCommit: a transaction's offset commits, appended to the group's offsets
/// partition as the producer's transactional batch and pending there until the
/// transaction's marker lands on that partition (its commit makes them the group's committed
/// offsets, its abort drops them). A producer whose epoch the partition knows to be older
/// than its current one is fenced (PRODUCER_FENCED). The group's generation and member are
/// checked when given (KIP-447), as OffsetCommit checks them.
#[allow(clippy::too_many_arguments)]
pub async fn txn_commit(
    shard: &Rc<Shard>,
    group: &str,
    producer_id: i64,
    producer_epoch: i16,
    member_id: &str,
    instance: Option<&str>,
    generation: i32,
    offsets: Vec<PartitionOffset>,
) -> Result<(), OpError> {
    committable_group(shard, group)?;
    if producer_id < 0 || producer_epoch < 0 {
        return Err(OpError::new(
            ErrorCode::InvalidProducerIdMapping,
            "a transactional offset commit needs a producer id and epoch",
        ));
    }
    if generation >= 0 {
        shard
            .groups
            .check_commit(group, member_id, instance, generation, &offsets)?;
    } else {
        shard.groups.check_commit(group, "", None, -1, &offsets)?;
    }
    if offsets.is_empty() {
        return Ok(());
    }
    let (p, _) = offsets_partition_of(shard, group)?;
    p.admit_all()
        .map_err(|e| as_coordinator_error(e.into(), "commit"))?;
    check_producer_epoch(&p, producer_id, producer_epoch)?;
    let led_at = shard.groups.coordination(p.index);
    let records: Vec<OffsetsRecord> = offsets
        .iter()
        .map(|o| {
            OffsetsRecord::Commit(CommitRecord {
                group: group.to_string(),
                committed: o.clone(),
            })
        })
        .collect();
    let producer = Some((producer_id, producer_epoch));
    let appended = offsets_log::append(shard, &p, &records, now_ms(), producer)
        .map_err(|e| as_coordinator_error(e.into(), "commit"))?;
    let Some((base, next)) = appended else {
        return Ok(());
    };
    // Pending from the append on (as Kafka's), so a marker following it in the log always
    // finds it; the marker comes only after the transaction ends.
    shard
        .groups
        .add_txn_offsets(p.index, producer_id, group, offsets);
    shard.group_commit.mark_dirty(&p);
    let stored = Appended {
        partition: p.clone(),
        base_offset: base,
        next_offset: next,
        acks: crate::broker::produce::Acks::All,
    }
    .durable(shard)
    .await;
    stored.map_err(|e| as_coordinator_error(e, "commit"))?;
    if shard.groups.coordination(p.index) != led_at {
        return Err(OpError::new(
            ErrorCode::NotCoordinator,
            "the group's coordinator moved while the commit was stored: find it again",
        ));
    }
    Ok(())
}

/// A transactional offset commit of an epoch older than the one the offsets partition knows
/// for its producer is a zombie's (Kafka's coordinator-origin epoch check).
fn check_producer_epoch(
    p: &Partition,
    producer_id: i64,
    producer_epoch: i16,
) -> Result<(), OpError> {
    match p.producer_epoch(producer_id) {
        Some(current) if producer_epoch < current => Err(OpError::new(
            ErrorCode::ProducerFenced,
            format!(
                "producer {producer_id} epoch {producer_epoch} is fenced (epoch {current} here)"
            ),
        )),
        _ => Ok(()),
    }
}

/// DeleteGroups: a group without members loses its committed offsets and is gone; answered
/// once their tombstones are durable.
pub async fn delete_group(shard: &Rc<Shard>, group: &str) -> Result<(), OpError> {
    coordinated_here(shard, group)?;
    let partitions = shard.groups.deletable(group)?;
    shard.groups.forget_empty_consumer_group(group);
    remove(shard, group, partitions).await
}

/// OffsetDelete: each partition's committed offset is removed unless a member of the group
/// subscribes to its topic (GROUP_SUBSCRIBED_TO_TOPIC); one result per partition, in order.
pub async fn delete_offsets(
    shard: &Rc<Shard>,
    group: &str,
    partitions: Vec<(String, u32)>,
) -> Result<Vec<Result<(), OpError>>, OpError> {
    coordinated_here(shard, group)?;
    let subscribed = shard.groups.subscribed_topics(group)?;
    let mut results: Vec<Result<(), OpError>> = partitions
        .iter()
        .map(|(topic, _)| match subscribed.contains(topic) {
            true => Err(OpError::new(
                ErrorCode::GroupSubscribedToTopic,
                format!("a member of {group:?} subscribes to {topic:?}"),
            )),
            false => Ok(()),
        })
        .collect();
    let gone: Vec<(String, u32)> = partitions
        .into_iter()
        .zip(&results)
        .filter(|(_, r)| r.is_ok())
        .map(|(p, _)| p)
        .collect();
    if let Err(e) = remove(shard, group, gone).await {
        for r in results.iter_mut().filter(|r| r.is_ok()) {
            *r = Err(e.clone());
        }
    }
    Ok(results)
}

/// Forgets `partitions` of `group` and appends their tombstones, answered once durable.
/// Memory goes first, with no await before the append: a commit racing this one is appended
/// after the tombstones, so the log replays to what memory holds.
async fn remove(
    shard: &Rc<Shard>,
    group: &str,
    partitions: Vec<(String, u32)>,
) -> Result<(), OpError> {
    shard.groups.remove_offsets(group, &partitions);
    if partitions.is_empty() {
        return Ok(());
    }
    let (p, _) = offsets_partition_of(shard, group)?;
    p.admit_all()
        .map_err(|e| as_coordinator_error(e.into(), "deletion"))?;
    let records: Vec<OffsetsRecord> = partitions
        .into_iter()
        .map(|(topic, partition)| OffsetsRecord::Removed {
            group: group.to_string(),
            topic,
            partition,
        })
        .collect();
    let appended = offsets_log::append(shard, &p, &records, now_ms(), None)
        .map_err(|e| as_coordinator_error(e.into(), "deletion"))?;
    let Some((base, next)) = appended else {
        return Ok(());
    };
    shard.group_commit.mark_dirty(&p);
    Appended {
        partition: p,
        base_offset: base,
        next_offset: next,
        acks: crate::broker::produce::Acks::All,
    }
    .durable(shard)
    .await
    .map_err(|e| as_coordinator_error(e, "deletion"))
}

/// Why a commit (or deletion) was not stored, as Kafka's coordinator answers it: the
/// replication errors a Java consumer does not retry on a commit become the coordinator
/// errors it does (Kafka's `GroupMetadataManager`): too few replicas in sync or a timeout
/// -> COORDINATOR_NOT_AVAILABLE, no longer the leader or a failed disk -> NOT_COORDINATOR.
pub(crate) fn as_coordinator_error(e: OpError, what: &str) -> OpError {
    let code = match e.code {
        ErrorCode::NotEnoughReplicas
        | ErrorCode::NotEnoughReplicasAfterAppend
        | ErrorCode::RequestTimedOut
        | ErrorCode::UnknownTopicOrPartition => ErrorCode::CoordinatorNotAvailable,
        ErrorCode::NotLeaderOrFollower | ErrorCode::KafkaStorageError => ErrorCode::NotCoordinator,
        other => other,
    };
    OpError::new(code, format!("the {what} was not stored: {}", e.message))
}

/// One committed offset as OffsetFetch answers it: `None` when nothing is committed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Committed {
    pub topic: String,
    pub partition: u32,
    pub offset: Option<Position>,
}

/// Where a group's committed offset of one partition stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Position {
    pub offset: u64,
    /// The committed leader epoch (Kafka's `committed_leader_epoch`), when the commit had one.
    pub leader_epoch: Option<i32>,
    pub metadata: String,
}

/// OffsetFetch: the committed offsets of the asked partitions, in the order asked, or of
/// every committed partition (sorted) when `asked` is `None`.
pub fn committed(
    shard: &Shard,
    group: &str,
    asked: Option<Vec<(String, u32)>>,
) -> Result<Vec<Committed>, OpError> {
    coordinated_here(shard, group)?;
    Ok(match asked {
        Some(asked) => asked
            .into_iter()
            .map(|(topic, partition)| Committed {
                offset: shard.groups.committed(group, &topic, partition),
                topic,
                partition,
            })
            .collect(),
        None => shard
            .groups
            .all_committed(group)
            .into_iter()
            .map(|o| Committed {
                topic: o.topic,
                partition: o.partition,
                offset: Some(Position {
                    offset: o.offset,
                    leader_epoch: o.leader_epoch,
                    metadata: o.metadata,
                }),
            })
            .collect(),
    })
}

/// A group this shard coordinates and whose id a commit record can hold.
fn committable_group(shard: &Shard, group: &str) -> Result<(), OpError> {
    coordinated_here(shard, group)?;
    if group.contains('\0') {
        return Err(OpError::new(
            ErrorCode::InvalidGroupId,
            "a group id cannot contain NUL",
        ));
    }
    Ok(())
}

/// OffsetFetch v9+ names the asking member: in a consumer group it must be a member at its
/// current epoch (UNKNOWN_MEMBER_ID, STALE_MEMBER_EPOCH), as Kafka checks.
pub fn check_fetch(
    shard: &Shard,
    group: &str,
    member_id: Option<&str>,
    member_epoch: i32,
) -> Result<(), OpError> {
    coordinated_here(shard, group)?;
    Ok(shard.groups.check_fetch(group, member_id, member_epoch)?)
}
