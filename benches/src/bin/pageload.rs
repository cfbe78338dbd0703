//! `pageload`: loads the seeds' page models through longhaul and its peers over emulated long
//! links and reports medians, p95 and ratios measured side by side in one run.
#![forbid(unsafe_code)]

use anyhow::{bail, Context, Result};
use clap::{Args, Parser, Subcommand};
use longhaul_benches::bed::{Bed, EmulatedBed, VethBed};
use longhaul_benches::load;
use longhaul_benches::model;
use longhaul_benches::origin::OriginAlpn;
use longhaul_benches::plots;
use longhaul_benches::replay::{self, ReplayConfig};
use longhaul_benches::results::{self, Row};
use longhaul_benches::runner::{self, RunContext, Suite};
use longhaul_benches::suites;
use longhaul_benches::systems;
use longhaul_benches::workload::{self, Workload};
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

#[derive(Parser)]
#[command(
    version,
    about = "Page-load benchmark of longhaul and its peers over emulated long links"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Print the workloads, or regenerate the data files from the seeds' numbers.
    Workloads {
        /// Write every seed workload as DIR/ID.toml (deterministic); the page models' files
        /// (almanac-2024-median.toml) are their own source and are not written.
        #[arg(long)]
        write: Option<PathBuf>,
    },
    /// Quick suite: pacific; yahoo, google, amazon; direct, single-proxy, squid-chain,
    /// haproxy-h2, longhaul-tcp; replay over http and https, Chromium on yahoo over http; 5
    /// repetitions.
    Quick(SuiteArgs),
    /// Full suite: every profile, page and system, longhaul's pool sizes, 10 repetitions.
    Full(SuiteArgs),
    /// Tiny demo: pacific, yahoo, direct vs longhaul-tcp, replay over http; prints the table.
    Demo(SuiteArgs),
    /// One page load with the replay client, as JSON on stdout (run by the suites in the client
    /// namespace).
    ReplayOnce(ReplayOnce),
    /// Page loads arriving at a Poisson rate, as JSON on stdout (offered-load points).
    LoadOnce(LoadOnce),
    /// The origin's HTTP/3 side (the `direct-h3` system, run in the origin namespace): serves
    /// ROOT/HOST/PATH over QUIC on every --listen address until killed.
    H3Origin(H3Origin),
    /// Write results.json, summary.md, load.json and the plots of a run directory from the
    /// cells its checkpoints hold (PROFILE/cells.jsonl), finished or not: a look at a long run
    /// while it runs or after it stopped, without running anything.
    Report {
        /// Run directory.
        dir: PathBuf,
    },
    /// Redraw the plots of a run directory from its results.json (and load.json).
    Plot {
        /// Run directory.
        dir: PathBuf,
    },
    /// Per system and scheme, how much longer than the split-proxy model each object of each
    /// replay load took (from PROFILE/trials.jsonl of a run directory), as markdown on stdout.
    Excess {
        /// Run directory.
        dir: PathBuf,
    },
}

#[derive(Args)]
struct LoadOnce {
    #[arg(long)]
    workloads_dir: PathBuf,
    #[arg(long)]
    workload: String,
    /// Page loads per second.
    #[arg(long)]
    rate: f64,
    /// Arrival window in ms.
    #[arg(long)]
    window_ms: u64,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    #[arg(long)]
    proxy: Option<SocketAddr>,
    /// host=ip, repeated.
    #[arg(long)]
    resolve: Vec<String>,
    /// Source addresses of the simulated customers (comma-separated): page load k comes
    /// from address k modulo their number. Absent: every load from the namespace's address.
    #[arg(long, value_delimiter = ',')]
    customers: Vec<IpAddr>,
}

