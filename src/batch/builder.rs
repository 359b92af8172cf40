//! Builds a batch in the wire/disk format from records.
//!
//! Records are copied once, into one byte buffer the builder keeps (keys, values, header
//! names and values, tags) with fixed-size slots pointing into it: no allocation per record
//! once the buffers have grown, and [`BatchBuilder::clear`] keeps them for the next batch.
//! [`BatchBuilder::build`] archives borrowed views of the slots ([`super::record_ref`]) whose
//! archived types are those of [`RecordBody`], so the bytes are the ones archiving owned
//! records writes (tested against that path).

use std::ops::Range;

use super::header::{checksum, BatchHeader, HEADER_LEN, MAGIC, VERSION};
use super::record_ref::{BodyRef, BytesRef, HeaderRef, RecordRef, SliceRef, StrRef};
use super::tag_summary::tag_bits;
use super::{align_up, BatchError};
use rkyv::util::AlignedVec;

/// Where a byte string sits in the builder's data buffer.
type Span = Range<usize>;

/// One record's fixed-size slot.
#[derive(Debug, Clone)]
struct RecordSlot {
    timestamp_delta: i64,
    key: Option<Span>,
    value: Option<Span>,
    /// Its headers in [`BatchBuilder::headers`].
    headers: Range<usize>,
    /// Its tags in [`BatchBuilder::tags`].
    tags: Range<usize>,
}

#[derive(Debug, Clone)]
struct HeaderSlot {
    key: Span,
    value: Option<Span>,
}

/// Accumulates records and encodes them as one batch.
#[derive(Debug, Default)]
pub struct BatchBuilder {
    /// Every byte string of every record, back to back.
    data: Vec<u8>,
    records: Vec<RecordSlot>,
    headers: Vec<HeaderSlot>,
    tags: Vec<Span>,
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

    /// Empties the builder for the next batch, keeping its buffers (and producer identity).
    pub fn clear(&mut self) {
        self.data.clear();
        self.records.clear();
        self.headers.clear();
        self.tags.clear();
        self.first_timestamp_ms = 0;
        self.max_timestamp_ms = 0;
        self.payload_bytes = 0;
        self.tag_bits = 0;
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
        let data_before = self.data.len();
        let key = key.map(|k| self.copy_in(k));
        let value = value.map(|v| self.copy_in(v));
        let headers_start = self.headers.len();
        for (k, v) in headers {
            let key = self.copy_in(k.as_bytes());
            let value = v.map(|v| self.copy_in(v));
            self.headers.push(HeaderSlot { key, value });
        }
        let tags_start = self.tags.len();
        for t in tags {
            self.tag_bits |= tag_bits(t);
            let span = self.copy_in(t.as_bytes());
            self.tags.push(span);
        }
        self.payload_bytes += self.data.len() - data_before;
        self.records.push(RecordSlot {
            timestamp_delta: timestamp_ms - self.first_timestamp_ms,
            key,
            value,
            headers: headers_start..self.headers.len(),
            tags: tags_start..self.tags.len(),
        });
    }

    fn copy_in(&mut self, bytes: &[u8]) -> Span {
        let start = self.data.len();
        self.data.extend_from_slice(bytes);
        start..self.data.len()
    }

    /// A header name or tag back from the data buffer. It was pushed as a `str`, so this
    /// cannot fail unless the builder itself is broken.
    fn str_at(&self, span: &Span) -> Result<&str, BatchError> {
        std::str::from_utf8(&self.data[span.clone()])
            .map_err(|e| BatchError::Encode(format!("builder string slot: {e}")))
    }

    fn bytes_at(&self, span: &Option<Span>) -> Option<&[u8]> {
        span.as_ref().map(|s| &self.data[s.clone()])
    }

