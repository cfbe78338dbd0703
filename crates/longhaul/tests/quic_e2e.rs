//! End to end over the QUIC carrier with real processes on loopback: keys from `gen-keys`,
//! curl → edge-proxy (`--carrier quic`) → QUIC pool → remote-proxy (`carrier = "quic"`) →
//! nginx, plain HTTP and HTTPS through CONNECT, bodies byte-exact.

mod common;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::*;

/// A remote with a QUIC listener and the keys in `keys`, on a port free when it binds
/// (`spawn_on_free_port`), plus `extra()` arguments (called again on each try, so that ports
/// in them are fresh too); its listen address.
fn spawn_quic_remote(
    keys: &Path,
    extra: impl Fn() -> Vec<String>,
    log: PathBuf,
) -> (Proc, SocketAddr) {
    let (p, port) = spawn_on_free_port(&remote_bin(), log, "remote-proxy starting", true, |port| {
        let mut args = quic_remote_args(loopback(port), keys);
        args.extend(extra());
        args
    });
    (p, loopback(port))
}

/// The remote's arguments for a QUIC listener at `addr` with the keys in `keys`.
fn quic_remote_args(addr: SocketAddr, keys: &Path) -> Vec<String> {
    vec![
        "--listen".into(),
        addr.to_string(),
        "--carrier".into(),
        "quic".into(),
        "--tls-dir".into(),
        keys.to_string_lossy().into(),
    ]
}

/// An edge with a 2-connection QUIC pool to `remote` on a port free when it binds, plus
/// `extra()` arguments (called again on each try); its listen address.
fn spawn_quic_edge(
    remote: SocketAddr,
    keys: &Path,
    extra: impl Fn() -> Vec<String>,
    log: PathBuf,
) -> (Proc, SocketAddr) {
    let (p, port) = spawn_on_free_port(&edge_bin(), log, "edge-proxy starting", false, |port| {
        let mut args = vec![
            "--listen".to_string(),
            loopback(port).to_string(),
            "--remote".into(),
            remote.to_string(),
            "--connections".into(),
            "2".into(),
            "--carrier".into(),
            "quic".into(),
            "--tls-dir".into(),
            keys.to_string_lossy().into(),
        ];
        args.extend(extra());
        args
    });
    (p, loopback(port))
}

#[test]
fn curl_through_a_quic_pool() {
    let keys = tempfile::tempdir().unwrap();
    let k = keys.path();
    gen_keys(k);
    let files = [("small", 1000), ("big", 20 * 1024 * 1024)];
    let origin = start_nginx(&files);
    let dir = tempfile::tempdir().unwrap();
    let s = |v: &str| v.to_string();
    let remote_metrics = std::cell::Cell::new(free_addr());
    let (remote, remote_addr) = spawn_quic_remote(
        k,
        || {
            remote_metrics.set(free_addr());
            vec![s("--metrics-listen"), remote_metrics.get().to_string()]
        },
        dir.path().join("remote.log"),
    );
    let remote_metrics = remote_metrics.get();
    let metrics = std::cell::Cell::new(free_addr());
    let (edge, edge_addr) = spawn_quic_edge(
        remote_addr,
        k,
        || {
            metrics.set(free_addr());
            vec![
                s("--metrics-listen"),
                metrics.get().to_string(),
                // The test origin's HTTPS port is ephemeral.
                s("--connect-ports"),
                s("any"),
            ]
        },
        dir.path().join("edge.log"),
    );
    let metrics = metrics.get();
    wait_log(&edge, "QUIC pool connection up");
    wait_log(&remote, "QUIC pool connection up");

    let out = origin.dir.path().join("out");
    for (name, size) in files {
        let url = format!("http://127.0.0.1:{}/{name}", origin.http);
        let o = curl(&[
            "-x",
            &format!("http://{edge_addr}"),
            "-o",
            out.to_str().unwrap(),
            "-w",
            "%{http_code}",
            &url,
        ]);
        assert_eq!(
            String::from_utf8_lossy(&o.stdout),
            "200",
            "{url}: {}\nedge log:\n{}",
            String::from_utf8_lossy(&o.stderr),
            edge.log_text()
        );
        let got = std::fs::read(&out).unwrap();
        assert_eq!(got.len(), size);
        assert!(
            got == std::fs::read(origin.www.join(name)).unwrap(),
            "{url}"
        );
    }
    let url = format!("https://localhost:{}/big", origin.https);
    let o = curl(&[
        "-x",
        &format!("http://{edge_addr}"),
        "--cacert",
        origin.cert.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
        "-w",
        "%{http_code}",
        &url,
    ]);
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        "200",
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(std::fs::read(&out).unwrap() == std::fs::read(origin.www.join("big")).unwrap());
    assert!(remote.log_text().contains("carrier=Quic"));
    // Per-QUIC-connection gauges: congestion window and packets sent are live values.
    let scrape = |addr: SocketAddr| -> String {
        let (status, _, body) = raw_request(
            addr,
            b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        );
        assert_eq!(status, 200);
        String::from_utf8_lossy(&body).into_owned()
    };
    let values = |body: &str, name: &str| -> Vec<f64> {
        body.lines()
            .filter(|l| l.starts_with(name))
            .filter_map(|l| l.rsplit(' ').next()?.parse().ok())
            .collect()
    };
    let body = scrape(metrics);
    let cwnd = values(&body, "longhaul_pool_connection_quic_cwnd_bytes{");
    assert_eq!(cwnd.len(), 2, "one gauge per QUIC connection:\n{body}");
    assert!(cwnd.iter().all(|&c| c > 0.0), "{body}");
    // The edge sends requests and acknowledgements (how many depends on how the
    // receiver batches them), so each of its connections has sent something.
    let sent = values(&body, "longhaul_pool_connection_quic_sent_packets{");
    assert_eq!(sent.len(), 2, "{body}");
    assert!(sent.iter().all(|&n| n > 0.0), "{body}");
    assert_eq!(
        values(&body, "longhaul_pool_connection_quic_lost_packets{").len(),
        2
    );
    assert!(values(&body, "longhaul_pool_connection_rtt_seconds{")
        .iter()
        .all(|&r| r > 0.0));
    // The remote sent the 40 MB of replies: at most ~1.5 kB per packet is well over
    // 20,000 packets, counted on its side of the pool.
    let body = scrape(remote_metrics);
    let sent = values(&body, "longhaul_pool_connection_quic_sent_packets{");
    assert_eq!(sent.len(), 2, "one gauge per QUIC connection:\n{body}");
    assert!(
        sent.iter().sum::<f64>() > 20_000.0,
        "40 MB went out as packets:\n{body}"
    );
    // Nothing listens on TCP at the remote's address: the pool really ran over UDP.
    assert!(
        std::net::TcpStream::connect_timeout(&remote_addr, Duration::from_millis(200)).is_err()
    );
}

