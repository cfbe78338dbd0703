//! The systems compared: one type per system implementing [`System`], registered once in
//! [`REGISTRY`]; the variants a suite runs of each ([`SystemSpec`]); and what they share to run
//! in the test bed (ports, processes, readiness).
//!
//! - [`direct`]: the client talks to the origins across the long link.
//! - [`direct_h3`]: the same over HTTP/3 (QUIC), HTTPS only.
//! - [`single_proxy`]: one Squid in the edge namespace, no parent (seed 001's "NZ only proxy").
//! - [`squid_chain`]: Squid child in the edge namespace → Squid parent in the remote namespace.
//! - [`haproxy_h2`]: HAProxy → HTTP/2 → HAProxy; plain HTTP only.
//! - [`longhaul`]: `longhaul-tcp` and `longhaul-quic`, longhaul's edge-proxy and remote-proxy
//!   over a TCP or a QUIC pool.
//!
//! Adding a system is one file: a type implementing [`System`] (its id, the programs it needs,
//! the schemes it cannot carry, how it starts in the bed) and its line in [`REGISTRY`]. The
//! results schema, the plots, `pageload --systems` and the check for missing programs read the
//! registry. The analytic floor is computed, not started: it is no system here.
//!
//! Origin-facing idle connections of the peers expire after [`ORIGIN_IDLE_SECS`], and the
//! runner leaves a longer gap between repetitions, so no system carries warm origin connections
//! from one page visit into the next; proxy-to-proxy connections stay warm, as in service.
//!
//! This module starts and stops systems; it does not measure them (see [`crate::runner`]).

pub mod direct;
pub mod direct_h3;
pub mod haproxy_h2;
pub mod longhaul;
pub mod single_proxy;
pub mod squid;
pub mod squid_chain;

pub use haproxy_h2::{h2_window, haproxy_edge_conf, haproxy_remote_conf, HAPROXY_PEER_IDLE_SECS};
pub use longhaul::{
    longhaul_bin, longhaul_remote_port, start_longhaul_remote, LonghaulRemote, CARRIERS,
    CONGESTION, POLICIES,
};
pub use squid::{squid_conf, SQUID_STANDBY};

use crate::bed::{Bed, Node};
use crate::results::Params;
use anyhow::{bail, Context, Result};
use std::fmt::Write as _;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

/// Idle lifetime of a peer's connections to origins, in seconds.
pub const ORIGIN_IDLE_SECS: u64 = 1;
/// How long a started system may take to accept connections.
pub const START_TIMEOUT: Duration = Duration::from_secs(20);

/// One system the runner compares.
pub trait System: Sync {
    /// Its id, as `--systems` and the results rows name it.
    fn id(&self) -> &'static str;

    /// The programs it runs by name (from Debian), checked on `PATH` before any bed comes up.
    fn programs(&self) -> &'static [&'static str] {
        &[]
    }

    /// Why it cannot carry `scheme` (`http`, `https`), if it cannot.
    fn unsupported(&self, _scheme: &str) -> Option<&'static str> {
        None
    }

    /// longhaul's carrier (`tcp`, `quic`). A system with a carrier takes pool variants (pool
    /// size, congestion control, policy, stream window) and an edge port per variant; `None`:
    /// the system runs as one variant.
    fn carrier(&self) -> Option<&'static str> {
        None
    }

    /// Whether clients reach the origins over HTTP/3 (QUIC) with it, rather than over TCP.
    fn http3(&self) -> bool {
        false
    }

    /// Starts what the `variants` of this system in a suite share, once per profile before any
    /// of them starts; the returned values stop it when dropped.
    fn start_shared(
        &self,
        _bed: &dyn Bed,
        _dir: &Path,
        _variants: &[&SystemSpec],
    ) -> Result<Vec<Shared>> {
        Ok(Vec::new())
    }

    /// Starts variant `spec` in the bed: adds its processes to `r` and sets `r.proxy`.
    fn start(&self, at: &Start<'_>, spec: &SystemSpec, r: &mut Running) -> Result<()>;
}

/// Something a system shares between its variants, stopped when dropped.
pub type Shared = Box<dyn std::any::Any>;

/// Every system, in display order.
pub static REGISTRY: [&dyn System; 7] = [
    &direct::Direct,
    &direct_h3::DirectH3,
    &single_proxy::SingleProxy,
    &squid_chain::SquidChain,
    &haproxy_h2::HaproxyH2,
    &longhaul::TCP,
    &longhaul::QUIC,
];

