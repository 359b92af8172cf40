//! Builds a batch in the wire/disk format from records.

use super::header::{checksum, BatchHeader, HEADER_LEN, MAGIC, VERSION};
use super::record::{Header, Record, RecordBody};
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

    /// Adds one record with an absolute timestamp in ms.
    pub fn push(
        &mut self,
        timestamp_ms: i64,
        key: Option<&[u8]>,
        value: &[u8],
        headers: &[(String, Vec<u8>)],
        tags: &[String],
    ) {
        if self.records.is_empty() {
            self.first_timestamp_ms = timestamp_ms;
            self.max_timestamp_ms = timestamp_ms;
        }
        self.max_timestamp_ms = self.max_timestamp_ms.max(timestamp_ms);
        self.payload_bytes += key.map_or(0, <[u8]>::len)
            + value.len()
            + headers
                .iter()
                .map(|(k, v)| k.len() + v.len())
                .sum::<usize>()
            + tags.iter().map(String::len).sum::<usize>();
        self.records.push(Record {
            timestamp_delta: timestamp_ms - self.first_timestamp_ms,
            key: key.map(<[u8]>::to_vec),
            value: value.to_vec(),
            headers: headers
                .iter()
                .map(|(k, v)| Header {
                    key: k.clone(),
                    value: v.clone(),
                })
                .collect(),
            tags: tags.to_vec(),
        });
    }

    /// Encodes the batch: header with CRC, archived body, zero padding to 16 bytes. The body
    /// is archived straight after a reserved header in one 16-aligned buffer (rkyv's pointers
    /// are relative, so the archive is valid at that offset): no copy of the records.
    pub fn build(self) -> Result<AlignedVec<16>, BatchError> {
        if self.records.is_empty() {
            return Err(BatchError::Empty);
        }
        let body = RecordBody {
            records: self.records,
        };
        let mut out = AlignedVec::<16>::with_capacity(
            HEADER_LEN + self.payload_bytes + body.records.len() * 64,
        );
        out.resize(HEADER_LEN, 0);
        let mut out = rkyv::api::high::to_bytes_in::<_, rkyv::rancor::Error>(&body, out)
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
            version: VERSION,
            flags: 0,
            record_count: body.records.len() as u32,
            body_len: body_len as u32,
            first_timestamp_ms: self.first_timestamp_ms,
            max_timestamp_ms: self.max_timestamp_ms,
            producer_id: self.producer_id,
            producer_epoch: self.producer_epoch,
            base_sequence: self.base_sequence,
            header_crc: 0,
        };
        header.encode(&mut out);
        header.crc = checksum(&out);
        header.encode(&mut out);
        // Unstamped (offset 0, time 0) but self-consistent: any reader may check it.
        super::header::stamp(&mut out, 0, 0);
        Ok(out)
    }
}
