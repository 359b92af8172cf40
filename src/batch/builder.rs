//! Builds a batch in the wire/disk format from records.

use super::header::{checksum, BatchHeader, HEADER_LEN, MAGIC, VERSION};
use super::record::{Header, Record, RecordBody};
use super::tag_summary::tag_bits;
use super::{align_up, BatchError};
use rkyv::util::AlignedVec;

/// Accumulates records and encodes them as one batch.
#[derive(Debug, Default)]
pub struct BatchBuilder {
    records: Vec<Record>,
    first_timestamp_ms: i64,
    max_timestamp_ms: i64,
    /// Bytes of key/value/header/tag data added so far: the batch-bytes dial compares to it.
    payload_bytes: usize,
    producer_id: i64,
    producer_epoch: i16,
    base_sequence: i32,
    /// The tag summary of the records pushed ([`super::tag_summary`]).
    tag_bits: u32,
}

impl BatchBuilder {
    pub fn new() -> Self {
        BatchBuilder {
            producer_id: -1,
            producer_epoch: -1,
            base_sequence: -1,
            ..Default::default()
        }
    }

    /// Sets the idempotent-producer identity carried in the header.
    pub fn producer(mut self, id: i64, epoch: i16, base_sequence: i32) -> Self {
        self.producer_id = id;
        self.producer_epoch = epoch;
        self.base_sequence = base_sequence;
        self
    }

    pub fn len(&self) -> usize {
        self.records.len()
    }

    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// An estimate of the encoded size, for batch-size limits.
    pub fn estimated_bytes(&self) -> usize {
        HEADER_LEN + self.payload_bytes + self.records.len() * 48
    }

    /// Adds one record with an absolute timestamp in ms, its value and headers non-null.
    pub fn push(
        &mut self,
        timestamp_ms: i64,
        key: Option<&[u8]>,
        value: &[u8],
        headers: &[(String, Vec<u8>)],
        tags: &[String],
    ) {
        self.push_record(
            timestamp_ms,
            key,
            Some(value),
            headers
                .iter()
                .map(|(k, v)| (k.as_str(), Some(v.as_slice()))),
            tags,
        );
    }

    /// Adds one record with an absolute timestamp in ms. `value` `None` is a null value (a
    /// Kafka tombstone), a header value `None` a null header value; headers keep their order
    /// and repeated names.
    pub fn push_record<'h>(
        &mut self,
        timestamp_ms: i64,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: impl IntoIterator<Item = (&'h str, Option<&'h [u8]>)>,
        tags: &[String],
    ) {
        if self.records.is_empty() {
            self.first_timestamp_ms = timestamp_ms;
            self.max_timestamp_ms = timestamp_ms;
        }
        self.max_timestamp_ms = self.max_timestamp_ms.max(timestamp_ms);
        self.tag_bits |= tags.iter().fold(0, |b, t| b | tag_bits(t));
        let headers: Vec<Header> = headers
            .into_iter()
            .map(|(k, v)| Header {
                key: k.to_string(),
                value: v.map(<[u8]>::to_vec),
            })
            .collect();
        self.payload_bytes += key.map_or(0, <[u8]>::len)
            + value.map_or(0, <[u8]>::len)
            + headers
                .iter()
                .map(|h| h.key.len() + h.value.as_ref().map_or(0, Vec::len))
                .sum::<usize>()
            + tags.iter().map(String::len).sum::<usize>();
        self.records.push(Record {
            timestamp_delta: timestamp_ms - self.first_timestamp_ms,
            key: key.map(<[u8]>::to_vec),
            value: value.map(<[u8]>::to_vec),
            headers,
            tags: tags.to_vec(),
        });
    }

    /// Encodes the batch: header with CRC, archived body, zero padding to 16 bytes. The body
    /// is archived straight after a reserved header in one 16-aligned buffer (rkyv's pointers
    /// are relative, so the archive is valid at that offset): no copy of the records.
    pub fn build(self) -> Result<AlignedVec<16>, BatchError> {
        let body = RecordBody {
            records: self.records,
        };
        encode(
            &body,
            body.records.len(),
            VERSION,
            self.payload_bytes,
            Stamp {
                first_timestamp_ms: self.first_timestamp_ms,
                max_timestamp_ms: self.max_timestamp_ms,
                producer_id: self.producer_id,
                producer_epoch: self.producer_epoch,
                base_sequence: self.base_sequence,
                tag_bits: self.tag_bits,
            },
        )
    }

    /// Encodes the batch in format version 2, as builds before version 3 wrote it (nulls read
    /// back as empty): for tests that old data still reads.
    #[cfg(test)]
    pub(crate) fn build_v2(self) -> Result<AlignedVec<16>, BatchError> {
        use super::record::v2;
        let body = v2::RecordBody {
            records: self
                .records
                .into_iter()
                .map(|r| v2::Record {
                    timestamp_delta: r.timestamp_delta,
                    key: r.key,
                    value: r.value.unwrap_or_default(),
                    headers: r
                        .headers
                        .into_iter()
                        .map(|h| v2::Header {
                            key: h.key,
                            value: h.value.unwrap_or_default(),
                        })
                        .collect(),
                    tags: r.tags,
                })
                .collect(),
        };
        encode(
            &body,
            body.records.len(),
            2,
            self.payload_bytes,
            Stamp {
                first_timestamp_ms: self.first_timestamp_ms,
                max_timestamp_ms: self.max_timestamp_ms,
                producer_id: self.producer_id,
                producer_epoch: self.producer_epoch,
                base_sequence: self.base_sequence,
                tag_bits: 0,
            },
        )
    }
}

