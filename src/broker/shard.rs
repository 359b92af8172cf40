//! One shard's state: the partitions it owns, its tail cache and group commit, and the
//! metadata it last applied.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use rill_shards::Deadlines;

use super::config::BrokerConfig;
use crate::controller::cluster::MIN_INSYNC_REPLICAS;
use crate::controller::metadata::{ClusterMetadata, Command, PartitionInfo, TopicInfo};
use crate::controller::ControllerHandle;
use crate::log::{PartitionLog, SegmentConfig};
use crate::partition::group_commit::GroupCommit;
use crate::partition::tail_cache::TailCache;
use crate::partition::Partition;
use crate::replication::{IsrProposal, LeaderConfig, PartitionView};
use crate::topic_config::TopicSettings;

/// How far each shard has applied the controller's metadata, and which partitions it could
/// not open, shared across shards so that a CreateTopics answers only once every shard has
/// opened its new partitions, or says which could not be.
pub struct AppliedIndexes {
    indexes: Vec<AtomicU64>,
    /// (topic id, partition) -> why it cannot be opened. Control path only: a lock is fine.
    open_failures: Mutex<HashMap<(u64, u32), String>>,
}

impl AppliedIndexes {
    pub fn new(shards: usize) -> Arc<AppliedIndexes> {
        Arc::new(AppliedIndexes {
            indexes: (0..shards).map(|_| AtomicU64::new(0)).collect(),
            open_failures: Mutex::new(HashMap::new()),
        })
    }
    pub fn set(&self, shard: usize, index: u64) {
        self.indexes[shard].store(index, Ordering::Release);
    }
    pub fn all_at_least(&self, index: u64) -> bool {
        self.indexes
            .iter()
            .all(|a| a.load(Ordering::Acquire) >= index)
    }
    fn failures(&self) -> std::sync::MutexGuard<'_, HashMap<(u64, u32), String>> {
        self.open_failures.lock().unwrap_or_else(|e| e.into_inner())
    }
    /// Records why a partition could not be opened (`None`: it is open now).
    pub fn set_open_failure(&self, topic_id: u64, partition: u32, why: Option<String>) {
        match why {
            Some(w) => self.failures().insert((topic_id, partition), w),
            None => self.failures().remove(&(topic_id, partition)),
        };
    }
    /// Why the partition could not be opened, if it could not.
    pub fn open_failure(&self, topic_id: u64, partition: u32) -> Option<String> {
        self.failures().get(&(topic_id, partition)).cloned()
    }
    /// The partitions of a topic that could not be opened, with why.
    pub fn open_failures_of(&self, topic_id: u64) -> Vec<(u32, String)> {
        let mut v: Vec<_> = self
            .failures()
            .iter()
            .filter(|((t, _), _)| *t == topic_id)
            .map(|((_, p), w)| (*p, w.clone()))
            .collect();
        v.sort();
        v
    }
}

/// Topic name -> partition index -> the partition, where this shard owns it.
type PartitionMap = HashMap<Rc<str>, Vec<Option<Rc<Partition>>>>;

pub struct Shard {
    pub id: usize,
    pub count: usize,
    pub cfg: Arc<BrokerConfig>,
    pub controller: ControllerHandle,
    pub applied: Arc<AppliedIndexes>,
    pub deadlines: Deadlines,
    pub cache: TailCache,
    pub group_commit: Rc<GroupCommit>,
    pub metadata: RefCell<Arc<ClusterMetadata>>,
    partitions: RefCell<PartitionMap>,
    next_cache_key: Cell<u64>,
    /// Open connections of each listener, against `--max-connections-per-shard` and
    /// `--max-connections-per-ip` (counted per listener).
    pub native_conns: Rc<crate::net::conn_limits::ListenerConns>,
    pub kafka_conns: Rc<crate::net::conn_limits::ListenerConns>,
    /// A metadata apply is running, and the event its end fires.
    applying: Cell<bool>,
    apply_done: event_listener::Event,
    /// The consumer groups this shard coordinates.
    pub groups: super::group_host::GroupHost,
    /// `--max-request-memory-bytes`: request bytes this shard's connections hold.
    pub request_memory: Rc<crate::net::request_memory::RequestMemory>,
    /// Present with `--file-reads sendfile`.
    pub sendfile: Option<crate::net::sendfile::SendfileWorker>,
    /// Delayed messages waiting for their time (`crate::delay`).
    pub delays: crate::delay::queue::DelayQueue,
    /// Requests and errors per listener and API, produce and fetch latency (metrics; the
    /// rest of a scrape is read from the state it describes, `super::metrics`).
    pub metrics: crate::metrics::RequestMetrics,
    /// How long each high-watermark checkpoint of the shard's partitions took (metrics).
    pub checkpoint_duration: crate::metrics::Histogram,
    /// Fired when a partition's replication role changes (the replica fetcher looks again).
    pub replication_changed: event_listener::Event,
    /// When this shard last proposed creating `__consumer_offsets` or `__transactions` (a
    /// cluster creates them lazily).
    pub internal_topic_create: super::internal_topics::CreateThrottle,
    /// Producer ids this shard reserved from the controller and has not handed out.
    pub producer_ids: super::producer_ids::ProducerIdBlock,
    /// The transaction coordinators of the `__transactions` partitions this shard leads.
    pub txns: super::txn_host::TxnHost,
    /// Clients' use measured against their quotas on this shard (`super::quotas`).
    pub quota_windows: super::quotas::QuotaWindows,
}

