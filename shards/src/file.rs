//! `DirectFile`: the O_DIRECT file the log is stored in, behind the runtime seam, with a
//! fault-injection hook so that tests can make any write, sync, allocation or read fail
//! (EIO, ENOSPC, a short write) and check every error path of the storage.
//!
//! Faults are registered by tests only ([`faults::inject`]); with none registered the hook is
//! one relaxed atomic load per call.

use std::io;
use std::path::{Path, PathBuf};

use glommio::io::{DmaBuffer, DmaFile, OpenOptions, ReadResult};

/// An O_DIRECT file (glommio's `DmaFile`) that knows its path, for fault matching.
pub struct DirectFile {
    inner: DmaFile,
    path: PathBuf,
    sync_writes: bool,
}

impl DirectFile {
    /// Opens `path` for reading and writing; with `create`, creates it (empty) first. With
    /// `sync_writes` it is opened O_DSYNC: each write is durable once it completes, as if an
    /// fdatasync followed it, in one request instead of two.
    pub async fn open(path: &Path, create: bool, sync_writes: bool) -> io::Result<DirectFile> {
        faults::check(path, faults::FileOp::Open)?;
        let mut o = OpenOptions::new();
        o.read(true).write(true);
        if create {
            o.create(true).truncate(true);
        }
        if sync_writes {
            o.custom_flags(libc::O_DSYNC);
        }
        let inner = o.dma_open(path).await.map_err(io::Error::from)?;
        Ok(DirectFile {
            inner,
            path: path.to_path_buf(),
            sync_writes,
        })
    }

    /// Whether each write is durable on completion (opened O_DSYNC).
    pub fn sync_writes(&self) -> bool {
        self.sync_writes
    }

    pub async fn file_size(&self) -> io::Result<u64> {
        self.inner.file_size().await.map_err(io::Error::from)
    }

    pub async fn read_at(&self, pos: u64, len: usize) -> io::Result<ReadResult> {
        faults::check(&self.path, faults::FileOp::Read)?;
        self.inner.read_at(pos, len).await.map_err(io::Error::from)
    }

    pub fn alloc_dma_buffer(&self, len: usize) -> DmaBuffer {
        self.inner.alloc_dma_buffer(len)
    }

    /// Writes `buf` at `pos`; returns the bytes written (a short write is possible).
    pub async fn write_at(&self, buf: DmaBuffer, pos: u64) -> io::Result<usize> {
        faults::check(&self.path, faults::FileOp::Write)?;
        if self.sync_writes {
            // The write carries its own sync: a sync fault fails it.
            faults::check(&self.path, faults::FileOp::Fdatasync)?;
        }
        let len = buf.len();
        let n = self
            .inner
            .write_at(buf, pos)
            .await
            .map_err(io::Error::from)?;
        if faults::short_write(&self.path) {
            // The bytes reached the file, but the caller is told fewer did, as a device that
            // filled up mid-write would.
            return Ok(n.min(len / 2));
        }
        Ok(n)
    }

    pub async fn pre_allocate(&self, size: u64, keep_size: bool) -> io::Result<()> {
        faults::check(&self.path, faults::FileOp::Fallocate)?;
        self.inner
            .pre_allocate(size, keep_size)
            .await
            .map_err(io::Error::from)
    }

    pub async fn truncate(&self, size: u64) -> io::Result<()> {
        faults::check(&self.path, faults::FileOp::Truncate)?;
        self.inner.truncate(size).await.map_err(io::Error::from)
    }

    pub async fn fdatasync(&self) -> io::Result<()> {
        faults::check(&self.path, faults::FileOp::Fdatasync)?;
        self.inner.fdatasync().await.map_err(io::Error::from)
    }
}

/// Fault injection for tests: register a fault for files whose path contains a string; the
/// next `times` matching calls fail with `errno` (or, for `ShortWrite`, report a short write).
pub mod faults {
    use std::path::Path;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Mutex;

    /// The file operations a fault can hit.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum FileOp {
        Open,
        Read,
        Write,
        /// The write lands but reports fewer bytes than asked.
        ShortWrite,
        Fallocate,
        Truncate,
        Fdatasync,
        /// The fsync of a directory (the broker's own call: [`check`]).
        DirSync,
    }

    struct Fault {
        path_contains: String,
        op: FileOp,
        errno: i32,
        times: u32,
    }

    static ARMED: AtomicBool = AtomicBool::new(false);
    static FAULTS: Mutex<Vec<Fault>> = Mutex::new(Vec::new());

    /// The next `times` `op` calls on files whose path contains `path_contains` fail with
    /// `errno` (e.g. `libc::ENOSPC`, `libc::EIO`; ignored for `ShortWrite`).
    pub fn inject(path_contains: &str, op: FileOp, errno: i32, times: u32) {
        let mut f = FAULTS.lock().unwrap_or_else(|e| e.into_inner());
        f.push(Fault {
            path_contains: path_contains.to_string(),
            op,
            errno,
            times,
        });
        ARMED.store(true, Ordering::Release);
    }

    /// Removes every fault for paths containing `path_contains`.
    pub fn clear(path_contains: &str) {
        let mut f = FAULTS.lock().unwrap_or_else(|e| e.into_inner());
        f.retain(|x| x.path_contains != path_contains);
        ARMED.store(!f.is_empty(), Ordering::Release);
    }

    /// Takes one matching fault, if any: its errno.
    fn take(path: &Path, op: FileOp) -> Option<i32> {
        if !ARMED.load(Ordering::Relaxed) {
            return None;
        }
        let path = path.to_string_lossy();
        let mut f = FAULTS.lock().unwrap_or_else(|e| e.into_inner());
        let i = f
            .iter()
            .position(|x| x.op == op && x.times > 0 && path.contains(&x.path_contains))?;
        f[i].times -= 1;
        Some(f[i].errno)
    }

    /// Fails with the next matching fault's errno, if one is armed: for file calls made
    /// outside [`super::DirectFile`] (a directory sync).
    pub fn check(path: &Path, op: FileOp) -> std::io::Result<()> {
        match take(path, op) {
            Some(errno) => Err(std::io::Error::from_raw_os_error(errno)),
            None => Ok(()),
        }
    }

    pub(super) fn short_write(path: &Path) -> bool {
        take(path, FileOp::ShortWrite).is_some()
    }
}
