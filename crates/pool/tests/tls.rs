//! The pool over mutually authenticated TLS 1.3 on loopback: byte-exact streams, refused
//! peers (no certificate, another CA, wrong server name), and key rotation with an overlap.

mod common;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use pool::tls::{gen_keys, GenKeysOptions, TlsClient, TlsDialer, TlsFiles, TlsServer, ALPN};
use pool::{
    Carrier, Kind, LaneState, Pool, PoolConfig, PoolError, Server, ServerConfig, SocketOptions,
    TcpCarrier, Upgrader,
};
use rustls::pki_types::pem::PemObject;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

fn keys(dir: &Path) {
    gen_keys(dir, &GenKeysOptions::default()).unwrap();
}

fn files(dir: &Path, side: &str, cas: &[&Path]) -> TlsFiles {
    TlsFiles {
        cert: dir.join(format!("{side}.pem")),
        key: dir.join(format!("{side}.key")),
        ca: cas.iter().map(|d| d.join("ca.pem")).collect(),
    }
}

async fn tls_server(tls: Arc<TlsServer>) -> Arc<Server> {
    let up: Arc<dyn Upgrader> = tls;
    let server = Server::bind_with("127.0.0.1:0".parse().unwrap(), ServerConfig::default(), up)
        .await
        .unwrap();
    let server = Arc::new(server);
    common::spawn_echo(server.clone());
    server
}

fn tls_pool(addr: SocketAddr, n: usize, tls: TlsClient) -> Pool {
    let cfg = PoolConfig {
        remote: addr.to_string(),
        connections: n,
        backoff_min: Duration::from_millis(20),
        backoff_max: Duration::from_millis(200),
        ..PoolConfig::default()
    };
    let dialer = Arc::new(TlsDialer {
        remote: cfg.remote.clone(),
        opts: cfg.socket.clone(),
        tls: Arc::new(tls),
    });
    Pool::start_with_dialer(cfg, dialer).unwrap()
}

fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Sends `len` bytes through the echo server and checks they come back unchanged.
async fn echo(pool: &Pool, seed: u64, len: usize) -> std::io::Result<()> {
    let data = pattern(seed, len);
    let first = Bytes::copy_from_slice(&data[..len.min(1000)]);
    let s = pool
        .open(Kind::Tunnel, "echo:1", first.clone())
        .await
        .map_err(std::io::Error::other)?;
    let (mut r, mut w) = tokio::io::split(s);
    let rest = data[first.len()..].to_vec();
    let writer = tokio::spawn(async move {
        w.write_all(&rest).await?;
        w.shutdown().await
    });
    let mut got = Vec::new();
    r.read_to_end(&mut got).await?;
    writer.await.unwrap()?;
    assert_eq!(got.len(), data.len(), "stream {seed}: length");
    assert!(got == data, "stream {seed}: bytes differ");
    Ok(())
}

/// A connected pair of tuned TCP carriers.
async fn tcp_pair() -> (TcpCarrier, TcpCarrier) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let c = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
    let (s, _) = l.accept().await.unwrap();
    let o = SocketOptions::default();
    (
        TcpCarrier::new(c, &o).unwrap(),
        TcpCarrier::new(s, &o).unwrap(),
    )
}

/// No pool connection comes up, `open` fails, and the server yields no stream.
async fn assert_refused(pool: &Pool, server: &Server) {
    assert!(!pool.ready(Duration::from_millis(1500)).await);
    assert!(pool.stats().iter().all(|s| s.state != LaneState::Up));
    assert_eq!(
        pool.open(Kind::Tunnel, "echo:1", Bytes::from_static(b"x"))
            .await
            .unwrap_err(),
        PoolError::Unavailable
    );
    assert!(
        tokio::time::timeout(Duration::from_millis(300), server.accept())
            .await
            .is_err(),
        "a stream was delivered"
    );
    assert!(server.stats().is_empty(), "a session was created");
}

