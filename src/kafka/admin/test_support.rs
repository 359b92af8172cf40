//! Fixtures the admin modules' unit tests share.

use kafka_protocol::messages::ApiKey;
use kafka_protocol::protocol::{Decodable, Encodable};

use crate::controller::metadata::{BrokerInfo, ClusterMetadata, TopicInfo};

/// Broker 1 (two shards, Kafka port 9092) with topic "a" (id 1, two configs set) and "b" (id 2).
pub fn metadata() -> ClusterMetadata {
    let mut md = ClusterMetadata {
        cluster_id: "c1".into(),
        ..Default::default()
    };
    md.brokers.insert(
        1,
        BrokerInfo {
            node_id: 1,
            host: "127.0.0.1".into(),
            port: 9292,
            shards: 2,
            kafka_port: Some(9092),
        },
    );
    for (name, id, configs) in [
        (
            "a",
            1,
            vec![("retention.ms", "60000"), ("segment.bytes", "1048576")],
        ),
        ("b", 2, vec![]),
    ] {
        md.topics.insert(
            name.into(),
            TopicInfo {
                name: name.into(),
                id,
                partitions: Vec::new(),
                configs: configs
                    .into_iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            },
        );
    }
    md
}

/// The versions of `api` the listener serves.
pub fn served(api: ApiKey) -> (i16, i16) {
    crate::kafka::versions::range(api).expect("served")
}

/// `v` encodes at every version in `versions` and decodes back.
pub fn round_trip<T: Encodable + Decodable>(v: &T, versions: (i16, i16)) {
    for version in versions.0..=versions.1 {
        let mut buf = bytes::BytesMut::new();
        v.encode(&mut buf, version)
            .unwrap_or_else(|e| panic!("v{version}: {e}"));
        let mut b = buf.freeze();
        T::decode(&mut b, version).unwrap_or_else(|e| panic!("v{version}: {e}"));
    }
}
