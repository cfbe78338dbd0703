//! Typed, validated configuration of the remote (TOML).
//!
//! Every key has a `DEFAULT_*` constant; unknown keys are rejected; [`RemoteConfig::validate`]
//! checks ranges and the development-mode rule (loopback only). It does NOT open sockets.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use ipnet::IpNet;

use app::config::{
    check_congestion, check_development_binds, check_max_header_bytes, check_ms, check_range,
    CarrierName, LinkConfig, LogFormat, Mode, PolicyName, PoolSide, QuicSection, TlsSection,
    DEFAULT_DRAIN_GRACE_MS,
};
use serde::{Deserialize, Serialize};

use crate::handler::Settings;
use crate::policy::TargetPolicy;

/// Default pool listener: the address an edge dials by default ([`pool::DEFAULT_REMOTE`]).
pub const DEFAULT_REMOTE_LISTEN: &str = pool::DEFAULT_REMOTE;
/// Default origin TCP connect timeout.
pub const DEFAULT_ORIGIN_CONNECT_TIMEOUT_MS: u64 = 10_000;
/// Default wait for an origin's response head.
pub const DEFAULT_ORIGIN_TIMEOUT_MS: u64 = 60_000;
/// Default idle timeout of pooled keep-alive origin connections.
pub const DEFAULT_ORIGIN_IDLE_TIMEOUT_MS: u64 = 90_000;
/// Default idle keep-alive connections kept per origin.
pub const DEFAULT_ORIGIN_MAX_IDLE_PER_HOST: usize = 32;

/// The remote's configuration file.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct RemoteConfig {
    /// Development or production. Absent: development when `listen` is loopback.
    pub mode: Option<Mode>,
    /// Pool listener.
    pub listen: SocketAddr,
    /// Let origins on loopback/private/link-local addresses be reached. Absent: true in
    /// development mode, false in production.
    pub allow_private_targets: Option<bool>,
    /// Networks origins may be reached in whatever their class (for example an internal
    /// origin network `10.20.0.0/16`); a metadata address must be listed exactly (`/32`,
    /// `/128`). Default: empty.
    pub allowed_targets: Vec<IpNet>,
    /// Static name → addresses answers consulted before DNS (`[hosts]` table, like
    /// `/etc/hosts` for this process only); the address policy applies to them. Default: empty.
    pub hosts: BTreeMap<String, Vec<IpAddr>>,
    /// Origin TCP connect timeout, ms (expiry: 504).
    pub origin_connect_timeout_ms: u64,
    /// Wait for an origin's response head once the whole request is sent, and the longest a
    /// request body may make no progress, ms (expiry: 504).
    pub origin_timeout_ms: u64,
    /// Idle keep-alive origin connections close after this, ms.
    pub origin_idle_timeout_ms: u64,
    /// Idle keep-alive connections kept per origin.
    pub origin_max_idle_per_host: usize,
    /// Largest request head, bytes (larger: 431).
    pub max_header_bytes: usize,
    /// Grace period for in-flight streams on SIGTERM, ms.
    pub drain_grace_ms: u64,
    /// Congestion control of pool connections (`bbr`, `cubic`, `reno`; `rate` QUIC only); the
    /// replies travel this way, so this side's choice matters most. Absent: `rate` for QUIC
    /// connections and `bbr` for TCP ones ([`app::config::default_congestion`]);
    /// [`RemoteConfig::congestion`] is the one in force.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub congestion: Option<String>,
    /// How each reply is placed on the edge's pool connections (`least-outstanding`, the
    /// default; `expected-completion` by delivery rate and RTT; `round-robin` and
    /// `fewest-streams` are baselines for comparison). The edge's own `pool.policy` places
    /// requests only (over QUIC a reply rides its request's stream, placed by the edge).
    pub reply_policy: PolicyName,
    /// Log format.
    pub log_format: LogFormat,
    /// Log level filter (`info`, `warn,access=info`, ...); `RUST_LOG` overrides it. SIGHUP
    /// applies a changed value.
    pub log_level: String,
    /// The long link (window sizing).
    pub link: LinkConfig,
    /// Transport of the pool connections: `auto` (the default: TCP and UDP listeners on the
    /// same address, TCP only without `[tls]`), `tcp` (TCP listener) or `quic` (UDP listener;
    /// needs `[tls]`).
    pub carrier: CarrierName,
    /// QUIC tuning (used when `carrier` is `quic` or `auto`).
    pub quic: QuicSection,
    /// Mutual TLS of pool connections (`[tls]`: cert, key, ca); absent = plaintext TCP,
    /// allowed only on a loopback listen address (see [`RemoteConfig::requires_tls`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls: Option<TlsSection>,
    /// Prometheus `/metrics` endpoint (`[metrics]`); off by default.
    pub metrics: app::metrics::MetricsConfig,
    /// Most authenticated pool connections at once, all edges together.
    pub max_pool_connections: usize,
    /// Most pool connections in their TLS/QUIC handshake (before their HELLO) at once.
    pub max_handshakes: usize,
    /// Most of those from one source address (raise it for several edges behind one NAT
    /// address, or for pools of more than this many connections).
    pub max_handshakes_per_source: usize,
}

