//! Kafka OffsetForLeaderEpoch (API 23) over [`crate::broker::leader_epochs`]: a consumer that
//! sees a new leader epoch in Metadata asks where its position's epoch ends, to find out
//! whether the log it read was truncated (librdkafka and the Java client do, when this API is
//! advertised). `replica_id` (v3+) is not used: rill's followers replicate over the native
//! protocol, so every asker is answered alike.

use kafka_protocol::messages::offset_for_leader_epoch_response::{
    EpochEndOffset, OffsetForLeaderTopicResult,
};
use kafka_protocol::messages::{OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse};

use crate::broker::leader_epochs::{asked_epoch, offset_for_leader_epoch};
use crate::broker::Shard;
use crate::protocol::ErrorCode;
use crate::replication::NO_EPOCH;

/// Kafka's UNDEFINED_EPOCH and UNDEFINED_EPOCH_OFFSET: the answer for an epoch older than
/// anything this log holds, and with every error.
const UNDEFINED: i64 = -1;

pub fn offset_for_leader_epoch_api(
    shard: &Shard,
    req: &OffsetForLeaderEpochRequest,
) -> OffsetForLeaderEpochResponse {
    let mut response = OffsetForLeaderEpochResponse::default();
    for t in &req.topics {
        let mut tr = OffsetForLeaderTopicResult::default();
        tr.topic = t.topic.clone();
        for q in &t.partitions {
            let mut r = EpochEndOffset::default();
            r.partition = q.partition;
            r.leader_epoch = UNDEFINED as i32;
            r.end_offset = UNDEFINED;
            let answer = match (u32::try_from(q.partition), u32::try_from(q.leader_epoch)) {
                (Ok(partition), Ok(epoch)) => offset_for_leader_epoch(
                    shard,
                    t.topic.0.as_str(),
                    partition,
                    asked_epoch(q.current_leader_epoch),
                    epoch,
                )
                .map(|end| (end.epoch != NO_EPOCH).then_some(end))
                .map_err(|e| e.code),
                (Err(_), _) => Err(ErrorCode::UnknownTopicOrPartition),
                // No epoch asked (negative): nothing ends there.
                (Ok(_), Err(_)) => Ok(None),
            };
            match answer {
                Ok(Some(end)) => {
                    r.leader_epoch = i32::try_from(end.epoch).unwrap_or(i32::MAX);
                    r.end_offset = i64::try_from(end.end_offset).unwrap_or(i64::MAX);
                }
                Ok(None) => {}
                Err(code) => r.error_code = code.code(),
            }
            tr.partitions.push(r);
        }
        response.topics.push(tr);
    }
    response
}

#[cfg(test)]
mod tests {
    //! The Kafka codec on a real shard whose partition moved to a new leader epoch (by hand,
    //! as the controller's election would), so stale, current and future views all occur.
    use std::rc::Rc;

    use bytes::Bytes;
    use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
    use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
    use kafka_protocol::messages::offset_for_leader_epoch_request::{
        OffsetForLeaderPartition, OffsetForLeaderTopic,
    };
    use kafka_protocol::messages::{
        FetchRequest, ListOffsetsRequest, OffsetForLeaderEpochRequest, RequestKind, ResponseKind,
        TopicName,
    };
    use kafka_protocol::protocol::StrBytes;
    use kafka_protocol::records::RecordBatchDecoder;

    use crate::broker::tests::{create, on_broker, produce};
    use crate::broker::Shard;
    use crate::kafka::handlers::{handle, Handled};
    use crate::protocol::ErrorCode;

    fn name(s: &str) -> TopicName {
        TopicName(StrBytes::from_string(s.to_string()))
    }

    async fn answer(shard: &Rc<Shard>, version: i16, req: RequestKind) -> ResponseKind {
        match handle(shard, version, None, req).await {
            Handled::Answer(r) => *r,
            Handled::Fetch(r, records) => ResponseKind::Fetch(
                crate::kafka::fetch_response::written_and_decoded(version, *r, records),
            ),
            _ => panic!("not answered at once"),
        }
    }

    /// (error, leader epoch, end offset) of one OffsetForLeaderEpoch v4 question.
    async fn ask(
        shard: &Rc<Shard>,
        topic: &str,
        partition: i32,
        current: i32,
        epoch: i32,
    ) -> (ErrorCode, i32, i64) {
        let mut q = OffsetForLeaderPartition::default();
        q.partition = partition;
        q.current_leader_epoch = current;
        q.leader_epoch = epoch;
        let mut t = OffsetForLeaderTopic::default();
        t.topic = name(topic);
        t.partitions = vec![q];
        let mut req = OffsetForLeaderEpochRequest::default();
        req.replica_id = (-1).into();
        req.topics = vec![t];
        let ResponseKind::OffsetForLeaderEpoch(r) =
            answer(shard, 4, RequestKind::OffsetForLeaderEpoch(req)).await
        else {
            panic!("not an OffsetForLeaderEpoch answer")
        };
        let e = &r.topics[0].partitions[0];
        assert_eq!(e.partition, partition);
        (
            ErrorCode::from_code(e.error_code),
            e.leader_epoch,
            e.end_offset,
        )
    }

