//! Mutually authenticated TLS 1.3 carriers (rustls, ring provider) for the TCP pool.
//!
//! What it does: [`TlsDialer`] (edge) dials TCP, tunes it, and runs a TLS 1.3 handshake that
//! presents the edge's certificate and verifies the remote's certificate name
//! ([`TlsClient`]); [`TlsServer`] (remote) is the [`Upgrader`] that requires a client
//! certificate chaining to one of the configured CA certificates. Both insist on ALPN
//! [`ALPN`] (`longhaul/1`). The handshake runs once per pool connection, never per stream.
//! Certificate, key and CA files are re-read when they change (checked at every dial or
//! accept) or on [`TlsClient::reload`] / [`TlsServer::reload`] (SIGHUP in the binaries): new
//! pool connections use the new files, established ones continue. A file set that fails to
//! load leaves the previous one in force, with a warning. Several CA files (or several
//! certificates in one file) are trusted at once, which is how keys rotate with an overlap.
//! [`gen_keys`] makes a deployment CA and an edge and a remote certificate (ECDSA P-256).
//! [`TlsEndpoint`] is the server side of the edge's HTTPS proxy endpoint (browsers and curl
//! reach the proxy over TLS 1.2 or 1.3, ALPN `h2` or `http/1.1`, no client certificate), with
//! the same reloading.
//!
//! The carrier keeps the TCP socket's [`Probe`] (duplicated descriptor), so `SIOCOUTQ` and
//! `TCP_INFO` keep working; under TLS the kernel send queue counts ciphertext bytes (each
//! TLS record adds 22 bytes of header and tag to at most 16 KiB of plaintext).
//!
//! What it does NOT do: TLS 1.2 on the pool, session resumption (disabled: a resumed session would
//! outlive a CA removed from the trust list), revocation lists, or pinning of raw keys.

use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use rustls::client::WebPkiServerVerifier;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

use crate::carrier::{Carrier, DialFuture, Dialer, Probe, TcpCarrier, Upgrader};
use crate::config::SocketOptions;

/// The ALPN protocol id of the longhaul mux over TLS; both sides refuse a connection that did
/// not agree on it.
pub const ALPN: &[u8] = b"longhaul/1";
/// Name in the remote's certificate made by [`gen_keys`], and the default name the edge
/// verifies.
pub const DEFAULT_SERVER_NAME: &str = "longhaul-remote";
/// Name in the edge's certificate made by [`gen_keys`].
pub const DEFAULT_EDGE_NAME: &str = "longhaul-edge";
/// Validity of the leaf certificates [`gen_keys`] makes, in days (about two years: rotate
/// well before).
pub const DEFAULT_CERT_DAYS: u32 = 825;
/// Validity of the deployment CA [`gen_keys`] makes, in days.
pub const DEFAULT_CA_DAYS: u32 = 3650;

/// A configuration or key-file problem; the message names the file and the reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct TlsError(pub String);

/// Where one side's TLS material lives (PEM files).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// This side's certificate (chain: leaf first).
    pub cert: PathBuf,
    /// This side's private key (PKCS#8, SEC1 or PKCS#1).
    pub key: PathBuf,
    /// CA certificates the peer must chain to; all are trusted at once (rotation overlap).
    pub ca: Vec<PathBuf>,
}

impl TlsFiles {
    fn all(&self) -> impl Iterator<Item = &PathBuf> {
        [&self.cert, &self.key].into_iter().chain(self.ca.iter())
    }
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn read_certs(path: &Path, what: &str) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|it| it.collect::<Result<Vec<_>, _>>())
        .map_err(|e| TlsError(format!("{what} {}: {e}", path.display())))?;
    if certs.is_empty() {
        return Err(TlsError(format!(
            "{what} {}: no PEM certificate in the file",
            path.display()
        )));
    }
    Ok(certs)
}

fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    if let Ok(m) = fs::metadata(path) {
        if m.permissions().mode() & 0o077 != 0 {
            tracing::warn!(
                path = %path.display(),
                mode = format!("{:o}", m.permissions().mode() & 0o777),
                "TLS private key is readable by group or others; chmod 600 it"
            );
        }
    }
    PrivateKeyDer::from_pem_file(path).map_err(|e| TlsError(format!("key {}: {e}", path.display())))
}

