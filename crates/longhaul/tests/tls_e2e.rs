//! End to end over mutual TLS with real processes on loopback: keys from `gen-keys`, curl →
//! edge-proxy → TLS 1.3 pool → remote-proxy → nginx (HTTP and HTTPS through CONNECT); an
//! unauthenticated peer, a plaintext edge and a wrongly keyed edge are refused and logged; a
//! SIGHUP key rotation keeps serving.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::*;

fn remote_tls_toml(cert_dir: &Path, cas: &[&Path]) -> String {
    let ca: Vec<String> = cas
        .iter()
        .map(|d| format!("\"{}\"", d.join("ca.pem").display()))
        .collect();
    format!(
        "[tls]\ncert = \"{}\"\nkey = \"{}\"\nca = [{}]\n",
        cert_dir.join("remote.pem").display(),
        cert_dir.join("remote.key").display(),
        ca.join(", ")
    )
}

/// Waits until `log()` contains `needle`.
fn wait_log(what: &str, log: impl Fn() -> String, needle: &str) -> String {
    let start = Instant::now();
    loop {
        let l = log();
        if l.contains(needle) {
            return l;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{what}: no {needle:?} in the log:\n{l}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn auto_edge_against_a_tcp_only_remote_works_over_tcp() {
    if test_carrier() != "tcp" {
        return;
    }
    // A remote of an older release: TCP+TLS only (start_pair gives it `--carrier tcp`).
    let keys = tempfile::tempdir().unwrap();
    let k = keys.path();
    gen_keys(k);
    let origin = start_nginx(&[("small", 1000)]);
    let tls_dir = k.to_str().unwrap();
    let pair = start_pair(
        &remote_tls_toml(k, &[k]),
        &["--tls-dir", tls_dir, "--carrier", "auto"],
    );
    let url = format!("http://127.0.0.1:{}/small", origin.http);
    let proxy = format!("http://{}", pair.edge_addr);
    let o = curl(&["-x", &proxy, "-o", "/dev/null", "-w", "%{http_code}", &url]);
    assert_eq!(String::from_utf8_lossy(&o.stdout), "200");
    // Its QUIC handshake fails within the bound (2 s at least): TCP is the choice.
    let log = wait_log("edge", || pair.edge.log_text(), "carrier chosen");
    assert!(log.contains("carrier=tcp"), "{log}");
    let o = curl(&["-x", &proxy, "-o", "/dev/null", "-w", "%{http_code}", &url]);
    assert_eq!(String::from_utf8_lossy(&o.stdout), "200");
    assert!(!pair.edge.log_text().contains("carrier switch"));
}

#[test]
fn curl_through_a_mutual_tls_pool() {
    let keys = tempfile::tempdir().unwrap();
    let k = keys.path();
    gen_keys(k);
    let files = [("small", 1000), ("big", 20 * 1024 * 1024)];
    let origin = start_nginx(&files);
    let tls_dir = k.to_str().unwrap();
    let pair = start_pair(&remote_tls_toml(k, &[k]), &["--tls-dir", tls_dir]);
    let out = origin.dir.path().join("out");
    for (name, size) in files {
        let url = format!("http://127.0.0.1:{}/{name}", origin.http);
        let o = curl(&[
            "-x",
            &format!("http://{}", pair.edge_addr),
            "-o",
            out.to_str().unwrap(),
            "-w",
            "%{http_code}",
            &url,
        ]);
        assert_eq!(String::from_utf8_lossy(&o.stdout), "200", "{url}");
        let got = std::fs::read(&out).unwrap();
        assert_eq!(got.len(), size);
        assert!(
            got == std::fs::read(origin.www.join(name)).unwrap(),
            "{url}"
        );
    }
    // HTTPS through a CONNECT tunnel inside the TLS pool.
    let url = format!("https://localhost:{}/big", origin.https);
    let o = curl(&[
        "-x",
        &format!("http://{}", pair.edge_addr),
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
    assert!(pair.edge.log_text().contains("tls=true"));
    assert!(pair.remote.log_text().contains("tls=true"));

    // An unauthenticated peer (TLS without a client certificate) is refused with an alert,
    // and the remote logs the peer and the reason.
    let o = Command::new("timeout")
        .args(["10", "openssl", "s_client", "-tls1_3", "-connect"])
        .arg(pair.remote_addr.to_string())
        .args([
            "-servername",
            "longhaul-remote",
            "-alpn",
            "longhaul/1",
            "-CAfile",
        ])
        .arg(k.join("ca.pem"))
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    // The handshake may "succeed" from the client's view (TLS 1.3 clients finish first);
    // the server's alert follows.
    let text = String::from_utf8_lossy(&o.stdout).to_string() + &String::from_utf8_lossy(&o.stderr);
    assert!(text.contains("CONNECTED"), "{text}");
    let log = wait_log(
        "remote",
        || pair.remote.log_text(),
        "peer sent no certificates",
    );
    let line = log
        .lines()
        .find(|l| l.contains("peer sent no certificates"))
        .unwrap();
    assert!(
        line.contains("WARN") && line.contains("pool connection rejected"),
        "{line}"
    );
    assert!(line.contains("peer=127.0.0.1:"), "{line}");

    // A plaintext peer speaking the mux directly gets a TLS alert or a close, never a HELLO.
    let mut s = TcpStream::connect(pair.remote_addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"\x00\x00\x10\x01not TLS at all\r\n").unwrap();
    let mut b = [0u8; 64];
    let n = s.read(&mut b).unwrap_or(0);
    assert!(n == 0 || b[0] == 0x15, "{:?}", &b[..n]);

    // An edge keyed by another deployment's CA (but trusting the right one for the remote)
    // gets no pool connection: its clients get 502 and both sides log why.
    let other = tempfile::tempdir().unwrap();
    gen_keys(other.path());
    let bad_cfg = other.path().join("edge.toml");
    std::fs::write(&bad_cfg, pair_edge_toml(other.path(), &[k])).unwrap();
    let eport = free_port();
    let edge_addr: SocketAddr = format!("127.0.0.1:{eport}").parse().unwrap();
    let bad_edge = spawn(
        &edge_bin(),
        &[
            "--listen".into(),
            edge_addr.to_string(),
            "--remote".into(),
            pair.remote_addr.to_string(),
            "--connections".into(),
            "1".into(),
            "--config".into(),
            bad_cfg.to_string_lossy().into(),
        ],
        pair.dir.path().join("bad-edge.log"),
    );
    wait_port(edge_addr, Duration::from_secs(10));
    let (st, head, _) = raw_request(
        edge_addr,
        format!(
            "GET http://127.0.0.1:{0}/small HTTP/1.1\r\nHost: 127.0.0.1:{0}\r\nConnection: close\r\n\r\n",
            origin.http
        )
        .as_bytes(),
    );
    assert_eq!(st, 502, "{head}");
    wait_log(
        "bad edge",
        || bad_edge.log_text(),
        "received fatal alert: UnknownCA",
    );
    wait_log(
        "remote",
        || pair.remote.log_text(),
        "invalid peer certificate: UnknownIssuer",
    );
    // The good pair still serves.
    let (st, _, body) = raw_request(
        pair.edge_addr,
        format!(
            "GET http://127.0.0.1:{0}/small HTTP/1.1\r\nHost: 127.0.0.1:{0}\r\nConnection: close\r\n\r\n",
            origin.http
        )
        .as_bytes(),
    );
    assert_eq!((st, body.len()), (200, 1000));
}

#[test]
fn sighup_rotation_to_a_new_ca_keeps_serving() {
    let old = tempfile::tempdir().unwrap();
    let new = tempfile::tempdir().unwrap();
    gen_keys(old.path());
    gen_keys(new.path());
    let origin = start_nginx(&[("f", 5000)]);
    // The remote's live key directory: old certificate, trusting old and new CA.
    let live = tempfile::tempdir().unwrap();
    let lp = live.path();
    for f in ["remote.pem", "remote.key"] {
        std::fs::copy(old.path().join(f), lp.join(f)).unwrap();
    }
    let mut toml = remote_tls_toml(lp, &[old.path(), new.path()]);
    // The edge: new certificate, trusting both CAs as well.
    let edge_toml = pair_edge_toml(new.path(), &[old.path(), new.path()]);
    let edge_cfg = lp.join("edge.toml");
    std::fs::write(&edge_cfg, edge_toml).unwrap();
    toml.push('\n');
    let mut pair = start_pair(&toml, &["--config", edge_cfg.to_str().unwrap()]);
    let req = format!(
        "GET http://127.0.0.1:{0}/f HTTP/1.1\r\nHost: 127.0.0.1:{0}\r\nConnection: close\r\n\r\n",
        origin.http
    );
    assert_eq!(raw_request(pair.edge_addr, req.as_bytes()).0, 200);
    // The remote moves to its new certificate: replace the files, SIGHUP.
    for f in ["remote.pem", "remote.key"] {
        std::fs::copy(new.path().join(f), lp.join(f)).unwrap();
    }
    pair.remote.signal("HUP");
    wait_log(
        "remote",
        || pair.remote.log_text(),
        "SIGHUP: TLS files reloaded",
    );
    // Established pool connections keep serving through the switch.
    for _ in 0..20 {
        let (st, _, body) = raw_request(pair.edge_addr, req.as_bytes());
        assert_eq!((st, body.len()), (200, 5000));
    }
    // New pool connections get the new certificate: an edge started now with the new keys
    // serves; one that trusts only the old CA cannot connect any more.
    let start_edge = |cfg: &Path, name: &str| {
        let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let p = spawn(
            &edge_bin(),
            &[
                "--listen".into(),
                addr.to_string(),
                "--remote".into(),
                pair.remote_addr.to_string(),
                "--connections".into(),
                "1".into(),
                "--config".into(),
                cfg.to_string_lossy().into(),
            ],
            pair.dir.path().join(format!("{name}.log")),
        );
        wait_port(addr, Duration::from_secs(10));
        (p, addr)
    };
    let (_fresh, fresh_addr) = start_edge(&edge_cfg, "fresh-edge");
    let t0 = Instant::now();
    loop {
        let (st, _, body) = raw_request(fresh_addr, req.as_bytes());
        if st == 200 {
            assert_eq!(body.len(), 5000);
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(10), "fresh edge: {st}");
        std::thread::sleep(Duration::from_millis(50));
    }
    let stale_cfg = lp.join("stale-edge.toml");
    std::fs::write(&stale_cfg, pair_edge_toml(old.path(), &[old.path()])).unwrap();
    let (stale, stale_addr) = start_edge(&stale_cfg, "stale-edge");
    assert_eq!(raw_request(stale_addr, req.as_bytes()).0, 502);
    wait_log("stale edge", || stale.log_text(), "UnknownIssuer");
    assert_eq!(
        pair.remote.child.try_wait().unwrap(),
        None,
        "remote exited on SIGHUP"
    );
}

/// An edge configuration file with `[pool.tls]` from `cert_dir`, trusting `cas`.
fn pair_edge_toml(cert_dir: &Path, cas: &[&Path]) -> String {
    let ca: Vec<String> = cas
        .iter()
        .map(|d| format!("\"{}\"", d.join("ca.pem").display()))
        .collect();
    format!(
        "[pool]\nready_timeout_ms = 1000\n[pool.tls]\ncert = \"{}\"\nkey = \"{}\"\nca = [{}]\nserver_name = \"longhaul-remote\"\n",
        cert_dir.join("edge.pem").display(),
        cert_dir.join("edge.key").display(),
        ca.join(", ")
    )
}
