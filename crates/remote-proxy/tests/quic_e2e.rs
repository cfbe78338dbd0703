//! End to end over the QUIC carrier with real processes on loopback: keys from `gen-keys`,
//! curl → edge-proxy (`--carrier quic`) → QUIC pool → remote-proxy (`carrier = "quic"`) →
//! nginx, plain HTTP and HTTPS through CONNECT, bodies byte-exact.

mod common;

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::*;

fn gen_keys(dir: &Path) {
    let o = Command::new(edge_bin())
        .args(["gen-keys", "--out"])
        .arg(dir)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

fn wait_log(p: &Proc, needle: &str) {
    let start = Instant::now();
    while !p.log_text().contains(needle) {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "no {needle:?} in the log:\n{}",
            p.log_text()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn curl_through_a_quic_pool() {
    let keys = tempfile::tempdir().unwrap();
    let k = keys.path();
    gen_keys(k);
    let files = [("small", 1000), ("big", 20 * 1024 * 1024)];
    let origin = start_nginx(&files);
    let dir = tempfile::tempdir().unwrap();
    // A UDP port: the remote's QUIC listener.
    let rport = std::net::UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let remote_addr: SocketAddr = format!("127.0.0.1:{rport}").parse().unwrap();
    let toml = dir.path().join("remote.toml");
    std::fs::write(&toml, "carrier = \"quic\"\n").unwrap();
    let s = |v: &str| v.to_string();
    let remote = spawn(
        &remote_bin(),
        &[
            s("--listen"),
            remote_addr.to_string(),
            s("--config"),
            toml.to_string_lossy().into(),
            s("--tls-dir"),
            k.to_string_lossy().into(),
        ],
        dir.path().join("remote.log"),
    );
    wait_log(&remote, "remote-proxy starting");
    let edge_addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let edge = spawn(
        &edge_bin(),
        &[
            s("--listen"),
            edge_addr.to_string(),
            s("--remote"),
            remote_addr.to_string(),
            s("--connections"),
            s("2"),
            s("--carrier"),
            s("quic"),
            s("--tls-dir"),
            k.to_string_lossy().into(),
        ],
        dir.path().join("edge.log"),
    );
    wait_port(edge_addr, Duration::from_secs(10));
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
