//! HTTP/2 clients of the HTTPS proxy endpoint (ALPN `h2`): many CONNECT tunnels and plain
//! `http://` requests as streams of one TLS connection (RFC 9113).
//!
//! What it does: runs an HTTP/2 server connection (the `h2` crate) with a stream limit
//! (SETTINGS_MAX_CONCURRENT_STREAMS) and receive windows from `[https_proxy]`, and serves each
//! stream in its own task:
//! - a CONNECT (§8.5: `:method CONNECT`, `:authority host:port`, no `:scheme` or `:path`) is
//!   checked like an HTTP/1.1 CONNECT (port policy) and carried as a tunnel, answered `200`
//!   optimistically or after the far side connected as `connect_reply` says; its DATA frames
//!   are the tunnel's bytes, END_STREAM closes one direction, a far-side failure resets the
//!   stream with CONNECT_ERROR. The bytes are pumped by the same code as HTTP/1.1 tunnels.
//! - a plain request (`:scheme http`, `:authority`, §8.3.1) is turned into the HTTP/1.1 request
//!   head the edge forwards for an absolute-form request (the same validation and rewriting,
//!   `client::prepare`; `Cookie` fields joined as §8.2.3 says, a body without
//!   `content-length` sent chunked) and carried on an `Http` stream; the reply head becomes
//!   HTTP/2 fields without the connection-specific ones (§8.2.2) and its body DATA frames.
//!
//! Malformed requests (§8.1.1: connection-specific fields, `te` other than `trailers`, a
//! CONNECT with `:scheme` or `:path`, a `content-length` that disagrees with the DATA) are
//! reset by the `h2` crate with PROTOCOL_ERROR, a stream error that leaves the other streams
//! alone. Requests the edge refuses (`https` scheme, a bad target, a refused port) and failures
//! before the reply get the same synthetic response as on HTTP/1.1
//! ([`crate::errors::EdgeError::h2_response`]); a reply cut after it started is reset with
//! INTERNAL_ERROR, so it never looks complete.
//!
//! Memory is bounded per connection: uploads by the receive windows (window released only when
//! the bytes went into the pool stream), replies by the HTTP/2 send window, since a DATA frame
//! is sent only for capacity the client granted (`H2Send`), and by one body buffer per stream.
//!
//! What it does NOT do: extended CONNECT (RFC 8441, WebSocket over HTTP/2; the
//! SETTINGS_ENABLE_CONNECT_PROTOCOL is not sent), server push, `100 Continue` (an `expect`
//! field is dropped and the body forwarded as it comes), trailers (dropped), priorities, or
//! HTTP/3.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{ready, Context, Poll};
use std::time::Instant;

use app::access::{Access, Peer};
use bytes::{Buf, Bytes, BytesMut};
use h2::server::SendResponse;
use h2::{Reason, RecvStream, SendStream};
use http::{HeaderName, HeaderValue, Method, Request, Response};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;
use tokio::task::JoinSet;
use tokio_rustls::server::TlsStream;

use crate::client::{self, ConnectReply, Ctx, Entry, ReplyProgress, VIA};
use crate::conn::Abort;
use crate::errors::EdgeError;
use crate::page::{self, PageClock};
use crate::transport::{StreamKind, Transport};
use crate::tunnel;
use http1::{BodyKind, CopyError, Header, OutFraming, RequestHead, ResponseHead};

/// HTTP/2 limits of the endpoint's connections (`[https_proxy]`).
#[derive(Debug, Clone, Copy)]
pub struct H2Limits {
    /// SETTINGS_MAX_CONCURRENT_STREAMS.
    pub max_concurrent_streams: u32,
    /// Initial receive window of each stream (SETTINGS_INITIAL_WINDOW_SIZE).
    pub stream_window: u32,
    /// Receive window of the connection.
    pub connection_window: u32,
}

/// Largest DATA payload sent at once, and the reply body buffer of a stream.
const SEND_CHUNK: usize = 16 * 1024;
/// Most reply bytes the `h2` crate may hold for one stream beyond what the client's window
/// allows (its send buffer); [`H2Send`] only sends what was granted, so this is a safety net.
const MAX_SEND_BUFFER: usize = 64 * 1024;

