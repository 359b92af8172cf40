//! Transactions (issue 17): the transaction coordinator against Kafka clients. Raw Kafka
//! requests for what no client library sends (bad input), confluent-kafka's transactional
//! producer (`tests/kafka/transactions.py`) for the rest.

use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use kafka_protocol::messages::{
    AddPartitionsToTxnRequest, AddPartitionsToTxnResponse, ApiKey, EndTxnRequest, EndTxnResponse,
    FindCoordinatorRequest, FindCoordinatorResponse, InitProducerIdRequest, InitProducerIdResponse,
    ProducerId, TopicName, TransactionalId,
};
use kafka_protocol::protocol::StrBytes;
use rill::protocol::ErrorCode;
use rill_testkit::kafka_call as call;
use rill_testkit::{TestBroker, DEADLINE};
use std::time::Instant;

fn txn_id(s: &str) -> TransactionalId {
    TransactionalId(StrBytes::from_string(s.to_string()))
}

fn code(c: i16) -> ErrorCode {
    ErrorCode::from_code(c)
}

/// InitProducerId v4 for `id`, retried while the coordinator is being created or loaded.
fn init(addr: &str, id: &str, timeout_ms: i32) -> Result<(i64, i16), ErrorCode> {
    let start = Instant::now();
    loop {
        let mut req = InitProducerIdRequest::default();
        req.transactional_id = Some(txn_id(id));
        req.transaction_timeout_ms = timeout_ms;
        req.producer_id = ProducerId(-1);
        req.producer_epoch = -1;
        let r: InitProducerIdResponse = call(addr, ApiKey::InitProducerId, 4, &req);
        match code(r.error_code) {
            ErrorCode::None => return Ok((r.producer_id.0, r.producer_epoch)),
            ErrorCode::CoordinatorNotAvailable
            | ErrorCode::CoordinatorLoadInProgress
            | ErrorCode::ConcurrentTransactions
                if start.elapsed() < DEADLINE =>
            {
                std::thread::sleep(std::time::Duration::from_millis(50))
            }
            e => return Err(e),
        }
    }
}

fn end_txn(addr: &str, id: &str, (pid, epoch): (i64, i16), commit: bool) -> ErrorCode {
    let mut req = EndTxnRequest::default();
    req.transactional_id = txn_id(id);
    req.producer_id = ProducerId(pid);
    req.producer_epoch = epoch;
    req.committed = commit;
    let r: EndTxnResponse = call(addr, ApiKey::EndTxn, 3, &req);
    code(r.error_code)
}

/// AddPartitionsToTxn of `topic`-0 (at `version`): its one partition result.
fn add_partition(
    addr: &str,
    id: &str,
    (pid, epoch): (i64, i16),
    topic: &str,
    version: i16,
) -> ErrorCode {
    let mut t = AddPartitionsToTxnTopic::default();
    t.name = TopicName(StrBytes::from_string(topic.to_string()));
    t.partitions = vec![0];
    let mut req = AddPartitionsToTxnRequest::default();
    req.v3_and_below_transactional_id = txn_id(id);
    req.v3_and_below_producer_id = ProducerId(pid);
    req.v3_and_below_producer_epoch = epoch;
    req.v3_and_below_topics = vec![t];
    let r: AddPartitionsToTxnResponse = call(addr, ApiKey::AddPartitionsToTxn, version, &req);
    code(r.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code)
}

