//! Scheduling policies: which connection a stream direction is bound to
//! (PROTOCOL.md §5.1, ARCHITECTURE.md §2).
//!
//! A policy sees one [`Load`] per usable connection and picks one. Four exist:
//!
//! - [`Policy::ExpectedCompletion`]: the connection on which a new binding's bytes are
//!   expected to be delivered first, `rtt + (backlog + EXPECTED_BINDING_BYTES) ÷ rate`,
//!   from each connection's path estimate (delivery rate, min RTT) and its backlog (bytes
//!   queued in the process + kernel unsent + in flight). This is the "earliest completion
//!   first" rule of MPTCP's ECF scheduler (Lim et al., CoNEXT 2017) and, without the
//!   size term, of BLEST and minRTT; unlike them it places whole stream directions, not
//!   packets. Estimates are kept honest as BBR marks its samples (Cardwell et al., "BBR",
//!   ACM Queue 2016; draft-cheng-iccrg-delivery-rate-estimation): a rate measured while
//!   the connection had too little to send (app-limited), a rate that has not been
//!   refreshed for a while (stale, decided by the session) and a missing rate are lower
//!   bounds, raised to the median rate of the connections whose samples are fresh. An
//!   idle connection is therefore never ranked below its busy peers for lack of
//!   traffic: it takes the next binding, sends, and gets a fresh sample.
//! - [`Policy::LeastOutstanding`] (the default, seed 001's): the fewest outstanding
//!   bytes, weighed against the congestion window when every window is known, among the
//!   connections without a bulk transfer when there are any ([`Policy::choose`]). It stays
//!   the default: in the virtual-time model of a lossy long link (`tests/fill.rs`)
//!   expected completion spreads the load over every connection but carries about as
//!   much, not more, and the test bed has not measured it yet.
//! - [`Policy::Pack`]: the first connection, in the pool's order, that carries no
//!   transfer (on QUIC a stream past [`TRANSFER_BYTES`] either way, still open); when every
//!   one does, as least-outstanding. A page's streams then share one connection, where the transport
//!   orders them (QUIC stream priorities: oldest page first, PROTOCOL.md §8.2) and one
//!   connection's acknowledgements find its losses, instead of four connections each
//!   ordering a quarter of the page and competing at the bottleneck; a download is left
//!   alone on its connection, which the QUIC `rate` controller holds back while pages
//!   load. It suits a carrier without head-of-line blocking between streams (QUIC); on TCP
//!   one lost segment would stall every packed stream.
//! - [`Policy::RoundRobin`] and [`Policy::FewestStreams`]: baselines.
//!
//! What it does NOT do: measure anything (the driver reports kernel queues, windows and
//! path estimates; the session decides staleness), move a direction once bound, or know
//! how many bytes a binding will carry (a nominal size stands in).

/// Nominal size of a new binding for [`Policy::ExpectedCompletion`]: the bytes whose
/// completion time the policy compares. A reply's size is unknown when it is placed;
/// 64 KiB is about a web object, so a fast connection with a short queue wins over an
/// idle slow one, as in ECF.
pub const EXPECTED_BINDING_BYTES: u64 = 64 * 1024;

/// Bytes a stream direction sends before it counts as bulk (least attained service: nearly
/// all of a page's objects are smaller; a download passes it within a fraction of a second).
/// Within a lane, directions below it are served before bulk ones; a lane whose unacknowledged
/// bytes are all bulk is the one a driver holds back while another carries interactive bytes
/// ([`crate::Session::lane_is_bulk`]). The QUIC carrier classes its streams by the same figure.
pub const BULK_BYTES: u64 = 1 << 20;

