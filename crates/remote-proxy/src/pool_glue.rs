//! The mux pool's streams as the remote's [`FarStream`]s, the accept loop over
//! [`pool::Server`], and the server configuration derived from the remote's configuration.
//!
//! This is where [`ResetReason`]s become wire error codes. It does NOT implement the pool.

use std::sync::Arc;
use std::time::Duration;

use app::access::StreamRef;
use app::pool_glue::{mux_config, policy, socket_options, StreamKind};
use pool::{ErrorCode, MuxStream, Server, ServerConfig};
use tokio::task::JoinSet;

use crate::config::RemoteConfig;
use crate::errors::ResetReason;
use crate::handler::{self, Ctx, FarStream};

impl FarStream for MuxStream {
    fn reset(&mut self, why: ResetReason) {
        MuxStream::reset(self, wire_code(why));
    }

    fn reset_signal(&self) -> futures_util::future::BoxFuture<'static, ()> {
        let watch = self.reset_watch();
        Box::pin(async move {
            watch.wait().await;
        })
    }
}

/// Reset reason → wire code.
pub fn wire_code(why: ResetReason) -> ErrorCode {
    match why {
        ResetReason::DnsFailed => ErrorCode::DNS_FAILED,
        ResetReason::ConnectFailed => ErrorCode::CONNECT_FAILED,
        ResetReason::Timeout => ErrorCode::TIMEOUT,
        ResetReason::Forbidden => ErrorCode::FORBIDDEN,
        ResetReason::Cancel => ErrorCode::CANCEL,
    }
}

/// The pool server configuration of a remote.
pub fn server_config(cfg: &RemoteConfig) -> ServerConfig {
    ServerConfig {
        socket: socket_options(cfg.congestion()),
        mux: mux_config(&cfg.link),
        policy: policy(cfg.reply_policy),
        max_connections: cfg.max_pool_connections,
        max_handshakes: cfg.max_handshakes,
        max_handshakes_per_source: cfg.max_handshakes_per_source,
    }
}

/// Serves streams from `server` until `shutdown` completes, then drains: GOAWAY to every edge,
/// in-flight streams get `grace` to finish.
pub async fn run(
    server: Server,
    ctx: Arc<Ctx>,
    shutdown: impl std::future::Future<Output = ()>,
    grace: Duration,
) {
    run_shared(Arc::new(server), ctx, shutdown, grace).await
}

/// [`run`] on a server shared with others (the metrics endpoint reads its `stats()`).
pub async fn run_shared(
    server: Arc<Server>,
    ctx: Arc<Ctx>,
    shutdown: impl std::future::Future<Output = ()>,
    grace: Duration,
) {
    let mut tasks = JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        while tasks.try_join_next().is_some() {}
        tokio::select! {
            _ = &mut shutdown => break,
            inc = server.accept() => {
                let Some(inc) = inc else { break };
                let kind = StreamKind::from_mux(inc.kind);
                app::metrics::stream_opened(kind.label());
                let ctx = ctx.clone();
                tasks.spawn(async move {
                    // The connection the stream arrived on (over TCP, its request
                    // direction's; a QUIC stream has one).
                    let (ours, theirs) = inc.stream.connections();
                    let id = StreamRef { id: inc.id, conn: theirs.or(ours) };
                    handler::handle(&ctx, id, kind, inc.target, inc.stream).await;
                });
            }
        }
    }
    tracing::info!(
        streams = tasks.len(),
        grace_ms = grace.as_millis() as u64,
        "draining"
    );
    let streams_done = async {
        let _ =
            tokio::time::timeout(grace, async { while tasks.join_next().await.is_some() {} }).await;
        tasks.shutdown().await;
    };
    tokio::join!(server.shutdown(grace), streams_done);
    tracing::info!("drained");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_are_placed_by_the_configured_policy() {
        assert_eq!(
            server_config(&RemoteConfig::default()).policy,
            pool::Policy::LeastOutstanding
        );
        let cfg: RemoteConfig = toml::from_str("reply_policy = \"round-robin\"").unwrap();
        assert_eq!(server_config(&cfg).policy, pool::Policy::RoundRobin);
        assert!(toml::from_str::<RemoteConfig>("reply_policy = \"random\"").is_err());
    }
}
