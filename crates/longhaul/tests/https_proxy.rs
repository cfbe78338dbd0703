//! The HTTPS proxy endpoint end to end with real processes on loopback: curl reaches the edge
//! over TLS (`--proxy https://`) and fetches an `http://` object and an `https://` object
//! (CONNECT) through the pair over HTTP/1.1.

mod common;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::*;

/// A test CA and a certificate for `localhost` and 127.0.0.1 it issued (openssl), in `dir`:
/// `ca.pem`, `proxy.pem`, `proxy.key`.
fn proxy_cert(dir: &Path) {
    let run = |args: &[&str]| {
        let o = Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    };
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
    ];
    run(&[
        &["req", "-x509"][..],
        &ec,
        &[
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
            "-subj",
            "/CN=longhaul test CA",
            "-days",
            "2",
        ],
    ]
    .concat());
    run(&[
        &["req"][..],
        &ec,
        &[
            "-keyout",
            "proxy.key",
            "-out",
            "proxy.csr",
            "-subj",
            "/CN=localhost",
        ],
    ]
    .concat());
    std::fs::write(
        dir.join("ext.cnf"),
        "subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n",
    )
    .unwrap();
    run(&[
        "x509",
        "-req",
        "-in",
        "proxy.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "proxy.pem",
        "-days",
        "2",
        "-extfile",
        "ext.cnf",
    ]);
}

/// A pair whose edge also serves the HTTPS proxy endpoint, its address, and the CA file
/// clients trust (in a directory that lives as long as the returned [`Keys`]).
fn https_pair() -> (Pair, SocketAddr, Keys) {
    let port = free_port();
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let dir = tempfile::tempdir().unwrap();
    proxy_cert(dir.path());
    let cert = dir.path().join("proxy.pem");
    let key = dir.path().join("proxy.key");
    let pair = start_pair(
        "",
        &[
            "--https-proxy",
            &addr.to_string(),
            "--https-cert",
            cert.to_str().unwrap(),
            "--https-key",
            key.to_str().unwrap(),
        ],
    );
    wait_port(addr, Duration::from_secs(10));
    (pair, addr, Keys(dir))
}

/// The proxy's key directory; [`Keys::ca`] is the CA clients trust.
struct Keys(tempfile::TempDir);

impl Keys {
    fn ca(&self) -> PathBuf {
        self.0.path().join("ca.pem")
    }
}

#[test]
fn curl_through_the_https_endpoint_over_http1() {
    let files = [("small", 1000), ("big", 3 * 1024 * 1024)];
    let origin = start_nginx(&files);
    let (_pair, https, keys) = https_pair();
    let proxy_ca = keys.ca();
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
                proxy_ca.to_str().unwrap(),
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
    let (_pair, https, _keys) = https_pair();
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

/// A TLS connection to the endpoint offering ALPN `alpn`, trusting `ca` (the proxy's name is
/// `localhost`).
async fn tls_to(
    addr: SocketAddr,
    ca: &std::path::Path,
    alpn: &[u8],
) -> tokio_rustls::client::TlsStream<tokio::net::TcpStream> {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for c in rustls::pki_types::CertificateDer::pem_file_iter(ca).unwrap() {
        roots.add(c.unwrap()).unwrap();
    }
    let mut cfg = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    cfg.alpn_protocols = vec![alpn.to_vec()];
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let tls = tokio_rustls::TlsConnector::from(std::sync::Arc::new(cfg))
        .connect("localhost".try_into().unwrap(), tcp)
        .await
        .unwrap();
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(alpn));
    tls
}

/// A TCP echo origin: returns every byte, closes its side after the client's FIN.
fn echo_origin() -> SocketAddr {
    scripted_origin(|mut s| {
        use std::io::{Read, Write};
        let mut buf = [0u8; 16 * 1024];
        loop {
            match s.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if s.write_all(&buf[..n]).is_err() {
                        return;
                    }
                }
            }
        }
        let _ = s.shutdown(std::net::Shutdown::Write);
    })
}

