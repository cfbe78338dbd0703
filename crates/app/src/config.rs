//! Configuration sections and rules both binaries share: mode, log format, scheduling policy,
//! carrier, the long link, QUIC tuning, pool TLS files, TOML loading, and the validation helpers
//! each binary's `validate` is built from (so a range or a message is written once).
//!
//! What it does NOT do: hold either binary's whole configuration (`EdgeConfig` and
//! `RemoteConfig` live in their proxy crates), apply command-line flags, or open sockets and
//! files (TLS files are loaded by the binaries).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Default drain grace period on SIGTERM.
pub const DEFAULT_DRAIN_GRACE_MS: u64 = 10_000;
/// Default round-trip time of the long link (sizes windows from the bandwidth-delay product).
pub const DEFAULT_LINK_RTT_MS: u32 = 130;
/// Default rate of the long link.
pub const DEFAULT_LINK_RATE_MBIT: u32 = 100;
/// Congestion control of pool connections when none is configured, by carrier: the
/// provisioned-rate controller for QUIC connections (`quic`, `auto`: in the page-load
/// benchmark it held bulk transfers near the link rate while pages beside them kept their
/// idle times, where quinn's BBR keeps a round trip of queue at the bottleneck;
/// benches/README.md), the kernel's bbr for the TCP carrier.
pub fn default_congestion(carrier: CarrierName) -> &'static str {
    match carrier {
        CarrierName::Tcp => TCP_FALLBACK_CONGESTION,
        CarrierName::Quic | CarrierName::Auto => RATE_CONGESTION,
    }
}

/// Placement policy of pool connections when none is configured, by carrier: `pack` for
/// QUIC connections (`quic`, `auto`: one connection's stream priorities order a page's
/// replies, and its acknowledgements find its losses; on the lossy test-bed link the pages
/// loaded faster than spread over four connections; benches/notes/2026-11-26-pack.md),
/// least-outstanding for the TCP carrier, where a packed connection would stall every
/// stream on one lost segment.
pub fn default_policy(carrier: CarrierName) -> PolicyName {
    match carrier {
        CarrierName::Tcp => PolicyName::LeastOutstanding,
        CarrierName::Quic | CarrierName::Auto => PolicyName::Pack,
    }
}

/// The congestion control in force: the configured one, or [`default_congestion`].
pub fn congestion_in_force(configured: Option<&str>, carrier: CarrierName) -> &str {
    configured.unwrap_or_else(|| default_congestion(carrier))
}
/// Development (the no-argument default: loopback only, private origins allowed) or production.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// Binds loopback only; the remote may reach loopback and private origins.
    Development,
    /// Binds any address; the remote refuses private targets unless allowed.
    Production,
}

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// Pool scheduling policy (mirrors `mux::Policy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum PolicyName {
    /// Least outstanding bytes (queued + in the kernel send queue): the default.
    LeastOutstanding,
    /// Round-robin (baseline).
    RoundRobin,
    /// Fewest bound streams (baseline).
    FewestStreams,
    /// Smallest expected completion time: backlog ÷ delivery rate + RTT, from `TCP_INFO` on
    /// TCP and quinn's path statistics on QUIC, with idle connections' estimates kept honest.
    ExpectedCompletion,
    /// The first connection carrying no bulk transfer: a page's streams share one
    /// connection (for QUIC, which has no head-of-line blocking between streams).
    Pack,
}

/// Transport of the pool connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum CarrierName {
    /// Both, chosen per remote (the default): QUIC while UDP gets through, TCP + mutual TLS
    /// when the QUIC handshake fails or QUIC stops delivering, QUIC retried with back-off. The
    /// remote listens on both (TCP and UDP, same port number). Without TLS files (development,
    /// loopback) QUIC cannot run, so `auto` means TCP only.
    #[default]
    Auto,
    /// TCP (+ mutual TLS 1.3 off loopback).
    Tcp,
    /// QUIC (mutual TLS 1.3 built in, always required): one QUIC stream per request, so a lost
    /// packet delays only the streams whose data it carried.
    Quic,
}

impl CarrierName {
    /// The carrier actually run with or without TLS files: `auto` without them is `tcp`.
    pub fn effective(self, tls: bool) -> CarrierName {
        match self {
            CarrierName::Auto if !tls => CarrierName::Tcp,
            c => c,
        }
    }
}

