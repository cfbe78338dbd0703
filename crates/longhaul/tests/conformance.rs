//! HTTP/1.1 conformance of the pair, table-driven: raw bytes in from a client, raw bytes observed
//! at a recording origin and at the client. Every row cites the clause it enforces, or names the
//! choice made where the RFCs leave room (compared with Squid 5.7 on the same bytes).
//!
//! Edge and remote run in this process over in-memory streams (no pool: framing does not depend
//! on the carrier). The origin records every byte it receives, counts the requests it could
//! parse completely, and answers each with the row's reply bytes.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use edge_proxy::client::{ConnectReply, Settings};
use edge_proxy::server::{self, Interception, Listeners};
use edge_proxy::transport::{FarFailure, OpenError, StreamKind, Transport};
use http1::BodyDecoder;
use remote_proxy::handler::{self, Ctx};
use remote_proxy::policy::TargetPolicy;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt, DuplexStream, ReadBuf};
use tokio::net::{TcpListener, TcpStream};

mod inproc;
use inproc::Far;

/// Opens streams as in-memory pipes served by the remote's handler.
#[derive(Clone)]
struct Local {
    ctx: Arc<Ctx>,
    ids: Arc<AtomicU64>,
}

impl Transport for Local {
    type Stream = DuplexStream;

    async fn open_aged(
        &self,
        kind: StreamKind,
        target: &str,
        first: Bytes,
        _age: std::time::Duration,
    ) -> Result<DuplexStream, OpenError> {
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
        Ok(near)
    }

    fn failure(&self, _err: &std::io::Error) -> Option<FarFailure> {
        None
    }
}

/// What the recording origin saw.
#[derive(Default)]
struct Recorded {
    /// Every byte received, all connections in order of arrival.
    bytes: Mutex<Vec<u8>>,
    /// Requests parsed completely (head and body).
    requests: AtomicUsize,
}

/// A reader that copies what it reads into the record.
struct Tee<'a> {
    inner: &'a mut TcpStream,
    rec: &'a Recorded,
}

impl AsyncRead for Tee<'_> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut *self.inner).poll_read(cx, buf);
        let new = buf.filled()[before..].to_vec();
        self.rec.bytes.lock().unwrap().extend_from_slice(&new);
        r
    }
}

/// An origin that records what it receives and answers each complete request with `reply`;
/// with `close`, it closes the connection after the first reply.
async fn recording_origin(reply: Vec<u8>, close: bool) -> (SocketAddr, Arc<Recorded>) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let rec = Arc::new(Recorded::default());
    let r2 = rec.clone();
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = l.accept().await else {
                return;
            };
            let rec = r2.clone();
            let reply = reply.clone();
            tokio::spawn(async move {
                let mut buf = BytesMut::new();
                loop {
                    let mut tee = Tee {
                        inner: &mut s,
                        rec: &rec,
                    };
                    let Ok(Some(head)) = http1::read_request_head_limited(
                        &mut tee,
                        &mut buf,
                        1 << 20,
                        http1::FORWARD_MAX_HEADERS,
                    )
                    .await
                    else {
                        return;
                    };
                    let Ok(kind) = http1::request_body_kind(&head) else {
                        return;
                    };
                    let mut dec = BodyDecoder::new(kind);
                    loop {
                        match dec.next(&mut tee, &mut buf).await {
                            Ok(Some(_)) => {}
                            Ok(None) => break,
                            Err(_) => return,
                        }
                    }
                    rec.requests.fetch_add(1, Ordering::SeqCst);
                    if s.write_all(&reply).await.is_err() || close {
                        return;
                    }
                }
            });
        }
    });
    (addr, rec)
}

/// Starts an edge and a remote in this process; returns the edge's proxy address.
async fn pair() -> SocketAddr {
    let ctx = Arc::new(Ctx::new(
        TargetPolicy {
            allow_private: true,
            ..TargetPolicy::default()
        },
        handler::Settings {
            connect_timeout: Duration::from_secs(2),
            origin_timeout: Duration::from_secs(5),
            origin_idle_timeout: Duration::from_secs(30),
            origin_max_idle_per_host: 8,
            max_header_bytes: http1::DEFAULT_MAX_HEADER_BYTES,
        },
    ));
    let transport = Local {
        ctx,
        ids: Arc::new(AtomicU64::new(1)),
    };
    let settings = Settings {
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
    edge
}

/// How the client connection ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ending {
    /// The edge closed it (FIN).
    Closed,
    /// The edge reset it.
    Reset,
    /// Still open after the client stopped waiting.
    Open,
}

/// What a row observed.
struct Observed {
    client: Vec<u8>,
    end: Ending,
    origin: Vec<u8>,
    origin_requests: usize,
}

