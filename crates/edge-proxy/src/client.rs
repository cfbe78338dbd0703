//! One client connection of the edge: HTTP/1.1 forward proxying, CONNECT and interception.
//!
//! Each client connection runs a reader and a writer concurrently in one task:
//! - the reader parses requests, opens one `Http` stream per request at once (so pipelined
//!   requests all travel immediately), uploads the body, and queues the stream's reply half;
//! - the writer relays the replies strictly in request order (pipelining semantics), re-framing
//!   each for the client, and handles `Expect: 100-continue` (answered here, saving a long round
//!   trip) and CONNECT (after the replies queued before it).
//!
//! Between requests, with nothing buffered and no reply owed, a keep-alive connection is idle:
//! its task holds the socket and the idle timer and nothing else (no read buffer, no reader or
//! writer, no queue), and waits for the next byte before setting those up again, as nginx frees
//! an idle keep-alive connection's header buffer. That keeps an idle client at about 1.6 KiB of
//! edge memory (`crates/longhaul/tests/idle_memory.rs`).
//!
//! A request that asks to switch protocols (`Connection: upgrade`, `Upgrade`, no content; not
//! `h2c`) is forwarded with its upgrade and ends the reading of HTTP on the connection: a `101`
//! makes the connection a byte tunnel over the request's stream (WebSocket, RFC 9110 §7.8), any
//! other reply is relayed and the connection closes.
//!
//! A failure before any reply byte reached the client becomes a synthetic error response
//! ([`crate::errors`]); an idempotent bodiless request whose stream failed retryably is sent once
//! more. A failure after reply bytes were sent resets the client connection (RST), so a cut
//! reply can never look complete.
//!
//! It does NOT know about the pool: streams come from a [`Transport`].

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use ipnet::IpNet;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadHalf, WriteHalf};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot, watch, Notify};

use crate::conn::{Abort, ClientConn};
use crate::errors::{answer, EdgeError};
use crate::page::{self, PageClock};
use crate::transport::{FarFailure, StreamKind, Transport};
use crate::tunnel;
use app::access::{Access, Peer};
use http1::target::{parse_absolute, parse_authority, Authority};
use http1::{BodyKind, CopyError, HeadError, Header, OutFraming, RequestHead};

/// How the edge answers CONNECT.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ConnectReply {
    /// `200` at once, before the far side has connected (saves one long round trip); a far-side
    /// failure then closes the tunnel.
    Optimistic,
    /// `200` only after the far side has connected; failures are answered 502/504/403.
    AfterConnect,
}

/// Per-connection behaviour, derived from the configuration.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Largest request or response head.
    pub max_header_bytes: usize,
    /// Most requests of one client connection in flight at once (pipelining depth).
    pub max_pipeline: usize,
    /// Idle time after which a keep-alive client connection with no request under way is
    /// closed. A new connection waits for its first byte at most `header_timeout` (if shorter).
    pub idle_timeout: Duration,
    /// Longest time from the first byte of a request head to its end; a slower client
    /// (slowloris) gets `408` and the connection closes.
    pub header_timeout: Duration,
    /// Longest time data sent to a client may stay unacknowledged or wait behind a closed
    /// receive window (`TCP_USER_TIMEOUT`); keepalive probes find a client that vanished while
    /// its connection was quiet.
    pub send_timeout: Duration,
    /// How CONNECT is answered.
    pub connect_reply: ConnectReply,
    /// Ports CONNECT may reach; empty means any.
    pub connect_ports: Vec<u16>,
    /// Client networks served; others get 403.
    pub allowed_clients: Vec<IpNet>,
    /// Intercepted destination ports parsed as HTTP; other ports are tunnelled.
    pub transparent_http_ports: Vec<u16>,
    /// Most client connections served at once; further ones are answered `503
    /// too-many-connections` and closed (see [`crate::server`]).
    pub max_client_connections: usize,
}

impl Settings {
    /// Whether `ip` may use the proxy (`allowed_clients`): the one client check of every
    /// listener (explicit, intercepted, SOCKS5).
    pub fn client_allowed(&self, ip: std::net::IpAddr) -> bool {
        self.allowed_clients.iter().any(|n| n.contains(&ip))
    }

    /// The HTTP CONNECT port policy (`connect_ports`): [`check_port`].
    pub fn check_connect_port(&self, port: u16) -> Result<(), EdgeError> {
        check_port(&self.connect_ports, port)
    }
}

/// The port policy of tunnels, for HTTP CONNECT (`connect_ports`) and SOCKS5 CONNECT
/// (`socks.connect_ports`) alike: `port` must be in `allowed`, unless `allowed` is empty (any
/// port); otherwise the target is refused (403 `forbidden-target`, SOCKS5 reply 0x02).
pub fn check_port(allowed: &[u16], port: u16) -> Result<(), EdgeError> {
    if allowed.is_empty() || allowed.contains(&port) {
        Ok(())
    } else {
        Err(EdgeError::ForbiddenTarget(format!(
            "CONNECT to port {port} is not allowed"
        )))
    }
}

/// Shared state of all client connections.
pub struct Ctx<T: Transport> {
    /// Opens streams to the remote.
    pub transport: T,
    /// Behaviour.
    pub settings: Settings,
    /// Becomes true when the edge drains: no new requests are read, replies in flight finish
    /// with `Connection: close`.
    pub draining: watch::Receiver<bool>,
}

/// How a client connection reached the edge.
#[derive(Debug, Clone, Copy)]
pub enum Entry {
    /// The client is configured to use the proxy.
    Explicit,
    /// The connection was intercepted (REDIRECT/TPROXY) on its way to `orig`.
    Transparent {
        /// Original destination.
        orig: SocketAddr,
    },
}

const CONTINUE: &[u8] = b"HTTP/1.1 100 Continue\r\n\r\n";
/// `Via` entry the edge adds to forwarded responses (RFC 9110 §7.6.3); the pair acts as one
/// proxy. The far side receives HTTP/1.1 from origins; a forwarded request's entry names the
/// client's version ([`prepare`], [`prepare_as`]).
pub(crate) const VIA: &str = "1.1 longhaul";

/// Serves one client connection to completion.
pub async fn serve<T: Transport, C: ClientConn>(
    ctx: Arc<Ctx<T>>,
    sock: C,
    peer: SocketAddr,
    entry: Entry,
) {
    let _ = sock.tcp().set_nodelay(true);
    if let Err(e) = set_client_timeouts(sock.tcp(), ctx.settings.send_timeout) {
        tracing::debug!(%peer, error = %e, "client socket timeouts not set");
    }
    if !ctx.settings.client_allowed(peer.ip()) {
        Box::pin(refuse_client(sock, peer, entry)).await;
        return;
    }
    if let Entry::Transparent { orig } = entry {
        if !ctx.settings.transparent_http_ports.contains(&orig.port()) {
            Box::pin(tunnel::intercepted(&ctx, sock, peer, orig)).await;
            return;
        }
    }
    let s = &ctx.settings;
    let mut sock = sock;
    let mut draining = ctx.draining.clone();
    // A new connection must send its first byte within the header timeout (a connection that
    // never sends anything would otherwise hold a slot for the whole idle timeout); between
    // requests of a keep-alive connection the idle timeout applies.
    let mut wait = s.header_timeout.min(s.idle_timeout);
    let mut until = tokio::time::Instant::now() + wait;
    let mut page = PageClock::default();
    loop {
        // Idle, with nothing read and no reply owed: the connection holds no buffer and no
        // request state until the client sends again (as nginx's keep-alive state does).
        if *draining.borrow() {
            break;
        }
        // Waits for a byte, the end of the stream or an error; the session's first read then
        // reports what it found.
        let ready = tokio::select! {
            r = tokio::time::timeout_at(until, sock.ready()) => r,
            _ = draining.changed() => break,
        };
        if ready.is_err() {
            tracing::debug!(%peer, wait_ms = wait.as_millis() as u64, "idle client connection closed");
            break;
        }
        let page_start = page.busy(Instant::now());
        match Box::pin(session(
            &ctx, &mut sock, peer, entry, wait, until, page_start,
        ))
        .await
        {
            Session::Idle { wait: w, until: u } => {
                page.idle(Instant::now());
                wait = w;
                until = u;
            }
            Session::Closed { linger } => {
                if linger {
                    drain_and_close(&mut sock).await;
                }
                return;
            }
            Session::Cut => {
                sock.abort_on_close();
                return;
            }
        }
    }
    // Idle timeout or drain with nothing owed: close as the writer does after the last reply.
    drain_and_close(&mut sock).await;
}

