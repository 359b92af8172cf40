//! AlterConfigs (replace a resource's settings) and IncrementalAlterConfigs (set, delete,
//! append, subtract one setting at a time): topic settings change through one controller
//! proposal per resource ([`Command::ChangeTopicConfig`]), validated as `rill topic create
//! --config` is. Broker settings are flags: they are refused, not silently dropped.

use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;

use kafka_protocol::messages::{
    alter_configs_response, incremental_alter_configs_response, AlterConfigsRequest,
    AlterConfigsResponse, IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse,
};
use kafka_protocol::protocol::StrBytes;

use super::configs::{RESOURCE_BROKER, RESOURCE_TOPIC};
use super::{refusal, s, Refusal};
use crate::broker::{topics, Shard};
use crate::controller::metadata::Command;
use crate::protocol::ErrorCode;

/// IncrementalAlterConfigs operations (Kafka's `AlterConfigOp.OpType`).
const OP_SET: i8 = 0;
const OP_DELETE: i8 = 1;
const OP_APPEND: i8 = 2;
const OP_SUBTRACT: i8 = 3;

/// What one resource asks: settings to set and to remove, or why it is refused before the
/// controller sees it.
struct Change {
    set: BTreeMap<String, String>,
    unset: BTreeSet<String>,
}

impl Change {
    fn new() -> Change {
        Change {
            set: BTreeMap::new(),
            unset: BTreeSet::new(),
        }
    }

    /// Takes one key; a key named twice in one resource is refused, as Kafka does.
    fn take(&mut self, key: &str, value: Option<String>) -> Result<(), Refusal> {
        if self.set.contains_key(key) || self.unset.contains(key) {
            return Err(refusal(
                ErrorCode::InvalidRequest,
                format!("config {key:?} is given twice"),
            ));
        }
        match value {
            Some(v) => {
                self.set.insert(key.to_string(), v);
            }
            None => {
                self.unset.insert(key.to_string());
            }
        }
        Ok(())
    }
}

/// The topic a resource names, or the refusal for a broker or unknown resource type.
fn topic_of(resource_type: i8, name: &StrBytes) -> Result<String, Refusal> {
    match resource_type {
        RESOURCE_TOPIC => Ok(name.to_string()),
        RESOURCE_BROKER => Err(refusal(
            ErrorCode::InvalidRequest,
            "broker settings are startup flags (rill broker --help): they cannot be changed \
             while it runs",
        )),
        t => Err(refusal(
            ErrorCode::InvalidRequest,
            format!("resource type {t} cannot be altered"),
        )),
    }
}

/// Validates (`validate_only`) or proposes one resource's change.
async fn apply(
    shard: &Rc<Shard>,
    topic: String,
    change: Change,
    replace: bool,
    validate_only: bool,
) -> Result<(), Refusal> {
    let cmd = Command::ChangeTopicConfig {
        name: topic,
        set: change.set,
        unset: change.unset,
        replace,
    };
    let timeout = shard.cfg.max_produce_timeout;
    if validate_only {
        topics::validate(shard, &cmd)
    } else {
        topics::propose(shard, cmd, timeout).await
    }
    .map_err(|e| (e.code.code(), e.message))
}

fn outcome(r: Result<(), Refusal>) -> (i16, Option<StrBytes>) {
    match r {
        Ok(()) => (0, None),
        Err((code, message)) => (code, Some(s(message))),
    }
}

pub async fn alter_configs(shard: &Rc<Shard>, req: &AlterConfigsRequest) -> AlterConfigsResponse {
    let mut r = AlterConfigsResponse::default();
    for res in &req.resources {
        let planned = topic_of(res.resource_type, &res.resource_name).and_then(|topic| {
            let mut change = Change::new();
            for c in &res.configs {
                // AlterConfigs replaces every setting: a null value is simply not set.
                if let Some(v) = &c.value {
                    change.take(&c.name, Some(v.to_string()))?;
                }
            }
            Ok((topic, change))
        });
        let result = match planned {
            Ok((topic, change)) => apply(shard, topic, change, true, req.validate_only).await,
            Err(e) => Err(e),
        };
        let mut rr = alter_configs_response::AlterConfigsResourceResponse::default();
        rr.resource_type = res.resource_type;
        rr.resource_name = res.resource_name.clone();
        (rr.error_code, rr.error_message) = outcome(result);
        r.responses.push(rr);
    }
    r
}

pub async fn incremental_alter_configs(
    shard: &Rc<Shard>,
    req: &IncrementalAlterConfigsRequest,
) -> IncrementalAlterConfigsResponse {
    let mut r = IncrementalAlterConfigsResponse::default();
    for res in &req.resources {
        let planned = topic_of(res.resource_type, &res.resource_name).and_then(|topic| {
            let mut change = Change::new();
            for c in &res.configs {
                let key = c.name.as_str();
                match (c.config_operation, &c.value) {
                    (OP_SET, Some(v)) => change.take(key, Some(v.to_string()))?,
                    (OP_SET, None) => {
                        return Err(refusal(
                            ErrorCode::InvalidRequest,
                            format!("SET {key:?} without a value"),
                        ))
                    }
                    (OP_DELETE, _) => change.take(key, None)?,
                    // No rill topic setting is a list (Kafka allows these only on lists).
                    (OP_APPEND | OP_SUBTRACT, _) => {
                        return Err(refusal(
                            ErrorCode::InvalidConfig,
                            format!("{key:?} is not a list: APPEND and SUBTRACT do not apply"),
                        ))
                    }
                    (op, _) => {
                        return Err(refusal(
                            ErrorCode::InvalidRequest,
                            format!("unknown config operation {op} for {key:?}"),
                        ))
                    }
                }
            }
            Ok((topic, change))
        });
        let result = match planned {
            Ok((topic, change)) => apply(shard, topic, change, false, req.validate_only).await,
            Err(e) => Err(e),
        };
        let mut rr = incremental_alter_configs_response::AlterConfigsResourceResponse::default();
        rr.resource_type = res.resource_type;
        rr.resource_name = res.resource_name.clone();
        (rr.error_code, rr.error_message) = outcome(result);
        r.responses.push(rr);
    }
    r
}
