//! `edge-proxy`: the near-side longhaul binary. Run with no arguments for the local demo
//! (127.0.0.1:3128 → remote 127.0.0.1:4443); see `--help` and the README for the rest.
#![forbid(unsafe_code)]

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use app::config::{load_toml, CarrierName, LogFormat, PolicyName, TlsSection};
use clap::Parser;
use edge_proxy::client::ConnectReply;
use edge_proxy::config::{EdgeConfig, TransparentConfig};
use edge_proxy::pool_transport::{pool_config, start_pool, tls_client};
use edge_proxy::server::{self, Interception, Listeners};
use ipnet::IpNet;
use tokio::net::TcpListener;

/// Near-side longhaul proxy: HTTP/1.1 forward proxy, CONNECT and transparent interception,
/// carried over a pool of warm connections to a remote proxy.
#[derive(Debug, Parser)]
#[command(name = "edge-proxy", version, args_conflicts_with_subcommands = true)]
struct Args {
    #[command(subcommand)]
    cmd: Option<Cmd>,
    /// TOML configuration file; the flags below override it.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Validate the configuration and exit (0 = valid, 1 = invalid).
    #[arg(long)]
    check_config: bool,
    /// Explicit proxy listen address.
    #[arg(long)]
    listen: Option<SocketAddr>,
    /// Remote proxy host:port; repeat for several remotes (replaces pool.remote/pool.remotes).
    #[arg(long)]
    remote: Vec<String>,
    /// Number of pool connections.
    #[arg(long)]
    connections: Option<usize>,
    /// Pool scheduling policy.
    #[arg(long, value_enum)]
    policy: Option<PolicyName>,
    /// TCP congestion control of pool connections (bbr, cubic, reno).
    #[arg(long)]
    congestion: Option<String>,
    /// Transport of the pool connections (quic needs TLS files).
    #[arg(long, value_enum)]
    carrier: Option<CarrierName>,
    /// How CONNECT is answered.
    #[arg(long, value_enum)]
    connect_reply: Option<ConnectReplyArg>,
    /// Also listen here for iptables-REDIRECTed connections.
    #[arg(long)]
    transparent: Option<SocketAddr>,
    /// Ports CONNECT may reach, comma-separated (`443,8443`), or `any`; replaces connect_ports.
    #[arg(long, value_name = "PORTS", value_parser = parse_ports)]
    connect_ports: Option<PortList>,
    /// Client network allowed to use the proxy (repeatable; replaces the configured list).
    #[arg(long = "allow-client")]
    allow_client: Vec<IpNet>,
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
    /// Mutual TLS with the files `gen-keys --out DIR` wrote (DIR/edge.pem, DIR/edge.key,
    /// DIR/ca.pem); replaces the [pool.tls] file paths.
    #[arg(long, value_name = "DIR")]
    tls_dir: Option<PathBuf>,
    /// Serve Prometheus metrics on http://ADDR/metrics (replaces `[metrics] listen`).
    #[arg(long, value_name = "ADDR")]
    metrics_listen: Option<SocketAddr>,
}

/// A `--connect-ports` value (empty = any port).
#[derive(Debug, Clone)]
struct PortList(Vec<u16>);

fn parse_ports(s: &str) -> Result<PortList, String> {
    if s == "any" {
        return Ok(PortList(Vec::new()));
    }
    s.split(',')
        .map(|p| match p.trim().parse::<u16>() {
            Ok(n) if n > 0 => Ok(n),
            _ => Err(format!("{p:?} is not a port (1-65535) or `any`")),
        })
        .collect::<Result<_, _>>()
        .map(PortList)
}

