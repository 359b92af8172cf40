//! Record conversion at the Kafka edge: Kafka RecordBatch v2 <-> rill batches.
//!
//! Kept per record: offset, timestamp, key, value and headers, so a message reads the same
//! through either protocol. Not kept: a null value (a Kafka tombstone) reads back as an empty
//! value, a null header value as an empty one; producer ids and sequences (no idempotence yet).

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::records::RecordBatchDecoder;
use rkyv::util::AlignedVec;

use crate::batch::{aligned16, BatchBuilder, BatchError, BatchIter, BatchView};
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

/// The partition leader epoch written into served batches. rill has no leader epochs yet
/// (no replication); Metadata answers the same 0, so clients that validate epochs agree.
const PARTITION_LEADER_EPOCH: i32 = 0;
/// RecordBatch v2 magic.
const KAFKA_MAGIC: i8 = 2;
/// Bytes of a RecordBatch v2 before its records: base offset (8), batch length (4), leader
/// epoch (4), magic (1), CRC (4), attributes (2), last offset delta (4), first and max
/// timestamps (8 + 8), producer id (8), epoch (2), base sequence (4), record count (4).
const BATCH_HEADER_LEN: usize = 61;
/// Where the bytes the CRC covers start (the attributes).
const CRC_FROM: usize = 21;

/// Appends rill batches (as read from a partition: whole batches, the last one possibly cut
/// short by the read limit) to `out` as uncompressed Kafka RecordBatch v2, one Kafka batch per
/// rill batch, with the stored batch's base offset, timestamps and producer fields. Batches
/// that end before `fetch_offset` are skipped: Kafka never answers with a batch wholly below
/// the fetch offset, and clients (aiokafka) trust that and would deliver its records again.
/// A batch holding `fetch_offset` is served whole, as Kafka does; clients drop its records
/// below their position. Returns the offset after the last record converted.
///
/// The records are written straight into `out`, read in place from the rill batch: no
/// per-record allocation. (kafka-protocol's encoder takes owned `Record`s, splits a batch
/// wherever offset - sequence changes, which with no sequences is every record, and keeps
/// headers in a map.)
pub fn to_kafka_batches(
    rill: &[u8],
    fetch_offset: u64,
    out: &mut BytesMut,
) -> Result<Option<u64>, ConvertError> {
    let aligned = aligned16(rill);
    let mut next = None;
    out.reserve(rill.len());
    for batch in BatchIter::new(&aligned) {
        let batch = match batch {
            Ok(b) => b,
            // A read limit may cut the last batch: the client asks again from there.
            Err(BatchError::Truncated { .. }) => break,
            Err(e) => return Err(e.into()),
        };
        if batch.header().next_offset() <= fetch_offset {
            continue;
        }
        encode_batch(&batch, out)?;
        next = Some(batch.header().next_offset());
    }
    Ok(next)
}

/// Writes one rill batch as one RecordBatch v2.
fn encode_batch(batch: &BatchView<'_>, out: &mut BytesMut) -> Result<(), ConvertError> {
    let h = batch.header();
    let count = i32::try_from(h.record_count)
        .map_err(|_| ConvertError::Kafka(format!("{} records in one batch", h.record_count)))?;
    let start = out.len();
    out.put_i64(h.base_offset as i64);
    out.put_i32(0); // batch length, filled in below
    out.put_i32(PARTITION_LEADER_EPOCH);
    out.put_i8(KAFKA_MAGIC);
    out.put_u32(0); // CRC, filled in below
                    // Attributes: no compression, create time, neither transactional nor control.
    out.put_i16(0);
    out.put_i32(count - 1);
    out.put_i64(h.first_timestamp_ms);
    out.put_i64(h.max_timestamp_ms);
    out.put_i64(h.producer_id);
    out.put_i16(h.producer_epoch);
    out.put_i32(h.base_sequence);
    out.put_i32(count);
    debug_assert_eq!(out.len() - start, BATCH_HEADER_LEN);
    for (delta, r) in batch.records()?.enumerate() {
        let timestamp_delta = r.timestamp_ms - h.first_timestamp_ms;
        let offset_delta = delta as i64;
        let key = r.key();
        let value = Some(r.value());
        let header_count = r.record.headers.len() as i64;
        let len = 1
            + varint_len(timestamp_delta)
            + varint_len(offset_delta)
            + nullable_len(key)
            + nullable_len(value)
            + varint_len(header_count)
            + r.headers()
                .map(|(k, v)| varint_len(k.len() as i64) + k.len() + nullable_len(Some(v)))
                .sum::<usize>();
        put_varint(out, len as i64);
        out.put_i8(0); // record attributes: unused
        put_varint(out, timestamp_delta);
        put_varint(out, offset_delta);
        put_nullable(out, key);
        put_nullable(out, value);
        put_varint(out, header_count);
        for (k, v) in r.headers() {
            put_varint(out, k.len() as i64);
            out.put_slice(k.as_bytes());
            put_nullable(out, Some(v));
        }
    }
    let batch_len = out.len() - start - 12;
    let batch_len = i32::try_from(batch_len)
        .map_err(|_| ConvertError::Kafka(format!("batch of {batch_len} bytes")))?;
    out[start + 8..start + 12].copy_from_slice(&batch_len.to_be_bytes());
    let crc = crc32c::crc32c(&out[start + CRC_FROM..]);
    out[start + 17..start + 21].copy_from_slice(&crc.to_be_bytes());
    Ok(())
}

