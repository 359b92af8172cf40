//! Transparent huge pages: `always` lets khugepaged compact and collapse pages behind the
//! broker's back, stalls that show in the tail; `madvise` (or `never`) keeps them opt-in.

use super::{bracketed_choice, read_fact, Check, Status};

const NAME: &str = "transparent hugepages";
const PATH: &str = "/sys/kernel/mm/transparent_hugepage/enabled";
const RECOMMENDED: &str = "madvise (or never): no background compaction stalls";
const FIX: &str = "echo madvise | sudo tee /sys/kernel/mm/transparent_hugepage/enabled \
                   (persist: transparent_hugepage=madvise on the kernel command line)";

pub fn check() -> Check {
    match read_fact(PATH) {
        Ok(text) => judge(&text),
        Err(e) => Check::unknown(NAME, e, RECOMMENDED, FIX),
    }
}

/// Judges the content of the `enabled` file.
pub fn judge(text: &str) -> Check {
    let Some(mode) = bracketed_choice(text) else {
        return Check::unknown(
            NAME,
            format!("no selected mode in {text:?}"),
            RECOMMENDED,
            FIX,
        );
    };
    Check {
        name: NAME,
        status: if mode == "always" {
            Status::Advise
        } else {
            Status::Ok
        },
        value: mode.to_string(),
        recommended: RECOMMENDED.to_string(),
        fix: FIX.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn madvise_and_never_are_fine_always_is_advised_against() {
        let c = judge("always [madvise] never\n");
        assert_eq!((c.status, c.value.as_str()), (Status::Ok, "madvise"));
        let c = judge("always madvise [never]");
        assert_eq!((c.status, c.value.as_str()), (Status::Ok, "never"));
        let c = judge("[always] madvise never");
        assert_eq!((c.status, c.value.as_str()), (Status::Advise, "always"));
        assert_eq!(judge("garbage").status, Status::Unknown);
    }
}
