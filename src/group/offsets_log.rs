//! Committed offsets as records of `__consumer_offsets` (sans-IO: the codec and the snapshot
//! a compaction writes; the shell that appends, replays and truncates is
//! `server::offsets_log`).
//!
//! A record's key is `group \0 topic \0 partition` (decimal), its value `offset (u64 LE) ++
//! [0xFF ++ leader epoch (i32 LE)] ++ metadata (UTF-8)`. The latest record of a key is the
//! committed offset. The leader epoch part is present when the commit carried one (Kafka's
//! `committed_leader_epoch`); records written before it existed have none and still read:
//! 0xFF never occurs in UTF-8, so it cannot be the first byte of an old record's metadata.

use super::coordinator::Group;

/// One partition's committed position, as a commit carries it and a group stores it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionOffset {
    pub topic: String,
    pub partition: u32,
    pub offset: u64,
    /// The leader epoch of the record the committed offset follows, when the client knew it.
    pub leader_epoch: Option<i32>,
    pub metadata: String,
}

/// Marks the optional leader epoch in a commit record's value (never a UTF-8 byte).
const LEADER_EPOCH_MARK: u8 = 0xFF;

impl PartitionOffset {
    pub fn new(topic: impl Into<String>, partition: u32, offset: u64) -> PartitionOffset {
        PartitionOffset {
            topic: topic.into(),
            partition,
            offset,
            leader_epoch: None,
            metadata: String::new(),
        }
    }
}

/// One record of `__consumer_offsets`: a group's committed offset for one partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommitRecord {
    pub group: String,
    pub committed: PartitionOffset,
}

impl CommitRecord {
    /// (key, value) of the record.
    pub fn encode(&self) -> (Vec<u8>, Vec<u8>) {
        let c = &self.committed;
        let key = format!("{}\0{}\0{}", self.group, c.topic, c.partition).into_bytes();
        let mut value = c.offset.to_le_bytes().to_vec();
        if let Some(epoch) = c.leader_epoch {
            value.push(LEADER_EPOCH_MARK);
            value.extend_from_slice(&epoch.to_le_bytes());
        }
        value.extend_from_slice(c.metadata.as_bytes());
        (key, value)
    }

    /// The inverse of [`CommitRecord::encode`]; `None` for a record that is not a commit.
    pub fn decode(key: &[u8], value: &[u8]) -> Option<CommitRecord> {
        let key = std::str::from_utf8(key).ok()?;
        let mut parts = key.split('\0');
        let (group, topic, partition) = (parts.next()?, parts.next()?, parts.next()?);
        if parts.next().is_some() {
            return None;
        }
        let offset = u64::from_le_bytes(value.get(..8)?.try_into().ok()?);
        let (leader_epoch, metadata) = match value.get(8) {
            Some(&LEADER_EPOCH_MARK) => (
                Some(i32::from_le_bytes(value.get(9..13)?.try_into().ok()?)),
                &value[13..],
            ),
            _ => (None, &value[8..]),
        };
        Some(CommitRecord {
            group: group.to_string(),
            committed: PartitionOffset {
                topic: topic.to_string(),
                partition: partition.parse().ok()?,
                offset,
                leader_epoch,
                metadata: String::from_utf8_lossy(metadata).into_owned(),
            },
        })
    }
}

/// One record of `__consumer_offsets` as read back: a commit, or the removal of a group's
/// committed offset (DeleteGroups, OffsetDelete): a tombstone, the key with an empty value
/// (a commit's value always holds its 8-byte offset).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OffsetsRecord {
    Commit(CommitRecord),
    Removed {
        group: String,
        topic: String,
        partition: u32,
    },
}

impl OffsetsRecord {
    /// (key, value) of the record.
    pub fn encode(&self) -> (Vec<u8>, Vec<u8>) {
        match self {
            OffsetsRecord::Commit(c) => c.encode(),
            OffsetsRecord::Removed {
                group,
                topic,
                partition,
            } => (
                format!("{group}\0{topic}\0{partition}").into_bytes(),
                Vec::new(),
            ),
        }
    }

