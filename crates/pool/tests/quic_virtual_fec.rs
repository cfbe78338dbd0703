//! Parity datagrams (`pool::fec`) over a deterministic virtual-time lossy link: a page of
//! small exchanges with and without one parity per group of datagrams. No sockets, no wall
//! clock; the arrangement of `quic_virtual_rate.rs` (two `quinn_proto` endpoints driven by
//! hand, datagrams delivered at their arrival time, seeded generators), with the product's
//! `fec::Encoder` on each side's sends and `fec::Decoder` on its receives, as the socket
//! wrapper (`pool::parity`) places them.
//!
//! The link: per direction a FIFO bottleneck at the link rate (IP + UDP headers counted) with a
//! drop-tail buffer of one round trip, then half the RTT of propagation; random loss
//! (Bernoulli, seeded) in **both** directions, as on the `lossy` testbed profile (200 ms,
//! 10 Mbit/s, 1.5 %). Parity datagrams cross the same link and may be lost too. Transport
//! settings are those of `QuicOptions::for_link` with the `rate` controller (the product's
//! default).
//!
//! The page: [`LANES`] lanes, as a browser's HTTP/1.1 connections to one proxy, each doing
//! [`EXCHANGES`] request/reply exchanges one after another over one warm QUIC connection: a
//! 400-byte request on a new stream, a reply of 2–60 KB (log-uniform, seeded), the next
//! request when the reply has been read. The figure is the time from the first request to the
//! last reply read.
//!
//! Limits: one connection, no competing traffic, no jitter or reordering, CPU not modelled;
//! the figures describe this model, not a network.

mod quic_vt;

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::sync::Arc;
use std::time::{Duration, Instant};

use pool::fec::{self, Decoder, Encoder, FecConfig};
use pool::parity::{meter_window, BUSY_SHARE};
use pool::quic::QuicOptions;
use pool::rate::{RateConfig, Traffic};
use pool::tls::DEFAULT_SERVER_NAME;
use quinn_proto::{Connection, Dir, Endpoint, EndpointConfig, StreamId, TransportConfig};

const RTT: Duration = Duration::from_millis(200);
const RATE_BPS: u64 = 10_000_000;
const LOSS: f64 = 0.015;
const LANES: usize = 6;
const EXCHANGES: usize = 8;
/// Exchanges per lane of [`heavy_page`].
const HEAVY_EXCHANGES: usize = 4;
const MS_1: Duration = Duration::from_millis(1);
const REQUEST: usize = 400;
/// Seeds of the page runs.
const SEEDS: std::ops::Range<u64> = 1..41;

use quic_vt::{Link, Rng, UDP_OVERHEAD};

/// One direction of the link with random loss.
struct Lossy {
    link: Link,
    rng: Rng,
    loss: f64,
}

impl Lossy {
    fn new(seed: u64) -> Lossy {
        Lossy {
            link: Link::new(RATE_BPS, RTT),
            rng: Rng(seed),
            loss: 0.0,
        }
    }

    fn send(&mut self, now: Duration, d: Vec<u8>) {
        let lost = self.rng.next_f64() < self.loss;
        self.link.send(now, d, lost);
    }
}

/// The product's settings with `rate`, its default controller, reading the connection's
/// `traffic` as the pool's controllers do (`pool::quic`); without it, the controller does not
/// know of the parity beside its sends.
fn transport(traffic: Option<Arc<Traffic>>) -> TransportConfig {
    let o = QuicOptions::for_link(RTT, RATE_BPS);
    let mut t = quic_vt::transport(&o);
    let rate = RateConfig::new(o.link_rate_bps, o.initial_rtt);
    let rate = match traffic {
        Some(traffic) => rate.for_connection(traffic),
        None => rate,
    };
    t.congestion_controller_factory(Arc::new(rate));
    t
}

/// How a run sends parity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Parity {
    /// None.
    Off,
    /// As the product: each send tells the connection's controller whether it was protected
    /// (`Traffic::set_parity`), which paces data at its share less the parity.
    On,
    /// Parity the controller does not know of (the product before it counted parity).
    Uncounted,
}

