//! The suite runner: brings a bed up per profile, serves the workloads from nginx, starts every
//! system side by side, runs the repetitions in a shuffled order and turns samples into rows.
//!
//! Clients run as separate processes in the client namespace (`pageload replay-once`, or
//! Chromium), so every repetition starts with cold client connections, as a new page visit.

use crate::bed::{Bed, Node};
use crate::checkpoint::{Cell, Checkpoint};
use crate::chromium;
use crate::floor::{self, LinkModel};
use crate::load::{LoadPoint, LoadRun};
use crate::origin::Site;
use crate::replay::PageLoad;
use crate::results::{Params, Row};
use crate::schedule::shuffled_order;
use crate::systems::{self, Running, SystemSpec};
use crate::workload::Workload;
use anyhow::{bail, Context, Result};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Initial windows of seed 000's Table 1.
pub const SEED_000_INITCWNDS: [u32; 7] = [1, 3, 5, 7, 10, 16, 32];
/// Linux's default initial window, restored after the sweep.
pub const LINUX_INITCWND: u32 = 10;

/// What to run.
#[derive(Debug, Clone)]
pub struct Suite {
    /// Suite name (quick, full, demo, custom).
    pub name: String,
    /// Link profiles.
    pub profiles: Vec<String>,
    /// Workload ids.
    pub workloads: Vec<String>,
    /// Systems and variants, in display order.
    pub systems: Vec<SystemSpec>,
    /// `replay` and/or `chromium`.
    pub clients: Vec<String>,
    /// Workloads Chromium loads (it skips bulk and mixed anyway).
    pub chromium_workloads: Vec<String>,
    /// `http` and/or `https`.
    pub schemes: Vec<String>,
    /// Schemes Chromium loads (a subset of `schemes`).
    pub chromium_schemes: Vec<String>,
    /// Repetitions per cell.
    pub runs: usize,
    /// Seed of the shuffled order.
    pub seed: u64,
    /// Pause between repetitions (longer than the peers' origin idle timeout).
    pub gap: Duration,
    /// Initial windows to sweep (direct, yahoo, replay, http); empty skips the sweep.
    pub initcwnds: Vec<u32>,
    /// Offered loads as fractions of the link rate (yahoo, replay, http); empty skips them.
    pub load_fractions: Vec<f64>,
    /// Arrival window of each offered-load point.
    pub load_window: Duration,
    /// Each longhaul system's main variant (the pool size, congestion control and policy it is
    /// compared with the other systems at).
    pub main_variants: Vec<SystemSpec>,
    /// Where the other longhaul variants (the pool-size, congestion-control and policy sweeps)
    /// are measured: `None` in every cell, `Some(ids)` only on these workloads with the replay
    /// client.
    pub sweep_workloads: Option<Vec<String>>,
    /// Skip the cells that a stopped run of the same settings finished (see
    /// [`crate::checkpoint`]).
    pub resume: bool,
    /// Initial window (segments) set with `deploy/set-initcwnd` on the proxy hosts' routes to
    /// each other before the systems start; `None` leaves Linux's default (10).
    pub peer_initcwnd: Option<u32>,
    /// Profiles read from files (`pageload --profile-file`), selected in `profiles` by name.
    pub custom_profiles: Vec<testbed::Profile>,
}

impl Suite {
    /// Whether `spec` is measured in the cell of `workload` and `client`.
    pub fn measures(&self, spec: &SystemSpec, workload: &str, client: &str) -> bool {
        match &self.sweep_workloads {
            None => true,
            Some(ws) => {
                spec.carrier().is_none()
                    || self.main_variants.contains(spec)
                    || (client == "replay" && ws.iter().any(|w| w == workload))
            }
        }
    }

