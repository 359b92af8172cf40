//! Kafka admin APIs, one file per concern: `topics` (CreateTopics, DeleteTopics,
//! CreatePartitions), `logs` (DeleteRecords, DescribeLogDirs), `alter_configs` (AlterConfigs,
//! IncrementalAlterConfigs), `configs`
//! (DescribeConfigs and the catalogue of topic and broker settings under Kafka's names),
//! `cluster` (DescribeCluster), `producer_ids` (InitProducerId) and `reassignments`
//! (AlterPartitionReassignments, ListPartitionReassignments, ElectLeaders), `acls`
//! (CreateAcls, DescribeAcls, DeleteAcls), `quotas` (DescribeClientQuotas, AlterClientQuotas). What they share lives
//! here: the broker defaults a topic created with -1 gets, and how a refusal is written.

mod acls;
mod alter_configs;
mod cluster;
mod configs;
mod logs;
mod producer_ids;
mod quotas;
mod reassignments;
#[cfg(test)]
pub(crate) mod test_support;
mod topics;
mod users;

pub use acls::{create_acls, delete_acls, describe_acls};
pub use alter_configs::{alter_configs, incremental_alter_configs};
pub use cluster::{brokers_only, describe_cluster};
pub use configs::describe_configs;
pub use logs::{delete_records, describe_log_dirs};
pub use producer_ids::init_producer_id;
pub use quotas::{alter_client_quotas, alter_result as quota_alter_result, describe_client_quotas};
pub use reassignments::{
    alter_partition_reassignments, elect_leaders, list_partition_reassignments,
};
pub use topics::{create_partitions, create_topics, delete_topics};
pub use users::{alter_user_scram_credentials, describe_user_scram_credentials};

use kafka_protocol::protocol::StrBytes;

use crate::protocol::ErrorCode;

fn s(v: impl Into<String>) -> StrBytes {
    StrBytes::from_string(v.into())
}

/// A per-topic refusal: Kafka error number and message.
type Refusal = (i16, String);

fn refusal(code: ErrorCode, message: impl Into<String>) -> Refusal {
    (code.code(), message.into())
}
