//! Feeds arbitrary bytes, after a valid HELLO, to a remote session's input
//! path: whatever the bytes, the session must not panic, and a bad frame may
//! only close the connection it arrived on.
#![no_main]

use std::time::Instant;

use libfuzzer_sys::fuzz_target;
use mux::frame::{Hello, Role, VERSION};
use mux::{Config, Policy, Session};

fuzz_target!(|data: &[u8]| {
    let t = Instant::now();
    let mut s = Session::new(Role::Remote, 1, Config::default(), Policy::LeastOutstanding);
    let a = s.add_connection(t);
    let b = s.add_connection(t);
    let mut hello = Vec::new();
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
    .encode(&mut hello);
    s.handle_input(a, &hello, t);
    s.handle_input(b, &hello, t);
    for chunk in data.chunks(97) {
        s.handle_input(a, chunk, t);
    }
    let mut out = Vec::new();
    s.poll_transmit(a, usize::MAX, &mut out);
    while s.poll_event().is_some() {}
    // The other connection is untouched by whatever happened on `a`.
    assert_eq!(s.connection(b).map(|c| c.state), Some(mux::ConnState::Up));
});
