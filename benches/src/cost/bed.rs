//! The cost runner's bed: every node on the loopback device of one private network namespace.
//! The runner re-executes itself under `unshare --net` (adding `--user --map-root-user`
//! when not root), brings `lo` up and gives it the test bed's node addresses, so the systems
//! start from the same configuration code as in `pageload` (edge 10.77.1.1, remote 10.77.2.2,
//! origin 10.77.3.10), on their usual fixed ports, without meeting anything else on the
//! machine; the proxies see non-loopback addresses, so they run in their production mode
//! (the pool on mutual TLS).
//!
//! There is no link emulation: every hop is the kernel's loopback. The proxies' windows are
//! still sized from a configured long link ([`LoopbackBed::link`]), as they would be deployed.

use crate::bed::{Bed, LinkInfo, Node};
use anyhow::{bail, Context, Result};
use std::net::IpAddr;
use std::process::Command;

/// Set in the environment of the re-executed runner, inside its namespace.
pub const IN_NETNS_ENV: &str = "LONGHAUL_COST_NETNS";

/// Address of each node on `lo`.
const ADDRS: [[u8; 4]; 4] = [
    [10, 77, 1, 2],
    [10, 77, 1, 1],
    [10, 77, 2, 2],
    [10, 77, 3, 10],
];

/// Whether this process already runs in the runner's private namespace.
pub fn in_private_netns() -> bool {
    std::env::var_os(IN_NETNS_ENV).is_some()
}

/// Runs this program again, with the same arguments, in a private network namespace, and
/// returns its exit code.
pub fn reexec_in_private_netns() -> Result<i32> {
    let root = Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false);
    let mut c = Command::new("unshare");
    if !root {
        c.args(["--user", "--map-root-user"]);
    }
    c.arg("--net")
        .arg("--")
        .arg(std::env::current_exe()?)
        .args(std::env::args_os().skip(1))
        .env(IN_NETNS_ENV, "1");
    let st = c
        .status()
        .context("running unshare --net (needs root or user namespaces)")?;
    Ok(st.code().unwrap_or(1))
}

/// All four nodes on `lo` of the current (private) namespace.
pub struct LoopbackBed {
    link: LinkInfo,
}

fn ip(args: &[&str]) -> Result<()> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .context("running ip")?;
    if !out.status.success() {
        bail!(
            "ip {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

impl LoopbackBed {
    /// Brings `lo` up with the node addresses (call only inside the private namespace). The
    /// proxies size their windows for a long link of `long_rtt_ms` and `rate_mbit`.
    pub fn up(long_rtt_ms: f64, rate_mbit: f64) -> Result<LoopbackBed> {
        if !in_private_netns() {
            bail!("the loopback bed needs the runner's private network namespace");
        }
        ip(&["link", "set", "lo", "up"])?;
        for a in ADDRS {
            ip(&[
                "addr",
                "add",
                &format!("{}/32", IpAddr::from(a)),
                "dev",
                "lo",
            ])?;
        }
        Ok(LoopbackBed {
            link: LinkInfo {
                profile: "loopback".into(),
                rtt_ms: 0.0,
                long_rtt_ms,
                rate_bps: rate_mbit * 1e6,
            },
        })
    }
}

impl Bed for LoopbackBed {
    fn link(&self) -> LinkInfo {
        self.link.clone()
    }
    fn addr(&self, node: Node) -> IpAddr {
        IpAddr::from(ADDRS[node as usize])
    }
    fn command(&self, _node: Node, program: &str) -> Command {
        Command::new(program)
    }
    fn set_hosts(&self, _entries: &[(String, IpAddr)]) -> Result<()> {
        bail!("the loopback bed has no host names: requests name the origin by address")
    }
    fn add_origin_address(&self, a: IpAddr) -> Result<()> {
        ip(&["addr", "add", &format!("{a}/32"), "dev", "lo"])
    }
    fn set_initcwnd(&self, _node: Node, _segments: u32) -> Result<()> {
        bail!("the loopback bed does not tune routes")
    }
}