/// Serves one HTTP/2 client connection to completion.
pub(crate) async fn serve<T: Transport>(
    ctx: Arc<Ctx<T>>,
    tls: TlsStream<TcpStream>,
    peer: SocketAddr,
    limits: H2Limits,
) {
    let s = &ctx.settings;
    let handshake = h2::server::Builder::new()
        .max_concurrent_streams(limits.max_concurrent_streams)
        .initial_window_size(limits.stream_window)
        .initial_connection_window_size(limits.connection_window)
        .max_header_list_size(s.max_header_bytes as u32)
        .max_send_buffer_size(MAX_SEND_BUFFER)
        .handshake::<_, Bytes>(tls);
    let mut conn = match tokio::time::timeout(s.header_timeout, handshake).await {
        Ok(Ok(c)) => c,
        Ok(Err(e)) => {
            tracing::debug!(%peer, error = %e, "HTTP/2 client: no valid connection preface");
            return;
        }
        Err(_) => {
            tracing::debug!(%peer, "HTTP/2 client: connection preface not received in time");
            return;
        }
    };
    let mut streams = JoinSet::new();
    let mut draining = ctx.draining.clone();
    let mut closing = false;
    let idle = tokio::time::sleep(s.idle_timeout);
    tokio::pin!(idle);
    // The connection's page (`crate::page`): busy while a stream is open.
    let mut page = PageClock::default();
    loop {
        while streams.try_join_next().is_some() {}
        if streams.is_empty() && page.is_busy() {
            page.idle(Instant::now());
        }
        if streams.is_empty() && !closing {
            // The idle timeout runs while no stream is open.
            if idle.is_elapsed() {
                tracing::debug!(%peer, "idle HTTP/2 client connection closed");
                conn.graceful_shutdown();
                closing = true;
            }
        } else {
            idle.as_mut()
                .reset(tokio::time::Instant::now() + s.idle_timeout);
        }
        tokio::select! {
            r = conn.accept() => match r {
                Some(Ok((req, respond))) => {
                    let page_start = page.busy(Instant::now());
                    streams.spawn(stream(ctx.clone(), req, respond, peer, page_start));
                }
                Some(Err(e)) => {
                    if !e.is_io() || !closing {
                        tracing::debug!(%peer, error = %e, "HTTP/2 client connection ended by an error");
                    }
                    break;
                }
                None => break,
            },
            _ = &mut idle, if streams.is_empty() && !closing => {}
            _ = draining.changed(), if !closing => {
                // GOAWAY: streams in flight finish, no new ones are accepted.
                conn.graceful_shutdown();
                closing = true;
            }
            Some(_) = streams.join_next(), if !streams.is_empty() => {}
        }
    }
    // The connection is closed (or broke). Dropping it ends every stream's HTTP/2 side with an
    // error, so each stream task finishes (resetting its pool stream) and writes its access-log
    // line; the few that wait on the far side are aborted after a short grace.
    drop(conn);
    let ended = tokio::time::timeout(STREAM_END_GRACE, async {
        while streams.join_next().await.is_some() {}
    })
    .await;
    if ended.is_err() {
        tracing::debug!(%peer, streams = streams.len(), "HTTP/2 streams aborted after the connection closed");
    }
}

/// How long the streams of a closed client connection may take to end and log themselves.
const STREAM_END_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

/// How one stream's request ended, for the access log.
struct Outcome {
    status: u16,
    up: u64,
    down: u64,
    ttfb: Option<Instant>,
    outcome: String,
    detail: String,
}

/// Serves one HTTP/2 stream.
async fn stream<T: Transport>(
    ctx: Arc<Ctx<T>>,
    req: Request<RecvStream>,
    respond: SendResponse<Bytes>,
    peer: SocketAddr,
    page_start: Instant,
) {
    let started = Instant::now();
    if req.method() == Method::CONNECT {
        connect(&ctx, req, respond, peer, started).await;
        return;
    }
    let method = req.method().as_str().to_string();
    let target = req.uri().to_string();
    let result = request(&ctx, req, respond, page_start).await;
    // Built once the request is over: the record's duration runs to now.
    let record = Access::new(Peer::Client(peer), &method, &target, started);
    match result {
        Ok(o) => Access {
            status: o.status,
            bytes_up: o.up,
            bytes_down: o.down,
            ttfb: o.ttfb.map(|t| t.saturating_duration_since(started)),
            outcome: &o.outcome,
            detail: o.detail.into(),
            ..record
        }
        .log(),
        Err((err, mut respond)) => {
            let (head, body) = err.h2_response();
            // A reply to HEAD has no content (RFC 9113 §8.1.1, RFC 9110 §9.3.2).
            let head_only = method == "HEAD";
            if let Ok(mut send) = respond.send_response(head, head_only) {
                if !head_only {
                    let _ = send.send_data(body, true);
                }
            }
            record.failed(err.tag(), err.to_string()).log();
        }
    }
}