/// Where a topic's partition lives on disk. The topic id keeps a re-created topic from
/// finding the files of a deleted one.
pub fn partition_dir(
    data_dir: &std::path::Path,
    topic: &str,
    topic_id: u64,
    partition: u32,
) -> PathBuf {
    data_dir
        .join("topics")
        .join(format!("{topic}~{topic_id}"))
        .join(partition.to_string())
}

impl Shard {
    pub fn new(
        id: usize,
        count: usize,
        cfg: Arc<BrokerConfig>,
        controller: ControllerHandle,
        applied: Arc<AppliedIndexes>,
        deadlines: Deadlines,
        sendfile: Option<crate::net::sendfile::SendfileWorker>,
    ) -> Rc<Shard> {
        let native_conns = crate::net::conn_limits::ListenerConns::new(
            "native",
            cfg.max_connections_per_shard,
            cfg.max_connections_per_ip,
        );
        let kafka_conns = crate::net::conn_limits::ListenerConns::new(
            "Kafka",
            cfg.max_connections_per_shard,
            cfg.max_connections_per_ip,
        );
        let groups = super::group_host::GroupHost::new(
            crate::group::GroupConfig {
                max_members: cfg.group_max_size,
                max_offsets: cfg.max_offsets_per_group,
                initial_rebalance_delay_ms: cfg.group_initial_rebalance_delay.as_millis() as u64,
                ..crate::group::GroupConfig::default()
            },
            cfg.max_groups_per_shard,
        )
        .with_consumer_config(crate::group::consumer_group::ConsumerGroupConfig {
            session_timeout_ms: cfg.group_consumer_session_timeout.as_millis() as u64,
            heartbeat_interval_ms: cfg.group_consumer_heartbeat_interval.as_millis() as u64,
            assignors: cfg.group_consumer_assignors.clone(),
            max_members: cfg.group_max_size,
            incarnation: 0,
        });
        let txns =
            super::txn_host::TxnHost::new(crate::transactions::coordinator::CoordinatorConfig {
                max_timeout_ms: cfg.transaction_max_timeout_ms,
                id_expiration_ms: cfg.transactional_id_expiration_ms,
                max_transactional_ids: cfg.max_transactional_ids_per_partition,
                ..Default::default()
            });
        Rc::new(Shard {
            id,
            count,
            cache: TailCache::new(cfg.tail_cache_bytes / count.max(1))
                .with_read_ahead(cfg.file_read_ahead_bytes / count.max(1)),
            request_memory: crate::net::request_memory::RequestMemory::new(
                cfg.max_request_memory_bytes,
            ),
            group_commit: GroupCommit::new(cfg.fsync),
            cfg,
            controller,
            applied,
            deadlines,
            metadata: RefCell::new(Arc::new(ClusterMetadata::default())),
            partitions: RefCell::new(HashMap::new()),
            next_cache_key: Cell::new(1),
            native_conns,
            kafka_conns,
            applying: Cell::new(false),
            apply_done: event_listener::Event::new(),
            groups,
            sendfile,
            delays: Default::default(),
            metrics: Default::default(),
            checkpoint_duration: crate::metrics::Histogram::latency(),
            replication_changed: event_listener::Event::new(),
            internal_topic_create: Default::default(),
            producer_ids: Default::default(),
            txns,
            quota_windows: Default::default(),
        })
    }

    pub fn partition(&self, topic: &str, index: u32) -> Option<Rc<Partition>> {
        self.partitions
            .borrow()
            .get(topic)
            .and_then(|v| v.get(index as usize).cloned().flatten())
    }

