//! Firing precision of delayed messages: how long after its due time a message is visible
//! to a consumer, at a given rate of messages falling due, and how fast the broker accepts
//! them (each accept is durable before it is answered; concurrent ones share a sync).
//!
//! `cargo run --release --example delay_precision -- BOOTSTRAP RATE SECONDS CLIENTS LEAD_MS`
//! against a running broker: creates topic `precision-<pid>` (1 partition), accepts
//! RATE x SECONDS messages from CLIENTS threads, due evenly over SECONDS starting LEAD_MS
//! from the start, then reads them all and prints accepts/s and the visibility delay's
//! p50 / p99 / p99.9 / max (a message accepted after its due time is appended at once and
//! counted apart).

use std::time::{Duration, Instant};

use rill::client::{Client, ClientConfig, Consumer, ConsumerConfig, ProducerRecord, StartFrom};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize, d: &str| args.get(i).cloned().unwrap_or_else(|| d.to_string());
    let bootstrap = arg(0, "127.0.0.1:9292");
    let rate: u64 = arg(1, "10000").parse().expect("RATE");
    let seconds: u64 = arg(2, "5").parse().expect("SECONDS");
    let clients: u64 = arg(3, "16").parse().expect("CLIENTS");
    let lead_ms: i64 = arg(4, "60000").parse().expect("LEAD_MS");
    let topic = format!("precision-{}", std::process::id());
    let cfg = ClientConfig::new(bootstrap.clone());
    Client::connect(cfg.clone())
        .expect("connect")
        .create_topic(&topic, 1, 1, vec![])
        .expect("create topic");
    let n = rate * seconds;
    let base = rill::clock::now_ms() + lead_ms;
    let due_of = |i: u64| base + (i * 1000 / rate) as i64;
    let started = Instant::now();
    std::thread::scope(|s| {
        for t in 0..clients {
            let (cfg, topic) = (cfg.clone(), topic.clone());
            s.spawn(move || {
                let mut c = Client::connect(cfg).expect("connect");
                let mut i = t;
                while i < n {
                    let due = due_of(i);
                    let v = format!("{due}");
                    let r = ProducerRecord::new(&topic, v.as_bytes()).partition(0);
                    c.produce_delayed(&r, due).expect("delayed produce");
                    i += clients;
                }
            });
        }
    });
    let accept_secs = started.elapsed().as_secs_f64();
    let accepted_by = rill::clock::now_ms();
    let mut consumer = Consumer::new(
        cfg,
        ConsumerConfig {
            fetch_max_wait: Duration::from_millis(100),
            ..ConsumerConfig::default()
        },
    )
    .expect("consumer");
    consumer
        .assign(&topic, Some(vec![0]), StartFrom::Beginning)
        .expect("assign");
    let (mut delays, mut late_accepts) = (Vec::with_capacity(n as usize), 0u64);
    let deadline =
        Instant::now() + Duration::from_millis(lead_ms as u64 + seconds * 1000 + 120_000);
    while (delays.len() as u64 + late_accepts) < n {
        assert!(
            Instant::now() < deadline,
            "only {} of {n} arrived",
            delays.len()
        );
        let records = consumer.poll(Duration::from_millis(100)).expect("poll");
        let seen = rill::clock::now_ms();
        for r in records.iter() {
            let due: i64 = std::str::from_utf8(r.value().expect("value"))
                .unwrap()
                .parse()
                .unwrap();
            assert!(seen >= due, "a message seen before its due time");
            match due < accepted_by {
                true => late_accepts += 1,
                false => delays.push(seen - due),
            }
        }
    }
    delays.sort_unstable();
    let q = |p: f64| delays[((delays.len() as f64 * p) as usize).min(delays.len() - 1)];
    println!(
        "rate {rate}/s over {seconds} s ({n} messages), {clients} clients: accepts {:.0}/s \
         ({:.1} s; done {} ms before the first due time); visible after due: p50 {} ms, \
         p99 {} ms, p99.9 {} ms, max {} ms; {late_accepts} accepted late",
        n as f64 / accept_secs,
        accept_secs,
        base - accepted_by,
        q(0.5),
        q(0.99),
        q(0.999),
        delays.last().copied().unwrap_or(0)
    );
}