fn read_roots(files: &TlsFiles) -> Result<Arc<RootCertStore>, TlsError> {
    if files.ca.is_empty() {
        return Err(TlsError(
            "no CA file configured: the peer cannot be verified".into(),
        ));
    }
    let mut roots = RootCertStore::empty();
    for p in &files.ca {
        for c in read_certs(p, "CA")? {
            roots
                .add(c)
                .map_err(|e| TlsError(format!("CA {}: {e}", p.display())))?;
        }
    }
    Ok(Arc::new(roots))
}

fn bad(files: &TlsFiles, e: rustls::Error) -> TlsError {
    TlsError(format!(
        "certificate {} with key {}: {e}",
        files.cert.display(),
        files.key.display()
    ))
}

/// Builds the edge's rustls configuration from `files`.
fn client_config(files: &TlsFiles) -> Result<ClientConfig, TlsError> {
    let roots = read_roots(files)?;
    let chain = read_certs(&files.cert, "certificate")?;
    let key = read_key(&files.key)?;
    let p = provider();
    let verifier = WebPkiServerVerifier::builder_with_provider(roots, p.clone())
        .build()
        .map_err(|e| TlsError(format!("CA files: {e}")))?;
    let mut cfg = ClientConfig::builder_with_provider(p)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| TlsError(e.to_string()))?
        .with_webpki_verifier(verifier)
        .with_client_auth_cert(chain, key)
        .map_err(|e| bad(files, e))?;
    cfg.alpn_protocols = vec![ALPN.to_vec()];
    cfg.resumption = rustls::client::Resumption::disabled();
    Ok(cfg)
}

/// Builds the remote's rustls configuration from `files`.
fn server_config(files: &TlsFiles) -> Result<ServerConfig, TlsError> {
    let roots = read_roots(files)?;
    let chain = read_certs(&files.cert, "certificate")?;
    let key = read_key(&files.key)?;
    let p = provider();
    let verifier = WebPkiClientVerifier::builder_with_provider(roots, p.clone())
        .build()
        .map_err(|e| TlsError(format!("CA files: {e}")))?;
    let mut cfg = ServerConfig::builder_with_provider(p)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| TlsError(e.to_string()))?
        .with_client_cert_verifier(verifier)
        .with_single_cert(chain, key)
        .map_err(|e| bad(files, e))?;
    cfg.alpn_protocols = vec![ALPN.to_vec()];
    cfg.send_tls13_tickets = 0;
    cfg.session_storage = Arc::new(rustls::server::NoServerSessionStorage {});
    Ok(cfg)
}

/// ALPN protocols of the HTTPS proxy endpoint, in the server's order of preference: HTTP/2
/// (RFC 9113 §3.2) first, then HTTP/1.1.
pub const PROXY_ALPN: &[&[u8]] = &[b"h2", b"http/1.1"];

/// Builds the rustls configuration of the edge's HTTPS proxy endpoint: `files.cert` and
/// `files.key` only (clients are browsers and curl: no client certificate is asked for, so
/// `files.ca` is ignored), TLS 1.2 and 1.3, ALPN [`PROXY_ALPN`].
fn endpoint_config(files: &TlsFiles) -> Result<ServerConfig, TlsError> {
    let chain = read_certs(&files.cert, "certificate")?;
    let key = read_key(&files.key)?;
    let mut cfg = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError(e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|e| bad(files, e))?;
    cfg.alpn_protocols = PROXY_ALPN.iter().map(|p| p.to_vec()).collect();
    Ok(cfg)
}

/// Identity of the files' current versions: (modified, size, inode) per file.
type Stamp = Vec<Option<(SystemTime, u64, u64)>>;

fn stamp(files: &TlsFiles) -> Stamp {
    files
        .all()
        .map(|p| {
            fs::metadata(p).ok().map(|m| {
                (
                    m.modified().unwrap_or(SystemTime::UNIX_EPOCH),
                    m.len(),
                    m.ino(),
                )
            })
        })
        .collect()
}

/// A rustls configuration built from files, rebuilt when they change.
struct Reloading<C> {
    files: TlsFiles,
    build: fn(&TlsFiles) -> Result<C, TlsError>,
    /// The configuration in force and the stamp of the files it was built from (or last
    /// failed to build from: a broken set is not retried until the files change again).
    state: Mutex<(Stamp, Arc<C>)>,
}