/// The registered system `id`.
pub fn lookup(id: &str) -> Option<&'static dyn System> {
    REGISTRY.iter().copied().find(|s| s.id() == id)
}

/// The ids of every registered system, in display order.
pub fn ids() -> Vec<&'static str> {
    REGISTRY.iter().map(|s| s.id()).collect()
}

/// Where and as what a variant starts.
pub struct Start<'a> {
    /// The test bed.
    pub bed: &'a dyn Bed,
    /// The profile's run directory; each process gets a directory of its own below.
    pub dir: &'a Path,
    /// The origins' names and addresses.
    pub hosts: &'a [(String, IpAddr)],
    /// Number of this variant among the variants of systems with a carrier (their edge ports).
    pub slot: usize,
}

/// One system with its parameters, as a results row names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SystemSpec {
    /// System id (see [`REGISTRY`]).
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
        SystemSpec::longhaul_on(longhaul::TCP.id(), pool, congestion, policy)
    }

    /// A longhaul-quic variant.
    pub fn longhaul_quic(pool: u32, congestion: &str, policy: &str) -> SystemSpec {
        SystemSpec::longhaul_on(longhaul::QUIC.id(), pool, congestion, policy)
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

    /// The registered system.
    pub fn system(&self) -> Option<&'static dyn System> {
        lookup(&self.id)
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
        self.system().and_then(|s| s.unsupported(scheme))
    }

    /// Whether clients use HTTP/3 with it.
    pub fn http3(&self) -> bool {
        self.system().is_some_and(|s| s.http3())
    }
}

/// Carrier of system `id` (`tcp`, `quic`); `None` for a system without one.
pub fn carrier_of(id: &str) -> Option<&'static str> {
    lookup(id).and_then(|s| s.carrier())
}

/// The variants of one system id a suite runs. For a longhaul system: the pool-size sweep with
/// the first congestion control and policy, then every congestion control × policy at the
/// main pool size ([`MAIN_POOL_SIZE`] if swept, else the first size). Other systems have one
/// variant.
pub fn variants(
    id: &str,
    pools: &[u32],
    congestion: &[String],
    policies: &[String],
) -> Vec<SystemSpec> {
    if carrier_of(id).is_none() {
        return vec![SystemSpec::plain(id)];
    }
    let congestion = congestion_for(id, congestion);
    let policies = policies_for(id, policies);
    let mut specs = Vec::new();
    let (Some(c0), Some(p0)) = (congestion.first(), policies.first()) else {
        return specs;
    };
    for n in pools {
        specs.push(SystemSpec::longhaul_on(id, *n, c0, p0));
    }
    let n0 = main_pool_size(pools);
    for c in &congestion {
        for p in &policies {
            let v = SystemSpec::longhaul_on(id, n0, c, p);
            if !specs.contains(&v) {
                specs.push(v);
            }
        }
    }
    specs
}

/// The carrier of longhaul system `id` as the proxies' configuration names it (QUIC for
/// every system that is not the TCP pool).
fn carrier_name(id: &str) -> app::config::CarrierName {
    if carrier_of(id) == Some("tcp") {
        app::config::CarrierName::Tcp
    } else {
        app::config::CarrierName::Quic
    }
}

/// What `--congestion default` runs: longhaul's own default for the carrier (edge and remote
/// started without `--congestion`: `rate` on QUIC connections, the kernel's bbr on TCP).
pub const DEFAULT_CONGESTION_NAME: &str = "default";

/// The congestion controls longhaul system `id` runs, each once: `default` becomes the
/// carrier's default controller by name, and `rate`, a QUIC controller that the TCP carrier
/// refuses, is left out there.
fn congestion_for(id: &str, congestion: &[String]) -> Vec<String> {
    let carrier = carrier_name(id);
    let tcp = carrier == app::config::CarrierName::Tcp;
    let mut v: Vec<String> = Vec::new();
    for c in congestion {
        let c = match c.as_str() {
            DEFAULT_CONGESTION_NAME => app::config::default_congestion(carrier),
            "rate" if tcp => continue,
            c => c,
        };
        if !v.iter().any(|x| x == c) {
            v.push(c.to_owned());
        }
    }
    v
}

/// What `--policies default` runs: longhaul's own default placement for the carrier
/// (`pack` on QUIC connections, least-outstanding on TCP), named by the policy it is.
pub const DEFAULT_POLICY_NAME: &str = "default";

