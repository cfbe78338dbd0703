//! The pool under load on a long lossy link, in virtual time: does the placement policy
//! keep every connection busy enough that its congestion controller grows?
//!
//! A model of its own (crates/mux/tests/link.rs's `World` shares one rate between lanes
//! without congestion control, so every lane can always send at once). Here each lane
//! direction is a TCP-like sender:
//!
//! - a congestion window that grows only with delivered traffic, and only while the lane is
//!   window-limited (slow start: + bytes acknowledged; above `ssthresh`, one MSS per window
//!   acknowledged), and shrinks to 0.7 × on a loss (once per round trip, as CUBIC does);
//! - random loss: a lost segment arrives one round trip late, and the segments behind it on
//!   the same lane wait for it (TCP's in-order delivery);
//! - a send queue kept short as `TCP_NOTSENT_LOWAT` does, over a bottleneck of `rate`
//!   bytes per tick per direction shared by all lanes;
//! - a driver that after each tick reports each lane's queue (`set_kernel_outstanding`),
//!   window (`set_congestion_window`) and path estimate (`set_path_estimate`: the bytes
//!   acknowledged over the last round trip as the delivery rate, app-limited when the lane
//!   was not window-limited in that round trip, the propagation RTT, unsent and in-flight
//!   bytes), as the pool's driver does from `TCP_INFO`, whatever the policy.
//!
//! Replies of fixed size are requested at a fixed interval (an offered load); the carried
//! load is what the edge application read in the measured interval. Time advances in 1 ms
//! ticks; the random loss comes from a fixed seed, so every run is the same.

use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

use mux::{Config, ConnId, Event, Kind, PathEstimate, Policy, Read, Role, Session};

const TICK: Duration = Duration::from_millis(1);
const MSS: usize = 1448;
const LOWAT: usize = 128 * 1024;
const INITIAL_WINDOW: usize = 10 * MSS;
/// Round trips a delivery-rate sample stays in the bandwidth max filter (BBR's 10).
const BW_WINDOW_RTTS: u64 = 10;

/// One direction of one lane: a TCP-like sender and its path.
struct Pipe {
    /// Written, not yet sent.
    unsent: VecDeque<u8>,
    /// Sent: (arrival tick, bytes), in order.
    flight: VecDeque<(u64, Vec<u8>)>,
    /// Sent, not acknowledged: (ack tick, bytes).
    unacked: VecDeque<(u64, usize)>,
    unacked_bytes: usize,
    /// Bottleneck bandwidth estimate, bytes per tick: the largest delivery-rate sample of
    /// the last `BW_WINDOW_RTTS` round trips that was not app-limited, or any larger one.
    bw: f64,
    /// Rate samples kept for the max filter: (tick, bytes per tick).
    samples: VecDeque<(u64, f64)>,
    /// Pacing credit, bytes.
    credit: f64,
    /// Acknowledged bytes in the last round trip: (tick, bytes).
    acked: VecDeque<(u64, usize)>,
    /// Last tick at which the sender had data but no pacing credit or window.
    limited_at: Option<u64>,
    /// Bytes acknowledged over the whole run.
    delivered: u64,
    /// The most in flight (the peer's receive buffer).
    max_in_flight: usize,
}

impl Pipe {
    /// In-flight limit: two estimated bandwidth-delay products (BBR's `cwnd_gain`).
    fn cwnd(&self, rtt: u64) -> usize {
        ((2.0 * self.bw * rtt as f64) as usize).clamp(INITIAL_WINDOW, self.max_in_flight)
    }

    fn new(bw: f64) -> Pipe {
        Pipe {
            unsent: VecDeque::new(),
            flight: VecDeque::new(),
            unacked: VecDeque::new(),
            unacked_bytes: 0,
            bw,
            samples: VecDeque::new(),
            credit: 0.0,
            acked: VecDeque::new(),
            limited_at: None,
            delivered: 0,
            max_in_flight: 32 << 20,
        }
    }
}

struct Lane {
    edge: ConnId,
    remote: ConnId,
    /// [0] edge -> remote, [1] remote -> edge.
    pipes: [Pipe; 2],
}

