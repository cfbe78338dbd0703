//! Accept loops of the edge and graceful drain.
//!
//! `run` accepts clients on the proxy listener (and the interception and HTTPS proxy listeners,
//! if any), serves
//! each connection in its own task, and on shutdown stops accepting (new connections are
//! refused because the listeners are closed), lets in-flight replies finish within the grace
//! period (keep-alive connections close after their current reply), then aborts what is left.
//!
//! Over `max_client_connections`, a new connection is not left waiting in the kernel's accept
//! queue (where it would hold a slot that well-behaved clients need, and time out without a
//! reason): it is accepted, answered `503 too-many-connections` and closed. At most
//! [`DEFAULT_MAX_REFUSALS`] such answers are in flight at once; beyond that a connection is
//! closed without one. Refusals are logged at most once a second, with counts.
//!
//! Every [`DEFAULT_HEAP_TRIM_INTERVAL`], if client connections ended meanwhile, the heap's free
//! memory is handed back to the kernel, so the buffers of a crowd of slow readers do not stay
//! resident after they leave.
//!
//! It does NOT parse HTTP ([`crate::client`]) or own the pool ([`crate::service`] does).

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::client::{self, Ctx, Entry, Settings};
use crate::errors::{reply_and_close, EdgeError};
use crate::https::{self, HttpsListener};
use crate::socks::{self, SocksListener};
use crate::transport::Transport;

/// The listeners of an edge.
pub struct Listeners {
    /// Explicit proxy listener.
    pub proxy: TcpListener,
    /// Listener for intercepted (REDIRECT/TPROXY) connections.
    pub transparent: Option<TcpListener>,
    /// SOCKS5 listener.
    pub socks: Option<SocksListener>,
    /// The HTTPS proxy endpoint ([`crate::https`]).
    pub https: Option<HttpsListener>,
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

/// Most connections being answered `503 too-many-connections` at once; a connection over
/// `max_client_connections` beyond these is closed without a reply. Each refusal holds a
/// socket for at most [`REFUSAL_LINGER`] plus one small write.
pub const DEFAULT_MAX_REFUSALS: usize = 256;
/// Longest time a refusal waits for its reply to be written, and then for the client to close
/// (reading and discarding at most [`REFUSAL_LINGER_BYTES`]: closing with unread data would
/// reset the connection and could destroy the reply before the client read it).
pub const REFUSAL_LINGER: Duration = Duration::from_secs(1);
/// Most bytes read and discarded from a refused connection.
pub const REFUSAL_LINGER_BYTES: usize = 16 * 1024;
/// Shortest interval between two log lines about refused connections.
const REFUSAL_LOG_INTERVAL: Duration = Duration::from_secs(1);

/// Connections refused because the edge is at `max_client_connections`.
struct Refusals {
    /// Refusals writing their reply.
    tasks: JoinSet<()>,
    /// Refused with a reply since the last log line.
    answered: u64,
    /// Closed without a reply (too many refusals in flight, not HTTP, or a client not in
    /// `allowed_clients`) since the last log line.
    closed: u64,
    last_log: Option<Instant>,
}

impl Refusals {
    fn new() -> Refusals {
        Refusals {
            tasks: JoinSet::new(),
            answered: 0,
            closed: 0,
            last_log: None,
        }
    }

