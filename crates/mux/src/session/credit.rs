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
//! # Receive-window autotuning
//!
//! A stream's receive window starts at `Config::initial_stream_window` (256 KiB by default)
//! and doubles, up to `Config::stream_window` (the maximum, `link.stream_window_bdp` × BDP, 4 by
//! default), while its reader drains it within about a round trip; a reader that does not keep
//! up keeps the window it has. Growing is the receiver's decision alone: it returns more credit
//! in a WINDOW frame than was consumed (PROTOCOL.md §4.2), which every release's sender simply
//! adds, so the wire and HELLO are unchanged and mixed releases interoperate (an older
//! receiver never grows; an older sender is given credit as before).
//!
//! The rule is quic-go's flow-control auto-tuning (`internal/flowcontrol/
//! base_flow_controller.go`, `maybeAdjustWindowSize`): an epoch starts; once more than half
//! the window has been *consumed* by the reader in it, the window doubles if that took less than
//! `4 × (consumed ÷ window) × RTT` (half the window in under two round trips), and a new epoch
//! starts either way. Like Linux's receive-buffer autotuning (`net/ipv4/tcp_input.c`,
//! `tcp_rcv_space_adjust`, which sizes the buffer from the bytes *copied to the application*
//! per RTT), it measures what the application reads, not what arrives: hyper's adaptive window
//! (`hyper/src/proto/h2/ping.rs`, a BDP estimate of bytes *received* per PING round trip,
//! doubled when a sample reaches 2/3 of the current one) would grow for a reader that stopped
//! while its window filled at line rate. The RTT is the lane's last PING round trip
//! (`timers`); without one yet, nothing grows. Time is the `now` of the input that carries
//! the stream's data: the session has no clock, and [`Session::read`] takes no time, so the
//! decision is made when bytes arrive ([`Session::autotune`]), counting what was read since
//! the epoch began. Reads counted there happened before that arrival, so the elapsed time is
//! never under-estimated and a slow reader is never taken for a fast one.
//!
//! What it gives: a reader of rate `r` settles at a window between `4·r·RTT` and twice that
//! (it stops growing once the window exceeds four of its round trips' worth), capped at the
//! maximum; a reader at line rate reaches the maximum (4 × BDP ≥ `4·r·RTT`); a stalled reader
//! consumes nothing and never grows, so K stalled or slow readers that started at the floor
//! hold about K × 256 KiB, not K maximum windows. From 256 KiB a line-rate reader needs
//! ⌈log2(max ÷ 256 KiB)⌉ doublings, at about one per round trip (a window-limited sender
//! delivers one window per round trip). On the modelled `pacific` link (130 ms, 100 Mbit/s,
//! max 6.5 MB) a reply from the floor carries ≥ 90 % of line rate from the 6th round trip after
//! its open on (tests/link.rs, `a_fast_reader_reaches_line_rate_within_six_round_trips`), and
//! 20 readers at 2 Mbit/s keep 256 KiB windows
//! (`slow_readers_hold_their_initial_window_and_a_moderate_one_what_it_drains`).
//!
//! # Starting windows
//!
//! Growing from 256 KiB costs a reply between about 256 KiB and a few MB one or two extra
//! round trips of the long link (a 1 MB reply on `pacific`: 428 ms instead of 212 ms in
//! tests/link.rs). So a stream starts small only when the session is under memory pressure:
//! a new stream starts at [`Config::start_window`](crate::Config::start_window) of the receive
//! credit the session has *committed* to its streams ([`Session::recv_committed`]: the sum of
//! their windows, buffered or not, until they are forgotten): the headroom left in
//! `Config::initial_window_budget` (32 MiB), at least the floor (`initial_stream_window`,
//! 256 KiB) and at most the maximum. Committed credit, not buffered bytes, is the measure
//! because credit granted to a stream whose reader stalls is memory the peer may fill at any
//! moment; counting only buffered bytes would let a burst of opens each take a maximum
//! window before any data arrived. Each start adds at most `max(budget − committed, floor)`, so
//! **K streams opened one after another whose readers never read commit (and buffer) at most
//! `initial_window_budget + K × initial_stream_window`** (32 MiB + K × 256 KiB; tests/link.rs,
//! `stalled_readers_opened_one_after_another_stay_within_the_budget_plus_a_floor_each`); growth
//! adds to the commitment only for readers that keep up. This is Linux's answer to the same
//! problem moved from the host to the session: TCP sockets get generous receive buffers until
//! the host's socket memory passes `tcp_mem`'s pressure threshold, after which receive windows
//! stop growing (`tcp_grow_window`, `tcp_clamp_window` check the pressure flag) and a socket
//! whose buffer is half full has its advertised window cut to a few segments
//! (`__tcp_select_window`). HTTP/2 stacks pick one initial stream window per
//! connection instead: hyper's client 2 MiB per stream under a 5 MiB connection window
//! (`proto/h2/client.rs`), which bounds what stalled streams hold by holding back all of them
//! together; with its adaptive window, the RFC 9113 default 65 535 grown by BDP samples, which
//! costs every early reply the round trips of growth.
//!
//! The HELLO still advertises the floor as every stream's initial window, so the extra is
//! granted the way growth is, in a WINDOW frame: the edge, which opens streams, puts it right
//! behind the stream's OPEN on the same connection (`schedule`), so it reaches the remote
//! before the request does and costs no round trip; the remote grants it at accept, for uploads
//! (`recv`). A sender of any release adds a WINDOW's increment to the stream's credit, and a
//! WINDOW behind its OPEN on the same connection always finds the stream, so mixed releases
//! interoperate: an older receiver starts every stream at its HELLO's window, as before.
//!
//! Connection credit does not autotune: its window (`Config::conn_window`, 256 MiB) is at
//! least the largest stream window (`Config::validate`), so one stream can never be limited by
//! it, and a connection carries at most line rate, which one stream's maximum window already
//! covers; 256 MiB only binds when streams that do not read hold it, which is the memory bound
//! it exists for. The same [`Credit`] type serves it with its maximum equal to its window.
//!
//! What it does NOT do: encode frames or choose lanes (the session does), or
//! hold the bytes themselves (`crate::stream` does).

