//! Frame encoding and bounds-checked decoding. Every length read from the network is checked
//! before use; a bad frame is a [`FrameError`], never a panic.

use std::ops::Range;

use rkyv::api::high::{HighDeserializer, HighSerializer, HighValidator};
use rkyv::rancor::BoxedError;
use rkyv::ser::allocator::ArenaHandle;
use rkyv::util::AlignedVec;

use super::error_code::ErrorCode;
use super::frame_pool::PooledFrame;
use crate::batch::align_up;

/// Memory a frame is read into: 16-aligned so archives inside are accessed in place.
pub type FrameBuf = AlignedVec<16>;

/// Bytes of the fixed request header after the length prefix.
pub const REQUEST_HEADER_LEN: usize = 16;
/// Bytes of the fixed response header after the length prefix.
pub const RESPONSE_HEADER_LEN: usize = 16;
/// Longest client id accepted.
pub const MAX_CLIENT_ID: usize = 256;

#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("frame of {len} bytes exceeds the limit of {max} bytes (--max-frame-bytes)")]
    TooLarge { len: usize, max: usize },
    #[error(
        "request of {len} bytes exceeds the request memory budget of {budget} bytes per shard \
         (--max-request-memory-bytes)"
    )]
    OverBudget { len: usize, budget: usize },
    #[error("frame of {0} bytes is shorter than its header")]
    Short(usize),
    #[error("malformed frame header: {0}")]
    Header(String),
    #[error("malformed request body: {0}")]
    Meta(String),
    #[error("connection closed")]
    Closed,
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
}

impl FrameError {
    pub fn code(&self) -> ErrorCode {
        match self {
            FrameError::TooLarge { .. } => ErrorCode::InvalidRequest,
            FrameError::Io(_) | FrameError::Closed => ErrorCode::UnknownServerError,
            _ => ErrorCode::InvalidRequest,
        }
    }
}

/// A request or response meta body: anything rkyv serializes the way the protocol does.
/// Named once here so that every sender spells the bound the same way.
pub trait EncodeMeta:
    for<'a> rkyv::Serialize<HighSerializer<AlignedVec, ArenaHandle<'a>, BoxedError>>
{
}

impl<T> EncodeMeta for T where
    T: for<'a> rkyv::Serialize<HighSerializer<AlignedVec, ArenaHandle<'a>, BoxedError>>
{
}

/// Serializes a meta body.
pub fn encode_meta<T: EncodeMeta>(value: &T) -> Result<AlignedVec, FrameError> {
    rkyv::to_bytes::<BoxedError>(value).map_err(|e| FrameError::Meta(e.to_string()))
}

/// A meta body that can be validated and read back: the one name for the rkyv bound every
/// decoder shares (the counterpart of [`EncodeMeta`]).
pub trait DecodeMeta: Sized {
    /// Validates and deserializes a meta body.
    fn from_meta(bytes: &[u8]) -> Result<Self, FrameError>;
}

impl<T> DecodeMeta for T
where
    T: rkyv::Archive,
    T::Archived: for<'a> rkyv::bytecheck::CheckBytes<HighValidator<'a, BoxedError>>
        + rkyv::Deserialize<T, HighDeserializer<BoxedError>>,
{
    fn from_meta(bytes: &[u8]) -> Result<T, FrameError> {
        if bytes.is_empty() {
            return Err(FrameError::Meta("empty body".into()));
        }
        let bytes = crate::batch::aligned16(bytes);
        rkyv::from_bytes::<T, BoxedError>(&bytes).map_err(|e| FrameError::Meta(e.to_string()))
    }
}

/// Validates and deserializes a meta body (copied to aligned memory when it is not 16-aligned).
pub fn decode_meta<T: DecodeMeta>(bytes: &[u8]) -> Result<T, FrameError> {
    T::from_meta(bytes)
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}
fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// Checks a length prefix against the frame limit.
pub fn check_frame_len(len: u32, max: usize) -> Result<usize, FrameError> {
    let len = len as usize;
    if len > max {
        return Err(FrameError::TooLarge { len, max });
    }
    Ok(len)
}

/// The fixed part of a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestHeader {
    pub api_key: u16,
    pub api_version: u16,
    pub correlation_id: u32,
    pub client_id: String,
}

/// A whole request frame (without its length prefix), parsed and bounds-checked.
#[derive(Debug)]
pub struct RequestFrame {
    buf: PooledFrame,
    pub header: RequestHeader,
    meta: Range<usize>,
    payload: Range<usize>,
}

