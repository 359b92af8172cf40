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
            LogError::Io { .. } | LogError::Corrupt { .. } | LogError::Failed(_) => {
                ErrorCode::KafkaStorageError
            }
        }
    }
}
