//! `rill broker`: turns flags into a [`BrokerConfig`] and runs it.

use std::net::{SocketAddr, ToSocketAddrs};
use std::time::Duration;

use super::args::BrokerArgs;
use crate::log::FsyncPolicy;
use crate::server::{run_broker, BrokerConfig};

/// Bounds of `--file-write-bytes` and `--file-writes-in-flight`: a partition's DMA memory in
/// writes is at most their product (or one larger batch).
const MAX_FILE_WRITE_BYTES: usize = 64 << 20;
const MAX_FILE_WRITES_IN_FLIGHT: usize = 64;
/// Most `--replica-high-watermark-checkpoint-threads`: each is a thread while it runs.
const MAX_HW_CHECKPOINT_THREADS: usize = 64;
/// Least `--replica-high-watermark-checkpoint-bytes`: a checkpoint syncs a file per partition,
/// so one every few kilobytes would be a device flush per produce request.
const MIN_HW_CHECKPOINT_BYTES: u64 = 1 << 20;

fn parse_addr(flag: &str, v: &str) -> Result<SocketAddr, String> {
    v.to_socket_addrs()
        .map_err(|e| format!("--{flag} '{v}': {e}"))?
        .next()
        .ok_or_else(|| format!("--{flag} '{v}' resolves to no address"))
}

/// Parses `0,2,4` and ranges like `0-3`.
pub fn parse_cores(v: &str) -> Result<Vec<usize>, String> {
    let mut out = Vec::new();
    for part in v.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let bad = || format!("--cores '{v}': '{part}' is not a core number or range");
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (usize, usize) =
                    (a.parse().map_err(|_| bad())?, b.parse().map_err(|_| bad())?);
                if a > b {
                    return Err(bad());
                }
                out.extend(a..=b);
            }
            None => out.push(part.parse().map_err(|_| bad())?),
        }
    }
    if out.is_empty() {
        return Err(format!("--cores '{v}' names no core"));
    }
    Ok(out)
}

