//! Storage errors.

use std::path::PathBuf;

use crate::protocol::ErrorCode;

#[derive(Debug, thiserror::Error)]
pub enum LogError {
    #[error("i/o on {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("offset {offset} is out of range [{start}, {end})")]
    OffsetOutOfRange { offset: u64, start: u64, end: u64 },
    #[error("corrupt data in {path} at position {position}: {what}")]
    Corrupt {
        path: PathBuf,
        position: u64,
        what: String,
    },
    #[error("partition storage failed earlier and is read-only: {0}")]
    Failed(String),
    #[error("offsets {from}..{to} are missing or damaged: {why}")]
    Missing { from: u64, to: u64, why: String },
}

impl LogError {
    pub fn io(path: impl Into<PathBuf>, source: impl Into<std::io::Error>) -> LogError {
        LogError::Io {
            path: path.into(),
            source: source.into(),
        }
    }

    pub fn code(&self) -> ErrorCode {
        match self {
            LogError::OffsetOutOfRange { .. } => ErrorCode::OffsetOutOfRange,
            // What is on disk is damaged: not retriable, unlike a failing disk.
            LogError::Corrupt { .. } | LogError::Missing { .. } => ErrorCode::CorruptMessage,
            LogError::Io { .. } | LogError::Failed(_) => ErrorCode::KafkaStorageError,
        }
    }
}
