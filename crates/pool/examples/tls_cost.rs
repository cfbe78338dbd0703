//! Side-by-side cost of the TLS carrier on loopback: the same transfer (streams echoed through
//! a pool of 4 connections) over plaintext TCP and over mutual TLS 1.3, alternating, several
//! repetitions; prints the medians and their ratio. Loopback has no link delay, so this shows
//! the CPU cost of encryption, not what a long link would see.
//!
//! `cargo run --release -p pool --example tls_cost -- [MB per run] [repetitions]`

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use pool::tls::{gen_keys, GenKeysOptions, TlsClient, TlsDialer, TlsFiles, TlsServer};
use pool::{Kind, Pool, PoolConfig, Server, ServerConfig, Upgrader};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const STREAMS: usize = 8;

async fn echo_server(up: Arc<dyn Upgrader>) -> Arc<Server> {
    let s = Arc::new(
        Server::bind_with("127.0.0.1:0".parse().unwrap(), ServerConfig::default(), up)
            .await
            .unwrap(),
    );
    let s2 = s.clone();
    tokio::spawn(async move {
        while let Some(inc) = s2.accept().await {
            tokio::spawn(async move {
                let (mut r, mut w) = tokio::io::split(inc.stream);
                let _ = tokio::io::copy(&mut r, &mut w).await;
                let _ = w.shutdown().await;
            });
        }
    });
    s
}

/// Echoes `total` bytes split over STREAMS streams; returns the elapsed time.
async fn run(pool: &Pool, total: usize) -> Duration {
    let per = total / STREAMS;
    let t0 = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..STREAMS {
        let pool = pool.clone();
        tasks.push(tokio::spawn(async move {
            let s = pool
                .open(Kind::Tunnel, "echo:1", Bytes::new())
                .await
                .unwrap();
            let (mut r, mut w) = tokio::io::split(s);
            let wr = tokio::spawn(async move {
                let chunk = vec![0x5au8; 64 * 1024];
                let mut left = per;
                while left > 0 {
                    let n = left.min(chunk.len());
                    w.write_all(&chunk[..n]).await.unwrap();
                    left -= n;
                }
                w.shutdown().await.unwrap();
            });
            let mut buf = vec![0u8; 64 * 1024];
            let mut got = 0;
            loop {
                let n = r.read(&mut buf).await.unwrap();
                if n == 0 {
                    break;
                }
                got += n;
            }
            wr.await.unwrap();
            assert_eq!(got, per);
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    t0.elapsed()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let mb: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(256);
    let reps: usize = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(5);
    let total = mb * 1024 * 1024;
    let dir = std::env::temp_dir().join(format!("longhaul-tls-cost-{}", std::process::id()));
    gen_keys(&dir, &GenKeysOptions::default()).unwrap();
    let f = |side: &str| TlsFiles {
        cert: dir.join(format!("{side}.pem")),
        key: dir.join(format!("{side}.key")),
        ca: vec![dir.join("ca.pem")],
    };
    let plain_srv = echo_server(Arc::new(pool::PlainTcp)).await;
    let tls_srv = echo_server(Arc::new(TlsServer::new(f("remote")).unwrap())).await;
    let cfg = |s: &Server| PoolConfig {
        remote: s.local_addr().to_string(),
        ..PoolConfig::default()
    };
    let plain = Pool::start(cfg(&plain_srv));
    let pc = cfg(&tls_srv);
    let tls = Pool::start_with_dialer(
        pc.clone(),
        Arc::new(TlsDialer {
            remote: pc.remote.clone(),
            opts: pc.socket.clone(),
            tls: Arc::new(TlsClient::new(f("edge"), "longhaul-remote").unwrap()),
        }),
    )
    .unwrap();
    assert!(plain.ready(Duration::from_secs(5)).await && tls.ready(Duration::from_secs(5)).await);
    // Warm-up, then alternate which goes first.
    run(&plain, total / 8).await;
    run(&tls, total / 8).await;
    let (mut p, mut t) = (Vec::new(), Vec::new());
    for i in 0..reps {
        let rate = |d: Duration| 2.0 * mb as f64 / d.as_secs_f64(); // both directions
        if i % 2 == 0 {
            p.push(rate(run(&plain, total).await));
            t.push(rate(run(&tls, total).await));
        } else {
            t.push(rate(run(&tls, total).await));
            p.push(rate(run(&plain, total).await));
        }
    }
    let (mp, mt) = (median(p.clone()), median(t.clone()));
    println!("{mb} MiB each way per run, {STREAMS} streams, 4 pool connections, {reps} runs");
    println!("plaintext TCP: median {mp:.0} MiB/s (runs {p:.0?})");
    println!("mutual TLS 1.3: median {mt:.0} MiB/s (runs {t:.0?})");
    println!("TLS / plaintext throughput: {:.2}", mt / mp);
    let _ = std::fs::remove_dir_all(&dir);
}
