//! The replay client: loads a [`Workload`] the way the seeds' browsers did.
//!
//! HTTP/1.1 with persistent connections, at most [`DEFAULT_MAX_PER_HOST`] connections per host
//! name (seed 000: Firefox's six per domain), one request in flight per connection (no
//! pipelining). An object is requested as soon as the object referencing it has arrived, so the
//! page is discovered level by level (HTML → CSS/JS → images). Through a proxy, plain HTTP uses
//! absolute-form requests and HTTPS opens a `CONNECT` tunnel per connection, then TLS (rustls)
//! trusting only the run's test CA. The page load time runs from the first request (before its
//! connection is opened) to the last byte of the last object.
//!
//! Over HTTPS it offers, by ALPN, what [`ReplayConfig::https`] says:
//!
//! - [`HttpsProtocol::Http1`]: `http/1.1` only, as above.
//! - [`HttpsProtocol::Http2`]: `h2` and `http/1.1`, as Chrome does. The first request to a host
//!   opens its one connection and the host's other requests wait for it (Chrome's
//!   `SpdySessionPool` does the same while ALPN is unknown). If the origin chose `h2`, every
//!   request to that host is a stream on that connection, sent the moment it is discovered, so
//!   a discovery level's requests go out at once; streams beyond the server's
//!   `SETTINGS_MAX_CONCURRENT_STREAMS` wait in the `h2` crate until one ends (before the
//!   server's SETTINGS arrive, Chrome's assumption of 100 holds). Windows are Chrome's: 6 MiB
//!   per stream, 15 MiB per connection. If the origin chose `http/1.1`, the host falls back to
//!   the HTTP/1.1 behaviour above. Through a proxy, the connection is one `CONNECT` tunnel per
//!   origin, with HTTP/2 inside it end to end. Plain HTTP is always HTTP/1.1 (browsers do not
//!   speak cleartext HTTP/2).
//! - [`HttpsProtocol::Http3`]: HTTP/3 over QUIC straight to the origin's UDP port
//!   ([`crate::http3`]), scheduled as for `h2`: one connection per host, a level's requests at
//!   once, within the server's `initial_max_streams_bidi`. Not through a proxy.
//!
//! It does not render, execute scripts, cache, or send HTTP/2 priorities (the `h2` crate has
//! none; every stream gets the default weight).

use crate::workload::Workload;
use anyhow::{anyhow, bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio_rustls::rustls;

/// Connections per host name, as the seeds' browsers (seed 000 §4.1.2).
pub const DEFAULT_MAX_PER_HOST: usize = 6;
/// Whole-page deadline; a load slower than this is an error, not a sample.
pub const DEFAULT_PAGE_TIMEOUT: Duration = Duration::from_secs(120);
/// Largest response head accepted.
pub const MAX_HEAD_BYTES: usize = 16 * 1024;
/// Read buffer per connection (bodies are streamed through it and discarded).
pub const READ_BUFFER_BYTES: usize = 64 * 1024;
/// Streams an HTTP/2 connection may open before the server's SETTINGS arrive (Chrome's
/// `kDefaultInitialMaxConcurrentStreams`).
pub const H2_INITIAL_MAX_STREAMS: usize = 100;
/// HTTP/2 receive window per stream (Chrome's `kSpdyStreamMaxRecvWindowSize`, 6 MiB).
pub const H2_STREAM_WINDOW: u32 = 6 * 1024 * 1024;
/// HTTP/2 receive window per connection (Chrome's `kSpdySessionMaxRecvWindowSize`, 15 MiB).
pub const H2_CONNECTION_WINDOW: u32 = 15 * 1024 * 1024;

/// What the client offers an HTTPS origin by ALPN.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum HttpsProtocol {
    /// `http/1.1` only, six connections per host.
    #[default]
    Http1,
    /// `h2` and `http/1.1`: one connection per host when the origin picks `h2`.
    Http2,
    /// HTTP/3 over QUIC, straight to the origin (no proxy carries QUIC): one connection per
    /// host, every request a stream sent at once, within the server's stream limit.
    Http3,
}

/// How to reach the origins.
#[derive(Debug, Clone)]
pub struct ReplayConfig {
    /// `http` or `https`.
    pub scheme: String,
    /// Forward proxy, or `None` to connect to the origins directly.
    pub proxy: Option<SocketAddr>,
    /// Address of every host name (used when connecting directly).
    pub resolve: HashMap<String, IpAddr>,
    /// PEM file of the CA that signs the origin certificates (HTTPS).
    pub ca_pem: Option<std::path::PathBuf>,
    /// Connections per host.
    pub max_per_host: usize,
    /// Page deadline.
    pub timeout: Duration,
    /// Origin port for `http` (80 in the test bed).
    pub http_port: u16,
    /// Origin port for `https` (443 in the test bed).
    pub https_port: u16,
    /// What HTTPS offers by ALPN.
    pub https: HttpsProtocol,
    /// Source address of the page's TCP connections; `None`: the kernel's choice.
    pub source: Option<IpAddr>,
}

impl ReplayConfig {
    /// Defaults for `scheme`: direct, ports 80/443, six connections per host.
    pub fn new(scheme: &str) -> ReplayConfig {
        ReplayConfig {
            scheme: scheme.into(),
            proxy: None,
            resolve: HashMap::new(),
            ca_pem: None,
            max_per_host: DEFAULT_MAX_PER_HOST,
            timeout: DEFAULT_PAGE_TIMEOUT,
            http_port: 80,
            https_port: 443,
            https: HttpsProtocol::Http1,
            source: None,
        }
    }
}

/// Timing of one object, relative to the start of the page load.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ObjectTime {
    /// `host/path`.
    pub url: String,
    /// When it was discovered (its parent finished), ms.
    pub discovered_ms: f64,
    /// When its request was written, ms.
    pub request_ms: f64,
    /// When its last byte arrived, ms.
    pub done_ms: f64,
    /// Body bytes received.
    pub bytes: u64,
    /// Whether the request opened a new connection.
    pub new_connection: bool,
    /// TLS version negotiated on its connection (`TLSv1_3`, `TLSv1_2`); absent over plain HTTP.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<String>,
    /// Protocol the origin chose by ALPN (`h2`, `http/1.1`); absent over plain HTTP and when
    /// only `http/1.1` was offered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alpn: Option<String>,
}

/// Result of one page load.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PageLoad {
    /// First request to last byte, ms.
    pub plt_ms: f64,
    /// Connections opened.
    pub connections: usize,
    /// Per-object times, in workload order.
    pub objects: Vec<ObjectTime>,
}

trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

