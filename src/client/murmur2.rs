//! Kafka's default partitioner hash, so a key lands on the same partition as with Kafka
//! clients: `to_positive(murmur2(key)) % partitions`.

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
}
