//! Every storage error path of a partition and the group commit, through injected faults
//! (`rill_shards::file::faults`): a failed write, allocation, short write or fdatasync makes
//! the partition refuse writes with KAFKA_STORAGE_ERROR, nothing below the high watermark
//! changes, readers keep reading, and a reopen (or a restart) recovers once the fault is gone.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::rc::Rc;

use rill_shards::file::faults::{self, FileOp};
use rill_shards::rt::spawn_local;

use super::group_commit::GroupCommit;
use super::producer_state::ProducerBatch;
use super::tail_cache::TailCache;
use super::{Partition, ReadLimits};
use crate::batch::{BatchBuilder, BatchIter, BatchView};
use crate::log::{FileReads, FsyncPolicy, PartitionLog, SegmentConfig};
use crate::protocol::ErrorCode;
use crate::test_shard::on_shard;
use crate::topic_config::{TopicDefaults, TopicSettings};

const SEGMENT: u64 = 256 << 10;

pub(super) fn seg_config() -> SegmentConfig {
    SegmentConfig {
        segment_bytes: SEGMENT,
        segment_age: None,
        index_interval_bytes: 4096,
        preallocate: true,
        preallocate_step: 64 << 10,
        write_bytes: crate::log::appender::WRITE_BYTES,
        writes_in_flight: crate::log::appender::WRITES_IN_FLIGHT,
        scan_bytes: crate::log::segment::SCAN_BYTES,
        sync_writes: false,
    }
}

struct Fixture {
    p: Rc<Partition>,
    gc: Rc<GroupCommit>,
    cache: TailCache,
}

/// A partition as a shard opens it by default: with `--fsync always` its segments are
/// written O_DSYNC.
async fn open(dir: &std::path::Path, fsync: FsyncPolicy) -> Fixture {
    open_with(dir, fsync, fsync.sync_writes(true)).await
}

/// `sync_writes` false with `always`: `--fsync-o-dsync false`, an fdatasync per round.
async fn open_with(dir: &std::path::Path, fsync: FsyncPolicy, sync_writes: bool) -> Fixture {
    let cfg = SegmentConfig {
        sync_writes,
        ..seg_config()
    };
    let (log, _) = PartitionLog::open(dir.to_path_buf(), cfg)
        .await
        .expect("open");
    let mut settings = TopicSettings::resolve(&BTreeMap::new(), &TopicDefaults::default());
    settings.segment_bytes = SEGMENT;
    let p = Rc::new(Partition::new(Rc::from("t"), 1, 0, 1, log, fsync, settings));
    let gc = GroupCommit::new(fsync);
    spawn_local(gc.clone().run()).detach();
    Fixture {
        p,
        gc,
        cache: TailCache::new(0),
    }
}

/// Appends `n` records (one batch of ~2 KiB values) and waits for the acknowledgement.
async fn produce(f: &Fixture, n: u32) -> Result<u64, ErrorCode> {
    let bytes = batch_of(f.p.log_end_offset(), n);
    let view = BatchView::validate(&bytes).expect("valid");
    let (_, next) = f.p.append(&[view], 1, &f.cache).map_err(|e| e.code())?;
    f.gc.mark_dirty(&f.p);
    f.p.wait_for_ack(next - 1)
        .recv_async()
        .await
        .map_err(|_| ErrorCode::UnknownServerError)??;
    Ok(next)
}

/// A batch of `n` records of ~2 KiB whose values name their offsets from `first`.
fn batch_of(first: u64, n: u32) -> rkyv::util::AlignedVec<16> {
    let mut b = BatchBuilder::new();
    for i in 0..u64::from(n) {
        let mut v = format!("v{}-", first + i).into_bytes();
        v.resize(2000, b'.');
        b.push(1_000, None, &v, &[], &[]);
    }
    b.build().expect("batch")
}

/// Reads `[0, end)` back (copy path), checking each value names its offset.
async fn read_all(f: &Fixture, end: u64) -> u64 {
    read_from(&f.p, &f.cache, 0, end).await
}

