//! Edge and remote wired together in one process over in-memory pipes (no pool), against a
//! small origin on loopback: HTTP semantics of the pair, independent of the transport.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use edge_proxy::client::{ConnectReply, Settings};
use edge_proxy::server::{self, Interception, Listeners};
use edge_proxy::transport::{FarCode, FarFailure, OpenError, StreamKind, Transport};
use http1::{BodyDecoder, BodyKind, ResponseHead};
use remote_proxy::handler::{self, Ctx};
use remote_proxy::policy::TargetPolicy;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, DuplexStream, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

mod inproc;
use inproc::Far;

/// Stream slots of the in-process transport, and how long an open waits for one.
const SLOTS: usize = 1024;
const SLOT_WAIT: Duration = Duration::from_secs(2);

/// The near end: a pipe, or a stream whose pool connection "died" before any reply. Each
/// holds one of the transport's stream slots until it is dropped, as a pool stream does.
enum Near {
    // The permits are held for their drop only.
    Pipe(DuplexStream, #[allow(dead_code)] OwnedSemaphorePermit),
    Lost(#[allow(dead_code)] OwnedSemaphorePermit),
}

fn lost() -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::ConnectionAborted,
        "pool connection lost",
    )
}

impl AsyncRead for Near {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        match &mut *self {
            Near::Pipe(p, _) => Pin::new(p).poll_read(cx, buf),
            Near::Lost(_) => Poll::Ready(Err(lost())),
        }
    }
}
impl AsyncWrite for Near {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match &mut *self {
            Near::Pipe(p, _) => Pin::new(p).poll_write(cx, buf),
            Near::Lost(_) => Poll::Ready(Ok(buf.len())),
        }
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match &mut *self {
            Near::Pipe(p, _) => Pin::new(p).poll_flush(cx),
            Near::Lost(_) => Poll::Ready(Ok(())),
        }
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match &mut *self {
            Near::Pipe(p, _) => Pin::new(p).poll_shutdown(cx),
            Near::Lost(_) => Poll::Ready(Ok(())),
        }
    }
}

/// Opens streams as in-memory pipes served by the remote's handler. The first `fail_first`
/// opens return streams that fail at once with a retryable "connection lost". An open waits
/// up to [`SLOT_WAIT`] for one of `slots` (as the pool waits for a stream slot), then fails
/// as the pool does when it stays full.
#[derive(Clone)]
struct Local {
    ctx: Arc<Ctx>,
    ids: Arc<AtomicU64>,
    fail_first: Arc<AtomicUsize>,
    slots: Arc<Semaphore>,
    /// The page age of every open, in order.
    ages: Arc<Mutex<Vec<Duration>>>,
}

impl Transport for Local {
    type Stream = Near;

    async fn open_aged(
        &self,
        kind: StreamKind,
        target: &str,
        first: Bytes,
        age: std::time::Duration,
    ) -> Result<Near, OpenError> {
        self.ages.lock().unwrap().push(age);
        let slot = tokio::time::timeout(SLOT_WAIT, self.slots.clone().acquire_owned())
            .await
            .map_err(|_| OpenError::stream_limit("no stream slot freed"))?
            .expect("never closed");
        let failing = self
            .fail_first
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        if failing {
            return Ok(Near::Lost(slot));
        }
        let (mut near, far) = tokio::io::duplex(256 * 1024);
        let id = app::access::StreamRef {
            id: self.ids.fetch_add(1, Ordering::Relaxed),
            conn: None,
        };
        let ctx = self.ctx.clone();
        let target = target.to_string();
        tokio::spawn(async move { handler::handle(&ctx, id, kind, target, Far(far)).await });
        near.write_all(&first)
            .await
            .map_err(|e| OpenError::unavailable(e.to_string()))?;
        Ok(Near::Pipe(near, slot))
    }

    fn failure(&self, err: &std::io::Error) -> Option<FarFailure> {
        (err.kind() == std::io::ErrorKind::ConnectionAborted).then(|| FarFailure {
            code: FarCode::ConnectionLost,
            retryable: true,
            reason: "pipe closed".into(),
        })
    }
}

