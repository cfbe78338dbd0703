//! The Grafana dashboard (deploy/grafana/longhaul.json) and the Prometheus alert rules
//! (deploy/prometheus/longhaul-alerts.yml) against the real binaries: a pair on loopback with
//! the default carrier (auto, TLS files from `gen-keys`) serves a request and a failure so that
//! the labelled series exist, a SIGHUP with a broken configuration counts a reload failure, and
//! every metric name in the dashboard's expressions and variables and in the alert rules must
//! appear in the edge's or the remote's `/metrics`. The names come out of the PromQL with
//! strings, label matchers, ranges, grouping lists, functions, keywords, numbers, durations and
//! Grafana variables removed; histogram names may carry `_bucket`, `_sum` or `_count`.
//! `promtool check rules` (Debian's prometheus package) then checks the alert file and, as
//! recording rules, the dashboard's expressions; without promtool that part is skipped (it
//! fails instead with LONGHAUL_REQUIRE_NETNS=1, as in CI).

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::*;

/// Names Prometheus itself adds to every target (not exported by the proxies).
const PROMETHEUS_SYNTHETIC: &[&str] = &["up"];

fn deploy(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../deploy")
        .join(rel)
}

/// PromQL keywords that look like identifiers.
const KEYWORDS: &[&str] = &[
    "and",
    "or",
    "unless",
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "bool",
    "offset",
    "inf",
    "nan",
    "atan2",
];

/// PromQL aggregation operators, which may take their grouping before the parentheses.
const AGGREGATIONS: &[&str] = &[
    "sum",
    "min",
    "max",
    "avg",
    "group",
    "stddev",
    "stdvar",
    "count",
    "count_values",
    "bottomk",
    "topk",
    "quantile",
    "limitk",
    "limit_ratio",
];

/// Replaces each bracketed region (`open`..`close`, nesting counted) and each string literal
/// with a space.
fn blank_regions(expr: &str, open: char, close: char) -> String {
    let mut out = String::new();
    let mut depth = 0usize;
    let mut quote: Option<char> = None;
    let mut escaped = false;
    for c in expr.chars() {
        if let Some(q) = quote {
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == q {
                quote = None;
            }
            continue;
        }
        match c {
            '"' | '\'' | '`' => {
                quote = Some(c);
                out.push(' ');
            }
            c if c == open => depth += 1,
            c if c == close && depth > 0 => {
                depth -= 1;
                if depth == 0 {
                    out.push(' ');
                }
            }
            c if depth == 0 => out.push(c),
            _ => {}
        }
    }
    out
}

/// The metric names a PromQL expression (possibly with Grafana `$variables`) refers to.
fn metric_names(expr: &str) -> BTreeSet<String> {
    // Strings (label values), then label matchers, then ranges and subqueries.
    let clean = blank_regions(&blank_regions(expr, '{', '}'), '[', ']');
    let chars: Vec<char> = clean.chars().collect();
    let ident_start = |c: char| c.is_ascii_alphabetic() || c == '_' || c == ':';
    let ident_char = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':';
    let mut names = BTreeSet::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == '$' {
            // A Grafana variable: $name or ${name}.
            i += 1;
            if chars.get(i) == Some(&'{') {
                while i < chars.len() && chars[i] != '}' {
                    i += 1;
                }
            }
            while i < chars.len() && ident_char(chars[i]) {
                i += 1;
            }
        } else if c.is_ascii_digit() || c == '.' {
            // A number or a duration (5m, 1h30m, 1e6, 0.95).
            while i < chars.len() && (ident_char(chars[i]) || chars[i] == '.') {
                i += 1;
            }
        } else if ident_start(c) {
            let start = i;
            while i < chars.len() && ident_char(chars[i]) {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            let mut j = i;
            while j < chars.len() && chars[j].is_whitespace() {
                j += 1;
            }
            // A function or aggregation call, also in the `sum by (job) (...)` form.
            let rest: String = chars[j..].iter().take(8).collect();
            let grouped = AGGREGATIONS.contains(&word.as_str())
                && (rest.starts_with("by") || rest.starts_with("without"))
                && !rest
                    .chars()
                    .nth(if rest.starts_with("by") { 2 } else { 7 })
                    .is_some_and(ident_char);
            let call = chars.get(j) == Some(&'(') || grouped;
            let lower = word.to_ascii_lowercase();
            if KEYWORDS.contains(&lower.as_str()) {
                if call {
                    // A grouping list: by (...), on (...), group_left (...): label names.
                    let mut depth = 0;
                    i = j;
                    while i < chars.len() {
                        match chars[i] {
                            '(' => depth += 1,
                            ')' => {
                                depth -= 1;
                                if depth == 0 {
                                    i += 1;
                                    break;
                                }
                            }
                            _ => {}
                        }
                        i += 1;
                    }
                }
            } else if !call {
                // Not a function or an aggregation: a metric name.
                names.insert(word);
            }
        } else {
            i += 1;
        }
    }
    names
}

