//! HTTP/1.1 message heads and body framing, shared by both proxies.
//!
//! What it does: parses request and response heads with `httparse` into owned values (bounded by
//! a header-section size and a header count), serialises them again, removes hop-by-hop headers,
//! decides how a message body is framed (RFC 9112 §6), and copies a body from a reader to a writer
//! while decoding and re-encoding its framing (fixed length, chunked, or close-delimited).
//!
//! What it does NOT do: interpret methods or status codes beyond framing, keep any connection
//! state, or touch the network. Trailers of chunked bodies are read (bounded) and dropped.

use std::fmt::Write as _;
use std::io;

use bytes::{Buf, Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Largest accepted header section (request line or status line plus headers), in bytes.
/// Larger heads are answered `431`. 64 KiB fits any real browser request (cookies included).
pub const DEFAULT_MAX_HEADER_BYTES: usize = 64 * 1024;
/// Largest number of header fields in one head a client sends, or an origin sends; more is
/// answered `431` (request) or `502` (reply). The hop between the proxies allows a little more
/// ([`FORWARD_MAX_HEADERS`]), so a message within the limit on its way in is within it after
/// forwarding too.
pub const DEFAULT_MAX_HEADERS: usize = 128;
/// Header fields a proxy of the pair may add to a message it forwards (`Via`, a framing header,
/// `Host`, `Connection`, `Upgrade`).
pub const FORWARD_ADDED_FIELDS: usize = 8;
/// Field limit of a head read from a pool stream: [`DEFAULT_MAX_HEADERS`] plus what forwarding
/// adds.
pub const FORWARD_MAX_HEADERS: usize = DEFAULT_MAX_HEADERS + FORWARD_ADDED_FIELDS;

/// Size limit of a head read from a pool stream whose sender accepted heads of up to
/// `max_bytes`: re-serialisation may add two bytes per field (a compact `name:value` LF line
/// becomes `name: value` CRLF) and the added fields (under 1 KiB).
pub const fn forwarded_head_limit(max_bytes: usize) -> usize {
    max_bytes + 2 * FORWARD_MAX_HEADERS + 1024
}
/// Size of the reads used when copying bodies (and the largest chunk written at once).
pub const DEFAULT_BODY_BUFFER: usize = 64 * 1024;
/// Longest accepted chunk-size line (size, extensions, CRLF) in a chunked body.
pub const MAX_CHUNK_LINE: usize = 4096;
/// Largest accepted trailer section of a chunked body (trailers are dropped).
pub const MAX_TRAILER_BYTES: usize = 16 * 1024;

/// Headers that describe one hop, not the message (RFC 9110 §7.6.1), plus the proxy-specific
/// ones; removed when a message is forwarded. Framing headers are re-added by the forwarder.
const HOP_BY_HOP: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

/// One header field, name as received (compared case-insensitively).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    /// Field name.
    pub name: String,
    /// Field value bytes (not necessarily UTF-8).
    pub value: Vec<u8>,
}

impl Header {
    /// A header from a name and value.
    pub fn new(name: &str, value: impl Into<Vec<u8>>) -> Header {
        Header {
            name: name.to_string(),
            value: value.into(),
        }
    }
}

/// A parsed request head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestHead {
    /// Method token, e.g. `GET`.
    pub method: String,
    /// Request target as sent (absolute-form, origin-form, authority-form or `*`).
    pub target: String,
    /// Minor version: 0 for HTTP/1.0, 1 for HTTP/1.1.
    pub minor: u8,
    /// Header fields in order.
    pub headers: Vec<Header>,
}

/// A parsed response head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResponseHead {
    /// Status code.
    pub status: u16,
    /// Reason phrase (may be empty).
    pub reason: String,
    /// Minor version: 0 for HTTP/1.0, 1 for HTTP/1.1.
    pub minor: u8,
    /// Header fields in order.
    pub headers: Vec<Header>,
}

/// Why a head could not be read.
#[derive(Debug, thiserror::Error)]
pub enum HeadError {
    /// The bytes are not a valid HTTP/1.x head.
    #[error("malformed message head: {0}")]
    Malformed(String),
    /// The head exceeds the size or header-count limit.
    #[error("header section too large (limit {0} bytes, {DEFAULT_MAX_HEADERS} fields)")]
    TooLarge(usize),
    /// A request line alone longer than the head's size limit: `414` (RFC 9112 §3).
    #[error("request line longer than the head limit ({0} bytes)")]
    UriTooLong(usize),
    /// `Transfer-Encoding` names a coding this proxy does not implement (only `chunked` is):
    /// `501` for a request (RFC 9112 §6.1), a bad reply for a response.
    #[error("unsupported transfer coding: {0}")]
    UnsupportedCoding(String),
    /// The peer closed the connection in the middle of a head.
    #[error("connection closed in the middle of a message head")]
    Truncated,
    /// Reading failed.
    #[error("read failed: {0}")]
    Io(#[from] io::Error),
}

/// How a message body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyKind {
    /// No body.
    None,
    /// Exactly this many bytes.
    Length(u64),
    /// Chunked transfer coding.
    Chunked,
    /// Everything until the sender closes (responses only).
    CloseDelimited,
}

fn find<'a>(headers: &'a [Header], name: &str) -> impl Iterator<Item = &'a Header> + 'a {
    let name = name.to_string();
    headers
        .iter()
        .filter(move |h| h.name.eq_ignore_ascii_case(&name))
}

/// The current time as an HTTP-date (IMF-fixdate, RFC 9110 §5.6.7).
pub fn http_date_now() -> String {
    httpdate::fmt_http_date(std::time::SystemTime::now())
}

/// Appends a `Date` field stamped now unless `headers` has one: a proxy forwarding a response
/// without `Date` adds the time it received it, and a response the proxy makes itself is dated
/// (RFC 9110 §6.6.1).
pub fn add_date_if_missing(headers: &mut Vec<Header>) {
    if find(headers, "date").next().is_none() {
        headers.push(Header::new("Date", http_date_now()));
    }
}

/// The value of the single header `name` as a string, if present and UTF-8.
pub fn header_str<'a>(headers: &'a [Header], name: &str) -> Option<&'a str> {
    find(headers, name)
        .next()
        .and_then(|h| std::str::from_utf8(&h.value).ok())
        .map(str::trim)
}

/// Comma-separated tokens of every `name` header, lower-cased. A value that is not UTF-8 is
/// not skipped: its invalid bytes become U+FFFD, so they never match a known token while the
/// valid elements of the same value still count.
pub fn header_tokens(headers: &[Header], name: &str) -> Vec<String> {
    find(headers, name)
        .flat_map(|h| {
            String::from_utf8_lossy(&h.value)
                .split(',')
                .map(|t| t.trim_matches([' ', '\t']).to_ascii_lowercase())
                .filter(|t| !t.is_empty())
                .collect::<Vec<_>>()
        })
        .collect()
}

/// True for a `tchar` (RFC 9110 §5.6.2).
pub fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// True if `s` is a non-empty `token` (RFC 9110 §5.6.2).
pub fn is_token(s: &[u8]) -> bool {
    !s.is_empty() && s.iter().all(|&b| is_tchar(b))
}

