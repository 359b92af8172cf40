//! A hierarchical timing wheel (as Kafka's purgatory and tokio's timer): six levels of 64
//! slots, level `l` slots `64^l` ms wide, so insert and expiry are O(1) per entry, and one
//! timer (the earliest non-empty slot) is all the shard needs to arm. Sans-IO: time is given
//! in, expired entries come out in due order (ties in insertion order), never before due.
//!
//! An entry is placed at the level of the highest 6-bit group in which its due time differs
//! from the wheel's time; when time reaches a slot of a higher level, its entries cascade
//! down. Entries beyond the top level's block (2^36 ms, over two years) wait in an ordered
//! overflow and enter the wheel when time reaches their block.

use std::collections::BTreeMap;

const SLOT_BITS: u32 = 6;
const SLOTS: usize = 1 << SLOT_BITS;
const LEVELS: usize = 6;
/// Times that share their bits above this are in the wheel's block.
const WHEEL_BITS: u32 = SLOT_BITS * LEVELS as u32;

struct Entry<T> {
    due: u64,
    seq: u64,
    item: T,
}

struct Level<T> {
    slots: Vec<Vec<Entry<T>>>,
    /// Bit `i`: slot `i` holds entries.
    occupied: u64,
}

/// See the module docs.
pub struct TimingWheel<T> {
    now: u64,
    levels: Vec<Level<T>>,
    overflow: BTreeMap<(u64, u64), T>,
    /// Entries due at or before `now` when inserted: expire at the next `advance`.
    ready: Vec<Entry<T>>,
    len: usize,
    seq: u64,
}

impl<T> TimingWheel<T> {
    /// An empty wheel whose time is `now_ms`.
    pub fn new(now_ms: u64) -> Self {
        TimingWheel {
            now: now_ms,
            levels: (0..LEVELS)
                .map(|_| Level {
                    slots: (0..SLOTS).map(|_| Vec::new()).collect(),
                    occupied: 0,
                })
                .collect(),
            overflow: BTreeMap::new(),
            ready: Vec::new(),
            len: 0,
            seq: 0,
        }
    }

