//! ACL enforcement on the native listener: on when it authenticates
//! (`--native-sasl-mechanisms`), for the connection's user and address, with Kafka's rules
//! (which operation on which resource each API needs) and [`crate::broker::acls`]'s decision.
//!
//! Unlike the Kafka listener, which answers a refused item inside an otherwise handled
//! request, a native request is refused whole (TOPIC_, GROUP_, CLUSTER_ or
//! TRANSACTIONAL_ID_AUTHORIZATION_FAILED, naming the resource) when any of its items is:
//! native clients treat a request as one operation. Metadata of every topic lists only those
//! the caller may describe (`metadata::metadata`); Metadata naming topics needs DESCRIBE on
//! each.

use crate::auth::acl::{Operation, ResourceType, CLUSTER_NAME};
use crate::broker::acls::{self, Caller};
use crate::broker::Shard;
use crate::protocol::frame::{DecodeMeta, RequestFrame};
use crate::protocol::messages::*;
use crate::protocol::{ApiKey, ErrorCode};

/// A refusal: its code and what was lacking.
pub type Refusal = (ErrorCode, String);

/// One right a request needs.
struct Need<'a> {
    op: Operation,
    resource: ResourceType,
    name: &'a str,
}

fn topic(op: Operation, name: &str) -> Need<'_> {
    Need {
        op,
        resource: ResourceType::Topic,
        name,
    }
}

fn group(op: Operation, name: &str) -> Need<'_> {
    Need {
        op,
        resource: ResourceType::Group,
        name,
    }
}

fn txn_id(op: Operation, name: &str) -> Need<'_> {
    Need {
        op,
        resource: ResourceType::TransactionalId,
        name,
    }
}

fn cluster(op: Operation) -> Need<'static> {
    Need {
        op,
        resource: ResourceType::Cluster,
        name: CLUSTER_NAME,
    }
}