#[tokio::test]
async fn mutual_tls_carries_many_streams_byte_exact() {
    let d = tempfile::tempdir().unwrap();
    keys(d.path());
    let server = tls_server(Arc::new(
        TlsServer::new(files(d.path(), "remote", &[d.path()])).unwrap(),
    ))
    .await;
    let client = TlsClient::new(files(d.path(), "edge", &[d.path()]), "longhaul-remote").unwrap();
    let pool = tls_pool(server.local_addr(), 3, client);
    assert!(pool.ready(Duration::from_secs(10)).await);
    let mut tasks = Vec::new();
    for i in 0..12u64 {
        let pool = pool.clone();
        let len = [1, 1000, 70_000, 600_000][i as usize % 4];
        tasks.push(tokio::spawn(async move { echo(&pool, i, len).await }));
    }
    for t in tasks {
        t.await.unwrap().unwrap();
    }
    // The kernel view of the TCP socket under the TLS carrier stays visible.
    let st = pool.stats();
    let up: Vec<_> = st.iter().filter(|s| s.state == LaneState::Up).collect();
    assert!(!up.is_empty());
    for s in up {
        let info = s.tcp_info.expect("TCP_INFO under TLS");
        assert!(info.snd_mss > 0);
        assert_eq!(s.peer, Some(server.local_addr()));
    }
    pool.close(Duration::from_secs(1)).await;
}

#[tokio::test]
async fn handshake_checks_alpn_and_certificates() {
    let d = tempfile::tempdir().unwrap();
    keys(d.path());
    let srv = TlsServer::new(files(d.path(), "remote", &[d.path()])).unwrap();
    let cli = TlsClient::new(files(d.path(), "edge", &[d.path()]), "longhaul-remote").unwrap();
    let (c, s) = tcp_pair().await;
    let (c, s) = tokio::join!(cli.connect(c), srv.accept(s));
    let (c, s) = (c.unwrap(), s.unwrap());
    // Each side saw the other's certificate chain.
    assert!(c.peer_certificates().is_some_and(|p| !p.is_empty()));
    assert!(s.peer_certificates().is_some_and(|p| !p.is_empty()));

    // A correctly keyed client that does not offer ALPN longhaul/1 is refused.
    let roots = {
        let mut r = rustls::RootCertStore::empty();
        r.add_parsable_certificates(
            rustls::pki_types::CertificateDer::pem_file_iter(d.path().join("ca.pem"))
                .unwrap()
                .map(|c| c.unwrap()),
        );
        r
    };
    let chain = rustls::pki_types::CertificateDer::pem_file_iter(d.path().join("edge.pem"))
        .unwrap()
        .map(|c| c.unwrap())
        .collect();
    let key = rustls::pki_types::PrivateKeyDer::from_pem_file(d.path().join("edge.key")).unwrap();
    let cfg = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_protocol_versions(&[&rustls::version::TLS13])
    .unwrap()
    .with_root_certificates(roots)
    .with_client_auth_cert(chain, key)
    .unwrap();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(cfg));
    let name = rustls::pki_types::ServerName::try_from("longhaul-remote").unwrap();
    let (c, s) = tcp_pair().await;
    let (_, sr) = tokio::join!(connector.connect(name, c), srv.accept(s));
    let se = sr.unwrap_err().to_string();
    assert!(se.contains("did not offer ALPN longhaul/1"), "{se}");
    assert_eq!(ALPN, b"longhaul/1");
}

