//! Seed 002's pacing experiment (its Fig. 13) on the emulated long link, and the same question
//! asked of longhaul's warm pool connections.
//!
//! **Short flows.** A CUBIC elephant flow (origin → client) fills the long link's drop-tail
//! queue; once its delivery is near the link's payload ceiling, a 73 kB reply from a second
//! server (remote → client) crosses the same bottleneck on a fresh CUBIC connection whose initial
//! window is set on the sender's routes (`initcwnd`; the client's `initrwnd` is the largest IW so
//! the receive window never caps it), bursty or paced (`SO_MAX_PACING_RATE`, which turns on
//! Linux's internal pacing without `fq`). Flow completion time runs from the request written on
//! the established connection to the last byte read at the client.
//!
//! **Warm pool connections.** A connection whose window an earlier transfer grew, then idle
//! (`tcp_slow_start_after_idle` = 0, as the pool's hosts must be), sends a reply beside the same
//! elephant: CUBIC bursty, CUBIC paced and BBR (always paced by the kernel).
//!
//! The access and origin links have no delay here, so both flows see exactly the long link's
//! round trip. The pure parts (bed geometry, the elephant's fill rule, the trial order, the
//! request framing, the median and its distribution-free confidence interval) are unit-tested;
//! the runner needs root and the test bed. Nothing here simulates a figure: every number in the
//! output was measured by the kernel's TCP across the emulator. This module does not change any
//! longhaul default.

use anyhow::{bail, ensure, Context, Result};
use rand::seq::SliceRandom;
use rand::SeedableRng;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use testbed::Node;

/// The seed's short flow: 73 kB, "slightly more than 50 frames" (51 segments of 1448 bytes).
pub const SHORT_FLOW_BYTES: u64 = 73_000;
/// The seed's initial windows (segments), IW10 being RFC 6928's.
pub const SEED_IWS: [u32; 5] = [10, 20, 32, 50, 100];
/// The cap set with `SO_MAX_PACING_RATE` for a paced sender: 10 Gbit/s, far above every link
/// here, so it only switches pacing on and never limits the rate itself.
pub const PACING_CAP_BYTES_PER_SEC: u64 = 1_250_000_000;
/// Largest reply the servers accept in a request (bounds a malformed request's cost).
pub const MAX_REPLY_BYTES: u64 = 1 << 30;
/// Bytes of one request: trial id (u64), reply size (u64), sender (u8), 7 reserved zero bytes.
pub const REQUEST_LEN: usize = 24;
/// TCP payload per full-size segment on the 1500-byte links (timestamps on).
pub const MSS: u64 = 1448;

/// How the sending side of a measured connection behaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Sender {
    /// CUBIC, no pacing: a window's worth of segments leaves back to back.
    Cubic,
    /// CUBIC with `SO_MAX_PACING_RATE` set: Linux's internal pacing spaces the segments.
    CubicPaced,
    /// BBR, which the kernel always paces.
    Bbr,
}

impl Sender {
    /// All senders, in the order tables show them.
    pub const ALL: [Sender; 3] = [Sender::Cubic, Sender::CubicPaced, Sender::Bbr];

    /// Name in tables and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Sender::Cubic => "cubic",
            Sender::CubicPaced => "cubic-paced",
            Sender::Bbr => "bbr",
        }
    }

    /// The congestion control it selects with `TCP_CONGESTION`.
    pub fn congestion(self) -> &'static str {
        match self {
            Sender::Cubic | Sender::CubicPaced => "cubic",
            Sender::Bbr => "bbr",
        }
    }

    /// Whether it sets `SO_MAX_PACING_RATE`.
    pub fn sets_pacing_cap(self) -> bool {
        self == Sender::CubicPaced
    }

    fn code(self) -> u8 {
        match self {
            Sender::Cubic => 0,
            Sender::CubicPaced => 1,
            Sender::Bbr => 2,
        }
    }

    fn from_code(c: u8) -> Option<Sender> {
        Sender::ALL.into_iter().find(|s| s.code() == c)
    }
}

impl std::str::FromStr for Sender {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> Result<Sender> {
        Sender::ALL
            .into_iter()
            .find(|x| x.name() == s)
            .with_context(|| format!("unknown sender {s:?} (cubic, cubic-paced, bbr)"))
    }
}

/// One request on a measurement connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    /// Identifies the reply in the server's records.
    pub trial: u64,
    /// Reply size, bytes.
    pub size: u64,
    /// How the server sends it.
    pub sender: Sender,
}

impl Request {
    /// The request's bytes.
    pub fn encode(&self) -> [u8; REQUEST_LEN] {
        let mut b = [0u8; REQUEST_LEN];
        b[0..8].copy_from_slice(&self.trial.to_be_bytes());
        b[8..16].copy_from_slice(&self.size.to_be_bytes());
        b[16] = self.sender.code();
        b
    }

    /// Parses a request; rejects an unknown sender, non-zero reserved bytes and a size of 0 or
    /// above [`MAX_REPLY_BYTES`].
    pub fn decode(b: &[u8; REQUEST_LEN]) -> Result<Request> {
        let word = |r: std::ops::Range<usize>| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&b[r]);
            u64::from_be_bytes(w)
        };
        let sender = Sender::from_code(b[16])
            .with_context(|| format!("unknown sender code {} in request", b[16]))?;
        ensure!(
            b[17..].iter().all(|&x| x == 0),
            "reserved request bytes not zero"
        );
        let size = word(8..16);
        ensure!(
            (1..=MAX_REPLY_BYTES).contains(&size),
            "reply size {size} outside 1..={MAX_REPLY_BYTES}"
        );
        Ok(Request {
            trial: word(0..8),
            size,
            sender,
        })
    }
}

/// One emulated bottleneck of the grid.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BedSpec {
    /// Round trip of the long link (the whole path here), ms.
    pub rtt_ms: u32,
    /// Bottleneck rate, both directions, Mbit/s.
    pub rate_mbit: u32,
    /// Drop-tail queue as a multiple of the bandwidth-delay product.
    pub queue_bdp: f64,
}

impl BedSpec {
    /// One bandwidth-delay product, bytes.
    pub fn bdp_bytes(&self) -> u64 {
        u64::from(self.rate_mbit) * 1_000_000 * u64::from(self.rtt_ms) / 1000 / 8
    }

    /// The drop-tail queue, bytes (within the test bed's bounds).
    pub fn queue_bytes(&self) -> u64 {
        ((self.bdp_bytes() as f64 * self.queue_bdp).round() as u64).clamp(
            testbed::profile::MIN_QUEUE_BYTES,
            testbed::profile::MAX_QUEUE_BYTES,
        )
    }

