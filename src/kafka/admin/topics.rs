//! CreateTopics and DeleteTopics: controller proposals ([`crate::broker::topics`]), the
//! same the native protocol makes, answered once every shard of this broker
//! applied them, so a Kafka client can use a topic as soon as CreateTopics returns. Topic
//! configs pass the same validation ([`crate::topic_config`]) as `rill topic create --config`.

use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::create_topics_response::{
    CreatableTopicConfigs, CreatableTopicResult,
};
use kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use kafka_protocol::messages::{
    CreatePartitionsRequest, CreatePartitionsResponse, CreateTopicsRequest, CreateTopicsResponse,
    DeleteTopicsRequest, DeleteTopicsResponse, TopicName,
};
use uuid::Uuid;

use super::configs::topic_entries;
use super::{refusal, s, Refusal};
use crate::broker::Shard;
use crate::broker::{request_timeout, topics};
use crate::controller::metadata::{ClusterMetadata, Command};
use crate::kafka::topic_uuid;
use crate::protocol::ErrorCode;
use crate::topic_config::TopicDefaults;

/// The controller command a Kafka topic creation asks for, or why it is refused before the
/// controller sees it. The controller then checks the name, existence, the partition limit,
/// the replication factor against the brokers and the configs.
/// `-1` counts take the broker's `--num-partitions` and `--default-replication-factor`.
fn plan_create(t: &CreatableTopic, defaults: (u32, u16)) -> Result<Command, Refusal> {
    let name = t.name.0.to_string();
    if !t.assignments.is_empty() {
        if t.num_partitions != -1 || t.replication_factor != -1 {
            return Err(refusal(
                ErrorCode::InvalidRequest,
                "both num_partitions/replication_factor and a manual assignment were given",
            ));
        }
        return Err((
            ResponseError::InvalidReplicaAssignment.code(),
            "manual replica assignment is not supported: rill places partitions itself \
             (give num_partitions and replication_factor)"
                .into(),
        ));
    }
    let partitions = count_or_default(
        "num_partitions",
        t.num_partitions,
        defaults.0,
        ErrorCode::InvalidPartitions,
    )?;
    // At least 1 and from an i16: it fits.
    let replication_factor = count_or_default(
        "replication_factor",
        t.replication_factor.into(),
        defaults.1.into(),
        ErrorCode::InvalidReplicationFactor,
    )? as u16;
    let mut configs = BTreeMap::new();
    for c in &t.configs {
        let key = c.name.to_string();
        let Some(value) = &c.value else {
            return Err(refusal(
                ErrorCode::InvalidConfig,
                format!("config {key:?} has no value"),
            ));
        };
        if configs.insert(key.clone(), value.to_string()).is_some() {
            return Err(refusal(
                ErrorCode::InvalidConfig,
                format!("config {key:?} is given twice"),
            ));
        }
    }
    Ok(Command::CreateTopic {
        name,
        partitions,
        replication_factor,
        configs,
    })
}

/// A count a request gives as `n`: at least 1, or -1 for `default`; else refused with `code`.
fn count_or_default(field: &str, n: i32, default: u32, code: ErrorCode) -> Result<u32, Refusal> {
    match n {
        -1 => Ok(default),
        n if n >= 1 => Ok(n as u32),
        n => Err(refusal(
            code,
            format!("{field} {n}: must be at least 1, or -1 for the broker default ({default})"),
        )),
    }
}

/// Names given more than once in one request (Kafka refuses each with INVALID_REQUEST).
fn duplicates<'a>(names: impl Iterator<Item = &'a str>) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let mut dup = BTreeSet::new();
    for n in names {
        if !seen.insert(n) {
            dup.insert(n.to_string());
        }
    }
    dup
}

fn create_result(name: &TopicName, outcome: Result<(), Refusal>) -> CreatableTopicResult {
    let mut r = CreatableTopicResult::default();
    r.name = name.clone();
    r.error_message = None;
    r.configs = None;
    if let Err((code, message)) = outcome {
        r.error_code = code;
        r.error_message = Some(s(message));
    }
    r
}

/// Fills in what a created (or validated) topic looks like (v5+: partitions, replication
/// factor, effective configs; v7: topic id).
fn describe_created(
    r: &mut CreatableTopicResult,
    cmd: &Command,
    defaults: &TopicDefaults,
    id: Option<u64>,
) {
    let Command::CreateTopic {
        partitions,
        replication_factor,
        configs,
        ..
    } = cmd
    else {
        return;
    };
    r.num_partitions = *partitions as i32;
    r.replication_factor = *replication_factor as i16;
    r.configs = Some(
        topic_entries(configs, defaults)
            .into_iter()
            .map(|e| {
                let mut c = CreatableTopicConfigs::default();
                c.name = s(e.name);
                c.value = Some(s(e.value));
                c.read_only = e.read_only;
                c.config_source = e.source;
                c
            })
            .collect(),
    );
    if let Some(id) = id {
        r.topic_id = topic_uuid(id);
    }
}

