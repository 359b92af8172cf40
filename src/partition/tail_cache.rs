//! The per-shard cache of recently appended batches, so caught-up consumers are served
//! from memory without a disk read. Bounded in bytes (`--tail-cache-bytes`); the oldest
//! batches of the shard are evicted first. It also carries the shard's budget for copy reads
//! started ahead of their fetch ([`super::read_ahead`]): both are the shard's memory for reads.

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, VecDeque};

use bytes::Bytes;

struct Cached {
    base: u64,
    next: u64,
    bytes: Bytes,
}

#[derive(Default)]
struct Inner {
    by_partition: HashMap<u64, VecDeque<Cached>>,
    /// Insertion order across partitions: (partition key, base offset).
    order: VecDeque<(u64, u64)>,
    used: usize,
}

pub struct TailCache {
    /// `--tail-cache-bytes / shards`: the most it ever holds.
    limit: usize,
    /// The most it may hold now: the limit, less what memory pressure took back.
    budget: Cell<usize>,
    read_ahead: std::rc::Rc<super::read_ahead::ReadAheadBudget>,
    inner: RefCell<Inner>,
    /// Reads it served, and reads it did not reach back to (metrics).
    hits: Cell<u64>,
    misses: Cell<u64>,
}

impl TailCache {
    pub fn new(budget_bytes: usize) -> TailCache {
        TailCache {
            limit: budget_bytes,
            budget: Cell::new(budget_bytes),
            read_ahead: super::read_ahead::ReadAheadBudget::new(0),
            inner: RefCell::new(Inner::default()),
            hits: Cell::new(0),
            misses: Cell::new(0),
        }
    }

    /// With up to `bytes` of copy reads started ahead of their fetch (none by default).
    pub fn with_read_ahead(mut self, bytes: usize) -> TailCache {
        self.read_ahead = super::read_ahead::ReadAheadBudget::new(bytes);
        self
    }

    /// The shard's read-ahead budget.
    pub fn read_ahead(&self) -> &std::rc::Rc<super::read_ahead::ReadAheadBudget> {
        &self.read_ahead
    }

    pub fn used_bytes(&self) -> usize {
        self.inner.borrow().used
    }

    /// (hits, misses) of [`read`](Self::read) so far.
    pub fn hits_and_misses(&self) -> (u64, u64) {
        (self.hits.get(), self.misses.get())
    }

    /// The most the cache may hold now.
    pub fn budget(&self) -> usize {
        self.budget.get()
    }

    /// Sets what the cache may hold (at most its limit), evicting the oldest batches down to
    /// it.
    fn set_budget(&self, bytes: usize) {
        let budget = bytes.min(self.limit);
        self.budget.set(budget);
        Self::evict_down_to(&mut self.inner.borrow_mut(), budget);
    }

    /// Sets the budget from the memory the broker may still use: see [`budget_under_pressure`].
    pub fn follow_memory(&self, available: u64, min_available: u64, shards: usize) {
        self.set_budget(budget_under_pressure(
            self.limit,
            self.used_bytes(),
            available,
            min_available,
            shards,
        ));
    }

    /// Adds a batch just appended (offsets `base..next`) to partition `key`.
    pub fn insert(&self, key: u64, base: u64, next: u64, bytes: Bytes) {
        let budget = self.budget.get();
        if budget == 0 {
            return;
        }
        if bytes.len() > budget {
            // Not cached: what is cached of this partition is no longer its tail.
            self.forget(key);
            return;
        }
        let mut inner = self.inner.borrow_mut();
        let q = inner.by_partition.entry(key).or_default();
        let mut cleared = 0;
        if q.back().is_some_and(|last| last.next != base) {
            // A gap (e.g. after a truncation): start over for this partition.
            cleared = q.drain(..).map(|c| c.bytes.len()).sum::<usize>();
        }
        let len = bytes.len();
        q.push_back(Cached { base, next, bytes });
        inner.used -= cleared;
        inner.order.push_back((key, base));
        inner.used += len;
        Self::evict_down_to(&mut inner, budget);
    }

    /// Evicts the shard's oldest batches until at most `budget` bytes are held.
    fn evict_down_to(inner: &mut Inner, budget: usize) {
        while inner.used > budget {
            let Some((k, b)) = inner.order.pop_front() else {
                break;
            };
            let mut freed = 0;
            if let Some(q) = inner.by_partition.get_mut(&k) {
                if q.front().is_some_and(|c| c.base == b) {
                    freed = q.pop_front().map_or(0, |c| c.bytes.len());
                }
            }
            inner.used -= freed;
        }
    }

