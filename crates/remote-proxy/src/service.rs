//! The remote as a running service: what `remote-proxy` does once its configuration is loaded.
//!
//! What it does: binds the pool listener (TCP, TCP+TLS, QUIC, or TCP+TLS and QUIC under
//! `auto`), starts the metrics endpoint and registers the server's gauges, checks the host's
//! TCP settings ([`app::host::check`]), spawns the SIGHUP reload, tells systemd it is ready,
//! serves the edges' streams ([`crate::pool_glue::run_shared`]) until SIGTERM or SIGINT, then
//! drains.
//!
//! What it does NOT do: parse flags or read the configuration ([`crate::cli`] does), or serve
//! a stream ([`crate::handler`] does).

use std::sync::Arc;
use std::time::Duration;

use app::config::CarrierName;
use app::process::{KeyFiles, Reload};
use pool::tls::TlsServer;

use crate::config::RemoteConfig;
use crate::handler::Ctx;
use crate::pool_glue::{self, server_config};

/// The remote's TLS server from `[tls]`, loaded now (errors name the file).
pub fn tls_server(cfg: &RemoteConfig) -> anyhow::Result<Option<Arc<TlsServer>>> {
    cfg.tls
        .as_ref()
        .map(|t| {
            TlsServer::new(t.files())
                .map(Arc::new)
                .map_err(|e| anyhow::anyhow!("invalid configuration: tls: {e}"))
        })
        .transpose()
}

/// Runs the remote with `cfg` until SIGTERM or SIGINT, then drains: binds the pool listener,
/// starts the metrics endpoint, reloads on SIGHUP ([`Reload`]), tells systemd.
pub async fn run(cfg: RemoteConfig, reload: Reload<RemoteConfig>) -> anyhow::Result<()> {
    let tls = tls_server(&cfg)?;
    let server = match &tls {
        Some(t) if cfg.carrier == CarrierName::Quic => {
            let quic = cfg.quic.options(&cfg.link, cfg.congestion());
            pool::Server::bind_quic(cfg.listen, server_config(&cfg), t.clone(), quic).await
        }
        Some(t) if cfg.carrier == CarrierName::Auto => {
            let quic = cfg.quic.options(&cfg.link, cfg.congestion());
            pool::Server::bind_auto(cfg.listen, server_config(&cfg), t.clone(), quic).await
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
    app::host::check(cfg.carrier, cfg.congestion());
    reload.spawn(tls.map(|t| t as Arc<dyn KeyFiles>), "[tls]");
    let policy = cfg.policy();
    tracing::info!(
        listen = %server.local_addr(),
        mode = ?cfg.mode(),
        tls = cfg.tls.is_some(),
        carrier = ?cfg.carrier.effective(cfg.tls.is_some()),
        reply_policy = ?cfg.reply_policy,
        allow_private_targets = policy.allow_private,
        allowed_targets = ?policy.allowed_targets,
        static_hosts = policy.hosts.len(),
        "remote-proxy starting"
    );
    app::pool_glue::log_congestion(
        cfg.carrier.effective(cfg.tls.is_some()),
        cfg.congestion(),
        &cfg.link,
    );
    if cfg.carrier == CarrierName::Auto && cfg.tls.is_none() {
        tracing::info!("carrier auto without [tls]: TCP only (QUIC always needs TLS; development)");
    }
    let ctx = Arc::new(Ctx::new(policy, cfg.settings()));
    app::notify::started(
        &format!("serving pool connections on {}", server.local_addr()),
        metrics,
    );
    pool_glue::run_shared(
        server,
        ctx,
        app::process::shutdown_signal(),
        Duration::from_millis(cfg.drain_grace_ms),
    )
    .await;
    Ok(())
}
