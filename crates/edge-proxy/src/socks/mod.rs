//! The SOCKS5 listener (RFC 1928, with RFC 1929 username/password authentication): CONNECT
//! requests become tunnels over the pool, exactly as HTTP CONNECT does.
//!
//! What it does: negotiates the method (no authentication when no user is configured;
//! username/password, checked in constant time ([`auth`]), when users are, and then only that),
//! reads the request within a bounded handshake time and size ([`codec`]), applies the edge's
//! client networks (`allowed_clients`, the check of every listener) and the tunnel port policy
//! ([`client::check_port`], as HTTP CONNECT does, over its own list `socks.connect_ports`:
//! SOCKS carries every protocol, plain HTTP included, so its default is any port), and opens
//! the tunnel the way `connect_reply` says: optimistic (success answered at once, the far side
//! connects while the client already sends; a far-side failure then closes the connection) or
//! after connect (the far side's outcome becomes the reply code). Domain names are never
//! resolved here: `host:port` is the stream's target and the remote resolves it, as it does for
//! HTTP CONNECT; IPv4 and IPv6 literals likewise. Bytes the client sends after its request,
//! before the reply, travel as the tunnel's first bytes. Failures are answered with the reply
//! code [`crate::errors::EdgeError::socks_reply`] maps them to; malformed input, a timeout or a
//! failed authentication close the connection with a reason in the log. Every connection gets
//! one access-log record (method `SOCKS5`, status 0: SOCKS has no HTTP status; the detail holds
//! a refusal's reply code and the authenticated user).
//!
//! Replies report `0.0.0.0:0` as the bound address ([`codec::BOUND`]): the connection to the
//! destination is made on the far side, so no address of this host would be true.
//!
//! What it does NOT do: BIND, UDP ASSOCIATE (answered "command not supported"), GSSAPI
//! (never selected), SOCKS4/4a, or resolve names.

pub mod auth;
pub mod codec;

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::client::{self, ConnectReply, Ctx};
use crate::errors::EdgeError;
use crate::transport::{StreamKind, Transport};
use crate::tunnel::{self, FarConnect};
use app::access::{Access, Peer};
use codec::{Command, Malformed, Method, Parsed, Reply, Request};

/// The access log's method for SOCKS5 connections.
pub const METHOD: &str = "SOCKS5";
/// Access-log outcome of a client whose username/password was refused.
pub const AUTH_FAILED: &str = "socks-auth-failed";
/// Access-log outcome of a client that offered no method the edge accepts.
pub const NO_METHOD: &str = "socks-no-method";
/// Access-log outcome of a client that went away (or reset) during the handshake.
pub const CLIENT_GONE: &str = "client-gone";
/// Most bytes read from a client in one read during the handshake; with [`codec::MAX_MESSAGE`]
/// it bounds the handshake buffer.
const READ_CHUNK: usize = 2048;

/// How the SOCKS5 listener behaves.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Longest time from the connection to the complete request.
    pub handshake_timeout: Duration,
    /// Users allowed; empty: no authentication.
    pub users: auth::Users,
    /// Ports CONNECT may reach; empty: any ([`client::check_port`], the policy of HTTP
    /// CONNECT).
    pub connect_ports: Vec<u16>,
}

/// The SOCKS5 listener and its settings.
pub struct SocksListener {
    /// Bound listener.
    pub listener: TcpListener,
    /// Behaviour.
    pub settings: Arc<Settings>,
}

/// Why a handshake ended without a tunnel.
enum Stop {
    /// Answer the request with this failure's reply code, then close.
    Refuse(EdgeError),
    /// Close without a reply: the client is not speaking SOCKS5, went away, or was already
    /// told (no acceptable method, failed authentication).
    Close {
        outcome: &'static str,
        detail: String,
    },
}

impl Stop {
    fn malformed(what: &str, m: Malformed) -> Stop {
        Stop::Close {
            outcome: http1::reply::ErrorTag::BadRequest.as_str(),
            detail: format!("malformed SOCKS5 {what}: {m}"),
        }
    }
}

