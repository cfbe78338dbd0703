//! One task per pool connection: feeds received bytes into the session and
//! writes what the session has for this lane, keeping the kernel's unsent
//! queue small (`TCP_NOTSENT_LOWAT`) and reporting its send queue (`SIOCOUTQ`),
//! congestion window and path estimate (`TCP_INFO`: delivery rate, min RTT,
//! not-sent bytes, app-limited) to the session's scheduling policy.
//!
//! Interactive before bulk across lanes: while another lane carries a page's unacknowledged
//! bytes, a lane whose unacknowledged bytes are all bulk ([`mux::Session::lane_is_bulk`]) is
//! fed no faster than [`BULK_YIELD`] of its delivery rate free of any hold (the writer takes
//! bursts of data from the session at that rate; the lane's congestion controller keeps its
//! estimate, [`Hold`]; a transport without `TCP_INFO` is not held), and released
//! [`HOLD_ROUND_TRIPS`] minimum RTTs after that stops (at once when the lane gets interactive
//! bytes of its own: they are not to leave at the held rate), as the QUIC carrier's `rate`
//! controller does for its connections (`crate::rate`); within a lane the session sends
//! interactive directions first. Such a lane, held or not, is also fed only while its bytes in
//! flight and unsent stay under [`BULK_INFLIGHT_GAIN`] × its bandwidth-delay product
//! ([`Hold::bulk_room`]): its congestion window's excess would otherwise sit at the
//! bottleneck in front of the next page's first replies.
//!
//! What it does NOT do: decide placement (the session's policy does) or pace otherwise (the
//! kernel's congestion controller does).

use std::sync::Arc;
use std::time::{Duration, Instant};

use mux::ConnId;
use tokio::io::{AsyncReadExt, AsyncWriteExt, ReadHalf, WriteHalf};
use tokio::sync::Notify;

use crate::carrier::{Carrier, Probe};
use crate::config::{DEFAULT_OUTSTANDING_REFRESH, DEFAULT_WRITE_CHUNK};
use crate::rate::{BULK_YIELD, HOLD_ROUND_TRIPS};
use crate::shared::{now, Lane, Shared};
use crate::stats::LaneState;

/// How long a closing lane keeps reading (and discarding) after its GOAWAY, so
/// that closing with unread bytes does not turn into a TCP reset that could
/// destroy the GOAWAY before the peer reads it.
const LINGER: Duration = Duration::from_secs(2);

/// Runs one connection lane until the transport ends or the session closes it.
/// `preread` holds bytes already read from the carrier (the server peeks at the
/// HELLO). Returns whether the lane completed its HELLO.
pub(crate) async fn run_lane(
    shared: Arc<Shared>,
    carrier: Box<dyn Carrier>,
    preread: Vec<u8>,
    slot: Option<usize>,
) -> bool {
    let probe = carrier.probe();
    let notify = Arc::new(Notify::new());
    let conn = shared.op(|i| {
        let c = i.session.add_connection(now());
        i.lanes.insert(
            c,
            Lane {
                notify: notify.clone(),
                probe: probe.clone(),
                slot,
                was_up: false,
            },
        );
        if let Some(s) = slot.and_then(|s| i.slots.get_mut(s)) {
            s.conn = Some(c);
            s.state = LaneState::Handshake;
        }
        if !preread.is_empty() {
            i.session.handle_input(c, &preread, now());
        }
        c
    });
    let (rd, wr) = tokio::io::split(carrier);
    let reader = reader(&shared, conn, rd);
    let writer = writer(&shared, conn, wr, &notify, probe.as_ref());
    tokio::pin!(reader);
    tokio::pin!(writer);
    tokio::select! {
        r = &mut reader => {
            match r {
                Ok(()) => tracing::info!(%conn, "pool connection closed by peer"),
                Err(e) => tracing::warn!(%conn, error = %e, "pool connection read failed"),
            }
        }
        w = &mut writer => {
            match w {
                Ok(()) => {
                    let _ = tokio::time::timeout(LINGER, &mut reader).await;
                }
                Err(e) => tracing::warn!(%conn, error = %e, "pool connection write failed"),
            }
        }
    }
    let was_up = shared.op(|i| {
        i.session.connection_lost(conn, now());
        let was_up = i.lanes.remove(&conn).is_some_and(|l| l.was_up);
        if let Some(s) = slot.and_then(|s| i.slots.get_mut(s)) {
            s.conn = None;
        }
        was_up
    });
    // Opens waiting for a stream slot must learn when the last lane went (they then fail
    // with `Unavailable` at once).
    shared.open_queue.wake();
    was_up
}

