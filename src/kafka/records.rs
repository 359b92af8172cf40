//! Record conversion at the Kafka edge: Kafka RecordBatch v2 <-> rill batches.
//!
//! Kept per record: offset, timestamp, key, value and headers exactly, so a message reads the
//! same through either protocol: a null value (a tombstone) stays null and an empty one empty,
//! the same for header values, and headers stay a list (order and repeated names kept, as
//! KIP-82 specifies). A produced RecordBatch becomes one rill batch with its producer id, epoch
//! and base sequence (not checked: no idempotence yet); a stored rill batch is served as one
//! RecordBatch.
//!
//! The record level of the format is coded here, not by kafka-protocol: its `Record` keeps
//! headers in a map (duplicates collapse: `a=1, a=2, b=x, a=3` read back as `a=3, b=x`), and
//! its encoder wants owned records and splits a batch wherever offset - sequence changes
//! (every record, with no sequences). kafka-protocol still does what it can: the batch header
//! and CRC check of produced batches (`decode_batch_info`) and decompression (with the bound
//! rill's patch adds); its decoder is the oracle the tests compare against.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::compression::{self as codec, Decompressor};
use kafka_protocol::records::{BatchDecodeInfo, Compression, RecordBatchDecoder};
use rkyv::util::AlignedVec;

use crate::batch::{
    add_flags, aligned16, BatchBuilder, BatchError, BatchIter, BatchView, RecordView, FLAG_CONTROL,
    FLAG_TRANSACTIONAL,
};
use crate::protocol::frame_pool::backed_buffer;
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
    #[error("a control batch (transaction marker) from a client: only the broker writes them")]
    Control,
}

fn bad(why: impl Into<String>) -> ConvertError {
    ConvertError::Kafka(why.into())
}

/// The most records one produced partition may carry (a bound on the decoded size).
pub const MAX_RECORDS: usize = 1 << 20;

/// Decodes the RecordBatches a Kafka producer sent for one partition (decompressing them) into
/// one rill batch. A control batch (a transaction marker) is refused: only the broker writes
/// them. The producer id, epoch and base sequence are kept when the records came as one batch
/// (as Produce v3+ requires), and so is the transactional attribute ([`FLAG_TRANSACTIONAL`]).
pub fn to_rill_batch(records: &Bytes) -> Result<(AlignedVec<16>, u32), ConvertError> {
    let records = records.clone();
    // Decompression is third-party code fed with network bytes: a panic in it must not take
    // the shard down.
    std::panic::catch_unwind(move || decode_batches(records))
        .map_err(|_| bad("undecodable record batch"))?
}

