//! Frames of the wire format (PROTOCOL.md §2–§5): one module per frame type,
//! each with a symmetric `decode`/`encode` pair, and the QUIC mapping's HELLO and
//! stream header (PROTOCOL.md §8, module `quic`).

use bytes::{Buf, BufMut, Bytes, BytesMut};

use crate::error::ConnError;
use crate::varint;

mod data;
mod goaway;
mod hello;
mod open;
mod ping;
mod quic;
mod reset;
mod window;

pub use data::Data;
pub use goaway::GoAway;
pub use hello::{Features, Hello, Role, HELLO_LEN};
pub use open::{Kind, Open, MAX_TARGET_LEN};
pub use ping::Ping;
pub use quic::{
    FixedHeader, QuicHeaderError, QuicHello, QuicHelloReply, StreamHeader, KIND_AGED,
    QUIC_CONTROL_MAX, QUIC_HELLO_LEN, QUIC_MAPPING_VERSION,
};
pub use reset::Reset;
pub use window::Window;

/// The protocol version this crate speaks (PROTOCOL.md §1).
pub const VERSION: u16 = 1;

/// Fixed part of the frame header: type, flags, payload length (PROTOCOL.md §2).
pub const FIXED_HEADER_LEN: usize = 4;
/// Largest frame header: the fixed part plus an 8-byte stream id varint.
pub const MAX_HEADER_LEN: usize = FIXED_HEADER_LEN + 8;
/// Largest payload the 16-bit length field can express.
pub const MAX_PAYLOAD_LEN: usize = u16::MAX as usize;

/// Frame type codes (PROTOCOL.md §3).
pub mod ty {
    /// HELLO, §3.1.
    pub const HELLO: u8 = 0x1;
    /// OPEN, §3.2.
    pub const OPEN: u8 = 0x2;
    /// DATA, §3.3.
    pub const DATA: u8 = 0x3;
    /// RESET, §3.4.
    pub const RESET: u8 = 0x4;
    /// WINDOW, §3.5.
    pub const WINDOW: u8 = 0x5;
    /// PING and PONG, §3.6.
    pub const PING: u8 = 0x6;
    /// GOAWAY, §3.7.
    pub const GOAWAY: u8 = 0x7;
}

/// Flag bits (PROTOCOL.md §2).
pub mod flags {
    /// On OPEN and DATA: the sender's direction ends after this frame.
    pub const FIN: u8 = 0x1;
    /// On PING: this is the answer (PONG).
    pub const ACK: u8 = 0x1;
    /// On OPEN: the payload starts with the page age (varint, ms; PROTOCOL.md §3.2).
    pub const AGE: u8 = 0x2;
}

/// A decoded frame header (PROTOCOL.md §2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// Frame type.
    pub ty: u8,
    /// Flag bits; meaning depends on the type.
    pub flags: u8,
    /// Payload length in bytes (excluding the header).
    pub len: u16,
    /// Stream id; 0 for connection-level frames.
    pub stream: u64,
}

impl Header {
    /// Encoded length of this header in bytes: 5, 6, 8 or 12.
    pub fn encoded_len(&self) -> usize {
        FIXED_HEADER_LEN + varint::len(self.stream)
    }

    /// Appends the header.
    pub fn encode(&self, dst: &mut impl BufMut) {
        dst.put_u8(self.ty);
        dst.put_u8(self.flags);
        dst.put_u16(self.len);
        varint::put(dst, self.stream);
    }

    /// Decodes a header from the front of `src`; `None` if more bytes are needed.
    /// Returns the header and its encoded length.
    pub fn decode(src: &[u8]) -> Option<(Header, usize)> {
        if src.len() < FIXED_HEADER_LEN + 1 {
            return None;
        }
        let (stream, n) = varint::peek(&src[FIXED_HEADER_LEN..])?;
        let mut b = src;
        let ty = b.get_u8();
        let flags = b.get_u8();
        let len = b.get_u16();
        Some((
            Header {
                ty,
                flags,
                len,
                stream,
            },
            FIXED_HEADER_LEN + n,
        ))
    }
}

/// Header overhead in bytes of a frame on stream `stream` (PROTOCOL.md §2).
pub fn header_len(stream: u64) -> usize {
    FIXED_HEADER_LEN + varint::len(stream)
}

/// One decoded frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// §3.1
    Hello(Hello),
    /// §3.2
    Open(Open),
    /// §3.3
    Data(Data),
    /// §3.4
    Reset(Reset),
    /// §3.5
    Window(Window),
    /// §3.6
    Ping(Ping),
    /// §3.7
    GoAway(GoAway),
    /// A frame type this version does not know; receivers skip it (§2.2).
    Unknown(Header),
}