/// The placement policies longhaul system `id` runs, each once: `default` becomes the
/// carrier's default policy by name.
fn policies_for(id: &str, policies: &[String]) -> Vec<String> {
    let carrier = carrier_name(id);
    let mut v: Vec<String> = Vec::new();
    for p in policies {
        let p = match p.as_str() {
            DEFAULT_POLICY_NAME => app::pool_glue::policy(app::config::default_policy(carrier))
                .name()
                .to_owned(),
            p => p.to_owned(),
        };
        if !v.contains(&p) {
            v.push(p);
        }
    }
    v
}

/// The pool size longhaul ships with (`pool.connections` left unset): the suites compare
/// longhaul with the other systems at it.
pub const MAIN_POOL_SIZE: u32 = pool::DEFAULT_CONNECTIONS as u32;

/// Pool size of the main variant: [`MAIN_POOL_SIZE`] when swept, else the first given.
pub fn main_pool_size(pools: &[u32]) -> u32 {
    if pools.contains(&MAIN_POOL_SIZE) {
        MAIN_POOL_SIZE
    } else {
        pools.first().copied().unwrap_or(MAIN_POOL_SIZE)
    }
}

/// The variant system `id` is compared with the others at: the main pool size
/// ([`MAIN_POOL_SIZE`] when it is among `pools`) with the first congestion control and policy; the system itself when it has
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
        congestion_for(id, congestion).first()?,
        policies_for(id, policies).first()?,
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
    /// The system's HTTPS proxy endpoint (clients reach the proxy over TLS and may speak
    /// HTTP/2 to it), if it has one.
    pub https_proxy: Option<HttpsProxy>,
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

