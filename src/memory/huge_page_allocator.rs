//! The global allocator of the broker: allocations of [`MIN_HUGE_ALLOCATION`] or more are
//! mapped on their own, 2 MiB-aligned, and advised into transparent huge pages; smaller ones go
//! to the system allocator.
//!
//! Why: an O_DIRECT write goes to the device as the pages of its buffer. In 4 KiB pages a 2 MiB
//! write is 512 segments, and a virtio disk takes at most its `max_segments` per request (254
//! here: requests of 1016 KiB) and holds few such requests at once (each takes a descriptor per
//! segment). From one huge page the same write is one segment. fio's 2 MiB O_DIRECT writes on
//! the bench VM: 0.74-0.95 GB/s from 4 KiB pages, 2.6 GB/s from huge pages (RESULTS.md,
//! 2026-12-05 tenth). The DMA buffers (glommio's registered pool and its larger buffers) and
//! the request frames are such allocations. A huge page is also one page fault, not 512: fresh
//! memory costs about 1 s of CPU per GiB in 4 KiB faults on that VM.
//!
//! Freed mappings are kept for reuse, up to [`CACHED_BYTES`]: a fresh huge page is zeroed by
//! the kernel on its first touch (2 MiB at a time), and unmapping every DMA buffer after its
//! write made that zeroing 80% of a producing broker's CPU.
//!
//! With transparent huge pages `never` (or none free) the mapping is made of 4 KiB pages as
//! before; nothing else changes. `madvise` (what `rill tune` recommends) or `always` honour
//! the advice.

use std::alloc::{GlobalAlloc, Layout, System};
use std::ptr;
use std::sync::Mutex;

use super::frame_arena::FRAMES;

/// Allocations of this size or more are mapped in huge pages. A mapping is whole huge pages,
/// so just past a multiple of 2 MiB nearly 2 MiB of it is unused (4 MiB for 2 MiB and a byte);
/// below 2 MiB every block would waste that much (a 1 MiB request frame in the tail cache
/// would hold twice its size). DMA pieces are 2 MiB (`--file-write-bytes`): no waste.
pub const MIN_HUGE_ALLOCATION: usize = 2 << 20;
/// Huge page size and the alignment of the mappings.
const HUGE_PAGE: usize = 2 << 20;
/// Bytes of freed mappings kept for reuse, at most.
pub const CACHED_BYTES: usize = 64 << 20;
/// Freed mappings kept, at most.
const CACHED_MAPPINGS: usize = 32;

/// Freed mappings, (address, mapped length), for reuse by an allocation of the same length.
struct Cache {
    mappings: [(usize, usize); CACHED_MAPPINGS],
    count: usize,
    bytes: usize,
}

static CACHE: Mutex<Cache> = Mutex::new(Cache {
    mappings: [(0, 0); CACHED_MAPPINGS],
    count: 0,
    bytes: 0,
});

impl Cache {
    /// A kept mapping of exactly `len` bytes.
    fn take(&mut self, len: usize) -> Option<usize> {
        let i = self.mappings[..self.count]
            .iter()
            .position(|&(_, l)| l == len)?;
        let (addr, _) = self.mappings[i];
        self.count -= 1;
        self.mappings[i] = self.mappings[self.count];
        self.bytes -= len;
        Some(addr)
    }

    /// Keeps a mapping if there is room; false when the caller must unmap it.
    fn keep(&mut self, addr: usize, len: usize) -> bool {
        if self.count == CACHED_MAPPINGS || self.bytes + len > CACHED_BYTES {
            return false;
        }
        self.mappings[self.count] = (addr, len);
        self.count += 1;
        self.bytes += len;
        true
    }
}

/// The cache, also when a thread panicked holding it (it holds plain numbers, always valid).
fn cache() -> std::sync::MutexGuard<'static, Cache> {
    CACHE.lock().unwrap_or_else(|e| e.into_inner())
}

/// See the module documentation.
pub struct HugePageAllocator;

