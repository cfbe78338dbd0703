//! The remote's command-line flags and how they override the configuration file.
//!
//! What it does: declares the remote's own flags between the ones both binaries share
//! ([`app::process`]), and [`Flags::load`] reads the file (or the embedded defaults), applies
//! the flags, validates the result and loads the key files, so `--check-config` reports
//! everything a start would.
//!
//! What it does NOT do: parse `argv` or run anything (the binary does), or define the keys'
//! defaults ([`crate::config`] does).

use std::net::SocketAddr;

use app::config::{PolicyName, TlsSection};
use app::process::{CarrierFlags, CommonFlags, FileFlags};

use crate::config::RemoteConfig;
use crate::pool_glue::server_config;
use crate::service::tls_server;

/// The remote's flags, in `--help` order.
#[derive(Debug, Clone, clap::Args)]
pub struct Flags {
    /// The configuration file and `--check-config` (the binary reads `check_config`).
    #[command(flatten)]
    pub file: FileFlags,
    /// Pool listen address.
    #[arg(long)]
    listen: Option<SocketAddr>,
    /// Let the remote fetch from loopback/private origins.
    #[arg(long)]
    allow_private_targets: bool,
    // Congestion control and carrier of the pool connections.
    #[command(flatten)]
    carrier: CarrierFlags,
    /// How replies are placed on the pool connections (replaces `reply_policy`).
    #[arg(long, value_enum)]
    reply_policy: Option<PolicyName>,
    // Link, logging, TLS files and metrics.
    #[command(flatten)]
    common: CommonFlags,
}

/// Help text of `--tls-dir` on the remote.
pub const TLS_DIR_HELP: &str = "Mutual TLS with the files `gen-keys --out DIR` wrote \
     (DIR/remote.pem, DIR/remote.key, DIR/ca.pem); replaces the [tls] file paths";

impl Flags {
    /// The configuration in force: the file (or the embedded defaults) with the flags applied,
    /// validated, with the key files loaded.
    pub fn load(&self) -> anyhow::Result<RemoteConfig> {
        let mut cfg: RemoteConfig = app::process::read(self.file.config.as_deref())?;
        if let Some(v) = self.listen {
            cfg.listen = v;
        }
        if self.allow_private_targets {
            cfg.allow_private_targets = Some(true);
        }
        self.carrier.apply(&mut cfg.congestion, &mut cfg.carrier);
        if let Some(v) = self.reply_policy {
            cfg.reply_policy = v;
        }
        self.common.apply(
            &mut cfg.link,
            &mut cfg.log_format,
            &mut cfg.log_level,
            &mut cfg.metrics,
        )?;
        if let Some(d) = &self.common.tls_dir {
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
}