#[derive(Args, Clone)]
struct SuiteArgs {
    /// Run directory (results.json, summary.md, plots).
    #[arg(long, default_value = "pageload-out")]
    out: PathBuf,
    /// Link profiles (comma-separated): built-in names, or names of --profile-file profiles.
    #[arg(long, value_delimiter = ',')]
    profiles: Option<Vec<String>>,
    /// A link profile of your own, from a TOML file: `name` (required; names the results and
    /// the run's subdirectory), `base` (the built-in profile it starts from, default pacific)
    /// and any of `rtt_ms`, `rate_mbit`, `down_rate_mbit`, `up_rate_mbit`, `queue_bytes`,
    /// `loss`, `jitter_ms`, `access_delay_ms`, `origin_delay_ms`, `congestion_control`,
    /// `tcp_rmem`, `tcp_wmem`, `slow_start_after_idle`, `seed`. Repeatable. Without
    /// --profiles the suite runs these profiles only.
    #[arg(long = "profile-file")]
    profile_files: Vec<PathBuf>,
    /// Workload ids (comma-separated): built-in ones, or ids of --workload-file page models.
    #[arg(long, value_delimiter = ',')]
    workloads: Option<Vec<String>>,
    /// A page model of your own, from a TOML file (the format of
    /// benches/workloads/almanac-2024-median.toml: `id`, `source`, `seed`, `hosts` and
    /// `[[group]]`s of objects). Repeatable. Without --workloads the suite (and its Chromium
    /// client) runs these pages only.
    #[arg(long = "workload-file")]
    workload_files: Vec<PathBuf>,
    /// System ids (comma-separated): direct, single-proxy, squid-chain, haproxy-h2,
    /// longhaul-tcp, longhaul-quic, direct-h3 (HTTPS only).
    #[arg(long, value_delimiter = ',')]
    systems: Option<Vec<String>>,
    /// Repetitions per cell.
    #[arg(long)]
    runs: Option<usize>,
    /// Clients (replay, chromium).
    #[arg(long, value_delimiter = ',')]
    clients: Option<Vec<String>>,
    /// Schemes (http, https).
    #[arg(long, value_delimiter = ',')]
    schemes: Option<Vec<String>>,
    /// longhaul pool sizes.
    #[arg(long, value_delimiter = ',')]
    pool_sizes: Option<Vec<u32>>,
    /// longhaul congestion controls (`bbr`, `cubic`, `reno`, `rate` for QUIC, or `default`:
    /// each carrier's default, `rate` for QUIC and bbr for TCP).
    #[arg(long, value_delimiter = ',')]
    congestion: Option<Vec<String>>,
    /// longhaul stream placement policies (`default`: each carrier's own, `pack` on QUIC and
    /// least-outstanding on TCP; `least-outstanding`, `expected-completion`, `pack`,
    /// `round-robin`, `fewest-streams`).
    #[arg(long, value_delimiter = ',')]
    policies: Option<Vec<String>>,
    /// The edges' per-stream windows in bandwidth-delay products (`link.stream_window_bdp`):
    /// every longhaul variant runs with the first, the main variant also with each further
    /// one, side by side. Absent: the edge's default, unlabelled.
    #[arg(long, value_delimiter = ',')]
    stream_window_bdps: Option<Vec<u32>>,
    /// Initial windows to sweep (empty: none).
    #[arg(long, value_delimiter = ',')]
    initcwnds: Option<Vec<u32>>,
    /// Offered loads as fractions of the link rate (empty: none). `quick` and `demo` offer
    /// them through every system and longhaul variant given; `full` through the pool-size
    /// variants of the first congestion control and policy.
    #[arg(long, value_delimiter = ',')]
    load_fractions: Option<Vec<f64>>,
    /// Arrival window of each offered-load point, in seconds.
    #[arg(long, default_value_t = 10)]
    load_window_s: u64,
    /// Seed of the shuffled order; an offered-load point draws its arrivals from this seed
    /// plus the point's index among the load fractions.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Pause between repetitions in ms.
    #[arg(long, default_value_t = 1200)]
    gap_ms: u64,
    /// Directory of the workload files.
    #[arg(long)]
    workloads_dir: Option<PathBuf>,
    /// Test bed: `testbed` (the emulated long link), or `veth`, which joins the namespaces
    /// without any delay (plumbing check only).
    #[arg(long, default_value = "testbed")]
    bed: String,
    /// Continue a stopped run in the same --out: cells it finished (recorded in
    /// PROFILE/cells.jsonl) are kept, the rest are run. The other arguments must be the same.
    #[arg(long)]
    resume: bool,
    /// Tune the two proxy hosts as deploy/README.md does: run deploy/set-initcwnd with this
    /// initial window (segments) on each side's host route to the other before any system
    /// starts. Every proxy chain crossing the long link gets it; direct does not.
    #[arg(long)]
    peer_initcwnd: Option<u32>,
    /// What the HTTPS origins offer by ALPN: `h2` (h2 and http/1.1, as most HTTPS sites do;
    /// the replay client then uses one connection per origin) or `h1` (http/1.1 only, the
    /// origin of the results before HTTP/2 was offered).
    #[arg(long, default_value = "h2")]
    origin_alpn: OriginAlpn,
}

#[derive(Args)]
struct H3Origin {
    /// Document root: one directory per host name.
    #[arg(long)]
    root: PathBuf,
    /// Certificate chain (PEM).
    #[arg(long)]
    cert: PathBuf,
    /// Private key (PEM).
    #[arg(long)]
    key: PathBuf,
    /// UDP address to serve on, repeated.
    #[arg(long, required = true)]
    listen: Vec<SocketAddr>,
}

#[derive(Args)]
struct ReplayOnce {
    #[arg(long)]
    workloads_dir: PathBuf,
    #[arg(long)]
    workload: String,
    #[arg(long, default_value = "http")]
    scheme: String,
    #[arg(long)]
    proxy: Option<SocketAddr>,
    /// host=ip, repeated.
    #[arg(long)]
    resolve: Vec<String>,
    #[arg(long)]
    ca: Option<PathBuf>,
    /// What HTTPS offers by ALPN: `h1` (http/1.1 only), `h2` (h2 and http/1.1), or `h3`
    /// (HTTP/3 over QUIC, direct only).
    #[arg(long, default_value = "h1")]
    https: String,
    /// Page deadline in seconds.
    #[arg(long, default_value_t = 120)]
    timeout_s: u64,
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    if matches!(cli.cmd, Cmd::Quick(_) | Cmd::Full(_) | Cmd::Demo(_)) {
        // Ctrl-C or SIGTERM during a run: kill what runs in the test beds and remove them.
        testbed::signals::tear_down_on_signals("pageload")?;
    }
    match cli.cmd {
        Cmd::Workloads { write } => workloads(write),
        Cmd::Quick(a) => suite("quick", a),
        Cmd::Full(a) => suite("full", a),
        Cmd::Demo(a) => suite("demo", a),
        Cmd::ReplayOnce(a) => replay_once(a),
        Cmd::H3Origin(a) => h3_origin(a),
        Cmd::LoadOnce(a) => load_once(a),
        Cmd::Report { dir } => report(&dir),
        Cmd::Plot { dir } => replot(&dir),
        Cmd::Excess { dir } => excess(&dir),
    }
}

