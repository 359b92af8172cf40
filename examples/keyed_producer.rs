//! Sends keyed records and prints where each landed.
//!
//! ```text
//! rill broker &                               # a broker on 127.0.0.1:9292
//! rill topic create orders --partitions 4
//! cargo run --example keyed_producer -- 127.0.0.1:9292 orders 1000
//! ```

use std::time::Duration;

use rill::client::{Acks, ClientConfig, Producer, ProducerConfig, ProducerRecord};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let bootstrap = args.next().unwrap_or_else(|| "127.0.0.1:9292".into());
    let topic = args.next().unwrap_or_else(|| "orders".into());
    let count: u32 = args.next().map_or(Ok(1000), |n| n.parse())?;

    // The dial: a small linger for latency, larger batches for throughput.
    let producer = Producer::new(
        ClientConfig::new(bootstrap),
        ProducerConfig {
            acks: Acks::All,
            linger: Duration::from_millis(2),
            batch_bytes: 64 << 10,
            ..ProducerConfig::default()
        },
    )?;
    let mut reports = Vec::new();
    for i in 0..count {
        // Every event of one customer goes to one partition, in order (Kafka's murmur2).
        let key = format!("customer-{}", i % 10);
        let value = format!("order {i}");
        let record = ProducerRecord::new(&topic, value.as_bytes()).key(key.as_bytes());
        let report = producer.send(record)?;
        reports.push((key, report));
    }
    producer.flush()?;
    for (key, report) in reports.into_iter().take(10) {
        let md = report.wait()?;
        println!("{key} -> partition {} offset {:?}", md.partition, md.offset);
    }
    println!("sent {count} records to {topic}");
    Ok(())
}
