//! `results.json` rows and the markdown summary.
//!
//! One [`Row`] per (profile, workload, system, params, client, scheme). Measured rows carry the
//! raw samples; the analytic floor is a row with `system = "floor"`, `measured = false` and no
//! samples. Ratios are filled in by [`fill_ratios`] from rows of the same run only.

use crate::clients;
use crate::stats;
use crate::systems::{direct, direct_h3, haproxy_h2, longhaul, squid_chain};
use anyhow::{bail, Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// The analytic floor's system id: computed (levels × RTT + bytes ÷ rate), never started.
pub const FLOOR: &str = "floor";

/// System ids, in display order: the registered systems ([`crate::systems::REGISTRY`]), then
/// the floor.
pub static SYSTEMS: std::sync::LazyLock<Vec<&'static str>> = std::sync::LazyLock::new(|| {
    let mut ids = crate::systems::ids();
    ids.push(FLOOR);
    ids
});

/// Parameters of a system (longhaul's pool; empty for the others).
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Params {
    /// Number of pooled connections between edge and remote.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool_size: Option<u32>,
    /// Congestion control of the pool (`bbr`, `cubic`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub congestion: Option<String>,
    /// Stream placement policy (`least-outstanding`, `round-robin`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<String>,
    /// Initial congestion window set on the routes (segments), for the initial-window sweep.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initcwnd: Option<u32>,
    /// The edge's per-stream window in bandwidth-delay products (`link.stream_window_bdp`),
    /// when the run set it (`--stream-window-bdps`); absent: the edge's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream_window_bdp: Option<u32>,
}

impl Params {
    /// Short label, e.g. `N=10 bbr least-outstanding`.
    pub fn label(&self) -> String {
        let mut parts = Vec::new();
        if let Some(n) = self.pool_size {
            parts.push(format!("N={n}"));
        }
        if let Some(c) = &self.congestion {
            parts.push(c.clone());
        }
        if let Some(p) = &self.policy {
            parts.push(p.clone());
        }
        if let Some(i) = self.initcwnd {
            parts.push(format!("iw={i}"));
        }
        if let Some(w) = self.stream_window_bdp {
            parts.push(format!("window={w}bdp"));
        }
        parts.join(" ")
    }
}

/// One line of `results.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Row {
    /// Link profile name.
    pub profile: String,
    /// Workload id.
    pub workload: String,
    /// `replay` or `chromium`.
    pub client: String,
    /// One of [`SYSTEMS`].
    pub system: String,
    /// System parameters.
    pub params: Params,
    /// `http` or `https`.
    pub scheme: String,
    /// Successful repetitions (0 for the floor).
    pub runs: usize,
    /// Failed repetitions (errors are in `errors`).
    pub failures: usize,
    /// False for computed rows (the floor).
    pub measured: bool,
    /// Median page load time in ms.
    pub plt_ms_median: Option<f64>,
    /// 95th percentile page load time in ms.
    pub plt_ms_p95: Option<f64>,
    /// Median over the median of `direct` in the same (profile, workload, client, scheme).
    pub ratio_to_direct: Option<f64>,
    /// Median over the floor of the same (profile, workload).
    pub ratio_to_floor: Option<f64>,
    /// Page load times of the successful repetitions, in run order.
    pub samples_ms: Vec<f64>,
    /// First few distinct error messages.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<String>,
    /// Why the row has no measurement, when it has none by design.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// What the HTTPS origin offered by ALPN (`h2`: h2 and http/1.1; `h1`: http/1.1 only; `h3`:
    /// the origin's QUIC side, for `direct-h3`), on measured HTTPS rows; absent in results from
    /// before h2 was offered (http/1.1 only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin_alpn: Option<String>,
}

impl Row {
    /// Which row this is, for the summary's lists: profile / workload / client / scheme /
    /// system and its parameters.
    pub fn cell_label(&self) -> String {
        let params = self.params.label();
        let sep = if params.is_empty() { "" } else { " " };
        format!(
            "{} / {} / {} / {} / {}{sep}{params}",
            self.profile, self.workload, self.client, self.scheme, self.system
        )
    }

