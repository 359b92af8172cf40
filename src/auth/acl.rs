//! Access control lists in Kafka's model (KIP-290 patterns), and the decision over them:
//! sans-IO, so the rules are tested without a broker.
//!
//! A binding allows or denies one principal (`User:alice`, or `User:*` for every user), from
//! one host (an IP address, or `*`), one operation on the resources one pattern names: a
//! resource type (topic, group, cluster, transactional id) and a name, literal (exactly it, or
//! `*` for every resource of the type) or prefixed (every name starting with it).
//!
//! The decision is Kafka's `AclAuthorizer`: a DENY that matches wins over any ALLOW; else an
//! ALLOW that matches grants, where ALLOW of READ, WRITE, DELETE or ALTER also grants
//! DESCRIBE, and ALLOW of ALTER_CONFIGS grants DESCRIBE_CONFIGS; ALL matches every operation;
//! no matching ALLOW: denied (`allow.everyone.if.no.acl.found=false`). Super users bypass
//! it (the caller's check).

use serde::{Deserialize, Serialize};

/// The one name of the cluster resource (Kafka's).
pub const CLUSTER_NAME: &str = "kafka-cluster";
/// The wildcard of a literal resource name, a principal's name or a host.
pub const WILDCARD: &str = "*";

/// A kind of resource (Kafka's `ResourceType` codes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum ResourceType {
    Topic,
    Group,
    Cluster,
    TransactionalId,
}

impl ResourceType {
    pub const ALL: [ResourceType; 4] = [
        ResourceType::Topic,
        ResourceType::Group,
        ResourceType::Cluster,
        ResourceType::TransactionalId,
    ];

    pub fn code(self) -> i8 {
        match self {
            ResourceType::Topic => 2,
            ResourceType::Group => 3,
            ResourceType::Cluster => 4,
            ResourceType::TransactionalId => 5,
        }
    }

    pub fn from_code(code: i8) -> Option<ResourceType> {
        ResourceType::ALL.into_iter().find(|t| t.code() == code)
    }

    /// The CLI's and Kafka's lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            ResourceType::Topic => "topic",
            ResourceType::Group => "group",
            ResourceType::Cluster => "cluster",
            ResourceType::TransactionalId => "transactional-id",
        }
    }

    pub fn from_name(s: &str) -> Option<ResourceType> {
        ResourceType::ALL
            .into_iter()
            .find(|t| t.name().eq_ignore_ascii_case(s))
    }
}

/// How a binding's resource name matches (Kafka's `PatternType` codes 3 and 4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum PatternType {
    Literal,
    Prefixed,
}

impl PatternType {
    pub fn code(self) -> i8 {
        match self {
            PatternType::Literal => 3,
            PatternType::Prefixed => 4,
        }
    }

    pub fn from_code(code: i8) -> Option<PatternType> {
        match code {
            3 => Some(PatternType::Literal),
            4 => Some(PatternType::Prefixed),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            PatternType::Literal => "literal",
            PatternType::Prefixed => "prefixed",
        }
    }

    pub fn from_name(s: &str) -> Option<PatternType> {
        [PatternType::Literal, PatternType::Prefixed]
            .into_iter()
            .find(|p| p.name().eq_ignore_ascii_case(s))
    }
}

/// An operation (Kafka's `AclOperation` codes 2..=12).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Operation {
    All,
    Read,
    Write,
    Create,
    Delete,
    Alter,
    Describe,
    ClusterAction,
    DescribeConfigs,
    AlterConfigs,
    IdempotentWrite,
}

impl Operation {
    pub const ALL: [Operation; 11] = [
        Operation::All,
        Operation::Read,
        Operation::Write,
        Operation::Create,
        Operation::Delete,
        Operation::Alter,
        Operation::Describe,
        Operation::ClusterAction,
        Operation::DescribeConfigs,
        Operation::AlterConfigs,
        Operation::IdempotentWrite,
    ];

