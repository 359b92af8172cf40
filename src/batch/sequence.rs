//! Producer sequence numbers as Kafka counts them: an i32 per record that wraps from
//! `i32::MAX` to 0 (`DefaultRecordBatch.incrementSequence`).

/// `seq + by`, wrapping from `i32::MAX` to 0 (a negative `seq`, "none", counts from 0).
pub fn increment_sequence(seq: i32, by: u32) -> i32 {
    let wrapped = (i64::from(seq.max(0)) + i64::from(by)) % (i64::from(i32::MAX) + 1);
    wrapped as i32
}

/// Whether `next` follows `last`.
pub fn in_sequence(last: i32, next: i32) -> bool {
    i64::from(next) == i64::from(last) + 1 || (next == 0 && last == i32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequences_wrap_at_i32_max() {
        assert_eq!(increment_sequence(5, 3), 8);
        assert_eq!(increment_sequence(i32::MAX, 1), 0);
        assert_eq!(increment_sequence(i32::MAX - 1, 4), 2);
        assert!(in_sequence(i32::MAX, 0) && in_sequence(4, 5));
        assert!(!in_sequence(4, 6) && !in_sequence(i32::MAX, 1));
    }
}