/// Reads `[from, end)` back (copy path), checking each value names its offset (`v{offset}-`).
pub(super) async fn read_from(p: &Partition, cache: &TailCache, from: u64, end: u64) -> u64 {
    let mut at = from;
    while at < end {
        let limits = ReadLimits {
            max_bytes: 1 << 20,
            file_reads: FileReads::Copy,
        };
        let chunks = p.read(at, limits, cache).await.expect("read");
        assert!(!chunks.is_empty(), "no data at {at} below {end}");
        for c in &chunks {
            let buf = crate::batch::aligned16(c.as_slice().expect("in memory"));
            for b in BatchIter::new(&buf) {
                for r in b.expect("valid").records().expect("records") {
                    if r.offset < at {
                        continue;
                    }
                    assert_eq!(r.offset, at);
                    assert!(r
                        .value()
                        .unwrap_or_default()
                        .starts_with(format!("v{at}-").as_bytes()));
                    at += 1;
                }
            }
        }
    }
    at
}

/// The scenario every fault runs through: acknowledged data, the fault, refused writes with
/// the high watermark unchanged and the data readable, then recovery once it is gone.
async fn fault_then_recover(dir: PathBuf, op: FileOp, errno: i32, fsync: FsyncPolicy) -> String {
    fault_then_recover_with(dir, op, errno, fsync, fsync.sync_writes(true)).await
}

async fn fault_then_recover_with(
    dir: PathBuf,
    op: FileOp,
    errno: i32,
    fsync: FsyncPolicy,
    sync_writes: bool,
) -> String {
    let f = open_with(&dir, fsync, sync_writes).await;
    let acked = produce(&f, 20).await.expect("before the fault");
    let key = dir.to_string_lossy().to_string();
    faults::inject(&key, op, errno, 1_000);
    // Enough to roll a segment (a new file, its allocation) whatever the op is.
    let mut refused = None;
    for _ in 0..200 {
        match produce(&f, 20).await {
            Ok(_) if fsync == FsyncPolicy::Never || matches!(fsync, FsyncPolicy::Interval(_)) => {
                // Syncs happen out of band: run one and see it fail the partition.
                f.gc.sync_all(std::slice::from_ref(&f.p)).await;
                if f.p.failure().is_some() {
                    refused = Some(ErrorCode::KafkaStorageError);
                    break;
                }
            }
            Ok(_) => {}
            Err(code) => {
                refused = Some(code);
                break;
            }
        }
    }
    let hw = f.p.high_watermark();
    assert_eq!(
        refused,
        Some(ErrorCode::KafkaStorageError),
        "{op:?}: the fault was never reported"
    );
    assert!(hw >= acked, "{op:?}: high watermark went back");
    assert!(f.p.failure().is_some(), "{op:?}: not failed");
    // Still failed while the fault lasts: writes refused at once, reads work.
    assert_eq!(
        produce(&f, 1).await,
        Err(ErrorCode::KafkaStorageError),
        "{op:?}"
    );
    assert_eq!(read_all(&f, hw).await, hw, "{op:?}: reads during the fault");
    faults::clear(&key);
    // Recovery without a restart.
    let mut reopened = f.p.failure().is_none();
    if !reopened {
        reopened = f.p.try_reopen(&f.cache).await.expect("reopen");
    }
    assert!(reopened, "{op:?}: did not recover");
    let hw2 = f.p.high_watermark();
    assert!(hw2 >= hw, "{op:?}: high watermark went back on reopen");
    let end = produce(&f, 5).await.expect("writes resume");
    assert_eq!(read_all(&f, end).await, end, "{op:?}");
    drop(f);
    // And a restart finds all of it.
    let f = open_with(&dir, fsync, sync_writes).await;
    assert_eq!(f.p.log_end_offset(), end, "{op:?}: after a restart");
    assert_eq!(read_all(&f, end).await, end);
    f.p.failure().unwrap_or_default()
}

#[test]
fn a_failing_write_fails_the_partition_until_the_disk_is_back() {
    let left =
        on_shard(|dir| fault_then_recover(dir, FileOp::Write, libc::EIO, FsyncPolicy::Always));
    assert_eq!(left, "");
}

#[test]
fn a_short_write_fails_the_partition_until_the_disk_is_back() {
    let left = on_shard(|dir| fault_then_recover(dir, FileOp::ShortWrite, 0, FsyncPolicy::Always));
    assert_eq!(left, "");
}

#[test]
fn no_space_to_allocate_fails_the_partition_until_space_is_back() {
    let left = on_shard(|dir| {
        fault_then_recover(dir, FileOp::Fallocate, libc::ENOSPC, FsyncPolicy::Always)
    });
    assert_eq!(left, "");
}

#[test]
fn a_failing_fdatasync_in_the_group_commit_fails_the_partition() {
    let left =
        on_shard(|dir| fault_then_recover(dir, FileOp::Fdatasync, libc::EIO, FsyncPolicy::Always));
    assert_eq!(left, "");
}

