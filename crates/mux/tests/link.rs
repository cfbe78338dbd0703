//! Design tests over a deterministic virtual-time link model.
//!
//! Two sessions (edge, remote) are joined by N lanes. Each lane direction has a
//! "kernel" send queue: the driver model moves frames from the session into it
//! while fewer than `LOWAT` bytes are unsent (as `TCP_NOTSENT_LOWAT` does) and
//! reports unsent + unacknowledged bytes (as `SIOCOUTQ` does). The link
//! serializes the lanes' unsent bytes at a shared rate (fair per lane, one MSS
//! at a time), delivers them after the one-way delay, and acknowledges them one
//! more delay later. No congestion window: a rate model, which is enough to
//! show how the scheduler and flow control behave. Time advances in 1 ms ticks.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::{Duration, Instant};

use mux::{Config, ConnId, ErrorCode, Event, Kind, Policy, Read, Role, Session};

const TICK: Duration = Duration::from_millis(1);
const MSS: usize = 1448;
const LOWAT: usize = 128 * 1024;

/// One direction of one lane.
#[derive(Default)]
struct Pipe {
    /// Written, not yet on the wire.
    unsent: VecDeque<u8>,
    /// On the wire: (arrival tick, bytes).
    flight: VecDeque<(u64, Vec<u8>)>,
    /// Sent, not acknowledged: (ack tick, bytes).
    unacked: VecDeque<(u64, usize)>,
    unacked_bytes: usize,
}

struct Lane {
    edge: ConnId,
    remote: ConnId,
    /// [0] edge -> remote, [1] remote -> edge.
    pipes: [Pipe; 2],
    alive: bool,
}

/// What the remote application does with a stream: reply with `size` bytes
/// starting at tick `start` (the target string is `reply:<size>:<delay_ms>`).
struct Reply {
    remaining: u64,
    start: u64,
    fed: u64,
}

#[derive(Debug, Clone, Default)]
struct EdgeStream {
    received: u64,
    done_at: Option<u64>,
    reset: Option<(ErrorCode, bool)>,
}

struct World {
    base: Instant,
    tick: u64,
    delay_ticks: u64,
    /// Link rate in bytes per tick, per direction.
    rate: usize,
    edge: Session,
    remote: Session,
    lanes: Vec<Lane>,
    replies: BTreeMap<u64, Reply>,
    streams: BTreeMap<u64, EdgeStream>,
    /// Edge streams whose reader has stopped.
    stalled: Vec<u64>,
    /// Edge streams whose reader reads at most `rate` bytes per tick: (budget, rate).
    slow: BTreeMap<u64, (usize, usize)>,
    edge_events: Vec<Event>,
    remote_events: Vec<Event>,
    rr: usize,
}

impl World {
    fn new(lanes: usize, edge_policy: Policy, remote_policy: Policy) -> World {
        World::with_config(lanes, edge_policy, remote_policy, pacific())
    }

    fn with_config(lanes: usize, edge_policy: Policy, remote_policy: Policy, cfg: Config) -> World {
        let base = Instant::now();
        let mut w = World {
            base,
            tick: 0,
            delay_ticks: 65,
            rate: 100_000_000 / 8 / 1000,
            edge: Session::new(Role::Edge, 77, cfg.clone(), edge_policy),
            remote: Session::new(Role::Remote, 77, cfg, remote_policy),
            lanes: Vec::new(),
            replies: BTreeMap::new(),
            streams: BTreeMap::new(),
            stalled: Vec::new(),
            slow: BTreeMap::new(),
            edge_events: Vec::new(),
            remote_events: Vec::new(),
            rr: 0,
        };
        for _ in 0..lanes {
            w.add_lane();
        }
        // Let the HELLOs cross.
        w.run_until(
            |w| w.edge.up_connections() == lanes && w.remote.up_connections() == lanes,
            1000,
        );
        w
    }

    fn now(&self) -> Instant {
        self.base + TICK * self.tick as u32
    }

    fn add_lane(&mut self) -> usize {
        let now = self.now();
        let edge = self.edge.add_connection(now);
        let remote = self.remote.add_connection(now);
        self.lanes.push(Lane {
            edge,
            remote,
            pipes: [Pipe::default(), Pipe::default()],
            alive: true,
        });
        self.lanes.len() - 1
    }

