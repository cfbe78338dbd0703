//! End to end with real processes on loopback: curl → edge-proxy → pool → remote-proxy →
//! nginx (HTTP, and HTTPS through CONNECT), error statuses, a pool connection dying mid-reply,
//! 200 concurrent clients, and SIGTERM drain.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::*;

const MB: usize = 1024 * 1024;

fn proxy_url(p: &Pair) -> String {
    format!("http://{}", p.edge_addr)
}

#[test]
fn curl_http_and_https_bodies_are_byte_exact() {
    let files = [
        ("zero", 0),
        ("one", 1),
        ("odd", 65_537),
        ("mb", MB),
        ("hundred", 100 * MB),
    ];
    let origin = start_nginx(&files);
    let pair = start_pair("", &[]);
    let proxy = proxy_url(&pair);
    let out = origin.dir.path().join("out");
    for (name, size) in files {
        let url = format!("http://127.0.0.1:{}/{name}", origin.http);
        let o = curl(&[
            "-x",
            &proxy,
            "-o",
            out.to_str().unwrap(),
            "-w",
            "%{http_code}",
            &url,
        ]);
        assert!(
            o.status.success(),
            "{url}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        assert_eq!(String::from_utf8_lossy(&o.stdout), "200");
        let got = std::fs::read(&out).unwrap();
        assert_eq!(got.len(), size, "{url}");
        assert!(
            got == std::fs::read(origin.www.join(name)).unwrap(),
            "{url}: bytes differ"
        );
    }
    // HTTPS through CONNECT (optimistic by default), the name resolved on the far side.
    for (name, size) in [("zero", 0), ("odd", 65_537), ("hundred", 100 * MB)] {
        let url = format!("https://localhost:{}/{name}", origin.https);
        let o = curl(&[
            "-x",
            &proxy,
            "--cacert",
            origin.cert.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
            "-w",
            "%{http_code}",
            &url,
        ]);
        assert!(
            o.status.success(),
            "{url}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let got = std::fs::read(&out).unwrap();
        assert_eq!(got.len(), size, "{url}");
        assert!(
            got == std::fs::read(origin.www.join(name)).unwrap(),
            "{url}: bytes differ"
        );
    }
    // Uploads: fixed length and chunked (from stdin), then read back.
    let up = pair.dir.path().join("up.bin");
    std::fs::write(&up, pattern(3 * MB + 11, 99)).unwrap();
    let url = format!("http://127.0.0.1:{}/up/fixed", origin.http);
    let o = curl(&[
        "-x",
        &proxy,
        "-T",
        up.to_str().unwrap(),
        "-w",
        "%{http_code}",
        &url,
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(
        std::fs::read(origin.www.join("up/fixed")).unwrap(),
        pattern(3 * MB + 11, 99)
    );
    let url = format!("http://127.0.0.1:{}/up/chunked", origin.http);
    let o = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!(
            "curl -sS -x {proxy} -T - -H 'Expect: 100-continue' {url} < {}",
            up.display()
        ))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(
        std::fs::read(origin.www.join("up/chunked")).unwrap(),
        pattern(3 * MB + 11, 99)
    );
    // HEAD and keep-alive: two URLs on one curl connection.
    let a = format!("http://127.0.0.1:{}/odd", origin.http);
    let o = curl(&["-x", &proxy, "-I", &a]);
    let head = String::from_utf8_lossy(&o.stdout);
    let lower = head.to_ascii_lowercase();
    assert!(
        lower.contains("200 ok") && lower.contains("content-length: 65537"),
        "{head}"
    );
    let o = curl(&[
        "-x",
        &proxy,
        "-v",
        "-o",
        "/dev/null",
        "-o",
        "/dev/null",
        &a,
        &a,
    ]);
    let verbose = String::from_utf8_lossy(&o.stderr);
    assert!(
        verbose.contains("Re-using existing connection"),
        "{verbose}"
    );
    // Separate client connections reuse the remote's pooled keep-alive origin connection.
    let one = format!("http://127.0.0.1:{}/one", origin.http);
    for _ in 0..3 {
        let o = curl(&["-x", &proxy, "-o", "/dev/null", &one]);
        assert!(o.status.success());
    }
    let conns = origin.connections_for("/one");
    assert!(conns.len() >= 4, "{conns:?}");
    // Reuse, not a fresh origin connection per request. Not all three on one: the pooled
    // connection goes back to the pool when the reply's end is processed, which may come a
    // moment after curl has its last byte and the next request arrives.
    let mut last3 = conns[conns.len() - 3..].to_vec();
    last3.sort_unstable();
    last3.dedup();
    assert!(last3.len() < 3, "origin connections not reused: {conns:?}");
    // After-connect CONNECT mode.
    drop(pair);
    let pair = start_pair("", &["--connect-reply", "after-connect"]);
    let url = format!("https://localhost:{}/odd", origin.https);
    let o = curl(&[
        "-x",
        &proxy_url(&pair),
        "--cacert",
        origin.cert.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
        &url,
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(
        std::fs::read(&out).unwrap(),
        std::fs::read(origin.www.join("odd")).unwrap()
    );
    let closed = free_port();
    let o = curl(&[
        "-x",
        &proxy_url(&pair),
        &format!("https://127.0.0.1:{closed}/"),
    ]);
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("502"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

#[test]
fn two_hundred_concurrent_clients() {
    let origin = start_nginx(&[("obj", 50_000)]);
    let pair = start_pair("", &[]);
    let want = std::fs::read(origin.www.join("obj")).unwrap();
    let req = format!(
        "GET http://127.0.0.1:{}/obj HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n",
        origin.http
    );
    let start = Instant::now();
    let handles: Vec<_> = (0..200)
        .map(|_| {
            let req = req.clone();
            let addr = pair.edge_addr;
            std::thread::spawn(move || raw_request(addr, req.as_bytes()))
        })
        .collect();
    for h in handles {
        let (status, _, body) = h.join().unwrap();
        assert_eq!(status, 200);
        assert!(body == want, "body differs");
    }
    eprintln!("200 concurrent clients served in {:?}", start.elapsed());
}

fn tag(head: &str) -> &str {
    head.lines()
        .find_map(|l| {
            l.split_once(':')
                .filter(|(k, _)| k.eq_ignore_ascii_case("x-longhaul-error"))
                .map(|(_, v)| v.trim())
        })
        .unwrap_or("")
}

#[test]
fn errors_map_to_statuses_with_reasons() {
    let silent = scripted_origin(|mut s| {
        let _ = read_head(&mut s);
        std::thread::sleep(Duration::from_secs(10));
    });
    let pair = start_pair("origin_timeout_ms = 1000\n", &[]);
    let e = pair.edge_addr;
    let (st, head, body) = raw_request(e, b"GET /path HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!((st, tag(&head)), (400, "bad-request"));
    assert!(String::from_utf8_lossy(&body).contains("absolute"));
    let big = format!(
        "GET http://{silent}/ HTTP/1.1\r\nHost: {silent}\r\nX-Big: {}\r\n\r\n",
        "a".repeat(70_000)
    );
    let (st, head, _) = raw_request(e, big.as_bytes());
    assert_eq!((st, tag(&head)), (431, "header-too-large"));
    // RFC 9112 §3: a request line longer than the server accepts is answered 414.
    let long = format!(
        "GET http://{silent}/{} HTTP/1.1\r\nHost: {silent}\r\n\r\n",
        "a".repeat(70_000)
    );
    let (st, head, _) = raw_request(e, long.as_bytes());
    assert_eq!((st, tag(&head)), (414, "uri-too-long"));
    let name = format!("{}.example", "a".repeat(64));
    let dns = format!("GET http://{name}/ HTTP/1.1\r\nHost: {name}\r\n\r\n");
    let (st, head, body) = raw_request(e, dns.as_bytes());
    assert_eq!(
        (st, tag(&head)),
        (502, "dns-failed"),
        "{}",
        String::from_utf8_lossy(&body)
    );
    let closed = free_port();
    let (st, head, body) = raw_request(
        e,
        format!("GET http://127.0.0.1:{closed}/ HTTP/1.1\r\nHost: 127.0.0.1:{closed}\r\n\r\n")
            .as_bytes(),
    );
    assert_eq!((st, tag(&head)), (502, "connect-failed"));
    assert!(String::from_utf8_lossy(&body).contains("refused"));
    let t0 = Instant::now();
    let (st, head, _) = raw_request(
        e,
        format!("GET http://{silent}/ HTTP/1.1\r\nHost: {silent}\r\n\r\n").as_bytes(),
    );
    assert_eq!((st, tag(&head)), (504, "origin-timeout"));
    assert!(t0.elapsed() < Duration::from_secs(8));
    // Every request got an access-log line on the edge.
    let log = pair.edge.log_text();
    for t in [
        "bad-request",
        "header-too-large",
        "uri-too-long",
        "dns-failed",
        "connect-failed",
        "origin-timeout",
    ] {
        assert!(
            log.contains(&format!("outcome=\"{t}\"")),
            "no access line for {t}:\n{log}"
        );
    }

    // Production remote: loopback origins are refused (403), and so is a name resolving there.
    let prod = start_pair("mode = \"production\"\n", &[]);
    let (st, head, body) = raw_request(
        prod.edge_addr,
        format!("GET http://{silent}/ HTTP/1.1\r\nHost: {silent}\r\n\r\n").as_bytes(),
    );
    assert_eq!(
        (st, tag(&head)),
        (403, "forbidden-target"),
        "{}",
        String::from_utf8_lossy(&body)
    );
    let (st, _, _) = raw_request(
        prod.edge_addr,
        b"GET http://localhost:9/ HTTP/1.1\r\nHost: localhost:9\r\n\r\n",
    );
    assert_eq!(st, 403);
    let (st, _, _) = raw_request(
        prod.edge_addr,
        b"CONNECT localhost:9 HTTP/1.1\r\nHost: localhost:9\r\n\r\n",
    );
    assert_eq!(st, 200, "optimistic CONNECT answers at once");

    // A client outside the allowed networks.
    let closed_edge = start_pair("", &["--allow-client", "10.0.0.0/8"]);
    let (st, head, _) = raw_request(
        closed_edge.edge_addr,
        b"GET http://example.com/ HTTP/1.1\r\nHost: example.com\r\n\r\n",
    );
    assert_eq!((st, tag(&head)), (403, "forbidden-client"));
}

/// Sends a POST with a `len`-byte body, `pieces` parts of it `gap` apart, then reads the reply.
fn trickled_post(
    edge: std::net::SocketAddr,
    url: &str,
    len: usize,
    pieces: usize,
    gap: Duration,
) -> (u16, String) {
    let mut s = TcpStream::connect(edge).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let host = url.split('/').nth(2).unwrap_or_default();
    s.write_all(
        format!(
            "POST {url} HTTP/1.1\r\nHost: {host}\r\nContent-Length: {len}\r\nConnection: close\r\n\r\n"
        )
        .as_bytes(),
    )
    .unwrap();
    for _ in 0..pieces {
        std::thread::sleep(gap);
        if s.write_all(&vec![b'u'; len / pieces.max(1)]).is_err() {
            break;
        }
    }
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    let text = String::from_utf8_lossy(&out).to_string();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    (status, text)
}

#[test]
fn the_origin_timeout_starts_when_the_upload_is_complete() {
    // An origin that reads the whole body and then answers with its length.
    let reader = scripted_origin(|mut s| {
        let head = read_head(&mut s);
        let len: usize = head
            .lines()
            .find_map(|l| {
                l.to_ascii_lowercase()
                    .strip_prefix("content-length:")
                    .map(|v| v.trim().parse().unwrap())
            })
            .unwrap_or(0);
        let mut body = vec![0u8; len];
        let _ = s.read_exact(&mut body);
        let reply = format!("{len}");
        let _ = s.write_all(
            format!(
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{reply}",
                reply.len()
            )
            .as_bytes(),
        );
    });
    let pair = start_pair("origin_timeout_ms = 1000\n", &[]);
    // 3 s of upload, in pieces 250 ms apart: longer than the origin timeout, never stalled.
    let (st, text) = trickled_post(
        pair.edge_addr,
        &format!("http://{reader}/up"),
        1200,
        12,
        Duration::from_millis(250),
    );
    assert_eq!(st, 200, "{text}");
    assert!(text.ends_with("1200"), "{text}");
    // An upload that stops half-way is bounded by the same timeout: 504 with the reason.
    let t0 = Instant::now();
    let (st, text) = trickled_post(
        pair.edge_addr,
        &format!("http://{reader}/stall"),
        1200,
        0,
        Duration::ZERO,
    );
    assert_eq!((st, tag(&text)), (504, "origin-timeout"), "{text}");
    assert!(text.contains("made no progress"), "{text}");
    assert!(t0.elapsed() < Duration::from_secs(8), "{:?}", t0.elapsed());
}

#[test]
fn pool_connection_lost_mid_reply_ends_the_client_connection() {
    // The origin promises 10 MB, sends 100 KB, then stalls.
    let origin = scripted_origin(|mut s| {
        let _ = read_head(&mut s);
        let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 10485760\r\n\r\n");
        let _ = s.write_all(&pattern(100_000, 1));
        std::thread::sleep(Duration::from_secs(20));
    });
    let mut pair = start_pair("", &[]);
    let mut c = TcpStream::connect(pair.edge_addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
    c.write_all(format!("GET http://{origin}/ HTTP/1.1\r\nHost: {origin}\r\n\r\n").as_bytes())
        .unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 65536];
    while got.len() < 50_000 {
        let n = c.read(&mut buf).unwrap();
        assert!(n > 0);
        got.extend_from_slice(&buf[..n]);
    }
    pair.remote.signal("KILL");
    pair.remote.wait_exit(Duration::from_secs(5));
    let t0 = Instant::now();
    let end = loop {
        match c.read(&mut buf) {
            Ok(0) => break "eof",
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => panic!("client left hanging"),
            Err(_) => break "reset",
        }
    };
    assert!(t0.elapsed() < Duration::from_secs(14));
    assert!(got.len() < 10 * MB, "reply looked complete");
    assert_eq!(
        end, "reset",
        "the cut reply must end with a reset, not a clean close"
    );
}

#[test]
fn sigterm_drains_in_flight_replies_and_refuses_new_connections() {
    // The origin sends 20 pieces over ~1.5 s.
    let origin = scripted_origin(|mut s| {
        let _ = read_head(&mut s);
        let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 20000\r\n\r\n");
        for i in 0..20 {
            let _ = s.write_all(&pattern(1000, i));
            std::thread::sleep(Duration::from_millis(75));
        }
    });
    let mut pair = start_pair("", &[]);
    let mut c = TcpStream::connect(pair.edge_addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    c.write_all(format!("GET http://{origin}/ HTTP/1.1\r\nHost: {origin}\r\n\r\n").as_bytes())
        .unwrap();
    let mut first = [0u8; 64];
    let n = c.read(&mut first).unwrap();
    assert!(n > 0);
    pair.edge.signal("TERM");
    std::thread::sleep(Duration::from_millis(200));
    let refused = TcpStream::connect_timeout(&pair.edge_addr, Duration::from_secs(1));
    assert!(
        refused.is_err(),
        "new connections must be refused while draining"
    );
    let mut rest = Vec::new();
    c.read_to_end(&mut rest).unwrap();
    let mut all = first[..n].to_vec();
    all.extend_from_slice(&rest);
    // read_to_end returned: the edge closed the connection after the reply.
    let body_start = all.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    assert_eq!(all.len() - body_start, 20_000, "in-flight reply finished");
    let st = pair
        .edge
        .wait_exit(Duration::from_secs(10))
        .expect("edge exits after draining");
    assert!(st.success());
    // The remote drains on SIGTERM as well.
    pair.remote.signal("TERM");
    let st = pair
        .remote
        .wait_exit(Duration::from_secs(15))
        .expect("remote exits");
    assert!(st.success());
}

#[test]
fn check_config_accepts_examples_and_rejects_mistakes() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    // The examples' key files live in /etc/longhaul/tls; check them with freshly made ones.
    let keys = tempfile::tempdir().unwrap();
    let o = std::process::Command::new(remote_bin())
        .args(["gen-keys", "--out"])
        .arg(keys.path())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    for (bin, file) in [
        (edge_bin(), "deploy/config/edge.toml"),
        (remote_bin(), "deploy/config/remote.toml"),
    ] {
        let o = std::process::Command::new(&bin)
            .arg("--config")
            .arg(root.join(file))
            .arg("--check-config")
            .arg("--tls-dir")
            .arg(keys.path())
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "{file}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "listen = \"127.0.0.1:3128\"\nconections = 3\n").unwrap();
    let o = std::process::Command::new(edge_bin())
        .arg("--config")
        .arg(&bad)
        .arg("--check-config")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("unknown field `conections`"));
    std::fs::write(&bad, "origin_timeout_ms = 0\n").unwrap();
    let o = std::process::Command::new(remote_bin())
        .arg("--config")
        .arg(&bad)
        .arg("--check-config")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("origin_timeout_ms"));
}

/// Local ports of the edge's pool connections to `remote`.
fn pool_ports(remote: std::net::SocketAddr) -> Vec<u16> {
    let o = std::process::Command::new("ss")
        .args(["-Htn", "state", "established"])
        .arg(format!("( dport = :{} )", remote.port()))
        .output()
        .unwrap();
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().nth(2))
        .filter_map(|a| a.rsplit_once(':').and_then(|(_, p)| p.parse().ok()))
        .collect()
}

/// Destroys the edge-side socket of one pool connection (`ss -K`, needs CAP_NET_ADMIN).
fn kill_pool_connection(remote: std::net::SocketAddr, port: u16) -> bool {
    std::process::Command::new("ss")
        .args(["-K", "-tn", "state", "established"])
        .arg(format!(
            "( dport = :{} and sport = :{port} )",
            remote.port()
        ))
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

#[test]
fn idempotent_request_is_retried_when_its_pool_connection_dies() {
    if test_carrier() != "tcp" {
        // `ss -K` destroys TCP sockets only; nothing outside the process kills one QUIC
        // connection (and under auto the request may ride QUIC). The QUIC retry path is tested
        // in pool/tests/quic.rs (server_loss_resets_streams_retryably_and_the_pool_reconnects),
        // auto's in pool/tests/auto.rs and tests/carrier_auto.rs.
        eprintln!("not run over QUIC or auto: it kills a pool connection with ss -K (TCP only)");
        return;
    }
    let is_root = std::process::Command::new("id")
        .arg("-u")
        .output()
        .map(|o| o.stdout.starts_with(b"0\n"))
        .unwrap_or(false);
    if !is_root {
        if std::env::var("LONGHAUL_REQUIRE_NETNS").as_deref() == Ok("1") {
            panic!("root is required to destroy a pool connection with ss -K");
        }
        eprintln!(
            "SKIP idempotent_request_is_retried_when_its_pool_connection_dies: needs root (ss -K)"
        );
        return;
    }
    // The first request stalls (no reply byte); later ones are answered.
    let seen = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let seen2 = seen.clone();
    let origin = scripted_origin(move |mut s| {
        let _ = read_head(&mut s);
        if seen2.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0 {
            std::thread::sleep(Duration::from_secs(20));
            return;
        }
        let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 7\r\n\r\nretried");
    });
    let pair = start_pair("", &[]);
    let client = {
        let addr = pair.edge_addr;
        std::thread::spawn(move || {
            raw_request(
                addr,
                format!(
                    "GET http://{origin}/ HTTP/1.1\r\nHost: {origin}\r\nConnection: close\r\n\r\n"
                )
                .as_bytes(),
            )
        })
    };
    let t0 = Instant::now();
    while seen.load(std::sync::atomic::Ordering::SeqCst) == 0 {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "request never reached the origin"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    // Kill the pool connections one at a time, letting the pool re-dial in between, until the
    // one carrying the request is gone and the request was retried on another. The retry is
    // the only one: once it has started no further connection is killed (on a busy host the
    // retried reply can take longer than one pause, and killing its connection too would
    // rightly end in 502). After a kill the edge's log line of the retry can lag the retry
    // itself on a busy host, so the next kill waits until the line has had time to appear.
    let retrying = || pair.edge.log_text().contains("retrying idempotent request");
    let t0 = Instant::now();
    while !client.is_finished() {
        assert!(t0.elapsed() < Duration::from_secs(15), "no retry happened");
        let ports = pool_ports(pair.remote_addr);
        if !retrying() && ports.len() >= 2 {
            assert!(
                kill_pool_connection(pair.remote_addr, ports[0]),
                "ss -K failed"
            );
            let killed = Instant::now();
            while killed.elapsed() < Duration::from_secs(1) && !retrying() && !client.is_finished()
            {
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    let (status, _, body) = client.join().unwrap();
    assert_eq!((status, body.as_slice()), (200, &b"retried"[..]));
    assert!(pair.edge.log_text().contains("retrying idempotent request"));
}

/// The value of `key=` in a log line (text format), as a number.
fn field(line: &str, key: &str) -> Option<u64> {
    let at = line.find(&format!(" {key}="))? + key.len() + 2;
    line[at..]
        .split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

/// The first line of the remote's log that `remote` accepts and of the edge's that `edge`
/// accepts, waiting up to 10 s for both (`what` names them in the failure).
fn access_records(
    pair: &Pair,
    what: &str,
    remote: impl Fn(&str) -> bool,
    edge: impl Fn(&str) -> bool,
) -> (String, String) {
    let deadline = Instant::now() + Duration::from_secs(10);
    let first =
        |log: String, f: &dyn Fn(&str) -> bool| log.lines().find(|l| f(l)).map(str::to_owned);
    loop {
        if let (Some(r), Some(e)) = (
            first(pair.remote.log_text(), &remote),
            first(pair.edge.log_text(), &edge),
        ) {
            return (r, e);
        }
        assert!(
            Instant::now() < deadline,
            "no {what} records\nremote:\n{}\nedge:\n{}",
            pair.remote.log_text(),
            pair.edge.log_text()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_reply_cut_part_way_is_logged_with_its_status_and_the_bytes_sent() {
    // The origin promises 10 MB, sends 100 KB, then closes.
    let origin = scripted_origin(|mut s| {
        let _ = read_head(&mut s);
        let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 10485760\r\n\r\n");
        let _ = s.write_all(&pattern(100_000, 1));
    });
    let pair = start_pair("", &[]);
    let mut c = TcpStream::connect(pair.edge_addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    c.write_all(format!("GET http://{origin}/ HTTP/1.1\r\nHost: {origin}\r\n\r\n").as_bytes())
        .unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 65536];
    while let Ok(n @ 1..) = c.read(&mut buf) {
        got.extend_from_slice(&buf[..n]);
    }
    assert!(got.len() < 10 * MB, "reply looked complete");
    let head_end = got.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    assert!(
        got.starts_with(b"HTTP/1.1 200"),
        "{:?}",
        String::from_utf8_lossy(&got[..head_end])
    );
    let body = got.len() - head_end;
    // Nothing the origin gave is lost to the cut: the remote finishes the stream after the
    // bytes it wrote rather than resetting it (a reset lets the edge discard unread bytes).
    assert_eq!(
        &got[head_end..],
        &pattern(100_000, 1)[..],
        "the origin's bytes were lost"
    );
    let cut = |l: &str| l.contains("reply-cut");
    let (remote, edge) = access_records(&pair, "reply-cut", cut, cut);
    // The remote sent the head and every byte the origin gave it.
    assert_eq!(field(&remote, "status"), Some(200), "{remote}");
    assert_eq!(field(&remote, "bytes_down"), Some(100_000), "{remote}");
    // The edge's record: the status the client got and the body bytes it was sent.
    assert_eq!(field(&edge, "status"), Some(200), "{edge}");
    assert_eq!(field(&edge, "bytes_down"), Some(body as u64), "{edge}");
    // The remote's record names the pool connection the stream came on, as its
    // "pool connection up" line does, with the edge's address.
    let conn = field(&remote, "pool_conn").unwrap_or_else(|| panic!("no pool_conn: {remote}"));
    let log = pair.remote.log_text();
    assert!(
        log.lines().any(|l| l.contains("pool connection up")
            && l.contains(" peer=127.0.0.1:")
            && (field(l, "conn") == Some(conn) || l.contains(&format!(" conn=conn#{conn} ")))),
        "no connection {conn} came up:\n{log}"
    );
}

/// Reads a reply head and at least `n` bytes after it from `c`: (head, what followed it).
fn head_and_body(c: &mut TcpStream, n: usize) -> (Vec<u8>, Vec<u8>) {
    let mut got = Vec::new();
    let mut buf = [0u8; 65536];
    loop {
        let k = c.read(&mut buf).unwrap();
        assert!(k > 0, "the reply ended early");
        got.extend_from_slice(&buf[..k]);
        if let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") {
            if got.len() - (end + 4) >= n {
                let body = got.split_off(end + 4);
                return (got, body);
            }
        }
    }
}

/// Closes `c` with a reset (SO_LINGER 0), as a client that gives up does.
fn reset(c: TcpStream) {
    socket2::SockRef::from(&c)
        .set_linger(Some(Duration::ZERO))
        .unwrap();
    drop(c);
}

#[test]
fn a_tunnel_the_client_resets_is_logged_with_the_bytes_it_carried() {
    // The origin sends 1 MB into the tunnel, then holds it open.
    const DOWN: usize = 1_000_000;
    let origin = scripted_origin(|mut s| {
        let _ = s.write_all(&pattern(DOWN, 3));
        std::thread::sleep(Duration::from_secs(20));
    });
    let pair = start_pair("", &[]);
    let mut c = TcpStream::connect(pair.edge_addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    c.write_all(format!("CONNECT {origin} HTTP/1.1\r\nHost: {origin}\r\n\r\nhello").as_bytes())
        .unwrap();
    let (head, body) = head_and_body(&mut c, DOWN);
    assert!(head.starts_with(b"HTTP/1.1 200"));
    assert_eq!(body, pattern(DOWN, 3));
    // The client resets the connection: the edge ends the tunnel as its client's choice and
    // resets the stream, which the remote logs as the edge's cancel; neither is a failure,
    // and both records count what the tunnel carried.
    reset(c);
    let target = origin.to_string();
    let (remote, edge) = access_records(
        &pair,
        "tunnel",
        |l| l.contains("method=\"TUNNEL\"") && l.contains(&target),
        |l| l.contains("method=\"CONNECT\"") && l.contains(&target),
    );
    assert!(edge.contains("outcome=\"client-closed\""), "{edge}");
    assert!(edge.contains("the client reset its connection"), "{edge}");
    assert!(remote.contains("outcome=\"edge-cancelled\""), "{remote}");
    for line in [&remote, &edge] {
        assert_eq!(field(line, "bytes_up"), Some(5), "{line}");
        assert_eq!(field(line, "bytes_down"), Some(DOWN as u64), "{line}");
    }
}

#[test]
fn a_reply_the_client_resets_is_logged_with_its_status_and_the_bytes_it_got() {
    // The origin promises 10 MB, sends 1 MB, then holds the connection open.
    const DOWN: usize = 1_000_000;
    let origin = scripted_origin(|mut s| {
        let _ = read_head(&mut s);
        let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 10485760\r\n\r\n");
        let _ = s.write_all(&pattern(DOWN, 4));
        std::thread::sleep(Duration::from_secs(20));
    });
    let pair = start_pair("", &[]);
    let mut c = TcpStream::connect(pair.edge_addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    c.write_all(format!("GET http://{origin}/big HTTP/1.1\r\nHost: {origin}\r\n\r\n").as_bytes())
        .unwrap();
    let (head, body) = head_and_body(&mut c, DOWN);
    assert!(head.starts_with(b"HTTP/1.1 200"));
    assert_eq!(body, pattern(DOWN, 4));
    // The client resets its connection mid-body: the edge's record keeps the status the
    // client got and the body bytes it was sent (it logged 0 and 0 when the reply was
    // abandoned with the connection).
    reset(c);
    let (remote_target, edge_target) = (
        format!("target=\"{origin}\""),
        format!("target=\"http://{origin}/big\""),
    );
    let (remote, edge) = access_records(
        &pair,
        "abandoned reply",
        |l| l.contains("access") && l.contains(&remote_target),
        |l| l.contains("access") && l.contains(&edge_target),
    );
    assert!(edge.contains("outcome=\"client-aborted\""), "{edge}");
    for line in [&remote, &edge] {
        assert_eq!(field(line, "status"), Some(200), "{line}");
        assert_eq!(field(line, "bytes_down"), Some(DOWN as u64), "{line}");
    }
    // The remote says why it stopped: the edge cancelled the stream.
    assert!(remote.contains("outcome=\"reply-cut\""), "{remote}");
    assert!(remote.contains("client went away"), "{remote}");
}

#[test]
fn a_client_leaving_cancels_the_remote_fetch() {
    // The origin reads the request and never answers; it reports when the remote closes
    // the origin connection.
    let (closed_tx, closed_rx) = std::sync::mpsc::channel::<Duration>();
    let closed_tx = std::sync::Mutex::new(closed_tx);
    let silent = scripted_origin(move |mut s| {
        let _ = read_head(&mut s);
        let t0 = Instant::now();
        let mut b = [0u8; 64];
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        // EOF (or a reset) means the remote gave up on this fetch.
        while matches!(s.read(&mut b), Ok(n) if n > 0) {}
        let _ = closed_tx.lock().unwrap().send(t0.elapsed());
    });
    // The origin timeout is far longer than the test waits.
    let pair = start_pair("origin_timeout_ms = 60000\n", &[]);
    let mut c = TcpStream::connect(pair.edge_addr).unwrap();
    c.write_all(format!("GET http://{silent}/slow HTTP/1.1\r\nHost: {silent}\r\n\r\n").as_bytes())
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    drop(c);
    let waited = closed_rx
        .recv_timeout(Duration::from_secs(10))
        .expect("the remote kept waiting on the origin after the client left");
    assert!(waited < Duration::from_secs(10), "{waited:?}");
    // The remote logged why the fetch ended.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let log = pair.remote.log_text();
        if log.contains("edge reset the stream") {
            break;
        }
        assert!(Instant::now() < deadline, "no cancel line:\n{log}");
        std::thread::sleep(Duration::from_millis(50));
    }
}