#[test]
fn a_failing_fdatasync_fails_the_partition_without_o_dsync_too() {
    let left = on_shard(|dir| {
        fault_then_recover_with(
            dir,
            FileOp::Fdatasync,
            libc::EIO,
            FsyncPolicy::Always,
            false,
        )
    });
    assert_eq!(left, "");
}

#[test]
fn a_failing_interval_fdatasync_fails_the_partition() {
    let left = on_shard(|dir| {
        fault_then_recover(
            dir,
            FileOp::Fdatasync,
            libc::EIO,
            FsyncPolicy::Interval(std::time::Duration::from_secs(3600)),
        )
    });
    assert_eq!(left, "");
}

#[test]
fn a_failing_directory_sync_of_a_rolled_segment_fails_the_partition() {
    // `--fsync always` awaits the new segment's directory sync with the round's fdatasync.
    let left =
        on_shard(|dir| fault_then_recover(dir, FileOp::DirSync, libc::EIO, FsyncPolicy::Always));
    assert_eq!(left, "");
}

#[test]
fn a_failing_directory_sync_fails_the_partition_at_the_interval_sync() {
    let left = on_shard(|dir| {
        fault_then_recover(
            dir,
            FileOp::DirSync,
            libc::EIO,
            FsyncPolicy::Interval(std::time::Duration::from_secs(3600)),
        )
    });
    assert_eq!(left, "");
}

#[test]
fn with_fsync_always_rounds_write_o_dsync_and_need_no_fdatasync() {
    // Each O_DSYNC write is durable when it completes: a round acknowledges after its writes
    // (and a roll's directory sync) without an fdatasync of its own.
    let (syncs, end, read, after_restart) = on_shard(|dir| async move {
        let f = open(&dir, FsyncPolicy::Always).await;
        let mut end = 0;
        while segment_files(&dir) < 3 {
            end = produce(&f, 20).await.expect("acknowledged");
        }
        let syncs = f.gc.stats().fdatasync.count;
        let read = read_all(&f, end).await;
        drop(f);
        let f = open(&dir, FsyncPolicy::Always).await;
        (syncs, end, read, f.p.log_end_offset())
    });
    assert_eq!(syncs, 0, "a round called fdatasync after O_DSYNC writes");
    assert_eq!(read, end);
    assert_eq!(after_restart, end);
}

/// The segment files in a partition's directory.
fn segment_files(dir: &std::path::Path) -> usize {
    std::fs::read_dir(dir)
        .expect("partition dir")
        .filter(|e| {
            e.as_ref()
                .is_ok_and(|e| e.path().extension().is_some_and(|x| x == "log"))
        })
        .count()
}

#[test]
fn with_fsync_always_nothing_in_a_rolled_segment_is_acknowledged_before_its_directory_sync() {
    on_shard(|dir| async move {
        let f = open(&dir, FsyncPolicy::Always).await;
        let key = dir.to_string_lossy().to_string();
        faults::inject(&key, FileOp::DirSync, libc::EIO, 1);
        let refused = loop {
            match produce(&f, 20).await {
                Ok(_) => assert_eq!(
                    segment_files(&dir),
                    1,
                    "acknowledged in a segment whose directory entry did not sync"
                ),
                Err(code) => break code,
            }
        };
        assert_eq!(refused, ErrorCode::KafkaStorageError);
        assert_eq!(segment_files(&dir), 2);
        faults::clear(&key);
    });
}

#[test]
fn with_fsync_never_a_roll_does_not_wait_for_its_directory_sync_and_the_next_roll_reports_it() {
    on_shard(|dir| async move {
        let f = open(&dir, FsyncPolicy::Never).await;
        let key = dir.to_string_lossy().to_string();
        // One failure: the first roll's directory sync.
        faults::inject(&key, FileOp::DirSync, libc::EIO, 1);
        let mut acked = 0;
        while segment_files(&dir) < 2 {
            acked = produce(&f, 20)
                .await
                .expect("acknowledged: `never` does not wait for a roll's directory sync");
        }
        assert!(f.p.failure().is_none());
        // The next roll awaits the failed sync first: the partition fails there, before a
        // third segment exists.
        let refused = loop {
            assert_eq!(
                segment_files(&dir),
                2,
                "a roll went past a failed directory sync"
            );
            match produce(&f, 20).await {
                Ok(end) => acked = end,
                Err(code) => break code,
            }
        };
        assert_eq!(refused, ErrorCode::KafkaStorageError);
        assert!(f.p.failure().is_some_and(|w| w.contains("Input/output")));
        assert!(f.p.high_watermark() >= acked);
        faults::clear(&key);
        assert!(f.p.try_reopen(&f.cache).await.expect("reopen"));
        let end = produce(&f, 5).await.expect("writes resume");
        assert_eq!(read_all(&f, end).await, end);
    });
}

