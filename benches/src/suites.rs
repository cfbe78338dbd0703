//! The suites `pageload` runs (`demo`, `quick`, `full`), described as data: what each measures
//! when the command line does not narrow it. `pageload`'s flags override any of these;
//! [`crate::runner::Suite`] is the result.

use crate::systems::MAIN_POOL_SIZE;
use crate::workload;

/// A list of workload ids, given or taken from the page models.
#[derive(Debug, Clone, Copy)]
pub enum Ids {
    /// These ids.
    Listed(&'static [&'static str]),
    /// Every workload (pages, bulk, mixed).
    AllWorkloads,
    /// Every page: the seeds' and the built-in page models.
    AllPages,
}

impl Ids {
    /// The ids.
    pub fn resolve(self) -> Vec<String> {
        match self {
            Ids::Listed(ids) => ids.iter().map(|s| s.to_string()).collect(),
            Ids::AllWorkloads => workload::all_ids(),
            Ids::AllPages => workload::page_ids(),
        }
    }
}

/// One suite's defaults.
#[derive(Debug, Clone, Copy)]
pub struct SuiteDef {
    /// Its name, the `pageload` subcommand.
    pub name: &'static str,
    /// Link profiles.
    pub profiles: &'static [&'static str],
    /// Workloads.
    pub workloads: Ids,
    /// System ids.
    pub systems: &'static [&'static str],
    /// Repetitions per cell.
    pub runs: usize,
    /// Client ids.
    pub clients: &'static [&'static str],
    /// Schemes.
    pub schemes: &'static [&'static str],
    /// Workloads the browser loads (when `--workloads` does not name them).
    pub browser_workloads: Ids,
    /// Schemes the browser loads (when `--schemes` does not name them).
    pub browser_schemes: &'static [&'static str],
    /// longhaul's pool sizes.
    pub pool_sizes: &'static [u32],
    /// longhaul's congestion controls (`default`: each carrier's default).
    pub congestion: &'static [&'static str],
    /// longhaul's placement policies.
    pub policies: &'static [&'static str],
    /// The origin's initial windows to sweep.
    pub initcwnds: &'static [u32],
    /// Offered loads as fractions of the link rate.
    pub load_fractions: &'static [f64],
    /// Whether longhaul's other variants are measured on one page with the sweep client only
    /// (the main variant on every page); otherwise every variant runs in every cell.
    pub sweep_on_one_page: bool,
    /// Whether the tables are printed on stdout at the end (else the summary's path).
    pub prints_tables: bool,
}

/// Tiny demo: pacific, yahoo, direct vs longhaul-tcp, replay over http.
pub const DEMO: SuiteDef = SuiteDef {
    name: "demo",
    profiles: &["pacific"],
    workloads: Ids::Listed(&["yahoo"]),
    systems: &["direct", "longhaul-tcp"],
    runs: 3,
    clients: &["replay"],
    schemes: &["http"],
    browser_workloads: Ids::Listed(&[]),
    browser_schemes: &["http", "https"],
    pool_sizes: &[MAIN_POOL_SIZE],
    congestion: &["default"],
    policies: &["default"],
    initcwnds: &[],
    load_fractions: &[],
    sweep_on_one_page: false,
    prints_tables: true,
};

/// About nine minutes on a 2-core machine: pacific; three pages; the peers and longhaul-tcp;
/// Chromium on yahoo over http only.
pub const QUICK: SuiteDef = SuiteDef {
    name: "quick",
    profiles: &["pacific"],
    workloads: Ids::Listed(&["yahoo", "google", "amazon"]),
    systems: &[
        "direct",
        "single-proxy",
        "squid-chain",
        "haproxy-h2",
        "longhaul-tcp",
    ],
    runs: 5,
    clients: &["replay", "chromium"],
    schemes: &["http", "https"],
    browser_workloads: Ids::Listed(&["yahoo"]),
    browser_schemes: &["http"],
    pool_sizes: &[MAIN_POOL_SIZE],
    congestion: &["default"],
    policies: &["default"],
    initcwnds: &[],
    load_fractions: &[],
    sweep_on_one_page: false,
    prints_tables: false,
};

/// Every profile, page and system; longhaul's pool sizes, congestion controls and policies
/// on the sweep page; the initial-window and offered-load sweeps. Hours.
pub const FULL: SuiteDef = SuiteDef {
    name: "full",
    profiles: &["us-nz-1999", "pacific", "satellite", "lossy"],
    workloads: Ids::AllWorkloads,
    systems: &[
        "direct",
        "single-proxy",
        "squid-chain",
        "haproxy-h2",
        "longhaul-tcp",
        "longhaul-quic",
        "direct-h3",
    ],
    runs: 10,
    clients: &["replay", "chromium"],
    schemes: &["http", "https"],
    browser_workloads: Ids::AllPages,
    browser_schemes: &["http", "https"],
    pool_sizes: &[1, 2, MAIN_POOL_SIZE, 10, 20, 50],
    congestion: &["default", "bbr", "cubic"],
    policies: &["default", "least-outstanding", "round-robin"],
    initcwnds: &crate::runner::SEED_000_INITCWNDS,
    load_fractions: &[0.1, 0.25, 0.5, 0.75, 0.9, 1.1],
    sweep_on_one_page: true,
    prints_tables: false,
};

/// Every suite.
pub const SUITES: [SuiteDef; 3] = [DEMO, QUICK, FULL];

/// The suite `name`, if there is one.
pub fn named(name: &str) -> Option<&'static SuiteDef> {
    SUITES.iter().find(|s| s.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_suite_names_registered_systems_and_clients_only() {
        for s in &SUITES {
            for id in s.systems {
                assert!(crate::systems::lookup(id).is_some(), "{}: {id}", s.name);
            }
            for id in s.clients {
                assert!(crate::clients::lookup(id).is_some(), "{}: {id}", s.name);
            }
            assert_eq!(named(s.name).map(|d| d.name), Some(s.name));
        }
        assert!(named("nightly").is_none());
        // Every suite compares longhaul at the pool size it ships with; the full suite sweeps
        // the others around it.
        for s in &SUITES {
            assert!(s.pool_sizes.contains(&MAIN_POOL_SIZE), "{}", s.name);
            assert_eq!(
                crate::systems::main_pool_size(s.pool_sizes),
                MAIN_POOL_SIZE,
                "{}",
                s.name
            );
        }
        // The full suite's browser loads every page model, no bulk or mixed load.
        let pages = FULL.browser_workloads.resolve();
        assert!(!pages.is_empty() && !pages.iter().any(|p| p == "bulk"));
        // The page model of today's median page runs beside the seeds' pages in the full suite,
        // for both clients.
        assert!(pages.iter().any(|p| p == "almanac-2024-median"));
        assert!(FULL
            .workloads
            .resolve()
            .iter()
            .any(|p| p == "almanac-2024-median"));
    }
}
