//! The records of a batch body, archived with rkyv and read in place.
//!
//! Format version 3 (these types) keeps a null value apart from an empty one, and a null
//! header value apart from an empty one, as Kafka does (a null value is a tombstone). Version
//! 2 bodies ([`v2`]) had neither null; they are still read, and read as non-null.

use rkyv::{Archive, Deserialize, Serialize};

/// A record header: a name and an opaque value, as Kafka headers. A record's headers are a
/// list, not a map: order and repeated names are kept.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct Header {
    pub key: String,
    /// `None`: a null value (Kafka allows one), not the same as an empty value.
    pub value: Option<Vec<u8>>,
}

/// One message. The timestamp is stored as a delta from the batch's first timestamp.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Default)]
#[rkyv(derive(Debug))]
pub struct Record {
    pub timestamp_delta: i64,
    pub key: Option<Vec<u8>>,
    /// `None`: a null value (a Kafka tombstone), not the same as an empty value.
    pub value: Option<Vec<u8>>,
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

/// The body of format version 2: values and header values could not be null. Kept so that
/// batches written before version 3 (existing data directories, older clients' produce
/// requests) still read.
pub mod v2 {
    use rkyv::{Archive, Deserialize, Serialize};

    #[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
    #[rkyv(derive(Debug))]
    pub struct Header {
        pub key: String,
        pub value: Vec<u8>,
    }

    #[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Default)]
    #[rkyv(derive(Debug))]
    pub struct Record {
        pub timestamp_delta: i64,
        pub key: Option<Vec<u8>>,
        pub value: Vec<u8>,
        pub headers: Vec<Header>,
        pub tags: Vec<String>,
    }

    #[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Default)]
    #[rkyv(derive(Debug))]
    pub struct RecordBody {
        pub records: Vec<Record>,
    }
}
