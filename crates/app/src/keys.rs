//! The `gen-keys` subcommand both binaries share: a deployment CA plus an edge and a remote
//! certificate for the pool's mutual TLS, and the steps to install them.
//!
//! It does NOT distribute the files or touch running proxies (see the key rotation procedure
//! in docs/configuration.md).

use std::path::PathBuf;
use std::process::ExitCode;

use pool::tls::{gen_keys, GenKeysOptions};

/// `gen-keys`: make a deployment CA, an edge certificate and a remote certificate (ECDSA P-256,
/// PEM; keys mode 0600).
#[derive(Debug, Clone, clap::Args)]
pub struct GenKeysArgs {
    /// Directory to write ca.pem, ca.key, edge.pem, edge.key, remote.pem, remote.key into
    /// (created if missing; existing files are never overwritten without --force).
    #[arg(long)]
    pub out: PathBuf,
    /// Name in the remote's certificate (DNS name or IP address; repeatable). The edge's
    /// [pool.tls] server_name must be one of them (default: the first, longhaul-remote).
    #[arg(long = "server-name")]
    pub server_name: Vec<String>,
    /// Name in the edge's certificate.
    #[arg(long, default_value = pool::tls::DEFAULT_EDGE_NAME)]
    pub edge_name: String,
    /// Validity of the edge and remote certificates, days.
    #[arg(long, default_value_t = pool::tls::DEFAULT_CERT_DAYS)]
    pub days: u32,
    /// Validity of the CA certificate, days.
    #[arg(long, default_value_t = pool::tls::DEFAULT_CA_DAYS)]
    pub ca_days: u32,
    /// Overwrite existing files.
    #[arg(long)]
    pub force: bool,
}

/// Runs `gen-keys` for `prog`; prints where each file goes.
pub fn run(prog: &str, a: &GenKeysArgs) -> ExitCode {
    let opts = GenKeysOptions {
        server_names: if a.server_name.is_empty() {
            vec![pool::tls::DEFAULT_SERVER_NAME.to_owned()]
        } else {
            a.server_name.clone()
        },
        edge_name: a.edge_name.clone(),
        days: a.days,
        ca_days: a.ca_days,
        force: a.force,
    };
    match gen_keys(&a.out, &opts) {
        Ok(paths) => {
            for p in &paths {
                println!("wrote {}", p.display());
            }
            let d = a.out.display();
            println!(
                "\nEdge host: copy ca.pem, edge.pem, edge.key and add to edge.toml:\n\
                 [pool.tls]\ncert = \"{d}/edge.pem\"\nkey = \"{d}/edge.key\"\nca = [\"{d}/ca.pem\"]\n\
                 server_name = \"{}\"\n\n\
                 Remote host: copy ca.pem, remote.pem, remote.key and add to remote.toml:\n\
                 [tls]\ncert = \"{d}/remote.pem\"\nkey = \"{d}/remote.key\"\nca = [\"{d}/ca.pem\"]\n\n\
                 Keep ca.key offline: the proxies never need it.",
                opts.server_names[0]
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{prog} gen-keys: {e}");
            ExitCode::from(1)
        }
    }
}