/// Answers a client outside `allowed_clients` (explicit) or just closes (intercepted: the
/// client did not address a proxy, so it gets no proxy's answer), with an access-log line.
async fn refuse_client<C: ClientConn>(mut sock: C, peer: SocketAddr, entry: Entry) {
    let err = EdgeError::ForbiddenClient(peer.ip());
    let record = Access::new(Peer::Client(peer), "-", "-", Instant::now());
    if matches!(entry, Entry::Explicit) {
        answer(&mut sock, &err, record).await;
        drain_and_close(&mut sock).await;
    } else {
        record.failed(err.tag(), err.to_string()).log();
    }
}

/// How a session (the requests of a connection from one idle period to the next) ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Session {
    /// Everything read was answered and nothing more has arrived: the connection is idle
    /// again, with `wait` as its idle timeout, ending at `until`.
    Idle {
        wait: Duration,
        until: tokio::time::Instant,
    },
    /// The connection is done; `linger`: wait for the client's close ([`drain_and_close`]).
    Closed { linger: bool },
    /// The client went away with replies still owed: the connection ends with a reset, so
    /// that a reply cut short (a close-delimited one above all) never looks complete.
    Cut,
}

/// Replies owed on a session: requests handed to the writer whose reply is not yet written.
/// The reader ends the session as idle only when it has nothing buffered and none is owed.
#[derive(Default)]
struct Owed {
    count: AtomicUsize,
    /// Signalled when `count` drops to zero.
    settled: Notify,
}

impl Owed {
    fn add(&self) {
        self.count.fetch_add(1, Ordering::AcqRel);
    }

    fn done(&self) {
        if self.count.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.settled.notify_one();
        }
    }

    fn none(&self) -> bool {
        self.count.load(Ordering::Acquire) == 0
    }
}

/// Serves requests on a readable connection until it is idle again or done. Its buffers, the
/// reader and writer and their queue exist only while it runs.
async fn session<T: Transport, C: ClientConn>(
    ctx: &Ctx<T>,
    sock: &mut C,
    peer: SocketAddr,
    entry: Entry,
    wait: Duration,
    until: tokio::time::Instant,
    page_start: Instant,
) -> Session {
    // Borrowed halves: the socket itself is closed by `serve`, after both sides are done, so
    // an aborted reply ends with a reset and never with a clean FIN.
    let (rd, wr) = sock.halves();
    let (tx, rx) = mpsc::channel(ctx.settings.max_pipeline.max(1));
    let cause = Arc::new(OnceLock::new());
    let owed = Owed::default();
    let reader = read_requests(
        ctx, rd, tx, peer, entry, &cause, &owed, wait, until, page_start,
    );
    let writer = write_replies(ctx, wr, rx, peer, &cause, &owed);
    tokio::pin!(reader, writer);
    tokio::select! {
        r = &mut reader => match r {
            // Nothing owed: the writer waits for a next reply that will not come in this session.
            Ok(Read::Idle { wait, until }) => Session::Idle { wait, until },
            // Requests are all read: finish the queued replies.
            Ok(Read::Done) => Session::Closed { linger: writer.await == End::Closed },
            // On a client read failure, dropping the writer drops every stream (reset),
            // and each request still in flight is logged with the cause.
            Err(why) => {
                let _ = cause.set(Ending::client(why));
                if owed.none() {
                    Session::Closed { linger: false }
                } else {
                    Session::Cut
                }
            }
        },
        end = &mut writer => Session::Closed { linger: end == End::Closed },
    }
}

/// Longest wait, after our FIN, for the client to finish sending and close.
pub const DEFAULT_CLOSE_LINGER: Duration = Duration::from_secs(2);
/// Most bytes read and discarded while waiting for the client to close.
const CLOSE_LINGER_BYTES: usize = 1024 * 1024;

/// Reads and discards what the client still sends (bounded) until it closes: closing a
/// socket with unread data would send a reset that can destroy the last response before the
/// client read it.
pub(crate) async fn drain_and_close<C: AsyncRead + AsyncWrite + Unpin>(sock: &mut C) {
    let _ = sock.shutdown().await;
    let mut scratch = vec![0u8; 16 * 1024];
    let mut total = 0usize;
    let _ = tokio::time::timeout(DEFAULT_CLOSE_LINGER, async {
        while total < CLOSE_LINGER_BYTES {
            match sock.read(&mut scratch).await {
                Ok(0) | Err(_) => break,
                Ok(n) => total += n,
            }
        }
    })
    .await;
}

/// How the writer ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    /// Replies are complete and our side is shut down: linger for the client's close.
    Closed,
    /// The connection was reset (cut reply) or handed to a tunnel: close at once.
    Done,
}

/// One queued item for the writer, in request order.
enum Pending<R, S> {
    /// A reply to relay from a stream.
    Reply(Box<ReplyJob<S>>),
    /// An error to answer; the connection closes after it.
    Error {
        err: EdgeError,
        method: String,
        target: String,
        started: Instant,
    },
    /// A reply the edge gives itself (`Max-Forwards: 0`); the connection stays open unless
    /// `close`.
    Local {
        reply: Vec<u8>,
        method: String,
        target: String,
        close: bool,
        started: Instant,
    },
    /// A request with a forwarded upgrade: its reply is relayed like any other; a `101` makes the
    /// connection a byte tunnel over the same stream. Nothing after it is read as HTTP.
    Upgrade {
        job: Box<ReplyJob<S>>,
        swr: WriteHalf<S>,
        rd: R,
        buf: BytesMut,
    },
    /// A CONNECT: the connection becomes a tunnel once earlier replies are written.
    Connect {
        head: RequestHead,
        rd: R,
        buf: BytesMut,
        started: Instant,
    },
}

struct ReplyJob<S> {
    stream: ReadHalf<S>,
    method: String,
    /// Target as the client wrote it (for the log).
    log_target: String,
    /// `host:port` the stream was opened to.
    target: String,
    client_minor: u8,
    /// The client asked to close after this reply.
    close: bool,
    /// Send `100 Continue` before relaying, then signal the reader to upload the body.
    continue_tx: Option<oneshot::Sender<()>>,
    /// The whole request, kept for one retry (idempotent and bodiless requests only).
    retry: Option<Bytes>,
    /// When the request's page began: a retry carries the page's age too.
    page_start: Instant,
    /// Request body bytes uploaded so far (set by the reader, logged by the writer).
    uploaded: Arc<AtomicU64>,
    /// What of the reply reached the client so far (set by the relay).
    progress: Arc<ReplyProgress>,
    /// Fires (with the reason) if the request body's framing turned out invalid; dropped
    /// unfired when the body was fine. Then the request is answered 400 unless its reply has
    /// started, and the connection closes after it.
    bad_body: Option<oneshot::Receiver<String>>,
    started: Instant,
    /// Logs the request if the job is dropped before its outcome was logged.
    unlogged: Unlogged,
}

