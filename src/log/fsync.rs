//! When appended data is made durable.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// `--fsync always|never|interval:MS`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FsyncPolicy {
    /// fdatasync before acknowledging; concurrent producers share one (group commit).
    Always,
    /// fdatasync every interval; acknowledged once written to the device.
    Interval(Duration),
    /// Never fdatasync; acknowledged once written to the device.
    Never,
}

impl FsyncPolicy {
    /// Whether segments are opened O_DSYNC ([`crate::log::SegmentConfig::sync_writes`]): with
    /// `always` and `o_dsync` (`--fsync-o-dsync`, true by default) each write is made durable
    /// by itself, one request where a write and then an fdatasync took two.
    pub fn sync_writes(self, o_dsync: bool) -> bool {
        self == FsyncPolicy::Always && o_dsync
    }
}

impl FromStr for FsyncPolicy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "always" => Ok(FsyncPolicy::Always),
            "never" => Ok(FsyncPolicy::Never),
            _ => {
                let ms = s.strip_prefix("interval:").ok_or_else(|| {
                    format!("bad fsync policy '{s}': expected always, never or interval:MS")
                })?;
                let ms: u64 = ms
                    .parse()
                    .map_err(|_| format!("bad fsync interval '{ms}': expected milliseconds"))?;
                if ms == 0 {
                    return Err("fsync interval must be at least 1 ms".into());
                }
                Ok(FsyncPolicy::Interval(Duration::from_millis(ms)))
            }
        }
    }
}

impl fmt::Display for FsyncPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FsyncPolicy::Always => write!(f, "always"),
            FsyncPolicy::Never => write!(f, "never"),
            FsyncPolicy::Interval(d) => write!(f, "interval:{}", d.as_millis()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn parses_and_refuses() {
        assert_eq!("always".parse(), Ok(FsyncPolicy::Always));
        assert_eq!("never".parse(), Ok(FsyncPolicy::Never));
        assert_eq!(
            "interval:25".parse(),
            Ok(FsyncPolicy::Interval(Duration::from_millis(25)))
        );
        assert!("interval:0".parse::<FsyncPolicy>().is_err());
        assert!("interval:x".parse::<FsyncPolicy>().is_err());
        assert!("sometimes".parse::<FsyncPolicy>().is_err());
        assert_eq!(
            FsyncPolicy::Interval(Duration::from_millis(7)).to_string(),
            "interval:7"
        );
    }
}
