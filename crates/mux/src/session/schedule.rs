//! Scheduling (PROTOCOL.md §5.1): which lane a stream direction is bound to
//! (by the [`Policy`](crate::Policy) over each lane's [`Load`]), where control
//! frames go, and how a lane's transmit buffer is filled: control frames first,
//! then stream frames within the lane's connection credit, directions that have sent less
//! than [`BULK_BYTES`](crate::policy::BULK_BYTES) before the others: interactive ones by
//! [`send_deadline`](crate::policy::send_deadline): by page, the oldest rank first (a stream's
//! opening or arrival minus the page age its OPEN carried; RFC 9218's order for
//! non-incremental responses of one urgency), except that the first
//! [`FIRST_BYTES`](crate::policy::FIRST_BYTES) of a direction go before the rest of the
//! pages that began less than [`head_window`](crate::Config::head_window) earlier; ties and
//! OPENs in stream order; bulk ones round-robin.
//!
//! A lane's rate sample is fresh when the driver reported it with bytes in flight and
//! not app-limited within the last [`STALE_ROUND_TRIPS`] round trips; otherwise the
//! expected-completion policy takes it as a lower bound.
//!
//! What it does NOT do: pace or measure the link; the driver reports kernel
//! queues, congestion windows and path estimates.

use std::time::Duration;

use super::{ConnId, ConnState, Session, StreamError};
use crate::error::ErrorCode;
use crate::frame::{Data, Open, Reset, Window};
use crate::policy::{Load, Policy};

/// Round trips after which a lane's last fresh rate sample is stale: BBR's bandwidth
/// filter forgets samples after 10 round trips, and so does the expected-completion
/// policy (it then treats the rate as a lower bound, and the idle lane takes new bindings
/// until it has a fresh sample).
pub(crate) const STALE_ROUND_TRIPS: u32 = 10;

/// The shortest age at which a sample is stale, for lanes with sub-millisecond RTTs.
pub(crate) const STALE_MIN: Duration = Duration::from_millis(10);

/// Age after which a lane's rate sample no longer counts as a measurement.
pub(crate) fn stale_after(rtt: Duration) -> Duration {
    (rtt * STALE_ROUND_TRIPS).max(STALE_MIN)
}

