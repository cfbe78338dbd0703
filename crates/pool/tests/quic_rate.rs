//! The provisioned-rate controller (`Congestion::Rate`, `pool::rate`) in the real QUIC pool over
//! loopback: quinn accepts the factory on both sides, streams arrive byte-exact, and every
//! connection's congestion window stays within the configured rate × (RTT + allowance).

mod common;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use mux::Kind;
use pool::quic::{Congestion, QuicOptions};
use pool::rate::allowance;
use pool::tls::{gen_keys, GenKeysOptions, TlsClient, TlsServer};
use pool::{LaneState, Pool, PoolConfig, Server, ServerConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const RTT: Duration = Duration::from_millis(50);
const RATE_BPS: u64 = 80_000_000;

fn opts() -> QuicOptions {
    QuicOptions {
        congestion: Congestion::Rate,
        ..QuicOptions::for_link(RTT, RATE_BPS)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_flow_byte_exact_within_the_rate_window() {
    let dir = tempfile::tempdir().unwrap();
    gen_keys(dir.path(), &GenKeysOptions::default()).unwrap();
    let tls = Arc::new(TlsServer::new(common::tls_files(dir.path(), "remote")).unwrap());
    let server = Arc::new(
        Server::bind_quic(
            "127.0.0.1:0".parse().unwrap(),
            ServerConfig::default(),
            tls,
            opts(),
        )
        .await
        .unwrap(),
    );
    common::spawn_echo(server.clone());
    let cfg = PoolConfig {
        remote: server.local_addr().to_string(),
        connections: 2,
        ..PoolConfig::default()
    };
    let client =
        Arc::new(TlsClient::new(common::tls_files(dir.path(), "edge"), "longhaul-remote").unwrap());
    let pool = Pool::start_quic(cfg, client, opts()).unwrap();
    assert!(pool.ready(Duration::from_secs(5)).await);
    tokio::time::timeout(Duration::from_secs(5), async {
        while pool.stats().iter().any(|s| s.state != LaneState::Up) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("both connections up");

    let mut tasks = Vec::new();
    for i in 0..4u8 {
        let s = pool
            .open(Kind::Tunnel, "echo:1", Bytes::new())
            .await
            .unwrap();
        tasks.push(tokio::spawn(async move {
            let data: Vec<u8> = (0..1_000_000u32).map(|k| (k as u8) ^ i).collect();
            let (mut r, mut w) = tokio::io::split(s);
            let out = data.clone();
            let writer = tokio::spawn(async move {
                w.write_all(&out).await.unwrap();
                w.shutdown().await.unwrap();
            });
            let mut got = Vec::new();
            r.read_to_end(&mut got).await.unwrap();
            writer.await.unwrap();
            assert!(got == data, "stream {i} echoed byte-exact");
        }));
    }
    for t in tasks {
        tokio::time::timeout(Duration::from_secs(60), t)
            .await
            .expect("echo within 60 s")
            .unwrap();
    }

    // The controller's window never exceeds the whole rate × (configured RTT + allowance): the
    // base RTT on loopback is far below the configured one.
    let cap = RATE_BPS / 8 * (RTT + allowance(RTT)).as_micros() as u64 / 1_000_000;
    let stats = pool.stats();
    assert!(!stats.is_empty());
    for s in stats.iter().filter_map(|s| s.quic) {
        assert!(
            (2 * 1200..=cap).contains(&s.cwnd),
            "cwnd {} outside 2400..={cap}",
            s.cwnd
        );
    }
    for s in server.stats().iter().filter_map(|s| s.quic) {
        assert!(
            (2 * 1200..=cap).contains(&s.cwnd),
            "cwnd {} outside 2400..={cap}",
            s.cwnd
        );
    }
}