/// A tiny origin: `/len/N` (N bytes, Content-Length), `/chunked/N`, `/echo` (request body
/// back), `/slow` (never answers), `/cut` (promises 100 bytes, sends 10, closes),
/// `/early-hints` (103 first).
async fn origin() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (s, _) = l.accept().await.unwrap();
            tokio::spawn(serve_origin(s));
        }
    });
    addr
}

fn pattern(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i % 251) as u8).collect()
}

async fn serve_origin(mut s: TcpStream) {
    let mut buf = BytesMut::new();
    while let Ok(Some(head)) = http1::read_request_head(&mut s, &mut buf, 65536).await {
        let kind = http1::request_body_kind(&head).unwrap();
        let mut body = Vec::new();
        let mut dec = BodyDecoder::new(kind);
        while let Some(p) = dec.next(&mut s, &mut buf).await.unwrap() {
            body.extend_from_slice(&p);
        }
        let path = head.target.clone();
        let send_body = head.method != "HEAD";
        if let Some(n) = path.strip_prefix("/len/") {
            let n: usize = n.parse().unwrap();
            let h = format!(
                "HTTP/1.1 200 OK\r\nContent-Length: {n}\r\nX-Host: {}\r\n\r\n",
                http1::header_str(&head.headers, "host").unwrap_or("")
            );
            s.write_all(h.as_bytes()).await.unwrap();
            if send_body {
                s.write_all(&pattern(n)).await.unwrap();
            }
        } else if let Some(n) = path.strip_prefix("/chunked/") {
            let n: usize = n.parse().unwrap();
            s.write_all(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
                .await
                .unwrap();
            for piece in pattern(n).chunks(1000) {
                s.write_all(format!("{:x}\r\n", piece.len()).as_bytes())
                    .await
                    .unwrap();
                s.write_all(piece).await.unwrap();
                s.write_all(b"\r\n").await.unwrap();
            }
            s.write_all(b"0\r\n\r\n").await.unwrap();
        } else if path == "/echo" {
            let h = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", body.len());
            s.write_all(h.as_bytes()).await.unwrap();
            s.write_all(&body).await.unwrap();
        } else if path == "/slow" {
            tokio::time::sleep(Duration::from_secs(30)).await;
        } else if path == "/cut" {
            s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n0123456789")
                .await
                .unwrap();
            return;
        } else if path == "/early-hints" {
            s.write_all(b"HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                .await
                .unwrap();
        } else {
            s.write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
                .await
                .unwrap();
        }
    }
}

struct Pair {
    edge: SocketAddr,
    origin: SocketAddr,
    /// Opens still to fail (see [`Local`]).
    fail_first: Arc<AtomicUsize>,
    /// The page age of every open, in order.
    ages: Arc<Mutex<Vec<Duration>>>,
    /// The transport's stream slots (see [`Local`]).
    slots: Arc<Semaphore>,
}

async fn pair(connect_reply: ConnectReply, fail_first: usize, allow_private: bool) -> Pair {
    pair_with(fail_first, allow_private, |s| {
        s.connect_reply = connect_reply
    })
    .await
}

async fn pair_with(
    fail_first: usize,
    allow_private: bool,
    tweak: impl FnOnce(&mut Settings),
) -> Pair {
    let origin = origin().await;
    let ctx = Arc::new(Ctx::new(
        TargetPolicy {
            allow_private,
            ..TargetPolicy::default()
        },
        handler::Settings {
            connect_timeout: Duration::from_secs(2),
            origin_timeout: Duration::from_millis(800),
            origin_idle_timeout: Duration::from_secs(30),
            origin_max_idle_per_host: 8,
            max_header_bytes: http1::DEFAULT_MAX_HEADER_BYTES,
        },
    ));
    let transport = Local {
        ctx,
        ids: Arc::new(AtomicU64::new(1)),
        fail_first: Arc::new(AtomicUsize::new(fail_first)),
        slots: Arc::new(Semaphore::new(SLOTS)),
        ages: Arc::default(),
    };
    let (fail_first, ages, slots) = (
        transport.fail_first.clone(),
        transport.ages.clone(),
        transport.slots.clone(),
    );
    let mut settings = Settings {
        max_header_bytes: http1::DEFAULT_MAX_HEADER_BYTES,
        max_pipeline: 16,
        idle_timeout: Duration::from_secs(10),
        header_timeout: Duration::from_secs(10),
        send_timeout: Duration::from_secs(60),
        connect_reply: ConnectReply::Optimistic,
        connect_ports: Vec::new(),
        allowed_clients: vec!["127.0.0.0/8".parse().unwrap()],
        transparent_http_ports: vec![80],
        max_client_connections: 1000,
    };
    tweak(&mut settings);
    let proxy = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let edge = proxy.local_addr().unwrap();
    tokio::spawn(server::run(
        transport,
        settings,
        Listeners {
            proxy,
            transparent: None,
            socks: None,
            https: None,
        },
        Interception::Redirect,
        std::future::pending(),
        Duration::from_secs(1),
    ));
    Pair {
        edge,
        origin,
        fail_first,
        ages,
        slots,
    }
}

/// Reads one response (head and body) from a client connection.
async fn read_response(
    s: &mut TcpStream,
    buf: &mut BytesMut,
    method: &str,
) -> (ResponseHead, Vec<u8>) {
    let head = http1::read_response_head(s, buf, 65536).await.unwrap();
    let kind = http1::response_body_kind(method, &head).unwrap();
    let mut dec = BodyDecoder::new(kind);
    let mut body = Vec::new();
    while let Some(p) = dec.next(s, buf).await.unwrap() {
        body.extend_from_slice(&p);
    }
    (head, body)
}

fn header<'a>(h: &'a ResponseHead, name: &str) -> Option<&'a str> {
    http1::header_str(&h.headers, name)
}