fn excess(dir: &Path) -> Result<()> {
    let mut any = false;
    for name in testbed::profile::Profile::names() {
        let path = dir.join(name).join("trials.jsonl");
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        let link = testbed::profile::Profile::named(name)
            .as_ref()
            .and_then(model::SplitLink::of_profile)
            .with_context(|| format!("profile {name} has no rate"))?;
        let mut trials = Vec::new();
        for (n, line) in text.lines().enumerate() {
            match serde_json::from_str::<model::TrialLine>(line) {
                Ok(t) => trials.push(t),
                // A run stopped mid-write leaves a torn last line.
                Err(e) => eprintln!("{}:{}: skipped: {e}", path.display(), n + 1),
            }
        }
        print!("{}", model::excess_markdown(name, &link, &trials));
        any = true;
    }
    if !any {
        bail!("no PROFILE/trials.jsonl under {}", dir.display());
    }
    Ok(())
}

fn report(dir: &Path) -> Result<()> {
    let longhaul_benches::checkpoint::RunCells {
        settings,
        mut rows,
        load,
        cells,
        host,
    } = longhaul_benches::checkpoint::read_run(dir)?;
    if cells == 0 {
        bail!(
            "no finished cell under {} (PROFILE/{})",
            dir.display(),
            longhaul_benches::checkpoint::FILE
        );
    }
    longhaul_benches::checkpoint::prefer_measured(&mut rows);
    results::fill_ratios(&mut rows);
    results::sort(&mut rows);
    let pre = format!(
        "Report of the {cells} finished cells checkpointed in this run directory (a run that may \
         not have finished: cells not listed were not measured). Settings: {}.",
        settings.join("; ")
    );
    // A run's own copy of its workloads (with any --workload-file pages), if it has one.
    let own = dir.join("workloads");
    let workloads_dir = if own.is_dir() {
        own
    } else {
        default_workloads_dir()
    };
    write_run(
        dir,
        &workloads_dir,
        "pageload report",
        &pre,
        &rows,
        &load,
        &host,
    )?;
    println!("{}", dir.join("summary.md").display());
    Ok(())
}

fn default_workloads_dir() -> PathBuf {
    let compiled = Path::new(env!("CARGO_MANIFEST_DIR")).join("workloads");
    if compiled.is_dir() {
        compiled
    } else {
        PathBuf::from("benches/workloads")
    }
}

