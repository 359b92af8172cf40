//! Per-topic settings: the keys rill knows, their validation, and their effective values over
//! the broker-wide defaults (`--retention-ms` and friends). Plain data, known to the
//! controller (which validates what a topic is created or altered with), the partitions
//! (which apply the effective values), the Kafka listener and the CLI alike.

use std::collections::BTreeMap;
use std::time::Duration;

/// `retention.ms`: closed segments whose newest record is older are deleted (-1: forever).
pub const RETENTION_MS: &str = "retention.ms";
/// `retention.bytes`: per partition; the oldest closed segments go past it (-1: unlimited).
pub const RETENTION_BYTES: &str = "retention.bytes";
/// `segment.bytes`: a segment rolls before it would pass this size.
pub const SEGMENT_BYTES: &str = "segment.bytes";
/// `segment.ms`: a non-empty active segment older than this rolls at the next append.
pub const SEGMENT_MS: &str = "segment.ms";
/// `max.message.bytes`: the largest batch a produce may carry.
pub const MAX_MESSAGE_BYTES: &str = "max.message.bytes";

/// `cleanup.policy`: `delete` (retention), `compact` (keep the latest record per key), or
/// both (`compact,delete`).
pub const CLEANUP_POLICY: &str = "cleanup.policy";
/// `delete.retention.ms`: how long a compacted topic keeps a tombstone (a null value) that is
/// the latest record of its key, so consumers can see the deletion.
pub const DELETE_RETENTION_MS: &str = "delete.retention.ms";
/// `min.cleanable.dirty.ratio`: a partition is compacted once the share of its closed bytes
/// written since the last compaction reaches this.
pub const MIN_CLEANABLE_DIRTY_RATIO: &str = "min.cleanable.dirty.ratio";
/// `min.compaction.lag.ms`: a record stays uncompacted at least this long.
pub const MIN_COMPACTION_LAG_MS: &str = "min.compaction.lag.ms";
/// `max.compaction.lag.ms`: a closed segment is compacted at the latest this long after its
/// newest record, whatever the dirty ratio.
pub const MAX_COMPACTION_LAG_MS: &str = "max.compaction.lag.ms";

/// `write.caching` (Redpanda's name): `true` acknowledges a produce, and shows its records to
/// consumers, once they are in the leader's memory (with replication: in every ISR member's),
/// written behind in order; a crash or a failed write loses what was not written yet.
/// Internal topics never cache.
pub const WRITE_CACHING: &str = "write.caching";

pub const KNOWN: &[&str] = &[
    RETENTION_MS,
    RETENTION_BYTES,
    SEGMENT_BYTES,
    SEGMENT_MS,
    MAX_MESSAGE_BYTES,
    CLEANUP_POLICY,
    DELETE_RETENTION_MS,
    MIN_CLEANABLE_DIRTY_RATIO,
    MIN_COMPACTION_LAG_MS,
    MAX_COMPACTION_LAG_MS,
    crate::replication::REPLICA_LAG_TIME_MAX_MS,
    WRITE_CACHING,
];

/// Kafka's defaults for the compaction settings.
const DEFAULT_DELETE_RETENTION: Duration = Duration::from_millis(86_400_000);
const DEFAULT_MIN_CLEANABLE_DIRTY_RATIO: f64 = 0.5;

/// What happens to a topic's old records (`cleanup.policy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CleanupPolicy {
    /// Closed segments past `retention.ms` / `retention.bytes` are deleted.
    pub delete: bool,
    /// Closed segments are rewritten keeping the latest record of each key.
    pub compact: bool,
}

impl CleanupPolicy {
    pub const DELETE: CleanupPolicy = CleanupPolicy {
        delete: true,
        compact: false,
    };

    /// Parses Kafka's list: `delete`, `compact`, `compact,delete` (any order, spaces allowed).
    pub fn parse(value: &str) -> Option<CleanupPolicy> {
        let mut p = CleanupPolicy {
            delete: false,
            compact: false,
        };
        for part in value.split(',').map(str::trim) {
            match part {
                "delete" => p.delete = true,
                "compact" => p.compact = true,
                _ => return None,
            }
        }
        Some(p)
    }
}

impl std::fmt::Display for CleanupPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match (self.compact, self.delete) {
            (true, true) => "compact,delete",
            (true, false) => "compact",
            _ => "delete",
        })
    }
}

const MIN_SEGMENT_BYTES: u64 = 64 << 10;

