//! The QUIC mapping's wire format (PROTOCOL.md §8.1, §8.2): the 9-byte QUIC
//! HELLO the edge writes on its control stream, the one-byte reply, and the
//! header that starts the edge's direction of every QUIC stream.
//!
//! What it does: symmetric decode/encode of those three, with the checks of
//! §8.2 (version, kind, target length 1..=261, UTF-8) as [`QuicHeaderError`].
//! A header is decoded in two steps because the driver reads it from a QUIC
//! stream: [`StreamHeader::decode_fixed`] on the first
//! [`StreamHeader::FIXED_LEN`] bytes says how long the target is,
//! [`StreamHeader::decode_target`] takes those bytes; [`StreamHeader::decode`]
//! does both on a buffer.
//!
//! What it does NOT do: touch QUIC; the mux frames of §3 are not used over QUIC
//! (quinn provides streams, credit, resets and keep-alive).

use bytes::{Buf, BufMut};

use super::{Kind, MAX_TARGET_LEN};

/// Version byte of the QUIC HELLO, of its reply and of every stream header (§8.1, §8.2).
pub const QUIC_MAPPING_VERSION: u8 = 1;

/// Length of the QUIC HELLO: version (1) + session id (8).
pub const QUIC_HELLO_LEN: usize = 9;

/// The QUIC HELLO (§8.1): the edge's first bytes on its control stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuicHello {
    /// Mapping version; this implementation speaks [`QUIC_MAPPING_VERSION`].
    pub version: u8,
    /// The edge's pool session id.
    pub session: u64,
}

impl QuicHello {
    /// Decodes the 9 bytes; any version decodes (the caller answers an unknown one with
    /// `VERSION_MISMATCH`).
    pub fn decode(b: &[u8; QUIC_HELLO_LEN]) -> QuicHello {
        let mut p = &b[..];
        QuicHello {
            version: p.get_u8(),
            session: p.get_u64(),
        }
    }

    /// The 9 bytes.
    pub fn encode(&self) -> [u8; QUIC_HELLO_LEN] {
        let mut b = [0u8; QUIC_HELLO_LEN];
        let mut p = &mut b[..];
        p.put_u8(self.version);
        p.put_u64(self.session);
        b
    }
}

/// A malformed stream header (§8.2); the remote resets the stream with `PROTOCOL_ERROR`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuicHeaderError {
    /// The version byte is not one this implementation speaks.
    #[error("stream header version {0} unsupported")]
    Version(u8),
    /// The kind byte is neither http (0) nor tunnel (1).
    #[error("stream kind {0} unknown")]
    Kind(u8),
    /// The target length is 0 or above [`MAX_TARGET_LEN`].
    #[error("stream target length {0} out of range")]
    TargetLen(usize),
    /// The target is not UTF-8.
    #[error("stream target is not UTF-8")]
    Utf8,
}

/// The header that starts the edge's direction of a QUIC stream (§8.2):
/// `version u8 | kind u8 | stream id u64 BE | target length u16 BE | target`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamHeader {
    /// What the stream carries.
    pub kind: Kind,
    /// The pool-wide stream id (§5.2).
    pub stream: u64,
    /// "host:port", 1..=[`MAX_TARGET_LEN`] bytes of UTF-8.
    pub target: String,
}

impl StreamHeader {
    /// Length of the part before the target.
    pub const FIXED_LEN: usize = 12;

    /// Decodes the fixed part: kind, stream id and the target's length (checked).
    pub fn decode_fixed(b: &[u8; Self::FIXED_LEN]) -> Result<(Kind, u64, usize), QuicHeaderError> {
        let mut p = &b[..];
        let version = p.get_u8();
        if version != QUIC_MAPPING_VERSION {
            return Err(QuicHeaderError::Version(version));
        }
        let kind = match p.get_u8() {
            0 => Kind::Http,
            1 => Kind::Tunnel,
            k => return Err(QuicHeaderError::Kind(k)),
        };
        let stream = p.get_u64();
        let len = usize::from(p.get_u16());
        if len == 0 || len > MAX_TARGET_LEN {
            return Err(QuicHeaderError::TargetLen(len));
        }
        Ok((kind, stream, len))
    }

    /// Decodes the target bytes that follow the fixed part.
    pub fn decode_target(b: Vec<u8>) -> Result<String, QuicHeaderError> {
        String::from_utf8(b).map_err(|_| QuicHeaderError::Utf8)
    }

