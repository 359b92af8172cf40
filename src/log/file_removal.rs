//! Removing log files without stalling the writes of every other partition.
//!
//! Unlinking a large file frees all its blocks in one filesystem transaction (and, on a
//! filesystem mounted with `discard`, discards them all at its commit). The O_DIRECT writes of
//! every partition on the device wait behind it: deleting a 2 GB topic while another one took
//! 50,000 msg/s held that one's end-to-end latency for 187-516 ms (`rm` of 2 GB outside the
//! broker: 61-68 ms). Freed in 4 MiB steps 1 ms apart: 29-37 ms, its p99 the undisturbed
//! run's; the rest is the deleted topic's cached memory going back to the kernel
//! (RESULTS.md, 2026-12-06 twentieth).
//!
//! So a removal here unlinks the file at once (the directory change is what the caller makes
//! durable, as before) but keeps it open, and a thread of its own shrinks it in steps of
//! `--file-delete-step-bytes`, `--file-delete-step-pause-us` apart, then closes it. A crash
//! meanwhile leaves an orphan inode, which the filesystem frees when it next mounts: nothing
//! a log reads changes. The queue holds at most `--file-delete-queue` files; a removal that
//! finds it full frees its file itself, at the same pace (the caller is on a blocking thread).
//! Only a regular file with no other link is shrunk: a hard link (a backup made that way)
//! keeps its data, and a symbolic link is removed, never followed.

use std::fs::File;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;
use std::sync::OnceLock;
use std::time::Duration;

/// How removed files give their blocks back (the `--file-delete-*` flags).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RemovalPace {
    /// Bytes freed per step; 0 frees a file at once (as a plain unlink does).
    pub step_bytes: u64,
    /// The pause after each step, so the device serves other writes between them.
    pub step_pause: Duration,
    /// Files waiting for the removal thread, at most.
    pub queue: usize,
}

impl RemovalPace {
    pub const DEFAULT: RemovalPace = RemovalPace {
        step_bytes: 4 << 20,
        step_pause: Duration::from_micros(1000),
        queue: 1024,
    };
}

struct Remover {
    pace: RemovalPace,
    queue: flume::Sender<File>,
}

static PACE: OnceLock<RemovalPace> = OnceLock::new();
static REMOVER: OnceLock<Remover> = OnceLock::new();

/// Sets the pace for this process, before the first removal (the broker, at its start).
/// Returns the pace in effect: another one when a removal or an earlier call fixed it first.
pub fn configure(pace: RemovalPace) -> RemovalPace {
    *PACE.get_or_init(|| pace)
}

fn remover() -> &'static Remover {
    REMOVER.get_or_init(|| {
        let pace = *PACE.get_or_init(|| RemovalPace::DEFAULT);
        let (queue, files) = flume::bounded::<File>(pace.queue.max(1));
        let spawned = std::thread::Builder::new()
            .name("rill-file-removal".into())
            .spawn(move || {
                for file in files.iter() {
                    shrink(&file, &pace);
                }
            });
        if let Err(e) = spawned {
            // Every removal then frees its file itself (the queue has no receiver).
            log::warn!("no file removal thread ({e}): removed files are freed inline");
        }
        Remover { pace, queue }
    })
}

/// Frees `file`'s blocks from its end in steps, pausing between them; the last step's are
/// freed when the file is closed.
fn shrink(file: &File, pace: &RemovalPace) {
    let Ok(mut len) = file.metadata().map(|m| m.len()) else {
        return;
    };
    while pace.step_bytes > 0 && len > pace.step_bytes {
        len -= pace.step_bytes;
        if file.set_len(len).is_err() {
            return;
        }
        std::thread::sleep(pace.step_pause);
    }
}

/// Removes the file at `path` (not following a symbolic link): unlinked now, its blocks
/// freed behind, in steps (see the module doc). The caller syncs the directory. A missing
/// file is `NotFound`, as `std::fs::remove_file` says it.
pub fn remove_file(path: &Path) -> std::io::Result<()> {
    unlinking(path, || std::fs::remove_file(path))
}

/// Renames `from` over `to`, the file `to` named before freed as [`remove_file`] frees it.
pub fn rename_over(from: &Path, to: &Path) -> std::io::Result<()> {
    unlinking(to, || std::fs::rename(from, to))
}

/// Runs `unlink`, which takes the name `path` away, and frees the file that had it behind.
fn unlinking(path: &Path, unlink: impl FnOnce() -> std::io::Result<()>) -> std::io::Result<()> {
    let r = remover();
    // Opened before the unlink, so the inode outlives its name.
    let open = to_free_in_steps(path, &r.pace);
    unlink()?;
    if let Some(file) = open {
        if let Err(e) = r.queue.try_send(file) {
            shrink(&e.into_inner(), &r.pace);
        }
    }
    Ok(())
}

