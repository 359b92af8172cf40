//! What pending delayed messages cost: memory per message in the window (a shard's timing
//! wheel and the store's window map) and disk per pending message, and that memory stays
//! flat with a bounded window however many are pending.
//!
//! `cargo run --release --example delay_memory -- DIR N WINDOW` (DIR on tmpfs, say
//! /dev/shm, so that a million synced appends take seconds; WINDOW `all` keeps every
//! message in memory, `default` is what `--delay-memory-bytes` 64 MiB allows). One
//! configuration per process, so that the resident size is this run's alone.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use rill::delay::queue::max_loaded;
use rill::delay::store::DelayStore;
use rill::delay::wheel::TimingWheel;

/// The heap as the program sees it (bytes allocated and not freed, and the most ever),
/// which the resident size only approximates (the allocator keeps freed pages).
struct Counting;
static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is forwarded to the system allocator unchanged; the counters only
// observe sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        // SAFETY: forwarded to the system allocator with the caller's layout.
        let p = unsafe { System.alloc(l) };
        if !p.is_null() {
            let now = LIVE.fetch_add(l.size(), Ordering::Relaxed) + l.size();
            PEAK.fetch_max(now, Ordering::Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: `p` came from `alloc` with this layout.
        unsafe { System.dealloc(p, l) };
        LIVE.fetch_sub(l.size(), Ordering::Relaxed);
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("statm");
    let pages: u64 = statm.split(' ').nth(1).unwrap().parse().unwrap();
    pages * 4096
}

fn run(dir: &std::path::Path, n: usize, window: usize) {
    let _ = std::fs::remove_dir_all(dir);
    let before = rss_bytes();
    let heap_before = LIVE.load(Ordering::Relaxed);
    PEAK.store(heap_before, Ordering::Relaxed);
    let (mut store, _) =
        DelayStore::open_with(dir, rill::delay::store::COMPACT_MIN_DEAD_BYTES, window).unwrap();
    let mut wheel = TimingWheel::new(0);
    // A one-record batch of the usual small size, with a topic name of 12 bytes.
    let batch = vec![7u8; 150];
    let start = Instant::now();
    for i in 0..n {
        // Due times spread over a day, in shuffled order.
        let due = ((i as u64).wrapping_mul(2_654_435_761) % 86_400_000) as i64 + 1_000;
        let a = store
            .append(due, "orders-eu-01", 3, &batch, usize::MAX)
            .unwrap();
        if a.loaded {
            wheel.insert(due as u64, a.entry);
        }
        if store
            .counts()
            .loaded
            .load(std::sync::atomic::Ordering::Relaxed)
            > window
        {
            let mut all = wheel.drain();
            all.sort_by_key(|(_, e)| e.key());
            let upper = all.split_off(all.len() / 2);
            for (at, e) in all.into_iter().chain(store.unload(upper)) {
                wheel.insert(at, e);
            }
        }
    }
    let took = start.elapsed();
    let after = rss_bytes();
    let heap = LIVE.load(Ordering::Relaxed) - heap_before;
    let peak = PEAK.load(Ordering::Relaxed) - heap_before;
    let disk: u64 = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .sum();
    let mib = |b: f64| b / (1 << 20) as f64;
    println!(
        "{n} pending, window {window}: {} in memory, heap {:.1} MiB ({:.0} B per message in \
         memory), heap peak {:.1} MiB, RSS +{:.1} MiB, disk {:.1} MiB ({:.0} B per pending \
         message), {:.0} accepts/s",
        wheel.len(),
        mib(heap as f64),
        heap as f64 / wheel.len().max(1) as f64,
        mib(peak as f64),
        mib(after.saturating_sub(before) as f64),
        mib(disk as f64),
        disk as f64 / n as f64,
        n as f64 / took.as_secs_f64()
    );
    let start = Instant::now();
    drop(store);
    let (_, loaded) =
        DelayStore::open_with(dir, rill::delay::store::COMPACT_MIN_DEAD_BYTES, window).unwrap();
    println!(
        "  reopen: {} loaded in {:.2} s",
        loaded.len(),
        start.elapsed().as_secs_f64()
    );
    let _ = std::fs::remove_dir_all(dir);
}

fn main() {
    let mut args = std::env::args().skip(1);
    let base = std::path::PathBuf::from(args.next().unwrap_or_else(|| "/dev/shm".into()));
    let n: usize = args.next().map_or(1_000_000, |s| s.parse().expect("N"));
    let window = match args.next().as_deref() {
        Some("all") => n,
        None | Some("default") => max_loaded(64 << 20),
        Some(other) => other.parse().expect("WINDOW: all, default or a count"),
    };
    let dir = base.join(format!("rill-delay-memory-{}", std::process::id()));
    run(&dir, n, window);
}