    /// A measured row from samples and errors.
    #[allow(clippy::too_many_arguments)]
    pub fn measured(
        profile: &str,
        workload: &str,
        client: &str,
        system: &str,
        params: Params,
        scheme: &str,
        samples_ms: Vec<f64>,
        errors: Vec<String>,
    ) -> Row {
        let mut distinct: Vec<String> = Vec::new();
        for e in &errors {
            if !distinct.contains(e) && distinct.len() < 5 {
                distinct.push(e.clone());
            }
        }
        Row {
            profile: profile.into(),
            workload: workload.into(),
            client: client.into(),
            system: system.into(),
            params,
            scheme: scheme.into(),
            runs: samples_ms.len(),
            failures: errors.len(),
            measured: true,
            plt_ms_median: stats::median(&samples_ms),
            plt_ms_p95: stats::p95(&samples_ms),
            ratio_to_direct: None,
            ratio_to_floor: None,
            samples_ms,
            errors: distinct,
            note: None,
            origin_alpn: None,
        }
    }

    /// The computed floor row.
    pub fn floor(profile: &str, workload: &str, client: &str, scheme: &str, ms: f64) -> Row {
        Row {
            profile: profile.into(),
            workload: workload.into(),
            client: client.into(),
            system: FLOOR.into(),
            params: Params::default(),
            scheme: scheme.into(),
            runs: 0,
            failures: 0,
            measured: false,
            plt_ms_median: Some(ms),
            plt_ms_p95: Some(ms),
            ratio_to_direct: None,
            ratio_to_floor: Some(1.0),
            samples_ms: vec![],
            errors: vec![],
            note: Some(
                "analytic floor (levels x RTT + bytes / rate), computed, not measured".into(),
            ),
            origin_alpn: None,
        }
    }

    /// A row for a system that was asked for but cannot run, with the reason.
    pub fn skipped(
        profile: &str,
        workload: &str,
        client: &str,
        system: &str,
        scheme: &str,
        why: &str,
    ) -> Row {
        let mut r = Row::measured(
            profile,
            workload,
            client,
            system,
            Params::default(),
            scheme,
            vec![],
            vec![],
        );
        r.measured = false;
        r.note = Some(why.into());
        r
    }

    fn group(&self) -> (String, String, String, String) {
        (
            self.profile.clone(),
            self.workload.clone(),
            self.client.clone(),
            self.scheme.clone(),
        )
    }
}

/// Fills `ratio_to_direct` and `ratio_to_floor` from the rows of the same group. `direct` rows
/// with parameters (the initial-window sweep) only serve rows with the same parameters.
pub fn fill_ratios(rows: &mut [Row]) {
    let mut direct = BTreeMap::new();
    let mut floor = BTreeMap::new();
    for r in rows.iter() {
        if r.system == direct::ID {
            direct.insert((r.group(), r.params.initcwnd), r.plt_ms_median);
        }
        if r.system == FLOOR {
            floor.insert(r.group(), r.plt_ms_median);
        }
    }
    for r in rows.iter_mut() {
        let d = direct
            .get(&(r.group(), r.params.initcwnd))
            .copied()
            .flatten();
        r.ratio_to_direct = stats::ratio(r.plt_ms_median, d);
        r.ratio_to_floor = stats::ratio(r.plt_ms_median, floor.get(&r.group()).copied().flatten());
    }
}

/// Sorts rows for reading: by profile, workload, client, scheme, then system in [`SYSTEMS`]
/// order (the floor last), then parameters.
pub fn sort(rows: &mut [Row]) {
    let pos = |s: &str| {
        SYSTEMS
            .iter()
            .position(|x| *x == s)
            .unwrap_or(SYSTEMS.len())
    };
    rows.sort_by(|a, b| {
        (
            &a.profile,
            &a.workload,
            &a.client,
            &a.scheme,
            pos(&a.system),
            &a.params,
        )
            .cmp(&(
                &b.profile,
                &b.workload,
                &b.client,
                &b.scheme,
                pos(&b.system),
                &b.params,
            ))
    });
}

/// One of longhaul's expected results, read from measured rows (never asserted in a test that
/// measures time).
#[derive(Debug, Clone, PartialEq)]
pub struct TargetCheck {
    /// What is expected.
    pub what: String,
    /// The measured value, when the rows hold it.
    pub measured: Option<f64>,
    /// The bound.
    pub bound: f64,
    /// `Some(true)` met, `Some(false)` missed, `None` not measured in this run.
    pub met: Option<bool>,
}

