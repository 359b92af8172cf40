//! A progress line on stderr for long runs.
//!
//! Quiet for the first two seconds, so short runs and tests print nothing, and quiet unless
//! stderr is a terminal, so CI logs stay clean; `RILL_BENCH_PROGRESS=1` forces it on (to watch
//! a run through a pipe) and `RILL_BENCH_PROGRESS=0` forces it off.
//!
//! Workers only touch an atomic counter; a background thread does all the formatting and
//! writing, at most four times a second, so reporting progress costs the measured path nothing
//! measurable.

use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Environment variable: "1" forces the progress line on, "0" off; otherwise it is shown only
/// when stderr is a terminal.
pub const PROGRESS_ENV: &str = "RILL_BENCH_PROGRESS";
/// Runs shorter than this never show a progress line.
const QUIET_FOR: Duration = Duration::from_secs(2);
/// At most four redraws a second: faster is flicker, and costs a core on a 2-core box.
const REDRAW_EVERY: Duration = Duration::from_millis(250);

/// A progress line on stderr; see the module documentation.
///
/// Share it by reference (it is `Sync`) or in an `Arc` with the worker threads. Dropping it
/// without [`Progress::finish`] (an early return on error) stops and clears it too.
pub struct Progress {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

struct Shared {
    done: AtomicU64,
    /// Set by `finish`; the condvar wakes the drawer at once instead of after its next tick.
    stopped: Mutex<bool>,
    wake: Condvar,
}

impl Progress {
    /// Starts tracking `label`; `total` (if known) adds a percentage and an ETA.
    pub fn new(label: &str, total: Option<u64>) -> Progress {
        let draw = match std::env::var(PROGRESS_ENV).as_deref() {
            Ok("1") => true,
            Ok("0") => false,
            _ => std::io::stderr().is_terminal(),
        };
        let sink: Option<Box<dyn Write + Send>> = if draw {
            Some(Box::new(std::io::stderr()))
        } else {
            None
        };
        Progress::with_sink(label, total, sink, QUIET_FOR, REDRAW_EVERY)
    }

    /// `sink` is None when nothing should be drawn: then no thread is started at all.
    fn with_sink(
        label: &str,
        total: Option<u64>,
        sink: Option<Box<dyn Write + Send>>,
        quiet_for: Duration,
        redraw_every: Duration,
    ) -> Progress {
        let shared = Arc::new(Shared {
            done: AtomicU64::new(0),
            stopped: Mutex::new(false),
            wake: Condvar::new(),
        });
        let thread = sink.and_then(|sink| {
            let shared = Arc::clone(&shared);
            let label = label.to_owned();
            std::thread::Builder::new()
                .name("rill-bench-progress".into())
                .spawn(move || draw_loop(&shared, &label, total, sink, quiet_for, redraw_every))
                // No thread means no progress line; the benchmark itself must not fail for it.
                .ok()
        });
        Progress { shared, thread }
    }

    /// Records that `done` units are complete. Never moves backwards (`fetch_max`), so threads
    /// reporting a shared count slightly out of order cannot make the line jump back.
    pub fn set(&self, done: u64) {
        self.shared.done.fetch_max(done, Ordering::Relaxed);
    }

    /// Adds `n` completed units, for workers that each count their own share.
    pub fn add(&self, n: u64) {
        self.shared.done.fetch_add(n, Ordering::Relaxed);
    }

    /// Units completed so far (the tests read it; the drawer reads the counter itself).
    #[cfg(test)]
    pub fn done(&self) -> u64 {
        self.shared.done.load(Ordering::Relaxed)
    }

    /// Stops the drawing thread, waits for it and clears the line, so the report that follows
    /// starts on a clean line.
    pub fn finish(self) {
        // Drop does the work, so that an early return stops the thread too.
    }

