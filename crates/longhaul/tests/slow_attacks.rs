//! slowhttptest (Debian package, installed by scripts/install-deps) against the edge in its
//! slowloris (`-H`), slow-body (`-B`) and slow-read (`-X`) modes, each with 100 connections,
//! while a normal client keeps fetching: every normal request is answered, its latency stays
//! bounded while the attack runs, and the edge's memory returns near its level before the
//! attacks once they end. Real processes on loopback, an nginx origin.

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

fn rss_kib(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS")
}

/// `n` sequential GETs of `url` through the edge: their latencies, each checked to be a
/// complete 200.
fn normal_requests(edge: std::net::SocketAddr, url: &str, n: usize, len: usize) -> Vec<Duration> {
    (0..n)
        .map(|_| {
            let started = Instant::now();
            let host = url.split('/').nth(2).unwrap_or_default();
            let (st, head, body) = raw_request(
                edge,
                format!("GET {url} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n")
                    .as_bytes(),
            );
            assert_eq!((st, body.len()), (200, len), "{head}");
            started.elapsed()
        })
        .collect()
}

fn p99(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[(v.len() * 99 / 100).min(v.len() - 1)]
}

#[test]
fn slowhttptest_modes_leave_normal_requests_and_memory_alone() {
    let have = Command::new("slowhttptest")
        .arg("-h")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok();
    assert!(have, "slowhttptest is missing: run scripts/install-deps");
    let nginx = start_nginx(&[("small", 1000), ("big", 4 << 20)]);
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("edge.toml");
    // A short header timeout so slowloris connections are cut within the test.
    std::fs::write(&cfg, "header_timeout_ms = 3000\n").unwrap();
    let pair = start_pair("", &["--config", cfg.to_str().unwrap()]);
    let edge = pair.edge_addr;
    let small = format!("http://127.0.0.1:{}/small", nginx.http);
    let big = format!("http://127.0.0.1:{}/big", nginx.http);

    // Warm up, then the baseline.
    normal_requests(edge, &small, 20, 1000);
    let base = p99(normal_requests(edge, &small, 100, 1000));
    let rss0 = rss_kib(pair.edge.pid());

    let proxy = edge.to_string();
    let modes: [(&str, Vec<&str>); 3] = [
        ("slowloris", vec!["-H", "-u", &small, "-i", "1"]),
        (
            "slow body",
            vec!["-B", "-u", &small, "-i", "1", "-s", "8192"],
        ),
        (
            "slow read",
            vec![
                "-X", "-u", &big, "-k", "1", "-n", "1", "-w", "512", "-y", "1024", "-z", "64",
            ],
        ),
    ];
    let mut peak = rss0;
    for (name, args) in modes {
        let mut attack = Command::new("slowhttptest")
            .args(["-c", "100", "-r", "100", "-l", "8", "-p", "3", "-d", &proxy])
            .args(&args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("slowhttptest");
        // Let the attack's connections open.
        std::thread::sleep(Duration::from_secs(2));
        let during = p99(normal_requests(edge, &small, 100, 1000));
        peak = peak.max(rss_kib(pair.edge.pid()));
        let st = attack.wait().unwrap();
        eprintln!(
            "{name}: normal p99 {during:?} during the attack (baseline {base:?}); \
             slowhttptest exit {st}; edge RSS peak {peak} KiB"
        );
        // The attack reached the edge: slow heads timed out, slow bodies were forwarded as
        // they came, slow readers held replies.
        let log = pair.edge.log_text();
        match name {
            "slowloris" => assert!(
                log.matches("header-timeout").count() >= 50,
                "slowloris: too few header timeouts in the edge log"
            ),
            "slow body" => assert!(
                log.matches("method=\"POST\"").count() >= 50,
                "slow body: too few POST requests in the edge log"
            ),
            _ => assert!(peak > rss0 + 10 * 1024, "slow read: no reply was held"),
        }
        // Generous: the machine is shared, but a stalled proxy would take seconds.
        assert!(
            during < (base * 20).max(Duration::from_millis(500)),
            "{name}: normal requests p99 {during:?} against {base:?} before"
        );
    }
    // Memory returns once the attack connections are gone (the slow readers' replies are
    // dropped when slowhttptest closes them).
    let start = Instant::now();
    loop {
        let now = rss_kib(pair.edge.pid());
        if now < rss0 + 32 * 1024 {
            eprintln!("edge RSS {rss0} KiB before, {peak} KiB at most, {now} KiB after");
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "edge RSS stayed at {now} KiB after the attacks ({rss0} KiB before, peak {peak} KiB)"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    // The normal client is still served.
    normal_requests(edge, &small, 5, 1000);
}