/// A complete handshake: the request, who authenticated, and bytes the client sent after it.
struct Handshake {
    request: Request,
    user: Option<String>,
    early: Bytes,
}

/// Serves one SOCKS5 client connection to completion.
pub(crate) async fn serve<T: Transport>(
    ctx: Arc<Ctx<T>>,
    socks: Arc<Settings>,
    mut sock: TcpStream,
    peer: SocketAddr,
) {
    let started = Instant::now();
    let _ = sock.set_nodelay(true);
    if let Err(e) = client::set_client_timeouts(&sock, ctx.settings.send_timeout) {
        tracing::debug!(%peer, error = %e, "client socket timeouts not set");
    }
    let allowed = ctx.settings.client_allowed(peer.ip());
    let hs = tokio::time::timeout(
        socks.handshake_timeout,
        handshake(&socks, &mut sock, peer, allowed),
    )
    .await;
    let hs = match hs {
        Ok(Ok(h)) => h,
        Ok(Err(Stop::Refuse(err))) => {
            refuse(&mut sock, peer, "-", &err, None, started).await;
            return;
        }
        Ok(Err(Stop::Close { outcome, detail })) => {
            close(&mut sock, peer, "-", outcome, detail, started).await;
            return;
        }
        Err(_) => {
            let err = EdgeError::HeaderTimeout(format!(
                "SOCKS5 handshake not complete within {} ms",
                socks.handshake_timeout.as_millis()
            ));
            let (outcome, detail) = (err.tag().as_str(), err.to_string());
            close(&mut sock, peer, "-", outcome, detail, started).await;
            return;
        }
    };
    let target = hs.request.authority().target();
    let user = hs.user.as_deref();
    let checked = if !allowed {
        Err(EdgeError::ForbiddenClient(peer.ip()))
    } else if hs.request.command != Command::CONNECT {
        Err(EdgeError::SocksCommand(format!(
            "{:?} (only CONNECT is carried)",
            hs.request.command
        )))
    } else {
        client::check_port(&socks.connect_ports, hs.request.port)
    };
    if let Err(err) = checked {
        refuse(&mut sock, peer, &target, &err, user, started).await;
        return;
    }
    connect(&ctx, sock, peer, &target, user, hs.early, started).await;
}

/// Greeting, authentication and request (any command: the caller answers it). A client outside
/// `allowed_clients` is not asked for credentials: it gets "connection not allowed by ruleset"
/// to its request when it offered "no authentication", "no acceptable methods" otherwise.
async fn handshake(
    socks: &Settings,
    sock: &mut TcpStream,
    peer: SocketAddr,
    allowed: bool,
) -> Result<Handshake, Stop> {
    let mut buf = BytesMut::with_capacity(512);
    let greeting = read_message(sock, &mut buf, codec::parse_greeting)
        .await?
        .map_err(|m| Stop::malformed("greeting", m))?;
    let offers = |m| greeting.methods.contains(&m);
    let method = if !allowed || socks.users.is_empty() {
        Method::NO_AUTH
    } else {
        Method::USER_PASSWORD
    };
    if !offers(method) {
        let _ = sock
            .write_all(&codec::encode_method(Method::NONE_ACCEPTABLE))
            .await;
        let detail = if allowed {
            format!(
                "the client offered {:?}; the edge accepts only {method:?}",
                greeting.methods
            )
        } else {
            EdgeError::ForbiddenClient(peer.ip()).to_string()
        };
        let outcome = if allowed {
            NO_METHOD
        } else {
            http1::reply::ErrorTag::ForbiddenClient.as_str()
        };
        return Err(Stop::Close { outcome, detail });
    }
    write(sock, &codec::encode_method(method)).await?;
    let mut user = None;
    if method == Method::USER_PASSWORD {
        let creds = read_message(sock, &mut buf, codec::parse_credentials)
            .await?
            .map_err(|m| Stop::malformed("username/password request", m))?;
        let name = String::from_utf8_lossy(&creds.user).into_owned();
        let ok = socks.users.check(&creds);
        write(sock, &codec::encode_auth_status(ok)).await?;
        if !ok {
            return Err(Stop::Close {
                outcome: AUTH_FAILED,
                detail: format!("wrong user name or password (user {name:?})"),
            });
        }
        user = Some(name);
    }
    let request = match read_message(sock, &mut buf, codec::parse_request).await? {
        Ok(r) => r,
        Err(Malformed::AddressType(t)) => {
            return Err(Stop::Refuse(EdgeError::SocksAddressType(format!(
                "0x{t:02x}"
            ))))
        }
        // The request's framing is known to be broken: a reply still tells the client why.
        Err(m) => {
            return Err(Stop::Refuse(EdgeError::BadRequest(format!(
                "malformed SOCKS5 request: {m}"
            ))))
        }
    };
    Ok(Handshake {
        request,
        user,
        early: buf.freeze(),
    })
}

