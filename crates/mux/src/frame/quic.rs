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

use super::{Features, Kind, MAX_TARGET_LEN};

/// Version byte of the QUIC HELLO, of its reply and of every stream header (§8.1, §8.2).
pub const QUIC_MAPPING_VERSION: u8 = 1;

/// Length of the QUIC HELLO without features: version (1) + session id (8). The shortest
/// HELLO a remote accepts.
pub const QUIC_HELLO_LEN: usize = 9;

/// Longest control-stream message (a HELLO or its reply) a peer reads; longer ones are
/// refused. Both are sent whole and the stream finished, so a reader reads to the end.
pub const QUIC_CONTROL_MAX: usize = 64;

/// Kind-byte bit of a stream header: the header ends with the page age (u32 BE, ms), after
/// the target. Sent only to a remote whose HELLO reply announced [`Features::PAGE_AGE`].
pub const KIND_AGED: u8 = 0x80;

/// The QUIC HELLO (§8.1): the edge's first bytes on its control stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuicHello {
    /// Mapping version; this implementation speaks [`QUIC_MAPPING_VERSION`].
    pub version: u8,
    /// The edge's pool session id.
    pub session: u64,
    /// Optional features the edge speaks (u32 appended; absent from edges that predate it).
    pub features: Option<Features>,
}

impl QuicHello {
    /// Decodes a HELLO: `None` if shorter than [`QUIC_HELLO_LEN`]. Any version decodes (the
    /// caller answers an unknown one with `VERSION_MISMATCH`); bytes after the features are
    /// ignored, as later fields would be.
    pub fn decode(b: &[u8]) -> Option<QuicHello> {
        let mut p = b;
        if p.len() < QUIC_HELLO_LEN {
            return None;
        }
        let version = p.get_u8();
        let session = p.get_u64();
        let features = (p.remaining() >= 4).then(|| Features(p.get_u32()));
        Some(QuicHello {
            version,
            session,
            features,
        })
    }

    /// The encoded HELLO: 9 bytes, 13 with features.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(QUIC_HELLO_LEN + 4);
        b.put_u8(self.version);
        b.put_u64(self.session);
        if let Some(f) = self.features {
            b.put_u32(f.0);
        }
        b
    }
}

/// The remote's answer to the QUIC HELLO (§8.1), on its own control stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuicHelloReply {
    /// The remote's mapping version.
    pub version: u8,
    /// Optional features the remote speaks (u32 appended; absent from remotes that predate
    /// it, which then speak none).
    pub features: Option<Features>,
}

impl QuicHelloReply {
    /// Decodes a reply: `None` if empty; bytes after the features are ignored.
    pub fn decode(b: &[u8]) -> Option<QuicHelloReply> {
        let mut p = b;
        if p.is_empty() {
            return None;
        }
        let version = p.get_u8();
        let features = (p.remaining() >= 4).then(|| Features(p.get_u32()));
        Some(QuicHelloReply { version, features })
    }

    /// The encoded reply: 1 byte, 5 with features.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(5);
        b.put_u8(self.version);
        if let Some(f) = self.features {
            b.put_u32(f.0);
        }
        b
    }
}

/// A malformed stream header (§8.2); the remote resets the stream with `PROTOCOL_ERROR`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuicHeaderError {
    /// The version byte is not one this implementation speaks.
    #[error("stream header version {0} unsupported")]
    Version(u8),
    /// The kind byte is neither http (0) nor tunnel (1), with or without [`KIND_AGED`].
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
/// `version u8 | kind u8 | stream id u64 BE | target length u16 BE | target`, then
/// `page age u32 BE` when the kind byte has [`KIND_AGED`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamHeader {
    /// What the stream carries.
    pub kind: Kind,
    /// The pool-wide stream id (§5.2).
    pub stream: u64,
    /// "host:port", 1..=[`MAX_TARGET_LEN`] bytes of UTF-8.
    pub target: String,
    /// How long before the stream was opened its page began, ms (§3.2, §8.2).
    pub age_ms: Option<u32>,
}

/// The fixed part of a stream header, decoded: what it says about the bytes that follow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FixedHeader {
    /// What the stream carries.
    pub kind: Kind,
    /// The pool-wide stream id.
    pub stream: u64,
    /// Length of the target that follows (checked: 1..=[`MAX_TARGET_LEN`]).
    pub target_len: usize,
    /// A page age follows the target.
    pub aged: bool,
}

impl FixedHeader {
    /// Bytes after the fixed part: the target and the age if any.
    pub fn rest_len(&self) -> usize {
        self.target_len + if self.aged { 4 } else { 0 }
    }
}

impl StreamHeader {
    /// Length of the part before the target.
    pub const FIXED_LEN: usize = 12;

    /// Decodes the fixed part: kind, stream id, the target's length (checked) and whether an
    /// age follows.
    pub fn decode_fixed(b: &[u8; Self::FIXED_LEN]) -> Result<FixedHeader, QuicHeaderError> {
        let mut p = &b[..];
        let version = p.get_u8();
        if version != QUIC_MAPPING_VERSION {
            return Err(QuicHeaderError::Version(version));
        }
        let k = p.get_u8();
        let kind = match k & !KIND_AGED {
            0 => Kind::Http,
            1 => Kind::Tunnel,
            _ => return Err(QuicHeaderError::Kind(k)),
        };
        let stream = p.get_u64();
        let target_len = usize::from(p.get_u16());
        if target_len == 0 || target_len > MAX_TARGET_LEN {
            return Err(QuicHeaderError::TargetLen(target_len));
        }
        Ok(FixedHeader {
            kind,
            stream,
            target_len,
            aged: k & KIND_AGED != 0,
        })
    }

