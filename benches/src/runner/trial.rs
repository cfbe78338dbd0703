//! One client process at a time in the client namespace: the replay client (`pageload
//! replay-once`), the offered-load client (`pageload load-once`), and what a
//! [`crate::clients::Client`] needs to start its own (the bed, the site, a scratch directory,
//! the trials file). It neither schedules nor summarises loads.

use crate::bed::{Bed, Node};
use crate::load::LoadRun;
use crate::origin::Site;
use crate::replay::PageLoad;
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

/// Runs client processes in one profile's bed.
pub struct Trialer<'a> {
    /// The test bed.
    pub bed: &'a dyn Bed,
    /// The origins: host names, addresses, the CA and its key's pin.
    pub site: &'a Site,
    pub(crate) workloads_dir: &'a Path,
    pub(crate) tmp: PathBuf,
    pub(crate) trials: PathBuf,
    pub(crate) counter: std::cell::Cell<u64>,
}

impl Trialer<'_> {
    /// Starts no further client once a signal is tearing the beds down (one started after the
    /// cleanup's sweep of the namespaces would outlive the run): waits for the exit instead.
    fn may_start(&self) {
        testbed::signals::hold_if_stopping();
    }

    /// Makes the bed ready for the next client process: holds it while a signal tears the
    /// beds down, restores the bed's hosts file if it was removed from outside.
    pub fn prepare(&self) {
        self.may_start();
        self.heal();
    }

    /// A fresh directory `PREFIX-N` under the profile's scratch directory, for one load.
    pub fn scratch_dir(&self, prefix: &str) -> Result<PathBuf> {
        let n = self.counter.get();
        self.counter.set(n + 1);
        let d = self.tmp.join(format!("{prefix}-{n}"));
        std::fs::create_dir_all(&d)?;
        Ok(d)
    }

    /// Appends `line` to the profile's `trials.jsonl` (best effort: a load is not lost for a
    /// trial line that could not be written).
    pub fn record_trial(&self, line: &serde_json::Value) {
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.trials)
        {
            use std::io::Write as _;
            let _ = writeln!(f, "{line}");
        }
    }

    fn heal(&self) {
        match self.bed.heal() {
            Ok(false) => {}
            Ok(true) => eprintln!(
                "   warning: the test bed's hosts file had been removed from outside; restored it"
            ),
            Err(e) => eprintln!("   warning: restoring the test bed's hosts file: {e:#}"),
        }
    }

    /// One replay load of workload `w` over `scheme` through `proxy` (none: direct).
    pub fn replay(
        &self,
        proxy: Option<std::net::SocketAddr>,
        w: &str,
        scheme: &str,
    ) -> Result<PageLoad> {
        self.replay_over(proxy, w, scheme, false)
    }

    /// [`Trialer::replay`], over HTTP/3 when `http3` (HTTPS only, direct), else HTTPS offers
    /// what the origin offers.
    pub fn replay_over(
        &self,
        proxy: Option<std::net::SocketAddr>,
        w: &str,
        scheme: &str,
        http3: bool,
    ) -> Result<PageLoad> {
        self.prepare();
        let exe = std::env::current_exe()?;
        let mut cmd = self.bed.command(Node::Client, &exe.display().to_string());
        cmd.args(["replay-once", "--workloads-dir"])
            .arg(self.workloads_dir)
            .args(["--workload", w, "--scheme", scheme, "--ca"])
            .arg(&self.site.ca_pem)
            .args([
                "--https",
                if http3 { "h3" } else { self.site.alpn.as_str() },
            ]);
        if let Some(p) = proxy {
            cmd.args(["--proxy", &p.to_string()]);
        }
        for (h, a) in &self.site.hosts {
            cmd.args(["--resolve", &format!("{h}={a}")]);
        }
        cmd.env("RUST_BACKTRACE", "0");
        let out = cmd
            .stdin(Stdio::null())
            .output()
            .context("running replay-once")?;
        if !out.status.success() {
            let err = String::from_utf8_lossy(&out.stderr);
            let msg: Vec<&str> = err
                .lines()
                .map(str::trim)
                .filter(|l| !l.is_empty() && *l != "Caused by:")
                .collect();
            bail!("replay: {}", msg.join(" "));
        }
        serde_json::from_slice(&out.stdout).context("parsing replay-once output")
    }

    /// Page loads of `w` arriving at `rate` per second for `window` through `proxy` (one
    /// offered-load point).
    pub fn load(
        &self,
        proxy: Option<std::net::SocketAddr>,
        w: &str,
        rate: f64,
        window: Duration,
        seed: u64,
    ) -> Result<LoadRun> {
        self.prepare();
        let exe = std::env::current_exe()?;
        let mut cmd = self.bed.command(Node::Client, &exe.display().to_string());
        cmd.args(["load-once", "--workloads-dir"])
            .arg(self.workloads_dir)
            .args([
                "--workload",
                w,
                "--rate",
                &format!("{rate}"),
                "--window-ms",
                &window.as_millis().to_string(),
            ])
            .args(["--seed", &seed.to_string()]);
        if let Some(p) = proxy {
            cmd.args(["--proxy", &p.to_string()]);
        }
        for (h, a) in &self.site.hosts {
            cmd.args(["--resolve", &format!("{h}={a}")]);
        }
        let customers = self.bed.customer_addresses();
        if !customers.is_empty() {
            let list: Vec<String> = customers.iter().map(|a| a.to_string()).collect();
            cmd.args(["--customers", &list.join(",")]);
        }
        cmd.env("RUST_BACKTRACE", "0");
        let out = cmd
            .stdin(Stdio::null())
            .output()
            .context("running load-once")?;
        if !out.status.success() {
            bail!("load-once: {}", String::from_utf8_lossy(&out.stderr).trim());
        }
        serde_json::from_slice(&out.stdout).context("parsing load-once output")
    }
}
