#![warn(missing_docs)]
//! The rill client: metadata cache, routing to the shard that owns each partition, and the
//! admin, produce and fetch calls the CLI and applications use.
//!
//! This is the routing core (blocking, std threads); the batching producer with linger and
//! in-flight windows and the prefetching consumer build on it.

mod batch_buffers;
pub mod connection;
pub mod consumer;
pub mod coordinator;
mod delayed;
pub mod error;
pub mod group_consumer;
pub mod pipeline;
pub mod producer;
pub mod socket;
pub mod transactional;
mod txn_skip;

use std::collections::HashMap;
use std::net::{SocketAddr, ToSocketAddrs};
use std::time::{Duration, Instant};

/// A topic partition: topic name and partition index.
pub use crate::group::assignor::TopicPartition;
/// Which partition a key goes to (Kafka's murmur2 partitioner, [`crate::partitioner`]).
pub use crate::partitioner::partition_for_key;
pub use connection::Connection;
pub use consumer::{
    ConsumedRecord, Consumer, ConsumerConfig, ConsumerRecord, Isolation, OffsetReset, Records,
    StartFrom,
};
pub use error::ClientError;
pub use group_consumer::{
    Delivery, GroupConsumer, GroupConsumerConfig, OffsetAndMetadata, Offsets, PendingCommit,
    RebalanceListener,
};
pub use producer::{
    Acks, DeliveryFuture, Producer, ProducerConfig, ProducerRecord, RecordMetadata,
    RequestObserver, RequestTiming, DEFAULT_PARTITION_REQUEST_BYTES,
};
pub use transactional::{GroupMetadata, TransactionConfig, TransactionalProducer};

use crate::protocol::messages::*;
use crate::protocol::{ApiKey, ErrorCode, ResponseFrame};

/// Client settings.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// The `host:port` of the broker asked for metadata and admin calls (`bootstrap.servers`).
    pub bootstrap: String,
    /// The name sent with every request to identify this client (`client.id`).
    pub client_id: String,
    /// How long opening a connection may take.
    pub connect_timeout: Duration,
    /// How long to wait for a response (`request.timeout.ms`); fetches add their `max_wait`.
    pub request_timeout: Duration,
    /// TLS to every shard (`--tls-ca`, client certificate for mutual TLS), or plaintext.
    pub tls: Option<crate::tls::ClientTls>,
    /// SASL credentials, for a broker whose native listener authenticates
    /// (`--native-sasl-mechanisms`): every connection authenticates before its first request.
    pub sasl: Option<SaslCredentials>,
}

/// A user's SASL credentials and the mechanism to use (`PLAIN`, `SCRAM-SHA-256`,
/// `SCRAM-SHA-512`).
#[derive(Clone)]
pub struct SaslCredentials {
    /// The mechanism (SCRAM sends no password; PLAIN does, so use it over TLS only).
    pub mechanism: String,
    /// The user name.
    pub username: String,
    /// The password.
    pub password: String,
}

impl std::fmt::Debug for SaslCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SaslCredentials")
            .field("mechanism", &self.mechanism)
            .field("username", &self.username)
            .field("password", &"<redacted>")
            .finish()
    }
}

impl ClientConfig {
    /// Settings for `bootstrap`: client id `rill-client`, 5 s connect and 30 s request timeouts.
    pub fn new(bootstrap: impl Into<String>) -> ClientConfig {
        ClientConfig {
            bootstrap: bootstrap.into(),
            client_id: "rill-client".into(),
            connect_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(30),
            tls: None,
            sasl: None,
        }
    }
}

/// Where a partition's leader is served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Route {
    /// The node id of the partition's leader broker.
    pub broker: u32,
    /// The leader's shard that owns the partition.
    pub shard: u32,
    /// The shard's address: the leader's host and its port plus the shard index.
    pub addr: SocketAddr,
}

/// Cached cluster metadata.
#[derive(Debug, Clone, Default)]
pub struct MetadataCache {
    /// The cluster's id.
    pub cluster_id: String,
    /// The controller quorum's leader as the answering broker knows it (0: none known).
    pub controller_id: u64,
    /// The controller quorum's voters.
    pub voters: Vec<u64>,
    /// The brokers, by node id.
    pub brokers: HashMap<u32, BrokerMeta>,
    /// The topics and their partitions' leaders and replicas, by name (a producer looks its
    /// topic up at every send: Fx, not SipHash, which was 5% of the producer).
    pub topics: rustc_hash::FxHashMap<String, TopicMeta>,
}

