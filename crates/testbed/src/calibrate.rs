//! Measurements across the long link (edge ↔ remote) against the profile: RTT by TCP
//! ping-pong, the link's own rate under a UDP flow it cannot carry, goodput of one bulk
//! TCP flow after slow start, and loss over a train of UDP packets. Everything runs in
//! this process: sockets are opened on threads inside the namespaces
//! ([`Topology::run_in`]). It measures; the bounds a measurement must meet are its
//! callers' (the calibration tests, `linkem calibrate`'s report).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context};
use serde::Serialize;
use socket2::Socket;

use crate::topology::{Node, Topology, EDGE_LONG_ADDR, REMOTE_LONG_ADDR};

/// Ping-pong samples for the RTT (the calibration uses the median).
pub const DEFAULT_RTT_SAMPLES: usize = 20;
/// UDP packets sent for the loss measurement.
pub const DEFAULT_LOSS_PACKETS: u32 = 10_000;
/// UDP payload of the loss probes (sequence number plus padding).
pub const LOSS_PAYLOAD: usize = 64;
/// Highest probe rate of the loss measurement, packets/s: slow enough that neither
/// the receiving socket nor the emulator loop drops anything on a loaded machine.
pub const DEFAULT_LOSS_PROBE_PPS: f64 = 20_000.0;
/// Losses the default probe count aims to observe, so that ± 20 % is about three
/// standard deviations of the binomial count even for rare loss.
pub const DEFAULT_EXPECTED_LOSSES: f64 = 200.0;

/// Probes for a loss measurement of the down direction: at least
/// [`DEFAULT_LOSS_PACKETS`], more when loss is rare (0.1 % → 200 000).
pub fn default_loss_packets(profile: &crate::Profile) -> u32 {
    let p = profile.down.loss.mean_loss();
    if p <= 0.0 {
        return DEFAULT_LOSS_PACKETS;
    }
    ((DEFAULT_EXPECTED_LOSSES / p).ceil() as u32).clamp(DEFAULT_LOSS_PACKETS, 1_000_000)
}
/// TCP payload per full-size packet at MTU 1500 with timestamps (1500 − 20 − 20 − 12):
/// the link rate counts whole IP packets, so one TCP flow's goodput ceiling is
/// `rate × TCP_PAYLOAD / MTU` (96.5 % of the rate).
pub const TCP_PAYLOAD: u64 = 1448;
/// Bytes one bulk write hands the kernel.
const WRITE_CHUNK: usize = 64 * 1024;
/// How often a flight-limited sender looks for acknowledged bytes.
const FLIGHT_POLL: Duration = Duration::from_micros(200);
/// Longest any single blocking socket call of a measurement may take.
const IO_TIMEOUT: Duration = Duration::from_secs(30);

/// Options of a goodput measurement.
#[derive(Debug, Clone)]
pub struct GoodputOptions {
    /// Congestion control of the sender (`None`: the namespace default).
    pub congestion_control: Option<String>,
    /// Caps the bytes the sender keeps outstanding (unacknowledged plus unsent, read
    /// with `SIOCOUTQ`), as a receive window of this many bytes would. Enforced by the
    /// sending application because this kernel does not keep the advertised window
    /// under `TCP_WINDOW_CLAMP` or a small `SO_RCVBUF` (see the README).
    pub max_flight_bytes: Option<u32>,
    /// Time after the first byte that is not counted (slow start, startup).
    pub warmup: Duration,
    /// Counted interval.
    pub duration: Duration,
}