/// Default QUIC keep-alive period.
pub const DEFAULT_QUIC_KEEP_ALIVE_MS: u64 = 10_000;
/// Default QUIC idle timeout: a pool connection silent this long is replaced (black holes).
pub const DEFAULT_QUIC_IDLE_TIMEOUT_MS: u64 = 30_000;

/// QUIC tuning (`[pool.quic]` on the edge, `[quic]` on the remote); windows come from `[link]`
/// and the congestion controller from `congestion` (`reno` = NewReno).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct QuicSection {
    /// Keep-alive (QUIC PING) period while idle.
    pub keep_alive_ms: u64,
    /// Idle timeout: silence this long closes and replaces the connection.
    pub idle_timeout_ms: u64,
    /// Initial congestion window in bytes; absent = the controller's default (~14.7 KB).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub initial_window: Option<u64>,
    /// Parity datagrams (`pool::parity`): `auto` (default) protects interactive connections
    /// whose path shows loss, `always` whatever the loss, `off` neither sends nor decodes
    /// them. Both sides must run it for it to act (the HELLOs say so).
    pub parity: ParityName,
    /// `SO_RCVBUF`/`SO_SNDBUF` of each QUIC UDP socket in bytes; absent = 250 ms at
    /// `link.rate_mbit`, at least 4 MiB (`pool::quic::udp_buffer_for_rate`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub udp_buffer: Option<u64>,
}

/// `[quic] parity` / `--quic-parity`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum ParityName {
    /// Neither send nor decode parity.
    Off,
    /// Parity for interactive connections whose path shows loss.
    #[default]
    Auto,
    /// Parity for interactive connections whatever the loss.
    Always,
}

impl ParityName {
    /// The pool crate's mode.
    pub fn mode(self) -> pool::parity::ParityMode {
        match self {
            ParityName::Off => pool::parity::ParityMode::Off,
            ParityName::Auto => pool::parity::ParityMode::Auto,
            ParityName::Always => pool::parity::ParityMode::Always,
        }
    }
}

impl Default for QuicSection {
    fn default() -> Self {
        QuicSection {
            keep_alive_ms: DEFAULT_QUIC_KEEP_ALIVE_MS,
            idle_timeout_ms: DEFAULT_QUIC_IDLE_TIMEOUT_MS,
            initial_window: None,
            parity: ParityName::default(),
            udp_buffer: None,
        }
    }
}

impl QuicSection {
    /// The pool crate's QUIC options for `link` and congestion control `cc`.
    pub fn options(&self, link: &LinkConfig, cc: &str) -> pool::quic::QuicOptions {
        let base = pool::quic::QuicOptions::for_link_bdps(
            Duration::from_millis(u64::from(link.rtt_ms)),
            u64::from(link.rate_mbit) * 1_000_000,
            link.stream_window_bdp,
        );
        pool::quic::QuicOptions {
            congestion: cc.parse().unwrap_or_default(),
            initial_window: self.initial_window,
            keep_alive: Duration::from_millis(self.keep_alive_ms),
            idle_timeout: Duration::from_millis(self.idle_timeout_ms),
            parity: self.parity.mode(),
            udp_buffer: self.udp_buffer.map_or(base.udp_buffer, |b| {
                usize::try_from(b).unwrap_or(usize::MAX)
            }),
            ..base
        }
    }

    /// Checks the values; the error names the key under `key`.
    pub fn validate(&self, key: &str, link: &LinkConfig) -> Result<(), String> {
        self.options(link, "bbr")
            .validate()
            .map_err(|e| format!("{key}: {e}"))
    }
}

/// The long link between edge and remote; windows are sized from its bandwidth-delay product.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct LinkConfig {
    /// Round-trip time in milliseconds.
    pub rtt_ms: u32,
    /// Rate in Mbit/s.
    pub rate_mbit: u32,
    /// The largest per-stream receive window, in bandwidth-delay products (this side's window
    /// for each stream: the edge's limits replies, the remote's uploads). Windows start at
    /// 256 KiB and grow to it while the reader keeps up (`mux::session::credit`; QUIC streams
    /// get it from the start). A wider maximum lets one large transfer ride out loss on the
    /// long link; with a peer without connection credit it costs concurrent streams per
    /// session (`mux::Config::for_link_bdps`).
    pub stream_window_bdp: u32,
}

impl Default for LinkConfig {
    fn default() -> Self {
        LinkConfig {
            rtt_ms: DEFAULT_LINK_RTT_MS,
            rate_mbit: DEFAULT_LINK_RATE_MBIT,
            stream_window_bdp: mux::config::DEFAULT_STREAM_WINDOW_BDPS,
        }
    }
}