/// Translates an HTTP/2 request into the HTTP/1.1 head the edge forwards for an absolute-form
/// request (RFC 9113 §8.3.1: `:authority` is the target's authority; §8.2.3: `cookie` fields
/// are joined with "; "). `chunked`: the body's length is not known, so it goes chunked.
fn h1_head(req: &Request<RecvStream>) -> Result<(RequestHead, bool), EdgeError> {
    let uri = req.uri();
    match uri.scheme_str() {
        Some("http") => {}
        Some(other) => {
            return Err(EdgeError::BadRequest(format!(
                "scheme {other}: the proxy forwards http:// requests; use CONNECT for https"
            )))
        }
        None => return Err(EdgeError::BadRequest("request without :scheme".into())),
    }
    // Without `:authority`, the `host` field names the target (§8.3.1).
    let authority = match uri.authority() {
        Some(a) => a.as_str().to_string(),
        None => req
            .headers()
            .get(http::header::HOST)
            .and_then(|h| h.to_str().ok())
            .ok_or_else(|| EdgeError::BadRequest("request without :authority or host".into()))?
            .to_string(),
    };
    // `:path` is origin-form, or `*` for a server-wide OPTIONS (§8.3.1), which a proxy cannot
    // forward as such (the far side sends origin-form): anything else is malformed.
    let path = uri.path_and_query().map_or("/", |p| p.as_str());
    if !path.starts_with('/') {
        return Err(EdgeError::BadRequest(format!(
            ":path {path:?} is not an absolute path (RFC 9113 §8.3.1)"
        )));
    }
    let mut headers = Vec::with_capacity(req.headers().len() + 1);
    let mut cookies: Vec<&[u8]> = Vec::new();
    for (name, value) in req.headers() {
        if name == http::header::COOKIE {
            cookies.push(value.as_bytes());
        } else {
            headers.push(Header::new(name.as_str(), value.as_bytes()));
        }
    }
    if !cookies.is_empty() {
        headers.push(Header::new("cookie", cookies.join(&b"; "[..])));
    }
    let chunked =
        !req.body().is_end_stream() && !req.headers().contains_key(http::header::CONTENT_LENGTH);
    if chunked {
        headers.push(Header::new("transfer-encoding", "chunked"));
    }
    let head = RequestHead {
        method: req.method().as_str().to_string(),
        target: format!("http://{authority}{path}"),
        minor: 1,
        headers,
    };
    Ok((head, chunked))
}

