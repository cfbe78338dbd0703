//! The QUIC carrier's UDP socket with parity datagrams ([`crate::fec`]): what it sends to a
//! peer that decodes parity is grouped and followed by parity, and what it receives is kept
//! for a moment so that a parity can rebuild a lost datagram before quinn sees the loss.
//!
//! What it does: wraps quinn's socket ([`quinn::AsyncUdpSocket`]); on every send, feeds the
//! datagrams to the [`Encoder`] with the peer's protection decision and sends any parity that
//! falls due; a task sends the parity of a flight's tail after [`FecConfig::flush`] of
//! silence; on receive, keeps peers' 1-RTT datagrams in the [`Decoder`] (while the peer
//! sends parity, and without a break while this side protects its sends to it, so that the
//! first group after an idle spell is repairable too), takes parity
//! datagrams out of what quinn reads (splitting a GRO batch that holds one) and hands quinn
//! the datagrams they rebuild.
//!
//! Which sends are protected: only to a peer registered with [`ParitySocket::add_peer`] (its
//! HELLO announced `Features::PARITY`), only while its connection is interactive (no bulk
//! stream alone on it, [`Traffic::bulk`]), only while the pool's interactive sends over the
//! last [`meter_window`] stay below [`BUSY_SHARE`] of the link's rate (parity never takes
//! capacity a loaded link needs; bulk transfers are not counted, they yield to interactive
//! traffic already), and, with [`ParityMode::Auto`], only while the path shows loss
//! ([`LossWatch`]).
//!
//! Each send records on the connection's [`Traffic`] whether it was protected
//! ([`Traffic::set_parity`]): the `rate` controller (`crate::rate`) then paces the data at the
//! connection's share less the parity that will follow it.
//!
//! What it does NOT do: no parity for long-header packets, no change to what quinn sends or
//! how it paces (parity bytes are outside quinn's congestion control, bounded by the share
//! above and the encoder's bucket; only `rate` makes room for them, other controllers do
//! not), no path MTU discovery of its own (a parity larger than
//! [`FecConfig::max_datagram`] is not sent).

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::io::{self, IoSliceMut};
use std::net::SocketAddr;
use std::pin::Pin;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use quinn::udp::{RecvMeta, Transmit};
use quinn::{AsyncUdpSocket, UdpPoller};
use tokio::sync::Notify;

use crate::fec::{self, Decoder, Encoder, FecConfig, Meter, Outgoing};
use crate::rate::Traffic;

/// IP + UDP header bytes counted per datagram by the meter.
const UDP_OVERHEAD: u64 = 28;
/// Share of the link's rate above which the pool's sends are not protected.
pub const BUSY_SHARE: f64 = 0.8;
/// Most rebuilt or split-off datagrams waiting to be handed to quinn.
const MAX_WAITING: usize = 256;
/// How often the flush task looks again when nothing is due (and notices a dropped socket).
const IDLE_TICK: Duration = Duration::from_secs(1);

/// The window of the pool's send meter: four round trips, at least a second (longer than a
/// page's bursts, as long as a sustained load).
pub fn meter_window(rtt: Duration) -> Duration {
    (4 * rtt).max(Duration::from_secs(1))
}

/// When the QUIC carrier sends parity (`[quic] parity`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ParityMode {
    /// No parity sent or decoded; the socket is quinn's own.
    Off,
    /// Parity for interactive connections whose path shows loss (the default).
    #[default]
    Auto,
    /// Parity for interactive connections whatever the loss.
    Always,
}

impl FromStr for ParityMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "off" => Ok(ParityMode::Off),
            "auto" => Ok(ParityMode::Auto),
            "always" => Ok(ParityMode::Always),
            other => Err(format!(
                "unknown parity mode {other:?} (expected off, auto or always)"
            )),
        }
    }
}

