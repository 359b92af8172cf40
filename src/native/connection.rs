//! One client connection: read a frame, dispatch it, write the response, in order.
//!
//! Two clocks close a connection: `--connection-idle-timeout-ms` while it waits for a request
//! (the time a request takes to be handled, a long-poll fetch included, does not count), and
//! `--fetch-send-timeout-ms` while a response drains into its socket (a client that stops
//! reading costs only its own connection).

use std::os::unix::io::AsRawFd;
use std::rc::Rc;

use futures_lite::AsyncWriteExt;
use rill_shards::rt::TcpStream;

use super::{dispatch, Reply};
use crate::broker::produce::hold_until_acked;
use crate::broker::Shard;
use crate::net::conn_limits::{accepted, after, shutdown, until};
use crate::net::request_memory::read_frame;
use crate::protocol::frame::{encode_meta, encode_response_head, FrameError, RequestFrame};
use crate::protocol::messages::ErrorBody;
use crate::protocol::ErrorCode;

pub async fn serve(shard: Rc<Shard>, mut stream: TcpStream) {
    let peer = accepted(&stream);
    loop {
        let idle_until = after(shard.cfg.connection_idle_timeout);
        // Waiting for request memory counts as idle: the request is not in yet.
        let read = read_frame(
            &mut stream,
            shard.cfg.max_frame_bytes,
            &shard.request_memory,
        );
        let Some(read) = until(&shard.deadlines, idle_until, read).await else {
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
                // The rest of an oversized frame cannot be skipped safely: answer and close.
                let _ = write_error(&mut stream, 0, e.code(), &e.to_string()).await;
                return;
            }
        };
        let frame = match RequestFrame::parse(buf) {
            Ok(f) => f,
            Err(e) => {
                log::debug!("{peer}: {e}; closing");
                let _ = write_error(&mut stream, 0, e.code(), &e.to_string()).await;
                return;
            }
        };
        let correlation = frame.header.correlation_id;
        let reply = dispatch(&shard, frame).await;
        // The request is done: what a produce keeps of its frame is the tail cache's and
        // the pending writes' (see `request_memory`); unanswered writes keep the grant.
        let reply = match reply {
            Reply::Unanswered(waits) => {
                hold_until_acked(&shard, waits, grant);
                continue;
            }
            other => {
                drop(grant);
                other
            }
        };
        let send_until = after(shard.cfg.fetch_send_timeout);
        let fd = stream.as_raw_fd();
        let write = async {
            match reply {
                Reply::Unanswered(_) => Ok(()),
                Reply::Error(code, message) => {
                    write_error(&mut stream, correlation, code, &message).await
                }
                Reply::Meta(meta, chunks) => {
                    let payload_len = chunks.iter().map(|c| c.len()).sum();
                    let head =
                        encode_response_head(correlation, ErrorCode::None, &meta, payload_len);
                    write_all(&shard, &mut stream, &head, &chunks, send_until).await
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
    }
}

async fn write_all(
    shard: &Shard,
    stream: &mut TcpStream,
    head: &[u8],
    chunks: &[crate::log::ReadChunk],
    deadline: std::time::Instant,
) -> std::io::Result<()> {
    stream.write_all(head).await?;
    for c in chunks {
        match (c, &shard.sendfile) {
            (crate::log::ReadChunk::Sendfile(range), Some(worker)) => {
                // Nothing of ours may be in flight on the socket while the worker owns it.
                stream.flush().await?;
                worker
                    .send(stream.as_raw_fd(), range.clone(), deadline)
                    .await?;
            }
            (crate::log::ReadChunk::Sendfile(_), None) => {
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
    stream: &mut TcpStream,
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
