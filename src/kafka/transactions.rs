//! The transaction APIs for Kafka clients (AddPartitionsToTxn v0-3, AddOffsetsToTxn v0-3,
//! EndTxn v0-3, TxnOffsetCommit v0-3; InitProducerId and FindCoordinator key type 1 go
//! through their own handlers): decode, call [`crate::broker::transactions`] (or
//! [`crate::broker::offsets::txn_commit`]), encode.

use std::rc::Rc;

use kafka_protocol::messages::add_partitions_to_txn_response::{
    AddPartitionsToTxnPartitionResult, AddPartitionsToTxnTopicResult,
};
use kafka_protocol::messages::txn_offset_commit_response::{
    TxnOffsetCommitResponsePartition, TxnOffsetCommitResponseTopic,
};
use kafka_protocol::messages::{
    AddOffsetsToTxnRequest, AddOffsetsToTxnResponse, AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse, EndTxnRequest, EndTxnResponse, ProducerId, TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
};

use crate::broker::{offsets, transactions, OpError, Shard};
use crate::protocol::ErrorCode;
use crate::transactions::TopicPartition;

/// Kafka's OPERATION_NOT_ATTEMPTED: the other partitions of a refused AddPartitionsToTxn.
pub const OPERATION_NOT_ATTEMPTED: i16 = 55;

/// PRODUCER_FENCED as a client of `version` understands it: versions before KIP-588's
/// (`fenced_since`) know only INVALID_PRODUCER_EPOCH for it, as Kafka answers them.
pub fn code_for(e: &OpError, version: i16, fenced_since: i16) -> i16 {
    match e.code {
        ErrorCode::ProducerFenced if version < fenced_since => {
            ErrorCode::InvalidProducerEpoch.code()
        }
        c => c.code(),
    }
}

pub async fn add_partitions_to_txn(
    shard: &Rc<Shard>,
    version: i16,
    req: &AddPartitionsToTxnRequest,
) -> AddPartitionsToTxnResponse {
    let mut asked: Vec<TopicPartition> = Vec::new();
    for t in &req.v3_and_below_topics {
        for &p in &t.partitions {
            asked.push(TopicPartition::new(t.name.0.to_string(), p.max(0) as u32));
        }
    }
    let bad_index = req
        .v3_and_below_topics
        .iter()
        .any(|t| t.partitions.iter().any(|&p| p < 0));
    let unknown = transactions::unknown_partitions(shard, &asked);
    let result = if bad_index || !unknown.is_empty() {
        Err(OpError::new(
            ErrorCode::UnknownTopicOrPartition,
            "unknown partition",
        ))
    } else {
        transactions::add_partitions(
            shard,
            &req.v3_and_below_transactional_id.0,
            req.v3_and_below_producer_id.0,
            req.v3_and_below_producer_epoch,
            asked,
        )
        .await
    };
    let mut r = AddPartitionsToTxnResponse::default();
    for t in &req.v3_and_below_topics {
        let mut tr = AddPartitionsToTxnTopicResult::default();
        tr.name = t.name.clone();
        for &p in &t.partitions {
            let mut pr = AddPartitionsToTxnPartitionResult::default();
            pr.partition_index = p;
            pr.partition_error_code = match &result {
                Ok(()) => 0,
                // Kafka: the unknown partitions get the error, the others were not tried.
                Err(e) if e.code == ErrorCode::UnknownTopicOrPartition => {
                    let tp = TopicPartition::new(t.name.0.to_string(), p.max(0) as u32);
                    if p < 0 || unknown.contains(&tp) {
                        e.code.code()
                    } else {
                        OPERATION_NOT_ATTEMPTED
                    }
                }
                Err(e) => code_for(e, version, 2),
            };
            tr.results_by_partition.push(pr);
        }
        r.results_by_topic_v3_and_below.push(tr);
    }
    r
}

