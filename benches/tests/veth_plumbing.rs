//! Plumbing check of the `pageload` runner: four namespaces joined by plain veth pairs (no
//! emulated link), nginx at the origin, Squid in the edge namespace, the replay client over HTTP
//! and HTTPS and headless Chromium over HTTP (the Yahoo model: two host names), with the proxy
//! hosts' routes to each other tuned by `deploy/set-initcwnd`. Asserts that every repetition
//! loads (for Chromium: every object whole, from the page's Resource Timing), that results.json
//! has the schema, that the floor is labelled computed and that the route script ran on both
//! sides. Timings on veth mean nothing and are not asserted.
//!
//! Needs root (network namespaces), nginx, squid and chromium; skips loudly otherwise, and fails
//! instead of skipping when LONGHAUL_REQUIRE_NETNS=1.

mod common;

use std::process::Command;

fn have(program: &str) -> bool {
    ["/usr/sbin", "/usr/bin", "/sbin", "/bin"]
        .iter()
        .any(|d| std::path::Path::new(d).join(program).exists())
}

#[test]
fn quick_slice_runs_end_to_end_on_veth() {
    if !common::is_root() {
        return skip("not root (network namespaces need CAP_NET_ADMIN)");
    }
    for p in ["nginx", "squid", "ip", "chromium"] {
        if !have(p) {
            return skip(&format!("{p} is not installed (scripts/install-deps)"));
        }
    }
    let out = std::env::temp_dir().join(format!("longhaul-veth-plumbing-{}", std::process::id()));
    let st = Command::new(env!("CARGO_BIN_EXE_pageload"))
        .args([
            "quick",
            "--bed",
            "veth",
            "--systems",
            "direct,single-proxy,direct-h3",
            "--workloads",
            "yahoo",
        ])
        .args([
            "--clients",
            "replay,chromium",
            "--schemes",
            "http,https",
            "--runs",
            "2",
            "--gap-ms",
            "0",
            "--peer-initcwnd",
            "32",
            "--out",
        ])
        .arg(&out)
        .output()
        .expect("running pageload");
    let log = String::from_utf8_lossy(&st.stderr);
    assert!(st.status.success(), "pageload failed: {}\n{log}", st.status);
    // The suite ran from its own copy of the binaries and removed it at the end.
    assert!(
        log.contains("running from a copy of this build in"),
        "not pinned:\n{log}"
    );
    assert!(!out.join(".build").exists(), "the copy was left behind");
    // deploy/set-initcwnd ran on both proxy hosts' routes to each other.
    for node in ["Remote", "Edge"] {
        assert!(
            log.lines()
                .any(|l| l.contains(&format!("{node}: + ip -4 route add"))
                    && l.contains("initcwnd 32")),
            "no tuned route on {node} in:\n{log}"
        );
    }
    let rows: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap()).unwrap();
    let rows = rows.as_array().unwrap();
    for (client, scheme) in [
        ("replay", "http"),
        ("replay", "https"),
        ("chromium", "http"),
        ("chromium", "https"),
    ] {
        for system in ["direct", "single-proxy"] {
            let r = rows
                .iter()
                .find(|r| r["system"] == system && r["scheme"] == scheme && r["client"] == client)
                .unwrap_or_else(|| panic!("no row for {system} {client} {scheme}"));
            assert_eq!(r["runs"], 2, "{r}");
            assert_eq!(r["failures"], 0, "{r}");
            assert!(r["plt_ms_median"].as_f64().unwrap() > 0.0);
            assert!(r["ratio_to_direct"].as_f64().is_some());
            // The origin offered h2 (the default), recorded on HTTPS rows only.
            if scheme == "https" {
                assert_eq!(r["origin_alpn"], "h2", "{r}");
            } else {
                assert!(r.get("origin_alpn").is_none(), "{r}");
            }
        }
        let f = rows
            .iter()
            .find(|r| r["system"] == "floor" && r["scheme"] == scheme && r["client"] == client)
            .unwrap();
        assert_eq!(f["measured"], false);
    }
    // direct-h3: HTTPS only, both clients over HTTP/3 to the origin's QUIC side.
    for client in ["replay", "chromium"] {
        let r = rows
            .iter()
            .find(|r| r["system"] == "direct-h3" && r["scheme"] == "https" && r["client"] == client)
            .unwrap_or_else(|| panic!("no direct-h3 row for {client}"));
        assert_eq!(r["runs"], 2, "{r}");
        assert_eq!(r["failures"], 0, "{r}");
        assert_eq!(r["origin_alpn"], "h3", "{r}");
        let h = rows
            .iter()
            .find(|r| r["system"] == "direct-h3" && r["scheme"] == "http" && r["client"] == client)
            .unwrap();
        assert_eq!(h["measured"], false, "{h}");
        assert_eq!(h["note"], "HTTP/3 is HTTPS only", "{h}");
    }
    let h3_log = std::fs::read_to_string(out.join("veth-nodelay/direct-h3/h3-origin.log")).unwrap();
    let page = "GET www.yahoo.test/index.html 200";
    // The warm-up and two replay loads, and Chromium's two loads, reached it over QUIC.
    assert_eq!(
        h3_log
            .lines()
            .filter(|l| l.contains(page) && l.ends_with("\"longhaul-replay\""))
            .count(),
        3,
        "{h3_log}"
    );
    assert_eq!(
        h3_log
            .lines()
            .filter(|l| l.contains(page) && l.contains("Chrome/"))
            .count(),
        2,
        "{h3_log}"
    );
    let summary = std::fs::read_to_string(out.join("summary.md")).unwrap();
    assert!(summary.contains("## longhaul ÷ direct-h3"), "{summary}");
    assert!(
        summary.contains("HTTPS origins offered h2 and http/1.1"),
        "{summary}"
    );
    // Every HTTPS object went over TLS 1.3 and HTTP/2 with the nginx origin (direct and through
    // Squid's CONNECT tunnel alike), or HTTP/3 for direct-h3; one connection per host name.
    let trials = std::fs::read_to_string(out.join("veth-nodelay").join("trials.jsonl")).unwrap();
    let mut https_objects = 0;
    for line in trials.lines() {
        let t: serde_json::Value = serde_json::from_str(line).unwrap();
        if t["scheme"] != "https" {
            continue;
        }
        for o in t["load"]["objects"].as_array().unwrap() {
            assert_eq!(o["tls"], "TLSv1_3", "{o}");
            let alpn = if t["system"] == "direct-h3" {
                "h3"
            } else {
                "h2"
            };
            assert_eq!(o["alpn"], alpn, "{o}");
            https_objects += 1;
        }
        assert_eq!(t["load"]["connections"], 2, "{t}");
    }
    assert!(https_objects > 0, "no HTTPS trial in {trials}");
    std::fs::remove_dir_all(&out).unwrap();
}

fn skip(why: &str) {
    common::skip("veth_plumbing", why);
}