async fn reader(
    shared: &Arc<Shared>,
    conn: ConnId,
    mut rd: ReadHalf<Box<dyn Carrier>>,
) -> std::io::Result<()> {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = rd.read(&mut buf).await?;
        if n == 0 {
            return Ok(());
        }
        shared.op(|i| i.session.handle_input(conn, &buf[..n], now()));
    }
}

async fn writer(
    shared: &Arc<Shared>,
    conn: ConnId,
    mut wr: WriteHalf<Box<dyn Carrier>>,
    notify: &Notify,
    probe: &dyn Probe,
) -> std::io::Result<()> {
    let mut buf = Vec::with_capacity(DEFAULT_WRITE_CHUNK + 32 * 1024);
    let mut kernel = 0u64;
    let mut hold = Hold::default();
    loop {
        buf.clear();
        let info = probe.tcp_info();
        let (close, deadline, waiting) = shared.op(|i| {
            let t = now();
            if i.session.poll_timeout().is_some_and(|d| d <= t) {
                i.session.handle_timeout(t);
            }
            let bulk = i.session.lane_is_bulk(conn);
            let held = bulk && i.session.interactive_lanes() > 0;
            let own = i.session.lane_is_interactive(conn);
            hold.update(t, held, own, conn, info);
            // Control frames always go; data as the hold allows, and on a lane carrying only
            // bulk bytes, as its queue at the bottleneck allows.
            let mut budget = hold.allowance(t);
            if bulk {
                budget = budget.min(hold.bulk_room(info));
            }
            let budget = budget.min(DEFAULT_WRITE_CHUNK);
            i.session.poll_transmit(conn, budget, &mut buf);
            // Closing: the GOAWAY is in `buf`. Shutting down (after the
            // grace period): this last chunk goes, the rest is abandoned.
            let close = i.session.wants_close(conn) || i.shutting_down;
            let waiting = budget == 0 && hold.held.is_some() && i.session.has_transmit(conn);
            (close, i.session.poll_timeout(), waiting)
        });
        hold.spend(buf.len());
        if !buf.is_empty() {
            wr.write_all(&buf).await?;
            // A TLS carrier may keep the last records in its buffer when the socket
            // was full; nothing else would push them out.
            wr.flush().await?;
            kernel = probe.kernel_outstanding();
            report(shared, conn, probe, kernel);
            if !close {
                continue;
            }
        }
        if close {
            let _ = wr.shutdown().await;
            return Ok(());
        }
        let t = now();
        let refresh = (kernel > 0).then(|| t + DEFAULT_OUTSTANDING_REFRESH);
        let refill = waiting.then(|| hold.refilled_at(t)).flatten();
        let wake = [deadline, refresh, refill].into_iter().flatten().min();
        match wake {
            Some(at) => {
                let at = tokio::time::Instant::from_std(at);
                tokio::select! {
                    _ = notify.notified() => {}
                    _ = tokio::time::sleep_until(at) => {}
                }
            }
            None => notify.notified().await,
        }
        let k = probe.kernel_outstanding();
        if k != kernel {
            kernel = k;
            report(shared, conn, probe, k);
        }
    }
}

/// Lowest rate of a held-back lane, bytes per second.
const MIN_HOLD_RATE: u64 = 32 * 1024;

