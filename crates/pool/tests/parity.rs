//! Parity datagrams on the QUIC carrier, over loopback through a relay that drops every
//! tenth datagram each way: streams arrive byte for byte, the receiver rebuilds lost
//! datagrams from the parity, and a side with `parity = "off"` neither sends nor is sent any.

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

fn opts(parity: ParityMode) -> QuicOptions {
    QuicOptions {
        parity,
        ..QuicOptions::for_link(Duration::from_millis(20), 100_000_000)
    }
}

/// Relays datagrams between the edge and `to`, dropping every `nth` one in each direction
/// (after the first `spare`, so the handshake is quick); counts what it dropped.
async fn lossy_relay(to: SocketAddr, nth: u64, spare: u64) -> (SocketAddr, Arc<AtomicU64>) {
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
                    if n_up > spare && n_up % nth == 0 {
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

async fn server(dir: &Path, parity: ParityMode) -> Arc<Server> {
    let tls = Arc::new(TlsServer::new(common::tls_files(dir, "remote")).unwrap());
    let s = Arc::new(
        Server::bind_quic(
            "127.0.0.1:0".parse().unwrap(),
            ServerConfig::default(),
            tls,
            opts(parity),
        )
        .await
        .unwrap(),
    );
    common::spawn_echo(s.clone());
    s
}

fn pool(remote: SocketAddr, dir: &Path, parity: ParityMode) -> Pool {
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
    Pool::start_quic(cfg, tls, opts(parity)).unwrap()
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

/// A remote running `remote`, an edge pool running `edge` (through the lossy relay when
/// `lossy`), up; the relay's drop counter.
async fn bed(
    remote: ParityMode,
    edge: ParityMode,
    lossy: bool,
) -> (tempfile::TempDir, Arc<Server>, Pool, Arc<AtomicU64>) {
    let d = tempfile::tempdir().unwrap();
    gen_keys(d.path(), &GenKeysOptions::default()).unwrap();
    let server = server(d.path(), remote).await;
    let (to, dropped) = if lossy {
        lossy_relay(server.local_addr(), 10, 20).await
    } else {
        (server.local_addr(), Arc::new(AtomicU64::new(0)))
    };
    let pool = pool(to, d.path(), edge);
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
    let (_d, server, pool, dropped) = bed(ParityMode::Always, ParityMode::Always, true).await;
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
    let (_d, server, pool, _) = bed(ParityMode::Always, ParityMode::Off, true).await;
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
    let (_d, server, pool, _) = bed(ParityMode::Auto, ParityMode::Auto, false).await;
    exchanges(&pool, 10, 40_000).await;
    let edge = quic_stats(pool.stats());
    let remote = quic_stats(server.stats());
    assert_eq!((edge.parity_sent, remote.parity_sent), (0, 0));
    assert!(!edge.parity_on && !remote.parity_on);
    pool.close(Duration::from_secs(1)).await;
}
