//! The runtime primitives the broker uses, re-exported so that rill names glommio in one place.
//!
//! Deliberately absent: `glommio::channels::{spsc_queue, shared_channel, channel_mesh}` (unsound
//! in 0.9.0, glommio issue 700; use [`crate::Mesh`]) and many concurrent [`Timer`]s or [`sleep`]s
//! in one task (use [`crate::Deadlines`]). [`sleep`] and [`Timer`] are fine for a few long-lived
//! uses.

pub use glommio::channels::local_channel;
pub use glommio::io::{
    DmaBuffer, DmaFile, DmaStreamReader, DmaStreamReaderBuilder, DmaStreamWriter,
    DmaStreamWriterBuilder, ImmutableFile, ImmutableFileBuilder, OpenOptions as DmaOpenOptions,
    ReadResult,
};
pub use glommio::net::{Preallocated, TcpListener, TcpStream};
pub use glommio::timer::{sleep, Timer};
pub use glommio::{
    enclose, executor, spawn_local, spawn_local_into, yield_if_needed, GlommioError, Latency,
    Shares, Task, TaskQueueHandle,
};

/// Runs a blocking call (small file syncs, directory removals) on the executor's blocking
/// thread pool, so that it never stalls the shard's own thread.
pub fn spawn_blocking<F, R>(func: F) -> impl std::future::Future<Output = R>
where
    F: FnOnce() -> R + Send + 'static,
    R: Send + 'static,
{
    glommio::executor().spawn_blocking(func)
}
