//! The one place where the edge maps failures to synthetic HTTP responses and to SOCKS5 reply
//! codes, and answers HTTP clients ([`answer`]: write, close, log the access record).
//!
//! Every client-visible error is an [`EdgeError`]: it knows its status code, a short tag (sent
//! in `X-Longhaul-Error` and logged) and a one-line reason (the response body), and its SOCKS5
//! reply code ([`EdgeError::socks_reply`]) for a client of the SOCKS5 listener. Responses always
//! close the client connection, because after an error the framing of what follows on it cannot
//! be trusted.
//!
//! HTTP/2 clients of the HTTPS endpoint get the same response as HTTP/2 fields
//! ([`EdgeError::h2_response`]).
//!
//! It does NOT decide when an error happens: [`crate::client`] does.

use app::access::Access;
use tokio::io::{AsyncWrite, AsyncWriteExt};

use crate::socks::codec::Reply;
use crate::transport::{FarCode, FarFailure, OpenCause, OpenError};
use http1::reply::{synthetic_response, synthetic_response_to, ErrorTag};
use http1::HeadError;

/// A failure the client is told about with a synthetic response.
#[derive(Debug, Clone, thiserror::Error)]
pub enum EdgeError {
    /// The request is not valid HTTP/1.1 or not acceptable to a proxy.
    #[error("bad request: {0}")]
    BadRequest(String),
    /// The request uses a transfer coding the proxy does not implement (RFC 9112 §6.1).
    #[error("not implemented: {0}")]
    NotImplemented(String),
    /// The header section is over the configured limit.
    #[error("request header section too large: {0}")]
    HeaderTooLarge(String),
    /// The request line alone is over the head limit.
    #[error("request target too long: {0}")]
    UriTooLong(String),
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
    /// A SOCKS5 request with a command the edge does not carry (BIND, UDP ASSOCIATE).
    #[error("SOCKS5 command not supported: {0}")]
    SocksCommand(String),
    /// A SOCKS5 request with an address type RFC 1928 does not define.
    #[error("SOCKS5 address type not supported: {0}")]
    SocksAddressType(String),
}

impl EdgeError {
    /// The HTTP status code of the synthetic response (the tag's).
    pub fn status(&self) -> u16 {
        self.tag().status()
    }

    /// The error tag (`X-Longhaul-Error`, the access log's outcome, metrics).
    pub fn tag(&self) -> ErrorTag {
        match self {
            EdgeError::BadRequest(_) => ErrorTag::BadRequest,
            EdgeError::HeaderTooLarge(_) => ErrorTag::HeaderTooLarge,
            EdgeError::UriTooLong(_) => ErrorTag::UriTooLong,
            EdgeError::NotImplemented(_) => ErrorTag::NotImplemented,
            EdgeError::HeaderTimeout(_) => ErrorTag::HeaderTimeout,
            EdgeError::ForbiddenClient(_) => ErrorTag::ForbiddenClient,
            EdgeError::ForbiddenTarget(_) => ErrorTag::ForbiddenTarget,
            EdgeError::Unavailable(_) => ErrorTag::RemoteUnavailable,
            EdgeError::PoolBusy(_) => ErrorTag::PoolBusy,
            EdgeError::TooManyConnections(_) => ErrorTag::TooManyConnections,
            EdgeError::DnsFailed(_) => ErrorTag::DnsFailed,
            EdgeError::ConnectFailed(_) => ErrorTag::ConnectFailed,
            EdgeError::Timeout(_) => ErrorTag::OriginTimeout,
            EdgeError::BadReply(_) => ErrorTag::BadReply,
            EdgeError::SocksCommand(_) | EdgeError::SocksAddressType(_) => ErrorTag::NotImplemented,
        }
    }

