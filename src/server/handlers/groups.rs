//! FindCoordinator, the group membership APIs (JoinGroup, SyncGroup, Heartbeat,
//! LeaveGroup) and DescribeGroups, answered by the shard that coordinates the group;
//! ListGroups, answered by every shard for the groups it coordinates.

use std::rc::Rc;
use std::time::{Duration, Instant};

use super::Reply;
use crate::clock::now_ms;
use crate::group::coordinator::{GroupError, JoinRequest, SyncRequest};
use crate::protocol::frame::RequestFrame;
use crate::protocol::messages::{
    DescribeGroupsRequest, DescribeGroupsResponse, FindCoordinatorRequest, FindCoordinatorResponse,
    GroupDescription, GroupStatusResponse, HeartbeatRequest, JoinGroupRequest, JoinGroupResponse,
    LeaveGroupRequest, SyncGroupRequest, SyncGroupResponse,
};
use crate::protocol::ErrorCode;
use crate::server::groups::coordinator_of;
use crate::server::shard::Shard;

/// Extra time a join or sync may wait beyond the rebalance timeout before it gives up.
pub(crate) const REPLY_SLACK: Duration = Duration::from_secs(5);

fn now() -> u64 {
    now_ms().max(0) as u64
}

/// `None` when this shard coordinates `group`, else why not.
pub(crate) fn not_here(shard: &Shard, group: &str) -> Option<(ErrorCode, String)> {
    if group.is_empty() {
        return Some((ErrorCode::InvalidGroupId, "empty group id".into()));
    }
    match coordinator_of(&shard.metadata.borrow(), group) {
        None => Some((
            ErrorCode::CoordinatorNotAvailable,
            "the offsets topic is not ready".into(),
        )),
        Some((broker, s)) if broker == shard.cfg.node_id && s as usize == shard.id => None,
        Some((broker, s)) => Some((
            ErrorCode::NotCoordinator,
            format!("group {group:?} is coordinated by broker {broker} shard {s}"),
        )),
    }
}

pub fn find_coordinator(shard: &Rc<Shard>, frame: &RequestFrame) -> Reply {
    let req: FindCoordinatorRequest = match frame.decode_meta() {
        Ok(r) => r,
        Err(e) => return e.into(),
    };
    let md = shard.metadata.borrow().clone();
    let mut resp = FindCoordinatorResponse {
        error_code: 0,
        message: String::new(),
        node_id: 0,
        host: String::new(),
        port: 0,
    };
    match coordinator_of(&md, &req.group)
        .and_then(|(b, s)| md.brokers.get(&b).map(|info| (info, s)))
    {
        Some((info, s)) if !req.group.is_empty() => {
            resp.node_id = info.node_id;
            resp.host = info.host.clone();
            resp.port = (u32::from(info.port) + s).min(u32::from(u16::MAX)) as u16;
        }
        _ => {
            let (code, msg) = not_here(shard, &req.group)
                .unwrap_or((ErrorCode::CoordinatorNotAvailable, String::new()));
            resp.error_code = code.code();
            resp.message = msg;
        }
    }
    Reply::meta(&resp)
}

pub(crate) async fn wait<T>(
    shard: &Shard,
    rx: flume::Receiver<Result<T, GroupError>>,
    limit: Duration,
) -> Result<T, GroupError> {
    let deadline = Instant::now() + limit;
    let got = futures_lite::future::or(async { Some(rx.recv_async().await) }, async {
        shard.deadlines.sleep_until(deadline).await;
        None
    })
    .await;
    match got {
        Some(Ok(r)) => r,
        Some(Err(_)) => Err(GroupError {
            code: ErrorCode::UnknownServerError,
            message: "the group went away".into(),
        }),
        None => {
            drop(rx);
            shard.groups.abandon_waiters();
            Err(GroupError {
                code: ErrorCode::RebalanceInProgress,
                message: "the rebalance did not complete in time: rejoin".into(),
            })
        }
    }
}