impl GoodputOptions {
    /// Warm-up of max(2 s, 20 RTT) and a measured interval of max(4 s, 10 RTT).
    pub fn for_profile(topo: &Topology) -> GoodputOptions {
        let rtt = topo.profile().rtt();
        GoodputOptions {
            congestion_control: None,
            max_flight_bytes: None,
            warmup: (rtt * 20).max(Duration::from_secs(2)),
            duration: (rtt * 10).max(Duration::from_secs(4)),
        }
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Median of samples (upper median for even counts is not used: mean of the two middle).
pub fn median(samples: &[Duration]) -> Duration {
    let mut v = samples.to_vec();
    v.sort();
    match v.len() {
        0 => Duration::ZERO,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2,
    }
}

/// Shortest of the samples (zero when there are none).
pub fn shortest(samples: &[Duration]) -> Duration {
    samples.iter().min().copied().unwrap_or_default()
}

/// Round trips of a 1-byte TCP ping-pong from edge to remote (`TCP_NODELAY`), after one
/// unrecorded warm-up exchange.
pub fn rtt_samples(topo: &Topology, samples: usize) -> anyhow::Result<Vec<Duration>> {
    let listener = topo.run_in(Node::Remote, || TcpListener::bind((REMOTE_LONG_ADDR, 0)))??;
    let addr = listener.local_addr()?;
    let server = std::thread::spawn(move || -> std::io::Result<()> {
        let (mut s, _) = listener.accept()?;
        s.set_nodelay(true)?;
        s.set_read_timeout(Some(IO_TIMEOUT))?;
        let mut b = [0u8; 1];
        loop {
            match s.read(&mut b)? {
                0 => return Ok(()),
                _ => s.write_all(&b)?,
            }
        }
    });
    let mut c = topo.run_in(Node::Edge, || TcpStream::connect_timeout(&addr, IO_TIMEOUT))??;
    c.set_nodelay(true)?;
    c.set_read_timeout(Some(IO_TIMEOUT))?;
    let mut out = Vec::with_capacity(samples);
    let mut b = [7u8; 1];
    for i in 0..=samples {
        let t = Instant::now();
        c.write_all(&b)?;
        c.read_exact(&mut b).context("ping-pong reply")?;
        if i > 0 {
            out.push(t.elapsed());
        }
    }
    drop(c);
    server
        .join()
        .map_err(|_| anyhow::anyhow!("ping-pong server panicked"))?
        .context("ping-pong server")?;
    Ok(out)
}

/// Goodput (bit/s of TCP payload) of one bulk flow remote → edge, counted over
/// `opts.duration` after `opts.warmup` from the first byte received.
pub fn goodput(topo: &Topology, opts: &GoodputOptions) -> anyhow::Result<f64> {
    let listener = topo.run_in(Node::Remote, || TcpListener::bind((REMOTE_LONG_ADDR, 0)))??;
    let addr = listener.local_addr()?;
    let stop = Arc::new(AtomicBool::new(false));
    let sender_stop = stop.clone();
    let cc = opts.congestion_control.clone();
    let max_flight = opts.max_flight_bytes.map(u64::from);
    let sender = std::thread::spawn(move || -> anyhow::Result<()> {
        let (s, _) = listener.accept()?;
        let s = Socket::from(s);
        if let Some(cc) = cc {
            s.set_tcp_congestion(cc.as_bytes())
                .with_context(|| format!("congestion control {cc:?}"))?;
        }
        s.set_write_timeout(Some(IO_TIMEOUT))?;
        let mut s = TcpStream::from(s);
        let chunk = vec![0x5au8; WRITE_CHUNK];
        while !sender_stop.load(Ordering::Relaxed) {
            let n = match max_flight {
                None => WRITE_CHUNK,
                Some(max) => {
                    s.set_nodelay(true)?;
                    let outstanding = netsys::send_queue_bytes(&s)?;
                    if outstanding >= max {
                        std::thread::sleep(FLIGHT_POLL);
                        continue;
                    }
                    ((max - outstanding) as usize).min(WRITE_CHUNK)
                }
            };
            if s.write_all(&chunk[..n]).is_err() {
                break; // the receiver closed: done
            }
        }
        Ok(())
    });
    let stream = topo.run_in(Node::Edge, || TcpStream::connect_timeout(&addr, IO_TIMEOUT))??;
    let result = receive(stream, opts);
    stop.store(true, Ordering::Relaxed);
    sender
        .join()
        .map_err(|_| anyhow::anyhow!("bulk sender panicked"))??;
    result
}

/// Least-squares slope of `y` over `x`, accumulated one sample at a time.
#[derive(Debug, Default)]
struct Slope {
    n: f64,
    sx: f64,
    sy: f64,
    sxx: f64,
    sxy: f64,
}

impl Slope {
    fn add(&mut self, x: f64, y: f64) {
        self.n += 1.0;
        self.sx += x;
        self.sy += y;
        self.sxx += x * x;
        self.sxy += x * y;
    }

    fn slope(&self) -> Option<f64> {
        let d = self.n * self.sxx - self.sx * self.sx;
        (self.n >= 2.0 && d > 0.0).then(|| (self.n * self.sxy - self.sx * self.sy) / d)
    }
}

/// Interval at which the receiver samples its byte count for the goodput fit.
const GOODPUT_TICK: Duration = Duration::from_millis(10);

/// Reads until the end of the counted interval; returns the goodput in bit/s as the
/// least-squares slope of bytes received against time, sampled every
/// [`GOODPUT_TICK`] over the interval. On a lossless link this equals bytes ÷ time;
/// with loss it is not thrown off by data a hole held back across an interval edge.
fn receive(mut s: TcpStream, opts: &GoodputOptions) -> anyhow::Result<f64> {
    s.set_read_timeout(Some(IO_TIMEOUT))?;
    let mut buf = vec![0u8; 256 * 1024];
    let n = s.read(&mut buf)?;
    ensure!(n > 0, "bulk sender closed before sending");
    fit_rate(n, opts, || {
        let n = s.read(&mut buf)?;
        ensure!(n > 0, "bulk sender closed early");
        Ok(n)
    })
}

/// The rate of a flow whose first `first` bytes just arrived, each later call of `read`
/// returning the bytes of the next arrival: the least-squares slope of the byte count against
/// time, sampled every [`GOODPUT_TICK`] over `opts.duration` after `opts.warmup`, in bit/s.
fn fit_rate(
    first: usize,
    opts: &GoodputOptions,
    mut read: impl FnMut() -> anyhow::Result<usize>,
) -> anyhow::Result<f64> {
    let start = Instant::now() + opts.warmup;
    let end = start + opts.duration;
    let mut total = first as u64;
    let mut next = start;
    let mut fit = Slope::default();
    loop {
        let n = read()?;
        let now = Instant::now();
        // Ticks that passed while this read waited saw the count before it.
        while next <= now && next <= end {
            fit.add((next - start).as_secs_f64(), total as f64);
            next += GOODPUT_TICK;
        }
        total += n as u64;
        if now >= end {
            break;
        }
    }
    let bytes_per_sec = fit.slope().context("interval too short to fit a rate")?;
    Ok(bytes_per_sec * 8.0)
}

/// Result of a loss measurement.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct LossMeasurement {
    /// Probes sent.
    pub sent: u32,
    /// Distinct probes received.
    pub received: u32,
    /// Probes the receiving host dropped for a full socket buffer (the edge namespace's
    /// UDP `RcvbufErrors` during the measurement): they crossed the link, so they are
    /// not counted as link loss.
    pub receiver_drops: u64,
}

impl LossMeasurement {
    /// Fraction lost on the link.
    pub fn rate(&self) -> f64 {
        if self.sent == 0 {
            return 0.0;
        }
        let arrived = u64::from(self.received) + self.receiver_drops;
        let lost = u64::from(self.sent).saturating_sub(arrived);
        lost as f64 / f64::from(self.sent)
    }

