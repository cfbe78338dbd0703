//! The edge pool under `carrier = "auto"`: QUIC when UDP gets through, TCP+TLS otherwise,
//! for one remote.
//!
//! What it does: keeps a TCP+TLS pool warm (so a failover costs no handshake on the long
//! link), dials a QUIC pool and lets [`crate::select::Selector`] decide where new streams go.
//! A driver task samples the QUIC connections' acknowledgement progress (new RTT samples)
//! every few hundred milliseconds (the keep-alive PINGs make a sound idle path answer every
//! [`SelectorConfig::keep_alive`]), feeds the selector, and carries out its actions: a QUIC
//! pool that fails its handshake or stalls is closed (its streams end with an error naming
//! the reason, retryable when nothing of the reply arrived) and dialed again after the
//! selector's back-off. Every switch is logged and counted ([`AutoPool::switches`]).
//!
//! What it does NOT do: move a stream between carriers (streams in flight on TCP when QUIC
//! returns finish on TCP), or decide anything itself (the selector does).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use bytes::Bytes;
use mux::Kind;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use crate::config::PoolConfig;
use crate::quic::{QuicOptions, QuicPool};
use crate::select::{Action, CarrierKind, Selector, SelectorConfig};
use crate::stats::{ConnStats, PoolLoad};
use crate::stream::MuxStream;
use crate::tls::TlsClient;
use crate::{Pool, PoolError};

/// Shortest interval between two delivery samples.
const MIN_SAMPLE: Duration = Duration::from_millis(50);
/// Longest interval between two delivery samples.
const MAX_SAMPLE: Duration = Duration::from_millis(250);

/// Switch counts by (from, to).
pub type Switches = Vec<(CarrierKind, CarrierKind, u64)>;

struct State {
    selector: Selector,
    quic: Option<QuicPool>,
    switches: HashMap<(CarrierKind, CarrierKind), u64>,
}

struct Inner {
    remote: String,
    tcp: Pool,
    state: Mutex<State>,
    closed: AtomicBool,
    close_notify: Notify,
    task: Mutex<Option<JoinHandle<()>>>,
}

impl Inner {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Stops the driver when the last [`AutoPool`] handle goes.
struct Guard(Arc<Inner>);

impl Drop for Guard {
    fn drop(&mut self) {
        self.0.closed.store(true, Ordering::Release);
        self.0.close_notify.notify_waiters();
        if let Some(q) = self.0.state().quic.take() {
            q.abandon("edge pool dropped");
        }
    }
}

/// The edge pool of one remote under `carrier = "auto"`; cheap to clone.
#[derive(Clone)]
pub(crate) struct AutoPool {
    inner: Arc<Inner>,
    _guard: Arc<Guard>,
}

/// What the driver needs to dial QUIC again.
struct Dial {
    cfg: PoolConfig,
    tls: Arc<TlsClient>,
    quic: QuicOptions,
}

impl AutoPool {
    /// Starts the warm TCP pool `tcp` (already started by the caller) and the QUIC side.
    pub(crate) fn start(
        cfg: PoolConfig,
        tcp: Pool,
        tls: Arc<TlsClient>,
        mut quic: QuicOptions,
    ) -> Result<AutoPool, PoolError> {
        quic.keep_alive = SelectorConfig::keep_alive(quic.initial_rtt, quic.keep_alive);
        quic.validate().map_err(PoolError::Config)?;
        let scfg = SelectorConfig::for_link(
            quic.initial_rtt,
            quic.keep_alive,
            quic.idle_timeout,
            cfg.socket.connect_timeout,
        );
        let now = tokio::time::Instant::now().into_std();
        let sample = (scfg.stall / 8).clamp(MIN_SAMPLE, MAX_SAMPLE);
        tracing::info!(
            remote = %cfg.remote,
            stall_ms = scfg.stall.as_millis() as u64,
            handshake_ms = scfg.handshake.as_millis() as u64,
            confirm_ms = scfg.confirm.as_millis() as u64,
            keep_alive_ms = quic.keep_alive.as_millis() as u64,
            "carrier auto: QUIC preferred, TCP+TLS kept warm as the fallback"
        );
        let inner = Arc::new(Inner {
            remote: cfg.remote.clone(),
            tcp,
            state: Mutex::new(State {
                selector: Selector::new(scfg, rand::random(), now),
                quic: None,
                // Both directions from the start, at 0: a carrier that never switched shows
                // that it could (and a metric built on them exists before the first switch).
                switches: HashMap::from([
                    ((CarrierKind::Quic, CarrierKind::Tcp), 0),
                    ((CarrierKind::Tcp, CarrierKind::Quic), 0),
                ]),
            }),
            closed: AtomicBool::new(false),
            close_notify: Notify::new(),
            task: Mutex::new(None),
        });
        let dial = Dial { cfg, tls, quic };
        let task = tokio::spawn(drive(Arc::downgrade(&inner), dial, sample));
        *inner.task.lock().unwrap_or_else(|p| p.into_inner()) = Some(task);
        Ok(AutoPool {
            _guard: Arc::new(Guard(inner.clone())),
            inner,
        })
    }