    fn lane_of_edge(&self, c: ConnId) -> Option<usize> {
        self.lanes.iter().position(|l| l.alive && l.edge == c)
    }

    /// The transport of lane `i` dies; both sides notice.
    fn kill_lane(&mut self, i: usize) {
        let now = self.now();
        let l = &mut self.lanes[i];
        l.alive = false;
        l.pipes = [Pipe::default(), Pipe::default()];
        let (e, r) = (l.edge, l.remote);
        self.edge.connection_lost(e, now);
        self.remote.connection_lost(r, now);
    }

    /// Appends raw bytes to the edge -> remote kernel queue of lane `i`, at a
    /// frame boundary (what a misbehaving edge would write).
    fn inject_from_edge(&mut self, i: usize, bytes: &[u8]) {
        self.pump();
        self.lanes[i].pipes[0].unsent.extend(bytes);
    }

    fn open(&mut self, size: u64, delay_ms: u64) -> u64 {
        let id = self
            .edge
            .open(
                Kind::Http,
                &format!("reply:{size}:{delay_ms}"),
                b"GET / HTTP/1.1\r\n\r\n",
                true,
            )
            .expect("open");
        self.streams.insert(id, EdgeStream::default());
        id
    }

    fn pump(&mut self) {
        let mut buf = Vec::new();
        for l in self.lanes.iter_mut().filter(|l| l.alive) {
            for (dir, (s, c)) in [(&mut self.edge, l.edge), (&mut self.remote, l.remote)]
                .into_iter()
                .enumerate()
            {
                let p = &mut l.pipes[dir];
                while p.unsent.len() < LOWAT {
                    buf.clear();
                    if s.poll_transmit(c, LOWAT - p.unsent.len(), &mut buf) == 0 {
                        break;
                    }
                    p.unsent.extend(&buf);
                }
                s.set_kernel_outstanding(c, (p.unsent.len() + p.unacked_bytes) as u64);
            }
        }
    }

    fn step(&mut self) {
        let now = self.now();
        for s in [&mut self.edge, &mut self.remote] {
            if s.poll_timeout().is_some_and(|t| t <= now) {
                s.handle_timeout(now);
            }
        }
        self.apps();
        self.pump();
        // Serialize onto the link: fair share per lane, MSS at a time.
        let tick = self.tick;
        for dir in 0..2 {
            let mut budget = self.rate;
            let n = self.lanes.len();
            let mut idle_rounds = 0;
            while budget > 0 && idle_rounds < n {
                let i = self.rr % n;
                self.rr += 1;
                let alive = self.lanes[i].alive;
                let p = &mut self.lanes[i].pipes[dir];
                if !alive || p.unsent.is_empty() {
                    idle_rounds += 1;
                    continue;
                }
                idle_rounds = 0;
                let k = p.unsent.len().min(MSS).min(budget);
                budget -= k;
                let seg: Vec<u8> = p.unsent.drain(..k).collect();
                p.flight.push_back((tick + self.delay_ticks, seg));
                p.unacked.push_back((tick + 2 * self.delay_ticks, k));
                p.unacked_bytes += k;
            }
        }
        // Deliver and acknowledge what is due.
        for i in 0..self.lanes.len() {
            for dir in 0..2 {
                loop {
                    let l = &mut self.lanes[i];
                    if !l.alive {
                        break;
                    }
                    let p = &mut l.pipes[dir];
                    while p.unacked.front().is_some_and(|(t, _)| *t <= tick) {
                        let (_, k) = p.unacked.pop_front().unwrap();
                        p.unacked_bytes -= k;
                    }
                    if p.flight.front().is_none_or(|(t, _)| *t > tick) {
                        break;
                    }
                    let (_, seg) = p.flight.pop_front().unwrap();
                    let (e, r) = (l.edge, l.remote);
                    if dir == 0 {
                        self.remote.handle_input(r, &seg, now);
                    } else {
                        self.edge.handle_input(e, &seg, now);
                    }
                }
            }
        }
        // A lane whose side asked to close (after its GOAWAY left) goes away.
        for i in 0..self.lanes.len() {
            let l = &self.lanes[i];
            if l.alive
                && l.pipes
                    .iter()
                    .all(|p| p.unsent.is_empty() && p.flight.is_empty())
                && (self.edge.wants_close(l.edge) || self.remote.wants_close(l.remote))
            {
                self.kill_lane(i);
            }
        }
        self.tick += 1;
    }