pub async fn create_topics(shard: &Rc<Shard>, req: CreateTopicsRequest) -> CreateTopicsResponse {
    let timeout = request_timeout(shard, u32::try_from(req.timeout_ms).unwrap_or(0));
    let dup = duplicates(req.topics.iter().map(|t| t.name.0.as_str()));
    let mut reported = BTreeSet::new();
    let mut response = CreateTopicsResponse::default();
    for t in &req.topics {
        let name = t.name.0.to_string();
        if dup.contains(&name) {
            if reported.insert(name) {
                let refused = refusal(ErrorCode::InvalidRequest, "duplicate topic name");
                response.topics.push(create_result(&t.name, Err(refused)));
            }
            continue;
        }
        let defaults = (
            shard.cfg.num_partitions,
            shard.cfg.default_replication_factor,
        );
        let cmd = match plan_create(t, defaults) {
            Ok(cmd) => cmd,
            Err(refused) => {
                response.topics.push(create_result(&t.name, Err(refused)));
                continue;
            }
        };
        let outcome = if req.validate_only {
            topics::validate(shard, &cmd)
        } else {
            topics::propose(shard, cmd.clone(), timeout).await
        }
        .map_err(|e| (e.code.code(), e.message));
        let ok = outcome.is_ok();
        let mut result = create_result(&t.name, outcome);
        if ok {
            let id = if req.validate_only {
                None
            } else {
                shard.metadata.borrow().topic(&name).map(|t| t.id)
            };
            describe_created(&mut result, &cmd, &shard.cfg.topic_defaults, id);
        }
        response.topics.push(result);
    }
    response
}

/// One topic a DeleteTopics request names: by name (all versions) or by id (v6+).
#[derive(Debug, Clone, PartialEq)]
enum Deletion {
    /// To propose: the name and the topic's id (nil when unknown: the controller refuses it).
    Propose(String, Uuid),
    /// Refused before the controller: (name, id, code, message).
    Refused(Option<String>, Uuid, i16, String),
}

/// Resolves what a DeleteTopics request names against the metadata, with Kafka's refusals:
/// neither or both of name and id, unknown ids, duplicates.
fn plan_deletions(md: &ClusterMetadata, req: &DeleteTopicsRequest) -> Vec<Deletion> {
    let mut asked: Vec<(Option<String>, Uuid)> = req
        .topic_names
        .iter()
        .map(|n| (Some(n.0.to_string()), Uuid::nil()))
        .collect();
    asked.extend(
        req.topics
            .iter()
            .map(|t| (t.name.as_ref().map(|n| n.0.to_string()), t.topic_id)),
    );
    let id_of = |name: &str| md.topic(name).map_or(Uuid::nil(), |t| topic_uuid(t.id));
    let mut plan: Vec<Deletion> = asked
        .into_iter()
        .map(|(name, id)| match (name, id.is_nil()) {
            (Some(name), true) => {
                let id = id_of(&name);
                Deletion::Propose(name, id)
            }
            (Some(name), false) => Deletion::Refused(
                Some(name),
                id,
                ErrorCode::InvalidRequest.code(),
                "give a topic name or a topic id, not both".into(),
            ),
            (None, true) => Deletion::Refused(
                None,
                id,
                ErrorCode::InvalidRequest.code(),
                "neither a topic name nor a topic id was given".into(),
            ),
            (None, false) => match md.topics.values().find(|t| topic_uuid(t.id) == id) {
                Some(t) => Deletion::Propose(t.name.clone(), id),
                None => Deletion::Refused(
                    None,
                    id,
                    ErrorCode::UnknownTopicId.code(),
                    format!("no topic has id {id}"),
                ),
            },
        })
        .collect();
    let dup = duplicates(plan.iter().filter_map(|d| match d {
        Deletion::Propose(name, _) => Some(name.as_str()),
        Deletion::Refused(..) => None,
    }));
    let mut reported = BTreeSet::new();
    plan.retain_mut(|d| {
        let Deletion::Propose(name, id) = d else {
            return true;
        };
        if !dup.contains(name.as_str()) {
            return true;
        }
        let first = reported.insert(name.clone());
        *d = Deletion::Refused(
            Some(name.clone()),
            *id,
            ErrorCode::InvalidRequest.code(),
            "duplicate topic name".into(),
        );
        first
    });
    plan
}