impl LinkConfig {
    /// Bandwidth-delay product in bytes.
    pub fn bdp_bytes(&self) -> u64 {
        u64::from(self.rate_mbit) * 1_000_000 / 8 * u64::from(self.rtt_ms) / 1000
    }

    /// Checks ranges.
    pub fn validate(&self) -> Result<(), String> {
        if !(1..=10_000).contains(&self.rtt_ms) {
            return Err(format!("link.rtt_ms {} must be in 1..=10000", self.rtt_ms));
        }
        if !(1..=400_000).contains(&self.rate_mbit) {
            return Err(format!(
                "link.rate_mbit {} must be in 1..=400000",
                self.rate_mbit
            ));
        }
        let max = mux::config::MAX_STREAM_WINDOW_BDPS;
        if !(1..=max).contains(&self.stream_window_bdp) {
            return Err(format!(
                "link.stream_window_bdp {} must be in 1..={max}",
                self.stream_window_bdp
            ));
        }
        Ok(())
    }
}

/// Mutual TLS 1.3 of pool connections (`[pool.tls]` on the edge, `[tls]` on the remote):
/// PEM files as `gen-keys` writes them.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct TlsSection {
    /// This side's certificate (edge: `edge.pem`, remote: `remote.pem`).
    pub cert: PathBuf,
    /// This side's private key (mode 0600).
    pub key: PathBuf,
    /// CA certificates the peer's certificate must chain to. All are trusted at once: list the
    /// old and the new CA during a key rotation.
    pub ca: Vec<PathBuf>,
    /// Edge only: the name the remote's certificate must carry (a DNS name or an IP address
    /// in its subjectAltName). Default: the name `gen-keys` uses, [`pool::tls::DEFAULT_SERVER_NAME`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_name: Option<String>,
}

impl TlsSection {
    /// The files `gen-keys --out dir` wrote for `side` ("edge" or "remote").
    pub fn from_dir(dir: &Path, side: &str) -> TlsSection {
        TlsSection {
            cert: dir.join(format!("{side}.pem")),
            key: dir.join(format!("{side}.key")),
            ca: vec![dir.join("ca.pem")],
            server_name: None,
        }
    }

    /// The pool crate's view of the files.
    pub fn files(&self) -> pool::tls::TlsFiles {
        pool::tls::TlsFiles {
            cert: self.cert.clone(),
            key: self.key.clone(),
            ca: self.ca.clone(),
        }
    }

    /// Checks the section's shape (the files themselves are loaded when the pool starts and by `--check-config`).
    pub fn validate(&self, key: &str) -> Result<(), String> {
        if self.ca.is_empty() {
            return Err(format!(
                "{key}.ca is empty: list at least one CA certificate file"
            ));
        }
        Ok(())
    }
}

/// Whether `host:port` names this host (a loopback address or `localhost`).
pub fn is_loopback_authority(s: &str) -> bool {
    match http1::target::parse_authority(s, None) {
        Ok(a) => match a.ip() {
            Some(ip) => ip.is_loopback(),
            None => a.host == "localhost",
        },
        Err(_) => false,
    }
}

/// Reads a TOML file into `T`, with the file name in errors.
pub fn load_toml<T: serde::de::DeserializeOwned>(path: &Path) -> anyhow::Result<T> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", path.display()))?;
    toml::from_str(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
}

/// Splits `host:port` and checks both parts.
pub fn check_host_port(what: &str, s: &str) -> Result<(), String> {
    http1::target::parse_authority(s, None)
        .map(|_| ())
        .map_err(|e| format!("{what} {s:?}: {e}"))
}

/// The mode in force: the configured one, else development when every address is loopback.
pub fn effective_mode(mode: Option<Mode>, addrs: &[SocketAddr]) -> Mode {
    mode.unwrap_or(if addrs.iter().all(|a| a.ip().is_loopback()) {
        Mode::Development
    } else {
        Mode::Production
    })
}

/// Congestion controls a pool connection may use.
pub const CONGESTION_CONTROLS: &[&str] = &["bbr", "cubic", "reno", RATE_CONGESTION];
/// The provisioned-rate controller (`pool::rate`): QUIC connections only; a TCP connection of a
/// pool configured with it (the TCP+TLS fallback of carrier `auto`) uses
/// [`TCP_FALLBACK_CONGESTION`].
pub const RATE_CONGESTION: &str = "rate";
/// The kernel controller of a pool's TCP connections when the pool is configured with `rate`.
pub const TCP_FALLBACK_CONGESTION: &str = "bbr";
/// Longest time any `*_ms` key may be set to: one day.
pub const MAX_MS: u64 = 86_400_000;
/// Smallest and largest `max_header_bytes`.
pub const HEADER_BYTES_RANGE: std::ops::RangeInclusive<usize> = 1024..=1024 * 1024;

