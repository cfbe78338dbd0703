//! A page's reply beside a download, over a deterministic virtual-time link, with the `rate`
//! controller and the pool's traffic classes (`pool::rate::Traffic`): does a quiet interactive
//! stream left open on the download's connection (an HTTPS tunnel between a page's levels)
//! make the download take an interactive share? No sockets, no wall clock; the arrangement of
//! `quic_virtual_rate.rs` (`quinn_proto` endpoints driven by hand, datagrams delivered at
//! their arrival time), with two connections of one pool sharing the link.
//!
//! The link: per direction a FIFO bottleneck at 10 Mbit/s (IP + UDP headers counted) with a
//! drop-tail buffer of one round trip, then half of 200 ms of propagation; no loss. Transport
//! settings are those of `QuicOptions::for_link` with `rate`; the two server connections (the
//! remote's side, which sends the replies) share one `RateConfig`, as a pool's do, and each
//! reports its streams to its own `Traffic` as `pool::quic` does.
//!
//! Connection A carries a download (a reply without end) and, in some runs, a tunnel that
//! sends 120 kB at once and then stays open with nothing to send. Three seconds in, connection
//! B carries a 450 kB reply; the figure is the time from its request to its last byte read.
//!
//! Limits: two connections, no loss, no jitter, CPU not modelled; the figures describe this
//! model, not a network.

mod quic_vt;

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::sync::Arc;
use std::time::{Duration, Instant};

use pool::quic::QuicOptions;
use pool::rate::{RateConfig, SendClass, Traffic};
use pool::tls::DEFAULT_SERVER_NAME;
use quinn_proto::{Dir, Endpoint, EndpointConfig, StreamId, TransportConfig};

use quic_vt::Link;

const RTT: Duration = Duration::from_millis(200);
const RATE_BPS: u64 = 10_000_000;
/// What the tunnel sends before it falls quiet.
const TUNNEL_BYTES: u64 = 120_000;
/// The page's reply on connection B.
const REPLY_BYTES: u64 = 450_000;
/// When the page's request is sent: the download is long past `BULK_BYTES` by then.
const PAGE_AT: Duration = Duration::from_secs(3);
/// Stream priority of a direction past `BULK_BYTES` (as `pool::quic` lowers it).
const BULK_PRIORITY: i32 = i32::MIN;

/// What a request asks the server to send on its stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ask {
    /// Without end.
    Download,
    /// [`TUNNEL_BYTES`], then nothing, the stream left open.
    Tunnel,
    /// [`REPLY_BYTES`], then the end of the stream.
    Reply,
}

impl Ask {
    fn code(self) -> u8 {
        match self {
            Ask::Download => b'D',
            Ask::Tunnel => b'T',
            Ask::Reply => b'R',
        }
    }

    fn from_code(c: u8) -> Ask {
        match c {
            b'D' => Ask::Download,
            b'T' => Ask::Tunnel,
            _ => Ask::Reply,
        }
    }
}

/// One stream the server writes, with its place in the connection's traffic.
struct Served {
    id: StreamId,
    ask: Ask,
    written: u64,
    class: SendClass,
    finished: bool,
}

/// One pool connection: both ends, and what the server end's controller reads.
struct Conn {
    client: quic_vt::Side,
    server: quic_vt::Side,
    client_addr: SocketAddr,
    server_addr: SocketAddr,
    traffic: Arc<Traffic>,
    served: Vec<Served>,
    /// Client side: streams and the request each asked.
    asked: Vec<(StreamId, Ask)>,
}

