//! Request and response meta bodies, archived with rkyv.
//!
//! Batches never travel inside these archives: a produce request or fetch response carries them
//! in the frame's payload section and the meta names them by (offset, length) in that section,
//! so the broker stores and serves the producer's bytes without re-encoding them.

use rkyv::{Archive, Deserialize, Serialize};

/// The meta of a response whose header carries a frame-level error.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct ErrorBody {
    pub message: String,
}

#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
pub struct ApiVersionsRequest {}

#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct ApiVersionRange {
    pub api_key: u16,
    pub min_version: u16,
    pub max_version: u16,
}

#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct ApiVersionsResponse {
    pub apis: Vec<ApiVersionRange>,
    pub broker_version: String,
}

#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
pub struct MetadataRequest {
    /// `None`: every topic.
    pub topics: Option<Vec<String>>,
    /// Topics to create first if they do not exist, when the broker auto-creates
    /// (`--auto-create-topics`); a producer names the topics it was asked to send to.
    pub create: Vec<String>,
}

#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct BrokerMeta {
    pub node_id: u32,
    pub host: String,
    /// Shard `i` listens on `port + i`.
    pub port: u16,
    pub shards: u32,
    /// `alive`, `fenced` (missed its session: leads nothing) or `shutting-down`.
    pub state: String,
    pub rack: Option<String>,
}

#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct PartitionMeta {
    pub partition: u32,
    pub error_code: i16,
    pub leader: u32,
    pub shard: u32,
    pub leader_epoch: u32,
    pub replicas: Vec<u32>,
    pub isr: Vec<u32>,
    /// Writes stopped: producers skip it, consumers drain it.
    pub decommissioned: bool,
    /// While a reassignment runs: the replicas being added and removed (else empty).
    pub adding: Vec<u32>,
    pub removing: Vec<u32>,
}

#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct TopicMeta {
    pub name: String,
    pub id: u64,
    pub error_code: i16,
    pub partitions: Vec<PartitionMeta>,
    pub configs: Vec<(String, String)>,
}

#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct MetadataResponse {
    pub cluster_id: String,
    pub controller_id: u64,
    /// The controller quorum's voters (the answering broker alone for a single node).
    pub voters: Vec<u64>,
    pub brokers: Vec<BrokerMeta>,
    pub topics: Vec<TopicMeta>,
}

#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct CreatableTopic {
    pub name: String,
    pub partitions: u32,
    pub replication_factor: u16,
    pub configs: Vec<(String, String)>,
}

#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct CreateTopicsRequest {
    pub topics: Vec<CreatableTopic>,
    pub timeout_ms: u32,
}

/// Outcome for one topic of a create or delete.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct TopicResult {
    pub name: String,
    pub error_code: i16,
    pub message: String,
}

#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct TopicResults {
    pub topics: Vec<TopicResult>,
}

#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct DeleteTopicsRequest {
    pub topics: Vec<String>,
    pub timeout_ms: u32,
}

#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct ProducePartition {
    pub topic: String,
    pub partition: u32,
    /// Where this partition's batches sit in the frame's payload section (16-aligned offset).
    pub payload_offset: u32,
    pub payload_len: u32,
}

#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct ProduceRequest {
    /// 0, 1 or -1 (all).
    pub acks: i16,
    pub timeout_ms: u32,
    pub partitions: Vec<ProducePartition>,
}

#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct ProducePartitionResult {
    pub topic: String,
    pub partition: u32,
    pub error_code: i16,
    pub message: String,
    pub base_offset: i64,
    pub log_append_time_ms: i64,
    pub log_start_offset: i64,
}

#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct ProduceResponse {
    pub partitions: Vec<ProducePartitionResult>,
}

#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct FetchPartition {
    pub topic: String,
    pub partition: u32,
    pub offset: u64,
    pub max_bytes: u32,
}

#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct FetchRequest {
    pub max_wait_ms: u32,
    pub min_bytes: u32,
    pub max_bytes: u32,
    pub partitions: Vec<FetchPartition>,
}

