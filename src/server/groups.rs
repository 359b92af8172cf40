//! The groups a shard coordinates: the shell around [`crate::group::Group`]. A group lives
//! on the shard that owns its partition of `__consumer_offsets` (`murmur2(group) % N`);
//! requests park on a channel until the state machine's `Action` for them comes out.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;

use crate::controller::metadata::ClusterMetadata;
use crate::group::coordinator::{
    Action, Group, GroupConfig, GroupError, JoinRequest, JoinResult, SyncRequest, Token,
};

/// The internal topic whose partitions place group coordinators.
pub const OFFSETS_TOPIC: &str = "__consumer_offsets";

/// The partition of `__consumer_offsets` that hosts `group`.
pub fn offsets_partition(group: &str, partitions: u32) -> u32 {
    crate::client::murmur2::partition_for_key(group.as_bytes(), partitions)
}

/// (broker, shard) coordinating `group`, from the metadata.
pub fn coordinator_of(md: &ClusterMetadata, group: &str) -> Option<(u32, u32)> {
    let t = md.topic(OFFSETS_TOPIC)?;
    let p = t
        .partitions
        .get(offsets_partition(group, t.partitions.len() as u32) as usize)?;
    Some((p.leader, p.shard))
}

enum Waiter {
    Join(flume::Sender<Result<JoinResult, GroupError>>),
    Sync(flume::Sender<Result<Vec<u8>, GroupError>>),
}

/// Groups coordinated by one shard.
pub struct GroupHost {
    cfg: GroupConfig,
    groups: RefCell<HashMap<String, Group>>,
    waiters: RefCell<HashMap<Token, Waiter>>,
    next_token: Cell<Token>,
}

impl GroupHost {
    pub fn new(cfg: GroupConfig) -> GroupHost {
        GroupHost {
            cfg,
            groups: RefCell::new(HashMap::new()),
            waiters: RefCell::new(HashMap::new()),
            next_token: Cell::new(1),
        }
    }

    fn token(&self) -> Token {
        let t = self.next_token.get();
        self.next_token.set(t + 1);
        t
    }

    fn deliver(&self, actions: Vec<Action>) {
        let mut waiters = self.waiters.borrow_mut();
        for a in actions {
            match a {
                Action::JoinReply(t, r) => {
                    if let Some(Waiter::Join(tx)) = waiters.remove(&t) {
                        let _ = tx.send(r);
                    }
                }
                Action::SyncReply(t, r) => {
                    if let Some(Waiter::Sync(tx)) = waiters.remove(&t) {
                        let _ = tx.send(r);
                    }
                }
            }
        }
    }

    /// JoinGroup; the receiver answers when the rebalance completes.
    pub fn join(
        &self,
        now_ms: u64,
        group: &str,
        req: JoinRequest,
    ) -> flume::Receiver<Result<JoinResult, GroupError>> {
        let (tx, rx) = flume::bounded(1);
        let token = self.token();
        self.waiters.borrow_mut().insert(token, Waiter::Join(tx));
        let actions = self
            .groups
            .borrow_mut()
            .entry(group.to_string())
            .or_insert_with(|| Group::new(group, self.cfg.clone()))
            .join(now_ms, req, token);
        self.deliver(actions);
        rx
    }

    /// SyncGroup; the receiver answers once the leader's assignment is in.
    pub fn sync(
        &self,
        now_ms: u64,
        group: &str,
        req: SyncRequest,
    ) -> Result<flume::Receiver<Result<Vec<u8>, GroupError>>, GroupError> {
        let (tx, rx) = flume::bounded(1);
        let token = self.token();
        let actions = {
            let mut groups = self.groups.borrow_mut();
            let g = groups.get_mut(group).ok_or_else(|| unknown_group(group))?;
            self.waiters.borrow_mut().insert(token, Waiter::Sync(tx));
            g.sync(now_ms, req, token)
        };
        self.deliver(actions);
        Ok(rx)
    }

    pub fn heartbeat(
        &self,
        now_ms: u64,
        group: &str,
        member_id: &str,
        generation: u32,
    ) -> Result<(), GroupError> {
        let mut groups = self.groups.borrow_mut();
        let g = groups.get_mut(group).ok_or_else(|| unknown_group(group))?;
        g.heartbeat(now_ms, member_id, generation)
    }

    pub fn leave(&self, now_ms: u64, group: &str, member_id: &str) -> Result<(), GroupError> {
        let actions = {
            let mut groups = self.groups.borrow_mut();
            let g = groups.get_mut(group).ok_or_else(|| unknown_group(group))?;
            g.leave(now_ms, member_id)?
        };
        self.deliver(actions);
        Ok(())
    }

    /// Expires sessions and rebalance deadlines of every group.
    pub fn tick(&self, now_ms: u64) {
        let mut actions = Vec::new();
        for g in self.groups.borrow_mut().values_mut() {
            let (a, expired) = g.tick(now_ms);
            for id in expired {
                log::info!("group {}: member {id} missed its session timeout", g.id);
            }
            actions.extend(a);
        }
        self.deliver(actions);
    }

    /// Forgets a waiter whose request gave up (timed out), so it does not pile up.
    pub fn abandon_waiters(&self) {
        self.waiters.borrow_mut().retain(|_, w| match w {
            Waiter::Join(tx) => !tx.is_disconnected(),
            Waiter::Sync(tx) => !tx.is_disconnected(),
        });
    }
}

fn unknown_group(group: &str) -> GroupError {
    GroupError {
        code: crate::protocol::ErrorCode::UnknownMemberId,
        message: format!("group {group:?} has no members here"),
    }
}