impl<C> Reloading<C> {
    fn new(files: TlsFiles, build: fn(&TlsFiles) -> Result<C, TlsError>) -> Result<Self, TlsError> {
        let st = stamp(&files);
        let cfg = Arc::new(build(&files)?);
        Ok(Reloading {
            files,
            build,
            state: Mutex::new((st, cfg)),
        })
    }

    /// Rebuilds from the files now; on failure the previous configuration stays.
    fn reload(&self) -> Result<(), TlsError> {
        let st = stamp(&self.files);
        let r = (self.build)(&self.files);
        let mut g = self.state.lock().unwrap_or_else(|p| p.into_inner());
        g.0 = st;
        g.1 = Arc::new(r?);
        Ok(())
    }

    /// The configuration for a new connection, rebuilt first if a file changed.
    fn current(&self, side: &'static str) -> Arc<C> {
        let st = stamp(&self.files);
        let changed = self.state.lock().unwrap_or_else(|p| p.into_inner()).0 != st;
        if changed {
            match self.reload() {
                Ok(()) => {
                    tracing::info!(side, "TLS files changed: reloaded for new pool connections")
                }
                Err(e) => tracing::warn!(
                    side,
                    error = %e,
                    "TLS files changed but do not load; new pool connections keep the previous ones"
                ),
            }
        }
        self.state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .1
            .clone()
    }
}

/// The edge's TLS: its certificate and key, the CAs the remote must chain to, and the name the
/// remote's certificate must carry.
pub struct TlsClient {
    inner: Reloading<ClientConfig>,
    server_name: ServerName<'static>,
}

impl std::fmt::Debug for TlsClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsClient")
            .field("files", &self.inner.files)
            .field("server_name", &self.server_name)
            .finish()
    }
}

impl TlsClient {
    /// Loads `files` now (errors name the file) and verifies remotes against `server_name`
    /// (a DNS name or an IP address in the remote certificate's subjectAltName).
    pub fn new(files: TlsFiles, server_name: &str) -> Result<TlsClient, TlsError> {
        let server_name = ServerName::try_from(server_name.to_owned())
            .map_err(|e| TlsError(format!("server_name {server_name:?}: {e}")))?;
        Ok(TlsClient {
            inner: Reloading::new(files, client_config)?,
            server_name,
        })
    }

    /// Re-reads the files now (SIGHUP). On error the previous files stay in force.
    pub fn reload(&self) -> Result<(), TlsError> {
        self.inner.reload()
    }

    /// The rustls configuration for a new connection (re-read if a file changed) and the
    /// name the remote's certificate must carry; the QUIC carrier uses both.
    pub(crate) fn current(&self) -> (Arc<ClientConfig>, ServerName<'static>) {
        (self.inner.current("edge"), self.server_name.clone())
    }

    /// Runs the handshake over a tuned TCP connection.
    pub async fn connect(&self, tcp: TcpCarrier) -> io::Result<TlsCarrier> {
        let probe = tcp.probe();
        let peer = fmt_peer(probe.as_ref());
        let cfg = self.inner.current("edge");
        let conn = tokio_rustls::TlsConnector::from(cfg)
            .connect(self.server_name.clone(), tcp)
            .await
            .map_err(|e| handshake_error(&peer, e))?;
        if conn.get_ref().1.alpn_protocol() != Some(ALPN) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("TLS with {peer}: the remote did not agree on ALPN longhaul/1"),
            ));
        }
        Ok(TlsCarrier {
            stream: conn.into(),
            probe,
        })
    }
}

/// The remote's TLS: its certificate and key and the CAs edges' certificates must chain to.
/// As an [`Upgrader`] it refuses connections without a valid client certificate.
pub struct TlsServer {
    inner: Reloading<ServerConfig>,
}

impl std::fmt::Debug for TlsServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsServer")
            .field("files", &self.inner.files)
            .finish()
    }
}

impl TlsServer {
    /// A secret for the QUIC endpoint that outlives the process: SHA-256 of a label and this
    /// side's private key file, so a remote restarted with the same key recognises the
    /// connection ids its predecessor issued and answers their packets with stateless resets
    /// the edge accepts (RFC 9000 §10.3). `None` if the key file cannot be read.
    pub(crate) fn endpoint_secret(&self) -> Option<[u8; 32]> {
        let key = std::fs::read(&self.inner.files.key).ok()?;
        let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
        ctx.update(b"longhaul/1 QUIC endpoint secret");
        ctx.update(&key);
        ctx.finish().as_ref().try_into().ok()
    }

