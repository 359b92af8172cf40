//! The knobs every client workload shares, and the pieces they are built from: a producer
//! loop (closed or open loop at a fixed rate) and a consumer loop.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Args;
use hdrhistogram::Histogram;
use rill::client::{
    Acks, Client, ClientConfig, Consumer, ConsumerConfig, DeliveryFuture, Producer, ProducerConfig,
    ProducerRecord, StartFrom,
};

use crate::progress::Progress;
use crate::report::{new_histogram, record};

#[derive(Args, Debug, Clone)]
pub struct LoadArgs {
    #[arg(short = 'b', long, default_value = "127.0.0.1:9292")]
    pub bootstrap: String,
    #[arg(long, default_value = "rill-bench")]
    pub topic: String,
    /// Partitions of the topic, created if missing.
    #[arg(long, default_value_t = 2)]
    pub partitions: u32,
    /// Messages to send (or read); ignored when --duration-secs is set.
    #[arg(long, default_value_t = 1_000_000)]
    pub messages: u64,
    /// Run for this long instead of a message count.
    #[arg(long)]
    pub duration_secs: Option<f64>,
    #[arg(long, default_value_t = 1024)]
    pub message_bytes: usize,
    /// Target messages per second over all producers (open loop); 0 = as fast as possible.
    #[arg(long, default_value_t = 0)]
    pub rate: u64,
    #[arg(long, default_value_t = 1)]
    pub producers: usize,
    #[arg(long, default_value_t = 1)]
    pub consumers: usize,
    /// Give each message a key (else sticky partitioning).
    #[arg(long)]
    pub keyed: bool,
    /// 0 | 1 | all
    #[arg(long, default_value = "1")]
    pub acks: String,
    #[arg(long, default_value_t = 5)]
    pub linger_ms: u64,
    #[arg(long, default_value_t = 1 << 20)]
    pub batch_bytes: usize,
    /// Requests in flight per connection.
    #[arg(long, default_value_t = 5)]
    pub max_in_flight: usize,
    /// Seconds at the start whose latencies are not recorded.
    #[arg(long, default_value_t = 0.0)]
    pub warmup_secs: f64,
    /// Write an HdrHistogram interval log here (one interval covering the measured run).
    #[arg(long)]
    pub histogram_log: Option<std::path::PathBuf>,
    /// Write an SVG latency distribution here.
    #[arg(long)]
    pub plot: Option<std::path::PathBuf>,
}

impl LoadArgs {
    pub fn producer_config(&self) -> Result<ProducerConfig, String> {
        Ok(ProducerConfig {
            acks: self
                .acks
                .parse::<Acks>()
                .map_err(|e| format!("--acks: {e}"))?,
            linger: Duration::from_millis(self.linger_ms),
            batch_bytes: self.batch_bytes.max(1),
            max_in_flight: self.max_in_flight.max(1),
            ..ProducerConfig::default()
        })
    }

    /// The topic, created with `--partitions` when missing.
    pub fn ensure_topic(&self) -> Result<u32, String> {
        let mut admin =
            Client::connect(ClientConfig::new(&self.bootstrap)).map_err(|e| e.to_string())?;
        if let Ok(n) = admin.metadata().partitions(&self.topic) {
            return Ok(n);
        }
        admin
            .create_topic(&self.topic, self.partitions, 1, vec![])
            .map_err(|e| e.to_string())?;
        Ok(self.partitions)
    }

    pub fn deadline(&self, start: Instant) -> Option<Instant> {
        self.duration_secs
            .map(|s| start + Duration::from_secs_f64(s.max(0.0)))
    }

    pub fn settings(&self) -> serde_json::Value {
        serde_json::json!({
            "topic": self.topic, "partitions": self.partitions, "message_bytes": self.message_bytes,
            "rate": self.rate, "producers": self.producers, "consumers": self.consumers,
            "keyed": self.keyed, "acks": self.acks, "linger_ms": self.linger_ms,
            "batch_bytes": self.batch_bytes, "max_in_flight": self.max_in_flight,
            "warmup_secs": self.warmup_secs, "duration_secs": self.duration_secs,
        })
    }
}

/// Epoch-relative nanoseconds, stamped into each message for end-to-end latency.
pub fn stamp(value: &mut [u8], base: Instant, at: Instant) {
    let nanos = at.saturating_duration_since(base).as_nanos() as u64;
    if value.len() >= 8 {
        value[..8].copy_from_slice(&nanos.to_le_bytes());
    }
}

pub fn read_stamp(value: &[u8], base: Instant) -> Option<Instant> {
    let nanos = u64::from_le_bytes(value.get(..8)?.try_into().ok()?);
    Some(base + Duration::from_nanos(nanos))
}

/// What a producer thread measured.
pub struct ProducerResult {
    pub sent: u64,
    pub ack_latency: Histogram<u64>,
}

