//! The process around either proxy, written once for both binaries: the command line (the
//! flags both share, `gen-keys`, `--help`), loading the configuration (file or embedded
//! defaults, then flags, then validation), `--check-config`, logging and runtime start-up, the
//! SIGHUP reload loop and the SIGTERM/SIGINT shutdown signal.
//!
//! What it does NOT do: know either proxy's own keys or flags (each proxy's `cli` module
//! applies them), bind listeners or start pools (each proxy's `service::run` does), or apply
//! configuration changes other than `log_level` and the TLS files to a running process
//! ([`crate::reload`] says why).

use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::config::{load_toml, CarrierName, LinkConfig, LogFormat, Mode};
use crate::logging::LogControl;
use crate::metrics::MetricsConfig;

/// What the shared process code needs from a binary's configuration.
pub trait ProcessConfig: Clone + Default + DeserializeOwned + Serialize + Send + 'static {
    /// The mode in force.
    fn mode(&self) -> Mode;
    /// Whether the pool runs mutual TLS (else plaintext TCP on loopback).
    fn pool_tls(&self) -> bool;
    /// The log format.
    fn log_format(&self) -> LogFormat;
    /// The log level filter.
    fn log_level(&self) -> &str;
    /// Sets the log level filter (a reload applied it).
    fn set_log_level(&mut self, level: &str);
    /// The listen address (`--listen` sets it).
    fn listen_mut(&mut self) -> &mut SocketAddr;
    /// The sections the shared flags set.
    fn common_mut(&mut self) -> Common<'_>;
    /// Checks ranges and cross-field rules; the error says which key is wrong and why.
    fn validate(&self) -> Result<(), String>;
}

/// The parts of a configuration the flags both binaries share set.
#[derive(Debug)]
pub struct Common<'a> {
    /// `[link]`.
    pub link: &'a mut LinkConfig,
    /// `log_format`.
    pub log_format: &'a mut LogFormat,
    /// `log_level`.
    pub log_level: &'a mut String,
    /// `[metrics]`.
    pub metrics: &'a mut MetricsConfig,
}

/// Implements [`ProcessConfig`] for a configuration type with `mode()` and `validate()`
/// methods and `listen`, `link`, `log_format`, `log_level` and `metrics` fields, given the
/// field path of its pool TLS section: `app::process_config!(EdgeConfig, tls: pool.tls);`.
#[macro_export]
macro_rules! process_config {
    ($t:ty, tls: $($tls:ident).+) => {
        impl $crate::process::ProcessConfig for $t {
            fn mode(&self) -> $crate::config::Mode {
                <$t>::mode(self)
            }
            fn pool_tls(&self) -> bool {
                self.$($tls).+.is_some()
            }
            fn log_format(&self) -> $crate::config::LogFormat {
                self.log_format
            }
            fn log_level(&self) -> &str {
                &self.log_level
            }
            fn set_log_level(&mut self, level: &str) {
                self.log_level = level.into();
            }
            fn listen_mut(&mut self) -> &mut std::net::SocketAddr {
                &mut self.listen
            }
            fn common_mut(&mut self) -> $crate::process::Common<'_> {
                $crate::process::Common {
                    link: &mut self.link,
                    log_format: &mut self.log_format,
                    log_level: &mut self.log_level,
                    metrics: &mut self.metrics,
                }
            }
            fn validate(&self) -> Result<(), String> {
                <$t>::validate(self)
            }
        }
    };
}

/// Key files a SIGHUP re-reads (the pool's TLS client on the edge, TLS server on the remote).
pub trait KeyFiles: Send + Sync {
    /// Re-reads the files; new pool connections use them.
    fn reload(&self) -> Result<(), String>;
}

impl KeyFiles for pool::tls::TlsClient {
    fn reload(&self) -> Result<(), String> {
        pool::tls::TlsClient::reload(self).map_err(|e| e.to_string())
    }
}

impl KeyFiles for pool::tls::TlsEndpoint {
    fn reload(&self) -> Result<(), String> {
        pool::tls::TlsEndpoint::reload(self).map_err(|e| e.to_string())
    }
}