fn decode_batches(mut rest: Bytes) -> Result<(AlignedVec<16>, u32), ConvertError> {
    // Backed at once, as a request frame is (in the broker's frame arena from 256 KiB): the
    // batch is kept in the tail cache, so until that is full each one is fresh memory.
    let estimate = stored_size_estimate(&rest);
    let mut builder = BatchBuilder::with_buffer(backed_buffer(estimate), estimate);
    let mut n = 0usize;
    let mut batches = 0usize;
    let mut producer = None;
    let mut idempotent = false;
    let mut transactional = false;
    while rest.has_remaining() {
        if rest.len() < 12 {
            return Err(bad(format!("{} bytes after the last batch", rest.len())));
        }
        let batch_len = i32::from_be_bytes([rest[8], rest[9], rest[10], rest[11]]);
        let total = usize::try_from(batch_len)
            .ok()
            .and_then(|l| l.checked_add(12))
            .filter(|t| *t <= rest.len() && *t >= BATCH_HEADER_LEN)
            .ok_or_else(|| {
                bad(format!(
                    "batch length {batch_len} with {} bytes",
                    rest.len()
                ))
            })?;
        let batch = rest.split_to(total);
        // Magic, CRC, attributes and the header fields, checked by kafka-protocol.
        let info = RecordBatchDecoder::decode_batch_info(&mut batch.clone())
            .map_err(|e| bad(e.to_string()))?
            .pop()
            .ok_or_else(|| {
                bad(format!(
                    "record batch magic {} (only v2 is read)",
                    batch[16]
                ))
            })?;
        let count = usize::try_from(info.record_count).unwrap_or(0);
        if n + count > MAX_RECORDS {
            return Err(ConvertError::TooMany(n + count, MAX_RECORDS));
        }
        batches += 1;
        if info.control {
            return Err(ConvertError::Control);
        }
        transactional |= info.transactional;
        producer = Some((info.producer_id, info.producer_epoch, info.base_sequence));
        idempotent |= info.producer_id >= 0;
        let mut body = batch.slice(BATCH_HEADER_LEN..);
        // The codecs' closures answer anyhow's `Result`: the records' own error rides inside it.
        let mut parse = |b: &mut Bytes| Ok(decode_records(b, &info, &mut builder));
        match info.compression {
            Compression::None => parse(&mut body),
            Compression::Gzip => codec::Gzip::decompress(&mut body, parse),
            Compression::Snappy => codec::Snappy::decompress(&mut body, parse),
            Compression::Lz4 => codec::Lz4::decompress(&mut body, parse),
            Compression::Zstd => codec::Zstd::decompress(&mut body, parse),
        }
        .map_err(|e| bad(format!("{e:#}")))??;
        n += count;
    }
    if n == 0 {
        return Err(ConvertError::Empty);
    }
    if idempotent && batches > 1 {
        // Their sequences could not be checked as one rill batch (Produce v3+ carries one
        // record batch per partition; Kafka refuses more).
        return Err(bad(format!(
            "{batches} record batches with a producer id for one partition (one is allowed)"
        )));
    }
    if transactional && batches > 1 {
        return Err(bad(format!(
            "{batches} record batches for one partition, transactional (one is allowed)"
        )));
    }
    if let (1, Some((id, epoch, sequence))) = (batches, producer) {
        builder = builder.producer(id, epoch, sequence);
    }
    let mut out = builder.build()?;
    if transactional {
        add_flags(&mut out, FLAG_TRANSACTIONAL);
    }
    Ok((out, n as u32))
}

/// About the size of the rill batch the Kafka batches in `records` become, so the builder's
/// buffer is not moved as it grows (the moves were 8% of the broker's CPU on a Kafka
/// produce): the records' bytes plus one archived record per record the first batch's
/// header counts. The count is not trusted past what the bytes could hold.
fn stored_size_estimate(records: &[u8]) -> usize {
    /// The smallest Kafka record: length, attributes, two deltas, null key and value, no
    /// headers.
    const MIN_RECORD_BYTES: usize = 6;
    let count = records
        .get(57..61)
        .map_or(0, |c| i32::from_be_bytes([c[0], c[1], c[2], c[3]]))
        .max(0) as usize;
    let count = count.min(records.len() / MIN_RECORD_BYTES);
    records.len() + count * (std::mem::size_of::<crate::batch::ArchivedRecord>() + 16) + 256
}

/// Reads a batch's (decompressed) records into `builder`.
fn decode_records(
    buf: &mut Bytes,
    info: &BatchDecodeInfo,
    builder: &mut BatchBuilder,
) -> Result<(), ConvertError> {
    let mut r = Reader(&buf[..]);
    let mut headers: Vec<(&str, Option<&[u8]>)> = Vec::new();
    for _ in 0..info.record_count {
        let len = r.length("record")?.ok_or_else(|| bad("null record"))?;
        let mut rec = Reader(r.take(len)?);
        let _attributes = rec.take(1)?;
        let timestamp_delta = rec.varint()?;
        let _offset_delta = rec.varint()?;
        let key = rec.nullable("key")?;
        let value = rec.nullable("value")?;
        let header_count = rec.length("header count")?.unwrap_or(0);
        // Every header takes at least two bytes: a count larger than that is a lie.
        if header_count > rec.0.len() / 2 {
            return Err(bad(format!(
                "{header_count} headers in {} bytes",
                rec.0.len()
            )));
        }
        headers.clear();
        for _ in 0..header_count {
            let name_len = rec
                .length("header name")?
                .ok_or_else(|| bad("null header name"))?;
            let name = std::str::from_utf8(rec.take(name_len)?)
                .map_err(|_| bad("header name is not UTF-8"))?;
            headers.push((name, rec.nullable("header value")?));
        }
        if !rec.0.is_empty() {
            return Err(bad(format!(
                "{} bytes after a record's headers",
                rec.0.len()
            )));
        }
        let timestamp = info
            .min_timestamp
            .checked_add(timestamp_delta)
            .ok_or_else(|| bad(format!("timestamp delta {timestamp_delta} overflows")))?;
        builder.push_record(timestamp, key, value, headers.iter().copied(), &[]);
    }
    if !r.0.is_empty() {
        return Err(bad(format!(
            "{} bytes after the batch's records",
            r.0.len()
        )));
    }
    Ok(())
}

