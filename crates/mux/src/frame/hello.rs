//! HELLO (PROTOCOL.md §3.1): the first frame each side sends on a connection.

use bytes::{Buf, BufMut, Bytes};

use super::{expect_stream, put_header, ty, Header};
use crate::error::ConnError;

/// Which end of the pool a peer is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// The near side: opens streams.
    Edge,
    /// The far side: accepts streams.
    Remote,
}

impl Role {
    fn to_wire(self) -> u8 {
        match self {
            Role::Edge => 0,
            Role::Remote => 1,
        }
    }
}

/// HELLO payload: version, role, pool session id and the sender's limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hello {
    /// Protocol version of the sender.
    pub version: u16,
    /// The sender's role.
    pub role: Role,
    /// Pool session id: the edge picks it; every connection of one edge pool
    /// carries the same id, and the remote echoes it.
    pub session: u64,
    /// Largest frame payload the sender accepts, bytes.
    pub max_frame_size: u32,
    /// Credit the sender grants each new stream in the direction towards it, bytes.
    pub initial_window: u32,
    /// Most concurrent streams the sender accepts.
    pub max_streams: u32,
}

/// Payload length of a HELLO.
pub const HELLO_LEN: usize = 2 + 1 + 8 + 4 + 4 + 4;

impl Hello {
    /// Decodes a HELLO payload.
    pub fn decode(h: &Header, mut p: Bytes) -> Result<Self, ConnError> {
        expect_stream(h, true)?;
        if p.len() < HELLO_LEN {
            return Err(ConnError::Malformed("HELLO too short"));
        }
        let version = p.get_u16();
        let role = match p.get_u8() {
            0 => Role::Edge,
            1 => Role::Remote,
            _ => {
                return Err(ConnError::Malformed(
                    "HELLO role is neither edge nor remote",
                ))
            }
        };
        // Longer payloads are allowed: later versions may append fields (§3.1).
        Ok(Hello {
            version,
            role,
            session: p.get_u64(),
            max_frame_size: p.get_u32(),
            initial_window: p.get_u32(),
            max_streams: p.get_u32(),
        })
    }

    /// Appends the encoded frame.
    pub fn encode(&self, dst: &mut impl BufMut) {
        put_header(dst, ty::HELLO, 0, 0, HELLO_LEN);
        dst.put_u16(self.version);
        dst.put_u8(self.role.to_wire());
        dst.put_u64(self.session);
        dst.put_u32(self.max_frame_size);
        dst.put_u32(self.initial_window);
        dst.put_u32(self.max_streams);
    }

    /// Reads the HELLO at the front of a connection's first bytes without
    /// consuming them, so a server can pick the session before feeding the
    /// bytes to it. `Ok(None)`: more bytes needed.
    pub fn peek(src: &[u8]) -> Result<Option<Hello>, ConnError> {
        let Some((h, hlen)) = Header::decode(src) else {
            return Ok(None);
        };
        if h.ty != ty::HELLO {
            return Err(ConnError::Protocol("first frame is not HELLO"));
        }
        let len = usize::from(h.len);
        if len > 1024 {
            return Err(ConnError::FrameTooLarge { len, max: 1024 });
        }
        if src.len() < hlen + len {
            return Ok(None);
        }
        Hello::decode(&h, Bytes::copy_from_slice(&src[hlen..hlen + len])).map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::{tests::round_trip, Frame};
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn round_trips(version: u16, edge: bool, session: u64, mf: u32, w: u32, ms: u32) {
            let f = Frame::Hello(Hello {
                version,
                role: if edge { Role::Edge } else { Role::Remote },
                session,
                max_frame_size: mf,
                initial_window: w,
                max_streams: ms,
            });
            prop_assert_eq!(round_trip(&f), f);
        }
    }

    #[test]
    fn peek_needs_hello_first() {
        let mut b = Vec::new();
        crate::frame::Ping {
            ack: false,
            payload: 1,
        }
        .encode(&mut b);
        assert!(Hello::peek(&b).is_err());
        assert_eq!(Hello::peek(&[1, 0]), Ok(None));
    }
}
