//! Typed, validated configuration of the edge (TOML). The sections and checks both binaries
//! share (mode, log format, link, QUIC, TLS files, range checks) are in `app::config`.
//!
//! Every key has a `DEFAULT_*` constant; unknown keys are rejected; [`EdgeConfig::validate`]
//! checks ranges and the development-mode rule (loopback only). Command-line flags override the
//! file ([`crate::cli`]). It does NOT open sockets.

use std::net::SocketAddr;
use std::time::Duration;

use app::config::{
    check_congestion, check_development_binds, check_host_port, check_max_header_bytes, check_ms,
    check_range, effective_mode, is_loopback_authority, CarrierName, LinkConfig, LogFormat, Mode,
    PolicyName, PoolSide, QuicSection, TlsSection, DEFAULT_DRAIN_GRACE_MS,
};
use ipnet::IpNet;
use serde::{Deserialize, Serialize};

use crate::client::{ConnectReply, Settings};

/// Default explicit proxy listener.
pub const DEFAULT_EDGE_LISTEN: &str = "127.0.0.1:3128";
/// Default remote proxy address: where a remote listens by default ([`pool::DEFAULT_REMOTE`]).
pub const DEFAULT_REMOTE: &str = pool::DEFAULT_REMOTE;
/// Default number of pool connections (seed 001: more connections lower latency; 4 suits a
/// single-user demo, production sizes it from the link).
pub const DEFAULT_CONNECTIONS: usize = pool::DEFAULT_CONNECTIONS;
/// Default idle timeout of a client connection between requests (a new connection waits for its
/// first byte at most `header_timeout_ms`).
pub const DEFAULT_CLIENT_IDLE_TIMEOUT_MS: u64 = 60_000;
/// Default longest time from the first byte of a request head to its end (slowloris defence:
/// a slower client gets 408). Clients sit on the short side of the link, so a whole head
/// normally arrives in one round trip of a few milliseconds. Also the longest wait for the first
/// byte of a new connection (a connection that sends nothing is closed).
pub const DEFAULT_HEADER_TIMEOUT_MS: u64 = 10_000;
/// Default longest time data sent to a client may stay unacknowledged, or wait behind a closed
/// receive window, before the connection is dropped (`TCP_USER_TIMEOUT`, like nginx's
/// `send_timeout`). A client that stops reading, or vanishes without a FIN, would otherwise hold
/// its pool streams, and their windows, for good.
pub const DEFAULT_CLIENT_SEND_TIMEOUT_MS: u64 = 60_000;
/// Default ports CONNECT may reach: HTTPS only (like Squid's `SSL_ports`).
pub const DEFAULT_CONNECT_PORTS: &[u16] = &[443];
/// Default limit of client connections served at once (each costs two small buffers and one
/// task; a further connection is answered `503 too-many-connections` and closed, at most
/// [`crate::server::DEFAULT_MAX_REFUSALS`] such answers at once).
pub const DEFAULT_MAX_CLIENT_CONNECTIONS: usize = 10_000;
/// Most remote proxies in `pool.remotes` (each costs a pool of `pool.connections`).
pub const MAX_REMOTES: usize = 64;
/// Default pipelining depth per client connection.
pub const DEFAULT_MAX_PIPELINE: usize = 16;
/// Default wait at start-up for the first pool connection.
pub const DEFAULT_READY_TIMEOUT_MS: u64 = 5_000;
/// Default of `pool.open_queue`: most requests waiting at once for a stream slot when every
/// pool connection is at its stream limit ([`pool::DEFAULT_OPEN_QUEUE`], which says why).
pub const DEFAULT_OPEN_QUEUE: usize = pool::DEFAULT_OPEN_QUEUE;
/// Default of `pool.open_wait_ms`: longest wait of one request for a stream slot before it
/// gets 503 `pool-busy` ([`pool::DEFAULT_OPEN_WAIT`], which says why).
pub const DEFAULT_OPEN_WAIT_MS: u64 = pool::DEFAULT_OPEN_WAIT.as_millis() as u64;
/// Default client networks: loopback and private address space (like Squid's `localnet`).
pub const DEFAULT_ALLOWED_CLIENTS: &[&str] = &[
    "127.0.0.0/8",
    "10.0.0.0/8",
    "172.16.0.0/12",
    "192.168.0.0/16",
    "100.64.0.0/10",
    "::1/128",
    "fc00::/7",
    "fe80::/10",
];
/// Default HTTP ports of intercepted connections.
pub const DEFAULT_TRANSPARENT_HTTP_PORTS: &[u16] = &[80];
/// SOCKS5 listener in development mode when `[socks] listen` is absent (the port SOCKS
/// clients assume); in production the listener is off unless configured.
pub const DEFAULT_DEV_SOCKS_LISTEN: &str = "127.0.0.1:1080";
/// Default longest time from a SOCKS5 client's connection to its complete request (greeting,
/// authentication and request together are under 800 bytes and two round trips on the short
/// side of the link); a slower client is closed.
pub const DEFAULT_SOCKS_HANDSHAKE_TIMEOUT_MS: u64 = 10_000;
/// Most entries in `[[socks.users]]`.
pub const MAX_SOCKS_USERS: usize = 10_000;

/// Interception (transparent proxy) settings.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct TransparentConfig {
    /// Address the REDIRECT/TPROXY rules send intercepted connections to.
    pub listen: SocketAddr,
    /// Use TPROXY (the socket's local address is the original destination; needs
    /// CAP_NET_ADMIN) instead of REDIRECT (`SO_ORIGINAL_DST`).
    #[serde(default)]
    pub tproxy: bool,
    /// Destination ports parsed as HTTP; other ports are tunnelled untouched.
    #[serde(default = "default_http_ports")]
    pub http_ports: Vec<u16>,
}