/// A Grafana template query: `label_values(SELECTOR, label)` names the selector's metric;
/// `metrics(...)`/`query_result(...)` are not used here.
fn template_names(query: &str) -> BTreeSet<String> {
    let q = query.trim();
    let inner = q
        .strip_prefix("label_values(")
        .and_then(|r| r.strip_suffix(')'))
        .unwrap_or_else(|| panic!("unexpected template query {q:?}"));
    let selector = inner.rsplit_once(',').map_or(inner, |(s, _)| s);
    metric_names(selector)
}

/// Every expression of the dashboard (panel targets, also inside rows) and its template queries.
fn dashboard_exprs(dash: &serde_json::Value) -> (Vec<String>, Vec<String>) {
    fn walk(panels: &serde_json::Value, out: &mut Vec<String>) {
        for p in panels.as_array().into_iter().flatten() {
            for t in p["targets"].as_array().into_iter().flatten() {
                if let Some(e) = t["expr"].as_str() {
                    out.push(e.to_string());
                }
            }
            walk(&p["panels"], out);
        }
    }
    let mut exprs = Vec::new();
    walk(&dash["panels"], &mut exprs);
    let mut templates = Vec::new();
    for v in dash["templating"]["list"].as_array().into_iter().flatten() {
        if v["type"] == "query" {
            let q = v["query"]["query"]
                .as_str()
                .or_else(|| v["query"].as_str())
                .expect("template query");
            templates.push(q.to_string());
        }
    }
    (exprs, templates)
}

/// The `expr:` values of a rules file: inline, or a `|`/`>` block of more-indented lines.
fn rule_exprs(yaml: &str) -> Vec<(String, String)> {
    let lines: Vec<&str> = yaml.lines().collect();
    let mut out = Vec::new();
    let mut alert = String::new();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        let t = line.trim_start();
        if let Some(a) = t.strip_prefix("- alert:") {
            alert = a.trim().to_string();
        }
        if let Some(rest) = t.strip_prefix("expr:") {
            let indent = line.len() - t.len();
            let rest = rest.trim();
            if rest.starts_with('|') || rest.starts_with('>') {
                let mut e = String::new();
                i += 1;
                while i < lines.len() {
                    let l = lines[i];
                    let lt = l.trim_start();
                    if !lt.is_empty() && l.len() - lt.len() <= indent {
                        break;
                    }
                    e.push_str(lt);
                    e.push(' ');
                    i += 1;
                }
                out.push((alert.clone(), e.trim().to_string()));
                continue;
            }
            let e = rest.trim_matches(|c| c == '"' || c == '\'');
            out.push((alert.clone(), e.to_string()));
        }
        i += 1;
    }
    out
}

/// Metric families (`# TYPE`) and sample names of a text exposition.
struct Exposition {
    families: BTreeMap<String, String>,
    samples: BTreeSet<String>,
}

impl Exposition {
    fn parse(text: &str) -> Exposition {
        let mut families = BTreeMap::new();
        let mut samples = BTreeSet::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let mut it = rest.split_whitespace();
                if let (Some(n), Some(t)) = (it.next(), it.next()) {
                    families.insert(n.to_string(), t.to_string());
                }
            } else if !line.starts_with('#') && !line.trim().is_empty() {
                let end = line.find(['{', ' ']).unwrap_or(line.len());
                samples.insert(line[..end].to_string());
            }
        }
        Exposition { families, samples }
    }

    /// Whether `name` is a series of this exposition (a histogram's `_bucket`, `_sum` and
    /// `_count` included).
    fn has(&self, name: &str) -> bool {
        self.samples.contains(name)
            || ["_bucket", "_sum", "_count"].iter().any(|s| {
                name.strip_suffix(s).is_some_and(|base| {
                    self.families.get(base).map(String::as_str) == Some("histogram")
                        && self.samples.iter().any(|n| n.starts_with(base))
                })
            })
    }
}

fn scrape(addr: SocketAddr) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut v = Vec::new();
    s.read_to_end(&mut v).unwrap();
    let text = String::from_utf8_lossy(&v).to_string();
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    text
}

