//! Carriers: the transports a pool connection runs on. Plain TCP is
//! implemented here; TLS-over-TCP and QUIC implement the same traits.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsFd, OwnedFd};
use std::pin::Pin;
use std::sync::Arc;

use socket2::{SockRef, TcpKeepalive};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

use crate::config::SocketOptions;

/// A byte stream carrying one pool connection.
pub trait Carrier: AsyncRead + AsyncWrite + Send + Unpin + 'static {
    /// A handle that reads the transport's kernel state while the carrier is
    /// split between the driver's reader and writer.
    fn probe(&self) -> Arc<dyn Probe>;
}

/// Read-only view of a carrier's transport state.
pub trait Probe: Send + Sync + 'static {
    /// Bytes queued in the kernel for sending: unsent plus sent but not
    /// acknowledged (`SIOCOUTQ` for TCP); 0 if unknown.
    fn kernel_outstanding(&self) -> u64;
    /// A `TCP_INFO` snapshot, if the transport is TCP.
    fn tcp_info(&self) -> Option<netsys::TcpInfo>;
    /// The peer's address.
    fn peer_addr(&self) -> Option<SocketAddr>;
    /// Our address.
    fn local_addr(&self) -> Option<SocketAddr>;
}

/// The future a [`Dialer`] returns.
pub type DialFuture<'a> = Pin<Box<dyn Future<Output = io::Result<Box<dyn Carrier>>> + Send + 'a>>;

/// Dials new carriers to the remote proxy (edge side).
pub trait Dialer: Send + Sync + 'static {
    /// Opens one carrier.
    fn dial(&self) -> DialFuture<'_>;
}

impl<T: Carrier + ?Sized> Carrier for Box<T> {
    fn probe(&self) -> Arc<dyn Probe> {
        (**self).probe()
    }
}

/// Turns an accepted, tuned TCP connection into the server's carrier (for
/// example by running a TLS handshake over it); the identity for plain TCP.
pub trait Upgrader: Send + Sync + 'static {
    /// Wraps `tcp`; a carrier built on it should forward [`Carrier::probe`]
    /// to `tcp.probe()` so the kernel queue stays visible.
    fn upgrade(&self, tcp: TcpCarrier) -> DialFuture<'_>;
}

/// The plain-TCP [`Upgrader`].
#[derive(Debug, Clone, Copy, Default)]
pub struct PlainTcp;

impl Upgrader for PlainTcp {
    fn upgrade(&self, tcp: TcpCarrier) -> DialFuture<'_> {
        Box::pin(async move {
            let c: Box<dyn Carrier> = Box::new(tcp);
            Ok(c)
        })
    }
}

/// A plain, tuned TCP connection.
#[derive(Debug)]
pub struct TcpCarrier {
    stream: TcpStream,
    probe: Arc<TcpProbe>,
}

/// Kernel state of a TCP carrier, through a duplicated descriptor.
#[derive(Debug)]
pub struct TcpProbe {
    fd: OwnedFd,
    peer: Option<SocketAddr>,
    local: Option<SocketAddr>,
}

impl Probe for TcpProbe {
    fn kernel_outstanding(&self) -> u64 {
        netsys::send_queue_bytes(&self.fd).unwrap_or(0)
    }
    fn tcp_info(&self) -> Option<netsys::TcpInfo> {
        netsys::tcp_info(&self.fd).ok()
    }
    fn peer_addr(&self) -> Option<SocketAddr> {
        self.peer
    }
    fn local_addr(&self) -> Option<SocketAddr> {
        self.local
    }
}

impl TcpCarrier {
    /// Tunes `stream` with `opts` and wraps it.
    pub fn new(stream: TcpStream, opts: &SocketOptions) -> io::Result<Self> {
        tune(&stream, opts)?;
        // The probe's duplicate shares the socket; the driver drops it with
        // the carrier, so it never keeps a dead connection open.
        let fd = netsys::dup(stream.as_fd())?;
        let peer = stream.peer_addr().ok();
        let local = stream.local_addr().ok();
        Ok(TcpCarrier {
            stream,
            probe: Arc::new(TcpProbe { fd, peer, local }),
        })
    }
}

impl Carrier for TcpCarrier {
    fn probe(&self) -> Arc<dyn Probe> {
        self.probe.clone()
    }
}

