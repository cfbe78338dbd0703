//! The systems compared, their configuration files and their processes in the test bed.
//!
//! - `direct`: the client talks to the origins across the long link.
//! - `single-proxy`: one Squid in the edge namespace, no parent (seed 001's "NZ only proxy").
//! - `squid-chain`: Squid child in the edge namespace → Squid parent in the remote namespace.
//!   The child keeps `standby` warm connections to its parent (Squid's own connection pool).
//! - `haproxy-h2`: HAProxy in the edge namespace → HTTP/2 (one multiplexed connection) → HAProxy
//!   in the remote namespace, which routes on the Host header. Plain HTTP only: HAProxy is not a
//!   CONNECT forward proxy.
//! - `longhaul-tcp`: longhaul's edge-proxy (edge) and remote-proxy (remote) over a TCP pool
//!   (mutual TLS 1.3 over TCP).
//! - `longhaul-quic`: the same proxies with `carrier = quic`: a pool of QUIC connections (UDP,
//!   mutual TLS 1.3 built in), one QUIC stream per request.
//!
//! Origin-facing idle connections of the peers expire after [`ORIGIN_IDLE_SECS`], and the
//! runner leaves a longer gap between repetitions, so no system carries warm origin connections
//! from one page visit into the next; proxy-to-proxy connections stay warm, as in service.

use crate::bed::{Bed, Node};
use crate::results::Params;
use anyhow::{bail, Context, Result};
use std::fmt::Write as _;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Idle lifetime of a peer's connections to origins, in seconds.
pub const ORIGIN_IDLE_SECS: u64 = 1;
/// Warm connections a Squid child keeps open to its parent (cache_peer standby=).
pub const SQUID_STANDBY: u32 = 10;
/// How long a started system may take to accept connections.
pub const START_TIMEOUT: Duration = Duration::from_secs(20);

/// One system with its parameters, as a results row names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SystemSpec {
    /// System id (see [`crate::results::SYSTEMS`]).
    pub id: String,
    /// Parameters (longhaul's pool).
    pub params: Params,
}

impl SystemSpec {
    /// A system without parameters.
    pub fn plain(id: &str) -> SystemSpec {
        SystemSpec {
            id: id.into(),
            params: Params::default(),
        }
    }

    /// A longhaul-tcp variant.
    pub fn longhaul(pool: u32, congestion: &str, policy: &str) -> SystemSpec {
        SystemSpec::longhaul_on("longhaul-tcp", pool, congestion, policy)
    }

    /// A longhaul-quic variant.
    pub fn longhaul_quic(pool: u32, congestion: &str, policy: &str) -> SystemSpec {
        SystemSpec::longhaul_on("longhaul-quic", pool, congestion, policy)
    }

    /// A longhaul variant of system `id` (`longhaul-tcp` or `longhaul-quic`).
    fn longhaul_on(id: &str, pool: u32, congestion: &str, policy: &str) -> SystemSpec {
        SystemSpec {
            id: id.into(),
            params: Params {
                pool_size: Some(pool),
                congestion: Some(congestion.into()),
                policy: Some(policy.into()),
                initcwnd: None,
                stream_window_bdp: None,
            },
        }
    }

    /// Carrier of a longhaul system (`tcp`, `quic`); `None` for the other systems.
    pub fn carrier(&self) -> Option<&'static str> {
        carrier_of(&self.id)
    }

    /// Display label (`longhaul-tcp N=10 bbr least-outstanding`).
    pub fn label(&self) -> String {
        let p = self.params.label();
        if p.is_empty() {
            self.id.clone()
        } else {
            format!("{} {p}", self.id)
        }
    }

    /// Why this system cannot carry `scheme`, if it cannot.
    pub fn unsupported(&self, scheme: &str) -> Option<&'static str> {
        match (self.id.as_str(), scheme) {
            ("haproxy-h2", "https") => {
                Some("HAProxy is not a CONNECT forward proxy, so the HTTP/2 chain carries plain HTTP only")
            }
            _ => None,
        }
    }
}

/// Carrier of longhaul system `id` (`tcp`, `quic`); `None` for the other systems.
pub fn carrier_of(id: &str) -> Option<&'static str> {
    match id {
        "longhaul-tcp" => Some("tcp"),
        "longhaul-quic" => Some("quic"),
        _ => None,
    }
}