    pub fn all_partitions(&self) -> Vec<Rc<Partition>> {
        self.partitions
            .borrow()
            .values()
            .flat_map(|v| v.iter().flatten().cloned())
            .collect()
    }

    fn segment_config(&self) -> SegmentConfig {
        SegmentConfig {
            segment_bytes: self.cfg.topic_defaults.segment_bytes,
            segment_age: None,
            index_interval_bytes: self.cfg.index_interval_bytes,
            preallocate: self.cfg.preallocate,
            preallocate_step: self.cfg.preallocate_step_bytes,
            write_bytes: self.cfg.file_write_bytes,
            writes_in_flight: self.cfg.file_writes_in_flight,
            scan_bytes: crate::log::segment::SCAN_BYTES,
            sync_writes: self.cfg.fsync.sync_writes(self.cfg.fsync_o_dsync),
        }
    }

    /// Retries what failed in storage: reopens partitions whose disk failed (they take writes
    /// again once it is back) and opens again those that could not be opened.
    pub async fn retry_storage(self: &Rc<Self>) {
        for p in self.all_partitions() {
            if !p.can_retry() {
                continue;
            }
            if let Err(e) = p.try_reopen(&self.cache).await {
                log::debug!("{}-{}: still failed: {e}", p.topic, p.index);
            }
        }
        let unopened = {
            let md = self.metadata.borrow();
            md.topics.values().any(|t| {
                t.partitions.iter().any(|pi| {
                    pi.leader == self.cfg.node_id
                        && pi.shard as usize == self.id
                        && self.applied.open_failure(t.id, pi.partition).is_some()
                })
            })
        };
        if unopened {
            let md = self.metadata.borrow().clone();
            self.apply_metadata(md).await;
        }
    }

    /// Brings the shard's partitions in line with `md`: opens new ones placed here, drops and
    /// deletes the files of those whose topic is gone. Runs in metadata order, one at a time.
    pub async fn apply_metadata(self: &Rc<Self>, md: Arc<ClusterMetadata>) {
        // One apply at a time: two could open the same partition twice (opening awaits).
        loop {
            if !self.applying.get() {
                break;
            }
            let done = self.apply_done.listen();
            if !self.applying.get() {
                break;
            }
            done.await;
        }
        self.applying.set(true);
        // Never go back to an older view than one already applied.
        let current = self.metadata.borrow().clone();
        let md = if md.applied_index < current.applied_index {
            current
        } else {
            md
        };
        self.apply_metadata_now(md).await;
        self.applying.set(false);
        self.apply_done.notify(usize::MAX);
    }

