//! The broker process: lock the data dir, start the controller, register, start the shards
//! and on each the two listeners ([`crate::native`], [`crate::kafka`]), each a codec over the
//! broker's operations ([`crate::broker`]).
//!
//! Each shard is a pinned executor that owns the partitions placed on it and serves its own
//! ports. Requests run on the shard that owns the data; only metadata changes (and metrics
//! scrapes, [`metrics`]) cross cores.

pub mod broker;
pub mod metrics;
pub mod stray;

pub use crate::broker::BrokerConfig;
pub use broker::{run_broker, BrokerError};
