//! A partition's replication role, around the sans-IO state machines of
//! [`crate::replication`]: one replica (the high watermark is the local durable end, as it
//! always was), the leader of several (the high watermark is the ISR's minimum durable end,
//! acks=all waits for it), or a follower (written only by the shard's replica fetcher, at the
//! leader's offsets; its high watermark comes from the leader).

use std::collections::HashMap;
use std::time::Duration;

use super::tail_cache::TailCache;
use super::Partition;
use crate::batch::BatchView;
use crate::log::LogError;
use crate::protocol::ErrorCode;
use crate::replication::{
    EpochEnd, Follower, FollowerAction, IsrProposal, Leader, LeaderAction, LeaderConfig,
    LeaderEpochs, PartitionView, ReplicaFetch, ReplicationError,
};

pub enum Role {
    /// Replication factor 1: the high watermark is the local durable end.
    Single,
    Leader(Box<LeaderRole>),
    Follower(Box<FollowerRole>),
}

pub struct LeaderRole {
    leader: Leader,
    /// acks=all producers by wait id.
    waiting: HashMap<u64, flume::Sender<Result<(), ErrorCode>>>,
    next_id: u64,
    /// ISR changes for the controller, taken by the shard ([`Partition::take_isr_proposals`]).
    proposals: Vec<IsrProposal>,
}

pub struct FollowerRole {
    pub follower: Follower,
    /// The epoch to ask the leader about next (OffsetForLeaderEpoch), if any.
    pub ask: Option<u32>,
    /// Where to cut the local log before fetching again, if anywhere.
    pub truncate: Option<u64>,
    /// Where to start the local log over, empty, before fetching again (the leader's log
    /// start, past this log's end), if anywhere.
    pub start_at: Option<u64>,
    /// Reconciliation failed (a cut below the high watermark): fetching stopped; only a new
    /// leader or epoch starts it again.
    pub stuck: bool,
}

impl FollowerRole {
    fn take(&mut self, actions: Vec<FollowerAction>) {
        for a in actions {
            match a {
                FollowerAction::AskEpochEnd { epoch, .. } => self.ask = Some(epoch),
                FollowerAction::Truncate { offset } => self.truncate = Some(offset),
                FollowerAction::StartAt { offset } => {
                    self.start_at = Some(offset);
                    self.truncate = None;
                }
                FollowerAction::Fetch { .. } => self.ask = None,
            }
        }
    }
}

/// What a follower partition needs from its fetcher now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FollowerNeed {
    StartAt(u64),
    Truncate(u64),
    AskEpochEnd(u32),
    Fetch(ReplicaFetch),
    Nothing,
}

/// How long a role change waits for the group commit to make the log durable first.
const ROLE_CHANGE_FLUSH_WAIT: Duration = Duration::from_secs(10);

impl Partition {
    pub fn is_follower(&self) -> bool {
        matches!(*self.role.borrow(), Role::Follower(_))
    }

    /// True for the leader of a partition with several replicas.
    pub fn is_replicated_leader(&self) -> bool {
        matches!(*self.role.borrow(), Role::Leader(_))
    }

    /// The leader and epoch this replica follows, if it follows.
    pub fn following(&self) -> Option<(u32, u32)> {
        match &*self.role.borrow() {
            Role::Follower(f) => Some((f.follower.leader(), f.follower.leader_epoch())),
            _ => None,
        }
    }

    /// Opening a replicated partition: the high watermark is the one last checkpointed (not
    /// the local log end, which may hold records no other replica has).
    pub fn start_replicated(&self) {
        let dir = self.dir();
        let end = self.log_end_offset();
        let hw = crate::log::partition_log::read_high_watermark(&dir)
            .unwrap_or(0)
            .min(end);
        assert!(
            self.high_watermark.get() >= hw,
            "opened at the log end, at least the checkpoint"
        );
        self.high_watermark.set(hw);
    }

    /// Loads the leader-epoch file (cut to the log end) if not loaded yet.
    pub async fn load_epochs(&self) -> Result<LeaderEpochs, LogError> {
        if let Some(e) = self.epochs.borrow().clone() {
            return Ok(e);
        }
        let dir = self.dir();
        let d = dir.clone();
        let entries = rill_shards::rt::spawn_blocking(move || {
            crate::log::leader_epoch::read_leader_epochs(&d)
        })
        .await?;
        let mut epochs = LeaderEpochs::from_entries(entries).map_err(|e| LogError::Corrupt {
            path: dir.join(crate::log::leader_epoch::LEADER_EPOCH_FILE),
            position: 0,
            what: e.to_string(),
        })?;
        if epochs.truncate_to(self.log_end_offset()) {
            self.write_epochs(&epochs).await?;
        }
        *self.epochs.borrow_mut() = Some(epochs.clone());
        Ok(epochs)
    }

