//! What longhaul's shipped configuration is held to on the long-link profiles, read from one
//! run's rows and offered-load points: ratios of systems measured side by side in that run,
//! with the replay client.
//!
//! The configuration judged is the one an operator gets without settings: carrier `auto`,
//! which runs QUIC while UDP gets through, so `longhaul-quic` at the shipped pool size,
//! controller and placement ([`shipped_spec`]). The measures:
//!
//! - one large reply (`bulk`): median ÷ the computed floor at most 1.05 on `pacific` and
//!   `us-nz-1999`, 1.15 on `lossy` and `satellite`, and never slower than `squid-chain` or
//!   `direct` on any profile;
//! - a page beside it (`mixed`): median ÷ the same page idle (`yahoo`) at most 1.15 on every
//!   profile;
//! - offered load on `pacific` and `satellite` at 0.5 and 0.9 of the link's rate, pages
//!   arriving for at least [`LOAD_WINDOW_S`]: carried at least 0.9 of offered, median page at
//!   most 1.3 × the page idle. Carried ÷ offered is [`LoadPoint::carried_fraction`]: the steady
//!   carried load ÷ what fell due meanwhile (`crate::load`), so neither one page's
//!   load time nor a draw with fewer arrivals than the rate asked for reads as load not
//!   carried (points of runs that did not record them: carried to the last load's end ÷ the
//!   rate asked for). A shorter window (the full suite's 10 s) leaves a steady interval of a
//!   few page loads; such points are listed, not judged.
//!
//! It does NOT measure, nor judge a variant other than the shipped one, nor profiles from
//! `--profile-file` against the bounds (they are listed without one: their links are the
//! operator's).

use crate::clients;
use crate::load::LoadPoint;
use crate::results::{Row, FLOOR};
use crate::systems::{self, direct, longhaul, squid_chain, SystemSpec};
use std::fmt::Write as _;

/// The largest `bulk` median ÷ floor accepted on `profile`, if the profile has a bound.
pub fn bulk_bound(profile: &str) -> Option<f64> {
    match profile {
        "pacific" | "us-nz-1999" => Some(1.05),
        "lossy" | "satellite" => Some(1.15),
        _ => None,
    }
}

/// Largest `mixed` median ÷ the same page idle.
pub const MIXED_BOUND: f64 = 1.15;
/// Least carried ÷ offered under offered load.
pub const CARRIED_BOUND: f64 = 0.9;
/// Largest median page under offered load ÷ the same page idle.
pub const LOADED_PAGE_BOUND: f64 = 1.3;
/// Profiles judged under offered load.
pub const LOAD_PROFILES: [&str; 2] = ["pacific", "satellite"];
/// Fractions of the link's rate judged under offered load.
pub const LOAD_FRACTIONS: [f64; 2] = [0.5, 0.9];
/// Shortest arrival window, seconds, of an offered-load point that is judged.
pub const LOAD_WINDOW_S: f64 = 30.0;

/// The system longhaul runs without settings: QUIC (carrier `auto` while UDP gets through)
/// with the shipped pool size, controller and placement.
pub fn shipped_spec() -> SystemSpec {
    systems::main_variant(
        longhaul::QUIC_ID,
        &[systems::MAIN_POOL_SIZE],
        &[systems::DEFAULT_CONGESTION_NAME.to_string()],
        &[systems::DEFAULT_POLICY_NAME.to_string()],
    )
    .expect("a longhaul system with a controller and a policy")
}

/// The median of `system` (the shipped configuration when `None`) for one replay cell.
fn median(
    rows: &[Row],
    spec: &SystemSpec,
    system: Option<&str>,
    (profile, workload, scheme): (&str, &str, &str),
) -> Option<f64> {
    rows.iter()
        .find(|r| {
            r.profile == profile
                && r.workload == workload
                && r.scheme == scheme
                && r.client == clients::replay::ID
                && match system {
                    None => r.system == spec.id && r.params == spec.params && r.measured,
                    Some(FLOOR) => r.system == FLOOR,
                    Some(s) => r.system == s && r.params.label().is_empty() && r.measured,
                }
        })
        .and_then(|r| r.plt_ms_median)
}

/// One measure: a ratio, and the bound it is held to where it has one.
#[derive(Debug, Clone, PartialEq)]
pub struct Measure {
    /// What is measured.
    pub what: String,
    /// The ratio, when the run holds both sides of it.
    pub measured: Option<f64>,
    /// The bound, on the built-in profiles the module doc names.
    pub bound: Option<f64>,
    /// The bound is an upper one (else a lower one).
    pub at_most: bool,
}

