//! Starting the shards: one pinned glommio executor thread per cpu.

use std::collections::HashSet;
use std::future::Future;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::{memlock, Deadlines, ShardError};

/// glommio refuses to build an executor below this much locked memory.
const MEMLOCK_PER_EXECUTOR: u64 = 512 * 1024;

/// Name of the file every executor opens first to prime glommio's IOPOLL probe.
pub const PROBE_FILE: &str = ".rill-iopoll-probe";

/// Size of the probe file: one 4 KiB block, so the probe's O_DIRECT read finds data.
const PROBE_BYTES: usize = 4096;

/// How to start the shards.
#[derive(Debug, Clone)]
pub struct ShardConfig {
    /// One shard per entry: shard `i` is pinned to cpu `cpus[i]`.
    pub cpus: Vec<usize>,
    /// glommio `io_memory` per executor: the registered buffer pool for DMA I/O.
    pub io_memory_bytes: usize,
    /// Busy-poll this long before an idle executor parks. Cuts cross-core wake-up latency
    /// (~50 us to ~11 us here) but burns the core: `None` in tests and CI.
    pub spin_before_park: Option<Duration>,
    /// A directory on the data filesystem (created if missing). The probe file
    /// [`PROBE_FILE`] is written there once and opened first by every executor.
    pub prime_dir: PathBuf,
    /// Thread name prefix; shard `i` runs on thread `"{name}-{i}"`.
    pub name: String,
}

impl Default for ShardConfig {
    /// Every available cpu, 10 MiB io memory, no spinning, probe in `./rill-data` (the broker's
    /// default data directory), threads named `rill-shard-N`.
    fn default() -> Self {
        ShardConfig {
            cpus: Self::all_cores(),
            io_memory_bytes: 10 << 20,
            spin_before_park: None,
            prime_dir: PathBuf::from("rill-data"),
            name: "rill-shard".to_string(),
        }
    }
}

impl ShardConfig {
    /// The cpus this process may run on (its affinity mask), ascending; if that cannot be read,
    /// `0..available_parallelism`.
    pub fn all_cores() -> Vec<usize> {
        match core_affinity::get_core_ids() {
            Some(ids) if !ids.is_empty() => {
                let mut cpus: Vec<usize> = ids.into_iter().map(|c| c.id).collect();
                cpus.sort_unstable();
                cpus
            }
            _ => {
                let n = std::thread::available_parallelism().map_or(1, |n| n.get());
                (0..n).collect()
            }
        }
    }

    fn validate(&self) -> Result<(), ShardError> {
        if self.cpus.is_empty() {
            return Err(ShardError::BadCore("no cpu given".into()));
        }
        let available = Self::all_cores();
        let mut seen = HashSet::new();
        for &cpu in &self.cpus {
            if !seen.insert(cpu) {
                return Err(ShardError::BadCore(format!(
                    "cpu {cpu} is listed twice (one shard per cpu)"
                )));
            }
            if !available.contains(&cpu) {
                let list: Vec<String> = available.iter().map(|c| c.to_string()).collect();
                return Err(ShardError::BadCore(format!(
                    "cpu {cpu} is not available to this process (available: {})",
                    list.join(",")
                )));
            }
        }
        Ok(())
    }
}

/// What a shard's future is given: who it is, and its own deadline wheel.
pub struct ShardContext {
    /// Shard index, `0..count`.
    pub id: usize,
    /// Number of shards.
    pub count: usize,
    /// The cpu the shard is pinned to.
    pub cpu: usize,
    /// The shard's timer wheel; clone it freely within the shard.
    pub deadlines: Deadlines,
}

/// The running shards, in shard order.
pub struct ShardSet<T> {
    threads: Vec<JoinHandle<Result<T, ShardError>>>,
    /// Stopped (on drop) once the shards are joined.
    _nudger: crate::nudge::Nudger,
}

impl<T> ShardSet<T> {
    /// Waits for every shard's future to finish; results in shard order.
    pub fn join(self) -> Vec<Result<T, ShardError>> {
        self.threads
            .into_iter()
            .enumerate()
            .map(|(shard, t)| join_thread(shard, t))
            .collect()
    }

    /// The number of shards.
    pub fn len(&self) -> usize {
        self.threads.len()
    }

    /// Whether there are no shards (never true for a set [`start_shards`] returned).
    pub fn is_empty(&self) -> bool {
        self.threads.is_empty()
    }
}

fn join_thread<T>(shard: usize, t: JoinHandle<Result<T, ShardError>>) -> Result<T, ShardError> {
    match t.join() {
        Ok(r) => r,
        Err(payload) => {
            let message = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "non-string panic payload".to_string());
            Err(ShardError::Panicked { shard, message })
        }
    }
}

