//! RESET (PROTOCOL.md §3.4): aborts both directions of a stream.

use bytes::{Buf, BufMut, Bytes};

use super::{expect_stream, put_header, ty, Header};
use crate::error::{ConnError, ErrorCode};

/// RESET payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reset {
    /// Stream id (never 0).
    pub stream: u64,
    /// Why.
    pub code: ErrorCode,
}

impl Reset {
    /// Decodes a RESET payload.
    pub fn decode(h: &Header, mut p: Bytes) -> Result<Self, ConnError> {
        expect_stream(h, false)?;
        if p.len() != 4 {
            return Err(ConnError::Malformed("RESET payload is not 4 bytes"));
        }
        Ok(Reset {
            stream: h.stream,
            code: ErrorCode(p.get_u32()),
        })
    }

    /// Appends the encoded frame.
    pub fn encode(&self, dst: &mut impl BufMut) {
        put_header(dst, ty::RESET, 0, self.stream, 4);
        dst.put_u32(self.code.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::{tests::round_trip, Frame};
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn round_trips(stream in 1..=crate::varint::MAX, code: u32) {
            let f = Frame::Reset(Reset { stream, code: ErrorCode(code) });
            prop_assert_eq!(round_trip(&f), f);
        }
    }
}