    /// (error, the current leader's epoch answered, records) of a Fetch v12 of t-0 from 0.
    async fn fetch(shard: &Rc<Shard>, current: i32) -> (ErrorCode, i32, Bytes) {
        let mut p = FetchPartition::default();
        p.partition = 0;
        p.current_leader_epoch = current;
        p.partition_max_bytes = 1 << 20;
        let mut t = FetchTopic::default();
        t.topic = name("t");
        t.partitions = vec![p];
        let mut req = FetchRequest::default();
        req.replica_id = (-1).into();
        req.min_bytes = 1;
        req.max_bytes = 16 << 20;
        req.topics = vec![t];
        let ResponseKind::Fetch(r) = answer(shard, 12, RequestKind::Fetch(req)).await else {
            panic!("not a Fetch answer")
        };
        let pd = &r.responses[0].partitions[0];
        (
            ErrorCode::from_code(pd.error_code),
            pd.current_leader.leader_epoch,
            pd.records.clone().unwrap_or_default(),
        )
    }

    /// (error, offset) of a ListOffsets v7 of t-0's log end.
    async fn latest(shard: &Rc<Shard>, current: i32) -> (ErrorCode, i64) {
        let (code, offset, _) = list_offset(shard, current, -1).await;
        (code, offset)
    }

    /// (error, offset, leader epoch) of a ListOffsets v7 of t-0 at `timestamp`.
    async fn list_offset(shard: &Rc<Shard>, current: i32, timestamp: i64) -> (ErrorCode, i64, i32) {
        let mut p = ListOffsetsPartition::default();
        p.partition_index = 0;
        p.current_leader_epoch = current;
        p.timestamp = timestamp;
        let mut t = ListOffsetsTopic::default();
        t.name = name("t");
        t.partitions = vec![p];
        let mut req = ListOffsetsRequest::default();
        req.replica_id = (-1).into();
        req.topics = vec![t];
        let ResponseKind::ListOffsets(r) = answer(shard, 7, RequestKind::ListOffsets(req)).await
        else {
            panic!("not a ListOffsets answer")
        };
        let pr = &r.topics[0].partitions[0];
        (
            ErrorCode::from_code(pr.error_code),
            pr.offset,
            pr.leader_epoch,
        )
    }

    #[test]
    fn epochs_are_answered_and_checked_as_kafka_does() {
        on_broker(|shard| async move {
            create(&shard, "t", 1).await;
            produce(&shard, "t", 0, &["a", "b"]).await;
            assert_eq!(ask(&shard, "t", 0, 0, 0).await, (ErrorCode::None, 0, 2));
            let p = shard.partition("t", 0).expect("open");
            p.lead(2).await.expect("lead at 2");
            produce(&shard, "t", 0, &["c"]).await;

            // The current epoch ends at the log end; an older one where the next began.
            assert_eq!(ask(&shard, "t", 0, 2, 2).await, (ErrorCode::None, 2, 3));
            assert_eq!(ask(&shard, "t", 0, -1, 2).await, (ErrorCode::None, 2, 3));
            assert_eq!(ask(&shard, "t", 0, 2, 0).await, (ErrorCode::None, 0, 2));
            assert_eq!(ask(&shard, "t", 0, 2, 1).await, (ErrorCode::None, 0, 2));
            let undefined = |code| (code, -1, -1);
            assert_eq!(
                ask(&shard, "t", 0, 1, 0).await,
                undefined(ErrorCode::FencedLeaderEpoch)
            );
            assert_eq!(
                ask(&shard, "t", 0, 3, 0).await,
                undefined(ErrorCode::UnknownLeaderEpoch)
            );
            for (topic, partition) in [("t", 5), ("t", -1), ("nope", 0)] {
                assert_eq!(
                    ask(&shard, topic, partition, 2, 2).await,
                    undefined(ErrorCode::UnknownTopicOrPartition),
                    "{topic}-{partition}"
                );
            }

            // Fetch and ListOffsets refuse a stale or future view and serve the right one or
            // none; a refused fetch names the leader as Metadata does.
            let md_epoch =
                shard.metadata.borrow().topic("t").expect("t").partitions[0].leader_epoch;
            let (code, leader_epoch, _) = fetch(&shard, 1).await;
            assert_eq!(
                (code, leader_epoch),
                (ErrorCode::FencedLeaderEpoch, md_epoch as i32)
            );
            assert_eq!(fetch(&shard, 3).await.0, ErrorCode::UnknownLeaderEpoch);
            assert_eq!(latest(&shard, 1).await, (ErrorCode::FencedLeaderEpoch, -1));
            assert_eq!(latest(&shard, 3).await, (ErrorCode::UnknownLeaderEpoch, -1));
            assert_eq!(latest(&shard, 2).await, (ErrorCode::None, 3));
            assert_eq!(latest(&shard, -1).await, (ErrorCode::None, 3));
            // With the epoch of the found offset: the log end's is the current one, the
            // earliest (-2) offset's the one it was appended in; none found, none (-1).
            assert_eq!(list_offset(&shard, 2, -1).await, (ErrorCode::None, 3, 2));
            assert_eq!(list_offset(&shard, 2, -2).await, (ErrorCode::None, 0, 0));
            assert_eq!(list_offset(&shard, 2, 1).await, (ErrorCode::None, 0, 0));
            assert_eq!(list_offset(&shard, 2, 2).await, (ErrorCode::None, -1, -1));
            for current in [2, -1] {
                let (code, _, records) = fetch(&shard, current).await;
                assert_eq!(code, ErrorCode::None);
                // Each served batch carries the epoch of the leader that appended it.
                let infos = RecordBatchDecoder::decode_all(&mut records.clone()).expect("batches");
                let epochs: Vec<(i64, i32)> = infos
                    .iter()
                    .flat_map(|s| &s.records)
                    .map(|r| (r.offset, r.partition_leader_epoch))
                    .collect();
                assert_eq!(epochs, vec![(0, 0), (1, 0), (2, 2)], "current {current}");
            }
        });
    }
}
