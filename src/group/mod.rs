//! Consumer groups: the coordinator of one group as a sans-IO state machine (Kafka's classic
//! join/sync protocol: the group leader computes the assignment, the coordinator relays it),
//! and the assignors.
//!
//! Not wired to the network yet: the shell (coordinator placement on `__consumer_offsets`
//! partitions, the APIs, offset persistence) comes next.

pub mod assignor;
pub mod coordinator;

pub use coordinator::{
    Action, Group, GroupConfig, GroupError, GroupState, JoinRequest, JoinResult, SyncRequest,
};
