//! Does a loss on a bulk stream delay a small reply on a concurrent stream? Side by side, TCP +
//! mutual TLS pool against QUIC pool, across the emulated long link of a testbed profile
//! (default `lossy`: 200 ms RTT, 10 Mbit/s, 1.5 % random loss each way). Edge and remote run
//! in their namespaces; while one stream pulls a bulk reply, the edge asks for a 1 KB reply
//! every 250 ms on a new stream and records how long it takes. Prints the median and p90 of
//! the small-reply time for both carriers and the TCP / QUIC ratios. Needs root (or
//! unprivileged user namespaces).
//!
//! `cargo run --release -p pool --example lossy_small_reply -- [profile] [connections] [samples]`

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use pool::quic::QuicOptions;
use pool::tls::{gen_keys, GenKeysOptions, TlsClient, TlsDialer, TlsFiles, TlsServer};
use pool::{Kind, Pool, PoolConfig, Server, ServerConfig, Upgrader};
use testbed::{Node, Profile, Topology};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const SMALL: usize = 1024;
const BULK: usize = 64 * 1024 * 1024;
const TCP_PORT: u16 = 4443;
const QUIC_PORT: u16 = 4444;

/// Remote side: "bulk" streams get BULK bytes, "small" streams SMALL bytes, then FIN.
async fn serve(server: Arc<Server>) {
    while let Some(inc) = server.accept().await {
        tokio::spawn(async move {
            let n = if inc.target.starts_with("bulk") {
                BULK
            } else {
                SMALL
            };
            let mut s = inc.stream;
            let chunk = vec![0x42u8; 16 * 1024];
            let mut left = n;
            while left > 0 {
                let k = left.min(chunk.len());
                if s.write_all(&chunk[..k]).await.is_err() {
                    return;
                }
                left -= k;
            }
            let _ = s.shutdown().await;
            let mut sink = Vec::new();
            let _ = s.read_to_end(&mut sink).await;
        });
    }
}

/// Edge side: one bulk download, and `samples` small replies timed while it runs.
async fn measure(pool: Pool, samples: usize) -> Vec<Duration> {
    assert!(pool.ready(Duration::from_secs(20)).await, "pool not up");
    let p = pool.clone();
    let bulk = tokio::spawn(async move {
        let mut s = p.open(Kind::Tunnel, "bulk:1", Bytes::new()).await.unwrap();
        s.shutdown().await.unwrap();
        let mut buf = vec![0u8; 64 * 1024];
        while s.read(&mut buf).await.map(|n| n > 0).unwrap_or(false) {}
    });
    // Let the bulk transfer fill the path first.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let mut out = Vec::new();
    for _ in 0..samples {
        let t0 = Instant::now();
        let mut s = pool
            .open(Kind::Tunnel, "small:1", Bytes::from_static(b"GET"))
            .await
            .unwrap();
        s.shutdown().await.unwrap();
        let mut got = Vec::new();
        s.read_to_end(&mut got).await.unwrap();
        assert_eq!(got.len(), SMALL);
        out.push(t0.elapsed());
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    bulk.abort();
    pool.close(Duration::ZERO).await;
    out
}

fn quantile(v: &[Duration], q: f64) -> Duration {
    let mut v = v.to_vec();
    v.sort();
    v[((v.len() - 1) as f64 * q).round() as usize]
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let name = args.get(1).map(String::as_str).unwrap_or("lossy");
    let conns: usize = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(4);
    let samples: usize = args.get(3).and_then(|a| a.parse().ok()).unwrap_or(40);
    let profile = Profile::named(name).ok_or_else(|| anyhow::anyhow!("unknown profile {name}"))?;
    let (rtt, rate) = (profile.rtt(), profile.down.rate_bps.unwrap_or(100_000_000));
    let topo = Topology::up(&profile)?;
    let dir = tempfile::tempdir()?;
    gen_keys(dir.path(), &GenKeysOptions::default())?;
    let f = |side: &str| TlsFiles {
        cert: dir.path().join(format!("{side}.pem")),
        key: dir.path().join(format!("{side}.key")),
        ca: vec![dir.path().join("ca.pem")],
    };
    let remote_ip = topo.addr(Node::Remote);
    let mux = mux::Config::for_link(rtt, rate);
    let quic = QuicOptions::for_link(rtt, rate);

    // Remote: both servers on a runtime whose threads live in the remote namespace.
    let srv_tls = Arc::new(TlsServer::new(f("remote"))?);
    let (q2, m2) = (quic.clone(), mux.clone());
    let remote_rt = topo.run_in(Node::Remote, move || {
        let rt = runtime();
        rt.block_on(async {
            let cfg = ServerConfig {
                mux: m2,
                ..ServerConfig::default()
            };
            let up: Arc<dyn Upgrader> = srv_tls.clone();
            let t = Server::bind_with((remote_ip, TCP_PORT).into(), cfg.clone(), up)
                .await
                .unwrap();
            let q = Server::bind_quic((remote_ip, QUIC_PORT).into(), cfg, srv_tls, q2)
                .await
                .unwrap();
            tokio::spawn(serve(Arc::new(t)));
            tokio::spawn(serve(Arc::new(q)));
        });
        rt
    })?;

    let cli = Arc::new(TlsClient::new(f("edge"), "longhaul-remote")?);
    let cfg = |port: u16| PoolConfig {
        remote: format!("{remote_ip}:{port}"),
        connections: conns,
        mux: mux.clone(),
        ..PoolConfig::default()
    };
    let (tcp_cfg, quic_cfg) = (cfg(TCP_PORT), cfg(QUIC_PORT));
    let (tcp, quic_t) = topo.run_in(Node::Edge, move || {
        let rt = runtime();
        let tcp = rt.block_on(async {
            let d = Arc::new(TlsDialer {
                remote: tcp_cfg.remote.clone(),
                opts: tcp_cfg.socket.clone(),
                tls: cli.clone(),
            });
            measure(Pool::start_with_dialer(tcp_cfg, d).unwrap(), samples).await
        });
        let q = rt.block_on(async {
            measure(Pool::start_quic(quic_cfg, cli, quic).unwrap(), samples).await
        });
        (tcp, q)
    })?;
    drop(remote_rt);
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!(
        "profile {name} (RTT {:.0} ms), {conns} pool connections, {samples} small replies during a bulk transfer",
        ms(rtt)
    );
    for (label, v) in [("TCP + TLS pool", &tcp), ("QUIC pool", &quic_t)] {
        println!(
            "{label:15} small reply: median {:.0} ms, p90 {:.0} ms, max {:.0} ms",
            ms(quantile(v, 0.5)),
            ms(quantile(v, 0.9)),
            ms(quantile(v, 1.0))
        );
    }
    println!(
        "TCP / QUIC small-reply time: median {:.2}, p90 {:.2}",
        ms(quantile(&tcp, 0.5)) / ms(quantile(&quic_t, 0.5)),
        ms(quantile(&tcp, 0.9)) / ms(quantile(&quic_t, 0.9))
    );
    topo.down()?;
    Ok(())
}
