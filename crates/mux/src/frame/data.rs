//! DATA (PROTOCOL.md §3.3): stream bytes, and the end of a direction (FIN flag).

use bytes::{BufMut, Bytes};

use super::{expect_stream, flags, put_header, ty, Header};
use crate::error::ConnError;

/// DATA payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Data {
    /// Stream id (never 0).
    pub stream: u64,
    /// The bytes; may be empty when `fin` is set.
    pub data: Bytes,
    /// The sender's direction ends after these bytes.
    pub fin: bool,
}

impl Data {
    /// Decodes a DATA payload.
    pub fn decode(h: &Header, p: Bytes) -> Result<Self, ConnError> {
        expect_stream(h, false)?;
        let fin = h.flags & flags::FIN != 0;
        if p.is_empty() && !fin {
            return Err(ConnError::Malformed("empty DATA without FIN"));
        }
        Ok(Data {
            stream: h.stream,
            data: p,
            fin,
        })
    }

    /// Appends a DATA frame built from parts.
    pub fn encode_parts(dst: &mut impl BufMut, stream: u64, data: &[u8], fin: bool) {
        let f = if fin { flags::FIN } else { 0 };
        put_header(dst, ty::DATA, f, stream, data.len());
        dst.put_slice(data);
    }

    /// Appends the encoded frame.
    pub fn encode(&self, dst: &mut impl BufMut) {
        Self::encode_parts(dst, self.stream, &self.data, self.fin);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::{tests::round_trip, Frame};
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn round_trips(stream in 1..=crate::varint::MAX,
                       data in proptest::collection::vec(any::<u8>(), 1..3000), fin: bool) {
            let f = Frame::Data(Data { stream, data: Bytes::from(data), fin });
            prop_assert_eq!(round_trip(&f), f);
        }
    }

    #[test]
    fn matches_the_protocol_example() {
        // PROTOCOL.md §2: `hello` on stream 300 with FIN.
        let mut b = Vec::new();
        Data::encode_parts(&mut b, 300, b"hello", true);
        assert_eq!(
            b,
            [0x03, 0x01, 0x00, 0x05, 0x41, 0x2c, b'h', b'e', b'l', b'l', b'o']
        );
    }

    #[test]
    fn bare_fin_round_trips_and_empty_data_is_malformed() {
        let f = Frame::Data(Data {
            stream: 3,
            data: Bytes::new(),
            fin: true,
        });
        assert_eq!(round_trip(&f), f);
        let mut b = bytes::BytesMut::new();
        put_header(&mut b, ty::DATA, 0, 3, 0);
        assert!(Frame::decode(&mut b, 100).is_err());
    }
}