#[test]
fn with_fsync_never_a_roll_waits_for_no_fdatasync() {
    // The old segment is cut, not synced: the round must not wait for its fdatasync (the
    // hundreds of ms a busy disk takes). Every fdatasync fails here, so one would fail the
    // partition.
    let (rolls, failure, read) = on_shard(|dir| async move {
        let f = open(&dir, FsyncPolicy::Never).await;
        let key = dir.to_string_lossy().to_string();
        faults::inject(&key, FileOp::Fdatasync, libc::EIO, 1_000_000);
        let mut end = 0;
        while segment_files(&dir) < 4 {
            end = produce(&f, 20).await.expect("acknowledged across rolls");
        }
        faults::clear(&key);
        (
            segment_files(&dir),
            f.p.failure(),
            read_all(&f, end).await == end,
        )
    });
    assert_eq!(rolls, 4);
    assert_eq!(failure, None);
    assert!(read);
}

#[test]
fn with_fsync_always_a_round_that_rolled_syncs_the_old_segment_before_it_acknowledges() {
    // A round whose batches go to both sides of a roll: the roll no longer syncs the old
    // segment, so the round's fdatasync must (`--fsync-o-dsync false`; O_DSYNC writes sync
    // themselves). A failing one of the old segment refuses the round.
    let (refused, files) = on_shard(|dir| async move {
        let f = open_with(&dir, FsyncPolicy::Always, false).await;
        produce(&f, 20).await.expect("first batch");
        let one = f.p.log.borrow().size_bytes();
        // Fill the first segment while two more batches still fit...
        while f.p.log.borrow().size_bytes() + 3 * one <= SEGMENT {
            produce(&f, 20).await.expect("before the roll");
        }
        // ... then append them in one round with a third that rolls.
        let key = dir
            .join(crate::log::segment::segment_file_name(0))
            .to_string_lossy()
            .to_string();
        faults::inject(&key, FileOp::Fdatasync, libc::EIO, 1_000_000);
        let mut last = 0;
        for _ in 0..3 {
            let first = f.p.log_end_offset();
            let bytes = batch_of(first, 20);
            let view = BatchView::validate(&bytes).expect("valid");
            last = f.p.append(&[view], 1, &f.cache).expect("append").1 - 1;
        }
        f.gc.mark_dirty(&f.p);
        let refused = f.p.wait_for_ack(last).recv_async().await.expect("answered");
        faults::clear(&key);
        (refused.err(), segment_files(&dir))
    });
    assert_eq!(refused, Some(ErrorCode::KafkaStorageError));
    assert_eq!(files, 2, "the round rolled");
}

#[test]
fn a_restart_on_a_full_disk_serves_the_data_read_only_then_recovers() {
    let (failed, read, refused, recovered) = on_shard(|dir| async move {
        let f = open(&dir, FsyncPolicy::Always).await;
        let end = produce(&f, 30).await.unwrap();
        drop(f);
        let key = dir.to_string_lossy().to_string();
        faults::inject(&key, FileOp::Fallocate, libc::ENOSPC, 1_000);
        let f = open(&dir, FsyncPolicy::Always).await;
        let failed = f.p.failure();
        let read = read_all(&f, end).await;
        let refused = produce(&f, 1).await;
        faults::clear(&key);
        let recovered = f.p.try_reopen(&f.cache).await.unwrap() && produce(&f, 1).await.is_ok();
        (failed, read == end, refused, recovered)
    });
    assert!(failed.is_some_and(|f| f.contains("cannot prepare the log for writes")));
    assert!(read);
    assert_eq!(refused, Err(ErrorCode::KafkaStorageError));
    assert!(recovered);
}

/// The leader epochs of every batch in `[0, end)`, in order.
async fn read_epochs(f: &Fixture, end: u64) -> Vec<(u64, i32)> {
    let limits = ReadLimits {
        max_bytes: 1 << 24,
        file_reads: FileReads::Copy,
    };
    let mut out = Vec::new();
    for c in f.p.read(0, limits, &f.cache).await.expect("read") {
        let buf = crate::batch::aligned16(c.as_slice().expect("in memory"));
        for b in BatchIter::new(&buf) {
            let h = *b.expect("valid").header();
            if h.base_offset < end {
                out.push((h.base_offset, h.leader_epoch));
            }
        }
    }
    out
}