/// A topic config refused by [`validate`] (Kafka's INVALID_CONFIG).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TopicConfigError {
    #[error("invalid {key}={value:?}: {why}")]
    Invalid {
        key: String,
        value: String,
        why: &'static str,
    },
    #[error("unknown topic config {key:?} (known: {})", KNOWN.join(", "))]
    Unknown { key: String },
}

fn invalid(key: &str, value: &str, why: &'static str) -> TopicConfigError {
    TopicConfigError::Invalid {
        key: key.to_string(),
        value: value.to_string(),
        why,
    }
}

fn parse_i64(key: &str, value: &str) -> Result<i64, TopicConfigError> {
    value
        .trim()
        .parse::<i64>()
        .map_err(|_| invalid(key, value, "not a whole number"))
}

fn parse_bool(value: &str) -> Option<bool> {
    match value.trim().to_ascii_lowercase().as_str() {
        "true" => Some(true),
        "false" => Some(false),
        _ => None,
    }
}

/// Checks every key and value; unknown keys are refused (a typo must not pass silently).
pub fn validate(configs: &BTreeMap<String, String>) -> Result<(), TopicConfigError> {
    for (key, value) in configs {
        match key.as_str() {
            RETENTION_MS | RETENTION_BYTES => {
                if parse_i64(key, value)? < -1 {
                    return Err(invalid(key, value, "must be -1 (unlimited) or at least 0"));
                }
            }
            SEGMENT_BYTES => {
                let v = parse_i64(key, value)?;
                if v < MIN_SEGMENT_BYTES as i64 || v > i64::from(u32::MAX) {
                    return Err(invalid(key, value, "must be between 65536 and 4294967295"));
                }
            }
            SEGMENT_MS | MAX_MESSAGE_BYTES => {
                let v = parse_i64(key, value)?;
                if v < 1 || (key == MAX_MESSAGE_BYTES && v > i64::from(u32::MAX)) {
                    return Err(invalid(key, value, "must be a positive number"));
                }
            }
            CLEANUP_POLICY => {
                if CleanupPolicy::parse(value).is_none() {
                    return Err(invalid(
                        key,
                        value,
                        "must be delete, compact or compact,delete",
                    ));
                }
            }
            DELETE_RETENTION_MS | MIN_COMPACTION_LAG_MS => {
                if parse_i64(key, value)? < 0 {
                    return Err(invalid(key, value, "must be at least 0"));
                }
            }
            MAX_COMPACTION_LAG_MS | crate::replication::REPLICA_LAG_TIME_MAX_MS => {
                if parse_i64(key, value)? < 1 {
                    return Err(invalid(key, value, "must be a positive number"));
                }
            }
            WRITE_CACHING => {
                if parse_bool(value).is_none() {
                    return Err(invalid(key, value, "must be true or false"));
                }
            }
            MIN_CLEANABLE_DIRTY_RATIO => {
                let ok = value
                    .trim()
                    .parse::<f64>()
                    .is_ok_and(|r| (0.0..=1.0).contains(&r));
                if !ok {
                    return Err(invalid(key, value, "must be a number from 0 to 1"));
                }
            }
            other => {
                return Err(TopicConfigError::Unknown {
                    key: other.to_string(),
                })
            }
        }
    }
    Ok(())
}

/// Broker-wide defaults for every topic setting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicDefaults {
    pub retention: Option<Duration>,
    pub retention_bytes: Option<u64>,
    pub segment_bytes: u64,
    pub segment_age: Option<Duration>,
    pub max_message_bytes: usize,
    /// `--replica-lag-time-max-ms`.
    pub replica_lag_time_max_ms: u64,
    /// `--write-caching`: the default of `write.caching`.
    pub write_caching: bool,
    /// `--write-caching-max-bytes`: per partition, the bytes write caching may hold
    /// acknowledged and unwritten; past it acknowledgements wait for the disk again.
    pub write_caching_max_bytes: usize,
    /// `--write-caching-flush-ms` and `--write-caching-flush-bytes`: when write caching
    /// writes a partition's acknowledged bytes behind.
    pub write_behind: WriteBehind,
}

/// When a caching partition's acknowledged, unwritten bytes go to the disk: once this many
/// are pending, or once the oldest has waited this long (Redpanda's `flush.bytes` and
/// `flush.ms` under write caching). Not sooner: a trickle of small appends written at once
/// is a device write per group-commit round (RESULTS.md, 2026-12-05 twelfth).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteBehind {
    pub delay: Duration,
    pub bytes: usize,
}

