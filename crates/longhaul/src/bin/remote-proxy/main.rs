//! `remote-proxy`: the far-side longhaul binary. Run with no arguments for the local demo
//! (pool listener 127.0.0.1:4443, loopback origins allowed); see `--help` and the README.
#![forbid(unsafe_code)]

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use app::config::{load_toml, CarrierName, LogFormat, PolicyName, TlsSection};
use clap::Parser;
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
    /// How replies are placed on the pool connections (replaces `reply_policy`).
    #[arg(long, value_enum)]
    reply_policy: Option<PolicyName>,
    /// Round-trip time of the long link in ms (sizes windows from the BDP).
    #[arg(long)]
    link_rtt_ms: Option<u32>,
    /// Rate of the long link in Mbit/s.
    #[arg(long)]
    link_rate_mbit: Option<u32>,
    /// Per-stream window in bandwidth-delay products (`link.stream_window_bdp`).
    #[arg(long)]
    stream_window_bdp: Option<u32>,
    /// Log format.
    #[arg(long, value_enum)]
    log_format: Option<LogFormat>,
    /// Log level filter, e.g. `info` or `warn,access=info` (replaces `log_level`; `RUST_LOG`
    /// wins over both).
    #[arg(long, value_name = "FILTER")]
    log_level: Option<String>,
    /// Mutual TLS with the files `gen-keys --out DIR` wrote (DIR/remote.pem, DIR/remote.key,
    /// DIR/ca.pem); replaces the [tls] file paths.
    #[arg(long, value_name = "DIR")]
    tls_dir: Option<PathBuf>,
    /// Serve Prometheus metrics on http://ADDR/metrics (replaces `[metrics] listen`).
    #[arg(long, value_name = "ADDR")]
    metrics_listen: Option<SocketAddr>,
}

#[derive(Debug, clap::Subcommand)]
enum Cmd {
    /// Make a deployment CA and edge/remote certificates for the pool's mutual TLS.
    GenKeys(app::keys::GenKeysArgs),
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
    if let Some(v) = args.reply_policy {
        cfg.reply_policy = v;
    }
    if let Some(v) = args.link_rtt_ms {
        cfg.link.rtt_ms = v;
    }
    if let Some(v) = args.link_rate_mbit {
        cfg.link.rate_mbit = v;
    }
    if let Some(v) = args.stream_window_bdp {
        cfg.link.stream_window_bdp = v;
    }
    if let Some(v) = args.log_format {
        cfg.log_format = v;
    }
    if let Some(v) = &args.log_level {
        cfg.log_level = v.clone();
    }
    app::logging::parse_level(&cfg.log_level)
        .map_err(|e| anyhow::anyhow!("invalid configuration: {e}"))?;
    if let Some(v) = args.metrics_listen {
        cfg.metrics.listen = Some(v);
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
    app::notify::stopping();
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

/// SIGHUP re-reads the TLS files (new pool connections use them, established ones continue)
/// and the configuration, logging which of its changes need a restart.
async fn reload_on_sighup(
    tls: Option<Arc<TlsServer>>,
    mut running: RemoteConfig,
    reread: impl Fn() -> anyhow::Result<RemoteConfig>,
    mut log: app::logging::LogControl,
) {
    use tokio::signal::unix::{signal, SignalKind};
    let Ok(mut hup) = signal(SignalKind::hangup()) else {
        return;
    };
    while hup.recv().await.is_some() {
        app::notify::reloading();
        match reread() {
            Ok(new) => {
                let mut applied = false;
                match log.apply(&new.log_level) {
                    Ok(Some(what)) => {
                        applied = true;
                        tracing::info!("SIGHUP: {what} applied");
                        running.log_level = new.log_level.clone();
                    }
                    Ok(None) if log.from_env() && new.log_level != running.log_level => {
                        tracing::warn!("SIGHUP: RUST_LOG is set and wins over log_level");
                        running.log_level = new.log_level.clone();
                    }
                    Ok(None) => {}
                    Err(e) => tracing::warn!("SIGHUP: {e}"),
                }
                let changed = app::reload::changed_keys(&running, &new);
                if changed.is_empty() && !applied {
                    tracing::info!("SIGHUP: configuration unchanged");
                } else if !changed.is_empty() {
                    tracing::warn!(
                        keys = ?changed,
                        "SIGHUP: configuration changed; these keys take effect after a restart"
                    );
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "SIGHUP: configuration does not load; keeping the running one")
            }
        }
        match &tls {
            Some(t) => match t.reload() {
                Ok(()) => tracing::info!("SIGHUP: TLS files reloaded for new pool connections"),
                Err(e) => {
                    tracing::warn!(error = %e, "SIGHUP: TLS files do not load; keeping the previous ones")
                }
            },
            None => tracing::info!("SIGHUP: no [tls] configured, no key files to reload"),
        }
        app::notify::ready("reloaded");
    }
}

async fn run(
    cfg: RemoteConfig,
    reread: impl Fn() -> anyhow::Result<RemoteConfig> + Send + 'static,
    log: app::logging::LogControl,
) -> anyhow::Result<()> {
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
    let server = Arc::new(server);
    {
        let s = server.clone();
        app::metrics::global().add_pool("edges", Arc::new(move || s.stats()));
        let s = server.clone();
        app::metrics::global().add_admission("edges", Arc::new(move || s.admission()));
    }
    let metrics = app::metrics::start(&cfg.metrics).await?;
    tokio::spawn(reload_on_sighup(tls, cfg.clone(), reread, log));
    let policy = cfg.policy();
    tracing::info!(
        listen = %server.local_addr(),
        mode = ?cfg.mode(),
        tls = cfg.tls.is_some(),
        carrier = ?cfg.carrier,
        reply_policy = ?cfg.reply_policy,
        allow_private_targets = policy.allow_private,
        allowed_targets = ?policy.allowed_targets,
        static_hosts = policy.hosts.len(),
        "remote-proxy starting"
    );
    let ctx = Arc::new(Ctx::new(policy, cfg.settings()));
    app::notify::spawn_watchdog();
    app::notify::ready(&format!(
        "serving pool connections on {}{}",
        server.local_addr(),
        metrics
            .map(|m| format!(", metrics on {m}"))
            .unwrap_or_default()
    ));
    pool_glue::run_shared(
        server,
        ctx,
        shutdown_signal(),
        Duration::from_millis(cfg.drain_grace_ms),
    )
    .await;
    Ok(())
}

fn main() -> ExitCode {
    let args = Arc::new(Args::parse());
    if let Some(Cmd::GenKeys(g)) = &args.cmd {
        return app::keys::run("remote-proxy", g);
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
    let log = app::logging::init(cfg.log_format, &cfg.log_level);
    let rt = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("remote-proxy: cannot start the runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let reread = {
        let args = args.clone();
        move || load(&args)
    };
    match rt.block_on(run(cfg, reread, log)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("remote-proxy: {e:#}");
            ExitCode::from(1)
        }
    }
}
