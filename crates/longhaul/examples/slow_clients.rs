//! Measures what slow clients cost everyone else: the latency of normal requests through an
//! edge → pool → remote → origin chain on loopback, alone and while SLOW slowloris clients (one
//! head byte per second, reconnecting after their 408) hold the edge busy.
//!
//! Both kinds of phase run against the same edge and remote, in ROUNDS interleaved rounds
//! (without/with, then with/without, ...), each with REQUESTS / ROUNDS requests, so drift over
//! the run (warm-up, other load on the machine) falls on both alike. The slow clients start
//! spread over their first second, as independent clients would, so their bytes arrive
//! steadily rather than in one burst a second; they are started before and stopped after each
//! "with" phase. The ratio is comparable across machines; the absolute figures are not.
//!
//! The slow clients come from a child process of their own. In a deployment they are other
//! hosts, so by default that process runs alone on the last CPU (`taskset`) and the edge, the
//! remote, the origin and the measured clients on the others: what the "with" phases add is
//! then the proxies' own work for the slow clients (accepts, reads, timers, 408s), not the
//! generator's. `--shared-cpus` puts everything on every CPU, the generator included.
//!
//! ```text
//! cargo run --release -p longhaul --example slow_clients [-- [--shared-cpus] SLOW REQUESTS [ROUNDS]]
//! ```
//! Prints one line per round, one per phase (all rounds together: p50, p99) and
//! `p99 ratio (with SLOW slow / without): R`; the target is R ≤ 1.10.
#![forbid(unsafe_code)]

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use edge_proxy::config::EdgeConfig;
use edge_proxy::pool_transport::start_pool;
use edge_proxy::server::{self, Interception, Listeners};
use remote_proxy::config::RemoteConfig;
use remote_proxy::handler::Ctx;
use remote_proxy::pool_glue::{self, server_config};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Normal clients sending requests at once.
const NORMAL_CLIENTS: usize = 8;
/// Interleaved rounds (each one phase without and one with slow clients).
const DEFAULT_ROUNDS: usize = 5;

async fn origin() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            tokio::spawn(async move {
                let mut buf = vec![0u8; 4096];
                let mut seen = Vec::new();
                loop {
                    match s.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => seen.extend_from_slice(&buf[..n]),
                    }
                    while let Some(p) = seen.windows(4).position(|w| w == b"\r\n\r\n") {
                        seen.drain(..p + 4);
                        // Head and body in one write (two small writes would meet Nagle).
                        let mut reply = b"HTTP/1.1 200 OK\r\nContent-Length: 1024\r\n\r\n".to_vec();
                        reply.resize(reply.len() + 1024, b'x');
                        if s.write_all(&reply).await.is_err() {
                            return;
                        }
                    }
                }
            });
        }
    });
    addr
}

/// One keep-alive client sending `n` requests; returns each request's latency.
async fn normal_client(edge: SocketAddr, origin: SocketAddr, n: usize) -> Vec<Duration> {
    let mut s = TcpStream::connect(edge).await.unwrap();
    s.set_nodelay(true).unwrap();
    let req = format!("GET http://{origin}/ HTTP/1.1\r\nHost: {origin}\r\n\r\n");
    let mut out = Vec::with_capacity(n);
    let mut buf = vec![0u8; 8192];
    for _ in 0..n {
        let t = Instant::now();
        s.write_all(req.as_bytes()).await.unwrap();
        let mut got = Vec::new();
        // The reply is a head plus exactly 1024 bytes.
        loop {
            let k = s.read(&mut buf).await.unwrap();
            assert!(k > 0, "edge closed a normal client");
            got.extend_from_slice(&buf[..k]);
            if let Some(p) = got.windows(4).position(|w| w == b"\r\n\r\n") {
                if got.len() >= p + 4 + 1024 {
                    break;
                }
            }
        }
        out.push(t.elapsed());
    }
    out
}

