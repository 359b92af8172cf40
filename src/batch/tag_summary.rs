//! The tag summary of a batch: a 32-bit bloom filter of its records' tags, in the header's two
//! producer-written reserved pairs (bytes 30..32 low half, 66..68 high half, both under the
//! body CRC), so a filtered fetch skips a batch that cannot match without reading its body.
//!
//! Each tag sets [`BITS_PER_TAG`] bits picked from the CRC32C of its bytes (hardware CRC, a
//! dependency already). A batch of format version 4 or later always carries its summary (0
//! when no record has a tag); older batches have none and count as "may match". Measured
//! false-positive rates (test `false_positive_rate_by_distinct_tags`) are in ARCHITECTURE.md.

/// Bits each tag sets: 3 is best for the 3 to 8 distinct tags a batch usually holds.
pub const BITS_PER_TAG: u32 = 3;
/// The first format version whose header carries a tag summary.
pub const SUMMARY_VERSION: u16 = 4;

/// The summary bits of one tag.
pub fn tag_bits(tag: &str) -> u32 {
    let h = crc32c::crc32c(tag.as_bytes());
    // Three 5-bit slices of one hash; overlaps only lower the bits set, never miss one.
    (0..BITS_PER_TAG).fold(0u32, |bits, i| bits | 1 << ((h >> (i * 5)) & 31))
}

/// A fetch's tag filter: records with any (or all) of `tags`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TagFilter {
    tags: Vec<String>,
    all: bool,
    /// any: each tag's bits; all: one entry, the union.
    needs: Vec<u32>,
}

impl TagFilter {
    /// `all`: a record must carry every tag; otherwise any one. `None` when `tags` is empty
    /// (no filter).
    pub fn new(tags: Vec<String>, all: bool) -> Option<TagFilter> {
        if tags.is_empty() {
            return None;
        }
        let bits = tags.iter().map(|t| tag_bits(t));
        let needs = if all {
            vec![bits.fold(0, |a, b| a | b)]
        } else {
            bits.collect()
        };
        Some(TagFilter { tags, all, needs })
    }

    pub fn tags(&self) -> &[String] {
        &self.tags
    }

    pub fn is_all(&self) -> bool {
        self.all
    }

    /// Whether a batch with this summary may hold a matching record (`None`: no summary).
    pub fn may_match(&self, summary: Option<u32>) -> bool {
        summary.is_none_or(|s| self.needs.iter().any(|&n| n & !s == 0))
    }

    /// Whether a record with these tags matches.
    pub fn matches(&self, tags: &[&str]) -> bool {
        if self.all {
            self.tags.iter().all(|t| tags.contains(&t.as_str()))
        } else {
            tags.iter().any(|r| self.tags.iter().any(|t| t == r))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(tags: &[&str]) -> u32 {
        tags.iter().fold(0, |s, t| s | tag_bits(t))
    }

    #[test]
    fn a_batch_holding_a_tag_always_may_match() {
        for n in 1..50 {
            let tags: Vec<String> = (0..n).map(|i| format!("tag-{i}")).collect();
            let s = summary(&tags.iter().map(String::as_str).collect::<Vec<_>>());
            for t in &tags {
                let f = TagFilter::new(vec![t.clone()], false).unwrap();
                assert!(f.may_match(Some(s)), "{t} in a batch of {n} tags");
            }
            let all = TagFilter::new(tags.clone(), true).unwrap();
            assert!(all.may_match(Some(s)));
        }
    }

    #[test]
    fn no_summary_may_match_and_an_untagged_batch_never_does() {
        let f = TagFilter::new(vec!["a".into()], false).unwrap();
        assert!(f.may_match(None));
        assert!(!f.may_match(Some(0)));
        assert!(TagFilter::new(Vec::new(), false).is_none());
    }

    #[test]
    fn records_match_any_or_all() {
        let any = TagFilter::new(vec!["a".into(), "b".into()], false).unwrap();
        let all = TagFilter::new(vec!["a".into(), "b".into()], true).unwrap();
        assert!(any.matches(&["b"]));
        assert!(!any.matches(&["c"]));
        assert!(!any.matches(&[]));
        assert!(all.matches(&["c", "b", "a"]));
        assert!(!all.matches(&["a"]));
    }

    #[test]
    fn summary_round_trips_through_the_reserved_header_bytes() {
        use crate::batch::{BatchHeader, HEADER_LEN};
        let mut h = BatchHeader {
            version: SUMMARY_VERSION,
            tag_bits: 0xdead_beef,
            ..Default::default()
        };
        let mut b = [0u8; HEADER_LEN];
        h.encode(&mut b);
        assert_eq!(&b[30..32], &0xbeefu16.to_le_bytes());
        assert_eq!(&b[66..68], &0xdeadu16.to_le_bytes());
        assert_eq!(
            BatchHeader::decode(&b).unwrap().tag_summary(),
            Some(0xdead_beef)
        );
        h.version = 3;
        h.encode(&mut b);
        assert_eq!(BatchHeader::decode(&b).unwrap().tag_summary(), None);
    }

    /// The rate a one-tag filter passes a batch holding `n` other distinct tags: what
    /// ARCHITECTURE.md quotes. Asserts the bloom arithmetic's bound with room.
    #[test]
    fn false_positive_rate_by_distinct_tags() {
        let probes: Vec<u32> = (0..20_000)
            .map(|i| tag_bits(&format!("probe-{i}")))
            .collect();
        for (n, bound) in [(1usize, 0.005), (3, 0.03), (5, 0.08), (10, 0.3)] {
            let mut hits = 0usize;
            let batches = 200;
            for b in 0..batches {
                let s = (0..n).fold(0, |s, i| s | tag_bits(&format!("batch{b}-tag{i}")));
                hits += probes.iter().filter(|&&p| s & p == p).count();
            }
            let rate = hits as f64 / (batches * probes.len()) as f64;
            println!("distinct tags {n}: false-positive rate {:.4}", rate);
            assert!(rate < bound, "{n} tags: {rate}");
        }
    }
}