/// Bytes of a stream direction that go ahead of the page order (least attained service with
/// a bound): within a connection, directions that have sent fewer go before the rest of the
/// directions of pages that began at most [`crate::Config::head_window`] earlier, oldest page
/// first ([`send_deadline`], [`Tier`]). A reply's first
/// bytes are its head and often all of it (most of a page's objects are smaller), and a page's
/// small objects — its HTML, style sheets and scripts — are what the browser reads before it
/// asks for the next ones; in strict page order an older page's large later bytes kept a newer
/// page's first replies, and with them its next round trips, waiting under load. Bounded so
/// that an older page's remaining bytes wait behind at most this much of each newer stream.
/// 16 KiB is one frame at the default frame size. Measured on the test bed's satellite link
/// at 0.9 of its rate against strict page order and against four size levels (16 KiB, 64 KiB,
/// 256 KiB, 1 MiB): benches/notes/2026-11-29-size-order.md.
pub const FIRST_BYTES: u64 = 16 * 1024;

/// Round trips of the long link during which a newer page's first bytes still go ahead of
/// an older page's later bytes: the default [`crate::Config::head_window`] is this many
/// times the link's RTT. Least attained service alone starves under overload: past the link's
/// rate new pages keep arriving, and an older page's rest waited behind every newer page's
/// first bytes until arrivals stopped (pacific at 110 % of its rate, Yahoo: pages 1.1–2.0 ×
/// longer than in strict page order, benches/notes/2026-11-29-first-bytes.md). With the
/// window an older page's rest waits only behind the first bytes of pages that began within
/// it, whatever the load ([`send_deadline`]). A page takes five to seven round trips idle on
/// the test bed's links; four lets the pages of the next few round trips start meanwhile.
/// Two and four measured on pacific at 90 % and 110 % of the rate and on satellite at 90 %
/// and 110 %: benches/notes/2026-11-29-head-window.md.
pub const HEAD_ROUND_TRIPS: u32 = 4;

/// When a stream direction's next bytes are due in its connection's send order (both
/// carriers; earliest first): its rank (when its page began) for its first bytes
/// ([`Tier::First`]), `head_window` later for the rest of an interactive direction
/// ([`Tier::Page`]). An older page's rest thus goes after the first bytes of pages that began
/// less than `head_window` after it and before every other newer byte; a window of zero is
/// strict page order, an unbounded one least attained service. Bulk directions are not
/// ordered by it (they go after every interactive one).
pub fn send_deadline(
    rank: std::time::Instant,
    tier: Tier,
    head_window: std::time::Duration,
) -> std::time::Instant {
    match tier {
        Tier::First => rank,
        Tier::Page | Tier::Bulk => rank.checked_add(head_window).unwrap_or(rank),
    }
}

/// Where a stream direction stands in its connection's send order, by the bytes it has sent
/// (both carriers: a TCP lane's frame order, QUIC stream priorities). Interactive directions
/// (`First`, `Page`) go by [`send_deadline`], `First` before `Page` at one deadline; `Bulk`
/// after them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Tier {
    /// Fewer than [`FIRST_BYTES`] sent: due when the page began.
    First,
    /// From [`FIRST_BYTES`] to [`BULK_BYTES`]: due a head window after the page began.
    Page,
    /// From [`BULK_BYTES`]: in turn, after every interactive direction.
    Bulk,
}

impl Tier {
    /// The tier of a direction that has sent `sent` bytes.
    pub fn of(sent: u64) -> Tier {
        if sent < FIRST_BYTES {
            Tier::First
        } else if sent < BULK_BYTES {
            Tier::Page
        } else {
            Tier::Bulk
        }
    }
}

// A direction's first bytes are fewer than a transfer's, which are fewer than bulk's.
const _: () = assert!(FIRST_BYTES < TRANSFER_BYTES && TRANSFER_BYTES < BULK_BYTES);