    /// The applications: the remote replies, the edge reads (unless stalled).
    fn apps(&mut self) {
        let mut buf = vec![0u8; 64 * 1024];
        while let Some(ev) = self.remote.poll_event() {
            if let Event::Incoming { id, target, .. } = &ev {
                let mut parts = target.split(':').skip(1);
                let size = parts.next().unwrap().parse().unwrap();
                let delay: u64 = parts.next().unwrap().parse().unwrap();
                self.replies.insert(
                    *id,
                    Reply {
                        remaining: size,
                        start: self.tick + delay,
                        fed: 0,
                    },
                );
            }
            if let Event::Reset { id, .. } = &ev {
                // The remote application gives up a reset stream at once.
                if self.replies.remove(id).is_some() {
                    self.remote.release(*id);
                }
            }
            self.remote_events.push(ev);
        }
        let ids: Vec<u64> = self.replies.keys().copied().collect();
        for id in ids {
            // Drain the request.
            while let Ok(Read::Data(_)) = self.remote.read(id, &mut buf) {}
            let r = self.replies.get_mut(&id).unwrap();
            if self.tick < r.start {
                continue;
            }
            let mut failed = false;
            while r.remaining > 0 {
                let k = (r.remaining as usize).min(buf.len());
                match self.remote.send(id, &buf[..k]) {
                    Ok(0) => break,
                    Ok(n) => {
                        r.remaining -= n as u64;
                        r.fed += n as u64;
                    }
                    Err(_) => {
                        failed = true;
                        break;
                    }
                }
            }
            if failed || r.remaining == 0 {
                if !failed {
                    let _ = self.remote.finish(id);
                }
                self.remote.release(id);
                self.replies.remove(&id);
            }
        }
        while let Some(ev) = self.edge.poll_event() {
            if let Event::Reset {
                id,
                code,
                retryable,
            } = ev
            {
                if let Some(s) = self.streams.get_mut(&id) {
                    s.reset = Some((code, retryable));
                    s.received = self.edge.bytes_received(id);
                }
            }
            self.edge_events.push(ev);
        }
        let ids: Vec<u64> = self.streams.keys().copied().collect();
        for id in ids {
            let st = self.streams.get_mut(&id).unwrap();
            if st.done_at.is_some() || st.reset.is_some() || self.stalled.contains(&id) {
                continue;
            }
            // A rate-limited reader: what it did not read in a tick is lost beyond a 10 ms burst.
            let mut budget = self.slow.get_mut(&id).map(|(b, rate)| {
                *b = (*b + *rate).min(*rate * 10);
                b
            });
            loop {
                let max = budget.as_deref().map_or(buf.len(), |b| (*b).min(buf.len()));
                if max == 0 {
                    break;
                }
                match self.edge.read(id, &mut buf[..max]) {
                    Ok(Read::Data(n)) => {
                        st.received += n as u64;
                        if let Some(b) = budget.as_deref_mut() {
                            *b -= n;
                        }
                    }
                    Ok(Read::Fin) => {
                        st.done_at = Some(self.tick);
                        self.edge.release(id);
                        break;
                    }
                    Ok(Read::Blocked) => break,
                    Err(_) => break,
                }
            }
        }
    }

    fn run_until(&mut self, mut cond: impl FnMut(&World) -> bool, max_ticks: u64) {
        let end = self.tick + max_ticks;
        while !cond(self) {
            assert!(self.tick < end, "condition not reached by tick {end}");
            self.step();
        }
    }

    fn run_for(&mut self, ticks: u64) {
        for _ in 0..ticks {
            self.step();
        }
    }

    fn done(&self, id: u64) -> bool {
        let s = &self.streams[&id];
        s.done_at.is_some() || s.reset.is_some()
    }

