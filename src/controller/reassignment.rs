//! Partition reassignment (Kafka's KIP-455) and preferred-leader election: replicated,
//! deterministic, applied by every voter like the rest of `ClusterMetadata`.
//!
//! A reassignment never lowers redundancy:
//! 1. **Start** ([`Command::ReassignPartition`] with replicas): `replicas` becomes the union,
//!    target first then the replicas being removed; the ISR is untouched. The new replicas
//!    open the partition empty, follow the leader and join the ISR through the leader's
//!    ordinary AlterPartition once caught up.
//! 2. **Complete** (in the same apply as the AlterPartition that puts the last target replica
//!    in the ISR, or at once when they all are already): `replicas` becomes the target, the ISR
//!    drops the removed replicas (it then holds every target replica, so it is as large as the
//!    new replication factor), and a leader being removed hands over to the first target
//!    replica that is live and in the ISR, with a bumped leader epoch (which deposes it).
//! 3. **Cancel** (replicas `None`): the original replicas come back; the added ones leave the
//!    ISR; a leader among the added ones hands back to an original replica in the ISR.
//!
//! Every step bumps the partition epoch, so a leader's in-flight ISR proposal made against the
//! old replica set is refused and it re-reads the partition.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::cluster::{bump_epochs, set_leader, MIN_INSYNC_REPLICAS, NO_LEADER};
use super::metadata::{Applied, ClusterMetadata, Command, MetadataError, PartitionInfo};
use crate::protocol::error_code::ErrorCode;

/// A reassignment under way (in [`PartitionInfo::reassignment`]).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reassignment {
    /// The replicas before it started (what a cancel restores).
    pub original: Vec<u32>,
    /// The replicas once it completes.
    pub target: Vec<u32>,
}

impl Reassignment {
    /// Target replicas that were not replicas before.
    pub fn adding(&self) -> Vec<u32> {
        let o = &self.original;
        self.target
            .iter()
            .copied()
            .filter(|b| !o.contains(b))
            .collect()
    }

    /// Original replicas that are not in the target.
    pub fn removing(&self) -> Vec<u32> {
        let t = &self.target;
        self.original
            .iter()
            .copied()
            .filter(|b| !t.contains(b))
            .collect()
    }
}

impl ClusterMetadata {
    pub(super) fn validate_reassignment(&self, cmd: &Command) -> Result<(), MetadataError> {
        let bad = |code, msg: String| Err(MetadataError::new(code, msg));
        match cmd {
            Command::ReassignPartition {
                topic,
                partition,
                replicas,
                partition_epoch,
            } => {
                let p = self.partition(topic, *partition)?;
                if *partition_epoch != p.partition_epoch {
                    return bad(
                        ErrorCode::InvalidUpdateVersion,
                        format!(
                            "{topic}-{partition}: partition epoch {partition_epoch}, current {} \
                             (it changed meanwhile: try again)",
                            p.partition_epoch
                        ),
                    );
                }
                match replicas {
                    Some(target) => self.validate_target(topic, p, target),
                    None => self.validate_cancel(topic, p),
                }
            }
            Command::ElectPreferred { topic, partition } => match (topic, partition) {
                (Some(t), Some(p)) => self.partition(t, *p).map(|_| ()),
                (Some(t), None) if self.topics.contains_key(t) => Ok(()),
                (Some(t), None) => bad(
                    ErrorCode::UnknownTopicOrPartition,
                    format!("unknown topic {t:?}"),
                ),
                (None, Some(_)) => bad(
                    ErrorCode::InvalidRequest,
                    "a partition needs its topic".into(),
                ),
                (None, None) => Ok(()),
            },
            other => bad(
                ErrorCode::InvalidRequest,
                format!("not a reassignment command: {other:?}"),
            ),
        }
    }

    fn validate_target(
        &self,
        topic: &str,
        p: &PartitionInfo,
        target: &[u32],
    ) -> Result<(), MetadataError> {
        let name = format!("{topic}-{}", p.partition);
        let bad = |code, msg: String| Err(MetadataError::new(code, format!("{name}: {msg}")));
        if let Some(r) = &p.reassignment {
            return bad(
                ErrorCode::ReassignmentInProgress,
                format!(
                    "a reassignment to {:?} is already running (cancel it first)",
                    r.target
                ),
            );
        }
        if target.is_empty() {
            return bad(
                ErrorCode::InvalidReplicaAssignment,
                "no replicas given".into(),
            );
        }
        let mut seen = std::collections::BTreeSet::new();
        if let Some(d) = target.iter().find(|b| !seen.insert(**b)) {
            return bad(
                ErrorCode::InvalidReplicaAssignment,
                format!("broker {d} is listed twice"),
            );
        }
        if let Some(b) = target.iter().find(|b| !self.brokers.contains_key(b)) {
            return bad(
                ErrorCode::InvalidReplicaAssignment,
                format!("broker {b} is not registered"),
            );
        }
        // A broker already holding the partition may stay even while down; a new one must be
        // live to catch up.
        if let Some(b) = target
            .iter()
            .find(|b| !p.replicas.contains(b) && !self.is_live(**b))
        {
            return bad(
                ErrorCode::InvalidReplicaAssignment,
                format!("broker {b} is {}", self.broker_state_name(*b)),
            );
        }
        let min_isr = self
            .topics
            .get(topic)
            .and_then(|t| t.configs.get(MIN_INSYNC_REPLICAS))
            .and_then(|v| v.trim().parse::<usize>().ok())
            .unwrap_or(1);
        if target.len() < min_isr {
            return bad(
                ErrorCode::InvalidReplicaAssignment,
                format!(
                    "{} replicas, fewer than the topic's {MIN_INSYNC_REPLICAS} {min_isr}",
                    target.len()
                ),
            );
        }
        Ok(())
    }

