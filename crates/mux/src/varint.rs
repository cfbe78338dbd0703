//! Variable-length integers (PROTOCOL.md §2.1), the QUIC encoding: the two top
//! bits of the first byte give the length (1, 2, 4 or 8 bytes), the rest is the
//! value, big-endian. Values up to 2^62 - 1.

use bytes::{Buf, BufMut};

/// The largest value a varint can carry.
pub const MAX: u64 = (1 << 62) - 1;

/// Encoded length of `v` in bytes (1, 2, 4 or 8). `v` must be at most [`MAX`].
pub fn len(v: u64) -> usize {
    if v < 1 << 6 {
        1
    } else if v < 1 << 14 {
        2
    } else if v < 1 << 30 {
        4
    } else {
        8
    }
}

/// Appends `v` (at most [`MAX`]; larger values are a caller bug and are clamped).
pub fn put(dst: &mut impl BufMut, v: u64) {
    let v = v.min(MAX);
    match len(v) {
        1 => dst.put_u8(v as u8),
        2 => dst.put_u16(0x4000 | v as u16),
        4 => dst.put_u32(0x8000_0000 | v as u32),
        _ => dst.put_u64(0xc000_0000_0000_0000 | v),
    }
}

/// Reads a varint from the front of `src`: `None` if `src` is too short.
/// Returns the value and the number of bytes used.
pub fn peek(src: &[u8]) -> Option<(u64, usize)> {
    let first = *src.first()?;
    let n = 1usize << (first >> 6);
    if src.len() < n {
        return None;
    }
    let mut b = &src[..n];
    let v = match n {
        1 => u64::from(b.get_u8()),
        2 => u64::from(b.get_u16() & 0x3fff),
        4 => u64::from(b.get_u32() & 0x3fff_ffff),
        _ => b.get_u64() & MAX,
    };
    Some((v, n))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn boundaries() {
        for (v, n) in [(0, 1), (63, 1), (64, 2), (16383, 2), (16384, 4), (MAX, 8)] {
            let mut b = Vec::new();
            put(&mut b, v);
            assert_eq!(b.len(), n, "value {v}");
            assert_eq!(peek(&b), Some((v, n)));
            assert_eq!(peek(&b[..n - 1]), None);
        }
    }

    proptest! {
        #[test]
        fn round_trip(v in 0..=MAX) {
            let mut b = Vec::new();
            put(&mut b, v);
            prop_assert_eq!(b.len(), len(v));
            prop_assert_eq!(peek(&b), Some((v, len(v))));
        }
    }
}
