//! `rill-bench produce` and `rill-bench consume` against a running broker, through the rill
//! client library.

use std::time::{Duration, Instant};

use clap::Args;
use rill::client::{Acks, Client, ClientConfig, Consumer, Producer, ProducerConfig, StartFrom};

use crate::report::{new_histogram, record, Report};

#[derive(Args, Debug, Clone)]
pub struct ProduceArgs {
    #[arg(short = 'b', long, default_value = "127.0.0.1:9292")]
    pub bootstrap: String,
    #[arg(long, default_value = "rill-bench")]
    pub topic: String,
    /// Partitions of the topic, created if missing.
    #[arg(long, default_value_t = 2)]
    pub partitions: u32,
    #[arg(long, default_value_t = 1_000_000)]
    pub messages: u64,
    #[arg(long, default_value_t = 1024)]
    pub message_bytes: usize,
    /// Producer threads, each with its own connections.
    #[arg(long, default_value_t = 2)]
    pub producers: usize,
    /// 0 | 1 | all
    #[arg(long, default_value = "1")]
    pub acks: String,
    #[arg(long, default_value_t = 5)]
    pub linger_ms: u64,
    #[arg(long, default_value_t = 1 << 20)]
    pub batch_bytes: usize,
    /// Give each message a key (else sticky partitioning).
    #[arg(long)]
    pub keyed: bool,
}

#[derive(Args, Debug, Clone)]
pub struct ConsumeArgs {
    #[arg(short = 'b', long, default_value = "127.0.0.1:9292")]
    pub bootstrap: String,
    #[arg(long, default_value = "rill-bench")]
    pub topic: String,
    /// Stop after this many messages (from the beginning of the topic).
    #[arg(long, default_value_t = 1_000_000)]
    pub messages: u64,
}

fn connect(bootstrap: &str) -> Result<Client, String> {
    Client::connect(ClientConfig::new(bootstrap)).map_err(|e| e.to_string())
}

pub fn produce(a: ProduceArgs) -> Result<Report, String> {
    let acks: Acks = a.acks.parse()?;
    let mut admin = connect(&a.bootstrap)?;
    if admin.metadata().partitions(&a.topic).is_err() {
        admin
            .create_topic(&a.topic, a.partitions, 1, vec![])
            .map_err(|e| e.to_string())?;
    }
    let producers = a.producers.max(1);
    let per = a.messages / producers as u64;
    let start = Instant::now();
    let handles: Vec<_> = (0..producers)
        .map(|id| {
            let a = a.clone();
            std::thread::spawn(move || -> Result<_, String> {
                let client = connect(&a.bootstrap)?;
                let mut p = Producer::new(
                    client,
                    ProducerConfig {
                        acks,
                        linger: Duration::from_millis(a.linger_ms),
                        batch_bytes: a.batch_bytes,
                        ..ProducerConfig::default()
                    },
                );
                let value = vec![b'v'; a.message_bytes];
                let mut h = new_histogram();
                // Enqueue time of the first message of the batch in progress, per partition.
                let mut first_at: std::collections::HashMap<u32, Instant> = Default::default();
                let record_deliveries =
                    |ds: Vec<rill::client::producer::Delivery>,
                     h: &mut hdrhistogram::Histogram<u64>,
                     first_at: &mut std::collections::HashMap<u32, Instant>| {
                        for d in ds {
                            if let Some(t) = first_at.remove(&d.partition) {
                                for _ in 0..d.records {
                                    record(h, t.elapsed());
                                }
                            }
                        }
                    };
                for i in 0..per {
                    let key = a.keyed.then(|| format!("k{id}-{}", i % 1024));
                    let part = p
                        .choose_partition(&a.topic, None, key.as_deref().map(str::as_bytes))
                        .map_err(|e| e.to_string())?;
                    first_at.entry(part).or_insert_with(Instant::now);
                    let ds = p
                        .send(
                            &a.topic,
                            Some(part),
                            key.as_deref().map(str::as_bytes),
                            &value,
                            &[],
                            &[],
                            0,
                        )
                        .map_err(|e| e.to_string())?;
                    record_deliveries(ds, &mut h, &mut first_at);
                }
                let ds = p.flush().map_err(|e| e.to_string())?;
                record_deliveries(ds, &mut h, &mut first_at);
                Ok(h)
            })
        })
        .collect();
    let mut h = new_histogram();
    for t in handles {
        let part = t
            .join()
            .map_err(|_| "producer thread panicked".to_string())??;
        h.add(&part).map_err(|e| e.to_string())?;
    }
    let elapsed = start.elapsed();
    let n = per * producers as u64;
    let settings = serde_json::json!({
        "topic": a.topic, "partitions": a.partitions, "message_bytes": a.message_bytes,
        "producers": producers, "acks": a.acks, "linger_ms": a.linger_ms,
        "batch_bytes": a.batch_bytes, "keyed": a.keyed,
        "latency": "per message, from enqueue of its batch's first message to the acknowledgement",
    });
    Ok(Report::new(
        "produce",
        n,
        n * a.message_bytes as u64,
        elapsed,
        &h,
        settings,
    ))
}

pub fn consume(a: ConsumeArgs) -> Result<Report, String> {
    let client = connect(&a.bootstrap)?;
    let mut c = Consumer::assign(client, &a.topic, None, StartFrom::Beginning)
        .map_err(|e| e.to_string())?;
    let mut h = new_histogram();
    let mut n = 0u64;
    let mut bytes = 0u64;
    let start = Instant::now();
    let mut last = Instant::now();
    while n < a.messages {
        let t = Instant::now();
        let recs = c
            .poll(Duration::from_millis(500))
            .map_err(|e| e.to_string())?;
        if recs.is_empty() {
            if last.elapsed() > Duration::from_secs(10) {
                return Err(format!("only {n} of {} messages in the topic", a.messages));
            }
            continue;
        }
        last = Instant::now();
        record(&mut h, t.elapsed());
        n += recs.len() as u64;
        bytes += recs.iter().map(|r| r.value.len() as u64).sum::<u64>();
    }
    let settings = serde_json::json!({
        "topic": a.topic, "latency": "per poll (fetch round trip)",
    });
    Ok(Report::new(
        "consume",
        n,
        bytes,
        start.elapsed(),
        &h,
        settings,
    ))
}
