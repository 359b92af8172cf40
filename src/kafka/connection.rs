//! One Kafka client connection, pipelined as the native one (`crate::native::connection`): a
//! reader reads, decodes and handles requests one after another (a produce is appended in
//! arrival order and only its acknowledgement wait overlaps the next requests; librdkafka
//! sends up to 5 at once) while a writer answers in request order, at most
//! `--max-in-flight-requests-per-connection` replies queued or being written.
//!
//! What Kafka does with bad input, this does: an unknown API key, an unsupported version or an
//! undecodable body closes the connection (after answering ApiVersions, which a client may
//! send at any version to learn ours, and the requests read before it); a size outside
//! 8..=`--max-frame-bytes` closes it too. As Kafka's `connections.max.idle.ms`, a connection
//! without a request and nothing in flight for `--connection-idle-timeout-ms` is closed; a
//! response that does not drain into the socket within `--fetch-send-timeout-ms` closes it too.

use std::rc::Rc;
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use futures_lite::{AsyncReadExt, AsyncWriteExt};
use kafka_protocol::messages::{ApiKey, RequestHeader, RequestKind, ResponseHeader, ResponseKind};
use kafka_protocol::protocol::{Decodable, Encodable};

use super::authorization::{self, Checked};
use super::fetch_response::{FetchEncodeError, FetchReply, SizedRecords};
use super::handlers::{self, Handled};
use super::sasl::{self, Gate, Sasl};
use super::versions;
use crate::broker::acls::Caller;
use crate::broker::produce::hold_until_acked;
use crate::broker::quotas::{self, QuotaClient};
use crate::broker::Shard;
use crate::metrics::{Listener, Timed, UNKNOWN_API};
use crate::net::conn_limits::{after, until};
use crate::net::in_order::InOrder;
use crate::net::request_memory::{read_body, Grant};
use crate::net::shared_stream::SharedStream;
use crate::protocol::frame::FrameError;
use crate::protocol::ErrorCode;

/// Smallest request: api key, api version and correlation id.
const MIN_REQUEST: usize = 8;

/// A response ready to be written, or why it could not be encoded.
type Encoded = Result<Reply, String>;

/// A response ready to be written.
enum Reply {
    /// Encoded whole (size prefix included).
    Whole(Bytes),
    /// A Fetch answer, its records converted as they are written.
    Fetch(FetchReply),
}

/// Serves one accepted connection (plain, or TLS after its handshake); `peer` names it in
/// the logs. Kafka fetches always read files by copy (records are converted), so TLS changes
/// nothing here.
pub async fn serve(shard: Rc<Shard>, peer: String, stream: SharedStream) {
    let replies: InOrder<Encoded> = InOrder::new(shard.cfg.max_in_flight_requests_per_connection);
    let reader = stream.clone();
    replies
        .serve(
            read_requests(&shard, &peer, reader, &replies),
            write_replies(&shard, &peer, stream, &replies),
        )
        .await
}

