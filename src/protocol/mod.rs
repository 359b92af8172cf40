//! The native wire protocol: length-prefixed frames, a fixed request/response header, an rkyv
//! "meta" body per API, and a raw payload section that carries batches untouched.
//!
//! ```text
//! request:  u32 frame length | u16 api key | u16 api version | u32 correlation id
//!           | u16 client id length | u16 reserved | u32 meta length
//!           | client id (padded to 16) | meta (rkyv, padded to 16) | payload
//! response: u32 frame length | u32 correlation id | i16 error code | u16 reserved
//!           | u32 meta length | u32 reserved | meta (rkyv, padded to 16) | payload
//! ```
//! Offsets after the length prefix are 16-byte aligned when the frame is read into 16-aligned
//! memory, so both the meta archive and the batches in the payload are accessed in place.
//! A non-zero error code in a response header is a frame-level error (unknown API, version,
//! malformed request) and the meta is then an [`messages::ErrorBody`].

pub mod api;
pub mod error_code;
pub mod frame;
pub mod frame_pool;
pub mod isolation;
pub mod messages;

pub use api::ApiKey;
pub use error_code::ErrorCode;
pub use frame::{FrameError, RequestFrame, RequestHeader, ResponseFrame};
pub use isolation::Isolation;