    /// Those of `failed` (systems that could not start) that the cell of `workload`, `client`
    /// and `scheme` would have measured. A cell missing any is not checkpointed: `--resume`
    /// measures it again, whole, once they start.
    pub fn missing_in_cell<'a>(
        &self,
        failed: &'a [SystemSpec],
        workload: &str,
        client: &str,
        scheme: &str,
    ) -> Vec<&'a SystemSpec> {
        failed
            .iter()
            .filter(|s| s.unsupported(scheme).is_none() && self.measures(s, workload, client))
            .collect()
    }

    /// The settings a checkpoint must match to be resumed: everything that decides what a cell
    /// measures and how (not the profiles and workloads, which only pick cells).
    pub fn settings(&self) -> String {
        let systems: Vec<String> = self.systems.iter().map(|s| s.label()).collect();
        format!(
            "suite={} systems={systems:?} clients={:?} schemes={:?} chromium_schemes={:?} \
             chromium_workloads={:?} runs={} seed={} gap_ms={} initcwnds={:?} loads={:?} \
             load_window_ms={} sweep={:?}",
            self.name,
            self.clients,
            self.schemes,
            self.chromium_schemes,
            self.chromium_workloads,
            self.runs,
            self.seed,
            self.gap.as_millis(),
            self.initcwnds,
            self.load_fractions,
            self.load_window.as_millis(),
            self.sweep_workloads,
        ) + &self
            .peer_initcwnd
            .map(|n| format!(" peer_initcwnd={n}"))
            .unwrap_or_default()
    }

    /// The settings a checkpoint of `profile` must match: [`Suite::settings`], and for a profile
    /// read from a file also its definition, so that a resumed run cannot mix two versions of
    /// the file.
    pub fn profile_settings(&self, profile: &str) -> String {
        match self.custom_profiles.iter().find(|p| p.name == profile) {
            Some(p) => format!("{} profile={p:?}", self.settings()),
            None => self.settings(),
        }
    }

    /// The Debian programs this suite starts: nginx (the origin) always, Squid for
    /// `single-proxy` and `squid-chain`, HAProxy for `haproxy-h2`, Chromium for the browser
    /// client. Checked before any bed comes up ([`missing_programs`]): a missing one would
    /// otherwise only show as systems that "did not start" in every cell.
    pub fn programs(&self) -> Vec<&'static str> {
        let mut out = vec!["nginx"];
        let uses = |id: &str| self.systems.iter().any(|s| s.id == id);
        if uses("single-proxy") || uses("squid-chain") {
            out.push("squid");
        }
        if uses("haproxy-h2") {
            out.push("haproxy");
        }
        if self.clients.iter().any(|c| c == "chromium") {
            out.push("chromium");
        }
        out
    }

    /// The page-load cells of one profile, as `(workload, client, scheme)`, in run order.
    fn cells<'w>(&self, all: &'w [Workload]) -> Vec<(&'w Workload, String, String)> {
        let mut out = Vec::new();
        for wid in &self.workloads {
            let w = all.iter().find(|w| &w.id == wid).expect("loaded");
            for client in &self.clients {
                if client == "chromium"
                    && (!self.chromium_workloads.contains(wid)
                        || w.objects.is_empty()
                        || wid == "bulk")
                {
                    continue;
                }
                for scheme in &self.schemes {
                    if client == "chromium" && !self.chromium_schemes.contains(scheme) {
                        continue;
                    }
                    out.push((w, client.clone(), scheme.clone()));
                }
            }
        }
        out
    }
}

/// The page the one-page sweeps run on: Yahoo when it is among `workloads`, else the first.
pub fn sweep_page(workloads: &[String]) -> &str {
    if workloads.iter().any(|w| w == "yahoo") {
        "yahoo"
    } else {
        workloads.first().map_or("yahoo", |w| w.as_str())
    }
}

/// Checkpoint key of a page-load cell.
fn cell_key(workload: &str, client: &str, scheme: &str) -> String {
    format!("{workload}/{client}/{scheme}")
}

/// Checkpoint key of the initial-window sweep.
const INITCWND_CELL: &str = "initcwnd";
/// Checkpoint key of the offered-load points.
const LOAD_CELL: &str = "load";

/// Everything a suite measured.
#[derive(Debug, Default)]
pub struct Outcome {
    /// results.json rows.
    pub rows: Vec<Row>,
    /// Offered/carried load points.
    pub load: Vec<LoadPoint>,
}

/// Where the runner finds its inputs and puts its outputs.
pub struct RunContext<'a> {
    /// Directory of the workload TOML files.
    pub workloads_dir: PathBuf,
    /// Run directory.
    pub out: PathBuf,
    /// Opens a bed for a profile.
    pub open_bed: &'a dyn Fn(&str) -> Result<Box<dyn Bed>>,
    /// Progress lines go here.
    pub log: &'a dyn Fn(&str),
}