/// Forwards a plain request and relays its reply. Err: nothing was sent to the client yet;
/// it gets the error's synthetic response.
async fn request<T: Transport>(
    ctx: &Ctx<T>,
    req: Request<RecvStream>,
    mut respond: SendResponse<Bytes>,
    page_start: Instant,
) -> Result<Outcome, (EdgeError, SendResponse<Bytes>)> {
    let (head, chunked) = match h1_head(&req) {
        Ok(h) => h,
        Err(e) => return Err((e, respond)),
    };
    let prep = match client::prepare_as(&head, Entry::Explicit, "2") {
        Ok(p) => p,
        Err(e) => return Err((e, respond)),
    };
    let method = head.method.clone();
    let body = req.into_body();
    if let Some(local) = prep.local {
        // Answered by the edge (`Max-Forwards: 0`): the request body is not needed.
        drop(body);
        let mut reader = &local[..];
        return match relay(
            ctx,
            &mut reader,
            &method,
            &mut respond,
            &ReplyProgress::default(),
        )
        .await
        {
            Ok(mut o) => {
                o.outcome = "answered-by-proxy".into();
                o.detail = "Max-Forwards: 0".into();
                Ok(o)
            }
            Err(RelayError::Before(e, _)) => Err((e, respond)),
            Err(RelayError::After(d, status, down)) => Ok(cut(d, status, down)),
        };
    }
    let whole = matches!(prep.body, BodyKind::None | BodyKind::Length(0));
    let target = prep.auth.target();
    let first = Bytes::from(prep.head);
    let age = page::age(page_start, Instant::now());
    let stream = match ctx
        .transport
        .open_aged(StreamKind::Http, &target, first.clone(), age)
        .await
    {
        Ok(s) => s,
        Err(e) => return Err((EdgeError::from_open(e), respond)),
    };
    let (mut srd, mut swr) = client::split(stream);
    let upload = async {
        let mut rd = H2Recv::new(body);
        let out = if chunked {
            OutFraming::Chunked
        } else {
            OutFraming::Raw
        };
        let mut buf = BytesMut::new();
        let n = if whole {
            0
        } else {
            let kind = if chunked {
                BodyKind::CloseDelimited
            } else {
                prep.body
            };
            http1::copy_body(kind, &mut rd, &mut buf, &mut swr, out).await?
        };
        swr.shutdown().await.map_err(CopyError::Write)?;
        Ok::<u64, CopyError>(n)
    };
    let progress = ReplyProgress::default();
    let (result, up) = {
        let reply = relay(ctx, &mut srd, &method, &mut respond, &progress);
        tokio::pin!(upload, reply);
        let mut up = None;
        loop {
            tokio::select! {
                r = &mut upload, if up.is_none() => match r {
                    Ok(n) => up = Some(n),
                    // The client reset the stream or sent a body that disagrees with its
                    // content-length: the request is abandoned, its pool stream reset.
                    Err(CopyError::Read(e)) => {
                        return Ok(Outcome {
                            outcome: "client-aborted".into(),
                            detail: format!("request body: {e}"),
                            ..cut(
                                String::new(),
                                progress.status.load(Ordering::Relaxed),
                                progress.body.load(Ordering::Relaxed),
                            )
                        })
                    }
                    // The pool stream failed: its reply half says why.
                    Err(CopyError::Write(_)) => up = Some(0),
                },
                r = &mut reply => break (r, up),
            }
        }
    };
    let result = match result {
        Err(RelayError::Before(_, Some(f)))
            if f.retryable && whole && client::idempotent(&method) =>
        {
            tracing::info!(target = %target, reason = %f.reason, "retrying idempotent request on another pool connection");
            // The failed stream holds a stream slot until it is dropped: a retry on a full
            // pool would wait for its own slot.
            drop((srd, swr));
            let age = page::age(page_start, Instant::now());
            match ctx
                .transport
                .open_aged(StreamKind::Http, &target, first, age)
                .await
            {
                Ok(s) => {
                    let (mut srd, mut swr) = client::split(s);
                    let _ = swr.shutdown().await;
                    relay(ctx, &mut srd, &method, &mut respond, &progress).await
                }
                Err(e) => Err(RelayError::Before(EdgeError::from_open(e), None)),
            }
        }
        r => r,
    };
    match result {
        Ok(mut o) => {
            o.up = up.unwrap_or(0);
            Ok(o)
        }
        Err(RelayError::Before(e, _)) => Err((e, respond)),
        Err(RelayError::After(d, status, down)) => Ok(cut(d, status, down)),
    }
}

fn cut(detail: String, status: u16, down: u64) -> Outcome {
    Outcome {
        status,
        up: 0,
        down,
        ttfb: None,
        outcome: "reply-cut".into(),
        detail,
    }
}

/// How relaying a reply failed.
enum RelayError {
    /// Nothing was sent: the client can get an error response.
    Before(EdgeError, Option<crate::transport::FarFailure>),
    /// The reply started: the stream was reset. With the status of the head the client got
    /// (0: none) and the body bytes sent after it.
    After(String, u16, u64),
}