/// The variants of one system id a suite runs. For a longhaul system: the pool-size sweep with
/// the first congestion control and policy, then every congestion control × policy at the
/// default pool size (10 if swept, else the first size). Other systems have one variant.
pub fn variants(
    id: &str,
    pools: &[u32],
    congestion: &[String],
    policies: &[String],
) -> Vec<SystemSpec> {
    if carrier_of(id).is_none() {
        return vec![SystemSpec::plain(id)];
    }
    let mut specs = Vec::new();
    let (Some(c0), Some(p0)) = (congestion.first(), policies.first()) else {
        return specs;
    };
    for n in pools {
        specs.push(SystemSpec::longhaul_on(id, *n, c0, p0));
    }
    let n0 = main_pool_size(pools);
    for c in congestion {
        for p in policies {
            let v = SystemSpec::longhaul_on(id, n0, c, p);
            if !specs.contains(&v) {
                specs.push(v);
            }
        }
    }
    specs
}

/// Pool size of the main variant: 10 when swept, else the first given.
fn main_pool_size(pools: &[u32]) -> u32 {
    if pools.contains(&10) {
        10
    } else {
        pools.first().copied().unwrap_or(10)
    }
}

/// The variant system `id` is compared with the others at: the main pool size (10 when it is
/// among `pools`) with the first congestion control and policy; the system itself when it has
/// no variants (`None` for a longhaul system given no congestion control or policy).
pub fn main_variant(
    id: &str,
    pools: &[u32],
    congestion: &[String],
    policies: &[String],
) -> Option<SystemSpec> {
    if carrier_of(id).is_none() {
        return Some(SystemSpec::plain(id));
    }
    Some(SystemSpec::longhaul_on(
        id,
        main_pool_size(pools),
        congestion.first()?,
        policies.first()?,
    ))
}

/// With stream windows given (`pageload --stream-window-bdps 2,4`), every variant of longhaul
/// system `id` runs with the first, and its main variant also with each further one, side by
/// side in the same cells. Nothing changes for the other systems or without windows.
pub fn with_windows(
    id: &str,
    specs: &mut Vec<SystemSpec>,
    main: &mut Option<SystemSpec>,
    windows: &[u32],
) {
    let Some((first, rest)) = windows.split_first() else {
        return;
    };
    if carrier_of(id).is_none() {
        return;
    }
    for s in specs.iter_mut() {
        s.params.stream_window_bdp = Some(*first);
    }
    if let Some(m) = main {
        m.params.stream_window_bdp = Some(*first);
        for w in rest {
            let mut v = m.clone();
            v.params.stream_window_bdp = Some(*w);
            if !specs.contains(&v) {
                specs.push(v);
            }
        }
    }
}

/// A started system: its processes and the proxy address clients use.
pub struct Running {
    /// What runs.
    pub spec: SystemSpec,
    /// Forward proxy for clients, `None` for `direct`.
    pub proxy: Option<SocketAddr>,
    children: Vec<(String, Child)>,
    pid_files: Vec<PathBuf>,
}

