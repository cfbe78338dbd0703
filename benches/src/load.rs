//! Offered against carried load (seed 001 figure 5a): page loads arrive as a Poisson process at a
//! chosen rate for a fixed window, each loaded by the replay client through the system.
//!
//! Offered load = arrival rate × page bytes × 8 (the rate asked for); the draw's own arrivals
//! offer their count × page bytes × 8 ÷ the window (`arrived`, which a Poisson draw puts a few
//! per cent either side of it). Carried load is measured two ways:
//!
//! - **steady** ([`steady_carried`]): body bytes whose object's last byte arrived between a
//!   warm-up and the end of the arrival window, ÷ that interval. While pages keep arriving a
//!   link that keeps up delivers what arrives and one that does not delivers its capacity. The
//!   warm-up is the point's median page load time, at least a quarter and at most half of the
//!   window (the interval then starts once the first pages' replies are flowing). It is held
//!   against what fell **due** in the interval ([`due_offered`]): the pages that arrived one
//!   mean byte delay (arrival to last byte, weighted by bytes) before it, so that steady ÷ due
//!   is the fraction carried, neither biased by how long one page takes nor moved by the draw
//!   putting more or fewer arrivals into the interval than into the whole window.
//! - **to the last load's end**: body bytes of the completed loads ÷ the time from the start
//!   until the last load ended (an overloaded link shows as carried load levelling off while
//!   the time stretches). It counts the last page's load time as if the link were idle then,
//!   so a link that serves every page at its idle pace still reads window ÷ (window + load
//!   time) of offered: 0.93 with a 3.2 s page in a 40 s window (satellite's Yahoo page).
//!
//! Headers and TCP/IP overhead are not counted on either side; failed loads carry nothing.
//!
//! Each point also gives what the link saw ([`LinkPoint`]: packets, bytes, drops, queueing
//! delay), the draw's load in the link's own bytes (`wire_load`), and a queueing reference
//! computed from the draw's arrivals ([`fifo_waits`]): how long pages would wait at a link that
//! serves whole pages in arrival order at its rate. Near the link's rate a Poisson draw of a
//! few hundred pages moves that wait by several times from one draw to the next; the reference
//! tells a draw that would slow any link's pages from a system that slows them.

use crate::replay::{self, ReplayConfig};
use crate::workload::Workload;
use anyhow::Result;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use std::net::IpAddr;
use std::time::{Duration, Instant};

/// Most page loads in flight at once; arrivals beyond it count as failures (bounded memory).
pub const DEFAULT_MAX_IN_FLIGHT: usize = 400;
/// How long loads may continue after the arrival window closes.
pub const DEFAULT_DRAIN: Duration = Duration::from_secs(60);

/// One point of the curve.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoadPoint {
    /// Link profile.
    pub profile: String,
    /// System label (id and parameters).
    pub system: String,
    /// Workload id.
    pub workload: String,
    /// Offered load in Mbit/s (the rate asked for).
    pub offered_mbit: f64,
    /// Carried load in Mbit/s, to the last load's end (module docs).
    pub carried_mbit: f64,
    /// Load the draw's arrivals offered, Mbit/s (absent in runs made before it was recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arrived_mbit: Option<f64>,
    /// Steady carried load, Mbit/s ([`steady_carried`]; absent in runs made before it was
    /// recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steady_mbit: Option<f64>,
    /// Where the steady interval began, seconds into the window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steady_from_s: Option<f64>,
    /// Load that fell due in the steady interval, Mbit/s ([`due_offered`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub due_mbit: Option<f64>,
    /// Page loads completed.
    pub pages: usize,
    /// Page loads failed (including arrivals refused above the in-flight bound).
    pub failures: usize,
    /// Median PLT of the completed loads, ms.
    pub plt_ms_median: Option<f64>,
    /// The long link's down direction over the point (absent where no link is emulated,
    /// and in runs made before it was recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub down_link: Option<LinkPoint>,
    /// The long link's up direction (edge → remote: requests and acknowledgements).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub up_link: Option<LinkPoint>,
    /// How long pages arrived for, seconds (absent in runs made before it was recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window_s: Option<f64>,
    /// The draw's arrivals as a share of the long link's rate counted in the bytes the link
    /// carried: arrived × (down-link bytes ÷ body bytes of the completed loads) ÷ the rate
    /// (packet headers, replies' headers and retransmissions included; absent without a
    /// link's byte count).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wire_load: Option<f64>,
    /// Queueing reference, computed and not measured ([`fifo_waits`]): the median wait of this
    /// draw's pages in front of a link that serves whole pages first come first served at
    /// its rate, each page taking its body bytes × the point's wire bytes per body byte, ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fifo_wait_ms_median: Option<f64>,
    /// Seed of the point's Poisson arrivals: the run's `--seed` plus the point's index among
    /// its load fractions, so points of different runs with the same seed drew the same
    /// arrivals (absent in runs made before it was recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arrivals_seed: Option<u64>,
    /// UDP datagrams the edge's and the remote's kernels dropped at a full socket receive
    /// buffer during the point (a QUIC pool counts them as loss on the path; every UDP socket
    /// of the namespace is counted; absent where the bed cannot read the counters and in runs
    /// made before they were recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub udp_rcvbuf_drops: Option<UdpDrops>,
}

