//! Parity datagrams for the QUIC carrier: one XOR parity per small group of datagrams, so a
//! receiver rebuilds a single lost datagram of the group without waiting for QUIC's loss
//! recovery.
//!
//! On a long link with random loss every lost packet costs its stream about a round trip: the
//! sender learns of it from the acknowledgements of later packets (RFC 9002 §6.1) or, for the
//! last packet of a flight, from the probe timeout (§6.2), and the repair crosses the link
//! again. A page of short exchanges meets that several times on its critical path: in the
//! virtual-time model (tests/quic_virtual_fec.rs) random loss of 1.5 % each way made a page
//! of 48 exchanges a third slower, and one parity per 8 datagrams took back most of it. This is
//! the "corrective" scheme of Flach et al., *Reducing Web Latency: the Virtue of Gentle
//! Aggression* (SIGCOMM 2013), below QUIC instead of inside TCP: the sender groups the
//! 1-RTT datagrams it sends to one peer, sends a parity datagram after every
//! [`FecConfig::group`] of them and after the last datagram of a flight (the peer silent for
//! [`FecConfig::flush`], a twentieth of the round trip); the receiver keeps the last datagrams from each peer for a moment,
//! and when a parity finds exactly one member of its group missing, XORs the rest into it and
//! hands QUIC the datagram it lost, byte for byte. QUIC authenticates it like any other
//! (AEAD) and discards it if the original also arrived (RFC 9000 §12.3), so a wrong rebuild
//! costs nothing but the work.
//!
//! # Parity datagram (docs/PROTOCOL.md §8.6)
//!
//! ```text
//! type (1) = 0x21 | members n (1) | XOR of member lengths (2) | n × tag (2) | payload
//! ```
//!
//! A member's *tag* is its last two bytes (the end of its AEAD tag, as good as random). The
//! payload is the XOR of every member without its last two bytes, each zero-padded to the
//! longest, so a parity is `2n + 2` bytes longer than its longest member: 18 bytes at
//! [`DEFAULT_GROUP`], a 1470-byte parity for quinn's largest 1452-byte datagram, within an
//! Ethernet path's 1472 bytes of IPv4 UDP payload (a parity that would exceed
//! [`FecConfig::max_datagram`] is not sent). The type byte has the header-form and fixed bits
//! clear, which no QUIC packet has between endpoints that do not grease the fixed bit
//! (RFC 9287; the pool's endpoints do not), and a QUIC receiver without this layer discards it
//! as an invalid packet.
//!
//! # Bounds
//!
//! The sender holds one running XOR per peer (at most [`FecConfig::max_peers`], least recently
//! used forgotten); the receiver holds at most [`FecConfig::window`] datagrams per peer, none
//! older than [`FecConfig::max_age`], for at most `max_peers` peers. Parity bytes spend tokens
//! from a per-peer bucket that earns 1/[`FecConfig::earn_divisor`] of the bytes sent to the peer
//! plus [`FecConfig::floor_bytes_per_s`], up to [`FecConfig::bucket_bytes`]; a parity the bucket
//! cannot pay for is not sent.
//!
//! What it does NOT do: no I/O (the socket wrapper in `crate::parity` drives it), no decision
//! of *whether* to protect a datagram (the caller says, per send: the pool protects
//! interactive connections on a lossy path), no repair of two losses in one group (QUIC
//! repairs those as before), nothing for long-header (handshake) packets.

use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

/// The first byte of a parity datagram (version 1 of the format).
pub const PARITY_TYPE: u8 = 0x21;
/// Bytes before the tags: type, member count, length XOR.
pub const HEADER_BYTES: usize = 4;
/// Bytes of a member's tag.
pub const TAG_BYTES: usize = 2;
/// Most members one parity may cover.
pub const MAX_GROUP: usize = 32;
/// Default datagrams per parity.
pub const DEFAULT_GROUP: usize = 8;
/// Default silence after which a partial group gets its parity: a twentieth of the round trip
/// ([`FecConfig::for_rtt`]), within these bounds. Long enough to span the pacer's gaps within
/// a flight (groups fill to [`DEFAULT_GROUP`] instead of closing at each burst), short beside
/// the round trip a loss would otherwise cost.
pub const MIN_FLUSH: Duration = Duration::from_millis(2);
/// Upper bound of the default flush.
pub const MAX_FLUSH: Duration = Duration::from_millis(25);
/// Default largest parity datagram: an Ethernet path's IPv4 UDP payload.
pub const DEFAULT_MAX_DATAGRAM: usize = 1472;
/// Default share of the bytes sent that parity may spend: a quarter.
pub const DEFAULT_EARN_DIVISOR: u64 = 4;
/// Default tokens a peer earns per second whatever it is sent.
pub const DEFAULT_FLOOR_BYTES_PER_S: u64 = 32 * 1024;
/// Default bucket size (and the allowance of a new peer).
pub const DEFAULT_BUCKET_BYTES: u64 = 128 * 1024;
/// Default peers tracked on each side.
pub const DEFAULT_MAX_PEERS: usize = 256;
/// Default datagrams kept per peer for repairs.
pub const DEFAULT_WINDOW: usize = 64;
/// Default age beyond which a kept datagram is dropped.
pub const DEFAULT_MAX_AGE: Duration = Duration::from_millis(500);
/// Default time after a peer's last parity during which its datagrams are kept.
pub const DEFAULT_LISTEN: Duration = Duration::from_secs(2);