/// Reads a whole HTTP/2 body.
async fn body_of(mut body: h2::RecvStream) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(chunk) = body.data().await {
        let chunk = chunk.unwrap();
        let _ = body.flow_control().release_capacity(chunk.len());
        out.extend_from_slice(&chunk);
    }
    out
}

/// Sends `data` on an HTTP/2 stream in pieces as the peer's window allows, then END_STREAM.
async fn send_all(send: &mut h2::SendStream<bytes::Bytes>, data: &[u8]) {
    for piece in data.chunks(16 * 1024) {
        send.reserve_capacity(piece.len());
        let mut sent = 0;
        while sent < piece.len() {
            let cap = std::future::poll_fn(|cx| send.poll_capacity(cx))
                .await
                .unwrap()
                .unwrap();
            let n = cap.min(piece.len() - sent);
            if n == 0 {
                continue;
            }
            send.send_data(bytes::Bytes::copy_from_slice(&piece[sent..sent + n]), false)
                .unwrap();
            sent += n;
        }
    }
    send.send_data(bytes::Bytes::new(), true).unwrap();
}

#[test]
fn many_tunnels_and_requests_on_one_h2_connection() {
    let files = [("small", 1000), ("big", 3 * 1024 * 1024)];
    let origin = start_nginx(&files);
    let (pair, https, keys) = https_pair();
    let proxy_ca = keys.ca();
    let echo = echo_origin();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let tls = tls_to(https, &proxy_ca, b"h2").await;
        let (client, conn) = h2::client::handshake(tls).await.unwrap();
        let driver = tokio::spawn(conn);
        let mut tasks = tokio::task::JoinSet::new();
        // CONNECT tunnels to the echo origin: bytes come back byte for byte.
        for i in 0..4u64 {
            let mut client = client.clone().ready().await.unwrap();
            tasks.spawn(async move {
                let req = http::Request::builder()
                    .method(http::Method::CONNECT)
                    .uri(echo.to_string())
                    .body(())
                    .unwrap();
                let (resp, mut send) = client.send_request(req, false).unwrap();
                let resp = resp.await.unwrap();
                assert_eq!(resp.status(), 200, "tunnel {i}");
                let data = pattern(300 * 1024 + i as usize, 100 + i);
                let up = send_all(&mut send, &data);
                let down = body_of(resp.into_body());
                let ((), got) = tokio::join!(up, down);
                assert!(got == data, "tunnel {i}: {} of {} bytes", got.len(), data.len());
                format!("tunnel {i}")
            });
        }
        // A tunnel carrying an HTTP/1.1 exchange with the nginx origin.
        let http_port = origin.http;
        let small = std::fs::read(origin.www.join("small")).unwrap();
        {
            let mut client = client.clone().ready().await.unwrap();
            tasks.spawn(async move {
                let req = http::Request::builder()
                    .method(http::Method::CONNECT)
                    .uri(format!("127.0.0.1:{http_port}"))
                    .body(())
                    .unwrap();
                let (resp, mut send) = client.send_request(req, false).unwrap();
                let resp = resp.await.unwrap();
                assert_eq!(resp.status(), 200);
                let get = format!(
                    "GET /small HTTP/1.1\r\nHost: 127.0.0.1:{http_port}\r\nConnection: close\r\n\r\n"
                );
                send_all(&mut send, get.as_bytes()).await;
                let got = body_of(resp.into_body()).await;
                assert!(got.starts_with(b"HTTP/1.1 200 "), "{:?}", String::from_utf8_lossy(&got));
                assert!(got.ends_with(&small));
                "tunnel to nginx".to_string()
            });
        }
        // Plain http:// requests as streams of the same connection.
        for (i, (name, _)) in files.iter().chain(files.iter()).enumerate() {
            let mut client = client.clone().ready().await.unwrap();
            let want = std::fs::read(origin.www.join(name)).unwrap();
            let url = format!("http://127.0.0.1:{http_port}/{name}");
            tasks.spawn(async move {
                let req = http::Request::builder().uri(&url).body(()).unwrap();
                let (resp, _) = client.send_request(req, true).unwrap();
                let resp = resp.await.unwrap();
                assert_eq!(resp.status(), 200, "{url}");
                assert!(resp.headers().get("connection").is_none());
                assert!(resp.headers().get("transfer-encoding").is_none());
                assert_eq!(resp.headers()["via"], "1.1 longhaul");
                let got = body_of(resp.into_body()).await;
                assert!(got == want, "{url}: {} of {} bytes", got.len(), want.len());
                format!("GET {i}")
            });
        }
        let mut done = Vec::new();
        while let Some(r) = tasks.join_next().await {
            done.push(r.unwrap());
        }
        assert_eq!(done.len(), 4 + 1 + 4, "{done:?}");
        // An upload without content-length (sent chunked to the origin) and read back.
        let body = pattern(200 * 1024, 9);
        let mut c = client.clone().ready().await.unwrap();
        let req = http::Request::builder()
            .method(http::Method::PUT)
            .uri(format!("http://127.0.0.1:{http_port}/up/h2-put"))
            .body(())
            .unwrap();
        let (resp, mut send) = c.send_request(req, false).unwrap();
        send_all(&mut send, &body).await;
        let resp = resp.await.unwrap();
        assert!(resp.status().is_success(), "{}", resp.status());
        let _ = body_of(resp.into_body()).await;
        let req = http::Request::builder()
            .uri(format!("http://127.0.0.1:{http_port}/up/h2-put"))
            .body(())
            .unwrap();
        let (resp, _) = c.send_request(req, true).unwrap();
        let resp = resp.await.unwrap();
        assert_eq!(resp.status(), 200);
        assert!(body_of(resp.into_body()).await == body);
        // HEAD: no body, the length of the representation kept.
        let req = http::Request::builder()
            .method(http::Method::HEAD)
            .uri(format!("http://127.0.0.1:{http_port}/big"))
            .body(())
            .unwrap();
        let (resp, _) = c.send_request(req, true).unwrap();
        let resp = resp.await.unwrap();
        assert_eq!(resp.status(), 200);
        assert_eq!(resp.headers()["content-length"], "3145728");
        assert!(resp.body().is_end_stream());
        // A refused target gets the edge's synthetic response as an HTTP/2 reply; to HEAD,
        // the head alone (RFC 9113 §8.1.1).
        for method in [http::Method::GET, http::Method::HEAD] {
            let head_only = method == http::Method::HEAD;
            let req = http::Request::builder()
                .method(method)
                .uri("https://127.0.0.1:1/")
                .body(())
                .unwrap();
            let (resp, _) = c.send_request(req, true).unwrap();
            let resp = resp.await.unwrap();
            assert_eq!(resp.status(), 400);
            assert_eq!(resp.headers()["x-longhaul-error"], "bad-request");
            if head_only {
                assert!(resp.body().is_end_stream());
            }
        }
        drop(c);
        drop(client);
        driver.abort();
    });
    let log = pair.edge.log_text();
    assert!(log.contains("CONNECT"), "{log}");
}

