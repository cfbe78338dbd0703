//! Serving one stream opened by an edge.
//!
//! - `Http` stream: read one HTTP/1.1 request (head and framed body), fetch it from the origin
//!   with hyper's client (pooled keep-alive origin connections, names resolved here, address
//!   policy applied to the resolved address), and stream the response back as it arrives
//!   (1xx first, then the head, then the body with `Content-Length` or chunked framing), then
//!   FIN. Failures before the response started become a synthetic response; a reply cut by the
//!   origin is never completed (the stream is dropped unfinished, which resets it).
//!   A request with `Connection: upgrade` and `Upgrade` (the edge forwards them only for an
//!   upgrade it relays) that the origin answers `101` becomes a byte tunnel between the stream
//!   and the origin connection.
//!   A `CONNECT` request on an `Http` stream is answered with a status once the target is
//!   connected (or not), then becomes a tunnel ("after-connect" mode of the edge).
//! - `Tunnel` stream: connect to the target and copy bytes both ways; a target that cannot be
//!   reached resets the stream with a reason code.
//!
//! It does NOT accept pool connections ([`crate::pool_glue`] does) or parse anything inside tunnels.

use std::sync::atomic::{AtomicBool, AtomicU16, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use app::pool_glue::StreamKind;
use bytes::{Bytes, BytesMut};
use futures_util::StreamExt;
use http1::target::parse_authority;
use http1::{BodyDecoder, BodyKind, Header, OutFraming, RequestHead};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Empty, StreamBody};
use hyper::body::Frame;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;

use crate::errors::{chain, RemoteError, ResetReason};
use crate::policy::{PolicyResolver, TargetPolicy};
use app::access::{Access, Peer, StreamRef};
use app::counted::Counted;

/// Request body pieces buffered between the stream and hyper (each up to 64 KiB).
pub const DEFAULT_BODY_CHANNEL: usize = 4;
/// Buffer of each tunnel direction.
pub const DEFAULT_TUNNEL_BUFFER: usize = 64 * 1024;
/// 1xx responses buffered while the final response is awaited.
const INFORMATIONAL_QUEUE: usize = 8;

type BoxError = Box<dyn std::error::Error + Send + Sync>;
/// Request body type given to hyper.
pub type ReqBody = UnsyncBoxBody<Bytes, BoxError>;

/// A stream from an edge, as the remote needs it.
pub trait FarStream: AsyncRead + AsyncWrite + Unpin + Send + 'static {
    /// Aborts the stream in both directions, telling the edge why.
    fn reset(&mut self, why: ResetReason);

    /// Completes when the edge resets the stream (its client went away), even
    /// after the request was read to its end. A transport that cannot tell
    /// never completes, and the fetch then ends with the origin's reply or
    /// `origin_timeout`.
    fn reset_signal(&self) -> futures_util::future::BoxFuture<'static, ()> {
        Box::pin(std::future::pending())
    }
}

/// Origin-side behaviour.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Longest wait for an origin to accept a TCP connection.
    pub connect_timeout: Duration,
    /// Longest wait for an origin's response head after the whole request (body included)
    /// was sent; also the longest a request body may make no progress.
    pub origin_timeout: Duration,
    /// Idle keep-alive origin connections are closed after this.
    pub origin_idle_timeout: Duration,
    /// Idle keep-alive origin connections kept per origin.
    pub origin_max_idle_per_host: usize,
    /// Largest request head.
    pub max_header_bytes: usize,
}

/// Largest read buffer of one origin connection, bytes (hyper's default is ~400 KiB). A reply
/// whose edge reader is slow holds at most this plus its stream window here, so 64 KiB keeps
/// thousands of stalled replies cheap while one read still moves a whole window's quarter.
pub const DEFAULT_ORIGIN_READ_BUFFER: usize = 64 * 1024;

/// State shared by all streams.
pub struct Ctx {
    client: Client<HttpConnector<PolicyResolver>, ReqBody>,
    policy: Arc<TargetPolicy>,
    settings: Settings,
}

