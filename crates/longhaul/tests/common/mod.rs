//! Real-process test fixtures: the two binaries, an nginx origin (HTTP and HTTPS) serving
//! generated files from a temporary directory, curl, and small scripted origins.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// A child process killed (SIGKILL) when dropped.
pub struct Proc {
    pub child: Child,
    pub name: String,
    pub log: PathBuf,
    /// Stop with SIGTERM first (for process trees such as nginx, whose master stops its
    /// workers on SIGTERM but would orphan them on SIGKILL).
    pub term_first: bool,
}

impl Proc {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends a signal with kill(1).
    pub fn signal(&self, sig: &str) {
        let st = Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(self.pid().to_string())
            .status()
            .expect("kill");
        assert!(st.success(), "kill -{sig} {}", self.name);
    }

    /// Waits for the process to exit, at most `limit`.
    pub fn wait_exit(&mut self, limit: Duration) -> Option<std::process::ExitStatus> {
        let start = Instant::now();
        while start.elapsed() < limit {
            if let Some(st) = self.child.try_wait().expect("try_wait") {
                return Some(st);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if self.term_first && matches!(self.child.try_wait(), Ok(None)) {
            let _ = Command::new("kill").arg(self.pid().to_string()).status();
            if self.wait_exit(Duration::from_secs(5)).is_some() {
                return;
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Ports set aside for the listeners the tests start: the span just below the kernel's
/// ephemeral range (`net.ipv4.ip_local_port_range`, 32768–60999 by default), up to this many.
const TEST_PORT_SPAN: u16 = 12_000;

/// A port on 127.0.0.1 free a moment ago, for a process the test is about to start.
///
/// It is taken below the kernel's ephemeral range, from which the kernel picks the source port
/// of every client connection: a port chosen inside it while free can become a parallel test's
/// client port before the process binds it (nginx then exits with "Address already in use").
/// Below the range only another listener can hold it; each test process walks the span from
/// its own starting point, so the tests of one process never get the same port twice.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let ephemeral_low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32_768);
    let low = ephemeral_low.saturating_sub(TEST_PORT_SPAN).max(1024);
    let span = u32::from(ephemeral_low.saturating_sub(low));
    if span < 1000 {
        // No room below the range on this host: let the kernel choose, as before.
        return TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
    }
    let start = std::process::id().wrapping_mul(2_654_435_761) % span;
    for _ in 0..span {
        let k = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = low + ((start + k) % span) as u16;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free TCP port on 127.0.0.1 in {low}..{ephemeral_low}");
}

/// `127.0.0.1:port`.
pub fn loopback(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

/// A TCP address on loopback free a moment ago (a metrics listener's, say).
pub fn free_addr() -> SocketAddr {
    loopback(free_port())
}

/// A port free now on 127.0.0.1 for TCP and, if `udp`, for UDP too.
fn free_port_for(udp: bool) -> u16 {
    loop {
        let port = free_port();
        if !udp || std::net::UdpSocket::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

/// Starts `bin` with `args(port)` on a port free now (TCP, and UDP if `udp`) and waits until
/// its log shows `ready`. The tests run in parallel and the kernel hands out client ports from
/// the same range, so a port free when chosen can be taken before the process binds it: a
/// process that exits with "Address already in use" is started again on another port.
pub fn spawn_on_free_port(
    bin: &Path,
    log: PathBuf,
    ready: &str,
    udp: bool,
    args: impl Fn(u16) -> Vec<String>,
) -> (Proc, u16) {
    for _ in 0..10 {
        let port = free_port_for(udp);
        let mut p = spawn(bin, &args(port), log.clone());
        let start = Instant::now();
        loop {
            if p.log_text().contains(ready) {
                return (p, port);
            }
            if p.child.try_wait().expect("try_wait").is_some() {
                break;
            }
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "no {ready:?} in the log:\n{}",
                p.log_text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        let text = p.log_text();
        assert!(
            text.contains("Address already in use"),
            "{} exited before {ready:?}:\n{text}",
            p.name
        );
    }
    panic!("{}: no free port in 10 tries", bin.display());
}

/// Waits until `addr` accepts connections.
pub fn wait_port(addr: SocketAddr, limit: Duration) {
    let start = Instant::now();
    while start.elapsed() < limit {
        if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("{addr} did not come up within {limit:?}");
}

/// Path of the `remote-proxy` binary (Cargo builds it for this package's tests).
pub fn remote_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_remote-proxy"))
}

/// Path of the `edge-proxy` binary (Cargo builds it for this package's tests).
pub fn edge_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_edge-proxy"))
}

/// Starts `bin` with `args`, stderr and stdout to `log`.
pub fn spawn(bin: &Path, args: &[String], log: PathBuf) -> Proc {
    let f = std::fs::File::create(&log).unwrap();
    let child = Command::new(bin)
        .args(args)
        .env("RUST_LOG", "info")
        .stdout(f.try_clone().unwrap())
        .stderr(f)
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {}: {e}", bin.display()));
    Proc {
        child,
        name: bin.file_name().unwrap().to_string_lossy().into(),
        log,
        term_first: false,
    }
}

/// Edge and remote on loopback.
pub struct Pair {
    pub edge: Proc,
    pub remote: Proc,
    pub edge_addr: SocketAddr,
    pub remote_addr: SocketAddr,
    pub dir: tempfile::TempDir,
}

/// The pool carrier the pair tests run over: `LONGHAUL_TEST_CARRIER=quic` runs them over QUIC,
/// `auto` over the default carrier with TLS (QUIC, TCP+TLS kept as the fallback; both with keys
/// from `gen-keys`), anything else or unset over plaintext TCP. The test command runs the
/// end-to-end suite once per carrier.
pub fn test_carrier() -> &'static str {
    match std::env::var("LONGHAUL_TEST_CARRIER").as_deref() {
        Ok("quic") => "quic",
        Ok("auto") => "auto",
        _ => "tcp",
    }
}

/// Runs `edge-proxy gen-keys --out dir`.
pub fn gen_keys(dir: &Path) {
    let o = Command::new(edge_bin())
        .args(["gen-keys", "--out"])
        .arg(dir)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

/// Waits until `needle` shows in the process's log.
pub fn wait_log(p: &Proc, needle: &str) {
    let start = Instant::now();
    while !p.log_text().contains(needle) {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "no {needle:?} in the log:\n{}",
            p.log_text()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Starts a remote (with `remote_toml` as its config file when not empty) and an edge (with
/// `edge_args` added), over the carrier of [`test_carrier`].
pub fn start_pair(remote_toml: &str, edge_args: &[&str]) -> Pair {
    let dir = tempfile::tempdir().unwrap();
    let quic = test_carrier() != "tcp";
    let mut carrier_args = Vec::new();
    if quic {
        let keys = dir.path().join("keys");
        gen_keys(&keys);
        carrier_args = vec![
            "--carrier".to_string(),
            test_carrier().into(),
            "--tls-dir".into(),
            keys.to_string_lossy().into(),
        ];
    }
    if !quic {
        // The default is auto (QUIC with TLS files); these tests are about TCP (+TLS).
        carrier_args = vec!["--carrier".to_string(), "tcp".into()];
    }
    let mut rest = carrier_args.clone();
    if !remote_toml.is_empty() {
        let p = dir.path().join("remote.toml");
        std::fs::write(&p, remote_toml).unwrap();
        rest.push("--config".into());
        rest.push(p.to_string_lossy().into());
    }
    // Over QUIC (and auto) the remote listens on UDP and TCP with the same port.
    let (remote, rport) = spawn_on_free_port(
        &remote_bin(),
        dir.path().join("remote.log"),
        "remote-proxy starting",
        quic,
        |port| {
            let mut a = vec!["--listen".to_string(), format!("127.0.0.1:{port}")];
            a.extend(rest.iter().cloned());
            a
        },
    );
    let remote_addr: SocketAddr = format!("127.0.0.1:{rport}").parse().unwrap();
    let mut eargs = vec![
        "--remote".to_string(),
        remote_addr.to_string(),
        "--connections".into(),
        "2".into(),
    ];
    if !edge_args.contains(&"--connect-ports") {
        // Test origins listen on ephemeral ports.
        eargs.extend(["--connect-ports".to_string(), "any".into()]);
    }
    if !edge_args.contains(&"--carrier") {
        eargs.extend(carrier_args);
    }
    if quic && !edge_args.contains(&"--config") {
        // A lost QUIC peer shows only as silence: a short idle timeout makes the tests that
        // kill the remote see it within seconds (the default is 30 s).
        let p = dir.path().join("edge.toml");
        std::fs::write(
            &p,
            "[pool.quic]\nkeep_alive_ms = 500\nidle_timeout_ms = 3000\n",
        )
        .unwrap();
        eargs.push("--config".into());
        eargs.push(p.to_string_lossy().into());
    }
    eargs.extend(edge_args.iter().map(|s| s.to_string()));
    let (edge, eport) = spawn_on_free_port(
        &edge_bin(),
        dir.path().join("edge.log"),
        "edge-proxy starting",
        false,
        |port| {
            let mut a = vec!["--listen".to_string(), format!("127.0.0.1:{port}")];
            a.extend(eargs.iter().cloned());
            a
        },
    );
    let edge_addr: SocketAddr = format!("127.0.0.1:{eport}").parse().unwrap();
    wait_port(edge_addr, Duration::from_secs(10));
    // The edge serves once the pool is up: one request proves it.
    let start = Instant::now();
    loop {
        let (status, head, _) = raw_request(
            edge_addr,
            b"GET http://127.0.0.1:1/ HTTP/1.1\r\nHost: 127.0.0.1:1\r\n\r\n",
        );
        if status != 0 && !head.contains("remote-unavailable") {
            break;
        }
        // A readiness wait, not a speed check: generous, since a loaded 2-core machine
        // running the whole suite has taken more than 10 s to bring a pool up.
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "pool did not come up within 30 s"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    Pair {
        edge,
        remote,
        edge_addr,
        remote_addr,
        dir,
    }
}

/// Sends raw bytes, reads until the server closes; returns status, head and body.
pub fn raw_request(addr: SocketAddr, req: &[u8]) -> (u16, String, Vec<u8>) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(req).unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    let split = out
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|p| p + 4)
        .unwrap_or(out.len());
    let head = String::from_utf8_lossy(&out[..split]).to_string();
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, head, out[split..].to_vec())
}

/// Deterministic pseudo-random bytes (incompressible, position-dependent).
pub fn pattern(n: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    let mut v = Vec::with_capacity(n);
    while v.len() < n {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.extend_from_slice(&x.to_le_bytes());
    }
    v.truncate(n);
    v
}

/// An nginx origin on loopback: HTTP on `http`, HTTPS on `https` (certificate for
/// `localhost` and 127.0.0.1 in `cert`), serving `dir/www`, PUT allowed under /up/.
pub struct Nginx {
    pub proc: Proc,
    pub http: u16,
    pub https: u16,
    pub www: PathBuf,
    pub cert: PathBuf,
    pub dir: tempfile::TempDir,
}

impl Nginx {
    /// nginx's connection serial numbers of the requests for `uri`, in order.
    pub fn connections_for(&self, uri: &str) -> Vec<u64> {
        std::fs::read_to_string(self.dir.path().join("access.log"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.split_once(' '))
            .filter(|(_, u)| *u == uri)
            .filter_map(|(c, _)| c.parse().ok())
            .collect()
    }
}

/// nginx's configuration for [`start_nginx`]: plain HTTP on `http`, TLS on `https`.
fn nginx_conf(
    user: &str,
    d: &Path,
    www: &Path,
    cert: &Path,
    key: &Path,
    http: u16,
    https: u16,
) -> String {
    format!(
        r#"{user}
worker_processes 1;
daemon off;
pid {d}/nginx.pid;
error_log {d}/error.log warn;
events {{ worker_connections 1024; }}
http {{
    log_format conn '$connection $request_uri';
    access_log {d}/access.log conn;
    client_body_temp_path {d}/tmp;
    proxy_temp_path {d}/tmp;
    fastcgi_temp_path {d}/tmp;
    uwsgi_temp_path {d}/tmp;
    scgi_temp_path {d}/tmp;
    client_max_body_size 200m;
    keepalive_requests 100000;
    default_type application/octet-stream;
    server {{
        listen 127.0.0.1:{http};
        root {www};
        location /up/ {{ dav_methods PUT; create_full_put_path on; }}
    }}
    server {{
        listen 127.0.0.1:{https} ssl;
        ssl_certificate {cert};
        ssl_certificate_key {key};
        root {www};
    }}
}}
"#,
        d = d.display(),
        www = www.display(),
        cert = cert.display(),
        key = key.display(),
    )
}

pub fn start_nginx(files: &[(&str, usize)]) -> Nginx {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let www = d.join("www");
    std::fs::create_dir_all(www.join("up")).unwrap();
    std::fs::create_dir_all(d.join("tmp")).unwrap();
    for (i, (name, size)) in files.iter().enumerate() {
        std::fs::write(www.join(name), pattern(*size, i as u64 + 7)).unwrap();
    }
    let cert = d.join("cert.pem");
    let key = d.join("key.pem");
    let st = Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
        ])
        .args(["-nodes", "-days", "2", "-subj", "/CN=localhost"])
        .args(["-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("openssl");
    assert!(st.success(), "openssl req failed");
    let user = if std::process::Command::new("id")
        .arg("-u")
        .output()
        .map(|o| o.stdout.starts_with(b"0"))
        .unwrap_or(false)
    {
        "user root root;"
    } else {
        ""
    };
    // As `spawn_on_free_port`: a port free when chosen can be taken (by a parallel test's
    // client connection, say) before nginx binds it; nginx then logs "Address already in use"
    // and gives up, and is started again on other ports. It writes its pid file only after
    // every listener is bound, so ports that accept before that may be another process's.
    let pid_file = d.join("nginx.pid");
    let mut attempt = 0;
    let (proc, http, https) = loop {
        attempt += 1;
        let http = free_port();
        let https = free_port();
        let conf = nginx_conf(user, d, &www, &cert, &key, http, https);
        let conf_path = d.join("nginx.conf");
        std::fs::write(&conf_path, conf).unwrap();
        let _ = std::fs::remove_file(d.join("error.log"));
        let _ = std::fs::remove_file(&pid_file);
        let args = vec![
            "-e".to_string(),
            d.join("error.log").to_string_lossy().into(),
            "-p".to_string(),
            d.to_string_lossy().into(),
            "-c".into(),
            conf_path.to_string_lossy().into(),
        ];
        let mut proc = spawn(Path::new("/usr/sbin/nginx"), &args, d.join("nginx.out"));
        proc.term_first = true;
        let start = Instant::now();
        let started = loop {
            if pid_file.exists() {
                break true;
            }
            let log =
                std::fs::read_to_string(d.join("error.log")).unwrap_or_default() + &proc.log_text();
            if log.contains("Address already in use") {
                break false;
            }
            if proc.child.try_wait().expect("try_wait").is_some() {
                panic!("nginx exited before binding its ports:\n{log}");
            }
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "nginx did not bind its ports within 10 s:\n{log}"
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        if started {
            break (proc, http, https);
        }
        drop(proc);
        assert!(attempt < 10, "nginx: no free ports in 10 tries");
    };
    wait_port(loopback(http), Duration::from_secs(10));
    wait_port(loopback(https), Duration::from_secs(10));
    Nginx {
        proc,
        http,
        https,
        www,
        cert,
        dir,
    }
}

/// Runs curl with `args`.
pub fn curl(args: &[&str]) -> Output {
    Command::new("curl")
        .args(["-sS", "--max-time", "120"])
        .args(args)
        .output()
        .expect("curl")
}

/// A scripted origin on loopback: each accepted connection is handed to `f` on its own thread.
pub fn scripted_origin<F>(f: F) -> SocketAddr
where
    F: Fn(TcpStream) + Send + Sync + 'static,
{
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let f = std::sync::Arc::new(f);
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            let f = f.clone();
            std::thread::spawn(move || f(s));
        }
    });
    addr
}

/// Reads a request head from `s` (up to the blank line).
pub fn read_head(s: &mut TcpStream) -> String {
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if s.read(&mut b).unwrap_or(0) == 0 {
            break;
        }
        head.push(b[0]);
    }
    String::from_utf8_lossy(&head).into()
}
