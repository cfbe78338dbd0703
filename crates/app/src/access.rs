//! The access log of both proxies: one record per request, tunnel or stream, written as one
//! `tracing` event (target `access`) and counted in the metrics.
//!
//! What it does: [`Access::new`] starts a record with what every record has (who, method,
//! target, when it started) and neutral values for the rest (status 0, no bytes, outcome `ok`);
//! callers set what they know with struct update syntax, [`Access::failed`] fills in an
//! error's status, tag and reason, and [`Access::log`] writes it.
//!
//! What it does NOT do: write files (the log subscriber decides where events go), or decide
//! outcomes: the proxies do.

use std::borrow::Cow;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use http1::reply::ErrorTag;

/// Who a record is about: a client of the edge, or a stream the remote served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Peer {
    /// The edge's client address (logged as `client`).
    Client(SocketAddr),
    /// A stream the remote served (logged as `stream` and `pool_conn`).
    Stream(StreamRef),
}

/// A stream of the remote's pool: its pool-wide id and the pool connection it arrived on (the
/// `conn` of that connection's "pool connection up" log line and of its metrics), so that a
/// slow or failed stream can be tied to one connection and, through that line's peer address,
/// to the edge's end of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamRef {
    /// Pool-wide stream id.
    pub id: u64,
    /// The pool connection, when the transport knows it.
    pub conn: Option<u64>,
}

/// One access-log record.
#[derive(Debug, Clone)]
pub struct Access<'a> {
    /// Who.
    pub peer: Peer,
    /// Method (`CONNECT` for CONNECT tunnels, `TUNNEL` for intercepted non-HTTP connections and
    /// tunnel streams, `SOCKS5` for the edge's SOCKS5 clients, `-` before a request was read).
    pub method: &'a str,
    /// Target as requested.
    pub target: &'a str,
    /// Status sent (0 when none could be sent, and for tunnels and resets on the remote).
    pub status: u16,
    /// Request body bytes (tunnels: bytes towards the target).
    pub bytes_up: u64,
    /// Reply body bytes (tunnels: bytes from the target).
    pub bytes_down: u64,
    /// Time from the start of the request to the end of the record.
    pub duration: Duration,
    /// Time to first byte: to the reply head (tunnels on the edge: to the first byte from the
    /// far side). `None` when there was none.
    pub ttfb: Option<Duration>,
    /// `ok`, an error tag, or another outcome (`reply-cut`, `tunnel-failed`, ...).
    pub outcome: &'a str,
    /// Extra detail (the error's reason), may be empty.
    pub detail: Cow<'a, str>,
}