#[tokio::test]
async fn client_without_certificate_is_refused() {
    let d = tempfile::tempdir().unwrap();
    keys(d.path());
    let tls = Arc::new(TlsServer::new(files(d.path(), "remote", &[d.path()])).unwrap());
    // The server's reason, as it logs it.
    let mut roots = rustls::RootCertStore::empty();
    roots.add_parsable_certificates(
        rustls::pki_types::CertificateDer::pem_file_iter(d.path().join("ca.pem"))
            .unwrap()
            .map(|c| c.unwrap()),
    );
    let mut cfg = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_protocol_versions(&[&rustls::version::TLS13])
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    cfg.alpn_protocols = vec![ALPN.to_vec()];
    let connector = tokio_rustls::TlsConnector::from(Arc::new(cfg));
    let (c, s) = tcp_pair().await;
    let name = rustls::pki_types::ServerName::try_from("longhaul-remote").unwrap();
    let client = async {
        // TLS 1.3: the client finishes first; the server's alert arrives on the first read.
        let mut conn = connector.connect(name, c).await?;
        let mut b = [0u8; 1];
        conn.read(&mut b).await
    };
    let (cr, sr) = tokio::join!(client, tls.accept(s));
    let se = sr.unwrap_err().to_string();
    assert!(se.contains("TLS handshake with 127.0.0.1:"), "{se}");
    assert!(se.contains("peer sent no certificates"), "{se}");
    let ce = cr.unwrap_err().to_string();
    assert!(ce.contains("CertificateRequired"), "{ce}");

    // Through the server: nothing reaches a session.
    let server = tls_server(tls).await;
    let mut c = TcpStream::connect(server.local_addr()).await.unwrap();
    let conn = connector
        .connect(
            rustls::pki_types::ServerName::try_from("longhaul-remote").unwrap(),
            TcpCarrier::new(
                TcpStream::connect(server.local_addr()).await.unwrap(),
                &SocketOptions::default(),
            )
            .unwrap(),
        )
        .await;
    if let Ok(mut conn) = conn {
        let _ = conn.write_all(b"not a HELLO").await;
        let mut b = [0u8; 16];
        assert!(conn.read(&mut b).await.is_err(), "the server kept talking");
    }
    // A plaintext (non-TLS) peer gets nowhere either.
    c.write_all(b"\x00\x00\x10\x01hello plaintext")
        .await
        .unwrap();
    let mut b = [0u8; 64];
    let n = tokio::time::timeout(Duration::from_secs(5), c.read(&mut b))
        .await
        .unwrap()
        .unwrap_or(0);
    assert!(
        n == 0 || b[0] == 0x15,
        "expected a TLS alert or a close, got {:?}",
        &b[..n]
    );
    assert!(
        tokio::time::timeout(Duration::from_millis(300), server.accept())
            .await
            .is_err(),
        "a stream was delivered"
    );
    assert!(server.stats().is_empty(), "a session was created");
}

#[tokio::test]
async fn edge_certificate_from_another_ca_is_refused() {
    let good = tempfile::tempdir().unwrap();
    let other = tempfile::tempdir().unwrap();
    keys(good.path());
    keys(other.path());
    let srv = Arc::new(TlsServer::new(files(good.path(), "remote", &[good.path()])).unwrap());
    // Edge key and certificate from another deployment, trusting the right CA for the remote.
    let edge_files = || TlsFiles {
        ca: vec![good.path().join("ca.pem")],
        ..files(other.path(), "edge", &[])
    };
    let cli = TlsClient::new(edge_files(), "longhaul-remote").unwrap();
    let (c, s) = tcp_pair().await;
    let client = async {
        let mut conn = cli.connect(c).await?;
        let mut b = [0u8; 1];
        conn.read(&mut b).await
    };
    let (cr, sr) = tokio::join!(client, srv.accept(s));
    let se = sr.unwrap_err().to_string();
    assert!(
        se.contains("invalid peer certificate: UnknownIssuer"),
        "{se}"
    );
    assert!(cr.is_err());

    let server = tls_server(srv).await;
    let pool = tls_pool(
        server.local_addr(),
        2,
        TlsClient::new(edge_files(), "longhaul-remote").unwrap(),
    );
    assert_refused(&pool, &server).await;
    pool.close(Duration::ZERO).await;
}

#[tokio::test]
async fn remote_with_wrong_name_or_ca_is_refused_by_the_edge() {
    let d = tempfile::tempdir().unwrap();
    let other = tempfile::tempdir().unwrap();
    keys(d.path());
    keys(other.path());
    let srv = Arc::new(TlsServer::new(files(d.path(), "remote", &[d.path()])).unwrap());

    // A name the remote's certificate does not carry.
    let cli = TlsClient::new(files(d.path(), "edge", &[d.path()]), "remote.example.net").unwrap();
    let (c, s) = tcp_pair().await;
    let (cr, sr) = tokio::join!(cli.connect(c), srv.accept(s));
    let ce = cr.unwrap_err().to_string();
    assert!(ce.contains("TLS handshake with 127.0.0.1:"), "{ce}");
    assert!(ce.contains("certificate not valid for name"), "{ce}");
    assert!(sr.is_err());

    // A remote certificate from another CA.
    let cli2 = TlsClient::new(files(d.path(), "edge", &[other.path()]), "longhaul-remote").unwrap();
    let (c, s) = tcp_pair().await;
    let (cr, _) = tokio::join!(cli2.connect(c), srv.accept(s));
    let ce = cr.unwrap_err().to_string();
    assert!(
        ce.contains("invalid peer certificate: UnknownIssuer"),
        "{ce}"
    );

    let server = tls_server(srv).await;
    let pool = tls_pool(server.local_addr(), 2, cli);
    assert_refused(&pool, &server).await;
    pool.close(Duration::ZERO).await;
}

