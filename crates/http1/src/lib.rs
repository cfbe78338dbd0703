//! HTTP/1.1 as both longhaul proxies speak it: request and response heads, body framing,
//! request targets ([`target`]), and the synthetic replies and error tags ([`reply`]) that
//! either side sends when it answers instead of an origin.
//!
//! What it does NOT do: open connections, decide policy (which clients, targets or ports are
//! allowed), or map failures to statuses: each proxy's `errors` module does that, with the
//! tags defined here.
#![forbid(unsafe_code)]

mod head;
pub mod reply;
pub mod target;

pub use head::*;