#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct FetchPartitionResult {
    pub topic: String,
    pub partition: u32,
    pub error_code: i16,
    pub message: String,
    pub high_watermark: u64,
    pub log_start_offset: u64,
    /// Whole batches for this partition in the response payload (16-aligned offset).
    pub payload_offset: u32,
    pub payload_len: u32,
}

#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct FetchResponse {
    pub partitions: Vec<FetchPartitionResult>,
}

/// Fetch version 1: version 0's request with an isolation level; its answer gives each
/// partition's last stable offset and, read_committed, the aborted transactions its records
/// overlap.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct FetchRequestV1 {
    pub fetch: FetchRequest,
    /// Kafka's numbers: 0 read_uncommitted, 1 read_committed.
    pub isolation: i8,
}

/// An aborted transaction a read_committed consumer skips: the records of `producer_id`'s
/// transactional batches from `first_offset` up to its abort marker (Kafka's
/// `AbortedTransaction`).
#[derive(Archive, Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
pub struct AbortedTransaction {
    pub producer_id: i64,
    pub first_offset: u64,
}

#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct FetchPartitionResultV1 {
    pub result: FetchPartitionResult,
    pub last_stable_offset: u64,
    /// read_committed only; in abort-marker order.
    pub aborted: Vec<AbortedTransaction>,
}

#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct FetchResponseV1 {
    pub partitions: Vec<FetchPartitionResultV1>,
}

/// A fetch that returns only the records carrying the given tags, offsets unchanged (gaps
/// between them are normal): a native feature, Kafka clients filter themselves.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct FilteredFetchRequest {
    pub fetch: FetchRequest,
    /// Not empty.
    pub tags: Vec<String>,
    /// A record must carry every tag (true) or any one of them (false).
    pub match_all: bool,
}

#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct FilteredFetchPartitionResult {
    /// The matching records' batches, rebuilt (offsets unchanged), in the payload.
    pub result: FetchPartitionResult,
    /// Where the next fetch of this partition starts: past every batch the broker scanned,
    /// matching or not, so a filtered consumer is never stuck behind non-matching data.
    pub next_offset: u64,
}

#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct FilteredFetchResponse {
    pub partitions: Vec<FilteredFetchPartitionResult>,
}

/// One batch (in the payload) to append to a partition at `deliver_at_ms`: kept durably by
/// the partition's shard until then, appended then (its offsets assigned then).
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct DelayedProduceRequest {
    pub topic: String,
    pub partition: u32,
    /// Milliseconds since the epoch; at most `--max-delay-ms` ahead of the broker's clock.
    pub deliver_at_ms: i64,
}

#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct DelayedProduceResponse {
    pub error_code: i16,
    pub message: String,
}

/// Special timestamps of a ListOffsets query, as Kafka.
pub const LATEST_TIMESTAMP: i64 = -1;
pub const EARLIEST_TIMESTAMP: i64 = -2;
/// The record with the largest timestamp (Kafka's MAX_TIMESTAMP).
pub const MAX_TIMESTAMP: i64 = -3;

#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct ListOffsetsPartition {
    pub topic: String,
    pub partition: u32,
    /// `LATEST_TIMESTAMP`, `EARLIEST_TIMESTAMP`, or a time in ms: the first offset whose
    /// timestamp is at or after it.
    pub timestamp: i64,
}

#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct ListOffsetsRequest {
    pub partitions: Vec<ListOffsetsPartition>,
}

#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct ListOffsetsPartitionResult {
    pub topic: String,
    pub partition: u32,
    pub error_code: i16,
    pub message: String,
    /// -1 when no record is at or after the timestamp.
    pub offset: i64,
    pub timestamp: i64,
}

#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct ListOffsetsResponse {
    pub partitions: Vec<ListOffsetsPartitionResult>,
}

/// No leader epoch (Kafka's -1): none given, or none at or below the one asked.
pub const NO_LEADER_EPOCH: i32 = -1;

