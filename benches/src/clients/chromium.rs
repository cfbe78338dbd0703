//! `chromium`: headless Chromium from Debian ([`crate::chromium`]), a fresh profile per load,
//! in the client namespace. It loads pages only: not the bulk transfer, not a workload without
//! objects. `chromium-https-proxy` loads through the system's HTTPS proxy endpoint instead (TLS
//! and HTTP/2 to the proxy), for systems that have one.

use super::Client;
use crate::bed::Node;
use crate::chromium as browser;
use crate::runner::trial::Trialer;
use crate::systems::Running;
use crate::workload::Workload;
use anyhow::Result;
use std::process::Stdio;

/// The real browser.
pub struct Chromium;

/// The real browser through the system's HTTPS proxy endpoint (TLS to the proxy, HTTP/2 by
/// ALPN: many tunnels and requests as streams of one connection). Only for systems that have
/// one (longhaul's); any other fails its loads with a reason.
pub struct ChromiumHttpsProxy;

impl Client for ChromiumHttpsProxy {
    fn id(&self) -> &'static str {
        "chromium-https-proxy"
    }

    fn programs(&self) -> &'static [&'static str] {
        &["chromium"]
    }

    fn loads(&self, w: &Workload) -> bool {
        Chromium.loads(w)
    }

    fn is_browser(&self) -> bool {
        true
    }

    fn load(&self, tr: &Trialer<'_>, sys: &Running, w: &Workload, scheme: &str) -> Result<f64> {
        let Some(h) = &sys.https_proxy else {
            anyhow::bail!(
                "{} has no HTTPS proxy endpoint (chromium-https-proxy runs with longhaul systems)",
                sys.spec.label()
            );
        };
        let proxy = format!("https://{}", h.addr);
        let mut pins = h.spki_sha256.clone();
        if scheme == "https" {
            pins = format!("{pins},{}", tr.site.spki_sha256);
        }
        run_chromium(tr, w, scheme, Some(&proxy), Some(&pins), false)
    }
}

/// One load of `w` with `proxy` (a proxy URL) and `pins` (trusted key pins).
fn run_chromium(
    tr: &Trialer<'_>,
    w: &Workload,
    scheme: &str,
    proxy: Option<&str>,
    pins: Option<&str>,
    http3: bool,
) -> Result<f64> {
    tr.prepare();
    let profile = tr.scratch_dir("chromium")?;
    let args = browser::args(
        &w.url(scheme, 0),
        &profile,
        proxy,
        &tr.site.hosts,
        pins,
        http3,
    );
    let mut cmd = tr.bed.command(Node::Client, "timeout");
    cmd.arg(format!("{}", browser::DEFAULT_TIMEOUT.as_secs() + 10))
        .arg("chromium")
        .args(args);
    cmd.env("HOME", &profile).stdin(Stdio::null());
    let r = browser::run(cmd, w, scheme);
    let _ = std::fs::remove_dir_all(&profile);
    r
}

impl Client for Chromium {
    fn id(&self) -> &'static str {
        "chromium"
    }

    fn programs(&self) -> &'static [&'static str] {
        &["chromium"]
    }

    fn loads(&self, w: &Workload) -> bool {
        !w.objects.is_empty() && w.id != "bulk"
    }

    fn is_browser(&self) -> bool {
        true
    }

    fn load(&self, tr: &Trialer<'_>, sys: &Running, w: &Workload, scheme: &str) -> Result<f64> {
        let spki = (scheme == "https").then_some(tr.site.spki_sha256.as_str());
        let proxy = sys.proxy.map(|p| format!("http://{p}"));
        run_chromium(tr, w, scheme, proxy.as_deref(), spki, sys.spec.http3())
    }
}