/// Bytes a QUIC stream carries (either way) before its connection counts as carrying a
/// transfer ([`Load::bulk`]), which [`Policy::Pack`] keeps new streams off. Lower than
/// [`BULK_BYTES`]: a download placed a second before a page has often not passed 1 MiB yet
/// when the page's first stream is placed (over HTTPS its tunnel spends two round trips on
/// TLS first), and a page joining it shares one window with the download's bytes already
/// queued at the bottleneck. A web object rarely passes 256 KiB (the largest of the
/// benchmark's Yahoo and Amazon pages are 144 and 160 KB), so one page's streams still pack
/// onto one connection; over HTTPS a host's tunnel carries many objects and can pass it,
/// sending that page's later tunnels to another connection.
pub const TRANSFER_BYTES: u64 = 256 * 1024;

/// Largest page age a receiver honours (PROTOCOL.md §3.2): an OPEN that says its page began
/// longer ago ranks as if it began this long ago, so no stream can claim to be older than
/// everything else for ever.
pub const MAX_PAGE_AGE: std::time::Duration = std::time::Duration::from_secs(60);

/// The rank of a stream opened or received at `at` for a page that began `age` before it
/// (PROTOCOL.md §5.1): `at − age`, the age bounded by [`MAX_PAGE_AGE`]. Both carriers rank
/// their streams with it.
pub fn page_rank(at: std::time::Instant, age: std::time::Duration) -> std::time::Instant {
    at.checked_sub(age.min(MAX_PAGE_AGE)).unwrap_or(at)
}

/// How a direction of a stream picks its connection when its first bytes are
/// ready to send.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Policy {
    /// Least outstanding bytes: bytes queued in the process for the connection
    /// plus the kernel's send queue (unsent + unacknowledged) reported by the
    /// driver. Ties go to fewer bound streams, then to the lower connection.
    ///
    /// When the driver reports every candidate's congestion window, outstanding
    /// bytes are weighed against it: the connection with the most window left
    /// (window − outstanding) wins, so new bytes go where they can leave at once
    /// rather than onto a connection that has carried little and must grow its
    /// window over several round trips; when no connection has window left, the
    /// one with the fewest outstanding bytes per byte of window (the shortest
    /// drain) wins.
    #[default]
    LeastOutstanding,
    /// Each new direction goes to the next connection in turn (baseline).
    RoundRobin,
    /// The connection with the fewest bound streams (baseline).
    FewestStreams,
    /// The smallest expected completion time, `rtt + (outstanding +
    /// EXPECTED_BINDING_BYTES) ÷ rate`, with app-limited, stale and missing rates
    /// raised to the median of the fresh ones (module doc). Ties go to fewer
    /// outstanding bytes, fewer streams, then the lower connection. Without any rate
    /// it decides as [`Policy::LeastOutstanding`].
    ExpectedCompletion,
    /// The first connection (lowest index) without a bulk direction ([`Load::bulk`]);
    /// when every connection has one, as [`Policy::LeastOutstanding`] (module doc).
    Pack,
}

impl Policy {
    /// Every policy, the default first (for command lines and benchmarks).
    pub const ALL: [Policy; 5] = [
        Policy::LeastOutstanding,
        Policy::ExpectedCompletion,
        Policy::RoundRobin,
        Policy::FewestStreams,
        Policy::Pack,
    ];

    /// The name configuration and command lines use.
    pub fn name(self) -> &'static str {
        match self {
            Policy::LeastOutstanding => "least-outstanding",
            Policy::RoundRobin => "round-robin",
            Policy::FewestStreams => "fewest-streams",
            Policy::ExpectedCompletion => "expected-completion",
            Policy::Pack => "pack",
        }
    }
}

/// What the driver knows about one connection's path, for [`Policy::ExpectedCompletion`]
/// ([`Session::set_path_estimate`](crate::Session::set_path_estimate)).
///
/// TCP: `TCP_INFO`'s `tcpi_delivery_rate` (or the pacing rate when the kernel has no
/// delivery sample), `tcpi_min_rtt`, `tcpi_notsent_bytes`, `SIOCOUTQ − notsent` in flight
/// and `tcpi_delivery_rate_app_limited`. QUIC: quinn's path statistics (pool/src/quic.rs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PathEstimate {
    /// Delivery rate, bytes per second; 0 if unknown.
    pub delivery_rate: u64,
    /// Round-trip time of the path; the minimum seen (see [`Load::rtt_us`]).
    pub rtt: std::time::Duration,
    /// Bytes written to the transport and not yet sent.
    pub unsent: u64,
    /// Bytes sent and not yet acknowledged.
    pub in_flight: u64,
    /// The rate sample was taken while the sender had too little to send: it is a lower
    /// bound of what the path carries, not a measure of it.
    pub app_limited: bool,
}