impl fmt::Display for ParityMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ParityMode::Off => "off",
            ParityMode::Auto => "auto",
            ParityMode::Always => "always",
        })
    }
}

/// Loss rate at or above which [`ParityMode::Auto`] starts protecting a connection.
pub const LOSS_ON: f64 = 0.005;
/// Packets a path's connections must send before its loss rate is judged ...
pub const LOSS_ON_PACKETS: u64 = 500;
/// ... and consecutive judgements at or above [`LOSS_ON`] that turn parity on (a burst of
/// congestion losses fills one window, random loss every window).
pub const LOSS_ON_STREAK: u8 = 2;
/// Loss rate below which a protected connection stops being protected ...
pub const LOSS_OFF: f64 = 0.0005;
/// ... judged over this many packets (parity hides the losses it repairs from quinn, so what
/// quinn still counts is the losses of two in a group: far fewer, judged over longer).
pub const LOSS_OFF_PACKETS: u64 = 20_000;

/// The loss judgement of one path for [`ParityMode::Auto`], from the packets its connections
/// sent and quinn declared lost and from the peer's datagrams its parity groups showed
/// missing (loss on a long hop is the hop's, and both directions meet it; the edge sends
/// few packets of its own and would judge late by them alone; where only one direction
/// loses, the other's parity costs its bucket's bytes and rebuilds nothing), with
/// hysteresis: on at [`LOSS_ON`] over [`LOSS_ON_STREAK`] consecutive windows of
/// [`LOSS_ON_PACKETS`], off below [`LOSS_OFF`] over [`LOSS_OFF_PACKETS`]. The connections of a
/// pool to one remote (and on the remote, those from one edge address) share one: they cross
/// the same path, and together they reach a judgement sooner.
#[derive(Debug, Default, Clone, Copy)]
pub struct LossWatch {
    lossy: bool,
    sent: u64,
    lost: u64,
    streak: u8,
}

impl LossWatch {
    /// Adds `sent` packets of which `lost` were declared lost; returns whether the path is
    /// judged lossy now.
    pub fn add(&mut self, sent: u64, lost: u64) -> bool {
        self.sent += sent;
        self.lost += lost;
        let judge = if self.lossy {
            LOSS_OFF_PACKETS
        } else {
            LOSS_ON_PACKETS
        };
        if self.sent >= judge {
            let rate = self.lost as f64 / self.sent as f64;
            if self.lossy {
                self.lossy = rate >= LOSS_OFF;
            } else if rate >= LOSS_ON {
                self.streak += 1;
                if self.streak >= LOSS_ON_STREAK {
                    self.lossy = true;
                    self.streak = 0;
                }
            } else {
                self.streak = 0;
            }
            self.sent = 0;
            self.lost = 0;
        }
        self.lossy
    }

    /// The current judgement.
    pub fn lossy(&self) -> bool {
        self.lossy
    }
}

/// A [`LossWatch`] shared by the connections of one path.
pub type SharedLoss = Arc<Mutex<LossWatch>>;

/// One registered peer: what decides its protection, and its counters.
#[derive(Debug)]
pub struct ParityPeer {
    traffic: Arc<Traffic>,
    /// The path shows loss ([`ParityMode::Auto`]); set by the connection's watcher.
    lossy: AtomicBool,
    /// Parity datagrams sent to the peer.
    pub sent: AtomicU64,
    /// Datagrams from the peer rebuilt from its parity.
    pub rebuilt: AtomicU64,
    /// Datagrams to the peer that would have been protected but for the pool's load
    /// ([`BUSY_SHARE`]).
    pub held: AtomicU64,
}

impl ParityPeer {
    /// Whether sends to the peer are protected now (mode, loss and traffic; not the meter).
    pub fn protecting(&self, mode: ParityMode) -> bool {
        self.protecting_at(mode, Instant::now())
    }