fn strs(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

/// The suite `name` ([`suites::SUITES`]) with the command line's slice applied.
fn build_suite(name: &str, a: &SuiteArgs) -> Result<Suite> {
    let d = suites::named(name).unwrap_or(&suites::FULL);
    let systems = a.systems.clone().unwrap_or_else(|| strs(d.systems));
    let pools = a
        .pool_sizes
        .clone()
        .unwrap_or_else(|| d.pool_sizes.to_vec());
    let congestion = a.congestion.clone().unwrap_or_else(|| strs(d.congestion));
    let policies = a.policies.clone().unwrap_or_else(|| strs(d.policies));
    let windows = a.stream_window_bdps.as_deref().unwrap_or(&[]);
    let max = mux::config::MAX_STREAM_WINDOW_BDPS;
    if let Some(w) = windows.iter().find(|w| !(1..=max).contains(*w)) {
        bail!("--stream-window-bdps: {w} is not in 1..={max}");
    }
    let mut specs = Vec::new();
    let mut main_variants = Vec::new();
    for s in &systems {
        if systems::lookup(s).is_none() {
            bail!(
                "unknown system {s:?} (one of {:?}; the floor is always computed)",
                systems::ids()
            );
        }
        if systems::carrier_of(s).is_some()
            && (pools.is_empty() || congestion.is_empty() || policies.is_empty())
        {
            bail!("{s} needs at least one pool size, congestion control and policy");
        }
        // longhaul-tcp and longhaul-quic: the pool-size sweep with the first congestion
        // control and policy; the other congestion controls and policies at the default size.
        let mut v = systems::variants(s, &pools, &congestion, &policies);
        let mut m = systems::main_variant(s, &pools, &congestion, &policies);
        systems::with_windows(s, &mut v, &mut m, windows);
        specs.extend(v);
        main_variants.extend(m);
    }
    let custom_workloads = read_workload_files(&a.workload_files)?;
    let workloads = match (&a.workloads, custom_workloads.is_empty()) {
        (Some(w), _) => w.clone(),
        (None, false) => custom_workloads.iter().map(|(w, _)| w.id.clone()).collect(),
        (None, true) => d.workloads.resolve(),
    };
    let mut known = workload::all_ids();
    known.extend(custom_workloads.iter().map(|(w, _)| w.id.clone()));
    for w in &workloads {
        if !known.contains(w) {
            bail!("unknown workload {w:?}: give a built-in one or the id of a --workload-file ({known:?})");
        }
    }
    // The full suite compares every system on every page at longhaul's main variant, and
    // sweeps longhaul's pool size, congestion control and policy on one page (Yahoo, or the
    // first one given) with the replay client: seed 001's figure 5b is drawn from one page.
    // The other suites run every variant in every cell.
    let sweep_workloads = d
        .sweep_on_one_page
        .then(|| vec![runner::sweep_page(&workloads).to_string()]);
    let custom_profiles = read_profile_files(&a.profile_files)?;
    let profiles = match (&a.profiles, custom_profiles.is_empty()) {
        (Some(p), _) => p.clone(),
        (None, false) => custom_profiles.iter().map(|p| p.name.clone()).collect(),
        (None, true) => strs(d.profiles),
    };
    for p in &profiles {
        let known = testbed::Profile::named(p).is_some()
            || custom_profiles.iter().any(|c| &c.name == p)
            || (a.bed == "veth" && p == "veth-nodelay");
        if !known {
            bail!(
                "unknown profile {p:?}: give a built-in one ({}) or the name of a --profile-file",
                testbed::Profile::names().join(", ")
            );
        }
    }
    Ok(Suite {
        name: name.into(),
        profiles,
        chromium_workloads: if a.workloads.is_some() || !custom_workloads.is_empty() {
            workloads.clone()
        } else {
            d.browser_workloads.resolve()
        },
        workloads,
        systems: specs,
        clients: a.clients.clone().unwrap_or_else(|| strs(d.clients)),
        schemes: a.schemes.clone().unwrap_or_else(|| strs(d.schemes)),
        runs: a.runs.unwrap_or(d.runs).max(1),
        seed: a.seed,
        gap: Duration::from_millis(a.gap_ms),
        initcwnds: a.initcwnds.clone().unwrap_or_else(|| d.initcwnds.to_vec()),
        // The quick suite keeps to a few minutes: Chromium over plain HTTP only.
        chromium_schemes: a.schemes.clone().unwrap_or_else(|| strs(d.browser_schemes)),
        load_fractions: a
            .load_fractions
            .clone()
            .unwrap_or_else(|| d.load_fractions.to_vec()),
        load_window: Duration::from_secs(a.load_window_s),
        main_variants,
        sweep_workloads,
        resume: a.resume,
        peer_initcwnd: a.peer_initcwnd,
        origin_alpn: a.origin_alpn,
        custom_profiles,
        custom_workloads: custom_workloads.into_iter().map(|(w, _)| w).collect(),
    })
}

/// Reads `--workload-file` page models: each checked and expanded once, its id not a built-in
/// workload's nor another file's. Returns each workload with its file's text (copied into the
/// run directory, where the clients read it).
fn read_workload_files(paths: &[PathBuf]) -> Result<Vec<(Workload, String)>> {
    let mut out: Vec<(Workload, String)> = Vec::new();
    for path in paths {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading workload file {}", path.display()))?;
        let w = longhaul_benches::pagemodel::PageModel::from_toml(&text)
            .and_then(|m| m.expand())
            .with_context(|| format!("in workload file {}", path.display()))?;
        if workload::all_ids().contains(&w.id) {
            bail!(
                "workload id {:?} in {} is a built-in workload's; name yours differently",
                w.id,
                path.display()
            );
        }
        if out.iter().any(|(o, _)| o.id == w.id) {
            bail!("two workload files have the id {:?}", w.id);
        }
        out.push((w, text));
    }
    Ok(out)
}

/// The run's own workloads directory, `OUT/workloads`: a copy of `from` (the built-in files)
/// and the `--workload-file` models as `ID.toml`. The clients (`replay-once`, `load-once`) and
/// `pageload report` read the pages from it, and it records what the run loaded.
fn run_workloads_dir(out: &Path, from: &Path, files: &[(Workload, String)]) -> Result<PathBuf> {
    let dir = out.join("workloads");
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    for e in std::fs::read_dir(from).with_context(|| format!("reading {}", from.display()))? {
        let p = e?.path();
        if p.extension().is_some_and(|x| x == "toml") {
            let to = dir.join(p.file_name().expect("a file"));
            std::fs::copy(&p, &to)
                .with_context(|| format!("copying {} to {}", p.display(), to.display()))?;
        }
    }
    for (w, text) in files {
        std::fs::write(dir.join(format!("{}.toml", w.id)), text)?;
    }
    Ok(dir)
}

/// Reads `--profile-file` profiles. Each must be named, with a name that can be a directory
/// (letters, digits, `-`, `_`, `.`), and differ from the built-in profiles and each other.
fn read_profile_files(paths: &[PathBuf]) -> Result<Vec<testbed::Profile>> {
    let mut out: Vec<testbed::Profile> = Vec::new();
    for path in paths {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading profile file {}", path.display()))?;
        let spec: testbed::profile::ProfileSpec = toml::from_str(&text)
            .with_context(|| format!("invalid profile TOML in {}", path.display()))?;
        let Some(name) = spec.name.as_deref() else {
            bail!(
                "profile file {} has no `name`: results and the run's subdirectory are named after it",
                path.display()
            );
        };
        let valid = !name.is_empty()
            && !name.starts_with('.')
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
        if !valid {
            bail!(
                "profile name {name:?} in {} must be letters, digits, '-', '_' or '.' and not start with '.'",
                path.display()
            );
        }
        if testbed::Profile::named(name).is_some() || name == "veth-nodelay" {
            bail!(
                "profile name {name:?} in {} is a built-in profile's; name yours differently",
                path.display()
            );
        }
        if out.iter().any(|p| p.name == name) {
            bail!("two profile files are named {name:?}");
        }
        let p = testbed::Profile::from_toml(&text)
            .with_context(|| format!("in profile file {}", path.display()))?;
        out.push(p);
    }
    Ok(out)
}

fn open_bed(kind: &str, profile: &str, custom: &[testbed::Profile]) -> Result<Box<dyn Bed>> {
    match kind {
        "testbed" => match custom.iter().find(|p| p.name == profile) {
            Some(p) => Ok(Box::new(EmulatedBed::with_profile(p)?)),
            None => Ok(Box::new(EmulatedBed::up(profile)?)),
        },
        "veth" => {
            if profile != "veth-nodelay" {
                bail!("the veth bed has no long link: use --profiles veth-nodelay with --bed veth");
            }
            Ok(Box::new(VethBed::up()?))
        }
        other => bail!("unknown bed {other:?}"),
    }
}

/// Without root, re-runs this command as root of a new user namespace (the test bed works
/// there unprivileged); returns the child's success, or `None` when no re-run is needed.
fn reexec_unprivileged() -> Result<Option<bool>> {
    use testbed::privileges::IN_USERNS_ENV;
    match testbed::privileges() {
        testbed::Privileges::Root => Ok(None),
        testbed::Privileges::UserNamespace if std::env::var_os(IN_USERNS_ENV).is_none() => {
            eprintln!("pageload: not root; running inside an unprivileged user namespace");
            let st = std::process::Command::new("unshare")
                .args(["--user", "--map-root-user", "--"])
                .arg(std::env::current_exe()?)
                .args(std::env::args_os().skip(1))
                .env(IN_USERNS_ENV, "1")
                .status()
                .context("running unshare --user --map-root-user")?;
            Ok(Some(st.success()))
        }
        testbed::Privileges::UserNamespace => Ok(None),
        testbed::Privileges::None => {
            bail!("pageload needs network namespaces: run as root, or enable unprivileged user namespaces")
        }
    }
}

fn suite(name: &str, a: SuiteArgs) -> Result<()> {
    if let Some(ok) = reexec_unprivileged()? {
        if !ok {
            bail!("pageload {name} failed inside the user namespace");
        }
        return Ok(());
    }
    let mut s = build_suite(name, &a)?;
    if a.bed == "veth" && a.profiles.is_none() {
        s.profiles = vec!["veth-nodelay".into()];
    }
    let missing = runner::missing_programs(&s.programs(), std::env::var_os("PATH").as_deref());
    if !missing.is_empty() {
        bail!(
            "pageload {name} runs {}, not found on PATH: install with scripts/install-deps \
             (or pick a slice without them: --systems, --clients)",
            missing.join(", ")
        );
    }
    std::fs::create_dir_all(&a.out).with_context(|| format!("creating {}", a.out.display()))?;
    let out = std::fs::canonicalize(&a.out)?;
    let _pinned = pin_build(&out)?;
    let workloads_dir = std::fs::canonicalize(
        a.workloads_dir
            .clone()
            .unwrap_or_else(default_workloads_dir),
    )?;
    let workloads_dir = run_workloads_dir(
        &out,
        &workloads_dir,
        &read_workload_files(&a.workload_files)?,
    )?;
    let bed_kind = a.bed.clone();
    let custom = s.custom_profiles.clone();
    let opener = move |p: &str| open_bed(&bed_kind, p, &custom);
    let log = |l: &str| eprintln!("{l}");
    let cx = RunContext {
        workloads_dir: workloads_dir.clone(),
        out: out.clone(),
        open_bed: &opener,
        log: &log,
    };
    eprintln!(
        "pageload {name}: {} profiles x {} workloads x {} systems x {} clients x {} schemes x {} runs -> {}",
        s.profiles.len(),
        s.workloads.len(),
        s.systems.len(),
        s.clients.len(),
        s.schemes.len(),
        s.runs,
        out.display()
    );
    let outcome = runner::run_suite(&s, &cx)?;
    let rows = outcome.rows;
    // The CPUs' shares of this suite's cells (the directory may hold other profiles' runs).
    let host: Vec<_> = longhaul_benches::checkpoint::read_run(&out)
        .map(|r| r.host)
        .unwrap_or_default()
        .into_iter()
        .filter(|(cell, _)| {
            s.profiles
                .iter()
                .any(|p| cell.starts_with(&format!("{p}/")))
        })
        .collect();
    let pre = format!(
        "Suite `{}`: profiles {:?}, {} repetitions per cell, order shuffled per repetition (seed {}). \
         HTTPS origins offered {} by ALPN (`--origin-alpn {}`).",
        s.name,
        s.profiles,
        s.runs,
        s.seed,
        match s.origin_alpn {
            OriginAlpn::H1 => "http/1.1 only",
            OriginAlpn::H2 => "h2 and http/1.1",
        },
        s.origin_alpn
    );
    write_run(
        &out,
        &workloads_dir,
        &format!("pageload {}", s.name),
        &pre,
        &rows,
        &outcome.load,
        &host,
    )?;
    if suites::named(name).is_some_and(|d| d.prints_tables) {
        print!("{}", results::markdown_table(&rows));
        print!("{}", results::targets_markdown(&rows));
        let points = model::points(&rows, &workloads_dir, replay::DEFAULT_MAX_PER_HOST);
        print!("{}", model::markdown(&rows, &points));
    } else {
        println!("{}", out.join("summary.md").display());
    }
    Ok(())
}

/// Set in a suite that runs from its own copy of the binaries (see [`pin_build`]).
const PINNED_ENV: &str = "LONGHAUL_PINNED_BUILD";
/// Where in the run directory that copy lives while the suite runs.
const PINNED_DIR: &str = ".build";

/// Pins a suite to the build it started with. A full suite runs for hours, each replay load
/// re-executes `pageload` by path and each profile starts the proxies anew, so a rebuild of
/// the target directory mid-run would change (or, once the old file is gone, fail) every later
/// trial. The first call copies `pageload`, `edge-proxy` and `remote-proxy` into `OUT/.build`
/// and replaces this process with the copy (it returns only on error); in the copy it returns
/// a guard that removes the directory when the suite ends or a signal stops it.
fn pin_build(out: &Path) -> Result<PinnedBuild> {
    let dir = out.join(PINNED_DIR);
    if std::env::var_os(PINNED_ENV).is_some() {
        eprintln!(
            "pageload: running from a copy of this build in {}",
            dir.display()
        );
        let d = dir.clone();
        return Ok(PinnedBuild {
            _on_signal: testbed::signals::on_signal(move || {
                let _ = std::fs::remove_dir_all(&d);
            }),
            dir,
        });
    }
    match std::fs::remove_dir_all(&dir) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            return Err(e).with_context(|| format!("removing {}", dir.display()))
        }
        _ => {}
    }
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let copy = |from: &Path, name: &str| -> Result<PathBuf> {
        let to = dir.join(name);
        std::fs::copy(from, &to)
            .with_context(|| format!("copying {} to {}", from.display(), to.display()))?;
        Ok(to)
    };
    let exe = copy(&std::env::current_exe()?, "pageload")?;
    for name in ["edge-proxy", "remote-proxy"] {
        // A suite of peers only needs neither; a missing one fails where it is used.
        if let Ok(p) = systems::longhaul_bin(name) {
            copy(&p, name)?;
        }
    }
    use std::os::unix::process::CommandExt;
    let err = std::process::Command::new(&exe)
        .args(std::env::args_os().skip(1))
        .env(PINNED_ENV, "1")
        .env("LONGHAUL_BIN_DIR", &dir)
        .exec();
    Err(err).with_context(|| format!("running {}", exe.display()))
}