struct Conn {
    io: BufReader<Pin<Box<dyn Io>>>,
    /// Negotiated TLS version, for HTTPS.
    tls: Option<String>,
    /// Protocol chosen by ALPN, when one was.
    alpn: Option<String>,
}

/// A host's connection once ALPN decided (HTTPS with [`HttpsProtocol::Http2`]).
enum Session {
    /// The origin chose `h2`: every request is a stream on this connection.
    H2 {
        send: h2::client::SendRequest<bytes::Bytes>,
        tls: Option<String>,
    },
    /// HTTP/3: every request is a stream on this QUIC connection.
    H3(crate::http3::SendRequest),
    /// The origin chose `http/1.1`: up to `max_per_host` connections, the first of which is
    /// in the idle pool; a request takes a permit first.
    H1(Arc<tokio::sync::Semaphore>),
}

struct Shared {
    w: Workload,
    cfg: ReplayConfig,
    tls: Option<tokio_rustls::TlsConnector>,
    start: Instant,
    idle: Mutex<HashMap<String, Vec<Conn>>>,
    opened: Mutex<usize>,
    /// Per host, its session once the first connection is up (HTTP/2 offered only).
    sessions: Mutex<HashMap<String, Arc<tokio::sync::OnceCell<Session>>>>,
    /// The QUIC endpoint, for HTTP/3.
    quic: Option<quinn::Endpoint>,
}

impl Shared {
    /// Whether requests go through one session per host ([`fetch_session`]): HTTPS offering
    /// `h2`, or HTTP/3.
    fn multiplexes(&self) -> bool {
        self.tls.is_some() && self.cfg.https != HttpsProtocol::Http1
    }
}

fn ms(start: Instant) -> f64 {
    start.elapsed().as_secs_f64() * 1000.0
}

/// Builds the TLS client configuration trusting only the CA in `ca_pem`, offering `alpn`.
pub fn tls_connector(
    ca_pem: &std::path::Path,
    alpn: &[&[u8]],
) -> Result<tokio_rustls::TlsConnector> {
    Ok(tokio_rustls::TlsConnector::from(Arc::new(tls_config(
        ca_pem, alpn,
    )?)))
}

/// The TLS client configuration trusting only the CA in `ca_pem`, offering `alpn`.
pub fn tls_config(ca_pem: &std::path::Path, alpn: &[&[u8]]) -> Result<rustls::ClientConfig> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::CertificateDer;
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca_pem)
        .with_context(|| format!("reading CA {}", ca_pem.display()))?
    {
        roots
            .add(cert.context("parsing CA PEM")?)
            .context("adding CA")?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Ok(config)
}

/// Loads `w` once and returns its timings.
pub async fn load_page(w: &Workload, cfg: &ReplayConfig) -> Result<PageLoad> {
    if w.objects.is_empty() {
        bail!("workload {} has no objects to load", w.id);
    }
    if cfg.scheme != "http" && cfg.scheme != "https" {
        bail!("scheme must be http or https, not {:?}", cfg.scheme);
    }
    let tls = if cfg.scheme == "https" {
        let ca = cfg
            .ca_pem
            .as_deref()
            .ok_or_else(|| anyhow!("https needs the test CA"))?;
        let alpn: &[&[u8]] = match cfg.https {
            HttpsProtocol::Http1 => &[b"http/1.1"],
            HttpsProtocol::Http2 => &[b"h2", b"http/1.1"],
            HttpsProtocol::Http3 => &[crate::http3::ALPN],
        };
        Some(tls_connector(ca, alpn)?)
    } else {
        None
    };
    let quic = match (&cfg.https, cfg.scheme.as_str()) {
        (HttpsProtocol::Http3, "https") => {
            if let Some(p) = cfg.proxy {
                bail!("HTTP/3 goes straight to the origin: QUIC does not cross the HTTP proxy {p}");
            }
            let ca = cfg.ca_pem.as_deref().expect("checked above");
            Some(crate::http3::client_endpoint(tls_config(ca, &[])?)?)
        }
        _ => None,
    };
    let shared = Arc::new(Shared {
        w: w.clone(),
        cfg: cfg.clone(),
        tls,
        start: Instant::now(),
        idle: Mutex::new(HashMap::new()),
        opened: Mutex::new(0),
        sessions: Mutex::new(HashMap::new()),
        quic,
    });
    let fut = run(shared.clone());
    let objects = tokio::time::timeout(cfg.timeout, fut)
        .await
        .map_err(|_| anyhow!("page {} not loaded within {:?}", w.id, cfg.timeout))??;
    let plt_ms = objects.iter().map(|o| o.done_ms).fold(0.0, f64::max);
    let connections = *shared.opened.lock().expect("poisoned");
    Ok(PageLoad {
        plt_ms,
        connections,
        objects,
    })
}

/// Dispatches objects as a browser does: an object becomes ready when the object referencing
/// it has arrived; ready objects wait in a per-host queue in discovery order, then document
/// order, and at most `max_per_host` requests per host are in flight (one per connection).
/// When HTTPS offers `h2`, every ready object is handed to its host's session at once (the
/// session then limits what is in flight).
async fn run(shared: Arc<Shared>) -> Result<Vec<ObjectTime>> {
    let w = &shared.w;
    let n = w.objects.len();
    let max = if shared.multiplexes() {
        usize::MAX
    } else {
        shared.cfg.max_per_host.max(1)
    };
    let mut queues: HashMap<&str, std::collections::VecDeque<(usize, f64)>> = HashMap::new();
    let mut busy: HashMap<&str, usize> = HashMap::new();
    let mut out: Vec<Option<ObjectTime>> = vec![None; n];
    let mut tasks = tokio::task::JoinSet::new();
    queues
        .entry(w.objects[0].host.as_str())
        .or_default()
        .push_back((0, 0.0));
    let mut finished = 0;
    while finished < n {
        for h in &w.hosts {
            let q = queues.entry(h.as_str()).or_default();
            let b = busy.entry(h.as_str()).or_default();
            while *b < max {
                let Some((i, discovered_ms)) = q.pop_front() else {
                    break;
                };
                *b += 1;
                let shared = shared.clone();
                tasks.spawn(async move {
                    let t = if shared.multiplexes() {
                        fetch_session(&shared, i, discovered_ms).await
                    } else {
                        fetch(&shared, i, discovered_ms).await
                    };
                    (i, t)
                });
            }
        }
        let Some(r) = tasks.join_next().await else {
            bail!("{} of {n} objects never became ready", n - finished);
        };
        let (i, t) = r.context("object task panicked")?;
        let t = t?;
        finished += 1;
        *busy.entry(w.objects[i].host.as_str()).or_default() -= 1;
        let done = t.done_ms;
        out[i] = Some(t);
        for k in w.children(i) {
            queues
                .entry(w.objects[k].host.as_str())
                .or_default()
                .push_back((k, done));
        }
    }
    out.into_iter()
        .enumerate()
        .map(|(i, o)| o.ok_or_else(|| anyhow!("object {i} never fetched")))
        .collect()
}

