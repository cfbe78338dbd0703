//! Opens at the stream limit wait (bounded, first come first served) for a stream slot instead
//! of failing: over the mux on loopback TCP, and over QUIC, against a remote whose
//! `max_streams` is 2.

mod common;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use pool::quic::QuicOptions;
use pool::tls::{gen_keys, GenKeysOptions, TlsClient, TlsServer};
use pool::{Kind, MuxStream, Pool, PoolConfig, PoolError, Server, ServerConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The remote's (and, over QUIC, the edge's assumed) stream limit.
const LIMIT: u32 = 2;
/// A wait long enough never to end in the tests that expect the open to succeed.
const LONG: Duration = Duration::from_secs(20);

fn server_cfg() -> ServerConfig {
    ServerConfig {
        mux: mux::Config {
            max_streams: LIMIT,
            ..mux::Config::default()
        },
        ..ServerConfig::default()
    }
}

fn pool_cfg(remote: SocketAddr, wait: Duration, queue: usize) -> PoolConfig {
    PoolConfig {
        remote: remote.to_string(),
        connections: 2,
        backoff_min: Duration::from_millis(20),
        backoff_max: Duration::from_millis(200),
        open_wait: wait,
        open_queue: queue,
        ..PoolConfig::default()
    }
}

async fn tcp_pair(wait: Duration, queue: usize) -> (Arc<Server>, Pool) {
    let server = Arc::new(
        Server::bind("127.0.0.1:0".parse().unwrap(), server_cfg())
            .await
            .unwrap(),
    );
    common::spawn_echo(server.clone());
    let pool = Pool::start(pool_cfg(server.local_addr(), wait, queue));
    assert!(pool.ready(Duration::from_secs(5)).await);
    // Both connections up, so "every connection is full" is what is tested.
    wait_for(|| pool.load().up == 2).await;
    (server, pool)
}

fn quic_opts(max_streams: u32) -> QuicOptions {
    QuicOptions {
        max_streams,
        ..QuicOptions::default()
    }
}

/// A QUIC remote granting `LIMIT` streams per connection, and a pool of one connection that
/// assumes `edge_limit`.
async fn quic_pair(
    dir: &Path,
    edge_limit: u32,
    wait: Duration,
    queue: usize,
) -> (Arc<Server>, Pool) {
    let tls = Arc::new(TlsServer::new(common::tls_files(dir, "remote")).unwrap());
    let server = Arc::new(
        Server::bind_quic(
            "127.0.0.1:0".parse().unwrap(),
            ServerConfig::default(),
            tls,
            quic_opts(LIMIT),
        )
        .await
        .unwrap(),
    );
    common::spawn_echo(server.clone());
    let cfg = PoolConfig {
        connections: 1,
        ..pool_cfg(server.local_addr(), wait, queue)
    };
    let tls = Arc::new(TlsClient::new(common::tls_files(dir, "edge"), "longhaul-remote").unwrap());
    let pool = Pool::start_quic(cfg, tls, quic_opts(edge_limit)).unwrap();
    assert!(pool.ready(Duration::from_secs(5)).await);
    (server, pool)
}

fn keys() -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    gen_keys(d.path(), &GenKeysOptions::default()).unwrap();
    d
}

async fn wait_for(cond: impl Fn() -> bool) {
    for _ in 0..1000 {
        if cond() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("condition not reached within 5 s");
}

async fn open(pool: &Pool, tag: &str) -> Result<MuxStream, PoolError> {
    pool.open(
        Kind::Tunnel,
        "echo:7",
        Bytes::copy_from_slice(tag.as_bytes()),
    )
    .await
}

/// Ends our direction and reads the echo to its end: the stream is then finished both ways
/// and forgotten once dropped.
async fn finish(mut s: MuxStream, tag: &str) {
    s.shutdown().await.unwrap();
    let mut got = Vec::new();
    s.read_to_end(&mut got).await.unwrap();
    assert_eq!(got, tag.as_bytes());
}

/// A third open waits while two streams hold both slots, and goes out once one finishes.
async fn third_open_waits_for_a_slot(pool: &Pool) {
    // What the edge's `longhaul_pool_stream_limit` gauge reports.
    assert_eq!(pool.stream_limit(), LIMIT as usize);
    let a = open(pool, "a").await.unwrap();
    let b = open(pool, "b").await.unwrap();
    let p = pool.clone();
    let third = tokio::spawn(async move {
        let t = Instant::now();
        let r = open(&p, "c").await;
        (r, t.elapsed())
    });
    wait_for(|| pool.open_waiting() == 1).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!third.is_finished(), "the third open must wait for a slot");
    finish(a, "a").await;
    let (c, waited) = third.await.unwrap();
    let c = c.expect("the waiting open gets the freed slot");
    assert!(
        waited < LONG,
        "it went out when the slot freed, not at the deadline"
    );
    assert_eq!(pool.open_waiting(), 0);
    finish(c, "c").await;
    finish(b, "b").await;
}