/// Sends `bytes`, then reads until the edge closes or sends nothing more for `idle`.
async fn exchange(edge: SocketAddr, bytes: &[u8], idle: Duration) -> (Vec<u8>, Ending) {
    let mut c = TcpStream::connect(edge).await.unwrap();
    c.write_all(bytes).await.unwrap();
    let mut got = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    loop {
        match tokio::time::timeout(idle, c.read(&mut chunk)).await {
            Err(_) => return (got, Ending::Open),
            Ok(Ok(0)) => return (got, Ending::Closed),
            Ok(Ok(n)) => got.extend_from_slice(&chunk[..n]),
            Ok(Err(_)) => return (got, Ending::Reset),
        }
    }
}

/// The responses in `bytes` (status, head text, body), parsed as replies to `method`.
async fn responses(bytes: &[u8], method: &str) -> Vec<(u16, String, Vec<u8>)> {
    let mut r = bytes;
    let mut buf = BytesMut::new();
    let mut out = Vec::new();
    loop {
        let Ok(head) = http1::read_response_head_limited(
            &mut r,
            &mut buf,
            1 << 20,
            http1::FORWARD_MAX_HEADERS,
        )
        .await
        else {
            return out;
        };
        let text = String::from_utf8_lossy(&http1::encode_response_head(&head)).into_owned();
        let Ok(kind) = http1::response_body_kind(method, &head) else {
            return out;
        };
        let mut dec = BodyDecoder::new(kind);
        let mut body = Vec::new();
        loop {
            match dec.next(&mut r, &mut buf).await {
                Ok(Some(p)) => body.extend_from_slice(&p),
                Ok(None) => break,
                Err(_) => {
                    // A body cut short is not a response.
                    return out;
                }
            }
        }
        out.push((head.status, text, body));
        if head.status >= 200 && kind == http1::BodyKind::CloseDelimited {
            return out;
        }
    }
}