async fn fetch(shared: &Shared, i: usize, discovered_ms: f64) -> Result<ObjectTime> {
    let o = &shared.w.objects[i];
    let reused = shared
        .idle
        .lock()
        .expect("poisoned")
        .get_mut(&o.host)
        .and_then(|v| v.pop());
    let request_ms = ms(shared.start);
    let (mut conn, new_connection) = match reused {
        Some(c) => (c, false),
        None => (open(shared, &o.host).await?, true),
    };
    let target = match (shared.cfg.proxy, shared.cfg.scheme.as_str()) {
        (Some(_), "http") => format!("http://{}{}", o.host, o.path),
        _ => o.path.clone(),
    };
    let req = format!(
        "GET {target} HTTP/1.1\r\nHost: {}\r\nUser-Agent: longhaul-replay\r\nAccept: */*\r\n\r\n",
        o.host
    );
    conn.io
        .get_mut()
        .write_all(req.as_bytes())
        .await
        .with_context(|| format!("sending {target}"))?;
    let (status, len, keep) = read_head(&mut conn.io)
        .await
        .with_context(|| format!("response to {target}"))?;
    if status != 200 {
        bail!("{target}: status {status}");
    }
    let bytes = read_body(&mut conn.io, len)
        .await
        .with_context(|| format!("body of {target}"))?;
    let done_ms = ms(shared.start);
    if bytes != o.size {
        bail!("{target}: {bytes} bytes, expected {}", o.size);
    }
    let conn_tls = conn.tls.clone();
    let conn_alpn = conn.alpn.clone();
    if keep {
        shared
            .idle
            .lock()
            .expect("poisoned")
            .entry(o.host.clone())
            .or_default()
            .push(conn);
    }
    Ok(ObjectTime {
        url: format!("{}{}", o.host, o.path),
        discovered_ms,
        request_ms,
        done_ms,
        bytes,
        new_connection,
        tls: conn_tls,
        alpn: conn_alpn,
    })
}

/// Fetches object `i` through its host's session (HTTPS offering `h2`): opens the host's one
/// connection if no request did yet, or waits for the request that is opening it.
async fn fetch_session(shared: &Shared, i: usize, discovered_ms: f64) -> Result<ObjectTime> {
    let o = &shared.w.objects[i];
    let cell = shared
        .sessions
        .lock()
        .expect("poisoned")
        .entry(o.host.clone())
        .or_default()
        .clone();
    let request_ms = ms(shared.start);
    let opened_here = std::sync::atomic::AtomicBool::new(false);
    let session = cell
        .get_or_try_init(|| async {
            opened_here.store(true, std::sync::atomic::Ordering::Relaxed);
            open_session(shared, &o.host).await
        })
        .await?;
    let new_connection = opened_here.load(std::sync::atomic::Ordering::Relaxed);
    match session {
        Session::H1(slots) => {
            let _permit = slots.acquire().await.context("HTTP/1.1 slots closed")?;
            let mut t = fetch(shared, i, discovered_ms).await?;
            t.request_ms = request_ms;
            t.new_connection |= new_connection;
            Ok(t)
        }
        Session::H3(send) => {
            let url = format!("https://{}{}", o.host, o.path);
            let (status, bytes) = crate::http3::get(send.clone(), &url)
                .await
                .with_context(|| format!("{url} over h3"))?;
            let done_ms = ms(shared.start);
            if status != 200 {
                bail!("{url}: status {status}");
            }
            if bytes != o.size {
                bail!("{url}: {bytes} bytes, expected {}", o.size);
            }
            Ok(ObjectTime {
                url: format!("{}{}", o.host, o.path),
                discovered_ms,
                request_ms,
                done_ms,
                bytes,
                new_connection,
                tls: Some("TLSv1_3".into()),
                alpn: Some("h3".into()),
            })
        }
        Session::H2 { send, tls } => {
            let url = format!("https://{}{}", o.host, o.path);
            let bytes = h2_get(send.clone(), &url)
                .await
                .with_context(|| format!("{url} over h2"))?;
            let done_ms = ms(shared.start);
            if bytes != o.size {
                bail!("{url}: {bytes} bytes, expected {}", o.size);
            }
            Ok(ObjectTime {
                url: format!("{}{}", o.host, o.path),
                discovered_ms,
                request_ms,
                done_ms,
                bytes,
                new_connection,
                tls: tls.clone(),
                alpn: Some("h2".into()),
            })
        }
    }
}

/// Opens the first connection to `host` offering `h2` and `http/1.1`, and starts what the
/// origin chose; or, for HTTP/3, the host's QUIC connection.
async fn open_session(shared: &Shared, host: &str) -> Result<Session> {
    if let Some(ep) = &shared.quic {
        *shared.opened.lock().expect("poisoned") += 1;
        let ip = shared
            .cfg
            .resolve
            .get(host)
            .ok_or_else(|| anyhow!("no address for {host}"))?;
        let send =
            crate::http3::connect(ep, SocketAddr::new(*ip, shared.cfg.https_port), host).await?;
        return Ok(Session::H3(send));
    }
    let conn = open(shared, host).await?;
    if conn.alpn.as_deref() != Some("h2") {
        shared
            .idle
            .lock()
            .expect("poisoned")
            .entry(host.to_string())
            .or_default()
            .push(conn);
        return Ok(Session::H1(Arc::new(tokio::sync::Semaphore::new(
            shared.cfg.max_per_host.max(1),
        ))));
    }
    if !conn.io.buffer().is_empty() {
        bail!("{host}: bytes buffered before the HTTP/2 preface");
    }
    let (send, connection) = h2::client::Builder::new()
        .initial_max_send_streams(H2_INITIAL_MAX_STREAMS)
        .initial_window_size(H2_STREAM_WINDOW)
        .initial_connection_window_size(H2_CONNECTION_WINDOW)
        .enable_push(false)
        .handshake::<_, bytes::Bytes>(conn.io.into_inner())
        .await
        .with_context(|| format!("HTTP/2 handshake with {host}"))?;
    // The connection task ends when every `SendRequest` is dropped, with the load.
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::debug!("HTTP/2 connection ended: {e}");
        }
    });
    Ok(Session::H2 {
        send,
        tls: conn.tls,
    })
}