/// A slowloris: one byte a second, a new connection after each 408 or close; starts after
/// `delay`.
async fn slow_client(edge: SocketAddr, delay: Duration) {
    tokio::time::sleep(delay).await;
    let head = b"GET http://example.com/ HTTP/1.1\r\nHost: example.com\r\nX-Slow: 1\r\n\r\n";
    loop {
        let Ok(mut s) = TcpStream::connect(edge).await else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        for b in head {
            if s.write_all(&[*b]).await.is_err() {
                break;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
}

/// The generator process (`--generate EDGE SLOW`): SLOW slowloris clients, started spread over
/// the first second, until its standard input closes (the parent ended the phase, or died).
fn generate(edge: SocketAddr, slow: usize) {
    std::thread::spawn(|| {
        let _ = std::io::copy(&mut std::io::stdin(), &mut std::io::sink());
        std::process::exit(0);
    });
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        for i in 0..slow {
            let delay = Duration::from_secs(1) * i as u32 / slow.max(1) as u32;
            tokio::spawn(slow_client(edge, delay));
        }
        std::future::pending::<()>().await
    });
}

/// Where the slow-client generator runs.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Placement {
    /// The generator alone on the last CPU, everything else on the others.
    Isolated { generator_cpu: usize },
    /// Every process on every CPU.
    Shared,
}

/// Pins every thread of process `pid` to `cpus` (a `taskset` list such as `0` or `0-2`).
fn pin(pid: u32, cpus: &str) -> Result<(), String> {
    let out = Command::new("taskset")
        .args(["-a", "-p", "-c", cpus, &pid.to_string()])
        .stdout(Stdio::null())
        .output()
        .map_err(|e| format!("taskset: {e} (util-linux)"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).trim().to_string())
    }
}

/// Decides the placement and, when isolating, pins this process (before any runtime thread
/// exists, so every thread inherits it) to all CPUs but the last.
fn place(shared: bool) -> Placement {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    if shared {
        return Placement::Shared;
    }
    if cpus < 2 {
        println!("NOTE: one CPU only: the slow-client generator shares it with what is measured");
        return Placement::Shared;
    }
    let rest = if cpus == 2 {
        "0".to_string()
    } else {
        format!("0-{}", cpus - 2)
    };
    match pin(std::process::id(), &rest) {
        Ok(()) => Placement::Isolated {
            generator_cpu: cpus - 1,
        },
        Err(e) => {
            println!(
                "NOTE: could not pin CPUs ({e}): the generator shares them with what is measured"
            );
            Placement::Shared
        }
    }
}

/// Starts the generator process for one "with" phase.
fn start_generator(edge: SocketAddr, slow: usize, placement: Placement) -> Child {
    let exe = std::env::current_exe().unwrap();
    let mut cmd = match placement {
        Placement::Isolated { generator_cpu } => {
            let mut c = Command::new("taskset");
            c.args(["-c", &generator_cpu.to_string()]).arg(exe);
            c
        }
        Placement::Shared => Command::new(exe),
    };
    cmd.args(["--generate", &edge.to_string(), &slow.to_string()])
        .stdin(Stdio::piped())
        .spawn()
        .expect("starting the slow-client generator")
}

async fn phase(edge: SocketAddr, origin: SocketAddr, requests: usize) -> Vec<Duration> {
    let per = requests / NORMAL_CLIENTS;
    let tasks: Vec<_> = (0..NORMAL_CLIENTS)
        .map(|_| tokio::spawn(normal_client(edge, origin, per)))
        .collect();
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    all.sort();
    all
}

fn pct(v: &[Duration], p: f64) -> Duration {
    v[((v.len() as f64 * p).ceil() as usize).clamp(1, v.len()) - 1]
}

