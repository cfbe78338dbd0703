//! The QUIC carrier (quinn): the pool over N QUIC connections, one QUIC stream
//! per mux stream (docs/PROTOCOL.md §8).
//!
//! What it does: [`QuicOptions`] tunes quinn from the link's RTT × rate
//! (bounded stream and connection receive windows, send window, congestion
//! controller BBR/Cubic/NewReno or the provisioned-rate controller [`crate::rate`], initial
//! window, keep-alive, idle timeout;
//! GSO/GRO as quinn enables them where the kernel has them; every UDP socket's receive and
//! send buffers sized to hold a quarter second of the link, [`size_udp_socket`]). The edge side
//! dials N connections with mutual TLS from the same files as the TCP pool
//! ([`crate::tls::TlsClient`], ALPN `longhaul/1`), re-dials lost ones with
//! backoff and opens each stream as a bidirectional QUIC stream on the
//! connection with the fewest outstanding bytes. The server side
//! ([`crate::tls::TlsServer`]) accepts them and yields [`crate::Incoming`]
//! streams. Streams surface as [`crate::MuxStream`] with the same error
//! semantics as over TCP.
//!
//! What it does NOT do: no mux framing (QUIC has streams, credit and resets),
//! no 0-RTT, no connection migration handling beyond quinn's, no QUIC DATAGRAM frames. Parity
//! datagrams ([`crate::parity`], §8.6) are UDP datagrams beside QUIC's, added and taken out by
//! the socket under quinn when both sides announce [`Features::PARITY`].
//! The HELLO and stream header it writes are encoded by `mux::frame::quic`.
//!
//! # Receive windows: what quinn 0.11 allows
//!
//! The TCP carrier's stream windows autotune (`mux::session::credit`: 256 KiB, doubling while
//! the reader keeps up, up to `link.stream_window_bdp` × BDP). quinn 0.11 (quinn-proto 0.11.19)
//! cannot do that per stream: `TransportConfig::stream_receive_window` is copied once into the
//! connection's stream state (`StreamsState::stream_receive_window`, `pub(super)`, no setter),
//! sent as the `initial_max_stream_data_*` transport parameters, and every `MAX_STREAM_DATA`
//! update advertises `bytes_read + stream_receive_window` (`streams/recv.rs`,
//! `max_stream_data`): each stream of a connection has that same window for its whole life,
//! and neither `quinn::RecvStream` nor `quinn::Connection` can change it. What is adjustable at
//! run time is the connection's window (`Connection::set_receive_window`, which grows
//! `MAX_DATA` at once or shrinks it as data is read) and the send window.
//!
//! So the QUIC carrier gives every stream the maximum, `stream_receive_window` = the mux
//! `stream_window` (4 × BDP by default: 6.5 MB at 130 ms and 100 Mbit/s), because a small
//! fixed window would cap every large transfer for good: with 2 × BDP one 50 MB reply on the
//! `lossy` profile took 1.26 × direct through QUIC against 1.09 at 4 × BDP
//! (benches/notes/2026-11-25.md, lossy). The cost: a reader that stops holds a whole maximum
//! window (100 stalled clients at the default link: up to 650 MB, where the TCP carrier holds
//! 25 MiB), bounded per connection
//! by the connection window, [`DEFAULT_RECEIVE_WINDOW`] (256 MiB); readers that keep up are
//! unaffected. The connection window is not autotuned either: it is at least the largest
//! stream window, so it never limits one stream, and a connection carries at most line rate,
//! which one stream's window already covers; growing it would only raise the memory bound.
//! Where memory for slow readers matters more than one transfer's rate, lower
//! `link.stream_window_bdp` (both carriers) or use the TCP carrier.
//!
//! # Congestion controllers
//!
//! [`Congestion::Bbr`] (the default), `Cubic` and `NewReno` are quinn's. [`Congestion::Rate`]
//! is [`crate::rate`]: for a provisioned link it paces each pool at
//! [`QuicOptions::link_rate_bps`] (`link.rate_mbit`) shared among its busy connections,
//! ignores random loss and backs off on queueing delay. In the virtual-time comparison
//! (tests/quic_virtual_rate.rs) it held 0.94–0.95 of a 200 ms, 10 Mbit/s link at 1.5 % loss
//! with a 14 ms queue, where BBR held 0.90 with the one-RTT buffer full and CUBIC 0.06; told
//! twice a link's rate, it kept the queue below its 50 ms threshold. It is not the default:
//! the page-load benchmarks decide.

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use mux::policy::Tier;
use mux::{ErrorCode, Kind};
use quinn::crypto::rustls::{HandshakeData, QuicClientConfig, QuicServerConfig};
use quinn::{congestion, Connection, Endpoint, IdleTimeout, TransportConfig, VarInt};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{mpsc, watch, Notify};
use tokio::task::JoinHandle;

use crate::backoff::Backoff;
use crate::config::{PoolConfig, ServerConfig};
use crate::gate::{HandshakeGate, Permit};
use crate::parity::{ParityMode, ParityPeer, ParitySocket, SharedLoss};
use crate::queue::{Attempt, OpenQueue};
use crate::rate::{SendClass, Traffic};
use crate::stats::{ConnStats, LaneState};
use crate::tls::{TlsClient, TlsServer, ALPN};
use crate::{Incoming, MuxStream, PoolError, StreamError};

pub use mux::frame::QUIC_MAPPING_VERSION;
use mux::frame::{Features, QuicHello, QuicHelloReply, StreamHeader, QUIC_CONTROL_MAX};
/// Idle timeout: a connection that hears nothing from its peer this long is
/// closed and re-dialled (black-hole detection). Three keep-alive periods.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(30);
/// Keep-alive period (QUIC PING frames) while a connection is idle.
pub const DEFAULT_KEEP_ALIVE: Duration = Duration::from_secs(10);
/// Connection receive window: the TCP carrier's connection credit,
/// [`mux::config::DEFAULT_CONN_WINDOW`] (256 MiB), bounded where quinn's default is not. It
/// used to be 4 × BDP (6.5 MB at 130 ms and 100 Mbit/s), which two streams whose readers
/// stopped, holding their stream windows (then 3.25 MB) unread, took whole: every other stream of the
/// connection then waited for them (tests/slow_readers.rs).
pub const DEFAULT_RECEIVE_WINDOW: u64 = mux::config::DEFAULT_CONN_WINDOW as u64;
/// Send window (sent, unacknowledged and buffered bytes) in bandwidth-delay
/// products. quinn keeps data acknowledged beyond a lost packet counted in this
/// window until the hole is repaired, so under loss a bulk stream can fill a
/// small window and hold up the writes of every other stream on the connection
/// (head-of-line blocking at the sender); in the virtual-time test
/// (tests/quic_virtual_loss.rs) the small reply waited whenever the send window was
/// not at least one BDP above the stream window (2 × BDP streams: waits at 2, none
/// at 3 or 4 × BDP; 4 × BDP streams: waits at 4, none at 5, 6 or 8), hence the
/// send window is the larger of this and the stream window plus
/// [`SEND_WINDOW_MARGIN_BDPS`]. Streams whose readers stop do not hold it:
/// their bytes are acknowledged when they arrive, read or not.
pub const DEFAULT_SEND_WINDOW_BDPS: u64 = 4;
/// Bandwidth-delay products the send window exceeds the stream window by (see
/// [`DEFAULT_SEND_WINDOW_BDPS`]): one was the least without waits in the virtual-time test,
/// two leave a margin. 6 × BDP at the default 4 × BDP stream window (9.75 MB per connection at
/// 130 ms and 100 Mbit/s).
pub const SEND_WINDOW_MARGIN_BDPS: u64 = 2;
/// Smallest send window, whatever the link (≥ 4 minimum stream windows).
pub const MIN_CONN_WINDOW: u64 = 4 * mux::config::MIN_STREAM_WINDOW as u64;

/// How long a UDP socket's receive buffer holds arrivals at the link's rate by default
/// ([`udp_buffer_for_rate`]): the time the process may go without reading (a busy or
/// descheduled host) before the kernel drops datagrams, which QUIC then counts as loss on the
/// path (its controller backs off, parity may turn on) although the link lost nothing.
pub const UDP_BUFFER_TIME: Duration = Duration::from_millis(250);
/// Smallest default UDP socket buffer, bytes (quic-go asks for 7 MiB on every host).
pub const MIN_UDP_BUFFER: usize = 4 << 20;
/// Largest default UDP socket buffer, bytes.
pub const MAX_DEFAULT_UDP_BUFFER: usize = 256 << 20;
/// Bounds of a configured UDP socket buffer, bytes (`QuicOptions::validate`).
pub const UDP_BUFFER_RANGE: std::ops::RangeInclusive<usize> = (64 << 10)..=(1 << 30);

/// The default `SO_RCVBUF`/`SO_SNDBUF` of the pool's UDP sockets for a link of `rate_bps`:
/// [`UDP_BUFFER_TIME`] of the rate, within [`MIN_UDP_BUFFER`]..=[`MAX_DEFAULT_UDP_BUFFER`]
/// (4 MiB up to 134 Mbit/s; 31.25 MB at 1 Gbit/s). The kernel doubles the value for its
/// bookkeeping, so a buffer holds about this many bytes of datagrams.
pub fn udp_buffer_for_rate(rate_bps: u64) -> usize {
    let b = u128::from(rate_bps) * UDP_BUFFER_TIME.as_micros() / 8_000_000;
    usize::try_from(b)
        .unwrap_or(usize::MAX)
        .clamp(MIN_UDP_BUFFER, MAX_DEFAULT_UDP_BUFFER)
}

/// The buffers a UDP socket got ([`size_udp_socket`]), each as the value set (half what the
/// kernel reports, which counts its bookkeeping twice over).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdpBuffers {
    /// Receive buffer.
    pub recv: usize,
    /// Send buffer.
    pub send: usize,
}

/// Sets a pool UDP socket's receive and send buffers to `bytes` each: `SO_RCVBUF`/`SO_SNDBUF`,
/// then, where `net.core.rmem_max`/`wmem_max` capped them, `SO_RCVBUFFORCE`/`SO_SNDBUFFORCE`
/// (with `CAP_NET_ADMIN`). A kernel default buffer (208 KiB) holds about 10 ms at 100 Mbit/s:
/// a receiver that misses that long drops datagrams the link delivered. Logs a warning once
/// per process when a buffer stays below `bytes`, with the sysctl that lifts the cap; never
/// fails the socket for it.
pub fn size_udp_socket(sock: &std::net::UdpSocket, bytes: usize) -> UdpBuffers {
    let s = socket2::SockRef::from(sock);
    let recv = grow_buffer(
        bytes,
        || s.recv_buffer_size(),
        |n| s.set_recv_buffer_size(n),
        |n| netsys::force_recv_buffer(sock, n),
    );
    let send = grow_buffer(
        bytes,
        || s.send_buffer_size(),
        |n| s.set_send_buffer_size(n),
        |n| netsys::force_send_buffer(sock, n),
    );
    let got = UdpBuffers { recv, send };
    static WARNED: AtomicBool = AtomicBool::new(false);
    if (recv < bytes || send < bytes) && !WARNED.swap(true, Ordering::Relaxed) {
        tracing::warn!(
            asked = bytes,
            recv,
            send,
            fix = "set net.core.rmem_max and net.core.wmem_max to at least the asked size \
                   (deploy/sysctl.d/90-longhaul.conf), or give the service CAP_NET_ADMIN",
            "QUIC: UDP socket buffers below the asked size: datagrams that arrive while the \
             process is busy are dropped by the kernel and count as loss on the path"
        );
    } else {
        tracing::debug!(asked = bytes, recv, send, "QUIC UDP socket buffers");
    }
    got
}