/// Times a stream the server refused (`REFUSED_STREAM`) is sent again.
pub const H2_REFUSED_RETRIES: usize = 3;

/// One GET of `url` as a stream on `send`; returns the body bytes. The stream waits in the
/// `h2` crate while the connection is at the server's concurrent-stream limit. Streams sent
/// before the server's SETTINGS arrived, beyond a limit lower than the assumed one, are
/// refused unprocessed (`REFUSED_STREAM`): they are sent again, as RFC 9113 §8.7 allows and
/// Chrome does, up to [`H2_REFUSED_RETRIES`] times.
async fn h2_get(send: h2::client::SendRequest<bytes::Bytes>, url: &str) -> Result<u64> {
    let mut attempt = 0;
    let resp = loop {
        let req = http::Request::get(url)
            .header(http::header::USER_AGENT, "longhaul-replay")
            .header(http::header::ACCEPT, "*/*")
            .body(())
            .context("building the request")?;
        let mut send = send.clone().ready().await.context("connection closed")?;
        let (resp, _) = send.send_request(req, true).context("opening a stream")?;
        match resp.await {
            Ok(r) => break r,
            Err(e)
                if e.reason() == Some(h2::Reason::REFUSED_STREAM)
                    && attempt < H2_REFUSED_RETRIES =>
            {
                attempt += 1;
            }
            Err(e) => return Err(e).context("response"),
        }
    };
    if resp.status() != http::StatusCode::OK {
        bail!("status {}", resp.status().as_u16());
    }
    let mut body = resp.into_body();
    let mut total = 0u64;
    while let Some(chunk) = body.data().await {
        let chunk = chunk.context("body")?;
        total += chunk.len() as u64;
        body.flow_control()
            .release_capacity(chunk.len())
            .context("releasing window")?;
    }
    Ok(total)
}

/// A TCP connection to `to`, from `source` when given.
async fn connect(to: SocketAddr, source: Option<IpAddr>) -> std::io::Result<TcpStream> {
    let Some(src) = source else {
        return TcpStream::connect(to).await;
    };
    let sock = if to.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    sock.bind(SocketAddr::new(src, 0))?;
    sock.connect(to).await
}

async fn open(shared: &Shared, host: &str) -> Result<Conn> {
    *shared.opened.lock().expect("poisoned") += 1;
    let port = if shared.cfg.scheme == "https" {
        shared.cfg.https_port
    } else {
        shared.cfg.http_port
    };
    let tcp = match shared.cfg.proxy {
        Some(p) => connect(p, shared.cfg.source)
            .await
            .with_context(|| format!("connecting to proxy {p}"))?,
        None => {
            let ip = shared
                .cfg
                .resolve
                .get(host)
                .ok_or_else(|| anyhow!("no address for {host}"))?;
            connect(SocketAddr::new(*ip, port), shared.cfg.source)
                .await
                .with_context(|| format!("connecting to {host} {ip}"))?
        }
    };
    tcp.set_nodelay(true)?;
    let mut io: BufReader<Pin<Box<dyn Io>>> =
        BufReader::with_capacity(READ_BUFFER_BYTES, Box::pin(tcp));
    if let Some(tls) = &shared.tls {
        if shared.cfg.proxy.is_some() {
            let req = format!("CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n");
            io.get_mut()
                .write_all(req.as_bytes())
                .await
                .context("sending CONNECT")?;
            let (status, _, _) = read_head(&mut io).await.context("CONNECT reply")?;
            if !(200..300).contains(&status) {
                bail!("CONNECT {host}:{port} refused with status {status}");
            }
            if !io.buffer().is_empty() {
                bail!("proxy sent bytes after its CONNECT reply");
            }
        }
        let name = rustls::pki_types::ServerName::try_from(host.to_string())
            .map_err(|e| anyhow!("bad server name {host}: {e}"))?;
        let tcp = io.into_inner();
        let s = tls
            .connect(name, tcp)
            .await
            .with_context(|| format!("TLS with {host}"))?;
        let version = s.get_ref().1.protocol_version().map(|v| format!("{v:?}"));
        let alpn = match shared.cfg.https {
            HttpsProtocol::Http1 => None,
            HttpsProtocol::Http2 | HttpsProtocol::Http3 => s
                .get_ref()
                .1
                .alpn_protocol()
                .map(|p| String::from_utf8_lossy(p).into_owned()),
        };
        io = BufReader::with_capacity(READ_BUFFER_BYTES, Box::pin(s));
        return Ok(Conn {
            io,
            tls: version,
            alpn,
        });
    }
    Ok(Conn {
        io,
        tls: None,
        alpn: None,
    })
}

/// Body framing of a response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyLen {
    /// `Content-Length`.
    Exact(u64),
    /// `Transfer-Encoding: chunked`.
    Chunked,
    /// Neither: no body (CONNECT replies, 204/304).
    None,
}

/// Reads a response head; returns (status, framing, keep-alive).
async fn read_head<R: AsyncBufReadExt + Unpin>(r: &mut R) -> Result<(u16, BodyLen, bool)> {
    let mut head = Vec::with_capacity(1024);
    loop {
        let n = r.read_until(b'\n', &mut head).await?;
        if n == 0 {
            bail!("connection closed before the response head ended");
        }
        if head.len() > MAX_HEAD_BYTES {
            bail!("response head longer than {MAX_HEAD_BYTES} bytes");
        }
        if head.ends_with(b"\r\n\r\n") || head.ends_with(b"\n\n") {
            break;
        }
    }
    parse_head(&head)
}

/// Parses a complete response head.
pub fn parse_head(head: &[u8]) -> Result<(u16, BodyLen, bool)> {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut resp = httparse::Response::new(&mut headers);
    match resp.parse(head).context("malformed response head")? {
        httparse::Status::Complete(_) => {}
        httparse::Status::Partial => bail!("incomplete response head"),
    }
    let status = resp.code.unwrap_or(0);
    let mut len = BodyLen::None;
    let mut keep = resp.version == Some(1);
    for h in resp.headers.iter() {
        let v = String::from_utf8_lossy(h.value).trim().to_ascii_lowercase();
        if h.name.eq_ignore_ascii_case("content-length") {
            len = BodyLen::Exact(
                v.parse()
                    .with_context(|| format!("bad Content-Length {v:?}"))?,
            );
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") && v.contains("chunked") {
            len = BodyLen::Chunked;
        } else if h.name.eq_ignore_ascii_case("connection")
            || h.name.eq_ignore_ascii_case("proxy-connection")
        {
            if v.contains("close") {
                keep = false;
            } else if v.contains("keep-alive") {
                keep = true;
            }
        }
    }
    Ok((status, len, keep))
}

