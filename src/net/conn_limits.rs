//! Connection admission and timeouts shared by the native and the Kafka listener: the per-shard
//! cap, the per-IP cap, the idle timeout and the send deadline.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::future::Future;
use std::net::IpAddr;
use std::rc::Rc;
use std::time::{Duration, Instant};

use rill_shards::Deadlines;

/// At most one "refusing a connection" warning per listener per this period; the others are
/// counted and reported with the next one (a flood must not flood the log too).
const REFUSAL_LOG_EVERY: Duration = Duration::from_secs(10);

/// Why a connection was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("--max-connections-per-shard {0} reached")]
    Shard(usize),
    #[error("--max-connections-per-ip {0} reached for this address")]
    Ip(usize),
}

/// The open connections of one listener of one shard.
pub struct ListenerConns {
    name: &'static str,
    max_total: usize,
    max_per_ip: usize,
    total: Cell<usize>,
    per_ip: RefCell<HashMap<IpAddr, usize>>,
    last_log: Cell<Option<Instant>>,
    unlogged: Cell<u64>,
}

/// Counts one admitted connection until dropped.
pub struct ConnGuard {
    conns: Rc<ListenerConns>,
    ip: Option<IpAddr>,
}

impl ListenerConns {
    pub fn new(name: &'static str, max_total: usize, max_per_ip: usize) -> Rc<ListenerConns> {
        Rc::new(ListenerConns {
            name,
            max_total,
            max_per_ip,
            total: Cell::new(0),
            per_ip: RefCell::new(HashMap::new()),
            last_log: Cell::new(None),
            unlogged: Cell::new(0),
        })
    }

    pub fn open(&self) -> usize {
        self.total.get()
    }

    /// Admits a connection from `ip` (unknown: counted in the total only), or says why not.
    pub fn admit(self: &Rc<Self>, ip: Option<IpAddr>) -> Result<ConnGuard, Refusal> {
        if self.total.get() >= self.max_total {
            return Err(Refusal::Shard(self.max_total));
        }
        if let Some(ip) = ip {
            let mut per_ip = self.per_ip.borrow_mut();
            let n = per_ip.entry(ip).or_insert(0);
            if *n >= self.max_per_ip {
                return Err(Refusal::Ip(self.max_per_ip));
            }
            *n += 1;
        }
        self.total.set(self.total.get() + 1);
        Ok(ConnGuard {
            conns: self.clone(),
            ip,
        })
    }

    /// Logs a refusal, at most once per [`REFUSAL_LOG_EVERY`].
    pub fn log_refusal(&self, shard: usize, peer: Option<std::net::SocketAddr>, why: Refusal) {
        let now = Instant::now();
        let due = self
            .last_log
            .get()
            .is_none_or(|t| now.duration_since(t) >= REFUSAL_LOG_EVERY);
        if !due {
            self.unlogged.set(self.unlogged.get() + 1);
            return;
        }
        let more = self.unlogged.replace(0);
        self.last_log.set(Some(now));
        let peer = peer.map_or_else(|| "?".to_string(), |p| p.to_string());
        if more > 0 {
            log::warn!(
                "shard {shard}: {} listener refused a connection from {peer}: {why} \
                 ({more} more refused since the last such message)",
                self.name
            );
        } else {
            log::warn!(
                "shard {shard}: {} listener refused a connection from {peer}: {why}",
                self.name
            );
        }
    }
}

impl Drop for ConnGuard {
    fn drop(&mut self) {
        let c = &self.conns;
        c.total.set(c.total.get().saturating_sub(1));
        if let Some(ip) = self.ip {
            let mut per_ip = c.per_ip.borrow_mut();
            if let Some(n) = per_ip.get_mut(&ip) {
                *n -= 1;
                if *n == 0 {
                    // Keeps the map as small as the set of connected addresses.
                    per_ip.remove(&ip);
                }
            }
        }
    }
}

/// `fut`'s output, or `None` once `at` passes (`fut` is then dropped, which cancels it).
pub async fn until<T>(
    deadlines: &Deadlines,
    at: Instant,
    fut: impl Future<Output = T>,
) -> Option<T> {
    futures_lite::future::or(async { Some(fut.await) }, async {
        deadlines.sleep_until(at).await;
        None
    })
    .await
}

/// `now + d`, saturating far in the future.
/// Readies an accepted connection (no Nagle delay: replies are written whole) and names its
/// peer for the logs.
pub fn accepted(stream: &rill_shards::rt::TcpStream) -> String {
    let _ = stream.set_nodelay(true);
    stream
        .peer_addr()
        .map(|a| a.to_string())
        .unwrap_or_default()
}

pub fn after(d: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(d)
        .unwrap_or(now + Duration::from_secs(86_400 * 365))
}

/// Shuts a socket down both ways: a sendfile job still holding a duplicate of its descriptor
/// fails at once instead of writing on until its deadline.
pub fn shutdown(fd: std::os::fd::RawFd) {
    // SAFETY: shutdown on a descriptor the caller holds open.
    unsafe { libc::shutdown(fd, libc::SHUT_RDWR) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_per_shard_and_per_ip_and_releases_on_drop() {
        let c = ListenerConns::new("test", 3, 2);
        let a: IpAddr = "127.0.0.1".parse().unwrap();
        let b: IpAddr = "127.0.0.2".parse().unwrap();
        let a1 = c.admit(Some(a)).unwrap();
        let _a2 = c.admit(Some(a)).unwrap();
        assert_eq!(c.admit(Some(a)).err(), Some(Refusal::Ip(2)));
        let _b1 = c.admit(Some(b)).unwrap();
        assert_eq!(c.admit(Some(b)).err(), Some(Refusal::Shard(3)));
        assert_eq!(c.open(), 3);
        drop(a1);
        assert_eq!(c.open(), 2);
        let _a3 = c.admit(Some(a)).unwrap();
        assert_eq!(c.per_ip.borrow().get(&a), Some(&2));
    }
}