/// Why a client connection ended while replies were still owed on it: each request left
/// unanswered is logged with it. Set once, by whichever side ended the connection first.
#[derive(Debug)]
struct Ending {
    /// Access-log outcome of the unanswered requests.
    outcome: &'static str,
    detail: String,
}

impl Ending {
    /// The client broke or closed its connection.
    fn client(detail: String) -> Ending {
        Ending {
            outcome: "client-aborted",
            detail,
        }
    }

    /// The edge ended the connection after an earlier reply, so pipelined requests behind it
    /// (already forwarded) get no reply; the client may send them again on a new connection.
    fn earlier(why: &str) -> Ending {
        Ending {
            outcome: "unanswered",
            detail: format!("not sent: {why}"),
        }
    }
}

/// Without an [`Ending`], the connection's task was stopped from outside: the drain grace
/// period of a shutdown is the only place that does.
const SHUTDOWN_DETAIL: &str = "the edge shut down (drain grace period over) before the reply";

/// Writes the access-log line of a request whose reply was abandoned because the connection
/// ended first (the writer, and the jobs queued for it, are dropped then), unless disarmed by the
/// writer, which logs every outcome it sees itself.
struct Unlogged {
    armed: bool,
    peer: SocketAddr,
    method: String,
    log_target: String,
    uploaded: Arc<AtomicU64>,
    /// The reply's head and body bytes the client got before the connection ended.
    progress: Arc<ReplyProgress>,
    started: Instant,
    /// Why the connection ended, set before the writer is dropped.
    cause: Arc<OnceLock<Ending>>,
}

/// How far a reply's relay got, readable after the relay was abandoned: when the client's
/// connection fails mid-reply (HTTP/1.1: the writer, and the relay in it, is dropped) or its
/// upload fails while the reply is under way (HTTP/2), the request's record still says which
/// status the client got and how much of the body.
#[derive(Debug, Default)]
pub(crate) struct ReplyProgress {
    /// Set before the first byte of a reply (an interim `1xx` included) is written.
    pub(crate) started: AtomicBool,
    /// The final reply head's status once written to the client; 0 before.
    pub(crate) status: AtomicU16,
    /// Body bytes written to the client (framing not counted).
    pub(crate) body: AtomicU64,
}

impl Drop for Unlogged {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let (outcome, detail) = match self.cause.get() {
            Some(e) => (e.outcome, e.detail.as_str()),
            None => ("shutdown", SHUTDOWN_DETAIL),
        };
        Access {
            status: self.progress.status.load(Ordering::Relaxed),
            bytes_up: self.uploaded.load(Ordering::Relaxed),
            bytes_down: self.progress.body.load(Ordering::Relaxed),
            outcome,
            detail: detail.into(),
            ..Access::new(
                Peer::Client(self.peer),
                &self.method,
                &self.log_target,
                self.started,
            )
        }
        .log();
    }
}

/// A request prepared for forwarding.
pub(crate) struct Prepared {
    pub(crate) auth: Authority,
    /// Request head bytes to send on the stream.
    pub(crate) head: Vec<u8>,
    pub(crate) body: BodyKind,
    expect_continue: bool,
    close: bool,
    /// The reply the edge gives itself instead of forwarding (`Max-Forwards: 0`).
    pub(crate) local: Option<Vec<u8>>,
    /// The request asks to switch protocols and the upgrade is forwarded: on a `101` the
    /// connection becomes a byte tunnel.
    upgrade: bool,
}

/// Upgrade protocols the edge never forwards: `h2c` (RFC 9113 §3.1 removed the upgrade to
/// cleartext HTTP/2; the pair speaks HTTP/1.1 to origins).
const REFUSED_UPGRADES: &[&str] = &["h2c"];

/// The `Upgrade` value to forward for a request (RFC 9110 §7.8): the client listed `upgrade` in
/// `Connection`, sent `Upgrade`, speaks HTTP/1.1 and sends no content; protocols in
/// [`REFUSED_UPGRADES`] are dropped. `None`: the request is forwarded without an upgrade.
fn upgrade_protocols(head: &RequestHead, tokens: &[String], body: BodyKind) -> Option<String> {
    if head.minor == 0
        || !tokens.iter().any(|t| t == "upgrade")
        || !matches!(body, BodyKind::None | BodyKind::Length(0))
    {
        return None;
    }
    let protocols: Vec<String> = http1::header_tokens(&head.headers, "upgrade")
        .into_iter()
        .filter(|p| {
            let name = p.split('/').next().unwrap_or_default();
            !REFUSED_UPGRADES.contains(&name)
        })
        .collect();
    (!protocols.is_empty()).then(|| protocols.join(", "))
}

/// Methods the edge lists in `Allow` when it answers `OPTIONS` itself.
const ALLOW: &str = "GET, HEAD, POST, PUT, DELETE, CONNECT, OPTIONS, TRACE, PATCH";

/// Request fields left out of a `TRACE` echo (RFC 9110 §9.3.8: credentials and cookies).
const TRACE_HIDDEN: &[&str] = &["authorization", "proxy-authorization", "cookie"];

/// Applies `Max-Forwards` to a `TRACE` or `OPTIONS` request (RFC 9110 §7.6.2): at 0 the edge is
/// the final recipient and returns its own reply; otherwise the value is decremented in
/// `headers`. Other methods and requests without the field are left alone. A value that is not
/// a single decimal number is refused (400).
fn max_forwards(head: &RequestHead, headers: &mut [Header]) -> Result<Option<Vec<u8>>, EdgeError> {
    if head.method != "TRACE" && head.method != "OPTIONS" {
        return Ok(None);
    }
    let mut fields = headers
        .iter_mut()
        .filter(|h| h.name.eq_ignore_ascii_case("max-forwards"));
    let Some(field) = fields.next() else {
        return Ok(None);
    };
    let value = field.value.trim_ascii();
    let n: u64 = match std::str::from_utf8(value) {
        Ok(v)
            if !v.is_empty()
                && v.bytes().all(|b| b.is_ascii_digit())
                && fields.next().is_none() =>
        {
            v.parse().unwrap_or(u64::MAX)
        }
        _ => {
            return Err(EdgeError::BadRequest(format!(
                "invalid Max-Forwards {:?}",
                String::from_utf8_lossy(&field.value)
            )))
        }
    };
    if n > 0 {
        field.value = (n - 1).to_string().into_bytes();
        return Ok(None);
    }
    // The edge is the final recipient.
    let reply = if head.method == "OPTIONS" {
        format!(
            "HTTP/1.1 200 OK\r\nDate: {}\r\nAllow: {ALLOW}\r\nContent-Length: 0\r\n\r\n",
            http1::http_date_now()
        )
        .into_bytes()
    } else {
        // TRACE: the request as received, minus sensitive fields, as `message/http`.
        let echo = RequestHead {
            headers: head
                .headers
                .iter()
                .filter(|h| !TRACE_HIDDEN.iter().any(|n| h.name.eq_ignore_ascii_case(n)))
                .cloned()
                .collect(),
            ..head.clone()
        };
        let body = http1::encode_request_head(&echo);
        let mut out = format!(
            "HTTP/1.1 200 OK\r\nDate: {}\r\nContent-Type: message/http\r\nContent-Length: {}\r\n\r\n",
            http1::http_date_now(),
            body.len()
        )
        .into_bytes();
        out.extend_from_slice(&body);
        out
    };
    Ok(Some(reply))
}