/// The load of one candidate connection, as the policies see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Load {
    /// Bytes queued in the process for the connection plus the kernel send queue
    /// (unsent + in flight).
    pub outstanding: u64,
    /// Streams with a direction bound to the connection.
    pub streams: u32,
    /// Congestion window in bytes as last reported by the driver (TCP: cwnd × MSS
    /// from `TCP_INFO`); 0 if unknown.
    pub window: u64,
    /// Delivery rate estimate, bytes per second; 0 if unknown.
    pub rate: u64,
    /// Round-trip time of the path, microseconds; 0 if unknown. The minimum seen, not the
    /// smoothed one: the queue this connection's own bytes form is already counted in
    /// `outstanding ÷ rate` (in-flight bytes included), and the smoothed RTT would count it
    /// twice.
    pub rtt_us: u64,
    /// `rate` is only a lower bound: measured while app-limited, or stale.
    pub rate_is_floor: bool,
    /// The connection carries a transfer ([`Policy::Pack`] keeps new streams off it): on a
    /// lane of this session, bulk bytes of this side's are unacknowledged (the session's
    /// lane accounting); on a QUIC connection, a stream that has carried [`TRANSFER_BYTES`]
    /// either way is open.
    pub bulk: bool,
}

impl Load {
    /// Window left for new bytes now: `window − outstanding`, at least 0.
    fn free(&self) -> u64 {
        self.window.saturating_sub(self.outstanding)
    }

    /// Outstanding bytes per byte of window, in 1/1024 (the drain time in round trips × 1024).
    fn drain(&self) -> u64 {
        (u128::from(self.outstanding) * 1024 / u128::from(self.window.max(1))) as u64
    }

    /// The rate the expected-completion policy assumes: the own estimate when it is a
    /// fresh measurement, otherwise at least `reference` (the median fresh rate).
    pub fn effective_rate(&self, reference: u64) -> u64 {
        if self.rate == 0 || self.rate_is_floor {
            self.rate.max(reference)
        } else {
            self.rate
        }
    }

    /// Expected completion time of [`EXPECTED_BINDING_BYTES`] more bytes here, in
    /// microseconds: `rtt + (outstanding + EXPECTED_BINDING_BYTES) ÷ rate`.
    pub fn expected_completion_us(&self, reference: u64) -> u64 {
        let rate = u128::from(self.effective_rate(reference).max(1));
        let bytes = u128::from(self.outstanding) + u128::from(EXPECTED_BINDING_BYTES);
        let drain = (bytes * 1_000_000 / rate).min(u128::from(u64::MAX)) as u64;
        self.rtt_us.saturating_add(drain)
    }
}

/// The rate that stands in for app-limited, stale and missing estimates: the median of
/// the fresh rates (the upper median of an even count), or of all known rates when none is
/// fresh; `None` when no candidate has a rate.
pub fn reference_rate(loads: &[Load]) -> Option<u64> {
    let mut fresh: Vec<u64> = loads
        .iter()
        .filter(|l| l.rate > 0 && !l.rate_is_floor)
        .map(|l| l.rate)
        .collect();
    if fresh.is_empty() {
        fresh.extend(loads.iter().filter(|l| l.rate > 0).map(|l| l.rate));
    }
    if fresh.is_empty() {
        return None;
    }
    let mid = fresh.len() / 2;
    Some(*fresh.select_nth_unstable(mid).1)
}