/// One endpoint with its single connection and, optionally, parity on what it sends and
/// repairs from what it receives.
struct Side {
    q: quic_vt::Side,
    fec: Option<(Encoder, Decoder)>,
    peer: SocketAddr,
    meter: fec::Meter,
    /// What the connection's controller reads; told of parity with [`Parity::On`].
    traffic: Option<Arc<Traffic>>,
}

impl Side {
    fn receive(&mut self, now: Instant, from: SocketAddr, data: Vec<u8>) {
        if let Some((_, dec)) = self.fec.as_mut() {
            if fec::is_parity(&data) {
                if let Some(rebuilt) = dec.on_parity(now, from, &data) {
                    self.q.receive(now, from, rebuilt);
                }
                return;
            }
            dec.on_datagram(now, from, &data);
        }
        self.q.receive(now, from, data);
    }

    fn service(&mut self, now: Instant) {
        self.q.service(now);
        if let Some(why) = &self.q.lost {
            panic!("connection lost: {why}");
        }
    }

    /// Datagrams to put on the link now: the connection's, then any parity due.
    fn transmit(&mut self, now: Instant) -> Vec<Vec<u8>> {
        self.q.transmit(now);
        let mut out: Vec<Vec<u8>> = self.q.out.drain(..).collect();
        if let Some((enc, _)) = self.fec.as_mut() {
            let mut parity = Vec::new();
            for d in &out {
                // The product's rule (pool::parity): no parity while the sends over the meter's
                // window exceed BUSY_SHARE of the link.
                self.meter.record(now, d.len() as u64 + UDP_OVERHEAD);
                let busy = self.meter.rate_bps(now) as f64 >= BUSY_SHARE * RATE_BPS as f64;
                if let Some(t) = &self.traffic {
                    t.set_parity((!busy).then(|| enc.group()));
                }
                parity.extend(enc.on_send(now, self.peer, None, [&d[..]], !busy));
            }
            parity.extend(enc.poll_flush(now));
            out.extend(parity.into_iter().map(|o| o.datagram));
        }
        out
    }

    fn timeout(&mut self) -> Option<Instant> {
        let conn = self.q.timeout();
        let fec = self.fec.as_ref().and_then(|(e, _)| e.poll_timeout());
        conn.into_iter().chain(fec).min()
    }
}

/// What the workload asks of the server: reply sizes by request, and where it stands.
#[derive(Default)]
struct Server {
    requests: BTreeMap<StreamId, Vec<u8>>,
    /// Stream, reply bytes left to write.
    replies: Vec<(StreamId, u64)>,
}

impl Server {
    fn step(&mut self, conn: &mut Connection) {
        while let Some(id) = conn.streams().accept(Dir::Bi) {
            self.requests.insert(id, Vec::new());
        }
        let ids: Vec<StreamId> = self.requests.keys().copied().collect();
        for id in ids {
            let buf = self.requests.get_mut(&id).expect("request");
            let (_, end) = quic_vt::read_stream(conn, id, Some(buf));
            if end {
                let req = self.requests.remove(&id).expect("request");
                let size = u64::from_be_bytes(req[..8].try_into().expect("size"));
                self.replies.push((id, size));
            }
        }
        static CHUNK: [u8; 16 * 1024] = [0x42; 16 * 1024];
        self.replies.retain_mut(|(id, left)| {
            let mut s = conn.send_stream(*id);
            while *left > 0 {
                let k = (*left).min(CHUNK.len() as u64) as usize;
                match s.write(&CHUNK[..k]) {
                    Ok(0) | Err(quinn_proto::WriteError::Blocked) => return true,
                    Ok(n) => *left -= n as u64,
                    Err(e) => panic!("reply write: {e}"),
                }
            }
            s.finish().expect("finish");
            false
        });
    }
}

/// One lane of the page: its replies' sizes and the exchange in progress.
struct Lane {
    sizes: Vec<u64>,
    next: usize,
    current: Option<(StreamId, u64)>,
}

