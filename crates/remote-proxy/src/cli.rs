//! The remote's command-line flags and how they override the configuration file.
//!
//! What it does: declares the remote's own flags, which `app::process::cli` places between the
//! ones both binaries share, applies them to the configuration, and adds the remote's checks
//! (the key files, the protocol limits) to its validation, so `--check-config` reports
//! everything a start would.
//!
//! What it does NOT do: parse `argv` (`app::process::cli` does) or run anything, or define the keys'
//! defaults ([`crate::config`] does).

use std::path::Path;

use app::config::{PolicyName, TlsSection};

use app::process::{CarrierFlags, Help};

use crate::config::RemoteConfig;
use crate::pool_glue::server_config;
use crate::service::tls_server;

/// The remote's own flags, in `--help` order (after `--config`, `--check-config` and
/// `--listen`, before the link, logging, TLS and metrics flags both binaries have).
#[derive(Debug, Clone, clap::Args)]
pub struct Flags {
    /// Let the remote fetch from loopback/private origins.
    #[arg(long)]
    allow_private_targets: bool,
    // Congestion control and carrier of the pool connections.
    #[command(flatten)]
    carrier: CarrierFlags,
    /// How replies are placed on the pool connections (replaces `reply_policy`).
    #[arg(long, value_enum)]
    reply_policy: Option<PolicyName>,
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

    fn apply(&self, cfg: &mut RemoteConfig) {
        if self.allow_private_targets {
            cfg.allow_private_targets = Some(true);
        }
        self.carrier
            .apply(&mut cfg.congestion, &mut cfg.carrier, &mut cfg.quic);
        if let Some(v) = self.reply_policy {
            cfg.reply_policy = v;
        }
    }

    fn use_tls_dir(cfg: &mut RemoteConfig, dir: &Path) {
        cfg.tls = Some(TlsSection::from_dir(dir, "remote"));
    }

    fn check(cfg: &RemoteConfig) -> anyhow::Result<()> {
        tls_server(cfg)?;
        server_config(cfg)
            .mux
            .validate()
            .map_err(|e| anyhow::anyhow!("invalid protocol limits: {e}"))?;
        Ok(())
    }
}