/// Reads a reply head from a stream (skipping `1xx`), as the HTTP/1.1 relay does.
async fn reply_head<T: Transport, R: AsyncRead + Unpin>(
    ctx: &Ctx<T>,
    srd: &mut R,
    sbuf: &mut BytesMut,
) -> Result<ResponseHead, RelayError> {
    loop {
        let head = client::read_far_head(ctx, srd, sbuf)
            .await
            .map_err(|(e, f)| RelayError::Before(e, f))?;
        match head.status {
            101 => {
                return Err(RelayError::Before(
                    EdgeError::BadReply("101 Switching Protocols is not allowed in HTTP/2".into()),
                    None,
                ))
            }
            // Informational replies are not relayed (the `h2` crate sends final heads only).
            100..=199 => continue,
            _ => return Ok(head),
        }
    }
}

/// The HTTP/2 response head for a forwarded reply head: connection-specific fields and
/// framing removed (RFC 9113 §8.2.2), `content-length` kept unless the body was chunked or
/// close-delimited, `Via` added. Fields HTTP/2 cannot carry are dropped with a debug line.
fn h2_head(head: ResponseHead, kind: BodyKind) -> Result<Response<()>, EdgeError> {
    let mut headers = head.headers;
    http1::remove_length_if_coded(&mut headers);
    http1::strip_hop_by_hop(&mut headers);
    http1::remove_header(&mut headers, "transfer-encoding");
    // A length stays for a body of known length and where it describes the selected
    // representation without a body (HEAD, 304).
    if matches!(kind, BodyKind::Chunked | BodyKind::CloseDelimited) {
        http1::remove_header(&mut headers, "content-length");
    }
    headers.push(Header::new("via", VIA));
    let mut b = Response::builder().status(head.status);
    for h in headers {
        match (
            HeaderName::from_bytes(h.name.as_bytes()),
            HeaderValue::from_bytes(&h.value),
        ) {
            (Ok(n), Ok(v)) => b = b.header(n, v),
            _ => tracing::debug!(field = %h.name, "reply field HTTP/2 cannot carry; dropped"),
        }
    }
    b.body(())
        .map_err(|e| EdgeError::BadReply(format!("reply head: {e}")))
}

/// Relays one reply from `srd` to the client's stream, recording in `progress` how far it
/// got.
async fn relay<T: Transport, R: AsyncRead + Unpin>(
    ctx: &Ctx<T>,
    srd: &mut R,
    method: &str,
    respond: &mut SendResponse<Bytes>,
    progress: &ReplyProgress,
) -> Result<Outcome, RelayError> {
    let mut sbuf = BytesMut::with_capacity(SEND_CHUNK);
    let head = reply_head(ctx, srd, &mut sbuf).await?;
    let kind = http1::response_body_kind(method, &head)
        .map_err(|e| RelayError::Before(EdgeError::BadReply(e.to_string()), None))?;
    let far_error = http1::header_str(&head.headers, "x-longhaul-error").map(str::to_string);
    let status = head.status;
    let out = h2_head(head, kind).map_err(|e| RelayError::Before(e, None))?;
    let empty = matches!(kind, BodyKind::None | BodyKind::Length(0));
    let send = respond
        .send_response(out, empty)
        .map_err(|e| RelayError::After(format!("client stream: {e}"), 0, 0))?;
    progress.status.store(status, Ordering::Relaxed);
    let head_at = Instant::now();
    let mut down = 0;
    if !empty {
        let mut w = H2Send::new(send, Reason::INTERNAL_ERROR);
        let written = &progress.body;
        let copy = http1::copy_body_counted(kind, srd, &mut sbuf, &mut w, OutFraming::Raw, written);
        down = match copy.await {
            Ok(n) => n,
            Err(e) => {
                w.abort();
                let why = match &e {
                    CopyError::Read(io) => ctx
                        .transport
                        .failure(io)
                        .map(|f| f.reason)
                        .unwrap_or_else(|| io.to_string()),
                    CopyError::Write(io) => format!("client stream: {io}"),
                };
                return Err(RelayError::After(
                    format!("reply cut: {why}"),
                    status,
                    written.load(Ordering::Relaxed),
                ));
            }
        };
        if let Err(e) = w.shutdown().await {
            return Err(RelayError::After(
                format!("client stream: {e}"),
                status,
                down,
            ));
        }
    }
    Ok(Outcome {
        status,
        up: 0,
        down,
        ttfb: Some(head_at),
        outcome: far_error.unwrap_or_else(|| "ok".into()),
        detail: String::new(),
    })
}