#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct OffsetForLeaderEpochPartition {
    pub topic: String,
    pub partition: u32,
    /// The epoch the asker believes the leader has (`NO_LEADER_EPOCH`: not checked).
    pub current_leader_epoch: i32,
    /// The epoch whose end offset is asked.
    pub leader_epoch: i32,
}

#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct OffsetForLeaderEpochRequest {
    pub partitions: Vec<OffsetForLeaderEpochPartition>,
}

#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct OffsetForLeaderEpochResult {
    pub topic: String,
    pub partition: u32,
    pub error_code: i16,
    pub message: String,
    /// The largest epoch at or below the one asked (`NO_LEADER_EPOCH`: none).
    pub leader_epoch: i32,
    /// Where it ends: the next epoch's start, or the log end (-1 on error).
    pub end_offset: i64,
}

#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct OffsetForLeaderEpochResponse {
    pub partitions: Vec<OffsetForLeaderEpochResult>,
}

/// One partition of a replica fetch: where the follower stands.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct ReplicaFetchPartition {
    pub topic: String,
    pub partition: u32,
    /// The leader epoch the follower follows.
    pub leader_epoch: u32,
    /// Where it reads from: the end of what it has written.
    pub fetch_offset: u64,
    /// Its log end as durable as its `--fsync` promises (at most `fetch_offset`).
    pub log_end: u64,
    pub max_bytes: u32,
}

/// A follower broker's fetch (native key 21), sent to the leader's shard that owns the
/// partitions; many partitions at once, long-polled when caught up.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct ReplicaFetchRequest {
    /// The follower's node id.
    pub replica_id: u32,
    /// Its registration's broker epoch (0: not a cluster member).
    pub broker_epoch: u64,
    pub max_wait_ms: u32,
    pub max_bytes: u32,
    pub partitions: Vec<ReplicaFetchPartition>,
}

#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct ReplicaFetchPartitionResult {
    pub topic: String,
    pub partition: u32,
    pub error_code: i16,
    pub message: String,
    pub high_watermark: u64,
    pub log_start_offset: u64,
    /// The stored batches from `fetch_offset`, as they are, in the payload.
    pub payload_offset: u32,
    pub payload_len: u32,
}

#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct ReplicaFetchResponse {
    pub partitions: Vec<ReplicaFetchPartitionResult>,
}

#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct AlterTopicConfigsRequest {
    pub topic: String,
    /// Keys to set; the others keep their values.
    pub configs: Vec<(String, String)>,
    pub timeout_ms: u32,
}

#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct CreatePartitionsRequest {
    pub topic: String,
    /// The new total number of partitions.
    pub count: u32,
    pub timeout_ms: u32,
}

#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct DeleteRecordsPartition {
    pub topic: String,
    pub partition: u32,
    /// Records below this offset become unreadable; at most the high watermark.
    pub before_offset: u64,
}

#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct DeleteRecordsRequest {
    pub partitions: Vec<DeleteRecordsPartition>,
}

#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct DeleteRecordsPartitionResult {
    pub topic: String,
    pub partition: u32,
    pub error_code: i16,
    pub message: String,
    /// The log start offset after the request.
    pub low_watermark: u64,
}

#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct DeleteRecordsResponse {
    pub partitions: Vec<DeleteRecordsPartitionResult>,
}

#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct DescribePartitionsRequest {
    pub partitions: Vec<(String, u32)>,
}

#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
pub struct PartitionState {
    pub topic: String,
    pub partition: u32,
    pub error_code: i16,
    pub message: String,
    pub log_start_offset: u64,
    pub log_end_offset: u64,
    pub high_watermark: u64,
    pub segments: u32,
    pub size_bytes: u64,
}

#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct DescribePartitionsResponse {
    pub partitions: Vec<PartitionState>,
}

#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct DecommissionPartitionRequest {
    pub topic: String,
    pub partition: u32,
    pub timeout_ms: u32,
}

