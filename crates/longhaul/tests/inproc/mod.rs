//! In-process fixture shared by the tests that run the edge's client code against the remote's
//! handler without sockets between them: the far end of an in-memory stream.
#![allow(dead_code)]

use std::pin::Pin;
use std::task::{Context, Poll};

use remote_proxy::errors::ResetReason;
use remote_proxy::handler::FarStream;
use tokio::io::{AsyncRead, AsyncWrite, DuplexStream, ReadBuf};

/// The far end of an in-memory stream.
pub struct Far(pub DuplexStream);

impl AsyncRead for Far {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}
impl AsyncWrite for Far {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}
impl FarStream for Far {
    fn reset(&mut self, _why: ResetReason) {}
}