/// The pinned copy of the binaries, removed when dropped.
struct PinnedBuild {
    dir: PathBuf,
    _on_signal: testbed::signals::Registration,
}

impl Drop for PinnedBuild {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_dir_all(&self.dir) {
            eprintln!("pageload: removing {}: {e}", self.dir.display());
        }
    }
}

/// Writes a run directory's results.json, summary.md (titled `title`, `pre` before the table),
/// load.json when there are load points, and the plots; the split-proxy model is computed from
/// the page models in `workloads_dir`; `host` gives the CPUs' shares of the checkpointed cells.
fn write_run(
    out: &Path,
    workloads_dir: &Path,
    title: &str,
    pre: &str,
    rows: &[Row],
    load: &[load::LoadPoint],
    host: &[(String, longhaul_benches::host::HostShare)],
) -> Result<()> {
    results::validate(rows)?;
    std::fs::write(
        out.join("results.json"),
        serde_json::to_string_pretty(rows)?,
    )?;
    let pre = format!(
        "{pre} PLT in ms (replay: first request to last byte; chromium: loadEventEnd - \
         navigationStart). The floor is computed (levels x RTT + bytes / rate), not measured."
    );
    let points = model::points(rows, workloads_dir, replay::DEFAULT_MAX_PER_HOST);
    let mut summary = results::markdown_summary(title, &pre, rows);
    summary.push_str(&model::markdown(rows, &points));
    summary.push_str(&load::markdown(load));
    summary.push_str(&longhaul_benches::shipped::markdown(rows, load));
    summary.push_str(&longhaul_benches::host::markdown(host));
    std::fs::write(out.join("summary.md"), summary)?;
    if !load.is_empty() {
        std::fs::write(out.join("load.json"), serde_json::to_string_pretty(load)?)?;
    }
    for f in plots::draw_all(out, rows, load)? {
        eprintln!("plot {}", f.display());
    }
    Ok(())
}

