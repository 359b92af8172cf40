//! Starting a broker: lock the data dir, start the controller, register, start the shards.

use std::os::unix::io::AsRawFd;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ::log::Level;
use rill_shards::rt::{spawn_local, TcpListener, TcpStream};
use rill_shards::{start_shards, ShardConfig, ShardContext};

use super::stray;
use crate::broker::group_host::OFFSETS_TOPIC;
use crate::broker::internal_topics::{self, InternalTopic};
use crate::broker::shard::{AppliedIndexes, Shard};
use crate::broker::BrokerConfig;
use crate::controller::broker_session::{self, BrokerSession, SessionConfig};
use crate::controller::cluster::BrokerRegistration;
use crate::controller::metadata::{BrokerInfo, Command, MetadataLimits};
use crate::controller::{self, ControllerConfig, ControllerError};
use crate::log::{FileReads, FsyncPolicy};
use crate::logging::announce;
use crate::metrics::Listener;
use crate::net::conn_limits::{accepted, after, until};
use crate::net::sendfile::SendfileWorker;
use crate::net::shared_stream::SharedStream;
use crate::net::tls_stream;
use crate::protocol::error_code::ErrorCode;

#[derive(Debug, thiserror::Error)]
pub enum BrokerError {
    #[error("data dir {path}: {source}")]
    DataDir {
        path: String,
        source: std::io::Error,
    },
    #[error("data dir {0} is in use by another rill broker")]
    Locked(String),
    #[error("controller: {0}")]
    Controller(#[from] ControllerError),
    #[error("{0}")]
    Shards(#[from] rill_shards::ShardError),
    #[error("cannot listen on {addr}: {why}")]
    Listen { addr: String, why: String },
    #[error("{0}")]
    Config(String),
    /// The controller's files hold no metadata, yet topic directories exist: starting would
    /// lose track of their data.
    #[error(
        "data dir {data_dir}: the controller metadata is missing ({what}) while {topic_dirs} \
         topic directories exist under {data_dir}/topics; refusing to start (restore \
         {data_dir}/controller, or move topics/ away to start empty)"
    )]
    MetadataMissing {
        data_dir: String,
        what: &'static str,
        topic_dirs: usize,
    },
    #[error("{0}")]
    Stray(#[from] stray::StrayError),
}

/// Metadata updates a shard may lag behind before older ones are dropped (it needs only the
/// newest).
const METADATA_QUEUE: usize = 64;

/// Runs a broker until the process is stopped.
/// Blocks SIGINT and SIGTERM in this thread and every thread it starts after, so that only
/// `wait_for_stop_signal` receives them.
fn block_stop_signals() -> libc::sigset_t {
    // SAFETY: plain libc signal-set calls on a local set.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    }
}

fn wait_for_stop_signal(set: &libc::sigset_t) -> i32 {
    let mut sig = 0;
    // SAFETY: `set` is a valid signal set; sigwait writes the signal number.
    unsafe { libc::sigwait(set, &mut sig) };
    sig
}

/// Backs the tail cache's memory now (`--tail-cache-pre-touch`), in the arena request frames
/// are carved from (the frames the tail cache keeps).
fn pre_touch_tail_cache(bytes: usize) {
    let started = std::time::Instant::now();
    match crate::memory::frame_arena::pre_touch(bytes) {
        Some(backed) => ::log::info!(
            "--tail-cache-pre-touch: backed {} MiB of request memory in {} ms",
            backed >> 20,
            started.elapsed().as_millis()
        ),
        None => ::log::warn!(
            "--tail-cache-pre-touch: request frames are not carved from the broker's arena \
             in this process (not the rill binary): nothing backed"
        ),
    }
}

pub fn run_broker(cfg: BrokerConfig) -> Result<(), BrokerError> {
    let signals = block_stop_signals();
    let shards = cfg.cores.len();
    cfg.check_listener_ports(shards)
        .map_err(BrokerError::Config)?;
    crate::kafka::configure(cfg.max_frame_bytes);
    wait_for_free_ports(&cfg, shards)?;
    let dir = cfg.data_dir.clone();
    let dir_err = |source| BrokerError::DataDir {
        path: dir.display().to_string(),
        source,
    };
    std::fs::create_dir_all(&dir).map_err(dir_err)?;
    let _lock = lock_data_dir(&cfg)?;
    // Made while there is space, so that setting a directory aside later (a rename into it)
    // needs no new block: on a full disk a start that had to create it failed.
    let stray_dir = dir.join(stray::STRAY_DIR);
    if let Err(e) = std::fs::create_dir_all(&stray_dir) {
        ::log::warn!("cannot create {}: {e}", stray_dir.display());
    }
    // Bound now, so that a taken port fails the start before anything runs (std's listener
    // has no SO_REUSEPORT: binding next to a live one fails).
    let metrics_listener = cfg
        .metrics_listen
        .map(|addr| {
            std::net::TcpListener::bind(addr).map_err(|e| BrokerError::Listen {
                addr: addr.to_string(),
                why: e.to_string(),
            })
        })
        .transpose()?;
    if cfg.tail_cache_pre_touch {
        pre_touch_tail_cache(cfg.tail_cache_bytes);
    }
    let pace = crate::log::file_removal::configure(cfg.file_delete);
    if pace != cfg.file_delete {
        ::log::warn!(
            "--file-delete-*: this process already removes files at another pace (another \
             broker in it): {pace:?} stays"
        );
    }

    let mut ccfg = ControllerConfig::new(&cfg.data_dir, u64::from(cfg.node_id));
    ccfg.limits = MetadataLimits {
        max_partitions_per_topic: cfg.max_partitions_per_topic,
        max_partitions_per_shard: cfg.max_partitions_per_shard,
    };
    ccfg.storage_retry = cfg.storage_retry_interval;
    ccfg.voters = cfg.controller_voters.clone();
    ccfg.listen = cfg.controller_listen.clone();
    ccfg.max_message_bytes = cfg.controller_max_message_bytes;
    ccfg.tls = cfg.inter_broker_tls.clone();
    ccfg.broker_session_timeout = cfg.broker_session_timeout;
    ccfg.observer = !cfg.controller_role;
    let quorum = ccfg.voters.len() > 1;
    // Topic directories without any controller state mean the metadata was lost, not that
    // this is a new broker: refuse before the controller creates a fresh log.
    let topic_dirs = stray::topic_dirs(&cfg.data_dir).map_err(dir_err)?.len();
    let missing = |what| BrokerError::MetadataMissing {
        data_dir: cfg.data_dir.display().to_string(),
        what,
        topic_dirs,
    };
    let has_state = controller::raft_log::has_state(&ccfg.controller_dir())
        .map_err(|e| ControllerError::Storage(e.to_string()))?;
    // A broker that is not a voter keeps no controller files: its metadata is the quorum's.
    if topic_dirs > 0 && !has_state && cfg.controller_role {
        return Err(missing("no controller/raft.log or snapshot"));
    }
    let controller = controller::start(ccfg)?;
    let handle = controller.handle();
    // Set when the controller starts on a full disk (see below).
    let mut read_only_metadata = false;
    let md = if quorum {
        match wait_for_quorum(&handle, &cfg, &signals)? {
            Some(md) => md,
            None => {
                controller.shutdown();
                announce!(
                    Level::Info,
                    "rill: stopped before the controller quorum formed"
                );
                return Ok(());
            }
        }
    } else {
        match handle.wait_ready(Duration::from_secs(60)) {
            Ok(md) => md,
            // A full disk: serve what the files hold, read-only, until space is back (the
            // controller retries on its own); a fresh log has nothing to serve.
            Err(ControllerError::Storage(e)) if handle.metadata().applied_index > 0 => {
                log::warn!("{e}: starting with the metadata on disk; changes wait for space");
                read_only_metadata = true;
                handle.metadata()
            }
            Err(e) => return Err(e.into()),
        }
    };
    if !cfg.broker_role {
        return run_controller_only(&cfg, controller, metrics_listener, &signals);
    }
    // Every broker registers before it creates any topic: a metadata without brokers is a
    // fresh one (a log recreated from nothing), whatever the files look like.
    if topic_dirs > 0 && md.brokers.is_empty() {
        controller.shutdown();
        return Err(missing("controller/raft.log holds a new, empty cluster"));
    }
    let info = BrokerInfo {
        node_id: cfg.node_id,
        host: cfg.advertised_host.clone(),
        port: cfg.listen.port(),
        shards: shards as u32,
        kafka_port: cfg.kafka_listen.map(|a| a.port()),
    };
    // A broker of a cluster is a member: it registers with an incarnation, heartbeats, and is
    // fenced when it stops; the single-node broker registers as before and is never fenced.
    let session = if quorum {
        let scfg = SessionConfig {
            registration: BrokerRegistration {
                broker: info,
                incarnation: controller::random_u64(2),
                rack: cfg.rack.clone(),
            },
            heartbeat_interval: cfg.broker_heartbeat_interval,
            session_timeout: cfg.broker_session_timeout,
            register_wait: START_PROPOSAL_WAIT.max(cfg.broker_session_timeout * 3),
        };
        let epoch = match broker_session::register(&handle, &scfg) {
            Ok(epoch) => epoch,
            Err(e) => {
                controller.shutdown();
                return Err(e.into());
            }
        };
        log::info!("broker {} registered (broker epoch {epoch})", cfg.node_id);
        Some(BrokerSession::start(handle.clone(), scfg, epoch).map_err(dir_err)?)
    } else {
        // Registering again as it was changes nothing: no write (a restart on a full disk).
        if md.brokers.get(&cfg.node_id) != Some(&info) {
            propose_at_start(&handle, Command::RegisterBroker(info), quorum)?;
        }
        None
    };
    // A single node creates the internal topic whose partitions place group coordinators
    // now, with its one replica; a cluster creates it at the first coordinator request, once
    // enough brokers are live (`broker::offsets_topic`).
    if !quorum && handle.metadata().topic(OFFSETS_TOPIC).is_none() {
        let create = internal_topics::create_command(
            InternalTopic::Offsets,
            cfg.offsets_topic_partitions,
            1,
        );
        propose_at_start(&handle, create, quorum)?;
    }
    let md = handle.metadata();
    // Metadata read from the files without raft's new term may lack entries logged but not
    // yet marked committed: a topic missing from it is not unknown, so nothing is set aside.
    if !read_only_metadata {
        stray::set_aside_unknown_topic_dirs(&cfg.data_dir, &md, crate::clock::now_ms())?;
        stray::set_aside_moved_partition_dirs(
            &cfg.data_dir,
            &md,
            cfg.node_id,
            crate::clock::now_ms(),
        )?;
    }
    stray::remove_expired_strays(
        &cfg.data_dir,
        cfg.stray_log_retention,
        crate::clock::now_ms(),
    );
    let stray_sweeper = start_stray_sweeper(&cfg).map_err(dir_err)?;

    let cfg = Arc::new(cfg);
    let applied = AppliedIndexes::new(shards);
    let (bound_tx, bound_rx) = flume::bounded::<Result<(), BrokerError>>(shards);
    let scfg = ShardConfig {
        cpus: cfg.cores.clone(),
        io_memory_bytes: cfg.io_memory_bytes,
        spin_before_park: cfg.spin_before_park,
        prime_dir: cfg.data_dir.clone(),
        name: "rill-shard".into(),
    };
    let shard_cfg = cfg.clone();
    let (stop_txs, stop_rxs): (Vec<_>, Vec<_>) =
        (0..shards).map(|_| flume::bounded::<()>(1)).unzip();
    let stops = Arc::new(rill_shards::PerShard::new(stop_rxs));
    let (scrapers, scrape_rxs) = match metrics_listener {
        Some(l) => {
            let (scrapers, rxs) = super::metrics::channels(shards);
            (Some((l, scrapers)), rxs.into_iter().map(Some).collect())
        }
        None => (None, (0..shards).map(|_| None).collect()),
    };
    let scrape_rxs = Arc::new(rill_shards::PerShard::new(scrape_rxs));
    let controller_handle = handle.clone();
    let set = start_shards(scfg, move |ctx: ShardContext| {
        let cfg = shard_cfg.clone();
        let handle = handle.clone();
        let applied = applied.clone();
        let bound_tx = bound_tx.clone();
        let stop = stops.take(ctx.id);
        let scrapes = scrape_rxs.take(ctx.id).flatten();
        async move { run_shard(ctx, cfg, handle, applied, bound_tx, stop, scrapes).await }
    })?;
    for _ in 0..shards {
        match bound_rx.recv() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(e),
            Err(_) => break,
        }
    }
    announce!(
        Level::Info,
        "rill: broker {} ready: native protocol on {}:{}..{} ({} shards), fsync {}, data in {}",
        cfg.node_id,
        cfg.listen.ip(),
        cfg.listen.port(),
        u32::from(cfg.listen.port()) + shards as u32 - 1,
        shards,
        cfg.fsync,
        cfg.data_dir.display()
    );
    if let Some(k) = cfg.kafka_listen {
        announce!(
            Level::Info,
            "rill: Kafka protocol on {}:{}..{}",
            k.ip(),
            k.port(),
            u32::from(k.port()) + shards as u32 - 1
        );
    }
    let tls: Vec<&str> = [
        ("native", cfg.native_tls.is_some()),
        ("kafka", cfg.kafka_tls.is_some()),
    ]
    .into_iter()
    .filter_map(|(name, on)| on.then_some(name))
    .collect();
    if !tls.is_empty() {
        announce!(
            Level::Info,
            "rill: TLS on the {} listener(s)",
            tls.join(" and ")
        );
    }
    let metrics = match scrapers {
        Some((listener, scrapers)) => {
            let server = start_metrics(listener, scrapers, controller_handle);
            Some(server.map_err(|e| metrics_error(&cfg, e))?)
        }
        None => None,
    };
    let sig = wait_for_stop_signal(&signals);
    if let Some(m) = metrics {
        m.stop();
    }
    if let Some(session) = &session {
        announce!(
            Level::Info,
            "rill: signal {sig}: controlled shutdown (moving partition leadership away)"
        );
        if !session.controlled_shutdown(cfg.controlled_shutdown_timeout) {
            announce!(
                Level::Warn,
                "rill: leadership not moved away within --controlled-shutdown-timeout-ms {}; \
                 stopping anyway",
                cfg.controlled_shutdown_timeout.as_millis()
            );
        }
    }
    announce!(
        Level::Info,
        "rill: signal {sig}: stopping (no new connections; pending writes are flushed)"
    );
    for tx in &stop_txs {
        let _ = tx.send(());
    }
    for (i, r) in set.join().into_iter().enumerate() {
        if let Err(e) = r {
            log::error!("shard {i} stopped: {e}");
        }
    }
    stray_sweeper.stop();
    if let Some(session) = session {
        session.stop();
    }
    controller.shutdown();
    announce!(Level::Info, "rill: broker {} stopped cleanly", cfg.node_id);
    Ok(())
}