/// Group size, timing and bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FecConfig {
    /// Datagrams per parity.
    pub group: usize,
    /// Silence after which a partial group gets its parity.
    pub flush: Duration,
    /// Largest parity datagram sent.
    pub max_datagram: usize,
    /// Parity may spend 1/`earn_divisor` of the bytes sent to a peer ...
    pub earn_divisor: u64,
    /// ... plus this many bytes per second ...
    pub floor_bytes_per_s: u64,
    /// ... holding at most this many.
    pub bucket_bytes: u64,
    /// Most peers tracked by the encoder, and by the decoder.
    pub max_peers: usize,
    /// Most datagrams kept per peer for repairs.
    pub window: usize,
    /// Oldest datagram kept for repairs.
    pub max_age: Duration,
    /// A peer's datagrams are kept only this long after its last parity (a peer that sends
    /// none costs no copies).
    pub listen: Duration,
}

impl Default for FecConfig {
    /// The defaults for a 200 ms link ([`FecConfig::for_rtt`]).
    fn default() -> Self {
        FecConfig::for_rtt(Duration::from_millis(200))
    }
}

impl FecConfig {
    /// The defaults for a link of round trip `rtt`.
    pub fn for_rtt(rtt: Duration) -> FecConfig {
        FecConfig {
            group: DEFAULT_GROUP,
            flush: (rtt / 20).clamp(MIN_FLUSH, MAX_FLUSH),
            max_datagram: DEFAULT_MAX_DATAGRAM,
            earn_divisor: DEFAULT_EARN_DIVISOR,
            floor_bytes_per_s: DEFAULT_FLOOR_BYTES_PER_S,
            bucket_bytes: DEFAULT_BUCKET_BYTES,
            max_peers: DEFAULT_MAX_PEERS,
            window: DEFAULT_WINDOW,
            max_age: DEFAULT_MAX_AGE,
            listen: DEFAULT_LISTEN,
        }
    }

    /// Checks the settings once.
    pub fn validate(&self) -> Result<(), String> {
        if !(1..=MAX_GROUP).contains(&self.group) {
            return Err(format!(
                "parity group {} must be in 1..={MAX_GROUP}",
                self.group
            ));
        }
        if self.flush.is_zero() {
            return Err("parity flush must be positive".into());
        }
        if self.earn_divisor == 0 {
            return Err("parity earn divisor must be at least 1".into());
        }
        if self.max_peers == 0 || self.window == 0 {
            return Err("parity must track at least one peer and one datagram".into());
        }
        if self.max_datagram < HEADER_BYTES + TAG_BYTES * self.group + 1 {
            return Err(format!(
                "parity max datagram {} is too small",
                self.max_datagram
            ));
        }
        Ok(())
    }
}

/// Whether `datagram` starts with a QUIC short header (1-RTT): header form bit clear
/// (RFC 9000 §17.3.1), and is not a parity datagram.
pub fn is_protectable(datagram: &[u8]) -> bool {
    datagram.len() > TAG_BYTES && datagram[0] & 0x80 == 0 && datagram[0] != PARITY_TYPE
}

/// Whether `datagram` is a parity datagram (by its type byte; [`Parity::decode`] checks the
/// rest).
pub fn is_parity(datagram: &[u8]) -> bool {
    datagram.first() == Some(&PARITY_TYPE)
}

fn tag_of(datagram: &[u8]) -> u16 {
    let n = datagram.len();
    u16::from_be_bytes([datagram[n - 2], datagram[n - 1]])
}

/// A decoded parity datagram.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Parity {
    /// XOR of the members' lengths.
    pub len_xor: u16,
    /// The members' tags, in the order sent.
    pub tags: Vec<u16>,
    /// XOR of the members without their tags, zero-padded to the longest.
    pub payload: Vec<u8>,
}

/// Why a datagram that claims to be a parity is not one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParityError {
    /// Not the parity type byte.
    Type,
    /// Shorter than its header and tags, or no member.
    Truncated,
    /// More members than [`MAX_GROUP`].
    TooManyMembers,
}

impl std::fmt::Display for ParityError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ParityError::Type => "not a parity datagram",
            ParityError::Truncated => "parity datagram truncated",
            ParityError::TooManyMembers => "parity datagram with too many members",
        })
    }
}

