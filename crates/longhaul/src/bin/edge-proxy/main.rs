//! `edge-proxy`: the near-side longhaul binary. Run with no arguments for the local demo
//! (127.0.0.1:3128 → remote 127.0.0.1:4443); see `--help` and the README for the rest.
//!
//! The command line is parsed by `app::process::cli` with the flags of `edge_proxy::cli` (which
//! also loads the configuration); the proxy itself is `edge_proxy::service::run`.
#![forbid(unsafe_code)]

use std::process::ExitCode;

use edge_proxy::cli::{Flags, HELP};

fn main() -> ExitCode {
    app::process::cli::<Flags, _>("edge-proxy", HELP, edge_proxy::service::run)
}
