//! The order trials run in: every repetition runs every system once, in an order shuffled per
//! repetition from a seed, so slow drift of the machine spreads over all systems alike.

use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

/// For each repetition `0..runs`, a permutation of `0..n` (indices into the caller's list of
/// systems). The same `(n, runs, seed)` always gives the same schedule.
pub fn shuffled_order(n: usize, runs: usize, seed: u64) -> Vec<Vec<usize>> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    (0..runs)
        .map(|_| {
            let mut v: Vec<usize> = (0..n).collect();
            v.shuffle(&mut rng);
            v
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_repetition_is_a_permutation_and_the_schedule_is_reproducible() {
        let s = shuffled_order(6, 10, 7);
        assert_eq!(s.len(), 10);
        for rep in &s {
            let mut sorted = rep.clone();
            sorted.sort();
            assert_eq!(sorted, (0..6).collect::<Vec<_>>());
        }
        assert_eq!(s, shuffled_order(6, 10, 7));
        // Orders differ between repetitions and seeds.
        assert!(s.iter().any(|r| r != &s[0]));
        assert_ne!(s, shuffled_order(6, 10, 8));
        assert!(shuffled_order(0, 3, 1).iter().all(|r| r.is_empty()));
    }
}