impl Parity {
    /// The parity of `members` (each longer than its tag).
    pub fn of<'a>(members: impl IntoIterator<Item = &'a [u8]>) -> Parity {
        let mut p = Parity {
            len_xor: 0,
            tags: Vec::new(),
            payload: Vec::new(),
        };
        for m in members {
            p.add(m);
        }
        p
    }

    fn add(&mut self, m: &[u8]) {
        debug_assert!(m.len() > TAG_BYTES);
        self.len_xor ^= m.len() as u16;
        self.tags.push(tag_of(m));
        let body = &m[..m.len() - TAG_BYTES];
        if self.payload.len() < body.len() {
            self.payload.resize(body.len(), 0);
        }
        for (p, b) in self.payload.iter_mut().zip(body) {
            *p ^= b;
        }
    }

    /// Wire size.
    pub fn encoded_len(&self) -> usize {
        HEADER_BYTES + TAG_BYTES * self.tags.len() + self.payload.len()
    }

    /// The datagram.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.encoded_len());
        out.push(PARITY_TYPE);
        out.push(self.tags.len() as u8);
        out.extend_from_slice(&self.len_xor.to_be_bytes());
        for t in &self.tags {
            out.extend_from_slice(&t.to_be_bytes());
        }
        out.extend_from_slice(&self.payload);
        out
    }

    /// Reads a parity datagram.
    pub fn decode(d: &[u8]) -> Result<Parity, ParityError> {
        if !is_parity(d) {
            return Err(ParityError::Type);
        }
        if d.len() < HEADER_BYTES {
            return Err(ParityError::Truncated);
        }
        let n = usize::from(d[1]);
        if n == 0 {
            return Err(ParityError::Truncated);
        }
        if n > MAX_GROUP {
            return Err(ParityError::TooManyMembers);
        }
        let tags_end = HEADER_BYTES + TAG_BYTES * n;
        if d.len() < tags_end {
            return Err(ParityError::Truncated);
        }
        Ok(Parity {
            len_xor: u16::from_be_bytes([d[2], d[3]]),
            tags: d[HEADER_BYTES..tags_end]
                .chunks_exact(2)
                .map(|c| u16::from_be_bytes([c[0], c[1]]))
                .collect(),
            payload: d[tags_end..].to_vec(),
        })
    }

    /// Rebuilds the one member not in `present` (the other members, in any order): its
    /// length from the length XOR, its body from the payload, its tag from the parity.
    /// `None` if the lengths do not fit (the members given are not this group's).
    pub fn rebuild(&self, missing_tag: u16, present: &[&[u8]]) -> Option<Vec<u8>> {
        let mut len = self.len_xor;
        let mut body = self.payload.clone();
        for m in present {
            len ^= m.len() as u16;
            let b = &m[..m.len().checked_sub(TAG_BYTES)?];
            if b.len() > body.len() {
                return None;
            }
            for (p, x) in body.iter_mut().zip(b) {
                *p ^= x;
            }
        }
        let len = usize::from(len);
        if len <= TAG_BYTES || len - TAG_BYTES > body.len() {
            return None;
        }
        body.truncate(len - TAG_BYTES);
        body.extend_from_slice(&missing_tag.to_be_bytes());
        Some(body)
    }
}

/// A parity to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outgoing {
    /// The peer.
    pub destination: SocketAddr,
    /// The source address its members were sent from, if chosen.
    pub src_ip: Option<IpAddr>,
    /// The parity datagram.
    pub datagram: Vec<u8>,
}

/// Encoder and decoder counters since start.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FecStats {
    /// Datagrams covered by a parity that was sent.
    pub protected: u64,
    /// Parity datagrams handed out to send.
    pub parities: u64,
    /// Bytes of those parity datagrams.
    pub parity_bytes: u64,
    /// Parities not sent because the peer's bucket was short.
    pub unpaid: u64,
    /// Parities not sent because they would exceed [`FecConfig::max_datagram`].
    pub oversize: u64,
    /// Parity datagrams received.
    pub received: u64,
    /// Datagrams rebuilt from them.
    pub rebuilt: u64,
    /// Received parities whose group had arrived whole.
    pub complete: u64,
    /// Received parities that could not help: two or more members missing, or lengths that
    /// did not fit.
    pub unrepairable: u64,
    /// Members of the groups of received parities that were judged (all but a peer's first
    /// parity, which only starts the keeping) ...
    pub members: u64,
    /// ... and how many of them had not arrived when their parity did: the loss the peer's
    /// datagrams met on their way here.
    pub missing: u64,
    /// Received datagrams that claimed to be parity and were not.
    pub malformed: u64,
}

#[derive(Debug)]
struct EncPeer {
    parity: Parity,
    src_ip: Option<IpAddr>,
    last_send: Instant,
    tokens: u64,
    refilled: Instant,
}

/// The sending side: one running parity per peer.
#[derive(Debug)]
pub struct Encoder {
    cfg: FecConfig,
    peers: HashMap<SocketAddr, EncPeer>,
    stats: FecStats,
}

impl Encoder {
    /// Empty; `cfg` must be valid ([`FecConfig::validate`]).
    pub fn new(cfg: FecConfig) -> Encoder {
        Encoder {
            cfg,
            peers: HashMap::new(),
            stats: FecStats::default(),
        }
    }

    /// Counters since start (encoder side).
    pub fn stats(&self) -> FecStats {
        self.stats
    }

    /// Datagrams per parity ([`FecConfig::group`]).
    pub fn group(&self) -> usize {
        self.cfg.group
    }

