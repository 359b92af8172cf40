//! The command line, exactly as DESIGN.md names it. Every flag may also come from a
//! `RILL_*` environment variable or a `--config FILE` (TOML) key of the same name.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::logging::LogFormat;

#[derive(Parser, Debug)]
#[command(
    name = "rill",
    version,
    about = "rill: a persistent, partitioned log broker"
)]
pub struct Cli {
    /// Broker to talk to (any shard of any broker).
    #[arg(
        short = 'b',
        long,
        global = true,
        env = "RILL_BOOTSTRAP",
        default_value = "127.0.0.1:9292"
    )]
    pub bootstrap: String,
    /// Connect over TLS, trusting the CAs of this PEM file.
    #[arg(long, global = true, env = "RILL_TLS_CA", value_name = "FILE")]
    pub tls_ca: Option<PathBuf>,
    /// With --tls-ca: the client certificate (PEM) presented for mutual TLS.
    #[arg(long, global = true, env = "RILL_TLS_CLIENT_CERT", value_name = "FILE")]
    pub tls_client_cert: Option<PathBuf>,
    /// The private key of --tls-client-cert (PEM).
    #[arg(long, global = true, env = "RILL_TLS_CLIENT_KEY", value_name = "FILE")]
    pub tls_client_key: Option<PathBuf>,
    /// With --tls-ca: the name the broker's certificate must carry (default: the address
    /// connected to, which must then be an IP address in the certificate).
    #[arg(long, global = true, env = "RILL_TLS_SERVER_NAME", value_name = "NAME")]
    pub tls_server_name: Option<String>,
    /// Authenticate with this SASL mechanism (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512) to a
    /// broker whose native listener requires it (--native-sasl-mechanisms).
    #[arg(
        long,
        global = true,
        env = "RILL_SASL_MECHANISM",
        value_name = "MECHANISM"
    )]
    pub sasl_mechanism: Option<String>,
    /// With --sasl-mechanism: the user.
    #[arg(long, global = true, env = "RILL_SASL_USERNAME", value_name = "USER")]
    pub sasl_username: Option<String>,
    /// With --sasl-mechanism: the password (set RILL_SASL_PASSWORD rather than the flag:
    /// command lines are visible to other users of the host).
    #[arg(
        long,
        global = true,
        env = "RILL_SASL_PASSWORD",
        value_name = "PASSWORD",
        hide_env_values = true
    )]
    pub sasl_password: Option<String>,
    /// TOML file with flag values (keys are flag names, e.g. `fsync = "never"`).
    #[arg(long = "config", value_name = "FILE")]
    pub config_file: Option<PathBuf>,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run a broker.
    Broker(Box<BrokerArgs>),
    /// Create, list, describe and delete topics.
    #[command(subcommand)]
    Topic(TopicCommand),
    /// Produce stdin lines as messages.
    Produce(ProduceArgs),
    /// Print messages, one value per line.
    Consume(ConsumeArgs),
    /// Consumer groups.
    #[command(subcommand)]
    Group(GroupCommand),
    /// The cluster.
    #[command(subcommand)]
    Cluster(ClusterCommand),
    /// Host checks.
    #[command(subcommand)]
    Tune(TuneCommand),
    /// Users Kafka clients authenticate as (SASL SCRAM and PLAIN).
    #[command(subcommand)]
    User(UserCommand),
    /// ACLs (Kafka's model; enforced on the Kafka listener when it authenticates).
    #[command(subcommand)]
    Acl(AclCommand),
    /// Client quotas: produce and fetch byte rates and a request rate per user or client id.
    #[command(subcommand)]
    Quota(QuotaCommand),
}

#[derive(Subcommand, Debug)]
pub enum QuotaCommand {
    /// Set (or with --remove, remove) quotas of a user, a client id, or both.
    Set {
        /// The user (a Kafka listener principal's name) the quota applies to.
        #[arg(long, conflicts_with = "user_default")]
        user: Option<String>,
        /// Every user without a quota of its own.
        #[arg(long)]
        user_default: bool,
        /// The client id the quota applies to.
        #[arg(long, conflicts_with = "client_id_default")]
        client_id: Option<String>,
        /// Every client id without a quota of its own.
        #[arg(long)]
        client_id_default: bool,
        /// Bytes per second of record batches produced (per shard: each is a Kafka node).
        #[arg(long)]
        producer_byte_rate: Option<f64>,
        /// Bytes per second of records fetched (per shard).
        #[arg(long)]
        consumer_byte_rate: Option<f64>,
        /// Requests per second (per shard).
        #[arg(long)]
        request_rate: Option<f64>,
        /// Quota keys to remove (producer_byte_rate, consumer_byte_rate, request_rate).
        #[arg(long)]
        remove: Vec<String>,
    },
    /// Every entity's quotas.
    List,
}

/// Which resources an ACL command names (one of them), as Kafka's `kafka-acls` flags.
#[derive(Args, Debug, Clone, Default)]
pub struct AclResource {
    #[arg(long)]
    pub topic: Option<String>,
    #[arg(long)]
    pub group: Option<String>,
    #[arg(long)]
    pub transactional_id: Option<String>,
    /// The cluster resource.
    #[arg(long)]
    pub cluster: bool,
    /// literal or prefixed (add); any, match, literal or prefixed (list, remove).
    #[arg(long)]
    pub resource_pattern_type: Option<String>,
}