impl Default for RemoteConfig {
    fn default() -> Self {
        RemoteConfig {
            mode: None,
            listen: DEFAULT_REMOTE_LISTEN.parse().expect("valid default"),
            allow_private_targets: None,
            allowed_targets: Vec::new(),
            hosts: BTreeMap::new(),
            origin_connect_timeout_ms: DEFAULT_ORIGIN_CONNECT_TIMEOUT_MS,
            origin_timeout_ms: DEFAULT_ORIGIN_TIMEOUT_MS,
            origin_idle_timeout_ms: DEFAULT_ORIGIN_IDLE_TIMEOUT_MS,
            origin_max_idle_per_host: DEFAULT_ORIGIN_MAX_IDLE_PER_HOST,
            max_header_bytes: http1::DEFAULT_MAX_HEADER_BYTES,
            drain_grace_ms: DEFAULT_DRAIN_GRACE_MS,
            congestion: None,
            reply_policy: PolicyName::LeastOutstanding,
            log_format: LogFormat::Text,
            log_level: app::logging::DEFAULT_LOG_LEVEL.into(),
            link: LinkConfig::default(),
            carrier: CarrierName::Auto,
            quic: QuicSection::default(),
            tls: None,
            metrics: app::metrics::MetricsConfig::default(),
            max_pool_connections: pool::DEFAULT_MAX_SERVER_CONNECTIONS,
            max_handshakes: pool::DEFAULT_MAX_HANDSHAKES,
            max_handshakes_per_source: pool::DEFAULT_MAX_HANDSHAKES_PER_SOURCE,
        }
    }
}

app::process_config!(RemoteConfig, tls: tls);

/// Where the remote keeps its pool settings (for messages).
const POOL_SIDE: PoolSide = PoolSide {
    prefix: "",
    prog: "remote-proxy",
    loopback_hint: "listen on loopback only",
};

impl RemoteConfig {
    /// The congestion control in force (the configured one, or the carrier's default).
    pub fn congestion(&self) -> &str {
        app::config::congestion_in_force(self.congestion.as_deref(), self.carrier)
    }

    /// The mode in force.
    pub fn mode(&self) -> Mode {
        app::config::effective_mode(self.mode, &[self.listen])
    }

    /// Checks ranges and the development-mode rule; the error names the key.
    pub fn validate(&self) -> Result<(), String> {
        check_congestion("congestion", self.congestion(), self.carrier)?;
        check_development_binds(self.mode(), &[("listen", self.listen)])?;
        POOL_SIDE.check_security(
            self.carrier,
            self.tls.as_ref(),
            &self.quic,
            &self.link,
            self.requires_tls(),
        )?;
        if self.tls.as_ref().is_some_and(|t| t.server_name.is_some()) {
            return Err(
                "tls.server_name is an edge setting (the remote's name is in its certificate)"
                    .into(),
            );
        }
        check_ms(&[
            ("origin_connect_timeout_ms", self.origin_connect_timeout_ms),
            ("origin_timeout_ms", self.origin_timeout_ms),
            ("origin_idle_timeout_ms", self.origin_idle_timeout_ms),
            ("drain_grace_ms", self.drain_grace_ms),
        ])?;
        if self.origin_max_idle_per_host > 10_000 {
            return Err(format!(
                "origin_max_idle_per_host {} must be at most 10000",
                self.origin_max_idle_per_host
            ));
        }
        for (key, v) in [
            ("max_pool_connections", self.max_pool_connections),
            ("max_handshakes", self.max_handshakes),
            ("max_handshakes_per_source", self.max_handshakes_per_source),
        ] {
            check_range(key, v, 1..=1_000_000)?;
        }
        if self.max_handshakes_per_source > self.max_handshakes {
            return Err(format!(
                "max_handshakes_per_source {} must not exceed max_handshakes {}",
                self.max_handshakes_per_source, self.max_handshakes
            ));
        }
        check_max_header_bytes(self.max_header_bytes)?;
        for (name, ips) in &self.hosts {
            if ips.is_empty() {
                return Err(format!("hosts.{name:?} lists no address"));
            }
            if name.is_empty() || name.parse::<IpAddr>().is_ok() {
                return Err(format!("hosts key {name:?} must be a host name"));
            }
        }
        self.link.validate()
    }

    /// Why plaintext pool connections are not allowed, if they are not: a non-loopback listen
    /// address (production) needs mutual TLS. `None` on loopback (development).
    pub fn requires_tls(&self) -> Option<String> {
        (!self.listen.ip().is_loopback()).then(|| {
            format!(
                "listen {} is not a loopback address (production)",
                self.listen
            )
        })
    }

    /// The address policy in force.
    pub fn policy(&self) -> TargetPolicy {
        TargetPolicy {
            allow_private: self
                .allow_private_targets
                .unwrap_or(self.mode() == Mode::Development),
            allowed_targets: self.allowed_targets.clone(),
            hosts: self
                .hosts
                .iter()
                .map(|(k, v)| (k.to_ascii_lowercase(), v.clone()))
                .collect(),
        }
    }