    /// Lane the edge receives stream `id`'s reply on.
    fn reply_lane(&self, id: u64) -> Option<usize> {
        self.edge
            .stream(id)?
            .recv_conn
            .and_then(|c| self.lane_of_edge(c))
    }
}

/// The defaults on the modelled link (130 ms, 100 Mbit/s): stream windows start at up to
/// 4 × BDP = 6.5 MB while the session commits less than 32 MiB, at 256 KiB beyond, and grow
/// to 6.5 MB.
fn pacific() -> Config {
    Config::for_link(Duration::from_millis(130), 100_000_000)
}

/// [`pacific`] with every stream starting at the 256 KiB floor, as streams do once the
/// session's starting-window budget is used: the autotuning tests see windows grow from it.
fn growing() -> Config {
    Config {
        initial_window_budget: 0,
        ..pacific()
    }
}

/// [`pacific`] with every stream window at its maximum from the start (no autotuning).
fn fixed_windows() -> Config {
    let c = pacific();
    Config {
        initial_stream_window: c.stream_window,
        ..c
    }
}

/// (a) two concurrent large replies land on different lanes; a small reply
/// issued behind them goes to the least-loaded lane and finishes sooner than
/// the round-robin baseline would let it. Fixed windows: the large replies load their lanes
/// from the start, as they do once their windows have grown.
#[test]
fn large_replies_spread_and_small_reply_takes_least_loaded_lane() {
    let run = |policy: Policy| {
        let mut w = World::with_config(2, policy, policy, fixed_windows());
        let big = w.open(6_000_000, 0);
        let medium = w.open(1_000_000, 0);
        // Their lanes, as their first bytes arrive (the medium one may be done by tick 100).
        w.run_until(
            |w| w.reply_lane(big).is_some() && w.reply_lane(medium).is_some(),
            500,
        );
        let (big_lane, medium_lane) = (w.reply_lane(big), w.reply_lane(medium));
        w.run_until(|w| w.tick >= 100, 500);
        let small = w.open(20_000, 0);
        let t0 = w.tick;
        w.run_until(|w| w.reply_lane(small).is_some(), 500);
        let lanes = (big_lane, medium_lane, w.reply_lane(small));
        w.run_until(|w| w.done(small), 5000);
        let small_time = w.streams[&small].done_at.unwrap() - t0;
        w.run_until(|w| w.done(big) && w.done(medium), 20_000);
        assert_eq!(w.streams[&big].received, 6_000_000);
        assert_eq!(w.streams[&medium].received, 1_000_000);
        assert_eq!(w.streams[&small].received, 20_000);
        (lanes, small_time)
    };
    let ((big, medium, small), lo_time) = run(Policy::LeastOutstanding);
    assert_ne!(big, medium, "the two large replies share a lane");
    assert_eq!(small, medium, "small reply not on the least-loaded lane");
    let ((rr_big, _, rr_small), rr_time) = run(Policy::RoundRobin);
    assert_eq!(
        rr_small, rr_big,
        "round robin puts the small reply behind the big one"
    );
    assert!(
        lo_time < rr_time,
        "least-outstanding {lo_time} ms vs round-robin {rr_time} ms"
    );
}

/// (b) a stream whose reader stops does not slow the other stream on its
/// connection, and its buffered bytes stay within its window, which never grows.
#[test]
fn stalled_reader_does_not_slow_its_connection() {
    let window = u64::from(pacific().initial_stream_window);
    let mut w = World::with_config(
        1,
        Policy::LeastOutstanding,
        Policy::LeastOutstanding,
        growing(),
    );
    let stalled = w.open(20_000_000, 0);
    w.stalled.push(stalled);
    let other = w.open(12_000_000, 0);
    let mut got_at = Vec::new();
    while !w.done(other) {
        w.step();
        let e = w.edge.stream(stalled).unwrap();
        assert_eq!(e.recv_window, window, "a stalled reader's window grew");
        assert!(
            e.recv_buffered <= window,
            "edge buffers {} > window",
            e.recv_buffered
        );
        if let Some(r) = w.remote.stream(stalled) {
            assert!(
                r.send_buffered <= window,
                "remote buffers {}",
                r.send_buffered
            );
        }
        got_at.push(w.streams[&other].received);
        assert!(w.tick < 10_000);
    }
    // The stalled stream got exactly its initial window and no more: it never grew.
    assert_eq!(w.edge.stream(stalled).unwrap().bytes_received, window);
    // Once the stalled stream's window is used up and the other's has grown, the other
    // stream gets the whole link: over the 100 ms before its last 50 ms it receives at least
    // 95% of rate x 100 ms.
    let per_100ms = (w.rate * 100) as u64;
    let n = got_at.len();
    let (a, b) = (n - 150, n - 50);
    let delta = got_at[b] - got_at[a];
    assert!(
        delta * 100 >= per_100ms * 95,
        "other stream got {delta} bytes in 100 ms, link carries {per_100ms}"
    );
    assert_eq!(w.streams[&other].received, 12_000_000);
}