/// Reads and handles requests until the client closes, stays idle or sends what is refused.
async fn read_requests(
    shard: &Rc<Shard>,
    peer: &str,
    mut stream: SharedStream,
    replies: &InOrder<Encoded>,
) {
    let mechanisms = &shard.cfg.kafka_sasl_mechanisms;
    let mut sasl = (!mechanisms.is_empty()).then(|| Sasl::new(mechanisms.clone()));
    // Authentication must end by then (a TLS handshake before it had its own bound).
    let authenticate_until = after(shard.cfg.sasl_authentication_timeout);
    // The address ACLs match hosts against.
    let host = peer
        .parse::<std::net::SocketAddr>()
        .map_or_else(|_| peer.to_string(), |a| a.ip().to_string());
    // A mutual-TLS client's identity (its certificate's subject): the principal when the
    // listener does not also require SASL.
    let tls_dn = stream.tls_client_dn();
    // What the last request earned against the client's quotas: the connection is not read
    // for that long (Kafka mutes the channel; the client keeps its connection).
    let mut pause = Duration::ZERO;
    loop {
        if !pause.is_zero() {
            shard.deadlines.sleep(std::mem::take(&mut pause)).await;
        }
        // Not read while the bound is reached: a client that does not read its replies stops
        // being read.
        replies.room().await;
        // Waiting for request memory counts as idle: the request is not in yet.
        let read = read_request(shard, &mut stream);
        let idle = shard.cfg.connection_idle_timeout;
        let read = replies.unless_idle(&shard.deadlines, idle, read);
        let read = match sasl.as_ref().is_some_and(|s| s.user().is_none()) {
            true => match until(&shard.deadlines, authenticate_until, read).await {
                Some(r) => r,
                None => {
                    log::info!(
                        "kafka {peer}: not authenticated within {} ms \
                         (--sasl-authentication-timeout-ms); closing",
                        shard.cfg.sasl_authentication_timeout.as_millis()
                    );
                    return;
                }
            },
            false => read.await,
        };
        let (body, grant) = match read {
            None => {
                log::debug!(
                    "kafka {peer}: no request for {} ms (--connection-idle-timeout-ms); closing",
                    shard.cfg.connection_idle_timeout.as_millis()
                );
                return;
            }
            Some(Err(why)) => {
                if let Some(why) = why {
                    log::debug!("kafka {peer}: {why}; closing");
                    let code = ErrorCode::InvalidRequest.code();
                    shard.metrics.wire_error(Listener::Kafka, UNKNOWN_API, code);
                }
                return;
            }
            Some(Ok(read)) => read,
        };
        let response = match decode(body) {
            Ok(Decoded::Request(api, version, header, request)) => {
                let correlation = header.correlation_id;
                let client = header.client_id.as_ref().map(|c| c.to_string());
                let gate = match sasl.as_mut() {
                    Some(s) => s.gate(shard, api, version, &request),
                    None => sasl::gate_off(api),
                };
                match gate {
                    Gate::Pass => {}
                    Gate::Refuse(why) => {
                        log::info!("kafka {peer}: {why}; closing");
                        return;
                    }
                    Gate::Answer { response, close } => {
                        drop(grant);
                        // Counted as any request (metrics): refusals by their error code.
                        let name = versions::name(api);
                        shard
                            .metrics
                            .done(shard.metrics.request(Listener::Kafka, name, Timed::No));
                        let code = match &*response {
                            ResponseKind::SaslHandshake(r) => r.error_code,
                            ResponseKind::SaslAuthenticate(r) => r.error_code,
                            _ => 0,
                        };
                        shard.metrics.wire_error(Listener::Kafka, name, code);
                        replies
                            .push_ready(encode(api, version, correlation, &response))
                            .await;
                        if close {
                            // Written by the writer before the connection closes.
                            log::info!("kafka {peer}: SASL refused; closing");
                            return;
                        }
                        if let Some(user) = sasl.as_ref().and_then(|s| s.user()) {
                            log::debug!("kafka {peer}: authenticated as {user:?}");
                        }
                        continue;
                    }
                }
                let name = versions::name(api);
                let timed = match api {
                    ApiKey::Produce => Timed::Produce,
                    ApiKey::Fetch => Timed::Fetch,
                    _ => Timed::No,
                };
                let timer = shard.metrics.request(Listener::Kafka, name, timed);
                // ACLs, on when the listener authenticates (a connection gets this far only
                // once authenticated).
                let user = match sasl.as_ref() {
                    Some(s) => s.user(),
                    None => tls_dn.as_deref(),
                };
                let caller = user.map(|u| Caller::user(u, host.clone()));
                let quota_user = user.map(str::to_string);
                let quota_client = QuotaClient {
                    user: quota_user.as_deref(),
                    client_id: client.as_deref().unwrap_or_default(),
                };
                let (request, refused) = match &caller {
                    None => (*request, None),
                    Some(c) => match authorization::check(shard, c, version, *request) {
                        Checked::Handle(r, refused) => (*r, Some(refused)),
                        Checked::Answer(r) => {
                            pause = quotas::record_request(shard, &quota_client, 0, 0);
                            shard.metrics.done(timer);
                            count_errors(shard, name, &r);
                            drop(grant);
                            replies
                                .push_ready(encode(api, version, correlation, &r))
                                .await;
                            continue;
                        }
                        Checked::Close => {
                            log::info!(
                                "kafka {peer}: {name} is served only to principals with every \
                                 right on the cluster; closing"
                            );
                            return;
                        }
                    },
                };
                // Refused items go back into the answer.
                let patch_shard = shard.clone();
                let patch = move |r: &mut ResponseKind| {
                    if let (Some(refused), Some(c)) = (refused, caller) {
                        if !refused.is_empty() {
                            refused.apply(&patch_shard, &c, version, r);
                        }
                    }
                };
                let produced = produce_bytes(&request);
                let quota = |fetched: usize| {
                    quotas::record_request(shard, &quota_client, produced, fetched)
                };
                match handlers::handle(shard, version, client.as_deref(), request).await {
                    Handled::Answer(mut r) => {
                        patch(&mut r);
                        pause = quota(fetch_bytes(&r));
                        set_throttle(&mut r, pause);
                        shard.metrics.done(timer);
                        count_errors(shard, name, &r);
                        encode(api, version, correlation, &r)
                    }
                    Handled::Fetch(r, records) => {
                        let mut r = ResponseKind::Fetch(*r);
                        patch(&mut r);
                        let records = SizedRecords::new(records);
                        pause = quota(records.len());
                        set_throttle(&mut r, pause);
                        shard.metrics.done(timer);
                        let ResponseKind::Fetch(mut r) = r else {
                            unreachable!("a Fetch answer stays one")
                        };
                        let reply = FetchReply::encode(version, correlation, &mut r, records);
                        count_errors(shard, name, &ResponseKind::Fetch(r));
                        reply.map(Reply::Fetch).map_err(|e| e.to_string())
                    }
                    Handled::Unanswered(waits) => {
                        pause = quota(0);
                        shard.metrics.done(timer);
                        hold_until_acked(shard, waits, grant);
                        continue;
                    }
                    Handled::Later(later) => {
                        pause = quota(0);
                        let throttle = pause;
                        let shard = shard.clone();
                        replies
                            .push(Box::pin(async move {
                                let mut r = later.await;
                                patch(&mut r);
                                set_throttle(&mut r, throttle);
                                shard.metrics.done(timer);
                                count_errors(&shard, name, &r);
                                drop(grant);
                                encode(api, version, correlation, &r)
                            }))
                            .await;
                        continue;
                    }
                }
            }
            Ok(Decoded::UnsupportedApiVersions(correlation)) => {
                let name = versions::name(ApiKey::ApiVersions);
                shard
                    .metrics
                    .done(shard.metrics.request(Listener::Kafka, name, Timed::No));
                let code = ErrorCode::UnsupportedVersion;
                shard.metrics.wire_error(Listener::Kafka, name, code.code());
                // Answered with v0 (as Kafka does) so the client can pick a version we serve.
                let mut r = handlers::api_versions();
                r.error_code = code.code();
                encode(
                    ApiKey::ApiVersions,
                    0,
                    correlation,
                    &ResponseKind::ApiVersions(r),
                )
            }
            Err(why) => {
                log::debug!("kafka {peer}: {why}; closing");
                let code = ErrorCode::InvalidRequest.code();
                shard.metrics.wire_error(Listener::Kafka, UNKNOWN_API, code);
                return;
            }
        };
        // The request is done (see `request_memory`: what a produce stores is a copy).
        drop(grant);
        replies.push_ready(response).await;
    }
}

