//! Offered against carried load (seed 001 figure 5a): page loads arrive as a Poisson process at a
//! chosen rate for a fixed window, each loaded by the replay client through the system.
//!
//! Offered load = arrival rate × page bytes × 8. Carried load = body bytes of the completed loads
//! ÷ the time from the first arrival until the last load ended (so an overloaded link shows up as
//! carried load levelling off while the time stretches). Headers and TCP/IP overhead are not
//! counted on either side.

use crate::replay::{self, ReplayConfig};
use crate::workload::Workload;
use anyhow::Result;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
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
    /// Offered load in Mbit/s.
    pub offered_mbit: f64,
    /// Carried load in Mbit/s.
    pub carried_mbit: f64,
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
    /// Offered load in Mbit/s.
    pub offered_mbit: f64,
    /// Carried load in Mbit/s.
    pub carried_mbit: f64,
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
         Carried = body bytes of the completed loads / time until the last one ended. \
         Down link: the emulated long link from remote to edge during the point (replies); \
         up link: from edge to remote (requests and acknowledgements).\n\n\
         | profile | workload | system | offered Mbit/s | carried Mbit/s | pages | failed | \
         median PLT ms | down-link queue drops | down-link random losses | \
         down-link mean queue wait ms | up-link queue drops | up-link random losses | \
         up-link mean queue wait ms |\n\
         |---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
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
            "| {} | {} | {} | {:.1} | {:.1} | {} | {} | {} | {drops} | {lost} | {wait} | {up_drops} | {up_lost} | {up_wait} |",
            p.profile,
            p.workload,
            p.system,
            p.offered_mbit,
            p.carried_mbit,
            p.pages,
            p.failures,
            p.plt_ms_median.map_or("".into(), |m| format!("{m:.0}")),
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
pub async fn run(
    w: &Workload,
    cfg: &ReplayConfig,
    rate: f64,
    window: Duration,
    seed: u64,
) -> Result<LoadRun> {
    let arrivals = poisson_arrivals(rate, window.as_secs_f64(), seed);
    let start = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    let mut tally = Tally::default();
    for a in arrivals {
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
        let (w, cfg) = (w.clone(), cfg.clone());
        tasks.spawn(async move { replay::load_page(&w, &cfg).await });
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
    Ok(LoadRun {
        offered_mbit: rate * w.total_bytes() as f64 * 8.0 / 1e6,
        carried_mbit: tally.bytes as f64 * 8.0 / elapsed / 1e6,
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
}

impl Tally {
    fn record(&mut self, r: Result<Result<replay::PageLoad>, tokio::task::JoinError>) {
        match r {
            Ok(Ok(p)) => {
                self.bytes += p.objects.iter().map(|o| o.bytes).sum::<u64>();
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
            dropped_queue: 1,
            dropped_loss: 2,
            queued: 99,
            queue_wait_ns: 5_000_000,
            ..Default::default()
        };
        let after = testbed::model::DirectionStats {
            offered: 1100,
            dropped_queue: 11,
            dropped_loss: 3,
            queued: 1089,
            queue_wait_ns: 5_000_000 + 990 * 40_000_000,
            ..Default::default()
        };
        let p = LinkPoint::between(&before, &after);
        assert_eq!((p.packets, p.queue_drops, p.loss_drops), (1000, 10, 1));
        assert!((p.queue_wait_ms_mean - 40.0).abs() < 1e-9, "{p:?}");
        assert_eq!(LinkPoint::between(&after, &after).queue_wait_ms_mean, 0.0);
    }

    #[test]
    fn the_markdown_table_has_a_row_per_point() {
        assert_eq!(markdown(&[]), "");
        let pt = LoadPoint {
            profile: "satellite".into(),
            system: "direct".into(),
            workload: "yahoo".into(),
            offered_mbit: 25.0,
            carried_mbit: 15.84,
            pages: 57,
            failures: 0,
            plt_ms_median: Some(7308.0),
            down_link: None,
            up_link: None,
            window_s: None,
        };
        let linked = LoadPoint {
            down_link: Some(LinkPoint {
                packets: 20_000,
                queue_drops: 12,
                loss_drops: 20,
                queue_wait_ms_mean: 212.4,
            }),
            ..pt.clone()
        };
        let md = markdown(&[pt, linked]);
        assert!(md.contains(
            "| satellite | yahoo | direct | 25.0 | 15.8 | 57 | 0 | 7308 |  |  |  |  |  |  |"
        ));
        assert!(
            md.contains("| 7308 | 12 of 20000 | 20 | 212 |  |  |  |"),
            "{md}"
        );
    }

    #[test]
    fn rate_offers_the_asked_bits() {
        let w = generate_page(&page_specs()[1]); // google, 74 000 bytes
        let r = rate_for(&w, 59.2);
        assert!((r - 100.0).abs() < 1e-9, "{r}");
    }
}