/// (c) losing one lane resets exactly the streams bound to it, retryable when
/// no reply byte arrived; the others complete.
#[test]
fn losing_a_lane_resets_exactly_its_streams() {
    let mut w = World::new(3, Policy::RoundRobin, Policy::RoundRobin);
    let mut ids = Vec::new();
    for k in 0..6u64 {
        // Stream 5 replies late: nothing of it arrives before the loss.
        let delay = if k == 4 { 2000 } else { 0 };
        ids.push(w.open(3_000_000 + k * 1000, delay));
    }
    w.run_for(200);
    let victim = 1;
    let (victim_edge, victim_remote) = (w.lanes[victim].edge, w.lanes[victim].remote);
    // A direction is bound to the lane in the view of the side that sends it: a reply the
    // remote bound there of which nothing arrived yet is known to the edge only by the
    // remote's RESET.
    let bound: HashMap<u64, bool> = ids
        .iter()
        .map(|id| {
            let s = w.edge.stream(*id).unwrap();
            let r = w.remote.stream(*id);
            (
                *id,
                s.send_conn == Some(victim_edge)
                    || s.recv_conn == Some(victim_edge)
                    || r.is_some_and(|r| r.send_conn == Some(victim_remote)),
            )
        })
        .collect();
    let received_before: HashMap<u64, u64> = ids
        .iter()
        .map(|id| (*id, w.edge.bytes_received(*id)))
        .collect();
    assert!(bound.values().any(|b| *b) && bound.values().any(|b| !*b));
    w.kill_lane(victim);
    w.run_until(|w| ids.iter().all(|id| w.done(*id)), 20_000);
    let mut retryable = 0;
    let mut not_retryable = 0;
    for id in &ids {
        let s = &w.streams[id];
        if bound[id] {
            let (code, retry) = s.reset.expect("stream on the lost lane was not reset");
            assert_eq!(code, ErrorCode::CONNECTION_LOST);
            assert_eq!(retry, received_before[id] == 0, "stream {id}");
            if retry {
                retryable += 1;
            } else {
                not_retryable += 1;
            }
        } else {
            assert!(
                s.reset.is_none(),
                "stream {id} not on the lost lane was reset"
            );
            assert_eq!(s.received, 3_000_000 + (id - 1) * 1000);
        }
    }
    assert!(
        retryable >= 1 && not_retryable >= 1,
        "{retryable} / {not_retryable}"
    );
    // The remote forgot them too, and the session carries on with new streams.
    w.run_for(300);
    assert_eq!(w.remote.stream_count(), 0);
    let late = w.open(50_000, 0);
    w.run_until(|w| w.done(late), 2000);
    assert_eq!(w.streams[&late].received, 50_000);
}

fn bad_frame_closes_only_its_lane(bytes: &[u8], code: ErrorCode) {
    let mut w = World::new(2, Policy::RoundRobin, Policy::RoundRobin);
    let a = w.open(2_000_000, 0); // lane 0
    let b = w.open(2_000_000, 0); // lane 1
    w.run_for(150);
    w.inject_from_edge(0, bytes);
    w.run_until(|w| w.done(a) && w.done(b), 10_000);
    // The remote closed lane 0 with the code, and told the edge in its GOAWAY.
    assert!(w.remote_events.iter().any(|e| matches!(e,
        Event::ConnectionClosing { code: c, .. } if *c == code)));
    assert!(w.edge_events.iter().any(|e| matches!(e,
        Event::ConnectionClosing { code: c, reason, .. } if *c == code && reason.starts_with("peer closed"))));
    assert!(!w.lanes[0].alive);
    assert!(w.lanes[1].alive);
    assert_eq!(
        w.streams[&a].reset.map(|r| r.0),
        Some(ErrorCode::CONNECTION_LOST)
    );
    assert!(w.streams[&b].reset.is_none());
    assert_eq!(w.streams[&b].received, 2_000_000);
    assert_eq!(w.edge.up_connections(), 1);
}