/// HPACK: a header field as a literal without indexing, new name (RFC 7541 §6.2.2).
fn literal(out: &mut Vec<u8>, name: &str, value: &str) {
    assert!(name.len() < 127 && value.len() < 127);
    out.push(0);
    out.push(name.len() as u8);
    out.extend_from_slice(name.as_bytes());
    out.push(value.len() as u8);
    out.extend_from_slice(value.as_bytes());
}

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(9 + payload.len());
    f.extend_from_slice(&(payload.len() as u32).to_be_bytes()[1..]);
    f.push(kind);
    f.push(flags);
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

const HEADERS: u8 = 1;
const RST_STREAM: u8 = 3;
const SETTINGS: u8 = 4;
const GOAWAY: u8 = 7;
const END_STREAM: u8 = 1;
const END_HEADERS: u8 = 4;

#[test]
fn malformed_h2_requests_get_a_stream_error_and_the_connection_lives_on() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let origin = start_nginx(&[("small", 1000)]);
    let (_pair, https, keys) = https_pair();
    let proxy_ca = keys.ca();
    let http_port = origin.http;
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let mut tls = tls_to(https, &proxy_ca, b"h2").await;
        let mut out = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
        out.extend(frame(SETTINGS, 0, 0, &[]));
        // Stream 1: CONNECT with :path and :scheme (RFC 9113 §8.5: malformed).
        let mut h = Vec::new();
        literal(&mut h, ":method", "CONNECT");
        literal(&mut h, ":scheme", "https");
        literal(&mut h, ":authority", "127.0.0.1:443");
        literal(&mut h, ":path", "/");
        out.extend(frame(HEADERS, END_HEADERS, 1, &h));
        // Stream 3: a connection-specific field (§8.2.2: malformed).
        let authority = format!("127.0.0.1:{http_port}");
        let mut h = Vec::new();
        literal(&mut h, ":method", "GET");
        literal(&mut h, ":scheme", "http");
        literal(&mut h, ":authority", &authority);
        literal(&mut h, ":path", "/small");
        literal(&mut h, "connection", "keep-alive");
        out.extend(frame(HEADERS, END_HEADERS | END_STREAM, 3, &h));
        // Stream 5: a valid request on the same connection.
        let mut h = Vec::new();
        literal(&mut h, ":method", "GET");
        literal(&mut h, ":scheme", "http");
        literal(&mut h, ":authority", &authority);
        literal(&mut h, ":path", "/small");
        out.extend(frame(HEADERS, END_HEADERS | END_STREAM, 5, &h));
        // Stream 7: a `:path` that is not an absolute path (§8.3.1: malformed); it must not
        // be glued onto the authority (here it would name another port).
        let mut h = Vec::new();
        literal(&mut h, ":method", "GET");
        literal(&mut h, ":scheme", "http");
        literal(&mut h, ":authority", "127.0.0.1");
        literal(&mut h, ":path", &format!(":{http_port}/small"));
        out.extend(frame(HEADERS, END_HEADERS | END_STREAM, 7, &h));
        tls.write_all(&out).await.unwrap();
        let mut resets = std::collections::BTreeMap::new();
        let mut headers_on_5 = false;
        let mut data_on_5 = 0usize;
        let mut ended_5 = false;
        let mut status_7 = None;
        let mut ended_7 = false;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        while !(ended_5
            && (ended_7 || resets.contains_key(&7))
            && resets.contains_key(&1)
            && resets.contains_key(&3))
        {
            let mut head = [0u8; 9];
            tokio::time::timeout_at(deadline, tls.read_exact(&mut head))
                .await
                .expect("frames in time")
                .unwrap();
            let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
            let (kind, flags) = (head[3], head[4]);
            let stream = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
            let mut payload = vec![0u8; len];
            tls.read_exact(&mut payload).await.unwrap();
            match kind {
                SETTINGS if flags & 1 == 0 => {
                    tls.write_all(&frame(SETTINGS, 1, 0, &[])).await.unwrap();
                }
                RST_STREAM => {
                    let code = u32::from_be_bytes(payload[..4].try_into().unwrap());
                    resets.insert(stream, code);
                }
                GOAWAY => panic!("the connection was closed: {payload:?}"),
                HEADERS if stream == 5 => {
                    headers_on_5 = true;
                    ended_5 |= flags & END_STREAM != 0;
                }
                0 if stream == 5 => {
                    data_on_5 += len;
                    ended_5 |= flags & END_STREAM != 0;
                }
                // The first field of the answer: `:status` from HPACK's static table
                // (index 12 is 400), or a reset.
                HEADERS if stream == 7 => {
                    status_7 = payload.first().copied();
                    ended_7 |= flags & END_STREAM != 0;
                }
                0 if stream == 7 => ended_7 |= flags & END_STREAM != 0,
                _ => {}
            }
        }
        // PROTOCOL_ERROR (0x1) on each malformed stream; the valid one is answered whole.
        assert_eq!(resets.get(&1), Some(&1), "{resets:?}");
        assert_eq!(resets.get(&3), Some(&1), "{resets:?}");
        assert!(headers_on_5);
        assert_eq!(data_on_5, 1000);
        assert!(
            status_7 == Some(0x80 | 12) || resets.get(&7) == Some(&1),
            "stream 7 was neither answered 400 nor reset: {status_7:?}, {resets:?}"
        );
    });
}