impl RequestFrame {
    pub fn parse(buf: impl Into<PooledFrame>) -> Result<RequestFrame, FrameError> {
        let buf = buf.into();
        if buf.len() < REQUEST_HEADER_LEN {
            return Err(FrameError::Short(buf.len()));
        }
        let client_len = u16_at(&buf, 8) as usize;
        let meta_len = u32_at(&buf, 12) as usize;
        if client_len > MAX_CLIENT_ID {
            return Err(FrameError::Header(format!(
                "client id of {client_len} bytes exceeds {MAX_CLIENT_ID}"
            )));
        }
        let meta_start = REQUEST_HEADER_LEN + align_up(client_len);
        let meta_end = meta_start
            .checked_add(meta_len)
            .ok_or_else(|| FrameError::Header("meta length overflows".into()))?;
        if meta_end > buf.len() {
            return Err(FrameError::Header(format!(
                "meta length {meta_len} runs past the frame end ({} bytes)",
                buf.len()
            )));
        }
        let payload_start = align_up(meta_end).min(buf.len());
        let client_id = String::from_utf8_lossy(&buf[16..16 + client_len]).into_owned();
        let header = RequestHeader {
            api_key: u16_at(&buf, 0),
            api_version: u16_at(&buf, 2),
            correlation_id: u32_at(&buf, 4),
            client_id,
        };
        let len = buf.len();
        Ok(RequestFrame {
            buf,
            header,
            meta: meta_start..meta_end,
            payload: payload_start..len,
        })
    }

    pub fn meta_bytes(&self) -> &[u8] {
        &self.buf[self.meta.clone()]
    }

    pub fn decode_meta<T: DecodeMeta>(&self) -> Result<T, FrameError> {
        decode_meta(self.meta_bytes())
    }

    /// The payload section (16-aligned in memory).
    pub fn payload(&self) -> &[u8] {
        &self.buf[self.payload.clone()]
    }

    /// A sub-range of the payload named by a meta entry, bounds-checked.
    pub fn payload_slice(&self, offset: u32, len: u32) -> Result<&[u8], FrameError> {
        slice_checked(self.payload(), offset, len)
    }

    /// The frame's memory and where its payload starts in it: a produce stamps its batches
    /// there and keeps them, instead of copying them out.
    pub fn into_parts(self) -> (PooledFrame, usize) {
        (self.buf, self.payload.start)
    }
}

fn slice_checked(payload: &[u8], offset: u32, len: u32) -> Result<&[u8], FrameError> {
    let start = offset as usize;
    let end = start
        .checked_add(len as usize)
        .filter(|e| *e <= payload.len())
        .ok_or_else(|| {
            FrameError::Header(format!(
                "payload range {offset}+{len} runs past the payload ({} bytes)",
                payload.len()
            ))
        })?;
    Ok(&payload[start..end])
}

/// Encodes a whole request, length prefix included. `payload` chunks are appended as they are;
/// each must be a multiple of 16 bytes long for the next to stay aligned.
pub fn encode_request(
    header: &RequestHeader,
    meta: &[u8],
    payload: &[&[u8]],
) -> Result<Vec<u8>, FrameError> {
    let payload_len: usize = payload.iter().map(|p| p.len()).sum();
    let mut out = encode_request_head(header, meta, payload_len)?;
    out.reserve(payload_len);
    for p in payload {
        out.extend_from_slice(p);
    }
    Ok(out)
}

