//! The synthetic replies either proxy sends when it answers in place of an origin: a complete
//! `Connection: close` response with a plain-text one-line body, and [`ErrorTag`], the one
//! vocabulary of error tags both proxies use (sent in `X-Longhaul-Error`, logged as the
//! access record's outcome, counted in metrics) with the status each tag is answered with.
//!
//! What it does NOT do: decide which failure gets which tag (each proxy's `errors` module
//! does), or write to a socket.

/// The header that carries a synthetic reply's error tag (lower case). On a pool stream only the
/// remote's own replies carry it (the remote removes it from origin replies), so the edge may
/// take it as the far side's outcome; an origin cannot forge it.
pub const ERROR_HEADER: &str = "x-longhaul-error";

/// Reason phrase of the statuses the proxies generate.
pub fn reason_phrase(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        403 => "Forbidden",
        408 => "Request Timeout",
        414 => "URI Too Long",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "Error",
    }
}

/// What went wrong, as both proxies tell clients, logs and metrics. Each tag has one status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorTag {
    /// `bad-request` (400): the request is not valid HTTP/1.1 or not acceptable to a proxy.
    BadRequest,
    /// `header-too-large` (431): the request head is over the configured limit.
    HeaderTooLarge,
    /// `uri-too-long` (414): the request line alone is over the head limit (RFC 9112 §3).
    UriTooLong,
    /// `not-implemented` (501): the request uses a transfer coding the proxy does not
    /// implement (RFC 9112 §6.1).
    NotImplemented,
    /// `header-timeout` (408): the request head did not arrive in time (edge).
    HeaderTimeout,
    /// `forbidden-client` (403): the client is not in an allowed network (edge).
    ForbiddenClient,
    /// `forbidden-target` (403): the target is refused by policy.
    ForbiddenTarget,
    /// `remote-unavailable` (502): no pool connection could carry the request (edge).
    RemoteUnavailable,
    /// `pool-busy` (503): every pool connection stayed at its stream limit (edge).
    PoolBusy,
    /// `too-many-connections` (503): the edge serves its limit of clients (edge).
    TooManyConnections,
    /// `dns-failed` (502): the target's name did not resolve (remote).
    DnsFailed,
    /// `connect-failed` (502): the target could not be connected (remote).
    ConnectFailed,
    /// `origin-timeout` (504): the origin did not connect or answer in time (remote).
    OriginTimeout,
    /// `bad-reply` (502): the reply from the remote proxy was broken or missing (edge).
    BadReply,
    /// `bad-origin-reply` (502): the origin's reply was broken (remote).
    BadOriginReply,
}

impl ErrorTag {
    /// Every tag.
    pub const ALL: [ErrorTag; 15] = [
        ErrorTag::BadRequest,
        ErrorTag::HeaderTooLarge,
        ErrorTag::UriTooLong,
        ErrorTag::NotImplemented,
        ErrorTag::HeaderTimeout,
        ErrorTag::ForbiddenClient,
        ErrorTag::ForbiddenTarget,
        ErrorTag::RemoteUnavailable,
        ErrorTag::PoolBusy,
        ErrorTag::TooManyConnections,
        ErrorTag::DnsFailed,
        ErrorTag::ConnectFailed,
        ErrorTag::OriginTimeout,
        ErrorTag::BadReply,
        ErrorTag::BadOriginReply,
    ];

    /// The tag as sent and logged.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorTag::BadRequest => "bad-request",
            ErrorTag::HeaderTooLarge => "header-too-large",
            ErrorTag::UriTooLong => "uri-too-long",
            ErrorTag::NotImplemented => "not-implemented",
            ErrorTag::HeaderTimeout => "header-timeout",
            ErrorTag::ForbiddenClient => "forbidden-client",
            ErrorTag::ForbiddenTarget => "forbidden-target",
            ErrorTag::RemoteUnavailable => "remote-unavailable",
            ErrorTag::PoolBusy => "pool-busy",
            ErrorTag::TooManyConnections => "too-many-connections",
            ErrorTag::DnsFailed => "dns-failed",
            ErrorTag::ConnectFailed => "connect-failed",
            ErrorTag::OriginTimeout => "origin-timeout",
            ErrorTag::BadReply => "bad-reply",
            ErrorTag::BadOriginReply => "bad-origin-reply",
        }
    }

    /// The status a failure with this tag is answered with.
    pub fn status(self) -> u16 {
        match self {
            ErrorTag::BadRequest => 400,
            ErrorTag::HeaderTooLarge => 431,
            ErrorTag::UriTooLong => 414,
            ErrorTag::NotImplemented => 501,
            ErrorTag::HeaderTimeout => 408,
            ErrorTag::ForbiddenClient | ErrorTag::ForbiddenTarget => 403,
            ErrorTag::RemoteUnavailable
            | ErrorTag::DnsFailed
            | ErrorTag::ConnectFailed
            | ErrorTag::BadReply
            | ErrorTag::BadOriginReply => 502,
            ErrorTag::PoolBusy | ErrorTag::TooManyConnections => 503,
            ErrorTag::OriginTimeout => 504,
        }
    }
}