struct Trialer<'a> {
    bed: &'a dyn Bed,
    site: &'a Site,
    workloads_dir: &'a Path,
    tmp: PathBuf,
    counter: std::cell::Cell<u64>,
}

impl Trialer<'_> {
    /// Starts no further client once a signal is tearing the beds down (one started after the
    /// cleanup's sweep of the namespaces would outlive the run): waits for the exit instead.
    fn may_start(&self) {
        testbed::signals::hold_if_stopping();
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

    fn replay(
        &self,
        proxy: Option<std::net::SocketAddr>,
        w: &str,
        scheme: &str,
    ) -> Result<PageLoad> {
        self.may_start();
        self.heal();
        let exe = std::env::current_exe()?;
        let mut cmd = self.bed.command(Node::Client, &exe.display().to_string());
        cmd.args(["replay-once", "--workloads-dir"])
            .arg(self.workloads_dir)
            .args(["--workload", w, "--scheme", scheme, "--ca"])
            .arg(&self.site.ca_pem);
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

    fn load(
        &self,
        proxy: Option<std::net::SocketAddr>,
        w: &str,
        rate: f64,
        window: Duration,
        seed: u64,
    ) -> Result<LoadRun> {
        self.may_start();
        self.heal();
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

    fn chromium(
        &self,
        proxy: Option<std::net::SocketAddr>,
        w: &Workload,
        scheme: &str,
    ) -> Result<f64> {
        self.may_start();
        self.heal();
        let n = self.counter.get();
        self.counter.set(n + 1);
        let profile = self.tmp.join(format!("chromium-{n}"));
        std::fs::create_dir_all(&profile)?;
        let resolve: Vec<(String, IpAddr)> = self.site.hosts.clone();
        let spki = (scheme == "https").then_some(self.site.spki_sha256.as_str());
        let args = chromium::args(&w.url(scheme, 0), &profile, proxy, &resolve, spki);
        let mut cmd = self.bed.command(Node::Client, "timeout");
        cmd.arg(format!("{}", chromium::DEFAULT_TIMEOUT.as_secs() + 10))
            .arg("chromium")
            .args(args);
        cmd.env("HOME", &profile).stdin(Stdio::null());
        let r = chromium::run(cmd, w, scheme);
        let _ = std::fs::remove_dir_all(&profile);
        r
    }
}

fn start_nginx(bed: &dyn Bed, site: &Site) -> Result<Child> {
    let log = std::fs::File::create(site.dir.join("nginx-stderr.log"))?;
    bed.command(Node::Origin, "nginx")
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
struct Nginx(Child);
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

/// Runs `suite`; returns every row (ratios filled in) and the load points.
pub fn run_suite(suite: &Suite, cx: &RunContext) -> Result<Outcome> {
    let mut rows = Vec::new();
    let mut load = Vec::new();
    for profile in &suite.profiles {
        let dir = cx.out.join(profile);
        std::fs::create_dir_all(&dir)?;
        let mut cp = Checkpoint::open(&dir, &suite.profile_settings(profile), suite.resume)?;
        let all = load_workloads(suite, cx)?;
        let mut keys: Vec<String> = suite
            .cells(&all)
            .iter()
            .map(|(w, c, s)| cell_key(&w.id, c, s))
            .collect();
        if !suite.initcwnds.is_empty() {
            keys.push(INITCWND_CELL.into());
        }
        if !suite.load_fractions.is_empty() {
            keys.push(LOAD_CELL.into());
        }
        if cp.all_done(keys.iter()) {
            (cx.log)(&format!(
                "== profile {profile}: every cell finished in an earlier run (--resume)"
            ));
            for k in &keys {
                let c = cp.get(k).expect("done");
                rows.extend(c.rows.iter().cloned());
                load.extend(c.load.iter().cloned());
            }
            continue;
        }
        (cx.log)(&format!("== profile {profile}: bringing the bed up"));
        let bed = (cx.open_bed)(profile)?;
        let o = run_profile(suite, cx, bed.as_ref(), &dir, &all, &mut cp)?;
        rows.extend(o.rows);
        load.extend(o.load);
    }
    crate::checkpoint::prefer_measured(&mut rows);
    crate::results::fill_ratios(&mut rows);
    crate::results::sort(&mut rows);
    Ok(Outcome { rows, load })
}

/// Which of `programs` no directory of `path` (a `PATH`-style list) holds as an executable
/// file: the test bed runs them by name, so they must be found the same way.
pub fn missing_programs<'p>(programs: &[&'p str], path: Option<&std::ffi::OsStr>) -> Vec<&'p str> {
    use std::os::unix::fs::PermissionsExt as _;
    let dirs: Vec<PathBuf> = path
        .map(|p| std::env::split_paths(p).collect())
        .unwrap_or_default();
    let found = |name: &str| {
        dirs.iter().any(|d| {
            std::fs::metadata(d.join(name))
                .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
                .unwrap_or(false)
        })
    };
    programs.iter().copied().filter(|p| !found(p)).collect()
}

