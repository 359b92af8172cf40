//! `--metrics-listen`: each shard answers snapshot requests on a flume channel (control
//! traffic, like metadata updates), and the `rill-metrics` HTTP thread asks all of them per
//! scrape, adds the controller's raft state and renders the text ([`crate::metrics`]).
//!
//! Asked on demand rather than published periodically: nothing runs when nobody scrapes, a
//! scrape sees values current to the moment it asked (a test can check exact counts right
//! after its requests), and the data path never touches a lock; a shard that does not answer
//! within [`SHARD_ANSWER_WAIT`] shows as `rill_shard_up 0` instead of stalling the scrape.

use std::net::TcpListener;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::broker::Shard;
use crate::controller::ControllerHandle;
use crate::metrics::http::MetricsServer;
use crate::metrics::{render, ControllerSnapshot, ShardSnapshot};

/// How long a scrape waits for every shard's snapshot (Prometheus's default scrape timeout
/// is 10 s).
pub const SHARD_ANSWER_WAIT: Duration = Duration::from_secs(5);
/// Snapshot requests queued per shard; a scrape finding the queue full counts the shard as
/// not answering.
const QUEUE: usize = 8;

/// Where a shard sends one snapshot.
pub type SnapshotReply = flume::Sender<ShardSnapshot>;

/// The scrape side of every shard's channel.
pub struct Scrapers {
    shards: Vec<flume::Sender<SnapshotReply>>,
}

/// One channel per shard: the scrape side, and each shard's receiving side (item `i` for
/// shard `i`).
pub fn channels(shards: usize) -> (Scrapers, Vec<flume::Receiver<SnapshotReply>>) {
    let (txs, rxs) = (0..shards).map(|_| flume::bounded(QUEUE)).unzip();
    (Scrapers { shards: txs }, rxs)
}

impl Scrapers {
    /// Every shard's snapshot, asked of all at once; `None` for a shard that did not answer
    /// in time (stopped, or busy past the wait).
    pub fn collect(&self) -> Vec<(usize, Option<ShardSnapshot>)> {
        let asked: Vec<_> = self
            .shards
            .iter()
            .map(|tx| {
                let (reply, rx) = flume::bounded(1);
                tx.try_send(reply).ok().map(|()| rx)
            })
            .collect();
        let deadline = Instant::now() + SHARD_ANSWER_WAIT;
        asked
            .into_iter()
            .enumerate()
            .map(|(i, rx)| (i, rx.and_then(|rx| rx.recv_deadline(deadline).ok())))
            .collect()
    }
}

/// A shard's task: answers snapshot requests until the scrape side is gone.
pub async fn answer_scrapes(shard: Rc<Shard>, requests: flume::Receiver<SnapshotReply>) {
    while let Ok(reply) = requests.recv_async().await {
        // The scrape may have given up waiting: nobody to tell.
        let _ = reply.send(shard.metrics_snapshot());
    }
}

/// Serves `listener` until stopped.
pub fn start(
    listener: TcpListener,
    scrapers: Scrapers,
    controller: ControllerHandle,
) -> std::io::Result<MetricsServer> {
    let render = Arc::new(move || {
        let shards = scrapers.collect();
        let raft = controller.raft_status().map(|r| ControllerSnapshot {
            is_leader: r.is_leader,
            term: r.term,
            committed_index: r.committed_index,
            applied_index: r.applied_index,
        });
        render(&shards, raft)
    });
    MetricsServer::start(listener, render)
}