    /// Records the datagrams of one send to `destination` at `now` (a GSO batch is several,
    /// in order). With `protect`, the 1-RTT ones join the peer's group, and a group that
    /// fills returns its parity to send now. Without, the peer's partial group, if any, is
    /// closed and its parity returned: a parity never spans an unprotected datagram.
    pub fn on_send<'a>(
        &mut self,
        now: Instant,
        destination: SocketAddr,
        src_ip: Option<IpAddr>,
        datagrams: impl IntoIterator<Item = &'a [u8]>,
        protect: bool,
    ) -> Vec<Outgoing> {
        let mut out = Vec::new();
        if !protect {
            let mut bytes = 0;
            for d in datagrams {
                bytes += d.len() as u64;
            }
            if let Some(p) = self.peers.get_mut(&destination) {
                earn(p, &self.cfg, now, bytes);
                p.last_send = now;
            }
            if let Some(o) = self.close_group(now, destination) {
                out.push(o);
            }
            return out;
        }
        if !self.peers.contains_key(&destination) && self.peers.len() >= self.cfg.max_peers {
            if let Some(oldest) = self
                .peers
                .iter()
                .min_by_key(|(_, p)| p.last_send)
                .map(|(a, _)| *a)
            {
                self.peers.remove(&oldest);
            }
        }
        let cfg = self.cfg;
        self.peers.entry(destination).or_insert_with(|| EncPeer {
            parity: Parity::of([]),
            src_ip,
            last_send: now,
            tokens: cfg.bucket_bytes,
            refilled: now,
        });
        for d in datagrams {
            let p = self.peers.get_mut(&destination).expect("inserted above");
            earn(p, &cfg, now, d.len() as u64);
            p.last_send = now;
            if !is_protectable(d) {
                if let Some(o) = self.close_group(now, destination) {
                    out.push(o);
                }
                continue;
            }
            let p = self.peers.get_mut(&destination).expect("inserted above");
            p.src_ip = src_ip;
            p.parity.add(d);
            if p.parity.tags.len() >= cfg.group {
                if let Some(o) = self.close_group(now, destination) {
                    out.push(o);
                }
            }
        }
        out
    }

    /// The earliest time a partial group's parity falls due.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.peers
            .values()
            .filter(|p| !p.parity.tags.is_empty())
            .map(|p| p.last_send + self.cfg.flush)
            .min()
    }

    /// Parities of partial groups whose peer has been silent for [`FecConfig::flush`].
    pub fn poll_flush(&mut self, now: Instant) -> Vec<Outgoing> {
        let due: Vec<SocketAddr> = self
            .peers
            .iter()
            .filter(|(_, p)| !p.parity.tags.is_empty() && now >= p.last_send + self.cfg.flush)
            .map(|(a, _)| *a)
            .collect();
        due.into_iter()
            .filter_map(|a| self.close_group(now, a))
            .collect()
    }

    /// Forgets `destination` (its connection ended).
    pub fn forget(&mut self, destination: SocketAddr) {
        self.peers.remove(&destination);
    }

    fn close_group(&mut self, now: Instant, destination: SocketAddr) -> Option<Outgoing> {
        let cfg = self.cfg;
        let p = self.peers.get_mut(&destination)?;
        if p.parity.tags.is_empty() {
            return None;
        }
        let parity = std::mem::replace(&mut p.parity, Parity::of([]));
        let len = parity.encoded_len();
        if len > cfg.max_datagram {
            self.stats.oversize += 1;
            return None;
        }
        refill(p, &cfg, now);
        if p.tokens < len as u64 {
            self.stats.unpaid += 1;
            return None;
        }
        p.tokens -= len as u64;
        self.stats.protected += parity.tags.len() as u64;
        self.stats.parities += 1;
        self.stats.parity_bytes += len as u64;
        Some(Outgoing {
            destination,
            src_ip: p.src_ip,
            datagram: parity.encode(),
        })
    }
}

fn refill(p: &mut EncPeer, cfg: &FecConfig, now: Instant) {
    let dt = now.saturating_duration_since(p.refilled);
    let earned = (u128::from(cfg.floor_bytes_per_s) * dt.as_nanos() / 1_000_000_000) as u64;
    if earned > 0 {
        p.tokens = (p.tokens + earned).min(cfg.bucket_bytes);
        p.refilled = now;
    }
}

fn earn(p: &mut EncPeer, cfg: &FecConfig, now: Instant, bytes: u64) {
    refill(p, cfg, now);
    p.tokens = (p.tokens + bytes / cfg.earn_divisor).min(cfg.bucket_bytes);
}

/// Bytes sent over a sliding window: the send rate the caller compares with the link's rate
/// to leave parity out while the link is busy.
#[derive(Debug)]
pub struct Meter {
    window: Duration,
    slots: VecDeque<(Instant, u64)>,
    total: u64,
}

/// Slots a [`Meter`] window is cut into.
const METER_SLOTS: u32 = 8;

impl Meter {
    /// A meter over `window` (at least a millisecond).
    pub fn new(window: Duration) -> Meter {
        Meter {
            window: window.max(Duration::from_millis(1)),
            slots: VecDeque::new(),
            total: 0,
        }
    }

    /// Counts `bytes` sent at `now`.
    pub fn record(&mut self, now: Instant, bytes: u64) {
        self.expire(now);
        let slot = self.window / METER_SLOTS;
        match self.slots.back_mut() {
            Some((t, b)) if now.saturating_duration_since(*t) < slot => *b += bytes,
            _ => self.slots.push_back((now, bytes)),
        }
        self.total += bytes;
    }

    /// Bits per second sent over the window ending at `now`.
    pub fn rate_bps(&mut self, now: Instant) -> u64 {
        self.expire(now);
        (u128::from(self.total) * 8 * 1_000_000_000 / self.window.as_nanos().max(1)) as u64
    }

    fn expire(&mut self, now: Instant) {
        while let Some(&(t, b)) = self.slots.front() {
            if now.saturating_duration_since(t) < self.window {
                break;
            }
            self.slots.pop_front();
            self.total -= b;
        }
    }
}

#[derive(Debug)]
struct DecPeer {
    recent: VecDeque<(Instant, Vec<u8>)>,
    /// Its last parity, or when it was first expected to send one: the peer is tracked from
    /// then on.
    last: Instant,
    /// Since when its datagrams have been kept without a break, if they are kept now.
    keeping_since: Option<Instant>,
    /// When its last parity arrived, if one has.
    parity_at: Option<Instant>,
    /// Members of its judged groups, and of those the ones missing ([`Decoder::seen_loss`]).
    members: u64,
    missing: u64,
}

/// The receiving side: the last datagrams from each peer, and the repairs parity allows.
#[derive(Debug)]
pub struct Decoder {
    cfg: FecConfig,
    peers: HashMap<SocketAddr, DecPeer>,
    stats: FecStats,
}

