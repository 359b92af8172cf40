//! The cluster-metadata state machine replicated by the controller quorum.
//!
//! Everything here is deterministic: [`ClusterMetadata::apply`] is a pure function of the current
//! state, the raft index and the command, so every voter (and every replay after a restart)
//! reaches the same state. Commands are validated twice: before proposing (to answer early) and
//! again when applied (two pipelined proposals may conflict, e.g. the same topic created twice).
//!
//! Conventions:
//! - `applied_index` is the raft index of the last entry that changed the metadata. Raft's own
//!   empty leader entries and rejected commands do not change it, so reopening a controller (which
//!   appends a new empty leader entry) yields the same metadata, `applied_index` included.
//! - Topic ids start at 1 and are never reused.
//! - Placement (`cluster.rs`): replicas go on distinct live brokers (distinct racks where set),
//!   round-robin over the brokers in rack-alternating order (sorted ids without racks) starting
//!   at `topic_id % brokers`; partition `p` starts one broker further than partition `p - 1`.
//!   The leader is the first replica; the `k`-th partition of the topic it leads goes on its
//!   shard `(topic_id + k) % leader.shards` (one broker: `(topic_id + p) % shards`).
//! - A broker re-registering (a restart) with a different shard count keeps each partition it
//!   leads on the same shard when that shard still exists; partitions whose shard is now out of
//!   range are re-placed with the same formula, `(topic_id + p) % new_shards`, and their
//!   `leader_epoch` is bumped so followers and clients notice the move.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::{Deserialize, Serialize};

use super::cluster::{split_cluster_configs, BrokerMember, BrokerRegistration};
use crate::auth::acl::{AclBinding, AclFilter};
use crate::auth::scram::{Credential, Mechanism};
use crate::protocol::error_code::ErrorCode;
use crate::quota::QuotaEntity;
use crate::topic_config::TopicConfigError;

/// Largest topic name Kafka accepts.
pub const MAX_TOPIC_NAME_LEN: usize = 249;

/// The replicated cluster metadata.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ClusterMetadata {
    /// Set by the first applied entry (an [`Command::InitCluster`] the first leader proposes).
    pub cluster_id: String,
    /// Raft index of the last entry that changed this metadata (0: none yet).
    pub applied_index: u64,
    /// Node id of the raft leader (0: unknown). Not replicated: each node fills in what it sees.
    pub controller_id: u64,
    pub brokers: BTreeMap<u32, BrokerInfo>,
    pub topics: BTreeMap<String, TopicInfo>,
    pub next_topic_id: u64,
    /// Membership of brokers registered with [`Command::RegisterMember`] (see `cluster.rs`);
    /// empty for a single-node broker, and then left out of the JSON so its snapshots read as
    /// before.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub members: BTreeMap<u32, BrokerMember>,
    /// Users' SCRAM credentials (salted, iterated; never a password), per mechanism
    /// (`users.rs`); left out of the JSON while empty.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub users: BTreeMap<String, BTreeMap<Mechanism, Credential>>,
    /// The first producer id no broker was given yet ([`Command::AllocateProducerIds`]); left
    /// out of the JSON while 0 so older snapshots read as before.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub next_producer_id: u64,
    /// ACLs (`acls.rs`); left out of the JSON while empty.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub acls: BTreeSet<AclBinding>,
    /// Client quotas (`crate::quota`): entity -> key -> value; left out of the JSON while
    /// empty. A list of pairs in the JSON (its keys are not strings).
    #[serde(
        default,
        skip_serializing_if = "BTreeMap::is_empty",
        with = "quota_pairs"
    )]
    pub quotas: BTreeMap<QuotaEntity, BTreeMap<String, f64>>,
}

/// Serde of a map with struct keys as a list of (key, value) pairs.
mod quota_pairs {
    use std::collections::BTreeMap;

    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    use crate::quota::QuotaEntity;

    type Quotas = BTreeMap<QuotaEntity, BTreeMap<String, f64>>;

    pub fn serialize<S: Serializer>(q: &Quotas, s: S) -> Result<S::Ok, S::Error> {
        q.iter().collect::<Vec<_>>().serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Quotas, D::Error> {
        Ok(Vec::<(QuotaEntity, BTreeMap<String, f64>)>::deserialize(d)?
            .into_iter()
            .collect())
    }
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// The most producer ids one [`Command::AllocateProducerIds`] may reserve.
pub const MAX_PRODUCER_ID_BLOCK: u32 = 1 << 20;

/// A registered broker.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BrokerInfo {
    pub node_id: u32,
    pub host: String,
    /// Native protocol port of shard 0; shard `i` listens on `port + i`.
    pub port: u16,
    pub shards: u32,
    pub kafka_port: Option<u16>,
}

/// A topic and its partition plan.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicInfo {
    pub name: String,
    pub id: u64,
    pub partitions: Vec<PartitionInfo>,
    pub configs: BTreeMap<String, String>,
}