#[test]
fn sighup_reloads_the_endpoint_certificate() {
    let origin = start_nginx(&[("small", 1000)]);
    let (pair, https, keys) = https_pair();
    let old_ca = keys.0.path().join("old-ca.pem");
    std::fs::copy(keys.ca(), &old_ca).unwrap();
    // A new CA and certificate in place of the old ones (same paths), then SIGHUP.
    let fresh = tempfile::tempdir().unwrap();
    proxy_cert(fresh.path());
    for f in ["proxy.pem", "proxy.key", "ca.pem"] {
        std::fs::copy(fresh.path().join(f), keys.0.path().join(f)).unwrap();
    }
    pair.edge.signal("HUP");
    wait_log(&pair.edge, "SIGHUP: TLS files reloaded");
    let proxy = format!("https://localhost:{}", https.port());
    let url = format!("http://127.0.0.1:{}/small", origin.http);
    let fetch = |ca: &Path| {
        let o = curl(&[
            "--proxy",
            &proxy,
            "--proxy-cacert",
            ca.to_str().unwrap(),
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            &url,
        ]);
        String::from_utf8_lossy(&o.stdout).to_string()
    };
    assert_eq!(fetch(&keys.ca()), "200");
    assert_eq!(fetch(&old_ca), "000");
}

