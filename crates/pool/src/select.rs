//! Carrier selection for `carrier = "auto"`: a sans-IO state machine that says which carrier
//! (QUIC or TCP) new streams of one remote's pool go to, and when to try QUIC again.
//!
//! What it does: QUIC is preferred. Inputs are the outcome of a QUIC attempt
//! ([`Selector::quic_ready`], [`Selector::quic_failed`]), delivery progress of the QUIC
//! connections ([`Selector::observe`]: whether the peer acknowledged anything new since the
//! last sample) and
//! time (every input carries `now`; [`Selector::poll_timeout`] says when the next timer fires,
//! [`Selector::handle_timeout`] fires it). Outputs are [`Selector::carrier`] and
//! [`Selector::poll_action`]: start a QUIC attempt, abandon QUIC (its connections are closed
//! so their streams end with a reason), or a switch to log and count.
//!
//! - A QUIC attempt that is not up within [`SelectorConfig::handshake`] fails.
//! - QUIC whose packets go unacknowledged for [`SelectorConfig::stall`] while up is
//!   abandoned: stalled (UDP black-holed, one way or both, or throttled by a middlebox).
//! - After a failure new streams go to TCP and QUIC is tried again after a jittered
//!   exponential back-off ([`crate::Backoff`], from [`SelectorConfig::probe_min`] to
//!   [`SelectorConfig::probe_max`]).
//! - Hysteresis: after a failure, QUIC takes new streams again only once it has been up and
//!   delivering for [`SelectorConfig::confirm`]; the back-off returns to its minimum only
//!   after QUIC has carried the pool for [`SelectorConfig::stable`], so a path that works for
//!   a few seconds and then stalls again is tried less and less often instead of flapping.
//!
//! What it does NOT do: no I/O, no clock, no sockets (the driver in `auto.rs`
//! feeds it), and it does not move streams between carriers.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::backoff::Backoff;

/// A pool carrier.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CarrierKind {
    /// QUIC over UDP.
    Quic,
    /// The mux over TCP (+TLS).
    Tcp,
}

impl CarrierKind {
    /// Its name in logs and metrics: `quic` or `tcp`.
    pub fn name(self) -> &'static str {
        match self {
            CarrierKind::Quic => "quic",
            CarrierKind::Tcp => "tcp",
        }
    }
}

impl std::fmt::Display for CarrierKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Smallest stall bound: below this a few lost keep-alives on a sound path would count.
pub const MIN_STALL: Duration = Duration::from_secs(1);
/// Smallest QUIC handshake bound.
pub const MIN_HANDSHAKE: Duration = Duration::from_secs(2);
/// First delay before QUIC is tried again after a failure.
pub const DEFAULT_PROBE_MIN: Duration = Duration::from_secs(1);
/// Largest delay between two QUIC attempts while QUIC keeps failing.
pub const DEFAULT_PROBE_MAX: Duration = Duration::from_secs(30);
/// How long QUIC must have carried the pool before the back-off returns to its minimum.
pub const DEFAULT_STABLE: Duration = Duration::from_secs(60);

/// The bounds of a [`Selector`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SelectorConfig {
    /// A QUIC attempt not up within this fails.
    pub handshake: Duration,
    /// QUIC up but with nothing acknowledged for this long is stalled.
    pub stall: Duration,
    /// After a failure, QUIC must be up and delivering this long before it takes new streams.
    pub confirm: Duration,
    /// First back-off delay before another QUIC attempt.
    pub probe_min: Duration,
    /// Largest back-off delay.
    pub probe_max: Duration,
    /// QUIC carrying the pool this long resets the back-off.
    pub stable: Duration,
}

impl SelectorConfig {
    /// Bounds for a link of round-trip time `rtt`, QUIC keep-alive period `keep_alive` (the
    /// edge sends a PING when a connection has been quiet this long, so a sound path
    /// delivers at least its ACK every `keep_alive` + `rtt`), QUIC idle timeout `idle` and
    /// dial timeout `connect`:
    ///
    /// - stall = 3 × keep-alive + 2 × RTT (three keep-alives in a row unanswered), at least
    ///   [`MIN_STALL`], at most half the idle timeout (quinn would close the connection then);
    /// - handshake = 8 × RTT (a QUIC + TLS handshake and the HELLO take 2–3, the rest
    ///   covers lost Initials), at least [`MIN_HANDSHAKE`], at most `connect`;
    /// - confirm = the stall bound (QUIC proved it delivers for as long as a stall takes to
    ///   detect).
    pub fn for_link(
        rtt: Duration,
        keep_alive: Duration,
        idle: Duration,
        connect: Duration,
    ) -> Self {
        let stall = (keep_alive * 3 + rtt * 2).max(MIN_STALL).min(idle / 2);
        let handshake = (rtt * 8).max(MIN_HANDSHAKE).min(connect.max(MIN_HANDSHAKE));
        SelectorConfig {
            handshake,
            stall: stall.max(MIN_STALL),
            confirm: stall.max(MIN_STALL),
            probe_min: DEFAULT_PROBE_MIN,
            probe_max: DEFAULT_PROBE_MAX,
            stable: DEFAULT_STABLE,
        }
    }

