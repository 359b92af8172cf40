//! The native transactional producer (issue 17): commits and aborts as read_committed and
//! read_uncommitted consumers see them, zombie fencing, an abortable failure, `rill produce
//! --transactional-id`, and a read-process-write pipeline SIGKILLed again and again, with
//! brokers of its RF 3 cluster SIGKILLed under it, that still writes exactly f(input).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rill::client::{
    Client, ClientConfig, ClientError, Consumer, ConsumerConfig, GroupMetadata, Isolation,
    OffsetAndMetadata, Offsets, Producer, ProducerConfig, ProducerRecord, RecordMetadata,
    StartFrom, TransactionConfig, TransactionalProducer,
};
use rill::protocol::ErrorCode;
use rill_testkit::{create_topic_rf3, Rng, TestBroker, TestCluster, DEADLINE, FAST_FENCING};

fn txn_producer(bootstrap: &str, id: &str, timeout: Duration) -> TransactionalProducer {
    let cfg = ProducerConfig {
        linger: Duration::from_millis(1),
        ..ProducerConfig::default()
    };
    let txn = TransactionConfig {
        transactional_id: id.to_string(),
        transaction_timeout: timeout,
    };
    TransactionalProducer::init(ClientConfig::new(bootstrap), cfg, txn).expect("init")
}

/// Every record of `topic` read with `isolation` up to the log end as it is now (no
/// transaction may be open on it): (partition, offset) -> value.
fn read_all(bootstrap: &str, topic: &str, isolation: Isolation) -> BTreeMap<(u32, u64), String> {
    let mut client = Client::connect(ClientConfig::new(bootstrap)).expect("client");
    let partitions = client.wait_for_topic(topic, DEADLINE).expect("topic");
    let ends: Vec<u64> = (0..partitions)
        .map(|p| {
            client
                .list_offset(topic, p, rill::protocol::messages::LATEST_TIMESTAMP)
                .expect("list offsets")
                .expect("an end")
        })
        .collect();
    let cfg = ConsumerConfig {
        isolation,
        fetch_max_wait: Duration::from_millis(100),
        ..ConsumerConfig::default()
    };
    let mut c = Consumer::new(ClientConfig::new(bootstrap), cfg).expect("consumer");
    c.assign(topic, None, StartFrom::Beginning).expect("assign");
    let mut out = BTreeMap::new();
    let start = Instant::now();
    loop {
        let records = c.poll(Duration::from_millis(200)).expect("poll");
        let n = records.count();
        for r in records.iter() {
            let v = String::from_utf8(r.value().expect("a value").to_vec()).unwrap();
            assert!(
                out.insert((r.partition, r.offset()), v).is_none(),
                "offset handed out twice"
            );
        }
        let done =
            (0..partitions).all(|p| c.position(topic, p).is_some_and(|o| o >= ends[p as usize]));
        if n == 0 && done {
            return out;
        }
        assert!(
            start.elapsed() < DEADLINE,
            "{isolation:?}: {topic} not read to {ends:?} in time"
        );
    }
}

fn sorted_values(m: &BTreeMap<(u32, u64), String>) -> Vec<String> {
    let mut v: Vec<String> = m.values().cloned().collect();
    v.sort();
    v
}

/// `got` is `want`, or the failure names what is missing, extra and out of place (briefly:
/// the lists run to thousands).
fn assert_same(got: &[String], want: &[String], what: &str) {
    if got == want {
        return;
    }
    let count = |v: &[String]| {
        let mut m: BTreeMap<String, usize> = BTreeMap::new();
        for x in v {
            *m.entry(x.clone()).or_default() += 1;
        }
        m
    };
    let (g, w) = (count(got), count(want));
    let missing: Vec<_> = w.keys().filter(|k| !g.contains_key(*k)).take(10).collect();
    let twice: Vec<_> = g
        .iter()
        .filter(|(_, n)| **n > 1)
        .map(|(k, _)| k)
        .take(10)
        .collect();
    let extra: Vec<_> = g.keys().filter(|k| !w.contains_key(*k)).take(10).collect();
    let first_diff = got.iter().zip(want).position(|(a, b)| a != b);
    panic!(
        "{what}: {} records, {} wanted; missing {missing:?}, twice {twice:?}, extra {extra:?}, \
         first difference at {first_diff:?}",
        got.len(),
        want.len()
    );
}