    async fn write_epochs(&self, epochs: &LeaderEpochs) -> Result<(), LogError> {
        let entries = epochs.entries().to_vec();
        let d = self.dir();
        rill_shards::rt::spawn_blocking(move || {
            crate::log::leader_epoch::write_leader_epochs(&d, &entries)
        })
        .await
    }

    /// Waits (bounded) until everything appended is durable, so a new role starts from a log
    /// whose end is all durable (what the state machines assume).
    pub async fn wait_durable(&self, deadlines: &rill_shards::Deadlines) {
        self.wait_until(deadlines, |p| p.durable_end() >= p.log_end_offset())
            .await;
    }

    /// Waits (bounded) until everything appended counts as this replica's for its leader:
    /// durable, or under write caching appended (a follower's next fetch reports it).
    pub async fn wait_acknowledged(&self, deadlines: &rill_shards::Deadlines) {
        self.wait_until(deadlines, |p| p.acked.get() >= p.log_end_offset())
            .await;
    }

    async fn wait_until(&self, deadlines: &rill_shards::Deadlines, done: fn(&Self) -> bool) {
        let deadline = std::time::Instant::now() + ROLE_CHANGE_FLUSH_WAIT;
        loop {
            let l = self.listen();
            if done(self) || self.failure().is_some() || std::time::Instant::now() >= deadline {
                return;
            }
            futures_lite::future::or(l, deadlines.sleep_until(deadline)).await;
        }
    }

    /// Becomes the leader of a partition with several replicas (after [`Self::lead`]).
    pub fn become_leader(
        &self,
        me: u32,
        cfg: LeaderConfig,
        view: &PartitionView,
        now_ms: u64,
    ) -> Result<(), ReplicationError> {
        let leader = Leader::new(
            me,
            cfg,
            view,
            self.log_end_offset(),
            self.high_watermark.get(),
            now_ms,
        )?;
        self.depose(ErrorCode::NotLeaderOrFollower);
        *self.role.borrow_mut() = Role::Leader(Box::new(LeaderRole {
            leader,
            waiting: HashMap::new(),
            next_id: 1,
            proposals: Vec::new(),
        }));
        self.run_leader_actions();
        Ok(())
    }

    /// Becomes a follower of `leader` at `epoch` (epochs loaded by [`Self::load_epochs`]).
    pub fn become_follower(&self, leader: u32, epoch: u32) {
        self.depose(ErrorCode::NotLeaderOrFollower);
        let epochs = self.epochs.borrow().clone().unwrap_or_default();
        let (follower, first) = Follower::new(
            leader,
            epoch,
            &epochs,
            self.log_end_offset(),
            self.high_watermark.get(),
        );
        let mut role = FollowerRole {
            follower,
            ask: None,
            truncate: None,
            start_at: None,
            stuck: false,
        };
        role.take(vec![first]);
        *self.role.borrow_mut() = Role::Follower(Box::new(role));
        self.data.notify(usize::MAX);
    }

    /// Back to one replica (the replica set shrank to this broker).
    pub fn become_single(&self) {
        self.depose(ErrorCode::NotLeaderOrFollower);
        *self.role.borrow_mut() = Role::Single;
        let d = self.acked.get();
        if d > self.high_watermark.get() {
            self.raise_high_watermark(d);
        }
    }

    /// This broker left the partition's replica set (a reassignment): a leader fails its
    /// acks=all waits (the new leader has the records, a producer retries there), a follower
    /// stops fetching, and the partition counts as deleted here.
    pub fn leave_replica_set(&self) {
        self.depose(ErrorCode::NotLeaderOrFollower);
        *self.role.borrow_mut() = Role::Single;
        self.deleted.set(true);
        self.fail_waiters(ErrorCode::NotLeaderOrFollower);
    }

    /// Fails the acks=all waits of a leader role being left.
    fn depose(&self, code: ErrorCode) {
        if let Role::Leader(l) = &mut *self.role.borrow_mut() {
            for (_, tx) in l.waiting.drain() {
                let _ = tx.send(Err(code));
            }
        }
    }

    /// The metadata changed this partition without changing its leader or epoch (its ISR).
    pub fn on_partition_view(&self, view: &PartitionView, now_ms: u64) {
        if let Role::Leader(l) = &mut *self.role.borrow_mut() {
            l.leader.on_partition(view, now_ms);
        }
        self.run_leader_actions();
    }

