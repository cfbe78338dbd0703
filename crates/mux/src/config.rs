//! Typed, validated limits of a session (PROTOCOL.md §4, §5).

use std::time::Duration;

use crate::frame::MAX_PAYLOAD_LEN;

/// Round-trip time the defaults are sized for: Auckland–Los Angeles (`pacific` profile).
pub const DEFAULT_RTT: Duration = Duration::from_millis(130);
/// Link rate the defaults are sized for, bits per second.
pub const DEFAULT_RATE_BPS: u64 = 100_000_000;
/// Largest frame payload we accept and send, bytes. 16 KiB keeps one frame's
/// serialization short (1.3 ms at 100 Mbit/s) so streams interleave finely; the
/// header costs at most 12 bytes of it (0.07%).
pub const DEFAULT_MAX_FRAME_SIZE: u32 = 16 * 1024;
/// Smallest per-stream window (maximum) [`Config::for_link`] picks, bytes.
pub const MIN_STREAM_WINDOW: u32 = 64 * 1024;
/// Largest per-stream window (maximum) [`Config::for_link`] picks, bytes.
pub const MAX_STREAM_WINDOW: u32 = 16 * 1024 * 1024;
/// Bandwidth-delay products a stream's receive window grows to at most (it starts at
/// [`DEFAULT_INITIAL_STREAM_WINDOW`] and grows while its reader keeps up, `session::credit`):
/// 4, the window that was fastest for one large transfer on every benchmark profile (with 1.5 %
/// random loss 2 × BDP reached 0.83 of direct, 4 × BDP matched it: benches/notes/2026-11-25.md,
/// lossy).
/// Before autotuning every stream had this window from the start, and the default was 2.
pub const DEFAULT_STREAM_WINDOW_BDPS: u32 = 4;
/// Most bandwidth-delay products [`Config::for_link_bdps`] accepts for the stream window.
pub const MAX_STREAM_WINDOW_BDPS: u32 = 16;
/// Receive window a stream starts with, bytes (at most the maximum, `stream_window`): 256 KiB.
/// Small enough that a reader that does not keep up holds little (100 stalled clients hold
/// 25 MiB, not 100 maximum windows: 650 MB at 4 × BDP on `pacific`); large enough that a
/// typical web object arrives in its first flight without waiting for the window to grow, and
/// that the 4 × BDP of `pacific` (6.5 MB) is reached in five doublings. Between Linux's
/// default initial receive buffer (`tcp_rmem` 128 KiB) and quic-go's initial stream window
/// (512 KiB).
pub const DEFAULT_INITIAL_STREAM_WINDOW: u32 = 256 * 1024;
/// Receive credit a session may commit to its streams before new streams start at the
/// [`DEFAULT_INITIAL_STREAM_WINDOW`] floor, bytes: 32 MiB. While the streams' committed credit
/// (the sum of their receive windows, `session::credit`) is below it, a new stream starts
/// with the headroom left, up to its maximum window, so a reply of a few MB on a quiet session is
/// not held back by a small window for the round trips its growth would take. 32 MiB is five
/// maximum windows of `pacific` (6.5 MB, 4 × BDP) and an eighth of one connection's credit
/// ([`DEFAULT_CONN_WINDOW`]), so large starts never bring connection credit near binding; with
/// it K stalled readers commit at most 32 MiB + K × 256 KiB (the bound of Linux's `tcp_mem`
/// pressure mode, which stops window growth and cuts the windows of filling sockets to a few
/// segments once the host's socket memory passes a threshold, applied per session).
pub const DEFAULT_INITIAL_WINDOW_BUDGET: u64 = 32 * 1024 * 1024;
/// Most concurrent streams per QUIC pool connection (`pool::QuicOptions`).
pub const DEFAULT_MAX_STREAMS: u32 = 1024;
/// Most concurrent streams of one mux session (all its connections) with a peer that honours
/// connection credit: [`DEFAULT_MAX_STREAMS`] for each of the pool's four default connections.
pub const DEFAULT_SESSION_STREAMS: u32 = 4 * DEFAULT_MAX_STREAMS;
/// Most concurrent streams a [`Config`] may accept (each costs state and, at the proxies, a
/// task and sockets; the buffers are bounded by the windows).
pub const MAX_STREAMS: u32 = 1 << 20;
/// Credit each connection of a session grants the peer for all its streams together, bytes
/// (PROTOCOL.md §4.1): 256 MiB, so the pool's four default connections buffer at most 1 GiB
/// per direction, the budget [`DEFAULT_MAX_BUFFERED_BYTES`] that once bounded the whole session.
/// A connection's streams stall together only once this much is received and unread.
pub const DEFAULT_CONN_WINDOW: u32 = 256 * 1024 * 1024;
/// Budget for bytes buffered for all streams in one direction with a peer that does not
/// honour connection credit (its HELLO has no `conn_window`): the stream limit with such a peer
/// is lowered so that `max_streams × stream_window` fits in it.
pub const DEFAULT_MAX_BUFFERED_BYTES: u64 = 1024 * 1024 * 1024;
/// How often an idle-or-busy connection is PINGed (keeps NAT state and the
/// congestion window warm, measures RTT).
pub const DEFAULT_PING_INTERVAL: Duration = Duration::from_secs(10);
/// How long a PING may stay unanswered before the connection is declared dead.
pub const DEFAULT_PING_TIMEOUT: Duration = Duration::from_secs(20);
/// How long a new connection may take to receive the peer's HELLO.
pub const DEFAULT_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Most control frames (PONG, WINDOW, RESET, GOAWAY) queued and not yet taken
/// by the driver for one connection; a peer that makes us exceed it (for
/// example by flooding PINGs without reading) is closed with ENHANCE_YOUR_CALM.
pub const DEFAULT_MAX_CONTROL_BYTES: usize = 256 * 1024;

