//! API keys and the versions this broker speaks.

/// A native API. The numbers are the wire values; never renumber.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u16)]
pub enum ApiKey {
    ApiVersions = 0,
    Metadata = 1,
    CreateTopics = 2,
    DeleteTopics = 3,
    Produce = 4,
    Fetch = 5,
    ListOffsets = 6,
    AlterTopicConfigs = 7,
    CreatePartitions = 8,
    DeleteRecords = 9,
    DescribePartitions = 10,
    DecommissionPartition = 11,
    FindCoordinator = 12,
    JoinGroup = 13,
    SyncGroup = 14,
    Heartbeat = 15,
    LeaveGroup = 16,
    OffsetCommit = 17,
    OffsetFetch = 18,
    ListGroups = 19,
    DescribeGroups = 20,
    /// A follower broker's fetch of the partitions it replicates from their leader's shard.
    ReplicaFetch = 21,
    // 23 and 24 are reserved for replication.
    /// Where a leader epoch ends in a partition's log (Kafka's OffsetForLeaderEpoch).
    OffsetForLeaderEpoch = 22,
    /// Starts or cancels partition reassignments (Kafka's AlterPartitionReassignments).
    ReassignPartitions = 25,
    /// Reassigns every replica of a broker elsewhere (`rill cluster drain-broker`).
    DrainBroker = 26,
    /// Preferred-leader election (Kafka's ElectLeaders).
    ElectLeaders = 27,
    /// Sets or removes a user's SCRAM credential (Kafka's AlterUserScramCredentials).
    AlterUser = 28,
    /// Every user and its mechanisms (Kafka's DescribeUserScramCredentials).
    ListUsers = 29,
    /// A fetch of only the records with given tags (native only; keys 30-34 are the tags and
    /// delay features').
    FilteredFetch = 30,
    /// A message appended to its partition at a given time, not now (native only).
    DelayedProduce = 31,
    /// A producer id and epoch for an idempotent producer (Kafka's InitProducerId).
    InitProducerId = 35,
    /// A transaction coordinator's commit or abort markers, to a partition's leader (Kafka's
    /// WriteTxnMarkers).
    WriteTxnMarkers = 36,
    /// A transactional id's coordinator (Kafka's FindCoordinator, key type 1).
    FindTxnCoordinator = 37,
    /// Kafka's AddPartitionsToTxn.
    AddPartitionsToTxn = 38,
    /// Kafka's AddOffsetsToTxn.
    AddOffsetsToTxn = 39,
    /// Kafka's EndTxn.
    EndTxn = 40,
    /// Kafka's TxnOffsetCommit.
    TxnOffsetCommit = 41,
    /// Picks the SASL mechanism of a connection (Kafka's SaslHandshake), on a listener that
    /// authenticates (`--native-sasl-mechanisms`).
    SaslHandshake = 42,
    /// One SASL message of the exchange (Kafka's SaslAuthenticate).
    SaslAuthenticate = 43,
    /// Adds ACL bindings (Kafka's CreateAcls; `rill acl add`).
    CreateAcls = 50,
    /// The ACL bindings a filter matches (Kafka's DescribeAcls; `rill acl list`).
    DescribeAcls = 51,
    /// Removes the ACL bindings a filter matches (Kafka's DeleteAcls; `rill acl remove`).
    DeleteAcls = 52,
    /// Sets or removes one entity's client quotas (Kafka's AlterClientQuotas; `rill quota set`).
    AlterClientQuota = 53,
    /// Every entity's client quotas (Kafka's DescribeClientQuotas; `rill quota list`).
    DescribeClientQuotas = 54,
}