/// One buffer of [`size_udp_socket`]: `get` reads the kernel's (doubled) size, `set` asks
/// plainly, `force` past the sysctl cap; returns the size set (half the kernel's).
fn grow_buffer(
    bytes: usize,
    get: impl Fn() -> io::Result<usize>,
    set: impl Fn(usize) -> io::Result<()>,
    force: impl Fn(usize) -> io::Result<()>,
) -> usize {
    let now = || get().map_or(0, |n| n / 2);
    if now() >= bytes {
        return now();
    }
    let _ = set(bytes);
    if now() < bytes {
        let _ = force(bytes);
    }
    now()
}

/// Congestion controller of each QUIC connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Congestion {
    /// BBR (quinn's implementation): keeps rate under random loss.
    #[default]
    Bbr,
    /// CUBIC.
    Cubic,
    /// NewReno.
    NewReno,
    /// Paces at the provisioned rate ([`QuicOptions::link_rate_bps`]) shared among the pool's
    /// busy connections; backs off on queueing delay, not on random loss ([`crate::rate`]).
    Rate,
}

impl FromStr for Congestion {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "bbr" => Ok(Congestion::Bbr),
            "cubic" => Ok(Congestion::Cubic),
            "newreno" | "new_reno" | "reno" => Ok(Congestion::NewReno),
            "rate" => Ok(Congestion::Rate),
            o => Err(format!(
                "unknown QUIC congestion controller {o:?} (bbr, cubic, newreno, rate)"
            )),
        }
    }
}

/// Tuning of the QUIC carrier (both sides).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuicOptions {
    /// Congestion controller.
    pub congestion: Congestion,
    /// Initial congestion window in bytes; `None`: the controller's default
    /// (about 14.7 KB, RFC 9002).
    pub initial_window: Option<u64>,
    /// Per-stream receive window: the mux stream window's maximum, `mux::Config::stream_window`
    /// (quinn cannot grow a stream's window, module doc).
    pub stream_receive_window: u64,
    /// Per-connection receive window, bounded ([`DEFAULT_RECEIVE_WINDOW`]).
    pub receive_window: u64,
    /// Per-connection send window.
    pub send_window: u64,
    /// Concurrent bidirectional streams the peer may open per connection.
    pub max_streams: u32,
    /// Keep-alive period.
    pub keep_alive: Duration,
    /// Idle timeout (black-hole detection); must exceed `keep_alive`.
    pub idle_timeout: Duration,
    /// Round-trip time used before the first measurement.
    pub initial_rtt: Duration,
    /// The provisioned rate of the link in bits per second: what [`Congestion::Rate`] paces
    /// the pool at (other controllers ignore it), and what parity compares the pool's sends
    /// with ([`crate::parity`]).
    pub link_rate_bps: u64,
    /// When the pool sends parity datagrams ([`crate::parity::ParityMode`]).
    pub parity: ParityMode,
    /// `SO_RCVBUF` and `SO_SNDBUF` of every pool UDP socket, bytes ([`size_udp_socket`];
    /// default [`udp_buffer_for_rate`] of the link rate).
    pub udp_buffer: usize,
    /// Edge side: which connection a new stream goes on, when it differs from
    /// [`crate::PoolConfig::policy`] (under `auto` that one places the TCP fallback's streams;
    /// the edge's default is `pack` for QUIC, `least-outstanding` for TCP). `None`: the pool
    /// configuration's.
    pub policy: Option<mux::Policy>,
}

impl Default for QuicOptions {
    fn default() -> Self {
        QuicOptions::for_link(mux::config::DEFAULT_RTT, mux::config::DEFAULT_RATE_BPS)
    }
}

impl QuicOptions {
    /// Windows sized from the link's bandwidth-delay product, with every stream window at the
    /// maximum the TCP pool's windows grow to ([`mux::Config::for_link`]).
    pub fn for_link(rtt: Duration, rate_bps: u64) -> QuicOptions {
        QuicOptions::for_link_bdps(rtt, rate_bps, mux::config::DEFAULT_STREAM_WINDOW_BDPS)
    }

    /// [`QuicOptions::for_link`] with the stream window at `bdps` bandwidth-delay products,
    /// as [`mux::Config::for_link_bdps`].
    ///
    /// The stream limit is [`mux::config::DEFAULT_MAX_STREAMS`] per connection whatever the
    /// window: QUIC's connection-level flow control (`receive_window`, `send_window`) bounds the
    /// bytes a connection buffers however many streams it carries, as the mux's connection
    /// credit does for the TCP pool.
    pub fn for_link_bdps(rtt: Duration, rate_bps: u64, bdps: u32) -> QuicOptions {
        let m = mux::Config::for_link_bdps(rtt, rate_bps, bdps);
        let bdp = ((rate_bps as u128 * rtt.as_micros()) / 8_000_000) as u64;
        let stream = u64::from(m.stream_window);
        QuicOptions {
            congestion: Congestion::default(),
            initial_window: None,
            stream_receive_window: stream,
            receive_window: DEFAULT_RECEIVE_WINDOW.max(stream),
            send_window: (stream + SEND_WINDOW_MARGIN_BDPS * bdp)
                .max(DEFAULT_SEND_WINDOW_BDPS * bdp)
                .max(MIN_CONN_WINDOW),
            max_streams: mux::config::DEFAULT_MAX_STREAMS,
            keep_alive: DEFAULT_KEEP_ALIVE,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            initial_rtt: rtt,
            link_rate_bps: rate_bps,
            parity: ParityMode::default(),
            udp_buffer: udp_buffer_for_rate(rate_bps),
            policy: None,
        }
    }

    /// The parity settings of a pool with these options, if it sends parity.
    fn parity_opts(&self) -> Option<ParityOpts> {
        (self.parity != ParityMode::Off).then(|| ParityOpts {
            mode: self.parity,
            cfg: crate::fec::FecConfig::for_rtt(self.initial_rtt),
            meter: Arc::new(Mutex::new(crate::fec::Meter::new(
                crate::parity::meter_window(self.initial_rtt),
            ))),
            link_bps: self.link_rate_bps,
        })
    }

    /// The optional features this side announces: the page age, and parity when it runs it.
    fn features(&self) -> Features {
        if self.parity == ParityMode::Off {
            Features::SUPPORTED
        } else {
            Features(Features::SUPPORTED.0 | Features::PARITY.0)
        }
    }

    /// Checks the options; the error names the bad field.
    pub fn validate(&self) -> Result<(), String> {
        let max = VarInt::MAX.into_inner();
        if self.stream_receive_window == 0 || self.stream_receive_window > max {
            return Err("quic stream_receive_window must be within 1..2^62".into());
        }
        if self.receive_window < self.stream_receive_window || self.receive_window > max {
            return Err("quic receive_window must be at least stream_receive_window".into());
        }
        if (self.congestion == Congestion::Rate || self.parity != ParityMode::Off)
            && self.link_rate_bps == 0
        {
            return Err("quic congestion \"rate\" and parity need a positive link rate".into());
        }
        if self.send_window == 0 {
            return Err("quic send_window must be positive".into());
        }
        if self.max_streams == 0 {
            return Err("quic max_streams must be positive".into());
        }
        if self.keep_alive.is_zero() || self.keep_alive >= self.idle_timeout {
            return Err("quic keep_alive must be positive and below idle_timeout".into());
        }
        IdleTimeout::try_from(self.idle_timeout)
            .map_err(|_| "quic idle_timeout is too large".to_string())?;
        if !UDP_BUFFER_RANGE.contains(&self.udp_buffer) {
            return Err(format!(
                "quic udp_buffer {} must be in {}..={}",
                self.udp_buffer,
                UDP_BUFFER_RANGE.start(),
                UDP_BUFFER_RANGE.end()
            ));
        }
        if let Some(w) = self.initial_window {
            if w < 2 * 1200 {
                return Err("quic initial_window must be at least 2400 bytes".into());
            }
        }
        Ok(())
    }

    /// The pool's transports: one configuration per connection, so that each `rate`
    /// controller learns its connection's traffic.
    fn transports(&self) -> Result<Transports, String> {
        let base = self.transport()?;
        let rate = (self.congestion == Congestion::Rate).then(|| {
            Arc::new(crate::rate::RateConfig::new(
                self.link_rate_bps,
                self.initial_rtt,
            ))
        });
        Ok(Transports {
            base: Arc::new(base),
            opts: self.clone(),
            rate,
        })
    }

    fn transport(&self) -> Result<TransportConfig, String> {
        self.validate()?;
        let mut t = TransportConfig::default();
        t.stream_receive_window(
            VarInt::from_u64(self.stream_receive_window).map_err(|e| e.to_string())?,
        )
        .receive_window(VarInt::from_u64(self.receive_window).map_err(|e| e.to_string())?)
        .send_window(self.send_window)
        .max_concurrent_bidi_streams(VarInt::from_u32(self.max_streams))
        // One control stream per connection (the HELLO).
        .max_concurrent_uni_streams(VarInt::from_u32(1))
        .keep_alive_interval(Some(self.keep_alive))
        .max_idle_timeout(Some(
            IdleTimeout::try_from(self.idle_timeout).map_err(|e| e.to_string())?,
        ))
        .initial_rtt(self.initial_rtt)
        .datagram_receive_buffer_size(None);
        match self.congestion {
            Congestion::Bbr => {
                let mut c = congestion::BbrConfig::default();
                if let Some(w) = self.initial_window {
                    c.initial_window(w);
                }
                t.congestion_controller_factory(Arc::new(c));
            }
            Congestion::Cubic => {
                let mut c = congestion::CubicConfig::default();
                if let Some(w) = self.initial_window {
                    c.initial_window(w);
                }
                t.congestion_controller_factory(Arc::new(c));
            }
            Congestion::NewReno => {
                let mut c = congestion::NewRenoConfig::default();
                if let Some(w) = self.initial_window {
                    c.initial_window(w);
                }
                t.congestion_controller_factory(Arc::new(c));
            }
            // Starts at its share of the provisioned rate: `initial_window` does not apply.
            Congestion::Rate => {
                t.congestion_controller_factory(Arc::new(crate::rate::RateConfig::new(
                    self.link_rate_bps,
                    self.initial_rtt,
                )));
            }
        }
        Ok(t)
    }
}

/// Parity settings shared by a pool's sockets (one meter for the pool's sends).
#[derive(Clone)]
struct ParityOpts {
    mode: ParityMode,
    cfg: crate::fec::FecConfig,
    meter: Arc<Mutex<crate::fec::Meter>>,
    link_bps: u64,
}

impl ParityOpts {
    fn wrap(&self, inner: Arc<dyn quinn::AsyncUdpSocket>) -> Arc<ParitySocket> {
        ParitySocket::new(
            inner,
            self.cfg,
            self.mode,
            self.meter.clone(),
            self.link_bps,
        )
    }
}

/// How often a protected connection's loss is judged again.
const LOSS_TICK: Duration = Duration::from_secs(1);

/// A connection's peer registered with the parity socket: keeps its loss judgement current
/// ([`ParityWatch::tick`]) and forgets the peer when dropped (the connection ended).
struct ParityWatch {
    socket: Arc<ParitySocket>,
    peer: Arc<ParityPeer>,
    addr: SocketAddr,
    /// The judgement of the path, shared with the other connections on it.
    path: SharedLoss,
    /// quinn's counts at the last tick.
    seen: (u64, u64),
    /// The parity decoder's counts of the peer's judged and missing datagrams at the last tick.
    seen_rx: (u64, u64),
}

impl ParityWatch {
    fn new(
        socket: Arc<ParitySocket>,
        conn: &Connection,
        traffic: Arc<Traffic>,
        path: SharedLoss,
    ) -> ParityWatch {
        let addr = conn.remote_address();
        let peer = socket.add_peer(addr, traffic);
        if socket.mode() == ParityMode::Always {
            tracing::info!(peer = %addr, "QUIC parity on (parity = \"always\")");
        }
        ParityWatch {
            socket,
            peer,
            addr,
            path,
            seen: (0, 0),
            seen_rx: (0, 0),
        }
    }

