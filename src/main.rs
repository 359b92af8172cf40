/// Large allocations (DMA buffers, request frames) in huge pages: see `rill::memory`.
#[global_allocator]
static ALLOCATOR: rill::memory::HugePageAllocator = rill::memory::HugePageAllocator;

fn main() {
    // Its blocks are freed through ALLOCATOR.
    rill::memory::frame_arena::enable();
    std::process::exit(rill::cli::main());
}