impl Policy {
    /// Picks an index into `loads` (the usable connections, in a stable order);
    /// `None` if there are none. `cursor` is the round-robin position, advanced
    /// by `RoundRobin` only.
    ///
    /// Least-outstanding and expected-completion choose among the connections without a
    /// bulk transfer ([`Load::bulk`]) when there are some: a connection carrying a download
    /// is held back while a page's bytes are in flight elsewhere (the TCP driver caps its
    /// pacing rate, QUIC's `rate` shrinks its window), and a held connection's bytes in
    /// flight are few while its congestion window is still the download's, so by its load
    /// alone it looks like the best place for a page's next reply, which would then leave
    /// at the held rate.
    pub fn choose(self, loads: &[Load], cursor: &mut usize) -> Option<usize> {
        let spare_bulk = matches!(self, Policy::LeastOutstanding | Policy::ExpectedCompletion)
            && loads.iter().any(|l| l.bulk)
            && loads.iter().any(|l| !l.bulk);
        if spare_bulk {
            let light: Vec<usize> = (0..loads.len()).filter(|&i| !loads[i].bulk).collect();
            let sub: Vec<Load> = light.iter().map(|&i| loads[i]).collect();
            return self.choose_among(&sub, cursor).map(|i| light[i]);
        }
        self.choose_among(loads, cursor)
    }

    /// [`Policy::choose`] over every candidate.
    fn choose_among(self, loads: &[Load], cursor: &mut usize) -> Option<usize> {
        if loads.is_empty() {
            return None;
        }
        match self {
            Policy::RoundRobin => {
                let i = *cursor % loads.len();
                *cursor = cursor.wrapping_add(1);
                Some(i)
            }
            Policy::ExpectedCompletion => match reference_rate(loads) {
                Some(reference) => loads
                    .iter()
                    .enumerate()
                    .min_by_key(|(i, l)| {
                        (
                            l.expected_completion_us(reference),
                            l.outstanding,
                            l.streams,
                            *i,
                        )
                    })
                    .map(|(i, _)| i),
                None => Policy::LeastOutstanding.choose_among(loads, cursor),
            },
            Policy::LeastOutstanding if loads.iter().all(|l| l.window > 0) => loads
                .iter()
                .enumerate()
                .min_by_key(|(i, l)| {
                    (
                        std::cmp::Reverse(l.free()),
                        l.drain(),
                        l.outstanding,
                        l.streams,
                        *i,
                    )
                })
                .map(|(i, _)| i),
            Policy::LeastOutstanding => loads
                .iter()
                .enumerate()
                .min_by_key(|(i, l)| (l.outstanding, l.streams, *i))
                .map(|(i, _)| i),
            Policy::FewestStreams => loads
                .iter()
                .enumerate()
                .min_by_key(|(i, l)| (l.streams, l.outstanding, *i))
                .map(|(i, _)| i),
            Policy::Pack => loads
                .iter()
                .position(|l| !l.bulk)
                .or_else(|| Policy::LeastOutstanding.choose_among(loads, cursor)),
        }
    }
}