impl Measure {
    /// `Some(true)` met, `Some(false)` missed, `None` without a ratio or a bound.
    pub fn met(&self) -> Option<bool> {
        let (m, b) = self.measured.zip(self.bound)?;
        Some(if self.at_most { m <= b } else { m >= b })
    }
}

fn check(what: String, measured: Option<f64>, bound: Option<f64>, at_most: bool) -> Measure {
    Measure {
        what,
        measured,
        bound,
        at_most,
    }
}

/// `, N s` for a point that recorded its arrival window.
fn window(pt: &LoadPoint) -> String {
    pt.window_s
        .map_or_else(String::new, |w| format!(" for {w:.0} s"))
}

/// The link rate of built-in profile `profile` (down direction), Mbit/s.
fn link_mbit(profile: &str) -> Option<f64> {
    let p = testbed::Profile::named(profile)?;
    p.down.rate_bps.map(|b| b as f64 / 1e6)
}

/// Every measure of the module doc the rows and points hold, profile by profile.
pub fn checks(rows: &[Row], load: &[LoadPoint]) -> Vec<Measure> {
    let spec = shipped_spec();
    let label = spec.label();
    let mut profiles: Vec<&str> = rows.iter().map(|r| r.profile.as_str()).collect();
    profiles.sort();
    profiles.dedup();
    let mut out = Vec::new();
    for p in profiles {
        for scheme in ["http", "https"] {
            let bulk = median(rows, &spec, None, (p, "bulk", scheme));
            if let Some(b) = bulk {
                let floor = median(rows, &spec, Some(FLOOR), (p, "bulk", scheme));
                out.push(check(
                    format!("{p} bulk {scheme}: {label} median ÷ floor"),
                    floor.map(|f| b / f),
                    bulk_bound(p),
                    true,
                ));
                for peer in [squid_chain::ID, direct::ID] {
                    let m = median(rows, &spec, Some(peer), (p, "bulk", scheme));
                    out.push(check(
                        format!("{p} bulk {scheme}: {label} median ÷ {peer} median"),
                        m.map(|m| b / m),
                        Some(1.0),
                        true,
                    ));
                }
            }
            let mixed = median(rows, &spec, None, (p, "mixed", scheme));
            if let Some(m) = mixed {
                let idle = median(rows, &spec, None, (p, "yahoo", scheme));
                out.push(check(
                    format!("{p} mixed {scheme}: {label} median ÷ the page idle"),
                    idle.map(|i| m / i),
                    Some(MIXED_BOUND),
                    true,
                ));
            }
        }
    }
    for pt in load.iter().filter(|pt| pt.system == label) {
        let p = pt.profile.as_str();
        let Some(rate) = link_mbit(p) else { continue };
        let f = pt.offered_mbit / rate;
        let judged = LOAD_PROFILES.contains(&p)
            && LOAD_FRACTIONS.iter().any(|x| (x - f).abs() < 1e-6)
            && pt.window_s.is_some_and(|w| w >= LOAD_WINDOW_S);
        let bound = |b: f64| judged.then_some(b);
        out.push(check(
            format!(
                "{p} {} at {f:.2} of the rate{}: {label} carried ÷ offered",
                pt.workload,
                window(pt)
            ),
            pt.carried_fraction(),
            bound(CARRIED_BOUND),
            false,
        ));
        let idle = median(rows, &spec, None, (p, &pt.workload, "http"));
        out.push(check(
            format!(
                "{p} {} at {f:.2} of the rate{}: {label} median page ÷ idle",
                pt.workload,
                window(pt)
            ),
            pt.plt_ms_median.zip(idle).map(|(m, i)| m / i),
            bound(LOADED_PAGE_BOUND),
            true,
        ));
        // What queueing alone would do with the same arrivals: a reference, never judged.
        if let Some(wait) = pt.fifo_wait_ms_median {
            out.push(check(
                format!(
                    "{p} {} at {f:.2} of the rate{}: the same draw at a link serving whole pages \
                     first come first served (computed): idle + median wait ÷ idle",
                    pt.workload,
                    window(pt)
                ),
                idle.map(|i| (i + wait) / i),
                None,
                true,
            ));
        }
    }
    out
}