    /// The QUIC pool when new streams go to QUIC.
    fn quic_in_use(&self) -> Option<QuicPool> {
        let st = self.inner.state();
        match st.selector.carrier() {
            Some(CarrierKind::Quic) => st.quic.clone(),
            _ => None,
        }
    }

    /// Where new streams go now (TCP until the first choice).
    pub(crate) fn carrier(&self) -> CarrierKind {
        self.inner
            .state()
            .selector
            .carrier()
            .unwrap_or(CarrierKind::Tcp)
    }

    pub(crate) fn switches(&self) -> Switches {
        let mut v: Switches = self
            .inner
            .state()
            .switches
            .iter()
            .map(|(&(f, t), &n)| (f, t, n))
            .collect();
        v.sort_by_key(|&(f, t, _)| (f.name(), t.name()));
        v
    }

    pub(crate) async fn ready(&self, timeout: Duration) -> bool {
        let quic_up = async {
            loop {
                if self.quic_in_use().is_some() {
                    return;
                }
                tokio::time::sleep(MIN_SAMPLE).await;
            }
        };
        tokio::select! {
            r = Box::pin(self.inner.tcp.ready(timeout)) => r,
            r = tokio::time::timeout(timeout, quic_up) => r.is_ok(),
        }
    }

    pub(crate) async fn open(
        &self,
        kind: Kind,
        target: &str,
        first: Bytes,
        age: Duration,
    ) -> Result<MuxStream, PoolError> {
        if let Some(q) = self.quic_in_use() {
            match q.open(kind, target, first.clone(), age).await {
                Err(PoolError::Unavailable | PoolError::Draining) => {}
                r => return r,
            }
        }
        Box::pin(self.inner.tcp.open_aged(kind, target, first, age)).await
    }

    pub(crate) async fn try_open(
        &self,
        kind: Kind,
        target: &str,
        first: Bytes,
        age: Duration,
    ) -> Result<MuxStream, PoolError> {
        if let Some(q) = self.quic_in_use() {
            match q.try_open(kind, target, first.clone(), age).await {
                Err(PoolError::Unavailable | PoolError::Draining) => {}
                r => return r,
            }
        }
        Box::pin(self.inner.tcp.try_open_aged(kind, target, first, age)).await
    }

    pub(crate) fn open_waiting(&self) -> usize {
        match self.quic_in_use() {
            Some(q) => q.open_waiting(),
            None => self.inner.tcp.open_waiting(),
        }
    }

    pub(crate) fn stream_limit(&self) -> usize {
        match self.quic_in_use() {
            Some(q) => q.stream_limit(),
            None => self.inner.tcp.stream_limit(),
        }
    }

