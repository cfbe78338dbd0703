//! Several remote proxies: one [`Pool`] per remote, each stream opened on the remote with the
//! fewest outstanding bytes among those with a connection up, failing over to the next.
//!
//! Choice: remotes with at least one pool connection up come first, ordered by outstanding
//! bytes (queued in the process + kernel send queue, summed over the pool's connections, from
//! [`Pool::load`]) counted in units of [`LOAD_QUANTUM`], then by open streams, then by a
//! rotating index so that idle remotes share new streams evenly. The quantum keeps a request
//! head that waits only for the peer's delayed ACK (its reply may come back on another
//! connection, so nothing piggybacks the ACK) from steering every new stream to the other
//! remotes for the 40 ms of the delayed-ACK timer. A remote whose open fails (no connection up, draining, every stream slot
//! taken) is skipped and the next is tried; remotes with nothing up are tried last, so the error
//! names every remote. Only when every remote that is up is at its stream limit does the open
//! wait (bounded, see [`pool::PoolConfig::open_wait`]) for a slot, on the first of them in that
//! order.
//! Health changes (a remote losing its last connection or getting one back) are logged.
//!
//! It does NOT move a stream between remotes once opened (an idempotent request whose stream
//! failed retryably is sent again by [`crate::client`], and then lands on a healthy remote), and
//! it does NOT implement the pool.

use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use bytes::Bytes;
use pool::{ConnStats, MuxStream, Pool, PoolError, PoolLoad};

use crate::transport::{FarFailure, OpenError, StreamKind, Transport};

/// Outstanding bytes below this much count as equal when remotes are compared: a few request
/// heads unacknowledged in the kernel say nothing about load, a window's worth of upload does.
pub const LOAD_QUANTUM: u64 = 16 * 1024;

/// How often the health of each remote is checked for the log.
pub const DEFAULT_HEALTH_LOG_INTERVAL: Duration = Duration::from_secs(1);

/// One remote proxy and its pool.
#[derive(Debug)]
pub struct Remote {
    /// `host:port` as configured.
    pub name: String,
    /// Its pool.
    pub pool: Pool,
}

#[derive(Debug)]
struct Inner {
    remotes: Vec<Remote>,
    /// Rotates the tie-break between equally loaded remotes.
    next: AtomicUsize,
}

/// The pools of every configured remote, as one [`Transport`]. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Remotes {
    inner: Arc<Inner>,
}

impl Remotes {
    /// Groups already started pools (at least one); logs health changes while any handle lives
    /// (needs a tokio runtime).
    ///
    /// # Panics
    /// If `remotes` is empty.
    pub fn new(remotes: Vec<Remote>) -> Remotes {
        assert!(!remotes.is_empty(), "at least one remote");
        let inner = Arc::new(Inner {
            remotes,
            next: AtomicUsize::new(0),
        });
        tokio::spawn(log_health(
            Arc::downgrade(&inner),
            DEFAULT_HEALTH_LOG_INTERVAL,
        ));
        Remotes { inner }
    }

    /// The remotes, in configuration order.
    pub fn remotes(&self) -> &[Remote] {
        &self.inner.remotes
    }

    /// Indices of the remotes in the order a new stream tries them.
    pub fn order(&self) -> Vec<usize> {
        let loads: Vec<PoolLoad> = self.inner.remotes.iter().map(|r| r.pool.load()).collect();
        let start = self.inner.next.fetch_add(1, Ordering::Relaxed);
        order(&loads, start)
    }

    /// Waits until some remote has a connection up (true) or every remote's `timeout` passed
    /// without one (false).
    pub async fn ready(&self, timeout: Duration) -> bool {
        use futures_util::StreamExt;
        // The first remote up is enough to serve: a remote that is down does not hold up
        // the start for its whole timeout.
        let mut pending: futures_util::stream::FuturesUnordered<_> = self
            .inner
            .remotes
            .iter()
            .map(|r| r.pool.ready(timeout))
            .collect();
        while let Some(up) = pending.next().await {
            if up {
                return true;
            }
        }
        false
    }

    /// Per-connection health of every pool, concatenated (the peer address says which remote).
    pub fn stats(&self) -> Vec<ConnStats> {
        self.inner
            .remotes
            .iter()
            .flat_map(|r| r.pool.stats())
            .collect()
    }

    /// Per-connection health by remote.
    pub fn remote_stats(&self) -> Vec<(String, Vec<ConnStats>)> {
        self.inner
            .remotes
            .iter()
            .map(|r| (r.name.clone(), r.pool.stats()))
            .collect()
    }

    /// Closes every pool (see [`Pool::close`]), all at once.
    pub async fn close(&self, grace: Duration) {
        futures_util::future::join_all(self.inner.remotes.iter().map(|r| r.pool.close(grace)))
            .await;
    }
}

