//! Wire error codes and the one place that maps local errors to them
//! (PROTOCOL.md §6).

use std::fmt;

/// An error code carried by RESET and GOAWAY frames (PROTOCOL.md §6).
///
/// The set is open: a peer may send a code this version does not know, which is
/// kept as is and displayed as `UNKNOWN(n)`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ErrorCode(pub u32);

impl ErrorCode {
    /// Graceful close; no error.
    pub const NO_ERROR: ErrorCode = ErrorCode(0x0);
    /// The peer broke the protocol (malformed frame, frame in the wrong state).
    pub const PROTOCOL_ERROR: ErrorCode = ErrorCode(0x1);
    /// An unexpected local failure.
    pub const INTERNAL_ERROR: ErrorCode = ErrorCode(0x2);
    /// The peer sent more than the credit it was given.
    pub const FLOW_CONTROL_ERROR: ErrorCode = ErrorCode(0x3);
    /// The stream was never processed by the receiver: it is always safe to retry.
    pub const REFUSED_STREAM: ErrorCode = ErrorCode(0x4);
    /// The stream is no longer needed by the side that resets it.
    pub const CANCEL: ErrorCode = ErrorCode(0x5);
    /// The pool connection carrying a direction of the stream was lost.
    pub const CONNECTION_LOST: ErrorCode = ErrorCode(0x6);
    /// The far side could not connect to the target.
    pub const CONNECT_FAILED: ErrorCode = ErrorCode(0x7);
    /// The far side could not resolve the target's name.
    pub const DNS_FAILED: ErrorCode = ErrorCode(0x8);
    /// A deadline passed (connect, handshake, ping).
    pub const TIMEOUT: ErrorCode = ErrorCode(0x9);
    /// The target is not allowed by the far side's policy.
    pub const FORBIDDEN: ErrorCode = ErrorCode(0xa);
    /// A frame exceeded the receiver's maximum frame size.
    pub const FRAME_SIZE_ERROR: ErrorCode = ErrorCode(0xb);
    /// The peer is generating excessive load (e.g. a flood of PINGs).
    pub const ENHANCE_YOUR_CALM: ErrorCode = ErrorCode(0xc);
    /// The HELLO carried a version this implementation does not speak.
    pub const VERSION_MISMATCH: ErrorCode = ErrorCode(0xd);

    /// The constant's name, if this code is one this version knows.
    pub fn name(self) -> Option<&'static str> {
        Some(match self {
            Self::NO_ERROR => "NO_ERROR",
            Self::PROTOCOL_ERROR => "PROTOCOL_ERROR",
            Self::INTERNAL_ERROR => "INTERNAL_ERROR",
            Self::FLOW_CONTROL_ERROR => "FLOW_CONTROL_ERROR",
            Self::REFUSED_STREAM => "REFUSED_STREAM",
            Self::CANCEL => "CANCEL",
            Self::CONNECTION_LOST => "CONNECTION_LOST",
            Self::CONNECT_FAILED => "CONNECT_FAILED",
            Self::DNS_FAILED => "DNS_FAILED",
            Self::TIMEOUT => "TIMEOUT",
            Self::FORBIDDEN => "FORBIDDEN",
            Self::FRAME_SIZE_ERROR => "FRAME_SIZE_ERROR",
            Self::ENHANCE_YOUR_CALM => "ENHANCE_YOUR_CALM",
            Self::VERSION_MISMATCH => "VERSION_MISMATCH",
            _ => return None,
        })
    }
}

impl fmt::Debug for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(n) => f.write_str(n),
            None => write!(f, "UNKNOWN({:#x})", self.0),
        }
    }
}

/// Why a connection had to be closed by this side: every local reason maps to
/// exactly one wire code in [`ConnError::code`] (PROTOCOL.md §6).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConnError {
    /// A frame could not be decoded (the reason names what was wrong).
    #[error("peer sent a malformed frame: {0}")]
    Malformed(&'static str),
    /// A frame's payload was larger than our advertised maximum.
    #[error("peer sent a {len}-byte frame, larger than our maximum of {max}")]
    FrameTooLarge {
        /// Payload length announced in the header.
        len: usize,
        /// Our advertised maximum.
        max: usize,
    },
    /// A well-formed frame arrived where the protocol does not allow it.
    #[error("peer broke the protocol: {0}")]
    Protocol(&'static str),
    /// The peer's HELLO carried a version we do not speak.
    #[error("peer speaks protocol version {0}, we speak {ver}", ver = crate::frame::VERSION)]
    Version(u16),
    /// The peer floods us with frames that need answers.
    #[error("peer is generating excessive load: {0}")]
    Calm(&'static str),
    /// The HELLO or a PONG did not arrive in time.
    #[error("timed out: {0}")]
    Timeout(&'static str),
    /// The peer sent more on the connection than its connection credit (PROTOCOL.md §4.1).
    #[error("peer broke flow control: {0}")]
    FlowControl(&'static str),
}

impl ConnError {
    /// The wire code sent in the GOAWAY that closes the connection.
    pub fn code(&self) -> ErrorCode {
        match self {
            ConnError::Malformed(_) | ConnError::Protocol(_) => ErrorCode::PROTOCOL_ERROR,
            ConnError::FrameTooLarge { .. } => ErrorCode::FRAME_SIZE_ERROR,
            ConnError::Version(_) => ErrorCode::VERSION_MISMATCH,
            ConnError::Calm(_) => ErrorCode::ENHANCE_YOUR_CALM,
            ConnError::Timeout(_) => ErrorCode::TIMEOUT,
            ConnError::FlowControl(_) => ErrorCode::FLOW_CONTROL_ERROR,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_names_known_and_unknown_codes() {
        assert_eq!(ErrorCode::REFUSED_STREAM.to_string(), "REFUSED_STREAM");
        assert_eq!(ErrorCode(0x77).to_string(), "UNKNOWN(0x77)");
    }

    #[test]
    fn local_errors_map_to_one_code_each() {
        assert_eq!(ConnError::Malformed("x").code(), ErrorCode::PROTOCOL_ERROR);
        assert_eq!(
            ConnError::FrameTooLarge { len: 2, max: 1 }.code(),
            ErrorCode::FRAME_SIZE_ERROR
        );
        assert_eq!(ConnError::Timeout("ping").code(), ErrorCode::TIMEOUT);
        assert_eq!(
            ConnError::FlowControl("x").code(),
            ErrorCode::FLOW_CONTROL_ERROR
        );
    }
}