pub fn config_from_args(a: &BrokerArgs) -> Result<BrokerConfig, String> {
    let listen = parse_addr("listen", &a.listen)?;
    let available = rill_shards::ShardConfig::all_cores();
    let cores = match (&a.cores, a.shards) {
        (Some(list), _) => parse_cores(list)?,
        (None, Some(0)) => return Err("--shards must be at least 1".into()),
        (None, Some(n)) => {
            if n > available.len() {
                return Err(format!(
                    "--shards {n}: only {} cores are available",
                    available.len()
                ));
            }
            available[..n].to_vec()
        }
        (None, None) => available,
    };
    let fsync: FsyncPolicy = a.fsync.parse().map_err(|e| format!("--fsync: {e}"))?;
    let kafka_listen = match a.kafka_listen.as_str() {
        "off" => None,
        v => Some(parse_addr("kafka-listen", v)?),
    };
    let metrics_listen = match a.metrics_listen.as_deref() {
        None | Some("off") => None,
        Some(v) => Some(parse_addr("metrics-listen", v)?),
    };
    if a.node_id == 0 {
        return Err("--node-id must be at least 1".into());
    }
    let quorum = parse_quorum(a)?;
    if a.segment_bytes < 64 << 10 {
        return Err(format!(
            "--segment-bytes {} is below the minimum of 65536",
            a.segment_bytes
        ));
    }
    if a.segment_bytes > u64::from(u32::MAX) {
        return Err(format!(
            "--segment-bytes {} is above the maximum of {}",
            a.segment_bytes,
            u32::MAX
        ));
    }
    if a.max_frame_bytes < 4096 {
        return Err("--max-frame-bytes must be at least 4096".into());
    }
    let mut c = BrokerConfig::new(a.data_dir.clone(), listen, cores);
    c.advertised_host = a
        .advertised_host
        .clone()
        .unwrap_or_else(|| listen.ip().to_string());
    c.node_id = a.node_id;
    c.kafka_listen = kafka_listen;
    c.metrics_listen = metrics_listen;
    c.fsync = fsync;
    c.fsync_o_dsync = a.fsync_o_dsync;
    c.file_reads = a
        .file_reads
        .parse()
        .map_err(|e| format!("--file-reads: {e}"))?;
    c.topic_defaults = crate::topic_config::TopicDefaults {
        retention: (a.retention_ms >= 0).then(|| Duration::from_millis(a.retention_ms as u64)),
        retention_bytes: (a.retention_bytes >= 0).then_some(a.retention_bytes as u64),
        segment_bytes: a.segment_bytes,
        segment_age: Some(Duration::from_millis(a.segment_ms.max(1))),
        max_message_bytes: a.max_message_bytes.max(1),
        replica_lag_time_max_ms: crate::replication::DEFAULT_REPLICA_LAG_TIME_MAX_MS,
        write_caching: a.write_caching,
        write_caching_max_bytes: a.write_caching_max_bytes,
        write_behind: crate::topic_config::WriteBehind {
            delay: Duration::from_millis(a.write_caching_flush_ms),
            bytes: a.write_caching_flush_bytes,
        },
    };
    if a.write_caching_max_bytes == 0 {
        return Err("--write-caching-max-bytes must be at least 1".into());
    }
    if a.write_caching_flush_ms > 3_600_000 {
        return Err("--write-caching-flush-ms is at most 3600000 (an hour)".into());
    }
    if a.retention_ms < -1 || a.retention_bytes < -1 {
        return Err(
            "--retention-ms and --retention-bytes take -1 (unlimited) or a value of at least 0"
                .into(),
        );
    }
    if a.retention_check_interval_ms == 0 {
        return Err("--retention-check-interval-ms must be at least 1".into());
    }
    c.retention_check_interval = Duration::from_millis(a.retention_check_interval_ms);
    if a.producer_id_expiration_ms == 0 {
        return Err("--producer-id-expiration-ms must be at least 1".into());
    }
    c.producer_id_expiration = Duration::from_millis(a.producer_id_expiration_ms);
    if a.log_cleaner_backoff_ms == 0
        || a.log_cleaner_dedupe_buffer_bytes == 0
        || a.log_cleaner_io_bytes_per_tick == 0
    {
        return Err(
            "--log-cleaner-backoff-ms, --log-cleaner-dedupe-buffer-bytes and \
                    --log-cleaner-io-bytes-per-tick must be at least 1"
                .into(),
        );
    }
    c.log_cleaner = crate::partition::cleaner::CleanerConfig {
        dedupe_buffer_bytes: a.log_cleaner_dedupe_buffer_bytes,
        io_bytes_per_tick: a.log_cleaner_io_bytes_per_tick,
        backoff: Duration::from_millis(a.log_cleaner_backoff_ms),
    };
    if a.replica_high_watermark_checkpoint_interval_ms == 0 || a.storage_retry_interval_ms == 0 {
        return Err("--replica-high-watermark-checkpoint-interval-ms and \
                    --storage-retry-interval-ms must be at least 1"
            .into());
    }
    c.hw_checkpoint_interval =
        Duration::from_millis(a.replica_high_watermark_checkpoint_interval_ms);
    c.hw_checkpoint_bytes = match a.replica_high_watermark_checkpoint_bytes {
        0 => None,
        b if b < MIN_HW_CHECKPOINT_BYTES => {
            return Err(format!(
                "--replica-high-watermark-checkpoint-bytes must be 0 (by time only) or at \
                 least {MIN_HW_CHECKPOINT_BYTES}"
            ))
        }
        b => Some(b),
    };
    if !(1..=MAX_HW_CHECKPOINT_THREADS).contains(&a.replica_high_watermark_checkpoint_threads) {
        return Err(format!(
            "--replica-high-watermark-checkpoint-threads {}: must be from 1 to \
             {MAX_HW_CHECKPOINT_THREADS}",
            a.replica_high_watermark_checkpoint_threads
        ));
    }
    c.hw_checkpoint_threads = a.replica_high_watermark_checkpoint_threads;
    c.storage_retry_interval = Duration::from_millis(a.storage_retry_interval_ms);
    c.stray_log_retention = match a.stray_log_retention_ms {
        -1 => None,
        ms if ms >= 0 => Some(Duration::from_millis(ms as u64)),
        ms => {
            return Err(format!(
                "--stray-log-retention-ms {ms}: takes -1 (keep forever) or a value of at least 0"
            ))
        }
    };
    c.index_interval_bytes = a.index_interval_bytes.max(1);
    c.preallocate = a.preallocate;
    if a.preallocate_step_bytes < 4096 || !a.preallocate_step_bytes.is_multiple_of(4096) {
        return Err(format!(
            "--preallocate-step-bytes {}: must be a multiple of 4096 and at least 4096",
            a.preallocate_step_bytes
        ));
    }
    c.preallocate_step_bytes = a.preallocate_step_bytes;
    if a.file_write_bytes < 4096
        || !a.file_write_bytes.is_multiple_of(4096)
        || a.file_write_bytes > MAX_FILE_WRITE_BYTES
    {
        return Err(format!(
            "--file-write-bytes {}: must be a multiple of 4096, from 4096 to {MAX_FILE_WRITE_BYTES}",
            a.file_write_bytes
        ));
    }
    c.file_write_bytes = a.file_write_bytes;
    if !(1..=MAX_FILE_WRITES_IN_FLIGHT).contains(&a.file_writes_in_flight) {
        return Err(format!(
            "--file-writes-in-flight {}: must be from 1 to {MAX_FILE_WRITES_IN_FLIGHT}",
            a.file_writes_in_flight
        ));
    }
    c.file_writes_in_flight = a.file_writes_in_flight;
    if a.file_delete_step_bytes != 0 && a.file_delete_step_bytes < 1 << 20 {
        return Err(format!(
            "--file-delete-step-bytes {}: must be 0 (at once) or at least 1048576",
            a.file_delete_step_bytes
        ));
    }
    if a.file_delete_step_pause_us > 1_000_000 {
        return Err(format!(
            "--file-delete-step-pause-us {}: must be at most 1000000 (1 s)",
            a.file_delete_step_pause_us
        ));
    }
    if !(1..=65536).contains(&a.file_delete_queue) {
        return Err(format!(
            "--file-delete-queue {}: must be from 1 to 65536",
            a.file_delete_queue
        ));
    }
    c.file_delete = crate::log::file_removal::RemovalPace {
        step_bytes: a.file_delete_step_bytes,
        step_pause: std::time::Duration::from_micros(a.file_delete_step_pause_us),
        queue: a.file_delete_queue,
    };
    c.max_frame_bytes = a.max_frame_bytes;
    if a.max_request_memory_bytes < crate::net::request_memory::FIRST_STEP {
        return Err(format!(
            "--max-request-memory-bytes must be at least {}",
            crate::net::request_memory::FIRST_STEP
        ));
    }
    if a.max_request_memory_bytes < a.max_frame_bytes {
        log::warn!(
            "--max-request-memory-bytes {} is below --max-frame-bytes {}: larger requests \
             are refused",
            a.max_request_memory_bytes,
            a.max_frame_bytes
        );
    }
    c.max_request_memory_bytes = a.max_request_memory_bytes;
    c.tail_cache_bytes = a.tail_cache_bytes;
    c.tail_cache_pre_touch = a.tail_cache_pre_touch;
    c.tail_cache_min_available_bytes = a.tail_cache_min_available_bytes;
    c.file_read_ahead_bytes = a.file_read_ahead_bytes;
    c.max_fetch_wait = Duration::from_millis(a.max_fetch_wait_ms);
    c.max_filter_scan_bytes = a.max_filter_scan_bytes.max(1);
    c.max_delay = Duration::from_millis(a.max_delay_ms);
    c.max_delayed_per_shard = a.max_delayed_per_shard;
    if a.delay_memory_bytes < 2 * crate::delay::queue::ENTRY_MEMORY_BYTES {
        return Err(format!(
            "--delay-memory-bytes {} is below {} (two pending messages)",
            a.delay_memory_bytes,
            2 * crate::delay::queue::ENTRY_MEMORY_BYTES
        ));
    }
    c.delay_memory_bytes = a.delay_memory_bytes;
    c.max_produce_timeout = Duration::from_millis(a.max_produce_timeout_ms.max(1));
    if a.max_connections_per_shard == 0 || a.max_connections_per_ip == 0 {
        return Err(
            "--max-connections-per-shard and --max-connections-per-ip must be at least 1".into(),
        );
    }
    c.max_connections_per_shard = a.max_connections_per_shard;
    c.max_connections_per_ip = a.max_connections_per_ip;
    if a.connection_idle_timeout_ms == 0 {
        return Err("--connection-idle-timeout-ms must be at least 1".into());
    }
    c.connection_idle_timeout = Duration::from_millis(a.connection_idle_timeout_ms);
    if a.fetch_send_timeout_ms == 0 {
        return Err("--fetch-send-timeout-ms must be at least 1".into());
    }
    c.fetch_send_timeout = Duration::from_millis(a.fetch_send_timeout_ms);
    if a.max_in_flight_requests_per_connection == 0 {
        return Err("--max-in-flight-requests-per-connection must be at least 1".into());
    }
    c.max_in_flight_requests_per_connection = a.max_in_flight_requests_per_connection;
    c.port_release_wait = Duration::from_millis(a.port_release_wait_ms);
    c.max_partitions_per_topic = a.max_partitions_per_topic;
    if a.max_partitions_per_shard == 0 {
        return Err("--max-partitions-per-shard must be at least 1".into());
    }
    c.max_partitions_per_shard = a.max_partitions_per_shard;
    if a.num_partitions == 0 || a.default_replication_factor == 0 {
        return Err("--num-partitions and --default-replication-factor must be at least 1".into());
    }
    c.auto_create_topics = a.auto_create_topics;
    c.num_partitions = a.num_partitions;
    c.default_replication_factor = a.default_replication_factor;
    if a.offsets_topic_partitions == 0 {
        return Err("--offsets-topic-partitions must be at least 1".into());
    }
    c.offsets_topic_partitions = a.offsets_topic_partitions;
    c.offsets_compact_every = a.offsets_compact_every.max(1);
    if a.transaction_state_partitions == 0
        || a.transaction_max_timeout_ms == 0
        || a.max_transactional_ids_per_partition == 0
    {
        return Err(
            "--transaction-state-partitions, --transaction-max-timeout-ms and \
                    --max-transactional-ids-per-partition must be at least 1"
                .into(),
        );
    }
    c.transaction_state_partitions = a.transaction_state_partitions;
    c.transaction_max_timeout_ms = a.transaction_max_timeout_ms;
    c.transaction_concurrent_wait = Duration::from_millis(a.transaction_concurrent_wait_ms);
    c.transactional_id_expiration_ms = a.transactional_id_expiration_ms;
    c.max_transactional_ids_per_partition = a.max_transactional_ids_per_partition;
    c.transaction_state_compact_every = a.transaction_state_compact_every.max(1);
    if a.group_max_size == 0 || a.max_groups_per_shard == 0 || a.max_offsets_per_group == 0 {
        return Err(
            "--group-max-size, --max-groups-per-shard and --max-offsets-per-group \
                    must be at least 1"
                .into(),
        );
    }
    c.group_max_size = a.group_max_size;
    c.group_initial_rebalance_delay = Duration::from_millis(a.group_initial_rebalance_delay_ms);
    if a.group_consumer_session_timeout_ms == 0
        || a.group_consumer_heartbeat_interval_ms == 0
        || a.group_consumer_heartbeat_interval_ms >= a.group_consumer_session_timeout_ms
        || a.group_consumer_heartbeat_interval_ms > i32::MAX as u64
    {
        return Err(format!(
            "--group-consumer-heartbeat-interval-ms ({}) must be above 0 and below \
             --group-consumer-session-timeout-ms ({})",
            a.group_consumer_heartbeat_interval_ms, a.group_consumer_session_timeout_ms
        ));
    }
    c.group_consumer_session_timeout = Duration::from_millis(a.group_consumer_session_timeout_ms);
    c.group_consumer_heartbeat_interval =
        Duration::from_millis(a.group_consumer_heartbeat_interval_ms);
    let known = crate::group::consumer_group::ASSIGNORS;
    if a.group_consumer_assignors.is_empty() {
        return Err("--group-consumer-assignors needs at least one of uniform, range".into());
    }
    if let Some(bad) = a
        .group_consumer_assignors
        .iter()
        .find(|n| !known.contains(&n.as_str()))
    {
        return Err(format!(
            "--group-consumer-assignors: unknown assignor {bad:?} (known: uniform, range)"
        ));
    }
    c.group_consumer_assignors = a.group_consumer_assignors.clone();
    c.max_groups_per_shard = a.max_groups_per_shard;
    c.max_offsets_per_group = a.max_offsets_per_group;
    c.io_memory_bytes = a.io_memory_bytes;
    c.spin_before_park =
        (a.spin_before_park_us > 0).then(|| Duration::from_micros(a.spin_before_park_us));
    c.controller_voters = quorum.voters;
    c.controller_listen = quorum.listen;
    c.controller_max_message_bytes = a.controller_max_message_bytes;
    c.broker_role = quorum.broker;
    c.controller_role = quorum.controller;
    (c.native_tls, c.kafka_tls) = parse_tls(a)?;
    c.inter_broker_tls = inter_broker_tls(a, c.native_tls.is_some())?;
    if c.native_tls.is_some() && !c.controller_voters.is_empty() && c.inter_broker_tls.is_none() {
        // Followers fetch from leaders over the native listener.
        return Err(
            "--tls-listeners native in a cluster (--controller-voters) needs \
                    --inter-broker-tls-ca FILE: the CAs other brokers' certificates chain to"
                .into(),
        );
    }
    if a.tls_handshake_timeout_ms == 0 {
        return Err("--tls-handshake-timeout-ms must be at least 1".into());
    }
    c.tls_handshake_timeout = Duration::from_millis(a.tls_handshake_timeout_ms);
    c.kafka_sasl_mechanisms = sasl_mechanisms("--kafka-sasl-mechanisms", &a.kafka_sasl_mechanisms)?;
    c.native_sasl_mechanisms =
        sasl_mechanisms("--native-sasl-mechanisms", &a.native_sasl_mechanisms)?;
    c.inter_broker_sasl = match (&a.inter_broker_sasl_username, &a.inter_broker_sasl_password) {
        (None, None) => None,
        (Some(u), Some(p)) if !u.is_empty() && !p.is_empty() => Some((u.clone(), p.clone())),
        _ => {
            return Err(
                "--inter-broker-sasl-username and --inter-broker-sasl-password \
                        (RILL_INTER_BROKER_SASL_PASSWORD) go together, neither empty"
                    .into(),
            )
        }
    };
    if !c.native_sasl_mechanisms.is_empty() && c.inter_broker_sasl.is_none() {
        return Err(
            "--native-sasl-mechanisms needs --inter-broker-sasl-username and its \
                    password: the user brokers reach each other as, and the first user"
                .into(),
        );
    }
    if !c.kafka_sasl_mechanisms.is_empty() && c.kafka_listen.is_none() {
        return Err("--kafka-sasl-mechanisms needs the Kafka listener (--kafka-listen)".into());
    }
    if a.sasl_authentication_timeout_ms == 0 {
        return Err("--sasl-authentication-timeout-ms must be at least 1".into());
    }
    c.sasl_authentication_timeout = Duration::from_millis(a.sasl_authentication_timeout_ms);
    for p in a
        .super_users
        .split(';')
        .map(str::trim)
        .filter(|p| !p.is_empty())
    {
        match p.split_once(':') {
            Some(("User", name)) if !name.is_empty() => c.super_users.push(p.to_string()),
            _ => {
                return Err(format!(
                    "--super-users: '{p}' is not a principal of the form User:<name>"
                ))
            }
        }
    }
    // Brokers act for the cluster (markers, replica fetches): their user is a super user.
    if let Some((user, _)) = &c.inter_broker_sasl {
        c.super_users.push(format!("User:{user}"));
    }
    if a.broker_heartbeat_interval_ms == 0
        || a.broker_heartbeat_interval_ms >= a.broker_session_timeout_ms
    {
        return Err(format!(
            "--broker-heartbeat-interval-ms {} must be at least 1 and below \
             --broker-session-timeout-ms {}",
            a.broker_heartbeat_interval_ms, a.broker_session_timeout_ms
        ));
    }
    c.broker_session_timeout = Duration::from_millis(a.broker_session_timeout_ms);
    if a.replica_lag_time_max_ms == 0 {
        return Err("--replica-lag-time-max-ms must be at least 1".into());
    }
    c.topic_defaults.replica_lag_time_max_ms = a.replica_lag_time_max_ms;
    c.broker_heartbeat_interval = Duration::from_millis(a.broker_heartbeat_interval_ms);
    c.controlled_shutdown_timeout = Duration::from_millis(a.controlled_shutdown_timeout_ms);
    if let Some(r) = &a.rack {
        let max = crate::controller::cluster::MAX_RACK_LEN;
        if r.trim().is_empty() || r.len() > max {
            return Err(format!("--rack '{r}': 1 to {max} bytes"));
        }
    }
    c.rack = a.rack.clone();
    Ok(c)
}