impl std::fmt::Display for Policy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Policy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "least-outstanding" | "least_outstanding" => Ok(Policy::LeastOutstanding),
            "round-robin" | "round_robin" => Ok(Policy::RoundRobin),
            "fewest-streams" | "fewest_streams" => Ok(Policy::FewestStreams),
            "expected-completion" | "expected_completion" => Ok(Policy::ExpectedCompletion),
            "pack" => Ok(Policy::Pack),
            _ => Err(format!(
                "unknown policy {s:?} (expected least-outstanding, expected-completion, \
                 pack, round-robin or fewest-streams)"
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_direction_goes_first_then_by_page_then_in_bulk_as_it_sends() {
        assert_eq!(Tier::of(0), Tier::First);
        assert_eq!(Tier::of(FIRST_BYTES - 1), Tier::First);
        assert_eq!(Tier::of(FIRST_BYTES), Tier::Page);
        assert_eq!(Tier::of(BULK_BYTES - 1), Tier::Page);
        assert_eq!(Tier::of(BULK_BYTES), Tier::Bulk);
        assert_eq!(Tier::of(u64::MAX), Tier::Bulk);
        assert!(Tier::First < Tier::Page && Tier::Page < Tier::Bulk);
    }

    #[test]
    fn first_bytes_are_due_when_the_page_began_the_rest_a_head_window_later() {
        let rank = std::time::Instant::now();
        let w = Duration::from_millis(520);
        assert_eq!(send_deadline(rank, Tier::First, w), rank);
        assert_eq!(send_deadline(rank, Tier::Page, w), rank + w);
        assert_eq!(send_deadline(rank, Tier::Page, Duration::ZERO), rank);
        assert_eq!(crate::config::head_window(Duration::from_millis(130)), w);
        assert_eq!(
            crate::config::head_window(Duration::from_secs(3600)),
            MAX_PAGE_AGE
        );
    }

    fn l(outstanding: u64, streams: u32) -> Load {
        Load {
            outstanding,
            streams,
            ..Load::default()
        }
    }

    fn w(outstanding: u64, streams: u32, window: u64) -> Load {
        Load {
            outstanding,
            streams,
            window,
            ..Load::default()
        }
    }

    /// A connection with a path estimate: `mbit` Mbit/s, `rtt_ms`, `floor`: app-limited or stale.
    fn p(outstanding: u64, mbit: u64, rtt_ms: u64, floor: bool) -> Load {
        Load {
            outstanding,
            rate: mbit * 125_000,
            rtt_us: rtt_ms * 1000,
            rate_is_floor: floor,
            ..Load::default()
        }
    }

    const EC: Policy = Policy::ExpectedCompletion;

    #[test]
    fn expected_completion_weighs_backlog_against_rate_and_rtt() {
        let mut c = 0;
        // Both idle: the faster one (the 64 KiB nominal binding drains sooner).
        assert_eq!(
            EC.choose(&[p(0, 5, 600, false), p(0, 50, 600, false)], &mut c),
            Some(1)
        );
        // The fast one queues 2 MB (0.32 s at 50 Mbit/s); the slow one has 100 kB
        // (0.17 s at 5 Mbit/s): the slow one completes first.
        assert_eq!(
            EC.choose(
                &[p(100_000, 5, 600, false), p(2_000_000, 50, 600, false)],
                &mut c
            ),
            Some(0)
        );
        // Same backlog, same rate: the shorter round trip.
        assert_eq!(
            EC.choose(&[p(0, 20, 700, false), p(0, 20, 600, false)], &mut c),
            Some(1)
        );
        // Least outstanding would take the emptier slow connection; expected completion
        // takes the fast one whose queue drains sooner.
        let loads = [p(50_000, 1, 600, false), p(400_000, 50, 600, false)];
        assert_eq!(Policy::LeastOutstanding.choose(&loads, &mut c), Some(0));
        assert_eq!(EC.choose(&loads, &mut c), Some(1));
    }

    #[test]
    fn app_limited_and_stale_rates_are_raised_to_the_median_of_fresh_ones() {
        // Fresh 40, 50, 60 Mbit/s: the reference is 50.
        let fresh = [
            p(0, 40, 600, false),
            p(0, 60, 600, false),
            p(0, 50, 600, false),
        ];
        assert_eq!(reference_rate(&fresh), Some(50 * 125_000));
        // An app-limited sample of 1 Mbit/s is a lower bound: it counts as 50, and
        // with the shortest queue it takes the binding.
        let mut loads = vec![
            p(300_000, 40, 600, false),
            p(300_000, 60, 600, false),
            p(300_000, 50, 600, false),
            p(10_000, 1, 600, true),
        ];
        let mut c = 0;
        assert_eq!(EC.choose(&loads, &mut c), Some(3));
        assert_eq!(loads[3].effective_rate(50 * 125_000), 50 * 125_000);
        // The same 1 Mbit/s as a fresh measurement keeps it away.
        loads[3].rate_is_floor = false;
        assert_eq!(EC.choose(&loads, &mut c), Some(1));
        // A floor above the reference stays as reported.
        assert_eq!(
            p(0, 90, 600, true).effective_rate(50 * 125_000),
            90 * 125_000
        );
        // A connection with no rate yet counts as the reference.
        let loads = [p(300_000, 50, 600, false), Load::default()];
        assert_eq!(EC.choose(&loads, &mut c), Some(1));
        // Only floors: their median is the reference.
        assert_eq!(
            reference_rate(&[p(0, 10, 1, true), p(0, 30, 1, true), Load::default()]),
            Some(30 * 125_000)
        );
        assert_eq!(reference_rate(&[Load::default()]), None);
    }

    #[test]
    fn expected_completion_without_estimates_is_least_outstanding() {
        let mut c = 0;
        let loads = [w(0, 0, 14_480), w(200_000, 3, 1_000_000)];
        assert_eq!(EC.choose(&loads, &mut c), Some(1));
        let loads = [l(500, 1), l(100, 9), l(100, 2)];
        assert_eq!(EC.choose(&loads, &mut c), Some(2));
        assert_eq!(EC.choose(&[], &mut c), None);
    }

    proptest::proptest! {
        /// Equal connections (same rate, RTT and window): the same pick as
        /// least-outstanding, whatever the backlogs and stream counts.
        #[test]
        fn equal_connections_pick_as_least_outstanding(
            backlog in proptest::collection::vec((0u64..3_000_000, 0u32..4), 1..12),
            mbit in 1u64..1000,
            rtt_ms in 1u64..800,
            window in proptest::option::of(1u64..4_000_000),
        ) {
            let loads: Vec<Load> = backlog
                .iter()
                .map(|&(o, s)| Load {
                    streams: s,
                    window: window.unwrap_or(0),
                    ..p(o, mbit, rtt_ms, false)
                })
                .collect();
            let (mut a, mut b) = (0, 0);
            proptest::prop_assert_eq!(
                EC.choose(&loads, &mut a),
                Policy::LeastOutstanding.choose(&loads, &mut b)
            );
        }
    }

    #[test]
    fn a_connection_carrying_a_download_takes_a_new_binding_only_when_all_do() {
        // A download's TCP lane held back while a page loads elsewhere: few bytes in flight
        // (paced at a fraction of its rate), the download's large window. By load alone it
        // has the most window left; the idle lane with a smaller window is where the page's
        // next reply leaves at once.
        let held = Load {
            bulk: true,
            ..w(60_000, 1, 1_200_000)
        };
        let idle = w(0, 0, 200_000);
        let busy_page = w(150_000, 3, 400_000);
        let mut c = 0;
        for policy in [Policy::LeastOutstanding, Policy::ExpectedCompletion] {
            assert_eq!(policy.choose(&[held, idle], &mut c), Some(1), "{policy}");
            assert_eq!(
                policy.choose(&[busy_page, held], &mut c),
                Some(0),
                "{policy}"
            );
            // Every connection carries one: chosen by load among all.
            let other = Load {
                bulk: true,
                ..w(900_000, 1, 1_000_000)
            };
            assert_eq!(policy.choose(&[other, held], &mut c), Some(1), "{policy}");
        }
        // Without the bulk mark the held lane would win: the trap this avoids.
        let unmarked = Load {
            bulk: false,
            ..held
        };
        assert_eq!(
            Policy::LeastOutstanding.choose(&[unmarked, idle], &mut c),
            Some(0)
        );
        // The baselines ignore the mark.
        assert_eq!(Policy::FewestStreams.choose(&[idle, held], &mut c), Some(0));
        let mut rr = 0;
        assert_eq!(Policy::RoundRobin.choose(&[held, idle], &mut rr), Some(0));
    }

    #[test]
    fn least_outstanding_prefers_fewer_bytes_then_fewer_streams() {
        let mut c = 0;
        let loads = [l(500, 1), l(100, 9), l(100, 2)];
        assert_eq!(Policy::LeastOutstanding.choose(&loads, &mut c), Some(2));
        assert_eq!(Policy::FewestStreams.choose(&loads, &mut c), Some(0));
        assert_eq!(Policy::LeastOutstanding.choose(&[], &mut c), None);
    }

    #[test]
    fn least_outstanding_with_windows_prefers_the_most_window_left() {
        let mut c = 0;
        // A warm connection (1 MB window, 200 KB in flight) beats an idle cold one
        // (initial window of 10 segments): 800 KB can leave at once there.
        let loads = [w(0, 0, 14_480), w(200_000, 3, 1_000_000)];
        assert_eq!(Policy::LeastOutstanding.choose(&loads, &mut c), Some(1));
        // Once the warm one's window is used up, new bytes spill to the cold one.
        let loads = [w(0, 0, 14_480), w(1_200_000, 9, 1_000_000)];
        assert_eq!(Policy::LeastOutstanding.choose(&loads, &mut c), Some(0));
        // No window left anywhere: the shortest drain (outstanding ÷ window) wins,
        // not the fewest bytes.
        let loads = [w(100_000, 1, 50_000), w(1_500_000, 1, 1_000_000)];
        assert_eq!(Policy::LeastOutstanding.choose(&loads, &mut c), Some(1));
        // Equal windows and equal load: fewer streams, then the lower index.
        let loads = [w(0, 2, 64_000), w(0, 1, 64_000), w(0, 1, 64_000)];
        assert_eq!(Policy::LeastOutstanding.choose(&loads, &mut c), Some(1));
        // One window unknown: bytes alone decide, as without windows.
        let loads = [w(10, 0, 0), w(5, 0, 1_000_000)];
        assert_eq!(Policy::LeastOutstanding.choose(&loads, &mut c), Some(1));
        let loads = [w(5, 0, 0), w(10, 0, 1_000_000)];
        assert_eq!(Policy::LeastOutstanding.choose(&loads, &mut c), Some(0));
    }

    #[test]
    fn pack_takes_the_first_connection_without_a_transfer() {
        let mut c = 0;
        let bulk = |outstanding, streams| Load {
            bulk: true,
            ..l(outstanding, streams)
        };
        // However loaded, the first connection takes every new stream while it carries
        // no transfer.
        let loads = [l(3_000_000, 40), l(0, 0), l(0, 0)];
        assert_eq!(Policy::Pack.choose(&loads, &mut c), Some(0));
        // A download on it: the next one.
        let loads = [bulk(3_000_000, 1), l(50_000, 12), l(0, 0)];
        assert_eq!(Policy::Pack.choose(&loads, &mut c), Some(1));
        // Transfers everywhere: the least outstanding bytes.
        let loads = [bulk(3_000_000, 1), bulk(900_000, 2), bulk(2_000_000, 1)];
        assert_eq!(Policy::Pack.choose(&loads, &mut c), Some(1));
        assert_eq!(Policy::Pack.choose(&[], &mut c), None);
        assert_eq!(c, 0, "the round-robin cursor is left alone");
    }

    #[test]
    fn round_robin_cycles() {
        let mut c = 0;
        let loads = [l(0, 0); 3];
        let picks: Vec<_> = (0..4)
            .map(|_| Policy::RoundRobin.choose(&loads, &mut c).unwrap())
            .collect();
        assert_eq!(picks, [0, 1, 2, 0]);
    }

    #[test]
    fn parses_names() {
        assert_eq!("round-robin".parse(), Ok(Policy::RoundRobin));
        for p in Policy::ALL {
            assert_eq!(p.name().parse(), Ok(p));
            assert_eq!(p.to_string(), p.name());
        }
        assert_eq!(Policy::ALL[0], Policy::default());
        assert!("fastest".parse::<Policy>().is_err());
    }
}
