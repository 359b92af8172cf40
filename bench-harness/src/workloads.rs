//! The client workloads: produce, consume, e2e and sweep.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use std::time::Instant;

use clap::Args;
use hdrhistogram::Histogram;
use rill::client::StartFrom;

use crate::histogram_log::HistogramLog;
use crate::load::{run_consumer, run_producer, shared_flag, split_partitions, LoadArgs};
use crate::plot::{latency_distribution_svg, sweep_svg, write_svg, SweepPoint};
use crate::progress::Progress;
use crate::report::{new_histogram, Latency, Report};
use crate::sweep_table::sweep_table_markdown;

fn finish_outputs(
    a: &LoadArgs,
    title: &str,
    h: &Histogram<u64>,
    elapsed_secs: f64,
) -> Result<(), String> {
    if let Some(path) = &a.histogram_log {
        // One interval for the whole run; per-second intervals would need the producers to
        // hand over their histograms as they go.
        let tag: String = title
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .collect();
        let mut log = HistogramLog::create(path, &tag).map_err(|e| e.to_string())?;
        log.record_interval(0.0, elapsed_secs, h)
            .map_err(|e| e.to_string())?;
        log.finish().map_err(|e| e.to_string())?;
    }
    if let Some(path) = &a.plot {
        write_svg(
            path,
            &latency_distribution_svg(title, &[(title.to_string(), h)]),
        )
        .map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// What the producer threads of a run did together.
struct Produced {
    sent: u64,
    /// Per message, intended send time to delivery report.
    ack_latency: Histogram<u64>,
    /// Per produce request, write to response; `None` if a driver cannot tell.
    request_latency: Option<Histogram<u64>>,
    /// Start to the last acknowledgement.
    seconds: f64,
}

fn produce_threads(
    a: &LoadArgs,
    base: Instant,
    progress: &Arc<Progress>,
) -> Result<Produced, String> {
    let producers = a.producers.max(1);
    let per = a.messages / producers as u64;
    let count = if a.duration_secs.is_some() {
        u64::MAX
    } else {
        per
    };
    let start = Instant::now();
    let warmup_end = start + std::time::Duration::from_secs_f64(a.warmup_secs.max(0.0));
    let deadline = a.deadline(start);
    let stop = shared_flag();
    let handles: Vec<_> = (0..producers)
        .map(|id| {
            let (a, progress, stop) = (a.clone(), progress.clone(), stop.clone());
            std::thread::spawn(move || {
                run_producer(&a, id, count, base, warmup_end, deadline, &progress, &stop)
            })
        })
        .collect();
    let mut h = new_histogram();
    let mut requests: Option<Histogram<u64>> = None;
    let mut sent = 0;
    // The run ends with the last acknowledgement, not with the clients' teardown.
    let mut end = start;
    for t in handles {
        let r = t
            .join()
            .map_err(|_| "producer thread panicked".to_string())??;
        sent += r.sent;
        end = end.max(r.finished);
        h.add(&r.ack_latency).map_err(|e| e.to_string())?;
        if let Some(rh) = &r.request_latency {
            requests
                .get_or_insert_with(new_histogram)
                .add(rh)
                .map_err(|e| e.to_string())?;
        }
    }
    Ok(Produced {
        sent,
        ack_latency: h,
        request_latency: requests,
        seconds: end.duration_since(start).as_secs_f64(),
    })
}

pub fn produce(a: LoadArgs) -> Result<Report, String> {
    a.ensure_topic()?;
    let progress = Arc::new(Progress::new(
        "produce",
        a.duration_secs.is_none().then_some(a.messages),
    ));
    let p = produce_threads(&a, Instant::now(), &progress)?;
    Arc::try_unwrap(progress).map(Progress::finish).ok();
    finish_outputs(&a, "produce ack latency", &p.ack_latency, p.seconds)?;
    let mut settings = a.settings();
    settings["latency"] = "per message, from its intended send time to its delivery report".into();
    settings["request_latency"] = match &p.request_latency {
        Some(_) => "per produce request, from its write to the socket to its response".into(),
        None => "not measured: the kafka driver does not see librdkafka's requests".into(),
    };
    Ok(Report::new(
        "produce",
        p.sent,
        p.sent * a.message_bytes as u64,
        std::time::Duration::from_secs_f64(p.seconds),
        &p.ack_latency,
        settings,
    )
    .with_request_latency(p.request_latency.as_ref()))
}

pub fn consume(a: LoadArgs) -> Result<Report, String> {
    let partitions = a.ensure_topic()?;
    let groups = split_partitions(partitions, a.consumers);
    let progress = Arc::new(Progress::new("consume", Some(a.messages)));
    let stop = shared_flag();
    let total = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let handles: Vec<_> = groups
        .into_iter()
        .map(|parts| {
            let (a, stop, total) = (a.clone(), stop.clone(), total.clone());
            let idle = Some(Duration::from_secs(30));
            let (assigned, _) = flume::bounded(1);
            std::thread::spawn(move || {
                run_consumer(
                    &a,
                    parts,
                    StartFrom::Beginning,
                    u64::MAX,
                    None,
                    &stop,
                    &total,
                    idle,
                    assigned,
                )
            })
        })
        .collect();
    // The consumers share the count: partitions need not hold equal shares.
    let reporter = {
        let (progress, total, stop, want) =
            (progress.clone(), total.clone(), stop.clone(), a.messages);
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let n = total.load(Ordering::Relaxed);
                progress.set(n);
                if n >= want {
                    stop.store(true, Ordering::Relaxed);
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        })
    };
    let (mut n, mut bytes) = (0, 0);
    // The run ends with the last record read, not with the consumers' last (empty) poll.
    let mut last = None;
    let mut failure = None;
    for t in handles {
        match t
            .join()
            .map_err(|_| "consumer thread panicked".to_string())
            .and_then(|r| r)
        {
            Ok(r) => {
                n += r.received;
                bytes += r.bytes;
                last = last.max(r.last_record);
            }
            Err(e) => failure = Some(e),
        }
    }
    stop.store(true, Ordering::Relaxed);
    let _ = reporter.join();
    if let Some(e) = failure {
        return Err(e);
    }
    let elapsed = last.unwrap_or_else(Instant::now).duration_since(start);
    Arc::try_unwrap(progress).map(Progress::finish).ok();
    let mut settings = a.settings();
    settings["latency"] = "none measured: consume is a throughput workload (see e2e)".into();
    Ok(Report::new(
        "consume",
        n,
        bytes,
        elapsed,
        &new_histogram(),
        settings,
    ))
}

/// Produce and consume at once; latency = receive time minus intended send time.
pub fn e2e(a: LoadArgs) -> Result<Report, String> {
    let partitions = a.ensure_topic()?;
    let base = Instant::now();
    let warmup_end = base + std::time::Duration::from_secs_f64(a.warmup_secs.max(0.0));
    let groups = split_partitions(partitions, a.consumers);
    let stop = shared_flag();
    // Consumers start at the end, before the producers send.
    let total = Arc::new(AtomicU64::new(0));
    let (assigned_tx, assigned_rx) = flume::unbounded();
    let n_consumers = groups.len();
    let consumers: Vec<_> = groups
        .into_iter()
        .map(|parts| {
            let (a, stop, total, assigned) =
                (a.clone(), stop.clone(), total.clone(), assigned_tx.clone());
            std::thread::spawn(move || {
                let at = Some((base, warmup_end));
                run_consumer(
                    &a,
                    parts,
                    StartFrom::End,
                    u64::MAX,
                    at,
                    &stop,
                    &total,
                    None,
                    assigned,
                )
            })
        })
        .collect();
    drop(assigned_tx);
    // Producers start once every consumer holds its end offsets, so none is missed.
    for _ in 0..n_consumers {
        if assigned_rx.recv_timeout(Duration::from_secs(60)).is_err() {
            stop.store(true, Ordering::Relaxed);
            return Err("a consumer could not assign its partitions".into());
        }
    }
    let progress = Arc::new(Progress::new(
        "e2e",
        a.duration_secs.is_none().then_some(a.messages),
    ));
    let produced = produce_threads(&a, base, &progress);
    let (sent, secs, acks, requests) = match produced {
        Ok(p) => (p.sent, p.seconds, p.ack_latency, p.request_latency),
        Err(e) => {
            stop.store(true, Ordering::Relaxed);
            return Err(e);
        }
    };
    Arc::try_unwrap(progress).map(Progress::finish).ok();
    // Let the consumers catch up with everything sent (30 s at most), then stop them.
    let drain = Instant::now();
    while total.load(Ordering::Relaxed) < sent && drain.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(20));
    }
    stop.store(true, Ordering::Relaxed);
    let (mut h, mut from_send) = (new_histogram(), new_histogram());
    let (mut received, mut bytes) = (0, 0);
    for t in consumers {
        let r = t
            .join()
            .map_err(|_| "consumer thread panicked".to_string())??;
        received += r.received;
        bytes += r.bytes;
        h.add(&r.latency).map_err(|e| e.to_string())?;
        from_send
            .add(&r.latency_from_send)
            .map_err(|e| e.to_string())?;
    }
    if received < sent {
        return Err(format!(
            "consumers saw {received} of {sent} messages within 30 s"
        ));
    }
    finish_outputs(&a, "end-to-end latency", &h, secs)?;
    let mut settings = a.settings();
    settings["latency"] = "end to end: receive time minus the intended send time".into();
    settings["sent"] = sent.into();
    let mut report = Report::new(
        "e2e",
        received,
        bytes,
        std::time::Duration::from_secs_f64(secs),
        &h,
        settings,
    )
    .with_request_latency(requests.as_ref());
    report.ack_latency_us = (!acks.is_empty()).then(|| Latency::of(&acks));
    report.latency_from_send_us = (!from_send.is_empty()).then(|| Latency::of(&from_send));
    Ok(report)
}

