//! The sans-IO model of one direction of a link: drop-tail queue, serialization at a
//! rate, random loss, propagation delay and jitter, driven by the caller's clock.
//!
//! Time is a plain `u64` of nanoseconds from an arbitrary epoch, so tests drive the
//! model with virtual time and the I/O loop ([`crate::emulator`]) with a monotonic
//! clock. The model never reads a clock, sleeps or does I/O.
//!
//! A packet offered at `t` starts serializing when the transmitter is free
//! (`max(t, tx_free)`), finishes `len·8/rate` later, and is delivered one propagation
//! delay (plus jitter) after that. Every departure time is computed from the previous
//! one exactly, so scheduling errors of the I/O loop never accumulate into the model.

use std::collections::VecDeque;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::profile::{DirectionSpec, LossModel};

/// Upper bound on packets held by one direction (queued plus propagating): bounds the
/// emulator's memory whatever the profile (a full 1-BDP queue of the satellite profile
/// plus its propagating packets is about 5 000 full-size packets).
pub const DEFAULT_MAX_PACKETS_IN_FLIGHT: usize = 65_536;

const NS_PER_SEC: u128 = 1_000_000_000;

/// What happened to an offered packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Accepted; it will be due at this time (ns).
    Scheduled(u64),
    /// The drop-tail queue (or the in-flight bound) was full.
    DroppedQueue,
    /// Serialized but lost on the wire by the loss model.
    DroppedLoss,
}

/// Counters of one direction.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DirectionStats {
    /// Packets offered.
    pub offered: u64,
    /// Bytes offered.
    pub offered_bytes: u64,
    /// Packets dropped by the full queue.
    pub dropped_queue: u64,
    /// Packets dropped by the loss model.
    pub dropped_loss: u64,
    /// Packets handed out by [`LinkModel::pop_due`].
    pub delivered: u64,
    /// Packets that passed the queue (serialized; some then lost by the loss model).
    pub queued: u64,
    /// Sum over [`queued`](Self::queued) packets of the time each waited in the queue
    /// before its serialization began, ns: divided by `queued` it is the mean queueing
    /// delay, and the difference of two readings gives it over an interval.
    pub queue_wait_ns: u64,
}

/// One direction of a link. `P` is the packet payload the caller carries along.
#[derive(Debug)]
pub struct LinkModel<P> {
    spec: DirectionSpec,
    rng: ChaCha8Rng,
    /// Gilbert–Elliott state: `true` while in the Bad state.
    ge_bad: bool,
    /// Time (ns) at which the transmitter finishes the last accepted packet; packets
    /// offered before it wait in the queue. Never decreases.
    tx_free_ns: u64,
    /// Due time of the last scheduled packet; due times never decrease, so the link
    /// never reorders even with jitter.
    last_due_ns: u64,
    /// Accepted packets in due-time order (non-decreasing), at most
    /// [`DEFAULT_MAX_PACKETS_IN_FLIGHT`].
    in_flight: VecDeque<(u64, P)>,
    stats: DirectionStats,
}

impl<P> LinkModel<P> {
    /// A direction following `spec`, its random choices drawn from `seed`.
    pub fn new(spec: DirectionSpec, seed: u64) -> LinkModel<P> {
        LinkModel {
            spec,
            rng: ChaCha8Rng::seed_from_u64(seed),
            ge_bad: false,
            tx_free_ns: 0,
            last_due_ns: 0,
            in_flight: VecDeque::new(),
            stats: DirectionStats::default(),
        }
    }

    /// The direction's configuration.
    pub fn spec(&self) -> &DirectionSpec {
        &self.spec
    }

    /// Counters so far.
    pub fn stats(&self) -> DirectionStats {
        self.stats
    }

    /// Bytes waiting for the transmitter at `now` (including the unsent part of the
    /// packet being serialized). Zero without a rate.
    pub fn backlog_bytes(&self, now_ns: u64) -> u64 {
        match self.spec.rate_bps {
            None => 0,
            Some(rate) => {
                let busy = u128::from(self.tx_free_ns.saturating_sub(now_ns));
                (busy * u128::from(rate) / 8 / NS_PER_SEC) as u64
            }
        }
    }