#[derive(Debug, clap::Subcommand)]
enum Cmd {
    /// Make a deployment CA and edge/remote certificates for the pool's mutual TLS.
    GenKeys(app::keys::GenKeysArgs),
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum ConnectReplyArg {
    Optimistic,
    AfterConnect,
}

fn load(args: &Args) -> anyhow::Result<EdgeConfig> {
    let mut cfg: EdgeConfig = match &args.config {
        Some(p) => load_toml(p)?,
        None => EdgeConfig::default(),
    };
    if let Some(v) = args.listen {
        cfg.listen = v;
    }
    match args.remote.as_slice() {
        [] => {}
        [one] => {
            cfg.pool.remote = one.clone();
            cfg.pool.remotes.clear();
        }
        many => {
            cfg.pool.remote = edge_proxy::config::DEFAULT_REMOTE.into();
            cfg.pool.remotes = many.to_vec();
        }
    }
    if let Some(v) = args.connections {
        cfg.pool.connections = v;
    }
    if let Some(v) = args.policy {
        cfg.pool.policy = v;
    }
    if let Some(v) = &args.congestion {
        cfg.pool.congestion = v.clone();
    }
    if let Some(v) = args.carrier {
        cfg.pool.carrier = v;
    }
    if let Some(v) = args.connect_reply {
        cfg.connect_reply = match v {
            ConnectReplyArg::Optimistic => ConnectReply::Optimistic,
            ConnectReplyArg::AfterConnect => ConnectReply::AfterConnect,
        };
    }
    if let Some(v) = args.transparent {
        match &mut cfg.transparent {
            Some(t) => t.listen = v,
            None => {
                cfg.transparent = Some(TransparentConfig {
                    listen: v,
                    tproxy: false,
                    http_ports: edge_proxy::config::DEFAULT_TRANSPARENT_HTTP_PORTS.to_vec(),
                })
            }
        }
    }
    if let Some(p) = &args.connect_ports {
        cfg.connect_ports = p.0.clone();
    }
    if !args.allow_client.is_empty() {
        cfg.allowed_clients = args.allow_client.clone();
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
        let name = cfg.pool.tls.as_ref().and_then(|t| t.server_name.clone());
        cfg.pool.tls = Some(TlsSection {
            server_name: name,
            ..TlsSection::from_dir(d, "edge")
        });
    }
    cfg.validate()
        .map_err(|e| anyhow::anyhow!("invalid configuration: {e}"))?;
    pool_config(&cfg)
        .validate()
        .map_err(|e| anyhow::anyhow!("invalid pool configuration: {e}"))?;
    // Load the key files now so that --check-config reports them.
    tls_client(&cfg).map_err(|e| anyhow::anyhow!("invalid configuration: {e}"))?;
    Ok(cfg)
}

fn transparent_listener(t: &TransparentConfig) -> std::io::Result<TcpListener> {
    let sock = socket2::Socket::new(
        socket2::Domain::for_address(t.listen),
        socket2::Type::STREAM,
        Some(socket2::Protocol::TCP),
    )?;
    sock.set_reuse_address(true)?;
    if t.tproxy {
        sock.set_ip_transparent(true)?;
    }
    sock.set_nonblocking(true)?;
    sock.bind(&t.listen.into())?;
    sock.listen(1024)?;
    TcpListener::from_std(sock.into())
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

/// SIGHUP re-reads the TLS files (new pool connections use them, established ones continue)
/// and the configuration, logging which of its changes need a restart.
async fn reload_on_sighup(
    tls: Option<Arc<pool::tls::TlsClient>>,
    mut running: EdgeConfig,
    reread: impl Fn() -> anyhow::Result<EdgeConfig>,
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
            None => tracing::info!("SIGHUP: no [pool.tls] configured, no key files to reload"),
        }
        app::notify::ready("reloaded");
    }
}

async fn run(
    cfg: EdgeConfig,
    reread: impl Fn() -> anyhow::Result<EdgeConfig> + Send + 'static,
    log: app::logging::LogControl,
) -> anyhow::Result<()> {
    let proxy = TcpListener::bind(cfg.listen)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {}: {e}", cfg.listen))?;
    let transparent = match &cfg.transparent {
        Some(t) => Some(
            transparent_listener(t)
                .map_err(|e| anyhow::anyhow!("cannot listen on {} (transparent): {e}", t.listen))?,
        ),
        None => None,
    };
    let tls = tls_client(&cfg).map_err(|e| anyhow::anyhow!("{e}"))?;
    let metrics = app::metrics::start(&cfg.metrics).await?;
    let pool = start_pool(&cfg, tls.clone())?;
    for r in pool.remotes() {
        let p = r.pool.clone();
        app::metrics::global().add_pool(r.name.clone(), Arc::new(move || p.stats()));
        let p = r.pool.clone();
        app::metrics::global().add_open_queue(r.name.clone(), Arc::new(move || p.open_waiting()));
        let p = r.pool.clone();
        app::metrics::global().add_stream_limit(r.name.clone(), Arc::new(move || p.stream_limit()));
    }
    tokio::spawn(reload_on_sighup(tls, cfg.clone(), reread, log));
    tracing::info!(
        listen = %cfg.listen,
        transparent = ?cfg.transparent.as_ref().map(|t| t.listen),
        remotes = ?cfg.pool.remote_list(),
        connections = cfg.pool.connections,
        tls = cfg.pool.tls.is_some(),
        mode = ?cfg.mode(),
        "edge-proxy starting"
    );
    if pool
        .ready(Duration::from_millis(cfg.pool.ready_timeout_ms))
        .await
    {
        tracing::info!("pool connected");
    } else {
        tracing::warn!(remotes = ?cfg.pool.remote_list(), "no pool connection yet; requests get 502 until one is up");
    }
    app::notify::spawn_watchdog();
    app::notify::ready(&format!(
        "serving on {}{}",
        cfg.listen,
        metrics
            .map(|m| format!(", metrics on {m}"))
            .unwrap_or_default()
    ));
    let grace = Duration::from_millis(cfg.drain_grace_ms);
    let interception = match &cfg.transparent {
        Some(t) if t.tproxy => Interception::Tproxy,
        _ => Interception::Redirect,
    };
    server::run(
        pool.clone(),
        cfg.settings(),
        Listeners { proxy, transparent },
        interception,
        shutdown_signal(),
        grace,
    )
    .await;
    pool.close(Duration::from_secs(2)).await;
    Ok(())
}

fn main() -> ExitCode {
    let args = Arc::new(Args::parse());
    if let Some(Cmd::GenKeys(g)) = &args.cmd {
        return app::keys::run("edge-proxy", g);
    }
    let cfg = match load(&args) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("edge-proxy: {e}");
            return ExitCode::from(1);
        }
    };
    if args.check_config {
        println!(
            "edge-proxy: configuration OK (mode {:?}, pool {})",
            cfg.mode(),
            if cfg.pool.tls.is_some() {
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
            eprintln!("edge-proxy: cannot start the runtime: {e}");
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
            tracing::error!("{e:#}");
            eprintln!("edge-proxy: {e:#}");
            ExitCode::from(1)
        }
    }
}
