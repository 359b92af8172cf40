//! NIC interrupt affinity: a thread-per-core broker wants each network queue's interrupts on
//! its own core, spread over the cores, not every packet interrupting one core.

use std::collections::BTreeSet;
use std::path::Path;

use super::{read_fact, Check, Status};

const NAME: &str = "NIC IRQ affinity";
const RECOMMENDED: &str = "each NIC queue's IRQ on its own core, spread over all cores";
const FIX: &str = "sudo systemctl start irqbalance, or pin each queue: \
                   echo CPU | sudo tee /proc/irq/IRQ/smp_affinity_list";

/// One interrupt line of /proc/interrupts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IrqLine {
    pub irq: u32,
    /// Interrupts served, per CPU column.
    pub per_cpu: Vec<u64>,
    /// The rest of the line: controller, trigger and the device's names.
    pub name: String,
}

impl IrqLine {
    /// The CPUs that have served this interrupt.
    pub fn served_by(&self) -> BTreeSet<usize> {
        (0..self.per_cpu.len())
            .filter(|&c| self.per_cpu[c] > 0)
            .collect()
    }
}

/// Parses /proc/interrupts: the header names the CPU columns; lines with a numeric IRQ are
/// kept, the summary lines (NMI, LOC, ...) skipped.
pub fn parse_interrupts(text: &str) -> Vec<IrqLine> {
    let mut lines = text.lines();
    let cpus = lines.next().map_or(0, |h| h.split_whitespace().count());
    lines
        .filter_map(|line| {
            let (irq, rest) = line.trim_start().split_once(':')?;
            let irq = irq.parse().ok()?;
            let words: Vec<&str> = rest.split_whitespace().collect();
            let counts = words.len().min(cpus);
            let per_cpu = words[..counts]
                .iter()
                .map(|w| w.parse().ok())
                .collect::<Option<Vec<u64>>>()?;
            Some(IrqLine {
                irq,
                per_cpu,
                name: words[counts..].join(" "),
            })
        })
        .collect()
}

/// The interrupts whose device names contain one of `names` as a whole word or a prefix
/// before `-`, `_` or `@` (`eth0-TxRx-0`, `virtio2-input.0`, `mlx5_comp0@pci:0000:...`).
pub fn nic_irqs<'a>(lines: &'a [IrqLine], names: &[String]) -> Vec<&'a IrqLine> {
    lines
        .iter()
        .filter(|l| {
            l.name.split_whitespace().any(|word| {
                names.iter().any(|n| {
                    word.strip_prefix(n.as_str())
                        .is_some_and(|r| r.is_empty() || r.starts_with(['-', '_', '@']))
                })
            })
        })
        .collect()
}