impl Decoder {
    /// Empty; `cfg` must be valid ([`FecConfig::validate`]).
    pub fn new(cfg: FecConfig) -> Decoder {
        Decoder {
            cfg,
            peers: HashMap::new(),
            stats: FecStats::default(),
        }
    }

    /// Counters since start (decoder side).
    pub fn stats(&self) -> FecStats {
        self.stats
    }

    /// Forgets `source` (its connection ended).
    pub fn forget(&mut self, source: SocketAddr) {
        self.peers.remove(&source);
    }

    /// Keeps a 1-RTT datagram received from `source` for repairs, if `source` has sent
    /// parity within [`FecConfig::listen`].
    pub fn on_datagram(&mut self, now: Instant, source: SocketAddr, d: &[u8]) {
        self.on_datagram_expecting(now, source, d, false);
    }

    /// Like [`Decoder::on_datagram`]; with `expect` (the path from `source` is judged lossy,
    /// so its parity is due) the datagram is kept whether or not `source` sent parity lately.
    /// Without it, a connection idle for longer than `listen` would leave the first group of
    /// its next flight unrepairable, since its members would arrive before the parity that
    /// starts the keeping: on a pool whose connections take turns, the start of most pages.
    pub fn on_datagram_expecting(
        &mut self,
        now: Instant,
        source: SocketAddr,
        d: &[u8],
        expect: bool,
    ) {
        if !is_protectable(d) {
            return;
        }
        let (window, max_age, listen) = (self.cfg.window, self.cfg.max_age, self.cfg.listen);
        if !self.peers.contains_key(&source) {
            if !expect {
                return;
            }
            self.peer(now, source);
        }
        let Some(p) = self.peers.get_mut(&source) else {
            return;
        };
        if !expect && now.saturating_duration_since(p.last) > listen {
            p.recent.clear();
            p.keeping_since = None;
            return;
        }
        p.keeping_since.get_or_insert(now);
        p.recent.push_back((now, d.to_vec()));
        while p.recent.len() > window
            || p.recent
                .front()
                .is_some_and(|(t, _)| now.saturating_duration_since(*t) > max_age)
        {
            p.recent.pop_front();
        }
    }

    /// Handles a parity datagram from `source`: the datagram it rebuilds, if exactly one
    /// member of its group is missing and the others are at hand. The rebuilt datagram is
    /// kept as if received.
    pub fn on_parity(&mut self, now: Instant, source: SocketAddr, d: &[u8]) -> Option<Vec<u8>> {
        let parity = match Parity::decode(d) {
            Ok(p) => p,
            Err(_) => {
                self.stats.malformed += 1;
                return None;
            }
        };
        self.stats.received += 1;
        let max_age = self.cfg.max_age;
        let p = self.peer(now, source);
        // A group is judged only if its members were kept: the keeping has run without a
        // break since before the previous parity (a group's members follow its previous
        // parity). A peer's first parity, or its first after the keeping stopped, only
        // starts the keeping.
        let kept = p
            .keeping_since
            .is_some_and(|k| p.parity_at.is_some_and(|t| k <= t));
        p.last = now;
        p.parity_at = Some(now);
        if !kept {
            if p.keeping_since.is_none() {
                p.recent.clear();
                p.keeping_since = Some(now);
            }
            return None;
        }
        // Match each tag to a kept datagram, newest first, each datagram used once.
        let mut used = vec![false; p.recent.len()];
        let mut present: Vec<&[u8]> = Vec::with_capacity(parity.tags.len());
        let mut missing = Vec::new();
        for &tag in &parity.tags {
            let hit = p.recent.iter().enumerate().rev().find(|(i, (t, d))| {
                !used[*i] && tag_of(d) == tag && now.saturating_duration_since(*t) <= max_age
            });
            match hit {
                Some((i, (_, d))) => {
                    used[i] = true;
                    present.push(d);
                }
                None => missing.push(tag),
            }
        }
        let judged = (parity.tags.len() as u64, missing.len() as u64);
        p.members += judged.0;
        p.missing += judged.1;
        match missing.len() {
            0 => {
                self.stats.complete += 1;
                self.count_judged(judged);
                None
            }
            1 => {
                let rebuilt = parity.rebuild(missing[0], &present);
                self.count_judged(judged);
                match rebuilt {
                    Some(r) => {
                        self.stats.rebuilt += 1;
                        self.on_datagram(now, source, &r);
                        Some(r)
                    }
                    None => {
                        self.stats.unrepairable += 1;
                        None
                    }
                }
            }
            _ => {
                self.stats.unrepairable += 1;
                self.count_judged(judged);
                None
            }
        }
    }

    fn count_judged(&mut self, (members, missing): (u64, u64)) {
        self.stats.members += members;
        self.stats.missing += missing;
    }

    fn peer(&mut self, now: Instant, source: SocketAddr) -> &mut DecPeer {
        if !self.peers.contains_key(&source) && self.peers.len() >= self.cfg.max_peers {
            if let Some(oldest) = self
                .peers
                .iter()
                .min_by_key(|(_, p)| p.last)
                .map(|(a, _)| *a)
            {
                self.peers.remove(&oldest);
            }
        }
        self.peers.entry(source).or_insert_with(|| DecPeer {
            recent: VecDeque::new(),
            last: now,
            keeping_since: None,
            parity_at: None,
            members: 0,
            missing: 0,
        })
    }

    /// The members of `source`'s groups judged so far and how many of them were missing when
    /// their parity arrived: the loss rate of the path from `source` to here, measured on what
    /// it protects. `(0, 0)` for a peer not tracked (its counts restart if it is tracked again).
    pub fn seen_loss(&self, source: SocketAddr) -> (u64, u64) {
        self.peers
            .get(&source)
            .map_or((0, 0), |p| (p.members, p.missing))
    }

