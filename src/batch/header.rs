//! The fixed batch header: plain little-endian fields at fixed offsets.

/// Size of the fixed header; the rkyv body starts here.
pub const HEADER_LEN: usize = 80;
/// Marks a rill batch; a zeroed (preallocated) region never looks like one.
pub const MAGIC: u16 = 0x5242;
/// The format version written. Version 2 added the header CRC (version 1's broker-stamped
/// fields had no check); version 3 changed only the body: null values and null header values
/// ([`crate::batch::RecordBody`]). Version 4 (same body as 3) puts the leader epoch at bytes
/// 72..76, stamped by the leader like the base offset, so it moves from the body CRC to the
/// header CRC, and fills the two reserved pairs 30..32 and 66..68 with the tag summary
/// ([`crate::batch::tag_summary`]), under the body CRC.
pub const VERSION: u16 = 4;
/// First version with the leader epoch in the header.
pub const LEADER_EPOCH_VERSION: u16 = 4;
/// Where the leader epoch (i32) sits in version 4 and later.
pub const LEADER_EPOCH_AT: usize = 72;
/// The leader epoch of a batch written before version 4 (Kafka's NO_PARTITION_LEADER_EPOCH).
pub const NO_LEADER_EPOCH: i32 = -1;
/// The oldest version still read: version 2 bodies read as records without nulls, so data
/// directories and clients from before version 3 keep working with no upgrade step.
pub const OLDEST_READABLE_VERSION: u16 = 2;

/// Whether this build reads batches of format `version` (their header layout and CRCs are the
/// same; the body is archived by the version's own types).
pub fn is_readable_version(version: u16) -> bool {
    (OLDEST_READABLE_VERSION..=VERSION).contains(&version)
}
/// Flags bit: the batch was appended by the delayed-message queue, and its producer id is
/// the message's id in its shard's delay store (what recovery looks for after a crash).
pub const FLAG_DELAYED: u16 = 0x0001;
/// Flags bit: the batch belongs to its producer's open transaction (Kafka's `isTransactional`):
/// its records count for read_committed consumers only once a commit marker follows.
pub const FLAG_TRANSACTIONAL: u16 = 0x0002;
/// Flags bit: a control batch, one marker record ([`crate::batch::control`]) the broker writes
/// to end a transaction (Kafka's `isControl`); never handed to applications.
pub const FLAG_CONTROL: u16 = 0x0004;
/// The body CRC covers everything from this offset on except the header CRC (and, from
/// version 4, the leader epoch): the fields before it are the length, the body CRC itself and
/// the two the broker fills in (base offset, append time).
pub const CRC_START: usize = 24;
/// Where the header CRC sits: CRC32C of bytes 0..24 (length, body CRC, base offset, append
/// time) and, from version 4, 72..76 (leader epoch), rewritten whenever the broker stamps the
/// batch, so a flipped offset or length on disk is caught like a flipped payload byte.
pub const HEADER_CRC_AT: usize = 76;

/// The decoded fixed header of a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BatchHeader {
    pub length: u32,
    pub crc: u32,
    pub base_offset: u64,
    pub append_time_ms: i64,
    pub magic: u16,
    pub version: u16,
    pub flags: u16,
    pub record_count: u32,
    pub body_len: u32,
    pub first_timestamp_ms: i64,
    pub max_timestamp_ms: i64,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
    /// Stamped by the leader (version 4 on); [`NO_LEADER_EPOCH`] for older batches.
    pub leader_epoch: i32,
    pub header_crc: u32,
    /// Bytes 30..32 (low half) and 66..68 (high half): the tag summary from version 4 on,
    /// reserved zeros before ([`BatchHeader::tag_summary`]).
    pub tag_bits: u32,
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}
pub(crate) fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}
pub(crate) fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

