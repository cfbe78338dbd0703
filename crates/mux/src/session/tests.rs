//! Session tests in virtual time: a [`Pair`] of sessions joined by one lane,
//! bytes shuttled until quiet.

use super::*;
use crate::frame::{Data as DataFrame, Open, Ping, Reset, Window, HELLO_LEN};

/// Fixed stream windows (initial = maximum, 500 kB): the tests of credit, limits and
/// lifecycle see exactly the window they grant; [`tuned`] is the default with autotuning.
fn cfg() -> Config {
    let c = tuned();
    Config {
        initial_stream_window: c.stream_window,
        ..c
    }
}

/// The defaults for a 100 ms, 10 Mbit/s link: streams start at 256 KiB and grow to
/// 4 × BDP = 500 kB.
fn tuned() -> Config {
    Config::for_link(Duration::from_millis(100), 10_000_000)
}

struct Pair {
    t: Instant,
    edge: Session,
    remote: Session,
    e: ConnId,
    r: ConnId,
}

impl Pair {
    fn new() -> Pair {
        Pair::with(cfg(), cfg())
    }

    fn with(edge_cfg: Config, remote_cfg: Config) -> Pair {
        let t = Instant::now();
        let mut edge = Session::new(Role::Edge, 9, edge_cfg, Policy::LeastOutstanding);
        let mut remote = Session::new(Role::Remote, 9, remote_cfg, Policy::LeastOutstanding);
        let e = edge.add_connection(t);
        let r = remote.add_connection(t);
        let mut p = Pair {
            t,
            edge,
            remote,
            e,
            r,
        };
        p.shuttle();
        assert_eq!(p.edge.up_connections(), 1);
        assert_eq!(p.remote.up_connections(), 1);
        assert_eq!(p.edge_events(), [Event::ConnectionUp(e)]);
        assert_eq!(p.remote_events(), [Event::ConnectionUp(r)]);
        p
    }

    /// Moves every pending byte both ways until quiet.
    fn shuttle(&mut self) {
        loop {
            let mut a = Vec::new();
            let mut b = Vec::new();
            self.edge.poll_transmit(self.e, usize::MAX, &mut a);
            self.remote.poll_transmit(self.r, usize::MAX, &mut b);
            if a.is_empty() && b.is_empty() {
                return;
            }
            self.remote.handle_input(self.r, &a, self.t);
            self.edge.handle_input(self.e, &b, self.t);
        }
    }

    fn remote_events(&mut self) -> Vec<Event> {
        std::iter::from_fn(|| self.remote.poll_event()).collect()
    }

    fn edge_events(&mut self) -> Vec<Event> {
        std::iter::from_fn(|| self.edge.poll_event()).collect()
    }

    /// Feeds raw bytes to the remote as if the edge sent them.
    fn feed_remote(&mut self, bytes: &[u8]) {
        self.remote.handle_input(self.r, bytes, self.t);
    }
}

fn closing_code(events: &[Event]) -> Option<ErrorCode> {
    events.iter().find_map(|e| match e {
        Event::ConnectionClosing { code, .. } => Some(*code),
        _ => None,
    })
}

fn read_all(s: &mut Session, id: u64) -> (Vec<u8>, bool) {
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(id, &mut buf) {
            Ok(Read::Data(n)) => out.extend_from_slice(&buf[..n]),
            Ok(Read::Fin) => return (out, true),
            Ok(Read::Blocked) | Err(_) => return (out, false),
        }
    }
}

#[test]
fn open_carries_first_bytes_and_both_directions_end_cleanly() {
    let mut p = Pair::new();
    let id = p
        .edge
        .open(Kind::Tunnel, "example.org:443", b"hello", true)
        .unwrap();
    p.shuttle();
    let ev = p.remote_events();
    assert!(ev.contains(&Event::Incoming {
        id,
        kind: Kind::Tunnel,
        target: "example.org:443".into()
    }));
    assert_eq!(read_all(&mut p.remote, id), (b"hello".to_vec(), true));
    assert_eq!(p.remote.send(id, b"world").unwrap(), 5);
    p.remote.finish(id).unwrap();
    p.remote.release(id);
    p.shuttle();
    assert_eq!(read_all(&mut p.edge, id), (b"world".to_vec(), true));
    p.edge.release(id);
    assert_eq!(p.edge.stream_count(), 0);
    assert_eq!(p.remote.stream_count(), 0);
}

#[test]
fn first_frame_must_be_hello() {
    let t = Instant::now();
    let mut remote = Session::new(Role::Remote, 1, cfg(), Policy::RoundRobin);
    let r = remote.add_connection(t);
    let mut b = Vec::new();
    Ping {
        ack: false,
        payload: 1,
    }
    .encode(&mut b);
    remote.handle_input(r, &b, t);
    let ev: Vec<_> = std::iter::from_fn(|| remote.poll_event()).collect();
    assert_eq!(closing_code(&ev), Some(ErrorCode::PROTOCOL_ERROR));
    let mut out = Vec::new();
    remote.poll_transmit(r, usize::MAX, &mut out);
    // Our HELLO, then the GOAWAY naming the error.
    let mut buf = BytesMut::from(&out[..]);
    assert!(matches!(
        Frame::decode(&mut buf, 65535),
        Ok(Some(Frame::Hello(_)))
    ));
    match Frame::decode(&mut buf, 65535) {
        Ok(Some(Frame::GoAway(g))) => {
            assert_eq!(g.code, ErrorCode::PROTOCOL_ERROR);
            assert!(g.reason.contains("HELLO"), "{}", g.reason);
        }
        other => panic!("expected GOAWAY, got {other:?}"),
    }
    assert!(remote.wants_close(r));
}

#[test]
fn hello_version_role_and_session_are_checked() {
    let t = Instant::now();
    for (version, role, session, code) in [
        (2, Role::Edge, 1, ErrorCode::VERSION_MISMATCH),
        (VERSION, Role::Remote, 1, ErrorCode::PROTOCOL_ERROR),
        (VERSION, Role::Edge, 2, ErrorCode::PROTOCOL_ERROR),
    ] {
        let mut remote = Session::new(Role::Remote, 1, cfg(), Policy::RoundRobin);
        let r = remote.add_connection(t);
        let mut b = Vec::new();
        Hello {
            version,
            role,
            session,
            max_frame_size: 16384,
            initial_window: 65536,
            max_streams: 10,
            conn_window: None,
            features: None,
        }
        .encode(&mut b);
        assert_eq!(b.len(), 5 + HELLO_LEN);
        remote.handle_input(r, &b, t);
        let ev: Vec<_> = std::iter::from_fn(|| remote.poll_event()).collect();
        assert_eq!(
            closing_code(&ev),
            Some(code),
            "{version} {role:?} {session}"
        );
    }
}

#[test]
fn handshake_times_out() {
    let t = Instant::now();
    let mut edge = Session::new(Role::Edge, 1, cfg(), Policy::RoundRobin);
    let c = edge.add_connection(t);
    let deadline = edge.poll_timeout().unwrap();
    assert_eq!(deadline, t + cfg().handshake_timeout);
    edge.handle_timeout(deadline);
    let ev: Vec<_> = std::iter::from_fn(|| edge.poll_event()).collect();
    assert_eq!(closing_code(&ev), Some(ErrorCode::TIMEOUT));
    assert_eq!(edge.connection(c).unwrap().state, ConnState::Closing);
}

#[test]
fn open_ids_must_increase_per_connection() {
    let mut p = Pair::new();
    let mut b = Vec::new();
    Open::encode_parts(&mut b, 5, Kind::Http, "a:80", b"", false, None);
    Open::encode_parts(&mut b, 3, Kind::Http, "a:80", b"", false, None);
    p.feed_remote(&b);
    let ev = p.remote_events();
    assert!(matches!(ev[0], Event::Incoming { id: 5, .. }));
    assert_eq!(closing_code(&ev), Some(ErrorCode::PROTOCOL_ERROR));
}

#[test]
fn data_for_a_stream_never_opened_is_a_protocol_error() {
    let mut p = Pair::new();
    let mut b = Vec::new();
    DataFrame::encode_parts(&mut b, 40, b"x", false);
    p.feed_remote(&b);
    assert_eq!(
        closing_code(&p.remote_events()),
        Some(ErrorCode::PROTOCOL_ERROR)
    );
}

