//! Prometheus's text exposition format, version 0.0.4 (what `Content-Type: text/plain;
//! version=0.0.4` promises): `# HELP` and `# TYPE` once per family, then its samples, label
//! values escaped, histograms as cumulative `_bucket{le=..}` series with `_sum` and `_count`.

use std::fmt::Write;

use super::histogram::HistogramSnapshot;

/// The content type of [`Text`]'s output.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        }
    }
}

/// How a histogram's integer base units become the exported unit: nanoseconds are divided
/// by 1e9 (seconds), bytes by 1. Dividing (not multiplying by 1e-9) keeps bounds such as
/// 50 us printing as `0.00005`, not `0.000050000000000000004`.
#[derive(Clone, Copy, Debug)]
pub struct Unit(pub f64);

pub const SECONDS_FROM_NS: Unit = Unit(1e9);
/// Bytes, counts: exported as they are.
pub const WHOLE: Unit = Unit(1.0);

/// A text exposition being written. Families must be written whole, one after another (the
/// format wants a family's samples together).
#[derive(Default)]
pub struct Text {
    out: String,
}

impl Text {
    pub fn new() -> Text {
        Text::default()
    }

    pub fn finish(self) -> String {
        self.out
    }

    /// Starts a family: its help and type lines.
    pub fn family(&mut self, name: &str, kind: Kind, help: &str) {
        let _ = writeln!(
            self.out,
            "# HELP {name} {}\n# TYPE {name} {}",
            escape_help(help),
            kind.name()
        );
    }

    pub fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: u64) {
        self.out.push_str(name);
        self.labels(labels, None);
        let _ = writeln!(self.out, " {value}");
    }

    /// The series of one histogram: a `_bucket` per bound (cumulative) and +Inf, `_sum` in
    /// the exported unit, `_count`.
    pub fn histogram(
        &mut self,
        name: &str,
        labels: &[(&str, &str)],
        h: &HistogramSnapshot,
        unit: Unit,
    ) {
        for (bound, n) in h.cumulative() {
            let le = match bound {
                Some(b) => format_f64(b as f64 / unit.0),
                None => "+Inf".to_string(),
            };
            let _ = write!(self.out, "{name}_bucket");
            self.labels(labels, Some(&le));
            let _ = writeln!(self.out, " {n}");
        }
        let _ = write!(self.out, "{name}_sum");
        self.labels(labels, None);
        let _ = writeln!(self.out, " {}", format_f64(h.sum as f64 / unit.0));
        let _ = write!(self.out, "{name}_count");
        self.labels(labels, None);
        let _ = writeln!(self.out, " {}", h.count);
    }

    fn labels(&mut self, labels: &[(&str, &str)], le: Option<&str>) {
        if labels.is_empty() && le.is_none() {
            return;
        }
        self.out.push('{');
        let mut first = true;
        for (k, v) in labels.iter().copied().chain(le.map(|le| ("le", le))) {
            if !first {
                self.out.push(',');
            }
            first = false;
            self.out.push_str(k);
            self.out.push_str("=\"");
            escape_label_value(&mut self.out, v);
            self.out.push('"');
        }
        self.out.push('}');
    }
}

/// A float as Prometheus reads it: shortest round-trip decimal, never exponent notation
/// (Rust's `Display`), infinities as `+Inf`/`-Inf`.
fn format_f64(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.into()
    } else {
        format!("{v}")
    }
}

/// Label values escape backslash, double quote and line feed.
fn escape_label_value(out: &mut String, v: &str) {
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

/// Help text escapes backslash and line feed.
fn escape_help(v: &str) -> String {
    v.replace('\\', "\\\\").replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::histogram::Histogram;

    #[test]
    fn counters_and_gauges_with_escaped_labels() {
        let mut t = Text::new();
        t.family(
            "rill_things_total",
            Kind::Counter,
            "Things.\nWith a \\ in help.",
        );
        t.sample(
            "rill_things_total",
            &[("topic", "a\"b\\c\nd"), ("shard", "0")],
            42,
        );
        t.sample("rill_things_total", &[], 7);
        t.family("rill_open", Kind::Gauge, "Open.");
        t.sample("rill_open", &[("listener", "native")], 0);
        assert_eq!(
            t.finish(),
            "# HELP rill_things_total Things.\\nWith a \\\\ in help.\n\
             # TYPE rill_things_total counter\n\
             rill_things_total{topic=\"a\\\"b\\\\c\\nd\",shard=\"0\"} 42\n\
             rill_things_total 7\n\
             # HELP rill_open Open.\n\
             # TYPE rill_open gauge\n\
             rill_open{listener=\"native\"} 0\n"
        );
    }

    #[test]
    fn histograms_are_cumulative_in_seconds() {
        let h = Histogram::new(&[50_000, 1_000_000]);
        h.observe(40_000);
        h.observe(50_000);
        h.observe(2_000_000);
        let mut t = Text::new();
        t.family("rill_x_seconds", Kind::Histogram, "X.");
        t.histogram(
            "rill_x_seconds",
            &[("shard", "1")],
            &h.snapshot(),
            SECONDS_FROM_NS,
        );
        assert_eq!(
            t.finish(),
            "# HELP rill_x_seconds X.\n\
             # TYPE rill_x_seconds histogram\n\
             rill_x_seconds_bucket{shard=\"1\",le=\"0.00005\"} 2\n\
             rill_x_seconds_bucket{shard=\"1\",le=\"0.001\"} 2\n\
             rill_x_seconds_bucket{shard=\"1\",le=\"+Inf\"} 3\n\
             rill_x_seconds_sum{shard=\"1\"} 0.00209\n\
             rill_x_seconds_count{shard=\"1\"} 3\n"
        );
    }

    #[test]
    fn every_latency_bound_prints_as_a_short_decimal() {
        let h = Histogram::latency().snapshot();
        let mut t = Text::new();
        t.histogram("h", &[], &h, SECONDS_FROM_NS);
        let text = t.finish();
        for le in [
            "0.00005", "0.00025", "0.0025", "0.025", "0.25", "2.5", "30", "+Inf",
        ] {
            assert!(text.contains(&format!("le=\"{le}\"")), "{le} in {text}");
        }
        assert!(!text.contains("e-"), "no exponent notation: {text}");
    }

    #[test]
    fn byte_histograms_keep_whole_numbers() {
        let h = Histogram::bytes();
        h.observe(5000);
        let mut t = Text::new();
        t.histogram("b", &[], &h.snapshot(), WHOLE);
        let text = t.finish();
        assert!(text.contains("b_bucket{le=\"4096\"} 0\n"), "{text}");
        assert!(text.contains("b_bucket{le=\"16384\"} 1\n"), "{text}");
        assert!(text.contains("b_sum 5000\n"), "{text}");
    }
}