fn names(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}-{i:05}")).collect()
}

/// Sends `values` keyed by themselves (spread over the partitions) in the open
/// transaction; their delivery reports.
fn send_all(
    p: &TransactionalProducer,
    topic: &str,
    values: &[String],
) -> Vec<(String, RecordMetadata)> {
    let reports: Vec<_> = values
        .iter()
        .map(|v| {
            let r = ProducerRecord::new(topic, v.as_bytes()).key(v.as_bytes());
            (v.clone(), p.send(r).expect("send"))
        })
        .collect();
    p.flush().expect("flush");
    reports
        .into_iter()
        .map(|(v, r)| (v, r.wait().expect("delivered")))
        .collect()
}

#[test]
fn commits_are_seen_by_read_committed_and_aborts_only_by_read_uncommitted() {
    let b = TestBroker::start(2, &[]);
    b.client().create_topic("tp", 4, 1, vec![]).expect("create");
    let p = txn_producer(&b.bootstrap(), "tx-native", Duration::from_secs(60));
    // Outside a transaction nothing is sent.
    let refused = p.send(ProducerRecord::new("tp", b"early"));
    assert!(
        matches!(refused, Err(ClientError::Invalid(_))),
        "{:?}",
        refused.err()
    );
    assert!(p.commit().is_err(), "commit without a transaction");

    p.begin().expect("begin");
    assert!(p.begin().is_err(), "a second begin while one is open");
    let first = send_all(&p, "tp", &names("c1", 300));
    p.commit().expect("commit");
    p.begin().expect("begin");
    let aborted = send_all(&p, "tp", &names("ab", 200));
    p.abort().expect("abort");
    p.begin().expect("begin");
    let second = send_all(&p, "tp", &names("c2", 100));
    p.commit().expect("commit");
    // An empty transaction commits too (nothing reaches the coordinator).
    p.begin().expect("begin");
    p.commit().expect("empty commit");

    let bs = b.bootstrap();
    let committed = read_all(&bs, "tp", Isolation::ReadCommitted);
    let mut want: Vec<String> = names("c1", 300);
    want.extend(names("c2", 100));
    want.sort();
    assert_same(&sorted_values(&committed), &want, "read_committed");
    let everything = read_all(&bs, "tp", Isolation::ReadUncommitted);
    want.extend(names("ab", 200));
    want.sort();
    assert_same(&sorted_values(&everything), &want, "read_uncommitted");
    // Every delivery report names where its record is.
    for (v, md) in first.iter().chain(&aborted).chain(&second) {
        let at = (md.partition, md.offset.expect("an offset"));
        assert_eq!(everything.get(&at), Some(v), "report {at:?}");
    }
}

#[test]
fn the_next_transaction_starts_while_the_last_ones_markers_are_written_without_a_retry() {
    use rill::protocol::messages::{
        AddPartitionsToTxnRequest, EndTxnRequest, GroupStatusResponse, TxnMarkerPartition,
    };
    use rill::protocol::ApiKey;
    let b = TestBroker::start(1, &[]);
    let mut c = b.client();
    c.create_topic("held", 2, 1, vec![]).expect("create");
    // The transaction state topic is created on first use.
    let start = Instant::now();
    let (at, (pid, epoch)) = loop {
        let r = c.find_txn_coordinator("tx-held").and_then(|at| {
            let id = c.init_transactional_producer_id(at, "tx-held", 60_000, None)?;
            Ok((at, id))
        });
        match r {
            Ok(v) => break v,
            Err(e) if e.is_retriable() && start.elapsed() < DEADLINE => {
                std::thread::sleep(Duration::from_millis(50))
            }
            Err(e) => panic!("init: {e}"),
        }
    };
    let add = AddPartitionsToTxnRequest {
        transactional_id: "tx-held".into(),
        producer_id: pid,
        producer_epoch: epoch,
        partitions: (0..2)
            .map(|p| TxnMarkerPartition {
                topic: "held".into(),
                partition: p,
            })
            .collect(),
    };
    let end = EndTxnRequest {
        transactional_id: "tx-held".into(),
        producer_id: pid,
        producer_epoch: epoch,
        commit: true,
    };
    // Each AddPartitionsToTxn right after an EndTxn finds the last transaction writing its
    // markers: the coordinator holds it until they are written instead of answering
    // CONCURRENT_TRANSACTIONS (--transaction-concurrent-wait-ms).
    for round in 0..20 {
        let (r, _): (GroupStatusResponse, _) = c
            .call(at, ApiKey::AddPartitionsToTxn, &add, &[])
            .expect("AddPartitionsToTxn");
        assert_eq!(
            ErrorCode::from_code(r.error_code),
            ErrorCode::None,
            "round {round}: {}",
            r.message
        );
        let (r, _): (GroupStatusResponse, _) =
            c.call(at, ApiKey::EndTxn, &end, &[]).expect("EndTxn");
        assert_eq!(r.error_code, 0, "round {round}: {}", r.message);
    }
}

