//! The bytes a consumer puts in JoinGroup's protocol metadata (its subscription) and the group
//! leader puts in SyncGroup (each member's assignment). The coordinator relays both without
//! reading them; only clients and `rill group describe` decode them, and they come from other
//! processes, so decoding validates (rkyv bytecheck) and never panics.

use rkyv::{Archive, Deserialize, Serialize};

use super::assignor::TopicPartition;
use crate::protocol::frame::{decode_meta, encode_meta, FrameError};

/// The protocol type consumers join groups with.
pub const CONSUMER_PROTOCOL_TYPE: &str = "consumer";

/// Version written by this build; readers accept it and anything newer with the same fields.
pub const VERSION: u16 = 1;

/// A member's subscription, sent with every JoinGroup.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Default)]
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
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Default)]
pub struct MemberAssignment {
    pub version: u16,
    pub partitions: Vec<TopicPartition>,
    pub user_data: Vec<u8>,
}

impl Subscription {
    pub fn encode(&self) -> Vec<u8> {
        encode_meta(self).map(|v| v.to_vec()).unwrap_or_default()
    }
    pub fn decode(bytes: &[u8]) -> Result<Subscription, FrameError> {
        decode_meta(bytes)
    }
}

impl MemberAssignment {
    pub fn encode(&self) -> Vec<u8> {
        encode_meta(self).map(|v| v.to_vec()).unwrap_or_default()
    }
    /// An empty byte string is an empty assignment (a member the leader gave nothing).
    pub fn decode(bytes: &[u8]) -> Result<MemberAssignment, FrameError> {
        if bytes.is_empty() {
            return Ok(MemberAssignment::default());
        }
        decode_meta(bytes)
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
        let n = bad.len();
        bad[n - 4..].copy_from_slice(&[0xff; 4]);
        assert!(MemberAssignment::decode(&bad).is_err());
        assert!(Subscription::decode(b"not rkyv at all").is_err());
    }
}