#[derive(Subcommand, Debug)]
pub enum AclCommand {
    /// Allow or deny principals operations on a resource (one binding per principal, host
    /// and operation).
    Add {
        #[command(flatten)]
        resource: AclResource,
        /// Principals allowed, e.g. User:alice or User:* (repeatable).
        #[arg(long)]
        allow_principal: Vec<String>,
        /// Principals denied (repeatable).
        #[arg(long)]
        deny_principal: Vec<String>,
        /// Hosts the bindings apply to (repeatable; default: every host, `*`).
        #[arg(long)]
        host: Vec<String>,
        /// READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS,
        /// CLUSTER_ACTION, IDEMPOTENT_WRITE or ALL (repeatable).
        #[arg(long, required = true)]
        operation: Vec<String>,
    },
    /// List the bindings (all, or those of a resource and principal).
    List {
        #[command(flatten)]
        resource: AclResource,
        #[arg(long)]
        principal: Option<String>,
    },
    /// Remove the bindings of a resource and/or principal (at least one of them).
    Remove {
        #[command(flatten)]
        resource: AclResource,
        #[arg(long)]
        principal: Option<String>,
        #[arg(long)]
        operation: Option<String>,
    },
}

#[derive(Subcommand, Debug)]
pub enum UserCommand {
    /// Create a user, or set its password (salted and iterated; never stored in plaintext).
    Create {
        name: String,
        #[arg(long, env = "RILL_USER_PASSWORD")]
        password: String,
        /// SCRAM-SHA-256, SCRAM-SHA-512 or all.
        #[arg(long, default_value = "all")]
        mechanism: String,
        /// PBKDF2 iterations (4096..=16384, Kafka's bounds).
        #[arg(long, default_value_t = 4096)]
        iterations: u32,
    },
    /// Delete a user (its credentials for --mechanism).
    Delete {
        name: String,
        #[arg(long, default_value = "all")]
        mechanism: String,
    },
    /// List users and their mechanisms.
    List,
}

