//! `cost`: what longhaul's pair, HAProxy's HTTP/2 chain and Squid's chain cost end to end on
//! loopback, side by side in one run: latency added to small requests, throughput and CPU per
//! byte, memory per idle client and per active stream (see `longhaul_benches::cost`).
//!
//! It re-executes itself in a private network namespace (`unshare --net`, with a user
//! namespace when not root) and writes `results.json` and `summary.md` to `--out`.
#![forbid(unsafe_code)]

use anyhow::Result;
use clap::Parser;
use longhaul_benches::cost::{self, bed, Config};
use std::path::PathBuf;

#[derive(Parser)]
#[command(
    version,
    about = "End-to-end cost of longhaul and its peers on loopback: latency, CPU per byte, memory"
)]
struct Cli {
    /// Run directory: results.json, summary.md, and the run's configurations and logs in run/.
    #[arg(long, default_value = "cost-out")]
    out: PathBuf,
    /// Systems besides direct (comma-separated).
    #[arg(long, value_delimiter = ',', default_values_t = cost::DEFAULT_SYSTEMS.map(String::from))]
    systems: Vec<String>,
    /// Benchmarks to run (comma-separated): latency, throughput, memory.
    #[arg(long, value_delimiter = ',', default_values_t = ["latency", "throughput", "memory"].map(String::from))]
    phases: Vec<String>,
    /// Timed 1 KiB requests per system and round.
    #[arg(long, default_value_t = 2000)]
    requests: usize,
    /// Untimed requests first on each connection.
    #[arg(long, default_value_t = 50)]
    warmup: usize,
    /// Latency rounds (systems shuffled per round).
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    /// Concurrent large transfers.
    #[arg(long, default_value_t = 32)]
    clients: usize,
    /// Size of each large transfer, MB.
    #[arg(long, default_value_t = 20)]
    mb: u64,
    /// Throughput rounds.
    #[arg(long, default_value_t = 3)]
    throughput_rounds: usize,
    /// Idle keep-alive clients held open at the edge.
    #[arg(long, default_value_t = 10_000)]
    idle_clients: usize,
    /// Slow transfers held open through the pair.
    #[arg(long, default_value_t = 1000)]
    active_streams: usize,
    /// Rate of each slow transfer, KiB/s.
    #[arg(long, default_value_t = 1)]
    slow_rate_kib: u32,
    /// longhaul's pool connections.
    #[arg(long, default_value_t = 10)]
    pool_size: u32,
    /// Round trip of the long link the proxies size windows for, ms (longhaul's default).
    #[arg(long, default_value_t = 130.0)]
    link_rtt_ms: f64,
    /// Rate of that link, Mbit/s (longhaul's default).
    #[arg(long, default_value_t = 100.0)]
    link_rate_mbit: f64,
    /// Seed of the shuffled orders.
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    if !bed::in_private_netns() {
        std::process::exit(bed::reexec_in_private_netns()?);
    }
    testbed::signals::tear_down_on_signals("cost")?;
    let cfg = Config {
        out: cli.out,
        systems: cli.systems,
        phases: cli.phases,
        latency_requests: cli.requests,
        latency_warmup: cli.warmup,
        latency_rounds: cli.rounds,
        throughput_clients: cli.clients,
        throughput_mb: cli.mb,
        throughput_rounds: cli.throughput_rounds,
        idle_clients: cli.idle_clients,
        active_streams: cli.active_streams,
        slow_rate_kib: cli.slow_rate_kib,
        pool_size: cli.pool_size,
        link_rtt_ms: cli.link_rtt_ms,
        link_rate_mbit: cli.link_rate_mbit,
        seed: cli.seed,
    };
    let r = cost::run(&cfg)?;
    print!("{}", cost::report::summary(&r));
    Ok(())
}