/// The controller flags, checked together.
struct Quorum {
    voters: Vec<(u64, String)>,
    listen: Option<String>,
    broker: bool,
    controller: bool,
}

/// `HOST:PORT` with a non-empty host and a port 1..65535 (resolved only when connecting, so
/// a name that is not resolvable yet at start is fine).
fn check_host_port(flag: &str, entry: &str, addr: &str) -> Result<(), String> {
    let bad = |why: &str| format!("{flag} '{entry}': {why}");
    let Some((host, port)) = addr.rsplit_once(':') else {
        return Err(bad("expected HOST:PORT"));
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() || host.contains(char::is_whitespace) {
        return Err(bad("the host is empty or has spaces"));
    }
    match port.parse::<u16>() {
        Ok(p) if p > 0 => Ok(()),
        _ => Err(bad("the port must be a number from 1 to 65535")),
    }
}

/// Parses `ID@HOST:PORT,...`: ids from 1, no id or address twice.
pub fn parse_voters(v: &str) -> Result<Vec<(u64, String)>, String> {
    let mut out: Vec<(u64, String)> = Vec::new();
    for entry in v.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let Some((id, addr)) = entry.split_once('@') else {
            return Err(format!(
                "--controller-voters '{entry}': expected ID@HOST:PORT (e.g. 1@10.0.0.1:9393)"
            ));
        };
        let id: u32 = id.trim().parse().ok().filter(|&i| i > 0).ok_or_else(|| {
            format!("--controller-voters '{entry}': the id must be a node id from 1")
        })?;
        let addr = addr.trim();
        check_host_port("--controller-voters", entry, addr)?;
        if out.iter().any(|(i, _)| *i == u64::from(id)) {
            return Err(format!(
                "--controller-voters '{v}': node id {id} is listed twice"
            ));
        }
        if out.iter().any(|(_, a)| a == addr) {
            return Err(format!(
                "--controller-voters '{v}': address {addr} is listed twice"
            ));
        }
        out.push((u64::from(id), addr.to_string()));
    }
    if out.is_empty() {
        return Err(format!("--controller-voters '{v}' names no voter"));
    }
    Ok(out)
}

