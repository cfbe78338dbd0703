//! SOCKS5 end to end with real processes on loopback: curl `--socks5-hostname` → edge-proxy's
//! SOCKS5 listener → pool → remote-proxy → nginx (HTTP, and HTTPS end to end inside the tunnel),
//! names resolved only on the far side, RFC 1929 authentication, and the RFC 1928 reply codes of
//! refusals, checked on the raw bytes.

mod common;

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use common::*;
use edge_proxy::socks::codec::{encode_request, Addr, Command, Request};

const MB: usize = 1024 * 1024;

/// A name only the remote's `[hosts]` table knows.
const FAR_ONLY: &str = "far-only.longhaul.test";

fn socks_args(port: u16) -> String {
    format!("127.0.0.1:{port}")
}

/// Fetches `url` through the SOCKS5 listener with curl (`proxy` as curl's `--socks5*` value):
/// curl's exit code and stderr, the body in `out`.
fn fetch(
    flag: &str,
    proxy: &str,
    url: &str,
    out: &std::path::Path,
    extra: &[&str],
) -> (i32, String) {
    let mut args = vec![flag, proxy, "-o", out.to_str().unwrap()];
    args.extend_from_slice(extra);
    args.push(url);
    let o = curl(&args);
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stderr).into(),
    )
}

fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s
}

fn read_n(s: &mut TcpStream, n: usize) -> Vec<u8> {
    let mut b = vec![0u8; n];
    s.read_exact(&mut b)
        .unwrap_or_else(|e| panic!("reading {n} bytes: {e}"));
    b
}

/// The edge ends the connection: EOF (or a reset) with no further byte.
fn assert_ends(s: &mut TcpStream) {
    let mut b = [0u8; 16];
    match s.read(&mut b) {
        Ok(0) | Err(_) => {}
        Ok(n) => panic!("expected the end of the connection, got {:?}", &b[..n]),
    }
}

/// Greets (offering `methods`), authenticates with `creds` when the edge selects
/// username/password, sends `request`, and returns the reply code (the connection then ends
/// unless it succeeded).
fn reply_code(addr: SocketAddr, creds: Option<(&str, &str)>, request: &[u8]) -> u8 {
    let mut s = connect(addr);
    let methods: &[u8] = if creds.is_some() { &[0x02] } else { &[0x00] };
    let mut g = vec![5, methods.len() as u8];
    g.extend_from_slice(methods);
    s.write_all(&g).unwrap();
    let sel = read_n(&mut s, 2);
    assert_eq!(sel, [5, methods[0]], "method selection");
    if let Some((u, p)) = creds {
        let mut a = vec![1, u.len() as u8];
        a.extend_from_slice(u.as_bytes());
        a.push(p.len() as u8);
        a.extend_from_slice(p.as_bytes());
        s.write_all(&a).unwrap();
        assert_eq!(read_n(&mut s, 2), [1, 0], "authentication");
    }
    s.write_all(request).unwrap();
    let r = read_n(&mut s, 10);
    // Every reply reports 0.0.0.0:0 as the bound address.
    assert_eq!(
        (r[0], r[2], &r[3..]),
        (5, 0, &[1, 0, 0, 0, 0, 0, 0][..]),
        "{r:?}"
    );
    if r[1] != 0 {
        assert_ends(&mut s);
    }
    r[1]
}

fn connect_to(addr: Addr, port: u16) -> Vec<u8> {
    encode_request(&Request {
        command: Command::CONNECT,
        addr,
        port,
    })
}

fn name(n: &str) -> Addr {
    Addr::Domain(n.into())
}

