//! Read-ahead of copy reads: a reader catching up gets exactly the log, every next read taken
//! from the one started ahead; a read-ahead is never served past a lower limit nor from a
//! segment file that was replaced, and one that failed is read again; the shard's bound holds,
//! dropping the oldest read-aheads.

use std::rc::Rc;

use super::read_ahead::{ReadAhead, ReadAheadBudget};
use super::tail_cache::TailCache;
use super::write_caching_tests::{append, flush, open};
use super::{Partition, ReadLimits};
use crate::batch::test_support::Rng;
use crate::batch::BatchIter;
use crate::log::segment::SegmentReader;
use crate::log::{FileReads, PartitionLog};
use crate::test_shard::on_shard;

fn copy(max_bytes: usize) -> ReadLimits {
    ReadLimits {
        max_bytes,
        file_reads: FileReads::Copy,
    }
}

/// Appends batches of random record counts and sizes until the log ends at `end` or later,
/// and writes them all (nothing left in memory: every read comes from the files).
async fn fill(p: &Partition, cache: &TailCache, rng: &mut Rng, end: u64) -> u64 {
    let mut at = p.log_end_offset();
    while at < end {
        let n = 1 + rng.below(20) as u32;
        let len = 1 + rng.below(12_000) as usize;
        at = append(p, cache, n, len);
    }
    while p.durable_end() < at {
        flush(p).await;
    }
    at
}

/// The offsets of the records in a read's chunks at or after `from`, each value checked to
/// name its offset.
fn offsets(chunks: &[crate::log::ReadChunk], from: u64) -> Vec<u64> {
    let mut out = Vec::new();
    for c in chunks {
        let buf = crate::batch::aligned16(c.as_slice().expect("in memory"));
        for b in BatchIter::new(&buf) {
            for r in b.expect("valid").records().expect("records") {
                if r.offset < from {
                    continue;
                }
                let name = format!("v{}-", r.offset);
                assert!(r.value().unwrap_or_default().starts_with(name.as_bytes()));
                out.push(r.offset);
            }
        }
    }
    out
}

#[test]
fn a_reader_catching_up_reads_exactly_the_log_from_its_read_aheads() {
    on_shard(|dir| async move {
        let cache = TailCache::new(0).with_read_ahead(8 << 20);
        let p = open(&dir, "t", false, 16 << 20).await;
        let mut rng = Rng(0x5eed_0001);
        // Several segments (256 KiB each), batches of many sizes.
        let end = fill(&p, &cache, &mut rng, 3_000).await;
        for max_bytes in [1, 20_000, 64 << 10, 300_000] {
            let (started, taken, _) = cache.read_ahead().counts();
            let (mut at, mut reads) = (0, 0);
            while at < end {
                let chunks = p.read(at, copy(max_bytes), &cache).await.expect("read");
                let got = offsets(&chunks, at);
                assert!(!got.is_empty(), "no data at {at} (max {max_bytes})");
                let want: Vec<u64> = (at..at + got.len() as u64).collect();
                assert_eq!(got, want, "from {at}, max {max_bytes}");
                at += got.len() as u64;
                reads += 1;
            }
            assert_eq!(at, end);
            let (started2, taken2, evicted) = cache.read_ahead().counts();
            assert_eq!(evicted, 0, "within the bound");
            // Every read after the first was started ahead of it (the last read has nothing
            // after it on disk, so none follows it).
            assert_eq!(taken2 - taken, reads - 1, "max {max_bytes}");
            assert_eq!(started2 - started, reads - 1, "max {max_bytes}");
            assert_eq!(
                cache.read_ahead().used_bytes(),
                0,
                "nothing held at the end"
            );
        }
    });
}

#[test]
fn a_read_ahead_is_not_served_past_a_lower_limit() {
    on_shard(|dir| async move {
        let cache = TailCache::new(0).with_read_ahead(8 << 20);
        let p = open(&dir, "t", false, 16 << 20).await;
        // One-record batches: a read's limit is exact.
        for _ in 0..200 {
            append(&p, &cache, 1, 1_000);
        }
        flush(&p).await;
        assert_eq!(p.high_watermark(), 200);
        let first = p.read(0, copy(16 << 10), &cache).await.expect("read");
        let next = *offsets(&first, 0).last().expect("data") + 1;
        assert_eq!(
            cache.read_ahead().counts().0,
            1,
            "a read-ahead started at {next}"
        );
        // read_committed below a last stable offset just past `next`: one batch, not the
        // read-ahead's (taken below the high watermark).
        let stable = p
            .read_stable(next, next + 1, copy(16 << 10), &cache)
            .await
            .expect("read");
        assert_eq!(offsets(&stable, next), vec![next]);
        assert_eq!(cache.read_ahead().counts().1, 0, "not taken");
    });
}

