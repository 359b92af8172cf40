//! The native protocol listener: a codec over the broker's operations ([`crate::broker`]).
//! Each handler decodes a request's meta, calls an operation, and encodes its result; the
//! payload (batches) passes through as the stored bytes, both ways.

mod acls;
mod authorization;
pub mod connection;
mod delayed_produce;
mod fetch;
mod groups;
mod leader_epochs;
mod list_offsets;
mod log_admin;
pub mod marker_sender;
mod metadata;
mod offsets;
mod produce;
mod producer_ids;
mod quotas;
mod reassignments;
mod replica_fetch;
pub mod replica_fetcher;
mod sasl;
mod topics;
mod transactions;
mod txn_markers;
mod users;

use std::rc::Rc;

use crate::broker::produce::AckWait;
use crate::broker::{OpError, Shard};
use crate::log::{FileReads, ReadChunk};
use crate::net::in_order::Later;
use crate::protocol::frame::{encode_meta, FrameError, RequestFrame};
use crate::protocol::{ApiKey, ErrorCode};

/// What a handler answers.
pub enum Reply {
    /// Nothing (a produce with acks=0), but the request's memory stays taken until these
    /// writes are durable ([`crate::broker::produce::hold_until_acked`]).
    Unanswered(Vec<AckWait>),
    /// A frame-level error.
    Error(ErrorCode, String),
    /// An encoded meta body and payload chunks.
    Meta(Vec<u8>, Vec<ReadChunk>),
    /// The reply once something else is done (a produce's acknowledgements): the connection
    /// reads the next requests meanwhile and answers in order.
    Later(Later<Reply>),
}

impl Reply {
    fn meta<T>(value: &T) -> Reply
    where
        T: crate::protocol::frame::EncodeMeta,
    {
        Reply::with_payload(value, Vec::new())
    }

    fn with_payload<T>(value: &T, chunks: Vec<ReadChunk>) -> Reply
    where
        T: crate::protocol::frame::EncodeMeta,
    {
        match encode_meta(value) {
            Ok(m) => Reply::Meta(m.to_vec(), chunks),
            Err(e) => Reply::Error(ErrorCode::UnknownServerError, e.to_string()),
        }
    }
}

/// A result's error code and message as the native messages carry them (0 and empty: none);
/// an error is counted for `api` (metrics).
fn status<T>(shard: &Shard, api: ApiKey, r: &Result<T, OpError>) -> (i16, String) {
    match r {
        Ok(_) => (0, String::new()),
        Err(e) => {
            count_refusal(shard, api, e.code);
            (e.code.code(), e.message.clone())
        }
    }
}

/// Counts an error an answer of `api` carries (a partition, topic or group refused).
fn count_refusal(shard: &Shard, api: ApiKey, code: ErrorCode) {
    shard
        .metrics
        .wire_error(crate::metrics::Listener::Native, api.name(), code.code());
}

impl From<FrameError> for Reply {
    fn from(e: FrameError) -> Reply {
        Reply::Error(e.code(), e.to_string())
    }
}