#[test]
fn a_slow_h2_reader_holds_the_reply_back() {
    use std::io::{Read, Write};
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;
    // An origin that writes a 256 MiB reply as fast as it is taken, counting what the
    // network took from it.
    const SIZE: u64 = 256 * 1024 * 1024;
    let written = Arc::new(AtomicU64::new(0));
    let w = written.clone();
    let origin = scripted_origin(move |mut s| {
        let _ = read_head(&mut s);
        let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {SIZE}\r\n\r\n");
        if s.write_all(head.as_bytes()).is_err() {
            return;
        }
        let chunk = vec![7u8; 64 * 1024];
        let mut left = SIZE;
        while left > 0 {
            let n = left.min(chunk.len() as u64) as usize;
            if s.write_all(&chunk[..n]).is_err() {
                return;
            }
            left -= n as u64;
            w.fetch_add(n as u64, Ordering::Relaxed);
        }
        let mut rest = Vec::new();
        let _ = s.read_to_end(&mut rest);
    });
    let (_pair, https, keys) = https_pair();
    let proxy_ca = keys.ca();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let tls = tls_to(https, &proxy_ca, b"h2").await;
        // The client's windows stay at the protocol's 65535 bytes until it reads.
        let (client, conn) = h2::client::Builder::new()
            .initial_window_size(65_535)
            .initial_connection_window_size(65_535)
            .handshake::<_, bytes::Bytes>(tls)
            .await
            .unwrap();
        let driver = tokio::spawn(conn);
        let mut client = client.ready().await.unwrap();
        let req = http::Request::builder()
            .uri(format!("http://{origin}/big"))
            .body(())
            .unwrap();
        let (resp, _) = client.send_request(req, true).unwrap();
        let resp = resp.await.unwrap();
        assert_eq!(resp.status(), 200);
        // Not reading: what the origin could send is what the buffers on the way hold (socket
        // buffers, the pool stream's window, one body buffer), far from the whole reply.
        tokio::time::sleep(Duration::from_secs(3)).await;
        let stalled = written.load(Ordering::Relaxed);
        tokio::time::sleep(Duration::from_secs(1)).await;
        let later = written.load(Ordering::Relaxed);
        assert!(
            later < SIZE / 4,
            "the origin sent {later} of {SIZE} bytes to a client that reads nothing"
        );
        assert!(
            later - stalled < 1024 * 1024,
            "still flowing: {stalled} -> {later}"
        );
        // Reading resumes the flow to the end.
        let mut body = resp.into_body();
        let mut got = 0u64;
        while let Some(chunk) = body.data().await {
            let chunk = chunk.unwrap();
            got += chunk.len() as u64;
            let _ = body.flow_control().release_capacity(chunk.len());
        }
        assert_eq!(got, SIZE);
        driver.abort();
    });
}