    fn tick(&mut self, conn: &Connection) {
        let s = conn.stats();
        let (sent, lost) = (s.path.sent_packets, s.path.lost_packets);
        // What the peer protects tells the loss of the path towards this side: on the edge,
        // whose own sends (requests, acknowledgements) are few, it judges the path within
        // seconds of the remote's parity instead of after a thousand of its own packets.
        let (members, missing) = self.socket.seen_loss(self.addr);
        // A connection carrying only a download is not counted: its losses are mostly its own
        // queue overflowing (a start-up, a smaller link), which parity would not help and
        // which must not switch parity on for the pages.
        let (ds, dl) = if self.peer.bulk() {
            (0, 0)
        } else {
            (
                sent.saturating_sub(self.seen.0) + members.saturating_sub(self.seen_rx.0),
                lost.saturating_sub(self.seen.1) + missing.saturating_sub(self.seen_rx.1),
            )
        };
        self.seen_rx = (members, missing);
        let (was, lossy) = {
            let mut w = self.path.lock().unwrap_or_else(|p| p.into_inner());
            let was = w.lossy();
            let now = w.add(ds, dl);
            (was, now)
        };
        self.seen = (sent, lost);
        self.peer.set_lossy(lossy);
        // Logged once per change of the path's judgement, by the connection that made it.
        if lossy != was && self.socket.mode() == ParityMode::Auto {
            tracing::info!(
                peer = %self.addr,
                sent = s.path.sent_packets,
                lost = s.path.lost_packets,
                peer_judged = members,
                peer_missing = missing,
                "QUIC parity {}",
                if lossy {
                    "on: the path shows loss"
                } else {
                    "off: the path shows no loss"
                }
            );
        }
        if tracing::enabled!(tracing::Level::DEBUG) {
            let (enc, dec) = self.socket.stats();
            tracing::debug!(
                peer = %self.addr,
                sent = s.path.sent_packets,
                lost = s.path.lost_packets,
                parity_sent = self.peer.sent.load(Ordering::Relaxed),
                rebuilt = self.peer.rebuilt.load(Ordering::Relaxed),
                held = self.peer.held.load(Ordering::Relaxed),
                blocked_sent = s.frame_tx.data_blocked + s.frame_tx.stream_data_blocked,
                socket_protected = enc.protected,
                socket_parities = enc.parities,
                socket_unpaid = enc.unpaid,
                socket_oversize = enc.oversize,
                socket_received = dec.received,
                socket_rebuilt = dec.rebuilt,
                socket_complete = dec.complete,
                socket_unrepairable = dec.unrepairable,
                socket_judged = dec.members,
                socket_missing = dec.missing,
                "QUIC parity counters"
            );
        }
    }
}

impl Drop for ParityWatch {
    fn drop(&mut self) {
        self.socket.remove_peer(self.addr);
    }
}

/// Waits a loss tick when there is a watch to tick, for ever otherwise.
async fn parity_tick(w: &Option<ParityWatch>, tick: &mut tokio::time::Interval) {
    if w.is_some() {
        tick.tick().await;
    } else {
        std::future::pending::<()>().await;
    }
}

/// The transport configuration of a pool's connections. With the `rate` controller each
/// connection gets its own, whose controller shares the pool's counts and reads the
/// connection's [`Traffic`]; otherwise all share one.
#[derive(Clone)]
struct Transports {
    base: Arc<TransportConfig>,
    opts: QuicOptions,
    rate: Option<Arc<crate::rate::RateConfig>>,
}

impl Transports {
    /// The configuration of a new connection and the traffic its streams report to.
    fn for_connection(&self) -> (Arc<TransportConfig>, Arc<Traffic>) {
        let traffic = Arc::new(Traffic::new(self.opts.link_rate_bps, self.opts.initial_rtt));
        let Some(rate) = &self.rate else {
            return (self.base.clone(), traffic);
        };
        // Validated when the pool started: building it again cannot fail.
        let Ok(mut t) = self.opts.transport() else {
            return (self.base.clone(), traffic);
        };
        t.congestion_controller_factory(Arc::new(rate.for_connection(traffic.clone())));
        (Arc::new(t), traffic)
    }
}

/// Health of one QUIC connection (quinn's path statistics).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QuicConnStats {
    /// Smoothed round-trip time.
    pub rtt: Duration,
    /// Congestion window in bytes.
    pub cwnd: u64,
    /// Packets declared lost.
    pub lost_packets: u64,
    /// Bytes declared lost.
    pub lost_bytes: u64,
    /// Packets sent.
    pub sent_packets: u64,
    /// Congestion events (window reductions).
    pub congestion_events: u64,
    /// Sends to the peer are protected by parity now ([`crate::parity`]).
    pub parity_on: bool,
    /// Parity datagrams sent to the peer.
    pub parity_sent: u64,
    /// Datagrams from the peer rebuilt from its parity (losses quinn never saw).
    pub parity_rebuilt: u64,
    /// Stream bytes handed to quinn and not yet transmitted (estimate, §8.4);
    /// quinn 0.11 does not expose bytes in flight.
    pub unsent: u64,
}

fn code(c: ErrorCode) -> VarInt {
    VarInt::from_u32(c.0)
}

fn from_code(v: VarInt) -> ErrorCode {
    ErrorCode(u32::try_from(v.into_inner()).unwrap_or(ErrorCode::PROTOCOL_ERROR.0))
}

// ---------------------------------------------------------------- connections

/// One live QUIC connection and its scheduling counters.
pub(crate) struct QConn {
    conn: Connection,
    /// Stream bytes handed to quinn on this connection (monotonic).
    written: AtomicU64,
    /// Largest observed `transmitted - written`: packet overhead (headers,
    /// ACKs, PINGs, handshake) that the unsent estimate subtracts.
    overhead: AtomicU64,
    /// Open streams on this connection, plus (edge side) slots reserved by opens under way.
    streams: AtomicU32,
    /// Open streams that have carried [`mux::policy::TRANSFER_BYTES`] either way: the
    /// connection carries a transfer ([`mux::Policy::Pack`] keeps new streams off it).
    transfer_streams: AtomicU32,
    /// Smallest smoothed RTT quinn reported when the pool looked, microseconds (`u64::MAX`
    /// before the first look): quinn 0.11's path statistics have no minimum RTT.
    min_rtt_us: AtomicU64,
    /// Edge side: the pool's queue of opens waiting for a stream slot, woken when a stream
    /// of this connection ends.
    queue: Option<Arc<OpenQueue>>,
    /// Why this side closed the connection (`carrier = "auto"` abandoning QUIC), for the
    /// errors of its streams.
    closed_why: std::sync::OnceLock<String>,
    /// What its streams report to its congestion controller (interactive or bulk).
    traffic: Arc<Traffic>,
    /// When it came up: the origin of its streams' priorities ([`stream_priority`]).
    epoch: Instant,
    /// How long newer pages' first bytes go ahead of a page's rest ([`stream_priority`]).
    head_window: Duration,
    /// Edge side: the remote's HELLO reply announced [`Features::PAGE_AGE`], so stream
    /// headers carry the page age (§8.2).
    page_age: bool,
    /// The peer's parity registration, when both sides run parity.
    parity: Option<(Arc<ParityPeer>, ParityMode)>,
}

impl QConn {
    fn new(
        conn: Connection,
        queue: Option<Arc<OpenQueue>>,
        traffic: Arc<Traffic>,
        page_age: bool,
        parity: Option<&ParityWatch>,
        head_window: Duration,
    ) -> Arc<QConn> {
        Arc::new(QConn {
            conn,
            traffic,
            epoch: Instant::now(),
            head_window,
            page_age,
            parity: parity.map(|p| (p.peer.clone(), p.socket.mode())),
            written: AtomicU64::new(0),
            overhead: AtomicU64::new(0),
            streams: AtomicU32::new(0),
            transfer_streams: AtomicU32::new(0),
            min_rtt_us: AtomicU64::new(u64::MAX),
            queue,
            closed_why: std::sync::OnceLock::new(),
        })
    }

    /// A stream (or a reservation) of this connection ended: its slot is free.
    fn release_slot(&self) {
        self.streams.fetch_sub(1, Ordering::Relaxed);
        if let Some(q) = &self.queue {
            q.wake();
        }
    }

    fn id(&self) -> u64 {
        self.conn.stable_id() as u64
    }

    /// Bytes waiting in quinn's buffers (estimate, §8.4).
    fn unsent(&self, s: &quinn::ConnectionStats) -> u64 {
        let sent = s.udp_tx.bytes.saturating_sub(s.path.lost_bytes);
        let w = self.written.load(Ordering::Relaxed);
        let over = sent.saturating_sub(w);
        let o = self.overhead.fetch_max(over, Ordering::Relaxed).max(over);
        (w + o).saturating_sub(sent)
    }

    /// The scheduling policy's view of this connection (PROTOCOL.md §8.4). quinn 0.11 has
    /// no delivery-rate sample and no bytes in flight: the rate is the congestion window
    /// per smoothed round trip (what the controller lets the connection send), the RTT the
    /// smallest smoothed RTT seen, the backlog the unsent estimate. The window only grows
    /// while the connection has data to send, so for an idle connection (nothing unsent,
    /// no stream) that rate is only a lower bound.
    fn load(&self) -> mux::Load {
        let s = self.conn.stats();
        let rtt_us = u64::try_from(s.path.rtt.as_micros())
            .unwrap_or(u64::MAX)
            .max(1);
        let min = self
            .min_rtt_us
            .fetch_min(rtt_us, Ordering::Relaxed)
            .min(rtt_us);
        let unsent = self.unsent(&s);
        let streams = self.streams.load(Ordering::Relaxed);
        mux::Load {
            outstanding: unsent,
            streams,
            // Unset: least-outstanding compares unsent bytes, then streams, over QUIC as it
            // always did (the window weighing was measured on TCP only).
            window: 0,
            rate: u64::try_from(u128::from(s.path.cwnd) * 1_000_000 / u128::from(rtt_us))
                .unwrap_or(u64::MAX),
            rtt_us: min,
            rate_is_floor: unsent == 0 && streams == 0,
            bulk: self.transfer_streams.load(Ordering::Relaxed) > 0,
        }
    }

    fn quic_stats(&self) -> QuicConnStats {
        let s = self.conn.stats();
        QuicConnStats {
            rtt: s.path.rtt,
            cwnd: s.path.cwnd,
            lost_packets: s.path.lost_packets,
            lost_bytes: s.path.lost_bytes,
            sent_packets: s.path.sent_packets,
            congestion_events: s.path.congestion_events,
            unsent: self.unsent(&s),
            parity_on: self.parity.as_ref().is_some_and(|(p, m)| p.protecting(*m)),
            parity_sent: self
                .parity
                .as_ref()
                .map_or(0, |(p, _)| p.sent.load(Ordering::Relaxed)),
            parity_rebuilt: self
                .parity
                .as_ref()
                .map_or(0, |(p, _)| p.rebuilt.load(Ordering::Relaxed)),
        }
    }

    fn conn_stats(&self, session: u64, slot: Option<usize>, reconnects: u64) -> ConnStats {
        let q = self.quic_stats();
        ConnStats {
            id: Some(self.id()),
            session,
            slot,
            state: LaneState::Up,
            peer: Some(self.conn.remote_address()),
            local: None,
            rtt: Some(q.rtt),
            tcp_info: None,
            queued: q.unsent,
            kernel: 0,
            outstanding: q.unsent,
            streams: self.streams.load(Ordering::Relaxed),
            credit_held: None,
            reconnects,
            quic: Some(q),
        }
    }
}

