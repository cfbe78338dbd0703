//! The pool-wide sans-IO session (PROTOCOL.md §4, §5): owns every stream and
//! the N connection lanes that carry them.
//!
//! Inputs: [`Session::add_connection`], [`Session::handle_input`],
//! [`Session::connection_lost`], [`Session::set_kernel_outstanding`],
//! [`Session::set_congestion_window`], [`Session::set_path_estimate`],
//! [`Session::handle_timeout`] and the stream operations. Outputs:
//! [`Session::poll_transmit`], [`Session::poll_event`],
//! [`Session::poll_ready_conn`] and [`Session::poll_timeout`]. No I/O, no clock:
//! callers pass `now`.
//!
//! One type, as quinn-proto keeps one `Connection`: [`Session`] and its public
//! methods live here; its sub-states are split by concern, each an
//! `impl Session` block of its own (as h2 splits `proto/streams/`):
//!
//! - `events`: what the driver and application are told ([`Event`], the
//!   snapshots, the error types of the stream operations);
//! - `timers`: per-lane HELLO deadline, PING period and PONG deadline, RTT;
//! - `credit`: the one flow-control value type (`credit::Credit`) that
//!   streams and connections use for what they may send and what they grant,
//!   and the credit-return path (PROTOCOL.md §4.1, §4.2);
//! - `schedule`: binding directions to lanes by the [`Policy`] and framing
//!   streams round-robin into a lane's transmit buffer (§5.1);
//! - `recv`: dispatch of received frames (§3);
//! - `lifecycle`: resets, release, forgetting streams, closing lanes (§4.3, §5.4, §6).
//!
//! What it does NOT do: no sockets, no clock, no tokio; the driver (`pool`)
//! moves bytes and reports time.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fmt;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};

use crate::config::Config;
use crate::error::{ConnError, ErrorCode};
use crate::frame::{header_len, Features, Frame, GoAway, Hello, Kind, Role, VERSION};
use crate::policy::{Load, PathEstimate, Policy};
use crate::stream::Stream;
use credit::Credit;

pub(crate) mod credit;
mod events;
mod lifecycle;
mod recv;
mod schedule;
mod timers;

pub use events::{ConnSnapshot, Event, OpenError, Read, StreamError, StreamSnapshot};

/// Identifies one connection lane of a session (assigned by [`Session::add_connection`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnId(pub u64);

impl fmt::Display for ConnId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "conn#{}", self.0)
    }
}

/// Lifecycle of a connection lane.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnState {
    /// Our HELLO is queued or sent; the peer's has not arrived.
    Handshake,
    /// Both HELLOs exchanged: streams may be bound here.
    Up,
    /// A GOAWAY with an error is queued or was received: nothing new is bound
    /// here; the driver closes the transport once [`Session::wants_close`].
    Closing,
}

#[derive(Debug)]
struct Conn {
    state: ConnState,
    /// Received bytes not yet forming a whole frame; at most one maximum frame
    /// plus header (longer announced frames are rejected from the header).
    inbuf: BytesMut,
    /// Encoded control frames waiting for the driver; bounded by
    /// `Config::max_control_bytes`.
    ctrl: BytesMut,
    /// Streams bound here that have a frame to emit, served round-robin.
    sendq: VecDeque<u64>,
    /// Sum of `Stream::accounted` of the streams bound here.
    queued_streams: u64,
    /// Kernel send queue (unsent + unacknowledged) reported by the driver.
    kernel: u64,
    /// Congestion window in bytes reported by the driver; 0 if unknown.
    window: u64,
    /// Latest path estimate reported by the driver.
    path: Option<PathEstimate>,
    /// When the driver last reported a rate measured with bytes in flight and not
    /// app-limited (a fresh sample); the expected-completion policy treats older rates
    /// as lower bounds (`schedule::stale_after`).
    sampled_at: Option<Instant>,
    /// Streams with at least one direction bound here.
    streams: u32,
    /// Bytes handed to the driver on this lane (monotonic).
    emitted: u64,
    /// `emitted` right after the last frame of an interactive direction (below
    /// [`crate::policy::BULK_BYTES`] sent): until the peer has acknowledged that much (the
    /// driver's `kernel` says what is not), the lane carries interactive bytes.
    interactive_mark: u64,
    /// The same for bulk directions.
    bulk_mark: u64,
    /// Largest frame payload the peer accepts (from its HELLO).
    peer_max_frame: usize,
    /// Highest OPEN id received on this lane (OPEN ids increase per lane, §5.2).
    last_open: u64,
    /// HELLO deadline.
    handshake_deadline: Instant,
    /// Outstanding PING payload and when it was sent.
    ping: Option<(u64, Instant)>,
    /// When the next PING is due.
    next_ping: Instant,
    /// Last measured PING round trip.
    rtt: Option<Duration>,
    /// Listed in `Session::ready` and not yet taken by the driver.
    announced: bool,
    /// The peer sent GOAWAY(NO_ERROR) on this lane: no new streams go here.
    peer_draining: bool,
    /// Connection credit (PROTOCOL.md §4.1) is in force on this lane: the peer's HELLO
    /// granted some. Without it (a peer of an older release) neither side counts it.
    conn_credit: bool,
    /// The peer's HELLO announced [`Features::PAGE_AGE`]: OPENs sent here carry the page age.
    page_age: bool,
    /// Connection credit the peer granted us (0 until its HELLO).
    send: Credit,
    /// Connection credit we granted the peer for its frames towards us.
    recv: Credit,
}

