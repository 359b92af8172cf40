//! The per-shard deadline wheel: one glommio timer drives every deadline of a shard.
//!
//! Why not one glommio `Timer` per deadline: in glommio 0.9.0 a task's reference count is an
//! `i16`, and every registered timer holds a clone of its task's waker, so more than 32,767
//! sleeping futures in one task abort the process; each timer also costs a reactor entry.
//! Here the deadlines live in an ordered map, each distinct task waker is held once however many
//! deadlines it waits on, and a single driver task sleeps on one glommio timer until the
//! earliest deadline, then wakes everything that is due, in deadline order.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::future::Future;
use std::pin::Pin;
use std::rc::{Rc, Weak};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

/// Default bound of [`Deadlines::with_capacity`]: past it registrations still work, but a
/// warning is logged once per shard.
pub const DEFAULT_MAX_PENDING: usize = 1_000_000;

/// Identity of a waker: two wakers with the same data pointer and vtable wake the same task.
type WakerKey = (usize, usize);

fn waker_key(w: &Waker) -> WakerKey {
    (w.data() as usize, w.vtable() as *const _ as usize)
}

struct Inner {
    /// Registered deadlines; the id breaks ties and names the entry for removal.
    entries: BTreeMap<(Instant, u64), WakerKey>,
    /// One clone of each distinct waker, with the number of entries that use it.
    wakers: HashMap<WakerKey, (Waker, usize)>,
    next_id: u64,
    max_pending: usize,
    warned: bool,
    /// The driver task's waker, to wake it when an earlier deadline arrives.
    driver: Option<Waker>,
    /// The deadline the driver's timer is set for, if any.
    armed: Option<Instant>,
}

impl Inner {
    fn acquire(&mut self, key: WakerKey, waker: &Waker) {
        self.wakers
            .entry(key)
            .or_insert_with(|| (waker.clone(), 0))
            .1 += 1;
    }

    /// Drops one use of `key`; returns the waker if that was the last use.
    fn release(&mut self, key: WakerKey) -> Option<Waker> {
        let slot = self.wakers.get_mut(&key)?;
        slot.1 -= 1;
        if slot.1 == 0 {
            self.wakers.remove(&key).map(|(w, _)| w)
        } else {
            None
        }
    }

    fn remove(&mut self, at: Instant, id: u64) {
        if let Some(key) = self.entries.remove(&(at, id)) {
            self.release(key);
        }
    }
}

/// The per-shard timer wheel. Cheap to clone (an `Rc`); not `Send`: one per shard, created on
/// the executor thread ([`crate::ShardContext::deadlines`] is the shard's own).
///
/// Every [`DeadlineSleep`] from one `Deadlines` is driven by a single glommio timer.
#[derive(Clone)]
pub struct Deadlines {
    inner: Rc<RefCell<Inner>>,
}

impl Default for Deadlines {
    fn default() -> Self {
        Self::new()
    }
}

impl Deadlines {
    /// Creates the wheel with the [`DEFAULT_MAX_PENDING`] warning bound.
    ///
    /// Must be called on a glommio executor thread (it spawns the driver task there, in the
    /// current task queue); panics otherwise.
    pub fn new() -> Self {
        Self::with_capacity(DEFAULT_MAX_PENDING)
    }

    /// Creates the wheel; registering more than `max_pending` deadlines at once still works but
    /// logs one warning (a sign of a leak or of a load the shard cannot keep up with).
    ///
    /// Must be called on a glommio executor thread; panics otherwise.
    pub fn with_capacity(max_pending: usize) -> Self {
        let inner = Rc::new(RefCell::new(Inner {
            entries: BTreeMap::new(),
            wakers: HashMap::new(),
            next_id: 0,
            max_pending,
            warned: false,
            driver: None,
            armed: None,
        }));
        // The driver holds a weak reference so that the wheel is freed with its last handle;
        // the driver then ends at its next wake-up.
        glommio::spawn_local(Driver {
            inner: Rc::downgrade(&inner),
            timer: None,
        })
        .detach();
        Deadlines { inner }
    }

    /// A future that completes at or after `at`. Dropping it before then unregisters it.
    pub fn sleep_until(&self, at: Instant) -> DeadlineSleep {
        DeadlineSleep {
            inner: self.inner.clone(),
            at,
            id: None,
        }
    }

    /// A future that completes `d` from now (measured when this is called, not when first
    /// polled). Dropping it before then unregisters it.
    pub fn sleep(&self, d: Duration) -> DeadlineSleep {
        let now = Instant::now();
        self.sleep_until(
            now.checked_add(d)
                .unwrap_or(now + Duration::from_secs(86_400 * 365)),
        )
    }