    /// Whole batches from the one holding `offset`, below `limit`, up to `max_bytes` (at least
    /// one). `None` when the cache does not hold the batch with `offset`: before its first
    /// batch, or past its last (an answer of no batches would say "no data yet" to a consumer
    /// whose data is on disk, for as long as nothing newer is appended).
    pub fn read(&self, key: u64, offset: u64, limit: u64, max_bytes: usize) -> Option<Vec<Bytes>> {
        let found = self.read_inner(key, offset, limit, max_bytes);
        let counter = if found.is_some() {
            &self.hits
        } else {
            &self.misses
        };
        counter.set(counter.get() + 1);
        found
    }

    fn read_inner(
        &self,
        key: u64,
        offset: u64,
        limit: u64,
        max_bytes: usize,
    ) -> Option<Vec<Bytes>> {
        let inner = self.inner.borrow();
        let q = inner.by_partition.get(&key)?;
        if q.front()?.base > offset {
            return None;
        }
        let i = q.partition_point(|c| c.next <= offset);
        if i == q.len() {
            return None;
        }
        let mut out = Vec::new();
        let mut total = 0;
        for c in q.iter().skip(i) {
            if c.base >= limit || (!out.is_empty() && total + c.bytes.len() > max_bytes) {
                break;
            }
            total += c.bytes.len();
            out.push(c.bytes.clone());
        }
        Some(out)
    }

    /// Drops a partition's batches below offset `below` (compaction rewrote them: readers go
    /// to the compacted files).
    pub fn forget_below(&self, key: u64, below: u64) {
        let mut inner = self.inner.borrow_mut();
        let mut freed = 0;
        if let Some(q) = inner.by_partition.get_mut(&key) {
            while q.front().is_some_and(|c| c.base < below) {
                freed += q.pop_front().map_or(0, |c| c.bytes.len());
            }
        }
        // Their `order` entries no longer match a front batch: eviction skips them.
        inner.used -= freed;
    }

    /// Drops a partition's batches (deletion, truncation).
    pub fn forget(&self, key: u64) {
        let mut inner = self.inner.borrow_mut();
        if let Some(q) = inner.by_partition.remove(&key) {
            inner.used -= q.iter().map(|c| c.bytes.len()).sum::<usize>();
        }
    }
}