    pub fn code(self) -> i8 {
        match self {
            Operation::All => 2,
            Operation::Read => 3,
            Operation::Write => 4,
            Operation::Create => 5,
            Operation::Delete => 6,
            Operation::Alter => 7,
            Operation::Describe => 8,
            Operation::ClusterAction => 9,
            Operation::DescribeConfigs => 10,
            Operation::AlterConfigs => 11,
            Operation::IdempotentWrite => 12,
        }
    }

    pub fn from_code(code: i8) -> Option<Operation> {
        Operation::ALL.into_iter().find(|o| o.code() == code)
    }

    /// Kafka's upper-snake name (`READ`, `DESCRIBE_CONFIGS`); the CLI takes it in any case.
    pub fn name(self) -> &'static str {
        match self {
            Operation::All => "ALL",
            Operation::Read => "READ",
            Operation::Write => "WRITE",
            Operation::Create => "CREATE",
            Operation::Delete => "DELETE",
            Operation::Alter => "ALTER",
            Operation::Describe => "DESCRIBE",
            Operation::ClusterAction => "CLUSTER_ACTION",
            Operation::DescribeConfigs => "DESCRIBE_CONFIGS",
            Operation::AlterConfigs => "ALTER_CONFIGS",
            Operation::IdempotentWrite => "IDEMPOTENT_WRITE",
        }
    }

    pub fn from_name(s: &str) -> Option<Operation> {
        let s = s.replace('-', "_");
        Operation::ALL
            .into_iter()
            .find(|o| o.name().eq_ignore_ascii_case(&s))
    }

    /// Whether an ALLOW of `self` grants `wanted` (ALL grants everything; the implied
    /// DESCRIBE and DESCRIBE_CONFIGS).
    fn grants(self, wanted: Operation) -> bool {
        self == wanted
            || self == Operation::All
            || (wanted == Operation::Describe
                && matches!(
                    self,
                    Operation::Read | Operation::Write | Operation::Delete | Operation::Alter
                ))
            || (wanted == Operation::DescribeConfigs && self == Operation::AlterConfigs)
    }
}

/// ALLOW or DENY (Kafka's `AclPermissionType` codes 3 and 2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Permission {
    Deny,
    Allow,
}

impl Permission {
    pub fn code(self) -> i8 {
        match self {
            Permission::Deny => 2,
            Permission::Allow => 3,
        }
    }

    pub fn from_code(code: i8) -> Option<Permission> {
        match code {
            2 => Some(Permission::Deny),
            3 => Some(Permission::Allow),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Permission::Deny => "DENY",
            Permission::Allow => "ALLOW",
        }
    }

    pub fn from_name(s: &str) -> Option<Permission> {
        [Permission::Deny, Permission::Allow]
            .into_iter()
            .find(|p| p.name().eq_ignore_ascii_case(s))
    }
}

/// Reads one of an enum's names, or says which are known.
fn named<T>(
    what: &str,
    v: &str,
    parse: impl Fn(&str) -> Option<T>,
    known: &str,
) -> Result<T, String> {
    parse(v).ok_or_else(|| format!("unknown {what} '{v}' ({known})"))
}

const RESOURCE_TYPES: &str = "topic, group, cluster, transactional-id";
const PATTERNS: &str = "literal, prefixed";
const OPERATIONS: &str = "ALL, READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, CLUSTER_ACTION, \
                          DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE";
const PERMISSIONS: &str = "ALLOW, DENY";

/// A binding's fields by name (what the native protocol and the CLI carry).
pub type BindingNames = [String; 7];

