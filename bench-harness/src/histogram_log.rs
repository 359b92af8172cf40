//! HdrHistogram interval logs: one latency histogram per interval of a run, in the standard
//! text format that HdrHistogram's own tools read (Java `HistogramLogProcessor`,
//! HistogramLogAnalyzer, the Rust `IntervalLogIterator`), so a run's latency can be inspected
//! over time instead of only as one summary.
//!
//! Values are microseconds, as everywhere in rill-bench (see `report::new_histogram`); the
//! log's header comment says so, since the Java tools assume nanoseconds by default.
//!
//! Histograms are stored compressed (`V2DeflateSerializer`): the Java reader only decodes the
//! compressed encoding.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;
use std::time::{Duration, SystemTime};

use hdrhistogram::serialization::interval_log::{
    IntervalLogWriterBuilder, IntervalLogWriterError, Tag,
};
use hdrhistogram::serialization::{V2DeflateSerializeError, V2DeflateSerializer};
use hdrhistogram::Histogram;

/// The column legend the Java writer emits; readers skip it, humans find it useful.
const LEGEND: &str =
    "\"StartTimestamp\",\"Interval_Length\",\"Interval_Max\",\"Interval_Compressed_Histogram\"";

/// An interval log being written. Interval start times are seconds since the log was created
/// (its BaseTime), so the numbers read as "seconds into the run".
pub struct HistogramLog {
    out: BufWriter<File>,
    serializer: V2DeflateSerializer,
    /// Tag on every interval (e.g. the workload name), so logs of several runs can be merged.
    tag: Option<String>,
}

impl HistogramLog {
    /// Creates (or truncates) `path` and writes the log header. `tag` labels every interval;
    /// it may not contain ',', ' ', '\r' or '\n' (the format's separators); "" means no tag.
    pub fn create(path: impl AsRef<Path>, tag: &str) -> io::Result<HistogramLog> {
        let tag = if tag.is_empty() {
            None
        } else if Tag::new(tag).is_some() {
            Some(tag.to_owned())
        } else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("histogram log tag {tag:?} contains ',', ' ', '\\r' or '\\n'"),
            ));
        };
        let mut out = BufWriter::new(File::create(path)?);
        let mut serializer = V2DeflateSerializer::new();
        let now = SystemTime::now();
        IntervalLogWriterBuilder::new()
            .add_comment(&format!(
                "[Logged with rill-bench {}]",
                env!("CARGO_PKG_VERSION")
            ))
            .add_comment("[Histogram log format version 1.3]")
            .add_comment("[Values are microseconds]")
            .with_start_time(now)
            .with_base_time(now)
            .begin_log_with(&mut out, &mut serializer)?;
        writeln!(out, "{LEGEND}")?;
        out.flush()?;
        Ok(HistogramLog {
            out,
            serializer,
            tag,
        })
    }

    /// Appends the histogram of one interval: `start_secs` after the log was created, lasting
    /// `duration_secs`. Flushed at once, so a log of an interrupted run is still readable.
    pub fn record_interval(
        &mut self,
        start_secs: f64,
        duration_secs: f64,
        h: &Histogram<u64>,
    ) -> io::Result<()> {
        let start = secs(start_secs, "start")?;
        let duration = secs(duration_secs, "duration")?;
        // The library's writer borrows the file and serializer, so it cannot live in this
        // struct; a builder with no comments or times writes no header, and the writer it
        // returns just appends interval lines to the open file.
        let mut writer =
            IntervalLogWriterBuilder::new().begin_log_with(&mut self.out, &mut self.serializer)?;
        writer
            .write_histogram(h, start, duration, self.tag.as_deref().and_then(Tag::new))
            .map_err(writer_error)?;
        self.out.flush()
    }

    /// Flushes and closes the log, reporting any write error that dropping would swallow.
    pub fn finish(mut self) -> io::Result<()> {
        self.out.flush()?;
        self.out.get_ref().sync_all()
    }
}

/// Interval times must be finite and non-negative: the format has no negative timestamps.
fn secs(v: f64, what: &str) -> io::Result<Duration> {
    Duration::try_from_secs_f64(v).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("histogram log interval {what} {v} is not a non-negative number of seconds"),
        )
    })
}