fn check_alpn(conn: &Connection, peer: SocketAddr) -> io::Result<()> {
    let alpn = conn
        .handshake_data()
        .and_then(|d| d.downcast::<HandshakeData>().ok())
        .and_then(|d| d.protocol);
    if alpn.as_deref() != Some(ALPN) {
        conn.close(
            code(ErrorCode::VERSION_MISMATCH),
            b"ALPN longhaul/1 required",
        );
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("QUIC with {peer}: the peer did not agree on ALPN longhaul/1"),
        ));
    }
    Ok(())
}

// ---------------------------------------------------------------- streams

/// quinn priority of a stream that has carried [`crate::rate::BULK_BYTES`]: below every
/// interactive stream ([`stream_priority`]); quinn sends higher priorities first and
/// round-robins within one, so downloads share what pages leave.
const BULK_PRIORITY: i32 = -1;

/// Interactive priorities are in `0..2 × PAGE_SPAN` (at most `i32::MAX`): two levels per
/// millisecond of send deadline, the first bytes' above the rest's.
const PAGE_SPAN: u64 = 1 << 30;

/// quinn priority of a stream of rank `rank` (when its page began, as on a TCP lane:
/// PROTOCOL.md §5.1) in `tier` ([`mux::policy::Tier`], by the bytes the stream has handed to
/// quinn) on a connection that came up at `epoch`: the earlier its send deadline
/// ([`mux::policy::send_deadline`]: the rank for its first bytes, `head_window` later for
/// the rest), in milliseconds, the higher; at one millisecond, first bytes above the rest;
/// every interactive stream above [`BULK_PRIORITY`]. So the oldest page's streams go out
/// first (RFC 9218 §10 serves non-incremental responses of one urgency oldest first): under
/// load the oldest pages finish at about their idle pace instead of every page slowing down
/// together, while the first bytes of the pages that began within `head_window` of an older
/// one do not wait for its large objects. Streams of one millisecond and tier share a level,
/// which quinn serves in turn; otherwise each stream has its own, so quinn re-reads it
/// whenever the stream has sent: a change of tier takes effect at once. A rank is at most
/// [`mux::policy::MAX_PAGE_AGE`] before its stream's opening, so never before `epoch` by
/// more; the order wraps every 2^30 ms (12.4 days) of a connection's life, when for a moment
/// newer streams go first.
fn stream_priority(epoch: Instant, rank: Instant, tier: Tier, head_window: Duration) -> i32 {
    if tier == Tier::Bulk {
        return BULK_PRIORITY;
    }
    let due = mux::policy::send_deadline(rank, tier, head_window);
    let key = (due + mux::policy::MAX_PAGE_AGE).saturating_duration_since(epoch);
    let level = 2 * ((key.as_millis() as u64) % PAGE_SPAN) + u64::from(tier == Tier::Page);
    (2 * PAGE_SPAN - 1 - level) as i32
}

/// One mux stream carried by one bidirectional QUIC stream.
pub(crate) struct QuicStream {
    id: u64,
    send: quinn::SendStream,
    recv: quinn::RecvStream,
    conn: Arc<QConn>,
    /// Bytes of the peer's direction delivered to us.
    received: u64,
    /// Our direction ended (FIN or reset): dropping does not cancel it.
    send_done: bool,
    /// The peer's direction ended (EOF or reset).
    recv_done: bool,
    /// Bytes of our direction handed to quinn.
    written: u64,
    /// Our direction's class for the connection's controller: interactive until it has
    /// carried [`crate::rate::BULK_BYTES`], when quinn's priority of the stream drops too.
    class: SendClass,
    /// Counted in the connection's `transfer_streams` (one direction has carried
    /// [`mux::policy::TRANSFER_BYTES`]).
    transfer: bool,
    /// The stream's rank ([`stream_priority`]).
    rank: Instant,
}

impl QuicStream {
    fn new(
        id: u64,
        send: quinn::SendStream,
        recv: quinn::RecvStream,
        conn: Arc<QConn>,
        rank: Instant,
    ) -> Self {
        conn.streams.fetch_add(1, Ordering::Relaxed);
        QuicStream::reserved(id, send, recv, conn, rank)
    }

    /// A stream whose slot in `conn.streams` was already counted (a [`Reserved`] slot),
    /// ranked at `rank` among the connection's interactive streams.
    fn reserved(
        id: u64,
        send: quinn::SendStream,
        recv: quinn::RecvStream,
        conn: Arc<QConn>,
        rank: Instant,
    ) -> Self {
        let class = SendClass::open(conn.traffic.clone());
        let _ = send.set_priority(stream_priority(
            conn.epoch,
            rank,
            Tier::First,
            conn.head_window,
        ));
        QuicStream {
            id,
            send,
            recv,
            conn,
            received: 0,
            send_done: false,
            recv_done: false,
            written: 0,
            class,
            transfer: false,
            rank,
        }
    }

    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    pub(crate) fn conn_id(&self) -> u64 {
        self.conn.id()
    }

    pub(crate) fn bytes_received(&self) -> u64 {
        self.received
    }

    /// Counts the stream in its connection's `transfer_streams` once a direction has
    /// carried [`mux::policy::TRANSFER_BYTES`].
    fn count_transfer(&mut self, carried: u64) {
        if !self.transfer && carried >= mux::policy::TRANSFER_BYTES {
            self.transfer = true;
            self.conn.transfer_streams.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Resolves with the code once the peer stops our direction (its reset, §8.2); stays pending
    /// once our direction was finished and acknowledged, as nothing can reset it any more.
    pub(crate) fn reset_future(
        &self,
    ) -> Pin<Box<dyn std::future::Future<Output = ErrorCode> + Send + Sync>> {
        let stopped = self.send.stopped();
        Box::pin(async move {
            match stopped.await {
                Ok(Some(v)) => from_code(v),
                Ok(None) => std::future::pending().await,
                Err(quinn::StoppedError::ConnectionLost(_)) => ErrorCode::CONNECTION_LOST,
                Err(_) => ErrorCode::CANCEL,
            }
        })
    }

    /// RESET_STREAM + STOP_SENDING with `c` (§8.2).
    pub(crate) fn reset(&mut self, c: ErrorCode) {
        if !self.send_done {
            let _ = self.send.reset(code(c));
            self.send_done = true;
            self.class.end();
        }
        if !self.recv_done {
            let _ = self.recv.stop(code(c));
            self.recv_done = true;
        }
    }

    fn error(&self, c: ErrorCode, retryable: bool, why: &str) -> io::Error {
        let kind = if c == ErrorCode::CONNECTION_LOST || c == ErrorCode::CANCEL {
            io::ErrorKind::ConnectionAborted
        } else {
            io::ErrorKind::ConnectionReset
        };
        io::Error::new(
            kind,
            StreamError {
                code: c,
                retryable,
                reason: format!("stream {}: {why}", self.id),
            },
        )
    }

    fn lost(&self, e: &quinn::ConnectionError) -> io::Error {
        let why = match (e, self.conn.closed_why.get()) {
            (quinn::ConnectionError::LocallyClosed, Some(why)) => {
                format!("the QUIC connection carrying it was closed: {why}")
            }
            _ => format!("the QUIC connection carrying it was lost ({e})"),
        };
        self.error(ErrorCode::CONNECTION_LOST, self.received == 0, &why)
    }

    fn reset_by_peer(&self, v: VarInt) -> io::Error {
        let c = from_code(v);
        let why = match c {
            ErrorCode::REFUSED_STREAM => "the peer refused it unprocessed".to_owned(),
            ErrorCode::CANCEL => "cancelled".to_owned(),
            c => format!("reset with {c}"),
        };
        self.error(c, c == ErrorCode::REFUSED_STREAM, &why)
    }

    fn map_read(&self, e: io::Error) -> io::Error {
        match e
            .get_ref()
            .and_then(|i| i.downcast_ref::<quinn::ReadError>())
        {
            Some(quinn::ReadError::Reset(v)) => self.reset_by_peer(*v),
            Some(quinn::ReadError::ConnectionLost(c)) => self.lost(c),
            Some(quinn::ReadError::ClosedStream) => {
                self.error(ErrorCode::CANCEL, false, "no longer exists")
            }
            _ => e,
        }
    }

    fn map_write(&self, e: quinn::WriteError) -> io::Error {
        match e {
            quinn::WriteError::Stopped(v) => self.reset_by_peer(v),
            quinn::WriteError::ConnectionLost(c) => self.lost(&c),
            quinn::WriteError::ClosedStream => {
                io::Error::new(io::ErrorKind::BrokenPipe, "write after shutdown")
            }
            e => io::Error::other(e),
        }
    }
}

impl AsyncRead for QuicStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if buf.remaining() == 0 {
            return Poll::Ready(Ok(()));
        }
        let before = buf.filled().len();
        match Pin::new(&mut this.recv).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                let n = buf.filled().len() - before;
                if n == 0 {
                    this.recv_done = true;
                }
                this.received += n as u64;
                this.count_transfer(this.received);
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => {
                this.recv_done = true;
                Poll::Ready(Err(this.map_read(e)))
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

impl AsyncWrite for QuicStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if this.send_done {
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::BrokenPipe,
                "write after shutdown",
            )));
        }
        match Pin::new(&mut this.send).poll_write(cx, buf) {
            Poll::Ready(Ok(n)) => {
                this.conn.written.fetch_add(n as u64, Ordering::Relaxed);
                let before = Tier::of(this.written);
                this.written += n as u64;
                // The controller's class turns bulk with the stream's tier.
                this.class.wrote(this.written);
                let tier = Tier::of(this.written);
                if tier != before {
                    // Least attained service within the connection: a stream that has
                    // carried this much goes after the ones that have not.
                    let _ = this.send.set_priority(stream_priority(
                        this.conn.epoch,
                        this.rank,
                        tier,
                        this.conn.head_window,
                    ));
                }
                this.count_transfer(this.written);
                Poll::Ready(Ok(n))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(this.map_write(e))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        // Written bytes are in quinn's buffers; its connection task sends them.
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.send_done {
            return Poll::Ready(Ok(()));
        }
        this.send_done = true;
        this.class.end();
        match this.send.finish() {
            Ok(()) => Poll::Ready(Ok(())),
            Err(_) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::BrokenPipe,
                "stream already reset",
            ))),
        }
    }
}

impl Drop for QuicStream {
    fn drop(&mut self) {
        // quinn finishes a dropped send stream gracefully: a truncated reply
        // would look complete. Cancel whatever did not end cleanly.
        self.reset(ErrorCode::CANCEL);
        if self.transfer {
            self.conn.transfer_streams.fetch_sub(1, Ordering::Relaxed);
        }
        self.conn.release_slot();
    }
}

/// A stream slot counted on a connection for an open under way; freed (and the queue woken)
/// if the open fails before the stream exists.
struct Reserved {
    conn: Arc<QConn>,
    /// The slot was handed over to a stream: dropping does not free it.
    taken: bool,
}

impl Reserved {
    /// Hands the slot over to the stream.
    fn take(mut self) -> Arc<QConn> {
        self.taken = true;
        self.conn.clone()
    }
}

impl Drop for Reserved {
    fn drop(&mut self) {
        if !self.taken {
            self.conn.release_slot();
        }
    }
}

/// Stream header (§8.2, [`StreamHeader`]) followed by the first bytes.
fn encode_header(kind: Kind, id: u64, target: &str, age_ms: Option<u32>, first: &[u8]) -> Vec<u8> {
    let len = StreamHeader::encoded_len(target, age_ms.is_some());
    let mut b = Vec::with_capacity(len + first.len());
    StreamHeader::encode_parts(&mut b, kind, id, target, age_ms);
    b.extend_from_slice(first);
    b
}

