//! The group commit's pipeline under `--fsync always`: the next round writes while a round's
//! fdatasync is on, rounds acknowledge in order, and a failed sync fails the round written
//! behind it too. fdatasyncs are held (`faults::hold`) to order the events, with no timing.

use std::time::{Duration, Instant};

use rill_shards::file::faults::{self, FileOp};
use rill_shards::rt::sleep;

use super::tests::{open, produce, Fixture};
use crate::batch::{BatchBuilder, BatchView};
use crate::log::FsyncPolicy;
use crate::protocol::ErrorCode;
use crate::test_shard::on_shard;

type Ack = flume::Receiver<Result<(), ErrorCode>>;

/// Appends `n` records without waiting and schedules the round; the ack of its last record.
fn append(f: &Fixture, n: u32) -> (u64, Ack) {
    let mut b = BatchBuilder::new();
    for i in 0..n {
        b.push(1_000, None, format!("r{i}").as_bytes(), &[], &[]);
    }
    let bytes = b.build().expect("batch");
    let view = BatchView::validate(&bytes).expect("valid");
    let (_, next) = f.p.append(&[view], 1, &f.cache).expect("append");
    f.gc.mark_dirty(&f.p);
    (next, f.p.wait_for_ack(next - 1))
}

/// Waits (generous deadline, no fixed sleep decides anything) until every appended batch has
/// been written to the file.
async fn until_written(f: &Fixture, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while f.p.log.borrow().unwritten_bytes() > 0 {
        assert!(Instant::now() < deadline, "{what} was never written");
        sleep(Duration::from_millis(1)).await;
    }
}

fn pending(ack: &Ack) -> bool {
    matches!(ack.try_recv(), Err(flume::TryRecvError::Empty))
}

#[test]
fn the_next_round_writes_while_a_round_syncs_and_rounds_acknowledge_in_order() {
    let (before, during, after_first, after_second) = on_shard(|dir| async move {
        let f = open(&dir, FsyncPolicy::Always).await;
        let base = produce(&f, 3).await.expect("before");
        let hold = faults::hold(&dir.to_string_lossy(), FileOp::Fdatasync);
        let (end_a, ack_a) = append(&f, 4);
        until_written(&f, "round 1").await;
        // Round 1 now waits in its fdatasync; round 2 writes meanwhile.
        let (end_b, ack_b) = append(&f, 5);
        until_written(&f, "round 2, while round 1 synced").await;
        let during = (
            pending(&ack_a),
            pending(&ack_b),
            f.p.high_watermark() == base,
        );
        // Round 2's sync cannot start before round 1's ends: it is held too.
        let hold_2 = faults::hold(&dir.to_string_lossy(), FileOp::Fdatasync);
        drop(hold);
        let first = ack_a.recv_async().await.expect("ack a");
        let after_first = (first, f.p.high_watermark() == end_a, pending(&ack_b));
        drop(hold_2);
        let second = ack_b.recv_async().await.expect("ack b");
        let after_second = (second, f.p.high_watermark() == end_b);
        faults::clear(&dir.to_string_lossy());
        (base, during, after_first, after_second)
    });
    assert!(before > 0);
    assert_eq!(
        during,
        (true, true, true),
        "nothing acknowledged while syncs are held"
    );
    assert_eq!(
        after_first,
        (Ok(()), true, true),
        "round 1 acknowledged alone"
    );
    assert_eq!(after_second, (Ok(()), true));
}

#[test]
fn a_failed_sync_fails_the_round_written_behind_it() {
    let (hw_kept, a, b, failed) = on_shard(|dir| async move {
        let key = dir.to_string_lossy().to_string();
        let f = open(&dir, FsyncPolicy::Always).await;
        let base = produce(&f, 3).await.expect("before");
        let hold = faults::hold(&key, FileOp::Fdatasync);
        let (_, ack_a) = append(&f, 4);
        until_written(&f, "round 1").await;
        let (_, ack_b) = append(&f, 5);
        until_written(&f, "round 2, while round 1 synced").await;
        // Round 1's sync fails once it goes; round 2's own sync would succeed.
        faults::inject(&key, FileOp::Fdatasync, libc::EIO, 1);
        drop(hold);
        let a = ack_a.recv_async().await.expect("ack a");
        let b = ack_b.recv_async().await.expect("ack b");
        let hw_kept = f.p.high_watermark() == base;
        let failed = f.p.failure().is_some();
        faults::clear(&key);
        (hw_kept, a, b, failed)
    });
    assert_eq!(a, Err(ErrorCode::KafkaStorageError));
    assert_eq!(
        b,
        Err(ErrorCode::KafkaStorageError),
        "a round behind a failed sync is never acknowledged"
    );
    assert!(hw_kept, "the high watermark stays below the failed round");
    assert!(failed);
}