    /// What one TCP flow's payload can reach, bit/s (rate × 1448 / 1500).
    pub fn ceiling_bps(&self) -> f64 {
        f64::from(self.rate_mbit) * 1e6 * MSS as f64 / 1500.0
    }

    /// Name of the bed, e.g. `rtt30-10mbit-q0.5`.
    pub fn label(&self) -> String {
        format!(
            "rtt{}-{}mbit-q{}",
            self.rtt_ms, self.rate_mbit, self.queue_bdp
        )
    }

    /// Checks the values.
    pub fn validate(&self) -> Result<()> {
        ensure!(
            (1..=5000).contains(&self.rtt_ms),
            "RTT {} ms outside 1..=5000",
            self.rtt_ms
        );
        ensure!(
            (1..=400).contains(&self.rate_mbit),
            "rate {} Mbit/s outside 1..=400 (the emulator's measured ceiling)",
            self.rate_mbit
        );
        ensure!(
            self.queue_bdp.is_finite() && self.queue_bdp > 0.0 && self.queue_bdp <= 16.0,
            "queue {} x BDP outside (0, 16]",
            self.queue_bdp
        );
        Ok(())
    }

    /// The test bed profile: a symmetric long link, no random loss, the queue in both
    /// directions, access and origin links without delay, 1 MiB default socket buffers (so a
    /// 73 kB reply is written at once and the receive window starts above IW100).
    pub fn profile(&self) -> testbed::Profile {
        let rtt = Duration::from_millis(u64::from(self.rtt_ms));
        let mut p = testbed::Profile::symmetric(
            &self.label(),
            rtt,
            u64::from(self.rate_mbit) * 1_000_000,
            0.0,
        );
        p.down.queue_bytes = self.queue_bytes();
        p.up.queue_bytes = self.queue_bytes();
        p.access_delay = Duration::ZERO;
        p.origin_delay = Duration::ZERO;
        p.tcp_rmem[1] = p.tcp_rmem[1].max(1 << 20).min(p.tcp_rmem[2]);
        p.tcp_wmem[1] = p.tcp_wmem[1].max(1 << 20).min(p.tcp_wmem[2]);
        p
    }
}

/// The cross product of RTTs, queue sizes and rates, in that nesting order.
pub fn grid(rtts_ms: &[u32], queues_bdp: &[f64], rates_mbit: &[u32]) -> Vec<BedSpec> {
    let mut out = Vec::new();
    for &rtt_ms in rtts_ms {
        for &queue_bdp in queues_bdp {
            for &rate_mbit in rates_mbit {
                out.push(BedSpec {
                    rtt_ms,
                    rate_mbit,
                    queue_bdp,
                });
            }
        }
    }
    out
}

/// When the elephant counts as having filled the bottleneck.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FillRule {
    /// Fraction of the payload ceiling each window must deliver.
    pub fraction: f64,
    /// Consecutive windows that must reach it.
    pub windows: usize,
    /// Shortest wait before the rule is applied, whatever the windows say.
    pub min_wait: Duration,
    /// Longest wait; the run goes on (and records `filled: false`) after it.
    pub timeout: Duration,
}

impl Default for FillRule {
    fn default() -> Self {
        FillRule {
            fraction: 0.85,
            windows: 3,
            min_wait: Duration::from_secs(2),
            timeout: Duration::from_secs(60),
        }
    }
}

impl FillRule {
    /// Whether the last [`windows`](Self::windows) entries of `window_bytes` (bytes delivered
    /// in consecutive windows of length `window`) each reach the fraction of `ceiling_bps`.
    pub fn met(&self, window_bytes: &[u64], window: Duration, ceiling_bps: f64) -> bool {
        if self.windows == 0 || window_bytes.len() < self.windows || window.is_zero() {
            return false;
        }
        let need = self.fraction * ceiling_bps * window.as_secs_f64() / 8.0;
        window_bytes[window_bytes.len() - self.windows..]
            .iter()
            .all(|&b| b as f64 >= need)
    }
}

/// The sampling window of the elephant's delivery: two round trips, at least 250 ms.
pub fn fill_window(rtt_ms: u32) -> Duration {
    Duration::from_millis(u64::from(rtt_ms) * 2).max(Duration::from_millis(250))
}

/// The order of `configs` configurations in repetition `rep`: a permutation drawn from
/// `seed` and `rep`, so every configuration meets the elephant in every phase of its sawtooth
/// and slow drifts (the machine's load) spread over all of them.
pub fn trial_order(configs: usize, rep: usize, seed: u64) -> Vec<usize> {
    let mut order: Vec<usize> = (0..configs).collect();
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(
        seed ^ (rep as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15),
    );
    order.shuffle(&mut rng);
    order
}

/// Median of repeated measurements with a distribution-free confidence interval.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Samples.
    pub n: usize,
    /// Median.
    pub median: f64,
    /// Lower end of the median's confidence interval (an order statistic).
    pub ci_low: f64,
    /// Upper end.
    pub ci_high: f64,
    /// The interval's exact coverage (≥ 0.95 when `n` ≥ 6; lower below).
    pub ci_level: f64,
    /// Mean.
    pub mean: f64,
    /// Smallest sample.
    pub min: f64,
    /// Largest sample.
    pub max: f64,
}

/// 1-based ranks `(k, n + 1 − k)` of the order statistics bounding the median with at least
/// 95 % coverage (binomial, distribution-free), and that coverage; the widest interval
/// (min, max) with its lower coverage when `n` < 6. `None` for `n` = 0 or `n` > 1000.
pub fn median_ci_ranks(n: usize) -> Option<(usize, usize, f64)> {
    if n == 0 || n > 1000 {
        return None;
    }
    // P(X ≤ i) for X ~ Binomial(n, 1/2), accumulated from pmf(0) = 2^-n.
    let mut pmf = 0.5f64.powi(n as i32);
    let mut cdf = pmf;
    let mut k = 1usize; // cdf currently P(X ≤ k − 1)
    let mut best = (1usize, 1.0 - 2.0 * cdf);
    while k < n.div_ceil(2) {
        pmf *= (n - (k - 1)) as f64 / k as f64;
        let next = cdf + pmf; // P(X ≤ k)
        if next > 0.025 {
            break;
        }
        cdf = next;
        k += 1;
        best = (k, 1.0 - 2.0 * cdf);
    }
    Some((best.0, n + 1 - best.0, best.1))
}

