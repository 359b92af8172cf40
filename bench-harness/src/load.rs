//! The knobs every client workload shares, and the pieces they are built from: a producer
//! loop (closed or open loop at a fixed rate) and a consumer loop, each through either driver:
//! rill's own client (`--driver native`) or librdkafka (`--driver kafka`, `kafka_driver.rs`).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::{Args, ValueEnum};
use hdrhistogram::Histogram;
use rill::client::{
    Acks, Client, ClientConfig, Consumer, ConsumerConfig, DeliveryFuture, Producer, ProducerConfig,
    ProducerRecord, RequestObserver, RequestTiming, StartFrom, TransactionConfig,
    TransactionalProducer,
};

use crate::kafka_driver;
use crate::progress::Progress;
use crate::report::{new_histogram, record};

/// The client a workload drives the broker with.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Driver {
    /// rill's own protocol and client library.
    Native,
    /// The Kafka protocol through librdkafka: rill's Kafka listener or any Kafka-API broker.
    Kafka,
}

impl Driver {
    pub fn name(self) -> &'static str {
        match self {
            Driver::Native => "native",
            Driver::Kafka => "kafka",
        }
    }
}

#[derive(Args, Debug, Clone)]
pub struct LoadArgs {
    /// native (rill's protocol) or kafka (librdkafka, any Kafka-API broker).
    #[arg(long, value_enum, default_value_t = Driver::Native)]
    pub driver: Driver,
    /// Broker address [default: 127.0.0.1:9292 with --driver native, 127.0.0.1:9092 with kafka]
    #[arg(short = 'b', long)]
    pub bootstrap: Option<String>,
    /// With --driver native: connect over TLS trusting this CA (PEM); with --driver kafka
    /// set librdkafka's security.protocol=ssl and ssl.ca.location with --kafka-config.
    #[arg(long, value_name = "FILE")]
    pub tls_ca: Option<std::path::PathBuf>,
    /// With --driver kafka: a librdkafka property, set last (repeat for more).
    #[arg(long = "kafka-config", value_name = "KEY=VALUE")]
    pub kafka_config: Vec<String>,
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
    /// With --rate: each producer sends its messages in bursts of this many, back to back,
    /// all with the burst's intended send time, to the producer's own partition (keyless:
    /// producer i to partition i mod --partitions), and flushes at the end of each burst: with
    /// a linger longer than a burst takes to send, a burst is one batch, answered before the
    /// next (Iggy's pinned producers send batches of -P messages at its rate, one at a time).
    /// 1 = each message at its own time, no flush.
    #[arg(long, default_value_t = 1)]
    pub burst: u64,
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
    /// Bytes of one partition's batches a produce request carries at most (at least one
    /// batch; native driver; the client's default). With --max-in-flight 1 and a batch's
    /// size, one batch in flight per connection, as Iggy's bench sends.
    #[arg(long, default_value_t = rill::client::DEFAULT_PARTITION_REQUEST_BYTES)]
    pub partition_request_bytes: usize,
    /// The idempotent producer (producer id and sequences): on | off. The native client's
    /// default is on; the Kafka driver turns librdkafka's on only with acks=all (it refuses
    /// idempotence with other acks).
    #[arg(long, default_value = "on", value_parser = ["on", "off"])]
    pub idempotence: String,
    /// Produce in transactions of this many messages each (rill's `TransactionalProducer`,
    /// or librdkafka's with --driver kafka; one transactional id per producer thread; the
    /// commit waits for every message of the transaction); 0 = no transactions.
    #[arg(long, default_value_t = 0)]
    pub records_per_txn: u64,
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
    /// `--bootstrap`, or the driver's default port (rill's native and Kafka listeners).
    /// The native client's settings: the broker, and TLS with --tls-ca.
    pub fn client_config(&self) -> Result<ClientConfig, String> {
        let mut cfg = ClientConfig::new(self.bootstrap());
        if let Some(ca) = &self.tls_ca {
            cfg.tls = Some(rill::tls::ClientTls::load(ca, None, None).map_err(|e| e.to_string())?);
        }
        Ok(cfg)
    }

