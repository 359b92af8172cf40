//! Reads a topic from the beginning and prints each record, reading them in place.
//!
//! ```text
//! cargo run --example consumer -- 127.0.0.1:9292 orders
//! ```

use std::time::{Duration, Instant};

use rill::client::{ClientConfig, Consumer, ConsumerConfig, StartFrom};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let bootstrap = args.next().unwrap_or_else(|| "127.0.0.1:9292".into());
    let topic = args.next().unwrap_or_else(|| "orders".into());

    let mut consumer = Consumer::new(ClientConfig::new(bootstrap), ConsumerConfig::default())?;
    let partitions = consumer.assign(&topic, None, StartFrom::Beginning)?;
    println!("reading {topic} partitions {partitions:?}");
    let mut last = Instant::now();
    // Stop after two seconds without a new record.
    while last.elapsed() < Duration::from_secs(2) {
        let records = consumer.poll(Duration::from_millis(500))?;
        if records.is_empty() {
            continue;
        }
        last = Instant::now();
        for r in records.iter() {
            println!(
                "{}-{}@{} key={} value={}",
                r.topic,
                r.partition,
                r.offset(),
                String::from_utf8_lossy(r.key().unwrap_or_default()),
                String::from_utf8_lossy(r.value().unwrap_or_default())
            );
        }
    }
    Ok(())
}
