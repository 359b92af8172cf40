//! Prometheus metrics (`--metrics-listen`). Each shard keeps its own counters and histograms
//! as plain cells, incremented on its own thread where the work happens (no atomics, no locks,
//! no cross-core hop on the data path); a scrape asks every shard for a [`ShardSnapshot`] over
//! a flume channel (control traffic) and renders them here, with the controller's state, in
//! Prometheus's text format ([`text`]), served by a small HTTP thread ([`http`]).
//!
//! This module is plain data and encoding: it knows no broker, listener or controller. The
//! broker fills the snapshots (`broker::metrics`), the listeners count requests through
//! [`RequestMetrics`], the process wires the scrape (`server::metrics`).

pub mod histogram;
pub mod http;
pub mod text;

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::time::Instant;

use crate::protocol::error_code::ErrorCode;
pub use histogram::{Histogram, HistogramSnapshot};
use text::{Kind, Text};

/// Which listener a request came through (the `listener` label).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Listener {
    Native,
    Kafka,
}

impl Listener {
    pub fn label(self) -> &'static str {
        match self {
            Listener::Native => "native",
            Listener::Kafka => "kafka",
        }
    }
}

/// Which latency histogram a request is timed into.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Timed {
    Produce,
    Fetch,
    No,
}

/// A request being handled: when it was read, and which histogram its end goes to.
#[must_use = "a request's latency is recorded by RequestMetrics::done"]
pub struct RequestTimer {
    started: Instant,
    timed: Timed,
}

/// The api label of a request that could not be decoded far enough to know its API.
pub const UNKNOWN_API: &str = "unknown";