    /// Loads `files` now; errors name the file.
    pub fn new(files: TlsFiles) -> Result<TlsServer, TlsError> {
        Ok(TlsServer {
            inner: Reloading::new(files, server_config)?,
        })
    }

    /// Re-reads the files now (SIGHUP). On error the previous files stay in force.
    pub fn reload(&self) -> Result<(), TlsError> {
        self.inner.reload()
    }

    /// The rustls configuration for new connections (re-read if a file changed); the QUIC
    /// carrier uses it.
    pub(crate) fn current(&self) -> Arc<ServerConfig> {
        self.inner.current("remote")
    }

    /// Runs the handshake over an accepted, tuned TCP connection.
    pub async fn accept(&self, tcp: TcpCarrier) -> io::Result<TlsCarrier> {
        let probe = tcp.probe();
        let peer = fmt_peer(probe.as_ref());
        let cfg = self.inner.current("remote");
        let conn = tokio_rustls::TlsAcceptor::from(cfg)
            .accept(tcp)
            .await
            .map_err(|e| handshake_error(&peer, e))?;
        if conn.get_ref().1.alpn_protocol() != Some(ALPN) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("TLS with {peer}: the edge did not offer ALPN longhaul/1"),
            ));
        }
        tracing::debug!(%peer, "pool connection authenticated (TLS 1.3, client certificate verified)");
        Ok(TlsCarrier {
            stream: conn.into(),
            probe,
        })
    }
}

/// The TLS of the edge's HTTPS proxy endpoint (clients reach the proxy over TLS): a
/// certificate and key, re-read on SIGHUP ([`TlsEndpoint::reload`]) and when a file changes,
/// like the pool's. No client certificate; ALPN [`PROXY_ALPN`].
pub struct TlsEndpoint {
    inner: Reloading<ServerConfig>,
}

impl std::fmt::Debug for TlsEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsEndpoint")
            .field("cert", &self.inner.files.cert)
            .field("key", &self.inner.files.key)
            .finish()
    }
}

impl TlsEndpoint {
    /// Loads `cert` and `key` now; errors name the file.
    pub fn new(cert: PathBuf, key: PathBuf) -> Result<TlsEndpoint, TlsError> {
        let files = TlsFiles {
            cert,
            key,
            ca: Vec::new(),
        };
        Ok(TlsEndpoint {
            inner: Reloading::new(files, endpoint_config)?,
        })
    }

    /// Re-reads the files now (SIGHUP). On error the previous files stay in force.
    pub fn reload(&self) -> Result<(), TlsError> {
        self.inner.reload()
    }

    /// The acceptor for a new client connection (re-read first if a file changed).
    pub fn acceptor(&self) -> tokio_rustls::TlsAcceptor {
        tokio_rustls::TlsAcceptor::from(self.inner.current("https proxy"))
    }
}

impl Upgrader for TlsServer {
    fn upgrade(&self, tcp: TcpCarrier) -> DialFuture<'_> {
        Box::pin(async move {
            let c: Box<dyn Carrier> = Box::new(self.accept(tcp).await?);
            Ok(c)
        })
    }
}

fn fmt_peer(p: &dyn Probe) -> String {
    p.peer_addr()
        .map(|a| a.to_string())
        .unwrap_or_else(|| "unknown peer".into())
}

fn handshake_error(peer: &str, e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("TLS handshake with {peer} failed: {e}"))
}

/// A pool connection over TLS over tuned TCP.
pub struct TlsCarrier {
    stream: tokio_rustls::TlsStream<TcpCarrier>,
    /// The TCP socket's probe: `SIOCOUTQ` counts ciphertext bytes.
    probe: Arc<dyn Probe>,
}

impl std::fmt::Debug for TlsCarrier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsCarrier")
            .field("peer", &self.probe.peer_addr())
            .finish()
    }
}

impl TlsCarrier {
    /// The peer's certificate chain (leaf first), as verified in the handshake.
    pub fn peer_certificates(&self) -> Option<&[CertificateDer<'static>]> {
        match &self.stream {
            tokio_rustls::TlsStream::Client(c) => c.get_ref().1.peer_certificates(),
            tokio_rustls::TlsStream::Server(s) => s.get_ref().1.peer_certificates(),
        }
    }
}

impl Carrier for TlsCarrier {
    fn probe(&self) -> Arc<dyn Probe> {
        self.probe.clone()
    }
}

