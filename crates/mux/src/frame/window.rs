//! WINDOW (PROTOCOL.md §3.5): returns flow-control credit for a stream.

use bytes::{Buf, BufMut, Bytes};

use super::{put_header, ty, Header};
use crate::error::ConnError;

/// WINDOW payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    /// Stream id; 0 is reserved for connection-level credit (§3.5) and ignored by
    /// this version.
    pub stream: u64,
    /// Bytes of credit added (never 0).
    pub increment: u32,
}

impl Window {
    /// Decodes a WINDOW payload.
    pub fn decode(h: &Header, mut p: Bytes) -> Result<Self, ConnError> {
        if p.len() != 4 {
            return Err(ConnError::Malformed("WINDOW payload is not 4 bytes"));
        }
        let increment = p.get_u32();
        if increment == 0 {
            return Err(ConnError::Malformed("WINDOW increment of 0"));
        }
        Ok(Window {
            stream: h.stream,
            increment,
        })
    }

    /// Appends the encoded frame.
    pub fn encode(&self, dst: &mut impl BufMut) {
        put_header(dst, ty::WINDOW, 0, self.stream, 4);
        dst.put_u32(self.increment);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::{tests::round_trip, Frame};
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn round_trips(stream in 0..=crate::varint::MAX, increment in 1..=u32::MAX) {
            let f = Frame::Window(Window { stream, increment });
            prop_assert_eq!(round_trip(&f), f);
        }
    }
}