/// A held lane writes in bursts of about this long at its held rate, at least
/// [`MIN_HOLD_BURST`] and at most [`DEFAULT_WRITE_CHUNK`] bytes.
const HOLD_BURST_TIME: Duration = Duration::from_millis(10);

/// Smallest burst a held lane writes: fewer, larger writes (a few segments each).
const MIN_HOLD_BURST: u64 = 16 * 1024;

/// A lane carrying only bulk bytes keeps at most this many bandwidth-delay products in its
/// kernel send queue ([`Hold::bulk_room`]).
const BULK_INFLIGHT_GAIN: f64 = 1.25;

/// The least a lane carrying only bulk bytes may keep in its kernel send queue, bytes.
const MIN_BULK_INFLIGHT: u64 = 2 * DEFAULT_WRITE_CHUNK as u64;

/// Round trips after a release before the lane's delivery-rate samples count as free of the
/// hold again: a sample covers the latest round trip's deliveries.
const SETTLE_ROUND_TRIPS: u32 = 2;

/// Holds a bulk lane back while another lane carries interactive bytes (module doc).
///
/// The writer takes at most [`Hold::allowance`] from the session, so the held lane's sender
/// is application-limited: the kernel marks its delivery-rate samples so, and BBR keeps the
/// path estimate it had instead of learning the held rate. A kernel pacing cap
/// (`SO_MAX_PACING_RATE`) would keep the send queue full at the capped rate, and BBR then
/// takes the capped rate as the path's (its samples are not application-limited): after one
/// hold a BBR lane stayed near the cap for seconds, and the next hold's 1/8 of that came to
/// the floor (benches/notes/2026-11-27-download-lane.md). Sans-IO: the writer passes the time
/// and `TCP_INFO`.
#[derive(Default)]
struct Hold {
    /// The hold in force.
    held: Option<Held>,
    /// Until when the hold stays once no longer wanted.
    until: Option<Instant>,
    /// The lane's latest delivery-rate sample taken free of any hold (not application-limited,
    /// at least [`SETTLE_ROUND_TRIPS`] minimum RTTs after the last release), bytes per second:
    /// what a hold is a fraction of.
    free_rate: u64,
    /// The lane's path rate for [`Hold::bulk_room`]'s BDP.
    path_rate: RateFilter,
    /// When the last hold ended.
    released: Option<Instant>,
}

/// A hold in force: the writer's token bucket.
struct Held {
    /// The held rate, bytes per second.
    cap: u64,
    /// Bytes the lane may write now (below zero after a frame overshot), as of `refilled`.
    tokens: f64,
    /// When `tokens` was last brought up to date.
    refilled: Instant,
}

/// Round trips over which [`RateFilter`] keeps a lane's highest delivery-rate sample (BBR's
/// bandwidth filter spans as many).
const PATH_RATE_ROUNDS: usize = 10;

/// A lane's path rate: the highest delivery-rate sample of its last [`PATH_RATE_ROUNDS`]
/// minimum RTTs, kept as BBR keeps its bandwidth estimate (Linux's `minmax_running_max`).
/// An application-limited sample below the estimate is no news (the sender sent less than the
/// path could take): it neither enters nor ages the filter, so a lane held or kept below its
/// window keeps its estimate. One low sample after a loss lowers nothing while a higher one
/// is less than ten round trips old. A round is a minimum RTT as the latest sample gives it.
#[derive(Default)]
struct RateFilter {
    /// The highest accepted sample of each of the last rounds, bytes per second; 0: none.
    rounds: [u64; PATH_RATE_ROUNDS],
    /// The slot of the round under way.
    current: usize,
    /// When the round under way began.
    began: Option<Instant>,
}

