//! The bytes a consumer puts in JoinGroup's protocol metadata (its subscription) and the group
//! leader puts in SyncGroup (each member's assignment): Kafka's ConsumerProtocol format
//! (a version, then the message at that version), encoded and decoded by `kafka-protocol`, so
//! rill consumers and Kafka consumers can be members of one group and read each other's
//! subscriptions and assignments. The coordinator relays both without reading them; they come
//! from other processes, so decoding validates and never panics.

use bytes::{Buf, Bytes, BytesMut};
use kafka_protocol::messages::consumer_protocol_assignment::TopicPartition as AssignedTopic;
use kafka_protocol::messages::consumer_protocol_subscription::TopicPartition as OwnedTopic;
use kafka_protocol::messages::{
    ConsumerProtocolAssignment, ConsumerProtocolSubscription, TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

use super::assignor::TopicPartition;

/// The protocol type consumers join groups with.
pub const CONSUMER_PROTOCOL_TYPE: &str = "consumer";

/// Version this build writes: 1 is the first with owned partitions (cooperative rebalancing).
pub const VERSION: u16 = 1;

/// Highest version this build reads; newer ones only append fields, read as this one.
const MAX_READ_VERSION: i16 = 3;

/// Bytes that are not a consumer-protocol message.
#[derive(Debug, thiserror::Error)]
#[error("not a consumer protocol message: {0}")]
pub struct DecodeError(String);

/// A member's subscription, sent with every JoinGroup.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Subscription {
    pub version: u16,
    /// Topics the member subscribes to.
    pub topics: Vec<String>,
    /// Partitions the member owns now (cooperative rebalancing: they keep being consumed).
    pub owned: Vec<TopicPartition>,
    /// Free-form bytes for custom assignors.
    pub user_data: Vec<u8>,
}

/// One member's assignment, handed out by SyncGroup.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MemberAssignment {
    pub version: u16,
    pub partitions: Vec<TopicPartition>,
    pub user_data: Vec<u8>,
}

fn topic_name(t: &str) -> TopicName {
    TopicName(StrBytes::from_string(t.to_string()))
}

/// Partitions grouped by topic, in order, as Kafka's messages carry them.
fn by_topic(partitions: &[TopicPartition]) -> Vec<(String, Vec<i32>)> {
    let mut out: Vec<(String, Vec<i32>)> = Vec::new();
    for (t, p) in partitions {
        match out.last_mut() {
            Some((last, ps)) if last == t => ps.push(*p as i32),
            _ => out.push((t.clone(), vec![*p as i32])),
        }
    }
    out
}

fn flatten(
    topics: impl Iterator<Item = (String, Vec<i32>)>,
) -> Result<Vec<TopicPartition>, DecodeError> {
    let mut out = Vec::new();
    for (t, ps) in topics {
        for p in ps {
            let p = u32::try_from(p).map_err(|_| DecodeError(format!("partition {p} of {t}")))?;
            out.push((t.clone(), p));
        }
    }
    Ok(out)
}

fn encode_versioned<M: Encodable>(message: &M, version: u16) -> Vec<u8> {
    let mut buf = BytesMut::new();
    buf.extend_from_slice(&(version as i16).to_be_bytes());
    match message.encode(&mut buf, version as i16) {
        Ok(()) => buf.to_vec(),
        Err(_) => Vec::new(),
    }
}

/// Reads the version prefix and decodes the rest (catching panics: network bytes).
fn decode_versioned<M: Decodable>(bytes: &[u8]) -> Result<(u16, M), DecodeError> {
    if bytes.len() < 2 {
        return Err(DecodeError(format!("{} bytes", bytes.len())));
    }
    let mut buf = Bytes::copy_from_slice(bytes);
    let version = buf.get_i16();
    if version < 0 {
        return Err(DecodeError(format!("version {version}")));
    }
    let read_as = version.min(MAX_READ_VERSION);
    let message = std::panic::catch_unwind(move || M::decode(&mut buf, read_as))
        .map_err(|_| DecodeError("undecodable".into()))?
        .map_err(|e| DecodeError(e.to_string()))?;
    Ok((version as u16, message))
}

