//! The glue between a binary's configuration and the pool crate, for both binaries: the kind
//! of a stream as the proxies see it, the protocol limits derived from `[link]`, the scheduling
//! policy and the pool connections' socket options.
//!
//! What it does NOT do: start pools or servers (each proxy does, with its own configuration),
//! or map wire error codes to failures (each side maps the codes it receives).

use std::time::Duration;

use pool::{Kind, SocketOptions};

use crate::config::{CarrierName, LinkConfig, PolicyName};

/// What a stream carries (mirrors `mux::Kind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamKind {
    /// One HTTP/1.1 request (edge to remote) and exactly one response (remote to edge), then
    /// FIN each way. A `CONNECT` request on such a stream turns it into a tunnel after a `200`,
    /// a request with a forwarded upgrade after a `101`.
    Http,
    /// Raw bytes both ways to `target`.
    Tunnel,
}

impl StreamKind {
    /// The stream kind of an incoming mux stream (anything but a tunnel carries HTTP).
    pub fn from_mux(k: Kind) -> StreamKind {
        match k {
            Kind::Tunnel => StreamKind::Tunnel,
            _ => StreamKind::Http,
        }
    }

    /// The mux stream kind.
    pub fn mux(self) -> Kind {
        match self {
            StreamKind::Http => Kind::Http,
            StreamKind::Tunnel => Kind::Tunnel,
        }
    }

    /// The label of the kind in metrics and logs (`http`, `tunnel`).
    pub fn label(self) -> &'static str {
        match self {
            StreamKind::Http => "http",
            StreamKind::Tunnel => "tunnel",
        }
    }
}

/// Protocol limits for the configured link (windows = bandwidth-delay product).
pub fn mux_config(link: &LinkConfig) -> mux::Config {
    mux::Config::for_link_bdps(
        Duration::from_millis(u64::from(link.rtt_ms)),
        u64::from(link.rate_mbit) * 1_000_000,
        link.stream_window_bdp,
    )
}

/// Scheduling policy.
pub fn policy(p: PolicyName) -> mux::Policy {
    match p {
        PolicyName::LeastOutstanding => mux::Policy::LeastOutstanding,
        PolicyName::RoundRobin => mux::Policy::RoundRobin,
        PolicyName::FewestStreams => mux::Policy::FewestStreams,
        PolicyName::ExpectedCompletion => mux::Policy::ExpectedCompletion,
        PolicyName::Pack => mux::Policy::Pack,
    }
}

/// Socket options with the configured congestion control; `rate` is a QUIC controller, so a
/// TCP connection of such a pool uses [`crate::config::TCP_FALLBACK_CONGESTION`].
pub fn socket_options(congestion: &str) -> SocketOptions {
    let cc = if congestion == crate::config::RATE_CONGESTION {
        crate::config::TCP_FALLBACK_CONGESTION
    } else {
        congestion
    };
    SocketOptions {
        congestion: Some(cc.to_string()),
        ..SocketOptions::default()
    }
}

/// Logs the controllers a pool with `carrier` (as in force) and `congestion` runs, and, for
/// `rate`, the rate it paces at: a `link.rate_mbit` left at its default on a faster link caps
/// the pool there.
pub fn log_congestion(carrier: CarrierName, congestion: &str, link: &LinkConfig) {
    use crate::config::{RATE_CONGESTION, TCP_FALLBACK_CONGESTION};
    match (carrier, congestion == RATE_CONGESTION) {
        (CarrierName::Auto, true) => tracing::info!(
            rate_mbit = link.rate_mbit,
            tcp = TCP_FALLBACK_CONGESTION,
            "QUIC connections paced at link.rate_mbit, shared among the busy ones (rate); the \
             TCP+TLS fallback uses the kernel's {TCP_FALLBACK_CONGESTION}"
        ),
        (CarrierName::Quic, true) => tracing::info!(
            rate_mbit = link.rate_mbit,
            "QUIC connections paced at link.rate_mbit, shared among the busy ones (rate)"
        ),
        (CarrierName::Tcp, true) => tracing::info!(
            tcp = TCP_FALLBACK_CONGESTION,
            "rate is a QUIC controller and this pool is TCP only: its connections use the \
             kernel's {TCP_FALLBACK_CONGESTION}"
        ),
        _ => tracing::info!(congestion, "pool congestion control"),
    }
}
