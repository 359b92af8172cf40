//! How the process gets its memory.

mod huge_page_allocator;

pub use huge_page_allocator::{HugePageAllocator, CACHED_BYTES, MIN_HUGE_ALLOCATION};
