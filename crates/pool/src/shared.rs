//! The session shared by a pool's connection tasks and its streams: one mutex
//! around the sans-IO [`mux::Session`], plus the wakers and notifiers that turn
//! its events into task wake-ups.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::Waker;
use std::time::Instant;

use mux::{ConnId, Event, Kind, Session};
use tokio::sync::{mpsc, Notify};

use crate::carrier::Probe;
use crate::queue::OpenQueue;
use crate::stats::LaneState;
use crate::stream::MuxStream;
use crate::Incoming;

/// Current time for the session (tokio's clock, so paused-time tests work).
pub(crate) fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}

/// Wakers of one stream's reader and writer.
#[derive(Default)]
pub(crate) struct Wakers {
    pub read: Option<Waker>,
    pub write: Option<Waker>,
    /// A [`crate::ResetWatch`] waiting for the stream to be reset.
    pub reset: Option<Waker>,
}

/// One live connection lane.
pub(crate) struct Lane {
    /// Wakes the lane's writer when the session has frames for it.
    pub notify: Arc<Notify>,
    /// Kernel view of the transport.
    pub probe: Arc<dyn Probe>,
    /// Pool slot (edge side).
    pub slot: Option<usize>,
    /// The peer's HELLO arrived on it.
    pub was_up: bool,
}

/// A pool slot (edge side): one of the N connections, across re-dials.
#[derive(Debug, Clone, Default)]
pub(crate) struct Slot {
    pub state: LaneState,
    pub conn: Option<ConnId>,
    pub reconnects: u64,
}

pub(crate) struct Inner {
    pub session: Session,
    /// Wakers of streams that have a live handle.
    pub wakers: HashMap<u64, Wakers>,
    /// Live lanes; a lane is removed right after `Session::connection_lost`.
    pub lanes: HashMap<ConnId, Lane>,
    /// Edge slots (empty on the server).
    pub slots: Vec<Slot>,
    /// Set once: lanes flush their control frames and close.
    pub shutting_down: bool,
    /// Where incoming streams go (server side).
    pub incoming: Option<mpsc::UnboundedSender<Incoming>>,
}

pub(crate) struct Shared {
    inner: Mutex<Inner>,
    /// Notified (all waiters) whenever a lane completes its HELLO.
    pub up: Notify,
    /// Opens waiting for a stream slot (edge side; never used on the server). Woken after
    /// every operation whose events may have freed a slot or changed the pool's state.
    pub open_queue: OpenQueue,
}

impl Shared {
    pub fn new(
        session: Session,
        slots: usize,
        incoming: Option<mpsc::UnboundedSender<Incoming>>,
        open_queue: OpenQueue,
    ) -> Arc<Self> {
        Arc::new(Shared {
            inner: Mutex::new(Inner {
                session,
                wakers: HashMap::new(),
                lanes: HashMap::new(),
                slots: vec![Slot::default(); slots],
                shutting_down: false,
                incoming,
            }),
            up: Notify::new(),
            open_queue,
        })
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves the session in an unknown
        // state; continuing with it is still better than poisoning every task.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs `f` on the session, then turns its events into wake-ups. New
    /// incoming streams are handed out after the lock is released (dropping a
    /// stream takes the lock).
    pub fn op<R>(self: &Arc<Self>, f: impl FnOnce(&mut Inner) -> R) -> R {
        let mut incoming = Vec::new();
        let (r, changed, tx) = {
            let mut g = self.lock();
            let r = f(&mut g);
            let changed = g.dispatch(&mut incoming);
            (r, changed, g.incoming.clone())
        };
        if changed.up {
            self.up.notify_waiters();
        }
        if changed.slots {
            self.open_queue.wake();
        }
        for (id, kind, target) in incoming {
            let stream = MuxStream::new(self.clone(), id);
            match &tx {
                Some(tx) => {
                    if let Err(e) = tx.send(Incoming {
                        id,
                        kind,
                        target,
                        stream,
                    }) {
                        drop(e.0);
                    }
                }
                None => drop(stream),
            }
        }
        r
    }
}

/// What [`Inner::dispatch`] saw that tasks outside the lock must hear of.
#[derive(Default)]
struct Changed {
    /// A lane came up.
    up: bool,
    /// A stream slot may have freed, or the session's state changed (a lane came up, closed or
    /// drains): the open at the head of the queue should try again.
    slots: bool,
}

impl Inner {
    /// Drains session events and ready lanes.
    fn dispatch(&mut self, incoming: &mut Vec<(u64, Kind, String)>) -> Changed {
        let mut changed = Changed::default();
        while let Some(ev) = self.session.poll_event() {
            match ev {
                Event::Readable(id) => {
                    if let Some(w) = self.wakers.get_mut(&id).and_then(|w| w.read.take()) {
                        w.wake();
                    }
                }
                Event::Writable(id) => {
                    if let Some(w) = self.wakers.get_mut(&id).and_then(|w| w.write.take()) {
                        w.wake();
                    }
                }
                Event::Reset {
                    id,
                    code,
                    retryable,
                } => {
                    tracing::debug!(stream = id, %code, retryable, "stream reset");
                    if let Some(w) = self.wakers.get_mut(&id) {
                        if let Some(w) = w.read.take() {
                            w.wake();
                        }
                        if let Some(w) = w.write.take() {
                            w.wake();
                        }
                        if let Some(w) = w.reset.take() {
                            w.wake();
                        }
                    }
                }
                Event::Incoming { id, kind, target } => {
                    self.wakers.insert(id, Wakers::default());
                    incoming.push((id, kind, target));
                }
                Event::StreamFreed(_) => changed.slots = true,
                Event::ConnectionUp(c) => {
                    changed.up = true;
                    changed.slots = true;
                    let (mut peer, mut local) = (None, None);
                    if let Some(l) = self.lanes.get_mut(&c) {
                        l.was_up = true;
                        (peer, local) = (l.probe.peer_addr(), l.probe.local_addr());
                        if let Some(s) = l.slot.and_then(|s| self.slots.get_mut(s)) {
                            s.state = LaneState::Up;
                        }
                    }
                    // The addresses tie this side's connection to the peer's line for it.
                    tracing::info!(
                        conn = %c,
                        session = self.session.session_id(),
                        peer = peer.map(tracing::field::display),
                        local = local.map(tracing::field::display),
                        "pool connection up"
                    );
                }
                Event::ConnectionClosing { conn, code, reason } => {
                    changed.slots = true;
                    tracing::warn!(%conn, %code, %reason, "closing pool connection");
                    if let Some(l) = self.lanes.get(&conn) {
                        l.notify.notify_one();
                        if let Some(s) = l.slot.and_then(|s| self.slots.get_mut(s)) {
                            s.state = LaneState::Closing;
                        }
                    }
                }
                Event::GoAway { conn, last_stream } => {
                    changed.slots = true;
                    tracing::info!(%conn, last_stream, "peer is draining");
                }
            }
        }
        while let Some(c) = self.session.poll_ready_conn() {
            if let Some(l) = self.lanes.get(&c) {
                l.notify.notify_one();
            }
        }
        changed
    }

    /// Wakes every lane's writer (shutdown).
    pub fn notify_all_lanes(&self) {
        for l in self.lanes.values() {
            l.notify.notify_one();
        }
    }
}
