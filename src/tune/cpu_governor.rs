//! The CPU frequency governor: anything but `performance` lets a core clock down between
//! bursts and pay the ramp-up on the next request.

use std::collections::BTreeMap;

use super::{read_fact, Check, Status};

const NAME: &str = "cpu governor";
const RECOMMENDED: &str = "performance on every core";
const FIX: &str = "sudo cpupower frequency-set -g performance \
                   (or: echo performance | sudo tee /sys/devices/system/cpu/cpu*/cpufreq/scaling_governor)";

pub fn check() -> Check {
    let cpus = match std::fs::read_dir("/sys/devices/system/cpu") {
        Ok(d) => d,
        Err(e) => {
            return Check::unknown(
                NAME,
                format!("cannot list /sys/devices/system/cpu: {e}"),
                RECOMMENDED,
                FIX,
            )
        }
    };
    let mut governors = Vec::new();
    for entry in cpus.flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let is_cpu = name
            .strip_prefix("cpu")
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
        if is_cpu {
            if let Ok(g) = read_fact(entry.path().join("cpufreq/scaling_governor")) {
                governors.push(g);
            }
        }
    }
    judge(&governors)
}

/// Judges the governors of the cores that have one.
pub fn judge(governors: &[String]) -> Check {
    if governors.is_empty() {
        return Check::unknown(
            NAME,
            "no cpufreq in /sys: typical in VMs and containers",
            RECOMMENDED,
            FIX,
        );
    }
    let all_performance = governors.iter().all(|g| g == "performance");
    Check {
        name: NAME,
        status: if all_performance {
            Status::Ok
        } else {
            Status::Advise
        },
        value: summarise(governors),
        recommended: RECOMMENDED.to_string(),
        fix: FIX.to_string(),
    }
}

/// `performance x2, powersave x1`, by name.
pub fn summarise(governors: &[String]) -> String {
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for g in governors {
        *counts.entry(g.as_str()).or_default() += 1;
    }
    counts
        .iter()
        .map(|(g, n)| format!("{g} x{n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(gs: &[&str]) -> Vec<String> {
        gs.iter().map(|g| g.to_string()).collect()
    }

    #[test]
    fn governor_list_is_counted_and_judged() {
        let c = judge(&list(&["powersave", "performance", "powersave"]));
        assert_eq!(c.value, "performance x1, powersave x2");
        assert_eq!(c.status, Status::Advise);
        let c = judge(&list(&["performance", "performance"]));
        assert_eq!(c.value, "performance x2");
        assert_eq!(c.status, Status::Ok);
        let c = judge(&[]);
        assert_eq!(c.status, Status::Unknown);
        assert!(c.value.starts_with("unknown (no cpufreq"), "{}", c.value);
    }
}
