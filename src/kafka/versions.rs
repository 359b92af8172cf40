//! The Kafka API versions this listener serves, as ApiVersions advertises them.

use std::sync::OnceLock;

use kafka_protocol::messages::ApiKey;

/// (api, min, max) served. Produce advertises 0-2 although their message-set format is
/// refused: librdkafka before 2.11.1 enables record format v2 only when they are listed
/// (Kafka 4.0 does the same). Fetch v13+ names topics by id, which the fetch handler maps back.
pub const SUPPORTED: &[(ApiKey, i16, i16)] = &[
    (ApiKey::Produce, 0, 11),
    (ApiKey::Fetch, 4, 16),
    (ApiKey::ListOffsets, 1, 8),
    (ApiKey::Metadata, 0, 12),
    (ApiKey::OffsetForLeaderEpoch, 2, 4),
    (ApiKey::ApiVersions, 0, 3),
    (ApiKey::CreateTopics, 2, 7),
    (ApiKey::DeleteTopics, 1, 6),
    (ApiKey::InitProducerId, 0, 5),
    (ApiKey::AddPartitionsToTxn, 0, 3),
    (ApiKey::AddOffsetsToTxn, 0, 3),
    (ApiKey::EndTxn, 0, 3),
    (ApiKey::TxnOffsetCommit, 0, 3),
    (ApiKey::DescribeConfigs, 1, 4),
    (ApiKey::DescribeCluster, 0, 2),
    (ApiKey::FindCoordinator, 0, 4),
    (ApiKey::JoinGroup, 0, 9),
    (ApiKey::SyncGroup, 0, 5),
    (ApiKey::Heartbeat, 0, 4),
    (ApiKey::LeaveGroup, 0, 5),
    (ApiKey::OffsetCommit, 2, 9),
    (ApiKey::OffsetFetch, 1, 9),
    (ApiKey::DescribeGroups, 0, 5),
    (ApiKey::ListGroups, 0, 5),
    // KIP-848, the consumer group protocol (group.protocol=consumer).
    (ApiKey::ConsumerGroupHeartbeat, 0, 1),
    (ApiKey::ConsumerGroupDescribe, 0, 1),
    (ApiKey::CreatePartitions, 0, 3),
    (ApiKey::DeleteRecords, 0, 2),
    (ApiKey::DescribeLogDirs, 1, 4),
    (ApiKey::AlterConfigs, 0, 2),
    (ApiKey::IncrementalAlterConfigs, 0, 1),
    (ApiKey::DeleteGroups, 0, 2),
    (ApiKey::OffsetDelete, 0, 0),
    (ApiKey::AlterPartitionReassignments, 0, 1),
    (ApiKey::ListPartitionReassignments, 0, 0),
    (ApiKey::ElectLeaders, 0, 2),
    // v0 of SaslHandshake is followed by unframed SASL tokens, which rill does not read (a
    // v0 handshake closes the connection); it is listed because librdkafka (2.0 at least)
    // enables SASL only when v0 is, and then uses v1 with SaslAuthenticate.
    (ApiKey::SaslHandshake, 0, 1),
    (ApiKey::SaslAuthenticate, 0, 2),
    (ApiKey::DescribeUserScramCredentials, 0, 0),
    (ApiKey::AlterUserScramCredentials, 0, 0),
    (ApiKey::DescribeAcls, 1, 3),
    (ApiKey::CreateAcls, 1, 3),
    (ApiKey::DeleteAcls, 1, 3),
    (ApiKey::DescribeClientQuotas, 0, 1),
    (ApiKey::AlterClientQuotas, 0, 1),
];

/// The lowest Produce version whose body this listener decodes (record batch v2).
pub const MIN_DECODED_PRODUCE: i16 = 3;

/// The served version range of an API, if it is served at all.
pub fn range(api: ApiKey) -> Option<(i16, i16)> {
    SUPPORTED
        .iter()
        .find(|(k, _, _)| *k == api)
        .map(|&(_, lo, hi)| (lo, hi))
}

/// A served API's name (the `api` label of metrics, as Kafka names it); `unknown` for others.
/// kafka-protocol names its keys only through `Debug`, so the served ones are formatted once
/// per process (a few hundred bytes kept for its life) and looked up without allocating.
pub fn name(api: ApiKey) -> &'static str {
    static NAMES: OnceLock<Vec<(ApiKey, &'static str)>> = OnceLock::new();
    NAMES
        .get_or_init(|| {
            SUPPORTED
                .iter()
                .map(|&(k, _, _)| (k, &*Box::leak(format!("{k:?}").into_boxed_str())))
                .collect()
        })
        .iter()
        .find(|(k, _)| *k == api)
        .map_or(crate::metrics::UNKNOWN_API, |&(_, n)| n)
}

/// Whether `version` of `api` is served.
pub fn supports(api: ApiKey, version: i16) -> bool {
    range(api).is_some_and(|(lo, hi)| (lo..=hi).contains(&version))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_served_version_is_one_the_codec_has() {
        for &(api, lo, hi) in SUPPORTED {
            // Produce v0-2 are listed for old librdkafka and refused (above).
            let lo = if api == ApiKey::Produce {
                MIN_DECODED_PRODUCE
            } else {
                lo
            };
            let valid = api.valid_versions();
            assert!(
                valid.min <= lo && hi <= valid.max,
                "{api:?} {lo}..={hi} advertised, kafka-protocol has {}..={}",
                valid.min,
                valid.max
            );
        }
    }

    #[test]
    fn served_apis_are_named_as_kafka_names_them() {
        assert_eq!(name(ApiKey::Produce), "Produce");
        assert_eq!(name(ApiKey::OffsetForLeaderEpoch), "OffsetForLeaderEpoch");
        assert_eq!(name(ApiKey::SaslHandshake), "SaslHandshake");
        assert_eq!(name(ApiKey::Heartbeat), "Heartbeat");
        assert_eq!(name(ApiKey::CreateAcls), "CreateAcls");
        assert_eq!(name(ApiKey::Envelope), crate::metrics::UNKNOWN_API);
    }
}
