//! ACLs: the authorization check of a request path (from this shard's applied metadata, no
//! cross-core hop) and changes as controller proposals, answered once every shard applied
//! them. The decision itself is `crate::auth::acl`'s.

use std::rc::Rc;
use std::time::Duration;

use super::topics::{propose, propose_applied};
use super::{OpError, Shard};
use crate::auth::acl::{self, AclBinding, AclFilter, Operation, ResourceType, CLUSTER_NAME};
use crate::controller::metadata::{Applied, Command};
use crate::protocol::ErrorCode;

/// Who is asking: the principal (`User:<name>`) and the address it connects from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Caller {
    pub principal: String,
    pub host: String,
}

impl Caller {
    pub fn user(name: &str, host: String) -> Caller {
        Caller {
            principal: format!("User:{name}"),
            host,
        }
    }
}

/// Whether `caller` may do `op` on `resource_type` `name`: super users may do anything;
/// everyone else needs an ACL ([`acl::authorize`]).
pub fn authorized(
    shard: &Shard,
    caller: &Caller,
    op: Operation,
    resource_type: ResourceType,
    name: &str,
) -> bool {
    shard.cfg.super_users.contains(&caller.principal)
        || acl::authorize(
            &shard.metadata.borrow().acls,
            &caller.principal,
            &caller.host,
            op,
            resource_type,
            name,
        )
}

/// [`authorized`] on the cluster resource.
pub fn on_cluster(shard: &Shard, caller: &Caller, op: Operation) -> bool {
    authorized(shard, caller, op, ResourceType::Cluster, CLUSTER_NAME)
}

/// Whether `caller` may do `op` on some resource of `resource_type` ([`acl::authorize_any`]).
pub fn on_any(shard: &Shard, caller: &Caller, op: Operation, resource_type: ResourceType) -> bool {
    shard.cfg.super_users.contains(&caller.principal)
        || acl::authorize_any(
            &shard.metadata.borrow().acls,
            &caller.principal,
            &caller.host,
            op,
            resource_type,
        )
}

/// The bindings `filter` matches.
pub fn describe(shard: &Shard, filter: &AclFilter) -> Vec<AclBinding> {
    shard
        .metadata
        .borrow()
        .acls
        .iter()
        .filter(|a| filter.matches(a))
        .cloned()
        .collect()
}

/// Adds bindings (each checked: INVALID_REQUEST names what is wrong).
pub async fn create(
    shard: &Rc<Shard>,
    acls: Vec<AclBinding>,
    timeout: Duration,
) -> Result<(), OpError> {
    propose(shard, Command::CreateAcls { acls }, timeout).await
}

/// Removes what the filters match; per filter, the bindings it removed.
pub async fn delete(
    shard: &Rc<Shard>,
    filters: Vec<AclFilter>,
    timeout: Duration,
) -> Result<Vec<Vec<AclBinding>>, OpError> {
    match propose_applied(shard, Command::DeleteAcls { filters }, timeout).await? {
        Applied::AclsChanged { deleted } => Ok(deleted),
        other => Err(OpError::new(
            ErrorCode::UnknownServerError,
            format!("the controller answered a DeleteAcls with {other:?}"),
        )),
    }
}