impl BatchHeader {
    /// Decodes the header from the first [`HEADER_LEN`] bytes; `None` if `b` is shorter.
    /// Decoding does not validate: see [`crate::batch::BatchView::validate`].
    pub fn decode(b: &[u8]) -> Option<BatchHeader> {
        if b.len() < HEADER_LEN {
            return None;
        }
        Some(BatchHeader {
            length: u32_at(b, 0),
            crc: u32_at(b, 4),
            base_offset: u64_at(b, 8),
            append_time_ms: u64_at(b, 16) as i64,
            magic: u16_at(b, 24),
            version: u16_at(b, 26),
            flags: u16_at(b, 28),
            record_count: u32_at(b, 32),
            body_len: u32_at(b, 36),
            first_timestamp_ms: u64_at(b, 40) as i64,
            max_timestamp_ms: u64_at(b, 48) as i64,
            producer_id: u64_at(b, 56) as i64,
            producer_epoch: u16_at(b, 64) as i16,
            base_sequence: u32_at(b, 68) as i32,
            leader_epoch: if has_leader_epoch(u16_at(b, 26)) {
                u32_at(b, LEADER_EPOCH_AT) as i32
            } else {
                NO_LEADER_EPOCH
            },
            header_crc: u32_at(b, HEADER_CRC_AT),
            tag_bits: u32::from(u16_at(b, 30)) | u32::from(u16_at(b, 66)) << 16,
        })
    }

    /// Writes every field into `b[..HEADER_LEN]` (reserved bytes zeroed).
    pub fn encode(&self, b: &mut [u8]) {
        let b = &mut b[..HEADER_LEN];
        b.fill(0);
        b[0..4].copy_from_slice(&self.length.to_le_bytes());
        b[4..8].copy_from_slice(&self.crc.to_le_bytes());
        b[8..16].copy_from_slice(&self.base_offset.to_le_bytes());
        b[16..24].copy_from_slice(&self.append_time_ms.to_le_bytes());
        b[24..26].copy_from_slice(&self.magic.to_le_bytes());
        b[26..28].copy_from_slice(&self.version.to_le_bytes());
        b[28..30].copy_from_slice(&self.flags.to_le_bytes());
        b[32..36].copy_from_slice(&self.record_count.to_le_bytes());
        b[36..40].copy_from_slice(&self.body_len.to_le_bytes());
        b[40..48].copy_from_slice(&self.first_timestamp_ms.to_le_bytes());
        b[48..56].copy_from_slice(&self.max_timestamp_ms.to_le_bytes());
        b[56..64].copy_from_slice(&self.producer_id.to_le_bytes());
        b[64..66].copy_from_slice(&self.producer_epoch.to_le_bytes());
        b[68..72].copy_from_slice(&self.base_sequence.to_le_bytes());
        if has_leader_epoch(self.version) {
            b[LEADER_EPOCH_AT..HEADER_CRC_AT].copy_from_slice(&self.leader_epoch.to_le_bytes());
        }
        b[30..32].copy_from_slice(&(self.tag_bits as u16).to_le_bytes());
        b[66..68].copy_from_slice(&((self.tag_bits >> 16) as u16).to_le_bytes());
        b[HEADER_CRC_AT..HEADER_LEN].copy_from_slice(&self.header_crc.to_le_bytes());
    }

    /// The tag summary, `None` for a version without one (such a batch may match any filter).
    pub fn tag_summary(&self) -> Option<u32> {
        (self.version >= super::tag_summary::SUMMARY_VERSION).then_some(self.tag_bits)
    }

    /// The offset of the last record in the batch.
    pub fn last_offset(&self) -> u64 {
        self.base_offset + u64::from(self.record_count.max(1)) - 1
    }

    /// The offset after this batch.
    pub fn next_offset(&self) -> u64 {
        self.base_offset + u64::from(self.record_count)
    }
}

fn has_leader_epoch(version: u16) -> bool {
    version >= LEADER_EPOCH_VERSION
}

/// The end of the body-checksummed header bytes: the leader epoch is outside from v4 on.
fn body_crc_header_end(batch: &[u8]) -> usize {
    if has_leader_epoch(u16_at(batch, 26)) {
        LEADER_EPOCH_AT
    } else {
        HEADER_CRC_AT
    }
}

/// Fills in the two broker-owned fields of an encoded batch in place, and the header CRC
/// that covers them. They sit outside the body CRC, so the producer's CRC stays valid.
pub fn stamp(batch: &mut [u8], base_offset: u64, append_time_ms: i64) {
    batch[8..16].copy_from_slice(&base_offset.to_le_bytes());
    batch[16..24].copy_from_slice(&append_time_ms.to_le_bytes());
    let crc = header_checksum(batch);
    batch[HEADER_CRC_AT..HEADER_LEN].copy_from_slice(&crc.to_le_bytes());
}