#[test]
fn the_leader_stamps_its_epoch_and_keeps_the_epoch_file_across_restarts() {
    use crate::log::leader_epoch::{read_leader_epochs, write_leader_epochs};
    on_shard(|dir| async move {
        let f = open(&dir, FsyncPolicy::Always).await;
        f.p.lead(3).await.expect("lead at 3");
        let a = produce(&f, 4).await.expect("produce");
        f.p.lead(3)
            .await
            .expect("the same epoch again: nothing changes");
        f.p.lead(5).await.expect("lead at 5");
        let b = produce(&f, 2).await.expect("produce");
        assert_eq!(read_epochs(&f, b).await, vec![(0, 3), (a, 5)]);
        assert_eq!(
            read_leader_epochs(&dir).expect("file"),
            vec![(3, 0), (5, a)]
        );
        let refused = f.p.lead(4).await.expect_err("epochs never go back");
        assert!(refused.to_string().contains("leader-epoch"), "{refused}");
        assert_eq!(f.p.leader_epoch(), 5);
        drop(f);
        // A restart reloads the file; an entry past the log end (the file can be durable
        // before the records it names) is cut.
        write_leader_epochs(&dir, &[(3, 0), (5, a), (6, b + 100)]).expect("write");
        let f = open(&dir, FsyncPolicy::Always).await;
        f.p.lead(7).await.expect("lead at 7");
        assert_eq!(
            f.p.leader_epochs().expect("loaded").entries(),
            &[(3, 0), (5, a), (7, b)]
        );
        drop(f);
        // A damaged file keeps the partition from leading, naming the file.
        let path = dir.join(crate::log::leader_epoch::LEADER_EPOCH_FILE);
        let mut bytes = std::fs::read(&path).expect("read");
        bytes[14] ^= 1;
        std::fs::write(&path, &bytes).expect("write");
        let f = open(&dir, FsyncPolicy::Always).await;
        let e = f.p.lead(8).await.expect_err("damaged");
        assert!(e.to_string().contains("leader-epoch"), "{e}");
    });
}

/// An idempotent producer's batch that was appended but never written (a failed write) is
/// a duplicate only while the partition is failed: its retry waits and fails like it; after
/// the reopen the producer state is cut with the log, and the retry is stored.
#[test]
fn a_batch_lost_to_a_failed_write_is_stored_by_its_retry_after_the_reopen() {
    use super::producer_state::Verdict;
    let left = on_shard(|dir| async move {
        let f = open(&dir, FsyncPolicy::Always).await;
        let batch = |seq: i32| {
            let mut b = BatchBuilder::new().producer(5, 0, seq);
            for i in 0..10 {
                b.push(1_000, None, format!("p{}", seq + i).as_bytes(), &[], &[]);
            }
            b.build().expect("batch")
        };
        let append = |bytes: &[u8]| {
            let view = BatchView::validate(bytes).expect("valid");
            let v =
                f.p.admit_producer_batches(&[(
                    view.header().record_count,
                    ProducerBatch::of(view.header()),
                )])
                .expect("admitted");
            let r = if v == [Verdict::Append] {
                f.p.append(&[view], 1, &f.cache).map_err(|e| e.code())
            } else {
                Err(ErrorCode::DuplicateSequenceNumber)
            };
            f.gc.mark_dirty(&f.p);
            (v, r)
        };
        let (first, second) = (batch(0), batch(10));
        let (_, r) = append(&first);
        let (_, next) = r.expect("first");
        f.p.wait_for_ack(next - 1)
            .recv_async()
            .await
            .unwrap()
            .unwrap();
        let key = dir.to_string_lossy().to_string();
        faults::inject(&key, FileOp::Write, libc::EIO, 1_000);
        let (v, r) = append(&second);
        assert_eq!(v, [Verdict::Append]);
        let (_, next) = r.expect("appended, not yet written");
        let ack = f.p.wait_for_ack(next - 1).recv_async().await.unwrap();
        assert_eq!(ack, Err(ErrorCode::KafkaStorageError));
        // The retry while failed: taken for the batch in the log's pending appends.
        let view = BatchView::validate(&second).expect("valid");
        assert!(matches!(
            f.p.admit_producer_batches(&[(view.header().record_count, ProducerBatch::of(view.header()))]).as_deref(),
            Ok([Verdict::Duplicate(m)]) if m.base_offset == 10
        ));
        faults::clear(&key);
        assert!(f.p.try_reopen(&f.cache).await.expect("reopen"));
        assert_eq!(f.p.log_end_offset(), 10, "the unwritten batch is gone");
        // Now the retry is new again, and stored.
        let (v, r) = append(&second);
        assert_eq!(v, [Verdict::Append]);
        let (base, next) = r.expect("stored");
        assert_eq!((base, next), (10, 20));
        f.p.wait_for_ack(next - 1)
            .recv_async()
            .await
            .unwrap()
            .unwrap();
        assert_eq!(f.p.producer_position(5), Some((0, 19, 19)));
        f.p.failure().unwrap_or_default()
    });
    assert_eq!(left, "");
}

