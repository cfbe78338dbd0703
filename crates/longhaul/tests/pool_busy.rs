//! Edge and remote in one process over a real pool on loopback, against a remote whose
//! `max_streams` is 2: a request that arrives while both stream slots are held waits for one
//! and is answered once a slot frees; if none frees within the pool's `open_wait`, the client
//! gets 503 `pool-busy` with the reason, and the access log and the errors metric name the
//! cause.

use std::io::Write;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use bytes::BytesMut;
use edge_proxy::client::{ConnectReply, Settings};
use edge_proxy::server::{self, Interception, Listeners};
use http1::{BodyDecoder, ResponseHead};
use pool::{Pool, PoolConfig, Server, ServerConfig};
use remote_proxy::handler::{self, Ctx};
use remote_proxy::policy::TargetPolicy;
use tokio::io::{AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

/// Log lines of this test binary (tracing's global subscriber writes here).
static LOG: OnceLock<Arc<Mutex<Vec<u8>>>> = OnceLock::new();

#[derive(Clone)]
struct LogWriter(Arc<Mutex<Vec<u8>>>);

impl Write for LogWriter {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn capture_logs() {
    LOG.get_or_init(|| {
        let buf = Arc::new(Mutex::new(Vec::new()));
        let w = LogWriter(buf.clone());
        tracing_subscriber::fmt()
            .with_writer(move || w.clone())
            .with_ansi(false)
            .with_max_level(tracing::Level::INFO)
            .init();
        buf
    });
}

fn log_lines() -> Vec<String> {
    let buf = LOG.get().expect("logs captured").lock().unwrap();
    String::from_utf8_lossy(&buf)
        .lines()
        .map(str::to_owned)
        .collect()
}

/// An origin: `/hold/N` answers once the test adds a permit to `release[N]`; `/ok` at once.
async fn origin(release: Arc<[Semaphore; 2]>) -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (mut s, _) = l.accept().await.unwrap();
            let release = release.clone();
            tokio::spawn(async move {
                let mut buf = BytesMut::new();
                while let Ok(Some(head)) = http1::read_request_head(&mut s, &mut buf, 65536).await {
                    if let Some(n) = head.target.strip_prefix("/hold/") {
                        let n: usize = n.parse().unwrap();
                        release[n].acquire().await.unwrap().forget();
                    }
                    if s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                        .await
                        .is_err()
                    {
                        return;
                    }
                }
            });
        }
    });
    addr
}

struct Setup {
    edge: SocketAddr,
    origin: SocketAddr,
    pool: Pool,
    release: Arc<[Semaphore; 2]>,
}

/// Remote (pool server with `max_streams` = 2, the real handler) and edge (a real pool with
/// `open_wait`, the real client handling).
async fn setup(open_wait: Duration) -> Setup {
    capture_logs();
    let release = Arc::new([Semaphore::new(0), Semaphore::new(0)]);
    let origin = origin(release.clone()).await;
    let server = Server::bind(
        "127.0.0.1:0".parse().unwrap(),
        ServerConfig {
            mux: mux::Config {
                max_streams: 2,
                ..mux::Config::default()
            },
            ..ServerConfig::default()
        },
    )
    .await
    .unwrap();
    let remote = server.local_addr();
    let ctx = Arc::new(Ctx::new(
        TargetPolicy {
            allow_private: true,
            ..TargetPolicy::default()
        },
        handler::Settings {
            connect_timeout: Duration::from_secs(2),
            origin_timeout: Duration::from_secs(30),
            origin_idle_timeout: Duration::from_secs(30),
            origin_max_idle_per_host: 8,
            max_header_bytes: http1::DEFAULT_MAX_HEADER_BYTES,
        },
    ));
    tokio::spawn(remote_proxy::pool_glue::run(
        server,
        ctx,
        std::future::pending(),
        Duration::from_secs(1),
    ));
    let pool = Pool::start(PoolConfig {
        remote: remote.to_string(),
        connections: 2,
        open_wait,
        ..PoolConfig::default()
    });
    assert!(pool.ready(Duration::from_secs(5)).await);
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
        pool.clone(),
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
    Setup {
        edge,
        origin,
        pool,
        release,
    }
}

