//! The pool over QUIC on loopback: byte-exact concurrent streams, reset codes
//! both ways, mutual TLS refusal, connection loss (retryable resets and
//! re-dial) and a black-holed path detected by the idle timeout.

mod common;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use pool::quic::{Congestion, QuicOptions};
use pool::tls::{gen_keys, GenKeysOptions, TlsClient, TlsFiles, TlsServer};
use pool::{
    stream_error, ErrorCode, Kind, LaneState, Pool, PoolConfig, PoolError, Server, ServerConfig,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UdpSocket;

fn files(dir: &Path, side: &str, ca: &Path) -> TlsFiles {
    TlsFiles {
        cert: dir.join(format!("{side}.pem")),
        key: dir.join(format!("{side}.key")),
        ca: vec![ca.join("ca.pem")],
    }
}

fn keys() -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    gen_keys(d.path(), &GenKeysOptions::default()).unwrap();
    d
}

fn opts() -> QuicOptions {
    QuicOptions {
        keep_alive: Duration::from_millis(200),
        idle_timeout: Duration::from_millis(1000),
        ..QuicOptions::default()
    }
}

/// An echo server: "reset:N" targets are reset with code N, others echo.
async fn server(dir: &Path) -> Arc<Server> {
    let tls = Arc::new(TlsServer::new(files(dir, "remote", dir)).unwrap());
    let s = Server::bind_quic(
        "127.0.0.1:0".parse().unwrap(),
        ServerConfig::default(),
        tls,
        opts(),
    )
    .await
    .unwrap();
    let s = Arc::new(s);
    let srv = s.clone();
    tokio::spawn(async move {
        while let Some(inc) = srv.accept().await {
            tokio::spawn(async move {
                if let Some(code) = inc.target.strip_prefix("reset:") {
                    let mut st = inc.stream;
                    st.reset(ErrorCode(code.parse().unwrap()));
                    return;
                }
                let (mut r, mut w) = tokio::io::split(inc.stream);
                let _ = tokio::io::copy(&mut r, &mut w).await;
                let _ = w.shutdown().await;
            });
        }
    });
    s
}

fn pool(remote: SocketAddr, n: usize, dir: &Path, ca: &Path) -> Pool {
    pool_with(remote, n, dir, ca, pool::Policy::default())
}

fn pool_with(remote: SocketAddr, n: usize, dir: &Path, ca: &Path, policy: pool::Policy) -> Pool {
    let cfg = PoolConfig {
        remote: remote.to_string(),
        connections: n,
        policy,
        backoff_min: Duration::from_millis(20),
        backoff_max: Duration::from_millis(200),
        ..PoolConfig::default()
    };
    let tls = Arc::new(TlsClient::new(files(dir, "edge", ca), "longhaul-remote").unwrap());
    Pool::start_quic(cfg, tls, opts()).unwrap()
}