/// One partition's replica plan.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionInfo {
    pub partition: u32,
    /// Broker node id of the leader.
    pub leader: u32,
    /// Shard of the leader broker that owns the partition.
    pub shard: u32,
    pub replicas: Vec<u32>,
    pub isr: Vec<u32>,
    pub leader_epoch: u32,
    /// Bumped by every leader or ISR change; an AlterPartition names the one it read.
    #[serde(default)]
    pub partition_epoch: u32,
    /// Writes stopped; readers drain it; its files go once its data is past retention.
    #[serde(default)]
    pub decommissioned: bool,
    /// A replica move under way (`reassignment.rs`): `replicas` is then the union of the
    /// original and target replicas, target first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reassignment: Option<super::reassignment::Reassignment>,
    /// The shard index the partition takes on every broker that holds it (modulo that
    /// broker's shard count), chosen at placement to spread leaders and replicas over shards;
    /// a leader change never moves it to another shard. Plans made before it existed: `None`,
    /// and [`shard_for`] decides.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub home_shard: Option<u32>,
}

impl PartitionInfo {
    /// The shard of a broker with `shards` shards that holds this partition.
    pub fn shard_on(&self, topic_id: u64, shards: u32) -> u32 {
        let shards = shards.max(1);
        match self.home_shard {
            Some(home) => home % shards,
            None => shard_for(topic_id, self.partition, shards),
        }
    }
}

/// A replicated command (serde_json in the raft log; never renumber or rename variants).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Command {
    RegisterBroker(BrokerInfo),
    CreateTopic {
        name: String,
        partitions: u32,
        replication_factor: u16,
        configs: BTreeMap<String, String>,
    },
    DeleteTopic {
        name: String,
    },
    /// Proposed by the controller itself when it first becomes leader of an empty cluster; sets
    /// `cluster_id` once (later ones are rejected).
    InitCluster {
        cluster_id: String,
    },
    /// Sets (overrides) topic configs; the others keep their values.
    AlterTopicConfig {
        name: String,
        configs: BTreeMap<String, String>,
    },
    /// Grows a topic to `count` partitions; existing ones keep their data and placement.
    AddPartitions {
        name: String,
        count: u32,
    },
    /// Stops writes to a partition for good (it keeps its index; reads continue).
    DecommissionPartition {
        name: String,
        partition: u32,
    },
    /// Sets `set` and removes `unset` (back to the broker defaults); with `replace`, every
    /// setting not in `set` is removed first (Kafka's AlterConfigs replaces them all).
    ChangeTopicConfig {
        name: String,
        set: BTreeMap<String, String>,
        unset: BTreeSet<String>,
        replace: bool,
    },
    /// A broker of a cluster joins (or rejoins after a restart): it gets a membership record
    /// with broker epoch = this entry's raft index, and leads the offline partitions it can.
    RegisterMember(BrokerRegistration),
    /// Proposed by the active controller when a broker's session ran out: it leads nothing any
    /// more, and leaves every ISR where it is not the last member.
    FenceBroker {
        node_id: u32,
        broker_epoch: u64,
    },
    /// Proposed by the active controller when a fenced broker heartbeats again.
    UnfenceBroker {
        node_id: u32,
        broker_epoch: u64,
    },
    /// A broker asked to stop: leadership moves away first (as for a fence).
    ControlledShutdown {
        node_id: u32,
        broker_epoch: u64,
    },
    /// A partition leader changes the ISR; accepted only for the current leader and epochs.
    AlterPartition {
        topic: String,
        partition: u32,
        leader: u32,
        leader_epoch: u32,
        partition_epoch: u32,
        isr: Vec<u32>,
    },
    /// Starts moving a partition to `replicas` (KIP-455: new replicas join first, the old
    /// ones leave once every new one is in the ISR); `None` cancels the running one (the
    /// original replicas come back). Accepted only at `partition_epoch`.
    ReassignPartition {
        topic: String,
        partition: u32,
        replicas: Option<Vec<u32>>,
        partition_epoch: u32,
    },
    /// Moves leadership to the preferred (first) replica where it is live and in the ISR:
    /// every partition, a topic's (`partition: None`) or one.
    ElectPreferred {
        topic: Option<String>,
        partition: Option<u32>,
    },
    /// Sets a user's credential for one mechanism (Kafka's AlterUserScramCredentials
    /// upsertion; `rill user create`).
    UpsertScramCredential {
        user: String,
        mechanism: Mechanism,
        credential: Credential,
    },
    /// Removes a user's credential for one mechanism (the user goes with its last one).
    DeleteScramCredential {
        user: String,
        mechanism: Mechanism,
    },
    /// Reserves the next `count` producer ids for broker `node_id` (Kafka's
    /// AllocateProducerIds, KIP-730): ids are unique across brokers and restarts because the
    /// counter is replicated metadata.
    AllocateProducerIds {
        node_id: u32,
        count: u32,
    },
    /// Adds ACL bindings (Kafka's CreateAcls; one already there stays once).
    CreateAcls {
        acls: Vec<AclBinding>,
    },
    /// Removes every ACL binding any filter matches (Kafka's DeleteAcls).
    DeleteAcls {
        filters: Vec<AclFilter>,
    },
    /// Sets and removes quota keys of one entity (Kafka's AlterClientQuotas).
    AlterClientQuota {
        entity: QuotaEntity,
        set: BTreeMap<String, f64>,
        remove: Vec<String>,
    },
}

