//! The per-shard log cleaner: compaction of the shard's partitions whose topic has
//! `cleanup.policy=compact` (or `compact,delete`), one partition at a time.
//!
//! A pass over a partition: the closed segments that are wholly below the high watermark and
//! past `min.compaction.lag.ms` are cleanable; those at or after the cleaner offset checkpoint
//! are dirty. When dirty bytes reach `min.cleanable.dirty.ratio` of the cleanable bytes (or a
//! dirty segment is older than `max.compaction.lag.ms`), the dirty segments' keys are mapped,
//! oldest first, until the map (`--log-cleaner-dedupe-buffer-bytes`) is full; then every
//! cleanable segment up to the last mapped one is rewritten keeping, of each mapped key, only
//! its latest record (and tombstones until `delete.retention.ms`), and swapped in
//! (`log::compaction`). The checkpoint moves to the end of the mapped segments.
//!
//! Never blocking the shard: file reads, the map and the rewrite run on the executor's
//! blocking pool; the shard only swaps `Segment` values. Reads are throttled to
//! `--log-cleaner-io-bytes-per-tick` per [`TICK`]. Never losing a key's latest value: a record
//! goes only when the map holds a later offset of its key, and that later record is either in
//! a segment this pass does not rewrite or kept by it; segments above the high watermark are
//! never mapped, so an unacknowledged record never displaces an acknowledged one.

use std::collections::HashMap;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use super::Partition;
use crate::log::compaction::{self, CleanRules, KeyMap, SwapStep};
use crate::log::partition_log::{read_cleaner_offset, write_cleaner_offset};
use crate::log::segment::Segment;
use crate::log::LogError;

/// The throttle's period: at most `io_bytes_per_tick` are read per tick.
pub const TICK: Duration = Duration::from_millis(100);

/// The cleaner's flags.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CleanerConfig {
    /// Memory of one pass's key map, per shard (`--log-cleaner-dedupe-buffer-bytes`).
    pub dedupe_buffer_bytes: usize,
    /// Segment bytes read per [`TICK`], per shard (`--log-cleaner-io-bytes-per-tick`).
    pub io_bytes_per_tick: u64,
    /// How often the cleaner looks for partitions to compact (`--log-cleaner-backoff-ms`).
    pub backoff: Duration,
}

impl Default for CleanerConfig {
    fn default() -> Self {
        CleanerConfig {
            dedupe_buffer_bytes: 32 << 20,
            io_bytes_per_tick: 16 << 20,
            backoff: Duration::from_secs(15),
        }
    }
}

/// Bounds the bytes a cleaner reads per [`TICK`].
struct Throttle {
    budget: u64,
    used: u64,
}

impl Throttle {
    async fn spend(&mut self, bytes: u64) {
        self.used += bytes;
        while self.used >= self.budget.max(1) {
            rill_shards::rt::sleep(TICK).await;
            self.used -= self.budget.max(1).min(self.used);
        }
    }
}

/// What one pass over a partition did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct PassOutcome {
    pub segments_rewritten: u32,
    pub records_dropped: u64,
    pub bytes_freed: u64,
    /// The cleaner offset after the pass (`None`: no pass ran).
    pub cleaned_to: Option<u64>,
}