struct Reply {
    remaining: u64,
}

/// The modelled link and the two sessions.
struct Fill {
    base: Instant,
    tick: u64,
    /// One-way delay in ticks.
    delay: u64,
    /// Bottleneck rate, bytes per tick per direction.
    rate: usize,
    /// Segment loss probability, parts per million.
    loss_ppm: u64,
    rng: u64,
    edge: Session,
    remote: Session,
    lanes: Vec<Lane>,
    replies: BTreeMap<u64, Reply>,
    open: Vec<u64>,
    /// Tick each open stream was requested at.
    opened_at: BTreeMap<u64, u64>,
    /// Completed replies: (requested at, completed at).
    completed: Vec<(u64, u64)>,
    /// Bytes the edge application read.
    read: u64,
    rr: usize,
}

impl Fill {
    /// `lanes[i]`: the initial bandwidth estimate of lane `i` in Mbit/s (both directions).
    fn new(lanes: &[f64], policy: Policy, delay: u64, rate_mbit: usize, loss_ppm: u64) -> Fill {
        let rtt = Duration::from_millis(2 * delay);
        let cfg = Config::for_link(rtt, rate_mbit as u64 * 1_000_000);
        let rate = rate_mbit * 1_000_000 / 8 / 1000;
        let mut f = Fill {
            base: Instant::now(),
            tick: 0,
            delay,
            rate,
            loss_ppm,
            rng: 0x9e37_79b9_7f4a_7c15,
            edge: Session::new(Role::Edge, 5, cfg.clone(), policy),
            remote: Session::new(Role::Remote, 5, cfg, policy),
            lanes: Vec::new(),
            replies: BTreeMap::new(),
            open: Vec::new(),
            opened_at: BTreeMap::new(),
            completed: Vec::new(),
            read: 0,
            rr: 0,
        };
        for &mbit in lanes {
            let bw = mbit * 1e6 / 8.0 / 1000.0;
            let now = f.now();
            let edge = f.edge.add_connection(now);
            let remote = f.remote.add_connection(now);
            f.lanes.push(Lane {
                edge,
                remote,
                pipes: [Pipe::new(bw), Pipe::new(bw)],
            });
        }
        let n = lanes.len();
        while f.edge.up_connections() < n || f.remote.up_connections() < n {
            f.step();
            assert!(f.tick < 10 * delay, "HELLOs did not cross");
        }
        f
    }

    fn now(&self) -> Instant {
        self.base + TICK * self.tick as u32
    }

    fn lost(&mut self) -> bool {
        // xorshift64*
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        let r = self.rng.wrapping_mul(0x2545_f491_4f6c_dd1d);
        r % 1_000_000 < self.loss_ppm
    }

    fn request(&mut self, size: u64) {
        let id = self
            .edge
            .open(
                Kind::Http,
                &format!("reply:{size}"),
                b"GET / HTTP/1.1\r\n\r\n",
                true,
            )
            .expect("open");
        self.open.push(id);
        self.opened_at.insert(id, self.tick);
    }

    /// Session -> kernel queues, then the driver's reports.
    fn pump(&mut self) {
        let now = self.now();
        let rtt_ticks = 2 * self.delay;
        let mut buf = Vec::new();
        for l in self.lanes.iter_mut() {
            for (dir, (s, c)) in [(&mut self.edge, l.edge), (&mut self.remote, l.remote)]
                .into_iter()
                .enumerate()
            {
                let p = &mut l.pipes[dir];
                while p.unsent.len() < LOWAT {
                    buf.clear();
                    if s.poll_transmit(c, LOWAT - p.unsent.len(), &mut buf) == 0 {
                        break;
                    }
                    p.unsent.extend(&buf);
                }
                while p
                    .acked
                    .front()
                    .is_some_and(|(t, _)| t + rtt_ticks <= self.tick)
                {
                    p.acked.pop_front();
                }
                // What a BBR sender's pacing rate tells at gain 1: its bandwidth estimate.
                let rate = (p.bw * 1000.0) as u64;
                let app_limited = p.limited_at.is_none_or(|t| t + rtt_ticks < self.tick);
                s.set_kernel_outstanding(c, (p.unsent.len() + p.unacked_bytes) as u64);
                s.set_congestion_window(c, p.cwnd(rtt_ticks) as u64);
                s.set_path_estimate(
                    c,
                    PathEstimate {
                        delivery_rate: rate,
                        rtt: Duration::from_millis(rtt_ticks),
                        unsent: p.unsent.len() as u64,
                        in_flight: p.unacked_bytes as u64,
                        app_limited,
                    },
                    now,
                );
            }
        }
    }