    fn stop(&mut self) {
        let Some(thread) = self.thread.take() else {
            return;
        };
        *self
            .shared
            .stopped
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = true;
        self.shared.wake.notify_all();
        // A panicked drawer only loses the progress line.
        let _ = thread.join();
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.stop();
    }
}

fn draw_loop(
    shared: &Shared,
    label: &str,
    total: Option<u64>,
    mut sink: Box<dyn Write + Send>,
    quiet_for: Duration,
    redraw_every: Duration,
) {
    let start = Instant::now();
    let mut next = start + quiet_for;
    // Width of the last line drawn, to blank out leftovers of a longer previous line.
    let mut width = 0usize;
    loop {
        {
            let mut stopped = shared
                .stopped
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            loop {
                if *stopped {
                    drop(stopped);
                    if width > 0 {
                        // Write errors (stderr closed) are ignored: progress is cosmetic.
                        let _ = write!(sink, "\r{:width$}\r", "");
                        let _ = sink.flush();
                    }
                    return;
                }
                let now = Instant::now();
                if now >= next {
                    break;
                }
                stopped = shared
                    .wake
                    .wait_timeout(stopped, next - now)
                    .unwrap_or_else(PoisonError::into_inner)
                    .0;
            }
        }
        // Drawn without the lock held, so `finish` never waits on a slow terminal to signal.
        let line = render(
            label,
            shared.done.load(Ordering::Relaxed),
            total,
            start.elapsed(),
        );
        let len = line.chars().count();
        let pad = width.saturating_sub(len);
        let _ = write!(sink, "\r{line}{:pad$}", "");
        let _ = sink.flush();
        width = len;
        next = Instant::now() + redraw_every;
    }
}

/// One progress line: "label: done/total (pct%) rate/s elapsed m:ss eta m:ss".
fn render(label: &str, done: u64, total: Option<u64>, elapsed: Duration) -> String {
    let secs = elapsed.as_secs_f64();
    let rate = if secs > 0.0 { done as f64 / secs } else { 0.0 };
    let mut line = format!("{label}: {done}");
    if let Some(total) = total {
        line.push_str(&format!("/{total}"));
        if total > 0 {
            line.push_str(&format!(" ({:.1}%)", done as f64 * 100.0 / total as f64));
        }
    }
    line.push_str(&format!(
        " {}/s elapsed {}",
        fmt_rate(rate),
        fmt_clock(elapsed.as_secs())
    ));
    if let Some(total) = total {
        if rate > 0.0 && total > done {
            let eta = ((total - done) as f64 / rate).ceil();
            if eta.is_finite() && eta < u64::MAX as f64 {
                line.push_str(&format!(" eta {}", fmt_clock(eta as u64)));
            }
        }
    }
    line
}

/// "950", "12.3k", "1.25M": rates vary over orders of magnitude between workloads.
fn fmt_rate(r: f64) -> String {
    if r >= 1e9 {
        format!("{:.2}G", r / 1e9)
    } else if r >= 1e6 {
        format!("{:.2}M", r / 1e6)
    } else if r >= 1e3 {
        format!("{:.1}k", r / 1e3)
    } else {
        format!("{r:.0}")
    }
}

/// "m:ss", or "h:mm:ss" past an hour.
fn fmt_clock(secs: u64) -> String {
    let (h, m, s) = (secs / 3600, secs / 60 % 60, secs % 60);
    if h > 0 {
        format!("{h}:{m:02}:{s:02}")
    } else {
        format!("{m}:{s:02}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A sink the test can read while the drawer writes to it.
    #[derive(Clone, Default)]
    struct Buf(Arc<Mutex<Vec<u8>>>);

    impl Write for Buf {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl Buf {
        fn text(&self) -> String {
            String::from_utf8_lossy(&self.0.lock().unwrap_or_else(PoisonError::into_inner))
                .into_owned()
        }
    }

    /// Bounded: finish must not wait out the quiet period or a redraw tick.
    const PROMPT: Duration = Duration::from_secs(5);

    #[test]
    fn set_from_threads_then_finish_promptly() {
        // Drawing enabled but a quiet period far longer than the test: finish has to wake
        // the thread rather than wait for it.
        let buf = Buf::default();
        let p = Progress::with_sink(
            "t",
            Some(4000),
            Some(Box::new(buf.clone())),
            Duration::from_secs(3600),
            REDRAW_EVERY,
        );
        std::thread::scope(|s| {
            for t in 0..4u64 {
                let p = &p;
                s.spawn(move || {
                    for i in 1..=1000 {
                        p.set(t * 1000 + i);
                        p.add(0);
                    }
                });
            }
        });
        assert_eq!(p.done(), 4000);
        let t = Instant::now();
        p.finish();
        assert!(t.elapsed() < PROMPT, "finish took {:?}", t.elapsed());
        assert_eq!(buf.text(), "", "nothing drawn during the quiet period");
    }

    #[test]
    fn draws_then_clears() {
        let buf = Buf::default();
        let p = Progress::with_sink(
            "produce",
            Some(100),
            Some(Box::new(buf.clone())),
            Duration::ZERO,
            Duration::from_millis(5),
        );
        p.add(50);
        // Wait (bounded) for a line showing the count rather than sleeping a fixed time.
        let deadline = Instant::now() + PROMPT;
        while !buf.text().contains("50/100") {
            assert!(Instant::now() < deadline, "no line drawn: {:?}", buf.text());
            std::thread::yield_now();
        }
        let t = Instant::now();
        p.finish();
        assert!(t.elapsed() < PROMPT);
        let text = buf.text();
        assert!(text.contains("produce: 50/100 (50.0%)"), "{text:?}");
        // Cleared: the output ends by blanking the line and returning the cursor.
        assert!(text.ends_with(" \r"), "{text:?}");
    }

    #[test]
    fn no_sink_means_no_thread_and_drop_is_fine() {
        let p = Progress::with_sink("x", None, None, Duration::ZERO, REDRAW_EVERY);
        assert!(p.thread.is_none());
        p.set(3);
        p.set(1);
        assert_eq!(p.done(), 3, "set never moves backwards");
        drop(p);
    }

    #[test]
    fn render_lines() {
        let l = render("produce", 250, Some(1000), Duration::from_secs(5));
        assert_eq!(l, "produce: 250/1000 (25.0%) 50/s elapsed 0:05 eta 0:15");
        let l = render("consume", 3_000_000, None, Duration::from_secs(3725));
        assert_eq!(l, "consume: 3000000 805/s elapsed 1:02:05");
        // Zero elapsed and zero total: no division by zero, no NaN.
        let l = render("x", 7, Some(0), Duration::ZERO);
        assert_eq!(l, "x: 7/0 0/s elapsed 0:00");
        assert_eq!(fmt_rate(1_250_000.0), "1.25M");
        assert_eq!(fmt_rate(12_345.0), "12.3k");
    }
}