impl Partition {
    /// One compaction pass (see the module doc). `cleaned_to` is the cleaner offset so far.
    async fn compact(
        &self,
        now_ms: i64,
        cleaned_to: u64,
        cfg: &CleanerConfig,
        throttle: &mut Throttle,
        forget_cached: &dyn Fn(u64, u64),
    ) -> Result<PassOutcome, LogError> {
        let s = self.settings();
        let mut outcome = PassOutcome::default();
        if !s.cleanup.compact || self.deleted.get() {
            return Ok(outcome);
        }
        let hw = self.high_watermark.get();
        let lag_limit = now_ms.saturating_sub(s.min_compaction_lag.as_millis() as i64);
        let (segs, seg_cfg) = {
            let log = self.log.borrow();
            if log.failure().is_some() {
                return Ok(outcome);
            }
            (log.closed_segments(), log.config().clone())
        };
        let cleanable: Vec<_> = segs
            .into_iter()
            .take_while(|c| c.next_offset <= hw && c.max_timestamp <= lag_limit)
            .collect();
        let total: u64 = cleanable.iter().map(|c| c.size).sum();
        let dirty: Vec<_> = cleanable
            .iter()
            .filter(|c| c.next_offset > cleaned_to)
            .cloned()
            .collect();
        let dirty_bytes: u64 = dirty.iter().map(|c| c.size).sum();
        if dirty_bytes == 0 {
            return Ok(outcome);
        }
        let ratio_reached = u128::from(dirty_bytes) * 1_000_000
            >= u128::from(total) * u128::from(s.min_cleanable_dirty_ppm);
        let overdue = s.max_compaction_lag.is_some_and(|l| {
            let limit = now_ms.saturating_sub(l.as_millis() as i64);
            dirty.iter().any(|c| c.max_timestamp < limit)
        });
        if !(ratio_reached || overdue) {
            return Ok(outcome);
        }
        let mut map = KeyMap::new(cfg.dedupe_buffer_bytes);
        let mut mapped_to = None;
        for c in &dirty {
            let path = c.path.clone();
            let (back, fitted) = rill_shards::rt::spawn_blocking(move || {
                let keys = compaction::segment_keys(&path)?;
                let fitted = map.add_segment(keys);
                Ok::<_, LogError>((map, fitted))
            })
            .await?;
            map = back;
            throttle.spend(c.size).await;
            if !fitted {
                break;
            }
            mapped_to = Some(c.next_offset);
        }
        let Some(mapped_to) = mapped_to else {
            log::warn!(
                "{}-{}: the keys of segment {} do not fit --log-cleaner-dedupe-buffer-bytes \
                 ({}): not compacted",
                self.topic,
                self.index,
                dirty[0].path.display(),
                cfg.dedupe_buffer_bytes
            );
            return Ok(outcome);
        };
        let map = Arc::new(map);
        let rules = CleanRules {
            tombstones_before_ms: now_ms
                .saturating_sub(s.delete_retention.as_millis().min(i64::MAX as u128) as i64),
            index_interval_bytes: seg_cfg.index_interval_bytes,
        };
        for c in cleanable.iter().filter(|c| c.next_offset <= mapped_to) {
            if self.deleted.get() {
                return Ok(outcome);
            }
            let (path, map2) = (c.path.clone(), map.clone());
            let (base, next) = (c.base_offset, c.next_offset);
            let cleaned = rill_shards::rt::spawn_blocking(move || {
                compaction::clean_segment(&path, base, next, &map2, &rules)
            })
            .await?;
            throttle.spend(c.size).await;
            let Some(cleaned) = cleaned else { continue };
            if !self.log.borrow_mut().begin_swap(base) {
                // Deleted meanwhile (retention, truncation): its cleaned files go too.
                let path = c.path.clone();
                rill_shards::rt::spawn_blocking(move || compaction::discard_cleaned(&path)).await;
                continue;
            }
            let path = c.path.clone();
            let swapped =
                rill_shards::rt::spawn_blocking(move || compaction::swap_in(&path, SwapStep::Done))
                    .await;
            let reopened = match swapped {
                Ok(()) => Segment::open(c.path.clone(), base, false, &seg_cfg)
                    .await
                    .map(|(seg, _)| seg),
                Err(e) => Err(e),
            };
            match reopened {
                Ok(seg) => {
                    self.log.borrow_mut().end_swap(Some(seg));
                    // Cached batches of the segment are the uncompacted ones.
                    forget_cached(self.cache_key, next);
                }
                Err(e) => {
                    // The old segment keeps serving; the files are finished at the next open.
                    self.log.borrow_mut().end_swap(None);
                    return Err(e);
                }
            }
            outcome.segments_rewritten += 1;
            outcome.records_dropped += cleaned.dropped;
            // A rewrite may grow a segment: survivors scattered among superseded records
            // become one batch each (80-byte header).
            outcome.bytes_freed += cleaned.bytes_before.saturating_sub(cleaned.bytes_after);
        }
        outcome.cleaned_to = Some(mapped_to);
        Ok(outcome)
    }
}

/// The cleaner of one shard: every `cfg.backoff`, one pass over each compacted partition
/// `partitions()` lists, one partition at a time; `forget_cached(cache key, below)` drops the
/// tail cache's batches of a rewritten segment.
pub async fn run(
    partitions: impl Fn() -> Vec<Rc<Partition>>,
    forget_cached: impl Fn(u64, u64),
    cfg: CleanerConfig,
) {
    let mut cleaned_to: HashMap<(u64, u32), u64> = HashMap::new();
    let mut throttle = Throttle {
        budget: cfg.io_bytes_per_tick,
        used: 0,
    };
    loop {
        rill_shards::rt::sleep(cfg.backoff).await;
        let live = partitions();
        // Forget deleted partitions (bounded by the shard's partitions).
        cleaned_to.retain(|(topic_id, index), _| {
            live.iter()
                .any(|p| p.topic_id == *topic_id && p.index == *index)
        });
        for p in live {
            if !p.settings().cleanup.compact {
                continue;
            }
            let key = (p.topic_id, p.index);
            let from = match cleaned_to.get(&key) {
                Some(&c) => c,
                None => {
                    let dir = p.log.borrow().dir().to_path_buf();
                    rill_shards::rt::spawn_blocking(move || read_cleaner_offset(&dir))
                        .await
                        .unwrap_or(0)
                }
            };
            match p
                .compact(
                    crate::clock::now_ms(),
                    from,
                    &cfg,
                    &mut throttle,
                    &forget_cached,
                )
                .await
            {
                Ok(o) => {
                    if o.segments_rewritten > 0 {
                        log::info!(
                            "{}-{}: compaction rewrote {} segments, dropped {} records, \
                             freed {} bytes",
                            p.topic,
                            p.index,
                            o.segments_rewritten,
                            o.records_dropped,
                            o.bytes_freed
                        );
                    }
                    let to = o.cleaned_to.unwrap_or(from);
                    if to > from {
                        let dir = p.log.borrow().dir().to_path_buf();
                        let written =
                            rill_shards::rt::spawn_blocking(move || write_cleaner_offset(&dir, to))
                                .await;
                        if let Err(e) = written {
                            log::warn!("{}-{}: cleaner offset not saved: {e}", p.topic, p.index);
                        }
                    }
                    cleaned_to.insert(key, to);
                }
                Err(e) => log::error!("{}-{}: compaction failed: {e}", p.topic, p.index),
            }
            rill_shards::rt::yield_if_needed().await;
        }
    }
}