/// One shard's request counters, shared by both listeners: requests and errors per
/// (listener, API), and the produce and fetch latencies (request read to answer ready; a
/// produce's includes its acknowledgement wait, a fetch's its long poll).
pub struct RequestMetrics {
    requests: RefCell<HashMap<(Listener, &'static str), u64>>,
    /// TLS handshakes per listener and result (`ok`, `failed`, `timeout`).
    tls_handshakes: RefCell<HashMap<(Listener, &'static str), u64>>,
    errors: RefCell<HashMap<(Listener, &'static str, &'static str), u64>>,
    produce: Histogram,
    fetch: Histogram,
}

impl Default for RequestMetrics {
    fn default() -> Self {
        RequestMetrics {
            requests: RefCell::default(),
            tls_handshakes: RefCell::default(),
            errors: RefCell::default(),
            produce: Histogram::latency(),
            fetch: Histogram::latency(),
        }
    }
}

impl RequestMetrics {
    /// Counts a request of `api` read from `listener`; its latency is recorded by
    /// [`done`](Self::done).
    pub fn request(&self, listener: Listener, api: &'static str, timed: Timed) -> RequestTimer {
        *self
            .requests
            .borrow_mut()
            .entry((listener, api))
            .or_insert(0) += 1;
        RequestTimer {
            started: Instant::now(),
            timed,
        }
    }

    /// The request's answer is ready (or, unanswered, its writes are appended).
    pub fn done(&self, timer: RequestTimer) {
        let h = match timer.timed {
            Timed::Produce => &self.produce,
            Timed::Fetch => &self.fetch,
            Timed::No => return,
        };
        h.observe_duration(timer.started.elapsed());
    }

    /// Counts an error answered (a whole request refused, or one partition of it), by its
    /// Kafka error name.
    pub fn error(&self, listener: Listener, api: &'static str, code: &'static str) {
        *self
            .errors
            .borrow_mut()
            .entry((listener, api, code))
            .or_insert(0) += 1;
    }

    /// Counts an error code as put on the wire (Kafka's numbers, both protocols); 0 (none)
    /// is not an error.
    pub fn wire_error(&self, listener: Listener, api: &'static str, code: i16) {
        if code != 0 {
            self.error(listener, api, ErrorCode::from_code(code).name());
        }
    }

    /// Counts a TLS handshake's `result` (`ok`, `failed`, `timeout`).
    pub fn tls_handshake(&self, listener: Listener, result: &'static str) {
        *self
            .tls_handshakes
            .borrow_mut()
            .entry((listener, result))
            .or_insert(0) += 1;
    }

    /// Fills the request part of a shard's snapshot.
    pub fn snapshot_into(&self, s: &mut ShardSnapshot) {
        s.tls_handshakes = self
            .tls_handshakes
            .borrow()
            .iter()
            .map(|(&(l, r), &n)| (l, r, n))
            .collect();
        s.tls_handshakes.sort_unstable();
        s.requests = self
            .requests
            .borrow()
            .iter()
            .map(|(&(l, api), &n)| (l, api, n))
            .collect();
        s.requests.sort_unstable();
        s.errors = self
            .errors
            .borrow()
            .iter()
            .map(|(&(l, api, code), &n)| (l, api, code, n))
            .collect();
        s.errors.sort_unstable();
        s.produce_latency = Some(self.produce.snapshot());
        s.fetch_latency = Some(self.fetch.snapshot());
    }
}

/// One partition a shard owns.
#[derive(Clone, Debug, Default)]
pub struct PartitionSnapshot {
    pub topic: String,
    pub partition: u32,
    /// Bytes appended (stored batch bytes, every producer and the broker's own appends).
    pub bytes_in: u64,
    /// Stored bytes handed to fetches (what a Kafka fetch converts, not its wire bytes).
    pub bytes_out: u64,
    pub high_watermark: u64,
    pub log_start_offset: u64,
}

/// A committed offset of a group the shard coordinates.
#[derive(Clone, Debug)]
pub struct CommittedSnapshot {
    pub group: String,
    pub topic: String,
    pub partition: u32,
    pub offset: u64,
}

/// Everything one shard reports to a scrape. `Send`: built on the shard, read by the scrape
/// thread.
#[derive(Clone, Debug, Default)]
pub struct ShardSnapshot {
    pub shard: usize,
    /// (listener, api, count), sorted.
    pub requests: Vec<(Listener, &'static str, u64)>,
    /// (listener, api, error name, count), sorted.
    pub errors: Vec<(Listener, &'static str, &'static str, u64)>,
    pub produce_latency: Option<HistogramSnapshot>,
    pub fetch_latency: Option<HistogramSnapshot>,
    /// Bytes each group-commit round wrote.
    pub commit_round_bytes: Option<HistogramSnapshot>,
    /// Partitions each group-commit round wrote.
    pub commit_round_partitions: Option<HistogramSnapshot>,
    /// One partition's fdatasync of its touched files (they run together).
    pub fdatasync_latency: Option<HistogramSnapshot>,
    /// Each group-commit round's writes.
    pub commit_write_latency: Option<HistogramSnapshot>,
    /// Each high-watermark checkpoint of the shard's partitions.
    pub checkpoint_latency: Option<HistogramSnapshot>,
    pub tail_cache_hits: u64,
    pub tail_cache_misses: u64,
    pub tail_cache_bytes: u64,
    /// What the tail cache may hold now (memory pressure lowers it).
    pub tail_cache_budget_bytes: u64,
    /// Copy reads started ahead of their fetch: started, taken by a fetch, dropped for the
    /// bound; and the bytes held now.
    pub read_ahead_started: u64,
    pub read_ahead_taken: u64,
    pub read_ahead_evicted: u64,
    pub read_ahead_bytes: u64,
    /// Open connections per listener.
    pub connections: Vec<(Listener, u64)>,
    /// (listener, result, count) of TLS handshakes, sorted.
    pub tls_handshakes: Vec<(Listener, &'static str, u64)>,
    pub partitions: Vec<PartitionSnapshot>,
    pub committed: Vec<CommittedSnapshot>,
}

/// The embedded controller's raft state, as this node sees it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ControllerSnapshot {
    pub is_leader: bool,
    pub term: u64,
    pub committed_index: u64,
    pub applied_index: u64,
}

/// Consumer-group lag series at most per scrape: one per (group, partition) committed, which
/// clients may make many of; past it the rest are left out (counted in
/// `rill_consumer_group_lag_omitted`).
pub const MAX_LAG_SERIES: usize = 10_000;

/// A family of one value per shard or per partition.
struct Family<T> {
    name: &'static str,
    kind: Kind,
    help: &'static str,
    get: fn(&T) -> u64,
}

/// A histogram family, one histogram per shard.
struct HistogramFamily {
    name: &'static str,
    help: &'static str,
    get: fn(&ShardSnapshot) -> Option<&HistogramSnapshot>,
    unit: text::Unit,
}

/// Renders a scrape: every shard's snapshot (`None`: the shard did not answer in time), the
/// controller's state (`None`: this node runs no raft voter), lag joined across shards.
pub fn render(
    shards: &[(usize, Option<ShardSnapshot>)],
    controller: Option<ControllerSnapshot>,
) -> String {
    let mut t = Text::new();
    let ok: Vec<&ShardSnapshot> = shards.iter().filter_map(|(_, s)| s.as_ref()).collect();

    t.family(
        "rill_shard_up",
        Kind::Gauge,
        "1 when the shard answered this scrape, 0 when it did not in time (its series are missing).",
    );
    for (id, s) in shards {
        t.sample(
            "rill_shard_up",
            &[("shard", &id.to_string())],
            u64::from(s.is_some()),
        );
    }

    t.family(
        "rill_requests_total",
        Kind::Counter,
        "Requests read, per listener and API.",
    );
    for s in &ok {
        let shard = s.shard.to_string();
        for (l, api, n) in &s.requests {
            t.sample(
                "rill_requests_total",
                &[("shard", &shard), ("listener", l.label()), ("api", api)],
                *n,
            );
        }
    }
    t.family(
        "rill_request_errors_total",
        Kind::Counter,
        "Errors answered, per listener, API and Kafka error name: whole requests refused, and \
         each refused item (partition, topic, group, member) of an answer.",
    );
    for s in &ok {
        let shard = s.shard.to_string();
        for (l, api, code, n) in &s.errors {
            t.sample(
                "rill_request_errors_total",
                &[
                    ("shard", &shard),
                    ("listener", l.label()),
                    ("api", api),
                    ("code", code),
                ],
                *n,
            );
        }
    }
    let histograms: [HistogramFamily; 7] = [
        HistogramFamily {
            name: "rill_produce_duration_seconds",
            help: "Produce requests, from read to answer ready (acknowledgement wait included), both listeners.",
            get: |s| s.produce_latency.as_ref(),
            unit: text::SECONDS_FROM_NS,
        },
        HistogramFamily {
            name: "rill_fetch_duration_seconds",
            help: "Fetch requests, from read to answer ready (long poll included), both listeners.",
            get: |s| s.fetch_latency.as_ref(),
            unit: text::SECONDS_FROM_NS,
        },
        HistogramFamily {
            name: "rill_group_commit_round_bytes",
            help: "Bytes written by each group-commit round of the shard.",
            get: |s| s.commit_round_bytes.as_ref(),
            unit: text::WHOLE,
        },
        HistogramFamily {
            name: "rill_group_commit_round_partitions",
            help: "Partitions written by each group-commit round of the shard.",
            get: |s| s.commit_round_partitions.as_ref(),
            unit: text::WHOLE,
        },
        HistogramFamily {
            name: "rill_group_commit_write_duration_seconds",
            help: "The writes of each group-commit round (every partition's DMA writes, run together; with --fsync always each is O_DSYNC, its sync included, unless --fsync-o-dsync false).",
            get: |s| s.commit_write_latency.as_ref(),
            unit: text::SECONDS_FROM_NS,
        },
        HistogramFamily {
            name: "rill_fdatasync_duration_seconds",
            help: "fdatasync of one partition's touched files (run together; none for O_DSYNC segments).",
            get: |s| s.fdatasync_latency.as_ref(),
            unit: text::SECONDS_FROM_NS,
        },
        HistogramFamily {
            name: "rill_high_watermark_checkpoint_duration_seconds",
            help: "Each high-watermark checkpoint of the shard's partitions (files written and synced).",
            get: |s| s.checkpoint_latency.as_ref(),
            unit: text::SECONDS_FROM_NS,
        },
    ];
    for f in histograms {
        t.family(f.name, Kind::Histogram, f.help);
        for s in &ok {
            if let Some(h) = (f.get)(s) {
                t.histogram(f.name, &[("shard", &s.shard.to_string())], h, f.unit);
            }
        }
    }

    let per_shard: [Family<ShardSnapshot>; 8] = [
        Family {
            name: "rill_tail_cache_hits_total",
            kind: Kind::Counter,
            help: "Reads served from the shard's tail cache.",
            get: |s| s.tail_cache_hits,
        },
        Family {
            name: "rill_tail_cache_misses_total",
            kind: Kind::Counter,
            help: "Reads the tail cache did not reach back to (served from the segment files).",
            get: |s| s.tail_cache_misses,
        },
        Family {
            name: "rill_tail_cache_bytes",
            kind: Kind::Gauge,
            help: "Bytes held by the shard's tail cache.",
            get: |s| s.tail_cache_bytes,
        },
        Family {
            name: "rill_tail_cache_budget_bytes",
            kind: Kind::Gauge,
            help: "Bytes the shard's tail cache may hold now: its share of --tail-cache-bytes, \
                   less what it gave back while memory was short.",
            get: |s| s.tail_cache_budget_bytes,
        },
        Family {
            name: "rill_read_ahead_started_total",
            kind: Kind::Counter,
            help: "Copy reads started ahead of the fetch expected to want them.",
            get: |s| s.read_ahead_started,
        },
        Family {
            name: "rill_read_ahead_taken_total",
            kind: Kind::Counter,
            help: "Read-aheads a fetch took (the rest were replaced or dropped).",
            get: |s| s.read_ahead_taken,
        },
        Family {
            name: "rill_read_ahead_evicted_total",
            kind: Kind::Counter,
            help: "Read-aheads dropped to keep within --file-read-ahead-bytes.",
            get: |s| s.read_ahead_evicted,
        },
        Family {
            name: "rill_read_ahead_bytes",
            kind: Kind::Gauge,
            help: "Bytes held by the shard's read-aheads.",
            get: |s| s.read_ahead_bytes,
        },
    ];
    for f in per_shard {
        t.family(f.name, f.kind, f.help);
        for s in &ok {
            t.sample(f.name, &[("shard", &s.shard.to_string())], (f.get)(s));
        }
    }

    t.family(
        "rill_connections",
        Kind::Gauge,
        "Open client connections, per listener.",
    );
    for s in &ok {
        let shard = s.shard.to_string();
        for (l, n) in &s.connections {
            t.sample(
                "rill_connections",
                &[("shard", &shard), ("listener", l.label())],
                *n,
            );
        }
    }

    t.family(
        "rill_tls_handshakes_total",
        Kind::Counter,
        "TLS handshakes per listener and result: ok, failed (refused certificate, bad bytes), \
         timeout (not done within --tls-handshake-timeout-ms).",
    );
    for s in &ok {
        let shard = s.shard.to_string();
        for (l, result, n) in &s.tls_handshakes {
            t.sample(
                "rill_tls_handshakes_total",
                &[
                    ("shard", &shard),
                    ("listener", l.label()),
                    ("result", result),
                ],
                *n,
            );
        }
    }

    let per_partition: [Family<PartitionSnapshot>; 4] = [
        Family {
            name: "rill_partition_bytes_in_total",
            kind: Kind::Counter,
            help: "Stored batch bytes appended to the partition.",
            get: |p| p.bytes_in,
        },
        Family {
            name: "rill_partition_bytes_out_total",
            kind: Kind::Counter,
            help: "Stored batch bytes served to fetches from the partition.",
            get: |p| p.bytes_out,
        },
        Family {
            name: "rill_partition_high_watermark",
            kind: Kind::Gauge,
            help: "The partition's high watermark (the offset after the last acknowledged record).",
            get: |p| p.high_watermark,
        },
        Family {
            name: "rill_partition_log_start_offset",
            kind: Kind::Gauge,
            help: "The partition's first offset still stored.",
            get: |p| p.log_start_offset,
        },
    ];
    for f in per_partition {
        t.family(f.name, f.kind, f.help);
        for s in &ok {
            let shard = s.shard.to_string();
            for p in &s.partitions {
                let partition = p.partition.to_string();
                t.sample(
                    f.name,
                    &[
                        ("shard", &shard),
                        ("topic", &p.topic),
                        ("partition", &partition),
                    ],
                    (f.get)(p),
                );
            }
        }
    }

    // Lag: a group's committed offset lives on its coordinator's shard, the high watermark on
    // the partition's; both are in this scrape.
    let hw: HashMap<(&str, u32), u64> = ok
        .iter()
        .flat_map(|s| s.partitions.iter())
        .map(|p| ((p.topic.as_str(), p.partition), p.high_watermark))
        .collect();
    let mut lag = BTreeMap::new();
    for c in ok.iter().flat_map(|s| s.committed.iter()) {
        if let Some(&h) = hw.get(&(c.topic.as_str(), c.partition)) {
            lag.insert(
                (&c.group, &c.topic, c.partition),
                h.saturating_sub(c.offset),
            );
        }
    }
    t.family(
        "rill_consumer_group_lag",
        Kind::Gauge,
        "High watermark minus the group's committed offset, per partition (at scrape time).",
    );
    for ((group, topic, partition), n) in lag.iter().take(MAX_LAG_SERIES) {
        t.sample(
            "rill_consumer_group_lag",
            &[
                ("group", group),
                ("topic", topic),
                ("partition", &partition.to_string()),
            ],
            *n,
        );
    }
    t.family(
        "rill_consumer_group_lag_omitted",
        Kind::Gauge,
        "Lag series left out of this scrape past the bound of 10000.",
    );
    t.sample(
        "rill_consumer_group_lag_omitted",
        &[],
        lag.len().saturating_sub(MAX_LAG_SERIES) as u64,
    );

    if let Some(c) = controller {
        let gauges: [(&str, &str, u64); 4] = [
            (
                "rill_controller_leader",
                "1 when this node's controller is the raft leader (the active controller).",
                u64::from(c.is_leader),
            ),
            (
                "rill_controller_term",
                "The controller's raft term.",
                c.term,
            ),
            (
                "rill_controller_committed_index",
                "The last raft log index this controller knows committed.",
                c.committed_index,
            ),
            (
                "rill_controller_applied_index",
                "The last raft log index this controller applied to its metadata.",
                c.applied_index,
            ),
        ];
        for (name, help, v) in gauges {
            t.family(name, Kind::Gauge, help);
            t.sample(name, &[], v);
        }
    }
    t.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shard(id: usize) -> ShardSnapshot {
        let m = RequestMetrics::default();
        let timer = m.request(Listener::Native, "Produce", Timed::Produce);
        m.done(timer);
        let timer = m.request(Listener::Kafka, "Metadata", Timed::No);
        m.done(timer);
        m.error(Listener::Kafka, "Produce", "NOT_LEADER_OR_FOLLOWER");
        for _ in 0..3 {
            m.tls_handshake(Listener::Kafka, "failed");
        }
        let mut s = ShardSnapshot {
            shard: id,
            connections: vec![(Listener::Native, 2), (Listener::Kafka, 0)],
            tail_cache_hits: 5,
            ..Default::default()
        };
        m.snapshot_into(&mut s);
        s
    }

    #[test]
    fn a_scrape_renders_every_family_with_its_labels() {
        let mut s0 = shard(0);
        s0.partitions.push(PartitionSnapshot {
            topic: "t".into(),
            partition: 3,
            bytes_in: 1000,
            bytes_out: 500,
            high_watermark: 40,
            log_start_offset: 0,
        });
        let mut s1 = shard(1);
        // The group's coordinator is shard 1; the partition lives on shard 0.
        s1.committed.push(CommittedSnapshot {
            group: "g".into(),
            topic: "t".into(),
            partition: 3,
            offset: 15,
        });
        s1.committed.push(CommittedSnapshot {
            group: "g".into(),
            topic: "gone".into(),
            partition: 0,
            offset: 1,
        });
        let text = render(
            &[(0, Some(s0)), (1, Some(s1)), (2, None)],
            Some(ControllerSnapshot {
                is_leader: true,
                term: 2,
                committed_index: 9,
                applied_index: 8,
            }),
        );
        for line in [
            "rill_shard_up{shard=\"2\"} 0",
            "rill_shard_up{shard=\"1\"} 1",
            "rill_requests_total{shard=\"0\",listener=\"native\",api=\"Produce\"} 1",
            "rill_requests_total{shard=\"1\",listener=\"kafka\",api=\"Metadata\"} 1",
            "rill_request_errors_total{shard=\"1\",listener=\"kafka\",api=\"Produce\",code=\"NOT_LEADER_OR_FOLLOWER\"} 1",
            "rill_produce_duration_seconds_count{shard=\"0\"} 1",
            "rill_fetch_duration_seconds_count{shard=\"1\"} 0",
            "rill_tail_cache_hits_total{shard=\"0\"} 5",
            "rill_connections{shard=\"0\",listener=\"native\"} 2",
            "rill_tls_handshakes_total{shard=\"0\",listener=\"kafka\",result=\"failed\"} 3",
            "rill_partition_bytes_in_total{shard=\"0\",topic=\"t\",partition=\"3\"} 1000",
            "rill_partition_bytes_out_total{shard=\"0\",topic=\"t\",partition=\"3\"} 500",
            "rill_consumer_group_lag{group=\"g\",topic=\"t\",partition=\"3\"} 25",
            "rill_consumer_group_lag_omitted 0",
            "rill_controller_leader 1",
            "rill_controller_term 2",
            "rill_controller_committed_index 9",
            "rill_controller_applied_index 8",
        ] {
            assert!(text.lines().any(|l| l == line), "missing {line:?} in\n{text}");
        }
        assert!(
            !text.contains("topic=\"gone\""),
            "no lag without a high watermark"
        );
        // One HELP and one TYPE per family, each family's samples together.
        let mut seen = std::collections::HashSet::new();
        let mut current = String::new();
        for l in text.lines() {
            if let Some(rest) = l.strip_prefix("# TYPE ") {
                let name = rest.split(' ').next().unwrap().to_string();
                assert!(seen.insert(name.clone()), "{name} typed twice");
                current = name;
            } else if !l.starts_with('#') {
                assert!(l.starts_with(&current), "{l} outside its family {current}");
            }
        }
    }

    #[test]
    fn lag_series_are_bounded() {
        let mut s = ShardSnapshot::default();
        s.partitions.push(PartitionSnapshot {
            topic: "t".into(),
            partition: 0,
            high_watermark: 10,
            ..Default::default()
        });
        for g in 0..MAX_LAG_SERIES + 5 {
            s.committed.push(CommittedSnapshot {
                group: format!("g{g}"),
                topic: "t".into(),
                partition: 0,
                offset: 20,
            });
        }
        let text = render(&[(0, Some(s))], None);
        let n = text
            .lines()
            .filter(|l| l.starts_with("rill_consumer_group_lag{"))
            .count();
        assert_eq!(n, MAX_LAG_SERIES);
        assert!(text.contains("\nrill_consumer_group_lag_omitted 5\n"));
        assert!(
            text.contains("rill_consumer_group_lag{group=\"g0\",topic=\"t\",partition=\"0\"} 0\n"),
            "a committed offset past the high watermark is lag 0"
        );
        assert!(
            !text.contains("rill_controller_"),
            "no controller, no controller series"
        );
    }
}
