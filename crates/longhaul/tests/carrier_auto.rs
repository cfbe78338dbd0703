//! `carrier = "auto"` on the test bed: edge and remote in their namespaces across the emulated
//! long link (100 ms, 20 Mbit/s), both with the default carrier and TLS files. Requests flow
//! over QUIC; then UDP is dropped on the long link (iptables in the remote's namespace) and
//! requests must keep flowing, over TCP, within a few seconds; then the rule goes and the edge
//! must return to QUIC (its log and `longhaul_pool_carrier`).
//!
//! Needs network namespaces and iptables: runs as root, re-runs itself in a user namespace, or
//! skips loudly (fails with LONGHAUL_REQUIRE_NETNS=1).

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{edge_bin, gen_keys, remote_bin};
use testbed::{netns_test_gate, Node, Profile, Topology};

const RTT: Duration = Duration::from_millis(100);
/// The stall bound at 100 ms (auto's keep-alive 4 × RTT = 400 ms; stall = 3 × 400 + 2 × 100 ms
/// = 1.4 s) plus a request's own round trips and scheduling slack: requests must flow again
/// within this after UDP goes dark.
const FAILOVER_BOUND: Duration = Duration::from_secs(4);
/// UDP stays dark this long: the first probes fail (back-off 1 s, then 2 s, then 4 s, each
/// jittered down to half, after a 2 s handshake bound each).
const DARK: Duration = Duration::from_secs(6);
/// Return to QUIC after the rule goes: at most the back-off reached (≤ 4 s at 6 s dark) plus
/// one handshake bound (2 s) plus the confirm period (1.4 s), with slack.
const FAILBACK_BOUND: Duration = Duration::from_secs(10);

struct Kill(Child);

impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn spawn(mut c: Command, log: &std::path::Path) -> Kill {
    let f = std::fs::File::create(log).unwrap();
    Kill(
        c.env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(f.try_clone().unwrap())
            .stderr(f)
            .spawn()
            .unwrap(),
    )
}

/// One GET through the edge from the client's namespace; the status line's code.
fn get(topo: &Topology, edge: SocketAddr, origin: SocketAddr) -> Result<u16, String> {
    topo.run_in(Node::Client, || -> Result<u16, String> {
        let mut s =
            TcpStream::connect_timeout(&edge, Duration::from_secs(2)).map_err(|e| e.to_string())?;
        s.set_read_timeout(Some(Duration::from_secs(8))).unwrap();
        write!(
            s,
            "GET http://{origin}/ HTTP/1.1\r\nHost: {origin}\r\nConnection: close\r\n\r\n"
        )
        .map_err(|e| e.to_string())?;
        let mut buf = Vec::new();
        s.read_to_end(&mut buf).map_err(|e| e.to_string())?;
        let text = String::from_utf8_lossy(&buf);
        if !text.ends_with("hello from the origin") {
            return Err(format!("short reply: {text:?}"));
        }
        text.get(9..12)
            .and_then(|c| c.parse().ok())
            .ok_or_else(|| format!("no status: {text:?}"))
    })
    .map_err(|e| e.to_string())?
}

fn scrape(topo: &Topology, metrics: SocketAddr) -> String {
    topo.run_in(Node::Client, || {
        let Ok(mut s) = TcpStream::connect_timeout(&metrics, Duration::from_secs(2)) else {
            return String::new();
        };
        let _ = write!(
            s,
            "GET /metrics HTTP/1.1\r\nHost: m\r\nConnection: close\r\n\r\n"
        );
        let mut out = String::new();
        let _ = s.read_to_string(&mut out);
        out
    })
    .unwrap_or_default()
}

