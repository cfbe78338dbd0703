//! What the virtual-time QUIC tests share: a client and a server configuration with one
//! self-signed certificate, TLS 1.3 and the pool's ALPN, both on the given transport; an
//! endpoint side driven by hand; a link direction; a stream reader; a seeded generator.
#![allow(dead_code)] // each test binary uses its own subset

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use quinn_proto::{
    Connection, ConnectionHandle, DatagramEvent, Endpoint, IdleTimeout, ReadError, StreamId, VarInt,
};

use pool::tls::{ALPN, DEFAULT_SERVER_NAME};
use quinn_proto::crypto::rustls::{QuicClientConfig, QuicServerConfig};
use quinn_proto::{ClientConfig, ServerConfig, TransportConfig};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// Client and server configurations sharing the transport `t`; the server does not migrate.
pub fn configs(t: Arc<TransportConfig>) -> (ClientConfig, ServerConfig) {
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ED25519).expect("key");
    let mut params =
        rcgen::CertificateParams::new(vec![DEFAULT_SERVER_NAME.to_string()]).expect("params");
    params.serial_number = Some(rcgen::SerialNumber::from(1u64));
    let cert = params.self_signed(&key).expect("certificate");
    let der: CertificateDer<'static> = cert.der().clone();
    let provider = Arc::new(rustls::crypto::ring::default_provider());

    let mut roots = rustls::RootCertStore::empty();
    roots.add(der.clone()).expect("root");
    let mut client = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .expect("TLS 1.3")
        .with_root_certificates(roots)
        .with_no_client_auth();
    client.alpn_protocols = vec![ALPN.to_vec()];
    let mut cc = ClientConfig::new(Arc::new(
        QuicClientConfig::try_from(client).expect("QUIC client crypto"),
    ));
    cc.transport_config(t.clone());

    let mut server = rustls::ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .expect("TLS 1.3")
        .with_no_client_auth()
        .with_single_cert(vec![der], PrivateKeyDer::Pkcs8(key.serialize_der().into()))
        .expect("server certificate");
    server.alpn_protocols = vec![ALPN.to_vec()];
    let mut sc = ServerConfig::with_crypto(Arc::new(
        QuicServerConfig::try_from(server).expect("QUIC server crypto"),
    ));
    sc.transport_config(t);
    sc.migration(false);
    (cc, sc)
}

/// One endpoint with its single connection, driven by hand: what a virtual-time test puts on
/// each side of its link.
pub struct Side {
    pub ep: Endpoint,
    pub conn: Option<(ConnectionHandle, Connection)>,
    /// Datagrams produced, to put on the link.
    pub out: Vec<Vec<u8>>,
    /// Why the connection was lost, if it was.
    pub lost: Option<String>,
}

impl Side {
    /// A side around `ep`, not yet connected.
    pub fn new(ep: Endpoint) -> Side {
        Side {
            ep,
            conn: None,
            out: Vec::new(),
            lost: None,
        }
    }

    /// Hands a datagram from `from` to the endpoint (a server side accepts its first
    /// connection here).
    pub fn receive(&mut self, now: Instant, from: SocketAddr, data: Vec<u8>) {
        let mut buf = Vec::new();
        match self
            .ep
            .handle(now, from, None, None, BytesMut::from(&data[..]), &mut buf)
        {
            Some(DatagramEvent::NewConnection(incoming)) => {
                assert!(self.conn.is_none(), "one connection per side");
                let mut buf = Vec::new();
                let (ch, conn) = self
                    .ep
                    .accept(incoming, now, &mut buf, None)
                    .expect("server accepts");
                self.conn = Some((ch, conn));
            }
            Some(DatagramEvent::ConnectionEvent(ch, ev)) => {
                let (own, conn) = self.conn.as_mut().expect("connection exists");
                assert_eq!(*own, ch);
                conn.handle_event(ev);
            }
            Some(DatagramEvent::Response(t)) => self.out.push(buf[..t.size].to_vec()),
            None => {}
        }
    }

    /// Timers and endpoint events; application events are drained (a lost connection's
    /// reason is kept).
    pub fn service(&mut self, now: Instant) {
        let Some((ch, conn)) = self.conn.as_mut() else {
            return;
        };
        if conn.poll_timeout().is_some_and(|t| t <= now) {
            conn.handle_timeout(now);
        }
        while let Some(ev) = conn.poll_endpoint_events() {
            if let Some(cev) = self.ep.handle_event(*ch, ev) {
                conn.handle_event(cev);
            }
        }
        while let Some(ev) = conn.poll() {
            if let quinn_proto::Event::ConnectionLost { reason } = ev {
                self.lost.get_or_insert(reason.to_string());
            }
        }
    }

    /// Moves the connection's datagrams due now to `out`.
    pub fn transmit(&mut self, now: Instant) {
        let Some((_, conn)) = self.conn.as_mut() else {
            return;
        };
        let mut buf = Vec::new();
        while let Some(t) = conn.poll_transmit(now, 1, &mut buf) {
            self.out.push(buf[..t.size].to_vec());
            buf.clear();
        }
    }

