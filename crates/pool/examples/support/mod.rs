//! Shared by the carrier cost examples (`tls_cost`, `quic_cost`): an echo server, a transfer
//! over a pool, CPU time of this process, medians.
#![allow(dead_code)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use pool::tls::{gen_keys, GenKeysOptions, TlsFiles};
use pool::{Kind, Pool, Server, ServerConfig, Upgrader};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Streams each transfer is split over.
pub const STREAMS: usize = 8;

/// User + system CPU time of this process (`/proc/self/stat`, in USER_HZ = 100 ticks).
pub fn cpu() -> Duration {
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

pub fn spawn_echo(s: Arc<Server>) {
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

pub async fn echo_server(up: Arc<dyn Upgrader>) -> Arc<Server> {
    let s = Arc::new(
        Server::bind_with("127.0.0.1:0".parse().unwrap(), ServerConfig::default(), up)
            .await
            .unwrap(),
    );
    spawn_echo(s.clone());
    s
}

/// Echoes `total` bytes split over STREAMS streams; returns the elapsed time.
pub async fn run(pool: &Pool, total: usize) -> Duration {
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

pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

/// One measured run: (MiB/s both directions, CPU seconds per GB carried).
pub async fn measure(pool: &Pool, total: usize) -> (f64, f64) {
    let c0 = cpu();
    let d = run(pool, total).await;
    let c = (cpu() - c0).as_secs_f64();
    let gb = 2.0 * total as f64 / 1e9; // both directions
    (2.0 * total as f64 / 1048576.0 / d.as_secs_f64(), c / gb)
}

/// `[MB per run] [repetitions]` from the command line (defaults 256 and 5).
pub fn args() -> (usize, usize) {
    let args: Vec<String> = std::env::args().collect();
    let mb = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(256);
    let reps = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(5);
    (mb, reps)
}

/// `gen-keys` output in a fresh temporary directory named after `name`.
pub fn keys(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("longhaul-{name}-{}", std::process::id()));
    gen_keys(&dir, &GenKeysOptions::default()).unwrap();
    dir
}

/// The TLS files of `side` (`edge` or `remote`) in a [`keys`] directory.
pub fn files(dir: &std::path::Path, side: &str) -> TlsFiles {
    TlsFiles {
        cert: dir.join(format!("{side}.pem")),
        key: dir.join(format!("{side}.key")),
        ca: vec![dir.join("ca.pem")],
    }
}