/// What an applied command did (serde: a leader answers a forwarded proposal with it).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Applied {
    BrokerRegistered,
    TopicCreated(TopicInfo),
    TopicDeleted(TopicInfo),
    ClusterInitialized,
    TopicConfigAltered(TopicInfo),
    PartitionsAdded(TopicInfo),
    PartitionDecommissioned(TopicInfo),
    MemberRegistered {
        node_id: u32,
        broker_epoch: u64,
        /// Offline partitions it now leads.
        elected: usize,
    },
    BrokerStateChanged {
        node_id: u32,
        partitions_changed: usize,
    },
    PartitionAltered(PartitionInfo),
    /// Preferred leaders elected: how many partitions changed leader.
    LeadersElected {
        changed: usize,
    },
    /// A user's credential set or removed.
    UserChanged,
    /// The active controller's answer to a broker's heartbeat (no raft entry).
    Heartbeat(super::cluster::HeartbeatReply),
    /// Producer ids `first..first + count` are the asking broker's.
    ProducerIdsAllocated {
        first: u64,
        count: u32,
    },
    /// A client quota set or removed.
    QuotaChanged,
    /// ACLs created, or deleted: per filter of a DeleteAcls, the bindings it matched.
    AclsChanged {
        deleted: Vec<Vec<AclBinding>>,
    },
}

/// A command refused by validation.
#[derive(thiserror::Error, Debug, Clone, PartialEq)]
#[error("{message}")]
pub struct MetadataError {
    pub code: ErrorCode,
    pub message: String,
}

impl MetadataError {
    pub fn new(code: ErrorCode, message: impl fmt::Display) -> Self {
        MetadataError {
            code,
            message: message.to_string(),
        }
    }
}

impl From<TopicConfigError> for MetadataError {
    fn from(e: TopicConfigError) -> Self {
        MetadataError::new(ErrorCode::InvalidConfig, e)
    }
}

/// Limits applied by validation. Every voter must use the same limits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MetadataLimits {
    pub max_partitions_per_topic: u32,
    /// Partition replicas the cluster may hold per live shard (`--max-partitions-per-shard`,
    /// Redpanda's `topic_partitions_per_shard`): every replica holds files, a preallocation
    /// step and memory on its shard, so topic creation is refused past it instead of filling
    /// the disk.
    pub max_partitions_per_shard: u32,
}

impl Default for MetadataLimits {
    fn default() -> Self {
        MetadataLimits {
            max_partitions_per_topic: 10_000,
            max_partitions_per_shard: DEFAULT_MAX_PARTITIONS_PER_SHARD,
        }
    }
}

/// Default `--max-partitions-per-shard`.
pub const DEFAULT_MAX_PARTITIONS_PER_SHARD: u32 = 1_000;

impl ClusterMetadata {
    /// Refuses `more` new partition replicas past `--max-partitions-per-shard` on the live
    /// brokers' shards.
    fn check_replica_room(
        &self,
        name: &str,
        more: u64,
        limits: &MetadataLimits,
    ) -> Result<(), MetadataError> {
        let held: u64 = self
            .topics
            .values()
            .flat_map(|t| &t.partitions)
            .map(|p| p.replicas.len().max(1) as u64)
            .sum();
        let shards: u64 = self
            .live_brokers()
            .iter()
            .filter_map(|b| self.brokers.get(b))
            .map(|b| u64::from(b.shards))
            .sum();
        let room = shards * u64::from(limits.max_partitions_per_shard);
        if held + more > room {
            return Err(MetadataError::new(
                ErrorCode::InvalidPartitions,
                format!(
                    "topic {name:?}: {more} more partition replicas would make {}, more than \
                     {room} ({shards} live shards x --max-partitions-per-shard {})",
                    held + more,
                    limits.max_partitions_per_shard
                ),
            ));
        }
        Ok(())
    }
}

/// Checks a topic name by Kafka's rules.
pub fn validate_topic_name(name: &str) -> Result<(), MetadataError> {
    let bad = |why: &str| {
        Err(MetadataError::new(
            ErrorCode::InvalidTopic,
            format!("invalid topic name {name:?}: {why}"),
        ))
    };
    if name.is_empty() {
        return bad("it is empty");
    }
    if name == "." || name == ".." {
        return bad("'.' and '..' are not allowed");
    }
    if name.len() > MAX_TOPIC_NAME_LEN {
        return bad(&format!(
            "{} characters, at most {MAX_TOPIC_NAME_LEN} allowed",
            name.len()
        ));
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        return bad(&format!(
            "character {c:?} is not allowed (only ASCII letters, digits, '.', '_' and '-')"
        ));
    }
    Ok(())
}

