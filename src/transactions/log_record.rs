//! The records of `__transactions`: one per change of a transactional id's metadata, the
//! latest record of a key being the id's state (the topic is compacted); a tombstone (no
//! value) removes an expired id.
//!
//! key   = version (u16 LE, 0) ++ transactional id (UTF-8)
//! value = version (u8, 0) ++ producer id (i64) ++ epoch (i16) ++ last producer id (i64) ++
//!         last epoch (i16) ++ timeout ms (u32) ++ state (u8) ++ txn start ms (u64) ++
//!         last update ms (u64) ++ partition count (u32) ++ per partition: topic length (u16),
//!         topic (UTF-8), partition (u32) ++ CRC-32C (u32) of everything before it.
//! Every integer is little-endian. Decoding checks every length against the bytes there
//! are, the CRC, the state code and that nothing trails: a damaged record is an error.

use std::collections::BTreeSet;

use super::state::{TxnMetadata, TxnState};
use super::TopicPartition;

const KEY_VERSION: u16 = 0;
const VALUE_VERSION: u8 = 0;

/// The fixed part of a value before the partitions.
const FIXED: usize = 1 + 8 + 2 + 8 + 2 + 4 + 1 + 8 + 8 + 4;

/// Why bytes are not a `__transactions` record.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LogRecordError {
    #[error("transaction log key of {0} bytes")]
    KeyLength(usize),
    #[error("transaction log key version {0} (0 is read)")]
    KeyVersion(u16),
    #[error("transaction log value version {0} (0 is read)")]
    ValueVersion(u8),
    #[error("transactional id is not UTF-8")]
    IdUtf8,
    #[error("transaction log value truncated at byte {0}")]
    Truncated(usize),
    #[error("transaction log value CRC mismatch")]
    Crc,
    #[error("transaction state code {0}")]
    State(u8),
    #[error("topic name is not UTF-8")]
    TopicUtf8,
    #[error("{0} bytes after the transaction log value")]
    Trailing(usize),
}

/// One record: a transactional id's new metadata, or its removal (`None`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnLogRecord {
    pub transactional_id: String,
    pub metadata: Option<TxnMetadata>,
}

impl TxnLogRecord {
    pub fn key(&self) -> Vec<u8> {
        let mut k = KEY_VERSION.to_le_bytes().to_vec();
        k.extend_from_slice(self.transactional_id.as_bytes());
        k
    }

    /// The value; `None` for a tombstone.
    pub fn value(&self) -> Option<Vec<u8>> {
        self.metadata.as_ref().map(encode_value)
    }

    /// Reads a record. `value` is `None` for a tombstone.
    pub fn decode(key: &[u8], value: Option<&[u8]>) -> Result<TxnLogRecord, LogRecordError> {
        let Some(version) = key.get(..2) else {
            return Err(LogRecordError::KeyLength(key.len()));
        };
        let version = u16::from_le_bytes([version[0], version[1]]);
        if version != KEY_VERSION {
            return Err(LogRecordError::KeyVersion(version));
        }
        let transactional_id = std::str::from_utf8(&key[2..])
            .map_err(|_| LogRecordError::IdUtf8)?
            .to_string();
        let metadata = value.map(decode_value).transpose()?;
        Ok(TxnLogRecord {
            transactional_id,
            metadata,
        })
    }
}

fn encode_value(m: &TxnMetadata) -> Vec<u8> {
    let mut v = Vec::with_capacity(FIXED + 4 + m.partitions.len() * 16);
    v.push(VALUE_VERSION);
    v.extend_from_slice(&m.producer_id.to_le_bytes());
    v.extend_from_slice(&m.producer_epoch.to_le_bytes());
    v.extend_from_slice(&m.last_producer_id.to_le_bytes());
    v.extend_from_slice(&m.last_producer_epoch.to_le_bytes());
    v.extend_from_slice(&m.timeout_ms.to_le_bytes());
    v.push(m.state.code());
    v.extend_from_slice(&m.txn_start_ms.to_le_bytes());
    v.extend_from_slice(&m.last_update_ms.to_le_bytes());
    let count = u32::try_from(m.partitions.len()).expect("partitions are bounded");
    v.extend_from_slice(&count.to_le_bytes());
    for tp in &m.partitions {
        let len = u16::try_from(tp.topic.len()).expect("topic names are at most 249 bytes");
        v.extend_from_slice(&len.to_le_bytes());
        v.extend_from_slice(tp.topic.as_bytes());
        v.extend_from_slice(&tp.partition.to_le_bytes());
    }
    let crc = crc32c::crc32c(&v);
    v.extend_from_slice(&crc.to_le_bytes());
    v
}

/// Reads little-endian fields off a byte slice, every read bounds-checked.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], LogRecordError> {
        let end = self
            .at
            .checked_add(n)
            .filter(|&e| e <= self.bytes.len())
            .ok_or(LogRecordError::Truncated(self.at))?;
        let s = &self.bytes[self.at..end];
        self.at = end;
        Ok(s)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], LogRecordError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }
}