/// Encodes a request's length prefix, header, client id and meta for a payload of
/// `payload_len` bytes that the caller writes after it (without copying it here).
pub fn encode_request_head(
    header: &RequestHeader,
    meta: &[u8],
    payload_len: usize,
) -> Result<Vec<u8>, FrameError> {
    let client = header.client_id.as_bytes();
    if client.len() > MAX_CLIENT_ID {
        return Err(FrameError::Header("client id too long".into()));
    }
    let body_len = REQUEST_HEADER_LEN + align_up(client.len()) + align_up(meta.len()) + payload_len;
    let frame_len = u32::try_from(body_len).map_err(|_| FrameError::TooLarge {
        len: body_len,
        max: u32::MAX as usize,
    })?;
    let mut out = Vec::with_capacity(4 + body_len - payload_len);
    out.extend_from_slice(&frame_len.to_le_bytes());
    out.extend_from_slice(&header.api_key.to_le_bytes());
    out.extend_from_slice(&header.api_version.to_le_bytes());
    out.extend_from_slice(&header.correlation_id.to_le_bytes());
    out.extend_from_slice(&(client.len() as u16).to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    out.extend_from_slice(&(meta.len() as u32).to_le_bytes());
    out.extend_from_slice(client);
    out.resize(4 + REQUEST_HEADER_LEN + align_up(client.len()), 0);
    out.extend_from_slice(meta);
    out.resize(
        4 + REQUEST_HEADER_LEN + align_up(client.len()) + align_up(meta.len()),
        0,
    );
    Ok(out)
}

/// Encodes a response's length prefix, header and meta; the payload (`payload_len` bytes) is
/// written after it by the caller, straight from the log or the tail cache.
pub fn encode_response_head(
    correlation_id: u32,
    error: ErrorCode,
    meta: &[u8],
    payload_len: usize,
) -> Vec<u8> {
    let body_len = RESPONSE_HEADER_LEN + align_up(meta.len()) + payload_len;
    let mut out = Vec::with_capacity(4 + RESPONSE_HEADER_LEN + align_up(meta.len()));
    out.extend_from_slice(&(body_len as u32).to_le_bytes());
    out.extend_from_slice(&correlation_id.to_le_bytes());
    out.extend_from_slice(&error.code().to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    out.extend_from_slice(&(meta.len() as u32).to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes());
    out.extend_from_slice(meta);
    out.resize(4 + RESPONSE_HEADER_LEN + align_up(meta.len()), 0);
    out
}

/// A whole response frame (without its length prefix), parsed and bounds-checked.
#[derive(Debug)]
pub struct ResponseFrame {
    buf: FrameBuf,
    pub correlation_id: u32,
    pub error: ErrorCode,
    meta: Range<usize>,
    payload: Range<usize>,
}

impl ResponseFrame {
    pub fn parse(buf: FrameBuf) -> Result<ResponseFrame, FrameError> {
        if buf.len() < RESPONSE_HEADER_LEN {
            return Err(FrameError::Short(buf.len()));
        }
        let correlation_id = u32_at(&buf, 0);
        let error = ErrorCode::from_code(u16_at(&buf, 4) as i16);
        let meta_len = u32_at(&buf, 8) as usize;
        let meta_end = RESPONSE_HEADER_LEN
            .checked_add(meta_len)
            .filter(|e| *e <= buf.len())
            .ok_or_else(|| FrameError::Header("meta length runs past the frame".into()))?;
        let payload_start = align_up(meta_end).min(buf.len());
        let len = buf.len();
        Ok(ResponseFrame {
            buf,
            correlation_id,
            error,
            meta: RESPONSE_HEADER_LEN..meta_end,
            payload: payload_start..len,
        })
    }

    pub fn meta_bytes(&self) -> &[u8] {
        &self.buf[self.meta.clone()]
    }

    pub fn decode_meta<T: DecodeMeta>(&self) -> Result<T, FrameError> {
        decode_meta(self.meta_bytes())
    }

    pub fn payload(&self) -> &[u8] {
        &self.buf[self.payload.clone()]
    }

    pub fn payload_slice(&self, offset: u32, len: u32) -> Result<&[u8], FrameError> {
        slice_checked(self.payload(), offset, len)
    }

    /// Gives the frame's memory back, so a consumer can keep records read in place alive.
    pub fn into_buf(self) -> FrameBuf {
        self.buf
    }

    /// The payload as shared bytes over the frame's own (16-byte aligned) memory, no copy.
    pub fn into_payload(self) -> bytes::Bytes {
        let range = self.payload.clone();
        bytes::Bytes::from_owner(self.buf).slice(range)
    }
}

/// Reads one length-prefixed frame into aligned memory from a blocking reader.
pub fn read_frame_blocking<R: std::io::Read>(
    r: &mut R,
    max: usize,
) -> Result<FrameBuf, FrameError> {
    let mut len = [0u8; 4];
    match r.read_exact(&mut len) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Err(FrameError::Closed),
        Err(e) => return Err(e.into()),
    }
    let len = check_frame_len(u32::from_le_bytes(len), max)?;
    let mut buf = FrameBuf::with_capacity(len);
    buf.resize(len, 0);
    r.read_exact(&mut buf)?;
    Ok(buf)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::messages::{ProducePartition, ProduceRequest};

    #[test]
    fn request_round_trip_with_payload() {
        let meta = ProduceRequest {
            acks: 1,
            timeout_ms: 5,
            partitions: vec![ProducePartition {
                topic: "t".into(),
                partition: 2,
                payload_offset: 0,
                payload_len: 32,
            }],
        };
        let meta_bytes = encode_meta(&meta).unwrap();
        let header = RequestHeader {
            api_key: 4,
            api_version: 0,
            correlation_id: 99,
            client_id: "cli".into(),
        };
        let payload = [7u8; 32];
        let wire = encode_request(&header, &meta_bytes, &[&payload]).unwrap();
        let buf = read_frame_blocking(&mut &wire[..], 1 << 20).unwrap();
        let frame = RequestFrame::parse(buf).unwrap();
        assert_eq!(frame.header, header);
        let back: ProduceRequest = frame.decode_meta().unwrap();
        assert_eq!(back, meta);
        assert_eq!(frame.payload_slice(0, 32).unwrap(), &payload);
        assert!(frame.payload_slice(16, 32).is_err());
        assert!(frame.payload_slice(u32::MAX, u32::MAX).is_err());
        assert_eq!(frame.payload().as_ptr() as usize % 16, 0);
    }

    #[test]
    fn oversized_and_malformed_frames_are_errors() {
        let wire = (1u32 << 30).to_le_bytes();
        assert!(matches!(
            read_frame_blocking(&mut &wire[..], 1 << 20),
            Err(FrameError::TooLarge { .. })
        ));
        let mut buf = FrameBuf::new();
        buf.extend_from_slice(&[0u8; 8]);
        assert!(RequestFrame::parse(buf).is_err());
        let mut buf = FrameBuf::new();
        buf.extend_from_slice(&[0xffu8; 64]);
        assert!(RequestFrame::parse(buf).is_err());
        let mut buf = FrameBuf::new();
        let mut head = [0u8; 32];
        head[12..16].copy_from_slice(&16u32.to_le_bytes());
        buf.extend_from_slice(&head);
        let frame = RequestFrame::parse(buf).unwrap();
        assert!(frame.decode_meta::<ProduceRequest>().is_err());
    }
}