impl MetadataCache {
    /// The shard address of a partition's leader: the broker's port plus the shard index.
    pub fn route(&self, topic: &str, partition: u32) -> Result<Route, ClientError> {
        let t = self
            .topics
            .get(topic)
            .ok_or_else(|| ClientError::UnknownTopic(topic.to_string()))?;
        let p =
            t.partitions
                .get(partition as usize)
                .ok_or_else(|| ClientError::UnknownPartition {
                    topic: topic.to_string(),
                    partition,
                    partitions: t.partitions.len() as u32,
                })?;
        let b = self.brokers.get(&p.leader).ok_or_else(|| {
            ClientError::broker(
                ErrorCode::NotLeaderOrFollower,
                format!("leader {} unknown", p.leader),
            )
        })?;
        let port = u32::from(b.port) + p.shard;
        let port = u16::try_from(port)
            .map_err(|_| ClientError::Invalid(format!("bad shard port {port}")))?;
        let addr = (b.host.as_str(), port)
            .to_socket_addrs()
            .ok()
            .and_then(|mut a| a.next())
            .ok_or_else(|| ClientError::Invalid(format!("cannot resolve {}:{port}", b.host)))?;
        Ok(Route {
            broker: p.leader,
            shard: p.shard,
            addr,
        })
    }

    /// The partitions of `topic` that take writes (not decommissioned), ascending.
    pub fn writable_partitions(&self, topic: &str) -> Vec<u32> {
        self.topics.get(topic).map_or_else(Vec::new, |t| {
            t.partitions
                .iter()
                .filter(|p| !p.decommissioned)
                .map(|p| p.partition)
                .collect()
        })
    }

    /// How many partitions `topic` has, from the cache.
    pub fn partitions(&self, topic: &str) -> Result<u32, ClientError> {
        self.topics
            .get(topic)
            .map(|t| t.partitions.len() as u32)
            .ok_or_else(|| ClientError::UnknownTopic(topic.to_string()))
    }
}

/// What `describe_topic` reports.
#[derive(Debug, Clone, PartialEq)]
pub struct TopicDescription {
    /// The topic's name.
    pub name: String,
    /// The topic's id, assigned by the cluster.
    pub id: u64,
    /// The topic's configs as (name, value) pairs.
    pub configs: Vec<(String, String)>,
    /// The topic's partitions, in partition order.
    pub partitions: Vec<PartitionDescription>,
}

/// One partition of a [`TopicDescription`].
#[derive(Debug, Clone, PartialEq)]
pub struct PartitionDescription {
    /// The partition's index.
    pub partition: u32,
    /// Where the partition's leader is served; `None` while it has no leader (offline: every
    /// in-sync replica's broker is fenced), and then the log fields below are 0.
    pub route: Option<Route>,
    /// The leader epoch, bumped when the partition's leader moves.
    pub leader_epoch: u32,
    /// The node ids of the brokers assigned a replica.
    pub replicas: Vec<u32>,
    /// The node ids of the in-sync replicas (ISR).
    pub isr: Vec<u32>,
    /// The earliest offset still in the log.
    pub log_start_offset: u64,
    /// The high watermark: the offset after the last record consumers can read.
    pub log_end_offset: u64,
    /// While a reassignment runs: the replicas being added (else empty).
    pub adding: Vec<u32>,
    /// While a reassignment runs: the replicas being removed (else empty).
    pub removing: Vec<u32>,
    /// Segment files of the partition.
    pub segments: u32,
    /// Bytes of those segments.
    pub size_bytes: u64,
}

/// What `cluster_info` reports.
#[derive(Debug, Clone, PartialEq)]
pub struct ClusterInfo {
    /// The cluster's id.
    pub cluster_id: String,
    /// The controller quorum's leader as the answering broker knows it (0: none known).
    pub controller_id: u64,
    /// The controller quorum's voters.
    pub voters: Vec<u64>,
    /// The brokers, sorted by node id.
    pub brokers: Vec<BrokerMeta>,
    /// How many topics the cluster has.
    pub topics: usize,
}

/// A connection pool (one connection per shard address) plus the metadata cache: the admin
/// client (topics, cluster) and the routing core the producer and consumer use.
pub struct Client {
    cfg: ClientConfig,
    connections: HashMap<SocketAddr, Connection>,
    metadata: MetadataCache,
}

impl Client {
    /// Creates a client and fetches the cluster metadata from the bootstrap broker.
    pub fn connect(cfg: ClientConfig) -> Result<Client, ClientError> {
        let mut client = Client {
            cfg,
            connections: HashMap::new(),
            metadata: MetadataCache::default(),
        };
        client.refresh_metadata()?;
        Ok(client)
    }

    /// The settings this client was created with.
    pub fn config(&self) -> &ClientConfig {
        &self.cfg
    }

    /// The metadata cached by the last refresh.
    pub fn metadata(&self) -> &MetadataCache {
        &self.metadata
    }

    fn bootstrap_addr(&self) -> Result<SocketAddr, ClientError> {
        self.cfg
            .bootstrap
            .to_socket_addrs()
            .map_err(|e| {
                ClientError::Invalid(format!(
                    "bad bootstrap address '{}': {e}",
                    self.cfg.bootstrap
                ))
            })?
            .next()
            .ok_or_else(|| {
                ClientError::Invalid(format!(
                    "bootstrap address '{}' resolves to nothing",
                    self.cfg.bootstrap
                ))
            })
    }

