//! DescribeClientQuotas (48) and AlterClientQuotas (49): Kafka's tools (`kafka-configs
//! --entity-type users|clients`, confluent-kafka) manage rill's client quotas, through the
//! same controller proposals as `rill quota` ([`crate::broker::quotas`]).

use std::collections::BTreeMap;
use std::rc::Rc;
use std::time::Duration;

use kafka_protocol::messages::describe_client_quotas_response::{EntityData, EntryData, ValueData};
use kafka_protocol::messages::{
    alter_client_quotas_response, AlterClientQuotasRequest, AlterClientQuotasResponse,
    DescribeClientQuotasRequest, DescribeClientQuotasResponse,
};

use super::s;
use crate::broker::{quotas, Shard};
use crate::protocol::ErrorCode;
use crate::quota::{EntityName, QuotaEntity};

const ALTER_TIMEOUT: Duration = Duration::from_secs(30);
const USER: &str = "user";
const CLIENT_ID: &str = "client-id";

/// An entity from Kafka's (type, name) pairs (a null name: the default).
fn entity<'a>(
    parts: impl Iterator<Item = (&'a str, Option<&'a str>)>,
) -> Result<QuotaEntity, String> {
    let mut e = QuotaEntity {
        user: None,
        client_id: None,
    };
    for (kind, name) in parts {
        let n = match name {
            Some(n) => EntityName::Name(n.to_string()),
            None => EntityName::Default,
        };
        let slot = match kind {
            USER => &mut e.user,
            CLIENT_ID => &mut e.client_id,
            other => {
                return Err(format!(
                    "entity type '{other}' (user and client-id are served)"
                ))
            }
        };
        if slot.replace(n).is_some() {
            return Err(format!("entity type '{kind}' named twice"));
        }
    }
    Ok(e)
}

fn entity_data(e: &QuotaEntity) -> Vec<EntityData> {
    let part = |kind: &str, n: &Option<EntityName>| {
        n.as_ref().map(|n| {
            let mut d = EntityData::default();
            d.entity_type = s(kind);
            d.entity_name = match n {
                EntityName::Name(n) => Some(s(n.clone())),
                EntityName::Default => None,
            };
            d
        })
    };
    [part(USER, &e.user), part(CLIENT_ID, &e.client_id)]
        .into_iter()
        .flatten()
        .collect()
}

pub fn describe_client_quotas(
    shard: &Shard,
    req: &DescribeClientQuotasRequest,
) -> DescribeClientQuotasResponse {
    let mut r = DescribeClientQuotasResponse::default();
    // Each component: match_type 0 exactly the name, 1 the default, 2 any (a name or the
    // default); `strict`: entities with no other parts than the components'.
    let mut wanted = Vec::new();
    for c in &req.components {
        let kind = c.entity_type.to_string();
        if kind != USER && kind != CLIENT_ID {
            r.error_code = ErrorCode::InvalidRequest.code();
            r.error_message = Some(s(format!("entity type '{kind}'")));
            return r;
        }
        wanted.push((kind, c.match_type, c._match.as_ref().map(|m| m.to_string())));
    }
    let matches = |e: &QuotaEntity| {
        let part = |kind: &str| if kind == USER { &e.user } else { &e.client_id };
        let each = wanted
            .iter()
            .all(|(kind, match_type, name)| match (part(kind), match_type) {
                (None, _) => false,
                (Some(EntityName::Name(n)), 0) => name.as_deref() == Some(n.as_str()),
                (Some(EntityName::Default), 1) => true,
                (Some(_), 2) => true,
                _ => false,
            });
        let strict_ok = !req.strict
            || [USER, CLIENT_ID]
                .iter()
                .all(|k| part(k).is_none() || wanted.iter().any(|(w, _, _)| w == k));
        each && strict_ok
    };
    r.entries = Some(
        quotas::list(shard)
            .into_iter()
            .filter(|(e, _)| matches(e))
            .map(|(e, values)| {
                let mut d = EntryData::default();
                d.entity = entity_data(&e);
                d.values = values
                    .into_iter()
                    .map(|(k, v)| {
                        let mut x = ValueData::default();
                        x.key = s(k);
                        x.value = v;
                        x
                    })
                    .collect();
                d
            })
            .collect(),
    );
    r
}

pub async fn alter_client_quotas(
    shard: &Rc<Shard>,
    req: AlterClientQuotasRequest,
) -> AlterClientQuotasResponse {
    let mut r = AlterClientQuotasResponse::default();
    for entry in req.entries {
        let parsed = entity(
            entry
                .entity
                .iter()
                .map(|p| (&*p.entity_type, p.entity_name.as_deref())),
        );
        let mut set = BTreeMap::new();
        let mut remove = Vec::new();
        for op in &entry.ops {
            if op.remove {
                remove.push(op.key.to_string());
            } else {
                set.insert(op.key.to_string(), op.value);
            }
        }
        let outcome = match parsed {
            Err(why) => Err((ErrorCode::InvalidRequest, why)),
            Ok(e) if req.validate_only => crate::quota::validate(&e, &set, &remove)
                .map_err(|err| (ErrorCode::InvalidRequest, err.to_string())),
            Ok(e) => quotas::alter(shard, e, set, remove, ALTER_TIMEOUT)
                .await
                .map_err(|err| (err.code, err.message)),
        };
        let mut out = alter_client_quotas_response::EntryData::default();
        out.entity = entry
            .entity
            .iter()
            .map(|p| {
                let mut d = alter_client_quotas_response::EntityData::default();
                d.entity_type = p.entity_type.clone();
                d.entity_name = p.entity_name.clone();
                d
            })
            .collect();
        if let Err((code, message)) = outcome {
            out.error_code = code.code();
            out.error_message = Some(s(message));
        }
        r.entries.push(out);
    }
    r
}
