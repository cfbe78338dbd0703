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

/// Optional protocol features a sender announces in its HELLO (PROTOCOL.md §3.1): bit flags,
/// each in force on a connection once both HELLOs carry it. Unknown bits are ignored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Features(pub u32);

impl Features {
    /// No optional feature.
    pub const NONE: Features = Features(0);
    /// The sender reads an OPEN's page age (flag `AGE`, §3.2) and ranks the stream by it.
    pub const PAGE_AGE: Features = Features(0x1);
    /// QUIC carrier only (PROTOCOL.md §8.6): the sender decodes parity datagrams on this
    /// connection and sends them when its configuration says so. Not part of
    /// [`Features::SUPPORTED`]: the QUIC carrier adds it when it runs parity.
    pub const PARITY: Features = Features(0x2);
    /// Every feature this implementation speaks on every carrier.
    pub const SUPPORTED: Features = Features::PAGE_AGE;

    /// Whether every bit of `other` is set here.
    pub fn contains(self, other: Features) -> bool {
        self.0 & other.0 == other.0
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
    /// Credit the sender grants this connection as a whole in the direction towards it, bytes
    /// (PROTOCOL.md §4.1); an appended field, absent from peers that do not enforce connection
    /// credit (then neither side does).
    pub conn_window: Option<u32>,
    /// Optional features the sender speaks (appended after `conn_window`, so sent only with
    /// it; absent from peers that predate it, which then speak none).
    pub features: Option<Features>,
}

/// Payload length of a HELLO without its appended fields (the shortest one accepted).
pub const HELLO_LEN: usize = 2 + 1 + 8 + 4 + 4 + 4;
/// Payload length of a HELLO with `conn_window`.
pub const HELLO_CONN_WINDOW_LEN: usize = HELLO_LEN + 4;
/// Payload length of a HELLO with `conn_window` and `features`.
pub const HELLO_FEATURES_LEN: usize = HELLO_CONN_WINDOW_LEN + 4;

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
        let (session, max_frame_size) = (p.get_u64(), p.get_u32());
        let (initial_window, max_streams) = (p.get_u32(), p.get_u32());
        // Appended fields are read when present; longer payloads are allowed (§3.1).
        let conn_window = (p.remaining() >= 4).then(|| p.get_u32());
        let features = (p.remaining() >= 4).then(|| Features(p.get_u32()));
        Ok(Hello {
            version,
            role,
            session,
            max_frame_size,
            initial_window,
            max_streams,
            conn_window,
            features,
        })
    }

    /// Appends the encoded frame. `features` is appended only with `conn_window` (the fields
    /// are positional).
    pub fn encode(&self, dst: &mut impl BufMut) {
        let len = match (self.conn_window, self.features) {
            (Some(_), Some(_)) => HELLO_FEATURES_LEN,
            (Some(_), None) => HELLO_CONN_WINDOW_LEN,
            (None, _) => HELLO_LEN,
        };
        put_header(dst, ty::HELLO, 0, 0, len);
        dst.put_u16(self.version);
        dst.put_u8(self.role.to_wire());
        dst.put_u64(self.session);
        dst.put_u32(self.max_frame_size);
        dst.put_u32(self.initial_window);
        dst.put_u32(self.max_streams);
        if let Some(w) = self.conn_window {
            dst.put_u32(w);
            if let Some(f) = self.features {
                dst.put_u32(f.0);
            }
        }
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
        fn round_trips(
            version: u16, edge: bool, session: u64, mf: u32, w: u32, ms: u32, cw: Option<u32>,
            features: Option<u32>,
        ) {
            let f = Frame::Hello(Hello {
                version,
                role: if edge { Role::Edge } else { Role::Remote },
                session,
                max_frame_size: mf,
                initial_window: w,
                max_streams: ms,
                conn_window: cw,
                // Positional: features travel only behind conn_window.
                features: cw.and(features.map(Features)),
            });
            prop_assert_eq!(round_trip(&f), f);
        }
    }

    #[test]
    fn a_hello_without_conn_window_is_read_as_such() {
        let h = Hello {
            version: 1,
            role: Role::Edge,
            session: 9,
            max_frame_size: 16384,
            initial_window: 65536,
            max_streams: 10,
            conn_window: None,
            features: None,
        };
        let mut b = Vec::new();
        h.encode(&mut b);
        assert_eq!(b.len(), 5 + HELLO_LEN);
        assert_eq!(Hello::peek(&b), Ok(Some(h)));
        let with = Hello {
            conn_window: Some(1 << 20),
            ..h
        };
        b.clear();
        with.encode(&mut b);
        assert_eq!(b.len(), 5 + HELLO_CONN_WINDOW_LEN);
        assert_eq!(Hello::peek(&b), Ok(Some(with)));
    }

    #[test]
    fn features_follow_conn_window_and_unknown_bits_are_kept_for_the_reader_to_ignore() {
        let h = Hello {
            version: 1,
            role: Role::Remote,
            session: 9,
            max_frame_size: 16384,
            initial_window: 65536,
            max_streams: 10,
            conn_window: Some(1 << 20),
            features: Some(Features(Features::PAGE_AGE.0 | 0x8000_0000)),
        };
        let mut b = Vec::new();
        h.encode(&mut b);
        assert_eq!(b.len(), 5 + HELLO_FEATURES_LEN);
        let got = Hello::peek(&b).unwrap().unwrap();
        assert_eq!(got, h);
        assert!(got.features.unwrap().contains(Features::PAGE_AGE));
        // Without conn_window there is no place for features: a reader sees neither.
        let bare = Hello {
            conn_window: None,
            ..h
        };
        b.clear();
        bare.encode(&mut b);
        assert_eq!(b.len(), 5 + HELLO_LEN);
        assert_eq!(Hello::peek(&b).unwrap().unwrap().features, None);
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
