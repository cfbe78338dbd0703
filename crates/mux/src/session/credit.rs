//! Credit flow control (PROTOCOL.md §4.1, §4.2): one value type, [`Credit`],
//! for both directions of both levels (a stream's and a connection's), and the
//! session's credit-return path that sends WINDOW frames.
//!
//! A sender spends [`Credit::available`] and gets more by [`Credit::grant`]; a
//! receiver counts what arrives against the same figure ([`Credit::receive`]),
//! counts what its reader consumed ([`Credit::consume`]) and returns it in one
//! WINDOW once enough has gathered ([`Credit::take_return`]). Invariant on the
//! receive side while the direction is open: bytes buffered + `available` +
//! `unacked` = `window`.
//!
//! What it does NOT do: encode frames or choose lanes (the session does), or
//! hold the bytes themselves (`crate::stream` does).

use super::{ConnId, Session};
use crate::error::ConnError;
use crate::frame::{Frame, Window};

/// Largest credit a sender may hold, bytes (PROTOCOL.md §4.1: 2^31 − 1).
pub(crate) const MAX_CREDIT: u64 = i32::MAX as u64;

/// Flow-control credit of one direction of a stream or a connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Credit {
    /// Receive side: credit outstanding when nothing is buffered or unreturned (the window
    /// granted to the sender). Send side: the credit first granted.
    window: u64,
    /// Credit the sender still holds, bytes.
    available: u64,
    /// Receive side: bytes read or discarded whose credit has not been returned yet.
    unacked: u64,
}

/// The sender used more credit than it held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Exceeded;

impl Credit {
    /// `window` bytes of credit, all held by the sender.
    pub fn new(window: u64) -> Credit {
        Credit {
            window,
            available: window,
            unacked: 0,
        }
    }

    /// Credit the sender holds, bytes.
    pub fn available(&self) -> u64 {
        self.available
    }

    /// The window: what the receiver grants when nothing is held.
    pub fn window(&self) -> u64 {
        self.window
    }

    /// Receive side: credit in use (bytes buffered or unreturned), `window - available`.
    pub fn held(&self) -> u64 {
        self.window.saturating_sub(self.available)
    }

    /// Send side: `n` bytes (at most [`Credit::available`]) were sent.
    pub fn spend(&mut self, n: u64) {
        debug_assert!(n <= self.available);
        self.available -= n.min(self.available);
    }

    /// Send side: the receiver returned `inc` bytes of credit; beyond [`MAX_CREDIT`] held at
    /// once is an error (PROTOCOL.md §4.1).
    pub fn grant(&mut self, inc: u64) -> Result<(), Exceeded> {
        self.available += inc;
        if self.available > MAX_CREDIT {
            return Err(Exceeded);
        }
        Ok(())
    }

    /// Receive side: `n` bytes arrived; more than the sender held is an error and counts
    /// nothing.
    pub fn receive(&mut self, n: u64) -> Result<(), Exceeded> {
        if n > self.available {
            return Err(Exceeded);
        }
        self.available -= n;
        Ok(())
    }

    /// Receive side: `n` bytes that arrived were read or discarded.
    pub fn consume(&mut self, n: u64) {
        self.unacked += n;
    }

    /// Receive side: the increment to send in a WINDOW frame once at least `threshold` bytes
    /// were consumed (PROTOCOL.md §4.2), which the sender then holds again; `None` before.
    pub fn take_return(&mut self, threshold: u64) -> Option<u32> {
        if self.unacked == 0 || self.unacked < threshold {
            return None;
        }
        let inc = self.unacked.min(MAX_CREDIT);
        self.unacked -= inc;
        self.available += inc;
        Some(inc as u32)
    }
}

impl Session {
    /// Counts `n` bytes of OPEN/DATA payload received on `conn` against its connection credit
    /// (PROTOCOL.md §4.1); more than the peer holds closes the connection.
    pub(super) fn conn_received(&mut self, conn: ConnId, n: u64) -> Result<(), ConnError> {
        let Some(c) = self.conns.get_mut(&conn) else {
            return Ok(());
        };
        if !c.conn_credit {
            return Ok(());
        }
        c.recv.receive(n).map_err(|Exceeded| {
            ConnError::FlowControl("more stream data than the connection's credit")
        })
    }

    /// `n` bytes that arrived on `lane` were read or discarded: their connection credit goes
    /// back to the peer, in one WINDOW for stream 0 on that lane once at least a quarter of
    /// the smaller of the two windows has gathered (§4.2).
    pub(super) fn conn_consumed(&mut self, lane: Option<ConnId>, n: u64) {
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
        c.recv.consume(n);
        if let Some(increment) = c.recv.take_return(threshold) {
            self.queue_ctrl(
                conn,
                &Frame::Window(Window {
                    stream: 0,
                    increment,
                }),
            );
        }
    }

    /// `n` bytes of stream `id` were read: its credit goes back to the peer once a quarter of
    /// the window was consumed (§4.2), so the peer never waits a round trip with an empty
    /// window; nothing goes back once the peer's direction ended or the stream was reset.
    pub(super) fn stream_consumed(&mut self, id: u64, n: u64) {
        let Some(s) = self.streams.get_mut(&id) else {
            return;
        };
        s.recv.consume(n);
        if s.fin_received || s.reset.is_some() {
            return;
        }
        let threshold = (s.recv.window() / 4).max(1);
        if let Some(inc) = s.recv.take_return(threshold) {
            let prefer = s.recv_conn;
            self.queue_window(id, inc, prefer);
        }
    }

    fn queue_window(&mut self, id: u64, increment: u32, prefer: Option<ConnId>) {
        if let Some(conn) = self.control_conn(prefer, None) {
            self.queue_ctrl(
                conn,
                &Frame::Window(Window {
                    stream: id,
                    increment,
                }),
            );
        }
    }
}