impl Conn {
    /// Bytes emitted here that the peer has acknowledged, as far as the driver's report of
    /// the kernel queue tells (a TLS carrier's record overhead makes it a slight underestimate).
    fn acknowledged(&self) -> u64 {
        self.emitted.saturating_sub(self.kernel)
    }

    /// Whether interactive bytes emitted here are not acknowledged yet.
    fn interactive_out(&self) -> bool {
        self.acknowledged() < self.interactive_mark
    }

    /// Whether bulk bytes emitted here are not acknowledged yet.
    fn bulk_out(&self) -> bool {
        self.acknowledged() < self.bulk_mark
    }

    fn outstanding(&self) -> u64 {
        self.ctrl.len() as u64 + self.queued_streams + self.kernel
    }
}

/// The state machine of one pool session: all streams, all lanes.
#[derive(Debug)]
pub struct Session {
    role: Role,
    session_id: u64,
    cfg: Config,
    policy: Policy,
    /// The peer's latest HELLO (its limits); `None` until one arrives.
    peer: Option<Hello>,
    conns: BTreeMap<ConnId, Conn>,
    next_conn: u64,
    streams: HashMap<u64, Stream>,
    /// Next id `open` allocates (edge); ids start at 1 and never repeat.
    next_stream: u64,
    events: VecDeque<Event>,
    /// Lanes that got transmit work since the driver last looked.
    ready: VecDeque<ConnId>,
    rr_cursor: usize,
    /// We sent a drain GOAWAY accepting streams up to this id.
    local_goaway: Option<u64>,
    /// Highest OPEN id accepted (remote side).
    highest_accepted: u64,
    ping_seq: u64,
    /// Sum of the receive windows of all streams until they are forgotten: the receive credit
    /// committed to them (`credit`, "Starting windows").
    recv_windows: u64,
    /// Scratch space for scheduling decisions.
    scratch: Vec<ConnId>,
    scratch_loads: Vec<Load>,
    /// The latest `now` any input carried: the session's notion of the present for
    /// decisions taken in calls without a `now` (binding a direction).
    clock: Option<Instant>,
}

impl Session {
    /// A session for `role`. The edge picks `session_id` (random per pool);
    /// the remote uses the id from the edge's HELLO (see [`Hello::peek`]).
    /// `cfg` should have passed [`Config::validate`].
    pub fn new(role: Role, session_id: u64, cfg: Config, policy: Policy) -> Session {
        Session {
            role,
            session_id,
            cfg,
            policy,
            peer: None,
            conns: BTreeMap::new(),
            next_conn: 0,
            streams: HashMap::new(),
            next_stream: 1,
            events: VecDeque::new(),
            ready: VecDeque::new(),
            rr_cursor: 0,
            local_goaway: None,
            highest_accepted: 0,
            ping_seq: 0,
            recv_windows: 0,
            scratch: Vec::new(),
            scratch_loads: Vec::new(),
            clock: None,
        }
    }

    /// This session's id.
    pub fn session_id(&self) -> u64 {
        self.session_id
    }

