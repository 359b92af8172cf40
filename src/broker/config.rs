//! What a broker is started with (built from CLI flags, `RILL_*` variables and `--config`).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::log::{FileReads, FsyncPolicy};
use crate::topic_config::TopicDefaults;

/// Default `--stray-log-retention-ms`: 7 days, time to notice the WARN and look.
pub const DEFAULT_STRAY_LOG_RETENTION_MS: u64 = 7 * 24 * 3600 * 1000;

/// Default `--max-request-memory-bytes`, per shard: two requests of the default
/// `--max-frame-bytes` at once.
pub const DEFAULT_MAX_REQUEST_MEMORY_BYTES: usize = 128 << 20;

/// `--max-delay-ms` default: 7 days.
pub const DEFAULT_MAX_DELAY_MS: u64 = 7 * 24 * 3600 * 1000;

/// `--replica-high-watermark-checkpoint-bytes` by default: at 50 MB/s on the bench VM, a
/// checkpoint every 4 MiB a shard took the p99.99 from 60-250 ms to 23-24 ms, and a 10 M
/// produce's per-request p99.99 from 0.28-1.75 s to 0.13-0.17 s with 2 to 1,000 partitions,
/// at the same or higher throughput (RESULTS.md, 2026-12-05 thirteenth).
pub const DEFAULT_HW_CHECKPOINT_BYTES: u64 = 4 << 20;

/// Partitions' checkpoint files a shard writes and syncs at once by default
/// (`--replica-high-watermark-checkpoint-threads`): one at a time. On the bench VM 16 at once
/// made a checkpoint of 1,000 partitions 2-10x shorter but raised a 10-partition produce's
/// per-request p99.99 from 140-191 to 228-303 ms (RESULTS.md, 2026-12-05 fourteenth).
pub const DEFAULT_HW_CHECKPOINT_THREADS: usize = 1;

