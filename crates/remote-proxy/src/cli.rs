//! The remote's command-line flags and how they override the configuration file.
//!
//! What it does: declares the remote's own flags between the ones both binaries share
//! ([`app::process`]), and [`Flags::load`] reads the file (or the embedded defaults), applies
//! the flags, validates the result and loads the key files, so `--check-config` reports
//! everything a start would.
//!
//! What it does NOT do: parse `argv` or run anything (the binary does), or define the keys'
//! defaults ([`crate::config`] does).

use app::config::{PolicyName, TlsSection};
use app::process::{CarrierFlags, CommonFlags, Help, StartFlags};

use crate::config::RemoteConfig;
use crate::pool_glue::server_config;
use crate::service::tls_server;

/// The remote's flags, in `--help` order.
#[derive(Debug, Clone, clap::Args)]
pub struct Flags {
    // The configuration file, `--check-config` and `--listen`.
    #[command(flatten)]
    start: StartFlags,
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

/// The remote's own texts in `--help`.
pub const HELP: Help = Help {
    about: "Far-side longhaul proxy: accepts pool connections from edges, resolves names, \
            fetches from origins and streams replies back",
    listen: "Pool listen address",
    tls_dir: "Mutual TLS with the files `gen-keys --out DIR` wrote (DIR/remote.pem, \
              DIR/remote.key, DIR/ca.pem); replaces the [tls] file paths",
};

impl app::process::Flags for Flags {
    type Config = RemoteConfig;

    fn start(&self) -> &StartFlags {
        &self.start
    }

    fn load(&self) -> anyhow::Result<RemoteConfig> {
        let mut cfg: RemoteConfig = self.start.read()?;
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
