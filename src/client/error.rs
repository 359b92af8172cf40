//! Client errors: each prints as one line that names the problem.

use crate::protocol::{ErrorCode, FrameError};

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("cannot reach broker at {addr}: {source}")]
    Connect {
        addr: String,
        source: std::io::Error,
    },
    #[error("connection to {addr} failed: {source}")]
    Io {
        addr: String,
        source: std::io::Error,
    },
    #[error("bad response from {addr}: {source}")]
    Frame { addr: String, source: FrameError },
    #[error("{code}: {message}")]
    Broker { code: ErrorCode, message: String },
    #[error("unknown topic '{0}'")]
    UnknownTopic(String),
    #[error("topic '{topic}' has {partitions} partitions, no partition {partition}")]
    UnknownPartition {
        topic: String,
        partition: u32,
        partitions: u32,
    },
    #[error("timed out: {0}")]
    Timeout(String),
    #[error("{0}")]
    Invalid(String),
    #[error("delivery failed: {0}")]
    Delivery(String),
}

impl ClientError {
    pub fn broker(code: ErrorCode, message: impl Into<String>) -> ClientError {
        let message = message.into();
        ClientError::Broker { code, message }
    }

    /// The broker's error code, where the broker answered with one.
    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            ClientError::Broker { code, .. } => Some(*code),
            _ => None,
        }
    }

    /// Worth retrying after a metadata refresh and a backoff.
    pub fn is_retriable(&self) -> bool {
        match self {
            ClientError::Broker { code, .. } => code.is_retriable(),
            ClientError::Io { .. } | ClientError::Connect { .. } | ClientError::Timeout(_) => true,
            _ => false,
        }
    }
}