fn default_http_ports() -> Vec<u16> {
    DEFAULT_TRANSPARENT_HTTP_PORTS.to_vec()
}

/// Where the SOCKS5 listener is: an address, or `"off"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(try_from = "String", into = "String")]
pub enum SocksListen {
    /// No SOCKS5 listener.
    Off,
    /// Listen here.
    At(SocketAddr),
}

impl TryFrom<String> for SocksListen {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        s.parse()
    }
}

impl std::str::FromStr for SocksListen {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        if s == "off" {
            return Ok(SocksListen::Off);
        }
        s.parse()
            .map(SocksListen::At)
            .map_err(|_| format!("{s:?} is not an address (ip:port) or \"off\""))
    }
}

impl From<SocksListen> for String {
    fn from(l: SocksListen) -> String {
        match l {
            SocksListen::Off => "off".into(),
            SocksListen::At(a) => a.to_string(),
        }
    }
}

/// A secret from the configuration: compared, never printed (`Debug` shows `<redacted>`).
#[derive(Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(transparent)]
pub struct Secret(pub String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
}

/// One SOCKS5 user (RFC 1929 username/password).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct SocksUser {
    /// User name, 1 to 255 bytes.
    pub name: String,
    /// Password, 1 to 255 bytes, stored as written (RFC 1929 sends it in clear text, so the
    /// file holding it must be readable by the service only).
    pub password: Secret,
}

/// The SOCKS5 listener (`[socks]`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct SocksSection {
    /// Listener address or `"off"`. Absent: [`DEFAULT_DEV_SOCKS_LISTEN`] in development
    /// mode, off in production.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub listen: Option<SocksListen>,
    /// Longest time from a client's connection to its complete request, in milliseconds.
    pub handshake_timeout_ms: u64,
    /// Ports SOCKS5 CONNECT may reach (others get reply 0x02), checked like `connect_ports`;
    /// empty (the default) = any port: SOCKS5 carries every protocol, plain HTTP, ssh and
    /// messaging included, where HTTP CONNECT is only needed for TLS.
    pub connect_ports: Vec<u16>,
    /// Users allowed (username/password, RFC 1929). Empty: no authentication is asked for;
    /// otherwise it is required and "no authentication" is not offered.
    pub users: Vec<SocksUser>,
}

impl Default for SocksSection {
    fn default() -> Self {
        SocksSection {
            listen: None,
            handshake_timeout_ms: DEFAULT_SOCKS_HANDSHAKE_TIMEOUT_MS,
            connect_ports: Vec::new(),
            users: Vec::new(),
        }
    }
}

/// Default of `https_proxy.max_concurrent_streams`: HTTP/2 streams (requests and CONNECT
/// tunnels) one client connection may have open at once (SETTINGS_MAX_CONCURRENT_STREAMS,
/// RFC 9113 §6.5.2; RFC 9113 §5.1.2 recommends at least 100).
pub const DEFAULT_H2_MAX_CONCURRENT_STREAMS: u32 = 100;
/// Default of `https_proxy.stream_window`: HTTP/2 receive window of each stream, in bytes (how
/// much a client may upload on one stream before the edge has passed it on to the pool; the
/// client sits a few milliseconds away, so 256 KiB keeps a single upload at line rate).
pub const DEFAULT_H2_STREAM_WINDOW: u32 = 256 * 1024;
/// Default of `https_proxy.connection_window`: HTTP/2 receive window of a whole client
/// connection, in bytes; bounds what one connection's uploads can hold in the edge.
pub const DEFAULT_H2_CONNECTION_WINDOW: u32 = 1024 * 1024;
/// Default of `https_proxy.handshake_timeout_ms`: longest TLS handshake of a client.
pub const DEFAULT_TLS_HANDSHAKE_TIMEOUT_MS: u64 = 10_000;

/// The HTTPS proxy endpoint (`[https_proxy]`): clients reach the proxy over TLS (an
/// `https://` proxy, PAC `HTTPS host:port`) and speak HTTP/1.1 or HTTP/2 by ALPN.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct HttpsProxyConfig {
    /// Listen address.
    pub listen: SocketAddr,
    /// The endpoint's certificate chain (PEM, leaf first); clients verify it against the proxy's
    /// name.
    pub cert: std::path::PathBuf,
    /// The certificate's private key (PEM, mode 0600).
    pub key: std::path::PathBuf,
    /// HTTP/2 streams one client connection may have open at once.
    #[serde(default = "default_h2_streams")]
    pub max_concurrent_streams: u32,
    /// HTTP/2 receive window of each stream, in bytes.
    #[serde(default = "default_h2_stream_window")]
    pub stream_window: u32,
    /// HTTP/2 receive window of a client connection, in bytes.
    #[serde(default = "default_h2_connection_window")]
    pub connection_window: u32,
    /// Longest TLS handshake, in milliseconds.
    #[serde(default = "default_handshake_timeout")]
    pub handshake_timeout_ms: u64,
}

fn default_h2_streams() -> u32 {
    DEFAULT_H2_MAX_CONCURRENT_STREAMS
}
fn default_h2_stream_window() -> u32 {
    DEFAULT_H2_STREAM_WINDOW
}
fn default_h2_connection_window() -> u32 {
    DEFAULT_H2_CONNECTION_WINDOW
}
fn default_handshake_timeout() -> u64 {
    DEFAULT_TLS_HANDSHAKE_TIMEOUT_MS
}

impl HttpsProxyConfig {
    /// An endpoint on `listen` with `cert` and `key` and default limits.
    pub fn new(listen: SocketAddr, cert: std::path::PathBuf, key: std::path::PathBuf) -> Self {
        HttpsProxyConfig {
            listen,
            cert,
            key,
            max_concurrent_streams: DEFAULT_H2_MAX_CONCURRENT_STREAMS,
            stream_window: DEFAULT_H2_STREAM_WINDOW,
            connection_window: DEFAULT_H2_CONNECTION_WINDOW,
            handshake_timeout_ms: DEFAULT_TLS_HANDSHAKE_TIMEOUT_MS,
        }
    }