/// The budget of one of `shards` shard caches, holding `used` bytes, when the broker may use
/// `available` bytes more and is to leave `min_available` to the machine: what it holds plus
/// its share of the room above `min_available`, or less its share of the shortfall (the cache
/// gives memory back rather than the machine running out), within `0..=limit`.
pub fn budget_under_pressure(
    limit: usize,
    used: usize,
    available: u64,
    min_available: u64,
    shards: usize,
) -> usize {
    let shards = shards.max(1) as u64;
    let used = used as u64;
    let budget = if available >= min_available {
        used.saturating_add((available - min_available) / shards)
    } else {
        used.saturating_sub((min_available - available).div_ceil(shards))
    };
    budget.min(limit as u64) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serves_whole_batches_and_stays_bounded() {
        let cache = TailCache::new(300);
        for i in 0..5u64 {
            cache.insert(1, i * 10, i * 10 + 10, Bytes::from(vec![i as u8; 100]));
        }
        assert!(cache.used_bytes() <= 300);
        // oldest evicted: 0..20 gone
        assert!(cache.read(1, 5, 50, 1000).is_none());
        let got = cache.read(1, 25, 50, 1000).unwrap();
        assert_eq!(got.len(), 3);
        assert_eq!(got[0][0], 2);
        // limit stops before batches at or above it
        assert_eq!(cache.read(1, 25, 40, 1000).unwrap().len(), 2);
        // max bytes: at least one batch
        assert_eq!(cache.read(1, 25, 50, 1).unwrap().len(), 1);
        cache.forget_below(1, 30);
        assert!(cache.read(1, 25, 50, 1000).is_none(), "20..30 forgotten");
        assert_eq!(cache.read(1, 30, 50, 1000).unwrap().len(), 2);
        assert_eq!(cache.used_bytes(), 200);
        cache.forget(1);
        assert_eq!(cache.used_bytes(), 0);
        // Every read above counted: 4 served, 3 not (evicted, forgotten below 30, the
        // partition forgotten).
        assert!(cache.read(1, 30, 50, 1000).is_none());
        assert_eq!(cache.hits_and_misses(), (4, 3));
    }

    /// Seen from outside: a batch larger than the cache followed the cached ones, and a
    /// consumer at its offset got empty fetches (no data yet) for as long as nothing newer
    /// was appended, though the batch was on disk.
    #[test]
    fn an_offset_past_the_cached_batches_is_a_miss_never_an_empty_answer() {
        let cache = TailCache::new(300);
        cache.insert(1, 0, 10, Bytes::from(vec![0u8; 100]));
        cache.insert(1, 10, 20, Bytes::from(vec![1u8; 100]));
        // Offsets 20..30: appended, too large to cache.
        cache.insert(1, 20, 30, Bytes::from(vec![2u8; 400]));
        assert!(
            cache.read(1, 20, 30, 1000).is_none(),
            "not cached: read the file"
        );
        assert!(
            cache.read(1, 5, 30, 1000).is_none(),
            "no longer the partition's tail: dropped"
        );
        assert_eq!(cache.used_bytes(), 0);
        // Past the last cached batch, with nothing skipped: a miss too.
        cache.insert(2, 0, 10, Bytes::from(vec![3u8; 100]));
        assert!(cache.read(2, 10, 30, 1000).is_none());
        assert_eq!(cache.read(2, 0, 30, 1000).unwrap().len(), 1);
    }

    #[test]
    fn memory_pressure_takes_the_budget_back_and_room_returns_it() {
        let gib: u64 = 1 << 30;
        // Room above the minimum: the cache may grow by its share of it, up to its limit.
        assert_eq!(
            budget_under_pressure(1 << 30, 100, 10 * gib, 2 * gib, 2),
            1 << 30
        );
        assert_eq!(
            budget_under_pressure(usize::MAX, 100, 2 * gib + 400, 2 * gib, 2),
            300
        );
        // Short of the minimum: its share of the shortfall is given back.
        assert_eq!(
            budget_under_pressure(1 << 30, 1000, 2 * gib - 400, 2 * gib, 2),
            800
        );
        assert_eq!(
            budget_under_pressure(1 << 30, 1000, 2 * gib - 401, 2 * gib, 2),
            799
        );
        assert_eq!(
            budget_under_pressure(1 << 30, 1000, 0, 2 * gib, 1),
            0,
            "all of it"
        );
        assert_eq!(
            budget_under_pressure(1 << 30, 1000, 0, 0, 0),
            1000,
            "0 shards is 1"
        );

        let cache = TailCache::new(1000);
        // Two partitions, four batches of 10 offsets each, inserted in turn.
        for i in 0..8u64 {
            let base = i / 2 * 10;
            cache.insert(1 + i % 2, base, base + 10, Bytes::from(vec![i as u8; 100]));
        }
        assert_eq!(cache.used_bytes(), 800);
        // 300 short on a machine of 2 shards: 150 given back, the oldest batches first.
        cache.follow_memory(700, 1000, 2);
        assert_eq!((cache.budget(), cache.used_bytes()), (650, 600));
        assert!(
            cache.read(1, 0, 100, 10_000).is_none(),
            "0..10 of 1 evicted"
        );
        assert!(
            cache.read(2, 0, 100, 10_000).is_none(),
            "0..10 of 2 evicted"
        );
        assert_eq!(cache.read(1, 10, 100, 10_000).map(|b| b.len()), Some(3));
        // The budget holds for new batches too.
        cache.insert(1, 40, 50, Bytes::from(vec![8; 100]));
        assert_eq!(cache.used_bytes(), 600);
        assert!(
            cache.read(1, 10, 100, 10_000).is_none(),
            "10..20 of 1 evicted"
        );
        // Nothing available: everything goes, and nothing is cached while it lasts.
        cache.follow_memory(0, 1 << 40, 1);
        assert_eq!((cache.budget(), cache.used_bytes()), (0, 0));
        cache.insert(1, 50, 60, Bytes::from(vec![9; 100]));
        assert_eq!(cache.used_bytes(), 0);
        // Room again: back up to the limit, never past it.
        cache.follow_memory(1 << 40, 0, 1);
        assert_eq!(cache.budget(), 1000);
        cache.insert(1, 60, 70, Bytes::from(vec![10; 100]));
        assert_eq!(cache.read(1, 60, 200, 10_000).map(|b| b.len()), Some(1));
    }
}