    fn lost(&mut self) -> bool {
        match self.spec.loss {
            LossModel::None => false,
            LossModel::Bernoulli { p } => self.rng.gen::<f64>() < p,
            LossModel::GilbertElliott {
                p,
                r,
                loss_good,
                loss_bad,
            } => {
                let flip = self.rng.gen::<f64>();
                self.ge_bad = if self.ge_bad { flip >= r } else { flip < p };
                let loss = if self.ge_bad { loss_bad } else { loss_good };
                self.rng.gen::<f64>() < loss
            }
        }
    }

    /// Offers a packet of `len` bytes arriving at `now_ns`.
    pub fn offer(&mut self, now_ns: u64, len: usize, packet: P) -> Verdict {
        self.stats.offered += 1;
        self.stats.offered_bytes += len as u64;
        if self.in_flight.len() >= DEFAULT_MAX_PACKETS_IN_FLIGHT {
            self.stats.dropped_queue += 1;
            return Verdict::DroppedQueue;
        }
        let sent_ns = match self.spec.rate_bps {
            None => {
                self.stats.queued += 1;
                now_ns
            }
            Some(rate) => {
                if self.backlog_bytes(now_ns) + len as u64 > self.spec.queue_bytes {
                    self.stats.dropped_queue += 1;
                    return Verdict::DroppedQueue;
                }
                let start = self.tx_free_ns.max(now_ns);
                self.stats.queued += 1;
                self.stats.queue_wait_ns += start - now_ns;
                let tx = (len as u128 * 8 * NS_PER_SEC).div_ceil(u128::from(rate)) as u64;
                self.tx_free_ns = start + tx;
                self.tx_free_ns
            }
        };
        if self.lost() {
            self.stats.dropped_loss += 1;
            return Verdict::DroppedLoss;
        }
        let mut due = sent_ns + self.spec.delay.as_nanos() as u64;
        if !self.spec.jitter.is_zero() {
            due += self.rng.gen_range(0..=self.spec.jitter.as_nanos() as u64);
        }
        let due = due.max(self.last_due_ns);
        self.last_due_ns = due;
        self.in_flight.push_back((due, packet));
        Verdict::Scheduled(due)
    }

    /// Due time of the next packet to deliver, if any.
    pub fn next_due(&self) -> Option<u64> {
        self.in_flight.front().map(|(t, _)| *t)
    }

    /// Takes the next packet if it is due at `now_ns`, with its due time.
    pub fn pop_due(&mut self, now_ns: u64) -> Option<(u64, P)> {
        match self.in_flight.front() {
            Some((t, _)) if *t <= now_ns => {
                self.stats.delivered += 1;
                self.in_flight.pop_front()
            }
            _ => None,
        }
    }

