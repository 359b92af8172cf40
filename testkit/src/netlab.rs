//! A network of Linux network namespaces for fault tests: one namespace per broker, one for
//! the test's clients, each with a veth into a "switch" namespace that holds a bridge. A
//! broker's every link (controller, replication, clients) crosses its veth, so
//! [`NetLab::cut`] (its switch port down) cuts all of them, [`NetLab::partition`] cuts only
//! the links between two brokers (blackhole routes on both sides), and [`NetLab::slow`] shapes
//! its traffic (a `tbf` rate limit on both ends of its veth: the kernel here has no `netem`).
//!
//! Addresses are fixed (10.99.0.{id}, the client .200): each lab has its own namespaces, so
//! labs of parallel tests never see each other. Namespace names carry the test process's pid
//! and a per-process counter; everything is deleted on drop (also when the test panics), and
//! labs left by a killed test process (its pid gone) are deleted by the next lab.
//! Needs root and `ip`/`tc` (Debian's iproute2); it never touches the root namespace's
//! interfaces.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Every lab's namespace names start with this, then the owning pid.
const PREFIX: &str = "rillnet";
/// The bridge's subnet; brokers are .1 to .199, the client namespace .200.
const SUBNET: &str = "10.99.0";
const CLIENT_HOST: u8 = 200;

