//! The four-namespace topology joined by three emulated links.
//!
//! ```text
//!  client ──access── edge ═════ long link (profile) ═════ remote ──origin── origin
//! 10.77.1.2    10.77.1.1 | 10.77.2.1              10.77.2.2 | 10.77.3.1    10.77.3.2
//! ```
//!
//! Every link is a pair of TUN devices (MTU 1500, no offloads) with one emulator thread
//! per direction. Edge and remote forward IP, so the client reaches the origin directly
//! across the long link. Dropping the [`Topology`] kills processes left inside its
//! namespaces, stops the emulator threads and closes the devices and namespaces.

use std::fmt;
use std::fs::File;
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use anyhow::{bail, ensure, Context};

use crate::emulator::{Direction, EmulatorStats};
use crate::netns::NetNs;
use crate::profile::{DirectionSpec, Profile};

/// Client address (access link).
pub const CLIENT_ADDR: Ipv4Addr = Ipv4Addr::new(10, 77, 1, 2);
/// Further addresses of the client namespace, one per simulated customer
/// ([`customer_addrs`]): `10.77.1.100` onward.
pub const CUSTOMER_ADDRS: u8 = 128;

/// The client namespace's customer addresses: many clients of one run (an offered-load
/// point's page loads) each come from an address of its own, as an ISP's customers do.
pub fn customer_addrs() -> Vec<Ipv4Addr> {
    (0..CUSTOMER_ADDRS)
        .map(|k| Ipv4Addr::new(10, 77, 1, 100 + k))
        .collect()
}

/// Edge address on the access link (what clients talk to).
pub const EDGE_ACCESS_ADDR: Ipv4Addr = Ipv4Addr::new(10, 77, 1, 1);
/// Edge address on the long link.
pub const EDGE_LONG_ADDR: Ipv4Addr = Ipv4Addr::new(10, 77, 2, 1);
/// Remote address on the long link (what the edge dials).
pub const REMOTE_LONG_ADDR: Ipv4Addr = Ipv4Addr::new(10, 77, 2, 2);
/// Remote address on the origin link.
pub const REMOTE_ORIGIN_ADDR: Ipv4Addr = Ipv4Addr::new(10, 77, 3, 1);
/// Origin address.
pub const ORIGIN_ADDR: Ipv4Addr = Ipv4Addr::new(10, 77, 3, 2);
/// Transmit queue of every TUN device, packets: far above what a TCP burst at the
/// highest profile rate puts there before the emulator thread reads it, so the kernel
/// never drops in front of the emulated queue.
pub const DEFAULT_TUN_TXQUEUELEN: u32 = 10_000;
/// MTU of every emulated link.
pub const LINK_MTU: u32 = 1500;

/// A namespace of the topology.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Node {
    /// Where clients (browsers, replay clients) run.
    Client,
    /// Near end of the long link: the edge proxy.
    Edge,
    /// Far end of the long link: the remote proxy.
    Remote,
    /// Where the origin servers run.
    Origin,
}

impl Node {
    /// All nodes, in path order.
    pub const ALL: [Node; 4] = [Node::Client, Node::Edge, Node::Remote, Node::Origin];

