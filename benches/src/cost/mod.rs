//! `cost`: what a proxy chain costs end to end on loopback, measured side by side in one run.
//!
//! Every system starts from the same configuration code as in `pageload` ([`crate::systems`]:
//! `direct`, `squid-chain`, `haproxy-h2`, `longhaul-tcp` with its pool on mutual TLS 1.3), on
//! one private network namespace's loopback ([`bed`]) in front of one nginx origin, and is
//! measured three ways:
//!
//! - **latency** ([`LatencyRow`]): what each system adds to small requests. One keep-alive client,
//!   a 1 KiB object, `requests` sequential GETs per round, several rounds with the systems in
//!   an order shuffled per round; p50, p99 and p99.9 per system and the same minus `direct`'s.
//! - **throughput** ([`ThroughputRow`]): many concurrent large transfers through each system;
//!   MB/s and the CPU seconds per GB of every process of the system (`/proc/PID/stat`), and
//!   the machine's CPU time meanwhile, so work of other programs on a shared machine shows.
//! - **memory** ([`MemoryResult`]): longhaul's edge resident memory per idle keep-alive client
//!   (the method of `crates/longhaul/tests/idle_memory.rs`), and the edge's and remote's per
//!   active stream, many slow transfers held open.
//!
//! The results go to `OUT/results.json` and `OUT/summary.md` ([`report`]) with the machine
//! they ran on and the goals of issue 26 set against what was measured. Nothing here decides
//! a figure: each is what this run measured. It needs root or user namespaces (`unshare`);
//! it is never run by `cargo test` except as the tiny smoke run of `tests/cost_smoke.rs`.

pub mod bed;
pub mod http;
pub mod procs;
pub mod report;

use crate::bed::{Bed, Node};
use crate::schedule::shuffled_order;
use crate::stats::percentile;
use crate::systems::{self, Running, Shared, SystemSpec};
use anyhow::{bail, ensure, Context, Result};
use procs::Proc;
use serde::Serialize;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The systems compared by default, `direct` first (the baseline).
pub const DEFAULT_SYSTEMS: [&str; 4] = ["direct", "squid-chain", "haproxy-h2", "longhaul-tcp"];
/// The small object of the latency benchmark, in bytes.
pub const SMALL_BYTES: u64 = 1024;
/// Where the slow transfers' object lives (nginx sends it at `slow_rate_kib` per connection).
const SLOW_PATH: &str = "/slow/big.bin";
/// Size of the slow object: never finished at the rates used.
const SLOW_BYTES: u64 = 1 << 30;
/// Edge port of the memory benchmark's own edge-proxy (apart from the systems' ports).
const MEMORY_EDGE_PORT: u16 = 3290;
/// How long the memory benchmark lets the proxies settle before reading their memory.
const SETTLE: Duration = Duration::from_secs(2);

/// What one run measures and how much.
#[derive(Debug, Clone, Serialize)]
pub struct Config {
    /// Run directory (results, configurations, logs).
    pub out: PathBuf,
    /// System ids; `direct` is always measured (the baseline).
    pub systems: Vec<String>,
    /// Which benchmarks run: `latency`, `throughput`, `memory`.
    pub phases: Vec<String>,
    /// Timed requests per system per round.
    pub latency_requests: usize,
    /// Untimed requests on each fresh connection before the timed ones.
    pub latency_warmup: usize,
    /// Rounds, each system once per round, order shuffled per round.
    pub latency_rounds: usize,
    /// Concurrent transfers of the throughput benchmark.
    pub throughput_clients: usize,
    /// Size of each transfer in MB (10^6 bytes).
    pub throughput_mb: u64,
    /// Rounds of the throughput benchmark (each system once per round, shuffled).
    pub throughput_rounds: usize,
    /// Idle keep-alive clients of the memory benchmark.
    pub idle_clients: usize,
    /// Slow transfers held open at once in the memory benchmark.
    pub active_streams: usize,
    /// Rate nginx sends each slow transfer at, KiB/s.
    pub slow_rate_kib: u32,
    /// longhaul's pool connections.
    pub pool_size: u32,
    /// The long link the proxies size their windows for (round trip, ms): the proxies'
    /// defaults, as deployed.
    pub link_rtt_ms: f64,
    /// The long link's rate, Mbit/s.
    pub link_rate_mbit: f64,
    /// Seed of the shuffled orders.
    pub seed: u64,
}

/// One system of the run, started.
struct Started {
    spec: SystemSpec,
    /// Where clients send requests; the origin itself for `direct`.
    addr: SocketAddr,
    via_proxy: bool,
    procs: Vec<Proc>,
    running: Option<Running>,
    _shared: Vec<Shared>,
}

/// The origin: nginx serving the small object, the large ones and the slow one.
pub struct Origin {
    child: Child,
    /// Its address (port 80).
    pub addr: SocketAddr,
    /// nginx's processes (master and worker).
    pub procs: Vec<Proc>,
    /// Size of the large object in bytes.
    pub large_bytes: u64,
}

