//! Produce: validate each batch once (CRC + rkyv) against its partition's limits, stamp
//! offsets and append time into the request's own memory, append without a copy, and wait
//! until the data is below the high watermark (acks 1/all) or not at all (acks 0).
//!
//! A codec stages every partition of a request into one [`Produce`], then appends them
//! together: the buffer holding the batches is stamped whole before it is frozen into the
//! `Bytes` the log and the tail cache keep.

use std::rc::Rc;
use std::time::Instant;

use super::{locate_leader, recv_until, OpError, Shard};
use crate::batch::control::ControlRecord;
use crate::batch::{BatchError, BatchView, FLAG_CONTROL, FLAG_TRANSACTIONAL};
use crate::partition::producer_state::{ProducerBatch, Verdict};
use crate::partition::Partition;
use crate::protocol::error_code::ErrorCode;

/// How many replicas must have a write before it is answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Acks {
    /// No answer at all.
    None,
    /// The leader has it (as durable as `--fsync` promises).
    Leader,
    /// Every in-sync replica has it (with one replica: as `Leader`).
    All,
}

impl Acks {
    /// Kafka's and rill's `acks` numbers: 0, 1 or -1.
    pub fn parse(acks: i16) -> Result<Acks, OpError> {
        match acks {
            0 => Ok(Acks::None),
            1 => Ok(Acks::Leader),
            -1 => Ok(Acks::All),
            n => Err(OpError::new(
                ErrorCode::InvalidRequiredAcks,
                format!("acks must be 0, 1 or -1 (all), not {n}"),
            )),
        }
    }
}

/// A validated batch inside the request buffer: where it starts, its length, its records.
#[derive(Clone, Copy, Debug)]
struct Span {
    at: usize,
    len: usize,
    records: u32,
}

struct Staged {
    partition: Rc<Partition>,
    spans: Vec<Span>,
}

/// One partition's append: its first offset and the offset after its last.
pub struct Appended {
    pub partition: Rc<Partition>,
    pub base_offset: u64,
    pub next_offset: u64,
    /// What its acknowledgement waits for.
    pub acks: Acks,
}

/// A produce request's partitions, validated and waiting to be appended.
pub struct Produce {
    staged: Vec<Staged>,
    acks: Acks,
    /// Control batches (transaction markers) allowed: only the broker's own WriteTxnMarkers.
    markers: bool,
}

impl Default for Produce {
    fn default() -> Produce {
        Produce::new()
    }
}

/// Where the batches given to [`Produce::stage`] come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// A client's bytes: every check runs (CRC, layout, counts).
    Client,
    /// Built by this broker from input it checked (the Kafka listener's converted batches):
    /// only the headers are walked. Checking the CRC just computed again was 5% of the
    /// broker's CPU on a Kafka produce.
    BuiltHere,
}

/// Splits a partition's payload into validated batches.
fn validate_all(mut bytes: &[u8], origin: Origin) -> Result<Vec<BatchView<'_>>, BatchError> {
    let mut out = Vec::new();
    if bytes.is_empty() {
        return Err(BatchError::Empty);
    }
    while !bytes.is_empty() {
        let v = match origin {
            Origin::Client => BatchView::validate(bytes)?,
            Origin::BuiltHere => {
                debug_assert!(BatchView::validate(bytes).is_ok(), "a broker-built batch");
                BatchView::parse_header(bytes)?
            }
        };
        bytes = &bytes[v.len()..];
        out.push(v);
    }
    Ok(out)
}

impl Produce {
    /// A produce acknowledged when the leader has the writes (acks=1, or 0).
    pub fn new() -> Produce {
        Produce::with_acks(Acks::Leader)
    }

    /// A produce acknowledged as `acks` says: with `Acks::All` each partition's ISR must be
    /// at least `min.insync.replicas` before anything is appended.
    pub fn with_acks(acks: Acks) -> Produce {
        Produce {
            staged: Vec::new(),
            acks,
            markers: false,
        }
    }

    /// A produce of transaction markers (control batches) for WriteTxnMarkers, acknowledged
    /// as `acks` says; nothing else writes control batches.
    pub fn markers(acks: Acks) -> Produce {
        Produce {
            markers: true,
            ..Produce::with_acks(acks)
        }
    }