#[derive(Args, Debug, Clone)]
pub struct SweepArgs {
    #[command(flatten)]
    pub load: LoadArgs,
    /// Linger values to try, in ms.
    #[arg(long, value_delimiter = ',', default_value = "0,1,5")]
    pub lingers: Vec<u64>,
    /// Batch sizes to try, in bytes.
    #[arg(long, value_delimiter = ',', default_value = "16384,65536,1048576")]
    pub batch_sizes: Vec<usize>,
    /// Write the throughput-versus-latency plot here.
    #[arg(long)]
    pub sweep_plot: Option<std::path::PathBuf>,
}

/// A produce run per (linger, batch bytes) cell: the throughput-versus-latency dial.
pub fn sweep(s: SweepArgs) -> Result<Report, String> {
    s.load.ensure_topic()?;
    let mut points = Vec::new();
    let mut best: Option<Report> = None;
    for &linger in &s.lingers {
        for &batch in &s.batch_sizes {
            let mut a = s.load.clone();
            a.linger_ms = linger;
            a.batch_bytes = batch;
            a.plot = None;
            a.histogram_log = None;
            let r = produce(a)?;
            eprintln!(
                "linger {linger} ms, batch {batch} B: {:.0} msg/s, p99 {:.0} us",
                r.msgs_per_sec, r.latency_us.p99
            );
            points.push(SweepPoint {
                linger_ms: linger,
                batch_bytes: batch,
                msgs_per_sec: r.msgs_per_sec,
                p50_us: r.latency_us.p50,
                p99_us: r.latency_us.p99,
                p999_us: r.latency_us.p999,
            });
            if best
                .as_ref()
                .is_none_or(|b| r.msgs_per_sec > b.msgs_per_sec)
            {
                best = Some(r);
            }
        }
    }
    println!("{}", sweep_table_markdown(&points, s.load.message_bytes));
    if let Some(path) = &s.sweep_plot {
        write_svg(
            path,
            &sweep_svg("rill produce: linger x batch bytes", &points),
        )
        .map_err(|e| e.to_string())?;
    }
    let mut report = best.ok_or("empty sweep grid: give --lingers and --batch-sizes")?;
    report.workload = "sweep".into();
    report.settings["cells"] = serde_json::to_value(
        points
            .iter()
            .map(|p| {
                serde_json::json!({"linger_ms": p.linger_ms, "batch_bytes": p.batch_bytes,
                "msgs_per_sec": p.msgs_per_sec, "p50_us": p.p50_us, "p99_us": p.p99_us, "p999_us": p.p999_us})
            })
            .collect::<Vec<_>>(),
    )
    .map_err(|e| e.to_string())?;
    report.settings["best"] = "top-level figures are the cell with the highest throughput".into();
    Ok(report)
}
