//! The integration tests' harness (`tests/*.rs` of the `rill` package, a dev-dependency):
//! real `rill broker` processes on 127.0.0.1 with their own free ports and data dirs, stopped
//! (SIGKILL) when the test ends. Waits are on conditions with generous deadlines.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

mod netlab;
mod replicas;
mod response_dropper;
pub mod tls;

pub use netlab::NetLab;
pub use replicas::{
    acks_all_producer, assert_replicas_equal, batches_below, create_topic_rf3, partition_meta,
    read_partition, stored_batches, wait_partition, FAST_FENCING,
};
pub use response_dropper::{FrameLength, ResponseDropper};

use rill::client::{
    Acks, Client, ClientConfig, ConsumedRecord, Consumer, ConsumerConfig, Producer, ProducerConfig,
    ProducerRecord, StartFrom,
};

/// Generous: CI is a loaded 2-core machine.
pub const DEADLINE: Duration = Duration::from_secs(120);

/// A xorshift generator for a test's random moments and choices, reproducible from its seed.
pub struct Rng(pub u64);

impl Rng {
    /// From `RILL_TEST_SEED` if set, else from the clock; the seed is printed, so a failing
    /// run can be repeated.
    pub fn seeded() -> Rng {
        let seed = std::env::var("RILL_TEST_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .expect("clock after 1970")
                    .as_nanos() as u64
                    | 1
            });
        eprintln!("seed {seed} (RILL_TEST_SEED={seed} repeats this run)");
        Rng(seed)
    }

    /// A number below `n` (at least 1).
    pub fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n.max(1)
    }
}

/// The `rill` binary that cargo built for the running integration test. `env!` cannot name it
/// here (cargo sets `CARGO_BIN_EXE_rill` only when compiling the `rill` package's own tests),
/// so it is found at run time: `cargo test` (1.94 and later) puts its path in the test
/// process's environment; otherwise (an older cargo, or the test executable run by hand) it is
/// the `rill` next to the test executable's `deps/` directory, as cargo lays out
/// `target/<profile>/` (under any `CARGO_TARGET_DIR`).
pub fn rill_bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        if let Some(p) = std::env::var_os("CARGO_BIN_EXE_rill") {
            return PathBuf::from(p);
        }
        let exe = std::env::current_exe().expect("the test executable's path");
        let mut dir = exe
            .parent()
            .expect("the test executable's directory")
            .to_path_buf();
        if dir.ends_with("deps") {
            dir.pop();
        }
        let bin = dir.join(format!("rill{}", std::env::consts::EXE_SUFFIX));
        assert!(
            bin.is_file(),
            "no rill binary at {} (looked beside the test executable {}): run the tests with \
             `cargo test`, which builds it, or `cargo build --bin rill` first",
            bin.display(),
            exe.display()
        );
        bin
    })
}

pub struct TestBroker {
    pub dir: tempfile::TempDir,
    pub port: u16,
    pub shards: usize,
    pub extra: Vec<String>,
    pub env: Vec<(String, String)>,
    /// Kafka protocol port of shard 0, when the Kafka listener is on.
    pub kafka_port: Option<u16>,
    /// The address it listens on (127.0.0.1, or its own in a [`NetLab`]).
    pub host: String,
    /// The network namespace it runs in (a [`NetLab`]'s), if not the test's own.
    pub netns: Option<PathBuf>,
    /// Broker processes started so far (each prints one "ready" line to the shared log).
    spawns: usize,
    child: Option<Child>,
    log: PathBuf,
    /// Where the data dir is when it is not `dir/data` (e.g. on a mounted filesystem).
    data: Option<PathBuf>,
    /// How the harness's own clients connect when the native listener speaks TLS.
    pub client_tls: Option<rill::tls::ClientTls>,
    /// The credentials the harness's own clients authenticate with when the native
    /// listener requires SASL.
    pub client_sasl: Option<rill::client::SaslCredentials>,
}

/// Test ports come from below the kernel's ephemeral range (32768-60999 here): a port the
/// kernel hands out for outgoing connections could otherwise be taken by a client socket while
/// a broker that owned it restarts. `.ci/run` also reserves them (`ip_local_reserved_ports`),
/// so a machine with a wider ephemeral range never hands them out either.
const PORTS: std::ops::Range<u16> = 20000..32700;

/// A port P such that P..P+n are free right now and were never handed out before to any test
/// process that is still running: each port is held by an exclusive lock on a file of its own
/// (`$TMPDIR/rill-testkit-ports/P`) until this process exits, so a broker being restarted
/// keeps its ports, whether the other tests run in this process or in another one.
pub fn free_ports(n: usize) -> u16 {
    static HELD: std::sync::Mutex<Vec<std::fs::File>> = std::sync::Mutex::new(Vec::new());
    let mut held = HELD.lock().unwrap_or_else(|e| e.into_inner());
    let dir = std::env::temp_dir().join("rill-testkit-ports");
    std::fs::create_dir_all(&dir).expect("port lock dir");
    let span = u64::from(PORTS.end - PORTS.start) - n as u64;
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    // Processes start from different places, and step by a prime so one pass visits all.
    let first = u64::from(std::process::id()) * 7919 + u64::from(nanos);
    for attempt in 0..span {
        let p = PORTS.start + ((first + attempt * 104_729) % span) as u16;
        let locks: Vec<std::fs::File> = (p..p + n as u16)
            .map_while(|q| {
                let f = std::fs::OpenOptions::new()
                    .create(true)
                    .truncate(false)
                    .write(true)
                    .open(dir.join(q.to_string()))
                    .ok()?;
                f.try_lock().ok().map(|()| f)
            })
            .collect();
        if locks.len() < n {
            continue;
        }
        // Not used by anything else right now either.
        let binds: Vec<_> = (p..p + n as u16)
            .map(|q| TcpListener::bind(("127.0.0.1", q)))
            .collect();
        if binds.iter().all(|b| b.is_ok()) {
            held.extend(locks);
            return p;
        }
    }
    panic!("no free port range of {n} in {PORTS:?}");
}

