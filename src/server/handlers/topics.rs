//! CreateTopics and DeleteTopics: proposals to the controller. The answer waits until every
//! shard of this broker applied the change, so a client may use the topic right away.

use std::collections::BTreeMap;
use std::rc::Rc;
use std::time::{Duration, Instant};

use super::Reply;
use crate::controller::metadata::Command;
use crate::protocol::frame::RequestFrame;
use crate::protocol::messages::{
    AlterTopicConfigsRequest, CreatePartitionsRequest, CreateTopicsRequest,
    DecommissionPartitionRequest, DeleteTopicsRequest, TopicResult, TopicResults,
};
use crate::protocol::ErrorCode;
use crate::server::shard::Shard;

/// How often a create/delete re-checks whether all shards applied it.
const APPLY_POLL: Duration = Duration::from_millis(2);

pub async fn create(shard: &Rc<Shard>, frame: &RequestFrame) -> Reply {
    let req: CreateTopicsRequest = match frame.decode_meta() {
        Ok(r) => r,
        Err(e) => return e.into(),
    };
    let timeout = timeout_of(shard, req.timeout_ms);
    let mut results = Vec::with_capacity(req.topics.len());
    for t in req.topics {
        let cmd = Command::CreateTopic {
            name: t.name.clone(),
            partitions: t.partitions,
            replication_factor: t.replication_factor,
            configs: t.configs.into_iter().collect::<BTreeMap<_, _>>(),
        };
        results.push(propose(shard, t.name, cmd, timeout).await);
    }
    Reply::meta(&TopicResults { topics: results })
}

pub async fn delete(shard: &Rc<Shard>, frame: &RequestFrame) -> Reply {
    let req: DeleteTopicsRequest = match frame.decode_meta() {
        Ok(r) => r,
        Err(e) => return e.into(),
    };
    let timeout = timeout_of(shard, req.timeout_ms);
    let mut results = Vec::with_capacity(req.topics.len());
    for name in req.topics {
        let cmd = Command::DeleteTopic { name: name.clone() };
        results.push(propose(shard, name, cmd, timeout).await);
    }
    Reply::meta(&TopicResults { topics: results })
}

pub async fn alter_config(shard: &Rc<Shard>, frame: &RequestFrame) -> Reply {
    let req: AlterTopicConfigsRequest = match frame.decode_meta() {
        Ok(r) => r,
        Err(e) => return e.into(),
    };
    let timeout = timeout_of(shard, req.timeout_ms);
    let cmd = Command::AlterTopicConfig {
        name: req.topic.clone(),
        configs: req.configs.into_iter().collect(),
    };
    one_topic(shard, req.topic, cmd, timeout).await
}

pub async fn create_partitions(shard: &Rc<Shard>, frame: &RequestFrame) -> Reply {
    let req: CreatePartitionsRequest = match frame.decode_meta() {
        Ok(r) => r,
        Err(e) => return e.into(),
    };
    let timeout = timeout_of(shard, req.timeout_ms);
    let cmd = Command::AddPartitions {
        name: req.topic.clone(),
        count: req.count,
    };
    one_topic(shard, req.topic, cmd, timeout).await
}

pub async fn decommission(shard: &Rc<Shard>, frame: &RequestFrame) -> Reply {
    let req: DecommissionPartitionRequest = match frame.decode_meta() {
        Ok(r) => r,
        Err(e) => return e.into(),
    };
    let timeout = timeout_of(shard, req.timeout_ms);
    let cmd = Command::DecommissionPartition {
        name: req.topic.clone(),
        partition: req.partition,
    };
    one_topic(shard, req.topic, cmd, timeout).await
}

/// Proposes one topic command and answers with its result.
async fn one_topic(shard: &Rc<Shard>, name: String, cmd: Command, timeout: Duration) -> Reply {
    let result = propose(shard, name, cmd, timeout).await;
    Reply::meta(&TopicResults {
        topics: vec![result],
    })
}

pub(crate) fn timeout_of(shard: &Shard, ms: u32) -> Duration {
    let max = shard.cfg.max_produce_timeout;
    if ms == 0 {
        max
    } else {
        Duration::from_millis(u64::from(ms)).min(max)
    }
}

pub(crate) async fn propose(
    shard: &Rc<Shard>,
    name: String,
    cmd: Command,
    timeout: Duration,
) -> TopicResult {
    let deadline = Instant::now() + timeout;
    let creating = match &cmd {
        Command::CreateTopic { .. } => Some(true),
        Command::AddPartitions { .. } => Some(false),
        _ => None,
    };
    let rx = shard.controller.propose(cmd);
    let outcome = futures_lite::future::or(async { Some(rx.recv_async().await) }, async {
        shard.deadlines.sleep_until(deadline).await;
        None
    })
    .await;
    let (code, message) = match outcome {
        None => (
            ErrorCode::RequestTimedOut,
            "the controller did not answer in time".to_string(),
        ),
        Some(Err(_)) => (
            ErrorCode::UnknownServerError,
            "the controller stopped".to_string(),
        ),
        Some(Ok(Err(e))) => (e.code(), e.to_string()),
        Some(Ok(Ok(_))) => {
            let index = shard.controller.metadata().applied_index;
            while !shard.applied.all_at_least(index) {
                if Instant::now() >= deadline {
                    return TopicResult {
                        name,
                        error_code: ErrorCode::RequestTimedOut.code(),
                        message: "applied by the controller, but not yet by every shard".into(),
                    };
                }
                shard.deadlines.sleep(APPLY_POLL).await;
            }
            match creating {
                Some(rollback) => refuse_unopened(shard, &name, rollback, deadline).await,
                None => (ErrorCode::None, String::new()),
            }
        }
    };
    TopicResult {
        name,
        error_code: code.code(),
        message,
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
) -> (ErrorCode, String) {
    let Some(id) = shard.controller.metadata().topic(name).map(|t| t.id) else {
        return (ErrorCode::None, String::new());
    };
    let failed = shard.applied.open_failures_of(id);
    let Some((partition, why)) = failed.first() else {
        return (ErrorCode::None, String::new());
    };
    let mut message = format!(
        "{} of the topic's partitions cannot be created on disk (partition {partition}: {why})",
        failed.len()
    );
    if rollback {
        let rx = shard.controller.propose(Command::DeleteTopic {
            name: name.to_string(),
        });
        let undone = futures_lite::future::or(async { rx.recv_async().await.ok() }, async {
            shard.deadlines.sleep_until(deadline).await;
            None
        })
        .await;
        match undone {
            Some(Ok(_)) => message.push_str("; the topic was not created"),
            _ => message.push_str("; deleting the topic again did not complete"),
        }
    }
    (ErrorCode::KafkaStorageError, message)
}
