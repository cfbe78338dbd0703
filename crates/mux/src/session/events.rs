//! What a [`Session`] reports: events for the driver and application, the
//! outcomes and errors of stream operations, and snapshots for statistics.
//!
//! What it does NOT do: decide anything; the other session modules push events.

use std::time::Duration;

use super::{ConnId, ConnState, Session};
use crate::error::ErrorCode;
use crate::frame::Kind;

/// Something the driver or application must react to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// The peer's HELLO arrived on this connection.
    ConnectionUp(ConnId),
    /// The connection is being closed (by us with `code`, or by the peer's GOAWAY);
    /// its streams were reset. The driver flushes and closes it.
    ConnectionClosing {
        /// Which lane.
        conn: ConnId,
        /// Wire code sent or received.
        code: ErrorCode,
        /// Human-readable cause, naming the side that misbehaved.
        reason: String,
    },
    /// The peer opened a stream (remote side).
    Incoming {
        /// Pool-wide stream id.
        id: u64,
        /// What it carries.
        kind: Kind,
        /// "host:port".
        target: String,
    },
    /// Bytes or the FIN can be read from the stream.
    Readable(u64),
    /// The stream got credit: more bytes can be written.
    Writable(u64),
    /// The stream was reset (by the peer, or locally by a connection loss or an error).
    Reset {
        /// Stream id.
        id: u64,
        /// Why.
        code: ErrorCode,
        /// The request may be sent again (nothing of the reply arrived, or the
        /// peer refused the stream unprocessed).
        retryable: bool,
    },
    /// The stream was forgotten (both directions ended or it was reset, and the
    /// application released it): it no longer counts against the stream limit,
    /// so an open refused with [`OpenError::StreamLimit`] may now succeed.
    StreamFreed(u64),
    /// The peer is draining: no new streams (edge side stops opening).
    GoAway {
        /// Lane it arrived on.
        conn: ConnId,
        /// Highest stream id the peer accepted.
        last_stream: u64,
    },
}

/// Outcome of [`Session::read`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Read {
    /// This many bytes were copied.
    Data(usize),
    /// The peer's direction ended; nothing more will arrive.
    Fin,
    /// Nothing to read now; wait for [`Event::Readable`].
    Blocked,
}

/// Why a stream operation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StreamError {
    /// No such stream (never opened, or already released).
    #[error("no stream {0}")]
    Unknown(u64),
    /// The stream was reset.
    #[error("stream reset: {code}")]
    Reset {
        /// Why.
        code: ErrorCode,
        /// Safe to retry the request.
        retryable: bool,
    },
    /// Our direction was already finished.
    #[error("write after FIN")]
    Finished,
}

/// Why [`Session::open`] failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OpenError {
    /// No connection has completed its HELLO.
    #[error("no pool connection is up")]
    Unavailable,
    /// We or the peer are draining (GOAWAY).
    #[error("the session is draining")]
    Draining,
    /// As many streams as the stream limit allows are open: the smaller of
    /// the peer's `max_streams` (its HELLO) and our own `max_streams` (our
    /// buffer budget, PROTOCOL.md §4.4). Transient: an open may succeed after
    /// the next [`Event::StreamFreed`].
    #[error("stream limit reached: {limit} streams open ({which}'s max_streams)")]
    StreamLimit {
        /// The limit in force.
        limit: u32,
        /// Whose `max_streams` it is: "peer" or "local".
        which: &'static str,
    },
    /// A limit would be exceeded (which one is named).
    #[error("limit reached: {0}")]
    Limit(&'static str),
    /// The arguments are unusable (reason named).
    #[error("invalid open: {0}")]
    Invalid(&'static str),
}

/// A snapshot of one lane for stats and tests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnSnapshot {
    /// Lane id.
    pub id: ConnId,
    /// Lifecycle state.
    pub state: ConnState,
    /// Bytes queued in the process for this lane (control frames + streams' sendable bytes).
    pub queued: u64,
    /// Kernel send queue as last reported by the driver.
    pub kernel: u64,
    /// Streams with a direction bound here.
    pub streams: u32,
    /// Last PING round-trip time.
    pub rtt: Option<Duration>,
    /// Latest path estimate the driver reported ([`Session::set_path_estimate`]).
    pub path: Option<crate::PathEstimate>,
    /// Connection credit (PROTOCOL.md §4.1) the peer has used here and we have not returned:
    /// bytes received and not yet read, plus read ones whose WINDOW is not yet due. At our
    /// `conn_window` the peer sends nothing more on this connection. `None` without
    /// connection credit.
    pub credit_held: Option<u64>,
    /// Connection credit the peer granted us here that is left; `None` without connection
    /// credit.
    pub send_credit: Option<u64>,
}

/// A snapshot of one stream for stats and tests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamSnapshot {
    /// Lane our direction is bound to.
    pub send_conn: Option<ConnId>,
    /// Lane the peer's direction arrives on.
    pub recv_conn: Option<ConnId>,
    /// Bytes written by the application and not yet framed.
    pub send_buffered: u64,
    /// Bytes received and not yet read.
    pub recv_buffered: u64,
    /// The stream's receive window now (it grows from `Config::initial_stream_window` while
    /// the reader keeps up, up to `Config::stream_window`).
    pub recv_window: u64,
    /// Memory the receive buffer holds, bytes (its chunks' capacity and queue slots): about
    /// `recv_buffered` while bytes wait, a few hundred bytes once drained, 0 after a reset.
    pub recv_memory: u64,
    /// Bytes of our direction framed so far.
    pub bytes_sent: u64,
    /// Bytes of the peer's direction received so far.
    pub bytes_received: u64,
    /// Reset code, if reset.
    pub reset: Option<ErrorCode>,
}

impl Session {
    /// Queues a readiness event unless the same one is already last in line.
    pub(super) fn push_coalesced(&mut self, ev: Event) {
        if self.events.back() != Some(&ev) {
            self.events.push_back(ev);
        }
    }
}