/// The best measured variant of `system` on one page cell (`profile`, `workload`, `scheme`) with
/// the replay client: the lowest value of `f` over its measured rows, leaving out the
/// initial-window sweep.
pub fn best_replay(
    rows: &[Row],
    (profile, workload, scheme): (&str, &str, &str),
    system: &str,
    f: fn(&Row) -> Option<f64>,
) -> Option<f64> {
    rows.iter()
        .filter(|r| {
            r.profile == profile
                && r.workload == workload
                && r.scheme == scheme
                && r.client == clients::replay::ID
                && r.system == system
                && r.measured
                && r.params.initcwnd.is_none()
        })
        .filter_map(f)
        .min_by(f64::total_cmp)
}

/// longhaul's expectations on `pacific` for the Yahoo page with the replay client: median PLT at
/// most 0.5 × direct over HTTP and 0.6 × direct over HTTPS, and below the Squid chain and the
/// HAProxy chain. The longhaul variant judged is the best measured one.
pub fn targets(rows: &[Row]) -> Vec<TargetCheck> {
    let best = |system: &str, scheme: &str, f: fn(&Row) -> Option<f64>| -> Option<f64> {
        best_replay(rows, ("pacific", "yahoo", scheme), system, f)
    };
    let mut out = Vec::new();
    for (scheme, bound) in [("http", 0.5), ("https", 0.6)] {
        let m = best(longhaul::TCP_ID, scheme, |r| r.ratio_to_direct);
        out.push(TargetCheck {
            what: format!("pacific yahoo {scheme}: longhaul-tcp median / direct median ≤ {bound}"),
            measured: m,
            bound,
            met: m.map(|v| v <= bound),
        });
    }
    for peer in [squid_chain::ID, haproxy_h2::ID] {
        for scheme in ["http", "https"] {
            let l = best(longhaul::TCP_ID, scheme, |r| r.plt_ms_median);
            let p = best(peer, scheme, |r| r.plt_ms_median);
            let ratio = crate::stats::ratio(l, p);
            out.push(TargetCheck {
                what: format!("pacific yahoo {scheme}: longhaul-tcp median / {peer} median < 1"),
                measured: ratio,
                bound: 1.0,
                met: ratio.map(|v| v < 1.0),
            });
        }
    }
    out
}

/// The expectations as a markdown list.
pub fn targets_markdown(rows: &[Row]) -> String {
    let mut s = String::from("\n## Expected of longhaul (pacific, yahoo, replay)\n\n");
    for t in targets(rows) {
        let verdict = match t.met {
            Some(true) => "met",
            Some(false) => "**missed**",
            None => "not measured in this run",
        };
        let v = t
            .measured
            .map(|v| format!("{v:.2}"))
            .unwrap_or_else(|| "-".into());
        let _ = writeln!(s, "- {}: measured {v} — {verdict}", t.what);
    }
    s
}

/// Checks the invariants of `results.json` rows (used on load and in tests).
pub fn validate(rows: &[Row]) -> Result<()> {
    for r in rows {
        if !SYSTEMS.contains(&r.system.as_str()) {
            bail!("unknown system {:?}", r.system);
        }
        if clients::lookup(&r.client).is_none() {
            bail!("unknown client {:?}", r.client);
        }
        if !["http", "https"].contains(&r.scheme.as_str()) {
            bail!("unknown scheme {:?}", r.scheme);
        }
        if r.measured && r.runs != r.samples_ms.len() {
            bail!(
                "row {} {} has runs {} but {} samples",
                r.workload,
                r.system,
                r.runs,
                r.samples_ms.len()
            );
        }
        if r.system == FLOOR && r.measured {
            bail!("the floor is computed, never measured");
        }
    }
    Ok(())
}

fn ms(v: Option<f64>) -> String {
    v.map(|x| format!("{x:.0}")).unwrap_or_else(|| "-".into())
}

fn x(v: Option<f64>) -> String {
    v.map(|x| format!("{x:.2}")).unwrap_or_else(|| "-".into())
}

