//! Tunnels: CONNECT requests and intercepted non-HTTP connections, carried as raw bytes.
//!
//! CONNECT is answered either optimistically (`200` at once, the stream is a `Tunnel` whose far
//! side connects while the client already sends its TLS hello) or after the far side connected
//! (the CONNECT request itself travels on an `Http` stream and the remote answers with a status).
//! A far-side failure closes the tunnel and is logged with its reason. SOCKS5 CONNECT
//! ([`crate::socks`]) opens its tunnels the same two ways ([`connect_first`], [`pump_with_prefix`]).
//!
//! It does NOT look inside tunnels: HTTPS stays end-to-end encrypted.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader, ReadHalf};

use crate::client::{self, abort, ConnectReply, Ctx, Settings};
use crate::conn::{Abort, ClientConn};
use crate::errors::{answer, EdgeError};
use crate::transport::{StreamKind, Transport};
use app::access::{Access, Peer};
use app::counted::Counted;
use http1::target::parse_authority;
use http1::RequestHead;

/// Buffer of each tunnel direction (bounds memory per tunnel; the stream's credit bounds the rest).
pub const DEFAULT_TUNNEL_BUFFER: usize = 64 * 1024;

/// Why a tunnel ended before both of its directions finished.
#[derive(Debug)]
pub(crate) struct TunnelCut {
    /// The client reset or dropped its connection: its choice (browsers reset a tunnel they
    /// are done with, HTTP/2 ones with `RST_STREAM CANCEL`), no failure of the proxy's.
    pub(crate) by_client: bool,
    /// What happened.
    pub(crate) reason: String,
}

impl TunnelCut {
    /// The access-log outcome: `client-closed` or `tunnel-failed`.
    pub(crate) fn outcome(&self) -> &'static str {
        if self.by_client {
            "client-closed"
        } else {
            "tunnel-failed"
        }
    }
}

/// The record of a tunnel that ended after `up` bytes towards the target and `down` from it:
/// outcome `ok`, or the cut's outcome with its reason as the detail.
pub(crate) fn tunnel_record(
    record: Access<'_>,
    up: u64,
    down: u64,
    cut: Option<TunnelCut>,
) -> Access<'_> {
    let outcome = cut.as_ref().map(TunnelCut::outcome);
    let ended = record.tunnel_ended(up, down, cut.map(|c| c.reason));
    match outcome {
        Some(outcome) => Access { outcome, ..ended },
        None => ended,
    }
}

const ESTABLISHED: &[u8] = b"HTTP/1.1 200 Connection established\r\n\r\n";

/// The `host:port` a CONNECT to `authority` goes to, if the request is valid (400) and its
/// port allowed (403, `connect_ports`).
pub(crate) fn connect_target(settings: &Settings, authority: &str) -> Result<String, EdgeError> {
    let auth = parse_authority(authority, None).map_err(EdgeError::BadRequest)?;
    settings.check_connect_port(auth.port)?;
    Ok(auth.target())
}

/// Handles a CONNECT request whose earlier pipelined replies are written.
pub(crate) async fn connect<T, R, W>(
    ctx: &Ctx<T>,
    head: RequestHead,
    rd: R,
    mut buf: BytesMut,
    mut wr: W,
    peer: SocketAddr,
    started: Instant,
) where
    T: Transport,
    R: AsyncRead + Unpin + Send,
    W: AsyncWrite + Abort + Unpin + Send,
{
    let record = || Access::new(Peer::Client(peer), "CONNECT", &head.target, started);
    if let Err(err) = client::host_present(&head).and_then(|()| client::single_host(&head)) {
        answer(&mut wr, &err, record()).await;
        return;
    }
    let target = match connect_target(&ctx.settings, &head.target) {
        Ok(t) => t,
        Err(err) => {
            answer(&mut wr, &err, record()).await;
            return;
        }
    };
    match ctx.settings.connect_reply {
        ConnectReply::Optimistic => {
            let first = buf.split().freeze();
            let stream = match ctx
                .transport
                .open(StreamKind::Tunnel, &target, first.clone())
                .await
            {
                Ok(s) => s,
                Err(e) => {
                    answer(&mut wr, &EdgeError::from_open(e), record()).await;
                    return;
                }
            };
            if client::write_all(&mut wr, ESTABLISHED).await.is_err() {
                return;
            }
            let first_down = OnceLock::new();
            let (up, down, err) = pump(
                ctx,
                rd,
                wr,
                stream,
                (Bytes::new(), first.len() as u64),
                &first_down,
            )
            .await;
            let ttfb = first_down
                .get()
                .map(|t| t.saturating_duration_since(started));
            log_tunnel(
                peer,
                "CONNECT",
                &head.target,
                200,
                up,
                down,
                started,
                ttfb,
                err,
            );
        }
        ConnectReply::AfterConnect => {
            let (stream, already) = match connect_first(ctx, &target).await {
                FarConnect::Connected(stream, already) => (stream, already),
                FarConnect::Failed(err) => {
                    answer(&mut wr, &err, record()).await;
                    return;
                }
                FarConnect::Refused(res, mut srd, mut sbuf) => {
                    // The remote's own error response (status, reason body): pass it on and
                    // close.
                    let mut headers = res.headers;
                    http1::strip_hop_by_hop(&mut headers);
                    headers.push(http1::Header::new("Connection", "close"));
                    let out = http1::ResponseHead {
                        headers,
                        minor: 1,
                        ..res
                    };
                    let kind =
                        http1::response_body_kind("CONNECT", &out).unwrap_or(http1::BodyKind::None);
                    let _ = wr.write_all(&http1::encode_response_head(&out)).await;
                    let _ = http1::copy_body(
                        kind,
                        &mut srd,
                        &mut sbuf,
                        &mut wr,
                        http1::OutFraming::Raw,
                    )
                    .await;
                    let _ = wr.shutdown().await;
                    Access {
                        status: out.status,
                        outcome: "refused-by-far-side",
                        detail: out.reason.as_str().into(),
                        ..record()
                    }
                    .log();
                    return;
                }
            };
            if client::write_all(&mut wr, ESTABLISHED).await.is_err() {
                return;
            }
            let early = buf.split().freeze();
            let first_down = OnceLock::new();
            let (up, down, err) =
                pump_with_prefix(ctx, rd, wr, stream, already, early, &first_down).await;
            let ttfb = first_down
                .get()
                .map(|t| t.saturating_duration_since(started));
            log_tunnel(
                peer,
                "CONNECT",
                &head.target,
                200,
                up,
                down,
                started,
                ttfb,
                err,
            );
        }
    }
}