    fn validate(&self) -> Result<(), String> {
        check_range(
            "https_proxy.max_concurrent_streams",
            self.max_concurrent_streams,
            1..=10_000,
        )?;
        // RFC 9113 §6.9.2: windows are at most 2^31-1; below the initial 65535 a client could
        // not even send one frame of default size promptly.
        check_range(
            "https_proxy.stream_window",
            self.stream_window,
            65_535..=(1 << 31) - 1,
        )?;
        check_range(
            "https_proxy.connection_window",
            self.connection_window,
            self.stream_window..=(1 << 31) - 1,
        )?;
        check_ms(&[(
            "https_proxy.handshake_timeout_ms",
            self.handshake_timeout_ms,
        )])
    }
}

/// The pool of connections to the remote proxy.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct PoolSection {
    /// Remote proxy `host:port` (one remote). Ignored when `remotes` is set (then it must be
    /// left out, or be one of `remotes`).
    pub remote: String,
    /// Several remote proxies (`host:port` each): one pool of `connections` connections per
    /// remote; each stream goes to the remote with the fewest outstanding bytes among those with
    /// a connection up. Empty (the default): the single `remote`.
    pub remotes: Vec<String>,
    /// Number of pool connections per remote.
    pub connections: usize,
    /// Which pool connection each request (and tunnel upload) goes on; over TCP replies are
    /// placed by the remote's `reply_policy`, over QUIC they ride the request's connection.
    /// Absent: `pack` for QUIC connections, `least-outstanding` for TCP ones
    /// ([`app::config::default_policy`]); [`PoolSection::policy`] is the one in force.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policy: Option<PolicyName>,
    /// Congestion control of pool connections (`bbr`, `cubic`, `reno`; `rate`, the
    /// provisioned-rate controller, QUIC only); TCP falls back to the system default with a log
    /// line when unavailable. Absent: `rate` for QUIC connections and `bbr` for TCP ones
    /// ([`app::config::default_congestion`]); [`PoolSection::congestion`] is the one in force.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub congestion: Option<String>,
    /// Wait at start-up for the first pool connection before accepting clients anyway.
    pub ready_timeout_ms: u64,
    /// Most requests (and tunnels) waiting at once for a stream slot when every pool
    /// connection is at its stream limit; one more gets 503 `pool-busy` at once. 0: no waiting.
    pub open_queue: usize,
    /// Longest wait of one request for a stream slot before it gets 503 `pool-busy`.
    /// 0: no waiting.
    pub open_wait_ms: u64,
    /// Transport of the pool connections: `auto` (the default: QUIC while UDP gets through,
    /// TCP+TLS otherwise; TCP only without `[pool.tls]`), `tcp` or `quic` (needs `[pool.tls]`).
    pub carrier: CarrierName,
    /// QUIC tuning (used when `carrier` is `quic` or `auto`).
    pub quic: QuicSection,
    /// Mutual TLS of pool connections; absent = plaintext TCP, allowed only while every
    /// address is loopback (see [`EdgeConfig::requires_tls`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls: Option<TlsSection>,
}

impl Default for PoolSection {
    fn default() -> Self {
        PoolSection {
            remote: DEFAULT_REMOTE.into(),
            remotes: Vec::new(),
            connections: DEFAULT_CONNECTIONS,
            policy: None,
            congestion: None,
            ready_timeout_ms: DEFAULT_READY_TIMEOUT_MS,
            open_queue: DEFAULT_OPEN_QUEUE,
            open_wait_ms: DEFAULT_OPEN_WAIT_MS,
            carrier: CarrierName::Auto,
            quic: QuicSection::default(),
            tls: None,
        }
    }
}

/// The edge's configuration file.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct EdgeConfig {
    /// Development or production. Absent: development when every listen address is loopback,
    /// production otherwise.
    pub mode: Option<Mode>,
    /// Explicit proxy listener.
    pub listen: SocketAddr,
    /// Client networks served (others get 403).
    pub allowed_clients: Vec<IpNet>,
    /// How CONNECT is answered.
    pub connect_reply: ConnectReply,
    /// Ports CONNECT may reach (others get 403); empty = any port.
    pub connect_ports: Vec<u16>,
    /// Largest request head in bytes (larger: 431).
    pub max_header_bytes: usize,
    /// Pipelined requests in flight per client connection.
    pub max_pipeline: usize,
    /// Client connections served at once; more are answered 503 and closed.
    pub max_client_connections: usize,
    /// Idle keep-alive timeout of client connections, in milliseconds (a new connection's first
    /// byte is awaited at most `header_timeout_ms`).
    pub client_idle_timeout_ms: u64,
    /// Longest time from the first byte of a request head to its end, in milliseconds
    /// (slower: 408 and close); also the longest wait for a new connection's first byte.
    pub header_timeout_ms: u64,
    /// Longest time data sent to a client may go unacknowledged or wait behind a closed
    /// window, in milliseconds; then the connection is dropped and its streams reset.
    pub client_send_timeout_ms: u64,
    /// Grace period for in-flight replies on SIGTERM, in milliseconds.
    pub drain_grace_ms: u64,
    /// Log format.
    pub log_format: LogFormat,
    /// Log level filter (`info`, `warn,access=info`, ...); `RUST_LOG` overrides it. SIGHUP
    /// applies a changed value.
    pub log_level: String,
    /// The long link.
    pub link: LinkConfig,
    /// Pool settings.
    pub pool: PoolSection,
    /// Interception; absent = off.
    pub transparent: Option<TransparentConfig>,
    /// SOCKS5 listener (`[socks]`).
    pub socks: SocksSection,
    /// HTTPS proxy endpoint (`[https_proxy]`); absent = off.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub https_proxy: Option<HttpsProxyConfig>,
    /// Prometheus `/metrics` endpoint (`[metrics]`); off by default.
    pub metrics: app::metrics::MetricsConfig,
}

