//! Builds a batch in the wire/disk format from records.
//!
//! Each byte string of a record (key, value, header names and values, tags) is copied once,
//! when the record is pushed: straight into the batch's output buffer, after its reserved
//! header, where archiving the records with rkyv would put it, followed by the record's header
//! and tag arrays ([`super::record_ref`]). [`BatchBuilder::build`] then writes only the record
//! array and the archive root, pointing at what is already there, and the batch header. The
//! bytes are the ones archiving owned [`super::RecordBody`] writes (tested against that path).
//! Besides the output buffer (one per batch, handed over by `build`), the builder keeps
//! fixed-size slots per record that [`BatchBuilder::clear`] keeps for the next batch: no
//! allocation per record once they have grown.

use std::fmt;

use rkyv::rancor::Strategy;
use rkyv::ser::{Positional, Writer, WriterExt};
use rkyv::string::{ArchivedString, StringResolver};
use rkyv::util::AlignedVec;
use rkyv::vec::VecResolver;

use super::header::{checksum, BatchHeader, HEADER_LEN, MAGIC, VERSION};
use super::record::{ArchivedHeader, ArchivedRecord, ArchivedRecordBody};
use super::record_ref::{BytesRef, HeaderRef, StrRef, Written, WrittenBody, WrittenRecord};
use super::tag_summary::tag_bits;
use super::{align_up, BatchError};

/// A header's resolvers between its data and its array entry, with its key and value lengths.
type HeaderResolver = (StringResolver, Option<VecResolver>, (usize, Option<usize>));

/// The serializer records are written with: the output buffer itself (rkyv's positions are
/// offsets in it, so the archive is valid after the reserved header).
type Out = Strategy<AlignedVec<16>, rkyv::rancor::Error>;

/// Accumulates records and encodes them as one batch.
#[derive(Default)]
pub struct BatchBuilder {
    /// The batch so far: the reserved header, then every pushed record's data and arrays.
    /// Empty until the first record.
    out: AlignedVec<16>,
    /// Each record's struct, written by `build` (the record array comes after all the data).
    records: Vec<WrittenRecord>,
    /// One record's header and tag resolvers between writing their data and their array
    /// (rkyv writes a slice's elements' data first, then the array); kept for reuse.
    /// With each header's key and value lengths, to check the second walk yields the same.
    header_resolvers: Vec<HeaderResolver>,
    tag_resolvers: Vec<StringResolver>,
    first_timestamp_ms: i64,
    max_timestamp_ms: i64,
    /// Bytes of key/value/header/tag data added so far: the batch-bytes dial compares to it.
    payload_bytes: usize,
    producer_id: i64,
    producer_epoch: i16,
    base_sequence: i32,
    /// The tag summary of the records pushed ([`super::tag_summary`]).
    tag_bits: u32,
    /// Bytes to reserve for a new output buffer, so that it is not copied as it grows: the
    /// caller's hint ([`BatchBuilder::with_capacity`]) or the largest batch built so far.
    reserve: usize,
    /// Why a record could not be written (a string over rkyv's 1 GiB limit), for `build`.
    failed: Option<String>,
}