/// One expectation of a row.
#[derive(Debug, Clone, Copy)]
enum Expect {
    /// Statuses of the complete responses the client received, in order.
    Statuses(&'static [u16]),
    /// The body of the last complete response.
    Body(&'static str),
    /// The client's bytes contain / lack this text (case-insensitive).
    ClientHas(&'static str),
    ClientLacks(&'static str),
    /// The origin's bytes contain / lack this text (case-insensitive).
    OriginHas(&'static str),
    OriginLacks(&'static str),
    /// Requests the origin received completely.
    OriginRequests(usize),
    /// How the client connection ended.
    End(Ending),
}

/// One conformance case.
struct Row {
    name: &'static str,
    /// The clause enforced, or the choice made and how Squid compares.
    cite: &'static str,
    /// Client bytes; `{o}` stands for the origin's `host:port`.
    client: Vec<u8>,
    /// What the origin answers to each request.
    reply: Vec<u8>,
    /// The origin closes after its first reply.
    origin_closes: bool,
    /// Method the client's responses answer (for framing).
    method: &'static str,
    expect: Vec<Expect>,
}

const OK: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";

fn row(name: &'static str, cite: &'static str, client: &[u8], expect: Vec<Expect>) -> Row {
    Row {
        name,
        cite,
        client: client.to_vec(),
        reply: OK.to_vec(),
        origin_closes: false,
        method: "GET",
        expect,
    }
}

/// A row about an origin reply: a `GET` answered with `reply`, after which the origin closes.
fn reply_row(name: &'static str, cite: &'static str, reply: &[u8], expect: Vec<Expect>) -> Row {
    Row {
        name,
        cite,
        client: b"GET http://{o}/r HTTP/1.1\r\nHost: {o}\r\n\r\n".to_vec(),
        reply: reply.to_vec(),
        origin_closes: true,
        method: "GET",
        expect,
    }
}

fn substitute(bytes: &[u8], origin: SocketAddr) -> Vec<u8> {
    let o = origin.to_string();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i..].starts_with(b"{o}") {
            out.extend_from_slice(o.as_bytes());
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    out
}

fn contains(hay: &[u8], needle: &str) -> bool {
    let hay = String::from_utf8_lossy(hay).to_ascii_lowercase();
    hay.contains(&needle.to_ascii_lowercase())
}

async fn run_row(edge: SocketAddr, row: &Row) -> Result<(), String> {
    let (origin, rec) = recording_origin(row.reply.clone(), row.origin_closes).await;
    let bytes = substitute(&row.client, origin);
    let (client, end) = exchange(edge, &bytes, Duration::from_millis(700)).await;
    // Let the origin finish reading what reached it.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let obs = Observed {
        client,
        end,
        origin: rec.bytes.lock().unwrap().clone(),
        origin_requests: rec.requests.load(Ordering::SeqCst),
    };
    let got = responses(&obs.client, row.method).await;
    let o = origin.to_string();
    let mut failures = Vec::new();
    for e in &row.expect {
        let ok = match *e {
            Expect::Statuses(s) => got.iter().map(|r| r.0).collect::<Vec<_>>() == s,
            Expect::Body(b) => got.last().is_some_and(|r| r.2 == b.as_bytes()),
            Expect::ClientHas(t) => contains(&obs.client, &t.replace("{o}", &o)),
            Expect::ClientLacks(t) => !contains(&obs.client, &t.replace("{o}", &o)),
            Expect::OriginHas(t) => contains(&obs.origin, &t.replace("{o}", &o)),
            Expect::OriginLacks(t) => !contains(&obs.origin, &t.replace("{o}", &o)),
            Expect::OriginRequests(n) => obs.origin_requests == n,
            Expect::End(want) => obs.end == want,
        };
        if !ok {
            failures.push(format!("{e:?}"));
        }
    }
    if failures.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "row {:?} ({}) failed {}\n  client sent: {:?}\n  client got ({:?}): {:?}\n  origin got ({} complete): {:?}",
            row.name,
            row.cite,
            failures.join(", "),
            String::from_utf8_lossy(&bytes),
            obs.end,
            String::from_utf8_lossy(&obs.client),
            obs.origin_requests,
            String::from_utf8_lossy(&obs.origin),
        ))
    }
}

async fn run_table(rows: Vec<Row>) {
    let edge = pair().await;
    let total = rows.len();
    let mut set = tokio::task::JoinSet::new();
    for row in rows {
        set.spawn(async move { run_row(edge, &row).await });
    }
    let mut failed = Vec::new();
    while let Some(r) = set.join_next().await {
        if let Err(e) = r.expect("row task") {
            failed.push(e);
        }
    }
    assert!(
        failed.is_empty(),
        "{} of {total} rows failed:\n{}",
        failed.len(),
        failed.join("\n")
    );
}

/// A request head with `n` fields in all (Host included), each line `name: value`, none of
/// them hop-by-hop (so the edge forwards all and adds `Via`).
fn many_fields(n: usize) -> Vec<u8> {
    let mut r = b"GET http://{o}/many HTTP/1.1\r\nHost: {o}\r\n".to_vec();
    for i in 1..n {
        r.extend_from_slice(format!("X-F{i}: v\r\n").as_bytes());
    }
    r.extend_from_slice(b"\r\n");
    r
}

/// A head of `fields` compact fields (`name:value` LF lines) just under 64 KiB in all.
fn compact_head_near_limit() -> Vec<u8> {
    let start = b"GET http://{o}/big HTTP/1.1\nHost:{o}\n".to_vec();
    let fields = 100;
    // Leave room for the origin's address and the end of the head.
    let budget = http1::DEFAULT_MAX_HEADER_BYTES - start.len() - 40;
    let per = budget / fields;
    let mut r = start;
    for i in 0..fields {
        let name = format!("X-{i:03}:");
        let value = "v".repeat(per - name.len() - 1);
        r.extend_from_slice(format!("{name}{value}\n").as_bytes());
    }
    r.extend_from_slice(b"\n");
    assert!(r.len() < http1::DEFAULT_MAX_HEADER_BYTES - 20);
    r
}

/// An origin reply with `n` fields.
fn reply_with_fields(n: usize) -> Vec<u8> {
    let mut r = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n".to_vec();
    for i in 1..n {
        r.extend_from_slice(format!("X-R{i}: v\r\n").as_bytes());
    }
    r.extend_from_slice(b"\r\nok");
    r
}

use Ending::*;
use Expect::*;

#[tokio::test]
async fn request_framing_and_forwarding() {
    let mut rows = vec![
        // Transfer-Encoding the edge cannot parse or does not implement.
        row(
            "te-obs-text-is-an-error",
            "RFC 9112 §6.3 rule 4: a TE that cannot be parsed is an error, never absent (was: \
             framed by Content-Length and the body forwarded as a second request; Squid 5.7: \
             501)",
            b"POST http://{o}/a HTTP/1.1\r\nHost: {o}\r\nTransfer-Encoding: chunked\xff\r\nContent-Length: 38\r\n\r\nGET http://{o}/smuggled HTTP/1.1\r\nHost: {o}\r\n\r\n",
            vec![Statuses(&[400]), OriginRequests(0), OriginLacks("smuggled"), End(Closed)],
        ),
        row(
            "te-obs-text-alone",
            "RFC 9112 §6.3 rule 4 (no Content-Length: was framed as bodyless)",
            b"POST http://{o}/a HTTP/1.1\r\nHost: {o}\r\nTransfer-Encoding: \xe9chunked\r\n\r\n0\r\n\r\nGET http://{o}/smuggled HTTP/1.1\r\nHost: {o}\r\n\r\n",
            vec![Statuses(&[400]), OriginRequests(0), End(Closed)],
        ),
        row(
            "te-unknown-coding-501",
            "RFC 9112 §6.1: a transfer coding the server does not understand: 501 (Squid 5.7: 501)",
            b"POST http://{o}/a HTTP/1.1\r\nHost: {o}\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
            vec![Statuses(&[501]), OriginRequests(0), End(Closed)],
        ),
        row(
            "te-final-not-chunked-400",
            "RFC 9112 §6.3 rule 4: chunked not final in a request: 400 (Squid 5.7: 501)",
            b"POST http://{o}/a HTTP/1.1\r\nHost: {o}\r\nTransfer-Encoding: chunked, gzip\r\n\r\n0\r\n\r\n",
            vec![Statuses(&[400]), OriginRequests(0), End(Closed)],
        ),
        row(
            "te-chunked-twice-400",
            "RFC 9112 §7.1: chunked is applied at most once",
            b"POST http://{o}/a HTTP/1.1\r\nHost: {o}\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
            vec![Statuses(&[400]), OriginRequests(0)],
        ),
        row(
            "te-empty-400",
            "RFC 9112 §6.1: Transfer-Encoding = #transfer-coding, at least one (Squid 5.7: 501)",
            b"POST http://{o}/a HTTP/1.1\r\nHost: {o}\r\nTransfer-Encoding: \r\n\r\n",
            vec![Statuses(&[400]), OriginRequests(0)],
        ),
        row(
            "te-in-http10-400",
            "RFC 9112 §6.1: an HTTP/1.0 message with Transfer-Encoding has faulty framing \
             (choice: refused; Squid 5.7 forwards it)",
            b"POST http://{o}/a HTTP/1.0\r\nHost: {o}\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
            vec![Statuses(&[400]), OriginRequests(0)],
        ),
        row(
            "te-and-cl-400",
            "RFC 9112 §6.3 rule 3: a server may reject TE with CL; the edge does (choice: it is a \
             smuggling form; Squid 5.7 accepts it, TE wins)",
            b"POST http://{o}/a HTTP/1.1\r\nHost: {o}\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n",
            vec![Statuses(&[400]), OriginRequests(0)],
        ),
        row(
            "te-case-and-ows",
            "RFC 9110 §5.6.1/§5.6.2: codings are case-insensitive, list elements trimmed",
            b"POST http://{o}/a HTTP/1.1\r\nHost: {o}\r\nTransfer-Encoding:  Chunked \r\nConnection: close\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
            vec![Statuses(&[200]), OriginRequests(1), OriginHas("3\r\nabc\r\n0\r\n\r\n")],
        ),
        // Chunked request bodies.
        row(
            "chunk-size-plus-sign",
            "RFC 9112 §7.1: chunk-size = 1*HEXDIG (no sign); the README promises 400 (Squid 5.7 \
             closes without a reply)",
            b"POST http://{o}/a HTTP/1.1\r\nHost: {o}\r\nTransfer-Encoding: chunked\r\n\r\n+5\r\nhello\r\n0\r\n\r\n",
            vec![Statuses(&[400]), OriginRequests(0), End(Closed)],
        ),
        row(
            "chunk-size-leading-space",
            "RFC 9112 §7.1: no whitespace before chunk-size",
            b"POST http://{o}/a HTTP/1.1\r\nHost: {o}\r\nTransfer-Encoding: chunked\r\n\r\n 5\r\nhello\r\n0\r\n\r\n",
            vec![Statuses(&[400]), OriginRequests(0), End(Closed)],
        ),
        row(
            "chunk-size-not-hex",
            "RFC 9112 §7.1: chunk-size = 1*HEXDIG",
            b"POST http://{o}/a HTTP/1.1\r\nHost: {o}\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n",
            vec![Statuses(&[400]), OriginRequests(0), End(Closed)],
        ),
        row(
            "chunk-data-overrun",
            "RFC 9112 §7.1: chunk-data is followed by CRLF",
            b"POST http://{o}/a HTTP/1.1\r\nHost: {o}\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhelloEXTRA\r\n0\r\n\r\n",
            vec![Statuses(&[400]), OriginRequests(0), End(Closed)],
        ),
        row(
            "chunk-size-leading-zeros-and-ext",
            "RFC 9112 §7.1.1: extensions are ignored; leading zeros are hex digits",
            b"POST http://{o}/a HTTP/1.1\r\nHost: {o}\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n0003 ; a=b\r\nabc\r\n0\r\n\r\n",
            vec![Statuses(&[200]), OriginRequests(1), OriginHas("\r\n\r\n3\r\nabc\r\n0\r\n\r\n")],
        ),
        row(
            "request-line-after-last-chunk",
            "RFC 9112 §7.1.2: trailers are field lines until an empty line; a request line is \
             not one (was: swallowed as a trailer; Squid 5.7 swallows it too)",
            b"POST http://{o}/a HTTP/1.1\r\nHost: {o}\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nGET http://{o}/smuggled HTTP/1.1\r\nHost: {o}\r\n\r\n",
            vec![Statuses(&[400]), OriginRequests(0), OriginLacks("smuggled")],
        ),
        row(
            "trailer-field-dropped",
            "RFC 9112 §7.1.2: a trailer field may be dropped by an intermediary (choice: drop)",
            b"POST http://{o}/a HTTP/1.1\r\nHost: {o}\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n1\r\nx\r\n0\r\nX-Trailer: t\r\n\r\n",
            vec![Statuses(&[200]), OriginRequests(1), OriginLacks("x-trailer")],
        ),
        // Lengths.
        row(
            "post-content-length-zero-forwarded",
            "RFC 9110 §8.6: a user agent should send Content-Length in a POST without content; \
             an intermediary forwards it (was dropped)",
            b"POST http://{o}/a HTTP/1.1\r\nHost: {o}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            vec![Statuses(&[200]), OriginRequests(1), OriginHas("content-length: 0\r\n")],
        ),
        row(
            "put-content-length-zero-forwarded",
            "RFC 9110 §8.6",
            b"PUT http://{o}/a HTTP/1.1\r\nHost: {o}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            vec![Statuses(&[200]), OriginRequests(1), OriginHas("content-length: 0\r\n")],
        ),
        row(
            "conflicting-content-lengths-400",
            "RFC 9112 §6.3 rule 5",
            b"POST http://{o}/a HTTP/1.1\r\nHost: {o}\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
            vec![Statuses(&[400]), OriginRequests(0)],
        ),
        // Methods.
        row(
            "lowercase-head-has-a-body",
            "RFC 9110 §9.1: methods are case-sensitive; `head` is an extension method whose \
             reply carries its body (was: framed as HEAD's at the edge, so the body was taken \
             for the next reply on the connection)",
            b"head http://{o}/h HTTP/1.1\r\nHost: {o}\r\n\r\nGET http://{o}/after HTTP/1.1\r\nHost: {o}\r\nConnection: close\r\n\r\n",
            vec![
                Statuses(&[200, 200]),
                Body("ok"),
                OriginRequests(2),
                OriginHas("head /h HTTP/1.1\r\n"),
                ClientHas("\r\n\r\nokHTTP/1.1 200"),
            ],
        ),
        row(
            "connect-with-two-hosts-400",
            "RFC 9112 §3.2: a request with more than one Host field line is answered 400 (was: \
             a CONNECT went through)",
            b"CONNECT {o} HTTP/1.1\r\nHost: {o}\r\nHost: other.example:443\r\n\r\n",
            vec![Statuses(&[400]), OriginRequests(0), ClientHas("more than one Host")],
        ),
        row(
            "http-1-1-without-host-400",
            "RFC 9112 §3.2: a server MUST answer 400 to an HTTP/1.1 request without Host, an \
             absolute-form one included (was: forwarded with Host taken from the target)",
            b"GET http://{o}/nohost HTTP/1.1\r\n\r\n",
            vec![Statuses(&[400]), OriginRequests(0), ClientHas("without a Host")],
        ),
        row(
            "http-1-0-without-host-forwarded",
            "RFC 9112 §3.2 binds HTTP/1.1 only: an HTTP/1.0 request is forwarded with Host \
             written from its target",
            b"GET http://{o}/old HTTP/1.0\r\n\r\n",
            vec![Statuses(&[200]), OriginRequests(1), OriginHas("\r\nhost: {o}\r\n")],
        ),
        // Errors answered to HEAD.
        Row {
            method: "HEAD",
            ..row(
                "edge-error-to-head-has-no-body",
                "RFC 9110 §9.3.2: a reply to HEAD has no content, the edge's own error replies \
                 too (was: the error's one-line body followed the head)",
                b"HEAD http://{o}/h HTTP/1.1\r\nHost: {o}\r\nHost: other.example\r\n\r\n",
                vec![Statuses(&[400]), OriginRequests(0), ClientLacks("Bad Request:")],
            )
        },
        Row {
            method: "HEAD",
            ..row(
                "remote-error-to-head-has-no-body",
                "RFC 9110 §9.3.2: the remote's error replies to HEAD are heads alone (was: the \
                 error's body followed the head)",
                b"HEAD http://127.0.0.1:1/h HTTP/1.1\r\nHost: 127.0.0.1:1\r\n\r\n",
                vec![
                    Statuses(&[502]),
                    ClientHas("connect-failed"),
                    ClientLacks("Bad Gateway:"),
                ],
            )
        },
        // Expectations.
        row(
            "expect-100-continue-ignored-for-http-1-0",
            "RFC 9110 §10.1.1: a server MUST ignore 100-continue in an HTTP/1.0 request; \
             §15.2: no 1xx to an HTTP/1.0 client (was: 100 sent)",
            b"POST http://{o}/a HTTP/1.0\r\nHost: {o}\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\nabc",
            vec![Statuses(&[200]), ClientLacks("100 Continue"), OriginRequests(1)],
        ),
        // Versions.
        row(
            "http-1-2-is-1-1",
            "RFC 9110 §2.5: a higher minor version is handled as the highest supported (Squid \
             5.7 too)",
            b"GET http://{o}/v HTTP/1.2\r\nHost: {o}\r\nConnection: close\r\n\r\n",
            vec![Statuses(&[200]), OriginRequests(1), OriginHas("GET /v HTTP/1.1\r\n")],
        ),
        // Max-Forwards.
        row(
            "options-max-forwards-0-answered-by-proxy",
            "RFC 9110 §7.6.2, §9.3.7: at 0 the proxy is the final recipient (Squid 5.7 answers \
             501)",
            b"OPTIONS http://{o}/ HTTP/1.1\r\nHost: {o}\r\nMax-Forwards: 0\r\nConnection: close\r\n\r\n",
            vec![
                Statuses(&[200]),
                ClientHas("Allow: GET"),
                ClientHas("Connection: close"),
                OriginRequests(0),
                End(Closed),
            ],
        ),
        row(
            "max-forwards-0-with-expect-answers-at-once",
            "RFC 9110 §10.1.1: a client waiting for 100 Continue is answered with the final \
             status, the connection closing with the body unsent (was: the edge waited for the \
             body the client held back)",
            b"OPTIONS http://{o}/ HTTP/1.1\r\nHost: {o}\r\nMax-Forwards: 0\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n",
            vec![
                Statuses(&[200]),
                ClientHas("Allow: GET"),
                ClientHas("Connection: close"),
                ClientLacks("100 Continue"),
                OriginRequests(0),
                End(Closed),
            ],
        ),
        row(
            "trace-max-forwards-0-echoed",
            "RFC 9110 §9.3.8: the final recipient echoes the request as message/http, minus \
             credentials and cookies (Squid 5.7 echoes it, Cookie included)",
            b"TRACE http://{o}/t HTTP/1.1\r\nHost: {o}\r\nMax-Forwards: 0\r\nCookie: secret=1\r\nX-Seen: yes\r\nConnection: close\r\n\r\n",
            vec![
                Statuses(&[200]),
                ClientHas("Content-Type: message/http"),
                ClientHas("TRACE http://{o}/t HTTP/1.1\r\n"),
                ClientHas("X-Seen: yes"),
                ClientLacks("secret"),
                OriginRequests(0),
            ],
        ),
        row(
            "max-forwards-decremented",
            "RFC 9110 §7.6.2: otherwise the proxy decrements it",
            b"TRACE http://{o}/t HTTP/1.1\r\nHost: {o}\r\nMax-Forwards: 3\r\nConnection: close\r\n\r\n",
            vec![Statuses(&[200]), OriginRequests(1), OriginHas("max-forwards: 2\r\n")],
        ),
        row(
            "max-forwards-other-methods-untouched",
            "RFC 9110 §7.6.2: only TRACE and OPTIONS",
            b"GET http://{o}/g HTTP/1.1\r\nHost: {o}\r\nMax-Forwards: 0\r\nConnection: close\r\n\r\n",
            vec![Statuses(&[200]), OriginRequests(1), OriginHas("max-forwards: 0\r\n")],
        ),
        row(
            "options-max-forwards-0-keeps-the-connection",
            "RFC 9112 §9.3: a local answer does not end a persistent connection",
            b"OPTIONS http://{o}/ HTTP/1.1\r\nHost: {o}\r\nMax-Forwards: 0\r\n\r\nGET http://{o}/after HTTP/1.1\r\nHost: {o}\r\nConnection: close\r\n\r\n",
            vec![Statuses(&[200, 200]), OriginRequests(1), OriginHas("GET /after")],
        ),
        // Limits.
        Row {
            client: many_fields(http1::DEFAULT_MAX_HEADERS),
            ..row(
                "128-fields-pass",
                "README: a head may hold 128 fields; the Via the edge adds must not push it over \
                 at the remote (was 431)",
                b"",
                vec![Statuses(&[200]), OriginRequests(1), OriginHas("X-F127: v"), OriginHas("Via: 1.1 longhaul")],
            )
        },
        Row {
            client: many_fields(http1::DEFAULT_MAX_HEADERS + 1),
            ..row(
                "129-fields-431",
                "README: over 128 fields is 431",
                b"",
                vec![Statuses(&[431]), OriginRequests(0)],
            )
        },
        Row {
            client: compact_head_near_limit(),
            ..row(
                "compact-64k-head-passes",
                "README: a head up to max_header_bytes passes, also once re-serialised with \
                 CRLF and `: ` (was 431 at the remote)",
                b"",
                vec![Statuses(&[200]), OriginRequests(1)],
            )
        },
        // Upgrade.
        row(
            "upgrade-h2c-not-forwarded",
            "RFC 9113 §3.1: the h2c upgrade is obsolete; the pair speaks HTTP/1.1 to origins, so \
             it is dropped and the request served as HTTP/1.1 (RFC 9110 §7.8 lets a server ignore \
             Upgrade)",
            b"GET http://{o}/h HTTP/1.1\r\nHost: {o}\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA\r\nConnection: close\r\n\r\n",
            vec![Statuses(&[200]), OriginRequests(1), OriginLacks("upgrade"), OriginLacks("http2-settings")],
        ),
        row(
            "upgrade-without-connection-option-dropped",
            "RFC 9110 §7.8: a sender of Upgrade also sends the upgrade connection option; \
             without it Upgrade is an ordinary hop-by-hop field and removed",
            b"GET http://{o}/u HTTP/1.1\r\nHost: {o}\r\nUpgrade: websocket\r\nConnection: close\r\n\r\n",
            vec![Statuses(&[200]), OriginRequests(1), OriginLacks("upgrade")],
        ),
        row(
            "upgrade-in-http10-dropped",
            "RFC 9110 §7.8: Upgrade is for HTTP/1.1",
            b"GET http://{o}/u HTTP/1.0\r\nHost: {o}\r\nConnection: upgrade\r\nUpgrade: websocket\r\n\r\n",
            vec![Statuses(&[200]), OriginRequests(1), OriginLacks("upgrade")],
        ),
        Row {
            reply: OK.to_vec(),
            ..row(
                "upgrade-declined-by-origin",
                "RFC 9110 §7.8: a server may ignore Upgrade; the reply is relayed and, since the \
                 edge stopped reading HTTP at the upgrade request, the connection closes",
                b"GET http://{o}/u HTTP/1.1\r\nHost: {o}\r\nConnection: upgrade\r\nUpgrade: websocket\r\n\r\n",
                vec![Statuses(&[200]), OriginHas("connection: upgrade\r\n"), OriginHas("upgrade: websocket\r\n"), End(Closed)],
            )
        },
        Row {
            reply: b"HTTP/1.1 101 Switching Protocols\r\nConnection: upgrade\r\nUpgrade: echo\r\n\r\nSERVER-BYTES".to_vec(),
            ..row(
                "upgrade-101-becomes-a-tunnel",
                "RFC 9110 §7.8, §15.2.2: the request's upgrade is forwarded, the 101 relayed, then \
                 bytes flow both ways (those sent right behind the request included)",
                b"GET http://{o}/u HTTP/1.1\r\nHost: {o}\r\nConnection: keep-alive, Upgrade\r\nUpgrade: echo\r\n\r\nCLIENT-BYTES",
                vec![
                    Statuses(&[101]),
                    ClientHas("upgrade: echo\r\n"),
                    ClientHas("\r\n\r\nSERVER-BYTES"),
                    OriginHas("upgrade: echo\r\n"),
                    OriginHas("\r\n\r\nCLIENT-BYTES"),
                ],
            )
        },
    ];
    // A chunk extension far over the chunk-line limit.
    let mut long_ext =
        b"POST http://{o}/a HTTP/1.1\r\nHost: {o}\r\nTransfer-Encoding: chunked\r\n\r\n5;".to_vec();
    long_ext.extend(std::iter::repeat_n(b'x', 20 * 1024));
    long_ext.extend_from_slice(b"\r\nhello\r\n0\r\n\r\n");
    rows.push(Row {
        client: long_ext,
        ..row(
            "chunk-extension-20k-400",
            "RFC 9112 §7.1.1: a server limits extension length (choice: 4 KiB per chunk line, \
             400 above)",
            b"",
            vec![Statuses(&[400]), OriginRequests(0), End(Closed)],
        )
    });
    run_table(rows).await;
}

#[tokio::test]
async fn origin_reply_framing_and_forwarding() {
    let rows = vec![
        reply_row(
            "cl-and-te-chunked-te-wins",
            "RFC 9112 §6.3 rule 3: TE overrides CL and the intermediary removes CL (was: body \
             cut to CL, looked complete)",
            b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
            vec![Statuses(&[200]), Body("hello"), ClientLacks("content-length: 3")],
        ),
        reply_row(
            "date-added-when-missing",
            "RFC 9110 §6.6.1: a recipient with a clock adds Date to a response it forwards \
             without one (was: none)",
            OK,
            vec![Statuses(&[200]), Body("ok"), ClientHas("\r\nDate: "), ClientHas(" GMT\r\n")],
        ),
        reply_row(
            "date-of-the-origin-kept",
            "RFC 9110 §6.6.1: an origin's Date is forwarded as it is",
            b"HTTP/1.1 200 OK\r\nDate: Sun, 06 Nov 1994 08:49:37 GMT\r\nContent-Length: 2\r\n\r\nok",
            vec![Statuses(&[200]), ClientHas("Date: Sun, 06 Nov 1994 08:49:37 GMT\r\n")],
        ),
        reply_row(
            "cl-and-te-gzip-502",
            "RFC 9112 §6.3 rule 3: final coding not chunked: delimited by the close; the proxy \
             does not decode gzip transfer coding and must not pass it off as decoded \
             (choice: 502, as Squid 5.7)",
            b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: gzip\r\n\r\nhello-coded",
            vec![Statuses(&[502]), ClientLacks("hel"), ClientHas("bad-origin-reply")],
        ),
        reply_row(
            "te-gzip-chunked-502",
            "RFC 9112 §6.1: an unknown coding below chunked is not stripped (was: coded bytes \
             delivered as if decoded)",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
            vec![Statuses(&[502]), ClientLacks("hello")],
        ),
        reply_row(
            "cl-and-unparsable-te-502",
            "RFC 9112 §6.3: an unparsable TE is not absent",
            b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\xff\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
            vec![Statuses(&[502]), ClientLacks("hel\r")],
        ),
        reply_row(
            "unsolicited-101-502",
            "RFC 9110 §15.2.2: a server switches only on a request's Upgrade; a 101 to a plain \
             request is a broken reply",
            b"HTTP/1.1 101 Switching Protocols\r\nConnection: upgrade\r\nUpgrade: echo\r\n\r\nSERVER-BYTES",
            vec![Statuses(&[502]), ClientLacks("SERVER-BYTES")],
        ),
        reply_row(
            "chunked-reply-rechunked",
            "RFC 9112 §7.1: decoded and re-chunked",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
            vec![Statuses(&[200]), Body("hello"), ClientHas("transfer-encoding: chunked")],
        ),
        reply_row(
            "close-delimited-reply-chunked-to-client",
            "RFC 9112 §6.3 rule 8: read until close; re-framed so the client connection persists",
            b"HTTP/1.1 200 OK\r\n\r\nuntil-close",
            vec![Statuses(&[200]), Body("until-close"), ClientHas("transfer-encoding: chunked")],
        ),
        reply_row(
            "origin-x-longhaul-error-not-passed",
            "choice: X-Longhaul-Error is the proxy's own; an origin's is removed so it is \
             neither shown nor logged as the proxy's outcome",
            b"HTTP/1.1 200 OK\r\nX-Longhaul-Error: dns-failed\r\nContent-Length: 2\r\n\r\nok",
            vec![Statuses(&[200]), Body("ok"), ClientLacks("x-longhaul-error")],
        ),
        Row {
            reply: reply_with_fields(http1::DEFAULT_MAX_HEADERS),
            ..reply_row(
                "reply-with-128-fields",
                "README: the same 128-field limit for replies as for requests (was 502 above 100)",
                b"",
                vec![Statuses(&[200]), ClientHas("X-R127: v"), Body("ok")],
            )
        },
        Row {
            reply: reply_with_fields(http1::DEFAULT_MAX_HEADERS + 10),
            ..reply_row(
                "reply-with-138-fields-502",
                "README: over the limit is a bad reply",
                b"",
                vec![Statuses(&[502])],
            )
        },
        Row {
            client: b"GET http://{o}/1 HTTP/1.1\r\nHost: {o}\r\n\r\nGET http://{o}/2 HTTP/1.1\r\nHost: {o}\r\n\r\n".to_vec(),
            reply: b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok".to_vec(),
            ..reply_row(
                "origin-connection-close-is-hop-by-hop",
                "RFC 9110 §7.6.1: Connection is hop-by-hop; the client's connection stays \
                 persistent (choice, as Squid 5.7: each side's persistence is its own)",
                b"",
                vec![Statuses(&[200, 200]), ClientLacks("connection: close"), End(Open)],
            )
        },
    ];
    run_table(rows).await;
}
