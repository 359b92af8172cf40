//! Delayed messages end to end: they appear at their due time, not before, in due order;
//! pending ones survive SIGKILL and each fires exactly once after the restart; bad delays
//! are refused.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use rill::client::{ConsumedRecord, Consumer, ProducerRecord, StartFrom};
use rill_testkit::{consumer, TestBroker, DEADLINE};

fn now_ms() -> i64 {
    rill::clock::now_ms()
}

/// Sends `value` to `topic`/`partition`, appended at `at`.
fn send_at(c: &mut rill::client::Client, topic: &str, partition: u32, value: &str, at: i64) {
    let r = ProducerRecord::new(topic, value.as_bytes()).partition(partition);
    c.produce_delayed(&r, at).unwrap();
}

/// Polls until `n` records came, noting when each was first seen.
fn read_n(c: &mut Consumer, n: usize) -> Vec<(ConsumedRecord, i64)> {
    let start = Instant::now();
    let mut got = Vec::new();
    while got.len() < n {
        let records = c.poll(Duration::from_millis(50)).unwrap();
        let seen = now_ms();
        got.extend(records.to_owned().into_iter().map(|r| (r, seen)));
        assert!(start.elapsed() < DEADLINE, "only {} of {n}", got.len());
    }
    got
}

fn value(r: &ConsumedRecord) -> String {
    String::from_utf8(r.value.clone().unwrap()).unwrap()
}

#[test]
fn delayed_messages_appear_in_due_order_and_never_early() {
    let b = TestBroker::start(2, &[]);
    let mut client = b.client();
    client.create_topic("later", 2, 1, vec![]).unwrap();
    let mut c = consumer(&b, "later", StartFrom::Beginning);
    // Every message is held before the first is due (a message accepted past its due time
    // is appended at once, behind earlier ones).
    let base = now_ms() + 4_000;
    let mut due: BTreeMap<String, i64> = BTreeMap::new();
    for i in 0..40 {
        // Distinct due times, sent out of order (17 and 40 are coprime: a permutation).
        let at = base + (i * 17 % 40) * 50;
        let v = format!("m{i}");
        send_at(&mut client, "later", (i % 2) as u32, &v, at);
        due.insert(v, at);
    }
    assert!(now_ms() < base, "sending took longer than the margin");
    let got = read_n(&mut c, 40);
    for (r, seen) in &got {
        let at = due[&value(r)];
        assert!(*seen >= at, "{} seen at {seen}, due {at}", value(r));
    }
    for p in 0..2u32 {
        let mut mine: Vec<&ConsumedRecord> = got
            .iter()
            .map(|(r, _)| r)
            .filter(|r| r.partition == p)
            .collect();
        mine.sort_by_key(|r| r.offset);
        let dues: Vec<i64> = mine.iter().map(|r| due[&value(r)]).collect();
        let mut sorted = dues.clone();
        sorted.sort();
        assert_eq!(dues, sorted, "partition {p}: offsets not in due order");
        assert_eq!(mine.len(), 20);
    }
    // Nothing more: each fired once.
    assert!(c.poll(Duration::from_millis(300)).unwrap().is_empty());
}

/// Pending messages, then SIGKILL in the middle of their firing; after the restart every
/// message is in its partition exactly once.
#[test]
fn pending_delays_fire_exactly_once_across_sigkill() {
    let mut b = TestBroker::start(1, &[]);
    let mut client = b.client();
    client.create_topic("crash", 1, 1, vec![]).unwrap();
    let base = now_ms();
    let n = 300;
    for i in 0..n {
        // Due from 0.5 s to 3.5 s from now: some fire before the kill, some after.
        send_at(
            &mut client,
            "crash",
            0,
            &format!("m{i}"),
            base + 500 + i * 10,
        );
    }
    let mut c = consumer(&b, "crash", StartFrom::Beginning);
    let before = read_n(&mut c, 20);
    drop(c);
    b.kill();
    b.start_again();
    let mut c = consumer(&b, "crash", StartFrom::Beginning);
    let got = read_n(&mut c, n as usize);
    // Past the last due time, nothing more comes.
    while now_ms() < base + 500 + n * 10 + 500 {
        assert!(c.poll(Duration::from_millis(100)).unwrap().is_empty());
    }
    let mut values: Vec<String> = got.iter().map(|(r, _)| value(r)).collect();
    let offsets: Vec<u64> = got.iter().map(|(r, _)| r.offset).collect();
    assert_eq!(offsets, (0..n as u64).collect::<Vec<_>>());
    values.sort();
    let mut want: Vec<String> = (0..n).map(|i| format!("m{i}")).collect();
    want.sort();
    assert_eq!(values, want, "each exactly once");
    assert!(before.len() >= 20);
}

