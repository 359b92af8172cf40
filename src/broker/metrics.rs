//! What a shard reports to a metrics scrape (`--metrics-listen`): its request counters, and
//! values read from the state they describe (partitions, tail cache, group commit,
//! connections, committed offsets). Built on the shard's thread when a scrape asks; nothing
//! here runs on the data path.

use super::Shard;
use crate::metrics::{CommittedSnapshot, Listener, PartitionSnapshot, ShardSnapshot};

impl Shard {
    pub fn metrics_snapshot(&self) -> ShardSnapshot {
        let mut s = ShardSnapshot {
            shard: self.id,
            ..ShardSnapshot::default()
        };
        self.metrics.snapshot_into(&mut s);
        let gc = self.group_commit.stats();
        s.commit_round_bytes = Some(gc.round_bytes);
        s.commit_round_partitions = Some(gc.round_partitions);
        s.commit_write_latency = Some(gc.write);
        s.fdatasync_latency = Some(gc.fdatasync);
        s.checkpoint_latency = Some(self.checkpoint_duration.snapshot());
        (s.tail_cache_hits, s.tail_cache_misses) = self.cache.hits_and_misses();
        s.tail_cache_bytes = self.cache.used_bytes() as u64;
        s.tail_cache_budget_bytes = self.cache.budget() as u64;
        let ahead = self.cache.read_ahead();
        (
            s.read_ahead_started,
            s.read_ahead_taken,
            s.read_ahead_evicted,
        ) = ahead.counts();
        s.read_ahead_bytes = ahead.used_bytes() as u64;
        s.connections
            .push((Listener::Native, self.native_conns.open() as u64));
        if self.cfg.kafka_listen.is_some() {
            s.connections
                .push((Listener::Kafka, self.kafka_conns.open() as u64));
        }
        // Only the partitions this shard owns: the series stay bounded by its placement.
        s.partitions = self
            .all_partitions()
            .iter()
            .map(|p| {
                let (bytes_in, bytes_out) = p.traffic();
                PartitionSnapshot {
                    topic: p.topic.to_string(),
                    partition: p.index,
                    bytes_in,
                    bytes_out,
                    high_watermark: p.high_watermark(),
                    log_start_offset: p.log_start_offset(),
                }
            })
            .collect();
        s.partitions
            .sort_by(|a, b| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)));
        s.committed = self
            .groups
            .every_committed()
            .into_iter()
            .map(|(group, topic, partition, offset)| CommittedSnapshot {
                group,
                topic,
                partition,
                offset,
            })
            .collect();
        s
    }
}