/// [`stamp`] by a leader of `leader_epoch`: a version 4 batch also records the epoch (an older
/// one has no room for it outside its body CRC, and reads as [`NO_LEADER_EPOCH`]).
pub fn stamp_leader(batch: &mut [u8], base_offset: u64, append_time_ms: i64, leader_epoch: i32) {
    if has_leader_epoch(u16_at(batch, 26)) {
        batch[LEADER_EPOCH_AT..HEADER_CRC_AT].copy_from_slice(&leader_epoch.to_le_bytes());
    }
    stamp(batch, base_offset, append_time_ms);
}

/// Sets the producer id, epoch and base sequence of an encoded batch in place (an idempotent
/// producer numbers a batch when it first sends it), marks it transactional if asked, and
/// sets the two CRCs that cover them.
pub fn set_producer(
    batch: &mut [u8],
    producer_id: i64,
    epoch: i16,
    base_sequence: i32,
    transactional: bool,
) {
    let before = header_part_checksum(batch);
    if transactional {
        let flags = u16_at(batch, 28) | FLAG_TRANSACTIONAL;
        batch[28..30].copy_from_slice(&flags.to_le_bytes());
    }
    batch[56..64].copy_from_slice(&producer_id.to_le_bytes());
    batch[64..66].copy_from_slice(&epoch.to_le_bytes());
    batch[68..72].copy_from_slice(&base_sequence.to_le_bytes());
    reseal(batch, before);
}

/// Sets `flags` (ORed into the batch's own) in an encoded batch and recomputes both CRCs.
pub fn add_flags(batch: &mut [u8], flags: u16) {
    let before = header_part_checksum(batch);
    let flags = u16_at(batch, 28) | flags;
    batch[28..30].copy_from_slice(&flags.to_le_bytes());
    reseal(batch, before);
}

/// Bodies from this size on have their CRC updated rather than recomputed after a header
/// change ([`shift_crc`] costs a few hundred ns whatever the size, a 64 KiB CRC a few us).
const UPDATE_CRC_FROM: usize = 64 << 10;

/// The CRC32C polynomial, bit-reflected as the CRC is computed.
const CRC32C_POLY: u32 = 0x82f6_3b78;

/// `a * b` modulo the CRC32C polynomial, both bit-reflected (bit 31 is x^0), as zlib's
/// `multmodp`.
const fn mul_mod_poly(a: u32, mut b: u32) -> u32 {
    let mut product = 0;
    let mut bit = 1u32 << 31;
    while bit != 0 {
        if a & bit != 0 {
            product ^= b;
        }
        bit >>= 1;
        b = if b & 1 != 0 {
            (b >> 1) ^ CRC32C_POLY
        } else {
            b >> 1
        };
    }
    product
}

/// `X_POW_2K[k]` is x^(2^k) modulo the polynomial (`k` up to 63 covers any `usize` bit count).
const X_POW_2K: [u32; 64] = {
    let mut table = [0; 64];
    let mut x = 1u32 << 30; // x^1
    let mut k = 0;
    while k < 64 {
        table[k] = x;
        x = mul_mod_poly(x, x);
        k += 1;
    }
    table
};

/// `crc32c_combine(crc, 0, len)`: `crc` shifted past `len` zero bytes, i.e. multiplied by
/// x^(8 len). The `crc32c` crate squares a 32x32 bit matrix per bit of `len` (about as
/// long as a CRC of the whole 1 MiB batch, 5% of a producer's time); this multiplies
/// precomputed powers of x, one per set bit of `8 len`.
fn shift_crc(crc: u32, len: usize) -> u32 {
    let mut shift = 1u32 << 31; // x^0
    let bits = len as u128 * 8;
    for (k, x) in X_POW_2K.iter().enumerate() {
        if bits >> k == 0 {
            break;
        }
        if (bits >> k) & 1 != 0 {
            shift = mul_mod_poly(*x, shift);
        }
    }
    mul_mod_poly(shift, crc)
}

/// CRC32C of the header bytes the body CRC covers.
fn header_part_checksum(batch: &[u8]) -> u32 {
    crc32c::crc32c(&batch[CRC_START..body_crc_header_end(batch)])
}