#[tokio::test]
async fn rotation_with_overlap_keeps_old_and_new_edges_working() {
    let old = tempfile::tempdir().unwrap();
    let new = tempfile::tempdir().unwrap();
    keys(old.path());
    keys(new.path());
    // The remote's live files: its old certificate, trusting the old and the new CA (step 1
    // of the rotation procedure, here as one CA file holding both certificates).
    let live = tempfile::tempdir().unwrap();
    let lp = live.path();
    std::fs::copy(old.path().join("remote.pem"), lp.join("remote.pem")).unwrap();
    std::fs::copy(old.path().join("remote.key"), lp.join("remote.key")).unwrap();
    let both = std::fs::read_to_string(old.path().join("ca.pem")).unwrap()
        + &std::fs::read_to_string(new.path().join("ca.pem")).unwrap();
    std::fs::write(lp.join("ca.pem"), both).unwrap();
    let srv = Arc::new(TlsServer::new(files(lp, "remote", &[lp])).unwrap());
    let server = tls_server(srv.clone()).await;
    let addr = server.local_addr();

    // An edge still on the old keys and one already on the new keys (trusting both CAs).
    let old_edge = tls_pool(
        addr,
        2,
        TlsClient::new(files(old.path(), "edge", &[old.path()]), "longhaul-remote").unwrap(),
    );
    let new_files = || files(new.path(), "edge", &[old.path(), new.path()]);
    let new_edge = tls_pool(
        addr,
        2,
        TlsClient::new(new_files(), "longhaul-remote").unwrap(),
    );
    assert!(old_edge.ready(Duration::from_secs(10)).await);
    assert!(new_edge.ready(Duration::from_secs(10)).await);
    echo(&old_edge, 1, 300_000).await.unwrap();
    echo(&new_edge, 2, 300_000).await.unwrap();

    // The remote moves to its new certificate and reloads (SIGHUP).
    std::fs::copy(new.path().join("remote.pem"), lp.join("remote.pem")).unwrap();
    std::fs::copy(new.path().join("remote.key"), lp.join("remote.key")).unwrap();
    srv.reload().unwrap();
    // Established connections continue, with both edges.
    echo(&old_edge, 3, 300_000).await.unwrap();
    echo(&new_edge, 4, 300_000).await.unwrap();
    // New connections present the new certificate: a new-keyed edge connects...
    let fresh = tls_pool(
        addr,
        1,
        TlsClient::new(new_files(), "longhaul-remote").unwrap(),
    );
    assert!(fresh.ready(Duration::from_secs(10)).await);
    echo(&fresh, 5, 100_000).await.unwrap();
    // ...an edge that trusts only the old CA cannot make a new connection any more.
    let stale = tls_pool(
        addr,
        1,
        TlsClient::new(files(old.path(), "edge", &[old.path()]), "longhaul-remote").unwrap(),
    );
    assert!(!stale.ready(Duration::from_millis(1500)).await);

    // A file set that does not load (key of another certificate) leaves the previous one in
    // force.
    std::fs::copy(old.path().join("remote.key"), lp.join("remote.key")).unwrap();
    let e = srv.reload().unwrap_err().to_string();
    assert!(e.contains("remote.pem"), "{e}");
    let fresh2 = tls_pool(
        addr,
        1,
        TlsClient::new(new_files(), "longhaul-remote").unwrap(),
    );
    assert!(fresh2.ready(Duration::from_secs(10)).await);
    echo(&fresh2, 6, 1000).await.unwrap();

    for p in [old_edge, new_edge, fresh, stale, fresh2] {
        p.close(Duration::ZERO).await;
    }
}

#[tokio::test]
async fn changed_files_are_picked_up_at_the_next_dial() {
    let a = tempfile::tempdir().unwrap();
    let b = tempfile::tempdir().unwrap();
    keys(a.path());
    keys(b.path());
    // The remote trusts only B's CA; the edge's live files start with A's (refused) key.
    let srv = Arc::new(TlsServer::new(files(b.path(), "remote", &[b.path()])).unwrap());
    let server = tls_server(srv).await;
    let live = tempfile::tempdir().unwrap();
    let lp = live.path();
    for f in ["edge.pem", "edge.key"] {
        std::fs::copy(a.path().join(f), lp.join(f)).unwrap();
    }
    let pool = tls_pool(
        server.local_addr(),
        1,
        TlsClient::new(files(lp, "edge", &[b.path()]), "longhaul-remote").unwrap(),
    );
    assert!(!pool.ready(Duration::from_millis(800)).await);
    // Replace the files (as an operator would, without a signal): the next re-dial uses them.
    for f in ["edge.pem", "edge.key"] {
        let tmp = lp.join(format!("{f}.new"));
        std::fs::copy(b.path().join(f), &tmp).unwrap();
        std::fs::rename(&tmp, lp.join(f)).unwrap();
    }
    assert!(pool.ready(Duration::from_secs(10)).await);
    echo(&pool, 7, 50_000).await.unwrap();
    pool.close(Duration::ZERO).await;
}