/// UDP receive-buffer drops of one load point, per proxy namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct UdpDrops {
    /// In the edge's namespace (replies arriving over QUIC).
    pub edge: u64,
    /// In the remote's namespace (requests and acknowledgements over QUIC).
    pub remote: u64,
}

impl UdpDrops {
    /// The drops between two readings `(edge, remote)` of the namespaces' counters; `None`
    /// if any reading is missing. A counter that went down (the namespace was recreated)
    /// gives 0, never a wrapped count.
    pub fn between(
        before: (Option<u64>, Option<u64>),
        after: (Option<u64>, Option<u64>),
    ) -> Option<UdpDrops> {
        Some(UdpDrops {
            edge: after.0?.saturating_sub(before.0?),
            remote: after.1?.saturating_sub(before.1?),
        })
    }
}

#[cfg(test)]
impl LoadPoint {
    /// A Yahoo point with what every point records and nothing else (no link counters, no
    /// window, no steady interval, no reference); tests add the rest with `..`.
    pub(crate) fn sample(
        profile: &str,
        system: &str,
        offered_mbit: f64,
        carried_mbit: f64,
        pages: usize,
        plt_ms: f64,
    ) -> Self {
        LoadPoint {
            profile: profile.into(),
            system: system.into(),
            workload: "yahoo".into(),
            offered_mbit,
            carried_mbit,
            pages,
            failures: 0,
            plt_ms_median: Some(plt_ms),
            down_link: None,
            up_link: None,
            window_s: None,
            arrived_mbit: None,
            steady_mbit: None,
            steady_from_s: None,
            due_mbit: None,
            wire_load: None,
            fifo_wait_ms_median: None,
            arrivals_seed: None,
            udp_rcvbuf_drops: None,
        }
    }
}

/// What one direction of the emulated long link saw during one load point.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LinkPoint {
    /// Packets offered to the link.
    pub packets: u64,
    /// Packets dropped because the drop-tail queue was full.
    pub queue_drops: u64,
    /// Packets dropped by the profile's loss model.
    pub loss_drops: u64,
    /// Mean time a packet waited in the queue before serialization, ms.
    pub queue_wait_ms_mean: f64,
    /// Bytes offered to the link: IP packets, headers and retransmissions included (0 in runs
    /// made before it was recorded).
    #[serde(default)]
    pub bytes: u64,
}

impl LoadPoint {
    /// Carried ÷ offered: steady ÷ due where the point recorded both, else (older runs)
    /// carried to the last load's end ÷ the rate asked for.
    pub fn carried_fraction(&self) -> Option<f64> {
        match (self.steady_mbit, self.due_mbit) {
            (Some(c), Some(a)) if a > 0.0 => Some(c / a),
            _ => (self.offered_mbit > 0.0).then(|| self.carried_mbit / self.offered_mbit),
        }
    }
}

impl LinkPoint {
    /// The difference between two readings of the same direction's counters.
    pub fn between(
        before: &testbed::model::DirectionStats,
        after: &testbed::model::DirectionStats,
    ) -> LinkPoint {
        let queued = after.queued.saturating_sub(before.queued);
        let wait = after.queue_wait_ns.saturating_sub(before.queue_wait_ns);
        LinkPoint {
            packets: after.offered.saturating_sub(before.offered),
            bytes: after.offered_bytes.saturating_sub(before.offered_bytes),
            queue_drops: after.dropped_queue.saturating_sub(before.dropped_queue),
            loss_drops: after.dropped_loss.saturating_sub(before.dropped_loss),
            queue_wait_ms_mean: if queued == 0 {
                0.0
            } else {
                wait as f64 / queued as f64 / 1e6
            },
        }
    }
}

/// What one run at one rate measured (before labelling).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoadRun {
    /// Offered load in Mbit/s (the rate asked for).
    pub offered_mbit: f64,
    /// Load the arrivals offered, Mbit/s.
    pub arrived_mbit: f64,
    /// Carried load in Mbit/s, to the last load's end.
    pub carried_mbit: f64,
    /// Steady carried load, Mbit/s ([`steady_carried`]).
    pub steady_mbit: f64,
    /// Where the steady interval began, seconds into the window.
    pub steady_from_s: f64,
    /// Load that fell due in the steady interval, Mbit/s ([`due_offered`]).
    pub due_mbit: f64,
    /// Completed loads.
    pub pages: usize,
    /// Failed loads.
    pub failures: usize,
    /// PLTs of the completed loads, ms.
    pub plt_ms: Vec<f64>,
}

