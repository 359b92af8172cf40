//! One client connection, pipelined: a reader reads, decodes and handles requests one after
//! another while a writer answers them in request order.
//!
//! A produce is validated and appended by the reader, in arrival order (so a partition's
//! append order is the arrival order), and only its acknowledgement wait overlaps the next
//! requests. At most `--max-in-flight-requests-per-connection` replies are queued or being
//! written ([`InOrder`]); past it the connection is not read. Other requests are handled by the
//! reader one at a time, as before. A reply carrying sendfile ranges is a barrier: the reader
//! reads nothing until it is written, so no operation of ours is on the socket while the
//! sendfile worker owns it (ARCHITECTURE.md, "Reads").
//!
//! On a listener that authenticates (`--native-sasl-mechanisms`) a connection may send only
//! ApiVersions, SaslHandshake and SaslAuthenticate until its SASL exchange succeeds
//! (anything else is answered SASL_AUTHENTICATION_FAILED and the connection closed, as is a
//! failed exchange), within `--sasl-authentication-timeout-ms`; its user is then the
//! principal its quotas are kept by.
//!
//! Two clocks close a connection: `--connection-idle-timeout-ms` while it waits for a request
//! with nothing in flight (a request being handled, a long-poll fetch or an acknowledgement
//! wait included, does not count), and `--fetch-send-timeout-ms` while a response drains into
//! its socket (a client that stops reading costs only its own connection).

use std::rc::Rc;
use std::time::Duration;

use futures_lite::AsyncWriteExt;

use super::{authorization, dispatch, sasl, Reply};
use crate::auth::session::SaslSession;
use crate::broker::acls::Caller;
use crate::broker::produce::hold_until_acked;
use crate::broker::quotas::{self, QuotaClient};
use crate::broker::Shard;
use crate::log::{FileReads, ReadChunk};
use crate::metrics::{Listener, Timed, UNKNOWN_API};
use crate::net::conn_limits::{after, shutdown, until};
use crate::net::in_order::InOrder;
use crate::net::request_memory::read_frame;
use crate::net::shared_stream::SharedStream;
use crate::protocol::frame::{encode_meta, encode_response_head, FrameError, RequestFrame};
use crate::protocol::messages::ErrorBody;
use crate::protocol::{ApiKey, ErrorCode};

/// A reply with the correlation id it answers.
type Answer = (u32, Reply);

/// Serves one accepted connection (plain, or TLS after its handshake); `peer` names it in
/// the logs.
pub async fn serve(shard: Rc<Shard>, peer: String, stream: SharedStream) {
    let replies: InOrder<Answer> = InOrder::new(shard.cfg.max_in_flight_requests_per_connection);
    let reader = stream.clone();
    replies
        .serve(
            read_requests(&shard, &peer, reader, &replies),
            write_replies(&shard, &peer, stream, &replies),
        )
        .await
}