    /// Lower-case name (`client`, `edge`, `remote`, `origin`).
    pub fn name(self) -> &'static str {
        match self {
            Node::Client => "client",
            Node::Edge => "edge",
            Node::Remote => "remote",
            Node::Origin => "origin",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

impl fmt::Display for Node {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Node {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> anyhow::Result<Node> {
        Node::ALL
            .into_iter()
            .find(|n| n.name() == s)
            .with_context(|| {
                format!("unknown namespace {s:?}: expected client, edge, remote or origin")
            })
    }
}

/// One emulated link: two TUN devices and a thread per direction.
#[derive(Debug)]
struct Link {
    /// Forward (a → b) then reverse (b → a).
    dirs: [Direction; 2],
}

/// A running test bed. See the module documentation.
#[derive(Debug)]
pub struct Topology {
    profile: Profile,
    /// Indexed by [`Node`] order.
    ns: Vec<NetNs>,
    /// access, long, origin.
    links: Vec<Link>,
    stop: Arc<AtomicBool>,
    /// Private directory holding the hosts file; removed on teardown.
    dir: PathBuf,
    hosts: Mutex<Vec<(String, IpAddr)>>,
    torn_down: bool,
    /// Kills the namespaces' processes and removes `dir` if the program gets a signal
    /// ([`crate::signals`]); dropped on teardown.
    on_signal: Option<crate::signals::Registration>,
}

/// Where a topology keeps its private files (the hosts file every namespace command
/// bind-mounts): `/run/longhaul-testbed` for root, else `$XDG_RUNTIME_DIR`, else the temporary
/// directory. Run-time directories are not aged by tmp cleaners, which once removed a running
/// bed's files from `/tmp`.
fn state_root() -> PathBuf {
    let run = Path::new("/run/longhaul-testbed");
    if std::fs::create_dir_all(run).is_ok() {
        return run.to_path_buf();
    }
    match std::env::var_os("XDG_RUNTIME_DIR") {
        Some(d) if Path::new(&d).is_dir() => PathBuf::from(d),
        _ => std::env::temp_dir(),
    }
}

fn dir_seed(seed: u64, k: u64) -> u64 {
    seed ^ (k + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

impl Topology {
    /// Brings the topology up for `profile`. Needs `CAP_SYS_ADMIN` and `CAP_NET_ADMIN`
    /// (root, or root inside a user namespace: see [`crate::privileges()`]).
    pub fn up(profile: &Profile) -> anyhow::Result<Topology> {
        profile.validate()?;
        static INSTANCE: AtomicU32 = AtomicU32::new(0);
        let dir = state_root().join(format!(
            "longhaul-testbed-{}-{}",
            std::process::id(),
            INSTANCE.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let mut topo = Topology {
            profile: profile.clone(),
            ns: Vec::new(),
            links: Vec::new(),
            stop: Arc::new(AtomicBool::new(false)),
            dir,
            hosts: Mutex::new(Vec::new()),
            torn_down: false,
            on_signal: None,
        };
        // On error, `topo` drops here and tears down whatever was built.
        topo.build().context("bringing the test bed up")?;
        let (inodes, dir) = (topo.inodes(), topo.dir.clone());
        topo.on_signal = Some(crate::signals::on_signal(move || {
            crate::netns::kill_processes_in(&inodes);
            let _ = std::fs::remove_dir_all(&dir);
        }));
        Ok(topo)
    }

    fn build(&mut self) -> anyhow::Result<()> {
        let p = self.profile.clone();
        for node in Node::ALL {
            let ns = NetNs::new(node.name())?;
            ns.cmd("ip", &["link", "set", "lo", "up"])?;
            ns.sysctl("net.ipv6.conf.all.disable_ipv6", "1")?;
            ns.sysctl("net.ipv6.conf.default.disable_ipv6", "1")?;
            let forward = if matches!(node, Node::Edge | Node::Remote) {
                "1"
            } else {
                "0"
            };
            ns.sysctl("net.ipv4.ip_forward", forward)?;
            ns.sysctl("net.ipv4.conf.all.rp_filter", "0")?;
            ns.sysctl("net.ipv4.conf.default.rp_filter", "0")?;
            ns.sysctl("net.ipv4.tcp_congestion_control", &p.congestion_control)
                .with_context(|| {
                    format!(
                        "congestion control {:?} cannot be a namespace default: it must be available \
                         (/proc/sys/net/ipv4/tcp_available_congestion_control) and, outside the initial \
                         namespace, listed in the host's net.ipv4.tcp_allowed_congestion_control (now {:?}); \
                         sockets may still select it with TCP_CONGESTION",
                        p.congestion_control,
                        std::fs::read_to_string("/proc/sys/net/ipv4/tcp_allowed_congestion_control")
                            .unwrap_or_default()
                            .trim()
                    )
                })?;
            ns.sysctl(
                "net.ipv4.tcp_slow_start_after_idle",
                if p.slow_start_after_idle { "1" } else { "0" },
            )?;
            let triple = |m: [u32; 3]| format!("{} {} {}", m[0], m[1], m[2]);
            ns.sysctl("net.ipv4.tcp_rmem", &triple(p.tcp_rmem))?;
            ns.sysctl("net.ipv4.tcp_wmem", &triple(p.tcp_wmem))?;
            self.ns.push(ns);
        }
        let access = DirectionSpec::delay_only(p.access_delay);
        let origin = DirectionSpec::delay_only(p.origin_delay);
        // (a, a addr, b, b addr, a→b, b→a)
        let plan = [
            (
                Node::Client,
                CLIENT_ADDR,
                Node::Edge,
                EDGE_ACCESS_ADDR,
                "access",
                access.clone(),
                access,
            ),
            (
                Node::Edge,
                EDGE_LONG_ADDR,
                Node::Remote,
                REMOTE_LONG_ADDR,
                "long",
                p.up.clone(),
                p.down.clone(),
            ),
            (
                Node::Remote,
                REMOTE_ORIGIN_ADDR,
                Node::Origin,
                ORIGIN_ADDR,
                "origin",
                origin.clone(),
                origin,
            ),
        ];
        for (k, (a, a_addr, b, b_addr, dev, ab, ba)) in plan.into_iter().enumerate() {
            let ta = self.tun(a, dev, a_addr)?;
            let tb = self.tun(b, dev, b_addr)?;
            let k = k as u64;
            let fwd = Direction::spawn(
                format!("link-{dev}-{a}>{b}"),
                ta.clone(),
                tb.clone(),
                ab,
                dir_seed(p.seed, 2 * k),
                self.stop.clone(),
            )?;
            let rev = Direction::spawn(
                format!("link-{dev}-{b}>{a}"),
                tb,
                ta,
                ba,
                dir_seed(p.seed, 2 * k + 1),
                self.stop.clone(),
            )?;
            self.links.push(Link { dirs: [fwd, rev] });
        }
        let routes: [(Node, &[&str]); 5] = [
            (Node::Client, &["default", "dev", "access"]),
            (Node::Edge, &["default", "dev", "long"]),
            (Node::Remote, &["10.77.1.0/24", "dev", "long"]),
            (Node::Remote, &["default", "dev", "origin"]),
            (Node::Origin, &["default", "dev", "origin"]),
        ];
        for (node, r) in routes {
            let mut args = vec!["route", "add"];
            args.extend_from_slice(r);
            self.ns(node).cmd("ip", &args)?;
        }
        for a in customer_addrs() {
            self.ns(Node::Client)
                .cmd("ip", &["addr", "add", &format!("{a}/32"), "dev", "access"])?;
        }
        self.write_hosts()?;
        Ok(())
    }

    /// Creates TUN device `dev` in `node` with `addr/24`, up, MTU 1500.
    fn tun(&self, node: Node, dev: &str, addr: Ipv4Addr) -> anyhow::Result<Arc<File>> {
        let ns = self.ns(node);
        let file = ns
            .run(|| netsys::open_tun(dev))?
            .with_context(|| format!("opening TUN device {dev} in {node} (needs /dev/net/tun)"))?;
        let mtu = LINK_MTU.to_string();
        let qlen = DEFAULT_TUN_TXQUEUELEN.to_string();
        ns.cmd(
            "ip",
            &["link", "set", dev, "mtu", &mtu, "txqueuelen", &qlen, "up"],
        )?;
        ns.cmd("ip", &["addr", "add", &format!("{addr}/24"), "dev", dev])?;
        Ok(Arc::new(file))
    }

    fn ns(&self, node: Node) -> &NetNs {
        &self.ns[node.index()]
    }

    /// The profile the topology was brought up with.
    pub fn profile(&self) -> &Profile {
        &self.profile
    }

    /// The node's main address: client 10.77.1.2, edge 10.77.1.1 (its client-facing
    /// address), remote 10.77.2.2 (what the edge dials), origin 10.77.3.2.
    pub fn addr(&self, node: Node) -> IpAddr {
        IpAddr::V4(match node {
            Node::Client => CLIENT_ADDR,
            Node::Edge => EDGE_ACCESS_ADDR,
            Node::Remote => REMOTE_LONG_ADDR,
            Node::Origin => ORIGIN_ADDR,
        })
    }

    /// A path (`/proc/<pid>/fd/<n>`) through which other processes can enter `node`'s
    /// network namespace while the topology is up (e.g. `nsenter --net=PATH`).
    pub fn netns_path(&self, node: Node) -> PathBuf {
        self.ns(node).path()
    }

    /// The hosts file that processes started by [`Topology::command`] see as `/etc/hosts`.
    pub fn hosts_path(&self) -> PathBuf {
        self.dir.join("hosts")
    }

    /// A Command that runs `program` inside `node`'s network namespace, with the
    /// topology's hosts file (see [`Topology::set_hosts`]) bind-mounted on `/etc/hosts`
    /// in a private mount namespace. Arguments added by the caller go to `program`.
    pub fn command(&self, node: Node, program: &str) -> Command {
        ns_command(&self.netns_path(node), None, &self.hosts_path(), program)
    }

    /// Runs `f` on a thread inside `node`'s network namespace: sockets it opens belong
    /// to that namespace (measurement without spawning processes).
    pub fn run_in<T: Send>(&self, node: Node, f: impl FnOnce() -> T + Send) -> anyhow::Result<T> {
        self.ns(node).run(f)
    }

    /// Sets the name → address entries (besides the node names) that every namespace's
    /// resolver sees, replacing earlier ones. Names must be plain host names.
    pub fn set_hosts(&self, entries: &[(String, IpAddr)]) -> anyhow::Result<()> {
        for (name, _) in entries {
            ensure!(
                !name.is_empty()
                    && name.len() <= 253
                    && name
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.'),
                "invalid host name {name:?}"
            );
        }
        *self
            .hosts
            .lock()
            .map_err(|_| anyhow::anyhow!("hosts lock poisoned"))? = entries.to_vec();
        self.write_hosts()
    }

    fn write_hosts(&self) -> anyhow::Result<()> {
        let mut text = String::from("127.0.0.1\tlocalhost\n");
        for node in Node::ALL {
            text.push_str(&format!("{}\t{}\n", self.addr(node), node.name()));
        }
        let entries = self
            .hosts
            .lock()
            .map_err(|_| anyhow::anyhow!("hosts lock poisoned"))?;
        for (name, ip) in entries.iter() {
            text.push_str(&format!("{ip}\t{name}\n"));
        }
        // Written in place (not renamed): running processes have it bind-mounted.
        std::fs::write(self.hosts_path(), text).context("writing the test bed's hosts file")
    }

    /// Adds an IPv4 address to the origin node (reachable from every node).
    pub fn add_origin_address(&self, ip: IpAddr) -> anyhow::Result<()> {
        let IpAddr::V4(v4) = ip else {
            bail!("the test bed is IPv4 only; cannot add {ip}");
        };
        ensure!(
            !v4.is_loopback() && !v4.is_multicast() && !v4.is_broadcast() && !v4.is_unspecified(),
            "{ip} cannot be an origin address"
        );
        self.ns(Node::Origin)
            .cmd("ip", &["addr", "add", &format!("{v4}/32"), "dev", "origin"])?;
        Ok(())
    }

    /// Sets `initcwnd` and `initrwnd` to `segments` on every IPv4 route of `node`.
    pub fn set_initcwnd(&self, node: Node, segments: u32) -> anyhow::Result<()> {
        ensure!(
            (1..=1000).contains(&segments),
            "initcwnd {segments} outside 1..=1000"
        );
        let ns = self.ns(node);
        let n = segments.to_string();
        for line in ns.cmd("ip", &["-o", "-4", "route", "show"])?.lines() {
            let mut tokens: Vec<&str> = Vec::new();
            let mut it = line.split_whitespace();
            while let Some(t) = it.next() {
                if t == "initcwnd" || t == "initrwnd" {
                    it.next();
                } else {
                    tokens.push(t);
                }
            }
            if tokens.is_empty() {
                continue;
            }
            let mut args = vec!["route", "change"];
            args.extend(tokens);
            args.extend(["initcwnd", &n, "initrwnd", &n]);
            ns.cmd("ip", &args)?;
        }
        Ok(())
    }

    /// Emulator statistics of the long link: (down = remote → edge, up = edge → remote).
    pub fn long_link_stats(&self) -> (EmulatorStats, EmulatorStats) {
        let l = &self.links[1];
        (l.dirs[1].stats(), l.dirs[0].stats())
    }

    /// Emulator statistics of every direction of every link, merged.
    pub fn all_link_stats(&self) -> EmulatorStats {
        let mut all = EmulatorStats::default();
        for l in &self.links {
            for d in &l.dirs {
                all.merge(&d.stats());
            }
        }
        all
    }

    /// Inodes of the topology's namespaces.
    fn inodes(&self) -> Vec<u64> {
        self.ns.iter().filter_map(|n| n.inode().ok()).collect()
    }

    /// Pids of processes still running inside any of the topology's namespaces.
    pub fn processes(&self) -> Vec<i32> {
        self.ns.iter().flat_map(|n| n.processes()).collect()
    }

    /// Tears everything down: kills processes left in the namespaces, stops the
    /// emulator threads, closes devices and namespaces.
    pub fn down(mut self) -> anyhow::Result<()> {
        self.teardown()
    }

    fn teardown(&mut self) -> anyhow::Result<()> {
        if self.torn_down {
            return Ok(());
        }
        self.torn_down = true;
        self.on_signal = None;
        let left = crate::netns::kill_processes_in(&self.inodes());
        self.stop.store(true, Ordering::Relaxed);
        for l in &mut self.links {
            for d in &mut l.dirs {
                d.join();
            }
        }
        self.links.clear();
        self.ns.clear();
        let _ = std::fs::remove_dir_all(&self.dir);
        ensure!(
            left.is_empty(),
            "processes {left:?} survived SIGKILL in the test bed"
        );
        Ok(())
    }
}

impl Drop for Topology {
    fn drop(&mut self) {
        if let Err(e) = self.teardown() {
            tracing::error!(error = %e, "test bed teardown");
        }
    }
}

/// Builds the command that enters a namespace (and, for an unprivileged `linkem`, its
/// user namespace first), bind-mounts `hosts` on `/etc/hosts` in a private mount
/// namespace and executes `program`.
pub fn ns_command(netns: &Path, userns: Option<&Path>, hosts: &Path, program: &str) -> Command {
    let mut c = Command::new("nsenter");
    if let Some(u) = userns {
        // The user namespace denies setgroups; keep the credentials, which map to its root.
        c.arg(format!("--user={}", u.display()))
            .arg("--preserve-credentials");
    }
    c.arg(format!("--net={}", netns.display()))
        .args(["--", "unshare", "--mount", "--propagation", "private", "--"])
        .args(["sh", "-c", r#"mount --bind "$0" /etc/hosts && exec "$@""#])
        .arg(hosts)
        .arg(program);
    c
}
