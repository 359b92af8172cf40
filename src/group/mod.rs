//! Consumer groups: the coordinator of one group as a sans-IO state machine (Kafka's classic
//! join/sync protocol: the group leader computes the assignment, the coordinator relays it),
//! and the assignors.
//! The shell (coordinator placement on `__consumer_offsets`, the APIs, offset persistence)
//! is in `server::groups` and `server::offsets_log`; the member side is `client::group_consumer`.

pub mod assignor;
pub mod consumer_group;
pub mod consumer_protocol;
pub mod coordinator;
pub mod offsets_log;

pub use coordinator::{
    Action, Group, GroupConfig, GroupError, GroupState, JoinRequest, JoinResult, SyncRequest,
};
pub use offsets_log::{CommitRecord, PartitionOffset};