/// The default [`Config::head_window`] for a link of `rtt`: [`crate::policy::HEAD_ROUND_TRIPS`]
/// round trips, at most [`crate::policy::MAX_PAGE_AGE`].
pub fn head_window(rtt: Duration) -> Duration {
    (rtt * crate::policy::HEAD_ROUND_TRIPS).min(crate::policy::MAX_PAGE_AGE)
}

/// Limits and timers of one session. Build with [`Config::for_link`] or
/// [`Config::default`], adjust fields, then [`Config::validate`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// Largest frame payload we accept (advertised in HELLO) and send, bytes.
    pub max_frame_size: u32,
    /// Largest credit granted to each stream in the direction towards us, bytes: its receive
    /// window grows up to this while its reader keeps up (PROTOCOL.md §4.2).
    pub stream_window: u32,
    /// Credit each stream starts with in the direction towards us (advertised in HELLO as
    /// `initial_window`), bytes; see [`DEFAULT_INITIAL_STREAM_WINDOW`]. Above `stream_window`
    /// it counts as `stream_window` ([`Config::initial_window`]); equal to it, windows never
    /// grow.
    pub initial_stream_window: u32,
    /// Receive credit committed to all streams below which a new stream starts above
    /// `initial_stream_window` (up to `stream_window`), bytes; 0: every stream starts at
    /// `initial_stream_window`. See [`DEFAULT_INITIAL_WINDOW_BUDGET`] and
    /// [`Config::start_window`].
    pub initial_window_budget: u64,
    /// Credit granted to each connection for all its streams in the direction towards us,
    /// bytes; see [`DEFAULT_CONN_WINDOW`].
    pub conn_window: u32,
    /// Most concurrent streams we accept (from a peer without connection credit, at most
    /// [`Config::legacy_max_streams`]).
    pub max_streams: u32,
    /// Budget in bytes for all streams' buffers in one direction with a peer that does not
    /// honour connection credit; see [`DEFAULT_MAX_BUFFERED_BYTES`].
    pub max_buffered_bytes: u64,
    /// PING period per connection.
    pub ping_interval: Duration,
    /// PONG deadline per PING.
    pub ping_timeout: Duration,
    /// HELLO deadline per new connection.
    pub handshake_timeout: Duration,
    /// Control-frame queue bound per connection, bytes.
    pub max_control_bytes: usize,
    /// How long after a page began a newer page's first bytes still go ahead of its later
    /// bytes on a lane ([`crate::policy::send_deadline`]); default
    /// [`crate::policy::HEAD_ROUND_TRIPS`] × the link's RTT, at most
    /// [`crate::policy::MAX_PAGE_AGE`]. Zero: strict page order.
    pub head_window: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Config::for_link(DEFAULT_RTT, DEFAULT_RATE_BPS)
    }
}

/// A [`Config`] that cannot work.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid mux config: {0}")]
pub struct ConfigError(pub String);

impl Config {
    /// Limits sized for a link of round-trip time `rtt` and rate `rate_bps`, with the
    /// stream window at [`DEFAULT_STREAM_WINDOW_BDPS`]; see [`Config::for_link_bdps`].
    pub fn for_link(rtt: Duration, rate_bps: u64) -> Config {
        Config::for_link_bdps(rtt, rate_bps, DEFAULT_STREAM_WINDOW_BDPS)
    }