impl RateFilter {
    /// A delivery-rate sample `rate` at `t`, rounds of `round`.
    fn update(&mut self, t: Instant, round: Duration, rate: u64, app_limited: bool) {
        if rate == 0 || (app_limited && rate < self.max()) {
            return;
        }
        let began = *self.began.get_or_insert(t);
        let passed =
            (t.saturating_duration_since(began).as_nanos() / round.as_nanos().max(1)) as usize;
        if passed > 0 {
            for _ in 0..passed.min(PATH_RATE_ROUNDS) {
                self.current = (self.current + 1) % PATH_RATE_ROUNDS;
                self.rounds[self.current] = 0;
            }
            self.began = Some(began + round * passed as u32);
        }
        let slot = &mut self.rounds[self.current];
        *slot = (*slot).max(rate);
    }

    /// The estimate, bytes per second; 0 before any sample.
    fn max(&self) -> u64 {
        self.rounds.iter().copied().max().unwrap_or(0)
    }
}

impl Hold {
    /// `want`: the session says this lane is bulk while another carries interactive bytes;
    /// `own`: this lane carries interactive bytes itself, which are not held back, so the
    /// hold ends at once rather than [`HOLD_ROUND_TRIPS`] later. `t`: now; `info`: the lane's
    /// `TCP_INFO`.
    fn update(
        &mut self,
        t: Instant,
        want: bool,
        own: bool,
        conn: ConnId,
        info: Option<netsys::TcpInfo>,
    ) {
        let min_rtt = info.map_or(Duration::from_millis(100), |i| {
            Duration::from_micros(u64::from(i.min_rtt_us.max(1)))
        });
        let rate = info.map_or(0, |i| i.delivery_rate);
        let settled = self
            .released
            .is_none_or(|r| t >= r + min_rtt * SETTLE_ROUND_TRIPS);
        let app_limited = info.is_some_and(|i| i.delivery_rate_app_limited);
        if self.held.is_none() && settled && rate > 0 && !app_limited {
            self.free_rate = rate;
        }
        self.path_rate.update(t, min_rtt, rate, app_limited);
        // A transport without TCP_INFO (no rate to take a fraction of) is not held.
        if want && info.is_some() {
            self.until = Some(t + min_rtt * HOLD_ROUND_TRIPS);
            if self.held.is_none() {
                // The sample now may still measure a recent hold, or be news: the larger.
                let base = rate.max(self.free_rate);
                let cap = ((base as f64 * BULK_YIELD) as u64).max(MIN_HOLD_RATE);
                tracing::trace!(%conn, cap, "bulk lane held back");
                self.held = Some(Held {
                    cap,
                    tokens: 0.0,
                    refilled: t,
                });
            }
        } else if self.held.is_some() && (own || self.until.is_none_or(|u| t >= u)) {
            tracing::trace!(%conn, "bulk lane released");
            self.held = None;
            self.released = Some(t);
        }
    }

    /// Data bytes a lane carrying only bulk bytes may add to its kernel send queue: up to
    /// [`BULK_INFLIGHT_GAIN`] × its bandwidth-delay product (path rate, [`RateFilter`], ×
    /// minimum RTT) in flight plus unsent (`info`; in flight as the kernel counts it, without
    /// what was selectively acknowledged behind a loss), at least [`MIN_BULK_INFLIGHT`], in
    /// writes of at least [`MIN_HOLD_BURST`]; no limit without an estimate. A sender filling its
    /// congestion window keeps the window's excess over the BDP queued at the bottleneck
    /// (BBR's window is two BDPs), and a page's first replies on another lane wait behind
    /// it; a lane application-limited at 1.25 BDPs keeps that queue under a quarter of a
    /// round trip and the link full.
    fn bulk_room(&self, info: Option<netsys::TcpInfo>) -> usize {
        let Some(i) = info else {
            return usize::MAX;
        };
        let path_rate = self.path_rate.max();
        if path_rate == 0 || i.min_rtt_us == 0 {
            return usize::MAX;
        }
        let bdp = path_rate as f64 * f64::from(i.min_rtt_us) / 1e6;
        let limit = ((bdp * BULK_INFLIGHT_GAIN) as u64).max(MIN_BULK_INFLIGHT);
        let queued = i.in_flight_bytes() + u64::from(i.notsent_bytes);
        let room = limit.saturating_sub(queued);
        if room >= MIN_HOLD_BURST {
            room as usize
        } else {
            0
        }
    }