#[test]
fn sending_beyond_the_window_resets_only_that_stream() {
    let mut p = Pair::new();
    let window = cfg().stream_window as usize;
    let mut b = Vec::new();
    Open::encode_parts(&mut b, 1, Kind::Tunnel, "a:1", b"", false, None);
    Open::encode_parts(&mut b, 2, Kind::Tunnel, "a:2", b"ok", false, None);
    let chunk = vec![0u8; 16384];
    let mut sent = 0;
    while sent <= window {
        DataFrame::encode_parts(&mut b, 1, &chunk, false);
        sent += chunk.len();
    }
    p.feed_remote(&b);
    let ev = p.remote_events();
    assert!(ev.contains(&Event::Reset {
        id: 1,
        code: ErrorCode::FLOW_CONTROL_ERROR,
        retryable: false
    }));
    assert_eq!(closing_code(&ev), None);
    assert_eq!(read_all(&mut p.remote, 2).0, b"ok");
    // The RESET goes back to the edge.
    let mut out = Vec::new();
    p.remote.poll_transmit(p.r, usize::MAX, &mut out);
    let mut buf = BytesMut::from(&out[..]);
    let mut saw_reset = false;
    while let Ok(Some(f)) = Frame::decode(&mut buf, 65535) {
        saw_reset |= f
            == Frame::Reset(Reset {
                stream: 1,
                code: ErrorCode::FLOW_CONTROL_ERROR,
            });
    }
    assert!(saw_reset);
}

#[test]
fn writes_stop_at_the_window_and_resume_as_the_reader_consumes() {
    let mut p = Pair::new();
    let window = cfg().stream_window as usize;
    let id = p.edge.open(Kind::Tunnel, "a:1", b"", false).unwrap();
    let big = vec![7u8; window * 2];
    let n = p.edge.send(id, &big).unwrap();
    assert_eq!(n, window, "the application may only write within credit");
    assert_eq!(p.edge.send(id, &big).unwrap(), 0);
    p.shuttle();
    assert_eq!(
        p.edge.send(id, &big).unwrap(),
        0,
        "no credit back before reads"
    );
    let _ = p.remote_events();
    let mut buf = vec![0u8; window / 2];
    assert_eq!(p.remote.read(id, &mut buf).unwrap(), Read::Data(window / 2));
    p.shuttle();
    assert!(p.edge_events().contains(&Event::Writable(id)));
    assert_eq!(p.edge.send_capacity(id), window / 2);
}

/// `cfg()` with a connection window of two stream windows.
fn narrow() -> Config {
    let c = cfg();
    Config {
        conn_window: 2 * c.stream_window,
        ..c
    }
}

fn buffered(s: &Session, ids: &[u64]) -> u64 {
    ids.iter()
        .filter_map(|&id| s.stream(id))
        .map(|st| st.recv_buffered)
        .sum()
}

#[test]
fn connection_credit_bounds_what_a_connection_buffers_and_everything_arrives() {
    let mut p = Pair::with(narrow(), narrow());
    let window = cfg().stream_window as usize;
    let ids: Vec<u64> = (0..3)
        .map(|_| p.edge.open(Kind::Tunnel, "a:1", b"", false).unwrap())
        .collect();
    for &id in &ids {
        assert_eq!(p.edge.send(id, &vec![1u8; window]).unwrap(), window);
    }
    p.shuttle();
    assert_eq!(
        buffered(&p.remote, &ids),
        2 * window as u64,
        "the connection carried its credit and no more"
    );
    assert!(!p.edge.has_transmit(p.e), "the rest waits for credit");
    let held = p.remote.connection(p.r).unwrap().credit_held;
    assert_eq!(held, Some(2 * window as u64));
    assert_eq!(p.edge.connection(p.e).unwrap().send_credit, Some(0));
    // Reading returns the credit; the rest follows, never more than the window buffered.
    let mut read = 0;
    for _ in 0..100 {
        for &id in &ids {
            read += read_all(&mut p.remote, id).0.len();
        }
        p.shuttle();
        assert!(buffered(&p.remote, &ids) <= 2 * window as u64);
        if read == 3 * window {
            break;
        }
    }
    assert_eq!(read, 3 * window);
    // All read: at most the last quarter window's credit is still to be returned.
    let held = p.remote.connection(p.r).unwrap().credit_held.unwrap();
    assert!(held < window as u64 / 4, "{held}");
}

#[test]
fn discarded_bytes_return_connection_credit() {
    let mut p = Pair::with(narrow(), narrow());
    let window = cfg().stream_window as usize;
    let ids: Vec<u64> = (0..3)
        .map(|_| p.edge.open(Kind::Tunnel, "a:1", b"", false).unwrap())
        .collect();
    for &id in &ids[..2] {
        assert_eq!(p.edge.send(id, &vec![1u8; window]).unwrap(), window);
    }
    p.shuttle();
    assert_eq!(buffered(&p.remote, &ids), 2 * window as u64);
    p.edge.send(ids[2], b"third").unwrap();
    p.shuttle();
    assert_eq!(read_all(&mut p.remote, ids[2]).0, b"", "no credit left");
    // The remote gives up on the first two streams unread: their bytes' credit returns.
    p.remote.reset(ids[0], ErrorCode::CANCEL);
    p.remote.release(ids[0]);
    p.remote.reset(ids[1], ErrorCode::CANCEL);
    p.remote.release(ids[1]);
    p.shuttle();
    assert_eq!(read_all(&mut p.remote, ids[2]).0, b"third");
}

#[test]
fn more_than_the_connection_credit_closes_the_connection() {
    let mut p = Pair::with(narrow(), narrow());
    let window = cfg().stream_window as usize;
    let chunk = vec![0u8; 10_000];
    let mut b = Vec::new();
    for id in 1..=3u64 {
        Open::encode_parts(&mut b, id, Kind::Tunnel, "a:1", b"", false, None);
    }
    // Each stream within its own window, the three together beyond the connection's.
    for id in 1..=3u64 {
        let mut sent = 0;
        while sent + chunk.len() <= window {
            DataFrame::encode_parts(&mut b, id, &chunk, false);
            sent += chunk.len();
        }
    }
    p.feed_remote(&b);
    assert_eq!(
        closing_code(&p.remote_events()),
        Some(ErrorCode::FLOW_CONTROL_ERROR)
    );
}

#[test]
fn streams_are_not_limited_by_the_budget_of_whole_windows() {
    // 1 GiB holds 165 stream windows of 6.5 MB; connection credit bounds the buffers
    // instead, so the session takes its full max_streams.
    let mut p = Pair::with(Config::default(), Config::default());
    assert_eq!(Config::default().legacy_max_streams(), 165);
    assert_eq!(
        p.edge.stream_limit(),
        crate::config::DEFAULT_SESSION_STREAMS
    );
    for _ in 0..1000 {
        p.edge.open(Kind::Tunnel, "a:443", b"x", false).unwrap();
    }
    p.shuttle();
    let incoming = p
        .remote_events()
        .iter()
        .filter(|e| matches!(e, Event::Incoming { .. }))
        .count();
    assert_eq!(incoming, 1000);
}

#[test]
fn a_peer_without_connection_credit_gets_the_legacy_limits() {
    let t = Instant::now();
    let c = Config {
        max_buffered_bytes: 2 * u64::from(narrow().stream_window),
        ..narrow()
    };
    assert_eq!(c.legacy_max_streams(), 2);
    let mut remote = Session::new(Role::Remote, 9, c.clone(), Policy::LeastOutstanding);
    let r = remote.add_connection(t);
    let mut b = Vec::new();
    Hello {
        version: VERSION,
        role: Role::Edge,
        session: 9,
        max_frame_size: 16384,
        initial_window: 1 << 20,
        max_streams: 100,
        conn_window: None,
        features: None,
    }
    .encode(&mut b);
    remote.handle_input(r, &b, t);
    assert_eq!(remote.stream_limit(), 2);
    // Connection credit is not counted: two full stream windows and a third OPEN's bytes
    // (beyond the connection window) are no error, the third stream is refused.
    b.clear();
    let window = c.stream_window as usize;
    for id in 1..=3u64 {
        Open::encode_parts(&mut b, id, Kind::Tunnel, "a:1", b"x", false, None);
    }
    for id in 1..=2u64 {
        let mut sent = 1;
        while sent + 10_000 <= window {
            DataFrame::encode_parts(&mut b, id, &[0u8; 10_000], false);
            sent += 10_000;
        }
    }
    remote.handle_input(r, &b, t);
    let ev: Vec<_> = std::iter::from_fn(|| remote.poll_event()).collect();
    assert_eq!(closing_code(&ev), None);
    let mut out = Vec::new();
    remote.poll_transmit(r, usize::MAX, &mut out);
    let mut buf = BytesMut::from(&out[..]);
    let mut frames = Vec::new();
    while let Ok(Some(f)) = Frame::decode(&mut buf, 65535) {
        frames.push(f);
    }
    assert!(frames.contains(&Frame::Reset(Reset {
        stream: 3,
        code: ErrorCode::REFUSED_STREAM
    })));
    // Reading returns stream credit only: no WINDOW for stream 0 goes to such a peer.
    for id in 1..=2u64 {
        read_all(&mut remote, id);
    }
    out.clear();
    remote.poll_transmit(r, usize::MAX, &mut out);
    let mut buf = BytesMut::from(&out[..]);
    while let Ok(Some(f)) = Frame::decode(&mut buf, 65535) {
        assert!(
            !matches!(f, Frame::Window(Window { stream: 0, .. })),
            "{f:?}"
        );
    }
}

