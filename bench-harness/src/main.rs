//! rill-bench: load generator and latency recorder.

mod histogram_log;
mod kafka_driver;
mod load;
mod loopback;
mod plot;
mod progress;
mod report;
mod storage;
mod sweep_table;
mod workloads;

use std::path::PathBuf;

use clap::{Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(
    name = "rill-bench",
    version,
    about = "Load generator and latency recorder for rill"
)]
struct Cli {
    /// Write the result as JSON here.
    #[arg(long, global = true)]
    json: Option<PathBuf>,
    #[command(subcommand)]
    workload: Workload,
}

#[derive(Subcommand, Debug)]
enum Workload {
    /// The log alone: appends through group commit on one shard, no network.
    Storage(storage::StorageArgs),
    /// Produce to a running broker and record acknowledgement latency.
    Produce(load::LoadArgs),
    /// Consume a topic from the beginning and record throughput.
    Consume(load::LoadArgs),
    /// Produce and consume at once; latency from intended send time to receipt.
    E2e(load::LoadArgs),
    /// Produce over a grid of linger x batch bytes: the throughput-versus-latency table.
    Sweep(workloads::SweepArgs),
    /// No broker: paced request/response over loopback TCP (optionally each request written
    /// O_DIRECT|O_DSYNC before its answer), the machine's floor for an acknowledgement.
    Loopback(loopback::LoopbackArgs),
}

fn main() {
    // librdkafka's own warnings (unreachable brokers, refused requests) come through `log`.
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) if e.use_stderr() => {
            eprintln!(
                "rill-bench: {}",
                e.to_string().lines().next().unwrap_or("bad arguments")
            );
            std::process::exit(2);
        }
        Err(e) => {
            let _ = e.print();
            return;
        }
    };
    let result = match cli.workload {
        Workload::Storage(a) => storage::run(a),
        Workload::Produce(a) => workloads::produce(a),
        Workload::Consume(a) => workloads::consume(a),
        Workload::E2e(a) => workloads::e2e(a),
        Workload::Sweep(a) => workloads::sweep(a),
        Workload::Loopback(a) => loopback::run(a),
    };
    match result {
        Ok(report) => {
            report.print();
            if let Some(path) = &cli.json {
                if let Err(e) = report.write_json(path) {
                    eprintln!("rill-bench: cannot write {}: {e}", path.display());
                    std::process::exit(1);
                }
            }
        }
        Err(e) => {
            eprintln!("rill-bench: error: {e}");
            std::process::exit(1);
        }
    }
}