/// A TLS server configuration per listener: `--tls-listeners` names which, `--tls-cert`
/// and `--tls-key` what they present, `--tls-client-ca` whom they accept (mutual TLS).
type ListenerTls = Option<std::sync::Arc<rustls::ServerConfig>>;

fn parse_tls(a: &BrokerArgs) -> Result<(ListenerTls, ListenerTls), String> {
    let default = if a.tls_cert.is_some() {
        "native,kafka"
    } else {
        "none"
    };
    let (mut native, mut kafka) = (false, false);
    for name in a
        .tls_listeners
        .as_deref()
        .unwrap_or(default)
        .split(',')
        .map(str::trim)
    {
        match name {
            "native" => native = true,
            "kafka" => kafka = true,
            "none" | "" => {}
            other => {
                return Err(format!(
                    "--tls-listeners: unknown listener '{other}' (native, kafka or none)"
                ))
            }
        }
    }
    if !native && !kafka {
        if a.tls_cert.is_some() || a.tls_key.is_some() || a.tls_client_ca.is_some() {
            return Err(
                "--tls-cert, --tls-key and --tls-client-ca need a TLS listener: \
                        --tls-listeners native,kafka (or one of them)"
                    .into(),
            );
        }
        return Ok((None, None));
    }
    let (Some(cert), Some(key)) = (&a.tls_cert, &a.tls_key) else {
        return Err("--tls-listeners needs --tls-cert FILE and --tls-key FILE".into());
    };
    let config = crate::tls::server_config(cert, key, a.tls_client_ca.as_deref())
        .map_err(|e| format!("TLS: {e}"))?;
    Ok((native.then(|| config.clone()), kafka.then_some(config)))
}

