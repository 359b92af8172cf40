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
