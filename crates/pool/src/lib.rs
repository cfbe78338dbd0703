//! Tokio driver for the longhaul mux: a warm pool of tuned carrier
//! connections with least-outstanding-bytes scheduling.
//!
//! What it does: [`Pool`] (edge) dials N connections at start, keeps them warm
//! with PINGs and re-dials lost ones with jittered exponential backoff;
//! [`Server`] (remote) accepts them and groups them by the session id of their
//! HELLO. Both run one task per connection around the shared sans-IO
//! [`mux::Session`] and expose streams as [`MuxStream`] (`AsyncRead +
//! AsyncWrite`). TCP carriers are tuned with socket2 (`TCP_NODELAY`,
//! `TCP_CONGESTION` with a logged fallback, `TCP_NOTSENT_LOWAT`, keepalive,
//! `TCP_USER_TIMEOUT`; buffers left to autotuning unless configured) and report
//! `SIOCOUTQ` and `TCP_INFO` via [`netsys`].
//!
//! What it does NOT do: no protocol logic (framing, credit, scheduling live in
//! `mux`), no TLS or QUIC yet (they plug in through [`Carrier`] and [`Dialer`]),
//! no HTTP.
#![forbid(unsafe_code)]

mod backoff;
mod carrier;
mod config;
mod driver;
mod edge;
mod server;
mod shared;
mod stats;
mod stream;

pub use backoff::Backoff;
pub use carrier::{tune, Carrier, DialFuture, Dialer, Probe, TcpCarrier, TcpDialer, TcpProbe};
pub use config::*;
pub use edge::Pool;
pub use mux::{ErrorCode, Kind, Policy};
pub use server::Server;
pub use stats::{ConnStats, LaneState};
pub use stream::MuxStream;

/// A stream opened by an edge, as the server yields it. The OPEN's first
/// bytes are the first bytes read from `stream`.
#[derive(Debug)]
pub struct Incoming {
    /// Pool-wide stream id.
    pub id: u64,
    /// What the stream carries.
    pub kind: Kind,
    /// "host:port" to connect to.
    pub target: String,
    /// The stream.
    pub stream: MuxStream,
}

/// Why a stream failed: the inner error of the `io::Error` a [`MuxStream`]
/// read or write returns after a reset or a lost connection.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason} ({code}{})", if *.retryable { ", retryable" } else { "" })]
pub struct StreamError {
    /// Wire code.
    pub code: ErrorCode,
    /// The request may be sent again: nothing of the reply was delivered, or
    /// the peer refused the stream unprocessed.
    pub retryable: bool,
    /// What happened.
    pub reason: String,
}

/// The [`StreamError`] inside an `io::Error` from a [`MuxStream`], if any.
pub fn stream_error(e: &std::io::Error) -> Option<&StreamError> {
    e.get_ref()?.downcast_ref::<StreamError>()
}

/// Why [`Pool::open`] (or starting a pool) failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PoolError {
    /// No pool connection is up (all connecting or in backoff).
    #[error("no pool connection to the remote proxy is up")]
    Unavailable,
    /// The pool or the remote is draining (GOAWAY).
    #[error("the pool is draining")]
    Draining,
    /// A limit would be exceeded.
    #[error("pool limit reached: {0}")]
    Limit(&'static str),
    /// The arguments are unusable.
    #[error("invalid stream open: {0}")]
    Invalid(&'static str),
    /// The configuration is invalid.
    #[error("invalid pool configuration: {0}")]
    Config(String),
}