/// The transfer codings of every `Transfer-Encoding` field, in order, lower-cased without
/// parameters. `None` when there is no such field. A field that is present but cannot be parsed
/// (empty, a byte outside visible ASCII such as obs-text, an element that is not a token with
/// parameters) is an error, never "absent": a message whose framing the proxy cannot read must
/// not be framed some other way (RFC 9112 §6.3 rule 4).
pub fn transfer_codings(headers: &[Header]) -> Result<Option<Vec<String>>, HeadError> {
    let mut fields = find(headers, "transfer-encoding").peekable();
    if fields.peek().is_none() {
        return Ok(None);
    }
    let bad = |v: &[u8]| {
        HeadError::Malformed(format!(
            "unparsable Transfer-Encoding {:?}",
            String::from_utf8_lossy(v)
        ))
    };
    let mut codings = Vec::new();
    for h in fields {
        if h.value
            .iter()
            .any(|&b| !(b == b'\t' || (0x20..0x7f).contains(&b)))
        {
            return Err(bad(&h.value));
        }
        for element in h.value.split(|&b| b == b',') {
            let element = element.trim_ascii();
            if element.is_empty() {
                continue;
            }
            let mut parts = element.split(|&b| b == b';');
            let name = parts.next().unwrap_or_default().trim_ascii();
            if !is_token(name) {
                return Err(bad(&h.value));
            }
            for param in parts {
                let valid = param
                    .split(|&b| b == b'=')
                    .map(<[u8]>::trim_ascii)
                    .enumerate()
                    .all(|(i, p)| i < 2 && (is_token(p) || (i == 1 && p.starts_with(b"\""))));
                if !valid {
                    return Err(bad(&h.value));
                }
            }
            codings.push(String::from_utf8_lossy(name).to_ascii_lowercase());
        }
    }
    if codings.is_empty() {
        return Err(bad(b""));
    }
    Ok(Some(codings))
}

/// Removes every header named `name`.
pub fn remove_header(headers: &mut Vec<Header>, name: &str) {
    headers.retain(|h| !h.name.eq_ignore_ascii_case(name));
}

/// Removes hop-by-hop headers, including those listed in `Connection`, and returns the
/// `Connection` tokens (lower-cased) so the caller can honour `close` / `keep-alive`.
pub fn strip_hop_by_hop(headers: &mut Vec<Header>) -> Vec<String> {
    let mut tokens = header_tokens(headers, "connection");
    tokens.extend(header_tokens(headers, "proxy-connection"));
    headers.retain(|h| {
        !HOP_BY_HOP.iter().any(|n| h.name.eq_ignore_ascii_case(n))
            && !tokens.iter().any(|t| h.name.eq_ignore_ascii_case(t))
    });
    tokens
}

fn content_length(headers: &[Header]) -> Result<Option<u64>, HeadError> {
    let mut value: Option<u64> = None;
    for h in find(headers, "content-length") {
        let s = std::str::from_utf8(&h.value)
            .map_err(|_| HeadError::Malformed("non-ASCII Content-Length".into()))?;
        for part in s.split(',') {
            let part = part.trim();
            if part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) {
                return Err(HeadError::Malformed(format!(
                    "invalid Content-Length {part:?}"
                )));
            }
            let n: u64 = part
                .parse()
                .map_err(|_| HeadError::Malformed("Content-Length overflows".into()))?;
            match value {
                Some(v) if v != n => {
                    return Err(HeadError::Malformed(
                        "conflicting Content-Length values".into(),
                    ))
                }
                _ => value = Some(n),
            }
        }
    }
    Ok(value)
}

/// Returns true if the message has a `Transfer-Encoding` that is exactly `chunked`, false if it
/// has none. Anything else is an error: an unparsable field, a final coding other than
/// `chunked` ([`HeadError::Malformed`]: the length cannot be determined), `chunked` applied
/// twice, or another coding before `chunked` ([`HeadError::UnsupportedCoding`]: this proxy
/// decodes only `chunked` and does not forward other transfer codings).
fn is_chunked(headers: &[Header]) -> Result<bool, HeadError> {
    let Some(codings) = transfer_codings(headers)? else {
        return Ok(false);
    };
    if codings == ["chunked"] {
        return Ok(true);
    }
    let list = codings.join(", ");
    if codings.last().map(String::as_str) != Some("chunked")
        || codings.iter().filter(|c| *c == "chunked").count() > 1
    {
        Err(HeadError::Malformed(format!(
            "Transfer-Encoding {list:?} does not end in a single chunked"
        )))
    } else {
        Err(HeadError::UnsupportedCoding(list))
    }
}

/// Body framing of a request (RFC 9112 §6.3). A request with both `Transfer-Encoding` and
/// `Content-Length`, or an HTTP/1.0 request with `Transfer-Encoding`, is rejected (request
/// smuggling guard, RFC 9112 §6.1). `Content-Length: 0` stays [`BodyKind::Length`]`(0)` so it is
/// forwarded as sent.
pub fn request_body_kind(head: &RequestHead) -> Result<BodyKind, HeadError> {
    let chunked = is_chunked(&head.headers)?;
    let length = content_length(&head.headers)?;
    if chunked && head.minor == 0 {
        return Err(HeadError::Malformed(
            "Transfer-Encoding in an HTTP/1.0 request".into(),
        ));
    }
    match (chunked, length) {
        (true, Some(_)) => Err(HeadError::Malformed(
            "both Transfer-Encoding and Content-Length".into(),
        )),
        (true, None) => Ok(BodyKind::Chunked),
        (false, None) => Ok(BodyKind::None),
        (false, Some(n)) => Ok(BodyKind::Length(n)),
    }
}

/// Body framing of a response to a request with method `method` (RFC 9112 §6.3).
/// `Transfer-Encoding` overrides `Content-Length` (the forwarder must then remove the latter,
/// see [`remove_length_if_coded`]); a coding other than a lone `chunked`, or an unparsable one,
/// is an error: this proxy neither decodes nor forwards other transfer codings, and must not
/// deliver still-coded bytes as if they were decoded.
pub fn response_body_kind(method: &str, head: &ResponseHead) -> Result<BodyKind, HeadError> {
    // Methods are case-sensitive (RFC 9110 §9.1): `head` is an extension method whose reply
    // has a body, and the origin and the far side frame it so.
    if method == "HEAD"
        || (100..200).contains(&head.status)
        || head.status == 204
        || head.status == 304
    {
        return Ok(BodyKind::None);
    }
    if is_chunked(&head.headers)? {
        if head.minor == 0 {
            return Err(HeadError::Malformed(
                "Transfer-Encoding in an HTTP/1.0 response".into(),
            ));
        }
        return Ok(BodyKind::Chunked);
    }
    match content_length(&head.headers)? {
        Some(0) => Ok(BodyKind::None),
        Some(n) => Ok(BodyKind::Length(n)),
        None => Ok(BodyKind::CloseDelimited),
    }
}

/// Removes `Content-Length` when the message also has `Transfer-Encoding`, which overrides it
/// (RFC 9112 §6.3 rule 3: an intermediary forwarding such a message must remove it).
pub fn remove_length_if_coded(headers: &mut Vec<Header>) {
    if find(headers, "transfer-encoding").next().is_some() {
        remove_header(headers, "content-length");
    }
}

