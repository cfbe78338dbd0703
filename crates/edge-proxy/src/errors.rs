//! The one place where the edge maps failures to synthetic HTTP responses, and writes the
//! access log.
//!
//! Every client-visible error is an [`EdgeError`]: it knows its status code, a short tag (sent
//! in `X-Longhaul-Error` and logged) and a one-line reason (the response body). Responses always
//! close the client connection, because after an error the framing of what follows on it cannot
//! be trusted.
//!
//! It does NOT decide when an error happens: [`crate::client`] does.

use std::net::SocketAddr;
use std::time::Duration;

use crate::transport::{FarCode, FarFailure, OpenCause, OpenError};
use http1::reply::synthetic_response;
use http1::HeadError;

/// A failure the client is told about with a synthetic response.
#[derive(Debug, Clone, thiserror::Error)]
pub enum EdgeError {
    /// The request is not valid HTTP/1.1 or not acceptable to a proxy.
    #[error("bad request: {0}")]
    BadRequest(String),
    /// The header section is over the configured limit.
    #[error("request header section too large: {0}")]
    HeaderTooLarge(String),
    /// The client did not send a whole request head within the header-read timeout (slowloris).
    #[error("request head not received in time: {0}")]
    HeaderTimeout(String),
    /// The client's address is not in an allowed network.
    #[error("client {0} is not allowed to use this proxy")]
    ForbiddenClient(std::net::IpAddr),
    /// The target is refused by policy (here or on the far side).
    #[error("target refused: {0}")]
    ForbiddenTarget(String),
    /// No pool connection to the remote proxy could carry the request.
    #[error("remote proxy unavailable: {0}")]
    Unavailable(String),
    /// The pool is up but every connection stayed at its stream limit for the whole bounded
    /// wait (or too many requests already waited for a stream slot): overload, retry later.
    #[error("pool busy: {0}")]
    PoolBusy(String),
    /// The edge already serves `max_client_connections` clients; this connection is answered
    /// and closed at once.
    #[error("too many connections: {0}")]
    TooManyConnections(String),
    /// The far side could not resolve the target.
    #[error("DNS lookup failed on the far side: {0}")]
    DnsFailed(String),
    /// The far side could not connect to the target.
    #[error("connection to origin failed: {0}")]
    ConnectFailed(String),
    /// The origin did not answer in time.
    #[error("origin timed out: {0}")]
    Timeout(String),
    /// The reply from the far side was broken or missing.
    #[error("bad reply from the remote proxy: {0}")]
    BadReply(String),
}

impl EdgeError {
    /// The HTTP status code of the synthetic response.
    pub fn status(&self) -> u16 {
        match self {
            EdgeError::BadRequest(_) => 400,
            EdgeError::HeaderTooLarge(_) => 431,
            EdgeError::HeaderTimeout(_) => 408,
            EdgeError::ForbiddenClient(_) | EdgeError::ForbiddenTarget(_) => 403,
            EdgeError::Unavailable(_)
            | EdgeError::DnsFailed(_)
            | EdgeError::ConnectFailed(_)
            | EdgeError::BadReply(_) => 502,
            EdgeError::PoolBusy(_) | EdgeError::TooManyConnections(_) => 503,
            EdgeError::Timeout(_) => 504,
        }
    }

    /// Short machine-readable tag.
    pub fn tag(&self) -> &'static str {
        match self {
            EdgeError::BadRequest(_) => "bad-request",
            EdgeError::HeaderTooLarge(_) => "header-too-large",
            EdgeError::HeaderTimeout(_) => "header-timeout",
            EdgeError::ForbiddenClient(_) => "forbidden-client",
            EdgeError::ForbiddenTarget(_) => "forbidden-target",
            EdgeError::Unavailable(_) => "remote-unavailable",
            EdgeError::PoolBusy(_) => "pool-busy",
            EdgeError::TooManyConnections(_) => "too-many-connections",
            EdgeError::DnsFailed(_) => "dns-failed",
            EdgeError::ConnectFailed(_) => "connect-failed",
            EdgeError::Timeout(_) => "origin-timeout",
            EdgeError::BadReply(_) => "bad-reply",
        }
    }

    /// The complete synthetic response (head and body; `Connection: close`).
    pub fn response(&self) -> Vec<u8> {
        synthetic_response(self.status(), self.tag(), &self.to_string())
    }

    /// The error for a stream that could not be opened: 503 `pool-busy` when the pool stayed
    /// at its stream limit, 502 `remote-unavailable` otherwise.
    pub fn from_open(e: OpenError) -> EdgeError {
        match e.cause {
            OpenCause::StreamLimit => EdgeError::PoolBusy(e.reason),
            OpenCause::Unavailable => EdgeError::Unavailable(e.reason),
        }
    }

    /// The error for a far-side failure of a stream.
    pub fn from_far(f: &FarFailure) -> EdgeError {
        let r = f.reason.clone();
        match f.code {
            FarCode::DnsFailed => EdgeError::DnsFailed(r),
            FarCode::ConnectFailed => EdgeError::ConnectFailed(r),
            FarCode::Timeout => EdgeError::Timeout(r),
            FarCode::Forbidden => EdgeError::ForbiddenTarget(r),
            FarCode::ConnectionLost | FarCode::Refused => EdgeError::Unavailable(r),
            FarCode::Other => EdgeError::BadReply(r),
        }
    }
}