    fn step(&mut self) {
        let now = self.now();
        for s in [&mut self.edge, &mut self.remote] {
            if s.poll_timeout().is_some_and(|t| t <= now) {
                s.handle_timeout(now);
            }
        }
        self.apps();
        self.pump();
        let tick = self.tick;
        let n = self.lanes.len();
        let rtt = 2 * self.delay;
        // BBR's ProbeBW: each lane paces at 1.25 × its estimate one round trip in eight
        // (staggered across lanes), at 1 × otherwise.
        for (i, l) in self.lanes.iter_mut().enumerate() {
            let gain = if (tick / rtt) % 8 == i as u64 % 8 {
                1.25
            } else {
                1.0
            };
            for p in &mut l.pipes {
                p.credit = (p.credit + gain * p.bw).min(gain * p.bw + 2.0 * MSS as f64);
            }
        }
        for dir in 0..2 {
            let mut budget = self.rate;
            let mut idle_rounds = 0;
            while budget > 0 && idle_rounds < n {
                let i = self.rr % n;
                self.rr += 1;
                let p = &self.lanes[i].pipes[dir];
                if p.unsent.is_empty() {
                    idle_rounds += 1;
                    continue;
                }
                let k = p.unsent.len().min(MSS).min(budget);
                if p.unacked_bytes + k > p.cwnd(rtt) || p.credit < k as f64 {
                    self.lanes[i].pipes[dir].limited_at = Some(tick);
                    idle_rounds += 1;
                    continue;
                }
                idle_rounds = 0;
                let lost = self.lost();
                let delay = self.delay;
                let p = &mut self.lanes[i].pipes[dir];
                budget -= k;
                p.credit -= k as f64;
                let seg: Vec<u8> = p.unsent.drain(..k).collect();
                // A lost segment is retransmitted a round trip later; the ones behind it
                // wait for it (in-order delivery) but are acknowledged on time (SACK).
                let extra = if lost { 2 * delay } else { 0 };
                let mut arrive = tick + delay + extra;
                if let Some((last, _)) = p.flight.back() {
                    arrive = arrive.max(*last);
                }
                p.flight.push_back((arrive, seg));
                p.unacked.push_back((tick + 2 * delay + extra, k));
                p.unacked_bytes += k;
            }
        }
        for i in 0..n {
            for dir in 0..2 {
                let l = &mut self.lanes[i];
                let p = &mut l.pipes[dir];
                while p.unacked.front().is_some_and(|(t, _)| *t <= tick) {
                    let (_, k) = p.unacked.pop_front().unwrap();
                    p.unacked_bytes -= k;
                    p.delivered += k as u64;
                    p.acked.push_back((tick, k));
                }
                // Once a round trip (staggered): a delivery-rate sample over the last
                // round trip. The estimate grows only with delivered traffic.
                if (tick + i as u64) % rtt == 0 {
                    while p.acked.front().is_some_and(|(t, _)| t + rtt <= tick) {
                        p.acked.pop_front();
                    }
                    let sample = p.acked.iter().map(|(_, k)| *k).sum::<usize>() as f64 / rtt as f64;
                    let app_limited = p.limited_at.is_none_or(|t| t + rtt < tick);
                    if !app_limited || sample >= p.bw {
                        p.samples.push_back((tick, sample));
                    }
                    while p
                        .samples
                        .front()
                        .is_some_and(|(t, _)| t + BW_WINDOW_RTTS * rtt < tick)
                    {
                        p.samples.pop_front();
                    }
                    if let Some(max) = p.samples.iter().map(|(_, v)| *v).reduce(f64::max) {
                        p.bw = max.max(MSS as f64 / rtt as f64);
                    }
                }
                while p.flight.front().is_some_and(|(t, _)| *t <= tick) {
                    let (_, seg) = p.flight.pop_front().unwrap();
                    if dir == 0 {
                        self.remote.handle_input(l.remote, &seg, now);
                    } else {
                        self.edge.handle_input(l.edge, &seg, now);
                    }
                }
            }
        }
        self.tick += 1;
    }

