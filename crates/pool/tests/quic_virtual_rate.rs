//! The provisioned-rate controller (`congestion = "rate"`, `pool::rate`) against quinn's BBR
//! and CUBIC, one bulk transfer each, over a deterministic virtual-time link: goodput under
//! random loss, and the queue it builds on a link slower than configured. No sockets, no wall
//! clock; the arrangement of `quic_virtual_loss.rs` (two `quinn_proto` endpoints driven by
//! hand, datagrams delivered at their arrival time, seeded generators), with the link
//! parameterised.
//!
//! The link: per direction a FIFO bottleneck serialising at the link rate (IP + UDP headers
//! counted) with a drop-tail buffer of one round trip of queueing, then half the RTT of
//! propagation. Random loss hits reply-direction datagrams only (Bernoulli, seeded), the
//! request/ACK direction is lossless. Transport settings are those of
//! `QuicOptions::for_link(configured RTT, configured rate)` with the controller under test.
//!
//! Figures (printed, `--nocapture`): goodput (stream bytes read by the client per second over
//! the measuring window, after start-up) as a fraction of the link rate (the payload ceiling
//! is about 0.96 of it: QUIC, UDP and IP headers), and the reply direction's queueing delay
//! seen by each datagram in that window (median, 99th percentile, maximum).
//!
//! Limits: one connection, one stream, no competing traffic, no jitter or reordering, CPU not
//! modelled. The figures describe this model, not a network.

mod quic_vt;

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::sync::Arc;
use std::time::{Duration, Instant};

use pool::quic::{Congestion, QuicOptions};
use pool::rate::{threshold, RateConfig};
use pool::tls::DEFAULT_SERVER_NAME;
use quinn_proto::{
    congestion, ClientConfig, Connection, Dir, Endpoint, EndpointConfig, ServerConfig, StreamId,
    TransportConfig,
};

/// One link and what the sender is told about it.
#[derive(Debug, Clone, Copy)]
struct Profile {
    name: &'static str,
    rtt: Duration,
    /// The bottleneck's rate.
    link_bps: u64,
    /// `link.rate_mbit` as configured (the rate controller's target).
    configured_bps: u64,
    /// Reply-direction loss probability.
    loss: f64,
    /// Measuring window: from `warm` to `end` of the run.
    warm: Duration,
    end: Duration,
}

const LOSSY: Profile = Profile {
    name: "lossy 200 ms 10 Mbit/s 1.5 % loss",
    rtt: Duration::from_millis(200),
    link_bps: 10_000_000,
    configured_bps: 10_000_000,
    loss: 0.015,
    warm: Duration::from_secs(5),
    end: Duration::from_secs(20),
};

const SATELLITE: Profile = Profile {
    name: "satellite 600 ms 50 Mbit/s 0.1 % loss",
    rtt: Duration::from_millis(600),
    link_bps: 50_000_000,
    configured_bps: 50_000_000,
    loss: 0.001,
    warm: Duration::from_secs(10),
    end: Duration::from_secs(25),
};

/// Configured at 20 Mbit/s, the link carries 10.
const SMALLER: Profile = Profile {
    name: "smaller link 200 ms, configured 20 Mbit/s, link 10 Mbit/s",
    rtt: Duration::from_millis(200),
    link_bps: 10_000_000,
    configured_bps: 20_000_000,
    loss: 0.0,
    warm: Duration::from_secs(5),
    end: Duration::from_secs(20),
};

use quic_vt::Rng;

use quic_vt::Link;

fn transport(p: &Profile, cc: Congestion) -> TransportConfig {
    // The settings of the product's QuicOptions::transport (crates/pool/src/quic.rs).
    let o = QuicOptions {
        congestion: cc,
        ..QuicOptions::for_link(p.rtt, p.configured_bps)
    };
    let mut t = quic_vt::transport(&o);
    match o.congestion {
        Congestion::Rate => t.congestion_controller_factory(Arc::new(RateConfig::new(
            o.link_rate_bps,
            o.initial_rtt,
        ))),
        Congestion::Bbr => {
            t.congestion_controller_factory(Arc::new(congestion::BbrConfig::default()))
        }
        Congestion::Cubic => {
            t.congestion_controller_factory(Arc::new(congestion::CubicConfig::default()))
        }
        Congestion::NewReno => {
            t.congestion_controller_factory(Arc::new(congestion::NewRenoConfig::default()))
        }
    };
    t
}

