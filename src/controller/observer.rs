//! The controller of a broker that is not a voter (`--process-roles broker` with
//! `--controller-voters`): no raft, no files. It follows the quorum's metadata (a voter
//! pushes the whole applied metadata on every change, so a new or far-behind broker needs no
//! log replay: every update is a snapshot) and sends its calls (registration, heartbeats,
//! proposals from its clients) to a voter, which proposes them or forwards them to the leader.
//! It serves the same [`super::ControllerHandle`] as a voter, so the broker above cannot tell.
//!
//! It prefers the voter the metadata names as the controller leader (the freshest view) and
//! moves to another voter when one fails; metadata never goes back to an older applied index.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::transport::{ObserverError, ObserverLink, BACKOFF_MAX, BACKOFF_MIN};
use super::{publish, Call, Controller, ControllerConfig, ControllerError, Request, Shared};

/// Starts following the quorum in `cfg.voters` as broker `cfg.node_id` (not a voter).
pub(super) fn start(cfg: ControllerConfig) -> Result<Controller, ControllerError> {
    if cfg.voters.iter().any(|(id, _)| *id == cfg.node_id) {
        return Err(ControllerError::Config(format!(
            "node {} is a voter; only a broker that is not one follows the quorum",
            cfg.node_id
        )));
    }
    if ![3, 5].contains(&cfg.voters.len()) {
        return Err(ControllerError::Config(format!(
            "{} voters: a controller quorum has 3 or 5 voters",
            cfg.voters.len()
        )));
    }
    let capacity = cfg.queue_capacity.max(1);
    let (tx, rx) = flume::bounded(capacity);
    let shared = Shared::new();
    let link = ObserverLink {
        node_id: cfg.node_id,
        voters: cfg.voters.clone(),
        max_message_bytes: cfg.max_message_bytes,
        tls: cfg.tls.as_ref().map(|t| t.client.clone()),
    };
    let follower = Follower {
        link: link.clone(),
        shared: shared.clone(),
        stop: Arc::new(AtomicBool::new(false)),
    };
    let dispatcher = Dispatcher {
        link,
        shared: shared.clone(),
        timeout: cfg.forward_timeout,
        in_flight: Arc::new(AtomicUsize::new(0)),
        max_in_flight: cfg.max_pending.max(1),
        next_id: 1,
        pool: Arc::new(CallPool::default()),
    };
    let spawn_err = |e: std::io::Error| ControllerError::Storage(format!("spawn thread: {e}"));
    let stop = follower.stop.clone();
    let follow = std::thread::Builder::new()
        .name("rill-metadata".into())
        .spawn(move || follower.run())
        .map_err(spawn_err)?;
    let thread = std::thread::Builder::new()
        .name("rill-controller".into())
        .spawn(move || {
            dispatcher.run(rx);
            stop.store(true, Ordering::SeqCst);
            let _ = follow.join();
        })
        .map_err(spawn_err)?;
    Ok(Controller::running(tx, capacity, shared, thread))
}

/// Order in which to try the voters: the known controller leader first, then the others
/// starting after `turn`.
fn voters_to_try(link: &ObserverLink, leader: u64, turn: usize) -> Vec<(u64, String)> {
    let n = link.voters.len();
    let mut out: Vec<(u64, String)> = link
        .voters
        .iter()
        .filter(|(id, _)| *id == leader)
        .cloned()
        .collect();
    for k in 0..n {
        let v = &link.voters[(turn + k) % n];
        if v.0 != leader {
            out.push(v.clone());
        }
    }
    out
}

struct Follower {
    link: ObserverLink,
    shared: Arc<Shared>,
    stop: Arc<AtomicBool>,
}