pub async fn add_offsets_to_txn(
    shard: &Rc<Shard>,
    version: i16,
    req: &AddOffsetsToTxnRequest,
) -> AddOffsetsToTxnResponse {
    let result = transactions::add_offsets(
        shard,
        &req.transactional_id.0,
        req.producer_id.0,
        req.producer_epoch,
        &req.group_id.0,
    )
    .await;
    let mut r = AddOffsetsToTxnResponse::default();
    if let Err(e) = result {
        r.error_code = code_for(&e, version, 2);
    }
    r
}

pub async fn end_txn(shard: &Rc<Shard>, version: i16, req: &EndTxnRequest) -> EndTxnResponse {
    let result = transactions::end_txn(
        shard,
        &req.transactional_id.0,
        req.producer_id.0,
        req.producer_epoch,
        req.committed,
    )
    .await;
    let mut r = EndTxnResponse::default();
    r.producer_id = ProducerId(-1);
    r.producer_epoch = -1;
    if let Err(e) = result {
        r.error_code = code_for(&e, version, 2);
    }
    r
}

pub async fn txn_offset_commit(
    shard: &Rc<Shard>,
    version: i16,
    req: &TxnOffsetCommitRequest,
) -> TxnOffsetCommitResponse {
    let mut asked = Vec::new();
    let mut bad = false;
    for t in &req.topics {
        for p in &t.partitions {
            match super::groups::commit_record(
                &t.name,
                p.partition_index,
                p.committed_offset,
                p.committed_leader_epoch,
                p.committed_metadata.as_ref(),
            ) {
                Some(o) => asked.push(o),
                None => bad = true,
            }
        }
    }
    let outcome = if bad {
        Err(OpError::new(
            ErrorCode::InvalidRequest,
            "a negative partition or offset",
        ))
    } else {
        offsets::txn_commit(
            shard,
            &req.group_id.0,
            req.producer_id.0,
            req.producer_epoch,
            &req.member_id,
            req.group_instance_id.as_ref().map(|i| i.as_str()),
            req.generation_id,
            asked,
        )
        .await
    };
    let code = match &outcome {
        Ok(()) => 0,
        // PRODUCER_FENCED is known from v3 on (KIP-588's bump of TxnOffsetCommit).
        Err(e) => code_for(e, version, 3),
    };
    let mut r = TxnOffsetCommitResponse::default();
    for t in &req.topics {
        let mut tr = TxnOffsetCommitResponseTopic::default();
        tr.name = t.name.clone();
        for p in &t.partitions {
            let mut pr = TxnOffsetCommitResponsePartition::default();
            pr.partition_index = p.partition_index;
            pr.error_code = code;
            tr.partitions.push(pr);
        }
        r.topics.push(tr);
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kafka::admin::test_support::{round_trip, served};
    use kafka_protocol::messages::ApiKey;

    #[test]
    fn responses_encode_at_every_served_version() {
        let mut r = AddPartitionsToTxnResponse::default();
        let mut t = AddPartitionsToTxnTopicResult::default();
        t.results_by_partition
            .push(AddPartitionsToTxnPartitionResult::default());
        r.results_by_topic_v3_and_below.push(t);
        round_trip(&r, served(ApiKey::AddPartitionsToTxn));
        round_trip(
            &AddOffsetsToTxnResponse::default(),
            served(ApiKey::AddOffsetsToTxn),
        );
        round_trip(&EndTxnResponse::default(), served(ApiKey::EndTxn));
        let mut r = TxnOffsetCommitResponse::default();
        let mut t = TxnOffsetCommitResponseTopic::default();
        t.partitions
            .push(TxnOffsetCommitResponsePartition::default());
        r.topics.push(t);
        round_trip(&r, served(ApiKey::TxnOffsetCommit));
    }

    #[test]
    fn old_clients_hear_of_fencing_as_an_invalid_epoch() {
        let e = OpError::new(ErrorCode::ProducerFenced, "");
        assert_eq!(code_for(&e, 1, 2), ErrorCode::InvalidProducerEpoch.code());
        assert_eq!(code_for(&e, 2, 2), ErrorCode::ProducerFenced.code());
        let other = OpError::new(ErrorCode::InvalidTxnState, "");
        assert_eq!(code_for(&other, 0, 2), ErrorCode::InvalidTxnState.code());
    }
}