#[test]
fn a_read_ahead_from_a_replaced_segment_file_does_not_answer() {
    on_shard(|dir| async move {
        let cache = TailCache::new(0);
        let p = open(&dir, "t", false, 16 << 20).await;
        for _ in 0..50 {
            append(&p, &cache, 1, 1_000);
        }
        flush(&p).await;
        let budget = ReadAheadBudget::new(8 << 20);
        let slot = Rc::new(std::cell::RefCell::new(None));
        let reader = |log: &PartitionLog| log.reader_for_offset(10).expect("reader");
        let (reopened, _) = PartitionLog::open(dir.clone(), super::tests::seg_config())
            .await
            .expect("reopen");
        let same: SegmentReader = p.log.borrow().reader_for_offset(10).expect("reader");
        ReadAhead::start(&budget, &slot, same, 10, 4096, 50);
        let ahead = slot.borrow_mut().take().expect("started");
        let now = p.log.borrow().reader_for_offset(10).expect("reader");
        assert!(ahead.answers(&now, 10, 4096, 50));
        assert!(ahead.answers(&now, 10, 4096, 60), "a higher limit is fine");
        assert!(!ahead.answers(&now, 10, 4096, 49), "a lower limit is not");
        assert!(!ahead.answers(&now, 11, 4096, 50), "another offset");
        assert!(!ahead.answers(&now, 10, 8192, 50), "another size");
        // The same file reopened (as after a truncation or a compaction swap): another file.
        assert!(!ahead.answers(&reader(&reopened), 10, 4096, 50));
        let got = ahead.take(&budget).await.expect("read").expect("data");
        assert!((11..=14).contains(&got.next_offset), "{}", got.next_offset);
        assert_eq!(budget.used_bytes(), 0, "released once taken");
    });
}

#[test]
fn the_shard_bound_drops_the_oldest_read_ahead() {
    on_shard(|dir| async move {
        let window = SegmentReader::copy_read_bytes(4096);
        let budget = ReadAheadBudget::new(2 * window);
        let cache = TailCache::new(0);
        let mut parts = Vec::new();
        for i in 0..3 {
            let d = dir.join(format!("p{i}"));
            std::fs::create_dir_all(&d).expect("dir");
            let p = open(&d, "t", false, 16 << 20).await;
            for _ in 0..20 {
                append(&p, &cache, 1, 1_000);
            }
            flush(&p).await;
            parts.push(p);
        }
        let slots: Vec<_> = (0..3)
            .map(|_| Rc::new(std::cell::RefCell::new(None)))
            .collect();
        for (p, slot) in parts.iter().zip(&slots) {
            let reader = p.log.borrow().reader_for_offset(5).expect("reader");
            ReadAhead::start(&budget, slot, reader, 5, 4096, 20);
            assert!(budget.used_bytes() <= 2 * window, "the bound holds");
        }
        assert!(slots[0].borrow().is_none(), "the oldest was dropped");
        assert!(slots[1].borrow().is_some() && slots[2].borrow().is_some());
        assert_eq!(budget.counts(), (3, 0, 1));
        // A read-ahead larger than the whole bound never starts.
        let reader = parts[0].log.borrow().reader_for_offset(5).expect("reader");
        ReadAhead::start(&budget, &slots[0], reader, 5, 3 * window, 20);
        assert!(slots[0].borrow().is_none());
        assert_eq!(budget.counts().0, 3);
        slots.iter().for_each(|s| drop(s.borrow_mut().take()));
        assert_eq!(budget.used_bytes(), 0, "dropping releases");
    });
}

#[test]
fn a_failed_read_ahead_is_read_again_not_served() {
    use rill_shards::file::faults::{self, FileOp};
    on_shard(|dir| async move {
        let cache = TailCache::new(0).with_read_ahead(8 << 20);
        let p = open(&dir, "t", false, 16 << 20).await;
        for _ in 0..100 {
            append(&p, &cache, 1, 1_000);
        }
        flush(&p).await;
        // A read-ahead for offset 10 whose one read fails.
        let key = dir.to_string_lossy().to_string();
        faults::inject(&key, FileOp::Read, libc::EIO, 1);
        let reader = p.log.borrow().reader_for_offset(10).expect("reader");
        ReadAhead::start(cache.read_ahead(), &p.read_ahead, reader, 10, 16 << 10, 100);
        let chunks = p.read(10, copy(16 << 10), &cache).await;
        faults::clear(&key);
        let got = offsets(&chunks.expect("read again after the failed read-ahead"), 10);
        assert_eq!(got.first(), Some(&10));
        assert_eq!(
            cache.read_ahead().counts().1,
            1,
            "the read-ahead was taken, and failed"
        );
    });
}
