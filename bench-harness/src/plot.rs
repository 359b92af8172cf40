//! SVG charts of benchmark results: the HDR latency distribution of one or more runs, and a
//! throughput-versus-tail-latency chart of a linger/batch sweep.
//!
//! The SVG is written by hand rather than with a plotting crate: two fixed chart shapes do not
//! justify a font/image dependency tree (plotters and friends), and plain SVG text opens in any
//! browser and diffs in review.
//!
//! Every coordinate goes through a scale that clamps to the plot area, so empty histograms,
//! zero latencies and non-finite inputs still give finite coordinates.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use hdrhistogram::Histogram;

const WIDTH: f64 = 960.0;
const HEIGHT: f64 = 560.0;
const LEFT: f64 = 90.0;
/// Room on the right for the legend.
const RIGHT: f64 = 230.0;
const TOP: f64 = 50.0;
const BOTTOM: f64 = 70.0;
const PLOT_X0: f64 = LEFT;
const PLOT_X1: f64 = WIDTH - RIGHT;
const PLOT_Y0: f64 = HEIGHT - BOTTOM;
const PLOT_Y1: f64 = TOP;

/// Distinguishable on white and for the common colour-vision deficiencies (Tableau 10 order).
const PALETTE: [&str; 8] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
];

/// Percentiles marked on the distribution's x axis.
const PERCENTILE_TICKS: [(f64, &str); 6] = [
    (0.5, "50%"),
    (0.9, "90%"),
    (0.99, "99%"),
    (0.999, "99.9%"),
    (0.9999, "99.99%"),
    (0.99999, "99.999%"),
];
/// The distribution's x axis runs from 0% to 99.999%, i.e. 0 to 5 "nines".
const MAX_NINES: f64 = 5.0;
/// Samples per nine: enough for a smooth curve, few enough to keep the file small.
const SAMPLES_PER_NINE: usize = 40;

/// One cell of a linger/batch sweep of the producer.
#[derive(Debug, Clone, PartialEq)]
pub struct SweepPoint {
    pub linger_ms: u64,
    pub batch_bytes: usize,
    pub msgs_per_sec: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
}

/// Latency (microseconds, log y axis) against percentile on the HDR "1/(1-q)" log x axis, one
/// line per series, x axis from 0% to 99.999%.
///
/// An empty histogram still gets its (empty) line and a legend entry, so the reader sees that
/// the series exists but recorded nothing.
pub fn latency_distribution_svg(title: &str, series: &[(String, &Histogram<u64>)]) -> String {
    let samples = SAMPLES_PER_NINE * MAX_NINES as usize;
    // Quantiles ascending, as value_at_quantiles requires; x = -log10(1 - q).
    let xs: Vec<f64> = (0..=samples)
        .map(|i| MAX_NINES * i as f64 / samples as f64)
        .collect();
    let curves: Vec<Vec<(f64, f64)>> = series
        .iter()
        .map(|(_, h)| {
            if h.is_empty() {
                return Vec::new();
            }
            let qs = xs.iter().map(|&x| 1.0 - 10f64.powf(-x));
            xs.iter()
                .zip(h.value_at_quantiles(qs))
                // A log axis has no zero: show sub-microsecond values at 1 us.
                .map(|(&x, v)| (x, (v as f64).max(1.0)))
                .collect()
        })
        .collect();

    let (lo, hi) = curves
        .iter()
        .flatten()
        .fold((f64::INFINITY, 0.0f64), |(lo, hi), &(_, v)| {
            (lo.min(v), hi.max(v))
        });
    let y = LogScale::new(lo, hi, PLOT_Y0, PLOT_Y1);
    let x = LinScale::new(0.0, MAX_NINES, PLOT_X0, PLOT_X1);

    let mut out = String::new();
    begin(&mut out, title, "percentile", "latency (log scale)");
    for (q, label) in PERCENTILE_TICKS {
        x_tick(&mut out, x.map(nines(q)), label);
    }
    for v in y.ticks() {
        y_tick(&mut out, y.map(v), &fmt_us(v));
    }
    frame(&mut out);

    for (i, ((name, h), curve)) in series.iter().zip(&curves).enumerate() {
        let colour = PALETTE[i % PALETTE.len()];
        polyline(
            &mut out,
            colour,
            curve.iter().map(|&(px, py)| (x.map(px), y.map(py))),
        );
        let detail = if h.is_empty() {
            "empty".to_string()
        } else {
            format!("n={}, max {}", h.len(), fmt_us(h.max() as f64))
        };
        legend_line(&mut out, i, colour, name, Some(&detail));
    }
    end(out)
}