/// Counts the errors an answer carries (metrics): its top-level code and each item's
/// (partition, topic, group, member, resource), as the native listener counts its answers'.
/// Metadata's per-topic codes are not counted (clients poll metadata for topics that do not
/// exist yet), nor are answers of APIs without items that fail.
fn count_errors(shard: &Shard, api: &'static str, response: &ResponseKind) {
    let count = |code: i16| shard.metrics.wire_error(Listener::Kafka, api, code);
    match response {
        ResponseKind::Produce(r) => r
            .responses
            .iter()
            .flat_map(|t| &t.partition_responses)
            .for_each(|p| count(p.error_code)),
        ResponseKind::Fetch(r) => {
            count(r.error_code);
            r.responses
                .iter()
                .flat_map(|t| &t.partitions)
                .for_each(|p| count(p.error_code));
        }
        ResponseKind::ListOffsets(r) => r
            .topics
            .iter()
            .flat_map(|t| &t.partitions)
            .for_each(|p| count(p.error_code)),
        ResponseKind::OffsetForLeaderEpoch(r) => r
            .topics
            .iter()
            .flat_map(|t| &t.partitions)
            .for_each(|p| count(p.error_code)),
        ResponseKind::FindCoordinator(r) => {
            // v4+ answers per group in `coordinators`, older versions at the top.
            count(r.error_code);
            r.coordinators.iter().for_each(|c| count(c.error_code));
        }
        ResponseKind::JoinGroup(r) => count(r.error_code),
        ResponseKind::SyncGroup(r) => count(r.error_code),
        ResponseKind::Heartbeat(r) => count(r.error_code),
        ResponseKind::LeaveGroup(r) => {
            count(r.error_code);
            r.members.iter().for_each(|m| count(m.error_code));
        }
        ResponseKind::OffsetCommit(r) => r
            .topics
            .iter()
            .flat_map(|t| &t.partitions)
            .for_each(|p| count(p.error_code)),
        ResponseKind::OffsetFetch(r) => {
            count(r.error_code);
            r.topics
                .iter()
                .flat_map(|t| &t.partitions)
                .for_each(|p| count(p.error_code));
            for g in &r.groups {
                count(g.error_code);
                g.topics
                    .iter()
                    .flat_map(|t| &t.partitions)
                    .for_each(|p| count(p.error_code));
            }
        }
        ResponseKind::DescribeGroups(r) => r.groups.iter().for_each(|g| count(g.error_code)),
        ResponseKind::ListGroups(r) => count(r.error_code),
        ResponseKind::ConsumerGroupHeartbeat(r) => count(r.error_code),
        ResponseKind::ConsumerGroupDescribe(r) => r.groups.iter().for_each(|g| count(g.error_code)),
        ResponseKind::DeleteGroups(r) => r.results.iter().for_each(|g| count(g.error_code)),
        ResponseKind::OffsetDelete(r) => {
            count(r.error_code);
            r.topics
                .iter()
                .flat_map(|t| &t.partitions)
                .for_each(|p| count(p.error_code));
        }
        ResponseKind::CreateTopics(r) => r.topics.iter().for_each(|t| count(t.error_code)),
        ResponseKind::DeleteTopics(r) => r.responses.iter().for_each(|t| count(t.error_code)),
        ResponseKind::CreatePartitions(r) => r.results.iter().for_each(|t| count(t.error_code)),
        ResponseKind::DeleteRecords(r) => r
            .topics
            .iter()
            .flat_map(|t| &t.partitions)
            .for_each(|p| count(p.error_code)),
        ResponseKind::DescribeLogDirs(r) => {
            count(r.error_code);
            r.results.iter().for_each(|d| count(d.error_code));
        }
        ResponseKind::AlterConfigs(r) => r.responses.iter().for_each(|c| count(c.error_code)),
        ResponseKind::IncrementalAlterConfigs(r) => {
            r.responses.iter().for_each(|c| count(c.error_code))
        }
        ResponseKind::DescribeConfigs(r) => r.results.iter().for_each(|c| count(c.error_code)),
        ResponseKind::DescribeCluster(r) => count(r.error_code),
        ResponseKind::InitProducerId(r) => count(r.error_code),
        ResponseKind::AddPartitionsToTxn(r) => r
            .results_by_topic_v3_and_below
            .iter()
            .flat_map(|t| &t.results_by_partition)
            .for_each(|p| count(p.partition_error_code)),
        ResponseKind::AddOffsetsToTxn(r) => count(r.error_code),
        ResponseKind::EndTxn(r) => count(r.error_code),
        ResponseKind::TxnOffsetCommit(r) => r
            .topics
            .iter()
            .flat_map(|t| &t.partitions)
            .for_each(|p| count(p.error_code)),
        ResponseKind::AlterPartitionReassignments(r) => {
            count(r.error_code);
            r.responses
                .iter()
                .flat_map(|t| &t.partitions)
                .for_each(|p| count(p.error_code))
        }
        ResponseKind::ListPartitionReassignments(r) => count(r.error_code),
        ResponseKind::ElectLeaders(r) => {
            count(r.error_code);
            r.replica_election_results
                .iter()
                .flat_map(|t| &t.partition_result)
                .for_each(|p| count(p.error_code))
        }
        _ => {}
    }
}

