//! Client quotas in Kafka's model, sans-IO: what a quota applies to ([`QuotaEntity`]: a user,
//! a client id, or both, each possibly the `<default>`), which quota a connection falls under
//! ([`resolve`], Kafka's precedence), and how far over it a client is ([`RateWindow`]: a
//! token bucket, and the pause a client has earned).
//!
//! Quotas are per node as Kafka's are per broker; every shard is its own node to Kafka clients
//! (it is advertised as one), so each shard keeps its own windows: a client spread over N
//! shards may use N times a byte rate, as a Kafka client spread over N brokers does.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// A produce byte rate (bytes/s of record batches a client sends).
pub const PRODUCER_BYTE_RATE: &str = "producer_byte_rate";
/// A fetch byte rate (bytes/s of record data a client is sent).
pub const CONSUMER_BYTE_RATE: &str = "consumer_byte_rate";
/// Requests per second (rill's: Kafka's `request_percentage` counts handler time instead).
pub const REQUEST_RATE: &str = "request_rate";
/// The quota keys rill enforces.
pub const KEYS: [&str; 3] = [PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE, REQUEST_RATE];

/// What kind of use a window counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum QuotaKind {
    Produce,
    Fetch,
    Request,
}

impl QuotaKind {
    pub fn key(self) -> &'static str {
        match self {
            QuotaKind::Produce => PRODUCER_BYTE_RATE,
            QuotaKind::Fetch => CONSUMER_BYTE_RATE,
            QuotaKind::Request => REQUEST_RATE,
        }
    }
}

/// One side of an entity: a name, or every name without its own quota (`<default>`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum EntityName {
    Name(String),
    Default,
}

/// What a quota applies to: a user, a client id, or a user's clients with an id; at least one.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct QuotaEntity {
    pub user: Option<EntityName>,
    pub client_id: Option<EntityName>,
}

impl QuotaEntity {
    /// Kafka's `user=alice,client-id=<default>` form.
    pub fn describe(&self) -> String {
        let part = |k: &str, v: &Option<EntityName>| match v {
            None => None,
            Some(EntityName::Default) => Some(format!("{k}=<default>")),
            Some(EntityName::Name(n)) => Some(format!("{k}={n}")),
        };
        [part("user", &self.user), part("client-id", &self.client_id)]
            .into_iter()
            .flatten()
            .collect::<Vec<_>>()
            .join(",")
    }
}

/// Why a quota change is refused (Kafka: INVALID_REQUEST).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum QuotaError {
    #[error("a quota names a user, a client id or both")]
    NoEntity,
    #[error("unknown quota key '{0}' (producer_byte_rate, consumer_byte_rate, request_rate)")]
    UnknownKey(String),
    #[error("quota {key} must be a positive finite number, not {value}")]
    BadValue { key: String, value: f64 },
    #[error("an entity name has 1 to {MAX_NAME} bytes")]
    Name,
}

/// Longest user or client id a quota names (bytes).
pub const MAX_NAME: usize = 1024;

/// Checks a quota change.
pub fn validate(
    entity: &QuotaEntity,
    set: &BTreeMap<String, f64>,
    remove: &[String],
) -> Result<(), QuotaError> {
    if entity.user.is_none() && entity.client_id.is_none() {
        return Err(QuotaError::NoEntity);
    }
    for n in [&entity.user, &entity.client_id].into_iter().flatten() {
        if let EntityName::Name(n) = n {
            if n.is_empty() || n.len() > MAX_NAME {
                return Err(QuotaError::Name);
            }
        }
    }
    for k in set.keys().chain(remove) {
        if !KEYS.contains(&k.as_str()) {
            return Err(QuotaError::UnknownKey(k.clone()));
        }
    }
    for (k, v) in set {
        if !(v.is_finite() && *v > 0.0) {
            return Err(QuotaError::BadValue {
                key: k.clone(),
                value: *v,
            });
        }
    }
    Ok(())
}

/// The quota of `kind` a connection of `user` (when authenticated) and `client_id` falls
/// under, and the entity whose window counts it: the most specific entity holding that key,
/// in Kafka's order (user+client, user+default client, user, default user+client, default
/// user+default client, default user, client, default client).
pub fn resolve(
    quotas: &BTreeMap<QuotaEntity, BTreeMap<String, f64>>,
    user: Option<&str>,
    client_id: &str,
    kind: QuotaKind,
) -> Option<(QuotaEntity, f64)> {
    if quotas.is_empty() {
        return None;
    }
    let name = |s: &str| Some(EntityName::Name(s.to_string()));
    let default = || Some(EntityName::Default);
    let mut candidates = Vec::with_capacity(8);
    if let Some(u) = user {
        candidates.push((name(u), name(client_id)));
        candidates.push((name(u), default()));
        candidates.push((name(u), None));
        candidates.push((default(), name(client_id)));
        candidates.push((default(), default()));
        candidates.push((default(), None));
    }
    candidates.push((None, name(client_id)));
    candidates.push((None, default()));
    candidates.into_iter().find_map(|(user, client_id)| {
        let e = QuotaEntity { user, client_id };
        let v = *quotas.get(&e)?.get(kind.key())?;
        Some((e, v))
    })
}

