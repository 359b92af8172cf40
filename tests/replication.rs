//! Partition replication on real broker processes (issue 14). So far: the leader's epoch
//! bookkeeping as a follower or consumer sees it over the native protocol
//! (OffsetForLeaderEpoch), across a restart.

use rill::protocol::messages::{
    OffsetForLeaderEpochPartition, OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse,
    NO_LEADER_EPOCH,
};
use rill::protocol::{ApiKey, ErrorCode};
use rill_testkit::{produce_values, TestBroker};

/// (error code, leader epoch, end offset) of one OffsetForLeaderEpoch question.
fn ask(
    b: &TestBroker,
    topic: &str,
    partition: u32,
    current: i32,
    epoch: i32,
) -> (ErrorCode, i32, i64) {
    let mut c = b.client();
    let md = c.refresh_metadata().expect("metadata");
    // An unknown topic has no route: ask the shard of partition t-0.
    let addr = match md.route(topic, partition) {
        Ok(r) => r.addr,
        Err(_) => md.route("t", 0).expect("route").addr,
    };
    let req = OffsetForLeaderEpochRequest {
        partitions: vec![OffsetForLeaderEpochPartition {
            topic: topic.into(),
            partition,
            current_leader_epoch: current,
            leader_epoch: epoch,
        }],
    };
    let (resp, _): (OffsetForLeaderEpochResponse, _) = c
        .call(addr, ApiKey::OffsetForLeaderEpoch, &req, &[])
        .expect("answered");
    let r = &resp.partitions[0];
    (
        ErrorCode::from_code(r.error_code),
        r.leader_epoch,
        r.end_offset,
    )
}

#[test]
fn offset_for_leader_epoch_over_the_wire_and_across_a_restart() {
    let mut b = TestBroker::start(2, &[]);
    let mut c = b.client();
    c.create_topic("t", 2, 1, vec![]).expect("created");
    produce_values(&b, "t", 1, (0..300).map(|i| format!("v{i}")));
    // One leader so far, epoch 0: it ends at the log end.
    assert_eq!(ask(&b, "t", 1, 0, 0), (ErrorCode::None, 0, 300));
    assert_eq!(
        ask(&b, "t", 1, NO_LEADER_EPOCH, 5),
        (ErrorCode::None, 0, 300)
    );
    assert_eq!(ask(&b, "t", 0, 0, 0), (ErrorCode::None, 0, 0));
    // A stale or future view of the leader is refused; bad input changes nothing.
    assert_eq!(ask(&b, "t", 1, 3, 0).0, ErrorCode::UnknownLeaderEpoch);
    assert_eq!(ask(&b, "t", 1, 0, -4).0, ErrorCode::InvalidRequest);
    assert_eq!(
        ask(&b, "nope", 0, 0, 0).0,
        ErrorCode::UnknownTopicOrPartition
    );
    assert_eq!(ask(&b, "t", 9, 0, 0).0, ErrorCode::UnknownTopicOrPartition);
    b.restart();
    // The leader-epoch file came back with the log; the epoch is the same.
    produce_values(&b, "t", 1, (300..310).map(|i| format!("v{i}")));
    assert_eq!(ask(&b, "t", 1, 0, 0), (ErrorCode::None, 0, 310));
    let file = rill_testkit::partition_dir(&b.data_dir(), "t", 1).join("leader-epoch");
    assert!(file.is_file(), "{} missing", file.display());
}
