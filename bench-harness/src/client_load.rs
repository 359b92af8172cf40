//! `rill-bench produce` and `rill-bench consume` against a running broker, through the rill
//! client library.

use std::time::{Duration, Instant};

use clap::Args;
use rill::client::{
    Acks, Client, ClientConfig, Consumer, ConsumerConfig, DeliveryFuture, Producer, ProducerConfig,
    ProducerRecord, StartFrom,
};

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
                let p = Producer::new(
                    ClientConfig::new(&a.bootstrap),
                    ProducerConfig {
                        acks,
                        linger: Duration::from_millis(a.linger_ms),
                        batch_bytes: a.batch_bytes,
                        ..ProducerConfig::default()
                    },
                )
                .map_err(|e| e.to_string())?;
                // A waiter thread takes the reports in send order and records when each
                // resolved, so the sending loop never blocks on acknowledgements.
                let (tx, rx) = flume::bounded::<(Instant, DeliveryFuture)>(1 << 16);
                let waiter = std::thread::spawn(move || -> Result<_, String> {
                    let mut h = new_histogram();
                    for (sent, report) in rx.iter() {
                        report.wait().map_err(|e| e.to_string())?;
                        record(&mut h, sent.elapsed());
                    }
                    Ok(h)
                });
                let value = vec![b'v'; a.message_bytes];
                for i in 0..per {
                    let key = a.keyed.then(|| format!("k{id}-{}", i % 1024));
                    let mut rec = ProducerRecord::new(&a.topic, &value);
                    rec.key = key.as_deref().map(str::as_bytes);
                    let sent = Instant::now();
                    let report = p.send(rec).map_err(|e| e.to_string())?;
                    if tx.send((sent, report)).is_err() {
                        break;
                    }
                }
                drop(tx);
                p.flush().map_err(|e| e.to_string())?;
                waiter
                    .join()
                    .map_err(|_| "waiter thread panicked".to_string())?
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
        "latency": "per message, from send() to its delivery report",
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
    let mut c = Consumer::new(ClientConfig::new(&a.bootstrap), ConsumerConfig::default())
        .map_err(|e| e.to_string())?;
    c.assign(&a.topic, None, StartFrom::Beginning)
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
        for r in recs.iter() {
            n += 1;
            bytes += r.value().len() as u64;
        }
    }
    let settings = serde_json::json!({
        "topic": a.topic, "latency": "per poll (wait for the next prefetched fetch)",
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