impl Default for EdgeConfig {
    fn default() -> Self {
        EdgeConfig {
            mode: None,
            listen: DEFAULT_EDGE_LISTEN.parse().expect("valid default"),
            allowed_clients: DEFAULT_ALLOWED_CLIENTS
                .iter()
                .map(|n| n.parse().expect("valid default network"))
                .collect(),
            connect_reply: ConnectReply::Optimistic,
            connect_ports: DEFAULT_CONNECT_PORTS.to_vec(),
            max_header_bytes: http1::DEFAULT_MAX_HEADER_BYTES,
            max_pipeline: DEFAULT_MAX_PIPELINE,
            max_client_connections: DEFAULT_MAX_CLIENT_CONNECTIONS,
            client_idle_timeout_ms: DEFAULT_CLIENT_IDLE_TIMEOUT_MS,
            header_timeout_ms: DEFAULT_HEADER_TIMEOUT_MS,
            client_send_timeout_ms: DEFAULT_CLIENT_SEND_TIMEOUT_MS,
            drain_grace_ms: DEFAULT_DRAIN_GRACE_MS,
            log_format: LogFormat::Text,
            log_level: app::logging::DEFAULT_LOG_LEVEL.into(),
            link: LinkConfig::default(),
            pool: PoolSection::default(),
            transparent: None,
            socks: SocksSection::default(),
            https_proxy: None,
            metrics: app::metrics::MetricsConfig::default(),
        }
    }
}

impl PoolSection {
    /// The congestion control in force (the configured one, or the carrier's default).
    pub fn congestion(&self) -> &str {
        app::config::congestion_in_force(self.congestion.as_deref(), self.carrier)
    }

    /// The placement policy in force on `carrier`'s connections (`Tcp` for the TCP carrier
    /// and the fallback under `auto`, `Quic` for QUIC ones): the configured one, or
    /// [`app::config::default_policy`].
    pub fn policy(&self, carrier: CarrierName) -> PolicyName {
        self.policy
            .unwrap_or_else(|| app::config::default_policy(carrier))
    }

    /// The remote proxies in use: `remotes`, or the single `remote`.
    pub fn remote_list(&self) -> Vec<String> {
        if self.remotes.is_empty() {
            vec![self.remote.clone()]
        } else {
            self.remotes.clone()
        }
    }
}

app::process_config!(EdgeConfig, tls: pool.tls);

/// Where the edge keeps its pool settings (for messages).
const POOL_SIDE: PoolSide = PoolSide {
    prefix: "pool.",
    prog: "edge-proxy",
    loopback_hint: "use loopback addresses only",
};

impl EdgeConfig {
    /// The mode in force (see [`effective_mode`]).
    pub fn mode(&self) -> Mode {
        let mut addrs = vec![self.listen];
        addrs.extend(self.transparent.as_ref().map(|t| t.listen));
        if let Some(SocksListen::At(a)) = self.socks.listen {
            addrs.push(a);
        }
        addrs.extend(self.https_proxy.as_ref().map(|h| h.listen));
        effective_mode(self.mode, &addrs)
    }

    /// The listen addresses with their keys (the SOCKS5 listener's only when configured: its
    /// development default is loopback).
    fn listen_addrs(&self) -> Vec<(&'static str, SocketAddr)> {
        let mut addrs = vec![("listen", self.listen)];
        if let Some(t) = &self.transparent {
            addrs.push(("transparent.listen", t.listen));
        }
        if let Some(SocksListen::At(a)) = self.socks.listen {
            addrs.push(("socks.listen", a));
        }
        if let Some(h) = &self.https_proxy {
            addrs.push(("https_proxy.listen", h.listen));
        }
        addrs
    }

    /// The SOCKS5 listener in force, and whether it is the development default (which is
    /// skipped with a warning when its port is taken, as by a second edge on one host).
    pub fn socks_listen(&self) -> Option<(SocketAddr, bool)> {
        match self.socks.listen {
            Some(SocksListen::Off) => None,
            Some(SocksListen::At(a)) => Some((a, false)),
            None if self.mode() == Mode::Development => Some((
                DEFAULT_DEV_SOCKS_LISTEN.parse().expect("valid default"),
                true,
            )),
            None => None,
        }
    }

    /// Checks the `[socks]` section.
    fn validate_socks(&self) -> Result<(), String> {
        check_ms(&[(
            "socks.handshake_timeout_ms",
            self.socks.handshake_timeout_ms,
        )])?;
        if let Some(SocksListen::At(a)) = self.socks.listen {
            if a == self.listen || self.transparent.as_ref().is_some_and(|t| t.listen == a) {
                return Err(format!(
                    "socks.listen {a} must differ from listen and transparent.listen"
                ));
            }
        }
        if self.socks.connect_ports.contains(&0) {
            return Err("socks.connect_ports contains 0".into());
        }
        check_range(
            "socks.users (entries)",
            self.socks.users.len(),
            0..=MAX_SOCKS_USERS,
        )?;
        let mut names = std::collections::HashSet::new();
        for u in &self.socks.users {
            // RFC 1929 carries each in a field with a one-byte length.
            if u.name.is_empty() || u.name.len() > 255 {
                return Err(format!(
                    "socks.users name {:?} must be 1 to 255 bytes",
                    u.name
                ));
            }
            if u.password.0.is_empty() || u.password.0.len() > 255 {
                return Err(format!(
                    "socks.users password of {:?} must be 1 to 255 bytes",
                    u.name
                ));
            }
            if !names.insert(u.name.as_str()) {
                return Err(format!("socks.users lists {:?} twice", u.name));
            }
        }
        Ok(())
    }

