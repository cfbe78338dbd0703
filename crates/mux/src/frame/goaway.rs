//! GOAWAY (PROTOCOL.md §3.7): drain (NO_ERROR) or close one connection (error).

use bytes::{Buf, BufMut, Bytes};

use super::{expect_stream, put_header, ty, Header};
use crate::error::{ConnError, ErrorCode};

/// Longest reason text a GOAWAY carries, bytes (longer reasons are cut).
pub const MAX_REASON_LEN: usize = 512;

/// GOAWAY payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GoAway {
    /// Highest stream id the sender accepted (§3.7, §5.3); streams above it
    /// were not processed and may be retried.
    pub last_stream: u64,
    /// NO_ERROR for a drain, else why this connection is closed.
    pub code: ErrorCode,
    /// Human-readable reason for logs (UTF-8, lossy on decode).
    pub reason: String,
}

impl GoAway {
    /// Decodes a GOAWAY payload.
    pub fn decode(h: &Header, mut p: Bytes) -> Result<Self, ConnError> {
        expect_stream(h, true)?;
        if p.len() < 12 {
            return Err(ConnError::Malformed("GOAWAY too short"));
        }
        let last_stream = p.get_u64();
        let code = ErrorCode(p.get_u32());
        let n = p.len().min(MAX_REASON_LEN);
        Ok(GoAway {
            last_stream,
            code,
            reason: String::from_utf8_lossy(&p[..n]).into_owned(),
        })
    }

    /// Appends the encoded frame.
    pub fn encode(&self, dst: &mut impl BufMut) {
        let mut n = self.reason.len().min(MAX_REASON_LEN);
        while !self.reason.is_char_boundary(n) {
            n -= 1;
        }
        put_header(dst, ty::GOAWAY, 0, 0, 12 + n);
        dst.put_u64(self.last_stream);
        dst.put_u32(self.code.0);
        dst.put_slice(&self.reason.as_bytes()[..n]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::{tests::round_trip, Frame};
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn round_trips(last_stream: u64, code: u32, reason in ".{0,100}") {
            let f = Frame::GoAway(GoAway { last_stream, code: ErrorCode(code), reason });
            prop_assert_eq!(round_trip(&f), f);
        }
    }
}