/// Summary of `samples`; `None` when empty or when a sample is not finite.
pub fn summarize(samples: &[f64]) -> Option<Summary> {
    if samples.is_empty() || samples.iter().any(|x| !x.is_finite()) {
        return None;
    }
    let mut v = samples.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    let (lo, hi, level) = median_ci_ranks(n)?;
    Some(Summary {
        n,
        median: crate::stats::median(&v)?,
        ci_low: v[lo - 1],
        ci_high: v[hi - 1],
        ci_level: level,
        mean: v.iter().sum::<f64>() / n as f64,
        min: v[0],
        max: v[n - 1],
    })
}

/// What the sending server saw of one reply.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SenderRecord {
    /// Congestion control of the socket (`TCP_CONGESTION`).
    pub congestion: String,
    /// `SO_MAX_PACING_RATE` of the socket, bytes/s (`None`: no cap, CUBIC unpaced).
    pub max_pacing_rate: Option<u64>,
    /// Congestion window when the request arrived, segments (the route's `initcwnd` on a
    /// fresh connection; the grown window on a warm one).
    pub cwnd_before: u32,
    /// Slow-start threshold then, segments (`i32::MAX`-like values: still in initial slow start).
    pub ssthresh_before: u32,
    /// Smoothed RTT then, µs.
    pub srtt_us: u32,
    /// The peer's receive window then, bytes.
    pub snd_wnd: u32,
    /// The kernel's pacing rate then, bytes/s.
    pub pacing_rate: u64,
    /// Bytes of the reply that had left the socket 2 ms after the write began (`None` if the
    /// write itself took longer or the probe woke after 3 ms): a whole window when bursty, a
    /// fraction when paced (after the first 10 segments, which Linux never paces).
    pub sent_after_2ms: Option<u64>,
    /// Segments retransmitted while sending this reply.
    pub retransmits: u32,
}

/// One reply the servers sent, keyed by trial.
type Records = Arc<Mutex<HashMap<u64, SenderRecord>>>;

/// A reply server on one node: answers [`Request`]s on each accepted connection.
struct Server {
    addr: SocketAddr,
    records: Records,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

fn listener_in(topo: &testbed::Topology, node: Node, ip: IpAddr) -> Result<TcpListener> {
    topo.run_in(node, move || -> Result<TcpListener> {
        let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)?;
        s.set_reuse_address(true)?;
        // Accepted connections inherit the listener's congestion control.
        s.set_tcp_congestion(b"cubic")
            .context("selecting cubic (TCP_CONGESTION)")?;
        s.bind(&SocketAddr::new(ip, 0).into())?;
        s.listen(64)?;
        Ok(s.into())
    })?
}

impl Server {
    fn start(topo: &testbed::Topology, node: Node, ip: IpAddr) -> Result<Server> {
        let listener = listener_in(topo, node, ip)?;
        let addr = listener.local_addr()?;
        let records: Records = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let (r, s) = (records.clone(), stop.clone());
        let thread = std::thread::Builder::new()
            .name("pacing-server".into())
            .spawn(move || accept_loop(listener, r, s))?;
        Ok(Server {
            addr,
            records,
            stop,
            thread: Some(thread),
        })
    }

