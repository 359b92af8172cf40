//! The process's log lines on stderr: `--log-format text|json`. Text is env_logger's own
//! format; json is one object per line (`ts`, `level`, `target`, `msg`) for log shippers. The
//! broker's lifecycle lines ("rill: broker 1 ready: ...", stopping, the fatal error it exits
//! with) go through [`announce_line`], so a json log has nothing but json lines.
//!
//! Lines written on a shard name it (`shard`), and lines written while a connection's task
//! runs name the connection (`conn`: listener and peer): [`set_shard`] at a shard's start,
//! [`in_conn`] around a connection's future, both thread-local (a shard is one thread and
//! polls one task at a time), so every line of a request path carries them without each call
//! site repeating them. A partition is named in the message as `topic-partition`.

use std::cell::RefCell;
use std::future::Future;
use std::io::Write;
use std::rc::Rc;
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
    match format {
        LogFormat::Json => b.format(|buf, record| {
            let mut line = serde_json::json!({
                "ts": buf.timestamp_millis().to_string(),
                "level": record.level().as_str(),
                "target": record.target(),
                "msg": record.args().to_string(),
            });
            CONTEXT.with(|c| {
                let c = c.borrow();
                if let Some(shard) = c.shard {
                    line["shard"] = shard.into();
                }
                if let Some(conn) = &c.conn {
                    line["conn"] = conn.to_string().into();
                }
            });
            writeln!(buf, "{line}")
        }),
        // env_logger's own layout, the context after the target.
        LogFormat::Text => b.format(|buf, record| {
            let context = CONTEXT.with(|c| c.borrow().text());
            let level = buf.default_level_style(record.level());
            writeln!(
                buf,
                "[{} {level}{:<5}{level:#} {}{context}] {}",
                buf.timestamp_seconds(),
                record.level(),
                record.target(),
                record.args()
            )
        }),
    };
    let _ = b.try_init();
}

/// What the lines written on this thread now are about.
#[derive(Default)]
struct Context {
    shard: Option<usize>,
    conn: Option<Rc<str>>,
}

impl Context {
    fn text(&self) -> String {
        let mut out = String::new();
        if let Some(s) = self.shard {
            out.push_str(&format!(" shard={s}"));
        }
        if let Some(c) = &self.conn {
            out.push_str(&format!(" conn={c}"));
        }
        out
    }
}

thread_local! {
    static CONTEXT: RefCell<Context> = RefCell::new(Context::default());
}

/// Names this thread's shard in its log lines.
pub fn set_shard(id: usize) {
    CONTEXT.with(|c| c.borrow_mut().shard = Some(id));
}

/// Runs `fut` with its log lines naming connection `conn` (set around each poll, so the other
/// tasks of the shard do not inherit it).
pub async fn in_conn<F: Future>(conn: String, fut: F) -> F::Output {
    let conn: Rc<str> = Rc::from(conn);
    let mut fut = std::pin::pin!(fut);
    std::future::poll_fn(move |cx| {
        let before = CONTEXT.with(|c| c.borrow_mut().conn.replace(conn.clone()));
        let r = fut.as_mut().poll(cx);
        CONTEXT.with(|c| c.borrow_mut().conn = before);
        r
    })
    .await
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