impl<'a> Access<'a> {
    /// A record of `method` `target` from `peer` that started at `started` and ends now:
    /// status 0, no bytes, no first byte, outcome `ok`, no detail.
    pub fn new(peer: Peer, method: &'a str, target: &'a str, started: Instant) -> Access<'a> {
        Access {
            peer,
            method,
            target,
            status: 0,
            bytes_up: 0,
            bytes_down: 0,
            duration: started.elapsed(),
            ttfb: None,
            outcome: "ok",
            detail: Cow::Borrowed(""),
        }
    }

    /// The record of a failure answered with a synthetic reply: the tag's status, the tag as
    /// the outcome, `reason` as the detail.
    pub fn failed(self, tag: ErrorTag, reason: String) -> Access<'a> {
        Access {
            status: tag.status(),
            outcome: tag.as_str(),
            detail: Cow::Owned(reason),
            ..self
        }
    }

    /// The record of a tunnel that ended after `up` bytes towards the target and `down` bytes
    /// from it: outcome `ok`, or `tunnel-failed` with `err` as the detail.
    pub fn tunnel_ended(self, up: u64, down: u64, err: Option<String>) -> Access<'a> {
        Access {
            bytes_up: up,
            bytes_down: down,
            outcome: if err.is_some() { "tunnel-failed" } else { "ok" },
            detail: err.map(Cow::Owned).unwrap_or_default(),
            ..self
        }
    }

    /// The record of a tunnel on the remote that ended after `up` bytes towards the target and
    /// `down` bytes from it, `err` the failure if any: as [`Access::tunnel_ended`], except that
    /// a stream the edge cancelled (code `CANCEL`: its client closed the tunnel or went away,
    /// or the edge failed and logged why) is outcome `edge-cancelled`, no failure here.
    pub fn far_tunnel_ended(self, up: u64, down: u64, err: Option<std::io::Error>) -> Access<'a> {
        let cancelled = err
            .as_ref()
            .and_then(pool::stream_error)
            .is_some_and(|e| e.code == mux::ErrorCode::CANCEL);
        let ended = self.tunnel_ended(up, down, err.map(|e| e.to_string()));
        if cancelled {
            Access {
                outcome: "edge-cancelled",
                ..ended
            }
        } else {
            ended
        }
    }

    /// Whether the record is of a failure (counted in `longhaul_errors_total` by its outcome):
    /// any outcome but `ok` and the ends a client or the edge chose, `client-closed` and
    /// `edge-cancelled`.
    pub fn is_failure(&self) -> bool {
        !matches!(self.outcome, "ok" | "client-closed" | "edge-cancelled")
    }

    /// What the record is about (for metrics): an HTTP request, a tunnel (CONNECT,
    /// intercepted), or a SOCKS5 connection.
    fn kind(&self) -> &'static str {
        match self.method {
            "CONNECT" | "TUNNEL" => "tunnel",
            "SOCKS5" => "socks",
            _ => "http",
        }
    }

    /// Writes the access-log line (tracing target `access`) and counts it in the metrics.
    pub fn log(&self) {
        let ms = self.duration.as_millis() as u64;
        let ttfb_ms = self.ttfb.map(|t| t.as_millis() as u64);
        let detail: &str = &self.detail;
        // One event shape for both sides; only the name of the peer field differs.
        macro_rules! access_event {
            ($($peer:tt)+) => {
                tracing::info!(
                    target: "access",
                    $($peer)+,
                    method = self.method,
                    target = self.target,
                    status = self.status,
                    bytes_up = self.bytes_up,
                    bytes_down = self.bytes_down,
                    ms,
                    ttfb_ms,
                    outcome = self.outcome,
                    detail,
                )
            };
        }
        match self.peer {
            Peer::Client(client) => access_event!(%client),
            Peer::Stream(StreamRef {
                id: stream,
                conn: pool_conn,
            }) => {
                access_event!(stream, pool_conn)
            }
        }
        crate::metrics::record_access(
            self.kind(),
            self.status,
            self.bytes_up,
            self.bytes_down,
            self.is_failure().then_some(self.outcome),
            self.ttfb,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_record_is_neutral_and_a_failure_carries_its_tag() {
        let peer = Peer::Stream(StreamRef {
            id: 7,
            conn: Some(3),
        });
        let a = Access::new(peer, "GET", "a.test:80", Instant::now());
        assert_eq!((a.status, a.outcome, &*a.detail), (0, "ok", ""));
        assert_eq!((a.bytes_up, a.bytes_down, a.ttfb), (0, 0, None));
        let f = a.failed(ErrorTag::OriginTimeout, "slow".into());
        assert_eq!(
            (f.status, f.outcome, &*f.detail),
            (504, "origin-timeout", "slow")
        );
        assert_eq!(f.kind(), "http");
        let t = Access::new(peer, "CONNECT", "a.test:443", Instant::now());
        assert_eq!(t.kind(), "tunnel");
        assert_eq!(
            Access::new(peer, "SOCKS5", "-", Instant::now()).kind(),
            "socks"
        );
        let t = t.tunnel_ended(3, 4, Some("reset".into()));
        assert_eq!((t.bytes_up, t.bytes_down), (3, 4));
        assert_eq!((t.outcome, &*t.detail), ("tunnel-failed", "reset"));
    }

    #[test]
    fn a_far_tunnel_the_edge_cancelled_is_no_failure_and_others_are() {
        let peer = Peer::Stream(StreamRef { id: 9, conn: None });
        let stream_err = |code| {
            std::io::Error::new(
                std::io::ErrorKind::ConnectionAborted,
                pool::StreamError {
                    code,
                    retryable: false,
                    reason: "stream 9: cancelled".into(),
                },
            )
        };
        let t = || Access::new(peer, "TUNNEL", "a.test:443", Instant::now());
        let c = t().far_tunnel_ended(5, 6, Some(stream_err(mux::ErrorCode::CANCEL)));
        assert_eq!((c.bytes_up, c.bytes_down), (5, 6));
        assert_eq!(c.outcome, "edge-cancelled");
        assert_eq!(&*c.detail, "stream 9: cancelled (CANCEL)");
        assert!(!c.is_failure());
        let lost = t().far_tunnel_ended(5, 6, Some(stream_err(mux::ErrorCode::CONNECTION_LOST)));
        assert_eq!(lost.outcome, "tunnel-failed");
        assert!(lost.is_failure());
        let origin = t().far_tunnel_ended(0, 0, Some(std::io::ErrorKind::ConnectionReset.into()));
        assert_eq!(origin.outcome, "tunnel-failed");
        assert_eq!(t().far_tunnel_ended(1, 2, None).outcome, "ok");
        assert!(!t().is_failure());
        let closed = Access {
            outcome: "client-closed",
            ..t()
        };
        assert!(!closed.is_failure());
    }
}