    /// Checks ranges and cross-field rules; the error says which key is wrong and why.
    pub fn validate(&self) -> Result<(), String> {
        check_development_binds(self.mode(), &self.listen_addrs())?;
        check_host_port("pool.remote", &self.pool.remote)?;
        if !self.pool.remotes.is_empty() {
            if self.pool.remote != DEFAULT_REMOTE && !self.pool.remotes.contains(&self.pool.remote)
            {
                return Err(format!(
                    "pool.remote {} and pool.remotes are both set: list every remote in pool.remotes",
                    self.pool.remote
                ));
            }
            if self.pool.remotes.len() > MAX_REMOTES {
                return Err(format!(
                    "pool.remotes lists {} remotes; at most {MAX_REMOTES}",
                    self.pool.remotes.len()
                ));
            }
            for (n, r) in self.pool.remotes.iter().enumerate() {
                check_host_port("pool.remotes", r)?;
                if self.pool.remotes[..n].contains(r) {
                    return Err(format!("pool.remotes lists {r} twice"));
                }
            }
        }
        POOL_SIDE.check_security(
            self.pool.carrier,
            self.pool.tls.as_ref(),
            &self.pool.quic,
            &self.link,
            self.requires_tls(),
        )?;
        check_range("pool.connections", self.pool.connections, 1..=1024)?;
        check_congestion("pool.congestion", self.pool.congestion(), self.pool.carrier)?;
        if self.allowed_clients.is_empty() {
            return Err("allowed_clients is empty: no client could use the proxy".into());
        }
        check_max_header_bytes(self.max_header_bytes)?;
        check_range(
            "max_client_connections",
            self.max_client_connections,
            1..=1_000_000,
        )?;
        check_range("max_pipeline", self.max_pipeline, 1..=256)?;
        check_ms(&[
            ("client_idle_timeout_ms", self.client_idle_timeout_ms),
            ("header_timeout_ms", self.header_timeout_ms),
            ("client_send_timeout_ms", self.client_send_timeout_ms),
            ("drain_grace_ms", self.drain_grace_ms),
            ("pool.ready_timeout_ms", self.pool.ready_timeout_ms),
        ])?;
        check_range(
            "pool.open_queue",
            self.pool.open_queue,
            0..=pool::MAX_OPEN_QUEUE,
        )?;
        let max_wait = pool::MAX_OPEN_WAIT.as_millis() as u64;
        check_range("pool.open_wait_ms", self.pool.open_wait_ms, 0..=max_wait)?;
        if self.connect_ports.contains(&0) {
            return Err("connect_ports contains 0".into());
        }
        if let Some(t) = &self.transparent {
            if t.listen == self.listen {
                return Err("transparent.listen must differ from listen".into());
            }
        }
        self.validate_socks()?;
        if let Some(h) = &self.https_proxy {
            if h.listen == self.listen
                || self
                    .transparent
                    .as_ref()
                    .is_some_and(|t| t.listen == h.listen)
            {
                return Err(
                    "https_proxy.listen must differ from listen and transparent.listen".into(),
                );
            }
            h.validate()?;
        }
        self.link.validate()
    }

    /// Why plaintext pool connections are not allowed, if they are not: production means any
    /// non-loopback listen address or remote, and production pools run mutual TLS. `None`:
    /// every address is loopback (development; plaintext allowed).
    pub fn requires_tls(&self) -> Option<String> {
        if self.pool.remotes.is_empty() && !is_loopback_authority(&self.pool.remote) {
            return Some(format!(
                "pool.remote {} is not a loopback address",
                self.pool.remote
            ));
        }
        if let Some(r) = self.pool.remotes.iter().find(|r| !is_loopback_authority(r)) {
            return Some(format!("pool.remotes {r} is not a loopback address"));
        }
        self.listen_addrs()
            .into_iter()
            .find(|(_, a)| !a.ip().is_loopback())
            .map(|(key, a)| format!("{key} {a} is not a loopback address (production)"))
    }

    /// The SOCKS5 listener's behaviour derived from this configuration.
    pub fn socks_settings(&self) -> crate::socks::Settings {
        crate::socks::Settings {
            handshake_timeout: Duration::from_millis(self.socks.handshake_timeout_ms),
            users: crate::socks::auth::Users::new(&self.socks.users),
            connect_ports: self.socks.connect_ports.clone(),
        }
    }

