//! AlterPartitionReassignments, ListPartitionReassignments (KIP-455) and ElectLeaders
//! (KIP-460): what `kafka-reassign-partitions.sh`, `kafka-leader-election.sh` and the admin
//! clients send, through the same operations as `rill topic reassign` and `rill cluster
//! elect-preferred` ([`crate::broker::reassignments`]).

use std::rc::Rc;

use kafka_protocol::messages::alter_partition_reassignments_response::{
    ReassignablePartitionResponse, ReassignableTopicResponse,
};
use kafka_protocol::messages::elect_leaders_response::{PartitionResult, ReplicaElectionResult};
use kafka_protocol::messages::list_partition_reassignments_response::{
    OngoingPartitionReassignment, OngoingTopicReassignment,
};
use kafka_protocol::messages::{
    AlterPartitionReassignmentsRequest, AlterPartitionReassignmentsResponse, BrokerId,
    ElectLeadersRequest, ElectLeadersResponse, ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsResponse, TopicName,
};

use super::s;
use crate::broker::reassignments::{elect_preferred, reassign};
use crate::broker::{request_timeout, OpError, Shard};
use crate::controller::cluster::NO_LEADER;
use crate::controller::metadata::PartitionInfo;
use crate::protocol::ErrorCode;

/// ElectLeaders' election types.
const PREFERRED: i8 = 0;
const UNCLEAN: i8 = 1;

fn timeout(shard: &Shard, ms: i32) -> std::time::Duration {
    request_timeout(shard, u32::try_from(ms).unwrap_or(0))
}

/// The partition as this broker's metadata has it.
fn partition_info(shard: &Shard, topic: &str, partition: i32) -> Result<PartitionInfo, OpError> {
    u32::try_from(partition)
        .ok()
        .and_then(|i| {
            shard
                .controller
                .metadata()
                .topic(topic)
                .and_then(|t| t.partitions.get(i as usize).cloned())
        })
        .ok_or_else(|| {
            OpError::new(
                ErrorCode::UnknownTopicOrPartition,
                format!("{topic}-{partition}: no such partition"),
            )
        })
}

pub async fn alter_partition_reassignments(
    shard: &Rc<Shard>,
    version: i16,
    req: &AlterPartitionReassignmentsRequest,
) -> AlterPartitionReassignmentsResponse {
    let mut r = AlterPartitionReassignmentsResponse::default();
    r.allow_replication_factor_change = req.allow_replication_factor_change;
    let limit = timeout(shard, req.timeout_ms);
    for t in &req.topics {
        let topic = t.name.0.as_str();
        let mut tr = ReassignableTopicResponse::default();
        tr.name = t.name.clone();
        for p in &t.partitions {
            let mut pr = ReassignablePartitionResponse::default();
            pr.partition_index = p.partition_index;
            let replicas = p.replicas.as_ref().map(|rs| {
                rs.iter()
                    .map(|b| u32::try_from(b.0).ok().filter(|&b| b != NO_LEADER))
                    .collect::<Option<Vec<u32>>>()
            });
            let outcome = match (partition_info(shard, topic, p.partition_index), replicas) {
                (Err(e), _) => Err(e),
                (Ok(_), Some(None)) => Err(OpError::new(
                    ErrorCode::InvalidReplicaAssignment,
                    format!("{topic}-{}: broker ids must be positive", p.partition_index),
                )),
                // KIP-860 (v1): a move that changes the replication factor only when allowed.
                (Ok(info), Some(Some(target)))
                    if version >= 1
                        && !req.allow_replication_factor_change
                        && target.len() != current_replicas(&info).len() =>
                {
                    Err(OpError::new(
                        ErrorCode::InvalidReplicationFactor,
                        format!(
                            "{topic}-{}: {} replicas where the replication factor is {} \
                             (allow_replication_factor_change is false)",
                            p.partition_index,
                            target.len(),
                            current_replicas(&info).len()
                        ),
                    ))
                }
                (Ok(_), target) => {
                    reassign(
                        shard,
                        topic,
                        p.partition_index as u32,
                        target.flatten(),
                        limit,
                    )
                    .await
                }
            };
            if let Err(e) = outcome {
                pr.error_code = e.code.code();
                pr.error_message = Some(s(e.message));
            }
            tr.partitions.push(pr);
        }
        r.responses.push(tr);
    }
    r
}

/// The replicas a partition has outside any move (the original ones while one runs).
fn current_replicas(p: &PartitionInfo) -> Vec<u32> {
    p.reassignment
        .as_ref()
        .map_or_else(|| p.replicas.clone(), |m| m.original.clone())
}

fn broker_ids(ids: &[u32]) -> Vec<BrokerId> {
    ids.iter().map(|&b| BrokerId(b as i32)).collect()
}

