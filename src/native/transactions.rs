//! The transaction APIs over the native protocol (keys 37-41: FindTxnCoordinator,
//! AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, TxnOffsetCommit; InitProducerId with a
//! transactional id is key 35): decode, call [`crate::broker::transactions`] (or
//! [`crate::broker::offsets::txn_commit`]), encode.

use std::rc::Rc;

use super::{status, Reply};
use crate::broker::{offsets, transactions, Shard};
use crate::protocol::frame::RequestFrame;
use crate::protocol::messages::{
    AddOffsetsToTxnRequest, AddPartitionsToTxnRequest, EndTxnRequest, FindTxnCoordinatorRequest,
    GroupStatusResponse, TxnOffsetCommitRequest,
};
use crate::protocol::ApiKey;
use crate::transactions::TopicPartition;

fn done(shard: &Rc<Shard>, api: ApiKey, r: &Result<(), crate::broker::OpError>) -> Reply {
    let (error_code, message) = status(shard, api, r);
    Reply::meta(&GroupStatusResponse {
        error_code,
        message,
    })
}

pub fn find_coordinator(shard: &Rc<Shard>, frame: &RequestFrame) -> Reply {
    let req: FindTxnCoordinatorRequest = match frame.decode_meta() {
        Ok(r) => r,
        Err(e) => return e.into(),
    };
    let found = transactions::coordinator(shard, &req.transactional_id);
    super::groups::coordinator_reply(shard, ApiKey::FindTxnCoordinator, found)
}

pub async fn add_partitions(shard: &Rc<Shard>, frame: &RequestFrame) -> Reply {
    let req: AddPartitionsToTxnRequest = match frame.decode_meta() {
        Ok(r) => r,
        Err(e) => return e.into(),
    };
    let partitions = req
        .partitions
        .into_iter()
        .map(|p| TopicPartition::new(p.topic, p.partition))
        .collect();
    let r = transactions::add_partitions(
        shard,
        &req.transactional_id,
        req.producer_id,
        req.producer_epoch,
        partitions,
    )
    .await;
    done(shard, ApiKey::AddPartitionsToTxn, &r)
}

pub async fn add_offsets(shard: &Rc<Shard>, frame: &RequestFrame) -> Reply {
    let req: AddOffsetsToTxnRequest = match frame.decode_meta() {
        Ok(r) => r,
        Err(e) => return e.into(),
    };
    let r = transactions::add_offsets(
        shard,
        &req.transactional_id,
        req.producer_id,
        req.producer_epoch,
        &req.group,
    )
    .await;
    done(shard, ApiKey::AddOffsetsToTxn, &r)
}

pub async fn end_txn(shard: &Rc<Shard>, frame: &RequestFrame) -> Reply {
    let req: EndTxnRequest = match frame.decode_meta() {
        Ok(r) => r,
        Err(e) => return e.into(),
    };
    let r = transactions::end_txn(
        shard,
        &req.transactional_id,
        req.producer_id,
        req.producer_epoch,
        req.commit,
    )
    .await;
    done(shard, ApiKey::EndTxn, &r)
}

pub async fn txn_offset_commit(shard: &Rc<Shard>, frame: &RequestFrame) -> Reply {
    let req: TxnOffsetCommitRequest = match frame.decode_meta() {
        Ok(r) => r,
        Err(e) => return e.into(),
    };
    let committed = super::offsets::committed_offsets(req.offsets);
    let r = offsets::txn_commit(
        shard,
        &req.group,
        req.producer_id,
        req.producer_epoch,
        &req.member_id,
        req.group_instance_id.as_deref(),
        req.generation,
        committed,
    )
    .await;
    done(shard, ApiKey::TxnOffsetCommit, &r)
}