    /// Probes lost on the link.
    pub fn lost(&self) -> u64 {
        u64::from(self.sent).saturating_sub(u64::from(self.received) + self.receiver_drops)
    }
}

/// The UDP `RcvbufErrors` counter of the namespace the calling thread is in.
fn udp_rcvbuf_errors() -> std::io::Result<u64> {
    let snmp = std::fs::read_to_string("/proc/thread-self/net/snmp")?;
    let mut udp = snmp.lines().filter(|l| l.starts_with("Udp: "));
    let (Some(names), Some(values)) = (udp.next(), udp.next()) else {
        return Err(std::io::Error::other("no Udp lines in snmp"));
    };
    names
        .split_whitespace()
        .zip(values.split_whitespace())
        .find(|(n, _)| *n == "RcvbufErrors")
        .and_then(|(_, v)| v.parse().ok())
        .ok_or_else(|| std::io::Error::other("no RcvbufErrors in snmp"))
}

/// Sends `packets` UDP probes remote → edge, paced at half the down rate (at most
/// [`DEFAULT_LOSS_PROBE_PPS`]) so no queue overflows, and counts the distinct ones that
/// arrive.
pub fn loss(topo: &Topology, packets: u32) -> anyhow::Result<LossMeasurement> {
    let rx = topo.run_in(Node::Edge, || UdpSocket::bind((EDGE_LONG_ADDR, 0)))??;
    let drops_before = topo.run_in(Node::Edge, udp_rcvbuf_errors)??;
    let rx_addr = rx.local_addr()?;
    let tx = topo.run_in(Node::Remote, || UdpSocket::bind((REMOTE_LONG_ADDR, 0)))??;
    let wire_bits = ((LOSS_PAYLOAD + 28) * 8) as f64;
    let rate = topo.profile().down.rate_bps.unwrap_or(1_000_000_000) as f64;
    let interval =
        Duration::from_secs_f64((wire_bits / (rate / 2.0)).max(1.0 / DEFAULT_LOSS_PROBE_PPS));
    let done = Arc::new(AtomicBool::new(false));
    let rx_done = done.clone();
    let linger = topo.profile().rtt() + topo.profile().down.jitter + Duration::from_millis(500);
    let receiver = std::thread::spawn(move || -> std::io::Result<u32> {
        rx.set_read_timeout(Some(Duration::from_millis(50)))?;
        let mut seen = vec![false; packets as usize];
        let mut received = 0;
        let mut buf = [0u8; 2048];
        let mut idle_since = Instant::now();
        loop {
            match rx.recv(&mut buf) {
                Ok(n) if n >= 4 => {
                    idle_since = Instant::now();
                    let seq = u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
                    if seq < seen.len() && !seen[seq] {
                        seen[seq] = true;
                        received += 1;
                    }
                }
                Ok(_) => {}
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) => {}
                Err(e) => return Err(e),
            }
            if rx_done.load(Ordering::Relaxed) && idle_since.elapsed() > linger {
                return Ok(received);
            }
        }
    });
    let mut payload = [0u8; LOSS_PAYLOAD];
    let t0 = Instant::now();
    for seq in 0..packets {
        let due = t0 + interval * seq;
        let now = Instant::now();
        if due > now {
            std::thread::sleep(due - now);
        }
        payload[..4].copy_from_slice(&seq.to_be_bytes());
        tx.send_to(&payload, rx_addr)?;
    }
    done.store(true, Ordering::Relaxed);
    let received = receiver
        .join()
        .map_err(|_| anyhow::anyhow!("loss receiver panicked"))??;
    let drops_after = topo.run_in(Node::Edge, udp_rcvbuf_errors)??;
    Ok(LossMeasurement {
        sent: packets,
        received,
        receiver_drops: drops_after.saturating_sub(drops_before),
    })
}