/// What one run measured.
#[derive(Debug, Clone)]
struct Outcome {
    /// First request to last reply read (page), or bytes read per second (bulk).
    time: Duration,
    /// Datagrams rebuilt from parity, both sides.
    rebuilt: u64,
    /// Datagrams and wire bytes the server and the client put on the link.
    down: (u64, u64),
    up: (u64, u64),
    /// Queueing delay at the downstream bottleneck met by the server's datagrams, sorted.
    queued: Vec<Duration>,
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Log-uniform reply sizes, 2–60 KB.
fn page(seed: u64) -> Vec<Lane> {
    log_uniform_page(seed ^ 0x5eed, EXCHANGES, 2000.0, 30.0)
}

/// Log-uniform reply sizes, 40–400 KB: a page whose replies fill the link for seconds.
fn heavy_page(seed: u64) -> Vec<Lane> {
    log_uniform_page(seed ^ 0x4ea7, HEAVY_EXCHANGES, 40_000.0, 10.0)
}

/// [`LANES`] lanes of `exchanges` replies each, sized log-uniformly from `smallest` to
/// `span` times that.
fn log_uniform_page(seed: u64, exchanges: usize, smallest: f64, span: f64) -> Vec<Lane> {
    let mut rng = Rng(seed);
    (0..LANES)
        .map(|_| Lane {
            sizes: (0..exchanges)
                .map(|_| (smallest * span.powf(rng.next_f64())) as u64)
                .collect(),
            next: 0,
            current: None,
        })
        .collect()
}

/// Runs `lanes` over the lossy link with loss seed `seed`, parity on both sides as `parity`.
fn run(mut lanes: Vec<Lane>, seed: u64, loss: f64, parity: Parity) -> Outcome {
    let traffic = |_| (parity == Parity::On).then(|| Arc::new(Traffic::default()));
    let (client_traffic, server_traffic) = (traffic(0), traffic(1));
    let (mut ccfg, mut scfg) = quic_vt::configs(Arc::new(transport(None)));
    // Each side's controller reads its own connection's traffic.
    ccfg.transport_config(Arc::new(transport(client_traffic.clone())));
    scfg.transport_config(Arc::new(transport(server_traffic.clone())));
    let base = Instant::now();
    // As the pool's endpoints: the fixed bit is never greased, so no QUIC packet looks like parity.
    let mut ep_cfg = EndpointConfig::default();
    ep_cfg.grease_quic_bit(false);
    let ep_cfg = Arc::new(ep_cfg);
    let server_addr = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::new(10, 99, 0, 2), 4444));
    let client_addr = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::new(10, 99, 0, 1), 50000));
    let side = |ep, peer, traffic| Side {
        q: quic_vt::Side::new(ep),
        fec: (parity != Parity::Off).then(|| {
            (
                Encoder::new(FecConfig::for_rtt(RTT)),
                Decoder::new(FecConfig::for_rtt(RTT)),
            )
        }),
        peer,
        meter: fec::Meter::new(meter_window(RTT)),
        traffic,
    };
    let mut server = side(
        Endpoint::new(ep_cfg.clone(), Some(Arc::new(scfg)), true, Some([2; 32])),
        client_addr,
        server_traffic,
    );
    let mut client = side(
        Endpoint::new(ep_cfg, None, true, Some([1; 32])),
        server_addr,
        client_traffic,
    );
    client.q.conn = Some(
        client
            .q
            .ep
            .connect(base, ccfg, server_addr, DEFAULT_SERVER_NAME)
            .expect("connect"),
    );
    // The handshake crosses a lossless link (a warm pool connection); loss starts with the page.
    let mut up = Lossy::new(seed.wrapping_mul(2));
    let mut down = Lossy::new(seed.wrapping_mul(2) + 1);
    let mut app = Server::default();
    let mut now = Duration::ZERO;
    let mut started = None;
    let mut queued = Vec::new();
    let deadline = Duration::from_secs(120);

    loop {
        let at = base + now;
        while let Some(d) = up.link.pop_due(now) {
            server.receive(at, client_addr, d);
        }
        while let Some(d) = down.link.pop_due(now) {
            client.receive(at, server_addr, d);
        }
        client.service(at);
        server.service(at);

        if let Some((_, c)) = client.q.conn.as_mut().filter(|(_, c)| !c.is_handshaking()) {
            // Start one second after the handshake, on a connection at rest.
            let start = *started.get_or_insert(now + Duration::from_secs(1));
            if now >= start {
                if up.loss == 0.0 {
                    up.loss = loss;
                    down.loss = loss;
                }
                let mut done = true;
                for lane in lanes.iter_mut() {
                    if let Some((id, left)) = lane.current.as_mut() {
                        let (n, end) = quic_vt::read_stream(c, *id, None);
                        *left = left.saturating_sub(n);
                        if end {
                            assert_eq!(*left, 0, "reply complete");
                            lane.current = None;
                        }
                    }
                    if lane.current.is_none() && lane.next < lane.sizes.len() {
                        let size = lane.sizes[lane.next];
                        lane.next += 1;
                        let id = c.streams().open(Dir::Bi).expect("stream");
                        let mut req = vec![0u8; REQUEST];
                        req[..8].copy_from_slice(&size.to_be_bytes());
                        c.send_stream(id).write_all_chunks_for_test(&req);
                        c.send_stream(id).finish().expect("finish");
                        lane.current = Some((id, size));
                    }
                    done &= lane.current.is_none() && lane.next == lane.sizes.len();
                }
                if done {
                    let rebuilt = |s: &Side| s.fec.as_ref().map_or(0, |(_, d)| d.stats().rebuilt);
                    queued.sort();
                    return Outcome {
                        time: now - start,
                        rebuilt: rebuilt(&server) + rebuilt(&client),
                        down: (down.link.sent, down.link.bytes),
                        up: (up.link.sent, up.link.bytes),
                        queued,
                    };
                }
            }
        }
        if let Some((_, c)) = server.q.conn.as_mut() {
            app.step(c);
        }

        for d in client.transmit(at) {
            up.send(now, d);
        }
        for d in server.transmit(at) {
            if started.is_some_and(|s| now >= s) {
                queued.push(down.link.queue(now));
            }
            down.send(now, d);
        }
        client.service(at);
        server.service(at);
        assert!(now < deadline, "the page did not finish in {deadline:?}");

        let next = quic_vt::next_event(
            now,
            [
                up.link.next_arrival(),
                down.link.next_arrival(),
                client.timeout().map(|t| t - base),
                server.timeout().map(|t| t - base),
                started.filter(|&s| s > now),
            ],
        );
        now = next;
    }
}