    /// The keep-alive period QUIC needs under `carrier = "auto"` for a link of `rtt`: four
    /// round trips, at least 250 ms, at most `configured`; short enough that a stall is seen
    /// within seconds, one small packet each way per period when idle.
    pub fn keep_alive(rtt: Duration, configured: Duration) -> Duration {
        (rtt * 4).max(Duration::from_millis(250)).min(configured)
    }
}

/// What the driver must do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Dial QUIC (a fresh set of connections).
    StartQuic,
    /// Close the QUIC connections: their streams end with `reason`.
    AbandonQuic {
        /// Why, for the log and the streams' resets.
        reason: String,
    },
    /// New streams now go to `to`: log and count it.
    Switched {
        /// The carrier before, `None` at the first choice.
        from: Option<CarrierKind>,
        /// The carrier now.
        to: CarrierKind,
        /// Why.
        reason: String,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// A QUIC attempt is under way since `since`.
    Dialing { since: Instant },
    /// QUIC is up since `since`; the peer last acknowledged something new at `last_rx`.
    Up { since: Instant, last_rx: Instant },
    /// QUIC failed; the next attempt is at `at`.
    Waiting { at: Instant },
}

/// The carrier choice of one remote's pool (see the module doc).
#[derive(Debug)]
pub struct Selector {
    cfg: SelectorConfig,
    /// Where new streams go; `None` until the first choice (then TCP takes them if it is up).
    carrier: Option<CarrierKind>,
    phase: Phase,
    /// QUIC has failed since the last stable period: returning needs `confirm`.
    failed: bool,
    backoff: Backoff,
    actions: VecDeque<Action>,
}

impl Selector {
    /// A selector starting its first QUIC attempt at `now` (the first action is
    /// [`Action::StartQuic`]).
    pub fn new(cfg: SelectorConfig, seed: u64, now: Instant) -> Selector {
        let backoff = Backoff::new(cfg.probe_min, cfg.probe_max, seed);
        let mut actions = VecDeque::new();
        actions.push_back(Action::StartQuic);
        Selector {
            cfg,
            carrier: None,
            phase: Phase::Dialing { since: now },
            failed: false,
            backoff,
            actions,
        }
    }

    /// Where new streams go now (`None` before the first choice).
    pub fn carrier(&self) -> Option<CarrierKind> {
        self.carrier
    }

    /// The bounds in use.
    pub fn config(&self) -> &SelectorConfig {
        &self.cfg
    }

    /// The next thing the driver must do, if any.
    pub fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    /// The QUIC attempt under way has a connection up.
    pub fn quic_ready(&mut self, now: Instant) {
        if let Phase::Dialing { .. } = self.phase {
            self.phase = Phase::Up {
                since: now,
                last_rx: now,
            };
            if !self.failed {
                self.switch(CarrierKind::Quic, "QUIC is up".into());
            }
        }
    }

    /// The QUIC attempt failed, or every QUIC connection was lost.
    pub fn quic_failed(&mut self, now: Instant, reason: &str) {
        if let Phase::Waiting { .. } = self.phase {
            return;
        }
        self.fail(now, reason.to_owned());
    }

    /// A delivery sample while QUIC is up: `acked` says whether the peer acknowledged
    /// anything new since the previous sample.
    pub fn observe(&mut self, now: Instant, acked: bool) {
        if let Phase::Up { since, last_rx } = &mut self.phase {
            if acked {
                *last_rx = now;
            }
            let (since, last_rx) = (*since, *last_rx);
            self.check_up(now, since, last_rx);
        }
    }