#[test]
fn an_edge_with_a_remote_without_connection_credit_sends_as_before() {
    let t = Instant::now();
    let c = Config {
        max_buffered_bytes: 10 * u64::from(narrow().stream_window),
        ..narrow()
    };
    let mut edge = Session::new(Role::Edge, 9, c.clone(), Policy::LeastOutstanding);
    let e = edge.add_connection(t);
    let mut b = Vec::new();
    Hello {
        version: VERSION,
        role: Role::Remote,
        session: 9,
        max_frame_size: 16384,
        initial_window: c.stream_window,
        max_streams: 1000,
        conn_window: None,
        features: None,
    }
    .encode(&mut b);
    edge.handle_input(e, &b, t);
    assert_eq!(c.legacy_max_streams(), 10);
    assert_eq!(edge.stream_limit(), 10);
    assert_eq!(edge.connection(e).unwrap().send_credit, None);
    // Three whole stream windows leave at once, beyond our own connection window: the
    // remote grants no connection credit, so none is counted.
    let window = c.stream_window as usize;
    for _ in 0..3 {
        let id = edge.open(Kind::Tunnel, "a:1", b"", false).unwrap();
        assert_eq!(edge.send(id, &vec![0u8; window]).unwrap(), window);
    }
    let mut out = Vec::new();
    edge.poll_transmit(e, usize::MAX, &mut out);
    assert!(out.len() > 3 * window, "{} bytes framed", out.len());
    assert!(!edge.has_transmit(e));
}

/// One step of [`connection_credit_is_conserved`]: stream `i` is an index into the streams
/// opened so far.
#[derive(Debug, Clone)]
enum Op {
    Open(u16),
    EdgeSend(usize, u32),
    RemoteSend(usize, u32),
    EdgeRead(usize, u32),
    RemoteRead(usize, u32),
    EdgeFinish(usize),
    RemoteFinish(usize),
    EdgeReset(usize),
    RemoteReset(usize),
    EdgeRelease(usize),
    RemoteRelease(usize),
    Shuttle,
}

fn op() -> impl proptest::strategy::Strategy<Value = Op> {
    use proptest::prelude::*;
    let i = 0usize..8;
    let n = 1u32..200_000;
    prop_oneof![
        (0u16..3000).prop_map(Op::Open),
        (i.clone(), n.clone()).prop_map(|(i, n)| Op::EdgeSend(i, n)),
        (i.clone(), n.clone()).prop_map(|(i, n)| Op::RemoteSend(i, n)),
        (i.clone(), n.clone()).prop_map(|(i, n)| Op::EdgeRead(i, n)),
        (i.clone(), n).prop_map(|(i, n)| Op::RemoteRead(i, n)),
        i.clone().prop_map(Op::EdgeFinish),
        i.clone().prop_map(Op::RemoteFinish),
        i.clone().prop_map(Op::EdgeReset),
        i.clone().prop_map(Op::RemoteReset),
        i.clone().prop_map(Op::EdgeRelease),
        i.prop_map(Op::RemoteRelease),
        Just(Op::Shuttle),
        Just(Op::Shuttle),
    ]
}

/// With nothing in flight, what one side may still send on the connection plus what the
/// other holds unreturned is the whole connection window, both ways (PROTOCOL.md §4.1).
fn assert_conserved(p: &Pair, window: u64) {
    let (e, r) = (
        p.edge.connection(p.e).unwrap(),
        p.remote.connection(p.r).unwrap(),
    );
    assert_eq!(
        e.send_credit.unwrap() + r.credit_held.unwrap(),
        window,
        "edge to remote"
    );
    assert_eq!(
        r.send_credit.unwrap() + e.credit_held.unwrap(),
        window,
        "remote to edge"
    );
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(300))]

    /// Whatever the applications do (write, read, finish, reset, release, in any order),
    /// connection credit is neither lost nor created: a leak would stall a long-lived pool
    /// connection for good, a surplus would break the memory bound.
    #[test]
    fn connection_credit_is_conserved(ops in proptest::collection::vec(op(), 1..120)) {
        let mut p = Pair::with(narrow(), narrow());
        let window = u64::from(narrow().conn_window);
        let mut ids: Vec<u64> = Vec::new();
        let mut buf = vec![0u8; 200_000];
        let pick = |ids: &[u64], i: usize| ids.get(i % ids.len().max(1)).copied();
        for op in ops {
            match op {
                Op::Open(n) => {
                    let first = vec![1u8; usize::from(n)];
                    if let Ok(id) = p.edge.open(Kind::Tunnel, "a:1", &first, false) {
                        ids.push(id);
                    }
                }
                Op::EdgeSend(i, n) => if let Some(id) = pick(&ids, i) {
                    let _ = p.edge.send(id, &buf[..n as usize]);
                },
                Op::RemoteSend(i, n) => if let Some(id) = pick(&ids, i) {
                    let _ = p.remote.send(id, &buf[..n as usize]);
                },
                Op::EdgeRead(i, n) => if let Some(id) = pick(&ids, i) {
                    let _ = p.edge.read(id, &mut buf[..n as usize]);
                },
                Op::RemoteRead(i, n) => if let Some(id) = pick(&ids, i) {
                    let _ = p.remote.read(id, &mut buf[..n as usize]);
                },
                Op::EdgeFinish(i) => if let Some(id) = pick(&ids, i) {
                    let _ = p.edge.finish(id);
                },
                Op::RemoteFinish(i) => if let Some(id) = pick(&ids, i) {
                    let _ = p.remote.finish(id);
                },
                Op::EdgeReset(i) => if let Some(id) = pick(&ids, i) {
                    p.edge.reset(id, ErrorCode::CANCEL);
                },
                Op::RemoteReset(i) => if let Some(id) = pick(&ids, i) {
                    p.remote.reset(id, ErrorCode::CANCEL);
                },
                Op::EdgeRelease(i) => if let Some(id) = pick(&ids, i) {
                    p.edge.release(id);
                },
                Op::RemoteRelease(i) => if let Some(id) = pick(&ids, i) {
                    p.remote.release(id);
                },
                Op::Shuttle => {
                    p.shuttle();
                    assert_conserved(&p, window);
                }
            }
            let _ = p.edge_events();
            let _ = p.remote_events();
        }
        // Both sides read everything and let go; all credit comes back but for less than
        // a quarter window each way.
        for _ in 0..50 {
            p.shuttle();
            for &id in &ids {
                while let Ok(Read::Data(_)) = p.edge.read(id, &mut buf) {}
                while let Ok(Read::Data(_)) = p.remote.read(id, &mut buf) {}
            }
        }
        for &id in &ids {
            p.edge.release(id);
            p.remote.release(id);
        }
        p.shuttle();
        assert_conserved(&p, window);
        let quarter = u64::from(narrow().stream_window) / 4;
        proptest::prop_assert!(p.edge.connection(p.e).unwrap().credit_held.unwrap() < quarter);
        proptest::prop_assert!(p.remote.connection(p.r).unwrap().credit_held.unwrap() < quarter);
        proptest::prop_assert_eq!(p.edge.connection(p.e).unwrap().state, ConnState::Up);
    }
}