/// UDP payload of the saturating flow: one 1500-byte IP packet each.
pub const SATURATE_PAYLOAD: usize = 1472;
/// How far above the link's rate the saturating flow is offered: enough to keep the
/// drop-tail queue filling through the host's scheduling gaps, little enough that the
/// sender does not compete with the emulator for the CPU.
pub const SATURATE_OVERLOAD: f64 = 1.10;
/// The saturating sender's pacing step: it sends each step's share, then sleeps.
const SATURATE_STEP: Duration = Duration::from_millis(1);
/// Receive buffer asked for by the saturating flow's receiver (capped by the host's
/// `net.core.rmem_max`): a scheduling gap of tens of ms at 100 Mbit/s is hundreds of packets.
const SATURATE_RCVBUF: usize = 8 << 20;

/// The link's own delivery rate, measured under a load it cannot carry.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct SaturatedRate {
    /// UDP payload delivered per second over the counted interval, bit/s.
    pub payload_bps: f64,
    /// What the profile's rate carries of that payload: rate × 1472/1500, bit/s.
    pub ceiling_bps: f64,
    /// Datagrams the receiving host dropped for a full socket buffer (the edge
    /// namespace's UDP `RcvbufErrors`): they crossed the link but are not counted.
    pub receiver_drops: u64,
}