/// Kafka's varint/varlong: zigzag, then 7 bits a byte, low first.
fn put_varint(out: &mut BytesMut, v: i64) {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    while z >= 0x80 {
        out.put_u8((z as u8) | 0x80);
        z >>= 7;
    }
    out.put_u8(z as u8);
}

fn varint_len(v: i64) -> usize {
    let z = ((v << 1) ^ (v >> 63)) as u64;
    (64 - z.max(1).leading_zeros() as usize).div_ceil(7)
}

/// Bytes a nullable byte string takes: its varint length (-1 for null), then the bytes.
fn nullable_len<B: AsRef<[u8]>>(b: Option<B>) -> usize {
    match b {
        Some(b) => varint_len(b.as_ref().len() as i64) + b.as_ref().len(),
        None => varint_len(-1),
    }
}

fn put_nullable<B: AsRef<[u8]>>(out: &mut BytesMut, b: Option<B>) {
    match b {
        Some(b) => {
            put_varint(out, b.as_ref().len() as i64);
            out.put_slice(b.as_ref());
        }
        None => put_varint(out, -1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::indexmap::IndexMap;
    use kafka_protocol::protocol::StrBytes;
    use kafka_protocol::records::{
        Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
    };

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
            assert_eq!(to_kafka_batches(&stored, 0, &mut out).unwrap(), Some(150));
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

    /// `count` records stored at `base` as one rill batch.
    fn stored(base: u64, count: usize) -> Vec<u8> {
        let mut b = BatchBuilder::new();
        for i in 0..count {
            b.push(1_000 + i as i64, None, format!("v{i}").as_bytes(), &[], &[]);
        }
        let mut bytes = b.build().unwrap().to_vec();
        crate::batch::stamp_batch(&mut bytes, base, 1);
        bytes
    }

    #[test]
    fn one_rill_batch_is_one_kafka_batch_and_batches_below_the_fetch_offset_are_skipped() {
        let mut read = stored(0, 100);
        read.extend_from_slice(&stored(100, 100));
        for (from, bases) in [
            (0u64, vec![0i64, 100]),
            (37, vec![0, 100]),
            (99, vec![0, 100]),
        ]
        .into_iter()
        .chain([
            (100, vec![100]),
            (137, vec![100]),
            (199, vec![100]),
            (200, vec![]),
        ]) {
            let mut out = BytesMut::new();
            let next = to_kafka_batches(&read, from, &mut out).unwrap();
            assert_eq!(next, (!bases.is_empty()).then_some(200), "from {from}");
            let infos = RecordBatchDecoder::decode_batch_info(&mut out.clone().freeze()).unwrap();
            let got: Vec<i64> = infos.iter().map(|i| i.min_offset).collect();
            assert_eq!(got, bases, "from {from}");
            let sets = RecordBatchDecoder::decode_all(&mut out.freeze()).unwrap();
            for (set, base) in sets.iter().zip(&bases) {
                assert_eq!(set.records.len(), 100);
                for (i, r) in set.records.iter().enumerate() {
                    assert_eq!(r.offset, base + i as i64);
                    assert_eq!(r.timestamp, 1_000 + i as i64);
                    assert_eq!(r.value.as_deref(), Some(format!("v{i}").as_bytes()));
                }
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
        assert!(to_kafka_batches(&[7u8; 300], 0, &mut out).is_err());
    }
}