/// Runs `ip`/`tc` with `args`; panics (saying what) if it fails.
fn run(program: &str, args: &[&str]) {
    let out = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {program} ({e}): install iproute2 (.ci/run does)"));
    assert!(
        out.status.success(),
        "{program} {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Like [`run`], ignoring failure (cleanup of what may already be gone).
fn run_quiet(program: &str, args: &[&str]) {
    let _ = Command::new(program).args(args).output();
}

fn netns_path(name: &str) -> PathBuf {
    PathBuf::from("/run/netns").join(name)
}

/// Enters the network namespace at `path` on the calling thread only (threads and processes
/// it starts afterwards inherit it).
fn enter(path: &std::path::Path) -> std::io::Result<()> {
    let f = File::open(path)?;
    // SAFETY: setns(2) on a namespace fd we hold open; affects only this thread.
    if unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Deletes the namespaces of labs whose test process is gone (killed before its drop ran).
fn delete_abandoned() {
    let Ok(dir) = std::fs::read_dir("/run/netns") else {
        return;
    };
    for e in dir.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(rest) = name.strip_prefix(PREFIX) else {
            continue;
        };
        let pid: String = rest.chars().take_while(char::is_ascii_digit).collect();
        let Ok(pid) = pid.parse::<i32>() else {
            continue;
        };
        // SAFETY: kill with signal 0 only checks that the process exists.
        let alive = unsafe { libc::kill(pid, 0) } == 0
            || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM);
        if !alive {
            run_quiet("ip", &["netns", "del", &name]);
        }
    }
}

/// Brokers 1..=n, each in its own namespace, and a client namespace, on one bridge.
pub struct NetLab {
    name: String,
    brokers: usize,
    /// The calling thread's namespace before [`enter_client`](Self::enter_client).
    home: Option<File>,
}

impl NetLab {
    /// Builds the lab for `brokers` brokers (ids 1..=brokers) and moves the calling thread
    /// into its client namespace (restored on drop): the test body, the threads it spawns and
    /// the client processes it runs reach the brokers at [`host`](Self::host).
    pub fn new(brokers: usize) -> NetLab {
        assert!((1..usize::from(CLIENT_HOST)).contains(&brokers));
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        delete_abandoned();
        let name = format!(
            "{PREFIX}{}x{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::SeqCst)
        );
        let mut lab = NetLab {
            name,
            brokers,
            home: None,
        };
        let sw = lab.switch();
        run("ip", &["netns", "add", &sw]);
        run("ip", &["-n", &sw, "link", "add", "br0", "type", "bridge"]);
        // No STP: a port that comes back up forwards at once.
        run(
            "ip",
            &[
                "-n",
                &sw,
                "link",
                "set",
                "br0",
                "type",
                "bridge",
                "stp_state",
                "0",
            ],
        );
        run("ip", &["-n", &sw, "link", "set", "br0", "up"]);
        for host in (1..=brokers as u8).chain([CLIENT_HOST]) {
            let ns = lab.ns_of(host);
            let port = format!("p{host}");
            run("ip", &["netns", "add", &ns]);
            run("ip", &["-n", &ns, "link", "set", "lo", "up"]);
            run(
                "ip",
                &[
                    "link", "add", "eth0", "netns", &ns, "type", "veth", "peer", "name", &port,
                    "netns", &sw,
                ],
            );
            run("ip", &["-n", &sw, "link", "set", &port, "master", "br0"]);
            run("ip", &["-n", &sw, "link", "set", &port, "up"]);
            let addr = format!("{SUBNET}.{host}/24");
            run("ip", &["-n", &ns, "addr", "add", &addr, "dev", "eth0"]);
            run("ip", &["-n", &ns, "link", "set", "eth0", "up"]);
        }
        lab.enter_client();
        lab
    }

    fn switch(&self) -> String {
        format!("{}-sw", self.name)
    }

    fn ns_of(&self, host: u8) -> String {
        if host == CLIENT_HOST {
            format!("{}-c", self.name)
        } else {
            format!("{}-b{host}", self.name)
        }
    }

    fn host_of(id: u64) -> u8 {
        assert!((1..u64::from(CLIENT_HOST)).contains(&id), "broker id {id}");
        id as u8
    }

    /// Broker `id`'s address (it listens there, inside its namespace).
    pub fn host(&self, id: u64) -> String {
        format!("{SUBNET}.{}", Self::host_of(id))
    }

    /// Broker `id`'s namespace, for a process to enter before it runs.
    pub fn netns(&self, id: u64) -> PathBuf {
        netns_path(&self.ns_of(Self::host_of(id)))
    }

    /// Moves the calling thread into the client namespace (done by [`new`](Self::new) for
    /// the thread that built the lab; other threads that were running before call this).
    pub fn enter_client(&mut self) {
        if self.home.is_none() {
            self.home = Some(File::open("/proc/thread-self/ns/net").expect("own namespace"));
        }
        enter(&netns_path(&self.ns_of(CLIENT_HOST))).expect("enter the client namespace");
    }

    /// Cuts every link of broker `id`: its switch port goes down, nothing reaches it or
    /// leaves it (connections stay open and retransmit, as across a failed switch).
    pub fn cut(&self, id: u64) {
        let port = format!("p{}", Self::host_of(id));
        run("ip", &["-n", &self.switch(), "link", "set", &port, "down"]);
    }

    /// Undoes [`cut`](Self::cut).
    pub fn heal(&self, id: u64) {
        let port = format!("p{}", Self::host_of(id));
        run("ip", &["-n", &self.switch(), "link", "set", &port, "up"]);
    }

    /// Cuts the links between brokers `a` and `b` only (both directions: a blackhole route
    /// to the other on each side); their clients still reach both.
    pub fn partition(&self, a: u64, b: u64) {
        self.blackholes("add", a, b);
    }

    /// Undoes [`partition`](Self::partition).
    pub fn unpartition(&self, a: u64, b: u64) {
        self.blackholes("del", a, b);
    }

    /// Adds or deletes (`op`) the blackhole routes between `a` and `b`.
    fn blackholes(&self, op: &str, a: u64, b: u64) {
        for (from, to) in [(a, b), (b, a)] {
            let ns = self.ns_of(Self::host_of(from));
            let to = format!("{}/32", self.host(to));
            run("ip", &["-n", &ns, "route", op, "blackhole", &to]);
        }
    }

    /// Cuts broker `id` off from every other broker, its clients still reaching it.
    pub fn isolate_from_brokers(&self, id: u64) {
        for other in (1..=self.brokers as u64).filter(|&o| o != id) {
            self.partition(id, other);
        }
    }

    /// Undoes [`isolate_from_brokers`](Self::isolate_from_brokers).
    pub fn rejoin_brokers(&self, id: u64) {
        for other in (1..=self.brokers as u64).filter(|&o| o != id) {
            self.unpartition(id, other);
        }
    }

    /// Slows broker `id`'s traffic both ways to `kbit` kbit/s; packets queue up to
    /// `queue_ms` behind each other (a congested link: the more it is asked to carry, the
    /// later everything arrives, heartbeats too) and beyond that are dropped.
    pub fn slow(&self, id: u64, kbit: u32, queue_ms: u32) {
        let rate = format!("{kbit}kbit");
        let latency = format!("{queue_ms}ms");
        // A burst of a few full-size frames: enough for the rate to be met at all.
        for (ns, dev) in self.veth_ends(id) {
            run(
                "tc",
                &[
                    "-n", &ns, "qdisc", "replace", "dev", &dev, "root", "tbf", "rate", &rate,
                    "burst", "16kb", "latency", &latency,
                ],
            );
        }
    }

    /// Undoes [`slow`](Self::slow).
    pub fn unslow(&self, id: u64) {
        for (ns, dev) in self.veth_ends(id) {
            run("tc", &["-n", &ns, "qdisc", "del", "dev", &dev, "root"]);
        }
    }

    /// Both ends of broker `id`'s veth: (namespace, device) of its switch port and its own.
    fn veth_ends(&self, id: u64) -> [(String, String); 2] {
        let host = Self::host_of(id);
        [
            (self.switch(), format!("p{host}")),
            (self.ns_of(host), "eth0".to_string()),
        ]
    }
}

impl Drop for NetLab {
    fn drop(&mut self) {
        if let Some(home) = self.home.take() {
            // SAFETY: setns(2) back to the namespace this thread started in.
            unsafe { libc::setns(home.as_raw_fd(), libc::CLONE_NEWNET) };
        }
        // Deleting a namespace takes its veth ends (and so their peers) with it; processes
        // still inside keep it alive until they exit (the brokers are SIGKILLed on drop).
        for host in (1..=self.brokers as u8).chain([CLIENT_HOST]) {
            run_quiet("ip", &["netns", "del", &self.ns_of(host)]);
        }
        run_quiet("ip", &["netns", "del", &self.switch()]);
    }
}