#[tokio::test]
async fn keep_alive_fixed_chunked_head_and_pipelining() {
    let p = pair(ConnectReply::Optimistic, 0, true).await;
    let mut c = TcpStream::connect(p.edge).await.unwrap();
    let o = p.origin;
    // Five pipelined requests written at once, answered in order.
    let reqs = format!(
        "GET http://{o}/len/0 HTTP/1.1\r\nHost: {o}\r\n\r\n\
         GET http://{o}/len/70000 HTTP/1.1\r\nHost: {o}\r\n\r\n\
         HEAD http://{o}/len/5 HTTP/1.1\r\nHost: {o}\r\n\r\n\
         GET http://{o}/chunked/12345 HTTP/1.1\r\nHost: {o}\r\n\r\n\
         POST http://{o}/echo HTTP/1.1\r\nHost: {o}\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"
    );
    c.write_all(reqs.as_bytes()).await.unwrap();
    let mut buf = BytesMut::new();
    let (h, b) = read_response(&mut c, &mut buf, "GET").await;
    assert_eq!((h.status, b.len()), (200, 0));
    let (h, b) = read_response(&mut c, &mut buf, "GET").await;
    assert_eq!(h.status, 200);
    assert_eq!(b, pattern(70000));
    assert_eq!(header(&h, "x-host"), Some(o.to_string().as_str()));
    let (h, b) = read_response(&mut c, &mut buf, "HEAD").await;
    assert_eq!((h.status, b.len()), (200, 0));
    assert_eq!(header(&h, "content-length"), Some("5"));
    let (h, b) = read_response(&mut c, &mut buf, "GET").await;
    assert_eq!(header(&h, "transfer-encoding"), Some("chunked"));
    assert_eq!(b, pattern(12345));
    let (h, b) = read_response(&mut c, &mut buf, "POST").await;
    assert_eq!(h.status, 200);
    assert_eq!(b, b"abcde");
    // The connection is still usable (keep-alive).
    c.write_all(format!("GET http://{o}/len/3 HTTP/1.1\r\nHost: {o}\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let (h, b) = read_response(&mut c, &mut buf, "GET").await;
    assert_eq!((h.status, b), (200, pattern(3)));
}

#[tokio::test]
async fn expect_continue_is_answered_by_the_edge() {
    let p = pair(ConnectReply::Optimistic, 0, true).await;
    let mut c = TcpStream::connect(p.edge).await.unwrap();
    let o = p.origin;
    c.write_all(
        format!(
            "PUT http://{o}/echo HTTP/1.1\r\nHost: {o}\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n"
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    let mut buf = BytesMut::new();
    let interim = http1::read_response_head(&mut c, &mut buf, 65536)
        .await
        .unwrap();
    assert_eq!(interim.status, 100);
    c.write_all(b"data").await.unwrap();
    let (h, b) = read_response(&mut c, &mut buf, "PUT").await;
    assert_eq!((h.status, b.as_slice()), (200, &b"data"[..]));
}

#[tokio::test]
async fn informational_responses_are_relayed() {
    let p = pair(ConnectReply::Optimistic, 0, true).await;
    let mut c = TcpStream::connect(p.edge).await.unwrap();
    c.write_all(
        format!(
            "GET http://{0}/early-hints HTTP/1.1\r\nHost: {0}\r\n\r\n",
            p.origin
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    let mut buf = BytesMut::new();
    let hints = http1::read_response_head(&mut c, &mut buf, 65536)
        .await
        .unwrap();
    assert_eq!(hints.status, 103);
    assert!(header(&hints, "link").is_some());
    assert_eq!(header(&hints, "via"), Some("1.1 longhaul"));
    let (h, b) = read_response(&mut c, &mut buf, "GET").await;
    assert_eq!((h.status, b.as_slice()), (200, &b"ok"[..]));
}

async fn one_shot(edge: SocketAddr, req: &[u8]) -> (ResponseHead, Vec<u8>) {
    let mut c = TcpStream::connect(edge).await.unwrap();
    c.write_all(req).await.unwrap();
    let mut buf = BytesMut::new();
    read_response(&mut c, &mut buf, "GET").await
}

#[tokio::test]
async fn error_statuses_carry_a_reason() {
    let p = pair(ConnectReply::Optimistic, 0, true).await;
    let (h, b) = one_shot(p.edge, b"GET /relative HTTP/1.1\r\nHost: x\r\n\r\n").await;
    assert_eq!(h.status, 400);
    assert!(String::from_utf8_lossy(&b).contains("absolute"));
    let (h, _) = one_shot(p.edge, b"GARBAGE\x01\r\n\r\n").await;
    assert_eq!(h.status, 400);
    let big = format!(
        "GET http://{0}/len/1 HTTP/1.1\r\nHost: {0}\r\nX-Big: {1}\r\n\r\n",
        p.origin,
        "a".repeat(70_000)
    );
    let (h, _) = one_shot(p.edge, big.as_bytes()).await;
    assert_eq!(h.status, 431);
    // Refused connection: a port nothing listens on.
    let closed = TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap()
        .local_addr()
        .unwrap();
    let (h, b) = one_shot(
        p.edge,
        format!("GET http://{closed}/ HTTP/1.1\r\nHost: {closed}\r\n\r\n").as_bytes(),
    )
    .await;
    assert_eq!(h.status, 502);
    assert_eq!(header(&h, "x-longhaul-error"), Some("connect-failed"));
    assert!(
        String::from_utf8_lossy(&b).contains("refused"),
        "{}",
        String::from_utf8_lossy(&b)
    );
    // DNS failure (a 64-byte label is refused by the resolver library without a query).
    let bad = format!("{}.example", "a".repeat(64));
    let (h, _) = one_shot(
        p.edge,
        format!("GET http://{bad}/ HTTP/1.1\r\nHost: {bad}\r\n\r\n").as_bytes(),
    )
    .await;
    assert_eq!(h.status, 502);
    assert_eq!(header(&h, "x-longhaul-error"), Some("dns-failed"));
    // Origin timeout.
    let (h, _) = one_shot(
        p.edge,
        format!(
            "GET http://{0}/slow HTTP/1.1\r\nHost: {0}\r\n\r\n",
            p.origin
        )
        .as_bytes(),
    )
    .await;
    assert_eq!(h.status, 504);
}

#[tokio::test]
async fn forbidden_target_in_production_policy() {
    let p = pair(ConnectReply::Optimistic, 0, false).await;
    let (h, b) = one_shot(
        p.edge,
        format!(
            "GET http://{0}/len/1 HTTP/1.1\r\nHost: {0}\r\n\r\n",
            p.origin
        )
        .as_bytes(),
    )
    .await;
    assert_eq!(h.status, 403);
    assert!(String::from_utf8_lossy(&b).contains("refused"));
    let (h, _) = one_shot(
        p.edge,
        b"GET http://localhost:1/ HTTP/1.1\r\nHost: localhost:1\r\n\r\n",
    )
    .await;
    assert_eq!(h.status, 403);
}

#[tokio::test]
async fn cut_reply_resets_the_client_connection() {
    let p = pair(ConnectReply::Optimistic, 0, true).await;
    let mut c = TcpStream::connect(p.edge).await.unwrap();
    c.write_all(format!("GET http://{0}/cut HTTP/1.1\r\nHost: {0}\r\n\r\n", p.origin).as_bytes())
        .await
        .unwrap();
    let mut buf = BytesMut::new();
    let head = http1::read_response_head(&mut c, &mut buf, 65536)
        .await
        .unwrap();
    assert_eq!(head.status, 200);
    let kind = http1::response_body_kind("GET", &head).unwrap();
    assert_eq!(kind, BodyKind::Length(100));
    let mut dec = BodyDecoder::new(kind);
    let mut got = 0;
    let err = loop {
        match dec.next(&mut c, &mut buf).await {
            Ok(Some(p)) => got += p.len(),
            Ok(None) => panic!("a cut reply looked complete"),
            Err(e) => break e,
        }
    };
    assert!(got < 100, "{err}");
}

#[tokio::test]
async fn idempotent_request_is_retried_once() {
    let p = pair(ConnectReply::Optimistic, 1, true).await;
    let (h, b) = one_shot(
        p.edge,
        format!(
            "GET http://{0}/len/10 HTTP/1.1\r\nHost: {0}\r\n\r\n",
            p.origin
        )
        .as_bytes(),
    )
    .await;
    assert_eq!((h.status, b), (200, pattern(10)));
    // Two failures in a row: the single retry fails too, and the client gets a 502.
    let p = pair(ConnectReply::Optimistic, 2, true).await;
    let (h, _) = one_shot(
        p.edge,
        format!(
            "GET http://{0}/len/10 HTTP/1.1\r\nHost: {0}\r\n\r\n",
            p.origin
        )
        .as_bytes(),
    )
    .await;
    assert_eq!(h.status, 502);
    // A POST is not retried.
    let p = pair(ConnectReply::Optimistic, 1, true).await;
    let (h, _) = one_shot(
        p.edge,
        format!(
            "POST http://{0}/echo HTTP/1.1\r\nHost: {0}\r\nContent-Length: 0\r\n\r\n",
            p.origin
        )
        .as_bytes(),
    )
    .await;
    assert_eq!(h.status, 502);
}

/// The retry of a request whose stream failed goes out on a transport with a single stream
/// slot: the failed stream gives its slot back before the retry opens, so the retry does not
/// wait for a slot that only its own failed attempt holds.
#[tokio::test]
async fn a_retry_on_a_full_transport_does_not_wait_for_its_own_slot() {
    let p = pair(ConnectReply::Optimistic, 1, true).await;
    p.slots.forget_permits(SLOTS - 1);
    let t = std::time::Instant::now();
    let (h, b) = one_shot(
        p.edge,
        format!(
            "GET http://{0}/len/10 HTTP/1.1\r\nHost: {0}\r\n\r\n",
            p.origin
        )
        .as_bytes(),
    )
    .await;
    assert_eq!((h.status, b), (200, pattern(10)));
    assert!(t.elapsed() < SLOT_WAIT, "the retry waited for a slot");
    assert_eq!(p.ages.lock().unwrap().len(), 2);
}

/// A retried request belongs to the same page as the attempt it replaces: its open carries the
/// page's age then, not the age of a page just begun.
#[tokio::test]
async fn a_retried_request_keeps_its_page_age() {
    let p = pair(ConnectReply::Optimistic, 0, true).await;
    let mut c = TcpStream::connect(p.edge).await.unwrap();
    let o = p.origin;
    let mut buf = BytesMut::new();
    // The page's first request, then (well within the page gap) a second one whose first
    // attempt fails retryably.
    c.write_all(format!("GET http://{o}/len/10 HTTP/1.1\r\nHost: {o}\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let (h, _) = read_response(&mut c, &mut buf, "GET").await;
    assert_eq!(h.status, 200);
    let pause = Duration::from_millis(300);
    tokio::time::sleep(pause).await;
    p.fail_first.store(1, Ordering::SeqCst);
    c.write_all(format!("GET http://{o}/len/20 HTTP/1.1\r\nHost: {o}\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let (h, b) = read_response(&mut c, &mut buf, "GET").await;
    assert_eq!((h.status, b), (200, pattern(20)));
    let ages = p.ages.lock().unwrap().clone();
    assert_eq!(ages.len(), 3, "{ages:?}");
    assert!(ages[0] < pause, "{ages:?}");
    // The failed attempt and its retry both carry the page's age (at least the pause).
    assert!(ages[1] >= pause && ages[2] >= ages[1], "{ages:?}");
}

async fn echo_server() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (mut s, _) = l.accept().await.unwrap();
            tokio::spawn(async move {
                let (mut r, mut w) = s.split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
            });
        }
    });
    addr
}

#[tokio::test]
async fn connect_tunnels_both_modes() {
    for mode in [ConnectReply::Optimistic, ConnectReply::AfterConnect] {
        let p = pair(mode, 0, true).await;
        let echo = echo_server().await;
        let mut c = TcpStream::connect(p.edge).await.unwrap();
        c.write_all(format!("CONNECT {echo} HTTP/1.1\r\nHost: {echo}\r\n\r\n").as_bytes())
            .await
            .unwrap();
        let mut buf = BytesMut::new();
        let h = http1::read_response_head(&mut c, &mut buf, 65536)
            .await
            .unwrap();
        assert_eq!(h.status, 200, "{mode:?}");
        let data = pattern(200_000);
        let (mut r, mut w) = c.into_split();
        let writer = tokio::spawn(async move {
            w.write_all(&data).await.unwrap();
            w.shutdown().await.unwrap();
        });
        let mut got = buf.to_vec();
        r.read_to_end(&mut got).await.unwrap();
        writer.await.unwrap();
        assert_eq!(got, pattern(200_000), "{mode:?}");

        // Far side refuses: optimistic mode closes the tunnel; after-connect answers 502.
        let closed = TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap()
            .local_addr()
            .unwrap();
        let mut c = TcpStream::connect(p.edge).await.unwrap();
        c.write_all(format!("CONNECT {closed} HTTP/1.1\r\nHost: {closed}\r\n\r\n").as_bytes())
            .await
            .unwrap();
        let mut buf = BytesMut::new();
        let h = http1::read_response_head(&mut c, &mut buf, 65536)
            .await
            .unwrap();
        match mode {
            ConnectReply::Optimistic => {
                assert_eq!(h.status, 200);
                let mut rest = Vec::new();
                let _ = c.read_to_end(&mut rest).await;
                assert!(rest.is_empty());
            }
            ConnectReply::AfterConnect => {
                assert_eq!(h.status, 502);
                assert_eq!(header(&h, "x-longhaul-error"), Some("connect-failed"));
            }
        }
    }
}

#[tokio::test]
async fn forbidden_client_and_connect_port_get_403() {
    let p = pair_with(0, true, |s| {
        s.allowed_clients = vec!["10.0.0.0/8".parse().unwrap()]
    })
    .await;
    let (h, b) = one_shot(
        p.edge,
        b"GET http://example.com/ HTTP/1.1\r\nHost: example.com\r\n\r\n",
    )
    .await;
    assert_eq!(h.status, 403);
    assert!(String::from_utf8_lossy(&b).contains("not allowed"));
    let p = pair_with(0, true, |s| s.connect_ports = vec![443]).await;
    let (h, _) = one_shot(
        p.edge,
        b"CONNECT example.com:25 HTTP/1.1\r\nHost: example.com:25\r\n\r\n",
    )
    .await;
    assert_eq!(h.status, 403);
    assert_eq!(header(&h, "x-longhaul-error"), Some("forbidden-target"));
}

#[tokio::test]
async fn deep_pipelines_are_answered_in_order() {
    let p = pair(ConnectReply::Optimistic, 0, true).await;
    let mut c = TcpStream::connect(p.edge).await.unwrap();
    // 60 requests (more than the pipelining depth of 16), sizes differing so order shows.
    let mut reqs = String::new();
    for i in 0..60 {
        reqs.push_str(&format!(
            "GET http://{0}/len/{1} HTTP/1.1\r\nHost: {0}\r\n\r\n",
            p.origin,
            1000 + i
        ));
    }
    c.write_all(reqs.as_bytes()).await.unwrap();
    let mut buf = BytesMut::new();
    for i in 0..60 {
        let (h, b) = read_response(&mut c, &mut buf, "GET").await;
        assert_eq!((h.status, b.len()), (200, 1000 + i));
    }
}

#[tokio::test]
async fn http10_client_gets_a_close_delimited_body() {
    let p = pair(ConnectReply::Optimistic, 0, true).await;
    let mut c = TcpStream::connect(p.edge).await.unwrap();
    c.write_all(format!("GET http://{}/chunked/5000 HTTP/1.0\r\n\r\n", p.origin).as_bytes())
        .await
        .unwrap();
    let mut all = Vec::new();
    c.read_to_end(&mut all).await.unwrap();
    let split = all.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    let head = String::from_utf8_lossy(&all[..split]).to_ascii_lowercase();
    assert!(head.starts_with("http/1.1 200"), "{head}");
    assert!(!head.contains("transfer-encoding"), "{head}");
    assert!(head.contains("connection: close"), "{head}");
    assert_eq!(&all[split..], &pattern(5000)[..]);
}

/// A keep-alive connection goes idle between requests (the edge then holds no request state
/// for it) and comes back for each: a request sent while an earlier reply is still owed is
/// taken at once and answered after it, a head arriving in pieces after an idle period is
/// read whole, and the idle timeout still closes the connection.
#[tokio::test]
async fn keep_alive_connection_idles_between_requests() {
    let p = pair_with(0, true, |s| s.idle_timeout = Duration::from_secs(2)).await;
    let o = p.origin;
    let mut c = TcpStream::connect(p.edge).await.unwrap();
    let mut buf = BytesMut::new();
    // A reply larger than the sockets hold, not read yet: it is still owed when the second
    // request goes out.
    c.write_all(format!("GET http://{o}/len/8000000 HTTP/1.1\r\nHost: {o}\r\n\r\n").as_bytes())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    c.write_all(format!("GET http://{o}/len/7 HTTP/1.1\r\nHost: {o}\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let (h, b) = read_response(&mut c, &mut buf, "GET").await;
    assert_eq!((h.status, b.len()), (200, 8_000_000));
    let (h, b) = read_response(&mut c, &mut buf, "GET").await;
    assert_eq!((h.status, b), (200, pattern(7)));
    // Idle, then a head in two pieces.
    tokio::time::sleep(Duration::from_millis(300)).await;
    c.write_all(b"GET http://").await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    c.write_all(format!("{o}/len/9 HTTP/1.1\r\nHost: {o}\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let (h, b) = read_response(&mut c, &mut buf, "GET").await;
    assert_eq!((h.status, b), (200, pattern(9)));
    // Idle again, then two pipelined requests in one write.
    tokio::time::sleep(Duration::from_millis(300)).await;
    c.write_all(
        format!("GET http://{o}/len/1 HTTP/1.1\r\nHost: {o}\r\n\r\nGET http://{o}/len/2 HTTP/1.1\r\nHost: {o}\r\n\r\n")
            .as_bytes(),
    )
    .await
    .unwrap();
    let (h, b) = read_response(&mut c, &mut buf, "GET").await;
    assert_eq!((h.status, b), (200, pattern(1)));
    let (h, b) = read_response(&mut c, &mut buf, "GET").await;
    assert_eq!((h.status, b), (200, pattern(2)));
    // The idle timeout closes it (FIN, nothing more sent).
    let mut rest = Vec::new();
    let closed = tokio::time::timeout(Duration::from_secs(10), c.read_to_end(&mut rest)).await;
    assert!(matches!(closed, Ok(Ok(0))), "{closed:?} {rest:?}");
}
