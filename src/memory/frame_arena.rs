//! Request frames of [`MIN_ARENA_BLOCK`] to [`MAX_ARENA_BLOCK`] bytes, carved in order from
//! 8 MiB chunks of transparent huge pages.
//!
//! Why: until the tail cache is full every large request frame is fresh memory, and on the
//! bench VM the kernel's work to back it (a fault, a zeroed page, a memory-cgroup charge and a
//! page-table lock per 4 KiB page, the two shards contending for the lock) was a third of a
//! producing broker's CPU (RESULTS.md, 2026-12-06). In huge pages that work is done once per
//! 2 MiB. A frame of about 1 MiB cannot have huge pages of its own without holding twice its
//! size in the tail cache ([`super::MIN_HUGE_ALLOCATION`]), so frames share chunks.
//!
//! Frames die in about the order they were made (the tail cache evicts its oldest first), so a
//! chunk is a bump allocator with a count of its live blocks: a thread fills its current chunk,
//! then takes another; a chunk whose blocks were all freed goes back to be reused (up to
//! [`KEPT_CHUNKS`] stay resident, the others give their memory back with `MADV_DONTNEED`).
//! Chunks lie in one range of address space reserved at the first use (no memory), so a
//! pointer tells the global allocator's `dealloc` whether it is an arena block. A block is
//! freed on any thread.
//!
//! Only the broker uses it, once [`enable`]d by `main` beside `#[global_allocator]`: the
//! blocks must be freed through [`super::HugePageAllocator`].

