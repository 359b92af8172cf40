//! Calls to a consumer group's coordinator: find it, join, sync, heartbeat, leave, commit
//! and fetch offsets, describe the group. A refusal comes back as [`ClientError::Broker`]
//! with the coordinator's error code, so callers match on codes, never on response structs.

use std::net::{SocketAddr, ToSocketAddrs};
use std::time::Duration;

use super::{Client, ClientError};
use crate::protocol::messages::{
    DescribeGroupsRequest, DescribeGroupsResponse, FindCoordinatorRequest, FindCoordinatorResponse,
    FindTxnCoordinatorRequest, GroupStatusResponse, HeartbeatRequest, JoinGroupRequest,
    JoinGroupResponse, LeaveGroupRequest, OffsetCommitRequest, OffsetFetchRequest,
    OffsetFetchResponse, SyncGroupRequest, SyncGroupResponse,
};
pub use crate::protocol::messages::{GroupDescription, MemberInfo};
use crate::protocol::{ApiKey, ErrorCode};

/// A committed offset as OffsetFetch reports it: (topic, partition, offset or `None` when the
/// group never committed one, metadata).
pub type FetchedOffset = (String, u32, Option<u64>, String);

pub(super) fn check(code: i16, message: &str) -> Result<(), ClientError> {
    match ErrorCode::from_code(code) {
        ErrorCode::None => Ok(()),
        c => Err(ClientError::broker(c, message)),
    }
}

impl Client {
    /// The address of the shard coordinating `group`.
    pub fn find_coordinator(&mut self, group: &str) -> Result<SocketAddr, ClientError> {
        let req = FindCoordinatorRequest {
            group: group.to_string(),
        };
        self.coordinator_address(ApiKey::FindCoordinator, &req)
    }

    /// The address of the shard coordinating `transactional_id`'s transactions.
    pub fn find_txn_coordinator(
        &mut self,
        transactional_id: &str,
    ) -> Result<SocketAddr, ClientError> {
        let req = FindTxnCoordinatorRequest {
            transactional_id: transactional_id.to_string(),
        };
        self.coordinator_address(ApiKey::FindTxnCoordinator, &req)
    }

    /// Asks where a coordinator is (both answers are FindCoordinator's): the bootstrap
    /// broker, or any other the metadata named when it cannot be reached (a coordinator
    /// moves precisely when a broker dies).
    fn coordinator_address<Req>(
        &mut self,
        api: ApiKey,
        req: &Req,
    ) -> Result<SocketAddr, ClientError>
    where
        Req: crate::protocol::frame::EncodeMeta,
    {
        let r: FindCoordinatorResponse = self.call_any_broker(api, req)?;
        check(r.error_code, &r.message)?;
        (r.host.as_str(), r.port)
            .to_socket_addrs()
            .ok()
            .and_then(|mut a| a.next())
            .ok_or_else(|| {
                ClientError::Invalid(format!(
                    "coordinator address {}:{} resolves to nothing",
                    r.host, r.port
                ))
            })
    }

    /// JoinGroup; the answer may take up to the group's rebalance timeout, so the connection
    /// waits `wait` for it.
    pub fn join_group(
        &mut self,
        at: SocketAddr,
        req: &JoinGroupRequest,
        wait: Duration,
    ) -> Result<JoinGroupResponse, ClientError> {
        let (r, _): (JoinGroupResponse, _) = self.call_waiting(at, ApiKey::JoinGroup, req, wait)?;
        check(r.error_code, &r.message)?;
        Ok(r)
    }

    /// SyncGroup: the member's assignment bytes.
    pub fn sync_group(
        &mut self,
        at: SocketAddr,
        req: &SyncGroupRequest,
        wait: Duration,
    ) -> Result<Vec<u8>, ClientError> {
        let (r, _): (SyncGroupResponse, _) = self.call_waiting(at, ApiKey::SyncGroup, req, wait)?;
        check(r.error_code, &r.message)?;
        Ok(r.assignment)
    }

    /// Heartbeat for a member of `generation`.
    pub fn heartbeat(
        &mut self,
        at: SocketAddr,
        group: &str,
        member_id: &str,
        generation: u32,
    ) -> Result<(), ClientError> {
        self.heartbeat_as(at, group, member_id, None, generation)
    }

    /// Heartbeat for a member that joined with static instance id `instance`: if a newer
    /// member took the instance over, FENCED_INSTANCE_ID.
    pub fn heartbeat_as(
        &mut self,
        at: SocketAddr,
        group: &str,
        member_id: &str,
        instance: Option<&str>,
        generation: u32,
    ) -> Result<(), ClientError> {
        let req = HeartbeatRequest {
            group: group.to_string(),
            member_id: member_id.to_string(),
            group_instance_id: instance.map(str::to_string),
            generation,
        };
        let (r, _): (GroupStatusResponse, _) = self.call(at, ApiKey::Heartbeat, &req, &[])?;
        check(r.error_code, &r.message)
    }