    pub fn bootstrap(&self) -> &str {
        match (&self.bootstrap, self.driver) {
            (Some(b), _) => b,
            (None, Driver::Native) => "127.0.0.1:9292",
            (None, Driver::Kafka) => "127.0.0.1:9092",
        }
    }

    /// `--idempotence on`.
    pub fn idempotent(&self) -> bool {
        self.idempotence == "on"
    }

    pub fn acks(&self) -> Result<Acks, String> {
        self.acks
            .parse::<Acks>()
            .map_err(|e| format!("--acks: {e}"))
    }

    pub fn producer_config(&self) -> Result<ProducerConfig, String> {
        Ok(ProducerConfig {
            acks: self.acks()?,
            linger: Duration::from_millis(self.linger_ms),
            batch_bytes: self.batch_bytes.max(1),
            max_in_flight: self.max_in_flight.max(1),
            partition_request_bytes: self.partition_request_bytes,
            idempotence: self.idempotent(),
            ..ProducerConfig::default()
        })
    }

    /// The topic, created with `--partitions` when missing; its partition count.
    pub fn ensure_topic(&self) -> Result<u32, String> {
        if self.driver == Driver::Kafka {
            return kafka_driver::ensure_topic(self);
        }
        let mut admin = Client::connect(self.client_config()?).map_err(|e| e.to_string())?;
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
        let client = match self.driver {
            Driver::Native => format!("rill {}", env!("CARGO_PKG_VERSION")),
            Driver::Kafka => kafka_driver::client_name(),
        };
        let mut v = serde_json::json!({
            "driver": self.driver.name(), "client": client,
            "topic": self.topic, "partitions": self.partitions, "message_bytes": self.message_bytes,
            "rate": self.rate, "burst": self.burst, "producers": self.producers,
            "consumers": self.consumers,
            "keyed": self.keyed, "acks": self.acks, "linger_ms": self.linger_ms,
            "batch_bytes": self.batch_bytes, "max_in_flight": self.max_in_flight,
            "partition_request_bytes": self.partition_request_bytes,
            "idempotence": self.idempotence,
            "warmup_secs": self.warmup_secs, "duration_secs": self.duration_secs,
        });
        if !self.kafka_config.is_empty() {
            v["kafka_config"] = self.kafka_config.clone().into();
        }
        v
    }
}

/// Epoch-relative nanoseconds, stamped into each message for end-to-end latency.
/// Where a value carries a time: the intended send time, then the time `send` was called.
#[derive(Clone, Copy)]
pub enum Stamp {
    Intended = 0,
    Sent = 8,
}

/// Writes `at` (nanoseconds after `base`) into the value's `which` slot, if it has room.
pub fn stamp(value: &mut [u8], which: Stamp, base: Instant, at: Instant) {
    let nanos = at.saturating_duration_since(base).as_nanos() as u64;
    if let Some(slot) = value.get_mut(which as usize..which as usize + 8) {
        slot.copy_from_slice(&nanos.to_le_bytes());
    }
}

pub fn read_stamp(value: &[u8], which: Stamp, base: Instant) -> Option<Instant> {
    let at = which as usize;
    let nanos = u64::from_le_bytes(value.get(at..at + 8)?.try_into().ok()?);
    Some(base + Duration::from_nanos(nanos))
}

/// What a producer thread measured.
pub struct ProducerResult {
    pub sent: u64,
    pub ack_latency: Histogram<u64>,
    /// Per produce request, from its write to the socket to its response (requests written
    /// after warm-up); `None` where the driver cannot tell (Kafka).
    pub request_latency: Option<Histogram<u64>>,
    /// When the last acknowledgement was in (before the client was torn down).
    pub finished: Instant,
}