    /// Origin-side behaviour.
    pub fn settings(&self) -> Settings {
        Settings {
            connect_timeout: Duration::from_millis(self.origin_connect_timeout_ms),
            origin_timeout: Duration::from_millis(self.origin_timeout_ms),
            origin_idle_timeout: Duration::from_millis(self.origin_idle_timeout_ms),
            origin_max_idle_per_host: self.origin_max_idle_per_host,
            max_header_bytes: self.max_header_bytes,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults() {
        let c = RemoteConfig::default();
        c.validate().unwrap();
        assert!(c.policy().allow_private);
        assert_eq!(c.listen.to_string(), "127.0.0.1:4443");
        let p: RemoteConfig = toml::from_str(
            "mode = \"production\"\nlisten = \"0.0.0.0:4443\"\n\
             [tls]\ncert = \"r.pem\"\nkey = \"r.key\"\nca = [\"ca.pem\"]",
        )
        .unwrap();
        p.validate().unwrap();
        assert!(!p.policy().allow_private);
    }

    #[test]
    fn a_set_quic_key_is_checked_where_quic_does_not_run() {
        // No [tls]: the remote listens over TCP only, and still refuses a bad [quic] value.
        let c: RemoteConfig = toml::from_str("[quic]\nudp_buffer = 1024\n").unwrap();
        let e = c.validate().unwrap_err();
        assert!(
            e.starts_with("quic: quic udp_buffer 1024 must be in"),
            "{e}"
        );
        let c: RemoteConfig = toml::from_str("[quic]\nudp_buffer = 1048576\n").unwrap();
        c.validate().unwrap();
    }

    #[test]
    fn pool_admission_limits_are_read_and_checked() {
        let c: RemoteConfig = toml::from_str(
            "max_pool_connections = 64\nmax_handshakes = 32\nmax_handshakes_per_source = 16\n",
        )
        .unwrap();
        c.validate().unwrap();
        let s = crate::pool_glue::server_config(&c);
        assert_eq!(
            (
                s.max_connections,
                s.max_handshakes,
                s.max_handshakes_per_source
            ),
            (64, 32, 16)
        );
        let d = crate::pool_glue::server_config(&RemoteConfig::default());
        assert_eq!(d.max_connections, pool::DEFAULT_MAX_SERVER_CONNECTIONS);
        for (text, key) in [
            ("max_handshakes = 0\n", "max_handshakes 0"),
            ("max_handshakes_per_source = 300\n", "must not exceed"),
            ("max_pool_connections = 0\n", "max_pool_connections"),
        ] {
            let c: RemoteConfig = toml::from_str(text).unwrap();
            let e = c.validate().unwrap_err();
            assert!(e.contains(key), "{text}: {e}");
        }
    }

    #[test]
    fn allowed_targets_and_hosts() {
        let c: RemoteConfig = toml::from_str(
            "mode = \"production\"\nallowed_targets = [\"10.20.0.0/16\"]\n\
             [hosts]\n\"Origin.Test\" = [\"127.0.0.1\", \"::1\"]",
        )
        .unwrap();
        c.validate().unwrap();
        let p = c.policy();
        assert!(!p.allow_private);
        assert_eq!(
            p.allowed_targets,
            vec!["10.20.0.0/16".parse::<IpNet>().unwrap()]
        );
        assert_eq!(p.hosts["origin.test"].len(), 2);
        let c: RemoteConfig = toml::from_str("[hosts]\n\"a.test\" = []").unwrap();
        assert!(c.validate().unwrap_err().contains("a.test"));
        assert!(toml::from_str::<RemoteConfig>("allowed_targets = [\"10.0.0.0/33\"]").is_err());
    }

    #[test]
    fn non_loopback_listen_requires_tls() {
        let c: RemoteConfig = toml::from_str("listen = \"0.0.0.0:4443\"").unwrap();
        let e = c.validate().unwrap_err();
        assert!(e.contains("listen 0.0.0.0:4443 is not a loopback"), "{e}");
        assert!(e.contains("[tls]"), "{e}");
        // Explicit production on loopback keeps the pool on this host: plaintext allowed.
        let c: RemoteConfig = toml::from_str("mode = \"production\"").unwrap();
        c.validate().unwrap();
        let c: RemoteConfig = toml::from_str(
            "[tls]\ncert = \"r.pem\"\nkey = \"r.key\"\nca = [\"ca.pem\"]\nserver_name = \"x\"",
        )
        .unwrap();
        assert!(c.validate().unwrap_err().contains("tls.server_name"));
    }

    #[test]
    fn rejects_unknown_and_invalid() {
        assert!(toml::from_str::<RemoteConfig>("allow_private = true").is_err());
        let c: RemoteConfig =
            toml::from_str("mode = \"development\"\nlisten = \"0.0.0.0:4443\"").unwrap();
        assert!(c.validate().unwrap_err().contains("development mode"));
        let c: RemoteConfig = toml::from_str("origin_timeout_ms = 0").unwrap();
        assert!(c.validate().unwrap_err().contains("origin_timeout_ms"));
    }
}