fn iptables(topo: &Topology, op: &str, port: u16) {
    let out = topo
        .command(Node::Remote, "iptables")
        .args([
            op,
            "INPUT",
            "-p",
            "udp",
            "--dport",
            &port.to_string(),
            "-j",
            "DROP",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "iptables {op}: {out:?}");
}

/// Waits (polling every 100 ms) until `f` holds or `within` passes; the time it took.
fn wait_for(within: Duration, mut f: impl FnMut() -> bool) -> Option<Duration> {
    let t0 = Instant::now();
    while t0.elapsed() < within {
        if f() {
            return Some(t0.elapsed());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    None
}

#[test]
fn udp_dropped_on_the_long_link_moves_to_tcp_and_back_to_quic() {
    if !netns_test_gate("udp_dropped_on_the_long_link_moves_to_tcp_and_back_to_quic") {
        return;
    }
    let topo = Topology::up(&Profile::symmetric("auto-carrier", RTT, 20_000_000, 0.0)).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let keys = dir.path().join("keys");
    gen_keys(&keys);
    // The origin: a tiny HTTP server in the origin namespace.
    let origin: SocketAddr = (topo.addr(Node::Origin), 8000).into();
    let listener = topo
        .run_in(Node::Origin, || TcpListener::bind(origin).unwrap())
        .unwrap();
    std::thread::spawn(move || {
        for s in listener.incoming() {
            let Ok(mut s) = s else { continue };
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                let mut head = Vec::new();
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut buf) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let body = "hello from the origin";
                let _ = write!(
                    s,
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            });
        }
    });
    let port = 4443;
    let remote_addr: SocketAddr = (topo.addr(Node::Remote), port).into();
    let edge_addr: SocketAddr = (topo.addr(Node::Edge), 8080).into();
    let metrics: SocketAddr = (topo.addr(Node::Edge), 9090).into();
    let tls = keys.to_string_lossy().to_string();
    let rtt = RTT.as_millis().to_string();
    let mut r = topo.command(Node::Remote, remote_bin().to_str().unwrap());
    r.args(["--listen", &remote_addr.to_string(), "--tls-dir", &tls])
        .args(["--allow-private-targets", "--link-rtt-ms", &rtt]);
    let remote_log = dir.path().join("remote.log");
    let _remote = spawn(r, &remote_log);
    let mut e = topo.command(Node::Edge, edge_bin().to_str().unwrap());
    e.args(["--listen", &edge_addr.to_string(), "--remote"])
        .arg(remote_addr.to_string())
        .args([
            "--tls-dir",
            &tls,
            "--connections",
            "2",
            "--link-rtt-ms",
            &rtt,
        ])
        .args(["--connect-ports", "any", "--allow-client", "10.77.0.0/16"])
        .args(["--metrics-listen", &metrics.to_string()]);
    let edge_log = dir.path().join("edge.log");
    let _edge = spawn(e, &edge_log);
    let log = || std::fs::read_to_string(&edge_log).unwrap_or_default();
    let on = |c: &str| {
        let m = scrape(&topo, metrics);
        m.contains(&format!("carrier=\"{c}\"}} 1"))
    };

    // QUIC first, and requests flow.
    assert!(
        wait_for(Duration::from_secs(15), || on("quic")).is_some(),
        "edge never chose QUIC\n{}",
        log()
    );
    assert_eq!(get(&topo, edge_addr, origin), Ok(200), "{}", log());
    let r = std::fs::read_to_string(&remote_log).unwrap_or_default();
    assert!(r.contains("QUIC pool connection up"), "{r}");

    // UDP goes dark on the long link.
    iptables(&topo, "-I", port);
    let dark = Instant::now();
    let mut first_ok_after_switch = None;
    let mut failures = Vec::new();
    while dark.elapsed() < DARK {
        let t = Instant::now();
        match get(&topo, edge_addr, origin) {
            Ok(200) => {
                if first_ok_after_switch.is_none() && log().contains("to=tcp") {
                    first_ok_after_switch = Some(dark.elapsed());
                }
            }
            other => failures.push((t.duration_since(dark), other)),
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let failover =
        first_ok_after_switch.unwrap_or_else(|| panic!("no request over TCP\n{}", log()));
    eprintln!("failover: first request answered over TCP {failover:?} after UDP was dropped");
    assert!(
        failover <= FAILOVER_BOUND,
        "{failover:?} > {FAILOVER_BOUND:?}\n{}",
        log()
    );
    // Requests started after the bound all succeeded.
    let late: Vec<_> = failures
        .iter()
        .filter(|(at, _)| *at > FAILOVER_BOUND)
        .collect();
    assert!(
        late.is_empty(),
        "failed after the bound: {late:?}\n{}",
        log()
    );
    let m = scrape(&topo, metrics);
    assert!(m.contains("carrier=\"tcp\"} 1"), "{m}");
    assert!(
        m.contains("longhaul_pool_carrier_switches_total{") && m.contains("to=\"tcp\"} 1"),
        "{m}"
    );

    // UDP back: QUIC again within the probe back-off bound.
    iptables(&topo, "-D", port);
    let failback = wait_for(FAILBACK_BOUND, || on("quic"))
        .unwrap_or_else(|| panic!("not back on QUIC within {FAILBACK_BOUND:?}\n{}", log()));
    eprintln!("failback: on QUIC {failback:?} after UDP was allowed again");
    assert_eq!(get(&topo, edge_addr, origin), Ok(200), "{}", log());
    assert!(log().contains("to=quic"), "{}", log());
    eprintln!("requests failed while switching: {failures:?}");
    drop(_edge);
    drop(_remote);
    topo.down().unwrap();
}