fn replot(dir: &Path) -> Result<()> {
    let path = dir.join("results.json");
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let rows: Vec<Row> =
        serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
    results::validate(&rows)?;
    let load: Vec<load::LoadPoint> = match std::fs::read_to_string(dir.join("load.json")) {
        Ok(t) => serde_json::from_str(&t).context("parsing load.json")?,
        Err(_) => Vec::new(),
    };
    for f in plots::draw_all(dir, &rows, &load)? {
        println!("{}", f.display());
    }
    Ok(())
}

fn parse_resolve(cfg: &mut ReplayConfig, entries: &[String]) -> Result<()> {
    for r in entries {
        let (h, ip) = r
            .split_once('=')
            .with_context(|| format!("--resolve {r:?} is not host=ip"))?;
        cfg.resolve.insert(
            h.to_string(),
            ip.parse::<IpAddr>()
                .with_context(|| format!("bad address in {r:?}"))?,
        );
    }
    Ok(())
}

fn load_once(a: LoadOnce) -> Result<()> {
    let w = Workload::load(&a.workloads_dir, &a.workload)?;
    let mut cfg = ReplayConfig::new("http");
    cfg.proxy = a.proxy;
    parse_resolve(&mut cfg, &a.resolve)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let r = rt.block_on(load::run(
        &w,
        &cfg,
        a.rate,
        Duration::from_millis(a.window_ms),
        a.seed,
        &a.customers,
    ))?;
    println!("{}", serde_json::to_string(&r)?);
    Ok(())
}