/// TLS between brokers: trusting `--inter-broker-tls-ca`, presenting this broker's own
/// certificate (to native listeners that ask for one, and always on the controller port).
fn inter_broker_tls(
    a: &BrokerArgs,
    native_tls: bool,
) -> Result<Option<crate::tls::PeerTls>, String> {
    let Some(ca) = &a.inter_broker_tls_ca else {
        if a.inter_broker_tls_server_name.is_some() {
            return Err("--inter-broker-tls-server-name needs --inter-broker-tls-ca FILE".into());
        }
        return Ok(None);
    };
    // Brokers' native listeners are alike: one that is plaintext here is plaintext there.
    if !native_tls {
        return Err(
            "--inter-broker-tls-ca needs TLS on the native listener (--tls-listeners native)"
                .into(),
        );
    }
    let (Some(cert), Some(key)) = (&a.tls_cert, &a.tls_key) else {
        return Err("--inter-broker-tls-ca needs --tls-cert and --tls-key".into());
    };
    crate::tls::PeerTls::load(cert, key, ca, a.inter_broker_tls_server_name.as_deref())
        .map(Some)
        .map_err(|e| format!("--inter-broker-tls-ca: {e}"))
}

fn parse_quorum(a: &BrokerArgs) -> Result<Quorum, String> {
    let mut broker = false;
    let mut controller = false;
    for role in a.process_roles.split(',').map(str::trim) {
        match role {
            "broker" => broker = true,
            "controller" => controller = true,
            other => {
                return Err(format!(
                    "--process-roles '{}': unknown role '{other}' (broker, controller or \
                     broker,controller)",
                    a.process_roles
                ))
            }
        }
    }
    let voters = match &a.controller_voters {
        None => Vec::new(),
        Some(v) => parse_voters(v)?,
    };
    let me = u64::from(a.node_id);
    if !controller {
        // A broker following the quorum's metadata, not a voter.
        if ![3, 5].contains(&voters.len()) {
            return Err(format!(
                "--process-roles broker follows a controller quorum: --controller-voters must \
                 list its 3 or 5 voters (got {})",
                voters.len()
            ));
        }
        if voters.iter().any(|(id, _)| *id == me) {
            return Err(format!(
                "--process-roles broker: node id {me} is in --controller-voters; a voter runs \
                 broker,controller (or controller), a broker that is not one takes another id"
            ));
        }
        if a.controller_listen.is_some() {
            return Err(
                "--controller-listen is for voters; --process-roles broker listens for no \
                 controller"
                    .into(),
            );
        }
        return Ok(Quorum {
            voters,
            listen: None,
            broker,
            controller,
        });
    }
    if !voters.is_empty() {
        if !voters.iter().any(|(id, _)| *id == me) {
            return Err(format!(
                "--controller-voters '{}' does not list this node (--node-id {me}); every \
                 controller voter must be in the list",
                a.controller_voters.as_deref().unwrap_or_default()
            ));
        }
        if ![1, 3, 5].contains(&voters.len()) {
            return Err(format!(
                "--controller-voters lists {} voters: a quorum has 3 or 5 (2 tolerate no \
                 failure, 4 no more than 3 do)",
                voters.len()
            ));
        }
    }
    if let Some(l) = &a.controller_listen {
        if voters.len() <= 1 {
            return Err(
                "--controller-listen needs --controller-voters with 3 or 5 voters (a single \
                 voter has no transport)"
                    .into(),
            );
        }
        check_host_port("--controller-listen", l, l)?;
    }
    if !broker && voters.len() <= 1 {
        return Err(
            "--process-roles controller needs --controller-voters (a controller alone serves \
             no one)"
                .into(),
        );
    }
    Ok(Quorum {
        voters: if voters.len() == 1 {
            Vec::new()
        } else {
            voters
        },
        listen: a.controller_listen.clone(),
        broker,
        controller,
    })
}