/// The load points as a markdown section (empty without points): one row per point, with
/// the long link's queue drops, random losses and mean queueing delay where they were recorded.
pub fn markdown(points: &[LoadPoint]) -> String {
    use std::fmt::Write as _;
    if points.is_empty() {
        return String::new();
    }
    let mut s = String::from(
        "\n## Offered load (page loads arriving as a Poisson process)\n\n\
         Offered: the rate asked for; arrived: what the draw's arrivals offered. Steady carried: \
         body bytes delivered from the warm-up (the median page load time, a quarter to half \
         of the window) to the window's end, per second, of what fell due then (the pages that \
         arrived one mean byte delay earlier); carried to the end: body bytes of the \
         completed loads / time until the last one ended (it reads below offered by the last \
         page's load time). Wire load: arrived in the link's bytes (headers and \
         retransmissions included) ÷ its rate. FIFO wait: computed, not measured, the median \
         wait of this draw's pages at a link that serves whole pages first come first served \
         at its rate. Down link: the emulated long link from remote to edge during the \
         point (replies); up link: from edge to remote (requests and acknowledgements). \
         UDP receive-buffer drops: datagrams the edge's and the remote's kernels dropped at a \
         full socket receive buffer during the point (a QUIC pool counts them as loss). \
         Arrivals' seed: points with the same seed drew the same arrivals.\n\n\
         | profile | workload | system | offered Mbit/s | arrived Mbit/s | steady carried Mbit/s | \
         carried to the end Mbit/s | pages | failed | \
         median PLT ms | wire load | FIFO wait ms | down-link queue drops | \
         down-link random losses | \
         down-link mean queue wait ms | up-link queue drops | up-link random losses | \
         up-link mean queue wait ms | UDP receive-buffer drops edge / remote | arrivals' seed |\n\
         |---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    let cells = |l: Option<LinkPoint>| {
        l.map_or((String::new(), String::new(), String::new()), |d| {
            (
                format!("{} of {}", d.queue_drops, d.packets),
                d.loss_drops.to_string(),
                format!("{:.0}", d.queue_wait_ms_mean),
            )
        })
    };
    for p in points {
        let (drops, lost, wait) = cells(p.down_link);
        let (up_drops, up_lost, up_wait) = cells(p.up_link);
        let _ = writeln!(
            s,
            "| {} | {} | {} | {:.1} | {} | {} | {:.1} | {} | {} | {} | {} | {} | {drops} | {lost} | {wait} | {up_drops} | {up_lost} | {up_wait} | {} | {} |",
            p.profile,
            p.workload,
            p.system,
            p.offered_mbit,
            p.arrived_mbit.map_or(String::new(), |a| format!("{a:.1}")),
            p.steady_mbit.map_or(String::new(), |c| {
                let due = p.due_mbit.map_or(String::new(), |d| format!(" of {d:.1} due"));
                let from = p.steady_from_s.map_or(String::new(), |f| format!(" from {f:.0} s"));
                format!("{c:.1}{due}{from}")
            }),
            p.carried_mbit,
            p.pages,
            p.failures,
            p.plt_ms_median.map_or("".into(), |m| format!("{m:.0}")),
            p.wire_load.map_or(String::new(), |l| format!("{l:.2}")),
            p.fifo_wait_ms_median
                .map_or(String::new(), |m| format!("{m:.0}")),
            p.udp_rcvbuf_drops
                .map_or(String::new(), |d| format!("{} / {}", d.edge, d.remote)),
            p.arrivals_seed.map_or(String::new(), |s| s.to_string()),
        );
    }
    s
}

/// Arrival times (seconds from 0) of a Poisson process of `rate` per second over `window`
/// seconds, reproducible from `seed`.
pub fn poisson_arrivals(rate: f64, window: f64, seed: u64) -> Vec<f64> {
    if rate <= 0.0 || window <= 0.0 || !rate.is_finite() {
        return Vec::new();
    }
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut t = 0.0;
    let mut out = Vec::new();
    loop {
        let u: f64 = rng.gen_range(f64::EPSILON..1.0);
        t += -u.ln() / rate;
        if t >= window {
            return out;
        }
        out.push(t);
    }
}

