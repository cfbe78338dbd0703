//! Far-side longhaul proxy: accepts pool connections, resolves names, fetches from origins and streams replies back.
#![forbid(unsafe_code)]