    /// Packets currently held (queued or propagating).
    pub fn in_flight(&self) -> usize {
        self.in_flight.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const MS: u64 = 1_000_000;

    fn spec(rate_mbit: u64, delay_ms: u64, queue: u64) -> DirectionSpec {
        DirectionSpec {
            delay: Duration::from_millis(delay_ms),
            rate_bps: Some(rate_mbit * 1_000_000),
            queue_bytes: queue,
            loss: LossModel::None,
            jitter: Duration::ZERO,
        }
    }

    #[test]
    fn lone_packet_takes_serialization_plus_delay() {
        let mut m = LinkModel::new(spec(10, 60, 100_000), 1);
        // 1250 bytes at 10 Mbit/s = 1 ms.
        assert_eq!(m.offer(5 * MS, 1250, 'a'), Verdict::Scheduled(66 * MS));
        assert_eq!(m.pop_due(66 * MS - 1), None);
        assert_eq!(m.pop_due(66 * MS), Some((66 * MS, 'a')));
        assert_eq!(m.next_due(), None);
    }

    #[test]
    fn back_to_back_packets_leave_at_the_rate_without_drift() {
        let mut m = LinkModel::new(spec(100, 10, 10_000_000), 1);
        // 1000 packets offered at once: the k-th is due at (k+1)·120 µs + 10 ms exactly.
        for k in 0..1000u64 {
            let v = m.offer(0, 1500, k);
            assert_eq!(v, Verdict::Scheduled((k + 1) * 120_000 + 10 * MS));
        }
        // Delivering late (a slow I/O loop) does not shift later due times.
        let mut last = 0;
        while let Some((due, k)) = m.pop_due(u64::MAX) {
            assert_eq!(due, (k + 1) * 120_000 + 10 * MS);
            assert!(due >= last);
            last = due;
        }
        assert_eq!(m.stats().delivered, 1000);
    }

    #[test]
    fn drop_tail_queue_is_limited_in_bytes_and_drains_at_the_rate() {
        // 10 Mbit/s, queue 15 000 bytes = 10 packets of 1500.
        let mut m = LinkModel::new(spec(10, 0, 15_000), 1);
        let accepted = (0..20)
            .filter(|_| matches!(m.offer(0, 1500, ()), Verdict::Scheduled(_)))
            .count();
        assert_eq!(accepted, 10);
        assert_eq!(m.stats().dropped_queue, 10);
        assert_eq!(m.backlog_bytes(0), 15_000);
        // After 1.2 ms (one packet's serialization) there is room for one more.
        assert_eq!(m.backlog_bytes(1_200_000), 13_500);
        assert!(matches!(
            m.offer(1_200_000, 1500, ()),
            Verdict::Scheduled(_)
        ));
        assert_eq!(m.offer(1_200_000, 1500, ()), Verdict::DroppedQueue);
    }

    #[test]
    fn queueing_delay_is_summed_over_the_packets_that_passed_the_queue() {
        // 10 Mbit/s: 1.2 ms per 1500-byte packet. Four at once wait 0, 1.2, 2.4 and 3.6 ms.
        let mut m = LinkModel::new(spec(10, 0, 15_000), 1);
        for _ in 0..4 {
            assert!(matches!(m.offer(0, 1500, ()), Verdict::Scheduled(_)));
        }
        assert_eq!(m.stats().queued, 4);
        assert_eq!(m.stats().queue_wait_ns, 7_200_000);
        // One arriving after the queue drained waits nothing; a dropped one is not counted.
        m.offer(10 * MS, 1500, ());
        for _ in 0..20 {
            m.offer(10 * MS, 1500, ());
        }
        let st = m.stats();
        assert_eq!(st.queued, 4 + 10);
        assert_eq!(st.dropped_queue, 11);
        // 0 + 1.2 + ... + 10.8 ms for the ten accepted at 10 ms.
        assert_eq!(st.queue_wait_ns, 7_200_000 + 54_000_000);
    }

    #[test]
    fn packets_in_flight_are_bounded() {
        let mut m = LinkModel::new(DirectionSpec::delay_only(Duration::from_secs(1)), 1);
        for _ in 0..DEFAULT_MAX_PACKETS_IN_FLIGHT {
            assert!(matches!(m.offer(0, 40, ()), Verdict::Scheduled(_)));
        }
        assert_eq!(m.offer(0, 40, ()), Verdict::DroppedQueue);
        assert_eq!(m.in_flight(), DEFAULT_MAX_PACKETS_IN_FLIGHT);
    }

    #[test]
    fn without_a_rate_only_delay_applies() {
        let mut m = LinkModel::new(DirectionSpec::delay_only(Duration::from_millis(5)), 1);
        for _ in 0..100 {
            assert_eq!(m.offer(MS, 1500, ()), Verdict::Scheduled(6 * MS));
        }
        assert_eq!(m.backlog_bytes(MS), 0);
    }

    #[test]
    fn bernoulli_loss_matches_its_rate_and_is_seeded() {
        let mut s = spec(1000, 1, 64 << 20);
        s.loss = LossModel::Bernoulli { p: 0.03 };
        let run = |seed| {
            let mut m = LinkModel::new(s.clone(), seed);
            for k in 0..100_000u64 {
                m.offer(k * 20_000, 100, ());
                while m.pop_due(k * 20_000).is_some() {}
            }
            assert_eq!(m.stats().dropped_queue, 0);
            m.stats().dropped_loss
        };
        let lost = run(7);
        assert_eq!(lost, run(7), "same seed, same losses");
        assert_ne!(lost, run(8));
        let rate = lost as f64 / 100_000.0;
        assert!((rate - 0.03).abs() < 0.003, "measured {rate}");
    }

    #[test]
    fn gilbert_elliott_loss_is_bursty_with_the_stationary_mean() {
        let mut s = spec(1000, 1, 64 << 20);
        s.loss = LossModel::GilbertElliott {
            p: 0.01,
            r: 0.2,
            loss_good: 0.0,
            loss_bad: 1.0,
        };
        let mut m = LinkModel::new(s.clone(), 3);
        let mut lost_flags = Vec::new();
        for k in 0..200_000u64 {
            lost_flags.push(m.offer(k * 20_000, 100, ()) == Verdict::DroppedLoss);
            while m.pop_due(k * 20_000).is_some() {}
        }
        let rate = lost_flags.iter().filter(|l| **l).count() as f64 / 200_000.0;
        let expected = s.loss.mean_loss();
        assert!(
            (rate - expected).abs() < 0.1 * expected,
            "{rate} vs {expected}"
        );
        // Mean burst length is 1/r = 5 packets.
        let bursts = lost_flags.windows(2).filter(|w| !w[0] && w[1]).count();
        let mean_burst = (rate * 200_000.0) / bursts as f64;
        assert!((4.0..6.0).contains(&mean_burst), "mean burst {mean_burst}");
    }

    #[test]
    fn jitter_delays_within_bounds_and_never_reorders() {
        let mut s = spec(100, 50, 64 << 20);
        s.jitter = Duration::from_millis(10);
        let mut m = LinkModel::new(s, 11);
        let mut last = 0;
        let mut max_extra = 0;
        for k in 0..10_000u64 {
            let now = k * 200_000;
            let Verdict::Scheduled(due) = m.offer(now, 1500, ()) else {
                panic!("no loss configured")
            };
            assert!(due >= last);
            let base = now + 120_000 + 50 * MS;
            assert!(due >= base);
            max_extra = max_extra.max(due - base);
            last = due;
        }
        assert!(max_extra <= 10 * MS + 200_000 * 50, "{max_extra}");
        assert!(max_extra > 5 * MS);
    }

    proptest::proptest! {
        /// Whatever the arrivals: due times never decrease, no packet is due before
        /// its arrival plus its own serialization plus the delay, and the bytes
        /// waiting never exceed the queue.
        #[test]
        fn model_invariants(
            arrivals in proptest::collection::vec((0u64..2_000_000, 40usize..1500), 1..400),
            rate_mbit in 1u64..200,
            queue in 6_000u64..200_000,
            delay_us in 0u64..50_000,
        ) {
            let mut s = spec(rate_mbit, 0, queue);
            s.delay = Duration::from_micros(delay_us);
            let mut m = LinkModel::new(s, 5);
            let mut now = 0;
            let mut last_due = 0;
            for (gap, len) in arrivals {
                now += gap;
                let tx = (len as u64 * 8 * 1000).div_ceil(rate_mbit);
                if let Verdict::Scheduled(due) = m.offer(now, len, ()) {
                    proptest::prop_assert!(due >= last_due);
                    proptest::prop_assert!(due >= now + tx + delay_us * 1000);
                    last_due = due;
                }
                proptest::prop_assert!(m.backlog_bytes(now) <= queue);
                while m.pop_due(now).is_some() {}
            }
            let st = m.stats();
            proptest::prop_assert_eq!(st.offered, st.delivered + st.dropped_queue + st.dropped_loss + m.in_flight() as u64);
        }
    }
}