impl Ctx {
    /// Builds the origin client.
    pub fn new(policy: TargetPolicy, settings: Settings) -> Ctx {
        let policy = Arc::new(policy);
        let mut connector = HttpConnector::new_with_resolver(PolicyResolver(policy.clone()));
        connector.set_connect_timeout(Some(settings.connect_timeout));
        connector.set_nodelay(true);
        connector.enforce_http(true);
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(settings.origin_idle_timeout)
            .pool_max_idle_per_host(settings.origin_max_idle_per_host)
            .http1_max_buf_size(DEFAULT_ORIGIN_READ_BUFFER)
            // The same field limit as the edge's for requests (hyper's default is 100).
            .http1_max_headers(http1::DEFAULT_MAX_HEADERS)
            .build(connector);
        Ctx {
            client,
            policy,
            settings,
        }
    }
}

/// Serves one stream to completion.
pub async fn handle<S: FarStream>(
    ctx: &Ctx,
    id: StreamRef,
    kind: StreamKind,
    target: String,
    stream: S,
) {
    match kind {
        StreamKind::Tunnel => tunnel(ctx, id, &target, stream).await,
        StreamKind::Http => http(ctx, id, &target, stream).await,
    }
}

async fn tunnel<S: FarStream>(ctx: &Ctx, id: StreamRef, target: &str, mut stream: S) {
    let started = Instant::now();
    let origin = match connect_target(ctx, target).await {
        Ok(o) => o,
        Err(e) => {
            stream.reset(e.reset_reason());
            log_error(id, "TUNNEL", target, 0, started, &e);
            return;
        }
    };
    let (up, down, err) = pump(stream, origin, BytesMut::new()).await;
    Access::new(Peer::Stream(id), "TUNNEL", target, started)
        .far_tunnel_ended(up, down, err)
        .log();
}

async fn connect_target(ctx: &Ctx, target: &str) -> Result<TcpStream, RemoteError> {
    let auth = parse_authority(target, None)
        .map_err(|e| RemoteError::BadRequest(format!("stream target: {e}")))?;
    let addrs = ctx.policy.resolve(&auth.host, auth.port).await?;
    let mut last: Option<RemoteError> = None;
    for addr in addrs {
        match tokio::time::timeout(ctx.settings.connect_timeout, TcpStream::connect(addr)).await {
            Ok(Ok(s)) => {
                let _ = s.set_nodelay(true);
                return Ok(s);
            }
            Ok(Err(e)) => last = Some(RemoteError::from_connect(&addr.to_string(), &e)),
            Err(_) => {
                last = Some(RemoteError::Timeout(format!(
                    "connect to {addr}: no answer within {} ms",
                    ctx.settings.connect_timeout.as_millis()
                )))
            }
        }
    }
    Err(last.unwrap_or_else(|| RemoteError::ConnectFailed(format!("{target}: no address"))))
}

/// Copies both ways until both ends finished; on a failure both sides are aborted.
async fn pump<S: FarStream>(
    mut stream: S,
    mut origin: TcpStream,
    early: BytesMut,
) -> (u64, u64, Option<std::io::Error>) {
    if !early.is_empty() {
        if let Err(e) = origin.write_all(&early).await {
            stream.reset(ResetReason::Cancel);
            return (
                0,
                0,
                Some(std::io::Error::new(e.kind(), format!("origin write: {e}"))),
            );
        }
    }
    let (up, down) = (AtomicU64::new(0), AtomicU64::new(0));
    let res = tokio::io::copy_bidirectional_with_sizes(
        &mut Counted::new(&mut stream, &down),
        &mut Counted::new(&mut origin, &up),
        DEFAULT_TUNNEL_BUFFER,
        DEFAULT_TUNNEL_BUFFER,
    )
    .await;
    // On a failure too, the record counts what was carried until then.
    let carried = (
        up.load(Ordering::Relaxed) + early.len() as u64,
        down.load(Ordering::Relaxed),
    );
    match res {
        Ok(_) => (carried.0, carried.1, None),
        Err(e) => {
            stream.reset(ResetReason::Cancel);
            let _ = socket2::SockRef::from(&origin).set_linger(Some(Duration::ZERO));
            (carried.0, carried.1, Some(e))
        }
    }
}

