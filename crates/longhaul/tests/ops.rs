//! Operations, with the real binaries: the systemd units in deploy/ pass `systemd-analyze
//! verify`, both binaries tell a `NOTIFY_SOCKET` READY=1 once they serve (and WATCHDOG=1,
//! STOPPING=1), `/metrics` shows traffic and per-pool-connection gauges, SIGHUP reloads without
//! dropping a client connection, and deploy/set-initcwnd is idempotent.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

fn deploy_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy")
}

fn require_tools() -> bool {
    std::env::var("LONGHAUL_REQUIRE_NETNS").is_ok_and(|v| v == "1")
}

fn have(cmd: &str) -> bool {
    Command::new(cmd)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok()
}

/// A copy of deploy/systemd with the install paths pointing at the built binaries and the
/// repository's script, so that verify checks real executables.
fn units_for_verify(dir: &Path) {
    let edge = edge_bin();
    let remote = remote_bin();
    let script = deploy_dir().join("set-initcwnd");
    let src = deploy_dir().join("systemd");
    for u in [
        "edge-proxy.service",
        "remote-proxy.service",
        "longhaul-initcwnd.service",
    ] {
        let text = std::fs::read_to_string(src.join(u)).unwrap();
        assert!(
            text.contains("/usr/local/"),
            "{u} installs under /usr/local"
        );
        let text = text
            .replace("/usr/local/bin/edge-proxy", &edge.to_string_lossy())
            .replace("/usr/local/bin/remote-proxy", &remote.to_string_lossy())
            .replace(
                "/usr/local/sbin/set-initcwnd",
                &script.canonicalize().unwrap().to_string_lossy(),
            );
        std::fs::write(dir.join(u), text).unwrap();
    }
    let dropin = dir.join("edge-proxy.service.d");
    std::fs::create_dir_all(&dropin).unwrap();
    std::fs::copy(
        src.join("edge-proxy.service.d/transparent.conf"),
        dropin.join("transparent.conf"),
    )
    .unwrap();
}

