//! Storage at its failures: recovery of large segments whatever the batch layout, and every
//! kind of damage found at open (torn tails, flipped header bytes, missing or shortened
//! segments, acknowledged offsets gone), on real files through a real shard.

use std::cell::RefCell;
use std::path::{Path, PathBuf};

use bytes::Bytes;

use crate::test_shard::on_shard;
use rill_shards::file::faults::{self, FileOp};

use super::partition_log::{
    flush, read_high_watermark, write_high_watermark, write_high_watermarks, PartitionLog,
};
use super::{LogError, SegmentConfig};
use crate::batch::{stamp_batch, BatchBuilder, BatchIter, BatchView};

fn config(segment_bytes: u64) -> SegmentConfig {
    SegmentConfig {
        segment_bytes,
        segment_age: None,
        index_interval_bytes: 4096,
        preallocate: true,
        preallocate_step: 256 << 10,
        write_bytes: super::appender::WRITE_BYTES,
        writes_in_flight: super::appender::WRITES_IN_FLIGHT,
        scan_bytes: super::segment::SCAN_BYTES,
        sync_writes: false,
    }
}

/// A tiny deterministic generator (xorshift), so failures name their seed.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// A batch of `records` records whose values are `value_len` bytes, the value naming its
/// record index (so reads can be checked).
fn batch(first: u64, records: u32, value_len: usize) -> Vec<u8> {
    let mut b = BatchBuilder::new();
    for i in 0..u64::from(records) {
        let mut v = format!("r{}-", first + i).into_bytes();
        v.resize(value_len.max(v.len()), b'.');
        b.push(1_000 + (first + i) as i64, None, &v, &[], &[]);
    }
    b.build().expect("batch").to_vec()
}

/// Appends `batches` (record count, value size) and flushes them; returns the log end.
async fn append_all(log: &RefCell<PartitionLog>, shapes: &[(u32, usize)]) -> u64 {
    for &(records, value_len) in shapes {
        let next = log.borrow().next_offset();
        let mut bytes = batch(next, records, value_len);
        stamp_batch(&mut bytes, next, 5);
        log.borrow_mut()
            .append_stamped(Bytes::from(bytes), records)
            .expect("append");
    }
    flush(log).await.expect("flush");
    log.borrow().next_offset()
}

/// Reads every offset in `[start, end)` back through the copy path, checking each record's
/// value names its offset.
async fn read_back(log: &PartitionLog, start: u64, end: u64) -> Result<u64, LogError> {
    let mut at = start;
    while at < end {
        let reader = log.reader_for_offset(at)?;
        let Some(rr) = reader.read(at, 256 << 10, end).await? else {
            panic!("no data at offset {at} below {end}");
        };
        let mut buf = rkyv::util::AlignedVec::<16>::new();
        buf.extend_from_slice(&rr.bytes);
        for b in BatchIter::new(&buf) {
            let b = b.expect("valid batch");
            for r in b.records().expect("records") {
                if r.offset < at {
                    continue;
                }
                assert_eq!(r.offset, at, "offsets contiguous");
                let want = format!("r{at}-");
                assert!(
                    r.value().unwrap_or_default().starts_with(want.as_bytes()),
                    "value of {at}"
                );
                at += 1;
            }
        }
        assert_eq!(
            rr.next_offset, at,
            "a copy read names the offset after its batches"
        );
    }
    Ok(at)
}

fn segment_files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("dir")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .collect();
    v.sort();
    v
}

/// The byte position of the batch holding `offset` in a segment file (scanned).
fn position_of(path: &Path, offset: u64) -> u64 {
    let bytes = std::fs::read(path).expect("segment");
    let mut at = 0usize;
    loop {
        let h = crate::batch::BatchHeader::decode(&bytes[at..]).expect("header");
        if h.next_offset() > offset {
            return at as u64;
        }
        at += h.length as usize;
    }
}

fn flip(path: &Path, position: u64, mask: u8) {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .expect("open");
    let mut b = [0u8];
    f.read_exact_at(&mut b, position).expect("read");
    b[0] ^= mask;
    f.write_all_at(&b, position).expect("write");
    f.sync_all().expect("sync");
}