fn log_error(
    id: StreamRef,
    method: &str,
    target: &str,
    status: u16,
    started: Instant,
    e: &RemoteError,
) {
    // `status` is 0 for a tunnel that was reset rather than answered.
    let record = Access::new(Peer::Stream(id), method, target, started);
    Access {
        status,
        ..record.failed(e.tag(), e.to_string())
    }
    .log();
}

/// Answers `e` with a synthetic response and finishes the stream.
async fn reply_error<S: FarStream>(
    stream: &mut S,
    id: StreamRef,
    method: &str,
    target: &str,
    started: Instant,
    e: &RemoteError,
) {
    let _ = stream.write_all(&e.response_to(method)).await;
    let _ = stream.shutdown().await;
    log_error(id, method, target, e.status(), started, e);
}

async fn http<S: FarStream>(ctx: &Ctx, id: StreamRef, target: &str, mut stream: S) {
    let started = Instant::now();
    let mut buf = BytesMut::with_capacity(8192);
    // The head travels in the OPEN's first bytes; a stream without one is not waited for long.
    let head = tokio::time::timeout(
        ctx.settings.origin_timeout,
        // The edge accepted a head within the same limits and may have added a few fields and
        // bytes while forwarding it.
        http1::read_request_head_limited(
            &mut stream,
            &mut buf,
            http1::forwarded_head_limit(ctx.settings.max_header_bytes),
            http1::FORWARD_MAX_HEADERS,
        ),
    )
    .await
    .unwrap_or_else(|_| {
        Err(http1::HeadError::Malformed(
            "no request head on the stream in time".into(),
        ))
    });
    let head = match head {
        Ok(Some(h)) => h,
        Ok(None) => {
            let e = RemoteError::BadRequest("the stream ended before a request".into());
            return reply_error(&mut stream, id, "-", target, started, &e).await;
        }
        Err(e) => {
            let e = RemoteError::from(e);
            return reply_error(&mut stream, id, "-", target, started, &e).await;
        }
    };
    if head.method == "CONNECT" {
        return connect_with_status(ctx, id, target, stream, buf, started).await;
    }
    let req = match build_request(ctx, target, &head) {
        Ok(r) => r,
        Err(e) => return reply_error(&mut stream, id, &head.method, target, started, &e).await,
    };
    let (mut req, body_kind, upgrade) = req;
    let edge_reset = stream.reset_signal();
    let (mut rd, mut wr) = tokio::io::split(stream);

    // Request body: decoded from the stream, handed to hyper through a bounded channel.
    let (body_tx, body_rx) = mpsc::channel::<Result<Frame<Bytes>, BoxError>>(DEFAULT_BODY_CHANNEL);
    // Set when the decoder read the body's end: only then does the body handed to hyper end
    // cleanly. A body whose feeder stops before (the edge cut the stream, the upload stalled,
    // the response came first) ends with an error, so hyper never completes it towards the
    // origin (a chunked upload's last chunk is the client's to send, RFC 9112 §7.1) and closes
    // that origin connection.
    let body_complete = Arc::new(AtomicBool::new(false));
    let uploaded = AtomicU64::new(0);
    let sent = Sent::default();
    // Set when the origin's response head arrived (time to first byte).
    let head_at = std::sync::OnceLock::new();
    // Set when the request body has been handed over in full: the wait for the response head
    // (`origin_timeout`) starts then, so a long upload is not cut as an origin timeout.
    let (body_done_tx, mut body_done) = tokio::sync::watch::channel(false);
    let stall = ctx.settings.origin_timeout;
    let result = {
        // Feeds the request body to hyper, then watches the stream: a reset from the edge (the
        // client went away) cancels the fetch instead of waiting for the origin. Completes
        // only with such a failure, or when the upload made no progress for `origin_timeout`.
        let feed = async {
            {
                // Owned here so the body ends (sender dropped) when it is complete.
                let body_tx = body_tx;
                let mut dec = BodyDecoder::new(body_kind);
                loop {
                    let step = async {
                        match dec.next(&mut rd, &mut buf).await {
                            Ok(Some(piece)) => {
                                uploaded.fetch_add(piece.len() as u64, Ordering::Relaxed);
                                Ok(body_tx.send(Ok(Frame::data(piece))).await.is_ok())
                            }
                            Ok(None) => {
                                body_complete.store(true, Ordering::Release);
                                Ok(false)
                            }
                            Err(e) => Err(e.to_string()),
                        }
                    };
                    // A stalled upload is bounded too: no progress for `origin_timeout`.
                    match tokio::time::timeout(stall, step).await {
                        Ok(Ok(true)) => {}
                        Ok(Ok(false)) => break,
                        // The sender drops unfinished: the body ends with an error (above), without
                        // waiting for room in a channel an origin that stopped reading holds full.
                        Ok(Err(e)) => {
                            return Outcome::Cut(format!("edge cancelled the stream: {e}"))
                        }
                        Err(_) => {
                            return Outcome::Before(RemoteError::Timeout(format!(
                                "the request body made no progress for {} ms (the edge stopped \
                                 sending it or the origin stopped reading it)",
                                stall.as_millis()
                            )))
                        }
                    }
                }
            }
            let _ = body_done_tx.send(true);
            if upgrade {
                // After the request comes the new protocol's data: it stays on the stream
                // for the tunnel a `101` starts.
                edge_reset.await;
                return Outcome::Cut(
                    "edge cancelled the stream: the edge reset the stream (its client went away)"
                        .into(),
                );
            }
            let mut scratch = [0u8; 512];
            loop {
                match rd.read(&mut scratch).await {
                    // FIN: nothing more will come on this side; reads report the FIN, not a
                    // later reset, so the reset signal tells when the edge gives up.
                    Ok(0) => {
                        edge_reset.await;
                        return Outcome::Cut(
                            "edge cancelled the stream: the edge reset the stream (its client \
                             went away)"
                                .into(),
                        );
                    }
                    // Bytes after the request are ignored (the stream carries one request).
                    Ok(_) => {}
                    Err(e) => return Outcome::Cut(format!("edge cancelled the stream: {e}")),
                }
            }
        };
        *req.body_mut() = match body_kind {
            // `Content-Length: 0` stays in the head (a POST without it may be refused 411).
            BodyKind::None | BodyKind::Length(0) => {
                Empty::new().map_err(|e| match e {}).boxed_unsync()
            }
            _ => {
                let complete = body_complete.clone();
                let s = futures_util::stream::unfold(Some(body_rx), move |rx| {
                    let complete = complete.clone();
                    async move {
                        let mut rx = rx?;
                        match rx.recv().await {
                            Some(item) => Some((item, Some(rx))),
                            None if complete.load(Ordering::Acquire) => None,
                            None => {
                                let e: BoxError = Box::new(std::io::Error::other(
                                    "the request body was cut before its end",
                                ));
                                Some((Err(e), None))
                            }
                        }
                    }
                });
                StreamBody::new(s.boxed()).boxed_unsync()
            }
        };
        let method = head.method.clone();
        let (info_tx, mut info_rx) = mpsc::channel::<Vec<u8>>(INFORMATIONAL_QUEUE);
        hyper::ext::on_informational(&mut req, move |res| {
            if res.status().as_u16() == 100 || res.status().as_u16() == 101 {
                return;
            }
            let mut out = format!(
                "HTTP/1.1 {} {}\r\n",
                res.status().as_u16(),
                res.status().canonical_reason().unwrap_or("")
            )
            .into_bytes();
            for (k, v) in res.headers() {
                if k.as_str() == http1::reply::ERROR_HEADER {
                    continue;
                }
                out.extend_from_slice(k.as_str().as_bytes());
                out.extend_from_slice(b": ");
                out.extend_from_slice(v.as_bytes());
                out.extend_from_slice(b"\r\n");
            }
            out.extend_from_slice(b"\r\n");
            let _ = info_tx.try_send(out);
        });
        let respond = async {
            let fetch = async {
                let head_deadline = async {
                    let _ = body_done.wait_for(|done| *done).await;
                    tokio::time::sleep(ctx.settings.origin_timeout).await;
                };
                tokio::select! {
                    r = ctx.client.request(req) => Ok(r),
                    _ = head_deadline => Err(()),
                }
            };
            tokio::pin!(fetch);
            let res = loop {
                tokio::select! {
                    biased;
                    Some(info) = info_rx.recv() => {
                        if wr.write_all(&info).await.is_err() {
                            return Err(Outcome::Cut("edge went away".into()));
                        }
                    }
                    r = &mut fetch => break r,
                }
            };
            // 1xx heads queued while the final head arrived go first.
            while let Ok(info) = info_rx.try_recv() {
                if wr.write_all(&info).await.is_err() {
                    return Err(Outcome::Cut("edge went away".into()));
                }
            }
            let res = match res {
                Err(_) => {
                    return Err(Outcome::Before(RemoteError::Timeout(format!(
                        "no response head within {} ms of the request",
                        ctx.settings.origin_timeout.as_millis()
                    ))))
                }
                Ok(Err(e)) => return Err(Outcome::Before(RemoteError::from_client(target, &e))),
                Ok(Ok(r)) => {
                    let _ = head_at.set(Instant::now());
                    r
                }
            };
            write_response(&mut wr, &method, res, upgrade, &sent).await
        };
        tokio::pin!(feed, respond);
        tokio::select! {
            r = &mut respond => r,
            failed = &mut feed => Err(failed),
        }
    };
    let up = uploaded.load(Ordering::Relaxed);
    // What went out before a cut: the head's status and the body bytes written.
    let cut_record = |why: String| {
        Access {
            status: sent.status.load(Ordering::Relaxed),
            bytes_down: sent.body.load(Ordering::Relaxed),
            ttfb: head_at.get().map(|t| t.saturating_duration_since(started)),
            bytes_up: up,
            outcome: "reply-cut",
            detail: why.into(),
            ..Access::new(Peer::Stream(id), &head.method, target, started)
        }
        .log()
    };
    match result {
        Ok((_, _, Some(on_upgrade))) => {
            let stream = rd.unsplit(wr);
            switched(id, &head.method, target, stream, on_upgrade, started).await;
        }
        Ok((status, down, None)) => {
            let _ = wr.shutdown().await;
            Access {
                status,
                bytes_up: up,
                bytes_down: down,
                ttfb: head_at.get().map(|t| t.saturating_duration_since(started)),
                ..Access::new(Peer::Stream(id), &head.method, target, started)
            }
            .log();
        }
        // A failure once the reply's head went out cannot become a status: the reply is cut.
        Err(Outcome::Before(e)) if sent.status.load(Ordering::Relaxed) != 0 => {
            let mut stream = rd.unsplit(wr);
            stream.reset(ResetReason::Cancel);
            cut_record(e.to_string());
        }
        Err(Outcome::Before(e)) => {
            let mut stream = rd.unsplit(wr);
            reply_error(&mut stream, id, &head.method, target, started, &e).await;
        }
        Err(Outcome::Cut(why)) => {
            let mut stream = rd.unsplit(wr);
            stream.reset(ResetReason::Cancel);
            cut_record(why);
        }
        Err(Outcome::OriginCut(why)) => {
            let mut stream = rd.unsplit(wr);
            if stream.shutdown().await.is_err() {
                stream.reset(ResetReason::Cancel);
            }
            cut_record(why);
        }
    }
}