/// (d) a malformed frame closes only its connection, with PROTOCOL_ERROR.
#[test]
fn malformed_frame_closes_only_its_connection() {
    // A DATA frame on stream 0.
    bad_frame_closes_only_its_lane(&[0x3, 0, 0, 1, 0, 0xff], ErrorCode::PROTOCOL_ERROR);
}

/// (d) an oversized frame closes only its connection, with FRAME_SIZE_ERROR.
#[test]
fn oversized_frame_closes_only_its_connection() {
    // DATA of 60 000 bytes announced on stream 1 (max is 16 384).
    bad_frame_closes_only_its_lane(&[0x3, 0, 0xea, 0x60, 1], ErrorCode::FRAME_SIZE_ERROR);
}

/// PINGs measure the round trip of each lane.
#[test]
fn pings_measure_rtt() {
    let mut w = World::new(2, Policy::LeastOutstanding, Policy::LeastOutstanding);
    w.run_for(300);
    for c in w.edge.connections() {
        let rtt = c.rtt.expect("rtt measured");
        assert!(
            rtt >= Duration::from_millis(130) && rtt <= Duration::from_millis(133),
            "{rtt:?}"
        );
    }
}

/// Runs until the edge has measured the lane's round trip (a pool connection that has been up
/// for a round trip; before that, windows do not grow).
fn wait_for_rtt(w: &mut World) {
    w.run_until(
        |w| w.edge.connections().iter().all(|c| c.rtt.is_some()),
        1000,
    );
}

/// Receive-window autotuning, a reader that keeps up: from 256 KiB the window doubles about
/// once per round trip and the stream carries the link's rate (at least 90 % of it in every
/// round trip) from the 6th round trip after the open on: one round trip for the request and
/// the first byte, then 256 KiB, 512 KiB, 1 MiB, 2 MiB (above the 1.625 MB BDP) per round trip.
/// The window ends at its maximum, 4 × BDP.
#[test]
fn a_fast_reader_reaches_line_rate_within_six_round_trips() {
    let mut w = World::with_config(
        1,
        Policy::LeastOutstanding,
        Policy::LeastOutstanding,
        growing(),
    );
    wait_for_rtt(&mut w);
    let rtt = 2 * w.delay_ticks;
    let id = w.open(40_000_000, 0);
    let per_rtt = (w.rate as u64) * rtt;
    let mut got = Vec::new();
    let mut last = 0;
    while got.len() < 20 {
        w.run_for(rtt);
        got.push(w.streams[&id].received - last);
        last = w.streams[&id].received;
    }
    let first = got
        .iter()
        .position(|&g| g * 10 >= per_rtt * 9)
        .expect("never at line rate");
    assert!(
        first < 6,
        "line rate first in round trip {} (per round trip: {got:?})",
        first + 1
    );
    assert!(
        got[first..].iter().all(|&g| g * 10 >= per_rtt * 9),
        "fell below line rate: {got:?}"
    );
    assert_eq!(
        w.edge.stream(id).unwrap().recv_window,
        u64::from(pacific().stream_window)
    );
}

