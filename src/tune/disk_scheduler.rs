//! The I/O scheduler of the data dir's disk: on SSDs and NVMe the `none` scheduler adds no
//! queueing of its own; spinning disks want `mq-deadline` to bound a request's wait.

use std::path::{Path, PathBuf};

use super::data_dir::Mount;
use super::{bracketed_choice, read_fact, Check, Status};

const NAME: &str = "disk scheduler";
const RECOMMENDED: &str = "none on SSD/NVMe, mq-deadline on spinning disks";
const FIX: &str = "echo none | sudo tee /sys/block/DEVICE/queue/scheduler";

pub fn check(mount: &Result<Mount, String>) -> Check {
    let m = match mount {
        Ok(m) => m,
        Err(e) => return Check::unknown(NAME, e, RECOMMENDED, FIX),
    };
    if m.dev.0 == 0 {
        let why = format!("{} ({}) has no block device", m.point.display(), m.fstype);
        return Check::unknown(NAME, why, RECOMMENDED, FIX);
    }
    let Some(queue) = queue_dir(m.dev) else {
        let why = format!("no /sys queue for device {}:{}", m.dev.0, m.dev.1);
        return Check::unknown(NAME, why, RECOMMENDED, FIX);
    };
    let device = queue
        .parent()
        .and_then(Path::file_name)
        .map_or("DEVICE".into(), |d| d.to_string_lossy().into_owned());
    let scheduler = match read_fact(queue.join("scheduler")) {
        Ok(s) => s,
        Err(e) => return Check::unknown(NAME, e, RECOMMENDED, &FIX.replace("DEVICE", &device)),
    };
    let rotational = read_fact(queue.join("rotational")).ok().map(|r| r == "1");
    judge(&device, &scheduler, rotational)
}

/// The queue directory of a block device or, for a partition, of its disk.
fn queue_dir(dev: (u32, u32)) -> Option<PathBuf> {
    let sys = std::fs::canonicalize(format!("/sys/dev/block/{}:{}", dev.0, dev.1)).ok()?;
    [sys.join("queue"), sys.parent()?.join("queue")]
        .into_iter()
        .find(|q| q.is_dir())
}

/// Judges a disk's `scheduler` file; `rotational` is None when unknown (then SSD is assumed).
pub fn judge(device: &str, scheduler: &str, rotational: Option<bool>) -> Check {
    let Some(selected) = bracketed_choice(scheduler).or(match scheduler.trim() {
        // A device with one choice (e.g. `none` on some virtual disks) prints it bare.
        s if !s.is_empty() && !s.contains(' ') => Some(s),
        _ => None,
    }) else {
        return Check::unknown(
            NAME,
            format!("no selected scheduler in {scheduler:?}"),
            RECOMMENDED,
            FIX,
        );
    };
    let spinning = rotational == Some(true);
    let want = if spinning { "mq-deadline" } else { "none" };
    let kind = match rotational {
        Some(true) => "rotational",
        Some(false) => "non-rotational",
        None => "rotational unknown",
    };
    Check {
        name: NAME,
        status: if selected == want {
            Status::Ok
        } else {
            Status::Advise
        },
        value: format!("{selected} on {device} ({kind})"),
        recommended: RECOMMENDED.to_string(),
        fix: format!(
            "echo {want} | sudo tee /sys/block/{device}/queue/scheduler \
             (persist with a udev rule setting ATTR{{queue/scheduler}})"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_selected_scheduler_is_judged_by_disk_kind() {
        let c = judge("nvme0n1", "[none] mq-deadline kyber bfq\n", Some(false));
        assert_eq!(
            (c.status, c.value.as_str()),
            (Status::Ok, "none on nvme0n1 (non-rotational)")
        );
        let c = judge("sda", "none [mq-deadline] kyber bfq", Some(false));
        assert_eq!(c.status, Status::Advise);
        assert!(c.value.starts_with("mq-deadline on sda"), "{}", c.value);
        let c = judge("sdb", "none [mq-deadline] kyber bfq", Some(true));
        assert_eq!(c.status, Status::Ok);
        assert!(
            c.fix
                .starts_with("echo mq-deadline | sudo tee /sys/block/sdb/"),
            "{}",
            c.fix
        );
        assert_eq!(judge("vda", "none", None).status, Status::Ok);
        assert_eq!(judge("vda", "", None).status, Status::Unknown);
    }
}
