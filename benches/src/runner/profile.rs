//! One profile of a suite, in its bed: the origin served, every system started and warmed up,
//! then every page-load cell measured side by side in a shuffled order, then the sweeps
//! ([`super::sweeps`]). Finished cells are checkpointed as they end.

use super::setup::serve_origin;
use super::sweeps;
use super::trial::Trialer;
use super::{cell_key, Outcome, RunContext, Suite};
use crate::bed::{Bed, LinkInfo};
use crate::checkpoint::{Cell, Checkpoint};
use crate::clients;
use crate::floor::{self, LinkModel};
use crate::host;
use crate::results::Row;
use crate::schedule::shuffled_order;
use crate::settle::{self, CellWaits};
use crate::systems::{self, Running, Shared, SystemSpec};
use crate::workload::Workload;
use anyhow::{anyhow, Result};
use std::path::Path;

/// What the cells of one profile share.
pub(super) struct ProfileRun<'a> {
    pub(super) suite: &'a Suite,
    pub(super) cx: &'a RunContext<'a>,
    pub(super) bed: &'a dyn Bed,
    pub(super) tr: Trialer<'a>,
    pub(super) all: &'a [Workload],
    pub(super) link: LinkInfo,
    /// The page a system must load to count as started (the first plain page).
    pub(super) probe_w: String,
}

impl ProfileRun<'_> {
    pub(super) fn profile(&self) -> &str {
        &self.link.profile
    }

    pub(super) fn log(&self, line: &str) {
        (self.cx.log)(line)
    }

    /// Between two trials: sleeps the suite's gap, then waits until the long link is quiet
    /// ([`settle`]).
    pub(super) fn pause(&self) -> settle::Settled {
        std::thread::sleep(self.suite.gap);
        settle::wait_quiet(
            self.link.rate_bps,
            || {
                self.bed
                    .long_link()
                    .map(|(down, up)| down.offered_bytes + up.offered_bytes)
            },
            std::thread::sleep,
        )
    }

    /// The host's CPU shares since `meter` started, logged for the cell `key`.
    pub(super) fn host_share(&self, key: &str, meter: &host::Meter) -> Option<host::HostShare> {
        let h = meter.finish();
        if let Some(h) = h {
            self.log(&format!(
                "   {key}: {:.1} min, host busy {:.1} %, steal {:.1} %",
                h.seconds / 60.0,
                h.busy * 100.0,
                h.steal * 100.0
            ));
        }
        h
    }
}

/// The systems of a profile once started.
struct Started {
    running: Vec<Running>,
    /// The ones that could not start.
    failed: Vec<SystemSpec>,
    /// A skipped row for every cell each failed one would have been measured in.
    rows: Vec<Row>,
}

/// Runs every cell of `suite` on the profile of `bed`; files under `dir`.
pub(super) fn run_profile(
    suite: &Suite,
    cx: &RunContext,
    bed: &dyn Bed,
    dir: &Path,
    all: &[Workload],
    cp: &mut Checkpoint,
) -> Result<Outcome> {
    let (site, _nginx) = serve_origin(
        bed,
        dir,
        all,
        suite.peer_initcwnd,
        suite.origin_alpn,
        &cx.log,
    )?;
    let pr = ProfileRun {
        suite,
        cx,
        bed,
        tr: Trialer {
            bed,
            site: &site,
            workloads_dir: &cx.workloads_dir,
            tmp: dir.join("tmp"),
            trials: dir.join("trials.jsonl"),
            counter: 0.into(),
        },
        all,
        link: bed.link(),
        probe_w: probe_workload(all),
    };
    let _shared = start_shared(suite, bed, dir)?;
    let Started {
        mut running,
        failed,
        mut rows,
    } = start_systems(&pr, dir);
    for (i, (w, client, scheme)) in suite.cells(all).into_iter().enumerate() {
        // The cell number seeds the order, so a resumed run measures a cell as a whole run would.
        let number = i as u64 + 1;
        rows.extend(page_cell(
            &pr,
            &mut running,
            &failed,
            cp,
            number,
            w,
            &client,
            &scheme,
        )?);
    }
    if !suite.initcwnds.is_empty() {
        rows.extend(sweeps::initcwnd_cell(&pr, cp)?);
    }
    let load = sweeps::load_cell(&pr, &running, &failed, cp)?;
    Ok(Outcome { rows, load })
}

