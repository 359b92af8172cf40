//! Write caching (`write.caching`): a produce is acknowledged and visible from memory before
//! its write, written behind in order; `--write-caching-max-bytes` bounds what is held so;
//! internal topics never cache; a crash loses exactly the unwritten tail. The tests drive the
//! group commit by hand (flush, then advance), so every state between append and write is
//! reached on purpose.

use std::collections::BTreeMap;
use std::rc::Rc;
use std::time::{Duration, Instant};

use rill_shards::rt::spawn_local;

use futures_lite::future::poll_once;

use super::group_commit::GroupCommit;
use super::tail_cache::TailCache;
use super::tests::{read_from, seg_config};
use super::{Partition, ReadLimits};
use crate::batch::test_support::Rng;
use crate::batch::{BatchBuilder, BatchView};
use crate::log::{FileReads, FsyncPolicy, PartitionLog, ReadChunk};
use crate::test_shard::on_shard;
use crate::topic_config::{TopicDefaults, TopicSettings, WriteBehind};

pub(super) async fn open(
    dir: &std::path::Path,
    topic: &str,
    caching: bool,
    max_bytes: usize,
) -> Partition {
    let defaults = TopicDefaults {
        write_caching: caching,
        write_caching_max_bytes: max_bytes,
        ..TopicDefaults::default()
    };
    open_with(dir, topic, &defaults).await
}

async fn open_with(dir: &std::path::Path, topic: &str, defaults: &TopicDefaults) -> Partition {
    let (log, _) = PartitionLog::open(dir.to_path_buf(), seg_config())
        .await
        .expect("open");
    let mut settings = TopicSettings::resolve(&BTreeMap::new(), defaults);
    settings.segment_bytes = seg_config().segment_bytes;
    Partition::new(Rc::from(topic), 1, 0, 1, log, FsyncPolicy::Always, settings)
}

/// Appends one batch of `n` records of `len`-byte values (each naming its offset); returns
/// the log end after it.
pub(super) fn append(p: &Partition, cache: &TailCache, n: u32, len: usize) -> u64 {
    let first = p.log_end_offset();
    let mut b = BatchBuilder::new();
    for i in 0..u64::from(n) {
        let mut v = format!("v{}-", first + i).into_bytes();
        v.resize(len.max(v.len()), b'.');
        b.push(1_000, None, &v, &[], &[]);
    }
    let bytes = b.build().expect("batch");
    let view = BatchView::validate(&bytes).expect("valid");
    p.append(&[view], 1, cache).expect("append").1
}

/// Whether a producer waiting for `offset` is answered at once (and with success).
fn acked_now(p: &Partition, offset: u64) -> bool {
    matches!(p.wait_for_ack(offset).try_recv(), Ok(Ok(())))
}

/// One group-commit round for this partition: the write, then the advance.
pub(super) async fn flush(p: &Partition) {
    if let Some(to) = p.flush().await.expect("flush") {
        p.advance(to);
    }
}

#[test]
fn acknowledged_and_visible_from_memory_then_written_behind() {
    on_shard(|dir| async move {
        // No tail cache: what is not written yet can only come from the log's own memory.
        let cache = TailCache::new(0);
        let p = open(&dir, "t", true, 16 << 20).await;
        let mut end = 0;
        for (n, len) in [(10, 100), (1, 5_000), (40, 7)] {
            end = append(&p, &cache, n, len);
            assert!(acked_now(&p, end - 1), "acknowledged before any write");
            assert_eq!(p.high_watermark(), end, "visible before any write");
            assert_eq!(read_from(&p, &cache, 0, end).await, end);
        }
        assert_eq!(p.durable_end(), 0, "nothing written yet");
        // A write in flight, more appended behind it: reads span both, and the file.
        let mut write = Box::pin(flush(&p));
        assert!(
            poll_once(&mut write).await.is_none(),
            "the DMA write is in flight"
        );
        let end2 = append(&p, &cache, 25, 300);
        assert!(acked_now(&p, end2 - 1));
        for from in [0, 5, end - 1, end, end2 - 1] {
            assert_eq!(read_from(&p, &cache, from, end2).await, end2, "from {from}");
        }
        // Whoever waits for the durable end (a role change, a follower before a truncation)
        // is woken by the write, though acknowledgements and the high watermark moved before.
        let durable_waiter = p.listen();
        write.await;
        assert_eq!(p.durable_end(), end);
        assert!(
            poll_once(durable_waiter).await.is_some(),
            "woken by the write"
        );
        assert_eq!(
            read_from(&p, &cache, 0, end2).await,
            end2,
            "file then memory"
        );
        flush(&p).await;
        assert_eq!(p.durable_end(), end2);
        // Written: sendfile ranges may cover it now, bounded by the written end.
        let limits = ReadLimits {
            max_bytes: 1 << 20,
            file_reads: FileReads::Sendfile,
        };
        let chunks = p.read(0, limits, &cache).await.expect("read");
        assert!(matches!(chunks.as_slice(), [ReadChunk::Sendfile(_)]));
        let on_disk = p.stats().size_bytes;
        assert_eq!(chunks[0].len() as u64, on_disk, "exactly the written bytes");
        drop(p);
        let p = open(&dir, "t", true, 16 << 20).await;
        assert_eq!(p.log_end_offset(), end2);
        assert_eq!(read_from(&p, &cache, 0, end2).await, end2);
    });
}