    /// The record of `trial`, waiting up to `wait` for the server to finish it.
    fn record(&self, trial: u64, wait: Duration) -> Option<SenderRecord> {
        let end = Instant::now() + wait;
        loop {
            if let Some(r) = self.records.lock().ok()?.remove(&trial) {
                return Some(r);
            }
            if Instant::now() > end {
                return None;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn accept_loop(listener: TcpListener, records: Records, stop: Arc<AtomicBool>) {
    while !stop.load(Ordering::Relaxed) {
        match netsys::wait_readable(listener.as_fd(), Duration::from_millis(100)) {
            Ok(true) => {}
            Ok(false) => continue,
            Err(e) => {
                tracing::error!(error = %e, "pacing server: waiting for connections");
                return;
            }
        }
        let Ok((stream, _)) = listener.accept() else {
            continue;
        };
        let (r, s) = (records.clone(), stop.clone());
        let spawned = std::thread::Builder::new()
            .name("pacing-conn".into())
            .spawn(move || {
                if let Err(e) = serve(stream, &r, &s) {
                    tracing::warn!(error = %e, "pacing server connection");
                }
            });
        if let Err(e) = spawned {
            tracing::error!(error = %e, "pacing server: spawning a connection thread");
        }
    }
}

/// Reads exactly `buf.len()` bytes; `Ok(false)` on a clean end of stream before the first.
fn read_request(s: &mut TcpStream, buf: &mut [u8], stop: &AtomicBool) -> Result<bool> {
    let mut got = 0;
    while got < buf.len() {
        match s.read(&mut buf[got..]) {
            Ok(0) if got == 0 => return Ok(false),
            Ok(0) => bail!("connection closed inside a request"),
            Ok(n) => got += n,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                if stop.load(Ordering::Relaxed) {
                    bail!("stopped");
                }
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(true)
}

fn serve(mut s: TcpStream, records: &Records, stop: &AtomicBool) -> Result<()> {
    s.set_read_timeout(Some(Duration::from_millis(200)))?;
    s.set_nodelay(true)?;
    let zeros = vec![0u8; 64 * 1024];
    let mut current: Option<Sender> = None;
    // The reply whose retransmissions are still being counted: (trial, record, total before).
    let mut open: Option<(u64, SenderRecord, u32)> = None;
    let finish = |open: &mut Option<(u64, SenderRecord, u32)>, s: &TcpStream| {
        if let Some((trial, mut rec, before)) = open.take() {
            let total = netsys::tcp_info(s)
                .map(|i| i.total_retrans)
                .unwrap_or(before);
            rec.retransmits = total.saturating_sub(before);
            if let Ok(mut m) = records.lock() {
                m.insert(trial, rec);
            }
        }
    };
    loop {
        let mut hdr = [0u8; REQUEST_LEN];
        let more = read_request(&mut s, &mut hdr, stop);
        // The previous reply is complete once the client asks again or closes.
        finish(&mut open, &s);
        if !more? {
            return Ok(());
        }
        let req = Request::decode(&hdr)?;
        let sock = socket2::SockRef::from(&s);
        if current.map(Sender::congestion) != Some(req.sender.congestion()) {
            sock.set_tcp_congestion(req.sender.congestion().as_bytes())
                .with_context(|| format!("TCP_CONGESTION {}", req.sender.congestion()))?;
        }
        if req.sender.sets_pacing_cap() {
            netsys::set_max_pacing_rate(&s, PACING_CAP_BYTES_PER_SEC)?;
        } else if current == Some(Sender::CubicPaced) {
            bail!("a connection cannot go back from paced to unpaced");
        }
        current = Some(req.sender);
        let info = netsys::tcp_info(&s)?;
        let cap = netsys::max_pacing_rate(&s)?;
        let congestion = sock
            .tcp_congestion()
            .map(|b| {
                String::from_utf8_lossy(&b)
                    .trim_end_matches('\0')
                    .to_string()
            })
            .unwrap_or_default();
        let mut rec = SenderRecord {
            congestion,
            max_pacing_rate: (cap != u64::MAX).then_some(cap),
            cwnd_before: info.snd_cwnd,
            ssthresh_before: info.snd_ssthresh,
            srtt_us: info.rtt_us,
            snd_wnd: info.snd_wnd,
            pacing_rate: info.pacing_rate,
            sent_after_2ms: None,
            retransmits: 0,
        };
        let start = Instant::now();
        let mut left = req.size;
        while left > 0 {
            let n = left.min(zeros.len() as u64) as usize;
            s.write_all(&zeros[..n])?;
            left -= n as u64;
        }
        let probe = start + Duration::from_millis(2);
        let now = Instant::now();
        if now <= probe {
            std::thread::sleep(probe - now);
            let unsent = netsys::unsent_bytes(&s)?;
            // A wake-up late on a busy machine would credit a paced sender with more.
            if start.elapsed() <= Duration::from_millis(3) {
                rec.sent_after_2ms = Some(req.size.saturating_sub(unsent));
            }
        }
        open = Some((req.trial, rec, info.total_retrans));
    }
}

/// The CUBIC bulk flow origin → client that fills the bottleneck.
struct Elephant {
    received: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    client: TcpStream,
    threads: Vec<JoinHandle<()>>,
}

impl Elephant {
    fn start(topo: &testbed::Topology) -> Result<Elephant> {
        let listener = listener_in(topo, Node::Origin, topo.addr(Node::Origin))?;
        let addr = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let received = Arc::new(AtomicU64::new(0));
        let s = stop.clone();
        let sender = std::thread::Builder::new()
            .name("elephant-tx".into())
            .spawn(move || {
                // Bounded: if the client never connects, the thread ends instead of blocking.
                if !matches!(
                    netsys::wait_readable(listener.as_fd(), Duration::from_secs(15)),
                    Ok(true)
                ) {
                    return;
                }
                let Ok((mut c, _)) = listener.accept() else {
                    return;
                };
                let _ = c.set_write_timeout(Some(Duration::from_millis(200)));
                let buf = vec![0u8; 256 * 1024];
                while !s.load(Ordering::Relaxed) {
                    match c.write(&buf) {
                        Ok(_) => {}
                        Err(e)
                            if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
                        Err(e) if e.kind() == ErrorKind::Interrupted => {}
                        Err(_) => return,
                    }
                }
            })?;
        let client = topo.run_in(Node::Client, move || {
            TcpStream::connect_timeout(&addr, Duration::from_secs(10))
        })??;
        client.set_read_timeout(Some(Duration::from_millis(200)))?;
        let mut rx = client.try_clone()?;
        let (s, r) = (stop.clone(), received.clone());
        let receiver = std::thread::Builder::new()
            .name("elephant-rx".into())
            .spawn(move || {
                let mut buf = vec![0u8; 256 * 1024];
                while !s.load(Ordering::Relaxed) {
                    match rx.read(&mut buf) {
                        Ok(0) => return,
                        Ok(n) => {
                            r.fetch_add(n as u64, Ordering::Relaxed);
                        }
                        Err(e)
                            if matches!(
                                e.kind(),
                                ErrorKind::WouldBlock
                                    | ErrorKind::TimedOut
                                    | ErrorKind::Interrupted
                            ) => {}
                        Err(_) => return,
                    }
                }
            })?;
        Ok(Elephant {
            received,
            stop,
            client,
            threads: vec![sender, receiver],
        })
    }

    fn bytes(&self) -> u64 {
        self.received.load(Ordering::Relaxed)
    }
}

impl Drop for Elephant {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.client.shutdown(Shutdown::Both);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// How the elephant filled the bottleneck.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ElephantStats {
    /// Whether the fill rule was met before its timeout.
    pub filled: bool,
    /// Seconds from the elephant's start until the rule was met (or the timeout).
    pub fill_secs: f64,
    /// Delivery in the last fill window, Mbit/s.
    pub rate_at_fill_mbit: f64,
    /// Mean delivery over the measurement phase (short flows and pool replies running beside
    /// it), Mbit/s.
    pub mean_rate_measuring_mbit: f64,
    /// The bottleneck's payload ceiling for one flow, Mbit/s.
    pub ceiling_mbit: f64,
}

/// Timing of one reply at the client.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Sample {
    /// Request written → last byte read, ms.
    pub fct_ms: f64,
    /// Request written → first byte read, ms.
    pub first_byte_ms: f64,
    /// The sender's view.
    pub sender: SenderRecord,
}

/// One cell of the short-flow grid.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ShortCell {
    /// Initial window, segments.
    pub iw: u32,
    /// Paced (`cubic-paced`) or bursty (`cubic`).
    pub sender: Sender,
    /// FCT summary, ms (`None` if no sample).
    pub fct_ms: Option<Summary>,
    /// Every sample, in the order measured.
    pub samples: Vec<Sample>,
    /// Trials that failed (with the error), not counted in the summary.
    pub failures: Vec<String>,
}

/// One cell of the warm-connection measurement.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PoolCell {
    /// Reply size, bytes.
    pub size: u64,
    /// Sender.
    pub sender: Sender,
    /// FCT summary, ms.
    pub fct_ms: Option<Summary>,
    /// Congestion window before the reply (after warm-up and idle), segments: median.
    pub cwnd_before_median: Option<f64>,
    /// Every sample.
    pub samples: Vec<Sample>,
    /// Trials that failed, with the error.
    pub failures: Vec<String>,
}

/// Everything measured on one bed.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BedResult {
    /// The bed.
    pub spec: BedSpec,
    /// Label.
    pub label: String,
    /// One BDP, bytes.
    pub bdp_bytes: u64,
    /// The drop-tail queue, bytes.
    pub queue_bytes: u64,
    /// Sysctls of the sending namespace that shape the result.
    pub sysctls: Vec<(String, String)>,
    /// The elephant.
    pub elephant: ElephantStats,
    /// Packets the down direction's queue dropped while measuring.
    pub down_drops_measuring: u64,
    /// Mean queueing delay of the down direction while measuring, ms.
    pub down_queue_delay_ms: Option<f64>,
    /// Short-flow cells.
    pub short: Vec<ShortCell>,
    /// Warm-connection cells (empty when not run on this bed).
    pub pool: Vec<PoolCell>,
}

/// The warm-connection part.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PoolOptions {
    /// Rates (Mbit/s) of the beds it runs on; empty: none.
    pub rates_mbit: Vec<u32>,
    /// Repetitions per cell.
    pub reps: usize,
    /// Reply sizes, bytes.
    pub sizes: Vec<u64>,
    /// Senders compared.
    pub senders: Vec<Sender>,
    /// The warm-up transfer that grows the window, bytes.
    pub warm_bytes: u64,
    /// Idle time between warm-up and the measured reply.
    pub idle: Duration,
}

/// The whole experiment.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Options {
    /// Beds, run in order.
    pub beds: Vec<BedSpec>,
    /// Initial windows, segments.
    pub iws: Vec<u32>,
    /// Repetitions per short-flow cell.
    pub reps: usize,
    /// Short-flow size, bytes.
    pub short_bytes: u64,
    /// The warm-connection part.
    pub pool: PoolOptions,
    /// When the elephant has filled the bottleneck.
    pub fill: FillRule,
    /// Seed of the trial order.
    pub seed: u64,
}