    /// The burst a held lane at `cap` bytes per second writes at once.
    fn burst(cap: u64) -> f64 {
        let b = (cap as f64 * HOLD_BURST_TIME.as_secs_f64()) as u64;
        b.clamp(MIN_HOLD_BURST, DEFAULT_WRITE_CHUNK as u64) as f64
    }

    /// The held rate in force, bytes per second.
    #[cfg(test)]
    fn cap(&self) -> Option<u64> {
        self.held.as_ref().map(|h| h.cap)
    }

    /// Data bytes the lane may write at `t`: any while not held; while held, a whole burst
    /// once the held rate has earned it since the last, else none.
    fn allowance(&mut self, t: Instant) -> usize {
        let Some(h) = &mut self.held else {
            return usize::MAX;
        };
        let burst = Self::burst(h.cap);
        let since = t.saturating_duration_since(h.refilled);
        h.tokens = (h.tokens + h.cap as f64 * since.as_secs_f64()).min(burst);
        h.refilled = t;
        if h.tokens >= burst {
            h.tokens as usize
        } else {
            0
        }
    }

    /// `n` bytes were written.
    fn spend(&mut self, n: usize) {
        if let Some(h) = &mut self.held {
            h.tokens -= n as f64;
        }
    }

    /// While held, when the next burst is earned (from `t` on).
    fn refilled_at(&self, t: Instant) -> Option<Instant> {
        let h = self.held.as_ref()?;
        let missing = (Self::burst(h.cap) - h.tokens).max(0.0);
        Some(t + Duration::from_secs_f64(missing / h.cap as f64))
    }
}

/// Reports the lane's kernel send queue (`kernel`, `SIOCOUTQ`), congestion window and, on
/// TCP, its path estimate to the session.
fn report(shared: &Arc<Shared>, conn: ConnId, probe: &dyn Probe, kernel: u64) {
    let info = probe.tcp_info();
    let window = info.map_or(0, |t| u64::from(t.snd_cwnd) * u64::from(t.snd_mss));
    let estimate = info.map(|t| path_estimate(&t, kernel));
    shared.op(|i| {
        i.session.set_kernel_outstanding(conn, kernel);
        i.session.set_congestion_window(conn, window);
        if let Some(e) = estimate {
            i.session.set_path_estimate(conn, e, now());
        }
    });
}

