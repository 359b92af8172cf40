//! The data dir: where it is (or its nearest existing parent, where the broker would create
//! it), the filesystem under it, and whether that filesystem takes O_DIRECT writes, probed
//! with one 4 KiB aligned temp file that is removed at once.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use super::{read_fact, Check, Status};

/// The probe's block: O_DIRECT needs the buffer, offset and length aligned to the logical
/// block size, which is at most 4 KiB on the disks rill supports.
const PROBE_BYTES: usize = 4096;

/// A line of /proc/self/mountinfo.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    pub point: PathBuf,
    pub fstype: String,
    pub source: String,
    /// The device's major and minor numbers; major 0 has no block device (tmpfs, overlay,
    /// network filesystems).
    pub dev: (u32, u32),
}

/// What the O_DIRECT probe found.
#[derive(Debug)]
enum Probe {
    Supported,
    /// The filesystem refused O_DIRECT (EINVAL on open or write).
    Refused(std::io::Error),
    /// The probe file could not be created at all (permissions, read-only).
    CannotCreate(std::io::Error),
    NotADirectory,
}

pub struct DataDir {
    given: PathBuf,
    /// The nearest existing path: `given` itself when it exists.
    probed: PathBuf,
    mount: Result<Mount, String>,
    probe: Probe,
}

impl DataDir {
    pub fn inspect(given: &Path) -> DataDir {
        let probed = nearest_existing(given);
        let mount = find_mount(&probed);
        let probe = if probed.is_dir() {
            probe_o_direct(&probed)
        } else {
            Probe::NotADirectory
        };
        DataDir {
            given: given.to_path_buf(),
            probed,
            mount,
            probe,
        }
    }

    pub fn mount(&self) -> &Result<Mount, String> {
        &self.mount
    }

    pub fn location_check(&self) -> Check {
        let mut value = self.given.display().to_string();
        if self.probed != self.given {
            value.push_str(&format!(
                " (does not exist yet; checked at {})",
                self.probed.display()
            ));
        }
        let status = match &self.probe {
            Probe::NotADirectory => {
                value.push_str(": NOT A DIRECTORY");
                Status::Bad
            }
            Probe::CannotCreate(e) => {
                value.push_str(&format!(": NOT WRITABLE ({e})"));
                Status::Bad
            }
            Probe::Supported | Probe::Refused(_) => Status::Ok,
        };
        Check {
            name: "data dir",
            status,
            value,
            recommended: "a writable directory on a local disk, used by rill alone".to_string(),
            fix: match self.probe {
                Probe::NotADirectory => format!(
                    "choose another --data-dir ({} is not a directory)",
                    self.probed.display()
                ),
                _ => format!(
                    "mkdir -p {0} && chown $(id -un) {0}, or choose another --data-dir",
                    self.given.display()
                ),
            },
        }
    }

    pub fn filesystem_check(&self) -> Check {
        const RECOMMENDED: &str = "xfs or ext4 on a local disk";
        const FIX: &str =
            "put --data-dir on an xfs or ext4 mount (mkfs.xfs DEVICE; mount DEVICE DIR)";
        let m = match &self.mount {
            Ok(m) => m,
            Err(e) => return Check::unknown("filesystem", e, RECOMMENDED, FIX),
        };
        let good = matches!(m.fstype.as_str(), "xfs" | "ext4");
        Check {
            name: "filesystem",
            status: if good { Status::Ok } else { Status::Advise },
            value: format!("{} ({} on {})", m.fstype, m.source, m.point.display()),
            recommended: RECOMMENDED.to_string(),
            fix: FIX.to_string(),
        }
    }

    pub fn o_direct_check(&self) -> Check {
        const NAME: &str = "O_DIRECT";
        const RECOMMENDED: &str = "supported: rill appends segments with O_DIRECT";
        const FIX: &str = "put --data-dir on a filesystem that takes O_DIRECT (xfs, ext4)";
        let (status, value) = match &self.probe {
            Probe::Supported => (
                Status::Ok,
                format!(
                    "supported (wrote and removed a {PROBE_BYTES}-byte aligned block in {})",
                    self.probed.display()
                ),
            ),
            Probe::Refused(e) => (
                Status::Bad,
                format!("REFUSED by the filesystem ({e}): rill cannot write its log here"),
            ),
            Probe::CannotCreate(e) => {
                let why = format!("cannot create a file in {}: {e}", self.probed.display());
                return Check::unknown(NAME, why, RECOMMENDED, FIX);
            }
            Probe::NotADirectory => {
                let why = format!("{} is not a directory", self.probed.display());
                return Check::unknown(NAME, why, RECOMMENDED, FIX);
            }
        };
        Check::new(NAME, status, value, RECOMMENDED, FIX)
    }
}

/// `path` if it exists, else its nearest existing ancestor (`.` for a relative path none of
/// whose ancestors exist).
fn nearest_existing(path: &Path) -> PathBuf {
    let mut p = path;
    loop {
        if p.exists() {
            return p.to_path_buf();
        }
        match p.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => p = parent,
            _ => return PathBuf::from(if path.is_absolute() { "/" } else { "." }),
        }
    }
}