#[derive(Args, Debug, Clone)]
pub struct BrokerArgs {
    /// TOML file with flag values (keys are flag names, e.g. `fsync = "never"`).
    #[arg(long = "config", value_name = "FILE")]
    pub config_file: Option<PathBuf>,
    #[arg(long, env = "RILL_DATA_DIR", default_value = "./rill-data")]
    pub data_dir: PathBuf,
    /// Native protocol address of shard 0; shard i listens on PORT + i.
    #[arg(long, env = "RILL_LISTEN", default_value = "127.0.0.1:9292")]
    pub listen: String,
    /// Host advertised to clients (default: the listen host).
    #[arg(long, env = "RILL_ADVERTISED_HOST")]
    pub advertised_host: Option<String>,
    #[arg(long, env = "RILL_NODE_ID", default_value_t = 1)]
    pub node_id: u32,
    /// Number of shards, pinned to the first N available cores (default: one per core).
    #[arg(long, env = "RILL_SHARDS", conflicts_with = "cores")]
    pub shards: Option<usize>,
    /// Cores to run shards on, e.g. 0,2,4 or 0-3.
    #[arg(long, env = "RILL_CORES")]
    pub cores: Option<String>,
    /// Where this voter's controller transport listens (default: its own address in
    /// --controller-voters).
    #[arg(long, env = "RILL_CONTROLLER_LISTEN")]
    pub controller_listen: Option<String>,
    /// ID@HOST:PORT,... of the controller quorum: 3 or 5 voters, the same list on every one
    /// (default: this broker alone, an embedded single voter).
    #[arg(long, env = "RILL_CONTROLLER_VOTERS")]
    pub controller_voters: Option<String>,
    /// What this process runs, as KRaft's process.roles: broker,controller (a broker with a
    /// controller voter) or controller (a voter only). broker alone (following a quorum it
    /// is not part of) is not built yet.
    #[arg(long, env = "RILL_PROCESS_ROLES", default_value = "broker,controller")]
    pub process_roles: String,
    /// Largest message between controller voters (a raft append or snapshot, a forwarded
    /// proposal), sent or accepted; a larger one is not sent, and a connection announcing
    /// one is closed.
    #[arg(long, env = "RILL_CONTROLLER_MAX_MESSAGE_BYTES", default_value_t = crate::controller::transport::DEFAULT_MAX_MESSAGE_BYTES)]
    pub controller_max_message_bytes: usize,
    /// This broker's rack (with --controller-voters): a partition's replicas go on distinct
    /// racks while there are racks to use.
    #[arg(long, env = "RILL_RACK")]
    pub rack: Option<String>,
    /// With --controller-voters: the active controller fences a broker whose last heartbeat
    /// is older than this (it leads nothing until it heartbeats again), and a broker whose
    /// heartbeats got no answer for this long stops acknowledging produces (Kafka's
    /// broker.session.timeout.ms).
    #[arg(long, env = "RILL_BROKER_SESSION_TIMEOUT_MS", default_value_t = crate::controller::cluster::DEFAULT_SESSION_TIMEOUT_MS)]
    pub broker_session_timeout_ms: u64,
    /// With --controller-voters: how often a broker heartbeats to the active controller
    /// (Kafka's broker.heartbeat.interval.ms); below the session timeout.
    #[arg(long, env = "RILL_BROKER_HEARTBEAT_INTERVAL_MS", default_value_t = crate::controller::cluster::DEFAULT_HEARTBEAT_INTERVAL_MS)]
    pub broker_heartbeat_interval_ms: u64,
    /// A follower that has not caught up with its leader's log end for this long leaves the
    /// ISR (Kafka's replica.lag.time.max.ms; the topic setting of that name overrides it).
    #[arg(long, env = "RILL_REPLICA_LAG_TIME_MAX_MS", default_value_t = crate::replication::DEFAULT_REPLICA_LAG_TIME_MAX_MS)]
    pub replica_lag_time_max_ms: u64,
    /// With --controller-voters: on SIGTERM the broker asks the controller to move its
    /// partition leadership away and waits at most this long for it before stopping.
    #[arg(
        long,
        env = "RILL_CONTROLLED_SHUTDOWN_TIMEOUT_MS",
        default_value_t = 30_000
    )]
    pub controlled_shutdown_timeout_ms: u64,
    /// Kafka protocol address of shard 0, or `off`.
    #[arg(long, env = "RILL_KAFKA_LISTEN", default_value = "127.0.0.1:9092")]
    pub kafka_listen: String,
    /// Listeners that speak TLS: `native`, `kafka`, both (`native,kafka`) or `none`.
    /// Defaults to both when --tls-cert is given. The others stay plaintext.
    #[arg(long, env = "RILL_TLS_LISTENERS", value_name = "LIST")]
    pub tls_listeners: Option<String>,
    /// The broker's certificate chain (PEM, the leaf first), for its TLS listeners.
    #[arg(long, env = "RILL_TLS_CERT", value_name = "FILE")]
    pub tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM: PKCS#8, PKCS#1 or SEC1).
    #[arg(long, env = "RILL_TLS_KEY", value_name = "FILE")]
    pub tls_key: Option<PathBuf>,
    /// CAs (PEM) that clients' certificates must chain to: mutual TLS, a client without
    /// such a certificate is refused during the handshake.
    #[arg(long, env = "RILL_TLS_CLIENT_CA", value_name = "FILE")]
    pub tls_client_ca: Option<PathBuf>,
    /// A TLS handshake not finished within this many ms is abandoned and its connection
    /// closed.
    #[arg(long, env = "RILL_TLS_HANDSHAKE_TIMEOUT_MS", default_value_t = 10_000)]
    pub tls_handshake_timeout_ms: u64,
    /// CAs (PEM) other brokers' certificates must chain to: this broker fetches from
    /// leaders and sends transaction markers over TLS, presenting --tls-cert when a native
    /// listener asks for a client certificate (--tls-client-ca), and the controller quorum's
    /// port speaks mutual TLS with these CAs. Needed by a cluster whose native listeners
    /// speak TLS.
    #[arg(long, env = "RILL_INTER_BROKER_TLS_CA", value_name = "FILE")]
    pub inter_broker_tls_ca: Option<PathBuf>,
    /// The name other brokers' certificates must carry (default: the host each registered,
    /// which must then be an IP address in its certificate).
    #[arg(long, env = "RILL_INTER_BROKER_TLS_SERVER_NAME", value_name = "NAME")]
    pub inter_broker_tls_server_name: Option<String>,
    /// SASL mechanisms Kafka clients must authenticate with on the Kafka listener:
    /// PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 (comma-separated), or `none` (the default).
    /// Users are made with `rill user create` (over the native listener).
    #[arg(
        long,
        env = "RILL_KAFKA_SASL_MECHANISMS",
        value_name = "LIST",
        default_value = "none"
    )]
    pub kafka_sasl_mechanisms: String,
    /// SASL mechanisms native clients (and other brokers) must authenticate with on the
    /// native listener: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 (comma-separated), or `none`
    /// (the default). Needs --inter-broker-sasl-username, whose user is created at start.
    #[arg(
        long,
        env = "RILL_NATIVE_SASL_MECHANISMS",
        value_name = "LIST",
        default_value = "none"
    )]
    pub native_sasl_mechanisms: String,
    /// The user this broker authenticates as to other brokers' native listeners (a super
    /// user); created at start with --inter-broker-sasl-password if it does not exist, so it
    /// is also the first user of a new cluster.
    #[arg(long, env = "RILL_INTER_BROKER_SASL_USERNAME", value_name = "USER")]
    pub inter_broker_sasl_username: Option<String>,
    /// The inter-broker user's password (set it in the environment rather than on the
    /// command line).
    #[arg(
        long,
        env = "RILL_INTER_BROKER_SASL_PASSWORD",
        value_name = "PASSWORD",
        hide_env_values = true
    )]
    pub inter_broker_sasl_password: Option<String>,
    /// A Kafka connection not authenticated within this many ms is closed.
    #[arg(
        long,
        env = "RILL_SASL_AUTHENTICATION_TIMEOUT_MS",
        default_value_t = 10_000
    )]
    pub sasl_authentication_timeout_ms: u64,
    /// Principals that every ACL check lets through, `User:<name>` separated by `;` (Kafka's
    /// `super.users`). ACLs are enforced on the Kafka listener when it authenticates
    /// (--kafka-sasl-mechanisms).
    #[arg(
        long,
        env = "RILL_SUPER_USERS",
        value_name = "LIST",
        default_value = ""
    )]
    pub super_users: String,
    /// Serve Prometheus metrics (text format) at http://HOST:PORT/metrics; `off` (the
    /// default) serves none.
    #[arg(long, env = "RILL_METRICS_LISTEN", value_name = "HOST:PORT")]
    pub metrics_listen: Option<String>,
    /// Log lines as text (env_logger's format) or json (one object per line: ts, level,
    /// target, msg); `RUST_LOG` filters them either way.
    #[arg(long, env = "RILL_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// always | never | interval:MS
    #[arg(long, env = "RILL_FSYNC", default_value = "always")]
    pub fsync: String,
    /// With --fsync always, segments are opened O_DSYNC: each write is durable when it
    /// completes, one request where a write and then an fdatasync took two (a lower
    /// acknowledgement latency). false: each group-commit round writes, then fdatasyncs
    /// every file it touched once (fewer device cache flushes when a round's writes are
    /// many, which a disk with slow flushes may prefer).
    #[arg(long, env = "RILL_FSYNC_O_DSYNC", default_value_t = true, action = clap::ArgAction::Set)]
    pub fsync_o_dsync: bool,
    /// The default of the topic setting `write.caching` (Redpanda's write caching): produces
    /// are acknowledged, and visible to consumers, once in the leader's memory (replicated:
    /// in every ISR member's), and written behind in order. A crash of the broker (of every
    /// ISR member) loses what was acknowledged and not yet written, at most
    /// --write-caching-max-bytes per partition. Internal topics never cache.
    #[arg(long, env = "RILL_WRITE_CACHING", default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub write_caching: bool,
    /// Per partition, the bytes write caching may hold acknowledged but not yet written;
    /// past it, acknowledgements and visibility wait for the disk (back-pressure).
    #[arg(long, env = "RILL_WRITE_CACHING_MAX_BYTES", default_value_t = crate::topic_config::DEFAULT_WRITE_CACHING_MAX_BYTES)]
    pub write_caching_max_bytes: usize,
    /// Write caching writes a partition's acknowledged bytes behind once this many
    /// milliseconds passed since the oldest was appended (Redpanda's `flush.ms`), or sooner
    /// at --write-caching-flush-bytes; fewer, larger writes than one per group-commit round.
    #[arg(long, env = "RILL_WRITE_CACHING_FLUSH_MS", default_value_t = crate::topic_config::DEFAULT_WRITE_CACHING_FLUSH_MS)]
    pub write_caching_flush_ms: u64,
    /// Write caching writes a partition's acknowledged bytes behind once this many are
    /// pending (Redpanda's `flush.bytes`; at most half of --write-caching-max-bytes is used,
    /// so acknowledgements keep coming from memory).
    #[arg(long, env = "RILL_WRITE_CACHING_FLUSH_BYTES", default_value_t = crate::topic_config::DEFAULT_WRITE_CACHING_FLUSH_BYTES)]
    pub write_caching_flush_bytes: usize,
    /// How fetches read data older than the tail cache: copy (O_DIRECT read into memory,
    /// then written to the socket; the page cache is never used) or sendfile (page cache to
    /// socket, off the shard's thread). Copy is the default: on a cold read it measured 2.1x
    /// sendfile's consume throughput here (bench-harness/RESULTS.md, 2026-12-04).
    #[arg(long, env = "RILL_FILE_READS", default_value = "copy")]
    pub file_reads: String,
    /// With copy reads, the bytes a broker may hold in reads started ahead of the fetch that
    /// will want them (a consumer catching up reads in order), split over the shards; 0: none.
    /// 64 MiB.
    #[arg(long, env = "RILL_FILE_READ_AHEAD_BYTES", default_value_t = 64 << 20)]
    pub file_read_ahead_bytes: usize,
    /// Default `retention.ms` of topics: closed segments whose newest record is older are
    /// deleted (-1: keep forever). 14 days.
    #[arg(long, env = "RILL_RETENTION_MS", default_value_t = 14 * 24 * 3600 * 1000, allow_negative_numbers = true)]
    pub retention_ms: i64,
    /// Default `retention.bytes` per partition (-1: unlimited).
    #[arg(long, env = "RILL_RETENTION_BYTES", default_value_t = -1, allow_negative_numbers = true)]
    pub retention_bytes: i64,
    /// Default `segment.ms`: a non-empty active segment older than this rolls. 7 days.
    #[arg(long, env = "RILL_SEGMENT_MS", default_value_t = 7 * 24 * 3600 * 1000)]
    pub segment_ms: u64,
    /// Default `max.message.bytes`: the largest batch a produce may carry.
    #[arg(long, env = "RILL_MAX_MESSAGE_BYTES", default_value_t = 16 << 20)]
    pub max_message_bytes: usize,
    /// How often each shard deletes segments past retention (as Kafka, 5 minutes).
    #[arg(
        long,
        env = "RILL_RETENTION_CHECK_INTERVAL_MS",
        default_value_t = 300_000
    )]
    pub retention_check_interval_ms: u64,
    /// How long a partition remembers an idempotent producer that appended nothing since
    /// (Kafka's `producer.id.expiration.ms`, 1 day); checked at every retention check.
    #[arg(
        long,
        env = "RILL_PRODUCER_ID_EXPIRATION_MS",
        default_value_t = 86_400_000
    )]
    pub producer_id_expiration_ms: u64,
    /// How often each shard's log cleaner looks for compacted topics' partitions to compact
    /// (Kafka's `log.cleaner.backoff.ms`).
    #[arg(long, env = "RILL_LOG_CLEANER_BACKOFF_MS", default_value_t = 15_000)]
    pub log_cleaner_backoff_ms: u64,
    /// Memory of one compaction's key map, per shard: the keys of the segments compacted in
    /// one pass must fit (each key's bytes plus 48).
    #[arg(
        long,
        env = "RILL_LOG_CLEANER_DEDUPE_BUFFER_BYTES",
        default_value_t = 32 << 20
    )]
    pub log_cleaner_dedupe_buffer_bytes: usize,
    /// Segment bytes a shard's log cleaner reads per 100 ms at most (a throttle, so
    /// compaction never takes the disk from producers and consumers).
    #[arg(
        long,
        env = "RILL_LOG_CLEANER_IO_BYTES_PER_TICK",
        default_value_t = 16 << 20
    )]
    pub log_cleaner_io_bytes_per_tick: u64,
    /// How often each shard records its partitions' high watermarks on disk (Kafka's
    /// `replica.high.watermark.checkpoint.interval.ms`); recovery never hands out an offset
    /// below the last one recorded.
    #[arg(
        long,
        env = "RILL_REPLICA_HIGH_WATERMARK_CHECKPOINT_INTERVAL_MS",
        default_value_t = 5_000
    )]
    pub replica_high_watermark_checkpoint_interval_ms: u64,
    /// Each shard also checkpoints its high watermarks once it wrote this many bytes since
    /// its last checkpoint (0: by time only). A checkpoint's sync is a device flush, and a
    /// flush writes back what the device (or a VM host) holds since the last one: this bounds
    /// that backlog, and so how long one flush stalls the writes behind it.
    #[arg(
        long,
        env = "RILL_REPLICA_HIGH_WATERMARK_CHECKPOINT_BYTES",
        default_value_t = crate::broker::config::DEFAULT_HW_CHECKPOINT_BYTES
    )]
    pub replica_high_watermark_checkpoint_bytes: u64,
    /// Threads a shard's checkpoint writes and syncs its partitions' high-watermark files on
    /// (1-64). Each file costs two device flushes, and flushes asked at once are served
    /// together: with many partitions more threads shorten the checkpoint (how long it takes:
    /// `rill_high_watermark_checkpoint_duration_seconds`), but on a device whose flushes are
    /// slow, flushes at once stall its writes longer.
    #[arg(
        long,
        env = "RILL_REPLICA_HIGH_WATERMARK_CHECKPOINT_THREADS",
        default_value_t = crate::broker::config::DEFAULT_HW_CHECKPOINT_THREADS
    )]
    pub replica_high_watermark_checkpoint_threads: usize,
    /// How often a shard retries partitions whose storage failed (a full or failing disk):
    /// reopening them, or opening those that could not be opened; and how often the
    /// controller reopens its log after a failed write.
    #[arg(long, env = "RILL_STORAGE_RETRY_INTERVAL_MS", default_value_t = 5_000)]
    pub storage_retry_interval_ms: u64,
    /// How long a topic directory the controller metadata does not know is kept, set aside
    /// under DATA_DIR/stray/, before it is removed (-1: keep forever). 7 days.
    #[arg(long, env = "RILL_STRAY_LOG_RETENTION_MS", default_value_t = 7 * 24 * 3600 * 1000, allow_negative_numbers = true)]
    pub stray_log_retention_ms: i64,
    /// Default `segment.bytes` of topics.
    #[arg(long, env = "RILL_SEGMENT_BYTES", default_value_t = 128 << 20)]
    pub segment_bytes: u64,
    /// Bytes of log between two sparse index entries.
    #[arg(long, env = "RILL_INDEX_INTERVAL_BYTES", default_value_t = 4096)]
    pub index_interval_bytes: u32,
    /// Preallocate segment files (overwrites are cheaper to fdatasync than appends).
    #[arg(long, env = "RILL_PREALLOCATE", default_value_t = true, action = clap::ArgAction::Set)]
    pub preallocate: bool,
    /// With --preallocate, how much segment space is fallocated at a time, ahead of the
    /// writes (Redpanda's segment_fallocation_step): an empty partition holds one step.
    #[arg(long, env = "RILL_PREALLOCATE_STEP_BYTES", default_value_t = 16 << 20)]
    pub preallocate_step_bytes: u64,
    /// Largest single O_DIRECT write of a partition's appends (a multiple of 4096): a group
    /// commit round's bytes go to the segment in pieces of this size. 2 MiB.
    #[arg(long, env = "RILL_FILE_WRITE_BYTES", default_value_t = crate::log::appender::WRITE_BYTES)]
    pub file_write_bytes: usize,
    /// O_DIRECT writes a partition keeps in flight at once (1-64): the device works on the
    /// next piece while the shard serves requests.
    #[arg(long, env = "RILL_FILE_WRITES_IN_FLIGHT", default_value_t = crate::log::appender::WRITES_IN_FLIGHT)]
    pub file_writes_in_flight: usize,
    /// A removed log file (retention, a deleted topic, a compacted segment) gives its blocks
    /// back this many bytes at a time, behind its unlink, so the device keeps serving the other
    /// partitions' writes; 0 frees each file at once. 0 or at least 1 MiB. 4 MiB.
    #[arg(long, env = "RILL_FILE_DELETE_STEP_BYTES", default_value_t = crate::log::file_removal::RemovalPace::DEFAULT.step_bytes)]
    pub file_delete_step_bytes: u64,
    /// The pause after each --file-delete-step-bytes step, in microseconds (at most 1 s).
    #[arg(long, env = "RILL_FILE_DELETE_STEP_PAUSE_US", default_value_t = crate::log::file_removal::RemovalPace::DEFAULT.step_pause.as_micros() as u64)]
    pub file_delete_step_pause_us: u64,
    /// Removed files waiting to be freed in steps, at most (1-65536); past it a removal frees
    /// its file itself, at the same pace.
    #[arg(long, env = "RILL_FILE_DELETE_QUEUE", default_value_t = crate::log::file_removal::RemovalPace::DEFAULT.queue)]
    pub file_delete_queue: usize,
    /// Largest request frame accepted.
    #[arg(long, env = "RILL_MAX_FRAME_BYTES", default_value_t = 64 << 20)]
    pub max_frame_bytes: usize,
    /// Request bytes the connections of one shard may hold at once (both listeners, per
    /// shard, not split): a reader that would exceed it waits before allocating; a request
    /// larger than all of it is refused. Bytes are released when the request's handler returns.
    #[arg(long, env = "RILL_MAX_REQUEST_MEMORY_BYTES", default_value_t = crate::broker::config::DEFAULT_MAX_REQUEST_MEMORY_BYTES)]
    pub max_request_memory_bytes: usize,
    /// Memory for recent batches, split across shards: consumers reading them are served
    /// without a disk read. An eighth of the memory the broker may use (the machine's, or its
    /// cgroup's limit); see --tail-cache-min-available-bytes.
    #[arg(long, env = "RILL_TAIL_CACHE_BYTES", default_value_t = crate::broker::machine_memory::eighth_of_memory() as usize)]
    pub tail_cache_bytes: usize,
    /// Back the tail cache's memory at start, before listening (as the JVM's AlwaysPreTouch
    /// for Kafka): the first --tail-cache-bytes produced after a start then find their
    /// request memory faulted in and zeroed already, instead of paying for it as they arrive
    /// (a fifth of a fresh broker's produce throughput on the bench VM, RESULTS.md
    /// 2026-12-06). The broker holds that memory from its start.
    #[arg(long, env = "RILL_TAIL_CACHE_PRE_TOUCH", default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub tail_cache_pre_touch: bool,
    /// The tail cache gives memory back while less than this is available to the broker (the
    /// machine's MemAvailable, or what its cgroup's limit leaves), checked every second, and
    /// takes it again once there is room: it is broker memory the kernel cannot reclaim
    /// itself. An eighth of the memory the broker may use; 0: never give it back.
    #[arg(long, env = "RILL_TAIL_CACHE_MIN_AVAILABLE_BYTES", default_value_t = crate::broker::machine_memory::eighth_of_memory())]
    pub tail_cache_min_available_bytes: u64,
    /// Longest long-poll a fetch may ask for.
    #[arg(long, env = "RILL_MAX_FETCH_WAIT_MS", default_value_t = 30_000)]
    pub max_fetch_wait_ms: u64,
    /// Stored bytes a tag-filtered fetch reads per partition at most (copied and filtered)
    /// before answering with the position it reached; the consumer fetches on from there.
    #[arg(long, env = "RILL_MAX_FILTER_SCAN_BYTES", default_value_t = 64 << 20)]
    pub max_filter_scan_bytes: usize,
    /// Longest delay a delayed message (`produce --delay-ms`) may ask for.
    #[arg(long, env = "RILL_MAX_DELAY_MS", default_value_t = crate::broker::config::DEFAULT_MAX_DELAY_MS)]
    pub max_delay_ms: u64,
    /// Delayed messages each shard holds pending at most (on disk; the memory they take is
    /// --delay-memory-bytes); more are refused until some fire.
    #[arg(long, env = "RILL_MAX_DELAYED_PER_SHARD", default_value_t = 10_000_000)]
    pub max_delayed_per_shard: usize,
    /// Memory each shard keeps pending delayed messages in (about 384 bytes each): the ones
    /// due next; the others wait on disk only and are read back as their time nears.
    #[arg(long, env = "RILL_DELAY_MEMORY_BYTES", default_value_t = 64 << 20)]
    pub delay_memory_bytes: usize,
    /// Longest a produce waits for its acknowledgement.
    #[arg(long, env = "RILL_MAX_PRODUCE_TIMEOUT_MS", default_value_t = 30_000)]
    pub max_produce_timeout_ms: u64,
    /// Connections each listener (native, Kafka) of each shard accepts; more are closed at once.
    #[arg(long, env = "RILL_MAX_CONNECTIONS_PER_SHARD", default_value_t = 10_000)]
    pub max_connections_per_shard: usize,
    /// Connections one client IP may hold on each listener of each shard (Kafka's
    /// max.connections.per.ip, which is unlimited by default; here bounded so that one host
    /// cannot take a whole shard); more are closed at once.
    #[arg(long, env = "RILL_MAX_CONNECTIONS_PER_IP", default_value_t = 1_000)]
    pub max_connections_per_ip: usize,
    /// A connection that sends no request for this long is closed (Kafka's
    /// connections.max.idle.ms); a request being handled or a long-poll fetch is not idle.
    #[arg(
        long,
        env = "RILL_CONNECTION_IDLE_TIMEOUT_MS",
        default_value_t = 600_000
    )]
    pub connection_idle_timeout_ms: u64,
    /// Longest a response (a fetch's file ranges included) may take to drain into a client's
    /// socket; a client that reads slower is disconnected.
    #[arg(long, env = "RILL_FETCH_SEND_TIMEOUT_MS", default_value_t = 30_000)]
    pub fetch_send_timeout_ms: u64,
    /// Requests one connection may have read and in progress before their replies are written
    /// (librdkafka's max.in.flight is 5): produces are appended in arrival order and wait for
    /// their acknowledgements together, answered in request order. Past it the connection is
    /// not read until the oldest reply is written.
    #[arg(
        long,
        env = "RILL_MAX_IN_FLIGHT_REQUESTS_PER_CONNECTION",
        default_value_t = 5
    )]
    pub max_in_flight_requests_per_connection: usize,
    /// At start, longest wait for the broker's ports to be released (by a killed broker).
    #[arg(long, env = "RILL_PORT_RELEASE_WAIT_MS", default_value_t = 30_000)]
    pub port_release_wait_ms: u64,
    #[arg(long, env = "RILL_MAX_PARTITIONS_PER_TOPIC", default_value_t = 10_000)]
    pub max_partitions_per_topic: u32,
    /// Partition replicas the cluster may hold per live shard (Redpanda's
    /// topic_partitions_per_shard): each holds files, a preallocation step and memory on its
    /// shard, so creating topics past it is refused with INVALID_PARTITIONS instead of
    /// filling the disk. Give every controller voter the same value.
    #[arg(long, env = "RILL_MAX_PARTITIONS_PER_SHARD", default_value_t = crate::controller::metadata::DEFAULT_MAX_PARTITIONS_PER_SHARD)]
    pub max_partitions_per_shard: u32,
    /// Create a topic the first time a client asks for it in metadata, as Kafka's
    /// auto.create.topics.enable (internal `__` topics never are).
    #[arg(long, env = "RILL_AUTO_CREATE_TOPICS", default_value_t = true, action = clap::ArgAction::Set)]
    pub auto_create_topics: bool,
    /// Partitions of an auto-created topic, and of a Kafka CreateTopics asking for -1
    /// (Kafka's num.partitions).
    #[arg(long, env = "RILL_NUM_PARTITIONS", default_value_t = 1)]
    pub num_partitions: u32,
    /// Replication factor of an auto-created topic, and of a Kafka CreateTopics asking for -1
    /// (Kafka's default.replication.factor).
    #[arg(long, env = "RILL_DEFAULT_REPLICATION_FACTOR", default_value_t = 1)]
    pub default_replication_factor: u16,
    /// Partitions of the internal `__consumer_offsets` topic (set when it is first created).
    #[arg(long, env = "RILL_OFFSETS_TOPIC_PARTITIONS", default_value_t = 8)]
    pub offsets_topic_partitions: u32,
    /// Commit records a `__consumer_offsets` partition takes before it is compacted (a
    /// snapshot of the latest commits, then the older history is truncated).
    #[arg(long, env = "RILL_OFFSETS_COMPACT_EVERY", default_value_t = 10_000)]
    pub offsets_compact_every: usize,
    /// Partitions of the internal `__transactions` topic, whose leaders are the transaction
    /// coordinators (Kafka's transaction.state.log.num.partitions; set when it is first
    /// created).
    #[arg(long, env = "RILL_TRANSACTION_STATE_PARTITIONS", default_value_t = 8)]
    pub transaction_state_partitions: u32,
    /// The longest transaction.timeout.ms a transactional producer may ask for (Kafka's
    /// transaction.max.timeout.ms); longer gets INVALID_TRANSACTION_TIMEOUT.
    #[arg(
        long,
        env = "RILL_TRANSACTION_MAX_TIMEOUT_MS",
        default_value_t = 900_000
    )]
    pub transaction_max_timeout_ms: u32,
    /// A transaction request the coordinator would answer CONCURRENT_TRANSACTIONS (the id's
    /// last transaction still writing its markers) is held up to this long and answered once
    /// that transaction completes, so clients do not poll for it; 0 answers at once (Kafka).
    #[arg(
        long,
        env = "RILL_TRANSACTION_CONCURRENT_WAIT_MS",
        default_value_t = 1_000
    )]
    pub transaction_concurrent_wait_ms: u64,
    /// A transactional id without a transaction for this long is forgotten (Kafka's
    /// transactional.id.expiration.ms, 7 days).
    #[arg(
        long,
        env = "RILL_TRANSACTIONAL_ID_EXPIRATION_MS",
        default_value_t = 604_800_000
    )]
    pub transactional_id_expiration_ms: u64,
    /// Transactional ids a transaction coordinator (one `__transactions` partition) keeps at
    /// most; InitProducerId for a new one past it gets POLICY_VIOLATION until ids expire.
    #[arg(
        long,
        env = "RILL_MAX_TRANSACTIONAL_IDS_PER_PARTITION",
        default_value_t = 100_000
    )]
    pub max_transactional_ids_per_partition: usize,
    /// Records a `__transactions` partition takes before it is compacted (a snapshot of
    /// every transactional id's state, then the older history is truncated).
    #[arg(
        long,
        env = "RILL_TRANSACTION_STATE_COMPACT_EVERY",
        default_value_t = 10_000
    )]
    pub transaction_state_compact_every: usize,
    /// Members one consumer group may have (Kafka's group.max.size); a join past it gets
    /// GROUP_MAX_SIZE_REACHED.
    #[arg(long, env = "RILL_GROUP_MAX_SIZE", default_value_t = 1_000)]
    pub group_max_size: usize,
    /// How long an empty group's first generation waits for more members after each join
    /// (Kafka's group.initial.rebalance.delay.ms), so consumers started together form one
    /// generation; never past the rebalance timeout.
    #[arg(
        long,
        env = "RILL_GROUP_INITIAL_REBALANCE_DELAY_MS",
        default_value_t = 3_000
    )]
    pub group_initial_rebalance_delay_ms: u64,
    /// A member of a consumer group using the KIP-848 protocol (group.protocol=consumer) not
    /// heard from this long is removed and its partitions reassigned (Kafka's
    /// group.consumer.session.timeout.ms).
    #[arg(
        long,
        env = "RILL_GROUP_CONSUMER_SESSION_TIMEOUT_MS",
        default_value_t = 45_000
    )]
    pub group_consumer_session_timeout_ms: u64,
    /// How often KIP-848 consumer group members heartbeat, told to them in every answer
    /// (Kafka's group.consumer.heartbeat.interval.ms); below the session timeout.
    #[arg(
        long,
        env = "RILL_GROUP_CONSUMER_HEARTBEAT_INTERVAL_MS",
        default_value_t = 5_000
    )]
    pub group_consumer_heartbeat_interval_ms: u64,
    /// Server-side assignors KIP-848 groups may ask for (server_assignor), the first the
    /// default: uniform, range (Kafka's group.consumer.assignors).
    #[arg(
        long,
        env = "RILL_GROUP_CONSUMER_ASSIGNORS",
        default_value = "uniform,range",
        value_delimiter = ','
    )]
    pub group_consumer_assignors: Vec<String>,
    /// Groups (with members or committed offsets) one shard coordinates at once; a join that
    /// would create one more gets GROUP_MAX_SIZE_REACHED, a commit INVALID_COMMIT_OFFSET_SIZE.
    #[arg(long, env = "RILL_MAX_GROUPS_PER_SHARD", default_value_t = 10_000)]
    pub max_groups_per_shard: usize,
    /// Partitions one group may hold committed offsets for; a commit past it is refused whole
    /// with INVALID_COMMIT_OFFSET_SIZE.
    #[arg(long, env = "RILL_MAX_OFFSETS_PER_GROUP", default_value_t = 100_000)]
    pub max_offsets_per_group: usize,
    /// glommio registered I/O memory per shard.
    #[arg(long, env = "RILL_IO_MEMORY_BYTES", default_value_t = 10 << 20)]
    pub io_memory_bytes: usize,
    /// Busy-poll this long before a shard parks (lower latency, burns the core). 0 = off.
    #[arg(long, env = "RILL_SPIN_BEFORE_PARK_US", default_value_t = 0)]
    pub spin_before_park_us: u64,
}