/// Test-only helper: a request fits the send window whole.
trait WriteAll {
    fn write_all_chunks_for_test(&mut self, data: &[u8]);
}

impl WriteAll for quinn_proto::SendStream<'_> {
    fn write_all_chunks_for_test(&mut self, data: &[u8]) {
        let n = self.write(data).expect("request write");
        assert_eq!(n, data.len(), "a request goes out whole");
    }
}

fn quantile(sorted: &[Duration], q: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

/// Without loss parity costs a page little (its bytes only); on the lossy link it takes back
/// most of what loss costs the page, at the median and in the tail.
#[test]
fn parity_shortens_a_page_on_a_lossy_link() {
    for s in [1u64, 2] {
        let (without, with) = (
            run(page(s), s, 0.0, Parity::Off),
            run(page(s), s, 0.0, Parity::On),
        );
        eprintln!(
            "lossless page: {:.0} ms without parity, {:.0} ms with; wire bytes down {:.3} ×, \
             up {:.3} ×",
            ms(without.time),
            ms(with.time),
            with.down.1 as f64 / without.down.1 as f64,
            with.up.1 as f64 / without.up.1 as f64,
        );
        assert_eq!(with.rebuilt, 0, "nothing lost, nothing rebuilt");
        assert!(
            with.time.as_secs_f64() <= 1.02 * without.time.as_secs_f64(),
            "parity made a lossless page {:.0} ms against {:.0}",
            ms(with.time),
            ms(without.time)
        );
    }

    let (mut lossless, mut without, mut with) = (Vec::new(), Vec::new(), Vec::new());
    let (mut rebuilt, mut bytes, mut plain) = (0, 0, 0);
    for seed in SEEDS {
        lossless.push(run(page(seed), seed, 0.0, Parity::Off).time);
        let a = run(page(seed), seed, LOSS, Parity::Off);
        let b = run(page(seed), seed, LOSS, Parity::On);
        without.push(a.time);
        with.push(b.time);
        rebuilt += b.rebuilt;
        bytes += b.down.1 + b.up.1;
        plain += a.down.1 + a.up.1;
    }
    for v in [&mut lossless, &mut without, &mut with] {
        v.sort();
    }
    let n = SEEDS.end - SEEDS.start;
    let q = |v: &[Duration], x| ms(quantile(v, x));
    eprintln!(
        "page, {n} seeds, median / p90 / max ms: lossless {:.0} / {:.0} / {:.0}; {:.1} % loss \
         without parity {:.0} / {:.0} / {:.0}; with parity {:.0} / {:.0} / {:.0} ({:.1} \
         datagrams rebuilt per page; wire bytes {:.3} × those without)",
        q(&lossless, 0.5),
        q(&lossless, 0.9),
        q(&lossless, 1.0),
        LOSS * 100.0,
        q(&without, 0.5),
        q(&without, 0.9),
        q(&without, 1.0),
        q(&with, 0.5),
        q(&with, 0.9),
        q(&with, 1.0),
        rebuilt as f64 / n as f64,
        bytes as f64 / plain as f64,
    );
    // What loss costs the page at the median, and how much of it parity takes back.
    let cost = q(&without, 0.5) - q(&lossless, 0.5);
    let left = q(&with, 0.5) - q(&lossless, 0.5);
    assert!(cost > 0.0);
    assert!(left <= 0.5 * cost, "parity left {left:.0} of {cost:.0} ms");
    assert!(quantile(&with, 0.9) < quantile(&without, 0.9));
}

/// A page whose replies fill the link, with parity on a lossless link. Parity the controller
/// does not count adds its bytes to a full share and queues at the bottleneck; counted, data
/// and parity together keep to the rate: the queue is the one the page meets without parity.
/// (Parity still costs such a page its bytes: it is sent until the meter finds the link busy.)
#[test]
fn parity_counted_in_the_rate_does_not_queue_a_full_link() {
    let p90 = |o: &Outcome| quantile(&o.queued, 0.9);
    let (mut counted, mut uncounted, mut off) = (Duration::ZERO, Duration::ZERO, Duration::ZERO);
    for seed in 1..5u64 {
        let a = run(heavy_page(seed), seed, 0.0, Parity::On);
        let b = run(heavy_page(seed), seed, 0.0, Parity::Uncounted);
        let c = run(heavy_page(seed), seed, 0.0, Parity::Off);
        eprintln!(
            "heavy page, seed {seed}, time ms and bottleneck queue p50 / p90 ms: no parity \
             {:.0} ({:.0} / {:.0}); parity counted {:.0} ({:.0} / {:.0}), uncounted {:.0} \
             ({:.0} / {:.0}); wire bytes down counted {:.3} ×, uncounted {:.3} ×",
            ms(c.time),
            ms(quantile(&c.queued, 0.5)),
            ms(p90(&c)),
            ms(a.time),
            ms(quantile(&a.queued, 0.5)),
            ms(p90(&a)),
            ms(b.time),
            ms(quantile(&b.queued, 0.5)),
            ms(p90(&b)),
            a.down.1 as f64 / c.down.1 as f64,
            b.down.1 as f64 / c.down.1 as f64,
        );
        counted += p90(&a);
        uncounted += p90(&b);
        off += p90(&c);
    }
    // Over four seeds: counted parity queues as much as no parity, uncounted about 10 ms more
    // at p90 on each.
    assert!(
        counted <= off + 10 * MS_1,
        "p90 queue sums: counted {counted:?}, none {off:?}"
    );
    assert!(
        uncounted >= counted + 20 * MS_1,
        "p90 queue sums: uncounted {uncounted:?}, counted {counted:?}, none {off:?}"
    );
}