impl AclBinding {
    /// From its fields by name: resource type, name, pattern, principal, host, operation,
    /// permission (see [`AclBinding::names`]); not validated (see [`AclBinding::validate`]).
    pub fn from_names(n: &BindingNames) -> Result<AclBinding, String> {
        Ok(AclBinding {
            resource_type: named(
                "resource type",
                &n[0],
                ResourceType::from_name,
                RESOURCE_TYPES,
            )?,
            name: n[1].clone(),
            pattern: named("pattern type", &n[2], PatternType::from_name, PATTERNS)?,
            principal: n[3].clone(),
            host: n[4].clone(),
            operation: named("operation", &n[5], Operation::from_name, OPERATIONS)?,
            permission: named("permission", &n[6], Permission::from_name, PERMISSIONS)?,
        })
    }

    pub fn names(&self) -> BindingNames {
        [
            self.resource_type.name().to_string(),
            self.name.clone(),
            self.pattern.name().to_string(),
            self.principal.clone(),
            self.host.clone(),
            self.operation.name().to_string(),
            self.permission.name().to_string(),
        ]
    }
}

impl AclFilter {
    /// From optional fields by name, as [`AclBinding::from_names`]; the pattern may also be
    /// `any` (the default) or `match`.
    pub fn from_names(n: &[Option<String>; 7]) -> Result<AclFilter, String> {
        let opt = |i: usize| n[i].as_deref();
        Ok(AclFilter {
            resource_type: opt(0)
                .map(|v| named("resource type", v, ResourceType::from_name, RESOURCE_TYPES))
                .transpose()?,
            name: n[1].clone(),
            pattern: match opt(2) {
                None => PatternFilter::Any,
                Some(v) if v.eq_ignore_ascii_case("any") => PatternFilter::Any,
                Some(v) if v.eq_ignore_ascii_case("match") => PatternFilter::Match,
                Some(v) => PatternFilter::Exactly(named(
                    "pattern type",
                    v,
                    PatternType::from_name,
                    "any, match, literal, prefixed",
                )?),
            },
            principal: n[3].clone(),
            host: n[4].clone(),
            operation: opt(5)
                .map(|v| named("operation", v, Operation::from_name, OPERATIONS))
                .transpose()?,
            permission: opt(6)
                .map(|v| named("permission", v, Permission::from_name, PERMISSIONS))
                .transpose()?,
        })
    }
}

/// One ACL.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct AclBinding {
    pub resource_type: ResourceType,
    pub name: String,
    pub pattern: PatternType,
    /// `User:<name>` or `User:*`.
    pub principal: String,
    /// An IP address or `*`.
    pub host: String,
    pub operation: Operation,
    pub permission: Permission,
}

/// Why a binding is refused (Kafka answers INVALID_REQUEST).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AclError {
    #[error("principal {0:?} is not of the form User:<name>")]
    Principal(String),
    #[error("empty resource name")]
    EmptyName,
    #[error("the cluster resource is named {CLUSTER_NAME:?}, not {0:?}")]
    ClusterName(String),
    #[error("a prefixed pattern cannot be the wildcard {WILDCARD:?}")]
    PrefixedWildcard,
    #[error("empty host (an IP address or {WILDCARD:?})")]
    EmptyHost,
    #[error("{0} is longer than {MAX_ACL_FIELD} bytes")]
    TooLong(&'static str),
}

/// Longest resource name, principal or host in a binding (bytes).
pub const MAX_ACL_FIELD: usize = 1024;

impl AclBinding {
    /// Checks what Kafka checks of a new binding.
    pub fn validate(&self) -> Result<(), AclError> {
        for (what, v) in [
            ("resource name", &self.name),
            ("principal", &self.principal),
            ("host", &self.host),
        ] {
            if v.len() > MAX_ACL_FIELD {
                return Err(AclError::TooLong(what));
            }
        }
        match self.principal.split_once(':') {
            Some(("User", name)) if !name.is_empty() => {}
            _ => return Err(AclError::Principal(self.principal.clone())),
        }
        if self.name.is_empty() {
            return Err(AclError::EmptyName);
        }
        if self.resource_type == ResourceType::Cluster && self.name != CLUSTER_NAME {
            return Err(AclError::ClusterName(self.name.clone()));
        }
        if self.pattern == PatternType::Prefixed && self.name == WILDCARD {
            return Err(AclError::PrefixedWildcard);
        }
        if self.host.is_empty() {
            return Err(AclError::EmptyHost);
        }
        Ok(())
    }

