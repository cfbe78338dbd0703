//! `pacing`: seed 002's Fig. 13 on the emulated long link (a 73 kB CUBIC flow against a CUBIC
//! elephant, IW 10..100, bursty against paced) and the same question for longhaul's warm pool
//! connections (CUBIC bursty, CUBIC paced, BBR). Needs root (network namespaces). Writes
//! results.json, summary.md and fct.svg to `--out`. See `longhaul_benches::pacing`.
#![forbid(unsafe_code)]

use anyhow::Result;
use clap::Parser;
use longhaul_benches::pacing::{self, FillRule, Options, PoolOptions, Sender};
use std::path::PathBuf;
use std::time::Duration;

#[derive(Parser)]
#[command(
    version,
    about = "Large initial windows with and without pacing against an elephant flow (seed 002)"
)]
struct Cli {
    /// Output directory (results.json, summary.md, fct.svg).
    #[arg(long)]
    out: PathBuf,
    /// Long-link round trips, ms.
    #[arg(long, value_delimiter = ',', default_values_t = [30u32, 130])]
    rtt_ms: Vec<u32>,
    /// Drop-tail queue sizes, multiples of the BDP.
    #[arg(long, value_delimiter = ',', default_values_t = [0.5f64, 1.5])]
    queue_bdp: Vec<f64>,
    /// Bottleneck rates, Mbit/s.
    #[arg(long, value_delimiter = ',', default_values_t = [10u32, 50])]
    rate_mbit: Vec<u32>,
    /// Initial windows, segments.
    #[arg(long, value_delimiter = ',', default_values_t = pacing::SEED_IWS.to_vec())]
    iw: Vec<u32>,
    /// Repetitions per short-flow cell.
    #[arg(long, default_value_t = 10)]
    reps: usize,
    /// Short-flow size, bytes.
    #[arg(long, default_value_t = pacing::SHORT_FLOW_BYTES)]
    short_bytes: u64,
    /// Rates (Mbit/s) of the beds the warm-connection part runs on ("none": skip it).
    #[arg(long, value_delimiter = ',', default_value = "50")]
    pool_rate_mbit: Vec<String>,
    /// Repetitions per warm-connection cell.
    #[arg(long, default_value_t = 10)]
    pool_reps: usize,
    /// Warm-connection reply sizes, bytes.
    #[arg(long, value_delimiter = ',', default_values_t = [73_000u64, 1_000_000])]
    pool_sizes: Vec<u64>,
    /// Warm-connection senders (cubic, cubic-paced, bbr).
    #[arg(long, value_delimiter = ',', default_values_t = Sender::ALL.map(|s| s.name().to_string()).to_vec())]
    pool_senders: Vec<String>,
    /// Warm-up transfer that grows the window, bytes.
    #[arg(long, default_value_t = 4_000_000)]
    warm_bytes: u64,
    /// Idle time before the measured reply, ms.
    #[arg(long, default_value_t = 2000)]
    idle_ms: u64,
    /// Longest wait for the elephant to fill the link, s.
    #[arg(long, default_value_t = 60)]
    fill_timeout_s: u64,
    /// Seed of the trial order.
    #[arg(long, default_value_t = 2)]
    seed: u64,
}

fn main() -> Result<()> {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .init();
    let c = Cli::parse();
    let pool_rates: Vec<u32> = if c.pool_rate_mbit.iter().any(|s| s == "none") {
        Vec::new()
    } else {
        c.pool_rate_mbit
            .iter()
            .map(|s| {
                s.parse()
                    .map_err(|e| anyhow::anyhow!("--pool-rate-mbit {s:?}: {e}"))
            })
            .collect::<Result<_>>()?
    };
    let senders = c
        .pool_senders
        .iter()
        .map(|s| s.parse())
        .collect::<Result<Vec<Sender>>>()?;
    let o = Options {
        beds: pacing::grid(&c.rtt_ms, &c.queue_bdp, &c.rate_mbit),
        iws: c.iw,
        reps: c.reps,
        short_bytes: c.short_bytes,
        pool: PoolOptions {
            rates_mbit: pool_rates,
            reps: c.pool_reps,
            sizes: c.pool_sizes,
            senders,
            warm_bytes: c.warm_bytes,
            idle: Duration::from_millis(c.idle_ms),
        },
        fill: FillRule {
            timeout: Duration::from_secs(c.fill_timeout_s),
            ..FillRule::default()
        },
        seed: c.seed,
    };
    let progress = |m: &str| eprintln!("pacing: {m}");
    let res = pacing::run(&o, &c.out, &progress)?;
    print!("{}", pacing::summary_md(&res));
    eprintln!("pacing: wrote {}", c.out.display());
    Ok(())
}
