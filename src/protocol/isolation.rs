//! Which records a fetch may see: both protocols' and the client's isolation level.

/// Which records a fetch may see (Kafka's `isolation.level`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Isolation {
    /// Everything below the high watermark, open and aborted transactions' records included.
    #[default]
    ReadUncommitted,
    /// Only below the last stable offset, with the aborted transactions of the range named so
    /// the consumer skips their records.
    ReadCommitted,
}

impl Isolation {
    /// Kafka's wire value (0 read_uncommitted, 1 read_committed), which the native protocol
    /// uses too.
    pub fn from_wire(v: i8) -> Option<Isolation> {
        match v {
            0 => Some(Isolation::ReadUncommitted),
            1 => Some(Isolation::ReadCommitted),
            _ => None,
        }
    }

    pub fn to_wire(self) -> i8 {
        match self {
            Isolation::ReadUncommitted => 0,
            Isolation::ReadCommitted => 1,
        }
    }
}

impl std::str::FromStr for Isolation {
    type Err = String;
    fn from_str(s: &str) -> Result<Isolation, String> {
        match s {
            "read_uncommitted" => Ok(Isolation::ReadUncommitted),
            "read_committed" => Ok(Isolation::ReadCommitted),
            _ => Err(format!(
                "isolation '{s}': read_uncommitted or read_committed"
            )),
        }
    }
}
