//! The pool-wide sans-IO session (PROTOCOL.md §4, §5): owns every stream and
//! the N connection lanes that carry them.
//!
//! Inputs: [`Session::add_connection`], [`Session::handle_input`],
//! [`Session::connection_lost`], [`Session::set_kernel_outstanding`],
//! [`Session::handle_timeout`] and the stream operations. Outputs:
//! [`Session::poll_transmit`], [`Session::poll_event`],
//! [`Session::poll_ready_conn`] and [`Session::poll_timeout`]. No I/O, no clock:
//! callers pass `now`.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fmt;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};

use crate::config::Config;
use crate::error::{ConnError, ErrorCode};
use crate::frame::{
    header_len, Data, Frame, GoAway, Hello, Kind, Open, Ping, Reset, Role, Window, MAX_PAYLOAD_LEN,
    VERSION,
};
use crate::policy::{Load, Policy};
use crate::stream::Stream;

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

/// Something the driver or application must react to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// The peer's HELLO arrived on this connection.
    ConnectionUp(ConnId),
    /// The connection is being closed (by us with `code`, or by the peer's GOAWAY);
    /// its streams were reset. The driver flushes and closes it.
    ConnectionClosing {
        /// Which lane.
        conn: ConnId,
        /// Wire code sent or received.
        code: ErrorCode,
        /// Human-readable cause, naming the side that misbehaved.
        reason: String,
    },
    /// The peer opened a stream (remote side).
    Incoming {
        /// Pool-wide stream id.
        id: u64,
        /// What it carries.
        kind: Kind,
        /// "host:port".
        target: String,
    },
    /// Bytes or the FIN can be read from the stream.
    Readable(u64),
    /// The stream got credit: more bytes can be written.
    Writable(u64),
    /// The stream was reset (by the peer, or locally by a connection loss or an error).
    Reset {
        /// Stream id.
        id: u64,
        /// Why.
        code: ErrorCode,
        /// The request may be sent again (nothing of the reply arrived, or the
        /// peer refused the stream unprocessed).
        retryable: bool,
    },
    /// The stream was forgotten (both directions ended or it was reset, and the
    /// application released it): it no longer counts against the stream limit,
    /// so an open refused with [`OpenError::StreamLimit`] may now succeed.
    StreamFreed(u64),
    /// The peer is draining: no new streams (edge side stops opening).
    GoAway {
        /// Lane it arrived on.
        conn: ConnId,
        /// Highest stream id the peer accepted.
        last_stream: u64,
    },
}

/// Outcome of [`Session::read`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Read {
    /// This many bytes were copied.
    Data(usize),
    /// The peer's direction ended; nothing more will arrive.
    Fin,
    /// Nothing to read now; wait for [`Event::Readable`].
    Blocked,
}

/// Why a stream operation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StreamError {
    /// No such stream (never opened, or already released).
    #[error("no stream {0}")]
    Unknown(u64),
    /// The stream was reset.
    #[error("stream reset: {code}")]
    Reset {
        /// Why.
        code: ErrorCode,
        /// Safe to retry the request.
        retryable: bool,
    },
    /// Our direction was already finished.
    #[error("write after FIN")]
    Finished,
}

/// Why [`Session::open`] failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OpenError {
    /// No connection has completed its HELLO.
    #[error("no pool connection is up")]
    Unavailable,
    /// We or the peer are draining (GOAWAY).
    #[error("the session is draining")]
    Draining,
    /// As many streams as the stream limit allows are open: the smaller of
    /// the peer's `max_streams` (its HELLO) and our own `max_streams` (our
    /// buffer budget, PROTOCOL.md §4.4). Transient: an open may succeed after
    /// the next [`Event::StreamFreed`].
    #[error("stream limit reached: {limit} streams open ({which}'s max_streams)")]
    StreamLimit {
        /// The limit in force.
        limit: u32,
        /// Whose `max_streams` it is: "peer" or "local".
        which: &'static str,
    },
    /// A limit would be exceeded (which one is named).
    #[error("limit reached: {0}")]
    Limit(&'static str),
    /// The arguments are unusable (reason named).
    #[error("invalid open: {0}")]
    Invalid(&'static str),
}

/// A snapshot of one lane for stats and tests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnSnapshot {
    /// Lane id.
    pub id: ConnId,
    /// Lifecycle state.
    pub state: ConnState,
    /// Bytes queued in the process for this lane (control frames + streams' sendable bytes).
    pub queued: u64,
    /// Kernel send queue as last reported by the driver.
    pub kernel: u64,
    /// Streams with a direction bound here.
    pub streams: u32,
    /// Last PING round-trip time.
    pub rtt: Option<Duration>,
    /// Connection credit (PROTOCOL.md §4.1) the peer has used here and we have not returned:
    /// bytes received and not yet read, plus read ones whose WINDOW is not yet due. At our
    /// `conn_window` the peer sends nothing more on this connection. `None` without
    /// connection credit.
    pub credit_held: Option<u64>,
    /// Connection credit the peer granted us here that is left; `None` without connection
    /// credit.
    pub send_credit: Option<u64>,
}