#[test]
fn stream_limit_is_the_smaller_max_streams_and_frees_on_release() {
    let small = |n| Config {
        max_streams: n,
        ..cfg()
    };
    for (edge_max, remote_max, which) in [(10, 2, "peer"), (2, 10, "local")] {
        let mut p = Pair::with(small(edge_max), small(remote_max));
        let a = p.edge.open(Kind::Http, "a:80", b"", true).unwrap();
        let _b = p.edge.open(Kind::Http, "a:80", b"", true).unwrap();
        assert_eq!(
            p.edge.open(Kind::Http, "a:80", b"", true),
            Err(OpenError::StreamLimit { limit: 2, which })
        );
        p.shuttle();
        p.remote.finish(a).unwrap();
        p.remote.release(a);
        p.shuttle();
        assert_eq!(read_all(&mut p.edge, a), (Vec::new(), true));
        // Not released yet: still counts.
        assert!(!p.edge_events().contains(&Event::StreamFreed(a)));
        assert!(p.edge.open(Kind::Http, "a:80", b"", true).is_err());
        p.edge.release(a);
        assert!(p.edge_events().contains(&Event::StreamFreed(a)));
        p.edge.open(Kind::Http, "a:80", b"", true).unwrap();
    }
}

#[test]
fn a_stream_finished_both_ways_frees_its_slot_before_the_remote_lets_go() {
    let small = |n| Config {
        max_streams: n,
        ..cfg()
    };
    let mut p = Pair::with(small(10), small(2));
    let a = p.edge.open(Kind::Http, "a:80", b"GET", true).unwrap();
    let b = p.edge.open(Kind::Http, "a:80", b"GET", true).unwrap();
    p.shuttle();
    // The remote answers `a` but its application still holds the stream.
    p.remote.send(a, b"200").unwrap();
    p.remote.finish(a).unwrap();
    p.shuttle();
    assert_eq!(read_all(&mut p.edge, a), (b"200".to_vec(), true));
    p.edge.release(a);
    let _ = p.edge_events();
    // The edge sees a free slot and uses it: the remote must not refuse it.
    let c = p.edge.open(Kind::Http, "a:80", b"GET", true).unwrap();
    p.shuttle();
    assert!(!p
        .edge_events()
        .iter()
        .any(|e| matches!(e, Event::Reset { id, .. } if *id == c)));
    assert_eq!(p.remote.stream_count(), 3);
    // `b` and `c`, open one way, fill the limit again: the edge holds the third open back.
    assert_eq!(
        p.edge.open(Kind::Http, "a:80", b"", true),
        Err(OpenError::StreamLimit {
            limit: 2,
            which: "peer"
        })
    );
    p.remote.release(a);
    p.remote.release(b);
}

#[test]
fn release_after_finishing_delivers_our_bytes_then_cancels() {
    let mut p = Pair::new();
    let id = p.edge.open(Kind::Tunnel, "a:1", b"req", false).unwrap();
    p.shuttle();
    // The remote writes its reply, finishes and drops the stream without
    // waiting for the edge's FIN.
    p.remote.send(id, b"reply").unwrap();
    p.remote.finish(id).unwrap();
    p.remote.release(id);
    p.shuttle();
    assert_eq!(read_all(&mut p.edge, id), (b"reply".to_vec(), true));
    assert!(p.edge_events().iter().any(|e| matches!(e,
        Event::Reset { id: i, code: ErrorCode::CANCEL, .. } if *i == id)));
    assert!(matches!(
        p.edge.send(id, b"more"),
        Err(StreamError::Reset {
            code: ErrorCode::CANCEL,
            ..
        })
    ));
    p.edge.release(id);
    assert_eq!(p.edge.stream_count(), 0);
    assert_eq!(p.remote.stream_count(), 0);
}

#[test]
fn drain_refuses_new_streams_and_they_are_retryable() {
    let mut p = Pair::new();
    let a = p.edge.open(Kind::Http, "a:80", b"GET", true).unwrap();
    p.shuttle();
    // The edge opens b while the remote's GOAWAY is in flight.
    p.remote.go_away("maintenance");
    let b = p.edge.open(Kind::Http, "a:80", b"GET", true).unwrap();
    p.shuttle();
    let ev = p.edge_events();
    assert!(ev.contains(&Event::Reset {
        id: b,
        code: ErrorCode::REFUSED_STREAM,
        retryable: true
    }));
    assert!(ev
        .iter()
        .any(|e| matches!(e, Event::GoAway { last_stream, .. } if *last_stream == a)));
    assert_eq!(
        p.edge.open(Kind::Http, "a:80", b"", true),
        Err(OpenError::Draining)
    );
    // The stream accepted before the drain still completes.
    p.remote.send(a, b"200").unwrap();
    p.remote.finish(a).unwrap();
    p.shuttle();
    assert_eq!(read_all(&mut p.edge, a), (b"200".to_vec(), true));
}

#[test]
fn ping_flood_without_reading_is_stopped() {
    let t = Instant::now();
    let small = Config {
        max_control_bytes: 4096,
        ..cfg()
    };
    let mut edge = Session::new(Role::Edge, 9, cfg(), Policy::LeastOutstanding);
    let mut remote = Session::new(Role::Remote, 9, small, Policy::LeastOutstanding);
    let e = edge.add_connection(t);
    let r = remote.add_connection(t);
    let mut hello = Vec::new();
    edge.poll_transmit(e, usize::MAX, &mut hello);
    let mut flood = hello;
    for i in 0..1000 {
        Ping {
            ack: false,
            payload: i,
        }
        .encode(&mut flood);
    }
    remote.handle_input(r, &flood, t);
    let ev: Vec<_> = std::iter::from_fn(|| remote.poll_event()).collect();
    assert_eq!(closing_code(&ev), Some(ErrorCode::ENHANCE_YOUR_CALM));
}

#[test]
fn frames_respect_the_peer_maximum_and_ids_cost_few_bytes() {
    let mut p = Pair::new();
    let id = p.edge.open(Kind::Tunnel, "a:1", b"", false).unwrap();
    p.edge.send(id, &vec![1u8; 40_000]).unwrap();
    let mut out = Vec::new();
    p.edge.poll_transmit(p.e, usize::MAX, &mut out);
    let mut buf = BytesMut::from(&out[..]);
    let mut sizes = Vec::new();
    while let Ok(Some(f)) = Frame::decode(&mut buf, 16384) {
        if let Frame::Open(o) = &f {
            sizes.push(o.data.len());
        }
        if let Frame::Data(d) = &f {
            sizes.push(d.data.len());
        }
    }
    assert!(buf.is_empty());
    assert_eq!(sizes.iter().sum::<usize>(), 40_000);
    assert!(sizes.iter().all(|s| *s <= 16384));
    // 5 header + 1 page age + 3 kind/len + 3 target bytes of OPEN, 5-byte DATA headers.
    let overhead = out.len() - 40_000;
    assert_eq!(overhead, (5 + 1 + 3 + 3) + 5 * (sizes.len() - 1));
    assert_eq!(data_overhead(id), 5);
}

/// Receive buffers give their memory back: a stream that buffered its whole window holds a
/// few hundred bytes once read, nothing once reset.
#[test]
fn drained_and_reset_streams_release_their_buffers() {
    let mut p = Pair::new();
    let window = cfg().stream_window as usize;
    let ids: Vec<u64> = (0..2)
        .map(|_| p.edge.open(Kind::Tunnel, "a:1", b"", false).unwrap())
        .collect();
    p.shuttle();
    for &id in &ids {
        assert_eq!(p.remote.send(id, &vec![3u8; window]).unwrap(), window);
    }
    p.shuttle();
    for &id in &ids {
        let s = p.edge.stream(id).unwrap();
        assert_eq!(s.recv_buffered, window as u64);
        assert!(s.recv_memory >= window as u64);
    }
    let (got, _) = read_all(&mut p.edge, ids[0]);
    assert_eq!(got.len(), window);
    let drained = p.edge.stream(ids[0]).unwrap();
    assert_eq!(drained.recv_buffered, 0);
    assert!(
        drained.recv_memory <= 512,
        "{} bytes held",
        drained.recv_memory
    );
    p.edge.reset(ids[1], ErrorCode::CANCEL);
    assert_eq!(p.edge.stream(ids[1]).unwrap().recv_memory, 0);
}

/// [`tuned`] with every stream starting at the 256 KiB floor (no starting-window budget):
/// the tests of window growth start small whatever else the session holds.
fn growing() -> Config {
    Config {
        initial_window_budget: 0,
        ..tuned()
    }
}

/// A Pair whose edge has measured a 50 ms round trip, with `n` streams opened, windows
/// growing from the floor ([`growing`]).
fn pair_with_rtt(n: usize) -> (Pair, Vec<u64>) {
    pair_with_rtt_cfg(n, growing())
}

