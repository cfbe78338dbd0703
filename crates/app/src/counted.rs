//! Byte counts that survive a failure, for the access records of relays: [`Counted`] wraps a
//! reader-writer and counts what its inner writer accepted into a counter the caller keeps,
//! so a tunnel that ends in an error (the client or the peer reset it) still logs the bytes
//! it carried. tokio's copy helpers return their counts only on success.
//!
//! What it does NOT do: count bytes read, or know whether the bytes it counts reached the
//! peer (what the inner writer accepted is counted, as on success).

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// `inner`, with every byte its writer accepts added to `written`.
#[derive(Debug)]
pub struct Counted<'a, T> {
    inner: T,
    written: &'a AtomicU64,
}

impl<'a, T> Counted<'a, T> {
    /// Wraps `inner`; bytes written through it are added to `written`.
    pub fn new(inner: T, written: &'a AtomicU64) -> Self {
        Counted { inner, written }
    }

    fn add(&self, n: usize) {
        self.written.fetch_add(n as u64, Ordering::Relaxed);
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Counted<'_, T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Counted<'_, T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = r {
            self.add(n);
        }
        r
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if let Poll::Ready(Ok(n)) = r {
            self.add(n);
        }
        r
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn what_was_written_before_a_failure_is_counted() {
        let (a, mut b) = tokio::io::duplex(64);
        let n = AtomicU64::new(0);
        let mut w = Counted::new(a, &n);
        w.write_all(b"hello").await.unwrap();
        w.write_all(&[7u8; 30]).await.unwrap();
        let mut got = [0u8; 35];
        b.read_exact(&mut got).await.unwrap();
        assert_eq!(n.load(Ordering::Relaxed), 35);
        // Reads pass through uncounted.
        b.write_all(b"up").await.unwrap();
        let mut two = [0u8; 2];
        w.read_exact(&mut two).await.unwrap();
        assert_eq!(&two, b"up");
        assert_eq!(n.load(Ordering::Relaxed), 35);
        // The peer goes away: the write fails and the count stays what was carried.
        drop(b);
        assert!(w.write_all(b"more").await.is_err());
        assert_eq!(n.load(Ordering::Relaxed), 35);
    }
}
