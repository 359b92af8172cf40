//! For unit tests that need a real shard (DMA files, the blocking pool): runs a future on one
//! pinned executor with a fresh temporary directory, then clears any fault injected for it.

use std::future::Future;
use std::path::PathBuf;

/// Runs `f(dir)` on a fresh pinned shard; `dir` does not exist yet, its parent is a
/// temporary directory removed afterwards.
pub fn on_shard<F, Fut, T>(f: F) -> T
where
    F: Fn(PathBuf) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = T> + 'static,
    T: Send + 'static,
{
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().to_path_buf();
    let cfg = rill_shards::ShardConfig {
        cpus: vec![rill_shards::ShardConfig::all_cores()[0]],
        prime_dir: path.clone(),
        name: "rill-unit-test".into(),
        io_memory_bytes: 1 << 20,
        ..rill_shards::ShardConfig::default()
    };
    let set = rill_shards::start_shards(cfg, move |_| f(path.join("p")))
        .expect("start a shard for the test");
    let out = set
        .join()
        .into_iter()
        .next()
        .expect("one shard")
        .expect("the shard ran");
    rill_shards::file::faults::clear(&dir.path().to_string_lossy());
    out
}
