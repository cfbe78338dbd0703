//! `longhaul-tcp` and `longhaul-quic`: longhaul's edge-proxy (edge namespace) and remote-proxy
//! (remote namespace) over a pool of mutual-TLS 1.3 TCP connections, or of QUIC connections
//! (UDP, TLS 1.3 built in, one QUIC stream per request). One type, one registry entry per
//! carrier.
//!
//! Each variant (pool size, congestion control, policy, stream window) gets its own edge-proxy;
//! the remote-proxies are shared between the variants ([`System::start_shared`]): one per
//! carrier, congestion control and reply policy, because the far side sends most bytes and
//! places the replies.

use super::{
    own_dir, spawn, HttpsProxy, Running, Shared, Start, System, SystemSpec, ORIGIN_IDLE_SECS, PORTS,
};
use crate::bed::{Bed, Node};
use anyhow::{bail, Context, Result};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};

/// longhaul over one carrier.
pub struct Longhaul {
    id: &'static str,
    carrier: &'static str,
}

/// The id of longhaul over a TCP pool.
pub const TCP_ID: &str = "longhaul-tcp";
/// The id of longhaul over a QUIC pool.
pub const QUIC_ID: &str = "longhaul-quic";

/// longhaul over a TCP pool.
pub static TCP: Longhaul = Longhaul {
    id: TCP_ID,
    carrier: "tcp",
};

/// longhaul over a QUIC pool.
pub static QUIC: Longhaul = Longhaul {
    id: QUIC_ID,
    carrier: "quic",
};

/// Congestion control a variant runs when it names none.
const DEFAULT_CONGESTION: &str = "bbr";
/// Pool size a variant runs when it names none.
const DEFAULT_POOL_SIZE: u32 = 10;

impl System for Longhaul {
    fn id(&self) -> &'static str {
        self.id
    }

    fn carrier(&self) -> Option<&'static str> {
        Some(self.carrier)
    }

    fn start_shared(
        &self,
        bed: &dyn Bed,
        dir: &Path,
        variants: &[&SystemSpec],
    ) -> Result<Vec<Shared>> {
        let mut remotes: Vec<Shared> = Vec::new();
        for c in CONGESTION {
            for policy in POLICIES {
                if variants.iter().any(|s| {
                    s.params.congestion.as_deref().unwrap_or(DEFAULT_CONGESTION) == c
                        && s.params.policy.as_deref().unwrap_or(POLICIES[0]) == policy
                }) {
                    remotes.push(Box::new(start_longhaul_remote(
                        bed,
                        dir,
                        self.carrier,
                        c,
                        policy,
                    )?));
                }
            }
        }
        Ok(remotes)
    }

    fn start(&self, at: &Start<'_>, spec: &SystemSpec, r: &mut Running) -> Result<()> {
        let k = at.slot;
        let carrier = self.carrier;
        let listen = SocketAddr::new(at.bed.addr(Node::Edge), PORTS.longhaul_edge_base + k as u16);
        let d = own_dir(at.dir, &format!("longhaul-edge-{k}"))?;
        let link = at.bed.link();
        let p = &spec.params;
        let policy = p.policy.as_deref().unwrap_or(POLICIES[0]);
        let congestion = p.congestion.as_deref().unwrap_or(DEFAULT_CONGESTION);
        let remote = SocketAddr::new(
            at.bed.addr(Node::Remote),
            longhaul_remote_port(carrier, congestion, policy)?,
        );
        let mut args: Vec<String> = vec![
            "--listen".into(),
            listen.to_string(),
            "--tls-dir".into(),
            longhaul_keys(at.dir)?.display().to_string(),
            "--remote".into(),
            remote.to_string(),
            "--carrier".into(),
            carrier.into(),
            "--connections".into(),
            p.pool_size.unwrap_or(DEFAULT_POOL_SIZE).to_string(),
            "--policy".into(),
            policy.into(),
            "--congestion".into(),
            congestion.into(),
            "--link-rtt-ms".into(),
            format!("{:.0}", link.long_rtt_ms.max(1.0)),
            "--link-rate-mbit".into(),
            format!("{:.0}", (link.rate_bps / 1e6).max(1.0)),
        ];
        if let Some(w) = p.stream_window_bdp {
            args.extend(["--stream-window-bdp".into(), w.to_string()]);
        }
        // The HTTPS proxy endpoint, with a certificate of its own (clients pin its key).
        let https = SocketAddr::new(
            at.bed.addr(Node::Edge),
            PORTS.longhaul_https_base + k as u16,
        );
        let spki = endpoint_certificate(&d, https)?;
        args.extend([
            "--https-proxy".into(),
            https.to_string(),
            "--https-cert".into(),
            d.join("https.pem").display().to_string(),
            "--https-key".into(),
            d.join("https.key").display().to_string(),
        ]);
        let bin = longhaul_bin("edge-proxy")?;
        let c = spawn(
            at.bed,
            Node::Edge,
            &bin.display().to_string(),
            &args,
            &d.join("stderr.log"),
        )?;
        r.children.push(("edge-proxy".into(), c));
        r.proxy = Some(listen);
        r.https_proxy = Some(HttpsProxy {
            addr: https,
            spki_sha256: spki,
        });
        Ok(())
    }
}

/// Writes a self-signed certificate for the HTTPS proxy endpoint at `addr` (`dir/https.pem`,
/// `dir/https.key`); returns its key's SPKI SHA-256 in base64.
fn endpoint_certificate(dir: &Path, addr: SocketAddr) -> Result<String> {
    let key = rcgen::KeyPair::generate()?;
    let cert = rcgen::CertificateParams::new(vec![addr.ip().to_string()])?.self_signed(&key)?;
    std::fs::write(dir.join("https.pem"), cert.pem())?;
    std::fs::write(dir.join("https.key"), key.serialize_pem())?;
    let spki = ring::digest::digest(&ring::digest::SHA256, &key.public_key_der());
    Ok(crate::origin::base64_encode(spki.as_ref()))
}