    /// Time passes: laggards are proposed out of the ISR, a proposal is re-sent.
    pub fn replication_tick(&self, now_ms: u64) {
        if let Role::Leader(l) = &mut *self.role.borrow_mut() {
            l.leader.tick(now_ms);
        }
        self.run_leader_actions();
    }

    /// The controller refused an ISR proposal with `code`.
    pub fn on_isr_proposal_refused(&self, code: ErrorCode) {
        if let Role::Leader(l) = &mut *self.role.borrow_mut() {
            l.leader.on_proposal_refused(code);
        }
        self.run_leader_actions();
    }

    pub fn take_isr_proposals(&self) -> Vec<IsrProposal> {
        match &mut *self.role.borrow_mut() {
            Role::Leader(l) => std::mem::take(&mut l.proposals),
            _ => Vec::new(),
        }
    }

    /// Before appending an acks=all batch: NOT_ENOUGH_REPLICAS when the ISR is below
    /// `min.insync.replicas`, NOT_LEADER_OR_FOLLOWER when deposed.
    pub fn admit_all(&self) -> Result<(), (ErrorCode, String)> {
        match &*self.role.borrow() {
            Role::Leader(l) => l
                .leader
                .admit()
                .map_err(|e| (e.code(), format!("{}-{}: {e}", self.topic, self.index))),
            Role::Follower(_) => Err((
                ErrorCode::NotLeaderOrFollower,
                format!("{}-{} is a follower here", self.topic, self.index),
            )),
            Role::Single => Ok(()),
        }
    }

    /// A receiver answered once every ISR member has the records before `end_offset` (with
    /// one replica: once they are durable locally, as acks=1).
    pub fn wait_for_all(&self, end_offset: u64) -> flume::Receiver<Result<(), ErrorCode>> {
        let id = {
            let mut role = self.role.borrow_mut();
            let Role::Leader(l) = &mut *role else {
                drop(role);
                return self.wait_for_ack(end_offset.saturating_sub(1));
            };
            l.next_id += 1;
            l.next_id
        };
        let (tx, rx) = flume::bounded(1);
        if let Role::Leader(l) = &mut *self.role.borrow_mut() {
            l.waiting.insert(id, tx);
            l.leader.wait(id, end_offset);
        }
        self.run_leader_actions();
        rx
    }

    /// Tells a replicated leader its log grew.
    pub(super) fn leader_appended(&self, end: u64) {
        if let Role::Leader(l) = &mut *self.role.borrow_mut() {
            l.leader.appended(end);
        }
    }

    /// For [`Partition::advance`]: hands the durable end to the replication role; false with
    /// one replica (the caller moves the high watermark itself).
    pub(super) fn replica_durable(&self, end: u64) -> bool {
        match &mut *self.role.borrow_mut() {
            Role::Single => return false,
            Role::Leader(l) => l.leader.durable(end),
            Role::Follower(f) => f.follower.durable(end),
        }
        self.run_leader_actions();
        true
    }

    /// A follower's fetch reached this leader: validates it, records its progress and
    /// returns the high watermark to send back.
    pub fn on_replica_fetch(
        &self,
        follower: u32,
        fetch: ReplicaFetch,
        now_ms: u64,
    ) -> Result<u64, ReplicationError> {
        let r = match &mut *self.role.borrow_mut() {
            Role::Leader(l) => l.leader.on_fetch(follower, fetch, now_ms),
            _ => Err(ReplicationError::NotLeader {
                leader_epoch: self.leader_epoch(),
            }),
        };
        self.run_leader_actions();
        r
    }

    /// Carries out what the leader state machine asked for: answers acks=all waits, queues
    /// ISR proposals, and moves the partition's high watermark to the leader's.
    fn run_leader_actions(&self) {
        let mut answers = Vec::new();
        let hw = {
            let mut role = self.role.borrow_mut();
            let Role::Leader(l) = &mut *role else {
                return;
            };
            for a in l.leader.take_actions() {
                match a {
                    LeaderAction::Acked { id, result } => {
                        if let Some(tx) = l.waiting.remove(&id) {
                            answers.push((tx, result));
                        }
                    }
                    LeaderAction::ProposeIsr(p) => l.proposals.push(p),
                }
            }
            l.leader.high_watermark()
        };
        if hw > self.high_watermark.get() {
            self.raise_high_watermark(hw);
        }
        for (tx, result) in answers {
            let _ = tx.send(result);
        }
    }