/// Where a producer loop's messages go: rill's client or librdkafka.
pub trait MessageSink {
    /// Hands one message over, to be acknowledged later, to `partition` if given (else by
    /// key or the sticky partitioner). `Ok(false)`: the sink stopped (a delivery failed),
    /// `finish` says why.
    fn send(
        &mut self,
        key: Option<&[u8]>,
        partition: Option<u32>,
        value: &[u8],
        intended: Instant,
    ) -> Result<bool, String>;
    /// Waits for every acknowledgement; the latencies of those intended after warm-up.
    fn finish(&mut self) -> Result<Histogram<u64>, String>;
    /// Sends what is buffered now and waits for its acknowledgements: the end of a burst.
    fn flush(&mut self) -> Result<(), String>;
    /// After `finish`: the round trip of each produce request written after warm-up, if the
    /// driver sees its requests (librdkafka's are not visible per request: `None`).
    fn request_latency(&mut self) -> Option<Histogram<u64>> {
        None
    }
}

/// rill's producer, plain or in transactions of `per_txn` messages.
enum NativeProducer {
    Plain(Producer),
    Transactional {
        producer: Box<TransactionalProducer>,
        per_txn: u64,
        /// Messages sent in the open transaction.
        in_txn: u64,
    },
}

/// Numbers the transactional producers of one run (each needs its own transactional id).
static NEXT_TRANSACTIONAL_ID: AtomicU64 = AtomicU64::new(0);

/// A transactional id for a new producer thread of this run (either driver).
pub fn transactional_id() -> String {
    let n = NEXT_TRANSACTIONAL_ID.fetch_add(1, Ordering::Relaxed);
    format!("rill-bench-{}-{n}", std::process::id())
}

impl NativeProducer {
    fn new(a: &LoadArgs, observer: Option<RequestObserver>) -> Result<NativeProducer, String> {
        let cfg = ProducerConfig {
            request_observer: observer,
            ..a.producer_config()?
        };
        if a.records_per_txn == 0 {
            return Producer::new(a.client_config()?, cfg)
                .map(NativeProducer::Plain)
                .map_err(|e| e.to_string());
        }
        let txn = TransactionConfig {
            transactional_id: transactional_id(),
            transaction_timeout: Duration::from_secs(120),
        };
        let producer = TransactionalProducer::init(a.client_config()?, cfg, txn)
            .map_err(|e| format!("transactional producer: {e}"))?;
        Ok(NativeProducer::Transactional {
            producer: Box::new(producer),
            per_txn: a.records_per_txn,
            in_txn: 0,
        })
    }

    fn send(&mut self, rec: ProducerRecord<'_>) -> Result<DeliveryFuture, String> {
        match self {
            NativeProducer::Plain(p) => p.send(rec).map_err(|e| e.to_string()),
            NativeProducer::Transactional {
                producer,
                per_txn,
                in_txn,
            } => {
                if *in_txn == 0 {
                    producer.begin().map_err(|e| format!("begin: {e}"))?;
                }
                let report = producer.send(rec).map_err(|e| e.to_string())?;
                *in_txn += 1;
                if *in_txn == *per_txn {
                    *in_txn = 0;
                    producer.commit().map_err(|e| format!("commit: {e}"))?;
                }
                Ok(report)
            }
        }
    }

    /// Sends what is buffered (committing an open transaction) and waits for it.
    fn flush(&mut self) -> Result<(), String> {
        if let NativeProducer::Transactional {
            producer, in_txn, ..
        } = self
        {
            if *in_txn > 0 {
                *in_txn = 0;
                producer.commit().map_err(|e| format!("commit: {e}"))?;
            }
        }
        self.send_buffered()
    }

    /// Sends what is buffered and waits for it; an open transaction stays open.
    fn send_buffered(&self) -> Result<(), String> {
        match self {
            NativeProducer::Plain(p) => p.flush(),
            NativeProducer::Transactional { producer, .. } => producer.flush(),
        }
        .map_err(|e| e.to_string())
    }
}

/// Delivery reports handed to the waiter at once: one channel send per this many records,
/// not one per record (the hand-off cost the producing thread as much as the send itself).
const REPORT_CHUNK: usize = 256;

