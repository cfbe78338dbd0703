//! The synthetic replies either proxy sends when it answers in place of an origin: a complete
//! `Connection: close` response with a plain-text one-line body and the `X-Longhaul-Error` tag.
//!
//! What it does NOT do: decide which status or tag a failure gets (each proxy's `errors`
//! module does), or write to a socket.

/// Reason phrase of the statuses the proxies generate.
pub fn reason_phrase(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        403 => "Forbidden",
        408 => "Request Timeout",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "Error",
    }
}

/// A `Connection: close` response with a plain-text one-line body.
pub fn synthetic_response(status: u16, tag: &str, reason: &str) -> Vec<u8> {
    let body = format!("{status} {}: {reason}\n", reason_phrase(status));
    format!(
        "HTTP/1.1 {status} {}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\n\
         X-Longhaul-Error: {tag}\r\nConnection: close\r\nCache-Control: no-store\r\n\r\n{body}",
        reason_phrase(status),
        body.len()
    )
    .into_bytes()
}