/// Recomputes the body CRC and the header CRC of an encoded batch after fields in its
/// body-checksummed header bytes changed (`before`: those bytes' CRC before the change).
/// CRC32C is linear, so for a large body the old CRC is updated by the change in the header
/// part alone, shifted past the body ([`shift_crc`]), and the body is not read again (the
/// producer numbers every batch it sends: reading a 1 MiB body again was 8% of its CPU). A
/// body damaged before keeps failing its check (a recomputed CRC would cover the damage).
fn reseal(batch: &mut [u8], before: u32) {
    let body_len = batch.len() - HEADER_LEN;
    let crc = if body_len >= UPDATE_CRC_FROM {
        let change = before ^ header_part_checksum(batch);
        u32_at(batch, 4) ^ shift_crc(change, body_len)
    } else {
        checksum(batch)
    };
    batch[4..8].copy_from_slice(&crc.to_le_bytes());
    let crc = header_checksum(batch);
    batch[HEADER_CRC_AT..HEADER_LEN].copy_from_slice(&crc.to_le_bytes());
}

/// CRC32C over the body-checksummed range of an encoded batch of `length` bytes: bytes
/// 24..76 (24..72 from version 4) and 80..length.
pub fn checksum(batch: &[u8]) -> u32 {
    crc32c::crc32c_append(
        crc32c::crc32c(&batch[CRC_START..body_crc_header_end(batch)]),
        &batch[HEADER_LEN..],
    )
}

/// CRC32C over bytes 0..24 (length, body CRC, base offset, append time) and, from version 4,
/// 72..76 (leader epoch).
pub fn header_checksum(batch: &[u8]) -> u32 {
    let crc = crc32c::crc32c(&batch[..CRC_START]);
    if has_leader_epoch(u16_at(batch, 26)) {
        crc32c::crc32c_append(crc, &batch[LEADER_EPOCH_AT..HEADER_CRC_AT])
    } else {
        crc
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::Rng;
    use super::super::{BatchBuilder, BatchView};
    use super::*;

    /// The shift agrees with the `crc32c` crate's combine, for lengths from 0 to 4 GiB.
    #[test]
    fn shift_crc_is_crc32c_combine_with_nothing_appended() {
        let mut rng = Rng(0x5eed_c3c3);
        for round in 0..2_000 {
            let crc = rng.next() as u32;
            let len = match round % 4 {
                0 => rng.below(64) as usize,
                1 => rng.below(1 << 20) as usize,
                2 => 1usize << rng.below(33),
                _ => rng.below(1 << 32) as usize,
            };
            assert_eq!(
                shift_crc(crc, len),
                crc32c::crc32c_combine(crc, 0, len),
                "crc {crc:#x}, len {len}"
            );
        }
        assert_eq!(shift_crc(0, 1 << 20), 0);
    }

    /// Numbering a batch (and marking it transactional or delayed) leaves CRCs that check, for
    /// bodies on both sides of the update threshold; a body damaged before stays refused.
    #[test]
    fn header_changes_reseal_batches_of_every_size() {
        let mut rng = Rng(0xc0ff_ee11);
        for round in 0..60 {
            let mut b = BatchBuilder::new();
            let records = 1 + rng.below(40) as usize;
            // From a few bytes to several hundred KiB in all.
            let each = rng.below(if round % 2 == 0 { 300 } else { 40_000 }) as usize;
            for i in 0..records {
                b.push(1_000 + i as i64, None, &vec![i as u8; each], &[], &[]);
            }
            let mut batch = b.build().expect("batch");
            let (id, epoch, seq) = (
                rng.next() as i64 >> 1,
                rng.below(100) as i16,
                rng.below(1 << 20) as i32,
            );
            set_producer(&mut batch, id, epoch, seq, rng.below(2) == 0);
            assert_eq!(
                u32_at(&batch, 4),
                checksum(&batch),
                "round {round}, {} bytes",
                batch.len()
            );
            let view = BatchView::validate(&batch).expect("valid after numbering");
            assert_eq!(view.header().producer_id, id);
            assert_eq!(view.header().base_sequence, seq);
            add_flags(&mut batch, 0x40);
            assert_eq!(
                u32_at(&batch, 4),
                checksum(&batch),
                "round {round} after add_flags"
            );
            // A damaged body is not made valid by a later header change.
            let at = HEADER_LEN + rng.below((batch.len() - HEADER_LEN) as u64) as usize;
            batch[at] ^= 0x10;
            set_producer(&mut batch, id, epoch, seq + 1, false);
            if batch.len() - HEADER_LEN >= UPDATE_CRC_FROM {
                assert!(
                    BatchView::validate(&batch).is_err(),
                    "round {round}: damage hidden"
                );
            }
        }
    }
}