#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct FindCoordinatorRequest {
    pub group: String,
}

#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct FindCoordinatorResponse {
    pub error_code: i16,
    pub message: String,
    pub node_id: u32,
    pub host: String,
    /// The port of the shard hosting the group's coordinator.
    pub port: u16,
}

#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct JoinGroupRequest {
    pub group: String,
    /// Empty for a new member.
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub session_timeout_ms: u32,
    pub rebalance_timeout_ms: u32,
    pub protocol_type: String,
    /// Assignor names with the member's subscription metadata, in preference order.
    pub protocols: Vec<(String, Vec<u8>)>,
}

#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct JoinGroupResponse {
    pub error_code: i16,
    pub message: String,
    pub generation: u32,
    pub protocol: String,
    pub leader: String,
    pub member_id: String,
    /// For the leader: (member id, instance id, metadata) of every member.
    pub members: Vec<(String, Option<String>, Vec<u8>)>,
}

#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct SyncGroupRequest {
    pub group: String,
    pub member_id: String,
    /// The static instance id the member joined with, if any.
    pub group_instance_id: Option<String>,
    pub generation: u32,
    /// From the leader: every member's assignment.
    pub assignments: Vec<(String, Vec<u8>)>,
}

#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct SyncGroupResponse {
    pub error_code: i16,
    pub message: String,
    pub assignment: Vec<u8>,
}

#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct HeartbeatRequest {
    pub group: String,
    pub member_id: String,
    /// The static instance id the member joined with, if any: a member whose instance was
    /// taken over by a newer one is answered FENCED_INSTANCE_ID.
    pub group_instance_id: Option<String>,
    pub generation: u32,
}

#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct LeaveGroupRequest {
    pub group: String,
    pub member_id: String,
}

/// The answer to Heartbeat and LeaveGroup.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct GroupStatusResponse {
    pub error_code: i16,
    pub message: String,
}

#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct OffsetCommitRequest {
    pub group: String,
    /// Empty with generation -1: a commit from outside the group (allowed while it is empty).
    pub member_id: String,
    /// The static instance id the member joined with, if any: a commit from a member whose
    /// instance was taken over is answered FENCED_INSTANCE_ID (not UNKNOWN_MEMBER_ID, on
    /// which a static member would rejoin and take the instance back).
    pub group_instance_id: Option<String>,
    pub generation: i32,
    /// (topic, partition, next offset to read, metadata)
    pub offsets: Vec<(String, u32, u64, String)>,
}

#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct OffsetFetchRequest {
    pub group: String,
    /// (topic, partition) to look up. Empty: every offset the group has committed, sorted by
    /// topic and partition (Kafka's null topic list).
    pub partitions: Vec<(String, u32)>,
}

#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct OffsetFetchResponse {
    pub error_code: i16,
    pub message: String,
    /// (topic, partition, committed offset or -1, metadata)
    pub offsets: Vec<(String, u32, i64, String)>,
}

#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
pub struct ListGroupsRequest {}

#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct ListGroupsResponse {
    /// (group, state) of the groups this shard coordinates.
    pub groups: Vec<(String, String)>,
}

#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct DescribeGroupsRequest {
    pub groups: Vec<String>,
}

/// One member of a described group.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct MemberInfo {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    /// The assignment bytes the leader gave it (for consumers, a
    /// `group::consumer_protocol::MemberAssignment`); empty while the group rebalances.
    pub assignment: Vec<u8>,
}

/// One group as its coordinator sees it. A group the coordinator does not know is state
/// "Dead" with no members and error code 0 (as Kafka answers); a group coordinated elsewhere
/// is NOT_COORDINATOR.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct GroupDescription {
    pub error_code: i16,
    pub message: String,
    pub group: String,
    /// Kafka's state name: Empty, PreparingRebalance, CompletingRebalance, Stable or Dead.
    pub state: String,
    /// e.g. "consumer"; empty when no member ever joined.
    pub protocol_type: String,
    /// The assignor chosen for the current generation; empty when there is none.
    pub protocol: String,
    pub generation: u32,
    /// Member id of the group leader; empty when there is none.
    pub leader: String,
    pub members: Vec<MemberInfo>,
}