impl Conn {
    /// Accepts new streams (one request byte each) and writes what they asked for.
    fn serve(&mut self, at: Instant) {
        let Some((_, conn)) = self.server.conn.as_mut() else {
            return;
        };
        while let Some(id) = conn.streams().accept(Dir::Bi) {
            let mut req = Vec::new();
            let _ = quic_vt::read_stream(conn, id, Some(&mut req));
            let ask = Ask::from_code(*req.first().expect("the request byte arrives with the open"));
            self.served.push(Served {
                id,
                ask,
                written: 0,
                class: SendClass::open_at(self.traffic.clone(), at),
                finished: false,
            });
        }
        static CHUNK: [u8; 16 * 1024] = [0x42; 16 * 1024];
        for s in self.served.iter_mut().filter(|s| !s.finished) {
            let total = match s.ask {
                Ask::Download => u64::MAX,
                Ask::Tunnel => TUNNEL_BYTES,
                Ask::Reply => REPLY_BYTES,
            };
            let mut stream = conn.send_stream(s.id);
            while s.written < total {
                let k = (total - s.written).min(CHUNK.len() as u64) as usize;
                match stream.write(&CHUNK[..k]) {
                    Ok(0) | Err(quinn_proto::WriteError::Blocked) => break,
                    Ok(n) => {
                        s.written += n as u64;
                        if s.class.wrote_at(s.written, at) {
                            stream.set_priority(BULK_PRIORITY).expect("open stream");
                        }
                    }
                    Err(e) => panic!("write: {e}"),
                }
            }
            if s.ask == Ask::Reply && s.written == total {
                stream.finish().expect("finish");
                s.class.end();
                s.finished = true;
            }
        }
    }

    /// Client side: opens a stream asking `ask`.
    fn ask(&mut self, ask: Ask) {
        let c = self.client.conn();
        let id = c.streams().open(Dir::Bi).expect("stream");
        let n = c.send_stream(id).write(&[ask.code()]).expect("request");
        assert_eq!(n, 1);
        c.send_stream(id).finish().expect("finish");
        self.asked.push((id, ask));
    }

    /// Client side: reads every stream; true once the reply has ended.
    fn read(&mut self) -> bool {
        let c = self.client.conn();
        let mut reply_done = false;
        for (id, ask) in &self.asked {
            let (_, end) = quic_vt::read_stream(c, *id, None);
            reply_done |= *ask == Ask::Reply && end;
        }
        reply_done
    }
}

fn transport(rate: &RateConfig) -> TransportConfig {
    let o = QuicOptions::for_link(RTT, RATE_BPS);
    let mut t = quic_vt::transport(&o);
    t.congestion_controller_factory(Arc::new(rate.clone()));
    t
}

/// Connection A's streams in a run.
#[derive(Debug, Clone, Copy)]
enum Beside {
    /// Only the quiet tunnel.
    Tunnel,
    /// Only the download.
    Download,
    /// The download and the quiet tunnel.
    Both,
}