#[derive(Debug, Clone)]
pub struct BrokerConfig {
    pub data_dir: PathBuf,
    /// Shard `i` listens on `listen.port() + i`.
    pub listen: SocketAddr,
    /// The host clients are told to connect to (defaults to the listen address).
    pub advertised_host: String,
    pub node_id: u32,
    /// One shard per entry, pinned to that cpu.
    pub cores: Vec<usize>,
    pub kafka_listen: Option<SocketAddr>,
    /// `--metrics-listen`: where Prometheus text is served (`None`: off, the default).
    pub metrics_listen: Option<SocketAddr>,
    pub fsync: FsyncPolicy,
    /// `--fsync-o-dsync`: with `always`, segments are written O_DSYNC (no fdatasync after).
    pub fsync_o_dsync: bool,
    /// Defaults of every topic setting (`--retention-ms`, `--segment-bytes`, ...).
    pub topic_defaults: TopicDefaults,
    /// How often each shard applies retention (`--retention-check-interval-ms`).
    pub retention_check_interval: Duration,
    /// `--producer-id-expiration-ms`: idle producers a partition forgets.
    pub producer_id_expiration: Duration,
    /// Each shard's log cleaner (compaction): `--log-cleaner-*`.
    pub log_cleaner: crate::partition::cleaner::CleanerConfig,
    /// How often each shard checkpoints high watermarks
    /// (`--replica-high-watermark-checkpoint-interval-ms`).
    pub hw_checkpoint_interval: Duration,
    /// Each shard also checkpoints once its group commit wrote this many bytes since its last
    /// checkpoint (`--replica-high-watermark-checkpoint-bytes`; `None`: by time only).
    pub hw_checkpoint_bytes: Option<u64>,
    /// Threads a checkpoint writes and syncs partitions' files on, at once
    /// (`--replica-high-watermark-checkpoint-threads`).
    pub hw_checkpoint_threads: usize,
    /// How often failed partitions are reopened (`--storage-retry-interval-ms`).
    pub storage_retry_interval: Duration,
    /// How long a topic directory unknown to the metadata stays set aside under `<data>/stray/`
    /// before it is removed (`--stray-log-retention-ms`; `None`: kept forever).
    pub stray_log_retention: Option<Duration>,
    /// How fetches read data not in the tail cache.
    pub file_reads: FileReads,
    pub index_interval_bytes: u32,
    pub preallocate: bool,
    /// Preallocation step of active segments (`--preallocate-step-bytes`).
    pub preallocate_step_bytes: u64,
    /// Largest single DMA write of a segment append (`--file-write-bytes`).
    pub file_write_bytes: usize,
    /// DMA writes in flight per partition (`--file-writes-in-flight`).
    pub file_writes_in_flight: usize,
    /// How removed log files give their blocks back (`--file-delete-*`).
    pub file_delete: crate::log::file_removal::RemovalPace,
    pub max_frame_bytes: usize,
    /// Request bytes the connections of one shard may hold at once, both listeners together
    /// (`--max-request-memory-bytes`, per shard); see `server::request_memory`.
    pub max_request_memory_bytes: usize,
    pub tail_cache_bytes: usize,
    /// `--tail-cache-pre-touch`: the tail cache's memory is backed at start.
    pub tail_cache_pre_touch: bool,
    /// The tail cache gives memory back while less is available (`--tail-cache-min-available-bytes`;
    /// 0: never).
    pub tail_cache_min_available_bytes: u64,
    /// Copy reads started ahead of their fetch, in bytes, split over the shards (0: none).
    pub file_read_ahead_bytes: usize,
    /// Upper bound on how long a fetch may long-poll, whatever the client asks.
    pub max_fetch_wait: Duration,
    /// Stored bytes a filtered fetch reads per partition at most before it answers with the
    /// position it reached (`--max-filter-scan-bytes`).
    pub max_filter_scan_bytes: usize,
    /// Longest delay a delayed message may ask for (`--max-delay-ms`).
    pub max_delay: Duration,
    /// Delayed messages one shard holds pending at most (`--max-delayed-per-shard`); each
    /// keeps about 100 bytes in memory (its batch stays on disk until due).
    pub max_delayed_per_shard: usize,
    /// Memory each shard keeps pending delayed messages in (`--delay-memory-bytes`); the
    /// others wait on disk only.
    pub delay_memory_bytes: usize,
    /// Upper bound on a produce's wait for its acknowledgement.
    pub max_produce_timeout: Duration,
    /// Connections one listener of one shard holds at most (native and Kafka counted apart).
    pub max_connections_per_shard: usize,
    /// Connections one client IP address may hold on one listener of one shard.
    pub max_connections_per_ip: usize,
    /// A connection that sends no request for this long is closed (a request being handled,
    /// a long-poll fetch included, is not idle).
    pub connection_idle_timeout: Duration,
    /// How long one response (a fetch's file ranges included) may take to drain into the
    /// client's socket before the connection is closed.
    pub fetch_send_timeout: Duration,
    /// Requests of one connection read and in progress whose replies are not yet written
    /// (`--max-in-flight-requests-per-connection`); past it the connection is not read.
    pub max_in_flight_requests_per_connection: usize,
    /// At start, the longest wait for the broker's ports to be released.
    pub port_release_wait: Duration,
    /// TLS on each listener (`--tls-listeners`, `--tls-cert`, `--tls-key`,
    /// `--tls-client-ca`): the server configuration, or `None` for plaintext.
    pub native_tls: Option<std::sync::Arc<rustls::ServerConfig>>,
    pub kafka_tls: Option<std::sync::Arc<rustls::ServerConfig>>,
    /// A TLS handshake not done within this is abandoned and the connection closed
    /// (`--tls-handshake-timeout-ms`).
    pub tls_handshake_timeout: Duration,
    /// TLS between brokers (`--inter-broker-tls-ca`, `--inter-broker-tls-server-name`): to
    /// other brokers' native listeners, and both ways on the controller quorum's port.
    pub inter_broker_tls: Option<crate::tls::PeerTls>,
    /// SASL mechanisms the Kafka listener requires a client to authenticate with
    /// (`--kafka-sasl-mechanisms`; empty: no authentication).
    pub kafka_sasl_mechanisms: Vec<String>,
    /// SASL mechanisms native clients authenticate with (`--native-sasl-mechanisms`; empty:
    /// no authentication).
    pub native_sasl_mechanisms: Vec<String>,
    /// The user and password this broker authenticates as to other brokers' native
    /// listeners, created at start if missing (`--inter-broker-sasl-username`,
    /// `RILL_INTER_BROKER_SASL_PASSWORD`).
    pub inter_broker_sasl: Option<(String, String)>,
    /// A connection not authenticated within this is closed (`--sasl-authentication-timeout-ms`).
    pub sasl_authentication_timeout: Duration,
    /// Principals (`User:<name>`) every ACL check lets through (`--super-users`).
    pub super_users: Vec<String>,
    pub max_partitions_per_topic: u32,
    /// Partition replicas the cluster holds per live shard at most
    /// (`--max-partitions-per-shard`); the same on every controller voter.
    pub max_partitions_per_shard: u32,
    /// Topics a client asks for in metadata are created when missing (`--auto-create-topics`,
    /// Kafka's `auto.create.topics.enable`).
    pub auto_create_topics: bool,
    /// Partitions of an auto-created topic (`--num-partitions`, Kafka's `num.partitions`).
    pub num_partitions: u32,
    /// Replication factor of an auto-created topic (`--default-replication-factor`).
    pub default_replication_factor: u16,
    /// Partitions of `__consumer_offsets`, which place group coordinators on shards.
    pub offsets_topic_partitions: u32,
    /// Commit records an offsets partition takes between two compactions.
    pub offsets_compact_every: usize,
    /// Partitions of `__transactions`, which place transaction coordinators
    /// (`--transaction-state-partitions`, Kafka's `transaction.state.log.num.partitions`).
    pub transaction_state_partitions: u32,
    /// The longest `transaction.timeout.ms` a producer may ask for
    /// (`--transaction-max-timeout-ms`, Kafka's `transaction.max.timeout.ms`).
    pub transaction_max_timeout_ms: u32,
    /// How long a transaction request that would be answered CONCURRENT_TRANSACTIONS is held
    /// for the id's last transaction to complete (`--transaction-concurrent-wait-ms`).
    pub transaction_concurrent_wait: Duration,
    /// An idle transactional id is forgotten after this long
    /// (`--transactional-id-expiration-ms`, Kafka's `transactional.id.expiration.ms`).
    pub transactional_id_expiration_ms: u64,
    /// Transactional ids one `__transactions` partition's coordinator keeps at most
    /// (`--max-transactional-ids-per-partition`).
    pub max_transactional_ids_per_partition: usize,
    /// Records a `__transactions` partition takes between two compactions
    /// (`--transaction-state-compact-every`).
    pub transaction_state_compact_every: usize,
    /// Members one group may have (`--group-max-size`, Kafka's `group.max.size`).
    pub group_max_size: usize,
    /// An empty group's first generation waits this long for more members after each join
    /// (`--group-initial-rebalance-delay-ms`, Kafka's `group.initial.rebalance.delay.ms`).
    pub group_initial_rebalance_delay: Duration,
    /// A KIP-848 consumer group member not heard from this long is removed
    /// (`--group-consumer-session-timeout-ms`, Kafka's `group.consumer.session.timeout.ms`).
    pub group_consumer_session_timeout: Duration,
    /// How often KIP-848 members are told to heartbeat
    /// (`--group-consumer-heartbeat-interval-ms`, Kafka's
    /// `group.consumer.heartbeat.interval.ms`).
    pub group_consumer_heartbeat_interval: Duration,
    /// The server-side assignors KIP-848 groups may ask for, the first the default
    /// (`--group-consumer-assignors`, Kafka's `group.consumer.assignors`).
    pub group_consumer_assignors: Vec<String>,
    /// Groups one shard coordinates at once (`--max-groups-per-shard`).
    pub max_groups_per_shard: usize,
    /// Partitions one group may hold committed offsets for (`--max-offsets-per-group`).
    pub max_offsets_per_group: usize,
    pub io_memory_bytes: usize,
    pub spin_before_park: Option<Duration>,
    /// The controller quorum (`--controller-voters`); empty: an embedded single voter.
    pub controller_voters: Vec<(u64, String)>,
    /// Where the controller transport listens (`--controller-listen`; `None`: this node's
    /// address in the voters list).
    pub controller_listen: Option<String>,
    /// `--controller-max-message-bytes`.
    pub controller_max_message_bytes: usize,
    /// `--process-roles`: false for `controller` alone (no shards, no listeners).
    pub broker_role: bool,
    /// `--process-roles`: false for `broker` alone (follows the quorum, not a voter).
    pub controller_role: bool,
    /// `--rack`: brokers of a cluster place a partition's replicas on distinct racks.
    pub rack: Option<String>,
    /// `--broker-session-timeout-ms`: a cluster member without an answered heartbeat for this
    /// long is fenced (and fences itself).
    pub broker_session_timeout: Duration,
    /// `--broker-heartbeat-interval-ms`.
    pub broker_heartbeat_interval: Duration,
    /// `--controlled-shutdown-timeout-ms`: on SIGTERM, how long a cluster member waits for
    /// the controller to move its leadership away before it stops anyway.
    pub controlled_shutdown_timeout: Duration,
}