impl Options {
    /// Checks the values.
    pub fn validate(&self) -> Result<()> {
        ensure!(!self.beds.is_empty(), "no bed");
        for b in &self.beds {
            b.validate()?;
        }
        ensure!(!self.iws.is_empty(), "no initial window");
        ensure!(
            self.iws.iter().all(|i| (1..=1000).contains(i)),
            "initial windows must be 1..=1000 segments"
        );
        ensure!(self.reps >= 1, "at least one repetition");
        ensure!(
            (1..=MAX_REPLY_BYTES).contains(&self.short_bytes),
            "short flow size outside 1..={MAX_REPLY_BYTES}"
        );
        ensure!(
            self.pool
                .sizes
                .iter()
                .chain([&self.pool.warm_bytes])
                .all(|s| (1..=MAX_REPLY_BYTES).contains(s)),
            "pool sizes outside 1..={MAX_REPLY_BYTES}"
        );
        ensure!(
            self.pool.rates_mbit.is_empty() || self.pool.reps >= 1,
            "pool part needs at least one repetition"
        );
        Ok(())
    }
}

/// What a run writes to results.json.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Results {
    /// Schema version.
    pub schema: u32,
    /// The options.
    pub options: Options,
    /// `uname -r`.
    pub kernel: String,
    /// Load average (1 min) before and after the run.
    pub load_before: Option<f64>,
    /// As `load_before`, after.
    pub load_after: Option<f64>,
    /// Seconds the run took.
    pub secs: f64,
    /// Per bed.
    pub beds: Vec<BedResult>,
}

fn load_avg() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

fn read_sysctl(topo: &testbed::Topology, node: Node, key: &str) -> Result<String> {
    let path = format!("/proc/sys/{}", key.replace('.', "/"));
    Ok(topo
        .run_in(node, || std::fs::read_to_string(&path))?
        .with_context(|| format!("reading {key}"))?
        .trim()
        .to_string())
}

fn write_sysctl(topo: &testbed::Topology, node: Node, key: &str, value: &str) -> Result<()> {
    let path = format!("/proc/sys/{}", key.replace('.', "/"));
    topo.run_in(node, || std::fs::write(&path, value))?
        .with_context(|| format!("setting {key} = {value}"))
}

/// Reads one reply of `size` bytes; returns (first byte, last byte) instants.
fn read_reply(s: &mut TcpStream, size: u64, buf: &mut [u8]) -> Result<(Instant, Instant)> {
    let mut got = 0u64;
    let mut first = None;
    while got < size {
        let want = (size - got).min(buf.len() as u64) as usize;
        let n = match s.read(&mut buf[..want]) {
            Ok(0) => bail!("connection closed after {got} of {size} bytes"),
            Ok(n) => n,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => return Err(e).context(format!("reading the reply ({got} of {size})")),
        };
        first.get_or_insert_with(Instant::now);
        got += n as u64;
    }
    let last = Instant::now();
    Ok((first.unwrap_or(last), last))
}

fn connect(topo: &testbed::Topology, addr: SocketAddr) -> Result<TcpStream> {
    let s = topo.run_in(Node::Client, move || {
        TcpStream::connect_timeout(&addr, Duration::from_secs(10))
    })??;
    s.set_nodelay(true)?;
    s.set_read_timeout(Some(Duration::from_secs(60)))?;
    Ok(s)
}

fn ask(s: &mut TcpStream, req: Request, buf: &mut [u8]) -> Result<(f64, f64)> {
    let t0 = Instant::now();
    s.write_all(&req.encode())?;
    let (first, last) = read_reply(s, req.size, buf)?;
    let ms = |t: Instant| t.duration_since(t0).as_secs_f64() * 1000.0;
    Ok((ms(last), ms(first)))
}

struct Ctx<'a> {
    topo: &'a testbed::Topology,
    server: &'a Server,
    next_trial: u64,
    buf: Vec<u8>,
}

impl Ctx<'_> {
    fn trial_id(&mut self) -> u64 {
        self.next_trial += 1;
        self.next_trial
    }

    fn short_trial(&mut self, iw: u32, sender: Sender, size: u64) -> Result<Sample> {
        self.topo.set_initcwnd(Node::Remote, iw)?;
        let mut s = connect(self.topo, self.server.addr)?;
        let trial = self.trial_id();
        let (fct_ms, first_byte_ms) = ask(
            &mut s,
            Request {
                trial,
                size,
                sender,
            },
            &mut self.buf,
        )?;
        drop(s);
        let sender = self
            .server
            .record(trial, Duration::from_secs(10))
            .context("the server kept no record of the reply")?;
        Ok(Sample {
            fct_ms,
            first_byte_ms,
            sender,
        })
    }

    fn pool_trial(&mut self, sender: Sender, size: u64, o: &PoolOptions) -> Result<Sample> {
        let mut s = connect(self.topo, self.server.addr)?;
        let warm = Request {
            trial: self.trial_id(),
            size: o.warm_bytes,
            sender,
        };
        ask(&mut s, warm, &mut self.buf).context("warm-up transfer")?;
        std::thread::sleep(o.idle);
        let trial = self.trial_id();
        let (fct_ms, first_byte_ms) = ask(
            &mut s,
            Request {
                trial,
                size,
                sender,
            },
            &mut self.buf,
        )?;
        drop(s);
        let _ = self.server.record(warm.trial, Duration::from_secs(10));
        let rec = self
            .server
            .record(trial, Duration::from_secs(10))
            .context("the server kept no record of the reply")?;
        Ok(Sample {
            fct_ms,
            first_byte_ms,
            sender: rec,
        })
    }
}

