//! `rate`: a rate-based congestion controller for QUIC pool connections on a provisioned
//! link (`congestion = "rate"`, QUIC carrier only).
//!
//! What it does: presents quinn a congestion window of `share × (base RTT + allowance)`, where
//! the share is `link.rate_mbit` divided among the busy connections of one pool (with at
//! least a quarter of their fair window in flight; [`RateConfig`] counts them: one that is
//! idle or only acknowledges and updates flow-control credit leaves its share to the others),
//! so the pool as a whole sends at most the provisioned rate. A connection not yet counted
//! sizes its window as if it were (one more sharer), so a newcomer does not start at a share
//! the others still hold. **What the others leave unused is borrowed**: the pool's
//! connections publish their bytes in flight, and a connection's window is the larger of its
//! fair share and the whole pool's window less what the others have in flight, so one
//! connection with a large reply beside others finishing small ones fills the link at once
//! instead of a round trip after they fall idle (the sharing of congestion state across the
//! connections to one peer of RFC 3124's Congestion Manager and RFC 9040's ensemble sharing;
//! a page spread over four connections otherwise leaves most of a 10 Mbit/s link idle in its
//! uneven rounds). A connection that becomes busy, or whose unused share was borrowed and
//! now wants it, still gets its fair share at once; the borrower's window falls back to its
//! own share and it sends nothing until its bytes in flight are below it. The pool then
//! exceeds its window by at most that share for at most a round trip (without borrowing, a
//! newcomer did the same), which the queueing-delay rule below answers if it persists. **Interactive before bulk**: a send direction that has carried [`BULK_BYTES`]
//! is bulk; a connection with a bulk direction open and no active interactive one (what its
//! streams report through [`Traffic`]: a single large reply, for instance, or one beside a
//! tunnel with nothing to send) is *bulk*; any other is *interactive*. While an interactive
//! connection of the pool has data in flight (more than [`YIELD_DATAGRAMS`] datagrams, seen
//! as it sends, not a round trip later), the bulk connections share [`BULK_YIELD`] of the
//! rate and the interactive ones the rest, so a page's replies do not queue behind a
//! download at the bottleneck; [`HOLD_ROUND_TRIPS`] base RTTs after the last one stopped (a
//! page's next requests follow its replies by about a round trip) the bulk ones take the
//! whole rate back.
//! This is least-attained-service scheduling at connection granularity; within a connection
//! the streams are ordered the same way by quinn's stream priorities (`crate::quic`).
//! **Parity is counted in the share**: while the parity socket (`crate::parity`) protects a
//! connection's sends with one parity per `group` datagrams, sent outside quinn's control,
//! its windows are `group / (group + 1)` of the above ([`Traffic::data_share`]), so data and
//! parity together stay within the share instead of building a queue of their own.
//!
//! quinn sends at most one window per round trip and paces it at 1.25 × window ÷ smoothed
//! RTT (`quinn-proto` `connection/pacing.rs`), so on an unqueued path a connection carries
//! its share plus at most the allowance's worth (allowance ÷ base RTT) more, which
//! the bottleneck holds as a standing queue of at most the allowance. The controller starts
//! at its full share (as satellite PEPs, e.g. RFC 3135's split-connection accelerators, pace
//! at the provisioned rate from the first packet instead of slow-starting) and then:
//! - **Random loss is not congestion.** A loss leaves the window alone unless the delay says
//!   the path is queued (then it counts as a delay decrease, at most one per round trip).
//!   ECN congestion marks do cut the window: they are explicit congestion signals.
//! - **Queueing delay is.** At the end of each round trip (when a packet sent after the round
//!   began is acknowledged) it compares quinn's smoothed RTT (an average of the recent samples
//!   with the peer's ACK delay removed, RFC 9002 §5.3, so one delayed ACK or one jittered
//!   sample does not count) with the base RTT: the smallest sample over the last one to two
//!   [`BASE_RTT_BUCKET`]s (LEDBAT's base-delay history, RFC 6817 §3.4.2, so that a route
//!   change is learnt). Queueing delay above [`threshold`] (max(25 ms, base ÷ 4)) halves the
//!   gain (multiplicative decrease on delay rather than loss, as TCP Vegas and LEDBAT back
//!   off), and acknowledgements of packets sent before the decrease are not judged again; at
//!   or below half the threshold the gain grows by 1.25 per round trip (BBR's probing gain)
//!   back toward the share; in between it holds (Vegas's alpha/beta band). A round in which
//!   the connection kept less than [`BUSY_FRACTION`] of its window in flight (keep-alives,
//!   acknowledgements, credit updates) is not cut: the queue is other traffic's, and a cut
//!   then would leave its next transfer climbing back from the floor, 1.25 per round trip,
//!   after the queue has gone (its first round answers a queue that is still there). A link slower than
//!   configured, or one shared with other traffic, therefore sees a queue of about the
//!   threshold at most after start-up, not the flood a fixed pacing rate would send into it
//!   (the first round trip goes out at the configured rate).
//! - **Persistent congestion** (quinn's `is_persistent_congestion`: everything sent for
//!   about three probe timeouts was lost) collapses the window to two datagrams, as NewReno
//!   does (RFC 9002 §7.6.2); the gain then doubles per round trip without queueing delay.
//!
//! What it does NOT do: give a yielding download what the interactive connections leave
//! unused (while a page's replies are in flight the bulk class keeps [`BULK_YIELD`] of the
//! rate even if the page needs less: latency before work conservation, for the seconds a
//! page takes), order the TCP carrier's connections (the kernel paces those), measure the bottleneck (the operator states it: this is for
//! provisioned, dedicated capacity; on a path shared with loss-based flows it yields to them,
//! as LEDBAT does), share a rate across pools or processes (each pool, i.e. each remote on the
//! edge and the remote's listener, counts its own connections), pace by itself (quinn's pacer
//! does), or apply to the TCP carrier (the kernel owns TCP's controller). It judges round-trip,
//! not one-way, delay: a queue in the reverse direction (the peer's replies behind a deep
//! buffer) also holds this side back, so configure `rate` on both sides (LEDBAT's one-way
//! delay would need timestamps quinn does not carry).

use std::any::Any;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use quinn::congestion::{Controller, ControllerFactory, ControllerMetrics};
use quinn_proto::RttEstimator;

/// Smallest datagram size QUIC allows (RFC 9000 §14): the window floor counts in these until
/// quinn reports the path's MTU.
const BASE_DATAGRAM: u64 = 1200;
/// Length of one bucket of the base-RTT history: the base RTT is the minimum over the current
/// and the previous bucket (60 to 120 s of samples).
pub const BASE_RTT_BUCKET: Duration = Duration::from_secs(60);
/// Smallest fraction of the share the gain is cut to by delay.
pub const MIN_GAIN: f64 = 1.0 / 64.0;
/// Gain multiplier on a round with queueing delay above the threshold.
pub const DECREASE: f64 = 0.5;
/// Gain multiplier on a round without queueing delay.
pub const PROBE: f64 = 1.25;
/// Fraction of its window a connection must have in flight to take part in the share.
pub const BUSY_FRACTION: f64 = 0.25;

/// Bytes a send direction carries before it counts as bulk: the mux's figure, for both
/// carriers.
pub use mux::policy::BULK_BYTES;
/// Fraction of the rate the bulk connections of a pool share while an interactive one sends.
pub const BULK_YIELD: f64 = 1.0 / 8.0;
/// Base RTTs the bulk class keeps yielding after the last interactive connection stopped
/// sending (the gap between a page's levels).
pub const HOLD_ROUND_TRIPS: u32 = 2;
/// Datagrams in flight from which an interactive connection makes the bulk ones yield.
pub const YIELD_DATAGRAMS: u64 = 4;
/// Bytes in flight from which a connection takes part in the fair share before its first
/// acknowledgements count it busy: four datagrams of QUIC's smallest size.
pub const ACTIVE_BYTES: u64 = 4 * BASE_DATAGRAM;
/// Datagrams smaller than this are taken for acknowledgements and credit updates, not data,
/// when the controller estimates its bytes in flight between acknowledgements (quinn reports
/// every datagram it sends, ACK-only ones included).
const DATA_DATAGRAM: u64 = 256;

