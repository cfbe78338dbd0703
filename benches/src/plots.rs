//! SVG plots of a run's rows (plotters): PLT per system per page, PLT against longhaul's pool
//! size (seed 001 figure 5b), PLT against the initial window (seed 000 table 1) and carried
//! against offered load (seed 001 figure 5a).
//!
//! Plots only draw rows that exist; a plot with nothing to draw is not written.

use crate::load::LoadPoint;
use crate::results::{Row, SYSTEMS};
use anyhow::{anyhow, Result};
use plotters::prelude::*;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

const PALETTE: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

fn err<E: std::fmt::Debug>(e: E) -> anyhow::Error {
    anyhow!("plotting: {e:?}")
}

/// Whether `system` is one of longhaul's (`longhaul-tcp`, `longhaul-quic`).
fn is_longhaul(system: &str) -> bool {
    crate::systems::carrier_of(system).is_some()
}

/// The variant of longhaul system `system` shown next to the peers: the shipped pool size
/// ([`crate::systems::MAIN_POOL_SIZE`]) if measured, else the first.
fn primary_longhaul(rows: &[&Row], system: &str) -> Option<crate::results::Params> {
    let lh: Vec<&&Row> = rows
        .iter()
        .filter(|r| r.system == system && r.measured)
        .collect();
    lh.iter()
        .find(|r| r.params.pool_size == Some(crate::systems::MAIN_POOL_SIZE))
        .or_else(|| lh.first())
        .map(|r| r.params.clone())
}

/// Draws every plot the rows allow into `dir`; returns the files written.
pub fn draw_all(dir: &Path, rows: &[Row], load: &[LoadPoint]) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let groups: BTreeSet<(String, String, String)> = rows
        .iter()
        .filter(|r| r.params.initcwnd.is_none())
        .map(|r| (r.profile.clone(), r.client.clone(), r.scheme.clone()))
        .collect();
    for (p, c, s) in groups {
        let path = dir.join(format!("plt_{p}_{c}_{s}.svg"));
        let sel: Vec<&Row> = rows
            .iter()
            .filter(|r| {
                r.profile == p && r.client == c && r.scheme == s && r.params.initcwnd.is_none()
            })
            .collect();
        if plt_bars(
            &path,
            &format!("PLT per system, {p}, {c}, {s} (median, bar to p95)"),
            &sel,
        )? {
            out.push(path);
        }
    }
    let profiles: BTreeSet<String> = rows.iter().map(|r| r.profile.clone()).collect();
    for p in &profiles {
        let path = dir.join(format!("pool_size_{p}.svg"));
        if pool_lines(&path, p, rows)? {
            out.push(path);
        }
        let path = dir.join(format!("initcwnd_{p}.svg"));
        if initcwnd_line(&path, p, rows)? {
            out.push(path);
        }
        let path = dir.join(format!("utilisation_{p}.svg"));
        let pts: Vec<&LoadPoint> = load.iter().filter(|l| &l.profile == p).collect();
        if utilisation_lines(&path, p, &pts)? {
            out.push(path);
        }
    }
    Ok(out)
}