    fn apps(&mut self) {
        let mut buf = vec![0u8; 64 * 1024];
        while let Some(ev) = self.remote.poll_event() {
            if let Event::Incoming { id, target, .. } = ev {
                let size = target.split(':').nth(1).unwrap().parse().unwrap();
                self.replies.insert(id, Reply { remaining: size });
            }
        }
        let ids: Vec<u64> = self.replies.keys().copied().collect();
        for id in ids {
            while let Ok(Read::Data(_)) = self.remote.read(id, &mut buf) {}
            let r = self.replies.get_mut(&id).unwrap();
            while r.remaining > 0 {
                let k = (r.remaining as usize).min(buf.len());
                match self.remote.send(id, &buf[..k]) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => r.remaining -= n as u64,
                }
            }
            if r.remaining == 0 {
                let _ = self.remote.finish(id);
                self.remote.release(id);
                self.replies.remove(&id);
            }
        }
        while self.edge.poll_event().is_some() {}
        let mut done = Vec::new();
        for &id in &self.open {
            loop {
                match self.edge.read(id, &mut buf) {
                    Ok(Read::Data(n)) => self.read += n as u64,
                    Ok(Read::Fin) => {
                        let at = self.opened_at.remove(&id).unwrap();
                        self.completed.push((at, self.tick));
                        done.push(id);
                        break;
                    }
                    Err(_) => {
                        done.push(id);
                        break;
                    }
                    Ok(Read::Blocked) => break,
                }
            }
        }
        for id in done {
            self.edge.release(id);
            self.open.retain(|x| *x != id);
        }
    }

    /// Reply-direction bytes each lane delivered so far.
    fn delivered(&self) -> Vec<u64> {
        self.lanes.iter().map(|l| l.pipes[1].delivered).collect()
    }
}

/// A satellite-like link: 300 ms each way, 50 Mbit/s, 10 pool connections.
const SAT_DELAY: u64 = 300;
const SAT_MBIT: usize = 50;

struct Carried {
    /// Bytes read by the edge application in the measured interval.
    bytes: u64,
    /// Reply bytes each lane delivered in the measured interval.
    per_lane: Vec<u64>,
    /// The largest number of consecutive measured ticks during which some lane had no
    /// reply bytes in flight or unsent while requests were outstanding on the edge.
    longest_idle: u64,
    /// Median and 90th percentile time from request to last byte of the replies requested
    /// in the measured interval, ms (those not complete at the end count as the end).
    completion: (u64, u64),
}

/// Offers `mbit` Mbit/s of 256 kB replies for `secs` virtual seconds and measures what the
/// edge reads after a `warmup` of seconds.
fn offered(
    policy: Policy,
    initial: &[f64],
    loss_ppm: u64,
    mbit: u64,
    warmup: u64,
    secs: u64,
) -> Carried {
    const SIZE: u64 = 256 * 1024;
    let mut f = Fill::new(initial, policy, SAT_DELAY, SAT_MBIT, loss_ppm);
    let rtt = 2 * SAT_DELAY;
    let interval_us = SIZE * 8 / mbit;
    let start = f.tick;
    let mut next_us = 0u64;
    let mut read0 = 0;
    let mut lanes0 = Vec::new();
    let mut idle = [0u64; 10];
    let mut longest_idle = 0;
    while f.tick < start + secs * 1000 {
        while next_us <= (f.tick - start) * 1000 {
            f.request(SIZE);
            next_us += interval_us;
        }
        f.step();
        if f.tick == start + warmup * 1000 {
            read0 = f.read;
            lanes0 = f.delivered();
        }
        if f.tick > start + warmup * 1000 {
            let queued_somewhere = f.lanes.iter().any(|l| {
                l.pipes[1].unsent.len() + l.pipes[1].unacked_bytes > 2 * l.pipes[1].cwnd(rtt)
            });
            for (i, l) in f.lanes.iter().enumerate() {
                let busy = !l.pipes[1].unsent.is_empty() || l.pipes[1].unacked_bytes > 0;
                idle[i] = if busy || !queued_somewhere {
                    0
                } else {
                    idle[i] + 1
                };
                longest_idle = longest_idle.max(idle[i]);
            }
        }
    }
    let from = start + warmup * 1000;
    let mut times: Vec<u64> = f
        .completed
        .iter()
        .filter(|(at, _)| *at >= from)
        .map(|(at, done)| done - at)
        .chain(
            f.opened_at
                .values()
                .filter(|at| **at >= from)
                .map(|at| f.tick - at),
        )
        .collect();
    times.sort_unstable();
    let pct = |q: usize| times[(times.len() - 1) * q / 100];
    Carried {
        completion: (pct(50), pct(90)),
        bytes: f.read - read0,
        per_lane: f
            .delivered()
            .iter()
            .zip(&lanes0)
            .map(|(a, b)| a - b)
            .collect(),
        longest_idle,
    }
}

