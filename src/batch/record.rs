//! The records of a batch body, archived with rkyv and read in place.

use rkyv::{Archive, Deserialize, Serialize};

/// A record header: a name and an opaque value, as Kafka headers.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct Header {
    pub key: String,
    pub value: Vec<u8>,
}

/// One message. The timestamp is stored as a delta from the batch's first timestamp.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Default)]
#[rkyv(derive(Debug))]
pub struct Record {
    pub timestamp_delta: i64,
    pub key: Option<Vec<u8>>,
    pub value: Vec<u8>,
    pub headers: Vec<Header>,
    /// Metadata the broker may filter on (never the payload).
    pub tags: Vec<String>,
}

/// The archived body of a batch: its records in offset order.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Default)]
#[rkyv(derive(Debug))]
pub struct RecordBody {
    pub records: Vec<Record>,
}
