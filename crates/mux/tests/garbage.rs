//! The fuzz targets' properties, run briefly on random input in every test
//! run: arbitrary bytes never panic the decoder or the session, and a bad
//! frame closes only the connection it arrived on.

use std::time::Instant;

use bytes::BytesMut;
use mux::frame::{Frame, Hello, Role, MAX_PAYLOAD_LEN, VERSION};
use mux::{Config, ConnState, Policy, Session};
use proptest::prelude::*;

fn hello() -> Vec<u8> {
    let mut b = Vec::new();
    Hello {
        version: VERSION,
        role: Role::Edge,
        session: 1,
        max_frame_size: 16384,
        initial_window: 1 << 20,
        max_streams: 100,
        conn_window: Some(1 << 20),
        features: None,
    }
    .encode(&mut b);
    b
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn decoder_never_panics(data in proptest::collection::vec(any::<u8>(), 0..600)) {
        let mut buf = BytesMut::from(&data[..]);
        while let Ok(Some(f)) = Frame::decode(&mut buf, MAX_PAYLOAD_LEN) {
            let mut again = BytesMut::new();
            f.encode(&mut again);
            prop_assert!(Frame::decode(&mut again, MAX_PAYLOAD_LEN).unwrap().is_some());
        }
    }

    #[test]
    fn session_input_never_panics_and_stays_on_its_connection(
        data in proptest::collection::vec(any::<u8>(), 0..600),
        // Start the garbage with a plausible frame type to get past the header.
        ty in 0u8..9,
    ) {
        let t = Instant::now();
        let mut s = Session::new(Role::Remote, 1, Config::default(), Policy::LeastOutstanding);
        let a = s.add_connection(t);
        let b = s.add_connection(t);
        s.handle_input(a, &hello(), t);
        s.handle_input(b, &hello(), t);
        let mut input = vec![ty];
        input.extend_from_slice(&data);
        for chunk in input.chunks(37) {
            s.handle_input(a, chunk, t);
        }
        let mut out = Vec::new();
        s.poll_transmit(a, usize::MAX, &mut out);
        while s.poll_event().is_some() {}
        prop_assert_eq!(s.connection(b).map(|c| c.state), Some(ConnState::Up));
    }
}
