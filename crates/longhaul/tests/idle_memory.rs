//! Memory an idle keep-alive client connection costs the edge: N client connections each make
//! one request through a real edge → remote → origin chain on loopback and stay open, idle;
//! the edge's resident memory (VmRSS) before and after gives the cost per connection.
//!
//! The test runs 2000 connections and asserts at most 8 KiB each. The figure at another count
//! (the limits table in docs/configuration.md gives it at 10 000) comes from
//!
//! ```text
//! LONGHAUL_IDLE_CLIENTS=10000 cargo test --release -p longhaul --test idle_memory -- --nocapture
//! ```
//!
//! which prints `idle clients: N, edge RSS delta: D KiB, per connection: P bytes`.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use common::*;

/// Idle connections the test holds unless `LONGHAUL_IDLE_CLIENTS` says otherwise.
const DEFAULT_CLIENTS: usize = 2000;
/// Most edge memory an idle keep-alive client may cost in the test.
const MAX_BYTES_PER_IDLE_CLIENT: u64 = 8 * 1024;

fn rss_kib(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS")
}

/// An origin answering every request with a small body and closing.
fn origin() -> SocketAddr {
    scripted_origin(|mut s| {
        read_head(&mut s);
        let _ =
            s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello");
    })
}

/// Opens a keep-alive connection to the edge and completes one GET on it; the connection is
/// then idle at the edge.
fn idle_client(edge: SocketAddr, origin: SocketAddr) -> TcpStream {
    let mut s = TcpStream::connect(edge).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(format!("GET http://{origin}/ HTTP/1.1\r\nHost: {origin}\r\n\r\n").as_bytes())
        .unwrap();
    let mut got = Vec::new();
    let mut b = [0u8; 1024];
    while !(got.ends_with(b"hello") && got.windows(4).any(|w| w == b"\r\n\r\n")) {
        let n = s.read(&mut b).unwrap();
        assert!(
            n > 0,
            "the edge closed: {:?}",
            String::from_utf8_lossy(&got)
        );
        got.extend_from_slice(&b[..n]);
    }
    assert!(
        got.starts_with(b"HTTP/1.1 200"),
        "{:?}",
        String::from_utf8_lossy(&got)
    );
    assert!(
        !String::from_utf8_lossy(&got)
            .to_ascii_lowercase()
            .contains("connection: close"),
        "the reply closes the connection: {:?}",
        String::from_utf8_lossy(&got)
    );
    s
}

#[test]
fn idle_keep_alive_clients_cost_little_edge_memory() {
    let n: usize = std::env::var("LONGHAUL_IDLE_CLIENTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(DEFAULT_CLIENTS);
    // The clients' sockets here, the edge's (inherited limit) there, plus some to spare.
    let limit = netsys::raise_open_files_limit(n as u64 + 1024).unwrap();
    assert!(
        limit >= n as u64 + 256,
        "open-files limit {limit} is too low for {n} clients (raise the hard limit)"
    );
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("edge.toml");
    std::fs::write(
        &cfg,
        format!(
            "max_client_connections = {}\nclient_idle_timeout_ms = 600000\n",
            n + 64
        ),
    )
    .unwrap();
    let pair = start_pair("", &["--config", cfg.to_str().unwrap()]);
    let origin = origin();
    let pid = pair.edge.pid();
    // Warm up: the pool streams, the origin path, the allocator's arenas and the runtime's
    // threads are in place before the baseline.
    for _ in 0..64 {
        drop(idle_client(pair.edge_addr, origin));
    }
    std::thread::sleep(Duration::from_secs(1));
    let before = rss_kib(pid);
    let clients: Vec<TcpStream> = (0..n)
        .map(|_| idle_client(pair.edge_addr, origin))
        .collect();
    // Let the edge settle into the idle state on every connection.
    std::thread::sleep(Duration::from_secs(2));
    let after = rss_kib(pid);
    let delta = after.saturating_sub(before);
    let per = delta * 1024 / n as u64;
    println!("idle clients: {n}, edge RSS delta: {delta} KiB, per connection: {per} bytes");
    // Every connection is still open and usable.
    for mut s in clients.into_iter().step_by((n / 16).max(1)) {
        s.write_all(format!("GET http://{origin}/ HTTP/1.1\r\nHost: {origin}\r\n\r\n").as_bytes())
            .unwrap();
        let mut b = [0u8; 12];
        s.read_exact(&mut b).unwrap();
        assert_eq!(&b, b"HTTP/1.1 200");
    }
    assert!(
        per <= MAX_BYTES_PER_IDLE_CLIENT,
        "an idle keep-alive client costs the edge {per} bytes (RSS {before} → {after} KiB for {n})"
    );
}