#[test]
fn quic_carrier_without_tls_files_is_a_configuration_error() {
    let o = Command::new(edge_bin())
        .args(["--carrier", "quic", "--check-config"])
        .output()
        .unwrap();
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("needs a [pool.tls]"), "{err}");
    let o = Command::new(remote_bin())
        .args(["--carrier", "quic", "--check-config"])
        .output()
        .unwrap();
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("needs a [tls]"), "{err}");
}

#[test]
fn a_remote_restarted_after_a_crash_is_used_again_without_waiting_for_the_idle_timeout() {
    use std::io::Write;
    let keys = tempfile::tempdir().unwrap();
    gen_keys(keys.path());
    let dir = tempfile::tempdir().unwrap();
    let origin = scripted_origin(|mut s| {
        let _ = read_head(&mut s);
        let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok");
    });
    let (mut remote, remote_addr) =
        spawn_quic_remote(keys.path(), Vec::new, dir.path().join("remote.log"));
    // The restarted remote must take the same address: started once, as the service would be.
    let rargs = quic_remote_args(remote_addr, keys.path());
    // Default keep-alive (10 s) and idle timeout (30 s).
    let (edge, edge_addr) = spawn_quic_edge(
        remote_addr,
        keys.path(),
        Vec::new,
        dir.path().join("edge.log"),
    );
    wait_log(&edge, "pool connected");
    let req =
        format!("GET http://{origin}/ HTTP/1.1\r\nHost: {origin}\r\nConnection: close\r\n\r\n");
    assert_eq!(raw_request(edge_addr, req.as_bytes()).0, 200);

    // A crash: no CONNECTION_CLOSE reaches the edge. A new process on the same address with
    // the same key answers the old connections' packets with stateless resets.
    remote.signal("KILL");
    remote.wait_exit(Duration::from_secs(5));
    let _remote2 = spawn(&remote_bin(), &rargs, dir.path().join("remote2.log"));
    wait_log(&_remote2, "remote-proxy starting");
    let t0 = std::time::Instant::now();
    loop {
        let (status, head, _) = raw_request(edge_addr, req.as_bytes());
        if status == 200 {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "still failing {:?} after the restart (idle timeout 30 s): {head}\nedge log:\n{}",
            t0.elapsed(),
            edge.log_text()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}
