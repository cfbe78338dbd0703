//! [`Server`]: the remote side, accepting pool connections from edges and
//! grouping them into one session per edge pool by the HELLO's session id.

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::Ordering::SeqCst;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use mux::frame::Hello;
use mux::{Role, Session};
use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use crate::carrier::{PlainTcp, TcpCarrier, Upgrader};
use crate::config::ServerConfig;
use crate::driver::run_lane;
use crate::gate::{self, HandshakeGate};
use crate::queue::OpenQueue;
use crate::quic::{QuicOptions, QuicServer};
use crate::shared::Shared;
use crate::stats::{collect, ConnStats};
use crate::tls::TlsServer;
use crate::{AdmissionStats, Incoming};

/// Remote side: accepts pool connections and yields the streams edges open.
///
/// Over QUIC ([`Server::bind_quic`]) it accepts QUIC connections instead
/// (docs/PROTOCOL.md §8); streams come out the same way.
pub struct Server {
    mode: Mode,
}

enum Mode {
    Mux(MuxServer),
    Quic(QuicServer),
    /// `carrier = "auto"`: TCP+TLS and QUIC on the same port number, one handshake gate.
    Auto(MuxServer, QuicServer),
}

/// The server over TCP carriers.
struct MuxServer {
    inner: Arc<ServerInner>,
    accept_task: JoinHandle<()>,
}

struct ServerInner {
    local_addr: SocketAddr,
    cfg: ServerConfig,
    upgrader: Arc<dyn Upgrader>,
    /// Sessions by edge session id; a session is removed when its last lane ends.
    sessions: Mutex<HashMap<u64, Arc<Shared>>>,
    rx: tokio::sync::Mutex<mpsc::UnboundedReceiver<Incoming>>,
    tx: mpsc::UnboundedSender<Incoming>,
    shutdown: watch::Sender<bool>,
    /// Live authenticated pool connections (at most `cfg.max_connections`).
    live: std::sync::atomic::AtomicUsize,
    /// Connections still in their handshake.
    gate: HandshakeGate,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("local_addr", &self.local_addr())
            .field("quic", &!matches!(self.mode, Mode::Mux(_)))
            .field("tcp", &!matches!(self.mode, Mode::Quic(_)))
            .finish()
    }
}

impl Server {
    /// Binds `addr` and starts accepting pool connections over plain TCP.
    pub async fn bind(addr: SocketAddr, cfg: ServerConfig) -> io::Result<Server> {
        Server::bind_with(addr, cfg, Arc::new(PlainTcp)).await
    }

    /// Like [`Server::bind`], with each accepted connection passed through
    /// `upgrader` (TLS, for example) before the HELLO is read.
    pub async fn bind_with(
        addr: SocketAddr,
        cfg: ServerConfig,
        upgrader: Arc<dyn Upgrader>,
    ) -> io::Result<Server> {
        Ok(Server {
            mode: Mode::Mux(MuxServer::bind_with(addr, cfg, upgrader, None).await?),
        })
    }

    /// Binds UDP `addr` and accepts QUIC pool connections whose client
    /// certificate chains to `tls`'s CAs (docs/PROTOCOL.md §8). `cfg.mux`
    /// supplies the handshake timeout, `cfg.max_connections` the limit; the
    /// rest of the tuning comes from `quic`.
    pub async fn bind_quic(
        addr: SocketAddr,
        cfg: ServerConfig,
        tls: Arc<TlsServer>,
        quic: QuicOptions,
    ) -> io::Result<Server> {
        Ok(Server {
            mode: Mode::Quic(QuicServer::bind(addr, cfg, tls, quic, None).await?),
        })
    }

    /// `carrier = "auto"`: accepts TCP+TLS pool connections on TCP `addr` and QUIC ones on
    /// UDP with the same port number (the TCP listener's, when `addr` asks for port 0), with
    /// the same certificates (`tls`), configuration and handshake gate (`max_handshakes`
    /// counts both). `max_connections` applies to each listener. A session is per carrier:
    /// an edge's TCP and QUIC pools are two sessions, each stream lives in one.
    pub async fn bind_auto(
        addr: SocketAddr,
        cfg: ServerConfig,
        tls: Arc<TlsServer>,
        quic: QuicOptions,
    ) -> io::Result<Server> {
        let gate = cfg.handshake_gate();
        let up: Arc<dyn Upgrader> = tls.clone();
        let tcp = MuxServer::bind_with(addr, cfg.clone(), up, Some(gate.clone())).await?;
        let udp_addr = tcp.inner.local_addr;
        let quic = QuicServer::bind(udp_addr, cfg, tls, quic, Some(gate))
            .await
            .map_err(|e| io::Error::new(e.kind(), format!("QUIC on UDP {udp_addr}: {e}")))?;
        Ok(Server {
            mode: Mode::Auto(tcp, quic),
        })
    }