/// Writes the replies in request order until the reader is done, or a reply cannot be
/// encoded, a write fails or misses its deadline.
async fn write_replies(
    shard: &Shard,
    peer: &str,
    mut stream: SharedStream,
    replies: &InOrder<Encoded>,
) {
    while let Some(response) = replies.next().await {
        let reply = match response {
            Ok(r) => r,
            Err(e) => {
                log::warn!("kafka {peer}: cannot encode a response: {e}; closing");
                return;
            }
        };
        let write = async {
            match reply {
                Reply::Whole(bytes) => {
                    stream.write_all(&bytes).await?;
                    stream.flush().await?;
                }
                Reply::Fetch(f) => f.write_to(&mut stream).await?,
            }
            Ok::<(), FetchEncodeError>(())
        };
        match until(&shard.deadlines, after(shard.cfg.fetch_send_timeout), write).await {
            Some(Ok(())) => {}
            Some(Err(FetchEncodeError::Io(_))) => return,
            Some(Err(e)) => {
                log::error!("kafka {peer}: {e}; closing");
                return;
            }
            None => {
                log::info!(
                    "kafka {peer}: the response did not drain within --fetch-send-timeout-ms; closing"
                );
                return;
            }
        }
        replies.written();
    }
}

/// One size-prefixed request body, charged to the shard's request memory until the grant is
/// dropped. `Err(None)`: the connection closed; `Err(Some(why))`: a size out of bounds.
async fn read_request(
    shard: &Shard,
    stream: &mut SharedStream,
) -> Result<(Bytes, Grant), Option<String>> {
    let mut len = [0u8; 4];
    stream.read_exact(&mut len).await.map_err(|_| None)?;
    let size = i32::from_be_bytes(len);
    if size < MIN_REQUEST as i32 || size as usize > shard.cfg.max_frame_bytes {
        return Err(Some(format!("request size {size}")));
    }
    match read_body(stream, size as usize, &shard.request_memory).await {
        Ok((body, grant)) => Ok((Bytes::from_owner(body), grant)),
        Err(e @ FrameError::OverBudget { .. }) => Err(Some(e.to_string())),
        Err(_) => Err(None),
    }
}

