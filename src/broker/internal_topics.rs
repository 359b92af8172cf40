//! Creating the internal topics whose partition leaders are coordinators: `__consumer_offsets`
//! (groups) and `__transactions` (transactions). A single-node broker creates
//! `__consumer_offsets` at start with one replica (as it always did), and `__transactions` at
//! the first transaction coordinator request (most brokers never see one). A broker of a
//! cluster creates either lazily, as Kafka does, at the first coordinator request that finds
//! it missing (FindCoordinator and every group or transaction API of both listeners), with
//! replication factor min(3, live brokers), once at least min(3, voters) brokers are live:
//! created earlier, while the other brokers are still registering, it would stay at one
//! replica (only a reassignment raises it). Until it exists the answer is
//! COORDINATOR_NOT_AVAILABLE, which every client retries.

use std::cell::Cell;
use std::time::{Duration, Instant};

use super::group_host::OFFSETS_TOPIC;
use super::Shard;
use crate::controller::cluster::MIN_INSYNC_REPLICAS;
use crate::controller::metadata::{ClusterMetadata, Command};
use crate::protocol::ErrorCode;
use crate::transactions::TRANSACTIONS_TOPIC;

/// The replication factor the internal topics aim for (Kafka's
/// `offsets.topic.replication.factor` and `transaction.state.log.replication.factor`
/// defaults).
pub const OFFSETS_TOPIC_REPLICATION_FACTOR: usize = 3;

/// An internal topic of coordinators.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InternalTopic {
    /// `__consumer_offsets`: group coordinators and committed offsets.
    Offsets,
    /// `__transactions`: transaction coordinators and their logs.
    Transactions,
}

impl InternalTopic {
    pub fn name(self) -> &'static str {
        match self {
            InternalTopic::Offsets => OFFSETS_TOPIC,
            InternalTopic::Transactions => TRANSACTIONS_TOPIC,
        }
    }

    /// Its partition count when created (`--offsets-topic-partitions`,
    /// `--transaction-state-partitions`).
    pub fn partitions(self, cfg: &super::BrokerConfig) -> u32 {
        match self {
            InternalTopic::Offsets => cfg.offsets_topic_partitions,
            InternalTopic::Transactions => cfg.transaction_state_partitions,
        }
    }
}

/// A shard proposes the creation at most this often (clients ask again and again meanwhile).
const CREATE_RETRY: Duration = Duration::from_secs(1);

/// The creation command: `replication_factor` replicas, kept forever (until compacted:
/// retention would drop committed offsets or transaction states). Appends wait for the whole
/// ISR (Kafka's `offsets.commit.required.acks=-1`, and the transaction log's acks=all); with
/// several replicas they are refused while fewer than two are in sync (`min.insync.replicas`
/// 2, Kafka's `transaction.state.log.min.isr` default and what Kafka is run with in
/// production), so an acknowledged append is always on two brokers. One replica: as it
/// always was.
pub fn create_command(topic: InternalTopic, partitions: u32, replication_factor: u16) -> Command {
    let mut configs: std::collections::BTreeMap<String, String> = [
        ("segment.bytes".to_string(), (16u64 << 20).to_string()),
        ("retention.ms".to_string(), "-1".to_string()),
    ]
    .into_iter()
    .collect();
    if replication_factor > 1 {
        configs.insert(MIN_INSYNC_REPLICAS.to_string(), "2".to_string());
    }
    Command::CreateTopic {
        name: topic.name().to_string(),
        partitions,
        replication_factor,
        configs,
    }
}

/// The replication factor to create the topic with now in a cluster of `voters` voters, or
/// `None` while too few brokers are live to give it the replicas it should have.
pub fn cluster_replication_factor(md: &ClusterMetadata, voters: usize) -> Option<u16> {
    let live = md.live_brokers().len();
    let wanted = OFFSETS_TOPIC_REPLICATION_FACTOR.min(voters.max(1));
    (live >= wanted).then(|| live.min(OFFSETS_TOPIC_REPLICATION_FACTOR) as u16)
}

/// When this shard last proposed the creation of each internal topic.
#[derive(Default)]
pub struct CreateThrottle([Cell<Option<Instant>>; 2]);

impl CreateThrottle {
    fn of(&self, topic: InternalTopic) -> &Cell<Option<Instant>> {
        &self.0[topic as usize]
    }
}

/// An internal topic is missing: proposes its creation (at most every [`CREATE_RETRY`] per
/// shard; another broker's creation first is fine). The caller answers
/// COORDINATOR_NOT_AVAILABLE either way.
pub fn ensure_created(shard: &Shard, topic: InternalTopic) {
    let voters = shard.cfg.controller_voters.len();
    if voters <= 1 && topic == InternalTopic::Offsets {
        return; // a single node created it at start
    }
    let now = Instant::now();
    let last = shard.internal_topic_create.of(topic);
    if last.get().is_some_and(|at| now < at + CREATE_RETRY) {
        return;
    }
    let Some(rf) = cluster_replication_factor(&shard.metadata.borrow(), voters) else {
        return;
    };
    last.set(Some(now));
    let rx = shard
        .controller
        .propose(create_command(topic, topic.partitions(&shard.cfg), rf));
    let name = topic.name();
    rill_shards::rt::spawn_local(async move {
        match rx.recv_async().await {
            Ok(Ok(_)) => log::info!("created {name} with {rf} replicas"),
            Ok(Err(e)) if e.code() == ErrorCode::TopicAlreadyExists => {}
            Ok(Err(e)) => log::info!("creating {name}: {e}"),
            Err(_) => {}
        }
    })
    .detach();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::metadata::BrokerInfo;

    fn with_brokers(n: u32) -> ClusterMetadata {
        let mut md = ClusterMetadata::default();
        for id in 1..=n {
            md.brokers.insert(
                id,
                BrokerInfo {
                    node_id: id,
                    ..BrokerInfo::default()
                },
            );
        }
        md
    }

    #[test]
    fn waits_for_the_voters_then_takes_up_to_three_replicas() {
        assert_eq!(cluster_replication_factor(&with_brokers(1), 3), None);
        assert_eq!(cluster_replication_factor(&with_brokers(2), 3), None);
        assert_eq!(cluster_replication_factor(&with_brokers(3), 3), Some(3));
        assert_eq!(cluster_replication_factor(&with_brokers(5), 5), Some(3));
        // Non-voter brokers count as live brokers too.
        assert_eq!(cluster_replication_factor(&with_brokers(4), 3), Some(3));
        // A single node (no voters given, or one).
        assert_eq!(cluster_replication_factor(&with_brokers(1), 0), Some(1));
        assert_eq!(cluster_replication_factor(&with_brokers(1), 1), Some(1));
    }

    #[test]
    fn commits_need_two_replicas_in_sync_when_there_are_two() {
        for (rf, min) in [(1u16, None), (2, Some("2")), (3, Some("2"))] {
            for topic in [InternalTopic::Offsets, InternalTopic::Transactions] {
                let Command::CreateTopic { name, configs, .. } = create_command(topic, 8, rf)
                else {
                    panic!()
                };
                assert_eq!(name, topic.name());
                assert_eq!(configs.get(MIN_INSYNC_REPLICAS).map(String::as_str), min);
            }
        }
    }
}
