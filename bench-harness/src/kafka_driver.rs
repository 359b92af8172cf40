//! `--driver kafka`: the same workloads through librdkafka (the `rdkafka` crate), against
//! rill's Kafka listener or any Kafka-API broker, so one tool measures both and the results
//! compare as ratios. The producer loop, the histograms and the JSON are the native driver's;
//! only the client differs.
//!
//! Settings map to librdkafka's names: `--acks` -> `acks`, `--linger-ms` -> `linger.ms`,
//! `--batch-bytes` -> `batch.size` (librdkafka also caps a batch at `message.max.bytes`,
//! 1,000,000 by default, as Kafka's broker does), `--max-in-flight` ->
//! `max.in.flight.requests.per.connection`; Nagle off; compression none; no idempotence
//! (rill's own producer has none, and rill's Kafka listener hands out producer ids without
//! checking sequences); Kafka's murmur2 partitioner; rill's client defaults for the buffer
//! (64 MiB), delivery timeout (120 s) and fetch sizes.
//! Consumers are assigned their partitions (no group membership, no commits); librdkafka's
//! `assign` wants a `group.id` all the same, so each consumer names a group of its own that
//! it never joins. `--kafka-config KEY=VALUE` sets any other property.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::Message;
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer};
use rdkafka::{ClientContext, Offset, TopicPartitionList};
use rill::client::StartFrom;

use crate::load::{ConsumerResult, LoadArgs, MessageSink, Tally};
use crate::report::{new_histogram, record};

/// Metadata, watermark and admin calls give up after this long.
const ADMIN_TIMEOUT: Duration = Duration::from_secs(30);
/// A metadata request gives up after this long (an unreachable broker is reported this late:
/// librdkafka retries connections until then).
const METADATA_TIMEOUT: Duration = Duration::from_secs(10);

/// "librdkafka 2.12.1", for the JSON settings.
pub fn client_name() -> String {
    format!("librdkafka {}", rdkafka::util::get_rdkafka_version().1)
}

fn base_config(a: &LoadArgs) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", a.bootstrap())
        .set("client.id", "rill-bench")
        // TCP_NODELAY, as rill's client and Kafka's Java client always set it (librdkafka's
        // default leaves Nagle on).
        .set("socket.nagle.disable", "true");
    c
}

/// `--kafka-config KEY=VALUE` over `c`.
fn with_overrides(a: &LoadArgs, mut c: ClientConfig) -> Result<ClientConfig, String> {
    for kv in &a.kafka_config {
        let (k, v) = kv
            .split_once('=')
            .ok_or_else(|| format!("--kafka-config {kv}: expected KEY=VALUE"))?;
        c.set(k.trim(), v.trim());
    }
    Ok(c)
}

fn consumer_config(a: &LoadArgs) -> ClientConfig {
    let mut c = base_config(a);
    c.set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("enable.partition.eof", "false")
        .set("allow.auto.create.topics", "false")
        .set("auto.offset.reset", "earliest")
        // rill's consumer as rill-bench configures it: 100 ms long polls, its fetch sizes.
        .set("fetch.wait.max.ms", "100")
        .set("fetch.min.bytes", "1")
        .set("fetch.max.bytes", (16 << 20).to_string())
        .set("max.partition.fetch.bytes", (4 << 20).to_string())
        // Once a partition's queue is past queued.max.messages.kbytes (64 MiB), librdkafka
        // fetches it again only after this wait (1 s by default), however soon the queue
        // drains: against a broker that answers 4 MiB at once, a consume from the start spent
        // most of its time there (150-390 k msg/s against 1.1-1.8 M with 1-10 ms, RESULTS.md
        // 2026-12-06 nineteenth). rill's own consumer fetches as soon as it has room.
        .set("fetch.queue.backoff.ms", "10");
    c
}

/// Partition count of the topic with every leader known, or None while it has none.
fn partitions_with_leaders(
    c: &BaseConsumer,
    bootstrap: &str,
    topic: &str,
) -> Result<Option<u32>, String> {
    let md = c
        .fetch_metadata(Some(topic), METADATA_TIMEOUT)
        .map_err(|e| format!("metadata from {bootstrap}: {e}"))?;
    let Some(t) = md.topics().iter().find(|t| t.name() == topic) else {
        return Ok(None);
    };
    if t.error().is_some() || t.partitions().is_empty() {
        return Ok(None);
    }
    if t.partitions().iter().any(|p| p.leader() < 0) {
        return Ok(None);
    }
    Ok(Some(t.partitions().len() as u32))
}

