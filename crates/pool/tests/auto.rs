//! `carrier = "auto"` on loopback: QUIC preferred, TCP+TLS when UDP goes dark (a relay drops
//! every datagram), QUIC again once it delivers; an edge against a remote that only listens on
//! TCP (an older release) carries everything over TCP.

mod common;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use pool::quic::QuicOptions;
use pool::select::CarrierKind;
use pool::tls::{gen_keys, GenKeysOptions, TlsClient, TlsFiles, TlsServer};
use pool::{Kind, Pool, PoolConfig, Server, ServerConfig, Upgrader};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio::time::Instant;

fn files(dir: &Path, side: &str) -> TlsFiles {
    TlsFiles {
        cert: dir.join(format!("{side}.pem")),
        key: dir.join(format!("{side}.key")),
        ca: vec![dir.join("ca.pem")],
    }
}

fn keys() -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    gen_keys(d.path(), &GenKeysOptions::default()).unwrap();
    d
}

/// Loopback: RTT 1 ms, so auto's keep-alive is 250 ms and its stall bound 1 s.
fn opts() -> QuicOptions {
    QuicOptions::for_link(Duration::from_millis(1), 100_000_000)
}

fn serve(s: Arc<Server>) {
    tokio::spawn(async move {
        while let Some(inc) = s.accept().await {
            tokio::spawn(async move {
                let (mut r, mut w) = tokio::io::split(inc.stream);
                let _ = tokio::io::copy(&mut r, &mut w).await;
                let _ = w.shutdown().await;
            });
        }
    });
}

fn edge(remote: SocketAddr, dir: &Path) -> Pool {
    let cfg = PoolConfig {
        remote: remote.to_string(),
        connections: 2,
        backoff_min: Duration::from_millis(20),
        backoff_max: Duration::from_millis(200),
        ..PoolConfig::default()
    };
    let tls = Arc::new(TlsClient::new(files(dir, "edge"), "longhaul-remote").unwrap());
    Pool::start_auto(cfg, tls, opts()).unwrap()
}

async fn echo(pool: &Pool, n: u8) -> std::io::Result<()> {
    let data = vec![n; 20_000];
    let s = pool
        .open(Kind::Tunnel, "echo:1", Bytes::from(data.clone()))
        .await
        .map_err(std::io::Error::other)?;
    let (mut r, mut w) = tokio::io::split(s);
    w.shutdown().await?;
    let mut got = Vec::new();
    r.read_to_end(&mut got).await?;
    assert!(got == data, "echo {n}: bytes differ");
    Ok(())
}

