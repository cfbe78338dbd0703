//! Lane timers (PROTOCOL.md §3.1, §3.6): the HELLO deadline of a new lane, the
//! PING period, the PONG deadline, and the round-trip time a PONG measures.
//!
//! What it does NOT do: read a clock; `now` comes from the driver.

use std::time::Instant;

use super::{ConnId, ConnState, Session};
use crate::error::ConnError;
use crate::frame::{Frame, Ping};

impl Session {
    /// Runs timers due at `now` ([`Session::handle_timeout`]).
    pub(super) fn run_timers(&mut self, now: Instant) {
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

    /// The earliest instant [`Session::run_timers`] has work ([`Session::poll_timeout`]).
    pub(super) fn next_timer(&self) -> Option<Instant> {
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

    pub(super) fn on_ping(&mut self, conn: ConnId, p: Ping, now: Instant) -> Result<(), ConnError> {
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
}