/// The file at `path`, opened to be shrunk once unlinked: only a regular file (a symbolic
/// link is not followed) larger than a step, with no other name (whose data must stay). A
/// file that cannot be opened for writing is just unlinked.
fn to_free_in_steps(path: &Path, pace: &RemovalPace) -> Option<File> {
    if pace.step_bytes == 0 {
        return None;
    }
    // O_NONBLOCK: a FIFO without a reader would hold the open.
    let file = std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .ok()?;
    let m = file.metadata().ok()?;
    (m.file_type().is_file() && m.nlink() == 1 && m.len() > pace.step_bytes).then_some(file)
}

/// Removes `dir` and everything under it, each file as [`remove_file`] does; symbolic links
/// are removed, not followed.
pub fn remove_dir_all(dir: &Path) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let path = entry.path();
        let removed = if entry.file_type()?.is_dir() {
            remove_dir_all(&path)
        } else {
            remove_file(&path)
        };
        match removed {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
    }
    std::fs::remove_dir(dir)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn filled(path: &Path, bytes: usize) {
        let mut f = File::create(path).unwrap();
        f.write_all(&vec![7u8; bytes]).unwrap();
        f.sync_all().unwrap();
    }

    #[test]
    fn a_removed_file_is_gone_at_once_and_shrinks_in_steps_while_open() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("segment.log");
        filled(&path, 1 << 20);
        let file = File::options().write(true).open(&path).unwrap();
        let pace = RemovalPace {
            step_bytes: 256 << 10,
            step_pause: Duration::ZERO,
            queue: 1,
        };
        shrink(&file, &pace);
        // Three steps of 256 KiB; the last 256 KiB go with the file.
        assert_eq!(file.metadata().unwrap().len(), 256 << 10);
        remove_file(&path).unwrap();
        assert!(!path.exists());
        assert_eq!(
            remove_file(&path).unwrap_err().kind(),
            std::io::ErrorKind::NotFound
        );
    }

    #[test]
    fn only_a_regular_file_with_one_name_is_shrunk() {
        let dir = tempfile::tempdir().unwrap();
        let pace = RemovalPace {
            step_bytes: 1 << 20,
            ..RemovalPace::DEFAULT
        };
        let data = dir.path().join("data.log");
        filled(&data, 4 << 20);
        assert!(to_free_in_steps(&data, &pace).is_some());
        let off = RemovalPace {
            step_bytes: 0,
            ..pace
        };
        assert!(to_free_in_steps(&data, &off).is_none(), "0: at once");
        let small = dir.path().join("small.log");
        filled(&small, 1 << 20);
        assert!(
            to_free_in_steps(&small, &pace).is_none(),
            "one step or less"
        );
        // A backup made by a hard link keeps its data; a symbolic link's target is not ours.
        let linked = dir.path().join("backup.log");
        std::fs::hard_link(&data, &linked).unwrap();
        assert!(to_free_in_steps(&data, &pace).is_none());
        let symlink = dir.path().join("symlink.log");
        std::os::unix::fs::symlink(&small, &symlink).unwrap();
        assert!(to_free_in_steps(&symlink, &pace).is_none());
        assert!(to_free_in_steps(dir.path(), &pace).is_none());

        remove_file(&data).unwrap();
        remove_file(&symlink).unwrap();
        assert!(!data.exists() && std::fs::symlink_metadata(&symlink).is_err());
        assert_eq!(std::fs::read(&linked).unwrap(), vec![7u8; 4 << 20]);
        assert_eq!(std::fs::read(&small).unwrap(), vec![7u8; 1 << 20]);
    }

    #[test]
    fn a_directory_tree_is_removed_whole() {
        let dir = tempfile::tempdir().unwrap();
        let top = dir.path().join("topic-0");
        std::fs::create_dir_all(top.join("sub")).unwrap();
        filled(&top.join("00000000000000000000.log"), 40 << 20);
        filled(&top.join("00000000000000000000.index"), 4096);
        filled(&top.join("sub").join("x"), 10);
        let outside = dir.path().join("outside.log");
        filled(&outside, 20 << 20);
        std::os::unix::fs::symlink(&outside, top.join("link")).unwrap();
        remove_dir_all(&top).unwrap();
        assert!(!top.exists());
        assert_eq!(std::fs::metadata(&outside).unwrap().len(), 20 << 20);
    }

    #[test]
    fn a_rename_over_a_file_frees_the_old_one_and_keeps_the_new() {
        let dir = tempfile::tempdir().unwrap();
        let old = dir.path().join("s.log");
        let new = dir.path().join("s.log.swap");
        filled(&old, 40 << 20);
        std::fs::write(&new, b"cleaned").unwrap();
        rename_over(&new, &old).unwrap();
        assert!(!new.exists());
        assert_eq!(std::fs::read(&old).unwrap(), b"cleaned");
    }
}