#[test]
fn recovery_keeps_every_batch_of_segments_larger_than_any_read() {
    // Batch sizes from 96 bytes to ~600 KiB in random order, 12-40 MiB per seed, in 64 MiB
    // segments: many 4 MiB scan windows end inside a header or a batch.
    // Half the seeds scan with 64 KiB reads, so that reads end inside headers hundreds of times.
    // Writes are cut into pieces of one page to the default 2 MiB, 1 to 4 in flight: pieces
    // end inside headers and batches, and a round's pieces complete in any order.
    for (n, seed) in [1u64, 7, 42, 1234, 99_991, 5, 77, 31_337]
        .into_iter()
        .enumerate()
    {
        let (end, reopened) = on_shard(move |dir| async move {
            let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
            let mut cfg = config(64 << 20);
            if seed % 2 == 1 {
                cfg.scan_bytes = 64 << 10;
            }
            cfg.write_bytes = [4096, 12 << 10, 64 << 10, 2 << 20][n % 4];
            cfg.writes_in_flight = [1, 3, 4][n % 3];
            let (log, _) = PartitionLog::open(dir.clone(), cfg.clone())
                .await
                .expect("open");
            let log = RefCell::new(log);
            let target = (8 + rng.below(16)) << 20;
            let mut written = 0u64;
            while written < target {
                let shapes: Vec<(u32, usize)> = (0..1 + rng.below(64))
                    .map(|_| match rng.below(50) {
                        0 => (1, rng.below(600 << 10) as usize),
                        1..=5 => (1 + rng.below(50) as u32, rng.below(2048) as usize),
                        _ => (1, rng.below(400) as usize),
                    })
                    .collect();
                append_all(&log, &shapes).await;
                written = log.borrow().size_bytes();
            }
            let end = log.borrow().next_offset();
            drop(log);
            // Without index files the closed segments are scanned too.
            for f in segment_files(&dir) {
                let _ = std::fs::remove_file(f.with_extension("index"));
            }
            let (log, rec) = PartitionLog::open(dir, cfg).await.expect("reopen");
            assert_eq!(rec.truncated_bytes, 0, "seed {seed}: nothing is torn");
            assert!(log.failure().is_none(), "seed {seed}: {:?}", log.failure());
            let got = read_back(&log, 0, log.next_offset()).await.expect("read");
            (end, (log.next_offset(), got))
        });
        assert_eq!(reopened, (end, end), "seed {seed}");
    }
}

/// Exact encoded length of a one-record batch with a `v`-byte value.
fn one_record_len(v: usize) -> usize {
    batch(0, 1, v).len()
}

#[test]
fn a_header_straddling_a_scan_window_is_not_taken_for_a_torn_tail() {
    // Puts a batch header across the 4 MiB window boundary at every 16-byte step of the
    // header: the first batch ends 16..80 bytes before the boundary.
    for before in [16u64, 32, 48, 64, 80] {
        let (end, reopened) = on_shard(move |dir| async move {
            let boundary = 4u64 << 20;
            let target = (boundary - before) as usize;
            let v = (0..target)
                .rev()
                .find(|v| one_record_len(*v) <= target)
                .expect("a value size");
            let (log, _) = PartitionLog::open(dir.clone(), config(64 << 20))
                .await
                .expect("open");
            let log = RefCell::new(log);
            let mut shapes = vec![(1u32, v)];
            // Pad with small batches up to exactly `target`.
            let mut size = one_record_len(v);
            while size < target {
                let fill = (0..=(target - size))
                    .rev()
                    .find(|w| one_record_len(*w) <= target - size)
                    .expect("filler");
                shapes.push((1, fill));
                size += one_record_len(fill);
            }
            assert_eq!(size, target);
            shapes.extend([(3, 100), (1, 5000), (2, 10)]);
            let end = append_all(&log, &shapes).await;
            drop(log);
            let (log, rec) = PartitionLog::open(dir, config(64 << 20)).await.unwrap();
            assert_eq!(rec.truncated_bytes, 0);
            assert!(log.failure().is_none());
            let got = read_back(&log, 0, log.next_offset()).await.unwrap();
            (end, (log.next_offset(), got))
        });
        assert_eq!(
            reopened,
            (end, end),
            "header {before} bytes before the window end"
        );
    }
}

#[test]
fn a_torn_tail_past_the_acknowledged_offsets_is_cut_and_writes_resume_there() {
    let (acked, end, after) = on_shard(|dir| async move {
        let (log, _) = PartitionLog::open(dir.clone(), config(1 << 20))
            .await
            .unwrap();
        let log = RefCell::new(log);
        let acked = append_all(&log, &[(10, 100); 20]).await;
        write_high_watermark(&dir, acked).unwrap();
        // An unacknowledged last write, torn: its second half never reached the disk.
        let end = append_all(&log, &[(5, 3000)]).await;
        drop(log);
        let seg = segment_files(&dir).pop().unwrap();
        let torn_at = position_of(&seg, acked);
        let torn_len = 7_000;
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new().write(true).open(&seg).unwrap();
        f.write_all_at(&vec![0u8; 8192], torn_at + torn_len)
            .unwrap();
        drop(f);
        let (log, rec) = PartitionLog::open(dir.clone(), config(1 << 20))
            .await
            .unwrap();
        assert!(rec.truncated_bytes > 0, "the torn batch is cut");
        assert!(log.failure().is_none());
        assert_eq!(log.next_offset(), acked);
        let log = RefCell::new(log);
        let after = append_all(&log, &[(2, 10)]).await;
        let log = log.into_inner();
        read_back(&log, 0, after).await.unwrap();
        (acked, end, after)
    });
    assert!(end > acked);
    assert_eq!(after, acked + 2);
}

