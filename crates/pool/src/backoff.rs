//! Jittered exponential backoff for re-dialing pool connections.

use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Delays grow ×2 from `min` to `max`; each is drawn uniformly from
/// [delay/2, delay] ("equal jitter") so that N connections lost together do not
/// re-dial in lockstep. The generator is seeded, so a run is reproducible.
#[derive(Debug)]
pub struct Backoff {
    min: Duration,
    max: Duration,
    /// The next un-jittered delay; invariant `min <= next <= max`.
    next: Duration,
    rng: StdRng,
}

impl Backoff {
    /// A backoff between `min` and `max` (`min <= max`), seeded with `seed`.
    pub fn new(min: Duration, max: Duration, seed: u64) -> Self {
        let max = max.max(min);
        Backoff {
            min,
            max,
            next: min,
            rng: StdRng::seed_from_u64(seed),
        }
    }

    /// The delay before the next attempt.
    pub fn next_delay(&mut self) -> Duration {
        let d = self.next;
        self.next = (self.next * 2).min(self.max);
        let half = d / 2;
        half + self.rng.gen_range(Duration::ZERO..=d - half)
    }

    /// Back to `min` (after a connection that came up).
    pub fn reset(&mut self) {
        self.next = self.min;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_within_bounds_and_resets() {
        let min = Duration::from_millis(100);
        let max = Duration::from_secs(2);
        let mut b = Backoff::new(min, max, 7);
        let mut ceiling = min;
        for _ in 0..10 {
            let d = b.next_delay();
            assert!(d >= ceiling / 2 && d <= ceiling, "{d:?} vs {ceiling:?}");
            ceiling = (ceiling * 2).min(max);
        }
        b.reset();
        assert!(b.next_delay() <= min);
    }

    #[test]
    fn same_seed_same_delays() {
        let mk = || Backoff::new(Duration::from_millis(10), Duration::from_secs(1), 42);
        let (mut a, mut b) = (mk(), mk());
        for _ in 0..8 {
            assert_eq!(a.next_delay(), b.next_delay());
        }
    }
}