/// `reply` (a head the edge wrote, no `Connection` field) saying that the connection closes
/// after it (RFC 9112 §9.6).
fn closing(mut reply: Vec<u8>) -> Vec<u8> {
    let at = reply
        .windows(2)
        .position(|w| w == b"\r\n")
        .map_or(reply.len(), |p| p + 2);
    reply.splice(at..at, b"Connection: close\r\n".iter().copied());
    reply
}

pub(crate) fn idempotent(method: &str) -> bool {
    matches!(
        method,
        "GET" | "HEAD" | "OPTIONS" | "TRACE" | "PUT" | "DELETE"
    )
}

/// RFC 9112 §3.2: any request with more than one Host field line is answered 400.
pub(crate) fn single_host(head: &RequestHead) -> Result<(), EdgeError> {
    let mut hosts = head
        .headers
        .iter()
        .filter(|h| h.name.eq_ignore_ascii_case("host"));
    if hosts.nth(1).is_some() {
        return Err(EdgeError::BadRequest("more than one Host header".into()));
    }
    Ok(())
}

/// RFC 9112 §3.2: an HTTP/1.1 request without a Host field line is answered 400, whatever its
/// target's form (an HTTP/1.0 request may lack it: the edge writes Host from the target).
pub(crate) fn host_present(head: &RequestHead) -> Result<(), EdgeError> {
    if head.minor >= 1
        && !head
            .headers
            .iter()
            .any(|h| h.name.eq_ignore_ascii_case("host"))
    {
        return Err(EdgeError::BadRequest(
            "HTTP/1.1 request without a Host header (RFC 9112 §3.2)".into(),
        ));
    }
    Ok(())
}

/// Validates an HTTP/1.x request and builds the head forwarded on the stream.
pub(crate) fn prepare(head: &RequestHead, entry: Entry) -> Result<Prepared, EdgeError> {
    host_present(head)?;
    let received = if head.minor == 0 { "1.0" } else { "1.1" };
    prepare_as(head, entry, received)
}

/// [`prepare`] for a request received as protocol version `received` (`Via`'s
/// received-protocol, RFC 9110 §7.6.3: "2" for a request that came over HTTP/2 and was
/// translated into `head`).
pub(crate) fn prepare_as(
    head: &RequestHead,
    entry: Entry,
    received: &str,
) -> Result<Prepared, EdgeError> {
    // httparse only accepts token characters in a method; it must not be empty.
    if head.method.is_empty() {
        return Err(EdgeError::BadRequest(format!(
            "invalid method {:?}",
            head.method
        )));
    }
    single_host(head)?;
    let (auth, path, host_value) = match entry {
        Entry::Explicit => {
            let (auth, path) = parse_absolute(&head.target).map_err(EdgeError::BadRequest)?;
            let host_value = auth.host_header(80);
            (auth, path, host_value)
        }
        Entry::Transparent { orig } => {
            let (claimed, path) = if head.target.starts_with('/') {
                let host = http1::header_str(&head.headers, "host")
                    .ok_or_else(|| EdgeError::BadRequest("Host header missing".into()))?;
                (
                    parse_authority(host, Some(orig.port())).map_err(EdgeError::BadRequest)?,
                    head.target.clone(),
                )
            } else {
                parse_absolute(&head.target).map_err(EdgeError::BadRequest)?
            };
            // The stream goes to the address the client actually connected to; the Host header
            // must not point elsewhere (an IP literal or a port that differs is refused).
            if claimed.port != orig.port() || claimed.ip().is_some_and(|ip| ip != orig.ip()) {
                return Err(EdgeError::ForbiddenTarget(format!(
                    "Host {} does not match the original destination {orig}",
                    claimed.target()
                )));
            }
            let host_value = claimed.host_header(80);
            (
                Authority {
                    host: orig.ip().to_string(),
                    port: orig.port(),
                },
                path,
                host_value,
            )
        }
    };
    let body = http1::request_body_kind(head)?;
    let mut headers = head.headers.clone();
    let tokens = http1::strip_hop_by_hop(&mut headers);
    let close = head.minor == 0 && !tokens.iter().any(|t| t == "keep-alive")
        || tokens.iter().any(|t| t == "close");
    // An HTTP/1.0 client cannot take an interim reply: its expectation is ignored (RFC 9110
    // §10.1.1) and the body read as it comes.
    let expect_continue = head.minor >= 1
        && http1::header_tokens(&headers, "expect")
            .iter()
            .any(|t| t == "100-continue");
    http1::remove_header(&mut headers, "expect");
    http1::remove_header(&mut headers, "host");
    http1::remove_header(&mut headers, "content-length");
    if head.method == "TRACE" && body != BodyKind::None && body != BodyKind::Length(0) {
        return Err(EdgeError::BadRequest(
            "a TRACE request must not have content (RFC 9110 §9.3.8)".into(),
        ));
    }
    let local = max_forwards(head, &mut headers)?;
    let upgrade = upgrade_protocols(head, &tokens, body);
    if let Some(protocols) = &upgrade {
        headers.push(Header::new("Connection", "upgrade"));
        headers.push(Header::new("Upgrade", protocols.as_str()));
    }
    headers.insert(0, Header::new("Host", host_value));
    headers.push(Header::new("Via", format!("{received} longhaul")));
    if let Some(h) = http1::framing_header(body) {
        headers.push(h);
    }
    let fwd = RequestHead {
        method: head.method.clone(),
        target: path,
        minor: 1,
        headers,
    };
    Ok(Prepared {
        auth,
        head: http1::encode_request_head(&fwd),
        body,
        expect_continue,
        close,
        local,
        upgrade: upgrade.is_some(),
    })
}

/// How the reader of a session ended without a client failure.
enum Read {
    /// No request pending and none owed a reply: the session ends, the connection is idle.
    Idle {
        wait: Duration,
        until: tokio::time::Instant,
    },
    /// No more requests are read on this connection: the queued replies finish, then it closes.
    Done,
}