enum Decoded {
    Request(ApiKey, i16, Box<RequestHeader>, Box<RequestKind>),
    UnsupportedApiVersions(i32),
}

/// Decodes a request, refusing what is not served. The decoders are third-party code fed
/// with network bytes: a panic in them is caught and treated as a malformed request.
fn decode(mut body: Bytes) -> Result<Decoded, String> {
    let key = i16::from_be_bytes([body[0], body[1]]);
    let version = i16::from_be_bytes([body[2], body[3]]);
    let correlation = i32::from_be_bytes([body[4], body[5], body[6], body[7]]);
    let api = ApiKey::try_from(key).map_err(|_| format!("unknown api key {key}"))?;
    if !versions::supports(api, version) {
        if api == ApiKey::ApiVersions {
            return Ok(Decoded::UnsupportedApiVersions(correlation));
        }
        return Err(format!("{api:?} v{version} is not supported"));
    }
    if api == ApiKey::Produce && version < versions::MIN_DECODED_PRODUCE {
        return Err(format!(
            "Produce v{version} (message format v0/v1) is not supported: use record batch v2"
        ));
    }
    std::panic::catch_unwind(move || {
        let header = RequestHeader::decode(&mut body, api.request_header_version(version))
            .map_err(|e| format!("bad {api:?} header: {e}"))?;
        let request = RequestKind::decode(api, &mut body, version)
            .map_err(|e| format!("bad {api:?} v{version} body: {e}"))?;
        // Bytes after the body are ignored, not refused: librdkafka 2.x writes Metadata v12's
        // topic count too wide (librdkafka #5049) and Kafka brokers read past it.
        if body.has_remaining() {
            log::debug!(
                "{} bytes after the {api:?} v{version} body ignored",
                body.remaining()
            );
        }
        Ok(Decoded::Request(
            api,
            version,
            Box::new(header),
            Box::new(request),
        ))
    })
    .map_err(|_| format!("undecodable {api:?} v{version} request"))?
}