    /// Encodes the batch: header with CRC, archived body, zero padding to 16 bytes. The body
    /// is archived straight after a reserved header in one 16-aligned buffer (rkyv's pointers
    /// are relative, so the archive is valid at that offset). The borrowed views cost three
    /// allocations per batch, none per record.
    pub fn build(&self) -> Result<AlignedVec<16>, BatchError> {
        let headers = self
            .headers
            .iter()
            .map(|h| {
                Ok(HeaderRef {
                    key: StrRef(self.str_at(&h.key)?),
                    value: self.bytes_at(&h.value).map(BytesRef),
                })
            })
            .collect::<Result<Vec<_>, BatchError>>()?;
        let tags = self
            .tags
            .iter()
            .map(|t| Ok(StrRef(self.str_at(t)?)))
            .collect::<Result<Vec<_>, BatchError>>()?;
        let records: Vec<RecordRef<'_>> = self
            .records
            .iter()
            .map(|r| RecordRef {
                timestamp_delta: r.timestamp_delta,
                key: self.bytes_at(&r.key).map(BytesRef),
                value: self.bytes_at(&r.value).map(BytesRef),
                headers: SliceRef(&headers[r.headers.clone()]),
                tags: SliceRef(&tags[r.tags.clone()]),
            })
            .collect();
        let body = BodyRef {
            records: SliceRef(&records),
        };
        encode(
            &body,
            records.len(),
            VERSION,
            self.payload_bytes,
            self.stamp(self.tag_bits),
        )
    }

    fn stamp(&self, tag_bits: u32) -> Stamp {
        Stamp {
            first_timestamp_ms: self.first_timestamp_ms,
            max_timestamp_ms: self.max_timestamp_ms,
            producer_id: self.producer_id,
            producer_epoch: self.producer_epoch,
            base_sequence: self.base_sequence,
            tag_bits,
        }
    }