    /// The bound address.
    pub fn local_addr(&self) -> SocketAddr {
        match &self.mode {
            Mode::Mux(m) | Mode::Auto(m, _) => m.inner.local_addr,
            Mode::Quic(q) => q.local_addr(),
        }
    }

    /// The next stream opened by any edge; `None` after shutdown.
    pub async fn accept(&self) -> Option<Incoming> {
        match &self.mode {
            Mode::Mux(m) => m.accept().await,
            Mode::Quic(q) => q.accept().await,
            Mode::Auto(m, q) => {
                // Both queues' receives are cancel-safe: the one not taken keeps its stream.
                tokio::select! {
                    i = m.accept() => i,
                    i = q.accept() => i,
                }
            }
        }
    }

    /// GOAWAY to every edge, stop accepting, wait (at most `grace`) for open
    /// streams to finish, then close every connection.
    pub async fn shutdown(&self, grace: Duration) {
        match &self.mode {
            Mode::Mux(m) => m.shutdown(grace).await,
            Mode::Quic(q) => q.shutdown(grace).await,
            Mode::Auto(m, q) => {
                tokio::join!(m.shutdown(grace), q.shutdown(grace));
            }
        }
    }

    /// Connections in their handshake now, and those refused since start, by reason.
    pub fn admission(&self) -> AdmissionStats {
        match &self.mode {
            // One gate for both listeners under auto.
            Mode::Mux(m) | Mode::Auto(m, _) => m.inner.gate.stats(),
            Mode::Quic(q) => q.admission(),
        }
    }

    /// Health of every connection of every edge session.
    pub fn stats(&self) -> Vec<ConnStats> {
        match &self.mode {
            Mode::Mux(m) => m.stats(),
            Mode::Quic(q) => q.stats(),
            Mode::Auto(m, q) => {
                let mut v = m.stats();
                v.extend(q.stats());
                v
            }
        }
    }
}

impl MuxServer {
    async fn bind_with(
        addr: SocketAddr,
        cfg: ServerConfig,
        upgrader: Arc<dyn Upgrader>,
        gate: Option<HandshakeGate>,
    ) -> io::Result<MuxServer> {
        cfg.mux
            .validate()
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        cfg.validate_limits()
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        let sock = socket2::Socket::new(
            socket2::Domain::for_address(addr),
            socket2::Type::STREAM,
            Some(socket2::Protocol::TCP),
        )?;
        sock.set_reuse_address(true)?;
        sock.set_nonblocking(true)?;
        sock.bind(&addr.into())?;
        sock.listen(1024)?;
        let listener = TcpListener::from_std(sock.into())?;
        let local_addr = listener.local_addr()?;
        let (tx, rx) = mpsc::unbounded_channel();
        let (shutdown, _) = watch::channel(false);
        let inner = Arc::new(ServerInner {
            local_addr,
            gate: gate.unwrap_or_else(|| cfg.handshake_gate()),
            cfg,
            upgrader,
            sessions: Mutex::new(HashMap::new()),
            rx: tokio::sync::Mutex::new(rx),
            tx,
            shutdown,
            live: std::sync::atomic::AtomicUsize::new(0),
        });
        let accept_task = tokio::spawn(accept_loop(Arc::downgrade(&inner), listener));
        Ok(MuxServer { inner, accept_task })
    }

    async fn accept(&self) -> Option<Incoming> {
        let mut stop = self.inner.shutdown.subscribe();
        if *stop.borrow() {
            return None;
        }
        let mut rx = self.inner.rx.lock().await;
        tokio::select! {
            i = rx.recv() => i,
            _ = stop.wait_for(|s| *s) => None,
        }
    }