/// Reads requests until the connection is idle with nothing owed, the client closes, asks to
/// close or errs, or the edge drains. `wait` is the idle timeout of the idle period the session
/// started in, ending at `until`. Err means the client connection closed or broke (everything
/// in flight is abandoned).
#[allow(clippy::too_many_arguments)]
async fn read_requests<T: Transport, R: AsyncRead + Unpin + Send>(
    ctx: &Ctx<T>,
    mut rd: R,
    tx: mpsc::Sender<Pending<R, T::Stream>>,
    peer: SocketAddr,
    entry: Entry,
    cause: &Arc<OnceLock<Ending>>,
    owed: &Owed,
    mut wait: Duration,
    until: tokio::time::Instant,
    page_start: Instant,
) -> Result<Read, String> {
    let s = &ctx.settings;
    let mut buf = BytesMut::with_capacity(8192);
    let mut draining = ctx.draining.clone();
    // When the current idle period ends; empty lines do not extend it.
    let mut idle_until = Some(until);
    // The session starts because the connection became readable: read before going idle.
    let mut fresh = true;
    loop {
        // Empty lines before a request line are ignored (RFC 9112 §2.2; some clients send an
        // extra CRLF after a body). They do not start a request, so the connection stays idle
        // under the idle timeout instead of starting the header timeout.
        let blank = buf
            .iter()
            .take_while(|&&b| b == b'\r' || b == b'\n')
            .count();
        if blank > 0 {
            let _ = buf.split_to(blank);
        }
        if *draining.borrow() && buf.is_empty() {
            return Ok(Read::Done);
        }
        if buf.is_empty() {
            // Between requests: the idle timeout runs until the next request's first byte.
            let until = *idle_until.get_or_insert_with(|| tokio::time::Instant::now() + wait);
            if !fresh && owed.none() {
                return Ok(Read::Idle { wait, until });
            }
            let first = tokio::select! {
                r = tokio::time::timeout_at(until, rd.read_buf(&mut buf)) => r,
                _ = draining.changed() => return Ok(Read::Done),
                // The last reply owed was written: the session can end.
                _ = owed.settled.notified(), if !fresh => continue,
            };
            fresh = false;
            match first {
                Err(_) => {
                    tracing::debug!(%peer, wait_ms = wait.as_millis() as u64, "idle client connection closed");
                    return Ok(Read::Done);
                }
                Ok(Ok(0)) => return Err("the client closed the connection".into()),
                Ok(Err(e)) => return Err(format!("client read failed: {e}")),
                Ok(Ok(_)) => continue,
            }
        }
        fresh = false;
        idle_until = None;
        wait = s.idle_timeout;
        let started = Instant::now();
        let head = tokio::time::timeout(
            s.header_timeout,
            http1::read_request_head(&mut rd, &mut buf, s.max_header_bytes),
        )
        .await;
        let head = match head {
            Err(_) => {
                let err = EdgeError::HeaderTimeout(format!(
                    "{} bytes in {} ms",
                    buf.len(),
                    s.header_timeout.as_millis()
                ));
                tracing::info!(%peer, received = buf.len(), "slow client: request head not complete within the header timeout");
                let _ = tx
                    .send(Pending::Error {
                        err,
                        method: "-".into(),
                        target: "-".into(),
                        started,
                    })
                    .await;
                return Ok(Read::Done);
            }
            Ok(Ok(Some(h))) => h,
            // The client closed its side: like Squid (half_closed_clients off) and nginx, that
            // aborts what is still in flight, so far-side work for a departed client stops.
            Ok(Ok(None)) => return Err("the client closed the connection".into()),
            Ok(Err(HeadError::Io(e))) => return Err(format!("client read failed: {e}")),
            Ok(Err(e)) => {
                let _ = tx
                    .send(Pending::Error {
                        err: e.into(),
                        method: "-".into(),
                        target: "-".into(),
                        started,
                    })
                    .await;
                return Ok(Read::Done);
            }
        };
        if head.method == "CONNECT" && matches!(entry, Entry::Explicit) {
            let _ = tx
                .send(Pending::Connect {
                    head,
                    rd,
                    buf,
                    started,
                })
                .await;
            return Ok(Read::Done);
        }
        let prep = match prepare(&head, entry) {
            Ok(p) => p,
            Err(err) => {
                let _ = tx
                    .send(Pending::Error {
                        err,
                        method: head.method,
                        target: head.target,
                        started,
                    })
                    .await;
                return Ok(Read::Done);
            }
        };
        if let Some(reply) = prep.local {
            // Answered here: a body (OPTIONS may have one) is read and dropped. A client that
            // waits for `100 Continue` before sending its body is answered at once instead, and
            // the connection closes with the body unsent (RFC 9110 §10.1.1).
            let has_body = !matches!(prep.body, BodyKind::None | BodyKind::Length(0));
            let unread = prep.expect_continue && has_body;
            if !unread {
                if let Err(e) = http1::copy_body(
                    prep.body,
                    &mut rd,
                    &mut buf,
                    &mut tokio::io::sink(),
                    OutFraming::Raw,
                )
                .await
                {
                    return body_failed(&tx, e, head, started).await;
                }
            }
            let close = prep.close || unread;
            let local = Pending::Local {
                reply: if close { closing(reply) } else { reply },
                method: head.method,
                target: head.target,
                close,
                started,
            };
            owed.add();
            if tx.send(local).await.is_err() || close {
                return Ok(Read::Done);
            }
            continue;
        }
        let target = prep.auth.target();
        let whole = matches!(prep.body, BodyKind::None | BodyKind::Length(0));
        let first = Bytes::from(prep.head);
        let stream = match ctx
            .transport
            .open_aged(
                StreamKind::Http,
                &target,
                first.clone(),
                page::age(page_start, Instant::now()),
            )
            .await
        {
            Ok(s) => s,
            Err(e) => {
                let _ = tx
                    .send(Pending::Error {
                        err: EdgeError::from_open(e),
                        method: head.method,
                        target: head.target,
                        started,
                    })
                    .await;
                return Ok(Read::Done);
            }
        };
        let (srd, mut swr) = tokio::io::split(stream);
        let uploaded = Arc::new(AtomicU64::new(0));
        let progress = Arc::new(ReplyProgress::default());
        let upgrade = prep.upgrade;
        let (continue_tx, continue_rx) = if prep.expect_continue && !whole {
            let (a, b) = oneshot::channel();
            (Some(a), Some(b))
        } else {
            (None, None)
        };
        let (bad_body_tx, bad_body) = if whole {
            (None, None)
        } else {
            let (a, b) = oneshot::channel();
            (Some(a), Some(b))
        };
        let job = ReplyJob {
            stream: srd,
            method: head.method.clone(),
            log_target: head.target.clone(),
            target,
            client_minor: head.minor,
            close: prep.close,
            continue_tx,
            retry: (whole && !upgrade && idempotent(&head.method)).then_some(first),
            page_start,
            uploaded: uploaded.clone(),
            progress: progress.clone(),
            bad_body,
            started,
            unlogged: Unlogged {
                armed: true,
                peer,
                method: head.method.clone(),
                log_target: head.target.clone(),
                uploaded: uploaded.clone(),
                progress,
                started,
                cause: cause.clone(),
            },
        };
        if upgrade {
            // What follows on this connection belongs to the new protocol if the origin
            // switches, so the reader stops here and hands the connection to the writer.
            let _ = tx
                .send(Pending::Upgrade {
                    job: Box::new(job),
                    swr,
                    rd,
                    buf,
                })
                .await;
            return Ok(Read::Done);
        }
        owed.add();
        if tx.send(Pending::Reply(Box::new(job))).await.is_err() {
            return Ok(Read::Done); // writer finished (it closes the connection)
        }
        if !whole {
            if let Some(rx) = continue_rx {
                if rx.await.is_err() {
                    return Ok(Read::Done);
                }
            }
            let out = match prep.body {
                BodyKind::Chunked => OutFraming::Chunked,
                _ => OutFraming::Raw,
            };
            match http1::copy_body(prep.body, &mut rd, &mut buf, &mut swr, out).await {
                Ok(n) => uploaded.store(n, Ordering::Relaxed),
                // Invalid framing (bad chunk size, overlong line, bad trailer): the writer
                // answers 400 in place of this request's reply unless that reply has started,
                // and drops the stream unfinished, so the far side never completes a request
                // whose body it did not get whole. Nothing after it can be framed: stop.
                Err(CopyError::Read(e)) if e.kind() == std::io::ErrorKind::InvalidData => {
                    tracing::debug!(%peer, error = %e, "invalid request body framing");
                    if let Some(tx) = bad_body_tx {
                        let _ = tx.send(format!("invalid request body framing: {e}"));
                    }
                    return Ok(Read::Done);
                }
                // A client that stops mid-body broke its connection.
                Err(CopyError::Read(e)) => {
                    tracing::debug!(%peer, error = %e, "client request body failed");
                    return Err(format!("client request body failed: {e}"));
                }
                // The stream failed: its reply half reports why; the rest of this client's
                // body cannot be skipped reliably, so stop reading requests.
                Err(CopyError::Write(e)) => {
                    tracing::debug!(%peer, error = %e, "stream failed during request body");
                    return Ok(Read::Done);
                }
            }
        }
        let _ = swr.shutdown().await;
        if prep.close {
            return Ok(Read::Done);
        }
    }
}

