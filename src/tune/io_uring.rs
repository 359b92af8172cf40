//! io_uring availability: rill's runtime is io_uring only. Asked of the kernel directly (one
//! io_uring_setup, closed at once), because a sysctl, a seccomp profile or a kernel built
//! without it can each refuse it.

use super::{read_fact, Check, Status};

const NAME: &str = "io_uring";
const SYSCTL: &str = "/proc/sys/kernel/io_uring_disabled";
const RECOMMENDED: &str = "available (kernel.io_uring_disabled=0)";
const FIX: &str = "sudo sysctl -w kernel.io_uring_disabled=0 (persist in /etc/sysctl.d/); in a \
                   container, a seccomp profile that allows io_uring_setup";

pub fn check() -> Check {
    let sysctl = match read_fact(SYSCTL) {
        Ok(v) => format!("io_uring_disabled={v}"),
        Err(_) => "no io_uring_disabled sysctl".to_string(),
    };
    judge(probe(), &sysctl)
}

/// Sets up a 2-entry ring and closes it.
fn probe() -> std::io::Result<()> {
    // struct io_uring_params is 120 bytes; zeroed asks for defaults.
    let mut params = [0u64; 15];
    // SAFETY: io_uring_setup reads and writes only the params struct we pass, 120 bytes
    // that live across the call.
    let fd = unsafe { libc::syscall(libc::SYS_io_uring_setup, 2u32, params.as_mut_ptr()) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: fd is the ring descriptor just returned to us and closed once.
    unsafe { libc::close(fd as libc::c_int) };
    Ok(())
}

/// Judges the probe's outcome; `sysctl` says what the sysctl reads.
pub fn judge(probe: std::io::Result<()>, sysctl: &str) -> Check {
    let (status, value) = match probe {
        Ok(()) => (Status::Ok, format!("available ({sysctl})")),
        Err(e) => {
            let why = match e.raw_os_error() {
                Some(libc::ENOSYS) => "the kernel has no io_uring",
                Some(libc::EPERM) => "not permitted: the sysctl or a seccomp profile refuses it",
                _ => "refused",
            };
            (
                Status::Bad,
                format!("UNAVAILABLE: {why} ({e}; {sysctl}): rill cannot run"),
            )
        }
    };
    Check::new(NAME, status, value, RECOMMENDED, FIX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_ring_is_bad() {
        assert_eq!(judge(Ok(()), "io_uring_disabled=0").status, Status::Ok);
        let c = judge(
            Err(std::io::Error::from_raw_os_error(libc::EPERM)),
            "io_uring_disabled=2",
        );
        assert_eq!(c.status, Status::Bad);
        assert!(c.value.contains("io_uring_disabled=2"), "{}", c.value);
    }
}
