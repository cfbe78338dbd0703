//! Admission of pool connections that have not yet proved who they are.
//!
//! Until its TLS (or QUIC) handshake and HELLO complete, a connection to the remote is from an
//! unknown peer. The gate bounds how many such connections are in their handshake at once, in
//! total and from one source address, so that a peer that opens connections and never finishes
//! them can neither take the slots of the edges' authenticated connections
//! (`ServerConfig::max_connections` counts only those) nor keep every other source from
//! handshaking. A [`Permit`] is held from accept until the HELLO has been read, or the
//! connection failed; dropping it frees the slot.
//!
//! It does not rate-limit, and it does not know addresses of edges: a firewall that admits only
//! the edges' addresses to the pool port remains the first defence (deploy/README.md).

use std::collections::HashMap;
use std::fmt;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

/// Counts of connections in their handshake, and of those turned away.
#[derive(Debug, Default)]
struct State {
    total: usize,
    by_source: HashMap<IpAddr, usize>,
    refused: AdmissionStats,
}

/// What a remote's admission of pool connections looks like now ([`crate::Server::admission`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AdmissionStats {
    /// Connections in their handshake (TLS or QUIC, then HELLO) now.
    pub handshakes_pending: usize,
    /// Connections closed since start because `max_handshakes` were in their handshake.
    pub refused_handshakes: u64,
    /// Connections closed since start because their source address had
    /// `max_handshakes_per_source` in their handshake.
    pub refused_per_source: u64,
    /// Connections closed since start because `max_connections` authenticated ones were up.
    pub refused_connections: u64,
}

/// Limits on connections in their handshake (see the module doc).
#[derive(Debug, Clone)]
pub(crate) struct HandshakeGate {
    state: Arc<Mutex<State>>,
    max_total: usize,
    max_per_source: usize,
}

/// Why the gate turned a connection away.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// `max_handshakes` connections were already in their handshake.
    Total(usize),
    /// `max_handshakes_per_source` connections from this address were.
    Source(usize),
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::Total(n) => write!(f, "{n} connections already in their handshake"),
            Refusal::Source(n) => write!(
                f,
                "{n} connections from this address already in their handshake"
            ),
        }
    }
}

/// One connection's place in the gate; freed on drop.
#[derive(Debug)]
pub(crate) struct Permit {
    state: Arc<Mutex<State>>,
    source: IpAddr,
}

impl HandshakeGate {
    /// A gate admitting at most `max_total` handshakes at once, `max_per_source` of them from
    /// one address (both at least 1, checked by the server's configuration).
    pub(crate) fn new(max_total: usize, max_per_source: usize) -> HandshakeGate {
        HandshakeGate {
            state: Arc::default(),
            max_total,
            max_per_source,
        }
    }

    /// Admits a connection from `source`, or says which limit it hit. An IPv4 address mapped
    /// into IPv6 counts as the IPv4 address.
    pub(crate) fn try_enter(&self, source: IpAddr) -> Result<Permit, Refusal> {
        let source = source.to_canonical();
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if st.total >= self.max_total {
            st.refused.refused_handshakes += 1;
            return Err(Refusal::Total(self.max_total));
        }
        let n = st.by_source.entry(source).or_insert(0);
        if *n >= self.max_per_source {
            st.refused.refused_per_source += 1;
            return Err(Refusal::Source(self.max_per_source));
        }
        *n += 1;
        st.total += 1;
        Ok(Permit {
            state: self.state.clone(),
            source,
        })
    }

    /// Connections in their handshake now.
    pub(crate) fn pending(&self) -> usize {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).total
    }

    /// Counts a connection closed because the authenticated connections were at their limit.
    pub(crate) fn refused_connection(&self) {
        self.state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .refused
            .refused_connections += 1;
    }

    /// Counts a connection refused after its HELLO because `max` authenticated ones were up,
    /// and says so as the error its driver ends with.
    pub(crate) fn over_connection_limit(&self, max: usize) -> std::io::Error {
        self.refused_connection();
        std::io::Error::new(
            std::io::ErrorKind::ConnectionRefused,
            format!("too many connections ({max} authenticated already)"),
        )
    }

    /// Pending handshakes and refusals so far.
    pub(crate) fn stats(&self) -> AdmissionStats {
        let st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        AdmissionStats {
            handshakes_pending: st.total,
            ..st.refused
        }
    }

    /// Whether at least half the slots are taken: the QUIC server then asks sources whose
    /// address it has not validated to prove it with a Retry before they take a slot.
    pub(crate) fn busy(&self) -> bool {
        self.pending() * 2 >= self.max_total
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        st.total -= 1;
        if let Some(n) = st.by_source.get_mut(&self.source) {
            *n -= 1;
            if *n == 0 {
                st.by_source.remove(&self.source);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn one_source_cannot_take_every_slot() {
        let gate = HandshakeGate::new(4, 2);
        let a1 = gate.try_enter(ip("192.0.2.1")).unwrap();
        let _a2 = gate.try_enter(ip("192.0.2.1")).unwrap();
        assert_eq!(
            gate.try_enter(ip("192.0.2.1")).unwrap_err(),
            Refusal::Source(2)
        );
        // Another source still gets in.
        let _b1 = gate.try_enter(ip("192.0.2.2")).unwrap();
        assert_eq!(gate.pending(), 3);
        // A finished handshake frees its source's slot.
        drop(a1);
        let _a3 = gate.try_enter(ip("192.0.2.1")).unwrap();
        gate.refused_connection();
        assert_eq!(
            gate.stats(),
            AdmissionStats {
                handshakes_pending: 3,
                refused_handshakes: 0,
                refused_per_source: 1,
                refused_connections: 1,
            }
        );
    }

    #[test]
    fn the_total_bounds_all_sources_together() {
        let gate = HandshakeGate::new(3, 2);
        let permits: Vec<_> = ["192.0.2.1", "192.0.2.2", "192.0.2.3"]
            .iter()
            .map(|s| gate.try_enter(ip(s)).unwrap())
            .collect();
        assert!(gate.busy());
        assert_eq!(
            gate.try_enter(ip("192.0.2.4")).unwrap_err(),
            Refusal::Total(3)
        );
        assert_eq!(gate.stats().refused_handshakes, 1);
        drop(permits);
        assert_eq!(gate.pending(), 0);
        assert!(!gate.busy());
        assert!(
            gate.state.lock().unwrap().by_source.is_empty(),
            "no entry left behind"
        );
        gate.try_enter(ip("192.0.2.4")).unwrap();
    }

    #[test]
    fn a_mapped_ipv4_address_is_the_same_source() {
        let gate = HandshakeGate::new(8, 1);
        let _p = gate.try_enter(ip("192.0.2.1")).unwrap();
        assert_eq!(
            gate.try_enter(ip("::ffff:192.0.2.1")).unwrap_err(),
            Refusal::Source(1)
        );
        gate.try_enter(ip("2001:db8::1")).unwrap();
    }
}