    /// Validates `payload` (the bytes at `at` of the payloads in the buffer later given to
    /// [`Produce::append`])
    /// as batches for `topic`-`partition`; returns the slot its [`Appended`] will have.
    pub fn stage(
        &mut self,
        shard: &Shard,
        topic: &str,
        partition: u32,
        payload: &[u8],
        at: usize,
        origin: Origin,
    ) -> Result<usize, OpError> {
        let p = locate_leader(shard, topic, partition)?;
        // Both would be stamped from the same log end.
        if self.staged.iter().any(|s| Rc::ptr_eq(&s.partition, &p)) {
            return Err(OpError::new(
                ErrorCode::InvalidRequest,
                "partition listed twice in one request",
            ));
        }
        if self.acks == Acks::All {
            p.admit_all()?;
        }
        let batches = validate_all(payload, origin)
            .map_err(|e| OpError::new(ErrorCode::CorruptMessage, e.to_string()))?;
        let mut spans = Vec::with_capacity(batches.len());
        let mut offset = at;
        for b in &batches {
            p.check_produce(b.len())?;
            self.check_transactional(b)?;
            if b.header().flags & FLAG_CONTROL == 0 {
                p.check_keys(b)?;
            }
            spans.push(Span {
                at: offset,
                len: b.len(),
                records: b.header().record_count,
            });
            offset += b.len();
        }
        self.staged.push(Staged {
            partition: p,
            spans,
        });
        Ok(self.staged.len() - 1)
    }

    /// A transactional batch must carry a producer id, and only the broker writes control
    /// batches (Kafka answers a client's with INVALID_RECORD).
    fn check_transactional(&self, b: &BatchView<'_>) -> Result<(), OpError> {
        let h = b.header();
        let control = h.flags & FLAG_CONTROL != 0;
        if control && !self.markers {
            return Err(OpError::new(
                ErrorCode::InvalidRecord,
                "clients may not write control batches (transaction markers)",
            ));
        }
        if control != self.markers {
            return Err(OpError::new(
                ErrorCode::InvalidRecord,
                "a transaction marker write holds control batches only",
            ));
        }
        if control {
            ControlRecord::of_batch(b)
                .map_err(|e| OpError::new(ErrorCode::InvalidRecord, e.to_string()))?;
        }
        if (control || h.flags & FLAG_TRANSACTIONAL != 0) && h.producer_id < 0 {
            return Err(OpError::new(
                ErrorCode::InvalidRecord,
                "a transactional batch must carry a producer id",
            ));
        }
        Ok(())
    }

    /// Stamps every staged batch in `buf` (whose byte `base` is the staged payloads' 0) and
    /// appends it: one result per slot, in order. Nothing awaits between reading a log end
    /// and appending, so no other append interleaves.
    pub fn append<B>(
        self,
        shard: &Shard,
        mut buf: B,
        base: usize,
        now_ms: i64,
    ) -> Vec<Result<Appended, OpError>>
    where
        B: AsMut<[u8]> + AsRef<[u8]> + Send + 'static,
    {
        let acks = self.acks;
        // Judged against the producer state and stamped before anything is appended: a
        // duplicate takes no offset, a refused batch refuses its partition.
        let mut verdicts = Vec::with_capacity(self.staged.len());
        for s in &self.staged {
            let tracked: Result<Vec<(u32, Option<ProducerBatch>)>, OpError> = s
                .spans
                .iter()
                .map(|span| {
                    let at = base + span.at;
                    ProducerBatch::of_bytes(&buf.as_ref()[at..at + span.len])
                        .map(|b| (span.records, b))
                        .map_err(|e| OpError::new(ErrorCode::InvalidRecord, e.to_string()))
                })
                .collect();
            let judged = tracked.and_then(|t| {
                s.partition
                    .admit_producer_batches(&t)
                    .map_err(|e| OpError::new(e.code(), e.to_string()))
            });
            if let Ok(v) = &judged {
                let mut next = s.partition.log_end_offset();
                let epoch = s.partition.stamp_epoch();
                for (span, v) in s.spans.iter().zip(v) {
                    if *v != Verdict::Append {
                        continue;
                    }
                    let at = base + span.at;
                    let batch = &mut buf.as_mut()[at..at + span.len];
                    crate::batch::stamp_leader(batch, next, now_ms, epoch);
                    next += u64::from(span.records);
                }
            }
            verdicts.push(judged);
        }
        let bytes = bytes::Bytes::from_owner(buf);
        self.staged
            .into_iter()
            .zip(verdicts)
            .map(|(s, judged)| {
                let verdicts = judged?;
                let slices: Vec<_> = s
                    .spans
                    .iter()
                    .zip(&verdicts)
                    .filter(|(_, v)| **v == Verdict::Append)
                    .map(|(span, _)| {
                        let at = base + span.at;
                        (bytes.slice(at..at + span.len), span.records)
                    })
                    .collect();
                let appended = if slices.is_empty() {
                    None
                } else {
                    let range = s.partition.append_stamped(slices, &shard.cache)?;
                    shard.group_commit.mark_dirty(&s.partition);
                    Some(range)
                };
                let (base_offset, next_offset) = answered_range(&verdicts, appended);
                Ok(Appended {
                    partition: s.partition,
                    base_offset,
                    next_offset,
                    acks,
                })
            })
            .collect()
    }
}