    /// What the fetcher should do for this follower now.
    pub fn follower_need(&self) -> FollowerNeed {
        match &*self.role.borrow() {
            Role::Follower(f) if f.stuck => FollowerNeed::Nothing,
            Role::Follower(f) if f.start_at.is_some() => {
                FollowerNeed::StartAt(f.start_at.unwrap_or_default())
            }
            Role::Follower(f) => match (f.truncate, f.ask) {
                (Some(t), _) => FollowerNeed::Truncate(t),
                (None, Some(e)) => FollowerNeed::AskEpochEnd(e),
                (None, None) if f.follower.is_fetching() => match f.follower.fetch_action() {
                    FollowerAction::Fetch { fetch, .. } => FollowerNeed::Fetch(fetch),
                    _ => FollowerNeed::Nothing,
                },
                _ => FollowerNeed::Nothing,
            },
            _ => FollowerNeed::Nothing,
        }
    }

    /// The leader's answer to the follower's OffsetForLeaderEpoch about `asked`.
    pub fn on_epoch_end(&self, asked: u32, answer: EpochEnd) {
        let epochs = self.epochs.borrow().clone().unwrap_or_default();
        if let Role::Follower(f) = &mut *self.role.borrow_mut() {
            match f.follower.on_epoch_end(asked, answer, &epochs) {
                Ok(actions) => f.take(actions),
                Err(e) => {
                    log::error!(
                        "{}-{}: cannot follow broker {}: {e}",
                        self.topic,
                        self.index,
                        f.follower.leader()
                    );
                    f.stuck = true;
                }
            }
        }
    }

    /// The leader refused this follower's fetch (or its question) with `code`, its log
    /// starting at `leader_log_start` (0: not said).
    pub fn on_replica_fetch_error(&self, code: ErrorCode, leader_log_start: u64) {
        let epochs = self.epochs.borrow().clone().unwrap_or_default();
        if let Role::Follower(f) = &mut *self.role.borrow_mut() {
            let actions = f.follower.on_fetch_error(code, leader_log_start, &epochs);
            f.take(actions);
        }
    }

    /// The leader's high watermark, from a fetch answer.
    pub fn on_leader_high_watermark(&self, hw: u64) {
        let mine = match &mut *self.role.borrow_mut() {
            Role::Follower(f) => {
                f.follower.on_high_watermark(hw);
                f.follower.high_watermark()
            }
            _ => return,
        };
        if mine > self.high_watermark.get() {
            self.raise_high_watermark(mine);
        }
    }

    /// Appends fetched batches (validated, at exactly the offsets they carry) to a follower:
    /// a batch stamped with a newer leader epoch first records that epoch durably in the
    /// leader-epoch file. Returns the new log end.
    pub async fn append_replica(
        &self,
        payload: bytes::Bytes,
        cache: &TailCache,
    ) -> Result<u64, (ErrorCode, String)> {
        let bad = |what: String| {
            (
                ErrorCode::CorruptMessage,
                format!("{}-{}: fetched {what}", self.topic, self.index),
            )
        };
        let mut next = self.log_end_offset();
        let mut batches = Vec::new();
        let mut epochs = self.epochs.borrow().clone().unwrap_or_default();
        let mut new_epoch = false;
        let mut at = 0;
        while at < payload.len() {
            // A sendfile range may end inside a batch: the rest comes with the next fetch.
            let whole = crate::batch::BatchHeader::decode(&payload[at..])
                .is_some_and(|h| at + h.length as usize <= payload.len());
            if !whole && !batches.is_empty() {
                break;
            }
            let v = BatchView::validate(&payload[at..]).map_err(|e| bad(e.to_string()))?;
            let h = v.header();
            if h.base_offset != next {
                return Err(bad(format!(
                    "a batch at offset {} where the log ends at {next}",
                    h.base_offset
                )));
            }
            if let Ok(e) = u32::try_from(h.leader_epoch) {
                // Epochs this log recorded from here on name no records (it ends here): an
                // epoch it led without writing, before the leader's older one continues.
                if epochs.latest().is_some_and(|(last, _)| last > e) {
                    new_epoch |= epochs.truncate_to(h.base_offset);
                }
                new_epoch |= epochs
                    .assign(e, h.base_offset)
                    .map_err(|e| bad(e.to_string()))?;
            }
            batches.push((payload.slice(at..at + v.len()), h.record_count));
            next = h.next_offset();
            at += v.len();
        }
        if batches.is_empty() {
            return Ok(self.log_end_offset());
        }
        if new_epoch {
            // The file may be durable before the records it names (cut on open), never after.
            self.write_epochs(&epochs)
                .await
                .map_err(|e| (e.code(), e.to_string()))?;
            *self.epochs.borrow_mut() = Some(epochs);
        }
        if !self.is_follower() || self.log_end_offset() != batches_base(&batches) {
            return Err((
                ErrorCode::NotLeaderOrFollower,
                format!("{}-{}: no longer following", self.topic, self.index),
            ));
        }
        let (_, end) = self
            .append_unchecked(batches, cache)
            .map_err(|e| (e.code(), e.to_string()))?;
        if let Role::Follower(f) = &mut *self.role.borrow_mut() {
            f.follower.appended(end);
        }
        // Under write caching the leader counts this replica as having it now.
        self.acknowledge(self.ackable_end());
        Ok(end)
    }