#[test]
fn bad_transaction_requests_get_kafkas_errors_and_change_nothing() {
    let b = TestBroker::start_kafka(1, &["--transaction-max-timeout-ms", "60000"]);
    b.client().create_topic("t", 1, 1, vec![]).unwrap();
    let addr = b.kafka_bootstrap();
    let addr = addr.as_str();

    // FindCoordinator key type 1 names this broker (once __transactions exists).
    let start = Instant::now();
    loop {
        let mut req = FindCoordinatorRequest::default();
        req.key = StrBytes::from_static_str("pay");
        req.key_type = 1;
        let r: FindCoordinatorResponse = call(addr, ApiKey::FindCoordinator, 3, &req);
        if r.error_code == 0 {
            assert_eq!(
                r.port,
                b.kafka_bootstrap()
                    .rsplit(':')
                    .next()
                    .unwrap()
                    .parse::<i32>()
                    .unwrap()
            );
            break;
        }
        assert_eq!(code(r.error_code), ErrorCode::CoordinatorNotAvailable);
        assert!(start.elapsed() < DEADLINE);
        std::thread::sleep(std::time::Duration::from_millis(50));
    }

    // EndTxn for an id never initialised.
    assert_eq!(
        end_txn(addr, "never", (1, 0), true),
        ErrorCode::InvalidProducerIdMapping
    );
    // A timeout above --transaction-max-timeout-ms.
    assert_eq!(
        init(addr, "pay", 60_001),
        Err(ErrorCode::InvalidTransactionTimeout)
    );

    let first = init(addr, "pay", 60_000).unwrap();
    // The wrong producer id, an unknown partition.
    assert_eq!(
        end_txn(addr, "pay", (first.0 + 1, first.1), true),
        ErrorCode::InvalidProducerIdMapping
    );
    assert_eq!(
        add_partition(addr, "pay", first, "missing", 3),
        ErrorCode::UnknownTopicOrPartition
    );
    // Nothing open: EndTxn is refused.
    assert_eq!(
        end_txn(addr, "pay", first, true),
        ErrorCode::InvalidTxnState
    );

    // A second InitProducerId fences the first epoch: PRODUCER_FENCED, or for a client
    // older than KIP-588 (AddPartitionsToTxn v0-1) INVALID_PRODUCER_EPOCH.
    let second = init(addr, "pay", 60_000).unwrap();
    assert_eq!(second, (first.0, first.1 + 1));
    assert_eq!(
        add_partition(addr, "pay", first, "t", 3),
        ErrorCode::ProducerFenced
    );
    assert_eq!(
        add_partition(addr, "pay", first, "t", 1),
        ErrorCode::InvalidProducerEpoch
    );
    assert_eq!(
        end_txn(addr, "pay", first, false),
        ErrorCode::ProducerFenced
    );
    // Nothing changed: the current epoch still has no transaction, and can start one.
    assert_eq!(
        end_txn(addr, "pay", second, false),
        ErrorCode::InvalidTxnState
    );
    assert_eq!(add_partition(addr, "pay", second, "t", 3), ErrorCode::None);
}

const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/kafka/transactions.py");

