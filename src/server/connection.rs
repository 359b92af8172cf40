//! One client connection: read a frame, dispatch it, write the response, in order.

use std::rc::Rc;

use futures_lite::AsyncWriteExt;
use rill_shards::rt::TcpStream;

use super::handlers::{self, Reply};
use super::shard::Shard;
use crate::protocol::frame::{
    encode_meta, encode_response_head, read_frame, FrameError, RequestFrame,
};
use crate::protocol::messages::ErrorBody;
use crate::protocol::ErrorCode;

pub async fn serve(shard: Rc<Shard>, mut stream: TcpStream) {
    let peer = stream
        .peer_addr()
        .map(|a| a.to_string())
        .unwrap_or_default();
    let _ = stream.set_nodelay(true);
    loop {
        let buf = match read_frame(&mut stream, shard.cfg.max_frame_bytes).await {
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
        let reply = handlers::dispatch(&shard, frame).await;
        let result = match reply {
            Reply::None => Ok(()),
            Reply::Error(code, message) => {
                write_error(&mut stream, correlation, code, &message).await
            }
            Reply::Meta(meta, chunks) => {
                let payload_len = chunks.iter().map(|c| c.len()).sum();
                let head = encode_response_head(correlation, ErrorCode::None, &meta, payload_len);
                write_all(&shard, &mut stream, &head, &chunks).await
            }
        };
        if let Err(e) = result {
            log::debug!("{peer}: write failed: {e}");
            return;
        }
    }
}

async fn write_all(
    shard: &Shard,
    stream: &mut TcpStream,
    head: &[u8],
    chunks: &[crate::log::ReadChunk],
) -> std::io::Result<()> {
    use std::os::unix::io::AsRawFd;
    stream.write_all(head).await?;
    for c in chunks {
        match (c, &shard.sendfile) {
            (crate::log::ReadChunk::Sendfile(range), Some(worker)) => {
                stream.flush().await?;
                worker.send(stream.as_raw_fd(), range.clone()).await?;
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