#[derive(Subcommand, Debug)]
pub enum TopicCommand {
    Create {
        name: String,
        #[arg(long)]
        partitions: u32,
        #[arg(long, default_value_t = 1)]
        replication_factor: u16,
        /// KEY=VALUE topic setting (repeatable).
        #[arg(long = "config", value_name = "KEY=VALUE")]
        configs: Vec<String>,
    },
    List,
    Describe {
        name: String,
    },
    Delete {
        name: String,
    },
    AddPartitions {
        name: String,
        #[arg(long)]
        count: u32,
    },
    /// Stop writes to a partition; consumers drain it; retention removes its files.
    Decommission {
        name: String,
        #[arg(long)]
        partition: u32,
    },
    /// Set topic configs (retention.ms, retention.bytes, segment.bytes, segment.ms,
    /// max.message.bytes, cleanup.policy and the compaction settings, write.caching, ...).
    AlterConfig {
        name: String,
        #[arg(long = "config", value_name = "KEY=VALUE", required = true)]
        configs: Vec<String>,
    },
    Truncate {
        name: String,
        #[arg(long)]
        partition: u32,
        #[arg(long)]
        before: u64,
    },
    /// Move a partition's replicas: the new ones join the ISR before the old ones leave.
    /// Returns once submitted; `topic describe` shows the progress.
    Reassign {
        name: String,
        #[arg(long)]
        partition: u32,
        /// The new replicas' broker ids, the preferred leader first.
        #[arg(long, value_delimiter = ',', required_unless_present = "cancel")]
        replicas: Vec<u32>,
        /// Cancel the running reassignment (the original replicas come back).
        #[arg(long, conflicts_with = "replicas")]
        cancel: bool,
    },
}

