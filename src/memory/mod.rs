//! How the process gets its memory.

pub mod frame_arena;
mod huge_page_allocator;
mod populate;

pub use huge_page_allocator::{HugePageAllocator, CACHED_BYTES, MIN_HUGE_ALLOCATION};
pub use populate::populate_for_write;
