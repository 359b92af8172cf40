//! A member broker's side of membership: registration, heartbeats, its own fencing, and the
//! controlled shutdown. Runs on one `std::thread` beside the controller thread, talking to the
//! active controller through the local [`ControllerHandle`] (which forwards to the leader).
//!
//! A broker knows it is fenced ([`ControllerHandle::broker_fenced`]: it then refuses produces
//! with NOT_LEADER_OR_FOLLOWER) when a heartbeat answer says so, or when no heartbeat got an
//! answer for a whole session timeout: the controller fences it by then, and a broker cut off
//! from the quorum may never see that entry. An answer saying it is active again lifts it.

use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::cluster::{BrokerRegistration, Heartbeat, HeartbeatReply};
use super::{Applied, ControllerError, ControllerHandle};
use crate::protocol::error_code::ErrorCode;

/// During a controlled shutdown, heartbeats in a row that got no answer before the broker
/// stops waiting: no controller to move its leadership (the whole cluster stopping, say).
const SHUTDOWN_UNANSWERED: u32 = 3;

/// Settings of a member broker's session.
#[derive(Clone, Debug)]
pub struct SessionConfig {
    pub registration: BrokerRegistration,
    /// `--broker-heartbeat-interval-ms`.
    pub heartbeat_interval: Duration,
    /// `--broker-session-timeout-ms` (the controller's; the broker fences itself after it too).
    pub session_timeout: Duration,
    /// How long registration keeps being retried while no controller answers.
    pub register_wait: Duration,
}

/// Registers with the active controller, retrying what only means "not yet": no leader or a
/// lost answer (until [`SessionConfig::register_wait`]), and a live registration of this node
/// id with another incarnation for one session timeout and a margin (the process before a
/// restart: the controller fences it once its session runs out; a second broker with the
/// same id keeps its session alive, so the refusal stands). Returns the broker epoch.
pub fn register(handle: &ControllerHandle, cfg: &SessionConfig) -> Result<u64, ControllerError> {
    let deadline = Instant::now() + cfg.register_wait;
    let mut duplicate_until: Option<Instant> = None;
    let retry_every = cfg.heartbeat_interval.min(Duration::from_millis(500));
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let result = handle
            .register(cfg.registration.clone())
            .recv_timeout(left.max(Duration::from_millis(1)))
            .map_err(|_| ControllerError::Timeout)
            .and_then(|r| r);
        let retriable = match &result {
            Ok(_) => false,
            Err(ControllerError::Metadata(e))
                if e.code == ErrorCode::DuplicateBrokerRegistration =>
            {
                let until = *duplicate_until.get_or_insert_with(|| {
                    Instant::now()
                        + cfg.session_timeout
                        + cfg.heartbeat_interval * 2
                        + Duration::from_secs(1)
                });
                Instant::now() < until
            }
            Err(e) => retriable(e),
        };
        if !retriable || Instant::now() >= deadline {
            return match result? {
                Applied::MemberRegistered { broker_epoch, .. } => Ok(broker_epoch),
                other => Err(ControllerError::Unreachable(format!(
                    "unexpected answer to a registration: {other:?}"
                ))),
            };
        }
        if let Err(e) = &result {
            log::info!("registration: retrying: {e}");
        }
        std::thread::sleep(retry_every);
    }
}

/// Errors that only mean no controller answered this time.
fn retriable(e: &ControllerError) -> bool {
    matches!(
        e,
        ControllerError::NotController { .. }
            | ControllerError::NotLeader
            | ControllerError::Timeout
            | ControllerError::Unreachable(_)
            | ControllerError::Overloaded(_)
    )
}

enum Order {
    /// Ask for a controlled shutdown; answer on the channel once the broker leads nothing.
    Shutdown(flume::Sender<()>),
    Stop,
}

/// The heartbeat thread of a registered member broker.
pub struct BrokerSession {
    orders: flume::Sender<Order>,
    thread: Option<JoinHandle<()>>,
}

impl BrokerSession {
    /// Starts heartbeating for the registration that got `broker_epoch`.
    pub fn start(
        handle: ControllerHandle,
        cfg: SessionConfig,
        broker_epoch: u64,
    ) -> std::io::Result<BrokerSession> {
        let (orders, rx) = flume::bounded(4);
        let thread = std::thread::Builder::new()
            .name("rill-heartbeat".into())
            .spawn(move || {
                Heartbeats {
                    handle,
                    cfg,
                    broker_epoch,
                    last_answer: Instant::now(),
                    shutdown: None,
                    unanswered: 0,
                }
                .run(rx)
            })?;
        Ok(BrokerSession {
            orders,
            thread: Some(thread),
        })
    }

