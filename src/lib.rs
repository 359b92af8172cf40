//! rill: a persistent, partitioned, replicated log broker, thread-per-core on io_uring.
pub mod auth;
pub mod batch;
pub mod broker;
pub mod cli;
pub mod client;
pub mod clock;
pub mod controller;
pub mod delay;
pub mod group;
pub mod kafka;
pub mod log;
pub mod logging;
pub mod memory;
pub mod metrics;
pub mod native;
pub mod net;
pub mod partition;
pub mod partitioner;
pub mod protocol;
pub mod quota;
pub mod replication;
pub mod server;
#[cfg(test)]
mod test_shard;
pub mod tls;
pub mod topic_config;
pub mod transactions;
pub mod tune;
