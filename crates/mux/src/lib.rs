//! Sans-IO multiplexing protocol core of longhaul: frames, stream state,
//! credit flow control and the scheduling policy that binds each direction of
//! a stream to one of N pool connections.
//!
//! What it does: encodes and decodes the wire format of `docs/PROTOCOL.md`
//! (one module per frame type under [`frame`]); keeps the state of every
//! stream of a pool session in one [`Session`]; enforces per-stream and
//! per-connection credit, frame-size, stream-count and control-queue limits
//! ([`Config`]), growing each stream's receive window while its reader keeps up
//! (`session::credit`); encodes the QUIC mapping's HELLO and stream header
//! (`frame::quic`); maps local
//! errors to wire codes in one place ([`ConnError::code`]).
//!
//! What it does NOT do: no sockets, no tokio, no threads, no system clock.
//! Callers feed received bytes and the current time in, and poll frames to
//! send, events and the next deadline out (as quinn-proto and rustls do). The
//! `pool` crate is the tokio driver.
#![forbid(unsafe_code)]

pub mod config;
pub mod error;
pub mod frame;
pub mod policy;
pub mod session;
mod stream;
pub mod varint;

pub use config::Config;
pub use error::{ConnError, ErrorCode};
pub use frame::{Kind, Role};
pub use policy::{Load, PathEstimate, Policy};
pub use session::{ConnId, ConnState, Event, OpenError, Read, Session, StreamError};