use std::cell::Cell;
use std::ptr::{self, NonNull};
use std::sync::atomic::{fence, AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::Mutex;

/// Bytes of a chunk: four huge pages.
pub const CHUNK: usize = 8 << 20;
/// Chunks the reserved range holds: 256 GiB of address space, not memory.
const CHUNKS: usize = 32 << 10;
/// Smaller frames are left to the system allocator (a 64 KiB first read, small requests).
pub const MIN_ARENA_BLOCK: usize = 256 << 10;
/// Larger frames are mapped on their own (in huge pages too, from 2 MiB).
pub const MAX_ARENA_BLOCK: usize = CHUNK / 2;
/// Freed chunks kept resident for reuse, at most (32 MiB); the others give their memory back.
pub const KEPT_CHUNKS: usize = 4;
const PAGE: usize = 4096;
const HUGE_PAGE: usize = 2 << 20;
const NO_CHUNK: u32 = u32::MAX;

/// The broker's arena (see [`enable`]).
pub static FRAMES: Arena = Arena::new();
static ENABLED: AtomicBool = AtomicBool::new(false);

/// Lets [`alloc_frame_zeroed`] use the arena. Only where [`super::HugePageAllocator`] is the
/// global allocator: it is what frees the blocks.
pub fn enable() {
    ENABLED.store(true, Ordering::Release);
}

/// A zeroed, page-aligned block of at least `len` bytes for a request frame, if the arena is
/// enabled, `len` is in its range and it has address space left.
pub fn alloc_frame_zeroed(len: usize) -> Option<NonNull<u8>> {
    if !ENABLED.load(Ordering::Acquire) {
        return None;
    }
    FRAMES.alloc_zeroed(len)
}

/// Backs `bytes` of the broker's arena now (see [`Arena::pre_touch`]); None when the arena is
/// not enabled (not the broker's allocator), so nothing was backed.
pub fn pre_touch(bytes: usize) -> Option<usize> {
    ENABLED
        .load(Ordering::Acquire)
        .then(|| FRAMES.pre_touch(bytes))
}

/// Freed chunks: those still resident (their bytes not zero below `dirty`) and those whose
/// memory went back to the kernel (zero again).
struct FreeChunks {
    kept: [u32; KEPT_CHUNKS],
    kept_count: usize,
    /// A stack, fixed: `release` runs inside the global allocator's `dealloc`.
    returned: [u32; CHUNKS],
    returned_count: usize,
}

pub struct Arena {
    /// 0: not reserved yet; 1: the reservation failed (the arena is off); else the range's
    /// start, aligned to a huge page.
    base: AtomicUsize,
    /// Chunks never used yet start here.
    fresh: AtomicUsize,
    /// Chunks below this were made accessible and backed before their first use
    /// ([`Arena::pre_touch`]).
    prepared: AtomicUsize,
    /// Per chunk: its live blocks, plus one while it is a thread's current chunk.
    live: [AtomicU32; CHUNKS],
    /// Per chunk: bytes from its start that may be non-zero.
    dirty: [AtomicU32; CHUNKS],
    free: Mutex<FreeChunks>,
}

/// A thread's current chunk in an arena, and where its next block starts.
struct Current {
    arena: Cell<*const Arena>,
    chunk: Cell<u32>,
    bump: Cell<usize>,
}

impl Drop for Current {
    fn drop(&mut self) {
        let (arena, chunk) = (self.arena.get(), self.chunk.get());
        if chunk != NO_CHUNK {
            // SAFETY: arenas are 'static (see `Arena::alloc_zeroed`).
            unsafe { (*arena).unref(chunk) };
        }
    }
}

thread_local! {
    static CURRENT: Current = const {
        Current { arena: Cell::new(ptr::null()), chunk: Cell::new(NO_CHUNK), bump: Cell::new(0) }
    };
}

impl Arena {
    #[allow(clippy::new_without_default)]
    pub const fn new() -> Arena {
        Arena {
            base: AtomicUsize::new(0),
            fresh: AtomicUsize::new(0),
            prepared: AtomicUsize::new(0),
            live: [const { AtomicU32::new(0) }; CHUNKS],
            dirty: [const { AtomicU32::new(0) }; CHUNKS],
            free: Mutex::new(FreeChunks {
                kept: [0; KEPT_CHUNKS],
                kept_count: 0,
                returned: [0; CHUNKS],
                returned_count: 0,
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, FreeChunks> {
        // It holds plain numbers, valid also after a panic.
        self.free.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The reserved range's start, reserving it at the first call; None when that failed.
    fn base(&self) -> Option<usize> {
        match self.base.load(Ordering::Acquire) {
            0 => {}
            1 => return None,
            b => return Some(b),
        }
        let _free = self.lock();
        if self.base.load(Ordering::Acquire) == 0 {
            let len = CHUNKS * CHUNK + HUGE_PAGE;
            // SAFETY: an anonymous, inaccessible reservation: no memory, no commit charge.
            let raw = unsafe {
                libc::mmap(
                    ptr::null_mut(),
                    len,
                    libc::PROT_NONE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                    -1,
                    0,
                )
            };
            let b = if raw == libc::MAP_FAILED {
                1
            } else {
                (raw as usize).next_multiple_of(HUGE_PAGE)
            };
            self.base.store(b, Ordering::Release);
        }
        self.base()
    }

    fn chunk_start(base: usize, chunk: u32) -> usize {
        base + chunk as usize * CHUNK
    }

    /// Whether `ptr` is a block of this arena.
    pub fn contains(&self, ptr: *const u8) -> bool {
        let base = self.base.load(Ordering::Acquire);
        base > 1 && (base..base + CHUNKS * CHUNK).contains(&(ptr as usize))
    }

    /// A zeroed block of `len` bytes (page-aligned, page-rounded) from this thread's chunk.
    /// The arena must be 'static: a thread's current chunk refers to it until the thread ends.
    pub fn alloc_zeroed(&'static self, len: usize) -> Option<NonNull<u8>> {
        if !(MIN_ARENA_BLOCK..=MAX_ARENA_BLOCK).contains(&len) {
            return None;
        }
        let base = self.base()?;
        let size = len.next_multiple_of(PAGE);
        CURRENT
            .try_with(|c| {
                let mut chunk = c.chunk.get();
                if chunk != NO_CHUNK && !ptr::eq(c.arena.get(), self) {
                    // SAFETY: arenas are 'static.
                    unsafe { (*c.arena.get()).unref(chunk) };
                    chunk = NO_CHUNK;
                }
                let mut bump = c.bump.get();
                if chunk != NO_CHUNK {
                    // Every block freed (only this thread adds blocks): start over.
                    if self.live[chunk as usize].load(Ordering::Acquire) == 1 {
                        bump = 0;
                    }
                    if bump + size > CHUNK {
                        self.unref(chunk);
                        chunk = NO_CHUNK;
                    }
                }
                if chunk == NO_CHUNK {
                    chunk = self.acquire(base)?;
                    bump = 0;
                }
                c.arena.set(self);
                c.chunk.set(chunk);
                c.bump.set(bump + size);
                let i = chunk as usize;
                self.live[i].fetch_add(1, Ordering::Relaxed);
                let start = Self::chunk_start(base, chunk) + bump;
                let dirty = self.dirty[i].load(Ordering::Relaxed) as usize;
                if dirty > bump {
                    // SAFETY: within the chunk (bump + size <= CHUNK), this block's alone.
                    unsafe { ptr::write_bytes(start as *mut u8, 0, (dirty - bump).min(size)) };
                }
                self.dirty[i].store(dirty.max(bump + size) as u32, Ordering::Relaxed);
                NonNull::new(start as *mut u8)
            })
            .ok()
            .flatten()
    }

    /// Frees a block of this arena, on any thread.
    ///
    /// # Safety
    /// `ptr` is a live block [`alloc_zeroed`](Self::alloc_zeroed) returned, freed once.
    pub unsafe fn free(&self, ptr: *mut u8) {
        let base = self.base.load(Ordering::Acquire);
        let chunk = ((ptr as usize - base) / CHUNK) as u32;
        self.unref(chunk);
    }

    /// Drops one reference to a chunk; the last one frees it.
    fn unref(&self, chunk: u32) {
        let was = self.live[chunk as usize].fetch_sub(1, Ordering::Release);
        debug_assert!(was > 0, "a chunk's references never go below zero");
        if was == 1 {
            fence(Ordering::Acquire);
            self.release(chunk);
        }
    }

    /// A chunk for a thread's blocks, holding the thread's reference: a freed one, else one
    /// never used (made accessible, in huge pages); None when the range is used up.
    fn acquire(&self, base: usize) -> Option<u32> {
        let mut free = self.lock();
        let chunk = if free.kept_count > 0 {
            free.kept_count -= 1;
            free.kept[free.kept_count]
        } else if free.returned_count > 0 {
            free.returned_count -= 1;
            free.returned[free.returned_count]
        } else {
            let c = self.fresh.fetch_add(1, Ordering::Relaxed);
            if c >= CHUNKS {
                self.fresh.store(CHUNKS, Ordering::Relaxed);
                return None;
            }
            if c >= self.prepared.load(Ordering::Relaxed) && !Self::open_chunks(base, c, 1) {
                return None;
            }
            c as u32
        };
        drop(free);
        self.live[chunk as usize].store(1, Ordering::Relaxed);
        Some(chunk)
    }

    /// Makes `count` chunks from `first` on accessible, in huge pages; false if they could
    /// not be.
    fn open_chunks(base: usize, first: usize, count: usize) -> bool {
        let start = Self::chunk_start(base, first as u32) as *mut libc::c_void;
        // SAFETY: chunks of the reservation (the callers keep first + count <= CHUNKS), used
        // by nothing yet.
        let ok = unsafe {
            libc::mprotect(start, count * CHUNK, libc::PROT_READ | libc::PROT_WRITE) == 0
        };
        if ok {
            // Advice only: without THP the chunks are of small pages, which is correct.
            // SAFETY: as above.
            unsafe { libc::madvise(start, count * CHUNK, libc::MADV_HUGEPAGE) };
        }
        ok
    }

    /// Backs the next chunks to be used, `bytes` of them, now (`--tail-cache-pre-touch`, as
    /// the JVM's AlwaysPreTouch): frames carved from them later find their memory faulted in
    /// and zeroed already. Returns the bytes backed. Their contents stay zero, as fresh chunks
    /// are, so nothing else changes: they are used in the order fresh chunks are.
    pub fn pre_touch(&self, bytes: usize) -> usize {
        let Some(base) = self.base() else {
            return 0;
        };
        let (first, count) = {
            let _free = self.lock();
            let first = self
                .fresh
                .load(Ordering::Relaxed)
                .max(self.prepared.load(Ordering::Relaxed))
                .min(CHUNKS);
            let count = bytes.div_ceil(CHUNK).min(CHUNKS - first);
            if count == 0 || !Self::open_chunks(base, first, count) {
                return 0;
            }
            self.prepared.store(first + count, Ordering::Relaxed);
            (first, count)
        };
        // Outside the lock: a thread may take one of these chunks meanwhile, and populating
        // changes no byte of it.
        // SAFETY: accessible chunks of the reservation, which is never unmapped.
        unsafe {
            super::populate_for_write(
                Self::chunk_start(base, first as u32) as *mut u8,
                count * CHUNK,
            )
        };
        count * CHUNK
    }

    /// Takes back a chunk none of whose blocks is live and no thread holds.
    fn release(&self, chunk: u32) {
        let mut free = self.lock();
        if free.kept_count < KEPT_CHUNKS {
            let n = free.kept_count;
            free.kept[n] = chunk;
            free.kept_count += 1;
            return;
        }
        let base = self.base.load(Ordering::Acquire);
        let start = Self::chunk_start(base, chunk) as *mut libc::c_void;
        // SAFETY: a chunk of the reservation that nothing uses; it reads as zeros afterwards.
        if unsafe { libc::madvise(start, CHUNK, libc::MADV_DONTNEED) } == 0 {
            self.dirty[chunk as usize].store(0, Ordering::Relaxed);
        }
        let n = free.returned_count;
        free.returned[n] = chunk;
        free.returned_count += 1;
    }

    /// Chunks in use or kept resident.
    pub fn resident_chunks(&self) -> usize {
        let free = self.lock();
        let used = self.fresh.load(Ordering::Relaxed);
        used.max(self.prepared.load(Ordering::Relaxed)).min(CHUNKS) - free.returned_count
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn arena() -> &'static Arena {
        Box::leak(Box::new(Arena::new()))
    }

    /// The bytes a test writes and checks: one in 64 and the last (blocks overlap, if ever,
    /// by whole pages; every byte would make a debug-build test slow).
    fn probes(len: usize) -> impl Iterator<Item = usize> {
        (0..len).step_by(64).chain(std::iter::once(len - 1))
    }

    fn pattern(i: usize, seed: u8) -> u8 {
        ((i / 64) as u8).wrapping_mul(31).wrapping_add(seed) | 1
    }

    /// Writes a block's pattern (never zero).
    fn fill(p: NonNull<u8>, len: usize, seed: u8) {
        for i in probes(len) {
            // SAFETY: `p` is a live block of at least `len` bytes, ours alone.
            unsafe { p.as_ptr().add(i).write(pattern(i, seed)) };
        }
    }

    fn holds(p: NonNull<u8>, len: usize, seed: u8) -> bool {
        // SAFETY: as in `fill`.
        probes(len).all(|i| unsafe { p.as_ptr().add(i).read() } == pattern(i, seed))
    }

    fn zeroed(p: NonNull<u8>, len: usize) -> bool {
        // SAFETY: as in `fill`.
        unsafe { std::slice::from_raw_parts(p.as_ptr(), len) }
            .iter()
            .all(|&b| b == 0)
    }

    #[test]
    fn sizes_outside_the_range_are_left_to_the_caller() {
        let a = arena();
        assert!(a.alloc_zeroed(MIN_ARENA_BLOCK - 1).is_none());
        assert!(a.alloc_zeroed(MAX_ARENA_BLOCK + 1).is_none());
        let p = a.alloc_zeroed(MIN_ARENA_BLOCK).expect("in range");
        assert!(a.contains(p.as_ptr()));
        assert!(!a.contains(&0u8));
        // SAFETY: a live block of this arena.
        unsafe { a.free(p.as_ptr()) };
    }

    /// Pages of `len` bytes from `p` that are backed (mincore).
    fn backed_pages(p: usize, len: usize) -> usize {
        let mut vec = vec![0u8; len / PAGE];
        // SAFETY: `p..p + len` is an accessible part of the arena's reservation; `vec` has a
        // byte per page.
        let r = unsafe { libc::mincore(p as *mut libc::c_void, len, vec.as_mut_ptr().cast()) };
        assert_eq!(r, 0, "mincore: {}", std::io::Error::last_os_error());
        vec.iter().filter(|&&b| b & 1 == 1).count()
    }

    /// Pre-touched chunks are backed before any block is made, counted resident, and the
    /// next blocks come from them, zeroed; a second pre-touch backs the chunks after them.
    #[test]
    fn pre_touched_chunks_are_backed_and_used_first() {
        let a = arena();
        assert_eq!(a.pre_touch(CHUNK + 1), 2 * CHUNK, "whole chunks");
        assert_eq!(a.resident_chunks(), 2);
        let base = a.base().unwrap();
        assert_eq!(backed_pages(base, 2 * CHUNK), 2 * CHUNK / PAGE);
        let len = MAX_ARENA_BLOCK;
        let blocks: Vec<_> = (0..3).map(|_| a.alloc_zeroed(len).unwrap()).collect();
        for (i, b) in blocks.iter().enumerate() {
            let at = b.as_ptr() as usize;
            assert!(
                (base..base + 2 * CHUNK).contains(&at),
                "block {i} is in a pre-touched chunk"
            );
            assert!(zeroed(*b, len));
            fill(*b, len, i as u8);
        }
        assert_eq!(a.resident_chunks(), 2, "no chunk beyond them was needed");
        assert_eq!(a.pre_touch(1), CHUNK);
        assert_eq!(a.resident_chunks(), 3);
        assert_eq!(backed_pages(base + 2 * CHUNK, CHUNK), CHUNK / PAGE);
        for (i, b) in blocks.into_iter().enumerate() {
            assert!(holds(b, len, i as u8), "a pre-touch changes no byte in use");
            // SAFETY: live blocks of this arena, each freed once.
            unsafe { a.free(b.as_ptr()) };
        }
    }

    /// A chunk whose blocks were all freed is written over from its start: what its old
    /// blocks held must not show through a block asked zeroed.
    #[test]
    fn a_reused_chunk_hands_out_zeroed_blocks() {
        let a = arena();
        let len = 3 * MIN_ARENA_BLOCK + 100;
        let first = a.alloc_zeroed(len).unwrap();
        fill(first, len, 7);
        // SAFETY: live blocks of this arena, each freed once.
        unsafe { a.free(first.as_ptr()) };
        let again = a.alloc_zeroed(len).unwrap();
        assert_eq!(again, first, "the emptied chunk starts over");
        assert!(zeroed(again, len));
        // SAFETY: a live block of this arena, freed once.
        unsafe { a.free(again.as_ptr()) };
    }

    /// Blocks of random sizes, allocated on several threads and freed in a shuffled order
    /// (half on other threads) while others are made: none overlaps another or loses a byte,
    /// each starts zeroed, and once all are freed and the threads ended the chunks went back
    /// (at most KEPT_CHUNKS stay resident).
    #[test]
    fn random_blocks_across_threads_keep_their_bytes_and_chunks_go_back() {
        let a = arena();
        let (tx, rx) = std::sync::mpsc::channel::<(usize, usize, u8)>();
        let makers: Vec<_> = (0..3u64)
            .map(|t| {
                let tx = tx.clone();
                std::thread::spawn(move || {
                    let mut rng = 0x9e37_79b9_7f4a_7c15u64 ^ (t + 1);
                    let mut next = || {
                        rng ^= rng << 13;
                        rng ^= rng >> 7;
                        rng ^= rng << 17;
                        rng
                    };
                    let mut mine: Vec<(NonNull<u8>, usize, u8)> = Vec::new();
                    for i in 0..400u32 {
                        let len = MIN_ARENA_BLOCK
                            + (next() as usize % (MAX_ARENA_BLOCK - MIN_ARENA_BLOCK + 1));
                        let p = a.alloc_zeroed(len).expect("address space left");
                        assert_eq!(p.as_ptr() as usize % PAGE, 0, "page-aligned");
                        assert!(zeroed(p, len), "block {i} of {len} bytes starts zeroed");
                        let seed = (next() % 251) as u8;
                        fill(p, len, seed);
                        mine.push((p, len, seed));
                        // Keep a window of live blocks; free a random one past it.
                        while mine.len() > 12 {
                            let (p, len, seed) = mine.swap_remove(next() as usize % mine.len());
                            assert!(holds(p, len, seed), "a live block kept its bytes");
                            if next() % 2 == 0 {
                                // SAFETY: a live block, freed once.
                                unsafe { a.free(p.as_ptr()) };
                            } else {
                                tx.send((p.as_ptr() as usize, len, seed)).unwrap();
                            }
                        }
                    }
                    for (p, len, seed) in mine {
                        assert!(holds(p, len, seed));
                        // SAFETY: a live block, freed once.
                        unsafe { a.free(p.as_ptr()) };
                    }
                })
            })
            .collect();
        drop(tx);
        let freer = std::thread::spawn(move || {
            for (p, len, seed) in rx {
                let p = NonNull::new(p as *mut u8).unwrap();
                assert!(
                    holds(p, len, seed),
                    "a block handed to another thread kept its bytes"
                );
                // SAFETY: a live block, freed once, here.
                unsafe { a.free(p.as_ptr()) };
            }
        });
        for m in makers {
            m.join().unwrap();
        }
        freer.join().unwrap();
        assert!(
            a.resident_chunks() <= KEPT_CHUNKS,
            "{} chunks resident after every block was freed",
            a.resident_chunks()
        );
        for c in 0..a.fresh.load(Ordering::Relaxed) {
            assert_eq!(
                a.live[c].load(Ordering::Relaxed),
                0,
                "chunk {c} unreferenced"
            );
        }
    }

    /// The global allocator frees and reallocates arena blocks by their address, whatever
    /// layout the caller states.
    #[test]
    fn the_global_allocator_frees_and_moves_arena_blocks() {
        use std::alloc::{GlobalAlloc, Layout};
        let h = super::super::HugePageAllocator;
        let len = MIN_ARENA_BLOCK * 2;
        let p = FRAMES.alloc_zeroed(len).unwrap();
        fill(p, len, 3);
        let layout = Layout::from_size_align(len, 16).unwrap();
        // SAFETY: a live arena block of `len` bytes; each pointer freed once.
        unsafe {
            let q = h.realloc(p.as_ptr(), layout, len * 3);
            assert!(!FRAMES.contains(q), "grown past the block: moved out");
            assert!(holds(NonNull::new(q).unwrap(), len, 3));
            h.dealloc(q, Layout::from_size_align(len * 3, 16).unwrap());
            let r = FRAMES.alloc_zeroed(len).unwrap();
            assert!(zeroed(r, len));
            h.dealloc(r.as_ptr(), layout);
        }
    }
}
