//! Side-by-side CPU cost of the QUIC carrier against the TCP + mutual TLS 1.3 carrier on
//! loopback: the same transfer (streams echoed through a pool of 4 connections), alternating,
//! several repetitions; prints median throughput and the process CPU time (user + system, both
//! pool ends in this one process) per GB carried. Loopback has no link delay or loss, so this
//! measures CPU cost, not what a long link would see.
//!
//! `cargo run --release -p pool --example quic_cost -- [MB per run] [repetitions] [connections]`
//!
//! `connections` (default 4) sizes both pools; 1 measures what a single connection carries,
//! the ceiling of the QUIC pool's `pack` placement, which keeps a page's streams on one.

mod support;

use std::sync::Arc;
use std::time::Duration;

use pool::quic::QuicOptions;
use pool::tls::{TlsClient, TlsDialer, TlsServer};
use pool::{Pool, PoolConfig, Server, ServerConfig};
use support::{echo_server, measure, median, run, spawn_echo, STREAMS};

#[tokio::main]
async fn main() {
    let (mb, reps) = support::args();
    let connections: usize = std::env::args()
        .nth(3)
        .map(|a| a.parse().expect("connections: a positive number"))
        .unwrap_or(pool::DEFAULT_CONNECTIONS);
    assert!(connections > 0, "connections: a positive number");
    let total = mb * 1024 * 1024;
    let dir = support::keys("quic-cost");
    let f = |side: &str| support::files(&dir, side);
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
        connections,
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
    println!(
        "{mb} MiB each way per run, {STREAMS} streams, {connections} pool connections, {reps} runs"
    );
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