#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct DescribeGroupsResponse {
    /// One description per requested group, in request order.
    pub groups: Vec<GroupDescription>,
}

/// One partition of a reassignment: its new replicas, or `None` to cancel the running one.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct ReassignablePartition {
    pub topic: String,
    pub partition: u32,
    pub replicas: Option<Vec<u32>>,
}

/// Starts (or cancels) partition reassignments (native key 25, Kafka's
/// AlterPartitionReassignments); answered once submitted, not once complete.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct ReassignPartitionsRequest {
    pub partitions: Vec<ReassignablePartition>,
    pub timeout_ms: u32,
}

/// The outcome of one partition's reassignment request.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct ReassignmentResult {
    pub topic: String,
    pub partition: u32,
    /// The target replicas submitted (empty for a cancel or a refusal).
    pub replicas: Vec<u32>,
    pub error_code: i16,
    pub message: String,
}

#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct ReassignPartitionsResponse {
    /// A refusal of the whole request (a drain that cannot be planned); 0 otherwise.
    pub error_code: i16,
    pub message: String,
    pub partitions: Vec<ReassignmentResult>,
}

/// Reassigns every partition with a replica on `node_id` to other live brokers (native key
/// 26); answered with a [`ReassignPartitionsResponse`] once submitted.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct DrainBrokerRequest {
    pub node_id: u32,
    pub timeout_ms: u32,
}

/// Moves leadership to each partition's preferred replica where it is live and in the ISR
/// (native key 27, Kafka's ElectLeaders with PREFERRED): all partitions, a topic's, or one.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct ElectLeadersRequest {
    pub topic: Option<String>,
    pub partition: Option<u32>,
    pub timeout_ms: u32,
}

#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct ElectLeadersResponse {
    pub error_code: i16,
    pub message: String,
    /// Partitions whose leader moved.
    pub changed: u32,
}

/// Sets (or with `delete`, removes) a user's credential for one SCRAM mechanism (native key
/// 28). As Kafka's AlterUserScramCredentials, the client salts the password: the broker gets
/// the salt and the salted password and stores StoredKey and ServerKey only.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct AlterUserRequest {
    pub user: String,
    /// `SCRAM-SHA-256` or `SCRAM-SHA-512`.
    pub mechanism: String,
    pub delete: bool,
    pub iterations: u32,
    pub salt: Vec<u8>,
    pub salted_password: Vec<u8>,
    pub timeout_ms: u32,
}

/// Asks for a producer id (native key 35, Kafka's InitProducerId): `producer_id` and
/// `producer_epoch` are -1 for a new producer, or its current ones to bump the epoch and
/// keep the id (KIP-360).
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct InitProducerIdRequest {
    pub transactional_id: Option<String>,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub timeout_ms: u32,
    /// The transactional producer's `transaction.timeout.ms` (ignored without an id).
    pub transaction_timeout_ms: i32,
}

#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct AlterUserResponse {
    pub error_code: i16,
    pub message: String,
}

/// Every user (native key 29).
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct ListUsersRequest {}

#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct UserMechanism {
    pub mechanism: String,
    pub iterations: u32,
}

#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct UserEntry {
    pub user: String,
    pub mechanisms: Vec<UserMechanism>,
}

#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct ListUsersResponse {
    pub users: Vec<UserEntry>,
}

#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct InitProducerIdResponse {
    pub error_code: i16,
    pub message: String,
    pub producer_id: i64,
    pub producer_epoch: i16,
}

/// Native key 36 (Kafka's WriteTxnMarkers), broker to broker: a transaction coordinator asks
/// the leader of each partition of a transaction to append its end marker
/// ([`crate::batch::control`]). Answered per marker and partition once the marker is
/// committed (in every in-sync replica) or refused.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct WriteTxnMarkersRequest {
    pub markers: Vec<TxnMarker>,
}