    /// Refuses `sock`: a 503 if `answer` and fewer than [`DEFAULT_MAX_REFUSALS`] are in flight,
    /// otherwise just closes it.
    fn refuse(&mut self, sock: TcpStream, answer: bool, limit: usize) {
        while self.tasks.try_join_next().is_some() {}
        if answer && self.tasks.len() < DEFAULT_MAX_REFUSALS {
            self.answered += 1;
            self.tasks.spawn(answer_refusal(sock, limit));
        } else {
            self.closed += 1;
            drop(sock);
        }
        let now = Instant::now();
        if self
            .last_log
            .is_none_or(|t| now.duration_since(t) >= REFUSAL_LOG_INTERVAL)
        {
            tracing::warn!(
                max_client_connections = limit,
                answered_503 = self.answered,
                closed = self.closed,
                "too many client connections: new connections refused"
            );
            self.last_log = Some(now);
            self.answered = 0;
            self.closed = 0;
        }
    }
}

async fn answer_refusal(mut sock: TcpStream, limit: usize) {
    let _ = sock.set_nodelay(true);
    let err = EdgeError::TooManyConnections(format!(
        "the proxy already serves {limit} client connections; retry later"
    ));
    let _ = tokio::time::timeout(REFUSAL_LINGER, reply_and_close(&mut sock, &err)).await;
    let mut scratch = [0u8; 2048];
    let mut total = 0;
    let _ = tokio::time::timeout(REFUSAL_LINGER, async {
        while total < REFUSAL_LINGER_BYTES {
            match sock.read(&mut scratch).await {
                Ok(0) | Err(_) => break,
                Ok(n) => total += n,
            }
        }
    })
    .await;
}

/// How often the edge returns freed heap memory to the kernel, when client connections ended
/// since the last time ([`netsys::release_free_heap`]): the buffers of many slow readers are
/// freed when they leave, but the allocator keeps the pages unless asked.
pub const DEFAULT_HEAP_TRIM_INTERVAL: Duration = Duration::from_secs(5);

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
    let Listeners {
        proxy,
        transparent,
        socks,
        https,
    } = listeners;
    let (https, endpoint) = match https {
        Some(h) => {
            let (l, e) = h.into_parts();
            (Some(l), Some(e))
        }
        None => (None, None),
    };
    let transparent_addr = transparent.as_ref().and_then(|l| l.local_addr().ok());
    let mut conns = JoinSet::new();
    let mut refusals = Refusals::new();
    let limit = ctx.settings.max_client_connections;
    tokio::pin!(shutdown);
    // Connections ended since the heap was last trimmed.
    let mut ended = 0usize;
    let mut trim = tokio::time::interval(DEFAULT_HEAP_TRIM_INTERVAL);
    trim.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        // Reap finished connections so the set stays small.
        while conns.try_join_next().is_some() {
            ended += 1;
        }
        tokio::select! {
            _ = &mut shutdown => break,
            _ = trim.tick() => {
                if ended > 0 {
                    ended = 0;
                    let released = tokio::task::spawn_blocking(netsys::release_free_heap).await;
                    tracing::debug!(released = released.unwrap_or(false), "freed heap returned to the kernel");
                }
            }
            r = proxy.accept() => match r {
                Ok((sock, peer)) if conns.len() >= limit => {
                    // A client not allowed in is not told anything about the proxy.
                    let allowed = ctx.settings.client_allowed(peer.ip());
                    refusals.refuse(sock, allowed, limit);
                }
                Ok((sock, peer)) => {
                    conns.spawn(client::serve(ctx.clone(), sock, peer, Entry::Explicit));
                }
                Err(e) => accept_error(e).await,
            },
            r = async { transparent.as_ref().expect("guarded").accept().await },
                if transparent.is_some() => match r {
                Ok((sock, peer)) => match original_destination(&sock, interception) {
                    Ok(orig) if Some(orig) != transparent_addr => {
                        if conns.len() >= limit {
                            // Only a connection parsed as HTTP can be told why.
                            let http = ctx.settings.transparent_http_ports.contains(&orig.port());
                            refusals.refuse(sock, http, limit);
                        } else {
                            conns.spawn(client::serve(ctx.clone(), sock, peer, Entry::Transparent { orig }));
                        }
                    }
                    Ok(_) => tracing::warn!(%peer, "connection to the interception port was not redirected; closed"),
                    Err(e) => tracing::warn!(%peer, error = %e, "no original destination for an intercepted connection; closed"),
                },
                Err(e) => accept_error(e).await,
            },
            r = async { socks.as_ref().expect("guarded").listener.accept().await },
                if socks.is_some() => match r {
                // Over the limit a SOCKS5 client cannot be told why in its protocol before its
                // request: it is closed.
                Ok((sock, _)) if conns.len() >= limit => refusals.refuse(sock, false, limit),
                Ok((sock, peer)) => {
                    let settings = socks.as_ref().expect("guarded").settings.clone();
                    conns.spawn(socks::serve(ctx.clone(), settings, sock, peer));
                }
                Err(e) => accept_error(e).await,
            },
            r = async { https.as_ref().expect("guarded").accept().await },
                if https.is_some() => match r {
                Ok((sock, peer)) if conns.len() >= limit => {
                    // A refusal over TLS would cost a handshake: the connection is closed.
                    refusals.refuse(sock, false, limit);
                    tracing::debug!(%peer, "HTTPS proxy client refused: too many client connections");
                }
                Ok((sock, peer)) => {
                    let ep = endpoint.clone().expect("set with the listener");
                    conns.spawn(https::serve(ctx.clone(), ep, sock, peer));
                }
                Err(e) => accept_error(e).await,
            },
            Some(_) = conns.join_next(), if !conns.is_empty() => ended += 1,
        }
    }
    refusals.tasks.abort_all();
    drop(proxy);
    drop(transparent);
    drop(socks);
    drop(https);
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
