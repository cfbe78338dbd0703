//! A profile's bed made ready before any system starts: the origin's addresses and names,
//! nginx serving the workloads, and (`--peer-initcwnd`) the proxy hosts' routes tuned as a
//! deployment tunes them. Nothing here is measured.

use crate::bed::{Bed, Node};
use crate::origin::{OriginAlpn, Site};
use crate::workload::Workload;
use anyhow::{bail, Context, Result};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The program that serves the origins.
pub const ORIGIN_PROGRAM: &str = "nginx";

/// Prepares the site of `all` under `dir/origin`, gives the origin namespace its addresses and
/// the bed its names, tunes the peer routes when asked, and starts nginx (stopped when the
/// returned guard is dropped).
pub(super) fn serve_origin(
    bed: &dyn Bed,
    dir: &Path,
    all: &[Workload],
    peer_initcwnd: Option<u32>,
    alpn: OriginAlpn,
    log: &dyn Fn(&str),
) -> Result<(Site, Nginx)> {
    let site = Site::prepare(&dir.join(crate::origin::SITE_DIR), all, alpn)?;
    for (_, a) in &site.hosts {
        bed.add_origin_address(*a)?;
    }
    bed.set_hosts(&site.hosts)?;
    if let Some(n) = peer_initcwnd {
        tune_peer_routes(bed, n, log)?;
    }
    let nginx = Nginx(start_nginx(bed, &site)?);
    Ok((site, nginx))
}

/// The project's route script, `deploy/set-initcwnd` (next to the sources, or
/// `$LONGHAUL_DEPLOY_DIR/set-initcwnd`).
fn set_initcwnd_script() -> PathBuf {
    match std::env::var_os("LONGHAUL_DEPLOY_DIR") {
        Some(d) => PathBuf::from(d).join("set-initcwnd"),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/set-initcwnd"),
    }
}

/// Runs `deploy/set-initcwnd` in the edge and remote namespaces, each on its route to the other
/// side's address on the long link (the address the other side's connections come from), as a
/// deployment does on the two proxy hosts.
fn tune_peer_routes(bed: &dyn Bed, segments: u32, log: &dyn Fn(&str)) -> Result<()> {
    let script = set_initcwnd_script();
    let remote = bed.addr(Node::Remote);
    // The edge's source address towards the remote, as the kernel picks it.
    let out = bed
        .command(Node::Edge, "ip")
        .args(["-o", "route", "get", &remote.to_string()])
        .output()
        .context("ip route get in the edge namespace")?;
    let got = String::from_utf8_lossy(&out.stdout);
    let edge: IpAddr = got
        .split_whitespace()
        .skip_while(|t| *t != "src")
        .nth(1)
        .and_then(|a| a.parse().ok())
        .with_context(|| format!("no source address in `ip route get {remote}`: {got}"))?;
    for (node, peer) in [(Node::Remote, edge), (Node::Edge, remote)] {
        let out = bed
            .command(node, "sh")
            .arg(&script)
            .args(["--initcwnd", &segments.to_string(), &peer.to_string()])
            .output()
            .with_context(|| format!("running {}", script.display()))?;
        if !out.status.success() {
            bail!(
                "{} {peer} in the {node:?} namespace failed: {}",
                script.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        log(&format!(
            "   {node:?}: {}",
            String::from_utf8_lossy(&out.stdout).trim()
        ));
    }
    Ok(())
}

fn start_nginx(bed: &dyn Bed, site: &Site) -> Result<Child> {
    let log = std::fs::File::create(site.dir.join("nginx-stderr.log"))?;
    bed.command(Node::Origin, ORIGIN_PROGRAM)
        .args(site.nginx_args())
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .context("starting nginx in the origin namespace")
}

/// The origin's nginx master (the spawned process itself: `nsenter`, `unshare` and `sh` exec
/// into it). Stopped with SIGTERM so that the master stops its worker: SIGKILL would leave the
/// worker running, orphaned, holding every file descriptor the runner inherited (such as the
/// lock of `flock` that runs the measurement).
pub(super) struct Nginx(Child);
impl Drop for Nginx {
    fn drop(&mut self) {
        let pid = self.0.id().to_string();
        let _ = Command::new("kill")
            .args(["-TERM", &pid])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let deadline = Instant::now() + NGINX_STOP;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.0.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// How long nginx may take to stop after SIGTERM before it is killed.
const NGINX_STOP: Duration = Duration::from_secs(3);
