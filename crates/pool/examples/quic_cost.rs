//! Side-by-side CPU cost of the QUIC carrier against the TCP + mutual TLS 1.3 carrier on
//! loopback: the same transfer (streams echoed through a pool of 4 connections), alternating,
//! several repetitions; prints median throughput and the process CPU time (user + system, both
//! pool ends in this one process) per GB carried. Loopback has no link delay or loss, so this
//! measures CPU cost, not what a long link would see.
//!
//! `cargo run --release -p pool --example quic_cost -- [MB per run] [repetitions]`

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use pool::quic::QuicOptions;
use pool::tls::{gen_keys, GenKeysOptions, TlsClient, TlsDialer, TlsFiles, TlsServer};
use pool::{Kind, Pool, PoolConfig, Server, ServerConfig, Upgrader};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const STREAMS: usize = 8;

/// User + system CPU time of this process (`/proc/self/stat`, in USER_HZ = 100 ticks).
fn cpu() -> Duration {
    let s = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let rest = s.rsplit_once(')').map(|x| x.1).unwrap_or("");
    let f: Vec<u64> = rest
        .split_whitespace()
        .map(|x| x.parse().unwrap_or(0))
        .collect();
    // Fields after the command: state is [0], utime is field 14 overall = [11], stime [12].
    let ticks = f.get(11).copied().unwrap_or(0) + f.get(12).copied().unwrap_or(0);
    Duration::from_millis(ticks * 10)
}

fn spawn_echo(s: Arc<Server>) {
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

/// One measured run: (MiB/s both directions, CPU seconds per GB carried).
async fn measure(pool: &Pool, total: usize) -> (f64, f64) {
    let c0 = cpu();
    let d = run(pool, total).await;
    let c = (cpu() - c0).as_secs_f64();
    let gb = 2.0 * total as f64 / 1e9; // both directions
    (2.0 * total as f64 / 1048576.0 / d.as_secs_f64(), c / gb)
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let mb: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(256);
    let reps: usize = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(5);
    let total = mb * 1024 * 1024;
    let dir = std::env::temp_dir().join(format!("longhaul-quic-cost-{}", std::process::id()));
    gen_keys(&dir, &GenKeysOptions::default()).unwrap();
    let f = |side: &str| TlsFiles {
        cert: dir.join(format!("{side}.pem")),
        key: dir.join(format!("{side}.key")),
        ca: vec![dir.join("ca.pem")],
    };
    let srv_tls = Arc::new(TlsServer::new(f("remote")).unwrap());
    let cli_tls = Arc::new(TlsClient::new(f("edge"), "longhaul-remote").unwrap());
    let tls_srv = echo_server(srv_tls.clone()).await;
    let quic_srv = Arc::new(
        Server::bind_quic(
            "127.0.0.1:0".parse().unwrap(),
            ServerConfig::default(),
            srv_tls,
            QuicOptions::default(),
        )
        .await
        .unwrap(),
    );
    spawn_echo(quic_srv.clone());
    let cfg = |s: &Server| PoolConfig {
        remote: s.local_addr().to_string(),
        ..PoolConfig::default()
    };
    let pc = cfg(&tls_srv);
    let tls = Pool::start_with_dialer(
        pc.clone(),
        Arc::new(TlsDialer {
            remote: pc.remote.clone(),
            opts: pc.socket.clone(),
            tls: cli_tls.clone(),
        }),
    )
    .unwrap();
    let quic = Pool::start_quic(cfg(&quic_srv), cli_tls, QuicOptions::default()).unwrap();
    assert!(tls.ready(Duration::from_secs(5)).await && quic.ready(Duration::from_secs(5)).await);
    run(&tls, total / 8).await;
    run(&quic, total / 8).await;
    let (mut t, mut q) = (Vec::new(), Vec::new());
    for i in 0..reps {
        if i % 2 == 0 {
            t.push(measure(&tls, total).await);
            q.push(measure(&quic, total).await);
        } else {
            q.push(measure(&quic, total).await);
            t.push(measure(&tls, total).await);
        }
    }
    let rate = |v: &[(f64, f64)]| median(v.iter().map(|x| x.0).collect());
    let cost = |v: &[(f64, f64)]| median(v.iter().map(|x| x.1).collect());
    println!("{mb} MiB each way per run, {STREAMS} streams, 4 pool connections, {reps} runs");
    println!(
        "TCP + mutual TLS 1.3: median {:.0} MiB/s, {:.2} CPU s per GB",
        rate(&t),
        cost(&t)
    );
    println!(
        "QUIC (quinn):         median {:.0} MiB/s, {:.2} CPU s per GB",
        rate(&q),
        cost(&q)
    );
    println!("QUIC / TLS CPU per GB: {:.2}", cost(&q) / cost(&t));
    let _ = std::fs::remove_dir_all(&dir);
}