#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct TxnMarker {
    pub producer_id: i64,
    pub producer_epoch: i16,
    /// true: commit, false: abort.
    pub commit: bool,
    pub coordinator_epoch: i32,
    pub partitions: Vec<TxnMarkerPartition>,
}

#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct TxnMarkerPartition {
    pub topic: String,
    pub partition: u32,
}

#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct WriteTxnMarkersResponse {
    /// One per request marker, in order.
    pub markers: Vec<TxnMarkerResult>,
}

#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct TxnMarkerResult {
    pub producer_id: i64,
    /// One per partition of the marker, in order.
    pub partitions: Vec<TxnMarkerPartitionResult>,
}

#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct TxnMarkerPartitionResult {
    pub topic: String,
    pub partition: u32,
    pub error_code: i16,
    pub message: String,
}

/// Native key 37: where a transactional id's coordinator is (Kafka's FindCoordinator with key
/// type 1); answered as FindCoordinator is.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct FindTxnCoordinatorRequest {
    pub transactional_id: String,
}

/// Native key 38 (Kafka's AddPartitionsToTxn): the partitions join the producer's
/// transaction. Answered with a [`GroupStatusResponse`] (one status for all).
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct AddPartitionsToTxnRequest {
    pub transactional_id: String,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub partitions: Vec<TxnMarkerPartition>,
}

/// Native key 39 (Kafka's AddOffsetsToTxn): the group's offsets partition joins the
/// transaction. Answered with a [`GroupStatusResponse`].
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct AddOffsetsToTxnRequest {
    pub transactional_id: String,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub group: String,
}

/// Native key 40 (Kafka's EndTxn): commits or aborts. Answered with a
/// [`GroupStatusResponse`].
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct EndTxnRequest {
    pub transactional_id: String,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub commit: bool,
}

/// Native key 41 (Kafka's TxnOffsetCommit), to the group's coordinator: offsets committed
/// by the transaction. Answered with a [`GroupStatusResponse`].
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct TxnOffsetCommitRequest {
    pub transactional_id: String,
    pub group: String,
    pub producer_id: i64,
    pub producer_epoch: i16,
    /// Empty with generation -1: not checked against the group's members.
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub generation: i32,
    /// (topic, partition, next offset to read, metadata)
    pub offsets: Vec<(String, u32, u64, String)>,
}

/// Native key 42 (Kafka's SaslHandshake): the mechanism the client authenticates with.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct SaslHandshakeRequest {
    pub mechanism: String,
}

/// UNSUPPORTED_SASL_MECHANISM (with the listener's `mechanisms`) or ILLEGAL_SASL_STATE
/// close the connection.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct SaslHandshakeResponse {
    pub error_code: i16,
    pub message: String,
    pub mechanisms: Vec<String>,
}

/// Native key 43 (Kafka's SaslAuthenticate): one message of the exchange.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct SaslAuthenticateRequest {
    pub auth_bytes: Vec<u8>,
}

/// The server's message; an error (SASL_AUTHENTICATION_FAILED) closes the connection.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct SaslAuthenticateResponse {
    pub error_code: i16,
    pub message: String,
    pub auth_bytes: Vec<u8>,
}

/// One ACL binding on the native protocol (`rill acl`), its enum fields by name as Kafka
/// writes them: resource type `topic|group|cluster|transactional-id`, pattern
/// `literal|prefixed`, operation `READ`.., permission `ALLOW|DENY`.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct AclEntry {
    pub resource_type: String,
    pub name: String,
    pub pattern: String,
    pub principal: String,
    pub host: String,
    pub operation: String,
    pub permission: String,
}

/// Native key 50 (Kafka's CreateAcls).
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct CreateAclsRequest {
    pub acls: Vec<AclEntry>,
    pub timeout_ms: u32,
}