async fn wait_carrier(pool: &Pool, c: CarrierKind, within: Duration) -> Duration {
    let t0 = Instant::now();
    while pool.carrier() != c {
        assert!(t0.elapsed() < within, "not on {c} within {within:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    t0.elapsed()
}

/// Relays UDP and TCP from one port number to `to`'s; UDP can be switched off (dropped).
struct Relay {
    addr: SocketAddr,
    udp_on: Arc<AtomicBool>,
}

impl Relay {
    async fn start(to: SocketAddr) -> Relay {
        let tcp = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = tcp.local_addr().unwrap();
        let sock = Arc::new(UdpSocket::bind(addr).await.unwrap());
        tokio::spawn(async move {
            while let Ok((mut c, _)) = tcp.accept().await {
                tokio::spawn(async move {
                    if let Ok(mut u) = TcpStream::connect(to).await {
                        let _ = tokio::io::copy_bidirectional(&mut c, &mut u).await;
                    }
                });
            }
        });
        let udp_on = Arc::new(AtomicBool::new(true));
        common::relay_udp(sock, to, udp_on.clone());
        Relay { addr, udp_on }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_remote_listens_on_tcp_and_udp_with_one_port() {
    let d = keys();
    let tls = Arc::new(TlsServer::new(files(d.path(), "remote")).unwrap());
    let srv = Server::bind_auto(
        "127.0.0.1:0".parse().unwrap(),
        ServerConfig::default(),
        tls,
        opts(),
    )
    .await
    .unwrap();
    let port = srv.local_addr().port();
    // Both sockets are taken: binding either again fails.
    assert!(std::net::TcpListener::bind(("127.0.0.1", port)).is_err());
    assert!(std::net::UdpSocket::bind(("127.0.0.1", port)).is_err());
    srv.shutdown(Duration::ZERO).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_falls_back_to_tcp_when_udp_goes_dark_and_returns_to_quic() {
    let d = keys();
    let tls = Arc::new(TlsServer::new(files(d.path(), "remote")).unwrap());
    let srv = Arc::new(
        Server::bind_auto(
            "127.0.0.1:0".parse().unwrap(),
            ServerConfig::default(),
            tls,
            opts(),
        )
        .await
        .unwrap(),
    );
    serve(srv.clone());
    let relay = Relay::start(srv.local_addr()).await;
    let pool = edge(relay.addr, d.path());
    assert!(pool.ready(Duration::from_secs(5)).await);
    wait_carrier(&pool, CarrierKind::Quic, Duration::from_secs(5)).await;
    echo(&pool, 1).await.unwrap();
    assert!(no_switches(&pool));
    // Both pools' connections, TCP's slots first, QUIC's after them.
    let st = pool.stats();
    let slots: Vec<_> = st.iter().map(|s| s.slot).collect();
    assert_eq!(slots, [Some(0), Some(1), Some(2), Some(3)]);
    assert!(st[..2].iter().all(|s| s.quic.is_none()));
    assert!(st[2..].iter().all(|s| s.quic.is_some()));
    // UDP goes dark; a stream in flight on QUIC ends with a reason, never hangs.
    let inflight = pool
        .open(Kind::Tunnel, "echo:1", Bytes::new())
        .await
        .unwrap();
    relay.udp_on.store(false, Ordering::Relaxed);
    let failover = wait_carrier(&pool, CarrierKind::Tcp, Duration::from_secs(5)).await;
    let (mut r, _w) = tokio::io::split(inflight);
    let mut b = [0u8; 1];
    let e = tokio::time::timeout(Duration::from_secs(2), r.read(&mut b))
        .await
        .expect("the QUIC stream ends when QUIC is abandoned")
        .unwrap_err();
    let se = pool::stream_error(&e).expect("a stream error");
    assert!(se.reason.contains("carrier auto"), "{se}");
    assert!(se.retryable);
    // New streams flow over TCP while UDP stays dark.
    for n in 0..5 {
        echo(&pool, n).await.unwrap();
    }
    assert_eq!(
        pool.carrier_switches(),
        vec![
            (CarrierKind::Quic, CarrierKind::Tcp, 1),
            (CarrierKind::Tcp, CarrierKind::Quic, 0)
        ]
    );
    // UDP back: QUIC again within the first probe (≤ 1 s) + handshake + confirm (1 s).
    relay.udp_on.store(true, Ordering::Relaxed);
    let failback = wait_carrier(&pool, CarrierKind::Quic, Duration::from_secs(6)).await;
    echo(&pool, 9).await.unwrap();
    let sw = pool.carrier_switches();
    assert!(
        sw.contains(&(CarrierKind::Tcp, CarrierKind::Quic, 1)),
        "{sw:?}"
    );
    eprintln!("failover {failover:?}, failback {failback:?}");
    pool.close(Duration::ZERO).await;
    srv.shutdown(Duration::ZERO).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_edge_against_a_tcp_only_remote_uses_tcp() {
    let d = keys();
    let tls = Arc::new(TlsServer::new(files(d.path(), "remote")).unwrap());
    let up: Arc<dyn Upgrader> = tls;
    let srv = Arc::new(
        Server::bind_with("127.0.0.1:0".parse().unwrap(), ServerConfig::default(), up)
            .await
            .unwrap(),
    );
    serve(srv.clone());
    let pool = edge(srv.local_addr(), d.path());
    assert!(pool.ready(Duration::from_secs(5)).await);
    // Streams flow over TCP at once, while QUIC is still being tried.
    echo(&pool, 1).await.unwrap();
    // The QUIC handshake bound (2 s at least) passes: TCP is the choice, not a switch.
    wait_carrier(&pool, CarrierKind::Tcp, Duration::from_secs(1)).await;
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(pool.carrier(), CarrierKind::Tcp);
    assert!(no_switches(&pool));
    echo(&pool, 2).await.unwrap();
    pool.close(Duration::ZERO).await;
}

/// Both directions are counted from the start, at 0 until a switch.
fn no_switches(pool: &Pool) -> bool {
    pool.carrier_switches()
        == vec![
            (CarrierKind::Quic, CarrierKind::Tcp, 0),
            (CarrierKind::Tcp, CarrierKind::Quic, 0),
        ]
}