    /// When [`Selector::handle_timeout`] must run next.
    pub fn poll_timeout(&self) -> Instant {
        match self.phase {
            Phase::Dialing { since } => since + self.cfg.handshake,
            Phase::Waiting { at } => at,
            Phase::Up { since, last_rx } => {
                let mut t = last_rx + self.cfg.stall;
                if self.carrier != Some(CarrierKind::Quic) {
                    t = t.min(since + self.cfg.confirm);
                } else if self.failed {
                    t = t.min(since + self.cfg.stable);
                }
                t
            }
        }
    }

    /// Fires the timers due at `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        match self.phase {
            Phase::Dialing { since } if now >= since + self.cfg.handshake => {
                let why = format!(
                    "QUIC handshake not complete within {} ms",
                    self.cfg.handshake.as_millis()
                );
                self.fail(now, why);
            }
            Phase::Waiting { at } if now >= at => {
                self.phase = Phase::Dialing { since: now };
                self.actions.push_back(Action::StartQuic);
            }
            Phase::Up { since, last_rx } => self.check_up(now, since, last_rx),
            _ => {}
        }
    }

    fn check_up(&mut self, now: Instant, since: Instant, last_rx: Instant) {
        if now.saturating_duration_since(last_rx) >= self.cfg.stall {
            let why = format!(
                "QUIC stalled: nothing acknowledged for {} ms",
                now.saturating_duration_since(last_rx).as_millis()
            );
            self.fail(now, why);
            return;
        }
        let up_for = now.saturating_duration_since(since);
        if self.carrier != Some(CarrierKind::Quic) && up_for >= self.cfg.confirm {
            self.switch(
                CarrierKind::Quic,
                format!("QUIC up and delivering for {} ms", up_for.as_millis()),
            );
        } else if self.carrier == Some(CarrierKind::Quic)
            && self.failed
            && up_for >= self.cfg.stable
        {
            self.failed = false;
            self.backoff.reset();
        }
    }

    fn fail(&mut self, now: Instant, reason: String) {
        self.failed = true;
        if !matches!(self.phase, Phase::Waiting { .. }) {
            self.actions.push_back(Action::AbandonQuic {
                reason: reason.clone(),
            });
        }
        let delay = self.backoff.next_delay();
        self.phase = Phase::Waiting { at: now + delay };
        if self.carrier != Some(CarrierKind::Tcp) {
            self.switch(CarrierKind::Tcp, reason);
        }
    }

    fn switch(&mut self, to: CarrierKind, reason: String) {
        let from = self.carrier.replace(to);
        if from != Some(to) {
            self.actions
                .push_back(Action::Switched { from, to, reason });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RTT: Duration = Duration::from_millis(130);

    fn cfg() -> SelectorConfig {
        SelectorConfig::for_link(
            RTT,
            SelectorConfig::keep_alive(RTT, Duration::from_secs(10)),
            Duration::from_secs(30),
            Duration::from_secs(10),
        )
    }

    fn actions(s: &mut Selector) -> Vec<Action> {
        std::iter::from_fn(|| s.poll_action()).collect()
    }

    fn switched_to(a: &[Action]) -> Vec<CarrierKind> {
        a.iter()
            .filter_map(|a| match a {
                Action::Switched { to, .. } => Some(*to),
                _ => None,
            })
            .collect()
    }

    /// Runs `s` from `now` for `d`, sampling every `step` with `received` from `rx`, firing
    /// timers; returns the end time and every action.
    fn run(
        s: &mut Selector,
        mut now: Instant,
        d: Duration,
        step: Duration,
        rx: impl Fn(Instant) -> bool,
        mut on_start: impl FnMut(&mut Selector, Instant),
    ) -> (Instant, Vec<Action>) {
        let end = now + d;
        let mut all = Vec::new();
        while now < end {
            now += step;
            s.handle_timeout(now);
            s.observe(now, rx(now));
            while let Some(a) = s.poll_action() {
                if a == Action::StartQuic {
                    on_start(s, now);
                }
                all.push(a);
            }
        }
        (now, all)
    }

    #[test]
    fn bounds_follow_the_link() {
        let c = cfg();
        assert_eq!(
            SelectorConfig::keep_alive(RTT, Duration::from_secs(10)),
            Duration::from_millis(520)
        );
        assert_eq!(c.stall, Duration::from_millis(3 * 520 + 2 * 130));
        assert_eq!(c.handshake, MIN_HANDSHAKE.max(RTT * 8));
        // A satellite link: longer, still seconds; never beyond half the idle timeout.
        let sat = Duration::from_millis(600);
        let s = SelectorConfig::for_link(
            sat,
            SelectorConfig::keep_alive(sat, Duration::from_secs(10)),
            Duration::from_secs(30),
            Duration::from_secs(10),
        );
        assert_eq!(s.stall, Duration::from_millis(3 * 2400 + 1200));
        assert_eq!(s.handshake, Duration::from_millis(4800));
        let tiny = SelectorConfig::for_link(
            sat,
            Duration::from_secs(10),
            Duration::from_secs(8),
            Duration::from_secs(10),
        );
        assert_eq!(tiny.stall, Duration::from_secs(4));
    }

    #[test]
    fn quic_first_when_it_comes_up() {
        let t0 = Instant::now();
        let mut s = Selector::new(cfg(), 1, t0);
        assert_eq!(actions(&mut s), vec![Action::StartQuic]);
        assert_eq!(s.carrier(), None);
        s.quic_ready(t0 + RTT * 3);
        assert_eq!(s.carrier(), Some(CarrierKind::Quic));
        let a = actions(&mut s);
        assert!(matches!(
            &a[..],
            [Action::Switched {
                from: None,
                to: CarrierKind::Quic,
                ..
            }]
        ));
    }

    #[test]
    fn handshake_failure_goes_to_tcp() {
        let t0 = Instant::now();
        let mut s = Selector::new(cfg(), 1, t0);
        actions(&mut s);
        // Nothing before the bound.
        s.handle_timeout(t0 + cfg().handshake - Duration::from_millis(1));
        assert!(actions(&mut s).is_empty());
        assert_eq!(s.poll_timeout(), t0 + cfg().handshake);
        s.handle_timeout(t0 + cfg().handshake);
        assert_eq!(s.carrier(), Some(CarrierKind::Tcp));
        let a = actions(&mut s);
        assert!(matches!(a[0], Action::AbandonQuic { .. }));
        assert!(
            matches!(&a[1], Action::Switched { from: None, to: CarrierKind::Tcp, reason } if reason.contains("handshake"))
        );
        // An explicit failure (the remote refused, an older remote without QUIC) is the same.
        let mut s = Selector::new(cfg(), 1, t0);
        actions(&mut s);
        s.quic_failed(t0 + RTT, "connection refused");
        assert_eq!(s.carrier(), Some(CarrierKind::Tcp));
    }

    #[test]
    fn stall_moves_to_tcp_within_the_bound() {
        let t0 = Instant::now();
        let mut s = Selector::new(cfg(), 1, t0);
        s.quic_ready(t0);
        actions(&mut s);
        let step = Duration::from_millis(100);
        // Delivering: stays on QUIC.
        let (t1, a) = run(
            &mut s,
            t0,
            Duration::from_secs(20),
            step,
            |_| true,
            |_, _| {},
        );
        assert!(a.is_empty(), "{a:?}");
        // Black hole from t1: TCP within the stall bound (plus one sample).
        let (_, a) = run(
            &mut s,
            t1,
            Duration::from_secs(10),
            step,
            |_| false,
            |_, _| {},
        );
        let at = a
            .iter()
            .position(|a| {
                matches!(
                    a,
                    Action::Switched {
                        to: CarrierKind::Tcp,
                        ..
                    }
                )
            })
            .expect("switched to TCP");
        assert!(matches!(a[at - 1], Action::AbandonQuic { .. }));
        assert_eq!(s.carrier(), Some(CarrierKind::Tcp));
        // The switch happened at the first sample at or after t1 + stall.
        let mut s2 = Selector::new(cfg(), 1, t0);
        s2.quic_ready(t0);
        s2.observe(t1, true);
        actions(&mut s2);
        s2.handle_timeout(t1 + cfg().stall - step);
        assert_eq!(s2.carrier(), Some(CarrierKind::Quic));
        assert_eq!(s2.poll_timeout(), t1 + cfg().stall);
        s2.handle_timeout(t1 + cfg().stall);
        assert_eq!(s2.carrier(), Some(CarrierKind::Tcp));
    }

    #[test]
    fn probes_back_off_while_quic_keeps_failing() {
        let t0 = Instant::now();
        let c = cfg();
        let mut s = Selector::new(c.clone(), 7, t0);
        actions(&mut s);
        let mut now;
        let mut gaps = Vec::new();
        let mut last_start = t0;
        for _ in 0..8 {
            // Every attempt times out.
            now = s.poll_timeout();
            s.handle_timeout(now);
            actions(&mut s);
            now = s.poll_timeout();
            s.handle_timeout(now);
            assert_eq!(actions(&mut s), vec![Action::StartQuic]);
            gaps.push(now - last_start - c.handshake);
            last_start = now;
        }
        // Jittered ×2 growth between probe_min and probe_max: each delay within
        // [ceiling/2, ceiling], the ceiling doubling up to the maximum.
        let mut ceiling = c.probe_min;
        for g in &gaps {
            assert!(*g >= ceiling / 2 && *g <= ceiling, "{g:?} vs {ceiling:?}");
            ceiling = (ceiling * 2).min(c.probe_max);
        }
        assert!(gaps[5] > gaps[0] * 4);
        assert_eq!(s.carrier(), Some(CarrierKind::Tcp));
    }

    #[test]
    fn returns_to_quic_after_a_successful_probe_and_confirm() {
        let t0 = Instant::now();
        let c = cfg();
        let mut s = Selector::new(c.clone(), 3, t0);
        s.quic_ready(t0);
        actions(&mut s);
        s.quic_failed(t0 + Duration::from_secs(1), "stalled");
        actions(&mut s);
        assert_eq!(s.carrier(), Some(CarrierKind::Tcp));
        let probe_at = s.poll_timeout();
        assert!(probe_at <= t0 + Duration::from_secs(1) + c.probe_min);
        s.handle_timeout(probe_at);
        assert_eq!(actions(&mut s), vec![Action::StartQuic]);
        let up = probe_at + RTT * 3;
        s.quic_ready(up);
        // Up, but not yet confirmed: new streams stay on TCP.
        assert_eq!(s.carrier(), Some(CarrierKind::Tcp));
        s.observe(up + c.confirm / 2, true);
        assert_eq!(s.carrier(), Some(CarrierKind::Tcp));
        assert_eq!(s.poll_timeout(), up + c.confirm);
        s.observe(up + c.confirm, true);
        assert_eq!(s.carrier(), Some(CarrierKind::Quic));
        assert!(matches!(
            &actions(&mut s)[..],
            [Action::Switched {
                from: Some(CarrierKind::Tcp),
                to: CarrierKind::Quic,
                ..
            }]
        ));
    }

    #[test]
    fn no_flapping_on_a_path_that_keeps_stalling() {
        // QUIC handshakes fine but every connection stalls 1.5 confirm periods after it comes
        // up: switches stay rare, and the attempts grow apart.
        let t0 = Instant::now();
        let c = cfg();
        let mut s = Selector::new(c.clone(), 5, t0);
        let up_at = std::cell::Cell::new(t0);
        let window = c.confirm + c.confirm / 2;
        let rx = |now: Instant| now < up_at.get() + window;
        s.quic_ready(t0);
        actions(&mut s);
        let (_, a) = run(
            &mut s,
            t0,
            Duration::from_secs(300),
            Duration::from_millis(100),
            rx,
            |s, now| {
                up_at.set(now);
                s.quic_ready(now);
            },
        );
        let starts: Vec<_> = a.iter().filter(|a| **a == Action::StartQuic).collect();
        let switches = switched_to(&a);
        // Back-off 1, 2, 4, 8, 16, 30, 30... s (each jittered down to half): at most ~20
        // attempts in 300 s, where a fixed 1 s retry would make ~80.
        assert!(starts.len() <= 20, "{} attempts", starts.len());
        // Every return to QUIC is followed by a stall, so switches come in pairs, each pair
        // at least `confirm` + `stall` apart.
        assert!(switches.len() <= 2 * starts.len() + 1);
        assert!(switches.len() >= 2, "{switches:?}");
        // The back-off never reset: QUIC never carried the pool for `stable`.
        assert!(s.failed);
    }

    #[test]
    fn a_stable_period_resets_the_backoff() {
        let t0 = Instant::now();
        let c = cfg();
        let mut s = Selector::new(c.clone(), 9, t0);
        s.quic_ready(t0);
        // Three failures in a row grow the back-off.
        let mut now = t0;
        for _ in 0..3 {
            s.quic_failed(now, "stalled");
            now = s.poll_timeout();
            s.handle_timeout(now);
        }
        actions(&mut s);
        s.quic_ready(now);
        let (end, a) = run(
            &mut s,
            now,
            c.stable + c.confirm * 2,
            Duration::from_millis(100),
            |_| true,
            |_, _| {},
        );
        assert_eq!(switched_to(&a), vec![CarrierKind::Quic]);
        assert!(!s.failed);
        // The next failure waits at most probe_min again.
        s.quic_failed(end, "stalled");
        assert!(s.poll_timeout() <= end + c.probe_min);
    }
}