    /// Decodes the [`FixedHeader::rest_len`] bytes that follow the fixed part: the target and
    /// the age if any.
    pub fn decode_rest(
        fixed: &FixedHeader,
        mut b: Vec<u8>,
    ) -> Result<(String, Option<u32>), QuicHeaderError> {
        let age = if fixed.aged && b.len() >= fixed.target_len + 4 {
            let tail = b.split_off(fixed.target_len);
            Some((&tail[..]).get_u32())
        } else {
            None
        };
        b.truncate(fixed.target_len);
        let target = String::from_utf8(b).map_err(|_| QuicHeaderError::Utf8)?;
        Ok((target, age))
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
        let f = Self::decode_fixed(fixed)?;
        let Some(rest) = src.get(Self::FIXED_LEN..Self::FIXED_LEN + f.rest_len()) else {
            return Ok(None);
        };
        let (target, age_ms) = Self::decode_rest(&f, rest.to_vec())?;
        src.advance(Self::FIXED_LEN + f.rest_len());
        Ok(Some(StreamHeader {
            kind: f.kind,
            stream: f.stream,
            target,
            age_ms,
        }))
    }

    /// Encoded length of a header with `target`, and an age if `aged`.
    pub fn encoded_len(target: &str, aged: bool) -> usize {
        Self::FIXED_LEN + target.len() + if aged { 4 } else { 0 }
    }

    /// Appends a header from its parts (`target` must be 1..=[`MAX_TARGET_LEN`] bytes; the
    /// caller checks, as for OPEN).
    pub fn encode_parts(
        dst: &mut impl BufMut,
        kind: Kind,
        stream: u64,
        target: &str,
        age_ms: Option<u32>,
    ) {
        debug_assert!(!target.is_empty() && target.len() <= MAX_TARGET_LEN);
        dst.put_u8(QUIC_MAPPING_VERSION);
        let k = match kind {
            Kind::Http => 0,
            Kind::Tunnel => 1,
        };
        dst.put_u8(if age_ms.is_some() { k | KIND_AGED } else { k });
        dst.put_u64(stream);
        dst.put_u16(target.len() as u16);
        dst.put_slice(target.as_bytes());
        if let Some(a) = age_ms {
            dst.put_u32(a);
        }
    }

    /// Appends the encoded header.
    pub fn encode(&self, dst: &mut impl BufMut) {
        Self::encode_parts(dst, self.kind, self.stream, &self.target, self.age_ms);
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
        fn hello_round_trips(version: u8, session: u64, features: Option<u32>) {
            let h = QuicHello { version, session, features: features.map(Features) };
            let b = h.encode();
            prop_assert_eq!(b.len(), QUIC_HELLO_LEN + if features.is_some() { 4 } else { 0 });
            prop_assert_eq!(QuicHello::decode(&b), Some(h));
            let r = QuicHelloReply { version, features: features.map(Features) };
            prop_assert_eq!(QuicHelloReply::decode(&r.encode()), Some(r));
        }

        #[test]
        fn header_round_trips(
            kind in kind(),
            stream: u64,
            target in "[a-z0-9.:\u{e9}]{1,87}",
            rest in proptest::collection::vec(any::<u8>(), 0..20),
            age_ms: Option<u32>,
        ) {
            let h = StreamHeader { kind, stream, target, age_ms };
            let mut b = Vec::new();
            h.encode(&mut b);
            let len = StreamHeader::encoded_len(&h.target, age_ms.is_some());
            prop_assert_eq!(b.len(), len);
            b.extend_from_slice(&rest);
            let mut src = &b[..];
            prop_assert_eq!(StreamHeader::decode(&mut src), Ok(Some(h.clone())));
            prop_assert_eq!(src, &rest[..]);
            // Every strict prefix of the header is incomplete, never an error.
            for cut in 0..len {
                let mut p = &b[..cut];
                prop_assert_eq!(StreamHeader::decode(&mut p), Ok(None));
                prop_assert_eq!(p.len(), cut);
            }
        }
    }

    #[test]
    fn malformed_headers_are_named() {
        let mut b = Vec::new();
        StreamHeader::encode_parts(&mut b, Kind::Http, 7, "a:80", None);
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
        let mut v = b.clone();
        v[1] = KIND_AGED | 2;
        assert_eq!(
            StreamHeader::decode_fixed(&fixed(&v)),
            Err(QuicHeaderError::Kind(KIND_AGED | 2))
        );
    }

    #[test]
    fn short_hellos_and_replies_are_refused_and_old_ones_have_no_features() {
        assert_eq!(QuicHello::decode(&[1; QUIC_HELLO_LEN - 1]), None);
        assert_eq!(QuicHelloReply::decode(&[]), None);
        let old = QuicHello::decode(&[1, 0, 0, 0, 0, 0, 0, 0, 9]).unwrap();
        assert_eq!((old.session, old.features), (9, None));
        assert_eq!(QuicHelloReply::decode(&[1]).unwrap().features, None);
    }
}