#[test]
fn a_new_instance_fences_the_old_one_and_aborts_its_transaction() {
    let b = TestBroker::start(1, &[]);
    b.client().create_topic("tf", 2, 1, vec![]).expect("create");
    let bs = b.bootstrap();
    let old = txn_producer(&bs, "tx-zombie", Duration::from_secs(60));
    old.begin().expect("begin");
    send_all(&old, "tf", &names("old", 50));
    let old_id = old.producer_id();
    // The new instance's init aborts the open transaction and fences the old epoch.
    let new = txn_producer(&bs, "tx-zombie", Duration::from_secs(60));
    let new_id = new.producer_id();
    assert_eq!(new_id.0, old_id.0, "same producer id");
    assert!(
        new_id.1 > old_id.1,
        "a newer epoch: {old_id:?} -> {new_id:?}"
    );
    new.begin().expect("begin");
    send_all(&new, "tf", &names("new", 30));
    new.commit().expect("commit");
    // The zombie's next send is refused as fenced: fatal, for good.
    let _ = old.send(ProducerRecord::new("tf", b"zombie").key(b"zombie"));
    let e = old.commit().expect_err("a fenced producer cannot commit");
    assert!(
        matches!(e, ClientError::Transaction { fatal: true, .. }),
        "fenced: {e}"
    );
    assert!(
        matches!(
            e.code(),
            Some(ErrorCode::ProducerFenced | ErrorCode::InvalidProducerEpoch)
        ),
        "{e}"
    );
    assert!(old.begin().is_err(), "a fenced producer begins nothing");
    assert!(old.abort().is_err(), "nor aborts");
    let committed = read_all(&bs, "tf", Isolation::ReadCommitted);
    assert_same(
        &sorted_values(&committed),
        &names("new", 30),
        "read_committed",
    );
    let everything = read_all(&bs, "tf", Isolation::ReadUncommitted);
    assert_eq!(
        everything.len(),
        80,
        "the zombie's aborted records stay in the log"
    );
}

#[test]
fn a_failed_send_makes_the_transaction_abortable_and_the_abort_starts_a_new_epoch() {
    let b = TestBroker::start(1, &[]);
    let mut c = b.client();
    c.create_topic("ok", 1, 1, vec![]).expect("create");
    c.create_topic(
        "small",
        1,
        1,
        vec![("max.message.bytes".into(), "2000".into())],
    )
    .expect("create");
    let bs = b.bootstrap();
    let p = txn_producer(&bs, "tx-abortable", Duration::from_secs(60));
    p.begin().expect("begin");
    send_all(&p, "ok", &names("lost", 10));
    let big = vec![b'x'; 10_000];
    let report = p
        .send(ProducerRecord::new("small", &big))
        .expect("buffered");
    let e = report.wait().expect_err("too large for the topic");
    assert_eq!(e.code(), Some(ErrorCode::MessageTooLarge), "{e}");
    // Nothing more goes into this transaction, and it cannot commit.
    let e = p.commit().expect_err("a failed send");
    assert!(
        matches!(e, ClientError::Transaction { fatal: false, .. }),
        "abortable: {e}"
    );
    assert!(p.send(ProducerRecord::new("ok", b"more")).is_err());
    let before = p.producer_id();
    p.abort().expect("abort");
    let after = p.producer_id();
    assert_eq!(after.0, before.0);
    assert!(after.1 > before.1, "epoch bumped: {before:?} -> {after:?}");
    p.begin().expect("begin");
    send_all(&p, "ok", &names("kept", 10));
    p.commit().expect("commit");
    let committed = read_all(&bs, "ok", Isolation::ReadCommitted);
    assert_same(
        &sorted_values(&committed),
        &names("kept", 10),
        "read_committed",
    );
}

