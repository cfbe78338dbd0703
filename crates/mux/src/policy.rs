//! Scheduling policies: which connection a stream direction is bound to
//! (PROTOCOL.md §5.1, ARCHITECTURE.md §2).

/// How a direction of a stream picks its connection when its first bytes are
/// ready to send.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Policy {
    /// Least outstanding bytes: bytes queued in the process for the connection
    /// plus the kernel's send queue (unsent + unacknowledged) reported by the
    /// driver. Ties go to fewer bound streams, then to the lower connection.
    ///
    /// When the driver reports every candidate's congestion window, outstanding
    /// bytes are weighed against it: the connection with the most window left
    /// (window − outstanding) wins, so new bytes go where they can leave at once
    /// rather than onto a connection that has carried little and must grow its
    /// window over several round trips; when no connection has window left, the
    /// one with the fewest outstanding bytes per byte of window (the shortest
    /// drain) wins.
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
    /// Congestion window in bytes as last reported by the driver (TCP: cwnd × MSS
    /// from `TCP_INFO`); 0 if unknown.
    pub window: u64,
}

impl Load {
    /// Window left for new bytes now: `window − outstanding`, at least 0.
    fn free(&self) -> u64 {
        self.window.saturating_sub(self.outstanding)
    }

    /// Outstanding bytes per byte of window, in 1/1024 (the drain time in round trips × 1024).
    fn drain(&self) -> u64 {
        (u128::from(self.outstanding) * 1024 / u128::from(self.window.max(1))) as u64
    }
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
            Policy::LeastOutstanding if loads.iter().all(|l| l.window > 0) => loads
                .iter()
                .enumerate()
                .min_by_key(|(i, l)| {
                    (
                        std::cmp::Reverse(l.free()),
                        l.drain(),
                        l.outstanding,
                        l.streams,
                        *i,
                    )
                })
                .map(|(i, _)| i),
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
            window: 0,
        }
    }

    fn w(outstanding: u64, streams: u32, window: u64) -> Load {
        Load {
            outstanding,
            streams,
            window,
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
    fn least_outstanding_with_windows_prefers_the_most_window_left() {
        let mut c = 0;
        // A warm connection (1 MB window, 200 KB in flight) beats an idle cold one
        // (initial window of 10 segments): 800 KB can leave at once there.
        let loads = [w(0, 0, 14_480), w(200_000, 3, 1_000_000)];
        assert_eq!(Policy::LeastOutstanding.choose(&loads, &mut c), Some(1));
        // Once the warm one's window is used up, new bytes spill to the cold one.
        let loads = [w(0, 0, 14_480), w(1_200_000, 9, 1_000_000)];
        assert_eq!(Policy::LeastOutstanding.choose(&loads, &mut c), Some(0));
        // No window left anywhere: the shortest drain (outstanding ÷ window) wins,
        // not the fewest bytes.
        let loads = [w(100_000, 1, 50_000), w(1_500_000, 1, 1_000_000)];
        assert_eq!(Policy::LeastOutstanding.choose(&loads, &mut c), Some(1));
        // Equal windows and equal load: fewer streams, then the lower index.
        let loads = [w(0, 2, 64_000), w(0, 1, 64_000), w(0, 1, 64_000)];
        assert_eq!(Policy::LeastOutstanding.choose(&loads, &mut c), Some(1));
        // One window unknown: bytes alone decide, as without windows.
        let loads = [w(10, 0, 0), w(5, 0, 1_000_000)];
        assert_eq!(Policy::LeastOutstanding.choose(&loads, &mut c), Some(1));
        let loads = [w(5, 0, 0), w(10, 0, 1_000_000)];
        assert_eq!(Policy::LeastOutstanding.choose(&loads, &mut c), Some(0));
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