/// [`pair_with_rtt`] with `c` on both sides.
fn pair_with_rtt_cfg(n: usize, c: Config) -> (Pair, Vec<u64>) {
    let mut p = Pair::with(c.clone(), c);
    p.edge.handle_timeout(p.t);
    let mut ping = Vec::new();
    p.edge.poll_transmit(p.e, usize::MAX, &mut ping);
    p.remote.handle_input(p.r, &ping, p.t);
    p.t += Duration::from_millis(50);
    p.shuttle();
    assert_eq!(
        p.edge.connection(p.e).unwrap().rtt,
        Some(Duration::from_millis(50))
    );
    let ids = (0..n)
        .map(|_| p.edge.open(Kind::Tunnel, "a:1", b"", false).unwrap())
        .collect();
    p.shuttle();
    let _ = p.remote_events();
    (p, ids)
}

/// A reader that empties its stream at every step grows the window to the maximum, one
/// doubling per window read; the WINDOW frames carry the growth, so the sender may write the
/// larger window at once. A stream beside it that is never read keeps its initial window.
#[test]
fn a_reader_that_keeps_up_grows_its_window_to_the_maximum() {
    let (mut p, ids) = pair_with_rtt(2);
    let (fast, stalled) = (ids[0], ids[1]);
    let (initial, max) = (
        u64::from(tuned().initial_window()),
        u64::from(tuned().stream_window),
    );
    let data = vec![1u8; 64 * 1024];
    let mut windows = vec![p.edge.stream(fast).unwrap().recv_window];
    for _ in 0..200 {
        for id in [fast, stalled] {
            while p.remote.send(id, &data).unwrap_or(0) > 0 {}
        }
        p.shuttle();
        read_all(&mut p.edge, fast);
        p.shuttle();
        p.t += Duration::from_millis(10);
        let w = p.edge.stream(fast).unwrap().recv_window;
        if windows.last() != Some(&w) {
            windows.push(w);
        }
    }
    assert_eq!(windows.first(), Some(&initial));
    assert_eq!(windows.last(), Some(&max), "{windows:?}");
    assert!(
        windows.windows(2).all(|w| w[1] == (2 * w[0]).min(max)),
        "{windows:?}"
    );
    // The sender holds the grown window but for what the reader consumed since the last
    // WINDOW (less than a quarter window).
    let unreturned = p.edge.streams[&fast].recv.unreturned();
    assert!(unreturned < max / 4);
    assert_eq!(
        p.remote.send_capacity(fast) as u64 + unreturned,
        max,
        "the sender holds the grown window"
    );
    let s = p.edge.stream(stalled).unwrap();
    assert_eq!((s.recv_window, s.recv_buffered), (initial, initial));
}

/// One step of [`stream_credit_is_conserved_while_windows_grow`].
#[derive(Debug, Clone)]
enum TuneOp {
    /// The remote writes up to this many bytes on stream `i`.
    Send(usize, u32),
    /// The edge reads up to this many bytes of stream `i`.
    Read(usize, u32),
    /// Virtual time advances this many milliseconds.
    Wait(u16),
    Shuttle,
}

fn tune_op() -> impl proptest::strategy::Strategy<Value = TuneOp> {
    use proptest::prelude::*;
    let i = 0usize..4;
    prop_oneof![
        (i.clone(), 1u32..400_000).prop_map(|(i, n)| TuneOp::Send(i, n)),
        (i, 1u32..400_000).prop_map(|(i, n)| TuneOp::Read(i, n)),
        (0u16..300).prop_map(TuneOp::Wait),
        Just(TuneOp::Shuttle),
    ]
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(200))]

    /// With autotuning, whatever the reader does: with nothing in flight the credit the
    /// sender holds for a stream is exactly what the receiver counts it holding, the
    /// receiver's window is buffered + granted + unreturned bytes, and no window leaves
    /// initial..=maximum; connection credit stays conserved.
    #[test]
    fn stream_credit_is_conserved_while_windows_grow(
        ops in proptest::collection::vec(tune_op(), 1..150),
    ) {
        // A budget of two maximum windows: the first two streams start at the maximum (their
        // grant behind the OPEN), the others at the floor and grow.
        let c = Config { initial_window_budget: 2 * u64::from(tuned().stream_window), ..tuned() };
        let (mut p, ids) = pair_with_rtt_cfg(4, c);
        for (k, &id) in ids.iter().enumerate() {
            let start = if k < 2 { tuned().stream_window } else { tuned().initial_window() };
            proptest::prop_assert_eq!(p.remote.send_capacity(id) as u64, u64::from(start));
        }
        let (initial, max) = (u64::from(tuned().initial_window()), u64::from(tuned().stream_window));
        let data = vec![5u8; 400_000];
        let mut buf = vec![0u8; 400_000];
        for op in ops {
            match op {
                TuneOp::Send(i, n) => {
                    let _ = p.remote.send(ids[i], &data[..n as usize]);
                }
                TuneOp::Read(i, n) => {
                    let _ = p.edge.read(ids[i], &mut buf[..n as usize]);
                }
                TuneOp::Wait(ms) => p.t += Duration::from_millis(u64::from(ms)),
                TuneOp::Shuttle => {
                    p.shuttle();
                    for &id in &ids {
                        let (r, s) = (&p.edge.streams[&id], &p.remote.streams[&id]);
                        proptest::prop_assert_eq!(r.recv.available(), s.send.available());
                        let w = r.recv.window();
                        proptest::prop_assert!((initial..=max).contains(&w), "window {}", w);
                        proptest::prop_assert_eq!(
                            r.recv_buf_len + r.recv.available() + r.recv.unreturned(),
                            w
                        );
                    }
                    assert_conserved(&p, u64::from(tuned().conn_window));
                    let windows: u64 = p.edge.streams.values().map(|s| s.recv.window()).sum();
                    proptest::prop_assert_eq!(p.edge.recv_committed(), windows);
                }
            }
            let _ = p.edge_events();
            let _ = p.remote_events();
        }
    }
}

/// The defaults on the modelled `pacific` link (130 ms, 100 Mbit/s): floor 256 KiB, maximum
/// 6.5 MB, starting-window budget 32 MiB.
fn pacific() -> Config {
    Config::for_link(Duration::from_millis(130), 100_000_000)
}

/// On a quiet session a new stream starts at its maximum window in both directions: the edge
/// grants it in a WINDOW right behind the OPEN, the remote at accept, so each sender may write
/// the whole maximum before any byte was read, with the HELLO still advertising the floor.
#[test]
fn a_stream_on_a_quiet_session_starts_at_its_maximum_window_without_a_round_trip() {
    let c = pacific();
    let max = u64::from(c.stream_window);
    let mut p = Pair::with(c.clone(), c.clone());
    let id = p.edge.open(Kind::Tunnel, "a:1", b"hi", false).unwrap();
    let mut wire = Vec::new();
    p.edge.poll_transmit(p.e, usize::MAX, &mut wire);
    // OPEN, then the WINDOW granting the rest of the maximum, in one write.
    let mut buf = BytesMut::from(&wire[..]);
    let open = Frame::decode(&mut buf, 1 << 20).unwrap().unwrap();
    assert!(
        matches!(open, Frame::Open(ref o) if o.stream == id),
        "{open:?}"
    );
    let grant = Frame::decode(&mut buf, 1 << 20).unwrap().unwrap();
    assert_eq!(
        grant,
        Frame::Window(Window {
            stream: id,
            increment: (max - u64::from(c.initial_window())) as u32,
        })
    );
    p.remote.handle_input(p.r, &wire, p.t);
    p.shuttle();
    let _ = p.remote_events();
    assert_eq!(p.remote.send_capacity(id) as u64, max, "reply credit");
    assert_eq!(
        p.edge.send_capacity(id) as u64,
        max - 2,
        "upload credit, granted at accept"
    );
    assert_eq!(p.edge.stream(id).unwrap().recv_window, max);
    assert_eq!(p.remote.stream(id).unwrap().recv_window, max);

    // A request that ends with its OPEN gets no upload grant: the remote answers with nothing.
    let get = p.edge.open(Kind::Http, "a:1", b"GET", true).unwrap();
    let mut wire = Vec::new();
    p.edge.poll_transmit(p.e, usize::MAX, &mut wire);
    p.remote.handle_input(p.r, &wire, p.t);
    let mut back = Vec::new();
    p.remote.poll_transmit(p.r, usize::MAX, &mut back);
    let mut buf = BytesMut::from(&back[..]);
    while let Some(f) = Frame::decode(&mut buf, 1 << 20).unwrap() {
        assert!(
            !matches!(f, Frame::Window(ref w) if w.stream == get),
            "{f:?}"
        );
    }
    assert_eq!(
        p.remote.send_capacity(get) as u64,
        max,
        "its reply still starts large"
    );
}