/// Runs `transactions.py` to completion; its stdout lines (panics on a failure).
fn py(args: &[&str]) -> Vec<String> {
    let out = rill_testkit::external("python3")
        .arg(SCRIPT)
        .args(args)
        .output()
        .expect("python3");
    assert!(
        out.status.success(),
        "transactions.py {args:?}: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}

/// The values a consumer with `isolation` reads from every partition, sorted.
fn read(bootstrap: &str, topic: &str, partitions: u32, isolation: &str) -> Vec<String> {
    let mut v = py(&["read", bootstrap, topic, &partitions.to_string(), isolation]);
    v.sort();
    v
}

/// A `transactions.py` process left running (SIGKILLed by the test, or at drop).
struct Running {
    child: std::process::Child,
    lines: std::io::Lines<std::io::BufReader<std::process::ChildStdout>>,
}

impl Running {
    fn start(args: &[&str]) -> Running {
        use std::io::BufRead;
        let mut child = rill_testkit::external("python3")
            .arg(SCRIPT)
            .args(args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("python3");
        let lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
        Running { child, lines }
    }

    /// The next line it prints (panics if it exits first).
    fn line(&mut self) -> String {
        self.lines
            .next()
            .expect("transactions.py exited")
            .expect("its output")
    }

    fn say(&mut self, line: &str) {
        use std::io::Write;
        let stdin = self.child.stdin.as_mut().unwrap();
        writeln!(stdin, "{line}").unwrap();
        stdin.flush().unwrap();
    }

    fn kill(&mut self) {
        let _ = self.child.kill(); // SIGKILL
        let _ = self.child.wait();
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.kill();
    }
}

fn expected(prefix: &str, n: usize) -> Vec<String> {
    let mut v: Vec<String> = (0..n).map(|i| format!("{prefix}{i}")).collect();
    v.sort();
    v
}

#[test]
fn confluent_kafka_commits_and_aborts_and_read_committed_sees_the_commit_only() {
    let b = TestBroker::start_kafka(2, &[]);
    b.client().create_topic("t", 3, 1, vec![]).unwrap();
    let k = b.kafka_bootstrap();
    let out = py(&["commit-and-abort", &k, "tx-a", "t", "3", "g", "30"]);
    assert_eq!(out, ["committed", "aborted"]);
    assert_eq!(read(&k, "t", 3, "read_committed"), expected("c", 30));
    let mut all = expected("c", 30);
    all.extend(expected("a", 30));
    all.sort();
    assert_eq!(read(&k, "t", 3, "read_uncommitted"), all);
    // The group's offsets are the ones the committed transaction sent.
    assert_eq!(
        py(&["committed", &k, "g", "t", "3"]),
        ["0\t10", "1\t11", "2\t12"]
    );
}

#[test]
fn a_killed_producers_transaction_is_aborted_after_its_timeout() {
    let b = TestBroker::start_kafka(1, &[]);
    b.client().create_topic("k", 1, 1, vec![]).unwrap();
    let k = b.kafka_bootstrap();
    let mut hung = Running::start(&["hang", &k, "tx-k", "k", "3000", "5"]);
    assert_eq!(hung.line(), "produced");
    hung.kill();
    rill_testkit::produce_values(&b, "k", 0, ["after".to_string()]);
    // Once the coordinator aborted it (its 3 s timeout), read_committed consumers move past
    // it and never see its records.
    let start = Instant::now();
    loop {
        let committed = read(&k, "k", 1, "read_committed");
        assert!(
            committed.iter().all(|v| !v.starts_with('h')),
            "{committed:?}"
        );
        if committed == ["after"] {
            break;
        }
        assert!(start.elapsed() < DEADLINE, "never aborted: {committed:?}");
    }
    let mut all = expected("h", 5);
    all.push("after".into());
    all.sort();
    assert_eq!(read(&k, "k", 1, "read_uncommitted"), all);
}

#[test]
fn a_new_instance_fences_a_killed_producer_at_once() {
    let b = TestBroker::start_kafka(1, &[]);
    b.client().create_topic("f", 1, 1, vec![]).unwrap();
    let k = b.kafka_bootstrap();
    // Its timeout (15 min) is longer than the test may take: only fencing ends it.
    let mut hung = Running::start(&["hang", &k, "tx-f", "f", "900000", "5"]);
    assert_eq!(hung.line(), "produced");
    hung.kill();
    assert_eq!(py(&["init", &k, "tx-f"]), ["ok"]);
    rill_testkit::produce_values(&b, "f", 0, ["after".to_string()]);
    assert_eq!(read(&k, "f", 1, "read_committed"), ["after"]);
    let mut all = expected("h", 5);
    all.push("after".into());
    all.sort();
    assert_eq!(read(&k, "f", 1, "read_uncommitted"), all);
}

/// The broker coordinating `id`, asked through `via` (a Kafka node id is broker * 1000 +
/// shard).
fn coordinator_broker(via: &str, id: &str) -> u64 {
    let start = Instant::now();
    loop {
        let mut req = FindCoordinatorRequest::default();
        req.key = StrBytes::from_string(id.to_string());
        req.key_type = 1;
        let r: FindCoordinatorResponse = call(via, ApiKey::FindCoordinator, 3, &req);
        if r.error_code == 0 {
            return (r.node_id.0 / 1000) as u64;
        }
        assert!(
            start.elapsed() < DEADLINE,
            "no coordinator: {:?}",
            code(r.error_code)
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

#[test]
fn a_coordinator_failover_mid_transaction_completes_it_from_the_log() {
    let mut c = rill_testkit::TestCluster::start_kafka(3, 1, &[]);
    rill_testkit::create_topic_rf3(&c, "ft", 1, &[]);
    let all: Vec<String> = (1..=3).map(|id| c.kafka_bootstrap(id)).collect();
    let bootstrap = all.join(",");
    let mut p = Running::start(&["two-phase", &bootstrap, "tx-fo", "ft", "20"]);
    assert_eq!(p.line(), "produced");
    // The transaction is Ongoing with its partition in the coordinator's RF 3 log: SIGKILL
    // the coordinator's broker, then commit through whoever takes over.
    let victim = coordinator_broker(&all[0], "tx-fo");
    c.node(victim).kill();
    let survivor = (1..=3).find(|&id| id != victim).unwrap();
    p.say("commit");
    assert_eq!(p.line(), "committed");
    let via = c.kafka_bootstrap(survivor);
    assert_ne!(coordinator_broker(&via, "tx-fo"), victim);
    assert_eq!(read(&via, "ft", 1, "read_committed"), expected("t", 20));
}

/// TxnOffsetCommit v`version` of `group`'s offset 5 for `topic`-0: its partition's code.
fn txn_offset_commit(
    addr: &str,
    (id, group): (&str, &str),
    (pid, epoch): (i64, i16),
    topic: &str,
    version: i16,
) -> ErrorCode {
    use kafka_protocol::messages::txn_offset_commit_request::{
        TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic,
    };
    use kafka_protocol::messages::{GroupId, TxnOffsetCommitRequest, TxnOffsetCommitResponse};
    let mut p = TxnOffsetCommitRequestPartition::default();
    p.partition_index = 0;
    p.committed_offset = 5;
    let mut t = TxnOffsetCommitRequestTopic::default();
    t.name = TopicName(StrBytes::from_string(topic.to_string()));
    t.partitions = vec![p];
    let mut req = TxnOffsetCommitRequest::default();
    req.transactional_id = txn_id(id);
    req.group_id = GroupId(StrBytes::from_string(group.to_string()));
    req.producer_id = ProducerId(pid);
    req.producer_epoch = epoch;
    req.generation_id = -1;
    req.topics = vec![t];
    let r: TxnOffsetCommitResponse = call(addr, ApiKey::TxnOffsetCommit, version, &req);
    code(r.topics[0].partitions[0].error_code)
}

#[test]
fn txn_offset_commit_from_a_fenced_producer_is_refused_and_commits_nothing() {
    use kafka_protocol::messages::{AddOffsetsToTxnRequest, AddOffsetsToTxnResponse, GroupId};
    let b = TestBroker::start_kafka(1, &[]);
    b.client().create_topic("t", 1, 1, vec![]).unwrap();
    let k = b.kafka_bootstrap();
    let addr = k.as_str();
    let first = init(addr, "off", 60_000).unwrap();
    let mut req = AddOffsetsToTxnRequest::default();
    req.transactional_id = txn_id("off");
    req.producer_id = ProducerId(first.0);
    req.producer_epoch = first.1;
    req.group_id = GroupId(StrBytes::from_static_str("gx"));
    let r: AddOffsetsToTxnResponse = call(addr, ApiKey::AddOffsetsToTxn, 3, &req);
    assert_eq!(code(r.error_code), ErrorCode::None);
    assert_eq!(
        txn_offset_commit(addr, ("off", "gx"), first, "t", 3),
        ErrorCode::None
    );
    // A new instance: the open transaction is aborted (its marker reaches the offsets
    // partition at the bumped epoch) and the old epoch is fenced there too.
    let second = init(addr, "off", 60_000).unwrap();
    assert!(second.1 > first.1);
    assert_eq!(
        txn_offset_commit(addr, ("off", "gx"), first, "t", 3),
        ErrorCode::ProducerFenced
    );
    assert_eq!(
        txn_offset_commit(addr, ("off", "gx"), first, "t", 2),
        ErrorCode::InvalidProducerEpoch
    );
    // Nothing committed: the aborted transaction's offset is dropped.
    assert_eq!(py(&["committed", &k, "gx", "t", "1"]), ["0\t-1001"]);
}

#[test]
fn the_transaction_log_is_compacted_and_a_restart_reads_the_state_back() {
    use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
    use kafka_protocol::messages::{ListOffsetsRequest, ListOffsetsResponse};
    let flags = [
        "--transaction-state-partitions",
        "1",
        "--transaction-state-compact-every",
        "20",
    ];
    let mut b = TestBroker::start_kafka(1, &flags);
    let k = b.kafka_bootstrap();
    // Every InitProducerId is a record; 50 of them for two ids.
    let mut last = (0, 0);
    for _ in 0..25 {
        last = init(&k, "kept", 60_000).unwrap();
        init(&k, "other", 60_000).unwrap();
    }
    assert_eq!(last.1, 24);
    let log_start = |addr: &str| {
        let mut p = ListOffsetsPartition::default();
        p.partition_index = 0;
        p.timestamp = -2; // earliest
        let mut t = ListOffsetsTopic::default();
        t.name = TopicName(StrBytes::from_static_str("__transactions"));
        t.partitions = vec![p];
        let mut req = ListOffsetsRequest::default();
        req.replica_id = (-1).into();
        req.topics = vec![t];
        let r: ListOffsetsResponse = call(addr, ApiKey::ListOffsets, 5, &req);
        r.topics[0].partitions[0].offset
    };
    let start = Instant::now();
    while log_start(&k) == 0 {
        assert!(start.elapsed() < DEADLINE, "never compacted");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    b.kill();
    b.start_again();
    let k = b.kafka_bootstrap();
    // The state survived: the next epoch of the same producer id.
    assert_eq!(init(&k, "kept", 60_000).unwrap(), (last.0, 25));
}
