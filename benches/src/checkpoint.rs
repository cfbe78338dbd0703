//! Checkpoints of a suite run, so that a long run (the full suite takes many hours) can stop
//! and continue: every finished cell (one workload, client and scheme on one profile, with all
//! its systems and repetitions) is appended to `<out>/<profile>/cells.jsonl` with its rows, and
//! `pageload … --resume` skips the cells found there and runs only the rest.
//!
//! A cell is the unit of fairness (every system of the cell is measured side by side in one
//! shuffled schedule), so resuming never mixes the systems of one comparison across runs; a
//! cell cut short by a stop is run again whole. The first line of the file records the suite's
//! settings (systems, repetitions, seed, …): resuming with other settings is refused rather
//! than mixing different experiments in one results.json.
//!
//! It does NOT keep the per-object trials (they are appended to `trials.jsonl` as they happen)
//! nor decide what a cell contains; the runner does.

use crate::host::HostShare;
use crate::load::LoadPoint;
use crate::results::Row;
use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};

/// File name of a profile's checkpoint.
pub const FILE: &str = "cells.jsonl";

/// One finished cell.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Cell {
    /// `workload/client/scheme`, or `initcwnd`, `load` for the sweeps.
    pub cell: String,
    /// Its results rows.
    pub rows: Vec<Row>,
    /// Its offered-load points (the `load` cell only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub load: Vec<LoadPoint>,
    /// The host's CPU shares while it ran; absent in checkpoints from before they were kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<HostShare>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Header {
    settings: String,
}

/// The finished cells of one profile, and the file new ones are appended to.
#[derive(Debug)]
pub struct Checkpoint {
    path: PathBuf,
    done: HashMap<String, Cell>,
}

impl Checkpoint {
    /// Opens `dir/cells.jsonl`. With `resume`, the cells already in it count as done, provided
    /// it was written with the same `settings`; without, it is started anew.
    pub fn open(dir: &Path, settings: &str, resume: bool) -> Result<Checkpoint> {
        let path = dir.join(FILE);
        let mut done = HashMap::new();
        let existing = match std::fs::read_to_string(&path) {
            Ok(t) if resume => Some(t),
            Ok(_) => None,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
        };
        match existing {
            Some(text) => {
                let mut lines = text.lines();
                let header: Header = lines
                    .next()
                    .map(serde_json::from_str)
                    .transpose()
                    .with_context(|| format!("{}: first line", path.display()))?
                    .unwrap_or(Header {
                        settings: settings.into(),
                    });
                if header.settings != settings {
                    bail!(
                        "{} was written by a run with other settings; resume with the same \
                         arguments, or use another --out\n  there: {}\n  now:   {settings}",
                        path.display(),
                        header.settings
                    );
                }
                for (n, line) in lines.enumerate() {
                    // A line cut short by a stop in mid-write is the cell that was running.
                    match serde_json::from_str::<Cell>(line) {
                        Ok(c) => {
                            done.insert(c.cell.clone(), c);
                        }
                        Err(e) => eprintln!(
                            "   {}: line {} unreadable ({e}); that cell runs again",
                            path.display(),
                            n + 2
                        ),
                    }
                }
            }
            None => {
                let header = serde_json::to_string(&Header {
                    settings: settings.into(),
                })?;
                std::fs::write(&path, format!("{header}\n"))
                    .with_context(|| format!("writing {}", path.display()))?;
            }
        }
        Ok(Checkpoint { path, done })
    }

    /// The cell, when it finished in this or an earlier run.
    pub fn get(&self, cell: &str) -> Option<&Cell> {
        self.done.get(cell)
    }

    /// Whether every one of `cells` is done.
    pub fn all_done<'a>(&self, mut cells: impl Iterator<Item = &'a String>) -> bool {
        cells.all(|c| self.done.contains_key(c))
    }

    /// Records a finished cell (appended and flushed at once).
    pub fn record(&mut self, cell: Cell) -> Result<()> {
        let line = serde_json::to_string(&cell)?;
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&self.path)
            .with_context(|| format!("appending to {}", self.path.display()))?;
        writeln!(f, "{line}")?;
        f.sync_data()?;
        self.done.insert(cell.cell.clone(), cell);
        Ok(())
    }
}

/// What the checkpoints of a run directory hold.
#[derive(Debug, Default)]
pub struct RunCells {
    /// The distinct settings lines.
    pub settings: Vec<String>,
    /// Rows of every finished cell.
    pub rows: Vec<Row>,
    /// Offered-load points.
    pub load: Vec<LoadPoint>,
    /// Finished cells.
    pub cells: usize,
    /// The host's CPU shares of the cells that kept them, as `profile/cell`.
    pub host: Vec<(String, HostShare)>,
}