#[test]
fn without_write_caching_nothing_is_acknowledged_or_visible_before_the_write() {
    on_shard(|dir| async move {
        let cache = TailCache::new(0);
        for (topic, caching) in [("t", false), ("__consumer_offsets", true)] {
            let p = open(&dir.join(topic), topic, caching, 16 << 20).await;
            let end = append(&p, &cache, 10, 100);
            assert!(
                !acked_now(&p, end - 1),
                "{topic}: acknowledged before the write"
            );
            assert_eq!(p.high_watermark(), 0, "{topic}");
            let limits = ReadLimits {
                max_bytes: 1 << 20,
                file_reads: FileReads::Copy,
            };
            assert!(p.read(0, limits, &cache).await.expect("read").is_empty());
            flush(&p).await;
            assert!(acked_now(&p, end - 1), "{topic}");
            assert_eq!(p.high_watermark(), end, "{topic}");
        }
    });
}

#[test]
fn past_the_bound_acknowledgements_and_visibility_wait_for_the_disk() {
    on_shard(|dir| async move {
        let cache = TailCache::new(0);
        let p = open(&dir, "t", true, 5_000).await;
        let first = append(&p, &cache, 1, 4_000);
        assert!(acked_now(&p, first - 1), "within the bound");
        let second = append(&p, &cache, 1, 4_000);
        assert!(
            !acked_now(&p, second - 1),
            "past the bound: waits for the disk"
        );
        assert_eq!(p.high_watermark(), first);
        let waiting = p.wait_for_ack(second - 1);
        flush(&p).await;
        assert_eq!(waiting.try_recv(), Ok(Ok(())), "answered by the write");
        assert_eq!(p.high_watermark(), second);
        // Written, the bound is free again.
        let third = append(&p, &cache, 1, 4_000);
        assert!(acked_now(&p, third - 1));
    });
}

#[test]
fn a_crash_loses_only_the_unwritten_tail() {
    on_shard(|dir| async move {
        let cache = TailCache::new(0);
        let p = open(&dir, "t", true, 16 << 20).await;
        append(&p, &cache, 10, 1_000);
        let written = append(&p, &cache, 10, 1_000);
        flush(&p).await;
        let acked = append(&p, &cache, 10, 1_000);
        assert!(acked_now(&p, acked - 1));
        assert_eq!(p.high_watermark(), acked);
        // The periodic checkpoint runs, then the process dies before the group commit
        // writes the last batch.
        let checkpoints = crate::partition::checkpoint_high_watermarks(&[&p], 1).await;
        assert_eq!(checkpoints, 1);
        drop(p);
        let p = open(&dir, "t", true, 16 << 20).await;
        assert_eq!(p.failure(), None, "the promised loss is not damage");
        assert_eq!(
            p.log_end_offset(),
            written,
            "what was written survives, nothing else"
        );
        assert_eq!(read_from(&p, &cache, 0, written).await, written);
        // And the log takes appends again from there.
        let next = append(&p, &cache, 3, 10);
        assert_eq!(next, written + 3);
        assert_eq!(read_from(&p, &cache, 0, next).await, next);
    });
}

/// Random batch sizes (past the segment size, so segments roll), writes started, finished
/// or not, and reads from random offsets of everything acknowledged: every record reads back
/// at its offset, wherever it is (file, write in flight, pending).
#[test]
fn reads_of_random_layouts_across_written_in_flight_and_pending() {
    for seed in [1u64, 7, 42, 1234] {
        on_shard(move |dir| async move {
            let mut rng = Rng(seed);
            let cache = TailCache::new(if seed % 2 == 0 { 64 << 10 } else { 0 });
            let p = open(&dir, "t", true, 64 << 20).await;
            let mut write = None;
            for _ in 0..120 {
                match rng.below(6) {
                    0 => {
                        if write.is_none() {
                            let mut w = Box::pin(flush(&p));
                            if poll_once(&mut w).await.is_none() {
                                write = Some(w);
                            }
                        }
                    }
                    1 => {
                        if let Some(w) = write.take() {
                            w.await;
                        }
                    }
                    _ => {
                        let n = 1 + rng.below(60) as u32;
                        let len = rng.below(4_000) as usize;
                        let end = append(&p, &cache, n, len);
                        assert!(acked_now(&p, end - 1), "seed {seed}");
                    }
                }
                let end = p.high_watermark();
                assert_eq!(end, p.log_end_offset(), "seed {seed}: visible at once");
                if end > 0 {
                    let from = rng.below(end);
                    assert_eq!(read_from(&p, &cache, from, end).await, end, "seed {seed}");
                }
            }
            if let Some(w) = write.take() {
                w.await;
            }
            flush(&p).await;
            let end = p.log_end_offset();
            assert_eq!(p.durable_end(), end);
            assert!(p.stats().segments > 1, "seed {seed}: segments rolled");
            drop(write);
            drop(p);
            let p = open(&dir, "t", true, 64 << 20).await;
            assert_eq!(
                read_from(&p, &cache, 0, end).await,
                end,
                "seed {seed}: after a restart"
            );
        });
    }
}