#[derive(Args, Debug)]
pub struct ProduceArgs {
    pub topic: String,
    /// The text before the first SEP on a line is the key.
    #[arg(long)]
    pub key_separator: Option<String>,
    #[arg(long, default_value = "all")]
    pub acks: String,
    #[arg(long)]
    pub partition: Option<u32>,
    /// K=V header for every message (repeatable; sent in the order given, repeated names
    /// kept; a bare K sends a null header value, K= an empty one).
    #[arg(long = "header", value_name = "K=V")]
    pub headers: Vec<String>,
    #[arg(long, value_delimiter = ',')]
    pub tags: Vec<String>,
    /// Each message becomes visible (is appended) this many ms from now, not before.
    #[arg(long, allow_hyphen_values = true)]
    pub delay_ms: Option<i64>,
    #[arg(long, default_value_t = 5)]
    pub linger_ms: u64,
    #[arg(long, default_value_t = 256 << 10)]
    pub batch_bytes: usize,
    /// Send the whole input as one transaction of this transactional id, committed at EOF
    /// (aborted if anything fails); fences an earlier producer with the same id.
    #[arg(long)]
    pub transactional_id: Option<String>,
    /// With --transactional-id: the coordinator aborts the transaction if it is still open
    /// this long after it began (Kafka's transaction.timeout.ms).
    #[arg(long, default_value_t = 60_000)]
    pub transaction_timeout_ms: u64,
}

