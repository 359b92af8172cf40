//! Record conversion at the Kafka edge: Kafka RecordBatch v2 <-> rill batches.
//!
//! Kept per record: offset, timestamp, key, value and headers, so a message reads the same
//! through either protocol. Not kept: a null value (a Kafka tombstone) reads back as an empty
//! value, a null header value as an empty one; producer ids and sequences (no idempotence yet).

use bytes::{Bytes, BytesMut};
use kafka_protocol::indexmap::IndexMap;
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::{
    Compression, Record, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};
use rkyv::util::AlignedVec;

use crate::batch::{aligned16, BatchBuilder, BatchError, BatchIter};
use crate::protocol::ErrorCode;

/// Why produced Kafka records were refused.
#[derive(Debug, thiserror::Error)]
pub enum ConvertError {
    #[error("bad record batch: {0}")]
    Kafka(String),
    #[error("no records")]
    Empty,
    #[error("{0} records exceed the limit of {1} per produce")]
    TooMany(usize, usize),
    #[error(transparent)]
    Batch(#[from] BatchError),
}

/// The most records one produced partition may carry (a bound on the decoded size).
pub const MAX_RECORDS: usize = 1 << 20;

/// Decodes the RecordBatches a Kafka producer sent for one partition (decompressing them) into
/// one rill batch. Control records (transaction markers) are dropped.
pub fn to_rill_batch(records: &Bytes) -> Result<(AlignedVec<16>, u32), ConvertError> {
    let mut buf = records.clone();
    // The decoder is third-party code fed with network bytes: a panic in it must not take the
    // shard down.
    let sets = std::panic::catch_unwind(move || RecordBatchDecoder::decode_all(&mut buf))
        .map_err(|_| ConvertError::Kafka("undecodable record batch".into()))?
        .map_err(|e| ConvertError::Kafka(e.to_string()))?;
    let count: usize = sets.iter().map(|s| s.records.len()).sum();
    if count > MAX_RECORDS {
        return Err(ConvertError::TooMany(count, MAX_RECORDS));
    }
    let mut builder = BatchBuilder::new();
    let mut n = 0u32;
    for r in sets.iter().flat_map(|s| &s.records).filter(|r| !r.control) {
        let headers: Vec<(String, Vec<u8>)> = r
            .headers
            .iter()
            .map(|(k, v)| {
                (
                    k.to_string(),
                    v.as_ref().map(|b| b.to_vec()).unwrap_or_default(),
                )
            })
            .collect();
        builder.push(
            r.timestamp,
            r.key.as_deref(),
            r.value.as_deref().unwrap_or_default(),
            &headers,
            &[],
        );
        n += 1;
    }
    if n == 0 {
        return Err(ConvertError::Empty);
    }
    Ok((builder.build()?, n))
}

/// The rill batch stored for one partition's produced Kafka records, checked against the
/// topic's `max.message.bytes` as stored: the compressed bytes received are checked before
/// (cheap, nothing decompressed yet), but a small compressed batch may decompress far past
/// the limit.
pub fn to_stored_batch(
    records: &Bytes,
    max_message_bytes: usize,
) -> Result<AlignedVec<16>, (ErrorCode, String)> {
    let (batch, _) =
        to_rill_batch(records).map_err(|e| (ErrorCode::CorruptMessage, e.to_string()))?;
    crate::partition::check_message_bytes(batch.len(), max_message_bytes)?;
    Ok(batch)
}

/// Appends rill batches (as read from a partition: whole batches, the last one possibly cut
/// short by the read limit) to `out` as uncompressed Kafka RecordBatch v2, one Kafka batch per
/// rill batch. Returns the offset after the last record converted.
pub fn to_kafka_batches(rill: &[u8], out: &mut BytesMut) -> Result<Option<u64>, ConvertError> {
    let aligned = aligned16(rill);
    let mut next = None;
    let options = RecordEncodeOptions {
        version: 2,
        compression: Compression::None,
    };
    for batch in BatchIter::new(&aligned) {
        let batch = match batch {
            Ok(b) => b,
            // A read limit may cut the last batch: the client asks again from there.
            Err(BatchError::Truncated { .. }) => break,
            Err(e) => return Err(e.into()),
        };
        let records: Vec<Record> = batch
            .records()?
            .map(|r| Record {
                transactional: false,
                control: false,
                delete_horizon: false,
                partition_leader_epoch: 0,
                producer_id: -1,
                producer_epoch: -1,
                timestamp_type: TimestampType::Creation,
                offset: r.offset as i64,
                sequence: -1,
                timestamp: r.timestamp_ms,
                key: r.key().map(Bytes::copy_from_slice),
                value: Some(Bytes::copy_from_slice(r.value())),
                headers: r
                    .headers()
                    .map(|(k, v)| {
                        (
                            StrBytes::from_string(k.to_string()),
                            Some(Bytes::copy_from_slice(v)),
                        )
                    })
                    .collect::<IndexMap<_, _>>(),
            })
            .collect();
        if let Some(last) = records.last() {
            next = Some(last.offset as u64 + 1);
        }
        RecordBatchEncoder::encode(out, &records, &options)
            .map_err(|e| ConvertError::Kafka(e.to_string()))?;
    }
    Ok(next)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kafka_record(offset: i64, key: &str, value: &str, header: (&str, &str)) -> Record {
        let mut headers = IndexMap::new();
        headers.insert(
            StrBytes::from_string(header.0.to_string()),
            Some(Bytes::copy_from_slice(header.1.as_bytes())),
        );
        Record {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: 0,
            producer_id: -1,
            producer_epoch: -1,
            timestamp_type: TimestampType::Creation,
            offset,
            sequence: -1,
            timestamp: 1_700_000_000_000 + offset,
            key: Some(Bytes::copy_from_slice(key.as_bytes())),
            value: Some(Bytes::copy_from_slice(value.as_bytes())),
            headers,
        }
    }

    #[test]
    fn every_compression_round_trips_through_a_rill_batch() {
        for compression in [
            Compression::None,
            Compression::Gzip,
            Compression::Snappy,
            Compression::Lz4,
            Compression::Zstd,
        ] {
            let sent: Vec<Record> = (0..50)
                .map(|i| kafka_record(i, &format!("k{i}"), &format!("value {i}"), ("h", "x")))
                .collect();
            let mut wire = BytesMut::new();
            RecordBatchEncoder::encode(
                &mut wire,
                &sent,
                &RecordEncodeOptions {
                    version: 2,
                    compression,
                },
            )
            .unwrap();
            let (rill, n) = to_rill_batch(&wire.freeze()).unwrap();
            assert_eq!(n, 50, "{compression:?}");
            // As stored: stamp base offset 100, then serve it back as Kafka records.
            let mut stored = rill.to_vec();
            crate::batch::stamp_batch(&mut stored, 100, 1);
            let mut out = BytesMut::new();
            assert_eq!(to_kafka_batches(&stored, &mut out).unwrap(), Some(150));
            let got = RecordBatchDecoder::decode_all(&mut out.freeze()).unwrap();
            let got: Vec<&Record> = got.iter().flat_map(|s| &s.records).collect();
            assert_eq!(got.len(), 50);
            for (i, r) in got.iter().enumerate() {
                assert_eq!(r.offset, 100 + i as i64);
                assert_eq!(r.timestamp, sent[i].timestamp);
                assert_eq!(r.key, sent[i].key);
                assert_eq!(r.value, sent[i].value);
                assert_eq!(r.headers, sent[i].headers);
            }
        }
    }

    #[test]
    fn max_message_bytes_applies_to_the_batch_as_stored() {
        let max = 64 << 10;
        let encode = |count: i64, value_len: usize| {
            let value = "a".repeat(value_len);
            let records: Vec<Record> = (0..count)
                .map(|i| kafka_record(i, "k", &value, ("h", "x")))
                .collect();
            let mut wire = BytesMut::new();
            let options = RecordEncodeOptions {
                version: 2,
                compression: Compression::Gzip,
            };
            RecordBatchEncoder::encode(&mut wire, &records, &options).unwrap();
            wire.freeze()
        };
        let wire = encode(16, 16 << 10); // 256 KiB of values
        assert!(wire.len() < max / 8, "compressed to {} bytes", wire.len());
        crate::partition::check_message_bytes(wire.len(), max).unwrap();
        let (code, why) = to_stored_batch(&wire, max).unwrap_err();
        assert_eq!(code, ErrorCode::MessageTooLarge, "{why}");
        assert!(why.contains("max.message.bytes"), "{why}");
        // Within the limit once decompressed: stored.
        assert!(to_stored_batch(&encode(2, 1 << 10), max).unwrap().len() < max);
    }

    #[test]
    fn decompression_bombs_are_refused() {
        // Process-wide; the other tests here stay far below it.
        kafka_protocol::compression::set_max_decompressed_bytes(1 << 20);
        for compression in [
            Compression::Gzip,
            Compression::Snappy,
            Compression::Lz4,
            Compression::Zstd,
        ] {
            let mut r = kafka_record(0, "k", "", ("h", "x"));
            r.value = Some(Bytes::from(vec![0u8; 2 << 20]));
            let mut wire = BytesMut::new();
            RecordBatchEncoder::encode(
                &mut wire,
                [&r],
                &RecordEncodeOptions {
                    version: 2,
                    compression,
                },
            )
            .unwrap();
            assert!(wire.len() < 1 << 20, "{compression:?} compresses zeros");
            let err = to_rill_batch(&wire.freeze()).unwrap_err().to_string();
            assert!(err.contains("more than"), "{compression:?}: {err}");
        }
    }

    #[test]
    fn garbage_is_refused() {
        for bytes in [
            Bytes::from_static(b""),
            Bytes::from_static(b"\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x10garbage"),
            Bytes::from(vec![0xffu8; 200]),
        ] {
            assert!(to_rill_batch(&bytes).is_err());
        }
        let mut out = BytesMut::new();
        assert!(to_kafka_batches(&[7u8; 300], &mut out).is_err());
    }
}