    /// Whether this binding names `resource_type` `name`.
    fn covers(&self, resource_type: ResourceType, name: &str) -> bool {
        self.resource_type == resource_type
            && match self.pattern {
                PatternType::Literal => self.name == name || self.name == WILDCARD,
                PatternType::Prefixed => name.starts_with(&self.name),
            }
    }

    /// Whether this binding applies to `principal` connecting from `host`.
    fn applies_to(&self, principal: &str, host: &str) -> bool {
        (self.principal == principal || self.principal == ANY_USER)
            && (self.host == host || self.host == WILDCARD)
    }
}

/// The principal that matches every user.
pub const ANY_USER: &str = "User:*";

/// Whether `principal` from `host` may do `operation` on `resource_type` `name`, by `acls`.
pub fn authorize<'a>(
    acls: impl IntoIterator<Item = &'a AclBinding> + Clone,
    principal: &str,
    host: &str,
    operation: Operation,
    resource_type: ResourceType,
    name: &str,
) -> bool {
    let matching = |a: &&AclBinding| a.covers(resource_type, name) && a.applies_to(principal, host);
    let denied = acls.clone().into_iter().filter(matching).any(|a| {
        a.permission == Permission::Deny
            && (a.operation == operation || a.operation == Operation::All)
    });
    !denied
        && acls
            .into_iter()
            .filter(matching)
            .any(|a| a.permission == Permission::Allow && a.operation.grants(operation))
}

/// Whether `principal` from `host` may do `operation` on some resource of `resource_type`
/// (Kafka's `authorizeByResourceType`: InitProducerId for an idempotent producer needs WRITE
/// on any topic): an ALLOW of it on some pattern not wholly covered by a DENY of the same
/// pattern, or wildcard DENY.
pub fn authorize_any<'a>(
    acls: impl IntoIterator<Item = &'a AclBinding> + Clone,
    principal: &str,
    host: &str,
    operation: Operation,
    resource_type: ResourceType,
) -> bool {
    let applies = |a: &&AclBinding| {
        a.resource_type == resource_type
            && a.applies_to(principal, host)
            && (a.operation == operation
                || a.operation == Operation::All
                || (a.permission == Permission::Allow && a.operation.grants(operation)))
    };
    let denies = |allow: &AclBinding| {
        acls.clone().into_iter().filter(applies).any(|d| {
            d.permission == Permission::Deny
                && ((d.pattern == PatternType::Literal && d.name == WILDCARD)
                    || (d.pattern == PatternType::Prefixed && allow.name.starts_with(&d.name))
                    || (d.pattern == allow.pattern && d.name == allow.name))
        })
    };
    acls.clone()
        .into_iter()
        .filter(applies)
        .any(|a| a.permission == Permission::Allow && !denies(a))
}

/// A filter over bindings (Kafka's `AclBindingFilter`): `None` fields match anything;
/// `pattern` `Match` matches every binding that applies to the literal `name` (literal,
/// wildcard, prefixes of it).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AclFilter {
    pub resource_type: Option<ResourceType>,
    pub name: Option<String>,
    pub pattern: PatternFilter,
    pub principal: Option<String>,
    pub host: Option<String>,
    pub operation: Option<Operation>,
    pub permission: Option<Permission>,
}

/// How a filter matches patterns (Kafka's ANY 1, MATCH 2, LITERAL 3, PREFIXED 4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum PatternFilter {
    Any,
    Match,
    Exactly(PatternType),
}

