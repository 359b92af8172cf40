//! Broker-side tag filtering, measured: a topic of N records whose tags give 1%, 10% and
//! 50% selectivity spread evenly (every batch holds some matches, so each batch's records
//! are filtered one by one) and 1% in runs (whole batches skipped on their tag summary),
//! read from the start unfiltered and with each filter, in alternating rounds: records
//! scanned per second and the broker's CPU time per million records scanned.
//!
//! `cargo run --release --example tag_filter -- BOOTSTRAP BROKER_PID [N] [ROUNDS]`

use std::time::{Duration, Instant};

use rill::batch::TagFilter;
use rill::client::{
    Client, ClientConfig, Consumer, ConsumerConfig, Producer, ProducerConfig, ProducerRecord,
    StartFrom,
};

/// The broker's user + system CPU time so far, in seconds.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("broker stat");
    // Fields after the command name (which may hold spaces): state is field 3.
    let rest = &stat[stat.rfind(')').expect("stat") + 2..];
    let f: Vec<&str> = rest.split(' ').collect();
    let ticks: f64 = f[11].parse::<f64>().unwrap() + f[12].parse::<f64>().unwrap();
    ticks / 100.0
}

/// The tags of record `i`: `s1`, `s10`, `s50` on 1%, 10%, 50% of them, spread; `r1` on 1%
/// in runs of 10,000.
fn tags_of(i: u64) -> Vec<String> {
    let mut t = Vec::new();
    if i.is_multiple_of(100) {
        t.push("s1".to_string());
    }
    if i.is_multiple_of(10) {
        t.push("s10".to_string());
    }
    if i.is_multiple_of(2) {
        t.push("s50".to_string());
    }
    if (i / 10_000).is_multiple_of(100) {
        t.push("r1".to_string());
    }
    t
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let bootstrap = args
        .first()
        .cloned()
        .unwrap_or_else(|| "127.0.0.1:9292".into());
    let pid: u32 = args
        .get(1)
        .expect("BROKER_PID")
        .parse()
        .expect("BROKER_PID");
    let n: u64 = args.get(2).map_or(2_000_000, |s| s.parse().expect("N"));
    let rounds: usize = args.get(3).map_or(3, |s| s.parse().expect("ROUNDS"));
    let topic = format!("tags-{}", std::process::id());
    let cfg = ClientConfig::new(bootstrap);
    let mut client = Client::connect(cfg.clone()).expect("connect");
    client.create_topic(&topic, 1, 1, vec![]).expect("topic");
    let producer = Producer::new(
        cfg.clone(),
        ProducerConfig {
            batch_bytes: 256 << 10,
            linger: Duration::from_millis(5),
            ..ProducerConfig::default()
        },
    )
    .expect("producer");
    let value = vec![b'x'; 100];
    for i in 0..n {
        let tags = tags_of(i);
        producer
            .send(ProducerRecord::new(&topic, &value).partition(0).tags(&tags))
            .expect("send");
    }
    producer.flush().expect("flush");
    let end = client
        .list_offset(&topic, 0, rill::protocol::messages::LATEST_TIMESTAMP)
        .expect("list offsets")
        .expect("an end");
    let filters: Vec<(&str, Option<&str>)> = vec![
        ("unfiltered", None),
        ("1% spread", Some("s1")),
        ("10% spread", Some("s10")),
        ("50% spread", Some("s50")),
        ("1% in runs", Some("r1")),
    ];
    // name -> (records/s scanned, broker CPU s per million scanned, records delivered)
    let mut results: Vec<Vec<(f64, f64, u64)>> = vec![Vec::new(); filters.len()];
    for round in 0..rounds {
        for k in 0..filters.len() {
            // A different order each round.
            let f = (k + round) % filters.len();
            let (_, tag) = filters[f];
            let mut c = Consumer::new(
                cfg.clone(),
                ConsumerConfig {
                    tags: tag.and_then(|t| TagFilter::new(vec![t.to_string()], false)),
                    fetch_max_wait: Duration::from_millis(50),
                    ..ConsumerConfig::default()
                },
            )
            .expect("consumer");
            c.assign(&topic, Some(vec![0]), StartFrom::Beginning)
                .expect("assign");
            let (cpu0, t0) = (cpu_seconds(pid), Instant::now());
            let mut delivered = 0u64;
            while c.position(&topic, 0).is_none_or(|p| p < end) {
                delivered += c.poll(Duration::from_millis(100)).expect("poll").count() as u64;
            }
            let secs = t0.elapsed().as_secs_f64();
            let cpu = cpu_seconds(pid) - cpu0;
            results[f].push((end as f64 / secs, cpu / (end as f64 / 1e6), delivered));
        }
    }
    let median = |mut v: Vec<f64>| {
        v.sort_by(|a, b| a.partial_cmp(b).unwrap());
        v[v.len() / 2]
    };
    let base = median(results[0].iter().map(|r| r.0).collect());
    println!("{end} records of 100 bytes, {rounds} rounds, medians:");
    println!("| read | records delivered | records scanned/s | vs unfiltered | broker CPU s per million scanned |");
    println!("|---|---|---|---|---|");
    for (f, (name, _)) in filters.iter().enumerate() {
        let rate = median(results[f].iter().map(|r| r.0).collect());
        let cpu = median(results[f].iter().map(|r| r.1).collect());
        println!(
            "| {name} | {} | {rate:.0} | {:.2}x | {cpu:.3} |",
            results[f][0].2,
            rate / base
        );
    }
}