#[test]
fn a_flipped_byte_below_the_acknowledged_offsets_fails_the_log_and_keeps_its_offsets() {
    // Every byte of one batch header in the active segment, in turn.
    for at in 0..crate::batch::HEADER_LEN as u64 {
        let outcome = on_shard(move |dir| async move {
            let (log, _) = PartitionLog::open(dir.clone(), config(1 << 20))
                .await
                .unwrap();
            let log = RefCell::new(log);
            append_all(&log, &[(10, 100); 10]).await;
            let acked = append_all(&log, &[(10, 100); 10]).await;
            write_high_watermark(&dir, acked).unwrap();
            drop(log);
            let seg = segment_files(&dir).pop().unwrap();
            let damaged = position_of(&seg, 100);
            flip(&seg, damaged + at, 0x10);
            let len_before = std::fs::metadata(&seg).unwrap().len();
            let (log, _) = PartitionLog::open(dir.clone(), config(1 << 20))
                .await
                .unwrap();
            let file_len = (std::fs::metadata(&seg).unwrap().len(), len_before);
            // Nothing was cut, nothing is reused, what is before the damage still reads.
            let before = read_back(&log, 0, 100).await.unwrap();
            let at_damage = log.reader_for_offset(100).err().map(|e| e.to_string());
            let refused = log.failure().map(|f| f.contains("offsets 100..200"));
            (
                log.next_offset(),
                acked,
                before,
                at_damage,
                refused,
                file_len,
            )
        });
        let (next, acked, before, at_damage, refused, file_len) = outcome;
        assert_eq!(
            next, acked,
            "byte {at}: the log end stays at the acknowledged offset"
        );
        assert_eq!(before, 100, "byte {at}");
        let e = at_damage.unwrap_or_else(|| panic!("byte {at}: damage served"));
        assert!(e.contains("100..200"), "byte {at}: {e}");
        assert_eq!(refused, Some(true), "byte {at}");
        assert_eq!(
            file_len.0, file_len.1,
            "byte {at}: the file is left as it was"
        );
    }
}

#[test]
fn a_missing_middle_segment_is_a_hole_not_a_shorter_log() {
    let (start, before, hole, after, end, append) = on_shard(|dir| async move {
        let (log, _) = PartitionLog::open(dir.clone(), config(64 << 10))
            .await
            .unwrap();
        let log = RefCell::new(log);
        for _ in 0..12 {
            append_all(&log, &[(20, 200); 4]).await;
        }
        let end = log.borrow().next_offset();
        assert!(log.borrow().segment_count() >= 4);
        drop(log);
        let files = segment_files(&dir);
        let gone = &files[1];
        let from = crate::log::segment::parse_segment_file_name(
            gone.file_name().unwrap().to_str().unwrap(),
        )
        .unwrap();
        let to = crate::log::segment::parse_segment_file_name(
            files[2].file_name().unwrap().to_str().unwrap(),
        )
        .unwrap();
        std::fs::remove_file(gone).unwrap();
        let (log, _) = PartitionLog::open(dir.clone(), config(64 << 10))
            .await
            .unwrap();
        let before = read_back(&log, 0, from).await.unwrap();
        let hole = log.reader_for_offset(from).err().map(|e| e.to_string());
        let after = read_back(&log, to, log.next_offset()).await.unwrap();
        let mut bytes = batch(log.next_offset(), 1, 1);
        stamp_batch(&mut bytes, log.next_offset(), 1);
        let log = RefCell::new(log);
        let append = log
            .borrow_mut()
            .append_stamped(Bytes::from(bytes), 1)
            .is_err();
        let end_now = log.borrow().next_offset();
        ((from, to), before, hole, after, (end, end_now), append)
    });
    let (from, to) = start;
    assert_eq!(before, from);
    let hole = hole.expect("reads in the hole are refused");
    assert!(hole.contains(&format!("{from}..{to}")), "{hole}");
    assert_eq!(after, end.0);
    assert_eq!(end.0, end.1, "the log end does not move back");
    assert!(append, "a log with a hole takes no writes");
}

