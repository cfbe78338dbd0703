//! Losing a pool connection over real loopback TCP: exactly the streams bound
//! to it are reset (retryable when no reply byte arrived), the others carry
//! on, and the pool re-dials.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use pool::{
    stream_error, ErrorCode, Kind, LaneState, Policy, Pool, PoolConfig, Server, ServerConfig,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::AbortHandle;

/// Connection ids a stream's two directions are bound to.
type Bound = (Option<u64>, Option<u64>);

/// A TCP forwarder whose connections can be cut one by one.
struct Cutter {
    addr: SocketAddr,
    conns: Arc<Mutex<HashMap<SocketAddr, AbortHandle>>>,
}

impl Cutter {
    async fn start(to: SocketAddr) -> Cutter {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let conns: Arc<Mutex<HashMap<SocketAddr, AbortHandle>>> = Default::default();
        let map = conns.clone();
        tokio::spawn(async move {
            loop {
                let (mut a, peer) = l.accept().await.unwrap();
                let t = tokio::spawn(async move {
                    let mut b = TcpStream::connect(to).await.unwrap();
                    let _ = tokio::io::copy_bidirectional(&mut a, &mut b).await;
                });
                map.lock().unwrap().insert(peer, t.abort_handle());
            }
        });
        Cutter { addr, conns }
    }

    /// Cuts the connection whose edge end is `local` (both sockets close).
    fn cut(&self, local: SocketAddr) {
        self.conns
            .lock()
            .unwrap()
            .remove(&local)
            .expect("known connection")
            .abort();
    }
}

/// `hold:N` writes N bytes at once, `silent` writes nothing until the request
/// ends; both then echo the request and finish.
fn spawn_server(server: Arc<Server>) {
    tokio::spawn(async move {
        while let Some(inc) = server.accept().await {
            tokio::spawn(async move {
                let (mut r, mut w) = tokio::io::split(inc.stream);
                if let Some(n) = inc.target.strip_prefix("hold:") {
                    let n: usize = n.parse().unwrap();
                    if w.write_all(&vec![b'h'; n]).await.is_err() {
                        return;
                    }
                }
                let mut req = Vec::new();
                if r.read_to_end(&mut req).await.is_err() {
                    return;
                }
                if w.write_all(&req).await.is_ok() {
                    let _ = w.shutdown().await;
                }
            });
        }
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_connection_resets_its_streams_and_is_redialed() {
    let server = Arc::new(
        Server::bind("127.0.0.1:0".parse().unwrap(), ServerConfig::default())
            .await
            .unwrap(),
    );
    spawn_server(server.clone());
    let cutter = Cutter::start(server.local_addr()).await;
    let pool = Pool::start(PoolConfig {
        remote: cutter.addr.to_string(),
        connections: 2,
        policy: Policy::RoundRobin,
        backoff_min: Duration::from_millis(20),
        backoff_max: Duration::from_millis(100),
        ..PoolConfig::default()
    });
    assert!(pool.ready(Duration::from_secs(5)).await);
    // Wait for both slots.
    for _ in 0..2000 {
        if pool.stats().iter().all(|s| s.state == LaneState::Up) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let mut streams = Vec::new();
    for k in 0..8 {
        let target = if k % 3 == 2 {
            "silent".to_string()
        } else {
            "hold:1000".to_string()
        };
        let s = pool
            .open(Kind::Tunnel, &target, Bytes::from_static(b"req"))
            .await
            .unwrap();
        streams.push((target, s));
    }
    // Let the held replies arrive.
    for (t, s) in &mut streams {
        if t.starts_with("hold") {
            let mut buf = vec![0u8; 1000];
            s.read_exact(&mut buf).await.unwrap();
        }
    }
    let stats = pool.stats();
    let victim = stats[0].id.unwrap();
    let before: Vec<(Bound, u64)> = streams
        .iter()
        .map(|(_, s)| (s.connections(), s.bytes_received()))
        .collect();
    let bound = |c: Bound| c.0 == Some(victim) || c.1 == Some(victim);
    assert!(before.iter().any(|(c, _)| bound(*c)));
    assert!(before.iter().any(|(c, _)| !bound(*c)), "{before:?}");
    cutter.cut(stats[0].local.unwrap());

    let (mut lost, mut retryable) = (0, 0);
    for (i, (target, mut s)) in streams.into_iter().enumerate() {
        let (conns, received) = before[i];
        if bound(conns) {
            let mut buf = [0u8; 64];
            let e = loop {
                match s.read(&mut buf).await {
                    Ok(0) => panic!("stream {i} ended cleanly on a lost connection"),
                    Ok(_) => continue,
                    Err(e) => break e,
                }
            };
            let se = stream_error(&e).expect("StreamError inside");
            assert_eq!(se.code, ErrorCode::CONNECTION_LOST, "stream {i}");
            assert_eq!(se.retryable, received == 0, "stream {i}: {se}");
            lost += 1;
            retryable += usize::from(se.retryable);
        } else {
            s.write_all(b"-more").await.unwrap();
            s.shutdown().await.unwrap();
            let mut rest = Vec::new();
            s.read_to_end(&mut rest).await.unwrap();
            assert_eq!(rest, b"req-more", "stream {i} ({target})");
        }
    }
    assert!(
        lost >= 1 && retryable >= 1,
        "lost {lost}, retryable {retryable}"
    );

    // The slot re-dials and the pool is whole again.
    let mut whole = false;
    for _ in 0..1000 {
        let st = pool.stats();
        if st.iter().all(|s| s.state == LaneState::Up) && st[0].reconnects >= 1 {
            whole = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(whole, "{:?}", pool.stats());
    let mut s = pool
        .open(Kind::Tunnel, "silent", Bytes::from_static(b"again"))
        .await
        .unwrap();
    s.shutdown().await.unwrap();
    let mut back = Vec::new();
    s.read_to_end(&mut back).await.unwrap();
    assert_eq!(back, b"again");
    pool.close(Duration::from_millis(500)).await;
    server.shutdown(Duration::from_millis(500)).await;
}
