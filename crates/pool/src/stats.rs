//! Per-connection health for operators and metrics.

use std::net::SocketAddr;
use std::time::Duration;

use crate::shared::Inner;

/// Lifecycle of a pool connection as operators see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LaneState {
    /// Dialing.
    #[default]
    Connecting,
    /// Connected, waiting for the peer's HELLO.
    Handshake,
    /// Carrying streams.
    Up,
    /// Closing after a GOAWAY.
    Closing,
    /// Waiting before the next dial.
    Backoff,
}

/// Health of one pool connection.
#[derive(Debug, Clone, PartialEq)]
pub struct ConnStats {
    /// Connection id within its session (`None` for an edge slot with no live connection).
    pub id: Option<u64>,
    /// Pool session id (edge: ours; server: the edge's).
    pub session: u64,
    /// Edge slot index (0..N); `None` on the server.
    pub slot: Option<usize>,
    /// Lifecycle state.
    pub state: LaneState,
    /// Peer address.
    pub peer: Option<SocketAddr>,
    /// Our address.
    pub local: Option<SocketAddr>,
    /// Round-trip time measured by the last PING.
    pub rtt: Option<Duration>,
    /// Kernel view (`TCP_INFO`): rtt, cwnd, retransmits.
    pub tcp_info: Option<netsys::TcpInfo>,
    /// Bytes queued in the process for this connection.
    pub queued: u64,
    /// Kernel send queue (unsent + unacknowledged, `SIOCOUTQ`).
    pub kernel: u64,
    /// `queued + kernel`: what the least-outstanding policy compares.
    pub outstanding: u64,
    /// Streams with a direction bound to this connection.
    pub streams: u32,
    /// Mux connection credit the peer has used on this connection and we have not returned
    /// (bytes received for streams whose readers have not read them yet): at the
    /// connection window (256 MiB by default) the peer stops sending here. `None` over QUIC
    /// or with a peer without connection credit.
    pub credit_held: Option<u64>,
    /// Times this slot re-dialed after losing or failing a connection.
    pub reconnects: u64,
    /// QUIC path statistics (QUIC carrier only).
    pub quic: Option<crate::quic::QuicConnStats>,
}

impl ConnStats {
    /// A slot with no live connection.
    pub(crate) fn empty(session: u64) -> ConnStats {
        ConnStats {
            id: None,
            session,
            slot: None,
            state: LaneState::Connecting,
            peer: None,
            local: None,
            rtt: None,
            tcp_info: None,
            queued: 0,
            kernel: 0,
            outstanding: 0,
            streams: 0,
            credit_held: None,
            reconnects: 0,
            quic: None,
        }
    }
}

/// A cheap summary of a pool for choosing between several pools (no system calls: the kernel
/// send queues are the values the drivers last reported).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PoolLoad {
    /// Connections that completed HELLO and are not closing.
    pub up: usize,
    /// Sum over the up connections of queued + kernel send-queue bytes.
    pub outstanding: u64,
    /// Open streams.
    pub streams: usize,
}

impl PoolLoad {
    /// Sums per-connection stats (the QUIC pool keeps no session-wide counters).
    pub(crate) fn from_stats(stats: &[ConnStats]) -> PoolLoad {
        let mut l = PoolLoad::default();
        for c in stats.iter().filter(|c| c.state == LaneState::Up) {
            l.up += 1;
            l.outstanding += c.outstanding;
            l.streams += c.streams as usize;
        }
        l
    }
}

pub(crate) fn load(i: &Inner) -> PoolLoad {
    let mut l = PoolLoad {
        streams: i.session.stream_count(),
        ..PoolLoad::default()
    };
    for c in i.session.connections() {
        if c.state == mux::ConnState::Up {
            l.up += 1;
            l.outstanding += c.queued + c.kernel;
        }
    }
    l
}

pub(crate) fn collect(i: &Inner, out: &mut Vec<ConnStats>) {
    let session = i.session.session_id();
    let snaps = i.session.connections();
    let lane_stats = |c: mux::ConnId, slot: Option<usize>, reconnects: u64| {
        let lane = i.lanes.get(&c)?;
        let snap = snaps.iter().find(|s| s.id == c)?;
        let kernel = lane.probe.kernel_outstanding();
        Some(ConnStats {
            id: Some(c.0),
            session,
            slot,
            state: match snap.state {
                mux::ConnState::Handshake => LaneState::Handshake,
                mux::ConnState::Up => LaneState::Up,
                mux::ConnState::Closing => LaneState::Closing,
            },
            peer: lane.probe.peer_addr(),
            local: lane.probe.local_addr(),
            rtt: snap.rtt,
            tcp_info: lane.probe.tcp_info(),
            queued: snap.queued,
            kernel,
            outstanding: snap.queued + kernel,
            streams: snap.streams,
            credit_held: snap.credit_held,
            reconnects,
            quic: None,
        })
    };
    if i.slots.is_empty() {
        let mut ids: Vec<_> = i.lanes.keys().copied().collect();
        ids.sort();
        out.extend(ids.into_iter().filter_map(|c| lane_stats(c, None, 0)));
    } else {
        for (n, s) in i.slots.iter().enumerate() {
            let live = s.conn.and_then(|c| lane_stats(c, Some(n), s.reconnects));
            out.push(live.unwrap_or(ConnStats {
                id: None,
                session,
                slot: Some(n),
                state: s.state,
                peer: None,
                local: None,
                rtt: None,
                tcp_info: None,
                queued: 0,
                kernel: 0,
                outstanding: 0,
                streams: 0,
                credit_held: None,
                reconnects: s.reconnects,
                quic: None,
            }));
        }
    }
}
