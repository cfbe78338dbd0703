//! The bounded FIFO queue of [`crate::Pool::open`] calls that wait for a stream slot.
//!
//! What it does: when every pool connection is at its stream limit (the peer's `max_streams`,
//! or our own), an open does not fail at once but waits here, first come first served, until a
//! stream slot frees or [`crate::PoolConfig::open_wait`] passes; at most
//! [`crate::PoolConfig::open_queue`] opens wait at once. Only the waiter at the head of the
//! queue tries to open, and a new open never overtakes waiters (it queues behind them), so an
//! early waiter is not starved by later arrivals. Waiters are woken (never polled) by
//! [`OpenQueue::wake`], which the driver calls when a stream is forgotten, a connection comes up
//! or goes down, or the pool closes; a waiter that leaves the head (opened, timed out, or
//! cancelled by its caller) hands the turn to the next one.
//!
//! What it does NOT do: decide whether an open can succeed (the caller's attempt does: the
//! sans-IO session, or the QUIC pool's per-connection count), or wait for anything but a stream
//! slot: pool-wide failures (no connection up, draining) end the wait at once with their error.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::PoolError;

/// Outcome of one attempt to open a stream.
pub(crate) enum Attempt<T> {
    /// Opened, or failed for a reason other than the stream limit (returned as is).
    Done(Result<T, PoolError>),
    /// Every connection is at its stream limit: wait for a slot.
    Full,
}

struct Waiter {
    ticket: u64,
    wake: Arc<Notify>,
}

#[derive(Default)]
struct State {
    /// Waiting opens, oldest first. Invariant: at most `max_waiters` entries; only the front
    /// one attempts to open.
    waiters: VecDeque<Waiter>,
    next_ticket: u64,
}

/// See the module documentation.
pub(crate) struct OpenQueue {
    /// Most opens waiting at once (`PoolConfig::open_queue`).
    max_waiters: usize,
    /// Longest wait of one open (`PoolConfig::open_wait`).
    max_wait: Duration,
    state: Mutex<State>,
}

