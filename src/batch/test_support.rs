//! Random records for the tests of the batch format and of the conversions built on it.

use rkyv::util::AlignedVec;

use super::{BatchBuilder, BatchView};

/// A small deterministic generator (xorshift), so failures replay.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    /// None, empty, or a few random bytes: the three cases a nullable byte string has.
    pub fn nullable(&mut self) -> Option<Vec<u8>> {
        match self.below(4) {
            0 => None,
            1 => Some(Vec::new()),
            _ => Some((0..self.below(40)).map(|_| self.next() as u8).collect()),
        }
    }
}

/// One random record as the builder takes it (owned), headers drawn from few names so
/// that repeats are common.
pub type Owned = (
    i64,
    Option<Vec<u8>>,
    Option<Vec<u8>>,
    Vec<(String, Option<Vec<u8>>)>,
);

pub fn random_records(rng: &mut Rng, n: usize) -> Vec<Owned> {
    (0..n)
        .map(|_| {
            let headers = (0..rng.below(6))
                .map(|_| {
                    (
                        ["a", "b", "", "ü"][rng.below(4) as usize].to_string(),
                        rng.nullable(),
                    )
                })
                .collect();
            (
                1_700_000_000_000 + rng.below(5_000) as i64 - 2_500,
                rng.nullable(),
                rng.nullable(),
                headers,
            )
        })
        .collect()
}

pub fn build_random(records: &[Owned]) -> AlignedVec<16> {
    let mut b = BatchBuilder::new();
    for (ts, key, value, headers) in records {
        b.push_record(
            *ts,
            key.as_deref(),
            value.as_deref(),
            headers.iter().map(|(k, v)| (k.as_str(), v.as_deref())),
            &[],
        );
    }
    b.build().unwrap()
}

/// What a view reads back, in the same owned shape.
pub fn read_back(view: &BatchView<'_>) -> Vec<Owned> {
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
            )
        })
        .collect()
}
