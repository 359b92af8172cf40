//! Client errors: each prints as one line that names the problem.

use crate::protocol::{ErrorCode, FrameError};

/// Everything a client call can fail with.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// Opening a TCP connection to a broker shard failed.
    #[error("cannot reach broker at {addr}: {source}")]
    Connect {
        /// The shard address that was dialled.
        addr: String,
        /// Why the connection could not be opened.
        source: std::io::Error,
    },
    /// An open connection to a broker shard broke or stopped answering.
    #[error("connection to {addr} failed: {source}")]
    Io {
        /// The shard address of the connection.
        addr: String,
        /// The I/O error that ended the connection.
        source: std::io::Error,
    },
    /// A response from a broker shard was malformed or could not be decoded.
    #[error("bad response from {addr}: {source}")]
    Frame {
        /// The shard address that sent the response.
        addr: String,
        /// What was wrong with the response.
        source: FrameError,
    },
    /// The broker refused the request with a Kafka-style error code.
    #[error("{code}: {message}")]
    Broker {
        /// The error code the broker returned.
        code: ErrorCode,
        /// The broker's explanation (may be empty).
        message: String,
    },
    /// The named topic is not in the cluster metadata.
    #[error("unknown topic '{0}'")]
    UnknownTopic(String),
    /// The topic exists but has no partition with this index.
    #[error("topic '{topic}' has {partitions} partitions, no partition {partition}")]
    UnknownPartition {
        /// The topic asked for.
        topic: String,
        /// The partition index asked for.
        partition: u32,
        /// How many partitions the topic has.
        partitions: u32,
    },
    /// A wait ran out: for a response, or for buffer memory in `Producer::send`.
    #[error("timed out: {0}")]
    Timeout(String),
    /// Any other failure (bad input or address, unexpected response), described by the text.
    #[error("{0}")]
    Invalid(String),
    /// A produced record failed without a broker error code (e.g. its delivery timeout expired).
    #[error("delivery failed: {0}")]
    Delivery(String),
    /// A transactional producer's transaction cannot commit: it must be aborted, or, when
    /// `fatal` (a newer instance of its transactional id fenced it), the producer is done.
    #[error("transaction {}: {message}", if *fatal { "failed for good (the producer must be closed)" } else { "must be aborted" })]
    Transaction {
        /// The producer cannot go on.
        fatal: bool,
        /// The broker's error code behind it, where there is one.
        code: Option<ErrorCode>,
        /// What went wrong.
        message: String,
    },
}

impl ClientError {
    /// Builds a [`ClientError::Broker`] from an error code and a message.
    pub fn broker(code: ErrorCode, message: impl Into<String>) -> ClientError {
        let message = message.into();
        ClientError::Broker { code, message }
    }

    /// The broker's error code, where the broker answered with one.
    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            ClientError::Broker { code, .. } => Some(*code),
            ClientError::Transaction { code, .. } => *code,
            _ => None,
        }
    }

    /// The broker could not be reached or did not answer in time (another may).
    pub fn is_unreachable(&self) -> bool {
        matches!(
            self,
            ClientError::Io { .. } | ClientError::Connect { .. } | ClientError::Timeout(_)
        )
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