/// Offers the down direction a UDP flow of full-size packets at [`SATURATE_OVERLOAD`] ×
/// its rate, so its transmitter is never idle once the first packet arrives, and fits
/// the delivered payload rate over `opts.duration` after `opts.warmup` (neither the
/// congestion control nor the flight cap of `opts` apply). Unlike [`goodput`], the result
/// depends on no sender's control loop: a host's scheduling gap shorter than the queue's
/// depth (one BDP on every profile) delays packets but does not idle the link, so this
/// measures the emulated rate itself. Needs a rate on the down direction.
pub fn saturated_rate(topo: &Topology, opts: &GoodputOptions) -> anyhow::Result<SaturatedRate> {
    let rate = topo
        .profile()
        .down
        .rate_bps
        .context("the down direction has no rate to saturate")? as f64;
    let rx = topo.run_in(Node::Edge, || -> std::io::Result<UdpSocket> {
        let s = UdpSocket::bind((EDGE_LONG_ADDR, 0))?;
        socket2::SockRef::from(&s).set_recv_buffer_size(SATURATE_RCVBUF)?;
        Ok(s)
    })??;
    let drops_before = topo.run_in(Node::Edge, udp_rcvbuf_errors)??;
    let rx_addr = rx.local_addr()?;
    let tx = topo.run_in(Node::Remote, || UdpSocket::bind((REMOTE_LONG_ADDR, 0)))??;
    let wire_bits = ((SATURATE_PAYLOAD + 28) * 8) as f64;
    let per_step = rate * SATURATE_OVERLOAD * SATURATE_STEP.as_secs_f64() / wire_bits;
    let done = Arc::new(AtomicBool::new(false));
    let tx_done = done.clone();
    let sender = std::thread::spawn(move || {
        let payload = [0x5au8; SATURATE_PAYLOAD];
        let t0 = Instant::now();
        let mut owed = 0.0;
        let mut step = 0u32;
        while !tx_done.load(Ordering::Relaxed) {
            owed += per_step;
            while owed >= 1.0 {
                // A full device queue refuses a datagram (ENOBUFS): the link is saturated
                // already, so the refusal is not an error of the measurement.
                let _ = tx.send_to(&payload, rx_addr);
                owed -= 1.0;
            }
            step += 1;
            let due = t0 + SATURATE_STEP * step;
            let now = Instant::now();
            if due > now {
                std::thread::sleep(due - now);
            }
        }
    });
    let result = receive_datagrams(&rx, opts);
    done.store(true, Ordering::Relaxed);
    sender
        .join()
        .map_err(|_| anyhow::anyhow!("saturating sender panicked"))?;
    let payload_bps = result?;
    let drops_after = topo.run_in(Node::Edge, udp_rcvbuf_errors)??;
    Ok(SaturatedRate {
        payload_bps,
        ceiling_bps: rate * SATURATE_PAYLOAD as f64 / 1500.0,
        receiver_drops: drops_after.saturating_sub(drops_before),
    })
}

/// Receives datagrams until the end of the counted interval; returns the payload rate
/// in bit/s as the least-squares slope of bytes received, as [`goodput`]'s receiver.
fn receive_datagrams(rx: &UdpSocket, opts: &GoodputOptions) -> anyhow::Result<f64> {
    rx.set_read_timeout(Some(IO_TIMEOUT))?;
    let mut buf = [0u8; 2048];
    let n = rx.recv(&mut buf)?;
    fit_rate(n, opts, || Ok(rx.recv(&mut buf)?))
}

/// What the profile says the measurements should be.
#[derive(Debug, Clone, Serialize)]
pub struct Expected {
    /// Profile name.
    pub name: String,
    /// Long-link propagation RTT, ms.
    pub rtt_ms: f64,
    /// Down rate (remote → edge), Mbit/s of IP packets.
    pub rate_mbps: Option<f64>,
    /// Up rate (edge → remote), Mbit/s.
    pub up_rate_mbps: Option<f64>,
    /// One TCP flow's payload ceiling down: rate × 1448/1500, Mbit/s.
    pub goodput_ceiling_mbps: Option<f64>,
    /// Mean loss rate of the down direction's model.
    pub loss_rate: f64,
    /// Down queue, bytes.
    pub queue_bytes: u64,
    /// Congestion control of the namespaces.
    pub congestion_control: String,
}

/// Emulator timing of the long link during a calibration.
#[derive(Debug, Clone, Serialize)]
pub struct Timing {
    /// 99th percentile of delivery lateness (both directions), µs.
    pub late_p99_us: f64,
    /// Largest delivery lateness, µs.
    pub late_max_us: f64,
    /// Packets dropped by the drop-tail queue (both directions).
    pub dropped_queue: u64,
    /// Packets dropped by the loss model (both directions).
    pub dropped_loss: u64,
}