/// Reads a control-stream message (§8.1) whole, as its sender finishes the stream after it,
/// at most [`QUIC_CONTROL_MAX`] bytes, and decodes it.
async fn read_control<T>(
    rs: &mut quinn::RecvStream,
    decode: fn(&[u8]) -> Option<T>,
    what: &str,
) -> io::Result<T> {
    let b = rs
        .read_to_end(QUIC_CONTROL_MAX)
        .await
        .map_err(io::Error::other)?;
    decode(&b).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{what} of {} bytes is too short", b.len()),
        )
    })
}

/// Reads a stream header (§8.2): kind, stream id, target and the page age it carried.
async fn read_header(
    recv: &mut quinn::RecvStream,
) -> Result<(Kind, u64, String, Option<u32>), String> {
    let mut h = [0u8; StreamHeader::FIXED_LEN];
    recv.read_exact(&mut h)
        .await
        .map_err(|e| format!("stream header: {e}"))?;
    let fixed = StreamHeader::decode_fixed(&h).map_err(|e| e.to_string())?;
    let mut t = vec![0u8; fixed.rest_len()];
    recv.read_exact(&mut t)
        .await
        .map_err(|e| format!("stream target: {e}"))?;
    let (target, age) = StreamHeader::decode_rest(&fixed, t).map_err(|e| e.to_string())?;
    Ok((fixed.kind, fixed.stream, target, age))
}

// ---------------------------------------------------------------- edge

fn check_target(target: &str) -> Result<(), PoolError> {
    if target.is_empty() || target.len() > mux::frame::MAX_TARGET_LEN {
        return Err(PoolError::Invalid("target length"));
    }
    Ok(())
}

#[derive(Default)]
struct QSlot {
    state: LaneState,
    conn: Option<Arc<QConn>>,
    reconnects: u64,
}

struct PoolInner {
    session: u64,
    next_id: AtomicU64,
    slots: Mutex<Vec<QSlot>>,
    closed: AtomicBool,
    close_notify: Notify,
    up: Notify,
    tasks: Mutex<Vec<JoinHandle<()>>>,
    /// Streams this edge opens at most per connection: our `max_streams`, assumed equal to the
    /// remote's `max_concurrent_bidi_streams` (both come from the link's configuration, §8.2).
    /// A remote that grants fewer makes the open wait for its credit within `open_wait`.
    stream_limit: u32,
    /// Opens waiting for a stream slot.
    queue: Arc<OpenQueue>,
    /// Longest wait of one open (`PoolConfig::open_wait`).
    open_wait: Duration,
    /// How a new stream picks its connection (`QuicOptions::policy`, else `PoolConfig::policy`).
    policy: mux::Policy,
    /// Round-robin position of [`mux::Policy::RoundRobin`].
    cursor: AtomicUsize,
}

impl PoolInner {
    fn slots(&self) -> std::sync::MutexGuard<'_, Vec<QSlot>> {
        self.slots.lock().unwrap_or_else(|p| p.into_inner())
    }
    fn stop(&self) {
        self.closed.store(true, Ordering::Release);
        self.close_notify.notify_waiters();
        self.queue.wake();
    }
    fn open_streams(&self) -> u32 {
        self.slots()
            .iter()
            .filter_map(|s| s.conn.as_ref())
            .map(|c| c.streams.load(Ordering::Relaxed))
            .sum()
    }
    fn close_all(&self, why: &[u8]) {
        for s in self.slots().iter() {
            if let Some(c) = &s.conn {
                c.conn.close(code(ErrorCode::NO_ERROR), why);
            }
        }
    }
}

struct Guard(Arc<PoolInner>);

impl Drop for Guard {
    fn drop(&mut self) {
        self.0.stop();
        self.0.close_all(b"edge pool dropped");
    }
}

/// The edge side over QUIC; cheap to clone.
#[derive(Clone)]
pub(crate) struct QuicPool {
    inner: Arc<PoolInner>,
    _guard: Arc<Guard>,
}

impl QuicPool {
    pub(crate) fn start(
        cfg: &PoolConfig,
        tls: Arc<TlsClient>,
        opts: QuicOptions,
    ) -> Result<QuicPool, PoolError> {
        cfg.validate().map_err(PoolError::Config)?;
        let transport = opts.transports().map_err(PoolError::Config)?;
        let parity = opts.parity_opts();
        let path_loss = SharedLoss::default();
        let session: u64 = rand::random();
        let inner = Arc::new(PoolInner {
            session,
            next_id: AtomicU64::new(1),
            slots: Mutex::new((0..cfg.connections).map(|_| QSlot::default()).collect()),
            closed: AtomicBool::new(false),
            close_notify: Notify::new(),
            up: Notify::new(),
            tasks: Mutex::new(Vec::new()),
            stream_limit: opts.max_streams,
            queue: Arc::new(OpenQueue::new(cfg.open_queue, cfg.open_wait)),
            open_wait: cfg.open_wait,
            policy: opts.policy.unwrap_or(cfg.policy),
            cursor: AtomicUsize::new(0),
        });
        let mut tasks = Vec::new();
        for slot in 0..cfg.connections {
            let backoff = Backoff::new(cfg.backoff_min, cfg.backoff_max, session ^ slot as u64);
            let dial = Dial {
                remote: cfg.remote.clone(),
                tls: tls.clone(),
                transport: transport.clone(),
                timeout: cfg.socket.connect_timeout,
                session,
                parity: parity.clone(),
                path_loss: path_loss.clone(),
                features: opts.features(),
                head_window: cfg.mux.head_window,
            };
            tasks.push(tokio::spawn(run_slot(inner.clone(), dial, slot, backoff)));
        }
        *inner.tasks.lock().unwrap_or_else(|p| p.into_inner()) = tasks;
        let _guard = Arc::new(Guard(inner.clone()));
        Ok(QuicPool { inner, _guard })
    }

    pub(crate) async fn ready(&self, timeout: Duration) -> bool {
        let wait = async {
            loop {
                let n = self.inner.up.notified();
                tokio::pin!(n);
                n.as_mut().enable();
                if self.inner.slots().iter().any(|s| s.conn.is_some()) {
                    return;
                }
                n.await;
            }
        };
        tokio::time::timeout(timeout, wait).await.is_ok()
    }

    /// Reserves a stream slot on the up connection the pool's policy picks among those below
    /// the stream limit (least-outstanding: the fewest unsent bytes, then the fewest streams;
    /// expected-completion: see [`QConn::load`]). The reply travels on the request's QUIC
    /// stream, so this one choice places both directions.
    fn reserve(&self) -> Attempt<Reserved> {
        if self.inner.closed.load(Ordering::Acquire) {
            return Attempt::Done(Err(PoolError::Draining));
        }
        let slots = self.inner.slots();
        let mut any_up = false;
        let candidates: Vec<&Arc<QConn>> = slots
            .iter()
            .filter_map(|s| s.conn.as_ref())
            .filter(|c| c.conn.close_reason().is_none())
            .inspect(|_| any_up = true)
            .filter(|c| c.streams.load(Ordering::Relaxed) < self.inner.stream_limit)
            .collect();
        let loads: Vec<mux::Load> = candidates.iter().map(|c| c.load()).collect();
        let mut cursor = self.inner.cursor.load(Ordering::Relaxed);
        let best = self.inner.policy.choose(&loads, &mut cursor);
        self.inner.cursor.store(cursor, Ordering::Relaxed);
        match best.map(|i| candidates[i]) {
            Some(c) => {
                // Under the slots lock: two opens cannot both take a connection's last slot.
                c.streams.fetch_add(1, Ordering::Relaxed);
                Attempt::Done(Ok(Reserved {
                    conn: c.clone(),
                    taken: false,
                }))
            }
            None if any_up => Attempt::Full,
            None => Attempt::Done(Err(PoolError::Unavailable)),
        }
    }

    pub(crate) async fn open(
        &self,
        kind: Kind,
        target: &str,
        first: Bytes,
        age: Duration,
    ) -> Result<MuxStream, PoolError> {
        check_target(target)?;
        let start = tokio::time::Instant::now();
        let r = self.inner.queue.open(|| self.reserve()).await?;
        self.open_on(r, kind, target, first, start, age).await
    }

    pub(crate) async fn try_open(
        &self,
        kind: Kind,
        target: &str,
        first: Bytes,
        age: Duration,
    ) -> Result<MuxStream, PoolError> {
        check_target(target)?;
        let start = tokio::time::Instant::now();
        let r = self.inner.queue.try_open(|| self.reserve())?;
        self.open_on(r, kind, target, first, start, age).await
    }

    /// Streams the up connections can carry at once.
    pub(crate) fn stream_limit(&self) -> usize {
        let up = self
            .stats()
            .iter()
            .filter(|c| c.state == LaneState::Up)
            .count();
        up * self.inner.stream_limit as usize
    }

    pub(crate) fn open_waiting(&self) -> usize {
        self.inner.queue.waiting()
    }

    /// Opens the QUIC stream of a reserved slot and sends its header.
    async fn open_on(
        &self,
        r: Reserved,
        kind: Kind,
        target: &str,
        first: Bytes,
        start: tokio::time::Instant,
        age: Duration,
    ) -> Result<MuxStream, PoolError> {
        // Ready at once unless the remote granted fewer streams than `stream_limit`, or its
        // credit for a slot that just freed here is still on its way: then quinn waits for
        // it, within what is left of the open's wait (§8.2).
        let deadline = start + self.inner.open_wait;
        let (mut send, recv) = match tokio::time::timeout_at(deadline, r.conn.conn.open_bi()).await
        {
            Ok(Ok(s)) => s,
            Ok(Err(_)) => return Err(PoolError::Unavailable),
            Err(_) => {
                return Err(PoolError::StreamLimit {
                    waited: start.elapsed(),
                    queue_full: false,
                })
            }
        };
        let id = self.inner.next_id.fetch_add(1, Ordering::Relaxed);
        // The age as of now: the time the open waited for a slot counts (§5.1).
        let age = age + start.elapsed();
        let age_ms = r
            .conn
            .page_age
            .then(|| u32::try_from(age.as_millis()).unwrap_or(u32::MAX));
        let head = encode_header(kind, id, target, age_ms, &first);
        if send.write_all(&head).await.is_err() {
            return Err(PoolError::Unavailable);
        }
        let conn = r.take();
        conn.written.fetch_add(head.len() as u64, Ordering::Relaxed);
        let rank = mux::policy::page_rank(Instant::now(), age);
        Ok(MuxStream::quic(QuicStream::reserved(
            id, send, recv, conn, rank,
        )))
    }

    pub(crate) fn stats(&self) -> Vec<ConnStats> {
        let session = self.inner.session;
        self.inner
            .slots()
            .iter()
            .enumerate()
            .map(|(n, s)| match &s.conn {
                Some(c) => c.conn_stats(session, Some(n), s.reconnects),
                None => ConnStats {
                    slot: Some(n),
                    state: s.state,
                    reconnects: s.reconnects,
                    ..ConnStats::empty(session)
                },
            })
            .collect()
    }

    pub(crate) fn session_id(&self) -> u64 {
        self.inner.session
    }

    /// Connections up now, and whether the peer acknowledged anything new on any of them
    /// since the previous call with the same `prev` (per-connection state, updated here).
    ///
    /// The evidence is a new RTT sample (the smoothed RTT changed): quinn takes one only when
    /// an ACK newly acknowledges our largest ack-eliciting packet (RFC 9002 §5.1), which needs
    /// both directions to work. Merely receiving datagrams is not enough: with our direction
    /// black-holed, the peer keeps sending its retransmission probes (with stale ACKs) for
    /// seconds. An idle connection's keep-alive PINGs make a sound path answer every
    /// keep-alive period; a busy one answers all the time.
    pub(crate) fn delivery(&self, prev: &mut HashMap<u64, u64>) -> (usize, bool) {
        let mut up = 0;
        let mut received = false;
        let mut seen = HashMap::new();
        for s in self.inner.slots().iter() {
            let Some(c) = &s.conn else { continue };
            if c.conn.close_reason().is_some() {
                continue;
            }
            up += 1;
            let rtt = u64::try_from(c.conn.stats().path.rtt.as_nanos()).unwrap_or(u64::MAX);
            // A connection new since the last sample counts from its next sample on.
            if prev.get(&c.id()).is_some_and(|p| rtt != *p) {
                received = true;
            }
            seen.insert(c.id(), rtt);
        }
        *prev = seen;
        (up, received)
    }