impl OpenQueue {
    pub(crate) fn new(max_waiters: usize, max_wait: Duration) -> OpenQueue {
        OpenQueue {
            max_waiters,
            max_wait,
            state: Mutex::new(State::default()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Wakes the waiter at the head of the queue (a stream slot may be free, or the pool's
    /// state changed). Cheap when nobody waits.
    pub(crate) fn wake(&self) {
        if let Some(w) = self.lock().waiters.front() {
            // notify_one keeps a permit if the waiter is between two checks: no lost wake-up.
            w.wake.notify_one();
        }
    }

    /// Opens waiting in the queue now.
    pub(crate) fn waiting(&self) -> usize {
        self.lock().waiters.len()
    }

    /// One attempt, without waiting: fails with [`PoolError::StreamLimit`] when every
    /// connection is full or other opens already wait (it does not overtake them).
    pub(crate) fn try_open<T>(&self, attempt: impl FnOnce() -> Attempt<T>) -> Result<T, PoolError> {
        if self.waiting() == 0 {
            if let Attempt::Done(r) = attempt() {
                return r;
            }
        }
        Err(PoolError::StreamLimit {
            waited: Duration::ZERO,
            queue_full: false,
        })
    }

    /// Runs `attempt` (synchronous: it must not await) now if nobody waits, else (or if it
    /// finds every connection full) queues and runs it again each time this open is at the
    /// head of the queue and is woken, until it is done or the wait ends.
    pub(crate) async fn open<T>(
        &self,
        mut attempt: impl FnMut() -> Attempt<T>,
    ) -> Result<T, PoolError> {
        if self.waiting() == 0 {
            if let Attempt::Done(r) = attempt() {
                return r;
            }
        }
        let start = Instant::now();
        let wake = Arc::new(Notify::new());
        let ticket = {
            let mut st = self.lock();
            if st.waiters.len() >= self.max_waiters || self.max_wait.is_zero() {
                return Err(PoolError::StreamLimit {
                    waited: Duration::ZERO,
                    queue_full: st.waiters.len() >= self.max_waiters,
                });
            }
            let ticket = st.next_ticket;
            st.next_ticket += 1;
            st.waiters.push_back(Waiter {
                ticket,
                wake: wake.clone(),
            });
            ticket
        };
        let _leave = Leave {
            queue: self,
            ticket,
        };
        let deadline = start + self.max_wait;
        loop {
            let head = self.lock().waiters.front().map(|w| w.ticket) == Some(ticket);
            if head {
                if let Attempt::Done(r) = attempt() {
                    return r;
                }
            }
            tokio::select! {
                _ = wake.notified() => {}
                _ = tokio::time::sleep_until(deadline) => {
                    return Err(PoolError::StreamLimit {
                        waited: start.elapsed(),
                        queue_full: false,
                    });
                }
            }
        }
    }
}

/// Removes a waiter from the queue however its wait ends (including its caller dropping the
/// future), and hands the turn to the next waiter if it was at the head.
struct Leave<'a> {
    queue: &'a OpenQueue,
    ticket: u64,
}

impl Drop for Leave<'_> {
    fn drop(&mut self) {
        let mut st = self.queue.lock();
        let was_head = st.waiters.front().map(|w| w.ticket) == Some(self.ticket);
        st.waiters.retain(|w| w.ticket != self.ticket);
        if was_head {
            if let Some(w) = st.waiters.front() {
                w.wake.notify_one();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A pool of `slots` stream slots, as the attempt sees it.
    struct Slots(AtomicUsize);

    impl Slots {
        fn attempt(&self) -> Attempt<()> {
            let free = self.0.load(Ordering::SeqCst);
            if free == 0 {
                return Attempt::Full;
            }
            self.0.store(free - 1, Ordering::SeqCst);
            Attempt::Done(Ok(()))
        }
    }

    #[tokio::test(start_paused = true)]
    async fn waiters_are_served_in_arrival_order() {
        let q = Arc::new(OpenQueue::new(8, Duration::from_secs(5)));
        let slots = Arc::new(Slots(AtomicUsize::new(0)));
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        for n in 0..3 {
            let (q, slots, order) = (q.clone(), slots.clone(), order.clone());
            tasks.push(tokio::spawn(async move {
                q.open(|| slots.attempt()).await.unwrap();
                order.lock().unwrap().push(n);
            }));
            // Let it queue before the next one arrives.
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        assert_eq!(q.waiting(), 3);
        for _ in 0..3 {
            slots.0.fetch_add(1, Ordering::SeqCst);
            q.wake();
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        for t in tasks {
            t.await.unwrap();
        }
        assert_eq!(*order.lock().unwrap(), vec![0, 1, 2]);
        assert_eq!(q.waiting(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_new_open_does_not_overtake_a_waiter() {
        let q = Arc::new(OpenQueue::new(8, Duration::from_secs(5)));
        let slots = Arc::new(Slots(AtomicUsize::new(0)));
        let (q2, s2) = (q.clone(), slots.clone());
        let early = tokio::spawn(async move { q2.open(|| s2.attempt()).await });
        tokio::time::sleep(Duration::from_millis(1)).await;
        // A slot frees but the early waiter has not run yet: a newcomer must not take it.
        slots.0.store(1, Ordering::SeqCst);
        assert_eq!(
            q.try_open(|| slots.attempt()),
            Err(PoolError::StreamLimit {
                waited: Duration::ZERO,
                queue_full: false
            })
        );
        q.wake();
        early.await.unwrap().unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn a_cancelled_head_hands_the_turn_on() {
        let q = Arc::new(OpenQueue::new(8, Duration::from_secs(5)));
        let slots = Arc::new(Slots(AtomicUsize::new(0)));
        let (q1, s1) = (q.clone(), slots.clone());
        let first = tokio::spawn(async move { q1.open(|| s1.attempt()).await });
        tokio::time::sleep(Duration::from_millis(1)).await;
        let (q2, s2) = (q.clone(), slots.clone());
        let second = tokio::spawn(async move { q2.open(|| s2.attempt()).await });
        tokio::time::sleep(Duration::from_millis(1)).await;
        slots.0.store(1, Ordering::SeqCst);
        first.abort();
        let _ = first.await;
        second.await.unwrap().unwrap();
        assert_eq!(q.waiting(), 0);
    }
}