impl Running {
    /// Checks the processes are still alive.
    pub fn check_alive(&mut self) -> Result<()> {
        for (name, c) in &mut self.children {
            if let Some(st) = c.try_wait()? {
                bail!("{name} of {} exited: {st}", self.spec.label());
            }
        }
        Ok(())
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        for f in &self.pid_files {
            if let Ok(pid) = std::fs::read_to_string(f) {
                let pid = pid.trim();
                if !pid.is_empty() && pid.chars().all(|c| c.is_ascii_digit()) {
                    let _ = std::process::Command::new("kill").arg(pid).status();
                }
            }
        }
        for (_, c) in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Addresses and ports of every system in the bed.
#[derive(Debug, Clone)]
pub struct Ports {
    /// Squid without parent (edge).
    pub single: u16,
    /// Squid child (edge) and parent (remote).
    pub squid_chain: u16,
    /// HAProxy edge frontend.
    pub haproxy_edge: u16,
    /// HAProxy remote HTTP/2 frontend.
    pub haproxy_remote: u16,
    /// First edge-proxy port (one per longhaul variant).
    pub longhaul_edge_base: u16,
    /// remote-proxy TCP listener (longhaul-tcp).
    pub longhaul_remote: u16,
    /// remote-proxy UDP listener (longhaul-quic); kept apart from the TCP ports.
    pub longhaul_quic_remote: u16,
}

/// The ports used in the test bed.
pub const PORTS: Ports = Ports {
    single: 3128,
    squid_chain: 3129,
    haproxy_edge: 3130,
    haproxy_remote: 8443,
    longhaul_edge_base: 3200,
    longhaul_remote: 4443,
    longhaul_quic_remote: 4453,
};

/// Writes a hosts file for the peers' resolvers.
pub fn hosts_file(dir: &Path, hosts: &[(String, IpAddr)]) -> Result<PathBuf> {
    let mut s = String::from("127.0.0.1 localhost\n");
    for (h, a) in hosts {
        let _ = writeln!(s, "{a} {h}");
    }
    let p = dir.join("hosts");
    std::fs::write(&p, s)?;
    Ok(p)
}

/// A Squid configuration. `parent` makes it a child forwarding everything to that parent.
pub fn squid_conf(
    dir: &Path,
    listen: SocketAddr,
    parent: Option<SocketAddr>,
    hosts: &Path,
) -> String {
    let d = dir.display();
    let mut s = format!(
        "# generated by pageload\nhttp_port {listen}\npid_filename {d}/squid.pid\ncache_log {d}/cache.log\n\
         access_log stdio:{d}/access.log\ncache deny all\ncache_mem 8 MB\nhttp_access allow all\n\
         shutdown_lifetime 0 seconds\nhosts_file {}\ndns_nameservers 127.0.0.1\ncoredump_dir {d}\n\
         via off\nforwarded_for delete\nclient_idle_pconn_timeout 2 minutes\n\
         logfile_rotate 0\nmax_filedescriptors 8192\n",
        hosts.display()
    );
    match parent {
        Some(p) => {
            let _ = writeln!(
                s,
                "cache_peer {} parent {} 0 no-query no-digest no-netdb-exchange default standby={SQUID_STANDBY}\n\
                 never_direct allow all\nserver_idle_pconn_timeout 2 minutes",
                p.ip(),
                p.port()
            );
        }
        None => {
            let _ = writeln!(s, "server_idle_pconn_timeout {ORIGIN_IDLE_SECS} second");
        }
    }
    s
}

/// HTTP/2 stream window HAProxy is given on a link: two bandwidth-delay products (the default
/// 65 535 bytes would cap one stream at 64 KB per round trip), at least the protocol default.
pub fn h2_window(link: &crate::bed::LinkInfo) -> u64 {
    let bdp = link.rate_bps * link.long_rtt_ms / 1000.0 / 8.0;
    ((2.0 * bdp) as u64).clamp(65_535, (1 << 31) - 1)
}

/// Idle lifetime of the near HAProxy's HTTP/2 connection to the far one, in seconds. HAProxy
/// closes half of a server's idle connections every `pool-purge-delay` (5 s by default), which
/// would leave the chain cold whenever the runner's schedule leaves it idle for a few seconds
/// (about 50 s between its turns in the full suite); the other chains stay warm between turns
/// (Squid's standby connections, longhaul's pool), so this one is kept as long as its timeouts.
pub const HAPROXY_PEER_IDLE_SECS: u64 = 120;

/// The `global` and `defaults` sections of both HAProxy halves. Requests that end abnormally
/// (an error status, a reset, a timeout) are logged to stderr (`stderr.log` in `dir`) with
/// HAProxy's termination state, so a 502 of the chain can be traced to its side; normal ones
/// are not (`option dontlog-normal`).
fn haproxy_common(dir: &Path, window: u64) -> String {
    format!(
        "# generated by pageload\nglobal\n  pidfile {d}/haproxy.pid\n  maxconn 4000\n\
         \x20 tune.h2.initial-window-size {window}\n  log stderr format raw local0\n\
         defaults\n  mode http\n  log global\n  option httplog\n  option dontlog-normal\n\
         \x20 timeout connect 10s\n  timeout client 120s\n  timeout server 120s\n\
         \x20 timeout http-keep-alive 120s\n  option http-keep-alive\n",
        d = dir.display()
    )
}

/// HAProxy near side: HTTP/1.1 forward-proxy requests in, one HTTP/2 connection to the far side.
pub fn haproxy_edge_conf(
    dir: &Path,
    listen: SocketAddr,
    remote: SocketAddr,
    window: u64,
) -> String {
    format!(
        "{}frontend fe\n  bind {listen}\n  default_backend far\n\
         backend far\n  http-reuse always\n  server far {remote} proto h2 pool-purge-delay {HAPROXY_PEER_IDLE_SECS}s\n",
        haproxy_common(dir, window)
    )
}

/// HAProxy far side: HTTP/2 in, one backend per origin host name chosen by the Host header.
pub fn haproxy_remote_conf(
    dir: &Path,
    listen: SocketAddr,
    hosts: &[(String, IpAddr)],
    window: u64,
) -> String {
    let mut s = format!(
        "{}frontend fe\n  bind {listen} proto h2\n  use_backend %[req.hdr(host),lower,field(1,:)]\n",
        haproxy_common(dir, window)
    );
    for (h, a) in hosts {
        let _ = writeln!(
            s,
            "backend {h}\n  server o {a}:80 pool-purge-delay {ORIGIN_IDLE_SECS}s"
        );
    }
    s
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

fn spawn(bed: &dyn Bed, node: Node, program: &str, args: &[String], log: &Path) -> Result<Child> {
    let out = std::fs::File::create(log)?;
    let err = out.try_clone()?;
    bed.command(node, program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .with_context(|| format!("starting {program} in {node:?}"))
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

fn own_dir(base: &Path, name: &str) -> Result<PathBuf> {
    let d = base.join(name);
    std::fs::create_dir_all(&d)?;
    // Squid drops to its own user: let it write its logs.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o777))?;
    Ok(d)
}

fn start_squid(
    bed: &dyn Bed,
    node: Node,
    dir: &Path,
    listen: SocketAddr,
    parent: Option<SocketAddr>,
    hosts: &[(String, IpAddr)],
) -> Result<(Child, PathBuf)> {
    let hf = hosts_file(dir, hosts)?;
    let conf = dir.join("squid.conf");
    std::fs::write(&conf, squid_conf(dir, listen, parent, &hf))?;
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().replace(['.', '-'], ""))
        .unwrap_or_default();
    let args = vec![
        "-N".into(),
        "-n".into(),
        name,
        "-f".into(),
        conf.display().to_string(),
    ];
    let child = spawn(bed, node, "squid", &args, &dir.join("stderr.log"))?;
    Ok((child, dir.join("squid.pid")))
}

fn start_haproxy(
    bed: &dyn Bed,
    node: Node,
    dir: &Path,
    conf_text: String,
) -> Result<(Child, PathBuf)> {
    let conf = dir.join("haproxy.cfg");
    std::fs::write(&conf, conf_text)?;
    let args = vec!["-db".into(), "-f".into(), conf.display().to_string()];
    let child = spawn(bed, node, "haproxy", &args, &dir.join("stderr.log"))?;
    Ok((child, dir.join("haproxy.pid")))
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
pub const CONGESTION: [&str; 3] = ["bbr", "cubic", "reno"];

/// Placement policies, as `--policy` (edge) and `--reply-policy` (remote) name them.
pub const POLICIES: [&str; 3] = ["least-outstanding", "round-robin", "fewest-streams"];

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

/// Starts `spec` (variant number `k` among the longhaul variants) in `bed`; files under `dir`.
pub fn start(
    bed: &dyn Bed,
    dir: &Path,
    spec: &SystemSpec,
    k: usize,
    hosts: &[(String, IpAddr)],
) -> Result<Running> {
    let edge = bed.addr(Node::Edge);
    let remote = bed.addr(Node::Remote);
    let mut r = Running {
        spec: spec.clone(),
        proxy: None,
        children: vec![],
        pid_files: vec![],
    };
    match spec.id.as_str() {
        "direct" => {}
        "single-proxy" => {
            let listen = SocketAddr::new(edge, PORTS.single);
            let (c, p) = start_squid(
                bed,
                Node::Edge,
                &own_dir(dir, "single-proxy")?,
                listen,
                None,
                hosts,
            )?;
            r.children.push(("squid".into(), c));
            r.pid_files.push(p);
            r.proxy = Some(listen);
        }
        "squid-chain" => {
            let parent = SocketAddr::new(remote, PORTS.squid_chain);
            let (c, p) = start_squid(
                bed,
                Node::Remote,
                &own_dir(dir, "squid-parent")?,
                parent,
                None,
                hosts,
            )?;
            r.children.push(("squid parent".into(), c));
            r.pid_files.push(p);
            let listen = SocketAddr::new(edge, PORTS.squid_chain);
            let (c, p) = start_squid(
                bed,
                Node::Edge,
                &own_dir(dir, "squid-child")?,
                listen,
                Some(parent),
                hosts,
            )?;
            r.children.push(("squid child".into(), c));
            r.pid_files.push(p);
            r.proxy = Some(listen);
        }
        "haproxy-h2" => {
            let far = SocketAddr::new(remote, PORTS.haproxy_remote);
            let d = own_dir(dir, "haproxy-remote")?;
            let (c, p) = start_haproxy(
                bed,
                Node::Remote,
                &d,
                haproxy_remote_conf(&d, far, hosts, h2_window(&bed.link())),
            )?;
            r.children.push(("haproxy remote".into(), c));
            r.pid_files.push(p);
            let listen = SocketAddr::new(edge, PORTS.haproxy_edge);
            let d = own_dir(dir, "haproxy-edge")?;
            let (c, p) = start_haproxy(
                bed,
                Node::Edge,
                &d,
                haproxy_edge_conf(&d, listen, far, h2_window(&bed.link())),
            )?;
            r.children.push(("haproxy edge".into(), c));
            r.pid_files.push(p);
            r.proxy = Some(listen);
        }
        "longhaul-tcp" | "longhaul-quic" => {
            let carrier = spec.carrier().unwrap_or("tcp");
            let listen = SocketAddr::new(edge, PORTS.longhaul_edge_base + k as u16);
            let d = own_dir(dir, &format!("longhaul-edge-{k}"))?;
            let link = bed.link();
            let p = &spec.params;
            let policy = p.policy.as_deref().unwrap_or(POLICIES[0]);
            let args = vec![
                "--listen".into(),
                listen.to_string(),
                "--tls-dir".into(),
                longhaul_keys(dir)?.display().to_string(),
                "--remote".into(),
                SocketAddr::new(
                    remote,
                    longhaul_remote_port(
                        carrier,
                        p.congestion.as_deref().unwrap_or("bbr"),
                        policy,
                    )?,
                )
                .to_string(),
                "--carrier".into(),
                carrier.into(),
                "--connections".into(),
                p.pool_size.unwrap_or(10).to_string(),
                "--policy".into(),
                policy.into(),
                "--congestion".into(),
                p.congestion.clone().unwrap_or_else(|| "bbr".into()),
                "--link-rtt-ms".into(),
                format!("{:.0}", link.long_rtt_ms.max(1.0)),
                "--link-rate-mbit".into(),
                format!("{:.0}", (link.rate_bps / 1e6).max(1.0)),
            ];
            let mut args = args;
            if let Some(w) = p.stream_window_bdp {
                args.extend(["--stream-window-bdp".into(), w.to_string()]);
            }
            let bin = longhaul_bin("edge-proxy")?;
            let c = spawn(
                bed,
                Node::Edge,
                &bin.display().to_string(),
                &args,
                &d.join("stderr.log"),
            )?;
            r.children.push(("edge-proxy".into(), c));
            r.proxy = Some(listen);
        }
        other => bail!("system {other} cannot be started"),
    }
    Ok(r)
}

/// Waits until `probe` succeeds (a page load through the system), up to [`START_TIMEOUT`].
pub fn wait_ready(r: &mut Running, mut probe: impl FnMut() -> Result<()>) -> Result<()> {
    let deadline = Instant::now() + START_TIMEOUT;
    loop {
        r.check_alive()?;
        match probe() {
            Ok(()) => return Ok(()),
            Err(e) if Instant::now() >= deadline => {
                return Err(e.context(format!(
                    "{} not ready within {START_TIMEOUT:?}",
                    r.spec.label()
                )))
            }
            Err(_) => std::thread::sleep(Duration::from_millis(300)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_main_variant_is_n10_with_the_first_congestion_control_and_policy() {
        let cc = vec!["bbr".to_string(), "cubic".to_string()];
        let pol = vec!["least-outstanding".to_string(), "round-robin".to_string()];
        let all = variants("longhaul-tcp", &[1, 10, 50], &cc, &pol);
        let main = main_variant("longhaul-tcp", &[1, 10, 50], &cc, &pol).unwrap();
        assert_eq!(main, SystemSpec::longhaul(10, "bbr", "least-outstanding"));
        assert!(all.contains(&main));
        // Without 10 among the sizes, the first size.
        assert_eq!(
            main_variant("longhaul-quic", &[2, 5], &cc, &pol),
            Some(SystemSpec::longhaul_quic(2, "bbr", "least-outstanding"))
        );
        assert_eq!(
            main_variant("direct", &[], &[], &[]),
            Some(SystemSpec::plain("direct"))
        );
        assert_eq!(main_variant("longhaul-tcp", &[10], &[], &pol), None);
    }

    #[test]
    fn stream_windows_label_every_variant_and_add_the_main_one_at_each_further_window() {
        let cc = vec!["bbr".to_string()];
        let pol = vec!["least-outstanding".to_string()];
        let mut v = variants("longhaul-quic", &[1, 10], &cc, &pol);
        let mut m = main_variant("longhaul-quic", &[1, 10], &cc, &pol);
        with_windows("longhaul-quic", &mut v, &mut m, &[2, 4]);
        let labels: Vec<String> = v.iter().map(|s| s.label()).collect();
        assert_eq!(
            labels,
            [
                "longhaul-quic N=1 bbr least-outstanding window=2bdp",
                "longhaul-quic N=10 bbr least-outstanding window=2bdp",
                "longhaul-quic N=10 bbr least-outstanding window=4bdp",
            ]
        );
        assert_eq!(m.unwrap().params.stream_window_bdp, Some(2));
        // No windows, or not a longhaul system: unchanged.
        let mut d = vec![SystemSpec::plain("direct")];
        let mut dm = Some(SystemSpec::plain("direct"));
        with_windows("direct", &mut d, &mut dm, &[2, 4]);
        assert_eq!(d, [SystemSpec::plain("direct")]);
        let before = variants("longhaul-tcp", &[10], &cc, &pol);
        let mut t = before.clone();
        with_windows("longhaul-tcp", &mut t, &mut None, &[]);
        assert_eq!(t, before);
    }

    #[test]
    fn squid_child_forwards_everything_to_its_parent() {
        let d = Path::new("/run/x");
        let c = squid_conf(
            d,
            "10.77.1.1:3129".parse().unwrap(),
            Some("10.77.2.2:3129".parse().unwrap()),
            Path::new("/run/x/hosts"),
        );
        assert!(c.contains("cache_peer 10.77.2.2 parent 3129 0"));
        assert!(c.contains("never_direct allow all"));
        assert!(c.contains("http_port 10.77.1.1:3129"));
        let s = squid_conf(
            d,
            "10.77.1.1:3128".parse().unwrap(),
            None,
            Path::new("/run/x/hosts"),
        );
        assert!(!s.contains("cache_peer"));
        assert!(s.contains("server_idle_pconn_timeout 1 second"));
    }

    #[test]
    fn haproxy_chain_speaks_h2_between_the_halves() {
        let d = Path::new("/run/x");
        let e = haproxy_edge_conf(
            d,
            "10.77.1.1:3130".parse().unwrap(),
            "10.77.2.2:8443".parse().unwrap(),
            3_250_000,
        );
        // The one HTTP/2 connection stays open between the runner's turns (not purged at 5 s).
        assert!(e.contains("server far 10.77.2.2:8443 proto h2 pool-purge-delay 120s"));
        assert!(e.contains("tune.h2.initial-window-size 3250000"));
        let r = haproxy_remote_conf(
            d,
            "10.77.2.2:8443".parse().unwrap(),
            &[("www.google.test".into(), "10.77.3.10".parse().unwrap())],
            3_250_000,
        );
        assert!(r.contains("bind 10.77.2.2:8443 proto h2"));
        assert!(r.contains("backend www.google.test\n  server o 10.77.3.10:80"));
    }

    #[test]
    fn h2_window_is_two_bdp_of_the_long_link() {
        let link = crate::bed::LinkInfo {
            profile: "pacific".into(),
            rtt_ms: 150.0,
            long_rtt_ms: 130.0,
            rate_bps: 100e6,
        };
        // 100 Mbit/s x 130 ms = 1 625 000 bytes.
        assert_eq!(h2_window(&link), 3_250_000);
        let veth = crate::bed::LinkInfo {
            long_rtt_ms: 0.0,
            ..link
        };
        assert_eq!(h2_window(&veth), 65_535);
    }

    #[test]
    fn unsupported_combinations_say_why() {
        assert!(SystemSpec::longhaul_quic(10, "bbr", "least-outstanding")
            .unsupported("https")
            .is_none());
        assert!(SystemSpec::plain("haproxy-h2")
            .unsupported("https")
            .is_some());
        assert!(SystemSpec::plain("haproxy-h2")
            .unsupported("http")
            .is_none());
        assert_eq!(
            SystemSpec::longhaul(10, "bbr", "least-outstanding").label(),
            "longhaul-tcp N=10 bbr least-outstanding"
        );
    }

    #[test]
    fn longhaul_quic_is_a_longhaul_system_on_its_own_udp_ports() {
        let q = SystemSpec::longhaul_quic(10, "cubic", "least-outstanding");
        assert_eq!(q.id, "longhaul-quic");
        assert_eq!(q.carrier(), Some("quic"));
        assert_eq!(q.label(), "longhaul-quic N=10 cubic least-outstanding");
        assert_eq!(q.params.pool_size, Some(10));
        assert_eq!(
            SystemSpec::longhaul(10, "bbr", "least-outstanding").carrier(),
            Some("tcp")
        );
        assert_eq!(SystemSpec::plain("direct").carrier(), None);
        assert!(crate::results::SYSTEMS.contains(&"longhaul-quic"));
        // Distinct remote ports for every carrier, congestion control and reply policy;
        // the TCP remotes' range stays below the QUIC remotes'.
        let mut ports = Vec::new();
        for c in CARRIERS {
            for cc in CONGESTION {
                for p in POLICIES {
                    ports.push(longhaul_remote_port(c, cc, p).unwrap());
                }
            }
        }
        let lo = "least-outstanding";
        assert_eq!(longhaul_remote_port("quic", "bbr", lo).unwrap(), 4453);
        assert_eq!(longhaul_remote_port("tcp", "bbr", lo).unwrap(), 4443);
        assert_eq!(
            longhaul_remote_port("tcp", "bbr", "round-robin").unwrap(),
            4446
        );
        assert!(longhaul_remote_port("tcp", "reno", "fewest-streams").unwrap() < 4453);
        let n = ports.len();
        ports.sort_unstable();
        ports.dedup();
        assert_eq!(ports.len(), n);
        assert!(longhaul_remote_port("sctp", "bbr", lo).is_err());
        assert!(longhaul_remote_port("tcp", "bbr", "random").is_err());
        // The list names exactly the policies the proxies accept, default first.
        for p in POLICIES {
            assert!(p.parse::<mux::Policy>().is_ok(), "{p}");
        }
        assert_eq!(
            POLICIES[0].parse::<mux::Policy>().unwrap(),
            mux::Policy::default()
        );
    }

    #[test]
    fn longhaul_quic_takes_the_same_variants_as_longhaul_tcp() {
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        let (cc, pol) = (s(&["bbr", "cubic"]), s(&["least-outstanding"]));
        let q = variants("longhaul-quic", &[1, 10], &cc, &pol);
        assert_eq!(
            q,
            vec![
                SystemSpec::longhaul_quic(1, "bbr", "least-outstanding"),
                SystemSpec::longhaul_quic(10, "bbr", "least-outstanding"),
                SystemSpec::longhaul_quic(10, "cubic", "least-outstanding"),
            ]
        );
        let t = variants("longhaul-tcp", &[1, 10], &cc, &pol);
        assert_eq!(t.len(), q.len());
        assert!(t.iter().zip(&q).all(|(a, b)| a.params == b.params));
        assert_eq!(
            variants("direct", &[1, 10], &cc, &pol),
            vec![SystemSpec::plain("direct")]
        );
    }
}