#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct CreateAclsResponse {
    pub error_code: i16,
    pub message: String,
}

/// A filter over bindings: `None` matches anything; `pattern` may also be `any` or `match`
/// (Kafka's: every binding that applies to the literal name).
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
pub struct AclFilterEntry {
    pub resource_type: Option<String>,
    pub name: Option<String>,
    pub pattern: Option<String>,
    pub principal: Option<String>,
    pub host: Option<String>,
    pub operation: Option<String>,
    pub permission: Option<String>,
}

/// Native key 51 (Kafka's DescribeAcls).
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct DescribeAclsRequest {
    pub filter: AclFilterEntry,
}

#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct DescribeAclsResponse {
    pub error_code: i16,
    pub message: String,
    pub acls: Vec<AclEntry>,
}

/// Native key 52 (Kafka's DeleteAcls): removes what the filter matches.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct DeleteAclsRequest {
    pub filter: AclFilterEntry,
    pub timeout_ms: u32,
}

#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct DeleteAclsResponse {
    pub error_code: i16,
    pub message: String,
    pub deleted: Vec<AclEntry>,
}

impl AclEntry {
    /// From the fields in [`crate::auth::acl::AclBinding::names`]'s order.
    pub fn from_names(n: [String; 7]) -> AclEntry {
        let [resource_type, name, pattern, principal, host, operation, permission] = n;
        AclEntry {
            resource_type,
            name,
            pattern,
            principal,
            host,
            operation,
            permission,
        }
    }

    /// The fields in [`crate::auth::acl::AclBinding::from_names`]'s order.
    pub fn into_names(self) -> [String; 7] {
        [
            self.resource_type,
            self.name,
            self.pattern,
            self.principal,
            self.host,
            self.operation,
            self.permission,
        ]
    }
}

impl AclFilterEntry {
    /// The fields in [`crate::auth::acl::AclFilter::from_names`]'s order.
    pub fn into_names(self) -> [Option<String>; 7] {
        [
            self.resource_type,
            self.name,
            self.pattern,
            self.principal,
            self.host,
            self.operation,
            self.permission,
        ]
    }
}

/// One side of a quota entity on the native protocol: a name, or the default.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub enum QuotaName {
    Name(String),
    Default,
}

/// A quota entity and its values (`rill quota`).
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct QuotaEntry {
    pub user: Option<QuotaName>,
    pub client_id: Option<QuotaName>,
    pub values: Vec<QuotaValue>,
}

#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct QuotaValue {
    pub key: String,
    pub value: f64,
}

/// Native key 53 (Kafka's AlterClientQuotas, one entity): sets `entry.values`, removes
/// `remove`.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct AlterClientQuotaRequest {
    pub entry: QuotaEntry,
    pub remove: Vec<String>,
    pub timeout_ms: u32,
}

#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct AlterClientQuotaResponse {
    pub error_code: i16,
    pub message: String,
}

/// Native key 54 (Kafka's DescribeClientQuotas): every entity's quotas.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct DescribeClientQuotasRequest {}

#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct DescribeClientQuotasResponse {
    pub entries: Vec<QuotaEntry>,
}

impl QuotaName {
    pub fn to_entity_name(&self) -> crate::quota::EntityName {
        match self {
            QuotaName::Name(n) => crate::quota::EntityName::Name(n.clone()),
            QuotaName::Default => crate::quota::EntityName::Default,
        }
    }

    pub fn of(n: &crate::quota::EntityName) -> QuotaName {
        match n {
            crate::quota::EntityName::Name(n) => QuotaName::Name(n.clone()),
            crate::quota::EntityName::Default => QuotaName::Default,
        }
    }
}

impl QuotaEntry {
    /// The entity this entry names.
    pub fn entity(&self) -> crate::quota::QuotaEntity {
        crate::quota::QuotaEntity {
            user: self.user.as_ref().map(QuotaName::to_entity_name),
            client_id: self.client_id.as_ref().map(QuotaName::to_entity_name),
        }
    }
}
