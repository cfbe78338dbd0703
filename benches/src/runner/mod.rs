//! The suite runner: brings a bed up per profile, serves the workloads from nginx, starts every
//! system side by side, runs the repetitions in a shuffled order and turns samples into rows.
//!
//! Clients run as separate processes in the client namespace (`pageload replay-once`, or
//! Chromium), so every repetition starts with cold client connections, as a new page visit.
//!
//! - this module: what a suite is ([`Suite`]) and the loop over its profiles;
//! - `setup`: the origin and the tuned routes of one profile's bed;
//! - `profile`: one profile: systems started, page-load cells measured;
//! - `sweeps`: the initial-window and offered-load sweeps;
//! - [`trial`]: one client process in the client namespace.

mod profile;
mod setup;
mod sweeps;
pub mod trial;

use crate::bed::Bed;
use crate::checkpoint::Checkpoint;
use crate::clients;
use crate::load::LoadPoint;
use crate::results::Row;
use crate::systems::{self, SystemSpec};
use crate::workload::Workload;
use anyhow::Result;
use profile::run_profile;
use std::path::PathBuf;
use std::time::Duration;
use sweeps::{INITCWND_CELL, LOAD_CELL};

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
    /// Page models read from files (`pageload --workload-file`), selected in `workloads` by id.
    pub custom_workloads: Vec<Workload>,
    /// What the HTTPS origins offer by ALPN.
    pub origin_alpn: crate::origin::OriginAlpn,
}

impl Suite {
    /// Whether `spec` is measured in the cell of `workload` and `client`.
    pub fn measures(&self, spec: &SystemSpec, workload: &str, client: &str) -> bool {
        match &self.sweep_workloads {
            None => true,
            Some(ws) => {
                spec.carrier().is_none()
                    || self.main_variants.contains(spec)
                    || (clients::lookup(client).is_some_and(|c| c.measures_sweeps())
                        && ws.iter().any(|w| w == workload))
            }
        }
    }

    /// Whether variant `spec` is offered load (yahoo, replay, http): not a system that cannot
    /// carry plain HTTP (direct-h3); every other system without a carrier; of longhaul's
    /// variants, every one where every variant runs in every cell (`quick`, `demo`: a run that
    /// names several policies or congestion controls compares them under load too), and in the
    /// full suite the pool-size variants of the first congestion control and policy (seed 001
    /// draws one line per number of connections).
    pub fn offers_load(&self, spec: &SystemSpec) -> bool {
        if spec.unsupported("http").is_some() {
            return false;
        }
        if spec.carrier().is_none() || self.sweep_workloads.is_none() {
            return true;
        }
        let p = &spec.params;
        let first = self
            .systems
            .iter()
            .find(|s| s.id == spec.id)
            .map(|s| &s.params);
        p.congestion == first.and_then(|m| m.congestion.clone())
            && p.policy == first.and_then(|m| m.policy.clone())
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
            // Runs from before h2 was offered had http/1.1-only origins: they resume with h1.
            + match self.origin_alpn {
                crate::origin::OriginAlpn::H1 => "",
                crate::origin::OriginAlpn::H2 => " origin_alpn=h2",
            }
    }

    /// The settings a checkpoint of `profile` must match: [`Suite::settings`], and for a profile
    /// read from a file also its definition, so that a resumed run cannot mix two versions of
    /// the file.
    /// A run with `--workload-file` pages also records a digest of their expanded objects, so that a resumed
    /// run cannot mix two versions of a file either.
    pub fn profile_settings(&self, profile: &str) -> String {
        let mut s = match self.custom_profiles.iter().find(|p| p.name == profile) {
            Some(p) => format!("{} profile={p:?}", self.settings()),
            None => self.settings(),
        };
        if !self.custom_workloads.is_empty() {
            let files: Vec<String> = self
                .custom_workloads
                .iter()
                .map(|w| {
                    format!(
                        "{}:{:08x}",
                        w.id,
                        crc32fast::hash(format!("{w:?}").as_bytes())
                    )
                })
                .collect();
            s.push_str(&format!(" workload_files={files:?}"));
        }
        s
    }

    /// The Debian programs this suite starts: nginx (the origin) always, then those of its
    /// systems and clients (Squid, HAProxy, Chromium). Checked before any bed comes up
    /// ([`missing_programs`]): a missing one would otherwise only show as systems that "did not
    /// start" in every cell.
    pub fn programs(&self) -> Vec<&'static str> {
        let mut out = vec![setup::ORIGIN_PROGRAM];
        let systems = systems::REGISTRY
            .iter()
            .filter(|s| self.systems.iter().any(|v| v.id == s.id()))
            .flat_map(|s| s.programs());
        let clients = self
            .clients
            .iter()
            .filter_map(|c| clients::lookup(c))
            .flat_map(|c| c.programs());
        for p in systems.chain(clients) {
            if !out.contains(p) {
                out.push(p);
            }
        }
        out
    }

    /// The page-load cells of one profile, as `(workload, client, scheme)`, in run order.
    fn cells<'w>(&self, all: &'w [Workload]) -> Vec<(&'w Workload, String, String)> {
        let mut out = Vec::new();
        for wid in &self.workloads {
            let w = all.iter().find(|w| &w.id == wid).expect("loaded");
            for client in &self.clients {
                let browser = match clients::lookup(client) {
                    Some(c) if !c.loads(w) => continue,
                    Some(c) => c.is_browser(),
                    None => false,
                };
                if browser && !self.chromium_workloads.contains(wid) {
                    continue;
                }
                for scheme in &self.schemes {
                    if browser && !self.chromium_schemes.contains(scheme) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

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
            custom_workloads: Vec::new(),
            origin_alpn: crate::origin::OriginAlpn::H1,
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
    fn every_variant_offers_load_unless_the_suite_sweeps_on_one_page() {
        let mut s = suite(None);
        let rr = SystemSpec::longhaul(10, "bbr", "round-robin");
        let cubic = SystemSpec::longhaul(10, "cubic", "least-outstanding");
        s.systems.extend([rr.clone(), cubic.clone()]);
        let h3 = SystemSpec::plain("direct-h3");
        // quick and demo: every variant, so policies and controllers compare under load.
        for spec in &s.systems {
            assert!(s.offers_load(spec), "{}", spec.label());
        }
        assert!(!s.offers_load(&h3));
        // full: the pool-size line of the first controller and policy, and the other systems.
        s.sweep_workloads = Some(vec!["yahoo".into()]);
        assert!(s.offers_load(&SystemSpec::plain("direct")));
        assert!(s.offers_load(&SystemSpec::longhaul(1, "bbr", "least-outstanding")));
        assert!(s.offers_load(&SystemSpec::longhaul(10, "bbr", "least-outstanding")));
        assert!(!s.offers_load(&rr) && !s.offers_load(&cubic) && !s.offers_load(&h3));
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
        assert!(!a.settings().contains("peer_initcwnd")); // Likewise http/1.1-only origins (--origin-alpn h1) keep the settings of runs from
                                                          // before h2 was offered, so those resume; h2 origins are another measurement.
        assert!(!a.settings().contains("origin_alpn"));
        let mut d = a.clone();
        d.origin_alpn = crate::origin::OriginAlpn::H2;
        assert_eq!(d.settings(), format!("{} origin_alpn=h2", a.settings()));
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