/// Waits until every slot of the pool has its connection up (so that streams can spread).
async fn all_up(pool: &Pool) {
    tokio::time::timeout(Duration::from_secs(5), async {
        while pool.stats().iter().any(|s| s.state != LaneState::Up) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .unwrap();
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

async fn echo(pool: &Pool, seed: u64, len: usize) -> std::io::Result<()> {
    let data = pattern(seed, len);
    let first = Bytes::copy_from_slice(&data[..len.min(1000)]);
    let s = pool
        .open(Kind::Tunnel, "echo:1", first.clone())
        .await
        .map_err(std::io::Error::other)?;
    let (mut r, mut w) = tokio::io::split(s);
    let rest = data[first.len()..].to_vec();
    let writer = tokio::spawn(async move {
        w.write_all(&rest).await?;
        w.shutdown().await
    });
    let mut got = Vec::new();
    r.read_to_end(&mut got).await?;
    writer.await.unwrap()?;
    assert_eq!(got.len(), data.len(), "stream {seed}: length");
    assert!(got == data, "stream {seed}: bytes differ");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_concurrent_streams_echo_byte_exact_over_quic() {
    let d = keys();
    let server = server(d.path()).await;
    let pool = pool(server.local_addr(), 3, d.path(), d.path());
    assert!(pool.is_quic());
    assert!(pool.ready(Duration::from_secs(5)).await);
    // Let every slot come up so streams spread.
    all_up(&pool).await;
    let mut tasks = Vec::new();
    for i in 0..40u64 {
        let p = pool.clone();
        let len = [0usize, 1, 999, 70_000, 1_500_000][i as usize % 5];
        tasks.push(tokio::spawn(async move { echo(&p, i, len).await }));
    }
    for t in tasks {
        t.await.unwrap().unwrap();
    }
    let stats = pool.stats();
    assert_eq!(stats.len(), 3);
    for s in &stats {
        let q = s.quic.expect("QUIC statistics");
        assert!(q.cwnd > 0 && q.sent_packets > 0, "{s:?}");
        assert!(s.peer == Some(server.local_addr()));
    }
    // Least-outstanding spread the streams: every connection carried data.
    let sstats = server.stats();
    assert_eq!(sstats.len(), 3);
    assert!(sstats.iter().all(|s| s.session == pool.session_id()));
    assert!(
        sstats.iter().all(|s| s.quic.unwrap().sent_packets > 20),
        "{sstats:?}"
    );
    pool.close(Duration::from_secs(2)).await;
    server.shutdown(Duration::from_secs(1)).await;
}

/// Expected completion over QUIC (cwnd ÷ RTT from quinn's path statistics): every stream
/// arrives byte-exact and every connection carries some (an idle one's rate is a lower bound,
/// raised to its peers').
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expected_completion_spreads_streams_over_quic() {
    let d = keys();
    let server = server(d.path()).await;
    let pool = pool_with(
        server.local_addr(),
        3,
        d.path(),
        d.path(),
        pool::Policy::ExpectedCompletion,
    );
    assert!(pool.ready(Duration::from_secs(5)).await);
    all_up(&pool).await;
    let mut tasks = Vec::new();
    for i in 0..40u64 {
        let p = pool.clone();
        let len = [0usize, 1, 999, 70_000, 1_500_000][i as usize % 5];
        tasks.push(tokio::spawn(async move { echo(&p, i, len).await }));
    }
    for t in tasks {
        t.await.unwrap().unwrap();
    }
    let sstats = server.stats();
    assert_eq!(sstats.len(), 3);
    assert!(
        sstats.iter().all(|s| s.quic.unwrap().sent_packets > 20),
        "{sstats:?}"
    );
    pool.close(Duration::from_secs(2)).await;
    server.shutdown(Duration::from_secs(1)).await;
}

/// Streams open on each connection of the pool, in slot order.
fn streams_per_connection(pool: &Pool) -> Vec<u32> {
    pool.stats().iter().map(|s| s.streams).collect()
}

/// Opens an echo stream and leaves it open.
async fn open_echo(pool: &Pool) -> pool::MuxStream {
    pool.open(Kind::Tunnel, "echo:1", Bytes::from_static(b"x"))
        .await
        .unwrap()
}

/// Sends `data` on a stream opened by [`open_echo`] and not used since, and checks that it
/// comes back after the open's own first byte.
async fn echo_on(s: &mut pool::MuxStream, data: &[u8]) {
    let (mut r, mut w) = tokio::io::split(s);
    let both = async {
        tokio::join!(
            async {
                w.write_all(data).await.unwrap();
                w.flush().await.unwrap();
            },
            async {
                let mut got = vec![0u8; data.len() + 1];
                r.read_exact(&mut got).await.unwrap();
                got
            }
        )
    };
    let ((), got) = tokio::time::timeout(Duration::from_secs(30), both)
        .await
        .expect("the echo came back within 30 s");
    assert_eq!(got[0], b'x');
    assert!(got[1..] == data[..], "the echoed bytes differ");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pack_keeps_a_page_on_one_quic_connection_and_a_transfer_on_its_own() {
    let d = keys();
    let server = server(d.path()).await;
    let cfg = PoolConfig {
        remote: server.local_addr().to_string(),
        connections: 3,
        // The QUIC options' policy wins over the pool configuration's (under `auto` that
        // one places the TCP fallback's streams).
        policy: pool::Policy::RoundRobin,
        ..PoolConfig::default()
    };
    let tls =
        Arc::new(TlsClient::new(files(d.path(), "edge", d.path()), "longhaul-remote").unwrap());
    let quic = QuicOptions {
        policy: Some(pool::Policy::Pack),
        ..opts()
    };
    let pool = Pool::start_quic(cfg, tls, quic).unwrap();
    all_up(&pool).await;
    // A page: every stream on the first connection.
    let mut page = Vec::new();
    for _ in 0..8 {
        page.push(open_echo(&pool).await);
    }
    assert_eq!(streams_per_connection(&pool), [8, 0, 0]);
    // A page's object (200 kB each way, short of 256 KiB) does not count as a transfer.
    let mut object = page.pop().unwrap();
    echo_on(&mut object, &pattern(3, 200_000)).await;
    page.push(open_echo(&pool).await);
    assert_eq!(streams_per_connection(&pool), [9, 0, 0]);
    page.push(object);
    // One of them carries a transfer (300 kB each way: past the 256 KiB at which its
    // connection counts as carrying one, short of the 1 MiB at which it turns bulk), and
    // stays open.
    let mut transfer = page.remove(0);
    echo_on(&mut transfer, &pattern(7, 300_000)).await;
    // The next page's streams go to the next connection, which carries no transfer.
    let mut next = Vec::new();
    for _ in 0..3 {
        next.push(open_echo(&pool).await);
    }
    assert_eq!(streams_per_connection(&pool), [9, 3, 0]);
    // The transfer ends: the first connection takes new streams again.
    drop(transfer);
    tokio::time::timeout(Duration::from_secs(5), async {
        while streams_per_connection(&pool)[0] != 8 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .unwrap();
    let _again = open_echo(&pool).await;
    assert_eq!(streams_per_connection(&pool), [9, 3, 0]);
    drop((page, next, _again));
    pool.close(Duration::from_secs(2)).await;
    server.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reset_codes_travel_both_ways_over_quic() {
    let d = keys();
    let server = server(d.path()).await;
    let pool = pool(server.local_addr(), 1, d.path(), d.path());
    assert!(pool.ready(Duration::from_secs(5)).await);
    let mut s = pool
        .open(Kind::Tunnel, "reset:7", Bytes::from_static(b"x"))
        .await
        .unwrap();
    let mut buf = [0u8; 16];
    let e = s.read(&mut buf).await.unwrap_err();
    let se = stream_error(&e).expect("stream error inside");
    assert_eq!(se.code, ErrorCode::CONNECT_FAILED);
    assert!(!se.retryable);
    assert_eq!(e.kind(), std::io::ErrorKind::ConnectionReset);

    let mut s = pool
        .open(Kind::Tunnel, "reset:4", Bytes::from_static(b"x"))
        .await
        .unwrap();
    let e = s.read(&mut buf).await.unwrap_err();
    let se = stream_error(&e).unwrap();
    assert_eq!(se.code, ErrorCode::REFUSED_STREAM);
    assert!(se.retryable);

    // Edge-side reset reaches the remote as a read error with the code.
    let d2 = keys();
    let tls = Arc::new(TlsServer::new(files(d2.path(), "remote", d2.path())).unwrap());
    let srv = Server::bind_quic(
        "127.0.0.1:0".parse().unwrap(),
        ServerConfig::default(),
        tls,
        opts(),
    )
    .await
    .unwrap();
    let p2 = pool_for(&srv, d2.path());
    assert!(p2.ready(Duration::from_secs(5)).await);
    let mut s = p2
        .open(Kind::Http, "origin:80", Bytes::from_static(b"GET"))
        .await
        .unwrap();
    let mut inc = srv.accept().await.unwrap();
    assert_eq!(inc.target, "origin:80");
    assert_eq!(inc.kind, Kind::Http);
    assert_eq!(inc.id, s.id());
    let mut got = [0u8; 3];
    inc.stream.read_exact(&mut got).await.unwrap();
    assert_eq!(&got, b"GET");
    s.reset(ErrorCode::TIMEOUT);
    let e = inc.stream.read(&mut buf).await.unwrap_err();
    assert_eq!(stream_error(&e).unwrap().code, ErrorCode::TIMEOUT);
    p2.close(Duration::ZERO).await;
    pool.close(Duration::ZERO).await;
}

fn pool_for(srv: &Server, dir: &Path) -> Pool {
    pool(srv.local_addr(), 1, dir, dir)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn edge_key_from_another_ca_is_refused_over_quic() {
    let good = keys();
    let other = keys();
    let server = server(good.path()).await;
    // The edge trusts the right CA but presents a certificate of another deployment.
    let p = pool(server.local_addr(), 1, other.path(), good.path());
    assert!(!p.ready(Duration::from_millis(800)).await);
    assert_eq!(
        p.open(Kind::Http, "a:80", Bytes::new()).await.unwrap_err(),
        PoolError::Unavailable
    );
    assert!(server.stats().is_empty());
    assert!(p.stats()[0].reconnects >= 1);
    p.close(Duration::ZERO).await;
}

/// A UDP relay between the edge and the server that can stop forwarding
/// (black hole) or be restarted.
struct Relay {
    addr: SocketAddr,
    forward: Arc<AtomicBool>,
}

impl Relay {
    async fn start(to: SocketAddr) -> Relay {
        let sock = Arc::new(UdpSocket::bind("127.0.0.1:0").await.unwrap());
        let addr = sock.local_addr().unwrap();
        let forward = Arc::new(AtomicBool::new(true));
        common::relay_udp(sock, to, forward.clone());
        Relay { addr, forward }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn black_holed_connection_is_detected_within_the_idle_timeout_and_replaced() {
    let d = keys();
    let server = server(d.path()).await;
    let relay = Relay::start(server.local_addr()).await;
    let pool = pool(relay.addr, 1, d.path(), d.path());
    assert!(pool.ready(Duration::from_secs(5)).await);
    echo(&pool, 1, 10_000).await.unwrap();
    // A stream waiting for a reply when the path goes dark.
    let mut s = pool
        .open(Kind::Tunnel, "echo:1", Bytes::new())
        .await
        .unwrap();
    relay.forward.store(false, Ordering::Relaxed);
    let t0 = tokio::time::Instant::now();
    let mut buf = [0u8; 8];
    let e = s.read(&mut buf).await.unwrap_err();
    let waited = t0.elapsed();
    let se = stream_error(&e).unwrap();
    assert_eq!(se.code, ErrorCode::CONNECTION_LOST);
    assert!(se.retryable, "nothing of the reply arrived");
    // Idle timeout 1 s (plus scheduling slack on a loaded machine).
    assert!(waited < Duration::from_secs(3), "{waited:?}");
    // The path heals: the slot re-dials and carries streams again.
    relay.forward.store(true, Ordering::Relaxed);
    tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            if pool.stats()[0].state == LaneState::Up && echo(&pool, 2, 5000).await.is_ok() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("re-dialled after the black hole");
    assert!(pool.stats()[0].reconnects >= 1);
    pool.close(Duration::ZERO).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_loss_resets_streams_retryably_and_the_pool_reconnects() {
    let d = keys();
    let srv = server(d.path()).await;
    let addr = srv.local_addr();
    let pool = pool(addr, 2, d.path(), d.path());
    assert!(pool.ready(Duration::from_secs(5)).await);
    let mut s = pool
        .open(Kind::Tunnel, "echo:1", Bytes::from_static(b"ping"))
        .await
        .unwrap();
    let mut got = [0u8; 4];
    s.read_exact(&mut got).await.unwrap();
    let mut waiting = pool
        .open(Kind::Tunnel, "echo:1", Bytes::new())
        .await
        .unwrap();
    // The remote goes away without waiting for its streams.
    srv.shutdown(Duration::ZERO).await;
    drop(srv);
    let mut b = [0u8; 4];
    let e = s.read(&mut b).await.unwrap_err();
    let se = stream_error(&e).unwrap();
    assert_eq!(se.code, ErrorCode::CONNECTION_LOST);
    assert!(!se.retryable, "part of the reply was delivered");
    let e = waiting.read(&mut b).await.unwrap_err();
    assert!(stream_error(&e).unwrap().retryable);
    // A new remote on the same port: the pool comes back by itself.
    let tls = Arc::new(TlsServer::new(files(d.path(), "remote", d.path())).unwrap());
    let srv2 = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            match Server::bind_quic(addr, ServerConfig::default(), tls.clone(), opts()).await {
                Ok(s) => return Arc::new(s),
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    })
    .await
    .expect("port free again");
    let s2 = srv2.clone();
    tokio::spawn(async move {
        while let Some(inc) = s2.accept().await {
            let (mut r, mut w) = tokio::io::split(inc.stream);
            tokio::spawn(async move {
                let _ = tokio::io::copy(&mut r, &mut w).await;
                let _ = w.shutdown().await;
            });
        }
    });
    tokio::time::timeout(Duration::from_secs(5), async {
        while echo(&pool, 9, 3000).await.is_err() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("pool reconnected");
    pool.close(Duration::ZERO).await;
}

#[test]
fn options_are_validated_and_windows_follow_the_link() {
    let o = QuicOptions::for_link(Duration::from_millis(300), 200_000_000);
    // BDP = 7.5 MB: send window the stream window (16 MiB, below) + 2 × BDP; the receive
    // window is the mux connection window.
    assert_eq!(o.receive_window, 256 * 1024 * 1024);
    assert_eq!(o.send_window, 16 * 1024 * 1024 + 15_000_000);
    assert!(o.stream_receive_window <= o.receive_window);
    assert!(o.validate().is_ok());
    // The stream window (at most) is 16 MiB (4 × BDP = 30 MB, clamped): a QUIC connection
    // keeps its 1024 streams, its buffered bytes being bounded by the connection windows, and
    // so does the TCP pool's session (4096) with its connection credit; only with a peer
    // without it does the TCP session take 64.
    let m = mux::Config::for_link(Duration::from_millis(300), 200_000_000);
    assert_eq!(m.stream_window, mux::config::MAX_STREAM_WINDOW);
    assert_eq!(o.stream_receive_window, u64::from(m.stream_window));
    assert_eq!(m.max_streams, 4096);
    assert_eq!(m.legacy_max_streams(), 64);
    assert_eq!(o.max_streams, 1024);
    let bad = QuicOptions {
        keep_alive: Duration::from_secs(40),
        ..QuicOptions::default()
    };
    assert!(bad.validate().unwrap_err().contains("keep_alive"));
    assert_eq!("cubic".parse::<Congestion>(), Ok(Congestion::Cubic));
    assert!("vegas".parse::<Congestion>().is_err());
}