/// `value` of `key` is within `range` (the error names both).
pub fn check_range<T>(key: &str, value: T, range: std::ops::RangeInclusive<T>) -> Result<(), String>
where
    T: PartialOrd + std::fmt::Display,
{
    if range.contains(&value) {
        Ok(())
    } else {
        Err(format!(
            "{key} {value} must be in {}..={}",
            range.start(),
            range.end()
        ))
    }
}

/// Each `(key, milliseconds)` is a duration of at least 1 ms and at most [`MAX_MS`].
pub fn check_ms(keys: &[(&str, u64)]) -> Result<(), String> {
    keys.iter()
        .try_for_each(|&(key, v)| check_range(key, v, 1..=MAX_MS))
}

/// `max_header_bytes` is within [`HEADER_BYTES_RANGE`].
pub fn check_max_header_bytes(v: usize) -> Result<(), String> {
    check_range("max_header_bytes", v, HEADER_BYTES_RANGE)
}

/// `value` of `key` is one of [`CONGESTION_CONTROLS`], and `rate` only with a carrier that
/// has QUIC connections (the TCP carrier's controller is the kernel's). Under `auto` the
/// QUIC connections use `rate` and the TCP+TLS fallback the kernel's
/// [`TCP_FALLBACK_CONGESTION`] (said in the log at start-up).
pub fn check_congestion(key: &str, value: &str, carrier: CarrierName) -> Result<(), String> {
    if !CONGESTION_CONTROLS.contains(&value) {
        return Err(format!("{key} {value:?} must be bbr, cubic, reno or rate"));
    }
    if value == RATE_CONGESTION && carrier == CarrierName::Tcp {
        let prefix = key.strip_suffix("congestion").unwrap_or_default();
        return Err(format!(
            "{key} \"rate\" needs {prefix}carrier = \"quic\" or \"auto\": it is a QUIC \
             controller (the TCP carrier uses the kernel's bbr, cubic or reno)"
        ));
    }
    Ok(())
}

/// In development mode every listen address is loopback.
pub fn check_development_binds(mode: Mode, addrs: &[(&str, SocketAddr)]) -> Result<(), String> {
    if mode != Mode::Development {
        return Ok(());
    }
    match addrs.iter().find(|(_, a)| !a.ip().is_loopback()) {
        Some((key, a)) => Err(format!(
            "{key} {a}: development mode binds loopback only (set mode = \"production\")"
        )),
        None => Ok(()),
    }
}

/// Where a binary keeps its pool settings, for the messages of [`PoolSide::check_security`].
#[derive(Debug, Clone, Copy)]
pub struct PoolSide {
    /// Prefix of the pool keys: `pool.` on the edge, empty on the remote.
    pub prefix: &'static str,
    /// The binary's name (`gen-keys` runs as `PROG gen-keys`).
    pub prog: &'static str,
    /// How to stay in development without TLS.
    pub loopback_hint: &'static str,
}