/// A CONNECT stream (RFC 9113 §8.5): a tunnel whose bytes are the stream's DATA frames.
async fn connect<T: Transport>(
    ctx: &Ctx<T>,
    req: Request<RecvStream>,
    mut respond: SendResponse<Bytes>,
    peer: SocketAddr,
    started: Instant,
) {
    let authority = req
        .uri()
        .authority()
        .map(|a| a.as_str().to_string())
        .unwrap_or_default();
    let record = || Access::new(Peer::Client(peer), "CONNECT", &authority, started);
    let fail = |err: EdgeError, mut respond: SendResponse<Bytes>| {
        let (head, body) = err.h2_response();
        if let Ok(mut send) = respond.send_response(head, false) {
            let _ = send.send_data(body, true);
        }
        record().failed(err.tag(), err.to_string()).log();
    };
    let target = match tunnel::connect_target(&ctx.settings, &authority) {
        Ok(t) => t,
        Err(e) => return fail(e, respond),
    };
    let (stream, to_client) = match ctx.settings.connect_reply {
        ConnectReply::Optimistic => {
            match ctx
                .transport
                .open(StreamKind::Tunnel, &target, Bytes::new())
                .await
            {
                Ok(s) => (s, Bytes::new()),
                Err(e) => return fail(EdgeError::from_open(e), respond),
            }
        }
        ConnectReply::AfterConnect => {
            let req = format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n");
            let s = match ctx
                .transport
                .open(StreamKind::Http, &target, Bytes::from(req))
                .await
            {
                Ok(s) => s,
                Err(e) => return fail(EdgeError::from_open(e), respond),
            };
            let (mut srd, swr) = client::split(s);
            let mut sbuf = BytesMut::new();
            let head = match reply_head(ctx, &mut srd, &mut sbuf).await {
                Ok(h) => h,
                Err(RelayError::Before(e, _)) => return fail(e, respond),
                Err(RelayError::After(d, ..)) => {
                    record()
                        .failed(EdgeError::BadReply(d.clone()).tag(), d)
                        .log();
                    return;
                }
            };
            if head.status != 200 {
                // The remote's own refusal (status and reason body): relayed as it is.
                let status = head.status;
                let reason = head.reason.clone();
                let mut prefix = http1::encode_response_head(&head);
                prefix.extend_from_slice(&sbuf);
                let mut reader = tokio::io::AsyncReadExt::chain(&prefix[..], srd);
                let _ = relay(
                    ctx,
                    &mut reader,
                    "CONNECT",
                    &mut respond,
                    &ReplyProgress::default(),
                )
                .await;
                Access {
                    status,
                    outcome: "refused-by-far-side",
                    detail: reason.as_str().into(),
                    ..record()
                }
                .log();
                return;
            }
            (srd.unsplit(swr), sbuf.freeze())
        }
    };
    let send = match respond.send_response(Response::new(()), false) {
        Ok(s) => s,
        Err(e) => {
            Access {
                outcome: "client-aborted",
                detail: format!("client stream: {e}").into(),
                ..record()
            }
            .log();
            return;
        }
    };
    let rd = H2Recv::new(req.into_body());
    let cancelled = rd.cancelled.clone();
    let wr = H2Send::new(send, Reason::CONNECT_ERROR);
    let first_down = OnceLock::new();
    let (up, down, err) =
        tunnel::pump_with_prefix(ctx, rd, wr, stream, to_client, Bytes::new(), &first_down).await;
    let ttfb = first_down
        .get()
        .map(|t| t.saturating_duration_since(started));
    // The client closed the tunnel with RST_STREAM CANCEL, as browsers do when they are done
    // with it: the far side was reset (§8.5), which is no failure of the proxy's.
    let err = match err {
        Some(_) if cancelled.load(Ordering::Relaxed) => Some(tunnel::TunnelCut {
            by_client: true,
            reason: "RST_STREAM CANCEL from the client".into(),
        }),
        err => err,
    };
    tunnel::log_tunnel(
        peer, "CONNECT", &authority, 200, up, down, started, ttfb, err,
    );
}

