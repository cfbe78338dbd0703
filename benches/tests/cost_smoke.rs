//! Smoke run of the `cost` runner with tiny counts: every system starts on the private
//! loopback, every benchmark runs end to end, and results.json and summary.md come out sane
//! (every system measured, no failures, p50 ≤ p99 ≤ p99.9, bytes carried and CPU time counted
//! for every proxy process, memory figures present). The figures themselves are not asserted:
//! speed lives in the benchmark's own runs.
//!
//! Needs root (network namespaces), nginx, squid, haproxy, and the edge-proxy and
//! remote-proxy binaries next to the test's `cost` (built by `cargo test --workspace`, or
//! `cargo build -p longhaul`); skips loudly otherwise, and fails instead of skipping when
//! LONGHAUL_REQUIRE_NETNS=1.

mod common;

use std::path::Path;
use std::process::Command;

fn have(program: &str) -> bool {
    ["/usr/sbin", "/usr/bin", "/sbin", "/bin"]
        .iter()
        .any(|d| Path::new(d).join(program).exists())
}

#[test]
fn cost_runner_measures_every_system_end_to_end() {
    const T: &str = "cost_runner_measures_every_system_end_to_end";
    if !common::is_root() {
        return common::skip(T, "not root (network namespaces need CAP_NET_ADMIN)");
    }
    for p in ["nginx", "squid", "haproxy", "ip", "unshare"] {
        if !have(p) {
            return common::skip(T, &format!("{p} is not installed (scripts/install-deps)"));
        }
    }
    let bin = Path::new(env!("CARGO_BIN_EXE_cost"));
    let bins = bin.parent().unwrap();
    for b in ["edge-proxy", "remote-proxy"] {
        if !bins.join(b).is_file() {
            return common::skip(
                T,
                &format!("{b} is not built next to cost (cargo build -p longhaul)"),
            );
        }
    }
    let out = tempfile::tempdir().unwrap();
    let st = Command::new(bin)
        .args(["--requests", "30", "--warmup", "5", "--rounds", "2"])
        .args(["--clients", "2", "--mb", "20", "--throughput-rounds", "1"])
        .args(["--idle-clients", "50", "--active-streams", "10"])
        .args(["--slow-rate-kib", "64", "--out"])
        .arg(out.path())
        .output()
        .expect("running cost");
    let log = String::from_utf8_lossy(&st.stderr);
    assert!(st.status.success(), "cost failed: {}\n{log}", st.status);

    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.path().join("results.json")).unwrap())
            .unwrap();
    assert!(
        r["errors"].as_array().unwrap().is_empty(),
        "{}",
        r["errors"]
    );
    let systems = ["direct", "squid-chain", "haproxy-h2", "longhaul-tcp"];
    let lat = r["latency"].as_array().unwrap();
    for s in systems {
        let row = lat
            .iter()
            .find(|l| l["system"].as_str().unwrap().starts_with(s))
            .unwrap_or_else(|| panic!("no latency row for {s}: {lat:?}"));
        assert_eq!(row["requests"], 60, "{row}");
        assert_eq!(row["failures"], 0, "{row}");
        let p = |k: &str| row[k].as_f64().unwrap_or_else(|| panic!("{k} of {row}"));
        assert!(p("p50_us") > 0.0 && p("p50_us") <= p("p99_us") && p("p99_us") <= p("p999_us"));
        assert!(row["added_p50_us"].is_number(), "{row}");
    }
    let tp = r["throughput"].as_array().unwrap();
    assert_eq!(tp.len(), systems.len());
    for s in systems {
        let row = tp
            .iter()
            .find(|t| t["system"].as_str().unwrap().starts_with(s))
            .unwrap_or_else(|| panic!("no throughput row for {s}"));
        assert_eq!(row["failures"], 0, "{row}");
        assert_eq!(row["bytes"], 40_000_000u64, "{row}");
        assert!(row["mb_per_s"].as_f64().unwrap() > 0.0);
        let procs = row["processes"].as_array().unwrap();
        let want: &[&str] = match s {
            "direct" => &[],
            "squid-chain" => &["squid-child", "squid-parent"],
            "haproxy-h2" => &["haproxy-edge", "haproxy-remote"],
            _ => &["edge-proxy", "remote-proxy"],
        };
        for w in want {
            assert!(
                procs.iter().any(|p| p["process"] == *w),
                "{s}: no {w} among {procs:?}"
            );
        }
        if !want.is_empty() {
            let cpu: f64 = procs.iter().map(|p| p["cpu_s"].as_f64().unwrap()).sum();
            assert!(cpu > 0.0, "{s}: no CPU time counted: {row}");
        }
    }
    let m = &r["memory"];
    assert_eq!(m["idle_clients"], 50, "{m}");
    assert!(m["idle_checked"].as_u64().unwrap() > 0, "{m}");
    assert!(m["idle_bytes_per_client"].is_number(), "{m}");
    assert_eq!(m["active_streams"], 10, "{m}");
    assert_eq!(m["active_streams_answered"], 10, "{m}");
    assert_eq!(m["active_streams_flowing"], 10, "{m}");
    assert!(m["active_edge_after_kib"].as_u64().unwrap() > 0, "{m}");
    assert_eq!(r["goals"].as_array().unwrap().len(), 4);
    let summary = std::fs::read_to_string(out.path().join("summary.md")).unwrap();
    for s in systems {
        assert!(summary.contains(s), "{s} missing from summary:\n{summary}");
    }
    assert!(summary.contains("## Goals"));
}
