//! `remote-proxy`: the far-side longhaul binary. Run with no arguments for the local demo
//! (pool listener 127.0.0.1:4443, loopback origins allowed); see `--help` and the README.
#![forbid(unsafe_code)]

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use edge_proxy::config::{init_logging, load_toml, CarrierName, LogFormat, TlsSection};
use pool::tls::TlsServer;
use remote_proxy::config::RemoteConfig;
use remote_proxy::handler::Ctx;
use remote_proxy::pool_glue::{self, server_config};

/// Far-side longhaul proxy: accepts pool connections from edges, resolves names, fetches from
/// origins and streams replies back.
#[derive(Debug, Parser)]
#[command(name = "remote-proxy", version, args_conflicts_with_subcommands = true)]
struct Args {
    #[command(subcommand)]
    cmd: Option<Cmd>,
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
    /// Transport of the pool connections (quic needs TLS files).
    #[arg(long, value_enum)]
    carrier: Option<CarrierName>,
    /// Round-trip time of the long link in ms (sizes windows from the BDP).
    #[arg(long)]
    link_rtt_ms: Option<u32>,
    /// Rate of the long link in Mbit/s.
    #[arg(long)]
    link_rate_mbit: Option<u32>,
    /// Log format.
    #[arg(long, value_enum)]
    log_format: Option<LogFormat>,
    /// Mutual TLS with the files `gen-keys --out DIR` wrote (DIR/remote.pem, DIR/remote.key,
    /// DIR/ca.pem); replaces the [tls] file paths.
    #[arg(long, value_name = "DIR")]
    tls_dir: Option<PathBuf>,
}

#[derive(Debug, clap::Subcommand)]
enum Cmd {
    /// Make a deployment CA and edge/remote certificates for the pool's mutual TLS.
    GenKeys(edge_proxy::keys::GenKeysArgs),
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
    if let Some(v) = args.carrier {
        cfg.carrier = v;
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
    if let Some(d) = &args.tls_dir {
        cfg.tls = Some(TlsSection::from_dir(d, "remote"));
    }
    cfg.validate()
        .map_err(|e| anyhow::anyhow!("invalid configuration: {e}"))?;
    // Load the key files now so that --check-config reports them.
    tls_server(&cfg)?;
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

/// The remote's TLS server from `[tls]`, loaded now (errors name the file).
fn tls_server(cfg: &RemoteConfig) -> anyhow::Result<Option<Arc<TlsServer>>> {
    cfg.tls
        .as_ref()
        .map(|t| {
            TlsServer::new(t.files())
                .map(Arc::new)
                .map_err(|e| anyhow::anyhow!("invalid configuration: tls: {e}"))
        })
        .transpose()
}

/// SIGHUP re-reads the TLS files: new pool connections use them, established ones continue.
async fn reload_on_sighup(tls: Option<Arc<TlsServer>>) {
    use tokio::signal::unix::{signal, SignalKind};
    let Ok(mut hup) = signal(SignalKind::hangup()) else {
        return;
    };
    while hup.recv().await.is_some() {
        match &tls {
            Some(t) => match t.reload() {
                Ok(()) => tracing::info!("SIGHUP: TLS files reloaded for new pool connections"),
                Err(e) => {
                    tracing::warn!(error = %e, "SIGHUP: TLS files do not load; keeping the previous ones")
                }
            },
            None => tracing::info!("SIGHUP: no [tls] configured, nothing to reload"),
        }
    }
}

async fn run(cfg: RemoteConfig) -> anyhow::Result<()> {
    let tls = tls_server(&cfg)?;
    let server = match &tls {
        Some(t) if cfg.carrier == CarrierName::Quic => {
            let quic = cfg.quic.options(&cfg.link, &cfg.congestion);
            pool::Server::bind_quic(cfg.listen, server_config(&cfg), t.clone(), quic).await
        }
        Some(t) => {
            let up: Arc<dyn pool::Upgrader> = t.clone();
            pool::Server::bind_with(cfg.listen, server_config(&cfg), up).await
        }
        None => pool::Server::bind(cfg.listen, server_config(&cfg)).await,
    }
    .map_err(|e| anyhow::anyhow!("cannot listen on {}: {e}", cfg.listen))?;
    tokio::spawn(reload_on_sighup(tls));
    let policy = cfg.policy();
    tracing::info!(
        listen = %server.local_addr(),
        mode = ?cfg.mode(),
        tls = cfg.tls.is_some(),
        carrier = ?cfg.carrier,
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
    if let Some(Cmd::GenKeys(g)) = &args.cmd {
        return edge_proxy::keys::run("remote-proxy", g);
    }
    let cfg = match load(&args) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("remote-proxy: {e}");
            return ExitCode::from(1);
        }
    };
    if args.check_config {
        println!(
            "remote-proxy: configuration OK (mode {:?}, pool {})",
            cfg.mode(),
            if cfg.tls.is_some() {
                "mutual TLS 1.3"
            } else {
                "plaintext TCP, loopback only"
            }
        );
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