    /// Stops re-dialing and closes every connection at once: their streams end with an error
    /// that names `why` (retryable when nothing of the reply arrived).
    pub(crate) fn abandon(&self, why: &str) {
        self.inner.stop();
        for s in self.inner.slots().iter() {
            if let Some(c) = &s.conn {
                let _ = c.closed_why.set(why.to_owned());
                c.conn.close(code(ErrorCode::NO_ERROR), why.as_bytes());
            }
        }
    }

    pub(crate) async fn close(&self, grace: Duration) {
        self.inner.stop();
        let idle = async {
            while self.inner.open_streams() > 0 {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        };
        let _ = tokio::time::timeout(grace, idle).await;
        self.inner.close_all(b"edge pool closing");
        let tasks =
            std::mem::take(&mut *self.inner.tasks.lock().unwrap_or_else(|p| p.into_inner()));
        for t in tasks {
            let abort = t.abort_handle();
            if tokio::time::timeout(Duration::from_secs(3), t)
                .await
                .is_err()
            {
                abort.abort();
            }
        }
    }
}

struct Dial {
    remote: String,
    tls: Arc<TlsClient>,
    transport: Transports,
    timeout: Duration,
    session: u64,
    /// Parity on this pool's sockets, unless `parity = "off"`.
    parity: Option<ParityOpts>,
    /// The loss judgement of the path to the remote, shared by the pool's connections.
    path_loss: SharedLoss,
    /// What this side announces in its HELLO.
    features: Features,
    /// The session's head window, which orders its connections' streams as on a TCP lane
    /// (`mux::Config::head_window`, [`stream_priority`]).
    head_window: Duration,
}

/// A dialled connection: the connection, its traffic, whether the remote reads page ages,
/// its parity registration when both sides run parity, and its local address (the remote
/// logs it as the connection's peer).
type Dialled = (
    Connection,
    Arc<Traffic>,
    bool,
    Option<ParityWatch>,
    SocketAddr,
);

impl Dial {
    /// Resolves, handshakes, checks ALPN and sends the QUIC HELLO (§8.1); also says whether
    /// the remote's reply announced [`Features::PAGE_AGE`], and registers the remote for
    /// parity when its reply announced [`Features::PARITY`] and this pool runs it.
    async fn dial(&self) -> io::Result<Dialled> {
        let addr = tokio::net::lookup_host(&self.remote)
            .await?
            .next()
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "remote resolves to nothing"))?;
        let bind: SocketAddr = if addr.is_ipv4() {
            "0.0.0.0:0".parse().unwrap_or(addr)
        } else {
            "[::]:0".parse().unwrap_or(addr)
        };
        // One UDP socket (endpoint) per connection: distinct 5-tuples, so a
        // path problem on one flow does not take down the others.
        let runtime = quinn::default_runtime()
            .ok_or_else(|| io::Error::other("no async runtime for QUIC"))?;
        let udp = std::net::UdpSocket::bind(bind)?;
        size_udp_socket(&udp, self.transport.opts.udp_buffer);
        let udp = runtime.wrap_udp_socket(udp)?;
        let parity = self.parity.as_ref().map(|p| p.wrap(udp.clone()));
        let socket: Arc<dyn quinn::AsyncUdpSocket> = match &parity {
            Some(p) => p.clone(),
            None => udp,
        };
        let endpoint =
            Endpoint::new_with_abstract_socket(client_endpoint_config(), None, socket, runtime)?;
        let (rustls, name) = self.tls.current();
        let crypto = QuicClientConfig::try_from(rustls)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))?;
        let mut cc = quinn::ClientConfig::new(Arc::new(crypto));
        let (transport, traffic) = self.transport.for_connection();
        cc.transport_config(transport);
        let name = name.to_str().into_owned();
        let connecting = endpoint
            .connect_with(cc, addr, &name)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))?;
        let conn = tokio::time::timeout(self.timeout, connecting)
            .await
            .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "QUIC handshake timed out"))?
            .map_err(|e| io::Error::new(io::ErrorKind::ConnectionRefused, e.to_string()))?;
        check_alpn(&conn, addr)?;
        let mut ctl = conn.open_uni().await.map_err(io::Error::other)?;
        let hello = QuicHello {
            version: QUIC_MAPPING_VERSION,
            session: self.session,
            features: Some(self.features),
        }
        .encode();
        ctl.write_all(&hello).await.map_err(io::Error::from)?;
        let _ = ctl.finish();
        // Under TLS 1.3 the client finishes its handshake before the server
        // has checked the client certificate: the remote's reply on its own
        // control stream is what says the connection was accepted (§8.1).
        let ack = tokio::time::timeout(self.timeout, async {
            let mut rs = conn.accept_uni().await.map_err(io::Error::other)?;
            // 1 byte from a remote without features, 5 with.
            read_control(&mut rs, QuicHelloReply::decode, "HELLO reply").await
        })
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "no HELLO reply from the remote"))?
        .map_err(|e| match conn.close_reason() {
            Some(r) => io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!("remote closed the connection: {r}"),
            ),
            None => e,
        })?;
        if ack.version != QUIC_MAPPING_VERSION {
            conn.close(code(ErrorCode::VERSION_MISMATCH), b"unsupported version");
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("remote answered HELLO with version {}", ack.version),
            ));
        }
        let page_age = ack.features.is_some_and(|f| f.contains(Features::PAGE_AGE));
        let parity = parity
            .filter(|_| ack.features.is_some_and(|f| f.contains(Features::PARITY)))
            .map(|p| ParityWatch::new(p, &conn, traffic.clone(), self.path_loss.clone()));
        Ok((conn, traffic, page_age, parity, endpoint.local_addr()?))
    }
}

async fn run_slot(inner: Arc<PoolInner>, dial: Dial, slot: usize, mut backoff: Backoff) {
    let set = |st: LaneState, conn: Option<Arc<QConn>>, redial: bool| {
        if let Some(s) = inner.slots().get_mut(slot) {
            s.state = st;
            s.conn = conn;
            if redial {
                s.reconnects += 1;
            }
        }
    };
    let mut first = true;
    while !inner.closed.load(Ordering::Acquire) {
        set(LaneState::Connecting, None, !first);
        first = false;
        match dial.dial().await {
            Ok((conn, traffic, page_age, mut parity, local)) => {
                let q = QConn::new(
                    conn.clone(),
                    Some(inner.queue.clone()),
                    traffic,
                    page_age,
                    parity.as_ref(),
                    dial.head_window,
                );
                tracing::info!(
                    slot,
                    conn = q.id(),
                    remote = %dial.remote,
                    %local,
                    "QUIC pool connection up"
                );
                set(LaneState::Up, Some(q), false);
                inner.up.notify_waiters();
                inner.queue.wake();
                backoff.reset();
                let stop = inner.close_notify.notified();
                tokio::pin!(stop);
                stop.as_mut().enable();
                let mut tick = tokio::time::interval(LOSS_TICK);
                while !inner.closed.load(Ordering::Acquire) {
                    tokio::select! {
                        e = conn.closed() => {
                            tracing::warn!(slot, error = %e, "QUIC pool connection lost");
                            break;
                        }
                        _ = &mut stop => break,
                        _ = parity_tick(&parity, &mut tick) => {
                            if let Some(p) = parity.as_mut() {
                                p.tick(&conn);
                            }
                        }
                    }
                }
                drop(parity);
            }
            Err(e) => {
                tracing::warn!(slot, remote = %dial.remote, error = %e, "QUIC pool dial failed")
            }
        }
        if inner.closed.load(Ordering::Acquire) {
            break;
        }
        set(LaneState::Backoff, None, false);
        // Opens waiting for a slot fail at once if that was the last connection.
        inner.queue.wake();
        let d = backoff.next_delay();
        let stop = inner.close_notify.notified();
        tokio::pin!(stop);
        stop.as_mut().enable();
        if inner.closed.load(Ordering::Acquire) {
            break;
        }
        tokio::select! {
            _ = tokio::time::sleep(d) => {}
            _ = stop => {}
        }
    }
}

// ---------------------------------------------------------------- server

pub(crate) struct QuicServer {
    inner: Arc<ServerInner>,
    accept_task: JoinHandle<()>,
}

struct ServerInner {
    endpoint: Endpoint,
    local_addr: SocketAddr,
    cfg: ServerConfig,
    tls: Arc<TlsServer>,
    transport: Transports,
    /// The endpoint's socket when this remote runs parity.
    parity: Option<Arc<ParitySocket>>,
    /// The loss judgement of the path from each edge address with a live connection (dropped
    /// with its last connection).
    path_loss: Mutex<HashMap<std::net::IpAddr, SharedLoss>>,
    /// What this side announces in its HELLO reply.
    features: Features,
    /// Live connections by quinn id, with the edge session id of their HELLO.
    conns: Mutex<HashMap<u64, (u64, Arc<QConn>)>>,
    /// Connections still in their handshake.
    gate: HandshakeGate,
    rx: tokio::sync::Mutex<mpsc::UnboundedReceiver<Incoming>>,
    tx: mpsc::UnboundedSender<Incoming>,
    shutdown: watch::Sender<bool>,
}

impl ServerInner {
    /// The shared loss judgement of the path from `ip`; judgements no connection holds any
    /// more are dropped first.
    fn path_loss(&self, ip: std::net::IpAddr) -> SharedLoss {
        let mut m = self.path_loss.lock().unwrap_or_else(|p| p.into_inner());
        m.retain(|_, w| Arc::strong_count(w) > 1);
        m.entry(ip).or_default().clone()
    }

    fn conns(&self) -> Vec<(u64, Arc<QConn>)> {
        self.conns
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect()
    }

    fn server_config(&self, rustls: Arc<rustls::ServerConfig>) -> io::Result<quinn::ServerConfig> {
        self.server_config_with(rustls, self.transport.base.clone())
    }

    /// The configuration of one accepted connection, with its own transport (see
    /// [`Transports`]) and the traffic its streams report to.
    fn connection_config(&self) -> io::Result<(quinn::ServerConfig, Arc<Traffic>)> {
        let (transport, traffic) = self.transport.for_connection();
        Ok((
            self.server_config_with(self.tls.current(), transport)?,
            traffic,
        ))
    }

    fn server_config_with(
        &self,
        rustls: Arc<rustls::ServerConfig>,
        transport: Arc<TransportConfig>,
    ) -> io::Result<quinn::ServerConfig> {
        let crypto = QuicServerConfig::try_from(rustls)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))?;
        let mut sc = quinn::ServerConfig::with_crypto(Arc::new(crypto));
        sc.transport_config(transport);
        sc.migration(false);
        Ok(sc)
    }
}

/// The edge's endpoint (one per pool connection): its own connection ids are empty
/// (RFC 9000 §5.1: allowed where the address and port are the connection's alone), so
/// every packet from the remote, the whole reply direction, carries 8 bytes less (0.5 % of
/// a full packet). The remote keeps its ids (it tells connections apart by them) and does
/// not accept migration, which is all an empty id gives up.
/// The edge's endpoint configuration: zero-length connection ids (one socket per connection),
/// and the fixed bit never greased (RFC 9287), so no QUIC packet is taken for a parity
/// datagram ([`crate::fec`]).
fn client_endpoint_config() -> quinn::EndpointConfig {
    let mut cfg = quinn::EndpointConfig::default();
    cfg.grease_quic_bit(false);
    cfg.cid_generator(|| Box::new(quinn_proto::RandomConnectionIdGenerator::new(0)));
    cfg
}

