//! Feeds arbitrary bytes to the frame decoder: it must return frames, ask for
//! more bytes or report an error, never panic, and every frame it returns must
//! re-encode to a frame that decodes to the same value.
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use mux::frame::{Frame, MAX_PAYLOAD_LEN};

fuzz_target!(|data: &[u8]| {
    let mut buf = BytesMut::from(data);
    while let Ok(Some(f)) = Frame::decode(&mut buf, MAX_PAYLOAD_LEN) {
        let mut again = BytesMut::new();
        f.encode(&mut again);
        let back = Frame::decode(&mut again, MAX_PAYLOAD_LEN)
            .expect("re-encoded frame decodes")
            .expect("re-encoded frame is complete");
        // HELLO may carry trailing bytes that are dropped on re-encode, and
        // GOAWAY reasons are decoded lossily; everything else is identical.
        if !matches!(f, Frame::Hello(_) | Frame::GoAway(_)) {
            assert_eq!(back, f);
        }
    }
});
