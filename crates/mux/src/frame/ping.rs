//! PING and PONG (PROTOCOL.md §3.6): keep connections warm and measure RTT.

use bytes::{Buf, BufMut, Bytes};

use super::{expect_stream, flags, put_header, ty, Header};
use crate::error::ConnError;

/// PING payload; `ack` marks the answer (PONG).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ping {
    /// This is a PONG echoing `payload`.
    pub ack: bool,
    /// Opaque value chosen by the pinger.
    pub payload: u64,
}

impl Ping {
    /// Decodes a PING payload.
    pub fn decode(h: &Header, mut p: Bytes) -> Result<Self, ConnError> {
        expect_stream(h, true)?;
        if p.len() != 8 {
            return Err(ConnError::Malformed("PING payload is not 8 bytes"));
        }
        Ok(Ping {
            ack: h.flags & flags::ACK != 0,
            payload: p.get_u64(),
        })
    }

    /// Appends the encoded frame.
    pub fn encode(&self, dst: &mut impl BufMut) {
        let f = if self.ack { flags::ACK } else { 0 };
        put_header(dst, ty::PING, f, 0, 8);
        dst.put_u64(self.payload);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::{tests::round_trip, Frame};
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn round_trips(ack: bool, payload: u64) {
            let f = Frame::Ping(Ping { ack, payload });
            prop_assert_eq!(round_trip(&f), f);
        }
    }
}