/// Every workload of the suite and what its mixed loads are made of.
fn load_workloads(suite: &Suite, cx: &RunContext) -> Result<Vec<Workload>> {
    let mut all: Vec<Workload> = Vec::new();
    let mut want: Vec<String> = suite.workloads.clone();
    for id in &suite.workloads {
        let w = Workload::load(&cx.workloads_dir, id)?;
        if let Some(m) = &w.mixed {
            want.push(m.page.clone());
            want.push(m.background.clone());
        }
    }
    for id in want {
        if all.iter().all(|w| w.id != id) {
            all.push(Workload::load(&cx.workloads_dir, &id)?);
        }
    }
    Ok(all)
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

fn run_profile(
    suite: &Suite,
    cx: &RunContext,
    bed: &dyn Bed,
    dir: &Path,
    all: &[Workload],
    cp: &mut Checkpoint,
) -> Result<Outcome> {
    let link = bed.link();
    let profile = link.profile.clone();
    let site = Site::prepare(&dir.join("origin"), all)?;
    for (_, a) in &site.hosts {
        bed.add_origin_address(*a)?;
    }
    bed.set_hosts(&site.hosts)?;
    if let Some(n) = suite.peer_initcwnd {
        tune_peer_routes(bed, n, &cx.log)?;
    }
    let _nginx = Nginx(start_nginx(bed, &site)?);
    let tr = Trialer {
        bed,
        site: &site,
        workloads_dir: &cx.workloads_dir,
        tmp: dir.join("tmp"),
        counter: 0.into(),
    };
    let probe_w = all
        .iter()
        .find(|w| w.mixed.is_none() && w.id != "bulk")
        .map(|w| w.id.clone());
    let probe_w = probe_w.unwrap_or_else(|| all[0].id.clone());

    let mut remotes = Vec::new();
    for carrier in systems::CARRIERS {
        for c in systems::CONGESTION {
            for policy in systems::POLICIES {
                if suite.systems.iter().any(|s| {
                    s.carrier() == Some(carrier)
                        && s.params.congestion.as_deref().unwrap_or("bbr") == c
                        && s.params.policy.as_deref().unwrap_or(systems::POLICIES[0]) == policy
                }) {
                    remotes.push(systems::start_longhaul_remote(
                        bed, dir, carrier, c, policy,
                    )?);
                }
            }
        }
    }
    let mut rows = Vec::new();
    let mut running: Vec<Running> = Vec::new();
    let mut failed: Vec<SystemSpec> = Vec::new();
    let mut lh = 0;
    for spec in &suite.systems {
        if spec.unsupported("http").is_some() {
            continue;
        }
        // Every longhaul variant (either carrier) gets its own edge-proxy port.
        let k = if spec.carrier().is_some() {
            lh += 1;
            lh - 1
        } else {
            0
        };
        let started = systems::start(bed, dir, spec, k, &site.hosts).and_then(|mut r| {
            // Warm-up load (discarded): the system is ready when a page loads through it.
            let proxy = r.proxy;
            systems::wait_ready(&mut r, || tr.replay(proxy, &probe_w, "http").map(|_| ()))?;
            Ok(r)
        });
        match started {
            Ok(r) => {
                (cx.log)(&format!("   started {}", spec.label()));
                running.push(r);
            }
            Err(e) => {
                (cx.log)(&format!("   could not start {}: {e:#}", spec.label()));
                failed.push(spec.clone());
                for w in &suite.workloads {
                    for c in &suite.clients {
                        if !suite.measures(spec, w, c) {
                            continue;
                        }
                        for s in &suite.schemes {
                            let mut row = Row::skipped(
                                &profile,
                                w,
                                c,
                                &spec.id,
                                s,
                                &format!("did not start: {e:#}"),
                            );
                            row.params = spec.params.clone();
                            rows.push(row);
                        }
                    }
                }
            }
        }
    }
    let trials = dir.join("trials.jsonl");
    let link_model = LinkModel {
        rtt_ms: link.rtt_ms,
        rate_bps: link.rate_bps,
    };
    let mut cell = 0u64;
    for (w, client, scheme) in suite.cells(all) {
        let (wid, client, scheme) = (&w.id, client.as_str(), scheme.as_str());
        // The cell number seeds the order, so a resumed run measures a cell as a whole run would.
        cell += 1;
        let key = cell_key(wid, client, scheme);
        if let Some(done) = cp.get(&key) {
            (cx.log)(&format!("   {key}: finished in an earlier run (--resume)"));
            rows.extend(done.rows.iter().cloned());
            continue;
        }
        let mut cell_rows = Vec::new();
        let floor_w = match &w.mixed {
            Some(m) => all.iter().find(|x| x.id == m.page).cloned(),
            None => Some(w.clone()),
        };
        if let Some(f) = floor_w
            .as_ref()
            .and_then(|fw| floor::floor_ms(fw, &link_model))
        {
            if w.mixed.is_none() {
                cell_rows.push(Row::floor(&profile, wid, client, scheme, f));
            }
        }
        for spec in &suite.systems {
            if !suite.measures(spec, wid, client) {
                continue;
            }
            if let Some(why) = spec.unsupported(scheme) {
                let mut row = Row::skipped(&profile, wid, client, &spec.id, scheme, why);
                row.params = spec.params.clone();
                cell_rows.push(row);
            }
        }
        let active: Vec<&mut Running> = running
            .iter_mut()
            .filter(|r| {
                r.spec.unsupported(scheme).is_none() && suite.measures(&r.spec, wid, client)
            })
            .collect();
        let mut samples: Vec<Vec<f64>> = vec![Vec::new(); active.len()];
        let mut errors: Vec<Vec<String>> = vec![Vec::new(); active.len()];
        let order = shuffled_order(
            active.len(),
            suite.runs,
            suite.seed.wrapping_mul(1000).wrapping_add(cell),
        );
        (cx.log)(&format!(
            "   {wid} {client} {scheme}: {} systems x {} runs",
            active.len(),
            suite.runs
        ));
        for rep in &order {
            for &i in rep {
                let sys = &active[i];
                let r = match client {
                    "replay" => tr.replay(sys.proxy, wid, scheme).map(|p| {
                        // Per-object times of every replay load, for later reading.
                        let line = serde_json::json!({
                            "workload": wid, "system": sys.spec.id, "params": sys.spec.params,
                            "scheme": scheme, "load": p,
                        });
                        if let Ok(mut f) = std::fs::OpenOptions::new()
                            .create(true)
                            .append(true)
                            .open(&trials)
                        {
                            use std::io::Write as _;
                            let _ = writeln!(f, "{line}");
                        }
                        p.plt_ms
                    }),
                    "chromium" => tr.chromium(sys.proxy, w, scheme),
                    other => Err(anyhow::anyhow!("unknown client {other}")),
                };
                match r {
                    Ok(v) => samples[i].push(v),
                    Err(e) => errors[i].push(format!("{e:#}")),
                }
                std::thread::sleep(suite.gap);
            }
        }
        for (i, sys) in active.iter().enumerate() {
            let row = Row::measured(
                &profile,
                wid,
                client,
                &sys.spec.id,
                sys.spec.params.clone(),
                scheme,
                std::mem::take(&mut samples[i]),
                std::mem::take(&mut errors[i]),
            );
            (cx.log)(&format!(
                "      {:<44} median {:>8} ms  p95 {:>8} ms  ({} ok, {} failed)",
                sys.spec.label(),
                row.plt_ms_median
                    .map(|v| format!("{v:.0}"))
                    .unwrap_or_else(|| "-".into()),
                row.plt_ms_p95
                    .map(|v| format!("{v:.0}"))
                    .unwrap_or_else(|| "-".into()),
                row.runs,
                row.failures
            ));
            cell_rows.push(row);
        }
        let missing = suite.missing_in_cell(&failed, wid, client, scheme);
        if missing.is_empty() {
            cp.record(Cell {
                cell: key,
                rows: cell_rows.clone(),
                load: Vec::new(),
            })?;
        } else {
            let names: Vec<String> = missing.iter().map(|s| s.label()).collect();
            (cx.log)(&format!(
                "   {key}: not checkpointed, {} did not start; --resume measures it again",
                names.join(", ")
            ));
        }
        rows.extend(cell_rows);
    }
    if !suite.initcwnds.is_empty() {
        if let Some(done) = cp.get(INITCWND_CELL) {
            (cx.log)("   initial-window sweep: finished in an earlier run (--resume)");
            rows.extend(done.rows.iter().cloned());
        } else {
            let sweep = initcwnd_sweep(suite, cx, bed, &tr, &profile)?;
            cp.record(Cell {
                cell: INITCWND_CELL.into(),
                rows: sweep.clone(),
                load: Vec::new(),
            })?;
            rows.extend(sweep);
        }
    }
    let mut load = Vec::new();
    if let Some(done) = cp.get(LOAD_CELL) {
        (cx.log)("   offered load: finished in an earlier run (--resume)");
        load.extend(done.load.iter().cloned());
    } else if !suite.load_fractions.is_empty() {
        let wid = if all.iter().any(|w| w.id == "yahoo") {
            "yahoo"
        } else {
            probe_w.as_str()
        };
        let w = all.iter().find(|w| w.id == wid).expect("loaded");
        (cx.log)(&format!(
            "   offered load on {wid} (replay, http), {:?} per point",
            suite.load_window
        ));
        for sys in &running {
            let p = &sys.spec.params;
            let main_variant = suite
                .systems
                .iter()
                .find(|s| s.id == sys.spec.id)
                .map(|s| &s.params);
            // The pool-size variants (seed 001 draws one line per number of connections).
            if sys.spec.carrier().is_some()
                && (p.congestion != main_variant.and_then(|m| m.congestion.clone())
                    || p.policy != main_variant.and_then(|m| m.policy.clone()))
            {
                continue;
            }
            for (k, f) in suite.load_fractions.iter().enumerate() {
                let rate = crate::load::rate_for(w, f * link.rate_bps / 1e6);
                let seed = suite.seed.wrapping_add(k as u64);
                let before = bed.long_link();
                match tr.load(sys.proxy, wid, rate, suite.load_window, seed) {
                    Ok(r) => {
                        let links = before.zip(bed.long_link()).map(|(b, a)| {
                            (
                                crate::load::LinkPoint::between(&b.0, &a.0),
                                crate::load::LinkPoint::between(&b.1, &a.1),
                            )
                        });
                        let (down_link, up_link) = (links.map(|l| l.0), links.map(|l| l.1));
                        let pt = LoadPoint {
                            profile: profile.clone(),
                            system: sys.spec.label(),
                            workload: wid.into(),
                            offered_mbit: r.offered_mbit,
                            carried_mbit: r.carried_mbit,
                            pages: r.pages,
                            failures: r.failures,
                            plt_ms_median: crate::stats::median(&r.plt_ms),
                            down_link,
                            up_link,
                        };
                        let link_note = links.map_or(String::new(), |(d, u)| {
                            format!(
                                "; down link: {} packets, {} queue drops, {} lost, mean queue wait {:.0} ms; \
                                 up: {} packets, {} queue drops, mean queue wait {:.0} ms",
                                d.packets, d.queue_drops, d.loss_drops, d.queue_wait_ms_mean,
                                u.packets, u.queue_drops, u.queue_wait_ms_mean
                            )
                        });
                        (cx.log)(&format!(
                            "      {:<40} offered {:>7.1} carried {:>7.1} Mbit/s, {} pages, {} failed, median PLT {} ms{link_note}",
                            pt.system,
                            pt.offered_mbit,
                            pt.carried_mbit,
                            pt.pages,
                            pt.failures,
                            pt.plt_ms_median.map_or("-".into(), |m| format!("{m:.0}"))
                        ));
                        load.push(pt);
                    }
                    Err(e) => (cx.log)(&format!("      {} at {f}: {e:#}", sys.spec.label())),
                }
                std::thread::sleep(suite.gap);
            }
        }
        if failed.is_empty() {
            cp.record(Cell {
                cell: LOAD_CELL.into(),
                rows: Vec::new(),
                load: load.clone(),
            })?;
        } else {
            (cx.log)(
                "   offered load: not checkpointed, some systems did not start; \
                 --resume measures it again",
            );
        }
    }
    Ok(Outcome { rows, load })
}

/// Seed 000 Table 1: the Yahoo page direct, with the origin's initial window set per step.
fn initcwnd_sweep(
    suite: &Suite,
    cx: &RunContext,
    bed: &dyn Bed,
    tr: &Trialer,
    profile: &str,
) -> Result<Vec<Row>> {
    let wid = sweep_page(&suite.workloads);
    let mut rows = Vec::new();
    (cx.log)(&format!(
        "   initial-window sweep on {wid} (direct, replay, http)"
    ));
    let order = shuffled_order(suite.initcwnds.len(), suite.runs, suite.seed ^ 0x1c);
    let mut samples: Vec<Vec<f64>> = vec![Vec::new(); suite.initcwnds.len()];
    let mut errors: Vec<Vec<String>> = vec![Vec::new(); suite.initcwnds.len()];
    for rep in &order {
        for &i in rep {
            bed.set_initcwnd(Node::Origin, suite.initcwnds[i])?;
            match tr.replay(None, wid, "http") {
                Ok(p) => samples[i].push(p.plt_ms),
                Err(e) => errors[i].push(format!("{e:#}")),
            }
            std::thread::sleep(suite.gap);
        }
    }
    bed.set_initcwnd(Node::Origin, LINUX_INITCWND)?;
    for (i, iw) in suite.initcwnds.iter().enumerate() {
        let params = Params {
            initcwnd: Some(*iw),
            ..Params::default()
        };
        let row = Row::measured(
            profile,
            wid,
            "replay",
            "direct",
            params,
            "http",
            std::mem::take(&mut samples[i]),
            std::mem::take(&mut errors[i]),
        );
        (cx.log)(&format!(
            "      iw={iw:<3} median {:?} ms",
            row.plt_ms_median.map(|v| v.round())
        ));
        rows.push(row);
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn suite(sweep: Option<Vec<String>>) -> Suite {
        let main = SystemSpec::longhaul(10, "bbr", "least-outstanding");
        Suite {
            name: "full".into(),
            profiles: vec!["pacific".into()],
            workloads: vec!["yahoo".into(), "google".into()],
            systems: vec![
                SystemSpec::plain("direct"),
                SystemSpec::longhaul(1, "bbr", "least-outstanding"),
                main.clone(),
            ],
            clients: vec!["replay".into(), "chromium".into()],
            chromium_workloads: vec!["yahoo".into(), "google".into()],
            schemes: vec!["http".into()],
            chromium_schemes: vec!["http".into()],
            runs: 10,
            seed: 1,
            gap: Duration::from_millis(1200),
            initcwnds: vec![],
            load_fractions: vec![],
            load_window: Duration::from_secs(10),
            main_variants: vec![SystemSpec::plain("direct"), main],
            sweep_workloads: sweep,
            resume: false,
            peer_initcwnd: None,
            custom_profiles: Vec::new(),
        }
    }

    #[test]
    fn the_programs_a_suite_needs_follow_its_systems_and_clients() {
        let mut s = suite(None);
        assert_eq!(s.programs(), ["nginx", "chromium"]);
        s.clients = vec!["replay".into()];
        s.systems.push(SystemSpec::plain("squid-chain"));
        s.systems.push(SystemSpec::plain("haproxy-h2"));
        assert_eq!(s.programs(), ["nginx", "squid", "haproxy"]);
    }

    #[test]
    fn a_program_counts_as_present_only_as_an_executable_file_on_the_path() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = std::env::temp_dir().join(format!("pageload-path-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("squid")).unwrap();
        std::fs::write(dir.join("nginx"), "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(dir.join("nginx"), std::fs::Permissions::from_mode(0o755))
            .unwrap();
        std::fs::write(dir.join("haproxy"), "not executable").unwrap();
        let path = std::env::join_paths([Path::new("/nonexistent"), &dir]).unwrap();
        let want = ["nginx", "squid", "haproxy", "chromium"];
        assert_eq!(
            missing_programs(&want, Some(&path)),
            ["squid", "haproxy", "chromium"]
        );
        assert_eq!(missing_programs(&want, None), want);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_cell_is_incomplete_only_without_a_system_it_measures() {
        let s = suite(Some(vec!["yahoo".into()]));
        let failed = vec![
            SystemSpec::longhaul(1, "bbr", "least-outstanding"),
            SystemSpec::plain("haproxy-h2"),
        ];
        let labels = |w, c, sch| -> Vec<String> {
            s.missing_in_cell(&failed, w, c, sch)
                .iter()
                .map(|x| x.label())
                .collect()
        };
        // The N=1 variant runs only on the sweep page with replay; HAProxy only over http.
        assert_eq!(
            labels("yahoo", "replay", "http"),
            [failed[0].label(), failed[1].label()]
        );
        assert_eq!(labels("yahoo", "replay", "https"), [failed[0].label()]);
        assert_eq!(labels("google", "replay", "http"), [failed[1].label()]);
        assert!(labels("google", "chromium", "https").is_empty());
        assert!(s.missing_in_cell(&[], "yahoo", "replay", "http").is_empty());
    }

    #[test]
    fn swept_variants_run_only_on_the_sweep_page_with_the_replay_client() {
        let s = suite(Some(vec!["yahoo".into()]));
        let n1 = SystemSpec::longhaul(1, "bbr", "least-outstanding");
        let n10 = SystemSpec::longhaul(10, "bbr", "least-outstanding");
        let direct = SystemSpec::plain("direct");
        assert!(s.measures(&n1, "yahoo", "replay"));
        assert!(!s.measures(&n1, "yahoo", "chromium"));
        assert!(!s.measures(&n1, "google", "replay"));
        for (w, c) in [("yahoo", "chromium"), ("google", "replay")] {
            assert!(s.measures(&n10, w, c));
            assert!(s.measures(&direct, w, c));
        }
        // Without a sweep page every variant runs in every cell.
        assert!(suite(None).measures(&n1, "google", "chromium"));
    }

    #[test]
    fn settings_name_what_a_cell_measures_but_not_which_cells_run() {
        let a = suite(None);
        let mut b = a.clone();
        b.profiles = vec!["satellite".into()];
        b.workloads = vec!["bulk".into()];
        b.resume = true;
        assert_eq!(a.settings(), b.settings());
        b.runs = 5;
        assert_ne!(a.settings(), b.settings());
        // Tuned peer routes are a different measurement; untuned runs keep the settings line
        // that checkpoints written before the option existed carry.
        let mut c = a.clone();
        c.peer_initcwnd = Some(32);
        assert_eq!(c.settings(), format!("{} peer_initcwnd=32", a.settings()));
        assert!(!a.settings().contains("peer_initcwnd"));
    }

    #[test]
    fn a_profile_from_a_file_is_part_of_its_checkpoint_settings() {
        let mut s = suite(None);
        let clean = testbed::Profile::from_toml(
            "name = \"satellite-clean\"\nbase = \"satellite\"\nloss = \"none\"\n",
        )
        .unwrap();
        s.custom_profiles = vec![clean.clone()];
        // Built-in profiles keep the suite's settings line.
        assert_eq!(s.profile_settings("satellite"), s.settings());
        let one = s.profile_settings("satellite-clean");
        assert!(one.starts_with(&s.settings()) && one.contains("satellite-clean"));
        // Editing the file changes what a resumed run must match.
        let mut edited = clean;
        edited.seed += 1;
        s.custom_profiles = vec![edited];
        assert_ne!(s.profile_settings("satellite-clean"), one);
    }
}
