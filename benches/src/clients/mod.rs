//! The clients that load pages through the systems: one type per client implementing
//! [`Client`], registered once in [`REGISTRY`].
//!
//! - [`replay`]: the browser-like replay client (`pageload replay-once` in the client
//!   namespace): HTTP/1.1 with six connections per host, or over HTTPS one HTTP/2 (or, for
//!   `direct-h3`, HTTP/3) connection per host; level by level.
//! - [`chromium`]: headless Chromium, the real browser; `chromium-https-proxy` the same through
//!   the system's HTTPS proxy endpoint (HTTP/2 over TLS to the proxy; longhaul systems).
//!
//! Adding a client is one file: a type implementing [`Client`] and its line in [`REGISTRY`].
//! This module runs one load; the schedule, repetitions and rows are the runner's.

pub mod chromium;
pub mod replay;

use crate::runner::trial::Trialer;
use crate::systems::Running;
use crate::workload::Workload;
use anyhow::Result;

/// One client the runner loads pages with.
pub trait Client: Sync {
    /// Its id, as `--clients` and the results rows name it.
    fn id(&self) -> &'static str;

    /// The programs it runs by name, checked on `PATH` before any bed comes up.
    fn programs(&self) -> &'static [&'static str] {
        &[]
    }

    /// Whether it can load `w` at all.
    fn loads(&self, _w: &Workload) -> bool {
        true
    }

    /// Whether it is the browser, which a suite runs on a slice of its pages and schemes only
    /// (`Suite::chromium_workloads`, `Suite::chromium_schemes`).
    fn is_browser(&self) -> bool {
        false
    }

    /// Whether longhaul's swept variants (pool size, congestion control, policy) are measured
    /// with it on the sweep page.
    fn measures_sweeps(&self) -> bool {
        false
    }

    /// One cold page load of `w` over `scheme` through `sys`: its page load time in ms.
    fn load(&self, tr: &Trialer<'_>, sys: &Running, w: &Workload, scheme: &str) -> Result<f64>;
}

/// Every client, in the order the suites list them.
pub static REGISTRY: [&dyn Client; 3] = [
    &replay::Replay,
    &chromium::Chromium,
    &chromium::ChromiumHttpsProxy,
];

/// The registered client `id`.
pub fn lookup(id: &str) -> Option<&'static dyn Client> {
    REGISTRY.iter().copied().find(|c| c.id() == id)
}