impl BrokerConfig {
    /// Defaults for a broker on `listen` with `shards` shards; used by tests and the CLI.
    pub fn new(data_dir: PathBuf, listen: SocketAddr, cores: Vec<usize>) -> BrokerConfig {
        BrokerConfig {
            data_dir,
            advertised_host: listen.ip().to_string(),
            listen,
            node_id: 1,
            cores,
            kafka_listen: None,
            metrics_listen: None,
            fsync: FsyncPolicy::Always,
            fsync_o_dsync: true,
            topic_defaults: TopicDefaults::default(),
            retention_check_interval: Duration::from_secs(300),
            producer_id_expiration: Duration::from_secs(86_400),
            log_cleaner: Default::default(),
            hw_checkpoint_interval: Duration::from_secs(5),
            hw_checkpoint_bytes: None,
            hw_checkpoint_threads: DEFAULT_HW_CHECKPOINT_THREADS,
            storage_retry_interval: Duration::from_secs(5),
            stray_log_retention: Some(Duration::from_millis(DEFAULT_STRAY_LOG_RETENTION_MS)),
            file_reads: FileReads::Copy,
            index_interval_bytes: 4096,
            preallocate: true,
            preallocate_step_bytes: 16 << 20,
            file_write_bytes: crate::log::appender::WRITE_BYTES,
            file_writes_in_flight: crate::log::appender::WRITES_IN_FLIGHT,
            file_delete: crate::log::file_removal::RemovalPace::DEFAULT,
            max_frame_bytes: 64 << 20,
            max_request_memory_bytes: DEFAULT_MAX_REQUEST_MEMORY_BYTES,
            tail_cache_bytes: 64 << 20,
            tail_cache_pre_touch: false,
            tail_cache_min_available_bytes: 0,
            file_read_ahead_bytes: 64 << 20,
            max_fetch_wait: Duration::from_secs(30),
            max_filter_scan_bytes: 64 << 20,
            max_delay: Duration::from_millis(DEFAULT_MAX_DELAY_MS),
            max_delayed_per_shard: 10_000_000,
            delay_memory_bytes: 64 << 20,
            max_produce_timeout: Duration::from_secs(30),
            max_connections_per_shard: 10_000,
            max_connections_per_ip: 1_000,
            connection_idle_timeout: Duration::from_secs(600),
            fetch_send_timeout: Duration::from_secs(30),
            max_in_flight_requests_per_connection: 5,
            port_release_wait: Duration::from_secs(30),
            native_tls: None,
            kafka_tls: None,
            tls_handshake_timeout: Duration::from_secs(10),
            inter_broker_tls: None,
            kafka_sasl_mechanisms: Vec::new(),
            native_sasl_mechanisms: Vec::new(),
            inter_broker_sasl: None,
            sasl_authentication_timeout: Duration::from_secs(10),
            super_users: Vec::new(),
            max_partitions_per_topic: 10_000,
            max_partitions_per_shard: crate::controller::metadata::DEFAULT_MAX_PARTITIONS_PER_SHARD,
            auto_create_topics: true,
            num_partitions: 1,
            default_replication_factor: 1,
            offsets_topic_partitions: 8,
            offsets_compact_every: 10_000,
            transaction_state_partitions: 8,
            transaction_max_timeout_ms: 900_000,
            transaction_concurrent_wait: Duration::from_secs(1),
            transactional_id_expiration_ms: 7 * 24 * 3600 * 1000,
            max_transactional_ids_per_partition: 100_000,
            transaction_state_compact_every: 10_000,
            group_max_size: 1_000,
            group_initial_rebalance_delay: Duration::from_secs(3),
            group_consumer_session_timeout: Duration::from_millis(45_000),
            group_consumer_heartbeat_interval: Duration::from_millis(5_000),
            group_consumer_assignors: vec!["uniform".into(), "range".into()],
            max_groups_per_shard: 10_000,
            max_offsets_per_group: 100_000,
            io_memory_bytes: 10 << 20,
            spin_before_park: None,
            controller_voters: Vec::new(),
            controller_listen: None,
            controller_max_message_bytes: crate::controller::transport::DEFAULT_MAX_MESSAGE_BYTES,
            broker_role: true,
            controller_role: true,
            rack: None,
            broker_session_timeout: Duration::from_millis(
                crate::controller::cluster::DEFAULT_SESSION_TIMEOUT_MS,
            ),
            broker_heartbeat_interval: Duration::from_millis(
                crate::controller::cluster::DEFAULT_HEARTBEAT_INTERVAL_MS,
            ),
            controlled_shutdown_timeout: Duration::from_secs(30),
        }
    }

