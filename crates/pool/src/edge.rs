//! [`Pool`]: the edge side, N warm connections to one remote proxy.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use mux::{Kind, OpenError, Role, Session};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use crate::auto::{AutoPool, Switches};
use crate::backoff::Backoff;
use crate::carrier::{Dialer, TcpDialer};
use crate::config::PoolConfig;
use crate::driver::run_lane;
use crate::queue::{Attempt, OpenQueue};
use crate::quic::{QuicOptions, QuicPool};
use crate::select::CarrierKind;
use crate::shared::Shared;
use crate::stats::{collect, load, ConnStats, LaneState, PoolLoad};
use crate::stream::MuxStream;
use crate::tls::{TlsClient, TlsDialer};
use crate::PoolError;

/// Edge side: a pool of N warm carrier connections to one remote proxy. Cheap to clone.
#[derive(Clone)]
pub struct Pool {
    mode: Mode,
}

#[derive(Clone)]
enum Mode {
    /// The mux session over TCP (plain or TLS) carriers.
    Mux(MuxPool),
    /// QUIC connections, one QUIC stream per mux stream.
    Quic(QuicPool),
    /// `carrier = "auto"`: QUIC when it delivers, the TCP+TLS pool otherwise.
    Auto(AutoPool),
}

#[derive(Clone)]
struct MuxPool {
    shared: Arc<Shared>,
    ctl: Arc<Control>,
    /// Held by the `Pool` handles only (not by the slot tasks): when the last
    /// handle goes, the pool stops re-dialing and closes its connections.
    _guard: Arc<StopOnDrop>,
}

struct StopOnDrop {
    shared: Arc<Shared>,
    ctl: Arc<Control>,
}

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.ctl.stop();
        self.shared.op(|i| {
            i.shutting_down = true;
            i.notify_all_lanes();
        });
    }
}

impl Control {
    fn stop(&self) {
        self.closed.store(true, Ordering::Release);
        self.close_notify.notify_waiters();
    }
}

struct Control {
    /// Set once by `close`: slots stop re-dialing.
    closed: AtomicBool,
    /// Wakes slots sleeping in backoff when the pool closes.
    close_notify: Notify,
    tasks: Mutex<Vec<JoinHandle<()>>>,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool").finish_non_exhaustive()
    }
}

impl Pool {
    /// Spawns one task per connection slot (needs a tokio runtime); each dials
    /// now and re-dials with jittered exponential backoff until [`Pool::close`].
    ///
    /// # Panics
    /// If `cfg` fails [`PoolConfig::validate`]; use [`Pool::try_start`] to get the error instead.
    pub fn start(cfg: PoolConfig) -> Pool {
        match Pool::try_start(cfg) {
            Ok(p) => p,
            Err(e) => panic!("{e}"),
        }
    }

    /// Like [`Pool::start`], returning a configuration error instead of panicking.
    pub fn try_start(cfg: PoolConfig) -> Result<Pool, PoolError> {
        let dialer = Arc::new(TcpDialer {
            remote: cfg.remote.clone(),
            opts: cfg.socket.clone(),
        });
        Pool::start_with_dialer(cfg, dialer)
    }

    /// Starts a pool over any carrier (TLS, QUIC, test transports).
    pub fn start_with_dialer(cfg: PoolConfig, dialer: Arc<dyn Dialer>) -> Result<Pool, PoolError> {
        cfg.validate().map_err(PoolError::Config)?;
        let session_id: u64 = rand::random();
        let session = Session::new(Role::Edge, session_id, cfg.mux_config(), cfg.policy);
        let shared = Shared::new(
            session,
            cfg.connections,
            None,
            OpenQueue::new(cfg.open_queue, cfg.open_wait),
        );
        let ctl = Arc::new(Control {
            closed: AtomicBool::new(false),
            close_notify: Notify::new(),
            tasks: Mutex::new(Vec::new()),
        });
        let mut tasks = Vec::new();
        for slot in 0..cfg.connections {
            let backoff = Backoff::new(cfg.backoff_min, cfg.backoff_max, session_id ^ slot as u64);
            tasks.push(tokio::spawn(run_slot(
                shared.clone(),
                ctl.clone(),
                dialer.clone(),
                slot,
                backoff,
                cfg.remote.clone(),
            )));
        }
        *ctl.tasks.lock().unwrap_or_else(|p| p.into_inner()) = tasks;
        let _guard = Arc::new(StopOnDrop {
            shared: shared.clone(),
            ctl: ctl.clone(),
        });
        Ok(Pool {
            mode: Mode::Mux(MuxPool {
                shared,
                ctl,
                _guard,
            }),
        })
    }

