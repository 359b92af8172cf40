//! rill's thread-per-core runtime.
//!
//! One glommio executor per core, each pinned to its cpu, sharing nothing. The rest of rill
//! reaches glommio only through this crate (see [`rt`]), so the runtime underneath can change
//! without touching the broker.
//!
//! Rules this crate enforces or makes easy (the reasons are glommio 0.9.0 faults, see
//! `PLATFORM-NOTES.md`):
//! - cross-core traffic goes over bounded flume channels ([`Mesh`]), never glommio's
//!   `spsc_queue`/`shared_channel` (unsound `Clone`, glommio issue 700);
//! - deadlines are driven by one glommio timer per shard ([`Deadlines`]), because more than
//!   32,767 glommio wakers for one task overflow its reference count;
//! - every executor primes glommio's IOPOLL probe with a non-empty file before any other DMA
//!   file ([`start_shards`]), else DMA reads fail with `EOPNOTSUPP`;
//! - RLIMIT_MEMLOCK is raised before executors start ([`memlock::raise_memlock`]);
//! - no shard sleeps longer than [`nudge::MAX_PARK`]: glommio can sleep through its timers and
//!   cross-thread wake-ups.

pub mod deadline;
pub mod file;
pub mod listen;
pub mod memlock;
pub mod mesh;
pub mod nudge;
pub mod rt;
pub mod runtime;

pub use deadline::{DeadlineSleep, Deadlines};
pub use mesh::{Mesh, MeshEndpoint, MeshError, MeshSender, EXTERNAL};
pub use runtime::{start_shards, PerShard, ShardConfig, ShardContext, ShardSet};

/// Why a shard (or the whole set) could not be started or did not finish.
#[derive(thiserror::Error, Debug, Clone, PartialEq, Eq)]
pub enum ShardError {
    /// RLIMIT_MEMLOCK is below what glommio needs and could not be raised.
    #[error(
        "locked-memory limit is {} KiB, rill needs at least {} KiB: run `ulimit -l unlimited` \
         (or set LimitMEMLOCK=infinity in the systemd unit) and start again",
        current_bytes / 1024,
        needed_bytes.div_ceil(1024)
    )]
    Memlock {
        /// The soft limit in force, in bytes.
        current_bytes: u64,
        /// The limit rill asked for, in bytes.
        needed_bytes: u64,
    },
    /// An executor thread or the executor itself could not be created.
    #[error("cannot start shard executor: {0}")]
    Spawn(String),
    /// The IOPOLL probe file could not be written or opened.
    #[error("cannot prime the io_uring IOPOLL probe: {0}")]
    Prime(String),
    /// The cpu list is empty, names a cpu twice, or names a cpu this process may not use.
    #[error("bad cpu list: {0}")]
    BadCore(String),
    /// The shard's future panicked.
    #[error("shard {shard} panicked: {message}")]
    Panicked {
        /// Index of the shard.
        shard: usize,
        /// The panic payload, if it was a string.
        message: String,
    },
    /// The shard was stopped before running its future because another shard failed to start.
    #[error("shard {0} was not started because another shard failed to start")]
    Aborted(usize),
}