/// The offsets a partition's produce is answered with: from the first batch's (its original
/// ones for a duplicate) to after the last stored one, appended now or before; its
/// acknowledgement waits for all of them.
fn answered_range(verdicts: &[Verdict], appended: Option<(u64, u64)>) -> (u64, u64) {
    let mut appended_first = appended.map(|(first, _)| first);
    let mut base = None;
    let mut next = appended.map_or(0, |(_, end)| end);
    for v in verdicts {
        let first = match v {
            Verdict::Append => appended_first.take(),
            Verdict::Duplicate(m) => {
                next = next.max(m.last_offset + 1);
                Some(m.base_offset)
            }
        };
        if base.is_none() {
            base = first;
        }
    }
    (base.unwrap_or(next), next)
}

/// A write awaiting its acknowledgement, with the caller's slot.
pub struct AckWait {
    slot: usize,
    rx: flume::Receiver<Result<(), ErrorCode>>,
}

impl Appended {
    /// What to wait on for this append's acknowledgement, answered for `slot`.
    pub fn ack(&self, slot: usize) -> AckWait {
        let rx = match self.acks {
            Acks::All => self.partition.wait_for_all(self.next_offset),
            Acks::Leader | Acks::None => self.partition.wait_for_ack(self.next_offset - 1),
        };
        AckWait { slot, rx }
    }

    /// Waits, as long as a produce may (`--max-produce-timeout-ms`), until an append the
    /// broker made itself (an offset commit, a delayed message) is acknowledged.
    pub async fn durable(&self, shard: &Shard) -> Result<(), OpError> {
        let deadline = Instant::now() + shard.cfg.max_produce_timeout;
        match await_acks(shard, vec![self.ack(0)], deadline).await.pop() {
            Some((_, e)) => Err(e),
            None => Ok(()),
        }
    }
}

/// An acks=0 produce: nobody waits for its writes, but the request's memory (`hold`, its
/// grant from `--max-request-memory-bytes`) stays taken until they are durable (or failed,
/// or `--max-produce-timeout-ms` passed), so a client that does not wait for answers cannot
/// make the shard hold more unwritten bytes than the budget.
pub fn hold_until_acked<T: 'static>(shard: &Rc<Shard>, waits: Vec<AckWait>, hold: T) {
    if waits.is_empty() {
        return;
    }
    let shard = shard.clone();
    let deadline = Instant::now() + shard.cfg.max_produce_timeout;
    rill_shards::rt::spawn_local(async move {
        await_acks(&shard, waits, deadline).await;
        drop(hold);
    })
    .detach();
}

/// Waits for each write until `deadline`; returns the ones that failed, by slot.
pub async fn await_acks(
    shard: &Shard,
    waits: Vec<AckWait>,
    deadline: Instant,
) -> Vec<(usize, OpError)> {
    let mut failed = Vec::new();
    for w in waits {
        let (code, msg) = match recv_until(shard, &w.rx, deadline).await {
            Some(Ok(Ok(()))) => continue,
            Some(Ok(Err(code))) => (code, ack_failure(code)),
            Some(Err(_)) => (ErrorCode::UnknownServerError, "the partition went away"),
            None => (
                ErrorCode::RequestTimedOut,
                "not durable within the request timeout",
            ),
        };
        failed.push((w.slot, OpError::new(code, msg)));
    }
    failed
}

/// Why an acknowledgement failed, in words for the client.
fn ack_failure(code: ErrorCode) -> &'static str {
    match code {
        ErrorCode::NotEnoughReplicasAfterAppend => {
            "written, but the ISR shrank below min.insync.replicas meanwhile"
        }
        ErrorCode::NotLeaderOrFollower => "this broker stopped leading the partition",
        _ => "the write failed",
    }
}