/// An HTTPS proxy endpoint of a started system.
#[derive(Debug, Clone)]
pub struct HttpsProxy {
    /// Its address.
    pub addr: SocketAddr,
    /// Base64 SHA-256 of its certificate's public key (Chromium's SPKI allow list).
    pub spki_sha256: String,
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
    /// First edge-proxy HTTPS proxy endpoint port (one per longhaul variant).
    pub longhaul_https_base: u16,
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
    longhaul_https_base: 3300,
    longhaul_remote: 4443,
    longhaul_quic_remote: 4463,
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

/// `base/name`, created, writable by the peers that drop to their own user.
pub(crate) fn own_dir(base: &Path, name: &str) -> Result<PathBuf> {
    let d = base.join(name);
    std::fs::create_dir_all(&d)?;
    // Squid drops to its own user: let it write its logs.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o777))?;
    Ok(d)
}

/// Starts `program` with `args` in `node`, its output to `log`.
pub(crate) fn spawn(
    bed: &dyn Bed,
    node: Node,
    program: &str,
    args: &[String],
    log: &Path,
) -> Result<Child> {
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

/// Starts `spec` (variant number `k` among the variants of systems with a carrier) in `bed`;
/// files under `dir`.
pub fn start(
    bed: &dyn Bed,
    dir: &Path,
    spec: &SystemSpec,
    k: usize,
    hosts: &[(String, IpAddr)],
) -> Result<Running> {
    let Some(system) = spec.system() else {
        bail!("system {} cannot be started", spec.id);
    };
    let mut r = Running {
        spec: spec.clone(),
        proxy: None,
        https_proxy: None,
        children: vec![],
        pid_files: vec![],
    };
    let at = Start {
        bed,
        dir,
        hosts,
        slot: k,
    };
    system.start(&at, spec, &mut r)?;
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
    fn the_main_variant_is_the_shipped_pool_size_with_the_first_congestion_control_and_policy() {
        assert_eq!(MAIN_POOL_SIZE, 4);
        let cc = vec!["bbr".to_string(), "cubic".to_string()];
        let pol = vec!["least-outstanding".to_string(), "round-robin".to_string()];
        let all = variants("longhaul-tcp", &[1, 4, 10, 50], &cc, &pol);
        let main = main_variant("longhaul-tcp", &[1, 4, 10, 50], &cc, &pol).unwrap();
        assert_eq!(main, SystemSpec::longhaul(4, "bbr", "least-outstanding"));
        assert!(all.contains(&main));
        // The other congestion controls and policies run at the shipped size only.
        assert!(all.contains(&SystemSpec::longhaul(4, "cubic", "round-robin")));
        assert!(!all.contains(&SystemSpec::longhaul(10, "cubic", "least-outstanding")));
        // Without the shipped size among the sizes, the first size.
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
    fn default_congestion_is_each_carriers_own_and_rate_is_quic_only() {
        let cc: Vec<String> = ["default", "bbr", "rate", "cubic"]
            .iter()
            .map(|c| c.to_string())
            .collect();
        let pol = vec!["least-outstanding".to_string()];
        let names = |id: &str| -> Vec<String> {
            variants(id, &[10], &cc, &pol)
                .into_iter()
                .map(|s| s.params.congestion.unwrap())
                .collect()
        };
        // TCP: default is bbr (listed once), rate is left out.
        assert_eq!(names("longhaul-tcp"), ["bbr", "cubic"]);
        // QUIC: default is rate (listed once), then bbr and cubic.
        assert_eq!(names("longhaul-quic"), ["rate", "bbr", "cubic"]);
        assert_eq!(
            main_variant("longhaul-quic", &[10], &cc, &pol),
            Some(SystemSpec::longhaul_quic(10, "rate", "least-outstanding"))
        );
    }

    #[test]
    fn default_policy_is_each_carriers_own() {
        let cc = vec!["default".to_string()];
        let pol: Vec<String> = ["default", "least-outstanding", "round-robin"]
            .iter()
            .map(|p| p.to_string())
            .collect();
        let names = |id: &str| -> Vec<String> {
            variants(id, &[MAIN_POOL_SIZE], &cc, &pol)
                .into_iter()
                .map(|s| s.params.policy.unwrap())
                .collect()
        };
        // TCP: default is least-outstanding (listed once); QUIC: pack, then the others.
        assert_eq!(names("longhaul-tcp"), ["least-outstanding", "round-robin"]);
        assert_eq!(
            names("longhaul-quic"),
            ["pack", "least-outstanding", "round-robin"]
        );
        assert_eq!(
            main_variant("longhaul-quic", &[MAIN_POOL_SIZE], &cc, &pol),
            Some(SystemSpec::longhaul_quic(MAIN_POOL_SIZE, "rate", "pack"))
        );
    }

    #[test]
    fn stream_windows_label_every_variant_and_add_the_main_one_at_each_further_window() {
        let cc = vec!["bbr".to_string()];
        let pol = vec!["least-outstanding".to_string()];
        let mut v = variants("longhaul-quic", &[1, MAIN_POOL_SIZE], &cc, &pol);
        let mut m = main_variant("longhaul-quic", &[1, MAIN_POOL_SIZE], &cc, &pol);
        with_windows("longhaul-quic", &mut v, &mut m, &[2, 4]);
        let labels: Vec<String> = v.iter().map(|s| s.label()).collect();
        assert_eq!(
            labels,
            [
                "longhaul-quic N=1 bbr least-outstanding window=2bdp",
                "longhaul-quic N=4 bbr least-outstanding window=2bdp",
                "longhaul-quic N=4 bbr least-outstanding window=4bdp",
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
        assert_eq!(longhaul_remote_port("quic", "bbr", lo).unwrap(), 4463);
        assert_eq!(longhaul_remote_port("tcp", "bbr", lo).unwrap(), 4443);
        assert_eq!(
            longhaul_remote_port("tcp", "bbr", "round-robin").unwrap(),
            4447
        );
        assert!(longhaul_remote_port("tcp", "rate", "expected-completion").unwrap() < 4463);
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
        assert_eq!(POLICIES.len(), mux::Policy::ALL.len());
        assert_eq!(
            POLICIES[0].parse::<mux::Policy>().unwrap(),
            mux::Policy::default()
        );
    }

    #[test]
    fn longhaul_quic_takes_the_same_variants_as_longhaul_tcp() {
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        let (cc, pol) = (s(&["bbr", "cubic"]), s(&["least-outstanding"]));
        let q = variants("longhaul-quic", &[1, 4], &cc, &pol);
        assert_eq!(
            q,
            vec![
                SystemSpec::longhaul_quic(1, "bbr", "least-outstanding"),
                SystemSpec::longhaul_quic(4, "bbr", "least-outstanding"),
                SystemSpec::longhaul_quic(4, "cubic", "least-outstanding"),
            ]
        );
        let t = variants("longhaul-tcp", &[1, 4], &cc, &pol);
        assert_eq!(t.len(), q.len());
        assert!(t.iter().zip(&q).all(|(a, b)| a.params == b.params));
        assert_eq!(
            variants("direct", &[1, 10], &cc, &pol),
            vec![SystemSpec::plain("direct")]
        );
    }
}