/// rill's producer; a waiter thread takes the delivery futures in send order, in chunks, and
/// times each from its intended send time to when its report was settled (so the waiter's
/// own delay never counts).
struct NativeSink {
    producer: NativeProducer,
    topic: String,
    pending: Vec<(Instant, DeliveryFuture)>,
    tx: Option<flume::Sender<Vec<(Instant, DeliveryFuture)>>>,
    waiter: Option<std::thread::JoinHandle<Result<Histogram<u64>, String>>>,
    /// Filled by the producer's request observer on its connections' reader threads (one
    /// lock per request, never per record; uncontended but for the producer's few shards).
    requests: Arc<Mutex<Histogram<u64>>>,
}

/// An observer recording each answered request's round trip, if written after `warmup_end`.
fn request_recorder(h: Arc<Mutex<Histogram<u64>>>, warmup_end: Instant) -> RequestObserver {
    RequestObserver(Arc::new(move |t: RequestTiming| {
        if t.written >= warmup_end {
            let mut h = h.lock().unwrap_or_else(|e| e.into_inner());
            record(&mut h, t.answered.saturating_duration_since(t.written));
        }
    }))
}

impl NativeSink {
    fn new(a: &LoadArgs, warmup_end: Instant) -> Result<NativeSink, String> {
        let requests = Arc::new(Mutex::new(new_histogram()));
        let observer = request_recorder(requests.clone(), warmup_end);
        let producer = NativeProducer::new(a, Some(observer))?;
        let (tx, rx) = flume::bounded::<Vec<(Instant, DeliveryFuture)>>((1 << 16) / REPORT_CHUNK);
        let waiter = std::thread::spawn(move || -> Result<Histogram<u64>, String> {
            let mut h = new_histogram();
            for (intended, report) in rx.iter().flatten() {
                let (result, settled) = report.wait_settled();
                result.map_err(|e| e.to_string())?;
                if intended >= warmup_end {
                    record(&mut h, settled.saturating_duration_since(intended));
                }
            }
            Ok(h)
        });
        Ok(NativeSink {
            producer,
            topic: a.topic.clone(),
            pending: Vec::with_capacity(REPORT_CHUNK),
            tx: Some(tx),
            waiter: Some(waiter),
            requests,
        })
    }
}

impl MessageSink for NativeSink {
    fn send(
        &mut self,
        key: Option<&[u8]>,
        partition: Option<u32>,
        value: &[u8],
        intended: Instant,
    ) -> Result<bool, String> {
        let mut rec = ProducerRecord::new(&self.topic, value);
        rec.key = key;
        rec.partition = partition;
        let report = self.producer.send(rec)?;
        self.pending.push((intended, report));
        if self.pending.len() < REPORT_CHUNK {
            return Ok(true);
        }
        let tx = self.tx.as_ref().ok_or("send after finish")?;
        let chunk = std::mem::replace(&mut self.pending, Vec::with_capacity(REPORT_CHUNK));
        Ok(tx.send(chunk).is_ok())
    }

    fn flush(&mut self) -> Result<(), String> {
        // An open transaction stays open: its size is `--records-per-txn`'s.
        self.producer.send_buffered()
    }

    fn finish(&mut self) -> Result<Histogram<u64>, String> {
        if let Some(tx) = self.tx.take() {
            let _ = tx.send(std::mem::take(&mut self.pending));
        }
        self.producer.flush()?;
        self.waiter
            .take()
            .ok_or("finished twice")?
            .join()
            .map_err(|_| "waiter thread panicked".to_string())?
    }

    fn request_latency(&mut self) -> Option<Histogram<u64>> {
        // After the flush every request is answered: no observer call is still to come.
        let mut h = self.requests.lock().unwrap_or_else(|e| e.into_inner());
        Some(std::mem::replace(&mut *h, new_histogram()))
    }
}

