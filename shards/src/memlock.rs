//! RLIMIT_MEMLOCK: glommio refuses to start an executor below 512 KiB of locked memory and, as
//! non-root, registers each executor's `io_memory` against the same limit.

use crate::ShardError;

// `rlim_t` is `u64` on every Linux target, which glommio (io_uring) requires anyway.

/// Raises the soft RLIMIT_MEMLOCK (and the hard one too, if the process is allowed to) to at
/// least `min_bytes`. Returns the soft limit in force afterwards (`u64::MAX` for unlimited).
///
/// A limit that is already high enough is left alone. When the hard limit is below `min_bytes`
/// and the process may not raise it (no CAP_SYS_RESOURCE), returns [`ShardError::Memlock`],
/// whose message tells the operator what to run.
pub fn raise_memlock(min_bytes: u64) -> Result<u64, ShardError> {
    let (soft, hard) = get()?;
    if is_enough(soft, min_bytes) {
        return Ok(to_u64(soft));
    }
    let want: libc::rlim_t = min_bytes;
    let new_hard = if is_enough(hard, min_bytes) {
        hard
    } else {
        want
    };
    if set(want, new_hard).is_err() {
        return Err(ShardError::Memlock {
            current_bytes: to_u64(soft),
            needed_bytes: min_bytes,
        });
    }
    let (soft, _) = get()?;
    if is_enough(soft, min_bytes) {
        Ok(to_u64(soft))
    } else {
        Err(ShardError::Memlock {
            current_bytes: to_u64(soft),
            needed_bytes: min_bytes,
        })
    }
}

/// The current (soft, hard) RLIMIT_MEMLOCK in bytes, `u64::MAX` meaning unlimited.
pub fn current_memlock() -> Result<(u64, u64), ShardError> {
    let (soft, hard) = get()?;
    Ok((to_u64(soft), to_u64(hard)))
}

fn is_enough(limit: libc::rlim_t, min_bytes: u64) -> bool {
    limit == libc::RLIM_INFINITY || limit >= min_bytes
}

fn to_u64(limit: libc::rlim_t) -> u64 {
    if limit == libc::RLIM_INFINITY {
        u64::MAX
    } else {
        limit
    }
}

fn get() -> Result<(libc::rlim_t, libc::rlim_t), ShardError> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit only writes into the struct we pass.
    let rc = unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut lim) };
    if rc != 0 {
        return Err(ShardError::Spawn(format!(
            "getrlimit(RLIMIT_MEMLOCK): {}",
            std::io::Error::last_os_error()
        )));
    }
    Ok((lim.rlim_cur, lim.rlim_max))
}

fn set(soft: libc::rlim_t, hard: libc::rlim_t) -> std::io::Result<()> {
    let lim = libc::rlimit {
        rlim_cur: soft,
        rlim_max: hard,
    };
    // SAFETY: setrlimit only reads the struct we pass.
    let rc = unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &lim) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raising_to_a_small_value_succeeds() {
        let got = raise_memlock(64 * 1024).unwrap();
        assert!(got >= 64 * 1024);
        let (soft, _) = current_memlock().unwrap();
        assert!(soft >= 64 * 1024);
    }

    #[test]
    fn error_message_says_what_to_run() {
        let e = ShardError::Memlock {
            current_bytes: 64 * 1024,
            needed_bytes: 1024 * 1024,
        };
        assert_eq!(
            e.to_string(),
            "locked-memory limit is 64 KiB, rill needs at least 1024 KiB: run `ulimit -l \
             unlimited` (or set LimitMEMLOCK=infinity in the systemd unit) and start again"
        );
    }
}