/// The order in which remotes of loads `loads` are tried: those with a connection up by
/// (outstanding bytes in units of [`LOAD_QUANTUM`], streams, distance from `start`), then the
/// others.
pub fn order(loads: &[PoolLoad], start: usize) -> Vec<usize> {
    let n = loads.len();
    let mut idx: Vec<usize> = (0..n).collect();
    idx.sort_by_key(|&i| {
        let l = loads[i];
        (
            l.up == 0,
            l.outstanding / LOAD_QUANTUM,
            l.streams,
            (i + n - start % n.max(1)) % n.max(1),
        )
    });
    idx
}

impl Transport for Remotes {
    type Stream = MuxStream;

    async fn open_aged(
        &self,
        kind: StreamKind,
        target: &str,
        first: Bytes,
        age: Duration,
    ) -> Result<MuxStream, OpenError> {
        let remotes = &self.inner.remotes;
        if remotes.len() == 1 {
            return Transport::open_aged(&remotes[0].pool, kind, target, first, age).await;
        }
        let start = std::time::Instant::now();
        // First pass: no waiting, so a remote with a free stream slot is used at once even if
        // a less loaded one is at its stream limit.
        let (mux_kind, label) = (kind.mux(), kind.label());
        let mut reasons = Vec::new();
        let mut busy = None;
        for i in self.order() {
            let r = &remotes[i];
            match r
                .pool
                .try_open_aged(mux_kind, target, first.clone(), age)
                .await
            {
                Ok(s) => {
                    app::metrics::stream_opened(label);
                    return Ok(s);
                }
                Err(PoolError::StreamLimit { .. }) => {
                    busy.get_or_insert(i);
                }
                Err(e) => reasons.push(format!("{}: {e}", r.name)),
            }
        }
        // Every remote that is up is at its stream limit: wait (bounded) on the best of them.
        if let Some(i) = busy {
            let r = &remotes[i];
            let age = age + start.elapsed();
            return match Transport::open_aged(&r.pool, kind, target, first, age).await {
                Ok(s) => Ok(s),
                Err(e) => {
                    reasons.push(format!("{}: {}", r.name, e.reason));
                    Err(OpenError {
                        cause: e.cause,
                        reason: reasons.join("; "),
                    })
                }
            };
        }
        Err(OpenError::unavailable(reasons.join("; ")))
    }

    fn failure(&self, err: &io::Error) -> Option<FarFailure> {
        Transport::failure(&self.inner.remotes[0].pool, err)
    }
}

/// Logs each remote's health when it changes: up (with its connection count), or down.
async fn log_health(inner: Weak<Inner>, every: Duration) {
    // Starts as "down" without a log line: the start-up log says whether the pool came up.
    let mut last: Vec<usize> = Vec::new();
    loop {
        {
            let Some(inner) = inner.upgrade() else { return };
            last.resize(inner.remotes.len(), 0);
            for (r, prev) in inner.remotes.iter().zip(last.iter_mut()) {
                let up = r.pool.load().up;
                match (*prev, up) {
                    (p, u) if (p == 0) == (u == 0) => {}
                    (_, 0) => {
                        tracing::warn!(remote = %r.name, "remote down: no pool connection up; streams go to the other remotes")
                    }
                    (_, u) => {
                        tracing::info!(remote = %r.name, connections_up = u, "remote up")
                    }
                }
                *prev = up;
            }
        }
        tokio::time::sleep(every).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(up: usize, outstanding: u64, streams: usize) -> PoolLoad {
        PoolLoad {
            up,
            outstanding,
            streams,
        }
    }

    #[test]
    fn least_outstanding_first_down_last() {
        let loads = [load(2, 500_000, 1), load(0, 0, 0), load(1, 100, 9)];
        assert_eq!(order(&loads, 0), vec![2, 0, 1]);
        // Streams break ties in outstanding bytes.
        let loads = [load(2, 0, 3), load(2, 0, 1)];
        assert_eq!(order(&loads, 0), vec![1, 0]);
    }

    #[test]
    fn idle_remotes_take_turns() {
        let loads = [load(1, 0, 0), load(1, 0, 0), load(1, 0, 0)];
        let firsts: Vec<usize> = (0..6).map(|s| order(&loads, s)[0]).collect();
        assert_eq!(firsts, vec![0, 1, 2, 0, 1, 2]);
        // All down: every remote is still tried, so the error names them all.
        let loads = [load(0, 0, 0), load(0, 0, 0)];
        assert_eq!(order(&loads, 1).len(), 2);
    }

    #[test]
    fn a_request_head_awaiting_a_delayed_ack_does_not_count_as_load() {
        // One remote's connection still holds an 83-byte request head the peer has not
        // acknowledged yet: the remotes still take turns.
        let loads = [load(2, 83, 0), load(2, 0, 0)];
        let firsts: Vec<usize> = (0..4).map(|s| order(&loads, s)[0]).collect();
        assert_eq!(firsts, vec![0, 1, 0, 1]);
        // A window's worth of upload does count.
        let loads = [load(2, 4 * LOAD_QUANTUM, 0), load(2, 0, 0)];
        assert_eq!(order(&loads, 0)[0], 1);
    }
}