    /// The SOCKS5 reply code (RFC 1928 §6) this failure is answered with: the SOCKS5
    /// counterpart of [`EdgeError::status`].
    ///
    /// The remote reports a failed connect as one outcome (`connect-failed`: refused,
    /// unreachable); it is answered "connection refused", the usual cause. A timeout is
    /// "TTL expired", as common SOCKS servers answer one.
    pub fn socks_reply(&self) -> Reply {
        match self {
            EdgeError::ForbiddenClient(_) | EdgeError::ForbiddenTarget(_) => Reply::NOT_ALLOWED,
            EdgeError::DnsFailed(_) => Reply::HOST_UNREACHABLE,
            EdgeError::ConnectFailed(_) => Reply::CONNECTION_REFUSED,
            EdgeError::Timeout(_) => Reply::TTL_EXPIRED,
            EdgeError::SocksCommand(_) | EdgeError::NotImplemented(_) => {
                Reply::COMMAND_NOT_SUPPORTED
            }
            EdgeError::SocksAddressType(_) => Reply::ADDRESS_TYPE_NOT_SUPPORTED,
            EdgeError::BadRequest(_)
            | EdgeError::HeaderTooLarge(_)
            | EdgeError::UriTooLong(_)
            | EdgeError::HeaderTimeout(_)
            | EdgeError::Unavailable(_)
            | EdgeError::PoolBusy(_)
            | EdgeError::TooManyConnections(_)
            | EdgeError::BadReply(_) => Reply::GENERAL_FAILURE,
        }
    }

    /// The error for the remote's own refusal of a CONNECT (after-connect mode), from the tag
    /// in its `X-Longhaul-Error` header (`None`: no tag, not a refusal the remote made).
    pub fn from_far_refusal(tag: Option<&str>, reason: String) -> EdgeError {
        let tag = tag.and_then(|t| ErrorTag::ALL.into_iter().find(|k| k.as_str() == t));
        match tag {
            Some(ErrorTag::DnsFailed) => EdgeError::DnsFailed(reason),
            Some(ErrorTag::ConnectFailed) => EdgeError::ConnectFailed(reason),
            Some(ErrorTag::OriginTimeout) => EdgeError::Timeout(reason),
            Some(ErrorTag::ForbiddenTarget) => EdgeError::ForbiddenTarget(reason),
            Some(ErrorTag::BadRequest) => EdgeError::BadRequest(reason),
            _ => EdgeError::BadReply(reason),
        }
    }

    /// The complete synthetic response (head and body; `Connection: close`).
    pub fn response(&self) -> Vec<u8> {
        synthetic_response(self.tag(), &self.to_string())
    }

    /// [`EdgeError::response`] as the answer to a request with `method`: the head alone for
    /// `HEAD` (RFC 9110 §9.3.2).
    pub fn response_to(&self, method: &str) -> Vec<u8> {
        synthetic_response_to(method, self.tag(), &self.to_string())
    }

    /// The same synthetic response for an HTTP/2 client: the status, fields and body of
    /// [`EdgeError::response`] without the connection-specific `Connection` field (RFC 9113
    /// §8.2.2) or a reason phrase (HTTP/2 has none).
    pub fn h2_response(&self) -> (http::Response<()>, bytes::Bytes) {
        let whole = self.response();
        let split = whole
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .expect("a synthetic response has a head");
        let head = String::from_utf8_lossy(&whole[..split]);
        let mut b = http::Response::builder().status(self.status());
        for (name, value) in head
            .split("\r\n")
            .skip(1)
            .filter_map(|l| l.split_once(": "))
        {
            if !name.eq_ignore_ascii_case("connection") {
                b = b.header(name, value);
            }
        }
        let head = b.body(()).expect("a synthetic head is valid");
        (head, bytes::Bytes::copy_from_slice(&whole[split + 4..]))
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
            HeadError::UriTooLong(_) => EdgeError::UriTooLong(e.to_string()),
            HeadError::UnsupportedCoding(_) => EdgeError::NotImplemented(e.to_string()),
            other => EdgeError::BadRequest(other.to_string()),
        }
    }
}

/// Writes `err`'s synthetic response and closes the write side: after an error the framing of
/// what follows on the connection cannot be trusted. Write errors are ignored (the client may
/// be gone; the caller logs the outcome either way).
pub async fn reply_and_close<W: AsyncWrite + Unpin>(w: &mut W, err: &EdgeError) {
    write_and_close(w, &err.response()).await;
}

async fn write_and_close<W: AsyncWrite + Unpin>(w: &mut W, reply: &[u8]) {
    if w.write_all(reply).await.is_ok() {
        let _ = w.shutdown().await;
    }
}