/// Throughput (x, msgs/s, linear) against p99 latency (y, log scale): one point per sweep cell
/// labelled "linger/batch", with the points of equal linger joined in order of batch size, so
/// the knee where batching stops paying off is visible per linger.
pub fn sweep_svg(title: &str, points: &[SweepPoint]) -> String {
    let rate = |p: &SweepPoint| finite_or(p.msgs_per_sec, 0.0).max(0.0);
    let p99 = |p: &SweepPoint| finite_or(p.p99_us, 1.0).max(1.0);

    let max_rate = points.iter().map(rate).fold(0.0, f64::max);
    let (x_max, x_step) = nice_axis(max_rate);
    let x = LinScale::new(0.0, x_max, PLOT_X0, PLOT_X1);
    let (lo, hi) = points
        .iter()
        .map(p99)
        .fold((f64::INFINITY, 0.0f64), |(lo, hi), v| {
            (lo.min(v), hi.max(v))
        });
    let y = LogScale::new(lo, hi, PLOT_Y0, PLOT_Y1);

    let mut out = String::new();
    begin(
        &mut out,
        title,
        "throughput (msgs/s)",
        "p99 latency (log scale)",
    );
    let ticks = (x_max / x_step).round() as usize;
    for i in 0..=ticks {
        let v = x_step * i as f64;
        x_tick(&mut out, x.map(v), &fmt_count(v));
    }
    for v in y.ticks() {
        y_tick(&mut out, y.map(v), &fmt_us(v));
    }
    frame(&mut out);

    let mut by_linger: BTreeMap<u64, Vec<&SweepPoint>> = BTreeMap::new();
    for p in points {
        by_linger.entry(p.linger_ms).or_default().push(p);
    }
    for (i, (linger, group)) in by_linger.iter_mut().enumerate() {
        group.sort_by_key(|p| p.batch_bytes);
        let colour = PALETTE[i % PALETTE.len()];
        if group.len() > 1 {
            polyline(
                &mut out,
                colour,
                group.iter().map(|p| (x.map(rate(p)), y.map(p99(p)))),
            );
        }
        for p in group.iter() {
            let (px, py) = (x.map(rate(p)), y.map(p99(p)));
            let _ = write!(
                out,
                r#"<circle cx="{px:.1}" cy="{py:.1}" r="4" fill="{colour}"><title>{}</title></circle>"#,
                escape(&format!(
                    "linger {} ms, batch {} bytes: {:.0} msgs/s, p50 {}, p99 {}, p99.9 {}",
                    p.linger_ms,
                    p.batch_bytes,
                    rate(p),
                    fmt_us(finite_or(p.p50_us, 0.0)),
                    fmt_us(p99(p)),
                    fmt_us(finite_or(p.p999_us, 0.0)),
                ))
            );
            out.push('\n');
            text(
                &mut out,
                px + 6.0,
                py - 6.0,
                "start",
                "font-size=\"11\"",
                &format!("{}/{}", p.linger_ms, fmt_bytes(p.batch_bytes)),
            );
        }
        legend_line(&mut out, i, colour, &format!("linger {linger} ms"), None);
    }
    if !points.is_empty() {
        text(
            &mut out,
            PLOT_X1 + 20.0,
            legend_y(by_linger.len()),
            "start",
            "font-size=\"11\" fill=\"#555\"",
            "labels: linger ms / batch bytes",
        );
    }
    end(out)
}

/// Writes `svg` to `path`, with a final newline.
pub fn write_svg(path: &Path, svg: &str) -> std::io::Result<()> {
    let mut text = String::with_capacity(svg.len() + 1);
    text.push_str(svg);
    if !text.ends_with('\n') {
        text.push('\n');
    }
    std::fs::write(path, text)
}

/// The HDR x coordinate of quantile `q`: log10(1 / (1 - q)), the number of nines.
fn nines(q: f64) -> f64 {
    -(1.0 - q).log10()
}

