//! Control batches: the marker a transaction coordinator has written to every partition of a
//! transaction to end it (Kafka's `EndTransactionMarker`). A control batch has the flags
//! [`FLAG_CONTROL`] and [`FLAG_TRANSACTIONAL`], the producer's id and epoch, no sequence, and
//! one record whose key and value are Kafka's control record bytes (big-endian, as Kafka
//! stores them), so the Kafka listener serves them as they are:
//! key = version (i16, 0), type (i16: 0 abort, 1 commit);
//! value = version (i16, 0), coordinator epoch (i32).

use rkyv::util::AlignedVec;

use super::header::{add_flags, FLAG_CONTROL, FLAG_TRANSACTIONAL};
use super::{BatchBuilder, BatchError, BatchView};

/// How a transaction ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ControlKind {
    Abort,
    Commit,
}

impl ControlKind {
    /// Kafka's control record type.
    pub fn code(self) -> i16 {
        match self {
            ControlKind::Abort => 0,
            ControlKind::Commit => 1,
        }
    }
}

/// A transaction marker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ControlRecord {
    pub kind: ControlKind,
    /// The epoch of the coordinator that wrote it (its `__transactions` partition's leader
    /// epoch): a marker of an older coordinator is refused.
    pub coordinator_epoch: i32,
}

/// Why bytes are not a control record.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ControlError {
    #[error("control record key of {0} bytes (4 expected)")]
    KeyLength(usize),
    #[error("control record version {0} (0 is read)")]
    Version(i16),
    #[error("control record type {0} (0 abort, 1 commit are known)")]
    Type(i16),
    #[error("control record value of {0} bytes (at least 6 expected)")]
    ValueLength(usize),
    #[error("a control batch holds {0} records (one expected)")]
    Records(u32),
    #[error("control batch: {0}")]
    Batch(#[from] BatchError),
}

impl ControlRecord {
    pub fn key_bytes(&self) -> [u8; 4] {
        let mut k = [0u8; 4];
        k[2..4].copy_from_slice(&self.kind.code().to_be_bytes());
        k
    }

    pub fn value_bytes(&self) -> [u8; 6] {
        let mut v = [0u8; 6];
        v[2..6].copy_from_slice(&self.coordinator_epoch.to_be_bytes());
        v
    }

    /// Reads a control record's key and value (a newer value version may carry more bytes
    /// after the epoch, as in Kafka: they are ignored).
    pub fn parse(key: Option<&[u8]>, value: Option<&[u8]>) -> Result<ControlRecord, ControlError> {
        let key = key.unwrap_or_default();
        if key.len() != 4 {
            return Err(ControlError::KeyLength(key.len()));
        }
        let version = i16::from_be_bytes([key[0], key[1]]);
        if version != 0 {
            return Err(ControlError::Version(version));
        }
        let kind = match i16::from_be_bytes([key[2], key[3]]) {
            0 => ControlKind::Abort,
            1 => ControlKind::Commit,
            t => return Err(ControlError::Type(t)),
        };
        let value = value.unwrap_or_default();
        if value.len() < 6 {
            return Err(ControlError::ValueLength(value.len()));
        }
        let coordinator_epoch = i32::from_be_bytes([value[2], value[3], value[4], value[5]]);
        Ok(ControlRecord {
            kind,
            coordinator_epoch,
        })
    }

    /// The marker of a control batch (validated: see [`BatchView::validate`]).
    pub fn of_batch(batch: &BatchView<'_>) -> Result<ControlRecord, ControlError> {
        let count = batch.header().record_count;
        if count != 1 {
            return Err(ControlError::Records(count));
        }
        let r = batch.records()?.next().ok_or(ControlError::Records(0))?;
        ControlRecord::parse(r.key(), r.value())
    }

    /// The control batch carrying this marker for a producer, unstamped (the leader stamps
    /// offset, time and epoch at append like any batch).
    pub fn batch(
        &self,
        producer_id: i64,
        producer_epoch: i16,
        timestamp_ms: i64,
    ) -> Result<AlignedVec<16>, ControlError> {
        let mut b = BatchBuilder::new().producer(producer_id, producer_epoch, -1);
        b.push_record(
            timestamp_ms,
            Some(&self.key_bytes()),
            Some(&self.value_bytes()),
            [],
            &[],
        );
        let mut out = b.build()?;
        add_flags(&mut out, FLAG_CONTROL | FLAG_TRANSACTIONAL);
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::aligned16;

    #[test]
    fn a_marker_round_trips_through_its_batch() {
        for kind in [ControlKind::Abort, ControlKind::Commit] {
            let m = ControlRecord {
                kind,
                coordinator_epoch: 7,
            };
            let bytes = m.batch(42, 3, 1_700_000_000_000).unwrap();
            let bytes = aligned16(&bytes);
            let view = BatchView::validate(&bytes).unwrap();
            let h = view.header();
            assert_eq!(h.flags, FLAG_CONTROL | FLAG_TRANSACTIONAL);
            assert_eq!((h.producer_id, h.producer_epoch), (42, 3));
            assert_eq!(ControlRecord::of_batch(&view).unwrap(), m);
        }
    }

    #[test]
    fn kafka_bytes_are_big_endian_version_0() {
        let m = ControlRecord {
            kind: ControlKind::Commit,
            coordinator_epoch: 0x0102_0304,
        };
        assert_eq!(m.key_bytes(), [0, 0, 0, 1]);
        assert_eq!(m.value_bytes(), [0, 0, 1, 2, 3, 4]);
    }

    #[test]
    fn bad_control_records_are_errors() {
        assert_eq!(
            ControlRecord::parse(Some(&[0, 0, 0]), Some(&[0; 6])),
            Err(ControlError::KeyLength(3))
        );
        assert_eq!(
            ControlRecord::parse(Some(&[0, 1, 0, 0]), Some(&[0; 6])),
            Err(ControlError::Version(1))
        );
        assert_eq!(
            ControlRecord::parse(Some(&[0, 0, 0, 5]), Some(&[0; 6])),
            Err(ControlError::Type(5))
        );
        assert_eq!(
            ControlRecord::parse(Some(&[0, 0, 0, 0]), None),
            Err(ControlError::ValueLength(0))
        );
    }
}