#[test]
fn a_shortened_closed_segment_is_a_hole_every_time_it_opens() {
    for with_index in [true, false] {
        let (holes_first, holes_second, end) = on_shard(move |dir| async move {
            let (log, _) = PartitionLog::open(dir.clone(), config(64 << 10))
                .await
                .unwrap();
            let log = RefCell::new(log);
            for _ in 0..8 {
                append_all(&log, &[(20, 200); 4]).await;
            }
            let end = log.borrow().next_offset();
            drop(log);
            let files = segment_files(&dir);
            let victim = &files[0];
            let len = std::fs::metadata(victim).unwrap().len();
            let f = std::fs::OpenOptions::new()
                .write(true)
                .open(victim)
                .unwrap();
            f.set_len(len / 2).unwrap();
            if !with_index {
                let _ = std::fs::remove_file(victim.with_extension("index"));
            }
            let (log, _) = PartitionLog::open(dir.clone(), config(64 << 10))
                .await
                .unwrap();
            let first = log.holes().to_vec();
            let e1 = log.next_offset();
            drop(log);
            let (log, _) = PartitionLog::open(dir.clone(), config(64 << 10))
                .await
                .unwrap();
            assert_eq!(log.next_offset(), e1);
            (first, log.holes().to_vec(), (end, e1))
        });
        assert_eq!(holes_first.len(), 1, "index {with_index}: {holes_first:?}");
        assert_eq!(
            holes_first, holes_second,
            "index {with_index}: a hole stays a hole"
        );
        assert_eq!(end.0, end.1, "index {with_index}");
    }
}

#[test]
fn a_flipped_header_byte_in_a_closed_segment_is_an_error_to_readers() {
    for at in [0u64, 3, 8, 12, 16, 23, 76, 79] {
        let (good, bad) = on_shard(move |dir| async move {
            let (log, _) = PartitionLog::open(dir.clone(), config(64 << 10))
                .await
                .unwrap();
            let log = RefCell::new(log);
            for _ in 0..6 {
                append_all(&log, &[(20, 200); 4]).await;
            }
            drop(log);
            let files = segment_files(&dir);
            // The second batch of the first (closed, indexed) segment.
            let victim = position_of(&files[0], 20);
            flip(&files[0], victim + at, 0x04);
            let (log, _) = PartitionLog::open(dir.clone(), config(64 << 10))
                .await
                .unwrap();
            let good = read_back(&log, 0, 20).await.unwrap();
            let reader = log.reader_for_offset(20).unwrap();
            let bad = reader.read(20, 1 << 20, log.next_offset()).await.err();
            let reader = log.reader_for_offset(25).unwrap();
            let walked = reader.file_range(25, 1 << 20, u64::MAX).await.err();
            (
                good,
                bad.zip(walked).map(|(a, b)| (a.to_string(), b.to_string())),
            )
        });
        assert_eq!(good, 20, "byte {at}");
        let (copy, sendfile) = bad.unwrap_or_else(|| panic!("byte {at}: damage served"));
        assert!(copy.contains("corrupt"), "byte {at}: {copy}");
        assert!(sendfile.contains("corrupt"), "byte {at}: {sendfile}");
    }
}

#[test]
fn acknowledged_offsets_missing_after_recovery_fail_the_log() {
    let (next, hole, appended) = on_shard(|dir| async move {
        let (log, _) = PartitionLog::open(dir.clone(), config(1 << 20))
            .await
            .unwrap();
        let log = RefCell::new(log);
        let acked = append_all(&log, &[(10, 100); 10]).await;
        write_high_watermark(&dir, acked).unwrap();
        drop(log);
        // The tail is cut off outside the broker (a bad copy, a crash of the disk cache).
        let seg = segment_files(&dir).pop().unwrap();
        let cut = position_of(&seg, 60);
        std::fs::OpenOptions::new()
            .write(true)
            .open(&seg)
            .unwrap()
            .set_len(cut)
            .unwrap();
        let (log, _) = PartitionLog::open(dir.clone(), config(1 << 20))
            .await
            .unwrap();
        let hole = log.holes().first().map(|h| (h.from, h.to));
        let mut bytes = batch(acked, 1, 1);
        stamp_batch(&mut bytes, acked, 1);
        let next = log.next_offset();
        let log = RefCell::new(log);
        let appended = log
            .borrow_mut()
            .append_stamped(Bytes::from(bytes), 1)
            .is_ok();
        (next, hole, appended)
    });
    assert_eq!(
        next, 100,
        "the log end stays past every acknowledged offset"
    );
    assert_eq!(hole, Some((60, 100)));
    assert!(!appended);
}

#[test]
fn unstamped_view_is_checked_like_stored_one() {
    // The header CRC makes a stored batch self-checking wherever it is read.
    let mut bytes = rkyv::util::AlignedVec::<16>::new();
    bytes.extend_from_slice(&batch(0, 3, 10));
    stamp_batch(&mut bytes, 77, 1);
    assert_eq!(
        BatchView::validate(&bytes).unwrap().header().base_offset,
        77
    );
    bytes[9] ^= 1;
    assert!(BatchView::validate(&bytes).is_err());
}

/// Where the whole batches at the start of a segment file end.
fn batches_end(path: &Path) -> u64 {
    let bytes = std::fs::read(path).unwrap();
    let mut at = 0usize;
    while let Ok(h) = BatchView::check_header(&bytes[at..]) {
        at += h.length as usize;
    }
    at as u64
}