/// The page's reply time on B with `beside` on A.
fn run(beside: Beside) -> Duration {
    let base = Instant::now();
    let remote_pool = RateConfig::new(RATE_BPS, RTT);
    let edge_pool = RateConfig::new(RATE_BPS, RTT);
    let mut ep_cfg = EndpointConfig::default();
    ep_cfg.grease_quic_bit(false);
    let ep_cfg = Arc::new(ep_cfg);
    let mut conns: Vec<Conn> = (0..2u8)
        .map(|i| {
            let traffic = Arc::new(Traffic::new(RATE_BPS, RTT));
            let (mut ccfg, mut scfg) = quic_vt::configs(Arc::new(transport(&edge_pool)));
            ccfg.transport_config(Arc::new(transport(&edge_pool)));
            scfg.transport_config(Arc::new(transport(
                &remote_pool.for_connection(traffic.clone()),
            )));
            let server_addr = SocketAddr::V4(SocketAddrV4::new(
                Ipv4Addr::new(10, 99, 0, 2),
                4444 + u16::from(i),
            ));
            let client_addr = SocketAddr::V4(SocketAddrV4::new(
                Ipv4Addr::new(10, 99, 0, 1),
                50000 + u16::from(i),
            ));
            let server = quic_vt::Side::new(Endpoint::new(
                ep_cfg.clone(),
                Some(Arc::new(scfg)),
                true,
                Some([2 + i; 32]),
            ));
            let mut client = quic_vt::Side::new(Endpoint::new(
                ep_cfg.clone(),
                None,
                true,
                Some([10 + i; 32]),
            ));
            client.conn = Some(
                client
                    .ep
                    .connect(base, ccfg, server_addr, DEFAULT_SERVER_NAME)
                    .expect("connect"),
            );
            Conn {
                client,
                server,
                client_addr,
                server_addr,
                traffic,
                served: Vec::new(),
                asked: Vec::new(),
            }
        })
        .collect();
    // One link for both connections; each datagram carries its connection's index in front.
    let mut up = Link::new(RATE_BPS, RTT);
    let mut down = Link::new(RATE_BPS, RTT);
    let mut now = Duration::ZERO;
    let mut started = false;
    let mut asked_at = None;
    let deadline = Duration::from_secs(60);
    loop {
        let at = base + now;
        while let Some(d) = up.pop_due(now) {
            let c = &mut conns[usize::from(d[0])];
            c.server.receive(at, c.client_addr, d[1..].to_vec());
        }
        while let Some(d) = down.pop_due(now) {
            let c = &mut conns[usize::from(d[0])];
            c.client.receive(at, c.server_addr, d[1..].to_vec());
        }
        for c in conns.iter_mut() {
            c.client.service(at);
            c.server.service(at);
            assert!(
                c.client.lost.is_none() && c.server.lost.is_none(),
                "connection lost"
            );
        }
        let up_both = conns.iter_mut().all(|c| {
            c.client
                .conn
                .as_ref()
                .is_some_and(|(_, q)| !q.is_handshaking())
        });
        if up_both && !started {
            started = true;
            match beside {
                Beside::Tunnel => conns[0].ask(Ask::Tunnel),
                Beside::Download => conns[0].ask(Ask::Download),
                Beside::Both => {
                    conns[0].ask(Ask::Download);
                    conns[0].ask(Ask::Tunnel);
                }
            }
        }
        if started && asked_at.is_none() && now >= PAGE_AT {
            conns[1].ask(Ask::Reply);
            asked_at = Some(now);
        }
        for c in conns.iter_mut() {
            if c.client
                .conn
                .as_ref()
                .is_some_and(|(_, q)| !q.is_handshaking())
                && c.read()
            {
                return now - asked_at.expect("asked");
            }
            c.serve(at);
        }
        for (i, c) in conns.iter_mut().enumerate() {
            c.client.transmit(at);
            for d in c.client.out.drain(..) {
                let mut tagged = vec![i as u8];
                tagged.extend_from_slice(&d);
                up.send(now, tagged, false);
            }
            c.server.transmit(at);
            for d in c.server.out.drain(..) {
                let mut tagged = vec![i as u8];
                tagged.extend_from_slice(&d);
                down.send(now, tagged, false);
            }
        }
        assert!(now < deadline, "the reply did not finish in {deadline:?}");
        let mut pending = vec![
            up.next_arrival(),
            down.next_arrival(),
            asked_at.is_none().then_some(PAGE_AT),
        ];
        for c in conns.iter_mut() {
            pending.push(c.client.timeout().map(|t| t - base));
            pending.push(c.server.timeout().map(|t| t - base));
        }
        now = quic_vt::next_event(now, pending);
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

#[test]
fn a_quiet_tunnel_beside_a_download_does_not_make_it_interactive() {
    let tunnel = run(Beside::Tunnel);
    let download = run(Beside::Download);
    let both = run(Beside::Both);
    println!(
        "450 kB reply on B, ms: beside a quiet tunnel {:.0}, beside a download {:.0}, \
         beside both on one connection {:.0}",
        ms(tunnel),
        ms(download),
        ms(both)
    );
    // A download yields to the page (`rate`: BULK_YIELD of the rate while an interactive
    // connection sends): the reply takes little longer than beside nothing but a quiet stream.
    assert!(
        download.as_secs_f64() <= tunnel.as_secs_f64() * 1.25,
        "beside a download {download:?}, beside a quiet tunnel {tunnel:?}"
    );
    // The quiet tunnel on the download's connection changes nothing: the connection is bulk.
    // Counted interactive, the download took half the link and the reply about twice as long.
    assert!(
        both.as_secs_f64() <= download.as_secs_f64() * 1.1,
        "beside both {both:?}, beside the download alone {download:?}"
    );
}