/// A request answered by the edge itself whose body failed: invalid framing is answered 400,
/// a client that broke off ends the connection.
async fn body_failed<R, S>(
    tx: &mpsc::Sender<Pending<R, S>>,
    e: CopyError,
    head: RequestHead,
    started: Instant,
) -> Result<Read, String> {
    match e {
        CopyError::Read(e) if e.kind() == std::io::ErrorKind::InvalidData => {
            let _ = tx
                .send(Pending::Error {
                    err: EdgeError::BadRequest(format!("invalid request body framing: {e}")),
                    method: head.method,
                    target: head.target,
                    started,
                })
                .await;
            Ok(Read::Done)
        }
        e => Err(format!("client request body failed: {e}")),
    }
}

/// How relaying one reply ended badly.
enum RelayError {
    /// Nothing was written to the client yet: an error response can still be sent.
    Before(EdgeError, Option<FarFailure>),
    /// Reply bytes were already sent (or the client is gone): the connection must be reset.
    After(String, Cut),
}

/// What a client got of a reply cut part way: the status of the head it was sent (0 when no
/// head went out whole) and the body bytes after it (framing not counted).
#[derive(Debug, Clone, Copy, Default)]
struct Cut {
    status: u16,
    bytes: u64,
}

/// Relays queued replies in order; returns when the connection should close.
async fn write_replies<T, R, W>(
    ctx: &Ctx<T>,
    mut wr: W,
    mut rx: mpsc::Receiver<Pending<R, T::Stream>>,
    peer: SocketAddr,
    cause: &OnceLock<Ending>,
    owed: &Owed,
) -> End
where
    T: Transport,
    R: AsyncRead + Unpin + Send,
    W: AsyncWrite + Abort + Unpin + Send,
{
    let answered = |status: u16| {
        Ending::earlier(&format!(
            "an earlier request on this connection was answered {status} and the connection closed"
        ))
    };
    while let Some(p) = rx.recv().await {
        match p {
            Pending::Error {
                err,
                method,
                target,
                started,
            } => {
                let record = Access::new(Peer::Client(peer), &method, &target, started);
                answer(&mut wr, &err, record).await;
                let _ = cause.set(answered(err.status()));
                return End::Closed;
            }
            Pending::Local {
                reply,
                method,
                target,
                close,
                started,
            } => {
                if let Err(e) = wr.write_all(&reply).await {
                    let _ = cause.set(Ending::client(format!(
                        "writing a reply to the client failed: {e}"
                    )));
                    abort(wr);
                    return End::Done;
                }
                Access {
                    status: 200,
                    ttfb: Some(started.elapsed()),
                    outcome: "answered-by-proxy",
                    detail: "Max-Forwards: 0".into(),
                    ..Access::new(Peer::Client(peer), &method, &target, started)
                }
                .log();
                if close {
                    let _ = wr.shutdown().await;
                    return End::Closed;
                }
            }
            Pending::Upgrade { job, swr, rd, buf } => {
                upgrade(ctx, *job, swr, rd, buf, wr, peer).await;
                return End::Done;
            }
            Pending::Connect {
                head,
                rd,
                buf,
                started,
            } => {
                tunnel::connect(ctx, head, rd, buf, wr, peer, started).await;
                return End::Done;
            }
            Pending::Reply(job) => {
                let mut job = *job;
                if let Some(tx) = job.continue_tx.take() {
                    if let Err(e) = wr.write_all(CONTINUE).await {
                        let _ = cause.set(Ending::client(format!(
                            "writing 100 Continue to the client failed: {e}"
                        )));
                        abort(wr);
                        return End::Done;
                    }
                    let _ = tx.send(());
                }
                let mut stream = job.stream;
                let info = ReplyInfo {
                    method: job.method.clone(),
                    client_minor: job.client_minor,
                    close: job.close,
                    upgrade: false,
                };
                let progress = job.progress.clone();
                let mut result = match job.bad_body.take() {
                    None => relay(ctx, &mut stream, &mut wr, &info, &progress).await,
                    Some(mut bad_body) => {
                        let fut = relay(ctx, &mut stream, &mut wr, &info, &progress);
                        tokio::pin!(fut);
                        let early = tokio::select! {
                            biased;
                            Ok(why) = &mut bad_body => Err(why),
                            r = &mut fut => Ok(r),
                        };
                        match early {
                            Ok(r) => r,
                            // The reply has started: it is relayed whole; the connection ends
                            // after it because the reader stopped.
                            Err(_) if progress.started.load(Ordering::Relaxed) => fut.await,
                            Err(why) => Err(RelayError::Before(EdgeError::BadRequest(why), None)),
                        }
                    }
                };
                if let Err(RelayError::Before(_, Some(f))) = &result {
                    if f.retryable {
                        if let Some(req) = job.retry.take() {
                            tracing::info!(%peer, target = %job.target, reason = %f.reason, "retrying idempotent request on another pool connection");
                            // The failed stream holds a stream slot until it is dropped: a
                            // retry on a full pool would wait for its own slot.
                            drop(stream);
                            result = match ctx
                                .transport
                                .open_aged(
                                    StreamKind::Http,
                                    &job.target,
                                    req,
                                    page::age(job.page_start, Instant::now()),
                                )
                                .await
                            {
                                Ok(s) => {
                                    let (mut srd, mut swr) = tokio::io::split(s);
                                    let _ = swr.shutdown().await;
                                    relay(ctx, &mut srd, &mut wr, &info, &progress).await
                                }
                                Err(e) => Err(RelayError::Before(EdgeError::from_open(e), None)),
                            };
                        }
                    }
                }
                // Every outcome below is logged here.
                job.unlogged.armed = false;
                let record = Access {
                    bytes_up: job.uploaded.load(Ordering::Relaxed),
                    ..Access::new(
                        Peer::Client(peer),
                        &job.method,
                        &job.log_target,
                        job.started,
                    )
                };
                match result {
                    Ok(r) => {
                        Access {
                            status: r.status,
                            bytes_down: r.bytes,
                            ttfb: Some(r.head_at.saturating_duration_since(job.started)),
                            outcome: r.far_error.as_deref().unwrap_or("ok"),
                            ..record
                        }
                        .log();
                        if r.close {
                            let _ = wr.shutdown().await;
                            let _ = cause.set(Ending::earlier(
                                "an earlier reply on this connection closed it (Connection: \
                                 close, a body delimited by the close, or a shutdown's drain)",
                            ));
                            return End::Closed;
                        }
                    }
                    Err(RelayError::Before(err, _)) => {
                        answer(&mut wr, &err, record).await;
                        let _ = cause.set(answered(err.status()));
                        return End::Closed;
                    }
                    Err(RelayError::After(detail, cut)) => {
                        Access {
                            status: cut.status,
                            bytes_down: cut.bytes,
                            outcome: "reply-cut",
                            detail: detail.into(),
                            ..record
                        }
                        .log();
                        let _ = cause.set(Ending::earlier(
                            "an earlier reply on this connection was cut and the connection reset",
                        ));
                        abort(wr);
                        return End::Done;
                    }
                }
            }
        }
        // The reply owed for this item is written and the connection stays open.
        owed.done();
    }
    let _ = wr.shutdown().await;
    End::Closed
}

