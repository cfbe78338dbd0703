//! `remote-proxy`: the far-side longhaul binary. Run with no arguments for the local demo
//! (pool listener 127.0.0.1:4443, loopback origins allowed); see `--help` and the README.
#![forbid(unsafe_code)]

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use edge_proxy::config::{init_logging, load_toml, LogFormat};
use remote_proxy::config::RemoteConfig;
use remote_proxy::handler::Ctx;
use remote_proxy::pool_glue::{self, server_config};

/// Far-side longhaul proxy: accepts pool connections from edges, resolves names, fetches from
/// origins and streams replies back.
#[derive(Debug, Parser)]
#[command(name = "remote-proxy", version)]
struct Args {
    /// TOML configuration file; the flags below override it.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Validate the configuration and exit (0 = valid, 1 = invalid).
    #[arg(long)]
    check_config: bool,
    /// Pool listen address.
    #[arg(long)]
    listen: Option<SocketAddr>,
    /// Let the remote fetch from loopback/private origins.
    #[arg(long)]
    allow_private_targets: bool,
    /// TCP congestion control of pool connections (bbr, cubic, reno).
    #[arg(long)]
    congestion: Option<String>,
    /// Round-trip time of the long link in ms (sizes windows from the BDP).
    #[arg(long)]
    link_rtt_ms: Option<u32>,
    /// Rate of the long link in Mbit/s.
    #[arg(long)]
    link_rate_mbit: Option<u32>,
    /// Log format.
    #[arg(long, value_enum)]
    log_format: Option<LogFormat>,
}

fn load(args: &Args) -> anyhow::Result<RemoteConfig> {
    let mut cfg: RemoteConfig = match &args.config {
        Some(p) => load_toml(p)?,
        None => RemoteConfig::default(),
    };
    if let Some(v) = args.listen {
        cfg.listen = v;
    }
    if args.allow_private_targets {
        cfg.allow_private_targets = Some(true);
    }
    if let Some(v) = &args.congestion {
        cfg.congestion = v.clone();
    }
    if let Some(v) = args.link_rtt_ms {
        cfg.link.rtt_ms = v;
    }
    if let Some(v) = args.link_rate_mbit {
        cfg.link.rate_mbit = v;
    }
    if let Some(v) = args.log_format {
        cfg.log_format = v;
    }
    cfg.validate()
        .map_err(|e| anyhow::anyhow!("invalid configuration: {e}"))?;
    server_config(&cfg)
        .mux
        .validate()
        .map_err(|e| anyhow::anyhow!("invalid protocol limits: {e}"))?;
    Ok(cfg)
}

async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
    let mut int = signal(SignalKind::interrupt()).expect("SIGINT handler");
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM: draining"),
        _ = int.recv() => tracing::info!("SIGINT: draining"),
    }
}

async fn run(cfg: RemoteConfig) -> anyhow::Result<()> {
    let server = pool::Server::bind(cfg.listen, server_config(&cfg))
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {}: {e}", cfg.listen))?;
    let policy = cfg.policy();
    tracing::info!(
        listen = %server.local_addr(),
        mode = ?cfg.mode(),
        allow_private_targets = policy.allow_private,
        "remote-proxy starting"
    );
    let ctx = Arc::new(Ctx::new(policy, cfg.settings()));
    pool_glue::run(
        server,
        ctx,
        shutdown_signal(),
        Duration::from_millis(cfg.drain_grace_ms),
    )
    .await;
    Ok(())
}

fn main() -> ExitCode {
    let args = Args::parse();
    let cfg = match load(&args) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("remote-proxy: {e}");
            return ExitCode::from(1);
        }
    };
    if args.check_config {
        println!("remote-proxy: configuration OK (mode {:?})", cfg.mode());
        return ExitCode::SUCCESS;
    }
    init_logging(cfg.log_format);
    let rt = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("remote-proxy: cannot start the runtime: {e}");
            return ExitCode::from(1);
        }
    };
    match rt.block_on(run(cfg)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("remote-proxy: {e:#}");
            ExitCode::from(1)
        }
    }
}