/// Names the peer in a TLS-level failure after the handshake (in TLS 1.3 a client learns that
/// the server refused its certificate only from the alert that follows), so the log line says
/// who refused and why.
fn with_peer<T>(
    p: std::task::Poll<io::Result<T>>,
    probe: &dyn Probe,
) -> std::task::Poll<io::Result<T>> {
    p.map_err(|e| {
        if e.get_ref().is_some_and(|i| i.is::<rustls::Error>()) {
            io::Error::new(e.kind(), format!("TLS with {}: {e}", fmt_peer(probe)))
        } else {
            e
        }
    })
}

impl AsyncRead for TlsCarrier {
    fn poll_read(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        let this = self.get_mut();
        with_peer(
            std::pin::Pin::new(&mut this.stream).poll_read(cx, buf),
            this.probe.as_ref(),
        )
    }
}

impl AsyncWrite for TlsCarrier {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<io::Result<usize>> {
        std::pin::Pin::new(&mut self.get_mut().stream).poll_write(cx, buf)
    }
    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        std::pin::Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }
    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        std::pin::Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}

/// Dials TLS over tuned TCP to a "host:port" (edge side).
#[derive(Debug, Clone)]
pub struct TlsDialer {
    /// "host:port" of the remote proxy.
    pub remote: String,
    /// Tuning applied to each connection; `connect_timeout` bounds TCP connect plus handshake.
    pub opts: SocketOptions,
    /// Certificates, keys and the expected server name.
    pub tls: Arc<TlsClient>,
}

impl Dialer for TlsDialer {
    fn dial(&self) -> DialFuture<'_> {
        Box::pin(async move {
            let dial = async {
                let stream = TcpStream::connect(&self.remote).await?;
                let tcp = TcpCarrier::new(stream, &self.opts)?;
                self.tls.connect(tcp).await
            };
            let c = tokio::time::timeout(self.opts.connect_timeout, dial)
                .await
                .map_err(|_| {
                    io::Error::new(
                        io::ErrorKind::TimedOut,
                        "connect and TLS handshake timed out",
                    )
                })??;
            let c: Box<dyn Carrier> = Box::new(c);
            Ok(c)
        })
    }
}

/// What [`gen_keys`] makes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GenKeysOptions {
    /// Names (DNS names or IP addresses) in the remote's certificate; the edge's `server_name`
    /// must be one of them. Default: [`DEFAULT_SERVER_NAME`].
    pub server_names: Vec<String>,
    /// Name in the edge's certificate. Default: [`DEFAULT_EDGE_NAME`].
    pub edge_name: String,
    /// Validity of the edge and remote certificates, days.
    pub days: u32,
    /// Validity of the CA certificate, days.
    pub ca_days: u32,
    /// Replace existing files (otherwise an existing file is an error).
    pub force: bool,
}

impl Default for GenKeysOptions {
    fn default() -> Self {
        GenKeysOptions {
            server_names: vec![DEFAULT_SERVER_NAME.to_owned()],
            edge_name: DEFAULT_EDGE_NAME.to_owned(),
            days: DEFAULT_CERT_DAYS,
            ca_days: DEFAULT_CA_DAYS,
            force: false,
        }
    }
}

/// File names [`gen_keys`] writes in its directory: the deployment CA (`ca.pem`, `ca.key`),
/// the edge's (`edge.pem`, `edge.key`) and the remote's (`remote.pem`, `remote.key`).
pub const GEN_KEYS_FILES: [&str; 6] = [
    "ca.pem",
    "ca.key",
    "edge.pem",
    "edge.key",
    "remote.pem",
    "remote.key",
];

