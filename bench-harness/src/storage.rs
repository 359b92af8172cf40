//! `rill-bench storage`: the log alone, no network. Appends one batch shape over and over to a
//! partition on one pinned shard through the same group commit the broker uses, with a window
//! of appends in flight (concurrent producers), and records append-to-durable latency.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::rc::Rc;
use std::time::Instant;

use clap::Args;
use rill::batch::{BatchBuilder, BatchView};
use rill::log::{FsyncPolicy, PartitionLog, SegmentConfig};
use rill::partition::group_commit::GroupCommit;
use rill::partition::tail_cache::TailCache;
use rill::partition::Partition;
use rill::topic_config::{TopicDefaults, TopicSettings};
use rill_shards::rt::spawn_local;
use rill_shards::{start_shards, ShardConfig};

use crate::report::{new_histogram, record, Report};

#[derive(Args, Debug, Clone)]
pub struct StorageArgs {
    /// Directory on the disk to measure (a fresh subdirectory is used and removed).
    #[arg(long, default_value = ".")]
    pub dir: PathBuf,
    /// Bytes per batch (records of --record-bytes fill it).
    #[arg(long, default_value_t = 16 << 10)]
    pub batch_bytes: usize,
    #[arg(long, default_value_t = 1024)]
    pub record_bytes: usize,
    /// always | never | interval:MS
    #[arg(long, default_value = "always")]
    pub fsync: String,
    /// Total bytes to append.
    #[arg(long, default_value_t = 1 << 30)]
    pub total_bytes: u64,
    /// Appends in flight at once (1 = one producer waiting for each ack).
    #[arg(long, default_value_t = 64)]
    pub window: usize,
    #[arg(long, default_value_t = 128 << 20)]
    pub segment_bytes: u64,
    /// Core to pin the shard to.
    #[arg(long, default_value_t = 0)]
    pub core: usize,
}

fn build_batch(batch_bytes: usize, record_bytes: usize) -> Vec<u8> {
    let mut b = BatchBuilder::new();
    let record_bytes = record_bytes.clamp(1, batch_bytes.max(1));
    let value = vec![b'x'; record_bytes];
    while b.is_empty() || b.estimated_bytes() + record_bytes <= batch_bytes {
        b.push(1_700_000_000_000, None, &value, &[], &[]);
    }
    b.build().expect("non-empty batch").to_vec()
}

pub fn run(a: StorageArgs) -> Result<Report, String> {
    let fsync: FsyncPolicy = a.fsync.parse()?;
    let dir = tempfile::Builder::new()
        .prefix("rill-bench-storage")
        .tempdir_in(&a.dir)
        .map_err(|e| format!("--dir {}: {e}", a.dir.display()))?;
    let batch = build_batch(a.batch_bytes, a.record_bytes);
    let batch_len = batch.len() as u64;
    let n = (a.total_bytes / batch_len).max(1);
    let cfg = ShardConfig {
        cpus: vec![a.core],
        prime_dir: dir.path().to_path_buf(),
        name: "rill-bench".into(),
        ..ShardConfig::default()
    };
    let path = dir.path().join("p0");
    let seg = SegmentConfig {
        segment_bytes: a.segment_bytes,
        segment_age: None,
        index_interval_bytes: 4096,
        preallocate: true,
        preallocate_step: 16 << 20,
        write_bytes: rill::log::appender::WRITE_BYTES,
        writes_in_flight: rill::log::appender::WRITES_IN_FLIGHT,
        scan_bytes: rill::log::segment::SCAN_BYTES,
        sync_writes: fsync.sync_writes(true),
    };
    let window = a.window.max(1);
    let seg_bytes = a.segment_bytes;
    let set = start_shards(cfg, move |_ctx| {
        let batch = batch.clone();
        let path = path.clone();
        let seg = seg.clone();
        async move {
            let mut aligned = rkyv::util::AlignedVec::<16>::new();
            aligned.extend_from_slice(&batch);
            let view = BatchView::validate(&aligned).map_err(|e| e.to_string())?;
            let records = u64::from(view.header().record_count);
            let (log, _) = PartitionLog::open(path, seg)
                .await
                .map_err(|e| e.to_string())?;
            let mut settings =
                TopicSettings::resolve(&Default::default(), &TopicDefaults::default());
            settings.segment_bytes = seg_bytes;
            let p = Rc::new(Partition::new(
                Rc::from("bench"),
                1,
                0,
                1,
                log,
                fsync,
                settings,
            ));
            let cache = TailCache::new(0);
            let gc = GroupCommit::new(fsync);
            spawn_local(gc.clone().run()).detach();
            let mut h = new_histogram();
            let mut inflight: VecDeque<(
                Instant,
                flume::Receiver<Result<(), rill::protocol::ErrorCode>>,
            )> = VecDeque::with_capacity(window);
            let start = Instant::now();
            for _ in 0..n {
                if inflight.len() >= window {
                    let (t, rx) = inflight.pop_front().expect("non-empty");
                    rx.recv_async()
                        .await
                        .map_err(|e| e.to_string())?
                        .map_err(|e| e.to_string())?;
                    record(&mut h, t.elapsed());
                }
                let t = Instant::now();
                let (_, next) = p.append(&[view], 0, &cache).map_err(|e| e.to_string())?;
                gc.mark_dirty(&p);
                inflight.push_back((t, p.wait_for_ack(next - 1)));
            }
            while let Some((t, rx)) = inflight.pop_front() {
                rx.recv_async()
                    .await
                    .map_err(|e| e.to_string())?
                    .map_err(|e| e.to_string())?;
                record(&mut h, t.elapsed());
            }
            Ok::<_, String>((start.elapsed(), h, records))
        }
    })
    .map_err(|e| e.to_string())?;
    let (elapsed, h, records) = set
        .join()
        .into_iter()
        .next()
        .ok_or("no shard")?
        .map_err(|e| e.to_string())??;
    let bytes = n * batch_len;
    let settings = serde_json::json!({
        "batch_bytes": a.batch_bytes, "encoded_batch_bytes": batch_len, "record_bytes": a.record_bytes, "fsync": a.fsync,
        "window": window, "batches": n, "segment_bytes": a.segment_bytes,
    });
    Ok(Report::new(
        "storage",
        n * records,
        bytes,
        elapsed,
        &h,
        settings,
    ))
}