impl ClusterMetadata {
    /// The topic named `name`.
    pub fn topic(&self, name: &str) -> Option<&TopicInfo> {
        self.topics.get(name)
    }

    /// Checks `cmd` against the current state without changing anything.
    pub fn validate(&self, cmd: &Command, limits: &MetadataLimits) -> Result<(), MetadataError> {
        match cmd {
            Command::RegisterBroker(b) => {
                if b.shards == 0 {
                    return Err(MetadataError::new(
                        ErrorCode::InvalidRequest,
                        format!("broker {} registered with 0 shards", b.node_id),
                    ));
                }
                if b.host.is_empty() {
                    return Err(MetadataError::new(
                        ErrorCode::InvalidRequest,
                        format!("broker {} registered without a host", b.node_id),
                    ));
                }
                Ok(())
            }
            Command::CreateTopic {
                name,
                partitions,
                replication_factor,
                configs,
            } => {
                validate_topic_name(name)?;
                if self.topics.contains_key(name) {
                    return Err(MetadataError::new(
                        ErrorCode::TopicAlreadyExists,
                        format!("topic {name:?} already exists"),
                    ));
                }
                let max = limits.max_partitions_per_topic;
                if *partitions == 0 || *partitions > max {
                    return Err(MetadataError::new(
                        ErrorCode::InvalidPartitions,
                        format!("topic {name:?}: {partitions} partitions, must be 1..={max}"),
                    ));
                }
                let brokers = self.live_brokers().len();
                if *replication_factor == 0 || usize::from(*replication_factor) > brokers {
                    return Err(MetadataError::new(
                        ErrorCode::InvalidReplicationFactor,
                        format!(
                            "topic {name:?}: replication factor {replication_factor} must be at \
                             least 1 and at most the number of live brokers, {brokers}"
                        ),
                    ));
                }
                self.check_replica_room(
                    name,
                    u64::from(*partitions) * u64::from(*replication_factor),
                    limits,
                )?;
                let rest = split_cluster_configs(configs, usize::from(*replication_factor))?;
                Ok(crate::topic_config::validate(&rest)?)
            }
            Command::AlterTopicConfig { name, configs } => {
                let Some(t) = self.topics.get(name) else {
                    return Err(MetadataError::new(
                        ErrorCode::UnknownTopicOrPartition,
                        format!("unknown topic {name:?}"),
                    ));
                };
                let rf = t.partitions.first().map_or(1, |p| p.replicas.len());
                let rest = split_cluster_configs(configs, rf)?;
                Ok(crate::topic_config::validate(&rest)?)
            }
            Command::ChangeTopicConfig {
                name, set, unset, ..
            } => {
                let Some(t) = self.topics.get(name) else {
                    return Err(MetadataError::new(
                        ErrorCode::UnknownTopicOrPartition,
                        format!("unknown topic {name:?}"),
                    ));
                };
                if let Some(key) = unset.iter().find(|k| set.contains_key(*k)) {
                    return Err(MetadataError::new(
                        ErrorCode::InvalidRequest,
                        format!("config {key:?} is both set and removed"),
                    ));
                }
                // The controller's own keys (min.insync.replicas, ...) are checked here.
                let rf = t.partitions.first().map_or(1, |p| p.replicas.len());
                crate::topic_config::validate(&split_cluster_configs(set, rf)?)?;
                match unset.iter().find(|k| {
                    !crate::topic_config::KNOWN.contains(&k.as_str())
                        && !super::cluster::CLUSTER_TOPIC_KEYS.contains(&k.as_str())
                }) {
                    Some(key) => {
                        Err(
                            crate::topic_config::TopicConfigError::Unknown { key: key.clone() }
                                .into(),
                        )
                    }
                    None => Ok(()),
                }
            }
            Command::DecommissionPartition { name, partition } => {
                let Some(t) = self.topics.get(name) else {
                    return Err(MetadataError::new(
                        ErrorCode::UnknownTopicOrPartition,
                        format!("unknown topic {name:?}"),
                    ));
                };
                let Some(p) = t.partitions.get(*partition as usize) else {
                    return Err(MetadataError::new(
                        ErrorCode::UnknownTopicOrPartition,
                        format!(
                            "topic {name:?} has {} partitions, no partition {partition}",
                            t.partitions.len()
                        ),
                    ));
                };
                if p.decommissioned {
                    return Err(MetadataError::new(
                        ErrorCode::InvalidPartitions,
                        format!("{name}-{partition} is already decommissioned"),
                    ));
                }
                if t.partitions.iter().filter(|p| !p.decommissioned).count() == 1 {
                    return Err(MetadataError::new(
                        ErrorCode::InvalidPartitions,
                        format!("{name}-{partition} is the topic's last writable partition"),
                    ));
                }
                Ok(())
            }
            Command::AddPartitions { name, count } => {
                let Some(t) = self.topics.get(name) else {
                    return Err(MetadataError::new(
                        ErrorCode::UnknownTopicOrPartition,
                        format!("unknown topic {name:?}"),
                    ));
                };
                let have = t.partitions.len() as u32;
                let max = limits.max_partitions_per_topic;
                if *count <= have || *count > max {
                    return Err(MetadataError::new(
                        ErrorCode::InvalidPartitions,
                        format!("topic {name:?} has {have} partitions: the new count must be more, and at most {max} (partitions are never removed)"),
                    ));
                }
                if self.live_brokers().is_empty() {
                    return Err(MetadataError::new(
                        ErrorCode::InvalidReplicationFactor,
                        format!("topic {name:?}: no live broker to place new partitions on"),
                    ));
                }
                let rf = t.partitions.first().map_or(1, |p| p.replicas.len().max(1)) as u64;
                self.check_replica_room(name, u64::from(*count - have) * rf, limits)
            }
            Command::DeleteTopic { name } => {
                if self.topics.contains_key(name) {
                    Ok(())
                } else {
                    Err(MetadataError::new(
                        ErrorCode::UnknownTopicOrPartition,
                        format!("topic {name:?} does not exist"),
                    ))
                }
            }
            Command::InitCluster { cluster_id } => {
                if !self.cluster_id.is_empty() {
                    return Err(MetadataError::new(
                        ErrorCode::InvalidRequest,
                        format!("cluster id is already set to {:?}", self.cluster_id),
                    ));
                }
                if cluster_id.is_empty() {
                    return Err(MetadataError::new(
                        ErrorCode::InvalidRequest,
                        "empty cluster id",
                    ));
                }
                Ok(())
            }
            Command::RegisterMember(_)
            | Command::FenceBroker { .. }
            | Command::UnfenceBroker { .. }
            | Command::ControlledShutdown { .. }
            | Command::AlterPartition { .. } => self.validate_cluster(cmd),
            Command::ReassignPartition {
                topic,
                partition,
                replicas: Some(target),
                ..
            } => {
                self.validate_reassignment(cmd)?;
                // While it moves, the partition holds the new replicas beside the old ones.
                let p = self.partition(topic, *partition)?;
                let adding = target.iter().filter(|b| !p.replicas.contains(b)).count();
                self.check_replica_room(topic, adding as u64, limits)
            }
            Command::ReassignPartition { .. } | Command::ElectPreferred { .. } => {
                self.validate_reassignment(cmd)
            }
            Command::UpsertScramCredential { .. } | Command::DeleteScramCredential { .. } => {
                self.validate_user(cmd)
            }
            Command::CreateAcls { .. } | Command::DeleteAcls { .. } => self.validate_acls(cmd),
            Command::AlterClientQuota {
                entity,
                set,
                remove,
            } => crate::quota::validate(entity, set, remove)
                .map_err(|e| MetadataError::new(ErrorCode::InvalidRequest, e.to_string())),
            Command::AllocateProducerIds { count, .. } => {
                if *count == 0 || *count > MAX_PRODUCER_ID_BLOCK {
                    return Err(MetadataError::new(
                        ErrorCode::InvalidRequest,
                        format!(
                            "a block of {count} producer ids, must be 1..={MAX_PRODUCER_ID_BLOCK}"
                        ),
                    ));
                }
                // Producer ids are i64 on the wire: the counter never passes i64::MAX.
                if self.next_producer_id + u64::from(*count) > i64::MAX as u64 {
                    return Err(MetadataError::new(
                        ErrorCode::InvalidRequest,
                        "producer ids are exhausted",
                    ));
                }
                Ok(())
            }
        }
    }

