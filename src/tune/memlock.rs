//! The locked-memory limit: glommio refuses an executor below 512 KiB (rill-shards'
//! `MEMLOCK_PER_EXECUTOR`) and, as non-root, registers each shard's `--io-memory-bytes`
//! against the limit too (the broker falls back to unregistered buffers when that does not
//! fit). The broker raises its soft limit to the hard one itself, so the hard limit decides.

use super::{Check, Status};

const NAME: &str = "locked memory";
const PER_SHARD_KIB: u64 = 512;
const FIX: &str = "ulimit -l unlimited (shell); LimitMEMLOCK=infinity (systemd unit); \
                   `* - memlock unlimited` in /etc/security/limits.conf (login sessions)";

/// A limit in KiB; `None` is unlimited.
type Kib = Option<u64>;

pub fn check() -> Check {
    let shards = std::thread::available_parallelism().map_or(1, |n| n.get() as u64);
    let (soft, hard) = match rill_shards::memlock::current_memlock() {
        Ok(limits) => limits,
        Err(e) => return Check::unknown(NAME, e, &recommended(shards), FIX),
    };
    let kib = |v: u64| (v != u64::MAX).then_some(v / 1024);
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    judge(kib(soft), kib(hard), shards, root)
}

fn recommended(shards: u64) -> String {
    format!(
        "unlimited (at least {PER_SHARD_KIB} KiB per shard: {} KiB for {shards} shards; \
         as non-root, plus --io-memory-bytes per shard for registered I/O buffers)",
        PER_SHARD_KIB * shards
    )
}

/// Judges the soft and hard limits for a broker of `shards` shards; root may raise the hard
/// limit itself.
pub fn judge(soft: Kib, hard: Kib, shards: u64, root: bool) -> Check {
    let show = |k: Kib| k.map_or("unlimited".to_string(), |k| format!("{k} KiB"));
    let need = PER_SHARD_KIB * shards;
    let enough = |k: Kib| k.is_none_or(|k| k >= need);
    let status = if enough(hard) || root {
        Status::Ok
    } else if hard.is_none_or(|k| k >= PER_SHARD_KIB) {
        Status::Advise
    } else {
        Status::Bad
    };
    let mut value = format!("soft {}, hard {}", show(soft), show(hard));
    if status == Status::Ok && !enough(soft) {
        value.push_str(" (the broker raises its soft limit itself)");
    }
    if status == Status::Advise {
        value.push_str(&format!(" (fewer than {shards} shards fit)"));
    }
    if status == Status::Bad {
        value.push_str(" (not even one shard fits)");
    }
    Check {
        name: NAME,
        status,
        value,
        recommended: recommended(shards),
        fix: FIX.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hard_limit_decides() {
        assert_eq!(judge(None, None, 4, false).status, Status::Ok);
        let c = judge(Some(64), Some(8192), 2, false);
        assert_eq!(c.status, Status::Ok);
        assert!(c.value.contains("raises its soft limit"), "{}", c.value);
        assert_eq!(judge(Some(64), Some(1024), 4, false).status, Status::Advise);
        assert_eq!(judge(Some(64), Some(64), 1, false).status, Status::Bad);
        assert_eq!(judge(Some(64), Some(64), 1, true).status, Status::Ok);
    }
}