    /// The inverse of [`OffsetsRecord::encode`]; `None` for a record that is neither.
    pub fn decode(key: &[u8], value: &[u8]) -> Option<OffsetsRecord> {
        if !value.is_empty() {
            return CommitRecord::decode(key, value).map(OffsetsRecord::Commit);
        }
        // The key of a commit, whatever its offset: reuse its parser.
        let c = CommitRecord::decode(key, &[0; 8])?;
        Some(OffsetsRecord::Removed {
            group: c.group,
            topic: c.committed.topic,
            partition: c.committed.partition,
        })
    }
}

/// What a compaction writes: the latest commit of every partition of every group given.
pub fn snapshot<'a>(groups: impl IntoIterator<Item = &'a Group>) -> Vec<CommitRecord> {
    groups
        .into_iter()
        .flat_map(|g| {
            g.all_committed().map(|committed| CommitRecord {
                group: g.id.clone(),
                committed,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_junk_is_not_a_commit() {
        let r = CommitRecord {
            group: "g".into(),
            committed: PartitionOffset {
                metadata: "m\u{e9}".into(),
                ..PartitionOffset::new("t", 3, 42)
            },
        };
        let (k, v) = r.encode();
        assert_eq!(k, b"g\0t\x003");
        assert_eq!(CommitRecord::decode(&k, &v), Some(r));
        assert_eq!(CommitRecord::decode(b"g\0t\x003", &[1, 2, 3]), None);
        assert_eq!(CommitRecord::decode(b"g\0t\0x", &[0; 8]), None);
        assert_eq!(CommitRecord::decode(b"g\0t\x003\0more", &[0; 8]), None);
        assert_eq!(CommitRecord::decode(&[0xff, 0], &[0; 8]), None);
    }

    #[test]
    fn leader_epochs_round_trip_and_old_records_still_read() {
        let with_epoch = CommitRecord {
            group: "g".into(),
            committed: PartitionOffset {
                leader_epoch: Some(7),
                metadata: "meta".into(),
                ..PartitionOffset::new("t", 0, 42)
            },
        };
        let (k, v) = with_epoch.encode();
        assert_eq!(v.len(), 8 + 1 + 4 + 4);
        assert_eq!(CommitRecord::decode(&k, &v), Some(with_epoch));
        // A record as the build before leader epochs wrote it: offset ++ metadata.
        let mut old = 42u64.to_le_bytes().to_vec();
        old.extend_from_slice(b"meta");
        let got = CommitRecord::decode(b"g\0t\x000", &old).expect("old record");
        assert_eq!(
            (got.committed.offset, got.committed.leader_epoch),
            (42, None)
        );
        assert_eq!(got.committed.metadata, "meta");
        // A mark without its 4 epoch bytes is no commit.
        assert_eq!(
            CommitRecord::decode(b"g\0t\x000", &[0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 1]),
            None
        );
    }

    #[test]
    fn tombstones_round_trip_and_are_not_commits() {
        let removed = OffsetsRecord::Removed {
            group: "g".into(),
            topic: "t".into(),
            partition: 3,
        };
        let (k, v) = removed.encode();
        assert_eq!((k.as_slice(), v.len()), (&b"g\0t\x003"[..], 0));
        assert_eq!(OffsetsRecord::decode(&k, &v), Some(removed));
        assert_eq!(
            CommitRecord::decode(&k, &v),
            None,
            "a tombstone is no commit"
        );
        let commit = CommitRecord {
            group: "g".into(),
            committed: PartitionOffset::new("t", 3, 9),
        };
        let (k, v) = commit.encode();
        assert_eq!(
            OffsetsRecord::decode(&k, &v),
            Some(OffsetsRecord::Commit(commit))
        );
        assert_eq!(OffsetsRecord::decode(b"junk", &[]), None);
    }
}