/// The memory bound of starting windows: K = 200 streams opened one after another whose
/// readers never read, each sent as much as its credit allows, commit (and buffer) at most
/// `initial_window_budget + K × floor`; the first ones start at the maximum, those opened
/// once the budget is used at the floor, and none grows.
#[test]
fn stalled_readers_opened_one_after_another_hold_at_most_the_budget_plus_a_floor_each() {
    const K: usize = 200;
    let c = pacific();
    let (floor, max) = (u64::from(c.initial_window()), u64::from(c.stream_window));
    let bound = c.initial_window_budget + K as u64 * floor;
    let mut p = Pair::with(c.clone(), c.clone());
    let data = vec![7u8; 1 << 20];
    let mut ids = Vec::new();
    for _ in 0..K {
        let id = p.edge.open(Kind::Tunnel, "a:1", b"", false).unwrap();
        p.shuttle();
        let _ = p.remote_events();
        while p.remote.send(id, &data).unwrap_or(0) > 0 {
            p.shuttle();
        }
        p.t += Duration::from_millis(10);
        ids.push(id);
        let committed = p.edge.recv_committed();
        let buffered: u64 = ids
            .iter()
            .map(|&i| p.edge.stream(i).unwrap().recv_buffered)
            .sum();
        assert!(
            committed <= bound && buffered == committed,
            "{} streams commit {committed}, buffer {buffered}, bound {bound}",
            ids.len()
        );
    }
    let windows: Vec<u64> = ids
        .iter()
        .map(|&i| p.edge.stream(i).unwrap().recv_window)
        .collect();
    let at_max = (c.initial_window_budget / max) as usize;
    assert!(windows[..at_max].iter().all(|&w| w == max), "{windows:?}");
    assert!(
        windows[at_max + 1..].iter().all(|&w| w == floor),
        "{windows:?}"
    );
    assert_eq!(windows.iter().sum::<u64>(), p.edge.recv_committed());
    // Once they are gone, so is their commitment: the next stream starts at the maximum again.
    for &id in &ids {
        p.edge.reset(id, ErrorCode::CANCEL);
        p.edge.release(id);
    }
    p.shuttle();
    assert_eq!(p.edge.recv_committed(), 0);
    let id = p.edge.open(Kind::Tunnel, "a:1", b"", false).unwrap();
    assert_eq!(p.edge.stream(id).unwrap().recv_window, max);
}

/// An edge session with `n` Up lanes (a remote's HELLO fed on each) and `policy`.
fn edge_with_lanes(n: usize, policy: Policy) -> (Session, Vec<ConnId>, Instant) {
    let t = Instant::now();
    let mut s = Session::new(Role::Edge, 9, cfg(), policy);
    let mut hello = BytesMut::new();
    Hello {
        version: VERSION,
        role: Role::Remote,
        session: 9,
        max_frame_size: 16384,
        initial_window: 1 << 20,
        max_streams: 10_000,
        conn_window: Some(i32::MAX as u32),
        features: None,
    }
    .encode(&mut hello);
    let lanes = (0..n)
        .map(|_| {
            let c = s.add_connection(t);
            s.handle_input(c, &hello, t);
            c
        })
        .collect();
    while s.poll_event().is_some() {}
    (s, lanes, t)
}

/// (c) A lane whose fresh estimate is low gets no bindings while its peers drain faster;
/// once its estimate is stale (no fresh sample for ten round trips) it takes the next
/// binding, and the sample that binding produces makes its own rate count again.
#[test]
fn a_starved_lane_gets_a_binding_once_its_estimate_is_stale() {
    let (mut s, lanes, t0) = edge_with_lanes(3, Policy::ExpectedCompletion);
    let rtt = Duration::from_millis(600);
    let est = |rate: u64, in_flight: u64, app_limited: bool| PathEstimate {
        delivery_rate: rate,
        rtt,
        unsent: 0,
        in_flight,
        app_limited,
    };
    // Lane 0 measured 10 kB/s with bytes in flight: a fresh, low sample.
    s.set_path_estimate(lanes[0], est(10_000, 5_000, false), t0);
    let mut t = t0;
    let mut first_on_0 = None;
    let mut step = 0u32;
    while first_on_0.is_none() {
        step += 1;
        t = t0 + Duration::from_millis(100) * step;
        assert!(step < 200, "lane 0 never got a binding");
        // The busy lanes keep reporting fresh 5 MB/s samples with a growing backlog;
        // lane 0 sends nothing, so the kernel keeps its last sample (low, not marked
        // app-limited) and nothing is in flight: no fresh sample.
        for &c in &lanes[1..] {
            let backlog = 200_000 + u64::from(step) * 20_000;
            s.set_path_estimate(c, est(5_000_000, backlog, false), t);
        }
        s.set_path_estimate(lanes[0], est(10_000, 0, false), t);
        let id = s
            .open(Kind::Http, "a:80", b"GET / HTTP/1.1\r\n\r\n", false)
            .unwrap();
        if s.stream(id).unwrap().send_conn == Some(lanes[0]) {
            first_on_0 = Some(t - t0);
        }
    }
    let waited = first_on_0.unwrap();
    // Not before the sample is stale, and at the first decision after.
    assert!(waited > schedule::stale_after(rtt), "{waited:?}");
    assert!(
        waited <= schedule::stale_after(rtt) + Duration::from_millis(100),
        "{waited:?}"
    );
    // The binding produces a fresh sample, still low: the next bindings go elsewhere again.
    s.set_path_estimate(lanes[0], est(10_000, 20_000, false), t);
    let id = s.open(Kind::Http, "a:80", b"", false).unwrap();
    assert_ne!(s.stream(id).unwrap().send_conn, Some(lanes[0]));
    // A fresh sample that shows the lane is fast now keeps it in use.
    s.set_path_estimate(lanes[0], est(8_000_000, 20_000, false), t);
    let id = s.open(Kind::Http, "a:80", b"", false).unwrap();
    assert_eq!(s.stream(id).unwrap().send_conn, Some(lanes[0]));
}

/// (a) With path estimates, new bindings go to the lane that completes first: the fast
/// lane takes most of a burst, the slow and the queued lanes fewer.
#[test]
fn bindings_follow_expected_completion() {
    let (mut s, lanes, t) = edge_with_lanes(3, Policy::ExpectedCompletion);
    let est = |rate: u64, in_flight: u64| PathEstimate {
        delivery_rate: rate,
        rtt: Duration::from_millis(100),
        unsent: 0,
        in_flight,
        app_limited: false,
    };
    // Lane 0: 10 MB/s. Lane 1: 1 MB/s. Lane 2: 10 MB/s with 2 MB queued in the kernel.
    s.set_path_estimate(lanes[0], est(10_000_000, 1), t);
    s.set_path_estimate(lanes[1], est(1_000_000, 1), t);
    s.set_path_estimate(lanes[2], est(10_000_000, 2_000_000), t);
    let mut count = [0u32; 3];
    for _ in 0..60 {
        let id = s
            .open(Kind::Http, "a:80", &[0u8; 32 * 1024], false)
            .unwrap();
        let c = s.stream(id).unwrap().send_conn.unwrap();
        count[lanes.iter().position(|l| *l == c).unwrap()] += 1;
    }
    assert!(count[0] > count[1] && count[0] > count[2], "{count:?}");
    assert!(
        count[1] > 0,
        "the slow lane takes a share once the fast one queues: {count:?}"
    );
}

/// Grants stream `id` `n` more bytes of credit, as the remote's WINDOW would.
fn grant(s: &mut Session, lane: ConnId, id: u64, n: u32, t: Instant) {
    let mut w = BytesMut::new();
    Window {
        stream: id,
        increment: n,
    }
    .encode(&mut w);
    s.handle_input(lane, &w, t);
}

/// A stream that has sent [`crate::policy::BULK_BYTES`] and has more queued.
fn bulk_stream(s: &mut Session, lane: ConnId, t: Instant) -> u64 {
    let bulk = crate::policy::BULK_BYTES as usize;
    let id = s.open(Kind::Http, "a:80", &[], false).unwrap();
    grant(s, lane, id, 4 << 20, t);
    let mut queued = 0;
    while queued < bulk + 256 * 1024 {
        queued += s.send(id, &vec![1u8; 64 * 1024]).unwrap();
    }
    let mut out = Vec::new();
    while s.stream(id).unwrap().bytes_sent < bulk as u64 {
        s.poll_transmit(lane, 16 * 1024, &mut out);
    }
    assert!(s.stream(id).unwrap().send_buffered > 0);
    id
}

