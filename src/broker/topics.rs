//! Topic changes (create, delete, alter configs, add partitions, decommission) as proposals
//! to the controller. The answer waits until every shard of this broker applied the change,
//! so a client may use the topic right away.

use std::rc::Rc;
use std::time::{Duration, Instant};

use super::{recv_until, OpError, Shard};
use crate::controller::metadata::{validate_topic_name, Applied, Command, MetadataLimits};
use crate::protocol::error_code::ErrorCode;

/// How often a change re-checks whether all shards applied it.
const APPLY_POLL: Duration = Duration::from_millis(2);

/// Checks `cmd` against the current metadata without proposing it (a validate-only create).
pub fn validate(shard: &Shard, cmd: &Command) -> Result<(), OpError> {
    let limits = MetadataLimits {
        max_partitions_per_topic: shard.cfg.max_partitions_per_topic,
        max_partitions_per_shard: shard.cfg.max_partitions_per_shard,
    };
    shard
        .controller
        .metadata()
        .validate(cmd, &limits)
        .map_err(|e| OpError::new(e.code, e.message))
}

/// Proposes `cmd` and waits, up to `timeout`, until it is committed and every shard of this
/// broker applied it. A create whose partitions cannot all be created on disk is refused
/// with KAFKA_STORAGE_ERROR (and the topic deleted again).
pub async fn propose(shard: &Rc<Shard>, cmd: Command, timeout: Duration) -> Result<(), OpError> {
    propose_applied(shard, cmd, timeout).await.map(|_| ())
}

/// [`propose`], answering with what the command did.
pub async fn propose_applied(
    shard: &Rc<Shard>,
    cmd: Command,
    timeout: Duration,
) -> Result<Applied, OpError> {
    let deadline = Instant::now() + timeout;
    let creating = match &cmd {
        Command::CreateTopic { name, .. } => Some((name.clone(), true)),
        Command::AddPartitions { name, .. } => Some((name.clone(), false)),
        _ => None,
    };
    let rx = shard.controller.propose(cmd);
    match recv_until(shard, &rx, deadline).await {
        None => Err(OpError::new(
            ErrorCode::RequestTimedOut,
            "the controller did not answer in time",
        )),
        Some(Err(_)) => Err(OpError::new(
            ErrorCode::UnknownServerError,
            "the controller stopped",
        )),
        Some(Ok(Err(e))) => Err(OpError::new(e.code(), e.to_string())),
        Some(Ok(Ok(applied))) => {
            let index = shard.controller.metadata().applied_index;
            while !shard.applied.all_at_least(index) {
                if Instant::now() >= deadline {
                    return Err(OpError::new(
                        ErrorCode::RequestTimedOut,
                        "applied by the controller, but not yet by every shard",
                    ));
                }
                shard.deadlines.sleep(APPLY_POLL).await;
            }
            if let Some((name, rollback)) = creating {
                refuse_unopened(shard, &name, rollback, deadline).await?;
            }
            Ok(applied)
        }
    }
}

/// Creates `name` with the broker's defaults (`--num-partitions`,
/// `--default-replication-factor`) because a client asked for it while it did not exist, as
/// Kafka's auto-creation does. Refused when `--auto-create-topics` is off (the topic is just
/// unknown), for internal names and for invalid ones; a topic created meanwhile by someone
/// else is fine.
pub async fn auto_create(shard: &Rc<Shard>, name: &str) -> Result<(), OpError> {
    if !shard.cfg.auto_create_topics {
        return Err(OpError::new(
            ErrorCode::UnknownTopicOrPartition,
            format!("unknown topic '{name}' (--auto-create-topics is off)"),
        ));
    }
    if name.starts_with("__") {
        return Err(OpError::new(
            ErrorCode::UnknownTopicOrPartition,
            format!("unknown topic '{name}' (internal topics are not auto-created)"),
        ));
    }
    validate_topic_name(name).map_err(|e| OpError::new(e.code, e.message))?;
    let cmd = Command::CreateTopic {
        name: name.to_string(),
        partitions: shard.cfg.num_partitions,
        replication_factor: shard.cfg.default_replication_factor,
        configs: Default::default(),
    };
    log::info!("auto-creating topic '{name}'");
    match propose(shard, cmd, shard.cfg.max_produce_timeout).await {
        Err(e) if e.code == ErrorCode::TopicAlreadyExists => Ok(()),
        other => other,
    }
}

/// After a create (or add-partitions) every shard applied: if a new partition could not be
/// created on disk (a full disk, say), the request fails with KAFKA_STORAGE_ERROR naming it,
/// and a created topic is deleted again rather than left with partitions nobody can write.
async fn refuse_unopened(
    shard: &Rc<Shard>,
    name: &str,
    rollback: bool,
    deadline: Instant,
) -> Result<(), OpError> {
    let Some(id) = shard.controller.metadata().topic(name).map(|t| t.id) else {
        return Ok(());
    };
    let failed = shard.applied.open_failures_of(id);
    let Some((partition, why)) = failed.first() else {
        return Ok(());
    };
    let mut message = format!(
        "{} of the topic's partitions cannot be created on disk (partition {partition}: {why})",
        failed.len()
    );
    if rollback {
        let rx = shard.controller.propose(Command::DeleteTopic {
            name: name.to_string(),
        });
        match recv_until(shard, &rx, deadline).await {
            Some(Ok(Ok(_))) => message.push_str("; the topic was not created"),
            _ => message.push_str("; deleting the topic again did not complete"),
        }
    }
    Err(OpError::new(ErrorCode::KafkaStorageError, message))
}