fn plt_bars(path: &Path, title: &str, rows: &[&Row]) -> Result<bool> {
    let primaries: Vec<(&str, Option<crate::results::Params>)> = SYSTEMS
        .iter()
        .filter(|s| is_longhaul(s))
        .map(|s| (*s, primary_longhaul(rows, s)))
        .collect();
    let primary = |sys: &str| {
        primaries
            .iter()
            .find(|(s, _)| *s == sys)
            .and_then(|(_, p)| p.as_ref())
    };
    let mut workloads: Vec<String> = Vec::new();
    for r in rows {
        if !workloads.contains(&r.workload) && r.plt_ms_median.is_some() {
            workloads.push(r.workload.clone());
        }
    }
    let shown = |r: &Row| -> bool {
        r.plt_ms_median.is_some()
            && (!is_longhaul(&r.system) || Some(&r.params) == primary(&r.system))
    };
    let systems: Vec<&str> = SYSTEMS
        .iter()
        .copied()
        .filter(|s| rows.iter().any(|r| r.system == *s && shown(r)))
        .collect();
    if workloads.is_empty() || systems.is_empty() {
        return Ok(false);
    }
    let ymax = rows
        .iter()
        .filter(|r| shown(r))
        .filter_map(|r| r.plt_ms_p95.or(r.plt_ms_median))
        .fold(1.0, f64::max)
        * 1.1;
    let root = SVGBackend::new(path, (1000, 520)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let n = workloads.len();
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(64)
        .build_cartesian_2d(-0.5f64..(n as f64 - 0.5), 0f64..ymax)
        .map_err(err)?;
    let names = workloads.clone();
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(n + 1)
        .x_label_formatter(&move |x| {
            let i = x.round();
            if (x - i).abs() < 0.01 && i >= 0.0 && (i as usize) < names.len() {
                names[i as usize].clone()
            } else {
                String::new()
            }
        })
        .y_desc("page load time, ms")
        .draw()
        .map_err(err)?;
    let width = 0.8 / systems.len() as f64;
    for (k, sys) in systems.iter().enumerate() {
        let color = PALETTE[k % PALETTE.len()];
        let mut bars = Vec::new();
        let mut whiskers = Vec::new();
        for (g, w) in workloads.iter().enumerate() {
            if let Some(r) = rows
                .iter()
                .find(|r| &r.workload == w && r.system == *sys && shown(r))
            {
                let x0 = g as f64 - 0.4 + k as f64 * width;
                let m = r.plt_ms_median.unwrap_or(0.0);
                bars.push(Rectangle::new(
                    [(x0, 0.0), (x0 + width * 0.9, m)],
                    color.filled(),
                ));
                if let Some(p) = r.plt_ms_p95 {
                    let xc = x0 + width * 0.45;
                    whiskers.push(PathElement::new(
                        vec![(xc, m), (xc, p)],
                        BLACK.stroke_width(1),
                    ));
                }
            }
        }
        let label = if *sys == "floor" {
            "floor (computed)".to_string()
        } else if is_longhaul(sys) {
            format!(
                "{sys} {}",
                primary(sys).map(|p| p.label()).unwrap_or_default()
            )
        } else {
            sys.to_string()
        };
        chart
            .draw_series(bars)
            .map_err(err)?
            .label(label)
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], color.filled()));
        chart.draw_series(whiskers).map_err(err)?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(err)?;
    root.present().map_err(err)?;
    Ok(true)
}

fn line_chart(
    path: &Path,
    title: &str,
    xdesc: &str,
    ydesc: &str,
    series: &[(String, Vec<(f64, f64)>)],
    log_x: bool,
    legend: SeriesLabelPosition,
) -> Result<bool> {
    let pts: Vec<(f64, f64)> = series.iter().flat_map(|(_, v)| v.iter().copied()).collect();
    if pts.is_empty() {
        return Ok(false);
    }
    let tx = |x: f64| if log_x { x.max(1e-9).log2() } else { x };
    let xmin = pts.iter().map(|p| tx(p.0)).fold(f64::INFINITY, f64::min);
    let xmax = pts
        .iter()
        .map(|p| tx(p.0))
        .fold(f64::NEG_INFINITY, f64::max);
    let ymax = pts.iter().map(|p| p.1).fold(1e-9, f64::max) * 1.1;
    let pad = ((xmax - xmin) * 0.05).max(0.5);
    let root = SVGBackend::new(path, (900, 500)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(64)
        .build_cartesian_2d((xmin - pad)..(xmax + pad), 0f64..ymax)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc(xdesc)
        .y_desc(ydesc)
        .x_label_formatter(&|x| {
            if log_x {
                format!("{:.0}", 2f64.powf(*x))
            } else {
                format!("{x:.0}")
            }
        })
        .draw()
        .map_err(err)?;
    for (k, (name, v)) in series.iter().enumerate() {
        let color = PALETTE[k % PALETTE.len()];
        let v: Vec<(f64, f64)> = v.iter().map(|(x, y)| (tx(*x), *y)).collect();
        chart
            .draw_series(LineSeries::new(v.clone(), color.stroke_width(2)))
            .map_err(err)?
            .label(name.clone())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 16, y)], color.stroke_width(2))
            });
        chart
            .draw_series(v.into_iter().map(|p| Circle::new(p, 3, color.filled())))
            .map_err(err)?;
    }
    chart
        .configure_series_labels()
        .position(legend)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(err)?;
    root.present().map_err(err)?;
    Ok(true)
}

