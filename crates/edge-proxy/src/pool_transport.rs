//! The mux pool as the edge's [`Transport`], and the pool configuration derived from the
//! edge's configuration.
//!
//! This is where wire error codes become [`FarCode`]s (and so, through [`crate::errors`],
//! client-visible statuses). It does NOT implement the pool.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use app::pool_glue::{mux_config, policy, socket_options};
use bytes::Bytes;
use pool::tls::{TlsClient, TlsDialer};
use pool::{ErrorCode, MuxStream, Pool, PoolConfig, PoolError};

use crate::config::EdgeConfig;
use crate::remotes::{Remote, Remotes};
use crate::transport::{FarCode, FarFailure, OpenError, StreamKind, Transport};
use app::config::CarrierName;

impl Transport for Pool {
    type Stream = MuxStream;

    async fn open_aged(
        &self,
        kind: StreamKind,
        target: &str,
        first: Bytes,
        age: Duration,
    ) -> Result<MuxStream, OpenError> {
        let s = Pool::open_aged(self, kind.mux(), target, first, age)
            .await
            .map_err(open_error)?;
        app::metrics::stream_opened(kind.label());
        Ok(s)
    }

    fn failure(&self, err: &io::Error) -> Option<FarFailure> {
        let e = pool::stream_error(err)?;
        Some(FarFailure {
            code: far_code(e.code),
            retryable: e.retryable,
            reason: e.to_string(),
        })
    }
}

/// A pool's open failure as the edge's [`OpenError`]: the stream limit (the wait for a slot
/// ended) is told apart from every other failure.
pub fn open_error(e: PoolError) -> OpenError {
    match e {
        PoolError::StreamLimit { .. } => OpenError::stream_limit(e.to_string()),
        e => OpenError::unavailable(e.to_string()),
    }
}

/// Wire code → far-side failure class.
pub fn far_code(code: ErrorCode) -> FarCode {
    match code {
        ErrorCode::DNS_FAILED => FarCode::DnsFailed,
        ErrorCode::CONNECT_FAILED => FarCode::ConnectFailed,
        ErrorCode::TIMEOUT => FarCode::Timeout,
        ErrorCode::FORBIDDEN => FarCode::Forbidden,
        ErrorCode::CONNECTION_LOST => FarCode::ConnectionLost,
        ErrorCode::REFUSED_STREAM => FarCode::Refused,
        _ => FarCode::Other,
    }
}

/// The edge's TLS client from `[pool.tls]`, loaded now (errors name the file); `None` when
/// the pool runs plaintext (loopback only, see [`EdgeConfig::requires_tls`]).
pub fn tls_client(cfg: &EdgeConfig) -> Result<Option<Arc<TlsClient>>, String> {
    let Some(t) = &cfg.pool.tls else {
        return Ok(None);
    };
    let name = t
        .server_name
        .as_deref()
        .unwrap_or(pool::tls::DEFAULT_SERVER_NAME);
    TlsClient::new(t.files(), name)
        .map(|c| Some(Arc::new(c)))
        .map_err(|e| format!("pool.tls: {e}"))
}

/// Starts the edge's pools, one per remote (`pool.remotes`, or the single `pool.remote`): QUIC
/// when `pool.carrier = "quic"`, QUIC with a TCP+TLS fallback under `auto` (the default) when
/// `tls` is given, TLS over TCP under `tcp` with `tls`, plaintext TCP without (`auto` included:
/// QUIC always needs TLS).
pub fn start_pool(cfg: &EdgeConfig, tls: Option<Arc<TlsClient>>) -> Result<Remotes, PoolError> {
    let mut remotes = Vec::new();
    for name in cfg.pool.remote_list() {
        let pc = PoolConfig {
            remote: name.clone(),
            ..pool_config(cfg)
        };
        let carrier = cfg.pool.carrier.effective(tls.is_some());
        let pool = if carrier == CarrierName::Quic {
            let tls = tls.clone().ok_or_else(|| {
                PoolError::Config("pool.carrier = \"quic\" needs [pool.tls]".into())
            })?;
            Pool::start_quic(pc, tls, quic_options(cfg))?
        } else if let (CarrierName::Auto, Some(tls)) = (carrier, &tls) {
            Pool::start_auto(pc, tls.clone(), quic_options(cfg))?
        } else {
            match &tls {
                Some(tls) => {
                    let dialer = Arc::new(TlsDialer {
                        remote: pc.remote.clone(),
                        opts: pc.socket.clone(),
                        tls: tls.clone(),
                    });
                    Pool::start_with_dialer(pc, dialer)?
                }
                None => Pool::try_start(pc)?,
            }
        };
        remotes.push(Remote { name, pool });
    }
    Ok(Remotes::new(remotes))
}

/// The QUIC options of an edge's pools: the `[pool.quic]` section, the link, and the QUIC
/// pool's congestion control and placement policy.
fn quic_options(cfg: &EdgeConfig) -> pool::quic::QuicOptions {
    pool::quic::QuicOptions {
        policy: Some(policy(cfg.pool.policy(CarrierName::Quic))),
        ..cfg.pool.quic.options(&cfg.link, cfg.pool.congestion())
    }
}

/// The pool configuration of an edge, for its first remote (every remote's pool is configured
/// alike but for `remote`).
pub fn pool_config(cfg: &EdgeConfig) -> PoolConfig {
    PoolConfig {
        remote: cfg.pool.remote_list().swap_remove(0),
        connections: cfg.pool.connections,
        policy: policy(cfg.pool.policy(CarrierName::Tcp)),
        socket: socket_options(cfg.pool.congestion()),
        mux: mux_config(&cfg.link),
        open_queue: cfg.pool.open_queue,
        open_wait: Duration::from_millis(cfg.pool.open_wait_ms),
        ..PoolConfig::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_map_to_classes() {
        assert_eq!(far_code(ErrorCode::DNS_FAILED), FarCode::DnsFailed);
        assert_eq!(far_code(ErrorCode::TIMEOUT), FarCode::Timeout);
        assert_eq!(far_code(ErrorCode::FORBIDDEN), FarCode::Forbidden);
        assert_eq!(far_code(ErrorCode::CANCEL), FarCode::Other);
    }

    #[test]
    fn default_pool_config_is_valid() {
        let c = pool_config(&EdgeConfig::default());
        c.validate().unwrap();
        assert_eq!(c.connections, 4);
        assert_eq!(c.open_queue, pool::DEFAULT_OPEN_QUEUE);
        assert_eq!(c.open_wait, pool::DEFAULT_OPEN_WAIT);
    }
}