impl Drop for Origin {
    fn drop(&mut self) {
        // SIGTERM lets the master stop its worker (SIGKILL would orphan it).
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        for _ in 0..150 {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// nginx's configuration for the cost runner: one server on `addr`, port 80; the `slow/`
/// directory sent at `slow_rate_kib` KiB/s per connection. Keep-alive and sendfile as the
/// `pageload` origin has them.
pub fn nginx_conf(dir: &Path, addr: IpAddr, slow_rate_kib: u32) -> String {
    let d = dir.display();
    format!(
        "# generated by cost\ndaemon off;\nmaster_process on;\nuser root;\nworker_processes 1;\n\
         worker_rlimit_nofile 20000;\npid {d}/nginx.pid;\nerror_log {d}/nginx-error.log warn;\n\
         events {{ worker_connections 16384; }}\n\
         http {{\n  access_log off;\n  sendfile on;\n  tcp_nopush on;\n  tcp_nodelay on;\n\
         \x20 keepalive_timeout 120s;\n  keepalive_requests 1000000;\n\
         \x20 client_body_temp_path {d}/tmp/body;\n  proxy_temp_path {d}/tmp/proxy;\n\
         \x20 fastcgi_temp_path {d}/tmp/fastcgi;\n  uwsgi_temp_path {d}/tmp/uwsgi;\n  scgi_temp_path {d}/tmp/scgi;\n\
         \x20 types {{ application/octet-stream bin; }}\n\
         \x20 server {{ listen {addr}:80; root {d}/www; etag off;\n\
         \x20   location /slow/ {{ limit_rate {slow_rate_kib}k; }} }}\n}}\n"
    )
}

impl Origin {
    /// Writes the objects and starts nginx in `dir`.
    pub fn start(
        bed: &dyn Bed,
        dir: &Path,
        large_bytes: u64,
        slow_rate_kib: u32,
    ) -> Result<Origin> {
        let www = dir.join("www");
        std::fs::create_dir_all(www.join("slow"))?;
        std::fs::create_dir_all(dir.join("tmp"))?;
        std::fs::write(www.join("1k.bin"), vec![b'x'; SMALL_BYTES as usize])?;
        // Sparse: nginx sends zeros from the page cache, nothing compresses them on the way.
        std::fs::File::create(www.join("large.bin"))?.set_len(large_bytes)?;
        std::fs::File::create(www.join("slow/big.bin"))?.set_len(SLOW_BYTES)?;
        let ip = bed.addr(Node::Origin);
        let conf = dir.join("nginx.conf");
        std::fs::write(&conf, nginx_conf(dir, ip, slow_rate_kib))?;
        let known = procs::descendants(std::process::id());
        let log = std::fs::File::create(dir.join("stderr.log"))?;
        let child = bed
            .command(Node::Origin, "nginx")
            .args(["-p", &dir.display().to_string(), "-c"])
            .arg(&conf)
            .args(["-e", &dir.join("nginx-error.log").display().to_string()])
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("starting nginx")?;
        let addr = SocketAddr::new(ip, 80);
        let mut o = Origin {
            child,
            addr,
            procs: Vec::new(),
            large_bytes,
        };
        let req = http::request(false, &ip.to_string(), "/1k.bin");
        let deadline = Instant::now() + systems::START_TIMEOUT;
        loop {
            if let Some(st) = o.child.try_wait()? {
                bail!(
                    "nginx exited: {st}: {}",
                    std::fs::read_to_string(dir.join("nginx-error.log")).unwrap_or_default()
                );
            }
            match http::Conn::connect(addr).and_then(|mut c| c.get(&req, Some(SMALL_BYTES))) {
                Ok(_) => break,
                Err(e) if Instant::now() > deadline => return Err(e.context("nginx not ready")),
                Err(_) => std::thread::sleep(Duration::from_millis(100)),
            }
        }
        o.procs = procs::new_descendants(&known);
        Ok(o)
    }

    /// The origin's host as clients name it (its address: the loopback bed has no names).
    pub fn host(&self) -> String {
        self.addr.ip().to_string()
    }
}

/// The spec of system `id` as this run starts it.
fn spec_of(id: &str, cfg: &Config) -> SystemSpec {
    if systems::carrier_of(id).is_some() {
        let mut s = if id == systems::longhaul::QUIC_ID {
            SystemSpec::longhaul_quic(cfg.pool_size, "bbr", systems::POLICIES[0])
        } else {
            SystemSpec::longhaul(cfg.pool_size, "bbr", systems::POLICIES[0])
        };
        s.params.stream_window_bdp = None;
        s
    } else {
        SystemSpec::plain(id)
    }
}

/// Starts system `id`, waits until a request passes through it, and notes its processes.
fn start_system(
    bed: &dyn Bed,
    dir: &Path,
    origin: &Origin,
    id: &str,
    slot: usize,
    cfg: &Config,
) -> Result<Started> {
    let spec = spec_of(id, cfg);
    if id == "direct" {
        return Ok(Started {
            spec,
            addr: origin.addr,
            via_proxy: false,
            procs: Vec::new(),
            running: None,
            _shared: Vec::new(),
        });
    }
    let system = spec
        .system()
        .with_context(|| format!("unknown system {id}"))?;
    let known = procs::descendants(std::process::id());
    let hosts = vec![(origin.host(), origin.addr.ip())];
    let shared = system.start_shared(bed, dir, &[&spec])?;
    let mut running = systems::start(bed, dir, &spec, slot, &hosts)?;
    let addr = running.proxy.context("system without a proxy address")?;
    let req = http::request(true, &origin.host(), "/1k.bin");
    systems::wait_ready(&mut running, || {
        http::Conn::connect(addr)?
            .get(&req, Some(SMALL_BYTES))
            .map(|_| ())
    })?;
    Ok(Started {
        spec,
        addr,
        via_proxy: true,
        procs: procs::new_descendants(&known),
        running: Some(running),
        _shared: shared,
    })
}

/// The machine's busy CPU time so far in seconds (all CPUs; `/proc/stat`: user, nice, system,
/// irq, softirq, steal).
fn machine_busy_s(tck: u64) -> f64 {
    crate::host::CpuTimes::now().map_or(0.0, |t| (t.busy + t.steal) as f64 / tck as f64)
}

/// Latency of one system over all rounds.
#[derive(Debug, Clone, Serialize)]
pub struct LatencyRow {
    /// System label.
    pub system: String,
    /// Timed requests that completed.
    pub requests: usize,
    /// Requests that failed (each on a fresh connection after).
    pub failures: usize,
    /// Percentiles of the request time, µs.
    pub p50_us: Option<f64>,
    /// 99th percentile, µs.
    pub p99_us: Option<f64>,
    /// 99.9th percentile, µs.
    pub p999_us: Option<f64>,
    /// Each round's median, µs (the spread between rounds).
    pub round_p50_us: Vec<f64>,
    /// Context switches of the system's processes per timed request (every thread's
    /// voluntary and involuntary switches): the wake-ups a request costs in the chain.
    pub context_switches_per_request: Option<f64>,
    /// CPU time of the system's processes per timed request, µs (10 ms clock ticks summed
    /// over all requests).
    pub cpu_us_per_request: Option<f64>,
    /// p50 minus `direct`'s p50, µs.
    pub added_p50_us: Option<f64>,
    /// p99 minus `direct`'s p99, µs.
    pub added_p99_us: Option<f64>,
    /// p99.9 minus `direct`'s p99.9, µs.
    pub added_p999_us: Option<f64>,
    /// The first errors.
    pub errors: Vec<String>,
}

/// Latency of small requests: one keep-alive client per system and round, `requests` timed
/// GETs of the 1 KiB object, rounds interleaved across systems.
fn latency(cfg: &Config, origin: &Origin, sys: &[Started], tck: u64) -> Vec<LatencyRow> {
    let n = sys.len();
    let mut switches = vec![0u64; n];
    let mut ticks = vec![0u64; n];
    let sum = |ps: &[Proc], f: fn(u32) -> Option<u64>| -> u64 {
        ps.iter().filter_map(|p| f(p.pid)).sum()
    };
    let mut samples: Vec<Vec<f64>> = vec![Vec::new(); n];
    let mut rounds: Vec<Vec<f64>> = vec![Vec::new(); n];
    let mut failures = vec![0usize; n];
    let mut errors: Vec<Vec<String>> = vec![Vec::new(); n];
    let host = origin.host();
    for (r, order) in shuffled_order(n, cfg.latency_rounds, cfg.seed)
        .iter()
        .enumerate()
    {
        for &i in order {
            let s = &sys[i];
            let req = http::request(s.via_proxy, &host, "/1k.bin");
            let mut this = Vec::with_capacity(cfg.latency_requests);
            let mut conn: Option<http::Conn> = None;
            let mut warm = cfg.latency_warmup;
            let mut attempts = 0;
            let mut marks: Option<(u64, u64)> = None;
            while this.len() < cfg.latency_requests && attempts < 2 * cfg.latency_requests + 10 {
                attempts += 1;
                let c = match conn.as_mut() {
                    Some(c) => c,
                    None => match http::Conn::connect(s.addr) {
                        Ok(c) => conn.insert(c),
                        Err(e) => {
                            failures[i] += 1;
                            note(&mut errors[i], &e);
                            continue;
                        }
                    },
                };
                if warm == 0 && marks.is_none() {
                    marks = Some((
                        sum(&s.procs, procs::context_switches),
                        sum(&s.procs, procs::cpu_ticks),
                    ));
                }
                let t0 = Instant::now();
                match c.get(&req, Some(SMALL_BYTES)) {
                    Ok(_) if warm > 0 => warm -= 1,
                    Ok(_) => this.push(t0.elapsed().as_secs_f64() * 1e6),
                    Err(e) => {
                        failures[i] += 1;
                        note(&mut errors[i], &e);
                        conn = None;
                    }
                }
            }
            if let Some((cs, t)) = marks {
                switches[i] += sum(&s.procs, procs::context_switches).saturating_sub(cs);
                ticks[i] += sum(&s.procs, procs::cpu_ticks).saturating_sub(t);
            }
            eprintln!(
                "cost: latency round {r}: {} p50 {:.0} µs",
                s.spec.label(),
                percentile(&this, 50.0).unwrap_or(f64::NAN)
            );
            if let Some(m) = percentile(&this, 50.0) {
                rounds[i].push(m);
            }
            samples[i].extend(this);
        }
    }
    let base = sys.iter().position(|s| s.spec.id == "direct");
    let at = |i: usize, p: f64| percentile(&samples[i], p);
    let added = |i: usize, p: f64| match (at(i, p), base.and_then(|b| at(b, p))) {
        (Some(a), Some(b)) => Some(a - b),
        _ => None,
    };
    (0..n)
        .map(|i| LatencyRow {
            system: sys[i].spec.label(),
            requests: samples[i].len(),
            failures: failures[i],
            p50_us: at(i, 50.0),
            p99_us: at(i, 99.0),
            p999_us: at(i, 99.9),
            round_p50_us: rounds[i].clone(),
            context_switches_per_request: (!sys[i].procs.is_empty() && !samples[i].is_empty())
                .then(|| switches[i] as f64 / samples[i].len() as f64),
            cpu_us_per_request: (!sys[i].procs.is_empty() && !samples[i].is_empty())
                .then(|| ticks[i] as f64 * 1e6 / tck as f64 / samples[i].len() as f64),
            added_p50_us: added(i, 50.0),
            added_p99_us: added(i, 99.0),
            added_p999_us: added(i, 99.9),
            errors: errors[i].clone(),
        })
        .collect()
}

/// Keeps the first few distinct errors.
fn note(errors: &mut Vec<String>, e: &anyhow::Error) {
    let s = format!("{e:#}");
    if errors.len() < 5 && !errors.contains(&s) {
        errors.push(s);
    }
}

/// CPU time of one process over a throughput run.
#[derive(Debug, Clone, Serialize)]
pub struct ProcCpu {
    /// What it is (`edge-proxy`, `haproxy-edge`, `squid-parent`, `nginx`, …).
    pub process: String,
    /// Its pid.
    pub pid: u32,
    /// user + system CPU seconds during the transfers.
    pub cpu_s: f64,
    /// Those per GB (10^9 bytes) carried.
    pub cpu_s_per_gb: f64,
}

/// One system's throughput run.
#[derive(Debug, Clone, Serialize)]
pub struct ThroughputRow {
    /// System label.
    pub system: String,
    /// Round number.
    pub round: usize,
    /// Concurrent transfers.
    pub clients: usize,
    /// Transfers that failed.
    pub failures: usize,
    /// Body bytes received in all.
    pub bytes: u64,
    /// First request to last byte, seconds.
    pub seconds: f64,
    /// bytes ÷ seconds, in MB/s (10^6).
    pub mb_per_s: f64,
    /// Each of the system's processes (none for `direct`).
    pub processes: Vec<ProcCpu>,
    /// All of the system's processes together, CPU seconds per GB (`None` for `direct`).
    pub proxy_cpu_s_per_gb: Option<f64>,
    /// MB carried per CPU second of the system's processes (throughput per core).
    pub mb_per_proxy_cpu_s: Option<f64>,
    /// The origin's CPU seconds per GB (the same work for every system).
    pub origin_cpu_s_per_gb: f64,
    /// CPU seconds the whole machine was busy meanwhile.
    pub machine_cpu_s: f64,
    /// Of those, what neither the system, the origin nor this runner used (other programs).
    pub other_cpu_s: f64,
    /// The first errors.
    pub errors: Vec<String>,
}

/// Many concurrent large transfers through each system, CPU time of every process.
fn throughput(cfg: &Config, origin: &Origin, sys: &[Started], tck: u64) -> Vec<ThroughputRow> {
    let host = origin.host();
    let mut rows = Vec::new();
    let orders = shuffled_order(sys.len(), cfg.throughput_rounds, cfg.seed ^ 0x7470);
    for (round, order) in orders.iter().enumerate() {
        for &i in order {
            let s = &sys[i];
            let ticks = |ps: &[Proc]| -> Vec<u64> {
                ps.iter()
                    .map(|p| procs::cpu_ticks(p.pid).unwrap_or(0))
                    .collect()
            };
            let me = std::process::id();
            let (p0, o0, m0, self0) = (
                ticks(&s.procs),
                ticks(&origin.procs),
                machine_busy_s(tck),
                procs::cpu_ticks(me).unwrap_or(0),
            );
            let req = Arc::new(http::request(s.via_proxy, &host, "/large.bin"));
            let size = origin.large_bytes;
            let t0 = Instant::now();
            let handles: Vec<_> = (0..cfg.throughput_clients)
                .map(|_| {
                    let req = Arc::clone(&req);
                    let addr = s.addr;
                    std::thread::spawn(move || -> Result<u64> {
                        http::Conn::connect(addr)?.get(&req, Some(size))
                    })
                })
                .collect();
            let mut bytes = 0;
            let mut failures = 0;
            let mut errors = Vec::new();
            for h in handles {
                match h.join() {
                    Ok(Ok(b)) => bytes += b,
                    Ok(Err(e)) => {
                        failures += 1;
                        note(&mut errors, &e);
                    }
                    Err(_) => failures += 1,
                }
            }
            let secs = t0.elapsed().as_secs_f64();
            let (p1, o1, m1, self1) = (
                ticks(&s.procs),
                ticks(&origin.procs),
                machine_busy_s(tck),
                procs::cpu_ticks(me).unwrap_or(0),
            );
            let gb = bytes as f64 / 1e9;
            let cpu = |a: u64, b: u64| b.saturating_sub(a) as f64 / tck as f64;
            let per_gb = |c: f64| if gb > 0.0 { c / gb } else { f64::NAN };
            let processes: Vec<ProcCpu> = s
                .procs
                .iter()
                .enumerate()
                .map(|(k, p)| ProcCpu {
                    process: p.label.clone(),
                    pid: p.pid,
                    cpu_s: cpu(p0[k], p1[k]),
                    cpu_s_per_gb: per_gb(cpu(p0[k], p1[k])),
                })
                .collect();
            let proxy_cpu: f64 = processes.iter().map(|p| p.cpu_s).fold(0.0, |a, b| a + b);
            let origin_cpu: f64 = o0.iter().zip(&o1).map(|(a, b)| cpu(*a, *b)).sum();
            let machine = m1 - m0;
            let row = ThroughputRow {
                system: s.spec.label(),
                round,
                clients: cfg.throughput_clients,
                failures,
                bytes,
                seconds: secs,
                mb_per_s: bytes as f64 / 1e6 / secs,
                proxy_cpu_s_per_gb: (!processes.is_empty()).then(|| per_gb(proxy_cpu)),
                mb_per_proxy_cpu_s: (proxy_cpu > 0.0).then(|| bytes as f64 / 1e6 / proxy_cpu),
                processes,
                origin_cpu_s_per_gb: per_gb(origin_cpu),
                machine_cpu_s: machine,
                other_cpu_s: (machine - proxy_cpu - origin_cpu - cpu(self0, self1)).max(0.0),
                errors,
            };
            eprintln!(
                "cost: throughput round {round}: {} {:.0} MB/s, {:.2} proxy CPU s/GB",
                row.system,
                row.mb_per_s,
                row.proxy_cpu_s_per_gb.unwrap_or(0.0)
            );
            rows.push(row);
        }
    }
    rows
}

/// Memory of longhaul's edge per idle client and of edge and remote per active stream.
#[derive(Debug, Clone, Default, Serialize)]
pub struct MemoryResult {
    /// Idle keep-alive clients held open.
    pub idle_clients: usize,
    /// Of those, the sample still answering a request after the measurement.
    pub idle_checked: usize,
    /// Edge VmRSS before the idle clients, KiB.
    pub idle_edge_before_kib: u64,
    /// Edge VmRSS with them, KiB.
    pub idle_edge_after_kib: u64,
    /// (after − before) ÷ clients, bytes.
    pub idle_bytes_per_client: Option<f64>,
    /// Slow transfers held open at once.
    pub active_streams: usize,
    /// Of those, how many were answered `200` (the others got an error reply, such as the
    /// edge's 503 `pool-busy`, and are no active streams: the figures are then not per stream).
    pub active_streams_answered: usize,
    /// Of those, how many received more bytes after the memory was read (still transferring).
    pub active_streams_flowing: usize,
    /// Edge VmRSS before the streams, KiB.
    pub active_edge_before_kib: u64,
    /// Edge VmRSS with the first half of the streams open, KiB.
    pub active_edge_half_kib: u64,
    /// Edge VmRSS with the streams, KiB.
    pub active_edge_after_kib: u64,
    /// Remote VmRSS before the streams, KiB.
    pub active_remote_before_kib: u64,
    /// Remote VmRSS with the first half of the streams open, KiB.
    pub active_remote_half_kib: u64,
    /// Remote VmRSS with the streams, KiB.
    pub active_remote_after_kib: u64,
    /// Edge (after − before) ÷ streams, bytes.
    pub active_edge_bytes_per_stream: Option<f64>,
    /// Remote (after − before) ÷ streams, bytes.
    pub active_remote_bytes_per_stream: Option<f64>,
    /// Edge (after − half) ÷ the second half's streams: what one more stream costs with
    /// the first half already open (free of what the baseline left allocated), bytes.
    pub active_edge_marginal_bytes_per_stream: Option<f64>,
    /// The same for the remote, bytes.
    pub active_remote_marginal_bytes_per_stream: Option<f64>,
    /// The first errors.
    pub errors: Vec<String>,
}

/// Starts longhaul's pair for the memory benchmark: the remote as `pageload` starts it, the
/// edge with the same flags and a configuration that admits every client of the run and
/// lets them idle for the whole measurement.
fn start_memory_pair(
    bed: &dyn Bed,
    dir: &Path,
    cfg: &Config,
    clients: usize,
) -> Result<(systems::LonghaulRemote, Child, SocketAddr)> {
    let policy = systems::POLICIES[0];
    let remote = systems::start_longhaul_remote(bed, dir, "tcp", "bbr", policy)?;
    let keys = dir.join("longhaul-keys");
    let edge_bin = systems::longhaul_bin("edge-proxy")?;
    let d = dir.join("memory-edge");
    std::fs::create_dir_all(&d)?;
    let conf = d.join("edge-proxy.toml");
    std::fs::write(
        &conf,
        format!(
            "# generated by cost\nmax_client_connections = {}\nclient_idle_timeout_ms = 600000\n",
            clients + 256
        ),
    )?;
    let listen = SocketAddr::new(bed.addr(Node::Edge), MEMORY_EDGE_PORT);
    let remote_addr = SocketAddr::new(
        bed.addr(Node::Remote),
        systems::longhaul_remote_port("tcp", "bbr", policy)?,
    );
    let log = std::fs::File::create(d.join("stderr.log"))?;
    let args: Vec<String> = vec![
        "--config".into(),
        conf.display().to_string(),
        "--listen".into(),
        listen.to_string(),
        "--tls-dir".into(),
        keys.display().to_string(),
        "--remote".into(),
        remote_addr.to_string(),
        "--carrier".into(),
        "tcp".into(),
        "--connections".into(),
        cfg.pool_size.to_string(),
        "--policy".into(),
        policy.into(),
        "--congestion".into(),
        "bbr".into(),
        "--link-rtt-ms".into(),
        format!("{:.0}", cfg.link_rtt_ms.max(1.0)),
        "--link-rate-mbit".into(),
        format!("{:.0}", cfg.link_rate_mbit.max(1.0)),
    ];
    let edge = bed
        .command(Node::Edge, &edge_bin.display().to_string())
        .args(&args)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .context("starting edge-proxy")?;
    Ok((remote, edge, listen))
}

/// The pid of the remote-proxy among this process's descendants.
fn remote_pid() -> Option<u32> {
    procs::descendants(std::process::id())
        .into_iter()
        .map(procs::describe)
        .find(|p| p.label == "remote-proxy")
        .map(|p| p.pid)
}

/// Resident memory of `pids` (KiB) once it has settled: read every half second until no
/// process moved more than [`RSS_STEADY_KIB`] since the previous reading, at most
/// [`RSS_SETTLE_MAX`]. Freed memory reaches the kernel some time after a burst of work
/// (allocator trimming, buffers released late), which would otherwise land in a delta.
fn settled_rss(pids: &[u32]) -> Vec<u64> {
    let read = || -> Vec<u64> {
        pids.iter()
            .map(|p| procs::rss_kib(*p).unwrap_or(0))
            .collect()
    };
    let deadline = Instant::now() + RSS_SETTLE_MAX;
    let mut last = read();
    loop {
        std::thread::sleep(Duration::from_millis(500));
        let now = read();
        let steady = now
            .iter()
            .zip(&last)
            .all(|(a, b)| a.abs_diff(*b) <= RSS_STEADY_KIB);
        if steady || Instant::now() >= deadline {
            return now;
        }
        last = now;
    }
}

/// Largest change of resident memory between two readings that counts as settled, KiB.
const RSS_STEADY_KIB: u64 = 64;
/// Longest wait for resident memory to settle.
const RSS_SETTLE_MAX: Duration = Duration::from_secs(10);

/// Memory per idle client and per active stream of longhaul's pair.
fn memory(bed: &dyn Bed, dir: &Path, cfg: &Config, origin: &Origin) -> Result<MemoryResult> {
    let keys = dir.join("longhaul-keys");
    if !keys.join("remote.pem").exists() {
        let out = Command::new(systems::longhaul_bin("edge-proxy")?)
            .args(["gen-keys", "--out"])
            .arg(&keys)
            .output()?;
        ensure!(
            out.status.success(),
            "gen-keys: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let (_remote, edge, listen) =
        start_memory_pair(bed, dir, cfg, cfg.idle_clients.max(cfg.active_streams))?;
    struct Kill(Child);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let edge = Kill(edge);
    let epid = edge.0.id();
    let host = origin.host();
    let small = http::request(true, &host, "/1k.bin");
    let deadline = Instant::now() + systems::START_TIMEOUT;
    while let Err(e) =
        http::Conn::connect(listen).and_then(|mut c| c.get(&small, Some(SMALL_BYTES)))
    {
        ensure!(Instant::now() < deadline, "memory pair not ready: {e:#}");
        std::thread::sleep(Duration::from_millis(200));
    }
    let rpid = remote_pid().context("remote-proxy not found")?;
    let mut m = MemoryResult::default();

    // Idle keep-alive clients, as crates/longhaul/tests/idle_memory.rs measures them.
    if cfg.idle_clients > 0 {
        for _ in 0..64 {
            http::Conn::connect(listen)?.get(&small, Some(SMALL_BYTES))?;
        }
        m.idle_edge_before_kib = settled_rss(&[epid])[0];
        let mut held = Vec::with_capacity(cfg.idle_clients);
        for _ in 0..cfg.idle_clients {
            let mut c = http::Conn::connect(listen)?;
            c.get(&small, Some(SMALL_BYTES))?;
            held.push(c);
        }
        m.idle_edge_after_kib = settled_rss(&[epid])[0];
        m.idle_clients = held.len();
        m.idle_bytes_per_client = Some(
            m.idle_edge_after_kib.saturating_sub(m.idle_edge_before_kib) as f64 * 1024.0
                / held.len() as f64,
        );
        let step = (held.len() / 16).max(1);
        for c in held.iter_mut().step_by(step) {
            match c.get(&small, Some(SMALL_BYTES)) {
                Ok(_) => m.idle_checked += 1,
                Err(e) => note(&mut m.errors, &e),
            }
        }
        eprintln!(
            "cost: idle clients {}: edge {} → {} KiB, {:.0} bytes each",
            held.len(),
            m.idle_edge_before_kib,
            m.idle_edge_after_kib,
            m.idle_bytes_per_client.unwrap_or(f64::NAN)
        );
        drop(held);
        std::thread::sleep(SETTLE);
    }

    // Slow transfers held open.
    if cfg.active_streams > 0 {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let req = http::request(true, &host, SLOW_PATH);
        // Warm-up: the same kind of streams, fewer, then closed.
        rt.block_on(hold_slow(listen, &req, 64, Duration::from_secs(1)))?;
        if let [e, r] = settled_rss(&[epid, rpid])[..] {
            (m.active_edge_before_kib, m.active_remote_before_kib) = (e, r);
        }
        let half = cfg.active_streams / 2;
        let (n, flowing, answered, mid_rss, after) = rt.block_on(async {
            let mut counts: Vec<Arc<AtomicU64>> = Vec::new();
            let mut tasks = Vec::new();
            let mut mid_rss = (0, 0);
            for (k, want) in [half, cfg.active_streams - half].into_iter().enumerate() {
                for s in open_slow(listen, &req, want).await? {
                    let c = Arc::new(AtomicU64::new(0));
                    tasks.push(tokio::spawn(drain(s, Arc::clone(&c))));
                    counts.push(c);
                }
                tokio::time::sleep(SETTLE).await;
                if k == 0 {
                    let v = tokio::task::spawn_blocking(move || settled_rss(&[epid, rpid])).await?;
                    mid_rss = (v[0], v[1]);
                }
            }
            let mid: Vec<u64> = counts.iter().map(|c| c.load(Ordering::Relaxed)).collect();
            let t_mid = Instant::now();
            let v = tokio::task::spawn_blocking(move || settled_rss(&[epid, rpid])).await?;
            let after = (v[0], v[1]);
            // nginx sends a rate-limited reply in bursts (4 KiB every few seconds at 1 KiB/s):
            // give every stream time for more than one before asking whether it still flows.
            let window = Duration::from_secs_f64(8.0 / f64::from(cfg.slow_rate_kib.max(1)))
                .clamp(SETTLE, Duration::from_secs(15));
            tokio::time::sleep(window.saturating_sub(t_mid.elapsed())).await;
            let flowing = counts
                .iter()
                .zip(&mid)
                .filter(|(c, m)| c.load(Ordering::Relaxed) > **m)
                .count();
            let answered = counts
                .iter()
                .filter(|c| c.load(Ordering::Relaxed) > 0)
                .count();
            for t in &tasks {
                t.abort();
            }
            anyhow::Ok((tasks.len(), flowing, answered, mid_rss, after))
        })?;
        m.active_streams = n;
        m.active_streams_flowing = flowing;
        m.active_streams_answered = answered;
        if answered < n {
            m.errors.push(format!(
                "only {answered} of {n} slow transfers were answered 200: the memory deltas \
                 are not per active stream (see the edge's log in memory-edge/)"
            ));
        }
        (m.active_edge_half_kib, m.active_remote_half_kib) = mid_rss;
        (m.active_edge_after_kib, m.active_remote_after_kib) = after;
        let per = |a: u64, b: u64, k: usize| {
            (k > 0).then(|| b as f64 * 1024.0 / k as f64 - a as f64 * 1024.0 / k as f64)
        };
        m.active_edge_bytes_per_stream = per(m.active_edge_before_kib, m.active_edge_after_kib, n);
        m.active_remote_bytes_per_stream =
            per(m.active_remote_before_kib, m.active_remote_after_kib, n);
        m.active_edge_marginal_bytes_per_stream =
            per(m.active_edge_half_kib, m.active_edge_after_kib, n - half);
        m.active_remote_marginal_bytes_per_stream = per(
            m.active_remote_half_kib,
            m.active_remote_after_kib,
            n - half,
        );
        eprintln!(
            "cost: active streams {n} ({flowing} flowing): edge {:.0}, remote {:.0} bytes each \
             (second half: {:.0}, {:.0})",
            m.active_edge_bytes_per_stream.unwrap_or(f64::NAN),
            m.active_remote_bytes_per_stream.unwrap_or(f64::NAN),
            m.active_edge_marginal_bytes_per_stream.unwrap_or(f64::NAN),
            m.active_remote_marginal_bytes_per_stream
                .unwrap_or(f64::NAN)
        );
    }
    Ok(m)
}

/// Opens `n` connections to `addr` and sends `req` on each.
async fn open_slow(addr: SocketAddr, req: &[u8], n: usize) -> Result<Vec<tokio::net::TcpStream>> {
    use tokio::io::AsyncWriteExt;
    let mut v = Vec::with_capacity(n);
    for _ in 0..n {
        let mut s = tokio::net::TcpStream::connect(addr).await?;
        s.write_all(req).await?;
        v.push(s);
    }
    Ok(v)
}

/// The first bytes of a reply the slow transfers count as carried.
const OK_STATUS: &[u8] = b"HTTP/1.1 200 ";

/// Reads everything `s` sends, counting the bytes in `count`, until the end of the stream,
/// or at once if the reply is not a 200 (an edge's 503, a proxy's error page): such a
/// transfer is no active stream and leaves `count` at zero.
async fn drain(mut s: tokio::net::TcpStream, count: Arc<AtomicU64>) {
    use tokio::io::AsyncReadExt;
    let mut b = vec![0u8; 16 * 1024];
    let mut head = Vec::new();
    while let Ok(n) = s.read(&mut b).await {
        if n == 0 {
            return;
        }
        if head.len() < OK_STATUS.len() {
            head.extend_from_slice(&b[..n]);
            if head.len() < OK_STATUS.len() {
                continue;
            }
            if !head.starts_with(OK_STATUS) {
                return;
            }
            count.fetch_add(head.len() as u64, Ordering::Relaxed);
            continue;
        }
        count.fetch_add(n as u64, Ordering::Relaxed);
    }
}

/// Holds `n` slow transfers open for `d`, then closes them.
async fn hold_slow(addr: SocketAddr, req: &[u8], n: usize, d: Duration) -> Result<()> {
    let conns = open_slow(addr, req, n).await?;
    let tasks: Vec<_> = conns
        .into_iter()
        .map(|s| tokio::spawn(drain(s, Arc::new(AtomicU64::new(0)))))
        .collect();
    tokio::time::sleep(d).await;
    for t in tasks {
        t.abort();
    }
    Ok(())
}

/// Everything one run measured.
#[derive(Debug, Clone, Serialize)]
pub struct Results {
    /// When it started (UTC, RFC 3339).
    pub started: String,
    /// The machine and what else ran on it.
    pub machine: report::Machine,
    /// What was asked.
    pub config: Config,
    /// Latency per system.
    pub latency: Vec<LatencyRow>,
    /// Throughput runs.
    pub throughput: Vec<ThroughputRow>,
    /// longhaul's memory.
    pub memory: Option<MemoryResult>,
    /// The goals against what was measured.
    pub goals: Vec<report::Goal>,
    /// Systems or phases that could not run, and why.
    pub errors: Vec<String>,
}

/// Runs the benchmarks of `cfg` (inside the private namespace) and writes the results.
pub fn run(cfg: &Config) -> Result<Results> {
    for id in &cfg.systems {
        ensure!(
            id == "direct" || systems::lookup(id).is_some(),
            "unknown system {id} (one of {:?})",
            systems::ids()
        );
    }
    for p in &cfg.phases {
        ensure!(
            ["latency", "throughput", "memory"].contains(&p.as_str()),
            "unknown phase {p} (latency, throughput, memory)"
        );
    }
    std::fs::create_dir_all(&cfg.out)?;
    let dir = std::fs::canonicalize(&cfg.out)?;
    let started = report::now_rfc3339();
    let tck = procs::clock_ticks_per_second();
    let machine_start = report::Machine::observe();
    let bed = bed::LoopbackBed::up(cfg.link_rtt_ms, cfg.link_rate_mbit)?;
    // Everything this run starts is killed by pid if a signal stops it.
    let _cleanup = testbed::signals::on_signal(|| {
        for pid in procs::descendants(std::process::id()) {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
        }
    });
    let run_dir = dir.join("run");
    std::fs::create_dir_all(&run_dir)?;
    let large = cfg.throughput_mb * 1_000_000;
    let origin = Origin::start(&bed, &run_dir.join("origin"), large, cfg.slow_rate_kib)?;
    let mut errors = Vec::new();
    let mut latency_rows = Vec::new();
    let mut tp_rows = Vec::new();
    let phase = |p: &str| cfg.phases.iter().any(|x| x == p);
    if phase("latency") || phase("throughput") {
        let mut ids: Vec<&str> = vec!["direct"];
        ids.extend(
            cfg.systems
                .iter()
                .map(String::as_str)
                .filter(|s| *s != "direct"),
        );
        let mut sys = Vec::new();
        for (slot, id) in ids.iter().enumerate() {
            match start_system(&bed, &run_dir, &origin, id, slot, cfg) {
                Ok(s) => {
                    eprintln!(
                        "cost: {} started: {}",
                        s.spec.label(),
                        s.procs
                            .iter()
                            .map(|p| format!("{} ({})", p.label, p.pid))
                            .collect::<Vec<_>>()
                            .join(", ")
                    );
                    sys.push(s)
                }
                Err(e) => {
                    eprintln!("cost: could not start {id}: {e:#}");
                    errors.push(format!("could not start {id}: {e:#}"));
                }
            }
        }
        if phase("latency") {
            latency_rows = latency(cfg, &origin, &sys, tck);
        }
        if phase("throughput") {
            tp_rows = throughput(cfg, &origin, &sys, tck);
        }
        for s in &mut sys {
            if let Some(r) = s.running.as_mut() {
                if let Err(e) = r.check_alive() {
                    errors.push(format!("{:#}", e));
                }
            }
        }
    }
    let memory_result = if phase("memory") {
        match memory(&bed, &run_dir, cfg, &origin) {
            Ok(m) => Some(m),
            Err(e) => {
                eprintln!("cost: memory benchmark failed: {e:#}");
                errors.push(format!("memory: {e:#}"));
                None
            }
        }
    } else {
        None
    };
    let mut machine = machine_start;
    machine.finish();
    let mut res = Results {
        started,
        machine,
        config: cfg.clone(),
        latency: latency_rows,
        throughput: tp_rows,
        memory: memory_result,
        goals: Vec::new(),
        errors,
    };
    res.goals = report::goals(&res);
    std::fs::write(
        dir.join("results.json"),
        serde_json::to_string_pretty(&res)?,
    )?;
    std::fs::write(dir.join("summary.md"), report::summary(&res))?;
    Ok(res)
}
