//! One shard's delayed messages at run time: accepting one (durable in the [`DelayStore`]
//! before the producer is answered, then armed in the [`TimingWheel`]), and the task that
//! appends each to its partition when due, in due order, exactly once across crashes:
//!
//! 1. *firing* mark (the partition's log end), synced;
//! 2. the batch appended, marked (flags bit [`FLAG_DELAYED`], producer id = the message's
//!    id, body CRC recomputed), and waited on until durable;
//! 3. *fired* mark, synced.
//!
//! After a crash between 1 and 3, recovery looks for the marked batch in the partition from
//! the logged offset: found, the message is done; not found, it fires again.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::store::{
    DelayStore, DelayStoreError, PendingEntry, WindowCounts, COMPACT_MIN_DEAD_BYTES,
};
use super::wheel::TimingWheel;
use crate::batch::{add_flags, stamp_batch, BatchIter, BatchView, FLAG_DELAYED};
use crate::broker::produce::Appended;
use crate::broker::{locate, OpError, Shard};
use crate::clock::now_ms;
use crate::log::FileReads;
use crate::partition::ReadLimits;
use crate::protocol::error_code::ErrorCode;

/// A message whose append failed (a full or failing disk) is tried again this much later.
const RETRY_AFTER_MS: u64 = 1_000;
/// What one pending message in memory costs, counted against `--delay-memory-bytes`: its
/// entry in the timing wheel (with its topic name) and in the store's window map, with
/// their containers' slack (measured: `examples/delay_memory.rs`, ARCHITECTURE.md).
pub const ENTRY_MEMORY_BYTES: usize = 384;
/// Due messages fired together (their marks under one sync each, their appends sharing
/// group commits).
const FIRE_ROUND: usize = 1024;

/// See the module docs. Empty until [`start`] opened the store.
#[derive(Default)]
pub struct DelayQueue {
    inner: RefCell<Option<Inner>>,
    /// Fired when a message is accepted: the firing task re-arms its timer.
    accepted: event_listener::Event,
}

struct Inner {
    store: Arc<Mutex<DelayStore>>,
    wheel: TimingWheel<PendingEntry>,
    counts: Arc<WindowCounts>,
    /// Messages in memory at most (`--delay-memory-bytes` / [`ENTRY_MEMORY_BYTES`]).
    max_loaded: usize,
    /// An unload or refill is under way (one at a time).
    paging: bool,
    /// Accepted messages waiting for the next group commit, and each one's answer.
    appends: Vec<(Append, flume::Sender<Result<(), OpError>>)>,
    /// A group commit is under way (the next takes what came meanwhile).
    committing: bool,
}

/// A message to append: due ms, topic, partition, batch.
type Append = (i64, String, u32, Vec<u8>);

fn store_error(e: DelayStoreError) -> OpError {
    let code = match e {
        DelayStoreError::Full(_) => ErrorCode::PolicyViolation,
        _ => ErrorCode::KafkaStorageError,
    };
    OpError::new(code, e.to_string())
}

/// Runs `f` on the store on the blocking pool (file writes and syncs).
async fn on_store<R: Send + 'static>(
    store: &Arc<Mutex<DelayStore>>,
    f: impl FnOnce(&mut DelayStore) -> Result<R, DelayStoreError> + Send + 'static,
) -> Result<R, OpError> {
    let store = store.clone();
    rill_shards::rt::spawn_blocking(move || {
        let mut s = store.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut s)
    })
    .await
    .map_err(store_error)
}

/// Opens the shard's store under `<data>/delay/<shard>/`, arms every message not fired yet
/// and starts the firing task. Run once at shard start, before serving.
pub async fn start(shard: &Rc<Shard>) -> Result<(), OpError> {
    let dir = shard.cfg.data_dir.join("delay").join(shard.id.to_string());
    let max_loaded = max_loaded(shard.cfg.delay_memory_bytes);
    let (store, pending) = rill_shards::rt::spawn_blocking(move || {
        DelayStore::open_with(&dir, COMPACT_MIN_DEAD_BYTES, max_loaded)
    })
    .await
    .map_err(|e| OpError::new(ErrorCode::KafkaStorageError, e.to_string()))?;
    let mut wheel = TimingWheel::new(now_ms().max(0) as u64);
    for e in pending {
        wheel.insert(e.due_ms.max(0) as u64, e);
    }
    if store.live() > 0 {
        log::info!(
            "shard {}: {} delayed messages pending, {} of them in memory",
            shard.id,
            store.live(),
            wheel.len()
        );
    }
    let counts = store.counts();
    *shard.delays.inner.borrow_mut() = Some(Inner {
        store: Arc::new(Mutex::new(store)),
        wheel,
        counts,
        max_loaded,
        paging: false,
        appends: Vec::new(),
        committing: false,
    });
    rill_shards::rt::spawn_local(fire_loop(shard.clone())).detach();
    Ok(())
}