impl Follower {
    fn run(self) {
        let mut turn = 0usize;
        let mut backoff = BACKOFF_MIN;
        let mut refused = std::collections::BTreeSet::new();
        let mut ever_ready = false;
        while !self.stop.load(Ordering::SeqCst) {
            let leader = self.shared.lock().metadata.controller_id;
            let mut served = false;
            for (id, addr) in voters_to_try(&self.link, leader, turn) {
                if self.stop.load(Ordering::SeqCst) {
                    return;
                }
                match self.link.connect(&addr) {
                    Ok(mut s) => {
                        refused.clear();
                        served |= self.follow(id, &mut s, &mut ever_ready);
                        break;
                    }
                    Err(ObserverError::Refused(why)) => {
                        log::error!("controller: voter {id} refused this broker: {why}");
                        refused.insert(id);
                        // Refused by a majority before ever following: this broker's flags
                        // are the odd ones out.
                        if !ever_ready && refused.len() > self.link.voters.len() / 2 {
                            self.fail(ControllerError::Refused(why));
                            return;
                        }
                    }
                    Err(ObserverError::Failed(why)) => log::debug!("controller: {why}"),
                }
            }
            turn += 1;
            if served {
                backoff = BACKOFF_MIN;
            } else {
                std::thread::sleep(backoff);
                backoff = (backoff * 2).min(BACKOFF_MAX);
            }
        }
    }

    /// Follows voter `id` until the connection fails, the stop, or the metadata names another
    /// leader. True when it delivered metadata.
    fn follow(
        &self,
        id: u64,
        s: &mut crate::client::socket::Socket,
        ever_ready: &mut bool,
    ) -> bool {
        if let Err(e) = self.link.subscribe(s) {
            log::debug!("controller: subscribing at voter {id}: {e}");
            return false;
        }
        let mut served = false;
        while !self.stop.load(Ordering::SeqCst) {
            let md = match self.link.next_metadata(s) {
                Ok(Some(md)) => md,
                Ok(None) => continue,
                Err(e) => {
                    log::info!("controller: metadata from voter {id}: {e}; reconnecting");
                    return served;
                }
            };
            served = true;
            let leader = md.controller_id;
            let mut state = self.shared.lock();
            if md.applied_index >= state.metadata.applied_index {
                publish(&mut state, Arc::new(md));
            }
            let ready = !state.metadata.cluster_id.is_empty() && leader != 0;
            state.ready = ready;
            *ever_ready |= ready;
            self.shared.changed.notify_all();
            drop(state);
            if leader != 0 && leader != id && self.link.voters.iter().any(|(v, _)| *v == leader) {
                // The leader's view is the freshest: follow it.
                return served;
            }
        }
        served
    }

    fn fail(&self, e: ControllerError) {
        self.shared.mark_stopped(e);
    }
}

struct Dispatcher {
    link: ObserverLink,
    shared: Arc<Shared>,
    timeout: Duration,
    in_flight: Arc<AtomicUsize>,
    max_in_flight: usize,
    next_id: u64,
    pool: Arc<CallPool>,
}

/// Idle call connections, reused so that a broker's heartbeats do not each take a connection
/// (and a reader thread) on the voter.
#[derive(Default)]
struct CallPool {
    idle: std::sync::Mutex<Vec<(u64, crate::client::socket::Socket, Instant)>>,
}

impl CallPool {
    /// Idle connections kept at most.
    const MAX_IDLE: usize = 4;
    /// An idle connection older than this is not reused: the voter closes a connection silent
    /// for 30 s, and a call written to a closed one would end "outcome unknown".
    const MAX_IDLE_AGE: Duration = Duration::from_secs(10);

    fn take(&self, voter: u64) -> Option<crate::client::socket::Socket> {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        idle.retain(|(_, _, since)| since.elapsed() < Self::MAX_IDLE_AGE);
        let at = idle.iter().position(|(v, _, _)| *v == voter)?;
        Some(idle.swap_remove(at).1)
    }

    fn put(&self, voter: u64, s: crate::client::socket::Socket) {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        if idle.len() < Self::MAX_IDLE {
            idle.push((voter, s, Instant::now()));
        }
    }
}