/// A cursor over a record's bytes: Kafka's zigzag varints and length-prefixed byte strings.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], ConvertError> {
        if n > self.0.len() {
            return Err(bad(format!("{n} bytes needed, {} left", self.0.len())));
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    /// A varlong (at most 10 bytes).
    fn varint(&mut self) -> Result<i64, ConvertError> {
        let mut z = 0u64;
        for i in 0..10 {
            let b = *self.0.first().ok_or_else(|| bad("truncated varint"))?;
            self.0 = &self.0[1..];
            z |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                return Ok((z >> 1) as i64 ^ -((z & 1) as i64));
            }
        }
        Err(bad("varint longer than 10 bytes"))
    }

    /// A length: `None` for -1 (null), refused if below -1 or above what is left.
    fn length(&mut self, what: &str) -> Result<Option<usize>, ConvertError> {
        match self.varint()? {
            -1 => Ok(None),
            n if n < -1 => Err(bad(format!("{what} length {n}"))),
            n => {
                let n = n as u64;
                if n > self.0.len() as u64 {
                    return Err(bad(format!(
                        "{what} length {n} with {} bytes left",
                        self.0.len()
                    )));
                }
                Ok(Some(n as usize))
            }
        }
    }

    fn nullable(&mut self, what: &str) -> Result<Option<&'a [u8]>, ConvertError> {
        self.length(what)?.map(|n| self.take(n)).transpose()
    }
}

/// The rill batch stored for one partition's produced Kafka records, checked against the
/// topic's `max.message.bytes` as stored: the compressed bytes received are checked before
/// (cheap, nothing decompressed yet), but a small compressed batch may decompress far past
/// the limit.
pub fn to_stored_batch(
    records: &Bytes,
    max_message_bytes: usize,
) -> Result<AlignedVec<16>, (ErrorCode, String)> {
    let (batch, _) = to_rill_batch(records).map_err(|e| {
        // Kafka answers a client's control batch with INVALID_RECORD.
        let code = match e {
            ConvertError::Control => ErrorCode::InvalidRecord,
            _ => ErrorCode::CorruptMessage,
        };
        (code, e.to_string())
    })?;
    crate::partition::check_message_bytes(batch.len(), max_message_bytes)?;
    Ok(batch)
}

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
/// rill batch, with the stored batch's base offset, timestamps, producer fields and leader
/// epoch. Batches
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
    for batch in served_batches(&aligned, fetch_offset, Walk::Checked) {
        let batch = batch?;
        encode_batch(&batch, out)?;
        next = Some(batch.header().next_offset());
    }
    Ok(next)
}

/// How [`served_batches`] checks what it walks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Walk {
    /// Header and CRC: bytes nothing checked before.
    Checked,
    /// Header only (its own CRC included): batches whose CRC was checked already (a segment
    /// reader's, or an append's). Records are validated (rkyv) whenever they are read either
    /// way.
    Unchecked,
}

/// The stored batches a fetch from `fetch_offset` serves out of `aligned` (whole batches back
/// to back, 16-byte aligned), in order: those ending before `fetch_offset` are skipped, a
/// batch cut by the read limit ends the walk (the client asks again from there), and a fault
/// is reported once, as the last item.
pub(super) fn served_batches(
    aligned: &[u8],
    fetch_offset: u64,
    walk: Walk,
) -> impl Iterator<Item = Result<BatchView<'_>, ConvertError>> {
    let batches = match walk {
        Walk::Checked => BatchIter::new(aligned),
        Walk::Unchecked => BatchIter::checked_before(aligned),
    };
    // The iterator ends after its first fault.
    batches
        .map_while(|b| match b {
            Err(BatchError::Truncated { .. }) => None,
            other => Some(other),
        })
        .filter(move |b| {
            b.as_ref()
                .map_or(true, |b| b.header().next_offset() > fetch_offset)
        })
        .map(|b| b.map_err(ConvertError::from))
}

