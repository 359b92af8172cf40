//! ReassignPartitions, DrainBroker and ElectLeaders (native keys 25-27) over
//! [`crate::broker::reassignments`].

use std::rc::Rc;

use super::{status, Reply};
use crate::broker::{reassignments, request_timeout, Shard};
use crate::protocol::frame::RequestFrame;
use crate::protocol::messages::{
    DrainBrokerRequest, ElectLeadersRequest, ElectLeadersResponse, ReassignPartitionsRequest,
    ReassignPartitionsResponse, ReassignmentResult,
};
use crate::protocol::ApiKey;

pub async fn reassign(shard: &Rc<Shard>, frame: &RequestFrame) -> Reply {
    let req: ReassignPartitionsRequest = match frame.decode_meta() {
        Ok(r) => r,
        Err(e) => return e.into(),
    };
    let timeout = request_timeout(shard, req.timeout_ms);
    let mut partitions = Vec::with_capacity(req.partitions.len());
    for p in req.partitions {
        let r = reassignments::reassign(shard, &p.topic, p.partition, p.replicas.clone(), timeout)
            .await;
        let (error_code, message) = status(shard, ApiKey::ReassignPartitions, &r);
        partitions.push(ReassignmentResult {
            topic: p.topic,
            partition: p.partition,
            replicas: p.replicas.unwrap_or_default(),
            error_code,
            message,
        });
    }
    Reply::meta(&ReassignPartitionsResponse {
        error_code: 0,
        message: String::new(),
        partitions,
    })
}

pub async fn drain_broker(shard: &Rc<Shard>, frame: &RequestFrame) -> Reply {
    let req: DrainBrokerRequest = match frame.decode_meta() {
        Ok(r) => r,
        Err(e) => return e.into(),
    };
    let timeout = request_timeout(shard, req.timeout_ms);
    let drained = reassignments::drain_broker(shard, req.node_id, timeout).await;
    let (error_code, message) = status(shard, ApiKey::DrainBroker, &drained);
    let partitions = drained
        .unwrap_or_default()
        .into_iter()
        .map(|d| {
            let (error_code, message) = status(shard, ApiKey::DrainBroker, &d.result);
            ReassignmentResult {
                topic: d.topic,
                partition: d.partition,
                replicas: d.replicas,
                error_code,
                message,
            }
        })
        .collect();
    Reply::meta(&ReassignPartitionsResponse {
        error_code,
        message,
        partitions,
    })
}

pub async fn elect_leaders(shard: &Rc<Shard>, frame: &RequestFrame) -> Reply {
    let req: ElectLeadersRequest = match frame.decode_meta() {
        Ok(r) => r,
        Err(e) => return e.into(),
    };
    let timeout = request_timeout(shard, req.timeout_ms);
    let r = reassignments::elect_preferred(shard, req.topic, req.partition, timeout).await;
    let (error_code, message) = status(shard, ApiKey::ElectLeaders, &r);
    Reply::meta(&ElectLeadersResponse {
        error_code,
        message,
        changed: r.unwrap_or(0) as u32,
    })
}
