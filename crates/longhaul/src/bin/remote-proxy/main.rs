//! `remote-proxy`: the far-side longhaul binary. Run with no arguments for the local demo
//! (pool listener 127.0.0.1:4443, loopback origins allowed); see `--help` and the README.
//!
//! It parses the command line and hands over: the flags and the configuration are
//! `remote_proxy::cli`, the process around the proxy is `app::process`, the proxy is
//! `remote_proxy::service::run`.
#![forbid(unsafe_code)]

use std::process::ExitCode;

use clap::Parser;
use remote_proxy::cli::{Flags, TLS_DIR_HELP};

/// Far-side longhaul proxy: accepts pool connections from edges, resolves names, fetches from
/// origins and streams replies back.
#[derive(Debug, Parser)]
#[command(name = "remote-proxy", version, args_conflicts_with_subcommands = true)]
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
        return app::keys::run("remote-proxy", g);
    }
    let check = args.flags.file.check_config;
    let flags = args.flags;
    app::process::main(
        "remote-proxy",
        check,
        move || flags.load(),
        remote_proxy::service::run,
    )
}
