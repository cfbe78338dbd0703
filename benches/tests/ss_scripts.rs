//! The pool-state scripts operators run on a remote (`scripts/pool-ss-stalls`,
//! `scripts/pool-ss-modes`) read a `scripts/pool-ss-watch` log as documented: a synthetic log
//! with known stalls and BBR states goes in, the counts come out.
//!
//! Needs python3 (scripts/install-deps); skips loudly otherwise, and fails instead of skipping
//! when LONGHAUL_REQUIRE_NETNS=1 (CI).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

/// One sample of one connection: time, send queue, peer, cwnd (segments), bytes acknowledged,
/// BBR's bandwidth estimate (bit/s), pacing gain, cwnd gain, peer's receive window.
type Sample = (
    f64,
    u64,
    &'static str,
    u32,
    u64,
    u64,
    &'static str,
    &'static str,
    u64,
);

const A: &str = "10.77.2.1:40000";
const B: &str = "10.77.2.1:40001";
const STARTUP: &str = "2.88672";

/// Two connections over five sample times: `A` carries 300 kB in STARTUP, then idles into
/// PROBE_RTT; `B` carries 200 kB in PROBE_BW and holds 50 kB of queued reply at the
/// PROBE_RTT floor for two samples (one stall of 500 ms).
#[rustfmt::skip]
const SAMPLES: &[Sample] = &[
    (100.0, 0,      A, 20,  0,       5_000_000,  STARTUP, STARTUP, 90_000),
    (100.0, 0,      B, 300, 0,       20_000_000, "1.25",  "2",     3_000_000),
    (100.5, 0,      A, 700, 300_000, 8_000_000,  STARTUP, STARTUP, 2_000_000),
    (100.5, 0,      B, 300, 200_000, 20_000_000, "1",     "2",     4_000_000),
    (101.0, 0,      A, 4,   300_500, 8_000_000,  "1",     "1",     2_000_000),
    (101.0, 50_000, B, 4,   250_000, 20_000_000, "1",     "1",     4_000_000),
    (101.5, 50_000, B, 4,   250_000, 20_000_000, "1",     "1",     4_000_000),
    (102.0, 0,      B, 300, 300_000, 20_000_000, "1.25",  "2",     4_000_000),
];

/// The samples as `pool-ss-watch` writes them: Unix time, Recv-Q, Send-Q, local, peer, then
/// `ss -ti`'s fields.
fn samples() -> String {
    SAMPLES
        .iter()
        .map(
            |&(ts, sendq, peer, cwnd, acked, bw, pacing, cwnd_gain, rwnd)| {
                format!(
                    "{ts:.3} 0 {sendq} 10.77.2.2:4443 {peer}\t bbr mss:1448 cwnd:{cwnd} \
                 bytes_acked:{acked} bbr:(bw:{bw}bps,mrtt:600.1,pacing_gain:{pacing},\
                 cwnd_gain:{cwnd_gain}) snd_wnd:{rwnd}\n"
                )
            },
        )
        .collect()
}

fn script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../scripts")
        .join(name)
}

fn run(name: &str, args: &[&str], log: &Path) -> String {
    let out = Command::new("python3")
        .arg(script(name))
        .args(args)
        .arg(log)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{name} failed:\n{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

#[test]
fn stalls_and_states_are_counted() {
    if Command::new("python3").arg("--version").output().is_err() {
        return common::skip(
            "ss_scripts",
            "python3 is not installed (scripts/install-deps)",
        );
    }
    let dir = std::env::temp_dir().join(format!("longhaul-ss-scripts-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("ss-samples.log");
    std::fs::write(&log, samples()).unwrap();

    let stalls = run("pool-ss-stalls", &[], &log);
    assert!(
        stalls.contains("1 stalls with data queued, 2 connections"),
        "{stalls}"
    );
    assert!(
        stalls.contains("for 500 ms, send queue up to 50000 bytes"),
        "{stalls}"
    );

    let modes = run("pool-ss-modes", &["--link-mbit", "50"], &log);
    for want in [
        "5 samples of 2 connections",
        "state, every connection and sample: PROBE_BW 3 (38 %), PROBE_RTT 3 (38 %), STARTUP 2 (25 %)",
        "busy connection-samples (>= 100000 bytes acknowledged since the previous): 2",
        "   state: STARTUP 1 (50 %), PROBE_BW 1 (50 %)",
        "   bandwidth estimate: min 8.00, median 14.00, max 20.00 Mbit/s",
        "   as a share of the link's 50 Mbit/s: min 16.00, median 28.00, max 40.00 %",
        "   congestion window: min 0.43, median 0.72, max 1.01 MB",
        "   peer's receive window: min 2.00, median 3.00, max 4.00 MB",
    ] {
        assert!(modes.contains(want), "missing {want:?} in:\n{modes}");
    }

    let quiet = run("pool-ss-modes", &["--busy", "1000000"], &log);
    assert!(
        quiet.contains("no connection acknowledged 1000000 bytes between two samples"),
        "{quiet}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