    async fn apply_metadata_now(self: &Rc<Self>, md: Arc<ClusterMetadata>) {
        let node = self.cfg.node_id;
        // Deletions first: a deleted and re-created topic gets a new id, so its new files
        // never collide with the old ones.
        let gone: Vec<Rc<Partition>> = {
            let parts = self.partitions.borrow();
            parts
                .iter()
                .filter(|(name, v)| {
                    let id = v.iter().flatten().next().map(|p| p.topic_id);
                    md.topic(name).map(|t| t.id) != id
                })
                .flat_map(|(_, v)| v.iter().flatten().cloned())
                .collect()
        };
        for p in gone {
            p.mark_deleted();
            self.partitions.borrow_mut().remove(&*p.topic);
            self.remove_files(&p).await;
        }
        // Replicas moved off this broker by a reassignment: stop serving and following them,
        // then remove their files (the new replicas were in the ISR before this happened).
        let moved_off: Vec<Rc<Partition>> = self
            .all_partitions()
            .into_iter()
            .filter(|p| {
                md.topic(&p.topic)
                    .and_then(|t| t.partitions.get(p.index as usize))
                    .is_some_and(|info| !info.replicas.contains(&node))
            })
            .collect();
        for p in moved_off {
            log::info!(
                "shard {}: {}-{}: no longer a replica here, removing it",
                self.id,
                p.topic,
                p.index
            );
            p.leave_replica_set();
            if let Some(v) = self.partitions.borrow_mut().get_mut(&*p.topic) {
                if let Some(slot) = v.get_mut(p.index as usize) {
                    *slot = None;
                }
            }
            self.remove_files(&p).await;
        }
        for topic in md.topics.values() {
            for pi in &topic.partitions {
                // The leader's shard is in the plan; a follower replica lives on the shard it
                // would lead from.
                let follows_here = pi.leader != node
                    && pi.replicas.len() > 1
                    && pi.replicas.contains(&node)
                    && md.replica_shard(topic.id, pi, node) as usize == self.id;
                let leads_here = pi.leader == node && pi.shard as usize == self.id;
                if !leads_here && !follows_here {
                    continue;
                }
                if self.partition(&topic.name, pi.partition).is_some() {
                    continue;
                }
                let dir = partition_dir(&self.cfg.data_dir, &topic.name, topic.id, pi.partition);
                match PartitionLog::open(dir.clone(), self.segment_config()).await {
                    Ok((log, rec)) => {
                        log::info!(
                            "shard {}: opened {}-{} ({} segments, log end {}{})",
                            self.id,
                            topic.name,
                            pi.partition,
                            rec.segments,
                            log.next_offset(),
                            if rec.truncated_bytes > 0 {
                                format!(", cut {} torn bytes", rec.truncated_bytes)
                            } else {
                                String::new()
                            }
                        );
                        self.applied.set_open_failure(topic.id, pi.partition, None);
                        let key = self.next_cache_key.get();
                        self.next_cache_key.set(key + 1);
                        let name: Rc<str> = Rc::from(topic.name.as_str());
                        let p = Rc::new(Partition::new(
                            name.clone(),
                            topic.id,
                            pi.partition,
                            key,
                            log,
                            self.cfg.fsync,
                            TopicSettings::resolve(&topic.configs, &self.cfg.topic_defaults),
                        ));
                        if pi.replicas.len() > 1 {
                            p.start_replicated();
                        }
                        let started = if leads_here {
                            p.lead(pi.leader_epoch).await
                        } else {
                            p.load_epochs().await.map(|_| ())
                        };
                        let started = match started {
                            Ok(()) => p.load_producer_state(&self.cache).await,
                            Err(e) => Err(e),
                        };
                        if let Err(e) = started {
                            log::error!("shard {}: cannot open {}: {e}", self.id, dir.display());
                            let failure = Some(e.to_string());
                            self.applied
                                .set_open_failure(topic.id, pi.partition, failure);
                            continue;
                        }
                        let mut parts = self.partitions.borrow_mut();
                        let v = parts.entry(name).or_default();
                        if v.len() <= pi.partition as usize {
                            v.resize(pi.partition as usize + 1, None);
                        }
                        v[pi.partition as usize] = Some(p);
                    }
                    Err(e) => {
                        log::error!("shard {}: cannot open {}: {e}", self.id, dir.display());
                        self.applied
                            .set_open_failure(topic.id, pi.partition, Some(e.to_string()));
                    }
                }
            }
        }
        // Altered topic configs reach the partitions already open.
        for p in self.all_partitions() {
            if let Some(t) = md.topic(&p.topic) {
                if let Some(info) = t.partitions.get(p.index as usize) {
                    p.set_decommissioned(info.decommissioned);
                    let placed_here =
                        md.replica_shard(t.id, info, self.cfg.node_id) as usize == self.id;
                    let replicated =
                        info.replicas.len() > 1 || p.is_follower() || p.is_replicated_leader();
                    if replicated && placed_here {
                        self.sync_role(&p, t, info).await;
                    } else if replicated {
                        // Another shard holds it now; this one serves nothing of it.
                    } else if info.leader_epoch != p.leader_epoch() {
                        if let Err(e) = p.lead(info.leader_epoch).await {
                            log::error!("shard {}: {}-{}: {e}", self.id, p.topic, p.index);
                        }
                    }
                }
                let s = TopicSettings::resolve(&t.configs, &self.cfg.topic_defaults);
                if s != p.settings() {
                    p.set_settings(s);
                }
            }
        }
        self.applied.set(self.id, md.applied_index);
        *self.metadata.borrow_mut() = md;
        super::coordination::sync(self);
        super::groups::topics_changed(self);
        self.replication_changed.notify(usize::MAX);
    }

    /// Removes a partition's files (and its topic's directory once empty), off the shard
    /// thread: removing a large partition takes a while (its blocks are freed behind, in
    /// steps: `file_removal`).
    async fn remove_files(&self, p: &Partition) {
        self.cache.forget(p.cache_key);
        let dir = p.dir();
        rill_shards::rt::spawn_blocking(move || {
            if let Err(e) = crate::log::file_removal::remove_dir_all(&dir) {
                log::warn!("removing {}: {e}", dir.display());
            }
            if let Some(topic_dir) = dir.parent() {
                let _ = std::fs::remove_dir(topic_dir);
            }
        })
        .await;
    }

