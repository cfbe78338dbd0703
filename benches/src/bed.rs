//! What the runner needs from a test bed: the emulated long link ([`EmulatedBed`], the `testbed`
//! crate's `Topology`), and a plain-veth bed for checking the plumbing.
//!
//! [`Bed`] is the slice of the test bed's `Topology` API the runner uses (run a program in a
//! node's namespace, name origin hosts, add origin addresses, set the initial window). The
//! emulated long link itself comes from the `testbed` crate; [`VethBed`] joins the same four
//! namespaces with plain veth pairs and **no** delay or rate limit: it exists to check that
//! origins, peers and clients start and talk, and its timings mean nothing about long links
//! (its profile is named `veth-nodelay` so no result can be mistaken for a link profile).

use anyhow::{bail, Context, Result};
use std::net::IpAddr;
use std::process::Command;

/// The four nodes of the test bed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Node {
    /// Where the clients run.
    Client,
    /// Near side of the long link (edge proxies, the single near-side proxy).
    Edge,
    /// Far side of the long link (remote proxies, parents).
    Remote,
    /// The origin servers.
    Origin,
}

/// The link as the analytic floor and the proxies' BDP sizing see it.
#[derive(Debug, Clone, PartialEq)]
pub struct LinkInfo {
    /// Profile name.
    pub profile: String,
    /// Client-to-origin round trip in ms (all three links).
    pub rtt_ms: f64,
    /// Round trip of the long link alone in ms.
    pub long_rtt_ms: f64,
    /// Downstream rate of the long link in bit/s.
    pub rate_bps: f64,
}

/// The emulator's counters for the long link: (down, up).
pub type LongLink = (
    testbed::model::DirectionStats,
    testbed::model::DirectionStats,
);

/// A running test bed.
pub trait Bed {
    /// The link the bed emulates.
    fn link(&self) -> LinkInfo;
    /// Main address of `node`.
    fn addr(&self, node: Node) -> IpAddr;
    /// A command running `program` in `node`'s namespace.
    fn command(&self, node: Node, program: &str) -> Command;
    /// Host name entries every namespace's resolver sees.
    fn set_hosts(&self, entries: &[(String, IpAddr)]) -> Result<()>;
    /// An extra address on the origin node.
    fn add_origin_address(&self, ip: IpAddr) -> Result<()>;
    /// The client node's addresses for simulated customers, one each
    /// (`testbed::topology::customer_addrs`).
    fn customer_addresses(&self) -> Vec<IpAddr> {
        testbed::topology::customer_addrs()
            .into_iter()
            .map(IpAddr::from)
            .collect()
    }
    /// Initial congestion and receive window on `node`'s routes, in segments.
    fn set_initcwnd(&self, node: Node, segments: u32) -> Result<()>;
    /// The emulator's counters for the long link's down (remote → edge, where replies
    /// queue) and up (edge → remote: requests and acknowledgements) directions; `None`
    /// where no link is emulated.
    fn long_link(&self) -> Option<LongLink> {
        None
    }
    /// UDP datagrams the kernel of `node`'s namespace dropped at a full socket receive buffer
    /// since the namespace came up (`app::host::read_udp_receive_buffer_errors_in`); `None`
    /// where the bed cannot read it.
    fn udp_receive_buffer_errors(&self, _node: Node) -> Option<u64> {
        None
    }
    /// Restores files the bed's commands depend on if something outside removed them;
    /// returns whether anything had to be restored.
    fn heal(&self) -> Result<bool> {
        Ok(false)
    }
}

impl From<Node> for testbed::Node {
    fn from(n: Node) -> testbed::Node {
        match n {
            Node::Client => testbed::Node::Client,
            Node::Edge => testbed::Node::Edge,
            Node::Remote => testbed::Node::Remote,
            Node::Origin => testbed::Node::Origin,
        }
    }
}

/// The test bed's emulated topology for a named profile.
pub struct EmulatedBed {
    topo: testbed::Topology,
    /// The host entries last set (to restore the hosts file, see [`Bed::heal`]).
    hosts: std::sync::Mutex<Vec<(String, IpAddr)>>,
}

impl EmulatedBed {
    /// Brings up `profile` (one of `testbed::Profile::names()`).
    pub fn up(profile: &str) -> Result<EmulatedBed> {
        let p = testbed::Profile::named(profile).with_context(|| {
            format!(
                "unknown profile {profile:?} (one of {:?})",
                testbed::Profile::names()
            )
        })?;
        EmulatedBed::with_profile(&p)
    }

    /// Brings up any profile, such as one read from a file (`pageload --profile-file`).
    pub fn with_profile(p: &testbed::Profile) -> Result<EmulatedBed> {
        let topo =
            testbed::Topology::up(p).with_context(|| format!("bringing up profile {}", p.name))?;
        Ok(EmulatedBed {
            topo,
            hosts: std::sync::Mutex::new(Vec::new()),
        })
    }
}

