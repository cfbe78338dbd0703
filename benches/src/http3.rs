//! HTTP/3 for the `direct-h3` system: the origin's QUIC side (`pageload h3-origin`, run in the
//! origin namespace beside nginx) and the replay client's HTTP/3 connection.
//!
//! The origin serves the same document root, certificate and key as nginx
//! ([`crate::origin::Site`]) on UDP 443 of every host address, with the same response headers
//! that matter to the clients (`Content-Type` by extension as nginx's `types`,
//! `Content-Length`, `Timing-Allow-Origin: *`, and `Access-Control-Allow-Origin: *` to a request
//! with an `Origin`). It serves `GET` of files only: no ranges, no
//! compression, no caching headers (nginx's `etag off` is matched; nginx's `Last-Modified` is
//! not sent), no Alt-Svc (clients are told to use QUIC). Each response is logged on stderr as
//! one access-log line (peer, host and path, status, bytes, user agent), which shows which
//! client reached it over HTTP/3.
//!
//! Flow-control windows are Chrome's (6 MiB per stream, 15 MiB per connection) on the client;
//! the server allows [`MAX_CONCURRENT_STREAMS`] request streams per connection. The origin's
//! congestion control is quinn's counterpart of its namespace's TCP controller
//! (`net.ipv4.tcp_congestion_control`, the bed profile's, bbr by default: quinn's BBR; cubic:
//! CUBIC; reno: NewReno), so that direct HTTP/3 and direct TCP reply with the same kind of
//! controller (a loss-based one at 1.5 % random loss is a different experiment, not a different
//! protocol); the client's is quinn's default (it sends requests only).

use anyhow::{anyhow, bail, Context, Result};
use bytes::{Buf, Bytes};
use std::net::SocketAddr;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use tokio::io::AsyncReadExt;
use tokio_rustls::rustls;

/// The ALPN of HTTP/3.
pub const ALPN: &[u8] = b"h3";
/// Request streams a client may open at once on one connection (quinn's default; nginx's h2
/// default is 128).
pub const MAX_CONCURRENT_STREAMS: u32 = 100;
/// Client receive window per stream (Chrome's, as for HTTP/2).
pub const STREAM_WINDOW: u32 = 6 * 1024 * 1024;
/// Client receive window per connection (Chrome's, as for HTTP/2).
pub const CONNECTION_WINDOW: u32 = 15 * 1024 * 1024;
/// Server send buffer per connection: room for the client's whole connection window.
pub const SERVER_SEND_WINDOW: u64 = 16 * 1024 * 1024;
/// Size of each DATA frame the origin sends from a file.
pub const CHUNK_BYTES: usize = 64 * 1024;
/// Idle timeout of a QUIC connection, both sides.
pub const IDLE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// A client connection's request handle.
pub type SendRequest = h3::client::SendRequest<h3_quinn::OpenStreams, Bytes>;

/// The `Content-Type` of `path`, as the origin's nginx `types` block gives it.
pub fn content_type(path: &str) -> &'static str {
    match path.rsplit_once('.').map(|(_, e)| e) {
        Some("html") => "text/html",
        Some("css") => "text/css",
        Some("js") => "application/javascript",
        Some("png") => "image/png",
        _ => "application/octet-stream",
    }
}

/// The file under `root` that `host` and `path` name, or `None` when either would leave the
/// host's directory (a `..`, an absolute component, a host that is not a plain name).
pub fn file_for(root: &Path, host: &str, path: &str) -> Option<PathBuf> {
    if host.is_empty()
        || host.starts_with('.')
        || !host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-')
    {
        return None;
    }
    let rel = Path::new(path.strip_prefix('/')?);
    if !rel.components().all(|c| matches!(c, Component::Normal(_))) {
        return None;
    }
    Some(root.join(host).join(rel))
}

fn transport(client: bool) -> quinn::TransportConfig {
    let mut t = quinn::TransportConfig::default();
    t.max_idle_timeout(Some(IDLE_TIMEOUT.try_into().expect("a small idle timeout")));
    if client {
        t.stream_receive_window(STREAM_WINDOW.into())
            .receive_window(CONNECTION_WINDOW.into());
    } else {
        t.max_concurrent_bidi_streams(MAX_CONCURRENT_STREAMS.into())
            .send_window(SERVER_SEND_WINDOW);
    }
    t
}