fn finite_or(v: f64, default: f64) -> f64 {
    if v.is_finite() {
        v
    } else {
        default
    }
}

/// Maps a domain interval onto a pixel interval, clamping so nothing lands outside the plot.
#[derive(Clone, Copy, Debug)]
struct LinScale {
    d0: f64,
    d1: f64,
    r0: f64,
    r1: f64,
}

impl LinScale {
    fn new(d0: f64, d1: f64, r0: f64, r1: f64) -> LinScale {
        LinScale { d0, d1, r0, r1 }
    }

    fn map(&self, v: f64) -> f64 {
        let t = if self.d1 > self.d0 {
            (v - self.d0) / (self.d1 - self.d0)
        } else {
            0.5
        };
        let t = if t.is_finite() {
            t.clamp(0.0, 1.0)
        } else {
            0.0
        };
        self.r0 + t * (self.r1 - self.r0)
    }
}

/// A log10 scale over whole decades.
#[derive(Clone, Copy, Debug)]
struct LogScale {
    lo_exp: i32,
    hi_exp: i32,
    lin: LinScale,
}

impl LogScale {
    /// Decades covering `[lo, hi]`; with no data (lo > hi) it shows 1 us to 1 ms.
    fn new(lo: f64, hi: f64, r0: f64, r1: f64) -> LogScale {
        let (lo, hi) = if lo.is_finite() && hi.is_finite() && lo > 0.0 && hi >= lo {
            (lo, hi)
        } else {
            (1.0, 1000.0)
        };
        let lo_exp = lo.log10().floor() as i32;
        let hi_exp = (hi.log10().ceil() as i32).max(lo_exp + 1);
        // A little room past the outer decades, so points on a decade are not drawn on the
        // frame.
        let pad = 0.03 * f64::from(hi_exp - lo_exp);
        LogScale {
            lo_exp,
            hi_exp,
            lin: LinScale::new(f64::from(lo_exp) - pad, f64::from(hi_exp) + pad, r0, r1),
        }
    }

    fn map(&self, v: f64) -> f64 {
        let floor = 10f64.powi(self.lo_exp);
        self.lin.map(v.max(floor).log10())
    }

    /// Decades, plus 2x and 5x when the range is short enough for them not to crowd.
    fn ticks(&self) -> Vec<f64> {
        let mults: &[f64] = if self.hi_exp - self.lo_exp <= 2 {
            &[1.0, 2.0, 5.0]
        } else {
            &[1.0]
        };
        let top = 10f64.powi(self.hi_exp);
        let mut out = Vec::new();
        for e in self.lo_exp..=self.hi_exp {
            for m in mults {
                let v = m * 10f64.powi(e);
                if v <= top * (1.0 + 1e-9) {
                    out.push(v);
                }
            }
        }
        out
    }
}

/// A linear axis from 0: (end, step) with a 1/2/5 step giving about five ticks.
fn nice_axis(max: f64) -> (f64, f64) {
    if !(max.is_finite() && max > 0.0) {
        return (1.0, 0.2);
    }
    let raw = max / 5.0;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * mag)
        .find(|&s| s >= raw)
        .unwrap_or(10.0 * mag);
    // Headroom so the largest point and its label stay inside the frame.
    let end = ((max * 1.05) / step).ceil() * step;
    (end, step)
}

fn begin(out: &mut String, title: &str, x_label: &str, y_label: &str) {
    let _ = write!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="13">"#
    );
    out.push('\n');
    let _ = writeln!(
        out,
        r##"<rect x="0" y="0" width="{WIDTH}" height="{HEIGHT}" fill="#fff"/>"##
    );
    text(
        out,
        (PLOT_X0 + PLOT_X1) / 2.0,
        TOP / 2.0 + 6.0,
        "middle",
        "font-size=\"16\" font-weight=\"bold\"",
        title,
    );
    text(
        out,
        (PLOT_X0 + PLOT_X1) / 2.0,
        HEIGHT - 20.0,
        "middle",
        "",
        x_label,
    );
    let (cx, cy) = (22.0, (PLOT_Y0 + PLOT_Y1) / 2.0);
    text(
        out,
        cx,
        cy,
        "middle",
        &format!("transform=\"rotate(-90 {cx} {cy})\""),
        y_label,
    );
}

