//! FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup, DescribeGroups and
//! ListGroups ([`crate::broker::groups`]).

use std::rc::Rc;

use super::{count_refusal, status, Reply};
use crate::broker::group_host::GroupSummary;
use crate::broker::groups::{self, Leaving};
use crate::broker::{OpError, Shard};
use crate::controller::metadata::BrokerInfo;
use crate::group::coordinator::{JoinRequest, SyncRequest};
use crate::protocol::frame::RequestFrame;
use crate::protocol::messages::{
    DescribeGroupsRequest, DescribeGroupsResponse, FindCoordinatorRequest, FindCoordinatorResponse,
    GroupDescription, GroupStatusResponse, HeartbeatRequest, JoinGroupRequest, JoinGroupResponse,
    LeaveGroupRequest, ListGroupsResponse, MemberInfo, SyncGroupRequest, SyncGroupResponse,
};
use crate::protocol::ApiKey;

pub fn find_coordinator(shard: &Rc<Shard>, frame: &RequestFrame) -> Reply {
    let req: FindCoordinatorRequest = match frame.decode_meta() {
        Ok(r) => r,
        Err(e) => return e.into(),
    };
    let found = groups::coordinator(shard, &req.group);
    coordinator_reply(shard, ApiKey::FindCoordinator, found)
}

/// Where a coordinator (of a group or a transactional id) is: its broker and the port of its
/// shard, or why it cannot be named.
pub(super) fn coordinator_reply(
    shard: &Shard,
    api: ApiKey,
    found: Result<(BrokerInfo, u32), OpError>,
) -> Reply {
    let (error_code, message) = status(shard, api, &found);
    let mut resp = FindCoordinatorResponse {
        error_code,
        message,
        node_id: 0,
        host: String::new(),
        port: 0,
    };
    if let Ok((info, s)) = found {
        resp.node_id = info.node_id;
        resp.host = info.host;
        resp.port = (u32::from(info.port) + s).min(u32::from(u16::MAX)) as u16;
    }
    Reply::meta(&resp)
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
    let join = JoinRequest {
        member_id: req.member_id,
        group_instance_id: req.group_instance_id,
        client_id: frame.header.client_id.clone(),
        session_timeout_ms: u64::from(req.session_timeout_ms),
        rebalance_timeout_ms: u64::from(req.rebalance_timeout_ms),
        protocol_type: req.protocol_type,
        protocols: req.protocols,
    };
    match groups::join(shard, &req.group, join).await {
        Ok(r) => {
            resp.generation = r.generation;
            resp.protocol = r.protocol;
            resp.leader = r.leader;
            resp.member_id = r.member_id;
            resp.members = r.members;
        }
        Err(e) => {
            count_refusal(shard, ApiKey::JoinGroup, e.code);
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
    let sync = SyncRequest {
        member_id: req.member_id,
        group_instance_id: req.group_instance_id,
        generation: req.generation,
        assignments: req.assignments,
    };
    let result = groups::sync(shard, &req.group, sync).await;
    let (error_code, message) = status(shard, ApiKey::SyncGroup, &result);
    Reply::meta(&SyncGroupResponse {
        error_code,
        message,
        assignment: result.unwrap_or_default(),
    })
}

fn group_status(shard: &Shard, api: ApiKey, r: Result<(), OpError>) -> Reply {
    let (error_code, message) = status(shard, api, &r);
    Reply::meta(&GroupStatusResponse {
        error_code,
        message,
    })
}

pub fn list(shard: &Rc<Shard>) -> Reply {
    Reply::meta(&ListGroupsResponse {
        groups: groups::list(shard)
            .into_iter()
            .map(|g| (g.group, g.state))
            .collect(),
    })
}

fn description(group: String, d: Result<GroupSummary, OpError>) -> GroupDescription {
    match d {
        Ok(d) => GroupDescription {
            error_code: 0,
            message: String::new(),
            group: d.group,
            state: d.state,
            protocol_type: d.protocol_type,
            protocol: d.protocol,
            generation: d.generation,
            leader: d.leader,
            members: d
                .members
                .into_iter()
                .map(|m| MemberInfo {
                    member_id: m.member_id,
                    group_instance_id: m.group_instance_id,
                    client_id: m.client_id,
                    assignment: m.assignment,
                })
                .collect(),
        },
        Err(e) => GroupDescription {
            error_code: e.code.code(),
            message: e.message,
            group,
            state: String::new(),
            protocol_type: String::new(),
            protocol: String::new(),
            generation: 0,
            leader: String::new(),
            members: Vec::new(),
        },
    }
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
        .map(|group| {
            let d = groups::describe(shard, &group);
            if let Err(e) = &d {
                count_refusal(shard, ApiKey::DescribeGroups, e.code);
            }
            description(group, d)
        })
        .collect();
    Reply::meta(&DescribeGroupsResponse { groups })
}

pub fn heartbeat(shard: &Rc<Shard>, frame: &RequestFrame) -> Reply {
    let req: HeartbeatRequest = match frame.decode_meta() {
        Ok(r) => r,
        Err(e) => return e.into(),
    };
    group_status(
        shard,
        ApiKey::Heartbeat,
        groups::heartbeat(
            shard,
            &req.group,
            &req.member_id,
            req.group_instance_id.as_deref(),
            req.generation,
        ),
    )
}

pub fn leave(shard: &Rc<Shard>, frame: &RequestFrame) -> Reply {
    let req: LeaveGroupRequest = match frame.decode_meta() {
        Ok(r) => r,
        Err(e) => return e.into(),
    };
    group_status(
        shard,
        ApiKey::LeaveGroup,
        groups::leave(shard, &req.group, Leaving::Member(&req.member_id)),
    )
}
