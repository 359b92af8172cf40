//! `rill tune check`: the host facts that decide a broker's latency and whether it can run at
//! all, each with its value, the recommended one and the command that sets it. Reads only;
//! the one write is the O_DIRECT probe's 4 KiB temp file in the data dir, removed at once.
//! A fact that cannot be read is `Unknown` with the reason, never an error.

pub mod cpu_governor;
pub mod data_dir;
pub mod disk_scheduler;
pub mod hugepages;
pub mod io_uring;
pub mod memlock;
pub mod nic_irq;

use std::path::Path;

/// How a fact compares with what rill wants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// As recommended.
    Ok,
    /// rill runs, but slower or with a worse tail than it could.
    Advise,
    /// rill cannot run, or cannot run safely, as the host is.
    Bad,
    /// The fact could not be read; the value says why.
    Unknown,
}

impl Status {
    pub fn label(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Advise => "advise",
            Status::Bad => "BAD",
            Status::Unknown => "unknown",
        }
    }
}

/// One host fact.
#[derive(Debug, Clone)]
pub struct Check {
    pub name: &'static str,
    pub status: Status,
    pub value: String,
    pub recommended: String,
    /// The command (or setting) that brings the fact to the recommended value.
    pub fix: String,
}

impl Check {
    fn new(
        name: &'static str,
        status: Status,
        value: String,
        recommended: &str,
        fix: &str,
    ) -> Check {
        Check {
            name,
            status,
            value,
            recommended: recommended.to_string(),
            fix: fix.to_string(),
        }
    }

    fn unknown(
        name: &'static str,
        why: impl std::fmt::Display,
        recommended: &str,
        fix: &str,
    ) -> Check {
        Check::new(
            name,
            Status::Unknown,
            format!("unknown ({why})"),
            recommended,
            fix,
        )
    }
}

/// Every check, in the order printed. `data_dir` need not exist: its nearest existing
/// parent is checked.
pub fn check_host(data_dir: &Path) -> Vec<Check> {
    let dir = data_dir::DataDir::inspect(data_dir);
    vec![
        cpu_governor::check(),
        hugepages::check(),
        memlock::check(),
        io_uring::check(),
        dir.location_check(),
        dir.filesystem_check(),
        dir.o_direct_check(),
        disk_scheduler::check(dir.mount()),
        nic_irq::check(),
    ]
}

/// The selected choice of a sysfs multiple-choice file: `always [madvise] never` gives
/// `madvise`.
pub fn bracketed_choice(text: &str) -> Option<&str> {
    text.split_whitespace()
        .find_map(|w| w.strip_prefix('[').and_then(|w| w.strip_suffix(']')))
}

/// A small /proc or /sys file, trimmed; the error names the file.
fn read_fact(path: impl AsRef<Path>) -> Result<String, String> {
    let path = path.as_ref();
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .map_err(|e| format!("cannot read {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bracketed_choice_picks_the_selected_word() {
        assert_eq!(bracketed_choice("always [madvise] never"), Some("madvise"));
        assert_eq!(bracketed_choice("[always] madvise never\n"), Some("always"));
        assert_eq!(
            bracketed_choice("none [mq-deadline] kyber bfq"),
            Some("mq-deadline")
        );
        assert_eq!(bracketed_choice("[none] mq-deadline"), Some("none"));
        assert_eq!(bracketed_choice("none"), None);
        assert_eq!(bracketed_choice(""), None);
    }
}
