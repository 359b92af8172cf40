//! Group coordination follows the leadership of `__consumer_offsets`: a shard coordinates
//! the groups of the offsets partitions it leads (at the metadata's leader epoch), and only
//! once it loaded their committed offsets from its own replica. Run after every metadata
//! apply: a partition newly led here starts loading (its groups answer
//! COORDINATOR_LOAD_IN_PROGRESS until done), one led no longer is unloaded (its groups
//! answer NOT_COORDINATOR; members find the new coordinator and rejoin, as in Kafka, where
//! generations are not replicated either; committed offsets are).

use std::rc::Rc;
use std::time::{Duration, Instant};

use super::group_host::{Coordination, OFFSETS_TOPIC};
use super::{offsets_log, Shard};
use crate::partition::Partition;

/// A load waiting for its high watermark looks again at least this often (the leadership
/// may have moved on).
const LOAD_RECHECK: Duration = Duration::from_millis(500);

/// Brings the shard's coordination in line with its metadata and partitions' roles: starts a
/// load for each offsets partition led here at a new epoch, unloads those not led here.
pub fn sync(shard: &Rc<Shard>) {
    let md = shard.metadata.borrow().clone();
    let node = shard.cfg.node_id;
    let topic = md.topic(OFFSETS_TOPIC);
    let n = topic.map_or(0, |t| t.partitions.len() as u32);
    for (k, state) in shard.groups.coordinated() {
        let still = topic
            .and_then(|t| t.partitions.get(k as usize))
            .is_some_and(|pi| pi.leader == node && pi.shard as usize == shard.id);
        if !still {
            log::info!(
                "shard {}: no longer coordinating the groups of {OFFSETS_TOPIC}-{k} ({state:?})",
                shard.id
            );
            shard.groups.unload(k, n.max(1));
        }
    }
    let Some(t) = topic else { return };
    for pi in &t.partitions {
        if pi.leader != node || pi.shard as usize != shard.id {
            continue;
        }
        let Some(p) = shard.partition(OFFSETS_TOPIC, pi.partition) else {
            continue;
        };
        // Not (yet) the leader the metadata says: the role change failed or is on its way;
        // the next apply looks again.
        if p.is_follower() || p.leader_epoch() != pi.leader_epoch {
            continue;
        }
        let epoch = pi.leader_epoch;
        match shard.groups.coordination(pi.partition) {
            Some(Coordination::Loading { epoch: e } | Coordination::Active { epoch: e })
                if e == epoch => {}
            _ => {
                log::info!(
                    "shard {}: loading the groups of {OFFSETS_TOPIC}-{} (leader epoch {epoch})",
                    shard.id,
                    pi.partition
                );
                shard.groups.begin_load(pi.partition, n, epoch);
                rill_shards::rt::spawn_local(load(shard.clone(), p, epoch)).detach();
            }
        }
    }
}

/// Loads partition `p`'s groups at `epoch`. A new leader's log may end past its high
/// watermark with commits the old leader acknowledged (every ISR member had them, so this
/// one too): they become visible once the ISR has them, so the load first waits for the
/// high watermark to reach the log end it found.
async fn load(shard: Rc<Shard>, p: Rc<Partition>, epoch: u32) {
    let k = p.index;
    let current = || shard.groups.coordination(k) == Some(Coordination::Loading { epoch });
    let end = p.log_end_offset();
    loop {
        let l = p.listen();
        if !current() {
            return;
        }
        if p.high_watermark() >= end {
            break;
        }
        let recheck = shard.deadlines.sleep_until(Instant::now() + LOAD_RECHECK);
        futures_lite::future::or(l, recheck).await;
    }
    if !offsets_log::replay(&shard, &p, current).await {
        return;
    }
    // Nothing awaited since `replay` last saw this load current.
    let finished = shard.groups.finish_load(k, epoch);
    assert!(
        finished,
        "a load is current until an await lets the metadata move"
    );
}

/// Waits for the loads of offsets partitions with one replica (at start: they need nobody
/// else, so the shard serves their groups from its first request, as before replication).
/// Replicated ones may wait for followers, which need this shard serving: not awaited.
pub async fn wait_single_replica_loads(shard: &Shard) {
    let single: Vec<u32> = shard
        .all_partitions()
        .into_iter()
        .filter(|p| &*p.topic == OFFSETS_TOPIC && !p.is_replicated_leader() && !p.is_follower())
        .map(|p| p.index)
        .collect();
    shard.groups.wait_loaded(&single).await;
}
