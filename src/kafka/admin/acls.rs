//! CreateAcls (30), DescribeAcls (29) and DeleteAcls (31): Kafka's tools (`kafka-acls`,
//! confluent-kafka's `create_acls`...) manage rill's ACLs, through the same controller
//! proposals as `rill acl` ([`crate::broker::acls`]). Kafka's codes for unknown enum values:
//! INVALID_REQUEST.

use std::rc::Rc;
use std::time::Duration;

use kafka_protocol::messages::create_acls_response::AclCreationResult;
use kafka_protocol::messages::delete_acls_response::{
    DeleteAclsFilterResult, DeleteAclsMatchingAcl,
};
use kafka_protocol::messages::describe_acls_response::{AclDescription, DescribeAclsResource};
use kafka_protocol::messages::{
    CreateAclsRequest, CreateAclsResponse, DeleteAclsRequest, DeleteAclsResponse,
    DescribeAclsRequest, DescribeAclsResponse,
};

use super::s;
use crate::auth::acl::{
    AclBinding, AclFilter, Operation, PatternFilter, PatternType, Permission, ResourceType,
};
use crate::broker::{acls, Shard};
use crate::protocol::ErrorCode;

/// How long one change may wait for the controller.
const ALTER_TIMEOUT: Duration = Duration::from_secs(30);

/// Kafka's ANY (1) as `None`; anything else must be a known value.
fn any_or<T>(code: i8, known: impl Fn(i8) -> Option<T>, what: &str) -> Result<Option<T>, String> {
    if code == 1 {
        return Ok(None);
    }
    known(code)
        .map(Some)
        .ok_or_else(|| format!("unknown {what} {code}"))
}

/// A wire filter, or why it is invalid.
#[allow(clippy::too_many_arguments)]
fn filter(
    resource_type: i8,
    name: Option<&str>,
    pattern: i8,
    principal: Option<&str>,
    host: Option<&str>,
    operation: i8,
    permission: i8,
) -> Result<AclFilter, String> {
    Ok(AclFilter {
        resource_type: any_or(resource_type, ResourceType::from_code, "resource type")?,
        name: name.map(str::to_string),
        pattern: PatternFilter::from_code(pattern)
            .ok_or_else(|| format!("unknown pattern type {pattern}"))?,
        principal: principal.map(str::to_string),
        host: host.map(str::to_string),
        operation: any_or(operation, Operation::from_code, "operation")?,
        permission: any_or(permission, Permission::from_code, "permission type")?,
    })
}

pub async fn create_acls(shard: &Rc<Shard>, req: CreateAclsRequest) -> CreateAclsResponse {
    let mut r = CreateAclsResponse::default();
    for c in req.creations {
        let binding = (|| {
            Ok::<_, String>(AclBinding {
                resource_type: ResourceType::from_code(c.resource_type)
                    .ok_or_else(|| format!("unknown resource type {}", c.resource_type))?,
                name: c.resource_name.to_string(),
                // v0 has no pattern type: literal (kafka-protocol's default, 3).
                pattern: PatternType::from_code(c.resource_pattern_type).ok_or_else(|| {
                    format!(
                        "pattern type {} (literal or prefixed)",
                        c.resource_pattern_type
                    )
                })?,
                principal: c.principal.to_string(),
                host: c.host.to_string(),
                operation: Operation::from_code(c.operation)
                    .ok_or_else(|| format!("unknown operation {}", c.operation))?,
                permission: Permission::from_code(c.permission_type)
                    .ok_or_else(|| format!("unknown permission type {}", c.permission_type))?,
            })
        })();
        let outcome = match binding {
            Err(why) => Err((ErrorCode::InvalidRequest, why)),
            Ok(b) => acls::create(shard, vec![b], ALTER_TIMEOUT)
                .await
                .map_err(|e| (e.code, e.message)),
        };
        let mut a = AclCreationResult::default();
        if let Err((code, message)) = outcome {
            a.error_code = code.code();
            a.error_message = Some(s(message));
        }
        r.results.push(a);
    }
    r
}

pub fn describe_acls(shard: &Shard, req: &DescribeAclsRequest) -> DescribeAclsResponse {
    let mut r = DescribeAclsResponse::default();
    let f = match filter(
        req.resource_type_filter,
        req.resource_name_filter.as_deref(),
        req.pattern_type_filter,
        req.principal_filter.as_deref(),
        req.host_filter.as_deref(),
        req.operation,
        req.permission_type,
    ) {
        Ok(f) => f,
        Err(why) => {
            r.error_code = ErrorCode::InvalidRequest.code();
            r.error_message = Some(s(why));
            return r;
        }
    };
    // Grouped by resource pattern, as Kafka answers.
    let mut resources: Vec<DescribeAclsResource> = Vec::new();
    for a in acls::describe(shard, &f) {
        let same = |x: &DescribeAclsResource| {
            x.resource_type == a.resource_type.code()
                && x.pattern_type == a.pattern.code()
                && *x.resource_name == *a.name
        };
        let at = match resources.iter().position(same) {
            Some(i) => i,
            None => {
                let mut x = DescribeAclsResource::default();
                x.resource_type = a.resource_type.code();
                x.resource_name = s(a.name.clone());
                x.pattern_type = a.pattern.code();
                resources.push(x);
                resources.len() - 1
            }
        };
        let mut d = AclDescription::default();
        d.principal = s(a.principal);
        d.host = s(a.host);
        d.operation = a.operation.code();
        d.permission_type = a.permission.code();
        resources[at].acls.push(d);
    }
    r.resources = resources;
    r
}

pub async fn delete_acls(shard: &Rc<Shard>, req: DeleteAclsRequest) -> DeleteAclsResponse {
    let mut r = DeleteAclsResponse::default();
    for f in req.filters {
        let mut out = DeleteAclsFilterResult::default();
        let parsed = filter(
            f.resource_type_filter,
            f.resource_name_filter.as_deref(),
            f.pattern_type_filter,
            f.principal_filter.as_deref(),
            f.host_filter.as_deref(),
            f.operation,
            f.permission_type,
        );
        let outcome = match parsed {
            Err(why) => Err((ErrorCode::InvalidRequest, why)),
            Ok(f) => acls::delete(shard, vec![f], ALTER_TIMEOUT)
                .await
                .map_err(|e| (e.code, e.message)),
        };
        match outcome {
            Err((code, message)) => {
                out.error_code = code.code();
                out.error_message = Some(s(message));
            }
            Ok(deleted) => {
                out.matching_acls = deleted
                    .into_iter()
                    .flatten()
                    .map(|a| {
                        let mut m = DeleteAclsMatchingAcl::default();
                        m.resource_type = a.resource_type.code();
                        m.resource_name = s(a.name);
                        m.pattern_type = a.pattern.code();
                        m.principal = s(a.principal);
                        m.host = s(a.host);
                        m.operation = a.operation.code();
                        m.permission_type = a.permission.code();
                        m
                    })
                    .collect();
            }
        }
        r.filter_results.push(out);
    }
    r
}