/// Relays the reply to a request whose upgrade was forwarded; after a `101` the connection is a
/// byte tunnel over the request's stream until both sides finished (RFC 9110 §7.8). Any other
/// reply is relayed and the connection closes (the reader stopped at the upgrade request).
async fn upgrade<T, R, W>(
    ctx: &Ctx<T>,
    mut job: ReplyJob<T::Stream>,
    swr: WriteHalf<T::Stream>,
    rd: R,
    buf: BytesMut,
    mut wr: W,
    peer: SocketAddr,
) where
    T: Transport,
    R: AsyncRead + Unpin + Send,
    W: AsyncWrite + Abort + Unpin + Send,
{
    let info = ReplyInfo {
        method: job.method.clone(),
        client_minor: job.client_minor,
        close: true,
        upgrade: true,
    };
    let progress = job.progress.clone();
    let result = relay(ctx, &mut job.stream, &mut wr, &info, &progress).await;
    job.unlogged.armed = false;
    let log =
        |status: u16, up: u64, down: u64, ttfb: Option<Instant>, outcome: &str, detail: &str| {
            Access {
                status,
                bytes_up: up,
                bytes_down: down,
                ttfb: ttfb.map(|t| t.saturating_duration_since(job.started)),
                outcome,
                detail: detail.to_string().into(),
                ..Access::new(
                    Peer::Client(peer),
                    &job.method,
                    &job.log_target,
                    job.started,
                )
            }
            .log()
        };
    match result {
        Ok(r) => match r.switched {
            Some(early) => {
                let stream = job.stream.unsplit(swr);
                let first_down = OnceLock::new();
                let (up, down, err) =
                    tunnel::pump_with_prefix(ctx, rd, wr, stream, early, buf.freeze(), &first_down)
                        .await;
                match err {
                    None => log(101, up, down, Some(r.head_at), "ok", "upgraded"),
                    Some(c) => log(101, up, down, Some(r.head_at), c.outcome(), &c.reason),
                }
            }
            None => {
                log(
                    r.status,
                    0,
                    r.bytes,
                    Some(r.head_at),
                    r.far_error.as_deref().unwrap_or("ok"),
                    "",
                );
                let _ = wr.shutdown().await;
            }
        },
        Err(RelayError::Before(err, _)) => {
            let record = Access::new(
                Peer::Client(peer),
                &job.method,
                &job.log_target,
                job.started,
            );
            answer(&mut wr, &err, record).await;
        }
        Err(RelayError::After(detail, cut)) => {
            log(cut.status, 0, cut.bytes, None, "reply-cut", &detail);
            abort(wr);
        }
    }
}

/// Makes the client connection end with a reset when it is closed (when [`serve`] returns),
/// so a cut reply is never mistaken for a complete one (even a close-delimited one).
pub(crate) fn abort<W: Abort>(wr: W) {
    wr.abort();
}

/// What relaying a reply needs to know about its request.
struct ReplyInfo {
    method: String,
    client_minor: u8,
    close: bool,
    /// The request's upgrade was forwarded: a `101` ends the relay with the connection
    /// switched (see [`Relayed::switched`]).
    upgrade: bool,
}

struct Relayed {
    /// `X-Longhaul-Error` tag of a far-side synthetic response, if it is one.
    far_error: Option<String>,
    status: u16,
    bytes: u64,
    close: bool,
    /// When the reply head was written to the client.
    head_at: Instant,
    /// A `101` was relayed: the bytes of the new protocol already read from the stream.
    switched: Option<Bytes>,
}

/// Reads one reply head from a pool stream, within the forwarding limits, for the HTTP/1.1
/// and HTTP/2 relays alike. Every failure is one that still allows an error response: the
/// far side's reason when the stream failed, 502 `bad-reply` otherwise.
pub(crate) async fn read_far_head<T: Transport, R: AsyncRead + Unpin>(
    ctx: &Ctx<T>,
    srd: &mut R,
    sbuf: &mut BytesMut,
) -> Result<http1::ResponseHead, (EdgeError, Option<FarFailure>)> {
    match http1::read_response_head_limited(
        srd,
        sbuf,
        http1::forwarded_head_limit(ctx.settings.max_header_bytes),
        http1::FORWARD_MAX_HEADERS,
    )
    .await
    {
        Ok(h) => Ok(h),
        Err(HeadError::Io(e)) => Err(match ctx.transport.failure(&e) {
            Some(f) => (EdgeError::from_far(&f), Some(f)),
            None => (EdgeError::BadReply(e.to_string()), None),
        }),
        Err(HeadError::Truncated) => Err((
            EdgeError::BadReply("the remote proxy ended the stream without a reply".into()),
            None,
        )),
        Err(e) => Err((EdgeError::BadReply(e.to_string()), None)),
    }
}

/// Relays one reply from `srd` to the client, recording in `progress` how far it got
/// (`started` becomes true before the first reply byte is written to the client).
async fn relay<T: Transport, R: AsyncRead + Unpin, W: AsyncWrite + Unpin>(
    ctx: &Ctx<T>,
    srd: &mut R,
    wr: &mut W,
    job: &ReplyInfo,
    progress: &ReplyProgress,
) -> Result<Relayed, RelayError> {
    let mut sbuf = BytesMut::with_capacity(16 * 1024);
    let head = loop {
        let head = read_far_head(ctx, srd, &mut sbuf)
            .await
            .map_err(|(e, f)| RelayError::Before(e, f))?;
        match head.status {
            // `100 Continue` was answered locally.
            100 => continue,
            101 if job.upgrade => {
                let mut headers = head.headers;
                let protocols = http1::header_tokens(&headers, "upgrade").join(", ");
                http1::strip_hop_by_hop(&mut headers);
                headers.push(Header::new("Connection", "upgrade"));
                headers.push(Header::new("Upgrade", protocols));
                headers.push(Header::new("Via", VIA));
                let out = http1::ResponseHead {
                    status: 101,
                    reason: head.reason,
                    minor: 1,
                    headers,
                };
                progress.started.store(true, Ordering::Relaxed);
                wr.write_all(&http1::encode_response_head(&out))
                    .await
                    .map_err(|e| {
                        RelayError::After(format!("client write failed: {e}"), Cut::default())
                    })?;
                return Ok(Relayed {
                    far_error: None,
                    status: 101,
                    bytes: 0,
                    close: true,
                    head_at: Instant::now(),
                    switched: Some(sbuf.freeze()),
                });
            }
            101 => {
                return Err(RelayError::Before(
                    EdgeError::BadReply(
                        "101 Switching Protocols to a request without Upgrade".into(),
                    ),
                    None,
                ))
            }
            102..=199 => {
                if job.client_minor >= 1 {
                    let mut h = head;
                    http1::strip_hop_by_hop(&mut h.headers);
                    // Every forwarded message names the proxy (RFC 9110 §7.6.3).
                    h.headers.push(Header::new("Via", VIA));
                    progress.started.store(true, Ordering::Relaxed);
                    if wr
                        .write_all(&http1::encode_response_head(&h))
                        .await
                        .is_err()
                    {
                        return Err(RelayError::After("client went away".into(), Cut::default()));
                    }
                }
                continue;
            }
            _ => break head,
        }
    };
    let kind = http1::response_body_kind(&job.method, &head)
        .map_err(|e| RelayError::Before(EdgeError::BadReply(e.to_string()), None))?;
    // On a pool stream only the remote's own synthetic replies carry this header (it removes
    // an origin's), so it tells the far side's outcome.
    let far_error = http1::header_str(&head.headers, "x-longhaul-error").map(str::to_string);
    let mut headers = head.headers;
    http1::remove_length_if_coded(&mut headers);
    let tokens = http1::strip_hop_by_hop(&mut headers);
    let draining = *ctx.draining.borrow();
    let mut close = job.close || draining || tokens.iter().any(|t| t == "close");
    let out = match kind {
        BodyKind::Chunked if job.client_minor >= 1 => {
            headers.push(Header::new("Transfer-Encoding", "chunked"));
            OutFraming::Chunked
        }
        BodyKind::Chunked | BodyKind::CloseDelimited => {
            close = true;
            OutFraming::Raw
        }
        BodyKind::Length(_) | BodyKind::None => OutFraming::Raw,
    };
    headers.push(Header::new("Via", VIA));
    if close {
        headers.push(Header::new("Connection", "close"));
    } else if job.client_minor == 0 {
        headers.push(Header::new("Connection", "keep-alive"));
    }
    let out_head = http1::ResponseHead {
        status: head.status,
        reason: head.reason,
        minor: 1,
        headers,
    };
    progress.started.store(true, Ordering::Relaxed);
    wr.write_all(&http1::encode_response_head(&out_head))
        .await
        .map_err(|e| RelayError::After(format!("client write failed: {e}"), Cut::default()))?;
    progress.status.store(out_head.status, Ordering::Relaxed);
    let head_at = Instant::now();
    let bytes = match http1::copy_body_counted(kind, srd, &mut sbuf, wr, out, &progress.body).await
    {
        Ok(n) => n,
        Err(e) => {
            let cut = Cut {
                status: out_head.status,
                bytes: progress.body.load(Ordering::Relaxed),
            };
            return Err(match &e {
                CopyError::Read(io) => {
                    let why = ctx
                        .transport
                        .failure(io)
                        .map(|f| f.reason)
                        .unwrap_or_else(|| io.to_string());
                    RelayError::After(format!("reply cut: {why}"), cut)
                }
                CopyError::Write(io) => {
                    RelayError::After(format!("client write failed: {io}"), cut)
                }
            });
        }
    };
    Ok(Relayed {
        far_error,
        status: out_head.status,
        bytes,
        close,
        head_at,
        switched: None,
    })
}