/// Makes a new deployment CA and, signed by it, an edge certificate (client authentication)
/// and a remote certificate (server authentication, `opts.server_names`), all ECDSA P-256, as
/// PEM files in `dir` (created if needed): keys with mode 0600, certificates 0644. Returns
/// the paths written, in [`GEN_KEYS_FILES`] order.
pub fn gen_keys(dir: &Path, opts: &GenKeysOptions) -> Result<Vec<PathBuf>, TlsError> {
    use rcgen::{
        BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose,
        IsCa, KeyPair, KeyUsagePurpose,
    };
    let err = |what: &str, e: rcgen::Error| TlsError(format!("{what}: {e}"));
    if opts.server_names.is_empty() {
        return Err(TlsError("at least one server name is needed".into()));
    }
    if opts.days == 0 || opts.ca_days < opts.days {
        return Err(TlsError(format!(
            "days {} must be positive and at most ca_days {}",
            opts.days, opts.ca_days
        )));
    }
    fs::create_dir_all(dir).map_err(|e| TlsError(format!("{}: {e}", dir.display())))?;
    let paths: Vec<PathBuf> = GEN_KEYS_FILES.iter().map(|f| dir.join(f)).collect();
    if !opts.force {
        if let Some(p) = paths.iter().find(|p| p.exists()) {
            return Err(TlsError(format!(
                "{} exists; refusing to overwrite keys (choose another directory, or force)",
                p.display()
            )));
        }
    }
    // Validity starts an hour ago so that small clock differences between hosts do not
    // make fresh certificates "not yet valid".
    let now = time::OffsetDateTime::now_utc() - time::Duration::hours(1);
    let until = |days: u32| now + time::Duration::days(i64::from(days));
    let alg = &rcgen::PKCS_ECDSA_P256_SHA256;

    let ca_key = KeyPair::generate_for(alg).map_err(|e| err("CA key", e))?;
    let mut ca = CertificateParams::new(Vec::<String>::new()).map_err(|e| err("CA", e))?;
    let mut dn = DistinguishedName::new();
    dn.push(DnType::OrganizationName, "longhaul");
    // A random tag makes every CA's name unique, so a certificate from another deployment
    // is reported as an unknown issuer and rotation generations are easy to tell apart.
    dn.push(
        DnType::CommonName,
        format!(
            "longhaul deployment CA {} {:08x}",
            now.date(),
            rand::random::<u32>()
        ),
    );
    ca.distinguished_name = dn;
    ca.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    ca.not_before = now;
    ca.not_after = until(opts.ca_days);
    let ca_cert = ca.self_signed(&ca_key).map_err(|e| err("CA", e))?;

    let leaf = |names: Vec<String>, cn: &str, eku: ExtendedKeyUsagePurpose| {
        let key = KeyPair::generate_for(alg).map_err(|e| err(cn, e))?;
        let mut p = CertificateParams::new(names).map_err(|e| err(cn, e))?;
        let mut dn = DistinguishedName::new();
        dn.push(DnType::OrganizationName, "longhaul");
        dn.push(DnType::CommonName, cn);
        p.distinguished_name = dn;
        p.is_ca = IsCa::ExplicitNoCa;
        p.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        p.extended_key_usages = vec![eku];
        p.use_authority_key_identifier_extension = true;
        p.not_before = now;
        p.not_after = until(opts.days);
        let cert = p
            .signed_by(&key, &ca_cert, &ca_key)
            .map_err(|e| err(cn, e))?;
        Ok::<_, TlsError>((cert.pem(), key.serialize_pem()))
    };
    let (edge_pem, edge_key) = leaf(
        vec![opts.edge_name.clone()],
        &opts.edge_name,
        ExtendedKeyUsagePurpose::ClientAuth,
    )?;
    let (remote_pem, remote_key) = leaf(
        opts.server_names.clone(),
        &opts.server_names[0],
        ExtendedKeyUsagePurpose::ServerAuth,
    )?;
    let contents = [
        ca_cert.pem(),
        ca_key.serialize_pem(),
        edge_pem,
        edge_key,
        remote_pem,
        remote_key,
    ];
    for (p, c) in paths.iter().zip(contents.iter()) {
        let mode = if p.extension().is_some_and(|e| e == "key") {
            0o600
        } else {
            0o644
        };
        write_file(p, c.as_bytes(), mode, opts.force)?;
    }
    Ok(paths)
}

/// Writes a file created with `mode` (an existing one is replaced only with `force`, and
/// gets `mode` too).
fn write_file(p: &Path, data: &[u8], mode: u32, force: bool) -> Result<(), TlsError> {
    let e = |e: io::Error| TlsError(format!("{}: {e}", p.display()));
    let mut o = OpenOptions::new();
    o.write(true).mode(mode);
    if force {
        o.create(true).truncate(true);
    } else {
        o.create_new(true);
    }
    let mut f = o.open(p).map_err(e)?;
    f.set_permissions(fs::Permissions::from_mode(mode))
        .map_err(e)?;
    f.write_all(data).map_err(e)?;
    f.sync_all().map_err(e)
}