impl Dispatcher {
    /// Each call on a thread of its own (a slow proposal must not hold up heartbeats), at
    /// most `max_in_flight` at once.
    fn run(mut self, rx: flume::Receiver<Request>) {
        while let Ok(req) = rx.recv() {
            let (call, reply) = match req {
                Request::Call { call, reply } => (call, reply),
                Request::Shutdown => break,
            };
            if self.in_flight.load(Ordering::SeqCst) >= self.max_in_flight {
                let _ = reply.send(Err(ControllerError::Overloaded(format!(
                    "{} calls to the controller in flight",
                    self.max_in_flight
                ))));
                continue;
            }
            self.in_flight.fetch_add(1, Ordering::SeqCst);
            let id = self.next_id;
            self.next_id += 1;
            let (link, pool, shared, timeout, in_flight) = (
                self.link.clone(),
                self.pool.clone(),
                self.shared.clone(),
                self.timeout,
                self.in_flight.clone(),
            );
            let spawned = std::thread::Builder::new()
                .name("rill-ctl-call".into())
                .spawn(move || {
                    let _ = reply.send(call_voters(&link, &pool, &shared, id, call, timeout));
                    in_flight.fetch_sub(1, Ordering::SeqCst);
                });
            if spawned.is_err() {
                self.in_flight.fetch_sub(1, Ordering::SeqCst);
            }
        }
        self.shared.mark_stopped(ControllerError::Stopped);
        for req in rx.drain() {
            if let Request::Call { reply, .. } = req {
                let _ = reply.send(Err(ControllerError::Stopped));
            }
        }
    }
}

/// Sends `call` to a voter (the leader first) and answers once this broker's metadata is as
/// far as the answering voter's was, so "answered" means "visible here" as on a voter.
fn call_voters(
    link: &ObserverLink,
    pool: &CallPool,
    shared: &Shared,
    id: u64,
    call: Call,
    timeout: Duration,
) -> Result<super::Applied, ControllerError> {
    let deadline = Instant::now() + timeout;
    let leader = shared.lock().metadata.controller_id;
    let mut last = ControllerError::Unreachable("no controller voter reachable".into());
    for (vid, addr) in voters_to_try(link, leader, id as usize) {
        if Instant::now() >= deadline {
            return Err(ControllerError::Timeout);
        }
        // Only heartbeats reuse connections: one lost on a connection the voter closed is
        // simply sent again, where another call's outcome would be unknown.
        let heartbeat = matches!(call, Call::Heartbeat(_));
        let pooled = if heartbeat { pool.take(vid) } else { None };
        let mut s = match pooled {
            Some(s) => s,
            None => match link.connect(&addr) {
                Ok(s) => s,
                Err(ObserverError::Failed(why)) | Err(ObserverError::Refused(why)) => {
                    last = ControllerError::Unreachable(format!("controller voter {vid}: {why}"));
                    continue;
                }
            },
        };
        match link.call(&mut s, id, call.clone()) {
            Ok((result, index)) => {
                if heartbeat {
                    pool.put(vid, s);
                }
                if result.is_ok() {
                    wait_applied(shared, index, deadline);
                }
                return result;
            }
            Err(why) if heartbeat => {
                last = ControllerError::Unreachable(format!("controller voter {vid}: {why}"));
            }
            // Sent, then the connection failed: the outcome is unknown.
            Err(why) => {
                return Err(ControllerError::Unreachable(format!(
                    "controller voter {vid} failed while answering: {why}; the outcome is unknown"
                )))
            }
        }
    }
    Err(last)
}

fn wait_applied(shared: &Shared, index: u64, deadline: Instant) {
    let mut state = shared.lock();
    while state.metadata.applied_index < index && state.stopped.is_none() {
        let now = Instant::now();
        if now >= deadline {
            return;
        }
        state = shared
            .changed
            .wait_timeout(state, deadline - now)
            .unwrap_or_else(|e| e.into_inner())
            .0;
    }
}
