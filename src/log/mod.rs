//! Log storage: per partition a directory of segments with sparse offset and time indexes.
pub mod appender;
pub mod compaction;
pub mod error;
pub mod file_removal;
pub mod fsync;
pub mod index;
pub mod leader_epoch;
pub mod partition_log;
mod reader;
mod recovery;
pub mod scan;
pub mod segment;
#[cfg(test)]
mod tests;

pub use error::LogError;
pub use fsync::FsyncPolicy;
pub use partition_log::{FileReads, Flushed, PartitionLog, ReadChunk};
pub use reader::CopiedBatches;
pub use segment::SegmentConfig;