#[derive(Args, Debug)]
pub struct ConsumeArgs {
    pub topic: String,
    #[arg(long)]
    pub group: Option<String>,
    /// beginning | end | OFFSET | @UNIX_MS
    #[arg(long, default_value = "beginning")]
    pub from: String,
    #[arg(long)]
    pub partition: Option<u32>,
    /// Stop after COUNT messages.
    #[arg(short = 'n', long = "count")]
    pub count: Option<u64>,
    /// Stop after this long without a new message.
    #[arg(long)]
    pub timeout_ms: Option<u64>,
    #[arg(long)]
    pub print_key: bool,
    /// Only messages with any of these tags (filtered by the broker; offsets keep their gaps).
    #[arg(long, value_delimiter = ',')]
    pub tags: Vec<String>,
    /// With --tags: only messages with every one of the tags.
    #[arg(long)]
    pub tags_all: bool,
    /// read_uncommitted (default) or read_committed: only committed transactions' records
    /// and plain ones, below the last stable offset.
    #[arg(long)]
    pub isolation: Option<String>,
    /// With --group: at-least-once (commit after printing) or at-most-once (commit before).
    #[arg(long, default_value = "at-least-once")]
    pub delivery: String,
    /// With --group: a member not heard of for this long leaves the group.
    #[arg(long, default_value_t = 10_000)]
    pub session_timeout_ms: u64,
}