/// Writes one aligned block with O_DIRECT into a new temp file in `dir`, then removes it.
fn probe_o_direct(dir: &Path) -> Probe {
    let file = dir.join(format!(".rill-tune-probe-{}", std::process::id()));
    let opened = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(libc::O_DIRECT)
        .open(&file);
    let mut f = match opened {
        Ok(f) => f,
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => return Probe::Refused(e),
        Err(e) => return Probe::CannotCreate(e),
    };
    // An aligned block inside a buffer twice its size, without an allocator of our own.
    let buf = vec![0x5au8; 2 * PROBE_BYTES];
    let at = buf.as_ptr().align_offset(PROBE_BYTES);
    let written = f.write_all(&buf[at..at + PROBE_BYTES]);
    drop(f);
    let removed = std::fs::remove_file(&file);
    match (written, removed) {
        (Ok(()), Ok(())) => Probe::Supported,
        (Err(e), _) if e.raw_os_error() == Some(libc::EINVAL) => Probe::Refused(e),
        (Err(e), _) => Probe::CannotCreate(e),
        (Ok(()), Err(e)) => Probe::CannotCreate(std::io::Error::new(
            e.kind(),
            format!("wrote {} but could not remove it: {e}", file.display()),
        )),
    }
}

fn find_mount(path: &Path) -> Result<Mount, String> {
    let abs = std::fs::canonicalize(path)
        .map_err(|e| format!("cannot resolve {}: {e}", path.display()))?;
    let table = read_fact("/proc/self/mountinfo")?;
    mount_of(&parse_mountinfo(&table), &abs)
        .cloned()
        .ok_or_else(|| format!("no mount holds {}", abs.display()))
}

/// The mount holding `abs`: the longest mount point it lies under, the later one of equal
/// points (it shadows the earlier).
pub fn mount_of<'a>(mounts: &'a [Mount], abs: &Path) -> Option<&'a Mount> {
    mounts
        .iter()
        .enumerate()
        .filter(|(_, m)| abs.starts_with(&m.point))
        .max_by_key(|(i, m)| (m.point.components().count(), *i))
        .map(|(_, m)| m)
}

/// Parses /proc/self/mountinfo; malformed lines are skipped.
pub fn parse_mountinfo(text: &str) -> Vec<Mount> {
    text.lines().filter_map(parse_mountinfo_line).collect()
}

// `36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue`
fn parse_mountinfo_line(line: &str) -> Option<Mount> {
    let (left, right) = line.split_once(" - ")?;
    let left: Vec<&str> = left.split_whitespace().collect();
    let (major, minor) = left.get(2)?.split_once(':')?;
    let mut right = right.split_whitespace();
    Some(Mount {
        point: PathBuf::from(unescape(left.get(4)?)),
        fstype: right.next()?.to_string(),
        source: unescape(right.next()?),
        dev: (major.parse().ok()?, minor.parse().ok()?),
    })
}

/// The kernel writes space, tab, newline and backslash in paths as octal escapes (`\040`).
fn unescape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find('\\') {
        out.push_str(&rest[..i]);
        let code = rest
            .get(i + 1..i + 4)
            .and_then(|o| u8::from_str_radix(o, 8).ok());
        match code {
            Some(c) => {
                out.push(char::from(c));
                rest = &rest[i + 4..];
            }
            None => {
                out.push('\\');
                rest = &rest[i + 1..];
            }
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "\
22 27 0:21 / /proc rw,relatime - proc proc rw
27 1 254:0 / / rw,relatime - ext4 /dev/vda rw,discard
31 27 259:2 / /var/lib/rill\\040data rw,noatime shared:5 - xfs /dev/nvme0n1p2 rw
32 27 0:30 / /tmp rw - tmpfs tmpfs rw
33 27 0:31 / /tmp rw - tmpfs other rw
garbage line
";

    #[test]
    fn the_longest_latest_mount_point_holds_a_path() {
        let mounts = parse_mountinfo(SAMPLE);
        assert_eq!(mounts.len(), 5);
        let m = mount_of(&mounts, Path::new("/var/lib/rill data/topic-0")).unwrap();
        assert_eq!(
            (m.fstype.as_str(), m.source.as_str(), m.dev),
            ("xfs", "/dev/nvme0n1p2", (259, 2))
        );
        assert_eq!(m.point, Path::new("/var/lib/rill data"));
        assert_eq!(
            mount_of(&mounts, Path::new("/var/lib/rill"))
                .unwrap()
                .fstype,
            "ext4"
        );
        assert_eq!(
            mount_of(&mounts, Path::new("/tmp/x")).unwrap().source,
            "other"
        );
        assert_eq!(mount_of(&mounts, Path::new("/proc")).unwrap().dev, (0, 21));
    }

    #[test]
    fn a_missing_dir_is_checked_at_its_nearest_existing_parent() {
        let tmp = std::env::temp_dir();
        assert_eq!(nearest_existing(&tmp.join("no-such/deeper/still")), tmp);
        assert_eq!(
            nearest_existing(Path::new("no-such-relative/x")),
            Path::new(".")
        );
    }
}