fn h3_origin(a: H3Origin) -> Result<()> {
    // The controller of this namespace's TCP (the bed profile's), matched on QUIC.
    let cc = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_congestion_control")
        .context("reading net.ipv4.tcp_congestion_control")?;
    eprintln!("h3-origin: congestion control {} (as TCP here)", cc.trim());
    let cfg = longhaul_benches::http3::server_config(&a.cert, &a.key, Some(cc.trim()))?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(longhaul_benches::http3::serve(a.root, cfg, &a.listen))
}

fn replay_once(a: ReplayOnce) -> Result<()> {
    let w = Workload::load(&a.workloads_dir, &a.workload)?;
    let mut cfg = ReplayConfig::new(&a.scheme);
    cfg.proxy = a.proxy;
    cfg.ca_pem = a.ca;
    cfg.https = match a.https.as_str() {
        "h1" => replay::HttpsProtocol::Http1,
        "h2" => replay::HttpsProtocol::Http2,
        "h3" => replay::HttpsProtocol::Http3,
        other => bail!("--https must be h1, h2 or h3, not {other:?}"),
    };
    cfg.timeout = Duration::from_secs(a.timeout_s);
    parse_resolve(&mut cfg, &a.resolve)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let load = rt.block_on(async {
        match &w.mixed {
            None => replay::load_page(&w, &cfg).await,
            Some(m) => {
                let page = Workload::load(&a.workloads_dir, &m.page)?;
                let bg = Workload::load(&a.workloads_dir, &m.background)?;
                let bg_cfg = cfg.clone();
                let bg_task = tokio::spawn(async move { replay::load_page(&bg, &bg_cfg).await });
                tokio::time::sleep(Duration::from_millis(m.head_start_ms)).await;
                if bg_task.is_finished() {
                    bail!("the background transfer ended before the page load started");
                }
                let r = replay::load_page(&page, &cfg).await;
                bg_task.abort();
                r
            }
        }
    })?;
    println!("{}", serde_json::to_string(&load)?);
    Ok(())
}

