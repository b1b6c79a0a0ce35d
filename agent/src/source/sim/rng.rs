//! Deterministic randomness helpers: a stable node hash, the seeded stepping RNG, and hash-based
//! noise for readings.
//!
//! Two kinds of randomness are kept apart on purpose. Everything that changes the *state* of the
//! simulation (job shapes, arrival times, event ids) is drawn from one `ChaCha8Rng` while stepping,
//! in a fixed order, so it does not depend on how often the caller samples. Cosmetic jitter in the
//! readings (utilisation, power) is a pure hash of (seed, node, GPU, timestamp), so taking a reading
//! never advances the RNG.

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

/// The simulator's RNG.
pub(crate) type SimRng = ChaCha8Rng;

pub(crate) use crate::hash::fnv1a64;

/// SplitMix64 finaliser: a good 64-bit mixer.
pub(crate) fn splitmix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// The stepping RNG for `seed` on the node whose name hashes to `node_hash`.
pub(crate) fn sim_rng(seed: u64, node_hash: u64) -> SimRng {
    ChaCha8Rng::seed_from_u64(splitmix64(seed ^ splitmix64(node_hash)))
}

/// A value in `[0, 1)` derived only from `parts` (no state).
pub(crate) fn noise(parts: &[u64]) -> f64 {
    let mut h = 0x1234_5678_9abc_def0_u64;
    for &p in parts {
        h = splitmix64(h ^ p);
    }
    (h >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn noise_is_in_range_and_stable() {
        for i in 0..1000 {
            let n = noise(&[1, 2, i]);
            assert!((0.0..1.0).contains(&n));
            assert_eq!(n, noise(&[1, 2, i]));
        }
    }
}