impl std::fmt::Display for ErrorTag {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// [`synthetic_response`] as the answer to a request with `method`: a reply to `HEAD` is its
/// head alone (RFC 9110 §9.3.2: no content; its `Content-Length` is the one a `GET` would have
/// been answered with, as §8.6 allows). Methods are case-sensitive (§9.1): `head` gets the body.
pub fn synthetic_response_to(method: &str, tag: ErrorTag, reason: &str) -> Vec<u8> {
    let mut whole = synthetic_response(tag, reason);
    if method == "HEAD" {
        let end = whole
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .expect("a synthetic response has a head");
        whole.truncate(end + 4);
    }
    whole
}

/// The `Connection: close` response for a failure tagged `tag`, with `reason` as its
/// plain-text one-line body.
pub fn synthetic_response(tag: ErrorTag, reason: &str) -> Vec<u8> {
    let status = tag.status();
    let tag = tag.as_str();
    let body = format!("{status} {}: {reason}\n", reason_phrase(status));
    format!(
        "HTTP/1.1 {status} {}\r\nDate: {}\r\nContent-Type: text/plain; charset=utf-8\r\n\
         Content-Length: {}\r\nX-Longhaul-Error: {tag}\r\nConnection: close\r\n\
         Cache-Control: no-store\r\n\r\n{body}",
        reason_phrase(status),
        crate::http_date_now(),
        body.len()
    )
    .into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_response_is_complete_and_tagged() {
        let r = String::from_utf8(synthetic_response(ErrorTag::PoolBusy, "wait")).unwrap();
        let (head, body) = r.split_once("\r\n\r\n").unwrap();
        assert!(
            head.starts_with("HTTP/1.1 503 Service Unavailable\r\n"),
            "{head}"
        );
        assert!(
            head.contains("\r\nX-Longhaul-Error: pool-busy\r\n"),
            "{head}"
        );
        assert!(head.contains("\r\nConnection: close\r\n"), "{head}");
        assert!(
            head.contains("\r\nDate: ") && head.contains(" GMT\r\n"),
            "{head}"
        );
        assert!(head.contains(&format!("\r\nContent-Length: {}\r\n", body.len())));
        assert_eq!(body, "503 Service Unavailable: wait\n");
    }

    #[test]
    fn a_reply_to_head_is_the_head_alone() {
        let body = "502 Bad Gateway: refused\n";
        let r = String::from_utf8(synthetic_response_to(
            "HEAD",
            ErrorTag::ConnectFailed,
            "refused",
        ))
        .unwrap();
        assert!(r.starts_with("HTTP/1.1 502 Bad Gateway\r\n"), "{r}");
        assert_eq!(
            r.find("\r\n\r\n"),
            Some(r.len() - 4),
            "nothing after the head: {r}"
        );
        // The length a GET would have been answered with (RFC 9110 §8.6).
        assert!(
            r.contains(&format!("\r\nContent-Length: {}\r\n", body.len())),
            "{r}"
        );
        // Other methods, `head` among them (methods are case-sensitive), get the body.
        for m in ["GET", "head", "POST"] {
            let r = String::from_utf8(synthetic_response_to(m, ErrorTag::ConnectFailed, "refused"))
                .unwrap();
            assert!(r.ends_with(&format!("\r\n\r\n{body}")), "{m}: {r}");
        }
    }

    #[test]
    fn every_tag_has_an_error_status_with_a_reason_phrase() {
        for t in ErrorTag::ALL {
            assert!((400..600).contains(&t.status()), "{t}");
            assert_ne!(reason_phrase(t.status()), "Error", "{t}");
            assert_eq!(t.to_string(), t.as_str());
        }
        let mut names: Vec<_> = ErrorTag::ALL.iter().map(|t| t.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), ErrorTag::ALL.len(), "tags are distinct");
    }
}