    /// Decodes a whole header from the front of `src`, removing its bytes; `Ok(None)` (and
    /// nothing removed) if more bytes are needed.
    pub fn decode(src: &mut &[u8]) -> Result<Option<StreamHeader>, QuicHeaderError> {
        let Some(fixed) = src
            .get(..Self::FIXED_LEN)
            .and_then(|b| <&[u8; Self::FIXED_LEN]>::try_from(b).ok())
        else {
            return Ok(None);
        };
        let (kind, stream, len) = Self::decode_fixed(fixed)?;
        let Some(target) = src.get(Self::FIXED_LEN..Self::FIXED_LEN + len) else {
            return Ok(None);
        };
        let target = Self::decode_target(target.to_vec())?;
        src.advance(Self::FIXED_LEN + len);
        Ok(Some(StreamHeader {
            kind,
            stream,
            target,
        }))
    }

    /// Encoded length of a header with `target`.
    pub fn encoded_len(target: &str) -> usize {
        Self::FIXED_LEN + target.len()
    }

    /// Appends a header from its parts (`target` must be 1..=[`MAX_TARGET_LEN`] bytes; the
    /// caller checks, as for OPEN).
    pub fn encode_parts(dst: &mut impl BufMut, kind: Kind, stream: u64, target: &str) {
        debug_assert!(!target.is_empty() && target.len() <= MAX_TARGET_LEN);
        dst.put_u8(QUIC_MAPPING_VERSION);
        dst.put_u8(match kind {
            Kind::Http => 0,
            Kind::Tunnel => 1,
        });
        dst.put_u64(stream);
        dst.put_u16(target.len() as u16);
        dst.put_slice(target.as_bytes());
    }

    /// Appends the encoded header.
    pub fn encode(&self, dst: &mut impl BufMut) {
        Self::encode_parts(dst, self.kind, self.stream, &self.target);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn kind() -> impl Strategy<Value = Kind> {
        prop_oneof![Just(Kind::Http), Just(Kind::Tunnel)]
    }

    proptest! {
        #[test]
        fn hello_round_trips(version: u8, session: u64) {
            let h = QuicHello { version, session };
            prop_assert_eq!(QuicHello::decode(&h.encode()), h);
        }

        #[test]
        fn header_round_trips(
            kind in kind(),
            stream: u64,
            target in "[a-z0-9.:\u{e9}]{1,87}",
            rest in proptest::collection::vec(any::<u8>(), 0..20),
        ) {
            let h = StreamHeader { kind, stream, target };
            let mut b = Vec::new();
            h.encode(&mut b);
            prop_assert_eq!(b.len(), StreamHeader::encoded_len(&h.target));
            b.extend_from_slice(&rest);
            let mut src = &b[..];
            prop_assert_eq!(StreamHeader::decode(&mut src), Ok(Some(h.clone())));
            prop_assert_eq!(src, &rest[..]);
            // Every strict prefix of the header is incomplete, never an error.
            for cut in 0..StreamHeader::encoded_len(&h.target) {
                let mut p = &b[..cut];
                prop_assert_eq!(StreamHeader::decode(&mut p), Ok(None));
                prop_assert_eq!(p.len(), cut);
            }
        }
    }

    #[test]
    fn malformed_headers_are_named() {
        let mut b = Vec::new();
        StreamHeader::encode_parts(&mut b, Kind::Http, 7, "a:80");
        let fixed = |b: &[u8]| -> [u8; 12] { b[..12].try_into().unwrap() };
        let mut v = b.clone();
        v[0] = 2;
        assert_eq!(
            StreamHeader::decode_fixed(&fixed(&v)),
            Err(QuicHeaderError::Version(2))
        );
        let mut v = b.clone();
        v[1] = 9;
        assert_eq!(
            StreamHeader::decode_fixed(&fixed(&v)),
            Err(QuicHeaderError::Kind(9))
        );
        for len in [0u16, MAX_TARGET_LEN as u16 + 1] {
            let mut v = b.clone();
            v[10..12].copy_from_slice(&len.to_be_bytes());
            assert_eq!(
                StreamHeader::decode_fixed(&fixed(&v)),
                Err(QuicHeaderError::TargetLen(usize::from(len)))
            );
        }
        let mut v = b.clone();
        v[12] = 0xff;
        assert_eq!(
            StreamHeader::decode(&mut &v[..]),
            Err(QuicHeaderError::Utf8)
        );
        assert_eq!(
            StreamHeader::decode(&mut &b[..]).unwrap().unwrap().stream,
            7
        );
    }
}
