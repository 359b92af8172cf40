//! CreateAcls, DescribeAcls and DeleteAcls (native keys 50-52) over [`crate::broker::acls`]:
//! what `rill acl add|list|remove` sends. The native listener has no authentication yet, so
//! these are not authorized: bind it where only operators reach it (loopback) when the Kafka
//! listener authenticates.

use std::rc::Rc;

use super::{status, Reply};
use crate::auth::acl::{AclBinding, AclFilter};
use crate::broker::{acls, request_timeout, OpError, Shard};
use crate::protocol::frame::RequestFrame;
use crate::protocol::messages::{
    AclEntry, AclFilterEntry, CreateAclsRequest, CreateAclsResponse, DeleteAclsRequest,
    DeleteAclsResponse, DescribeAclsRequest, DescribeAclsResponse,
};
use crate::protocol::{ApiKey, ErrorCode};

fn entry(a: &AclBinding) -> AclEntry {
    AclEntry::from_names(a.names())
}

fn binding(e: AclEntry) -> Result<AclBinding, OpError> {
    AclBinding::from_names(&e.into_names())
        .map_err(|why| OpError::new(ErrorCode::InvalidRequest, why))
}

fn filter(f: AclFilterEntry) -> Result<AclFilter, OpError> {
    AclFilter::from_names(&f.into_names())
        .map_err(|why| OpError::new(ErrorCode::InvalidRequest, why))
}

pub async fn create(shard: &Rc<Shard>, frame: &RequestFrame) -> Reply {
    let req: CreateAclsRequest = match frame.decode_meta() {
        Ok(r) => r,
        Err(e) => return e.into(),
    };
    let timeout = request_timeout(shard, req.timeout_ms);
    let r = match req.acls.into_iter().map(binding).collect() {
        Ok(bindings) => acls::create(shard, bindings, timeout).await,
        Err(e) => Err(e),
    };
    let (error_code, message) = status(shard, ApiKey::CreateAcls, &r);
    Reply::meta(&CreateAclsResponse {
        error_code,
        message,
    })
}

pub fn describe(shard: &Shard, frame: &RequestFrame) -> Reply {
    let req: DescribeAclsRequest = match frame.decode_meta() {
        Ok(r) => r,
        Err(e) => return e.into(),
    };
    let r = filter(req.filter).map(|f| acls::describe(shard, &f));
    let (error_code, message) = status(shard, ApiKey::DescribeAcls, &r);
    Reply::meta(&DescribeAclsResponse {
        error_code,
        message,
        acls: r.unwrap_or_default().iter().map(entry).collect(),
    })
}

pub async fn delete(shard: &Rc<Shard>, frame: &RequestFrame) -> Reply {
    let req: DeleteAclsRequest = match frame.decode_meta() {
        Ok(r) => r,
        Err(e) => return e.into(),
    };
    let timeout = request_timeout(shard, req.timeout_ms);
    let r = match filter(req.filter) {
        Ok(f) => acls::delete(shard, vec![f], timeout).await,
        Err(e) => Err(e),
    };
    let (error_code, message) = status(shard, ApiKey::DeleteAcls, &r);
    Reply::meta(&DeleteAclsResponse {
        error_code,
        message,
        deleted: r
            .unwrap_or_default()
            .into_iter()
            .flatten()
            .map(|a| entry(&a))
            .collect(),
    })
}