/// Reads until `parse` finds a complete message in `buf` (which then holds what followed it).
/// `Err`: the client went away; `Ok(Err)`: the bytes are not a valid message.
async fn read_message<M>(
    sock: &mut TcpStream,
    buf: &mut BytesMut,
    parse: fn(&[u8]) -> Parsed<M>,
) -> Result<Result<M, Malformed>, Stop> {
    let mut chunk = [0u8; READ_CHUNK];
    loop {
        match parse(buf) {
            Ok(Some((m, used))) => {
                buf.advance(used);
                return Ok(Ok(m));
            }
            Err(e) => return Ok(Err(e)),
            // Every message is complete within MAX_MESSAGE bytes, so a parser that still
            // wants more has less than that: the buffer stays below MAX_MESSAGE + READ_CHUNK.
            Ok(None) => debug_assert!(buf.len() < codec::MAX_MESSAGE),
        }
        let n = match sock.read(&mut chunk).await {
            Ok(0) => {
                return Err(Stop::Close {
                    outcome: CLIENT_GONE,
                    detail: format!(
                        "the client closed during the SOCKS5 handshake ({} bytes of a message \
                         pending)",
                        buf.len()
                    ),
                })
            }
            Ok(n) => n,
            Err(e) => return Err(gone(&e)),
        };
        buf.extend_from_slice(&chunk[..n]);
    }
}

fn gone(e: &std::io::Error) -> Stop {
    Stop::Close {
        outcome: CLIENT_GONE,
        detail: format!("client connection failed during the SOCKS5 handshake: {e}"),
    }
}

async fn write(sock: &mut TcpStream, bytes: &[u8]) -> Result<(), Stop> {
    sock.write_all(bytes).await.map_err(|e| gone(&e))
}

/// Answers the request with `err`'s reply code, closes, and logs the refusal.
async fn refuse(
    sock: &mut TcpStream,
    peer: SocketAddr,
    target: &str,
    err: &EdgeError,
    user: Option<&str>,
    started: Instant,
) {
    let rep = err.socks_reply();
    let _ = sock.write_all(&codec::encode_reply(rep)).await;
    let detail = match user {
        Some(u) => format!("reply {rep}, user {u:?}: {err}"),
        None => format!("reply {rep}: {err}"),
    };
    close(sock, peer, target, err.tag().as_str(), detail, started).await;
}

/// Closes the connection (after the client's own close, bounded, so a reply written just
/// before is not destroyed by a reset) and logs the record.
async fn close(
    sock: &mut TcpStream,
    peer: SocketAddr,
    target: &str,
    outcome: &'static str,
    detail: String,
    started: Instant,
) {
    tracing::info!(%peer, target, outcome, reason = %detail, "SOCKS5 connection ended without a tunnel");
    let record = Access {
        outcome,
        detail: detail.into(),
        ..Access::new(Peer::Client(peer), METHOD, target, started)
    };
    client::drain_and_close(sock).await;
    record.log();
}

/// Longest body of the remote's refusal read for its reason (its synthetic replies are one line).
const MAX_FAR_REASON: u64 = 4096;
/// Longest wait for that body.
const FAR_REASON_WAIT: Duration = Duration::from_secs(1);