pub fn list_partition_reassignments(
    shard: &Shard,
    req: &ListPartitionReassignmentsRequest,
) -> ListPartitionReassignmentsResponse {
    let mut r = ListPartitionReassignmentsResponse::default();
    let md = shard.controller.metadata();
    let wanted: Option<Vec<(String, Vec<i32>)>> = req.topics.as_ref().map(|ts| {
        ts.iter()
            .map(|t| (t.name.0.to_string(), t.partition_indexes.clone()))
            .collect()
    });
    for t in md.topics.values() {
        let asked = match &wanted {
            None => None,
            Some(w) => match w.iter().find(|(n, _)| *n == t.name) {
                Some((_, ps)) => Some(ps),
                None => continue,
            },
        };
        let mut ot = OngoingTopicReassignment::default();
        ot.name = TopicName(s(t.name.clone()));
        for p in &t.partitions {
            let Some(m) = &p.reassignment else { continue };
            if asked.is_some_and(|ps| !ps.contains(&(p.partition as i32))) {
                continue;
            }
            let mut op = OngoingPartitionReassignment::default();
            op.partition_index = p.partition as i32;
            op.replicas = broker_ids(&p.replicas);
            op.adding_replicas = broker_ids(&m.adding());
            op.removing_replicas = broker_ids(&m.removing());
            ot.partitions.push(op);
        }
        if !ot.partitions.is_empty() {
            r.topics.push(ot);
        }
    }
    r
}

/// What an election of `kind` would do for a partition before any is proposed: `None` when
/// one is needed, else the answer.
fn election_not_needed(kind: i8, p: &PartitionInfo) -> Option<OpError> {
    let preferred = p.replicas.first().copied().unwrap_or(NO_LEADER);
    match kind {
        PREFERRED if p.leader == preferred && p.leader != NO_LEADER => Some(OpError::new(
            ErrorCode::ElectionNotNeeded,
            format!("broker {preferred}, the preferred replica, leads already"),
        )),
        PREFERRED => None,
        UNCLEAN if p.leader != NO_LEADER => Some(OpError::new(
            ErrorCode::ElectionNotNeeded,
            format!("broker {} leads", p.leader),
        )),
        // The controller elects outside the ISR by itself where the topic allows it
        // (`unclean.leader.election.enable`); it is never forced through this request.
        UNCLEAN => Some(OpError::new(
            ErrorCode::EligibleLeadersNotAvailable,
            "no replica of the ISR is live; rill elects outside the ISR only where \
             unclean.leader.election.enable is set, by itself",
        )),
        other => Some(OpError::new(
            ErrorCode::InvalidRequest,
            format!("unknown election type {other}"),
        )),
    }
}

pub async fn elect_leaders(
    shard: &Rc<Shard>,
    version: i16,
    req: &ElectLeadersRequest,
) -> ElectLeadersResponse {
    let mut r = ElectLeadersResponse::default();
    let kind = if version >= 1 {
        req.election_type
    } else {
        PREFERRED
    };
    let limit = timeout(shard, req.timeout_ms);
    // Every partition when none is named (Kafka lists only those that were elected then).
    let everything = req.topic_partitions.is_none();
    let asked: Vec<(String, Vec<i32>)> = match &req.topic_partitions {
        Some(ts) => ts
            .iter()
            .map(|t| (t.topic.0.to_string(), t.partitions.clone()))
            .collect(),
        None => shard
            .controller
            .metadata()
            .topics
            .values()
            .map(|t| (t.name.clone(), (0..t.partitions.len() as i32).collect()))
            .collect(),
    };
    // First what needs no election; then one proposal per partition that does.
    let mut results: Vec<(String, i32, Result<(), OpError>)> = Vec::new();
    for (topic, partitions) in &asked {
        for &i in partitions {
            let outcome = match partition_info(shard, topic, i) {
                Err(e) => Err(e),
                Ok(p) => match election_not_needed(kind, &p) {
                    Some(e) => Err(e),
                    None => {
                        let elected =
                            elect_preferred(shard, Some(topic.clone()), Some(i as u32), limit)
                                .await;
                        match (elected, partition_info(shard, topic, i)) {
                            (Err(e), _) | (_, Err(e)) => Err(e),
                            (Ok(_), Ok(after)) if after.replicas.first() == Some(&after.leader) => {
                                Ok(())
                            }
                            (Ok(_), Ok(after)) => Err(OpError::new(
                                ErrorCode::PreferredLeaderNotAvailable,
                                format!(
                                    "{topic}-{i}: broker {:?}, the preferred replica, is not \
                                     live or not in the ISR {:?}",
                                    after.replicas.first(),
                                    after.isr
                                ),
                            )),
                        }
                    }
                },
            };
            let skip =
                everything && matches!(&outcome, Err(e) if e.code == ErrorCode::ElectionNotNeeded);
            if !skip {
                results.push((topic.clone(), i, outcome));
            }
        }
    }
    for (topic, i, outcome) in results {
        let at = match r
            .replica_election_results
            .iter()
            .position(|t| t.topic.0.as_str() == topic)
        {
            Some(at) => at,
            None => {
                let mut t = ReplicaElectionResult::default();
                t.topic = TopicName(s(topic));
                r.replica_election_results.push(t);
                r.replica_election_results.len() - 1
            }
        };
        let mut pr = PartitionResult::default();
        pr.partition_id = i;
        if let Err(e) = outcome {
            pr.error_code = e.code.code();
            pr.error_message = Some(s(e.message));
        }
        r.replica_election_results[at].partition_result.push(pr);
    }
    r
}