    /// Asks the controller to move this broker's leadership away and waits until it leads
    /// nothing, at most `timeout`. True when it does.
    pub fn controlled_shutdown(&self, timeout: Duration) -> bool {
        let (tx, rx) = flume::bounded(1);
        if self.orders.send(Order::Shutdown(tx)).is_err() {
            return false;
        }
        rx.recv_timeout(timeout).is_ok()
    }

    /// Stops heartbeating (the controller fences this broker once its session runs out).
    pub fn stop(mut self) {
        self.stop_thread();
    }

    fn stop_thread(&mut self) {
        if let Some(t) = self.thread.take() {
            let _ = self.orders.send(Order::Stop);
            let _ = t.join();
        }
    }
}

impl Drop for BrokerSession {
    fn drop(&mut self) {
        self.stop_thread();
    }
}

struct Heartbeats {
    handle: ControllerHandle,
    cfg: SessionConfig,
    broker_epoch: u64,
    /// When a heartbeat last got an answer from the active controller.
    last_answer: Instant,
    /// A controlled shutdown asked for: told when the broker leads nothing.
    shutdown: Option<flume::Sender<()>>,
    /// Heartbeats in a row without an answer.
    unanswered: u32,
}

impl Heartbeats {
    fn run(mut self, orders: flume::Receiver<Order>) {
        let mut next = Instant::now();
        loop {
            match orders.recv_deadline(next) {
                Ok(Order::Stop) | Err(flume::RecvTimeoutError::Disconnected) => return,
                Ok(Order::Shutdown(done)) => self.shutdown = Some(done),
                Err(flume::RecvTimeoutError::Timeout) => {}
            }
            let interval = self.cfg.heartbeat_interval;
            // During a controlled shutdown, ask often: the broker is waiting to stop.
            next = Instant::now()
                + if self.shutdown.is_some() {
                    interval.min(Duration::from_millis(100))
                } else {
                    interval
                };
            self.beat();
        }
    }

    fn beat(&mut self) {
        let hb = Heartbeat {
            node_id: self.cfg.registration.broker.node_id,
            broker_epoch: self.broker_epoch,
            want_shutdown: self.shutdown.is_some(),
        };
        let answer = self
            .handle
            .heartbeat(hb)
            .recv_timeout(self.cfg.heartbeat_interval)
            .map_err(|_| ControllerError::Timeout)
            .and_then(|r| r);
        if matches!(&answer, Err(e) if retriable(e)) {
            self.unanswered += 1;
            if self.unanswered >= SHUTDOWN_UNANSWERED {
                if let Some(done) = self.shutdown.take() {
                    log::warn!(
                        "controlled shutdown: {} heartbeats unanswered, no controller to move \
                         leadership; stopping",
                        self.unanswered
                    );
                    let _ = done.send(());
                }
            }
        }
        match answer {
            Ok(Applied::Heartbeat(reply)) => self.answered(reply),
            Ok(other) => log::warn!("heartbeat: unexpected answer {other:?}"),
            Err(ControllerError::Metadata(e)) if e.code == ErrorCode::StaleBrokerEpoch => {
                // The controller holds no session for this registration (a newer one replaced
                // it, or the metadata was rebuilt): register again.
                log::warn!("heartbeat refused ({e}); registering again");
                self.handle.set_broker_fenced(true);
                match register(&self.handle, &self.cfg) {
                    Ok(epoch) => {
                        self.broker_epoch = epoch;
                        self.last_answer = Instant::now();
                        self.handle.set_broker_fenced(false);
                    }
                    Err(e) => log::error!("registering again failed: {e}"),
                }
            }
            Err(e) => log::debug!("heartbeat: {e}"),
        }
        if self.last_answer.elapsed() >= self.cfg.session_timeout && !self.handle.broker_fenced() {
            log::warn!(
                "no heartbeat answered for {:?} (the session timeout): this broker fences \
                 itself (no produce is acknowledged) until the controller answers",
                self.cfg.session_timeout
            );
            self.handle.set_broker_fenced(true);
        }
    }

    fn answered(&mut self, reply: HeartbeatReply) {
        self.last_answer = Instant::now();
        self.unanswered = 0;
        if reply.fenced != self.handle.broker_fenced() {
            log::warn!(
                "broker {} is {} by the controller",
                self.cfg.registration.broker.node_id,
                if reply.fenced { "fenced" } else { "unfenced" }
            );
        }
        self.handle.set_broker_fenced(reply.fenced);
        if reply.shutdown_ready {
            if let Some(done) = self.shutdown.take() {
                let _ = done.send(());
            }
        }
    }
}