/// The one way the edge answers an error: writes `err`'s synthetic response (its head alone
/// when `record`'s method is `HEAD`), closes the write side as [`reply_and_close`] does and
/// logs `record` as the failure (status, tag, reason).
pub async fn answer<W: AsyncWrite + Unpin>(w: &mut W, err: &EdgeError, record: Access<'_>) {
    write_and_close(w, &err.response_to(record.method)).await;
    record.failed(err.tag(), err.to_string()).log();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_follow_the_contract() {
        let cases: Vec<(EdgeError, u16)> = vec![
            (EdgeError::BadRequest("x".into()), 400),
            (EdgeError::HeaderTooLarge("x".into()), 431),
            (EdgeError::UriTooLong("x".into()), 414),
            (EdgeError::NotImplemented("x".into()), 501),
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
            assert!(body.contains(&e.to_string()));
        }
    }

    #[test]
    fn socks_reply_codes_follow_rfc_1928() {
        let cases: Vec<(EdgeError, u8)> = vec![
            (EdgeError::BadRequest("x".into()), 0x01),
            (EdgeError::Unavailable("x".into()), 0x01),
            (EdgeError::PoolBusy("x".into()), 0x01),
            (EdgeError::BadReply("x".into()), 0x01),
            (EdgeError::ForbiddenClient([10, 0, 0, 1].into()), 0x02),
            (EdgeError::ForbiddenTarget("x".into()), 0x02),
            (EdgeError::DnsFailed("x".into()), 0x04),
            (EdgeError::ConnectFailed("x".into()), 0x05),
            (EdgeError::Timeout("x".into()), 0x06),
            (EdgeError::SocksCommand("BIND".into()), 0x07),
            (EdgeError::SocksAddressType("0x02".into()), 0x08),
        ];
        for (e, code) in cases {
            assert_eq!(e.socks_reply(), Reply(code), "{e}");
        }
        // The remote's refusals keep their meaning.
        let far = |tag| EdgeError::from_far_refusal(tag, "r".into()).socks_reply();
        assert_eq!(far(Some("dns-failed")), Reply::HOST_UNREACHABLE);
        assert_eq!(far(Some("connect-failed")), Reply::CONNECTION_REFUSED);
        assert_eq!(far(Some("origin-timeout")), Reply::TTL_EXPIRED);
        assert_eq!(far(Some("forbidden-target")), Reply::NOT_ALLOWED);
        assert_eq!(far(Some("no-such-tag")), Reply::GENERAL_FAILURE);
        assert_eq!(far(None), Reply::GENERAL_FAILURE);
        // A far-side reset of an optimistic tunnel maps the same way.
        let reset = |code| {
            EdgeError::from_far(&FarFailure {
                code,
                retryable: false,
                reason: "r".into(),
            })
            .socks_reply()
        };
        assert_eq!(reset(FarCode::DnsFailed), Reply::HOST_UNREACHABLE);
        assert_eq!(reset(FarCode::Timeout), Reply::TTL_EXPIRED);
    }

    #[test]
    fn h2_responses_carry_the_same_status_tag_and_body() {
        let e = EdgeError::ConnectFailed("connection refused".into());
        let (head, body) = e.h2_response();
        assert_eq!(head.status().as_u16(), 502);
        assert_eq!(head.headers()["x-longhaul-error"], "connect-failed");
        assert!(head.headers().get("connection").is_none());
        assert_eq!(
            head.headers()["content-length"],
            body.len().to_string().as_str()
        );
        let whole = e.response();
        assert!(whole.ends_with(&body));
    }

    #[test]
    fn open_failures_map_by_cause() {
        let e = EdgeError::from_open(OpenError::stream_limit(
            "every pool connection is at its stream limit; no stream slot freed within 5000 ms",
        ));
        assert_eq!((e.status(), e.tag().as_str()), (503, "pool-busy"));
        let r = String::from_utf8(e.response()).unwrap();
        assert!(r.starts_with("HTTP/1.1 503 Service Unavailable\r\n"), "{r}");
        assert!(r.contains("X-Longhaul-Error: pool-busy\r\n"), "{r}");
        assert!(r.ends_with("503 Service Unavailable: pool busy: every pool connection is at its stream limit; no stream slot freed within 5000 ms\n"), "{r}");
        let e = EdgeError::from_open(OpenError::unavailable("no pool connection is up"));
        assert_eq!((e.status(), e.tag().as_str()), (502, "remote-unavailable"));
    }
}