    /// [`ParityPeer::protecting`] at `now`.
    pub fn protecting_at(&self, mode: ParityMode, now: Instant) -> bool {
        let wanted = match mode {
            ParityMode::Off => false,
            ParityMode::Auto => self.lossy.load(Ordering::Relaxed),
            ParityMode::Always => true,
        };
        wanted && !self.traffic.bulk_at(now)
    }

    /// Whether its connection carries only bulk transfers now.
    pub fn bulk(&self) -> bool {
        self.traffic.bulk()
    }

    /// Records the loss judgement.
    pub fn set_lossy(&self, lossy: bool) {
        self.lossy.store(lossy, Ordering::Relaxed);
    }
}

struct State {
    enc: Encoder,
    dec: Decoder,
    peers: HashMap<SocketAddr, Arc<ParityPeer>>,
    /// Rebuilt datagrams and datagrams split off a GRO batch, for quinn's next reads.
    waiting: VecDeque<(RecvMeta, Vec<u8>)>,
}

struct Shared {
    state: Mutex<State>,
    wake: Notify,
    mode: ParityMode,
    /// The pool's send meter (shared by the edge's sockets) and the link's rate.
    meter: Arc<Mutex<Meter>>,
    link_bps: u64,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// quinn's socket with parity; see the module doc.
pub struct ParitySocket {
    inner: Arc<dyn AsyncUdpSocket>,
    shared: Arc<Shared>,
}

impl fmt::Debug for ParitySocket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ParitySocket")
            .field("inner", &self.inner)
            .field("mode", &self.shared.mode)
            .finish()
    }
}

impl ParitySocket {
    /// Wraps `inner`; `meter` counts the pool's sends against `link_bps`. Spawns the flush
    /// task on the current tokio runtime; it ends when the socket is dropped.
    pub fn new(
        inner: Arc<dyn AsyncUdpSocket>,
        cfg: FecConfig,
        mode: ParityMode,
        meter: Arc<Mutex<Meter>>,
        link_bps: u64,
    ) -> Arc<ParitySocket> {
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                enc: Encoder::new(cfg),
                dec: Decoder::new(cfg),
                peers: HashMap::new(),
                waiting: VecDeque::new(),
            }),
            wake: Notify::new(),
            mode,
            meter,
            link_bps,
        });
        let s = Arc::new(ParitySocket { inner, shared });
        tokio::spawn(flush_task(Arc::downgrade(&s)));
        s
    }

    /// Registers `addr` as a peer that decodes parity, carrying the connection of `traffic`.
    pub fn add_peer(&self, addr: SocketAddr, traffic: Arc<Traffic>) -> Arc<ParityPeer> {
        let p = Arc::new(ParityPeer {
            traffic,
            lossy: AtomicBool::new(false),
            sent: AtomicU64::new(0),
            rebuilt: AtomicU64::new(0),
            held: AtomicU64::new(0),
        });
        self.shared.lock().peers.insert(addr, p.clone());
        p
    }

    /// Forgets `addr` (its connection ended).
    pub fn remove_peer(&self, addr: SocketAddr) {
        let mut st = self.shared.lock();
        st.peers.remove(&addr);
        st.enc.forget(addr);
        st.dec.forget(addr);
    }

    /// The socket's encoder and decoder counters.
    pub fn stats(&self) -> (fec::FecStats, fec::FecStats) {
        let st = self.shared.lock();
        (st.enc.stats(), st.dec.stats())
    }

    /// Of `peer`'s datagrams in the groups of its parities, how many were judged and how
    /// many of them were missing ([`fec::Decoder::seen_loss`]).
    pub fn seen_loss(&self, peer: SocketAddr) -> (u64, u64) {
        self.shared.lock().dec.seen_loss(peer)
    }

    /// The mode it runs.
    pub fn mode(&self) -> ParityMode {
        self.shared.mode
    }

    fn send_parity(&self, out: Vec<Outgoing>) {
        send_parity(&*self.inner, &self.shared, out);
    }
}