/// The measures as a markdown section; empty when the run holds none.
pub fn markdown(rows: &[Row], load: &[LoadPoint]) -> String {
    let checks = checks(rows, load);
    if checks.is_empty() {
        return String::new();
    }
    let mut s = String::from(
        "\n## longhaul's shipped configuration\n\nRatios of medians measured side by side in \
         this run (replay client); bounds: one large reply ≤ 1.05 × the floor on pacific and \
         us-nz-1999, ≤ 1.15 on lossy and satellite, never slower than the Squid chain or \
         direct; a page beside it ≤ 1.15 × idle; under offered load (pacific, satellite; 0.5 \
         and 0.9 of the rate) carried ≥ 0.9 of offered (steady carried ÷ what fell due \
         meanwhile) and the page ≤ 1.3 × idle.\n\n",
    );
    for c in checks {
        let v = c
            .measured
            .map_or_else(|| "-".to_string(), |v| format!("{v:.2}"));
        let rel = if c.at_most { "≤" } else { "≥" };
        let verdict = match (c.met(), c.bound) {
            (Some(true), Some(b)) => format!("{rel} {b}: met"),
            (Some(false), Some(b)) => format!("{rel} {b}: **missed**"),
            (_, None) => "no bound here".to_string(),
            (None, Some(_)) => "not measured in this run".to_string(),
        };
        let _ = writeln!(s, "- {}: {v} ({verdict})", c.what);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::Params;

    fn row(
        profile: &str,
        workload: &str,
        system: &str,
        params: Params,
        scheme: &str,
        ms: f64,
    ) -> Row {
        Row::measured(
            profile,
            workload,
            "replay",
            system,
            params,
            scheme,
            vec![ms],
            vec![],
        )
    }

    fn shipped(profile: &str, workload: &str, scheme: &str, ms: f64) -> Row {
        row(
            profile,
            workload,
            longhaul::QUIC_ID,
            shipped_spec().params,
            scheme,
            ms,
        )
    }

    fn find<'a>(m: &'a [Measure], what: &str) -> &'a Measure {
        m.iter()
            .find(|c| c.what.contains(what))
            .unwrap_or_else(|| panic!("no {what:?} in {m:#?}"))
    }

    #[test]
    fn the_shipped_configuration_is_the_quic_pool_at_its_defaults() {
        let s = shipped_spec();
        assert_eq!(s.id, longhaul::QUIC_ID);
        assert_eq!(s.params.pool_size, Some(systems::MAIN_POOL_SIZE));
        assert_eq!(s.label(), "longhaul-quic N=4 rate pack");
    }

    #[test]
    fn bulk_is_judged_against_the_floor_and_both_peers_of_its_own_run() {
        let mut other = shipped_spec().params;
        other.policy = Some("round-robin".into());
        let rows = vec![
            shipped("lossy", "bulk", "http", 45_600.0),
            // Another longhaul variant and the TCP pool are not what ships.
            row("lossy", "bulk", longhaul::QUIC_ID, other, "http", 41_000.0),
            Row::floor("lossy", "bulk", "replay", "http", 40_000.0),
            row(
                "lossy",
                "bulk",
                squid_chain::ID,
                Params::default(),
                "http",
                45_000.0,
            ),
            row(
                "lossy",
                "bulk",
                direct::ID,
                Params::default(),
                "http",
                47_000.0,
            ),
            shipped("pacific", "bulk", "https", 4_300.0),
            Row::floor("pacific", "bulk", "replay", "https", 4_150.0),
        ];
        let m = checks(&rows, &[]);
        let f = find(
            &m,
            "lossy bulk http: longhaul-quic N=4 rate pack median ÷ floor",
        );
        assert!((f.measured.unwrap() - 1.14).abs() < 1e-9);
        assert_eq!((f.bound, f.met()), (Some(1.15), Some(true)));
        let sq = find(
            &m,
            "lossy bulk http: longhaul-quic N=4 rate pack median ÷ squid-chain",
        );
        assert_eq!(sq.met(), Some(false));
        let d = find(
            &m,
            "lossy bulk http: longhaul-quic N=4 rate pack median ÷ direct",
        );
        assert_eq!(d.met(), Some(true));
        let p = find(
            &m,
            "pacific bulk https: longhaul-quic N=4 rate pack median ÷ floor",
        );
        assert_eq!((p.bound, p.met()), (Some(1.05), Some(true)));
        // Peers not in the run: a measure without a ratio, never a verdict.
        let none = find(
            &m,
            "pacific bulk https: longhaul-quic N=4 rate pack median ÷ direct",
        );
        assert_eq!((none.measured, none.met()), (None, None));
        let md = markdown(&rows, &[]);
        assert!(
            md.contains("median ÷ squid-chain median: 1.01 (≤ 1: **missed**)"),
            "{md}"
        );
        assert!(md.contains("median ÷ floor: 1.14 (≤ 1.15: met)"), "{md}");
    }

    #[test]
    fn a_page_beside_a_download_is_judged_against_the_same_page_idle() {
        let rows = vec![
            shipped("satellite", "yahoo", "https", 3_000.0),
            shipped("satellite", "mixed", "https", 3_600.0),
            shipped("my-link", "yahoo", "http", 1_000.0),
            shipped("my-link", "mixed", "http", 1_100.0),
        ];
        let m = checks(&rows, &[]);
        let s = find(&m, "satellite mixed https");
        assert!((s.measured.unwrap() - 1.2).abs() < 1e-9);
        assert_eq!(s.met(), Some(false));
        assert_eq!(find(&m, "my-link mixed http").met(), Some(true));
        // A profile of the operator's own has no bulk bound.
        assert_eq!(bulk_bound("my-link"), None);
    }

    #[test]
    fn offered_load_is_judged_at_half_and_nine_tenths_of_the_rate_on_pacific_and_satellite() {
        let label = shipped_spec().label();
        let pt = |profile: &str, offered: f64, carried: f64, plt: f64| LoadPoint {
            window_s: Some(40.0),
            ..LoadPoint::sample(profile, &label, offered, carried, 10, plt)
        };
        let rows = vec![
            shipped("pacific", "yahoo", "http", 850.0),
            shipped("us-nz-1999", "yahoo", "http", 800.0),
        ];
        let load = vec![
            pt("pacific", 90.0, 80.0, 1_200.0),
            pt("pacific", 75.0, 74.0, 900.0),
            pt("us-nz-1999", 0.5 * 34.368, 17.0, 820.0),
        ];
        let short = LoadPoint {
            window_s: Some(10.0),
            ..pt("satellite", 45.0, 44.0, 3_000.0)
        };
        let unknown = LoadPoint {
            window_s: None,
            ..pt("satellite", 25.0, 24.0, 3_000.0)
        };
        let load = [load, vec![short, unknown]].concat();
        let m = checks(&rows, &load);
        let c = find(
            &m,
            "pacific yahoo at 0.90 of the rate for 40 s: longhaul-quic N=4 rate pack carried",
        );
        assert!((c.measured.unwrap() - 80.0 / 90.0).abs() < 1e-9);
        assert_eq!((c.bound, c.met()), (Some(0.9), Some(false)));
        let p = find(
            &m,
            "pacific yahoo at 0.90 of the rate for 40 s: longhaul-quic N=4 rate pack median page",
        );
        assert_eq!(p.met(), Some(false), "1200 / 850 = 1.41");
        // 0.75 and us-nz-1999 are reported, not judged.
        assert_eq!(find(&m, "pacific yahoo at 0.75").bound, None);
        let u = find(&m, "us-nz-1999 yahoo at 0.50");
        assert_eq!((u.bound, u.met()), (None, None));
        // A window shorter than the bound's, or one not recorded: listed, not judged.
        assert_eq!(
            find(&m, "satellite yahoo at 0.90 of the rate for 10 s").bound,
            None
        );
        assert_eq!(
            find(&m, "satellite yahoo at 0.50 of the rate: longhaul").bound,
            None
        );
        assert!(markdown(&rows, &load).contains("(no bound here)"));
        assert!(markdown(&[], &[]).is_empty());
    }

    #[test]
    fn offered_load_is_judged_on_the_steady_carried_load_against_the_arrivals() {
        let label = shipped_spec().label();
        // Every page served at about its idle pace: to the last load's end reads 0.91 of the
        // rate asked for (the last page's 3.9 s in a 40 s window), steady 0.99 of what fell due.
        let pt = LoadPoint {
            window_s: Some(40.0),
            arrived_mbit: Some(44.1),
            steady_mbit: Some(44.0),
            steady_from_s: Some(10.0),
            due_mbit: Some(44.5),
            wire_load: Some(0.95),
            fifo_wait_ms_median: Some(320.0),
            ..LoadPoint::sample("satellite", &label, 45.0, 41.1, 391, 3_900.0)
        };
        let rows = vec![shipped("satellite", "yahoo", "http", 3_200.0)];
        let m = checks(&rows, std::slice::from_ref(&pt));
        let c = find(
            &m,
            "satellite yahoo at 0.90 of the rate for 40 s: longhaul-quic N=4 rate pack carried",
        );
        assert!((c.measured.unwrap() - 44.0 / 44.5).abs() < 1e-9);
        assert_eq!((c.bound, c.met()), (Some(0.9), Some(true)));
        // The queueing reference is listed beside the page's ratio, never judged.
        let r = find(
            &m,
            "satellite yahoo at 0.90 of the rate for 40 s: the same draw at a link serving",
        );
        assert!((r.measured.unwrap() - 3_520.0 / 3_200.0).abs() < 1e-9);
        assert_eq!((r.bound, r.met()), (None, None));
        let without = LoadPoint {
            fifo_wait_ms_median: None,
            ..pt
        };
        assert!(checks(&rows, &[without])
            .iter()
            .all(|c| !c.what.contains("first come first served")));
    }
}
