//! Starting shards, the mesh between them, deadlines, and IOPOLL priming, on real executors.

use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use rill_shards::rt::{spawn_local, DmaFile};
use rill_shards::{
    start_shards, Deadlines, Mesh, MeshError, PerShard, ShardConfig, ShardContext, ShardError,
    EXTERNAL,
};

fn config(cpus: Vec<usize>, dir: &tempfile::TempDir) -> ShardConfig {
    ShardConfig {
        cpus,
        io_memory_bytes: 1 << 20,
        spin_before_park: None,
        prime_dir: dir.path().to_path_buf(),
        name: "rill-test".into(),
    }
}

fn tempdir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("rill-shards-test-")
        .tempdir_in(std::env::temp_dir())
        .unwrap()
}

/// The cpus to test on: [0, 1] when the machine has them, else whatever there is.
fn two_cpus() -> Vec<usize> {
    let all = ShardConfig::all_cores();
    all.into_iter().take(2).collect()
}

/// Runs `f` on one shard and returns its result.
fn on_one_shard<F, Fut, T>(f: F) -> T
where
    F: Fn(ShardContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = T> + 'static,
    T: Send + 'static,
{
    let dir = tempdir();
    let set = start_shards(config(vec![two_cpus()[0]], &dir), f).unwrap();
    set.join().pop().unwrap().unwrap()
}

#[test]
fn shards_run_pinned_and_results_come_back_in_order() {
    let dir = tempdir();
    let cpus = two_cpus();
    let set = start_shards(config(cpus.clone(), &dir), |ctx| async move {
        // SAFETY: no preconditions.
        let on = unsafe { libc::sched_getcpu() } as usize;
        (
            ctx.id,
            ctx.count,
            ctx.cpu,
            on,
            std::thread::current().name().map(String::from),
        )
    })
    .unwrap();
    assert_eq!(set.len(), cpus.len());
    let results: Vec<_> = set.join().into_iter().map(Result::unwrap).collect();
    for (i, (id, count, cpu, on, name)) in results.into_iter().enumerate() {
        assert_eq!(id, i);
        assert_eq!(count, cpus.len());
        assert_eq!(cpu, cpus[i]);
        assert_eq!(on, cpus[i], "shard {i} runs on the cpu it is pinned to");
        assert_eq!(name.as_deref(), Some(format!("rill-test-{i}").as_str()));
    }
    assert_eq!(
        std::fs::metadata(dir.path().join(".rill-iopoll-probe"))
            .unwrap()
            .len(),
        4096
    );
}

#[test]
fn bad_cpu_lists_are_rejected() {
    let dir = tempdir();
    let run = |cpus: Vec<usize>| start_shards(config(cpus, &dir), |ctx| async move { ctx.id });
    match run(vec![0, 0]) {
        Err(ShardError::BadCore(m)) => assert!(m.contains("cpu 0"), "{m}"),
        Err(e) => panic!("wrong error {e}"),
        Ok(_) => panic!("same cpu twice accepted"),
    }
    match run(vec![100_000]) {
        Err(ShardError::BadCore(m)) => assert!(m.contains("cpu 100000"), "{m}"),
        Err(e) => panic!("wrong error {e}"),
        Ok(_) => panic!("missing cpu accepted"),
    }
    assert!(matches!(run(vec![]), Err(ShardError::BadCore(_))));
}

#[test]
fn a_panicking_shard_is_reported_as_such() {
    let dir = tempdir();
    let set = start_shards(config(two_cpus(), &dir), |ctx| async move {
        if ctx.id == 0 {
            panic!("boom");
        }
        ctx.id
    })
    .unwrap();
    let results = set.join();
    match &results[0] {
        Err(ShardError::Panicked { shard: 0, message }) => assert!(message.contains("boom")),
        other => panic!("unexpected {other:?}"),
    }
    if results.len() > 1 {
        assert_eq!(results[1], Ok(1));
    }
}

#[test]
fn mesh_delivers_every_message_in_order_from_the_right_shard() {
    const N: u64 = 20_000;
    let dir = tempdir();
    let cpus = two_cpus();
    assert_eq!(cpus.len(), 2, "this test needs two cpus");
    let mesh = Mesh::<(usize, u64)>::new(2, 16);
    let endpoints = PerShard::new(mesh.take_endpoints());
    let set = start_shards(config(cpus, &dir), move |ctx| {
        let ep = Rc::new(endpoints.take(ctx.id).unwrap());
        async move {
            let me = ep.id();
            let peer = 1 - me;
            // Send from a separate task so that both directions make progress while the
            // small channels push back.
            let sender = spawn_local({
                let ep = ep.clone();
                async move {
                    for seq in 0..N {
                        ep.send_to(peer, (me, seq)).await.unwrap();
                    }
                }
            });
            let mut got = Vec::with_capacity(N as usize);
            while (got.len() as u64) < N {
                let (from, (claimed, seq)) = ep.recv().await.unwrap();
                got.push((from, claimed, seq));
            }
            sender.await;
            got
        }
    })
    .unwrap();
    for (shard, got) in set.join().into_iter().enumerate() {
        let got = got.unwrap();
        let peer = 1 - shard;
        assert_eq!(got.len() as u64, N);
        for (i, &(from, claimed, seq)) in got.iter().enumerate() {
            assert_eq!((from, claimed, seq), (peer, peer, i as u64));
        }
    }
}

#[test]
fn mesh_capacity_is_a_bound_and_external_senders_reach_every_shard() {
    let mesh = Mesh::<u32>::new(2, 4);
    let outside = mesh.external_sender();
    let mut eps = mesh.take_endpoints();
    let ep1 = eps.pop().unwrap();
    let ep0 = eps.pop().unwrap();
    for i in 0..4 {
        ep0.try_send_to(1, i).unwrap();
    }
    assert_eq!(ep0.try_send_to(1, 99), Err(MeshError::Full(1)));
    // Other lanes into shard 1 are independent of the full one.
    ep1.try_send_to(1, 1000).unwrap();
    assert!(matches!(
        ep0.try_send_to(2, 0),
        Err(MeshError::NoSuchShard {
            shard: 2,
            shards: 2
        })
    ));
    outside.broadcast(7).unwrap();

    let mut got = Vec::new();
    while let Some(m) = ep1.try_recv().unwrap() {
        got.push(m);
    }
    got.sort_by_key(|&(from, m)| (from, m));
    assert_eq!(
        got,
        vec![(0, 0), (0, 1), (0, 2), (0, 3), (1, 1000), (EXTERNAL, 7)]
    );
    // Drained: room again.
    ep0.try_send_to(1, 4).unwrap();
    assert_eq!(futures_lite::future::block_on(ep1.recv()), Ok((0, 4)));
    assert_eq!(
        futures_lite::future::block_on(ep0.recv()),
        Ok((EXTERNAL, 7))
    );

    // The end: once every other sender is gone, recv reports it instead of waiting forever.
    drop(outside);
    drop(ep0);
    assert_eq!(
        futures_lite::future::block_on(ep1.recv()),
        Err(MeshError::Disconnected)
    );
}

#[test]
fn mesh_recv_wakes_on_a_send_from_another_thread() {
    let mesh = Mesh::<u32>::new(2, 1);
    let outside = mesh.external_sender();
    let mut eps = mesh.take_endpoints();
    let ep1 = eps.pop().unwrap();
    let ep0 = eps.pop().unwrap();
    let t = std::thread::spawn(move || {
        for i in 0..1000 {
            outside.send_to(1, i).unwrap();
            ep0.sender_to(1).send((0, i)).unwrap();
        }
    });
    let (mut ext, mut lane) = (0, 0);
    futures_lite::future::block_on(async {
        while ext + lane < 2000 {
            match ep1.recv().await.unwrap() {
                (EXTERNAL, m) => {
                    assert_eq!(m, ext);
                    ext += 1;
                }
                (0, m) => {
                    assert_eq!(m, lane);
                    lane += 1;
                }
                other => panic!("unexpected {other:?}"),
            }
        }
    });
    t.join().unwrap();
    assert_eq!((ext, lane), (1000, 1000));
}

/// A tiny deterministic generator, so failures can be replayed.
fn xorshift(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

#[test]
fn ten_thousand_deadlines_fire_in_order_and_never_early() {
    const N: usize = 10_000;
    let (pending_after, records) = on_one_shard(|ctx| async move {
        let deadlines = ctx.deadlines.clone();
        let done = Rc::new(RefCell::new(Vec::with_capacity(N)));
        // Start the deadlines in the future so that registering 10,000 tasks (slow on a
        // loaded machine) does not itself reorder completions.
        let base = Instant::now() + Duration::from_millis(1_000);
        let mut rng = 0x9E37_79B9_7F4A_7C15u64;
        let mut tasks = Vec::with_capacity(N);
        for _ in 0..N {
            let at = base + Duration::from_micros(xorshift(&mut rng) % 200_000);
            let sleep = deadlines.sleep_until(at);
            let done = done.clone();
            tasks.push(spawn_local(async move {
                let registered = Instant::now();
                sleep.await;
                done.borrow_mut().push((at, registered, Instant::now()));
            }));
        }
        for t in tasks {
            t.await;
        }
        let records = done.borrow().clone();
        (deadlines.pending(), records)
    });
    assert_eq!(pending_after, 0);
    assert_eq!(records.len(), N);
    let tick = Duration::from_millis(1);
    // A sleep first polled after its deadline completes at once, wherever it is in the queue:
    // such sleeps are exempt from the order check (there must be few of them).
    let in_time: Vec<_> = records
        .iter()
        .filter(|&&(at, registered, _)| registered < at)
        .collect();
    // Most must have been registered in time, or the order check below tests nothing; the
    // margin is wide because a loaded CI machine may take long to register 10,000 tasks.
    assert!(
        in_time.len() >= N / 2,
        "only {} of {N} sleeps registered before their deadline",
        in_time.len()
    );
    for (i, &(at, _, fired)) in records.iter().enumerate() {
        assert!(fired >= at, "sleep {i} completed before its deadline");
    }
    let mut latest_deadline_so_far = in_time[0].0;
    for (i, &&(at, _, _)) in in_time.iter().enumerate() {
        assert!(
            at + tick >= latest_deadline_so_far,
            "completion {i} is out of deadline order by {:?}",
            latest_deadline_so_far - at
        );
        latest_deadline_so_far = latest_deadline_so_far.max(at);
    }
}

/// Awaits every future of a vector from one task: every sleep holds the same task waker.
struct JoinAll<F>(Vec<Option<F>>);

impl<F: Future<Output = ()> + Unpin> Future for JoinAll<F> {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let mut all = true;
        for slot in self.0.iter_mut() {
            if let Some(f) = slot {
                if Pin::new(f).poll(cx).is_ready() {
                    *slot = None;
                } else {
                    all = false;
                }
            }
        }
        if all {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }
}

#[test]
fn forty_thousand_deadlines_in_one_task_do_not_overflow_glommio_wakers() {
    // glommio 0.9.0 aborts when one task holds more than 32,767 clones of its waker.
    const N: u64 = 40_000;
    let (peak, after) = on_one_shard(|ctx| async move {
        let d = ctx.deadlines;
        // Far enough ahead that all 40,000 are registered at once even on a slow machine.
        let base = Instant::now() + Duration::from_secs(2);
        let sleeps: Vec<_> = (0..N)
            .map(|i| Some(d.sleep_until(base + Duration::from_micros(i % 100_000))))
            .collect();
        let mut all = JoinAll(sleeps);
        let _ = futures_lite::future::poll_once(&mut all).await;
        let peak = d.pending();
        all.await;
        (peak, d.pending())
    });
    assert_eq!(peak, N as usize);
    assert_eq!(after, 0);
}

#[test]
fn dropping_a_sleep_unregisters_it() {
    let (registered, after_drop, fired) = on_one_shard(|ctx| async move {
        let d = ctx.deadlines;
        let mut sleeps: Vec<_> = (0..100)
            .map(|i| d.sleep(Duration::from_secs(60 + i)))
            .collect();
        for s in sleeps.iter_mut() {
            assert!(futures_lite::future::poll_once(s).await.is_none());
        }
        let registered = d.pending();
        drop(sleeps);
        let after_drop = d.pending();
        // The wheel still works after the driver's timer lost its deadline.
        d.sleep(Duration::from_millis(5)).await;
        (registered, after_drop, d.pending())
    });
    assert_eq!((registered, after_drop, fired), (100, 0, 0));
}

#[test]
fn an_earlier_deadline_registered_later_fires_first() {
    let (order, early_done, late_at) = on_one_shard(|ctx| async move {
        let d = ctx.deadlines;
        let order = Rc::new(RefCell::new(Vec::new()));
        let late_at = Instant::now() + Duration::from_secs(3);
        let late = spawn_local({
            let (d, order) = (d.clone(), order.clone());
            async move {
                d.sleep_until(late_at).await;
                order.borrow_mut().push("late");
            }
        });
        // Let the late sleep register and the driver arm its timer for it.
        while d.pending() == 0 {
            rill_shards::rt::yield_if_needed().await;
            futures_lite::future::yield_now().await;
        }
        d.sleep(Duration::from_millis(20)).await;
        let early_done = Instant::now();
        order.borrow_mut().push("early");
        late.await;
        let order = order.borrow().clone();
        (order, early_done, late_at)
    });
    assert_eq!(order, vec!["early", "late"]);
    assert!(
        early_done < late_at,
        "the early sleep waited for the late one's timer"
    );
}

#[test]
fn dma_io_works_after_priming() {
    let dir = tempdir();
    let path = dir.path().join("data.bin");
    let set = start_shards(config(two_cpus(), &dir), move |ctx| {
        let path = path.with_extension(format!("{}", ctx.id));
        async move {
            // An existing empty file opened first: without priming this fools glommio's IOPOLL
            // probe and every later DMA read on the device fails with EOPNOTSUPP (seen here).
            let empty = path.with_extension(format!("empty{}", ctx.id));
            std::fs::write(&empty, b"").unwrap();
            DmaFile::open(&empty).await.unwrap().close().await.unwrap();

            let file = DmaFile::create(&path).await.unwrap();
            let mut buf = file.alloc_dma_buffer(4096);
            for (i, b) in buf.as_bytes_mut().iter_mut().enumerate() {
                *b = (i % 251) as u8 ^ ctx.id as u8;
            }
            let expected = buf.as_bytes().to_vec();
            assert_eq!(file.write_at(buf, 0).await.unwrap(), 4096);
            file.fdatasync().await.unwrap();
            file.close().await.unwrap();

            let file = DmaFile::open(&path).await.unwrap();
            let read = file.read_at_aligned(0, 4096).await.unwrap();
            let same = read.to_vec() == expected;
            file.close().await.unwrap();
            same
        }
    })
    .unwrap();
    for r in set.join() {
        assert_eq!(r, Ok(true));
    }
}

#[test]
fn registering_past_the_capacity_bound_still_works() {
    let (peak, after) = on_one_shard(|_ctx| async move {
        let d = Deadlines::with_capacity(10);
        let base = Instant::now() + Duration::from_millis(50);
        let sleeps: Vec<_> = (0..20)
            .map(|i| Some(d.sleep_until(base + Duration::from_millis(i))))
            .collect();
        let mut all = JoinAll(sleeps);
        let _ = futures_lite::future::poll_once(&mut all).await;
        let peak = d.pending();
        all.await;
        (peak, d.pending())
    });
    assert_eq!((peak, after), (20, 0));
}

#[test]
fn an_unusable_prime_dir_is_reported_before_any_shard_runs() {
    let dir = tempdir();
    let not_a_dir = dir.path().join("file");
    std::fs::write(&not_a_dir, b"x").unwrap();
    let mut cfg = config(two_cpus(), &dir);
    cfg.prime_dir = not_a_dir.join("sub");
    let ran = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let r = start_shards(cfg, {
        let ran = ran.clone();
        move |_ctx| {
            ran.store(true, std::sync::atomic::Ordering::SeqCst);
            async {}
        }
    });
    assert!(matches!(r, Err(ShardError::Prime(_))));
    assert!(!ran.load(std::sync::atomic::Ordering::SeqCst));
}

#[test]
fn mesh_handles_can_move_between_threads() {
    fn is_send<T: Send>() {}
    fn is_send_sync<T: Send + Sync>() {}
    is_send::<rill_shards::MeshEndpoint<Vec<u8>>>();
    is_send_sync::<rill_shards::MeshSender<Vec<u8>>>();
    is_send_sync::<PerShard<rill_shards::MeshEndpoint<Vec<u8>>>>();
}

#[test]
fn an_idle_shard_is_nudged_awake_every_max_park() {
    use rill_shards::nudge::{seen, MAX_PARK};
    // glommio can sleep through its timers and cross-thread wake-ups (nudge.rs): an idle
    // shard must still wake on its main ring, from the nudges, again and again.
    let (before, after) = on_one_shard(|ctx| async move {
        let before = seen();
        let give_up = Instant::now() + Duration::from_secs(60);
        while seen() < before + 3 && Instant::now() < give_up {
            ctx.deadlines.sleep(MAX_PARK).await;
        }
        (before, seen())
    });
    assert!(after >= before + 3, "nudges read: {before} then {after}");
}