/// The header fields a builder decides.
struct Stamp {
    first_timestamp_ms: i64,
    max_timestamp_ms: i64,
    producer_id: i64,
    producer_epoch: i16,
    base_sequence: i32,
    tag_bits: u32,
}

fn encode<B>(
    body: &B,
    record_count: usize,
    version: u16,
    payload_bytes: usize,
    stamp: Stamp,
) -> Result<AlignedVec<16>, BatchError>
where
    B: for<'a> rkyv::Serialize<
        rkyv::api::high::HighSerializer<
            AlignedVec<16>,
            rkyv::ser::allocator::ArenaHandle<'a>,
            rkyv::rancor::Error,
        >,
    >,
{
    if record_count == 0 {
        return Err(BatchError::Empty);
    }
    let mut out = AlignedVec::<16>::with_capacity(HEADER_LEN + payload_bytes + record_count * 64);
    out.resize(HEADER_LEN, 0);
    let mut out = rkyv::api::high::to_bytes_in::<_, rkyv::rancor::Error>(body, out)
        .map_err(|e| BatchError::Encode(e.to_string()))?;
    let body_len = out.len() - HEADER_LEN;
    let length = align_up(out.len());
    let length32 = u32::try_from(length).map_err(|_| BatchError::TooLarge(length))?;
    out.resize(length, 0);
    let mut header = BatchHeader {
        length: length32,
        crc: 0,
        base_offset: 0,
        append_time_ms: 0,
        magic: MAGIC,
        version,
        flags: 0,
        record_count: record_count as u32,
        body_len: body_len as u32,
        first_timestamp_ms: stamp.first_timestamp_ms,
        max_timestamp_ms: stamp.max_timestamp_ms,
        producer_id: stamp.producer_id,
        producer_epoch: stamp.producer_epoch,
        base_sequence: stamp.base_sequence,
        leader_epoch: 0,
        header_crc: 0,
        tag_bits: stamp.tag_bits,
    };
    header.encode(&mut out);
    header.crc = checksum(&out);
    header.encode(&mut out);
    // Unstamped (offset 0, time 0) but self-consistent: any reader may check it.
    super::header::stamp(&mut out, 0, 0);
    Ok(out)
}