/// Receive-window autotuning, readers that do not keep up: K = 20 replies read at 2 Mbit/s
/// each (250 kB/s, under a quarter of 256 KiB per round trip) never grow their windows, so the
/// edge buffers at most K × 256 KiB (5.2 MB) for them, not K × 6.5 MB; and a reader at
/// 16 Mbit/s (2 MB/s) grows only to what it drains: at least 4 × its rate × RTT (1.04 MB), at
/// most twice that, below the maximum.
#[test]
fn slow_readers_hold_their_initial_window_and_a_moderate_one_what_it_drains() {
    const K: usize = 20;
    let initial = u64::from(pacific().initial_stream_window);
    let mut w = World::with_config(
        2,
        Policy::LeastOutstanding,
        Policy::LeastOutstanding,
        growing(),
    );
    wait_for_rtt(&mut w);
    let slow: Vec<u64> = (0..K).map(|_| w.open(4_000_000, 0)).collect();
    for &id in &slow {
        w.slow.insert(id, (0, 250));
    }
    let moderate = w.open(40_000_000, 0);
    w.slow.insert(moderate, (0, 2_000));
    for _ in 0..3000 {
        w.step();
        let held: u64 = slow
            .iter()
            .map(|&id| w.edge.stream(id).unwrap().recv_buffered)
            .sum();
        assert!(
            held <= K as u64 * initial,
            "{K} slow readers buffer {held} bytes"
        );
    }
    let got: Vec<u64> = slow.iter().map(|id| w.streams[id].received).collect();
    for &id in &slow {
        let s = w.edge.stream(id).unwrap();
        assert_eq!(s.recv_window, initial, "a slow reader's window grew");
        // 3 s at 250 kB/s less the first round trip and, for the last of them, the first
        // windows sent before its own in stream order (20 × 256 KiB at 100 Mbit/s, 0.42 s):
        // 610 kB for the newest to 720 kB for the oldest.
        assert!(
            w.streams[&id].received >= 600_000,
            "slow reader {id} starved: {got:?}"
        );
    }
    let rtt_s = 2.0 * w.delay_ticks as f64 / 1000.0;
    let rate = 2_000_000.0;
    let win = w.edge.stream(moderate).unwrap().recv_window as f64;
    assert!(
        win >= 4.0 * rate * rtt_s && win <= 8.0 * rate * rtt_s,
        "moderate reader's window {win}"
    );
    assert!(win < f64::from(pacific().stream_window));
}

/// Starting windows, the latency they save: on an idle session a 1 MB reply is not held by its
/// stream window and arrives one round trip plus its transfer time after the open (130 ms +
/// 80 ms at 100 Mbit/s, a few ms of framing and queueing aside); from the 256 KiB floor it
/// takes more than one and a half round trips more (216 ms in this model), while the window
/// grows (256 KiB, 512 KiB, then the rest).
#[test]
fn a_1mb_reply_on_an_idle_session_takes_one_round_trip_plus_its_transfer() {
    let fetch = |cfg: Config| {
        let mut w = World::with_config(1, Policy::LeastOutstanding, Policy::LeastOutstanding, cfg);
        wait_for_rtt(&mut w);
        w.run_for(500);
        let t0 = w.tick;
        let id = w.open(1_000_000, 0);
        w.run_until(|w| w.done(id), 5000);
        assert_eq!(w.streams[&id].received, 1_000_000);
        w.streams[&id].done_at.unwrap() - t0
    };
    let rtt = 130;
    let transfer = 1_000_000 * 8 / 100_000; // ms at 100 Mbit/s
    let started = fetch(pacific());
    assert!(
        started >= rtt + transfer && started <= rtt + transfer + 15,
        "1 MB in {started} ms"
    );
    let floor = fetch(growing());
    assert!(
        floor >= started + 3 * rtt / 2,
        "from the floor {floor} ms, started at the maximum {started} ms"
    );
}

