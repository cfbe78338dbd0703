//! One task per pool connection: feeds received bytes into the session and
//! writes what the session has for this lane, keeping the kernel's unsent
//! queue small (`TCP_NOTSENT_LOWAT`) and reporting its send queue (`SIOCOUTQ`),
//! congestion window and path estimate (`TCP_INFO`: delivery rate, min RTT,
//! not-sent bytes, app-limited) to the session's scheduling policy.
//!
//! Interactive before bulk across lanes: while another lane carries a page's unacknowledged
//! bytes, a lane whose unacknowledged bytes are all bulk ([`mux::Session::lane_is_bulk`]) is
//! paced down to [`BULK_YIELD`] of its delivery rate free of any cap (`SO_MAX_PACING_RATE`),
//! and released [`HOLD_ROUND_TRIPS`] minimum RTTs after that stops (at once when the lane gets
//! interactive bytes of its own: they are not to leave at the held rate), as the QUIC
//! carrier's `rate` controller does for its connections (`crate::rate`); within a lane the
//! session sends interactive directions first.
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
        let (close, deadline, held, own) = shared.op(|i| {
            let t = now();
            if i.session.poll_timeout().is_some_and(|d| d <= t) {
                i.session.handle_timeout(t);
            }
            let held = i.session.lane_is_bulk(conn) && i.session.interactive_lanes() > 0;
            let own = i.session.lane_is_interactive(conn);
            i.session.poll_transmit(conn, DEFAULT_WRITE_CHUNK, &mut buf);
            // Closing: the GOAWAY is in `buf`. Shutting down (after the
            // grace period): this last chunk goes, the rest is abandoned.
            let close = i.session.wants_close(conn) || i.shutting_down;
            (close, i.session.poll_timeout(), held, own)
        });
        hold.update(now(), held, own, conn, probe);
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
        let refresh = (kernel > 0).then(|| now() + DEFAULT_OUTSTANDING_REFRESH);
        let wake = match (deadline, refresh) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
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

/// Lowest pacing cap of a held-back lane, bytes per second.
const MIN_HOLD_RATE: u64 = 32 * 1024;

/// Holds a bulk lane back while another lane carries interactive bytes (module doc).
#[derive(Default)]
struct Hold {
    /// The pacing cap in force, bytes per second.
    cap: Option<u64>,
    /// Until when the cap stays once no longer wanted.
    until: Option<Instant>,
    /// The lane's latest delivery-rate sample taken free of any cap (not application-limited,
    /// at least [`SETTLE_ROUND_TRIPS`] minimum RTTs after the last release), bytes per second:
    /// what a hold is a fraction of. A sample taken while held, or soon after, measures the
    /// cap itself, and 1/8 of it again and again would pace a lane that is held often down
    /// to [`MIN_HOLD_RATE`].
    free_rate: u64,
    /// When the last cap was removed.
    released: Option<Instant>,
}

/// Round trips after a release before the lane's delivery-rate samples count as free of the
/// cap again: a sample covers the latest round trip's deliveries.
const SETTLE_ROUND_TRIPS: u32 = 2;

