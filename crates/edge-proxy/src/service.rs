//! The edge as a running service: what `edge-proxy` does once its configuration is loaded.
//!
//! What it does: binds the explicit, transparent, SOCKS5 and HTTPS proxy listeners, starts the pool to the remotes
//! and the metrics endpoint, registers the pools' gauges, checks the host's TCP settings
//! ([`app::host::check`]), spawns the SIGHUP reload, waits for
//! the pool (bounded), tells systemd it is ready, serves clients ([`crate::server::run`]) until
//! SIGTERM or SIGINT, then drains and closes the pool.
//!
//! What it does NOT do: parse flags or read the configuration ([`crate::cli`] does), or handle
//! a client connection ([`crate::client`] does).

use std::sync::Arc;
use std::time::Duration;

use app::config::CarrierName;
use app::process::{KeyFiles, Reload};
use tokio::net::TcpListener;

use crate::config::{EdgeConfig, TransparentConfig};
use crate::https::HttpsListener;
use crate::pool_transport::{start_pool, tls_client};
use crate::server::{self, Interception, Listeners};
use crate::socks::SocksListener;

/// The listener of intercepted connections (`IP_TRANSPARENT` for TPROXY).
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

/// The SOCKS5 listener in force. A configured address that cannot be bound is an error; the
/// development default (`127.0.0.1:1080`, see [`EdgeConfig::socks_listen`]) is skipped with a
/// warning when its port is taken, so a second development edge on one host still starts.
async fn socks_listener(cfg: &EdgeConfig) -> anyhow::Result<Option<SocksListener>> {
    let Some((addr, default)) = cfg.socks_listen() else {
        return Ok(None);
    };
    match TcpListener::bind(addr).await {
        Ok(listener) => Ok(Some(SocksListener {
            listener,
            settings: Arc::new(cfg.socks_settings()),
        })),
        Err(e) if default => {
            tracing::warn!(listen = %addr, error = %e, "development SOCKS5 listener not bound; SOCKS5 off (set [socks] listen or --socks)");
            Ok(None)
        }
        Err(e) => Err(anyhow::anyhow!("cannot listen on {addr} (socks): {e}")),
    }
}

/// The key files SIGHUP re-reads: the pool's (`[pool.tls]`) and the HTTPS proxy endpoint's.
struct EdgeKeys {
    pool: Option<Arc<dyn KeyFiles>>,
    https: Option<Arc<dyn KeyFiles>>,
}

impl KeyFiles for EdgeKeys {
    fn reload(&self) -> Result<(), String> {
        let mut errors = Vec::new();
        if let Some(p) = &self.pool {
            if let Err(e) = p.reload() {
                errors.push(format!("[pool.tls]: {e}"));
            }
        }
        if let Some(h) = &self.https {
            if let Err(e) = h.reload() {
                errors.push(format!("[https_proxy]: {e}"));
            }
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors.join("; "))
        }
    }
}

/// Runs the edge with `cfg` until SIGTERM or SIGINT, then drains: binds the listeners, starts
/// the pool and the metrics endpoint, reloads on SIGHUP ([`Reload`]), tells systemd.
pub async fn run(cfg: EdgeConfig, reload: Reload<EdgeConfig>) -> anyhow::Result<()> {
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
    let socks = socks_listener(&cfg).await?;
    let https = match &cfg.https_proxy {
        Some(h) => {
            let tls = pool::tls::TlsEndpoint::new(h.cert.clone(), h.key.clone())
                .map_err(|e| anyhow::anyhow!("[https_proxy]: {e}"))?;
            let listener = TcpListener::bind(h.listen)
                .await
                .map_err(|e| anyhow::anyhow!("cannot listen on {} (HTTPS proxy): {e}", h.listen))?;
            Some(HttpsListener {
                listener,
                tls: Arc::new(tls),
                handshake_timeout: Duration::from_millis(h.handshake_timeout_ms),
                h2: crate::h2proxy::H2Limits {
                    max_concurrent_streams: h.max_concurrent_streams,
                    stream_window: h.stream_window,
                    connection_window: h.connection_window,
                },
            })
        }
        None => None,
    };
    let tls = tls_client(&cfg).map_err(|e| anyhow::anyhow!("{e}"))?;
    let metrics = app::metrics::start(&cfg.metrics).await?;
    app::host::check(cfg.pool.carrier, cfg.pool.congestion());
    let pool = start_pool(&cfg, tls.clone())?;
    for r in pool.remotes() {
        let p = r.pool.clone();
        app::metrics::global().add_pool(r.name.clone(), Arc::new(move || p.stats()));
        let p = r.pool.clone();
        app::metrics::global().add_open_queue(r.name.clone(), Arc::new(move || p.open_waiting()));
        let p = r.pool.clone();
        app::metrics::global().add_stream_limit(r.name.clone(), Arc::new(move || p.stream_limit()));
        let p = r.pool.clone();
        app::metrics::global().add_carrier(
            r.name.clone(),
            Arc::new(move || (p.carrier(), p.carrier_switches())),
        );
    }
    let keys = EdgeKeys {
        pool: tls.map(|t| t as Arc<dyn KeyFiles>),
        https: https.as_ref().map(|h| h.tls.clone() as Arc<dyn KeyFiles>),
    };
    let keys =
        (keys.pool.is_some() || keys.https.is_some()).then(|| Arc::new(keys) as Arc<dyn KeyFiles>);
    reload.spawn(keys, "[pool.tls] or [https_proxy]");
    tracing::info!(
        listen = %cfg.listen,
        transparent = ?cfg.transparent.as_ref().map(|t| t.listen),
        socks = ?socks.as_ref().and_then(|s| s.listener.local_addr().ok()),
        socks_auth = if cfg.socks.users.is_empty() { "none" } else { "username/password" },
        https_proxy = ?cfg.https_proxy.as_ref().map(|h| h.listen),
        remotes = ?cfg.pool.remote_list(),
        connections = cfg.pool.connections,
        tls = cfg.pool.tls.is_some(),
        carrier = ?cfg.pool.carrier.effective(cfg.pool.tls.is_some()),
        mode = ?cfg.mode(),
        "edge-proxy starting"
    );
    app::pool_glue::log_congestion(
        cfg.pool.carrier.effective(cfg.pool.tls.is_some()),
        cfg.pool.congestion(),
        &cfg.link,
    );
    if cfg.pool.carrier == CarrierName::Auto && cfg.pool.tls.is_none() {
        tracing::info!(
            "carrier auto without [pool.tls]: TCP only (QUIC always needs TLS; development)"
        );
    }
    if pool
        .ready(Duration::from_millis(cfg.pool.ready_timeout_ms))
        .await
    {
        tracing::info!("pool connected");
    } else {
        tracing::warn!(remotes = ?cfg.pool.remote_list(), "no pool connection yet; requests get 502 until one is up");
    }
    app::notify::started(&format!("serving on {}", cfg.listen), metrics);
    let grace = Duration::from_millis(cfg.drain_grace_ms);
    let interception = match &cfg.transparent {
        Some(t) if t.tproxy => Interception::Tproxy,
        _ => Interception::Redirect,
    };
    server::run(
        pool.clone(),
        cfg.settings(),
        Listeners {
            proxy,
            transparent,
            socks,
            https,
        },
        interception,
        app::process::shutdown_signal(),
        grace,
    )
    .await;
    pool.close(Duration::from_secs(2)).await;
    Ok(())
}
