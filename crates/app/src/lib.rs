//! What both longhaul binaries share, below both proxy crates so that neither depends on the
//! other: the access log ([`access`]) and the byte counts of its relays ([`counted`]), configuration sections and validation helpers ([`config`]), the host settings the pool
//! depends on ([`host`]), logging ([`logging`]),
//! Prometheus metrics and the `/metrics` endpoint ([`metrics`]), systemd notifications
//! ([`notify`]), reload ([`reload`]), the process around either proxy (flags both share,
//! loading, `--check-config`, the SIGHUP and shutdown loops: [`process`]), the `gen-keys` subcommand ([`keys`]) and the glue between
//! configuration and the pool crate ([`pool_glue`]).
//!
//! What it does NOT do: serve clients or origins (the proxy crates do), or parse command lines
//! (the binaries do).
#![forbid(unsafe_code)]

pub mod access;
pub mod config;
pub mod counted;
pub mod host;
pub mod keys;
pub mod logging;
pub mod metrics;
pub mod notify;
pub mod pool_glue;
pub mod process;
pub mod reload;