/// Hands one value to each shard: `f` is `Fn + Sync`, so per-shard `Send` values (mesh
/// endpoints, listeners' configs) go in through this and each shard takes its own by id.
pub struct PerShard<T> {
    items: Mutex<Vec<Option<T>>>,
}

impl<T> PerShard<T> {
    /// Wraps `items`; item `i` is for shard `i`.
    pub fn new(items: Vec<T>) -> Self {
        PerShard {
            items: Mutex::new(items.into_iter().map(Some).collect()),
        }
    }

    /// Takes item `id`; `None` if there is none or it was already taken.
    pub fn take(&self, id: usize) -> Option<T> {
        // A poisoned lock only means another shard panicked while taking; the items are fine.
        let mut items = self.items.lock().unwrap_or_else(|e| e.into_inner());
        items.get_mut(id).and_then(Option::take)
    }
}

/// Starts one executor thread per entry of `cfg.cpus`, pinned to it, and runs `f(ctx)` to
/// completion on each.
///
/// Before any shard runs `f`: the cpu list is checked ([`ShardError::BadCore`]), RLIMIT_MEMLOCK
/// is raised ([`ShardError::Memlock`]), and every executor is built and has opened the IOPOLL
/// probe file ([`ShardError::Spawn`], [`ShardError::Prime`]). If any of that fails on any
/// shard, no shard runs `f`, the threads are joined, and the error is returned. `f` is called
/// on the executor thread, in its default task queue; it may capture `Send` data.
pub fn start_shards<F, Fut, T>(cfg: ShardConfig, f: F) -> Result<ShardSet<T>, ShardError>
where
    F: Fn(ShardContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = T> + 'static,
    T: Send + 'static,
{
    cfg.validate()?;
    let count = cfg.cpus.len();
    raise_memlock_for(count, cfg.io_memory_bytes)?;
    let probe = write_probe(&cfg.prime_dir)?;

    let (nudger, nudge_ends) =
        crate::nudge::start(count).map_err(|e| ShardError::Spawn(format!("shard nudges: {e}")))?;
    let mut nudge_ends = nudge_ends.into_iter();
    let f = Arc::new(f);
    let (ready_tx, ready_rx) = flume::unbounded::<(usize, Result<(), ShardError>)>();
    let mut go = Vec::with_capacity(count);
    let mut threads = Vec::with_capacity(count);
    let mut failure = None;
    for (id, &cpu) in cfg.cpus.iter().enumerate() {
        let (go_tx, go_rx) = flume::bounded::<()>(1);
        let shard = Shard {
            id,
            count,
            cpu,
            io_memory: cfg.io_memory_bytes,
            spin: cfg.spin_before_park,
            name: cfg.name.clone(),
            probe: probe.clone(),
            nudges: nudge_ends.next().expect("one end per shard"),
        };
        let f = f.clone();
        let ready = ready_tx.clone();
        let spawned = std::thread::Builder::new()
            .name(format!("{}-{id}", cfg.name))
            .spawn(move || shard.run(f, ready, go_rx));
        match spawned {
            Ok(t) => {
                threads.push(t);
                go.push(go_tx);
            }
            Err(e) => {
                failure = Some(ShardError::Spawn(format!(
                    "thread for shard {id} (cpu {cpu}): {e}"
                )));
                break;
            }
        }
    }
    // Only the shards hold senders now: if one dies before reporting, recv sees it.
    drop(ready_tx);
    if failure.is_none() {
        for _ in 0..threads.len() {
            match ready_rx.recv() {
                Ok((_, Ok(()))) => {}
                Ok((_, Err(e))) => {
                    failure = Some(e);
                    break;
                }
                Err(_) => {
                    failure = Some(ShardError::Spawn(
                        "a shard thread ended before its executor was ready".into(),
                    ));
                    break;
                }
            }
        }
    }
    if let Some(err) = failure {
        // Dropping the go senders tells every waiting shard to stop without running `f`.
        drop(go);
        for (shard, t) in threads.into_iter().enumerate() {
            if let Err(e @ ShardError::Panicked { .. }) = join_thread(shard, t) {
                log::error!("while aborting the start: {e}");
            }
        }
        return Err(err);
    }
    for g in go {
        // A shard that is gone already has its error waiting in join().
        let _ = g.send(());
    }
    Ok(ShardSet {
        threads,
        _nudger: nudger,
    })
}

/// glommio needs 512 KiB of locked memory to start an executor (it checks the soft limit); as
/// non-root each executor also registers `io_memory` against the limit, and a failed
/// registration only logs a warning and slows I/O. So: ask for everything, require the minimum.
fn raise_memlock_for(count: usize, io_memory: usize) -> Result<(), ShardError> {
    let count = count as u64;
    let wanted = count.saturating_mul(MEMLOCK_PER_EXECUTOR.saturating_add(io_memory as u64));
    if memlock::raise_memlock(wanted).is_ok() {
        return Ok(());
    }
    let got = memlock::raise_memlock(count.saturating_mul(MEMLOCK_PER_EXECUTOR))?;
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        log::warn!(
            "locked-memory limit is {} KiB, below the {} KiB the shards' io memory needs: \
             I/O buffers will not be registered and I/O will be slower; run `ulimit -l \
             unlimited` (or set LimitMEMLOCK=infinity) for full speed",
            got / 1024,
            wanted / 1024
        );
    }
    Ok(())
}