pub async fn delete_topics(
    shard: &Rc<Shard>,
    version: i16,
    req: DeleteTopicsRequest,
) -> DeleteTopicsResponse {
    let timeout = request_timeout(shard, u32::try_from(req.timeout_ms).unwrap_or(0));
    let plan = plan_deletions(&shard.metadata.borrow(), &req);
    let mut response = DeleteTopicsResponse::default();
    for d in plan {
        let mut r = DeletableTopicResult::default();
        let (name, id, code, message) = match d {
            Deletion::Refused(name, id, code, message) => (name, id, code, message),
            Deletion::Propose(name, id) => {
                let cmd = Command::DeleteTopic { name: name.clone() };
                let (code, message) = match topics::propose(shard, cmd, timeout).await {
                    Ok(()) => (0, String::new()),
                    Err(e) => (e.code.code(), e.message),
                };
                (Some(name), id, code, message)
            }
        };
        r.name = match name {
            Some(n) => Some(TopicName(s(n))),
            // Named by an id we do not know (v6+): null, as Kafka answers.
            None if version >= 6 => None,
            // Before v6 the name is not nullable (and every topic is named by it).
            None => Some(TopicName(s(""))),
        };
        r.topic_id = id;
        r.error_code = code;
        r.error_message = (code != 0).then(|| s(message));
        response.responses.push(r);
    }
    response
}