    /// Starts a pool over N QUIC connections (docs/PROTOCOL.md §8), mutually
    /// authenticated with `tls` (the same files as the TCP+TLS pool).
    /// `cfg.connections`, `cfg.remote`, backoff and `cfg.socket.connect_timeout`
    /// apply; the rest of the tuning comes from `quic`.
    pub fn start_quic(
        cfg: PoolConfig,
        tls: Arc<TlsClient>,
        quic: QuicOptions,
    ) -> Result<Pool, PoolError> {
        Ok(Pool {
            mode: Mode::Quic(QuicPool::start(&cfg, tls, quic)?),
        })
    }

    /// Starts a pool for `carrier = "auto"` (module `select`): a TCP+TLS pool kept warm and a
    /// QUIC pool, both authenticated with `tls`; new streams go to QUIC while it delivers and
    /// to TCP when its handshake fails or it stalls, QUIC being retried with back-off.
    pub fn start_auto(
        cfg: PoolConfig,
        tls: Arc<TlsClient>,
        quic: QuicOptions,
    ) -> Result<Pool, PoolError> {
        let dialer = Arc::new(TlsDialer {
            remote: cfg.remote.clone(),
            opts: cfg.socket.clone(),
            tls: tls.clone(),
        });
        let tcp = Pool::start_with_dialer(cfg.clone(), dialer)?;
        Ok(Pool {
            mode: Mode::Auto(AutoPool::start(cfg, tcp, tls, quic)?),
        })
    }

    /// The carrier new streams go to now.
    pub fn carrier(&self) -> CarrierKind {
        match &self.mode {
            Mode::Quic(_) => CarrierKind::Quic,
            Mode::Mux(_) => CarrierKind::Tcp,
            Mode::Auto(a) => a.carrier(),
        }
    }

    /// Carrier switches since start, by (from, to): under `carrier = "auto"` both directions,
    /// from the start (at 0 until a switch); empty under a fixed carrier.
    pub fn carrier_switches(&self) -> Switches {
        match &self.mode {
            Mode::Auto(a) => a.switches(),
            _ => Vec::new(),
        }
    }

    /// Waits until at least one connection has completed HELLO, or `timeout` passes.
    pub async fn ready(&self, timeout: Duration) -> bool {
        let m = match &self.mode {
            Mode::Quic(q) => return q.ready(timeout).await,
            Mode::Auto(a) => return a.ready(timeout).await,
            Mode::Mux(m) => m,
        };
        let wait = async {
            loop {
                let notified = m.shared.up.notified();
                tokio::pin!(notified);
                notified.as_mut().enable();
                if m.shared.op(|i| i.session.up_connections()) > 0 {
                    return;
                }
                notified.await;
            }
        };
        tokio::time::timeout(timeout, wait).await.is_ok()
    }

    /// Opens a stream with no round trip: the OPEN carries `kind`, `target`
    /// ("host:port") and `first` bytes.
    ///
    /// When every connection is at its stream limit (the peer's `max_streams`,
    /// or our own), waits first come first served for a stream slot: it goes out
    /// as soon as a stream of the pool is forgotten, and fails with
    /// [`PoolError::StreamLimit`] if none frees within [`PoolConfig::open_wait`]
    /// or [`PoolConfig::open_queue`] opens already wait. Fails at once with
    /// [`PoolError::Unavailable`] when no connection is up, or
    /// [`PoolError::Draining`] after a GOAWAY or [`Pool::close`] (also while
    /// waiting).
    pub async fn open(
        &self,
        kind: Kind,
        target: &str,
        first: Bytes,
    ) -> Result<MuxStream, PoolError> {
        self.open_aged(kind, target, first, Duration::ZERO).await
    }

