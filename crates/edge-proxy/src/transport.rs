//! The stream transport the edge opens streams on, as a trait.
//!
//! The production implementation is the mux pool (see [`crate::pool_transport`]); tests use
//! in-process pipes. The edge code only needs "open a stream of a kind to a target with some
//! first bytes" and "tell me what a stream error meant on the far side".
//!
//! It does NOT decide anything about HTTP: that is [`crate::client`]'s job.

use std::future::Future;
use std::io;

use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncWrite};

pub use app::pool_glue::StreamKind;

/// Why the far side of a stream failed, as reported by the transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FarCode {
    /// The remote could not resolve the target's name.
    DnsFailed,
    /// The remote could not connect to the target (refused, unreachable).
    ConnectFailed,
    /// The target did not answer in time.
    Timeout,
    /// The remote refused the target by policy.
    Forbidden,
    /// The pool connection carrying the stream died.
    ConnectionLost,
    /// The remote refused the stream before processing it (draining, over a limit).
    Refused,
    /// The stream was cancelled or failed for another reason.
    Other,
}

/// A far-side failure carried by an I/O error of a stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FarFailure {
    /// What failed.
    pub code: FarCode,
    /// True when the request was certainly not processed and no reply bytes were delivered,
    /// so an idempotent request may be sent again.
    pub retryable: bool,
    /// Human-readable detail for the log.
    pub reason: String,
}

/// Why a stream could not be opened.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{reason}")]
pub struct OpenError {
    /// What kind of failure it was.
    pub cause: OpenCause,
    /// Human-readable detail.
    pub reason: String,
}

/// The class of an [`OpenError`], which decides what the client is told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenCause {
    /// No pool connection could carry the stream (none up, draining, or another failure).
    Unavailable,
    /// Every pool connection stayed at its stream limit for the whole bounded wait, or the
    /// queue of opens waiting for a stream slot was full: the pool is up but busy.
    StreamLimit,
}

impl OpenError {
    /// An open that failed because no pool connection could carry it.
    pub fn unavailable(reason: impl Into<String>) -> OpenError {
        OpenError {
            cause: OpenCause::Unavailable,
            reason: reason.into(),
        }
    }

    /// An open that found no free stream slot within the bounded wait.
    pub fn stream_limit(reason: impl Into<String>) -> OpenError {
        OpenError {
            cause: OpenCause::StreamLimit,
            reason: reason.into(),
        }
    }
}

/// Something that opens streams to the remote proxy.
pub trait Transport: Send + Sync + 'static {
    /// The stream type; a duplex byte stream whose `poll_shutdown` sends FIN for our direction.
    type Stream: AsyncRead + AsyncWrite + Unpin + Send + 'static;

    /// Opens a stream of `kind` to `target` (`host:port`), with `first` as its first bytes, for
    /// a request of a page that began `age` ago ([`crate::page`]): the transport may rank it
    /// with that page's older streams (PROTOCOL.md §5.1), or open it as any other.
    fn open_aged(
        &self,
        kind: StreamKind,
        target: &str,
        first: Bytes,
        age: std::time::Duration,
    ) -> impl Future<Output = Result<Self::Stream, OpenError>> + Send;

    /// [`Transport::open_aged`] for a stream of no page (a tunnel) or a page just begun.
    fn open(
        &self,
        kind: StreamKind,
        target: &str,
        first: Bytes,
    ) -> impl Future<Output = Result<Self::Stream, OpenError>> + Send {
        self.open_aged(kind, target, first, std::time::Duration::ZERO)
    }

    /// If `err` (from reading or writing a stream) reports a far-side failure, what it was.
    fn failure(&self, err: &io::Error) -> Option<FarFailure>;
}