    /// LeaveGroup.
    pub fn leave_group(
        &mut self,
        at: SocketAddr,
        group: &str,
        member_id: &str,
    ) -> Result<(), ClientError> {
        let req = LeaveGroupRequest {
            group: group.to_string(),
            member_id: member_id.to_string(),
        };
        let (r, _): (GroupStatusResponse, _) = self.call(at, ApiKey::LeaveGroup, &req, &[])?;
        check(r.error_code, &r.message)
    }

    /// OffsetCommit: `offsets` are (topic, partition, next offset to read, metadata). A
    /// member commits with its id and generation; a tool outside the group with an empty id
    /// and generation -1 (accepted only while the group has no members).
    pub fn commit_offsets(
        &mut self,
        at: SocketAddr,
        group: &str,
        member_id: &str,
        generation: i32,
        offsets: Vec<(String, u32, u64, String)>,
    ) -> Result<(), ClientError> {
        self.commit_offsets_as(at, group, member_id, None, generation, offsets)
    }

    /// OffsetCommit as a static member, naming its instance id: answered
    /// FENCED_INSTANCE_ID once another member took the instance over.
    pub fn commit_offsets_as(
        &mut self,
        at: SocketAddr,
        group: &str,
        member_id: &str,
        instance: Option<&str>,
        generation: i32,
        offsets: Vec<(String, u32, u64, String)>,
    ) -> Result<(), ClientError> {
        let req = OffsetCommitRequest {
            group: group.to_string(),
            member_id: member_id.to_string(),
            group_instance_id: instance.map(str::to_string),
            generation,
            offsets,
        };
        let (r, _): (GroupStatusResponse, _) = self.call(at, ApiKey::OffsetCommit, &req, &[])?;
        check(r.error_code, &r.message)
    }

    /// OffsetFetch: the committed offsets of `partitions` for `group`; with `partitions`
    /// empty, every offset the group has committed (sorted by topic and partition).
    pub fn fetch_offsets(
        &mut self,
        at: SocketAddr,
        group: &str,
        partitions: Vec<(String, u32)>,
    ) -> Result<Vec<FetchedOffset>, ClientError> {
        let req = OffsetFetchRequest {
            group: group.to_string(),
            partitions,
        };
        let (r, _): (OffsetFetchResponse, _) = self.call(at, ApiKey::OffsetFetch, &req, &[])?;
        check(r.error_code, &r.message)?;
        Ok(r.offsets
            .into_iter()
            .map(|(t, p, o, m)| (t, p, u64::try_from(o).ok(), m))
            .collect())
    }

    /// DescribeGroups for one group, asked of its coordinator: state, protocol, generation,
    /// leader and members with their assignment bytes (for consumers, decode them with
    /// [`crate::group::consumer_protocol::MemberAssignment::decode`]). A group the coordinator
    /// does not know comes back in state "Dead" with no members, not as an error.
    pub fn describe_group(&mut self, group: &str) -> Result<GroupDescription, ClientError> {
        let at = self.find_coordinator(group)?;
        let req = DescribeGroupsRequest {
            groups: vec![group.to_string()],
        };
        let (r, _): (DescribeGroupsResponse, _) =
            self.call(at, ApiKey::DescribeGroups, &req, &[])?;
        let d = r
            .groups
            .into_iter()
            .find(|d| d.group == group)
            .ok_or_else(|| {
                ClientError::Invalid(format!("the coordinator did not describe group '{group}'"))
            })?;
        check(d.error_code, &d.message)?;
        Ok(d)
    }

    /// A call whose answer may take `wait` (longer than the request timeout).
    fn call_waiting<Req, Resp>(
        &mut self,
        at: SocketAddr,
        api: ApiKey,
        req: &Req,
        wait: Duration,
    ) -> Result<(Resp, crate::protocol::ResponseFrame), ClientError>
    where
        Req: crate::protocol::frame::EncodeMeta,
        Resp: crate::protocol::frame::DecodeMeta,
    {
        let normal = self.config().request_timeout;
        self.connection(at)?
            .set_read_timeout(Some(wait.max(normal)));
        let r = self.call(at, api, req, &[]);
        // A failed call dropped the connection; only a surviving one needs its timeout back.
        if let Some(c) = self.connections.get(&at) {
            c.set_read_timeout(Some(normal));
        }
        r
    }
}