    /// [`Pool::open`] for a request of a page that began `age` ago (as the caller tells
    /// pages apart, e.g. by a client connection's burst of requests): on both sides the
    /// stream ranks with the older pages' streams, which go first (PROTOCOL.md §5.1). An age
    /// of zero ranks it by its opening, as [`Pool::open`] does.
    pub async fn open_aged(
        &self,
        kind: Kind,
        target: &str,
        first: Bytes,
        age: Duration,
    ) -> Result<MuxStream, PoolError> {
        let m = match &self.mode {
            Mode::Quic(q) => return q.open(kind, target, first, age).await,
            Mode::Auto(a) => return a.open(kind, target, first, age).await,
            Mode::Mux(m) => m,
        };
        let start = tokio::time::Instant::now();
        let id = m
            .shared
            .open_queue
            .open(|| m.attempt(kind, target, &first, age + start.elapsed()))
            .await?;
        Ok(MuxStream::new(m.shared.clone(), id))
    }

    /// Like [`Pool::open`] but never waits for a stream slot: fails with
    /// [`PoolError::StreamLimit`] (`waited` zero) when every connection is at its
    /// stream limit or other opens are already waiting for one (it does not
    /// overtake them). For choosing between the pools of several remotes.
    pub async fn try_open(
        &self,
        kind: Kind,
        target: &str,
        first: Bytes,
    ) -> Result<MuxStream, PoolError> {
        self.try_open_aged(kind, target, first, Duration::ZERO)
            .await
    }

    /// [`Pool::try_open`] with a page age, as [`Pool::open_aged`].
    pub async fn try_open_aged(
        &self,
        kind: Kind,
        target: &str,
        first: Bytes,
        age: Duration,
    ) -> Result<MuxStream, PoolError> {
        let m = match &self.mode {
            Mode::Quic(q) => return q.try_open(kind, target, first, age).await,
            Mode::Auto(a) => return a.try_open(kind, target, first, age).await,
            Mode::Mux(m) => m,
        };
        let id = m
            .shared
            .open_queue
            .try_open(|| m.attempt(kind, target, &first, age))?;
        Ok(MuxStream::new(m.shared.clone(), id))
    }

    /// Opens waiting for a stream slot now.
    pub fn open_waiting(&self) -> usize {
        match &self.mode {
            Mode::Quic(q) => q.open_waiting(),
            Mode::Auto(a) => a.open_waiting(),
            Mode::Mux(m) => m.shared.open_queue.waiting(),
        }
    }

    /// Most streams the pool can have open at once now: over TCP the session's limit (the
    /// smaller of the two sides' `max_streams`), over QUIC the per-connection limit times the
    /// connections that are up. Opens beyond it wait ([`Pool::open_waiting`]).
    pub fn stream_limit(&self) -> usize {
        match &self.mode {
            Mode::Quic(q) => q.stream_limit(),
            Mode::Auto(a) => a.stream_limit(),
            Mode::Mux(m) => m.shared.op(|i| i.session.stream_limit()) as usize,
        }
    }

    /// Per-connection health, one entry per slot.
    pub fn stats(&self) -> Vec<ConnStats> {
        match &self.mode {
            Mode::Quic(q) => q.stats(),
            Mode::Auto(a) => a.stats(),
            Mode::Mux(m) => {
                let mut out = Vec::new();
                m.shared.op(|i| collect(i, &mut out));
                out
            }
        }
    }

    /// Up connections, outstanding bytes and open streams, cheaply (for choosing between the
    /// pools of several remotes; [`Pool::stats`] has the per-connection detail).
    pub fn load(&self) -> PoolLoad {
        match &self.mode {
            Mode::Quic(q) => PoolLoad::from_stats(&q.stats()),
            Mode::Auto(a) => a.load(),
            Mode::Mux(m) => m.shared.op(|i| load(i)),
        }
    }