/// Accepts one delayed message for `topic`/`partition` (led by this shard): `batch` is
/// validated, `deliver_at_ms` checked against `--max-delay-ms`; returns once it is durable.
pub async fn accept(
    shard: &Rc<Shard>,
    topic: &str,
    partition: u32,
    deliver_at_ms: i64,
    batch: &[u8],
) -> Result<(), OpError> {
    let now = now_ms();
    let max = shard.cfg.max_delay.as_millis() as i64;
    if deliver_at_ms > now.saturating_add(max) {
        return Err(OpError::new(
            ErrorCode::InvalidRequest,
            format!(
                "delivery {} ms from now is past --max-delay-ms {max}",
                deliver_at_ms - now
            ),
        ));
    }
    let view = BatchView::validate(batch)
        .map_err(|e| OpError::new(ErrorCode::CorruptMessage, e.to_string()))?;
    if view.len() != batch.len() {
        return Err(OpError::new(
            ErrorCode::InvalidRequest,
            "a delayed produce carries exactly one batch",
        ));
    }
    let p = locate(shard, topic, partition)?;
    p.check_produce(batch.len())?;
    // Group commit: the messages accepted while a sync runs share the next one.
    let (reply, answer) = flume::bounded(1);
    let start = {
        let mut guard = shard.delays.inner.borrow_mut();
        let Some(i) = guard.as_mut() else {
            return Err(OpError::new(
                ErrorCode::KafkaStorageError,
                "the delay store is not open",
            ));
        };
        let item = (deliver_at_ms, topic.to_string(), partition, batch.to_vec());
        i.appends.push((item, reply));
        !std::mem::replace(&mut i.committing, true)
    };
    if start {
        rill_shards::rt::spawn_local(commit_appends(shard.clone())).detach();
    }
    answer
        .recv_async()
        .await
        .map_err(|_| OpError::new(ErrorCode::KafkaStorageError, "the delay store stopped"))??;
    unload_if_over(shard).await;
    Ok(())
}

/// Appends what accepts queued, under one sync per round, until none is left; arms the
/// messages in the window and answers each producer.
async fn commit_appends(shard: Rc<Shard>) {
    let max = shard.cfg.max_delayed_per_shard;
    loop {
        let (store, appends) = {
            let mut guard = shard.delays.inner.borrow_mut();
            let Some(i) = guard.as_mut() else { return };
            if i.appends.is_empty() {
                i.committing = false;
                return;
            }
            (i.store.clone(), std::mem::take(&mut i.appends))
        };
        let (items, replies): (Vec<Append>, Vec<_>) = appends.into_iter().unzip();
        let answers = on_store(&store, move |s| s.append_all(&items, max)).await;
        let mut guard = shard.delays.inner.borrow_mut();
        match answers {
            Ok(answers) => {
                for (answer, reply) in answers.into_iter().zip(replies) {
                    let answer = answer.map_err(store_error).map(|a| {
                        if let (true, Some(i)) = (a.loaded, guard.as_mut()) {
                            i.wheel.insert(a.entry.due_ms.max(0) as u64, a.entry);
                        }
                    });
                    let _ = reply.send(answer);
                }
            }
            Err(e) => {
                for reply in replies {
                    let _ = reply.send(Err(e.clone()));
                }
            }
        }
        drop(guard);
        shard.delays.accepted.notify(usize::MAX);
    }
}

/// `--delay-memory-bytes` as a number of messages.
pub fn max_loaded(memory_bytes: usize) -> usize {
    (memory_bytes / ENTRY_MEMORY_BYTES).max(2)
}

/// Over the memory bound: the latest half of the messages in memory go back to disk only
/// (as far as the store allows: see [`DelayStore::unload`]).
async fn unload_if_over(shard: &Rc<Shard>) {
    let (store, candidates) = {
        let mut guard = shard.delays.inner.borrow_mut();
        let Some(i) = guard.as_mut() else { return };
        if i.paging || i.counts.loaded.load(Ordering::Relaxed) <= i.max_loaded {
            return;
        }
        i.paging = true;
        let mut all = i.wheel.drain();
        all.sort_by_key(|(_, e)| e.key());
        let candidates = all.split_off(all.len() / 2);
        for (at, e) in all {
            i.wheel.insert(at, e);
        }
        (i.store.clone(), candidates)
    };
    let n = candidates.len();
    let kept = rill_shards::rt::spawn_blocking(move || {
        let mut s = store.lock().unwrap_or_else(|p| p.into_inner());
        s.unload(candidates)
    })
    .await;
    if let Some(i) = shard.delays.inner.borrow_mut().as_mut() {
        log::debug!(
            "shard {}: {} delayed messages back on disk only",
            shard.id,
            n - kept.len()
        );
        for (at, e) in kept {
            i.wheel.insert(at, e);
        }
        i.paging = false;
    }
    shard.delays.accepted.notify(usize::MAX);
}