fn pool_lines(path: &Path, profile: &str, rows: &[Row]) -> Result<bool> {
    let lh: Vec<&Row> = rows
        .iter()
        .filter(|r| r.profile == profile && is_longhaul(&r.system) && r.plt_ms_median.is_some())
        .collect();
    let Some(first) = lh.first() else {
        return Ok(false);
    };
    // The sweep runs with the first congestion control and policy (the same for both carriers).
    let (c0, p0) = (first.params.congestion.clone(), first.params.policy.clone());
    let keys: BTreeSet<(String, String, String, String)> = lh
        .iter()
        .map(|r| {
            (
                r.system.clone(),
                r.workload.clone(),
                r.client.clone(),
                r.scheme.clone(),
            )
        })
        .collect();
    let mut series = Vec::new();
    for (sys, w, c, s) in keys {
        let mut v: Vec<(f64, f64)> = lh
            .iter()
            .filter(|r| {
                r.system == sys
                    && r.workload == w
                    && r.client == c
                    && r.scheme == s
                    && r.params.congestion == c0
                    && r.params.policy == p0
            })
            .filter_map(|r| Some((f64::from(r.params.pool_size?), r.plt_ms_median?)))
            .collect();
        v.sort_by(|a, b| a.0.total_cmp(&b.0));
        if v.len() >= 2 {
            let carrier = crate::systems::carrier_of(&sys).unwrap_or_default();
            series.push((format!("{carrier}: {w} {c} {s}"), v));
        }
    }
    let title = format!(
        "longhaul PLT vs pool connections, {profile} ({} {})",
        c0.unwrap_or_default(),
        p0.unwrap_or_default()
    );
    line_chart(
        path,
        &title,
        "pool connections N (log scale)",
        "median page load time, ms",
        &series,
        true,
        SeriesLabelPosition::UpperRight,
    )
}

fn initcwnd_line(path: &Path, profile: &str, rows: &[Row]) -> Result<bool> {
    let mut v: Vec<(f64, f64)> = rows
        .iter()
        .filter(|r| r.profile == profile && r.params.initcwnd.is_some())
        .filter_map(|r| Some((f64::from(r.params.initcwnd?), r.plt_ms_median?)))
        .collect();
    v.sort_by(|a, b| a.0.total_cmp(&b.0));
    let Some(w) = rows
        .iter()
        .find(|r| r.profile == profile && r.params.initcwnd.is_some())
    else {
        return Ok(false);
    };
    let series = vec![(format!("{} direct (replay, http)", w.workload), v)];
    line_chart(
        path,
        &format!("PLT vs origin initial window, {profile}"),
        "initcwnd, segments",
        "median page load time, ms",
        &series,
        false,
        SeriesLabelPosition::UpperRight,
    )
}

fn utilisation_lines(path: &Path, profile: &str, pts: &[&LoadPoint]) -> Result<bool> {
    let systems: BTreeSet<String> = pts.iter().map(|p| p.system.clone()).collect();
    let mut series = Vec::new();
    for s in systems {
        let mut v: Vec<(f64, f64)> = pts
            .iter()
            .filter(|p| p.system == s)
            .map(|p| (p.offered_mbit, p.steady_mbit.unwrap_or(p.carried_mbit)))
            .collect();
        v.sort_by(|a, b| a.0.total_cmp(&b.0));
        series.push((s, v));
    }
    line_chart(
        path,
        &format!("Carried vs offered load, {profile}"),
        "offered load, Mbit/s",
        "carried load, Mbit/s",
        &series,
        false,
        SeriesLabelPosition::UpperLeft,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::{Params, Row};

    #[test]
    fn plots_are_written_for_the_rows_present() {
        let dir = std::env::temp_dir().join(format!("longhaul-plots-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let lh = |n| Params {
            pool_size: Some(n),
            congestion: Some("bbr".into()),
            policy: Some("least-outstanding".into()),
            initcwnd: None,
            stream_window_bdp: None,
        };
        let rows = vec![
            Row::measured(
                "pacific",
                "yahoo",
                "replay",
                "direct",
                Params::default(),
                "http",
                vec![900.0, 1000.0],
                vec![],
            ),
            Row::measured(
                "pacific",
                "yahoo",
                "replay",
                "longhaul-tcp",
                lh(1),
                "http",
                vec![700.0],
                vec![],
            ),
            Row::measured(
                "pacific",
                "yahoo",
                "replay",
                "longhaul-tcp",
                lh(crate::systems::MAIN_POOL_SIZE),
                "http",
                vec![500.0],
                vec![],
            ),
            Row::measured(
                "pacific",
                "yahoo",
                "replay",
                "longhaul-quic",
                lh(crate::systems::MAIN_POOL_SIZE),
                "http",
                vec![450.0],
                vec![],
            ),
            Row::floor("pacific", "yahoo", "replay", "http", 400.0),
        ];
        let files = draw_all(&dir, &rows, &[]).unwrap();
        let names: Vec<String> = files
            .iter()
            .map(|f| f.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            names,
            vec!["plt_pacific_replay_http.svg", "pool_size_pacific.svg"]
        );
        let svg = std::fs::read_to_string(&files[0]).unwrap();
        assert!(
            svg.contains("floor (computed)")
                && svg.contains("yahoo")
                && svg.contains("longhaul-quic N=4 bbr least-outstanding")
                && svg.contains("longhaul-tcp N=4 bbr least-outstanding"),
            "labels missing"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
