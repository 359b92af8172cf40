//! A Fetch answer written to the socket batch by batch instead of built whole first.
//!
//! Converting stored batches to Kafka RecordBatches into one buffer per partition, then
//! having kafka-protocol copy that buffer again into the encoded response, made a fetch cost
//! two full-size copies into fresh multi-MiB buffers before its first byte was sent, while
//! librdkafka (one fetch in flight per connection) waited. Here the read chunks are kept as
//! read; their Kafka size is computed first (a walk over record metadata; the batches' CRCs
//! were checked when they were read from a file or appended), the response's framing is
//! encoded by kafka-protocol with the records left out and spliced around them, and the
//! writer converts the batches into one bounded
//! buffer, sending it whenever it holds [`FLUSH_BYTES`], so conversion overlaps the send and
//! the bytes go out while still in cache.

use bytes::{BufMut, Bytes, BytesMut};
use futures_lite::{AsyncWrite, AsyncWriteExt};
use kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
use kafka_protocol::messages::{ApiKey, FetchResponse, ResponseHeader, TopicName};
use kafka_protocol::protocol::Encodable;

use super::records::{encode_batch, kafka_batch_len, served_batches, ConvertError, Walk};
use crate::batch::aligned16;
use crate::log::partition_log::ReadChunk;
use crate::protocol::ErrorCode;

/// The writer sends its buffer once it holds this much; the buffer never holds more than
/// this plus one converted batch.
pub const FLUSH_BYTES: usize = 256 << 10;

/// The records read for one asked partition, converted when written.
pub struct PartitionRecords {
    pub topic: TopicName,
    pub topic_id: uuid::Uuid,
    pub partition: i32,
    /// The fetch offset: batches ending before it are not served.
    pub from: u64,
    pub chunks: Vec<ReadChunk>,
}

/// Records sized for the answer: how many batches of each chunk are served and their size.
struct Sized {
    records: PartitionRecords,
    /// Batches served from each chunk, in order (fewer than a chunk holds after a fault).
    batches: Vec<usize>,
    len: usize,
    corrupt: bool,
}

impl Sized {
    fn new(records: PartitionRecords) -> Sized {
        let mut s = Sized {
            records,
            batches: Vec::new(),
            len: 0,
            corrupt: false,
        };
        for c in &s.records.chunks {
            let mut n = 0;
            if !s.corrupt {
                let aligned = aligned16(c.as_slice().unwrap_or_default());
                // Every chunk's batches were checked before they got here: a file's by the
                // segment reader (header, CRC), memory's when appended. Checking each CRC again
                // was half the CRC work of a consume through this listener (CRCs were a third
                // of the broker's CPU). Records are still validated as they are read.
                for b in served_batches(&aligned, s.records.from, Walk::Unchecked) {
                    match b.and_then(|b| kafka_batch_len(&b)) {
                        Ok(len) => {
                            s.len += len;
                            n += 1;
                        }
                        Err(e) => {
                            log::error!(
                                "kafka fetch {:?}-{}: {e}",
                                s.records.topic,
                                s.records.partition
                            );
                            s.corrupt = true;
                            break;
                        }
                    }
                }
            }
            s.batches.push(n);
        }
        s
    }
}

/// What a writer sends: framing bytes, or the records of one partition.
enum Piece {
    Framing(Bytes),
    Records(Sized),
}

/// A Fetch answer (size prefix and response header included) ready to be written.
pub struct FetchReply {
    pieces: Vec<Piece>,
}