    /// Our role.
    pub fn role(&self) -> Role {
        self.role
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    // ----- connection inputs -------------------------------------------------

    /// Adds a connection lane whose transport just connected; our HELLO is
    /// queued on it (PROTOCOL.md §3.1).
    pub fn add_connection(&mut self, now: Instant) -> ConnId {
        let id = ConnId(self.next_conn);
        self.next_conn += 1;
        let mut ctrl = BytesMut::new();
        Hello {
            version: VERSION,
            role: self.role,
            session: self.session_id,
            max_frame_size: self.cfg.max_frame_size,
            initial_window: self.cfg.initial_window(),
            max_streams: self.cfg.max_streams,
            conn_window: Some(self.cfg.conn_window),
            features: Some(Features::SUPPORTED),
        }
        .encode(&mut ctrl);
        self.conns.insert(
            id,
            Conn {
                state: ConnState::Handshake,
                inbuf: BytesMut::new(),
                ctrl,
                sendq: VecDeque::new(),
                queued_streams: 0,
                kernel: 0,
                window: 0,
                path: None,
                sampled_at: None,
                streams: 0,
                emitted: 0,
                interactive_mark: 0,
                bulk_mark: 0,
                peer_max_frame: 1024,
                last_open: 0,
                handshake_deadline: now + self.cfg.handshake_timeout,
                ping: None,
                next_ping: now,
                rtt: None,
                announced: false,
                peer_draining: false,
                conn_credit: false,
                page_age: false,
                send: Credit::new(0),
                recv: Credit::new(0),
            },
        );
        self.announce(id);
        id
    }

    /// Feeds bytes received on `conn`. Frames are processed in order; a
    /// malformed frame closes this lane only (PROTOCOL.md §6.1).
    pub fn handle_input(&mut self, conn: ConnId, data: &[u8], now: Instant) {
        self.tick(now);
        let max = self.cfg.max_frame_size as usize;
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        if c.state == ConnState::Closing {
            return;
        }
        c.inbuf.extend_from_slice(data);
        loop {
            let Some(c) = self.conns.get_mut(&conn) else {
                return;
            };
            if c.state == ConnState::Closing {
                c.inbuf.clear();
                return;
            }
            match Frame::decode(&mut c.inbuf, max) {
                Ok(None) => return,
                Ok(Some(f)) => {
                    if let Err(e) = self.handle_frame(conn, f, now) {
                        self.close_conn(conn, e);
                        return;
                    }
                }
                Err(e) => {
                    self.close_conn(conn, e);
                    return;
                }
            }
        }
    }

    /// The transport of `conn` is gone. Every stream with a direction bound to
    /// it is reset with CONNECTION_LOST (retryable when no reply byte arrived),
    /// and the peer is told on the remaining lanes (PROTOCOL.md §5.4).
    pub fn connection_lost(&mut self, conn: ConnId, _now: Instant) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        // Nothing may be queued on it any more: the RESETs that tell the peer go on the
        // remaining lanes (a reply bound here of which no byte arrived is known to the peer
        // only by them).
        c.state = ConnState::Closing;
        self.fail_streams_on(conn);
        self.conns.remove(&conn);
        self.ready.retain(|c| *c != conn);
    }

    /// Reports the kernel send queue of `conn` (unsent + unacknowledged bytes,
    /// `SIOCOUTQ` for TCP), the kernel half of the least-outstanding policy.
    pub fn set_kernel_outstanding(&mut self, conn: ConnId, bytes: u64) {
        if let Some(c) = self.conns.get_mut(&conn) {
            c.kernel = bytes;
        }
    }

    /// Lanes carrying interactive bytes the peer has not acknowledged yet, by the kernel
    /// send queue the driver last reported ([`Session::set_kernel_outstanding`]).
    pub fn interactive_lanes(&self) -> usize {
        self.conns.values().filter(|c| c.interactive_out()).count()
    }

    /// Whether `conn` carries unacknowledged bulk bytes and neither unacknowledged nor queued
    /// interactive ones: the lane a driver holds back (paces down) while
    /// [`Session::interactive_lanes`] is not zero, so that a page's replies on other lanes
    /// do not queue behind a download at the bottleneck (least attained service across
    /// lanes; [`crate::policy::BULK_BYTES`]).
    pub fn lane_is_bulk(&self, conn: ConnId) -> bool {
        let Some(c) = self.conns.get(&conn) else {
            return false;
        };
        c.bulk_out() && !c.interactive_out() && !c.sendq.iter().any(|id| self.is_interactive(*id))
    }