impl Default for WriteBehind {
    fn default() -> Self {
        WriteBehind {
            delay: Duration::from_millis(DEFAULT_WRITE_CACHING_FLUSH_MS),
            bytes: DEFAULT_WRITE_CACHING_FLUSH_BYTES,
        }
    }
}

/// `--write-caching-flush-ms`'s default (Redpanda's `flush.ms`).
pub const DEFAULT_WRITE_CACHING_FLUSH_MS: u64 = 100;
/// `--write-caching-flush-bytes`'s default.
pub const DEFAULT_WRITE_CACHING_FLUSH_BYTES: usize = 1 << 20;

impl Default for TopicDefaults {
    fn default() -> Self {
        TopicDefaults {
            retention: Some(Duration::from_secs(14 * 24 * 3600)),
            retention_bytes: None,
            segment_bytes: 128 << 20,
            segment_age: Some(Duration::from_secs(7 * 24 * 3600)),
            max_message_bytes: 16 << 20,
            replica_lag_time_max_ms: crate::replication::DEFAULT_REPLICA_LAG_TIME_MAX_MS,
            write_caching: false,
            write_caching_max_bytes: DEFAULT_WRITE_CACHING_MAX_BYTES,
            write_behind: WriteBehind::default(),
        }
    }
}

/// `--write-caching-max-bytes`'s default: a few group-commit rounds of 1 MiB batches.
pub const DEFAULT_WRITE_CACHING_MAX_BYTES: usize = 16 << 20;

/// A topic's settings with the broker defaults filled in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicSettings {
    pub retention: Option<Duration>,
    pub retention_bytes: Option<u64>,
    pub segment_bytes: u64,
    pub segment_age: Option<Duration>,
    pub max_message_bytes: usize,
    pub cleanup: CleanupPolicy,
    pub delete_retention: Duration,
    /// `min.cleanable.dirty.ratio` in millionths (kept whole so settings compare exactly).
    pub min_cleanable_dirty_ppm: u32,
    pub min_compaction_lag: Duration,
    /// `None`: no maximum (Kafka's default, Long.MAX_VALUE).
    pub max_compaction_lag: Option<Duration>,
    /// `replica.lag.time.max.ms`: a follower behind the leader's log end this long leaves
    /// the ISR.
    pub replica_lag_time_max_ms: u64,
    /// `write.caching` (over `--write-caching`).
    pub write_caching: bool,
    /// `--write-caching-max-bytes` (broker-wide, not a topic key).
    pub write_caching_max_bytes: usize,
    /// `--write-caching-flush-ms`/`-bytes` (broker-wide).
    pub write_behind: WriteBehind,
}