/// The steady carried load of one point: `(from, Mbit/s)`, the body bytes of `completions`
/// (seconds into the window at which an object's last byte arrived, its bytes) whose time lies
/// in `[from, window]`, ÷ `window − from`; `from` is `median_plt` (seconds) bounded to a
/// quarter and half of `window` (a quarter without a median). Objects of loads still in flight
/// at the window's end are not counted: while arrivals continue a link that keeps up has
/// delivered what arrived up to about a page load before, which the warm-up leaves out at the
/// start just as the end leaves it out.
pub fn steady_carried(
    window: f64,
    completions: &[(f64, u64)],
    median_plt: Option<f64>,
) -> (f64, f64) {
    if window <= 0.0 || !window.is_finite() {
        return (0.0, 0.0);
    }
    let from = median_plt
        .filter(|m| m.is_finite())
        .unwrap_or(0.0)
        .clamp(window / 4.0, window / 2.0);
    let bytes: u64 = completions
        .iter()
        .filter(|(t, _)| (from..=window).contains(t))
        .map(|(_, b)| b)
        .sum();
    (from, bytes as f64 * 8.0 / (window - from) / 1e6)
}

/// What fell due in the steady interval `[from, window]`, Mbit/s: the pages of `arrivals`
/// (seconds into the window, `page_bits` each) that arrived in the interval moved back by
/// `delay`, the mean time from a page's arrival to its bytes' delivery (weighted by bytes),
/// clipped to the window's start. A link that keeps up delivers in the interval what fell due
/// in it, whatever the draw put there; one that does not delivers less.
pub fn due_offered(window: f64, from: f64, delay: f64, arrivals: &[f64], page_bits: f64) -> f64 {
    let delay = if delay.is_finite() {
        delay.max(0.0)
    } else {
        0.0
    };
    let (lo, hi) = ((from - delay).max(0.0), (window - delay).max(0.0));
    if hi <= lo {
        return 0.0;
    }
    let n = arrivals.iter().filter(|a| (lo..hi).contains(*a)).count();
    n as f64 * page_bits / (hi - lo) / 1e6
}

/// Each page's wait in a first-come-first-served queue in front of one server (Lindley's
/// recursion): pages arrive at `arrivals` (seconds, ascending) and each takes `service`
/// seconds of the server. With the link's rate as the server and a page's wire bytes as its
/// service this is the queueing a page meets at a link that serves whole pages in arrival
/// order, the order that gives equal pages the least mean wait (serving them side by side
/// makes each wait for the others). It leaves out that a page's objects come in levels a round
/// trip apart, which other pages' bytes fill at the link: a reference for a point's median
/// page, not a bound on it.
pub fn fifo_waits(arrivals: &[f64], service: f64) -> Vec<f64> {
    let service = if service.is_finite() {
        service.max(0.0)
    } else {
        0.0
    };
    let mut out = Vec::with_capacity(arrivals.len());
    let mut wait = 0.0_f64;
    for (k, a) in arrivals.iter().enumerate() {
        if k > 0 {
            wait = (wait + service - (a - arrivals[k - 1])).max(0.0);
        }
        out.push(wait);
    }
    out
}

/// A point's draw counted in the bytes the long link carried, and the queueing reference
/// for it ([`fifo_waits`]). Computed, not measured.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WireReference {
    /// The draw's arrivals as a share of the link's rate in the link's bytes
    /// ([`LoadPoint::wire_load`]).
    pub wire_load: f64,
    /// Median wait of the draw's pages at a link serving whole pages first come first served,
    /// ms ([`LoadPoint::fifo_wait_ms_median`]; absent for a draw without arrivals).
    pub fifo_wait_ms_median: Option<f64>,
}

/// The wire load and queueing reference of a point: `pages` loads of `page_bytes` body bytes
/// each completed while the link's down direction carried `down_bytes`, so each body byte cost
/// `down_bytes ÷ body` bytes on the link; `arrived_mbit` of body arrived as `arrivals`
/// (seconds) at a link of `rate_bps`. `None` when nothing was carried or completed, or the
/// rate is not positive: then there is no bytes-per-body figure to count in.
pub fn wire_reference(
    page_bytes: u64,
    pages: usize,
    down_bytes: u64,
    arrived_mbit: f64,
    rate_bps: f64,
    arrivals: &[f64],
) -> Option<WireReference> {
    let body = pages as f64 * page_bytes as f64;
    if down_bytes == 0 || body <= 0.0 || !rate_bps.is_finite() || rate_bps <= 0.0 {
        return None;
    }
    let per_body = down_bytes as f64 / body;
    let service = page_bytes as f64 * 8.0 * per_body / rate_bps;
    Some(WireReference {
        wire_load: arrived_mbit * per_body / (rate_bps / 1e6),
        fifo_wait_ms_median: crate::stats::median(&fifo_waits(arrivals, service)).map(|s| s * 1e3),
    })
}

/// Page arrival rate that offers `mbit` Mbit/s of `w`'s bytes.
pub fn rate_for(w: &Workload, mbit: f64) -> f64 {
    let bits = w.total_bytes() as f64 * 8.0;
    if bits <= 0.0 {
        0.0
    } else {
        mbit * 1e6 / bits
    }
}