    /// Whether `conn` carries interactive bytes of this side: unacknowledged, or queued by a
    /// stream bound to it. A driver does not hold such a lane back, even for the
    /// round trips it otherwise keeps a hold after the page's bytes on other lanes.
    pub fn lane_is_interactive(&self, conn: ConnId) -> bool {
        self.conns.get(&conn).is_some_and(|c| {
            c.interactive_out() || c.sendq.iter().any(|id| self.is_interactive(*id))
        })
    }

    /// Whether stream `id`'s direction towards the peer is still interactive.
    fn is_interactive(&self, id: u64) -> bool {
        self.streams.get(&id).is_some_and(|s| s.interactive())
    }

    /// Reports the congestion window of `conn` in bytes (TCP: cwnd × MSS from
    /// `TCP_INFO`), which the least-outstanding policy weighs outstanding bytes
    /// against once every Up lane has one (PROTOCOL.md §5.1); 0 means unknown.
    pub fn set_congestion_window(&mut self, conn: ConnId, bytes: u64) {
        if let Some(c) = self.conns.get_mut(&conn) {
            c.window = bytes;
        }
    }

    /// Reports what the driver knows of `conn`'s path at `now` (PROTOCOL.md §5.1): its
    /// delivery rate, RTT, and the transport's unsent and in-flight bytes, which replace
    /// the kernel send queue of [`Session::set_kernel_outstanding`] (`unsent + in_flight`).
    /// [`Policy::ExpectedCompletion`] places directions by it; the other policies see the
    /// send queue only. A rate reported with bytes in flight and not app-limited is a
    /// fresh sample; one not refreshed so for about ten round trips is stale and only a
    /// lower bound (see the [`policy`](crate::policy) module).
    pub fn set_path_estimate(&mut self, conn: ConnId, estimate: PathEstimate, now: Instant) {
        self.tick(now);
        if let Some(c) = self.conns.get_mut(&conn) {
            c.kernel = estimate.unsent + estimate.in_flight;
            if estimate.delivery_rate > 0 && !estimate.app_limited && estimate.in_flight > 0 {
                c.sampled_at = Some(now);
            }
            c.path = Some(estimate);
        }
    }

    fn tick(&mut self, now: Instant) {
        if self.clock.is_none_or(|c| c < now) {
            self.clock = Some(now);
        }
    }