/// Far more pending messages than memory holds (`--delay-memory-bytes` for 20): the rest
/// wait on disk only and are paged in as their time nears. Sent in shuffled due order,
/// the broker SIGKILLed while they fire: each appears once, never early, in due order.
#[test]
fn pending_messages_past_the_memory_bound_fire_in_due_order_once_across_sigkill() {
    let mut b = TestBroker::start(1, &["--delay-memory-bytes", "5120"]);
    b.client().create_topic("paged", 1, 1, vec![]).unwrap();
    let n = 300i64;
    let base = now_ms() + 10_000;
    // 7 and 300 are coprime: every slot once, sent out of order, 10 ms apart.
    let due: BTreeMap<String, i64> = (0..n)
        .map(|i| (format!("m{i}"), base + (i * 7 % n) * 10))
        .collect();
    // From four clients at once: their accepts share syncs (group commit).
    std::thread::scope(|scope| {
        for t in 0..4 {
            let (b, due) = (&b, &due);
            scope.spawn(move || {
                let mut client = b.client();
                for (v, at) in due.iter().skip(t).step_by(4) {
                    send_at(&mut client, "paged", 0, v, *at);
                }
            });
        }
    });
    assert!(now_ms() < base, "sending took longer than the margin");
    let mut c = consumer(&b, "paged", StartFrom::Beginning);
    let before = read_n(&mut c, 40);
    drop(c);
    b.kill();
    b.start_again();
    // At the restart most are still pending, and memory holds at most 20 of them.
    let log = b.log_text();
    let line = log
        .lines()
        .rfind(|l| l.contains("delayed messages pending"))
        .unwrap_or_else(|| panic!("no pending line: {log}"));
    let in_memory: usize = line
        .split(", ")
        .nth(1)
        .and_then(|t| t.split(' ').next())
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("{line}"));
    assert!(in_memory <= 20, "{line}");
    let mut c = consumer(&b, "paged", StartFrom::Beginning);
    let got = read_n(&mut c, n as usize);
    while now_ms() < base + n * 10 + 500 {
        assert!(c.poll(Duration::from_millis(100)).unwrap().is_empty());
    }
    let offsets: Vec<u64> = got.iter().map(|(r, _)| r.offset).collect();
    assert_eq!(
        offsets,
        (0..n as u64).collect::<Vec<_>>(),
        "each exactly once"
    );
    let dues: Vec<i64> = got.iter().map(|(r, _)| due[&value(r)]).collect();
    let mut sorted = dues.clone();
    sorted.sort();
    assert_eq!(dues, sorted, "offsets in due order");
    for (r, seen) in before.iter().chain(&got) {
        assert!(*seen >= due[&value(r)], "{} early", value(r));
    }
}

#[test]
fn bad_delays_are_refused_with_one_line() {
    let b = TestBroker::start(1, &["--max-delay-ms", "1000"]);
    b.client().create_topic("bad", 1, 1, vec![]).unwrap();
    for (delay, says) in [("-5", "cannot be negative"), ("5000", "--max-delay-ms")] {
        let out = b.cli(&["produce", "bad", "--delay-ms", delay], Some("x\n"));
        assert!(!out.status.success());
        let err = String::from_utf8(out.stderr).unwrap();
        assert!(err.contains(says), "{err}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
    }
    // The CLI's accepted delay works.
    let out = b.cli(&["produce", "bad", "--delay-ms", "200"], Some("y\n"));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut c = consumer(&b, "bad", StartFrom::Beginning);
    let got = read_n(&mut c, 1);
    assert_eq!(value(&got[0].0), "y");
    assert_eq!(got[0].0.offset, 0, "the refused ones were never appended");
}

#[test]
fn a_shard_holds_at_most_max_delayed_per_shard_pending() {
    let b = TestBroker::start(1, &["--max-delayed-per-shard", "1"]);
    b.client().create_topic("full", 1, 1, vec![]).unwrap();
    let out = b.cli(&["produce", "full", "--delay-ms", "600000"], Some("y\n"));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = b.cli(&["produce", "full", "--delay-ms", "1"], Some("z\n"));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(!out.status.success(), "accepted past the bound");
    assert!(err.contains("--max-delayed-per-shard"), "{err}");
}

/// The crash windows of firing, made by hand on a stopped broker's delay store: after the
/// append but before the *fired* mark (the marked batch is found: not appended again), and
/// after the *firing* mark but before the append (appended once).
#[test]
fn a_crash_on_either_side_of_the_append_fires_once() {
    let mut b = TestBroker::start(1, &[]);
    let mut client = b.client();
    client.create_topic("window", 1, 1, vec![]).unwrap();
    // Keeps the store's files from being emptied when the others have fired.
    send_at(&mut client, "window", 0, "far", now_ms() + 600_000);
    send_at(&mut client, "window", 0, "first", now_ms() + 100);
    let mut c = consumer(&b, "window", StartFrom::Beginning);
    assert_eq!(value(&read_n(&mut c, 1)[0].0), "first");
    drop(c);
    b.terminate();
    let store = b.data_dir().join("delay").join("0");
    // Forget "first"'s *fired* mark (the last 24-byte mark): only *firing* is left.
    let fired = store.join("fired.log");
    let len = std::fs::metadata(&fired).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&fired)
        .unwrap()
        .set_len(len - 24)
        .unwrap();
    b.start_again();

    let mut client = b.client();
    send_at(&mut client, "window", 0, "second", now_ms() + 3_000);
    b.terminate();
    // "second" (id 2) was about to be appended at log end 1 when the broker stopped.
    let (mut s, pending) = rill::delay::store::DelayStore::open(&store).unwrap();
    let second = pending
        .iter()
        .find(|e| e.due_ms > now_ms() && e.due_ms < now_ms() + 60_000);
    s.mark_firing(second.expect("second pending").id, 1)
        .unwrap();
    drop(s);
    b.start_again();

    let mut client = b.client();
    send_at(&mut client, "window", 0, "last", now_ms() + 3_500);
    let mut c = consumer(&b, "window", StartFrom::Beginning);
    let got: Vec<String> = read_n(&mut c, 3).iter().map(|(r, _)| value(r)).collect();
    // Fired in due order: a second "first" or "second" would come before "last".
    assert_eq!(got, vec!["first", "second", "last"]);
}
