//! What memory the broker may use: the machine's (`/proc/meminfo`), lowered to the limit of
//! the cgroup (v2) it runs in, as a container's is. The tail cache is sized from it
//! (`--tail-cache-bytes` defaults to an eighth of the total) and gives memory back while what
//! is available is short (`--tail-cache-min-available-bytes`): unlike the page cache that
//! Kafka and Iggy lean on, the cache is broker memory the kernel cannot reclaim itself.

use std::path::Path;

/// Memory in bytes: the total the broker may use, and how much of it is available now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MachineMemory {
    pub total: u64,
    pub available: u64,
}

/// The memory now, or `None` where `/proc/meminfo` cannot be read.
pub fn read() -> Option<MachineMemory> {
    read_from(Path::new("/"))
}

/// [`read`] under `root` (a directory laid out as `/`).
pub fn read_from(root: &Path) -> Option<MachineMemory> {
    let meminfo = std::fs::read_to_string(root.join("proc/meminfo")).ok()?;
    let machine = parse_meminfo(&meminfo)?;
    Some(match cgroup_memory(root) {
        Some(c) => MachineMemory {
            total: machine.total.min(c.total),
            available: machine.available.min(c.available),
        },
        None => machine,
    })
}

/// MemTotal and MemAvailable of a `/proc/meminfo` text.
fn parse_meminfo(text: &str) -> Option<MachineMemory> {
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|rest| rest.trim().strip_suffix("kB"))
            .and_then(|kb| kb.trim().parse::<u64>().ok())
            .map(|kb| kb.saturating_mul(1024))
    };
    Some(MachineMemory {
        total: field("MemTotal:")?,
        available: field("MemAvailable:")?,
    })
}

/// The limit of this process's cgroup (v2) and what is left of it: `memory.max` less
/// `memory.current`, with the cgroup's inactive page cache counted as available (the kernel
/// reclaims it before it fails an allocation). `None` without a limit.
fn cgroup_memory(root: &Path) -> Option<MachineMemory> {
    let membership = std::fs::read_to_string(root.join("proc/self/cgroup")).ok()?;
    let dir = root
        .join("sys/fs/cgroup")
        .join(cgroup_v2_path(&membership)?.trim_start_matches('/'));
    let read = |f: &str| std::fs::read_to_string(dir.join(f)).ok();
    parse_cgroup(
        &read("memory.max")?,
        &read("memory.current")?,
        read("memory.stat").as_deref(),
    )
}

/// The cgroup v2 path of a `/proc/self/cgroup` text (its `0::` line).
fn cgroup_v2_path(text: &str) -> Option<&str> {
    text.lines()
        .find_map(|l| l.strip_prefix("0::"))
        .map(str::trim)
}

fn parse_cgroup(max: &str, current: &str, stat: Option<&str>) -> Option<MachineMemory> {
    let total = max.trim().parse::<u64>().ok()?; // "max": no limit
    let current = current.trim().parse::<u64>().ok()?;
    let inactive_file = stat
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("inactive_file "))
                .and_then(|v| v.trim().parse::<u64>().ok())
        })
        .unwrap_or(0);
    Some(MachineMemory {
        total,
        available: total.saturating_sub(current.saturating_sub(inactive_file)),
    })
}

/// An eighth of the memory the broker may use: the default of both `--tail-cache-bytes` and
/// `--tail-cache-min-available-bytes`; 64 MiB where it cannot be read (and then the cache has
/// nothing to follow either).
pub fn eighth_of_memory() -> u64 {
    read().map_or(64 << 20, |m| m.total / 8)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MEMINFO: &str = "MemTotal:       24000000 kB\nMemFree:        20000000 kB\n\
                           MemAvailable:   22000000 kB\nBuffers:            1000 kB\n";

    #[test]
    fn meminfo_total_and_available() {
        assert_eq!(
            parse_meminfo(MEMINFO),
            Some(MachineMemory {
                total: 24_000_000 * 1024,
                available: 22_000_000 * 1024
            })
        );
        assert_eq!(parse_meminfo("MemTotal: 5 kB\n"), None, "no MemAvailable");
        assert_eq!(parse_meminfo("MemTotal: x kB\nMemAvailable: 1 kB\n"), None);
    }

    #[test]
    fn a_cgroup_limit_lowers_both_and_counts_inactive_page_cache_as_available() {
        assert_eq!(parse_cgroup("max\n", "100\n", None), None, "no limit");
        let stat = "anon 500\nfile 400\ninactive_file 300\nactive_file 100\n";
        assert_eq!(
            parse_cgroup("1000\n", "900\n", Some(stat)),
            Some(MachineMemory {
                total: 1000,
                available: 400
            })
        );
        assert_eq!(
            parse_cgroup("1000", "1200", None).map(|m| m.available),
            Some(0),
            "over the limit: nothing available"
        );
        assert_eq!(
            cgroup_v2_path("0::/system.slice/rill.service\n"),
            Some("/system.slice/rill.service")
        );
        assert_eq!(cgroup_v2_path("1:memory:/x\n"), None, "cgroup v1 only");
    }

    #[test]
    fn read_from_a_root_with_and_without_a_cgroup_limit() {
        let root = tempfile::tempdir().expect("dir");
        let r = root.path();
        std::fs::create_dir_all(r.join("proc/self")).expect("proc");
        std::fs::write(r.join("proc/meminfo"), MEMINFO).expect("meminfo");
        std::fs::write(r.join("proc/self/cgroup"), "0::/box\n").expect("cgroup");
        let machine = read_from(r).expect("read");
        assert_eq!(
            machine.total,
            24_000_000 * 1024,
            "no cgroup files: the machine's"
        );
        std::fs::create_dir_all(r.join("sys/fs/cgroup/box")).expect("cgroup dir");
        std::fs::write(r.join("sys/fs/cgroup/box/memory.max"), "8589934592\n").expect("max");
        std::fs::write(r.join("sys/fs/cgroup/box/memory.current"), "1073741824\n").expect("cur");
        assert_eq!(
            read_from(r),
            Some(MachineMemory {
                total: 8 << 30,
                available: 7 << 30
            })
        );
        // This machine's own figures are read.
        assert!(read().expect("/proc/meminfo").total > 0);
    }
}