impl fmt::Debug for BatchBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BatchBuilder")
            .field("records", &self.records.len())
            .field("bytes", &self.out.len())
            .field("producer_id", &self.producer_id)
            .field("base_sequence", &self.base_sequence)
            .finish_non_exhaustive()
    }
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

    /// A builder whose batch buffer starts with room for `bytes` (a batch size dial), so a
    /// batch up to that size is written without the buffer being moved as it grows.
    pub fn with_capacity(bytes: usize) -> Self {
        BatchBuilder {
            reserve: bytes,
            ..BatchBuilder::new()
        }
    }

    /// A builder that writes its batch into `buffer` (emptied first; a buffer kept from an
    /// earlier batch, whose pages are already in memory), reserving `bytes` as
    /// [`BatchBuilder::with_capacity`] does.
    pub fn with_buffer(mut buffer: AlignedVec<16>, bytes: usize) -> Self {
        buffer.clear();
        BatchBuilder {
            out: buffer,
            ..BatchBuilder::with_capacity(bytes)
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
        self.out.clear();
        self.records.clear();
        self.first_timestamp_ms = 0;
        self.max_timestamp_ms = 0;
        self.payload_bytes = 0;
        self.tag_bits = 0;
        self.failed = None;
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
    /// and repeated names. The headers are walked twice (data, then array, as rkyv's
    /// `serialize_from_iter` does), hence the `Clone` iterator.
    pub fn push_record<'h, I>(
        &mut self,
        timestamp_ms: i64,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: I,
        tags: &[String],
    ) where
        I: IntoIterator<Item = (&'h str, Option<&'h [u8]>)>,
        I::IntoIter: Clone,
    {
        if self.records.is_empty() {
            self.first_timestamp_ms = timestamp_ms;
            self.max_timestamp_ms = timestamp_ms;
        }
        self.max_timestamp_ms = self.max_timestamp_ms.max(timestamp_ms);
        if self.out.is_empty() {
            self.out.reserve(self.reserve.max(HEADER_LEN));
            self.out.resize(HEADER_LEN, 0);
        }
        let timestamp_delta = timestamp_ms - self.first_timestamp_ms;
        let before = self.out.len();
        let record = match self.write_record(timestamp_delta, key, value, headers.into_iter(), tags)
        {
            Ok(record) => record,
            Err(e) => {
                self.failed.get_or_insert_with(|| e.to_string());
                // Counted all the same, so `len` is the number of records pushed.
                WrittenRecord {
                    timestamp_delta,
                    key: None,
                    value: None,
                    headers: Written::new(0, 0),
                    tags: Written::new(0, 0),
                }
            }
        };
        self.records.push(record);
        self.prefetch_for_write(self.out.len() - before);
    }

    /// Fetches the cache lines the next `bytes` of output will take, ahead of the next
    /// record: a batch buffer is cold (last read by a connection's writer thread, on another
    /// core), and the stores of a record's copy otherwise wait for their lines at the next
    /// locked instruction, the producer's mutex release (RESULTS.md, 2026-12-06). A read
    /// prefetch (`prefetcht0`): baseline x86-64 has no write prefetch to ask for.
    fn prefetch_for_write(&self, bytes: usize) {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
            let start = self.out.as_ptr() as usize + self.out.len();
            let end = (self.out.as_ptr() as usize + self.out.capacity()).min(start + bytes);
            let mut line = start & !63;
            while line < end {
                // SAFETY: a prefetch is a hint: it never faults nor changes memory, and the
                // line is inside the buffer's allocation anyway.
                unsafe { _mm_prefetch::<_MM_HINT_T0>(line as *const i8) };
                line += 64;
            }
        }
    }

    /// Writes one record's data and arrays at the end of the output, as archiving a
    /// [`super::Record`] does (fields in declaration order, as its derive serializes them),
    /// and returns its struct for `build`.
    fn write_record<'h>(
        &mut self,
        timestamp_delta: i64,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: impl Iterator<Item = (&'h str, Option<&'h [u8]>)> + Clone,
        tags: &[String],
    ) -> Result<WrittenRecord, rkyv::rancor::Error> {
        let out = Out::wrap(&mut self.out);
        let mut payload = 0;
        let key = key.map(|k| write_bytes(out, k, &mut payload)).transpose()?;
        let value = value
            .map(|v| write_bytes(out, v, &mut payload))
            .transpose()?;

        self.header_resolvers.clear();
        for (k, v) in headers.clone() {
            payload += k.len();
            let lens = (k.len(), v.map(<[u8]>::len));
            let k = ArchivedString::serialize_from_str(k, out)?;
            let v = v
                .map(|v| write_bytes(out, v, &mut payload))
                .transpose()?
                .map(|w| VecResolver::from_pos(w.pos));
            self.header_resolvers.push((k, v, lens));
        }
        let headers_at = out.align_for::<ArchivedHeader>()?;
        let header_count = self.header_resolvers.len();
        let mut second = headers;
        for (k_resolver, v_resolver, lens) in self.header_resolvers.drain(..) {
            // A `Clone` iterator that yields other headers the second time would pair a
            // header with another's resolver: refused, not archived wrong.
            let (k, v) = second
                .next()
                .filter(|(k, v)| (k.len(), v.map(<[u8]>::len)) == lens)
                .ok_or_else(changed_headers)?;
            let resolver = (k_resolver, v_resolver);
            let header = HeaderRef {
                key: StrRef(k),
                value: v.map(BytesRef),
            };
            // SAFETY: the resolver is the one serializing this header gave (the same items,
            // from a clone of the iterator), and the output is aligned for the array: aligned
            // above, and each archived header's size is a multiple of its alignment.
            unsafe { out.resolve_aligned(&header, resolver)? };
        }
        if second.next().is_some() {
            return Err(changed_headers());
        }

        self.tag_resolvers.clear();
        for t in tags {
            payload += t.len();
            self.tag_bits |= tag_bits(t);
            self.tag_resolvers
                .push(ArchivedString::serialize_from_str(t, out)?);
        }
        let tags_at = out.align_for::<ArchivedString>()?;
        for (t, resolver) in tags.iter().zip(self.tag_resolvers.drain(..)) {
            // SAFETY: as for the headers: this tag's resolver, output aligned for the array.
            unsafe { out.resolve_aligned(&StrRef(t), resolver)? };
        }

        self.payload_bytes += payload;
        Ok(WrittenRecord {
            timestamp_delta,
            key,
            value,
            headers: Written::new(headers_at, header_count),
            tags: Written::new(tags_at, tags.len()),
        })
    }

    /// Encodes the batch: the record array and root after the records' data, then the header
    /// with CRC and zero padding to 16 bytes. Hands the batch's buffer over and leaves the
    /// builder empty, as [`BatchBuilder::clear`] does (producer identity kept).
    pub fn build(&mut self) -> Result<AlignedVec<16>, BatchError> {
        if self.records.is_empty() {
            return Err(BatchError::Empty);
        }
        if let Some(e) = self.failed.take() {
            self.clear();
            return Err(BatchError::Encode(e));
        }
        let mut out = std::mem::take(&mut self.out);
        let written = write_root(Out::wrap(&mut out), &self.records);
        let record_count = self.records.len();
        let stamp = self.stamp(self.tag_bits);
        self.reserve = self.reserve.max(out.len());
        self.clear();
        written.map_err(|e| BatchError::Encode(e.to_string()))?;
        finish(out, record_count, VERSION, stamp)
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
    /// back as empty): for tests that old data still reads. Empties the builder as `build`.
    #[cfg(test)]
    pub(crate) fn build_v2(&mut self) -> Result<AlignedVec<16>, BatchError> {
        use super::record::v2;
        let v3 = self.build()?;
        let view = super::BatchView::validate(&v3)?;
        let h = view.header();
        let records = view
            .records()?
            .map(|r| v2::Record {
                timestamp_delta: r.timestamp_ms - h.first_timestamp_ms,
                key: r.key().map(<[u8]>::to_vec),
                value: r.value().map(<[u8]>::to_vec).unwrap_or_default(),
                headers: r
                    .headers()
                    .map(|(k, v)| v2::Header {
                        key: k.to_string(),
                        value: v.map(<[u8]>::to_vec).unwrap_or_default(),
                    })
                    .collect(),
                tags: r.tags().map(str::to_string).collect(),
            })
            .collect::<Vec<_>>();
        let stamp = Stamp {
            first_timestamp_ms: h.first_timestamp_ms,
            max_timestamp_ms: h.max_timestamp_ms,
            producer_id: h.producer_id,
            producer_epoch: h.producer_epoch,
            base_sequence: h.base_sequence,
            tag_bits: 0,
        };
        let n = records.len();
        encode(&v2::RecordBody { records }, n, 2, stamp)
    }
}

