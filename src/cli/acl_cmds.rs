//! `rill acl add|list|remove`: ACL bindings kept by the controller, with the flags of Kafka's
//! `kafka-acls` (`--allow-principal`, `--deny-principal`, `--operation`, `--topic`,
//! `--group`, `--transactional-id`, `--cluster`, `--resource-pattern-type`).

use super::args::{AclCommand, AclResource};
use crate::auth::acl::{AclBinding, AclFilter, CLUSTER_NAME, WILDCARD};
use crate::client::Client;
use crate::protocol::messages::{AclEntry, AclFilterEntry};

pub fn run(client: &mut Client, cmd: AclCommand) -> Result<(), String> {
    match cmd {
        AclCommand::Add {
            resource,
            allow_principal,
            deny_principal,
            host,
            operation,
        } => {
            let (resource_type, name) = named(&resource)?
                .ok_or("name a resource: --topic, --group, --transactional-id or --cluster")?;
            let pattern = resource
                .resource_pattern_type
                .clone()
                .unwrap_or_else(|| "literal".into());
            let hosts = if host.is_empty() {
                vec![WILDCARD.to_string()]
            } else {
                host
            };
            let principals = allow_principal
                .iter()
                .map(|p| (p, "ALLOW"))
                .chain(deny_principal.iter().map(|p| (p, "DENY")));
            let mut bindings = Vec::new();
            for (principal, permission) in principals {
                for h in &hosts {
                    for op in &operation {
                        let b = AclBinding::from_names(&[
                            resource_type.to_string(),
                            name.clone(),
                            pattern.clone(),
                            principal.clone(),
                            h.clone(),
                            op.clone(),
                            permission.to_string(),
                        ])?;
                        b.validate().map_err(|e| e.to_string())?;
                        bindings.push(b);
                    }
                }
            }
            if bindings.is_empty() {
                return Err("name at least one --allow-principal or --deny-principal".into());
            }
            let entries: Vec<AclEntry> = bindings
                .iter()
                .map(|b| AclEntry::from_names(b.names()))
                .collect();
            client
                .create_acls(entries)
                .map_err(|e| format!("cannot add ACLs: {e}"))?;
            for b in &bindings {
                println!("added\t{}", line(&AclEntry::from_names(b.names())));
            }
            Ok(())
        }
        AclCommand::List {
            resource,
            principal,
        } => {
            let f = filter(&resource, principal, None)?;
            let acls = client
                .describe_acls(f)
                .map_err(|e| format!("cannot list ACLs: {e}"))?;
            for a in &acls {
                println!("{}", line(a));
            }
            Ok(())
        }
        AclCommand::Remove {
            resource,
            principal,
            operation,
        } => {
            if named(&resource)?.is_none() && principal.is_none() {
                return Err(
                    "name a resource (--topic, --group, --transactional-id, --cluster) \
                            or a --principal to remove"
                        .into(),
                );
            }
            let f = filter(&resource, principal, operation)?;
            let removed = client
                .delete_acls(f)
                .map_err(|e| format!("cannot remove ACLs: {e}"))?;
            for a in &removed {
                println!("removed\t{}", line(a));
            }
            Ok(())
        }
    }
}

/// The one resource the flags name, if any.
fn named(r: &AclResource) -> Result<Option<(&'static str, String)>, String> {
    let mut named = Vec::new();
    if let Some(t) = &r.topic {
        named.push(("topic", t.clone()));
    }
    if let Some(g) = &r.group {
        named.push(("group", g.clone()));
    }
    if let Some(t) = &r.transactional_id {
        named.push(("transactional-id", t.clone()));
    }
    if r.cluster {
        named.push(("cluster", CLUSTER_NAME.to_string()));
    }
    match named.len() {
        0 | 1 => Ok(named.pop()),
        _ => Err("name one resource: --topic, --group, --transactional-id or --cluster".into()),
    }
}

fn filter(
    r: &AclResource,
    principal: Option<String>,
    operation: Option<String>,
) -> Result<AclFilterEntry, String> {
    let resource = named(r)?;
    let entry = AclFilterEntry {
        resource_type: resource.as_ref().map(|(t, _)| t.to_string()),
        name: resource.map(|(_, n)| n),
        pattern: r.resource_pattern_type.clone(),
        principal,
        host: None,
        operation,
        permission: None,
    };
    // Checked here for a one-line error before anything is sent.
    AclFilter::from_names(&entry.clone().into_names())?;
    Ok(entry)
}

/// One binding as a line: principal, permission, operation, host, resource.
fn line(a: &AclEntry) -> String {
    format!(
        "{}\t{}\t{}\thost={}\t{}:{}:{}",
        a.principal, a.permission, a.operation, a.host, a.resource_type, a.pattern, a.name
    )
}