/// `file_reads` is how this connection takes file data: the broker's `--file-reads`, or
/// copies on a TLS connection (sendfile cannot carry sealed bytes).
///
/// `caller`: the authenticated principal on a listener that enforces ACLs (Metadata of every
/// topic lists only those it may describe).
pub async fn dispatch(
    shard: &Rc<Shard>,
    frame: RequestFrame,
    file_reads: FileReads,
    caller: Option<&crate::broker::acls::Caller>,
) -> Reply {
    let h = &frame.header;
    let Some(api) = ApiKey::from_u16(h.api_key) else {
        return Reply::Error(
            ErrorCode::InvalidRequest,
            format!("unknown api key {}", h.api_key),
        );
    };
    if !api.supports(h.api_version) {
        let (lo, hi) = api.versions();
        return Reply::Error(
            ErrorCode::UnsupportedVersion,
            format!(
                "{api:?} version {} is not supported (supported: {lo}..={hi})",
                h.api_version
            ),
        );
    }
    match api {
        ApiKey::ApiVersions => metadata::api_versions(),
        ApiKey::Metadata => metadata::metadata(shard, &frame, caller).await,
        ApiKey::CreateTopics => topics::create(shard, &frame).await,
        ApiKey::DeleteTopics => topics::delete(shard, &frame).await,
        ApiKey::Produce => produce::produce(shard, frame),
        ApiKey::Fetch => fetch::fetch(shard, &frame, file_reads).await,
        ApiKey::FilteredFetch => fetch::filtered_fetch(shard, &frame).await,
        ApiKey::DelayedProduce => delayed_produce::delayed_produce(shard, &frame).await,
        ApiKey::ListOffsets => list_offsets::list_offsets(shard, &frame).await,
        ApiKey::AlterTopicConfigs => topics::alter_config(shard, &frame).await,
        ApiKey::CreatePartitions => topics::create_partitions(shard, &frame).await,
        ApiKey::DeleteRecords => log_admin::delete_records(shard, &frame).await,
        ApiKey::DescribePartitions => log_admin::describe_partitions(shard, &frame),
        ApiKey::DecommissionPartition => topics::decommission(shard, &frame).await,
        ApiKey::FindCoordinator => groups::find_coordinator(shard, &frame),
        ApiKey::JoinGroup => groups::join(shard, &frame).await,
        ApiKey::SyncGroup => groups::sync(shard, &frame).await,
        ApiKey::Heartbeat => groups::heartbeat(shard, &frame),
        ApiKey::LeaveGroup => groups::leave(shard, &frame),
        ApiKey::OffsetCommit => offsets::commit(shard, &frame).await,
        ApiKey::OffsetFetch => offsets::fetch(shard, &frame),
        ApiKey::ListGroups => groups::list(shard),
        ApiKey::DescribeGroups => groups::describe(shard, &frame),
        ApiKey::ReplicaFetch => replica_fetch::replica_fetch(shard, &frame, file_reads).await,
        ApiKey::OffsetForLeaderEpoch => leader_epochs::offset_for_leader_epoch_api(shard, &frame),
        ApiKey::ReassignPartitions => reassignments::reassign(shard, &frame).await,
        ApiKey::DrainBroker => reassignments::drain_broker(shard, &frame).await,
        ApiKey::ElectLeaders => reassignments::elect_leaders(shard, &frame).await,
        ApiKey::AlterUser => users::alter_user(shard, &frame).await,
        ApiKey::ListUsers => users::list_users(shard),
        ApiKey::InitProducerId => producer_ids::init_producer_id(shard, &frame).await,
        ApiKey::WriteTxnMarkers => txn_markers::write_txn_markers(shard, &frame).await,
        ApiKey::FindTxnCoordinator => transactions::find_coordinator(shard, &frame),
        ApiKey::AddPartitionsToTxn => transactions::add_partitions(shard, &frame).await,
        ApiKey::AddOffsetsToTxn => transactions::add_offsets(shard, &frame).await,
        ApiKey::EndTxn => transactions::end_txn(shard, &frame).await,
        ApiKey::TxnOffsetCommit => transactions::txn_offset_commit(shard, &frame).await,
        // The connection answers these itself (`sasl::gate`).
        ApiKey::SaslHandshake | ApiKey::SaslAuthenticate => Reply::Error(
            ErrorCode::IllegalSaslState,
            "SASL messages are handled by the connection".into(),
        ),
        ApiKey::CreateAcls => acls::create(shard, &frame).await,
        ApiKey::DescribeAcls => acls::describe(shard, &frame),
        ApiKey::DeleteAcls => acls::delete(shard, &frame).await,
        ApiKey::AlterClientQuota => quotas::alter(shard, &frame).await,
        ApiKey::DescribeClientQuotas => quotas::describe(shard),
    }
}