/// The page a system must load to count as started: the first that is neither mixed nor bulk.
fn probe_workload(all: &[Workload]) -> String {
    all.iter()
        .find(|w| w.mixed.is_none() && w.id != "bulk")
        .unwrap_or(&all[0])
        .id
        .clone()
}

/// Starts what each system shares between its variants in this suite, in registry order.
fn start_shared(suite: &Suite, bed: &dyn Bed, dir: &Path) -> Result<Vec<Shared>> {
    let mut shared = Vec::new();
    for system in systems::REGISTRY {
        let variants: Vec<&SystemSpec> = suite
            .systems
            .iter()
            .filter(|s| s.id == system.id())
            .collect();
        if !variants.is_empty() {
            shared.extend(system.start_shared(bed, dir, &variants)?);
        }
    }
    Ok(shared)
}

/// Starts every system of the suite that carries plain HTTP, or HTTPS when the suite loads
/// it, and waits until a page loads through it over that scheme (a warm-up load, discarded). One that does not start is logged and gets a
/// skipped row in each cell it would have been measured in.
fn start_systems(pr: &ProfileRun, dir: &Path) -> Started {
    let suite = pr.suite;
    let mut s = Started {
        running: Vec::new(),
        failed: Vec::new(),
        rows: Vec::new(),
    };
    let mut slot = 0;
    for spec in &suite.systems {
        let Some(probe_scheme) = ["http", "https"].into_iter().find(|s| {
            spec.unsupported(s).is_none() && (*s == "http" || suite.schemes.iter().any(|x| x == s))
        }) else {
            continue;
        };
        // Every variant of a system with a carrier (either carrier) gets its own edge port.
        let k = if spec.carrier().is_some() {
            slot += 1;
            slot - 1
        } else {
            0
        };
        let started = systems::start(pr.bed, dir, spec, k, &pr.tr.site.hosts).and_then(|mut r| {
            let proxy = r.proxy;
            let http3 = r.spec.http3();
            systems::wait_ready(&mut r, || {
                pr.tr
                    .replay_over(proxy, &pr.probe_w, probe_scheme, http3)
                    .map(|_| ())
            })?;
            Ok(r)
        });
        match started {
            Ok(r) => {
                pr.log(&format!("   started {}", spec.label()));
                s.running.push(r);
            }
            Err(e) => {
                pr.log(&format!("   could not start {}: {e:#}", spec.label()));
                s.failed.push(spec.clone());
                s.rows
                    .extend(not_started_rows(pr, spec, &format!("did not start: {e:#}")));
            }
        }
    }
    s
}

/// A skipped row, saying `why`, for every cell `spec` would have been measured in.
fn not_started_rows(pr: &ProfileRun, spec: &SystemSpec, why: &str) -> Vec<Row> {
    let suite = pr.suite;
    let mut rows = Vec::new();
    for w in &suite.workloads {
        for c in &suite.clients {
            if !suite.measures(spec, w, c) {
                continue;
            }
            for s in &suite.schemes {
                let mut row = Row::skipped(pr.profile(), w, c, &spec.id, s, why);
                row.params = spec.params.clone();
                rows.push(row);
            }
        }
    }
    rows
}

/// One page-load cell (`w`, `client`, `scheme`): taken from the checkpoint when an earlier run
/// finished it, else measured with every running system and checkpointed when none is missing.
#[allow(clippy::too_many_arguments)]
fn page_cell(
    pr: &ProfileRun,
    running: &mut [Running],
    failed: &[SystemSpec],
    cp: &mut Checkpoint,
    number: u64,
    w: &Workload,
    client: &str,
    scheme: &str,
) -> Result<Vec<Row>> {
    let key = cell_key(&w.id, client, scheme);
    if let Some(done) = cp.get(&key) {
        pr.log(&format!("   {key}: finished in an earlier run (--resume)"));
        return Ok(done.rows.clone());
    }
    let mut rows = unmeasured_rows(pr, w, client, scheme);
    let active: Vec<&mut Running> = running
        .iter_mut()
        .filter(|r| {
            r.spec.unsupported(scheme).is_none() && pr.suite.measures(&r.spec, &w.id, client)
        })
        .collect();
    let meter = host::Meter::start();
    rows.extend(measure_cell(pr, &active, number, w, client, scheme));
    let host = pr.host_share(&key, &meter);
    let missing = pr.suite.missing_in_cell(failed, &w.id, client, scheme);
    if missing.is_empty() {
        cp.record(Cell {
            cell: key,
            rows: rows.clone(),
            load: Vec::new(),
            host,
        })?;
    } else {
        let names: Vec<String> = missing.iter().map(|s| s.label()).collect();
        pr.log(&format!(
            "   {key}: not checkpointed, {} did not start; --resume measures it again",
            names.join(", ")
        ));
    }
    Ok(rows)
}