/// The request body of a stream as a byte reader; receive window is released as the bytes
/// are read out, so a client can never have more than its window in the edge.
struct H2Recv {
    body: RecvStream,
    chunk: Bytes,
    /// Set when the client reset the stream with CANCEL.
    cancelled: Arc<AtomicBool>,
}

impl H2Recv {
    fn new(body: RecvStream) -> H2Recv {
        H2Recv {
            body,
            chunk: Bytes::new(),
            cancelled: Arc::new(AtomicBool::new(false)),
        }
    }
}

/// Whether `e` is the client's RST_STREAM with CANCEL: the client no longer needs the stream
/// (browsers close a tunnel that way once they are done with it).
fn client_cancel(e: &h2::Error) -> bool {
    e.is_reset() && e.is_remote() && e.reason() == Some(Reason::CANCEL)
}

fn h2_io(e: h2::Error) -> io::Error {
    if e.is_io() {
        e.into_io()
            .unwrap_or_else(|| io::Error::other("HTTP/2 I/O error"))
    } else {
        io::Error::new(io::ErrorKind::ConnectionReset, e.to_string())
    }
}

impl AsyncRead for H2Recv {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        while self.chunk.is_empty() {
            match ready!(self.body.poll_data(cx)) {
                None => return Poll::Ready(Ok(())),
                Some(Err(e)) => {
                    if client_cancel(&e) {
                        self.cancelled.store(true, Ordering::Relaxed);
                    }
                    return Poll::Ready(Err(h2_io(e)));
                }
                Some(Ok(b)) => self.chunk = b,
            }
        }
        let n = self.chunk.len().min(buf.remaining());
        buf.put_slice(&self.chunk[..n]);
        self.chunk.advance(n);
        let _ = self.body.flow_control().release_capacity(n);
        Poll::Ready(Ok(()))
    }
}

/// The reply side of a stream as a byte writer: each write sends at most what the client's
/// window allows (waiting for WINDOW_UPDATE otherwise), so a slow client holds the reply back
/// instead of growing a buffer. Shutdown sends END_STREAM; [`Abort`] resets the stream with
/// `reset` when the writer is dropped.
struct H2Send {
    send: SendStream<Bytes>,
    reset: Reason,
    aborted: AtomicBool,
    ended: bool,
}

impl H2Send {
    fn new(send: SendStream<Bytes>, reset: Reason) -> H2Send {
        H2Send {
            send,
            reset,
            aborted: AtomicBool::new(false),
            ended: false,
        }
    }
}

impl Abort for H2Send {
    fn abort(&self) {
        self.aborted.store(true, Ordering::Relaxed);
    }
}

impl Drop for H2Send {
    fn drop(&mut self) {
        if !self.ended || self.aborted.load(Ordering::Relaxed) {
            self.send.send_reset(self.reset);
        }
    }
}

impl AsyncWrite for H2Send {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if buf.is_empty() {
            return Poll::Ready(Ok(0));
        }
        self.send.reserve_capacity(buf.len().min(SEND_CHUNK));
        loop {
            let have = self.send.capacity();
            if have > 0 {
                if let Poll::Ready(r) = self.send.poll_reset(cx) {
                    let why = r.map(|r| format!("client reset the stream: {r}"));
                    let why = why.unwrap_or_else(|e| e.to_string());
                    return Poll::Ready(Err(io::Error::new(io::ErrorKind::ConnectionReset, why)));
                }
                let n = have.min(buf.len());
                self.send
                    .send_data(Bytes::copy_from_slice(&buf[..n]), false)
                    .map_err(h2_io)?;
                return Poll::Ready(Ok(n));
            }
            match ready!(self.send.poll_capacity(cx)) {
                None => {
                    return Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::BrokenPipe,
                        "client stream closed",
                    )))
                }
                Some(Err(e)) => return Poll::Ready(Err(h2_io(e))),
                Some(Ok(_)) => {}
            }
        }
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.aborted.load(Ordering::Relaxed) {
            return Poll::Ready(Ok(()));
        }
        if !self.ended {
            self.send.send_data(Bytes::new(), true).map_err(h2_io)?;
            self.ended = true;
        }
        Poll::Ready(Ok(()))
    }
}
