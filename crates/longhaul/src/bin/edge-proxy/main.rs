//! `edge-proxy`: the near-side longhaul binary. Run with no arguments for the local demo
//! (127.0.0.1:3128 → remote 127.0.0.1:4443); see `--help` and the README for the rest.
//!
//! It parses the command line and hands over: the flags and the configuration are
//! `edge_proxy::cli`, the process around the proxy is `app::process`, the proxy is
//! `edge_proxy::service::run`.
#![forbid(unsafe_code)]

use std::process::ExitCode;

use clap::Parser;
use edge_proxy::cli::{Flags, TLS_DIR_HELP};

/// Near-side longhaul proxy: HTTP/1.1 forward proxy, CONNECT and transparent interception,
/// carried over a pool of warm connections to a remote proxy.
#[derive(Debug, Parser)]
#[command(name = "edge-proxy", version, args_conflicts_with_subcommands = true)]
#[command(mut_arg("tls_dir", |a| a.help(TLS_DIR_HELP)))]
struct Args {
    #[command(subcommand)]
    cmd: Option<Cmd>,
    #[command(flatten)]
    flags: Flags,
}

#[derive(Debug, clap::Subcommand)]
enum Cmd {
    /// Make a deployment CA and edge/remote certificates for the pool's mutual TLS.
    GenKeys(app::keys::GenKeysArgs),
}

fn main() -> ExitCode {
    let args = Args::parse();
    if let Some(Cmd::GenKeys(g)) = &args.cmd {
        return app::keys::run("edge-proxy", g);
    }
    let check = args.flags.file.check_config;
    let flags = args.flags;
    app::process::main(
        "edge-proxy",
        check,
        move || flags.load(),
        edge_proxy::service::run,
    )
}