    /// Applies `cmd`, committed at raft `index`. On error nothing changes.
    pub fn apply(
        &mut self,
        index: u64,
        cmd: &Command,
        limits: &MetadataLimits,
    ) -> Result<Applied, MetadataError> {
        self.validate(cmd, limits)?;
        let applied = match cmd {
            Command::RegisterBroker(b) => {
                self.register_broker(b);
                Applied::BrokerRegistered
            }
            Command::CreateTopic {
                name,
                partitions,
                replication_factor,
                configs,
            } => {
                let id = self.next_topic_id.max(1);
                self.next_topic_id = id + 1;
                let topic = TopicInfo {
                    name: name.clone(),
                    id,
                    partitions: self.place(id, *partitions, *replication_factor),
                    configs: configs.clone(),
                };
                self.topics.insert(name.clone(), topic.clone());
                Applied::TopicCreated(topic)
            }
            Command::DeleteTopic { name } => {
                // validate() checked that it exists.
                let topic = self.topics.remove(name).ok_or_else(|| {
                    MetadataError::new(ErrorCode::UnknownTopicOrPartition, "topic vanished")
                })?;
                Applied::TopicDeleted(topic)
            }
            Command::InitCluster { cluster_id } => {
                self.cluster_id = cluster_id.clone();
                Applied::ClusterInitialized
            }
            Command::AlterTopicConfig { name, configs } => {
                let topic = self.topics.get_mut(name).ok_or_else(|| {
                    MetadataError::new(ErrorCode::UnknownTopicOrPartition, "topic vanished")
                })?;
                for (k, v) in configs {
                    topic.configs.insert(k.clone(), v.clone());
                }
                Applied::TopicConfigAltered(topic.clone())
            }
            Command::ChangeTopicConfig {
                name,
                set,
                unset,
                replace,
            } => {
                let topic = self.topics.get_mut(name).ok_or_else(|| {
                    MetadataError::new(ErrorCode::UnknownTopicOrPartition, "topic vanished")
                })?;
                if *replace {
                    topic.configs.clear();
                }
                for k in unset {
                    topic.configs.remove(k);
                }
                for (k, v) in set {
                    topic.configs.insert(k.clone(), v.clone());
                }
                Applied::TopicConfigAltered(topic.clone())
            }
            Command::DecommissionPartition { name, partition } => {
                let topic = self.topics.get_mut(name).ok_or_else(|| {
                    MetadataError::new(ErrorCode::UnknownTopicOrPartition, "topic vanished")
                })?;
                let p = topic
                    .partitions
                    .get_mut(*partition as usize)
                    .ok_or_else(|| {
                        MetadataError::new(ErrorCode::UnknownTopicOrPartition, "partition vanished")
                    })?;
                p.decommissioned = true;
                Applied::PartitionDecommissioned(topic.clone())
            }
            Command::AddPartitions { name, count } => {
                let (id, have, rf) = {
                    let t = self.topics.get(name).ok_or_else(|| {
                        MetadataError::new(ErrorCode::UnknownTopicOrPartition, "topic vanished")
                    })?;
                    let rf = t.partitions.first().map_or(1, |p| p.replicas.len()) as u16;
                    (t.id, t.partitions.len() as u32, rf)
                };
                // The same placement a topic created with `count` partitions would get.
                let live = self.live_brokers().len() as u16;
                let plan = self.place(id, *count, rf.min(live).max(1));
                let topic = self.topics.get_mut(name).expect("checked above");
                topic
                    .partitions
                    .extend(plan.into_iter().skip(have as usize));
                Applied::PartitionsAdded(topic.clone())
            }
            Command::RegisterMember(_)
            | Command::FenceBroker { .. }
            | Command::UnfenceBroker { .. }
            | Command::ControlledShutdown { .. }
            | Command::AlterPartition { .. } => self.apply_cluster(index, cmd)?,
            Command::ReassignPartition { .. } | Command::ElectPreferred { .. } => {
                self.apply_reassignment(cmd)?
            }
            Command::UpsertScramCredential { .. } | Command::DeleteScramCredential { .. } => {
                self.apply_user(cmd)
            }
            Command::CreateAcls { .. } | Command::DeleteAcls { .. } => self.apply_acls(cmd),
            Command::AlterClientQuota {
                entity,
                set,
                remove,
            } => {
                let q = self.quotas.entry(entity.clone()).or_default();
                for k in remove {
                    q.remove(k);
                }
                q.extend(set.iter().map(|(k, v)| (k.clone(), *v)));
                if q.is_empty() {
                    self.quotas.remove(entity);
                }
                Applied::QuotaChanged
            }
            Command::AllocateProducerIds { count, .. } => {
                let first = self.next_producer_id;
                self.next_producer_id = first + u64::from(*count);
                Applied::ProducerIdsAllocated {
                    first,
                    count: *count,
                }
            }
        };
        self.applied_index = index;
        Ok(applied)
    }