impl Frame {
    /// Decodes one frame from the front of `buf`, removing its bytes.
    ///
    /// `Ok(None)` means more bytes are needed (nothing is removed). A payload
    /// longer than `max_payload` is an error before any of it arrives, so a peer
    /// cannot make us buffer more than one maximum-size frame.
    pub fn decode(buf: &mut BytesMut, max_payload: usize) -> Result<Option<Frame>, ConnError> {
        let Some((h, hlen)) = Header::decode(buf) else {
            return Ok(None);
        };
        let len = usize::from(h.len);
        if len > max_payload {
            return Err(ConnError::FrameTooLarge {
                len,
                max: max_payload,
            });
        }
        if buf.len() < hlen + len {
            return Ok(None);
        }
        buf.advance(hlen);
        let payload = buf.split_to(len).freeze();
        Self::decode_payload(h, payload).map(Some)
    }

    /// Decodes the payload of a frame whose header was already read.
    pub fn decode_payload(h: Header, payload: Bytes) -> Result<Frame, ConnError> {
        Ok(match h.ty {
            ty::HELLO => Frame::Hello(Hello::decode(&h, payload)?),
            ty::OPEN => Frame::Open(Open::decode(&h, payload)?),
            ty::DATA => Frame::Data(Data::decode(&h, payload)?),
            ty::RESET => Frame::Reset(Reset::decode(&h, payload)?),
            ty::WINDOW => Frame::Window(Window::decode(&h, payload)?),
            ty::PING => Frame::Ping(Ping::decode(&h, payload)?),
            ty::GOAWAY => Frame::GoAway(GoAway::decode(&h, payload)?),
            _ => Frame::Unknown(h),
        })
    }

    /// Appends the encoded frame. Unknown frames encode as their header with an
    /// all-zero payload of the recorded length.
    pub fn encode(&self, dst: &mut impl BufMut) {
        match self {
            Frame::Hello(f) => f.encode(dst),
            Frame::Open(f) => f.encode(dst),
            Frame::Data(f) => f.encode(dst),
            Frame::Reset(f) => f.encode(dst),
            Frame::Window(f) => f.encode(dst),
            Frame::Ping(f) => f.encode(dst),
            Frame::GoAway(f) => f.encode(dst),
            Frame::Unknown(h) => {
                h.encode(dst);
                dst.put_bytes(0, usize::from(h.len));
            }
        }
    }
}

/// Checks that a connection-level frame is on stream 0 and a stream frame is not.
pub(crate) fn expect_stream(h: &Header, connection_level: bool) -> Result<(), ConnError> {
    match (connection_level, h.stream == 0) {
        (true, false) => Err(ConnError::Malformed(
            "connection-level frame on a stream id",
        )),
        (false, true) => Err(ConnError::Malformed("stream frame on stream 0")),
        _ => Ok(()),
    }
}

/// Writes a header for `payload_len` bytes; payload_len must fit in u16 (callers
/// check against the negotiated maximum frame size, itself at most u16::MAX).
pub(crate) fn put_header(
    dst: &mut impl BufMut,
    ty: u8,
    flags: u8,
    stream: u64,
    payload_len: usize,
) {
    debug_assert!(payload_len <= MAX_PAYLOAD_LEN);
    Header {
        ty,
        flags,
        len: payload_len as u16,
        stream,
    }
    .encode(dst);
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Encodes then decodes `f`, checking the whole buffer is consumed.
    pub(crate) fn round_trip(f: &Frame) -> Frame {
        let mut b = BytesMut::new();
        f.encode(&mut b);
        let n = b.len();
        let got = Frame::decode(&mut b, MAX_PAYLOAD_LEN)
            .expect("decodes")
            .expect("complete");
        assert!(b.is_empty(), "{n}-byte frame left {} bytes", b.len());
        // Every strict prefix is incomplete, never an error.
        let mut whole = BytesMut::new();
        f.encode(&mut whole);
        for cut in 0..whole.len() {
            let mut p = BytesMut::from(&whole[..cut]);
            assert_eq!(
                Frame::decode(&mut p, MAX_PAYLOAD_LEN),
                Ok(None),
                "cut {cut}"
            );
        }
        got
    }

    #[test]
    fn header_sizes() {
        assert_eq!(header_len(0), 5);
        assert_eq!(header_len(63), 5);
        assert_eq!(header_len(64), 6);
        assert_eq!(header_len(16_383), 6);
        assert_eq!(header_len(16_384), 8);
        assert_eq!(header_len(crate::varint::MAX), MAX_HEADER_LEN);
        assert_eq!(MAX_HEADER_LEN, 12);
    }

    #[test]
    fn oversized_frame_is_rejected_from_its_header() {
        let mut b = BytesMut::new();
        put_header(&mut b, ty::DATA, 0, 1, 40_000);
        assert_eq!(
            Frame::decode(&mut b, 16_384),
            Err(ConnError::FrameTooLarge {
                len: 40_000,
                max: 16_384
            })
        );
    }

    #[test]
    fn unknown_types_are_skipped() {
        let f = Frame::Unknown(Header {
            ty: 0x7f,
            flags: 3,
            len: 4,
            stream: 9,
        });
        assert_eq!(round_trip(&f), f);
    }
}