#[derive(Subcommand, Debug)]
pub enum GroupCommand {
    List,
    Describe {
        group: String,
    },
    ResetOffsets {
        group: String,
        #[arg(long)]
        topic: String,
        #[arg(long)]
        to: String,
    },
}

#[derive(Subcommand, Debug)]
pub enum TuneCommand {
    /// Print the host facts that matter to a broker, with recommended values and fixes.
    ///
    /// CPU governor, transparent huge pages, locked memory, io_uring, the data dir's
    /// filesystem and O_DIRECT support, disk scheduler, NIC IRQ affinity: each with its value,
    /// the recommended one and the command that sets it. Statuses: ok; advise (rill runs, but
    /// slower or with a worse tail); BAD (rill cannot run or write there); unknown (could not
    /// be read, with the reason). Changes nothing on the host, except that the O_DIRECT probe
    /// writes and removes one 4 KiB temp file (.rill-tune-probe-PID) in the data dir. Exit
    /// code 1 when a check is BAD, else 0.
    Check(TuneCheckArgs),
}

#[derive(Args, Debug)]
pub struct TuneCheckArgs {
    /// The broker's data dir; when missing, its nearest existing parent is checked.
    #[arg(long, env = "RILL_DATA_DIR", default_value = "./rill-data")]
    pub data_dir: PathBuf,
    /// One JSON object per check, in an array, instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(Subcommand, Debug)]
pub enum ClusterCommand {
    Info,
    /// Reassign every partition replica of broker N to other live brokers.
    DrainBroker {
        node_id: u32,
        /// Return once every partition moved off it, not once submitted.
        #[arg(long)]
        wait: bool,
        /// With --wait: give up (non-zero exit) after this long.
        #[arg(long, default_value_t = 600_000)]
        timeout_ms: u64,
    },
    /// Move leadership to each partition's preferred (first) replica where it is live and
    /// in the ISR.
    ElectPreferred {
        #[arg(long)]
        topic: Option<String>,
        #[arg(long, requires = "topic")]
        partition: Option<u32>,
    },
}