/// The markdown table of `rows` (one line per row, grouped as they come).
pub fn markdown_table(rows: &[Row]) -> String {
    let mut s = String::new();
    s.push_str("| profile | workload | client | scheme | system | params | runs | median ms | p95 ms | ÷ direct | ÷ floor |\n");
    s.push_str("|---|---|---|---|---|---|---:|---:|---:|---:|---:|\n");
    for r in rows {
        let runs = if r.measured {
            if r.failures > 0 {
                format!("{} ({} failed)", r.runs, r.failures)
            } else {
                r.runs.to_string()
            }
        } else if r.system == FLOOR {
            "computed".into()
        } else {
            "skipped".into()
        };
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            r.profile,
            r.workload,
            r.client,
            r.scheme,
            r.system,
            r.params.label(),
            runs,
            ms(r.plt_ms_median),
            ms(r.plt_ms_p95),
            x(r.ratio_to_direct),
            x(r.ratio_to_floor)
        );
    }
    s
}

/// The QUIC carrier against the TCP pool: for every (profile, workload, client, scheme) and
/// parameter set measured with both `longhaul-tcp` and `longhaul-quic`, the ratio of their
/// medians and of their p95 (below 1: QUIC faster). Empty when no such pair exists.
pub fn quic_vs_tcp_markdown(rows: &[Row]) -> String {
    let mut s = String::new();
    for q in rows
        .iter()
        .filter(|r| r.system == longhaul::QUIC_ID && r.measured)
    {
        let Some(t) = rows.iter().find(|t| {
            t.system == longhaul::TCP_ID
                && t.measured
                && t.group() == q.group()
                && t.params == q.params
        }) else {
            continue;
        };
        if s.is_empty() {
            s.push_str("\n## longhaul-quic ÷ longhaul-tcp\n\n");
            s.push_str("Same parameters, same run; below 1: QUIC faster.\n\n");
            s.push_str("| profile | workload | client | scheme | params | tcp median ms | quic median ms | quic ÷ tcp median | quic ÷ tcp p95 |\n");
            s.push_str("|---|---|---|---|---|---:|---:|---:|---:|\n");
        }
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            q.profile,
            q.workload,
            q.client,
            q.scheme,
            q.params.label(),
            ms(t.plt_ms_median),
            ms(q.plt_ms_median),
            x(stats::ratio(q.plt_ms_median, t.plt_ms_median)),
            x(stats::ratio(q.plt_ms_p95, t.plt_ms_p95)),
        );
    }
    s
}

/// longhaul against direct HTTP/3: for every (profile, workload, client) where `direct-h3`
/// was measured, every measured longhaul row (and `direct`, TCP, for reference) of the same
/// cell over HTTPS, with the ratio of medians and of p95 to `direct-h3` (below 1: faster than
/// direct HTTP/3). Empty when `direct-h3` was not measured.
pub fn longhaul_vs_h3_markdown(rows: &[Row]) -> String {
    let mut s = String::new();
    for h in rows
        .iter()
        .filter(|r| r.system == direct_h3::ID && r.measured && r.runs > 0)
    {
        for r in rows.iter().filter(|r| {
            (r.system == longhaul::TCP_ID
                || r.system == longhaul::QUIC_ID
                || r.system == direct::ID)
                && r.measured
                && r.group() == h.group()
        }) {
            if s.is_empty() {
                s.push_str("\n## longhaul ÷ direct-h3\n\n");
                s.push_str(
                    "Same cell, same run; below 1: faster than direct HTTP/3. `direct-h3` is \
                     HTTP/3 over QUIC straight to the origin; through longhaul (and every \
                     explicit proxy) browsers use TCP, HTTPS in a CONNECT tunnel (explicit \
                     proxies do not carry QUIC), so its rows are h2 or http/1.1 over TCP as \
                     `origin_alpn` says. `direct` (TCP) is listed for reference.\n\n",
                );
                s.push_str(
                    "| profile | workload | client | system | params | direct-h3 median ms \
                     | system median ms | ÷ direct-h3 median | ÷ direct-h3 p95 |\n",
                );
                s.push_str("|---|---|---|---|---|---:|---:|---:|---:|\n");
            }
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                r.profile,
                r.workload,
                r.client,
                r.system,
                r.params.label(),
                ms(h.plt_ms_median),
                ms(r.plt_ms_median),
                x(stats::ratio(r.plt_ms_median, h.plt_ms_median)),
                x(stats::ratio(r.plt_ms_p95, h.plt_ms_p95)),
            );
        }
    }
    s
}

