//! Between two trials of a cell: wait until the emulated long link is quiet, so that what one
//! trial leaves behind (a sender still pushing into a client that has gone, retransmissions to
//! it, a queue draining at the bottleneck) is not timed as part of the next trial.
//!
//! The runner sleeps the suite's gap after each trial and then reads the long link's counters
//! (both directions' offered bytes) over windows of [`WINDOW`]: the link is quiet once a window
//! carries less than [`QUIET_SHARE`] of what the link's rate would in it (keep-alives and
//! pool probes stay far below; a transfer's tail does not). It gives up after [`MAX_WAIT`] and
//! says so, and the next trial runs anyway.
//!
//! What it does NOT do: look at the access or origin links (only the long link is slow enough
//! for a leftover to matter), stop anything that is still sending, or change what a trial
//! measures. A bed without an emulated link ([`crate::bed::VethBed`]) is always quiet.

use std::time::Duration;

/// Length of one reading of the link's counters.
pub const WINDOW: Duration = Duration::from_millis(200);
/// Share of the link's rate below which a window counts as quiet.
pub const QUIET_SHARE: f64 = 0.02;
/// Longest wait for a quiet link after the gap.
pub const MAX_WAIT: Duration = Duration::from_secs(30);

/// Whether `bytes` carried over `window` are below [`QUIET_SHARE`] of `rate_bps`.
pub fn quiet(bytes: u64, window: Duration, rate_bps: f64) -> bool {
    (bytes as f64) * 8.0 < QUIET_SHARE * rate_bps * window.as_secs_f64()
}

/// How one wait ended.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Settled {
    /// Time spent in windows that were not quiet (zero when the first window was).
    pub busy: Duration,
    /// Whether the link was quiet by the end ([`MAX_WAIT`] not reached).
    pub quiet: bool,
}

/// Reads the link's byte counter (`read`, `None` without an emulated link) over windows of
/// [`WINDOW`] (`sleep` waits one) until one is quiet for `rate_bps`, at most [`MAX_WAIT`].
pub fn wait_quiet(
    rate_bps: f64,
    mut read: impl FnMut() -> Option<u64>,
    mut sleep: impl FnMut(Duration),
) -> Settled {
    let mut busy = Duration::ZERO;
    let Some(mut before) = read() else {
        return Settled { busy, quiet: true };
    };
    loop {
        sleep(WINDOW);
        let Some(after) = read() else {
            return Settled { busy, quiet: true };
        };
        if quiet(after.saturating_sub(before), WINDOW, rate_bps) {
            return Settled { busy, quiet: true };
        }
        busy += WINDOW;
        if busy >= MAX_WAIT {
            return Settled { busy, quiet: false };
        }
        before = after;
    }
}

/// What the waits of one cell came to, for its log line.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct CellWaits {
    /// Trials measured.
    pub trials: usize,
    /// Trials that found the link busy after the gap.
    pub busy: usize,
    /// The longest wait and the system whose trial came before it.
    pub longest: Option<(Duration, String)>,
    /// Waits that ended at [`MAX_WAIT`] with the link still busy.
    pub gave_up: usize,
}

impl CellWaits {
    /// Counts the wait that followed a trial of `after`.
    pub fn add(&mut self, s: Settled, after: &str) {
        self.trials += 1;
        if s.busy > Duration::ZERO {
            self.busy += 1;
            if self.longest.as_ref().is_none_or(|(d, _)| s.busy > *d) {
                self.longest = Some((s.busy, after.to_string()));
            }
        }
        if !s.quiet {
            self.gave_up += 1;
        }
    }

    /// One line for the run's log.
    pub fn line(&self) -> String {
        match &self.longest {
            None => format!(
                "long link quiet after the gap following each of {} trials",
                self.trials
            ),
            Some((d, sys)) => {
                let gave_up = if self.gave_up > 0 {
                    format!(
                        "; {} still busy after {} s",
                        self.gave_up,
                        MAX_WAIT.as_secs()
                    )
                } else {
                    String::new()
                };
                format!(
                    "long link still busy after the gap following {} of {} trials (longest \
                     {:.1} s more, after {sys}){gave_up}",
                    self.busy,
                    self.trials,
                    d.as_secs_f64(),
                )
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 10 Mbit/s: a 200 ms window carries 250 000 bytes; quiet below 5 000.
    const RATE: f64 = 10e6;

    /// A counter that grows by `steps[i]` in the i-th window, then by nothing.
    fn run(steps: &[u64]) -> (Settled, usize) {
        let total = std::cell::Cell::new(0u64);
        let mut windows = 0usize;
        let s = wait_quiet(
            RATE,
            || Some(total.get()),
            |d| {
                assert_eq!(d, WINDOW);
                total.set(total.get() + steps.get(windows).copied().unwrap_or(0));
                windows += 1;
            },
        );
        (s, windows)
    }

    #[test]
    fn a_quiet_link_costs_one_window() {
        assert_eq!(
            run(&[4_000]),
            (
                Settled {
                    busy: Duration::ZERO,
                    quiet: true
                },
                1
            )
        );
    }

    #[test]
    fn a_draining_transfer_is_waited_for() {
        let (s, windows) = run(&[250_000, 250_000, 120_000, 3_000]);
        assert_eq!(windows, 4);
        assert_eq!(s.busy, WINDOW * 3);
        assert!(s.quiet);
    }

    #[test]
    fn the_wait_is_bounded() {
        let steps = vec![100_000; 1000];
        let (s, windows) = run(&steps);
        assert!(!s.quiet);
        assert_eq!(s.busy, MAX_WAIT);
        assert_eq!(
            windows as u32,
            MAX_WAIT.as_millis() as u32 / WINDOW.as_millis() as u32
        );
    }

    #[test]
    fn without_an_emulated_link_nothing_is_waited_for() {
        let mut slept = false;
        let s = wait_quiet(RATE, || None, |_| slept = true);
        assert!(s.quiet && s.busy.is_zero() && !slept);
    }

    #[test]
    fn the_cell_line_names_the_longest_wait_and_what_came_before_it() {
        let mut c = CellWaits::default();
        let q = |ms: u64, quiet: bool| Settled {
            busy: Duration::from_millis(ms),
            quiet,
        };
        c.add(q(0, true), "direct");
        assert_eq!(
            c.line(),
            "long link quiet after the gap following each of 1 trials"
        );
        c.add(q(400, true), "squid-chain");
        c.add(q(2_400, true), "direct-h3");
        c.add(q(30_000, false), "direct");
        assert_eq!((c.trials, c.busy, c.gave_up), (4, 3, 1));
        assert_eq!(
            c.line(),
            "long link still busy after the gap following 3 of 4 trials (longest 30.0 s more, \
             after direct); 1 still busy after 30 s"
        );
    }
}