/// Everything the checkpoints under a run directory hold (`DIR/*/cells.jsonl`), whether the
/// run finished or not. Reads only; lines that do not parse are skipped with a message.
pub fn read_run(dir: &Path) -> Result<RunCells> {
    let mut settings = Vec::new();
    let mut rows = Vec::new();
    let mut load = Vec::new();
    let mut cells = 0;
    let mut host = Vec::new();
    let mut profiles: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path().join(FILE)))
        .filter(|p| p.is_file())
        .collect();
    profiles.sort();
    for path in profiles {
        let text = std::fs::read_to_string(&path)?;
        let mut lines = text.lines();
        if let Some(Ok(h)) = lines.next().map(serde_json::from_str::<Header>) {
            if !settings.contains(&h.settings) {
                settings.push(h.settings);
            }
        }
        for line in lines {
            match serde_json::from_str::<Cell>(line) {
                Ok(c) => {
                    cells += 1;
                    if let Some(h) = c.host {
                        let profile = path
                            .parent()
                            .and_then(|d| d.file_name())
                            .map(|n| n.to_string_lossy().into_owned())
                            .unwrap_or_default();
                        host.push((format!("{profile}/{}", c.cell), h));
                    }
                    rows.extend(c.rows);
                    load.extend(c.load);
                }
                Err(e) => eprintln!("{}: a line unreadable ({e}), skipped", path.display()),
            }
        }
    }
    Ok(RunCells {
        settings,
        rows,
        load,
        cells,
        host,
    })
}

/// Removes rows that say a system was not measured where a measured row of the same system,
/// parameters and cell exists (a system that failed to start in one run but ran in another).
pub fn prefer_measured(rows: &mut Vec<Row>) {
    let key = |r: &Row| {
        format!(
            "{}|{}|{}|{}|{}|{}",
            r.profile,
            r.workload,
            r.client,
            r.scheme,
            r.system,
            r.params.label()
        )
    };
    let measured: std::collections::HashSet<String> =
        rows.iter().filter(|r| r.measured).map(key).collect();
    let mut seen = std::collections::HashSet::new();
    rows.retain(|r| {
        let k = key(r);
        if !r.measured && r.system != "floor" && measured.contains(&k) {
            return false;
        }
        // One row per identity (the floor and skipped rows are the same in every run).
        seen.insert((k, r.measured)) || r.measured
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::Params;

    fn row(system: &str, measured: bool) -> Row {
        if measured {
            Row::measured(
                "pacific",
                "yahoo",
                "replay",
                system,
                Params::default(),
                "http",
                vec![1.0],
                vec![],
            )
        } else {
            Row::skipped(
                "pacific",
                "yahoo",
                "replay",
                system,
                "http",
                "did not start",
            )
        }
    }

    #[test]
    fn resume_keeps_finished_cells_and_a_fresh_run_starts_over() {
        let run = std::env::temp_dir().join(format!("longhaul-checkpoint-{}", std::process::id()));
        let dir = run.join("pacific");
        std::fs::create_dir_all(&dir).unwrap();
        let mut c = Checkpoint::open(&dir, "runs=10", false).unwrap();
        assert!(c.get("yahoo/replay/http").is_none());
        let cell = Cell {
            cell: "yahoo/replay/http".into(),
            rows: vec![row("direct", true)],
            load: vec![],
            host: Some(HostShare {
                seconds: 61.5,
                busy: 0.4,
                steal: 0.02,
            }),
        };
        c.record(cell.clone()).unwrap();
        // A line cut short by a stop in mid-write is ignored.
        let path = dir.join(FILE);
        let mut text = std::fs::read_to_string(&path).unwrap();
        text.push_str("{\"cell\":\"google/rep");
        std::fs::write(&path, text).unwrap();

        let c = Checkpoint::open(&dir, "runs=10", true).unwrap();
        assert_eq!(c.get("yahoo/replay/http"), Some(&cell));
        // The run directory's report reads the same cells.
        let got = read_run(&run).unwrap();
        assert_eq!(got.settings, ["runs=10"]);
        assert_eq!(got.cells, 1);
        assert_eq!(got.rows, cell.rows);
        assert!(got.load.is_empty());
        assert_eq!(
            got.host,
            [("pacific/yahoo/replay/http".to_string(), cell.host.unwrap())]
        );
        // Cells checkpointed before the host's shares were kept still read.
        let old: Cell = serde_json::from_str(r#"{"cell":"x","rows":[]}"#).unwrap();
        assert_eq!(old.host, None);
        assert!(c.get("google/replay/http").is_none());
        assert!(c.all_done(["yahoo/replay/http".to_string()].iter()));
        assert!(!c.all_done(["yahoo/replay/http".into(), "x".to_string()].iter()));

        // Other settings: refused, nothing mixed.
        let e = Checkpoint::open(&dir, "runs=5", true).unwrap_err();
        assert!(format!("{e:#}").contains("other settings"), "{e:#}");

        // Without --resume the run starts over.
        let c = Checkpoint::open(&dir, "runs=5", false).unwrap();
        assert!(c.get("yahoo/replay/http").is_none());
        let c = Checkpoint::open(&dir, "runs=5", true).unwrap();
        assert!(c.get("yahoo/replay/http").is_none());
        std::fs::remove_dir_all(&run).unwrap();
    }

    #[test]
    fn a_measured_row_replaces_the_did_not_start_row_of_another_run() {
        let mut rows = vec![
            row("squid-chain", false),
            row("direct", true),
            row("squid-chain", true),
            row("haproxy-h2", false),
            row("haproxy-h2", false),
        ];
        prefer_measured(&mut rows);
        let got: Vec<(&str, bool)> = rows
            .iter()
            .map(|r| (r.system.as_str(), r.measured))
            .collect();
        assert_eq!(
            got,
            [
                ("direct", true),
                ("squid-chain", true),
                ("haproxy-h2", false)
            ]
        );
    }
}
