//! The edge's command-line flags and how they override the configuration file.
//!
//! What it does: declares the edge's own flags, which `app::process::cli` places between the
//! ones both binaries share, applies them to the configuration, and adds the edge's checks
//! (the derived pool configuration, the key files) to its validation, so `--check-config`
//! reports everything a start would.
//!
//! What it does NOT do: parse `argv` (`app::process::cli` does) or run anything, or define the keys'
//! defaults ([`crate::config`] does).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use app::config::{PolicyName, TlsSection};
use app::process::{CarrierFlags, Help};
use ipnet::IpNet;

use crate::client::ConnectReply;
use crate::config::{
    EdgeConfig, HttpsProxyConfig, SocksListen, TransparentConfig, DEFAULT_REMOTE,
    DEFAULT_TRANSPARENT_HTTP_PORTS,
};
use crate::pool_transport::{pool_config, tls_client};

/// The edge's own flags, in `--help` order (after `--config`, `--check-config` and
/// `--listen`, before the link, logging, TLS and metrics flags both binaries have).
#[derive(Debug, Clone, clap::Args)]
pub struct Flags {
    /// Remote proxy host:port; repeat for several remotes (replaces pool.remote/pool.remotes).
    #[arg(long)]
    remote: Vec<String>,
    /// Number of pool connections.
    #[arg(long)]
    connections: Option<usize>,
    /// Pool scheduling policy.
    #[arg(long, value_enum)]
    policy: Option<PolicyName>,
    // Congestion control and carrier of the pool connections.
    #[command(flatten)]
    carrier: CarrierFlags,
    /// How CONNECT is answered.
    #[arg(long, value_enum)]
    connect_reply: Option<ConnectReplyArg>,
    /// Also listen here for iptables-REDIRECTed connections.
    #[arg(long)]
    transparent: Option<SocketAddr>,
    /// SOCKS5 listener address, or `off` (replaces [socks] listen; default 127.0.0.1:1080 in
    /// development mode, off in production).
    #[arg(long, value_name = "ADDR|off")]
    socks: Option<SocksListen>,
    /// Also serve proxy clients over TLS here (HTTPS proxy endpoint, HTTP/1.1 and h2);
    /// needs a certificate and key ([https_proxy] or the two flags below).
    #[arg(long, value_name = "ADDR")]
    https_proxy: Option<SocketAddr>,
    /// Certificate chain (PEM) of the HTTPS proxy endpoint; replaces https_proxy.cert.
    #[arg(long, value_name = "PATH")]
    https_cert: Option<PathBuf>,
    /// Private key (PEM) of the HTTPS proxy endpoint; replaces https_proxy.key.
    #[arg(long, value_name = "PATH")]
    https_key: Option<PathBuf>,
    /// Ports CONNECT may reach, comma-separated (`443,8443`), or `any`; replaces connect_ports.
    #[arg(long, value_name = "PORTS", value_parser = parse_ports)]
    connect_ports: Option<PortList>,
    /// Client network allowed to use the proxy (repeatable; replaces the configured list).
    #[arg(long = "allow-client")]
    allow_client: Vec<IpNet>,
}

/// The edge's own texts in `--help`.
pub const HELP: Help = Help {
    about: "Near-side longhaul proxy: HTTP/1.1 forward proxy, CONNECT, SOCKS5 and transparent \
            interception, carried over a pool of warm connections to a remote proxy",
    listen: "Explicit proxy listen address",
    tls_dir: "Mutual TLS with the files `gen-keys --out DIR` wrote (DIR/edge.pem, \
              DIR/edge.key, DIR/ca.pem); replaces the [pool.tls] file paths",
};

/// A `--connect-ports` value (empty = any port).
#[derive(Debug, Clone)]
struct PortList(Vec<u16>);