pub fn check() -> Check {
    let text = match read_fact("/proc/interrupts") {
        Ok(t) => t,
        Err(e) => return Check::unknown(NAME, e, RECOMMENDED, FIX),
    };
    let lines = parse_interrupts(&text);
    let cpus = text
        .lines()
        .next()
        .map_or(0, |h| h.split_whitespace().count());
    let Ok(ifaces) = std::fs::read_dir("/sys/class/net") else {
        return Check::unknown(NAME, "cannot list /sys/class/net", RECOMMENDED, FIX);
    };
    let mut parts = Vec::new();
    let mut single_core = false;
    let mut found_any = false;
    let mut names_seen = Vec::new();
    for iface in ifaces.flatten() {
        let name = iface.file_name().to_string_lossy().into_owned();
        // Only NICs with a device behind them: not lo, bridges, tunnels, veths.
        let Ok(device) = std::fs::canonicalize(iface.path().join("device")) else {
            continue;
        };
        names_seen.push(name.clone());
        let mut names = vec![name.clone()];
        if let Some(d) = device.file_name() {
            names.push(d.to_string_lossy().into_owned());
        }
        let irqs = nic_irqs(&lines, &names);
        let busy: Vec<&IrqLine> = irqs
            .into_iter()
            .filter(|l| !l.served_by().is_empty())
            .collect();
        if busy.is_empty() {
            parts.push(format!("{name}: no IRQs with traffic found"));
            continue;
        }
        found_any = true;
        let served: BTreeSet<usize> = busy.iter().flat_map(|l| l.served_by()).collect();
        single_core |= cpus > 1 && served.len() == 1;
        let affinity: Vec<String> = busy
            .iter()
            .map(|l| {
                let list = read_fact(
                    Path::new("/proc/irq")
                        .join(l.irq.to_string())
                        .join("smp_affinity_list"),
                )
                .unwrap_or_else(|_| "?".to_string());
                format!("{}->{list}", l.irq)
            })
            .collect();
        parts.push(format!(
            "{name}: {} IRQs served by CPUs {} of {cpus} (affinity {})",
            busy.len(),
            served
                .iter()
                .map(usize::to_string)
                .collect::<Vec<_>>()
                .join(","),
            affinity.join(" ")
        ));
    }
    if names_seen.is_empty() {
        return Check::unknown(NAME, "no physical NIC in /sys/class/net", RECOMMENDED, FIX);
    }
    if !found_any {
        return Check::unknown(NAME, parts.join("; "), RECOMMENDED, FIX);
    }
    Check {
        name: NAME,
        status: if single_core {
            Status::Advise
        } else {
            Status::Ok
        },
        value: parts.join("; "),
        recommended: RECOMMENDED.to_string(),
        fix: FIX.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "           CPU0       CPU1       \n\
 26:          0         14  IO-APIC   4-edge      ttyS0
 37:          0          0 PCI-MSIX-0000:00:03.0   0-edge      virtio2-config
 38:          0       1740 PCI-MSIX-0000:00:03.0   1-edge      virtio2-input.0
 39:       1327          0 PCI-MSIX-0000:00:03.0   2-edge      virtio2-output.0
 44:        500        600 PCI-MSI 524288-edge      eth10-TxRx-0
 45:          7          0 PCI-MSI 524289-edge      eth1-TxRx-0
NMI:          0          0   Non-maskable interrupts
ERR:          0
";

    #[test]
    fn interrupt_lines_give_counts_per_cpu_and_names() {
        let lines = parse_interrupts(SAMPLE);
        assert_eq!(lines.len(), 6);
        assert_eq!(lines[2].irq, 38);
        assert_eq!(lines[2].per_cpu, vec![0, 1740]);
        assert_eq!(
            lines[2].name,
            "PCI-MSIX-0000:00:03.0 1-edge virtio2-input.0"
        );
        assert_eq!(lines[2].served_by(), BTreeSet::from([1]));
        assert_eq!(lines[4].served_by(), BTreeSet::from([0, 1]));
        assert!(lines[1].served_by().is_empty());
    }

    #[test]
    fn a_nic_owns_the_irqs_named_after_it_or_its_device() {
        let lines = parse_interrupts(SAMPLE);
        let irqs = |names: &[&str]| -> Vec<u32> {
            let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
            nic_irqs(&lines, &names).iter().map(|l| l.irq).collect()
        };
        assert_eq!(irqs(&["eth0", "virtio2"]), vec![37, 38, 39]);
        // eth1 is not eth10.
        assert_eq!(irqs(&["eth1"]), vec![45]);
        assert_eq!(irqs(&["wlan0"]), Vec::<u32>::new());
    }

    #[test]
    fn random_tables_parse_back_to_what_was_written() {
        let mut rng = crate::batch::test_support::Rng(0x7e57_1a6e);
        for _ in 0..500 {
            let cpus = 1 + rng.below(8) as usize;
            let pad =
                |rng: &mut crate::batch::test_support::Rng| " ".repeat(1 + rng.below(6) as usize);
            let mut text: String = (0..cpus)
                .map(|c| format!("{}CPU{c}", pad(&mut rng)))
                .collect();
            text.push('\n');
            let mut want = Vec::new();
            for i in 0..rng.below(20) {
                let irq = (i * 7 + rng.below(7)) as u32;
                let per_cpu: Vec<u64> = (0..cpus)
                    .map(|_| rng.below(3).pow(3) * rng.below(1 << 20))
                    .collect();
                let name = [
                    "IO-APIC 4-edge ttyS0",
                    "PCI-MSI 524288-edge eth0-TxRx-0",
                    "x",
                ][rng.below(3) as usize]
                    .to_string();
                text.push_str(&format!("{}{irq}:", pad(&mut rng)));
                for n in &per_cpu {
                    text.push_str(&format!("{}{n}", pad(&mut rng)));
                }
                text.push_str(&format!("{}{name}\n", pad(&mut rng)));
                if rng.below(3) == 0 {
                    text.push_str("LOC:   12   34   Local timer interrupts\nERR: 0\n");
                }
                want.push(IrqLine { irq, per_cpu, name });
            }
            assert_eq!(parse_interrupts(&text), want, "{text}");
        }
    }

    #[test]
    fn arbitrary_text_never_panics_the_parsers() {
        let mut rng = crate::batch::test_support::Rng(0xbad_1e77e5);
        let pieces = [
            " ",
            "  ",
            ":",
            "-",
            " - ",
            "[",
            "]",
            "\\",
            "\\040",
            "\\7",
            "0",
            "12",
            "4294967296",
            "CPU0",
            "é",
            "\n",
            "eth0",
            "a:b",
            "/",
            "ext4",
        ];
        for _ in 0..5000 {
            let text: String = (0..rng.below(30))
                .map(|_| pieces[rng.below(pieces.len() as u64) as usize])
                .collect();
            let cpus = text
                .lines()
                .next()
                .map_or(0, |h| h.split_whitespace().count());
            for l in parse_interrupts(&text) {
                assert!(l.per_cpu.len() <= cpus, "{text:?}");
            }
            let _ = super::super::data_dir::parse_mountinfo(&text);
            let _ = super::super::bracketed_choice(&text);
            let _ = super::super::hugepages::judge(&text);
            let _ = super::super::disk_scheduler::judge("sda", &text, None);
        }
    }
}