/// Reads and handles requests until the client closes, stays idle or sends a bad frame
/// (answered, then the connection closes).
async fn read_requests(
    shard: &Rc<Shard>,
    peer: &str,
    mut stream: SharedStream,
    replies: &InOrder<Answer>,
) {
    // Sealed bytes cannot go out with sendfile: a TLS connection's fetches read by copy.
    let file_reads = match stream.is_tls() {
        true => FileReads::Copy,
        false => shard.cfg.file_reads,
    };
    let mechanisms = &shard.cfg.native_sasl_mechanisms;
    let mut session = (!mechanisms.is_empty()).then(|| SaslSession::new(mechanisms.clone()));
    let authenticate_until = after(shard.cfg.sasl_authentication_timeout);
    // The address ACLs match hosts against.
    let host = peer
        .parse::<std::net::SocketAddr>()
        .map_or_else(|_| peer.to_string(), |a| a.ip().to_string());
    // A mutual-TLS client's identity (its certificate's subject): the principal when the
    // listener does not also require SASL (as on the Kafka listener).
    let tls_dn = stream.tls_client_dn();
    let mut caller: Option<Caller> = None;
    // What the last request earned against the client's quotas (by user once authenticated,
    // and client id): the connection is not read for that long.
    let mut pause = Duration::ZERO;
    loop {
        if !pause.is_zero() {
            shard.deadlines.sleep(std::mem::take(&mut pause)).await;
        }
        // Not read while the bound is reached: a client that does not read its replies stops
        // being read.
        replies.room().await;
        // Waiting for request memory counts as idle: the request is not in yet.
        let read = read_frame(
            &mut stream,
            shard.cfg.max_frame_bytes,
            &shard.request_memory,
        );
        let idle = shard.cfg.connection_idle_timeout;
        let read = replies.unless_idle(&shard.deadlines, idle, read);
        let read = match session.as_ref().is_some_and(|s| s.user().is_none()) {
            true => match until(&shard.deadlines, authenticate_until, read).await {
                Some(r) => r,
                None => {
                    log::info!(
                        "{peer}: not authenticated within {} ms \
                         (--sasl-authentication-timeout-ms); closing",
                        shard.cfg.sasl_authentication_timeout.as_millis()
                    );
                    return;
                }
            },
            false => read.await,
        };
        let Some(read) = read else {
            log::debug!(
                "{peer}: no request for {} ms (--connection-idle-timeout-ms); closing",
                shard.cfg.connection_idle_timeout.as_millis()
            );
            return;
        };
        let (buf, grant) = match read {
            Ok(b) => b,
            Err(FrameError::Closed) => return,
            Err(e) => {
                log::debug!("{peer}: {e}; closing");
                count_error(shard, UNKNOWN_API, e.code());
                // The rest of an oversized frame cannot be skipped safely: answer and close.
                replies
                    .push_ready((0, Reply::Error(e.code(), e.to_string())))
                    .await;
                return;
            }
        };
        let frame = match RequestFrame::parse(buf) {
            Ok(f) => f,
            Err(e) => {
                log::debug!("{peer}: {e}; closing");
                count_error(shard, UNKNOWN_API, e.code());
                replies
                    .push_ready((0, Reply::Error(e.code(), e.to_string())))
                    .await;
                return;
            }
        };
        let correlation = frame.header.correlation_id;
        let api = ApiKey::from_u16(frame.header.api_key);
        let api_name = api.map_or(UNKNOWN_API, ApiKey::name);
        // Before authentication: the exchange, or nothing.
        if let Some(gate) = sasl::gate(shard, session.as_mut(), api, &frame) {
            let close = gate.close;
            if let Reply::Error(code, _) = &gate.reply {
                count_error(shard, api_name, *code);
            }
            drop(grant);
            replies.push_ready((correlation, gate.reply)).await;
            if close {
                log::info!("{peer}: {}; closing", gate.why);
                replies.drained().await;
                return;
            }
            continue;
        }
        let user = match session.as_ref() {
            Some(s) => s.user(),
            None => tls_dn.as_deref(),
        };
        // ACLs, on when the listener authenticates (a connection gets this far only once
        // authenticated); the principal is made once per connection, not per request.
        if caller.is_none() {
            caller = user.map(|u| Caller::user(u, host.clone()));
        }
        if let (Some(caller), Some(api)) = (&caller, api) {
            if let Err((code, why)) = authorization::check(shard, caller, api, &frame) {
                log::debug!("{peer}: {why}");
                count_error(shard, api_name, code);
                drop(grant);
                replies
                    .push_ready((correlation, Reply::Error(code, why)))
                    .await;
                continue;
            }
        }
        let timed = match api {
            Some(ApiKey::Produce) => Timed::Produce,
            Some(ApiKey::Fetch | ApiKey::FilteredFetch) => Timed::Fetch,
            _ => Timed::No,
        };
        let timer = shard.metrics.request(Listener::Native, api_name, timed);
        // Quotas cost nothing (no copy of the client id) while none is set.
        let quota_client_id =
            (!shard.metadata.borrow().quotas.is_empty()).then(|| frame.header.client_id.clone());
        let quota_user = quota_client_id.as_ref().and(user).map(str::to_string);
        let produced = match api {
            Some(ApiKey::Produce | ApiKey::DelayedProduce) => frame.payload().len(),
            _ => 0,
        };
        let quota = |fetched: usize| match &quota_client_id {
            None => Duration::ZERO,
            Some(client_id) => {
                let client = QuotaClient {
                    user: quota_user.as_deref(),
                    client_id,
                };
                quotas::record_request(shard, &client, produced, fetched)
            }
        };
        // The request is done when its reply is: what a produce keeps of its frame is the
        // tail cache's and the pending writes' (see `request_memory`); unanswered writes
        // keep the grant until durable.
        match dispatch(shard, frame, file_reads, caller.as_ref()).await {
            Reply::Unanswered(waits) => {
                pause = quota(0);
                shard.metrics.done(timer);
                hold_until_acked(shard, waits, grant)
            }
            Reply::Later(later) => {
                pause = quota(0);
                let shard = shard.clone();
                replies
                    .push(Box::pin(async move {
                        let reply = later.await;
                        shard.metrics.done(timer);
                        if let Reply::Error(code, _) = &reply {
                            count_error(&shard, api_name, *code);
                        }
                        drop(grant);
                        (correlation, reply)
                    }))
                    .await
            }
            reply => {
                let fetched = match (&reply, api) {
                    (Reply::Meta(_, chunks), Some(ApiKey::Fetch | ApiKey::FilteredFetch)) => {
                        chunks.iter().map(ReadChunk::len).sum()
                    }
                    _ => 0,
                };
                pause = quota(fetched);
                shard.metrics.done(timer);
                if let Reply::Error(code, _) = &reply {
                    count_error(shard, api_name, *code);
                }
                drop(grant);
                let barrier = matches!(&reply, Reply::Meta(_, chunks)
                    if chunks.iter().any(|c| matches!(c, ReadChunk::Sendfile(_))));
                replies.push_ready((correlation, reply)).await;
                if barrier {
                    replies.drained().await;
                }
            }
        }
    }
}