/// Reads more bytes into `buf`; returns the count (0 at EOF).
async fn fill<R: AsyncRead + Unpin>(r: &mut R, buf: &mut BytesMut) -> io::Result<usize> {
    if buf.capacity() - buf.len() < 4096 {
        buf.reserve(DEFAULT_BODY_BUFFER);
    }
    r.read_buf(buf).await
}

fn owned_headers(hs: &[httparse::Header<'_>]) -> Vec<Header> {
    hs.iter()
        .map(|h| Header {
            name: h.name.to_string(),
            value: h.value.to_vec(),
        })
        .collect()
}

fn parse_error(e: httparse::Error, max: usize) -> HeadError {
    match e {
        httparse::Error::TooManyHeaders => HeadError::TooLarge(max),
        other => HeadError::Malformed(other.to_string()),
    }
}

/// Incremental search for the end of a message head in a growing buffer.
///
/// A head trickled in one byte at a time (slowloris) must not cost a full parse of everything
/// received so far on every read. The scanner remembers how far it has looked for the empty line
/// that ends a head (`\n\n` or `\n\r\n`, as `httparse` accepts), so each new byte is looked at
/// once. [`HeadScanner::should_parse`] says when a full parse is worth it: once the end is in the
/// buffer, or whenever the buffer has doubled since the last parse (so garbage such as a TLS
/// hello is still rejected at its first read, and the total parsing cost stays linear in the
/// head size).
#[derive(Debug, Default, Clone)]
pub struct HeadScanner {
    /// Bytes of the buffer already searched (a `\n` whose successors are not in yet is not).
    scanned: usize,
    /// Offset just past the head's final newline, once found.
    end: Option<usize>,
    /// Buffer length at the last full parse (0: none yet).
    parsed_at: usize,
}

impl HeadScanner {
    /// A scanner for a buffer that starts at a head's first byte.
    pub fn new() -> HeadScanner {
        HeadScanner::default()
    }

    /// Forgets everything (the buffer's front was consumed).
    pub fn reset(&mut self) {
        *self = HeadScanner::default();
    }

    /// Looks at the bytes of `buf` not seen yet; returns the offset just past the end of the
    /// head if it is in `buf`.
    pub fn scan(&mut self, buf: &[u8]) -> Option<usize> {
        if self.end.is_some() {
            return self.end;
        }
        let mut i = self.scanned;
        while i < buf.len() {
            if buf[i] == b'\n' {
                match (buf.get(i + 1), buf.get(i + 2)) {
                    (Some(b'\n'), _) => {
                        self.end = Some(i + 2);
                        break;
                    }
                    (Some(b'\r'), Some(b'\n')) => {
                        self.end = Some(i + 3);
                        break;
                    }
                    // Undecided until more bytes arrive: look at this newline again then.
                    (None, _) | (Some(b'\r'), None) => break,
                    _ => {}
                }
            }
            i += 1;
        }
        self.scanned = i;
        self.end
    }

    /// True if `buf` (already passed to [`HeadScanner::scan`]) should be parsed now: the end of
    /// the head is in it, or it has doubled since the last parse. Records the parse.
    pub fn should_parse(&mut self, buf: &[u8]) -> bool {
        if self.end.is_some() || buf.len() >= self.parsed_at.saturating_mul(2).max(1) {
            self.parsed_at = buf.len();
            true
        } else {
            false
        }
    }
}

/// Reads one request head from `r`, using and refilling `buf` (bytes after the head stay in
/// `buf`). Returns `Ok(None)` on a clean EOF before any byte of a head. Each read costs time in
/// proportion to the bytes it brought, not to the head so far ([`HeadScanner`]). At most
/// [`DEFAULT_MAX_HEADERS`] fields.
pub async fn read_request_head<R: AsyncRead + Unpin>(
    r: &mut R,
    buf: &mut BytesMut,
    max_bytes: usize,
) -> Result<Option<RequestHead>, HeadError> {
    read_request_head_limited(r, buf, max_bytes, DEFAULT_MAX_HEADERS).await
}

/// Outcome of one parse attempt of a head.
enum Parsed<T> {
    Complete(T, usize),
    Partial,
}

/// Rewrites an `HTTP/1.x` version with `x` of 2..=9 to `HTTP/1.1` in place: a recipient treats a
/// higher minor version as the highest it supports (RFC 9110 §2.5). `request`: the version ends
/// the first line; otherwise it starts it. Returns true if it rewrote something.
fn downgrade_minor_version(buf: &mut BytesMut, request: bool) -> bool {
    let at = if request {
        let Some(nl) = buf.iter().position(|&b| b == b'\n') else {
            return false;
        };
        let end = if nl > 0 && buf[nl - 1] == b'\r' {
            nl - 1
        } else {
            nl
        };
        if end < 9 || &buf[end - 9..end - 1] != b" HTTP/1." {
            return false;
        }
        end - 1
    } else {
        if buf.len() < 9 || &buf[..7] != b"HTTP/1." || buf[8] != b' ' {
            return false;
        }
        7
    };
    if (b'2'..=b'9').contains(&buf[at]) {
        buf[at] = b'1';
        true
    } else {
        false
    }
}

/// The error for a request head over `max_bytes` (`buf` holds its start): `414` when the
/// request line alone does not fit, `431` otherwise.
fn request_too_large(buf: &[u8], max_bytes: usize) -> HeadError {
    match buf.iter().position(|&b| b == b'\n') {
        Some(end) if end < max_bytes => HeadError::TooLarge(max_bytes),
        _ => HeadError::UriTooLong(max_bytes),
    }
}

fn parse_request(
    buf: &mut BytesMut,
    max_fields: usize,
    max_bytes: usize,
) -> Result<Parsed<RequestHead>, HeadError> {
    let mut downgraded = false;
    loop {
        let mut hs = [httparse::EMPTY_HEADER; FORWARD_MAX_HEADERS];
        let mut req = httparse::Request::new(&mut hs);
        return match req.parse(buf) {
            Ok(httparse::Status::Complete(n)) => {
                if n > max_bytes {
                    return Err(request_too_large(buf, max_bytes));
                }
                if req.headers.len() > max_fields {
                    return Err(HeadError::TooLarge(max_bytes));
                }
                let head = RequestHead {
                    method: req.method.unwrap_or_default().to_string(),
                    target: req.path.unwrap_or_default().to_string(),
                    minor: req.version.unwrap_or(1),
                    headers: owned_headers(req.headers),
                };
                Ok(Parsed::Complete(head, n))
            }
            Ok(httparse::Status::Partial) => Ok(Parsed::Partial),
            Err(httparse::Error::Version) if !downgraded && downgrade_minor_version(buf, true) => {
                downgraded = true;
                continue;
            }
            // The version is checked before the line ends: decide once the line is in.
            Err(httparse::Error::Version) if !buf.contains(&b'\n') => Ok(Parsed::Partial),
            Err(e) => Err(parse_error(e, max_bytes)),
        };
    }
}

fn parse_response(
    buf: &mut BytesMut,
    max_fields: usize,
    max_bytes: usize,
) -> Result<Parsed<ResponseHead>, HeadError> {
    let mut downgraded = false;
    loop {
        let mut hs = [httparse::EMPTY_HEADER; FORWARD_MAX_HEADERS];
        let mut res = httparse::Response::new(&mut hs);
        return match res.parse(buf) {
            Ok(httparse::Status::Complete(n)) => {
                if n > max_bytes || res.headers.len() > max_fields {
                    return Err(HeadError::TooLarge(max_bytes));
                }
                // Three digits, but only 100..=599 are status codes (RFC 9110 §15): `050`
                // would be re-sent as `50`, which is not a status line at all.
                let code = res.code.unwrap_or_default();
                if !(100..=599).contains(&code) {
                    return Err(HeadError::Malformed(format!(
                        "invalid status code {code:03}"
                    )));
                }
                let head = ResponseHead {
                    status: res.code.unwrap_or_default(),
                    reason: res.reason.unwrap_or_default().to_string(),
                    minor: res.version.unwrap_or(1),
                    headers: owned_headers(res.headers),
                };
                Ok(Parsed::Complete(head, n))
            }
            Ok(httparse::Status::Partial) => Ok(Parsed::Partial),
            Err(httparse::Error::Version) if !downgraded && downgrade_minor_version(buf, false) => {
                downgraded = true;
                continue;
            }
            Err(e) => Err(parse_error(e, max_bytes)),
        };
    }
}

/// [`read_request_head`] with a field limit of `max_fields` (at most [`FORWARD_MAX_HEADERS`]).
pub async fn read_request_head_limited<R: AsyncRead + Unpin>(
    r: &mut R,
    buf: &mut BytesMut,
    max_bytes: usize,
    max_fields: usize,
) -> Result<Option<RequestHead>, HeadError> {
    let mut scanner = HeadScanner::new();
    loop {
        // Tolerate empty lines before a request line (RFC 9112 §2.2).
        while buf.starts_with(b"\r\n") || buf.starts_with(b"\n") {
            let n = if buf.starts_with(b"\r\n") { 2 } else { 1 };
            buf.advance(n);
            scanner.reset();
        }
        if !buf.is_empty() {
            scanner.scan(buf);
            if scanner.should_parse(buf) {
                if let Parsed::Complete(head, n) = parse_request(buf, max_fields, max_bytes)? {
                    buf.advance(n);
                    return Ok(Some(head));
                }
            }
            if buf.len() > max_bytes {
                return Err(request_too_large(buf, max_bytes));
            }
        }
        if fill(r, buf).await? == 0 {
            return if buf.is_empty() {
                Ok(None)
            } else {
                Err(HeadError::Truncated)
            };
        }
    }
}

/// Reads one response head from `r` (see [`read_request_head`]). EOF before a complete head is
/// [`HeadError::Truncated`]. At most [`DEFAULT_MAX_HEADERS`] fields.
pub async fn read_response_head<R: AsyncRead + Unpin>(
    r: &mut R,
    buf: &mut BytesMut,
    max_bytes: usize,
) -> Result<ResponseHead, HeadError> {
    read_response_head_limited(r, buf, max_bytes, DEFAULT_MAX_HEADERS).await
}

/// [`read_response_head`] with a field limit of `max_fields` (at most [`FORWARD_MAX_HEADERS`]).
pub async fn read_response_head_limited<R: AsyncRead + Unpin>(
    r: &mut R,
    buf: &mut BytesMut,
    max_bytes: usize,
    max_fields: usize,
) -> Result<ResponseHead, HeadError> {
    let mut scanner = HeadScanner::new();
    loop {
        if !buf.is_empty() {
            scanner.scan(buf);
            if scanner.should_parse(buf) {
                if let Parsed::Complete(head, n) = parse_response(buf, max_fields, max_bytes)? {
                    buf.advance(n);
                    return Ok(head);
                }
            }
            if buf.len() > max_bytes {
                return Err(HeadError::TooLarge(max_bytes));
            }
        }
        if fill(r, buf).await? == 0 {
            return Err(HeadError::Truncated);
        }
    }
}

fn write_headers(out: &mut Vec<u8>, headers: &[Header]) {
    for h in headers {
        out.extend_from_slice(h.name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(&h.value);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
}

/// Serialises a request head (always as HTTP/1.1 unless `minor` is 0).
pub fn encode_request_head(head: &RequestHead) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    let _ = write!(
        ByteWriter(&mut out),
        "{} {} HTTP/1.{}\r\n",
        head.method,
        head.target,
        head.minor
    );
    write_headers(&mut out, &head.headers);
    out
}

/// Serialises a response head.
pub fn encode_response_head(head: &ResponseHead) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    let _ = write!(
        ByteWriter(&mut out),
        "HTTP/1.{} {} {}\r\n",
        head.minor,
        head.status,
        head.reason
    );
    write_headers(&mut out, &head.headers);
    out
}

struct ByteWriter<'a>(&'a mut Vec<u8>);
impl std::fmt::Write for ByteWriter<'_> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.0.extend_from_slice(s.as_bytes());
        Ok(())
    }
}