/// Progress lines go to stderr through this.
pub type Progress<'a> = &'a (dyn Fn(&str) + Sync);

/// Runs every cell on one bed.
pub fn run_bed(spec: &BedSpec, o: &Options, progress: Progress<'_>) -> Result<BedResult> {
    spec.validate()?;
    let topo = testbed::Topology::up(&spec.profile())
        .with_context(|| format!("bringing up {}", spec.label()))?;
    for node in [Node::Client, Node::Remote, Node::Origin] {
        // Each short flow starts from the route's IW, not from a cached ssthresh or cwnd.
        write_sysctl(&topo, node, "net.ipv4.tcp_no_metrics_save", "1")?;
    }
    let max_iw = o.iws.iter().copied().max().unwrap_or(10).max(10);
    topo.set_initcwnd(Node::Client, max_iw)?;
    let mut sysctls = Vec::new();
    for key in [
        "net.ipv4.tcp_pacing_ss_ratio",
        "net.ipv4.tcp_pacing_ca_ratio",
        "net.ipv4.tcp_slow_start_after_idle",
        "net.ipv4.tcp_no_metrics_save",
        "net.ipv4.tcp_wmem",
        "net.core.default_qdisc",
    ] {
        let v = read_sysctl(&topo, Node::Remote, key).unwrap_or_else(|e| format!("({e})"));
        sysctls.push((key.to_string(), v));
    }
    let server = Server::start(&topo, Node::Remote, topo.addr(Node::Remote))?;
    let elephant = Elephant::start(&topo)?;

    // Wait for the elephant to fill the bottleneck.
    let window = fill_window(spec.rtt_ms);
    let started = Instant::now();
    let mut windows = Vec::new();
    let mut last = elephant.bytes();
    let filled = loop {
        std::thread::sleep(window);
        let now = elephant.bytes();
        windows.push(now - last);
        last = now;
        let waited = started.elapsed();
        if waited >= o.fill.min_wait && o.fill.met(&windows, window, spec.ceiling_bps()) {
            break true;
        }
        if waited >= o.fill.timeout {
            break false;
        }
    };
    let fill_secs = started.elapsed().as_secs_f64();
    let rate_at_fill_mbit =
        windows.last().copied().unwrap_or(0) as f64 * 8.0 / window.as_secs_f64() / 1e6;
    progress(&format!(
        "{}: elephant {} after {fill_secs:.1} s at {rate_at_fill_mbit:.1} Mbit/s (ceiling {:.1})",
        spec.label(),
        if filled {
            "filled the link"
        } else {
            "did NOT reach the fill rule"
        },
        spec.ceiling_bps() / 1e6
    ));

    let measuring = Instant::now();
    let bytes_before = elephant.bytes();
    let (down_before, _) = topo.long_link_stats();
    let gap = Duration::from_millis(u64::from(spec.rtt_ms) * 2).max(Duration::from_millis(200));
    let mut ctx = Ctx {
        topo: &topo,
        server: &server,
        next_trial: 0,
        buf: vec![0u8; 256 * 1024],
    };

    let configs: Vec<(u32, Sender)> = o
        .iws
        .iter()
        .flat_map(|&iw| [(iw, Sender::Cubic), (iw, Sender::CubicPaced)])
        .collect();
    let mut short: Vec<ShortCell> = configs
        .iter()
        .map(|&(iw, sender)| ShortCell {
            iw,
            sender,
            fct_ms: None,
            samples: Vec::new(),
            failures: Vec::new(),
        })
        .collect();
    for rep in 0..o.reps {
        for i in trial_order(configs.len(), rep, o.seed) {
            let (iw, sender) = configs[i];
            match ctx.short_trial(iw, sender, o.short_bytes) {
                Ok(s) => short[i].samples.push(s),
                Err(e) => short[i].failures.push(format!("{e:#}")),
            }
            std::thread::sleep(gap);
        }
        progress(&format!(
            "{}: short flows, repetition {}/{} done",
            spec.label(),
            rep + 1,
            o.reps
        ));
    }
    for c in &mut short {
        let v: Vec<f64> = c.samples.iter().map(|s| s.fct_ms).collect();
        c.fct_ms = summarize(&v);
    }

    let mut pool = Vec::new();
    if o.pool.rates_mbit.contains(&spec.rate_mbit) {
        // A pool connection was opened long ago: its initial window does not matter, but the
        // route's must not leak the last short-flow IW into it.
        topo.set_initcwnd(Node::Remote, 10)?;
        let pconfigs: Vec<(u64, Sender)> = o
            .pool
            .sizes
            .iter()
            .flat_map(|&size| o.pool.senders.iter().map(move |&s| (size, s)))
            .collect();
        pool = pconfigs
            .iter()
            .map(|&(size, sender)| PoolCell {
                size,
                sender,
                fct_ms: None,
                cwnd_before_median: None,
                samples: Vec::new(),
                failures: Vec::new(),
            })
            .collect();
        for rep in 0..o.pool.reps {
            for i in trial_order(pconfigs.len(), rep, o.seed ^ 0x706f_6f6c) {
                let (size, sender) = pconfigs[i];
                match ctx.pool_trial(sender, size, &o.pool) {
                    Ok(s) => pool[i].samples.push(s),
                    Err(e) => pool[i].failures.push(format!("{e:#}")),
                }
                std::thread::sleep(gap);
            }
            progress(&format!(
                "{}: warm connections, repetition {}/{} done",
                spec.label(),
                rep + 1,
                o.pool.reps
            ));
        }
        for c in &mut pool {
            let v: Vec<f64> = c.samples.iter().map(|s| s.fct_ms).collect();
            c.fct_ms = summarize(&v);
            let w: Vec<f64> = c
                .samples
                .iter()
                .map(|s| f64::from(s.sender.cwnd_before))
                .collect();
            c.cwnd_before_median = crate::stats::median(&w);
        }
    }

    let secs = measuring.elapsed().as_secs_f64();
    let mean_rate_measuring_mbit =
        (elephant.bytes() - bytes_before) as f64 * 8.0 / secs.max(1e-9) / 1e6;
    let (down_after, _) = topo.long_link_stats();
    let queued = down_after.model.queued - down_before.model.queued;
    let down_queue_delay_ms = (queued > 0).then(|| {
        (down_after.model.queue_wait_ns - down_before.model.queue_wait_ns) as f64
            / queued as f64
            / 1e6
    });
    drop(elephant);
    drop(server);
    topo.down()?;
    Ok(BedResult {
        spec: spec.clone(),
        label: spec.label(),
        bdp_bytes: spec.bdp_bytes(),
        queue_bytes: spec.queue_bytes(),
        sysctls,
        elephant: ElephantStats {
            filled,
            fill_secs,
            rate_at_fill_mbit,
            mean_rate_measuring_mbit,
            ceiling_mbit: spec.ceiling_bps() / 1e6,
        },
        down_drops_measuring: down_after.model.dropped_queue - down_before.model.dropped_queue,
        down_queue_delay_ms,
        short,
        pool,
    })
}

