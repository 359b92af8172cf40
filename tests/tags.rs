//! Broker-side tag filtering end to end: a filtered consumer (client and CLI) gets exactly the
//! matching records, offsets unchanged, across segments, from the tail cache and from files;
//! a filtered long poll answers for matching data only.

use std::time::{Duration, Instant};

use rill::batch::{BatchIter, TagFilter};
use rill::client::{
    ClientConfig, Connection, Consumer, ConsumerConfig, ConsumerRecord, ProducerRecord, StartFrom,
};
use rill::protocol::messages::{
    FetchPartition, FetchRequest, FilteredFetchRequest, FilteredFetchResponse,
};
use rill::protocol::ApiKey;
use rill_testkit::{producer, TestBroker, DEADLINE};

/// The tags of record `i`: runs of 50 records share one pattern (so whole batches hold no
/// `a`, and the summary skips them), the patterns mix a, b, c, a+b and untagged.
fn tags_of(i: usize) -> Vec<String> {
    let t: &[&str] = match (i / 50) % 6 {
        0 => &["a"],
        1 => &["b"],
        2 => &["c"],
        3 => &[],
        _ if i.is_multiple_of(3) => &["a", "b"],
        _ if i % 3 == 1 => &["c"],
        _ => &[],
    };
    t.iter().map(|s| s.to_string()).collect()
}

const RECORDS: usize = 3_000;

/// Produces [`RECORDS`] records of ~200 bytes (value `v{i}`) to partition 0 of `topic`, in
/// batches of a few KiB, and returns their offsets.
fn produce_tagged(b: &TestBroker, topic: &str) -> Vec<u64> {
    let p = producer(b, 4 << 10);
    let pad = "x".repeat(200);
    let tags: Vec<Vec<String>> = (0..RECORDS).map(tags_of).collect();
    let values: Vec<String> = (0..RECORDS).map(|i| format!("v{i} {pad}")).collect();
    let reports: Vec<_> = (0..RECORDS)
        .map(|i| {
            p.send(
                ProducerRecord::new(topic, values[i].as_bytes())
                    .partition(0)
                    .tags(&tags[i]),
            )
            .unwrap()
        })
        .collect();
    p.flush().unwrap();
    reports
        .into_iter()
        .map(|r| {
            r.wait()
                .unwrap()
                .offset
                .expect("acks=all reports the offset")
        })
        .collect()
}

fn filtered_consumer(b: &TestBroker, topic: &str, tags: &[&str], all: bool) -> Consumer {
    let cfg = ConsumerConfig {
        tags: TagFilter::new(tags.iter().map(|t| t.to_string()).collect(), all),
        fetch_max_wait: Duration::from_millis(100),
        // Small fetches: many responses, each ending on a skipped or a matching batch.
        partition_max_bytes: 16 << 10,
        ..ConsumerConfig::default()
    };
    let mut c = Consumer::new(ClientConfig::new(b.bootstrap()), cfg).unwrap();
    c.assign(topic, None, StartFrom::Beginning).unwrap();
    c
}