/// The expected-completion policy's view of a TCP connection from `TCP_INFO` and its send
/// queue `kernel` (`SIOCOUTQ`: unsent + in flight).
///
/// The rate is the kernel's latest delivery-rate sample, flagged app-limited as the kernel
/// flags it (the policy then takes it as a lower bound); a kernel without delivery-rate
/// samples (before 4.9) gets the window's rate, cwnd × MSS ÷ smoothed RTT. The RTT is the
/// minimum (the smoothed one when the kernel has no minimum).
pub(crate) fn path_estimate(t: &netsys::TcpInfo, kernel: u64) -> mux::PathEstimate {
    let srtt_us = u64::from(t.rtt_us);
    let rtt_us = if t.min_rtt_us > 0 {
        u64::from(t.min_rtt_us)
    } else {
        srtt_us
    };
    let delivery_rate = if t.delivery_rate > 0 {
        t.delivery_rate
    } else {
        (u64::from(t.snd_cwnd) * u64::from(t.snd_mss) * 1_000_000)
            .checked_div(srtt_us)
            .unwrap_or(0)
    };
    let unsent = u64::from(t.notsent_bytes).min(kernel);
    mux::PathEstimate {
        delivery_rate,
        rtt: Duration::from_micros(rtt_us),
        unsent,
        in_flight: kernel - unsent,
        app_limited: t.delivery_rate > 0 && t.delivery_rate_app_limited,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `TCP_INFO` of a lane with a 10 s minimum RTT and this delivery-rate sample.
    fn info(delivery_rate: u64, app_limited: bool) -> Option<netsys::TcpInfo> {
        Some(netsys::TcpInfo {
            min_rtt_us: 10_000_000,
            delivery_rate,
            delivery_rate_app_limited: app_limited,
            ..netsys::TcpInfo::default()
        })
    }

    #[test]
    fn a_held_lane_stays_held_between_page_levels_but_not_for_its_own_page_bytes() {
        let conn = mux::ConnId(1);
        let t = Instant::now();
        let s = Duration::from_secs;
        let mut hold = Hold::default();
        assert_eq!(hold.allowance(t), usize::MAX, "not held: no limit");
        // Held: fed at BULK_YIELD of its delivery rate.
        hold.update(t, true, false, conn, info(8_000_000, false));
        assert_eq!(hold.cap(), Some(1_000_000));
        // The page on the other lane paused: the hold stays for HOLD_ROUND_TRIPS min RTTs
        // (20 s here), the gap between a page's levels.
        hold.update(t + s(1), false, false, conn, info(8_000_000, false));
        assert_eq!(hold.cap(), Some(1_000_000));
        // A page's bytes are bound to this lane: the hold ends at once.
        hold.update(t + s(2), false, true, conn, info(8_000_000, false));
        assert_eq!(hold.cap(), None);
        assert_eq!(hold.allowance(t + s(2)), usize::MAX);
        // Held again, and the page on the other lane done: released HOLD_ROUND_TRIPS later.
        hold.update(t + s(3), true, false, conn, info(8_000_000, false));
        hold.update(t + s(4), false, false, conn, info(8_000_000, false));
        hold.update(t + s(22), false, false, conn, info(8_000_000, false));
        assert!(hold.cap().is_some());
        hold.update(t + s(23), false, false, conn, info(8_000_000, false));
        assert_eq!(hold.cap(), None);
    }

    #[test]
    fn a_lane_held_again_is_held_to_its_rate_before_the_hold_not_the_held_rate() {
        let conn = mux::ConnId(1);
        let t = Instant::now();
        let s = Duration::from_secs;
        let mut caps = Vec::new();
        let mut hold = Hold::default();
        hold.update(t, true, false, conn, info(8_000_000, false));
        caps.extend(hold.cap());
        // Released, the lane's samples still measure the hold for a round trip.
        hold.update(t + s(1), false, true, conn, info(1_000_000, false));
        // Held again within the two round trips (20 s here) in which samples settle: held to
        // 1/8 of the 8 MB/s the lane had free, not of the 1 MB/s it was held to.
        hold.update(t + s(2), true, false, conn, info(1_000_000, false));
        caps.extend(hold.cap());
        hold.update(t + s(3), false, true, conn, info(1_000_000, false));
        // Settled, a lower free sample is the lane's rate now (the path slowed)...
        hold.update(t + s(30), false, false, conn, info(4_000_000, false));
        // ...but an application-limited one only bounds it from below.
        hold.update(t + s(31), false, false, conn, info(400_000, true));
        hold.update(t + s(32), true, false, conn, info(400_000, true));
        caps.extend(hold.cap());
        assert_eq!(caps, [1_000_000, 1_000_000, 500_000]);
        // A lane never sampled free is held to 1/8 of the sample it has, and never below
        // MIN_HOLD_RATE.
        let mut hold = Hold::default();
        hold.update(t, true, false, conn, info(1_600_000, true));
        assert_eq!(hold.cap(), Some(200_000));
        let mut hold = Hold::default();
        hold.update(t, true, false, conn, info(0, false));
        assert_eq!(hold.cap(), Some(MIN_HOLD_RATE));
        let mut hold = Hold::default();
        hold.update(t, true, false, conn, None);
        assert_eq!((hold.cap(), hold.allowance(t)), (None, usize::MAX));
    }

    #[test]
    fn a_held_lane_writes_bursts_at_its_held_rate() {
        let conn = mux::ConnId(1);
        let t0 = Instant::now();
        let mut hold = Hold::default();
        hold.update(t0, true, false, conn, info(8_000_000, false));
        // 1 MB/s: bursts of 16 KiB (10 ms at the held rate is less), none at once.
        assert_eq!(hold.allowance(t0), 0);
        let first = hold.refilled_at(t0).unwrap();
        assert_eq!(first - t0, Duration::from_secs_f64(16_384.0 / 1e6));
        assert_eq!(hold.allowance(first - Duration::from_millis(1)), 0);
        // A writer that wakes when told and writes what it may, each write overshooting by
        // part of a frame, as the session's does: one second carries the held rate.
        let (mut t, mut written, mut writes) = (first, 0u64, 0);
        while t < t0 + Duration::from_secs(1) {
            let n = hold.allowance(t);
            assert!(n == 0 || n >= 16_384, "whole bursts only: {n}");
            if n > 0 {
                hold.spend(n + 300);
                written += n as u64 + 300;
                writes += 1;
            }
            t = hold.refilled_at(t).unwrap();
        }
        assert!(
            (980_000..=1_020_000).contains(&written),
            "{written} bytes in 1 s"
        );
        assert!((59..=61).contains(&writes), "{writes} writes");
        // Released: no limit, and no wake-up for the hold.
        hold.update(t, false, true, conn, info(8_000_000, false));
        assert_eq!(hold.allowance(t), usize::MAX);
        assert_eq!(hold.refilled_at(t), None);
        // A fast lane's bursts are 10 ms of its held rate, up to one write chunk.
        let mut fast = Hold::default();
        fast.update(t0, true, false, conn, info(80_000_000, false));
        assert_eq!(Hold::burst(fast.cap().unwrap()), 64.0 * 1024.0);
        let mut mid = Hold::default();
        mid.update(t0, true, false, conn, info(32_000_000, false));
        assert_eq!(Hold::burst(mid.cap().unwrap()), 40_000.0);
    }

    #[test]
    fn a_lane_carrying_only_bulk_bytes_keeps_a_quarter_bdp_over_its_bdp_in_the_kernel() {
        let conn = mux::ConnId(1);
        let t = Instant::now();
        // 100 ms minimum RTT, MSS 1000, `queued` bytes in flight and none unsent.
        let lane = |rate, app_limited, queued: u32| {
            Some(netsys::TcpInfo {
                min_rtt_us: 100_000,
                delivery_rate: rate,
                delivery_rate_app_limited: app_limited,
                snd_mss: 1000,
                unacked: queued / 1000,
                ..netsys::TcpInfo::default()
            })
        };
        let mut hold = Hold::default();
        // No estimate yet: no limit.
        assert_eq!(hold.bulk_room(lane(0, false, 10_000_000)), usize::MAX);
        assert_eq!(hold.bulk_room(None), usize::MAX);
        // 4 MB/s × 100 ms: a BDP of 400 kB, 500 kB kept in the kernel.
        hold.update(t, false, false, conn, lane(4_000_000, false, 0));
        assert_eq!(hold.bulk_room(lane(4_000_000, false, 0)), 500_000);
        assert_eq!(hold.bulk_room(lane(4_000_000, false, 450_000)), 50_000);
        // Unsent bytes count too.
        let mut unsent = lane(4_000_000, false, 400_000).unwrap();
        unsent.notsent_bytes = 60_000;
        assert_eq!(hold.bulk_room(Some(unsent)), 40_000);
        // Behind a loss, what the peer selectively acknowledged is not in the network.
        let mut hole = lane(4_000_000, false, 900_000).unwrap();
        hole.sacked = 500;
        assert_eq!(hold.bulk_room(Some(hole)), 100_000);
        // Less room than one burst: none (no trickle of small writes).
        assert_eq!(hold.bulk_room(lane(4_000_000, false, 490_000)), 0);
        assert_eq!(hold.bulk_room(lane(4_000_000, false, 900_000)), 0);
        // The limit keeps the lane application-limited: such a sample above the estimate
        // raises it, one below does not lower it.
        hold.update(t, false, false, conn, lane(4_400_000, true, 0));
        assert_eq!(hold.bulk_room(lane(4_400_000, true, 0)), 550_000);
        hold.update(t, false, false, conn, lane(1_000_000, true, 0));
        assert_eq!(hold.bulk_room(lane(1_000_000, true, 0)), 550_000);
        // A hold keeps to the rate sampled free: 1/8 of 4 MB/s, not of 4.4.
        hold.update(t, true, false, conn, lane(1_000_000, true, 0));
        assert_eq!(hold.cap(), Some(500_000));
        // A slow lane keeps at least two write chunks.
        let mut slow = Hold::default();
        slow.update(t, false, false, conn, lane(100_000, false, 0));
        assert_eq!(
            slow.bulk_room(lane(100_000, false, 0)),
            MIN_BULK_INFLIGHT as usize
        );
    }

    #[test]
    fn the_path_rate_is_the_highest_sample_of_ten_round_trips_and_ignores_lower_app_limited_ones() {
        let rtt = Duration::from_millis(100);
        let t = Instant::now();
        let at = |rounds: u32| t + rtt * rounds;
        let mut f = RateFilter::default();
        assert_eq!(f.max(), 0);
        f.update(at(0), rtt, 4_000_000, false);
        // After a loss the samples are lower: the estimate holds for ten round trips...
        for r in 1..10 {
            f.update(at(r), rtt, 2_000_000, false);
            assert_eq!(f.max(), 4_000_000, "round {r}");
        }
        // ...then follows them.
        f.update(at(10), rtt, 2_000_000, false);
        assert_eq!(f.max(), 2_000_000);
        // Application-limited samples below it, for as long as they come, leave it as it is;
        // one above it raises it.
        for r in 11..40 {
            f.update(at(r), rtt, 300_000, true);
        }
        assert_eq!(f.max(), 2_000_000);
        f.update(at(40), rtt, 2_500_000, true);
        assert_eq!(f.max(), 2_500_000);
        // A sample long after the last ages every round before it.
        f.update(at(500), rtt, 1_000_000, false);
        assert_eq!(f.max(), 1_000_000);
        // Several samples in one round: the highest.
        f.update(at(500) + rtt / 3, rtt, 1_500_000, false);
        f.update(at(500) + rtt / 2, rtt, 1_200_000, false);
        assert_eq!(f.max(), 1_500_000);
        // A zero sample (no measurement yet) is none.
        let mut g = RateFilter::default();
        g.update(t, rtt, 0, false);
        assert_eq!(g.max(), 0);
    }

    #[test]
    fn path_estimate_from_tcp_info() {
        let t = netsys::TcpInfo {
            rtt_us: 650_000,
            min_rtt_us: 600_000,
            snd_cwnd: 100,
            snd_mss: 1448,
            delivery_rate: 2_000_000,
            delivery_rate_app_limited: true,
            notsent_bytes: 30_000,
            ..netsys::TcpInfo::default()
        };
        let e = path_estimate(&t, 100_000);
        assert_eq!(e.delivery_rate, 2_000_000);
        assert!(e.app_limited);
        assert_eq!(e.rtt, Duration::from_millis(600));
        assert_eq!((e.unsent, e.in_flight), (30_000, 70_000));
        // An old kernel: no delivery rate, no minimum RTT, no not-sent count.
        let old = netsys::TcpInfo {
            delivery_rate: 0,
            min_rtt_us: 0,
            notsent_bytes: 0,
            ..t
        };
        let e = path_estimate(&old, 100_000);
        assert_eq!(e.delivery_rate, 144_800 * 1_000_000 / 650_000);
        assert!(!e.app_limited);
        assert_eq!(e.rtt, Duration::from_millis(650));
        assert_eq!((e.unsent, e.in_flight), (0, 100_000));
        // The not-sent count never exceeds the send queue (two reads, not one snapshot).
        assert_eq!(path_estimate(&t, 10_000).in_flight, 0);
    }
}
