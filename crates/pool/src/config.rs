//! Typed configuration of the pool and the server, with documented defaults.

use std::time::Duration;

use mux::Policy;

/// Default remote proxy address of a pool.
pub const DEFAULT_REMOTE: &str = "127.0.0.1:4443";
/// Default number of pool connections. Seed 001 found ~20 connections needed to
/// fill an E3 with 32 KB windows; with autotuned windows and BBR a handful
/// suffices, and more connections spread head-of-line blocking after a loss.
pub const DEFAULT_CONNECTIONS: usize = 4;
/// First re-dial delay after a failed or lost connection.
pub const DEFAULT_BACKOFF_MIN: Duration = Duration::from_millis(100);
/// Largest re-dial delay.
pub const DEFAULT_BACKOFF_MAX: Duration = Duration::from_secs(10);
/// PING period per connection (keeps it warm and measures RTT).
pub const DEFAULT_PING_INTERVAL: Duration = mux::config::DEFAULT_PING_INTERVAL;
/// `TCP_NOTSENT_LOWAT`: at most this many bytes wait unsent in the kernel, so
/// the scheduling decision is taken late, in user space. 128 KiB is ~10 ms at
/// 100 Mbit/s: enough to keep the link busy between two wake-ups of the driver.
pub const DEFAULT_NOTSENT_LOWAT: u32 = 128 * 1024;
/// Congestion control asked for; the kernel default is used (and logged) if absent.
pub const DEFAULT_CONGESTION: &str = "bbr";
/// TCP keepalive idle time before probes start.
pub const DEFAULT_KEEPALIVE: Duration = Duration::from_secs(30);
/// `TCP_USER_TIMEOUT`: unacknowledged data older than this kills the connection.
pub const DEFAULT_USER_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a dial may take.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Bytes the driver takes from the session per write call.
pub const DEFAULT_WRITE_CHUNK: usize = 64 * 1024;
/// How often the driver refreshes the kernel send-queue size while it is not empty.
pub const DEFAULT_OUTSTANDING_REFRESH: Duration = Duration::from_millis(5);

/// Most [`Pool::open`](crate::Pool::open) calls that wait at once for a stream slot when every
/// pool connection is at its stream limit; one more fails at once with
/// [`PoolError::StreamLimit`](crate::PoolError::StreamLimit). Each waiter holds its request's
/// first bytes (at most a request head, 64 KiB at the edge's default `max_header_bytes`), so
/// the queue holds at most 64 MiB. 1024 is a quarter of the default stream limit of a TCP
/// pool's session (4096, [`mux::config::DEFAULT_SESSION_STREAMS`]; 165 at 130 ms and
/// 100 Mbit/s with a remote of an older release, without connection credit) and of a QUIC pool
/// of four connections: enough to absorb the page loads of many clients arriving together
/// above saturation; a longer queue would only add delay, since it drains no faster than
/// streams finish.
pub const DEFAULT_OPEN_QUEUE: usize = 1024;
/// Longest wait of one [`Pool::open`](crate::Pool::open) for a stream slot before it fails
/// with [`PoolError::StreamLimit`](crate::PoolError::StreamLimit). Slots free as fast as
/// streams finish, which for ordinary requests is within a few round trips of the long link:
/// 5 s covers eight round trips of a 600 ms geostationary path (and ~40 at 130 ms), so a burst
/// above the limit drains without errors, yet a client whose request cannot be carried (every
/// slot held by long downloads or tunnels) gets a clear 503 well before browsers and users give
/// up, while retrying still makes sense.
pub const DEFAULT_OPEN_WAIT: Duration = Duration::from_secs(5);
/// Largest accepted [`PoolConfig::open_queue`].
pub const MAX_OPEN_QUEUE: usize = 1_000_000;
/// Largest accepted [`PoolConfig::open_wait`].
pub const MAX_OPEN_WAIT: Duration = Duration::from_secs(600);

/// Socket tuning of pool connections (both sides).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SocketOptions {
    /// `TCP_NODELAY`: frames leave at once instead of waiting for Nagle.
    pub nodelay: bool,
    /// `TCP_CONGESTION` name ("bbr", "cubic"); on failure the kernel default
    /// stays and a warning is logged. `None`: kernel default.
    pub congestion: Option<String>,
    /// `TCP_NOTSENT_LOWAT` in bytes; `None` leaves the kernel setting.
    pub notsent_lowat: Option<u32>,
    /// Keepalive idle time; `None` disables keepalive.
    pub keepalive: Option<Duration>,
    /// `TCP_USER_TIMEOUT`; `None` leaves the kernel default.
    pub user_timeout: Option<Duration>,
    /// `SO_SNDBUF`; `None` (recommended) leaves kernel autotuning on.
    pub send_buffer: Option<usize>,
    /// `SO_RCVBUF`; `None` (recommended) leaves kernel autotuning on. Setting it
    /// freezes receive-window autotuning for the socket: the window can then
    /// never grow past this size, which caps throughput at size ÷ RTT.
    pub recv_buffer: Option<usize>,
    /// Dial timeout.
    pub connect_timeout: Duration,
}

impl Default for SocketOptions {
    fn default() -> Self {
        SocketOptions {
            nodelay: true,
            congestion: Some(DEFAULT_CONGESTION.to_owned()),
            notsent_lowat: Some(DEFAULT_NOTSENT_LOWAT),
            keepalive: Some(DEFAULT_KEEPALIVE),
            user_timeout: Some(DEFAULT_USER_TIMEOUT),
            send_buffer: None,
            recv_buffer: None,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
        }
    }
}

