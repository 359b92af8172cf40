//! A fixed-bucket histogram owned by one shard: plain cells, no atomics, no locks (only its
//! shard's thread touches it); a scrape copies it into a [`HistogramSnapshot`].

use std::cell::Cell;
use std::time::Duration;

/// Latency bucket bounds in nanoseconds: 50 us to 30 s. The low end is fine-grained because
/// rill's tail latency lives there (a 4 KiB append + fdatasync is ~150-250 us on the machines
/// measured); the high end reaches the longest long poll (`--max-fetch-wait-ms`, 30 s).
pub const LATENCY_NS: &[u64] = &[
    50_000,
    100_000,
    250_000,
    500_000,
    1_000_000,
    2_500_000,
    5_000_000,
    10_000_000,
    25_000_000,
    50_000_000,
    100_000_000,
    250_000_000,
    500_000_000,
    1_000_000_000,
    2_500_000_000,
    5_000_000_000,
    10_000_000_000,
    30_000_000_000,
];

/// Size bucket bounds in bytes: 4 KiB (one page, the smallest DMA write) to 64 MiB, by 4.
pub const BYTES: &[u64] = &[
    4 << 10,
    16 << 10,
    64 << 10,
    256 << 10,
    1 << 20,
    4 << 20,
    16 << 20,
    64 << 20,
];

/// Count bucket bounds (partitions in a group-commit round and the like): 1 to 1024, by 2.
pub const COUNT: &[u64] = &[1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024];

/// Observations counted per bucket (not cumulative: the encoder adds them up), with their sum
/// and count, in integer base units (nanoseconds or bytes) so that sums do not drift.
pub struct Histogram {
    bounds: &'static [u64],
    /// One per bound, then the +Inf bucket.
    buckets: Box<[Cell<u64>]>,
    sum: Cell<u64>,
    count: Cell<u64>,
}

impl Histogram {
    pub fn new(bounds: &'static [u64]) -> Histogram {
        debug_assert!(bounds.windows(2).all(|w| w[0] < w[1]), "bounds must grow");
        Histogram {
            bounds,
            buckets: (0..=bounds.len()).map(|_| Cell::new(0)).collect(),
            sum: Cell::new(0),
            count: Cell::new(0),
        }
    }

    pub fn latency() -> Histogram {
        Histogram::new(LATENCY_NS)
    }

    pub fn bytes() -> Histogram {
        Histogram::new(BYTES)
    }

    pub fn count() -> Histogram {
        Histogram::new(COUNT)
    }

    /// Counts `v` in the first bucket whose bound is at least `v` (Prometheus's `le`).
    pub fn observe(&self, v: u64) {
        let i = self.bounds.partition_point(|&b| b < v);
        let b = &self.buckets[i];
        b.set(b.get() + 1);
        self.sum.set(self.sum.get().saturating_add(v));
        self.count.set(self.count.get() + 1);
    }

    pub fn observe_duration(&self, d: Duration) {
        self.observe(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
    }

    pub fn snapshot(&self) -> HistogramSnapshot {
        HistogramSnapshot {
            bounds: self.bounds,
            buckets: self.buckets.iter().map(Cell::get).collect(),
            sum: self.sum.get(),
            count: self.count.get(),
        }
    }
}

/// A histogram's values at one moment, `Send`, mergeable across shards.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HistogramSnapshot {
    pub bounds: &'static [u64],
    /// Per bucket (not cumulative), the last one +Inf.
    pub buckets: Vec<u64>,
    pub sum: u64,
    pub count: u64,
}

impl HistogramSnapshot {
    /// (upper bound, observations at or below it) for each bound, then (None = +Inf, count).
    pub fn cumulative(&self) -> impl Iterator<Item = (Option<u64>, u64)> + '_ {
        let mut total = 0;
        self.buckets.iter().enumerate().map(move |(i, n)| {
            total += n;
            (self.bounds.get(i).copied(), total)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn observations_land_in_the_first_bucket_whose_bound_holds_them() {
        let h = Histogram::new(&[10, 100, 1000]);
        for v in [0, 10, 11, 100, 999, 1000, 1001, u64::MAX] {
            h.observe(v);
        }
        let s = h.snapshot();
        // le=10: 0 and 10 (a bound holds its own value); le=100: 11, 100; le=1000: 999,
        // 1000; +Inf: 1001 and u64::MAX.
        assert_eq!(s.buckets, vec![2, 2, 2, 2]);
        assert_eq!(s.count, 8);
        assert_eq!(s.sum, u64::MAX, "the sum saturates instead of wrapping");
        let cum: Vec<_> = s.cumulative().collect();
        assert_eq!(
            cum,
            vec![(Some(10), 2), (Some(100), 4), (Some(1000), 6), (None, 8)]
        );
    }

    #[test]
    fn durations_are_counted_in_nanoseconds() {
        let h = Histogram::latency();
        h.observe_duration(Duration::from_micros(200));
        h.observe_duration(Duration::from_secs(60));
        let s = h.snapshot();
        let le_250us = LATENCY_NS.iter().position(|&b| b == 250_000).unwrap();
        assert_eq!(s.buckets[le_250us], 1);
        assert_eq!(*s.buckets.last().unwrap(), 1, "past 30 s: +Inf");
        assert_eq!(s.sum, 60_000_200_000);
        assert_eq!(s.buckets.len(), LATENCY_NS.len() + 1);
    }

    #[test]
    fn bucket_bounds_grow() {
        for b in [LATENCY_NS, BYTES, COUNT] {
            assert!(b.windows(2).all(|w| w[0] < w[1]));
        }
    }
}