/// How much use a client may spend at once: one second of its quota (Kafka's quota sample
/// is one second). A bucket starts full.
pub const BURST: Duration = Duration::from_secs(1);

/// A client's use against one quota: a token bucket (Kafka's model for controller mutation
/// quotas, KIP-599) refilled at the quota's rate and holding at most [`BURST`] of it. A use
/// that takes it below zero earns a pause of the deficit over the rate, so over any span of
/// time a client that honours its pauses (or whose connection is not read meanwhile) gets the
/// quota times the span, plus at most one burst. (Kafka's byte-rate quotas measure an
/// 11-second sampled window instead, which lets a new client send ten seconds' worth before
/// the first pause and then pauses it for as long: the same average, far burstier.)
#[derive(Debug, Clone)]
pub struct RateWindow {
    tokens: f64,
    at: Option<Instant>,
}

impl RateWindow {
    pub fn new() -> RateWindow {
        RateWindow {
            tokens: 0.0,
            at: None,
        }
    }

    fn refill(&mut self, now: Instant, quota: f64) {
        let cap = quota * BURST.as_secs_f64();
        self.tokens = match self.at {
            None => cap,
            Some(at) => (self.tokens + now.duration_since(at).as_secs_f64() * quota).min(cap),
        };
        self.at = Some(now);
    }

    /// Spends `amount` under `quota` (per second); the pause it earned.
    pub fn record(&mut self, now: Instant, amount: f64, quota: f64) -> Duration {
        if !(quota.is_finite() && quota > 0.0) {
            return Duration::ZERO;
        }
        self.refill(now, quota);
        self.tokens -= amount;
        if self.tokens >= 0.0 {
            return Duration::ZERO;
        }
        Duration::from_secs_f64((-self.tokens / quota).min(MAX_PAUSE.as_secs_f64()))
    }

    /// Whether the bucket is full again by now (its entry may be dropped).
    pub fn idle(&self, now: Instant, quota: f64) -> bool {
        let mut w = self.clone();
        w.refill(now, quota);
        w.tokens >= quota * BURST.as_secs_f64()
    }
}

/// The longest pause one use earns (a single request far past its quota is paused this long;
/// the next ones go on paying its debt).
pub const MAX_PAUSE: Duration = Duration::from_secs(30);

impl Default for RateWindow {
    fn default() -> Self {
        RateWindow::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entity(user: Option<&str>, client: Option<&str>) -> QuotaEntity {
        let n = |s: &str| {
            if s == "<default>" {
                EntityName::Default
            } else {
                EntityName::Name(s.into())
            }
        };
        QuotaEntity {
            user: user.map(n),
            client_id: client.map(n),
        }
    }

    #[test]
    fn the_most_specific_entity_with_the_key_wins() {
        let mut q = BTreeMap::new();
        let set = |q: &mut BTreeMap<_, BTreeMap<String, f64>>, e, k: &str, v| {
            q.entry(e).or_default().insert(k.to_string(), v);
        };
        set(
            &mut q,
            entity(None, Some("<default>")),
            PRODUCER_BYTE_RATE,
            1.0,
        );
        set(&mut q, entity(None, Some("app")), PRODUCER_BYTE_RATE, 2.0);
        set(
            &mut q,
            entity(Some("<default>"), None),
            PRODUCER_BYTE_RATE,
            3.0,
        );
        set(&mut q, entity(Some("alice"), None), PRODUCER_BYTE_RATE, 4.0);
        set(
            &mut q,
            entity(Some("alice"), Some("app")),
            CONSUMER_BYTE_RATE,
            5.0,
        );
        let r = |u, c, k| resolve(&q, u, c, k).map(|(_, v)| v);
        assert_eq!(r(None, "other", QuotaKind::Produce), Some(1.0));
        assert_eq!(r(None, "app", QuotaKind::Produce), Some(2.0));
        assert_eq!(r(Some("bob"), "app", QuotaKind::Produce), Some(3.0));
        assert_eq!(r(Some("alice"), "app", QuotaKind::Produce), Some(4.0));
        assert_eq!(r(Some("alice"), "app", QuotaKind::Fetch), Some(5.0));
        assert_eq!(r(Some("alice"), "x", QuotaKind::Fetch), None);
        assert_eq!(r(None, "app", QuotaKind::Request), None);
    }

    #[test]
    fn bad_changes_are_refused() {
        let ok = BTreeMap::from([(PRODUCER_BYTE_RATE.to_string(), 1024.0)]);
        assert_eq!(
            validate(&entity(None, None), &ok, &[]),
            Err(QuotaError::NoEntity)
        );
        assert_eq!(validate(&entity(Some("a"), None), &ok, &[]), Ok(()));
        let bad = BTreeMap::from([("bytes".to_string(), 1.0)]);
        assert!(matches!(
            validate(&entity(Some("a"), None), &bad, &[]),
            Err(QuotaError::UnknownKey(_))
        ));
        for v in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            let bad = BTreeMap::from([(REQUEST_RATE.to_string(), v)]);
            assert!(matches!(
                validate(&entity(Some("a"), None), &bad, &[]),
                Err(QuotaError::BadValue { .. })
            ));
        }
        assert_eq!(
            validate(&entity(Some(""), None), &ok, &[]),
            Err(QuotaError::Name)
        );
    }