/// A caching partition (16 MiB bound) writing behind at `delay` or `bytes`.
async fn open_behind(dir: &std::path::Path, delay: Duration, bytes: usize) -> Partition {
    let defaults = TopicDefaults {
        write_caching: true,
        write_caching_max_bytes: 16 << 20,
        write_behind: WriteBehind { delay, bytes },
        ..TopicDefaults::default()
    };
    open_with(dir, "t", &defaults).await
}

/// Waits (10 s at most: a loaded CI machine) until `p` is durable to `end`.
async fn wait_durable_to(p: &Partition, end: u64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while p.durable_end() < end {
        assert!(Instant::now() < deadline, "not written behind in 10 s");
        rill_shards::rt::sleep(Duration::from_millis(2)).await;
    }
}

#[test]
fn a_caching_partition_is_written_once_enough_is_pending_or_after_the_delay() {
    on_shard(|dir| async move {
        let cache = TailCache::new(0);
        let delay = Duration::from_millis(100);
        let p = open_behind(&dir.join("a"), delay, 10_000).await;
        let t0 = Instant::now();
        append(&p, &cache, 1, 1_000);
        assert_eq!(p.write_deferred_until(t0, t0), Some(t0 + delay));
        assert_eq!(p.write_deferred_until(t0, t0 + delay / 2), Some(t0 + delay));
        assert_eq!(
            p.write_deferred_until(t0, t0 + delay),
            None,
            "the delay passed"
        );
        while p.pending_bytes() < 10_000 {
            assert!(p.write_deferred_until(t0, t0).is_some());
            append(&p, &cache, 3, 700);
        }
        assert_eq!(p.write_deferred_until(t0, t0), None, "enough is pending");

        // The byte threshold is at most half the bound, so acknowledgements stay in memory.
        let defaults = TopicDefaults {
            write_caching: true,
            write_caching_max_bytes: 4_096,
            write_behind: WriteBehind {
                delay: Duration::from_secs(3_600),
                bytes: 1 << 20,
            },
            ..TopicDefaults::default()
        };
        let small = open_with(&dir.join("b"), "t", &defaults).await;
        let end = append(&small, &cache, 1, 2_500);
        assert!(acked_now(&small, end - 1));
        assert_eq!(small.write_deferred_until(t0, t0), None);

        // Without write caching, and for an internal topic, producers wait: due at once.
        let plain = open(&dir.join("c"), "t", false, 16 << 20).await;
        append(&plain, &cache, 1, 10);
        assert_eq!(plain.write_deferred_until(t0, t0), None);
        let internal = open(&dir.join("d"), "__consumer_offsets", true, 16 << 20).await;
        append(&internal, &cache, 1, 10);
        assert_eq!(internal.write_deferred_until(t0, t0), None);
    });
}

#[test]
fn the_group_commit_writes_a_caching_partition_behind_by_bytes_time_and_at_a_stop() {
    on_shard(|dir| async move {
        let cache = TailCache::new(0);
        let gc = GroupCommit::new(FsyncPolicy::Never);
        spawn_local(gc.clone().run()).detach();
        let plain = Rc::new(open(&dir.join("plain"), "t", false, 16 << 20).await);
        let held =
            Rc::new(open_behind(&dir.join("held"), Duration::from_secs(3_600), 64 << 10).await);
        let timed =
            Rc::new(open_behind(&dir.join("timed"), Duration::from_millis(20), 64 << 10).await);

        // A round that writes `plain` leaves `held` (a little, the delay far off) for later.
        let held_end = append(&held, &cache, 2, 100);
        gc.mark_dirty(&held);
        let plain_end = append(&plain, &cache, 2, 100);
        gc.mark_dirty(&plain);
        wait_durable_to(&plain, plain_end).await;
        assert_eq!(held.durable_end(), 0, "deferred");
        assert!(
            acked_now(&held, held_end - 1),
            "acknowledged from memory meanwhile"
        );
        assert_eq!(held.high_watermark(), held_end);

        // Past the byte threshold it goes in the next round.
        let mut end = held_end;
        while held.pending_bytes() < 64 << 10 {
            end = append(&held, &cache, 10, 1_000);
        }
        gc.mark_dirty(&held);
        wait_durable_to(&held, end).await;
        assert_eq!(read_from(&held, &cache, 0, end).await, end);

        // A little, with a short delay: written once the delay passed, with no other wake.
        let timed_end = append(&timed, &cache, 1, 10);
        gc.mark_dirty(&timed);
        wait_durable_to(&timed, timed_end).await;

        // A clean stop defers nothing.
        let last = append(&held, &cache, 1, 10);
        gc.mark_dirty(&held);
        assert_eq!(held.durable_end(), end);
        gc.quiesce().await;
        assert_eq!(held.durable_end(), last);
    });
}
