//! Ends of streams and lanes (PROTOCOL.md §4.3, §5.4, §6): local resets,
//! unbinding a stream from its lanes, forgetting a released stream, failing the
//! streams of a lost lane, closing a lane with GOAWAY.
//!
//! What it does NOT do: decide when; the public operations and the receive
//! path call in here.

use bytes::BytesMut;

use super::{ConnId, ConnState, Event, Session};
use crate::error::{ConnError, ErrorCode};
use crate::frame::{Frame, GoAway, Reset, Role};

impl Session {
    pub(super) fn reset_local(
        &mut self,
        id: u64,
        code: ErrorCode,
        retryable: bool,
        tell_peer: bool,
    ) {
        let Some(s) = self.streams.get_mut(&id) else {
            return;
        };
        if s.reset.is_some() {
            return;
        }
        s.reset = Some((code, retryable));
        // Unread bytes of a finished direction stay readable; everything else is dropped
        // with its storage.
        let discarded = if s.fin_received { 0 } else { s.recv_buf_len };
        s.free_buffers(!s.fin_received);
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

    pub(super) fn unbind(&mut self, id: u64) {
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
    pub(super) fn gc(&mut self, id: u64) {
        let Some(s) = self.streams.get(&id) else {
            return;
        };
        let sent_all = s.reset.is_some() || (s.fin_sent && s.send_buf_len == 0);
        if s.released && sent_all {
            self.unbind(id);
            if let Some(s) = self.streams.remove(&id) {
                debug_assert!(self.recv_windows >= s.recv.window());
                self.recv_windows = self.recv_windows.saturating_sub(s.recv.window());
                if let Some(c) = s.send_conn.and_then(|c| self.conns.get_mut(&c)) {
                    c.queued_streams = c.queued_streams.saturating_sub(s.accounted);
                }
                // Unread bytes of a finished direction go with the stream.
                self.conn_consumed(s.recv_conn, s.recv_buf_len);
                self.events.push_back(Event::StreamFreed(id));
            }
        }
    }

    pub(super) fn fail_streams_on(&mut self, conn: ConnId) {
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
    pub(super) fn close_conn(&mut self, conn: ConnId, e: ConnError) {
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
}