fn workloads(write: Option<PathBuf>) -> Result<()> {
    let all = workload::generate_all();
    if let Some(dir) = write {
        std::fs::create_dir_all(&dir)?;
        // The page models' files are their own source, not generated.
        let models = longhaul_benches::pagemodel::BUILT_IN.map(|(id, _)| id);
        for w in all.iter().filter(|w| !models.contains(&w.id.as_str())) {
            let text = format!(
                "# Generated by `pageload workloads --write`; do not edit.\n{}",
                w.to_toml()?
            );
            Workload::from_toml(&text)?;
            std::fs::write(dir.join(format!("{}.toml", w.id)), text)?;
        }
    }
    println!("| workload | objects | hosts | levels | KB | source |");
    println!("|---|---:|---:|---:|---:|---|");
    for w in &all {
        println!(
            "| {} | {} | {} | {} | {:.0} | {} |",
            w.id,
            w.objects.len(),
            w.hosts.len(),
            w.levels().len(),
            w.total_bytes() as f64 / 1000.0,
            w.source
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, file: &str, text: &str) -> PathBuf {
        let p = dir.join(file);
        std::fs::write(&p, text).unwrap();
        p
    }

    fn suite_args(args: &[&str]) -> SuiteArgs {
        let mut argv = vec!["pageload", "quick"];
        argv.extend_from_slice(args);
        match Cli::try_parse_from(argv).unwrap().cmd {
            Cmd::Quick(a) => a,
            _ => unreachable!(),
        }
    }

    #[test]
    fn a_profile_file_is_read_over_its_base_and_selected_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let f = write(
            dir.path(),
            "clean.toml",
            "name = \"satellite-clean\"\nbase = \"satellite\"\nloss = \"none\"\n",
        );
        let f = f.to_str().unwrap();
        // Without --profiles the files' profiles are the suite's only ones.
        let s = build_suite("quick", &suite_args(&["--profile-file", f])).unwrap();
        assert_eq!(s.profiles, ["satellite-clean"]);
        let p = &s.custom_profiles[0];
        let sat = testbed::Profile::named("satellite").unwrap();
        assert_eq!(p.down.loss, testbed::LossModel::None);
        assert_eq!(p.up.loss, testbed::LossModel::None);
        assert_eq!((p.down.rate_bps, p.rtt()), (sat.down.rate_bps, sat.rtt()));
        // With --profiles, built-in and file profiles mix in the order given.
        let a = suite_args(&[
            "--profile-file",
            f,
            "--profiles",
            "satellite,satellite-clean",
        ]);
        assert_eq!(
            build_suite("quick", &a).unwrap().profiles,
            ["satellite", "satellite-clean"]
        );
    }

    /// A small page model file with id `id`.
    fn model(id: &str) -> String {
        format!(
            "id = \"{id}\"\nsource = \"test\"\nhosts = [\"www.x.test\", \"cdn.y.test\"]\n\
             [[group]]\nname = \"page\"\nkind = \"html\"\ncount = 1\nkb = 5\nhosts = [\"www.x.test\"]\n\
             [[group]]\nname = \"js\"\nkind = \"js\"\ncount = 3\nkb = 30\nhosts = [\"cdn.y.test\"]\nparent = \"page\"\n"
        )
    }

    #[test]
    fn a_workload_file_is_read_checked_and_selected_by_id() {
        let dir = tempfile::tempdir().unwrap();
        let f = write(dir.path(), "mine.toml", &model("my-page"));
        let f = f.to_str().unwrap();
        // Without --workloads the files' pages are the suite's only ones, for Chromium too.
        let s = build_suite("quick", &suite_args(&["--workload-file", f])).unwrap();
        assert_eq!(s.workloads, ["my-page"]);
        assert_eq!(s.chromium_workloads, ["my-page"]);
        assert_eq!(s.custom_workloads[0].objects.len(), 4);
        assert_eq!(s.custom_workloads[0].hosts.len(), 2);
        // With --workloads, built-in and file pages mix in the order given.
        let a = suite_args(&["--workload-file", f, "--workloads", "yahoo,my-page"]);
        let s = build_suite("quick", &a).unwrap();
        assert_eq!(s.workloads, ["yahoo", "my-page"]);
        // The page is part of what a resumed run must match.
        assert!(s
            .profile_settings("pacific")
            .contains("workload_files=[\"my-page:"));
        // The run's own directory holds the built-in files and the page model, which loads
        // as the same workload.
        let out = tempfile::tempdir().unwrap();
        let files = read_workload_files(&[PathBuf::from(f)]).unwrap();
        let wd = run_workloads_dir(out.path(), &default_workloads_dir(), &files).unwrap();
        assert_eq!(
            Workload::load(&wd, "my-page").unwrap(),
            s.custom_workloads[0]
        );
        assert_eq!(
            Workload::load(&wd, "almanac-2024-median")
                .unwrap()
                .objects
                .len(),
            71
        );
        Workload::load(&wd, "yahoo").unwrap();
    }

    #[test]
    fn bad_workload_files_and_unknown_workloads_are_refused_with_the_reason() {
        let dir = tempfile::tempdir().unwrap();
        let err =
            |args: &[&str]| format!("{:#}", build_suite("quick", &suite_args(args)).unwrap_err());
        let builtin = write(dir.path(), "a.toml", &model("yahoo"));
        let e = err(&["--workload-file", builtin.to_str().unwrap()]);
        assert!(e.contains("is a built-in workload's"), "{e}");
        let ok = write(dir.path(), "b.toml", &model("mine"));
        let ok = ok.to_str().unwrap();
        let e = err(&["--workload-file", ok, "--workload-file", ok]);
        assert!(e.contains("two workload files have the id \"mine\""), "{e}");
        let bad_ref = write(
            dir.path(),
            "c.toml",
            &model("mine").replace("parent = \"page\"", "parent = \"html\""),
        );
        let e = err(&["--workload-file", bad_ref.to_str().unwrap()]);
        assert!(
            e.contains("c.toml") && e.contains("parent \"html\" is not a group"),
            "{e}"
        );
        let zero = write(
            dir.path(),
            "d.toml",
            &model("mine").replace("kb = 30", "kb = 0"),
        );
        let e = err(&["--workload-file", zero.to_str().unwrap()]);
        assert!(e.contains("group \"js\"") && e.contains("positive"), "{e}");
        let negative = write(
            dir.path(),
            "e.toml",
            &model("mine").replace("count = 3", "count = -3"),
        );
        let e = err(&["--workload-file", negative.to_str().unwrap()]);
        assert!(e.contains("`count` is -3"), "{e}");
        let host = write(
            dir.path(),
            "f.toml",
            &model("mine").replace("hosts = [\"cdn.y.test\"]", "hosts = [\"cdn.z.test\"]"),
        );
        let e = err(&["--workload-file", host.to_str().unwrap()]);
        assert!(
            e.contains("\"cdn.z.test\" is not in the model's `hosts`"),
            "{e}"
        );
        let e = err(&["--workloads", "yahooo"]);
        assert!(e.contains("unknown workload \"yahooo\""), "{e}");
        let missing = dir.path().join("missing.toml");
        let e = err(&["--workload-file", missing.to_str().unwrap()]);
        assert!(e.contains("reading workload file"), "{e}");
    }

    #[test]
    fn bad_profile_files_and_unknown_profiles_are_refused_with_the_reason() {
        let dir = tempfile::tempdir().unwrap();
        let err =
            |args: &[&str]| format!("{:#}", build_suite("quick", &suite_args(args)).unwrap_err());
        let unnamed = write(dir.path(), "a.toml", "rtt_ms = 300\n");
        assert!(err(&["--profile-file", unnamed.to_str().unwrap()]).contains("has no `name`"));
        let builtin = write(dir.path(), "b.toml", "name = \"pacific\"\n");
        assert!(err(&["--profile-file", builtin.to_str().unwrap()]).contains("built-in"));
        let slash = write(dir.path(), "c.toml", "name = \"../x\"\n");
        assert!(err(&["--profile-file", slash.to_str().unwrap()]).contains("letters, digits"));
        let typo = write(dir.path(), "d.toml", "name = \"x\"\nrtt = 300\n");
        assert!(err(&["--profile-file", typo.to_str().unwrap()]).contains("invalid profile TOML"));
        let ok = write(dir.path(), "e.toml", "name = \"x\"\n");
        let ok = ok.to_str().unwrap();
        assert!(err(&["--profile-file", ok, "--profile-file", ok]).contains("two profile files"));
        assert!(err(&["--profiles", "pacifc"]).contains("unknown profile \"pacifc\""));
        let missing = dir.path().join("missing.toml");
        assert!(
            err(&["--profile-file", missing.to_str().unwrap()]).contains("reading profile file")
        );
    }
}
