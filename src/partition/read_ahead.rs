//! Read-ahead for copy reads (`--file-reads copy`): a consumer catching up reads a partition's
//! file in order, one fetch at a time, so without it the device sits idle while each response
//! crosses the socket and the next fetch comes back. After a copy read that stopped short of
//! the data on disk, the partition starts reading the next range in the background; the next
//! fetch at exactly that offset takes it instead of reading again.
//!
//! One read-ahead per partition (a second reader elsewhere in the log replaces it), and the
//! bytes they hold on a shard are bounded by `--file-read-ahead-bytes` (split over the shards):
//! a read-ahead that would pass the bound drops the oldest ones (whose consumers may be gone),
//! and if that is not enough it does not start. A read-ahead is used only if it cannot be stale: the
//! same segment file object (a compaction swap or a reopen after truncation opens new ones),
//! the same read size, and a limit no higher than the new read's (a read_committed or
//! consumer fetch never gets bytes a replica fetch's higher limit let in).

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::rc::{Rc, Weak};

use rill_shards::file::DirectFile;
use rill_shards::rt::{spawn_local, Task};

use crate::log::segment::SegmentReader;
use crate::log::{CopiedBatches, LogError};

/// A partition's read-ahead, if it has one.
pub type ReadAheadSlot = Rc<RefCell<Option<ReadAhead>>>;

/// A read-ahead in the order of starts: its partition's slot and its id.
type Started = (Weak<RefCell<Option<ReadAhead>>>, u64);

/// A shard's bound on the bytes read ahead, and what became of the read-aheads (metrics).
pub struct ReadAheadBudget {
    limit: usize,
    used: Cell<usize>,
    /// Read-aheads in the order they started, oldest first, by slot and id; entries whose
    /// slot holds another (or none) by now are skipped and pruned.
    started_order: RefCell<VecDeque<Started>>,
    next_id: Cell<u64>,
    started: Cell<u64>,
    used_reads: Cell<u64>,
    evicted: Cell<u64>,
}

impl ReadAheadBudget {
    pub fn new(limit_bytes: usize) -> Rc<ReadAheadBudget> {
        Rc::new(ReadAheadBudget {
            limit: limit_bytes,
            used: Cell::new(0),
            started_order: RefCell::new(VecDeque::new()),
            next_id: Cell::new(0),
            started: Cell::new(0),
            used_reads: Cell::new(0),
            evicted: Cell::new(0),
        })
    }

    /// Bytes held by read-aheads now (in flight or waiting for their fetch).
    pub fn used_bytes(&self) -> usize {
        self.used.get()
    }

    /// (started, taken by a fetch, dropped for the bound) so far.
    pub fn counts(&self) -> (u64, u64, u64) {
        (
            self.started.get(),
            self.used_reads.get(),
            self.evicted.get(),
        )
    }

    /// Room for `bytes`, dropping the oldest read-aheads while it is short.
    fn reserve(self: &Rc<Self>, bytes: usize) -> Option<Reservation> {
        if bytes > self.limit {
            return None;
        }
        while self.used.get() + bytes > self.limit {
            let oldest = self.started_order.borrow_mut().pop_front();
            let (slot, id) = oldest?;
            let Some(slot) = slot.upgrade() else {
                continue;
            };
            let dropped = {
                let mut held = slot.borrow_mut();
                match held.as_ref() {
                    Some(a) if a.id == id => held.take(),
                    _ => None,
                }
            };
            if dropped.is_some() {
                self.evicted.set(self.evicted.get() + 1);
            }
            // Dropping it (outside the borrow) cancels its read and releases its bytes.
            drop(dropped);
        }
        self.used.set(self.used.get() + bytes);
        Some(Reservation {
            budget: self.clone(),
            bytes,
        })
    }
}

/// Bytes of the budget held until the read-ahead is taken or dropped.
struct Reservation {
    budget: Rc<ReadAheadBudget>,
    bytes: usize,
}

impl Drop for Reservation {
    fn drop(&mut self) {
        let used = self.budget.used.get();
        debug_assert!(used >= self.bytes, "read-ahead budget released twice");
        self.budget.used.set(used.saturating_sub(self.bytes));
    }
}

/// A copy read started before its fetch came.
pub struct ReadAhead {
    id: u64,
    offset: u64,
    max_bytes: usize,
    limit: u64,
    file: Rc<DirectFile>,
    task: Task<Result<Option<CopiedBatches>, LogError>>,
    _reservation: Reservation,
}

impl ReadAhead {
    /// Starts reading `max_bytes` from `offset` below `limit` with `reader` into `slot` (in
    /// place of what it held), if the budget has room for the read's window.
    pub fn start(
        budget: &Rc<ReadAheadBudget>,
        slot: &ReadAheadSlot,
        reader: SegmentReader,
        offset: u64,
        max_bytes: usize,
        limit: u64,
    ) {
        // The old one goes first: its bytes count against the new one's room.
        let old = slot.borrow_mut().take();
        drop(old);
        let Some(reservation) = budget.reserve(SegmentReader::copy_read_bytes(max_bytes)) else {
            return;
        };
        let id = budget.next_id.get();
        budget.next_id.set(id + 1);
        budget.started.set(budget.started.get() + 1);
        {
            let mut order = budget.started_order.borrow_mut();
            // Entries already taken or replaced are pruned from the front.
            while order.front().is_some_and(|(s, i)| {
                s.upgrade()
                    .is_none_or(|s| s.borrow().as_ref().is_none_or(|a| a.id != *i))
            }) {
                order.pop_front();
            }
            order.push_back((Rc::downgrade(slot), id));
        }
        let file = reader.file().clone();
        let task = spawn_local(reader.read(offset, max_bytes, limit));
        *slot.borrow_mut() = Some(ReadAhead {
            id,
            offset,
            max_bytes,
            limit,
            file,
            task,
            _reservation: reservation,
        });
    }

    /// Whether this read-ahead is exactly the read asked for: `reader` (the segment holding
    /// `offset` now), the same size, and a limit no higher than `limit`.
    pub fn answers(
        &self,
        reader: &SegmentReader,
        offset: u64,
        max_bytes: usize,
        limit: u64,
    ) -> bool {
        self.offset == offset
            && self.max_bytes == max_bytes
            && self.limit <= limit
            && Rc::ptr_eq(&self.file, reader.file())
    }

    /// Waits for the read (its budget is released once the bytes are handed over).
    pub async fn take(self, budget: &ReadAheadBudget) -> Result<Option<CopiedBatches>, LogError> {
        budget.used_reads.set(budget.used_reads.get() + 1);
        self.task.await
    }
}