/// One producer thread's loop. With a rate, each message has an intended send time and the
/// acknowledgement latency is measured from it (coordinated omission corrected); the value
/// carries the intended time so consumers can measure end to end.
#[allow(clippy::too_many_arguments)]
pub fn run_producer(
    a: &LoadArgs,
    id: usize,
    count: u64,
    base: Instant,
    warmup_end: Instant,
    deadline: Option<Instant>,
    progress: &Progress,
    stop: &AtomicBool,
) -> Result<ProducerResult, String> {
    let p = Producer::new(ClientConfig::new(&a.bootstrap), a.producer_config()?)
        .map_err(|e| e.to_string())?;
    let per_thread_rate = a.rate as f64 / a.producers.max(1) as f64;
    let (tx, rx) = flume::bounded::<(Instant, DeliveryFuture)>(1 << 16);
    let waiter = std::thread::spawn(move || -> Result<Histogram<u64>, String> {
        let mut h = new_histogram();
        for (intended, report) in rx.iter() {
            report.wait().map_err(|e| e.to_string())?;
            if intended >= warmup_end {
                record(&mut h, intended.elapsed());
            }
        }
        Ok(h)
    });
    let mut value = vec![b'v'; a.message_bytes.max(8)];
    let start = Instant::now();
    let mut sent = 0u64;
    while sent < count && !stop.load(Ordering::Relaxed) {
        let intended = if per_thread_rate > 0.0 {
            let at = start + Duration::from_secs_f64(sent as f64 / per_thread_rate);
            let now = Instant::now();
            if at > now {
                std::thread::sleep(at - now);
            }
            at
        } else {
            Instant::now()
        };
        if deadline.is_some_and(|d| intended >= d) {
            break;
        }
        stamp(&mut value, base, intended);
        let key = a.keyed.then(|| format!("k{id}-{}", sent % 1024));
        let mut rec = ProducerRecord::new(&a.topic, &value);
        rec.key = key.as_deref().map(str::as_bytes);
        let report = p.send(rec).map_err(|e| e.to_string())?;
        if tx.send((intended, report)).is_err() {
            break;
        }
        sent += 1;
        if sent.is_multiple_of(1024) {
            progress.add(1024);
        }
    }
    drop(tx);
    p.flush().map_err(|e| e.to_string())?;
    let ack_latency = waiter
        .join()
        .map_err(|_| "waiter thread panicked".to_string())??;
    Ok(ProducerResult { sent, ack_latency })
}

/// What a consumer thread measured.
pub struct ConsumerResult {
    pub received: u64,
    pub bytes: u64,
    /// End to end: receive time minus the intended send time stamped in the value.
    pub latency: Histogram<u64>,
}

/// Reads `partitions` of the topic from `from` until `count` messages or `stop`.
#[allow(clippy::too_many_arguments)]
pub fn run_consumer(
    a: &LoadArgs,
    partitions: Vec<u32>,
    from: StartFrom,
    count: u64,
    base: Option<(Instant, Instant)>,
    stop: &AtomicBool,
    total: &AtomicU64,
    idle_limit: Option<Duration>,
    assigned: flume::Sender<()>,
) -> Result<ConsumerResult, String> {
    let mut c = Consumer::new(
        ClientConfig::new(&a.bootstrap),
        ConsumerConfig {
            fetch_max_wait: Duration::from_millis(100),
            ..ConsumerConfig::default()
        },
    )
    .map_err(|e| e.to_string())?;
    c.assign(&a.topic, Some(partitions), from)
        .map_err(|e| e.to_string())?;
    let _ = assigned.send(());
    let mut latency = new_histogram();
    let (mut received, mut bytes) = (0u64, 0u64);
    let mut idle_since = Instant::now();
    while received < count && !stop.load(Ordering::Relaxed) {
        let records = c
            .poll(Duration::from_millis(200))
            .map_err(|e| e.to_string())?;
        if records.is_empty() {
            if idle_limit.is_some_and(|l| idle_since.elapsed() > l) {
                return Err(format!(
                    "no message for {:?} after {received}",
                    idle_since.elapsed()
                ));
            }
            continue;
        }
        idle_since = Instant::now();
        let now = Instant::now();
        for r in records.iter() {
            received += 1;
            bytes += r.value().len() as u64;
            if let Some((base, warmup_end)) = base {
                if let Some(intended) = read_stamp(r.value(), base) {
                    if intended >= warmup_end {
                        record(&mut latency, now.saturating_duration_since(intended));
                    }
                }
            }
        }
        total.fetch_add(records.count() as u64, Ordering::Relaxed);
    }
    Ok(ConsumerResult {
        received,
        bytes,
        latency,
    })
}

/// Spreads partitions over consumers round-robin.
pub fn split_partitions(partitions: u32, consumers: usize) -> Vec<Vec<u32>> {
    let n = consumers.clamp(1, partitions.max(1) as usize);
    let mut out = vec![Vec::new(); n];
    for p in 0..partitions {
        out[p as usize % n].push(p);
    }
    out
}

pub fn shared_flag() -> Arc<AtomicBool> {
    Arc::new(AtomicBool::new(false))
}