fn decode_value(v: &[u8]) -> Result<TxnMetadata, LogRecordError> {
    let Some(&version) = v.first() else {
        return Err(LogRecordError::Truncated(0));
    };
    if version != VALUE_VERSION {
        return Err(LogRecordError::ValueVersion(version));
    }
    if v.len() < FIXED + 4 {
        return Err(LogRecordError::Truncated(v.len()));
    }
    let (body, crc) = v.split_at(v.len() - 4);
    if crc32c::crc32c(body).to_le_bytes() != crc {
        return Err(LogRecordError::Crc);
    }
    let mut r = Reader { bytes: body, at: 1 };
    let producer_id = i64::from_le_bytes(r.array()?);
    let producer_epoch = i16::from_le_bytes(r.array()?);
    let last_producer_id = i64::from_le_bytes(r.array()?);
    let last_producer_epoch = i16::from_le_bytes(r.array()?);
    let timeout_ms = u32::from_le_bytes(r.array()?);
    let [code] = r.array()?;
    let state = TxnState::from_code(code).ok_or(LogRecordError::State(code))?;
    let txn_start_ms = u64::from_le_bytes(r.array()?);
    let last_update_ms = u64::from_le_bytes(r.array()?);
    let count = u32::from_le_bytes(r.array()?);
    let mut partitions = BTreeSet::new();
    // No allocation sized by the count: each partition is read (and bounds-checked) in turn.
    for _ in 0..count {
        let len = u16::from_le_bytes(r.array()?);
        let topic = std::str::from_utf8(r.take(usize::from(len))?)
            .map_err(|_| LogRecordError::TopicUtf8)?
            .to_string();
        let partition = u32::from_le_bytes(r.array()?);
        partitions.insert(TopicPartition { topic, partition });
    }
    if r.at != body.len() {
        return Err(LogRecordError::Trailing(body.len() - r.at));
    }
    Ok(TxnMetadata {
        producer_id,
        producer_epoch,
        last_producer_id,
        last_producer_epoch,
        timeout_ms,
        state,
        partitions,
        txn_start_ms,
        last_update_ms,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record() -> TxnLogRecord {
        let mut m = TxnMetadata::new(4242, 60_000, 1_700_000_000_000);
        m.producer_epoch = 7;
        m.last_producer_id = 4000;
        m.last_producer_epoch = 6;
        m.state = TxnState::PrepareCommit;
        m.txn_start_ms = 1_700_000_000_001;
        m.partitions.insert(TopicPartition::new("orders", 3));
        m.partitions
            .insert(TopicPartition::new("__consumer_offsets", 12));
        TxnLogRecord {
            transactional_id: "payments-ü".to_string(),
            metadata: Some(m),
        }
    }

    #[test]
    fn records_and_tombstones_round_trip() {
        let r = record();
        let (k, v) = (r.key(), r.value());
        assert_eq!(TxnLogRecord::decode(&k, v.as_deref()), Ok(r.clone()));
        let tomb = TxnLogRecord {
            transactional_id: r.transactional_id.clone(),
            metadata: None,
        };
        assert_eq!(tomb.value(), None);
        assert_eq!(TxnLogRecord::decode(&tomb.key(), None), Ok(tomb));
    }

    #[test]
    fn every_truncation_and_any_flipped_byte_is_refused() {
        let r = record();
        let (k, v) = (r.key(), r.value().unwrap());
        for len in 0..v.len() {
            assert!(
                TxnLogRecord::decode(&k, Some(&v[..len])).is_err(),
                "a value cut at {len} bytes was read"
            );
        }
        for i in 0..v.len() {
            let mut bad = v.clone();
            bad[i] ^= 0x5a;
            assert!(
                TxnLogRecord::decode(&k, Some(&bad)).is_err(),
                "a value with byte {i} flipped was read"
            );
        }
        let mut long = v.clone();
        long.push(0);
        assert!(TxnLogRecord::decode(&k, Some(&long)).is_err());
        assert_eq!(
            TxnLogRecord::decode(&[0], Some(&v)),
            Err(LogRecordError::KeyLength(1))
        );
        assert_eq!(
            TxnLogRecord::decode(&[1, 0, b'a'], Some(&v)),
            Err(LogRecordError::KeyVersion(1))
        );
        assert_eq!(
            TxnLogRecord::decode(&[0, 0, 0xff], Some(&v)),
            Err(LogRecordError::IdUtf8)
        );
    }

    #[test]
    fn garbage_with_a_valid_crc_is_refused_without_a_panic() {
        // A huge partition count, a bad state code, trailing bytes: each behind a good CRC.
        let with_crc = |mut body: Vec<u8>| {
            let crc = crc32c::crc32c(&body);
            body.extend_from_slice(&crc.to_le_bytes());
            body
        };
        let good = record().value().unwrap();
        let body = &good[..good.len() - 4];
        let mut huge = body[..FIXED - 4].to_vec();
        huge.extend_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(
            decode_value(&with_crc(huge)),
            Err(LogRecordError::Truncated(_))
        ));
        let mut state = body.to_vec();
        state[1 + 8 + 2 + 8 + 2 + 4] = 99;
        assert_eq!(
            decode_value(&with_crc(state)),
            Err(LogRecordError::State(99))
        );
        let mut trailing = body.to_vec();
        trailing.push(1);
        assert_eq!(
            decode_value(&with_crc(trailing)),
            Err(LogRecordError::Trailing(1))
        );
        let mut seed = 0x1234_5678u64;
        for len in 0..200 {
            let bytes: Vec<u8> = (0..len)
                .map(|_| {
                    seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
                    (seed >> 56) as u8
                })
                .collect();
            let _ = decode_value(&bytes);
            let _ = decode_value(&with_crc(bytes));
        }
    }
}