/// The plot border, drawn after the grid so it sits on top.
fn frame(out: &mut String) {
    let _ = writeln!(
        out,
        r##"<rect x="{PLOT_X0}" y="{PLOT_Y1}" width="{}" height="{}" fill="none" stroke="#333"/>"##,
        PLOT_X1 - PLOT_X0,
        PLOT_Y0 - PLOT_Y1
    );
}

fn end(mut out: String) -> String {
    out.push_str("</svg>");
    out
}

fn x_tick(out: &mut String, px: f64, label: &str) {
    let _ = writeln!(
        out,
        r##"<line x1="{px:.1}" y1="{PLOT_Y1}" x2="{px:.1}" y2="{PLOT_Y0}" stroke="#ddd"/>"##
    );
    text(out, px, PLOT_Y0 + 18.0, "middle", "", label);
}

fn y_tick(out: &mut String, py: f64, label: &str) {
    let _ = writeln!(
        out,
        r##"<line x1="{PLOT_X0}" y1="{py:.1}" x2="{PLOT_X1}" y2="{py:.1}" stroke="#ddd"/>"##
    );
    text(out, PLOT_X0 - 8.0, py + 4.0, "end", "", label);
}

fn polyline(out: &mut String, colour: &str, pts: impl Iterator<Item = (f64, f64)>) {
    let _ = write!(
        out,
        r#"<polyline fill="none" stroke="{colour}" stroke-width="2" stroke-linejoin="round" points=""#
    );
    for (i, (x, y)) in pts.enumerate() {
        if i > 0 {
            out.push(' ');
        }
        let _ = write!(out, "{x:.1},{y:.1}");
    }
    out.push_str("\"/>\n");
}

/// A legend entry in the right margin: a swatch, the label, and an optional smaller second
/// line (kept separate so long series names and stats do not run off the image).
fn legend_line(out: &mut String, row: usize, colour: &str, label: &str, detail: Option<&str>) {
    let x = PLOT_X1 + 20.0;
    let y = legend_y(row);
    let _ = writeln!(
        out,
        r#"<line x1="{x}" y1="{y}" x2="{}" y2="{y}" stroke="{colour}" stroke-width="3"/>"#,
        x + 24.0
    );
    text(
        out,
        x + 32.0,
        y + 4.0,
        "start",
        "",
        &shorten(label, LEGEND_CHARS),
    );
    if let Some(detail) = detail {
        text(
            out,
            x + 32.0,
            y + 19.0,
            "start",
            "font-size=\"11\" fill=\"#555\"",
            detail,
        );
    }
}

/// About what fits in the legend margin at the default font size.
const LEGEND_CHARS: usize = 24;

/// `s` cut to `max` characters with an ellipsis, so a long series name stays on the image.
fn shorten(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_string()
    } else {
        let mut out: String = s.chars().take(max.saturating_sub(1)).collect();
        out.push('\u{2026}');
        out
    }
}

fn legend_y(row: usize) -> f64 {
    PLOT_Y1 + 10.0 + 36.0 * row as f64
}

fn text(out: &mut String, x: f64, y: f64, anchor: &str, attrs: &str, content: &str) {
    let _ = writeln!(
        out,
        r#"<text x="{x:.1}" y="{y:.1}" text-anchor="{anchor}" {attrs}>{}</text>"#,
        escape(content)
    );
}

/// Escapes text for SVG element content and attribute values: titles and series names come
/// from the command line.
fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            // Control characters other than tab/newline are not allowed in XML 1.0.
            c if c.is_control() && c != '\t' && c != '\n' => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

