//! Far-side longhaul proxy: accepts pool connections, resolves names, fetches from origins and
//! streams replies back.
//!
//! What it does: serves each stream an edge opens ([`handler`]): plain-HTTP requests are fetched
//! with hyper's client over pooled keep-alive origin connections (names resolved here, near the
//! content; loopback/private destinations refused in production, checked on the resolved
//! address), tunnels get a TCP connection; replies stream back as they arrive. Failures map to
//! synthetic responses or stream resets in one place ([`errors`]). [`service`] runs the whole
//! remote (pool listener, metrics, reload, drain), [`cli`] holds its own flags.
//!
//! What it does NOT do: cache, rewrite content, or open streams towards the edge.
//!
//! It does not depend on the edge proxy's crate: what the two share lives below both, HTTP/1
//! in the `http1` crate, configuration sections, logging, metrics, the access log and the
//! process loop in the `app` crate. The `remote-proxy` binary is in `crates/longhaul`.
#![forbid(unsafe_code)]

pub mod cli;
pub mod config;
pub mod errors;
pub mod handler;
pub mod policy;
pub mod pool_glue;
pub mod service;