/// CreatePartitions: each topic grown to its new count ([`Command::AddPartitions`]); rill
/// places the new partitions itself, so a manual assignment is refused.
pub async fn create_partitions(
    shard: &Rc<Shard>,
    req: &CreatePartitionsRequest,
) -> CreatePartitionsResponse {
    let timeout = request_timeout(shard, u32::try_from(req.timeout_ms).unwrap_or(0));
    let dup = duplicates(req.topics.iter().map(|t| t.name.0.as_str()));
    let mut reported = BTreeSet::new();
    let mut response = CreatePartitionsResponse::default();
    for t in &req.topics {
        let name = t.name.0.to_string();
        let outcome = if dup.contains(&name) {
            if !reported.insert(name) {
                continue;
            }
            Err(refusal(ErrorCode::InvalidRequest, "duplicate topic name"))
        } else if t.assignments.is_some() {
            Err((
                ResponseError::InvalidReplicaAssignment.code(),
                "manual replica assignment is not supported: rill places partitions itself".into(),
            ))
        } else {
            match u32::try_from(t.count) {
                Err(_) => Err(refusal(
                    ErrorCode::InvalidPartitions,
                    format!("count {}", t.count),
                )),
                Ok(count) => {
                    let cmd = Command::AddPartitions { name, count };
                    if req.validate_only {
                        topics::validate(shard, &cmd)
                    } else {
                        topics::propose(shard, cmd, timeout).await
                    }
                    .map_err(|e| (e.code.code(), e.message))
                }
            }
        };
        let mut r = CreatePartitionsTopicResult::default();
        r.name = t.name.clone();
        if let Err((code, message)) = outcome {
            r.error_code = code;
            r.error_message = Some(s(message));
        }
        response.results.push(r);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kafka::admin::test_support::{metadata, round_trip, served};
    use kafka_protocol::messages::create_topics_request::{
        CreatableReplicaAssignment, CreatableTopicConfig,
    };
    use kafka_protocol::messages::delete_topics_request::DeleteTopicState;
    use kafka_protocol::messages::ApiKey;

    fn topic(
        name: &str,
        partitions: i32,
        rf: i16,
        configs: &[(&str, Option<&str>)],
    ) -> CreatableTopic {
        let mut t = CreatableTopic::default();
        t.name = TopicName(s(name));
        t.num_partitions = partitions;
        t.replication_factor = rf;
        t.configs = configs
            .iter()
            .map(|(k, v)| {
                let mut c = CreatableTopicConfig::default();
                c.name = s(*k);
                c.value = v.map(s);
                c
            })
            .collect();
        t
    }

    fn code_of(r: Result<Command, Refusal>) -> i16 {
        r.unwrap_err().0
    }

    #[test]
    fn create_plans_apply_kafka_defaults_and_refuse_bad_shapes() {
        let Ok(Command::CreateTopic {
            partitions,
            replication_factor,
            configs,
            ..
        }) = plan_create(&topic("t", -1, -1, &[("retention.ms", Some("5"))]), (1, 1))
        else {
            panic!("not planned")
        };
        assert_eq!((partitions, replication_factor), (1, 1));
        let Ok(Command::CreateTopic { partitions, .. }) =
            plan_create(&topic("t", -1, 1, &[]), (6, 1))
        else {
            panic!("not planned")
        };
        assert_eq!(partitions, 6, "-1 takes --num-partitions");
        assert_eq!(configs["retention.ms"], "5");
        let Ok(Command::CreateTopic { partitions, .. }) =
            plan_create(&topic("t", 7, 1, &[]), (1, 1))
        else {
            panic!()
        };
        assert_eq!(partitions, 7);
        assert_eq!(code_of(plan_create(&topic("t", 0, 1, &[]), (1, 1))), 37);
        assert_eq!(code_of(plan_create(&topic("t", -2, 1, &[]), (1, 1))), 37);
        assert_eq!(code_of(plan_create(&topic("t", 1, 0, &[]), (1, 1))), 38);
        assert_eq!(code_of(plan_create(&topic("t", 1, -3, &[]), (1, 1))), 38);
        assert_eq!(
            code_of(plan_create(
                &topic("t", 1, 1, &[("retention.ms", None)]),
                (1, 1)
            )),
            40
        );
        assert_eq!(
            code_of(plan_create(
                &topic(
                    "t",
                    1,
                    1,
                    &[("retention.ms", Some("1")), ("retention.ms", Some("2"))]
                ),
                (1, 1)
            )),
            40
        );
        let mut manual = topic("t", -1, -1, &[]);
        manual.assignments = vec![CreatableReplicaAssignment::default()];
        assert_eq!(code_of(plan_create(&manual, (1, 1))), 39);
        manual.num_partitions = 3;
        assert_eq!(code_of(plan_create(&manual, (1, 1))), 42);
    }

    fn deletion_request(names: &[&str], by_state: &[(Option<&str>, Uuid)]) -> DeleteTopicsRequest {
        let mut r = DeleteTopicsRequest::default();
        r.topic_names = names.iter().map(|n| TopicName(s(*n))).collect();
        r.topics = by_state
            .iter()
            .map(|(n, id)| {
                let mut t = DeleteTopicState::default();
                t.name = n.map(|n| TopicName(s(n)));
                t.topic_id = *id;
                t
            })
            .collect();
        r
    }

    #[test]
    fn deletions_resolve_ids_and_refuse_duplicates_and_ambiguity() {
        let md = metadata();
        let plan = plan_deletions(&md, &deletion_request(&["a", "nope", "b", "b"], &[]));
        assert_eq!(
            plan,
            vec![
                Deletion::Propose("a".into(), topic_uuid(1)),
                Deletion::Propose("nope".into(), Uuid::nil()),
                Deletion::Refused(
                    Some("b".into()),
                    topic_uuid(2),
                    42,
                    "duplicate topic name".into()
                ),
            ]
        );
        let unknown = Uuid::from_u128(7);
        let plan = plan_deletions(
            &md,
            &deletion_request(
                &[],
                &[
                    (None, topic_uuid(2)),
                    (None, unknown),
                    (None, Uuid::nil()),
                    (Some("a"), topic_uuid(1)),
                ],
            ),
        );
        assert_eq!(plan[0], Deletion::Propose("b".into(), topic_uuid(2)));
        assert!(matches!(&plan[1], Deletion::Refused(None, id, 100, _) if *id == unknown));
        assert!(matches!(&plan[2], Deletion::Refused(None, _, 42, _)));
        assert!(matches!(&plan[3], Deletion::Refused(Some(n), _, 42, _) if n == "a"));
    }

    /// Both responses encode at every served version and decode back.
    #[test]
    fn responses_encode_at_every_served_version() {
        let mut created = create_result(&TopicName(s("t")), Ok(()));
        let cmd = plan_create(&topic("t", 2, 1, &[("retention.ms", Some("10"))]), (1, 1)).unwrap();
        describe_created(&mut created, &cmd, &TopicDefaults::default(), Some(5));
        let failed = create_result(&TopicName(s("u")), Err((36, "exists".into())));
        let mut create = CreateTopicsResponse::default();
        create.topics = vec![created, failed];
        round_trip(&create, served(ApiKey::CreateTopics));
        let mut deleted = DeleteTopicsResponse::default();
        let mut d = DeletableTopicResult::default();
        d.name = Some(TopicName(s("t")));
        deleted.responses.push(d);
        round_trip(&deleted, served(ApiKey::DeleteTopics));
    }
}