/// Queueing delay above which a round counts as congested: max(25 ms, base ÷ 4).
pub fn threshold(base: Duration) -> Duration {
    (base / 4).max(Duration::from_millis(25))
}

/// Round-trip time added to the base RTT in the window: max(10 ms, base ÷ 16). It covers
/// delayed ACKs and ACK batching so that the window does not starve the link; always below
/// half the threshold, so a link at exactly the configured rate stays in the hold band.
pub fn allowance(base: Duration) -> Duration {
    (base / 16).max(Duration::from_millis(10))
}

/// Factory of [`Rate`] controllers for one pool: the provisioned rate and the count of its
/// busy connections, among which the rate is shared.
#[derive(Debug, Clone)]
pub struct RateConfig {
    rate_bps: u64,
    initial_rtt: Duration,
    shares: Arc<Shares>,
    /// The connection's traffic, for a per-connection factory ([`RateConfig::for_connection`]);
    /// without it every connection counts as interactive.
    traffic: Option<Arc<Traffic>>,
}

/// `d` in nanoseconds, saturating.
fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// A pool's counts of its busy connections, shared by their controllers.
#[derive(Debug)]
struct Shares {
    /// Origin of `hold_until`.
    epoch: Instant,
    /// Until when (nanoseconds after `epoch`) the bulk class yields after the last interactive
    /// connection stopped sending.
    hold_until: AtomicU64,
    /// When (nanoseconds after `epoch`) the last hold began: connections bulk since then are
    /// not held.
    hold_from: AtomicU64,
    /// Busy interactive connections.
    interactive: AtomicU32,
    /// Busy bulk connections.
    bulk: AtomicU32,
    /// Interactive connections with more than [`YIELD_DATAGRAMS`] in flight.
    sending: AtomicU32,
    /// Bytes in flight of the interactive (0) and the bulk (1) connections, as each
    /// controller last estimated its own.
    in_flight: [AtomicU64; 2],
    /// Connections of each class with at least [`ACTIVE_BYTES`] in flight by that estimate.
    active: [AtomicU32; 2],
}

impl Shares {
    fn new() -> Shares {
        Shares {
            epoch: Instant::now(),
            hold_until: AtomicU64::new(0),
            hold_from: AtomicU64::new(0),
            interactive: AtomicU32::new(0),
            bulk: AtomicU32::new(0),
            sending: AtomicU32::new(0),
            in_flight: [AtomicU64::new(0), AtomicU64::new(0)],
            active: [AtomicU32::new(0), AtomicU32::new(0)],
        }
    }

    fn nanos(&self, t: Instant) -> u64 {
        nanos(t.saturating_duration_since(self.epoch))
    }

    fn in_flight(&self, bulk: bool) -> &AtomicU64 {
        &self.in_flight[usize::from(bulk)]
    }

    fn active(&self, bulk: bool) -> &AtomicU32 {
        &self.active[usize::from(bulk)]
    }

    fn counter(&self, bulk: bool) -> &AtomicU32 {
        if bulk {
            &self.bulk
        } else {
            &self.interactive
        }
    }
}

/// What one connection's streams tell its controller: how many of its open send directions
/// are interactive (fewer than [`BULK_BYTES`] written) and how many bulk, and when its
/// interactive directions last had bytes to send. The connection is bulk while it has a bulk
/// direction open and no *active* interactive one; without any open direction (the tail of
/// finished replies in flight, or nothing) it is interactive.
///
/// An interactive direction is active from its opening and for [`HOLD_ROUND_TRIPS`] round
/// trips after its bytes written so far can have been sent at the connection's rate (each
/// write pushes that moment back by its bytes ÷ the rate, as a virtual finish time does in
/// fair queueing). One that stays open with nothing to send (an HTTPS tunnel between a
/// page's levels, a keep-alive) no longer makes a download that shares its connection count
/// as interactive: such a download took an interactive share of the link beside the page
/// it should yield to. The round trips cover the gap between a page's levels (its next
/// bytes follow its last by about one); the rate is the controller's share, or the link's
/// until a controller reports one, so the estimate errs towards counting a direction active.
///
/// It also carries what the parity socket (`crate::parity`) adds to the connection's sends:
/// while they are protected with one parity per `group` datagrams, the controller sizes its
/// window to `group / (group + 1)` of what it would (see [`Traffic::data_share`]).
#[derive(Debug)]
pub struct Traffic {
    interactive: AtomicU32,
    bulk: AtomicU32,
    /// Datagrams per parity while the connection's sends are protected; 0 while they are not.
    parity_group: AtomicU32,
    /// Origin of the nanosecond times below.
    epoch: Instant,
    /// When the interactive bytes written so far can have been sent (ns after `epoch`).
    interactive_until: AtomicU64,
    /// The rate they are sent at, bits per second (the controller's share, or the link's).
    drain_bps: AtomicU64,
    /// How long an interactive direction stays active after that (ns): [`HOLD_ROUND_TRIPS`]
    /// round trips.
    linger_ns: AtomicU64,
}

impl Default for Traffic {
    /// The traffic of a connection on a link of [`mux::config::DEFAULT_RATE_BPS`] and
    /// [`mux::config::DEFAULT_RTT`].
    fn default() -> Self {
        Traffic::new(mux::config::DEFAULT_RATE_BPS, mux::config::DEFAULT_RTT)
    }
}

impl Traffic {
    /// The traffic of a connection on a link of `link_bps` and round trip `rtt`, until its
    /// controller says better ([`Traffic::set_pace`]).
    pub fn new(link_bps: u64, rtt: Duration) -> Traffic {
        Traffic {
            interactive: AtomicU32::new(0),
            bulk: AtomicU32::new(0),
            parity_group: AtomicU32::new(0),
            epoch: Instant::now(),
            interactive_until: AtomicU64::new(0),
            drain_bps: AtomicU64::new(link_bps.max(1)),
            linger_ns: AtomicU64::new(nanos(rtt * HOLD_ROUND_TRIPS)),
        }
    }

    /// Whether the connection is bulk now.
    pub fn bulk(&self) -> bool {
        self.bulk_at(Instant::now())
    }

    /// Whether the connection is bulk at `now`: a bulk direction is open and no interactive
    /// one is active (type doc).
    pub fn bulk_at(&self, now: Instant) -> bool {
        self.bulk.load(Ordering::Relaxed) > 0 && !self.interactive_active(now)
    }

    /// Whether an interactive direction is open and active at `now` (type doc).
    pub fn interactive_active(&self, now: Instant) -> bool {
        self.interactive.load(Ordering::Relaxed) > 0
            && self.ns(now)
                < self
                    .interactive_until
                    .load(Ordering::Relaxed)
                    .saturating_add(self.linger_ns.load(Ordering::Relaxed))
    }

    /// The controller's share (`bps`, 0 leaves the rate as it is) and base RTT: the rate its
    /// interactive bytes drain at and the round trips they stay active for.
    pub fn set_pace(&self, bps: u64, rtt: Duration) {
        if bps > 0 && self.drain_bps.load(Ordering::Relaxed) != bps {
            self.drain_bps.store(bps, Ordering::Relaxed);
        }
        let linger = nanos(rtt * HOLD_ROUND_TRIPS);
        if self.linger_ns.load(Ordering::Relaxed) != linger {
            self.linger_ns.store(linger, Ordering::Relaxed);
        }
    }