/// The remote's endpoint configuration from a secret that survives restarts: connection ids
/// are signed and stateless-reset tokens derived with keys from it, so after a crash and
/// restart the new process answers packets of the old connections with resets the edge
/// accepts, and the edge re-dials at once instead of after its idle timeout.
fn endpoint_config(secret: &[u8; 32]) -> quinn::EndpointConfig {
    let reset = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, secret);
    let cid_key = u64::from_be_bytes(
        ring::hmac::sign(&reset, b"connection ids").as_ref()[..8]
            .try_into()
            .expect("8 bytes"),
    );
    let mut cfg = quinn::EndpointConfig::new(Arc::new(reset));
    // As the edge's: no QUIC packet is taken for a parity datagram.
    cfg.grease_quic_bit(false);
    cfg.cid_generator(move || {
        Box::new(quinn_proto::HashedConnectionIdGenerator::from_key(cid_key))
    });
    cfg
}

impl QuicServer {
    pub(crate) async fn bind(
        addr: SocketAddr,
        cfg: ServerConfig,
        tls: Arc<TlsServer>,
        opts: QuicOptions,
        gate: Option<HandshakeGate>,
    ) -> io::Result<QuicServer> {
        let bad = |e: String| io::Error::new(io::ErrorKind::InvalidInput, e);
        cfg.mux.validate().map_err(|e| bad(e.to_string()))?;
        cfg.validate_limits().map_err(bad)?;
        let transport = opts.transports().map_err(bad)?;
        let rustls = tls.current();
        let crypto = QuicServerConfig::try_from(rustls.clone()).map_err(|e| bad(e.to_string()))?;
        let mut sc = quinn::ServerConfig::with_crypto(Arc::new(crypto));
        sc.transport_config(transport.base.clone());
        sc.migration(false);
        let ep_cfg = match tls.endpoint_secret() {
            Some(secret) => endpoint_config(&secret),
            None => {
                tracing::warn!(
                    "QUIC: private key file unreadable for the endpoint secret; a crash of this \
                     remote is seen by edges only after their idle timeout"
                );
                let mut c = quinn::EndpointConfig::default();
                c.grease_quic_bit(false);
                c
            }
        };
        let runtime = quinn::default_runtime()
            .ok_or_else(|| io::Error::other("no async runtime for QUIC"))?;
        let udp = std::net::UdpSocket::bind(addr)?;
        size_udp_socket(&udp, opts.udp_buffer);
        let udp = runtime.wrap_udp_socket(udp)?;
        let parity = opts.parity_opts().map(|p| p.wrap(udp.clone()));
        let socket: Arc<dyn quinn::AsyncUdpSocket> = match &parity {
            Some(p) => p.clone(),
            None => udp,
        };
        let endpoint = Endpoint::new_with_abstract_socket(ep_cfg, Some(sc), socket, runtime)?;
        let local_addr = endpoint.local_addr()?;
        let (tx, rx) = mpsc::unbounded_channel();
        let (shutdown, _) = watch::channel(false);
        let gate = gate.unwrap_or_else(|| cfg.handshake_gate());
        let inner = Arc::new(ServerInner {
            endpoint,
            local_addr,
            cfg,
            tls,
            transport,
            parity,
            path_loss: Mutex::new(HashMap::new()),
            features: opts.features(),
            conns: Mutex::new(HashMap::new()),
            gate,
            rx: tokio::sync::Mutex::new(rx),
            tx,
            shutdown,
        });
        let accept_task = tokio::spawn(accept_loop(inner.clone(), rustls));
        Ok(QuicServer { inner, accept_task })
    }

    pub(crate) fn local_addr(&self) -> SocketAddr {
        self.inner.local_addr
    }

    pub(crate) async fn accept(&self) -> Option<Incoming> {
        let mut stop = self.inner.shutdown.subscribe();
        if *stop.borrow() {
            return None;
        }
        let mut rx = self.inner.rx.lock().await;
        tokio::select! {
            i = rx.recv() => i,
            _ = stop.wait_for(|s| *s) => None,
        }
    }

    fn refuse_queued(&self) {
        if let Ok(mut rx) = self.inner.rx.try_lock() {
            while let Ok(inc) = rx.try_recv() {
                inc.stream.refuse();
            }
        }
    }

