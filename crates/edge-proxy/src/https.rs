//! The HTTPS proxy endpoint: proxy clients that reach the edge over TLS (an `https://` proxy,
//! PAC `HTTPS host:port`), which keeps their proxy traffic private on shared access networks.
//!
//! What it does: checks the client's network before any TLS work (a client outside
//! `allowed_clients` is closed without a handshake and logged), runs the TLS handshake within
//! `https_proxy.handshake_timeout_ms` with the endpoint's reloadable certificate
//! ([`pool::tls::TlsEndpoint`]), and serves the connection by the protocol ALPN chose: HTTP/1.1
//! goes to the same client-connection handler as the plain listener ([`crate::client::serve`]:
//! absolute-form requests, CONNECT, pipelining, everything as on the plain port); `h2` to
//! [`crate::h2proxy`] (many tunnels and requests as streams of one connection). A client that
//! offers no ALPN speaks HTTP/1.1.
//!
//! What it does NOT do: ask for client certificates, or serve HTTP/3.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use app::access::{Access, Peer};
use tokio::net::{TcpListener, TcpStream};

use crate::client::{self, Ctx, Entry};
use crate::conn::TlsConn;
use crate::errors::EdgeError;
use crate::h2proxy::{self, H2Limits};
use crate::transport::Transport;

/// The HTTPS proxy listener with what its connections need.
pub struct HttpsListener {
    /// Accepted clients speak TLS.
    pub listener: TcpListener,
    /// Certificate and key (reloaded on SIGHUP and when the files change).
    pub tls: Arc<pool::tls::TlsEndpoint>,
    /// Longest TLS handshake.
    pub handshake_timeout: Duration,
    /// HTTP/2 limits.
    pub h2: H2Limits,
}

/// What a connection of the endpoint needs besides the shared [`Ctx`].
#[derive(Clone)]
pub(crate) struct Endpoint {
    tls: Arc<pool::tls::TlsEndpoint>,
    handshake_timeout: Duration,
    h2: H2Limits,
}

impl HttpsListener {
    /// Splits off the listener; the rest goes with each connection.
    pub(crate) fn into_parts(self) -> (TcpListener, Endpoint) {
        (
            self.listener,
            Endpoint {
                tls: self.tls,
                handshake_timeout: self.handshake_timeout,
                h2: self.h2,
            },
        )
    }
}

/// Serves one connection accepted on the HTTPS proxy listener to completion.
pub(crate) async fn serve<T: Transport>(
    ctx: Arc<Ctx<T>>,
    ep: Endpoint,
    sock: TcpStream,
    peer: SocketAddr,
) {
    let started = Instant::now();
    if !ctx
        .settings
        .allowed_clients
        .iter()
        .any(|n| n.contains(&peer.ip()))
    {
        // Not told anything: answering would need a TLS handshake with a stranger.
        let err = EdgeError::ForbiddenClient(peer.ip());
        Access::new(Peer::Client(peer), "-", "-", started)
            .failed(
                err.tag(),
                format!("{err} (HTTPS endpoint: closed before TLS)"),
            )
            .log();
        return;
    }
    let _ = sock.set_nodelay(true);
    let acceptor = ep.tls.acceptor();
    let tls = match tokio::time::timeout(ep.handshake_timeout, acceptor.accept(sock)).await {
        Ok(Ok(t)) => t,
        Ok(Err(e)) => {
            tracing::debug!(%peer, error = %e, "HTTPS proxy client: TLS handshake failed");
            return;
        }
        Err(_) => {
            tracing::debug!(
                %peer,
                timeout_ms = ep.handshake_timeout.as_millis() as u64,
                "HTTPS proxy client: TLS handshake not complete in time; closed"
            );
            return;
        }
    };
    if tls.get_ref().1.alpn_protocol() == Some(b"h2") {
        h2proxy::serve(ctx, tls, peer, ep.h2).await;
    } else {
        client::serve(ctx, TlsConn::new(tls), peer, Entry::Explicit).await;
    }
}
