//! `pageload` stopped by a signal mid-run leaves nothing behind: no process it started (nginx,
//! the clients), no test-bed directory or named namespace and no copy of its binaries, on the
//! emulated bed and on the veth bed.
//!
//! Needs root (network namespaces) and nginx; skips loudly otherwise, and fails instead of
//! skipping when LONGHAUL_REQUIRE_NETNS=1.

mod common;

use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// Pids (other than ours) whose command line mentions `needle`.
fn processes_mentioning(needle: &str) -> Vec<(u32, String)> {
    let me = std::process::id();
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| pid != me)
        .filter_map(|pid| {
            let raw = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
            let cmd = String::from_utf8_lossy(&raw).replace('\0', " ");
            cmd.contains(needle).then_some((pid, cmd))
        })
        .collect()
}

fn wait_exit(child: &mut Child, limit: Duration) -> Option<std::process::ExitStatus> {
    let t = Instant::now();
    while t.elapsed() < limit {
        if let Some(st) = child.try_wait().unwrap() {
            return Some(st);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    None
}

fn stop_mid_run(bed: &str, profile: &str, signal: &str) {
    let out = std::env::temp_dir().join(format!(
        "longhaul-signal-teardown-{bed}-{}",
        std::process::id()
    ));
    let out_s = out.to_string_lossy().to_string();
    let mut child = Command::new(env!("CARGO_BIN_EXE_pageload"))
        .args(["quick", "--bed", bed, "--profiles", profile])
        .args(["--systems", "direct", "--workloads", "google"])
        .args(["--clients", "replay", "--schemes", "http", "--runs", "1000"])
        .args(["--gap-ms", "0", "--out"])
        .arg(&out)
        .spawn()
        .expect("running pageload");
    let pid = child.id();
    // Wait until the run is under way: nginx (started with `-p <out>/...`) and a client.
    let t = Instant::now();
    loop {
        let procs = processes_mentioning(&out_s);
        if procs.iter().any(|(_, c)| c.contains("nginx"))
            && procs.iter().any(|(_, c)| c.contains("replay-once"))
        {
            break;
        }
        if let Some(st) = child.try_wait().unwrap() {
            panic!("pageload ended before the run was under way: {st}");
        }
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "{bed}: no nginx and client after 60 s: {procs:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let st = Command::new("kill")
        .args([&format!("-{signal}"), &pid.to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    let Some(st) = wait_exit(&mut child, Duration::from_secs(20)) else {
        let _ = child.kill();
        panic!("{bed}: pageload did not exit within 20 s of SIG{signal}");
    };
    let want = 128 + if signal == "INT" { 2 } else { 15 };
    assert_eq!(st.code(), Some(want), "{bed}: exit status {st}");
    // The cleanup kills with SIGKILL before pageload exits; allow the kernel a moment.
    // (An exited process that is not yet reaped has an empty command line.)
    let t = Instant::now();
    let mut left = processes_mentioning(&out_s);
    while !left.is_empty() && t.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(100));
        left = processes_mentioning(&out_s);
    }
    assert!(
        left.is_empty(),
        "{bed}: left running after SIG{signal}: {left:?}"
    );
    // No test-bed directory of this pageload, no named namespace of the veth bed.
    let beds = Path::new("/run/longhaul-testbed");
    if beds.is_dir() {
        let prefix = format!("longhaul-testbed-{pid}-");
        for e in std::fs::read_dir(beds).unwrap() {
            let name = e.unwrap().file_name().to_string_lossy().to_string();
            assert!(!name.starts_with(&prefix), "{bed}: {name} left in /run");
        }
    }
    // Nor the copy of the binaries the suite ran from.
    assert!(
        !out.join(".build").exists(),
        "{bed}: {}/.build left behind",
        out.display()
    );
    let netns = Command::new("ip").args(["netns", "list"]).output().unwrap();
    let netns = String::from_utf8_lossy(&netns.stdout);
    assert!(
        !netns.contains(&format!("lhb{pid}")),
        "{bed}: named namespaces left: {netns}"
    );
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn a_signal_mid_run_tears_the_test_bed_down() {
    if !common::is_root() {
        return skip("not root (network namespaces need CAP_NET_ADMIN)");
    }
    if !Path::new("/usr/sbin/nginx").exists() {
        return skip("nginx is not installed (scripts/install-deps)");
    }
    stop_mid_run("testbed", "pacific", "TERM");
    stop_mid_run("veth", "veth-nodelay", "INT");
}

fn skip(why: &str) {
    common::skip("signal_teardown", why);
}