#[tokio::test]
async fn gen_keys_writes_private_keys_0600_and_refuses_to_overwrite() {
    use std::os::unix::fs::PermissionsExt;
    let d = tempfile::tempdir().unwrap();
    let paths = gen_keys(d.path(), &GenKeysOptions::default()).unwrap();
    assert_eq!(paths.len(), 6);
    for p in &paths {
        let mode = std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        let want = if p.extension().unwrap() == "key" {
            0o600
        } else {
            0o644
        };
        assert_eq!(mode, want, "{}", p.display());
        let text = std::fs::read_to_string(p).unwrap();
        assert!(text.starts_with("-----BEGIN "), "{}", p.display());
    }
    let e = gen_keys(d.path(), &GenKeysOptions::default()).unwrap_err();
    assert!(e.to_string().contains("refusing to overwrite"), "{e}");
    // An IP address as the remote's name works as server_name.
    let d2 = tempfile::tempdir().unwrap();
    gen_keys(
        d2.path(),
        &GenKeysOptions {
            server_names: vec!["127.0.0.1".into(), "remote.example.net".into()],
            ..GenKeysOptions::default()
        },
    )
    .unwrap();
    let cli = TlsClient::new(files(d2.path(), "edge", &[d2.path()]), "127.0.0.1").unwrap();
    let srv = TlsServer::new(files(d2.path(), "remote", &[d2.path()])).unwrap();
    let (c, s) = tcp_pair().await;
    let (c, s) = tokio::join!(cli.connect(c), srv.accept(s));
    c.unwrap();
    s.unwrap();
    // Bad files give errors naming the file.
    let e = TlsClient::new(files(d2.path(), "nosuch", &[d2.path()]), "x").unwrap_err();
    assert!(e.to_string().contains("nosuch.pem"), "{e}");
}

#[tokio::test]
async fn a_refused_client_learns_who_refused_and_why() {
    let good = tempfile::tempdir().unwrap();
    let other = tempfile::tempdir().unwrap();
    keys(good.path());
    keys(other.path());
    let srv = TlsServer::new(files(good.path(), "remote", &[good.path()])).unwrap();
    let cli = TlsClient::new(
        TlsFiles {
            ca: vec![good.path().join("ca.pem")],
            ..files(other.path(), "edge", &[])
        },
        "longhaul-remote",
    )
    .unwrap();
    let (c, s) = tcp_pair().await;
    let server_addr = s.probe().local_addr().unwrap();
    let client = async {
        let mut conn = cli.connect(c).await?;
        let mut b = [0u8; 1];
        conn.read(&mut b).await
    };
    let (cr, _) = tokio::join!(client, srv.accept(s));
    let ce = cr.unwrap_err().to_string();
    assert!(
        ce.contains(&format!("TLS with {server_addr}")) && ce.contains("UnknownCA"),
        "{ce}"
    );
}

#[tokio::test]
async fn a_server_certificate_cannot_serve_as_an_edge_certificate() {
    // Same CA, but the remote's certificate (serverAuth only) presented by a client.
    let d = tempfile::tempdir().unwrap();
    keys(d.path());
    let srv = TlsServer::new(files(d.path(), "remote", &[d.path()])).unwrap();
    let cli = TlsClient::new(files(d.path(), "remote", &[d.path()]), "longhaul-remote").unwrap();
    let (c, s) = tcp_pair().await;
    let client = async {
        let mut conn = cli.connect(c).await?;
        let mut b = [0u8; 1];
        conn.read(&mut b).await
    };
    let (cr, sr) = tokio::join!(client, srv.accept(s));
    let se = sr.unwrap_err().to_string();
    assert!(
        se.contains("invalid peer certificate") && se.contains("client authentication"),
        "{se}"
    );
    assert!(cr.is_err());
}