/// Writes the 4 KiB probe file once (kept across runs) and returns its path.
fn write_probe(dir: &Path) -> Result<PathBuf, ShardError> {
    let err = |what: &str, path: &Path, e: std::io::Error| {
        ShardError::Prime(format!("{what} {}: {e}", path.display()))
    };
    std::fs::create_dir_all(dir).map_err(|e| err("cannot create directory", dir, e))?;
    let path = dir.join(PROBE_FILE);
    if std::fs::metadata(&path).is_ok_and(|m| m.len() == PROBE_BYTES as u64) {
        return Ok(path);
    }
    // Write under a temporary name and rename, so no executor can see a short file (an empty
    // file is exactly what fools the probe).
    let tmp = dir.join(format!("{PROBE_FILE}.{}.tmp", std::process::id()));
    let write = || -> std::io::Result<()> {
        let mut file = std::fs::File::create(&tmp)?;
        file.write_all(&[0x52u8; PROBE_BYTES])?;
        file.sync_all()?;
        std::fs::rename(&tmp, &path)
    };
    write().map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        err("cannot write", &path, e)
    })?;
    Ok(path)
}

/// What one shard thread needs to start.
struct Shard {
    id: usize,
    count: usize,
    cpu: usize,
    io_memory: usize,
    spin: Option<Duration>,
    name: String,
    probe: PathBuf,
    /// This shard's end of its nudge socket pair.
    nudges: std::os::unix::net::UnixStream,
}

type Ready = flume::Sender<(usize, Result<(), ShardError>)>;

impl Shard {
    /// Body of the shard thread: build the executor, prime, report ready, wait for the go,
    /// run `f`.
    fn run<F, Fut, T>(
        self,
        f: Arc<F>,
        ready: Ready,
        go: flume::Receiver<()>,
    ) -> Result<T, ShardError>
    where
        F: Fn(ShardContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = T> + 'static,
    {
        let Shard {
            id,
            count,
            cpu,
            io_memory,
            spin,
            name,
            probe,
            nudges,
        } = self;
        // Built on this thread (our own, so it gets our thread name and errors come back as
        // values; glommio's own spawn names threads by an internal counter).
        let mut builder = glommio::LocalExecutorBuilder::new(glommio::Placement::Fixed(cpu))
            .name(&name)
            .io_memory(io_memory);
        if let Some(spin) = spin {
            builder = builder.spin_before_park(spin);
        }
        let executor = match builder.make() {
            Ok(ex) => ex,
            Err(e) => {
                let e = ShardError::Spawn(format!("executor for shard {id} on cpu {cpu}: {e}"));
                let _ = ready.send((id, Err(e.clone())));
                return Err(e);
            }
        };
        executor.run(async move {
            if let Err(e) = prime(&probe).await {
                let e = ShardError::Prime(format!("shard {id} on cpu {cpu}: {e}"));
                let _ = ready.send((id, Err(e.clone())));
                return Err(e);
            }
            let _ = ready.send((id, Ok(())));
            drop(ready);
            if go.recv_async().await.is_err() {
                return Err(ShardError::Aborted(id));
            }
            glommio::spawn_local(crate::nudge::serve(nudges)).detach();
            let ctx = ShardContext {
                id,
                count,
                cpu,
                deadlines: Deadlines::new(),
            };
            Ok(f(ctx).await)
        })
    }
}

/// Opens (and closes) the non-empty probe file with `DmaFile::open`: glommio probes IOPOLL
/// support with a read of the first DMA file each thread opens on a device and caches the
/// answer; an empty file makes the probe succeed wrongly and later DMA reads fail with
/// EOPNOTSUPP (glommio issues 605, 670). The cache is per device: prime each filesystem used.
async fn prime(probe: &Path) -> std::io::Result<()> {
    let file = glommio::io::DmaFile::open(probe)
        .await
        .map_err(std::io::Error::from)?;
    file.close().await.map_err(std::io::Error::from)
}
