//! The patched glommio reactor (`vendor/glommio`, every change marked `rill patch`): it keeps an
//! armed preemption timer across loops instead of re-arming it on every one, and pairs SeqCst
//! fences between a sleeping executor and its wakers instead of a `membarrier` system call.
//! These tests run raw executors, without the shard set's nudger, so a lost wake-up or a timer
//! that never fires shows as a test that does not finish within its (generous) deadline.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use glommio::{LocalExecutorBuilder, Placement};

/// How long any of these tests may take before it counts as hung: far beyond what each needs.
const HUNG: Duration = Duration::from_secs(120);

/// Runs `f` on a fresh executor thread and returns its result, failing if it takes past [`HUNG`].
fn on_executor<G, F, T>(preempt: Duration, f: G) -> T
where
    G: FnOnce() -> F + Send + 'static,
    F: Future<Output = T> + 'static,
    T: Send + 'static,
{
    let (tx, rx) = mpsc::channel();
    let handle = LocalExecutorBuilder::new(Placement::Unbound)
        .name("rill-reactor-test")
        .io_memory(1 << 20)
        .preempt_timer(preempt)
        .spawn(move || async move {
            let out = f().await;
            let _ = tx.send(());
            out
        })
        .unwrap();
    rx.recv_timeout(HUNG)
        .expect("the executor did not finish: a lost wake-up or a timer that never fired");
    handle.join().unwrap()
}

fn xorshift(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

/// What the executor waits on: a count another thread raises, and the waker to call then.
#[derive(Default)]
struct Signal {
    sent: AtomicU64,
    waker: Mutex<Option<Waker>>,
}

struct WaitFor<'a> {
    signal: &'a Signal,
    at_least: u64,
}

impl Future for WaitFor<'_> {
    type Output = ();
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        // The waker is stored before the count is read, so a raise between the two still wakes.
        *self.signal.waker.lock().unwrap() = Some(cx.waker().clone());
        if self.signal.sent.load(Ordering::SeqCst) >= self.at_least {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }
}

#[test]
fn an_executor_sleeping_between_wakes_from_another_thread_misses_none() {
    wakes_from_another_thread(false);
}

#[test]
fn an_executor_sleeping_on_a_timer_between_wakes_from_another_thread_misses_none() {
    wakes_from_another_thread(true);
}

/// 20,000 wakes from another thread, each awaited before the next; with `timer_armed`, a far
/// timer is pending all along, so each sleep arms it.
fn wakes_from_another_thread(timer_armed: bool) {
    const WAKES: u64 = 20_000;
    let signal = Arc::new(Signal::default());
    let done = Arc::new(AtomicU64::new(0));
    let waker_thread = {
        let (signal, done) = (signal.clone(), done.clone());
        std::thread::spawn(move || {
            let mut seed = 0x9e37_79b9_7f4a_7c15u64;
            for i in 1..=WAKES {
                signal.sent.store(i, Ordering::SeqCst);
                if let Some(w) = signal.waker.lock().unwrap().take() {
                    w.wake();
                }
                // Wait for the executor to take it, then pause a random while so that it goes
                // to sleep before some wakes and is still awake for others.
                let deadline = Instant::now() + HUNG;
                while done.load(Ordering::SeqCst) < i {
                    assert!(Instant::now() < deadline, "wake {i} was lost");
                    std::thread::yield_now();
                }
                let pause = xorshift(&mut seed) % 64;
                if pause > 16 {
                    std::thread::sleep(Duration::from_micros(pause));
                }
            }
        })
    };
    let taken = on_executor(Duration::from_millis(100), move || async move {
        let far = timer_armed.then(|| {
            glommio::spawn_local(glommio::timer::sleep(Duration::from_secs(300))).detach()
        });
        for i in 1..=WAKES {
            WaitFor {
                signal: &signal,
                at_least: i,
            }
            .await;
            done.store(i, Ordering::SeqCst);
        }
        if let Some(far) = far {
            far.cancel();
        }
        WAKES
    });
    waker_thread.join().unwrap();
    assert_eq!(taken, WAKES);
}

#[test]
fn a_timer_set_while_a_later_one_is_armed_fires_on_time() {
    // With a 30 s preemption slice, the timer armed when the executor goes to sleep is one that
    // fires up to 30 s (or, for the 300 s timer, minutes) later. Each time it is woken from
    // outside, the executor sets a timer of a few milliseconds and sleeps again: the later
    // armed timer must not be kept for it.
    let signal = Arc::new(Signal::default());
    let outside = {
        let signal = signal.clone();
        std::thread::spawn(move || {
            for i in 1..=20u64 {
                std::thread::sleep(Duration::from_millis(5));
                signal.sent.store(i, Ordering::SeqCst);
                if let Some(w) = signal.waker.lock().unwrap().take() {
                    w.wake();
                }
            }
        })
    };
    let waits = on_executor(Duration::from_secs(30), move || async move {
        let far = glommio::spawn_local(glommio::timer::sleep(Duration::from_secs(300))).detach();
        let mut waits = Vec::new();
        for i in 1..=20u64 {
            WaitFor {
                signal: &signal,
                at_least: i,
            }
            .await;
            let near = Duration::from_millis(1 + i % 4 * 5);
            let start = Instant::now();
            glommio::timer::sleep(near).await;
            waits.push((near, start.elapsed()));
        }
        far.cancel();
        waits
    });
    outside.join().unwrap();
    for (near, took) in waits {
        assert!(took >= near, "a {near:?} timer fired early, after {took:?}");
        assert!(
            took < Duration::from_secs(10),
            "a {near:?} timer waited {took:?}: for a later armed timer"
        );
    }
}

#[test]
fn a_busy_task_queue_is_preempted_again_after_every_preemption() {
    // One queue spins, yielding only when the reactor asks it to; the other needs the reactor
    // 50 times (each a 1 ms timer). Every one of them needs a preemption, so each fired
    // preemption timer must be followed by a fresh one.
    let (rounds, spun) = on_executor(Duration::from_millis(2), || async {
        let ex = glommio::executor();
        let busy_q = ex.create_task_queue(
            glommio::Shares::default(),
            glommio::Latency::NotImportant,
            "busy",
        );
        let timer_q = ex.create_task_queue(
            glommio::Shares::default(),
            glommio::Latency::NotImportant,
            "timers",
        );
        let stop = std::rc::Rc::new(AtomicBool::new(false));
        let spinner = {
            let stop = stop.clone();
            glommio::spawn_local_into(
                async move {
                    let give_up = Instant::now() + HUNG / 2;
                    let mut yields = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        if Instant::now() > give_up {
                            return None;
                        }
                        let until = Instant::now() + Duration::from_micros(200);
                        while Instant::now() < until {
                            std::hint::spin_loop();
                        }
                        glommio::yield_if_needed().await;
                        yields += 1;
                    }
                    Some(yields)
                },
                busy_q,
            )
            .unwrap()
        };
        let timers = glommio::spawn_local_into(
            async move {
                let mut rounds = 0u32;
                for _ in 0..50 {
                    glommio::timer::sleep(Duration::from_millis(1)).await;
                    rounds += 1;
                }
                stop.store(true, Ordering::Relaxed);
                rounds
            },
            timer_q,
        )
        .unwrap();
        let rounds = timers.await;
        (rounds, spinner.await)
    });
    assert_eq!(rounds, 50);
    let spun = spun.expect("the busy queue spun for a minute: the timer queue was starved");
    assert!(spun > 0);
}
