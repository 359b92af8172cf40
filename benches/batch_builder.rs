//! Micro-benchmark of the producer's per-record work: `BatchBuilder` push + build, in
//! records/s and heap allocations per record (counted by a wrapping global allocator).
//!
//! `cargo bench --bench batch_builder` (release profile). Prints one line per shape; the
//! figures and the machine they came from are in bench-harness/RESULTS.md.

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use rill::batch::{body_checksum, BatchBuilder, Header, Record, RecordBody, HEADER_LEN};
use rkyv::util::AlignedVec;

/// Counts allocation calls (alloc and realloc) on top of the system allocator.
struct Counting;

static ALLOCS: AtomicU64 = AtomicU64::new(0);

// SAFETY: every call is forwarded unchanged to `System`, which upholds GlobalAlloc's contract.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

struct Shape {
    name: &'static str,
    value_len: usize,
    headers: usize,
    records_per_batch: usize,
}

/// How a batch is built: the builder fresh per batch with room for the whole batch (as the
/// producer does, from its batch-bytes dial), the builder
/// reused with `clear`, or the path before the one-buffer builder (each record copied into
/// owned `Vec`s/`String`s, `RecordBody` archived by its derive, then the body CRC).
#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Fresh,
    Reuse,
    Owned,
}

/// The pre-one-buffer builder's work for one batch, for the "before" figures.
fn owned_batch(
    shape: &Shape,
    batch: usize,
    key: &[u8],
    value: &[u8],
    headers: &[(&str, Option<&[u8]>)],
) {
    let mut records = Vec::new();
    let first = 1_700_000_000_000 + (batch * shape.records_per_batch) as i64;
    for i in 0..shape.records_per_batch {
        let ts = first + i as i64;
        records.push(Record {
            timestamp_delta: ts - first,
            key: Some(key.to_vec()),
            value: Some(value.to_vec()),
            headers: headers
                .iter()
                .map(|(k, v)| Header {
                    key: k.to_string(),
                    value: v.map(<[u8]>::to_vec),
                })
                .collect(),
            tags: Vec::new(),
        });
    }
    let body = RecordBody { records };
    let mut out = AlignedVec::<16>::with_capacity(
        HEADER_LEN + shape.records_per_batch * (value.len() + key.len() + 64),
    );
    out.resize(HEADER_LEN, 0);
    let mut out =
        rkyv::api::high::to_bytes_in::<_, rkyv::rancor::Error>(&body, out).expect("archive");
    out.resize(out.len().next_multiple_of(16), 0);
    black_box(body_checksum(&out));
    black_box(out);
}

fn run(shape: &Shape, mode: Mode) {
    let key = [7u8; 16];
    let value = vec![42u8; shape.value_len];
    let header_value = [1u8; 16];
    let headers: Vec<(&str, Option<&[u8]>)> = (0..shape.headers)
        .map(|_| ("trace-id", Some(&header_value[..])))
        .collect();
    // Enough batches for ~0.5 GB of values or 2 M records, whichever comes first.
    let batches = (500_000_000 / (shape.value_len.max(1) * shape.records_per_batch))
        .clamp(20, 2_000_000 / shape.records_per_batch);
    let mut builder = BatchBuilder::new();
    let one_batch = |builder: &mut BatchBuilder, batch: usize| {
        if mode == Mode::Owned {
            owned_batch(shape, batch, &key, &value, &headers);
            return;
        }
        if mode == Mode::Reuse {
            builder.clear();
        } else {
            // The producer's reservation: its dial (the size estimate of a full batch) + 1/8.
            let estimate = HEADER_LEN
                + shape.records_per_batch
                    * (key.len() + value.len() + shape.headers * ("trace-id".len() + 16) + 48);
            *builder = BatchBuilder::with_capacity(estimate + estimate / 8);
        }
        for i in 0..shape.records_per_batch {
            let ts = 1_700_000_000_000 + (batch * shape.records_per_batch + i) as i64;
            builder.push_record(ts, Some(&key), Some(&value), headers.iter().copied(), &[]);
        }
        black_box(builder.build().expect("non-empty batch"));
    };
    for batch in 0..5 {
        one_batch(&mut builder, batch);
    }
    let allocs_before = ALLOCS.load(Ordering::Relaxed);
    let started = Instant::now();
    for batch in 0..batches {
        one_batch(&mut builder, batch);
    }
    let secs = started.elapsed().as_secs_f64();
    let allocs = ALLOCS.load(Ordering::Relaxed) - allocs_before;
    let records = (batches * shape.records_per_batch) as f64;
    println!(
        "{:<34} {:<6} {:>12.0} records/s {:>8.1} MB/s {:>8.3} allocs/record",
        shape.name,
        match mode {
            Mode::Fresh => "fresh",
            Mode::Reuse => "reuse",
            Mode::Owned => "owned",
        },
        records / secs,
        records * shape.value_len as f64 / secs / 1e6,
        allocs as f64 / records,
    );
}

fn main() {
    let shapes = [
        Shape {
            name: "1 KiB value, 16 B key, 1 header, x1000",
            value_len: 1024,
            headers: 1,
            records_per_batch: 1000,
        },
        Shape {
            name: "100 B value, 16 B key, x1000",
            value_len: 100,
            headers: 0,
            records_per_batch: 1000,
        },
        Shape {
            name: "100 B value, 16 B key, 3 hdrs, x100",
            value_len: 100,
            headers: 3,
            records_per_batch: 100,
        },
    ];
    for shape in &shapes {
        for mode in [Mode::Owned, Mode::Fresh, Mode::Reuse] {
            run(shape, mode);
        }
    }
}