async fn read_body<R: AsyncBufReadExt + Unpin>(r: &mut R, len: BodyLen) -> Result<u64> {
    match len {
        BodyLen::None => Ok(0),
        BodyLen::Exact(n) => discard(r, n).await,
        BodyLen::Chunked => {
            let mut total = 0;
            loop {
                let mut line = String::new();
                r.read_line(&mut line).await?;
                let hex = line.trim().split(';').next().unwrap_or("");
                let n = u64::from_str_radix(hex, 16)
                    .with_context(|| format!("bad chunk size {line:?}"))?;
                if n == 0 {
                    // Trailers until the empty line.
                    loop {
                        line.clear();
                        if r.read_line(&mut line).await? == 0 || line.trim().is_empty() {
                            return Ok(total);
                        }
                    }
                }
                total += discard(r, n).await?;
                line.clear();
                r.read_line(&mut line).await?;
            }
        }
    }
}

async fn discard<R: AsyncRead + Unpin>(r: &mut R, n: u64) -> Result<u64> {
    let copied = tokio::io::copy(&mut r.take(n), &mut tokio::io::sink()).await?;
    if copied != n {
        bail!("connection closed after {copied} of {n} body bytes");
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heads_parse_with_framing_and_keep_alive() {
        let h = b"HTTP/1.1 200 OK\r\nContent-Length: 12\r\n\r\n";
        assert_eq!(parse_head(h).unwrap(), (200, BodyLen::Exact(12), true));
        let h = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n";
        assert_eq!(parse_head(h).unwrap(), (200, BodyLen::Chunked, false));
        let h = b"HTTP/1.0 200 Connection established\r\n\r\n";
        assert_eq!(parse_head(h).unwrap(), (200, BodyLen::None, false));
        assert!(parse_head(b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n").is_err());
        assert!(parse_head(b"garbage\r\n\r\n").is_err());
    }

    #[tokio::test]
    async fn chunked_bodies_are_counted() {
        let mut r = BufReader::new(&b"5\r\nhello\r\n3;x=y\r\nabc\r\n0\r\n\r\n"[..]);
        assert_eq!(read_body(&mut r, BodyLen::Chunked).await.unwrap(), 8);
        let mut r = BufReader::new(&b"abc"[..]);
        assert!(read_body(&mut r, BodyLen::Exact(4)).await.is_err());
    }
}

#[cfg(test)]
mod origin_tests {
    use super::*;
    use crate::workload::{generate_page, page_specs};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Mutex;
    use tokio::net::TcpListener;

    /// A built-in HTTP/1.1 origin on loopback serving `w`'s bodies; counts connections.
    pub(super) async fn serve(w: Workload) -> (SocketAddr, Arc<AtomicUsize>) {
        let (addr, conns, _) = serve_peers(w).await;
        (addr, conns)
    }

    /// [`serve`], also recording each connection's source address.
    async fn serve_peers(w: Workload) -> (SocketAddr, Arc<AtomicUsize>, Arc<Mutex<Vec<IpAddr>>>) {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let conns = Arc::new(AtomicUsize::new(0));
        let peers = Arc::new(Mutex::new(Vec::new()));
        let (c2, p2) = (conns.clone(), peers.clone());
        let w = Arc::new(w);
        tokio::spawn(async move {
            loop {
                let (s, peer) = l.accept().await.unwrap();
                c2.fetch_add(1, Ordering::SeqCst);
                p2.lock().unwrap().push(peer.ip());
                let w = w.clone();
                tokio::spawn(async move {
                    let mut s = BufReader::new(s);
                    loop {
                        let mut head = Vec::new();
                        while !head.ends_with(b"\r\n\r\n") {
                            if s.read_until(b'\n', &mut head).await.unwrap_or(0) == 0 {
                                return;
                            }
                        }
                        let line = String::from_utf8_lossy(&head).to_string();
                        let path = line.split_whitespace().nth(1).unwrap().to_string();
                        let i = w.objects.iter().position(|o| o.path == path).unwrap();
                        let body = if w.objects[i].kind == crate::workload::Kind::Image {
                            vec![0u8; w.objects[i].size as usize]
                        } else {
                            w.body(i)
                        };
                        let h =
                            format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", body.len());
                        s.get_mut().write_all(h.as_bytes()).await.unwrap();
                        s.get_mut().write_all(&body).await.unwrap();
                    }
                });
            }
        });
        (addr, conns, peers)
    }

    #[tokio::test]
    async fn offered_load_comes_from_each_customers_address_in_turn() {
        let w = generate_page(page_specs().iter().find(|s| s.id == "google").unwrap());
        let (addr, conns, peers) = serve_peers(w.clone()).await;
        let mut cfg = ReplayConfig::new("http");
        cfg.http_port = addr.port();
        cfg.resolve = w.hosts.iter().map(|h| (h.clone(), addr.ip())).collect();
        let customers: Vec<IpAddr> = ["127.0.0.2", "127.0.0.3", "127.0.0.4"]
            .iter()
            .map(|a| a.parse().unwrap())
            .collect();
        // 40 pages a second for half a second.
        let r = crate::load::run(&w, &cfg, 40.0, Duration::from_millis(500), 5, &customers)
            .await
            .unwrap();
        assert_eq!(r.failures, 0);
        assert!(r.pages >= 4, "{} pages", r.pages);
        let peers = peers.lock().unwrap().clone();
        assert_eq!(peers.len(), conns.load(Ordering::SeqCst));
        assert!(peers.iter().all(|p| customers.contains(p)), "{peers:?}");
        for c in &customers {
            assert!(peers.contains(c), "no load from {c}: {peers:?}");
        }
        // Without customers the loads come from the kernel's choice.
        let (addr, _, peers) = serve_peers(w.clone()).await;
        cfg.http_port = addr.port();
        crate::load::run(&w, &cfg, 40.0, Duration::from_millis(200), 5, &[])
            .await
            .unwrap();
        assert!(peers
            .lock()
            .unwrap()
            .iter()
            .all(|p| p.is_loopback() && *p == addr.ip()));
    }

    #[tokio::test]
    async fn loads_every_object_level_by_level_within_six_connections_per_host() {
        let w = generate_page(page_specs().iter().find(|s| s.id == "amazon").unwrap());
        let (addr, conns) = serve(w.clone()).await;
        let mut cfg = ReplayConfig::new("http");
        cfg.http_port = addr.port();
        cfg.resolve = w.hosts.iter().map(|h| (h.clone(), addr.ip())).collect();
        let load = load_page(&w, &cfg).await.unwrap();
        assert_eq!(load.objects.len(), 53);
        assert_eq!(load.objects.iter().map(|o| o.bytes).sum::<u64>(), 977_000);
        assert!(
            load.connections <= DEFAULT_MAX_PER_HOST,
            "{}",
            load.connections
        );
        assert_eq!(load.connections, conns.load(Ordering::SeqCst));
        for (i, o) in w.objects.iter().enumerate() {
            if let Some(p) = o.parent {
                assert!(
                    load.objects[i].request_ms >= load.objects[p].done_ms,
                    "{} before its parent",
                    o.path
                );
            }
        }
        // Never more than six requests in flight to the host, and every connection in use.
        for o in &load.objects {
            let t = o.request_ms;
            let in_flight = load
                .objects
                .iter()
                .filter(|x| x.request_ms <= t && x.done_ms > t)
                .count();
            assert!(
                in_flight <= DEFAULT_MAX_PER_HOST,
                "{in_flight} in flight at {t}"
            );
        }
        let last = load.objects.iter().map(|o| o.done_ms).fold(0.0, f64::max);
        assert_eq!(load.plt_ms, last);
    }

    /// A TLS origin (certificate for every host of `w`, signed by a fresh CA written to
    /// `ca_path`) in front of [`serve`], and a CONNECT proxy to it; returns the proxy address.
    async fn tls_origin_behind_connect_proxy(w: Workload, ca_path: &std::path::Path) -> SocketAddr {
        use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
        let ca_key = KeyPair::generate().unwrap();
        let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca_cert = ca.self_signed(&ca_key).unwrap();
        std::fs::write(ca_path, ca_cert.pem()).unwrap();
        let key = KeyPair::generate().unwrap();
        let leaf = CertificateParams::new(w.hosts.clone())
            .unwrap()
            .signed_by(&key, &ca_cert, &ca_key)
            .unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let cfg = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(
                vec![leaf.der().clone()],
                rustls::pki_types::PrivateKeyDer::try_from(key.serialize_der()).unwrap(),
            )
            .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(cfg));
        let (plain, _) = serve(w).await;
        let tls_l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let tls_addr = tls_l.local_addr().unwrap();
        tokio::spawn(async move {
            loop {
                let (s, _) = tls_l.accept().await.unwrap();
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    let Ok(mut tls) = acceptor.accept(s).await else {
                        return;
                    };
                    let mut up = TcpStream::connect(plain).await.unwrap();
                    let _ = tokio::io::copy_bidirectional(&mut tls, &mut up).await;
                });
            }
        });
        let proxy = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let paddr = proxy.local_addr().unwrap();
        tokio::spawn(async move {
            loop {
                let (s, _) = proxy.accept().await.unwrap();
                tokio::spawn(async move {
                    let mut s = BufReader::new(s);
                    let mut head = Vec::new();
                    while !head.ends_with(b"\r\n\r\n") {
                        if s.read_until(b'\n', &mut head).await.unwrap_or(0) == 0 {
                            return;
                        }
                    }
                    assert!(
                        head.starts_with(b"CONNECT "),
                        "{}",
                        String::from_utf8_lossy(&head)
                    );
                    let mut up = TcpStream::connect(tls_addr).await.unwrap();
                    s.get_mut()
                        .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                        .await
                        .unwrap();
                    let _ = tokio::io::copy_bidirectional(s.get_mut(), &mut up).await;
                });
            }
        });
        paddr
    }

    #[tokio::test]
    async fn https_goes_through_connect_tunnels_and_trusts_only_the_test_ca() {
        let w = generate_page(&page_specs()[0]); // yahoo, two hosts
        let ca =
            std::env::temp_dir().join(format!("longhaul-replay-ca-{}.pem", std::process::id()));
        let proxy = tls_origin_behind_connect_proxy(w.clone(), &ca).await;
        let mut cfg = ReplayConfig::new("https");
        cfg.proxy = Some(proxy);
        cfg.ca_pem = Some(ca.clone());
        let load = load_page(&w, &cfg).await.unwrap();
        assert_eq!(load.objects.len(), 30);
        assert!(load.connections <= 2 * DEFAULT_MAX_PER_HOST);
        // The negotiated version is recorded per object (rustls' test server speaks TLS 1.3).
        assert!(
            load.objects
                .iter()
                .all(|o| o.tls.as_deref() == Some("TLSv1_3")),
            "{:?}",
            load.objects.iter().map(|o| &o.tls).collect::<Vec<_>>()
        );
        // Another CA: the handshake must fail.
        let other =
            std::env::temp_dir().join(format!("longhaul-replay-ca2-{}.pem", std::process::id()));
        let _ = tls_origin_behind_connect_proxy(w.clone(), &other).await;
        cfg.ca_pem = Some(other.clone());
        let e = load_page(&w, &cfg).await.unwrap_err();
        assert!(format!("{e:#}").contains("TLS"), "{e:#}");
        let _ = std::fs::remove_file(ca);
        let _ = std::fs::remove_file(other);
    }

    #[tokio::test]
    async fn a_missing_origin_is_an_error_not_a_hang() {
        let w = generate_page(&page_specs()[1]);
        let mut cfg = ReplayConfig::new("http");
        cfg.resolve = w
            .hosts
            .iter()
            .map(|h| (h.clone(), IpAddr::from([127, 0, 0, 1])))
            .collect();
        cfg.http_port = 1; // nothing listens on port 1
        cfg.timeout = Duration::from_secs(5);
        assert!(load_page(&w, &cfg).await.is_err());
        let mut cfg = ReplayConfig::new("https");
        cfg.timeout = Duration::from_secs(5);
        assert!(format!("{:#}", load_page(&w, &cfg).await.unwrap_err()).contains("CA"));
    }
}