/// How long a starting broker keeps proposing its registration (and the internal topic)
/// while a quorum elects a leader.
const START_PROPOSAL_WAIT: Duration = Duration::from_secs(120);

/// Proposes `cmd` at start. With a quorum, refusals that only mean "no leader yet" (an
/// election, a leader just gone, a forwarded proposal whose outcome got lost) are retried
/// until [`START_PROPOSAL_WAIT`]: registration is idempotent and the internal topic's
/// creation tolerates "already exists". A single voter answers once, as before.
fn propose_at_start(
    handle: &controller::ControllerHandle,
    cmd: Command,
    quorum: bool,
) -> Result<controller::Applied, ControllerError> {
    let deadline = std::time::Instant::now() + START_PROPOSAL_WAIT;
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let result = handle
            .propose(cmd.clone())
            .recv_timeout(if quorum {
                left
            } else {
                Duration::from_secs(60)
            })
            .map_err(|_| ControllerError::Timeout)?;
        let retriable = match &result {
            Err(ControllerError::NotController { .. })
            | Err(ControllerError::NotLeader)
            | Err(ControllerError::Timeout)
            | Err(ControllerError::Unreachable(_))
            | Err(ControllerError::Overloaded(_)) => true,
            // No live broker to place it on: every member fenced for a moment (a stalled
            // machine); they come back with their next heartbeats.
            Err(ControllerError::Metadata(e)) => e.code == ErrorCode::InvalidReplicationFactor,
            _ => false,
        };
        if !quorum || !retriable || std::time::Instant::now() >= deadline {
            return result;
        }
        if let Err(e) = &result {
            log::info!("controller: retrying at start: {e}");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Waits until this voter's metadata is current (a leader elected and caught up with),
/// however long the other voters take to start, logging every 15 s. `None`: a stop signal
/// came first. A quorum that refused this node (disagreeing voters) is an error.
fn wait_for_quorum(
    handle: &controller::ControllerHandle,
    cfg: &BrokerConfig,
    signals: &libc::sigset_t,
) -> Result<Option<Arc<crate::controller::ClusterMetadata>>, BrokerError> {
    let start = std::time::Instant::now();
    let mut said = start;
    loop {
        match handle.wait_ready(Duration::from_millis(500)) {
            Ok(md) => return Ok(Some(md)),
            Err(ControllerError::Timeout) => {}
            Err(e) => return Err(e.into()),
        }
        if stop_signal_pending(signals) {
            return Ok(None);
        }
        if said.elapsed() >= Duration::from_secs(15) {
            said = std::time::Instant::now();
            announce!(
                Level::Info,
                "rill: node {} waiting {} s for the controller quorum {} to elect a leader",
                cfg.node_id,
                start.elapsed().as_secs(),
                controller::transport::voters_text(&cfg.controller_voters)
            );
        }
    }
}

/// A stop signal already delivered (and taken), without waiting.
fn stop_signal_pending(set: &libc::sigset_t) -> bool {
    let zero = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `set` is a valid signal set; a null info pointer is allowed.
    unsafe { libc::sigtimedwait(set, std::ptr::null_mut(), &zero) > 0 }
}

/// The metrics endpoint could not start (its thread could not be spawned).
fn metrics_error(cfg: &BrokerConfig, e: std::io::Error) -> BrokerError {
    BrokerError::Listen {
        addr: cfg
            .metrics_listen
            .map_or_else(String::new, |a| a.to_string()),
        why: e.to_string(),
    }
}

/// Starts the metrics endpoint and says where it is.
fn start_metrics(
    listener: std::net::TcpListener,
    scrapers: super::metrics::Scrapers,
    controller: controller::ControllerHandle,
) -> std::io::Result<crate::metrics::http::MetricsServer> {
    let server = super::metrics::start(listener, scrapers, controller)?;
    announce!(
        Level::Info,
        "rill: Prometheus metrics on http://{}/metrics",
        server.local_addr()
    );
    Ok(server)
}

/// `--process-roles controller`: the voter alone, no shards and no client listeners (the
/// metrics endpoint, if asked for, serves the controller's state), until stopped.
fn run_controller_only(
    cfg: &BrokerConfig,
    controller: controller::Controller,
    metrics_listener: Option<std::net::TcpListener>,
    signals: &libc::sigset_t,
) -> Result<(), BrokerError> {
    let metrics = match metrics_listener {
        Some(l) => {
            let (scrapers, _) = super::metrics::channels(0);
            let server = start_metrics(l, scrapers, controller.handle());
            Some(server.map_err(|e| metrics_error(cfg, e))?)
        }
        None => None,
    };
    announce!(
        Level::Info,
        "rill: controller {} ready (controller only): voters {}, data in {}",
        cfg.node_id,
        controller::transport::voters_text(&cfg.controller_voters),
        cfg.data_dir.display()
    );
    let sig = wait_for_stop_signal(signals);
    announce!(Level::Info, "rill: signal {sig}: stopping");
    if let Some(m) = metrics {
        m.stop();
    }
    controller.shutdown();
    announce!(
        Level::Info,
        "rill: controller {} stopped cleanly",
        cfg.node_id
    );
    Ok(())
}

/// Binds a shard's listener. A port still held by the kernel for a SIGKILLed broker (its
/// sockets outlive the process for a moment: see `wait_for_free_ports`) can refuse the bind
/// with EADDRINUSE even after nobody answers there any more, as a CI run showed on a restart:
/// retried until `--port-release-wait-ms`. A port's TIME_WAIT connections never refuse it
/// (see `rill_shards::listen`).
async fn bind_listener(
    addr: std::net::SocketAddr,
    wait: Duration,
) -> Result<TcpListener, BrokerError> {
    let deadline = std::time::Instant::now() + wait;
    loop {
        match rill_shards::listen::listen(addr) {
            Ok(l) => return Ok(l),
            Err(e)
                if e.kind() == std::io::ErrorKind::AddrInUse
                    && std::time::Instant::now() < deadline =>
            {
                rill_shards::rt::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => {
                return Err(BrokerError::Listen {
                    addr: addr.to_string(),
                    why: e.to_string(),
                })
            }
        }
    }
}

async fn run_shard(
    ctx: ShardContext,
    cfg: Arc<BrokerConfig>,
    handle: controller::ControllerHandle,
    applied: Arc<AppliedIndexes>,
    bound: flume::Sender<Result<(), BrokerError>>,
    stop: Option<flume::Receiver<()>>,
    scrapes: Option<flume::Receiver<super::metrics::SnapshotReply>>,
) {
    crate::logging::set_shard(ctx.id);
    let port = |base: std::net::SocketAddr| {
        std::net::SocketAddr::new(base.ip(), base.port() + ctx.id as u16)
    };
    let listener = match bind_listener(port(cfg.listen), cfg.port_release_wait).await {
        Ok(l) => l,
        Err(e) => {
            let _ = bound.send(Err(e));
            return;
        }
    };
    let kafka_listener = match cfg.kafka_listen {
        Some(k) => bind_listener(port(k), cfg.port_release_wait)
            .await
            .map(Some),
        None => Ok(None),
    };
    let kafka_listener = match kafka_listener {
        Ok(l) => l,
        Err(e) => {
            let _ = bound.send(Err(e));
            return;
        }
    };
    let updates = handle.subscribe(METADATA_QUEUE);
    let sendfile = match cfg.file_reads {
        FileReads::Copy => None,
        FileReads::Sendfile => match SendfileWorker::start(ctx.id) {
            Ok(w) => Some(w),
            Err(e) => {
                let _ = bound.send(Err(BrokerError::Config(format!(
                    "cannot start the sendfile worker: {e}"
                ))));
                return;
            }
        },
    };
    let shard = Shard::new(
        ctx.id,
        ctx.count,
        cfg.clone(),
        handle.clone(),
        applied,
        ctx.deadlines.clone(),
        sendfile,
    );
    shard.apply_metadata(handle.metadata()).await;
    crate::broker::coordination::wait_single_replica_loads(&shard).await;
    if let Err(e) = crate::delay::queue::start(&shard).await {
        let _ = bound.send(Err(BrokerError::Config(format!(
            "shard {}: delayed messages: {e}",
            ctx.id
        ))));
        return;
    }
    spawn_local(shard.group_commit.clone().run()).detach();
    if let FsyncPolicy::Interval(every) = cfg.fsync {
        let s = shard.clone();
        spawn_local(async move {
            loop {
                rill_shards::rt::sleep(every).await;
                s.group_commit.sync_all(&s.all_partitions()).await;
            }
        })
        .detach();
    }
    spawn_local(retention_loop(shard.clone())).detach();
    let (cleaned, cached) = (shard.clone(), shard.clone());
    spawn_local(crate::partition::cleaner::run(
        move || cleaned.all_partitions(),
        move |key, below| cached.cache.forget_below(key, below),
        shard.cfg.log_cleaner.clone(),
    ))
    .detach();
    spawn_local(checkpoint_loop(shard.clone())).detach();
    spawn_local(storage_retry_loop(shard.clone())).detach();
    if shard.cfg.tail_cache_min_available_bytes > 0 {
        spawn_local(cache_memory_loop(shard.clone())).detach();
    }
    spawn_local(group_ticks(shard.clone())).detach();
    if let Some(rx) = scrapes {
        spawn_local(super::metrics::answer_scrapes(shard.clone(), rx)).detach();
    }
    spawn_local(shard.clone().replication_loop()).detach();
    spawn_local(crate::native::replica_fetcher::run(shard.clone())).detach();
    spawn_local(crate::broker::transactions::run_timers(shard.clone())).detach();
    spawn_local(crate::native::marker_sender::run(shard.clone())).detach();
    if shard.id == 0 {
        spawn_local(crate::broker::users::ensure_inter_broker_user(
            shard.clone(),
        ))
        .detach();
    }
    let s = shard.clone();
    spawn_local(async move {
        while let Ok(md) = updates.recv_async().await {
            // Only the newest matters: skip to it.
            let md = updates.drain().last().unwrap_or(md);
            s.apply_metadata(md).await;
        }
    })
    .detach();
    let _ = bound.send(Ok(()));
    let stopped = async {
        match stop {
            Some(rx) => {
                let _ = rx.recv_async().await;
            }
            None => std::future::pending::<()>().await,
        }
    };
    let listeners = async {
        match kafka_listener {
            Some(k) => {
                futures_lite::future::zip(
                    accept_loop(shard.clone(), listener, Protocol::Native),
                    accept_loop(shard.clone(), k, Protocol::Kafka),
                )
                .await;
            }
            None => accept_loop(shard.clone(), listener, Protocol::Native).await,
        }
    };
    futures_lite::future::or(listeners, stopped).await;
    // Stop: the listener is closed; let every append accepted so far reach the disk (and the
    // disk's cache, whatever --fsync says), then end the shard.
    shard.group_commit.quiesce().await;
    shard.group_commit.sync_all(&shard.all_partitions()).await;
    checkpoint_high_watermarks(&shard).await;
    snapshot_producers(&shard, true).await;
}

/// Records every partition's high watermark whose checkpoint is behind.
async fn checkpoint_high_watermarks(shard: &Shard) {
    let started = Instant::now();
    let threads = shard.cfg.hw_checkpoint_threads;
    let partitions = shard.all_partitions();
    let written = crate::partition::checkpoint_high_watermarks(&partitions, threads).await;
    // Only checkpoints that wrote something: an idle tick would record a zero.
    if written > 0 {
        shard
            .checkpoint_duration
            .observe_duration(started.elapsed());
    }
}

/// Writes the producer-state snapshot of every partition that needs one (at a clean stop:
/// `force`; else those saved at a roll), so the next start replays little.
async fn snapshot_producers(shard: &Shard, force: bool) {
    crate::partition::snapshot_producers(&shard.all_partitions(), force).await;
}

/// Every `--replica-high-watermark-checkpoint-interval-ms`, or once the shard wrote
/// `--replica-high-watermark-checkpoint-bytes` since the last time, checkpoints high
/// watermarks and writes the producer-state snapshots of segment rolls the log is now durable
/// past.
/// With `--fsync always` every round is synced already: no flush has a backlog to bound, and
/// the byte trigger is not used.
async fn checkpoint_loop(shard: Rc<Shard>) {
    let by_bytes = shard
        .cfg
        .hw_checkpoint_bytes
        .filter(|_| shard.cfg.fsync != FsyncPolicy::Always);
    let mut last = Instant::now();
    loop {
        let timer = std::pin::pin!(rill_shards::rt::sleep(shard.cfg.hw_checkpoint_interval));
        match by_bytes {
            None => timer.await,
            Some(bytes) => {
                let target = shard.group_commit.written_bytes().saturating_add(bytes);
                let written = std::pin::pin!(shard.group_commit.written_reaches(target));
                futures_util::future::select(timer, written).await;
                // A fast disk reaches the bytes often: a checkpoint syncs a file per
                // partition, so at most one per MIN_CHECKPOINT_GAP.
                let next = last + MIN_CHECKPOINT_GAP.min(shard.cfg.hw_checkpoint_interval);
                rill_shards::rt::sleep(next.saturating_duration_since(Instant::now())).await;
            }
        }
        last = Instant::now();
        checkpoint_high_watermarks(&shard).await;
        snapshot_producers(&shard, false).await;
    }
}

/// Least time between two checkpoints started by `--replica-high-watermark-checkpoint-bytes`
/// (at 2 GB/s, 4 MiB would be 250 a second, each a file and two syncs per partition).
const MIN_CHECKPOINT_GAP: Duration = Duration::from_millis(100);

/// How often a shard's tail cache checks the memory the broker may still use.
const CACHE_MEMORY_CHECK: Duration = Duration::from_secs(1);

/// Every [`CACHE_MEMORY_CHECK`], gives tail-cache memory back while less than
/// `--tail-cache-min-available-bytes` is available, and takes it again once there is room.
async fn cache_memory_loop(shard: Rc<Shard>) {
    loop {
        if let Some(m) = crate::broker::machine_memory::read() {
            let min = shard.cfg.tail_cache_min_available_bytes;
            shard.cache.follow_memory(m.available, min, shard.count);
        }
        rill_shards::rt::sleep(CACHE_MEMORY_CHECK).await;
    }
}

/// Every `--storage-retry-interval-ms`, retries partitions whose storage failed.
async fn storage_retry_loop(shard: Rc<Shard>) {
    loop {
        rill_shards::rt::sleep(shard.cfg.storage_retry_interval).await;
        shard.retry_storage().await;
    }
}

/// The thread removing set-aside topic directories once past `--stray-log-retention-ms`, off
/// the shards (a large directory's removal would stall a shard's data path).
struct StraySweeper {
    stop: Option<flume::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl StraySweeper {
    fn stop(mut self) {
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Sweeps `<data>/stray/` every `--retention-check-interval-ms` until stopped; no thread when
/// strays are kept forever.
fn start_stray_sweeper(cfg: &BrokerConfig) -> std::io::Result<StraySweeper> {
    let Some(retention) = cfg.stray_log_retention else {
        return Ok(StraySweeper {
            stop: None,
            thread: None,
        });
    };
    let (tx, rx) = flume::bounded::<()>(1);
    let dir = cfg.data_dir.clone();
    let every = cfg.retention_check_interval;
    let thread = std::thread::Builder::new()
        .name("rill-stray-sweep".into())
        .spawn(move || {
            // Ends when the sender is dropped (broker stopping).
            while let Err(flume::RecvTimeoutError::Timeout) = rx.recv_timeout(every) {
                stray::remove_expired_strays(&dir, Some(retention), crate::clock::now_ms());
            }
        })?;
    Ok(StraySweeper {
        stop: Some(tx),
        thread: Some(thread),
    })
}

/// How often a shard expires group sessions and rebalance deadlines.
const GROUP_TICK: Duration = Duration::from_millis(100);

async fn group_ticks(shard: Rc<Shard>) {
    loop {
        rill_shards::rt::sleep(GROUP_TICK).await;
        shard.groups.tick(crate::clock::now_ms().max(0) as u64);
    }
}

/// Segments one shard deletes per retention tick at most: the rest wait for the next tick, so
/// retention never stalls the shard's appends and fetches for long.
const RETENTION_SEGMENTS_PER_TICK: usize = 64;

/// Every `--retention-check-interval-ms`, deletes closed segments past each partition's
/// `retention.ms` / `retention.bytes`.
async fn retention_loop(shard: Rc<Shard>) {
    loop {
        rill_shards::rt::sleep(shard.cfg.retention_check_interval).await;
        let mut budget = RETENTION_SEGMENTS_PER_TICK;
        let expiration = shard.cfg.producer_id_expiration;
        for p in shard.all_partitions() {
            p.expire_producers(crate::clock::now_ms(), expiration);
            if budget == 0 {
                break;
            }
            match p.enforce_retention(crate::clock::now_ms(), budget).await {
                Ok(n) => budget -= n,
                Err(e) => log::error!("{}-{}: retention failed: {e}", p.topic, p.index),
            }
            rill_shards::rt::yield_if_needed().await;
        }
    }
}

/// Which wire protocol a listener speaks.
#[derive(Clone, Copy)]
enum Protocol {
    Native,
    Kafka,
}

impl Protocol {
    fn listener(self) -> Listener {
        match self {
            Protocol::Native => Listener::Native,
            Protocol::Kafka => Listener::Kafka,
        }
    }

    /// How log lines name the listener.
    fn name(self) -> &'static str {
        self.listener().label()
    }
}

async fn accept_loop(shard: Rc<Shard>, listener: TcpListener, protocol: Protocol) {
    let conns = match protocol {
        Protocol::Native => shard.native_conns.clone(),
        Protocol::Kafka => shard.kafka_conns.clone(),
    };
    loop {
        match listener.accept().await {
            Ok(stream) => {
                let peer = stream.peer_addr().ok();
                let guard = match conns.admit(peer.map(|p| p.ip())) {
                    Ok(g) => g,
                    Err(why) => {
                        // Closed at once: the client sees EOF and may retry elsewhere.
                        conns.log_refusal(shard.id, peer, why);
                        drop(stream);
                        continue;
                    }
                };
                let s = shard.clone();
                let tls = match protocol {
                    Protocol::Native => shard.cfg.native_tls.clone(),
                    Protocol::Kafka => shard.cfg.kafka_tls.clone(),
                };
                spawn_local(async move {
                    let peer = accepted(&stream);
                    let conn = format!("{}/{peer}", protocol.name());
                    let serve = async {
                        // The handshake runs on this shard, inside the connection's admission.
                        let stream = match tls {
                            None => SharedStream::new(stream),
                            Some(config) => {
                                match tls_accept(&s, &peer, stream, config, protocol.listener())
                                    .await
                                {
                                    Some(stream) => stream,
                                    None => return,
                                }
                            }
                        };
                        match protocol {
                            Protocol::Native => {
                                crate::native::connection::serve(s.clone(), peer, stream).await
                            }
                            Protocol::Kafka => {
                                crate::kafka::connection::serve(s.clone(), peer, stream).await
                            }
                        }
                    };
                    crate::logging::in_conn(conn, serve).await;
                    drop(guard);
                })
                .detach();
            }
            Err(e) => {
                // Out of file descriptors and the like: back off instead of spinning.
                log::warn!("shard {}: accept failed: {e}", shard.id);
                shard.deadlines.sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// Runs a TLS handshake within `--tls-handshake-timeout-ms`; `None` (logged) when it fails
/// or takes longer, and the connection is closed.
async fn tls_accept(
    shard: &Shard,
    peer: &str,
    stream: TcpStream,
    config: Arc<rustls::ServerConfig>,
    listener: Listener,
) -> Option<SharedStream> {
    let timeout = shard.cfg.tls_handshake_timeout;
    let outcome = until(
        &shard.deadlines,
        after(timeout),
        tls_stream::handshake(stream, config),
    )
    .await;
    let result = match &outcome {
        Some(Ok(_)) => "ok",
        Some(Err(_)) => "failed",
        None => "timeout",
    };
    shard.metrics.tls_handshake(listener, result);
    match outcome {
        Some(Ok(tls)) => Some(SharedStream::tls(tls)),
        Some(Err(e)) => {
            log::info!("{peer}: TLS handshake failed: {e}; closing");
            None
        }
        None => {
            log::info!(
                "{peer}: TLS handshake not done within {} ms (--tls-handshake-timeout-ms); closing",
                timeout.as_millis()
            );
            None
        }
    }
}

/// Waits until nobody listens on the broker's ports, failing after `--port-release-wait-ms`. The
/// shards' listeners set SO_REUSEPORT (glommio does), so binding next to a live listener
/// succeeds and the kernel splits connections between the two: a second broker on the same
/// ports would take half of them silently, and so would the listeners of a SIGKILLed broker,
/// which its io_uring rings keep in the kernel for a few seconds after the process is gone
/// (connections sent there are never accepted). A connect tells whether one listens.
fn wait_for_free_ports(cfg: &BrokerConfig, shards: usize) -> Result<(), BrokerError> {
    let mut addrs = Vec::new();
    for base in std::iter::once(cfg.listen).chain(cfg.kafka_listen) {
        let ip = match base.ip() {
            std::net::IpAddr::V4(ip) if ip.is_unspecified() => std::net::Ipv4Addr::LOCALHOST.into(),
            std::net::IpAddr::V6(ip) if ip.is_unspecified() => std::net::Ipv6Addr::LOCALHOST.into(),
            ip => ip,
        };
        addrs.extend((0..shards).map(|i| std::net::SocketAddr::new(ip, base.port() + i as u16)));
    }
    let deadline = std::time::Instant::now() + cfg.port_release_wait;
    let mut said = false;
    for addr in addrs {
        while std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(500)).is_ok() {
            if std::time::Instant::now() >= deadline {
                return Err(BrokerError::Listen {
                    addr: addr.to_string(),
                    why: format!(
                        "another process listens there (waited {} ms)",
                        cfg.port_release_wait.as_millis()
                    ),
                });
            }
            if !said {
                announce!(
                    Level::Info,
                    "rill: {addr} is still listened on (another broker, or the sockets of one \
                     that was killed); waiting up to {} ms for it to be released",
                    cfg.port_release_wait.as_millis()
                );
                said = true;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    Ok(())
}

/// An exclusive advisory lock on `<data-dir>/.lock`, held for the life of the process.
fn lock_data_dir(cfg: &BrokerConfig) -> Result<std::fs::File, BrokerError> {
    let path = cfg.data_dir.join(".lock");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|source| BrokerError::DataDir {
            path: path.display().to_string(),
            source,
        })?;
    // SAFETY: flock on a valid, owned descriptor.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rc != 0 {
        return Err(BrokerError::Locked(cfg.data_dir.display().to_string()));
    }
    Ok(file)
}