pub async fn join(shard: &Rc<Shard>, frame: &RequestFrame) -> Reply {
    let req: JoinGroupRequest = match frame.decode_meta() {
        Ok(r) => r,
        Err(e) => return e.into(),
    };
    let mut resp = JoinGroupResponse {
        error_code: 0,
        message: String::new(),
        generation: 0,
        protocol: String::new(),
        leader: String::new(),
        member_id: req.member_id.clone(),
        members: Vec::new(),
    };
    if let Some((code, msg)) = not_here(shard, &req.group) {
        resp.error_code = code.code();
        resp.message = msg;
        return Reply::meta(&resp);
    }
    let limit = Duration::from_millis(u64::from(req.rebalance_timeout_ms)) + REPLY_SLACK;
    let rx = shard.groups.join(
        now(),
        &req.group,
        JoinRequest {
            member_id: req.member_id,
            group_instance_id: req.group_instance_id,
            client_id: frame.header.client_id.clone(),
            session_timeout_ms: u64::from(req.session_timeout_ms),
            rebalance_timeout_ms: u64::from(req.rebalance_timeout_ms),
            protocol_type: req.protocol_type,
            protocols: req.protocols,
        },
    );
    match wait(shard, rx, limit).await {
        Ok(r) => {
            resp.generation = r.generation;
            resp.protocol = r.protocol;
            resp.leader = r.leader;
            resp.member_id = r.member_id;
            resp.members = r.members;
        }
        Err(e) => {
            resp.error_code = e.code.code();
            resp.message = e.message;
        }
    }
    Reply::meta(&resp)
}

pub async fn sync(shard: &Rc<Shard>, frame: &RequestFrame) -> Reply {
    let req: SyncGroupRequest = match frame.decode_meta() {
        Ok(r) => r,
        Err(e) => return e.into(),
    };
    let mut resp = SyncGroupResponse {
        error_code: 0,
        message: String::new(),
        assignment: Vec::new(),
    };
    if let Some((code, msg)) = not_here(shard, &req.group) {
        resp.error_code = code.code();
        resp.message = msg;
        return Reply::meta(&resp);
    }
    let sync = SyncRequest {
        member_id: req.member_id,
        generation: req.generation,
        assignments: req.assignments,
    };
    let result = match shard.groups.sync(now(), &req.group, sync) {
        Ok(rx) => wait(shard, rx, shard.cfg.max_produce_timeout).await,
        Err(e) => Err(e),
    };
    match result {
        Ok(a) => resp.assignment = a,
        Err(e) => {
            resp.error_code = e.code.code();
            resp.message = e.message;
        }
    }
    Reply::meta(&resp)
}

fn status(r: Result<(), GroupError>) -> Reply {
    let (error_code, message) = match r {
        Ok(()) => (0, String::new()),
        Err(e) => (e.code.code(), e.message),
    };
    Reply::meta(&GroupStatusResponse {
        error_code,
        message,
    })
}

pub fn list(shard: &Rc<Shard>) -> Reply {
    Reply::meta(&crate::protocol::messages::ListGroupsResponse {
        groups: shard.groups.list(),
    })
}

/// DescribeGroups: each group is described by this shard if it coordinates it, else
/// answered NOT_COORDINATOR (the client asks each group's coordinator).
pub fn describe(shard: &Rc<Shard>, frame: &RequestFrame) -> Reply {
    let req: DescribeGroupsRequest = match frame.decode_meta() {
        Ok(r) => r,
        Err(e) => return e.into(),
    };
    let groups = req
        .groups
        .into_iter()
        .map(|group| match not_here(shard, &group) {
            None => shard.groups.describe(&group),
            Some((code, message)) => GroupDescription {
                error_code: code.code(),
                message,
                group,
                state: String::new(),
                protocol_type: String::new(),
                protocol: String::new(),
                generation: 0,
                leader: String::new(),
                members: Vec::new(),
            },
        })
        .collect();
    Reply::meta(&DescribeGroupsResponse { groups })
}

pub fn heartbeat(shard: &Rc<Shard>, frame: &RequestFrame) -> Reply {
    let req: HeartbeatRequest = match frame.decode_meta() {
        Ok(r) => r,
        Err(e) => return e.into(),
    };
    if let Some((code, message)) = not_here(shard, &req.group) {
        return status(Err(GroupError { code, message }));
    }
    status(
        shard
            .groups
            .heartbeat(now(), &req.group, &req.member_id, req.generation),
    )
}

pub fn leave(shard: &Rc<Shard>, frame: &RequestFrame) -> Reply {
    let req: LeaveGroupRequest = match frame.decode_meta() {
        Ok(r) => r,
        Err(e) => return e.into(),
    };
    if let Some((code, message)) = not_here(shard, &req.group) {
        return status(Err(GroupError { code, message }));
    }
    status(shard.groups.leave(now(), &req.group, &req.member_id))
}
