//! OPEN (PROTOCOL.md §3.2): creates a stream with no round trip.

use bytes::{Buf, BufMut, Bytes};

use super::{expect_stream, flags, put_header, ty, Header};
use crate::error::ConnError;

/// What a stream carries (PROTOCOL.md §3.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// One HTTP/1.1 request and exactly one response.
    Http,
    /// Raw bytes both ways to `target`.
    Tunnel,
}

/// Longest target ("host:port") an OPEN may carry, bytes.
pub const MAX_TARGET_LEN: usize = 255 + 6;

/// OPEN payload: kind, target and the stream's first bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Open {
    /// The new stream's pool-wide id (never 0).
    pub stream: u64,
    /// What the stream carries.
    pub kind: Kind,
    /// "host:port" the far side connects to (UTF-8, at most [`MAX_TARGET_LEN`]).
    pub target: String,
    /// First bytes of the opener's direction (counted against the stream window).
    pub data: Bytes,
    /// The opener's direction ends with these bytes.
    pub fin: bool,
    /// How long before this frame was sent the page the stream belongs to began, in ms
    /// (flag `AGE`, sent only where the peer's HELLO announced `PAGE_AGE`): the receiver
    /// ranks the stream's reply as if it had arrived that much earlier (§5.1).
    pub age_ms: Option<u64>,
}

impl Open {
    /// Payload overhead before the first bytes: the age if any (a varint), kind (1), target
    /// length (2) and the target.
    pub fn prefix_len(target: &str, age_ms: Option<u64>) -> usize {
        age_ms.map_or(0, |a| crate::varint::len(a.min(crate::varint::MAX))) + 3 + target.len()
    }

    /// Decodes an OPEN payload.
    pub fn decode(h: &Header, mut p: Bytes) -> Result<Self, ConnError> {
        expect_stream(h, false)?;
        let age_ms = if h.flags & flags::AGE != 0 {
            let (v, n) =
                crate::varint::peek(&p).ok_or(ConnError::Malformed("OPEN age cut short"))?;
            p.advance(n);
            Some(v)
        } else {
            None
        };
        if p.len() < 3 {
            return Err(ConnError::Malformed("OPEN too short"));
        }
        let kind = match p.get_u8() {
            0 => Kind::Http,
            1 => Kind::Tunnel,
            _ => return Err(ConnError::Malformed("OPEN kind is neither http nor tunnel")),
        };
        let tlen = usize::from(p.get_u16());
        if tlen > MAX_TARGET_LEN || tlen > p.len() {
            return Err(ConnError::Malformed("OPEN target length out of range"));
        }
        let target = std::str::from_utf8(&p[..tlen])
            .map_err(|_| ConnError::Malformed("OPEN target is not UTF-8"))?
            .to_owned();
        p.advance(tlen);
        Ok(Open {
            stream: h.stream,
            kind,
            target,
            data: p,
            fin: h.flags & flags::FIN != 0,
            age_ms,
        })
    }

    /// Appends an OPEN built from parts (the send path uses this to avoid a copy).
    pub fn encode_parts(
        dst: &mut impl BufMut,
        stream: u64,
        kind: Kind,
        target: &str,
        data: &[u8],
        fin: bool,
        age_ms: Option<u64>,
    ) {
        let mut f = if fin { flags::FIN } else { 0 };
        if age_ms.is_some() {
            f |= flags::AGE;
        }
        put_header(
            dst,
            ty::OPEN,
            f,
            stream,
            Self::prefix_len(target, age_ms) + data.len(),
        );
        if let Some(a) = age_ms {
            crate::varint::put(dst, a);
        }
        dst.put_u8(match kind {
            Kind::Http => 0,
            Kind::Tunnel => 1,
        });
        dst.put_u16(target.len() as u16);
        dst.put_slice(target.as_bytes());
        dst.put_slice(data);
    }

    /// Appends the encoded frame.
    pub fn encode(&self, dst: &mut impl BufMut) {
        Self::encode_parts(
            dst,
            self.stream,
            self.kind,
            &self.target,
            &self.data,
            self.fin,
            self.age_ms,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::{tests::round_trip, Frame};
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn round_trips(stream in 1..=crate::varint::MAX, tunnel: bool, target in "[a-z0-9.:-]{0,80}",
                       data in proptest::collection::vec(any::<u8>(), 0..2000), fin: bool,
                       age_ms in proptest::option::of(0..=crate::varint::MAX)) {
            let f = Frame::Open(Open {
                stream,
                kind: if tunnel { Kind::Tunnel } else { Kind::Http },
                target,
                data: Bytes::from(data),
                fin,
                age_ms,
            });
            prop_assert_eq!(round_trip(&f), f);
        }
    }

    #[test]
    fn an_age_flag_without_its_varint_is_malformed() {
        let mut b = Vec::new();
        put_header(&mut b, ty::OPEN, flags::AGE, 1, 0);
        let mut buf = bytes::BytesMut::from(&b[..]);
        assert!(matches!(
            Frame::decode(&mut buf, 100),
            Err(ConnError::Malformed(_))
        ));
    }

    #[test]
    fn an_open_without_age_is_byte_for_byte_the_old_one() {
        let mut with_none = Vec::new();
        Open::encode_parts(&mut with_none, 7, Kind::Http, "a:80", b"GET", true, None);
        // type 2, flags FIN only, length 3 + 4 + 3, stream 7, kind 0, target, data.
        assert_eq!(
            with_none,
            [&[2u8, 1, 0, 10, 7, 0, 0, 4][..], b"a:80", b"GET"].concat()
        );
        let mut aged = Vec::new();
        Open::encode_parts(&mut aged, 7, Kind::Http, "a:80", b"GET", true, Some(300));
        assert_eq!(aged[1], flags::FIN | flags::AGE);
        assert_eq!(aged.len(), with_none.len() + 2);
    }

    #[test]
    fn bad_target_length_is_malformed() {
        let mut b = Vec::new();
        put_header(&mut b, ty::OPEN, 0, 1, 4);
        b.extend_from_slice(&[0, 0, 9, b'x']);
        let mut buf = bytes::BytesMut::from(&b[..]);
        assert!(matches!(
            Frame::decode(&mut buf, 100),
            Err(ConnError::Malformed(_))
        ));
    }
}