/// Size prefix, response header, body.
fn encode(api: ApiKey, version: i16, correlation: i32, response: &ResponseKind) -> Encoded {
    encode_whole(api, version, correlation, response).map(Reply::Whole)
}

/// Size prefix, response header, body, in one buffer.
fn encode_whole(
    api: ApiKey,
    version: i16,
    correlation: i32,
    response: &ResponseKind,
) -> Result<Bytes, String> {
    let mut buf = BytesMut::with_capacity(256);
    buf.extend_from_slice(&[0; 4]);
    let mut header = ResponseHeader::default();
    header.correlation_id = correlation;
    header
        .encode(&mut buf, api.response_header_version(version))
        .map_err(|e| e.to_string())?;
    response
        .encode(&mut buf, version)
        .map_err(|e| e.to_string())?;
    let size = (buf.len() - 4) as i32;
    buf[..4].copy_from_slice(&size.to_be_bytes());
    Ok(buf.freeze())
}

/// Bytes of record batches a Produce carries (what a produce quota counts).
fn produce_bytes(request: &RequestKind) -> usize {
    match request {
        RequestKind::Produce(r) => r
            .topic_data
            .iter()
            .flat_map(|t| &t.partition_data)
            .filter_map(|p| p.records.as_ref())
            .map(|b| b.len())
            .sum(),
        _ => 0,
    }
}

/// Bytes of records a Fetch answer carries (what a fetch quota counts).
fn fetch_bytes(response: &ResponseKind) -> usize {
    match response {
        ResponseKind::Fetch(r) => r
            .responses
            .iter()
            .flat_map(|t| &t.partitions)
            .filter_map(|p| p.records.as_ref())
            .map(|b| b.len())
            .sum(),
        _ => 0,
    }
}