#[test]
fn segments_are_preallocated_a_step_at_a_time_and_trimmed_when_they_close() {
    let (empty, grown, closed, reopened) = on_shard(|dir| async move {
        let cfg = config(1 << 20); // 256 KiB steps, 1 MiB segments
        let (log, _) = PartitionLog::open(dir.clone(), cfg.clone()).await.unwrap();
        let empty = std::fs::metadata(&segment_files(&dir)[0]).unwrap().len();
        let log = RefCell::new(log);
        // ~300 KiB: past the first step.
        append_all(&log, &[(10, 3000); 10]).await;
        let grown = std::fs::metadata(&segment_files(&dir)[0]).unwrap().len();
        // Past the segment size: it rolls, and the closed one keeps only its data.
        append_all(&log, &[(10, 3000); 30]).await;
        let files = segment_files(&dir);
        assert!(files.len() >= 2);
        let closed = (
            std::fs::metadata(&files[0]).unwrap().len(),
            batches_end(&files[0]),
        );
        let end = log.borrow().next_offset();
        drop(log);
        let (log, _) = PartitionLog::open(dir.clone(), cfg).await.unwrap();
        let last = segment_files(&dir).pop().unwrap();
        let reopened = (std::fs::metadata(&last).unwrap().len(), batches_end(&last));
        read_back(&log, 0, end).await.unwrap();
        (empty, grown, closed, reopened)
    });
    assert_eq!(empty, 256 << 10, "an empty segment holds one step");
    assert_eq!(
        grown,
        512 << 10,
        "the next step is taken as the writes reach it"
    );
    assert_eq!(closed.0, closed.1, "a closed segment is cut to its data");
    let (file, data) = reopened;
    assert!(
        file > data && file - data <= 256 << 10,
        "reopened: {file} for {data}"
    );
}

#[test]
fn a_segment_mixing_version_2_and_version_3_batches_reopens_and_reads_whole() {
    let read = on_shard(|dir| async move {
        let (log, _) = PartitionLog::open(dir.clone(), config(1 << 20))
            .await
            .unwrap();
        let log = RefCell::new(log);
        // Batches as a build before format version 3 wrote them, then as this one writes them.
        for round in 0..6u64 {
            let next = log.borrow().next_offset();
            let mut b = BatchBuilder::new();
            for i in 0..10 {
                let v = format!("r{}-", next + i);
                b.push(1_000 + (next + i) as i64, None, v.as_bytes(), &[], &[]);
            }
            let mut bytes = if round % 2 == 0 {
                b.build_v2()
            } else {
                b.build()
            }
            .unwrap()
            .to_vec();
            stamp_batch(&mut bytes, next, 5);
            log.borrow_mut()
                .append_stamped(Bytes::from(bytes), 10)
                .expect("append");
        }
        flush(&log).await.expect("flush");
        drop(log);
        // Reopened: the active segment is scanned batch by batch, both versions accepted.
        let (log, _) = PartitionLog::open(dir.clone(), config(1 << 20))
            .await
            .unwrap();
        assert_eq!(log.next_offset(), 60);
        read_back(&log, 0, 60).await.unwrap()
    });
    assert_eq!(read, 60);
}

/// Writes five batches, rewrites the one at offset 20 in place with `rewrite` (as another
/// build might have written it), reopens: the open error, and the segment's length before and
/// after the open.
fn reopen_with_batch_rewritten(rewrite: fn(&mut Vec<u8>)) -> (Option<String>, u64, u64) {
    on_shard(move |dir| async move {
        let (log, _) = PartitionLog::open(dir.clone(), config(1 << 20))
            .await
            .unwrap();
        let log = RefCell::new(log);
        append_all(&log, &[(10, 100); 5]).await;
        drop(log);
        let seg = segment_files(&dir).pop().unwrap();
        let at = position_of(&seg, 20);
        {
            use std::os::unix::fs::FileExt;
            let f = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(&seg)
                .unwrap();
            let mut head = [0u8; 4];
            f.read_exact_at(&mut head, at).unwrap();
            let len = u32::from_le_bytes(head) as usize;
            let mut b = vec![0u8; len];
            f.read_exact_at(&mut b, at).unwrap();
            rewrite(&mut b);
            f.write_all_at(&b, at).unwrap();
        }
        let before = std::fs::metadata(&seg).unwrap().len();
        let err = PartitionLog::open(dir.clone(), config(1 << 20))
            .await
            .err()
            .map(|e| e.to_string());
        (err, before, std::fs::metadata(&seg).unwrap().len())
    })
}

#[test]
fn a_batch_of_a_newer_format_version_is_refused_not_cut() {
    // The next version, both CRCs right.
    let (err, len_before, len_after) = reopen_with_batch_rewritten(|b| {
        b[26..28].copy_from_slice(&(crate::batch::VERSION + 1).to_le_bytes());
        let crc = crate::batch::body_checksum(b);
        b[4..8].copy_from_slice(&crc.to_le_bytes());
        stamp_batch(b, 20, 5);
    });
    let err = err.expect("refused");
    assert!(
        err.contains(&format!(
            "batch format version {}",
            crate::batch::VERSION + 1
        )),
        "{err}"
    );
    assert_eq!(len_before, len_after, "the file is untouched");
}