fn mbit(bytes: u64, secs: u64) -> f64 {
    bytes as f64 * 8.0 / secs as f64 / 1e6
}

/// (a, b) On the lossy satellite-like link (1 % loss) at 90 % offered load, starting from
/// the state the benchmarks showed (three warm connections at 8 Mbit/s, seven that carried
/// little at 0.5 Mbit/s): expected completion spreads the replies so that every connection
/// carries a share and none idles while another queues, and carries as much as the
/// baselines (within 3 %) in the same virtual run.
///
/// What the model shows and what it does not: least-outstanding concentrates the replies on
/// the warm connections (its least-used connection carries less than expected completion's),
/// but the warm connections' modelled BBR grows to carry the offered load anyway, so the
/// carried totals of least-outstanding, fewest-streams and expected completion differ by a
/// few per cent here, not by the 20-of-50 Mbit/s the test bed measured; round-robin falls
/// behind. The ratios are printed (`--nocapture`).
#[test]
fn expected_completion_spreads_load_and_carries_as_much_on_a_lossy_long_link() {
    let (warmup, secs) = (10, 40);
    let measured = secs - warmup;
    let mut initial = vec![0.5; 10];
    initial[..3].fill(8.0);
    let mut carried = BTreeMap::new();
    for p in Policy::ALL {
        let c = offered(p, &initial, 10_000, 45, warmup, secs);
        println!(
            "{:>20}: {:5.1} Mbit/s, replies median {} ms p90 {} ms, per lane {:?} kB, \
             longest idle {} ms",
            p.name(),
            mbit(c.bytes, measured),
            c.completion.0,
            c.completion.1,
            c.per_lane.iter().map(|b| b / 1000).collect::<Vec<_>>(),
            c.longest_idle
        );
        carried.insert(p.name(), c);
    }
    let ec = &carried["expected-completion"];
    for p in ["least-outstanding", "round-robin", "fewest-streams"] {
        let ratio = ec.bytes as f64 / carried[p].bytes as f64;
        println!("expected-completion ÷ {p}: {ratio:.3}");
        // A tie within 3 %: with starting windows at the session's unused budget this model
        // measured 0.988 against fewest-streams and 0.998 against least-outstanding.
        assert!(ratio >= 0.97, "expected-completion ÷ {p} = {ratio:.3}");
    }
    // Every connection carries a share: none below half of an even share, and the least
    // used one carries more than least-outstanding's least used one.
    let even = ec.per_lane.iter().sum::<u64>() / 10;
    let min = |c: &Carried| *c.per_lane.iter().min().unwrap();
    assert!(min(ec) * 2 >= even, "{:?}", ec.per_lane);
    assert!(min(ec) > min(&carried["least-outstanding"]));
    // (b) No connection idles for more than one round trip while another has more than
    // two windows queued.
    assert!(
        ec.longest_idle <= 2 * SAT_DELAY,
        "idle {} ms",
        ec.longest_idle
    );
}