#[test]
fn extractor_finds_metric_names_and_nothing_else() {
    let got = metric_names(
        r#"histogram_quantile(0.95, sum by (job, le) (rate(a_seconds_bucket{job=~"$job",x="b_total{"}[$__rate_interval])))
           / on (job) group_left (pool) b_total offset 15m > bool 3 * max without (conn) (c:rec[5m:1m]) unless d"#,
    );
    let want: BTreeSet<String> = ["a_seconds_bucket", "b_total", "c:rec", "d"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    assert_eq!(got, want);
    assert_eq!(
        template_names(r#"label_values(up{job=~"$job"}, instance)"#),
        BTreeSet::from(["up".to_string()])
    );
    let rules = rule_exprs("- alert: A\n  expr: x > 1\n  for: 1m\n- alert: B\n  expr: >-\n    sum(y)\n    / z\n  labels: {}\n");
    assert_eq!(
        rules,
        vec![
            ("A".to_string(), "x > 1".to_string()),
            ("B".to_string(), "sum(y) / z".to_string())
        ]
    );
    let e = Exposition::parse(
        "# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_sum 1\nh_count 1\n# TYPE g gauge\ng{a=\"b\"} 2\n",
    );
    assert!(e.has("h_bucket") && e.has("h_count") && e.has("g"));
    assert!(!e.has("g_bucket") && !e.has("nope"));
}

#[test]
fn dashboard_and_alert_metrics_exist_in_the_proxies_metrics() {
    let dir = tempfile::tempdir().unwrap();
    let keys = dir.path().join("keys");
    gen_keys(&keys);
    let tls = keys.to_string_lossy().to_string();
    // Each start takes fresh ports: a port free when chosen may be taken by another test
    // before the proxy binds it (`spawn_on_free_port`), the metrics port as well.
    let remote_metrics = std::cell::Cell::new(free_addr());
    let (_remote, rport) = spawn_on_free_port(
        &remote_bin(),
        dir.path().join("remote.log"),
        "remote-proxy starting",
        true,
        |port| {
            remote_metrics.set(free_addr());
            vec![
                "--listen".into(),
                loopback(port).to_string(),
                "--carrier".into(),
                "auto".into(),
                "--tls-dir".into(),
                tls.clone(),
                "--metrics-listen".into(),
                remote_metrics.get().to_string(),
            ]
        },
    );
    let remote_metrics = remote_metrics.get();
    let remote_addr = loopback(rport);
    let edge_toml = dir.path().join("edge.toml");
    std::fs::write(&edge_toml, "connect_ports = []\n").unwrap();
    let edge_metrics = std::cell::Cell::new(free_addr());
    let (edge, eport) = spawn_on_free_port(
        &edge_bin(),
        dir.path().join("edge.log"),
        "edge-proxy starting",
        false,
        |port| {
            edge_metrics.set(free_addr());
            vec![
                "--config".into(),
                edge_toml.to_string_lossy().into(),
                "--listen".into(),
                loopback(port).to_string(),
                "--remote".into(),
                remote_addr.to_string(),
                "--connections".into(),
                "2".into(),
                "--carrier".into(),
                "auto".into(),
                "--tls-dir".into(),
                tls.clone(),
                "--metrics-listen".into(),
                edge_metrics.get().to_string(),
            ]
        },
    );
    let edge_metrics = edge_metrics.get();
    let edge_addr = loopback(eport);
    wait_port(edge_addr, Duration::from_secs(10));
    wait_port(edge_metrics, Duration::from_secs(10));
    wait_port(remote_metrics, Duration::from_secs(10));

    // A reply and a failure, so that the labelled series (status classes, causes, time to
    // first byte, bytes, streams by kind) exist on both sides.
    let origin = scripted_origin(|mut s| {
        let _ = read_head(&mut s);
        let _ =
            s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello");
    });
    let start = Instant::now();
    loop {
        let req =
            format!("GET http://{origin}/ HTTP/1.1\r\nHost: {origin}\r\nConnection: close\r\n\r\n");
        let (status, _, body) = raw_request(edge_addr, req.as_bytes());
        if status == 200 {
            assert_eq!(body, b"hello");
            break;
        }
        // A readiness wait for the pool, not a speed check.
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "no 200 through the pair"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let (status, _, _) = raw_request(
        edge_addr,
        b"GET http://127.0.0.1:1/ HTTP/1.1\r\nHost: 127.0.0.1:1\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(status, 502);

    // A reload with a broken file keeps the running configuration and counts the failure.
    let before = scrape(edge_metrics);
    assert!(
        before.contains("longhaul_reload_failures_total{what=\"config\"} 0"),
        "{before}"
    );
    std::fs::write(&edge_toml, "drain_grace_ms = \"soon\"\n").unwrap();
    edge.signal("HUP");
    wait_log(&edge, "configuration does not load");
    let start = Instant::now();
    while !scrape(edge_metrics).contains("longhaul_reload_failures_total{what=\"config\"} 1") {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "reload failure not counted"
        );
        std::thread::sleep(Duration::from_millis(50));
    }

    let edge_text = scrape(edge_metrics);
    let remote_text = scrape(remote_metrics);
    let body = |t: &str| t.split_once("\r\n\r\n").map_or("", |(_, b)| b).to_string();
    let exps = [
        ("edge", Exposition::parse(&body(&edge_text))),
        ("remote", Exposition::parse(&body(&remote_text))),
    ];
    // Carrier auto: the switch counters exist before any switch.
    assert!(
        edge_text.contains("longhaul_pool_carrier_switches_total{"),
        "{edge_text}"
    );

    let dash: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(deploy("grafana/longhaul.json")).unwrap())
            .expect("dashboard JSON");
    assert!(
        dash["templating"]["list"]
            .as_array()
            .unwrap()
            .iter()
            .any(|v| v["type"] == "datasource" && v["query"] == "prometheus"),
        "the dashboard has a Prometheus datasource variable"
    );
    let (exprs, templates) = dashboard_exprs(&dash);
    let rules_text = std::fs::read_to_string(deploy("prometheus/longhaul-alerts.yml")).unwrap();
    let rules = rule_exprs(&rules_text);
    assert!(exprs.len() >= 20, "{} dashboard expressions", exprs.len());
    assert!(rules.len() >= 10, "{} alert rules", rules.len());
    assert_eq!(rules.len(), rules_text.matches("- alert:").count());

    let mut used: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for e in &exprs {
        for n in metric_names(e) {
            used.entry(n).or_default().push(format!("dashboard: {e}"));
        }
    }
    for q in &templates {
        for n in template_names(q) {
            used.entry(n)
                .or_default()
                .push(format!("dashboard variable: {q}"));
        }
    }
    for (alert, e) in &rules {
        let names = metric_names(e);
        assert!(!names.is_empty(), "{alert}: no metric in {e}");
        for n in names {
            used.entry(n).or_default().push(format!("alert {alert}"));
        }
    }
    let missing: Vec<_> = used
        .iter()
        .filter(|(n, _)| !PROMETHEUS_SYNTHETIC.contains(&n.as_str()))
        .filter(|(n, _)| !exps.iter().any(|(_, x)| x.has(n)))
        .collect();
    assert!(
        missing.is_empty(),
        "not in either proxy's /metrics: {missing:#?}\nedge:\n{edge_text}\nremote:\n{remote_text}"
    );
    // Not a vacuous check: most exported families are used, and a made-up one is caught.
    let exported: BTreeSet<&String> = exps.iter().flat_map(|(_, x)| x.families.keys()).collect();
    let covered = exported
        .iter()
        .filter(|f| used.keys().any(|n| n.starts_with(f.as_str())))
        .count();
    eprintln!(
        "{} metric names used, {covered} of {} exported families covered",
        used.len(),
        exported.len()
    );
    assert!(
        covered * 4 >= exported.len() * 3,
        "{covered} of {}",
        exported.len()
    );
    assert!(!exps
        .iter()
        .any(|(_, x)| x.has("longhaul_no_such_metric_total")));

    promtool_checks(&rules_text, &exprs, dir.path());
}

/// `promtool check rules` on the alert file, and on the dashboard's expressions written as
/// recording rules (Grafana's interval variables replaced by 5m).
fn promtool_checks(rules_text: &str, exprs: &[String], dir: &Path) {
    let have = Command::new("promtool").arg("--version").output().is_ok();
    if !have {
        assert!(
            std::env::var("LONGHAUL_REQUIRE_NETNS").as_deref() != Ok("1"),
            "promtool (Debian's prometheus package) is required (LONGHAUL_REQUIRE_NETNS=1)"
        );
        eprintln!("SKIP promtool checks: promtool is not installed");
        return;
    }
    let alerts = dir.join("alerts.yml");
    std::fs::write(&alerts, rules_text).unwrap();
    let mut rec = String::from("groups:\n  - name: dashboard\n    rules:\n");
    for (i, e) in exprs.iter().enumerate() {
        let e = e
            .replace("$__rate_interval", "5m")
            .replace("$__interval", "5m");
        let quoted = serde_json::to_string(&e).unwrap();
        rec.push_str(&format!(
            "      - record: longhaul:dashboard_{i}\n        expr: {quoted}\n"
        ));
    }
    let recorded = dir.join("dashboard.yml");
    std::fs::write(&recorded, rec).unwrap();
    for f in [&alerts, &recorded] {
        let o = Command::new("promtool")
            .args(["check", "rules"])
            .arg(f)
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "promtool check rules {}:\n{}{}",
            f.display(),
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
    }
    // The check has teeth: a broken expression is refused.
    let broken = dir.join("broken.yml");
    std::fs::write(
        &broken,
        "groups:\n  - name: b\n    rules:\n      - alert: B\n        expr: sum by (job (x)\n",
    )
    .unwrap();
    let o = Command::new("promtool")
        .args(["check", "rules"])
        .arg(&broken)
        .output()
        .unwrap();
    assert!(!o.status.success(), "promtool accepted a broken expression");
}