/// The rows of a cell that are not measured: the floor (computed; none for a mixed load) and
/// a skipped row for each system of the cell that cannot carry `scheme`.
fn unmeasured_rows(pr: &ProfileRun, w: &Workload, client: &str, scheme: &str) -> Vec<Row> {
    let mut rows = Vec::new();
    let link_model = LinkModel {
        rtt_ms: pr.link.rtt_ms,
        rate_bps: pr.link.rate_bps,
    };
    let floor_w = match &w.mixed {
        Some(m) => pr.all.iter().find(|x| x.id == m.page).cloned(),
        None => Some(w.clone()),
    };
    if let Some(f) = floor_w
        .as_ref()
        .and_then(|fw| floor::floor_ms(fw, &link_model))
    {
        if w.mixed.is_none() {
            rows.push(Row::floor(pr.profile(), &w.id, client, scheme, f));
        }
    }
    for spec in &pr.suite.systems {
        if !pr.suite.measures(spec, &w.id, client) {
            continue;
        }
        if let Some(why) = spec.unsupported(scheme) {
            let mut row = Row::skipped(pr.profile(), &w.id, client, &spec.id, scheme, why);
            row.params = spec.params.clone();
            rows.push(row);
        }
    }
    rows
}

/// The repetitions of one cell with the `active` systems, in an order shuffled per repetition
/// (seeded by the suite's seed and the cell `number`); one measured row per system.
fn measure_cell(
    pr: &ProfileRun,
    active: &[&mut Running],
    number: u64,
    w: &Workload,
    client: &str,
    scheme: &str,
) -> Vec<Row> {
    let suite = pr.suite;
    let mut samples: Vec<Vec<f64>> = vec![Vec::new(); active.len()];
    let mut errors: Vec<Vec<String>> = vec![Vec::new(); active.len()];
    let order = shuffled_order(
        active.len(),
        suite.runs,
        suite.seed.wrapping_mul(1000).wrapping_add(number),
    );
    pr.log(&format!(
        "   {} {client} {scheme}: {} systems x {} runs",
        w.id,
        active.len(),
        suite.runs
    ));
    let c = clients::lookup(client);
    let mut waits = CellWaits::default();
    for rep in &order {
        for &i in rep {
            let sys = &active[i];
            let r = match c {
                Some(c) => c.load(&pr.tr, sys, w, scheme),
                None => Err(anyhow!("unknown client {client}")),
            };
            match r {
                Ok(v) => samples[i].push(v),
                Err(e) => errors[i].push(format!("{e:#}")),
            }
            waits.add(pr.pause(), &sys.spec.label());
        }
    }
    pr.log(&format!("      {}", waits.line()));
    let mut rows = Vec::new();
    for (i, sys) in active.iter().enumerate() {
        let mut row = Row::measured(
            pr.profile(),
            &w.id,
            client,
            &sys.spec.id,
            sys.spec.params.clone(),
            scheme,
            std::mem::take(&mut samples[i]),
            std::mem::take(&mut errors[i]),
        );
        if scheme == "https" {
            // direct-h3 reaches the origin's QUIC side, which offers h3 alone.
            let alpn = if sys.spec.http3() {
                "h3"
            } else {
                pr.tr.site.alpn.as_str()
            };
            row.origin_alpn = Some(alpn.into());
        }
        pr.log(&format!(
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
        rows.push(row);
    }
    rows
}
