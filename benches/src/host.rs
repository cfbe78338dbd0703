//! What the host's CPUs did while a benchmark ran, from the `cpu` line of `/proc/stat`: the
//! share of all CPU time that was busy (user, nice, system, irq, softirq) and the share the
//! hypervisor gave to other guests (steal). A user-space link emulator and the proxies lose
//! what is stolen, so a run's figures are read beside its steal.
//!
//! It reads and compares counters only; it does NOT decide whether a run is usable (the
//! summary reports the shares, the reader judges) nor measure per process (see `systems::procs`).

use serde::{Deserialize, Serialize};

/// The counters of the `cpu` line of `/proc/stat`, in clock ticks, summed over all CPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CpuTimes {
    /// user + nice + system + irq + softirq.
    pub busy: u64,
    /// idle + iowait.
    pub idle: u64,
    /// Time the hypervisor ran other guests while this one had work.
    pub steal: u64,
}

impl CpuTimes {
    /// The machine's counters now, or `None` where `/proc/stat` cannot be read or parsed.
    pub fn now() -> Option<CpuTimes> {
        Self::parse(&std::fs::read_to_string("/proc/stat").ok()?)
    }

    /// Parses the `cpu` line of a `/proc/stat` text. Kernels before 2.6.11 have no steal
    /// field; it counts as zero there.
    pub fn parse(stat: &str) -> Option<CpuTimes> {
        let line = stat.lines().find(|l| l.starts_with("cpu "))?;
        let f: Vec<u64> = line
            .split_whitespace()
            .skip(1)
            .map(|v| v.parse().ok())
            .collect::<Option<_>>()?;
        let at = |i: usize| f.get(i).copied().unwrap_or(0);
        if f.len() < 4 {
            return None;
        }
        Some(CpuTimes {
            busy: at(0) + at(1) + at(2) + at(5) + at(6),
            idle: at(3) + at(4),
            steal: at(7),
        })
    }

    /// Every tick counted (busy, idle and stolen).
    pub fn total(&self) -> u64 {
        self.busy + self.idle + self.steal
    }

    /// What the CPUs did from `self` to `later`; `None` when no tick passed.
    pub fn until(&self, later: &CpuTimes, seconds: f64) -> Option<HostShare> {
        let d = |a: u64, b: u64| b.saturating_sub(a) as f64;
        let total = d(self.total(), later.total());
        (total > 0.0).then(|| HostShare {
            seconds,
            busy: d(self.busy, later.busy) / total,
            steal: d(self.steal, later.steal) / total,
        })
    }
}

/// The host's CPU shares over one stretch of a run (a checkpointed cell).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostShare {
    /// Length of the stretch, wall-clock seconds.
    pub seconds: f64,
    /// Busy share of all CPU time (0–1), steal not included.
    pub busy: f64,
    /// Stolen share of all CPU time (0–1).
    pub steal: f64,
}

/// Counts a stretch from its start: `Meter::start()` before, `finish()` after.
#[derive(Debug, Clone, Copy)]
pub struct Meter {
    at: std::time::Instant,
    cpu: Option<CpuTimes>,
}

impl Meter {
    /// Starts counting now.
    pub fn start() -> Meter {
        Meter {
            at: std::time::Instant::now(),
            cpu: CpuTimes::now(),
        }
    }

    /// The shares since [`Meter::start`]; `None` where `/proc/stat` could not be read.
    pub fn finish(&self) -> Option<HostShare> {
        let now = CpuTimes::now()?;
        self.cpu?.until(&now, self.at.elapsed().as_secs_f64())
    }
}

/// The summary's section on the host: one line per cell with its length, busy and stolen
/// shares, and the steal over all of them (weighted by their lengths). Empty when no cell
/// recorded its shares (checkpoints written before they were).
pub fn markdown(cells: &[(String, HostShare)]) -> String {
    use std::fmt::Write as _;
    if cells.is_empty() {
        return String::new();
    }
    let secs: f64 = cells.iter().map(|(_, h)| h.seconds).sum();
    let steal = if secs > 0.0 {
        cells.iter().map(|(_, h)| h.steal * h.seconds).sum::<f64>() / secs
    } else {
        0.0
    };
    let max = cells
        .iter()
        .max_by(|a, b| a.1.steal.total_cmp(&b.1.steal))
        .expect("not empty");
    let mut s = format!(
        "\n## Host\n\nThe CPUs' time while each cell ran (`/proc/stat`, all CPUs): busy is user, \
         nice, system, irq and softirq; steal is time the hypervisor gave to other guests, which \
         the emulated link and the proxies lose. Steal over the {} cells ({:.0} min): {:.1} %, \
         at most {:.1} % ({}).\n\n| cell | min | busy % | steal % |\n|---|---:|---:|---:|\n",
        cells.len(),
        secs / 60.0,
        steal * 100.0,
        max.1.steal * 100.0,
        max.0
    );
    for (cell, h) in cells {
        let _ = writeln!(
            s,
            "| {cell} | {:.1} | {:.1} | {:.1} |",
            h.seconds / 60.0,
            h.busy * 100.0,
            h.steal * 100.0
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    const STAT: &str = "cpu  100 5 50 800 10 3 2 40 0 0\ncpu0 50 2 25 400 5 1 1 20 0 0\nintr 1\n";

    #[test]
    fn the_cpu_line_splits_into_busy_idle_and_steal() {
        let t = CpuTimes::parse(STAT).unwrap();
        assert_eq!(
            t,
            CpuTimes {
                busy: 100 + 5 + 50 + 3 + 2,
                idle: 810,
                steal: 40
            }
        );
        assert_eq!(t.total(), 1010);
    }

    #[test]
    fn an_old_kernel_without_steal_counts_none_and_garbage_is_refused() {
        let t = CpuTimes::parse("cpu  1 2 3 4 5 6 7\n").unwrap();
        assert_eq!(t.steal, 0);
        assert_eq!(t.busy, 1 + 2 + 3 + 6 + 7);
        assert_eq!(CpuTimes::parse("cpu  1 x 3 4\n"), None);
        assert_eq!(CpuTimes::parse("cpu  1 2\n"), None);
        assert_eq!(CpuTimes::parse("intr 1\n"), None);
    }

    #[test]
    fn shares_are_of_the_ticks_between_two_readings() {
        let a = CpuTimes {
            busy: 100,
            idle: 100,
            steal: 0,
        };
        let b = CpuTimes {
            busy: 160,
            idle: 130,
            steal: 10,
        };
        let h = a.until(&b, 2.0).unwrap();
        assert!((h.busy - 0.6).abs() < 1e-9);
        assert!((h.steal - 0.1).abs() < 1e-9);
        assert_eq!(h.seconds, 2.0);
        assert_eq!(a.until(&a, 1.0), None);
    }

    #[test]
    fn the_section_weights_steal_by_each_cells_length_and_names_the_worst() {
        let c = |cell: &str, seconds, steal| {
            (
                cell.to_string(),
                HostShare {
                    seconds,
                    busy: 0.5,
                    steal,
                },
            )
        };
        let s = markdown(&[
            c("lossy/yahoo/replay/http", 300.0, 0.01),
            c("lossy/bulk/replay/http", 100.0, 0.05),
        ]);
        assert!(s.contains("Steal over the 2 cells (7 min): 2.0 %"), "{s}");
        assert!(s.contains("at most 5.0 % (lossy/bulk/replay/http)"), "{s}");
        assert!(
            s.contains("| lossy/yahoo/replay/http | 5.0 | 50.0 | 1.0 |"),
            "{s}"
        );
        assert!(markdown(&[]).is_empty());
    }
}
