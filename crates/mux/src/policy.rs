//! Scheduling policies: which connection a stream direction is bound to
//! (PROTOCOL.md §5.1, DESIGN §2).

/// How a direction of a stream picks its connection when its first bytes are
/// ready to send.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Policy {
    /// Least outstanding bytes: bytes queued in the process for the connection
    /// plus the kernel's send queue (unsent + unacknowledged) reported by the
    /// driver. Ties go to fewer bound streams, then to the lower connection.
    #[default]
    LeastOutstanding,
    /// Each new direction goes to the next connection in turn (baseline).
    RoundRobin,
    /// The connection with the fewest bound streams (baseline).
    FewestStreams,
}

/// The load of one candidate connection, as the policies see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Load {
    /// Bytes queued in the process for the connection plus the kernel send queue.
    pub outstanding: u64,
    /// Streams with a direction bound to the connection.
    pub streams: u32,
}

impl Policy {
    /// Picks an index into `loads` (the usable connections, in a stable order);
    /// `None` if there are none. `cursor` is the round-robin position, advanced
    /// by `RoundRobin` only.
    pub fn choose(self, loads: &[Load], cursor: &mut usize) -> Option<usize> {
        if loads.is_empty() {
            return None;
        }
        match self {
            Policy::RoundRobin => {
                let i = *cursor % loads.len();
                *cursor = cursor.wrapping_add(1);
                Some(i)
            }
            Policy::LeastOutstanding => loads
                .iter()
                .enumerate()
                .min_by_key(|(i, l)| (l.outstanding, l.streams, *i))
                .map(|(i, _)| i),
            Policy::FewestStreams => loads
                .iter()
                .enumerate()
                .min_by_key(|(i, l)| (l.streams, l.outstanding, *i))
                .map(|(i, _)| i),
        }
    }
}

impl std::str::FromStr for Policy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "least-outstanding" | "least_outstanding" => Ok(Policy::LeastOutstanding),
            "round-robin" | "round_robin" => Ok(Policy::RoundRobin),
            "fewest-streams" | "fewest_streams" => Ok(Policy::FewestStreams),
            _ => Err(format!(
                "unknown policy {s:?} (expected least-outstanding, round-robin or fewest-streams)"
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn l(outstanding: u64, streams: u32) -> Load {
        Load {
            outstanding,
            streams,
        }
    }

    #[test]
    fn least_outstanding_prefers_fewer_bytes_then_fewer_streams() {
        let mut c = 0;
        let loads = [l(500, 1), l(100, 9), l(100, 2)];
        assert_eq!(Policy::LeastOutstanding.choose(&loads, &mut c), Some(2));
        assert_eq!(Policy::FewestStreams.choose(&loads, &mut c), Some(0));
        assert_eq!(Policy::LeastOutstanding.choose(&[], &mut c), None);
    }

    #[test]
    fn round_robin_cycles() {
        let mut c = 0;
        let loads = [l(0, 0); 3];
        let picks: Vec<_> = (0..4)
            .map(|_| Policy::RoundRobin.choose(&loads, &mut c).unwrap())
            .collect();
        assert_eq!(picks, [0, 1, 2, 0]);
    }

    #[test]
    fn parses_names() {
        assert_eq!("round-robin".parse(), Ok(Policy::RoundRobin));
        assert!("fastest".parse::<Policy>().is_err());
    }
}