/// With both slots held for good, an open fails with `StreamLimit` once the wait ends.
async fn open_fails_after_the_wait(pool: &Pool, wait: Duration) {
    let _a = open(pool, "a").await.unwrap();
    let _b = open(pool, "b").await.unwrap();
    let t = Instant::now();
    match open(pool, "c").await {
        Err(PoolError::StreamLimit { waited, queue_full }) => {
            assert!(!queue_full);
            assert!(waited >= wait, "waited {waited:?}, configured {wait:?}");
            assert!(t.elapsed() >= wait);
        }
        other => panic!("expected StreamLimit, got {other:?}"),
    }
    assert_eq!(pool.open_waiting(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mux_open_at_the_limit_waits_for_a_slot() {
    let (_server, pool) = tcp_pair(LONG, 8).await;
    third_open_waits_for_a_slot(&pool).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mux_open_fails_with_stream_limit_after_the_wait() {
    let wait = Duration::from_millis(300);
    let (_server, pool) = tcp_pair(wait, 8).await;
    open_fails_after_the_wait(&pool, wait).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mux_wait_queue_is_bounded() {
    let (_server, pool) = tcp_pair(LONG, 1).await;
    let a = open(&pool, "a").await.unwrap();
    let _b = open(&pool, "b").await.unwrap();
    let p = pool.clone();
    let waiter = tokio::spawn(async move { open(&p, "c").await });
    wait_for(|| pool.open_waiting() == 1).await;
    // The queue holds one waiter: the next open fails at once, without waiting.
    match open(&pool, "d").await {
        Err(PoolError::StreamLimit { waited, queue_full }) => {
            assert!(queue_full);
            assert_eq!(waited, Duration::ZERO);
        }
        other => panic!("expected a full queue, got {other:?}"),
    }
    // try_open never queues and never overtakes the waiter.
    assert!(matches!(
        pool.try_open(Kind::Tunnel, "echo:7", Bytes::new()).await,
        Err(PoolError::StreamLimit { .. })
    ));
    finish(a, "a").await;
    finish(waiter.await.unwrap().unwrap(), "c").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mux_waiters_fail_fast_when_the_pool_closes() {
    let (_server, pool) = tcp_pair(LONG, 8).await;
    let _a = open(&pool, "a").await.unwrap();
    let _b = open(&pool, "b").await.unwrap();
    let p = pool.clone();
    let waiter = tokio::spawn(async move { open(&p, "c").await });
    wait_for(|| pool.open_waiting() == 1).await;
    let p = pool.clone();
    let closing = tokio::spawn(async move { p.close(Duration::from_millis(200)).await });
    let r = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("the waiter is woken by the close, not by its deadline")
        .unwrap();
    assert_eq!(r.err(), Some(PoolError::Draining));
    closing.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mux_waiters_are_served_in_arrival_order() {
    let (_server, pool) = tcp_pair(LONG, 8).await;
    let a = open(&pool, "a").await.unwrap();
    let b = open(&pool, "b").await.unwrap();
    let mut waiters = Vec::new();
    for n in 0..2 {
        let p = pool.clone();
        waiters.push(tokio::spawn(async move {
            let s = open(&p, &format!("w{n}")).await.unwrap();
            (n, s)
        }));
        wait_for(|| pool.open_waiting() == n + 1).await;
    }
    // One slot frees: the first waiter gets it; the second still waits.
    finish(a, "a").await;
    wait_for(|| pool.open_waiting() == 1).await;
    let second = waiters.pop().unwrap();
    let (n, s0) = waiters.pop().unwrap().await.unwrap();
    assert_eq!(n, 0);
    assert!(!second.is_finished());
    finish(b, "b").await;
    let (n, s1) = second.await.unwrap();
    assert_eq!(n, 1);
    finish(s0, "w0").await;
    finish(s1, "w1").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quic_open_at_the_limit_waits_for_a_slot() {
    let d = keys();
    let (_server, pool) = quic_pair(d.path(), LIMIT, LONG, 8).await;
    third_open_waits_for_a_slot(&pool).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quic_open_fails_with_stream_limit_after_the_wait() {
    let d = keys();
    let wait = Duration::from_millis(300);
    let (_server, pool) = quic_pair(d.path(), LIMIT, wait, 8).await;
    open_fails_after_the_wait(&pool, wait).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quic_wait_queue_is_bounded() {
    let d = keys();
    let (_server, pool) = quic_pair(d.path(), LIMIT, LONG, 1).await;
    let _a = open(&pool, "a").await.unwrap();
    let _b = open(&pool, "b").await.unwrap();
    let p = pool.clone();
    let _waiter = tokio::spawn(async move { open(&p, "c").await });
    wait_for(|| pool.open_waiting() == 1).await;
    assert!(matches!(
        open(&pool, "d").await,
        Err(PoolError::StreamLimit {
            queue_full: true,
            ..
        })
    ));
}

/// The remote grants fewer streams than the edge assumes: the open waits for the remote's
/// credit, within the same bounded wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quic_remote_granting_fewer_streams_is_waited_for_too() {
    let d = keys();
    let wait = Duration::from_millis(300);
    let (_server, pool) = quic_pair(d.path(), 8, wait, 8).await;
    open_fails_after_the_wait(&pool, wait).await;
    let (_server, pool) = quic_pair(d.path(), 8, LONG, 8).await;
    let a = open(&pool, "a").await.unwrap();
    let _b = open(&pool, "b").await.unwrap();
    let p = pool.clone();
    let third = tokio::spawn(async move { open(&p, "c").await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!third.is_finished());
    finish(a, "a").await;
    finish(third.await.unwrap().unwrap(), "c").await;
}