/// Tells the client how long it is throttled (the answers whose clients act on it).
fn set_throttle(response: &mut ResponseKind, pause: Duration) {
    if pause.is_zero() {
        return;
    }
    let ms = i32::try_from(pause.as_millis()).unwrap_or(i32::MAX);
    match response {
        ResponseKind::Produce(r) => r.throttle_time_ms = ms,
        ResponseKind::Fetch(r) => r.throttle_time_ms = ms,
        ResponseKind::ListOffsets(r) => r.throttle_time_ms = ms,
        ResponseKind::Metadata(r) => r.throttle_time_ms = ms,
        ResponseKind::OffsetCommit(r) => r.throttle_time_ms = ms,
        ResponseKind::OffsetFetch(r) => r.throttle_time_ms = ms,
        ResponseKind::Heartbeat(r) => r.throttle_time_ms = ms,
        ResponseKind::ConsumerGroupHeartbeat(r) => r.throttle_time_ms = ms,
        ResponseKind::FindCoordinator(r) => r.throttle_time_ms = ms,
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::ApiVersionsResponse;

    fn request(key: i16, version: i16, rest: &[u8]) -> Bytes {
        let mut b = Vec::new();
        b.extend_from_slice(&key.to_be_bytes());
        b.extend_from_slice(&version.to_be_bytes());
        b.extend_from_slice(&7i32.to_be_bytes());
        b.extend_from_slice(rest);
        Bytes::from(b)
    }

    #[test]
    fn unknown_unsupported_and_truncated_requests_are_refused() {
        assert!(decode(request(9999, 0, &[])).is_err(), "unknown api key");
        assert!(
            decode(request(0, 99, &[])).is_err(),
            "unsupported produce version"
        );
        assert!(
            decode(request(0, 2, &[0, 0])).is_err(),
            "produce v0-2 refused"
        );
        assert!(matches!(
            decode(request(18, 99, &[])),
            Ok(Decoded::UnsupportedApiVersions(7))
        ));
        // Metadata v1 with a client id length that runs past the end.
        assert!(decode(request(3, 1, &[0, 50, b'x'])).is_err());
        // Fetch v4 header fine, body cut short.
        assert!(decode(request(1, 4, &[0, 0, 0, 0, 0, 1])).is_err());
        // Counts far beyond the bytes sent (upstream's fuzz repro: Metadata v0 claiming
        // 54 million topics) are refused, not preallocated (that would abort the process).
        assert!(decode(request(3, 0, &[0x03, 0x3c, 0x0c, 0x00, 0xb6])).is_err());
        assert!(decode(request(3, 0, &[0x7f, 0xff, 0xff, 0xff])).is_err());
        assert!(decode(request(3, 9, &[0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0x0f])).is_err());
        for n in 0..64u8 {
            let junk: Vec<u8> = (0..n).map(|i| i.wrapping_mul(37)).collect();
            let _ = decode(request(1, 12, &junk));
            let _ = decode(request(3, 12, &junk));
            let _ = decode(request(0, 9, &junk));
        }
    }

    #[test]
    fn api_versions_round_trips_through_the_codec() {
        let mut body = Vec::new();
        // ApiVersions v3: flexible header (client id, tagged fields) and body.
        body.extend_from_slice(&[0, 3, b'c', b'l', b'i', 0]); // client id "cli", no tags
        body.extend_from_slice(&[5, b'k', b'c', b'a', b't', 4, b'1', b'.', b'7', 0]);
        let req = match decode(request(18, 3, &body)) {
            Ok(Decoded::Request(ApiKey::ApiVersions, 3, h, r)) => {
                let RequestKind::ApiVersions(r) = *r else {
                    panic!("not ApiVersions")
                };
                assert_eq!(h.client_id.as_deref(), Some("cli"));
                r
            }
            _ => panic!("not decoded"),
        };
        assert_eq!(req.client_software_name.as_str(), "kcat");
        let resp = handlers::api_versions();
        let bytes =
            encode_whole(ApiKey::ApiVersions, 3, 7, &ResponseKind::ApiVersions(resp)).unwrap();
        let mut b = bytes.slice(4..);
        assert_eq!(b.get_i32(), 7, "correlation id, header v0");
        let decoded = ApiVersionsResponse::decode(&mut b, 3).unwrap();
        let produce = decoded
            .api_keys
            .iter()
            .find(|k| k.api_key == ApiKey::Produce as i16)
            .unwrap();
        assert_eq!((produce.min_version, produce.max_version), (0, 11));
    }
}