    /// Encodes the batch in format version 2, as builds before version 3 wrote it (nulls read
    /// back as empty): for tests that old data still reads.
    #[cfg(test)]
    pub(crate) fn build_v2(&self) -> Result<AlignedVec<16>, BatchError> {
        use super::record::v2;
        let owned = |s: &Option<Span>| self.bytes_at(s).map(<[u8]>::to_vec);
        let records = self
            .records
            .iter()
            .map(|r| {
                Ok(v2::Record {
                    timestamp_delta: r.timestamp_delta,
                    key: owned(&r.key),
                    value: owned(&r.value).unwrap_or_default(),
                    headers: self.headers[r.headers.clone()]
                        .iter()
                        .map(|h| {
                            Ok(v2::Header {
                                key: self.str_at(&h.key)?.to_string(),
                                value: owned(&h.value).unwrap_or_default(),
                            })
                        })
                        .collect::<Result<_, BatchError>>()?,
                    tags: self.tags[r.tags.clone()]
                        .iter()
                        .map(|t| Ok(self.str_at(t)?.to_string()))
                        .collect::<Result<_, BatchError>>()?,
                })
            })
            .collect::<Result<Vec<_>, BatchError>>()?;
        let body = v2::RecordBody { records };
        encode(
            &body,
            body.records.len(),
            2,
            self.payload_bytes,
            self.stamp(0),
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

#[cfg(test)]
mod tests {
    use super::super::record::{Header, Record, RecordBody};
    use super::super::test_support::Rng;
    use super::super::BatchView;
    use super::*;

    /// One random record: timestamp, key, value, headers, tags.
    type Rec = (
        i64,
        Option<Vec<u8>>,
        Option<Vec<u8>>,
        Vec<(String, Option<Vec<u8>>)>,
        Vec<String>,
    );

    /// Null, empty, short (around rkyv's 8-byte inline string limit), medium, or up to 64 KiB.
    fn bytes(rng: &mut Rng) -> Option<Vec<u8>> {
        let len = match rng.below(8) {
            0 => return None,
            1 => 0,
            2 => rng.below(64 * 1024 + 1),
            3 | 4 => rng.below(10),
            _ => rng.below(300),
        };
        Some((0..len).map(|_| rng.next() as u8).collect())
    }

    fn random_recs(rng: &mut Rng, n: usize) -> Vec<Rec> {
        // Names short (inline in the archive) and long (out of line), repeated often.
        const NAMES: [&str; 5] = ["a", "", "ü", "trace-id-of-the-request", "b"];
        const TAGS: [&str; 4] = ["eu", "", "payments-settlement", "t"];
        (0..n)
            .map(|_| {
                let headers = (0..rng.below(6))
                    .map(|_| (NAMES[rng.below(5) as usize].to_string(), bytes(rng)))
                    .collect();
                let tags = (0..rng.below(4))
                    .map(|_| TAGS[rng.below(4) as usize].to_string())
                    .collect();
                let ts = 1_700_000_000_000 + rng.below(5_000) as i64 - 2_500;
                (ts, bytes(rng), bytes(rng), headers, tags)
            })
            .collect()
    }

    fn push_all(b: &mut BatchBuilder, recs: &[Rec]) {
        for (ts, key, value, headers, tags) in recs {
            b.push_record(
                *ts,
                key.as_deref(),
                value.as_deref(),
                headers.iter().map(|(k, v)| (k.as_str(), v.as_deref())),
                tags,
            );
        }
    }

    /// The encoding before the builder wrote records into one buffer: each record copied into
    /// owned `Vec`s and `String`s and archived with the derive on [`RecordBody`]. The oracle.
    fn owned_encoding(recs: &[Rec], producer: (i64, i16, i32)) -> AlignedVec<16> {
        let first = recs[0].0;
        let body = RecordBody {
            records: recs
                .iter()
                .map(|(ts, key, value, headers, tags)| Record {
                    timestamp_delta: ts - first,
                    key: key.clone(),
                    value: value.clone(),
                    headers: headers
                        .iter()
                        .map(|(k, v)| Header {
                            key: k.clone(),
                            value: v.clone(),
                        })
                        .collect(),
                    tags: tags.clone(),
                })
                .collect(),
        };
        let stamp = Stamp {
            first_timestamp_ms: first,
            max_timestamp_ms: recs.iter().map(|r| r.0).max().unwrap_or(first),
            producer_id: producer.0,
            producer_epoch: producer.1,
            base_sequence: producer.2,
            tag_bits: recs
                .iter()
                .flat_map(|r| &r.4)
                .fold(0, |b, t| b | tag_bits(t)),
        };
        encode(&body, recs.len(), VERSION, 0, stamp).unwrap()
    }

    #[test]
    fn same_bytes_as_owned_records_over_random_batches_with_one_reused_builder() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let producer = (77, 3, 1_000);
        let mut reused = BatchBuilder::new().producer(producer.0, producer.1, producer.2);
        for round in 0..200 {
            let n = 1 + rng.below(if round % 10 == 0 { 400 } else { 20 }) as usize;
            let recs = random_recs(&mut rng, n);
            let want = owned_encoding(&recs, producer);
            reused.clear();
            push_all(&mut reused, &recs);
            assert_eq!(reused.len(), n);
            let got = reused.build().unwrap();
            assert_eq!(
                got.as_slice(),
                want.as_slice(),
                "round {round}, {n} records"
            );
            // A fresh builder writes the same bytes as the reused one.
            let mut fresh = BatchBuilder::new().producer(producer.0, producer.1, producer.2);
            push_all(&mut fresh, &recs);
            assert_eq!(fresh.build().unwrap().as_slice(), want.as_slice());
        }
    }

    #[test]
    fn random_records_round_trip_through_the_view() {
        let mut rng = Rng(0x2545_f491_4f6c_dd1d);
        let mut b = BatchBuilder::new();
        for round in 0..150u64 {
            let n = 1 + rng.below(40) as usize;
            let recs = random_recs(&mut rng, n);
            b.clear();
            push_all(&mut b, &recs);
            let mut bytes = b.build().unwrap();
            super::super::header::stamp(&mut bytes, 10 * round, 9);
            let view = BatchView::validate(&bytes).unwrap();
            assert_eq!(view.header().record_count as usize, recs.len());
            let back: Vec<Rec> = view
                .records()
                .unwrap()
                .map(|r| {
                    (
                        r.timestamp_ms,
                        r.key().map(<[u8]>::to_vec),
                        r.value().map(<[u8]>::to_vec),
                        r.headers()
                            .map(|(k, v)| (k.to_string(), v.map(<[u8]>::to_vec)))
                            .collect(),
                        r.tags().map(str::to_string).collect(),
                    )
                })
                .collect();
            assert_eq!(back, recs, "round {round}");
            let summary = view.header().tag_summary().unwrap();
            for tag in recs.iter().flat_map(|r| &r.4) {
                assert_eq!(summary & tag_bits(tag), tag_bits(tag));
            }
        }
    }

    #[test]
    fn clear_keeps_the_producer_identity_and_forgets_the_records() {
        let mut b = BatchBuilder::new().producer(5, 1, 40);
        b.push(10, None, b"x", &[], &["t".to_string()]);
        b.clear();
        assert!(b.is_empty());
        assert!(matches!(b.build(), Err(BatchError::Empty)));
        b.push(20, Some(b"k"), b"v", &[], &[]);
        let bytes = b.build().unwrap();
        let h = BatchView::validate(&bytes).unwrap().header().to_owned();
        assert_eq!((h.producer_id, h.base_sequence, h.record_count), (5, 40, 1));
        assert_eq!((h.first_timestamp_ms, h.tag_bits), (20, 0));
    }
}