impl TestBroker {
    pub fn start(shards: usize, extra: &[&str]) -> TestBroker {
        Self::start_with_env(shards, extra, &[])
    }

    /// Starts a broker with extra environment variables (for `RILL_*` flags).
    pub fn start_with_env(shards: usize, extra: &[&str], env: &[(&str, &str)]) -> TestBroker {
        Self::start_at(None, shards, extra, env)
    }

    /// Starts a broker whose data dir is `data` (say, on a small mounted filesystem); its log
    /// stays in a temp dir elsewhere, so that the broker's own output never fills `data`.
    pub fn start_on(data: PathBuf, shards: usize, extra: &[&str]) -> TestBroker {
        Self::start_at(Some(data), shards, extra, &[])
    }

    fn start_at(
        data: Option<PathBuf>,
        shards: usize,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> TestBroker {
        let dir = tempfile::tempdir().expect("tempdir");
        let port = free_ports(shards);
        let log = dir.path().join("broker.log");
        let mut b = TestBroker {
            dir,
            port,
            shards,
            extra: extra.iter().map(|s| s.to_string()).collect(),
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            kafka_port: None,
            host: "127.0.0.1".into(),
            netns: None,
            spawns: 0,
            child: None,
            log,
            data,
            client_tls: None,
            client_sasl: None,
        };
        b.spawn();
        b
    }

    /// Starts a broker with the Kafka listener on (its own free port range).
    pub fn start_kafka(shards: usize, extra: &[&str]) -> TestBroker {
        Self::start_kafka_with_env(shards, extra, &[])
    }

    /// `start_kafka` with extra environment variables (for `RILL_*` flags).
    pub fn start_kafka_with_env(shards: usize, extra: &[&str], env: &[(&str, &str)]) -> TestBroker {
        let kafka = free_ports(shards);
        let mut args = vec!["--kafka-listen".to_string(), format!("127.0.0.1:{kafka}")];
        args.extend(extra.iter().map(|s| s.to_string()));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let mut b = Self::start_with_env(shards, &args, env);
        b.kafka_port = Some(kafka);
        b
    }

    /// Like [`start_on`](Self::start_on), with the Kafka listener on.
    pub fn start_kafka_on(data: PathBuf, shards: usize, extra: &[&str]) -> TestBroker {
        let kafka = free_ports(shards);
        let mut args = vec!["--kafka-listen".to_string(), format!("127.0.0.1:{kafka}")];
        args.extend(extra.iter().map(|s| s.to_string()));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let mut b = Self::start_at(Some(data), shards, &args, &[]);
        b.kafka_port = Some(kafka);
        b
    }

    /// The Kafka bootstrap address (`host:port` of shard 0's Kafka listener).
    pub fn kafka_bootstrap(&self) -> String {
        format!(
            "{}:{}",
            self.host,
            self.kafka_port.expect("the Kafka listener is on")
        )
    }

    pub fn data_dir(&self) -> PathBuf {
        self.data
            .clone()
            .unwrap_or_else(|| self.dir.path().join("data"))
    }

    pub fn bootstrap(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }

    /// A broker that is not started yet: [`launch`](Self::launch) starts it without waiting
    /// (brokers of a controller quorum are ready only once enough of them run).
    pub fn unstarted(shards: usize, extra: &[String]) -> TestBroker {
        let dir = tempfile::tempdir().expect("tempdir");
        let port = free_ports(shards);
        let log = dir.path().join("broker.log");
        TestBroker {
            dir,
            port,
            shards,
            extra: extra.to_vec(),
            env: Vec::new(),
            kafka_port: None,
            host: "127.0.0.1".into(),
            netns: None,
            spawns: 0,
            child: None,
            log,
            data: None,
            client_tls: None,
            client_sasl: None,
        }
    }

    /// Starts the process and returns at once; [`wait_ready`](Self::wait_ready) waits.
    pub fn launch(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("log file");
        let mut cmd = Command::new(rill_bin());
        if let Some(ns) = &self.netns {
            use std::os::fd::AsRawFd;
            use std::os::unix::process::CommandExt;
            let ns = std::fs::File::open(ns).expect("the broker's network namespace");
            // SAFETY: between fork and exec only setns(2) runs (async-signal-safe), on an fd
            // the closure owns (opened before the fork).
            unsafe {
                cmd.pre_exec(move || {
                    if libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        }
        let child = cmd
            .arg("broker")
            .arg("--data-dir")
            .arg(self.data_dir())
            .arg("--listen")
            .arg(self.bootstrap())
            .arg("--shards")
            .arg(self.shards.to_string())
            .args(if self.extra.iter().any(|a| a == "--kafka-listen") {
                &[][..]
            } else {
                &["--kafka-listen", "off"][..]
            })
            .args(&self.extra)
            // RILL_TEST_BROKER_LOG=debug (say) to see more of a failing test's brokers.
            .env(
                "RUST_LOG",
                std::env::var("RILL_TEST_BROKER_LOG").unwrap_or_else(|_| "info".into()),
            )
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("spawn rill broker");
        self.child = Some(child);
        self.spawns += 1;
    }

    /// The broker process's pid, while it is started.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Whether the process runs (started and not exited).
    pub fn is_running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| c.try_wait().ok().flatten().is_none())
    }

    /// Waits (generously) for the process to exit by itself; returns its status.
    pub fn wait_exit(&mut self) -> std::process::ExitStatus {
        let mut c = self.child.take().expect("broker started");
        let start = Instant::now();
        loop {
            if let Some(status) = c.try_wait().expect("wait") {
                return status;
            }
            if start.elapsed() > DEADLINE {
                let _ = c.kill();
                panic!("broker did not exit: {}", self.log_text());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn spawn(&mut self) {
        self.launch();
        self.wait_ready();
    }

    /// Until every shard accepts connections and metadata answers.
    pub fn wait_ready(&mut self) {
        let start = Instant::now();
        loop {
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                panic!("broker exited with {status}: {}", self.log_text());
            }
            let all_up = (0..self.shards).all(|i| {
                let addr: SocketAddr = format!("{}:{}", self.host, self.port + i as u16)
                    .parse()
                    .unwrap();
                TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok()
            });
            let announced = self.log_text().matches(" ready: ").count() >= self.spawns;
            if all_up && announced && Client::connect(self.client_config()).is_ok() {
                return;
            }
            if start.elapsed() >= DEADLINE {
                panic!(
                    "broker not ready: {}\n--- where its threads are ---\n{}",
                    self.log_text(),
                    self.threads_report()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Where a live broker's threads are: name, state and kernel wait channel of each, then
    /// their stacks when `gdb` is installed. A broker that never gets ready logs nothing more
    /// (one hung so, once, on a loaded machine, between its registration and its shards'
    /// listeners); this is what tells the next one's cause.
    fn threads_report(&self) -> String {
        let Some(pid) = self.pid() else {
            return "(not running)".into();
        };
        let mut out = String::new();
        let tasks = std::fs::read_dir(format!("/proc/{pid}/task"))
            .map(|d| d.flatten().map(|e| e.path()).collect::<Vec<_>>())
            .unwrap_or_default();
        for t in tasks {
            let read = |f: &str| std::fs::read_to_string(t.join(f)).unwrap_or_default();
            let stat = read("stat");
            let state = stat.rsplit(") ").next().and_then(|r| r.split(' ').next());
            out.push_str(&format!(
                "{} {} {} {}\n",
                t.file_name().and_then(|n| n.to_str()).unwrap_or("?"),
                read("comm").trim(),
                state.unwrap_or("?"),
                read("wchan").trim()
            ));
        }
        let gdb = Command::new("timeout")
            .args(["60", "gdb", "-p", &pid.to_string(), "-batch"])
            .args(["-ex", "thread apply all bt"])
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .output();
        if let Ok(o) = gdb {
            let text = String::from_utf8_lossy(&o.stdout);
            // The innermost frames of each thread, each cut short: enough to see the wait.
            let mut frames = 0;
            for line in text.lines() {
                if line.starts_with("Thread ") {
                    frames = 0;
                } else if !line.starts_with('#') {
                    continue;
                }
                frames += 1;
                if frames <= 25 {
                    out.extend(line.chars().take(240));
                    out.push('\n');
                }
            }
        }
        out
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Sends `signal` (SIGSTOP, SIGCONT, ...) to the running broker process.
    pub fn signal(&self, signal: i32) {
        let pid = self.pid().expect("broker running");
        // SAFETY: kill(2) on our own child's pid with a plain signal number.
        let rc = unsafe { libc::kill(pid as libc::pid_t, signal) };
        assert_eq!(rc, 0, "kill({pid}, {signal})");
    }

    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Sends SIGTERM and waits (generously) for the broker to exit; returns its status.
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        let mut c = self.child.take().expect("broker running");
        // SAFETY: signalling our own child process by its pid.
        unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
        let start = Instant::now();
        loop {
            if let Some(status) = c.try_wait().expect("wait") {
                return status;
            }
            if start.elapsed() > DEADLINE {
                let _ = c.kill();
                panic!("broker ignored SIGTERM: {}", self.log_text());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Starts the broker again after `terminate` or `kill`.
    pub fn start_again(&mut self) {
        self.spawn();
    }

    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }

    /// A field of the broker process's /proc status in KiB ("VmRSS", "VmHWM").
    pub fn status_kib(&self, field: &str) -> u64 {
        let pid = self.pid().expect("broker running");
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
        status
            .lines()
            .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"))
    }

    /// Starts a broker with the Kafka listener on (`kafka`) and `extra` flags (TLS ones,
    /// typically); the harness's clients connect with `client_tls` (needed when the native
    /// listener speaks TLS).
    pub fn start_tls(
        shards: usize,
        kafka: bool,
        extra: &[String],
        client_tls: Option<rill::tls::ClientTls>,
    ) -> TestBroker {
        let mut args = extra.to_vec();
        let kafka_port = kafka.then(|| free_ports(shards));
        if let Some(k) = kafka_port {
            args.extend(["--kafka-listen".to_string(), format!("127.0.0.1:{k}")]);
        }
        let mut b = TestBroker::unstarted(shards, &args);
        b.kafka_port = kafka_port;
        b.client_tls = client_tls;
        b.spawn();
        b
    }

    /// Client settings for this broker (with its TLS settings, if any).
    pub fn client_config(&self) -> ClientConfig {
        let mut cfg = ClientConfig::new(self.bootstrap());
        cfg.tls = self.client_tls.clone();
        cfg.sasl = self.client_sasl.clone();
        cfg
    }

    pub fn client(&self) -> Client {
        Client::connect(self.client_config()).expect("client")
    }

    /// Runs the `rill` CLI against this broker.
    pub fn cli(&self, args: &[&str], stdin: Option<&str>) -> std::process::Output {
        cli(&self.bootstrap(), args, stdin)
    }
}

/// Lines of a broker's log a failing test prints.
const LOG_TAIL_LINES: usize = 300;

impl Drop for TestBroker {
    fn drop(&mut self) {
        self.kill();
        // A failing test shows what its brokers said last (the harness prints a failing
        // test's output; the log itself goes with the temp dir).
        if std::thread::panicking() {
            let log = self.log_text();
            let lines: Vec<&str> = log.lines().collect();
            let tail = &lines[lines.len().saturating_sub(LOG_TAIL_LINES)..];
            eprintln!(
                "--- the last {} lines of broker {}'s log ---\n{}\n--- end of log ---",
                tail.len(),
                self.bootstrap(),
                tail.join("\n")
            );
        }
    }
}

pub fn cli(bootstrap: &str, args: &[&str], stdin: Option<&str>) -> std::process::Output {
    use std::io::Write;
    let mut child = Command::new(rill_bin())
        .arg("-b")
        .arg(bootstrap)
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn rill");
    if let Some(input) = stdin {
        let mut s = child.stdin.take().unwrap();
        s.write_all(input.as_bytes()).unwrap();
    }
    child.wait_with_output().expect("rill output")
}

/// The segment files of a partition directory, sorted.
pub fn segment_files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    v.sort();
    v
}

/// Whether broker data dir `data` holds a directory for `topic`'s partition `p`.
pub fn has_partition_dir(data: &Path, topic: &str, p: u32) -> bool {
    let prefix = format!("{topic}~");
    std::fs::read_dir(data.join("topics")).is_ok_and(|entries| {
        entries.flatten().any(|e| {
            e.file_name().to_string_lossy().starts_with(&prefix)
                && e.path().join(p.to_string()).is_dir()
        })
    })
}

/// The directory of `topic`'s partition `p` under a broker's data dir.
pub fn partition_dir(data: &Path, topic: &str, p: u32) -> PathBuf {
    let topics = data.join("topics");
    let prefix = format!("{topic}~");
    let entry = std::fs::read_dir(&topics)
        .unwrap()
        .flatten()
        .find(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .expect("topic dir");
    entry.path().join(p.to_string())
}

/// A producer with acks=all and a small linger.
pub fn producer(b: &TestBroker, batch_bytes: usize) -> Producer {
    Producer::new(
        b.client_config(),
        ProducerConfig {
            acks: Acks::All,
            linger: Duration::from_millis(2),
            batch_bytes,
            ..ProducerConfig::default()
        },
    )
    .expect("producer")
}

/// Produces `values` to one partition and waits for every acknowledgement.
pub fn produce_values(
    b: &TestBroker,
    topic: &str,
    partition: u32,
    values: impl IntoIterator<Item = String>,
) {
    produce_values_in_batches(b, topic, partition, 1 << 10, values);
}

/// [`produce_values`] with batches of up to `batch_bytes`.
pub fn produce_values_in_batches(
    b: &TestBroker,
    topic: &str,
    partition: u32,
    batch_bytes: usize,
    values: impl IntoIterator<Item = String>,
) {
    let p = producer(b, batch_bytes);
    let reports: Vec<_> = values
        .into_iter()
        .map(|v| {
            p.send(ProducerRecord::new(topic, v.as_bytes()).partition(partition))
                .unwrap()
        })
        .collect();
    p.flush().unwrap();
    for r in reports {
        r.wait().unwrap();
    }
}

/// A consumer assigned every partition of `topic`.
pub fn consumer(b: &TestBroker, topic: &str, from: StartFrom) -> Consumer {
    let mut c = Consumer::new(b.client_config(), ConsumerConfig::default()).expect("consumer");
    c.assign(topic, None, from).expect("assign");
    c
}

/// Reads exactly `expected` records from every partition of `topic` and checks none follow.
pub fn consume_exactly(
    b: &TestBroker,
    topic: &str,
    from: StartFrom,
    expected: usize,
) -> Vec<ConsumedRecord> {
    let mut c = consumer(b, topic, from);
    let mut out = Vec::new();
    let start = Instant::now();
    while out.len() < expected {
        out.extend(c.poll(Duration::from_millis(200)).expect("poll").to_owned());
        assert!(
            start.elapsed() < DEADLINE,
            "only {} of {expected} messages",
            out.len()
        );
    }
    out.extend(c.poll(Duration::from_millis(100)).expect("poll").to_owned());
    assert_eq!(out.len(), expected, "more messages than produced");
    out
}

/// The values of records as strings (a null value fails: these tests send none).
pub fn values(records: &[ConsumedRecord]) -> Vec<String> {
    records
        .iter()
        .map(|r| String::from_utf8(r.value.clone().expect("a non-null value")).unwrap())
        .collect()
}

/// Node ids whose controller links are cut (shared by a cluster's [`LinkProxy`]s).
#[derive(Default)]
pub struct Links {
    cut: std::sync::Mutex<std::collections::BTreeSet<u64>>,
}

impl Links {
    fn is_cut(&self, id: u64) -> bool {
        self.cut
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(&id)
    }
}

/// A fault-injecting TCP proxy in front of one voter's controller listener. It reads the
/// first frame of each connection (rill's controller handshake, which names the sender's
/// node id) so that cutting node X closes, and refuses, every link to X and every link from
/// X, in both directions: a full partition of X, not a one-way loss.
pub struct LinkProxy {
    pub port: u16,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl LinkProxy {
    pub fn start(target_id: u64, target: SocketAddr, links: std::sync::Arc<Links>) -> LinkProxy {
        use std::sync::atomic::{AtomicBool, Ordering};
        let listener = TcpListener::bind("127.0.0.1:0").expect("proxy bind");
        let port = listener.local_addr().unwrap().port();
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if stopped.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(conn) = conn else { continue };
                let links = links.clone();
                let stopped = stopped.clone();
                std::thread::spawn(move || {
                    let _ = proxy_one(conn, target_id, target, &links, &stopped);
                });
            }
        });
        LinkProxy { port, stop }
    }

    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }
}

impl Drop for LinkProxy {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

fn proxy_one(
    mut client: TcpStream,
    target_id: u64,
    target: SocketAddr,
    links: &Links,
    stop: &std::sync::atomic::AtomicBool,
) -> std::io::Result<()> {
    use std::io::{Read, Write};
    use std::sync::atomic::Ordering;
    client.set_read_timeout(Some(Duration::from_secs(30)))?;
    let mut len = [0u8; 4];
    client.read_exact(&mut len)?;
    let n = u32::from_be_bytes(len) as usize;
    if n > 1 << 20 {
        return Ok(());
    }
    let mut first = vec![0u8; n];
    client.read_exact(&mut first)?;
    // `"node_id":N` in the handshake's JSON; a connection that names none is passed on.
    let text = String::from_utf8_lossy(&first);
    let sender: Option<u64> = text.find("\"node_id\":").and_then(|at| {
        text[at + 10..]
            .chars()
            .take_while(char::is_ascii_digit)
            .collect::<String>()
            .parse()
            .ok()
    });
    let cut = || {
        stop.load(Ordering::SeqCst)
            || links.is_cut(target_id)
            || sender.is_some_and(|s| links.is_cut(s))
    };
    if cut() {
        return Ok(());
    }
    let mut server = TcpStream::connect_timeout(&target, Duration::from_secs(5))?;
    server.write_all(&len)?;
    server.write_all(&first)?;
    let pump = |mut from: TcpStream, mut to: TcpStream| {
        let _ = from.set_read_timeout(Some(Duration::from_millis(100)));
        let mut buf = vec![0u8; 64 << 10];
        loop {
            if cut() {
                break;
            }
            match from.read(&mut buf) {
                Ok(0) => break,
                Ok(k) => {
                    if to.write_all(&buf[..k]).is_err() {
                        break;
                    }
                }
                Err(e)
                    if e.kind() == std::io::ErrorKind::WouldBlock
                        || e.kind() == std::io::ErrorKind::TimedOut => {}
                Err(_) => break,
            }
        }
        let _ = from.shutdown(std::net::Shutdown::Both);
        let _ = to.shutdown(std::net::Shutdown::Both);
    };
    let (c2, s2) = (client.try_clone()?, server.try_clone()?);
    std::thread::scope(|scope| {
        scope.spawn(|| pump(client, server));
        scope.spawn(|| pump(s2, c2));
    });
    Ok(())
}

/// How a [`TestCluster`]'s brokers are started.
#[derive(Default)]
struct Placement<'a> {
    /// Voters reach each other through [`LinkProxy`]s.
    proxied: bool,
    /// The Kafka listener on.
    kafka: bool,
    /// Each broker in its own namespace of this lab.
    lab: Option<&'a NetLab>,
    /// The harness's clients authenticate so (the native listeners require SASL).
    client_sasl: Option<rill::client::SaslCredentials>,
    /// The harness's clients connect so (the native listeners speak TLS).
    client_tls: Option<rill::tls::ClientTls>,
}

/// N brokers, each a voter of one controller quorum (`--controller-voters`), with their own
/// free ports and data dirs; optionally every voter behind a [`LinkProxy`].
pub struct TestCluster {
    pub nodes: Vec<TestBroker>,
    /// The `--controller-voters` every node was started with.
    pub voters: String,
    pub links: std::sync::Arc<Links>,
    pub proxies: Vec<LinkProxy>,
}

impl TestCluster {
    /// `n` brokers of `shards` shards each, `extra` flags on every one; returns when each
    /// serves.
    pub fn start(n: usize, shards: usize, extra: &[&str]) -> TestCluster {
        Self::start_inner(n, shards, extra, Placement::default())
    }

    /// As [`start`](Self::start), the voters reaching each other through [`LinkProxy`]s, so
    /// that [`isolate`](Self::isolate) can cut one off.
    pub fn start_with_proxies(n: usize, shards: usize, extra: &[&str]) -> TestCluster {
        let how = Placement {
            proxied: true,
            ..Placement::default()
        };
        Self::start_inner(n, shards, extra, how)
    }

    /// As [`start`](Self::start), every broker with the Kafka listener on too (one port per
    /// shard; [`kafka_bootstrap`](Self::kafka_bootstrap)).
    pub fn start_kafka(n: usize, shards: usize, extra: &[&str]) -> TestCluster {
        let how = Placement {
            kafka: true,
            ..Placement::default()
        };
        Self::start_inner(n, shards, extra, how)
    }

    /// As [`start`](Self::start) (with the Kafka listener if `kafka`), broker `id` running in
    /// `lab`'s namespace for it and listening on its address there, so that the lab can cut
    /// or slow all its links. Call it from a thread in the lab's client namespace.
    pub fn start_in(
        lab: &NetLab,
        n: usize,
        shards: usize,
        extra: &[&str],
        kafka: bool,
    ) -> TestCluster {
        let how = Placement {
            kafka,
            lab: Some(lab),
            ..Placement::default()
        };
        Self::start_inner(n, shards, extra, how)
    }

    /// As [`start`](Self::start), the harness's clients authenticating with `sasl` (for
    /// brokers whose `extra` flags make their native listeners require SASL).
    pub fn start_sasl(
        n: usize,
        shards: usize,
        extra: &[&str],
        sasl: rill::client::SaslCredentials,
    ) -> TestCluster {
        let how = Placement {
            client_sasl: Some(sasl),
            ..Placement::default()
        };
        Self::start_inner(n, shards, extra, how)
    }

    /// As [`start`](Self::start), the harness's clients connecting with `tls` (the flags in
    /// `extra` put TLS on the native listeners).
    pub fn start_tls(
        n: usize,
        shards: usize,
        extra: &[&str],
        tls: rill::tls::ClientTls,
    ) -> TestCluster {
        let how = Placement {
            client_tls: Some(tls),
            ..Placement::default()
        };
        Self::start_inner(n, shards, extra, how)
    }

    /// Broker `id`'s Kafka bootstrap address (started with the Kafka listener on).
    pub fn kafka_bootstrap(&self, id: u64) -> String {
        self.nodes[id as usize - 1].kafka_bootstrap()
    }

    fn start_inner(n: usize, shards: usize, extra: &[&str], how: Placement) -> TestCluster {
        let links = std::sync::Arc::new(Links::default());
        let hosts: Vec<String> = (1..=n as u64)
            .map(|id| how.lab.map_or("127.0.0.1".into(), |l| l.host(id)))
            .collect();
        let listen: Vec<u16> = (0..n).map(|_| free_ports(1)).collect();
        let proxies: Vec<LinkProxy> = if how.proxied {
            assert!(how.lab.is_none(), "a lab's brokers need no proxies");
            listen
                .iter()
                .enumerate()
                .map(|(i, p)| {
                    let target: SocketAddr = format!("127.0.0.1:{p}").parse().unwrap();
                    LinkProxy::start(i as u64 + 1, target, links.clone())
                })
                .collect()
        } else {
            Vec::new()
        };
        let voters = (0..n)
            .map(|i| match proxies.get(i) {
                Some(p) => format!("{}@{}", i + 1, p.addr()),
                None => format!("{}@{}:{}", i + 1, hosts[i], listen[i]),
            })
            .collect::<Vec<_>>()
            .join(",");
        let mut nodes: Vec<TestBroker> = (0..n)
            .map(|i| {
                let mut args: Vec<String> = vec![
                    "--node-id".into(),
                    (i + 1).to_string(),
                    "--controller-voters".into(),
                    voters.clone(),
                    "--controller-listen".into(),
                    format!("{}:{}", hosts[i], listen[i]),
                ];
                let kafka = how.kafka.then(|| free_ports(shards));
                if let Some(k) = kafka {
                    args.extend(["--kafka-listen".into(), format!("{}:{k}", hosts[i])]);
                }
                args.extend(extra.iter().map(|s| s.to_string()));
                let mut b = TestBroker::unstarted(shards, &args);
                b.kafka_port = kafka;
                b.host = hosts[i].clone();
                b.netns = how.lab.map(|l| l.netns(i as u64 + 1));
                b.client_sasl = how.client_sasl.clone();
                b.client_tls = how.client_tls.clone();
                b
            })
            .collect();
        for b in &mut nodes {
            b.launch();
        }
        for b in &mut nodes {
            b.wait_ready();
        }
        TestCluster {
            nodes,
            voters,
            links,
            proxies,
        }
    }

    /// A broker that is not a voter (`--process-roles broker`) of this quorum, node `id`,
    /// unstarted.
    pub fn non_voter(&self, id: u32, shards: usize, extra: &[&str]) -> TestBroker {
        let mut args: Vec<String> = vec![
            "--node-id".into(),
            id.to_string(),
            "--process-roles".into(),
            "broker".into(),
            "--controller-voters".into(),
            self.voters.clone(),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        TestBroker::unstarted(shards, &args)
    }

    /// Starts one more broker that is not a voter (the next node id), with the Kafka listener
    /// on if `kafka`; returns its node id once it serves.
    pub fn add_broker(&mut self, shards: usize, extra: &[&str], kafka: bool) -> u64 {
        let id = self.nodes.len() as u32 + 1;
        let port = kafka.then(|| free_ports(shards));
        let flag = port.map(|k| format!("127.0.0.1:{k}"));
        let mut args: Vec<&str> = Vec::new();
        if let Some(f) = &flag {
            args.extend(["--kafka-listen", f.as_str()]);
        }
        args.extend(extra);
        let mut b = self.non_voter(id, shards, &args);
        b.kafka_port = port;
        // The harness's clients reach it as they reach the others.
        b.client_tls = self.nodes[0].client_tls.clone();
        b.client_sasl = self.nodes[0].client_sasl.clone();
        b.launch();
        b.wait_ready();
        self.nodes.push(b);
        u64::from(id)
    }

    /// Node `id`'s broker (ids from 1).
    pub fn node(&mut self, id: u64) -> &mut TestBroker {
        &mut self.nodes[id as usize - 1]
    }

    /// The controller leader as broker `id` reports it (0: none known, or no answer).
    pub fn controller_seen_by(&self, id: u64) -> u64 {
        let b = &self.nodes[id as usize - 1];
        Client::connect(b.client_config())
            .and_then(|mut c| c.cluster_info())
            .map(|i| i.controller_id)
            .unwrap_or(0)
    }

    /// Waits until every node in `alive` names the same controller leader, itself in
    /// `alive`, and returns it.
    pub fn wait_leader(&self, alive: &[u64]) -> u64 {
        let start = Instant::now();
        loop {
            let seen: Vec<u64> = alive
                .iter()
                .map(|&id| self.controller_seen_by(id))
                .collect();
            if seen.iter().all(|&l| l == seen[0]) && alive.contains(&seen[0]) {
                return seen[0];
            }
            assert!(
                start.elapsed() < DEADLINE,
                "no agreed controller leader among {alive:?}: {seen:?}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The topics (internal ones hidden) in broker `id`'s metadata, with their partition
    /// counts; `None` when it does not answer.
    pub fn topics_on(&self, id: u64) -> Option<std::collections::BTreeMap<String, usize>> {
        let b = &self.nodes[id as usize - 1];
        let mut c = Client::connect(b.client_config()).ok()?;
        let md = c.refresh_metadata().ok()?;
        Some(
            md.topics
                .iter()
                .filter(|(n, _)| !n.starts_with("__"))
                .map(|(n, t)| (n.clone(), t.partitions.len()))
                .collect(),
        )
    }

    /// Waits until `f` holds for broker `id`'s topics.
    pub fn wait_topics(
        &self,
        id: u64,
        what: &str,
        f: impl Fn(&std::collections::BTreeMap<String, usize>) -> bool,
    ) -> std::collections::BTreeMap<String, usize> {
        let start = Instant::now();
        loop {
            let t = self.topics_on(id);
            if let Some(t) = t.as_ref().filter(|t| f(t)) {
                return t.clone();
            }
            assert!(
                start.elapsed() < DEADLINE,
                "node {id}: {what}; its topics: {t:?}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Cuts every controller link to and from node `id` (needs `start_with_proxies`).
    pub fn isolate(&self, id: u64) {
        assert!(!self.proxies.is_empty(), "isolate needs start_with_proxies");
        self.links
            .cut
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id);
    }

    /// Restores node `id`'s controller links.
    pub fn heal(&self, id: u64) {
        self.links
            .cut
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&id);
    }
}

/// A consumer's Kafka Fetch of one partition from `offset` (1 MiB), answered at once; the
/// asker's `current_leader_epoch` (-1: none).
pub fn kafka_fetch_request(
    topic: &str,
    partition: i32,
    offset: i64,
    current_leader_epoch: i32,
) -> kafka_protocol::messages::FetchRequest {
    use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
    use kafka_protocol::messages::{FetchRequest, TopicName};
    use kafka_protocol::protocol::StrBytes;
    let mut p = FetchPartition::default();
    p.partition = partition;
    p.fetch_offset = offset;
    p.current_leader_epoch = current_leader_epoch;
    p.last_fetched_epoch = -1;
    p.log_start_offset = -1;
    p.partition_max_bytes = 1 << 20;
    let mut t = FetchTopic::default();
    t.topic = TopicName(StrBytes::from_string(topic.to_string()));
    t.partitions = vec![p];
    let mut req = FetchRequest::default();
    req.replica_id = (-1).into();
    req.max_wait_ms = 0;
    req.min_bytes = 1;
    req.max_bytes = 16 << 20;
    req.session_epoch = -1;
    req.topics = vec![t];
    req
}

/// One raw Kafka request on its own connection, for what no client library would send (a
/// version, a field or a node of our choosing); panics on anything but a well-formed answer.
pub fn kafka_call<Req, Resp>(
    addr: &str,
    api: kafka_protocol::messages::ApiKey,
    version: i16,
    req: &Req,
) -> Resp
where
    Req: kafka_protocol::protocol::Encodable,
    Resp: kafka_protocol::protocol::Decodable,
{
    use bytes::Buf;
    use kafka_protocol::messages::{RequestHeader, ResponseHeader};
    use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
    use std::io::{Read, Write};
    let mut header = RequestHeader::default();
    header.request_api_key = api as i16;
    header.request_api_version = version;
    header.correlation_id = 9;
    header.client_id = Some(StrBytes::from_static_str("rill-testkit"));
    let mut body = bytes::BytesMut::new();
    header
        .encode(&mut body, api.request_header_version(version))
        .unwrap();
    req.encode(&mut body, version).unwrap();
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(DEADLINE)).unwrap();
    s.write_all(&(body.len() as i32).to_be_bytes()).unwrap();
    s.write_all(&body).unwrap();
    let mut len = [0u8; 4];
    s.read_exact(&mut len)
        .unwrap_or_else(|e| panic!("{api:?} v{version}: no answer ({e})"));
    let mut resp = vec![0u8; i32::from_be_bytes(len) as usize];
    s.read_exact(&mut resp).unwrap();
    let mut resp = bytes::Bytes::from(resp);
    let h = ResponseHeader::decode(&mut resp, api.response_header_version(version)).unwrap();
    assert_eq!(h.correlation_id, 9);
    let r = Resp::decode(&mut resp, version).unwrap();
    assert_eq!(
        resp.remaining(),
        0,
        "{api:?} v{version}: bytes after the body"
    );
    r
}

/// A plain Kafka record at `offset` (no producer id, create time fixed) with no headers, for
/// [`kafka_produce_request`].
pub fn kafka_record(
    offset: i64,
    key: Option<bytes::Bytes>,
    value: Option<bytes::Bytes>,
) -> kafka_protocol::records::Record {
    kafka_protocol::records::Record {
        transactional: false,
        control: false,
        delete_horizon: false,
        partition_leader_epoch: -1,
        producer_id: -1,
        producer_epoch: -1,
        timestamp_type: kafka_protocol::records::TimestampType::Creation,
        offset,
        // kafka-protocol's encoder starts a new batch wherever offset - sequence changes.
        sequence: offset as i32,
        timestamp: 1_700_000_000_000,
        key,
        value,
        headers: Default::default(),
    }
}

/// A Kafka acks=all Produce of `records` (encoded as one uncompressed RecordBatch v2) to
/// one partition, for tests that send raw requests.
pub fn kafka_produce_request(
    topic: &str,
    partition: i32,
    records: &[kafka_protocol::records::Record],
    timeout_ms: i32,
) -> kafka_protocol::messages::ProduceRequest {
    use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
    use kafka_protocol::messages::{ProduceRequest, TopicName};
    use kafka_protocol::protocol::StrBytes;
    use kafka_protocol::records::{Compression, RecordBatchEncoder, RecordEncodeOptions};
    let mut wire = bytes::BytesMut::new();
    let options = RecordEncodeOptions {
        version: 2,
        compression: Compression::None,
    };
    RecordBatchEncoder::encode(&mut wire, records, &options).unwrap();
    let mut data = PartitionProduceData::default();
    data.index = partition;
    data.records = Some(wire.freeze());
    let mut t = TopicProduceData::default();
    t.name = TopicName(StrBytes::from_string(topic.to_string()));
    t.partition_data = vec![data];
    let mut req = ProduceRequest::default();
    req.acks = -1;
    req.timeout_ms = timeout_ms;
    req.topic_data = vec![t];
    req
}

/// A command for a program from outside the workspace (kcat, python3, node) with cargo's
/// `LD_LIBRARY_PATH` removed: `cargo test --workspace` puts the build directory of
/// rdkafka-sys (rill-bench's bundled librdkafka, built without OpenSSL) on it, and kcat would
/// then load that library instead of the system's and refuse every TLS setting.
pub fn external(program: &str) -> std::process::Command {
    let mut c = std::process::Command::new(program);
    c.env_remove("LD_LIBRARY_PATH");
    c
}

/// A broker's Prometheus text (HTTP/1.0 GET /metrics on its `--metrics-listen` address).
pub fn scrape_metrics(addr: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).expect("metrics endpoint");
    s.set_read_timeout(Some(DEADLINE)).expect("read timeout");
    s.write_all(b"GET /metrics HTTP/1.0\r\n\r\n")
        .expect("request");
    let mut out = String::new();
    s.read_to_string(&mut out).expect("response");
    out
}

/// Runs the test script `tests/kafka/NAME` (Python, the Kafka clients of `.ci/run`) with
/// `args`, no stdin, and returns its stdout; panics naming the script and its stderr when it
/// fails.
pub fn kafka_script(name: &str, args: &[&str]) -> String {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/kafka")
        .join(name);
    let out = external("python3")
        .arg(&script)
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run python3 ({e}): run .ci/run"));
    assert!(
        out.status.success(),
        "{name} {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}