impl Bed for EmulatedBed {
    fn link(&self) -> LinkInfo {
        let p = self.topo.profile();
        let ms = |d: std::time::Duration| d.as_secs_f64() * 1000.0;
        LinkInfo {
            profile: p.name.clone(),
            rtt_ms: ms(p.path_rtt()),
            long_rtt_ms: ms(p.rtt()),
            rate_bps: p.down.rate_bps.unwrap_or(0) as f64,
        }
    }
    fn addr(&self, node: Node) -> IpAddr {
        self.topo.addr(node.into())
    }
    fn command(&self, node: Node, program: &str) -> Command {
        self.topo.command(node.into(), program)
    }
    fn set_hosts(&self, entries: &[(String, IpAddr)]) -> Result<()> {
        *self
            .hosts
            .lock()
            .map_err(|_| anyhow::anyhow!("hosts lock poisoned"))? = entries.to_vec();
        self.topo.set_hosts(entries)
    }
    fn add_origin_address(&self, ip: IpAddr) -> Result<()> {
        self.topo.add_origin_address(ip)
    }
    fn heal(&self) -> Result<bool> {
        // Every command bind-mounts the bed's hosts file: if a cleaner of /tmp removed the
        // bed's private directory, recreate it instead of failing every later trial.
        let path = self.topo.hosts_path();
        if path.exists() {
            return Ok(false);
        }
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let entries = self
            .hosts
            .lock()
            .map_err(|_| anyhow::anyhow!("hosts lock poisoned"))?
            .clone();
        self.topo.set_hosts(&entries)?;
        Ok(true)
    }
    fn set_initcwnd(&self, node: Node, segments: u32) -> Result<()> {
        self.topo.set_initcwnd(node.into(), segments)
    }
    fn long_link(&self) -> Option<LongLink> {
        let (down, up) = self.topo.long_link_stats();
        Some((down.model, up.model))
    }
    fn udp_receive_buffer_errors(&self, node: Node) -> Option<u64> {
        // A thread that entered the namespace reads its own view of /proc/net.
        let net = std::path::Path::new("/proc/thread-self/net");
        self.topo
            .run_in(node.into(), || {
                app::host::read_udp_receive_buffer_errors_in(net)
            })
            .ok()?
            .ok()
    }
}