impl KeyFiles for pool::tls::TlsServer {
    fn reload(&self) -> Result<(), String> {
        pool::tls::TlsServer::reload(self).map_err(|e| e.to_string())
    }
}

/// The configuration file, `--check-config` and the listen address (first in `--help`; the
/// help of `--listen` is each binary's, see [`Help`]).
#[derive(Debug, Clone, clap::Args)]
pub struct StartFlags {
    /// TOML configuration file; the flags below override it.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Validate the configuration and exit (0 = valid, 1 = invalid).
    #[arg(long)]
    pub check_config: bool,
    /// Listen address.
    #[arg(long)]
    pub listen: Option<SocketAddr>,
}

impl StartFlags {
    /// The configuration file (or the embedded defaults) with `--listen` applied.
    pub fn read<C: ProcessConfig>(&self) -> anyhow::Result<C> {
        let mut cfg: C = match &self.config {
            Some(p) => load_toml(p)?,
            None => C::default(),
        };
        if let Some(v) = self.listen {
            *cfg.listen_mut() = v;
        }
        Ok(cfg)
    }
}

/// A binary's own flags (between the shared ones in `--help`) and the rules of its
/// configuration that are its own.
pub trait Flags: clap::Args + Send + Sync + 'static {
    /// The binary's configuration.
    type Config: ProcessConfig;
    /// Applies the binary's own flags.
    fn apply(&self, cfg: &mut Self::Config);
    /// Uses the key files `gen-keys --out dir` wrote (`--tls-dir`).
    fn use_tls_dir(cfg: &mut Self::Config, dir: &Path);
    /// Checks what `validate` does not: settings derived for the pool, and the key files,
    /// loaded now so that `--check-config` reports them.
    fn check(cfg: &Self::Config) -> anyhow::Result<()>;
}

/// The texts of a binary's `--help` that are its own.
#[derive(Debug, Clone, Copy)]
pub struct Help {
    /// What the binary is (the first line of `--help`).
    pub about: &'static str,
    /// Help of `--listen`.
    pub listen: &'static str,
    /// Help of `--tls-dir` (which files it names).
    pub tls_dir: &'static str,
}

/// The command line of both binaries: `gen-keys`, or the flags.
#[derive(Debug, clap::Parser)]
#[command(version, args_conflicts_with_subcommands = true)]
struct Cli<F: clap::Args> {
    #[command(subcommand)]
    cmd: Option<Cmd>,
    #[command(flatten)]
    start: StartFlags,
    #[command(flatten)]
    flags: F,
    #[command(flatten)]
    common: CommonFlags,
}

impl<F: Flags> Cli<F> {
    /// The configuration in force: the file (or the embedded defaults), the flags in `--help`
    /// order, validation, the binary's own checks.
    fn load(&self) -> anyhow::Result<F::Config> {
        let mut cfg: F::Config = self.start.read()?;
        self.flags.apply(&mut cfg);
        self.common.apply(&mut cfg)?;
        if let Some(d) = &self.common.tls_dir {
            F::use_tls_dir(&mut cfg, d);
        }
        cfg.validate()
            .map_err(|e| anyhow::anyhow!("invalid configuration: {e}"))?;
        F::check(&cfg)?;
        Ok(cfg)
    }
}

#[derive(Debug, clap::Subcommand)]
enum Cmd {
    /// Make a deployment CA and edge/remote certificates for the pool's mutual TLS.
    GenKeys(crate::keys::GenKeysArgs),
}

/// The whole binary `prog` with its own flags `F`: parses the command line (`--help` with
/// `help`'s texts; `gen-keys` runs here), then [`main`] with the loading the flags describe
/// and `run`.
pub fn cli<F, Fut>(
    prog: &'static str,
    help: Help,
    run: impl FnOnce(F::Config, Reload<F::Config>) -> Fut,
) -> ExitCode
where
    F: Flags,
    Fut: Future<Output = anyhow::Result<()>>,
{
    use clap::{CommandFactory, FromArgMatches};
    let cmd = Cli::<F>::command()
        .name(prog)
        .about(help.about)
        .mut_arg("listen", |a| a.help(help.listen))
        .mut_arg("tls_dir", |a| a.help(help.tls_dir));
    let cli = match Cli::<F>::from_arg_matches(&cmd.get_matches()) {
        Ok(c) => c,
        Err(e) => e.exit(),
    };
    if let Some(Cmd::GenKeys(g)) = &cli.cmd {
        return crate::keys::run(prog, g);
    }
    let check = cli.start.check_config;
    main(prog, check, move || cli.load(), run)
}