/// Brings the next messages into memory when the window is at most a quarter full and some
/// wait on disk only.
async fn refill_if_low(shard: &Rc<Shard>) {
    let store = {
        let mut guard = shard.delays.inner.borrow_mut();
        let Some(i) = guard.as_mut() else { return };
        if i.paging
            || i.counts.paged_out.load(Ordering::Relaxed) == 0
            || i.counts.loaded.load(Ordering::Relaxed) > i.max_loaded / 4
        {
            return;
        }
        i.paging = true;
        i.store.clone()
    };
    let loaded = on_store(&store, |s| s.refill()).await;
    if let Some(i) = shard.delays.inner.borrow_mut().as_mut() {
        i.paging = false;
        match loaded {
            Ok(entries) => {
                for e in entries {
                    let at = e.due_ms.max(0) as u64;
                    i.wheel.insert(at, e);
                }
            }
            Err(e) => log::warn!("shard {}: delayed messages not paged in: {e}", shard.id),
        }
    }
}

/// Fires due messages in due order, sleeping on the shard's deadline wheel until the next.
async fn fire_loop(shard: Rc<Shard>) {
    loop {
        let accepted = shard.delays.accepted.listen();
        refill_if_low(&shard).await;
        let now = now_ms().max(0) as u64;
        let due = match shard.delays.inner.borrow_mut().as_mut() {
            Some(i) => i.wheel.advance(now),
            None => return,
        };
        let mut due: Vec<PendingEntry> = due.into_iter().map(|(_, e)| e).collect();
        while !due.is_empty() {
            let rest = due.split_off(due.len().min(FIRE_ROUND));
            fire_round(&shard, std::mem::replace(&mut due, rest)).await;
        }
        // After firing the window may be low: the next ones come in before the timer is set
        // (what waits on disk is due after everything in memory).
        refill_if_low(&shard).await;
        // Retries were armed meanwhile.
        let (next, paged_out) = match shard.delays.inner.borrow().as_ref() {
            Some(i) => (
                i.wheel.next_due(),
                i.counts.paged_out.load(Ordering::Relaxed),
            ),
            None => return,
        };
        // Nothing in memory but some on disk: the refill failed; try again later.
        let next = match (next, paged_out) {
            (None, 1..) => Some(now_ms().max(0) as u64 + RETRY_AFTER_MS),
            (next, _) => next,
        };
        let wait = async {
            match next {
                Some(at) => {
                    let ms = at.saturating_sub(now_ms().max(0) as u64);
                    shard
                        .deadlines
                        .sleep_until(Instant::now() + Duration::from_millis(ms))
                        .await
                }
                None => std::future::pending().await,
            }
        };
        futures_lite::future::or(wait, accepted).await;
    }
}