/// Sends `GET http://origin/path` on a new client connection.
async fn send(s: &Setup, path: &str) -> BufReader<TcpStream> {
    let mut c = TcpStream::connect(s.edge).await.unwrap();
    let o = s.origin;
    c.write_all(format!("GET http://{o}{path} HTTP/1.1\r\nHost: {o}\r\n\r\n").as_bytes())
        .await
        .unwrap();
    BufReader::new(c)
}

async fn response(c: &mut BufReader<TcpStream>) -> (ResponseHead, String) {
    let mut buf = BytesMut::new();
    let head = http1::read_response_head(c, &mut buf, 65536).await.unwrap();
    let kind = http1::response_body_kind("GET", &head).unwrap();
    let mut dec = BodyDecoder::new(kind);
    let mut body = Vec::new();
    while let Some(p) = dec.next(c, &mut buf).await.unwrap() {
        body.extend_from_slice(&p);
    }
    (head, String::from_utf8(body).unwrap())
}

/// Two held requests (`/hold/0`, `/hold/1`) take both stream slots of the pool.
async fn hold_both_slots(s: &Setup) -> (BufReader<TcpStream>, BufReader<TcpStream>) {
    let a = send(s, "/hold/0").await;
    let b = send(s, "/hold/1").await;
    for _ in 0..1000 {
        if s.pool.load().streams == 2 {
            return (a, b);
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("the two held requests did not open their streams");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_over_the_stream_limit_waits_for_a_slot() {
    let s = setup(Duration::from_secs(20)).await;
    let (mut a, mut b) = hold_both_slots(&s).await;
    let mut c = send(&s, "/ok").await;
    let t = Instant::now();
    let waiting = tokio::spawn(async move { response(&mut c).await });
    for _ in 0..1000 {
        if s.pool.open_waiting() == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(
        s.pool.open_waiting(),
        1,
        "the third request waits for a slot"
    );
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!waiting.is_finished());
    // One held request completes: its slot goes to the waiting request.
    s.release[0].add_permits(1);
    let (h, body) = response(&mut a).await;
    assert_eq!((h.status, body.as_str()), (200, "ok"));
    let (h, body) = waiting.await.unwrap();
    assert_eq!((h.status, body.as_str()), (200, "ok"));
    assert!(t.elapsed() < Duration::from_secs(20));
    s.release[1].add_permits(1);
    let (h, _) = response(&mut b).await;
    assert_eq!(h.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_over_the_stream_limit_gets_503_when_the_wait_ends() {
    let wait = Duration::from_millis(300);
    let s = setup(wait).await;
    let (mut a, mut b) = hold_both_slots(&s).await;
    let t = Instant::now();
    let mut c = send(&s, "/ok?busy").await;
    let (h, body) = response(&mut c).await;
    assert!(t.elapsed() >= wait);
    assert_eq!(h.status, 503);
    assert_eq!(
        http1::header_str(&h.headers, "x-longhaul-error"),
        Some("pool-busy")
    );
    assert!(
        body.starts_with("503 Service Unavailable: pool busy: every pool connection is at its stream limit; no stream slot freed within "),
        "{body}"
    );
    // The access-log line names the cause and how long the request waited.
    let line = log_lines()
        .into_iter()
        .find(|l| l.contains("access") && l.contains("/ok?busy"))
        .expect("an access-log line for the refused request");
    assert!(line.contains("status=503"), "{line}");
    assert!(line.contains("pool-busy"), "{line}");
    assert!(line.contains("stream limit"), "{line}");
    assert!(line.contains(" ms"), "{line}");
    let metrics = app::metrics::global().render().await;
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("longhaul_errors_total{cause=\"pool-busy\"}")),
        "{metrics}"
    );
    // The held requests are unaffected.
    s.release[0].add_permits(1);
    s.release[1].add_permits(1);
    assert_eq!(response(&mut a).await.0.status, 200);
    assert_eq!(response(&mut b).await.0.status, 200);
}