    async fn shutdown(&self, grace: Duration) {
        self.inner.shutdown.send_replace(true);
        self.accept_task.abort();
        let sessions = self.inner.sessions();
        for s in &sessions {
            s.op(|i| i.session.go_away("remote shutting down"));
        }
        let idle = async {
            loop {
                // Streams accepted by a session but no longer handed out
                // (accept returns None now) were never processed: refuse them.
                self.inner.refuse_queued();
                if !sessions
                    .iter()
                    .any(|s| s.op(|i| i.session.stream_count()) > 0)
                {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        };
        let _ = tokio::time::timeout(grace, idle).await;
        for s in &sessions {
            s.op(|i| {
                i.shutting_down = true;
                i.notify_all_lanes();
            });
        }
        let closed = async {
            while sessions.iter().any(|s| s.op(|i| !i.lanes.is_empty())) {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        };
        let _ = tokio::time::timeout(Duration::from_secs(3), closed).await;
    }

    fn stats(&self) -> Vec<ConnStats> {
        let mut out = Vec::new();
        for s in self.inner.sessions() {
            s.op(|i| collect(i, &mut out));
        }
        out
    }
}

impl Drop for MuxServer {
    /// Stops accepting and closes every connection (without waiting).
    fn drop(&mut self) {
        self.accept_task.abort();
        self.inner.shutdown.send_replace(true);
        for s in self.inner.sessions() {
            s.op(|i| {
                i.shutting_down = true;
                i.notify_all_lanes();
            });
        }
    }
}

impl ServerInner {
    /// Resets every incoming stream still queued with REFUSED_STREAM (retryable).
    fn refuse_queued(&self) {
        if let Ok(mut rx) = self.rx.try_lock() {
            while let Ok(inc) = rx.try_recv() {
                inc.stream.refuse();
            }
        }
    }

    fn sessions(&self) -> Vec<Arc<Shared>> {
        self.sessions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect()
    }
}

async fn accept_loop(inner: Weak<ServerInner>, listener: TcpListener) {
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(x) => x,
            Err(e) => {
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Some(server) = inner.upgrade() else {
            return;
        };
        // Refused before any handshake work when the authenticated connections are already
        // at their limit; checked again once the HELLO is in.
        if server.live.load(SeqCst) >= server.cfg.max_connections {
            server.gate.refused_connection();
            tracing::warn!(
                %peer,
                max = server.cfg.max_connections,
                "pool connection refused: too many connections"
            );
            drop(stream);
            continue;
        }
        let permit = match server.gate.try_enter(peer.ip()) {
            Ok(p) => p,
            Err(why) => {
                tracing::warn!(%peer, reason = %why, "pool connection refused: too many handshakes");
                drop(stream);
                continue;
            }
        };
        tokio::spawn(async move {
            if let Err(e) = serve_conn(server, stream, permit).await {
                tracing::warn!(%peer, error = %e, "pool connection rejected");
            }
        });
    }
}

/// One authenticated connection counted in `ServerInner::live` while it lives.
struct LiveSlot(Arc<ServerInner>);

impl LiveSlot {
    fn take(server: &Arc<ServerInner>) -> io::Result<LiveSlot> {
        if server.live.fetch_add(1, SeqCst) >= server.cfg.max_connections {
            server.live.fetch_sub(1, SeqCst);
            return Err(server
                .gate
                .over_connection_limit(server.cfg.max_connections));
        }
        Ok(LiveSlot(server.clone()))
    }
}

impl Drop for LiveSlot {
    fn drop(&mut self) {
        self.0.live.fetch_sub(1, SeqCst);
    }
}

async fn serve_conn(
    server: Arc<ServerInner>,
    stream: TcpStream,
    permit: gate::Permit,
) -> io::Result<()> {
    let tcp = TcpCarrier::new(stream, &server.cfg.socket)?;
    let mut carrier = tokio::time::timeout(
        server.cfg.mux.handshake_timeout,
        server.upgrader.upgrade(tcp),
    )
    .await
    .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "carrier upgrade timed out"))??;
    // Read until the edge's HELLO is complete to learn its session id (§3.1).
    let mut pre = Vec::new();
    let hello = tokio::time::timeout(server.cfg.mux.handshake_timeout, async {
        let mut buf = [0u8; 512];
        loop {
            match Hello::peek(&pre) {
                Ok(Some(h)) => return Ok(h),
                Ok(None) => {}
                Err(e) => return Err(io::Error::new(io::ErrorKind::InvalidData, e)),
            }
            let n = carrier.read(&mut buf).await?;
            if n == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "closed before HELLO",
                ));
            }
            pre.extend_from_slice(&buf[..n]);
        }
    })
    .await
    .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "no HELLO in time"))??;
    if hello.role != Role::Edge {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "HELLO from a non-edge peer",
        ));
    }
    // Authenticated (by the upgrader) and introduced: it leaves the handshake slots for the
    // connection slots.
    let _slot = LiveSlot::take(&server)?;
    drop(permit);
    let shared = {
        let mut map = server.sessions.lock().unwrap_or_else(|p| p.into_inner());
        map.entry(hello.session)
            .or_insert_with(|| {
                tracing::info!(session = hello.session, "new edge session");
                Shared::new(
                    Session::new(
                        Role::Remote,
                        hello.session,
                        server.cfg.mux.clone(),
                        server.cfg.policy,
                    ),
                    0,
                    Some(server.tx.clone()),
                    // The remote only accepts streams: nothing ever waits here.
                    OpenQueue::new(0, Duration::ZERO),
                )
            })
            .clone()
    };
    run_lane(shared.clone(), carrier, pre, None).await;
    let mut map = server.sessions.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(cur) = map.get(&hello.session) {
        if Arc::ptr_eq(cur, &shared) && shared.op(|i| i.lanes.is_empty()) {
            map.remove(&hello.session);
            tracing::info!(session = hello.session, "edge session ended");
        }
    }
    Ok(())
}
