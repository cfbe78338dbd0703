//! Near-side longhaul proxy: HTTP/1.1 forward proxy, CONNECT, SOCKS5 and transparent
//! interception over the mux pool.
//!
//! What it does: accepts clients (explicit proxy, SOCKS5 ([`socks`]) and iptables-intercepted
//! connections), turns each plain-HTTP request into one `Http` stream and each CONNECT, SOCKS5
//! CONNECT or intercepted non-HTTP connection into one `Tunnel` stream, relays replies in
//! order, and maps every failure to a clear synthetic response ([`errors`]). Clients may also
//! reach it over TLS ([`https`]), speaking HTTP/1.1 or HTTP/2 ([`h2proxy`]). The stream
//! transport is a trait ([`transport`]);
//! [`service`] plugs in the pool and runs the whole edge, [`cli`] holds its own flags.
//!
//! What it does NOT do: resolve names or talk to origins (the remote proxy does), cache, look
//! inside HTTPS, speak HTTP/2 without TLS (h2c) or HTTP/3 to clients.
//!
//! It does not depend on the remote proxy's crate: what the two share lives below both, HTTP/1
//! in the `http1` crate, configuration sections, logging, metrics, the access log and the
//! process loop in the `app` crate. The `edge-proxy` binary is in `crates/longhaul`.
#![forbid(unsafe_code)]

pub mod cli;
pub mod client;
pub mod config;
pub mod conn;
pub mod errors;
pub mod h2proxy;
pub mod https;
pub mod page;
pub mod pool_transport;
pub mod remotes;
pub mod server;
pub mod service;
pub mod socks;
pub mod transport;
mod tunnel;