    /// Brings a replicated partition's role in line with the metadata: leader (at the
    /// metadata's epoch, with its ISR), follower of the metadata's leader, or back to one
    /// replica.
    async fn sync_role(&self, p: &Rc<Partition>, t: &TopicInfo, info: &PartitionInfo) {
        let node = self.cfg.node_id;
        let now = crate::clock::now_ms().max(0) as u64;
        let view = PartitionView {
            leader: info.leader,
            leader_epoch: info.leader_epoch,
            partition_epoch: info.partition_epoch,
            replicas: info.replicas.clone(),
            isr: info.isr.clone(),
        };
        let fail = |e: String| log::error!("shard {}: {}-{}: {e}", self.id, p.topic, p.index);
        if info.leader == node {
            let replicated = info.replicas.len() > 1;
            let current = p.leader_epoch() == info.leader_epoch
                && !p.is_follower()
                && replicated == p.is_replicated_leader();
            if current {
                p.on_partition_view(&view, now);
                return;
            }
            if p.is_follower() {
                p.wait_durable(&self.deadlines).await;
            }
            if let Err(e) = p.lead(info.leader_epoch).await {
                return fail(e.to_string());
            }
            if replicated {
                match p.become_leader(node, self.leader_config(t), &view, now) {
                    Ok(()) => log::info!(
                        "shard {}: {}-{}: leader at epoch {}, ISR {:?}",
                        self.id,
                        p.topic,
                        p.index,
                        info.leader_epoch,
                        info.isr
                    ),
                    Err(e) => fail(e.to_string()),
                }
            } else {
                p.become_single();
            }
        } else if info.replicas.contains(&node) && info.replicas.len() > 1 {
            if p.following() == Some((info.leader, info.leader_epoch)) {
                return;
            }
            p.wait_durable(&self.deadlines).await;
            if let Err(e) = p.load_epochs().await {
                return fail(e.to_string());
            }
            p.become_follower(info.leader, info.leader_epoch);
            log::info!(
                "shard {}: {}-{}: following broker {} at epoch {}",
                self.id,
                p.topic,
                p.index,
                info.leader,
                info.leader_epoch
            );
        }
    }

    /// The leader's settings for a topic: `min.insync.replicas` and
    /// `replica.lag.time.max.ms` over `--replica-lag-time-max-ms`.
    pub fn leader_config(&self, t: &TopicInfo) -> LeaderConfig {
        let num = |k: &str| t.configs.get(k).and_then(|v| v.trim().parse::<u64>().ok());
        LeaderConfig {
            min_insync_replicas: num(MIN_INSYNC_REPLICAS).map_or(1, |n| n as usize),
            replica_lag_time_max_ms: TopicSettings::resolve(&t.configs, &self.cfg.topic_defaults)
                .replica_lag_time_max_ms,
            isr_proposal_retry_ms: ISR_PROPOSAL_RETRY_MS,
        }
    }

    /// Every [`REPLICATION_TICK`]: leaders check their followers' lag, and the ISR changes
    /// they propose go to the controller (acted on once the metadata shows them).
    pub async fn replication_loop(self: Rc<Self>) {
        loop {
            let deadline = std::time::Instant::now() + REPLICATION_TICK;
            self.deadlines.sleep_until(deadline).await;
            let now = crate::clock::now_ms().max(0) as u64;
            for p in self.all_partitions() {
                if !p.is_replicated_leader() {
                    continue;
                }
                p.replication_tick(now);
                for proposal in p.take_isr_proposals() {
                    self.propose_isr(&p, proposal);
                }
            }
        }
    }

    fn propose_isr(&self, p: &Rc<Partition>, proposal: IsrProposal) {
        log::info!(
            "shard {}: {}-{}: proposing ISR {:?}",
            self.id,
            p.topic,
            p.index,
            proposal.isr
        );
        let rx = self.controller.propose(Command::AlterPartition {
            topic: p.topic.to_string(),
            partition: p.index,
            leader: self.cfg.node_id,
            leader_epoch: proposal.leader_epoch,
            partition_epoch: proposal.partition_epoch,
            isr: proposal.isr,
        });
        let p = p.clone();
        rill_shards::rt::spawn_local(async move {
            if let Ok(Err(e)) = rx.recv_async().await {
                log::info!("{}-{}: ISR change refused: {e}", p.topic, p.index);
                p.on_isr_proposal_refused(e.code());
            }
        })
        .detach();
    }
}

/// How often leaders check their followers' lag.
pub const REPLICATION_TICK: std::time::Duration = std::time::Duration::from_millis(100);
/// An ISR proposal neither answered nor visible in the metadata this long is sent again.
pub const ISR_PROPOSAL_RETRY_MS: u64 = 5_000;