use std::time::{Duration, Instant};

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
    /// Receive side: the largest `window` may grow to; equal to `window`: never grows.
    max: u64,
    /// Receive side: bytes consumed in total.
    consumed: u64,
    /// Receive side: start of the auto-tuning epoch (when, and `consumed` then); `None`
    /// until the first arrival.
    epoch: Option<(Instant, u64)>,
}

/// The sender used more credit than it held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Exceeded;

impl Credit {
    /// `window` bytes of credit, all held by the sender.
    pub fn new(window: u64) -> Credit {
        Credit::tuned(window, window)
    }

    /// Receive side: `initial` bytes of credit, the window growing up to `max` while the
    /// reader keeps up ([`Credit::autotune`]).
    pub fn tuned(initial: u64, max: u64) -> Credit {
        Credit {
            window: initial,
            available: initial,
            unacked: 0,
            max: max.max(initial),
            consumed: 0,
            epoch: None,
        }
    }

    /// Receive side, before anything arrived: widens the window to `to` (at most the
    /// maximum). The increase counts as consumed-and-unreturned, so the next
    /// [`Credit::take_return`] grants it to the sender, which started with the smaller
    /// window the HELLO advertises.
    pub fn raise(&mut self, to: u64) {
        let to = to.min(self.max);
        if to > self.window {
            self.unacked += to - self.window;
            self.window = to;
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

    /// Receive side: bytes consumed whose credit has not been returned yet.
    #[cfg(test)]
    pub fn unreturned(&self) -> u64 {
        self.unacked
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
        self.consumed += n;
    }

    /// Receive side, when bytes arrive at `now` on a lane whose round trip is `rtt`: doubles
    /// the window (up to the maximum) if the reader consumed more than half of it in this
    /// epoch faster than `4 × fraction × rtt` (quic-go's rule, module doc). Returns how many
    /// bytes the window grew by; they are added to the credit to return, so the next
    /// [`Credit::take_return`] grants them to the sender.
    pub fn autotune(&mut self, now: Instant, rtt: Option<Duration>) -> u64 {
        if self.window >= self.max {
            return 0;
        }
        let Some(rtt) = rtt.filter(|r| !r.is_zero()) else {
            return 0;
        };
        let Some((start, base)) = self.epoch else {
            self.epoch = Some((now, self.consumed));
            return 0;
        };
        let read = self.consumed - base;
        if read * 2 <= self.window {
            return 0;
        }
        self.epoch = Some((now, self.consumed));
        let elapsed = now.saturating_duration_since(start).as_nanos();
        // elapsed < 4 × (read ÷ window) × rtt, in integers.
        if elapsed * u128::from(self.window) >= 4 * u128::from(read) * rtt.as_nanos() {
            return 0;
        }
        let grown = (self.window * 2).min(self.max);
        let by = grown - self.window;
        self.window = grown;
        self.unacked += by;
        by
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
    /// the connection window and the initial stream window has gathered (§4.2).
    pub(super) fn conn_consumed(&mut self, lane: Option<ConnId>, n: u64) {
        let threshold = u64::from(self.cfg.conn_window.min(self.cfg.initial_window()) / 4).max(1);
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

    /// Receive credit committed to all streams, bytes: the sum of their receive windows
    /// (bytes buffered + credit the peer holds + consumed bytes not yet returned) until they
    /// are forgotten, kept as streams come, grow and go, so an open costs no walk over the
    /// streams. At least what the peer may make us buffer: a direction that ended (FIN or
    /// reset) still counts its whole window until the application releases the stream.
    pub(crate) fn recv_committed(&self) -> u64 {
        self.recv_windows
    }

    /// Receive credit of a new stream: the HELLO's initial window, widened at once to
    /// `Config::start_window` of what the session has committed (module doc, "Starting
    /// windows"); the widening is unreturned credit, granted in a WINDOW right behind the
    /// stream's OPEN on the edge (`schedule`) and at accept on the remote
    /// ([`Session::take_open_grant`]).
    pub(super) fn stream_recv_credit(&self) -> Credit {
        let mut c = Credit::tuned(
            u64::from(self.cfg.initial_window()),
            u64::from(self.cfg.stream_window),
        );
        c.raise(self.cfg.start_window(self.recv_committed()));
        c
    }

    /// The WINDOW that grants stream `id` its starting window beyond the HELLO's initial
    /// one, taken once, before the peer's first bytes were consumed; `None` if it starts at
    /// the initial window.
    pub(super) fn take_open_grant(&mut self, id: u64) -> Option<Window> {
        let s = self.streams.get_mut(&id)?;
        let increment = s.recv.take_return(1)?;
        Some(Window {
            stream: id,
            increment,
        })
    }

    /// Bytes of stream `id` arrived at `now`: grows its window if its reader keeps up
    /// ([`Credit::autotune`]) and grants the growth at once.
    pub(super) fn autotune(&mut self, id: u64, now: Instant) {
        let Some(s) = self.streams.get_mut(&id) else {
            return;
        };
        if s.fin_received || s.reset.is_some() {
            return;
        }
        let rtt = s
            .recv_conn
            .and_then(|c| self.conns.get(&c))
            .and_then(|c| c.rtt);
        let grown = s.recv.autotune(now, rtt);
        if grown == 0 {
            return;
        }
        self.recv_windows += grown;
        let Some(s) = self.streams.get_mut(&id) else {
            return;
        };
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

#[cfg(test)]
mod tests {
    use super::*;

    const RTT: Duration = Duration::from_millis(100);

    /// Receive-side invariant: what the sender holds plus what was consumed and not
    /// returned plus what is buffered is the window.
    fn conserved(c: &Credit, buffered: u64) -> bool {
        c.available() + c.unacked + buffered == c.window()
    }

    #[test]
    fn send_side_spends_and_is_granted_up_to_the_protocol_maximum() {
        let mut c = Credit::new(1000);
        c.spend(400);
        assert_eq!(c.available(), 600);
        c.grant(400).unwrap();
        assert_eq!(c.available(), 1000);
        assert_eq!(c.grant(MAX_CREDIT), Err(Exceeded));
    }

    #[test]
    fn receive_side_returns_credit_in_steps_and_rejects_overruns() {
        let mut c = Credit::new(1000);
        assert_eq!(c.receive(1001), Err(Exceeded));
        assert_eq!(c.available(), 1000, "an overrun counts nothing");
        c.receive(600).unwrap();
        assert_eq!(c.held(), 600);
        c.consume(200);
        assert_eq!(c.take_return(250), None, "below the threshold");
        c.consume(100);
        assert_eq!(c.take_return(250), Some(300));
        assert!(conserved(&c, 300));
        assert_eq!(c.take_return(0), None, "nothing consumed, nothing returned");
    }

    /// Reads `n` bytes arriving at `t`: receive, consume, then the arrival-time check.
    fn drain(c: &mut Credit, n: u64, t: Instant) -> u64 {
        c.receive(n).unwrap();
        c.consume(n);
        let grown = c.autotune(t, Some(RTT));
        c.take_return(1);
        grown
    }

    #[test]
    fn a_reader_that_keeps_up_doubles_the_window_up_to_the_maximum() {
        let t = Instant::now();
        let mut c = Credit::tuned(1000, 5000);
        assert_eq!(
            c.autotune(t, Some(RTT)),
            0,
            "the first arrival starts the epoch"
        );
        // The whole window read within a round trip: doubles.
        assert_eq!(drain(&mut c, 1000, t + RTT / 2), 1000);
        assert_eq!(c.window(), 2000);
        // The growth is returned with the consumed bytes: the sender holds the new window.
        assert_eq!(c.available(), 2000);
        assert_eq!(drain(&mut c, 2000, t + RTT), 2000);
        assert_eq!(
            drain(&mut c, 4000, t + RTT * 3 / 2),
            1000,
            "capped at the maximum"
        );
        assert_eq!(c.window(), 5000);
        assert_eq!(drain(&mut c, 5000, t + RTT * 2), 0);
        assert!(conserved(&c, 0));
    }

    #[test]
    fn a_stalled_or_slow_reader_keeps_its_window() {
        let t = Instant::now();
        let mut c = Credit::tuned(1000, 1_000_000);
        c.autotune(t, Some(RTT));
        // Stalled: the window fills, nothing is read, arrivals go on: never grows.
        c.receive(1000).unwrap();
        for k in 1..100 {
            assert_eq!(c.autotune(t + RTT * k, Some(RTT)), 0);
        }
        assert_eq!(c.window(), 1000);
        // Slow: 600 bytes (over half the window) read over three round trips, more than
        // 4 × 0.6 × RTT = 2.4 RTT: no growth.
        c.consume(600);
        c.take_return(1);
        assert_eq!(c.autotune(t + RTT * 103, Some(RTT)), 0);
        assert_eq!(c.window(), 1000);
        assert!(conserved(&c, 400));
    }

    #[test]
    fn without_a_round_trip_time_or_below_half_a_window_nothing_grows() {
        let t = Instant::now();
        let mut c = Credit::tuned(1000, 8000);
        c.autotune(t, None);
        c.receive(1000).unwrap();
        c.consume(1000);
        assert_eq!(c.autotune(t, None), 0, "no RTT sample yet");
        let mut c = Credit::tuned(1000, 8000);
        c.autotune(t, Some(RTT));
        c.receive(500).unwrap();
        c.consume(500);
        assert_eq!(
            c.autotune(t + RTT / 10, Some(RTT)),
            0,
            "half a window is no sample"
        );
        let mut fixed = Credit::new(1000);
        fixed.autotune(t, Some(RTT));
        fixed.receive(1000).unwrap();
        fixed.consume(1000);
        assert_eq!(
            fixed.autotune(t, Some(RTT)),
            0,
            "a fixed window never grows"
        );
    }
}