    /// The pool session id carried in every connection's HELLO.
    pub fn session_id(&self) -> u64 {
        match &self.mode {
            Mode::Quic(q) => q.session_id(),
            Mode::Auto(a) => a.session_id(),
            Mode::Mux(m) => m.shared.op(|i| i.session.session_id()),
        }
    }

    /// Whether new streams go over QUIC now.
    pub fn is_quic(&self) -> bool {
        self.carrier() == CarrierKind::Quic
    }

    /// GOAWAY on every connection, waits (at most `grace`) for open streams to
    /// finish, then closes the connections and stops re-dialing.
    pub async fn close(&self, grace: Duration) {
        let m = match &self.mode {
            Mode::Quic(q) => return q.close(grace).await,
            Mode::Auto(a) => return a.close(grace).await,
            Mode::Mux(m) => m,
        };
        m.ctl.stop();
        m.shared.op(|i| i.session.go_away("edge pool closing"));
        m.shared.open_queue.wake();
        let idle = async {
            while m.shared.op(|i| i.session.stream_count()) > 0 {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        };
        let _ = tokio::time::timeout(grace, idle).await;
        m.shared.op(|i| {
            i.shutting_down = true;
            i.notify_all_lanes();
        });
        let tasks = std::mem::take(&mut *m.ctl.tasks.lock().unwrap_or_else(|p| p.into_inner()));
        for t in tasks {
            let abort = t.abort_handle();
            if tokio::time::timeout(Duration::from_secs(3), t)
                .await
                .is_err()
            {
                abort.abort();
            }
        }
    }
}

impl MuxPool {
    /// One try at opening a stream in the session.
    fn attempt(&self, kind: Kind, target: &str, first: &[u8], age: Duration) -> Attempt<u64> {
        if self.ctl.closed.load(Ordering::Acquire) {
            return Attempt::Done(Err(PoolError::Draining));
        }
        self.shared.op(
            |i| match i.session.open_aged(kind, target, first, false, age) {
                Ok(id) => {
                    i.wakers.insert(id, Default::default());
                    Attempt::Done(Ok(id))
                }
                Err(OpenError::StreamLimit { .. }) => Attempt::Full,
                Err(e) => Attempt::Done(Err(e.into())),
            },
        )
    }
}

async fn run_slot(
    shared: Arc<Shared>,
    ctl: Arc<Control>,
    dialer: Arc<dyn Dialer>,
    slot: usize,
    mut backoff: Backoff,
    remote: String,
) {
    let set_state = |st: LaneState, redial: bool| {
        shared.op(|i| {
            if let Some(s) = i.slots.get_mut(slot) {
                s.state = st;
                if redial {
                    s.reconnects += 1;
                }
            }
        })
    };
    let mut first = true;
    while !ctl.closed.load(Ordering::Acquire) {
        set_state(LaneState::Connecting, !first);
        first = false;
        match dialer.dial().await {
            Ok(carrier) => {
                if ctl.closed.load(Ordering::Acquire) {
                    break;
                }
                if run_lane(shared.clone(), carrier, Vec::new(), Some(slot)).await {
                    backoff.reset();
                }
            }
            Err(e) => tracing::warn!(slot, %remote, error = %e, "pool dial failed"),
        }
        if ctl.closed.load(Ordering::Acquire) {
            break;
        }
        let d = backoff.next_delay();
        set_state(LaneState::Backoff, false);
        tracing::debug!(
            slot,
            delay_ms = d.as_millis() as u64,
            "re-dialing after backoff"
        );
        let notified = ctl.close_notify.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        if ctl.closed.load(Ordering::Acquire) {
            break;
        }
        tokio::select! {
            _ = tokio::time::sleep(d) => {}
            _ = notified => {}
        }
    }
}

impl From<OpenError> for PoolError {
    fn from(e: OpenError) -> Self {
        match e {
            OpenError::Unavailable => PoolError::Unavailable,
            OpenError::Draining => PoolError::Draining,
            OpenError::StreamLimit { .. } => PoolError::StreamLimit {
                waited: Duration::ZERO,
                queue_full: false,
            },
            OpenError::Limit(l) => PoolError::Limit(l),
            OpenError::Invalid(r) => PoolError::Invalid(r),
        }
    }
}
