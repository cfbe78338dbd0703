//! The byte streams a client connection of the edge can arrive on: plain TCP (the proxy and
//! interception listeners) and TLS over TCP (the HTTPS proxy endpoint speaking HTTP/1.1).
//!
//! What it does: gives [`crate::client`] and the tunnels one interface over both, [`ClientConn`]:
//! borrowed read and write halves (TCP's own split, no lock; TLS through a shared lock, since
//! one TLS session serves both directions), a wait for the next byte that consumes nothing (the
//! idle keep-alive state), the TCP socket for its options, and [`Abort`]: ending the connection
//! with a reset so a cut reply never looks complete (over TLS, no `close_notify` is sent then).
//!
//! What it does NOT do: the TLS handshake or ALPN ([`crate::https`]), or HTTP/2.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf, ReadHalf, WriteHalf};
use tokio::net::tcp::{ReadHalf as TcpReadHalf, WriteHalf as TcpWriteHalf};
use tokio::net::TcpStream;
use tokio_rustls::server::TlsStream;

/// The write half of a client connection, which can mark the connection to end with a reset.
pub trait Abort {
    /// Makes the connection end with a TCP reset when it is closed.
    fn abort(&self);
}

/// A client connection's byte stream.
pub trait ClientConn: AsyncRead + AsyncWrite + Unpin + Send + 'static {
    /// The read half borrowed by [`ClientConn::halves`].
    type Rd<'a>: AsyncRead + Unpin + Send
    where
        Self: 'a;
    /// The write half borrowed by [`ClientConn::halves`].
    type Wr<'a>: AsyncWrite + Abort + Unpin + Send
    where
        Self: 'a;

    /// Borrows the two directions separately; the connection itself is closed by its owner.
    fn halves(&mut self) -> (Self::Rd<'_>, Self::Wr<'_>);

    /// The TCP socket underneath (socket options).
    fn tcp(&self) -> &TcpStream;

    /// Waits until a byte, the end of the stream or an error can be read, consuming nothing.
    fn ready(&mut self) -> impl Future<Output = ()> + Send;

    /// Makes the connection end with a TCP reset when it is closed, as [`Abort::abort`] does
    /// through the write half (over TLS no `close_notify` is sent: the owner drops it).
    fn abort_on_close(&self) {
        linger_zero(self.tcp());
    }
}

/// Sets `SO_LINGER` 0 on `sock`: closing it then sends a reset.
fn linger_zero(sock: &TcpStream) {
    let _ = socket2::SockRef::from(sock).set_linger(Some(Duration::ZERO));
}

impl Abort for TcpWriteHalf<'_> {
    fn abort(&self) {
        linger_zero(self.as_ref());
    }
}

impl ClientConn for TcpStream {
    type Rd<'a> = TcpReadHalf<'a>;
    type Wr<'a> = TcpWriteHalf<'a>;

    fn halves(&mut self) -> (TcpReadHalf<'_>, TcpWriteHalf<'_>) {
        self.split()
    }

    fn tcp(&self) -> &TcpStream {
        self
    }

    async fn ready(&mut self) {
        // Peeking (not `readable`, whose readiness may be stale) waits for a byte, the end of
        // the stream or an error; the next read reports what it found.
        let mut byte = [0u8; 1];
        let _ = self.peek(&mut byte).await;
    }
}

/// A client connection over TLS (HTTP/1.1 on the HTTPS proxy endpoint).
pub struct TlsConn {
    tls: TlsStream<TcpStream>,
    /// A byte read by [`ClientConn::ready`] and not yet returned: TLS cannot be peeked (the
    /// next plaintext may already sit decrypted in the session), so the wait reads one byte.
    pushed: Option<u8>,
    /// Set by [`TlsWr::abort`]: the socket is closed with a reset when this is dropped.
    reset: Arc<AtomicBool>,
}

impl TlsConn {
    /// Wraps an accepted TLS session.
    pub fn new(tls: TlsStream<TcpStream>) -> TlsConn {
        TlsConn {
            tls,
            pushed: None,
            reset: Arc::new(AtomicBool::new(false)),
        }
    }
}

impl Drop for TlsConn {
    fn drop(&mut self) {
        if self.reset.load(Ordering::Relaxed) {
            linger_zero(self.tls.get_ref().0);
        }
    }
}

impl AsyncRead for TlsConn {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if buf.remaining() > 0 {
            if let Some(b) = self.pushed.take() {
                buf.put_slice(&[b]);
                return Poll::Ready(Ok(()));
            }
        }
        Pin::new(&mut self.tls).poll_read(cx, buf)
    }
}

impl AsyncWrite for TlsConn {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.tls).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.tls).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.tls).poll_shutdown(cx)
    }
}

/// The write half of a [`TlsConn`].
pub struct TlsWr<'a> {
    half: WriteHalf<&'a mut TlsConn>,
    reset: Arc<AtomicBool>,
}

impl Abort for TlsWr<'_> {
    fn abort(&self) {
        self.reset.store(true, Ordering::Relaxed);
    }
}

impl AsyncWrite for TlsWr<'_> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.half).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.half).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        // An aborted connection ends with a reset, never with a clean close_notify.
        if self.reset.load(Ordering::Relaxed) {
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.half).poll_shutdown(cx)
    }
}

impl ClientConn for TlsConn {
    type Rd<'a> = ReadHalf<&'a mut TlsConn>;
    type Wr<'a> = TlsWr<'a>;

    fn halves(&mut self) -> (Self::Rd<'_>, TlsWr<'_>) {
        let reset = self.reset.clone();
        let (rd, half) = tokio::io::split(self);
        (rd, TlsWr { half, reset })
    }

    fn tcp(&self) -> &TcpStream {
        self.tls.get_ref().0
    }

    async fn ready(&mut self) {
        if self.pushed.is_some() {
            return;
        }
        let mut byte = [0u8; 1];
        // An end of stream or an error is found again by the next read.
        if let Ok(1) = self.tls.read(&mut byte).await {
            self.pushed = Some(byte[0]);
        }
    }
}