impl Session {
    /// Appends frames for `conn` to `out`: control frames first, then stream
    /// frames round-robin over the streams bound here, stopping once about
    /// `max` bytes were added (one frame may overshoot by less than a frame).
    /// Returns the number of bytes appended (0: nothing to send). [`Session::poll_transmit`].
    pub(super) fn transmit(&mut self, conn: ConnId, max: usize, out: &mut Vec<u8>) -> usize {
        let start = out.len();
        let Some(c) = self.conns.get_mut(&conn) else {
            return 0;
        };
        out.extend_from_slice(&c.ctrl);
        c.ctrl.clear();
        if c.state == ConnState::Closing {
            c.sendq.clear();
            c.emitted += (out.len() - start) as u64;
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
                c.send.available()
            } else {
                u64::MAX
            };
            if credit == 0 {
                break;
            }
            // Interactive directions first, earliest send deadline first: a direction's first
            // bytes are due when its page began, its rest a head window later (least attained
            // service for the pages of one window, page order beyond it); first bytes before
            // the rest at one deadline, then stream order; bulk directions round-robin.
            let streams = &self.streams;
            let head = self.cfg.head_window;
            let mut pick = c
                .sendq
                .iter()
                .enumerate()
                .filter_map(|(i, id)| {
                    let s = streams.get(id).filter(|s| s.interactive())?;
                    let tier = s.tier();
                    let due = s.rank.map(|r| crate::policy::send_deadline(r, tier, head));
                    Some((i, (due, tier, *id)))
                })
                .min_by_key(|(_, key)| *key)
                .map_or(0, |(i, _)| i);
            // OPEN ids increase on a lane (§3.2): a stream not opened yet goes after every
            // lower one waiting for its OPEN here, whatever their ranks (an OPEN is one frame).
            let unopened = |id: &u64| streams.get(id).is_some_and(|s| s.open_target.is_some());
            if c.sendq.get(pick).is_some_and(unopened) {
                pick = c
                    .sendq
                    .iter()
                    .enumerate()
                    .filter(|(_, id)| unopened(id))
                    .min_by_key(|(_, id)| **id)
                    .map_or(pick, |(i, _)| i);
            }
            let Some(id) = c.sendq.remove(pick) else {
                break;
            };
            let interactive = self.is_interactive(id);
            let (more, used) = self.emit_one(id, max_frame, credit, out);
            if let Some(c) = self.conns.get_mut(&conn) {
                if c.conn_credit {
                    c.send.spend(used);
                }
                if used > 0 {
                    let at = c.emitted + (out.len() - start) as u64;
                    if interactive {
                        c.interactive_mark = at;
                    } else {
                        c.bulk_mark = at;
                    }
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
        let n = out.len() - start;
        if let Some(c) = self.conns.get_mut(&conn) {
            c.emitted += n as u64;
        }
        n
    }

    pub(super) fn announce(&mut self, conn: ConnId) {
        if let Some(c) = self.conns.get_mut(&conn) {
            if !c.announced {
                c.announced = true;
                self.ready.push_back(conn);
            }
        }
    }

    /// Picks an Up lane by the policy (PROTOCOL.md §5.1); a new stream
    /// (`for_open`) skips lanes whose peer is draining.
    pub(super) fn choose_conn(&mut self, for_open: bool) -> Option<ConnId> {
        self.scratch.clear();
        self.scratch_loads.clear();
        let clock = self.clock;
        // Only expected-completion reads rates and RTTs: the other policies skip the path
        // estimate and the staleness check, which are most of the per-lane cost.
        let rates = self.policy == Policy::ExpectedCompletion;
        for (id, c) in &self.conns {
            if c.state == ConnState::Up && !(for_open && c.peer_draining) {
                let mut l = Load {
                    outstanding: c.outstanding(),
                    streams: c.streams,
                    window: c.window,
                    bulk: c.bulk_out(),
                    ..Load::default()
                };
                if rates {
                    let path = c.path.unwrap_or_default();
                    let rtt = if path.rtt.is_zero() {
                        c.rtt.unwrap_or_default()
                    } else {
                        path.rtt
                    };
                    let stale = match (c.sampled_at, clock) {
                        (Some(at), Some(now)) => {
                            now.saturating_duration_since(at) > stale_after(rtt)
                        }
                        _ => true,
                    };
                    l.rate = path.delivery_rate;
                    l.rtt_us = u64::try_from(rtt.as_micros()).unwrap_or(u64::MAX);
                    l.rate_is_floor = path.app_limited || stale;
                }
                self.scratch.push(*id);
                self.scratch_loads.push(l);
            }
        }
        let i = self
            .policy
            .choose(&self.scratch_loads, &mut self.rr_cursor)?;
        Some(self.scratch[i])
    }

    /// Least-outstanding Up lane for a control frame, preferring `prefer`.
    pub(super) fn control_conn(
        &self,
        prefer: Option<ConnId>,
        exclude: Option<ConnId>,
    ) -> Option<ConnId> {
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

    pub(super) fn bind_send(&mut self, id: u64) -> Result<(), StreamError> {
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
    pub(super) fn account(&mut self, id: u64) {
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
    pub(super) fn emit_one(
        &mut self,
        id: u64,
        max_frame: usize,
        credit: u64,
        out: &mut Vec<u8>,
    ) -> (bool, u64) {
        let lane_page_age = self
            .streams
            .get(&id)
            .and_then(|s| s.send_conn)
            .and_then(|c| self.conns.get(&c))
            .is_some_and(|c| c.page_age);
        let Some(s) = self.streams.get_mut(&id) else {
            return (false, 0);
        };
        if !s.has_send_work() {
            return (false, 0);
        }
        let sendable = s.sendable().min(credit) as usize;
        if let Some(target) = s.open_target.take() {
            // PROTOCOL.md §3.2: OPEN carries the first bytes, and the page age where the
            // lane's peer reads it (as of now: the time the OPEN waited here counts).
            let age_ms = match (s.rank, self.clock) {
                (Some(rank), Some(now)) if lane_page_age => {
                    Some(now.saturating_duration_since(rank).as_millis() as u64)
                }
                _ => None,
            };
            let room = max_frame.saturating_sub(Open::prefix_len(&target, age_ms));
            let n = sendable.min(room);
            let data = s.take_send(n);
            let fin = s.fin_queued && s.send_buf_len == 0;
            Open::encode_parts(out, id, s.kind, &target, &data, fin, age_ms);
            // The stream's starting window beyond the HELLO's initial one, granted right
            // behind its OPEN on the same lane: no round trip (`credit`, "Starting windows").
            // Nothing of the peer's direction has arrived yet, so all unreturned credit is
            // that grant.
            if let Some(increment) = s.recv.take_return(1) {
                Window {
                    stream: id,
                    increment,
                }
                .encode(out);
            }
            s.send.spend(n as u64);
            s.bytes_sent += n as u64;
            s.fin_sent = fin;
            (s.has_send_work(), n as u64)
        } else {
            let n = sendable.min(max_frame);
            let data = s.take_send(n);
            let fin = s.fin_queued && s.send_buf_len == 0;
            Data::encode_parts(out, id, &data, fin);
            s.send.spend(n as u64);
            s.bytes_sent += n as u64;
            s.fin_sent = fin;
            (s.has_send_work(), n as u64)
        }
    }
}