/// The pool connections' congestion control and carrier.
#[derive(Debug, Clone, clap::Args)]
pub struct CarrierFlags {
    /// Congestion control of pool connections (bbr, cubic, reno; rate with QUIC; default:
    /// rate for QUIC connections, bbr for TCP).
    #[arg(long)]
    pub congestion: Option<String>,
    /// Transport of the pool connections (quic needs TLS files).
    #[arg(long, value_enum)]
    pub carrier: Option<CarrierName>,
    /// Parity datagrams on QUIC pool connections (`[quic] parity`).
    #[arg(long, value_enum)]
    pub quic_parity: Option<crate::config::ParityName>,
}

impl CarrierFlags {
    /// Overrides the configured values.
    pub fn apply(
        &self,
        congestion: &mut Option<String>,
        carrier: &mut CarrierName,
        quic: &mut crate::config::QuicSection,
    ) {
        if let Some(v) = &self.congestion {
            *congestion = Some(v.clone());
        }
        if let Some(v) = self.carrier {
            *carrier = v;
        }
        if let Some(v) = self.quic_parity {
            quic.parity = v;
        }
    }
}

/// The long link, logging, TLS files and metrics (last in `--help`).
#[derive(Debug, Clone, clap::Args)]
pub struct CommonFlags {
    /// Round-trip time of the long link in ms (sizes windows from the BDP).
    #[arg(long)]
    pub link_rtt_ms: Option<u32>,
    /// Rate of the long link in Mbit/s.
    #[arg(long)]
    pub link_rate_mbit: Option<u32>,
    /// Largest per-stream receive window in bandwidth-delay products (`link.stream_window_bdp`).
    #[arg(long)]
    pub stream_window_bdp: Option<u32>,
    /// Log format.
    #[arg(long, value_enum)]
    pub log_format: Option<LogFormat>,
    /// Log level filter, e.g. `info` or `warn,access=info` (replaces `log_level`; `RUST_LOG`
    /// wins over both).
    #[arg(long, value_name = "FILTER")]
    pub log_level: Option<String>,
    /// Mutual TLS with the files `gen-keys --out DIR` wrote; replaces the TLS file paths.
    #[arg(long, value_name = "DIR")]
    pub tls_dir: Option<PathBuf>,
    /// Serve Prometheus metrics on http://ADDR/metrics (replaces `[metrics] listen`).
    #[arg(long, value_name = "ADDR")]
    pub metrics_listen: Option<SocketAddr>,
}

impl CommonFlags {
    /// Overrides the configured values (`--tls-dir` is left to [`Flags::use_tls_dir`]: the
    /// sections differ) and checks the resulting log level.
    fn apply<C: ProcessConfig>(&self, cfg: &mut C) -> anyhow::Result<()> {
        let Common {
            link,
            log_format,
            log_level,
            metrics,
        } = cfg.common_mut();
        if let Some(v) = self.link_rtt_ms {
            link.rtt_ms = v;
        }
        if let Some(v) = self.link_rate_mbit {
            link.rate_mbit = v;
        }
        if let Some(v) = self.stream_window_bdp {
            link.stream_window_bdp = v;
        }
        if let Some(v) = self.log_format {
            *log_format = v;
        }
        if let Some(v) = &self.log_level {
            *log_level = v.clone();
        }
        crate::logging::parse_level(log_level)
            .map_err(|e| anyhow::anyhow!("invalid configuration: {e}"))?;
        if let Some(v) = self.metrics_listen {
            metrics.listen = Some(v);
        }
        Ok(())
    }
}

/// Re-reads the configuration (the file and flags the process started with).
pub type Reread<C> = Box<dyn Fn() -> anyhow::Result<C> + Send + Sync>;