/// When a paced producer means to send its message number `sent`, from its start: the
/// message's burst's turn at `rate` messages per second.
fn intended_offset(sent: u64, burst: u64, rate: f64) -> Duration {
    let burst_start = sent - sent % burst.max(1);
    Duration::from_secs_f64(burst_start as f64 / rate)
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
    let mut sink: Box<dyn MessageSink> = match a.driver {
        Driver::Native => Box::new(NativeSink::new(a, warmup_end)?),
        Driver::Kafka => Box::new(kafka_driver::KafkaSink::new(a, base, warmup_end)?),
    };
    let per_thread_rate = a.rate as f64 / a.producers.max(1) as f64;
    // A paced burst of keyless messages goes to one partition, the producer's own, so that it
    // is one batch (the sticky partitioner counts bytes across batches and would split it):
    // Iggy's pinned producers.
    let pinned = (per_thread_rate > 0.0 && a.burst > 1 && !a.keyed)
        .then(|| u32::try_from(id).unwrap_or(u32::MAX) % a.partitions.max(1));
    let mut value = vec![b'v'; a.message_bytes.max(8)];
    let start = Instant::now();
    let mut sent = 0u64;
    while sent < count && !stop.load(Ordering::Relaxed) {
        let intended = if per_thread_rate > 0.0 {
            let at = start + intended_offset(sent, a.burst, per_thread_rate);
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
        stamp(&mut value, Stamp::Intended, base, intended);
        let key = a.keyed.then(|| format!("k{id}-{}", sent % 1024));
        // The time of the call too: latency from it is what a bench without coordinated
        // omission correction (Iggy's) reports. Unpaced, that is the intended time just read
        // (a clock read per message is 2% of the producing thread).
        let sent_at = if per_thread_rate > 0.0 {
            Instant::now()
        } else {
            intended
        };
        stamp(&mut value, Stamp::Sent, base, sent_at);
        if !sink.send(key.as_deref().map(str::as_bytes), pinned, &value, intended)? {
            break;
        }
        sent += 1;
        if per_thread_rate > 0.0 && a.burst > 1 && sent.is_multiple_of(a.burst) {
            sink.flush()?;
        }
        if sent.is_multiple_of(1024) {
            progress.add(1024);
        }
    }
    let ack_latency = sink.finish()?;
    let finished = Instant::now();
    let request_latency = sink.request_latency();
    drop(sink);
    Ok(ProducerResult {
        sent,
        ack_latency,
        request_latency,
        finished,
    })
}

/// What a consumer thread measured.
pub struct ConsumerResult {
    pub received: u64,
    pub bytes: u64,
    /// End to end: receive time minus the intended send time stamped in the value.
    pub latency: Histogram<u64>,
    /// End to end from the `send` call instead (no coordinated omission correction).
    pub latency_from_send: Histogram<u64>,
    /// When the last record arrived.
    pub last_record: Option<Instant>,
}

/// A consumer's counts and end-to-end latencies, whatever the driver.
pub struct Tally {
    received: u64,
    bytes: u64,
    latency: Histogram<u64>,
    latency_from_send: Histogram<u64>,
    last_record: Option<Instant>,
    /// (stamp base, warm-up end) when end-to-end latency is measured.
    base: Option<(Instant, Instant)>,
}

impl Tally {
    pub fn new(base: Option<(Instant, Instant)>) -> Tally {
        Tally {
            received: 0,
            bytes: 0,
            latency: new_histogram(),
            latency_from_send: new_histogram(),
            last_record: None,
            base,
        }
    }

    pub fn received(&self) -> u64 {
        self.received
    }

    /// One record, received at `now`.
    pub fn record(&mut self, value: &[u8], now: Instant) {
        self.received += 1;
        self.bytes += value.len() as u64;
        self.last_record = Some(now);
        if let Some((base, warmup_end)) = self.base {
            if let Some(intended) = read_stamp(value, Stamp::Intended, base) {
                if intended >= warmup_end {
                    record(&mut self.latency, now.saturating_duration_since(intended));
                    if let Some(sent) = read_stamp(value, Stamp::Sent, base) {
                        record(
                            &mut self.latency_from_send,
                            now.saturating_duration_since(sent),
                        );
                    }
                }
            }
        }
    }

    pub fn into_result(self) -> ConsumerResult {
        ConsumerResult {
            received: self.received,
            bytes: self.bytes,
            latency: self.latency,
            latency_from_send: self.latency_from_send,
            last_record: self.last_record,
        }
    }
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
    if a.driver == Driver::Kafka {
        return kafka_driver::run_consumer(
            a, partitions, from, count, base, stop, total, idle_limit, assigned,
        );
    }
    let mut c = Consumer::new(
        a.client_config()?,
        ConsumerConfig {
            fetch_max_wait: Duration::from_millis(100),
            ..ConsumerConfig::default()
        },
    )
    .map_err(|e| e.to_string())?;
    c.assign(&a.topic, Some(partitions), from)
        .map_err(|e| e.to_string())?;
    let _ = assigned.send(());
    let mut tally = Tally::new(base);
    let mut idle_since = Instant::now();
    while tally.received < count && !stop.load(Ordering::Relaxed) {
        let records = c
            .poll(Duration::from_millis(200))
            .map_err(|e| e.to_string())?;
        if records.is_empty() {
            if idle_limit.is_some_and(|l| idle_since.elapsed() > l) {
                return Err(format!(
                    "no message for {:?} after {}",
                    idle_since.elapsed(),
                    tally.received
                ));
            }
            continue;
        }
        idle_since = Instant::now();
        let now = Instant::now();
        for r in records.iter() {
            tally.record(r.value().unwrap_or_default(), now);
        }
        total.fetch_add(records.count() as u64, Ordering::Relaxed);
    }
    Ok(tally.into_result())
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

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        load: LoadArgs,
    }

    fn args(a: &[&str]) -> LoadArgs {
        Cli::parse_from(std::iter::once("rill-bench").chain(a.iter().copied())).load
    }

    #[test]
    fn each_driver_defaults_to_its_listener() {
        let native = args(&[]);
        assert_eq!(native.driver, Driver::Native);
        assert_eq!(native.bootstrap(), "127.0.0.1:9292");
        assert_eq!(args(&["--driver", "kafka"]).bootstrap(), "127.0.0.1:9092");
        let given = args(&["--driver", "kafka", "-b", "10.0.0.1:9"]);
        assert_eq!(given.bootstrap(), "10.0.0.1:9");
    }

    #[test]
    fn settings_name_the_driver_and_its_client() {
        let s = args(&["--driver", "kafka", "--kafka-config", "check.crcs=true"]).settings();
        assert_eq!(s["driver"], "kafka");
        assert!(s["client"].as_str().unwrap().starts_with("librdkafka 2."));
        assert_eq!(s["kafka_config"][0], "check.crcs=true");
        let s = args(&[]).settings();
        assert_eq!(s["driver"], "native");
        assert!(s.get("kafka_config").is_none());
    }

    #[test]
    fn a_burst_shares_its_first_message_s_send_time() {
        let at = |sent, burst| intended_offset(sent, burst, 1000.0).as_micros();
        assert_eq!(
            (0..4).map(|i| at(i, 1)).collect::<Vec<_>>(),
            [0, 1000, 2000, 3000]
        );
        assert_eq!(
            (0..7).map(|i| at(i, 3)).collect::<Vec<_>>(),
            [0, 0, 0, 3000, 3000, 3000, 6000]
        );
        assert_eq!(at(5, 0), at(5, 1));
    }

    #[test]
    fn a_kafka_config_without_a_value_is_refused() {
        let a = args(&["--driver", "kafka", "--kafka-config", "linger.ms"]);
        let now = Instant::now();
        // Building the producer contacts no broker; the bad property stops it first.
        match kafka_driver::KafkaSink::new(&a, now, now) {
            Err(e) => assert!(e.contains("expected KEY=VALUE"), "{e}"),
            Ok(_) => panic!("--kafka-config linger.ms was accepted"),
        }
    }
}