/// Which side of a body copy failed.
#[derive(Debug, thiserror::Error)]
pub enum CopyError {
    /// Reading the source failed, or its framing was invalid or cut short.
    #[error("body source: {0}")]
    Read(io::Error),
    /// Writing to the destination failed.
    #[error("body destination: {0}")]
    Write(io::Error),
}

impl CopyError {
    /// The underlying I/O error.
    pub fn io(&self) -> &io::Error {
        match self {
            CopyError::Read(e) | CopyError::Write(e) => e,
        }
    }
}

fn bad_framing(msg: &str) -> CopyError {
    CopyError::Read(io::Error::new(io::ErrorKind::InvalidData, msg.to_string()))
}

fn truncated() -> CopyError {
    CopyError::Read(io::Error::new(
        io::ErrorKind::UnexpectedEof,
        "body ended before its framing said",
    ))
}

/// Incremental decoder of one message body: yields its data pieces, leaves what follows the
/// body in the caller's buffer.
#[derive(Debug)]
pub struct BodyDecoder {
    state: DecodeState,
    /// Body bytes yielded so far.
    pub total: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DecodeState {
    /// This many bytes remain of a fixed-length body (or of the current chunk when `chunked`).
    Data { left: u64, chunked: bool },
    /// Chunked: the CRLF after chunk data is next.
    ChunkEnd,
    /// Chunked: a chunk-size line is next.
    ChunkSize,
    /// Until EOF.
    Close,
    /// The body is complete.
    Done,
}

impl BodyDecoder {
    /// A decoder for a body of kind `kind`.
    pub fn new(kind: BodyKind) -> BodyDecoder {
        let state = match kind {
            BodyKind::None | BodyKind::Length(0) => DecodeState::Done,
            BodyKind::Length(n) => DecodeState::Data {
                left: n,
                chunked: false,
            },
            BodyKind::Chunked => DecodeState::ChunkSize,
            BodyKind::CloseDelimited => DecodeState::Close,
        };
        BodyDecoder { state, total: 0 }
    }

    /// True once the whole body has been yielded.
    pub fn is_done(&self) -> bool {
        self.state == DecodeState::Done
    }