impl Subscription {
    pub fn encode(&self) -> Vec<u8> {
        let mut m = ConsumerProtocolSubscription::default();
        m.topics = self
            .topics
            .iter()
            .map(|t| StrBytes::from_string(t.clone()))
            .collect();
        m.user_data = (!self.user_data.is_empty()).then(|| Bytes::copy_from_slice(&self.user_data));
        m.owned_partitions = by_topic(&self.owned)
            .into_iter()
            .map(|(t, partitions)| {
                let mut o = OwnedTopic::default();
                o.topic = topic_name(&t);
                o.partitions = partitions;
                o
            })
            .collect();
        m.generation_id = -1;
        encode_versioned(&m, self.version.max(VERSION))
    }

    pub fn decode(bytes: &[u8]) -> Result<Subscription, DecodeError> {
        let (version, m) = decode_versioned::<ConsumerProtocolSubscription>(bytes)?;
        Ok(Subscription {
            version,
            topics: m.topics.iter().map(|t| t.to_string()).collect(),
            owned: flatten(
                m.owned_partitions
                    .into_iter()
                    .map(|o| (o.topic.0.to_string(), o.partitions)),
            )?,
            user_data: m.user_data.map(|b| b.to_vec()).unwrap_or_default(),
        })
    }
}

impl MemberAssignment {
    pub fn encode(&self) -> Vec<u8> {
        let mut m = ConsumerProtocolAssignment::default();
        m.assigned_partitions = by_topic(&self.partitions)
            .into_iter()
            .map(|(t, partitions)| {
                let mut a = AssignedTopic::default();
                a.topic = topic_name(&t);
                a.partitions = partitions;
                a
            })
            .collect();
        m.user_data = (!self.user_data.is_empty()).then(|| Bytes::copy_from_slice(&self.user_data));
        encode_versioned(&m, self.version.max(VERSION))
    }

    /// An empty byte string is an empty assignment (a member the leader gave nothing).
    pub fn decode(bytes: &[u8]) -> Result<MemberAssignment, DecodeError> {
        if bytes.is_empty() {
            return Ok(MemberAssignment::default());
        }
        let (version, m) = decode_versioned::<ConsumerProtocolAssignment>(bytes)?;
        Ok(MemberAssignment {
            version,
            partitions: flatten(
                m.assigned_partitions
                    .into_iter()
                    .map(|a| (a.topic.0.to_string(), a.partitions)),
            )?,
            user_data: m.user_data.map(|b| b.to_vec()).unwrap_or_default(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_rejects_garbage() {
        let s = Subscription {
            version: VERSION,
            topics: vec!["a".into(), "b".into()],
            owned: vec![("a".into(), 3)],
            user_data: vec![1, 2],
        };
        assert_eq!(Subscription::decode(&s.encode()).unwrap(), s);
        let a = MemberAssignment {
            version: VERSION,
            partitions: vec![("a".into(), 0), ("b".into(), 7)],
            user_data: Vec::new(),
        };
        assert_eq!(MemberAssignment::decode(&a.encode()).unwrap(), a);
        assert_eq!(
            MemberAssignment::decode(&[]).unwrap(),
            MemberAssignment::default()
        );
        let mut bad = a.encode();
        bad.truncate(bad.len() - 3);
        assert!(MemberAssignment::decode(&bad).is_err());
        assert!(Subscription::decode(b"\xff\xffnot a subscription").is_err());
        assert!(Subscription::decode(b"\x00\x01\x7f\xff\xff\xff").is_err());
        // Kafka's Java client writes v3 (generation and rack after the v1 fields).
        let mut v3 = ConsumerProtocolSubscription::default();
        v3.topics = vec![StrBytes::from_static_str("a")];
        v3.generation_id = 7;
        v3.rack_id = Some(StrBytes::from_static_str("r1"));
        let got = Subscription::decode(&encode_versioned(&v3, 3)).unwrap();
        assert_eq!((got.version, got.topics), (3, vec!["a".to_string()]));
    }
}
