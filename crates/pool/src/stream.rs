//! [`MuxStream`]: one bidirectional stream as an `AsyncRead + AsyncWrite`.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use mux::{ErrorCode, Read};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::quic::QuicStream;
use crate::shared::Shared;
use crate::StreamError;

/// One bidirectional stream of the pool. `poll_shutdown` sends FIN for our
/// direction (the other stays readable); reads return 0 (EOF) on the peer's
/// FIN; writes return `Pending` while the stream has no credit, so memory stays
/// bounded by the window. Dropping it before both directions ended cleanly
/// resets it with CANCEL. After a reset, reads and writes fail with an
/// `io::Error` carrying a [`StreamError`] (see [`crate::stream_error`]).
///
/// Over the QUIC carrier the same handle wraps one QUIC stream
/// (docs/PROTOCOL.md §8) with the same semantics.
pub struct MuxStream {
    repr: Repr,
}

enum Repr {
    /// A stream of the mux session (TCP carriers).
    Mux(MuxRepr),
    /// One bidirectional QUIC stream.
    Quic(Box<QuicStream>),
}

struct MuxRepr {
    shared: Arc<Shared>,
    id: u64,
    /// Our direction's lane was logged (at debug level, once, when its first bytes bound it).
    bound: bool,
}

impl std::fmt::Debug for MuxStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MuxStream").field("id", &self.id()).finish()
    }
}

impl MuxStream {
    pub(crate) fn new(shared: Arc<Shared>, id: u64) -> Self {
        MuxStream {
            repr: Repr::Mux(MuxRepr {
                shared,
                id,
                bound: false,
            }),
        }
    }

    pub(crate) fn quic(s: QuicStream) -> Self {
        MuxStream {
            repr: Repr::Quic(Box::new(s)),
        }
    }

    /// Pool-wide stream id.
    pub fn id(&self) -> u64 {
        match &self.repr {
            Repr::Mux(m) => m.id,
            Repr::Quic(q) => q.id(),
        }
    }

    /// Aborts both directions with `code` (sends RESET).
    pub fn reset(&mut self, code: ErrorCode) {
        match &mut self.repr {
            Repr::Mux(m) => {
                let id = m.id;
                m.shared.op(|i| i.session.reset(id, code));
            }
            Repr::Quic(q) => q.reset(code),
        }
    }

    /// Ids of the connections (as in [`crate::ConnStats::id`]) our direction
    /// and the peer's direction are bound to, once bound (diagnostics).
    pub fn connections(&self) -> (Option<u64>, Option<u64>) {
        match &self.repr {
            Repr::Mux(m) => {
                let id = m.id;
                m.shared.op(|i| {
                    i.session.stream(id).map_or((None, None), |s| {
                        (s.send_conn.map(|c| c.0), s.recv_conn.map(|c| c.0))
                    })
                })
            }
            Repr::Quic(q) => (Some(q.conn_id()), Some(q.conn_id())),
        }
    }

    /// Resets with REFUSED_STREAM (never processed: the edge may retry) and drops.
    pub(crate) fn refuse(mut self) {
        self.reset(ErrorCode::REFUSED_STREAM);
    }

    /// Bytes of the peer's direction delivered to us so far.
    pub fn bytes_received(&self) -> u64 {
        match &self.repr {
            Repr::Mux(m) => {
                let id = m.id;
                m.shared.op(|i| i.session.bytes_received(id))
            }
            Repr::Quic(q) => q.bytes_received(),
        }
    }

    /// A handle that resolves when this stream is reset. Reads report a
    /// received FIN before a later reset (the peer's direction did end
    /// cleanly), so a task that has read the whole request and now waits on
    /// something else uses this to learn that the peer abandoned the stream.
    /// Take it before splitting the stream.
    pub fn reset_watch(&self) -> ResetWatch {
        match &self.repr {
            Repr::Mux(m) => ResetWatch(WatchRepr::Mux {
                shared: m.shared.clone(),
                id: m.id,
            }),
            Repr::Quic(q) => ResetWatch(WatchRepr::Quic {
                id: q.id(),
                stopped: Arc::new(Mutex::new(q.reset_future())),
            }),
        }
    }
}

type ResetFuture = Pin<Box<dyn Future<Output = ErrorCode> + Send + Sync>>;

/// Resolves when its stream is reset (see [`MuxStream::reset_watch`]). It
/// is only woken while the [`MuxStream`] it came from is alive.
#[derive(Clone)]
pub struct ResetWatch(WatchRepr);

#[derive(Clone)]
enum WatchRepr {
    Mux {
        shared: Arc<Shared>,
        id: u64,
    },
    /// The QUIC stream's `stopped` future: the peer's STOP_SENDING is its reset (§8.2).
    Quic {
        id: u64,
        stopped: Arc<Mutex<ResetFuture>>,
    },
}

impl std::fmt::Debug for ResetWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let id = match &self.0 {
            WatchRepr::Mux { id, .. } | WatchRepr::Quic { id, .. } => id,
        };
        f.debug_struct("ResetWatch").field("id", id).finish()
    }
}

