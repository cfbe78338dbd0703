//! The page age of a client connection's requests (PROTOCOL.md §3.2, §5.1).
//!
//! Under load both proxies send the interactive replies of the oldest page first (after the
//! first 16 KiB of every reply, which go ahead in the same order: `mux::policy::Tier`). The edge
//! is the only side that can tell pages apart, and it does so by client connection: a page is
//! a connection's burst of requests, which begins with its first request and ends once the
//! connection has had nothing owed for [`PAGE_GAP`]. Each stream is opened with the age of
//! its burst, so a page's later requests (the images after the HTML and scripts) rank with
//! its first ones instead of behind the first requests of pages that began after it.
//!
//! What it does: keep one connection's burst start ([`PageClock`]), in the caller's time.
//!
//! What it does NOT do: join the connections of one browser's page (a browser opens several,
//! and each ranks from its own first request: still ahead of pages that began after it), or
//! look at the client's address (customers behind one address would share one page for
//! ever), or read a clock (callers pass `now`). Joining a client address's connections into
//! one page, bounded to pages begun in the last 4 s, was measured under offered load and made
//! pages slower (`benches/notes/2026-11-28-page-join.md`).

use std::time::{Duration, Instant};

/// How long a client connection has nothing owed before its next request begins a new page.
/// Within a page a browser sends its next request on a connection within milliseconds of
/// the last reply; a person's next click comes seconds later.
pub const PAGE_GAP: Duration = Duration::from_secs(1);

/// Largest age a page's requests carry: a connection busy without a pause (a feed polled
/// every half second, a player's segments) ranks at most this much ahead of a page that
/// began just now, not ahead of everything for ever. Long enough for a page on a
/// geostationary hop (4–10 s under load).
pub const MAX_PAGE_AGE: Duration = Duration::from_secs(10);

/// One client connection's current page.
#[derive(Debug, Default, Clone)]
pub struct PageClock {
    /// When the current page's first request arrived.
    start: Option<Instant>,
    /// Since when nothing is owed on the connection (`None` while replies are owed).
    idle_since: Option<Instant>,
}

impl PageClock {
    /// Requests are being served again at `now`: the current page goes on unless the
    /// connection was idle for [`PAGE_GAP`] or more (or never served one); returns when the
    /// page began.
    pub fn busy(&mut self, now: Instant) -> Instant {
        let start = match (self.start, self.idle_since) {
            (Some(s), Some(idle)) if now.saturating_duration_since(idle) < PAGE_GAP => s,
            (Some(s), None) => s,
            _ => now,
        };
        self.start = Some(start);
        self.idle_since = None;
        start
    }

    /// Whether requests are being served (between [`PageClock::busy`] and
    /// [`PageClock::idle`]).
    pub fn is_busy(&self) -> bool {
        self.start.is_some() && self.idle_since.is_none()
    }

    /// Nothing is owed on the connection any more, at `now`.
    pub fn idle(&mut self, now: Instant) {
        self.idle_since = Some(now);
    }
}

/// The age at `now` of a request of the page that began at `start`, at most [`MAX_PAGE_AGE`].
pub fn age(start: Instant, now: Instant) -> Duration {
    now.saturating_duration_since(start).min(MAX_PAGE_AGE)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn a_burst_with_short_pauses_is_one_page_and_a_long_pause_starts_the_next() {
        let t0 = Instant::now();
        let mut p = PageClock::default();
        assert_eq!(p.busy(t0), t0);
        // The HTML's reply is written; the browser asks for the next object 30 ms later.
        p.idle(t0 + 400 * MS);
        assert_eq!(p.busy(t0 + 430 * MS), t0);
        assert_eq!(age(t0, t0 + 430 * MS), 430 * MS);
        // Busy again without ever going idle: still the same page.
        assert_eq!(p.busy(t0 + 900 * MS), t0);
        p.idle(t0 + 2_000 * MS);
        assert_eq!(p.busy(t0 + 2_000 * MS + PAGE_GAP - MS), t0);
        // A pause of a whole gap: the next request begins a new page.
        p.idle(t0 + 5_000 * MS);
        let next = t0 + 5_000 * MS + PAGE_GAP;
        assert_eq!(p.busy(next), next);
        assert_eq!(age(next, next), Duration::ZERO);
    }

    #[test]
    fn the_age_is_bounded() {
        let t0 = Instant::now();
        let mut p = PageClock::default();
        p.busy(t0);
        // Requests every half second for a minute never pause for a gap.
        for i in 1..120u32 {
            p.idle(t0 + 500 * MS * i - 10 * MS);
            assert_eq!(p.busy(t0 + 500 * MS * i), t0);
        }
        assert_eq!(age(t0, t0 + Duration::from_secs(60)), MAX_PAGE_AGE);
    }
}
