//! CreateTopics, DeleteTopics, AlterTopicConfigs, CreatePartitions and DecommissionPartition:
//! controller proposals ([`crate::broker::topics`]), answered once every shard applied them.

use std::collections::BTreeMap;
use std::rc::Rc;
use std::time::Duration;

use super::{status, Reply};
use crate::broker::{request_timeout, topics, Shard};
use crate::controller::metadata::Command;
use crate::protocol::frame::RequestFrame;
use crate::protocol::messages::{
    AlterTopicConfigsRequest, CreatePartitionsRequest, CreateTopicsRequest,
    DecommissionPartitionRequest, DeleteTopicsRequest, TopicResult, TopicResults,
};
use crate::protocol::ApiKey;

pub async fn create(shard: &Rc<Shard>, frame: &RequestFrame) -> Reply {
    let req: CreateTopicsRequest = match frame.decode_meta() {
        Ok(r) => r,
        Err(e) => return e.into(),
    };
    let timeout = request_timeout(shard, req.timeout_ms);
    let mut results = Vec::with_capacity(req.topics.len());
    for t in req.topics {
        let cmd = Command::CreateTopic {
            name: t.name.clone(),
            partitions: t.partitions,
            replication_factor: t.replication_factor,
            configs: t.configs.into_iter().collect::<BTreeMap<_, _>>(),
        };
        results.push(propose(shard, ApiKey::CreateTopics, t.name, cmd, timeout).await);
    }
    Reply::meta(&TopicResults { topics: results })
}

pub async fn delete(shard: &Rc<Shard>, frame: &RequestFrame) -> Reply {
    let req: DeleteTopicsRequest = match frame.decode_meta() {
        Ok(r) => r,
        Err(e) => return e.into(),
    };
    let timeout = request_timeout(shard, req.timeout_ms);
    let mut results = Vec::with_capacity(req.topics.len());
    for name in req.topics {
        let cmd = Command::DeleteTopic { name: name.clone() };
        results.push(propose(shard, ApiKey::DeleteTopics, name, cmd, timeout).await);
    }
    Reply::meta(&TopicResults { topics: results })
}

pub async fn alter_config(shard: &Rc<Shard>, frame: &RequestFrame) -> Reply {
    let req: AlterTopicConfigsRequest = match frame.decode_meta() {
        Ok(r) => r,
        Err(e) => return e.into(),
    };
    let timeout = request_timeout(shard, req.timeout_ms);
    let cmd = Command::AlterTopicConfig {
        name: req.topic.clone(),
        configs: req.configs.into_iter().collect(),
    };
    one_topic(shard, ApiKey::AlterTopicConfigs, req.topic, cmd, timeout).await
}

pub async fn create_partitions(shard: &Rc<Shard>, frame: &RequestFrame) -> Reply {
    let req: CreatePartitionsRequest = match frame.decode_meta() {
        Ok(r) => r,
        Err(e) => return e.into(),
    };
    let timeout = request_timeout(shard, req.timeout_ms);
    let cmd = Command::AddPartitions {
        name: req.topic.clone(),
        count: req.count,
    };
    one_topic(shard, ApiKey::CreatePartitions, req.topic, cmd, timeout).await
}

pub async fn decommission(shard: &Rc<Shard>, frame: &RequestFrame) -> Reply {
    let req: DecommissionPartitionRequest = match frame.decode_meta() {
        Ok(r) => r,
        Err(e) => return e.into(),
    };
    let timeout = request_timeout(shard, req.timeout_ms);
    let cmd = Command::DecommissionPartition {
        name: req.topic.clone(),
        partition: req.partition,
    };
    one_topic(
        shard,
        ApiKey::DecommissionPartition,
        req.topic,
        cmd,
        timeout,
    )
    .await
}

async fn propose(
    shard: &Rc<Shard>,
    api: ApiKey,
    name: String,
    cmd: Command,
    timeout: Duration,
) -> TopicResult {
    let (error_code, message) = status(shard, api, &topics::propose(shard, cmd, timeout).await);
    TopicResult {
        name,
        error_code,
        message,
    }
}

/// Proposes one topic command and answers with its result.
async fn one_topic(
    shard: &Rc<Shard>,
    api: ApiKey,
    name: String,
    cmd: Command,
    timeout: Duration,
) -> Reply {
    let result = propose(shard, api, name, cmd, timeout).await;
    Reply::meta(&TopicResults {
        topics: vec![result],
    })
}
