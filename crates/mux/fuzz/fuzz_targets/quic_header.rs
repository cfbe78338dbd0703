//! Feeds arbitrary bytes to the QUIC mapping's decoders (PROTOCOL.md §8.1, §8.2):
//! the stream header must decode, ask for more bytes or report an error, never
//! panic; every header it returns re-encodes to the bytes it was read from; the
//! two-step decode the driver uses agrees with the one-call decode; and a QUIC
//! HELLO round-trips.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mux::frame::{QuicHello, StreamHeader, QUIC_HELLO_LEN};

fuzz_target!(|data: &[u8]| {
    let mut src = data;
    match StreamHeader::decode(&mut src) {
        Ok(Some(h)) => {
            let used = data.len() - src.len();
            let mut again = Vec::new();
            h.encode(&mut again);
            assert_eq!(&again[..], &data[..used]);
            let fixed: &[u8; StreamHeader::FIXED_LEN] = data[..StreamHeader::FIXED_LEN]
                .try_into()
                .expect("fixed part");
            let f = StreamHeader::decode_fixed(fixed).expect("fixed part decodes");
            assert_eq!(
                (f.kind, f.stream, f.target_len, f.aged),
                (h.kind, h.stream, h.target.len(), h.age_ms.is_some())
            );
        }
        Ok(None) => assert_eq!(src.len(), data.len()),
        Err(_) => {}
    }
    if let Some(h) = QuicHello::decode(data) {
        let b = h.encode();
        assert_eq!(&b[..], &data[..b.len()]);
    } else {
        assert!(data.len() < QUIC_HELLO_LEN);
    }
});