/// How much of a response [`write_response`] has written: the head's status once the head
/// started to go out (0 before: a failure can still be answered with a status), and the body
/// bytes since; read for the access record of a reply cut part way.
#[derive(Default)]
struct Sent {
    status: AtomicU16,
    body: AtomicU64,
}

enum Outcome {
    /// Nothing of the response was written: a synthetic response can be sent.
    Before(RemoteError),
    /// The response was under way and the edge's stream failed: the stream must be reset.
    Cut(String),
    /// The response was under way and the origin's body ended before its framing did. The
    /// stream is healthy: what was written goes out and the stream is finished. The reply's
    /// framing on the stream (a Content-Length, or chunks without the last) tells the edge it
    /// is incomplete; a reset instead would let the edge discard bytes it had not read yet,
    /// the head among them (resets discard unread data in the mux and in QUIC alike).
    OriginCut(String),
}

/// The origin request for `head`, its body framing, and whether it asks to switch protocols
/// (the edge forwards `Upgrade` with `Connection: upgrade` only when the upgrade is to be
/// relayed).
fn build_request(
    ctx: &Ctx,
    target: &str,
    head: &RequestHead,
) -> Result<(http::Request<ReqBody>, BodyKind, bool), RemoteError> {
    let auth = parse_authority(target, None)
        .map_err(|e| RemoteError::BadRequest(format!("stream target: {e}")))?;
    if let Some(ip) = auth.ip() {
        if let Some(why) = ctx.policy.refuses(ip) {
            return Err(RemoteError::Forbidden(format!("{ip}: {why}")));
        }
    }
    if !head.target.starts_with('/') {
        return Err(RemoteError::BadRequest(format!(
            "request target {:?} is not origin-form",
            head.target
        )));
    }
    let body_kind = http1::request_body_kind(head)?;
    let method = http::Method::from_bytes(head.method.as_bytes())
        .map_err(|_| RemoteError::BadRequest(format!("invalid method {:?}", head.method)))?;
    let uri: http::Uri = format!("http://{}{}", auth.target(), head.target)
        .parse()
        .map_err(|e| RemoteError::BadRequest(format!("invalid request target: {e}")))?;
    let mut headers = head.headers.clone();
    let upgrade = http1::header_str(&headers, "upgrade")
        .filter(|u| !u.is_empty())
        .map(str::to_string)
        .filter(|_| {
            http1::header_tokens(&headers, "connection")
                .iter()
                .any(|t| t == "upgrade")
        });
    http1::strip_hop_by_hop(&mut headers);
    if let Some(u) = &upgrade {
        headers.push(Header::new("Connection", "upgrade"));
        headers.push(Header::new("Upgrade", u.as_str()));
    }
    if body_kind == BodyKind::None {
        http1::remove_header(&mut headers, "content-length");
    }
    let mut req = http::Request::builder().method(method).uri(uri);
    for h in &headers {
        let name = http::HeaderName::from_bytes(h.name.as_bytes())
            .map_err(|_| RemoteError::BadRequest(format!("invalid header name {:?}", h.name)))?;
        let value = http::HeaderValue::from_bytes(&h.value)
            .map_err(|_| RemoteError::BadRequest(format!("invalid value of header {}", h.name)))?;
        req = req.header(name, value);
    }
    let req = req
        .body(Empty::new().map_err(|e| match e {}).boxed_unsync())
        .map_err(|e| RemoteError::BadRequest(e.to_string()))?;
    Ok((req, body_kind, upgrade.is_some()))
}