/// Fires a round of due messages (each once: see the module docs), in due order: their
/// *firing* marks under one sync, their appends sharing the partitions' group commits,
/// their *fired* marks under one sync. A message that fails is armed again
/// [`RETRY_AFTER_MS`] later, the others go on.
async fn fire_round(shard: &Rc<Shard>, due: Vec<PendingEntry>) {
    let Some(store) = shard
        .delays
        .inner
        .borrow()
        .as_ref()
        .map(|i| i.store.clone())
    else {
        return;
    };
    let retry = |e: &PendingEntry, why: &dyn std::fmt::Display, from: Option<u64>| {
        log::warn!(
            "delayed message {} for {}-{}: {why}; retrying in {RETRY_AFTER_MS} ms",
            e.id,
            e.topic,
            e.partition
        );
        retry_later(shard, e, from);
    };
    // Done without an append: its topic is gone, or a crash came after its append.
    let mut settled: Vec<(PendingEntry, Option<u64>)> = Vec::new();
    let mut ready = Vec::new();
    for e in due {
        let p = match locate(shard, &e.topic, e.partition) {
            Ok(p) => p,
            Err(err) if err.code == ErrorCode::UnknownTopicOrPartition => {
                log::warn!("delayed message {}: {err}; dropped", e.id);
                settled.push((e, None));
                continue;
            }
            Err(err) => {
                retry(&e, &err, None);
                continue;
            }
        };
        if let Some(from) = e.firing_from {
            match appended_before(shard, &p, from, e.id).await {
                Ok(true) => {
                    settled.push((e, None));
                    continue;
                }
                Ok(false) => {}
                Err(err) => {
                    retry(&e, &err, None);
                    continue;
                }
            }
        }
        ready.push((e, p));
    }
    let entries: Vec<PendingEntry> = ready.iter().map(|(e, _)| e.clone()).collect();
    let batches = match on_store(&store, move |s| {
        Ok(entries.iter().map(|e| s.read_batch(e)).collect::<Vec<_>>())
    })
    .await
    {
        Ok(b) => b,
        Err(err) => {
            for (e, _) in &ready {
                retry(e, &err, None);
            }
            Vec::new()
        }
    };
    let mut prepared = Vec::new();
    for ((e, p), batch) in ready.into_iter().zip(batches) {
        let mut batch = match batch {
            Ok(b) => b,
            Err(err) => {
                retry(&e, &err, None);
                continue;
            }
        };
        // The marker recovery looks for; the producer's CRC is recomputed over it.
        batch[56..64].copy_from_slice(&(e.id as i64).to_le_bytes());
        add_flags(&mut batch, FLAG_DELAYED);
        stamp_batch(&mut batch, 0, 0);
        // Where recovery looks from: the log end before this round's appends.
        let log_end = p.log_end_offset();
        prepared.push((e, p, batch, log_end));
    }
    let marks: Vec<(u64, u64)> = prepared.iter().map(|(e, _, _, at)| (e.id, *at)).collect();
    if let Err(err) = on_store(&store, move |s| s.mark_firing_all(&marks)).await {
        for (e, _, _, _) in &prepared {
            retry(e, &err, None);
        }
        prepared.clear();
    }
    let mut appended = Vec::new();
    for (e, p, batch, log_end) in prepared {
        let bytes = crate::batch::aligned16(&batch);
        let view = match BatchView::validate(&bytes) {
            Ok(v) => v,
            Err(err) => {
                retry(&e, &err, Some(log_end));
                continue;
            }
        };
        match p.append(&[view], now_ms(), &shard.cache) {
            Ok((base, next)) => {
                shard.group_commit.mark_dirty(&p);
                let a = Appended {
                    partition: p.clone(),
                    base_offset: base,
                    next_offset: next,
                    acks: crate::broker::produce::Acks::Leader,
                };
                appended.push((e, log_end, a));
            }
            Err(err) => retry(&e, &err, Some(log_end)),
        }
    }
    for (e, log_end, a) in appended {
        match a.durable(shard).await {
            Ok(_) => settled.push((e, Some(log_end))),
            // Not durable yet: fired again later, and found by the firing mark if it was.
            Err(err) => retry(&e, &err, Some(log_end)),
        }
    }
    if settled.is_empty() {
        return;
    }
    let ids: Vec<u64> = settled.iter().map(|(e, _)| e.id).collect();
    if let Err(err) = on_store(&store, move |s| s.mark_fired_all(&ids)).await {
        // Appended, but not known to be: the retry finds the batch by its firing mark.
        for (e, from) in &settled {
            retry(e, &err, from.or(e.firing_from));
        }
        return;
    }
    if let Err(err) = on_store(&store, |s| s.reclaim()).await {
        log::warn!("delay store: {err}");
    }
}

/// Arms `e` again [`RETRY_AFTER_MS`] from now; `appended_from`: its append may have
/// happened at or after this offset (look before appending again).
fn retry_later(shard: &Shard, e: &PendingEntry, appended_from: Option<u64>) {
    if let Some(i) = shard.delays.inner.borrow_mut().as_mut() {
        let mut again = e.clone();
        again.firing_from = appended_from.or(e.firing_from);
        i.wheel
            .insert(now_ms().max(0) as u64 + RETRY_AFTER_MS, again);
    }
}

/// Whether the marked batch of message `id` is in `p` at or after `from`.
async fn appended_before(
    shard: &Shard,
    p: &crate::partition::Partition,
    from: u64,
    id: u64,
) -> Result<bool, OpError> {
    let mut at = from.max(p.log_start_offset());
    while at < p.high_watermark() {
        let limits = ReadLimits {
            max_bytes: 1 << 20,
            file_reads: FileReads::Copy,
        };
        let chunks = p.read(at, limits, &shard.cache).await?;
        let before = at;
        for c in &chunks {
            let Some(bytes) = c.as_slice() else { break };
            for b in BatchIter::new(bytes) {
                let h = *b
                    .map_err(|err| OpError::new(ErrorCode::CorruptMessage, err.to_string()))?
                    .header();
                if h.flags & FLAG_DELAYED != 0 && h.producer_id == id as i64 {
                    return Ok(true);
                }
                at = at.max(h.next_offset());
            }
        }
        if at == before {
            break;
        }
    }
    Ok(false)
}