/// A calibration run's results.
#[derive(Debug, Clone, Serialize)]
pub struct Calibration {
    /// Median ping-pong RTT, ms.
    pub rtt_ms: f64,
    /// Shortest ping-pong RTT (the path's propagation time without the host's jitter), ms.
    pub rtt_min_ms: f64,
    /// Every RTT sample, ms.
    pub rtt_samples_ms: Vec<f64>,
    /// The link's own rate: UDP payload delivered under a load above the down rate,
    /// Mbit/s (`None` without a down rate), and its ceiling `rate × 1472/1500`.
    pub saturated: Option<SaturatedRate>,
    /// One flow's goodput after slow start, Mbit/s.
    pub goodput_mbps: f64,
    /// Congestion control of that flow.
    pub goodput_cc: String,
    /// Measured loss rate.
    pub loss_rate: f64,
    /// The loss measurement's counts.
    pub loss: LossMeasurement,
    /// The profile's own values.
    pub profile: Expected,
    /// How punctual the emulator was.
    pub emulator: Timing,
}

/// The profile's expected figures.
pub fn expected(topo: &Topology) -> Expected {
    let p = topo.profile();
    let mbps = |r: Option<u64>| r.map(|r| r as f64 / 1e6);
    Expected {
        name: p.name.clone(),
        rtt_ms: ms(p.rtt()),
        rate_mbps: mbps(p.down.rate_bps),
        up_rate_mbps: mbps(p.up.rate_bps),
        goodput_ceiling_mbps: mbps(p.down.rate_bps).map(|r| r * TCP_PAYLOAD as f64 / 1500.0),
        loss_rate: p.down.loss.mean_loss(),
        queue_bytes: p.down.queue_bytes,
        congestion_control: p.congestion_control.clone(),
    }
}

/// Runs the measurements in turn: RTT (median of `rtt_n`), the link's rate under a
/// saturating load (with a down rate), one BBR flow's goodput, and loss over `loss_n`
/// probes.
pub fn calibrate(topo: &Topology, rtt_n: usize, loss_n: u32) -> anyhow::Result<Calibration> {
    let samples = rtt_samples(topo, rtt_n)?;
    let saturated = match topo.profile().down.rate_bps {
        Some(_) => Some(saturated_rate(topo, &GoodputOptions::for_profile(topo))?),
        None => None,
    };
    let mut opts = GoodputOptions::for_profile(topo);
    opts.congestion_control = Some("bbr".to_string());
    let goodput_bps = goodput(topo, &opts)?;
    let loss = loss(topo, loss_n)?;
    let (down, up) = topo.long_link_stats();
    let mut both = down.clone();
    both.merge(&up);
    Ok(Calibration {
        rtt_ms: ms(median(&samples)),
        rtt_min_ms: ms(shortest(&samples)),
        rtt_samples_ms: samples.iter().map(|d| ms(*d)).collect(),
        saturated,
        goodput_mbps: goodput_bps / 1e6,
        goodput_cc: "bbr".to_string(),
        loss_rate: loss.rate(),
        loss,
        profile: expected(topo),
        emulator: Timing {
            late_p99_us: both.late_quantile_ns(0.99) as f64 / 1000.0,
            late_max_us: both.max_late_ns as f64 / 1000.0,
            dropped_queue: both.model.dropped_queue,
            dropped_loss: both.model.dropped_loss,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slope_of_a_line_and_of_steps() {
        let mut f = Slope::default();
        assert_eq!(f.slope(), None);
        for k in 0..100 {
            f.add(f64::from(k), 3.0 * f64::from(k) + 7.0);
        }
        assert!((f.slope().unwrap() - 3.0).abs() < 1e-9);
        // A rate of 1 with a held-back burst near the start: the fit stays close to 1
        // where first-to-last differencing would read 1.2.
        let mut g = Slope::default();
        for k in 0..1000 {
            let x = f64::from(k);
            let y = if k < 10 { x - 200.0 } else { x };
            g.add(x, y);
        }
        assert!((g.slope().unwrap() - 1.0).abs() < 0.05, "{:?}", g.slope());
    }

    #[test]
    fn median_of_odd_even_and_empty() {
        let ms = Duration::from_millis;
        assert_eq!(median(&[]), Duration::ZERO);
        assert_eq!(median(&[ms(3), ms(1), ms(2)]), ms(2));
        assert_eq!(
            median(&[ms(4), ms(1), ms(2), ms(3)]),
            Duration::from_micros(2500)
        );
    }

    #[test]
    fn link_loss_excludes_receiver_drops() {
        let m = LossMeasurement {
            sent: 1000,
            received: 950,
            receiver_drops: 20,
        };
        assert_eq!(m.lost(), 30);
        assert!((m.rate() - 0.03).abs() < 1e-12);
    }
}