impl ResetWatch {
    /// `Ready(code)` once the stream was reset; `Ready(CANCEL)` once its
    /// [`MuxStream`] was dropped (nothing would wake the watch after that).
    pub fn poll_reset(&self, cx: &mut Context<'_>) -> Poll<ErrorCode> {
        let (shared, id) = match &self.0 {
            WatchRepr::Mux { shared, id } => (shared, *id),
            WatchRepr::Quic { stopped, .. } => {
                let mut f = stopped.lock().unwrap_or_else(|p| p.into_inner());
                return f.as_mut().poll(cx);
            }
        };
        shared.op(|i| {
            if let Some(code) = i.session.stream(id).and_then(|s| s.reset) {
                return Poll::Ready(code);
            }
            // A live handle always has an entry (inserted at open or accept,
            // removed on drop), so no entry is created here for a dead one.
            match i.wakers.get_mut(&id) {
                Some(w) => {
                    w.reset = Some(cx.waker().clone());
                    Poll::Pending
                }
                None => Poll::Ready(ErrorCode::CANCEL),
            }
        })
    }

    /// Waits until the stream is reset and returns the code.
    pub async fn wait(&self) -> ErrorCode {
        std::future::poll_fn(|cx| self.poll_reset(cx)).await
    }
}

pub(crate) fn to_io(e: mux::StreamError, id: u64) -> io::Error {
    match e {
        mux::StreamError::Reset { code, retryable } => {
            let kind = if code == ErrorCode::CONNECTION_LOST || code == ErrorCode::CANCEL {
                io::ErrorKind::ConnectionAborted
            } else {
                io::ErrorKind::ConnectionReset
            };
            let reason = match code {
                ErrorCode::CONNECTION_LOST => "the pool connection carrying it was lost".to_owned(),
                ErrorCode::REFUSED_STREAM => "the peer refused it unprocessed".to_owned(),
                ErrorCode::CANCEL => "cancelled".to_owned(),
                c => format!("reset with {c}"),
            };
            io::Error::new(
                kind,
                StreamError {
                    code,
                    retryable,
                    reason: format!("stream {id}: {reason}"),
                },
            )
        }
        mux::StreamError::Finished => {
            io::Error::new(io::ErrorKind::BrokenPipe, "write after shutdown")
        }
        mux::StreamError::Unknown(_) => io::Error::new(
            io::ErrorKind::ConnectionAborted,
            StreamError {
                code: ErrorCode::CANCEL,
                retryable: false,
                reason: format!("stream {id} no longer exists"),
            },
        ),
    }
}

impl AsyncRead for MuxStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if buf.remaining() == 0 {
            return Poll::Ready(Ok(()));
        }
        let m = match &mut self.get_mut().repr {
            Repr::Quic(q) => return Pin::new(&mut **q).poll_read(cx, buf),
            Repr::Mux(m) => m,
        };
        let id = m.id;
        m.shared
            .op(|i| match i.session.read(id, buf.initialize_unfilled()) {
                Ok(Read::Data(n)) => {
                    buf.advance(n);
                    Poll::Ready(Ok(()))
                }
                Ok(Read::Fin) => Poll::Ready(Ok(())),
                Ok(Read::Blocked) => {
                    i.wakers.entry(id).or_default().read = Some(cx.waker().clone());
                    Poll::Pending
                }
                Err(e) => Poll::Ready(Err(to_io(e, id))),
            })
    }
}

impl AsyncWrite for MuxStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if buf.is_empty() {
            return Poll::Ready(Ok(0));
        }
        let m = match &mut self.get_mut().repr {
            Repr::Quic(q) => return Pin::new(&mut **q).poll_write(cx, buf),
            Repr::Mux(m) => m,
        };
        let id = m.id;
        let bound = &mut m.bound;
        m.shared.op(|i| match i.session.send(id, buf) {
            Ok(0) => {
                i.wakers.entry(id).or_default().write = Some(cx.waker().clone());
                Poll::Pending
            }
            Ok(n) => {
                if !*bound {
                    // Which lane a direction took, for reading one load end to end (the
                    // policy's choice is not otherwise visible).
                    if let Some(s) = i.session.stream(id).filter(|s| s.send_conn.is_some()) {
                        *bound = true;
                        tracing::debug!(
                            stream = id,
                            conn = s.send_conn.map(|c| c.0),
                            peer_conn = s.recv_conn.map(|c| c.0),
                            "stream direction bound"
                        );
                    }
                }
                Poll::Ready(Ok(n))
            }
            Err(e) => Poll::Ready(Err(to_io(e, id))),
        })
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        // Written bytes are already queued in the session (or quinn) for the driver.
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let m = match &mut self.get_mut().repr {
            Repr::Quic(q) => return Pin::new(&mut **q).poll_shutdown(cx),
            Repr::Mux(m) => m,
        };
        let id = m.id;
        m.shared.op(|i| match i.session.finish(id) {
            Ok(()) => Poll::Ready(Ok(())),
            Err(e) => Poll::Ready(Err(to_io(e, id))),
        })
    }
}

impl Drop for MuxRepr {
    fn drop(&mut self) {
        let id = self.id;
        self.shared.op(|i| {
            i.session.release(id);
            i.wakers.remove(&id);
        });
    }
}
