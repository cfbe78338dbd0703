//! Connection credit over the mux on loopback TCP (PROTOCOL.md §4.1): a session carries more
//! concurrent streams than whole stream windows would fit in the old 1 GiB budget, and streams
//! whose bytes together exceed a connection's window all arrive whole, the writers waking as
//! the credit comes back.

mod common;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use pool::{Kind, MuxStream, Pool, PoolConfig, Server, ServerConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

async fn pair(mux: mux::Config, connections: usize) -> (Arc<Server>, Pool) {
    let server = Arc::new(
        Server::bind(
            "127.0.0.1:0".parse().unwrap(),
            ServerConfig {
                mux: mux.clone(),
                ..ServerConfig::default()
            },
        )
        .await
        .unwrap(),
    );
    common::spawn_echo(server.clone());
    let pool = Pool::start(PoolConfig {
        remote: server.local_addr().to_string(),
        connections,
        mux,
        ..PoolConfig::default()
    });
    assert!(pool.ready(Duration::from_secs(5)).await);
    (server, pool)
}

async fn open(pool: &Pool, first: &[u8]) -> MuxStream {
    pool.open(Kind::Tunnel, "echo:7", Bytes::copy_from_slice(first))
        .await
        .expect("open")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_holds_more_streams_than_the_old_budget_of_whole_windows() {
    // Defaults (130 ms, 100 Mbit/s): stream windows grow to 6.5 MB, of which 1 GiB holds 165.
    let cfg = mux::Config::default();
    assert_eq!(cfg.legacy_max_streams(), 165);
    let (_server, pool) = pair(cfg, 2).await;
    assert_eq!(
        pool.stream_limit(),
        mux::config::DEFAULT_SESSION_STREAMS as usize
    );
    let mut held = Vec::new();
    for i in 0..1000u32 {
        let s = tokio::time::timeout(Duration::from_secs(5), open(&pool, &i.to_be_bytes()))
            .await
            .unwrap_or_else(|_| panic!("open {i} waited for a stream slot"));
        held.push(s);
    }
    // Every stream is open at once and still carries its own bytes.
    for (i, mut s) in held.into_iter().enumerate() {
        s.shutdown().await.unwrap();
        let mut got = Vec::new();
        s.read_to_end(&mut got).await.unwrap();
        assert_eq!(got, (i as u32).to_be_bytes());
    }
    pool.close(Duration::ZERO).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_beyond_the_connection_window_arrive_whole() {
    // One connection whose window holds two stream windows; eight streams each echo four
    // stream windows, so every direction waits for connection credit many times over.
    let stream_window = 64 * 1024;
    let cfg = mux::Config {
        stream_window,
        conn_window: 2 * stream_window,
        ..mux::Config::default()
    };
    let (_server, pool) = pair(cfg, 1).await;
    let len = 4 * stream_window as usize;
    let mut tasks = Vec::new();
    for k in 0..8u8 {
        let s = open(&pool, b"").await;
        tasks.push(tokio::spawn(async move {
            let body: Vec<u8> = (0..len).map(|i| (i as u8).wrapping_mul(k + 1)).collect();
            let (mut r, mut w) = tokio::io::split(s);
            let b = body.clone();
            let writer = tokio::spawn(async move {
                w.write_all(&b).await.unwrap();
                w.shutdown().await.unwrap();
            });
            let mut got = Vec::new();
            r.read_to_end(&mut got).await.unwrap();
            writer.await.unwrap();
            assert!(
                got == body,
                "stream {k}: {} of {len} bytes, or out of order",
                got.len()
            );
        }));
    }
    tokio::time::timeout(Duration::from_secs(30), async {
        for t in tasks {
            t.await.unwrap();
        }
    })
    .await
    .expect("every stream finished: credit came back and the writers woke");
    pool.close(Duration::ZERO).await;
}