#[test]
fn an_h2_request_reset_mid_reply_is_logged_with_its_status_bytes_and_duration() {
    use std::io::{Read, Write};
    // The origin answers at once (10 MB promised, 1 MB sent) while the request body is still
    // coming, then reads on.
    const DOWN: usize = 1_000_000;
    let origin = scripted_origin(|mut s| {
        let _ = read_head(&mut s);
        let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 10485760\r\n\r\n");
        let _ = s.write_all(&vec![5u8; DOWN]);
        let mut rest = Vec::new();
        let _ = s.read_to_end(&mut rest);
    });
    let (pair, https, keys) = https_pair();
    let proxy_ca = keys.ca();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let tls = tls_to(https, &proxy_ca, b"h2").await;
        let (client, conn) = h2::client::handshake(tls).await.unwrap();
        let driver = tokio::spawn(conn);
        let mut client = client.ready().await.unwrap();
        let req = http::Request::builder()
            .method(http::Method::POST)
            .uri(format!("http://{origin}/upload"))
            .body(())
            .unwrap();
        // A body without a length, not ended: the upload goes on while the reply comes.
        let (resp, mut send) = client.send_request(req, false).unwrap();
        send.send_data(bytes::Bytes::from_static(b"first part"), false)
            .unwrap();
        let resp = resp.await.unwrap();
        assert_eq!(resp.status(), 200);
        let mut body = resp.into_body();
        let mut got = 0;
        while got < DOWN {
            let chunk = body.data().await.unwrap().unwrap();
            got += chunk.len();
            let _ = body.flow_control().release_capacity(chunk.len());
        }
        assert_eq!(got, DOWN);
        // The client gives up on the request mid-reply, 300 ms on.
        tokio::time::sleep(Duration::from_millis(300)).await;
        send.send_reset(h2::Reason::CANCEL);
        tokio::time::sleep(Duration::from_millis(200)).await;
        driver.abort();
    });
    let target = format!("target=\"http://{origin}/upload\"");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let line = loop {
        let log = pair.edge.log_text();
        if let Some(l) = log
            .lines()
            .find(|l| l.contains("access") && l.contains(&target))
        {
            break l.to_owned();
        }
        assert!(std::time::Instant::now() < deadline, "no record:\n{log}");
        std::thread::sleep(Duration::from_millis(50));
    };
    // The record keeps the status the client got and the body bytes it was sent (it said 0
    // and 0 when the reset ended the upload first).
    assert!(line.contains("status=200 "), "{line}");
    assert!(line.contains(&format!("bytes_down={DOWN} ")), "{line}");
    // Its duration runs to the reset (it was taken before the request ran, 0 ms).
    let ms: u64 = line
        .split(" ms=")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no ms: {line}"));
    assert!(ms >= 300, "{line}");
}