    /// The connection to `addr`, opened on first use.
    pub fn connection(&mut self, addr: SocketAddr) -> Result<&mut Connection, ClientError> {
        if self
            .connections
            .get(&addr)
            .is_some_and(Connection::is_stale)
        {
            self.connections.remove(&addr);
        }
        if !self.connections.contains_key(&addr) {
            let c = Connection::connect(
                addr,
                self.cfg.connect_timeout,
                &self.cfg.client_id,
                self.cfg.tls.as_ref(),
                self.cfg.sasl.as_ref(),
            )?;
            c.set_read_timeout(Some(self.cfg.request_timeout));
            self.connections.insert(addr, c);
        }
        Ok(self.connections.get_mut(&addr).expect("inserted above"))
    }

    /// Drops a connection after an I/O error, so the next call reconnects.
    pub fn forget_connection(&mut self, addr: SocketAddr) {
        self.connections.remove(&addr);
    }

    /// Asks the bootstrap broker; when it cannot be reached (it crashed, say), every broker
    /// the last metadata named, as Kafka clients do: one dead broker must not blind a client
    /// to a cluster whose partitions moved to the others.
    fn call_any_broker<Req, Resp>(&mut self, api: ApiKey, req: &Req) -> Result<Resp, ClientError>
    where
        Req: crate::protocol::frame::EncodeMeta,
        Resp: crate::protocol::frame::DecodeMeta,
    {
        let bootstrap = self.bootstrap_addr()?;
        let mut asked = vec![bootstrap];
        asked.extend(self.metadata.brokers.values().filter_map(|b| {
            (b.host.as_str(), b.port)
                .to_socket_addrs()
                .ok()?
                .next()
                .filter(|a| *a != bootstrap)
        }));
        let mut result = Err(ClientError::Invalid("no broker to ask".into()));
        for addr in asked {
            result = self.call(addr, api, req, &[]).map(|(resp, _)| resp);
            match &result {
                Err(e) if e.is_unreachable() => continue,
                _ => break,
            }
        }
        result
    }

    /// A call on a connection; a broken connection is dropped so the next call reconnects.
    pub fn call<Req, Resp>(
        &mut self,
        addr: SocketAddr,
        api: ApiKey,
        meta: &Req,
        payload: &[&[u8]],
    ) -> Result<(Resp, ResponseFrame), ClientError>
    where
        Req: crate::protocol::frame::EncodeMeta,
        Resp: crate::protocol::frame::DecodeMeta,
    {
        let result = self.connection(addr)?.call(api, meta, payload);
        if matches!(
            result,
            Err(ClientError::Io { .. } | ClientError::Frame { .. } | ClientError::Timeout(_))
        ) {
            self.forget_connection(addr);
        }
        result
    }

    /// Calls `f` until it succeeds, fails for good, or `within` has passed: after a
    /// retriable failure (a broker down, a leader moved, no controller leader yet) it waits
    /// `backoff`, refreshes the metadata and tries again, as Kafka's clients retry.
    pub fn retrying<T>(
        &mut self,
        within: Duration,
        backoff: Duration,
        what: &str,
        mut f: impl FnMut(&mut Client) -> Result<T, ClientError>,
    ) -> Result<T, ClientError> {
        let deadline = Instant::now() + within;
        loop {
            match f(self) {
                Err(e) if e.is_retriable() && Instant::now() + backoff < deadline => {
                    log::debug!("{what} failed (retrying): {e}");
                    std::thread::sleep(backoff);
                    let _ = self.refresh_metadata();
                }
                r => return r,
            }
        }
    }

    /// Fetches all metadata from the bootstrap broker (or any known one).
    pub fn refresh_metadata(&mut self) -> Result<&MetadataCache, ClientError> {
        self.refresh_metadata_creating(Vec::new())
    }

    /// Fetches all metadata, asking the broker first to create those of `topics` that do not
    /// exist (it does when it auto-creates topics, `--auto-create-topics`).
    pub fn refresh_metadata_creating(
        &mut self,
        topics: Vec<String>,
    ) -> Result<&MetadataCache, ClientError> {
        let req = MetadataRequest {
            topics: None,
            create: topics,
        };
        let resp: MetadataResponse = self.call_any_broker(ApiKey::Metadata, &req)?;
        self.metadata = MetadataCache {
            cluster_id: resp.cluster_id,
            controller_id: resp.controller_id,
            voters: resp.voters,
            brokers: resp.brokers.into_iter().map(|b| (b.node_id, b)).collect(),
            topics: resp
                .topics
                .into_iter()
                .map(|t| (t.name.clone(), t))
                .collect(),
        };
        Ok(&self.metadata)
    }

    /// A producer id and epoch for an idempotent producer: a new id with `current` `None`,
    /// or the same id with the next epoch (KIP-360; a new id once the epoch is exhausted).
    /// Asks any broker ([`Self::call_any_broker`]).
    pub fn init_producer_id(
        &mut self,
        current: Option<(i64, i16)>,
    ) -> Result<(i64, i16), ClientError> {
        let req = self.init_producer_id_request(None, current);
        let resp: InitProducerIdResponse = self.call_any_broker(ApiKey::InitProducerId, &req)?;
        producer_id_answer(resp)
    }