/// The one-line reason in the body of the remote's synthetic refusal (`502 Bad Gateway:
/// <reason>`), if it is short and arrives at once.
async fn far_reason<R: tokio::io::AsyncRead + Unpin>(
    head: &http1::ResponseHead,
    srd: &mut R,
    sbuf: &mut BytesMut,
) -> Option<String> {
    let kind = http1::response_body_kind("CONNECT", head).ok()?;
    if !matches!(kind, http1::BodyKind::Length(n) if n <= MAX_FAR_REASON) {
        return None;
    }
    let mut body = Vec::new();
    tokio::time::timeout(
        FAR_REASON_WAIT,
        http1::copy_body(kind, srd, sbuf, &mut body, http1::OutFraming::Raw),
    )
    .await
    .ok()?
    .ok()?;
    let text = String::from_utf8_lossy(&body);
    let line = text.trim();
    // The remote's body repeats its status first; the reason follows.
    let reason = line.split_once(": ").map_or(line, |(_, r)| r);
    (!reason.is_empty()).then(|| reason.to_string())
}

/// Opens the tunnel to `target` as `connect_reply` says and relays it until both sides end.
async fn connect<T: Transport>(
    ctx: &Ctx<T>,
    mut sock: TcpStream,
    peer: SocketAddr,
    target: &str,
    user: Option<&str>,
    early: Bytes,
    started: Instant,
) {
    let success = codec::encode_reply(Reply::SUCCEEDED);
    // `sent`: early bytes already sent with the stream's opening.
    let (stream, to_client, to_far, sent) = match ctx.settings.connect_reply {
        ConnectReply::Optimistic => {
            let sent = early.len() as u64;
            match ctx.transport.open(StreamKind::Tunnel, target, early).await {
                Ok(s) => (s, Bytes::new(), Bytes::new(), sent),
                Err(e) => {
                    let err = EdgeError::from_open(e);
                    refuse(&mut sock, peer, target, &err, user, started).await;
                    return;
                }
            }
        }
        ConnectReply::AfterConnect => match tunnel::connect_first(ctx, target).await {
            FarConnect::Connected(s, already) => (s, already, early, 0),
            FarConnect::Failed(err) => {
                refuse(&mut sock, peer, target, &err, user, started).await;
                return;
            }
            FarConnect::Refused(head, mut srd, mut sbuf) => {
                let tag = http1::header_str(&head.headers, http1::reply::ERROR_HEADER);
                let reason = match tag {
                    Some(_) => far_reason(&head, &mut srd, &mut sbuf).await,
                    None => None,
                };
                let reason = reason.unwrap_or_else(|| {
                    format!("the remote answered {} {}", head.status, head.reason)
                });
                let err = EdgeError::from_far_refusal(tag, reason);
                refuse(&mut sock, peer, target, &err, user, started).await;
                return;
            }
        },
    };
    let (rd, mut wr) = sock.split();
    if let Err(e) = client::write_all(&mut wr, &success).await {
        // Dropping the stream resets it, which ends the far side's connection.
        Access {
            outcome: CLIENT_GONE,
            detail: format!("the client went away before the SOCKS5 reply: {e}").into(),
            ..Access::new(Peer::Client(peer), METHOD, target, started)
        }
        .log();
        return;
    }
    let first_down = OnceLock::new();
    let (up, down, err) =
        tunnel::pump_with_prefix(ctx, rd, wr, stream, to_client, to_far, &first_down).await;
    let ttfb = first_down
        .get()
        .map(|t| t.saturating_duration_since(started));
    match user {
        // The record names who used the tunnel (its detail, or after the failure's reason).
        Some(u) => {
            tunnel::warn_cut(peer, target, err.as_ref());
            let record = Access {
                ttfb,
                ..Access::new(Peer::Client(peer), METHOD, target, started)
            };
            let record = tunnel::tunnel_record(record, up + sent, down, err);
            let detail = match &*record.detail {
                "" => format!("user {u:?}"),
                why => format!("user {u:?}: {why}"),
            };
            Access {
                detail: detail.into(),
                ..record
            }
            .log();
        }
        None => tunnel::log_tunnel(peer, METHOD, target, 0, up + sent, down, started, ttfb, err),
    }
}