#[test]
fn a_segment_of_another_batch_format_version_is_refused_not_cut() {
    // Version 1, whose CRC covered bytes 24..length.
    let (err, len_before, len_after) = reopen_with_batch_rewritten(|b| {
        b[26..28].copy_from_slice(&1u16.to_le_bytes());
        let crc = crc32c::crc32c(&b[24..]);
        b[4..8].copy_from_slice(&crc.to_le_bytes());
    });
    let err = err.expect("refused");
    assert!(err.contains("batch format version 1"), "{err}");
    assert_eq!(len_before, len_after, "the file is untouched");
}

#[test]
fn a_followers_tail_is_cut_at_a_batch_boundary_across_segments_and_writes_resume_there() {
    let (cut, mid_batch_refused, after, segments) = on_shard(|dir| async move {
        let cfg = config(64 << 10);
        let (log, _) = PartitionLog::open(dir.clone(), cfg.clone()).await.unwrap();
        let log = RefCell::new(log);
        // 60 batches of 10 records of 1 KiB: about ten 64 KiB segments.
        let end = append_all(&log, &[(10, 1000); 60]).await;
        assert_eq!(end, 600);
        let before = segment_files(&dir).len();
        assert!(before > 5, "{before} segments");
        drop(log);
        // Inside a batch: refused, nothing cut.
        let mid = super::partition_log::truncate_tail(dir.clone(), cfg.clone(), 205).await;
        let mid_batch_refused = mid.is_err() && segment_files(&dir).len() == before;
        // At a boundary in an early segment: later segments go, that one is cut.
        let log = super::partition_log::truncate_tail(dir.clone(), cfg.clone(), 200)
            .await
            .expect("cut");
        let cut = log.next_offset();
        let segments = segment_files(&dir).len();
        let log = RefCell::new(log);
        let after = append_all(&log, &[(3, 10)]).await;
        let log = log.into_inner();
        read_back(&log, 0, after).await.unwrap();
        // And it opens the same again.
        drop(log);
        let (log, _) = PartitionLog::open(dir.clone(), cfg).await.unwrap();
        assert_eq!(log.next_offset(), after);
        (cut, mid_batch_refused, after, (before, segments))
    });
    assert_eq!(cut, 200);
    assert!(
        mid_batch_refused,
        "a cut inside a batch is refused and changes nothing"
    );
    assert_eq!(after, 203);
    assert!(
        segments.1 < segments.0,
        "later segments removed: {segments:?}"
    );
}

/// A write's pieces go out at once and may land in any order. When the first piece fails and
/// later ones land, the later batches sit past a gap in the file; none was acknowledged. The
/// reopen must cut them off: the same first batches appended again end exactly where the
/// stale ones began (on a page boundary, so the new write's zero padding does not cover
/// them), with the offsets they expect, and would otherwise be read back.
#[test]
fn later_pieces_of_a_failed_write_are_cut_at_reopen_not_read_back() {
    let (acked, failed, after, reopened, read) = on_shard(|dir| async move {
        let mut cfg = config(1 << 20);
        cfg.write_bytes = 16 << 10;
        cfg.writes_in_flight = 4;
        let (log, _) = PartitionLog::open(dir.clone(), cfg.clone()).await.unwrap();
        let log = RefCell::new(log);
        let acked = append_all(&log, &[(3, 700); 5]).await;
        write_high_watermark(&dir, acked).unwrap();
        // Ten one-record batches in one job of four 16 KiB pieces: the first five end on a
        // page boundary past the first piece, which fails; the others land.
        let start = log.borrow().size_bytes() as usize;
        let mut shapes = vec![(1u32, 5000usize); 4];
        let partial = start + 4 * one_record_len(5000);
        let need = (partial + 4096).div_ceil(4096) * 4096 - partial;
        let fifth = (0..need)
            .find(|&v| one_record_len(v) == need)
            .expect("a value length that ends the fifth batch on a page boundary");
        shapes.push((1, fifth));
        shapes.extend([(1, 5000); 5]);
        for &(records, value_len) in &shapes {
            let next = log.borrow().next_offset();
            let mut bytes = batch(next, records, value_len);
            stamp_batch(&mut bytes, next, 5);
            log.borrow_mut()
                .append_stamped(Bytes::from(bytes), records)
                .unwrap();
        }
        let key = dir.to_string_lossy().into_owned();
        faults::inject(&key, FileOp::Write, libc::EIO, 1);
        let failed = flush(&log).await.is_err();
        faults::clear(&key);
        drop(log);
        let (log, rec) = PartitionLog::open(dir.clone(), cfg.clone()).await.unwrap();
        assert!(log.failure().is_none(), "{:?}", log.failure());
        assert!(rec.truncated_bytes > 0, "the landed later pieces are found");
        assert_eq!(log.next_offset(), acked);
        // The first five again, byte for byte as before.
        let log = RefCell::new(log);
        let after = append_all(&log, &shapes[..5]).await;
        assert_eq!(
            log.borrow().size_bytes() % 4096,
            0,
            "ends on a page boundary"
        );
        drop(log);
        let (log, _) = PartitionLog::open(dir.clone(), cfg).await.unwrap();
        let read = read_back(&log, 0, log.next_offset()).await.unwrap();
        (acked, failed, after, log.next_offset(), read)
    });
    assert!(failed, "the flush reports the failed piece");
    assert_eq!(after, acked + 5);
    assert_eq!((reopened, read), (after, after), "nothing past the new end");
}