#[cfg(test)]
use origin_tests as origin_tests_support;

#[cfg(test)]
mod h2_tests {
    use super::*;
    use crate::workload::{generate_page, page_specs, Kind};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::net::TcpListener;

    /// What an HTTP/2 test origin saw.
    #[derive(Default)]
    struct Seen {
        /// Server name of every TLS connection, in accept order.
        connections: Mutex<Vec<String>>,
        /// Most streams open at the same time on any one connection.
        peak: AtomicUsize,
        /// Requests served.
        requests: AtomicUsize,
    }

    /// A fresh CA (written to `ca_path`) and a server configuration for `hosts` offering `alpn`.
    fn server_tls(
        hosts: &[String],
        ca_path: &std::path::Path,
        alpn: &[&[u8]],
    ) -> rustls::ServerConfig {
        use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
        let ca_key = KeyPair::generate().unwrap();
        let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca_cert = ca.self_signed(&ca_key).unwrap();
        std::fs::write(ca_path, ca_cert.pem()).unwrap();
        let key = KeyPair::generate().unwrap();
        let leaf = CertificateParams::new(hosts.to_vec())
            .unwrap()
            .signed_by(&key, &ca_cert, &ca_key)
            .unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut cfg = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(
                vec![leaf.der().clone()],
                rustls::pki_types::PrivateKeyDer::try_from(key.serialize_der()).unwrap(),
            )
            .unwrap();
        cfg.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        cfg
    }