/// Logs a switched connection's end: status 101, bytes each way, `ok`, `edge-cancelled` or
/// `tunnel-failed`.
fn log_switched(
    id: StreamRef,
    method: &str,
    target: &str,
    started: Instant,
    up: u64,
    down: u64,
    err: Option<std::io::Error>,
) {
    Access {
        status: 101,
        ..Access::new(Peer::Stream(id), method, target, started).far_tunnel_ended(up, down, err)
    }
    .log();
}

/// Relays a connection the origin switched to another protocol (`101`, RFC 9110 §7.8): bytes
/// both ways between the stream and the origin until both ended.
async fn switched<S: FarStream>(
    id: StreamRef,
    method: &str,
    target: &str,
    mut stream: S,
    on_upgrade: hyper::upgrade::OnUpgrade,
    started: Instant,
) {
    let mut origin = match on_upgrade.await {
        Ok(u) => hyper_util::rt::TokioIo::new(u),
        Err(e) => {
            stream.reset(ResetReason::Cancel);
            let detail = format!("switching protocols failed: {}", chain(&e));
            let err = std::io::Error::other(detail);
            return log_switched(id, method, target, started, 0, 0, Some(err));
        }
    };
    let (up, down) = (AtomicU64::new(0), AtomicU64::new(0));
    let res = tokio::io::copy_bidirectional_with_sizes(
        &mut Counted::new(&mut stream, &down),
        &mut Counted::new(&mut origin, &up),
        DEFAULT_TUNNEL_BUFFER,
        DEFAULT_TUNNEL_BUFFER,
    )
    .await;
    let (up, down) = (up.load(Ordering::Relaxed), down.load(Ordering::Relaxed));
    match res {
        Ok(_) => log_switched(id, method, target, started, up, down, None),
        Err(e) => {
            stream.reset(ResetReason::Cancel);
            log_switched(id, method, target, started, up, down, Some(e));
        }
    }
}

