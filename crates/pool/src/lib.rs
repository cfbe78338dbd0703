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
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use bytes::Bytes;
//! use pool::{Kind, Pool, PoolConfig, Server, ServerConfig};
//! use tokio::io::{AsyncReadExt, AsyncWriteExt};
//!
//! // Remote side: accept streams and answer them.
//! let server = Server::bind("127.0.0.1:4443".parse()?, ServerConfig::default()).await?;
//! tokio::spawn(async move {
//!     while let Some(inc) = server.accept().await {
//!         let mut s = inc.stream; // inc.kind, inc.target say what to connect to
//!         tokio::spawn(async move {
//!             let _ = s.write_all(b"HTTP/1.1 204 No Content\r\n\r\n").await;
//!             let _ = s.shutdown().await;
//!         });
//!     }
//! });
//!
//! // Edge side: a warm pool; opening a stream costs no round trip.
//! let pool = Pool::start(PoolConfig { remote: "127.0.0.1:4443".into(), ..Default::default() });
//! pool.ready(Duration::from_secs(5)).await;
//! let req = Bytes::from_static(b"GET http://example.org/ HTTP/1.1\r\nHost: example.org\r\n\r\n");
//! let mut s = pool.open(Kind::Http, "example.org:80", req).await?;
//! s.shutdown().await?; // FIN: the request is complete
//! let mut reply = Vec::new();
//! match s.read_to_end(&mut reply).await {
//!     Ok(_) => {}
//!     Err(e) => match pool::stream_error(&e) {
//!         Some(se) if se.retryable => { /* nothing of the reply arrived: send it again */ }
//!         _ => return Err(e.into()),
//!     },
//! }
//! pool.close(Duration::from_secs(1)).await;
//! # Ok(())
//! # }
//! ```
//!
//! Mutually authenticated TLS 1.3 carriers live in [`tls`] ([`tls::TlsDialer`]
//! with [`Pool::start_with_dialer`], [`tls::TlsServer`] with [`Server::bind_with`]).
//!
//! The QUIC carrier lives in [`quic`] ([`Pool::start_quic`], [`Server::bind_quic`]):
//! one QUIC stream per mux stream, same handles and errors (docs/PROTOCOL.md §8).
//!
//! What it does NOT do: no protocol logic for TCP carriers (framing, credit,
//! scheduling live in `mux`), no HTTP.
#![forbid(unsafe_code)]

mod auto;
mod backoff;
mod carrier;
mod config;
mod driver;
mod edge;
pub mod fec;
mod gate;
pub mod parity;
mod queue;
pub mod quic;
pub mod rate;
pub mod select;
mod server;
mod shared;
mod stats;
mod stream;
pub mod tls;

pub use auto::Switches;
pub use backoff::Backoff;
pub use carrier::{
    tune, Carrier, DialFuture, Dialer, PlainTcp, Probe, TcpCarrier, TcpDialer, TcpProbe, Upgrader,
};
pub use config::*;
pub use edge::Pool;
pub use gate::AdmissionStats;
pub use mux::{ErrorCode, Kind, Policy};
pub use server::Server;
pub use stats::{ConnStats, LaneState, PoolLoad};
pub use stream::{MuxStream, ResetWatch};

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

fn stream_limit_reason(waited: std::time::Duration, queue_full: bool) -> String {
    if queue_full {
        "every pool connection is at its stream limit and the queue of opens waiting for a \
         stream slot is full"
            .to_string()
    } else {
        format!(
            "every pool connection is at its stream limit; no stream slot freed within {} ms",
            waited.as_millis()
        )
    }
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
    /// Every pool connection stayed at its stream limit (the peer's `max_streams`, or our own):
    /// no stream slot freed within [`PoolConfig::open_wait`], or [`PoolConfig::open_queue`]
    /// opens were already waiting. Transient: the pool itself is up.
    #[error("{}", stream_limit_reason(*.waited, *.queue_full))]
    StreamLimit {
        /// How long this open waited for a slot.
        waited: std::time::Duration,
        /// The wait queue was full, so this open did not wait.
        queue_full: bool,
    },
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