impl From<HeadError> for EdgeError {
    fn from(e: HeadError) -> EdgeError {
        match e {
            HeadError::TooLarge(_) => EdgeError::HeaderTooLarge(e.to_string()),
            other => EdgeError::BadRequest(other.to_string()),
        }
    }
}

/// One access-log record: one per request or tunnel.
#[derive(Debug)]
pub struct Access<'a> {
    /// Client address.
    pub client: SocketAddr,
    /// Method (`CONNECT` for tunnels, `TUNNEL` for intercepted non-HTTP connections).
    pub method: &'a str,
    /// Target as requested.
    pub target: &'a str,
    /// Status sent to the client (0 when none could be sent).
    pub status: u16,
    /// Body bytes sent to the client (for tunnels: bytes client→far / far→client).
    pub bytes_up: u64,
    /// Body bytes received from the far side and sent to the client.
    pub bytes_down: u64,
    /// Time from the request head to the end of the reply.
    pub duration: Duration,
    /// Time to first byte: from the request head to the reply head written to the client; for
    /// tunnels, to the first byte from the far side. `None` when there was none.
    pub ttfb: Option<Duration>,
    /// `ok`, or the error tag.
    pub outcome: &'a str,
    /// Extra detail (error reason), may be empty.
    pub detail: &'a str,
}

/// Writes the access-log line (tracing target `access`).
pub fn log_access(a: &Access<'_>) {
    tracing::info!(
        target: "access",
        client = %a.client,
        method = a.method,
        target = a.target,
        status = a.status,
        bytes_up = a.bytes_up,
        bytes_down = a.bytes_down,
        ms = a.duration.as_millis() as u64,
        ttfb_ms = a.ttfb.map(|t| t.as_millis() as u64),
        outcome = a.outcome,
        detail = a.detail,
    );
    let kind = match a.method {
        "CONNECT" | "TUNNEL" => "tunnel",
        _ => "http",
    };
    app::metrics::record_access(kind, a.status, a.bytes_up, a.bytes_down, a.outcome, a.ttfb);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_follow_the_contract() {
        let cases: Vec<(EdgeError, u16)> = vec![
            (EdgeError::BadRequest("x".into()), 400),
            (EdgeError::HeaderTooLarge("x".into()), 431),
            (EdgeError::ForbiddenClient([10, 0, 0, 1].into()), 403),
            (EdgeError::ForbiddenTarget("x".into()), 403),
            (EdgeError::HeaderTimeout("x".into()), 408),
            (EdgeError::DnsFailed("x".into()), 502),
            (EdgeError::ConnectFailed("x".into()), 502),
            (EdgeError::Timeout("x".into()), 504),
            (EdgeError::Unavailable("x".into()), 502),
            (EdgeError::PoolBusy("x".into()), 503),
            (EdgeError::TooManyConnections("x".into()), 503),
        ];
        for (e, s) in cases {
            assert_eq!(e.status(), s);
            let r = String::from_utf8(e.response()).unwrap();
            assert!(r.starts_with(&format!("HTTP/1.1 {s} ")));
            let (head, body) = r.split_once("\r\n\r\n").unwrap();
            assert!(head.contains(&format!("Content-Length: {}", body.len())));
            assert!(body.contains(e.tag()) || body.contains(&e.to_string()));
        }
    }

    #[test]
    fn open_failures_map_by_cause() {
        let e = EdgeError::from_open(OpenError::stream_limit(
            "every pool connection is at its stream limit; no stream slot freed within 5000 ms",
        ));
        assert_eq!((e.status(), e.tag()), (503, "pool-busy"));
        let r = String::from_utf8(e.response()).unwrap();
        assert!(r.starts_with("HTTP/1.1 503 Service Unavailable\r\n"), "{r}");
        assert!(r.contains("X-Longhaul-Error: pool-busy\r\n"), "{r}");
        assert!(r.ends_with("503 Service Unavailable: pool busy: every pool connection is at its stream limit; no stream slot freed within 5000 ms\n"), "{r}");
        let e = EdgeError::from_open(OpenError::unavailable("no pool connection is up"));
        assert_eq!((e.status(), e.tag()), (502, "remote-unavailable"));
    }
}
