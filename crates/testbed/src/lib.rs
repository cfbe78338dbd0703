//! longhaul's test bed: a long link on one machine.
//!
//! Four network namespaces (client, edge, remote, origin) joined by links that a
//! user-space emulator moves IP packets across, between TUN devices, with the real
//! kernel TCP stack at both ends. Per direction the emulator applies a propagation
//! delay, serialization at a rate, a drop-tail queue limited in bytes, Bernoulli or
//! Gilbert–Elliott loss and optional jitter, all seeded, scheduled against absolute
//! due times on a monotonic clock.
//!
//! * [`profile`]: named profiles (`us-nz-1999`, `pacific`, `satellite`, `lossy`,
//!   `lossy-3`) and custom ones (TOML or flags).
//! * [`model`]: the sans-IO link model, tested in virtual time.
//! * [`emulator`]: the thin thread-per-direction I/O loop around the model.
//! * [`topology`]: namespaces, devices, addresses, routes, sysctls; [`Topology`].
//! * [`calibrate`]: RTT, goodput and loss measured across the long link.
//! * [`mod@privileges`]: root, user-namespace or nothing; the gate tests use.
//! * [`signals`]: teardown of live beds on SIGINT, SIGTERM and SIGHUP.
//!
//! It does not shape IPv6 (disabled in the namespaces), emulate reordering,
//! duplication or corruption, or model link-layer framing: rates count whole IP
//! packets. It does not start proxies or origins; callers do, with
//! [`Topology::command`].
#![forbid(unsafe_code)]

pub mod calibrate;
pub mod emulator;
pub mod model;
pub mod netns;
pub mod privileges;
pub mod profile;
pub mod signals;
pub mod topology;

pub use privileges::{netns_test_gate, privileges, Privileges};
pub use profile::{DirectionSpec, LossModel, Profile, ProfileSpec};
pub use topology::{Node, Topology};