    /// An interactive direction was opened (`bytes` = 0) or had `bytes` written at `now`.
    fn touch(&self, now: Instant, bytes: u64) {
        let t = self.ns(now);
        let drain = self.drain_bps.load(Ordering::Relaxed).max(1);
        let takes = (u128::from(bytes) * 8_000_000_000 / u128::from(drain)) as u64;
        let _ = self
            .interactive_until
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |u| {
                Some(u.max(t).saturating_add(takes))
            });
    }

    fn ns(&self, now: Instant) -> u64 {
        nanos(now.saturating_duration_since(self.epoch))
    }

    /// Records whether the connection's sends are protected now, with one parity per
    /// `group` datagrams (`None`: not protected).
    pub fn set_parity(&self, group: Option<usize>) {
        let g = group.map_or(0, |g| u32::try_from(g).unwrap_or(u32::MAX));
        // Read first: the socket records this on every send, and the value rarely changes.
        if self.parity_group.load(Ordering::Relaxed) != g {
            self.parity_group.store(g, Ordering::Relaxed);
        }
    }

    /// The fraction of the connection's sends that is data: `group / (group + 1)` while
    /// its sends are protected (a parity of about a full datagram follows every `group`
    /// of them), 1 otherwise. Parity is sent outside quinn's congestion control, so
    /// without this a protected connection put `1 + 1/group` of its share on the link,
    /// which queues at a bottleneck it fills and reads as congestion.
    pub fn data_share(&self) -> f64 {
        match self.parity_group.load(Ordering::Relaxed) {
            0 => 1.0,
            g => f64::from(g) / (f64::from(g) + 1.0),
        }
    }

    /// Interactive send directions open now.
    pub fn interactive(&self) -> u32 {
        self.interactive.load(Ordering::Relaxed)
    }
}

/// One send direction's place in its connection's [`Traffic`]: interactive from its opening
/// until it has carried [`BULK_BYTES`], bulk from then until it ends (the count is returned
/// when dropped).
#[derive(Debug)]
pub struct SendClass {
    traffic: Option<Arc<Traffic>>,
    bulk: bool,
    /// Bytes written so far.
    written: u64,
}

impl SendClass {
    /// A new send direction on the connection of `traffic`: interactive.
    pub fn open(traffic: Arc<Traffic>) -> SendClass {
        SendClass::open_at(traffic, Instant::now())
    }

    /// [`SendClass::open`] at `now`.
    pub fn open_at(traffic: Arc<Traffic>, now: Instant) -> SendClass {
        traffic.interactive.fetch_add(1, Ordering::Relaxed);
        traffic.touch(now, 0);
        SendClass {
            traffic: Some(traffic),
            bulk: false,
            written: 0,
        }
    }

    /// The direction has carried `total` bytes; true the first time that makes it bulk.
    pub fn wrote(&mut self, total: u64) -> bool {
        self.wrote_at(total, Instant::now())
    }

    /// [`SendClass::wrote`] at `now`.
    pub fn wrote_at(&mut self, total: u64, now: Instant) -> bool {
        let bytes = total.saturating_sub(self.written);
        self.written = self.written.max(total);
        match &self.traffic {
            Some(t) if !self.bulk && total >= BULK_BYTES => {
                t.bulk.fetch_add(1, Ordering::Relaxed);
                t.interactive.fetch_sub(1, Ordering::Relaxed);
                self.bulk = true;
                true
            }
            Some(t) if !self.bulk => {
                t.touch(now, bytes);
                false
            }
            _ => false,
        }
    }