    /// Per-connection behaviour derived from this configuration.
    pub fn settings(&self) -> Settings {
        Settings {
            max_header_bytes: self.max_header_bytes,
            max_pipeline: self.max_pipeline,
            idle_timeout: Duration::from_millis(self.client_idle_timeout_ms),
            header_timeout: Duration::from_millis(self.header_timeout_ms),
            send_timeout: Duration::from_millis(self.client_send_timeout_ms),
            connect_reply: self.connect_reply,
            connect_ports: self.connect_ports.clone(),
            allowed_clients: self.allowed_clients.clone(),
            transparent_http_ports: self
                .transparent
                .as_ref()
                .map(|t| t.http_ports.clone())
                .unwrap_or_else(default_http_ports),
            max_client_connections: self.max_client_connections,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_loopback() {
        let c = EdgeConfig::default();
        c.validate().unwrap();
        assert_eq!(c.listen.to_string(), "127.0.0.1:3128");
        assert_eq!(c.pool.remote, "127.0.0.1:4443");
        assert_eq!(c.connect_ports, vec![443]);
        assert_eq!(c.settings().header_timeout, Duration::from_secs(10));
        let c: EdgeConfig = toml::from_str("connect_ports = []\nheader_timeout_ms = 0").unwrap();
        assert!(c.connect_ports.is_empty());
        assert!(c.validate().unwrap_err().contains("header_timeout_ms"));
    }

    #[test]
    fn socks_listener_is_on_in_development_only_unless_configured() {
        let dev = EdgeConfig::default();
        assert_eq!(
            dev.socks_listen(),
            Some(("127.0.0.1:1080".parse().unwrap(), true))
        );
        assert!(dev.socks_settings().users.is_empty());
        assert!(dev.socks_settings().connect_ports.is_empty());
        let c: EdgeConfig = toml::from_str("[socks]\nlisten = \"off\"").unwrap();
        assert_eq!(c.socks_listen(), None);
        let c: EdgeConfig = toml::from_str("[socks]\nlisten = \"127.0.0.1:1081\"").unwrap();
        c.validate().unwrap();
        assert_eq!(
            c.socks_listen(),
            Some(("127.0.0.1:1081".parse().unwrap(), false))
        );
        // Production: off unless configured; a configured one counts as a listen address.
        let prod: EdgeConfig = toml::from_str(
            "mode = \"production\"\n[pool.tls]\ncert = \"e.pem\"\nkey = \"e.key\"\nca = [\"ca.pem\"]",
        )
        .unwrap();
        assert_eq!(prod.socks_listen(), None);
        let c: EdgeConfig = toml::from_str("[socks]\nlisten = \"0.0.0.0:1080\"").unwrap();
        assert_eq!(c.mode(), Mode::Production);
        assert!(c
            .validate()
            .unwrap_err()
            .contains("socks.listen 0.0.0.0:1080"));
        let c: EdgeConfig =
            toml::from_str("mode = \"development\"\n[socks]\nlisten = \"0.0.0.0:1080\"").unwrap();
        assert!(c.validate().unwrap_err().contains("socks.listen"));
        let c: EdgeConfig = toml::from_str("[socks]\nlisten = \"127.0.0.1:3128\"").unwrap();
        assert!(c.validate().unwrap_err().contains("must differ"));
        let e = toml::from_str::<EdgeConfig>("[socks]\nlisten = \"on\"").unwrap_err();
        assert!(e.to_string().contains("\"off\""), "{e}");
        let e = toml::from_str::<EdgeConfig>("[socks]\nlistn = \"off\"").unwrap_err();
        assert!(e.to_string().contains("unknown field"), "{e}");
    }

    #[test]
    fn socks_users_are_checked_and_never_printed() {
        let c: EdgeConfig = toml::from_str(
            "[socks]\nhandshake_timeout_ms = 5000\n\
             [[socks.users]]\nname = \"alice\"\npassword = \"s3cret-pw\"\n\
             [[socks.users]]\nname = \"bob\"\npassword = \"x\"",
        )
        .unwrap();
        c.validate().unwrap();
        assert_eq!(c.socks.users.len(), 2);
        let s = c.socks_settings();
        assert_eq!(s.handshake_timeout, Duration::from_secs(5));
        assert!(!s.users.is_empty());
        assert!(!format!("{c:?}").contains("s3cret-pw"));
        assert!(!format!("{s:?}").contains("s3cret-pw"));
        let bad = |users: &str, needle: &str| {
            let c: EdgeConfig = toml::from_str(&format!("[socks]\n{users}")).unwrap();
            let e = c.validate().unwrap_err();
            assert!(e.contains(needle), "{e}");
        };
        bad("[[socks.users]]\nname = \"\"\npassword = \"p\"", "name");
        bad("[[socks.users]]\nname = \"a\"\npassword = \"\"", "password");
        let long = "x".repeat(256);
        bad(
            &format!("[[socks.users]]\nname = \"a\"\npassword = \"{long}\""),
            "1 to 255 bytes",
        );
        bad(
            "[[socks.users]]\nname = \"a\"\npassword = \"p\"\n\
             [[socks.users]]\nname = \"a\"\npassword = \"q\"",
            "twice",
        );
        bad("handshake_timeout_ms = 0", "socks.handshake_timeout_ms");
        bad("connect_ports = [443, 0]", "socks.connect_ports");
        assert!(toml::from_str::<EdgeConfig>(
            "[[socks.users]]\nname = \"a\"\npassword = \"p\"\nrole = \"x\""
        )
        .is_err());
    }

    #[test]
    fn open_queue_and_wait_have_defaults_and_bounds() {
        let c = EdgeConfig::default();
        assert_eq!((c.pool.open_queue, c.pool.open_wait_ms), (1024, 5000));
        let c: EdgeConfig = toml::from_str("[pool]\nopen_queue = 16\nopen_wait_ms = 2000").unwrap();
        c.validate().unwrap();
        let p = crate::pool_transport::pool_config(&c);
        assert_eq!(p.open_queue, 16);
        assert_eq!(p.open_wait, Duration::from_secs(2));
        let c: EdgeConfig = toml::from_str("[pool]\nopen_queue = 0\nopen_wait_ms = 0").unwrap();
        c.validate().unwrap();
        let c: EdgeConfig = toml::from_str("[pool]\nopen_wait_ms = 600001").unwrap();
        assert!(c.validate().unwrap_err().contains("pool.open_wait_ms"));
        let c: EdgeConfig = toml::from_str("[pool]\nopen_queue = 1000001").unwrap();
        assert!(c.validate().unwrap_err().contains("pool.open_queue"));
        assert!(toml::from_str::<EdgeConfig>("[pool]\nopen_wait = 5").is_err());
    }

    #[test]
    fn unknown_keys_are_rejected() {
        let e = toml::from_str::<EdgeConfig>("listn = \"127.0.0.1:1\"").unwrap_err();
        assert!(e.to_string().contains("unknown field"), "{e}");
        let e = toml::from_str::<EdgeConfig>("[pool]\nremots = [\"a:1\"]").unwrap_err();
        assert!(e.to_string().contains("unknown field"), "{e}");
    }

    #[test]
    fn https_proxy_has_defaults_and_checked_limits() {
        let c: EdgeConfig = toml::from_str(
            "[https_proxy]\nlisten = \"127.0.0.1:3130\"\ncert = \"p.pem\"\nkey = \"p.key\"",
        )
        .unwrap();
        c.validate().unwrap();
        let h = c.https_proxy.as_ref().unwrap();
        assert_eq!(h.max_concurrent_streams, DEFAULT_H2_MAX_CONCURRENT_STREAMS);
        assert_eq!(h.stream_window, DEFAULT_H2_STREAM_WINDOW);
        assert_eq!(h.connection_window, DEFAULT_H2_CONNECTION_WINDOW);
        assert!(EdgeConfig::default().https_proxy.is_none());
        let with = |extra: &str| {
            let t = format!(
                "[https_proxy]\nlisten = \"127.0.0.1:3130\"\ncert = \"p.pem\"\nkey = \"p.key\"\n{extra}"
            );
            toml::from_str::<EdgeConfig>(&t).unwrap().validate()
        };
        assert!(with("max_concurrent_streams = 0")
            .unwrap_err()
            .contains("https_proxy.max_concurrent_streams"));
        assert!(with("stream_window = 1000")
            .unwrap_err()
            .contains("https_proxy.stream_window"));
        assert!(with("stream_window = 1048576\nconnection_window = 65535")
            .unwrap_err()
            .contains("https_proxy.connection_window"));
        assert!(toml::from_str::<EdgeConfig>("[https_proxy]\nlisten = \"127.0.0.1:1\"").is_err());
        let e = toml::from_str::<EdgeConfig>(
            "[https_proxy]\nlisten = \"127.0.0.1:3128\"\ncert = \"p\"\nkey = \"k\"",
        )
        .unwrap()
        .validate()
        .unwrap_err();
        assert!(e.contains("https_proxy.listen must differ"), "{e}");
        // A non-loopback endpoint is production.
        let c: EdgeConfig =
            toml::from_str("[https_proxy]\nlisten = \"0.0.0.0:3130\"\ncert = \"p\"\nkey = \"k\"")
                .unwrap();
        assert_eq!(c.mode(), Mode::Production);
    }

    #[test]
    fn validation_names_the_key() {
        let c: EdgeConfig =
            toml::from_str("mode = \"development\"\nlisten = \"0.0.0.0:3128\"").unwrap();
        assert!(c.validate().unwrap_err().contains("development mode"));
        let c: EdgeConfig = toml::from_str("listen = \"0.0.0.0:3128\"").unwrap();
        assert_eq!(c.mode(), Mode::Production);
        let c: EdgeConfig = toml::from_str(
            "mode = \"production\"\nlisten = \"0.0.0.0:3128\"\n\
             [pool.tls]\ncert = \"e.pem\"\nkey = \"e.key\"\nca = [\"ca.pem\"]",
        )
        .unwrap();
        c.validate().unwrap();
        let c: EdgeConfig = toml::from_str("[pool]\nconnections = 0").unwrap();
        assert!(c.validate().unwrap_err().contains("pool.connections"));
        let c: EdgeConfig = toml::from_str("[pool]\nremote = \"nohost\"").unwrap();
        assert!(c.validate().unwrap_err().contains("pool.remote"));
        let c: EdgeConfig = toml::from_str("connect_reply = \"after-connect\"").unwrap();
        assert_eq!(c.connect_reply, ConnectReply::AfterConnect);
    }

    #[test]
    fn non_loopback_addresses_require_tls() {
        let c: EdgeConfig = toml::from_str("[pool]\nremote = \"203.0.113.10:4443\"").unwrap();
        let e = c.validate().unwrap_err();
        assert!(
            e.contains("pool.remote 203.0.113.10:4443 is not a loopback"),
            "{e}"
        );
        assert!(e.contains("[pool.tls]"), "{e}");
        let c: EdgeConfig =
            toml::from_str("mode = \"production\"\nlisten = \"0.0.0.0:3128\"").unwrap();
        assert!(c.validate().unwrap_err().contains("listen 0.0.0.0:3128"));
        let c: EdgeConfig = toml::from_str(
            "listen = \"0.0.0.0:3128\"\n[pool]\nremote = \"remote.example.net:4443\"\n\
             [pool.tls]\ncert = \"e.pem\"\nkey = \"e.key\"\nca = [\"ca.pem\"]",
        )
        .unwrap();
        c.validate().unwrap();
        let c: EdgeConfig =
            toml::from_str("[pool.tls]\ncert = \"e.pem\"\nkey = \"e.key\"\nca = []").unwrap();
        assert!(c.validate().unwrap_err().contains("pool.tls.ca is empty"));
        // Loopback everywhere: plaintext is allowed (development, the demo).
        for r in ["127.0.0.1:4443", "localhost:4443", "[::1]:4443"] {
            assert!(is_loopback_authority(r), "{r}");
        }
        assert!(!is_loopback_authority("localhost.example:4443"));
        assert!(EdgeConfig::default().requires_tls().is_none());
    }

    #[test]
    fn several_remotes() {
        let c = EdgeConfig::default();
        assert_eq!(c.pool.remote_list(), vec!["127.0.0.1:4443".to_string()]);
        let c: EdgeConfig =
            toml::from_str("[pool]\nremotes = [\"127.0.0.1:4443\", \"[::1]:4444\"]").unwrap();
        c.validate().unwrap();
        assert_eq!(c.pool.remote_list().len(), 2);
        assert!(c.requires_tls().is_none());
        let c: EdgeConfig =
            toml::from_str("[pool]\nremote = \"127.0.0.1:1\"\nremotes = [\"127.0.0.1:2\"]")
                .unwrap();
        assert!(c.validate().unwrap_err().contains("both set"));
        let c: EdgeConfig =
            toml::from_str("[pool]\nremotes = [\"127.0.0.1:2\", \"127.0.0.1:2\"]").unwrap();
        assert!(c.validate().unwrap_err().contains("twice"));
        let c: EdgeConfig = toml::from_str("[pool]\nremotes = [\"127.0.0.1:2\", \"x\"]").unwrap();
        assert!(c.validate().unwrap_err().contains("pool.remotes"));
        let c: EdgeConfig =
            toml::from_str("[pool]\nremotes = [\"127.0.0.1:2\", \"192.0.2.1:4443\"]").unwrap();
        let e = c.validate().unwrap_err();
        assert!(
            e.contains("pool.remotes 192.0.2.1:4443 is not a loopback"),
            "{e}"
        );
    }

    #[test]
    fn bdp() {
        let l = LinkConfig {
            rtt_ms: 120,
            rate_mbit: 34,
            ..LinkConfig::default()
        };
        assert_eq!(l.bdp_bytes(), 510_000);
    }

    #[test]
    fn placement_is_pack_on_quic_and_least_outstanding_on_tcp_unless_configured() {
        let c = EdgeConfig::default();
        assert_eq!(c.pool.policy, None);
        assert_eq!(
            c.pool.policy(CarrierName::Tcp),
            PolicyName::LeastOutstanding
        );
        assert_eq!(c.pool.policy(CarrierName::Quic), PolicyName::Pack);
        let c: EdgeConfig = toml::from_str("[pool]\npolicy = \"fewest-streams\"\n").unwrap();
        assert_eq!(c.pool.policy(CarrierName::Tcp), PolicyName::FewestStreams);
        assert_eq!(c.pool.policy(CarrierName::Quic), PolicyName::FewestStreams);
        assert!(toml::from_str::<EdgeConfig>("[pool]\npolicy = \"fastest\"\n").is_err());
    }

    #[test]
    fn congestion_rate_needs_quic_connections_and_paces_at_the_link_rate() {
        let c: EdgeConfig = toml::from_str(
            "[pool]
congestion = \"rate\"
[link]
rtt_ms = 600
rate_mbit = 50
",
        )
        .unwrap();
        // Under the default carrier, auto, the QUIC connections pace and the TCP+TLS
        // fallback uses the kernel's bbr; the TCP carrier refuses it.
        c.validate().unwrap();
        let mut tcp = c.clone();
        tcp.pool.carrier = CarrierName::Tcp;
        let e = tcp.validate().unwrap_err();
        assert!(
            e.starts_with("pool.congestion \"rate\" needs pool.carrier = \"quic\" or \"auto\""),
            "{e}"
        );
        let q = c.pool.quic.options(&c.link, c.pool.congestion());
        assert_eq!(q.congestion, pool::quic::Congestion::Rate);
        assert_eq!(q.link_rate_bps, 50_000_000);
        assert_eq!(q.initial_rtt, std::time::Duration::from_millis(600));
        // A TCP connection of such a pool asks the kernel for the default controller.
        let s = app::pool_glue::socket_options(c.pool.congestion());
        assert_eq!(s.congestion.as_deref(), Some("bbr"));
    }

    #[test]
    fn the_udp_buffer_follows_the_link_rate_unless_set() {
        let fast: EdgeConfig = toml::from_str("[link]\nrtt_ms = 130\nrate_mbit = 1000\n").unwrap();
        fast.validate().unwrap();
        assert_eq!(
            fast.pool.quic.options(&fast.link, "bbr").udp_buffer,
            31_250_000
        );
        let set: EdgeConfig = toml::from_str("[pool.quic]\nudp_buffer = 1048576\n").unwrap();
        set.validate().unwrap();
        assert_eq!(set.pool.quic.options(&set.link, "bbr").udp_buffer, 1 << 20);
        // Refused even where QUIC does not run (no [pool.tls], so TCP only), as every
        // [pool.quic] key that is set.
        for carrier in ["auto", "tcp"] {
            let small: EdgeConfig = toml::from_str(&format!(
                "[pool]\ncarrier = \"{carrier}\"\n[pool.quic]\nudp_buffer = 1024\n"
            ))
            .unwrap();
            let e = small.validate().unwrap_err();
            assert!(
                e.starts_with("pool.quic: quic udp_buffer 1024 must be in"),
                "{carrier}: {e}"
            );
        }
    }

    #[test]
    fn the_stream_window_follows_link_stream_window_bdp() {
        let c: EdgeConfig = toml::from_str(
            "[link]
rtt_ms = 200
rate_mbit = 10
stream_window_bdp = 4
",
        )
        .unwrap();
        c.validate().unwrap();
        let m = app::pool_glue::mux_config(&c.link);
        assert_eq!(m.stream_window, 1_000_000);
        let q = c.pool.quic.options(&c.link, "bbr");
        assert_eq!(q.stream_receive_window, 1_000_000);
        // QUIC's connection windows bound its buffers, so its stream limit does not shrink.
        assert_eq!(q.max_streams, mux::config::DEFAULT_MAX_STREAMS);
        // Absent, it is the default of four.
        let d: EdgeConfig = toml::from_str(
            "[link]
rtt_ms = 200
rate_mbit = 10
",
        )
        .unwrap();
        assert_eq!(app::pool_glue::mux_config(&d.link).stream_window, 1_000_000);
        for bad in [0, 17] {
            let c: EdgeConfig = toml::from_str(&format!(
                "[link]
stream_window_bdp = {bad}
"
            ))
            .unwrap();
            let e = c.validate().unwrap_err();
            assert!(e.contains("link.stream_window_bdp"), "{e}");
        }
    }
}
