//! Bytes at a 16-byte aligned address, which rkyv needs to read records in place: borrowed
//! when they already are (the common case: frames and cache buffers are allocated aligned),
//! copied once when not.

use std::ops::Deref;

use rkyv::util::AlignedVec;

/// See the module docs.
pub enum Aligned16<'a> {
    Borrowed(&'a [u8]),
    Copied(AlignedVec<16>),
}

/// `bytes` at a 16-byte aligned address, copying only if they are not.
pub fn aligned16(bytes: &[u8]) -> Aligned16<'_> {
    if (bytes.as_ptr() as usize).is_multiple_of(16) {
        return Aligned16::Borrowed(bytes);
    }
    let mut v = AlignedVec::<16>::with_capacity(bytes.len());
    v.extend_from_slice(bytes);
    Aligned16::Copied(v)
}

impl Deref for Aligned16<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Aligned16::Borrowed(b) => b,
            Aligned16::Copied(v) => v,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn borrows_aligned_bytes_and_copies_the_others() {
        let mut v = AlignedVec::<16>::new();
        v.extend_from_slice(&[7u8; 64]);
        assert!(matches!(aligned16(&v), Aligned16::Borrowed(_)));
        let shifted = aligned16(&v[1..]);
        assert!(matches!(shifted, Aligned16::Copied(_)));
        assert_eq!(&*shifted, &v[1..]);
        assert!((shifted.as_ptr() as usize).is_multiple_of(16));
    }
}