    /// The connection's next timer.
    pub fn timeout(&mut self) -> Option<Instant> {
        self.conn.as_mut().and_then(|(_, c)| c.poll_timeout())
    }

    /// The connection (panics before it exists).
    pub fn conn(&mut self) -> &mut Connection {
        &mut self.conn.as_mut().expect("connected").1
    }
}

/// splitmix64: a small deterministic generator for loss patterns and workloads.
pub struct Rng(pub u64);

impl Rng {
    /// The next value in [0, 1).
    pub fn next_f64(&mut self) -> f64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// IP + UDP header bytes per datagram.
pub const UDP_OVERHEAD: u64 = 28;

/// One direction of a link: a FIFO bottleneck serialising at `rate_bps` (IP + UDP headers
/// counted) with a drop-tail buffer of one round trip of queueing, then half the RTT of
/// propagation.
pub struct Link {
    rate_bps: u64,
    one_way: Duration,
    buffer: Duration,
    free_at: Duration,
    flight: VecDeque<(Duration, Vec<u8>)>,
    /// Datagrams the full buffer dropped.
    pub overflows: u64,
    /// Datagrams and wire bytes that entered the bottleneck.
    pub sent: u64,
    pub bytes: u64,
}

impl Link {
    /// An empty link.
    pub fn new(rate_bps: u64, rtt: Duration) -> Link {
        Link {
            rate_bps,
            one_way: rtt / 2,
            buffer: rtt,
            free_at: Duration::ZERO,
            flight: VecDeque::new(),
            overflows: 0,
            sent: 0,
            bytes: 0,
        }
    }

    /// Queueing delay a datagram sent now would wait.
    pub fn queue(&self, now: Duration) -> Duration {
        self.free_at.saturating_sub(now)
    }

    /// Puts `d` on the link unless the buffer is full; `lost` drops it after the bottleneck.
    pub fn send(&mut self, now: Duration, d: Vec<u8>, lost: bool) {
        if self.queue(now) > self.buffer {
            self.overflows += 1;
            return;
        }
        let wire = d.len() as u64 + UDP_OVERHEAD;
        self.sent += 1;
        self.bytes += wire;
        self.free_at =
            self.free_at.max(now) + Duration::from_nanos(wire * 8_000_000_000 / self.rate_bps);
        if !lost {
            self.flight.push_back((self.free_at + self.one_way, d));
        }
    }

    /// When the next datagram arrives.
    pub fn next_arrival(&self) -> Option<Duration> {
        self.flight.front().map(|f| f.0)
    }

    /// The next datagram due by `now`.
    pub fn pop_due(&mut self, now: Duration) -> Option<Vec<u8>> {
        if self.flight.front().is_some_and(|f| f.0 <= now) {
            self.flight.pop_front().map(|f| f.1)
        } else {
            None
        }
    }
}

/// Reads what is available in order on `id` (appending it to `keep`): the bytes read, and
/// whether the stream has ended.
pub fn read_stream(conn: &mut Connection, id: StreamId, keep: Option<&mut Vec<u8>>) -> (u64, bool) {
    let mut recv = conn.recv_stream(id);
    let Ok(mut chunks) = recv.read(true) else {
        return (0, false);
    };
    let (mut n, mut end, mut keep) = (0, false, keep);
    loop {
        match chunks.next(usize::MAX) {
            Ok(Some(c)) => {
                n += c.bytes.len() as u64;
                if let Some(k) = keep.as_deref_mut() {
                    k.extend_from_slice(&c.bytes);
                }
            }
            Ok(None) => {
                end = true;
                break;
            }
            Err(ReadError::Blocked) => break,
            Err(e) => panic!("stream {id} read: {e}"),
        }
    }
    let _ = chunks.finalize();
    (n, end)
}

/// The product's transport settings for options `o` (`QuicOptions::transport` in
/// crates/pool/src/quic.rs), without a congestion controller: the caller sets the one under
/// test.
pub fn transport(o: &pool::quic::QuicOptions) -> TransportConfig {
    o.validate().expect("product options are valid");
    let mut t = TransportConfig::default();
    t.stream_receive_window(VarInt::from_u64(o.stream_receive_window).expect("window"))
        .receive_window(VarInt::from_u64(o.receive_window).expect("window"))
        .send_window(o.send_window)
        .max_concurrent_bidi_streams(VarInt::from_u32(o.max_streams))
        .max_concurrent_uni_streams(VarInt::from_u32(1))
        .keep_alive_interval(Some(o.keep_alive))
        .max_idle_timeout(Some(IdleTimeout::try_from(o.idle_timeout).expect("idle")))
        .initial_rtt(o.initial_rtt)
        .datagram_receive_buffer_size(None);
    t
}

/// The time of the next event among `pending` (timers already due were handled: never
/// before `now`, and at least a microsecond on).
pub fn next_event(now: Duration, pending: impl IntoIterator<Item = Option<Duration>>) -> Duration {
    let next = pending
        .into_iter()
        .flatten()
        .min()
        .expect("something is pending")
        .max(now);
    if next == now {
        now + Duration::from_micros(1)
    } else {
        next
    }
}