fn parse_ports(s: &str) -> Result<PortList, String> {
    if s == "any" {
        return Ok(PortList(Vec::new()));
    }
    s.split(',')
        .map(|p| match p.trim().parse::<u16>() {
            Ok(n) if n > 0 => Ok(n),
            _ => Err(format!("{p:?} is not a port (1-65535) or `any`")),
        })
        .collect::<Result<_, _>>()
        .map(PortList)
}

/// A `--connect-reply` value (no doc per value: `--help` lists the names only).
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum ConnectReplyArg {
    Optimistic,
    AfterConnect,
}

impl app::process::Flags for Flags {
    type Config = EdgeConfig;

    fn apply(&self, cfg: &mut EdgeConfig) {
        match self.remote.as_slice() {
            [] => {}
            [one] => {
                cfg.pool.remote = one.clone();
                cfg.pool.remotes.clear();
            }
            many => {
                cfg.pool.remote = DEFAULT_REMOTE.into();
                cfg.pool.remotes = many.to_vec();
            }
        }
        if let Some(v) = self.connections {
            cfg.pool.connections = v;
        }
        if let Some(v) = self.policy {
            cfg.pool.policy = Some(v);
        }
        self.carrier.apply(
            &mut cfg.pool.congestion,
            &mut cfg.pool.carrier,
            &mut cfg.pool.quic,
        );
        if let Some(v) = self.connect_reply {
            cfg.connect_reply = match v {
                ConnectReplyArg::Optimistic => ConnectReply::Optimistic,
                ConnectReplyArg::AfterConnect => ConnectReply::AfterConnect,
            };
        }
        if let Some(v) = self.transparent {
            match &mut cfg.transparent {
                Some(t) => t.listen = v,
                None => {
                    cfg.transparent = Some(TransparentConfig {
                        listen: v,
                        tproxy: false,
                        http_ports: DEFAULT_TRANSPARENT_HTTP_PORTS.to_vec(),
                    })
                }
            }
        }
        if let Some(v) = self.socks {
            cfg.socks.listen = Some(v);
        }
        if let Some(v) = self.https_proxy {
            // Without a section, the certificate and key come from the flags below; missing
            // ones are reported by the check of the key files.
            let h = cfg
                .https_proxy
                .get_or_insert_with(|| HttpsProxyConfig::new(v, PathBuf::new(), PathBuf::new()));
            h.listen = v;
        }
        if let Some(h) = &mut cfg.https_proxy {
            if let Some(c) = &self.https_cert {
                h.cert = c.clone();
            }
            if let Some(k) = &self.https_key {
                h.key = k.clone();
            }
        }
        if let Some(p) = &self.connect_ports {
            cfg.connect_ports = p.0.clone();
        }
        if !self.allow_client.is_empty() {
            cfg.allowed_clients = self.allow_client.clone();
        }
    }

    fn use_tls_dir(cfg: &mut EdgeConfig, dir: &Path) {
        // A configured server name stays: the files do not say which name the remote has.
        let name = cfg.pool.tls.as_ref().and_then(|t| t.server_name.clone());
        cfg.pool.tls = Some(TlsSection {
            server_name: name,
            ..TlsSection::from_dir(dir, "edge")
        });
    }

    fn check(cfg: &EdgeConfig) -> anyhow::Result<()> {
        pool_config(cfg)
            .validate()
            .map_err(|e| anyhow::anyhow!("invalid pool configuration: {e}"))?;
        tls_client(cfg).map_err(|e| anyhow::anyhow!("invalid configuration: {e}"))?;
        if let Some(h) = &cfg.https_proxy {
            if h.cert.as_os_str().is_empty() || h.key.as_os_str().is_empty() {
                anyhow::bail!(
                    "invalid configuration: the HTTPS proxy endpoint needs https_proxy.cert and \
                     https_proxy.key (or --https-cert and --https-key)"
                );
            }
            pool::tls::TlsEndpoint::new(h.cert.clone(), h.key.clone())
                .map_err(|e| anyhow::anyhow!("invalid configuration: [https_proxy]: {e}"))?;
        }
        Ok(())
    }
}