fn verify(dir: &Path, units: &[&str]) -> (bool, String) {
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .args(units.iter().map(|u| dir.join(u)))
        .current_dir(dir)
        .output()
        .expect("systemd-analyze");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[test]
fn systemd_units_pass_analyze_verify() {
    if !have("systemd-analyze") {
        assert!(
            !require_tools(),
            "systemd-analyze is required (LONGHAUL_REQUIRE_NETNS=1)"
        );
        eprintln!("SKIP systemd_units_pass_analyze_verify: systemd-analyze is not installed");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    units_for_verify(dir.path());
    let units = [
        "edge-proxy.service",
        "remote-proxy.service",
        "longhaul-initcwnd.service",
    ];
    let (ok, text) = verify(dir.path(), &units);
    // Unknown keys and bad values are warnings with exit status 0: the output must be empty.
    assert!(ok && text.trim().is_empty(), "verify:\n{text}");

    // The check has teeth: the drop-in is read, and a missing binary fails.
    let conf = dir.path().join("edge-proxy.service.d/transparent.conf");
    let good = std::fs::read_to_string(&conf).unwrap();
    std::fs::write(&conf, format!("{good}NoSuchKey=1\n")).unwrap();
    let (_, text) = verify(dir.path(), &["edge-proxy.service"]);
    assert!(
        text.contains("transparent.conf") && text.contains("NoSuchKey"),
        "{text}"
    );
    std::fs::write(&conf, good).unwrap();
    let unit = dir.path().join("remote-proxy.service");
    let text = std::fs::read_to_string(&unit).unwrap();
    std::fs::write(
        &unit,
        text.replace(
            &*remote_bin().to_string_lossy(),
            "/nonexistent/remote-proxy",
        ),
    )
    .unwrap();
    let (ok, text) = verify(dir.path(), &["remote-proxy.service"]);
    assert!(!ok && text.contains("/nonexistent/remote-proxy"), "{text}");

    // Hardening: no capability except in the transparent drop-in.
    for u in ["edge-proxy.service", "remote-proxy.service"] {
        let t = std::fs::read_to_string(deploy_dir().join("systemd").join(u)).unwrap();
        for line in [
            "Type=notify",
            "WatchdogSec=",
            "ExecReload=/bin/kill -HUP $MAINPID",
            "NoNewPrivileges=yes",
            "ProtectSystem=strict",
            "PrivateTmp=yes",
            "CapabilityBoundingSet=\n",
            "RestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX",
        ] {
            assert!(t.contains(line), "{u} lacks {line:?}");
        }
        assert!(!t.contains("CAP_NET_ADMIN\n"), "{u} grants CAP_NET_ADMIN");
    }
}

/// Receives notifications until one contains `want` or `limit` passes.
fn wait_notify(sock: &UnixDatagram, want: &str, limit: Duration) -> Vec<String> {
    let start = Instant::now();
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    while start.elapsed() < limit {
        match sock.recv(&mut buf) {
            Ok(n) => {
                let m = String::from_utf8_lossy(&buf[..n]).to_string();
                let done = m.lines().any(|l| l == want);
                seen.push(m);
                if done {
                    return seen;
                }
            }
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    || e.kind() == std::io::ErrorKind::TimedOut => {}
            Err(e) => panic!("notify socket: {e}"),
        }
    }
    panic!("no {want} within {limit:?}; got {seen:?}");
}

fn spawn_notified(
    bin: &Path,
    args: &[String],
    log: PathBuf,
    notify: &Path,
    watchdog_us: Option<u64>,
) -> Proc {
    let f = std::fs::File::create(&log).unwrap();
    let mut cmd = Command::new(bin);
    cmd.args(args)
        .env("RUST_LOG", "info")
        .env("NOTIFY_SOCKET", notify)
        .stdout(f.try_clone().unwrap())
        .stderr(f);
    if let Some(us) = watchdog_us {
        cmd.env("WATCHDOG_USEC", us.to_string());
    }
    Proc {
        child: cmd.spawn().unwrap(),
        name: bin.file_name().unwrap().to_string_lossy().into(),
        log,
        term_first: false,
    }
}

#[test]
fn binaries_notify_ready_after_binding_then_watchdog_and_stopping() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("notify.sock");
    let sock = UnixDatagram::bind(&path).unwrap();
    sock.set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();

    let remote_addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let mut remote = spawn_notified(
        &remote_bin(),
        &["--listen".into(), remote_addr.to_string()],
        dir.path().join("remote.log"),
        &path,
        Some(300_000),
    );
    let seen = wait_notify(&sock, "READY=1", Duration::from_secs(20));
    // READY=1 means serving: the listener is bound already, no polling needed.
    TcpStream::connect(remote_addr).expect("remote accepts once it said READY=1");
    assert!(
        seen.iter().all(|m| !m.contains("WATCHDOG=1")),
        "READY=1 comes first: {seen:?}"
    );
    // WATCHDOG_USEC=300 ms: pings every 150 ms.
    wait_notify(&sock, "WATCHDOG=1", Duration::from_secs(5));

    let edge_addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let mut edge = spawn_notified(
        &edge_bin(),
        &[
            "--listen".into(),
            edge_addr.to_string(),
            "--remote".into(),
            remote_addr.to_string(),
            "--connections".into(),
            "2".into(),
        ],
        dir.path().join("edge.log"),
        &path,
        None,
    );
    let seen = wait_notify(&sock, "READY=1", Duration::from_secs(20));
    assert!(
        seen.iter()
            .any(|m| m.contains(&format!("serving on {edge_addr}"))),
        "the edge's status names its listener: {seen:?}"
    );
    // The pool was up before READY=1: the first request is served, not a 502.
    let (status, head, _) = raw_request(
        edge_addr,
        format!("GET http://{remote_addr}/ HTTP/1.1\r\nHost: {remote_addr}\r\nConnection: close\r\n\r\n").as_bytes(),
    );
    assert!(
        status != 0 && !head.contains("remote-unavailable"),
        "first request after READY=1: {head}"
    );

    edge.signal("TERM");
    wait_notify(&sock, "STOPPING=1", Duration::from_secs(10));
    assert!(edge.wait_exit(Duration::from_secs(20)).is_some());
    remote.signal("TERM");
    wait_notify(&sock, "STOPPING=1", Duration::from_secs(10));
    assert!(remote.wait_exit(Duration::from_secs(20)).is_some());
}

/// GET /metrics; the body.
fn scrape(addr: SocketAddr) -> String {
    let (status, head, body) = raw_request(
        addr,
        b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(status, 200, "{head}");
    assert!(head.contains("openmetrics-text"), "{head}");
    String::from_utf8(body).unwrap()
}

/// Sum of the samples of `name` whose labels contain every one of `labels`.
fn sample(text: &str, name: &str, labels: &[&str]) -> Option<f64> {
    let mut found = None;
    for line in text.lines() {
        let Some(rest) = line.strip_prefix(name) else {
            continue;
        };
        if !(rest.starts_with('{') || rest.starts_with(' ')) {
            continue;
        }
        if !labels.iter().all(|l| rest.contains(l)) {
            continue;
        }
        let v: f64 = rest.rsplit(' ').next().unwrap().parse().unwrap();
        *found.get_or_insert(0.0) += v;
    }
    found
}

/// An origin that answers every request on a connection with `body` (keep-alive).
fn keepalive_origin(body: &'static [u8]) -> SocketAddr {
    scripted_origin(move |mut s| loop {
        let head = read_head(&mut s);
        if head.is_empty() {
            return;
        }
        let reply = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", body.len());
        if s.write_all(reply.as_bytes()).is_err() || s.write_all(body).is_err() {
            return;
        }
    })
}

#[test]
fn metrics_count_traffic_and_show_pool_connections() {
    let edge_metrics: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let remote_metrics: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let pair = start_pair(
        &format!("allow_private_targets = true\n[metrics]\nlisten = \"{remote_metrics}\"\n"),
        &["--metrics-listen", &edge_metrics.to_string()],
    );
    wait_port(edge_metrics, Duration::from_secs(5));
    let before = scrape(edge_metrics);
    let origin = keepalive_origin(&[b'x'; 5000]);
    for _ in 0..3 {
        let (status, _, body) = raw_request(
            pair.edge_addr,
            format!("GET http://{origin}/ HTTP/1.1\r\nHost: {origin}\r\nConnection: close\r\n\r\n")
                .as_bytes(),
        );
        assert_eq!((status, body.len()), (200, 5000));
    }
    // A refused connect on the far side: counted by cause.
    let (status, head, _) = raw_request(
        pair.edge_addr,
        b"GET http://127.0.0.1:1/ HTTP/1.1\r\nHost: 127.0.0.1:1\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(status, 502, "{head}");

    let after = scrape(edge_metrics);
    let moved = |name: &str, labels: &[&str]| {
        sample(&after, name, labels).unwrap_or(0.0) - sample(&before, name, labels).unwrap_or(0.0)
    };
    assert!(
        moved("longhaul_streams_opened_total", &["kind=\"http\""]) >= 4.0,
        "{after}"
    );
    assert!(moved("longhaul_requests_total", &["class=\"2xx\""]) >= 3.0);
    assert!(moved("longhaul_requests_total", &["class=\"5xx\""]) >= 1.0);
    assert!(moved("longhaul_bytes_total", &["direction=\"down\""]) >= 15_000.0);
    assert!(moved("longhaul_errors_total", &["cause=\"connect-failed\""]) >= 1.0);
    assert!(
        moved(
            "longhaul_time_to_first_byte_seconds_count",
            &["kind=\"http\""]
        ) >= 3.0
    );
    // Per-pool-connection gauges, read at scrape time: two slots to the remote, both up.
    let pool = format!("pool=\"{}\"", pair.remote_addr);
    for slot in ["slot=\"0\"", "slot=\"1\""] {
        assert_eq!(
            sample(&after, "longhaul_pool_connection_up", &[&pool, slot]),
            Some(1.0),
            "{after}"
        );
        for g in [
            "longhaul_pool_connection_cwnd_segments",
            "longhaul_pool_connection_tcp_rtt_seconds",
            "longhaul_pool_connection_outstanding_bytes",
            "longhaul_pool_connection_retransmitted_segments",
            "longhaul_pool_connection_reconnects",
            "longhaul_pool_connection_credit_held_bytes",
        ] {
            assert!(sample(&after, g, &[&pool, slot]).is_some(), "{g} {slot}");
        }
        assert!(
            sample(
                &after,
                "longhaul_pool_connection_cwnd_segments",
                &[&pool, slot]
            )
            .unwrap()
                > 0.0
        );
    }

    let remote = scrape(remote_metrics);
    assert!(sample(&remote, "longhaul_streams_opened_total", &["kind=\"http\""]).unwrap() >= 4.0);
    assert!(sample(&remote, "longhaul_bytes_total", &["direction=\"down\""]).unwrap() >= 15_000.0);
    assert!(
        sample(
            &remote,
            "longhaul_errors_total",
            &["cause=\"connect-failed\""]
        )
        .unwrap()
            >= 1.0
    );
    assert_eq!(
        sample(&remote, "longhaul_pool_connection_up", &["pool=\"edges\""]),
        Some(2.0),
        "{remote}"
    );
    // Both proxies show the host's tcp_slow_start_after_idle (this namespace's, read by the
    // test the same way); the default congestion control (bbr) is exempt, so no warning.
    let host = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_slow_start_after_idle")
        .map(|v| f64::from(u8::from(v.trim() != "0")));
    for (side, text) in [("edge", &after), ("remote", &remote)] {
        let shown = sample(text, "longhaul_host_tcp_slow_start_after_idle", &[]);
        match &host {
            Ok(v) => assert_eq!(shown, Some(*v), "{side}: {text}"),
            Err(_) => assert_eq!(shown, None, "{side}: {text}"),
        }
    }
    assert!(!pair.edge.log_text().contains("slow start again"));
    // Other paths are not served.
    let (status, _, _) = raw_request(edge_metrics, b"GET / HTTP/1.1\r\nConnection: close\r\n\r\n");
    assert_eq!(status, 404);
    // The access log line carries time to first byte.
    let log = pair.edge.log_text();
    assert!(
        log.lines()
            .any(|l| l.contains("access") && l.contains("status=200") && l.contains("ttfb_ms=")),
        "{log}"
    );
}

/// Sends one keep-alive GET on `c` and reads the `len`-byte reply body.
fn get_on(c: &mut TcpStream, origin: SocketAddr, len: usize) {
    c.write_all(format!("GET http://{origin}/ HTTP/1.1\r\nHost: {origin}\r\n\r\n").as_bytes())
        .unwrap();
    let head = read_head(c);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let mut body = vec![0u8; len];
    c.read_exact(&mut body).unwrap();
}

fn wait_log(p: &Proc, what: &str, count: usize) {
    let start = Instant::now();
    while p.log_text().matches(what).count() < count {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{} did not log {what:?}:\n{}",
            p.name,
            p.log_text()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn sighup_reloads_without_dropping_connections() {
    let dir = tempfile::tempdir().unwrap();
    let edge_toml = dir.path().join("edge.toml");
    std::fs::write(&edge_toml, "drain_grace_ms = 5000\n").unwrap();
    let pair = start_pair(
        "allow_private_targets = true\n",
        &["--config", &edge_toml.to_string_lossy()],
    );
    let origin = keepalive_origin(b"hello");
    let mut c = TcpStream::connect(pair.edge_addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    get_on(&mut c, origin, 5);

    pair.edge.signal("HUP");
    wait_log(&pair.edge, "SIGHUP: configuration unchanged", 1);
    pair.remote.signal("HUP");
    wait_log(&pair.remote, "SIGHUP: configuration unchanged", 1);
    get_on(&mut c, origin, 5);

    // A change that needs a restart is named, and the running process keeps going.
    std::fs::write(&edge_toml, "drain_grace_ms = 7000\n").unwrap();
    pair.edge.signal("HUP");
    wait_log(&pair.edge, "take effect after a restart", 1);
    assert!(pair.edge.log_text().contains("drain_grace_ms"));
    // A broken file is refused with its reason; nothing changes.
    std::fs::write(&edge_toml, "drain_grace_ms = \"soon\"\n").unwrap();
    pair.edge.signal("HUP");
    wait_log(&pair.edge, "configuration does not load", 1);
    get_on(&mut c, origin, 5);
}

#[test]
fn set_initcwnd_is_idempotent_in_a_private_namespace() {
    // A network namespace of our own (unprivileged user namespace when not root).
    let script = deploy_dir().join("set-initcwnd");
    let body = format!(
        "set -e
ip link add d0 type veth peer name d1
ip link set d1 up
ip addr add 10.9.0.1/24 dev d0
ip link set d0 up
S={s}
$S --dry-run 10.9.0.2
echo dry:; ip route show 10.9.0.2
$S 10.9.0.2
echo one:; ip route show 10.9.0.2
$S 10.9.0.2
$S --initcwnd 40 10.9.0.2
echo two:; ip route show 10.9.0.2
ip route add 10.8.0.0/16 via 10.9.0.254
$S 10.8.1.1
echo via:; ip route show 10.8.1.1
",
        s = script.display()
    );
    let out = Command::new("unshare")
        .args(["-rn", "sh", "-c", &body])
        .output();
    let out = match out {
        Ok(o) if o.status.success() => o,
        other => {
            let why = format!("{other:?}");
            assert!(
                !require_tools(),
                "set-initcwnd in a network namespace failed: {why}"
            );
            eprintln!("SKIP set_initcwnd_is_idempotent_in_a_private_namespace: {why}");
            return;
        }
    };
    let text = String::from_utf8_lossy(&out.stdout);
    let section = |a: &str, b: &str| -> String {
        let i = text.find(a).unwrap() + a.len();
        let j = text[i..].find(b).map_or(text.len(), |j| i + j);
        text[i..j].to_string()
    };
    assert!(
        section("dry:", "+").trim().is_empty(),
        "dry run changed nothing: {text}"
    );
    assert!(
        section("one:", "set-initcwnd").contains("initcwnd 32 initrwnd 64"),
        "{text}"
    );
    assert!(text.contains("set-initcwnd: unchanged"), "{text}");
    assert!(
        section("two:", "+").contains("initcwnd 40 initrwnd 64"),
        "{text}"
    );
    assert!(
        section("via:", "\u{0}").contains("via 10.9.0.254 dev d0 src 10.9.0.1 initcwnd 32"),
        "{text}"
    );
}

#[test]
fn sighup_applies_a_changed_log_level() {
    let pair = start_pair("allow_private_targets = true\n", &[]);
    let dir = tempfile::tempdir().unwrap();
    let toml = dir.path().join("edge.toml");
    std::fs::write(&toml, "log_level = \"warn\"\n").unwrap();
    let edge_addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let log = dir.path().join("edge.log");
    let f = std::fs::File::create(&log).unwrap();
    let child = Command::new(edge_bin())
        .args(["--config", &toml.to_string_lossy(), "--listen"])
        .arg(edge_addr.to_string())
        .args(["--remote", &pair.remote_addr.to_string()])
        .env_remove("RUST_LOG")
        .stdout(f.try_clone().unwrap())
        .stderr(f)
        .spawn()
        .unwrap();
    let edge = Proc {
        child,
        name: "edge-proxy".into(),
        log,
        term_first: false,
    };
    wait_port(edge_addr, Duration::from_secs(10));
    let origin = keepalive_origin(b"hello");
    let mut c = TcpStream::connect(edge_addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    get_on(&mut c, origin, 5);
    // At warn, no access line (info) is written.
    std::thread::sleep(Duration::from_millis(200));
    assert!(
        !edge.log_text().contains("status=200"),
        "{}",
        edge.log_text()
    );

    std::fs::write(&toml, "log_level = \"info\"\n").unwrap();
    edge.signal("HUP");
    wait_log(&edge, "log_level \"warn\" -> \"info\" applied", 1);
    assert!(
        !edge.log_text().contains("after a restart"),
        "{}",
        edge.log_text()
    );
    get_on(&mut c, origin, 5);
    wait_log(&edge, "status=200", 1);

    // An invalid filter is refused with the reason; the level in force stays.
    std::fs::write(&toml, "log_level = \"info,=[\"\n").unwrap();
    edge.signal("HUP");
    wait_log(&edge, "configuration does not load", 1);
    assert!(edge.log_text().contains("log_level"), "{}", edge.log_text());
    get_on(&mut c, origin, 5);
    wait_log(&edge, "status=200", 2);
}
