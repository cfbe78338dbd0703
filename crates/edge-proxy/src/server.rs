//! Accept loops of the edge and graceful drain.
//!
//! `run` accepts clients on the proxy listener (and the interception listener, if any), serves
//! each connection in its own task, and on shutdown stops accepting (new connections are
//! refused because the listeners are closed), lets in-flight replies finish within the grace
//! period (keep-alive connections close after their current reply), then aborts what is left.
//!
//! It does NOT parse HTTP ([`crate::client`]) or own the pool (the binary does).

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::client::{self, Ctx, Entry, Settings};
use crate::transport::Transport;

/// The listeners of an edge.
pub struct Listeners {
    /// Explicit proxy listener.
    pub proxy: TcpListener,
    /// Listener for intercepted (REDIRECT/TPROXY) connections.
    pub transparent: Option<TcpListener>,
}

/// How the original destination of an intercepted connection is found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Interception {
    /// iptables REDIRECT/DNAT: `SO_ORIGINAL_DST`.
    Redirect,
    /// TPROXY: the socket's local address is the original destination.
    Tproxy,
}

fn original_destination(sock: &TcpStream, how: Interception) -> std::io::Result<SocketAddr> {
    match how {
        Interception::Tproxy => sock.local_addr(),
        Interception::Redirect => {
            let local = sock.local_addr()?;
            netsys::original_dst(sock, local.is_ipv6())
        }
    }
}

/// Serves clients until `shutdown` completes, then drains for at most `grace`.
pub async fn run<T: Transport>(
    transport: T,
    settings: Settings,
    listeners: Listeners,
    interception: Interception,
    shutdown: impl Future<Output = ()>,
    grace: Duration,
) {
    let (drain_tx, drain_rx) = watch::channel(false);
    let ctx = Arc::new(Ctx {
        transport,
        settings,
        draining: drain_rx,
    });
    let Listeners { proxy, transparent } = listeners;
    let transparent_addr = transparent.as_ref().and_then(|l| l.local_addr().ok());
    let mut conns = JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        // Reap finished connections so the set stays small.
        while conns.try_join_next().is_some() {}
        let at_limit = conns.len() >= ctx.settings.max_client_connections;
        tokio::select! {
            _ = &mut shutdown => break,
            r = proxy.accept(), if !at_limit => match r {
                Ok((sock, peer)) => {
                    conns.spawn(client::serve(ctx.clone(), sock, peer, Entry::Explicit));
                }
                Err(e) => accept_error(e).await,
            },
            r = async { transparent.as_ref().expect("guarded").accept().await },
                if transparent.is_some() && !at_limit => match r {
                Ok((sock, peer)) => match original_destination(&sock, interception) {
                    Ok(orig) if Some(orig) != transparent_addr => {
                        conns.spawn(client::serve(ctx.clone(), sock, peer, Entry::Transparent { orig }));
                    }
                    Ok(_) => tracing::warn!(%peer, "connection to the interception port was not redirected; closed"),
                    Err(e) => tracing::warn!(%peer, error = %e, "no original destination for an intercepted connection; closed"),
                },
                Err(e) => accept_error(e).await,
            },
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
    drop(proxy);
    drop(transparent);
    let _ = drain_tx.send(true);
    tracing::info!(
        connections = conns.len(),
        grace_ms = grace.as_millis() as u64,
        "draining: listeners closed"
    );
    let drained =
        tokio::time::timeout(grace, async { while conns.join_next().await.is_some() {} }).await;
    if drained.is_err() {
        tracing::warn!(
            connections = conns.len(),
            "drain grace period over; closing the rest"
        );
        conns.shutdown().await;
    }
    tracing::info!("drained");
}

async fn accept_error(e: std::io::Error) {
    // Typically EMFILE: back off briefly instead of spinning.
    tracing::warn!(error = %e, "accept failed");
    tokio::time::sleep(Duration::from_millis(50)).await;
}