    /// Runs timers due at `now`: HELLO deadlines, PINGs and PONG deadlines.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.tick(now);
        self.run_timers(now);
    }

    /// The earliest instant [`Session::handle_timeout`] has work.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.next_timer()
    }

    // ----- outputs -----------------------------------------------------------

    /// Appends frames for `conn` to `out`: control frames first, then stream
    /// frames round-robin over the streams bound here, stopping once about
    /// `max` bytes were added (one frame may overshoot by less than a frame).
    /// Returns the number of bytes appended (0: nothing to send).
    pub fn poll_transmit(&mut self, conn: ConnId, max: usize, out: &mut Vec<u8>) -> usize {
        self.transmit(conn, max, out)
    }
    /// Whether `conn` has anything to send.
    pub fn has_transmit(&self, conn: ConnId) -> bool {
        self.conns.get(&conn).is_some_and(|c| {
            !c.ctrl.is_empty()
                || (c.state != ConnState::Closing
                    && !c.sendq.is_empty()
                    && (!c.conn_credit || c.send.available() > 0))
        })
    }

    /// The next event, if any. Callers drain events after every input call;
    /// repeated readiness events for one stream are coalesced.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// A lane that got transmit work since the last call (each listed once
    /// until taken); the driver then calls [`Session::poll_transmit`] on it.
    pub fn poll_ready_conn(&mut self) -> Option<ConnId> {
        let id = self.ready.pop_front()?;
        if let Some(c) = self.conns.get_mut(&id) {
            c.announced = false;
        }
        Some(id)
    }

    /// The lane is closing and its last frames (the GOAWAY) were taken: the
    /// driver closes the transport and calls [`Session::connection_lost`].
    pub fn wants_close(&self, conn: ConnId) -> bool {
        self.conns
            .get(&conn)
            .is_some_and(|c| c.state == ConnState::Closing && c.ctrl.is_empty())
    }

    // ----- session-wide ------------------------------------------------------

    /// Starts a graceful drain (PROTOCOL.md §5.3): GOAWAY(NO_ERROR) on every
    /// lane with the highest stream id accepted; no new streams are opened or
    /// accepted after it.
    pub fn go_away(&mut self, reason: &str) {
        if self.local_goaway.is_some() {
            return;
        }
        let last = self.highest_accepted;
        self.local_goaway = Some(last);
        let ids: Vec<ConnId> = self.conns.keys().copied().collect();
        for id in ids {
            if let Some(c) = self.conns.get_mut(&id) {
                if c.state == ConnState::Closing {
                    continue;
                }
                GoAway {
                    last_stream: last,
                    code: ErrorCode::NO_ERROR,
                    reason: reason.to_owned(),
                }
                .encode(&mut c.ctrl);
                self.announce(id);
            }
        }
    }

    /// Whether we started a drain, or every lane that is up belongs to a
    /// peer that did (a lane to a restarted peer is not draining).
    pub fn is_draining(&self) -> bool {
        self.local_goaway.is_some() || self.peer_draining()
    }

    pub(super) fn peer_draining(&self) -> bool {
        let mut up = self
            .conns
            .values()
            .filter(|c| c.state == ConnState::Up)
            .peekable();
        up.peek().is_some() && up.all(|c| c.peer_draining)
    }

    /// Closes one lane with `code` (GOAWAY then close), resetting its streams.
    pub fn close_connection(&mut self, conn: ConnId, code: ErrorCode, reason: &'static str) {
        let e = match code {
            ErrorCode::TIMEOUT => ConnError::Timeout(reason),
            ErrorCode::ENHANCE_YOUR_CALM => ConnError::Calm(reason),
            _ => ConnError::Protocol(reason),
        };
        self.close_conn(conn, e);
    }

    /// Number of streams not yet released and finished.
    pub fn stream_count(&self) -> usize {
        self.streams.len()
    }

    /// Most streams this session may have open at once: the smaller of the peer's
    /// `max_streams` (once its HELLO is in) and our own.
    pub fn stream_limit(&self) -> u32 {
        match self.peer {
            Some(p) => p.max_streams.min(self.local_stream_limit()),
            None => self.local_stream_limit(),
        }
    }

    /// Our own stream limit: `max_streams`, or with a peer that does not honour connection
    /// credit (its latest HELLO had none) the lower [`Config::legacy_max_streams`], so that
    /// every stream's whole window fits in the budget.
    pub(super) fn local_stream_limit(&self) -> u32 {
        match self.peer {
            Some(p) if p.conn_window.is_none() => self.cfg.legacy_max_streams(),
            _ => self.cfg.max_streams,
        }
    }

    /// Whether a new OPEN from the edge is over our stream limit. A stream finished both
    /// ways (our FIN and all our bytes sent, the peer's FIN received) or reset does not count:
    /// the edge forgets it as soon as its application has read it, which can be before ours
    /// lets go of it, and an OPEN refused for a slot the edge already sees free would cost
    /// the request a round trip or its answer. Such streams still hold their unread bytes
    /// (bounded by connection credit), so at most twice the limit are kept in all.
    pub(super) fn at_stream_limit(&self) -> bool {
        let limit = self.local_stream_limit() as usize;
        if self.streams.len() < limit {
            return false;
        }
        if self.streams.len() >= limit.saturating_mul(2) {
            return true;
        }
        let live = self
            .streams
            .values()
            .filter(|s| s.reset.is_none() && !(s.fin_sent && s.send_buf_len == 0 && s.fin_received))
            .count();
        live >= limit
    }

    /// Lanes, in id order.
    pub fn connections(&self) -> Vec<ConnSnapshot> {
        self.conns
            .iter()
            .map(|(id, c)| ConnSnapshot {
                id: *id,
                state: c.state,
                queued: c.ctrl.len() as u64 + c.queued_streams,
                kernel: c.kernel,
                streams: c.streams,
                rtt: c.rtt,
                path: c.path,
                credit_held: c.conn_credit.then(|| c.recv.held()),
                send_credit: c.conn_credit.then(|| c.send.available()),
            })
            .collect()
    }

    /// One lane.
    pub fn connection(&self, conn: ConnId) -> Option<ConnSnapshot> {
        self.connections().into_iter().find(|c| c.id == conn)
    }

    /// Number of lanes that completed HELLO and are not closing.
    pub fn up_connections(&self) -> usize {
        self.conns
            .values()
            .filter(|c| c.state == ConnState::Up)
            .count()
    }

    // ----- stream operations -------------------------------------------------

    /// Opens a stream (edge side) with no round trip: the OPEN carries `kind`,
    /// `target` and `first` bytes; `fin` ends our direction with them. The
    /// direction is bound now, by the policy (PROTOCOL.md §3.2, §5.1).
    pub fn open(
        &mut self,
        kind: Kind,
        target: &str,
        first: &[u8],
        fin: bool,
    ) -> Result<u64, OpenError> {
        self.open_aged(kind, target, first, fin, Duration::ZERO)
    }

    /// [`Session::open`] for a request of a page that began `age` ago: the stream ranks with
    /// the page's older streams on both sides (its OPEN carries the age where the lane's peer
    /// reads it, PROTOCOL.md §3.2, §5.1). An age of zero ranks it by its opening.
    pub fn open_aged(
        &mut self,
        kind: Kind,
        target: &str,
        first: &[u8],
        fin: bool,
        age: Duration,
    ) -> Result<u64, OpenError> {
        if self.role != Role::Edge {
            return Err(OpenError::Invalid("only the edge opens streams"));
        }
        if self.is_draining() {
            return Err(OpenError::Draining);
        }
        if target.len() > crate::frame::MAX_TARGET_LEN {
            return Err(OpenError::Invalid("target longer than 261 bytes"));
        }
        let Some(peer) = self.peer else {
            return Err(OpenError::Unavailable);
        };
        // Pool-wide failure first: with no usable lane the stream limit does not matter.
        if !self
            .conns
            .values()
            .any(|c| c.state == ConnState::Up && !c.peer_draining)
        {
            return Err(OpenError::Unavailable);
        }
        let local = self.local_stream_limit();
        let (limit, which) = if peer.max_streams <= local {
            (peer.max_streams, "peer")
        } else {
            (local, "local")
        };
        if self.streams.len() >= limit as usize {
            return Err(OpenError::StreamLimit { limit, which });
        }
        if first.len() as u64 > u64::from(peer.initial_window) {
            return Err(OpenError::Limit(
                "first bytes exceed the peer's stream window",
            ));
        }
        if self.next_stream > crate::varint::MAX {
            return Err(OpenError::Limit("stream ids exhausted"));
        }
        let Some(conn) = self.choose_conn(true) else {
            return Err(OpenError::Unavailable);
        };
        let id = self.next_stream;
        self.next_stream += 1;
        let mut s = Stream::new(
            kind,
            u64::from(peer.initial_window),
            self.stream_recv_credit(),
        );
        s.open_target = Some(target.to_owned());
        s.rank = self.clock.map(|c| crate::policy::page_rank(c, age));
        if !first.is_empty() {
            s.send_buf.push_back(Bytes::copy_from_slice(first));
            s.send_buf_len = first.len() as u64;
        }
        s.fin_queued = fin;
        s.send_conn = Some(conn);
        self.recv_windows += s.recv.window();
        self.streams.insert(id, s);
        if let Some(c) = self.conns.get_mut(&conn) {
            c.streams += 1;
        }
        self.account(id);
        Ok(id)
    }

    /// Writes up to `data.len()` bytes, as many as the stream's credit allows;
    /// `Ok(0)` means no credit now (wait for [`Event::Writable`]). The first
    /// write binds our direction to a lane.
    pub fn send(&mut self, id: u64, data: &[u8]) -> Result<usize, StreamError> {
        let s = self.stream_ok(id)?;
        if s.fin_queued {
            return Err(StreamError::Finished);
        }
        let n = (s.send_capacity() as usize).min(data.len());
        if n == 0 {
            return Ok(0);
        }
        self.bind_send(id)?;
        let s = self.streams.get_mut(&id).ok_or(StreamError::Unknown(id))?;
        s.send_buf.push_back(Bytes::copy_from_slice(&data[..n]));
        s.send_buf_len += n as u64;
        self.account(id);
        Ok(n)
    }

    /// Bytes [`Session::send`] would accept now.
    pub fn send_capacity(&self, id: u64) -> usize {
        self.streams
            .get(&id)
            .map_or(0, |s| s.send_capacity() as usize)
    }

    /// Ends our direction after the bytes already written (FIN, §3.3).
    pub fn finish(&mut self, id: u64) -> Result<(), StreamError> {
        let s = self.stream_ok(id)?;
        if s.fin_queued {
            return Ok(());
        }
        self.bind_send(id)?;
        if let Some(s) = self.streams.get_mut(&id) {
            s.fin_queued = true;
        }
        self.account(id);
        Ok(())
    }

    /// Reads received bytes; returns credit to the peer as they are consumed.
    pub fn read(&mut self, id: u64, buf: &mut [u8]) -> Result<Read, StreamError> {
        let s = self.streams.get_mut(&id).ok_or(StreamError::Unknown(id))?;
        if s.recv_buf_len == 0 {
            if s.fin_received {
                return Ok(Read::Fin);
            }
            if let Some((code, retryable)) = s.reset {
                return Err(StreamError::Reset { code, retryable });
            }
            return Ok(Read::Blocked);
        }
        let n = s.take_recv(buf);
        let lane = s.recv_conn;
        self.stream_consumed(id, n as u64);
        self.conn_consumed(lane, n as u64);
        Ok(Read::Data(n))
    }

    /// Resets the stream with `code` (RESET to the peer, both directions end).
    pub fn reset(&mut self, id: u64, code: ErrorCode) {
        if self.streams.get(&id).is_some_and(|s| s.reset.is_none()) {
            self.reset_local(id, code, false, true);
        }
    }

    /// The application dropped its handle. If both directions did not end
    /// cleanly the stream is reset with CANCEL; it is forgotten once nothing
    /// remains to send.
    pub fn release(&mut self, id: u64) {
        let Some(s) = self.streams.get_mut(&id) else {
            return;
        };
        s.released = true;
        if s.reset.is_none() && !s.cleanly_done() {
            if s.fin_queued && !s.fin_sent {
                s.cancel_after_fin = true;
            } else {
                self.reset_local(id, ErrorCode::CANCEL, false, true);
            }
        }
        self.gc(id);
    }

    /// Bytes of the peer's direction delivered so far.
    pub fn bytes_received(&self, id: u64) -> u64 {
        self.streams.get(&id).map_or(0, |s| s.bytes_received)
    }

    /// A snapshot of a stream.
    pub fn stream(&self, id: u64) -> Option<StreamSnapshot> {
        self.streams.get(&id).map(|s| StreamSnapshot {
            send_conn: s.send_conn,
            recv_conn: s.recv_conn,
            send_buffered: s.send_buf_len,
            recv_buffered: s.recv_buf_len,
            recv_window: s.recv.window(),
            recv_memory: s.recv_memory() as u64,
            bytes_sent: s.bytes_sent,
            bytes_received: s.bytes_received,
            reset: s.reset.map(|r| r.0),
        })
    }

    // ----- internals ---------------------------------------------------------

    pub(super) fn stream_ok(&self, id: u64) -> Result<&Stream, StreamError> {
        let s = self.streams.get(&id).ok_or(StreamError::Unknown(id))?;
        if let Some((code, retryable)) = s.reset {
            return Err(StreamError::Reset { code, retryable });
        }
        Ok(s)
    }

    pub(super) fn queue_ctrl(&mut self, conn: ConnId, f: &Frame) {
        let limit = self.cfg.max_control_bytes;
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        if c.state == ConnState::Closing {
            return;
        }
        f.encode(&mut c.ctrl);
        let over = c.ctrl.len() > limit;
        self.announce(conn);
        if over {
            self.close_conn(
                conn,
                ConnError::Calm("control frames queued faster than sent"),
            );
        }
    }
}

/// Header bytes a DATA frame of stream `id` costs (PROTOCOL.md §2).
pub fn data_overhead(id: u64) -> usize {
    header_len(id)
}

#[cfg(test)]
mod tests;
