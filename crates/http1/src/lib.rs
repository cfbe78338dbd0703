//! HTTP/1.1 as both longhaul proxies speak it: request and response heads and body framing
//! (the items at the crate root), request targets ([`target`]), and the synthetic replies and
//! the error tags ([`reply`]) that either side sends when it answers instead of an origin.
//!
//! What it does NOT do: open connections, keep connection state, decide policy (which clients,
//! targets or ports are allowed), or decide which failure gets which tag: each proxy's
//! `errors` module does that, with the tags defined here.
//!
//! # Why the edge parses HTTP/1 itself
//!
//! The edge does not serve clients with a general HTTP server (hyper's server connection),
//! because four things it must do sit below the request/response interface such a server
//! offers:
//!
//! - **Pipelined requests fan out to parallel streams.** Every request a client pipelines is
//!   opened as its own mux stream as soon as its head is read (up to `max_pipeline`), so they
//!   cross the long link together; only the replies are put back in request order. hyper's
//!   HTTP/1 server dispatches one request at a time per connection and reads the next only
//!   after the previous response, which would cost one long round trip per pipelined request.
//! - **The head travels in the OPEN frame.** The request head, rewritten to origin form with
//!   hop-by-hop headers removed, is the first bytes of the stream's OPEN, so a bodiless request
//!   is one frame and no round trip is spent before the remote can act. That needs the head as
//!   bytes the edge encodes itself, with the client's header order and case kept.
//! - **A cut reply ends in a reset.** When the far side fails after reply bytes reached the
//!   client, the client connection is closed with a TCP RST (`SO_LINGER` 0) and never a FIN,
//!   so a truncated reply cannot look complete, not even a close-delimited one (RFC 9112 §8,
//!   incomplete messages). A server that ends a failed response body by closing
//!   the connection normally gives the client exactly that ambiguity.
//! - **100-continue is answered locally.** For `Expect: 100-continue` the edge forwards the head
//!   in the OPEN (what RFC 9110 §10.1.1 asks of a proxy) and sends `100 Continue` itself, so
//!   the body follows at once instead of a long-link round trip later, when the origin's
//!   interim response would arrive; the origin's own `100` is not passed on.
//!
//! # Decision: the remote keeps this parser for its streams
//!
//! Question: should the remote serve each `Http` stream with hyper's server connection
//! (`hyper::server::conn::http1`) instead of reading the request with this crate? It already
//! uses hyper's *client* towards origins, where connection reuse and response parsing are
//! what hyper is for. **Decision: no; the remote reads the stream's one request with this
//! crate.** Reasons:
//!
//! 1. **One framing decision for both ends of a stream.** The edge frames a request with this
//!    crate (Content-Length vs chunked, conflicting or repeated lengths rejected, RFC 9112
//!    §6.3); the remote reading the same bytes with the same code cannot disagree on where the
//!    request ends. A second parser on the far side is a second place where a smuggled or
//!    ambiguous request could be read two ways.
//! 2. **Errors keep their tags.** A malformed or oversized head must be answered with the
//!    tagged synthetic reply ([`reply::synthetic_response`]: `bad-request`,
//!    `header-too-large` with the configured `max_header_bytes`) that the edge passes on and
//!    the access log and metrics count. hyper's server answers parse errors itself with bare
//!    statuses the caller cannot tag or log.
//! 3. **A stream is one request, not a connection.** Each stream carries exactly one request and
//!    ends with FIN; a `CONNECT` on it becomes a tunnel after `200`. A server connection brings
//!    keep-alive, its own buffers per stream and an upgrade dance for CONNECT, none of which
//!    a single-request stream needs, and its `100 Continue` and `Date` handling would act
//!    again on what the edge already did.
//! 4. **Resets stay explicit.** A reply cut by the origin must reset the stream with a reason
//!    code; the remote's handler owns the stream and does that directly, where behind a server
//!    connection a failed body only ends the connection.
//!
//! To revisit if a stream ever carries several requests, or the edge–remote protocol becomes
//! HTTP/2 or HTTP/3 semantics, where a maintained server implementation would pay for itself.
#![forbid(unsafe_code)]

mod head;
pub mod reply;
pub mod target;

pub use head::*;