/// A roll writes a closed segment's index files without syncing them: a crash may lose or
/// tear them. Whatever is left of them, the reopen must scan the segment and keep every batch.
/// A log of 256 KiB segments holding 60 batches of 20 records (several closed segments),
/// written and closed: its config and end offset.
async fn closed_log(dir: &Path) -> (SegmentConfig, u64) {
    let cfg = config(256 << 10);
    let (log, _) = PartitionLog::open(dir.to_path_buf(), cfg.clone())
        .await
        .unwrap();
    let end = append_all(&RefCell::new(log), &[(20, 900); 60]).await;
    (cfg, end)
}

#[test]
fn lost_or_torn_index_files_of_closed_segments_make_the_open_scan_them() {
    type Damage = fn(&Path);
    let damages: [(&str, Damage); 5] = [
        ("offset index missing", |p| {
            std::fs::remove_file(p.with_extension("index")).unwrap()
        }),
        ("time index empty", |p| {
            std::fs::write(p.with_extension("timeindex"), b"").unwrap()
        }),
        ("offset index cut in half", |p| {
            let i = p.with_extension("index");
            let len = std::fs::metadata(&i).unwrap().len();
            std::fs::OpenOptions::new()
                .write(true)
                .open(&i)
                .unwrap()
                .set_len(len / 2)
                .unwrap();
        }),
        ("offset index zeroed", |p| {
            let i = p.with_extension("index");
            let len = std::fs::metadata(&i).unwrap().len() as usize;
            std::fs::write(&i, vec![0u8; len]).unwrap();
        }),
        ("time index byte flipped", |p| {
            flip(&p.with_extension("timeindex"), 3, 0x10)
        }),
    ];
    for (what, damage) in damages {
        let (end, closed, reopened) = on_shard(move |dir| async move {
            let (cfg, end) = closed_log(&dir).await;
            let segments = segment_files(&dir);
            let closed = segments.len() - 1;
            for s in &segments[..closed] {
                damage(s);
            }
            let (log, rec) = PartitionLog::open(dir.clone(), cfg).await.unwrap();
            assert!(log.failure().is_none(), "{:?}", log.failure());
            assert_eq!(rec.truncated_bytes, 0);
            let read = read_back(&log, 0, log.next_offset()).await.unwrap();
            (end, closed, (log.next_offset(), read))
        });
        assert!(closed >= 3, "{what}: {closed} closed segments");
        assert_eq!(reopened, (end, end), "{what}");
    }
}

#[test]
fn closed_segments_a_crash_left_uncut_reopen_whole_and_are_cut_to_their_data() {
    // A roll cuts the old segment without a sync: a crash can keep the cut from the disk and
    // leave the preallocated zeros after the data, with or without the index files written.
    let (end, closed, reopened, lens, again) = on_shard(|dir| async move {
        let (cfg, end) = closed_log(&dir).await;
        let segments = segment_files(&dir);
        let closed = segments.len() - 1;
        for (i, s) in segments[..closed].iter().enumerate() {
            let data = std::fs::metadata(s).unwrap().len();
            let f = std::fs::OpenOptions::new().write(true).open(s).unwrap();
            f.set_len(data + 200_000 + i as u64 * 4096).unwrap();
            if i % 2 == 0 {
                std::fs::remove_file(s.with_extension("index")).unwrap();
            }
        }
        let (log, rec) = PartitionLog::open(dir.clone(), cfg.clone()).await.unwrap();
        assert!(log.failure().is_none(), "{:?}", log.failure());
        assert!(log.holes().is_empty());
        assert_eq!(rec.truncated_bytes, 0);
        let reopened = (log.next_offset(), read_back(&log, 0, end).await.unwrap());
        drop(log);
        let lens: Vec<bool> = segments[..closed]
            .iter()
            .map(|s| {
                std::fs::metadata(s).unwrap().len() == batches_end(s)
                    && s.with_extension("index").exists()
            })
            .collect();
        let (log, _) = PartitionLog::open(dir.clone(), cfg).await.unwrap();
        let again = (
            log.failure().is_none(),
            read_back(&log, 0, end).await.unwrap(),
        );
        (end, closed, reopened, lens, again)
    });
    assert!(closed >= 3, "{closed} closed segments");
    assert_eq!(reopened, (end, end));
    assert!(
        lens.iter().all(|cut| *cut),
        "cut to their data, indexes written: {lens:?}"
    );
    assert_eq!(again, (true, end));
}