    /// The ports the broker's listeners take, each a range `(what, first, count)`: shard `i`
    /// of a listener is on its port + `i`. Refuses a range that runs past 65535 and two that
    /// share a port on one address: the shards' listeners set SO_REUSEPORT, so a Kafka range
    /// over the native one would bind without error and the kernel would hand each client to
    /// either protocol at random.
    pub fn check_listener_ports(&self, shards: usize) -> Result<(), String> {
        let mut ranges: Vec<(&str, SocketAddr, u32)> = Vec::new();
        if self.broker_role {
            ranges.push(("--listen", self.listen, shards as u32));
            if let Some(k) = self.kafka_listen {
                ranges.push(("--kafka-listen", k, shards as u32));
            }
        }
        if let Some(m) = self.metrics_listen {
            ranges.push(("--metrics-listen", m, 1));
        }
        let controller = self
            .controller_listen
            .as_deref()
            .and_then(|l| l.parse::<SocketAddr>().ok());
        if let Some(c) = controller {
            ranges.push(("--controller-listen", c, 1));
        }
        for (what, addr, count) in &ranges {
            if *count == 0 || u32::from(addr.port()) + count - 1 > u32::from(u16::MAX) {
                return Err(format!(
                    "{what} {addr}: {count} shards from port {} do not fit below 65536",
                    addr.port()
                ));
            }
        }
        for (i, (a_what, a, a_count)) in ranges.iter().enumerate() {
            for (b_what, b, b_count) in &ranges[i + 1..] {
                let same_host =
                    a.ip() == b.ip() || a.ip().is_unspecified() || b.ip().is_unspecified();
                let (a_first, b_first) = (u32::from(a.port()), u32::from(b.port()));
                if same_host && a_first < b_first + b_count && b_first < a_first + a_count {
                    return Err(format!(
                        "{a_what} {a} (ports {a_first}..={}) and {b_what} {b} (ports \
                         {b_first}..={}) overlap: shard i of the native and Kafka listeners \
                         listens on their port + i ({shards} ports each)",
                        a_first + a_count - 1,
                        b_first + b_count - 1
                    ));
                }
            }
        }
        Ok(())
    }
}
