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
use crate::controller::metadata::ClusterMetadata;
use crate::controller::ControllerHandle;
use crate::log::{PartitionLog, SegmentConfig};
use crate::partition::group_commit::GroupCommit;
use crate::partition::tail_cache::TailCache;
use crate::partition::Partition;
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
        );
        Rc::new(Shard {
            id,
            count,
            cache: TailCache::new(cfg.tail_cache_bytes / count.max(1)),
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
            scan_bytes: crate::log::segment::SCAN_BYTES,
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
            self.cache.forget(p.cache_key);
            self.partitions.borrow_mut().remove(&*p.topic);
            let dir = p.dir();
            // Off the shard thread: removing a large partition takes a while.
            rill_shards::rt::spawn_blocking(move || {
                if let Err(e) = std::fs::remove_dir_all(&dir) {
                    log::warn!("removing {}: {e}", dir.display());
                }
                if let Some(topic_dir) = dir.parent() {
                    let _ = std::fs::remove_dir(topic_dir);
                }
            })
            .await;
        }
        for topic in md.topics.values() {
            for pi in &topic.partitions {
                if pi.leader != node || pi.shard as usize != self.id {
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
                        if let Err(e) = p.lead(pi.leader_epoch).await {
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
                    if info.leader_epoch != p.leader_epoch() {
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
    }
}