/// Where the longhaul binaries are: next to the running executable (same target directory),
/// or in `$LONGHAUL_BIN_DIR`.
pub fn longhaul_bin(name: &str) -> Result<PathBuf> {
    let dir = match std::env::var_os("LONGHAUL_BIN_DIR") {
        Some(d) => PathBuf::from(d),
        None => std::env::current_exe()?
            .parent()
            .context("executable has no directory")?
            .to_path_buf(),
    };
    let p = dir.join(name);
    if !p.is_file() {
        bail!(
            "{} not found: build it first (cargo build --release -p longhaul) \
             or set LONGHAUL_BIN_DIR",
            p.display()
        );
    }
    Ok(p)
}

/// The pool's mutual-TLS files for this run (made once with `edge-proxy gen-keys`): longhaul
/// is measured as it is deployed, with TLS 1.3 between the proxies.
fn longhaul_keys(base: &Path) -> Result<PathBuf> {
    let d = base.join("longhaul-keys");
    if !d.join("remote.pem").exists() {
        let out = Command::new(longhaul_bin("edge-proxy")?)
            .arg("gen-keys")
            .arg("--out")
            .arg(&d)
            .output()?;
        if !out.status.success() {
            bail!(
                "edge-proxy gen-keys failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
    }
    Ok(d)
}

/// Shared pieces the longhaul variants use: one remote-proxy serves every edge-proxy variant.
pub struct LonghaulRemote {
    child: Child,
}

impl Drop for LonghaulRemote {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Congestion controls the remote-proxies are started with. The far side sends most bytes
/// and places the replies, so each carrier, congestion control and placement policy gets its
/// own remote-proxy: the one for `CONGESTION[i]` and `POLICIES[j]` listens on
/// `PORTS.longhaul_remote + j × 3 + i` (TCP) or `PORTS.longhaul_quic_remote + j × 3 + i`
/// (QUIC, UDP).
pub const CONGESTION: [&str; 4] = ["bbr", "cubic", "reno", "rate"];

/// Placement policies, as `--policy` (edge) and `--reply-policy` (remote) name them.
pub const POLICIES: [&str; 5] = [
    "least-outstanding",
    "round-robin",
    "fewest-streams",
    "expected-completion",
    "pack",
];

/// Carriers of the longhaul systems, as `--carrier` names them.
pub const CARRIERS: [&str; 2] = ["tcp", "quic"];

/// Port of the remote-proxy running `carrier` with `congestion`, placing replies by `policy`.
pub fn longhaul_remote_port(carrier: &str, congestion: &str, policy: &str) -> Result<u16> {
    let i = CONGESTION
        .iter()
        .position(|c| *c == congestion)
        .with_context(|| {
            format!("unknown congestion control {congestion:?} (one of {CONGESTION:?})")
        })?;
    let j = POLICIES
        .iter()
        .position(|p| *p == policy)
        .with_context(|| format!("unknown policy {policy:?} (one of {POLICIES:?})"))?;
    let base = match carrier {
        "tcp" => PORTS.longhaul_remote,
        "quic" => PORTS.longhaul_quic_remote,
        other => bail!("unknown carrier {other:?} (one of {CARRIERS:?})"),
    };
    Ok(base + (j * CONGESTION.len() + i) as u16)
}

/// Starts longhaul's remote-proxy for `carrier` with `congestion`, placing replies by
/// `policy`, in the remote namespace.
pub fn start_longhaul_remote(
    bed: &dyn Bed,
    dir: &Path,
    carrier: &str,
    congestion: &str,
    policy: &str,
) -> Result<LonghaulRemote> {
    let mut name = match carrier {
        "tcp" => format!("longhaul-remote-{congestion}"),
        _ => format!("longhaul-remote-{carrier}-{congestion}"),
    };
    if policy != POLICIES[0] {
        name = format!("{name}-{policy}");
    }
    let d = own_dir(dir, &name)?;
    let link = bed.link();
    let listen = SocketAddr::new(
        bed.addr(Node::Remote),
        longhaul_remote_port(carrier, congestion, policy)?,
    );
    let bin = longhaul_bin("remote-proxy")?;
    // Same rule as the peers: origin connections do not stay warm from one visit to the next.
    let conf = d.join("remote-proxy.toml");
    std::fs::write(
        &conf,
        format!(
            "# generated by pageload\norigin_idle_timeout_ms = {}\n",
            ORIGIN_IDLE_SECS * 1000
        ),
    )?;
    let args = vec![
        "--config".into(),
        conf.display().to_string(),
        "--listen".into(),
        listen.to_string(),
        "--tls-dir".into(),
        longhaul_keys(dir)?.display().to_string(),
        "--allow-private-targets".into(),
        "--carrier".into(),
        carrier.into(),
        "--congestion".into(),
        congestion.into(),
        "--reply-policy".into(),
        policy.into(),
        "--link-rtt-ms".into(),
        format!("{:.0}", link.long_rtt_ms.max(1.0)),
        "--link-rate-mbit".into(),
        format!("{:.0}", (link.rate_bps / 1e6).max(1.0)),
    ];
    let child = spawn(
        bed,
        Node::Remote,
        &bin.display().to_string(),
        &args,
        &d.join("stderr.log"),
    )?;
    Ok(LonghaulRemote { child })
}