/// Why an answer could not be encoded.
#[derive(Debug, thiserror::Error)]
pub enum FetchEncodeError {
    #[error("encoding the Fetch v{0} answer: {1}")]
    Encode(i16, String),
    #[error("a Fetch answer of {0} bytes")]
    TooLarge(usize),
    #[error("records converted to {wrote} bytes, {announced} announced")]
    Size { announced: usize, wrote: usize },
    #[error(transparent)]
    Convert(#[from] ConvertError),
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// Records of the partitions asked, sized, for quotas and for [`FetchReply::encode`].
pub struct SizedRecords(Vec<Sized>);

impl SizedRecords {
    /// Sizes `records` (checks each batch's CRC): a partition whose batches are damaged
    /// serves those before the damage and answers CORRUPT_MESSAGE, as before.
    pub fn new(records: Vec<PartitionRecords>) -> SizedRecords {
        SizedRecords(records.into_iter().map(Sized::new).collect())
    }

    /// Bytes of records the answer carries (what a fetch quota counts).
    pub fn len(&self) -> usize {
        self.0.iter().map(|s| s.len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// kafka-protocol encodes `records: None` as this many bytes.
fn null_records_len(version: i16) -> usize {
    if version >= 12 {
        1 // compact: varint 0
    } else {
        4 // i32 -1
    }
}

/// Encodes `value`, or says why not.
fn encoded<T: Encodable>(value: &T, version: i16) -> Result<BytesMut, FetchEncodeError> {
    let mut b = BytesMut::new();
    value
        .encode(&mut b, version)
        .map_err(|e| FetchEncodeError::Encode(version, e.to_string()))?;
    Ok(b)
}

/// Bytes before the last non-tagged field of `cleared` (a struct with no tagged fields and
/// that field empty, taking `empty_len` bytes): where the field is spliced in.
fn prefix_len<T: Encodable>(
    cleared: &T,
    version: i16,
    empty_len: usize,
) -> Result<usize, FetchEncodeError> {
    let flexible_tags = usize::from(version >= 12); // varint 0: no tagged fields
    Ok(encoded(cleared, version)?.len() - empty_len - flexible_tags)
}

/// The length of an array (`Array`, or `CompactArray` from v12).
fn put_array_len(out: &mut BytesMut, version: i16, n: usize) -> Result<(), FetchEncodeError> {
    let n = i32::try_from(n).map_err(|_| FetchEncodeError::TooLarge(n))?;
    if version >= 12 {
        put_uvarint(out, n as u32 + 1);
    } else {
        out.put_i32(n);
    }
    Ok(())
}

fn put_uvarint(out: &mut BytesMut, mut v: u32) {
    while v >= 0x80 {
        out.put_u8((v as u8) | 0x80);
        v >>= 7;
    }
    out.put_u8(v as u8);
}

impl FetchReply {
    /// The answer `response` (whose partitions carry no records) with `records` spliced in
    /// as each matching partition's record set; `response` gets CORRUPT_MESSAGE where the
    /// records were damaged. Every field but the records is encoded by kafka-protocol.
    pub fn encode(
        version: i16,
        correlation: i32,
        response: &mut FetchResponse,
        records: SizedRecords,
    ) -> Result<FetchReply, FetchEncodeError> {
        let mut records: Vec<Option<Sized>> = records.0.into_iter().map(Some).collect();
        // Each partition's records, matched by name: the answer may hold partitions the
        // handler did not read (refused by ACLs).
        let mut parts: Vec<Vec<Option<Sized>>> = Vec::with_capacity(response.responses.len());
        let mut next = 0;
        for t in &mut response.responses {
            let mut of_topic = Vec::with_capacity(t.partitions.len());
            for p in &mut t.partitions {
                let matches = |r: &Option<Sized>| {
                    r.as_ref().is_some_and(|r| {
                        r.records.topic == t.topic
                            && r.records.topic_id == t.topic_id
                            && r.records.partition == p.partition_index
                    })
                };
                // The handler read them in answer order: the next one matches unless the
                // answer gained a partition since (one refused by ACLs).
                let sized = match records.get(next).is_some_and(matches) {
                    true => {
                        next += 1;
                        records[next - 1].take()
                    }
                    false => records
                        .iter_mut()
                        .find(|r| matches(r))
                        .and_then(Option::take),
                };
                if sized.as_ref().is_some_and(|s| s.corrupt) {
                    p.error_code = ErrorCode::CorruptMessage.code();
                }
                of_topic.push(sized);
            }
            parts.push(of_topic);
        }

        let mut pieces = Vec::new();
        let mut out = BytesMut::with_capacity(1024);
        out.put_i32(0); // size, filled in below
        let mut header = ResponseHeader::default();
        header.correlation_id = correlation;
        header
            .encode(&mut out, ApiKey::Fetch.response_header_version(version))
            .map_err(|e| FetchEncodeError::Encode(version, e.to_string()))?;
        let empty_array = if version >= 12 { 1 } else { 4 };
        // Top level: the fields before `responses`, the topics, the tagged fields after.
        let responses = std::mem::take(&mut response.responses);
        let mut top = response.clone();
        response.responses = responses;
        let top_enc = encoded(&top, version)?;
        top.node_endpoints = Vec::new();
        top.unknown_tagged_fields = Default::default();
        let top_prefix = prefix_len(&top, version, empty_array)?;
        out.extend_from_slice(&top_enc[..top_prefix]);
        put_array_len(&mut out, version, response.responses.len())?;
        for (t, of_topic) in response.responses.iter().zip(parts) {
            let mut topic = FetchableTopicResponse::default();
            topic.topic = t.topic.clone();
            topic.topic_id = t.topic_id;
            topic.unknown_tagged_fields = t.unknown_tagged_fields.clone();
            let topic_enc = encoded(&topic, version)?;
            topic.unknown_tagged_fields = Default::default();
            let topic_prefix = prefix_len(&topic, version, empty_array)?;
            out.extend_from_slice(&topic_enc[..topic_prefix]);
            put_array_len(&mut out, version, t.partitions.len())?;
            for (p, sized) in t.partitions.iter().zip(of_topic) {
                let Some(sized) = sized else {
                    // No records: kafka-protocol encodes it whole.
                    p.encode(&mut out, version)
                        .map_err(|e| FetchEncodeError::Encode(version, e.to_string()))?;
                    continue;
                };
                let mut p = p.clone();
                p.records = None;
                let enc = encoded(&p, version)?;
                let mut cleared = PartitionData::default();
                cleared.partition_index = p.partition_index;
                cleared.error_code = p.error_code;
                cleared.high_watermark = p.high_watermark;
                cleared.last_stable_offset = p.last_stable_offset;
                cleared.log_start_offset = p.log_start_offset;
                cleared.aborted_transactions = p.aborted_transactions.take();
                cleared.preferred_read_replica = p.preferred_read_replica;
                let null = null_records_len(version);
                let prefix = prefix_len(&cleared, version, null)?;
                out.extend_from_slice(&enc[..prefix]);
                let len =
                    i32::try_from(sized.len).map_err(|_| FetchEncodeError::TooLarge(sized.len))?;
                if version >= 12 {
                    put_uvarint(&mut out, len as u32 + 1);
                } else {
                    out.put_i32(len);
                }
                pieces.push(Piece::Framing(out.split().freeze()));
                pieces.push(Piece::Records(sized));
                // The partition's tagged fields (current leader, ...).
                out.extend_from_slice(&enc[prefix + null..]);
            }
            out.extend_from_slice(&topic_enc[topic_prefix + empty_array..]);
        }
        out.extend_from_slice(&top_enc[top_prefix + empty_array..]);
        pieces.push(Piece::Framing(out.freeze()));

        let total: usize = pieces
            .iter()
            .map(|p| match p {
                Piece::Framing(b) => b.len(),
                Piece::Records(s) => s.len,
            })
            .sum();
        let size = i32::try_from(total - 4).map_err(|_| FetchEncodeError::TooLarge(total))?;
        // The size prefix is in the first piece, which is framing.
        if let Some(Piece::Framing(first)) = pieces.first_mut() {
            let mut b = BytesMut::from(&first[..]);
            b[..4].copy_from_slice(&size.to_be_bytes());
            *first = b.freeze();
        }
        Ok(FetchReply { pieces })
    }

    /// Writes the answer: framing and converted batches gathered in one buffer and sent
    /// every [`FLUSH_BYTES`]. The buffer lives only while this answer is written (an idle
    /// connection holds none; the allocator hands the same memory to the next answer).
    pub async fn write_to<W: AsyncWrite + Unpin>(self, w: &mut W) -> Result<(), FetchEncodeError> {
        let mut buf = BytesMut::with_capacity(FLUSH_BYTES + (64 << 10));
        let buf = &mut buf;
        for piece in self.pieces {
            match piece {
                Piece::Framing(b) => buf.extend_from_slice(&b),
                Piece::Records(sized) => {
                    let mut wrote = 0;
                    for (c, &n) in sized.records.chunks.iter().zip(&sized.batches) {
                        if n == 0 {
                            continue;
                        }
                        let aligned = aligned16(c.as_slice().unwrap_or_default());
                        // Checked when sized: the header walk finds the same batches.
                        let batches = served_batches(&aligned, sized.records.from, Walk::Unchecked);
                        for b in batches.take(n) {
                            let before = buf.len();
                            encode_batch(&b?, buf)?;
                            wrote += buf.len() - before;
                            if buf.len() >= FLUSH_BYTES {
                                w.write_all(buf).await?;
                                buf.clear();
                            }
                        }
                    }
                    // A wrong size would desynchronize the client: the connection closes.
                    if wrote != sized.len {
                        return Err(FetchEncodeError::Size {
                            announced: sized.len,
                            wrote,
                        });
                    }
                }
            }
            if buf.len() >= FLUSH_BYTES {
                w.write_all(buf).await?;
                buf.clear();
            }
        }
        if !buf.is_empty() {
            w.write_all(buf).await?;
            buf.clear();
        }
        w.flush().await?;
        Ok(())
    }
}

/// The answer as a client reads it: written, then decoded by kafka-protocol.
#[cfg(test)]
pub fn written_and_decoded(
    version: i16,
    mut response: FetchResponse,
    records: Vec<PartitionRecords>,
) -> FetchResponse {
    use bytes::Buf;
    use kafka_protocol::protocol::Decodable;
    let reply = FetchReply::encode(version, 7, &mut response, SizedRecords::new(records)).unwrap();
    let mut out = Vec::new();
    futures_lite::future::block_on(reply.write_to(&mut out)).unwrap();
    let mut b = Bytes::from(out);
    assert_eq!(b.get_i32() as usize, b.len(), "size prefix");
    let h = ResponseHeader::decode(&mut b, ApiKey::Fetch.response_header_version(version)).unwrap();
    assert_eq!(h.correlation_id, 7);
    let r = FetchResponse::decode(&mut b, version).unwrap();
    assert!(b.is_empty(), "bytes after the answer");
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::test_support::Rng;
    use crate::batch::{stamp_batch, BatchBuilder};
    use crate::kafka::records::to_kafka_batches;
    use kafka_protocol::messages::fetch_response::{
        AbortedTransaction, EpochEndOffset, LeaderIdAndEpoch, NodeEndpoint,
    };
    use kafka_protocol::messages::{BrokerId, ProducerId};
    use kafka_protocol::protocol::StrBytes;

    /// Stored batches from `base`: random counts, keys, values (some large), headers.
    fn stored(rng: &mut Rng, mut base: u64, batches: usize) -> Vec<u8> {
        let mut out = Vec::new();
        for _ in 0..batches {
            let mut b = BatchBuilder::new();
            let n = 1 + rng.below(40) as usize;
            for i in 0..n {
                let key = (rng.below(3) > 0).then(|| format!("k{}", rng.next()));
                let len = match rng.below(10) {
                    0 => 20_000 + rng.below(60_000) as usize,
                    _ => rng.below(2_000) as usize,
                };
                let value: Vec<u8> = (0..len).map(|j| (j as u64 ^ rng.0) as u8).collect();
                let headers: Vec<(String, Vec<u8>)> = (0..rng.below(3))
                    .map(|h| (format!("h{h}"), vec![i as u8; h as usize]))
                    .collect();
                b.push(
                    1_000 + i as i64,
                    key.as_deref().map(str::as_bytes),
                    &value,
                    &headers,
                    &[],
                );
            }
            let mut bytes = b.build().unwrap().to_vec();
            stamp_batch(&mut bytes, base, 1);
            base += n as u64;
            out.extend_from_slice(&bytes);
        }
        out
    }

    /// Collects what is written and the largest single write.
    #[derive(Default)]
    struct BoundedWrites {
        bytes: Vec<u8>,
        largest: usize,
    }

    impl AsyncWrite for BoundedWrites {
        fn poll_write(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
            b: &[u8],
        ) -> std::task::Poll<std::io::Result<usize>> {
            let this = self.get_mut();
            this.largest = this.largest.max(b.len());
            this.bytes.extend_from_slice(b);
            std::task::Poll::Ready(Ok(b.len()))
        }
        fn poll_flush(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            std::task::Poll::Ready(Ok(()))
        }
        fn poll_close(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            std::task::Poll::Ready(Ok(()))
        }
    }

    fn chunk(bytes: Vec<u8>) -> ReadChunk {
        ReadChunk::Memory(Bytes::from(bytes))
    }

    /// What the answer was before: records converted whole, kafka-protocol encoding all.
    fn reference(version: i16, response: &FetchResponse) -> Vec<u8> {
        let mut out = BytesMut::new();
        out.put_i32(0);
        let mut h = ResponseHeader::default();
        h.correlation_id = 7;
        h.encode(&mut out, ApiKey::Fetch.response_header_version(version))
            .unwrap();
        response.encode(&mut out, version).unwrap();
        let size = (out.len() - 4) as i32;
        out[..4].copy_from_slice(&size.to_be_bytes());
        out.to_vec()
    }

    /// Random answers of every served version, records over several write buffers, written
    /// batch by batch: the bytes are exactly kafka-protocol's encoding of the whole answer.
    #[test]
    fn the_streamed_answer_is_byte_for_byte_the_encoded_one() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let mut largest = 0;
        for round in 0..60 {
            let version = 4 + (round % 13) as i16;
            let mut response = FetchResponse::default();
            response.throttle_time_ms = rng.below(100) as i32;
            if version >= 7 {
                response.error_code = if rng.below(5) == 0 { 1 } else { 0 };
                response.session_id = rng.below(1000) as i32;
            }
            if version >= 16 && rng.below(2) == 0 {
                let mut n = NodeEndpoint::default();
                n.node_id = BrokerId(1000);
                n.host = StrBytes::from_static_str("127.0.0.1");
                n.port = 9092;
                response.node_endpoints = vec![n];
            }
            let mut records = Vec::new();
            let mut expected = response.clone();
            for t in 0..1 + rng.below(3) {
                let mut tr = FetchableTopicResponse::default();
                if version >= 13 {
                    tr.topic_id = uuid::Uuid::from_u64_pair(7, t + 1);
                } else {
                    tr.topic = TopicName(StrBytes::from_string(format!("topic-{t}")));
                }
                let mut expected_tr = tr.clone();
                for p in 0..1 + rng.below(3) as i32 {
                    let mut pd = PartitionData::default();
                    pd.partition_index = p;
                    pd.high_watermark = rng.below(1 << 40) as i64;
                    pd.last_stable_offset = pd.high_watermark;
                    pd.log_start_offset = rng.below(10) as i64;
                    if rng.below(3) == 0 {
                        let mut a = AbortedTransaction::default();
                        a.producer_id = ProducerId(rng.below(100) as i64);
                        a.first_offset = rng.below(100) as i64;
                        pd.aborted_transactions = Some(vec![a]);
                    }
                    if version >= 11 && rng.below(4) == 0 {
                        pd.preferred_read_replica = BrokerId(3);
                    }
                    if version >= 12 && rng.below(4) == 0 {
                        let mut l = LeaderIdAndEpoch::default();
                        l.leader_id = BrokerId(1001);
                        l.leader_epoch = 4;
                        pd.current_leader = l;
                        let mut d = EpochEndOffset::default();
                        d.epoch = 2;
                        d.end_offset = 40;
                        pd.diverging_epoch = d;
                    }
                    let mut expected_pd = pd.clone();
                    match rng.below(4) {
                        // An error: no records at all.
                        0 => pd.error_code = 6,
                        // Read: some chunks, from an offset inside or past the first batch.
                        _ => {
                            let from = rng.below(30);
                            let mut base = 0;
                            let mut chunks = Vec::new();
                            let mut converted = BytesMut::new();
                            for _ in 0..rng.below(4) {
                                let n = rng.below(6) as usize;
                                let bytes = stored(&mut rng, base, n);
                                base += 1_000;
                                to_kafka_batches(&bytes, from, &mut converted).unwrap();
                                chunks.push(chunk(bytes));
                            }
                            largest = largest.max(converted.len());
                            expected_pd.records = Some(converted.freeze());
                            records.push(PartitionRecords {
                                topic: tr.topic.clone(),
                                topic_id: tr.topic_id,
                                partition: p,
                                from,
                                chunks,
                            });
                        }
                    }
                    expected_pd.error_code = pd.error_code;
                    tr.partitions.push(pd);
                    expected_tr.partitions.push(expected_pd);
                }
                response.responses.push(tr);
                expected.responses.push(expected_tr);
            }
            let want = reference(version, &expected);
            let reply =
                FetchReply::encode(version, 7, &mut response, SizedRecords::new(records)).unwrap();
            let mut got = BoundedWrites::default();
            futures_lite::future::block_on(reply.write_to(&mut got)).unwrap();
            assert!(
                got.largest <= FLUSH_BYTES + (1 << 20),
                "writes bounded: {}",
                got.largest
            );
            let got = got.bytes;
            assert_eq!(got.len(), want.len(), "v{version} round {round}: size");
            assert!(got == want, "v{version} round {round}: bytes differ");
        }
        assert!(
            largest > 4 * FLUSH_BYTES,
            "records larger than the write buffer: {largest}"
        );
    }

    /// A damaged batch: those before it are served, the partition answers CORRUPT_MESSAGE,
    /// and the bytes still agree with the size announced. (Only the header's own CRC is
    /// checked here: the body's was, when the batch was read from its file or appended; see
    /// tests/storage_safety.rs.)
    #[test]
    fn a_damaged_batch_ends_the_records_and_marks_the_partition() {
        let mut rng = Rng(42);
        let mut bytes = stored(&mut rng, 0, 3);
        let first = crate::batch::BatchView::parse_header(&bytes).unwrap().len();
        let mut good = BytesMut::new();
        to_kafka_batches(&bytes[..first], 0, &mut good).unwrap();
        let second = crate::batch::BatchView::parse_header(&bytes[first..])
            .unwrap()
            .len();
        // The last batch's base offset: its header CRC fails.
        bytes[first + second + 9] ^= 0x01;
        let mut tr = FetchableTopicResponse::default();
        tr.topic = TopicName(StrBytes::from_static_str("t"));
        tr.partitions = vec![PartitionData::default()];
        let mut response = FetchResponse::default();
        response.responses = vec![tr];
        let records = vec![PartitionRecords {
            topic: TopicName(StrBytes::from_static_str("t")),
            topic_id: uuid::Uuid::nil(),
            partition: 0,
            from: 0,
            chunks: vec![chunk(bytes)],
        }];
        let r = written_and_decoded(12, response, records);
        let pd = &r.responses[0].partitions[0];
        assert_eq!(pd.error_code, ErrorCode::CorruptMessage.code());
        let served = pd.records.as_ref().unwrap();
        assert!(
            served.len() > good.len(),
            "the batches before the damage are served"
        );
        assert!(served.starts_with(&good));
    }
}