    pub(crate) async fn shutdown(&self, grace: Duration) {
        self.inner.shutdown.send_replace(true);
        self.accept_task.abort();
        self.inner.endpoint.set_server_config(None);
        let idle = async {
            loop {
                self.refuse_queued();
                let open: u32 = self
                    .inner
                    .conns()
                    .iter()
                    .map(|(_, c)| c.streams.load(Ordering::Relaxed))
                    .sum();
                if open == 0 {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        };
        let _ = tokio::time::timeout(grace, idle).await;
        self.inner
            .endpoint
            .close(code(ErrorCode::NO_ERROR), b"remote shutting down");
        let _ = tokio::time::timeout(Duration::from_secs(3), self.inner.endpoint.wait_idle()).await;
    }

    pub(crate) fn admission(&self) -> crate::AdmissionStats {
        self.inner.gate.stats()
    }

    pub(crate) fn stats(&self) -> Vec<ConnStats> {
        let mut v: Vec<_> = self
            .inner
            .conns()
            .iter()
            .map(|(session, c)| c.conn_stats(*session, None, 0))
            .collect();
        v.sort_by_key(|s| s.id);
        v
    }
}

impl Drop for QuicServer {
    fn drop(&mut self) {
        self.accept_task.abort();
        self.inner.shutdown.send_replace(true);
        self.inner
            .endpoint
            .close(code(ErrorCode::NO_ERROR), b"remote stopped");
    }
}

async fn accept_loop(inner: Arc<ServerInner>, mut rustls: Arc<rustls::ServerConfig>) {
    while let Some(incoming) = inner.endpoint.accept().await {
        // New files (rotation, SIGHUP) apply to the next connections.
        let cur = inner.tls.current();
        if !Arc::ptr_eq(&cur, &rustls) {
            match inner.server_config(cur.clone()) {
                Ok(sc) => inner.endpoint.set_server_config(Some(sc)),
                Err(e) => tracing::warn!(error = %e, "QUIC TLS configuration not applied"),
            }
            rustls = cur;
        }
        let peer = incoming.remote_address();
        let live = inner.conns.lock().unwrap_or_else(|p| p.into_inner()).len();
        if live >= inner.cfg.max_connections {
            inner.gate.refused_connection();
            tracing::warn!(%peer, max = inner.cfg.max_connections, "QUIC pool connection refused: too many connections");
            incoming.refuse();
            continue;
        }
        // Under load, a source must show it receives at its address (a Retry round trip)
        // before it takes a handshake slot, so spoofed Initials cannot fill them.
        if inner.gate.busy() && !incoming.remote_address_validated() {
            tracing::debug!(%peer, pending = inner.gate.pending(), "QUIC: address validation asked");
            if let Err(e) = incoming.retry() {
                e.into_incoming().refuse();
            }
            continue;
        }
        let permit = match inner.gate.try_enter(peer.ip()) {
            Ok(p) => p,
            Err(why) => {
                tracing::warn!(%peer, reason = %why, "QUIC pool connection refused: too many handshakes");
                incoming.refuse();
                continue;
            }
        };
        let inner = inner.clone();
        tokio::spawn(async move {
            if let Err(e) = serve_conn(&inner, incoming, permit).await {
                tracing::warn!(%peer, error = %e, "QUIC pool connection rejected");
            }
        });
    }
}

async fn serve_conn(
    inner: &Arc<ServerInner>,
    incoming: quinn::Incoming,
    permit: Permit,
) -> io::Result<()> {
    let peer = incoming.remote_address();
    let hs = inner.cfg.mux.handshake_timeout;
    let (config, traffic) = inner.connection_config()?;
    let connecting = incoming
        .accept_with(Arc::new(config))
        .map_err(|e| io::Error::new(io::ErrorKind::PermissionDenied, e.to_string()))?;
    let conn = tokio::time::timeout(hs, connecting)
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "QUIC handshake timed out"))?
        .map_err(|e| io::Error::new(io::ErrorKind::PermissionDenied, e.to_string()))?;
    check_alpn(&conn, peer)?;
    let hello = tokio::time::timeout(hs, async {
        let mut ctl = conn.accept_uni().await.map_err(io::Error::other)?;
        // 9 bytes from an edge without features, 13 with.
        read_control(&mut ctl, QuicHello::decode, "QUIC HELLO").await
    })
    .await;
    let h = match hello {
        Ok(Ok(h)) => h,
        Ok(Err(e)) => {
            conn.close(code(ErrorCode::PROTOCOL_ERROR), b"no QUIC HELLO");
            return Err(e);
        }
        Err(_) => {
            conn.close(code(ErrorCode::TIMEOUT), b"no QUIC HELLO in time");
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "no QUIC HELLO in time",
            ));
        }
    };
    let QuicHello {
        version,
        session,
        features,
    } = h;
    if version != QUIC_MAPPING_VERSION {
        conn.close(code(ErrorCode::VERSION_MISMATCH), b"unsupported version");
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("QUIC HELLO version {version} unsupported"),
        ));
    }
    let mut reply = conn.open_uni().await.map_err(io::Error::other)?;
    let ack = QuicHelloReply {
        version: QUIC_MAPPING_VERSION,
        features: Some(inner.features),
    };
    reply
        .write_all(&ack.encode())
        .await
        .map_err(io::Error::other)?;
    let _ = reply.finish();
    let mut parity = inner
        .parity
        .clone()
        .filter(|_| features.is_some_and(|f| f.contains(Features::PARITY)))
        .map(|p| {
            let path = inner.path_loss(peer.ip());
            ParityWatch::new(p, &conn, traffic.clone(), path)
        });
    let q = QConn::new(
        conn.clone(),
        None,
        traffic,
        false,
        parity.as_ref(),
        inner.cfg.mux.head_window,
    );
    let id = q.id();
    {
        // Counted and inserted under one lock, so the limit holds exactly.
        let mut conns = inner.conns.lock().unwrap_or_else(|p| p.into_inner());
        if conns.len() >= inner.cfg.max_connections {
            drop(conns);
            conn.close(code(ErrorCode::ENHANCE_YOUR_CALM), b"too many connections");
            return Err(inner.gate.over_connection_limit(inner.cfg.max_connections));
        }
        conns.insert(id, (session, q.clone()));
    }
    drop(permit);
    tracing::info!(%peer, session, conn = id, "QUIC pool connection up");
    let mut tick = tokio::time::interval(LOSS_TICK);
    let why = loop {
        let accepted = loop {
            tokio::select! {
                r = conn.accept_bi() => break r,
                _ = parity_tick(&parity, &mut tick) => {
                    if let Some(p) = parity.as_mut() {
                        p.tick(&conn);
                    }
                }
            }
        };
        let (send, mut recv) = match accepted {
            Ok(s) => s,
            Err(e) => break e,
        };
        let q = q.clone();
        let inner = inner.clone();
        tokio::spawn(async move {
            let head = tokio::time::timeout(hs, read_header(&mut recv)).await;
            let arrived = Instant::now();
            let (kind, sid, target, age_ms) = match head {
                Ok(Ok(x)) => x,
                Ok(Err(e)) => {
                    tracing::warn!(%peer, error = %e, "QUIC stream refused: bad header");
                    let mut s = QuicStream::new(0, send, recv, q, arrived);
                    s.reset(ErrorCode::PROTOCOL_ERROR);
                    return;
                }
                Err(_) => {
                    let mut s = QuicStream::new(0, send, recv, q, arrived);
                    s.reset(ErrorCode::TIMEOUT);
                    return;
                }
            };
            // Ranked by when its page began as the edge saw it (§5.1, §8.2); a header without
            // an age (an edge without the feature) ranks by its arrival.
            let age = Duration::from_millis(u64::from(age_ms.unwrap_or(0)));
            let rank = mux::policy::page_rank(arrived, age);
            let stream = MuxStream::quic(QuicStream::new(sid, send, recv, q, rank));
            if *inner.shutdown.borrow() {
                stream.refuse();
                return;
            }
            if let Err(e) = inner.tx.send(Incoming {
                id: sid,
                kind,
                target,
                stream,
            }) {
                e.0.stream.refuse();
            }
        });
    };
    inner
        .conns
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .remove(&id);
    tracing::info!(%peer, session, conn = id, reason = %why, "QUIC pool connection ended");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn udp_buffers_hold_a_quarter_second_of_the_link_within_bounds() {
        assert_eq!(udp_buffer_for_rate(100_000_000), MIN_UDP_BUFFER);
        assert_eq!(udp_buffer_for_rate(1_000_000_000), 31_250_000);
        assert_eq!(udp_buffer_for_rate(u64::MAX), MAX_DEFAULT_UDP_BUFFER);
        assert_eq!(QuicOptions::default().udp_buffer, MIN_UDP_BUFFER);
        let mut o = QuicOptions {
            udp_buffer: 1024,
            ..QuicOptions::default()
        };
        assert!(o.validate().unwrap_err().contains("udp_buffer"));
        o.udp_buffer = 64 << 10;
        assert!(o.validate().is_ok());
    }

    /// `CAP_NET_ADMIN` (bit 12) in the process's effective capabilities.
    fn has_net_admin() -> bool {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let caps = status
            .lines()
            .find_map(|l| l.strip_prefix("CapEff:"))
            .map(|v| u64::from_str_radix(v.trim(), 16).unwrap())
            .unwrap();
        caps & (1 << 12) != 0
    }

    #[test]
    fn a_udp_socket_gets_its_buffers_past_the_sysctl_cap_with_the_capability() {
        let u = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let s = socket2::SockRef::from(&u);
        let want = 24 << 20;
        let got = size_udp_socket(&u, want);
        assert_eq!(got.recv, s.recv_buffer_size().unwrap() / 2);
        assert_eq!(got.send, s.send_buffer_size().unwrap() / 2);
        if has_net_admin() {
            assert_eq!(
                got,
                UdpBuffers {
                    recv: want,
                    send: want
                }
            );
        } else {
            let cap = |k: &str| -> usize {
                let p = format!("/proc/sys/net/core/{k}");
                std::fs::read_to_string(p).unwrap().trim().parse().unwrap()
            };
            assert_eq!(got.recv, want.min(cap("rmem_max")));
            assert_eq!(got.send, want.min(cap("wmem_max")));
        }
        // Asking for less than the socket has leaves it as it is.
        assert_eq!(size_udp_socket(&u, 64 << 10), got);
    }
    use crate::tls::{gen_keys, GenKeysOptions, TlsFiles};
    use crate::{Pool, PoolConfig, Server};
    use mux::frame::QUIC_HELLO_LEN;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn files(dir: &std::path::Path, side: &str) -> TlsFiles {
        TlsFiles {
            cert: dir.join(format!("{side}.pem")),
            key: dir.join(format!("{side}.key")),
            ca: vec![dir.join("ca.pem")],
        }
    }

    #[test]
    fn first_bytes_go_before_the_rest_of_pages_within_the_head_window_and_bulk_below() {
        let epoch = Instant::now();
        let ms = Duration::from_millis;
        let head = ms(520);
        let p = |at, tier| stream_priority(epoch, at, tier, head);
        for tier in [Tier::First, Tier::Page] {
            // Streams ranked 0..1000 ms after the connection came up: the older, the higher.
            let order: Vec<i32> = (0..1000).map(|i| p(epoch + ms(i), tier)).collect();
            assert!(order.windows(2).all(|w| w[0] > w[1]), "oldest first");
        }
        // A page that began before the connection (up to the largest age) ranks above it.
        let before = epoch - mux::policy::MAX_PAGE_AGE;
        assert!(p(before, Tier::Page) > p(epoch, Tier::Page));
        // An older page's rest goes after the first bytes of pages that began within the
        // head window after it, before those of pages that began later; at its deadline,
        // first bytes before the rest.
        let old = epoch + ms(10_000);
        assert!(p(old, Tier::First) > p(old, Tier::Page));
        for later in [0, 1, 100, 519] {
            assert!(
                p(old + ms(later), Tier::First) > p(old, Tier::Page),
                "{later}"
            );
        }
        assert!(
            p(old + ms(520), Tier::First) > p(old, Tier::Page),
            "one deadline"
        );
        for later in [521, 600, 5_000] {
            assert!(
                p(old + ms(later), Tier::First) < p(old, Tier::Page),
                "{later}"
            );
        }
        // A zero window is strict page order: an older page's rest before any newer byte.
        let strict = |at, tier| stream_priority(epoch, at, tier, Duration::ZERO);
        assert!(strict(old, Tier::Page) > strict(old + ms(1), Tier::First));
        assert!(strict(old, Tier::First) > strict(old, Tier::Page));
        let ranks = [
            before,
            epoch,
            epoch + ms(999),
            epoch + ms(PAGE_SPAN - 1),
            epoch + ms(PAGE_SPAN),
            epoch + ms(5 * PAGE_SPAN + 7),
        ];
        // Whatever their ranks, every interactive stream above the bulk ones.
        for &at in &ranks {
            for tier in [Tier::First, Tier::Page] {
                assert!(p(at, tier) > BULK_PRIORITY, "{at:?}");
                assert!(p(at, tier) >= 0, "{at:?}");
            }
            assert_eq!(p(at, Tier::Bulk), BULK_PRIORITY);
        }
        // A rank older than the largest age accepted cannot happen (`mux::policy::page_rank` bounds it);
        // it would rank as the oldest possible, not wrap.
        assert_eq!(p(before - ms(5), Tier::First), p(before, Tier::First));
        let at = epoch + ms(10_000);
        assert_eq!(
            mux::policy::page_rank(at, Duration::from_secs(3600)),
            at - mux::policy::MAX_PAGE_AGE
        );
        assert_eq!(mux::policy::page_rank(at, ms(1500)), at - ms(1500));
    }

    /// An authenticated QUIC connection from loopback address `from` that never sends its
    /// HELLO; `Err` if the remote refused it.
    async fn silent_from(
        from: &str,
        to: SocketAddr,
        tls: &TlsClient,
    ) -> Result<(Endpoint, Connection), quinn::ConnectionError> {
        let endpoint = Endpoint::client(format!("{from}:0").parse().unwrap()).unwrap();
        let (rustls, name) = tls.current();
        let crypto = QuicClientConfig::try_from(rustls).unwrap();
        let cc = quinn::ClientConfig::new(Arc::new(crypto));
        let conn = endpoint
            .connect_with(cc, to, &name.to_str())
            .unwrap()
            .await?;
        Ok((endpoint, conn))
    }

    /// A remote serves an edge of a release before features (a 9-byte HELLO, headers without
    /// a page age) and tells it its own features in a reply such an edge reads the first byte
    /// of; a header with a page age is served as well.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_remote_serves_edges_with_and_without_page_ages() {
        let dir = tempfile::tempdir().unwrap();
        gen_keys(dir.path(), &GenKeysOptions::default()).unwrap();
        let tls = Arc::new(TlsServer::new(files(dir.path(), "remote")).unwrap());
        let server = Server::bind_quic(
            "127.0.0.1:0".parse().unwrap(),
            ServerConfig::default(),
            tls,
            QuicOptions::default(),
        )
        .await
        .unwrap();
        let client = TlsClient::new(files(dir.path(), "edge"), "longhaul-remote").unwrap();
        let (_endpoint, conn) = silent_from("127.0.0.1", server.local_addr(), &client)
            .await
            .unwrap();
        let mut ctl = conn.open_uni().await.unwrap();
        let old = QuicHello {
            version: QUIC_MAPPING_VERSION,
            session: 7,
            features: None,
        }
        .encode();
        assert_eq!(old.len(), QUIC_HELLO_LEN);
        ctl.write_all(&old).await.unwrap();
        ctl.finish().unwrap();
        let mut rs = conn.accept_uni().await.unwrap();
        let reply = rs.read_to_end(QUIC_CONTROL_MAX).await.unwrap();
        assert_eq!(reply[0], QUIC_MAPPING_VERSION, "what an older edge reads");
        let reply = QuicHelloReply::decode(&reply).unwrap();
        assert!(reply.features.unwrap().contains(Features::PAGE_AGE));
        for (id, age) in [(1, None), (2, Some(1500))] {
            let (mut send, mut recv) = conn.open_bi().await.unwrap();
            let head = encode_header(Kind::Http, id, "origin.test:80", age, b"ping");
            send.write_all(&head).await.unwrap();
            send.finish().unwrap();
            let mut inc = tokio::time::timeout(Duration::from_secs(5), server.accept())
                .await
                .unwrap()
                .unwrap();
            assert_eq!((inc.id, inc.target.as_str()), (id, "origin.test:80"));
            let mut got = Vec::new();
            inc.stream.read_to_end(&mut got).await.unwrap();
            assert_eq!(got, b"ping");
            inc.stream.write_all(b"pong").await.unwrap();
            inc.stream.shutdown().await.unwrap();
            assert_eq!(recv.read_to_end(64).await.unwrap(), b"pong");
        }
    }

    /// Authenticated peers that never send their HELLO hold handshake slots, at most
    /// `max_handshakes_per_source` from one address, and the edge's own connection still comes
    /// up; with half the slots taken it does so through a Retry.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn silent_peers_cannot_take_every_quic_handshake_slot() {
        let dir = tempfile::tempdir().unwrap();
        gen_keys(dir.path(), &GenKeysOptions::default()).unwrap();
        let cfg = ServerConfig {
            max_handshakes: 4,
            max_handshakes_per_source: 2,
            mux: mux::Config {
                handshake_timeout: Duration::from_secs(30),
                ..mux::Config::default()
            },
            ..ServerConfig::default()
        };
        let tls = Arc::new(TlsServer::new(files(dir.path(), "remote")).unwrap());
        let server = Server::bind_quic(
            "127.0.0.1:0".parse().unwrap(),
            cfg,
            tls,
            QuicOptions::default(),
        )
        .await
        .unwrap();
        let addr = server.local_addr();
        let client =
            Arc::new(TlsClient::new(files(dir.path(), "edge"), "longhaul-remote").unwrap());
        let mut silent = Vec::new();
        for _ in 0..2 {
            silent.push(silent_from("127.0.0.2", addr, &client).await.unwrap());
        }
        let refused = silent_from("127.0.0.2", addr, &client).await.unwrap_err();
        assert!(
            matches!(refused, quinn::ConnectionError::ConnectionClosed(_)),
            "{refused}"
        );
        let a = server.admission();
        assert_eq!((a.handshakes_pending, a.refused_per_source), (2, 1));
        let pool = Pool::start_quic(
            PoolConfig {
                remote: addr.to_string(),
                connections: 1,
                ..PoolConfig::default()
            },
            client,
            QuicOptions::default(),
        )
        .unwrap();
        assert!(pool.ready(Duration::from_secs(5)).await);
        assert_eq!(server.stats().len(), 1);
        // The silent connections are still open, waiting for their handshake timeout.
        for (_, c) in &silent {
            assert!(c.close_reason().is_none());
        }
        pool.close(Duration::from_millis(100)).await;
    }
}