    /// Peers tracked.
    pub fn tracked(&self) -> usize {
        self.peers.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn addr(port: u16) -> SocketAddr {
        SocketAddr::from(([10, 0, 0, 1], port))
    }

    /// A 1-RTT-looking datagram (fixed bit set, form bit clear) of pseudo-random bytes, as
    /// encrypted datagrams are.
    fn dgram(len: usize, seed: u8) -> Vec<u8> {
        let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ (u64::from(seed) << 32) ^ len as u64;
        let mut d: Vec<u8> = (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 24) as u8
            })
            .collect();
        d[0] = 0x40 | (seed & 0x3f);
        d
    }

    /// A decoder that has had a parity from `peer` (so it keeps that peer's datagrams).
    fn primed(cfg: FecConfig, now: Instant, peers: &[SocketAddr]) -> Decoder {
        let mut dec = Decoder::new(cfg);
        let hello = Parity::of([&dgram(50, 0xee)[..]]).encode();
        for p in peers {
            dec.on_parity(now, *p, &hello);
        }
        dec
    }

    proptest! {
        #[test]
        fn parity_round_trips(
            lens in proptest::collection::vec(3usize..1500, 1..MAX_GROUP),
            seed in any::<u8>(),
        ) {
            let members: Vec<Vec<u8>> =
                lens.iter().enumerate().map(|(i, &l)| dgram(l, seed ^ i as u8)).collect();
            let p = Parity::of(members.iter().map(|m| &m[..]));
            let wire = p.encode();
            prop_assert_eq!(wire.len(), p.encoded_len());
            prop_assert_eq!(Parity::decode(&wire), Ok(p.clone()));
            prop_assert_eq!(
                wire.len(),
                lens.iter().max().unwrap() + TAG_BYTES * lens.len() + 2
            );
        }

        #[test]
        fn any_one_missing_member_is_rebuilt(
            lens in proptest::collection::vec(3usize..1500, 1..=DEFAULT_GROUP),
            pick in any::<prop::sample::Index>(),
            seed in any::<u8>(),
        ) {
            let members: Vec<Vec<u8>> =
                lens.iter().enumerate().map(|(i, &l)| dgram(l, seed ^ i as u8)).collect();
            let p = Parity::decode(&Parity::of(members.iter().map(|m| &m[..])).encode()).unwrap();
            let lost = pick.index(members.len());
            let present: Vec<&[u8]> = members
                .iter()
                .enumerate()
                .filter(|(i, _)| *i != lost)
                .map(|(_, m)| &m[..])
                .collect();
            prop_assert_eq!(p.rebuild(p.tags[lost], &present), Some(members[lost].clone()));
        }

        #[test]
        fn decode_never_panics(d in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = Parity::decode(&d);
            let mut dec = Decoder::new(FecConfig::default());
            let _ = dec.on_parity(Instant::now(), addr(1), &d);
        }
    }

    #[test]
    fn malformed_parities_are_named() {
        assert_eq!(Parity::decode(&[0x40, 1, 0, 0]), Err(ParityError::Type));
        assert_eq!(
            Parity::decode(&[PARITY_TYPE, 1, 0]),
            Err(ParityError::Truncated)
        );
        assert_eq!(
            Parity::decode(&[PARITY_TYPE, 0, 0, 0]),
            Err(ParityError::Truncated)
        );
        assert_eq!(
            Parity::decode(&[PARITY_TYPE, 2, 0, 0, 1, 2]),
            Err(ParityError::Truncated)
        );
        assert_eq!(
            Parity::decode(&[PARITY_TYPE, 33, 0, 0]),
            Err(ParityError::TooManyMembers)
        );
    }

    #[test]
    fn long_headers_and_parities_are_not_protected() {
        assert!(!is_protectable(&[0xc0, 0, 0, 1, 5]));
        assert!(!is_protectable(&[PARITY_TYPE, 1, 0, 0, 0]));
        assert!(is_protectable(&dgram(100, 1)));
        // A greased fixed bit (RFC 9287) is still a short header.
        assert!(is_protectable(&[0x01, 2, 3, 4]));
    }

    /// The sender's parities, fed to a receiver that lost one datagram of each group, give
    /// back exactly the lost datagrams.
    #[test]
    fn an_encoder_and_a_decoder_repair_one_loss_per_group() {
        let t0 = Instant::now();
        let mut enc = Encoder::new(FecConfig::default());
        let mut dec = primed(FecConfig::default(), t0, &[addr(9)]);
        let sent: Vec<Vec<u8>> = (0..24).map(|i| dgram(1200 + i, i as u8)).collect();
        let mut parities = Vec::new();
        for (i, d) in sent.iter().enumerate() {
            let now = t0 + Duration::from_micros(i as u64 * 100);
            parities.extend(enc.on_send(now, addr(9), None, [&d[..]], true));
            // Lose datagrams 3, 12 and 23: one per group of eight.
            if ![3, 12, 23].contains(&i) {
                dec.on_datagram(now, addr(9), d);
            }
        }
        assert_eq!(parities.len(), 3, "one parity per group of eight");
        let later = t0 + Duration::from_millis(10);
        let rebuilt: Vec<Vec<u8>> = parities
            .iter()
            .filter_map(|p| dec.on_parity(later, addr(9), &p.datagram))
            .collect();
        assert_eq!(
            rebuilt,
            vec![sent[3].clone(), sent[12].clone(), sent[23].clone()]
        );
        assert_eq!(enc.stats().protected, 24);
        assert_eq!(dec.stats().rebuilt, 3);
        // The loss the groups revealed: 3 of 24, for this peer and for the socket; the
        // priming parity only started the keeping and is not judged.
        assert_eq!(dec.seen_loss(addr(9)), (24, 3));
        assert_eq!((dec.stats().members, dec.stats().missing), (24, 3));
        assert_eq!(dec.seen_loss(addr(1)), (0, 0), "a peer not tracked");
    }

    #[test]
    fn two_losses_in_a_group_are_left_to_quic() {
        let t0 = Instant::now();
        let mut enc = Encoder::new(FecConfig::default());
        let mut dec = primed(FecConfig::default(), t0, &[addr(1)]);
        let mut parity = Vec::new();
        for i in 0..8u8 {
            let d = dgram(500, i);
            parity.extend(enc.on_send(t0, addr(1), None, [&d[..]], true));
            if i != 2 && i != 5 {
                dec.on_datagram(t0, addr(1), &d);
            }
        }
        assert_eq!(dec.on_parity(t0, addr(1), &parity[0].datagram), None);
        assert_eq!(dec.stats().unrepairable, 1);
        assert_eq!(dec.seen_loss(addr(1)), (8, 2));
    }

    #[test]
    fn a_flight_tail_gets_its_parity_after_the_flush_silence() {
        let t0 = Instant::now();
        let mut enc = Encoder::new(FecConfig::default());
        let (a, b, c) = (dgram(400, 1), dgram(900, 2), dgram(60, 3));
        assert!(enc
            .on_send(t0, addr(1), None, [&a[..], &b[..], &c[..]], true)
            .is_empty());
        assert_eq!(enc.poll_timeout(), Some(t0 + Duration::from_millis(10)));
        assert!(enc.poll_flush(t0 + Duration::from_millis(1)).is_empty());
        let out = enc.poll_flush(t0 + Duration::from_millis(10));
        assert_eq!(out.len(), 1);
        let p = Parity::decode(&out[0].datagram).unwrap();
        assert_eq!(p.tags.len(), 3);
        assert_eq!(p.rebuild(p.tags[1], &[&a, &c]), Some(b.clone()));
        assert_eq!(enc.poll_timeout(), None);
        // A lone request is its own group: the parity is a copy of it, in parity form.
        assert!(enc.on_send(t0, addr(2), None, [&a[..]], true).is_empty());
        let lone = enc.poll_flush(t0 + Duration::from_secs(1));
        let p = Parity::decode(&lone[0].datagram).unwrap();
        assert_eq!(p.rebuild(p.tags[0], &[]), Some(a));
    }

    #[test]
    fn an_unprotected_send_closes_the_group_and_joins_none() {
        let t0 = Instant::now();
        let mut enc = Encoder::new(FecConfig::default());
        let (a, bulk) = (dgram(300, 1), dgram(1452, 2));
        assert!(enc.on_send(t0, addr(1), None, [&a[..]], true).is_empty());
        let out = enc.on_send(t0, addr(1), None, [&bulk[..]], false);
        assert_eq!(out.len(), 1, "the partial group closes");
        assert_eq!(Parity::decode(&out[0].datagram).unwrap().tags.len(), 1);
        for _ in 0..100 {
            assert!(enc
                .on_send(t0, addr(1), None, [&bulk[..]], false)
                .is_empty());
        }
        assert_eq!(enc.poll_timeout(), None);
        assert_eq!(enc.stats().protected, 1);
    }

    #[test]
    fn parity_stays_within_the_bucket_and_the_datagram_limit() {
        let t0 = Instant::now();
        let cfg = FecConfig {
            group: 1,
            floor_bytes_per_s: 1000,
            bucket_bytes: 10_000,
            ..FecConfig::default()
        };
        let mut enc = Encoder::new(cfg);
        let d = dgram(1000, 1);
        let mut bytes = 0;
        for i in 0..1000u64 {
            let now = t0 + Duration::from_millis(i);
            for o in enc.on_send(now, addr(1), None, [&d[..]], true) {
                bytes += o.datagram.len() as u64;
            }
        }
        // One second: 10 000 at start, 1000 from the floor, a quarter of 1 000 000 sent.
        assert!(bytes <= 10_000 + 1000 + 250_000, "{bytes}");
        assert!(enc.stats().unpaid > 0);
        // A full-size member on a 1452-byte limit: its parity would not fit.
        let mut small = Encoder::new(FecConfig {
            max_datagram: 1452,
            ..FecConfig::default()
        });
        let full = dgram(1452, 7);
        assert!(small
            .on_send(t0, addr(1), None, [&full[..]], true)
            .is_empty());
        assert!(small.poll_flush(t0 + Duration::from_secs(1)).is_empty());
        assert_eq!(small.stats().oversize, 1);
    }

    #[test]
    fn kept_datagrams_and_peers_are_bounded() {
        let t0 = Instant::now();
        let cfg = FecConfig {
            max_peers: 4,
            window: 8,
            ..FecConfig::default()
        };
        let ports: Vec<SocketAddr> = (0..10).map(addr).collect();
        let mut dec = primed(cfg, t0, &ports);
        for port in 0..10u16 {
            for i in 0..20u8 {
                dec.on_datagram(t0, addr(port), &dgram(100, i));
            }
        }
        assert_eq!(dec.tracked(), 4);
        assert!(dec.peers.values().all(|p| p.recent.len() == 8));
        // Datagrams older than `max_age` do not serve a repair (the peer still counts as
        // sending parity: its last was within `listen`).
        let members: Vec<Vec<u8>> = (0..2).map(|i| dgram(200, 100 + i)).collect();
        dec.on_datagram(t0, addr(9), &members[0]);
        let p = Parity::of(members.iter().map(|m| &m[..])).encode();
        let later = t0 + DEFAULT_MAX_AGE + Duration::from_millis(100);
        assert!(later < t0 + DEFAULT_LISTEN);
        assert_eq!(dec.on_parity(later, addr(9), &p), None);
        assert_eq!(dec.stats().unrepairable, 1);
    }

    #[test]
    fn a_peer_that_sends_no_parity_costs_no_copies() {
        let t0 = Instant::now();
        let mut dec = Decoder::new(FecConfig::default());
        for i in 0..100u8 {
            dec.on_datagram(t0, addr(1), &dgram(1400, i));
        }
        assert_eq!(dec.tracked(), 0);
        // After its parity stops for longer than `listen`, nothing more is kept.
        let mut dec = primed(FecConfig::default(), t0, &[addr(1)]);
        dec.on_datagram(t0, addr(1), &dgram(1400, 1));
        assert_eq!(dec.peers[&addr(1)].recent.len(), 1);
        dec.on_datagram(t0 + DEFAULT_LISTEN * 2, addr(1), &dgram(1400, 2));
        assert!(dec.peers[&addr(1)].recent.is_empty());
    }

    /// One group of `n` datagrams (contents from `seed`) sent to `addr(1)` at `at`, with member
    /// `lose` (if there is one) not delivered
    /// (`expect` as the receiving side says); the decoder's answer to the group's parity.
    fn flight(
        enc: &mut Encoder,
        dec: &mut Decoder,
        at: Instant,
        (n, seed): (u8, u8),
        lose: u8,
        expect: bool,
    ) -> (Vec<u8>, Option<Vec<u8>>) {
        let members: Vec<Vec<u8>> = (0..n).map(|i| dgram(300 + i as usize, seed ^ i)).collect();
        for (i, m) in members.iter().enumerate() {
            assert!(enc.on_send(at, addr(1), None, [&m[..]], true).is_empty());
            if i as u8 != lose {
                dec.on_datagram_expecting(at, addr(1), m, expect);
            }
        }
        let flush = at + MAX_FLUSH;
        let parity = enc.poll_flush(flush);
        assert_eq!(parity.len(), 1, "the flight's tail parity");
        let got = dec.on_parity(flush, addr(1), &parity[0].datagram);
        (members.get(lose as usize).cloned().unwrap_or_default(), got)
    }

    /// After a silence longer than `listen` the first group of the next flight is lost to
    /// repair, unless the receiver expects the peer's parity (its path is judged lossy) and
    /// so kept the datagrams without a break.
    #[test]
    fn a_receiver_that_expects_parity_repairs_the_first_group_after_a_pause() {
        let t0 = Instant::now();
        for expect in [false, true] {
            let mut enc = Encoder::new(FecConfig::default());
            let mut dec = Decoder::new(FecConfig::default());
            // A first flight starts the keeping (its parity is the peer's first) ...
            let (_, first) = flight(&mut enc, &mut dec, t0, (3, 0x10), 9, expect);
            assert_eq!(first, None);
            // ... the next one, soon after, is repaired either way.
            let soon = t0 + Duration::from_millis(100);
            let (lost, got) = flight(&mut enc, &mut dec, soon, (3, 0x20), 1, expect);
            assert_eq!(got, Some(lost));
            // After the pause only the expecting receiver still holds the members.
            let late = soon + DEFAULT_LISTEN * 3;
            let (lost, got) = flight(&mut enc, &mut dec, late, (3, 0x30), 0, expect);
            assert_eq!(got, expect.then_some(lost), "expect = {expect}");
        }
    }

    /// Kept by expectation from a datagram on, a peer's groups are judged only from the one
    /// after its next parity: members of that first group may have arrived before the keeping.
    #[test]
    fn keeping_started_by_a_datagram_judges_from_the_next_group() {
        let t0 = Instant::now();
        let mut enc = Encoder::new(FecConfig::default());
        let mut dec = Decoder::new(FecConfig::default());
        let (_, got) = flight(&mut enc, &mut dec, t0, (4, 0x40), 2, true);
        assert_eq!(got, None);
        assert_eq!(dec.seen_loss(addr(1)), (0, 0), "not judged");
        let (lost, got) = flight(
            &mut enc,
            &mut dec,
            t0 + Duration::from_millis(50),
            (4, 0x50),
            2,
            true,
        );
        assert_eq!(got, Some(lost));
        assert_eq!(dec.seen_loss(addr(1)), (4, 1));
        // A peer never registered with expectation is not tracked by its datagrams alone.
        dec.on_datagram_expecting(t0, addr(2), &dgram(300, 1), false);
        assert_eq!(dec.tracked(), 1);
    }

    #[test]
    fn the_flush_follows_the_round_trip() {
        let f = |ms| FecConfig::for_rtt(Duration::from_millis(ms)).flush;
        assert_eq!(f(200), Duration::from_millis(10));
        assert_eq!(f(10), MIN_FLUSH);
        assert_eq!(f(600), MAX_FLUSH);
        assert!(FecConfig::default().validate().is_ok());
        assert!(FecConfig {
            group: 0,
            ..FecConfig::default()
        }
        .validate()
        .is_err());
        assert!(FecConfig {
            group: MAX_GROUP + 1,
            ..FecConfig::default()
        }
        .validate()
        .is_err());
    }
}
