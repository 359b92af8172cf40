//! OffsetForLeaderEpoch ([`crate::broker::leader_epochs`]).

use std::rc::Rc;

use super::{count_refusal, Reply};
use crate::broker::leader_epochs::{asked_epoch, offset_for_leader_epoch};
use crate::broker::Shard;
use crate::protocol::frame::RequestFrame;
use crate::protocol::messages::{
    OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse, OffsetForLeaderEpochResult,
    NO_LEADER_EPOCH,
};
use crate::protocol::{ApiKey, ErrorCode};
use crate::replication::NO_EPOCH;

pub fn offset_for_leader_epoch_api(shard: &Rc<Shard>, frame: &RequestFrame) -> Reply {
    let req: OffsetForLeaderEpochRequest = match frame.decode_meta() {
        Ok(r) => r,
        Err(e) => return e.into(),
    };
    let partitions = req
        .partitions
        .iter()
        .map(|q| {
            let mut r = OffsetForLeaderEpochResult {
                topic: q.topic.clone(),
                partition: q.partition,
                error_code: 0,
                message: String::new(),
                leader_epoch: NO_LEADER_EPOCH,
                end_offset: -1,
            };
            let current = asked_epoch(q.current_leader_epoch);
            let Ok(asked) = u32::try_from(q.leader_epoch) else {
                count_refusal(
                    shard,
                    ApiKey::OffsetForLeaderEpoch,
                    ErrorCode::InvalidRequest,
                );
                r.error_code = ErrorCode::InvalidRequest.code();
                r.message = format!("bad leader epoch {}", q.leader_epoch);
                return r;
            };
            match offset_for_leader_epoch(shard, &q.topic, q.partition, current, asked) {
                Ok(end) => {
                    r.leader_epoch = if end.epoch == NO_EPOCH {
                        NO_LEADER_EPOCH
                    } else {
                        i32::try_from(end.epoch).unwrap_or(i32::MAX)
                    };
                    r.end_offset = i64::try_from(end.end_offset).unwrap_or(i64::MAX);
                }
                Err(e) => {
                    count_refusal(shard, ApiKey::OffsetForLeaderEpoch, e.code);
                    r.error_code = e.code.code();
                    r.message = e.message;
                }
            }
            r
        })
        .collect();
    Reply::meta(&OffsetForLeaderEpochResponse { partitions })
}
