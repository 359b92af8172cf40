//! The Kafka wire protocol listener: Kafka clients and tools talk to rill unchanged.
//!
//! Shard `i` listens on `--kafka-listen` port + `i` and is advertised in Metadata as its own
//! node ([`node_id`]), so a Kafka client sends each partition's requests straight to the core
//! that owns it, as native clients do. The `kafka-protocol` crate encodes and decodes every
//! message; this module maps requests onto the same partitions, groups and controller the
//! native protocol uses. Records are converted at this edge ([`records`]): a produced
//! RecordBatch v2 (possibly compressed) becomes a rill batch, a fetched rill batch becomes an
//! uncompressed RecordBatch v2. That costs one decode and one copy of every record each way;
//! the native path stores and serves the producer's bytes as they came.

mod admin;
mod authorization;
mod authorized_operations;
pub mod connection;
pub mod fetch_response;
mod groups;
mod handlers;
mod leader_epochs;
pub mod records;
pub mod sasl;
pub(crate) mod transactions;
pub mod versions;

/// The Kafka node id of a broker's shard: every shard is its own node to Kafka clients.
/// Shards per broker are far below 1000, and node ids stay readable (`1003` = broker 1 shard 3).
pub fn node_id(broker: u32, shard: u32) -> i32 {
    (broker as i32)
        .saturating_mul(1000)
        .saturating_add(shard as i32)
}

/// The Kafka topic id of a rill topic: a UUID derived from its numeric id (stable for the
/// topic's life, never the nil UUID Kafka reserves for "unknown").
pub fn topic_uuid(topic_id: u64) -> uuid::Uuid {
    uuid::Uuid::from_u64_pair(0x7269_6c6c_0000_4000, topic_id | (1 << 63))
}

/// Process-wide settings of the Kafka codec, from the broker's flags: a compressed batch may
/// decompress to at most half a frame, the most a fetch response carries (rill stores batches
/// uncompressed), so a decompression bomb is refused instead of exhausting memory.
pub fn configure(max_frame_bytes: usize) {
    kafka_protocol::compression::set_max_decompressed_bytes(max_frame_bytes / 2);
}