impl PoolSide {
    /// The pool's security rules, the same on both sides: QUIC needs the TLS section and valid
    /// QUIC settings; a TLS section is well-formed; without one, `requires_tls` (why the pool
    /// leaves this host, if it does) is an error. A QUIC section with any key set is checked
    /// even where QUIC does not run (carrier `tcp`, or `auto` without TLS): a bad value is
    /// reported at load, not when the carrier changes.
    pub fn check_security(
        &self,
        carrier: CarrierName,
        tls: Option<&TlsSection>,
        quic: &QuicSection,
        link: &LinkConfig,
        requires_tls: Option<String>,
    ) -> Result<(), String> {
        let (p, prog) = (self.prefix, self.prog);
        if carrier == CarrierName::Quic && tls.is_none() {
            return Err(format!(
                "{p}carrier = \"quic\" needs a [{p}tls] section (cert, key, ca): QUIC always \
                 runs mutual TLS — `{prog} gen-keys --out DIR` makes the files"
            ));
        }
        let runs_quic =
            carrier == CarrierName::Quic || (carrier == CarrierName::Auto && tls.is_some());
        if runs_quic || *quic != QuicSection::default() {
            quic.validate(&format!("{p}quic"), link)?;
        }
        match (tls, requires_tls) {
            (Some(t), _) => t.validate(&format!("{p}tls")),
            (None, Some(why)) => Err(format!(
                "{why}: pool connections leave this host, so they must run mutual TLS; add a \
                 [{p}tls] section (cert, key, ca) — `{prog} gen-keys --out DIR` makes the files \
                 — or {} (development)",
                self.loopback_hint
            )),
            (None, None) => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn range_checks_name_the_key_and_the_range() {
        assert_eq!(check_range("a", 5, 1..=10), Ok(()));
        assert_eq!(
            check_range("pool.connections", 0usize, 1..=1024),
            Err("pool.connections 0 must be in 1..=1024".into())
        );
        assert_eq!(
            check_ms(&[("x_ms", 1), ("y_ms", MAX_MS + 1)]),
            Err(format!("y_ms {} must be in 1..={MAX_MS}", MAX_MS + 1))
        );
        assert!(check_max_header_bytes(1023).is_err());
        assert!(check_max_header_bytes(1024 * 1024).is_ok());
        assert!(check_congestion("congestion", "cubic", CarrierName::Tcp).is_ok());
        assert_eq!(
            check_congestion("pool.congestion", "vegas", CarrierName::Quic),
            Err("pool.congestion \"vegas\" must be bbr, cubic, reno or rate".into())
        );
        assert!(check_congestion("pool.congestion", "rate", CarrierName::Quic).is_ok());
        assert!(check_congestion("pool.congestion", "rate", CarrierName::Auto).is_ok());
        let e = check_congestion("pool.congestion", "rate", CarrierName::Tcp).unwrap_err();
        assert!(
            e.starts_with("pool.congestion \"rate\" needs pool.carrier = \"quic\" or \"auto\""),
            "{e}"
        );
        let e = check_congestion("congestion", "rate", CarrierName::Tcp).unwrap_err();
        assert!(
            e.starts_with("congestion \"rate\" needs carrier = \"quic\" or \"auto\""),
            "{e}"
        );
    }

    #[test]
    fn development_binds_loopback_only() {
        let lo: SocketAddr = "127.0.0.1:1".parse().unwrap();
        let any: SocketAddr = "0.0.0.0:1".parse().unwrap();
        let addrs = [("listen", lo), ("transparent.listen", any)];
        assert!(check_development_binds(Mode::Production, &addrs).is_ok());
        let e = check_development_binds(Mode::Development, &addrs).unwrap_err();
        assert!(
            e.starts_with("transparent.listen 0.0.0.0:1: development mode"),
            "{e}"
        );
    }

    #[test]
    fn pool_security_is_the_same_rule_on_both_sides() {
        let side = PoolSide {
            prefix: "pool.",
            prog: "edge-proxy",
            loopback_hint: "use loopback addresses only",
        };
        let (quic, link) = (QuicSection::default(), LinkConfig::default());
        let tls = TlsSection::from_dir(Path::new("/k"), "edge");
        let check = |carrier, tls: Option<&TlsSection>, why: Option<&str>| {
            side.check_security(carrier, tls, &quic, &link, why.map(String::from))
        };
        assert!(check(CarrierName::Tcp, None, None).is_ok());
        // auto without TLS files: TCP only (development), not an error.
        assert!(check(CarrierName::Auto, None, None).is_ok());
        assert!(check(CarrierName::Auto, Some(&tls), Some("far")).is_ok());
        assert_eq!(CarrierName::Auto.effective(false), CarrierName::Tcp);
        assert_eq!(CarrierName::Auto.effective(true), CarrierName::Auto);
        assert_eq!(CarrierName::default(), CarrierName::Auto);
        assert!(check(CarrierName::Quic, Some(&tls), Some("far")).is_ok());
        let e = check(CarrierName::Quic, None, None).unwrap_err();
        assert!(
            e.starts_with("pool.carrier = \"quic\" needs a [pool.tls] section"),
            "{e}"
        );
        let e = check(CarrierName::Tcp, None, Some("listen 10.0.0.1:1 is far")).unwrap_err();
        assert!(
            e.starts_with("listen 10.0.0.1:1 is far: pool connections"),
            "{e}"
        );
        assert!(
            e.ends_with("or use loopback addresses only (development)"),
            "{e}"
        );
        let empty = TlsSection { ca: vec![], ..tls };
        let e = check(CarrierName::Tcp, Some(&empty), None).unwrap_err();
        assert!(e.starts_with("pool.tls.ca is empty"), "{e}");
    }
}
