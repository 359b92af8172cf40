//! The groups a shard coordinates: the shell around [`crate::group::Group`]. A group lives
//! on the shard that owns its partition of `__consumer_offsets` (`murmur2(group) % N`);
//! requests park on a channel until the state machine's `Action` for them comes out.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;

use crate::controller::metadata::ClusterMetadata;
use crate::group::coordinator::{
    Action, Group, GroupConfig, GroupError, JoinRequest, JoinResult, SyncRequest, Token,
};
use crate::protocol::messages::{GroupDescription, MemberInfo};

/// The internal topic whose partitions place group coordinators.
pub const OFFSETS_TOPIC: &str = "__consumer_offsets";

/// The partition of `__consumer_offsets` that hosts `group`.
pub fn offsets_partition(group: &str, partitions: u32) -> u32 {
    crate::partitioner::partition_for_key(group.as_bytes(), partitions)
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
    /// Per offsets partition: commit records appended since its last compaction.
    since_compaction: RefCell<HashMap<u32, usize>>,
    /// Per offsets partition: base offsets of commits appended but not yet durable. A
    /// compaction never truncates above the lowest of them.
    in_flight: RefCell<HashMap<u32, std::collections::BTreeSet<u64>>>,
    compacting: RefCell<std::collections::HashSet<u32>>,
    groups: RefCell<HashMap<String, Group>>,
    waiters: RefCell<HashMap<Token, Waiter>>,
    next_token: Cell<Token>,
}

/// A value that differs between runs of the broker (and between its shards): the wall clock
/// hashed with std's randomly keyed hasher.
fn fresh_incarnation() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    h.write_u128(now);
    h.finish()
}

