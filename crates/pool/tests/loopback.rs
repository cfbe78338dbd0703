//! The pool over real kernel TCP on loopback.

use std::time::Duration;

use bytes::Bytes;
use pool::{stream_error, ErrorCode, Kind, Pool, PoolConfig, Server, ServerConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

async fn echo_server() -> Server {
    let server = Server::bind("127.0.0.1:0".parse().unwrap(), ServerConfig::default())
        .await
        .unwrap();
    server
}

/// An echo server bound with `cfg`, already serving.
async fn serving_echo(cfg: ServerConfig) -> std::sync::Arc<Server> {
    let server = std::sync::Arc::new(
        Server::bind("127.0.0.1:0".parse().unwrap(), cfg)
            .await
            .unwrap(),
    );
    spawn_echo(server.clone());
    server
}

fn spawn_echo(server: std::sync::Arc<Server>) {
    tokio::spawn(async move {
        while let Some(inc) = server.accept().await {
            tokio::spawn(async move {
                let target = inc.target.clone();
                let (mut r, mut w) = tokio::io::split(inc.stream);
                if target == "reset:0" {
                    let mut b = [0u8; 1];
                    let _ = r.read(&mut b).await;
                    let mut s = r.unsplit(w);
                    s.reset(ErrorCode::CONNECT_FAILED);
                    return;
                }
                let _ = tokio::io::copy(&mut r, &mut w).await;
                let _ = w.shutdown().await;
            });
        }
    });
}

fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn pool_cfg(addr: std::net::SocketAddr, n: usize) -> PoolConfig {
    PoolConfig {
        remote: addr.to_string(),
        connections: n,
        backoff_min: Duration::from_millis(20),
        backoff_max: Duration::from_millis(200),
        ..PoolConfig::default()
    }
}

async fn echo_once(pool: &Pool, seed: u64, len: usize) -> std::io::Result<()> {
    let data = pattern(seed, len);
    let first = Bytes::copy_from_slice(&data[..len.min(1000)]);
    let s = pool
        .open(Kind::Tunnel, "echo:7", first)
        .await
        .map_err(|e| std::io::Error::other(e.to_string()))?;
    let (mut r, mut w) = tokio::io::split(s);
    let rest = data[len.min(1000)..].to_vec();
    let writer = async move {
        w.write_all(&rest).await?;
        w.shutdown().await?;
        Ok::<_, std::io::Error>(w)
    };
    let reader = async move {
        let mut got = Vec::new();
        r.read_to_end(&mut got).await?;
        Ok::<_, std::io::Error>((r, got))
    };
    let (w, (r, got)) = tokio::try_join!(writer, reader)?;
    drop(r.unsplit(w));
    assert_eq!(got.len(), data.len(), "stream {seed} length");
    assert!(got == data, "stream {seed} bytes differ");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_concurrent_streams_echo_byte_exact() {
    let server = std::sync::Arc::new(echo_server().await);
    spawn_echo(server.clone());
    let pool = Pool::start(pool_cfg(server.local_addr(), 3));
    assert!(pool.ready(Duration::from_secs(5)).await);
    let mut tasks = Vec::new();
    for i in 0..40u64 {
        let pool = pool.clone();
        let len = [0usize, 1, 999, 1000, 1001, 70_000, 300_000][i as usize % 7];
        tasks.push(tokio::spawn(async move { echo_once(&pool, i, len).await }));
    }
    for t in tasks {
        t.await.unwrap().unwrap();
    }
    // All slots connected, to the same remote session.
    let stats = pool.stats();
    assert_eq!(stats.len(), 3);
    assert!(
        stats.iter().all(|s| s.state == pool::LaneState::Up),
        "{stats:?}"
    );
    // Every connection PINGed at start: its RTT and kernel view are reported.
    for _ in 0..2000 {
        if pool.stats().iter().all(|s| s.rtt.is_some()) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    for s in pool.stats() {
        assert!(s.rtt.is_some(), "{s:?}");
        let info = s.tcp_info.expect("TCP_INFO snapshot");
        assert!(info.snd_mss > 0 && info.snd_cwnd > 0);
        assert_eq!(s.peer, Some(server.local_addr()));
    }
    let sstats = server.stats();
    assert_eq!(sstats.len(), 3);
    assert!(sstats.iter().all(|s| s.session == pool.session_id()));
    pool.close(Duration::from_secs(2)).await;
    server.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remote_reset_reaches_the_edge_with_its_code() {
    let server = std::sync::Arc::new(echo_server().await);
    spawn_echo(server.clone());
    let pool = Pool::start(pool_cfg(server.local_addr(), 2));
    assert!(pool.ready(Duration::from_secs(5)).await);
    let mut s = pool
        .open(Kind::Tunnel, "reset:0", Bytes::from_static(b"x"))
        .await
        .unwrap();
    let mut buf = [0u8; 16];
    let e = s.read(&mut buf).await.unwrap_err();
    let se = stream_error(&e).expect("stream error inside");
    assert_eq!(se.code, ErrorCode::CONNECT_FAILED);
    assert!(!se.retryable);
    assert_eq!(e.kind(), std::io::ErrorKind::ConnectionReset);
    pool.close(Duration::from_millis(100)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_without_connection_is_unavailable_at_once() {
    // A port nobody listens on.
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    drop(l);
    let pool = Pool::start(pool_cfg(addr, 1));
    assert!(!pool.ready(Duration::from_millis(200)).await);
    let e = pool
        .open(Kind::Http, "a:80", Bytes::new())
        .await
        .unwrap_err();
    assert_eq!(e, pool::PoolError::Unavailable);
    let st = pool.stats();
    assert_eq!(st.len(), 1);
    assert!(st[0].reconnects >= 1, "{st:?}");
    pool.close(Duration::from_millis(10)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_shutdown_drains_streams_in_progress_and_refuses_new_ones() {
    let server = std::sync::Arc::new(echo_server().await);
    spawn_echo(server.clone());
    let pool = Pool::start(pool_cfg(server.local_addr(), 2));
    assert!(pool.ready(Duration::from_secs(5)).await);
    let mut s = pool
        .open(Kind::Tunnel, "echo:7", Bytes::from_static(b"before"))
        .await
        .unwrap();
    let mut buf = [0u8; 6];
    s.read_exact(&mut buf).await.unwrap();
    let srv = server.clone();
    let shut = tokio::spawn(async move { srv.shutdown(Duration::from_secs(5)).await });
    // Once the GOAWAY arrived, new streams are refused at once.
    let mut refused = false;
    for _ in 0..2000 {
        match pool.open(Kind::Tunnel, "echo:7", Bytes::new()).await {
            Err(pool::PoolError::Draining) => {
                refused = true;
                break;
            }
            Ok(_) | Err(_) => tokio::time::sleep(Duration::from_millis(5)).await,
        }
    }
    assert!(refused, "opens were not refused during the drain");
    // The stream accepted before the drain still completes.
    s.write_all(b" after").await.unwrap();
    s.shutdown().await.unwrap();
    let mut rest = Vec::new();
    s.read_to_end(&mut rest).await.unwrap();
    assert_eq!(rest, b" after");
    drop(s);
    tokio::time::timeout(Duration::from_secs(5), shut)
        .await
        .unwrap()
        .unwrap();
    assert!(server.accept().await.is_none());
    pool.close(Duration::from_millis(100)).await;
}

/// Counts upgrades and passes the TCP carrier through (stands in for TLS).
struct Counting(std::sync::atomic::AtomicUsize);

impl pool::Upgrader for Counting {
    fn upgrade(&self, tcp: pool::TcpCarrier) -> pool::DialFuture<'_> {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        pool::PlainTcp.upgrade(tcp)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_passes_every_connection_through_its_upgrader() {
    let up = std::sync::Arc::new(Counting(Default::default()));
    let server = std::sync::Arc::new(
        Server::bind_with(
            "127.0.0.1:0".parse().unwrap(),
            ServerConfig::default(),
            up.clone(),
        )
        .await
        .unwrap(),
    );
    spawn_echo(server.clone());
    let pool = Pool::start(pool_cfg(server.local_addr(), 2));
    assert!(pool.ready(Duration::from_secs(5)).await);
    echo_once(&pool, 1, 5000).await.unwrap();
    for _ in 0..2000 {
        if up.0.load(std::sync::atomic::Ordering::SeqCst) == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(up.0.load(std::sync::atomic::Ordering::SeqCst), 2);
    pool.close(Duration::from_millis(100)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_caps_its_connections() {
    let cfg = ServerConfig {
        max_connections: 2,
        ..ServerConfig::default()
    };
    let server = serving_echo(cfg).await;
    let pool = Pool::start(pool_cfg(server.local_addr(), 3));
    assert!(pool.ready(Duration::from_secs(5)).await);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(server.stats().len(), 2);
    let up = pool
        .stats()
        .iter()
        .filter(|s| s.state == pool::LaneState::Up)
        .count();
    assert_eq!(up, 2);
    // The pool still works over the connections it has.
    echo_once(&pool, 3, 10_000).await.unwrap();
    pool.close(Duration::from_millis(100)).await;
}

/// A TCP connection to `to` from loopback address `from` that sends nothing.
async fn silent_from(from: &str, to: std::net::SocketAddr) -> tokio::net::TcpStream {
    let sock = tokio::net::TcpSocket::new_v4().unwrap();
    sock.bind(format!("{from}:0").parse().unwrap()).unwrap();
    sock.connect(to).await.unwrap()
}

/// Whether the server has closed `s` (EOF or reset) within `wait`.
async fn closed_within(s: &mut tokio::net::TcpStream, wait: Duration) -> bool {
    let mut b = [0u8; 1];
    matches!(
        tokio::time::timeout(wait, s.read(&mut b)).await,
        Ok(Ok(0) | Err(_))
    )
}

/// Connections that never send their HELLO hold handshake slots only: they do not count toward
/// `max_connections`, and one source cannot hold more than `max_handshakes_per_source`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_connections_take_neither_the_edges_places_nor_every_handshake_slot() {
    let cfg = ServerConfig {
        max_connections: 2,
        max_handshakes_per_source: 3,
        mux: mux::Config {
            handshake_timeout: Duration::from_secs(30),
            ..mux::Config::default()
        },
        ..ServerConfig::default()
    };
    let server = serving_echo(cfg).await;
    let addr = server.local_addr();
    let mut silent = Vec::new();
    for _ in 0..3 {
        silent.push(silent_from("127.0.0.2", addr).await);
    }
    // The fourth from the same address is closed at once, long before the handshake timeout.
    let mut fourth = silent_from("127.0.0.2", addr).await;
    assert!(closed_within(&mut fourth, Duration::from_secs(5)).await);
    let a = server.admission();
    assert_eq!((a.handshakes_pending, a.refused_per_source), (3, 1));
    // An edge from another address still gets both of its connections.
    let pool = Pool::start(pool_cfg(addr, 2));
    assert!(pool.ready(Duration::from_secs(5)).await);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(server.stats().len(), 2);
    echo_once(&pool, 5, 10_000).await.unwrap();
    // The silent ones are still waiting for their handshake timeout, not closed.
    for s in &mut silent {
        assert!(!closed_within(s, Duration::from_millis(100)).await);
    }
    assert_eq!(server.admission().handshakes_pending, 3);
    assert_eq!(server.admission().refused_connections, 0);
    pool.close(Duration::from_millis(100)).await;
}

#[tokio::test]
async fn a_zero_handshake_limit_is_refused_at_bind() {
    for cfg in [
        ServerConfig {
            max_handshakes: 0,
            ..ServerConfig::default()
        },
        ServerConfig {
            max_handshakes_per_source: 0,
            ..ServerConfig::default()
        },
    ] {
        let e = Server::bind("127.0.0.1:0".parse().unwrap(), cfg)
            .await
            .unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
        assert!(e.to_string().contains("max_handshakes"), "{e}");
    }
}

/// A peer that has read a whole request (FIN received) and now waits on other
/// work learns from its `ResetWatch` when the opener abandons the stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reset_watch_reports_a_reset_after_the_fin() {
    let server = std::sync::Arc::new(echo_server().await);
    let pool = Pool::start(pool_cfg(server.local_addr(), 2));
    assert!(pool.ready(Duration::from_secs(5)).await);
    let mut s = pool
        .open(Kind::Http, "slow:80", Bytes::from_static(b"request"))
        .await
        .unwrap();
    s.shutdown().await.unwrap();
    let inc = tokio::time::timeout(Duration::from_secs(5), server.accept())
        .await
        .unwrap()
        .unwrap();
    let watch = inc.stream.reset_watch();
    let (mut r, _w) = tokio::io::split(inc.stream);
    let mut got = Vec::new();
    r.read_to_end(&mut got).await.unwrap();
    assert_eq!(got, b"request");
    // Whole request read; nothing reset yet.
    let early = tokio::time::timeout(Duration::from_millis(100), watch.wait()).await;
    assert!(early.is_err(), "watch resolved before any reset");
    // The opener goes away without reading the reply: the stream is reset with CANCEL.
    drop(s);
    let code = tokio::time::timeout(Duration::from_secs(5), watch.wait())
        .await
        .expect("the reset reached the watch");
    assert_eq!(code, ErrorCode::CANCEL);
}

/// Both sides place by expected completion (path estimates from `TCP_INFO`): every stream
/// arrives byte-exact, as with the default policy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expected_completion_places_streams_byte_exact() {
    let server = serving_echo(ServerConfig {
        policy: pool::Policy::ExpectedCompletion,
        ..ServerConfig::default()
    })
    .await;
    let pool = Pool::start(PoolConfig {
        policy: pool::Policy::ExpectedCompletion,
        ..pool_cfg(server.local_addr(), 3)
    });
    assert!(pool.ready(Duration::from_secs(5)).await);
    let mut tasks = Vec::new();
    for i in 0..30u64 {
        let pool = pool.clone();
        let len = [1usize, 1000, 70_000, 300_000, 1_000_000][i as usize % 5];
        tasks.push(tokio::spawn(async move { echo_once(&pool, i, len).await }));
    }
    for t in tasks {
        t.await.unwrap().unwrap();
    }
    pool.close(Duration::from_secs(2)).await;
    server.shutdown(Duration::from_secs(1)).await;
}
