//! Coordination follows the leadership of the internal topics: a shard coordinates the
//! groups of the `__consumer_offsets` partitions and the transactional ids of the
//! `__transactions` partitions it leads (at the metadata's leader epoch), and only once it
//! loaded their state from its own replica. Run after every metadata apply: a partition
//! newly led here starts loading (its groups answer COORDINATOR_LOAD_IN_PROGRESS, its
//! transactional ids too, until done), one led no longer is unloaded (NOT_COORDINATOR;
//! members find the new coordinator and rejoin, as in Kafka, where generations are not
//! replicated either; committed offsets and transaction states are).

use std::rc::Rc;
use std::time::{Duration, Instant};

use super::group_host::{Coordination, OFFSETS_TOPIC};
use super::{offsets_log, transactions, Shard};
use crate::partition::Partition;
use crate::transactions::TRANSACTIONS_TOPIC;

/// A load waiting for its high watermark looks again at least this often (the leadership
/// may have moved on).
const LOAD_RECHECK: Duration = Duration::from_millis(500);

/// The coordinators of one internal topic's partitions on a shard.
trait Coordinators {
    fn topic(&self) -> &'static str;
    fn coordination(&self, shard: &Shard, k: u32) -> Option<Coordination>;
    fn coordinated(&self, shard: &Shard) -> Vec<(u32, Coordination)>;
    /// Partition `k` (of `n`) is no longer led here.
    fn unload(&self, shard: &Rc<Shard>, k: u32, n: u32);
    /// Partition `k` (of `n`) is led here at `epoch`: mark it loading and start its load.
    fn begin_load(&self, shard: &Rc<Shard>, p: Rc<Partition>, n: u32, epoch: u32);
}

struct Groups;

impl Coordinators for Groups {
    fn topic(&self) -> &'static str {
        OFFSETS_TOPIC
    }
    fn coordination(&self, shard: &Shard, k: u32) -> Option<Coordination> {
        shard.groups.coordination(k)
    }
    fn coordinated(&self, shard: &Shard) -> Vec<(u32, Coordination)> {
        shard.groups.coordinated()
    }
    fn unload(&self, shard: &Rc<Shard>, k: u32, n: u32) {
        shard.groups.unload(k, n.max(1));
    }
    fn begin_load(&self, shard: &Rc<Shard>, p: Rc<Partition>, n: u32, epoch: u32) {
        shard.groups.begin_load(p.index, n, epoch);
        rill_shards::rt::spawn_local(load_groups(shard.clone(), p, epoch)).detach();
    }
}

struct Transactions;

impl Coordinators for Transactions {
    fn topic(&self) -> &'static str {
        TRANSACTIONS_TOPIC
    }
    fn coordination(&self, shard: &Shard, k: u32) -> Option<Coordination> {
        shard.txns.coordination(k)
    }
    fn coordinated(&self, shard: &Shard) -> Vec<(u32, Coordination)> {
        shard.txns.coordinated()
    }
    fn unload(&self, shard: &Rc<Shard>, k: u32, _n: u32) {
        let out = shard.txns.unload(k);
        transactions::run_actions(shard, k, out);
    }
    fn begin_load(&self, shard: &Rc<Shard>, p: Rc<Partition>, _n: u32, epoch: u32) {
        let out = shard.txns.begin_load(p.index, epoch);
        transactions::run_actions(shard, p.index, out);
        rill_shards::rt::spawn_local(load_transactions(shard.clone(), p, epoch)).detach();
    }
}

/// Brings the shard's coordination in line with its metadata and partitions' roles: starts a
/// load for each internal partition led here at a new epoch, unloads those not led here.
pub fn sync(shard: &Rc<Shard>) {
    sync_topic(shard, &Groups);
    sync_topic(shard, &Transactions);
}

fn sync_topic(shard: &Rc<Shard>, side: &dyn Coordinators) {
    let md = shard.metadata.borrow().clone();
    let node = shard.cfg.node_id;
    let name = side.topic();
    let topic = md.topic(name);
    let n = topic.map_or(0, |t| t.partitions.len() as u32);
    for (k, state) in side.coordinated(shard) {
        let still = topic
            .and_then(|t| t.partitions.get(k as usize))
            .is_some_and(|pi| pi.leader == node && pi.shard as usize == shard.id);
        if !still {
            log::info!(
                "shard {}: no longer coordinating {name}-{k} ({state:?})",
                shard.id
            );
            side.unload(shard, k, n);
        }
    }
    let Some(t) = topic else { return };
    for pi in &t.partitions {
        if pi.leader != node || pi.shard as usize != shard.id {
            continue;
        }
        let Some(p) = shard.partition(name, pi.partition) else {
            continue;
        };
        // Not (yet) the leader the metadata says: the role change failed or is on its way;
        // the next apply looks again.
        if p.is_follower() || p.leader_epoch() != pi.leader_epoch {
            continue;
        }
        let epoch = pi.leader_epoch;
        match side.coordination(shard, pi.partition) {
            Some(Coordination::Loading { epoch: e } | Coordination::Active { epoch: e })
                if e == epoch => {}
            _ => {
                log::info!(
                    "shard {}: loading {name}-{} (leader epoch {epoch})",
                    shard.id,
                    pi.partition
                );
                side.begin_load(shard, p, n, epoch);
            }
        }
    }
}

/// Waits until partition `p`'s high watermark reaches the log end it has now, while
/// `current`. A new leader's log may end past its high watermark with appends the old leader
/// acknowledged (every ISR member had them, so this one too): they become visible once the
/// ISR has them. False when the leadership moved meanwhile.
async fn wait_committed(shard: &Shard, p: &Partition, current: &impl Fn() -> bool) -> bool {
    let end = p.log_end_offset();
    loop {
        let l = p.listen();
        if !current() {
            return false;
        }
        if p.high_watermark() >= end {
            return true;
        }
        let recheck = shard.deadlines.sleep_until(Instant::now() + LOAD_RECHECK);
        futures_lite::future::or(l, recheck).await;
    }
}

/// Loads partition `p`'s groups at `epoch`.
async fn load_groups(shard: Rc<Shard>, p: Rc<Partition>, epoch: u32) {
    let k = p.index;
    let current = || shard.groups.coordination(k) == Some(Coordination::Loading { epoch });
    if !wait_committed(&shard, &p, &current).await {
        return;
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

/// Loads partition `p`'s transactional ids at `epoch`.
async fn load_transactions(shard: Rc<Shard>, p: Rc<Partition>, epoch: u32) {
    let k = p.index;
    let current = || shard.txns.coordination(k) == Some(Coordination::Loading { epoch });
    if !wait_committed(&shard, &p, &current).await {
        return;
    }
    let Some(records) = transactions::read_log(&shard, &p, current).await else {
        return;
    };
    let now = crate::clock::now_ms().max(0) as u64;
    let out = shard.txns.finish_load(k, epoch, records, now);
    let out = out.expect("a load is current until an await lets the metadata move");
    transactions::run_actions(&shard, k, out);
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