/// Runs every bed and writes results.json, summary.md and fct.svg into `out`; a bed that
/// fails to come up stops the run (its error names it). Results so far are written after each
/// bed, so an interrupted run keeps what it measured.
pub fn run(o: &Options, out: &Path, progress: Progress<'_>) -> Result<Results> {
    o.validate()?;
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .unwrap_or_default()
        .trim()
        .to_string();
    let started = Instant::now();
    let mut res = Results {
        schema: 1,
        options: o.clone(),
        kernel,
        load_before: load_avg(),
        load_after: None,
        secs: 0.0,
        beds: Vec::new(),
    };
    for spec in &o.beds {
        let bed = run_bed(spec, o, progress)?;
        res.beds.push(bed);
        res.load_after = load_avg();
        res.secs = started.elapsed().as_secs_f64();
        write_outputs(&res, out)?;
    }
    Ok(res)
}

/// Writes results.json, summary.md and (if there is anything to draw) fct.svg.
pub fn write_outputs(res: &Results, out: &Path) -> Result<Vec<PathBuf>> {
    let json = out.join("results.json");
    std::fs::write(&json, serde_json::to_vec_pretty(res)?)
        .with_context(|| format!("writing {}", json.display()))?;
    let md = out.join("summary.md");
    std::fs::write(&md, summary_md(res)).with_context(|| format!("writing {}", md.display()))?;
    let mut files = vec![json, md];
    let svg = out.join("fct.svg");
    if crate::pacing_plot::draw(&svg, res)? {
        files.push(svg);
    }
    Ok(files)
}

fn cell_text(s: &Option<Summary>) -> String {
    match s {
        Some(s) => format!("{:.0} [{:.0}–{:.0}]", s.median, s.ci_low, s.ci_high),
        None => "—".to_string(),
    }
}