    /// The number of deadlines registered and not yet fired or dropped.
    pub fn pending(&self) -> usize {
        self.inner.borrow().entries.len()
    }
}

/// The future returned by [`Deadlines::sleep_until`] and [`Deadlines::sleep`]; it registers
/// itself when first polled and unregisters itself when dropped.
#[must_use = "a DeadlineSleep does nothing unless awaited"]
pub struct DeadlineSleep {
    inner: Rc<RefCell<Inner>>,
    at: Instant,
    /// Set while registered.
    id: Option<u64>,
}

impl DeadlineSleep {
    /// When this sleep completes.
    pub fn deadline(&self) -> Instant {
        self.at
    }
}

impl Future for DeadlineSleep {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        let at = this.at;
        let mut inner = this.inner.borrow_mut();
        if Instant::now() >= at {
            if let Some(id) = this.id.take() {
                inner.remove(at, id);
            }
            return Poll::Ready(());
        }
        let key = waker_key(cx.waker());
        if let Some(id) = this.id {
            match inner.entries.get(&(at, id)).copied() {
                Some(old) if old == key => return Poll::Pending,
                Some(old) => {
                    // Polled from another task (or with another waker) since registering.
                    inner.release(old);
                    inner.acquire(key, cx.waker());
                    inner.entries.insert((at, id), key);
                    return Poll::Pending;
                }
                // Not reachable (the driver only removes due entries, and those are Ready
                // above), but registering again is the safe answer.
                None => {}
            }
        }
        let id = inner.next_id;
        inner.next_id += 1;
        inner.acquire(key, cx.waker());
        inner.entries.insert((at, id), key);
        this.id = Some(id);
        if inner.entries.len() > inner.max_pending && !inner.warned {
            inner.warned = true;
            log::warn!(
                "{} deadlines pending on this shard, over the bound of {}: a leak, or more load \
                 than the shard can handle",
                inner.entries.len(),
                inner.max_pending
            );
        }
        // An earlier deadline than the driver's timer: wake the driver so it re-arms.
        let wake_driver = match inner.armed {
            Some(armed) => at < armed,
            None => true,
        };
        let driver = if wake_driver {
            inner.driver.clone()
        } else {
            None
        };
        drop(inner);
        if let Some(d) = driver {
            d.wake();
        }
        Poll::Pending
    }
}

impl Drop for DeadlineSleep {
    fn drop(&mut self) {
        if let Some(id) = self.id.take() {
            // The driver's timer may stay armed for this deadline; it then wakes once for
            // nothing and re-arms for the next one, which is cheaper than re-arming now.
            if let Ok(mut inner) = self.inner.try_borrow_mut() {
                inner.remove(self.at, id);
            }
        }
    }
}

/// The one task per shard that sleeps until the earliest deadline and wakes what is due.
struct Driver {
    inner: Weak<RefCell<Inner>>,
    /// The glommio timer and the deadline it was set for.
    timer: Option<(Instant, glommio::timer::Timer)>,
}

impl Future for Driver {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        loop {
            let Some(inner) = this.inner.upgrade() else {
                // Every handle is gone: nothing left to drive.
                return Poll::Ready(());
            };
            let now = Instant::now();
            let mut due = Vec::new();
            let mut seen = HashSet::new();
            let next = {
                let mut inner = inner.borrow_mut();
                while let Some(entry) = inner.entries.first_entry() {
                    if entry.key().0 > now {
                        break;
                    }
                    let key = entry.remove();
                    // Wake each task once, in the order of its earliest due deadline; holding
                    // one clone per task is what keeps glommio's i16 refcount safe.
                    let last = inner.release(key);
                    if seen.insert(key) {
                        match last {
                            Some(w) => due.push(w),
                            None => due.extend(inner.wakers.get(&key).map(|(w, _)| w.clone())),
                        }
                    }
                }
                let next = inner.entries.first_key_value().map(|(k, _)| k.0);
                inner.armed = next;
                if !inner
                    .driver
                    .as_ref()
                    .is_some_and(|w| w.will_wake(cx.waker()))
                {
                    inner.driver = Some(cx.waker().clone());
                }
                next
            };
            drop(inner);
            for w in due {
                w.wake();
            }
            let Some(at) = next else {
                this.timer = None;
                return Poll::Pending;
            };
            if this.timer.as_ref().map(|(t, _)| *t) != Some(at) {
                let dur = at.saturating_duration_since(Instant::now());
                this.timer = Some((at, glommio::timer::Timer::new(dur)));
            }
            let Some((_, timer)) = this.timer.as_mut() else {
                return Poll::Pending;
            };
            match Pin::new(timer).poll(cx) {
                Poll::Ready(_) => this.timer = None,
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}