    /// The next data piece, or `None` when the body is complete. Errors are
    /// [`CopyError::Read`]: truncation, invalid framing, or a failed read.
    pub async fn next<R: AsyncRead + Unpin>(
        &mut self,
        r: &mut R,
        buf: &mut BytesMut,
    ) -> Result<Option<Bytes>, CopyError> {
        loop {
            match self.state {
                DecodeState::Done => return Ok(None),
                DecodeState::Data { left, chunked } => {
                    if buf.is_empty() && fill(r, buf).await.map_err(CopyError::Read)? == 0 {
                        return Err(truncated());
                    }
                    let n = (buf.len() as u64).min(left) as usize;
                    let piece = buf.split_to(n).freeze();
                    let left = left - n as u64;
                    self.state = match (left, chunked) {
                        (0, true) => DecodeState::ChunkEnd,
                        (0, false) => DecodeState::Done,
                        (left, chunked) => DecodeState::Data { left, chunked },
                    };
                    self.total += n as u64;
                    return Ok(Some(piece));
                }
                DecodeState::Close => {
                    if buf.is_empty() && fill(r, buf).await.map_err(CopyError::Read)? == 0 {
                        self.state = DecodeState::Done;
                        return Ok(None);
                    }
                    let piece = buf.split().freeze();
                    self.total += piece.len() as u64;
                    return Ok(Some(piece));
                }
                DecodeState::ChunkEnd => {
                    let crlf = read_line(r, buf, 2).await?;
                    if !crlf.is_empty() {
                        return Err(bad_framing("missing CRLF after chunk data"));
                    }
                    self.state = DecodeState::ChunkSize;
                }
                DecodeState::ChunkSize => {
                    let line = read_line(r, buf, MAX_CHUNK_LINE).await?;
                    let size = parse_chunk_size(&line)?;
                    if size > 0 {
                        self.state = DecodeState::Data {
                            left: size,
                            chunked: true,
                        };
                        continue;
                    }
                    // Trailer section: header lines until an empty line; dropped.
                    let mut trailer_bytes = 0usize;
                    loop {
                        let l = read_line(r, buf, MAX_CHUNK_LINE).await?;
                        if l.is_empty() {
                            break;
                        }
                        // Only field lines until the empty line (RFC 9112 §7.1.2): anything
                        // else (a request line sent after `0`, say) is a framing error, never
                        // swallowed as a trailer.
                        if !is_field_line(&l) {
                            return Err(bad_framing("invalid trailer field line"));
                        }
                        trailer_bytes += l.len();
                        if trailer_bytes > MAX_TRAILER_BYTES {
                            return Err(bad_framing("trailer section too large"));
                        }
                    }
                    self.state = DecodeState::Done;
                    return Ok(None);
                }
            }
        }
    }
}

/// The size of a chunk-size line (RFC 9112 §7.1): `1*HEXDIG`, then nothing or optional
/// whitespace and chunk extensions (`;` ...). No sign, no leading whitespace, no control
/// characters; leading zeros are fine, a value over 60 bits is refused.
fn parse_chunk_size(line: &[u8]) -> Result<u64, CopyError> {
    let invalid = || bad_framing("invalid chunk size line");
    let digits = line.iter().take_while(|b| b.is_ascii_hexdigit()).count();
    if digits == 0 {
        return Err(invalid());
    }
    let (hex, rest) = line.split_at(digits);
    let ext = rest.trim_ascii_start();
    if !(ext.is_empty() || ext[0] == b';')
        || rest.iter().any(|&b| b == 0x7f || (b < 0x20 && b != b'\t'))
    {
        return Err(invalid());
    }
    let hex = &hex[hex.iter().take_while(|&&b| b == b'0').count()..];
    if hex.len() > 15 {
        return Err(bad_framing("chunk size too large"));
    }
    // Only hex digits, so this is ASCII and parses.
    let hex = std::str::from_utf8(hex).map_err(|_| invalid())?;
    if hex.is_empty() {
        return Ok(0);
    }
    u64::from_str_radix(hex, 16).map_err(|_| invalid())
}

/// True if `line` is a field line: a token, `:`, and a value without control characters other
/// than HTAB (RFC 9110 §5.5; obs-text allowed).
fn is_field_line(line: &[u8]) -> bool {
    let Some(colon) = line.iter().position(|&b| b == b':') else {
        return false;
    };
    is_token(&line[..colon])
        && line[colon + 1..]
            .iter()
            .all(|&b| b == b'\t' || (b >= 0x20 && b != 0x7f))
}

/// Reads one line (without its CRLF or LF) of at most `max` bytes.
async fn read_line<R: AsyncRead + Unpin>(
    r: &mut R,
    buf: &mut BytesMut,
    max: usize,
) -> Result<Vec<u8>, CopyError> {
    loop {
        // The limit holds however the bytes arrived: a long line found whole in one read is
        // refused as one that is still coming.
        let end = buf.iter().take(max + 2).position(|&b| b == b'\n');
        if end.is_none() && buf.len() > max + 1 {
            return Err(bad_framing("line too long in chunked body"));
        }
        if let Some(pos) = end {
            let mut line = buf.split_to(pos + 1).to_vec();
            line.pop();
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            return Ok(line);
        }
        if fill(r, buf).await.map_err(CopyError::Read)? == 0 {
            return Err(truncated());
        }
    }
}

/// How a body is written out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutFraming {
    /// Bytes as they are (fixed length, or close-delimited).
    Raw,
    /// Chunked transfer coding; the last chunk is written at the end.
    Chunked,
}

/// Copies a body of kind `kind` from `buf` + `r` to `w`, encoded as `out`, then flushes.
/// Returns the number of body bytes. On error nothing more is written: in particular the last
/// chunk of a chunked body is never written for a body that did not end properly.
pub async fn copy_body<R, W>(
    kind: BodyKind,
    r: &mut R,
    buf: &mut BytesMut,
    w: &mut W,
    out: OutFraming,
) -> Result<u64, CopyError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    copy_body_counted(kind, r, buf, w, out, &std::sync::atomic::AtomicU64::new(0)).await
}

/// [`copy_body`] that adds the body bytes written to `w` so far to `written` as it goes, so a
/// caller whose copy failed part way, or that is abandoned mid-way (another task reads the
/// counter), knows how much of the body went out (framing not counted).
pub async fn copy_body_counted<R, W>(
    kind: BodyKind,
    r: &mut R,
    buf: &mut BytesMut,
    w: &mut W,
    out: OutFraming,
    written: &std::sync::atomic::AtomicU64,
) -> Result<u64, CopyError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut dec = BodyDecoder::new(kind);
    while let Some(piece) = dec.next(r, buf).await? {
        let n = piece.len() as u64;
        write_piece(w, out, piece).await?;
        written.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
    }
    let total = dec.total;
    if out == OutFraming::Chunked {
        w.write_all(b"0\r\n\r\n").await.map_err(CopyError::Write)?;
    }
    w.flush().await.map_err(CopyError::Write)?;
    Ok(total)
}

/// Writes one body piece with the given framing.
pub async fn write_piece<W: AsyncWrite + Unpin>(
    w: &mut W,
    out: OutFraming,
    piece: Bytes,
) -> Result<(), CopyError> {
    if piece.is_empty() {
        return Ok(());
    }
    if out == OutFraming::Chunked {
        let size = format!("{:x}\r\n", piece.len());
        w.write_all(size.as_bytes())
            .await
            .map_err(CopyError::Write)?;
        w.write_all(&piece).await.map_err(CopyError::Write)?;
        w.write_all(b"\r\n").await.map_err(CopyError::Write)
    } else {
        w.write_all(&piece).await.map_err(CopyError::Write)
    }
}