    /// Both carriers' connections: TCP's slots 0..N, then QUIC's (while a QUIC pool exists)
    /// numbered N..2N, so no two entries share a slot.
    pub(crate) fn stats(&self) -> Vec<ConnStats> {
        let mut v = self.inner.tcp.stats();
        let n = v.len();
        if let Some(q) = self.inner.state().quic.clone() {
            v.extend(q.stats().into_iter().map(|mut s| {
                s.slot = s.slot.map(|k| k + n);
                s
            }));
        }
        v
    }

    /// The load of the carrier new streams go to.
    pub(crate) fn load(&self) -> PoolLoad {
        match self.quic_in_use() {
            Some(q) => PoolLoad::from_stats(&q.stats()),
            None => self.inner.tcp.load(),
        }
    }

    pub(crate) fn session_id(&self) -> u64 {
        self.inner.tcp.session_id()
    }

    pub(crate) async fn close(&self, grace: Duration) {
        self.inner.closed.store(true, Ordering::Release);
        self.inner.close_notify.notify_waiters();
        let task = self
            .inner
            .task
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(t) = task {
            t.abort();
        }
        let quic = self.inner.state().quic.clone();
        match quic {
            Some(q) => {
                tokio::join!(q.close(grace), Box::pin(self.inner.tcp.close(grace)));
            }
            None => Box::pin(self.inner.tcp.close(grace)).await,
        }
    }
}

/// The driver: samples QUIC delivery, fires the selector's timers, carries out its actions.
async fn drive(inner: Weak<Inner>, dial: Dial, sample: Duration) {
    let mut prev = HashMap::new();
    let mut seen_up = false;
    loop {
        let Some(inner) = inner.upgrade() else { return };
        if inner.closed.load(Ordering::Acquire) {
            return;
        }
        let now = tokio::time::Instant::now().into_std();
        let wake = {
            let mut st = inner.state();
            let st = &mut *st;
            if let Some(q) = &st.quic {
                let (up, received) = q.delivery(&mut prev);
                if up > 0 && !seen_up {
                    seen_up = true;
                    st.selector.quic_ready(now);
                } else if up == 0 && seen_up {
                    st.selector
                        .quic_failed(now, "every QUIC connection was lost");
                } else if up > 0 {
                    st.selector.observe(now, received);
                }
            }
            st.selector.handle_timeout(now);
            while let Some(a) = st.selector.poll_action() {
                match a {
                    Action::StartQuic => {
                        prev.clear();
                        seen_up = false;
                        match QuicPool::start(&dial.cfg, dial.tls.clone(), dial.quic.clone()) {
                            Ok(q) => st.quic = Some(q),
                            Err(e) => st.selector.quic_failed(now, &e.to_string()),
                        }
                    }
                    Action::AbandonQuic { reason } => {
                        if let Some(q) = st.quic.take() {
                            tracing::warn!(remote = %inner.remote, %reason, "carrier auto: closing the QUIC connections");
                            q.abandon(&format!("carrier auto: {reason}"));
                        }
                    }
                    Action::Switched { from, to, reason } => match from {
                        Some(from) => {
                            *st.switches.entry((from, to)).or_default() += 1;
                            tracing::warn!(remote = %inner.remote, %from, %to, %reason, "carrier switch");
                        }
                        None => {
                            tracing::info!(remote = %inner.remote, carrier = %to, %reason, "carrier chosen")
                        }
                    },
                }
            }
            let next = st.selector.poll_timeout();
            let next = tokio::time::Instant::from_std(next);
            let tick = tokio::time::Instant::from_std(now) + sample;
            if st.quic.is_some() {
                next.min(tick)
            } else {
                next
            }
        };
        let stop = inner.close_notify.notified();
        tokio::pin!(stop);
        stop.as_mut().enable();
        if inner.closed.load(Ordering::Acquire) {
            return;
        }
        tokio::select! {
            _ = tokio::time::sleep_until(wake) => {}
            _ = stop => return,
        }
    }
}