/// (offset, value index) of everything a consumer reads until its position reaches `end`.
fn read_to(c: &mut Consumer, topic: &str, end: u64) -> Vec<(u64, usize)> {
    let start = Instant::now();
    let mut got = Vec::new();
    while c.position(topic, 0).unwrap_or(0) < end {
        let records = c.poll(Duration::from_millis(200)).unwrap();
        got.extend(
            records
                .iter()
                .map(|r: ConsumerRecord<'_>| (r.offset(), index_of(&r))),
        );
        assert!(
            start.elapsed() < DEADLINE,
            "stuck at {:?}",
            c.position(topic, 0)
        );
    }
    got
}

fn index_of(r: &ConsumerRecord<'_>) -> usize {
    let v = std::str::from_utf8(r.value().unwrap()).unwrap();
    v[1..v.find(' ').unwrap()].parse().unwrap()
}

fn filtered_consumers_get_exactly_the_matching_records(extra: &[&str]) {
    let mut flags = vec!["--segment-bytes", "65536"];
    flags.extend_from_slice(extra);
    let b = TestBroker::start(1, &flags);
    b.client().create_topic("tagged", 1, 1, vec![]).unwrap();
    let offsets = produce_tagged(&b, "tagged");
    let end = offsets.last().unwrap() + 1;
    let segments =
        rill_testkit::segment_files(&rill_testkit::partition_dir(&b.data_dir(), "tagged", 0));
    assert!(segments.len() > 5, "{} segments", segments.len());

    let expect = |f: &dyn Fn(&[String]) -> bool| -> Vec<(u64, usize)> {
        (0..RECORDS)
            .filter(|&i| f(&tags_of(i)))
            .map(|i| (offsets[i], i))
            .collect()
    };
    let has = |t: &[String], x: &str| t.iter().any(|y| y == x);

    let mut any_a = filtered_consumer(&b, "tagged", &["a"], false);
    assert_eq!(read_to(&mut any_a, "tagged", end), expect(&|t| has(t, "a")));
    let mut a_or_c = filtered_consumer(&b, "tagged", &["a", "c"], false);
    assert_eq!(
        read_to(&mut a_or_c, "tagged", end),
        expect(&|t| has(t, "a") || has(t, "c"))
    );
    let mut a_and_b = filtered_consumer(&b, "tagged", &["a", "b"], true);
    assert_eq!(
        read_to(&mut a_and_b, "tagged", end),
        expect(&|t| has(t, "a") && has(t, "b"))
    );
    let mut none = filtered_consumer(&b, "tagged", &["zzz"], false);
    assert_eq!(read_to(&mut none, "tagged", end), Vec::new());

    // The CLI: `--tags a` prints the a records' values in offset order.
    let want: Vec<String> = expect(&|t| has(t, "a"))
        .iter()
        .map(|&(_, i)| format!("v{i} {}", "x".repeat(200)))
        .collect();
    let n = want.len().to_string();
    let out = b.cli(
        &[
            "consume",
            "tagged",
            "--tags",
            "a",
            "-n",
            &n,
            "--timeout-ms",
            "10000",
        ],
        None,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed: Vec<String> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    assert_eq!(printed, want);
    let out = b.cli(
        &["consume", "tagged", "--tags-all", "--timeout-ms", "100"],
        None,
    );
    assert!(!out.status.success());
}

#[test]
fn filtered_fetch_from_the_tail_cache() {
    filtered_consumers_get_exactly_the_matching_records(&[]);
}

#[test]
fn filtered_fetch_from_segment_files() {
    filtered_consumers_get_exactly_the_matching_records(&["--tail-cache-bytes", "0"]);
}

/// Each fetch scans at most 8 KiB (a couple of batches) and answers where it stopped, often
/// with no records: the consumer moves on from there and still gets every match.
#[test]
fn filtered_fetch_in_scan_limited_steps() {
    filtered_consumers_get_exactly_the_matching_records(&["--max-filter-scan-bytes", "8192"]);
}

/// A raw FilteredFetch long poll (30 s) at the end of the log: non-matching records arriving
/// do not answer it (if they did, it would answer with no records); a matching one does,
/// with exactly that record and the position past it.
#[test]
fn a_filtered_long_poll_answers_for_matching_data_only() {
    let b = TestBroker::start(1, &[]);
    b.client().create_topic("poll", 1, 1, vec![]).unwrap();
    let p = producer(&b, 1 << 10);
    let send = |v: &str, tags: &[String]| {
        let r = p
            .send(
                ProducerRecord::new("poll", v.as_bytes())
                    .partition(0)
                    .tags(tags),
            )
            .unwrap();
        p.flush().unwrap();
        r.wait().unwrap().offset.unwrap()
    };
    let b_tag = vec!["b".to_string()];
    send("before", &b_tag);

    let addr = b.bootstrap().parse().unwrap();
    let poller = std::thread::spawn(move || {
        let mut conn = Connection::connect(addr, Duration::from_secs(5), "t", None, None).unwrap();
        conn.set_read_timeout(Some(DEADLINE));
        let req = FilteredFetchRequest {
            fetch: FetchRequest {
                max_wait_ms: 30_000,
                min_bytes: 1,
                max_bytes: 1 << 20,
                partitions: vec![FetchPartition {
                    topic: "poll".into(),
                    partition: 0,
                    offset: 0,
                    max_bytes: 1 << 20,
                }],
            },
            tags: vec!["a".into()],
            match_all: false,
        };
        let (resp, frame): (FilteredFetchResponse, _) =
            conn.call(ApiKey::FilteredFetch, &req, &[]).unwrap();
        let r = &resp.partitions[0];
        assert_eq!(r.result.error_code, 0, "{}", r.result.message);
        let payload = frame
            .payload_slice(r.result.payload_offset, r.result.payload_len)
            .unwrap()
            .to_vec();
        (r.next_offset, payload)
    });
    // Non-matching records while the poll waits, in batches of their own.
    for i in 0..10 {
        send(&format!("skip{i}"), &b_tag);
        send(&format!("none{i}"), &[]);
    }
    let a_at = send("match", &["a".to_string(), "b".to_string()]);
    let (next, payload) = poller.join().unwrap();
    let aligned = rill::batch::aligned16(&payload);
    let got: Vec<(u64, Vec<u8>)> = BatchIter::new(&aligned)
        .flat_map(|b| {
            let b = b.unwrap();
            b.records()
                .unwrap()
                .map(|r| (r.offset, r.value().unwrap().to_vec()))
                .collect::<Vec<_>>()
        })
        .collect();
    assert_eq!(got, vec![(a_at, b"match".to_vec())]);
    assert_eq!(next, a_at + 1);
}

/// A filtered group member commits what it printed: the next member of the group resumes
/// after it and gets only the newer matching records.
#[test]
fn a_filtered_group_consumer_resumes_from_its_commits() {
    let b = TestBroker::start(1, &["--group-initial-rebalance-delay-ms", "0"]);
    b.client().create_topic("grouped", 1, 1, vec![]).unwrap();
    let produce = |values: &str, tags: &str| {
        let out = b.cli(&["produce", "grouped", "--tags", tags], Some(values));
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    produce("a1\na2\n", "a");
    produce("b1\nb2\nb3\n", "b");
    produce("a3\n", "a");
    produce("b4\n", "b");
    let consume = |n: &str| {
        let out = b.cli(
            &[
                "consume",
                "grouped",
                "--group",
                "g",
                "--tags",
                "a",
                "-n",
                n,
                "--timeout-ms",
                "20000",
            ],
            None,
        );
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    assert_eq!(consume("3"), "a1\na2\na3\n");
    produce("b5\n", "b");
    produce("a4\n", "a,b");
    assert_eq!(consume("1"), "a4\n");
}
