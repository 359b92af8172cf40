//! Transactions (issue 17): the transaction coordinator, sans-IO. A coordinator serves the
//! transactional ids of one `__transactions` partition (the one [`partition_of`] names) while
//! its shard leads that partition; every change of an id's state is a record of that
//! partition ([`log_record`]), applied only once durable, so a new leader resumes from the log.
//! [`coordinator`] is the state machine (events in, actions out); [`state`] Kafka's
//! `TransactionState`.

pub mod coordinator;
pub mod log_record;
pub mod state;

#[cfg(test)]
mod scenarios;
#[cfg(test)]
mod schedules;

/// The internal topic holding the coordinators' logs (Kafka's name).
pub const TRANSACTIONS_TOPIC: &str = "__transactions";

/// A partition a transaction wrote to (or the offsets partition of a group it committed
/// offsets for).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TopicPartition {
    pub topic: String,
    pub partition: u32,
}

impl TopicPartition {
    pub fn new(topic: impl Into<String>, partition: u32) -> TopicPartition {
        TopicPartition {
            topic: topic.into(),
            partition,
        }
    }
}

/// The `__transactions` partition of a transactional id: Kafka's `abs(hash) % n`, with a
/// hash that is stable across builds and platforms (FNV-1a of the UTF-8 bytes), so every
/// broker names the same coordinator.
pub fn partition_of(transactional_id: &str, partitions: u32) -> u32 {
    assert!(partitions > 0, "a topic has at least one partition");
    let mut h: u32 = 0x811c_9dc5;
    for b in transactional_id.as_bytes() {
        h ^= u32::from(*b);
        h = h.wrapping_mul(0x0100_0193);
    }
    h % partitions
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_always_maps_to_the_same_partition_in_range() {
        for n in [1u32, 7, 50] {
            for id in ["", "a", "payments-1", "ünïcode"] {
                let p = partition_of(id, n);
                assert!(p < n);
                assert_eq!(p, partition_of(id, n));
            }
        }
        // Pinned: brokers of different builds must agree.
        // FNV-1a("a") = 0xe40c292c.
        assert_eq!(partition_of("a", 1000), 220);
        assert_ne!(
            (0..20)
                .map(|i| partition_of(&format!("id-{i}"), 50))
                .collect::<std::collections::BTreeSet<_>>()
                .len(),
            1
        );
    }
}