/// What a reload needs: the configuration in force, how to re-read it, and the log filter.
pub struct Reload<C> {
    running: C,
    reread: Reread<C>,
    log: LogControl,
}

impl<C: ProcessConfig> Reload<C> {
    /// Spawns the SIGHUP loop: each SIGHUP re-reads the configuration, applies a changed
    /// `log_level`, logs which other keys changed (they need a restart), re-reads the key
    /// files of `tls` (`section` names them in the log when there are none) and tells systemd.
    pub fn spawn(self, tls: Option<Arc<dyn KeyFiles>>, section: &'static str) {
        tokio::spawn(reload_on_sighup(self, tls, section));
    }
}

async fn reload_on_sighup<C: ProcessConfig>(
    r: Reload<C>,
    tls: Option<Arc<dyn KeyFiles>>,
    section: &'static str,
) {
    use tokio::signal::unix::{signal, SignalKind};
    let Reload {
        mut running,
        reread,
        mut log,
    } = r;
    let Ok(mut hup) = signal(SignalKind::hangup()) else {
        return;
    };
    while hup.recv().await.is_some() {
        crate::notify::reloading();
        match reread() {
            Ok(new) => {
                let mut applied = false;
                match log.apply(new.log_level()) {
                    Ok(Some(what)) => {
                        applied = true;
                        tracing::info!("SIGHUP: {what} applied");
                        running.set_log_level(new.log_level());
                    }
                    Ok(None) if log.from_env() && new.log_level() != running.log_level() => {
                        tracing::warn!("SIGHUP: RUST_LOG is set and wins over log_level");
                        running.set_log_level(new.log_level());
                    }
                    Ok(None) => {}
                    Err(e) => tracing::warn!("SIGHUP: {e}"),
                }
                let changed = crate::reload::changed_keys(&running, &new);
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
                crate::metrics::global().reload_failed("config");
                tracing::warn!(error = %e, "SIGHUP: configuration does not load; keeping the running one")
            }
        }
        match &tls {
            Some(t) => match t.reload() {
                Ok(()) => tracing::info!("SIGHUP: TLS files reloaded for new connections"),
                Err(e) => {
                    crate::metrics::global().reload_failed("tls");
                    tracing::warn!(error = %e, "SIGHUP: TLS files do not load; keeping the previous ones")
                }
            },
            None => tracing::info!("SIGHUP: no {section} configured, no key files to reload"),
        }
        crate::notify::ready("reloaded");
    }
}

/// Completes on SIGTERM or SIGINT, after telling systemd the service is stopping.
pub async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
    let mut int = signal(SignalKind::interrupt()).expect("SIGINT handler");
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM: draining"),
        _ = int.recv() => tracing::info!("SIGINT: draining"),
    }
    crate::notify::stopping();
}

/// The life of a binary once its flags are parsed: loads the configuration with `load`
/// (errors: message on stderr, exit 1); with `check_config`, reports it valid and exits 0;
/// otherwise starts logging and a runtime and runs `run` until it returns. `prog` prefixes
/// every message.
pub fn main<C, F>(
    prog: &str,
    check_config: bool,
    load: impl Fn() -> anyhow::Result<C> + Send + Sync + 'static,
    run: impl FnOnce(C, Reload<C>) -> F,
) -> ExitCode
where
    C: ProcessConfig,
    F: Future<Output = anyhow::Result<()>>,
{
    let cfg = match load() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{prog}: {e}");
            return ExitCode::from(1);
        }
    };
    if check_config {
        println!(
            "{prog}: configuration OK (mode {:?}, pool {})",
            cfg.mode(),
            if cfg.pool_tls() {
                "mutual TLS 1.3"
            } else {
                "plaintext TCP, loopback only"
            }
        );
        return ExitCode::SUCCESS;
    }
    let log = crate::logging::init(cfg.log_format(), cfg.log_level());
    let rt = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("{prog}: cannot start the runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let reload = Reload {
        running: cfg.clone(),
        reread: Box::new(load),
        log,
    };
    match rt.block_on(run(cfg, reload)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e:#}");
            eprintln!("{prog}: {e:#}");
            ExitCode::from(1)
        }
    }
}
