//! Side-by-side cost of the TLS carrier on loopback: the same transfer (streams echoed through
//! a pool of 4 connections) over plaintext TCP and over mutual TLS 1.3, alternating, several
//! repetitions; prints the medians and their ratio. Loopback has no link delay, so this shows
//! the CPU cost of encryption, not what a long link would see.
//!
//! `cargo run --release -p pool --example tls_cost -- [MB per run] [repetitions]`

mod support;

use std::sync::Arc;
use std::time::Duration;

use pool::tls::{TlsClient, TlsDialer, TlsServer};
use pool::{Pool, PoolConfig, Server};
use support::{echo_server, median, run, STREAMS};

#[tokio::main]
async fn main() {
    let (mb, reps) = support::args();
    let total = mb * 1024 * 1024;
    let dir = support::keys("tls-cost");
    let f = |side: &str| support::files(&dir, side);
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
