//! The process's log lines on stderr: `--log-format text|json`. Text is env_logger's own
//! format; json is one object per line (`ts`, `level`, `target`, `msg`) for log shippers. The
//! broker's lifecycle lines ("rill: broker 1 ready: ...", stopping, the fatal error it exits
//! with) go through [`announce_line`], so a json log has nothing but json lines.

use std::io::Write;
use std::sync::OnceLock;

/// `--log-format`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

static FORMAT: OnceLock<LogFormat> = OnceLock::new();

/// Installs the logger once (`RUST_LOG` filters, default `info,raft=warn`).
pub fn init(format: LogFormat) {
    let _ = FORMAT.set(format);
    let mut b = env_logger::Builder::from_env(
        env_logger::Env::default().default_filter_or("info,raft=warn"),
    );
    if format == LogFormat::Json {
        b.format(|buf, record| {
            let line = serde_json::json!({
                "ts": buf.timestamp_millis().to_string(),
                "level": record.level().as_str(),
                "target": record.target(),
                "msg": record.args().to_string(),
            });
            writeln!(buf, "{line}")
        });
    }
    let _ = b.try_init();
}

/// A line about the process itself: as it is with text logs, a log record of target `rill`
/// with json logs (before [`init`], as text).
pub fn announce_line(level: log::Level, line: &str) {
    if FORMAT.get() == Some(&LogFormat::Json) {
        log::log!(target: "rill", level, "{line}");
    } else {
        eprintln!("{line}");
    }
}

/// `announce!(level, "format", args..)`: [`announce_line`] with a formatted line.
macro_rules! announce {
    ($level:expr, $($arg:tt)+) => {
        $crate::logging::announce_line($level, &format!($($arg)+))
    };
}
pub(crate) use announce;
