//! The HTTPS proxy endpoint end to end with real processes on loopback: curl reaches the edge
//! over TLS (`--proxy https://`) and fetches an `http://` object and an `https://` object
//! (CONNECT) through the pair over HTTP/1.1.

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use common::*;

/// A pair whose edge also serves the HTTPS proxy endpoint, with the origin's certificate
/// (issued for `localhost` and 127.0.0.1) as the endpoint's.
fn https_pair(origin: &Nginx) -> (Pair, SocketAddr) {
    let port = free_port();
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let cert = origin.cert.to_str().unwrap().to_string();
    let key = origin.dir.path().join("key.pem");
    let pair = start_pair(
        "",
        &[
            "--https-proxy",
            &addr.to_string(),
            "--https-cert",
            &cert,
            "--https-key",
            key.to_str().unwrap(),
        ],
    );
    wait_port(addr, Duration::from_secs(10));
    (pair, addr)
}

#[test]
fn curl_through_the_https_endpoint_over_http1() {
    let files = [("small", 1000), ("big", 3 * 1024 * 1024)];
    let origin = start_nginx(&files);
    let (_pair, https) = https_pair(&origin);
    let proxy = format!("https://localhost:{}", https.port());
    let ca = origin.cert.to_str().unwrap();
    let out = origin.dir.path().join("out");
    for (name, size) in files {
        for url in [
            format!("http://127.0.0.1:{}/{name}", origin.http),
            format!("https://localhost:{}/{name}", origin.https),
        ] {
            let o = curl(&[
                "--proxy",
                &proxy,
                "--proxy-cacert",
                ca,
                "--cacert",
                ca,
                "-o",
                out.to_str().unwrap(),
                "-w",
                "%{http_code} %{http_version}",
                &url,
            ]);
            assert_eq!(
                String::from_utf8_lossy(&o.stdout),
                "200 1.1",
                "{url}: {}",
                String::from_utf8_lossy(&o.stderr)
            );
            let got = std::fs::read(&out).unwrap();
            assert_eq!(got.len(), size, "{url}");
            assert!(
                got == std::fs::read(origin.www.join(name)).unwrap(),
                "{url}"
            );
        }
    }
}

#[test]
fn a_client_that_does_not_verify_the_proxy_certificate_is_refused_by_curl() {
    // The endpoint's certificate is not trusted without --proxy-cacert: curl refuses to use
    // the proxy (proves the connection really is TLS with the configured certificate).
    let origin = start_nginx(&[("small", 10)]);
    let (_pair, https) = https_pair(&origin);
    let proxy = format!("https://localhost:{}", https.port());
    let url = format!("http://127.0.0.1:{}/small", origin.http);
    let o = curl(&[
        "--proxy",
        &proxy,
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
        &url,
    ]);
    assert!(!o.status.success());
    assert_eq!(String::from_utf8_lossy(&o.stdout), "000");
}