#[test]
fn interactive_directions_go_before_bulk_ones_on_a_lane() {
    let (mut s, lanes, t) = edge_with_lanes(1, Policy::LeastOutstanding);
    let a = bulk_stream(&mut s, lanes[0], t);
    let sent = s.stream(a).unwrap().bytes_sent;
    // A page's request arrives behind the download on the same lane.
    let b = s.open(Kind::Http, "b:80", &[2u8; 10_000], true).unwrap();
    assert_eq!(s.stream(b).unwrap().send_conn, Some(lanes[0]));
    let mut out = Vec::new();
    s.poll_transmit(lanes[0], 10_000, &mut out);
    assert_eq!(s.stream(b).unwrap().bytes_sent, 10_000, "all of it, first");
    assert_eq!(s.stream(a).unwrap().bytes_sent, sent, "the download waited");
    // Then the download goes on.
    s.poll_transmit(lanes[0], 64 * 1024, &mut out);
    assert!(s.stream(a).unwrap().bytes_sent > sent);
}

#[test]
fn first_bytes_of_every_direction_go_before_the_rest_of_any_each_oldest_page_first() {
    use crate::policy::FIRST_BYTES;
    let (mut s, lanes, _t) = edge_with_lanes(1, Policy::LeastOutstanding);
    // An older page's request, then a newer page's, which began within the head window.
    let age = s.config().head_window / 2;
    let a = s
        .open_aged(Kind::Http, "a:80", &[1u8; 50_000], true, age)
        .unwrap();
    let b = s.open(Kind::Http, "b:80", &[2u8; 50_000], true).unwrap();
    let sent = |s: &Session, id| s.stream(id).map_or(u64::MAX, |st| st.bytes_sent);
    let mut out = Vec::new();
    // One frame per call.
    let mut frame = |s: &mut Session| assert!(s.poll_transmit(lanes[0], 1, &mut out) > 0);
    while sent(&s, a) < FIRST_BYTES {
        assert_eq!(sent(&s, b), 0, "b's first bytes wait for the older a's");
        frame(&mut s);
    }
    let a_head = sent(&s, a);
    // A third page begins: its first bytes and b's go before the rest of the older a, b's
    // (the older page) first.
    let c = s.open(Kind::Http, "c:80", &[3u8; 1_000], true).unwrap();
    while sent(&s, b) < FIRST_BYTES {
        assert_eq!(sent(&s, c), 0, "c's first bytes wait for the older b's");
        assert_eq!(
            sent(&s, a),
            a_head,
            "a's rest waits for the newer pages' first bytes"
        );
        frame(&mut s);
    }
    let b_head = sent(&s, b);
    while sent(&s, c) < 1_000 {
        assert_eq!(sent(&s, a), a_head, "a's rest waits for c's first bytes");
        frame(&mut s);
    }
    // Past their first bytes, pages go oldest first again.
    while sent(&s, a) < 50_000 {
        assert_eq!(sent(&s, b), b_head, "b's rest waits for the older a's");
        frame(&mut s);
    }
    while sent(&s, b) < 50_000 {
        frame(&mut s);
    }
}

#[test]
fn an_older_page_s_rest_goes_before_the_first_bytes_of_pages_that_began_a_head_window_later() {
    let (mut s, lanes, _t) = edge_with_lanes(1, Policy::LeastOutstanding);
    let w = s.config().head_window;
    assert!(!w.is_zero());
    // Page a began 1.5 windows ago, b half a window after it, c just now: a's rest is due
    // half a window ago (after b's first bytes, before c's), b's at the same moment as c's
    // first bytes, which go first at one deadline.
    let a = s
        .open_aged(Kind::Http, "a:80", &[1u8; 50_000], true, w * 3 / 2)
        .unwrap();
    let b = s
        .open_aged(Kind::Http, "b:80", &[2u8; 50_000], true, w)
        .unwrap();
    let c = s.open(Kind::Http, "c:80", &[3u8; 50_000], true).unwrap();
    let sent = |s: &Session| [a, b, c].map(|id| s.stream(id).map_or(u64::MAX, |st| st.bytes_sent));
    let mut order: Vec<char> = Vec::new();
    let mut out = Vec::new();
    while sent(&s).iter().any(|&n| n < 50_000) {
        let before = sent(&s);
        // One frame per call.
        assert!(s.poll_transmit(lanes[0], 1, &mut out) > 0);
        let after = sent(&s);
        let moved: Vec<char> = (0..3)
            .filter(|&i| after[i] != before[i])
            .map(|i| ['a', 'b', 'c'][i])
            .collect();
        assert!(moved.len() <= 1, "one stream per frame: {moved:?}");
        if let Some(&m) = moved.first() {
            if order.last() != Some(&m) {
                order.push(m);
            }
        }
    }
    assert_eq!(
        order,
        ['a', 'b', 'a', 'c', 'b', 'c'],
        "runs of frames by stream"
    );
}

/// Steps of `dt` (one frame sent per step, two new pages of one 8 KiB frame each arriving:
/// twice the lane's rate in frames) until all of a 64 KiB reply of a page that began before the overload has
/// been framed, on a lane whose head window is `w`; `None` if not within `limit` steps.
fn steps_to_finish_under_overload(w: Duration, dt: Duration, limit: u32) -> Option<u32> {
    let (mut s, lanes, t) = edge_with_lanes(1, Policy::LeastOutstanding);
    s.cfg.head_window = w;
    let a = s.open(Kind::Http, "a:80", &[1u8; 64 * 1024], true).unwrap();
    let mut out = Vec::new();
    for step in 1..=limit {
        s.handle_timeout(t + dt * step);
        for _ in 0..2 {
            s.open(Kind::Http, "n:80", &[2u8; 8 * 1024], true).unwrap();
        }
        out.clear();
        assert!(s.poll_transmit(lanes[0], 1, &mut out) > 0);
        if s.stream(a).map_or(0, |st| st.bytes_sent) == 64 * 1024 {
            return Some(step);
        }
    }
    None
}

#[test]
fn under_overload_an_older_page_s_rest_waits_only_for_the_heads_of_its_head_window() {
    let dt = Duration::from_millis(10);
    let w = cfg().head_window;
    let window_steps = (w.as_millis() / dt.as_millis()) as u32;
    // Due before a's rest: its head, the two heads that arrive each step until its
    // deadline, one window after it began; then its other frames (an OPEN's frame carries
    // less than a full one: five in all).
    let bound = 2 * window_steps + 8;
    let done = steps_to_finish_under_overload(w, dt, 10 * bound);
    assert!(done.is_some_and(|n| n <= bound), "{done:?} > {bound}");
    // Without the window (least attained service only) the newer heads kept passing it for
    // as long as they kept arriving.
    let unbounded = steps_to_finish_under_overload(crate::policy::MAX_PAGE_AGE, dt, 10 * bound);
    assert_eq!(unbounded, None);
}

#[test]
fn a_zero_head_window_is_strict_page_order() {
    let (mut s, lanes, _t) = edge_with_lanes(1, Policy::LeastOutstanding);
    s.cfg.head_window = Duration::ZERO;
    let lane = lanes[0];
    let a = s
        .open_aged(
            Kind::Http,
            "a:80",
            &[1u8; 50_000],
            true,
            Duration::from_millis(1),
        )
        .unwrap();
    let b = s.open(Kind::Http, "b:80", &[2u8; 50_000], true).unwrap();
    let sent = |s: &Session, id| s.stream(id).map_or(u64::MAX, |st| st.bytes_sent);
    let mut out = Vec::new();
    while sent(&s, a) < 50_000 {
        assert_eq!(
            sent(&s, b),
            0,
            "the newer page waits for all of the older one"
        );
        assert!(s.poll_transmit(lane, 1, &mut out) > 0);
    }
    while sent(&s, b) < 50_000 {
        assert!(s.poll_transmit(lane, 1, &mut out) > 0);
    }
}

/// Bytes of the reply direction the remote has framed for stream `id`.
fn reply_sent(p: &Pair, id: u64) -> u64 {
    p.remote.stream(id).map_or(u64::MAX, |s| s.bytes_sent)
}

