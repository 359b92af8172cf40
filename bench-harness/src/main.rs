//! rill-bench: load generator and latency recorder.

mod client_load;
mod histogram_log;
mod plot;
mod progress;
mod report;
mod storage;
mod sweep_table;

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
    Produce(client_load::ProduceArgs),
    /// Consume a topic from the beginning and record throughput.
    Consume(client_load::ConsumeArgs),
}

fn main() {
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
        Workload::Produce(a) => client_load::produce(a),
        Workload::Consume(a) => client_load::consume(a),
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