#[test]
fn zeros_where_a_closed_segments_last_batches_were_are_a_hole_not_a_cut() {
    // The zeros a lost roll's cut leaves are only taken as such when every offset of the
    // segment is there: zeroed batches (writes a power loss lost) leave a gap to the next
    // segment, which fails the log naming the offsets.
    let (end, failure, holes) = on_shard(|dir| async move {
        let (cfg, end) = closed_log(&dir).await;
        let first = &segment_files(&dir)[0];
        let data = std::fs::metadata(first).unwrap().len();
        let next_base: u64 = segment_files(&dir)[1]
            .file_stem()
            .unwrap()
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        // Zero its last two batches, as if never written, and leave the file longer.
        let lost_from = position_of(first, next_base - 40);
        let f = std::fs::OpenOptions::new().write(true).open(first).unwrap();
        use std::os::unix::fs::FileExt;
        f.write_all_at(&vec![0u8; (data - lost_from) as usize], lost_from)
            .unwrap();
        f.set_len(data + 100_000).unwrap();
        std::fs::remove_file(first.with_extension("index")).unwrap();
        let (log, _) = PartitionLog::open(dir.clone(), cfg).await.unwrap();
        let holes: Vec<(u64, u64)> = log.holes().iter().map(|h| (h.from, h.to)).collect();
        (end, log.failure().map(str::to_string), (holes, next_base))
    });
    assert!(end > 0);
    let (holes, next_base) = holes;
    assert_eq!(holes, vec![(next_base - 40, next_base)]);
    assert!(failure.is_some_and(|f| f.contains("missing or damaged")));
}

/// A checkpoint writes many partitions' high watermarks on several threads: each file gets
/// its own partition's offset, each result is its own entry's, and a failed sync fails only
/// its partition, which keeps the checkpoint it had.
#[test]
fn high_watermark_checkpoints_are_written_together_and_fail_one_by_one() {
    for (count, threads) in [(2, 4), (5, 1), (5, 3), (40, 4), (7, 64)] {
        let root = tempfile::tempdir().unwrap();
        let dirs: Vec<PathBuf> = (0..count)
            .map(|i| {
                let d = root.path().join(format!("hwc{count}t{threads}x{i}y"));
                std::fs::create_dir(&d).unwrap();
                d
            })
            .collect();
        let at = |base: u64| -> Vec<(PathBuf, u64)> {
            dirs.iter()
                .enumerate()
                .map(|(i, d)| (d.clone(), base + i as u64))
                .collect()
        };
        for r in write_high_watermarks(at(100), threads) {
            r.unwrap();
        }
        for (i, d) in dirs.iter().enumerate() {
            assert_eq!(
                read_high_watermark(d),
                Some(100 + i as u64),
                "{count}/{threads}: {i}"
            );
        }

        // One partition's new file never becomes durable; another's directory sync fails.
        let synced = format!("hwc{count}t{threads}x{}y", count / 2);
        let renamed = format!("hwc{count}t{threads}x{}y", count - 1);
        faults::inject(&synced, FileOp::Fdatasync, libc::EIO, 1);
        faults::inject(&renamed, FileOp::DirSync, libc::EIO, 1);
        let mut entries = at(200);
        // And one partition's directory is gone (its topic was deleted meanwhile).
        entries.push((root.path().join(format!("hwc{count}t{threads}gone")), 1));
        let results = write_high_watermarks(entries, threads);
        faults::clear(&synced);
        faults::clear(&renamed);
        assert_eq!(results.len(), count + 1);
        assert!(
            results[count].is_err(),
            "{count}/{threads}: the missing directory"
        );
        for (i, d) in dirs.iter().enumerate() {
            let hw = read_high_watermark(d);
            if i == count / 2 {
                assert!(
                    results[i].is_err(),
                    "{count}/{threads}: {i} failed its sync"
                );
                assert_eq!(
                    hw,
                    Some(100 + i as u64),
                    "{count}/{threads}: {i} kept its own"
                );
            } else if i == count - 1 {
                assert!(
                    results[i].is_err(),
                    "{count}/{threads}: {i} failed its dir sync"
                );
            } else {
                assert!(results[i].is_ok(), "{count}/{threads}: {i}");
                assert_eq!(hw, Some(200 + i as u64), "{count}/{threads}: {i}");
            }
        }
    }
}
