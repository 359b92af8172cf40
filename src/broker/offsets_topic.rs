//! Creating `__consumer_offsets`. A single-node broker creates it at start with one replica
//! (as it always did). A broker of a cluster creates it lazily, as Kafka does, at the first
//! coordinator request that finds it missing (FindCoordinator and every group API of both
//! listeners), with replication factor min(3, live brokers), once at least min(3, voters)
//! brokers are live: created earlier, while the other brokers are still registering, it
//! would stay at one replica (only a reassignment raises it). Until it exists the answer is
//! COORDINATOR_NOT_AVAILABLE, which every client retries.

use std::cell::Cell;
use std::time::{Duration, Instant};

use super::group_host::OFFSETS_TOPIC;
use super::Shard;
use crate::controller::cluster::MIN_INSYNC_REPLICAS;
use crate::controller::metadata::{ClusterMetadata, Command};
use crate::protocol::ErrorCode;

/// The replication factor the offsets topic aims for (Kafka's
/// `offsets.topic.replication.factor` default).
pub const OFFSETS_TOPIC_REPLICATION_FACTOR: usize = 3;

/// A shard proposes the creation at most this often (clients ask again and again meanwhile).
const CREATE_RETRY: Duration = Duration::from_secs(1);

/// The creation command: `replication_factor` replicas, kept forever (until compacted:
/// retention would drop committed offsets). Commits wait for the whole ISR (Kafka's
/// `offsets.commit.required.acks=-1`); with several replicas they are refused while fewer
/// than two are in sync (`min.insync.replicas` 2, what Kafka is run with in production), so
/// an acknowledged commit is always on two brokers. One replica: as it always was.
pub fn create_command(partitions: u32, replication_factor: u16) -> Command {
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
        name: OFFSETS_TOPIC.to_string(),
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

/// When this shard last proposed the creation.
#[derive(Default)]
pub struct CreateThrottle(Cell<Option<Instant>>);

/// The offsets topic is missing: in a cluster, proposes its creation (at most every
/// [`CREATE_RETRY`] per shard; another broker's creation first is fine). The caller answers
/// COORDINATOR_NOT_AVAILABLE either way.
pub fn ensure_created(shard: &Shard) {
    let voters = shard.cfg.controller_voters.len();
    if voters <= 1 {
        return; // a single node created it at start
    }
    let now = Instant::now();
    if shard
        .offsets_topic_create
        .0
        .get()
        .is_some_and(|at| now < at + CREATE_RETRY)
    {
        return;
    }
    let Some(rf) = cluster_replication_factor(&shard.metadata.borrow(), voters) else {
        return;
    };
    shard.offsets_topic_create.0.set(Some(now));
    let rx = shard
        .controller
        .propose(create_command(shard.cfg.offsets_topic_partitions, rf));
    rill_shards::rt::spawn_local(async move {
        match rx.recv_async().await {
            Ok(Ok(_)) => log::info!("created {OFFSETS_TOPIC} with {rf} replicas"),
            Ok(Err(e)) if e.code() == ErrorCode::TopicAlreadyExists => {}
            Ok(Err(e)) => log::info!("creating {OFFSETS_TOPIC}: {e}"),
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
    }

    #[test]
    fn commits_need_two_replicas_in_sync_when_there_are_two() {
        for (rf, min) in [(1u16, None), (2, Some("2")), (3, Some("2"))] {
            let Command::CreateTopic { configs, .. } = create_command(8, rf) else {
                panic!()
            };
            assert_eq!(configs.get(MIN_INSYNC_REPLICAS).map(String::as_str), min);
        }
    }
}