impl TopicSettings {
    /// `configs` were validated when they were stored; anything unparsable falls back to the
    /// default rather than failing a running broker.
    pub fn resolve(configs: &BTreeMap<String, String>, d: &TopicDefaults) -> TopicSettings {
        let num = |k: &str| configs.get(k).and_then(|v| v.trim().parse::<i64>().ok());
        let limit_ms = |v: i64| (v >= 0).then(|| Duration::from_millis(v as u64));
        TopicSettings {
            retention: num(RETENTION_MS).map_or(d.retention, limit_ms),
            retention_bytes: num(RETENTION_BYTES)
                .map_or(d.retention_bytes, |v| (v >= 0).then_some(v as u64)),
            segment_bytes: num(SEGMENT_BYTES).map_or(d.segment_bytes, |v| v as u64),
            segment_age: num(SEGMENT_MS).map_or(d.segment_age, limit_ms),
            max_message_bytes: num(MAX_MESSAGE_BYTES).map_or(d.max_message_bytes, |v| v as usize),
            cleanup: configs
                .get(CLEANUP_POLICY)
                .and_then(|v| CleanupPolicy::parse(v))
                .unwrap_or(CleanupPolicy::DELETE),
            delete_retention: num(DELETE_RETENTION_MS)
                .and_then(limit_ms)
                .unwrap_or(DEFAULT_DELETE_RETENTION),
            min_cleanable_dirty_ppm: (configs
                .get(MIN_CLEANABLE_DIRTY_RATIO)
                .and_then(|v| v.trim().parse::<f64>().ok())
                .filter(|r| (0.0..=1.0).contains(r))
                .unwrap_or(DEFAULT_MIN_CLEANABLE_DIRTY_RATIO)
                * 1e6) as u32,
            min_compaction_lag: num(MIN_COMPACTION_LAG_MS)
                .and_then(limit_ms)
                .unwrap_or(Duration::ZERO),
            // Kafka's "no maximum" is Long.MAX_VALUE.
            max_compaction_lag: num(MAX_COMPACTION_LAG_MS)
                .filter(|&v| v > 0 && v < i64::MAX)
                .and_then(limit_ms),
            replica_lag_time_max_ms: num(crate::replication::REPLICA_LAG_TIME_MAX_MS)
                .filter(|&v| v > 0)
                .map_or(d.replica_lag_time_max_ms, |v| v as u64),
            write_caching: configs
                .get(WRITE_CACHING)
                .and_then(|v| parse_bool(v))
                .unwrap_or(d.write_caching),
            write_caching_max_bytes: d.write_caching_max_bytes,
            write_behind: d.write_behind,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn validates_known_keys_and_refuses_the_rest() {
        assert!(validate(&cfg(&[("retention.ms", "1000"), ("retention.bytes", "-1")])).is_ok());
        for bad in [
            ("retention.ms", "-5"),
            ("retention.ms", "soon"),
            ("segment.bytes", "100"),
            ("segment.ms", "0"),
            ("max.message.bytes", "-1"),
            ("retention.msx", "1"),
            ("cleanup.policy", "compacted"),
            ("cleanup.policy", ""),
            ("delete.retention.ms", "-1"),
            ("min.cleanable.dirty.ratio", "1.5"),
            ("min.compaction.lag.ms", "x"),
            ("max.compaction.lag.ms", "0"),
        ] {
            let e = validate(&cfg(&[bad])).unwrap_err();
            let key = match &e {
                TopicConfigError::Invalid { key, .. } | TopicConfigError::Unknown { key } => key,
            };
            assert_eq!(key, bad.0, "{bad:?}");
            assert!(e.to_string().contains(bad.0), "{e}");
        }
    }

    #[test]
    fn resolves_over_defaults() {
        let d = TopicDefaults::default();
        let s = TopicSettings::resolve(
            &cfg(&[("retention.ms", "-1"), ("segment.bytes", "1048576")]),
            &d,
        );
        assert_eq!(s.retention, None);
        assert_eq!(s.segment_bytes, 1 << 20);
        assert_eq!(s.retention_bytes, None);
        assert_eq!(s.max_message_bytes, d.max_message_bytes);
        let s = TopicSettings::resolve(&cfg(&[("retention.bytes", "5000")]), &d);
        assert_eq!(s.retention_bytes, Some(5000));
        assert_eq!(s.retention, d.retention);
    }

    #[test]
    fn compaction_settings_have_kafkas_names_and_defaults() {
        let d = TopicDefaults::default();
        let s = TopicSettings::resolve(&cfg(&[]), &d);
        assert_eq!(s.cleanup, CleanupPolicy::DELETE);
        assert_eq!(s.delete_retention, Duration::from_millis(86_400_000));
        assert_eq!(s.min_cleanable_dirty_ppm, 500_000);
        assert_eq!(s.min_compaction_lag, Duration::ZERO);
        assert_eq!(s.max_compaction_lag, None);
        for (value, compact, delete) in [
            ("compact", true, false),
            ("compact,delete", true, true),
            ("delete, compact", true, true),
            ("delete", false, true),
        ] {
            let c = cfg(&[("cleanup.policy", value)]);
            validate(&c).expect(value);
            let p = TopicSettings::resolve(&c, &d).cleanup;
            assert_eq!((p.compact, p.delete), (compact, delete), "{value}");
        }
        let c = cfg(&[
            ("delete.retention.ms", "100"),
            ("min.cleanable.dirty.ratio", "0.01"),
            ("min.compaction.lag.ms", "5"),
            ("max.compaction.lag.ms", "9223372036854775807"),
        ]);
        validate(&c).expect("valid");
        let s = TopicSettings::resolve(&c, &d);
        assert_eq!(s.delete_retention, Duration::from_millis(100));
        assert_eq!(s.min_cleanable_dirty_ppm, 10_000);
        assert_eq!(s.min_compaction_lag, Duration::from_millis(5));
        assert_eq!(s.max_compaction_lag, None);
        assert_eq!(
            CleanupPolicy::parse("compact,delete").unwrap().to_string(),
            "compact,delete"
        );
    }
}
