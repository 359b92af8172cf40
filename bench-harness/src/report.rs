//! Results: a human summary and the `--json` shape tests and scripts rely on.

use std::path::Path;
use std::time::Duration;

use hdrhistogram::Histogram;
use serde::Serialize;

#[derive(Serialize, Debug, Clone)]
pub struct Latency {
    pub p50: f64,
    pub p99: f64,
    pub p999: f64,
    pub p9999: f64,
    pub max: f64,
}

#[derive(Serialize, Debug, Clone)]
pub struct Report {
    pub workload: String,
    pub messages: u64,
    pub bytes: u64,
    pub seconds: f64,
    pub msgs_per_sec: f64,
    pub mb_per_sec: f64,
    pub latency_us: Latency,
    /// Produce only, native driver: per request, from its write to the socket to its response
    /// (the figure Iggy's bench gives per batch); absent where not measured.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_latency_us: Option<Latency>,
    /// Produce requests answered (written after warm-up): the count behind `request_latency_us`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub requests: Option<u64>,
    /// e2e only: the producers' side of the same run, per message from its intended send time
    /// to its delivery report (with `request_latency_us`, the hops before the consumer's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ack_latency_us: Option<Latency>,
    /// e2e only: end to end from each message's `send` call rather than its intended send
    /// time: without coordinated omission correction, as benches that pace by sleeping
    /// (Iggy's) report it. `latency_us` stays the corrected figure.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub latency_from_send_us: Option<Latency>,
    /// The CPU rill-bench used, all its threads, from its start to the report (setup and
    /// warm-up included): what the client cost, beside the broker's, on a machine they share.
    pub cpu_seconds: Cpu,
    /// The settings the run used, for RESULTS.md.
    pub settings: serde_json::Value,
}

/// CPU time of this process (`getrusage(RUSAGE_SELF)`), in seconds.
#[derive(Serialize, Debug, Clone, Copy, PartialEq)]
pub struct Cpu {
    pub user: f64,
    pub system: f64,
}

impl Cpu {
    pub fn of_this_process() -> Cpu {
        // SAFETY: `rusage` is plain data that getrusage fills; zeroed is a valid value of it.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: a valid pointer to a `rusage` this call may write.
        if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) } != 0 {
            return Cpu {
                user: f64::NAN,
                system: f64::NAN,
            };
        }
        let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
        Cpu {
            user: secs(usage.ru_utime),
            system: secs(usage.ru_stime),
        }
    }
}

/// A histogram of microseconds, 1 us to 1 h, 3 significant figures.
pub fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("valid histogram bounds")
}

pub fn record(h: &mut Histogram<u64>, d: Duration) {
    let us = (d.as_micros() as u64).clamp(1, 3_600_000_000);
    h.saturating_record(us);
}

impl Latency {
    pub fn of(h: &Histogram<u64>) -> Latency {
        let q = |x: f64| h.value_at_quantile(x) as f64;
        Latency {
            p50: q(0.5),
            p99: q(0.99),
            p999: q(0.999),
            p9999: q(0.9999),
            max: h.max() as f64,
        }
    }
}

impl Report {
    /// Adds the per-request latencies (nothing when not measured or no request was answered,
    /// e.g. acks=0).
    pub fn with_request_latency(mut self, h: Option<&Histogram<u64>>) -> Report {
        if let Some(h) = h.filter(|h| !h.is_empty()) {
            self.request_latency_us = Some(Latency::of(h));
            self.requests = Some(h.len());
        }
        self
    }

    pub fn new(
        workload: &str,
        messages: u64,
        bytes: u64,
        elapsed: Duration,
        h: &Histogram<u64>,
        settings: serde_json::Value,
    ) -> Report {
        let seconds = elapsed.as_secs_f64().max(1e-9);
        Report {
            workload: workload.to_string(),
            messages,
            bytes,
            seconds,
            msgs_per_sec: messages as f64 / seconds,
            mb_per_sec: bytes as f64 / seconds / 1e6,
            latency_us: Latency::of(h),
            request_latency_us: None,
            ack_latency_us: None,
            latency_from_send_us: None,
            requests: None,
            cpu_seconds: Cpu::of_this_process(),
            settings,
        }
    }

    pub fn print(&self) {
        // Per-request figures, when measured, close the same line (scripts read it whole).
        let acks = match &self.ack_latency_us {
            Some(l) => format!(
                "; ack latency us p50 {:.0} p99 {:.0} p99.9 {:.0} p99.99 {:.0} max {:.0}",
                l.p50, l.p99, l.p999, l.p9999, l.max
            ),
            None => String::new(),
        };
        let from_send = match &self.latency_from_send_us {
            Some(l) => format!(
                "; from send us p50 {:.0} p99 {:.0} p99.9 {:.0} p99.99 {:.0} max {:.0}",
                l.p50, l.p99, l.p999, l.p9999, l.max
            ),
            None => String::new(),
        };
        let requests = match (&self.request_latency_us, self.requests) {
            (Some(l), Some(n)) => format!(
                "; {n} requests, request latency us p50 {:.0} p99 {:.0} p99.9 {:.0} p99.99 {:.0} max {:.0}",
                l.p50, l.p99, l.p999, l.p9999, l.max
            ),
            _ => String::new(),
        };
        println!(
            "{}: {} messages, {:.1} MB in {:.2} s: {:.0} msg/s, {:.1} MB/s; latency us p50 {:.0} p99 {:.0} p99.9 {:.0} p99.99 {:.0} max {:.0}{acks}{from_send}{requests}",
            self.workload,
            self.messages,
            self.bytes as f64 / 1e6,
            self.seconds,
            self.msgs_per_sec,
            self.mb_per_sec,
            self.latency_us.p50,
            self.latency_us.p99,
            self.latency_us.p999,
            self.latency_us.p9999,
            self.latency_us.max
        );
    }

    pub fn write_json(&self, path: &Path) -> std::io::Result<()> {
        let text = serde_json::to_string_pretty(self).map_err(std::io::Error::other)?;
        std::fs::write(path, text)
    }
}