#[test]
fn replies_of_an_older_page_go_first_whatever_their_stream_order() {
    let mut p = Pair::with(tuned(), tuned());
    // A page that began just now, then a request of a page that began earlier, within the
    // head window.
    let age = tuned().head_window / 2;
    let new = p.edge.open(Kind::Http, "a:80", b"GET /new", true).unwrap();
    let old = p
        .edge
        .open_aged(Kind::Http, "b:80", b"GET /old", true, age)
        .unwrap();
    assert!(new < old);
    p.shuttle();
    // The OPENs went in id order (ids increase on a lane) though the newer page's is first.
    let ev = p.remote_events();
    assert!(
        ev.iter()
            .all(|e| !matches!(e, Event::ConnectionClosing { .. })),
        "{ev:?}"
    );
    for id in [new, old] {
        read_all(&mut p.remote, id);
        assert_eq!(p.remote.send(id, &[7u8; 60_000]).unwrap(), 60_000);
        p.remote.finish(id).unwrap();
    }
    let first = crate::policy::FIRST_BYTES;
    let mut out = Vec::new();
    while reply_sent(&p, old) < first {
        assert_eq!(reply_sent(&p, new), 0, "the newer page's first bytes wait");
        assert!(p.remote.poll_transmit(p.r, 1, &mut out) > 0);
    }
    let old_head = reply_sent(&p, old);
    while reply_sent(&p, new) < first {
        assert_eq!(
            reply_sent(&p, old),
            old_head,
            "the first bytes of both go first"
        );
        assert!(p.remote.poll_transmit(p.r, 1, &mut out) > 0);
    }
    let new_head = reply_sent(&p, new);
    while reply_sent(&p, old) < 60_000 {
        assert_eq!(reply_sent(&p, new), new_head, "the newer page's rest waits");
        assert!(p.remote.poll_transmit(p.r, 16 * 1024, &mut out) > 0);
    }
    while reply_sent(&p, new) < 60_000 {
        assert!(p.remote.poll_transmit(p.r, 16 * 1024, &mut out) > 0);
    }
}

#[test]
fn an_open_carries_its_page_age_only_to_a_peer_that_announced_it() {
    let t = Instant::now();
    let hello = |features| {
        let mut b = Vec::new();
        Hello {
            version: VERSION,
            role: Role::Remote,
            session: 9,
            max_frame_size: 16384,
            initial_window: 1 << 20,
            max_streams: 100,
            conn_window: Some(1 << 30),
            features,
        }
        .encode(&mut b);
        b
    };
    let mut edge = Session::new(Role::Edge, 9, cfg(), Policy::LeastOutstanding);
    let old = edge.add_connection(t);
    edge.handle_input(old, &hello(None), t);
    let id = edge
        .open_aged(Kind::Http, "a:80", b"x", true, Duration::from_millis(1500))
        .unwrap();
    let opened = |edge: &mut Session, lane| {
        let mut out = Vec::new();
        edge.poll_transmit(lane, usize::MAX, &mut out);
        let mut buf = BytesMut::from(&out[..]);
        std::iter::from_fn(|| {
            crate::frame::Frame::decode(&mut buf, 1 << 16)
                .ok()
                .flatten()
        })
        .find_map(|f| match f {
            crate::frame::Frame::Open(o) => Some(o),
            _ => None,
        })
        .expect("an OPEN")
    };
    // Its HELLO (this edge's own) goes first on the lane; then the OPEN, without an age.
    let o = opened(&mut edge, old);
    assert_eq!((o.stream, o.age_ms), (id, None));
    let mut edge = Session::new(Role::Edge, 9, cfg(), Policy::LeastOutstanding);
    let new = edge.add_connection(t);
    edge.handle_input(new, &hello(Some(Features::PAGE_AGE)), t);
    edge.open_aged(Kind::Http, "a:80", b"x", true, Duration::from_millis(1500))
        .unwrap();
    assert_eq!(opened(&mut edge, new).age_ms, Some(1500));
}

#[test]
fn a_page_age_beyond_the_maximum_ranks_as_the_maximum() {
    let mut p = Pair::with(tuned(), tuned());
    let cap = crate::policy::MAX_PAGE_AGE;
    // Raw OPENs: stream 1 claims the maximum, stream 2 ten times it; both rank at the
    // maximum, so stream order decides.
    let mut b = Vec::new();
    let ms = cap.as_millis() as u64;
    Open::encode_parts(&mut b, 1, Kind::Http, "a:80", b"", true, Some(ms));
    Open::encode_parts(&mut b, 2, Kind::Http, "b:80", b"", true, Some(10 * ms));
    p.feed_remote(&b);
    p.remote_events();
    for id in [1, 2] {
        assert_eq!(p.remote.send(id, &[1u8; 40_000]).unwrap(), 40_000);
    }
    let first = crate::policy::FIRST_BYTES;
    let mut out = Vec::new();
    while reply_sent(&p, 1) < first {
        assert_eq!(reply_sent(&p, 2), 0, "no stream outranks the maximum");
        assert!(p.remote.poll_transmit(p.r, 1, &mut out) > 0);
    }
    while reply_sent(&p, 1) < 40_000 {
        assert!(
            reply_sent(&p, 2) <= first,
            "no stream's rest outranks the maximum"
        );
        assert!(p.remote.poll_transmit(p.r, 16 * 1024, &mut out) > 0);
    }
}

#[test]
fn a_lane_with_only_bulk_bytes_unacknowledged_is_bulk_while_another_carries_a_page() {
    let (mut s, lanes, t) = edge_with_lanes(2, Policy::LeastOutstanding);
    let a = bulk_stream(&mut s, lanes[0], t);
    assert_eq!(s.stream(a).unwrap().send_conn, Some(lanes[0]));
    // Its first megabyte went out as interactive bytes; none is acknowledged yet.
    s.set_kernel_outstanding(lanes[0], 2 << 20);
    assert!(!s.lane_is_bulk(lanes[0]));
    assert_eq!(s.interactive_lanes(), 1);
    // Acknowledged; what it sends from now on is bulk. The lane stays busy: its kernel
    // queue never empties, only the interactive bytes in it are acknowledged.
    s.set_kernel_outstanding(lanes[0], 0);
    assert_eq!(s.interactive_lanes(), 0);
    let mut out = Vec::new();
    s.poll_transmit(lanes[0], 64 * 1024, &mut out);
    s.set_kernel_outstanding(lanes[0], 64 * 1024);
    assert!(s.lane_is_bulk(lanes[0]));
    assert_eq!(s.interactive_lanes(), 0, "nothing to yield to");
    // A page's stream on the other lane.
    let b = s.open(Kind::Http, "b:80", &[2u8; 10_000], true).unwrap();
    assert_eq!(s.stream(b).unwrap().send_conn, Some(lanes[1]));
    s.poll_transmit(lanes[1], 64 * 1024, &mut out);
    s.set_kernel_outstanding(lanes[1], 10_000);
    assert_eq!(s.interactive_lanes(), 1);
    assert!(s.lane_is_bulk(lanes[0]) && !s.lane_is_bulk(lanes[1]));
    // The page's bytes are acknowledged: nothing holds the download back any more.
    s.set_kernel_outstanding(lanes[1], 0);
    assert_eq!(s.interactive_lanes(), 0);
    // The page's next stream goes to the lane without a download, however long its queue:
    // the download's lane is held back while pages load, though by its window left it
    // looks the best place (`Policy::choose`).
    s.set_kernel_outstanding(lanes[1], 100 << 20);
    let c = s.open(Kind::Http, "c:80", &[3u8; 100], true).unwrap();
    assert_eq!(s.stream(c).unwrap().send_conn, Some(lanes[1]));
    assert!(s.lane_is_bulk(lanes[0]));
}

#[test]
fn an_interactive_stream_queued_on_a_download_lane_makes_it_interactive() {
    let (mut s, lanes, t) = edge_with_lanes(1, Policy::LeastOutstanding);
    bulk_stream(&mut s, lanes[0], t);
    s.set_kernel_outstanding(lanes[0], 0);
    let mut out = Vec::new();
    s.poll_transmit(lanes[0], 64 * 1024, &mut out);
    s.set_kernel_outstanding(lanes[0], 64 * 1024);
    assert!(s.lane_is_bulk(lanes[0]));
    // The only lane carries the download: a page's stream goes there, and the lane is not
    // held back while it waits.
    let c = s.open(Kind::Http, "c:80", &[3u8; 100], true).unwrap();
    assert_eq!(s.stream(c).unwrap().send_conn, Some(lanes[0]));
    assert!(!s.lane_is_bulk(lanes[0]));
}