/// Loads `w` at `rate` pages per second for `window`, then waits for the loads in flight.
/// Load k comes from `customers[k % customers.len()]` (as customers of an ISP each have an
/// address, and a proxy may tell pages apart by it); from `cfg.source` when `customers` is
/// empty.
pub async fn run(
    w: &Workload,
    cfg: &ReplayConfig,
    rate: f64,
    window: Duration,
    seed: u64,
    customers: &[IpAddr],
) -> Result<LoadRun> {
    let arrivals = poisson_arrivals(rate, window.as_secs_f64(), seed);
    let start = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    let mut tally = Tally::default();
    let mut started = 0usize;
    for &a in &arrivals {
        tokio::time::sleep_until((start + Duration::from_secs_f64(a)).into()).await;
        // Loads that ended leave the set here: the bound counts loads in flight, not every
        // load since the point began.
        while let Some(r) = tasks.try_join_next() {
            tally.record(r);
        }
        if tasks.len() >= DEFAULT_MAX_IN_FLIGHT {
            tally.failures += 1;
            continue;
        }
        let (w, mut cfg) = (w.clone(), cfg.clone());
        if !customers.is_empty() {
            cfg.source = Some(customers[started % customers.len()]);
        }
        started += 1;
        let began = start.elapsed().as_secs_f64();
        tasks.spawn(async move { (began, replay::load_page(&w, &cfg).await) });
    }
    let deadline = Instant::now() + DEFAULT_DRAIN;
    loop {
        match tokio::time::timeout_at(deadline.into(), tasks.join_next()).await {
            Ok(Some(r)) => tally.record(r),
            Ok(None) => break,
            Err(_) => {
                tally.failures += tasks.len();
                tasks.abort_all();
                break;
            }
        }
    }
    let elapsed = start.elapsed().as_secs_f64().max(window.as_secs_f64());
    let page_bits = w.total_bytes() as f64 * 8.0;
    let median = crate::stats::median(&tally.plt).map(|m| m / 1e3);
    let (steady_from_s, steady_mbit) =
        steady_carried(window.as_secs_f64(), &tally.completions, median);
    let delay = if tally.bytes > 0 {
        tally.delay_weighted / tally.bytes as f64
    } else {
        0.0
    };
    let due_mbit = due_offered(
        window.as_secs_f64(),
        steady_from_s,
        delay,
        &arrivals,
        page_bits,
    );
    Ok(LoadRun {
        offered_mbit: rate * page_bits / 1e6,
        arrived_mbit: arrivals.len() as f64 * page_bits / window.as_secs_f64().max(1e-9) / 1e6,
        carried_mbit: tally.bytes as f64 * 8.0 / elapsed / 1e6,
        steady_mbit,
        steady_from_s,
        due_mbit,
        pages: tally.plt.len(),
        failures: tally.failures,
        plt_ms: tally.plt,
    })
}

/// What the loads of one point delivered.
#[derive(Default)]
struct Tally {
    bytes: u64,
    plt: Vec<f64>,
    failures: usize,
    /// Each object of the completed loads: when its last byte arrived (seconds from the
    /// point's start) and its body bytes: the window's arrivals × the page's objects at most.
    completions: Vec<(f64, u64)>,
    /// Σ bytes × seconds from the page's start to the object's last byte over the completed
    /// loads' objects: ÷ `bytes`, their mean byte delay.
    delay_weighted: f64,
}