impl AsyncRead for TcpCarrier {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for TcpCarrier {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write(cx, buf)
    }
    fn poll_flush(
        self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }
    fn poll_shutdown(
        self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}

/// Applies the socket options; a missing congestion control falls back to the
/// kernel default with a warning, every other failure is an error.
pub fn tune(stream: &TcpStream, opts: &SocketOptions) -> io::Result<()> {
    let s = SockRef::from(stream);
    s.set_nodelay(opts.nodelay)?;
    if let Some(cc) = &opts.congestion {
        if let Err(e) = s.set_tcp_congestion(cc.as_bytes()) {
            // Logged once per process at warn level, then at debug: every
            // pool connection would repeat the same message.
            static WARNED: std::sync::atomic::AtomicBool =
                std::sync::atomic::AtomicBool::new(false);
            let first = !WARNED.swap(true, std::sync::atomic::Ordering::Relaxed);
            let current = s
                .tcp_congestion()
                .map(|v| {
                    String::from_utf8_lossy(&v)
                        .trim_end_matches('\0')
                        .to_owned()
                })
                .unwrap_or_else(|_| "unknown".into());
            if first {
                tracing::warn!(
                    wanted = %cc,
                    using = %current,
                    error = %e,
                    "TCP congestion control not available; using the kernel default \
                     (load the module, e.g. `modprobe tcp_{cc}`, or allow it in \
                     net.ipv4.tcp_allowed_congestion_control)"
                );
            } else {
                tracing::debug!(wanted = %cc, using = %current, "TCP congestion control fallback");
            }
        }
    }
    tune_rest(&s, stream, opts)
}

fn tune_rest(s: &SockRef<'_>, stream: &TcpStream, opts: &SocketOptions) -> io::Result<()> {
    if let Some(l) = opts.notsent_lowat {
        netsys::set_notsent_lowat(stream, l)?;
    }
    if let Some(idle) = opts.keepalive {
        let ka = TcpKeepalive::new()
            .with_time(idle)
            .with_interval((idle / 3).max(std::time::Duration::from_secs(1)))
            .with_retries(3);
        s.set_tcp_keepalive(&ka)?;
    }
    if let Some(t) = opts.user_timeout {
        s.set_tcp_user_timeout(Some(t))?;
    }
    if let Some(n) = opts.send_buffer {
        s.set_send_buffer_size(n)?;
    }
    if let Some(n) = opts.recv_buffer {
        s.set_recv_buffer_size(n)?;
    }
    Ok(())
}

/// Dials plain TCP to a "host:port".
#[derive(Debug, Clone)]
pub struct TcpDialer {
    /// "host:port" of the remote proxy.
    pub remote: String,
    /// Tuning applied to each connection.
    pub opts: SocketOptions,
}

impl Dialer for TcpDialer {
    fn dial(&self) -> DialFuture<'_> {
        Box::pin(async move {
            let stream =
                tokio::time::timeout(self.opts.connect_timeout, TcpStream::connect(&self.remote))
                    .await
                    .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "connect timed out"))??;
            let c: Box<dyn Carrier> = Box::new(TcpCarrier::new(stream, &self.opts)?);
            Ok(c)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn pair() -> (TcpStream, TcpStream) {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
        let (s, _) = l.accept().await.unwrap();
        (c, s)
    }

    #[tokio::test]
    async fn tuning_is_applied_and_reported() {
        let (c, _s) = pair().await;
        let opts = SocketOptions::default();
        let carrier = TcpCarrier::new(c, &opts).unwrap();
        let s = SockRef::from(&carrier.stream);
        assert!(s.nodelay().unwrap());
        assert!(s.keepalive().unwrap());
        assert_eq!(s.tcp_user_timeout().unwrap(), opts.user_timeout);
        let cc = s.tcp_congestion().unwrap();
        let cc = String::from_utf8_lossy(&cc);
        // bbr where the kernel allows it; otherwise the logged fallback kept the default.
        assert!(!cc.trim_end_matches('\0').is_empty());
        let probe = carrier.probe();
        assert!(probe.tcp_info().unwrap().snd_mss > 0);
        assert_eq!(probe.kernel_outstanding(), 0);
        assert!(probe.peer_addr().is_some() && probe.local_addr().is_some());
    }

    #[tokio::test]
    async fn unknown_congestion_control_falls_back_without_failing() {
        let (c, _s) = pair().await;
        let opts = SocketOptions {
            congestion: Some("no-such-cc".into()),
            ..SocketOptions::default()
        };
        assert!(TcpCarrier::new(c, &opts).is_ok());
    }
}