impl GroupHost {
    /// The groups of one coordinator run: `cfg.incarnation` is replaced by a fresh value, so
    /// member ids never repeat those of an earlier run.
    pub fn new(cfg: GroupConfig) -> GroupHost {
        GroupHost {
            cfg: GroupConfig {
                incarnation: fresh_incarnation(),
                ..cfg
            },
            since_compaction: RefCell::new(HashMap::new()),
            in_flight: RefCell::new(HashMap::new()),
            compacting: RefCell::new(std::collections::HashSet::new()),
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
        let actions = {
            let mut groups = self.groups.borrow_mut();
            let g = groups
                .entry(group.to_string())
                .or_insert_with(|| Group::new(group, self.cfg.clone()));
            let actions = g.join(now_ms, req, token);
            // A refused first join leaves nothing behind: made-up group ids cost no memory.
            if g.member_ids().is_empty() && g.all_committed().next().is_none() {
                groups.remove(group);
            }
            actions
        };
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

    /// The member id a static instance id of `group` belongs to now.
    pub fn member_of_instance(&self, group: &str, instance: &str) -> Option<String> {
        self.groups
            .borrow()
            .get(group)
            .and_then(|g| g.member_of_instance(instance).map(str::to_string))
    }

    /// (group, state) of every group this shard coordinates, sorted.
    pub fn list(&self) -> Vec<(String, String)> {
        let mut out: Vec<_> = self
            .groups
            .borrow()
            .values()
            .map(|g| (g.id.clone(), g.state().name().to_string()))
            .collect();
        out.sort();
        out
    }

    /// DescribeGroups for one group this shard coordinates. A group never seen here (no
    /// member joined, no offset committed) is described as Kafka does: state "Dead", no
    /// members, no error.
    pub fn describe(&self, group: &str) -> GroupDescription {
        let groups = self.groups.borrow();
        let Some(g) = groups.get(group) else {
            return GroupDescription {
                error_code: 0,
                message: String::new(),
                group: group.to_string(),
                state: "Dead".into(),
                protocol_type: String::new(),
                protocol: String::new(),
                generation: 0,
                leader: String::new(),
                members: Vec::new(),
            };
        };
        GroupDescription {
            error_code: 0,
            message: String::new(),
            group: group.to_string(),
            state: g.state().name().to_string(),
            protocol_type: g.protocol_type().unwrap_or_default().to_string(),
            protocol: g.protocol().unwrap_or_default().to_string(),
            generation: g.generation(),
            leader: g.leader().unwrap_or_default().to_string(),
            members: g
                .describe_members()
                .into_iter()
                .map(|m| MemberInfo {
                    member_id: m.member_id,
                    group_instance_id: m.group_instance_id,
                    client_id: m.client_id,
                    assignment: m.assignment,
                })
                .collect(),
        }
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

/// A committed offset as a record of `__consumer_offsets`: key `group \0 topic \0 partition`,
/// value `offset (u64 LE) ++ metadata`. The latest record of a key is the committed offset.
pub fn encode_commit(
    group: &str,
    topic: &str,
    partition: u32,
    offset: u64,
    metadata: &str,
) -> (Vec<u8>, Vec<u8>) {
    let key = format!("{group}\0{topic}\0{partition}").into_bytes();
    let mut value = offset.to_le_bytes().to_vec();
    value.extend_from_slice(metadata.as_bytes());
    (key, value)
}

/// The inverse of [`encode_commit`]; `None` for a record that is not a commit.
pub fn decode_commit(key: &[u8], value: &[u8]) -> Option<(String, String, u32, u64, String)> {
    let key = std::str::from_utf8(key).ok()?;
    let mut parts = key.split('\0');
    let (group, topic, partition) = (parts.next()?, parts.next()?, parts.next()?.parse().ok()?);
    if parts.next().is_some() || value.len() < 8 {
        return None;
    }
    let offset = u64::from_le_bytes(value[..8].try_into().ok()?);
    let metadata = String::from_utf8_lossy(&value[8..]).into_owned();
    Some((
        group.to_string(),
        topic.to_string(),
        partition,
        offset,
        metadata,
    ))
}

impl GroupHost {
    /// Validates a commit against the group; a group not known yet is checked as an empty
    /// one (commits from outside a group, as reset-offsets does) and created only when the
    /// commit is stored.
    pub fn check_commit(
        &self,
        group: &str,
        member_id: &str,
        generation: i32,
        offsets: &[((String, u32), u64, String)],
    ) -> Result<(), GroupError> {
        match self.groups.borrow().get(group) {
            Some(g) => g.check_commit(member_id, generation, offsets),
            None => {
                Group::new(group, self.cfg.clone()).check_commit(member_id, generation, offsets)
            }
        }
    }

    /// Stores offsets made durable (or replayed from the log at start).
    pub fn store_offsets(
        &self,
        group: &str,
        now_ms: u64,
        offsets: Vec<((String, u32), u64, String)>,
    ) {
        let mut groups = self.groups.borrow_mut();
        let g = groups
            .entry(group.to_string())
            .or_insert_with(|| Group::new(group, self.cfg.clone()));
        for ((topic, partition), offset, metadata) in offsets {
            g.load_offset(
                topic,
                partition,
                crate::group::coordinator::CommittedOffset {
                    offset,
                    metadata,
                    commit_time_ms: now_ms,
                },
            );
        }
    }

    /// Every committed offset of a group as (topic, partition, offset, metadata), sorted by
    /// topic and partition (OffsetFetch with no partitions named).
    pub fn all_committed(&self, group: &str) -> Vec<(String, u32, u64, String)> {
        self.groups.borrow().get(group).map_or_else(Vec::new, |g| {
            g.all_committed()
                .map(|((t, p), c)| (t.clone(), *p, c.offset, c.metadata.clone()))
                .collect()
        })
    }

    /// The committed offset of a partition for a group.
    pub fn committed(&self, group: &str, topic: &str, partition: u32) -> Option<(u64, String)> {
        self.groups
            .borrow()
            .get(group)
            .and_then(|g| g.committed(topic, partition))
            .map(|c| (c.offset, c.metadata.clone()))
    }
}

/// Loads the committed offsets of every `__consumer_offsets` partition this shard owns, by
/// reading them from the log start to the high watermark (run once, before serving).
pub async fn replay_offsets(shard: &std::rc::Rc<super::shard::Shard>) {
    use crate::batch::BatchIter;
    use crate::log::FileReads;
    use crate::partition::ReadLimits;
    let mine: Vec<_> = shard
        .all_partitions()
        .into_iter()
        .filter(|p| &*p.topic == OFFSETS_TOPIC)
        .collect();
    for p in mine {
        let mut at = p.log_start_offset();
        let end = p.high_watermark();
        let mut loaded = 0usize;
        while at < end {
            let limits = ReadLimits {
                max_bytes: 1 << 20,
                file_reads: FileReads::Copy,
            };
            let chunks = match p.read(at, limits, &shard.cache).await {
                Ok(c) if !c.is_empty() => c,
                Ok(_) => break,
                // Commits after a hole are newer than any lost in it: keep them.
                Err(crate::log::LogError::Missing { from, to, why }) if to > at => {
                    log::error!(
                        "replaying {OFFSETS_TOPIC}-{}: commits at offsets {from}..{to} are \
                         lost ({why}); replaying the rest",
                        p.index
                    );
                    at = to;
                    continue;
                }
                Err(e) => {
                    log::error!("replaying {OFFSETS_TOPIC}-{}: {e}", p.index);
                    break;
                }
            };
            let before = at;
            for chunk in &chunks {
                let buf = crate::batch::aligned16(chunk.as_slice().unwrap_or_default());
                for batch in BatchIter::new(&buf).map_while(Result::ok) {
                    let Ok(records) = batch.records() else { break };
                    for r in records {
                        if r.offset < at {
                            continue;
                        }
                        at = r.offset + 1;
                        if let Some((group, topic, partition, offset, metadata)) =
                            decode_commit(r.key().unwrap_or_default(), r.value())
                        {
                            shard.groups.store_offsets(
                                &group,
                                r.timestamp_ms.max(0) as u64,
                                vec![((topic, partition), offset, metadata)],
                            );
                            loaded += 1;
                        }
                    }
                }
            }
            if at == before {
                break; // no progress: never spin
            }
        }
        if loaded > 0 {
            log::info!(
                "shard {}: loaded {loaded} committed offsets from {OFFSETS_TOPIC}-{}",
                shard.id,
                p.index
            );
        }
    }
}

impl GroupHost {
    /// A commit record was appended at `base` to offsets partition `p`.
    pub fn commit_appended(&self, p: u32, base: u64, records: usize) {
        self.in_flight
            .borrow_mut()
            .entry(p)
            .or_default()
            .insert(base);
        *self.since_compaction.borrow_mut().entry(p).or_default() += records;
    }

    /// The commit at `base` is durable (or failed).
    pub fn commit_settled(&self, p: u32, base: u64) {
        if let Some(s) = self.in_flight.borrow_mut().get_mut(&p) {
            s.remove(&base);
        }
    }

    /// If partition `p` took `every` commit records since its last compaction (and none is
    /// running), starts one: returns the snapshot records (the latest commit of every group
    /// hosted there) and marks the compaction running.
    pub fn begin_compaction(
        &self,
        p: u32,
        partitions: u32,
        every: usize,
    ) -> Option<Vec<(Vec<u8>, Vec<u8>)>> {
        let due = self.since_compaction.borrow().get(&p).copied().unwrap_or(0) >= every;
        if !due || !self.compacting.borrow_mut().insert(p) {
            return None;
        }
        self.since_compaction.borrow_mut().insert(p, 0);
        let groups = self.groups.borrow();
        let mut records = Vec::new();
        for g in groups
            .values()
            .filter(|g| offsets_partition(&g.id, partitions) == p)
        {
            for ((topic, partition), c) in g.all_committed() {
                records.push(encode_commit(
                    &g.id,
                    topic,
                    *partition,
                    c.offset,
                    &c.metadata,
                ));
            }
        }
        Some(records)
    }

    /// Where a compaction of `p` whose snapshot starts at `snapshot_base` may truncate: below
    /// the snapshot, and below any commit not yet durable (it is not in the snapshot).
    pub fn compaction_point(&self, p: u32, snapshot_base: u64) -> u64 {
        let lowest = self
            .in_flight
            .borrow()
            .get(&p)
            .and_then(|s| s.iter().next().copied());
        lowest.map_or(snapshot_base, |l| l.min(snapshot_base))
    }

    pub fn end_compaction(&self, p: u32) {
        self.compacting.borrow_mut().remove(&p);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn join_req(member: &str) -> JoinRequest {
        JoinRequest {
            member_id: member.to_string(),
            group_instance_id: Some("host-a".into()),
            client_id: "cli".into(),
            session_timeout_ms: 10_000,
            rebalance_timeout_ms: 30_000,
            protocol_type: "consumer".into(),
            protocols: vec![("range".into(), Vec::new())],
        }
    }

    #[test]
    fn a_restarted_host_hands_out_new_member_ids() {
        let first_id = || {
            let host = GroupHost::new(GroupConfig::default());
            let mut req = join_req("");
            req.group_instance_id = None;
            host.join(0, "g", req)
                .try_recv()
                .unwrap()
                .unwrap()
                .member_id
        };
        assert_ne!(first_id(), first_id());
    }

    #[test]
    fn refused_requests_for_unknown_groups_leave_nothing_behind() {
        let host = GroupHost::new(GroupConfig::default());
        let mut bad = join_req("");
        bad.session_timeout_ms = 1; // below the minimum
        assert!(host.join(0, "made-up", bad).try_recv().unwrap().is_err());
        let commit = [(("t".to_string(), 0), 5, String::new())];
        assert!(host.check_commit("other", "nobody", 3, &commit).is_err());
        // A commit from outside a group passes the check and creates nothing yet.
        assert!(host.check_commit("third", "", -1, &commit).is_ok());
        assert!(host.list().is_empty(), "{:?}", host.list());
        assert_eq!(host.describe("made-up").state, "Dead");
    }

    #[test]
    fn describing_groups_known_and_unknown() {
        let host = GroupHost::new(GroupConfig::default());
        let dead = host.describe("nobody");
        assert_eq!((dead.state.as_str(), dead.error_code), ("Dead", 0));
        assert!(dead.members.is_empty() && dead.protocol_type.is_empty());
        assert_eq!(dead.group, "nobody");

        let joined = host.join(0, "g", join_req("")).try_recv().unwrap().unwrap();
        let d = host.describe("g");
        assert_eq!(d.state, "CompletingRebalance");
        let rx = host
            .sync(
                1,
                "g",
                SyncRequest {
                    member_id: joined.member_id.clone(),
                    generation: joined.generation,
                    assignments: vec![(joined.member_id.clone(), b"mine".to_vec())],
                },
            )
            .unwrap();
        assert_eq!(rx.try_recv().unwrap().unwrap(), b"mine");
        let d = host.describe("g");
        assert_eq!(
            (
                d.state.as_str(),
                d.protocol_type.as_str(),
                d.protocol.as_str(),
                d.generation,
                d.leader.as_str()
            ),
            ("Stable", "consumer", "range", 1, joined.member_id.as_str())
        );
        assert_eq!(
            d.members,
            vec![MemberInfo {
                member_id: joined.member_id.clone(),
                group_instance_id: Some("host-a".into()),
                client_id: "cli".into(),
                assignment: b"mine".to_vec(),
            }]
        );
        // Gone again: Empty (not Dead), the group is still known.
        host.leave(2, "g", &joined.member_id).unwrap();
        let d = host.describe("g");
        assert_eq!((d.state.as_str(), d.members.len()), ("Empty", 0));
    }

    #[test]
    fn all_committed_offsets_of_a_group_sorted() {
        let host = GroupHost::new(GroupConfig::default());
        assert!(host.all_committed("g").is_empty());
        host.store_offsets(
            "g",
            0,
            vec![
                (("u".into(), 0), 9, "m".into()),
                (("t".into(), 1), 5, String::new()),
                (("t".into(), 0), 3, String::new()),
            ],
        );
        host.store_offsets("other", 0, vec![(("t".into(), 0), 1, String::new())]);
        host.store_offsets("g", 1, vec![(("t".into(), 1), 6, String::new())]);
        assert_eq!(
            host.all_committed("g"),
            vec![
                ("t".to_string(), 0, 3, String::new()),
                ("t".to_string(), 1, 6, String::new()),
                ("u".to_string(), 0, 9, "m".to_string()),
            ]
        );
        // A group with offsets only (nobody joined) is Empty, not Dead.
        assert_eq!(host.describe("other").state, "Empty");
    }
}