/// Counts a request-level error answered on this listener.
fn count_error(shard: &Shard, api: &'static str, code: ErrorCode) {
    shard.metrics.wire_error(Listener::Native, api, code.code());
}

/// Writes the replies in request order until the reader is done, or a write fails or misses
/// its deadline (then the socket is shut down).
async fn write_replies(
    shard: &Shard,
    peer: &str,
    mut stream: SharedStream,
    replies: &InOrder<Answer>,
) {
    let fd = stream.fd();
    while let Some((correlation, reply)) = replies.next().await {
        let send_until = after(shard.cfg.fetch_send_timeout);
        let write = async {
            match reply {
                Reply::Unanswered(_) | Reply::Later(_) => Ok(()),
                Reply::Error(code, message) => {
                    write_error(&mut stream, correlation, code, &message).await
                }
                Reply::Meta(meta, chunks) => {
                    let payload_len = chunks.iter().map(|c| c.len()).sum();
                    let head =
                        encode_response_head(correlation, ErrorCode::None, &meta, payload_len);
                    write_all(shard, &mut stream, &head, &chunks, send_until).await
                }
            }
        };
        let result = until(&shard.deadlines, send_until, write)
            .await
            .unwrap_or_else(|| {
                Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "the response did not drain within --fetch-send-timeout-ms",
                ))
            });
        if let Err(e) = result {
            if e.kind() == std::io::ErrorKind::TimedOut {
                log::info!("{peer}: {e}; closing");
            } else {
                log::debug!("{peer}: write failed: {e}; closing");
            }
            // A sendfile job may still hold a duplicate of the socket: end it now.
            shutdown(fd);
            return;
        }
        replies.written();
    }
}

async fn write_all(
    shard: &Shard,
    stream: &mut SharedStream,
    head: &[u8],
    chunks: &[ReadChunk],
    deadline: std::time::Instant,
) -> std::io::Result<()> {
    stream.write_all(head).await?;
    for c in chunks {
        match (c, &shard.sendfile) {
            (ReadChunk::Sendfile(_), _) if stream.is_tls() => {
                // The reader asked for copies on this connection (`file_reads`).
                debug_assert!(false, "a sendfile range on a TLS connection");
                return Err(std::io::Error::other("sendfile range on a TLS connection"));
            }
            (ReadChunk::Sendfile(range), Some(worker)) => {
                // Nothing of ours may be in flight on the socket while the worker owns it.
                stream.flush().await?;
                worker.send(stream.fd(), range.clone(), deadline).await?;
            }
            (ReadChunk::Sendfile(_), None) => {
                return Err(std::io::Error::other(
                    "sendfile range without a sendfile worker",
                ));
            }
            (other, _) => {
                stream
                    .write_all(other.as_slice().unwrap_or_default())
                    .await?;
            }
        }
    }
    stream.flush().await
}

async fn write_error(
    stream: &mut SharedStream,
    correlation: u32,
    code: ErrorCode,
    message: &str,
) -> std::io::Result<()> {
    let meta = encode_meta(&ErrorBody {
        message: message.to_string(),
    })
    .map(|m| m.to_vec())
    .unwrap_or_default();
    let head = encode_response_head(correlation, code, &meta, 0);
    stream.write_all(&head).await?;
    stream.flush().await
}
