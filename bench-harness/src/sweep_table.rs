//! The linger/batch sweep as a markdown table, for RESULTS.md next to the `plot::sweep_svg`
//! chart: the chart shows the shape, the table the numbers.

use crate::plot::SweepPoint;

const HEADER: [&str; 7] = [
    "linger ms",
    "batch bytes",
    "msgs/s",
    "MB/s",
    "p50 us",
    "p99 us",
    "p99.9 us",
];

/// A markdown table of `points`, sorted by linger then batch size, one row per sweep cell.
/// MB/s is msgs/s times `message_bytes` in 10^6 bytes, as in the run reports. Columns are
/// padded so the table also reads well as plain text; non-finite values show as "-".
pub fn sweep_table_markdown(points: &[SweepPoint], message_bytes: usize) -> String {
    let mut sorted: Vec<&SweepPoint> = points.iter().collect();
    // Stable, so repeated cells keep their run order.
    sorted.sort_by_key(|p| (p.linger_ms, p.batch_bytes));

    let rows: Vec<[String; 7]> = sorted
        .iter()
        .map(|p| {
            [
                p.linger_ms.to_string(),
                p.batch_bytes.to_string(),
                num(p.msgs_per_sec, 0),
                num(p.msgs_per_sec * message_bytes as f64 / 1e6, 1),
                num(p.p50_us, 0),
                num(p.p99_us, 0),
                num(p.p999_us, 0),
            ]
        })
        .collect();

    let mut widths = HEADER.map(str::len);
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.len());
        }
    }

    let mut out = String::new();
    line(&mut out, HEADER.iter().map(|h| h.to_string()), &widths);
    // All columns are numbers: right-aligned.
    line(
        &mut out,
        widths.iter().map(|&w| format!("{}:", "-".repeat(w - 1))),
        &widths,
    );
    for row in &rows {
        line(&mut out, row.iter().cloned(), &widths);
    }
    out
}

/// One table row, each cell right-aligned to its column width.
fn line(out: &mut String, cells: impl Iterator<Item = String>, widths: &[usize; 7]) {
    out.push('|');
    for (cell, &w) in cells.zip(widths) {
        out.push_str(&format!(" {cell:>w$} |"));
    }
    out.push('\n');
}

fn num(v: f64, decimals: usize) -> String {
    if v.is_finite() {
        format!("{v:.decimals$}")
    } else {
        "-".to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(linger_ms: u64, batch_bytes: usize, rate: f64) -> SweepPoint {
        SweepPoint {
            linger_ms,
            batch_bytes,
            msgs_per_sec: rate,
            p50_us: 210.4,
            p99_us: 1_500.6,
            p999_us: 9_000.0,
        }
    }

    #[test]
    fn sorted_rows_and_units() {
        let pts = [
            point(5, 1 << 20, 400_000.0),
            point(0, 1 << 20, 150_000.0),
            point(5, 16 << 10, 300_000.0),
            point(0, 16 << 10, 120_000.0),
        ];
        let t = sweep_table_markdown(&pts, 1024);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 2 + pts.len());
        let cells = |l: &str| -> Vec<String> {
            l.trim_matches('|')
                .split('|')
                .map(|c| c.trim().to_string())
                .collect()
        };
        assert_eq!(cells(lines[0]), HEADER.map(String::from).to_vec());
        assert!(cells(lines[1]).iter().all(|c| c.ends_with(':')));
        let order: Vec<(String, String)> = lines[2..]
            .iter()
            .map(|l| {
                let c = cells(l);
                (c[0].clone(), c[1].clone())
            })
            .collect();
        assert_eq!(
            order,
            [
                ("0", "16384"),
                ("0", "1048576"),
                ("5", "16384"),
                ("5", "1048576")
            ]
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .to_vec()
        );
        // 120k msgs/s of 1 KiB = 122.88 MB/s.
        assert_eq!(
            cells(lines[2]),
            ["0", "16384", "120000", "122.9", "210", "1501", "9000"]
        );
        // Every line is the same width: padded for plain-text reading.
        assert!(lines.iter().all(|l| l.len() == lines[0].len()));
    }

    #[test]
    fn empty_and_non_finite() {
        let t = sweep_table_markdown(&[], 100);
        assert_eq!(t.lines().count(), 2);
        let mut p = point(1, 1, f64::NAN);
        p.p99_us = f64::INFINITY;
        let t = sweep_table_markdown(&[p], 100);
        let row = t.lines().nth(2).expect("row");
        assert!(!row.contains("NaN") && !row.contains("inf"), "{row}");
        assert_eq!(row.matches(" - ").count(), 3, "{row}");
    }
}