    /// An HTTP/2-only TLS origin for `w` on loopback that allows `max_streams` concurrent
    /// streams per connection. Responses to anything but the page itself are held until
    /// `gate` streams are open on one connection (or 10 s passed), so the peak shows how many
    /// requests the client had sent at once.
    async fn h2_origin(
        w: Workload,
        ca_path: &std::path::Path,
        max_streams: u32,
        gate: usize,
    ) -> (SocketAddr, Arc<Seen>) {
        let cfg = server_tls(&w.hosts, ca_path, &[b"h2"]);
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(cfg));
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let seen = Arc::new(Seen::default());
        let (open_gate, gate_rx) = tokio::sync::watch::channel(false);
        let open_gate = Arc::new(open_gate);
        let w = Arc::new(w);
        let s2 = seen.clone();
        tokio::spawn(async move {
            loop {
                let (s, _) = l.accept().await.unwrap();
                let (acceptor, w, seen) = (acceptor.clone(), w.clone(), s2.clone());
                let (open_gate, gate_rx) = (open_gate.clone(), gate_rx.clone());
                tokio::spawn(async move {
                    let tls = acceptor.accept(s).await.unwrap();
                    let sni = tls.get_ref().1.server_name().unwrap_or("").to_string();
                    seen.connections.lock().unwrap().push(sni);
                    let mut conn = h2::server::Builder::new()
                        .max_concurrent_streams(max_streams)
                        .handshake::<_, bytes::Bytes>(tls)
                        .await
                        .unwrap();
                    let open = Arc::new(AtomicUsize::new(0));
                    while let Some(r) = conn.accept().await {
                        let (req, mut respond) = r.unwrap();
                        let (w, seen, open) = (w.clone(), seen.clone(), open.clone());
                        let (open_gate, mut gate_rx) = (open_gate.clone(), gate_rx.clone());
                        tokio::spawn(async move {
                            let n = open.fetch_add(1, Ordering::SeqCst) + 1;
                            seen.peak.fetch_max(n, Ordering::SeqCst);
                            seen.requests.fetch_add(1, Ordering::SeqCst);
                            let path = req.uri().path().to_string();
                            let i = w.objects.iter().position(|o| o.path == path).unwrap();
                            if i != 0 {
                                if n >= gate {
                                    open_gate.send_replace(true);
                                }
                                let _ = tokio::time::timeout(
                                    Duration::from_secs(10),
                                    gate_rx.wait_for(|v| *v),
                                )
                                .await;
                            }
                            let body = if w.objects[i].kind == Kind::Image {
                                vec![0u8; w.objects[i].size as usize]
                            } else {
                                w.body(i)
                            };
                            open.fetch_sub(1, Ordering::SeqCst);
                            let mut tx = respond
                                .send_response(http::Response::new(()), false)
                                .unwrap();
                            tx.send_data(bytes::Bytes::from(body), true).unwrap();
                        });
                    }
                });
            }
        });
        (addr, seen)
    }

    /// A CONNECT proxy on loopback that sends every tunnel to `to`; records each CONNECT's
    /// authority.
    async fn connect_proxy(to: SocketAddr) -> (SocketAddr, Arc<Mutex<Vec<String>>>) {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let tunnels = Arc::new(Mutex::new(Vec::new()));
        let t2 = tunnels.clone();
        tokio::spawn(async move {
            loop {
                let (s, _) = l.accept().await.unwrap();
                let tunnels = t2.clone();
                tokio::spawn(async move {
                    let mut s = BufReader::new(s);
                    let mut head = Vec::new();
                    while !head.ends_with(b"\r\n\r\n") {
                        if s.read_until(b'\n', &mut head).await.unwrap_or(0) == 0 {
                            return;
                        }
                    }
                    let line = String::from_utf8_lossy(&head).to_string();
                    let mut parts = line.split_whitespace();
                    assert_eq!(parts.next(), Some("CONNECT"), "{line}");
                    tunnels
                        .lock()
                        .unwrap()
                        .push(parts.next().unwrap().to_string());
                    let mut up = TcpStream::connect(to).await.unwrap();
                    s.get_mut()
                        .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                        .await
                        .unwrap();
                    let _ = tokio::io::copy_bidirectional(s.get_mut(), &mut up).await;
                });
            }
        });
        (addr, tunnels)
    }

    fn ca_file(tag: &str) -> std::path::PathBuf {
        std::env::temp_dir().join(format!("longhaul-h2-{tag}-{}.pem", std::process::id()))
    }

    #[tokio::test]
    async fn h2_sends_a_level_at_once_on_one_connection() {
        let w = generate_page(page_specs().iter().find(|s| s.id == "amazon").unwrap());
        let level1 = w.children(0).len();
        assert!(level1 > 3, "the page needs a wide first level");
        let ca = ca_file("level");
        let (addr, seen) = h2_origin(w.clone(), &ca, 100, level1).await;
        let mut cfg = ReplayConfig::new("https");
        cfg.https = HttpsProtocol::Http2;
        cfg.ca_pem = Some(ca.clone());
        cfg.https_port = addr.port();
        cfg.resolve = w.hosts.iter().map(|h| (h.clone(), addr.ip())).collect();
        cfg.timeout = Duration::from_secs(30);
        let load = load_page(&w, &cfg).await.unwrap();
        let _ = std::fs::remove_file(&ca);
        assert_eq!(load.objects.len(), w.objects.len());
        assert_eq!(load.connections, 1);
        assert_eq!(seen.connections.lock().unwrap().len(), 1);
        assert_eq!(seen.requests.load(Ordering::SeqCst), w.objects.len());
        // Every first-level request was open at the same time (the origin held them until
        // they were): the client did not wait for one to end before sending the next.
        assert!(seen.peak.load(Ordering::SeqCst) >= level1);
        assert!(load.objects.iter().all(|o| o.alpn.as_deref() == Some("h2")));
        assert_eq!(load.objects.iter().filter(|o| o.new_connection).count(), 1);
        for (i, o) in w.objects.iter().enumerate() {
            if let Some(p) = o.parent {
                assert!(load.objects[i].request_ms >= load.objects[p].done_ms);
            }
        }
    }

    #[tokio::test]
    async fn h2_keeps_to_the_servers_stream_limit_with_one_tunnel_per_origin() {
        let w = generate_page(&page_specs()[0]); // yahoo, two hosts
        assert_eq!(w.hosts.len(), 2);
        let ca = ca_file("limit");
        // The origin refuses streams beyond 3 (h2 resets them with REFUSED_STREAM, which
        // fails the load), and holds responses until 3 are open on a connection.
        let (origin, seen) = h2_origin(w.clone(), &ca, 3, 3).await;
        let (proxy, tunnels) = connect_proxy(origin).await;
        let mut cfg = ReplayConfig::new("https");
        cfg.https = HttpsProtocol::Http2;
        cfg.ca_pem = Some(ca.clone());
        cfg.proxy = Some(proxy);
        cfg.timeout = Duration::from_secs(30);
        let load = load_page(&w, &cfg).await.unwrap();
        let _ = std::fs::remove_file(&ca);
        assert_eq!(load.objects.len(), 30);
        assert_eq!(seen.peak.load(Ordering::SeqCst), 3);
        // One tunnel and one TLS connection per origin.
        let mut t = tunnels.lock().unwrap().clone();
        t.sort();
        let mut want: Vec<String> = w.hosts.iter().map(|h| format!("{h}:443")).collect();
        want.sort();
        assert_eq!(t, want);
        let mut c = seen.connections.lock().unwrap().clone();
        c.sort();
        let mut hosts = w.hosts.clone();
        hosts.sort();
        assert_eq!(c, hosts);
        assert_eq!(load.connections, 2);
    }

    #[tokio::test]
    async fn offering_h2_to_an_http1_origin_falls_back_to_six_connections_per_host() {
        let w = generate_page(page_specs().iter().find(|s| s.id == "amazon").unwrap());
        let ca = ca_file("h1");
        let cfg_tls = server_tls(&w.hosts, &ca, &[b"http/1.1"]);
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(cfg_tls));
        let (plain, _) = super::origin_tests_support::serve(w.clone()).await;
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let accepted = Arc::new(AtomicUsize::new(0));
        let a2 = accepted.clone();
        tokio::spawn(async move {
            loop {
                let (s, _) = l.accept().await.unwrap();
                a2.fetch_add(1, Ordering::SeqCst);
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    let Ok(mut tls) = acceptor.accept(s).await else {
                        return;
                    };
                    let mut up = TcpStream::connect(plain).await.unwrap();
                    let _ = tokio::io::copy_bidirectional(&mut tls, &mut up).await;
                });
            }
        });
        let mut cfg = ReplayConfig::new("https");
        cfg.https = HttpsProtocol::Http2;
        cfg.ca_pem = Some(ca.clone());
        cfg.https_port = addr.port();
        cfg.resolve = w.hosts.iter().map(|h| (h.clone(), addr.ip())).collect();
        cfg.timeout = Duration::from_secs(30);
        let load = load_page(&w, &cfg).await.unwrap();
        let _ = std::fs::remove_file(&ca);
        assert_eq!(load.objects.len(), 53);
        assert!(load
            .objects
            .iter()
            .all(|o| o.alpn.as_deref() == Some("http/1.1")));
        assert!(load.connections > 1 && load.connections <= DEFAULT_MAX_PER_HOST);
        assert_eq!(load.connections, accepted.load(Ordering::SeqCst));
    }
}

