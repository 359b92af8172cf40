/// Large allocations (DMA buffers, request frames) in huge pages: see `rill::memory`.
#[global_allocator]
static ALLOCATOR: rill::memory::HugePageAllocator = rill::memory::HugePageAllocator;

fn main() {
    std::process::exit(rill::cli::main());
}
