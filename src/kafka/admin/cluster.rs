//! DescribeCluster, built from the Metadata answer: the same cluster id, controller and nodes.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use kafka_protocol::messages::{
    DescribeClusterRequest, DescribeClusterResponse, MetadataRequest, MetadataResponse,
};

use super::s;
use crate::kafka::authorized_operations;

/// DescribeCluster endpoint types.
const ENDPOINT_BROKER: i8 = 1;
const ENDPOINT_CONTROLLER: i8 = 2;

/// The Metadata request whose answer [`describe_cluster`] is built from: no topics.
pub fn brokers_only() -> MetadataRequest {
    let mut r = MetadataRequest::default();
    r.topics = Some(Vec::new());
    r
}

/// DescribeCluster from the answer Metadata gives (`metadata(shard, &brokers_only())`): the
/// same cluster id, controller and nodes, every shard of every broker its own node.
pub fn describe_cluster(
    req: &DescribeClusterRequest,
    md: MetadataResponse,
) -> DescribeClusterResponse {
    let mut r = DescribeClusterResponse::default();
    match req.endpoint_type {
        ENDPOINT_BROKER => {}
        ENDPOINT_CONTROLLER => {
            r.error_code = ResponseError::MismatchedEndpointType.code();
            r.error_message = Some(s(
                "this is a broker endpoint; rill's controller has no Kafka endpoint",
            ));
            return r;
        }
        other => {
            r.error_code = ResponseError::UnsupportedEndpointType.code();
            r.error_message = Some(s(format!("unknown endpoint type {other}")));
            return r;
        }
    }
    r.cluster_id = md.cluster_id.unwrap_or_default();
    r.controller_id = md.controller_id;
    r.brokers = md
        .brokers
        .into_iter()
        .map(|b| {
            let mut d = DescribeClusterBroker::default();
            d.broker_id = b.node_id;
            d.host = b.host;
            d.port = b.port;
            d.rack = b.rack;
            d
        })
        .collect();
    r.cluster_authorized_operations =
        authorized_operations::cluster(req.include_cluster_authorized_operations);
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kafka::admin::test_support::{round_trip, served};
    use kafka_protocol::messages::metadata_response::MetadataResponseBroker;
    use kafka_protocol::messages::{ApiKey, BrokerId};

    #[test]
    fn describe_cluster_lists_what_metadata_lists() {
        let mut md = MetadataResponse::default();
        md.cluster_id = Some(s("c1"));
        md.controller_id = BrokerId(1000);
        for shard in 0..3 {
            let mut b = MetadataResponseBroker::default();
            b.node_id = BrokerId(1000 + shard);
            b.host = s("h");
            b.port = 9092 + shard;
            md.brokers.push(b);
        }
        let mut req = DescribeClusterRequest::default();
        let r = describe_cluster(&req, md.clone());
        assert_eq!(r.error_code, 0);
        assert_eq!(r.cluster_id.as_str(), "c1");
        assert_eq!(r.controller_id, BrokerId(1000));
        let nodes: Vec<(i32, i32)> = r.brokers.iter().map(|b| (b.broker_id.0, b.port)).collect();
        assert_eq!(nodes, vec![(1000, 9092), (1001, 9093), (1002, 9094)]);
        assert_eq!(r.cluster_authorized_operations, i32::MIN);
        req.include_cluster_authorized_operations = true;
        let r = describe_cluster(&req, md.clone());
        assert_ne!(
            r.cluster_authorized_operations & (1 << 12),
            0,
            "IDEMPOTENT_WRITE"
        );
        req.endpoint_type = ENDPOINT_CONTROLLER;
        assert_eq!(describe_cluster(&req, md.clone()).error_code, 114);
        req.endpoint_type = 9;
        assert_eq!(describe_cluster(&req, md).error_code, 115);
    }

    #[test]
    fn responses_encode_at_every_served_version() {
        let cluster = describe_cluster(
            &DescribeClusterRequest::default(),
            MetadataResponse::default(),
        );
        round_trip(&cluster, served(ApiKey::DescribeCluster));
    }
}
