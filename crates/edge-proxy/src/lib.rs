//! Near-side longhaul proxy: HTTP/1.1 forward proxy, CONNECT and transparent interception over the mux pool.
#![forbid(unsafe_code)]
