//! The broker process: the controller, the shards, their listeners and request handlers.
//!
//! Each shard is a pinned executor that owns the partitions placed on it and serves its own
//! port. Handlers run on the shard that owns the data; only metadata changes cross cores.

pub mod broker;
pub mod config;
pub mod conn_limits;
pub mod connection;
pub mod groups;
pub mod handlers;
pub mod offsets_log;
pub mod request_memory;
pub mod sendfile;
pub mod shard;
pub mod stray;

pub use broker::{run_broker, BrokerError};
pub use config::BrokerConfig;