    #[test]
    fn a_client_honouring_its_pauses_gets_the_quota_plus_one_burst() {
        let t0 = Instant::now();
        let quota = 1000.0;
        let mut w = RateWindow::new();
        // A client sending 100-unit requests as fast as its pauses let it, for 20 s.
        let mut now = t0;
        let mut sent = 0.0;
        while now < t0 + Duration::from_secs(20) {
            sent += 100.0;
            now += w.record(now, 100.0, quota);
        }
        // 20 s at the quota, plus the burst it started with, within one request.
        let want = quota * 20.0 + quota * BURST.as_secs_f64();
        assert!((sent - want).abs() <= 100.0, "sent {sent}, want {want}");
        // Below its quota a client is never paused.
        let mut slow = RateWindow::new();
        for i in 0..100u64 {
            let at = t0 + Duration::from_millis(200 * i);
            assert_eq!(slow.record(at, 100.0, quota), Duration::ZERO);
        }
        assert!(slow.idle(t0 + Duration::from_secs(60), quota));
        assert!(!w.idle(now, quota));
        // One huge request is paused for its debt (bounded).
        let mut big = RateWindow::new();
        assert_eq!(big.record(t0, 6000.0, quota), Duration::from_secs(5));
        assert_eq!(big.record(t0, 1e12, quota), MAX_PAUSE);
    }

    #[test]
    fn quotas_are_set_removed_and_survive_a_metadata_snapshot() {
        use crate::controller::metadata::{ClusterMetadata, Command, MetadataLimits};
        let limits = MetadataLimits::default();
        let mut m = ClusterMetadata::default();
        let alter =
            |e: QuotaEntity, set: &[(&str, f64)], remove: &[&str]| Command::AlterClientQuota {
                entity: e,
                set: set.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
                remove: remove.iter().map(|k| k.to_string()).collect(),
            };
        let alice = entity(Some("alice"), None);
        let deflt = entity(None, Some("<default>"));
        m.apply(
            1,
            &alter(alice.clone(), &[(PRODUCER_BYTE_RATE, 1e6)], &[]),
            &limits,
        )
        .unwrap();
        m.apply(
            2,
            &alter(deflt.clone(), &[(REQUEST_RATE, 50.0)], &[]),
            &limits,
        )
        .unwrap();
        let json = serde_json::to_string(&m).unwrap();
        let back: ClusterMetadata = serde_json::from_str(&json).unwrap();
        assert_eq!(back.quotas, m.quotas);
        assert_eq!(
            resolve(&back.quotas, Some("alice"), "c", QuotaKind::Produce),
            Some((alice.clone(), 1e6))
        );
        let e = m
            .apply(3, &alter(alice.clone(), &[("bogus", 1.0)], &[]), &limits)
            .unwrap_err();
        assert_eq!(e.code, crate::protocol::ErrorCode::InvalidRequest);
        m.apply(4, &alter(alice, &[], &[PRODUCER_BYTE_RATE]), &limits)
            .unwrap();
        m.apply(5, &alter(deflt, &[], &[REQUEST_RATE]), &limits)
            .unwrap();
        assert!(m.quotas.is_empty());
        assert!(!serde_json::to_string(&m).unwrap().contains("quotas"));
    }
}