pub fn run(a: BrokerArgs) -> Result<(), String> {
    let cfg = config_from_args(&a)?;
    run_broker(cfg).map_err(|e| e.to_string())
}

/// A `--*-sasl-mechanisms` list: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, or `none`.
fn sasl_mechanisms(flag: &str, list: &str) -> Result<Vec<String>, String> {
    let mut out: Vec<String> = Vec::new();
    for m in list.split(',').map(str::trim) {
        match m {
            "none" | "" => {}
            "PLAIN" | "SCRAM-SHA-256" | "SCRAM-SHA-512" => {
                if !out.iter().any(|x| x == m) {
                    out.push(m.to_string());
                }
            }
            other => {
                return Err(format!(
                    "{flag}: unknown mechanism '{other}' (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512)"
                ))
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn broker_args(flags: &[&str]) -> BrokerArgs {
        use clap::Parser;
        let mut argv = vec!["rill", "broker"];
        argv.extend_from_slice(flags);
        match super::super::args::Cli::try_parse_from(argv)
            .unwrap()
            .command
        {
            super::super::args::Command::Broker(a) => *a,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn consumer_group_flags_default_to_kafkas_and_are_checked() {
        let c = config_from_args(&broker_args(&[])).unwrap();
        assert_eq!(
            c.group_consumer_session_timeout,
            Duration::from_millis(45_000)
        );
        assert_eq!(
            c.group_consumer_heartbeat_interval,
            Duration::from_millis(5_000)
        );
        assert_eq!(c.group_consumer_assignors, vec!["uniform", "range"]);
        let c = config_from_args(&broker_args(&[
            "--group-consumer-assignors",
            "range",
            "--group-consumer-session-timeout-ms",
            "10000",
            "--group-consumer-heartbeat-interval-ms",
            "1000",
        ]))
        .unwrap();
        assert_eq!(c.group_consumer_assignors, vec!["range"]);
        assert_eq!(
            c.group_consumer_session_timeout,
            Duration::from_millis(10_000)
        );
        let e = config_from_args(&broker_args(&[
            "--group-consumer-assignors",
            "range,sticky",
        ]))
        .unwrap_err();
        assert!(e.contains("unknown assignor \"sticky\""), "{e}");
        let e = config_from_args(&broker_args(&[
            "--group-consumer-heartbeat-interval-ms",
            "45000",
        ]))
        .unwrap_err();
        assert!(e.contains("--group-consumer-session-timeout-ms"), "{e}");
    }
    #[test]
    fn the_tail_cache_defaults_to_an_eighth_of_the_memory() {
        let memory = crate::broker::machine_memory::read().expect("/proc/meminfo");
        let c = config_from_args(&broker_args(&[])).unwrap();
        assert_eq!(c.tail_cache_bytes as u64, memory.total / 8);
        assert_eq!(c.tail_cache_min_available_bytes, memory.total / 8);
        let c = config_from_args(&broker_args(&[
            "--tail-cache-bytes",
            "1000",
            "--tail-cache-min-available-bytes",
            "0",
        ]))
        .unwrap();
        assert_eq!(
            (c.tail_cache_bytes, c.tail_cache_min_available_bytes),
            (1000, 0)
        );
    }

    #[test]
    fn file_write_flags_default_and_are_checked() {
        let c = config_from_args(&broker_args(&[])).unwrap();
        assert_eq!((c.file_write_bytes, c.file_writes_in_flight), (2 << 20, 4));
        let c = config_from_args(&broker_args(&[
            "--file-write-bytes",
            "65536",
            "--file-writes-in-flight",
            "1",
        ]))
        .unwrap();
        assert_eq!((c.file_write_bytes, c.file_writes_in_flight), (65536, 1));
        for (flags, needle) in [
            (["--file-write-bytes", "5000"], "--file-write-bytes 5000"),
            (["--file-write-bytes", "0"], "--file-write-bytes 0"),
            (["--file-write-bytes", "134217728"], "--file-write-bytes"),
            (
                ["--file-writes-in-flight", "0"],
                "--file-writes-in-flight 0",
            ),
            (
                ["--file-writes-in-flight", "65"],
                "--file-writes-in-flight 65",
            ),
        ] {
            let e = config_from_args(&broker_args(&flags)).unwrap_err();
            assert!(e.contains(needle), "{flags:?}: {e}");
        }
    }

    #[test]
    fn file_delete_flags_default_and_are_checked() {
        use crate::log::file_removal::RemovalPace;
        let c = config_from_args(&broker_args(&[])).unwrap();
        assert_eq!(
            c.file_delete,
            RemovalPace {
                step_bytes: 4 << 20,
                step_pause: std::time::Duration::from_millis(1),
                queue: 1024,
            }
        );
        let c = config_from_args(&broker_args(&[
            "--file-delete-step-bytes",
            "0",
            "--file-delete-step-pause-us",
            "500",
            "--file-delete-queue",
            "1",
        ]))
        .unwrap();
        assert_eq!(
            c.file_delete,
            RemovalPace {
                step_bytes: 0,
                step_pause: std::time::Duration::from_micros(500),
                queue: 1,
            }
        );
        for (flags, needle) in [
            (
                ["--file-delete-step-bytes", "4096"],
                "--file-delete-step-bytes 4096",
            ),
            (
                ["--file-delete-step-pause-us", "1000001"],
                "--file-delete-step-pause-us 1000001",
            ),
            (["--file-delete-queue", "0"], "--file-delete-queue 0"),
            (
                ["--file-delete-queue", "65537"],
                "--file-delete-queue 65537",
            ),
        ] {
            let e = config_from_args(&broker_args(&flags)).unwrap_err();
            assert!(e.contains(needle), "{flags:?}: {e}");
        }
    }

    #[test]
    fn checkpoint_threads_default_and_are_checked() {
        let c = config_from_args(&broker_args(&[])).unwrap();
        assert_eq!(c.hw_checkpoint_threads, 1);
        let flag = "--replica-high-watermark-checkpoint-threads";
        let c = config_from_args(&broker_args(&[flag, "64"])).unwrap();
        assert_eq!(c.hw_checkpoint_threads, 64);
        for bad in ["0", "65"] {
            let e = config_from_args(&broker_args(&[flag, bad])).unwrap_err();
            assert!(
                e.contains(&format!("{flag} {bad}: must be from 1 to 64")),
                "{e}"
            );
        }
    }

    #[test]
    fn cores() {
        assert_eq!(parse_cores("0,2").unwrap(), vec![0, 2]);
        assert_eq!(parse_cores("1-3").unwrap(), vec![1, 2, 3]);
        assert!(parse_cores("3-1").is_err());
        assert!(parse_cores("x").is_err());
        assert!(parse_cores("").is_err());
    }

    #[test]
    fn voters() {
        assert_eq!(
            parse_voters("1@h:1, 2@[::1]:2,3@10.0.0.3:3").unwrap(),
            vec![
                (1, "h:1".to_string()),
                (2, "[::1]:2".to_string()),
                (3, "10.0.0.3:3".to_string())
            ]
        );
        for bad in [
            "1@h:1,1@h:2",
            "1@h:1,2@h:1",
            "0@h:1",
            "x@h:1",
            "1h:1",
            "1@h",
            "1@:1",
            "1@h:0",
            "1@h:99999",
            ",",
        ] {
            let e = parse_voters(bad).expect_err(bad);
            assert!(e.starts_with("--controller-voters"), "{e}");
            assert!(!e.contains('\n'));
        }
    }
}