    pub(super) fn register_broker(&mut self, b: &BrokerInfo) {
        let shards = b.shards;
        self.brokers.insert(b.node_id, b.clone());
        for topic in self.topics.values_mut() {
            for p in topic.partitions.iter_mut() {
                if p.leader == b.node_id && p.shard >= shards {
                    p.shard = p.shard_on(topic.id, shards);
                    p.leader_epoch += 1;
                }
            }
        }
    }
}

/// The shard of the leader broker that owns partition `p` of topic `topic_id`.
pub fn shard_for(topic_id: u64, partition: u32, shards: u32) -> u32 {
    ((topic_id + u64::from(partition)) % u64::from(shards.max(1))) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    fn broker(id: u32, shards: u32) -> Command {
        Command::RegisterBroker(BrokerInfo {
            node_id: id,
            host: "127.0.0.1".into(),
            port: 9292,
            shards,
            kafka_port: None,
        })
    }

    fn create(name: &str, partitions: u32, rf: u16) -> Command {
        Command::CreateTopic {
            name: name.into(),
            partitions,
            replication_factor: rf,
            configs: BTreeMap::new(),
        }
    }

    fn code(md: &ClusterMetadata, cmd: Command) -> ErrorCode {
        let mut copy = md.clone();
        let err = copy
            .apply(99, &cmd, &MetadataLimits::default())
            .unwrap_err();
        assert_eq!(&copy, md, "a rejected command changed the metadata");
        err.code
    }

    #[test]
    fn placement_spreads_over_brokers_and_shards() {
        let limits = MetadataLimits::default();
        let mut md = ClusterMetadata::default();
        md.apply(1, &broker(1, 2), &limits).unwrap();
        let Applied::TopicCreated(t) = md.apply(2, &create("t", 4, 1), &limits).unwrap() else {
            panic!()
        };
        assert_eq!(t.id, 1);
        let shards: Vec<u32> = t.partitions.iter().map(|p| p.shard).collect();
        assert_eq!(shards, vec![1, 0, 1, 0]);
        assert!(t.partitions.iter().all(|p| p.leader == 1));

        md.apply(3, &broker(2, 1), &limits).unwrap();
        md.apply(4, &broker(3, 1), &limits).unwrap();
        let Applied::TopicCreated(t) = md.apply(5, &create("u", 3, 2), &limits).unwrap() else {
            panic!()
        };
        assert_eq!(t.id, 2);
        let replicas: Vec<Vec<u32>> = t.partitions.iter().map(|p| p.replicas.clone()).collect();
        assert_eq!(replicas, vec![vec![3, 1], vec![1, 2], vec![2, 3]]);
        assert_eq!(t.partitions[1].leader, 1);
        assert_eq!(t.partitions[1].isr, vec![1, 2]);
        assert_eq!(md.applied_index, 5);
        assert_eq!(md.next_topic_id, 3);
    }

    #[test]
    fn reregistering_with_fewer_shards_moves_only_out_of_range_partitions() {
        let limits = MetadataLimits::default();
        let mut md = ClusterMetadata::default();
        md.apply(1, &broker(1, 4), &limits).unwrap();
        md.apply(2, &create("t", 4, 1), &limits).unwrap();
        let before: Vec<u32> = md.topics["t"].partitions.iter().map(|p| p.shard).collect();
        assert_eq!(before, vec![1, 2, 3, 0]);
        md.apply(3, &broker(1, 2), &limits).unwrap();
        let after: Vec<(u32, u32)> = md.topics["t"]
            .partitions
            .iter()
            .map(|p| (p.shard, p.leader_epoch))
            .collect();
        // Shard 1 and 0 still exist; 2 and 3 are re-placed by (id + p) % 2.
        assert_eq!(after, vec![(1, 0), (0, 1), (1, 1), (0, 0)]);
        // Growing again does not move anything.
        md.apply(4, &broker(1, 8), &limits).unwrap();
        let grown: Vec<u32> = md.topics["t"].partitions.iter().map(|p| p.shard).collect();
        assert_eq!(grown, vec![1, 0, 1, 0]);
    }

    #[test]
    fn validation_rules() {
        let limits = MetadataLimits::default();
        let mut md = ClusterMetadata::default();
        assert_eq!(
            code(&md, create("t", 1, 1)),
            ErrorCode::InvalidReplicationFactor
        );
        md.apply(1, &broker(1, 1), &limits).unwrap();
        md.apply(2, &create("t", 1, 1), &limits).unwrap();
        for bad in ["", ".", "..", "a b", "é", &"x".repeat(250)] {
            assert_eq!(
                code(&md, create(bad, 1, 1)),
                ErrorCode::InvalidTopic,
                "{bad}"
            );
        }
        let err = md.validate(&create("a/b", 1, 1), &limits).unwrap_err();
        assert!(err.to_string().contains("\"a/b\""), "{err}");
        md.validate(&create(&"x".repeat(249), 1, 1), &limits)
            .unwrap();
        md.validate(&create("A.b_c-9", 1, 1), &limits).unwrap();
        assert_eq!(code(&md, create("t", 1, 1)), ErrorCode::TopicAlreadyExists);
        assert_eq!(code(&md, create("u", 0, 1)), ErrorCode::InvalidPartitions);
        assert_eq!(
            code(&md, create("u", 10_001, 1)),
            ErrorCode::InvalidPartitions
        );
        assert_eq!(
            code(&md, create("u", 1, 0)),
            ErrorCode::InvalidReplicationFactor
        );
        let err = md.validate(&create("u", 1, 2), &limits).unwrap_err();
        assert_eq!(err.code, ErrorCode::InvalidReplicationFactor);
        assert!(err.message.contains("brokers, 1"), "{err}");
        let mut configs = BTreeMap::new();
        configs.insert(String::new(), "x".into());
        let cmd = Command::CreateTopic {
            name: "u".into(),
            partitions: 1,
            replication_factor: 1,
            configs,
        };
        assert_eq!(code(&md, cmd), ErrorCode::InvalidConfig);
        assert_eq!(
            code(
                &md,
                Command::DeleteTopic {
                    name: "nope".into()
                }
            ),
            ErrorCode::UnknownTopicOrPartition
        );
        assert_eq!(code(&md, broker(2, 0)), ErrorCode::InvalidRequest);
    }

    #[test]
    fn commands_round_trip_through_json() {
        let cmd = create("t", 3, 1);
        let json = serde_json::to_vec(&cmd).unwrap();
        assert_eq!(serde_json::from_slice::<Command>(&json).unwrap(), cmd);
    }

    #[test]
    fn alter_config_and_add_partitions() {
        let limits = MetadataLimits::default();
        let mut md = ClusterMetadata::default();
        md.apply(1, &broker(1, 2), &limits).unwrap();
        md.apply(2, &create("t", 2, 1), &limits).unwrap();
        let alter = |k: &str, v: &str| Command::AlterTopicConfig {
            name: "t".into(),
            configs: [(k.to_string(), v.to_string())].into_iter().collect(),
        };
        md.apply(3, &alter("retention.ms", "5000"), &limits)
            .unwrap();
        assert_eq!(md.topic("t").unwrap().configs["retention.ms"], "5000");
        assert_eq!(
            code(&md, alter("retention.ms", "x")),
            ErrorCode::InvalidConfig
        );
        assert_eq!(code(&md, alter("bogus", "1")), ErrorCode::InvalidConfig);
        let add = |n| Command::AddPartitions {
            name: "t".into(),
            count: n,
        };
        assert_eq!(code(&md, add(2)), ErrorCode::InvalidPartitions);
        assert_eq!(code(&md, add(1)), ErrorCode::InvalidPartitions);
        let before = md.topic("t").unwrap().partitions.clone();
        let Applied::PartitionsAdded(t) = md.apply(4, &add(5), &limits).unwrap() else {
            panic!()
        };
        assert_eq!(t.partitions.len(), 5);
        assert_eq!(
            &t.partitions[..2],
            &before[..],
            "existing partitions keep their placement"
        );
        assert_eq!(
            t.partitions.iter().map(|p| p.partition).collect::<Vec<_>>(),
            vec![0, 1, 2, 3, 4]
        );
        let unknown = Command::AddPartitions {
            name: "nope".into(),
            count: 3,
        };
        assert_eq!(code(&md, unknown), ErrorCode::UnknownTopicOrPartition);
    }

    #[test]
    fn change_topic_config_sets_removes_and_replaces() {
        let limits = MetadataLimits::default();
        let mut md = ClusterMetadata::default();
        md.apply(1, &broker(1, 1), &limits).unwrap();
        md.apply(2, &create("t", 1, 1), &limits).unwrap();
        let change = |set: &[(&str, &str)], unset: &[&str], replace| Command::ChangeTopicConfig {
            name: "t".into(),
            set: set
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            unset: unset.iter().map(|k| k.to_string()).collect(),
            replace,
        };
        let configs = |md: &ClusterMetadata| md.topic("t").unwrap().configs.clone();
        md.apply(
            3,
            &change(&[("retention.ms", "5"), ("segment.ms", "9")], &[], false),
            &limits,
        )
        .unwrap();
        md.apply(4, &change(&[], &["segment.ms"], false), &limits)
            .unwrap();
        assert_eq!(
            configs(&md),
            BTreeMap::from([("retention.ms".into(), "5".into())])
        );
        md.apply(
            5,
            &change(&[("max.message.bytes", "4096")], &[], true),
            &limits,
        )
        .unwrap();
        assert_eq!(
            configs(&md),
            BTreeMap::from([("max.message.bytes".into(), "4096".into())]),
            "replace drops what is not set"
        );
        assert_eq!(
            code(&md, change(&[], &["bogus"], false)),
            ErrorCode::InvalidConfig
        );
        assert_eq!(
            code(
                &md,
                change(&[("retention.ms", "1")], &["retention.ms"], false)
            ),
            ErrorCode::InvalidRequest
        );
        assert_eq!(
            code(&md, change(&[("retention.ms", "x")], &[], false)),
            ErrorCode::InvalidConfig
        );
        let json =
            serde_json::to_vec(&change(&[("retention.ms", "1")], &["segment.ms"], true)).unwrap();
        assert!(matches!(
            serde_json::from_slice::<Command>(&json).unwrap(),
            Command::ChangeTopicConfig { replace: true, .. }
        ));
    }

    #[test]
    fn partition_replicas_are_bounded_per_live_shard() {
        let limits = MetadataLimits {
            max_partitions_per_shard: 10,
            ..MetadataLimits::default()
        };
        let mut md = ClusterMetadata::default();
        md.apply(1, &broker(1, 2), &limits).unwrap();
        md.apply(2, &create("a", 15, 1), &limits).unwrap();
        assert_eq!(
            code_with(&md, create("b", 6, 1), &limits),
            ErrorCode::InvalidPartitions
        );
        md.apply(3, &create("b", 5, 1), &limits).unwrap();
        let grow = Command::AddPartitions {
            name: "a".into(),
            count: 16,
        };
        assert_eq!(code_with(&md, grow, &limits), ErrorCode::InvalidPartitions);
        md.apply(4, &Command::DeleteTopic { name: "b".into() }, &limits)
            .unwrap();
        let grow = Command::AddPartitions {
            name: "a".into(),
            count: 20,
        };
        md.apply(5, &grow, &limits)
            .expect("room again after the delete");
    }

    fn code_with(md: &ClusterMetadata, cmd: Command, limits: &MetadataLimits) -> ErrorCode {
        let mut copy = md.clone();
        let err = copy.apply(99, &cmd, limits).unwrap_err();
        assert_eq!(&copy, md, "a rejected command changed the metadata");
        err.code
    }
}
