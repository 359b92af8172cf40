//! The one batch format, from producer to disk to consumer.
//!
//! A batch is a fixed 80-byte header followed by an rkyv archive of its records, padded with
//! zeros to a multiple of 16 bytes so that the next batch (in a frame, a buffer or a segment
//! file) starts 16-byte aligned, which rkyv needs for in-place access.
//!
//! ```text
//! offset size field            covered by CRC
//!  0      4   length (whole batch incl. header and padding, multiple of 16)   no
//!  4      4   crc32c of bytes 24..76 (24..72 in v4) and 80..length (body CRC)   no
//!  8      8   base offset      (filled in by the broker)                      no
//! 16      8   append time ms   (filled in by the broker)                      no
//! 24      2   magic 0x5242 ("RB")                                             yes
//! 26      2   format version (4; 2 and 3 still read)                         yes
//! 28      2   flags (bit 0 delayed, 1 transactional, 2 control)              yes
//! 30      2   tag summary, low half (v4; reserved 0 before)                  yes
//! 32      4   record count                                                   yes
//! 36      4   body length (exact rkyv archive length)                        yes
//! 40      8   first timestamp ms                                             yes
//! 48      8   max timestamp ms                                               yes
//! 56      8   producer id (-1: none)                                         yes
//! 64      2   producer epoch                                                 yes
//! 66      2   tag summary, high half (v4; reserved 0 before)                 yes
//! 68      4   base sequence (-1: none)                                       yes
//! 72      4   v4: leader epoch (i32, stamped by the leader)   header CRC (v2/3: 0, body CRC)
//! 76      4   header crc32c of bytes 0..24 (and 72..76 in v4; rewritten when stamped) no
//! 80      .   rkyv body, then zero padding                                   yes
//! ```
//! So every byte of a batch is covered by one of the two CRCs: a flipped base offset or length
//! on disk is detected like a flipped payload byte.
//! All integers are little-endian; the rkyv archive uses rkyv 0.8's default format (little
//! endian, aligned, 32-bit relative pointers).
//!
//! The format version says how the body is archived: version 3 ([`RecordBody`]) has nullable
//! values and header values; version 2 ([`v2::RecordBody`]) had neither and is still read (as
//! non-null), so data written before version 3 needs no upgrade. Version 4 has version 3's
//! body and moves bytes 72..76 (the leader epoch, stamped with the base offset) from the body
//! CRC to the header CRC. Version 1 (no header CRC) is refused.

mod aligned;
mod builder;
pub mod control;
mod header;
mod record;
mod record_ref;
pub mod sequence;
pub mod tag_summary;
#[cfg(test)]
pub(crate) mod test_support;
mod view;

pub use aligned::{aligned16, Aligned16};
pub use builder::BatchBuilder;
pub use header::{
    add_flags, checksum as body_checksum, header_checksum, is_readable_version, set_producer,
    stamp as stamp_batch, stamp_leader, BatchHeader, FLAG_CONTROL, FLAG_DELAYED,
    FLAG_TRANSACTIONAL, HEADER_LEN, LEADER_EPOCH_VERSION, MAGIC, NO_LEADER_EPOCH,
    OLDEST_READABLE_VERSION, VERSION,
};
/// Little-endian field readers, for the other fixed layouts kept beside batches.
pub(crate) use header::{u32_at, u64_at};
pub use record::{
    v2, ArchivedHeader, ArchivedRecord, ArchivedRecordBody, Header, Record, RecordBody,
};
pub use tag_summary::TagFilter;
pub use view::{BatchError, BatchIter, BatchView, HeaderIter, RecordIter, RecordView};

/// Batches and frames are padded to this many bytes so archives stay aligned.
pub const ALIGN: usize = 16;

/// Rounds `n` up to the next multiple of [`ALIGN`].
pub const fn align_up(n: usize) -> usize {
    (n + ALIGN - 1) & !(ALIGN - 1)
}