/// The summary document: header, table, QUIC against TCP, notes of skipped rows and errors.
pub fn markdown_summary(title: &str, preamble: &str, rows: &[Row]) -> String {
    let mut s = format!("# {title}\n\n{preamble}\n\n");
    s.push_str(&markdown_table(rows));
    s.push_str(&quic_vs_tcp_markdown(rows));
    s.push_str(&longhaul_vs_h3_markdown(rows));
    let notes: Vec<&Row> = rows
        .iter()
        .filter(|r| r.note.is_some() && r.system != FLOOR)
        .collect();
    if !notes.is_empty() {
        s.push_str("\n## Not measured\n\n");
        for r in notes {
            let _ = writeln!(
                s,
                "- {}: {}",
                r.cell_label(),
                r.note.as_deref().unwrap_or("")
            );
        }
    }
    if rows
        .iter()
        .any(|r| r.profile == "pacific" && r.workload == "yahoo")
    {
        s.push_str(&targets_markdown(rows));
    }
    let errs: Vec<&Row> = rows.iter().filter(|r| !r.errors.is_empty()).collect();
    if !errs.is_empty() {
        s.push_str("\n## Errors\n\n");
        for r in errs {
            let _ = writeln!(s, "- {}: {}", r.cell_label(), r.errors.join("; "));
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows() -> Vec<Row> {
        let p = |n| Params {
            pool_size: Some(n),
            congestion: Some("bbr".into()),
            policy: Some("least-outstanding".into()),
            initcwnd: None,
            stream_window_bdp: None,
        };
        vec![
            Row::measured(
                "pacific",
                "yahoo",
                "replay",
                "direct",
                Params::default(),
                "http",
                vec![1000.0, 1200.0, 1100.0],
                vec![],
            ),
            Row::measured(
                "pacific",
                "yahoo",
                "replay",
                "longhaul-tcp",
                p(10),
                "http",
                vec![400.0, 500.0, 450.0],
                vec!["x".into()],
            ),
            Row::floor("pacific", "yahoo", "replay", "http", 300.0),
            Row::measured(
                "pacific",
                "yahoo",
                "replay",
                "direct",
                Params::default(),
                "https",
                vec![2000.0],
                vec![],
            ),
        ]
    }

    #[test]
    fn ratios_come_from_the_same_group() {
        let mut r = rows();
        fill_ratios(&mut r);
        assert_eq!(r[0].ratio_to_direct, Some(1.0));
        assert_eq!(r[1].ratio_to_direct, Some(450.0 / 1100.0));
        assert_eq!(r[1].ratio_to_floor, Some(1.5));
        assert_eq!(r[1].failures, 1);
        assert_eq!(r[2].ratio_to_floor, Some(1.0));
        // The https direct row has no https floor in this set.
        assert_eq!(r[3].ratio_to_floor, None);
        assert_eq!(r[3].ratio_to_direct, Some(1.0));
    }

    #[test]
    fn results_json_schema_round_trips_with_the_required_fields() {
        let mut r = rows();
        fill_ratios(&mut r);
        validate(&r).unwrap();
        let json = serde_json::to_string_pretty(&r).unwrap();
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        for row in v.as_array().unwrap() {
            for k in [
                "profile",
                "workload",
                "client",
                "system",
                "params",
                "scheme",
                "runs",
                "plt_ms_median",
                "plt_ms_p95",
                "ratio_to_direct",
                "ratio_to_floor",
            ] {
                assert!(row.get(k).is_some(), "missing {k} in {row}");
            }
        }
        assert_eq!(v[1]["params"]["pool_size"], 10);
        assert_eq!(v[1]["params"]["congestion"], "bbr");
        let back: Vec<Row> = serde_json::from_str(&json).unwrap();
        assert_eq!(back, r);
        let md = markdown_summary("t", "p", &r);
        assert!(md.contains("| pacific | yahoo | replay | http | longhaul-tcp | N=10 bbr least-outstanding | 3 (1 failed) | 450 |"), "{md}");
        assert!(md.contains("computed"));
    }

    #[test]
    fn targets_are_read_from_the_rows() {
        let mut r = rows();
        fill_ratios(&mut r);
        let t = targets(&r);
        // http: 450 / 1100 = 0.41 <= 0.5.
        assert_eq!(t[0].met, Some(true));
        assert!((t[0].measured.unwrap() - 450.0 / 1100.0).abs() < 1e-9);
        // https: no longhaul row.
        assert_eq!(t[1].met, None);
        // No peers measured.
        assert!(t[2..].iter().all(|c| c.met.is_none()));
        r.push(Row::measured(
            "pacific",
            "yahoo",
            "replay",
            "squid-chain",
            Params::default(),
            "http",
            vec![400.0],
            vec![],
        ));
        let t = targets(&r);
        assert_eq!(t[2].met, Some(false));
        assert!(targets_markdown(&r).contains("**missed**"));
    }

    #[test]
    fn quic_rows_are_set_against_tcp_rows_with_the_same_params() {
        let mut r = rows();
        assert_eq!(quic_vs_tcp_markdown(&r), "");
        let mut q = r[1].clone();
        q.system = "longhaul-quic".into();
        q.samples_ms = vec![360.0];
        q.runs = 1;
        q.failures = 0;
        q.errors.clear();
        q.plt_ms_median = Some(360.0);
        q.plt_ms_p95 = Some(360.0);
        r.push(q);
        validate(&r).unwrap();
        let md = markdown_summary("t", "p", &r);
        assert!(md.contains("## longhaul-quic ÷ longhaul-tcp"), "{md}");
        assert!(
            md.contains("| pacific | yahoo | replay | http | N=10 bbr least-outstanding | 450 | 360 | 0.80 |"),
            "{md}"
        );
    }

    #[test]
    fn errors_name_their_whole_cell() {
        let md = markdown_summary("t", "p", &rows());
        let errors = &md[md.find("## Errors").expect("an Errors section")..];
        assert!(
            errors.contains(
                "- pacific / yahoo / replay / http / longhaul-tcp N=10 bbr least-outstanding: x\n"
            ),
            "{errors}"
        );
        assert_eq!(
            rows()[0].cell_label(),
            "pacific / yahoo / replay / http / direct"
        );
    }

    #[test]
    fn invalid_rows_are_rejected() {
        let mut r = rows();
        r[0].system = "nginx".into();
        assert!(validate(&r).is_err());
        let mut r = rows();
        r[2].measured = true;
        assert!(validate(&r).is_err());
    }

    #[test]
    fn longhaul_is_set_against_direct_h3_in_the_same_https_cell() {
        let mut r = rows();
        assert_eq!(longhaul_vs_h3_markdown(&r), "");
        let lh = |sys: &str, ms: Vec<f64>| {
            Row::measured(
                "pacific",
                "yahoo",
                "replay",
                sys,
                Params::default(),
                "https",
                ms,
                vec![],
            )
        };
        r.push(lh("direct-h3", vec![1000.0, 1000.0, 1200.0]));
        r.push(lh("longhaul-tcp", vec![600.0, 600.0, 600.0]));
        r.push(lh("longhaul-quic", vec![500.0]));
        let md = longhaul_vs_h3_markdown(&r);
        assert!(md.contains("## longhaul ÷ direct-h3"), "{md}");
        assert!(md.contains("browsers use TCP"), "{md}");
        assert!(
            md.contains("| pacific | yahoo | replay | longhaul-tcp |  | 1000 | 600 | 0.60 |"),
            "{md}"
        );
        assert!(
            md.contains("| longhaul-quic |  | 1000 | 500 | 0.50 |"),
            "{md}"
        );
        // direct over TCP for reference; the HTTP rows and longhaul-tcp's HTTP row are not here.
        assert!(md.contains("| direct |  | 1000 | 2000 | 2.00 |"), "{md}");
        assert_eq!(md.matches("\n| pacific").count(), 3, "{md}");
        assert!(markdown_summary("t", "p", &r).contains("## longhaul ÷ direct-h3"));
    }
}