    /// Cuts a follower's log to end at `offset` (its divergent tail; never below the high
    /// watermark) and its leader-epoch file with it.
    pub async fn truncate_replica(&self, offset: u64, cache: &TailCache) -> Result<(), LogError> {
        assert!(
            offset >= self.high_watermark.get(),
            "a follower never cuts below its high watermark"
        );
        if offset < self.log_end_offset() {
            let (dir, cfg) = {
                let log = self.log.borrow();
                // A group-commit round still holding this log's batches would advance the
                // new log with the old one's offsets: only a log durable to its end is cut.
                if log.has_pending() || self.durable_end() != log.next_offset() {
                    return Err(LogError::Failed("writes in flight: truncate later".into()));
                }
                (log.dir().to_path_buf(), log.config().clone())
            };
            let log = crate::log::partition_log::truncate_tail(dir, cfg, offset).await?;
            let mut log = log;
            let s = self.settings();
            log.set_segment_limits(s.segment_bytes, s.segment_age);
            let end = log.end_position();
            cache.forget(self.cache_key);
            *self.log.borrow_mut() = log;
            self.durable.set(end);
            self.acked.set(end.offset);
            if end.offset == self.high_watermark.get() {
                self.hw_position.set(end);
            }
            log::warn!(
                "{}-{}: cut the divergent tail: the log ends at {} now",
                self.topic,
                self.index,
                end.offset
            );
            self.cut_producer_state(cache, false).await?;
        }
        let mut epochs = self.epochs.borrow().clone().unwrap_or_default();
        if epochs.truncate_to(self.log_end_offset()) {
            self.write_epochs(&epochs).await?;
        }
        *self.epochs.borrow_mut() = Some(epochs);
        if let Role::Follower(f) = &mut *self.role.borrow_mut() {
            if f.truncate == Some(offset) {
                f.truncate = None;
            }
        }
        Ok(())
    }

    /// Drops a follower's whole log and starts it again, empty, at `offset`: the leader's
    /// log start, past this log's end (Kafka's truncateFullyAndStartAt).
    pub async fn restart_replica_at(&self, offset: u64, cache: &TailCache) -> Result<(), LogError> {
        let (dir, cfg) = {
            let log = self.log.borrow();
            assert!(
                offset > log.next_offset(),
                "a follower starts over only past its log end"
            );
            if log.has_pending() || self.durable_end() != log.next_offset() {
                return Err(LogError::Failed(
                    "writes in flight: start over later".into(),
                ));
            }
            (log.dir().to_path_buf(), log.config().clone())
        };
        // No record an epoch names stays.
        let epochs = LeaderEpochs::default();
        self.write_epochs(&epochs).await?;
        *self.epochs.borrow_mut() = Some(epochs);
        let mut log = crate::log::partition_log::start_empty_at(dir, cfg, offset).await?;
        let s = self.settings();
        log.set_segment_limits(s.segment_bytes, s.segment_age);
        let end = log.end_position();
        cache.forget(self.cache_key);
        *self.log.borrow_mut() = log;
        self.durable.set(end);
        self.acked.set(end.offset);
        self.clear_producer_state().await;
        // The leader deletes only below its high watermark: all of it is committed.
        self.raise_high_watermark(offset);
        log::warn!(
            "{}-{}: the leader's log starts at {offset}, past this replica's end: started the \
             log over there",
            self.topic,
            self.index
        );
        if let Role::Follower(f) = &mut *self.role.borrow_mut() {
            if f.start_at == Some(offset) {
                f.start_at = None;
            }
        }
        Ok(())
    }
}

fn batches_base(batches: &[(bytes::Bytes, u32)]) -> u64 {
    batches
        .first()
        .and_then(|(b, _)| crate::batch::BatchHeader::decode(b))
        .map_or(0, |h| h.base_offset)
}