/// Runs a phase of normal requests while `slow` slowloris clients are connected.
async fn phase_with_slow(
    edge: SocketAddr,
    origin: SocketAddr,
    requests: usize,
    slow: usize,
    placement: Placement,
) -> Vec<Duration> {
    let mut generator = start_generator(edge, slow, placement);
    tokio::time::sleep(Duration::from_secs(2)).await; // all connected and dribbling
    let with = phase(edge, origin, requests).await;
    drop(generator.stdin.take());
    let _ = generator.kill();
    let _ = generator.wait();
    // Let the edge close their connections before the next phase.
    tokio::time::sleep(Duration::from_millis(500)).await;
    with
}

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--generate") {
        let edge = args[1].parse().expect("EDGE");
        let slow = args[2].parse().expect("SLOW");
        return generate(edge, slow);
    }
    let shared = args.first().map(String::as_str) == Some("--shared-cpus");
    if shared {
        args.remove(0);
    }
    // Before any thread: the runtimes' threads inherit this process's CPUs.
    let placement = place(shared);
    match placement {
        Placement::Isolated { generator_cpu } => println!(
            "slow-client generator on CPU {generator_cpu}; edge, remote, origin and measured clients on the others"
        ),
        Placement::Shared => println!("slow-client generator on the same CPUs as everything else"),
    }
    let mut args = args.into_iter();
    let slow: usize = args.next().map_or(1000, |a| a.parse().expect("SLOW"));
    let requests: usize = args.next().map_or(20_000, |a| a.parse().expect("REQUESTS"));
    let rounds: usize = args
        .next()
        .map_or(DEFAULT_ROUNDS, |a| a.parse().expect("ROUNDS"))
        .max(1);

    // The proxies and the origin on one runtime, the load on another.
    let proxies = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let edge = proxies.block_on(async {
        let rcfg = RemoteConfig::default();
        let server = pool::Server::bind("127.0.0.1:0".parse().unwrap(), server_config(&rcfg))
            .await
            .unwrap();
        let mut ecfg = EdgeConfig::default();
        ecfg.pool.remote = server.local_addr().to_string();
        let ctx = Arc::new(Ctx::new(rcfg.policy(), rcfg.settings()));
        tokio::spawn(pool_glue::run(
            server,
            ctx,
            std::future::pending(),
            Duration::from_secs(1),
        ));
        let pool = start_pool(&ecfg, None).unwrap();
        assert!(pool.ready(Duration::from_secs(5)).await, "pool not up");
        let proxy = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let edge = proxy.local_addr().unwrap();
        tokio::spawn(server::run(
            pool,
            ecfg.settings(),
            Listeners {
                proxy,
                transparent: None,
                socks: None,
                https: None,
            },
            Interception::Redirect,
            std::future::pending(),
            Duration::from_secs(1),
        ));
        edge
    });
    let origin = proxies.block_on(origin());

    let load = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    load.block_on(async {
        phase(edge, origin, requests / 10).await; // warm-up
        let per = (requests / rounds).max(NORMAL_CLIENTS);
        let (mut base, mut with) = (Vec::new(), Vec::new());
        for round in 0..rounds {
            let (b, w) = if round % 2 == 0 {
                let b = phase(edge, origin, per).await;
                (b, phase_with_slow(edge, origin, per, slow, placement).await)
            } else {
                let w = phase_with_slow(edge, origin, per, slow, placement).await;
                (phase(edge, origin, per).await, w)
            };
            println!(
                "round {}: without p50 {:?} p99 {:?}, with p50 {:?} p99 {:?}",
                round + 1,
                pct(&b, 0.50),
                pct(&b, 0.99),
                pct(&w, 0.50),
                pct(&w, 0.99)
            );
            base.extend(b);
            with.extend(w);
        }
        base.sort();
        with.sort();
        for (name, v) in [
            ("without slow clients", &base),
            ("with slow clients", &with),
        ] {
            println!(
                "{name:>22}: {} requests, p50 {:?}, p99 {:?}",
                v.len(),
                pct(v, 0.50),
                pct(v, 0.99)
            );
        }
        let p50 = pct(&with, 0.50).as_secs_f64() / pct(&base, 0.50).as_secs_f64();
        println!("p50 ratio (with {slow} slow / without): {p50:.3}");
        let ratio = pct(&with, 0.99).as_secs_f64() / pct(&base, 0.99).as_secs_f64();
        println!("p99 ratio (with {slow} slow / without): {ratio:.3}");
    });
}