/// Writes the response head and streams its body; returns status, body bytes, and for a `101`
/// to a request with `upgrade`, the origin connection's switch.
async fn write_response<W: AsyncWrite + Unpin>(
    wr: &mut W,
    method: &str,
    mut res: http::Response<hyper::body::Incoming>,
    upgrade: bool,
    sent: &Sent,
) -> Result<(u16, u64, Option<hyper::upgrade::OnUpgrade>), Outcome> {
    let status = res.status();
    if status == http::StatusCode::SWITCHING_PROTOCOLS {
        let protocol = res.headers().get(http::header::UPGRADE).cloned();
        let (true, Some(protocol)) = (upgrade, protocol) else {
            return Err(Outcome::Before(RemoteError::BadOrigin(
                "101 Switching Protocols without an Upgrade on both sides".into(),
            )));
        };
        let on_upgrade = hyper::upgrade::on(&mut res);
        let mut headers: Vec<Header> = res
            .headers()
            .iter()
            .map(|(k, v)| Header::new(k.as_str(), v.as_bytes()))
            .collect();
        http1::strip_hop_by_hop(&mut headers);
        http1::remove_header(&mut headers, http1::reply::ERROR_HEADER);
        headers.push(Header::new("Connection", "upgrade"));
        headers.push(Header::new("Upgrade", protocol.as_bytes()));
        let head = http1::ResponseHead {
            status: 101,
            reason: "Switching Protocols".into(),
            minor: 1,
            headers,
        };
        wr.write_all(&http1::encode_response_head(&head))
            .await
            .map_err(|e| Outcome::Cut(format!("edge write: {e}")))?;
        wr.flush()
            .await
            .map_err(|e| Outcome::Cut(format!("edge write: {e}")))?;
        return Ok((101, 0, Some(on_upgrade)));
    }
    let reason = res
        .extensions()
        .get::<hyper::ext::ReasonPhrase>()
        .and_then(|r| std::str::from_utf8(r.as_bytes()).ok().map(str::to_string))
        .unwrap_or_else(|| status.canonical_reason().unwrap_or("").to_string());
    let mut headers: Vec<Header> = res
        .headers()
        .iter()
        .map(|(k, v)| Header::new(k.as_str(), v.as_bytes()))
        .collect();
    let no_body = method == "HEAD"
        || status.is_informational()
        || status == http::StatusCode::NO_CONTENT
        || status == http::StatusCode::NOT_MODIFIED;
    if !no_body {
        // hyper decodes a lone `chunked` and reads any other final coding until the close,
        // still coded. Only the first is a body this proxy can deliver: forwarding coded bytes
        // without their coding would hand the client a different representation.
        let chunked = match http1::transfer_codings(&headers) {
            Ok(None) => false,
            Ok(Some(c)) if c == ["chunked"] => true,
            Ok(Some(c)) => {
                return Err(Outcome::Before(RemoteError::BadOrigin(format!(
                    "the origin's reply uses the transfer coding {:?}, which the proxy does not \
                     decode",
                    c.join(", ")
                ))))
            }
            Err(e) => return Err(Outcome::Before(RemoteError::BadOrigin(e.to_string()))),
        };
        // Transfer-Encoding overrides Content-Length, which an intermediary must remove
        // (RFC 9112 §6.3 rule 3): the body is re-framed below.
        if chunked {
            http1::remove_header(&mut headers, "content-length");
        }
    }
    http1::strip_hop_by_hop(&mut headers);
    // `X-Longhaul-Error` marks the proxy's own synthetic replies on the stream; an origin's is
    // removed so it can neither reach the client nor be taken for the proxy's outcome.
    http1::remove_header(&mut headers, http1::reply::ERROR_HEADER);
    // An origin without a clock sends no Date: the pair dates the reply as received here.
    http1::add_date_if_missing(&mut headers);
    let has_length = http1::header_str(&headers, "content-length").is_some();
    let out = if no_body || has_length {
        OutFraming::Raw
    } else {
        headers.push(Header::new("Transfer-Encoding", "chunked"));
        OutFraming::Chunked
    };
    let head = http1::ResponseHead {
        status: status.as_u16(),
        reason,
        minor: 1,
        headers,
    };
    // Recorded before the head goes out: from its first byte on, a failure cuts the reply
    // instead of answering with a status.
    sent.status.store(status.as_u16(), Ordering::Relaxed);
    wr.write_all(&http1::encode_response_head(&head))
        .await
        .map_err(|e| Outcome::Cut(format!("edge write: {e}")))?;
    let mut body = res.into_body();
    let mut total = 0u64;
    if !no_body {
        while let Some(frame) = body.frame().await {
            let frame =
                frame.map_err(|e| Outcome::OriginCut(format!("origin body: {}", chain(&e))))?;
            if let Ok(data) = frame.into_data() {
                let n = data.len() as u64;
                http1::write_piece(wr, out, data)
                    .await
                    .map_err(|e| Outcome::Cut(e.to_string()))?;
                total += n;
                sent.body.store(total, Ordering::Relaxed);
            }
        }
        if out == OutFraming::Chunked {
            wr.write_all(b"0\r\n\r\n")
                .await
                .map_err(|e| Outcome::Cut(format!("edge write: {e}")))?;
        }
    }
    wr.flush()
        .await
        .map_err(|e| Outcome::Cut(format!("edge write: {e}")))?;
    Ok((status.as_u16(), total, None))
}

async fn connect_with_status<S: FarStream>(
    ctx: &Ctx,
    id: StreamRef,
    target: &str,
    mut stream: S,
    early: BytesMut,
    started: Instant,
) {
    let origin = match connect_target(ctx, target).await {
        Ok(o) => o,
        Err(e) => return reply_error(&mut stream, id, "CONNECT", target, started, &e).await,
    };
    if stream
        .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
        .await
        .is_err()
    {
        return;
    }
    let (up, down, err) = pump(stream, origin, early).await;
    let record = Access::new(Peer::Stream(id), "CONNECT", target, started);
    Access {
        status: 200,
        ..record.far_tunnel_ended(up, down, err)
    }
    .log();
}