/// The topic's partition count; a missing topic is created with `--partitions` through
/// CreateTopics (Apache Kafka, rill's Kafka listener). A broker that does not serve
/// CreateTopics gets an error saying to create the topic first.
pub fn ensure_topic(a: &LoadArgs) -> Result<u32, String> {
    let probe: BaseConsumer = with_overrides(a, consumer_config(a))?
        .create()
        .map_err(|e| format!("librdkafka: {e}"))?;
    if let Some(n) = partitions_with_leaders(&probe, a.bootstrap(), &a.topic)? {
        return Ok(n);
    }
    let admin: AdminClient<DefaultClientContext> = with_overrides(a, base_config(a))?
        .create()
        .map_err(|e| format!("librdkafka: {e}"))?;
    let partitions = i32::try_from(a.partitions).map_err(|_| "--partitions too large")?;
    let topic = NewTopic::new(&a.topic, partitions, TopicReplication::Fixed(1));
    let opts = AdminOptions::new().operation_timeout(Some(ADMIN_TIMEOUT));
    let created = futures_lite::future::block_on(admin.create_topics([&topic], &opts));
    let refused = match created {
        Ok(results) => results.into_iter().find_map(|r| match r {
            Err((_, RDKafkaErrorCode::TopicAlreadyExists)) | Ok(_) => None,
            Err((_, code)) => Some(code.to_string()),
        }),
        Err(e) => Some(e.to_string()),
    };
    if let Some(why) = refused {
        return Err(format!(
            "topic {} does not exist and {} did not create it ({why}): create it first \
             (rill: `rill topic create {} --partitions {}`)",
            a.topic,
            a.bootstrap(),
            a.topic,
            a.partitions
        ));
    }
    // Kafka answers CreateTopics before every broker's metadata has the leaders.
    let start = Instant::now();
    loop {
        if let Some(n) = partitions_with_leaders(&probe, a.bootstrap(), &a.topic)? {
            return Ok(n);
        }
        if start.elapsed() > ADMIN_TIMEOUT {
            return Err(format!(
                "topic {} was created but has no leaders after {ADMIN_TIMEOUT:?}",
                a.topic
            ));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Records each delivery report's latency, from the intended send time (nanoseconds after
/// `base`, carried as the message's opaque) to the report, on librdkafka's polling thread.
struct AckContext {
    base: Instant,
    warmup_end: Instant,
    latency: Mutex<Histogram<u64>>,
    failed: AtomicBool,
    first_error: Mutex<Option<String>>,
}

impl ClientContext for AckContext {}

impl ProducerContext for AckContext {
    type DeliveryOpaque = usize;

    fn delivery(&self, result: &DeliveryResult<'_>, intended_nanos: usize) {
        match result {
            Ok(_) => {
                let intended = self.base + Duration::from_nanos(intended_nanos as u64);
                if intended >= self.warmup_end {
                    let mut h = self.latency.lock().unwrap_or_else(|e| e.into_inner());
                    record(&mut h, intended.elapsed());
                }
            }
            Err((e, _)) => {
                if !self.failed.swap(true, Ordering::Relaxed) {
                    *self.first_error.lock().unwrap_or_else(|e| e.into_inner()) =
                        Some(format!("delivery failed: {e}"));
                }
            }
        }
    }
}

/// A librdkafka producer; its own thread polls for delivery reports.
pub struct KafkaSink {
    producer: ThreadedProducer<AckContext>,
    topic: String,
    base: Instant,
    timeout: Duration,
    /// `--records-per-txn`, and the messages sent in the open transaction.
    records_per_txn: u64,
    in_txn: u64,
}

impl KafkaSink {
    pub fn new(a: &LoadArgs, base: Instant, warmup_end: Instant) -> Result<KafkaSink, String> {
        let acks = a.acks()?.wire().to_string();
        let mut c = base_config(a);
        c.set("acks", acks)
            .set("linger.ms", a.linger_ms.to_string())
            .set(
                "batch.size",
                a.batch_bytes.clamp(1, i32::MAX as usize).to_string(),
            )
            .set(
                "max.in.flight.requests.per.connection",
                a.max_in_flight.clamp(1, 1_000_000).to_string(),
            )
            .set("compression.type", "none")
            .set(
                "enable.idempotence",
                (a.idempotent() && a.acks()? == rill::client::Acks::All).to_string(),
            )
            .set("partitioner", "murmur2_random")
            // rill's ProducerConfig defaults: 64 MiB of buffered records, 120 s to deliver.
            .set("queue.buffering.max.kbytes", "65536")
            .set("queue.buffering.max.messages", "2147483647")
            .set("message.timeout.ms", "120000");
        if a.records_per_txn > 0 {
            c.set("transactional.id", crate::load::transactional_id())
                // librdkafka wants message.timeout.ms (120 s above) <= transaction.timeout.ms.
                .set("transaction.timeout.ms", "120000");
        }
        let context = AckContext {
            base,
            warmup_end,
            latency: Mutex::new(new_histogram()),
            failed: AtomicBool::new(false),
            first_error: Mutex::new(None),
        };
        let producer: ThreadedProducer<AckContext> = with_overrides(a, c)?
            .create_with_context(context)
            .map_err(|e| format!("librdkafka producer: {e}"))?;
        if a.records_per_txn > 0 {
            producer
                .init_transactions(TXN_TIMEOUT)
                .map_err(|e| format!("librdkafka init_transactions: {e}"))?;
        }
        Ok(KafkaSink {
            producer,
            topic: a.topic.clone(),
            base,
            timeout: Duration::from_secs(180),
            records_per_txn: a.records_per_txn,
            in_txn: 0,
        })
    }
}

impl KafkaSink {
    /// Commits the open transaction (librdkafka flushes its messages first).
    fn commit(&mut self) -> Result<(), String> {
        self.in_txn = 0;
        self.producer
            .commit_transaction(TXN_TIMEOUT)
            .map_err(|e| format!("librdkafka commit_transaction: {e}"))
    }
}

/// How long librdkafka's transaction calls may take.
const TXN_TIMEOUT: Duration = Duration::from_secs(60);

impl MessageSink for KafkaSink {
    fn send(
        &mut self,
        key: Option<&[u8]>,
        partition: Option<u32>,
        value: &[u8],
        intended: Instant,
    ) -> Result<bool, String> {
        if self.producer.context().failed.load(Ordering::Relaxed) {
            return Ok(false);
        }
        if self.records_per_txn > 0 && self.in_txn == 0 {
            self.producer
                .begin_transaction()
                .map_err(|e| format!("librdkafka begin_transaction: {e}"))?;
        }
        let nanos = intended.saturating_duration_since(self.base).as_nanos() as usize;
        let mut rec: BaseRecord<'_, [u8], [u8], usize> =
            BaseRecord::with_opaque_to(&self.topic, nanos).payload(value);
        rec.key = key;
        rec.partition = partition.and_then(|p| i32::try_from(p).ok());
        // librdkafka copies the message; a full buffer (`queue.buffering.max.*`) is the
        // back-pressure: wait for delivery reports to free room, as rill's `send` blocks.
        loop {
            match self.producer.send(rec) {
                Ok(()) => {
                    if self.records_per_txn > 0 {
                        self.in_txn += 1;
                        if self.in_txn == self.records_per_txn {
                            self.commit()?;
                        }
                    }
                    return Ok(true);
                }
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                    rec = r;
                    self.producer.poll(Duration::from_millis(10));
                    if self.producer.context().failed.load(Ordering::Relaxed) {
                        return Ok(false);
                    }
                }
                Err((e, _)) => return Err(format!("librdkafka send: {e}")),
            }
        }
    }

    fn flush(&mut self) -> Result<(), String> {
        // In short steps: one long `flush` polls in 100 ms waits that the polling thread can
        // leave idle by taking the last delivery reports first, which would pad the run (a
        // burst's flush took ~0.35 s that way).
        let deadline = Instant::now() + self.timeout;
        loop {
            match self.producer.flush(Duration::from_millis(1)) {
                Ok(()) => return Ok(()),
                Err(KafkaError::Flush(RDKafkaErrorCode::OperationTimedOut))
                    if Instant::now() < deadline => {}
                Err(e) => return Err(format!("librdkafka flush: {e}")),
            }
        }
    }

    fn finish(&mut self) -> Result<Histogram<u64>, String> {
        if self.in_txn > 0 {
            self.commit()?;
        }
        MessageSink::flush(self)?;
        let ctx = self.producer.context();
        if let Some(e) = ctx
            .first_error
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
        {
            return Err(e);
        }
        let h = ctx
            .latency
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        Ok(h)
    }
}

/// `load::run_consumer` through librdkafka: assigns `partitions` at `from` (the beginning,
/// or the high watermarks read before assigning, so nothing produced after `assigned` is
/// missed) and reads until `count` or `stop`.
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
    static GROUP_SEQ: AtomicU64 = AtomicU64::new(0);
    let group = format!(
        "rill-bench-{}-{}",
        std::process::id(),
        GROUP_SEQ.fetch_add(1, Ordering::Relaxed)
    );
    let mut config = consumer_config(a);
    config.set("group.id", group);
    let c: BaseConsumer = with_overrides(a, config)?
        .create()
        .map_err(|e| format!("librdkafka consumer: {e}"))?;
    // The partitions' leaders, known before assigning: librdkafka queries a start offset
    // only once it knows the leader, and one assigned before its metadata cache has them
    // waits for its offset-query retry timer (about 500 ms, measured: the first Fetch came
    // 0.45 s after the start of a 1.5 s run, against any broker) instead of asking at once.
    c.fetch_metadata(Some(&a.topic), METADATA_TIMEOUT)
        .map_err(|e| format!("metadata of {}: {e}", a.topic))?;
    let mut tpl = TopicPartitionList::new();
    for &p in &partitions {
        let p = p as i32;
        let offset = match from {
            StartFrom::Beginning => Offset::Beginning,
            StartFrom::End => {
                let (_, high) = c
                    .fetch_watermarks(&a.topic, p, ADMIN_TIMEOUT)
                    .map_err(|e| format!("high watermark of {}/{p}: {e}", a.topic))?;
                Offset::Offset(high)
            }
            other => return Err(format!("--driver kafka cannot start from {other:?}")),
        };
        tpl.add_partition_offset(&a.topic, p, offset)
            .map_err(|e| e.to_string())?;
    }
    c.assign(&tpl).map_err(|e| format!("assign: {e}"))?;
    let _ = assigned.send(());
    let mut tally = Tally::new(base);
    let mut idle_since = Instant::now();
    let mut last_error = None;
    // Messages counted here but not yet in `total` (the shared count that stops `consume`):
    // added whenever librdkafka's queue runs dry, so no atomic add per message.
    let mut unreported = 0u64;
    while tally.received() < count && !stop.load(Ordering::Relaxed) {
        let mut polled = c.poll(Duration::ZERO);
        if polled.is_none() {
            total.fetch_add(std::mem::take(&mut unreported), Ordering::Relaxed);
            polled = c.poll(Duration::from_millis(200));
        }
        match polled {
            Some(Ok(m)) => {
                let now = Instant::now();
                tally.record(m.payload().unwrap_or_default(), now);
                idle_since = now;
                unreported += 1;
                continue;
            }
            // librdkafka retries broker and connection errors itself; only a fatal one ends
            // the run (else the idle limit does, naming the last error).
            Some(Err(e)) if e.rdkafka_error_code() == Some(RDKafkaErrorCode::Fatal) => {
                return Err(format!("librdkafka consumer: {e}"));
            }
            Some(Err(e)) => last_error = Some(e.to_string()),
            None => {}
        }
        if idle_limit.is_some_and(|l| idle_since.elapsed() > l) {
            return Err(format!(
                "no message for {:?} after {}{}",
                idle_since.elapsed(),
                tally.received(),
                last_error
                    .map(|e| format!(" (last error: {e})"))
                    .unwrap_or_default()
            ));
        }
    }
    total.fetch_add(unreported, Ordering::Relaxed);
    Ok(tally.into_result())
}
