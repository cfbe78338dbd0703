//! Teardown on SIGINT, SIGTERM and SIGHUP for programs that hold test beds.
//!
//! A [`Topology`](crate::Topology) tears itself down when dropped, but a signal's default
//! action ends the process without running destructors: the namespaces' processes (origins,
//! proxies, clients) would live on, holding the namespaces. A program that holds beds calls
//! [`tear_down_on_signals`] first thing in `main`; from then on a signal runs every registered
//! cleanup (each live bed registers one, see [`on_signal`]) and exits with `128 + signal`.
//!
//! It cannot act on SIGKILL: after one, the processes started in the bed live on (the
//! namespaces are anonymous, so they go once those processes are killed).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

type Cleanup = Box<dyn Fn() + Send>;

/// Cleanups by registration number.
struct Registry {
    cleanups: Mutex<BTreeMap<u64, Cleanup>>,
    next: AtomicU64,
}

impl Registry {
    const fn new() -> Registry {
        Registry {
            cleanups: Mutex::new(BTreeMap::new()),
            next: AtomicU64::new(0),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, Cleanup>> {
        // A cleanup that panicked leaves the map itself intact.
        self.cleanups.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn register(&'static self, cleanup: Cleanup) -> Registration {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        self.lock().insert(id, cleanup);
        Registration { registry: self, id }
    }

    fn run_all(&self) -> usize {
        let all = std::mem::take(&mut *self.lock());
        for f in all.values() {
            f();
        }
        all.len()
    }
}

/// The cleanups of the beds alive in this process.
static REGISTRY: Registry = Registry::new();

/// Set once a signal arrived: programs check it before starting processes in a bed.
static STOPPING: AtomicBool = AtomicBool::new(false);

/// How long the cleanups wait after [`stopping`] turns true, so that a process whose start
/// began just before is inside its namespace when the cleanups sweep it.
pub const SETTLE: std::time::Duration = std::time::Duration::from_millis(100);

/// True once a signal is tearing the beds down; start no more processes in them then.
pub fn stopping() -> bool {
    STOPPING.load(Ordering::SeqCst)
}

/// Returns at once while no signal arrived; after one, never returns: the signal thread is
/// tearing the beds down and ends the process, and the caller must not start anything more.
pub fn hold_if_stopping() {
    while stopping() {
        std::thread::sleep(std::time::Duration::from_secs(1));
    }
}

/// The signals that tear the beds down.
pub const SIGNALS: [libc::c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

/// A registered cleanup; dropping it unregisters the cleanup (the bed tore itself down).
pub struct Registration {
    registry: &'static Registry,
    id: u64,
}

impl std::fmt::Debug for Registration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Registration({})", self.id)
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.registry.lock().remove(&self.id);
    }
}

/// Registers `cleanup` to run if a signal arrives while the returned registration lives.
pub fn on_signal(cleanup: impl Fn() + Send + 'static) -> Registration {
    REGISTRY.register(Box::new(cleanup))
}

/// Runs (and unregisters) every registered cleanup once; returns how many ran.
pub fn run_cleanups() -> usize {
    REGISTRY.run_all()
}

/// Blocks [`SIGNALS`] in the calling thread, and so in every thread it starts afterwards
/// (call it before any other thread exists), and starts a thread that waits for one, runs
/// the registered cleanups and exits with `128 + signal`. Child processes start with an
/// empty signal mask, so they still receive a terminal's Ctrl-C themselves.
pub fn tear_down_on_signals(program: &'static str) -> anyhow::Result<()> {
    netsys::block_signals(&SIGNALS)?;
    std::thread::Builder::new()
        .name("testbed-signals".into())
        .spawn(move || {
            let Ok(sig) = netsys::wait_signal(&SIGNALS) else {
                return;
            };
            eprintln!("{program}: signal {sig}, tearing the test bed down");
            STOPPING.store(true, Ordering::SeqCst);
            std::thread::sleep(SETTLE);
            let n = run_cleanups();
            eprintln!(
                "{program}: {n} cleanup(s) run (test beds torn down, temporary files removed)"
            );
            std::process::exit(128 + sig);
        })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::sync::Arc;

    #[test]
    fn live_registrations_run_once_and_dropped_ones_never() {
        // A registry of its own: the process-wide one may hold other tests' beds.
        let registry: &'static Registry = Box::leak(Box::new(Registry::new()));
        let ran = Arc::new(AtomicUsize::new(0));
        let r = ran.clone();
        let kept = registry.register(Box::new(move || {
            r.fetch_add(1, Ordering::SeqCst);
        }));
        let r = ran.clone();
        let dropped = registry.register(Box::new(move || {
            r.fetch_add(100, Ordering::SeqCst);
        }));
        drop(dropped);
        assert_eq!(registry.run_all(), 1);
        assert_eq!(ran.load(Ordering::SeqCst), 1);
        // Already run: a second signal finds nothing left to run.
        assert_eq!(registry.run_all(), 0);
        assert_eq!(ran.load(Ordering::SeqCst), 1);
        // Unregistering after the run is harmless.
        drop(kept);
        assert_eq!(registry.run_all(), 0);
    }
}