/// A number without trailing zeros: 2.50 -> "2.5", 3.00 -> "3".
fn trim(v: f64, decimals: usize) -> String {
    let s = format!("{v:.decimals$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// Microseconds in the unit a reader expects: "500 us", "2.5 ms", "1 s".
fn fmt_us(us: f64) -> String {
    if us >= 1e6 {
        format!("{} s", trim(us / 1e6, 2))
    } else if us >= 1e3 {
        format!("{} ms", trim(us / 1e3, 2))
    } else {
        format!("{} us", trim(us, 1))
    }
}

/// A rate for tick labels: "0", "500", "1.5k", "2M".
fn fmt_count(v: f64) -> String {
    if v >= 1e9 {
        format!("{}G", trim(v / 1e9, 2))
    } else if v >= 1e6 {
        format!("{}M", trim(v / 1e6, 2))
    } else if v >= 1e3 {
        format!("{}k", trim(v / 1e3, 2))
    } else {
        trim(v, 1)
    }
}

/// Batch sizes are usually powers of two: "16KiB", "1MiB", else plain bytes.
fn fmt_bytes(b: usize) -> String {
    const KIB: usize = 1 << 10;
    const MIB: usize = 1 << 20;
    if b >= MIB && b.is_multiple_of(MIB) {
        format!("{}MiB", b / MIB)
    } else if b >= KIB && b.is_multiple_of(KIB) {
        format!("{}KiB", b / KIB)
    } else {
        format!("{b}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hist(values: &[(u64, u64)]) -> Histogram<u64> {
        let mut h = Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("bounds");
        for &(v, n) in values {
            h.record_n(v, n).expect("in range");
        }
        h
    }

    /// A small well-formedness check: tags nest and close, entities are ones we emit.
    fn assert_xmlish(svg: &str) {
        assert!(svg.starts_with("<svg"), "starts with <svg");
        assert!(svg.ends_with("</svg>"), "ends with </svg>");
        assert!(!svg.contains("NaN"), "no NaN in {svg}");
        assert!(!svg.contains("inf"), "no inf in {svg}");
        let mut stack: Vec<&str> = Vec::new();
        let mut rest = svg;
        while let Some(open) = rest.find('<') {
            let close = rest[open..].find('>').expect("tag closes") + open;
            let tag = &rest[open + 1..close];
            assert!(!tag.contains('<'), "no '<' inside a tag: {tag}");
            if let Some(name) = tag.strip_prefix('/') {
                assert_eq!(stack.pop(), Some(name), "closing tag matches");
            } else if !tag.ends_with('/') {
                let name = tag.split_whitespace().next().expect("tag name");
                stack.push(name);
            }
            rest = &rest[close + 1..];
        }
        assert!(stack.is_empty(), "unclosed: {stack:?}");
        for (i, _) in svg.match_indices('&') {
            let ent = &svg[i..];
            assert!(
                ["&amp;", "&lt;", "&gt;", "&quot;", "&apos;"]
                    .iter()
                    .any(|e| ent.starts_with(e)),
                "bare & at {i}"
            );
        }
    }

    #[test]
    fn distribution_one_polyline_per_series() {
        let a = hist(&[(100, 900), (250, 90), (5_000, 9), (40_000, 1)]);
        let b = hist(&[(80, 10)]);
        let svg = latency_distribution_svg(
            "produce <acks=1> & more",
            &[("acks=1".to_string(), &a), ("acks=all".to_string(), &b)],
        );
        assert_xmlish(&svg);
        assert_eq!(svg.matches("<polyline").count(), 2);
        assert!(svg.contains("produce &lt;acks=1&gt; &amp; more"));
        for (_, label) in PERCENTILE_TICKS {
            assert!(svg.contains(&format!(">{label}</text>")), "tick {label}");
        }
        assert!(svg.contains("n=1000, max 40"), "legend detail");
    }

    #[test]
    fn distribution_handles_empty_histograms_and_no_series() {
        let empty = hist(&[]);
        let svg = latency_distribution_svg("t", &[("none".to_string(), &empty)]);
        assert_xmlish(&svg);
        assert_eq!(svg.matches("<polyline").count(), 1);
        assert!(svg.contains(">none</text>") && svg.contains(">empty</text>"));

        let svg = latency_distribution_svg("t", &[]);
        assert_xmlish(&svg);
        assert_eq!(svg.matches("<polyline").count(), 0);
    }

    #[test]
    fn distribution_x_axis_is_nines() {
        // 99% is two nines of five: 2/5 of the way across the plot.
        let x = LinScale::new(0.0, MAX_NINES, PLOT_X0, PLOT_X1);
        let px = x.map(nines(0.99));
        let want = PLOT_X0 + 0.4 * (PLOT_X1 - PLOT_X0);
        assert!((px - want).abs() < 1e-6, "{px} vs {want}");
        // A constant histogram gives a flat line at one y.
        let h = hist(&[(1000, 50)]);
        let svg = latency_distribution_svg("flat", &[("c".to_string(), &h)]);
        let pts = svg
            .split("points=\"")
            .nth(1)
            .and_then(|s| s.split('"').next())
            .expect("points");
        let ys: std::collections::HashSet<&str> = pts
            .split(' ')
            .map(|p| p.split(',').nth(1).expect("y"))
            .collect();
        assert_eq!(ys.len(), 1, "{ys:?}");
    }

    fn point(linger_ms: u64, batch_bytes: usize, rate: f64, p99: f64) -> SweepPoint {
        SweepPoint {
            linger_ms,
            batch_bytes,
            msgs_per_sec: rate,
            p50_us: p99 / 4.0,
            p99_us: p99,
            p999_us: p99 * 2.0,
        }
    }

    #[test]
    fn sweep_one_circle_per_point_and_line_per_linger() {
        let pts = vec![
            point(5, 1 << 20, 400_000.0, 9_000.0),
            point(0, 16 << 10, 120_000.0, 800.0),
            point(5, 16 << 10, 300_000.0, 6_000.0),
            point(0, 1 << 20, 150_000.0, 1_500.0),
            point(20, 64 << 10, 380_000.0, 25_000.0),
        ];
        let svg = sweep_svg("sweep", &pts);
        assert_xmlish(&svg);
        assert_eq!(svg.matches("<circle").count(), pts.len());
        // Lingers 0 and 5 have two cells each; 20 has one and no line.
        assert_eq!(svg.matches("<polyline").count(), 2);
        assert!(svg.contains(">5/16KiB</text>"));
        assert!(svg.contains(">0/1MiB</text>"));
        assert!(svg.contains("linger 20 ms"));
    }

    #[test]
    fn sweep_single_point_empty_and_degenerate_values() {
        let svg = sweep_svg("one", &[point(1, 1000, 5.0, 100.0)]);
        assert_xmlish(&svg);
        assert_eq!(svg.matches("<circle").count(), 1);
        assert_eq!(svg.matches("<polyline").count(), 0);

        let svg = sweep_svg("none", &[]);
        assert_xmlish(&svg);
        assert_eq!(svg.matches("<circle").count(), 0);

        let odd = [
            point(1, 0, 0.0, 0.0),
            point(1, 1, f64::NAN, f64::INFINITY),
            point(2, 2, -5.0, -1.0),
        ];
        let svg = sweep_svg("odd", &odd);
        assert_xmlish(&svg);
        assert_eq!(svg.matches("<circle").count(), 3);
    }

    #[test]
    fn scales_and_formats() {
        let s = LogScale::new(3.0, 3.0, 100.0, 0.0);
        assert_eq!((s.lo_exp, s.hi_exp), (0, 1));
        assert!(s.map(0.0).is_finite());
        assert!(
            s.map(10.0) > 0.0 && s.map(10.0) < 5.0,
            "near the top, not on it"
        );
        let s = LogScale::new(f64::INFINITY, 0.0, 100.0, 0.0);
        assert_eq!((s.lo_exp, s.hi_exp), (0, 3));
        assert_eq!(nice_axis(0.0), (1.0, 0.2));
        assert_eq!(nice_axis(950.0), (1000.0, 200.0));
        assert_eq!(fmt_us(2500.0), "2.5 ms");
        assert_eq!(fmt_us(100.0), "100 us");
        assert_eq!(fmt_us(1e6), "1 s");
        assert_eq!(fmt_count(1_500_000.0), "1.5M");
        assert_eq!(fmt_bytes(1000), "1000");
        assert_eq!(escape("a\"b'c\u{1}"), "a&quot;b&apos;c ");
        assert_eq!(shorten("abcdef", 4), "abc\u{2026}");
        assert_eq!(shorten("abc", 4), "abc");
    }

    #[test]
    fn write_svg_adds_newline() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("x.svg");
        let svg = sweep_svg("w", &[]);
        write_svg(&path, &svg).expect("write");
        let back = std::fs::read_to_string(&path).expect("read");
        assert_eq!(back, format!("{svg}\n"));
    }
}