fn send_parity(inner: &dyn AsyncUdpSocket, shared: &Shared, out: Vec<Outgoing>) {
    for o in out {
        let t = Transmit {
            destination: o.destination,
            ecn: None,
            contents: &o.datagram,
            segment_size: None,
            src_ip: o.src_ip,
        };
        // A parity that finds the socket busy is dropped: it is redundancy, not data.
        if inner.try_send(&t).is_ok() {
            let st = shared.lock();
            if let Some(p) = st.peers.get(&o.destination) {
                p.sent.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

async fn flush_task(socket: Weak<ParitySocket>) {
    loop {
        let (wake, due) = {
            let Some(s) = socket.upgrade() else { return };
            let st = s.shared.lock();
            let due = st.enc.poll_timeout();
            drop(st);
            (s.shared.clone(), due)
        };
        let sleep_until = due.unwrap_or_else(|| Instant::now() + IDLE_TICK);
        tokio::select! {
            _ = tokio::time::sleep_until(sleep_until.into()) => {}
            _ = wake.wake.notified() => {}
        }
        drop(wake);
        let Some(s) = socket.upgrade() else { return };
        let out = s.shared.lock().enc.poll_flush(Instant::now());
        if !out.is_empty() {
            s.send_parity(out);
        }
    }
}

impl AsyncUdpSocket for ParitySocket {
    fn create_io_poller(self: Arc<Self>) -> Pin<Box<dyn UdpPoller>> {
        self.inner.clone().create_io_poller()
    }

    fn try_send(&self, t: &Transmit) -> io::Result<()> {
        self.inner.try_send(t)?;
        let now = Instant::now();
        let seg = t.segment_size.unwrap_or(t.contents.len()).max(1);
        let count = t.contents.len().div_ceil(seg) as u64;
        let mode = self.shared.mode;
        let (out, protect) = {
            let mut st = self.shared.lock();
            // The peer's connection, if it is registered and interactive now: only such sends
            // are protected, and only they count towards the load parity yields to (a bulk
            // transfer beside them yields to them already, `crate::rate`). The meter's lock is
            // only ever taken under this one.
            let registered = st.peers.get(&t.destination);
            let peer = registered.filter(|p| !p.traffic.bulk_at(now));
            let busy = peer.is_some() && {
                let mut m = self.shared.meter.lock().unwrap_or_else(|p| p.into_inner());
                m.record(now, t.contents.len() as u64 + UDP_OVERHEAD * count);
                m.rate_bps(now) as f64 >= BUSY_SHARE * self.shared.link_bps as f64
            };
            let wanted = peer.filter(|p| p.protecting_at(mode, now));
            if let Some(p) = wanted.filter(|_| busy) {
                p.held.fetch_add(count, Ordering::Relaxed);
            }
            let protect = !busy && wanted.is_some();
            if let Some(p) = registered {
                p.traffic.set_parity(protect.then(|| st.enc.group()));
            }
            let out = st.enc.on_send(
                now,
                t.destination,
                t.src_ip,
                t.contents.chunks(seg),
                protect,
            );
            (out, protect)
        };
        if !out.is_empty() {
            self.send_parity(out);
        }
        // A protected send may leave a partial group: the flush task looks again.
        if protect {
            self.shared.wake.notify_one();
        }
        Ok(())
    }

    fn poll_recv(
        &self,
        cx: &mut Context,
        bufs: &mut [IoSliceMut<'_>],
        meta: &mut [RecvMeta],
    ) -> Poll<io::Result<usize>> {
        loop {
            {
                let mut st = self.shared.lock();
                if let Some((m, d)) = st.waiting.pop_front() {
                    if bufs.is_empty() || meta.is_empty() || bufs[0].len() < d.len() {
                        continue;
                    }
                    bufs[0][..d.len()].copy_from_slice(&d);
                    meta[0] = m;
                    return Poll::Ready(Ok(1));
                }
            }
            let n = match self.inner.poll_recv(cx, bufs, meta) {
                Poll::Ready(Ok(n)) => n,
                other => return other,
            };
            let now = Instant::now();
            let mut st = self.shared.lock();
            let mut kept = 0;
            for i in 0..n {
                let m = meta[i];
                let stride = m.stride.max(1);
                let data = &bufs[i][..m.len];
                let has_parity = data.chunks(stride).any(fec::is_parity);
                // A registered peer's datagrams are kept for repairs while it sends parity
                // and, without a break, while this side protects its own sends to it: the
                // path is judged lossy, and the peer's parity is due with its next flight.
                let (known, expect) = match st.peers.get(&m.addr) {
                    Some(p) => (true, p.protecting(self.shared.mode)),
                    None => (false, false),
                };
                if !has_parity {
                    if known {
                        for seg in data.chunks(stride) {
                            st.dec.on_datagram_expecting(now, m.addr, seg, expect);
                        }
                    }
                    if kept != i {
                        let (head, tail) = bufs.split_at_mut(i);
                        head[kept][..m.len].copy_from_slice(&tail[0][..m.len]);
                        meta[kept] = m;
                    }
                    kept += 1;
                    continue;
                }
                // A parity in this read: take every datagram of the batch apart.
                let segs: Vec<Vec<u8>> = data.chunks(stride).map(<[u8]>::to_vec).collect();
                for seg in segs {
                    if fec::is_parity(&seg) {
                        let rebuilt = if known {
                            st.dec.on_parity(now, m.addr, &seg)
                        } else {
                            None
                        };
                        if let Some(r) = rebuilt {
                            if let Some(p) = st.peers.get(&m.addr) {
                                p.rebuilt.fetch_add(1, Ordering::Relaxed);
                            }
                            push_waiting(&mut st.waiting, m, r);
                        }
                    } else {
                        if known {
                            st.dec.on_datagram_expecting(now, m.addr, &seg, expect);
                        }
                        push_waiting(&mut st.waiting, m, seg);
                    }
                }
            }
            if kept > 0 {
                return Poll::Ready(Ok(kept));
            }
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }

    fn max_transmit_segments(&self) -> usize {
        self.inner.max_transmit_segments()
    }

    fn max_receive_segments(&self) -> usize {
        self.inner.max_receive_segments()
    }

    fn may_fragment(&self) -> bool {
        self.inner.may_fragment()
    }
}

fn push_waiting(q: &mut VecDeque<(RecvMeta, Vec<u8>)>, m: RecvMeta, d: Vec<u8>) {
    if q.len() >= MAX_WAITING {
        // quinn reads faster than this fills; if not, the oldest goes (QUIC repairs it).
        q.pop_front();
    }
    let meta = RecvMeta {
        addr: m.addr,
        len: d.len(),
        stride: d.len(),
        ecn: m.ecn,
        dst_ip: m.dst_ip,
    };
    q.push_back((meta, d));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_parse_and_print() {
        for m in [ParityMode::Off, ParityMode::Auto, ParityMode::Always] {
            assert_eq!(m.to_string().parse::<ParityMode>(), Ok(m));
        }
        assert!("sometimes".parse::<ParityMode>().is_err());
        assert_eq!(ParityMode::default(), ParityMode::Auto);
    }

    #[test]
    fn loss_watch_turns_on_with_loss_and_off_only_after_a_long_clean_stretch() {
        let mut w = LossWatch::default();
        assert!(!w.add(400, 10), "too few packets to judge");
        assert!(!w.add(100, 0), "one window at 2 % is not enough");
        assert!(w.add(500, 8), "a second one at 1.6 %");
        // Protected at 1.5 % loss, quinn still counts the pairs parity cannot repair (about
        // 0.17 % of packets): that keeps it on.
        assert!(w.add(10_000, 15), "not judged before 20 000 packets");
        assert!(w.add(10_000, 19), "0.17 % over 20 000");
        // The loss went away: 4 in 20 000 (0.02 %).
        assert!(!w.add(20_000, 4));
        let mut clean = LossWatch::default();
        assert!(!clean.add(100_000, 0), "a clean path never turns on");
        assert!(!clean.add(1_000, 4), "0.4 % is below LOSS_ON");
        assert!(
            !clean.add(500, 2),
            "as is 0.4 % over the fewest packets judged"
        );
        // A burst of congestion losses in one window, clean windows around it.
        assert!(!clean.add(500, 30));
        assert!(!clean.add(500, 0));
        assert!(!clean.add(500, 30), "bursts in windows apart do not add up");
    }

    #[test]
    fn a_bulk_connection_is_never_protected() {
        let traffic = Arc::new(Traffic::default());
        let p = ParityPeer {
            traffic: traffic.clone(),
            lossy: AtomicBool::new(true),
            sent: AtomicU64::new(0),
            rebuilt: AtomicU64::new(0),
            held: AtomicU64::new(0),
        };
        assert!(p.protecting(ParityMode::Auto));
        assert!(p.protecting(ParityMode::Always));
        assert!(!p.protecting(ParityMode::Off));
        let mut class = crate::rate::SendClass::open(traffic.clone());
        assert!(
            p.protecting(ParityMode::Always),
            "an interactive stream is open"
        );
        class.wrote(mux::policy::BULK_BYTES);
        assert!(traffic.bulk());
        assert!(!p.protecting(ParityMode::Always), "a bulk stream alone");
        p.set_lossy(false);
        drop(class);
        assert!(!p.protecting(ParityMode::Auto), "no loss seen");
    }

    /// Each send tells the connection's controller whether it was protected, and the meter's
    /// verdict counts: on a busy link the share is data again.
    #[tokio::test]
    async fn sends_tell_the_controller_whether_parity_follows() {
        use quinn::Runtime;
        let bind = || std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
        let peer = bind();
        let to = peer.local_addr().expect("address");
        let socket = |link_bps| {
            let inner = quinn::TokioRuntime.wrap_udp_socket(bind()).expect("socket");
            let meter = Arc::new(Mutex::new(Meter::new(Duration::from_secs(1))));
            ParitySocket::new(
                inner,
                FecConfig::default(),
                ParityMode::Always,
                meter,
                link_bps,
            )
        };
        // A short-header (1-RTT) datagram.
        let mut datagram = vec![0u8; 1200];
        datagram[0] = 0x40;
        let t = Transmit {
            destination: to,
            ecn: None,
            contents: &datagram,
            segment_size: None,
            src_ip: None,
        };
        async fn send(s: Arc<ParitySocket>, t: &Transmit<'_>) {
            let mut poller = s.clone().create_io_poller();
            std::future::poll_fn(|cx| poller.as_mut().poll_writable(cx))
                .await
                .expect("writable");
            s.try_send(t).expect("send");
        }

        let idle = socket(1_000_000_000);
        let traffic = Arc::new(Traffic::default());
        let _class = crate::rate::SendClass::open(traffic.clone());
        idle.add_peer(to, traffic.clone());
        assert_eq!(traffic.data_share(), 1.0, "nothing sent yet");
        send(idle.clone(), &t).await;
        let group = FecConfig::default().group as f64;
        assert_eq!(traffic.data_share(), group / (group + 1.0));

        // 1200 bytes over a second already pass 0.8 of 8 kbit/s: the link is busy, nothing
        // is protected, and the controller is told.
        let busy = socket(8_000);
        busy.add_peer(to, traffic.clone());
        send(busy.clone(), &t).await;
        assert_eq!(traffic.data_share(), 1.0);
        assert!(busy.shared.lock().peers[&to].held.load(Ordering::Relaxed) > 0);
    }
}