/// Writes `bytes` at the end of the output as rkyv writes a `[u8]` (copy-optimized: no
/// alignment, the bytes as they are), adding their length to `payload`.
fn write_bytes(
    out: &mut Out,
    bytes: &[u8],
    payload: &mut usize,
) -> Result<Written<u8>, rkyv::rancor::Error> {
    let pos = out.pos();
    out.write(bytes)?;
    *payload += bytes.len();
    Ok(Written::new(pos, bytes.len()))
}

/// Writes the record array and the archive root after the records' data, as archiving a
/// The headers iterator yielded other headers on its second walk.
fn changed_headers() -> rkyv::rancor::Error {
    <rkyv::rancor::Error as rkyv::rancor::Source>::new(BatchError::Encode(
        "the headers changed between two walks of a cloned iterator".into(),
    ))
}

/// [`super::RecordBody`] ends (its `Vec<Record>`'s array, then the root struct, each aligned).
fn write_root(out: &mut Out, records: &[WrittenRecord]) -> Result<(), rkyv::rancor::Error> {
    let at = out.align_for::<ArchivedRecord>()?;
    for r in records {
        // SAFETY: a written record needs no resolver; the output is aligned for the array
        // (aligned above; an archived record's size is a multiple of its alignment).
        unsafe { out.resolve_aligned(r, ())? };
    }
    let body = WrittenBody {
        records: Written::new(at, records.len()),
    };
    out.align_for::<ArchivedRecordBody>()?;
    // SAFETY: no resolver needed; aligned for the root just above.
    unsafe { out.resolve_aligned(&body, ())? };
    Ok(())
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

/// Archives owned records after a reserved header and finishes the batch: how batches were
/// built before the one-copy builder, kept for the tests (the oracle, and version 2 bodies).
#[cfg(test)]
fn encode<B>(
    body: &B,
    record_count: usize,
    version: u16,
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
    let mut out = AlignedVec::<16>::new();
    out.resize(HEADER_LEN, 0);
    let out = rkyv::api::high::to_bytes_in::<_, rkyv::rancor::Error>(body, out)
        .map_err(|e| BatchError::Encode(e.to_string()))?;
    finish(out, record_count, version, stamp)
}

/// Pads the archive in `out` (after [`HEADER_LEN`] reserved bytes) to 16 bytes and fills in
/// the header and both CRCs.
fn finish(
    mut out: AlignedVec<16>,
    record_count: usize,
    version: u16,
    stamp: Stamp,
) -> Result<AlignedVec<16>, BatchError> {
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

    /// Null, empty, short (around rkyv's 8-byte inline string limit), medium, up to 64 KiB,
    /// or (one in `1 << 12` draws when `large`) up to 1 MiB.
    fn bytes(rng: &mut Rng, large: bool) -> Option<Vec<u8>> {
        let len = match rng.below(8) {
            0 => return None,
            1 => 0,
            2 if large && rng.below(1 << 9) == 0 => rng.below((1 << 20) + 1),
            2 => rng.below(64 * 1024 + 1),
            3 | 4 => rng.below(10),
            _ => rng.below(300),
        };
        Some((0..len).map(|_| rng.next() as u8).collect())
    }

    /// How many headers and tags a record may have, and whether values may be 1 MiB.
    struct Shape {
        max_headers: u64,
        max_tags: u64,
        large: bool,
    }

    const SMALL: Shape = Shape {
        max_headers: 6,
        max_tags: 4,
        large: false,
    };

    fn random_recs(rng: &mut Rng, n: usize) -> Vec<Rec> {
        random_shaped(rng, n, &SMALL)
    }

    fn random_shaped(rng: &mut Rng, n: usize, shape: &Shape) -> Vec<Rec> {
        // Names short (inline in the archive) and long (out of line), repeated often.
        const NAMES: [&str; 5] = ["a", "", "ü", "trace-id-of-the-request", "b"];
        const TAGS: [&str; 4] = ["eu", "", "payments-settlement", "t"];
        (0..n)
            .map(|_| {
                let headers = (0..rng.below(shape.max_headers))
                    .map(|_| {
                        let name = NAMES[rng.below(5) as usize].to_string();
                        (name, bytes(rng, shape.large))
                    })
                    .collect();
                let tags = (0..rng.below(shape.max_tags))
                    .map(|_| TAGS[rng.below(4) as usize].to_string())
                    .collect();
                let ts = 1_700_000_000_000 + rng.below(5_000) as i64 - 2_500;
                (
                    ts,
                    bytes(rng, shape.large),
                    bytes(rng, shape.large),
                    headers,
                    tags,
                )
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
        encode(&body, recs.len(), VERSION, stamp).unwrap()
    }

    #[test]
    fn same_bytes_as_owned_records_over_random_batches_with_one_reused_builder() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let producer = (77, 3, 1_000);
        let mut reused = BatchBuilder::new().producer(producer.0, producer.1, producer.2);
        // The last batch's bytes, handed to the next builder as a producer's pool does.
        let mut spare = AlignedVec::<16>::new();
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
            // So does one given a used buffer, whatever it held.
            let mut given =
                BatchBuilder::with_buffer(spare, 64).producer(producer.0, producer.1, producer.2);
            push_all(&mut given, &recs);
            spare = given.build().unwrap();
            assert_eq!(spare.as_slice(), want.as_slice());
        }
    }

    /// What a batch reads back as, in the shape it was pushed in.
    fn read_back(bytes: &[u8]) -> Vec<Rec> {
        let view = BatchView::validate(bytes).unwrap();
        view.records()
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
            .collect()
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
            assert_eq!(read_back(&bytes), recs, "round {round}");
            let summary = view.header().tag_summary().unwrap();
            for tag in recs.iter().flat_map(|r| &r.4) {
                assert_eq!(summary & tag_bits(tag), tag_bits(tag));
            }
        }
    }

    /// The property the one-copy builder rests on, over batches of every shape: 1 to 2,000
    /// records, keys and values null, empty, small, up to 64 KiB and now and then 1 MiB, up to
    /// 40 headers (null values, repeated names) and 12 tags a record. The bytes are those of
    /// archiving owned records, they read back as pushed, and a builder reused across batches
    /// (one that handed its buffer over, one cleared without building) writes the same.
    #[test]
    fn any_records_encode_as_owned_records_and_read_back() {
        let mut rng = Rng(0x0c0f_fee0_0f0c_0b1e);
        let producer = (9, 2, 77);
        let mut built = BatchBuilder::new().producer(producer.0, producer.1, producer.2);
        let mut cleared =
            BatchBuilder::with_capacity(4096).producer(producer.0, producer.1, producer.2);
        for case in 0..48 {
            let n = match case % 4 {
                0 => 1,
                1 => 1 + rng.below(2_000) as usize,
                _ => 1 + rng.below(100) as usize,
            };
            let shape = Shape {
                max_headers: if case % 3 == 0 { 40 } else { 4 },
                max_tags: if case % 5 == 0 { 12 } else { 3 },
                large: case % 8 == 1,
            };
            let recs = random_shaped(&mut rng, n, &shape);
            let want = owned_encoding(&recs, producer);
            push_all(&mut built, &recs);
            // The size estimate counts every byte string pushed, inline or not.
            let payload: usize = recs
                .iter()
                .map(|(_, k, v, h, t)| {
                    let len = |b: &Option<Vec<u8>>| b.as_ref().map_or(0, Vec::len);
                    len(k)
                        + len(v)
                        + h.iter().map(|(k, v)| k.len() + len(v)).sum::<usize>()
                        + t.iter().map(String::len).sum::<usize>()
                })
                .sum();
            assert_eq!(built.estimated_bytes(), HEADER_LEN + payload + n * 48);
            let got = built.build().unwrap();
            assert!(built.is_empty(), "build leaves the builder empty");
            assert_eq!(got.as_slice(), want.as_slice(), "case {case}, {n} records");
            assert_eq!(read_back(&got), recs, "case {case}");
            // Half a batch pushed, then dropped with clear: no trace in the next one.
            push_all(&mut cleared, &recs[..n / 2]);
            cleared.clear();
            push_all(&mut cleared, &recs);
            assert_eq!(cleared.build().unwrap().as_slice(), want.as_slice());
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

    /// A cloned headers iterator that yields other headers on its second walk would pair a
    /// header with another's resolver: the batch is refused instead.
    #[test]
    fn headers_that_change_between_walks_are_refused() {
        let calls = std::rc::Rc::new(std::cell::Cell::new(0usize));
        let names = ["a", "bb", "ccc"];
        let headers = {
            let calls = calls.clone();
            std::iter::from_fn(move || {
                let i = calls.get();
                calls.set(i + 1);
                names.get(i).map(|k| (*k, None))
            })
        };
        let mut b = BatchBuilder::new();
        b.push_record(1, None, Some(b"v"), headers, &[]);
        assert!(b.build().is_err());
        // The same headers from a well-behaved iterator build.
        let mut b = BatchBuilder::new();
        b.push_record(1, None, Some(b"v"), names.iter().map(|k| (*k, None)), &[]);
        assert!(b.build().is_ok());
    }
}