#[cfg(test)]
mod h3_tests {
    use super::*;
    use crate::origin::{OriginAlpn, Site};
    use crate::workload::{generate_page, page_specs};

    /// The `direct-h3` origin (the real `pageload h3-origin` code) on loopback, serving the site
    /// of `w` as the runner writes it.
    async fn origin(w: &Workload, tag: &str) -> (Site, SocketAddr) {
        let dir = std::env::temp_dir().join(format!("longhaul-h3-{tag}-{}", std::process::id()));
        let site = Site::prepare(&dir, std::slice::from_ref(w), OriginAlpn::H2).unwrap();
        let cfg =
            crate::http3::server_config(&dir.join("origin.pem"), &dir.join("origin.key"), None)
                .unwrap();
        let addrs =
            crate::http3::spawn_server(dir.join("www"), cfg, &["127.0.0.1:0".parse().unwrap()])
                .await
                .unwrap();
        (site, addrs[0])
    }

    fn config(site: &Site, addr: SocketAddr) -> ReplayConfig {
        let mut cfg = ReplayConfig::new("https");
        cfg.https = HttpsProtocol::Http3;
        cfg.ca_pem = Some(site.ca_pem.clone());
        cfg.https_port = addr.port();
        cfg.resolve = site
            .hosts
            .iter()
            .map(|(h, _)| (h.clone(), addr.ip()))
            .collect();
        cfg.timeout = Duration::from_secs(30);
        cfg
    }

    #[tokio::test]
    async fn a_page_loads_over_h3_from_the_origin_one_connection_per_host() {
        let w = generate_page(&page_specs()[0]); // yahoo: two hosts, 30 objects
        let (site, addr) = origin(&w, "page").await;
        let load = load_page(&w, &config(&site, addr)).await.unwrap();
        assert_eq!(load.objects.len(), 30);
        assert_eq!(load.connections, 2);
        assert!(load.objects.iter().all(|o| o.alpn.as_deref() == Some("h3")));
        for (i, o) in w.objects.iter().enumerate() {
            // Whole bodies of the sizes the page model says (load_page checks them too).
            assert_eq!(load.objects[i].bytes, o.size);
            if let Some(p) = o.parent {
                assert!(load.objects[i].request_ms >= load.objects[p].done_ms);
            }
        }
        std::fs::remove_dir_all(&site.dir).unwrap();
    }

    #[tokio::test]
    async fn h3_fails_clearly_on_a_missing_object_and_refuses_a_proxy() {
        let mut w = generate_page(page_specs().iter().find(|s| s.id == "google").unwrap());
        let (site, addr) = origin(&w, "missing").await;
        let mut cfg = config(&site, addr);
        cfg.proxy = Some("127.0.0.1:3128".parse().unwrap());
        let e = format!("{:#}", load_page(&w, &cfg).await.unwrap_err());
        assert!(e.contains("QUIC does not cross"), "{e}");
        cfg.proxy = None;
        w.objects[1].path = "/no/such/file.css".into();
        let e = format!("{:#}", load_page(&w, &cfg).await.unwrap_err());
        assert!(e.contains("status 404"), "{e}");
        std::fs::remove_dir_all(&site.dir).unwrap();
    }
}