fn configs(t: TransportConfig) -> (ClientConfig, ServerConfig) {
    quic_vt::configs(Arc::new(t))
}

use quic_vt::Side;

/// Reads all available in-order bytes of `id`.
fn read_all(conn: &mut Connection, id: StreamId) -> u64 {
    quic_vt::read_stream(conn, id, None).0
}

/// Writes bulk bytes on `id` while the send window takes them.
fn write_more(conn: &mut Connection, id: StreamId) {
    static CHUNK: [u8; 16 * 1024] = [0x42; 16 * 1024];
    let mut s = conn.send_stream(id);
    loop {
        match s.write(&CHUNK) {
            Ok(0) | Err(quinn_proto::WriteError::Blocked) => break,
            Ok(_) => {}
            Err(e) => panic!("stream {id} write: {e}"),
        }
    }
}

/// What one run measured over its window.
#[derive(Debug, Clone)]
struct Outcome {
    goodput_bps: f64,
    /// Reply-direction queueing delay per datagram in the window, sorted.
    queue: Vec<Duration>,
    /// Datagrams the full buffer dropped: in all, and within the measuring window.
    overflows: u64,
    overflows_warm: u64,
    /// Why the connection was lost before the end, if it was.
    lost: Option<String>,
}

impl Outcome {
    fn line_fraction(&self, p: &Profile) -> f64 {
        self.goodput_bps / p.link_bps as f64
    }

    fn queue_at(&self, q: f64) -> Duration {
        let i = (self.queue.len().saturating_sub(1) as f64 * q).round() as usize;
        self.queue.get(i).copied().unwrap_or_default()
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// One bulk transfer with controller `cc` over profile `p`, loss seeded with `seed`.
fn run(p: &Profile, cc: Congestion, seed: u64) -> Outcome {
    let (ccfg, scfg) = configs(transport(p, cc));
    let base = Instant::now();
    let ep_cfg = Arc::new(EndpointConfig::default());
    let server_addr = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::new(10, 99, 0, 2), 4444));
    let client_addr = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::new(10, 99, 0, 1), 50000));
    let mut server = Side::new(Endpoint::new(
        ep_cfg.clone(),
        Some(Arc::new(scfg)),
        true,
        Some([2; 32]),
    ));
    let mut client = Side::new(Endpoint::new(ep_cfg, None, true, Some([1; 32])));
    client.conn = Some(
        client
            .ep
            .connect(base, ccfg, server_addr, DEFAULT_SERVER_NAME)
            .expect("connect"),
    );
    let mut up = Link::new(p.link_bps, p.rtt);
    let mut down = Link::new(p.link_bps, p.rtt);
    let mut rng = Rng(seed);
    let mut now = Duration::ZERO;
    let (mut cstream, mut sstream) = (None, None);
    let mut read = 0u64;
    let mut read_at_warm = None;
    let mut overflows_at_warm = 0;
    let mut queue = Vec::new();

    loop {
        let at = base + now;
        while let Some(d) = up.pop_due(now) {
            server.receive(at, client_addr, d);
        }
        while let Some(d) = down.pop_due(now) {
            client.receive(at, server_addr, d);
        }
        client.service(at);
        server.service(at);

        if let Some((_, c)) = client.conn.as_mut().filter(|(_, c)| !c.is_handshaking()) {
            let id = *cstream.get_or_insert_with(|| {
                let id = c.streams().open(Dir::Bi).expect("stream");
                c.send_stream(id).write(b"bulk").expect("write");
                c.send_stream(id).finish().expect("finish");
                id
            });
            read += read_all(c, id);
        }
        if let Some((_, c)) = server.conn.as_mut() {
            if let Some(id) = c.streams().accept(Dir::Bi) {
                sstream = Some(id);
            }
            if let Some(id) = sstream {
                let _ = read_all(c, id);
                write_more(c, id);
            }
        }

        client.transmit(at);
        server.transmit(at);
        client.service(at);
        server.service(at);
        for d in client.out.drain(..) {
            up.send(now, d, false);
        }
        for d in server.out.drain(..) {
            if now >= p.warm {
                queue.push(down.queue(now));
            }
            let lost = sstream.is_some() && rng.next_f64() < p.loss;
            down.send(now, d, lost);
        }

        if now >= p.warm && read_at_warm.is_none() {
            read_at_warm = Some(read);
            overflows_at_warm = down.overflows;
        }
        if now >= p.end {
            let bytes = read - read_at_warm.expect("warm");
            queue.sort();
            return Outcome {
                goodput_bps: bytes as f64 * 8.0 / (p.end - p.warm).as_secs_f64(),
                queue,
                overflows: down.overflows,
                overflows_warm: down.overflows - overflows_at_warm,
                lost: server.lost.or(client.lost),
            };
        }
        let next = quic_vt::next_event(
            now,
            [
                up.next_arrival(),
                down.next_arrival(),
                client.timeout().map(|t| t - base),
                server.timeout().map(|t| t - base),
                Some(p.warm).filter(|&w| w > now),
                Some(p.end),
            ],
        );
        now = next;
    }
}