/// What asking the far side to connect before the client is answered (after-connect mode)
/// gave.
pub(crate) enum FarConnect<S> {
    /// The target is connected: the stream, and what the far side already sent after its
    /// `200` head (the target's first bytes).
    Connected(S, Bytes),
    /// The remote refused with a response of its own (a status other than 200): its head, and
    /// the stream's read half and the bytes read past the head, to relay its body from.
    Refused(http1::ResponseHead, ReadHalf<S>, BytesMut),
    /// The stream could not be opened, or its reply was missing or broken.
    Failed(EdgeError),
}

/// Opens an `Http` stream carrying `CONNECT target` and waits for the remote's answer: the
/// after-connect way of opening a tunnel, for HTTP CONNECT and SOCKS5 CONNECT alike.
pub(crate) async fn connect_first<T: Transport>(
    ctx: &Ctx<T>,
    target: &str,
) -> FarConnect<T::Stream> {
    let req = format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n");
    let stream = match ctx
        .transport
        .open(StreamKind::Http, target, Bytes::from(req))
        .await
    {
        Ok(s) => s,
        Err(e) => return FarConnect::Failed(EdgeError::from_open(e)),
    };
    let (mut srd, swr) = client::split(stream);
    let mut sbuf = BytesMut::new();
    let res = http1::read_response_head(&mut srd, &mut sbuf, ctx.settings.max_header_bytes).await;
    let res = match res {
        Ok(r) => r,
        Err(http1::HeadError::Io(e)) => {
            return FarConnect::Failed(match ctx.transport.failure(&e) {
                Some(f) => EdgeError::from_far(&f),
                None => EdgeError::BadReply(e.to_string()),
            })
        }
        Err(e) => return FarConnect::Failed(EdgeError::BadReply(e.to_string())),
    };
    if res.status != 200 {
        return FarConnect::Refused(res, srd, sbuf);
    }
    FarConnect::Connected(srd.unsplit(swr), sbuf.freeze())
}

/// Tunnels an intercepted connection (not parsed as HTTP) to its original destination.
pub(crate) async fn intercepted<T: Transport, C: ClientConn>(
    ctx: &Ctx<T>,
    mut sock: C,
    peer: SocketAddr,
    orig: SocketAddr,
) {
    let started = Instant::now();
    let target = orig.to_string();
    let (rd, wr) = sock.halves();
    let stream = match ctx
        .transport
        .open(StreamKind::Tunnel, &target, Bytes::new())
        .await
    {
        Ok(s) => s,
        Err(e) => {
            let err = EdgeError::from_open(e);
            log_tunnel(
                peer,
                "TUNNEL",
                &target,
                0,
                0,
                0,
                started,
                None,
                Some(TunnelCut {
                    by_client: false,
                    reason: err.to_string(),
                }),
            );
            abort(wr);
            return;
        }
    };
    let first_down = OnceLock::new();
    let (up, down, err) = pump(ctx, rd, wr, stream, (Bytes::new(), 0), &first_down).await;
    let ttfb = first_down
        .get()
        .map(|t| t.saturating_duration_since(started));
    log_tunnel(peer, "TUNNEL", &target, 0, up, down, started, ttfb, err);
}

/// Logs the access record of a tunnel that ended (and a warning with the failure, if any).
#[allow(clippy::too_many_arguments)]
pub(crate) fn log_tunnel(
    peer: SocketAddr,
    method: &str,
    target: &str,
    status: u16,
    up: u64,
    down: u64,
    started: Instant,
    ttfb: Option<std::time::Duration>,
    cut: Option<TunnelCut>,
) {
    warn_cut(peer, target, cut.as_ref());
    let record = Access {
        status,
        ttfb,
        ..Access::new(Peer::Client(peer), method, target, started)
    };
    tunnel_record(record, up, down, cut).log();
}