fn run(cmd: &mut Command) -> Result<String> {
    let out = cmd.output().with_context(|| format!("running {cmd:?}"))?;
    if !out.status.success() {
        bail!(
            "{cmd:?} failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn ip(args: &[&str]) -> Result<String> {
    run(Command::new("ip").args(args))
}

/// Four namespaces joined by veth pairs without any emulation (plumbing checks only).
pub struct VethBed {
    names: [String; 4],
    /// Deletes the namespaces (and kills what runs in them) if the program gets a signal.
    _on_signal: testbed::signals::Registration,
}

const ADDRS: [[u8; 4]; 4] = [
    [10, 77, 1, 2],
    [10, 77, 1, 1],
    [10, 77, 2, 2],
    [10, 77, 3, 2],
];

impl VethBed {
    /// Creates the namespaces (needs root).
    pub fn up() -> Result<VethBed> {
        let p = format!("lhb{}", std::process::id());
        let names = [
            format!("{p}c"),
            format!("{p}e"),
            format!("{p}r"),
            format!("{p}o"),
        ];
        let doomed = names.clone();
        let bed = VethBed {
            names,
            _on_signal: testbed::signals::on_signal(move || {
                for n in &doomed {
                    delete_netns(n);
                }
            }),
        };
        bed.build().context("building the veth bed (needs root)")?;
        Ok(bed)
    }

    fn ns(&self, node: Node) -> &str {
        &self.names[node as usize]
    }

    /// Runs `f` on a fresh thread inside `node`'s namespace (entered through the name
    /// `ip netns add` gave it, `/run/netns/NAME`) and returns its result: sockets `f` opens
    /// belong to that namespace, and `/proc/thread-self/net` is that namespace's view.
    pub fn run_in<T: Send>(&self, node: Node, f: impl FnOnce() -> T + Send) -> Result<T> {
        let name = self.ns(node);
        let ns = std::fs::File::open(std::path::Path::new("/run/netns").join(name))
            .with_context(|| format!("opening namespace {name}"))?;
        std::thread::scope(|s| {
            s.spawn(|| -> Result<T> {
                netsys::setns_net(&ns).with_context(|| format!("entering namespace {name}"))?;
                Ok(f())
            })
            .join()
            .map_err(|_| anyhow::anyhow!("thread in namespace {name} panicked"))?
        })
    }

    fn build(&self) -> Result<()> {
        for n in &self.names {
            ip(&["netns", "add", n])?;
            ip(&["-n", n, "link", "set", "lo", "up"])?;
            // IPv4 only, as on the emulated bed. With IPv6 on, each veth's link-local address
            // leaves its tentative state a second or two after the link comes up; Chromium sees
            // the address change and aborts its requests in flight with ERR_NETWORK_CHANGED
            // (found in its net-log), so the first loads after the bed came up lost objects.
            for key in ["all", "default"] {
                run(Command::new("ip").args([
                    "netns",
                    "exec",
                    n,
                    "sysctl",
                    "-qw",
                    &format!("net.ipv6.conf.{key}.disable_ipv6=1"),
                ]))?;
            }
        }
        let [c, e, r, o] = &self.names;
        let pairs = [(c, "c0", e, "e0"), (e, "e1", r, "r0"), (r, "r1", o, "o0")];
        for (a, an, b, bn) in pairs {
            ip(&[
                "link", "add", an, "netns", a, "type", "veth", "peer", "name", bn, "netns", b,
            ])?;
        }
        let addrs = [
            (c, "c0", "10.77.1.2/24"),
            (e, "e0", "10.77.1.1/24"),
            (e, "e1", "10.77.2.1/24"),
            (r, "r0", "10.77.2.2/24"),
            (r, "r1", "10.77.3.1/24"),
            (o, "o0", "10.77.3.2/24"),
        ];
        for (n, dev, a) in addrs {
            ip(&["-n", n, "addr", "add", a, "dev", dev])?;
            ip(&["-n", n, "link", "set", dev, "up"])?;
        }
        for a in testbed::topology::customer_addrs() {
            ip(&["-n", c, "addr", "add", &format!("{a}/32"), "dev", "c0"])?;
        }
        ip(&["-n", c, "route", "add", "default", "via", "10.77.1.1"])?;
        ip(&["-n", e, "route", "add", "10.77.3.0/24", "via", "10.77.2.2"])?;
        ip(&["-n", r, "route", "add", "10.77.1.0/24", "via", "10.77.2.1"])?;
        ip(&["-n", o, "route", "add", "default", "via", "10.77.3.1"])?;
        for n in [e, r] {
            run(Command::new("ip").args([
                "netns",
                "exec",
                n,
                "sysctl",
                "-qw",
                "net.ipv4.ip_forward=1",
            ]))?;
        }
        Ok(())
    }
}

impl Bed for VethBed {
    fn link(&self) -> LinkInfo {
        LinkInfo {
            profile: "veth-nodelay".into(),
            rtt_ms: 0.0,
            long_rtt_ms: 0.0,
            rate_bps: 10e9,
        }
    }
    fn addr(&self, node: Node) -> IpAddr {
        IpAddr::from(ADDRS[node as usize])
    }
    fn command(&self, node: Node, program: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", self.ns(node), program]);
        c
    }
    fn udp_receive_buffer_errors(&self, node: Node) -> Option<u64> {
        let net = std::path::Path::new("/proc/thread-self/net");
        self.run_in(node, || app::host::read_udp_receive_buffer_errors_in(net))
            .ok()?
            .ok()
    }
    fn set_hosts(&self, entries: &[(String, IpAddr)]) -> Result<()> {
        let mut text = String::from("127.0.0.1 localhost\n::1 localhost\n");
        for (h, a) in entries {
            text.push_str(&format!("{a} {h}\n"));
        }
        for n in &self.names {
            let d = std::path::Path::new("/etc/netns").join(n);
            std::fs::create_dir_all(&d)?;
            std::fs::write(d.join("hosts"), &text)?;
        }
        Ok(())
    }
    fn add_origin_address(&self, a: IpAddr) -> Result<()> {
        ip(&[
            "-n",
            self.ns(Node::Origin),
            "addr",
            "add",
            &format!("{a}/24"),
            "dev",
            "o0",
        ])?;
        Ok(())
    }
    fn set_initcwnd(&self, node: Node, segments: u32) -> Result<()> {
        let ns = self.ns(node);
        let routes = ip(&["-n", ns, "-4", "route", "show"])?;
        for line in routes.lines().filter(|l| !l.trim().is_empty()) {
            let mut parts: Vec<String> = Vec::new();
            let mut skip = false;
            for w in line.split_whitespace() {
                if skip {
                    skip = false;
                    continue;
                }
                if w == "initcwnd" || w == "initrwnd" {
                    skip = true;
                    continue;
                }
                parts.push(w.to_string());
            }
            let seg = segments.to_string();
            let mut args: Vec<&str> = vec!["-n", ns, "route", "change"];
            args.extend(parts.iter().map(String::as_str));
            args.extend(["initcwnd", &seg, "initrwnd", &seg]);
            ip(&args)?;
        }
        Ok(())
    }
}

/// Kills the processes in the named namespace `n` (again until none is left, as
/// `testbed::netns::kill_processes_in` does), then deletes it and its `/etc/netns` files.
fn delete_netns(n: &str) {
    for _ in 0..50 {
        let Ok(pids) = ip(&["netns", "pids", n]) else {
            break;
        };
        if pids.trim().is_empty() {
            break;
        }
        for pid in pids.split_whitespace() {
            let _ = Command::new("kill").args(["-KILL", pid]).status();
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let _ = ip(&["netns", "del", n]);
    let _ = std::fs::remove_dir_all(std::path::Path::new("/etc/netns").join(n));
}

impl Drop for VethBed {
    fn drop(&mut self) {
        for n in &self.names {
            delete_netns(n);
        }
    }
}