/// Bytes [`encode_batch`] writes for `batch`, computed without writing them.
pub(super) fn kafka_batch_len(batch: &BatchView<'_>) -> Result<usize, ConvertError> {
    let first = batch.header().first_timestamp_ms;
    let mut len = BATCH_HEADER_LEN;
    for (delta, r) in batch.records()?.enumerate() {
        let body = record_body_len(&r, r.timestamp_ms - first, delta as i64);
        len += varint_len(body as i64) + body;
    }
    Ok(len)
}

/// Bytes of one record after its length varint: attributes, deltas, key, value, headers.
fn record_body_len(r: &RecordView<'_>, timestamp_delta: i64, offset_delta: i64) -> usize {
    1 + varint_len(timestamp_delta)
        + varint_len(offset_delta)
        + nullable_len(r.key())
        + nullable_len(r.value())
        + varint_len(r.headers().len() as i64)
        + r.headers()
            .map(|(k, v)| varint_len(k.len() as i64) + k.len() + nullable_len(v))
            .sum::<usize>()
}

/// Kafka's RecordBatch attribute bits of a rill batch's flags: transactional (0x10) and
/// control (0x20); no compression, create time.
fn kafka_attributes(flags: u16) -> i16 {
    let mut a = 0;
    if flags & FLAG_TRANSACTIONAL != 0 {
        a |= 0x10;
    }
    if flags & FLAG_CONTROL != 0 {
        a |= 0x20;
    }
    a
}

