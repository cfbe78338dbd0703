//! Parity datagrams on the QUIC carrier, over loopback through a relay that drops every
//! tenth datagram each way (or only towards the edge): streams arrive byte for byte, the
//! receiver rebuilds lost datagrams from the parity, a side with `parity = "off"` neither
//! sends nor is sent any, and `auto` judges a path from the loss the peer's parity reveals.

mod common;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use pool::parity::ParityMode;
use pool::quic::QuicOptions;
use pool::tls::{gen_keys, GenKeysOptions, TlsClient, TlsServer};
use pool::{Kind, Pool, PoolConfig, Server, ServerConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UdpSocket;

/// The link the bed's sides are told of: 20 ms, 100 Mbit/s.
const LINK_BPS: u64 = 100_000_000;

fn opts(parity: ParityMode, link_bps: u64) -> QuicOptions {
    QuicOptions {
        parity,
        ..QuicOptions::for_link(Duration::from_millis(20), link_bps)
    }
}

/// Which datagrams the relay drops.
#[derive(Clone, Copy, PartialEq)]
enum Drops {
    None,
    /// Every tenth each way.
    Both,
    /// Every tenth from the remote to the edge only.
    Down,
}

/// Relays datagrams between the edge and `to`, dropping every `nth` one in each direction
/// (only towards the edge unless `up`; after the first `spare`, so the handshake is quick);
/// counts what it dropped.
async fn lossy_relay(
    to: SocketAddr,
    nth: u64,
    spare: u64,
    up_too: bool,
) -> (SocketAddr, Arc<AtomicU64>) {
    let sock = Arc::new(UdpSocket::bind("127.0.0.1:0").await.unwrap());
    let addr = sock.local_addr().unwrap();
    let dropped = Arc::new(AtomicU64::new(0));
    let d = dropped.clone();
    tokio::spawn(async move {
        let up = Arc::new(UdpSocket::bind("127.0.0.1:0").await.unwrap());
        up.connect(to).await.unwrap();
        let mut client = None;
        let (mut buf, mut back) = (vec![0u8; 65536], vec![0u8; 65536]);
        let (mut n_up, mut n_down) = (0u64, 0u64);
        loop {
            tokio::select! {
                r = sock.recv_from(&mut buf) => {
                    let Ok((n, from)) = r else { return };
                    client = Some(from);
                    n_up += 1;
                    if up_too && n_up > spare && n_up % nth == 0 {
                        d.fetch_add(1, Ordering::Relaxed);
                        continue;
                    }
                    let _ = up.send(&buf[..n]).await;
                }
                r = up.recv(&mut back) => {
                    let Ok(n) = r else { return };
                    n_down += 1;
                    if n_down > spare && n_down % nth == 0 {
                        d.fetch_add(1, Ordering::Relaxed);
                        continue;
                    }
                    if let Some(c) = client {
                        let _ = sock.send_to(&back[..n], c).await;
                    }
                }
            }
        }
    });
    (addr, dropped)
}

async fn server(dir: &Path, parity: ParityMode, link_bps: u64) -> Arc<Server> {
    let tls = Arc::new(TlsServer::new(common::tls_files(dir, "remote")).unwrap());
    let s = Arc::new(
        Server::bind_quic(
            "127.0.0.1:0".parse().unwrap(),
            ServerConfig::default(),
            tls,
            opts(parity, link_bps),
        )
        .await
        .unwrap(),
    );
    common::spawn_echo(s.clone());
    s
}

fn pool(remote: SocketAddr, dir: &Path, parity: ParityMode, link_bps: u64) -> Pool {
    let cfg = PoolConfig {
        remote: remote.to_string(),
        connections: 1,
        ..PoolConfig::default()
    };
    let tls = Arc::new(
        TlsClient::new(
            common::tls_files(dir, "edge"),
            pool::tls::DEFAULT_SERVER_NAME,
        )
        .unwrap(),
    );
    Pool::start_quic(cfg, tls, opts(parity, link_bps)).unwrap()
}

/// Echoes `n` streams of `size` pseudo-random bytes one after another; checks each byte.
async fn exchanges(pool: &Pool, n: usize, size: usize) {
    for i in 0..n {
        let data: Vec<u8> = (0..size)
            .map(|j| {
                (j as u32)
                    .wrapping_mul(2_654_435_761)
                    .wrapping_add(i as u32) as u8
            })
            .collect();
        let mut s = pool.open(Kind::Tunnel, "echo", Bytes::new()).await.unwrap();
        let (mut r, mut w) = tokio::io::split(&mut s);
        let send = async {
            w.write_all(&data).await.unwrap();
            w.shutdown().await.unwrap();
        };
        let mut got = Vec::with_capacity(size);
        let recv = r.read_to_end(&mut got);
        let (_, n) = tokio::join!(send, recv);
        n.unwrap();
        assert!(got == data, "stream {i}: echo differs");
    }
}

/// A remote running `remote`, an edge pool running `edge` (through a relay dropping `drops`),
/// both told of a link of `link_bps`, up; the relay's drop counter.
async fn bed(
    remote: ParityMode,
    edge: ParityMode,
    drops: Drops,
    link_bps: u64,
) -> (tempfile::TempDir, Arc<Server>, Pool, Arc<AtomicU64>) {
    let d = tempfile::tempdir().unwrap();
    gen_keys(d.path(), &GenKeysOptions::default()).unwrap();
    let server = server(d.path(), remote, link_bps).await;
    let (to, dropped) = match drops {
        Drops::None => (server.local_addr(), Arc::new(AtomicU64::new(0))),
        Drops::Both => lossy_relay(server.local_addr(), 10, 20, true).await,
        Drops::Down => lossy_relay(server.local_addr(), 10, 20, false).await,
    };
    let pool = pool(to, d.path(), edge, link_bps);
    assert!(pool.ready(Duration::from_secs(10)).await, "pool up");
    (d, server, pool, dropped)
}

fn quic_stats(stats: Vec<pool::ConnStats>) -> pool::quic::QuicConnStats {
    stats
        .into_iter()
        .find_map(|s| s.quic)
        .expect("a QUIC connection")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parity_rebuilds_lost_datagrams_both_ways() {
    let (_d, server, pool, dropped) = bed(
        ParityMode::Always,
        ParityMode::Always,
        Drops::Both,
        LINK_BPS,
    )
    .await;
    exchanges(&pool, 30, 40_000).await;
    let edge = quic_stats(pool.stats());
    let remote = quic_stats(server.stats());
    eprintln!(
        "dropped {}; edge: parity sent {} rebuilt {} lost {}; remote: parity sent {} rebuilt {} \
         lost {}",
        dropped.load(Ordering::Relaxed),
        edge.parity_sent,
        edge.parity_rebuilt,
        edge.lost_packets,
        remote.parity_sent,
        remote.parity_rebuilt,
        remote.lost_packets
    );
    assert!(dropped.load(Ordering::Relaxed) > 20);
    assert!(edge.parity_on && remote.parity_on);
    assert!(edge.parity_sent > 0 && remote.parity_sent > 0);
    assert!(
        edge.parity_rebuilt > 0,
        "the edge rebuilt replies' datagrams"
    );
    assert!(
        remote.parity_rebuilt > 0,
        "the remote rebuilt requests' datagrams"
    );
    pool.close(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_side_without_parity_is_sent_none() {
    let (_d, server, pool, _) =
        bed(ParityMode::Always, ParityMode::Off, Drops::Both, LINK_BPS).await;
    exchanges(&pool, 10, 40_000).await;
    let edge = quic_stats(pool.stats());
    let remote = quic_stats(server.stats());
    assert!(!remote.parity_on && remote.parity_sent == 0, "{remote:?}");
    assert!(!edge.parity_on && edge.parity_sent == 0 && edge.parity_rebuilt == 0);
    pool.close(Duration::from_secs(1)).await;
}

/// `auto` protects nothing on a clean path: no parity crosses it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_sends_no_parity_on_a_clean_path() {
    let (_d, server, pool, _) =
        bed(ParityMode::Auto, ParityMode::Auto, Drops::None, LINK_BPS).await;
    exchanges(&pool, 10, 40_000).await;
    let edge = quic_stats(pool.stats());
    let remote = quic_stats(server.stats());
    assert_eq!((edge.parity_sent, remote.parity_sent), (0, 0));
    assert!(!edge.parity_on && !remote.parity_on);
    pool.close(Duration::from_secs(1)).await;
}

/// An edge whose own sends cross a clean path still judges the path lossy, within seconds,
/// from the datagrams missing from the remote's protected groups: the edge sends few packets
/// of its own (requests, acknowledgements), and waiting for a thousand of them to judge by
/// would leave its first pages unprotected.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_judges_the_path_from_what_the_peer_protects() {
    // Told of a link loopback does not fill: parity is never held back for a busy link.
    let (_d, _server, pool, dropped) = bed(
        ParityMode::Always,
        ParityMode::Auto,
        Drops::Down,
        10_000_000_000,
    )
    .await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        exchanges(&pool, 5, 40_000).await;
        if quic_stats(pool.stats()).parity_on {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "edge never judged the path lossy: {:?}",
            quic_stats(pool.stats())
        );
    }
    let edge = quic_stats(pool.stats());
    assert!(dropped.load(Ordering::Relaxed) > 0);
    assert_eq!(
        edge.lost_packets, 0,
        "nothing the edge sent was lost: {edge:?}"
    );
    // Its own sends lost nothing: the judgement came from the remote's groups, which also
    // repaired what the relay dropped.
    assert!(edge.parity_rebuilt > 0, "{edge:?}");
    pool.close(Duration::from_secs(1)).await;
}
