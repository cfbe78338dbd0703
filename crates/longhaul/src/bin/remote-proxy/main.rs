//! `remote-proxy`: the far-side longhaul binary. Run with no arguments for the local demo
//! (pool listener 127.0.0.1:4443, loopback origins allowed); see `--help` and the README.
//!
//! The command line is parsed by `app::process::cli` with the flags of `remote_proxy::cli` (which
//! also loads the configuration); the proxy itself is `remote_proxy::service::run`.
#![forbid(unsafe_code)]

use std::process::ExitCode;

use remote_proxy::cli::{Flags, HELP};

fn main() -> ExitCode {
    app::process::cli::<Flags, _>("remote-proxy", HELP, remote_proxy::service::run)
}