/// The origin's QUIC configuration: `cert_pem` (chain) and `key_pem`, TLS 1.3, ALPN `h3`.
pub fn server_config(
    cert_pem: &Path,
    key_pem: &Path,
    congestion: Option<&str>,
) -> Result<quinn::ServerConfig> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let certs = CertificateDer::pem_file_iter(cert_pem)
        .with_context(|| format!("reading {}", cert_pem.display()))?
        .collect::<Result<Vec<_>, _>>()
        .context("parsing the certificate")?;
    let key = PrivateKeyDer::from_pem_file(key_pem)
        .with_context(|| format!("reading {}", key_pem.display()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut tls = rustls::ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .context("certificate and key")?;
    tls.alpn_protocols = vec![ALPN.to_vec()];
    let crypto = quinn::crypto::rustls::QuicServerConfig::try_from(tls)
        .map_err(|e| anyhow!("QUIC server TLS: {e}"))?;
    let mut cfg = quinn::ServerConfig::with_crypto(Arc::new(crypto));
    let mut t = transport(false);
    match congestion {
        Some("bbr") => {
            t.congestion_controller_factory(Arc::new(quinn::congestion::BbrConfig::default()));
        }
        Some("reno") => {
            t.congestion_controller_factory(Arc::new(quinn::congestion::NewRenoConfig::default()));
        }
        Some("cubic") | None => {}
        Some(other) => bail!("no QUIC counterpart of the TCP congestion control {other:?}"),
    }
    cfg.transport_config(Arc::new(t));
    Ok(cfg)
}

/// Serves `root` (one directory per host name) over HTTP/3 on every address of `listen`, for
/// good.
pub async fn serve(root: PathBuf, cfg: quinn::ServerConfig, listen: &[SocketAddr]) -> Result<()> {
    spawn_server(root, cfg, listen).await?;
    std::future::pending::<()>().await;
    Ok(())
}

/// Binds an endpoint on every address of `listen`, serves `root` from tasks of their own, and
/// returns the bound addresses (tests bind port 0).
pub async fn spawn_server(
    root: PathBuf,
    cfg: quinn::ServerConfig,
    listen: &[SocketAddr],
) -> Result<Vec<SocketAddr>> {
    let root = Arc::new(root);
    let mut out = Vec::new();
    for addr in listen {
        let ep = quinn::Endpoint::server(cfg.clone(), *addr)
            .with_context(|| format!("binding UDP {addr}"))?;
        out.push(ep.local_addr()?);
        let root = root.clone();
        tokio::spawn(async move {
            while let Some(incoming) = ep.accept().await {
                let root = root.clone();
                tokio::spawn(async move {
                    if let Err(e) = serve_connection(incoming, root).await {
                        tracing::debug!("HTTP/3 connection: {e:#}");
                    }
                });
            }
        });
    }
    Ok(out)
}

async fn serve_connection(incoming: quinn::Incoming, root: Arc<PathBuf>) -> Result<()> {
    let conn = incoming.await.context("QUIC handshake")?;
    let peer = conn.remote_address();
    let mut h3c: h3::server::Connection<h3_quinn::Connection, Bytes> = h3::server::builder()
        .build(h3_quinn::Connection::new(conn))
        .await
        .context("HTTP/3 connection")?;
    loop {
        match h3c.accept().await {
            Ok(Some(resolver)) => {
                let root = root.clone();
                tokio::spawn(async move {
                    match resolver.resolve_request().await {
                        Ok((req, stream)) => {
                            if let Err(e) = respond(&root, peer, req, stream).await {
                                tracing::debug!("HTTP/3 request: {e:#}");
                            }
                        }
                        Err(e) => tracing::debug!("HTTP/3 request head: {e}"),
                    }
                });
            }
            Ok(None) => return Ok(()),
            // The client closing its connection ends up here too.
            Err(e) => {
                tracing::debug!("HTTP/3 connection ended: {e}");
                return Ok(());
            }
        }
    }
}

async fn respond<S>(
    root: &Path,
    peer: SocketAddr,
    req: http::Request<()>,
    mut stream: h3::server::RequestStream<S, Bytes>,
) -> Result<()>
where
    S: h3::quic::BidiStream<Bytes>,
{
    let empty = |status: http::StatusCode| {
        http::Response::builder()
            .status(status)
            .header(http::header::CONTENT_LENGTH, "0")
            .body(())
            .expect("a valid response")
    };
    if req.method() != http::Method::GET {
        stream
            .send_response(empty(http::StatusCode::METHOD_NOT_ALLOWED))
            .await?;
        return Ok(stream.finish().await?);
    }
    let host = req
        .uri()
        .authority()
        .map(|a| a.host().to_string())
        .unwrap_or_default();
    let path = req.uri().path();
    let agent = req
        .headers()
        .get(http::header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("-");
    let log =
        |status: u16, bytes: u64| eprintln!("{peer} GET {host}{path} {status} {bytes} \"{agent}\"");
    let file = match file_for(root, &host, path) {
        Some(f) => tokio::fs::File::open(&f).await.ok(),
        None => None,
    };
    let Some(mut file) = file else {
        log(404, 0);
        stream
            .send_response(empty(http::StatusCode::NOT_FOUND))
            .await?;
        return Ok(stream.finish().await?);
    };
    let len = file.metadata().await?.len();
    let mut resp = http::Response::builder()
        .header(http::header::CONTENT_TYPE, content_type(path))
        .header(http::header::CONTENT_LENGTH, len)
        .header("timing-allow-origin", "*");
    // A CORS request (fonts, style sheets linked `crossorigin` from another host) is allowed, as
    // nginx answers it (crate::origin): a browser drops such a response without the header.
    if req.headers().contains_key(http::header::ORIGIN) {
        resp = resp.header(http::header::ACCESS_CONTROL_ALLOW_ORIGIN, "*");
    }
    let resp = resp.body(()).expect("a valid response");
    stream.send_response(resp).await?;
    log(200, len);
    let mut left = len;
    while left > 0 {
        let mut buf = vec![0u8; CHUNK_BYTES.min(left as usize)];
        file.read_exact(&mut buf)
            .await
            .context("file shorter than its size")?;
        left -= buf.len() as u64;
        stream.send_data(Bytes::from(buf)).await?;
    }
    Ok(stream.finish().await?)
}

/// A client endpoint on an ephemeral UDP port trusting `tls` (whose ALPN is set to `h3` here).
pub fn client_endpoint(mut tls: rustls::ClientConfig) -> Result<quinn::Endpoint> {
    tls.alpn_protocols = vec![ALPN.to_vec()];
    let crypto = quinn::crypto::rustls::QuicClientConfig::try_from(tls)
        .map_err(|e| anyhow!("QUIC client TLS: {e}"))?;
    let mut cfg = quinn::ClientConfig::new(Arc::new(crypto));
    cfg.transport_config(Arc::new(transport(true)));
    let mut ep = quinn::Endpoint::client(SocketAddr::from(([0, 0, 0, 0], 0)))
        .context("binding the client's UDP socket")?;
    ep.set_default_client_config(cfg);
    Ok(ep)
}

/// Opens an HTTP/3 connection to `host` at `addr`; the connection is driven by a task of its
/// own until every [`SendRequest`] is dropped.
pub async fn connect(ep: &quinn::Endpoint, addr: SocketAddr, host: &str) -> Result<SendRequest> {
    let conn = ep
        .connect(addr, host)
        .with_context(|| format!("QUIC to {host} {addr}"))?
        .await
        .with_context(|| format!("QUIC handshake with {host} {addr}"))?;
    let (mut driver, send) = h3::client::new(h3_quinn::Connection::new(conn))
        .await
        .with_context(|| format!("HTTP/3 with {host}"))?;
    tokio::spawn(async move {
        let e = std::future::poll_fn(|cx| driver.poll_close(cx)).await;
        tracing::debug!("HTTP/3 client connection ended: {e}");
    });
    Ok(send)
}

/// One GET of `url` on `send`; returns the status and the body bytes. The request waits in
/// quinn while the connection is at the server's concurrent-stream limit.
pub async fn get(mut send: SendRequest, url: &str) -> Result<(u16, u64)> {
    let req = http::Request::get(url)
        .header(http::header::USER_AGENT, "longhaul-replay")
        .header(http::header::ACCEPT, "*/*")
        .body(())
        .context("building the request")?;
    let mut stream = send.send_request(req).await.context("opening a stream")?;
    stream.finish().await.context("ending the request")?;
    let resp = stream.recv_response().await.context("response")?;
    let mut total = 0u64;
    while let Some(mut chunk) = stream.recv_data().await.context("body")? {
        total += chunk.remaining() as u64;
        chunk.advance(chunk.remaining());
    }
    Ok((resp.status().as_u16(), total))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_stay_inside_their_host_directory() {
        let root = Path::new("/srv/www");
        assert_eq!(
            file_for(root, "www.yahoo.test", "/img/001.png"),
            Some(PathBuf::from("/srv/www/www.yahoo.test/img/001.png"))
        );
        assert_eq!(file_for(root, "www.yahoo.test", "/../x"), None);
        assert_eq!(file_for(root, "www.yahoo.test", "/a/../../x"), None);
        assert_eq!(file_for(root, "..", "/x"), None);
        assert_eq!(file_for(root, "a/b", "/x"), None);
        assert_eq!(file_for(root, "", "/x"), None);
        assert_eq!(file_for(root, "a.test", "x"), None);
        assert_eq!(content_type("/s/1.css"), "text/css");
        assert_eq!(content_type("/bulk.bin"), "application/octet-stream");
        assert_eq!(content_type("/"), "application/octet-stream");
    }
}