#[test]
fn curl_socks5_hostname_fetches_http_and_https_and_the_far_side_resolves() {
    let files = [("small", 65_537), ("big", 8 * MB)];
    let origin = start_nginx(&files);
    let sport = free_port();
    let pair = start_pair(
        &format!("[hosts]\n\"{FAR_ONLY}\" = [\"127.0.0.1\"]\n"),
        &["--socks", &socks_args(sport)],
    );
    let proxy = socks_args(sport);
    let out = origin.dir.path().join("out");
    let body = |name: &str| std::fs::read(origin.www.join(name)).unwrap();
    let check = |url: &str, name: &str, (code, err): (i32, String)| {
        assert_eq!(code, 0, "{url}: {err}");
        assert!(
            std::fs::read(&out).unwrap() == body(name),
            "{url}: bytes differ"
        );
    };
    // A name only the remote knows: the edge passes it on, the remote resolves it.
    for name in ["small", "big"] {
        let url = format!("http://{FAR_ONLY}:{}/{name}", origin.http);
        check(
            &url,
            name,
            fetch("--socks5-hostname", &proxy, &url, &out, &[]),
        );
    }
    // HTTPS end to end inside the tunnel (the origin's certificate names localhost).
    let cacert = origin.cert.to_str().unwrap().to_string();
    for name in ["small", "big"] {
        let url = format!("https://localhost:{}/{name}", origin.https);
        check(
            &url,
            name,
            fetch(
                "--socks5-hostname",
                &proxy,
                &url,
                &out,
                &["--cacert", &cacert],
            ),
        );
    }
    // An IPv4 literal (curl resolves locally with --socks5 and sends the address).
    let url = format!("http://127.0.0.1:{}/small", origin.http);
    check(&url, "small", fetch("--socks5", &proxy, &url, &out, &[]));
    // This side cannot resolve the far-only name: curl resolving it locally fails.
    let url = format!("http://{FAR_ONLY}:{}/small", origin.http);
    let (code, err) = fetch("--socks5", &proxy, &url, &out, &[]);
    assert!(
        code != 0 && err.contains("Could not resolve host"),
        "the name must not resolve on this side: {code} {err}"
    );
    // One access-log record per SOCKS5 connection, with the name as the target on both sides.
    let target = format!("{FAR_ONLY}:{}", origin.http);
    let elog = pair.edge.log_text();
    assert!(
        elog.lines()
            .any(|l| l.contains("method=\"SOCKS5\"") && l.contains(&format!("target=\"{target}\""))),
        "{elog}"
    );
    assert!(
        pair.remote
            .log_text()
            .contains(&format!("target=\"{target}\"")),
        "{}",
        pair.remote.log_text()
    );

    // An IPv6 literal, with the client's request bytes sent before the reply (all in one
    // write): they ride with the stream's opening.
    let v6 = std::net::TcpListener::bind("[::1]:0").unwrap();
    let v6_port = v6.local_addr().unwrap().port();
    std::thread::spawn(move || {
        if let Ok((mut c, _)) = v6.accept() {
            let head = read_head(&mut c);
            let body = format!("v6 saw: {}", head.lines().next().unwrap_or(""));
            let _ = write!(
                c,
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    let mut s = connect(pair.edge_addr_socks(sport));
    let mut all = vec![5, 1, 0];
    all.extend(connect_to(Addr::V6(std::net::Ipv6Addr::LOCALHOST), v6_port));
    all.extend_from_slice(b"GET /six HTTP/1.1\r\nHost: x\r\n\r\n");
    s.write_all(&all).unwrap();
    assert_eq!(read_n(&mut s, 2), [5, 0]);
    assert_eq!(read_n(&mut s, 10), [5, 0, 0, 1, 0, 0, 0, 0, 0, 0]);
    let mut reply = String::new();
    s.read_to_string(&mut reply).unwrap();
    assert!(reply.ends_with("v6 saw: GET /six HTTP/1.1"), "{reply}");
    // The record is written when both directions ended.
    drop(s);
    wait_log(&pair.edge, &format!("target=\"[::1]:{v6_port}\""));

    // Optimistic (the default): success is answered at once; a target the far side cannot
    // reach then ends the connection, with the reason in the edge's log.
    let closed = free_port();
    let mut s = connect(pair.edge_addr_socks(sport));
    s.write_all(&[5, 1, 0]).unwrap();
    assert_eq!(read_n(&mut s, 2), [5, 0]);
    s.write_all(&connect_to(Addr::V4(Ipv4Addr::LOCALHOST), closed))
        .unwrap();
    assert_eq!(read_n(&mut s, 10)[1], 0);
    assert_ends(&mut s);
    wait_log(&pair.edge, "outcome=\"tunnel-failed\"");
}

trait SocksAddr {
    fn edge_addr_socks(&self, port: u16) -> SocketAddr;
}

impl SocksAddr for Pair {
    fn edge_addr_socks(&self, port: u16) -> SocketAddr {
        SocketAddr::from((self.edge_addr.ip(), port))
    }
}

#[test]
fn passwords_and_refusals_get_rfc_reply_codes() {
    let origin = start_nginx(&[("small", 1000)]);
    let sport = free_port();
    let closed = free_port();
    // A target that never answers: a listener whose accept queue (backlog 0) is full drops
    // further SYNs, so the far side's connect times out.
    let silent = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    silent
        .bind(&SocketAddr::from((Ipv4Addr::LOCALHOST, 0)).into())
        .unwrap();
    silent.listen(0).unwrap();
    let silent_port = silent.local_addr().unwrap().as_socket().unwrap().port();
    let _queued = TcpStream::connect(("127.0.0.1", silent_port)).unwrap();
    let conf_dir = tempfile::tempdir().unwrap();
    let conf = conf_dir.path().join("edge.toml");
    std::fs::write(
        &conf,
        format!(
            "[socks]\nhandshake_timeout_ms = 700\nconnect_ports = [{}, {closed}, {silent_port}]\n\
         [[socks.users]]\nname = \"alice\"\npassword = \"correct horse\"\n",
            origin.http
        ),
    )
    .unwrap();
    let pair = start_pair(
        "origin_connect_timeout_ms = 500\n",
        &[
            "--config",
            conf.to_str().unwrap(),
            "--socks",
            &socks_args(sport),
            "--connect-reply",
            "after-connect",
            // The HTTP CONNECT policy is not the SOCKS5 one.
            "--connect-ports",
            "443",
        ],
    );
    let addr = pair.edge_addr_socks(sport);
    let out = origin.dir.path().join("out");
    let url = format!("http://localhost:{}/small", origin.http);

    // The right password fetches; a wrong one is refused (curl: proxy handshake error, 97).
    let (code, err) = fetch(
        "--socks5-hostname",
        &format!("alice:correct%20horse@{}", socks_args(sport)),
        &url,
        &out,
        &[],
    );
    assert_eq!(code, 0, "{err}");
    let (code, err) = fetch(
        "--socks5-hostname",
        &format!("alice:wrong@{}", socks_args(sport)),
        &url,
        &out,
        &[],
    );
    assert_eq!(code, 97, "{err}");
    // On the wire: RFC 1929 status 1, then the edge closes.
    let mut s = connect(addr);
    s.write_all(&[5, 2, 0, 2]).unwrap();
    assert_eq!(read_n(&mut s, 2), [5, 2]);
    s.write_all(b"\x01\x05alice\x05wrong").unwrap();
    assert_eq!(read_n(&mut s, 2), [1, 1]);
    assert_ends(&mut s);
    // With users configured, "no authentication" is not offered: no acceptable method.
    let mut s = connect(addr);
    s.write_all(&[5, 1, 0]).unwrap();
    assert_eq!(read_n(&mut s, 2), [5, 0xff]);
    assert_ends(&mut s);

    let alice = Some(("alice", "correct horse"));
    let http = origin.http;
    // Success after connect: the reply, then the tunnel.
    let mut s = connect(addr);
    s.write_all(&[5, 1, 2]).unwrap();
    assert_eq!(read_n(&mut s, 2), [5, 2]);
    s.write_all(b"\x01\x05alice\x0dcorrect horse").unwrap();
    assert_eq!(read_n(&mut s, 2), [1, 0]);
    s.write_all(&connect_to(name("localhost"), http)).unwrap();
    assert_eq!(read_n(&mut s, 10), [5, 0, 0, 1, 0, 0, 0, 0, 0, 0]);
    s.write_all(b"GET /small HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut reply = Vec::new();
    s.read_to_end(&mut reply).unwrap();
    assert!(
        reply.starts_with(b"HTTP/1.1 200 OK\r\n"),
        "{}",
        String::from_utf8_lossy(&reply)
    );

    let cases: Vec<(&str, Vec<u8>, u8)> = vec![
        // The edge's port policy (socks.connect_ports): not allowed by ruleset.
        ("port policy", connect_to(name("localhost"), 22), 0x02),
        // The far side's outcomes.
        (
            "unknown name",
            connect_to(name(&format!("{}.example", "a".repeat(64))), http),
            0x04,
        ),
        (
            "refused",
            connect_to(Addr::V4(Ipv4Addr::LOCALHOST), closed),
            0x05,
        ),
        (
            "timeout",
            connect_to(Addr::V4(Ipv4Addr::LOCALHOST), silent_port),
            0x06,
        ),
        // What the edge does not carry.
        (
            "BIND",
            encode_request(&Request {
                command: Command::BIND,
                addr: Addr::V4(Ipv4Addr::LOCALHOST),
                port: http,
            }),
            0x07,
        ),
        (
            "UDP ASSOCIATE",
            encode_request(&Request {
                command: Command::UDP_ASSOCIATE,
                addr: Addr::V4(Ipv4Addr::UNSPECIFIED),
                port: 53,
            }),
            0x07,
        ),
        ("address type 2", vec![5, 1, 0, 2, 0, 80], 0x08),
        ("reserved byte", vec![5, 1, 7, 1, 127, 0, 0, 1, 0, 80], 0x01),
    ];
    for (what, req, want) in cases {
        assert_eq!(reply_code(addr, alice, &req), want, "{what}");
    }

    // Not SOCKS5 at all (an HTTP request on the SOCKS port): closed without a byte.
    let mut s = connect(addr);
    s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    assert_ends(&mut s);
    // A client that stops mid-handshake is closed after the handshake timeout.
    let mut s = connect(addr);
    s.write_all(&[5, 1]).unwrap();
    let t0 = Instant::now();
    assert_ends(&mut s);
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());

    // Each refusal has its access-log record with the reason.
    for outcome in [
        "socks-auth-failed",
        "socks-no-method",
        "forbidden-target",
        "dns-failed",
        "connect-failed",
        "origin-timeout",
        "not-implemented",
        "bad-request",
        "header-timeout",
    ] {
        wait_log(&pair.edge, &format!("outcome=\"{outcome}\""));
    }
    let log = pair.edge.log_text();
    assert!(log.contains("reply 0x05 (connection refused)"), "{log}");
    // A tunnel's record names its user.
    assert!(
        log.contains(r#"outcome="ok" detail="user \"alice\"""#),
        "{log}"
    );
    // The remote's reason reaches the edge's log.
    assert!(log.contains("Connection refused (os error 111)"), "{log}");
    assert!(log.contains("reply 0x06 (TTL expired)"), "{log}");
    assert!(!log.contains("correct horse"), "a password reached the log");
}

#[test]
fn clients_outside_the_allowed_networks_are_not_allowed_by_ruleset() {
    let sport = free_port();
    let pair = start_pair(
        "",
        &[
            "--socks",
            &socks_args(sport),
            "--allow-client",
            "10.0.0.0/8",
        ],
    );
    let addr = pair.edge_addr_socks(sport);
    let req = connect_to(name("localhost"), 443);
    assert_eq!(reply_code(addr, None, &req), 0x02);
    wait_log(&pair.edge, "outcome=\"forbidden-client\"");
}