/// Runs every controller over `p` with loss seed `seed`; prints the figures.
fn compare(p: &Profile, seed: u64) -> [(Congestion, Outcome); 3] {
    let out =
        [Congestion::Rate, Congestion::Bbr, Congestion::Cubic].map(|cc| (cc, run(p, cc, seed)));
    for (cc, o) in &out {
        eprintln!(
            "{} seed {seed}: {cc:?}: goodput {:.2} Mbit/s = {:.3} of the link; queue median \
             {:.1} ms, p99 {:.1} ms, max {:.1} ms; datagrams sent in the window {}; buffer \
             overflows {} ({} in the window){}",
            p.name,
            o.goodput_bps / 1e6,
            o.line_fraction(p),
            ms(o.queue_at(0.5)),
            ms(o.queue_at(0.99)),
            ms(o.queue_at(1.0)),
            o.queue.len(),
            o.overflows,
            o.overflows_warm,
            o.lost
                .as_ref()
                .map(|r| format!("; connection lost: {r}"))
                .unwrap_or_default(),
        );
    }
    out
}

/// Under random loss the rate controller keeps the link full (at least 0.9 of the link rate,
/// the payload ceiling being about 0.96) and is not below BBR's goodput.
#[test]
fn rate_fills_a_lossy_link() {
    for (p, seeds) in [(LOSSY, &[7, 1234][..]), (SATELLITE, &[7][..])] {
        for &seed in seeds {
            let [(_, rate), (_, bbr), (_, _cubic)] = compare(&p, seed);
            assert!(
                rate.line_fraction(&p) >= 0.9,
                "{}: rate carried {:.3} of the link",
                p.name,
                rate.line_fraction(&p)
            );
            assert!(
                rate.goodput_bps >= 0.99 * bbr.goodput_bps,
                "{}: rate {:.2} Mbit/s below BBR {:.2}",
                p.name,
                rate.goodput_bps / 1e6,
                bbr.goodput_bps / 1e6
            );
        }
    }
}

/// Configured at twice the link's rate, the rate controller does not flood it: the queue
/// stays near the delay threshold (max(25 ms, RTT/4) = 50 ms here) instead of filling the
/// buffer, and the link stays busy.
#[test]
fn rate_never_floods_a_smaller_link() {
    let p = SMALLER;
    let [(_, rate), ..] = compare(&p, 1);
    let limit = threshold(p.rtt);
    assert!(
        rate.queue_at(0.5) <= limit,
        "median queue {:.1} ms above the threshold",
        ms(rate.queue_at(0.5))
    );
    assert!(
        rate.queue_at(1.0) <= 2 * limit,
        "largest queue {:.1} ms above twice the threshold",
        ms(rate.queue_at(1.0))
    );
    // The first round trip goes out at the configured rate (module doc of pool::rate): on a
    // link half as fast it may overflow the buffer then; after start-up, never.
    assert_eq!(
        rate.overflows_warm, 0,
        "the buffer overflowed after start-up"
    );
    assert!(
        rate.line_fraction(&p) >= 0.8,
        "rate carried {:.3} of the smaller link",
        rate.line_fraction(&p)
    );
}
