//! ACLs in the cluster metadata (`crate::auth::acl`'s bindings): created and deleted through
//! raft like any metadata, so every broker authorizes from its own applied copy and they
//! survive restarts. Kafka's CreateAcls adds bindings (one already there is kept once),
//! DeleteAcls removes every binding a filter matches.

use super::metadata::{Applied, ClusterMetadata, Command, MetadataError};
use crate::protocol::error_code::ErrorCode;

/// Bindings the metadata holds at most (every broker keeps a copy and scans it per check).
pub const MAX_ACLS: usize = 100_000;

impl ClusterMetadata {
    pub(super) fn validate_acls(&self, cmd: &Command) -> Result<(), MetadataError> {
        match cmd {
            Command::CreateAcls { acls } => {
                for a in acls {
                    a.validate().map_err(|e| {
                        MetadataError::new(ErrorCode::InvalidRequest, e.to_string())
                    })?;
                }
                let new = acls.iter().filter(|a| !self.acls.contains(*a)).count();
                if self.acls.len() + new > MAX_ACLS {
                    return Err(MetadataError::new(
                        ErrorCode::PolicyViolation,
                        format!("the cluster holds {MAX_ACLS} ACLs at most"),
                    ));
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// Applies a validated ACL command.
    pub(super) fn apply_acls(&mut self, cmd: &Command) -> Applied {
        match cmd {
            Command::CreateAcls { acls } => {
                self.acls.extend(acls.iter().cloned());
                Applied::AclsChanged {
                    deleted: Vec::new(),
                }
            }
            Command::DeleteAcls { filters } => {
                // Each filter's matches, as the bindings stood before this command.
                let deleted: Vec<Vec<_>> = filters
                    .iter()
                    .map(|f| self.acls.iter().filter(|a| f.matches(a)).cloned().collect())
                    .collect();
                self.acls.retain(|a| !filters.iter().any(|f| f.matches(a)));
                Applied::AclsChanged { deleted }
            }
            _ => Applied::AclsChanged {
                deleted: Vec::new(),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::acl::{
        AclBinding, AclFilter, Operation, PatternType, Permission, ResourceType, WILDCARD,
    };
    use crate::controller::metadata::MetadataLimits;

    fn binding(name: &str, principal: &str, op: Operation) -> AclBinding {
        AclBinding {
            resource_type: ResourceType::Topic,
            name: name.into(),
            pattern: PatternType::Literal,
            principal: principal.into(),
            host: WILDCARD.into(),
            operation: op,
            permission: Permission::Allow,
        }
    }

    #[test]
    fn acls_are_created_once_deleted_by_filter_and_survive_a_snapshot() {
        let limits = MetadataLimits::default();
        let mut m = ClusterMetadata::default();
        let a = binding("t", "User:alice", Operation::Read);
        let b = binding("t", "User:bob", Operation::Write);
        let create = Command::CreateAcls {
            acls: vec![a.clone(), b.clone(), a.clone()],
        };
        m.apply(1, &create, &limits).unwrap();
        m.apply(2, &create, &limits).unwrap();
        assert_eq!(m.acls.len(), 2);
        let json = serde_json::to_string(&m).unwrap();
        let back: ClusterMetadata = serde_json::from_str(&json).unwrap();
        assert_eq!(back.acls, m.acls);

        let mut f = AclFilter::any();
        f.principal = Some("User:bob".into());
        let applied = m
            .apply(3, &Command::DeleteAcls { filters: vec![f] }, &limits)
            .unwrap();
        assert_eq!(
            applied,
            Applied::AclsChanged {
                deleted: vec![vec![b]]
            }
        );
        assert_eq!(m.acls.iter().collect::<Vec<_>>(), vec![&a]);
        m.apply(
            4,
            &Command::DeleteAcls {
                filters: vec![AclFilter::any()],
            },
            &limits,
        )
        .unwrap();
        assert!(!serde_json::to_string(&m).unwrap().contains("acls"));
    }

    #[test]
    fn a_bad_binding_refuses_the_whole_command() {
        let mut m = ClusterMetadata::default();
        let bad = binding("t", "alice", Operation::Read);
        let e = m
            .apply(
                1,
                &Command::CreateAcls {
                    acls: vec![binding("t", "User:a", Operation::Read), bad],
                },
                &MetadataLimits::default(),
            )
            .unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidRequest);
        assert!(m.acls.is_empty());
    }
}