impl ApiKey {
    pub const ALL: &'static [ApiKey] = &[
        ApiKey::ApiVersions,
        ApiKey::Metadata,
        ApiKey::CreateTopics,
        ApiKey::DeleteTopics,
        ApiKey::Produce,
        ApiKey::Fetch,
        ApiKey::ListOffsets,
        ApiKey::AlterTopicConfigs,
        ApiKey::CreatePartitions,
        ApiKey::DeleteRecords,
        ApiKey::DescribePartitions,
        ApiKey::DecommissionPartition,
        ApiKey::FindCoordinator,
        ApiKey::JoinGroup,
        ApiKey::SyncGroup,
        ApiKey::Heartbeat,
        ApiKey::LeaveGroup,
        ApiKey::OffsetCommit,
        ApiKey::OffsetFetch,
        ApiKey::ListGroups,
        ApiKey::DescribeGroups,
        ApiKey::ReplicaFetch,
        ApiKey::OffsetForLeaderEpoch,
        ApiKey::ReassignPartitions,
        ApiKey::DrainBroker,
        ApiKey::ElectLeaders,
        ApiKey::AlterUser,
        ApiKey::ListUsers,
        ApiKey::FilteredFetch,
        ApiKey::DelayedProduce,
        ApiKey::InitProducerId,
        ApiKey::WriteTxnMarkers,
        ApiKey::FindTxnCoordinator,
        ApiKey::AddPartitionsToTxn,
        ApiKey::AddOffsetsToTxn,
        ApiKey::EndTxn,
        ApiKey::TxnOffsetCommit,
        ApiKey::SaslHandshake,
        ApiKey::SaslAuthenticate,
        ApiKey::CreateAcls,
        ApiKey::DescribeAcls,
        ApiKey::DeleteAcls,
        ApiKey::AlterClientQuota,
        ApiKey::DescribeClientQuotas,
    ];

    /// The API's name (the `api` label of metrics).
    pub fn name(self) -> &'static str {
        match self {
            ApiKey::ApiVersions => "ApiVersions",
            ApiKey::Metadata => "Metadata",
            ApiKey::CreateTopics => "CreateTopics",
            ApiKey::DeleteTopics => "DeleteTopics",
            ApiKey::Produce => "Produce",
            ApiKey::Fetch => "Fetch",
            ApiKey::ListOffsets => "ListOffsets",
            ApiKey::AlterTopicConfigs => "AlterTopicConfigs",
            ApiKey::CreatePartitions => "CreatePartitions",
            ApiKey::DeleteRecords => "DeleteRecords",
            ApiKey::DescribePartitions => "DescribePartitions",
            ApiKey::DecommissionPartition => "DecommissionPartition",
            ApiKey::FindCoordinator => "FindCoordinator",
            ApiKey::JoinGroup => "JoinGroup",
            ApiKey::SyncGroup => "SyncGroup",
            ApiKey::Heartbeat => "Heartbeat",
            ApiKey::LeaveGroup => "LeaveGroup",
            ApiKey::OffsetCommit => "OffsetCommit",
            ApiKey::OffsetFetch => "OffsetFetch",
            ApiKey::ListGroups => "ListGroups",
            ApiKey::DescribeGroups => "DescribeGroups",
            ApiKey::ReplicaFetch => "ReplicaFetch",
            ApiKey::OffsetForLeaderEpoch => "OffsetForLeaderEpoch",
            ApiKey::ReassignPartitions => "ReassignPartitions",
            ApiKey::DrainBroker => "DrainBroker",
            ApiKey::ElectLeaders => "ElectLeaders",
            ApiKey::AlterUser => "AlterUser",
            ApiKey::ListUsers => "ListUsers",
            ApiKey::FilteredFetch => "FilteredFetch",
            ApiKey::DelayedProduce => "DelayedProduce",
            ApiKey::InitProducerId => "InitProducerId",
            ApiKey::WriteTxnMarkers => "WriteTxnMarkers",
            ApiKey::FindTxnCoordinator => "FindTxnCoordinator",
            ApiKey::AddPartitionsToTxn => "AddPartitionsToTxn",
            ApiKey::AddOffsetsToTxn => "AddOffsetsToTxn",
            ApiKey::EndTxn => "EndTxn",
            ApiKey::TxnOffsetCommit => "TxnOffsetCommit",
            ApiKey::SaslHandshake => "SaslHandshake",
            ApiKey::SaslAuthenticate => "SaslAuthenticate",
            ApiKey::CreateAcls => "CreateAcls",
            ApiKey::DescribeAcls => "DescribeAcls",
            ApiKey::DeleteAcls => "DeleteAcls",
            ApiKey::AlterClientQuota => "AlterClientQuota",
            ApiKey::DescribeClientQuotas => "DescribeClientQuotas",
        }
    }

    pub fn from_u16(v: u16) -> Option<ApiKey> {
        ApiKey::ALL.iter().copied().find(|k| *k as u16 == v)
    }

    /// The inclusive range of versions served.
    pub fn versions(self) -> (u16, u16) {
        match self {
            // 1: the isolation level, the last stable offset and the aborted transactions.
            ApiKey::Fetch => (0, 1),
            _ => (0, 0),
        }
    }

    pub fn supports(self, version: u16) -> bool {
        let (lo, hi) = self.versions();
        (lo..=hi).contains(&version)
    }
}

#[cfg(test)]
mod tests {
    use super::ApiKey;

    #[test]
    fn names_are_the_variant_names() {
        for k in ApiKey::ALL {
            assert_eq!(k.name(), format!("{k:?}"));
        }
    }
}