    /// The direction ended (finished or reset): it no longer counts.
    pub fn end(&mut self) {
        if let Some(t) = self.traffic.take() {
            let c = if self.bulk { &t.bulk } else { &t.interactive };
            c.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

impl Drop for SendClass {
    fn drop(&mut self) {
        self.end();
    }
}

impl RateConfig {
    /// A pool pacing at most `rate_bps` in total; `initial_rtt` stands for the base RTT until
    /// the first sample.
    pub fn new(rate_bps: u64, initial_rtt: Duration) -> RateConfig {
        RateConfig {
            rate_bps: rate_bps.max(1),
            initial_rtt,
            shares: Arc::new(Shares::new()),
            traffic: None,
        }
    }

    /// The factory for one connection of this pool, whose streams report to `traffic`.
    pub fn for_connection(&self, traffic: Arc<Traffic>) -> RateConfig {
        RateConfig {
            traffic: Some(traffic),
            ..self.clone()
        }
    }

    /// A controller, as quinn builds one per connection.
    pub fn controller(&self, now: Instant, mtu: u16) -> Rate {
        Rate {
            rate_bps: self.rate_bps,
            initial_rtt: self.initial_rtt,
            shares: self.shares.clone(),
            traffic: self.traffic.clone(),
            counted: None,
            sending: false,
            held: false,
            clock: now,
            bulk_since: None,
            acked_in_flight: 0,
            sent_since_acks: 0,
            published: None,
            mtu: u64::from(mtu).max(BASE_DATAGRAM),
            gain: 1.0,
            restarting: false,
            base: BaseRtt::default(),
            srtt: None,
            round_start: now,
            round_in_flight: 0,
            recovery_start: None,
            decreases: 0,
        }
    }
}

impl ControllerFactory for RateConfig {
    fn build(self: Arc<Self>, now: Instant, current_mtu: u16) -> Box<dyn Controller> {
        Box::new(self.controller(now, current_mtu))
    }
}

/// Minimum RTT over the current and the previous [`BASE_RTT_BUCKET`].
#[derive(Debug, Clone, Default)]
struct BaseRtt {
    started: Option<Instant>,
    current: Option<Duration>,
    previous: Option<Duration>,
}

impl BaseRtt {
    fn update(&mut self, now: Instant, sample: Duration) {
        let started = *self.started.get_or_insert(now);
        if now.saturating_duration_since(started) >= BASE_RTT_BUCKET {
            self.previous = self.current.take();
            self.started = Some(now);
        }
        self.current = Some(self.current.map_or(sample, |c| c.min(sample)));
    }

    fn get(&self) -> Option<Duration> {
        match (self.current, self.previous) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

/// One connection's rate controller (module doc).
#[derive(Debug)]
pub struct Rate {
    rate_bps: u64,
    initial_rtt: Duration,
    shares: Arc<Shares>,
    traffic: Option<Arc<Traffic>>,
    /// Whether this controller is counted busy, and as bulk (true) or interactive.
    counted: Option<bool>,
    /// Whether this controller is counted in `shares.sending`.
    sending: bool,
    /// Whether the bulk class was held back at the last event (`Shares::hold_until`).
    held: bool,
    /// The time of the last event: the class ([`Rate::is_bulk`]) is judged at it.
    clock: Instant,
    /// Since when (nanoseconds after the shares' epoch) this connection is bulk.
    bulk_since: Option<u64>,
    /// Bytes in flight at the last batch of acknowledgements.
    acked_in_flight: u64,
    /// Bytes of data datagrams sent since then.
    sent_since_acks: u64,
    /// The class and bytes in flight this controller last added to `shares.in_flight`.
    published: Option<(bool, u64)>,
    mtu: u64,
    /// Fraction of the share in use, 0 (collapsed) or [`MIN_GAIN`]..=1.
    gain: f64,
    /// After persistent congestion: the gain doubles per clear round.
    restarting: bool,
    base: BaseRtt,
    /// quinn's smoothed RTT at the last acknowledgement.
    srtt: Option<Duration>,
    round_start: Instant,
    /// The most bytes this connection had in flight since the round began: a round in which
    /// it stayed below [`BUSY_FRACTION`] of its window is not cut for queueing delay.
    round_in_flight: u64,
    /// Packets sent before this instant are not judged (the last decrease or collapse).
    recovery_start: Option<Instant>,
    decreases: u64,
}

impl Rate {
    /// Whether the connection's traffic is bulk at the last event (module doc).
    pub fn is_bulk(&self) -> bool {
        self.traffic.as_ref().is_some_and(|t| t.bulk_at(self.clock))
    }

    /// This connection's share of the provisioned rate, in bits per second: the rate divided
    /// among the busy connections of its class (itself counted), the bulk class reduced to
    /// [`BULK_YIELD`] of it while an interactive connection sends and the interactive class
    /// to the rest while a bulk one is busy.
    pub fn share_bps(&self) -> u64 {
        let bulk = self.is_bulk();
        let mine = u32::from(self.counted != Some(bulk));
        let busy = self.shares.counter(bulk).load(Ordering::Relaxed) + mine;
        // Connections that have just begun sending count before their acknowledgements do:
        // replies that start together on several connections then split the window instead
        // of each taking all of it for their first round trip.
        let mine = u32::from(!self.is_active(bulk));
        let active = self.shares.active(bulk).load(Ordering::Relaxed) + mine;
        self.class_bps() / u64::from(busy.max(active).max(1))
    }

    /// Whether this connection is published as active in class `bulk`.
    fn is_active(&self, bulk: bool) -> bool {
        matches!(self.published, Some((b, n)) if b == bulk && n >= ACTIVE_BYTES)
    }

    /// The rate of this connection's class (module doc): the provisioned rate, the bulk
    /// class reduced to [`BULK_YIELD`] of it while an interactive connection sends and the
    /// interactive class to the rest while a bulk one is busy.
    pub fn class_bps(&self) -> u64 {
        let bulk = self.is_bulk();
        let fraction = if bulk {
            // Interactive connections sending, itself not counted (it may have turned bulk
            // since it was counted).
            let others = self.shares.sending.load(Ordering::Relaxed) - u32::from(self.sending);
            if self.held || others > 0 {
                BULK_YIELD
            } else {
                1.0
            }
        } else if self.shares.bulk.load(Ordering::Relaxed) > 0 {
            1.0 - BULK_YIELD
        } else {
            1.0
        };
        (self.rate_bps as f64 * fraction) as u64
    }

    /// The base (minimum) RTT, or the configured initial RTT before any sample.
    pub fn base_rtt(&self) -> Duration {
        self.base.get().unwrap_or(self.initial_rtt)
    }

    /// The window at full gain: share × (base RTT + allowance), in bytes.
    pub fn full_window(&self) -> u64 {
        self.window_of(self.share_bps())
    }

    /// Bytes of data that `bps` carries in the base RTT plus the allowance: less the parity
    /// the connection's sends carry now ([`Traffic::data_share`]).
    fn window_of(&self, bps: u64) -> u64 {
        let base = self.base_rtt();
        let t = base + allowance(base);
        let wire = (u128::from(bps) * t.as_nanos() / 8_000_000_000) as u64;
        let data = self.traffic.as_ref().map_or(1.0, |t| t.data_share());
        (wire as f64 * data) as u64
    }

    /// The window of this connection's fair share: the full window at the current gain.
    pub fn fair_window(&self) -> u64 {
        ((self.full_window() as f64 * self.gain) as u64).max(self.min_window())
    }

    /// The class's window at the current gain less what the class's other connections have
    /// in flight: what this connection may fill without the class exceeding its rate.
    fn borrowable(&self) -> u64 {
        let bulk = self.is_bulk();
        let class = (self.window_of(self.class_bps()) as f64 * self.gain) as u64;
        let total = self.shares.in_flight(bulk).load(Ordering::Relaxed);
        let mine = match self.published {
            Some((b, n)) if b == bulk => n,
            _ => 0,
        };
        class.saturating_sub(total.saturating_sub(mine))
    }

    /// This connection's estimate of its bytes in flight: at the last acknowledgements, plus
    /// data datagrams sent since.
    fn own_in_flight(&self) -> u64 {
        self.acked_in_flight.saturating_add(self.sent_since_acks)
    }

    /// Whether the connection used its window in the current round: at least
    /// [`BUSY_FRACTION`] of it in flight at some point since the round began.
    fn busy_this_round(&self) -> bool {
        self.round_in_flight.max(self.own_in_flight()) as f64
            >= self.fair_window() as f64 * BUSY_FRACTION
    }

    /// Brings this connection's entry in the pool's bytes in flight up to date.
    fn publish(&mut self) {
        // Bounded so that the sum over a pool's connections cannot overflow.
        let now = (
            self.is_bulk(),
            self.own_in_flight().min(u64::from(u32::MAX)),
        );
        if self.published == Some(now) {
            return;
        }
        self.unpublish();
        self.shares
            .in_flight(now.0)
            .fetch_add(now.1, Ordering::Relaxed);
        if now.1 >= ACTIVE_BYTES {
            self.shares.active(now.0).fetch_add(1, Ordering::Relaxed);
        }
        self.published = Some(now);
    }

    fn unpublish(&mut self) {
        if let Some((bulk, n)) = self.published.take() {
            self.shares.in_flight(bulk).fetch_sub(n, Ordering::Relaxed);
            if n >= ACTIVE_BYTES {
                self.shares.active(bulk).fetch_sub(1, Ordering::Relaxed);
            }
        }
    }

    /// Fraction of the share in use.
    pub fn gain(&self) -> f64 {
        self.gain
    }

    /// Window reductions so far (delay, ECN or persistent congestion).
    pub fn decreases(&self) -> u64 {
        self.decreases
    }

    fn min_window(&self) -> u64 {
        2 * self.mtu
    }

    fn judged(&self, sent: Instant) -> bool {
        self.recovery_start.is_none_or(|r| sent >= r)
    }

    /// Queueing delay now: the smoothed RTT above the base RTT.
    fn queueing(&self) -> Option<Duration> {
        Some(self.srtt?.saturating_sub(self.base.get()?))
    }

    /// An acknowledgement of a packet sent at `sent`, with quinn's smoothed RTT `srtt`.
    pub fn ack(&mut self, now: Instant, sent: Instant, srtt: Duration) {
        self.refresh_hold(now);
        self.srtt = Some(srtt);
        if !self.judged(sent) {
            return;
        }
        self.base.update(now, now.saturating_duration_since(sent));
        if sent >= self.round_start {
            self.end_round(now);
        }
    }

    fn end_round(&mut self, now: Instant) {
        let limit = threshold(self.base_rtt());

        match self.queueing() {
            // A connection that only sent keep-alives, acknowledgements or credit in this round
            // did not make the queue and is not sending at its rate: the delay is other
            // traffic's. Cutting its gain would leave it, when its next transfer starts, to
            // climb back from the floor for many round trips after the queue has gone; if the
            // queue is still there then, its own first round answers it.
            Some(q) if q > limit && !self.busy_this_round() => self.new_round(now),
            Some(q) if q > limit => self.decrease(now),
            Some(q) if q <= limit / 2 => {
                let f = if self.restarting { 2.0 } else { PROBE };
                self.gain = (self.gain * f).clamp(MIN_GAIN, 1.0);
                if self.gain >= 1.0 {
                    self.restarting = false;
                }
                self.new_round(now);
            }
            _ => self.new_round(now),
        }
    }

    fn new_round(&mut self, now: Instant) {
        self.round_start = now;
        self.round_in_flight = self.own_in_flight();
    }

    fn decrease(&mut self, now: Instant) {
        self.gain = (self.gain * DECREASE).max(MIN_GAIN);
        self.restarting = false;
        self.decreases += 1;
        self.recovery_start = Some(now);
        self.new_round(now);
    }

    /// Loss (`lost_bytes` > 0) or an ECN mark (0) of packets up to one sent at `sent`.
    pub fn congestion(&mut self, now: Instant, sent: Instant, persistent: bool, lost_bytes: u64) {
        self.clock = self.clock.max(now);
        // Lost bytes are no longer in flight, whatever the loss means for the window.
        let from_acked = lost_bytes.min(self.acked_in_flight);
        self.acked_in_flight -= from_acked;
        self.sent_since_acks = self.sent_since_acks.saturating_sub(lost_bytes - from_acked);
        self.publish();
        if persistent {
            self.gain = 0.0;
            self.restarting = true;
            self.decreases += 1;
            self.recovery_start = Some(now);
            self.new_round(now);
            return;
        }
        if !self.judged(sent) {
            return;
        }
        // As for delay alone (`end_round`): a loss while the path is queued counts only if
        // this connection was using its window.
        let queued = self
            .queueing()
            .is_some_and(|q| q > threshold(self.base_rtt()))
            && self.busy_this_round();
        if lost_bytes == 0 || queued {
            self.decrease(now);
        }
    }

    /// An ACK batch was processed with `in_flight` bytes still unacknowledged. A connection
    /// with at least [`BUSY_FRACTION`] of its window in flight takes part in the share; one
    /// with less (idle, or only acknowledging and sending credit updates) leaves it to the
    /// others. (quinn's `app_limited` flag is not used: it often stays false on a connection
    /// that only receives.)
    pub fn end_acks(&mut self, now: Instant, in_flight: u64) {
        self.refresh_hold(now);
        self.acked_in_flight = in_flight;
        self.sent_since_acks = 0;
        self.round_in_flight = self.round_in_flight.max(in_flight);
        self.publish();
        let bulk = self.is_bulk();
        if (in_flight as f64) < self.fair_window() as f64 * BUSY_FRACTION {
            self.uncount();
        } else if self.counted != Some(bulk) {
            tracing::trace!(
                bulk,
                in_flight,
                window = self.window(),
                "rate: connection busy"
            );
            self.uncount();
            self.counted = Some(bulk);
            self.shares.counter(bulk).fetch_add(1, Ordering::Relaxed);
        }
        if let Some(t) = &self.traffic {
            // The rate its interactive bytes drain at: its share while interactive (while
            // bulk, the share a newly active interactive direction would get is unknown;
            // the last one stands).
            let bps = if bulk { 0 } else { self.share_bps() };
            t.set_pace(bps, self.base_rtt());
        }
        self.update_sending(now, bulk);
    }

    /// A datagram of `bytes` went out.
    pub fn sent(&mut self, now: Instant, bytes: u64) {
        self.refresh_hold(now);
        if bytes >= DATA_DATAGRAM {
            self.sent_since_acks += bytes;
            self.round_in_flight = self.round_in_flight.max(self.own_in_flight());
            self.publish();
            if !self.sending {
                self.update_sending(now, self.is_bulk());
            }
        }
    }

    /// Whether the bulk class is held back at `now` by an interactive connection that stopped
    /// sending less than [`HOLD_ROUND_TRIPS`] base RTTs ago.
    /// Only a connection that was bulk when the hold began is held: a download that turns
    /// bulk just after the first bytes of its own reply made a hold is not.
    fn refresh_hold(&mut self, now: Instant) {
        self.clock = self.clock.max(now);
        let t = self.shares.nanos(now);
        if !self.is_bulk() {
            self.bulk_since = None;
        } else if self.bulk_since.is_none() {
            self.bulk_since = Some(t);
        }
        self.held = t < self.shares.hold_until.load(Ordering::Relaxed)
            && self
                .bulk_since
                .is_some_and(|b| b <= self.shares.hold_from.load(Ordering::Relaxed));
    }

    /// Counts this connection in `shares.sending` while it is interactive with more than
    /// [`YIELD_DATAGRAMS`] in flight (estimated between acknowledgements).
    fn update_sending(&mut self, now: Instant, bulk: bool) {
        let in_flight = self.acked_in_flight + self.sent_since_acks;
        let want = !bulk && in_flight > YIELD_DATAGRAMS * self.mtu;
        if want != self.sending {
            self.sending = want;
            tracing::trace!(sending = want, in_flight, "rate: interactive connection");
            if want {
                self.shares.sending.fetch_add(1, Ordering::Relaxed);
            } else {
                self.shares.sending.fetch_sub(1, Ordering::Relaxed);
                // A page's next requests follow its last replies by about a round trip:
                // the bulk class stays back until they can have come. Not when this
                // connection stops counting because it became bulk itself: a download
                // would then hold itself back.
                if !bulk {
                    let until = self.shares.nanos(now + self.base_rtt() * HOLD_ROUND_TRIPS);
                    self.shares
                        .hold_from
                        .store(self.shares.nanos(now), Ordering::Relaxed);
                    self.shares.hold_until.fetch_max(until, Ordering::Relaxed);
                }
            }
        }
    }

    fn uncount(&mut self) {
        if let Some(bulk) = self.counted.take() {
            self.shares.counter(bulk).fetch_sub(1, Ordering::Relaxed);
        }
    }
}

impl Drop for Rate {
    fn drop(&mut self) {
        self.uncount();
        self.unpublish();
        if self.sending {
            self.shares.sending.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

impl Clone for Rate {
    /// The clone (quinn's new path) starts uncounted: it joins the share when busy.
    fn clone(&self) -> Rate {
        Rate {
            shares: self.shares.clone(),
            traffic: self.traffic.clone(),
            counted: None,
            sending: false,
            published: None,
            base: self.base.clone(),
            ..*self
        }
    }
}

impl Controller for Rate {
    fn on_sent(&mut self, now: Instant, bytes: u64, _last_packet_number: u64) {
        self.sent(now, bytes);
    }

    fn on_ack(
        &mut self,
        now: Instant,
        sent: Instant,
        _bytes: u64,
        _app_limited: bool,
        rtt: &RttEstimator,
    ) {
        self.ack(now, sent, rtt.get());
    }

    fn on_end_acks(
        &mut self,
        now: Instant,
        in_flight: u64,
        _app_limited: bool,
        _largest_packet_num_acked: Option<u64>,
    ) {
        self.end_acks(now, in_flight);
    }

    fn on_congestion_event(
        &mut self,
        now: Instant,
        sent: Instant,
        is_persistent_congestion: bool,
        lost_bytes: u64,
    ) {
        self.congestion(now, sent, is_persistent_congestion, lost_bytes);
    }

    fn on_mtu_update(&mut self, new_mtu: u16) {
        self.mtu = u64::from(new_mtu).max(BASE_DATAGRAM);
    }

    fn window(&self) -> u64 {
        self.fair_window().max(self.borrowable())
    }

    fn metrics(&self) -> ControllerMetrics {
        let mut m = ControllerMetrics::default();
        m.congestion_window = self.window();
        let t = self.base_rtt() + allowance(self.base_rtt());
        m.pacing_rate =
            Some((u128::from(self.window()) * 8_000_000_000 / t.as_nanos().max(1)) as u64);
        m
    }

    fn clone_box(&self) -> Box<dyn Controller> {
        Box::new(self.clone())
    }

    fn initial_window(&self) -> u64 {
        self.window()
    }

    fn into_any(self: Box<Self>) -> Box<dyn Any> {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);
    /// 10 Mbit/s at 200 ms: the `lossy` profile.
    const RATE: u64 = 10_000_000;
    const BASE: Duration = Duration::from_millis(200);

    /// A bulk sender over a path of `rtt`, driven by hand: one round trip per call, with
    /// `acks` acknowledgements spread over it, each sample `rtt` plus `jitter(i)`.
    struct Drive {
        c: Rate,
        now: Instant,
    }

    impl Drive {
        fn new(rate_bps: u64) -> Drive {
            let now = Instant::now();
            let cfg = RateConfig::new(rate_bps, BASE);
            let mut c = cfg.controller(now, 1200);
            c.end_acks(now, u64::MAX);
            Drive { c, now }
        }

        /// One round trip of acknowledgements with RTT `rtt`; every `lose_every`-th packet
        /// is lost instead (0: none).
        fn round(&mut self, rtt: Duration, lose_every: u32) {
            let n = 50u32;
            let step = rtt / n;
            for i in 0..n {
                self.now += step;
                let sent = self.now - rtt;
                if lose_every != 0 && i % lose_every == lose_every - 1 {
                    self.c.congestion(self.now, sent, false, 1200);
                } else {
                    self.c.ack(self.now, sent, rtt);
                }
            }
        }

        fn window(&self) -> u64 {
            self.c.window()
        }
    }

    fn cap(rate_bps: u64, base: Duration) -> u64 {
        (u128::from(rate_bps) * (base + allowance(base)).as_nanos() / 8_000_000_000) as u64
    }

    #[test]
    fn threshold_and_allowance_follow_the_base_rtt() {
        assert_eq!(threshold(20 * MS), 25 * MS);
        assert_eq!(threshold(BASE), 50 * MS);
        assert_eq!(threshold(600 * MS), 150 * MS);
        assert_eq!(allowance(20 * MS), 10 * MS);
        assert_eq!(allowance(600 * MS), Duration::from_micros(37_500));
        for b in [MS, 20 * MS, BASE, 600 * MS, 10_000 * MS] {
            assert!(allowance(b) < threshold(b) / 2, "{b:?}");
        }
    }

    #[test]
    fn starts_at_the_full_share_of_the_configured_rtt() {
        let d = Drive::new(RATE);
        assert_eq!(d.window(), cap(RATE, BASE));
        assert_eq!(d.c.share_bps(), RATE);
    }

    #[test]
    fn random_loss_at_min_rtt_keeps_the_window() {
        let mut d = Drive::new(RATE);
        let full = d.window();
        // 3 % loss: one packet in 33 of every round, for 100 round trips.
        for _ in 0..100 {
            d.round(BASE, 33);
            assert_eq!(d.window(), full);
        }
        assert_eq!(d.c.decreases(), 0);
    }

    #[test]
    fn queueing_delay_halves_then_recovers_when_it_drains() {
        let mut d = Drive::new(RATE);
        let full = d.window();
        d.round(BASE, 0);
        // 60 ms of queue > threshold (50 ms): one halving per round trip, not per ACK.
        d.round(BASE + 60 * MS, 0);
        assert_eq!(d.c.decreases(), 1);
        assert!((d.window() as f64 - full as f64 * DECREASE).abs() <= 1.0);
        // Samples of packets sent before the decrease are not judged again.
        let w = d.window();
        d.round(BASE + 60 * MS, 0);
        assert!(d.window() <= w);
        // Persisting: keeps halving, down to the floor.
        for _ in 0..20 {
            d.round(BASE + 60 * MS, 0);
        }
        assert!((d.c.gain() - MIN_GAIN).abs() < 1e-9, "{}", d.c.gain());
        // 30 ms is within the hold band (25..=50 ms): no change.
        let w = d.window();
        d.round(BASE + 30 * MS, 0);
        d.round(BASE + 30 * MS, 0);
        assert_eq!(d.window(), w);
        // The queue drains: the gain climbs back by 1.25 per round trip to the share.
        let mut rounds = 0;
        while d.window() < full {
            d.round(BASE, 0);
            rounds += 1;
            assert!(rounds < 30, "recovered within 30 round trips");
        }
        assert_eq!(d.window(), full);
        // 1.25^19 ≥ 64: about 19 round trips from the floor (one round per sample round).
        assert!(rounds >= 15, "{rounds}");
    }

    #[test]
    fn an_idle_connection_is_not_cut_by_other_traffics_queue() {
        let start = Instant::now();
        let mut c = RateConfig::new(RATE, BASE).controller(start, 1200);
        let mut now = start + BASE;
        c.end_acks(now, 0);
        c.ack(now, start, BASE);
        // Twenty round trips of keep-alives (below a data datagram's size) while another
        // flow keeps 300 ms of queue at the bottleneck.
        let queued = BASE + 300 * MS;
        for _ in 0..20 {
            c.sent(now, 40);
            let sent = now;
            now += queued;
            c.ack(now, sent, queued);
            c.end_acks(now, 0);
        }
        assert_eq!(c.decreases(), 0);
        assert_eq!(c.gain(), 1.0);
        // The same queue while the connection sends at its rate: its own, cut.
        let window = c.window();
        for _ in 0..(window / 1200) {
            c.sent(now, 1200);
        }
        let sent = now;
        now += queued;
        c.ack(now, sent, queued);
        c.end_acks(now, window / 2);
        assert_eq!(c.decreases(), 1);
        assert!((c.gain() - DECREASE).abs() < 1e-9, "{}", c.gain());
    }

    #[test]
    fn loss_with_queueing_delay_counts_once_per_round() {
        let mut d = Drive::new(RATE);
        let full = d.window();
        d.round(BASE, 0);
        // Loss while the smoothed RTT shows 80 ms of queue: congestion.
        d.c.ack(d.now, d.now - BASE - 80 * MS, BASE + 80 * MS);
        d.c.congestion(d.now, d.now - 10 * MS, false, 1200);
        assert_eq!(d.c.decreases(), 1);
        // More loss from packets sent before that decrease: same episode.
        d.c.congestion(d.now + MS, d.now - 5 * MS, false, 1200);
        assert_eq!(d.c.decreases(), 1);
        assert!(d.window() < full);
    }

    #[test]
    fn ecn_marks_are_congestion() {
        let mut d = Drive::new(RATE);
        d.round(BASE, 0);
        d.c.congestion(d.now, d.now - MS, false, 0);
        assert_eq!(d.c.decreases(), 1);
    }

    #[test]
    fn persistent_congestion_collapses_to_two_datagrams_and_restarts() {
        let mut d = Drive::new(RATE);
        let full = d.window();
        d.round(BASE, 0);
        d.c.congestion(d.now, d.now - MS, true, 12_000);
        assert_eq!(d.window(), 2 * 1200);
        let mut rounds = 0;
        while d.window() < full {
            d.round(BASE, 0);
            rounds += 1;
            assert!(rounds <= 8, "doubling: 1/64 to 1 in 7 round trips");
        }
    }

    #[test]
    fn never_exceeds_the_rate_times_the_rtt_allowance() {
        let mut d = Drive::new(RATE);
        let mut n = 0;
        // Any mix of RTTs at or above the base, with and without loss.
        for i in 0..400u32 {
            let rtt = BASE + MS * ((i * 37) % 90);
            d.round(rtt, if i % 3 == 0 { 20 } else { 0 });
            assert!(d.window() <= cap(RATE, BASE), "round {i}: {}", d.window());
            n += 1;
        }
        assert_eq!(n, 400);
        // A base RTT learnt below the configured one shrinks the window with it.
        let mut d = Drive::new(RATE);
        d.round(100 * MS, 0);
        assert_eq!(d.window(), cap(RATE, 100 * MS));
    }

    #[test]
    fn the_rate_is_shared_among_busy_connections_only() {
        let now = Instant::now();
        let cfg = RateConfig::new(RATE, BASE);
        let mut a = cfg.controller(now, 1200);
        let mut b = cfg.controller(now, 1200);
        let busy = cap(RATE, BASE);
        a.end_acks(now, busy);
        assert_eq!(a.share_bps(), RATE);
        b.end_acks(now, busy);
        b.end_acks(now, busy);
        assert_eq!(a.share_bps(), RATE / 2);
        assert_eq!(a.window(), cap(RATE / 2, BASE));
        // b's data is all acknowledged: a gets the whole rate back.
        b.end_acks(now, 0);
        assert_eq!(a.share_bps(), RATE);
        // b only acknowledges and sends credit updates: a packet or two in flight.
        b.end_acks(now, 2_000);
        assert_eq!(a.share_bps(), RATE);
        b.end_acks(now, busy);
        let c = b.clone();
        assert_eq!(a.share_bps(), RATE / 2, "a clone is not counted until busy");
        drop(b);
        drop(c);
        assert_eq!(a.share_bps(), RATE);
    }

    /// Two connections of one pool, and the pool's full window.
    fn two_connections() -> (Instant, Rate, Rate, u64) {
        let now = Instant::now();
        let cfg = RateConfig::new(RATE, BASE);
        let a = cfg.controller(now, 1200);
        let b = cfg.controller(now, 1200);
        (now, a, b, cap(RATE, BASE))
    }

    #[test]
    fn a_busy_connection_borrows_what_the_others_leave_unused() {
        let (now, mut a, mut b, full) = two_connections();
        // Both busy: a with its fair share in flight, b finishing a small reply.
        a.end_acks(now, full / 2);
        b.end_acks(now, full / 6);
        assert_eq!(a.share_bps(), RATE / 2);
        assert_eq!(b.share_bps(), RATE / 2);
        // a may fill what b leaves: the pool's window less b's bytes in flight.
        assert_eq!(a.window(), full - full / 6);
        // b's window is its fair share (a's bytes leave it no more).
        assert_eq!(b.window(), full - full / 2);
        // b sends more: a may borrow as much less, never less than its fair share.
        for _ in 0..10 {
            b.sent(now, 1200);
        }
        assert_eq!(a.window(), full - full / 6 - 12_000);
        b.end_acks(now, full / 2);
        assert_eq!(a.window(), full - full / 2);
        // b's bytes are all acknowledged: a has the whole window.
        b.end_acks(now, 0);
        assert_eq!(a.window(), full);
        // Whatever each has in flight, a borrower's window never exceeds the pool's.
        for (x, y) in [(0, 0), (full, 0), (full / 3, full / 3), (2 * full, full)] {
            a.end_acks(now, x);
            b.end_acks(now, y);
            assert!(a.window() <= full && b.window() <= full, "{x} {y}");
        }
        // A connection that goes away takes its bytes in flight out of the pool's count.
        a.end_acks(now, full / 4);
        b.end_acks(now, full / 2);
        assert_eq!(a.window(), full - full / 2);
        drop(b);
        assert_eq!(a.window(), full);
    }

    #[test]
    fn replies_that_start_together_split_the_window_at_once() {
        let now = Instant::now();
        let cfg = RateConfig::new(RATE, BASE);
        let mut c: Vec<Rate> = (0..4).map(|_| cfg.controller(now, 1200)).collect();
        let full = cap(RATE, BASE);
        // Four replies begin in the same instant on four idle connections, before any
        // acknowledgement: each sends while its window allows, in turn.
        let mut sent = [0u64; 4];
        for _ in 0..1000 {
            for (k, x) in c.iter_mut().enumerate() {
                if sent[k] + 1200 <= x.window() {
                    x.sent(now, 1200);
                    sent[k] += 1200;
                }
            }
        }
        let total: u64 = sent.iter().sum();
        // Not four windows: the pool's window, give or take a datagram per connection.
        assert!(total <= full + 4 * 1200, "{total} > {full}");
        assert!(total + 4 * 1200 >= full, "{total} < {full}");
        for (k, n) in sent.iter().enumerate() {
            assert!(*n >= full / 4 - 1200, "connection {k}: {n}");
        }
    }

    #[test]
    fn a_loss_frees_its_bytes_for_the_others() {
        let (now, mut a, mut b, full) = two_connections();
        a.end_acks(now, full / 2);
        b.end_acks(now, full / 2);
        assert_eq!(a.window(), full - full / 2);
        // b declares 24 000 bytes lost (random loss, no queueing delay): no longer in flight.
        b.congestion(now, now, false, 24_000);
        assert_eq!(a.window(), full - full / 2 + 24_000);
        assert_eq!(b.decreases(), 0);
    }

    #[test]
    fn bulk_borrows_only_within_its_yield() {
        let (now, mut b, mut i, _reply) = bulk_and_interactive();
        for _ in 0..10 {
            i.sent(now, 1200);
        }
        let yielded = cap((RATE as f64 * BULK_YIELD) as u64, BASE);
        // The download has more than its class's window in flight: nothing to borrow.
        assert_eq!(b.window(), yielded);
        // Its bytes are declared lost (it stays counted busy): the class's window is all
        // its own, and the class is the yield.
        b.congestion(now, now, false, cap(RATE, BASE));
        assert_eq!(b.window(), yielded);
        // The page borrows within the interactive class only, not what the bulk class
        // leaves unused.
        i.end_acks(now, 12_000);
        assert_eq!(
            i.window(),
            cap((RATE as f64 * (1.0 - BULK_YIELD)) as u64, BASE)
        );
    }

    #[test]
    fn a_newcomer_sizes_its_window_as_one_more_sharer() {
        let now = Instant::now();
        let cfg = RateConfig::new(RATE, BASE);
        let mut a = cfg.controller(now, 1200);
        let b = cfg.controller(now, 1200);
        assert_eq!(b.share_bps(), RATE, "alone, a newcomer has the whole rate");
        a.end_acks(now, cap(RATE, BASE));
        assert_eq!(a.share_bps(), RATE);
        assert_eq!(b.share_bps(), RATE / 2, "not the share a still holds");
    }

    #[test]
    fn a_send_direction_turns_bulk_after_bulk_bytes() {
        let t = Arc::new(Traffic::default());
        assert!(
            !t.bulk(),
            "nothing open: the tail of what was sent is not bulk"
        );
        let mut a = SendClass::open(t.clone());
        let b = SendClass::open(t.clone());
        assert_eq!(t.interactive(), 2);
        assert!(!a.wrote(BULK_BYTES - 1));
        assert!(a.wrote(BULK_BYTES), "crossing reported once");
        assert!(!a.wrote(BULK_BYTES + 1));
        assert_eq!(t.interactive(), 1);
        assert!(!t.bulk(), "an interactive direction is open");
        drop(b);
        assert!(t.bulk());
        a.end();
        assert!(!t.bulk(), "the download ended");
        drop(a);
        assert_eq!(t.interactive(), 0, "ended once only");
        assert!(!t.bulk());
    }

    #[test]
    fn a_download_beside_a_quiet_interactive_stream_yields_as_bulk() {
        let now = Instant::now();
        let cfg = RateConfig::new(RATE, BASE);
        // Connection 0: a download, and a page's tunnel to one host packed beside it.
        let mixed = Arc::new(Traffic::new(RATE, BASE));
        let mut download = SendClass::open_at(mixed.clone(), now);
        assert!(download.wrote_at(BULK_BYTES, now));
        let mut tunnel = SendClass::open_at(mixed.clone(), now);
        let mut m = cfg.for_connection(mixed.clone()).controller(now, 1200);
        m.end_acks(now, cap(RATE, BASE));
        assert!(!m.is_bulk(), "a tunnel that has just opened is active");
        // The tunnel's replies, 125 kB: 100 ms at the link's rate, then two round trips.
        assert!(!tunnel.wrote_at(125_000, now));
        let quiet = now + 100 * MS + BASE * HOLD_ROUND_TRIPS;
        assert!(!mixed.bulk_at(quiet - MS));
        assert!(mixed.bulk_at(quiet + MS), "open, but nothing to send");
        // Connection 1: the page's other host, sending. The download yields to it although
        // the quiet tunnel is still open on its connection.
        let page = Arc::new(Traffic::new(RATE, BASE));
        let _reply = SendClass::open_at(page.clone(), now);
        let mut p = cfg.for_connection(page).controller(now, 1200);
        let t = quiet + MS;
        for _ in 0..=YIELD_DATAGRAMS {
            p.sent(t, 1200);
        }
        m.end_acks(t, cap(RATE, BASE));
        assert!(m.is_bulk());
        assert_eq!(m.share_bps(), (RATE as f64 * BULK_YIELD) as u64);
        // The page's next level on the tunnel: the connection is interactive at once, and
        // its share (split with the page's other connection) is the rate its bytes drain at.
        let t = t + 50 * MS;
        assert!(!tunnel.wrote_at(125_000 + 10_000, t));
        m.end_acks(t, cap(RATE, BASE));
        assert!(!m.is_bulk());
        let share = m.share_bps();
        assert!(share < RATE, "{share}");
        assert_eq!(mixed.drain_bps.load(Ordering::Relaxed), share);
        // Its 10 kB drain at the rate in force when written (the link's), 10 kB more at that
        // share after them; then two round trips.
        assert!(!tunnel.wrote_at(125_000 + 20_000, t));
        let drains = Duration::from_nanos(10_000 * 8_000_000_000 / RATE)
            + Duration::from_nanos(10_000 * 8_000_000_000 / share);
        assert!(!mixed.bulk_at(t + drains + BASE * HOLD_ROUND_TRIPS - MS));
        assert!(mixed.bulk_at(t + drains + BASE * HOLD_ROUND_TRIPS + MS));
        // The tunnel ends: the download alone is bulk whenever.
        tunnel.end();
        assert!(mixed.bulk_at(t));
        download.end();
        assert!(!mixed.bulk_at(t), "nothing open");
    }

    /// A pool with one bulk connection (a download) and one interactive one (a page).
    fn bulk_and_interactive() -> (Instant, Rate, Rate, SendClass) {
        let now = Instant::now();
        let cfg = RateConfig::new(RATE, BASE);
        let download = Arc::new(Traffic::default());
        let page = Arc::new(Traffic::default());
        let mut d = SendClass::open(download.clone());
        assert!(d.wrote(BULK_BYTES));
        // The download stays open for the whole test.
        std::mem::forget(d);
        let mut b = cfg.for_connection(download).controller(now, 1200);
        let i = cfg.for_connection(page.clone()).controller(now, 1200);
        let reply = SendClass::open(page);
        b.end_acks(now, cap(RATE, BASE));
        assert!(b.is_bulk() && !i.is_bulk());
        (now, b, i, reply)
    }

    #[test]
    fn bulk_yields_while_an_interactive_connection_sends() {
        let (now, mut b, mut i, _reply) = bulk_and_interactive();
        assert_eq!(
            b.share_bps(),
            RATE,
            "alone, the download has the whole rate"
        );
        // The page's first datagrams: at most YIELD_DATAGRAMS in flight changes nothing.
        for _ in 0..YIELD_DATAGRAMS {
            i.sent(now, 1200);
        }
        assert_eq!(b.share_bps(), RATE);
        // One more, before any acknowledgement: the download yields at once.
        i.sent(now, 1200);
        assert_eq!(b.share_bps(), (RATE as f64 * BULK_YIELD) as u64);
        assert_eq!(b.window(), cap((RATE as f64 * BULK_YIELD) as u64, BASE));
        // The page's share, before and after it is counted busy.
        assert_eq!(i.share_bps(), (RATE as f64 * (1.0 - BULK_YIELD)) as u64);
        i.end_acks(now, cap(RATE, BASE));
        assert_eq!(i.share_bps(), (RATE as f64 * (1.0 - BULK_YIELD)) as u64);
        // Everything the page sent is acknowledged. Its next requests may follow within a
        // round trip: the download stays back for HOLD_ROUND_TRIPS base RTTs, then takes the
        // rate back.
        i.end_acks(now, 0);
        let yielded = (RATE as f64 * BULK_YIELD) as u64;
        b.ack(now + MS, now - BASE, BASE);
        assert_eq!(b.share_bps(), yielded);
        let later = now + BASE * HOLD_ROUND_TRIPS - MS;
        b.ack(later, later - BASE, BASE);
        assert_eq!(b.share_bps(), yielded);
        let later = now + BASE * HOLD_ROUND_TRIPS + MS;
        b.ack(later, later - BASE, BASE);
        assert_eq!(b.share_bps(), RATE);
        // Acknowledgements and credit updates (small datagrams) are not data in flight.
        for _ in 0..1000 {
            i.sent(now, 60);
        }
        assert_eq!(b.share_bps(), RATE);
    }

    #[test]
    fn a_download_that_turns_bulk_does_not_hold_itself_back() {
        let now = Instant::now();
        let cfg = RateConfig::new(RATE, BASE);
        let traffic = Arc::new(Traffic::default());
        let mut d = SendClass::open(traffic.clone());
        let mut c = cfg.for_connection(traffic).controller(now, 1200);
        // Its first megabyte goes out as interactive bytes.
        for _ in 0..100 {
            c.sent(now, 1200);
        }
        c.end_acks(now, cap(RATE, BASE));
        assert!(!c.is_bulk());
        // Its in-flight dips once (the origin was slow for a moment): that begins a hold for
        // connections already bulk, which it is not.
        c.end_acks(now + MS, 1200);
        for _ in 0..100 {
            c.sent(now + 2 * MS, 1200);
        }
        c.end_acks(now + 3 * MS, cap(RATE, BASE));
        // It turns bulk with its window full: the whole rate stays its own.
        assert!(d.wrote(BULK_BYTES));
        let later = now + 10 * MS;
        c.end_acks(later, cap(RATE, BASE));
        c.ack(later + MS, later - BASE, BASE);
        assert!(c.is_bulk());
        assert_eq!(c.share_bps(), RATE);
    }

    #[test]
    fn a_connection_that_ends_its_interactive_streams_stops_holding_bulk_back() {
        let (now, b, mut i, reply) = bulk_and_interactive();
        for _ in 0..10 {
            i.sent(now, 1200);
        }
        assert!(b.share_bps() < RATE);
        // Dropped while sending (connection closed): the yield ends with it.
        drop(i);
        assert_eq!(b.share_bps(), RATE);
        drop(reply);
        // Two downloads share equally and nothing makes them yield.
        let (now, b, mut i, mut reply) = bulk_and_interactive();
        assert!(reply.wrote(BULK_BYTES));
        assert!(i.is_bulk());
        for _ in 0..10 {
            i.sent(now, 1200);
        }
        i.end_acks(now, cap(RATE, BASE));
        assert_eq!(b.share_bps(), RATE / 2);
        assert_eq!(i.share_bps(), RATE / 2);
    }

    #[test]
    fn parity_is_counted_in_the_share() {
        let (now, b, mut i, _reply) = bulk_and_interactive();
        let page = i.traffic.clone().expect("traffic");
        let wire = |w: u64, t: &Traffic| w as f64 / t.data_share();
        for _ in 0..=YIELD_DATAGRAMS {
            i.sent(now, 1200);
        }
        i.end_acks(now, cap(RATE, BASE));
        let unprotected = i.window();
        assert_eq!(
            unprotected,
            cap((RATE as f64 * (1.0 - BULK_YIELD)) as u64, BASE)
        );
        // The page's sends are protected, one parity per 8 datagrams: its window makes room
        // for the parity, and the download's is unchanged.
        page.set_parity(Some(8));
        assert!((page.data_share() - 8.0 / 9.0).abs() < 1e-12);
        let protected = i.window();
        assert!(protected.abs_diff(unprotected * 8 / 9) <= 1, "{protected}");
        assert_eq!(b.window(), cap((RATE as f64 * BULK_YIELD) as u64, BASE));
        // Data and parity of the page plus the download: the pool's rate, not more.
        let total = wire(protected, &page) + b.window() as f64;
        assert!(total <= cap(RATE, BASE) as f64 + 2.0, "{total}");
        // Parity off again: the whole share is data.
        page.set_parity(None);
        assert_eq!(page.data_share(), 1.0);
        assert_eq!(i.window(), unprotected);
    }

    #[test]
    fn the_base_rtt_forgets_a_route_that_is_gone() {
        let mut d = Drive::new(RATE);
        d.round(100 * MS, 0);
        assert_eq!(d.c.base_rtt(), 100 * MS);
        // The route now takes 200 ms: after two buckets the old minimum is gone.
        for _ in 0..((2 * BASE_RTT_BUCKET.as_millis() / 200) as usize + 2) {
            d.round(BASE, 0);
        }
        assert_eq!(d.c.base_rtt(), BASE);
    }
}
