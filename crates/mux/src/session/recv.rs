//! Receive dispatch (PROTOCOL.md §3): one handler per frame type, called for
//! each frame [`Session::handle_input`] decodes, in order.
//!
//! What it does NOT do: decode bytes (`crate::frame` does) or account credit
//! (`super::credit` does); a handler's error closes the lane it came from.

use std::time::{Duration, Instant};

use bytes::Bytes;

use super::credit::Credit;
use super::{ConnId, ConnState, Event, Session};
use crate::error::{ConnError, ErrorCode};
use crate::frame::{
    Features, Frame, GoAway, Hello, Open, Reset, Role, Window, MAX_PAYLOAD_LEN, VERSION,
};
use crate::stream::Stream;

impl Session {
    pub(super) fn handle_frame(
        &mut self,
        conn: ConnId,
        f: Frame,
        now: Instant,
    ) -> Result<(), ConnError> {
        let state = self.conns.get(&conn).map(|c| c.state);
        if state == Some(ConnState::Handshake) {
            return match f {
                Frame::Hello(h) => self.on_hello(conn, h, now),
                _ => Err(ConnError::Protocol("first frame is not HELLO")),
            };
        }
        match f {
            Frame::Hello(_) => Err(ConnError::Protocol("second HELLO")),
            Frame::Open(o) => self.on_open(conn, o, now),
            Frame::Data(d) => self.on_data(conn, d.stream, d.data, d.fin, now),
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

    pub(super) fn on_hello(
        &mut self,
        conn: ConnId,
        h: Hello,
        now: Instant,
    ) -> Result<(), ConnError> {
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
            c.page_age = h.features.is_some_and(|f| f.contains(Features::PAGE_AGE));
            c.send = Credit::new(h.conn_window.map_or(0, u64::from));
            c.recv = Credit::new(conn_window);
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

    pub(super) fn on_open(&mut self, conn: ConnId, o: Open, now: Instant) -> Result<(), ConnError> {
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
        let refuse =
            self.local_goaway.is_some_and(|last| o.stream > last) || self.at_stream_limit();
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
        let mut s = Stream::new(
            o.kind,
            u64::from(peer.initial_window),
            self.stream_recv_credit(),
        );
        s.recv_conn = Some(conn);
        // Ranked by when its page began as the edge saw it (§5.1), bounded; an OPEN without
        // an age (an edge without the feature) ranks by its arrival.
        let age = Duration::from_millis(o.age_ms.unwrap_or(0));
        s.rank = Some(crate::policy::page_rank(now, age));
        self.highest_accepted = self.highest_accepted.max(o.stream);
        self.recv_windows += s.recv.window();
        self.streams.insert(o.stream, s);
        // Its starting window beyond the HELLO's, granted at accept (`credit`, "Starting
        // windows"), before its first bytes are delivered and consumed; not for a direction
        // that already ended with this OPEN (a request without a body).
        if !o.fin {
            if let Some(w) = self.take_open_grant(o.stream) {
                self.queue_ctrl(conn, &Frame::Window(w));
            }
        }
        if let Some(c) = self.conns.get_mut(&conn) {
            c.streams += 1;
        }
        self.events.push_back(Event::Incoming {
            id: o.stream,
            kind: o.kind,
            target: o.target,
        });
        if !o.data.is_empty() || o.fin {
            self.deliver(o.stream, o.data, o.fin, now);
        }
        Ok(())
    }

    pub(super) fn on_data(
        &mut self,
        conn: ConnId,
        id: u64,
        data: Bytes,
        fin: bool,
        now: Instant,
    ) -> Result<(), ConnError> {
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
        self.deliver(id, data, fin, now);
        Ok(())
    }

    /// Appends received bytes to a stream, enforcing its window (§4.1).
    pub(super) fn deliver(&mut self, id: u64, data: Bytes, fin: bool, now: Instant) {
        let Some(s) = self.streams.get_mut(&id) else {
            return;
        };
        let n = data.len() as u64;
        if s.recv.receive(n).is_err() {
            let lane = s.recv_conn;
            self.reset_local(id, ErrorCode::FLOW_CONTROL_ERROR, false, true);
            self.conn_consumed(lane, n);
            return;
        }
        s.bytes_received += n;
        // Copied out of the connection's receive buffer: a slice would pin the whole read
        // buffer it came from, so a peer sending many tiny frames to a stalled stream could
        // hold far more memory than the stream's window. Small payloads share chunks.
        s.push_recv(&data);
        if fin {
            s.fin_received = true;
        } else {
            self.autotune(id, now);
        }
        self.push_coalesced(Event::Readable(id));
        self.gc(id);
    }

    pub(super) fn on_reset(&mut self, r: Reset) {
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

    pub(super) fn on_window(&mut self, conn: ConnId, w: Window) -> Result<(), ConnError> {
        if w.stream == 0 {
            // Connection credit for this lane (§3.5); ignored where none is in force.
            let Some(c) = self.conns.get_mut(&conn) else {
                return Ok(());
            };
            if !c.conn_credit {
                return Ok(());
            }
            if c.send.grant(u64::from(w.increment)).is_err() {
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
        if s.send.grant(u64::from(w.increment)).is_err() {
            self.reset_local(w.stream, ErrorCode::FLOW_CONTROL_ERROR, false, true);
            return Ok(());
        }
        self.push_coalesced(Event::Writable(w.stream));
        self.account(w.stream);
        Ok(())
    }

    pub(super) fn on_goaway(&mut self, conn: ConnId, g: GoAway) {
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