    /// InitProducerId for a transactional producer, asked of its transaction coordinator
    /// at `at`: (`transactional_id`, `transaction.timeout.ms`). Fences older epochs and
    /// aborts their open transaction (answered CONCURRENT_TRANSACTIONS until done).
    pub fn init_transactional_producer_id(
        &mut self,
        at: SocketAddr,
        transactional_id: &str,
        transaction_timeout_ms: i32,
        current: Option<(i64, i16)>,
    ) -> Result<(i64, i16), ClientError> {
        let req = self.init_producer_id_request(
            Some((transactional_id.to_string(), transaction_timeout_ms)),
            current,
        );
        let (resp, _): (InitProducerIdResponse, _) =
            self.call(at, ApiKey::InitProducerId, &req, &[])?;
        producer_id_answer(resp)
    }

    fn init_producer_id_request(
        &self,
        transactional: Option<(String, i32)>,
        current: Option<(i64, i16)>,
    ) -> InitProducerIdRequest {
        let (producer_id, producer_epoch) = current.unwrap_or((-1, -1));
        let (transactional_id, transaction_timeout_ms) = match transactional {
            Some((id, timeout)) => (Some(id), timeout),
            None => (None, 0),
        };
        InitProducerIdRequest {
            transactional_id,
            producer_id,
            producer_epoch,
            timeout_ms: self
                .cfg
                .request_timeout
                .as_millis()
                .min(u128::from(u32::MAX)) as u32,
            transaction_timeout_ms,
        }
    }