/// Edge-side pool configuration.
#[derive(Debug, Clone)]
pub struct PoolConfig {
    /// "host:port" of the remote proxy.
    pub remote: String,
    /// Number of pool connections (N).
    pub connections: usize,
    /// How stream directions are bound to connections.
    pub policy: Policy,
    /// Socket tuning.
    pub socket: SocketOptions,
    /// Protocol limits (windows from RTT × rate).
    pub mux: mux::Config,
    /// First re-dial delay.
    pub backoff_min: Duration,
    /// Largest re-dial delay.
    pub backoff_max: Duration,
    /// PING period (overrides `mux.ping_interval`).
    pub ping_interval: Duration,
    /// Most opens waiting at once for a stream slot ([`DEFAULT_OPEN_QUEUE`]); 0: an open at
    /// the stream limit fails at once.
    pub open_queue: usize,
    /// Longest wait of one open for a stream slot ([`DEFAULT_OPEN_WAIT`]); zero: an open at
    /// the stream limit fails at once.
    pub open_wait: Duration,
}

impl Default for PoolConfig {
    fn default() -> Self {
        PoolConfig {
            remote: DEFAULT_REMOTE.to_owned(),
            connections: DEFAULT_CONNECTIONS,
            policy: Policy::default(),
            socket: SocketOptions::default(),
            mux: mux::Config::default(),
            backoff_min: DEFAULT_BACKOFF_MIN,
            backoff_max: DEFAULT_BACKOFF_MAX,
            ping_interval: DEFAULT_PING_INTERVAL,
            open_queue: DEFAULT_OPEN_QUEUE,
            open_wait: DEFAULT_OPEN_WAIT,
        }
    }
}

impl PoolConfig {
    /// Checks the configuration; the error names the bad field.
    pub fn validate(&self) -> Result<(), String> {
        if self.connections == 0 || self.connections > 1024 {
            return Err(format!(
                "connections = {} must be within 1..=1024",
                self.connections
            ));
        }
        if self.backoff_min.is_zero() || self.backoff_min > self.backoff_max {
            return Err("backoff_min must be positive and at most backoff_max".into());
        }
        if self.ping_interval.is_zero() {
            return Err("ping_interval must be positive".into());
        }
        if self.open_queue > MAX_OPEN_QUEUE {
            return Err(format!(
                "open_queue = {} must be at most {MAX_OPEN_QUEUE}",
                self.open_queue
            ));
        }
        if self.open_wait > MAX_OPEN_WAIT {
            return Err(format!(
                "open_wait = {} ms must be at most {} ms",
                self.open_wait.as_millis(),
                MAX_OPEN_WAIT.as_millis()
            ));
        }
        self.mux.validate().map_err(|e| e.to_string())
    }

    pub(crate) fn mux_config(&self) -> mux::Config {
        let mut m = self.mux.clone();
        m.ping_interval = self.ping_interval;
        m
    }
}

/// Most authenticated pool connections a server carries at once (all edges
/// together); further connections are closed at once with a logged reason.
/// Each costs a task, two buffers and at most `max_streams` streams.
/// Connections still in their handshake do not count: they are bounded by
/// [`DEFAULT_MAX_HANDSHAKES`] instead.
pub const DEFAULT_MAX_SERVER_CONNECTIONS: usize = 1024;

/// Most connections a server lets be in their handshake (TLS or QUIC, then
/// HELLO) at once, from all sources; a further one is closed at once with a
/// logged reason. A handshake lasts one or two round trips of the long link
/// (at most `mux.handshake_timeout`), so 256 admits hundreds of dials per
/// second even at a satellite's 600 ms.
pub const DEFAULT_MAX_HANDSHAKES: usize = 256;

/// Most connections one source address may have in their handshake at once,
/// so that one peer cannot take every handshake slot. An edge dials its whole
/// pool at start; 64 lets every pool of up to 64 connections per remote
/// handshake at once, and larger pools come up in waves as refused dials are
/// retried after backoff.
pub const DEFAULT_MAX_HANDSHAKES_PER_SOURCE: usize = 64;

/// Remote-side server configuration.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Socket tuning of accepted connections.
    pub socket: SocketOptions,
    /// Protocol limits.
    pub mux: mux::Config,
    /// How reply directions are bound to connections.
    pub policy: Policy,
    /// Most concurrent authenticated pool connections (see
    /// [`DEFAULT_MAX_SERVER_CONNECTIONS`]).
    pub max_connections: usize,
    /// Most connections in their handshake at once (see [`DEFAULT_MAX_HANDSHAKES`]).
    pub max_handshakes: usize,
    /// Most of those from one source address (see
    /// [`DEFAULT_MAX_HANDSHAKES_PER_SOURCE`]).
    pub max_handshakes_per_source: usize,
}

impl ServerConfig {
    /// Checks the limits that the mux configuration does not cover.
    pub(crate) fn validate_limits(&self) -> Result<(), String> {
        for (name, v) in [
            ("max_connections", self.max_connections),
            ("max_handshakes", self.max_handshakes),
            ("max_handshakes_per_source", self.max_handshakes_per_source),
        ] {
            if v == 0 {
                return Err(format!("{name} must be at least 1"));
            }
        }
        Ok(())
    }

    pub(crate) fn handshake_gate(&self) -> crate::gate::HandshakeGate {
        crate::gate::HandshakeGate::new(self.max_handshakes, self.max_handshakes_per_source)
    }
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            socket: SocketOptions::default(),
            mux: mux::Config::default(),
            policy: Policy::default(),
            max_connections: DEFAULT_MAX_SERVER_CONNECTIONS,
            max_handshakes: DEFAULT_MAX_HANDSHAKES,
            max_handshakes_per_source: DEFAULT_MAX_HANDSHAKES_PER_SOURCE,
        }
    }
}