/// The run as Markdown tables: per bed, FCT median [95 % CI] per IW, bursty and paced, and the
/// warm-connection cells.
pub fn summary_md(res: &Results) -> String {
    let o = &res.options;
    let mut s = String::new();
    s.push_str(&format!(
        "# Pacing and large initial windows beside a CUBIC elephant (seed 002, Fig. 13)\n\n\
         Kernel {}, load average {:?} → {:?}, {:.0} s. Short flow {} bytes, {} repetitions per \
         cell; FCT = request written → last byte read at the client, ms: median [CI of the \
         median, order statistics, ≥ 95 % when n ≥ 6].\n\n",
        res.kernel, res.load_before, res.load_after, res.secs, o.short_bytes, o.reps
    ));
    for b in &res.beds {
        s.push_str(&format!(
            "## {} (RTT {} ms, {} Mbit/s, queue {} × BDP = {} B)\n\n\
             Elephant: {} after {:.1} s ({:.1} Mbit/s; ceiling {:.1}); {:.1} Mbit/s while \
             measuring; down queue drops while measuring {}, mean queueing delay {}.\n\n",
            b.label,
            b.spec.rtt_ms,
            b.spec.rate_mbit,
            b.spec.queue_bdp,
            b.queue_bytes,
            if b.elephant.filled {
                "filled"
            } else {
                "NOT filled"
            },
            b.elephant.fill_secs,
            b.elephant.rate_at_fill_mbit,
            b.elephant.ceiling_mbit,
            b.elephant.mean_rate_measuring_mbit,
            b.down_drops_measuring,
            b.down_queue_delay_ms
                .map(|d| format!("{d:.1} ms"))
                .unwrap_or_else(|| "—".into()),
        ));
        s.push_str("| IW | bursty FCT | paced FCT | paced ÷ bursty (medians) | retrans bursty / paced (total) | sent in 2 ms, bursty / paced (median B) |\n|---|---|---|---|---|---|\n");
        let mut iws: Vec<u32> = b.short.iter().map(|c| c.iw).collect();
        iws.dedup();
        for iw in iws {
            let cell = |snd: Sender| b.short.iter().find(|c| c.iw == iw && c.sender == snd);
            let (u, p) = (cell(Sender::Cubic), cell(Sender::CubicPaced));
            let med = |c: Option<&ShortCell>| c.and_then(|c| c.fct_ms.as_ref()).map(|s| s.median);
            let ratio = crate::stats::ratio(med(p), med(u))
                .map(|r| format!("{r:.2}"))
                .unwrap_or_else(|| "—".into());
            let retr = |c: Option<&ShortCell>| {
                c.map(|c| c.samples.iter().map(|s| s.sender.retransmits).sum::<u32>())
                    .unwrap_or(0)
            };
            let sent = |c: Option<&ShortCell>| {
                let v: Vec<f64> = c
                    .map(|c| {
                        c.samples
                            .iter()
                            .filter_map(|s| s.sender.sent_after_2ms.map(|x| x as f64))
                            .collect()
                    })
                    .unwrap_or_default();
                crate::stats::median(&v)
                    .map(|m| format!("{m:.0}"))
                    .unwrap_or_else(|| "—".into())
            };
            let fails = |c: Option<&ShortCell>| c.map(|c| c.failures.len()).unwrap_or(0);
            let failed = fails(u) + fails(p);
            s.push_str(&format!(
                "| {iw} | {} | {} | {ratio} | {} / {} | {} / {} |{}\n",
                cell_text(&u.and_then(|c| c.fct_ms.clone())),
                cell_text(&p.and_then(|c| c.fct_ms.clone())),
                retr(u),
                retr(p),
                sent(u),
                sent(p),
                if failed > 0 {
                    format!(" {failed} failed")
                } else {
                    String::new()
                }
            ));
        }
        s.push('\n');
        if !b.pool.is_empty() {
            s.push_str(&format!(
                "Warm connection ({} B warm-up, idle {:.1} s, then the reply):\n\n\
                 | reply | sender | FCT | cwnd before (median, segments) | retrans (total) | failed |\n|---|---|---|---|---|---|\n",
                o.pool.warm_bytes,
                o.pool.idle.as_secs_f64()
            ));
            for c in &b.pool {
                s.push_str(&format!(
                    "| {} | {} | {} | {} | {} | {} |\n",
                    c.size,
                    c.sender.name(),
                    cell_text(&c.fct_ms),
                    c.cwnd_before_median
                        .map(|m| format!("{m:.0}"))
                        .unwrap_or_else(|| "—".into()),
                    c.samples.iter().map(|s| s.sender.retransmits).sum::<u32>(),
                    c.failures.len()
                ));
            }
            s.push('\n');
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_round_trips_and_rejects_bad_input() {
        for sender in Sender::ALL {
            let r = Request {
                trial: 42,
                size: SHORT_FLOW_BYTES,
                sender,
            };
            assert_eq!(Request::decode(&r.encode()).unwrap(), r);
        }
        let mut b = Request {
            trial: 1,
            size: 10,
            sender: Sender::Cubic,
        }
        .encode();
        b[16] = 9;
        assert!(Request::decode(&b).is_err(), "unknown sender");
        b[16] = 0;
        b[20] = 1;
        assert!(Request::decode(&b).is_err(), "reserved byte");
        let zero = Request {
            trial: 1,
            size: 0,
            sender: Sender::Cubic,
        };
        assert!(Request::decode(&zero.encode()).is_err());
        let huge = Request {
            size: MAX_REPLY_BYTES + 1,
            ..zero
        };
        assert!(Request::decode(&huge.encode()).is_err());
    }

    #[test]
    fn bed_geometry() {
        let b = BedSpec {
            rtt_ms: 130,
            rate_mbit: 50,
            queue_bdp: 0.5,
        };
        assert_eq!(b.bdp_bytes(), 812_500);
        assert_eq!(b.queue_bytes(), 406_250);
        assert_eq!(b.label(), "rtt130-50mbit-q0.5");
        let p = b.profile();
        assert_eq!(p.down.queue_bytes, 406_250);
        assert_eq!(p.rtt(), Duration::from_millis(130));
        assert_eq!(
            p.path_rtt(),
            Duration::from_millis(130),
            "no access/origin delay"
        );
        assert!(p.tcp_rmem[1] >= 1 << 20);
        p.validate().unwrap();
        // A tiny BDP still gets the test bed's smallest queue.
        let tiny = BedSpec {
            rtt_ms: 1,
            rate_mbit: 1,
            queue_bdp: 0.5,
        };
        assert_eq!(tiny.queue_bytes(), testbed::profile::MIN_QUEUE_BYTES);
        assert!(BedSpec {
            rtt_ms: 30,
            rate_mbit: 10,
            queue_bdp: 0.0
        }
        .validate()
        .is_err());
        assert_eq!(grid(&[30, 130], &[0.5, 1.5], &[10, 50]).len(), 8);
    }

    #[test]
    fn fill_rule_needs_consecutive_full_windows() {
        let rule = FillRule {
            fraction: 0.85,
            windows: 3,
            min_wait: Duration::ZERO,
            timeout: Duration::from_secs(1),
        };
        let w = Duration::from_millis(500);
        // 10 Mbit/s for 0.5 s = 625 000 bytes; 85 % = 531 250.
        let full = 540_000;
        let low = 500_000;
        assert!(!rule.met(&[full, full], w, 10e6), "too few windows");
        assert!(rule.met(&[low, full, full, full], w, 10e6));
        assert!(
            !rule.met(&[full, full, low, full], w, 10e6),
            "a dip restarts"
        );
        assert!(!rule.met(&[full; 3], Duration::ZERO, 10e6));
        assert_eq!(fill_window(30), Duration::from_millis(250));
        assert_eq!(fill_window(600), Duration::from_millis(1200));
    }

    #[test]
    fn trial_order_is_a_reproducible_permutation() {
        let a = trial_order(10, 3, 7);
        let mut sorted = a.clone();
        sorted.sort();
        assert_eq!(sorted, (0..10).collect::<Vec<_>>());
        assert_eq!(a, trial_order(10, 3, 7));
        assert_ne!(a, trial_order(10, 4, 7), "each repetition shuffles anew");
    }

    #[test]
    fn median_ci_uses_binomial_order_statistics() {
        // n = 10: P(X ≤ 1) = 11/1024 ≤ 0.025 < P(X ≤ 2) = 56/1024, so (x2, x9), 97.85 %.
        let (lo, hi, level) = median_ci_ranks(10).unwrap();
        assert_eq!((lo, hi), (2, 9));
        assert!((level - (1.0 - 22.0 / 1024.0)).abs() < 1e-12);
        // n = 30 (the seed's): (x10, x21), 95.7 %.
        let (lo, hi, level) = median_ci_ranks(30).unwrap();
        assert_eq!((lo, hi), (10, 21));
        assert!((0.95..0.96).contains(&level), "{level}");
        // Too few samples for 95 %: the range, with its real coverage.
        let (lo, hi, level) = median_ci_ranks(4).unwrap();
        assert_eq!((lo, hi), (1, 4));
        assert!((level - 0.875).abs() < 1e-12);
        assert_eq!(median_ci_ranks(0), None);

        let v: Vec<f64> = (1..=10).rev().map(f64::from).collect();
        let s = summarize(&v).unwrap();
        assert_eq!((s.median, s.ci_low, s.ci_high), (5.5, 2.0, 9.0));
        assert_eq!((s.min, s.max, s.mean), (1.0, 10.0, 5.5));
        assert_eq!(summarize(&[]), None);
        assert_eq!(summarize(&[1.0, f64::INFINITY]), None);
    }

    #[test]
    fn sender_names_parse_back() {
        for s in Sender::ALL {
            assert_eq!(s.name().parse::<Sender>().unwrap(), s);
        }
        assert!("reno".parse::<Sender>().is_err());
        assert!(Sender::CubicPaced.sets_pacing_cap());
        assert!(!Sender::Bbr.sets_pacing_cap(), "BBR paces by itself");
    }
}
