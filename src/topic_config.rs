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

pub const KNOWN: &[&str] = &[
    RETENTION_MS,
    RETENTION_BYTES,
    SEGMENT_BYTES,
    SEGMENT_MS,
    MAX_MESSAGE_BYTES,
];

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
}

impl Default for TopicDefaults {
    fn default() -> Self {
        TopicDefaults {
            retention: Some(Duration::from_secs(14 * 24 * 3600)),
            retention_bytes: None,
            segment_bytes: 128 << 20,
            segment_age: Some(Duration::from_secs(7 * 24 * 3600)),
            max_message_bytes: 16 << 20,
        }
    }
}

/// A topic's settings with the broker defaults filled in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicSettings {
    pub retention: Option<Duration>,
    pub retention_bytes: Option<u64>,
    pub segment_bytes: u64,
    pub segment_age: Option<Duration>,
    pub max_message_bytes: usize,
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
}