/// The last stable offset with several open transactions: at the oldest one's first offset,
/// held there until the high watermark passes the marker that ends it; the aborted list;
/// both the same after a clean reopen (the snapshot) and a reopen without one (the log).
#[test]
fn the_last_stable_offset_follows_open_transactions_and_survives_a_reopen() {
    use super::producer_state::AbortedTxn;
    use crate::batch::control::{ControlKind, ControlRecord};
    use crate::batch::{add_flags, FLAG_TRANSACTIONAL};
    on_shard(|dir| async move {
        let f = open(&dir, FsyncPolicy::Always).await;
        let txn = |pid: i64, seq: i32| {
            let mut b = BatchBuilder::new().producer(pid, 0, seq);
            b.push(1_000, None, b"t", &[], &[]);
            let mut out = b.build().expect("batch");
            add_flags(&mut out, FLAG_TRANSACTIONAL);
            out
        };
        let marker = |pid: i64, kind| {
            ControlRecord {
                kind,
                coordinator_epoch: 0,
            }
            .batch(pid, 0, 1_000)
            .expect("marker")
        };
        let append = |bytes: &[u8]| {
            let view = BatchView::validate(bytes).expect("valid");
            let (_, next) = f.p.append(&[view], 1, &f.cache).expect("appended");
            next
        };
        let durable = |next: u64| {
            f.gc.mark_dirty(&f.p);
            f.p.wait_for_ack(next - 1)
        };
        append(&txn(1, 0));
        append(&txn(2, 0));
        let mut plain = BatchBuilder::new();
        plain.push(1_000, None, b"p", &[], &[]);
        let next = append(&plain.build().unwrap());
        durable(next).recv_async().await.unwrap().unwrap();
        assert_eq!((f.p.high_watermark(), f.p.last_stable_offset()), (3, 0));
        // Producer 1 commits at 3: until the marker is below the high watermark, the LSO
        // stays at 0; then it is producer 2's first offset.
        let next = append(&marker(1, ControlKind::Commit));
        assert_eq!(f.p.last_stable_offset(), 0);
        durable(next).recv_async().await.unwrap().unwrap();
        assert_eq!((f.p.high_watermark(), f.p.last_stable_offset()), (4, 1));
        let next = append(&marker(2, ControlKind::Abort));
        durable(next).recv_async().await.unwrap().unwrap();
        assert_eq!((f.p.high_watermark(), f.p.last_stable_offset()), (5, 5));
        let aborted = vec![AbortedTxn {
            producer_id: 2,
            first_offset: 1,
            last_offset: 4,
        }];
        assert_eq!(f.p.aborted_transactions(0, 5), aborted);
        assert_eq!(f.p.aborted_transactions(5, 5), vec![]);
        // Producer 1 opens another one, left open.
        let next = append(&txn(1, 1));
        durable(next).recv_async().await.unwrap().unwrap();
        assert_eq!(f.p.last_stable_offset(), 5);
        let written = crate::partition::snapshot_producers(std::slice::from_ref(&f.p), true).await;
        assert_eq!(written, 1);
        assert!(dir.join(super::producer_snapshot::SNAPSHOT_FILE).exists());
        drop(f);
        for from_snapshot in [true, false] {
            if !from_snapshot {
                std::fs::remove_file(dir.join(super::producer_snapshot::SNAPSHOT_FILE)).unwrap();
            }
            let g = open(&dir, FsyncPolicy::Always).await;
            g.p.load_producer_state(&g.cache).await.expect("loaded");
            assert_eq!(
                (g.p.last_stable_offset(), g.p.aborted_transactions(0, 6)),
                (5, aborted.clone()),
                "from the snapshot: {from_snapshot}"
            );
        }
    });
}
