//! The one place where the remote maps failures to synthetic responses, stream reset reasons
//! and access-log lines.
//!
//! An `Http` stream that fails before its response started gets a complete synthetic response
//! (status, `X-Longhaul-Error` tag, one-line reason body) that the edge passes to the client. A
//! `Tunnel` stream that cannot reach its target is reset with a [`ResetReason`] the transport
//! turns into a wire error code. It does NOT decide when failures happen.

use http1::reply::{synthetic_response_to, ErrorTag};

use crate::policy::ResolveError;

/// A far-side failure.
#[derive(Debug, Clone, thiserror::Error)]
pub enum RemoteError {
    /// The request on the stream is not valid.
    #[error("bad request: {0}")]
    BadRequest(String),
    /// The request head is over the limit.
    #[error("request header section too large: {0}")]
    HeaderTooLarge(String),
    /// The target is refused by policy.
    #[error("target refused: {0}")]
    Forbidden(String),
    /// Name resolution failed.
    #[error("DNS lookup failed: {0}")]
    DnsFailed(String),
    /// The origin refused or could not be reached.
    #[error("connection to origin failed: {0}")]
    ConnectFailed(String),
    /// The origin did not connect or answer in time.
    #[error("origin timed out: {0}")]
    Timeout(String),
    /// The origin's reply was broken.
    #[error("bad reply from origin: {0}")]
    BadOrigin(String),
}

/// Why a stream is reset (mapped to a wire error code by the transport).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResetReason {
    /// The target's name did not resolve.
    DnsFailed,
    /// The target could not be connected.
    ConnectFailed,
    /// The target did not answer in time.
    Timeout,
    /// The target is refused by policy.
    Forbidden,
    /// The stream's data cannot be delivered completely (origin cut the reply, bad request).
    Cancel,
}

impl RemoteError {
    /// Status code of the synthetic response (the tag's).
    pub fn status(&self) -> u16 {
        self.tag().status()
    }

    /// The error tag (same vocabulary as the edge: [`ErrorTag`]).
    pub fn tag(&self) -> ErrorTag {
        match self {
            RemoteError::BadRequest(_) => ErrorTag::BadRequest,
            RemoteError::HeaderTooLarge(_) => ErrorTag::HeaderTooLarge,
            RemoteError::Forbidden(_) => ErrorTag::ForbiddenTarget,
            RemoteError::DnsFailed(_) => ErrorTag::DnsFailed,
            RemoteError::ConnectFailed(_) => ErrorTag::ConnectFailed,
            RemoteError::Timeout(_) => ErrorTag::OriginTimeout,
            RemoteError::BadOrigin(_) => ErrorTag::BadOriginReply,
        }
    }

    /// Reset reason for a tunnel.
    pub fn reset_reason(&self) -> ResetReason {
        match self {
            RemoteError::Forbidden(_) => ResetReason::Forbidden,
            RemoteError::DnsFailed(_) => ResetReason::DnsFailed,
            RemoteError::ConnectFailed(_) => ResetReason::ConnectFailed,
            RemoteError::Timeout(_) => ResetReason::Timeout,
            _ => ResetReason::Cancel,
        }
    }

    /// The complete synthetic response to a request with `method` (the head alone for
    /// `HEAD`, RFC 9110 §9.3.2).
    pub fn response_to(&self, method: &str) -> Vec<u8> {
        synthetic_response_to(method, self.tag(), &self.to_string())
    }

    /// The error for a hyper client failure, found by walking its cause chain.
    pub fn from_client(target: &str, e: &hyper_util::client::legacy::Error) -> RemoteError {
        let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
        let mut io = None;
        while let Some(err) = cur {
            if let Some(r) = err.downcast_ref::<ResolveError>() {
                return RemoteError::from(r.clone());
            }
            if let Some(i) = err.downcast_ref::<std::io::Error>() {
                io.get_or_insert(i);
            }
            cur = err.source();
        }
        match io {
            Some(i) if i.kind() == std::io::ErrorKind::TimedOut => {
                RemoteError::Timeout(format!("connect to {target} timed out"))
            }
            Some(i) if e.is_connect() => RemoteError::ConnectFailed(format!("{target}: {i}")),
            _ if e.is_connect() => RemoteError::ConnectFailed(format!("{target}: {}", chain(e))),
            _ => RemoteError::BadOrigin(format!("{target}: {}", chain(e))),
        }
    }

    /// The error for a failed TCP connect to an origin.
    pub fn from_connect(target: &str, e: &std::io::Error) -> RemoteError {
        if e.kind() == std::io::ErrorKind::TimedOut {
            RemoteError::Timeout(format!("connect to {target}: {e}"))
        } else {
            RemoteError::ConnectFailed(format!("connect to {target}: {e}"))
        }
    }
}

impl From<ResolveError> for RemoteError {
    fn from(e: ResolveError) -> RemoteError {
        match e {
            ResolveError::Dns(..) => RemoteError::DnsFailed(e.to_string()),
            ResolveError::Forbidden(..) => RemoteError::Forbidden(e.to_string()),
        }
    }
}

impl From<http1::HeadError> for RemoteError {
    fn from(e: http1::HeadError) -> RemoteError {
        match e {
            // The edge refuses a request line over its own limit (414); one over the remote's
            // counts here as the head being too large.
            http1::HeadError::TooLarge(_) | http1::HeadError::UriTooLong(_) => {
                RemoteError::HeaderTooLarge(e.to_string())
            }
            other => RemoteError::BadRequest(other.to_string()),
        }
    }
}

/// An error and all its causes on one line.
pub fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let t = c.to_string();
        if !s.contains(&t) {
            s.push_str(": ");
            s.push_str(&t);
        }
        cur = c.source();
    }
    s
}