/// Writes `bytes` and reports a write failure as a string.
pub(crate) async fn write_all<W: AsyncWrite + Unpin>(
    w: &mut W,
    bytes: &[u8],
) -> Result<(), String> {
    w.write_all(bytes).await.map_err(|e| e.to_string())?;
    w.flush().await.map_err(|e| e.to_string())
}

/// Idle time before the first keepalive probe on a client connection, and between probes.
const CLIENT_KEEPALIVE: (Duration, Duration) = (Duration::from_secs(30), Duration::from_secs(10));

/// Bounds how long a client may leave sent data unacknowledged, or its window closed, before
/// the kernel drops the connection (`TCP_USER_TIMEOUT`, which also ends keepalive probing of a
/// vanished client). The write or read that is waiting then fails, and the reply or tunnel
/// ends with a reason in the log, which frees its pool stream.
pub(crate) fn set_client_timeouts(sock: &TcpStream, send_timeout: Duration) -> std::io::Result<()> {
    let s = socket2::SockRef::from(sock);
    s.set_tcp_keepalive(
        &socket2::TcpKeepalive::new()
            .with_time(CLIENT_KEEPALIVE.0)
            .with_interval(CLIENT_KEEPALIVE.1),
    )?;
    s.set_tcp_user_timeout(Some(send_timeout))
}

/// Splits a stream (re-exported for the tunnel module).
pub(crate) fn split<S: AsyncRead + AsyncWrite>(s: S) -> (ReadHalf<S>, WriteHalf<S>) {
    tokio::io::split(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(target: &str, headers: &[(&str, &str)]) -> RequestHead {
        RequestHead {
            method: "GET".into(),
            target: target.into(),
            minor: 1,
            headers: headers.iter().map(|(k, v)| Header::new(k, *v)).collect(),
        }
    }

    #[test]
    fn prepare_rewrites_absolute_form() {
        let p = prepare(
            &req(
                "http://example.com:8080/x?y",
                &[
                    ("Host", "wrong"),
                    ("Proxy-Connection", "keep-alive"),
                    ("Connection", "X-Hop"),
                    ("X-Hop", "1"),
                    ("Accept", "*/*"),
                ],
            ),
            Entry::Explicit,
        )
        .unwrap();
        assert_eq!(p.auth.target(), "example.com:8080");
        assert_eq!(
            String::from_utf8(p.head).unwrap(),
            "GET /x?y HTTP/1.1\r\nHost: example.com:8080\r\nAccept: */*\r\nVia: 1.1 longhaul\r\n\r\n"
        );
        assert!(!p.close);
    }

    #[test]
    fn prepare_rejects_bad_requests() {
        assert_eq!(
            prepare(&req("/x", &[("Host", "a")]), Entry::Explicit)
                .err()
                .unwrap()
                .status(),
            400
        );
        assert_eq!(
            prepare(
                &req("http://a/", &[("Host", "a"), ("Host", "b")]),
                Entry::Explicit
            )
            .err()
            .unwrap()
            .status(),
            400
        );
        // HTTP/1.1 needs a Host field line, absolute-form or not (RFC 9112 §3.2); HTTP/1.0
        // does not.
        let mut r = req("http://a/", &[]);
        assert_eq!(
            prepare(&r, Entry::Explicit).err().unwrap().to_string(),
            "bad request: HTTP/1.1 request without a Host header (RFC 9112 §3.2)"
        );
        r.minor = 0;
        let p = prepare(&r, Entry::Explicit).unwrap();
        assert!(String::from_utf8(p.head)
            .unwrap()
            .contains("\r\nHost: a\r\n"));
    }

    #[test]
    fn transparent_host_must_match_original_destination() {
        let orig: SocketAddr = "192.0.2.7:80".parse().unwrap();
        let e = Entry::Transparent { orig };
        let p = prepare(&req("/a", &[("Host", "www.example.com")]), e).unwrap();
        assert_eq!(p.auth.target(), "192.0.2.7:80");
        assert!(String::from_utf8(p.head)
            .unwrap()
            .starts_with("GET /a HTTP/1.1\r\nHost: www.example.com\r\n"));
        assert!(prepare(&req("/a", &[("Host", "192.0.2.7")]), e).is_ok());
        assert_eq!(
            prepare(&req("/a", &[("Host", "192.0.2.8")]), e)
                .err()
                .unwrap()
                .status(),
            403
        );
        assert_eq!(
            prepare(&req("/a", &[("Host", "www.example.com:8080")]), e)
                .err()
                .unwrap()
                .status(),
            403
        );
        assert_eq!(prepare(&req("/a", &[]), e).err().unwrap().status(), 400);
    }

    #[test]
    fn http10_and_expect_handling() {
        let mut r = req(
            "http://a/",
            &[
                ("Host", "a"),
                ("Expect", "100-continue"),
                ("Content-Length", "3"),
            ],
        );
        r.minor = 0;
        r.method = "POST".into();
        let p = prepare(&r, Entry::Explicit).unwrap();
        assert!(p.close);
        // An HTTP/1.0 client's expectation is ignored: it gets no 100 (RFC 9110 §10.1.1).
        assert!(!p.expect_continue);
        assert_eq!(p.body, BodyKind::Length(3));
        let h = String::from_utf8(p.head).unwrap();
        assert!(!h.to_ascii_lowercase().contains("expect"));
        assert!(h.contains("Content-Length: 3\r\n"));
        // Via names the version the request was received in (RFC 9110 §7.6.3).
        assert!(h.contains("\r\nVia: 1.0 longhaul\r\n"), "{h}");
        let h2 = prepare_as(&r, Entry::Explicit, "2").unwrap();
        assert!(String::from_utf8(h2.head)
            .unwrap()
            .contains("\r\nVia: 2 longhaul\r\n"));
        r.minor = 1;
        let p = prepare(&r, Entry::Explicit).unwrap();
        assert!(p.expect_continue);
        assert!(!p.close);
    }
}
