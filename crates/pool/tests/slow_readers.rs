//! Readers that stop do not stall the other streams of their pool connection, over both
//! carriers at their default windows: replies to a few clients that read nothing fill those
//! streams' windows (over TCP their initial 256 KiB, which never grows for a reader that
//! does not read; over QUIC quinn's fixed 6.5 MB at the default link), and a request on another stream of the
//! same connection is still answered. Only once a connection's window (256 MiB) is held unread
//! would every stream on it wait.

mod common;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use pool::quic::QuicOptions;
use pool::tls::{gen_keys, GenKeysOptions, TlsClient, TlsServer};
use pool::{Kind, MuxStream, Pool, PoolConfig, Server, ServerConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Streams whose reader stops.
const STALLED: usize = 5;

/// `big:1` streams get three stream windows of bytes (more than they can take unread);
/// every other stream is echoed.
fn spawn_server(server: Arc<Server>, big: usize) {
    tokio::spawn(async move {
        while let Some(inc) = server.accept().await {
            tokio::spawn(async move {
                if inc.target != "big:1" {
                    return common::echo(inc.stream).await;
                }
                let chunk = vec![7u8; 64 * 1024];
                let mut s = inc.stream;
                let mut sent = 0;
                while sent < big {
                    if s.write_all(&chunk).await.is_err() {
                        return;
                    }
                    sent += chunk.len();
                }
                let _ = s.shutdown().await;
            });
        }
    });
}

async fn open(pool: &Pool, target: &str, first: &[u8]) -> MuxStream {
    pool.open(Kind::Tunnel, target, Bytes::copy_from_slice(first))
        .await
        .expect("open")
}

/// Opens `STALLED` streams that are sent more than their window and never read, then checks a
/// request on another stream of the same (single) connection is answered.
async fn others_still_flow(pool: &Pool) {
    let mut stalled = Vec::new();
    for _ in 0..STALLED {
        stalled.push(open(pool, "big:1", b"").await);
    }
    // Loopback fills the stalled streams' windows within milliseconds.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut s = open(pool, "echo:7", b"ping").await;
    s.shutdown().await.unwrap();
    let mut got = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut got))
        .await
        .expect("the echo came back while other streams' readers had stopped")
        .unwrap();
    assert_eq!(got, b"ping");
    drop(stalled);
}

fn big() -> usize {
    3 * mux::Config::default().stream_window as usize
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopped_readers_do_not_stall_their_tcp_pool_connection() {
    let server = Arc::new(
        Server::bind("127.0.0.1:0".parse().unwrap(), ServerConfig::default())
            .await
            .unwrap(),
    );
    spawn_server(server.clone(), big());
    let pool = Pool::start(PoolConfig {
        remote: server.local_addr().to_string(),
        connections: 1,
        ..PoolConfig::default()
    });
    assert!(pool.ready(Duration::from_secs(5)).await);
    others_still_flow(&pool).await;
    pool.close(Duration::ZERO).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopped_readers_do_not_stall_their_quic_pool_connection() {
    let dir = tempfile::tempdir().unwrap();
    gen_keys(dir.path(), &GenKeysOptions::default()).unwrap();
    let tls = Arc::new(TlsServer::new(common::tls_files(dir.path(), "remote")).unwrap());
    let server = Arc::new(
        Server::bind_quic(
            "127.0.0.1:0".parse().unwrap(),
            ServerConfig::default(),
            tls,
            QuicOptions::default(),
        )
        .await
        .unwrap(),
    );
    spawn_server(server.clone(), big());
    let cfg = PoolConfig {
        remote: server.local_addr().to_string(),
        connections: 1,
        ..PoolConfig::default()
    };
    let tls =
        Arc::new(TlsClient::new(common::tls_files(dir.path(), "edge"), "longhaul-remote").unwrap());
    let pool = Pool::start_quic(cfg, tls, QuicOptions::default()).unwrap();
    assert!(pool.ready(Duration::from_secs(5)).await);
    others_still_flow(&pool).await;
    pool.close(Duration::ZERO).await;
}
