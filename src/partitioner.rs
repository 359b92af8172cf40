//! Kafka's default partitioner, shared by the client (which partition a record goes to) and
//! the broker (which `__consumer_offsets` partition hosts a group): a key lands on
//! `to_positive(murmur2(key)) % partitions`, as with Kafka clients; a record without a key
//! goes to a sticky partition, chosen anew for each batch.

/// Kafka's murmur2 (seed 0x9747b28c), as `org.apache.kafka.common.utils.Utils.murmur2`.
pub fn murmur2(data: &[u8]) -> i32 {
    const SEED: u32 = 0x9747_b28c;
    const M: u32 = 0x5bd1_e995;
    const R: u32 = 24;
    let len = data.len();
    let mut h: u32 = SEED ^ (len as u32);
    let chunks = data.chunks_exact(4);
    let rest = chunks.remainder();
    for c in chunks {
        let mut k = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    match rest.len() {
        3 => {
            h ^= u32::from(rest[2]) << 16;
            h ^= u32::from(rest[1]) << 8;
            h ^= u32::from(rest[0]);
            h = h.wrapping_mul(M);
        }
        2 => {
            h ^= u32::from(rest[1]) << 8;
            h ^= u32::from(rest[0]);
            h = h.wrapping_mul(M);
        }
        1 => {
            h ^= u32::from(rest[0]);
            h = h.wrapping_mul(M);
        }
        _ => {}
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h as i32
}

/// The partition Kafka's default partitioner picks for a key.
pub fn partition_for_key(key: &[u8], partitions: u32) -> u32 {
    ((murmur2(key) & 0x7fff_ffff) as u32) % partitions.max(1)
}

/// The partition of a keyed record among `partitions`: Kafka's mapping, except that a key whose
/// partition is not in `writable` (decommissioned) moves to a writable one, picked by the same
/// hash; the other keys keep theirs. An empty `writable` (unknown) keeps Kafka's mapping.
pub fn keyed_partition(key: &[u8], partitions: u32, writable: &[u32]) -> u32 {
    let p = partition_for_key(key, partitions);
    if writable.is_empty() || writable.contains(&p) {
        p
    } else {
        writable[partition_for_key(key, writable.len() as u32) as usize]
    }
}

/// A new sticky partition for records without a key: the `turn`-th writable partition
/// (of all `partitions` when `writable` is empty). The caller advances `turn` at each new
/// choice, so keyless records spread over every partition batch by batch.
pub fn sticky_partition(turn: u32, partitions: u32, writable: &[u32]) -> u32 {
    if writable.is_empty() {
        turn % partitions.max(1)
    } else {
        writable[(turn % writable.len() as u32) as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_kafka_reference_values() {
        // Values from Kafka's UtilsTest.testMurmur2.
        let cases: [(&[u8], i32); 6] = [
            (b"21", -973932308),
            (b"foobar", -790332482),
            (b"a-little-bit-long-string", -985981536),
            (b"a-little-bit-longer-string", -1486304829),
            (
                b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8",
                -58897971,
            ),
            (b"abc", 479470107),
        ];
        for (input, want) in cases {
            assert_eq!(
                murmur2(input),
                want,
                "murmur2({:?})",
                String::from_utf8_lossy(input)
            );
        }
        assert!(partition_for_key(b"foobar", 4) < 4);
    }

    #[test]
    fn keys_of_unwritable_partitions_move_and_the_others_stay() {
        let home = partition_for_key(b"k", 4);
        assert_eq!(keyed_partition(b"k", 4, &[]), home);
        assert_eq!(keyed_partition(b"k", 4, &[0, 1, 2, 3]), home);
        let others: Vec<u32> = (0..4).filter(|&p| p != home).collect();
        assert!(others.contains(&keyed_partition(b"k", 4, &others)));
    }

    #[test]
    fn sticky_choices_walk_the_writable_partitions() {
        assert_eq!(sticky_partition(5, 4, &[]), 1);
        assert_eq!(sticky_partition(0, 0, &[]), 0);
        let picks: Vec<u32> = (0..4).map(|t| sticky_partition(t, 8, &[2, 5])).collect();
        assert_eq!(picks, vec![2, 5, 2, 5]);
    }
}
