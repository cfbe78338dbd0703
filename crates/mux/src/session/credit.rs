//! Credit flow control (PROTOCOL.md §4.1, §4.2).

use super::{ConnId, Session};
use crate::error::ConnError;
use crate::frame::{Frame, Window};

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

    pub(super) fn queue_window(&mut self, id: u64, inc: u64, prefer: Option<ConnId>) {
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
}