    fn validate_cancel(&self, topic: &str, p: &PartitionInfo) -> Result<(), MetadataError> {
        let name = format!("{topic}-{}", p.partition);
        let Some(r) = &p.reassignment else {
            return Err(MetadataError::new(
                ErrorCode::NoReassignmentInProgress,
                format!("{name}: no reassignment is running"),
            ));
        };
        if !p.isr.iter().any(|b| r.original.contains(b)) {
            return Err(MetadataError::new(
                ErrorCode::InvalidReplicaAssignment,
                format!(
                    "{name}: no original replica {:?} is in the ISR {:?}: cancelling would \
                     leave it without an in-sync replica",
                    r.original, p.isr
                ),
            ));
        }
        Ok(())
    }

    pub(super) fn apply_reassignment(&mut self, cmd: &Command) -> Result<Applied, MetadataError> {
        let vanished = || MetadataError::new(ErrorCode::UnknownTopicOrPartition, "vanished");
        match cmd {
            Command::ReassignPartition {
                topic,
                partition,
                replicas,
                ..
            } => {
                let shards = self.shard_counts();
                let live = self.live_brokers();
                let t = self.topics.get_mut(topic).ok_or_else(vanished)?;
                let topic_id = t.id;
                let p = t
                    .partitions
                    .get_mut(*partition as usize)
                    .ok_or_else(vanished)?;
                let before = (p.leader, p.isr.clone());
                match replicas {
                    Some(target) => {
                        // New replicas take the leader's shard index, and so does any later
                        // leader (a plan made before `home_shard` has none yet).
                        if p.home_shard.is_none() && p.leader != NO_LEADER {
                            p.home_shard = Some(p.shard);
                        }
                        let original = p.replicas.clone();
                        let mut union = target.clone();
                        union.extend(original.iter().filter(|b| !target.contains(b)));
                        p.replicas = union;
                        p.reassignment = Some(Reassignment {
                            original,
                            target: target.clone(),
                        });
                    }
                    None => {
                        let r = p.reassignment.take().ok_or_else(vanished)?;
                        p.isr.retain(|b| r.original.contains(b));
                        p.replicas = r.original;
                        if !p.replicas.contains(&p.leader) {
                            let next = p
                                .replicas
                                .iter()
                                .copied()
                                .find(|b| p.isr.contains(b) && live.contains(b));
                            match next {
                                Some(b) => set_leader(p, b, topic_id, &shards),
                                None => p.leader = NO_LEADER,
                            }
                        }
                    }
                }
                // The replica set changed even when the leader and ISR did not.
                if bump_epochs(p, before) == 0 {
                    p.partition_epoch += 1;
                }
                self.complete_reassignment(topic, *partition);
                Ok(Applied::PartitionAltered(
                    self.partition(topic, *partition)?.clone(),
                ))
            }
            Command::ElectPreferred { topic, partition } => {
                let shards = self.shard_counts();
                let live = self.live_brokers();
                let mut changed = 0;
                for t in self.topics.values_mut() {
                    if topic.as_ref().is_some_and(|name| *name != t.name) {
                        continue;
                    }
                    let topic_id = t.id;
                    for p in t.partitions.iter_mut() {
                        if partition.is_some_and(|i| i != p.partition) {
                            continue;
                        }
                        let Some(&preferred) = p.replicas.first() else {
                            continue;
                        };
                        if preferred == p.leader
                            || !p.isr.contains(&preferred)
                            || !live.contains(&preferred)
                        {
                            continue;
                        }
                        let before = (p.leader, p.isr.clone());
                        set_leader(p, preferred, topic_id, &shards);
                        changed += bump_epochs(p, before);
                    }
                }
                Ok(Applied::LeadersElected { changed })
            }
            other => Err(MetadataError::new(
                ErrorCode::InvalidRequest,
                format!("not a reassignment command: {other:?}"),
            )),
        }
    }

    fn shard_counts(&self) -> BTreeMap<u32, u32> {
        self.brokers.iter().map(|(&b, i)| (b, i.shards)).collect()
    }