impl PatternFilter {
    pub fn from_code(code: i8) -> Option<PatternFilter> {
        match code {
            1 => Some(PatternFilter::Any),
            2 => Some(PatternFilter::Match),
            c => PatternType::from_code(c).map(PatternFilter::Exactly),
        }
    }
}

impl AclFilter {
    /// The filter matching every binding.
    pub fn any() -> AclFilter {
        AclFilter {
            resource_type: None,
            name: None,
            pattern: PatternFilter::Any,
            principal: None,
            host: None,
            operation: None,
            permission: None,
        }
    }

    pub fn matches(&self, a: &AclBinding) -> bool {
        let name_ok = match (&self.name, self.pattern) {
            (None, PatternFilter::Any | PatternFilter::Match) => true,
            (None, PatternFilter::Exactly(p)) => a.pattern == p,
            (Some(n), PatternFilter::Any) => a.name == *n,
            (Some(n), PatternFilter::Exactly(p)) => a.pattern == p && a.name == *n,
            (Some(n), PatternFilter::Match) => match a.pattern {
                PatternType::Literal => a.name == *n || a.name == WILDCARD,
                PatternType::Prefixed => n.starts_with(&a.name),
            },
        };
        name_ok
            && self.resource_type.is_none_or(|t| t == a.resource_type)
            && self.principal.as_ref().is_none_or(|p| *p == a.principal)
            && self.host.as_ref().is_none_or(|h| *h == a.host)
            && self.operation.is_none_or(|o| o == a.operation)
            && self.permission.is_none_or(|p| p == a.permission)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acl(
        rt: ResourceType,
        name: &str,
        pattern: PatternType,
        principal: &str,
        op: Operation,
        perm: Permission,
    ) -> AclBinding {
        AclBinding {
            resource_type: rt,
            name: name.into(),
            pattern,
            principal: principal.into(),
            host: WILDCARD.into(),
            operation: op,
            permission: perm,
        }
    }

    use Operation::*;
    use PatternType::*;
    use Permission::*;
    use ResourceType::*;

    #[test]
    fn no_acl_means_denied_and_an_allow_grants_its_operation_and_implied_describe() {
        let none: Vec<AclBinding> = vec![];
        assert!(!authorize(&none, "User:alice", "1.2.3.4", Read, Topic, "t"));
        let acls = vec![acl(Topic, "t", Literal, "User:alice", Read, Allow)];
        assert!(authorize(&acls, "User:alice", "1.2.3.4", Read, Topic, "t"));
        assert!(authorize(
            &acls,
            "User:alice",
            "1.2.3.4",
            Describe,
            Topic,
            "t"
        ));
        assert!(!authorize(
            &acls,
            "User:alice",
            "1.2.3.4",
            Write,
            Topic,
            "t"
        ));
        assert!(!authorize(&acls, "User:bob", "1.2.3.4", Read, Topic, "t"));
        assert!(!authorize(
            &acls,
            "User:alice",
            "1.2.3.4",
            Read,
            Topic,
            "t2"
        ));
        assert!(!authorize(&acls, "User:alice", "1.2.3.4", Read, Group, "t"));
        let configs = vec![acl(Topic, "t", Literal, "User:a", AlterConfigs, Allow)];
        assert!(authorize(
            &configs,
            "User:a",
            "h",
            DescribeConfigs,
            Topic,
            "t"
        ));
        assert!(!authorize(&configs, "User:a", "h", Describe, Topic, "t"));
    }

    #[test]
    fn deny_wins_over_allow_and_deny_all_denies_every_operation() {
        let acls = vec![
            acl(Topic, "*", Literal, "User:*", All, Allow),
            acl(Topic, "secret", Literal, "User:bob", Read, Deny),
        ];
        assert!(authorize(&acls, "User:bob", "h", Read, Topic, "public"));
        assert!(!authorize(&acls, "User:bob", "h", Read, Topic, "secret"));
        assert!(authorize(&acls, "User:bob", "h", Write, Topic, "secret"));
        assert!(authorize(&acls, "User:alice", "h", Read, Topic, "secret"));
        let acls = vec![
            acl(Topic, "pay", Prefixed, "User:bob", All, Allow),
            acl(Topic, "pay", Prefixed, "User:bob", All, Deny),
        ];
        assert!(!authorize(
            &acls, "User:bob", "h", Describe, Topic, "payments"
        ));
    }

    #[test]
    fn prefixed_wildcard_and_host_patterns() {
        let mut a = acl(Topic, "pay.", Prefixed, "User:svc", Write, Allow);
        a.host = "10.0.0.1".into();
        let acls = vec![a, acl(Group, "*", Literal, "User:*", Read, Allow)];
        assert!(authorize(
            &acls, "User:svc", "10.0.0.1", Write, Topic, "pay.eu"
        ));
        assert!(!authorize(
            &acls, "User:svc", "10.0.0.2", Write, Topic, "pay.eu"
        ));
        assert!(!authorize(
            &acls, "User:svc", "10.0.0.1", Write, Topic, "pa"
        ));
        assert!(authorize(&acls, "User:anyone", "h", Read, Group, "g1"));
        assert!(authorize_any(&acls, "User:svc", "10.0.0.1", Write, Topic));
        assert!(!authorize_any(
            &acls,
            "User:other",
            "10.0.0.1",
            Write,
            Topic
        ));
        let denied = vec![
            acl(Topic, "x", Literal, "User:u", Write, Allow),
            acl(Topic, "*", Literal, "User:u", Write, Deny),
        ];
        assert!(!authorize_any(&denied, "User:u", "h", Write, Topic));
    }

    #[test]
    fn bad_bindings_are_refused() {
        let ok = acl(Topic, "t", Literal, "User:a", Read, Allow);
        assert_eq!(ok.validate(), Ok(()));
        let mut b = ok.clone();
        b.principal = "alice".into();
        assert!(matches!(b.validate(), Err(AclError::Principal(_))));
        let mut b = ok.clone();
        b.principal = "Group:x".into();
        assert!(matches!(b.validate(), Err(AclError::Principal(_))));
        let mut b = ok.clone();
        b.name = String::new();
        assert_eq!(b.validate(), Err(AclError::EmptyName));
        let b = acl(Cluster, "other", Literal, "User:a", Alter, Allow);
        assert!(matches!(b.validate(), Err(AclError::ClusterName(_))));
        let b = acl(Topic, "*", Prefixed, "User:a", Read, Allow);
        assert_eq!(b.validate(), Err(AclError::PrefixedWildcard));
        let mut b = ok.clone();
        b.host = "x".repeat(MAX_ACL_FIELD + 1);
        assert_eq!(b.validate(), Err(AclError::TooLong("host")));
    }

    #[test]
    fn filters_match_as_kafka_s() {
        let lit = acl(Topic, "orders", Literal, "User:a", Read, Allow);
        let wild = acl(Topic, "*", Literal, "User:a", Read, Allow);
        let pre = acl(Topic, "ord", Prefixed, "User:b", Write, Deny);
        let all = [&lit, &wild, &pre];
        let pick = |f: &AclFilter| all.iter().filter(|a| f.matches(a)).count();
        assert_eq!(pick(&AclFilter::any()), 3);
        let mut f = AclFilter::any();
        f.name = Some("orders".into());
        f.pattern = PatternFilter::Match;
        assert_eq!(pick(&f), 3);
        f.pattern = PatternFilter::Exactly(Literal);
        assert_eq!(pick(&f), 1);
        f.pattern = PatternFilter::Any;
        assert_eq!(pick(&f), 1);
        let mut f = AclFilter::any();
        f.principal = Some("User:b".into());
        assert_eq!(pick(&f), 1);
        f.permission = Some(Allow);
        assert_eq!(pick(&f), 0);
    }
}