fn writer_error(e: IntervalLogWriterError<V2DeflateSerializeError>) -> io::Error {
    match e {
        IntervalLogWriterError::IoError(e) => e,
        IntervalLogWriterError::SerializeError(V2DeflateSerializeError::IoError(e)) => e,
        IntervalLogWriterError::SerializeError(e) => io::Error::other(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine as _;
    use hdrhistogram::serialization::interval_log::{IntervalLogIterator, LogEntry};
    use hdrhistogram::serialization::Deserializer;

    fn hist(values: &[(u64, u64)]) -> Histogram<u64> {
        let mut h = Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("bounds");
        for &(v, n) in values {
            h.record_n(v, n).expect("in range");
        }
        h
    }

    #[test]
    fn two_intervals_round_trip() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("produce.hlog");
        let a = hist(&[(100, 1000), (2_000, 10), (45_000, 1)]);
        let b = hist(&[(7, 3)]);
        let mut log = HistogramLog::create(&path, "produce").expect("create");
        log.record_interval(0.0, 1.0, &a).expect("first");
        log.record_interval(1.0, 1.5, &b).expect("second");
        log.finish().expect("finish");

        let bytes = std::fs::read(&path).expect("read");
        let text = String::from_utf8_lossy(&bytes);
        assert!(text.starts_with("#[Logged with rill-bench"), "{text}");
        assert!(text.contains(LEGEND));

        let mut starts = 0;
        let mut bases = 0;
        let mut intervals = Vec::new();
        for entry in IntervalLogIterator::new(&bytes) {
            match entry.expect("parses") {
                LogEntry::StartTime(_) => starts += 1,
                LogEntry::BaseTime(_) => bases += 1,
                LogEntry::Interval(i) => {
                    let raw = base64::engine::general_purpose::STANDARD
                        .decode(i.encoded_histogram())
                        .expect("base64");
                    let h: Histogram<u64> = Deserializer::new()
                        .deserialize(&mut raw.as_slice())
                        .expect("histogram");
                    intervals.push((
                        i.tag().map(|t| t.as_str().to_owned()),
                        i.start_timestamp(),
                        i.duration(),
                        i.max(),
                        h,
                    ));
                }
            }
        }
        assert_eq!(
            (starts, bases),
            (1, 1),
            "header written once, not per interval"
        );
        assert_eq!(intervals.len(), 2);
        let (tag, start, dur, max, h) = &intervals[0];
        assert_eq!(tag.as_deref(), Some("produce"));
        assert_eq!(*start, Duration::ZERO);
        assert_eq!(*dur, Duration::from_secs(1));
        assert_eq!(h.len(), 1011);
        assert_eq!(h.max(), a.max());
        assert_eq!(*max, a.max() as f64);
        assert_eq!(h.value_at_quantile(0.5), a.value_at_quantile(0.5));
        let (_, start, dur, _, h) = &intervals[1];
        assert_eq!(*start, Duration::from_secs(1));
        assert_eq!(*dur, Duration::from_millis(1500));
        assert_eq!(h.len(), 3);
        assert_eq!(h.max(), 7);
    }

    #[test]
    fn empty_histogram_and_no_tag() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("e.hlog");
        let mut log = HistogramLog::create(&path, "").expect("create");
        log.record_interval(0.25, 0.5, &hist(&[]))
            .expect("empty interval");
        log.finish().expect("finish");
        let bytes = std::fs::read(&path).expect("read");
        let n = IntervalLogIterator::new(&bytes)
            .filter(|e| matches!(e, Ok(LogEntry::Interval(i)) if i.tag().is_none()))
            .count();
        assert_eq!(n, 1);
    }

    #[test]
    fn rejects_bad_tag_and_times() {
        let dir = tempfile::tempdir().expect("tempdir");
        let err = HistogramLog::create(dir.path().join("t.hlog"), "a b")
            .err()
            .expect("bad tag");
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
        let mut log = HistogramLog::create(dir.path().join("u.hlog"), "ok").expect("create");
        let h = hist(&[(1, 1)]);
        for (s, d) in [(-1.0, 1.0), (0.0, f64::NAN), (f64::INFINITY, 1.0)] {
            let err = log.record_interval(s, d, &h).expect_err("bad time");
            assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
        }
        assert!(HistogramLog::create(dir.path().join("no/such/dir/x.hlog"), "t").is_err());
    }
}