    /// Limits sized for a link of round-trip time `rtt` and rate `rate_bps`:
    /// each stream's window starts at [`DEFAULT_INITIAL_STREAM_WINDOW`] and grows up to `bdps`
    /// (at least 1) times the bandwidth-delay product, clamped to
    /// [`MIN_STREAM_WINDOW`]..=[`MAX_STREAM_WINDOW`]. One BDP is not enough for
    /// one stream to fill the link: credit comes back only after a round trip
    /// plus the sender's queueing delay, and in steps of a quarter window
    /// (PROTOCOL.md §4.2); with two BDPs one stream alone can fill a lossless link (with
    /// 1.5 % random loss it reached 0.83 of direct, 4 × BDP matched it:
    /// benches/notes/2026-11-25.md, lossy);
    /// each connection's window is [`DEFAULT_CONN_WINDOW`] and `max_streams`
    /// [`DEFAULT_SESSION_STREAMS`], whatever the stream window: the connection windows bound
    /// the buffers. With a peer that has no connection credit the stream limit is
    /// [`Config::legacy_max_streams`] instead, which a larger window lowers.
    pub fn for_link_bdps(rtt: Duration, rate_bps: u64, bdps: u32) -> Config {
        let bdp = (rtt.as_secs_f64() * rate_bps as f64 / 8.0) as u64;
        let window = (u64::from(bdps.max(1)) * bdp)
            .clamp(u64::from(MIN_STREAM_WINDOW), u64::from(MAX_STREAM_WINDOW));
        Config {
            max_frame_size: DEFAULT_MAX_FRAME_SIZE,
            stream_window: window as u32,
            initial_stream_window: (window as u32).min(DEFAULT_INITIAL_STREAM_WINDOW),
            initial_window_budget: DEFAULT_INITIAL_WINDOW_BUDGET,
            conn_window: DEFAULT_CONN_WINDOW,
            max_streams: DEFAULT_SESSION_STREAMS,
            max_buffered_bytes: DEFAULT_MAX_BUFFERED_BYTES,
            ping_interval: DEFAULT_PING_INTERVAL,
            ping_timeout: DEFAULT_PING_TIMEOUT,
            handshake_timeout: DEFAULT_HANDSHAKE_TIMEOUT,
            max_control_bytes: DEFAULT_MAX_CONTROL_BYTES,
            head_window: head_window(rtt),
        }
    }

    /// The window each stream starts with: `initial_stream_window`, at most `stream_window`.
    pub fn initial_window(&self) -> u32 {
        self.initial_stream_window.min(self.stream_window)
    }

    /// The receive window a new stream starts with when the session's streams have
    /// `committed` bytes of receive credit outstanding: the headroom left in
    /// `initial_window_budget`, at least [`Config::initial_window`] (the floor, advertised in
    /// HELLO) and at most `stream_window`. Each start adds at most
    /// `max(budget - committed, floor)` to the commitment, so streams opened one after another
    /// commit at most `initial_window_budget + K × floor` for K of them that do not read
    /// (`session::credit`).
    pub fn start_window(&self, committed: u64) -> u64 {
        let floor = u64::from(self.initial_window());
        self.initial_window_budget
            .saturating_sub(committed)
            .clamp(floor, u64::from(self.stream_window).max(floor))
    }

    /// Most concurrent streams with a peer that does not honour connection credit (an older
    /// release): `max_streams` lowered so that every stream's whole window fits in
    /// `max_buffered_bytes` (165 with the defaults: 1 GiB ÷ 6.5 MB; our windows still grow to
    /// `stream_window` with such a peer).
    pub fn legacy_max_streams(&self) -> u32 {
        let fit = self.max_buffered_bytes / u64::from(self.stream_window.max(1));
        u64::from(self.max_streams).min(fit).max(1) as u32
    }

