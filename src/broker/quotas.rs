//! Client quotas on a shard: each request's use recorded in the window of the quota it falls
//! under ([`crate::quota::resolve`]: by user, when the connection authenticated, and client
//! id), and how long the connection must pause. The listener puts that in the answer's
//! `throttle_time_ms` (Kafka's) and stops reading the connection for as long (Kafka's
//! channel muting): the client slows down, and keeps its connection. Changes are controller
//! proposals like any metadata.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;
use std::time::{Duration, Instant};

use super::topics::propose;
use super::{OpError, Shard};
use crate::controller::metadata::Command;
use crate::quota::{resolve, QuotaEntity, QuotaKind, RateWindow};

/// Windows kept per shard at most: past it, idle ones are dropped first; a shard serving
/// more distinct quota entities at once than this measures the newest ones from zero.
pub const MAX_WINDOWS: usize = 100_000;

/// One window per (kind, entity) with a quota.
#[derive(Default)]
pub struct QuotaWindows {
    windows: RefCell<HashMap<(QuotaKind, QuotaEntity), RateWindow>>,
}

/// Who a connection is, for quotas.
#[derive(Clone, Debug)]
pub struct QuotaClient<'a> {
    pub user: Option<&'a str>,
    pub client_id: &'a str,
}

/// Records `amount` of `kind` for `client`; the pause it has earned (zero without a quota).
pub fn record(shard: &Shard, client: &QuotaClient<'_>, kind: QuotaKind, amount: f64) -> Duration {
    let md = shard.metadata.borrow();
    let Some((entity, quota)) = resolve(&md.quotas, client.user, client.client_id, kind) else {
        return Duration::ZERO;
    };
    drop(md);
    let now = Instant::now();
    let mut windows = shard.quota_windows.windows.borrow_mut();
    if windows.len() >= MAX_WINDOWS && !windows.contains_key(&(kind, entity.clone())) {
        // Full buckets weigh nothing: a new one starts full too.
        windows.retain(|_, w| !w.idle(now, quota));
        if windows.len() >= MAX_WINDOWS {
            return Duration::ZERO;
        }
    }
    windows
        .entry((kind, entity))
        .or_default()
        .record(now, amount, quota)
}

/// Records a request and its bytes (`produce`, `fetch`: what its records weigh); the longest
/// pause any of the quotas asks.
pub fn record_request(
    shard: &Shard,
    client: &QuotaClient<'_>,
    produced: usize,
    fetched: usize,
) -> Duration {
    if shard.metadata.borrow().quotas.is_empty() {
        return Duration::ZERO;
    }
    let mut t = record(shard, client, QuotaKind::Request, 1.0);
    if produced > 0 {
        t = t.max(record(shard, client, QuotaKind::Produce, produced as f64));
    }
    if fetched > 0 {
        t = t.max(record(shard, client, QuotaKind::Fetch, fetched as f64));
    }
    t
}

/// Every entity's quotas, as this shard applied them.
pub fn list(shard: &Shard) -> Vec<(QuotaEntity, BTreeMap<String, f64>)> {
    shard
        .metadata
        .borrow()
        .quotas
        .iter()
        .map(|(e, q)| (e.clone(), q.clone()))
        .collect()
}

/// Sets and removes keys of one entity's quotas.
pub async fn alter(
    shard: &Rc<Shard>,
    entity: QuotaEntity,
    set: BTreeMap<String, f64>,
    remove: Vec<String>,
    timeout: Duration,
) -> Result<(), OpError> {
    propose(
        shard,
        Command::AlterClientQuota {
            entity,
            set,
            remove,
        },
        timeout,
    )
    .await
}
