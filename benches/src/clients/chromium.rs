//! `chromium`: headless Chromium from Debian ([`crate::chromium`]), a fresh profile per load,
//! in the client namespace. It loads pages only: not the bulk transfer, not a workload without
//! objects.

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
        tr.prepare();
        let profile = tr.scratch_dir("chromium")?;
        let spki = (scheme == "https").then_some(tr.site.spki_sha256.as_str());
        let args = browser::args(
            &w.url(scheme, 0),
            &profile,
            sys.proxy,
            &tr.site.hosts,
            spki,
            sys.spec.http3(),
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
}