/// Framing headers for a body of kind `kind` re-sent with `out` framing.
pub fn framing_header(kind: BodyKind) -> Option<Header> {
    match kind {
        BodyKind::None | BodyKind::CloseDelimited => None,
        BodyKind::Length(n) => Some(Header::new("Content-Length", n.to_string())),
        BodyKind::Chunked => Some(Header::new("Transfer-Encoding", "chunked")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn parse_req(bytes: &[u8]) -> Result<Option<RequestHead>, HeadError> {
        let mut r = bytes;
        let mut buf = BytesMut::new();
        read_request_head(&mut r, &mut buf, DEFAULT_MAX_HEADER_BYTES).await
    }

    #[tokio::test]
    async fn parses_absolute_form_request() {
        let head = parse_req(b"GET http://example.com/a?b HTTP/1.1\r\nHost: x\r\nConnection: close, X-Foo\r\nX-Foo: 1\r\nAccept: */*\r\n\r\n")
            .await
            .unwrap()
            .unwrap();
        assert_eq!(head.method, "GET");
        assert_eq!(head.target, "http://example.com/a?b");
        assert_eq!(head.minor, 1);
        let mut hs = head.headers.clone();
        let tokens = strip_hop_by_hop(&mut hs);
        assert_eq!(tokens, vec!["close", "x-foo"]);
        assert_eq!(
            hs.iter().map(|h| h.name.as_str()).collect::<Vec<_>>(),
            vec!["Host", "Accept"]
        );
    }

    #[tokio::test]
    async fn eof_and_truncation_and_garbage() {
        assert!(parse_req(b"").await.unwrap().is_none());
        assert!(matches!(
            parse_req(b"GET / HTTP/1.1\r\nHost").await,
            Err(HeadError::Truncated)
        ));
        assert!(matches!(
            parse_req(b"\x16\x03\x01 garbage\r\n\r\n").await,
            Err(HeadError::Malformed(_))
        ));
    }

    #[tokio::test]
    async fn oversized_head_is_too_large() {
        let mut req = b"GET / HTTP/1.1\r\n".to_vec();
        req.extend_from_slice(b"X-Big: ");
        req.extend(std::iter::repeat_n(b'a', DEFAULT_MAX_HEADER_BYTES + 10));
        req.extend_from_slice(b"\r\n\r\n");
        assert!(matches!(parse_req(&req).await, Err(HeadError::TooLarge(_))));
        // A request line that alone does not fit is a URI too long (414), whether its end
        // arrived or not.
        let mut long = b"GET http://a/".to_vec();
        long.extend(std::iter::repeat_n(b'a', DEFAULT_MAX_HEADER_BYTES + 10));
        assert!(matches!(
            parse_req(&long).await,
            Err(HeadError::UriTooLong(DEFAULT_MAX_HEADER_BYTES))
        ));
        long.extend_from_slice(b" HTTP/1.1\r\nHost: a\r\n\r\n");
        assert!(matches!(
            parse_req(&long).await,
            Err(HeadError::UriTooLong(_))
        ));
        let mut many = b"GET / HTTP/1.1\r\n".to_vec();
        for i in 0..(DEFAULT_MAX_HEADERS + 1) {
            many.extend_from_slice(format!("X-{i}: v\r\n").as_bytes());
        }
        many.extend_from_slice(b"\r\n");
        assert!(matches!(
            parse_req(&many).await,
            Err(HeadError::TooLarge(_))
        ));
    }

    /// A reader that yields one byte per read, like a slowloris client.
    struct Trickle<'a>(&'a [u8]);

    impl AsyncRead for Trickle<'_> {
        fn poll_read(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
            out: &mut tokio::io::ReadBuf<'_>,
        ) -> std::task::Poll<io::Result<()>> {
            if let Some((&b, rest)) = self.0.split_first() {
                out.put_slice(&[b]);
                self.0 = rest;
            }
            std::task::Poll::Ready(Ok(()))
        }
    }

    async fn parse_trickled(
        bytes: &[u8],
        max: usize,
    ) -> (Result<Option<RequestHead>, HeadError>, BytesMut) {
        let mut r = Trickle(bytes);
        let mut buf = BytesMut::new();
        let head = read_request_head(&mut r, &mut buf, max).await;
        (head, buf)
    }

    #[tokio::test]
    async fn byte_at_a_time_equals_whole_buffer() {
        let cases: &[&[u8]] = &[
            b"GET http://example.com/a?b HTTP/1.1\r\nHost: x\r\nAccept: */*\r\n\r\n",
            b"\r\n\r\nGET / HTTP/1.0\r\nX-A: 1\r\n\r\nrest",
            b"GET / HTTP/1.1\nHost: lf-only\n\nNEXT",
            b"GET / HTTP/1.1\r\nHost: mixed\n\r\nbody",
            b"POST / HTTP/1.1\r\nContent-Length: 3\r\n\r\nabcGET / HTTP/1.1\r\n\r\n",
            b"GET / HTTP/1.1\r\n\r\n",
        ];
        for &case in cases {
            let mut whole = case;
            let mut wbuf = BytesMut::new();
            let w = read_request_head(&mut whole, &mut wbuf, DEFAULT_MAX_HEADER_BYTES)
                .await
                .unwrap()
                .unwrap();
            let (t, tbuf) = parse_trickled(case, DEFAULT_MAX_HEADER_BYTES).await;
            assert_eq!(
                t.unwrap().unwrap(),
                w,
                "{:?}",
                String::from_utf8_lossy(case)
            );
            // The trickled read stops at the head's end; the whole read keeps what follows.
            let consumed = case.len() - whole.len() - wbuf.len();
            assert_eq!(&case[consumed..consumed + tbuf.len()], &tbuf[..]);
        }
    }

    #[tokio::test]
    async fn byte_at_a_time_still_enforces_limits() {
        // Head size: 431 once the buffer passes the limit, without waiting for the end.
        let mut big = b"GET / HTTP/1.1\r\nX-Big: ".to_vec();
        big.extend(std::iter::repeat_n(b'a', 2000));
        let (r, buf) = parse_trickled(&big, 1024).await;
        assert!(matches!(r, Err(HeadError::TooLarge(1024))), "{r:?}");
        assert_eq!(buf.len(), 1025);
        // Field count.
        let mut many = b"GET / HTTP/1.1\r\n".to_vec();
        for i in 0..(DEFAULT_MAX_HEADERS + 1) {
            many.extend_from_slice(format!("X-{i}: v\r\n").as_bytes());
        }
        many.extend_from_slice(b"\r\n");
        let (r, _) = parse_trickled(&many, DEFAULT_MAX_HEADER_BYTES).await;
        assert!(matches!(r, Err(HeadError::TooLarge(_))), "{r:?}");
        // A complete head over the size limit.
        let mut over = b"GET / HTTP/1.1\r\nX-Big: ".to_vec();
        over.extend(std::iter::repeat_n(b'a', 1000));
        over.extend_from_slice(b"\r\n\r\n");
        let (r, _) = parse_trickled(&over, 1000).await;
        assert!(matches!(r, Err(HeadError::TooLarge(1000))), "{r:?}");
        // Garbage is refused at its first bytes, not after the header timeout.
        let (r, buf) = parse_trickled(b"\x16\x03\x01\x02\x00 no end of head here", 1024).await;
        assert!(matches!(r, Err(HeadError::Malformed(_))), "{r:?}");
        assert_eq!(buf.len(), 1);
        // Truncation and clean EOF.
        let (r, _) = parse_trickled(b"GET / HTTP/1.1\r\nHost: x\r\n", 1024).await;
        assert!(matches!(r, Err(HeadError::Truncated)), "{r:?}");
        let (r, _) = parse_trickled(b"", 1024).await;
        assert!(r.unwrap().is_none());
    }

    #[test]
    fn scanner_looks_at_each_byte_once_and_parses_rarely() {
        let head = b"GET / HTTP/1.1\r\nHost: x\r\nX-Slow: 1\r\n\r\n";
        let mut s = HeadScanner::new();
        let mut parses = 0;
        for n in 1..=head.len() {
            let end = s.scan(&head[..n]);
            // Never further than one undecided newline behind the data.
            assert_eq!(end.is_some(), n == head.len());
            assert!(
                end.is_some() || n - s.scanned <= 2,
                "scanned {} of {n}",
                s.scanned
            );
            if s.should_parse(&head[..n]) {
                parses += 1;
            }
        }
        // Lengths 1, 2, 4, 8, 16, 32 and the end.
        assert_eq!(parses, 7);
        assert_eq!(s.scan(head), Some(head.len()));
        // Responses too, LF-only endings included.
        let mut s = HeadScanner::new();
        assert_eq!(s.scan(b"HTTP/1.1 200 OK\n"), None);
        assert_eq!(s.scan(b"HTTP/1.1 200 OK\n\nbody"), Some(17));
    }

    #[tokio::test]
    async fn request_framing_rules() {
        let h = |extra: &str| RequestHead {
            method: "POST".into(),
            target: "/".into(),
            minor: 1,
            headers: extra
                .split('|')
                .filter(|s| !s.is_empty())
                .map(|kv| {
                    let (k, v) = kv.split_once(':').unwrap();
                    Header::new(k, v.trim())
                })
                .collect(),
        };
        assert_eq!(request_body_kind(&h("")).unwrap(), BodyKind::None);
        assert_eq!(
            request_body_kind(&h("Content-Length: 5")).unwrap(),
            BodyKind::Length(5)
        );
        assert_eq!(
            request_body_kind(&h("Content-Length: 5, 5")).unwrap(),
            BodyKind::Length(5)
        );
        assert!(request_body_kind(&h("Content-Length: 5|Content-Length: 6")).is_err());
        assert!(request_body_kind(&h("Content-Length: -1")).is_err());
        assert_eq!(
            request_body_kind(&h("Transfer-Encoding: chunked")).unwrap(),
            BodyKind::Chunked
        );
        assert!(request_body_kind(&h("Transfer-Encoding: chunked|Content-Length: 3")).is_err());
        assert!(request_body_kind(&h("Transfer-Encoding: gzip, chunked")).is_err());
    }

    #[test]
    fn a_response_without_date_is_dated_once() {
        let mut hs = vec![Header::new("Content-Length", "0")];
        add_date_if_missing(&mut hs);
        let date = header_str(&hs, "date").expect("a Date field").to_string();
        // IMF-fixdate: "Sun, 06 Nov 1994 08:49:37 GMT".
        assert_eq!(date.len(), 29, "{date}");
        assert!(
            date.ends_with(" GMT") && date.as_bytes()[3] == b',',
            "{date}"
        );
        let kept = vec![Header::new("date", "Sun, 06 Nov 1994 08:49:37 GMT")];
        let mut hs = kept.clone();
        add_date_if_missing(&mut hs);
        assert_eq!(hs, kept, "an origin's Date is kept as it is");
    }

    #[tokio::test]
    async fn response_framing_rules() {
        let head = |status: u16, hs: Vec<Header>| ResponseHead {
            status,
            reason: String::new(),
            minor: 1,
            headers: hs,
        };
        let cl = vec![Header::new("Content-Length", "10")];
        assert_eq!(
            response_body_kind("HEAD", &head(200, cl.clone())).unwrap(),
            BodyKind::None
        );
        // Methods are case-sensitive: `head` is not HEAD, and its reply has the body it says.
        assert_eq!(
            response_body_kind("head", &head(200, cl.clone())).unwrap(),
            BodyKind::Length(10)
        );
        assert_eq!(
            response_body_kind("GET", &head(304, cl.clone())).unwrap(),
            BodyKind::None
        );
        assert_eq!(
            response_body_kind("GET", &head(200, cl)).unwrap(),
            BodyKind::Length(10)
        );
        assert_eq!(
            response_body_kind("GET", &head(200, vec![])).unwrap(),
            BodyKind::CloseDelimited
        );
    }

    #[tokio::test]
    async fn a_chunk_line_over_the_limit_is_refused_however_it_arrived() {
        let mut line = b"1;".to_vec();
        line.extend(std::iter::repeat_n(b'x', 5 * MAX_CHUNK_LINE));
        line.extend_from_slice(b"\r\nA\r\n0\r\n\r\n");
        // Already buffered whole (one read brought it all) ...
        let mut buf = BytesMut::from(&line[..]);
        let mut nothing: &[u8] = b"";
        let r = BodyDecoder::new(BodyKind::Chunked)
            .next(&mut nothing, &mut buf)
            .await;
        assert!(r.is_err(), "{r:?}");
        // ... or still arriving.
        let mut buf = BytesMut::new();
        let mut rest = &line[..];
        let r = BodyDecoder::new(BodyKind::Chunked)
            .next(&mut rest, &mut buf)
            .await;
        assert!(r.is_err(), "{r:?}");
        // A line at the limit is a line.
        let mut ok = b"1;".to_vec();
        ok.extend(std::iter::repeat_n(b'x', MAX_CHUNK_LINE - 2));
        ok.extend_from_slice(b"\r\nA\r\n0\r\n\r\n");
        let mut buf = BytesMut::from(&ok[..]);
        let r = BodyDecoder::new(BodyKind::Chunked)
            .next(&mut nothing, &mut buf)
            .await;
        assert_eq!(r.unwrap().as_deref(), Some(&b"A"[..]));
    }

    #[tokio::test]
    async fn chunked_round_trip_and_rest_stays_buffered() {
        let input = b"5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nX-Trailer: t\r\n\r\nNEXT";
        let mut r = &input[..];
        let mut buf = BytesMut::new();
        let mut out = Vec::new();
        let n = copy_body(
            BodyKind::Chunked,
            &mut r,
            &mut buf,
            &mut out,
            OutFraming::Raw,
        )
        .await
        .unwrap();
        assert_eq!(n, 11);
        assert_eq!(out, b"hello world");
        assert_eq!(&buf[..], b"NEXT");

        let mut r = &b"hello world"[..];
        let mut buf = BytesMut::new();
        let mut out = Vec::new();
        copy_body(
            BodyKind::Length(11),
            &mut r,
            &mut buf,
            &mut out,
            OutFraming::Chunked,
        )
        .await
        .unwrap();
        assert_eq!(out, b"b\r\nhello world\r\n0\r\n\r\n");
    }

    #[tokio::test]
    async fn a_copy_cut_part_way_says_how_much_of_the_body_went_out() {
        // Two chunks arrive, the third is cut: the first two (8 body bytes) were written.
        let mut r = &b"3\r\nabc\r\n5\r\ndefgh\r\n9\r\nijk"[..];
        let mut out = Vec::new();
        let counter = std::sync::atomic::AtomicU64::new(0);
        let e = copy_body_counted(
            BodyKind::Chunked,
            &mut r,
            &mut BytesMut::new(),
            &mut out,
            OutFraming::Raw,
            &counter,
        )
        .await
        .unwrap_err();
        let written = counter.into_inner();
        assert!(matches!(e, CopyError::Read(_)));
        assert_eq!(written, out.len() as u64);
        assert!((8..=11).contains(&written), "{written}");
    }

    #[tokio::test]
    async fn truncated_bodies_are_read_errors_without_last_chunk() {
        let mut r = &b"5\r\nhel"[..];
        let mut buf = BytesMut::new();
        let mut out = Vec::new();
        let e = copy_body(
            BodyKind::Chunked,
            &mut r,
            &mut buf,
            &mut out,
            OutFraming::Chunked,
        )
        .await
        .unwrap_err();
        assert!(matches!(e, CopyError::Read(_)));
        assert!(!out.ends_with(b"0\r\n\r\n"));
        let mut r = &b"abc"[..];
        let e = copy_body(
            BodyKind::Length(4),
            &mut r,
            &mut BytesMut::new(),
            &mut Vec::new(),
            OutFraming::Raw,
        )
        .await
        .unwrap_err();
        assert!(matches!(e, CopyError::Read(_)));
        let mut r = &b"zz\r\n"[..];
        assert!(copy_body(
            BodyKind::Chunked,
            &mut r,
            &mut BytesMut::new(),
            &mut Vec::new(),
            OutFraming::Raw
        )
        .await
        .is_err());
    }

    #[test]
    fn transfer_codings_are_parsed_strictly() {
        let te = |v: &[u8]| transfer_codings(&[Header::new("Transfer-Encoding", v)]);
        assert_eq!(transfer_codings(&[]).unwrap(), None);
        assert_eq!(te(b" Chunked ").unwrap().unwrap(), ["chunked"]);
        assert_eq!(
            te(b"gzip;q=1, ,chunked").unwrap().unwrap(),
            ["gzip", "chunked"]
        );
        for bad in [
            &b"chunked\xff"[..],
            b"\xe9chunked",
            b"",
            b" , ",
            b"chun ked",
            b"chunked;",
        ] {
            assert!(te(bad).is_err(), "{:?}", String::from_utf8_lossy(bad));
        }
        // Only a lone chunked frames a body; other codings are 501 or 400 for a request.
        let req = |v: &[u8]| RequestHead {
            method: "POST".into(),
            target: "/".into(),
            minor: 1,
            headers: vec![Header::new("Transfer-Encoding", v)],
        };
        assert!(matches!(
            request_body_kind(&req(b"gzip, chunked")),
            Err(HeadError::UnsupportedCoding(_))
        ));
        assert!(matches!(
            request_body_kind(&req(b"chunked, gzip")),
            Err(HeadError::Malformed(_))
        ));
        assert!(matches!(
            request_body_kind(&req(b"chunked, chunked")),
            Err(HeadError::Malformed(_))
        ));
        let mut r10 = req(b"chunked");
        r10.minor = 0;
        assert!(request_body_kind(&r10).is_err());
    }

    #[test]
    fn content_length_zero_is_kept_and_coded_length_removed() {
        let head = RequestHead {
            method: "POST".into(),
            target: "/".into(),
            minor: 1,
            headers: vec![Header::new("Content-Length", "0")],
        };
        assert_eq!(request_body_kind(&head).unwrap(), BodyKind::Length(0));
        let mut hs = vec![
            Header::new("Content-Length", "3"),
            Header::new("Transfer-Encoding", "chunked"),
        ];
        remove_length_if_coded(&mut hs);
        assert_eq!(hs, vec![Header::new("Transfer-Encoding", "chunked")]);
    }

    #[test]
    fn chunk_size_lines() {
        assert_eq!(parse_chunk_size(b"5").unwrap(), 5);
        assert_eq!(parse_chunk_size(b"00000000000000000001F").unwrap(), 31);
        assert_eq!(parse_chunk_size(b"a ; ext=1").unwrap(), 10);
        assert_eq!(parse_chunk_size(b"0").unwrap(), 0);
        for bad in [
            &b"+5"[..],
            b" 5",
            b"-5",
            b"5 x",
            b"0x5",
            b"",
            b"5\r",
            b"1000000000000000",
        ] {
            assert!(
                parse_chunk_size(bad).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
        assert!(is_field_line(b"X-T: v"));
        assert!(!is_field_line(b"GET / HTTP/1.1"));
        assert!(!is_field_line(b": v"));
    }

    #[tokio::test]
    async fn status_codes_outside_100_to_599_are_malformed() {
        for line in [
            &b"HTTP/1.1 050 X\r\n\r\n"[..],
            b"HTTP/1.1 000 X\r\n\r\n",
            b"HTTP/1.1 600 X\r\n\r\n",
        ] {
            let mut r = line;
            assert!(matches!(
                read_response_head(&mut r, &mut BytesMut::new(), 1024).await,
                Err(HeadError::Malformed(_))
            ));
        }
    }

    #[tokio::test]
    async fn higher_minor_versions_are_http_1_1() {
        let head = parse_req(b"GET / HTTP/1.2\r\nHost: a\r\n\r\n")
            .await
            .unwrap()
            .unwrap();
        assert_eq!(head.minor, 1);
        let (head, _) = parse_trickled(b"GET / HTTP/1.9\nHost: a\n\n", 1024).await;
        assert_eq!(head.unwrap().unwrap().minor, 1);
        assert!(parse_req(b"GET / HTTP/2.0\r\n\r\n").await.is_err());
        let mut r = &b"HTTP/1.3 200 OK\r\n\r\n"[..];
        let res = read_response_head(&mut r, &mut BytesMut::new(), 1024)
            .await
            .unwrap();
        assert_eq!((res.minor, res.status), (1, 200));
    }

    #[tokio::test]
    async fn stream_limits_allow_what_forwarding_adds() {
        let mut many = b"GET / HTTP/1.1\r\n".to_vec();
        for i in 0..FORWARD_MAX_HEADERS {
            many.extend_from_slice(format!("X-{i}: v\r\n").as_bytes());
        }
        many.extend_from_slice(b"\r\n");
        assert!(matches!(
            parse_req(&many).await,
            Err(HeadError::TooLarge(_))
        ));
        let mut r = &many[..];
        let head = read_request_head_limited(
            &mut r,
            &mut BytesMut::new(),
            forwarded_head_limit(DEFAULT_MAX_HEADER_BYTES),
            FORWARD_MAX_HEADERS,
        )
        .await
        .unwrap()
        .unwrap();
        assert_eq!(head.headers.len(), FORWARD_MAX_HEADERS);
    }

    #[test]
    fn encodes_heads() {
        let head = RequestHead {
            method: "GET".into(),
            target: "/x".into(),
            minor: 1,
            headers: vec![Header::new("Host", "a:1")],
        };
        assert_eq!(
            encode_request_head(&head),
            b"GET /x HTTP/1.1\r\nHost: a:1\r\n\r\n"
        );
        let res = ResponseHead {
            status: 404,
            reason: "Not Found".into(),
            minor: 1,
            headers: vec![],
        };
        assert_eq!(
            encode_response_head(&res),
            b"HTTP/1.1 404 Not Found\r\n\r\n"
        );
    }
}