impl HugePageAllocator {
    fn is_huge(layout: &Layout) -> bool {
        layout.size() >= MIN_HUGE_ALLOCATION && layout.align() <= HUGE_PAGE
    }

    /// The length mapped for `size` bytes: whole huge pages.
    fn mapped_len(size: usize) -> usize {
        size.div_ceil(HUGE_PAGE) * HUGE_PAGE
    }

    /// Maps `len` bytes (a multiple of the huge page) at a huge-page boundary: one huge page
    /// more is mapped and the unaligned ends are unmapped again.
    unsafe fn map(len: usize) -> *mut u8 {
        let over = len + HUGE_PAGE;
        // SAFETY: an anonymous private mapping of a size that did not overflow (checked by
        // the caller's Layout: size <= isize::MAX, plus at most two huge pages).
        let raw = unsafe {
            libc::mmap(
                ptr::null_mut(),
                over,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if raw == libc::MAP_FAILED {
            return ptr::null_mut();
        }
        let start = raw as usize;
        let aligned = start.next_multiple_of(HUGE_PAGE);
        let head = aligned - start;
        let tail = over - head - len;
        // SAFETY: both ranges lie in the mapping just made and are page-aligned (mmap returns
        // page-aligned addresses; head and tail are differences of page multiples).
        unsafe {
            if head > 0 {
                libc::munmap(raw, head);
            }
            if tail > 0 {
                libc::munmap((aligned + len) as *mut libc::c_void, tail);
            }
            // Advice only: on failure (THP compiled out) the pages are small, which is correct.
            libc::madvise(aligned as *mut libc::c_void, len, libc::MADV_HUGEPAGE);
        }
        aligned as *mut u8
    }
}

// SAFETY: every block handed out is either the system allocator's (small layouts, returned to
// it by the same test on the same layout), a block of the frame arena (handed out by
// `frame_arena::alloc_frame_zeroed`, recognised by its address and freed to it), or a private
// mapping of at least the layout's size aligned to 2 MiB (>= every alignment it serves), kept
// for an allocation of the same mapped length or unmapped whole on dealloc; a kept mapping is
// handed out once.
unsafe impl GlobalAlloc for HugePageAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if Self::is_huge(&layout) {
            let len = Self::mapped_len(layout.size());
            match cache().take(len) {
                Some(addr) => addr as *mut u8,
                // SAFETY: see `map`.
                None => unsafe { Self::map(len) },
            }
        } else {
            // SAFETY: forwarded with the caller's layout.
            unsafe { System.alloc(layout) }
        }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if Self::is_huge(&layout) {
            let len = Self::mapped_len(layout.size());
            match cache().take(len) {
                Some(addr) => {
                    // SAFETY: a kept mapping of `len >= layout.size()` bytes, ours alone now.
                    unsafe { ptr::write_bytes(addr as *mut u8, 0, layout.size()) };
                    addr as *mut u8
                }
                // A fresh anonymous mapping reads as zeros.
                // SAFETY: see `map`.
                None => unsafe { Self::map(len) },
            }
        } else {
            // SAFETY: forwarded with the caller's layout.
            unsafe { System.alloc_zeroed(layout) }
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if FRAMES.contains(ptr) {
            // SAFETY: a live block of the frame arena, freed once (the caller's contract).
            unsafe { FRAMES.free(ptr) };
        } else if Self::is_huge(&layout) {
            let len = Self::mapped_len(layout.size());
            if !cache().keep(ptr as usize, len) {
                // SAFETY: `ptr` is a mapping of this length made by `alloc` for this layout.
                unsafe { libc::munmap(ptr.cast(), len) };
            }
        } else {
            // SAFETY: allocated by the system allocator with this layout.
            unsafe { System.dealloc(ptr, layout) }
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller's contract (new_size > 0, rounded size <= isize::MAX).
        let new = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        let in_arena = FRAMES.contains(ptr);
        match (Self::is_huge(&layout), Self::is_huge(&new)) {
            // SAFETY: forwarded: both small.
            (false, false) if !in_arena => unsafe { System.realloc(ptr, layout, new_size) },
            // Within the pages already mapped: nothing moves.
            (true, true)
                if !in_arena && Self::mapped_len(new_size) == Self::mapped_len(layout.size()) =>
            {
                ptr
            }
            _ => {
                // SAFETY: a new block for the new layout, the common bytes copied, the old
                // block freed by the rule that made it.
                unsafe {
                    let to = self.alloc(new);
                    if !to.is_null() {
                        ptr::copy_nonoverlapping(ptr, to, layout.size().min(new_size));
                        self.dealloc(ptr, layout);
                    }
                    to
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn large_blocks_are_huge_page_aligned_zeroed_and_keep_their_bytes_through_realloc() {
        let a = HugePageAllocator;
        let shapes = [
            (2 << 20, 4096),
            ((2 << 20) + 1, 4096),
            (5 << 20, 64),
            (3 << 20, 2 << 20),
        ];
        for (size, align) in shapes {
            let layout = Layout::from_size_align(size, align).unwrap();
            // SAFETY: non-zero layouts; every access is within the current block's size.
            unsafe {
                let mut p = a.alloc_zeroed(layout);
                assert!(!p.is_null());
                assert_eq!(p as usize % HUGE_PAGE, 0, "size {size}");
                let block = std::slice::from_raw_parts_mut(p, size);
                assert!(block.iter().all(|&b| b == 0), "size {size}: zeroed");
                for (i, b) in block.iter_mut().enumerate() {
                    *b = (i % 251) as u8;
                }
                // Grow within and past the mapped length, then shrink below the threshold.
                let mut cur = layout;
                for new_size in [size + 10, size + (3 << 20), 4096] {
                    p = a.realloc(p, cur, new_size);
                    assert!(!p.is_null());
                    let kept = std::slice::from_raw_parts(p, size.min(new_size));
                    let same = kept.iter().enumerate().all(|(i, &b)| b == (i % 251) as u8);
                    assert!(same, "size {size} -> {new_size}");
                    cur = Layout::from_size_align(new_size, align).unwrap();
                }
                a.dealloc(p, cur);
            }
        }
    }

    #[test]
    fn a_freed_mapping_is_reused_and_zeroed_again_when_asked() {
        let a = HugePageAllocator;
        // A length no other test maps, so the cache answers this test alone.
        let layout = Layout::from_size_align(12 << 20, 4096).unwrap();
        // SAFETY: a non-zero layout; accesses within its size; each block freed once.
        unsafe {
            let p = a.alloc(layout);
            assert!(!p.is_null());
            p.write_bytes(0xab, layout.size());
            a.dealloc(p, layout);
            let q = a.alloc_zeroed(layout);
            assert_eq!(q, p, "the kept mapping is handed out again");
            let block = std::slice::from_raw_parts(q, layout.size());
            assert!(
                block.iter().all(|&b| b == 0),
                "a reused block asked zeroed is zeroed"
            );
            a.dealloc(q, layout);
            // Past the cache's bound, freed mappings are unmapped, not kept.
            let many: Vec<*mut u8> = (0..CACHED_MAPPINGS + 2).map(|_| a.alloc(layout)).collect();
            for &m in &many {
                a.dealloc(m, layout);
            }
            let c = cache();
            assert!(c.count <= CACHED_MAPPINGS && c.bytes <= CACHED_BYTES);
        }
    }

    #[test]
    fn small_blocks_go_to_the_system_allocator() {
        let a = HugePageAllocator;
        let layout = Layout::from_size_align(4096, 8).unwrap();
        // SAFETY: a non-zero layout, written within its size, freed with it.
        unsafe {
            let p = a.alloc(layout);
            assert!(!p.is_null());
            p.write_bytes(7, 4096);
            a.dealloc(p, layout);
        }
    }
}