impl Tally {
    /// Records one load that began `began` seconds into the point.
    fn record(&mut self, r: Result<(f64, Result<replay::PageLoad>), tokio::task::JoinError>) {
        match r {
            Ok((began, Ok(p))) => {
                self.bytes += p.objects.iter().map(|o| o.bytes).sum::<u64>();
                self.completions
                    .extend(p.objects.iter().map(|o| (began + o.done_ms / 1e3, o.bytes)));
                for o in &p.objects {
                    self.delay_weighted += o.bytes as f64 * o.done_ms / 1e3;
                }
                self.plt.push(p.plt_ms);
            }
            _ => self.failures += 1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::{generate_page, page_specs};

    #[test]
    fn arrivals_are_reproducible_with_the_asked_rate() {
        let a = poisson_arrivals(20.0, 100.0, 3);
        assert_eq!(a, poisson_arrivals(20.0, 100.0, 3));
        assert!(a.windows(2).all(|w| w[0] < w[1]));
        assert!(a.iter().all(|t| (0.0..100.0).contains(t)));
        // 2000 expected; a Poisson count is within 5 sigma (~224) of it.
        assert!((a.len() as f64 - 2000.0).abs() < 224.0, "{}", a.len());
        assert!(poisson_arrivals(0.0, 10.0, 1).is_empty());
    }

    #[test]
    fn a_link_point_is_the_difference_of_two_readings() {
        let before = testbed::model::DirectionStats {
            offered: 100,
            offered_bytes: 15_000,
            dropped_queue: 1,
            dropped_loss: 2,
            queued: 99,
            queue_wait_ns: 5_000_000,
            ..Default::default()
        };
        let after = testbed::model::DirectionStats {
            offered: 1100,
            offered_bytes: 1_500_000,
            dropped_queue: 11,
            dropped_loss: 3,
            queued: 1089,
            queue_wait_ns: 5_000_000 + 990 * 40_000_000,
            ..Default::default()
        };
        let p = LinkPoint::between(&before, &after);
        assert_eq!((p.packets, p.queue_drops, p.loss_drops), (1000, 10, 1));
        assert_eq!(p.bytes, 1_485_000);
        assert!((p.queue_wait_ms_mean - 40.0).abs() < 1e-9, "{p:?}");
        assert_eq!(LinkPoint::between(&after, &after).queue_wait_ms_mean, 0.0);
    }

    #[test]
    fn the_markdown_table_has_a_row_per_point() {
        assert_eq!(markdown(&[]), "");
        let pt = LoadPoint::sample("satellite", "direct", 25.0, 15.84, 57, 7308.0);
        let linked = LoadPoint {
            down_link: Some(LinkPoint {
                packets: 20_000,
                queue_drops: 12,
                loss_drops: 20,
                queue_wait_ms_mean: 212.4,
                bytes: 28_000_000,
            }),
            wire_load: Some(0.9572),
            fifo_wait_ms_median: Some(73.4),
            ..pt.clone()
        };
        let steady = LoadPoint {
            arrived_mbit: Some(24.21),
            steady_mbit: Some(23.96),
            steady_from_s: Some(10.0),
            due_mbit: Some(24.5),
            ..pt.clone()
        };
        let seeded = LoadPoint {
            arrivals_seed: Some(14),
            ..pt.clone()
        };
        let dropped = LoadPoint {
            udp_rcvbuf_drops: Some(UdpDrops {
                edge: 1048,
                remote: 0,
            }),
            arrivals_seed: Some(15),
            ..pt.clone()
        };
        let md = markdown(&[pt, linked, steady, seeded, dropped]);
        assert!(md.contains(
            "| satellite | yahoo | direct | 25.0 |  |  | 15.8 | 57 | 0 | 7308 |  |  |  |  |  |  |  |  |  |  |"
        ));
        assert!(
            md.contains("| 7308 | 0.96 | 73 | 12 of 20000 | 20 | 212 |  |  |  |  |"),
            "{md}"
        );
        assert!(
            md.contains("| direct | 25.0 | 24.2 | 24.0 of 24.5 due from 10 s | 15.8 | 57 |"),
            "{md}"
        );
        assert!(md.contains("|  |  |  |  |  |  |  | 14 |\n"), "{md}");
        assert!(md.contains("|  |  |  |  |  |  | 1048 / 0 | 15 |\n"), "{md}");
        // A point of a run made before the drops were recorded (2026-11-29) reads without them.
        let old: LoadPoint = serde_json::from_str(
            r#"{"profile": "pacific", "system": "longhaul-quic N=4 rate pack",
                "workload": "yahoo", "offered_mbit": 90.0, "carried_mbit": 64.67,
                "arrived_mbit": 91.95, "steady_mbit": 62.07, "steady_from_s": 6.61,
                "due_mbit": 93.12, "pages": 404, "failures": 0, "plt_ms_median": 6605.6,
                "down_link": {"packets": 163737, "queue_drops": 0, "loss_drops": 0,
                              "queue_wait_ms_mean": 4.53, "bytes": 241614566},
                "window_s": 20.0, "wire_load": 0.966, "fifo_wait_ms_median": 195.2,
                "arrivals_seed": 6}"#,
        )
        .unwrap();
        assert_eq!(old.udp_rcvbuf_drops, None);
        assert_eq!(old.pages, 404);
    }

    #[test]
    fn udp_drops_are_the_counters_difference_and_need_every_reading() {
        assert_eq!(
            UdpDrops::between((Some(10), Some(3)), (Some(1058), Some(3))),
            Some(UdpDrops {
                edge: 1048,
                remote: 0
            })
        );
        assert_eq!(UdpDrops::between((None, Some(3)), (Some(5), Some(3))), None);
        assert_eq!(UdpDrops::between((Some(1), Some(3)), (Some(5), None)), None);
        // A recreated namespace starts again from 0: no wrapped count.
        assert_eq!(
            UdpDrops::between((Some(500), Some(0)), (Some(20), Some(0))),
            Some(UdpDrops { edge: 0, remote: 0 })
        );
    }

    /// A page of `objects` objects of `bytes` each arriving every `gap` seconds for `window`,
    /// its objects' last bytes arriving evenly over `plt` seconds after it began.
    fn steady_pages(window: f64, gap: f64, objects: u32, bytes: u64, plt: f64) -> Vec<(f64, u64)> {
        let mut out = Vec::new();
        let mut t = gap / 2.0;
        while t < window {
            for k in 1..=objects {
                out.push((t + plt * f64::from(k) / f64::from(objects), bytes));
            }
            t += gap;
        }
        out
    }

    #[test]
    fn a_link_that_keeps_up_carries_what_arrives_whatever_a_page_takes() {
        // 10 pages a second of 10 × 10 kB for 40 s: 8 Mbit/s arrive.
        let arrived = 10.0 * 100_000.0 * 8.0 / 1e6;
        for plt in [0.5, 3.2, 8.0] {
            let c = steady_pages(40.0, 0.1, 10, 10_000, plt);
            let (from, steady) = steady_carried(40.0, &c, Some(plt));
            assert_eq!(from, plt.clamp(10.0, 20.0));
            assert!(
                (steady / arrived - 1.0).abs() < 0.01,
                "{plt}: {steady} of {arrived}"
            );
            // To the last load's end, the same loads read window ÷ (window + page time).
            let total: u64 = c.iter().map(|x| x.1).sum();
            let end = c.iter().map(|x| x.0).fold(0.0, f64::max);
            let to_end = total as f64 * 8.0 / end / 1e6;
            assert!(
                to_end / arrived <= 40.0 / (40.0 + plt - 0.05) + 1e-9,
                "{plt}: {to_end}"
            );
            if plt > 3.0 {
                assert!(to_end / arrived < 0.93, "{plt}: {to_end}");
            }
        }
    }

    #[test]
    fn a_link_that_cannot_keep_up_carries_its_capacity() {
        // Pages of 100 kB arrive at 20 a second (16 Mbit/s) on a link that serves one page at a
        // time at 8 Mbit/s (0.1 s a page): the queue grows and the link carries 8.
        let mut c = Vec::new();
        let mut free = 0.0_f64;
        let mut t = 0.025;
        while t < 40.0 {
            free = free.max(t) + 0.1;
            c.push((free, 100_000));
            t += 0.05;
        }
        let plts: Vec<f64> = Vec::new();
        let (from, steady) = steady_carried(40.0, &c, crate::stats::median(&plts));
        assert_eq!(from, 10.0, "a quarter of the window without a median");
        assert!((steady - 8.0).abs() < 0.1, "{steady}");
    }

    #[test]
    fn the_warm_up_is_the_median_page_within_a_quarter_and_half_of_the_window() {
        let c = [(1.0, 1_000_000), (30.0, 1_000_000), (39.0, 1_000_000)];
        let (from, mbit) = steady_carried(40.0, &c, Some(1.0));
        assert_eq!(from, 10.0);
        assert!((mbit - 16.0 / 30.0).abs() < 1e-12, "{mbit}");
        assert_eq!(steady_carried(40.0, &c, Some(15.0)).0, 15.0);
        let (from, mbit) = steady_carried(40.0, &c, Some(35.0));
        assert_eq!(from, 20.0);
        assert!((mbit - 0.8).abs() < 1e-12, "{mbit}");
        assert_eq!(steady_carried(40.0, &c, None).0, 10.0);
        assert_eq!(steady_carried(40.0, &[], Some(3.0)), (10.0, 0.0));
        assert_eq!(steady_carried(0.0, &c, Some(3.0)), (0.0, 0.0));
    }

    #[test]
    fn what_fell_due_follows_the_arrivals_moved_back_by_the_delay() {
        // One page of 1 Mbit a second at 0.5, 1.5, …, 39.5 s, then 10 more in the last 2 s.
        let mut a: Vec<f64> = (0..40).map(|k| f64::from(k) + 0.5).collect();
        a.extend((0..10).map(|k| 38.0 + f64::from(k) / 5.0));
        // Moved back by 3 s the interval [10, 40] takes the arrivals in [7, 37): 30 of them,
        // not the burst at the end a link could not have delivered by 40 s.
        assert!((due_offered(40.0, 10.0, 3.0, &a, 1e6) - 1.0).abs() < 1e-12);
        // Without delay the burst is due in the interval.
        assert!((due_offered(40.0, 10.0, 0.0, &a, 1e6) - 40.0 / 30.0).abs() < 1e-12);
        // A delay beyond the warm-up clips at the window's start: [0, 25) holds 25.
        assert!((due_offered(40.0, 10.0, 15.0, &a, 1e6) - 1.0).abs() < 1e-12);
        assert_eq!(due_offered(40.0, 10.0, 50.0, &a, 1e6), 0.0);
        assert_eq!(due_offered(40.0, 10.0, f64::NAN, &[], 1e6), 0.0);
    }

    #[test]
    fn carried_fraction_is_steady_over_due_where_recorded() {
        let pt = LoadPoint {
            window_s: Some(40.0),
            ..LoadPoint::sample("satellite", "direct", 45.0, 41.1, 391, 3909.0)
        };
        assert!((pt.carried_fraction().unwrap() - 41.1 / 45.0).abs() < 1e-12);
        let steady = LoadPoint {
            arrived_mbit: Some(45.5),
            steady_mbit: Some(44.0),
            steady_from_s: Some(10.0),
            due_mbit: Some(44.5),
            ..pt.clone()
        };
        assert!((steady.carried_fraction().unwrap() - 44.0 / 44.5).abs() < 1e-12);
        let none = LoadPoint {
            offered_mbit: 0.0,
            ..pt
        };
        assert_eq!(none.carried_fraction(), None);
    }

    #[test]
    fn fifo_waits_queue_pages_in_arrival_order() {
        // Spaced at least a service apart nobody waits.
        assert_eq!(fifo_waits(&[0.0, 1.0, 2.5], 1.0), vec![0.0, 0.0, 0.0]);
        // A burst of three waits one and two services; the next, 0.5 s after the burst's
        // work ends, waits nothing; one 0.5 s after that waits 0.5 s.
        assert_eq!(
            fifo_waits(&[0.0, 0.0, 0.0, 3.5, 4.0], 1.0),
            vec![0.0, 1.0, 2.0, 0.0, 0.5]
        );
        assert!(fifo_waits(&[], 1.0).is_empty());
        assert_eq!(fifo_waits(&[0.0, 0.0], f64::NAN), vec![0.0, 0.0]);
    }

    #[test]
    fn wire_reference_counts_the_draw_in_the_links_bytes() {
        // Ten 1 MB pages cost 10.5 MB on the link: 1.05 link bytes per body byte, so 9 Mbit/s
        // of arrivals load a 10 Mbit/s link 0.945 and a page takes 0.84 s of it.
        let r = wire_reference(1_000_000, 10, 10_500_000, 9.0, 10e6, &[0.0, 0.5, 1.0]).unwrap();
        assert!((r.wire_load - 0.945).abs() < 1e-9, "{r:?}");
        // Waits 0, 0.34 and 0.68 s: the median is the second page's.
        assert!(
            (r.fifo_wait_ms_median.unwrap() - 340.0).abs() < 1e-6,
            "{r:?}"
        );
        // No arrivals: a load, no reference.
        let r = wire_reference(1_000_000, 10, 10_500_000, 0.0, 10e6, &[]).unwrap();
        assert_eq!((r.wire_load, r.fifo_wait_ms_median), (0.0, None));
        // Nothing carried, nothing completed or no rate: nothing to count in.
        assert_eq!(wire_reference(1_000_000, 10, 0, 9.0, 10e6, &[0.0]), None);
        assert_eq!(
            wire_reference(1_000_000, 0, 10_500_000, 9.0, 10e6, &[0.0]),
            None
        );
        assert_eq!(wire_reference(0, 10, 10_500_000, 9.0, 10e6, &[0.0]), None);
        assert_eq!(
            wire_reference(1_000_000, 10, 10_500_000, 9.0, 0.0, &[0.0]),
            None
        );
        assert_eq!(
            wire_reference(1_000_000, 10, 10_500_000, 9.0, f64::NAN, &[0.0]),
            None
        );
    }

    #[test]
    fn fifo_waits_of_a_poisson_draw_match_the_queueing_formula() {
        // Poisson arrivals, equal service (M/D/1): mean wait ρ·S ÷ (2 (1 − ρ)), 2 S at ρ = 0.8.
        let a = poisson_arrivals(0.8, 250_000.0, 7);
        let w = fifo_waits(&a, 1.0);
        let mean = w.iter().sum::<f64>() / w.len() as f64;
        assert!((mean - 2.0).abs() < 0.15, "{mean}");
        // Near the rate the wait grows as 1 ÷ (1 − ρ): ρ = 0.95 waits about 9.5 S.
        let a = poisson_arrivals(0.95, 250_000.0, 7);
        let w95 = fifo_waits(&a, 1.0);
        let mean95 = w95.iter().sum::<f64>() / w95.len() as f64;
        assert!(mean95 > 3.0 * mean, "{mean95} against {mean}");
    }

    #[test]
    fn rate_offers_the_asked_bits() {
        let w = generate_page(&page_specs()[1]); // google, 74 000 bytes
        let r = rate_for(&w, 59.2);
        assert!((r - 100.0).abs() < 1e-9, "{r}");
    }
}