/// A snapshot of one stream for stats and tests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamSnapshot {
    /// Lane our direction is bound to.
    pub send_conn: Option<ConnId>,
    /// Lane the peer's direction arrives on.
    pub recv_conn: Option<ConnId>,
    /// Bytes written by the application and not yet framed.
    pub send_buffered: u64,
    /// Bytes received and not yet read.
    pub recv_buffered: u64,
    /// Bytes of our direction framed so far.
    pub bytes_sent: u64,
    /// Bytes of the peer's direction received so far.
    pub bytes_received: u64,
    /// Reset code, if reset.
    pub reset: Option<ErrorCode>,
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
    /// Streams with at least one direction bound here.
    streams: u32,
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
    /// Connection credit the peer granted that we have not used yet, bytes.
    send_credit: u64,
    /// Connection credit the peer still holds for its frames towards us, bytes.
    recv_left: u64,
    /// Bytes that arrived here and were read or discarded, whose credit is not returned yet.
    recv_unacked: u64,
}

impl Conn {
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
    /// Scratch space for scheduling decisions.
    scratch: Vec<(ConnId, Load)>,
    scratch_loads: Vec<Load>,
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
            scratch: Vec::new(),
            scratch_loads: Vec::new(),
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
            initial_window: self.cfg.stream_window,
            max_streams: self.cfg.max_streams,
            conn_window: Some(self.cfg.conn_window),
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
                streams: 0,
                peer_max_frame: 1024,
                last_open: 0,
                handshake_deadline: now + self.cfg.handshake_timeout,
                ping: None,
                next_ping: now,
                rtt: None,
                announced: false,
                peer_draining: false,
                conn_credit: false,
                send_credit: 0,
                recv_left: 0,
                recv_unacked: 0,
            },
        );
        self.announce(id);
        id
    }

    /// Feeds bytes received on `conn`. Frames are processed in order; a
    /// malformed frame closes this lane only (PROTOCOL.md §6.1).
    pub fn handle_input(&mut self, conn: ConnId, data: &[u8], now: Instant) {
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
        if !self.conns.contains_key(&conn) {
            return;
        }
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

    /// Reports the congestion window of `conn` in bytes (TCP: cwnd × MSS from
    /// `TCP_INFO`), which the least-outstanding policy weighs outstanding bytes
    /// against once every Up lane has one (PROTOCOL.md §5.1); 0 means unknown.
    pub fn set_congestion_window(&mut self, conn: ConnId, bytes: u64) {
        if let Some(c) = self.conns.get_mut(&conn) {
            c.window = bytes;
        }
    }

    /// Runs timers due at `now`: HELLO deadlines, PINGs and PONG deadlines.
    pub fn handle_timeout(&mut self, now: Instant) {
        let ids: Vec<ConnId> = self.conns.keys().copied().collect();
        for id in ids {
            let Some(c) = self.conns.get_mut(&id) else {
                continue;
            };
            match c.state {
                ConnState::Handshake if now >= c.handshake_deadline => {
                    self.close_conn(id, ConnError::Timeout("no HELLO from peer"));
                }
                ConnState::Up => match c.ping {
                    Some((_, sent)) if now >= sent + self.cfg.ping_timeout => {
                        self.close_conn(id, ConnError::Timeout("no PONG from peer"));
                    }
                    None if now >= c.next_ping => {
                        self.ping_seq += 1;
                        let payload = self.ping_seq;
                        c.ping = Some((payload, now));
                        c.next_ping = now + self.cfg.ping_interval;
                        Ping {
                            ack: false,
                            payload,
                        }
                        .encode(&mut c.ctrl);
                        self.announce(id);
                    }
                    _ => {}
                },
                _ => {}
            }
        }
    }

    /// The earliest instant [`Session::handle_timeout`] has work.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.conns
            .values()
            .filter_map(|c| match c.state {
                ConnState::Handshake => Some(c.handshake_deadline),
                ConnState::Up => Some(match c.ping {
                    Some((_, sent)) => sent + self.cfg.ping_timeout,
                    None => c.next_ping,
                }),
                ConnState::Closing => None,
            })
            .min()
    }

    // ----- outputs -----------------------------------------------------------

    /// Appends frames for `conn` to `out`: control frames first, then stream
    /// frames round-robin over the streams bound here, stopping once about
    /// `max` bytes were added (one frame may overshoot by less than a frame).
    /// Returns the number of bytes appended (0: nothing to send).
    pub fn poll_transmit(&mut self, conn: ConnId, max: usize, out: &mut Vec<u8>) -> usize {
        let start = out.len();
        let Some(c) = self.conns.get_mut(&conn) else {
            return 0;
        };
        out.extend_from_slice(&c.ctrl);
        c.ctrl.clear();
        if c.state == ConnState::Closing {
            c.sendq.clear();
            return out.len() - start;
        }
        let max_frame = c.peer_max_frame.min(self.cfg.max_frame_size as usize);
        while out.len() - start < max {
            let Some(c) = self.conns.get_mut(&conn) else {
                break;
            };
            // Out of connection credit: the streams stay queued until a WINDOW for stream 0
            // arrives on this lane (PROTOCOL.md §4.1).
            let credit = if c.conn_credit {
                c.send_credit
            } else {
                u64::MAX
            };
            if credit == 0 {
                break;
            }
            let Some(id) = c.sendq.pop_front() else {
                break;
            };
            let (more, used) = self.emit_one(id, max_frame, credit, out);
            if let Some(c) = self.conns.get_mut(&conn) {
                if c.conn_credit {
                    c.send_credit -= used;
                }
            }
            if let Some(s) = self.streams.get(&id) {
                if s.cancel_after_fin && s.fin_sent && s.reset.is_none() && !s.cleanly_done() {
                    // Behind the FIN on the same connection: the peer reads
                    // everything we wrote, then learns we stopped reading.
                    Reset {
                        stream: id,
                        code: ErrorCode::CANCEL,
                    }
                    .encode(out);
                    self.reset_local(id, ErrorCode::CANCEL, false, false);
                }
            }
            if let Some(s) = self.streams.get_mut(&id) {
                s.in_sendq = more;
                if more {
                    if let Some(c) = self.conns.get_mut(&conn) {
                        c.sendq.push_back(id);
                    }
                }
            }
            self.account(id);
            self.gc(id);
        }
        out.len() - start
    }

    /// Whether `conn` has anything to send.
    pub fn has_transmit(&self, conn: ConnId) -> bool {
        self.conns.get(&conn).is_some_and(|c| {
            !c.ctrl.is_empty()
                || (c.state != ConnState::Closing
                    && !c.sendq.is_empty()
                    && (!c.conn_credit || c.send_credit > 0))
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

    fn peer_draining(&self) -> bool {
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
    fn local_stream_limit(&self) -> u32 {
        match self.peer {
            Some(p) if p.conn_window.is_none() => self.cfg.legacy_max_streams(),
            _ => self.cfg.max_streams,
        }
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
                credit_held: (c.conn_credit)
                    .then(|| u64::from(self.cfg.conn_window).saturating_sub(c.recv_left)),
                send_credit: c.conn_credit.then_some(c.send_credit),
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
            u64::from(self.cfg.stream_window),
        );
        s.open_target = Some(target.to_owned());
        if !first.is_empty() {
            s.send_buf.push_back(Bytes::copy_from_slice(first));
            s.send_buf_len = first.len() as u64;
        }
        s.fin_queued = fin;
        s.send_conn = Some(conn);
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
        s.recv_unacked += n as u64;
        // Return credit once a quarter of the window was consumed (§4.2), so
        // the peer never waits a round trip with an empty window.
        let threshold = u64::from(self.cfg.stream_window / 4).max(1);
        if s.recv_unacked >= threshold && !s.fin_received && s.reset.is_none() {
            let inc = s.recv_unacked;
            s.recv_unacked = 0;
            s.recv_left += inc;
            let prefer = s.recv_conn;
            self.queue_window(id, inc, prefer);
        }
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
            bytes_sent: s.bytes_sent,
            bytes_received: s.bytes_received,
            reset: s.reset.map(|r| r.0),
        })
    }

    // ----- internals ---------------------------------------------------------

    fn stream_ok(&self, id: u64) -> Result<&Stream, StreamError> {
        let s = self.streams.get(&id).ok_or(StreamError::Unknown(id))?;
        if let Some((code, retryable)) = s.reset {
            return Err(StreamError::Reset { code, retryable });
        }
        Ok(s)
    }

    /// Queues a readiness event unless the same one is already last in line.
    fn push_coalesced(&mut self, ev: Event) {
        if self.events.back() != Some(&ev) {
            self.events.push_back(ev);
        }
    }

    fn announce(&mut self, conn: ConnId) {
        if let Some(c) = self.conns.get_mut(&conn) {
            if !c.announced {
                c.announced = true;
                self.ready.push_back(conn);
            }
        }
    }

    /// Picks an Up lane by the policy (PROTOCOL.md §5.1); a new stream
    /// (`for_open`) skips lanes whose peer is draining.
    fn choose_conn(&mut self, for_open: bool) -> Option<ConnId> {
        self.scratch.clear();
        self.scratch_loads.clear();
        for (id, c) in &self.conns {
            if c.state == ConnState::Up && !(for_open && c.peer_draining) {
                let l = Load {
                    outstanding: c.outstanding(),
                    streams: c.streams,
                    window: c.window,
                };
                self.scratch.push((*id, l));
                self.scratch_loads.push(l);
            }
        }
        let i = self
            .policy
            .choose(&self.scratch_loads, &mut self.rr_cursor)?;
        Some(self.scratch[i].0)
    }

    /// Least-outstanding Up lane for a control frame, preferring `prefer`.
    fn control_conn(&self, prefer: Option<ConnId>, exclude: Option<ConnId>) -> Option<ConnId> {
        if let Some(p) = prefer {
            if Some(p) != exclude && self.conns.get(&p).is_some_and(|c| c.state == ConnState::Up) {
                return Some(p);
            }
        }
        self.conns
            .iter()
            .filter(|(id, c)| c.state == ConnState::Up && Some(**id) != exclude)
            .min_by_key(|(id, c)| (c.outstanding(), **id))
            .map(|(id, _)| *id)
    }

    fn bind_send(&mut self, id: u64) -> Result<(), StreamError> {
        let s = self.streams.get(&id).ok_or(StreamError::Unknown(id))?;
        if s.send_conn.is_some() {
            return Ok(());
        }
        let recv_conn = s.recv_conn;
        let Some(conn) = self.choose_conn(false) else {
            self.reset_local(id, ErrorCode::CONNECTION_LOST, false, false);
            return Err(StreamError::Reset {
                code: ErrorCode::CONNECTION_LOST,
                retryable: false,
            });
        };
        if let Some(s) = self.streams.get_mut(&id) {
            s.send_conn = Some(conn);
        }
        if recv_conn != Some(conn) {
            if let Some(c) = self.conns.get_mut(&conn) {
                c.streams += 1;
            }
        }
        Ok(())
    }

    /// Re-counts a stream's sendable bytes into its lane and (re)queues it.
    fn account(&mut self, id: u64) {
        let Some(s) = self.streams.get_mut(&id) else {
            return;
        };
        let new = s.sendable();
        let old = s.accounted;
        s.accounted = new;
        let Some(conn) = s.send_conn else {
            return;
        };
        let enqueue = s.has_send_work() && !s.in_sendq;
        if enqueue {
            s.in_sendq = true;
        }
        if let Some(c) = self.conns.get_mut(&conn) {
            c.queued_streams = (c.queued_streams + new).saturating_sub(old);
            if enqueue {
                c.sendq.push_back(id);
            }
        }
        if enqueue {
            self.announce(conn);
        }
    }

    /// Frames one OPEN or DATA of stream `id` with at most `credit` bytes of data (the
    /// lane's connection credit); returns whether more is to send and the bytes framed.
    fn emit_one(
        &mut self,
        id: u64,
        max_frame: usize,
        credit: u64,
        out: &mut Vec<u8>,
    ) -> (bool, u64) {
        let Some(s) = self.streams.get_mut(&id) else {
            return (false, 0);
        };
        if !s.has_send_work() {
            return (false, 0);
        }
        let sendable = s.sendable().min(credit) as usize;
        if let Some(target) = s.open_target.take() {
            // PROTOCOL.md §3.2: OPEN carries the first bytes.
            let room = max_frame.saturating_sub(Open::prefix_len(&target));
            let n = sendable.min(room);
            let data = s.take_send(n);
            let fin = s.fin_queued && s.send_buf_len == 0;
            Open::encode_parts(out, id, s.kind, &target, &data, fin);
            s.send_credit -= n as u64;
            s.bytes_sent += n as u64;
            s.fin_sent = fin;
            (s.has_send_work(), n as u64)
        } else {
            let n = sendable.min(max_frame);
            let data = s.take_send(n);
            let fin = s.fin_queued && s.send_buf_len == 0;
            Data::encode_parts(out, id, &data, fin);
            s.send_credit -= n as u64;
            s.bytes_sent += n as u64;
            s.fin_sent = fin;
            (s.has_send_work(), n as u64)
        }
    }

    fn queue_ctrl(&mut self, conn: ConnId, f: &Frame) {
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

    fn queue_window(&mut self, id: u64, inc: u64, prefer: Option<ConnId>) {
        if let Some(conn) = self.control_conn(prefer, None) {
            let increment = inc.min(u64::from(u32::MAX)) as u32;
            self.queue_ctrl(
                conn,
                &Frame::Window(Window {
                    stream: id,
                    increment,
                }),
            );
        }
    }

    /// Marks a stream reset, frees its buffers, unbinds it and reports it.
    fn reset_local(&mut self, id: u64, code: ErrorCode, retryable: bool, tell_peer: bool) {
        let Some(s) = self.streams.get_mut(&id) else {
            return;
        };
        if s.reset.is_some() {
            return;
        }
        s.reset = Some((code, retryable));
        s.send_buf.clear();
        s.send_buf_len = 0;
        let mut discarded = 0;
        if !s.fin_received {
            discarded = s.recv_buf_len;
            s.recv_buf.clear();
            s.recv_buf_len = 0;
        }
        let lane = s.recv_conn;
        let exclude = s.send_conn.filter(|c| {
            self.conns
                .get(c)
                .is_none_or(|c| c.state == ConnState::Closing)
        });
        let prefer = s.send_conn;
        self.conn_consumed(lane, discarded);
        self.account(id);
        self.unbind(id);
        self.events.push_back(Event::Reset {
            id,
            code,
            retryable,
        });
        if tell_peer {
            // PROTOCOL.md §3.4: RESET may travel on any lane.
            if let Some(conn) = self.control_conn(prefer, exclude) {
                self.queue_ctrl(conn, &Frame::Reset(Reset { stream: id, code }));
            }
        }
        self.gc(id);
    }

    fn unbind(&mut self, id: u64) {
        let Some(s) = self.streams.get_mut(&id) else {
            return;
        };
        if s.unbound {
            return;
        }
        s.unbound = true;
        let (a, b) = (s.send_conn, s.recv_conn);
        for c in [a, if b == a { None } else { b }].into_iter().flatten() {
            if let Some(c) = self.conns.get_mut(&c) {
                c.streams = c.streams.saturating_sub(1);
            }
        }
    }

    /// Forgets a stream once the application released it and nothing remains
    /// to send.
    fn gc(&mut self, id: u64) {
        let Some(s) = self.streams.get(&id) else {
            return;
        };
        let sent_all = s.reset.is_some() || (s.fin_sent && s.send_buf_len == 0);
        if s.released && sent_all {
            self.unbind(id);
            if let Some(s) = self.streams.remove(&id) {
                if let Some(c) = s.send_conn.and_then(|c| self.conns.get_mut(&c)) {
                    c.queued_streams = c.queued_streams.saturating_sub(s.accounted);
                }
                // Unread bytes of a finished direction go with the stream.
                self.conn_consumed(s.recv_conn, s.recv_buf_len);
                self.events.push_back(Event::StreamFreed(id));
            }
        }
    }

    fn fail_streams_on(&mut self, conn: ConnId) {
        let mut ids: Vec<u64> = self
            .streams
            .iter()
            .filter(|(_, s)| {
                s.reset.is_none() && (s.send_conn == Some(conn) || s.recv_conn == Some(conn))
            })
            .map(|(id, _)| *id)
            .collect();
        ids.sort_unstable();
        let edge = self.role == Role::Edge;
        for id in ids {
            let retryable = edge && self.streams.get(&id).is_some_and(|s| s.bytes_received == 0);
            // Make sure the RESET for the peer does not go on the dead lane.
            if let Some(s) = self.streams.get_mut(&id) {
                if s.send_conn == Some(conn) {
                    s.send_conn = None;
                    if let Some(c) = self.conns.get_mut(&conn) {
                        c.queued_streams = c.queued_streams.saturating_sub(s.accounted);
                        c.streams = c.streams.saturating_sub(1);
                    }
                    s.accounted = 0;
                    if s.recv_conn == Some(conn) {
                        s.recv_conn = None;
                    }
                } else if s.recv_conn == Some(conn) {
                    s.recv_conn = None;
                    if let Some(c) = self.conns.get_mut(&conn) {
                        c.streams = c.streams.saturating_sub(1);
                    }
                }
            }
            self.reset_local(id, ErrorCode::CONNECTION_LOST, retryable, true);
        }
    }

    /// Closes one lane for a local reason: GOAWAY with the mapped code, then
    /// the driver closes it (PROTOCOL.md §6.1). Other lanes are untouched.
    fn close_conn(&mut self, conn: ConnId, e: ConnError) {
        let last = self.highest_accepted;
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        if c.state == ConnState::Closing {
            return;
        }
        c.state = ConnState::Closing;
        c.inbuf = BytesMut::new();
        GoAway {
            last_stream: last,
            code: e.code(),
            reason: e.to_string(),
        }
        .encode(&mut c.ctrl);
        self.announce(conn);
        self.events.push_back(Event::ConnectionClosing {
            conn,
            code: e.code(),
            reason: e.to_string(),
        });
        self.fail_streams_on(conn);
    }

    fn handle_frame(&mut self, conn: ConnId, f: Frame, now: Instant) -> Result<(), ConnError> {
        let state = self.conns.get(&conn).map(|c| c.state);
        if state == Some(ConnState::Handshake) {
            return match f {
                Frame::Hello(h) => self.on_hello(conn, h, now),
                _ => Err(ConnError::Protocol("first frame is not HELLO")),
            };
        }
        match f {
            Frame::Hello(_) => Err(ConnError::Protocol("second HELLO")),
            Frame::Open(o) => self.on_open(conn, o),
            Frame::Data(d) => self.on_data(conn, d.stream, d.data, d.fin),
            Frame::Reset(r) => {
                self.on_reset(r);
                Ok(())
            }
            Frame::Window(w) => self.on_window(conn, w),
            Frame::Ping(p) => self.on_ping(conn, p, now),
            Frame::GoAway(g) => {
                self.on_goaway(conn, g);
                Ok(())
            }
            Frame::Unknown(_) => Ok(()),
        }
    }

    fn on_hello(&mut self, conn: ConnId, h: Hello, now: Instant) -> Result<(), ConnError> {
        if h.version != VERSION {
            return Err(ConnError::Version(h.version));
        }
        if h.role == self.role {
            return Err(ConnError::Protocol("peer has our own role"));
        }
        if h.session != self.session_id {
            return Err(ConnError::Protocol("HELLO session id differs from ours"));
        }
        if h.max_frame_size < 1024 || h.initial_window < 1024 || h.max_streams == 0 {
            return Err(ConnError::Protocol("HELLO limits below protocol minimums"));
        }
        if h.conn_window
            .is_some_and(|w| w < 1024 || w > i32::MAX as u32)
        {
            return Err(ConnError::Protocol("HELLO conn_window outside 1024..2^31"));
        }
        self.peer = Some(h);
        let conn_window = u64::from(self.cfg.conn_window);
        if let Some(c) = self.conns.get_mut(&conn) {
            c.state = ConnState::Up;
            c.peer_max_frame = (h.max_frame_size as usize).min(MAX_PAYLOAD_LEN);
            c.next_ping = now;
            c.conn_credit = h.conn_window.is_some();
            c.send_credit = h.conn_window.map_or(0, u64::from);
            c.recv_left = conn_window;
        }
        if let Some(last) = self.local_goaway {
            // A lane that came up during a drain learns about it too.
            let g = Frame::GoAway(GoAway {
                last_stream: last,
                code: ErrorCode::NO_ERROR,
                reason: "draining".into(),
            });
            self.queue_ctrl(conn, &g);
        }
        self.events.push_back(Event::ConnectionUp(conn));
        Ok(())
    }

    fn on_open(&mut self, conn: ConnId, o: Open) -> Result<(), ConnError> {
        if self.role != Role::Remote {
            return Err(ConnError::Protocol("OPEN sent to the edge"));
        }
        let c = self
            .conns
            .get_mut(&conn)
            .ok_or(ConnError::Protocol("no lane"))?;
        if o.stream <= c.last_open {
            return Err(ConnError::Protocol(
                "OPEN ids must increase on a connection",
            ));
        }
        c.last_open = o.stream;
        if self.streams.contains_key(&o.stream) {
            return Err(ConnError::Protocol("OPEN for an existing stream"));
        }
        let n = o.data.len() as u64;
        self.conn_received(conn, n)?;
        let refuse = self.local_goaway.is_some_and(|last| o.stream > last)
            || self.streams.len() >= self.local_stream_limit() as usize;
        if refuse {
            self.conn_consumed(Some(conn), n);
            // PROTOCOL.md §5.3: never processed, safe to retry.
            self.queue_ctrl(
                conn,
                &Frame::Reset(Reset {
                    stream: o.stream,
                    code: ErrorCode::REFUSED_STREAM,
                }),
            );
            return Ok(());
        }
        let Some(peer) = self.peer else {
            return Err(ConnError::Protocol("OPEN before HELLO"));
        };
        let window = u64::from(self.cfg.stream_window);
        let mut s = Stream::new(o.kind, u64::from(peer.initial_window), window);
        s.recv_conn = Some(conn);
        self.highest_accepted = self.highest_accepted.max(o.stream);
        self.streams.insert(o.stream, s);
        if let Some(c) = self.conns.get_mut(&conn) {
            c.streams += 1;
        }
        self.events.push_back(Event::Incoming {
            id: o.stream,
            kind: o.kind,
            target: o.target,
        });
        if !o.data.is_empty() || o.fin {
            self.deliver(o.stream, o.data, o.fin);
        }
        Ok(())
    }

    fn on_data(&mut self, conn: ConnId, id: u64, data: Bytes, fin: bool) -> Result<(), ConnError> {
        let last_open = self.conns.get(&conn).map_or(0, |c| c.last_open);
        let n = data.len() as u64;
        self.conn_received(conn, n)?;
        let Some(s) = self.streams.get_mut(&id) else {
            let never_opened = match self.role {
                Role::Edge => id >= self.next_stream,
                Role::Remote => id > last_open && id > self.highest_accepted,
            };
            if never_opened {
                return Err(ConnError::Protocol("DATA for a stream never opened"));
            }
            // A stream we already forgot (reset or released): drop (§4.3).
            self.conn_consumed(Some(conn), n);
            return Ok(());
        };
        match s.recv_conn {
            None => {
                s.recv_conn = Some(conn);
                if s.send_conn != Some(conn) && s.reset.is_none() {
                    if let Some(c) = self.conns.get_mut(&conn) {
                        c.streams += 1;
                    }
                }
            }
            Some(c) if c != conn => {
                return Err(ConnError::Protocol(
                    "a stream direction moved to another connection",
                ))
            }
            Some(_) => {}
        }
        let Some(s) = self.streams.get_mut(&id) else {
            return Ok(());
        };
        if s.fin_received {
            return Err(ConnError::Protocol("DATA after FIN"));
        }
        if s.reset.is_some() {
            self.conn_consumed(Some(conn), n);
            return Ok(());
        }
        self.deliver(id, data, fin);
        Ok(())
    }

    /// Counts `n` bytes of OPEN/DATA payload received on `conn` against its connection credit
    /// (PROTOCOL.md §4.1); more than the peer holds closes the connection.
    fn conn_received(&mut self, conn: ConnId, n: u64) -> Result<(), ConnError> {
        let Some(c) = self.conns.get_mut(&conn) else {
            return Ok(());
        };
        if !c.conn_credit {
            return Ok(());
        }
        if n > c.recv_left {
            return Err(ConnError::FlowControl(
                "more stream data than the connection's credit",
            ));
        }
        c.recv_left -= n;
        Ok(())
    }

    /// `n` bytes that arrived on `lane` were read or discarded: their connection credit goes
    /// back to the peer, in one WINDOW for stream 0 on that lane once at least a quarter of
    /// the smaller of the two windows has gathered (§4.2).
    fn conn_consumed(&mut self, lane: Option<ConnId>, n: u64) {
        let threshold = u64::from(self.cfg.conn_window.min(self.cfg.stream_window) / 4).max(1);
        let Some(conn) = lane else {
            return;
        };
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        if !c.conn_credit || n == 0 {
            return;
        }
        c.recv_unacked += n;
        if c.recv_unacked < threshold {
            return;
        }
        let inc = c.recv_unacked;
        c.recv_unacked = 0;
        c.recv_left += inc;
        self.queue_ctrl(
            conn,
            &Frame::Window(Window {
                stream: 0,
                increment: inc.min(u64::from(u32::MAX)) as u32,
            }),
        );
    }

    /// Appends received bytes to a stream, enforcing its window (§4.1).
    fn deliver(&mut self, id: u64, data: Bytes, fin: bool) {
        let Some(s) = self.streams.get_mut(&id) else {
            return;
        };
        let n = data.len() as u64;
        if n > s.recv_left {
            let lane = s.recv_conn;
            self.reset_local(id, ErrorCode::FLOW_CONTROL_ERROR, false, true);
            self.conn_consumed(lane, n);
            return;
        }
        s.recv_left -= n;
        s.bytes_received += n;
        // Copied out of the connection's receive buffer: a slice would pin the whole read
        // buffer it came from, so a peer sending many tiny frames to a stalled stream could
        // hold far more memory than the stream's window. Small payloads share chunks.
        s.push_recv(&data);
        if fin {
            s.fin_received = true;
        }
        self.push_coalesced(Event::Readable(id));
        self.gc(id);
    }

    fn on_reset(&mut self, r: Reset) {
        let Some(s) = self.streams.get(&r.stream) else {
            return;
        };
        if s.reset.is_some() {
            return;
        }
        let retryable = r.code == ErrorCode::REFUSED_STREAM
            || (self.role == Role::Edge
                && r.code == ErrorCode::CONNECTION_LOST
                && s.bytes_received == 0);
        self.reset_local(r.stream, r.code, retryable, false);
    }

    fn on_window(&mut self, conn: ConnId, w: Window) -> Result<(), ConnError> {
        if w.stream == 0 {
            // Connection credit for this lane (§3.5); ignored where none is in force.
            let Some(c) = self.conns.get_mut(&conn) else {
                return Ok(());
            };
            if !c.conn_credit {
                return Ok(());
            }
            c.send_credit += u64::from(w.increment);
            if c.send_credit > i32::MAX as u64 {
                return Err(ConnError::FlowControl(
                    "connection credit beyond 2^31 - 1 bytes",
                ));
            }
            if !c.sendq.is_empty() {
                self.announce(conn);
            }
            return Ok(());
        }
        let Some(s) = self.streams.get_mut(&w.stream) else {
            return Ok(());
        };
        if s.reset.is_some() {
            return Ok(());
        }
        s.send_credit += u64::from(w.increment);
        if s.send_credit > i32::MAX as u64 {
            self.reset_local(w.stream, ErrorCode::FLOW_CONTROL_ERROR, false, true);
            return Ok(());
        }
        self.push_coalesced(Event::Writable(w.stream));
        self.account(w.stream);
        Ok(())
    }

    fn on_ping(&mut self, conn: ConnId, p: Ping, now: Instant) -> Result<(), ConnError> {
        if p.ack {
            if let Some(c) = self.conns.get_mut(&conn) {
                if let Some((payload, sent)) = c.ping {
                    if payload == p.payload {
                        c.rtt = Some(now.saturating_duration_since(sent));
                        c.ping = None;
                    }
                }
            }
            return Ok(());
        }
        self.queue_ctrl(
            conn,
            &Frame::Ping(Ping {
                ack: true,
                payload: p.payload,
            }),
        );
        Ok(())
    }

    fn on_goaway(&mut self, conn: ConnId, g: GoAway) {
        if g.code != ErrorCode::NO_ERROR {
            // The peer closes this lane only (§6.1).
            if let Some(c) = self.conns.get_mut(&conn) {
                if c.state != ConnState::Closing {
                    c.state = ConnState::Closing;
                    c.ctrl.clear();
                    self.events.push_back(Event::ConnectionClosing {
                        conn,
                        code: g.code,
                        reason: format!("peer closed the connection: {}", g.reason),
                    });
                    self.fail_streams_on(conn);
                }
            }
            return;
        }
        if let Some(c) = self.conns.get_mut(&conn) {
            c.peer_draining = true;
        }
        if self.role == Role::Edge {
            // Streams above `last` sent on this lane were never processed:
            // refused, retryable (§5.3).
            let last = g.last_stream;
            let mut ids: Vec<u64> = self
                .streams
                .iter()
                .filter(|(id, s)| **id > last && s.send_conn == Some(conn) && s.reset.is_none())
                .map(|(id, _)| *id)
                .collect();
            ids.sort_unstable();
            for id in ids {
                self.reset_local(id, ErrorCode::REFUSED_STREAM, true, false);
            }
        }
        self.events.push_back(Event::GoAway {
            conn,
            last_stream: g.last_stream,
        });
    }
}

/// Header bytes a DATA frame of stream `id` costs (PROTOCOL.md §2).
pub fn data_overhead(id: u64) -> usize {
    header_len(id)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::{Data as DataFrame, HELLO_LEN};

    fn cfg() -> Config {
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
        Open::encode_parts(&mut b, 5, Kind::Http, "a:80", b"", false);
        Open::encode_parts(&mut b, 3, Kind::Http, "a:80", b"", false);
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
        Open::encode_parts(&mut b, 1, Kind::Tunnel, "a:1", b"", false);
        Open::encode_parts(&mut b, 2, Kind::Tunnel, "a:2", b"ok", false);
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
            Open::encode_parts(&mut b, id, Kind::Tunnel, "a:1", b"", false);
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
        // 1 GiB holds 330 stream windows of 3.25 MB; connection credit bounds the buffers
        // instead, so the session takes its full max_streams.
        let mut p = Pair::with(Config::default(), Config::default());
        assert_eq!(Config::default().legacy_max_streams(), 330);
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
        }
        .encode(&mut b);
        remote.handle_input(r, &b, t);
        assert_eq!(remote.stream_limit(), 2);
        // Connection credit is not counted: two full stream windows and a third OPEN's bytes
        // (beyond the connection window) are no error, the third stream is refused.
        b.clear();
        let window = c.stream_window as usize;
        for id in 1..=3u64 {
            Open::encode_parts(&mut b, id, Kind::Tunnel, "a:1", b"x", false);
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
        // 5 header + 3 kind/len + 3 target bytes of OPEN, 5-byte DATA headers.
        let overhead = out.len() - 40_000;
        assert_eq!(overhead, (5 + 3 + 3) + 5 * (sizes.len() - 1));
        assert_eq!(data_overhead(id), 5);
    }
}