#[test]
fn rill_produce_with_a_transactional_id_commits_at_eof_and_a_killed_one_commits_nothing() {
    let b = TestBroker::start(1, &[]);
    b.client()
        .create_topic("cli", 3, 1, vec![])
        .expect("create");
    let input = names("line", 500).join("\n") + "\n";
    let out = b.cli(
        &["produce", "cli", "--transactional-id", "tx-cli"],
        Some(&input),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let bs = b.bootstrap();
    let committed = read_all(&bs, "cli", Isolation::ReadCommitted);
    assert_same(
        &sorted_values(&committed),
        &names("line", 500),
        "read_committed",
    );
    let bad = b.cli(
        &[
            "produce",
            "cli",
            "--transactional-id",
            "tx-cli",
            "--acks",
            "1",
        ],
        Some("x\n"),
    );
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--acks all"));

    // A run killed before its input ends commits nothing, and the next run with the same id
    // fences it and commits its own.
    let mut child = Command::new(rill_testkit::rill_bin())
        .args(["-b", &bs, "produce", "cli", "--transactional-id", "tx-cli"])
        .args(["--transaction-timeout-ms", "600000"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("rill produce");
    let mut stdin = child.stdin.take().expect("stdin");
    for v in names("killed", 100) {
        writeln!(stdin, "{v}").expect("write");
    }
    stdin.flush().expect("flush");
    // Wait until its records are in the log (read uncommitted), then SIGKILL it.
    let start = Instant::now();
    while read_all(&bs, "cli", Isolation::ReadUncommitted).len() < 600 {
        assert!(
            start.elapsed() < DEADLINE,
            "the killed run's records never arrived"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    child.kill().expect("kill");
    let _ = child.wait();
    drop(stdin);
    let out = b.cli(
        &["produce", "cli", "--transactional-id", "tx-cli"],
        Some("after\n"),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut want = names("line", 500);
    want.push("after".into());
    want.sort();
    let committed = read_all(&bs, "cli", Isolation::ReadCommitted);
    assert_same(
        &sorted_values(&committed),
        &want,
        "read_committed after the kill",
    );
}

// ---- the read-process-write pipeline -------------------------------------------------

/// What the pipeline writes for an input value.
fn transform(v: &str) -> String {
    format!("{}!", v.to_uppercase())
}

/// Run as its own process by the test below (`RILL_PIPELINE` set): consumes `input` with
/// read_committed from the group's committed offsets, writes `transform` of each record to
/// the same partition of `output`, and commits the input offsets in the same transaction,
/// printing `committed N` after each commit. Any error ends the process: the test starts a
/// new one, as a supervisor would.
#[test]
#[ignore = "the pipeline process of read_process_write_..."]
fn pipeline_process() {
    let Ok(args) = std::env::var("RILL_PIPELINE") else {
        return;
    };
    let a: Vec<&str> = args.split(' ').collect();
    let (bootstrap, input, output, group, id) = (a[0], a[1], a[2], a[3], a[4]);
    if let Err(e) = pipeline(bootstrap, input, output, group, id) {
        eprintln!("pipeline: {e}");
        std::process::exit(3);
    }
}

fn pipeline(
    bootstrap: &str,
    input: &str,
    output: &str,
    group: &str,
    id: &str,
) -> Result<(), ClientError> {
    let mut cc = ClientConfig::new(bootstrap);
    cc.request_timeout = Duration::from_secs(10);
    let cfg = ProducerConfig {
        linger: Duration::from_millis(1),
        max_block: Duration::from_secs(30),
        delivery_timeout: Duration::from_secs(60),
        request_timeout: Duration::from_secs(10),
        ..ProducerConfig::default()
    };
    let txn = TransactionConfig {
        transactional_id: id.to_string(),
        transaction_timeout: Duration::from_secs(20),
    };
    let producer = TransactionalProducer::init(cc.clone(), cfg, txn)?;
    let mut client = Client::connect(cc.clone())?;
    let partitions = client.wait_for_topic(input, Duration::from_secs(30))?;
    // Small fetches: many small transactions, so the kills land in all their phases.
    let ccfg = ConsumerConfig {
        isolation: Isolation::ReadCommitted,
        fetch_max_wait: Duration::from_millis(100),
        fetch_max_bytes: 1024,
        partition_max_bytes: 256,
        ..ConsumerConfig::default()
    };
    let mut consumer = Consumer::new(cc, ccfg)?;
    consumer.assign(input, None, StartFrom::Beginning)?;
    // init completed every earlier transaction of the id: the committed offsets are stable.
    rewind(&mut client, &mut consumer, input, partitions, group)?;
    let mut transactions = 0u64;
    let mut total = 0usize;
    loop {
        let records = consumer.poll(Duration::from_millis(200))?;
        if records.is_empty() {
            continue;
        }
        producer.begin()?;
        let mut n = 0;
        let mut reports = Vec::new();
        for r in records.iter() {
            let v = String::from_utf8_lossy(r.value().unwrap_or_default()).into_owned();
            let out = transform(&v);
            let rec = ProducerRecord::new(output, out.as_bytes()).partition(r.partition);
            reports.push(producer.send(rec)?);
            n += 1;
        }
        let mut offsets = Offsets::new();
        for p in 0..partitions {
            if let Some(o) = consumer.position(input, p) {
                offsets.insert((input.to_string(), p), OffsetAndMetadata::new(o));
            }
        }
        producer.send_offsets_to_transaction(&offsets, &GroupMetadata::new(group))?;
        transactions += 1;
        if transactions.is_multiple_of(5) {
            // Every fifth transaction is aborted on purpose, once its records are written:
            // they must never be seen, and its input is processed again.
            for r in reports {
                r.wait()?;
            }
            producer.abort()?;
            rewind(&mut client, &mut consumer, input, partitions, group)?;
            continue;
        }
        producer.commit()?;
        for r in reports {
            r.wait()?;
        }
        total += n;
        println!("committed {total}");
    }
}

/// Moves the consumer back to the group's committed offsets of `input`.
fn rewind(
    client: &mut Client,
    consumer: &mut Consumer,
    input: &str,
    partitions: u32,
    group: &str,
) -> Result<(), ClientError> {
    let at = client.find_coordinator(group)?;
    let asked = (0..partitions).map(|p| (input.to_string(), p)).collect();
    for (_, p, offset, _) in client.fetch_offsets(at, group, asked)? {
        let from = offset.map_or(StartFrom::Beginning, StartFrom::Offset);
        consumer.seek(input, p, from)?;
    }
    Ok(())
}

/// One pipeline process, its `committed` lines counted as they come.
struct Pipeline {
    child: Child,
    commits: Arc<AtomicUsize>,
}

impl Pipeline {
    fn start(args: &str) -> Pipeline {
        let mut child = Command::new(std::env::current_exe().expect("test binary"))
            .args(["pipeline_process", "--exact", "--ignored", "--nocapture"])
            .args(["--test-threads", "1"])
            .env("RILL_PIPELINE", args)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("pipeline process");
        let commits = Arc::new(AtomicUsize::new(0));
        let out = child.stdout.take().expect("stdout");
        let c = commits.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if line.starts_with("committed ") {
                    c.fetch_add(1, Ordering::SeqCst);
                }
            }
        });
        Pipeline { child, commits }
    }

    fn exited(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(Some(_)))
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Pipeline {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The group's committed offsets of `topic`'s partitions (0 where none), asked via `via`.
fn committed(via: &str, group: &str, topic: &str, partitions: u32) -> Option<Vec<u64>> {
    let mut c = Client::connect(ClientConfig::new(via)).ok()?;
    let at = c.find_coordinator(group).ok()?;
    let asked = (0..partitions).map(|p| (topic.to_string(), p)).collect();
    let got = c.fetch_offsets(at, group, asked).ok()?;
    Some(got.into_iter().map(|(_, _, o, _)| o.unwrap_or(0)).collect())
}

#[test]
fn a_read_process_write_pipeline_sigkilled_with_its_brokers_writes_exactly_f_of_its_input() {
    let mut rng = Rng::seeded();
    let seed = rng.0;
    let partitions = 3;
    let mut c = TestCluster::start(3, 1, FAST_FENCING);
    c.wait_leader(&[1, 2, 3]);
    create_topic_rf3(&c, "in", partitions, &[("min.insync.replicas", "2")]);
    create_topic_rf3(&c, "out", partitions, &[("min.insync.replicas", "2")]);
    // The input: written up front, in order per partition, by an idempotent producer.
    let per_partition = 400;
    {
        let p = Producer::new(
            c.nodes[0].client_config(),
            ProducerConfig {
                linger: Duration::from_millis(2),
                batch_bytes: 200,
                ..ProducerConfig::default()
            },
        )
        .expect("producer");
        let mut reports = Vec::new();
        for i in 0..per_partition {
            for part in 0..partitions {
                let v = format!("in-{part}-{i:05}");
                reports.push(
                    p.send(ProducerRecord::new("in", v.as_bytes()).partition(part))
                        .expect("send"),
                );
            }
        }
        p.flush().expect("flush");
        for r in reports {
            r.wait().expect("input delivered");
        }
    }
    let ends = vec![per_partition as u64; partitions as usize];
    let args = |via: &str| format!("{via} in out pipe-group tx-pipe");
    let mut alive_via = c.nodes[0].bootstrap();
    let mut pipeline = Pipeline::start(&args(&alive_via));
    let mut down: Option<u64> = None;
    for round in 0..8 {
        // Let the pipeline commit a few transactions, then strike at a random moment
        // (mid-transaction, most of the time).
        let want = pipeline.commits.load(Ordering::SeqCst) + 1 + rng.below(3) as usize;
        let start = Instant::now();
        while pipeline.commits.load(Ordering::SeqCst) < want {
            if pipeline.exited() {
                eprintln!("round {round}: the pipeline exited; started again");
                pipeline = Pipeline::start(&args(&alive_via));
            }
            let done =
                committed(&alive_via, "pipe-group", "in", partitions).is_some_and(|o| o == ends);
            if done {
                break;
            }
            assert!(start.elapsed() < DEADLINE, "round {round}: no progress");
            std::thread::sleep(Duration::from_millis(20));
        }
        eprintln!(
            "round {round}: {} commits by this pipeline, offsets {:?}",
            pipeline.commits.load(Ordering::SeqCst),
            committed(&alive_via, "pipe-group", "in", partitions)
        );
        std::thread::sleep(Duration::from_millis(rng.below(40)));
        match (rng.below(3), down) {
            (0, _) | (_, Some(_)) => {
                eprintln!("round {round}: SIGKILL the pipeline");
                pipeline.kill();
            }
            _ => {
                let victim = 1 + rng.below(3);
                eprintln!("round {round}: SIGKILL broker {victim}");
                c.node(victim).kill();
                down = Some(victim);
                let live = (1..=3u64).find(|&b| b != victim).unwrap();
                alive_via = c.nodes[live as usize - 1].bootstrap();
            }
        }
        if let (Some(victim), true) = (down, round % 2 == 1) {
            eprintln!("round {round}: broker {victim} started again");
            c.node(victim).start_again();
            c.node(victim).wait_ready();
            down = None;
        }
        if pipeline.exited() {
            pipeline = Pipeline::start(&args(&alive_via));
        }
    }
    if let Some(victim) = down {
        c.node(victim).start_again();
        c.node(victim).wait_ready();
    }
    // Run to the end of the input.
    let start = Instant::now();
    while committed(&alive_via, "pipe-group", "in", partitions).as_ref() != Some(&ends) {
        if pipeline.exited() {
            pipeline = Pipeline::start(&args(&alive_via));
        }
        assert!(
            start.elapsed() < DEADLINE * 2,
            "the pipeline never finished: committed {:?}",
            committed(&alive_via, "pipe-group", "in", partitions)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    pipeline.kill();
    let written = read_all(&alive_via, "out", Isolation::ReadUncommitted).len();
    eprintln!("{written} records written to the output, aborted ones included");
    assert!(
        written > per_partition * partitions as usize,
        "the aborted transactions' records are in the log"
    );
    // Exactly f(input), partition by partition in input order: none missing, none twice.
    let input = read_all(&alive_via, "in", Isolation::ReadUncommitted);
    let output = read_all(&alive_via, "out", Isolation::ReadCommitted);
    for p in 0..partitions {
        let want: Vec<String> = input
            .iter()
            .filter(|((part, _), _)| *part == p)
            .map(|(_, v)| transform(v))
            .collect();
        let got: Vec<String> = output
            .iter()
            .filter(|((part, _), _)| *part == p)
            .map(|(_, v)| v.clone())
            .collect();
        assert_eq!(want.len(), per_partition, "input partition {p}");
        assert_same(&got, &want, &format!("output partition {p} (seed {seed})"));
    }
}
