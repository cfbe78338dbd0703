//! The thin I/O loop around [`crate::model`]: one thread per link direction reads IP
//! packets from one TUN device, runs them through the model against a monotonic clock
//! and writes each to the other TUN device at its due time.
//!
//! The thread sleeps (`ppoll` on the input) until [`DEFAULT_SPIN`] before the next due
//! time, then spins, yielding, until the due time, so a late wake-up costs at most that
//! one packet's lateness: due times come from the model's exact arithmetic and never
//! from the moment a previous packet was actually written.

use std::fs::File;
use std::io::{self, Read, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::model::{DirectionStats, LinkModel};
use crate::profile::DirectionSpec;

/// How long before a due time the loop stops sleeping and starts spinning.
pub const DEFAULT_SPIN: Duration = Duration::from_micros(100);
/// The same for a thread that obtained real-time scheduling (prompt wake-ups).
pub const DEFAULT_SPIN_REALTIME: Duration = Duration::from_micros(20);
/// `SCHED_FIFO` priority of the emulator threads when permitted: above ordinary
/// work, below the kernel's own real-time threads.
pub const DEFAULT_RT_PRIORITY: i32 = 10;
/// Nice value the emulator threads ask for (ignored without `CAP_SYS_NICE`).
pub const DEFAULT_NICE: i32 = -10;
/// Longest single sleep, so a stop request is seen promptly.
pub const DEFAULT_MAX_SLEEP: Duration = Duration::from_millis(20);
/// Packets read from the input in one go before due packets are checked again.
pub const DEFAULT_READ_BATCH: usize = 64;
/// Read buffer: larger than any packet a TUN device without offloads hands out.
const READ_BUF: usize = 65_536;
/// Width of one lateness histogram bucket.
const LATE_BUCKET_NS: u64 = 10_000;
/// Lateness histogram buckets (10 µs each, the last one open-ended: ≥ 20 ms).
const LATE_BUCKETS: usize = 2_000;

/// Statistics of one direction: the model's counters plus how late packets left.
#[derive(Debug, Clone)]
pub struct EmulatorStats {
    /// The model's counters.
    pub model: DirectionStats,
    /// Packets the output device refused.
    pub write_errors: u64,
    /// Histogram of delivery lateness (actual write time − due time), 10 µs buckets.
    late_hist: Vec<u64>,
    /// Largest lateness seen, ns.
    pub max_late_ns: u64,
}

impl Default for EmulatorStats {
    fn default() -> Self {
        EmulatorStats {
            model: DirectionStats::default(),
            write_errors: 0,
            late_hist: vec![0; LATE_BUCKETS],
            max_late_ns: 0,
        }
    }
}

impl EmulatorStats {
    fn record_late(&mut self, late_ns: u64) {
        let b = ((late_ns / LATE_BUCKET_NS) as usize).min(LATE_BUCKETS - 1);
        self.late_hist[b] += 1;
        self.max_late_ns = self.max_late_ns.max(late_ns);
    }

    /// Lateness quantile `q` (0..=1) in ns, to the bucket's upper edge; 0 if no packets.
    pub fn late_quantile_ns(&self, q: f64) -> u64 {
        let total: u64 = self.late_hist.iter().sum();
        if total == 0 {
            return 0;
        }
        let target = ((total as f64) * q).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (i, n) in self.late_hist.iter().enumerate() {
            seen += n;
            if seen >= target {
                return (i as u64 + 1) * LATE_BUCKET_NS;
            }
        }
        self.max_late_ns
    }

    /// Adds another direction's statistics into this one.
    pub fn merge(&mut self, o: &EmulatorStats) {
        self.model.offered += o.model.offered;
        self.model.offered_bytes += o.model.offered_bytes;
        self.model.dropped_queue += o.model.dropped_queue;
        self.model.dropped_loss += o.model.dropped_loss;
        self.model.delivered += o.model.delivered;
        self.model.queued += o.model.queued;
        self.model.queue_wait_ns += o.model.queue_wait_ns;
        self.write_errors += o.write_errors;
        for (a, b) in self.late_hist.iter_mut().zip(&o.late_hist) {
            *a += b;
        }
        self.max_late_ns = self.max_late_ns.max(o.max_late_ns);
    }
}

/// A running direction: its thread and its shared statistics.
#[derive(Debug)]
pub struct Direction {
    handle: Option<JoinHandle<()>>,
    stats: Arc<Mutex<EmulatorStats>>,
}

impl Direction {
    /// Starts a thread moving packets from `input` to `output` through a model of
    /// `spec` seeded with `seed`, until `stop` is set.
    pub fn spawn(
        name: String,
        input: Arc<File>,
        output: Arc<File>,
        spec: DirectionSpec,
        seed: u64,
        stop: Arc<AtomicBool>,
    ) -> io::Result<Direction> {
        let stats = Arc::new(Mutex::new(EmulatorStats::default()));
        let shared = stats.clone();
        let handle = std::thread::Builder::new()
            .name(name.clone())
            .spawn(move || {
                // Best effort: real-time wake-ups (then a short spin suffices), else a
                // higher CPU share than competing work; tight timers either way. Both need
                // CAP_SYS_NICE, absent in a user namespace.
                let spin = if netsys::set_thread_realtime(DEFAULT_RT_PRIORITY).is_ok() {
                    DEFAULT_SPIN_REALTIME
                } else {
                    let _ = netsys::set_thread_nice(DEFAULT_NICE);
                    DEFAULT_SPIN
                };
                let _ = netsys::set_timer_slack(1);
                let model = LinkModel::new(spec, seed);
                if let Err(e) = run(&input, &output, model, spin, &stop, &shared) {
                    tracing::error!(direction = %name, error = %e, "link emulator stopped");
                }
            })?;
        Ok(Direction {
            handle: Some(handle),
            stats,
        })
    }

    /// A snapshot of the statistics.
    pub fn stats(&self) -> EmulatorStats {
        self.stats.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// Waits for the thread to finish (after the stop flag was set).
    pub fn join(&mut self) {
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

fn run(
    input: &File,
    mut output: &File,
    mut model: LinkModel<Vec<u8>>,
    spin: Duration,
    stop: &AtomicBool,
    stats: &Mutex<EmulatorStats>,
) -> io::Result<()> {
    let epoch = Instant::now();
    let now_ns = || epoch.elapsed().as_nanos() as u64;
    let mut buf = vec![0u8; READ_BUF];
    let mut input = input;
    let mut local = EmulatorStats::default();
    let mut last_publish = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        // 1. Deliver everything due.
        let now = now_ns();
        while let Some((due, pkt)) = model.pop_due(now) {
            if output.write(&pkt).is_err() {
                local.write_errors += 1;
            }
            local.record_late(now_ns().saturating_sub(due));
        }
        // 2. Wait for input or for the next due time.
        let now = now_ns();
        let wait = match model.next_due() {
            None => DEFAULT_MAX_SLEEP,
            Some(due) => Duration::from_nanos(due.saturating_sub(now)).min(DEFAULT_MAX_SLEEP),
        };
        let readable = if wait > spin {
            netsys::wait_readable(input, wait - spin)?
        } else {
            let r = netsys::wait_readable(input, Duration::ZERO)?;
            if !r {
                std::thread::yield_now();
            }
            r
        };
        // 3. Read a batch of arrivals, each stamped when read.
        if readable {
            for _ in 0..DEFAULT_READ_BATCH {
                let n = match input.read(&mut buf) {
                    Ok(0) => return Ok(()),
                    Ok(n) => n,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => return Err(e),
                };
                model.offer(now_ns(), n, buf[..n].to_vec());
                if !netsys::wait_readable(input, Duration::ZERO)? {
                    break;
                }
            }
        }
        if last_publish.elapsed() > Duration::from_millis(100) {
            local.model = model.stats();
            if let Ok(mut s) = stats.lock() {
                s.clone_from(&local);
            }
            last_publish = Instant::now();
        }
    }
    local.model = model.stats();
    if let Ok(mut s) = stats.lock() {
        *s = local;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::OwnedFd;
    use std::os::unix::net::UnixDatagram;

    fn file(s: UnixDatagram) -> Arc<File> {
        Arc::new(File::from(OwnedFd::from(s)))
    }

    /// The loop over datagram sockets (one packet per read, like a TUN device):
    /// packets leave in order, intact, never before their due time.
    #[test]
    fn loop_delivers_in_order_and_never_early() {
        let (src, input) = UnixDatagram::pair().unwrap();
        let (output, dst) = UnixDatagram::pair().unwrap();
        let spec = DirectionSpec {
            delay: Duration::from_millis(30),
            rate_bps: Some(1_000_000),
            queue_bytes: 100_000,
            loss: crate::profile::LossModel::None,
            jitter: Duration::ZERO,
        };
        let stop = Arc::new(AtomicBool::new(false));
        let mut dir = Direction::spawn(
            "test".into(),
            file(input),
            file(output),
            spec,
            1,
            stop.clone(),
        )
        .unwrap();
        let t0 = Instant::now();
        for k in 0..3u8 {
            src.send(&[k; 1250]).unwrap();
        }
        dst.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut buf = [0u8; 2000];
        for k in 0..3u8 {
            let n = dst.recv(&mut buf).unwrap();
            // 1250 bytes at 1 Mbit/s = 10 ms each, then 30 ms of propagation.
            let due = Duration::from_millis(30 + 10 * (u64::from(k) + 1));
            assert!(
                t0.elapsed() >= due,
                "packet {k} left early: {:?}",
                t0.elapsed()
            );
            assert_eq!(n, 1250);
            assert!(
                buf[..n].iter().all(|b| *b == k),
                "packet {k} reordered or damaged"
            );
        }
        stop.store(true, Ordering::Relaxed);
        dir.join();
        let stats = dir.stats();
        assert_eq!(stats.model.offered, 3);
        assert_eq!(stats.model.delivered, 3);
        assert_eq!(stats.write_errors, 0);
        assert!(stats.late_quantile_ns(1.0) >= LATE_BUCKET_NS);
    }

    #[test]
    fn lateness_quantiles_come_from_the_histogram() {
        let mut s = EmulatorStats::default();
        assert_eq!(s.late_quantile_ns(0.99), 0);
        for _ in 0..99 {
            s.record_late(5_000);
        }
        s.record_late(3_000_000);
        assert_eq!(s.late_quantile_ns(0.5), 10_000);
        assert_eq!(s.late_quantile_ns(0.99), 10_000);
        assert_eq!(s.late_quantile_ns(1.0), 3_010_000);
        assert_eq!(s.max_late_ns, 3_000_000);
        let mut m = EmulatorStats::default();
        m.merge(&s);
        assert_eq!(m.late_quantile_ns(1.0), 3_010_000);
    }
}