/// Checks `needs` in order; the first refused names the request's refusal.
fn all(shard: &Shard, caller: &Caller, needs: &[Need<'_>]) -> Result<(), Refusal> {
    for n in needs {
        if !acls::authorized(shard, caller, n.op, n.resource, n.name) {
            let code = match n.resource {
                ResourceType::Topic => ErrorCode::TopicAuthorizationFailed,
                ResourceType::Group => ErrorCode::GroupAuthorizationFailed,
                ResourceType::TransactionalId => ErrorCode::TransactionalIdAuthorizationFailed,
                _ => ErrorCode::ClusterAuthorizationFailed,
            };
            return Err((
                code,
                format!(
                    "{} may not {} {} {:?}",
                    caller.principal,
                    n.op.name(),
                    n.resource.name(),
                    n.name
                ),
            ));
        }
    }
    Ok(())
}

fn decoded<T: DecodeMeta>(frame: &RequestFrame) -> Result<T, Refusal> {
    frame
        .decode_meta()
        .map_err(|e| (ErrorCode::InvalidRequest, e.to_string()))
}

/// Whether `caller` may make this request.
pub fn check(
    shard: &Shard,
    caller: &Caller,
    api: ApiKey,
    frame: &RequestFrame,
) -> Result<(), Refusal> {
    use Operation::*;
    let on = |needs: &[Need<'_>]| all(shard, caller, needs);
    match api {
        ApiKey::ApiVersions | ApiKey::SaslHandshake | ApiKey::SaslAuthenticate => Ok(()),
        ApiKey::Metadata => {
            let r: MetadataRequest = decoded(frame)?;
            let named = r.topics.iter().flatten().map(|t| topic(Describe, t));
            let created = r.create.iter().map(|t| topic(Create, t));
            on(&named.chain(created).collect::<Vec<_>>())
        }
        ApiKey::CreateTopics => {
            let r: CreateTopicsRequest = decoded(frame)?;
            // CREATE on the cluster covers every topic (Kafka's rule).
            if acls::on_cluster(shard, caller, Create) {
                return Ok(());
            }
            on(&r
                .topics
                .iter()
                .map(|t| topic(Create, &t.name))
                .collect::<Vec<_>>())
        }
        ApiKey::DeleteTopics => {
            let r: DeleteTopicsRequest = decoded(frame)?;
            on(&r
                .topics
                .iter()
                .map(|t| topic(Delete, t))
                .collect::<Vec<_>>())
        }
        ApiKey::Produce => {
            let r: ProduceRequest = decoded(frame)?;
            on(&r
                .partitions
                .iter()
                .map(|p| topic(Write, &p.topic))
                .collect::<Vec<_>>())
        }
        ApiKey::Fetch => {
            let partitions = match frame.header.api_version {
                0 => decoded::<FetchRequest>(frame)?.partitions,
                _ => decoded::<FetchRequestV1>(frame)?.fetch.partitions,
            };
            on(&partitions
                .iter()
                .map(|p| topic(Read, &p.topic))
                .collect::<Vec<_>>())
        }
        ApiKey::FilteredFetch => {
            let r: FilteredFetchRequest = decoded(frame)?;
            on(&r
                .fetch
                .partitions
                .iter()
                .map(|p| topic(Read, &p.topic))
                .collect::<Vec<_>>())
        }
        ApiKey::DelayedProduce => {
            let r: DelayedProduceRequest = decoded(frame)?;
            on(&[topic(Write, &r.topic)])
        }
        ApiKey::ListOffsets => {
            let r: ListOffsetsRequest = decoded(frame)?;
            on(&r
                .partitions
                .iter()
                .map(|p| topic(Describe, &p.topic))
                .collect::<Vec<_>>())
        }
        ApiKey::AlterTopicConfigs => {
            let r: AlterTopicConfigsRequest = decoded(frame)?;
            on(&[topic(AlterConfigs, &r.topic)])
        }
        ApiKey::CreatePartitions => {
            let r: CreatePartitionsRequest = decoded(frame)?;
            on(&[topic(Alter, &r.topic)])
        }
        ApiKey::DeleteRecords => {
            let r: DeleteRecordsRequest = decoded(frame)?;
            on(&r
                .partitions
                .iter()
                .map(|p| topic(Delete, &p.topic))
                .collect::<Vec<_>>())
        }
        ApiKey::DescribePartitions => {
            let r: DescribePartitionsRequest = decoded(frame)?;
            on(&r
                .partitions
                .iter()
                .map(|(t, _)| topic(Describe, t))
                .collect::<Vec<_>>())
        }
        ApiKey::DecommissionPartition
        | ApiKey::ReassignPartitions
        | ApiKey::DrainBroker
        | ApiKey::ElectLeaders
        | ApiKey::AlterUser
        | ApiKey::CreateAcls
        | ApiKey::DeleteAcls => on(&[cluster(Alter)]),
        ApiKey::ListUsers | ApiKey::DescribeAcls | ApiKey::ListGroups => on(&[cluster(Describe)]),
        ApiKey::AlterClientQuota => on(&[cluster(AlterConfigs)]),
        ApiKey::DescribeClientQuotas => on(&[cluster(DescribeConfigs)]),
        // Brokers' own requests.
        ApiKey::ReplicaFetch | ApiKey::WriteTxnMarkers => on(&[cluster(ClusterAction)]),
        // A follower's (CLUSTER_ACTION), or a client's (DESCRIBE on each topic), as Kafka.
        ApiKey::OffsetForLeaderEpoch => {
            if acls::on_cluster(shard, caller, ClusterAction) {
                return Ok(());
            }
            let r: OffsetForLeaderEpochRequest = decoded(frame)?;
            on(&r
                .partitions
                .iter()
                .map(|p| topic(Describe, &p.topic))
                .collect::<Vec<_>>())
        }
        ApiKey::FindCoordinator => {
            let r: FindCoordinatorRequest = decoded(frame)?;
            on(&[group(Describe, &r.group)])
        }
        ApiKey::JoinGroup => on(&[group(Read, &decoded::<JoinGroupRequest>(frame)?.group)]),
        ApiKey::SyncGroup => on(&[group(Read, &decoded::<SyncGroupRequest>(frame)?.group)]),
        ApiKey::Heartbeat => on(&[group(Read, &decoded::<HeartbeatRequest>(frame)?.group)]),
        ApiKey::LeaveGroup => on(&[group(Read, &decoded::<LeaveGroupRequest>(frame)?.group)]),
        ApiKey::OffsetCommit => {
            let r: OffsetCommitRequest = decoded(frame)?;
            let mut needs = vec![group(Read, &r.group)];
            needs.extend(r.offsets.iter().map(|(t, ..)| topic(Read, t)));
            on(&needs)
        }
        ApiKey::OffsetFetch => {
            let r: OffsetFetchRequest = decoded(frame)?;
            let mut needs = vec![group(Describe, &r.group)];
            needs.extend(r.partitions.iter().map(|(t, _)| topic(Describe, t)));
            on(&needs)
        }
        ApiKey::DescribeGroups => {
            let r: DescribeGroupsRequest = decoded(frame)?;
            on(&r
                .groups
                .iter()
                .map(|g| group(Describe, g))
                .collect::<Vec<_>>())
        }
        ApiKey::InitProducerId => {
            let r: InitProducerIdRequest = decoded(frame)?;
            match r.transactional_id.as_deref().filter(|t| !t.is_empty()) {
                Some(id) => on(&[txn_id(Write, id)]),
                // An idempotent producer: IDEMPOTENT_WRITE on the cluster, or WRITE on any
                // topic (Kafka 3's rule).
                None if acls::on_any(shard, caller, Write, ResourceType::Topic) => Ok(()),
                None => on(&[cluster(IdempotentWrite)]),
            }
        }
        ApiKey::FindTxnCoordinator => {
            let r: FindTxnCoordinatorRequest = decoded(frame)?;
            on(&[txn_id(Describe, &r.transactional_id)])
        }
        ApiKey::AddPartitionsToTxn => {
            let r: AddPartitionsToTxnRequest = decoded(frame)?;
            let mut needs = vec![txn_id(Write, &r.transactional_id)];
            needs.extend(r.partitions.iter().map(|p| topic(Write, &p.topic)));
            on(&needs)
        }
        ApiKey::AddOffsetsToTxn => {
            let r: AddOffsetsToTxnRequest = decoded(frame)?;
            on(&[txn_id(Write, &r.transactional_id), group(Read, &r.group)])
        }
        ApiKey::EndTxn => {
            let r: EndTxnRequest = decoded(frame)?;
            on(&[txn_id(Write, &r.transactional_id)])
        }
        ApiKey::TxnOffsetCommit => {
            let r: TxnOffsetCommitRequest = decoded(frame)?;
            let mut needs = vec![txn_id(Write, &r.transactional_id), group(Read, &r.group)];
            needs.extend(r.offsets.iter().map(|(t, ..)| topic(Read, t)));
            on(&needs)
        }
    }
}