    /// Completes the partition's reassignment if every target replica is in the ISR and one
    /// of them can lead. Returns whether it did.
    pub(super) fn complete_reassignment(&mut self, topic: &str, partition: u32) -> bool {
        let shards = self.shard_counts();
        let live = self.live_brokers();
        let Some(t) = self.topics.get_mut(topic) else {
            return false;
        };
        let topic_id = t.id;
        let Some(p) = t.partitions.get_mut(partition as usize) else {
            return false;
        };
        let Some(r) = &p.reassignment else {
            return false;
        };
        if !r.target.iter().all(|b| p.isr.contains(b)) {
            return false;
        }
        let leader = if r.target.contains(&p.leader) && live.contains(&p.leader) {
            p.leader
        } else {
            match r.target.iter().copied().find(|b| live.contains(b)) {
                Some(b) => b,
                None => return false,
            }
        };
        let target = r.target.clone();
        let before = (p.leader, p.isr.clone());
        p.isr.retain(|b| target.contains(b));
        p.replicas = target;
        p.reassignment = None;
        if leader != p.leader {
            set_leader(p, leader, topic_id, &shards);
        }
        if bump_epochs(p, before) == 0 {
            p.partition_epoch += 1;
        }
        assert_eq!(
            p.isr.len(),
            p.replicas.len(),
            "a completed reassignment leaves every new replica in the ISR"
        );
        true
    }

    /// Completes every reassignment that can be (a broker came back and may lead).
    pub(super) fn complete_reassignments(&mut self) -> usize {
        let pending: Vec<(String, u32)> = self
            .topics
            .values()
            .flat_map(|t| {
                t.partitions
                    .iter()
                    .filter(|p| p.reassignment.is_some())
                    .map(move |p| (t.name.clone(), p.partition))
            })
            .collect();
        pending
            .into_iter()
            .filter(|(t, p)| self.complete_reassignment(t, *p))
            .count()
    }
}

/// One partition of a drain plan: move `topic`-`partition` to `replicas`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannedMove {
    pub topic: String,
    pub partition: u32,
    pub partition_epoch: u32,
    pub replicas: Vec<u32>,
}

impl PlannedMove {
    pub fn command(&self) -> Command {
        Command::ReassignPartition {
            topic: self.topic.clone(),
            partition: self.partition,
            replicas: Some(self.replicas.clone()),
            partition_epoch: self.partition_epoch,
        }
    }
}

impl ClusterMetadata {
    /// The reassignments that empty broker `node` of replicas: each replica of `node` is
    /// replaced in place (so a partition it led prefers its replacement, and leaders stay
    /// spread) by the live broker holding the fewest replicas that is not a replica yet,
    /// preferring one on a rack the partition's other replicas are not on. A partition
    /// already being reassigned away from `node` is left to finish.
    pub fn drain_plan(&self, node: u32) -> Result<Vec<PlannedMove>, MetadataError> {
        if !self.brokers.contains_key(&node) {
            return Err(MetadataError::new(
                ErrorCode::InvalidReplicaAssignment,
                format!("broker {node} is not registered"),
            ));
        }
        let candidates: Vec<u32> = self
            .live_brokers()
            .into_iter()
            .filter(|&b| b != node)
            .collect();
        let mut load: BTreeMap<u32, usize> = candidates.iter().map(|&b| (b, 0)).collect();
        for p in self.topics.values().flat_map(|t| &t.partitions) {
            for b in &p.replicas {
                if let Some(n) = load.get_mut(b) {
                    *n += 1;
                }
            }
        }
        let rack = |b: u32| self.members.get(&b).and_then(|m| m.rack.clone());
        let mut plan = Vec::new();
        for t in self.topics.values() {
            for p in &t.partitions {
                if !p.replicas.contains(&node) {
                    continue;
                }
                if let Some(r) = &p.reassignment {
                    if r.target.contains(&node) {
                        return Err(MetadataError::new(
                            ErrorCode::ReassignmentInProgress,
                            format!(
                                "{}-{}: a reassignment to {:?} (keeping broker {node}) is \
                                 running; cancel it first",
                                t.name, p.partition, r.target
                            ),
                        ));
                    }
                    continue;
                }
                let others: Vec<u32> = p.replicas.iter().copied().filter(|&b| b != node).collect();
                let used_racks: Vec<String> = others.iter().filter_map(|&b| rack(b)).collect();
                let pick = [true, false].into_iter().find_map(|rack_aware| {
                    candidates
                        .iter()
                        .copied()
                        .filter(|b| !others.contains(b))
                        .filter(|b| {
                            !rack_aware || rack(*b).is_none_or(|r| !used_racks.contains(&r))
                        })
                        .min_by_key(|b| load[b])
                });
                let Some(to) = pick else {
                    return Err(MetadataError::new(
                        ErrorCode::InvalidReplicaAssignment,
                        format!(
                            "{}-{}: no other live broker can take broker {node}'s replica \
                             (replicas {:?}, live brokers {:?})",
                            t.name,
                            p.partition,
                            p.replicas,
                            self.live_brokers()
                        ),
                    ));
                };
                *load.entry(to).or_default() += 1;
                plan.push(PlannedMove {
                    topic: t.name.clone(),
                    partition: p.partition,
                    partition_epoch: p.partition_epoch,
                    replicas: p
                        .replicas
                        .iter()
                        .map(|&b| if b == node { to } else { b })
                        .collect(),
                });
            }
        }
        Ok(plan)
    }
}