/// Writes one rill batch as one RecordBatch v2.
pub(super) fn encode_batch(batch: &BatchView<'_>, out: &mut BytesMut) -> Result<(), ConvertError> {
    let h = batch.header();
    let count = i32::try_from(h.record_count)
        .map_err(|_| ConvertError::Kafka(format!("{} records in one batch", h.record_count)))?;
    let start = out.len();
    out.put_i64(h.base_offset as i64);
    out.put_i32(0); // batch length, filled in below
                    // The epoch of the leader that appended it (batch v4 on), -1 for an older batch, as
                    // Kafka serves a batch written before leader epochs.
    out.put_i32(h.leader_epoch);
    out.put_i8(KAFKA_MAGIC);
    out.put_u32(0); // CRC, filled in below
                    // Attributes: no compression, create time; transactional and control as stored.
    out.put_i16(kafka_attributes(h.flags));
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
        let value = r.value();
        let header_count = r.headers().len() as i64;
        let len = record_body_len(&r, timestamp_delta, offset_delta);
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
            put_nullable(out, v);
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

    #[test]
    fn transactional_batches_keep_the_attribute_and_control_batches_are_refused() {
        let encode = |control: bool| {
            let r = Record {
                transactional: true,
                control,
                producer_id: 9,
                producer_epoch: 1,
                sequence: 0,
                ..kafka_record(0, "k", "v", ("h", "x"))
            };
            let mut wire = BytesMut::new();
            RecordBatchEncoder::encode(
                &mut wire,
                &[r],
                &RecordEncodeOptions {
                    version: 2,
                    compression: Compression::None,
                },
            )
            .unwrap();
            wire.freeze()
        };
        let (rill, _) = to_rill_batch(&encode(false)).unwrap();
        let h = crate::batch::BatchHeader::decode(&rill).unwrap();
        assert_eq!(h.flags & FLAG_TRANSACTIONAL, FLAG_TRANSACTIONAL);
        let (code, _) = to_stored_batch(&encode(true), 1 << 20).unwrap_err();
        assert_eq!(code, ErrorCode::InvalidRecord);
        // Served back with Kafka's attribute bits; a stored marker as a control batch whose
        // record is Kafka's marker bytes.
        let mut stored = rill.to_vec();
        crate::batch::stamp_batch(&mut stored, 10, 1);
        let marker = crate::batch::control::ControlRecord {
            kind: crate::batch::control::ControlKind::Abort,
            coordinator_epoch: 3,
        };
        let mut m = marker.batch(9, 1, 5).unwrap().to_vec();
        crate::batch::stamp_batch(&mut m, 11, 1);
        stored.extend_from_slice(&m);
        let mut out = BytesMut::new();
        assert_eq!(to_kafka_batches(&stored, 0, &mut out).unwrap(), Some(12));
        let got = RecordBatchDecoder::decode_all(&mut out.freeze()).unwrap();
        let records: Vec<&Record> = got.iter().flat_map(|s| &s.records).collect();
        assert_eq!(records.len(), 2);
        assert!(records[0].transactional && !records[0].control);
        assert!(records[1].transactional && records[1].control);
        assert_eq!(records[1].key.as_deref(), Some(&[0u8, 0, 0, 0][..]));
        assert_eq!(records[1].value.as_deref(), Some(&[0u8, 0, 0, 0, 0, 3][..]));
    }

    #[test]
    fn one_idempotent_batch_keeps_its_numbers_and_several_are_refused() {
        let encode = |records: &[Record]| {
            let mut wire = BytesMut::new();
            RecordBatchEncoder::encode(
                &mut wire,
                records,
                &RecordEncodeOptions {
                    version: 2,
                    compression: Compression::None,
                },
            )
            .unwrap();
            wire
        };
        let numbered = |offset: i64, seq: i32| Record {
            producer_id: 77,
            producer_epoch: 3,
            sequence: seq,
            ..kafka_record(offset, "k", "v", ("h", "x"))
        };
        let one = encode(&[numbered(0, 40), numbered(1, 41)]).freeze();
        let (rill, n) = to_rill_batch(&one).unwrap();
        assert_eq!(n, 2);
        let h = crate::batch::BatchHeader::decode(&rill).unwrap();
        assert_eq!(
            (h.producer_id, h.producer_epoch, h.base_sequence),
            (77, 3, 40)
        );
        let mut two = encode(&[numbered(0, 40)]);
        two.extend_from_slice(&encode(&[numbered(0, 41)]));
        let e = to_rill_batch(&two.freeze()).unwrap_err();
        assert!(e.to_string().contains("one is allowed"), "{e}");
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
    fn a_served_batch_carries_the_leader_epoch_it_was_stored_with() {
        for (epoch, served) in [(Some(7), 7), (Some(0), 0), (None, -1)] {
            let mut bytes = stored(40, 3);
            if epoch.is_none() {
                // The same batch as version 3 wrote it: no leader epoch in its header.
                bytes[26..28].copy_from_slice(&3u16.to_le_bytes());
                let crc = crate::batch::body_checksum(&bytes);
                bytes[4..8].copy_from_slice(&crc.to_le_bytes());
            }
            crate::batch::stamp_leader(&mut bytes, 40, 1, epoch.unwrap_or(5));
            assert_eq!(
                BatchView::validate(&aligned16(&bytes))
                    .unwrap()
                    .header()
                    .leader_epoch,
                served
            );
            let mut out = BytesMut::new();
            to_kafka_batches(&bytes, 40, &mut out).unwrap();
            let infos = RecordBatchDecoder::decode_batch_info(&mut out.clone().freeze()).unwrap();
            assert_eq!(infos.len(), 1);
            let sets = RecordBatchDecoder::decode_all(&mut out.freeze()).unwrap();
            let epochs: Vec<i32> = sets[0]
                .records
                .iter()
                .map(|r| r.partition_leader_epoch)
                .collect();
            assert_eq!(epochs, vec![served; 3], "stored with {epoch:?}");
        }
    }

    #[test]
    fn random_records_round_trip_through_kafka_both_ways_exactly() {
        use crate::batch::test_support::{build_random, random_records, read_back, Rng};
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        for round in 0..300u64 {
            // Every 50th batch is large enough to be carved from the frame arena in the
            // broker, the others are not.
            let large = round % 50 == 0;
            let n = if large {
                4000 + rng.below(3000) as usize
            } else {
                1 + rng.below(40) as usize
            };
            let records = random_records(&mut rng, n);
            let mut rill = build_random(&records).to_vec();
            let base = 500 + round * 100;
            crate::batch::stamp_batch(&mut rill, base, 1);
            let mut kafka = BytesMut::new();
            assert_eq!(
                to_kafka_batches(&rill, base, &mut kafka).unwrap(),
                Some(base + n as u64)
            );
            let kafka = kafka.freeze();
            assert_eq!(
                stored_size_estimate(&kafka) >= crate::memory::frame_arena::MIN_ARENA_BLOCK,
                large,
                "round {round}"
            );

            // kafka-protocol reads it as one valid batch with the same records (its map of
            // headers keeps the last value of a repeated name at the name's first place).
            let sets = RecordBatchDecoder::decode_all(&mut kafka.clone()).unwrap();
            assert_eq!(sets.len(), 1, "round {round}");
            assert_eq!(sets[0].records.len(), n);
            for (i, (r, want)) in sets[0].records.iter().zip(&records).enumerate() {
                assert_eq!(r.offset, (base + i as u64) as i64);
                assert_eq!(r.timestamp, want.0);
                assert_eq!(r.key.as_deref(), want.1.as_deref());
                assert_eq!(r.value.as_deref(), want.2.as_deref());
                let mut headers = IndexMap::new();
                for (k, v) in &want.3 {
                    headers.insert(StrBytes::from_string(k.clone()), v.clone().map(Bytes::from));
                }
                assert_eq!(r.headers, headers);
            }

            // Produced back: the same records exactly, repeated and null headers included,
            // and served again the same bytes.
            let (again, count) = to_rill_batch(&kafka).unwrap();
            assert_eq!(count as usize, n);
            let mut again = again.to_vec();
            crate::batch::stamp_batch(&mut again, base, 1);
            let aligned = crate::batch::aligned16(&again);
            let view = BatchView::validate(&aligned).unwrap();
            assert_eq!(read_back(&view), records, "round {round}");
            let mut served = BytesMut::new();
            to_kafka_batches(&again, base, &mut served).unwrap();
            assert_eq!(served.freeze(), kafka, "round {round}");
        }
    }

    #[test]
    fn duplicate_and_null_headers_and_a_tombstone_survive_a_produce() {
        let mut b = BatchBuilder::new();
        let headers = [
            ("a", Some(&b"1"[..])),
            ("a", Some(&b"2"[..])),
            ("b", Some(&b"x"[..])),
            ("a", Some(&b"3"[..])),
            ("n", None),
            ("e", Some(&b""[..])),
        ];
        b.push_record(7, Some(b"k"), None, headers, &[]);
        b.push_record(8, Some(b"k"), Some(b""), [], &[]);
        let mut rill = b.build().unwrap().to_vec();
        crate::batch::stamp_batch(&mut rill, 0, 1);
        let mut kafka = BytesMut::new();
        to_kafka_batches(&rill, 0, &mut kafka).unwrap();
        let (stored, _) = to_rill_batch(&kafka.freeze()).unwrap();
        let view = BatchView::validate(&stored).unwrap();
        let recs: Vec<_> = view.records().unwrap().collect();
        assert_eq!(recs[0].headers().collect::<Vec<_>>(), headers);
        assert_eq!(recs[0].value(), None, "a tombstone stays null");
        assert_eq!(
            recs[1].value(),
            Some(&b""[..]),
            "an empty value stays empty"
        );
    }

    #[test]
    fn damaged_records_under_a_right_crc_are_refused_not_panicked() {
        use crate::batch::test_support::{build_random, random_records, Rng};
        let mut rng = Rng(5);
        for _ in 0..2_000 {
            let records = random_records(&mut rng, 5);
            let mut rill = build_random(&records).to_vec();
            crate::batch::stamp_batch(&mut rill, 0, 1);
            let mut kafka = BytesMut::new();
            to_kafka_batches(&rill, 0, &mut kafka).unwrap();
            let at = BATCH_HEADER_LEN + rng.below((kafka.len() - BATCH_HEADER_LEN) as u64) as usize;
            kafka[at] ^= 1 << rng.below(8);
            if rng.below(4) == 0 {
                let cut =
                    BATCH_HEADER_LEN + rng.below((kafka.len() - BATCH_HEADER_LEN) as u64) as usize;
                kafka.truncate(cut);
                let len = (kafka.len() - 12) as i32;
                kafka[8..12].copy_from_slice(&len.to_be_bytes());
            }
            let crc = crc32c::crc32c(&kafka[CRC_FROM..]);
            kafka[17..21].copy_from_slice(&crc.to_be_bytes());
            // No catch_unwind here: a panic fails the test.
            let _ = decode_batches(kafka.freeze());
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