/// Starting windows, the memory they may hold: K = 200 replies of 8 MB opened one after
/// another on an idle two-lane session, whose readers never read, commit and buffer at most the
/// 32 MiB budget + K × 256 KiB at the edge (84 MB, against 1.3 GB were every stream to start
/// at the maximum); the first ones start at the maximum (and fill it), the rest at the floor,
/// and a reader that keeps up beside them still gets its replies.
#[test]
fn stalled_readers_opened_one_after_another_stay_within_the_budget_plus_a_floor_each() {
    const K: usize = 200;
    let c = pacific();
    let (floor, max) = (u64::from(c.initial_window()), u64::from(c.stream_window));
    let bound = c.initial_window_budget + K as u64 * floor;
    let mut w = World::new(2, Policy::LeastOutstanding, Policy::LeastOutstanding);
    wait_for_rtt(&mut w);
    let mut stalled = Vec::new();
    for _ in 0..K {
        let id = w.open(8_000_000, 0);
        w.stalled.push(id);
        stalled.push(id);
        w.run_for(5);
        let committed: u64 = stalled
            .iter()
            .map(|&id| w.edge.stream(id).unwrap().recv_window)
            .sum();
        assert!(
            committed <= bound,
            "{} streams commit {committed}",
            stalled.len()
        );
    }
    // Until every granted byte arrived (84 MB at 100 Mbit/s), checking the bound on the way.
    let total = |w: &World| -> (u64, u64) {
        stalled.iter().fold((0, 0), |(b, win), &id| {
            let s = w.edge.stream(id).unwrap();
            (b + s.recv_buffered, win + s.recv_window)
        })
    };
    while total(&w).0 < total(&w).1 {
        w.step();
        assert!(total(&w).0 <= bound);
        assert!(w.tick < 20_000, "granted bytes never arrived");
    }
    let buffered: u64 = stalled
        .iter()
        .map(|&id| w.edge.stream(id).unwrap().recv_buffered)
        .sum();
    assert!(
        buffered <= bound,
        "{K} stalled readers buffer {buffered} > {bound}"
    );
    let windows: Vec<u64> = stalled
        .iter()
        .map(|&id| w.edge.stream(id).unwrap().recv_window)
        .collect();
    let at_max = (c.initial_window_budget / max) as usize;
    assert!(windows[..at_max].iter().all(|&w| w == max), "{windows:?}");
    assert!(
        windows[at_max + 1..].iter().all(|&w| w == floor),
        "{windows:?}"
    );
    assert_eq!(
        buffered,
        windows.iter().sum::<u64>(),
        "every granted byte was sent"
    );
    let other = w.open(2_000_000, 0);
    w.run_until(|w| w.done(other), 5000);
    assert_eq!(w.streams[&other].received, 2_000_000);
}

/// Under load a newer page's small reply does not wait for an older page's large ones
/// (`mux::policy::Tier`: every direction's first 16 KiB go before any direction's later
/// bytes), and the older page still finishes at line rate. One lane at 100 Mbit/s: an older
/// page asks for four 1 MB replies (each with a starting window of all of it); 100 ms later,
/// with about 3.5 MB of them still queued in the remote, a newer page asks for 10 kB. Its reply arrives about one round trip (130 ms)
/// after the request plus the kernel's unsent bytes (at most 128 KiB, 10.5 ms): 142 ms in this
/// model, where oldest page first alone sends it after the older page's bytes, at 352 ms. The
/// older page's last reply ends within the time the link takes for every byte.
#[test]
fn a_newer_pages_small_reply_passes_an_older_pages_large_ones() {
    let mut w = World::new(1, Policy::LeastOutstanding, Policy::LeastOutstanding);
    wait_for_rtt(&mut w);
    let opened = w.tick;
    let older: Vec<u64> = (0..4).map(|_| w.open(1_000_000, 0)).collect();
    w.run_for(100);
    let asked = w.tick;
    let small = w.open(10_000, 0);
    w.run_until(|w| w.done(small), 2000);
    assert_eq!(w.streams[&small].received, 10_000);
    let took = w.streams[&small].done_at.unwrap() - asked;
    assert!(took <= 130 + 11 + 10, "the small reply took {took} ms");
    let older_got: u64 = older.iter().map(|id| w.streams[id].received).sum();
    assert!(
        older_got < 2_000_000,
        "the small reply passed the older page's last 2 MB ({older_got} bytes were in)"
    );
    w.run_until(|w| older.iter().all(|&id| w.done(id)), 2000);
    let last = older
        .iter()
        .map(|id| w.streams[id].done_at.unwrap())
        .max()
        .unwrap();
    // One round trip, then 4.01 MB (with the small reply and framing) at 12.5 kB per ms.
    let line_rate = 130 + 4_010_000 / w.rate as u64;
    assert!(
        last - opened <= line_rate + 15,
        "the older page took {} ms (line rate {line_rate} ms)",
        last - opened
    );
}