    /// Checks the limits are coherent; the error says which one is not.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let err = |s: String| Err(ConfigError(s));
        if self.max_frame_size < 1024 || self.max_frame_size as usize > MAX_PAYLOAD_LEN {
            return err(format!(
                "max_frame_size {} must be within 1024..={MAX_PAYLOAD_LEN}",
                self.max_frame_size
            ));
        }
        if self.stream_window < self.max_frame_size || self.stream_window > i32::MAX as u32 {
            return err(format!(
                "stream_window {} must be at least max_frame_size ({}) and below 2^31",
                self.stream_window, self.max_frame_size
            ));
        }
        if self.initial_stream_window < self.max_frame_size {
            return err(format!(
                "initial_stream_window {} must be at least max_frame_size ({})",
                self.initial_stream_window, self.max_frame_size
            ));
        }
        if self.conn_window < self.stream_window || self.conn_window > i32::MAX as u32 {
            return err(format!(
                "conn_window {} must be at least stream_window ({}) and below 2^31",
                self.conn_window, self.stream_window
            ));
        }
        if !(1..=MAX_STREAMS).contains(&self.max_streams) {
            return err(format!(
                "max_streams {} must be within 1..={MAX_STREAMS}",
                self.max_streams
            ));
        }
        if self.max_buffered_bytes < u64::from(self.stream_window) {
            return err(format!(
                "max_buffered_bytes {} must hold at least one stream_window ({})",
                self.max_buffered_bytes, self.stream_window
            ));
        }
        if self.head_window > crate::policy::MAX_PAGE_AGE {
            return err(format!(
                "head_window {:?} must be at most {:?}",
                self.head_window,
                crate::policy::MAX_PAGE_AGE
            ));
        }
        if self.ping_interval.is_zero() || self.ping_timeout.is_zero() {
            return err("ping_interval and ping_timeout must be positive".into());
        }
        if self.max_control_bytes < 4096 {
            return err("max_control_bytes must be at least 4096".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_stream_starts_with_the_budget_headroom_between_floor_and_maximum() {
        let c = Config::default();
        let (floor, max) = (256 * 1024, 6_500_000);
        assert_eq!(c.start_window(0), max, "a quiet session: the maximum");
        let budget = DEFAULT_INITIAL_WINDOW_BUDGET;
        assert_eq!(c.start_window(budget - 1_000_000), 1_000_000);
        assert_eq!(
            c.start_window(budget - 1000),
            floor,
            "never below the floor"
        );
        assert_eq!(c.start_window(10 * budget), floor);
        let off = Config {
            initial_window_budget: 0,
            ..c
        };
        assert_eq!(off.start_window(0), floor, "budget 0: always the floor");
    }

    #[test]
    fn defaults_are_sized_from_the_bdp_and_valid() {
        let c = Config::default();
        // Grows to 4 x 130 ms x 100 Mbit/s = 6.5 MB from 256 KiB.
        assert_eq!(c.stream_window, 6_500_000);
        assert_eq!(c.initial_stream_window, 256 * 1024);
        assert_eq!(c.conn_window, DEFAULT_CONN_WINDOW);
        assert_eq!(c.max_streams, 4096);
        // A peer without connection credit: 1 GiB / 6.5 MB.
        assert_eq!(c.legacy_max_streams(), 165);
        c.validate().unwrap();
    }

    #[test]
    fn a_wider_window_costs_concurrent_streams_only_with_a_legacy_peer() {
        let rtt = Duration::from_millis(200);
        let four = Config::for_link_bdps(rtt, 10_000_000, 4);
        assert_eq!(four, Config::for_link(rtt, 10_000_000));
        // 4 x 200 ms x 10 Mbit/s = 1 MB; the 1 GiB budget then holds 1073 such windows.
        assert_eq!(four.stream_window, 1_000_000);
        assert_eq!(four.legacy_max_streams(), 1073);
        let pacific = Config::for_link_bdps(DEFAULT_RTT, DEFAULT_RATE_BPS, 4);
        assert_eq!(pacific.stream_window, 6_500_000);
        assert_eq!(pacific.max_streams, DEFAULT_SESSION_STREAMS);
        assert_eq!(pacific.legacy_max_streams(), 165);
        pacific.validate().unwrap();
        // Zero counts as one.
        assert_eq!(
            Config::for_link_bdps(rtt, 10_000_000, 0).stream_window,
            250_000
        );
    }

    #[test]
    fn windows_are_clamped() {
        let small = Config::for_link(Duration::from_millis(1), 1_000_000);
        assert_eq!(small.stream_window, MIN_STREAM_WINDOW);
        // The initial window is never above the maximum.
        assert_eq!(small.initial_stream_window, MIN_STREAM_WINDOW);
        small.validate().unwrap();
        let big = Config::for_link(Duration::from_millis(600), 10_000_000_000);
        assert_eq!(big.stream_window, MAX_STREAM_WINDOW);
        big.validate().unwrap();
    }

    #[test]
    fn incoherent_limits_are_rejected_with_a_reason() {
        let c = Config {
            max_streams: MAX_STREAMS + 1,
            ..Config::default()
        };
        let e = c.validate().unwrap_err();
        assert!(e.to_string().contains("max_streams"), "{e}");
        let c = Config {
            conn_window: 1 << 20,
            ..Config::default()
        };
        let e = c.validate().unwrap_err();
        assert!(e.to_string().contains("conn_window"), "{e}");
        let c = Config {
            max_buffered_bytes: 1 << 20,
            ..Config::default()
        };
        let e = c.validate().unwrap_err();
        assert!(e.to_string().contains("max_buffered_bytes"), "{e}");
        let c = Config {
            initial_stream_window: 1024,
            ..Config::default()
        };
        let e = c.validate().unwrap_err();
        assert!(e.to_string().contains("initial_stream_window"), "{e}");
        // A smaller maximum set alone lowers the initial window with it.
        let c = Config {
            stream_window: 64 * 1024,
            ..Config::default()
        };
        c.validate().unwrap();
        assert_eq!(c.initial_window(), 64 * 1024);
        let c = Config {
            max_frame_size: 100_000,
            ..Config::default()
        };
        assert!(c.validate().is_err());
    }
}