    /// The wheel's time: the last `advance` (or creation).
    pub fn now(&self) -> u64 {
        self.now
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Adds `item`, due at `due_ms` (at or before the wheel's time: due at the next advance).
    pub fn insert(&mut self, due_ms: u64, item: T) {
        let seq = self.seq;
        self.seq += 1;
        self.len += 1;
        self.place(Entry {
            due: due_ms,
            seq,
            item,
        });
    }

    fn place(&mut self, e: Entry<T>) {
        if e.due <= self.now {
            self.ready.push(e);
            return;
        }
        let differ = e.due ^ self.now;
        if differ >> WHEEL_BITS != 0 {
            self.overflow.insert((e.due, e.seq), e.item);
            return;
        }
        let level = ((63 - differ.leading_zeros()) / SLOT_BITS) as usize;
        let slot = ((e.due >> (SLOT_BITS * level as u32)) as usize) & (SLOTS - 1);
        let l = &mut self.levels[level];
        l.slots[slot].push(e);
        l.occupied |= 1 << slot;
    }

    /// When the next entry may be due: the start of the earliest non-empty slot (an entry
    /// of a higher level is due at or after it), the wheel's time when some are ready. The
    /// caller arms its timer for it and calls [`TimingWheel::advance`] then.
    pub fn next_due(&self) -> Option<u64> {
        if !self.ready.is_empty() {
            return Some(self.now);
        }
        self.next_slot().map(|(_, _, at)| at)
    }

    /// The earliest non-empty slot (level, index, start time), or the overflow's block.
    fn next_slot(&self) -> Option<(usize, usize, u64)> {
        for (level, l) in self.levels.iter().enumerate() {
            if l.occupied == 0 {
                continue;
            }
            let shift = SLOT_BITS * level as u32;
            let here = ((self.now >> shift) as usize) & (SLOTS - 1);
            // Entries of a level lie at or after the wheel's slot in it (a lower level holds
            // those of the current slot), so the first occupied slot from `here` on is next.
            let ahead = l.occupied >> here;
            debug_assert!(ahead != 0, "an occupied slot behind the wheel's time");
            let slot = here + ahead.trailing_zeros() as usize;
            let block = self.now & !((1u64 << (shift + SLOT_BITS)) - 1);
            return Some((level, slot, block + ((slot as u64) << shift)));
        }
        let (&(due, _), _) = self.overflow.iter().next()?;
        Some((LEVELS, 0, due & !((1u64 << WHEEL_BITS) - 1)))
    }

    /// Takes every entry out, with its due time, in no particular order.
    pub fn drain(&mut self) -> Vec<(u64, T)> {
        let mut out: Vec<(u64, T)> = Vec::with_capacity(self.len);
        // The slots' buffers go too: a drain is how memory is given back (an unload).
        out.extend(
            std::mem::take(&mut self.ready)
                .into_iter()
                .map(|e| (e.due, e.item)),
        );
        for l in &mut self.levels {
            for slot in &mut l.slots {
                out.extend(std::mem::take(slot).into_iter().map(|e| (e.due, e.item)));
            }
            l.occupied = 0;
        }
        out.extend(
            std::mem::take(&mut self.overflow)
                .into_iter()
                .map(|((due, _), item)| (due, item)),
        );
        self.len = 0;
        out
    }

    /// Moves the wheel's time to `now_ms` (never back) and returns the entries due by then,
    /// in due order, ties in insertion order.
    pub fn advance(&mut self, now_ms: u64) -> Vec<(u64, T)> {
        let mut out: Vec<Entry<T>> = std::mem::take(&mut self.ready);
        out.sort_by_key(|e| (e.due, e.seq));
        while let Some((level, slot, at)) = self.next_slot() {
            if at > now_ms {
                break;
            }
            self.now = self.now.max(at);
            let mut entries: Vec<Entry<T>> = if level == LEVELS {
                let block = self.now >> WHEEL_BITS;
                let keys: Vec<(u64, u64)> = self
                    .overflow
                    .range(..((block + 1) << WHEEL_BITS, 0))
                    .map(|(k, _)| *k)
                    .collect();
                keys.into_iter()
                    .filter_map(|k| {
                        self.overflow.remove(&k).map(|item| Entry {
                            due: k.0,
                            seq: k.1,
                            item,
                        })
                    })
                    .collect()
            } else {
                let l = &mut self.levels[level];
                l.occupied &= !(1 << slot);
                std::mem::take(&mut l.slots[slot])
            };
            entries.sort_by_key(|e| (e.due, e.seq));
            for e in entries {
                if e.due <= self.now {
                    out.push(e);
                } else {
                    self.place(e);
                }
            }
        }
        self.now = self.now.max(now_ms);
        self.len -= out.len();
        out.into_iter().map(|e| (e.due, e.item)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::test_support::Rng;

    /// Random due times over every level's range, random advance steps: every entry comes
    /// out once, never before due, in due order (ties by insertion), and no later than the
    /// first advance past its due time.
    #[test]
    fn random_entries_expire_once_in_due_order_never_early() {
        for seed in 1..40u64 {
            let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15));
            let start = rng.next() % (1 << 40);
            let mut w = TimingWheel::new(start);
            let mut want: Vec<(u64, u64)> = Vec::new();
            let mut got: Vec<(u64, u64)> = Vec::new();
            let mut id = 0u64;
            let mut now = start;
            for _ in 0..200 {
                for _ in 0..rng.next() % 20 {
                    let span = 1u64 << (rng.next() % 40);
                    let due = (now + rng.next() % span).saturating_sub(rng.next() % 3);
                    w.insert(due, id);
                    want.push((due, id));
                    id += 1;
                }
                if let Some(next) = w.next_due() {
                    assert!(next >= w.now());
                }
                now += 1u64 << (rng.next() % 38);
                let fired = w.advance(now);
                let mut prev: Option<(u64, u64)> = None;
                for &(due, item) in &fired {
                    assert!(due <= now, "fired early: due {due} at {now}");
                    if let Some(p) = prev {
                        assert!(
                            p <= (due, item),
                            "out of order: {p:?} then {:?}",
                            (due, item)
                        );
                    }
                    prev = Some((due, item));
                }
                got.extend(fired);
                // Nothing left that was due.
                assert!(w.next_due().is_none_or(|n| n > now));
            }
            let fired = w.advance(u64::MAX >> 1);
            got.extend(fired);
            assert!(w.is_empty());
            got.sort();
            want.sort();
            assert_eq!(got, want, "seed {seed}");
        }
    }

    #[test]
    fn next_due_is_the_earliest_slot_and_advancing_to_it_fires_the_entry() {
        let mut w = TimingWheel::new(1_000);
        w.insert(1_000 + 5_000, "b");
        w.insert(1_000 + 70, "a");
        assert_eq!(w.len(), 2);
        let mut fired = Vec::new();
        while let Some(at) = w.next_due() {
            assert!(at > w.now() || !fired.is_empty());
            fired.extend(w.advance(at));
        }
        assert_eq!(fired, vec![(1_070, "a"), (6_000, "b")]);
        assert!(w.advance(10_000).is_empty());
    }

    #[test]
    fn entries_due_at_or_before_now_expire_at_the_next_advance() {
        let mut w = TimingWheel::new(500);
        w.insert(10, 1);
        w.insert(500, 2);
        assert_eq!(w.next_due(), Some(500));
        assert_eq!(w.advance(500), vec![(10, 1), (500, 2)]);
    }

    #[test]
    fn entries_past_the_top_level_wait_in_the_overflow() {
        let mut w = TimingWheel::new(0);
        let far = 3u64 << WHEEL_BITS;
        w.insert(far + 7, 'z');
        w.insert(5, 'a');
        assert_eq!(w.advance(far), vec![(5, 'a')]);
        assert_eq!(w.advance(far + 6), vec![]);
        assert_eq!(w.advance(far + 7), vec![(far + 7, 'z')]);
    }
}