impl Hold {
    /// `want`: the session says this lane is bulk while another carries interactive bytes;
    /// `own`: this lane carries interactive bytes itself, which are not held back, so the
    /// cap goes at once rather than [`HOLD_ROUND_TRIPS`] later. `t`: now.
    fn update(&mut self, t: Instant, want: bool, own: bool, conn: ConnId, probe: &dyn Probe) {
        let info = probe.tcp_info();
        let min_rtt = info.map_or(Duration::from_millis(100), |i| {
            Duration::from_micros(u64::from(i.min_rtt_us.max(1)))
        });
        let rate = info.map_or(0, |i| i.delivery_rate);
        let settled = self
            .released
            .is_none_or(|r| t >= r + min_rtt * SETTLE_ROUND_TRIPS);
        if self.cap.is_none()
            && settled
            && rate > 0
            && !info.is_some_and(|i| i.delivery_rate_app_limited)
        {
            self.free_rate = rate;
        }
        if want {
            self.until = Some(t + min_rtt * HOLD_ROUND_TRIPS);
            if self.cap.is_none() {
                // The sample now may be reduced by a recent hold, or be news: the larger.
                let base = rate.max(self.free_rate);
                let cap = ((base as f64 * BULK_YIELD) as u64).max(MIN_HOLD_RATE);
                match probe.set_max_pacing_rate(cap) {
                    Ok(()) => {
                        tracing::trace!(%conn, cap, "bulk lane held back");
                        self.cap = Some(cap);
                    }
                    Err(e) => tracing::debug!(%conn, error = %e, "pacing cap not set"),
                }
            }
        } else if self.cap.is_some() && (own || self.until.is_none_or(|u| t >= u)) {
            if let Err(e) = probe.set_max_pacing_rate(u64::MAX) {
                tracing::debug!(%conn, error = %e, "pacing cap not removed");
            }
            tracing::trace!(%conn, "bulk lane released");
            self.cap = None;
            self.released = Some(t);
        }
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

    /// Records the pacing caps set on it; reports the `TCP_INFO` it is given.
    struct Caps {
        caps: std::sync::Mutex<Vec<u64>>,
        info: std::sync::Mutex<netsys::TcpInfo>,
    }

    impl Caps {
        /// A lane with a 10 s minimum RTT and the given delivery-rate sample.
        fn new(delivery_rate: u64) -> Self {
            Caps {
                caps: Default::default(),
                info: std::sync::Mutex::new(netsys::TcpInfo {
                    min_rtt_us: 10_000_000,
                    delivery_rate,
                    ..netsys::TcpInfo::default()
                }),
            }
        }
        fn caps(&self) -> Vec<u64> {
            self.caps.lock().unwrap().clone()
        }
        fn sample(&self, delivery_rate: u64, app_limited: bool) {
            let mut i = self.info.lock().unwrap();
            i.delivery_rate = delivery_rate;
            i.delivery_rate_app_limited = app_limited;
        }
    }

    impl Probe for Caps {
        fn kernel_outstanding(&self) -> u64 {
            0
        }
        fn tcp_info(&self) -> Option<netsys::TcpInfo> {
            Some(*self.info.lock().unwrap())
        }
        fn peer_addr(&self) -> Option<std::net::SocketAddr> {
            None
        }
        fn local_addr(&self) -> Option<std::net::SocketAddr> {
            None
        }
        fn set_max_pacing_rate(&self, bytes_per_sec: u64) -> std::io::Result<()> {
            self.caps.lock().unwrap().push(bytes_per_sec);
            Ok(())
        }
    }

    #[test]
    fn a_held_lane_keeps_its_cap_between_page_levels_but_not_for_its_own_page_bytes() {
        let conn = mux::ConnId(1);
        let probe = Caps::new(8_000_000);
        let t = Instant::now();
        let mut hold = Hold::default();
        // Held: paced at BULK_YIELD of its delivery rate.
        hold.update(t, true, false, conn, &probe);
        assert_eq!(probe.caps(), [1_000_000]);
        // The page on the other lane paused: the cap stays for HOLD_ROUND_TRIPS min RTTs
        // (20 s here), the gap between a page's levels.
        hold.update(t + Duration::from_secs(1), false, false, conn, &probe);
        assert_eq!(probe.caps(), [1_000_000]);
        // A page's bytes are bound to this lane: the cap goes at once.
        hold.update(t + Duration::from_secs(2), false, true, conn, &probe);
        assert_eq!(probe.caps(), [1_000_000, u64::MAX]);
        assert!(hold.cap.is_none());
    }

    #[test]
    fn a_lane_held_again_is_capped_from_its_rate_before_the_hold_not_the_held_rate() {
        let conn = mux::ConnId(1);
        let probe = Caps::new(8_000_000);
        let t = Instant::now();
        let s = Duration::from_secs;
        let mut hold = Hold::default();
        hold.update(t, true, false, conn, &probe);
        // Held, the lane's samples measure the cap; released, they still do for a round trip.
        probe.sample(1_000_000, false);
        hold.update(t + s(1), false, true, conn, &probe);
        // Held again within the two round trips (20 s here) in which samples settle: the cap
        // comes from the 8 MB/s the lane had free, not 1/8 of the 1 MB/s it was held to.
        hold.update(t + s(2), true, false, conn, &probe);
        assert_eq!(probe.caps(), [1_000_000, u64::MAX, 1_000_000]);
        hold.update(t + s(3), false, true, conn, &probe);
        // Settled, a lower free sample is the lane's rate now (the path slowed)...
        probe.sample(4_000_000, false);
        hold.update(t + s(30), false, false, conn, &probe);
        // ...but an application-limited one only bounds it from below.
        probe.sample(400_000, true);
        hold.update(t + s(31), false, false, conn, &probe);
        hold.update(t + s(32), true, false, conn, &probe);
        assert_eq!(
            probe.caps(),
            [1_000_000, u64::MAX, 1_000_000, u64::MAX, 500_000]
        );
        // A lane never sampled free is capped from the sample it has.
        let fresh = Caps::new(1_600_000);
        let mut hold = Hold::default();
        fresh.sample(1_600_000, true);
        hold.update(t, true, false, conn, &fresh);
        assert_eq!(fresh.caps(), [200_000]);
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