/// A warning for a tunnel closed by a failure (not for one its client closed).
pub(crate) fn warn_cut(peer: SocketAddr, target: &str, cut: Option<&TunnelCut>) {
    if let Some(c) = cut.filter(|c| !c.by_client) {
        tracing::warn!(%peer, target, error = %c.reason, "tunnel closed by a failure");
    }
}

async fn pump<T, R, W>(
    ctx: &Ctx<T>,
    rd: R,
    wr: W,
    stream: T::Stream,
    (to_client, already_up): (Bytes, u64),
    first_down: &OnceLock<Instant>,
) -> (u64, u64, Option<TunnelCut>)
where
    T: Transport,
    R: AsyncRead + Unpin + Send,
    W: AsyncWrite + Abort + Unpin + Send,
{
    let (up, down, err) =
        pump_with_prefix(ctx, rd, wr, stream, to_client, Bytes::new(), first_down).await;
    (up + already_up, down, err)
}

/// Copies both ways until both directions ended. `to_client` is written to the client first,
/// `to_far` to the stream first. Returns bytes up, bytes down, and why the tunnel was cut if it
/// was (then the client connection is reset and the stream dropped, which resets it): the far
/// side's failure, or the client's connection reset or broken (the only other I/O here).
/// `first_down` is set when the first byte from the far side is at hand (time to first byte).
pub(crate) async fn pump_with_prefix<T, R, W>(
    ctx: &Ctx<T>,
    rd: R,
    mut wr: W,
    stream: T::Stream,
    to_client: Bytes,
    to_far: Bytes,
    first_down: &OnceLock<Instant>,
) -> (u64, u64, Option<TunnelCut>)
where
    T: Transport,
    R: AsyncRead + Unpin + Send,
    W: AsyncWrite + Abort + Unpin + Send,
{
    let (srd, mut swr) = client::split(stream);
    // What each direction carried, counted as it is written: on a failure too.
    let (up, down) = (AtomicU64::new(0), AtomicU64::new(0));
    let upload = async {
        let mut swr = Counted::new(&mut swr, &up);
        swr.write_all(&to_far).await?;
        let mut r = BufReader::with_capacity(DEFAULT_TUNNEL_BUFFER, rd);
        tokio::io::copy_buf(&mut r, &mut swr).await?;
        swr.shutdown().await?;
        Ok::<(), std::io::Error>(())
    };
    let download = async {
        if !to_client.is_empty() {
            let _ = first_down.set(Instant::now());
        }
        let mut wr = Counted::new(&mut wr, &down);
        wr.write_all(&to_client).await?;
        let mut r = BufReader::with_capacity(DEFAULT_TUNNEL_BUFFER, srd);
        if !r.fill_buf().await?.is_empty() {
            let _ = first_down.set(Instant::now());
        }
        tokio::io::copy_buf(&mut r, &mut wr).await?;
        wr.shutdown().await?;
        Ok::<(), std::io::Error>(())
    };
    let res = copy_both(upload, download).await;
    let (up, down) = (up.load(Ordering::Relaxed), down.load(Ordering::Relaxed));
    let describe = |e: &std::io::Error| match ctx.transport.failure(e) {
        Some(f) => TunnelCut {
            by_client: false,
            reason: format!("far side: {}", f.reason),
        },
        None => {
            use std::io::ErrorKind::{BrokenPipe, ConnectionAborted, ConnectionReset};
            let by_client = matches!(e.kind(), ConnectionReset | ConnectionAborted | BrokenPipe);
            let reason = if by_client {
                format!("the client reset its connection: {e}")
            } else {
                e.to_string()
            };
            TunnelCut { by_client, reason }
        }
    };
    match res {
        (Ok(()), Ok(())) => (up, down, None),
        (Err(e), _) | (_, Err(e)) => {
            let cut = describe(&e);
            abort(wr);
            (up, down, Some(cut))
        }
    }
}

/// Runs both directions; as soon as one fails, the other is abandoned.
async fn copy_both<A, B>(a: A, b: B) -> (std::io::Result<()>, std::io::Result<()>)
where
    A: std::future::Future<Output = std::io::Result<()>>,
    B: std::future::Future<Output = std::io::Result<()>>,
{
    tokio::pin!(a, b);
    let mut ra = None;
    let mut rb = None;
    while ra.is_none() || rb.is_none() {
        tokio::select! {
            r = &mut a, if ra.is_none() => {
                let failed = r.is_err();
                ra = Some(r);
                if failed { break; }
            }
            r = &mut b, if rb.is_none() => {
                let failed = r.is_err();
                rb = Some(r);
                if failed { break; }
            }
        }
    }
    // A direction abandoned because the other failed reports no error of its own, so the
    // failure logged is the real one.
    (ra.unwrap_or(Ok(())), rb.unwrap_or(Ok(())))
}