    /// Refreshes metadata until `topic` is known, or the deadline passes.
    pub fn wait_for_topic(&mut self, topic: &str, timeout: Duration) -> Result<u32, ClientError> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Ok(n) = self.metadata.partitions(topic) {
                return Ok(n);
            }
            if Instant::now() >= deadline {
                return Err(ClientError::UnknownTopic(topic.to_string()));
            }
            std::thread::sleep(Duration::from_millis(20));
            self.refresh_metadata()?;
        }
    }

    /// Sets topic configs (`retention.ms=...`); keys not given keep their values.
    pub fn alter_topic_config(
        &mut self,
        name: &str,
        configs: Vec<(String, String)>,
    ) -> Result<(), ClientError> {
        let addr = self.bootstrap_addr()?;
        let req = AlterTopicConfigsRequest {
            topic: name.to_string(),
            configs,
            timeout_ms: self.cfg.request_timeout.as_millis() as u32,
        };
        self.topic_command(addr, ApiKey::AlterTopicConfigs, &req)
    }

    /// Grows `name` to `count` partitions. Keys may map to other partitions afterwards.
    pub fn add_partitions(&mut self, name: &str, count: u32) -> Result<(), ClientError> {
        let addr = self.bootstrap_addr()?;
        let req = CreatePartitionsRequest {
            topic: name.to_string(),
            count,
            timeout_ms: self.cfg.request_timeout.as_millis() as u32,
        };
        self.topic_command(addr, ApiKey::CreatePartitions, &req)
    }

    /// Stops writes to a partition for good; readers drain it and retention removes its files.
    pub fn decommission(&mut self, topic: &str, partition: u32) -> Result<(), ClientError> {
        let addr = self.bootstrap_addr()?;
        let req = DecommissionPartitionRequest {
            topic: topic.to_string(),
            partition,
            timeout_ms: self.cfg.request_timeout.as_millis() as u32,
        };
        self.topic_command(addr, ApiKey::DecommissionPartition, &req)
    }

    /// Starts moving a partition to `replicas` (new replicas join the ISR before the old ones
    /// leave), or cancels its running reassignment (`None`). Returns once submitted.
    pub fn reassign_partition(
        &mut self,
        topic: &str,
        partition: u32,
        replicas: Option<Vec<u32>>,
    ) -> Result<(), ClientError> {
        let addr = self.bootstrap_addr()?;
        let req = ReassignPartitionsRequest {
            partitions: vec![ReassignablePartition {
                topic: topic.to_string(),
                partition,
                replicas,
            }],
            timeout_ms: self.cfg.request_timeout.as_millis() as u32,
        };
        let (resp, _): (ReassignPartitionsResponse, _) =
            self.call(addr, ApiKey::ReassignPartitions, &req, &[])?;
        let r = reassignment_results(resp)?
            .into_iter()
            .next()
            .ok_or_else(|| ClientError::Invalid("empty reassignment response".into()))?;
        if r.error_code != 0 {
            return Err(ClientError::broker(
                ErrorCode::from_code(r.error_code),
                r.message,
            ));
        }
        self.refresh_metadata()?;
        Ok(())
    }

    /// Reassigns every partition with a replica on broker `node` to other live brokers.
    /// Returns each partition's submitted target (or its refusal) once submitted.
    pub fn drain_broker(&mut self, node: u32) -> Result<Vec<ReassignmentResult>, ClientError> {
        let addr = self.bootstrap_addr()?;
        let req = DrainBrokerRequest {
            node_id: node,
            timeout_ms: self.cfg.request_timeout.as_millis() as u32,
        };
        let (resp, _): (ReassignPartitionsResponse, _) =
            self.call(addr, ApiKey::DrainBroker, &req, &[])?;
        reassignment_results(resp)
    }

    /// Sets `user`'s password for `mechanism` (salted here with a random salt and
    /// `iterations`; the broker keeps StoredKey and ServerKey only).
    pub fn upsert_user(
        &mut self,
        user: &str,
        password: &str,
        mechanism: crate::auth::scram::Mechanism,
        iterations: u32,
    ) -> Result<(), ClientError> {
        let salt = crate::auth::scram::random_salt();
        let salted_password = mechanism.salted_password(password.as_bytes(), &salt, iterations);
        self.alter_user(AlterUserRequest {
            user: user.to_string(),
            mechanism: mechanism.name().to_string(),
            delete: false,
            iterations,
            salt,
            salted_password,
            timeout_ms: self.cfg.request_timeout.as_millis() as u32,
        })
    }

    /// Removes `user`'s credential for `mechanism`.
    pub fn delete_user(
        &mut self,
        user: &str,
        mechanism: crate::auth::scram::Mechanism,
    ) -> Result<(), ClientError> {
        self.alter_user(AlterUserRequest {
            user: user.to_string(),
            mechanism: mechanism.name().to_string(),
            delete: true,
            iterations: 0,
            salt: Vec::new(),
            salted_password: Vec::new(),
            timeout_ms: self.cfg.request_timeout.as_millis() as u32,
        })
    }

    fn alter_user(&mut self, req: AlterUserRequest) -> Result<(), ClientError> {
        let addr = self.bootstrap_addr()?;
        let (resp, _): (AlterUserResponse, _) = self.call(addr, ApiKey::AlterUser, &req, &[])?;
        if resp.error_code != 0 {
            return Err(ClientError::broker(
                ErrorCode::from_code(resp.error_code),
                resp.message,
            ));
        }
        Ok(())
    }

    /// Adds ACL bindings (`rill acl add`).
    pub fn create_acls(&mut self, acls: Vec<AclEntry>) -> Result<(), ClientError> {
        let addr = self.bootstrap_addr()?;
        let req = CreateAclsRequest {
            acls,
            timeout_ms: self.cfg.request_timeout.as_millis() as u32,
        };
        let (resp, _): (CreateAclsResponse, _) = self.call(addr, ApiKey::CreateAcls, &req, &[])?;
        match resp.error_code {
            0 => Ok(()),
            code => Err(ClientError::broker(
                ErrorCode::from_code(code),
                resp.message,
            )),
        }
    }

    /// The ACL bindings `filter` matches (`rill acl list`).
    pub fn describe_acls(&mut self, filter: AclFilterEntry) -> Result<Vec<AclEntry>, ClientError> {
        let addr = self.bootstrap_addr()?;
        let (resp, _): (DescribeAclsResponse, _) = self.call(
            addr,
            ApiKey::DescribeAcls,
            &DescribeAclsRequest { filter },
            &[],
        )?;
        match resp.error_code {
            0 => Ok(resp.acls),
            code => Err(ClientError::broker(
                ErrorCode::from_code(code),
                resp.message,
            )),
        }
    }

    /// Removes the ACL bindings `filter` matches; returns them (`rill acl remove`).
    pub fn delete_acls(&mut self, filter: AclFilterEntry) -> Result<Vec<AclEntry>, ClientError> {
        let addr = self.bootstrap_addr()?;
        let req = DeleteAclsRequest {
            filter,
            timeout_ms: self.cfg.request_timeout.as_millis() as u32,
        };
        let (resp, _): (DeleteAclsResponse, _) = self.call(addr, ApiKey::DeleteAcls, &req, &[])?;
        match resp.error_code {
            0 => Ok(resp.deleted),
            code => Err(ClientError::broker(
                ErrorCode::from_code(code),
                resp.message,
            )),
        }
    }

    /// Sets `entry.values` and removes `remove` of one entity's quotas (`rill quota set`).
    pub fn alter_client_quota(
        &mut self,
        entry: QuotaEntry,
        remove: Vec<String>,
    ) -> Result<(), ClientError> {
        let addr = self.bootstrap_addr()?;
        let req = AlterClientQuotaRequest {
            entry,
            remove,
            timeout_ms: self.cfg.request_timeout.as_millis() as u32,
        };
        let (resp, _): (AlterClientQuotaResponse, _) =
            self.call(addr, ApiKey::AlterClientQuota, &req, &[])?;
        match resp.error_code {
            0 => Ok(()),
            code => Err(ClientError::broker(
                ErrorCode::from_code(code),
                resp.message,
            )),
        }
    }

    /// Every entity's quotas (`rill quota list`).
    pub fn describe_client_quotas(&mut self) -> Result<Vec<QuotaEntry>, ClientError> {
        let addr = self.bootstrap_addr()?;
        let (resp, _): (DescribeClientQuotasResponse, _) = self.call(
            addr,
            ApiKey::DescribeClientQuotas,
            &DescribeClientQuotasRequest {},
            &[],
        )?;
        Ok(resp.entries)
    }

    /// Every user, with its mechanisms and their iterations.
    pub fn list_users(&mut self) -> Result<Vec<UserEntry>, ClientError> {
        let addr = self.bootstrap_addr()?;
        let (resp, _): (ListUsersResponse, _) =
            self.call(addr, ApiKey::ListUsers, &ListUsersRequest {}, &[])?;
        Ok(resp.users)
    }

    /// Moves leadership back to preferred replicas (all partitions, a topic's, or one);
    /// returns how many changed leader.
    pub fn elect_preferred(
        &mut self,
        topic: Option<&str>,
        partition: Option<u32>,
    ) -> Result<u32, ClientError> {
        let addr = self.bootstrap_addr()?;
        let req = ElectLeadersRequest {
            topic: topic.map(str::to_string),
            partition,
            timeout_ms: self.cfg.request_timeout.as_millis() as u32,
        };
        let (resp, _): (ElectLeadersResponse, _) =
            self.call(addr, ApiKey::ElectLeaders, &req, &[])?;
        if resp.error_code != 0 {
            return Err(ClientError::broker(
                ErrorCode::from_code(resp.error_code),
                resp.message,
            ));
        }
        self.refresh_metadata()?;
        Ok(resp.changed)
    }

    /// Truncates history: offsets below `before` become unreadable and whole segments below it
    /// are deleted (Kafka's DeleteRecords). Returns the new log start offset.
    pub fn truncate(
        &mut self,
        topic: &str,
        partition: u32,
        before: u64,
    ) -> Result<u64, ClientError> {
        let route = self.metadata.route(topic, partition)?;
        let req = DeleteRecordsRequest {
            partitions: vec![DeleteRecordsPartition {
                topic: topic.to_string(),
                partition,
                before_offset: before,
            }],
        };
        let (resp, _): (DeleteRecordsResponse, _) =
            self.call(route.addr, ApiKey::DeleteRecords, &req, &[])?;
        let r = resp
            .partitions
            .into_iter()
            .next()
            .ok_or_else(|| ClientError::Invalid("empty delete-records response".into()))?;
        if r.error_code != 0 {
            return Err(ClientError::broker(
                ErrorCode::from_code(r.error_code),
                r.message,
            ));
        }
        Ok(r.low_watermark)
    }

    /// A partition's log state on its shard: start, end, high watermark, segments, bytes.
    pub fn partition_state(
        &mut self,
        topic: &str,
        partition: u32,
    ) -> Result<PartitionState, ClientError> {
        let route = self.metadata.route(topic, partition)?;
        let req = DescribePartitionsRequest {
            partitions: vec![(topic.to_string(), partition)],
        };
        let (resp, _): (DescribePartitionsResponse, _) =
            self.call(route.addr, ApiKey::DescribePartitions, &req, &[])?;
        let s = resp
            .partitions
            .into_iter()
            .next()
            .ok_or_else(|| ClientError::Invalid("empty describe-partitions response".into()))?;
        if s.error_code != 0 {
            return Err(ClientError::broker(
                ErrorCode::from_code(s.error_code),
                s.message,
            ));
        }
        Ok(s)
    }

    /// Sends a request answered by one topic result, then refreshes metadata.
    fn topic_command<Req>(
        &mut self,
        addr: SocketAddr,
        api: ApiKey,
        req: &Req,
    ) -> Result<(), ClientError>
    where
        Req: crate::protocol::frame::EncodeMeta,
    {
        let (resp, _): (TopicResults, _) = self.call(addr, api, req, &[])?;
        topic_result(resp)?;
        self.refresh_metadata()?;
        Ok(())
    }

    /// Topic names, sorted (from a fresh metadata fetch); internal topics (`__` prefix, such as
    /// `__consumer_offsets`) are left out, as Kafka's admin client does by default.
    pub fn list_topics(&mut self) -> Result<Vec<String>, ClientError> {
        self.refresh_metadata()?;
        let mut names: Vec<String> = self
            .metadata
            .topics
            .keys()
            .filter(|n| !n.starts_with("__"))
            .cloned()
            .collect();
        names.sort();
        Ok(names)
    }

    /// One topic's metadata with each partition's log start and end offsets.
    pub fn describe_topic(&mut self, name: &str) -> Result<TopicDescription, ClientError> {
        self.refresh_metadata()?;
        let meta = self
            .metadata
            .topics
            .get(name)
            .cloned()
            .ok_or_else(|| ClientError::UnknownTopic(name.to_string()))?;
        let mut partitions = Vec::with_capacity(meta.partitions.len());
        for p in &meta.partitions {
            let (route, state) = if p.leader == 0 {
                (None, Default::default())
            } else {
                (
                    Some(self.metadata.route(name, p.partition)?),
                    self.partition_state(name, p.partition)?,
                )
            };
            partitions.push(PartitionDescription {
                partition: p.partition,
                route,
                leader_epoch: p.leader_epoch,
                replicas: p.replicas.clone(),
                isr: p.isr.clone(),
                adding: p.adding.clone(),
                removing: p.removing.clone(),
                log_start_offset: state.log_start_offset,
                log_end_offset: state.high_watermark,
                segments: state.segments,
                size_bytes: state.size_bytes,
            });
        }
        Ok(TopicDescription {
            name: meta.name,
            id: meta.id,
            configs: meta.configs,
            partitions,
        })
    }

    /// Every consumer group of the cluster with its state, sorted (asks every shard: each
    /// knows the groups it coordinates).
    pub fn list_groups(&mut self) -> Result<Vec<(String, String)>, ClientError> {
        self.refresh_metadata()?;
        let mut addrs = Vec::new();
        for b in self.metadata.brokers.values() {
            for shard in 0..b.shards {
                let port = u16::try_from(u32::from(b.port) + shard).map_err(|_| {
                    ClientError::Invalid(format!("bad shard port of broker {}", b.node_id))
                })?;
                let addr = (b.host.as_str(), port)
                    .to_socket_addrs()
                    .ok()
                    .and_then(|mut a| a.next())
                    .ok_or_else(|| {
                        ClientError::Invalid(format!("cannot resolve {}:{port}", b.host))
                    })?;
                addrs.push(addr);
            }
        }
        let mut groups = Vec::new();
        for addr in addrs {
            let (r, _): (ListGroupsResponse, _) =
                self.call(addr, ApiKey::ListGroups, &ListGroupsRequest {}, &[])?;
            groups.extend(r.groups);
        }
        groups.sort();
        Ok(groups)
    }

    /// The cluster id and its brokers (from a fresh metadata fetch).
    pub fn cluster_info(&mut self) -> Result<ClusterInfo, ClientError> {
        self.refresh_metadata()?;
        let mut brokers: Vec<BrokerMeta> = self.metadata.brokers.values().cloned().collect();
        brokers.sort_by_key(|b| b.node_id);
        Ok(ClusterInfo {
            cluster_id: self.metadata.cluster_id.clone(),
            controller_id: self.metadata.controller_id,
            voters: self.metadata.voters.clone(),
            brokers,
            topics: self.metadata.topics.len(),
        })
    }

    /// The API versions the bootstrap broker supports, and its software version.
    pub fn api_versions(&mut self) -> Result<ApiVersionsResponse, ClientError> {
        let addr = self.bootstrap_addr()?;
        Ok(self
            .call(addr, ApiKey::ApiVersions, &ApiVersionsRequest {}, &[])?
            .0)
    }

    /// Creates a topic (partition count, replication factor, configs), then refreshes metadata.
    pub fn create_topic(
        &mut self,
        name: &str,
        partitions: u32,
        replication_factor: u16,
        configs: Vec<(String, String)>,
    ) -> Result<(), ClientError> {
        let addr = self.bootstrap_addr()?;
        let req = CreateTopicsRequest {
            topics: vec![CreatableTopic {
                name: name.to_string(),
                partitions,
                replication_factor,
                configs,
            }],
            timeout_ms: self.cfg.request_timeout.as_millis() as u32,
        };
        self.topic_command(addr, ApiKey::CreateTopics, &req)
    }

    /// Deletes a topic, then refreshes metadata.
    pub fn delete_topic(&mut self, name: &str) -> Result<(), ClientError> {
        let addr = self.bootstrap_addr()?;
        let req = DeleteTopicsRequest {
            topics: vec![name.to_string()],
            timeout_ms: self.cfg.request_timeout.as_millis() as u32,
        };
        self.topic_command(addr, ApiKey::DeleteTopics, &req)
    }

    /// Sends encoded batches to one partition's leader. `acks` 0 returns `None` at once.
    pub fn produce_raw(
        &mut self,
        topic: &str,
        partition: u32,
        batches: &[&[u8]],
        acks: i16,
        timeout: Duration,
    ) -> Result<Option<ProducePartitionResult>, ClientError> {
        let route = self.metadata.route(topic, partition)?;
        let len: usize = batches.iter().map(|b| b.len()).sum();
        let req = ProduceRequest {
            acks,
            timeout_ms: timeout.as_millis().min(u128::from(u32::MAX)) as u32,
            partitions: vec![ProducePartition {
                topic: topic.to_string(),
                partition,
                payload_offset: 0,
                payload_len: len as u32,
            }],
        };
        if acks == 0 {
            let conn = self.connection(route.addr)?;
            if let Err(e) = conn.send(ApiKey::Produce, &req, batches) {
                self.forget_connection(route.addr);
                return Err(e);
            }
            return Ok(None);
        }
        let (resp, _): (ProduceResponse, _) =
            self.call(route.addr, ApiKey::Produce, &req, batches)?;
        let r = resp
            .partitions
            .into_iter()
            .next()
            .ok_or_else(|| ClientError::Invalid("empty produce response".into()))?;
        if r.error_code != 0 {
            return Err(ClientError::broker(
                ErrorCode::from_code(r.error_code),
                r.message,
            ));
        }
        Ok(Some(r))
    }

    /// One fetch of one partition. Returns the partition result and the frame holding its
    /// batches (read them in place with [`crate::batch::BatchIter`]).
    pub fn fetch(
        &mut self,
        topic: &str,
        partition: u32,
        offset: u64,
        max_wait: Duration,
        min_bytes: u32,
        max_bytes: u32,
    ) -> Result<(FetchPartitionResult, ResponseFrame), ClientError> {
        let route = self.metadata.route(topic, partition)?;
        let req = FetchRequest {
            max_wait_ms: max_wait.as_millis().min(u128::from(u32::MAX)) as u32,
            min_bytes,
            max_bytes,
            partitions: vec![FetchPartition {
                topic: topic.to_string(),
                partition,
                offset,
                max_bytes,
            }],
        };
        // A long poll may legitimately take max_wait: give the read that much more time.
        let read_timeout = self.cfg.request_timeout + max_wait;
        if let Ok(c) = self.connection(route.addr) {
            c.set_read_timeout(Some(read_timeout));
        }
        let (resp, frame): (FetchResponse, _) = self.call(route.addr, ApiKey::Fetch, &req, &[])?;
        let r = resp
            .partitions
            .into_iter()
            .next()
            .ok_or_else(|| ClientError::Invalid("empty fetch response".into()))?;
        if r.error_code != 0 {
            return Err(ClientError::broker(
                ErrorCode::from_code(r.error_code),
                r.message,
            ));
        }
        Ok((r, frame))
    }

    /// Fetch version 1 of one partition at an isolation level: its result (last stable offset,
    /// aborted transactions under read_committed) and the frame holding its batches.
    #[allow(clippy::too_many_arguments)]
    pub fn fetch_isolated(
        &mut self,
        topic: &str,
        partition: u32,
        offset: u64,
        max_wait: Duration,
        min_bytes: u32,
        max_bytes: u32,
        isolation: crate::protocol::Isolation,
    ) -> Result<(FetchPartitionResultV1, ResponseFrame), ClientError> {
        let route = self.metadata.route(topic, partition)?;
        let req = FetchRequestV1 {
            fetch: FetchRequest {
                max_wait_ms: max_wait.as_millis().min(u128::from(u32::MAX)) as u32,
                min_bytes,
                max_bytes,
                partitions: vec![FetchPartition {
                    topic: topic.to_string(),
                    partition,
                    offset,
                    max_bytes,
                }],
            },
            isolation: isolation.to_wire(),
        };
        let read_timeout = self.cfg.request_timeout + max_wait;
        let c = self.connection(route.addr)?;
        c.set_read_timeout(Some(read_timeout));
        let result = c.call_version(ApiKey::Fetch, 1, &req, &[]);
        if result.is_err() {
            self.forget_connection(route.addr);
        }
        let (resp, frame): (FetchResponseV1, _) = result?;
        let r = resp
            .partitions
            .into_iter()
            .next()
            .ok_or_else(|| ClientError::Invalid("empty fetch response".into()))?;
        if r.result.error_code != 0 {
            return Err(ClientError::broker(
                ErrorCode::from_code(r.result.error_code),
                r.result.message,
            ));
        }
        Ok((r, frame))
    }

    /// ListOffsets for one partition: `EARLIEST_TIMESTAMP`, `LATEST_TIMESTAMP` or a time.
    /// Returns `None` when no record is at or after the time.
    pub fn list_offset(
        &mut self,
        topic: &str,
        partition: u32,
        timestamp: i64,
    ) -> Result<Option<u64>, ClientError> {
        let route = self.metadata.route(topic, partition)?;
        let req = ListOffsetsRequest {
            partitions: vec![ListOffsetsPartition {
                topic: topic.to_string(),
                partition,
                timestamp,
            }],
        };
        let (resp, _): (ListOffsetsResponse, _) =
            self.call(route.addr, ApiKey::ListOffsets, &req, &[])?;
        let r = resp
            .partitions
            .into_iter()
            .next()
            .ok_or_else(|| ClientError::Invalid("empty list-offsets response".into()))?;
        if r.error_code != 0 {
            return Err(ClientError::broker(
                ErrorCode::from_code(r.error_code),
                r.message,
            ));
        }
        Ok(u64::try_from(r.offset).ok())
    }
}

fn producer_id_answer(resp: InitProducerIdResponse) -> Result<(i64, i16), ClientError> {
    if resp.error_code != 0 {
        return Err(ClientError::broker(
            ErrorCode::from_code(resp.error_code),
            resp.message,
        ));
    }
    Ok((resp.producer_id, resp.producer_epoch))
}

fn reassignment_results(
    resp: ReassignPartitionsResponse,
) -> Result<Vec<ReassignmentResult>, ClientError> {
    if resp.error_code != 0 {
        return Err(ClientError::broker(
            ErrorCode::from_code(resp.error_code),
            resp.message,
        ));
    }
    Ok(resp.partitions)
}

fn topic_result(resp: TopicResults) -> Result<(), ClientError> {
    match resp.topics.into_iter().next() {
        Some(t) if t.error_code == 0 => Ok(()),
        Some(t) => Err(ClientError::broker(
            ErrorCode::from_code(t.error_code),
            t.message,
        )),
        None => Err(ClientError::Invalid("empty response".into())),
    }
}
