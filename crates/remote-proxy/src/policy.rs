//! Which origin addresses the remote may connect to, and far-side name resolution.
//!
//! Production refuses every destination that is not a public unicast address: unspecified
//! (`0.0.0.0/8`, `::`), loopback (`127/8`, `::1`), private (RFC 1918), shared address space
//! (`100.64/10`, RFC 6598), link-local (`169.254/16`, `fe80::/10`) including the cloud metadata
//! services (`169.254.169.254`, `fd00:ec2::254`), unique-local (`fc00::/7`), multicast,
//! broadcast and other reserved or documentation ranges, and IPv6 forms that carry an IPv4
//! address (IPv4-mapped `::ffff:0:0/96` and IPv4-compatible `::/96` always; NAT64
//! `64:ff9b::/96`, 6to4 `2002::/16` and Teredo `2001::/32` when the embedded IPv4 address is
//! refused). The check applies to the *resolved* address, so a public name that resolves to a
//! private address is refused too. `allowed_targets` networks are reachable whatever their
//! class (except unspecified, multicast and broadcast); development mode (or
//! `allow_private_targets`) allows every unicast destination. Static `hosts` entries answer
//! before DNS, and their addresses pass the same check.
//!
//! It does NOT cache DNS answers (the system resolver does).

use std::collections::BTreeMap;
use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use hyper_util::client::legacy::connect::dns::Name;
use ipnet::IpNet;

/// The address policy.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TargetPolicy {
    /// Allow every unicast destination (loopback, private, link-local...): development.
    pub allow_private: bool,
    /// Networks reachable whatever their class (for example an internal origin network);
    /// unspecified, multicast and broadcast addresses stay refused.
    pub allowed_targets: Vec<IpNet>,
    /// Static answers consulted before DNS, by lower-case name (like `/etc/hosts`, for this
    /// process only). Their addresses are checked like resolved ones.
    pub hosts: BTreeMap<String, Vec<IpAddr>>,
}

/// Why a destination address is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// `0.0.0.0/8`, `::`.
    Unspecified,
    /// Multicast (`224/4`, `ff00::/8`).
    Multicast,
    /// The limited broadcast address `255.255.255.255`.
    Broadcast,
    /// `127/8`, `::1`.
    Loopback,
    /// RFC 1918 private networks.
    Private,
    /// Shared address space `100.64/10` (carrier-grade NAT, RFC 6598).
    Shared,
    /// A cloud metadata service (`169.254.169.254`, `fd00:ec2::254`).
    Metadata,
    /// Link-local (`169.254/16`, `fe80::/10`).
    LinkLocal,
    /// Unique-local IPv6 (`fc00::/7`).
    UniqueLocal,
    /// Reserved, documentation, benchmarking or protocol-assignment ranges.
    Reserved,
    /// An IPv6 address carrying an IPv4 address (mapped, compatible; or NAT64, 6to4, Teredo
    /// embedding a refused one).
    EmbeddedV4,
}

impl Refusal {
    /// A short reason for logs and 403 bodies.
    pub fn reason(self) -> &'static str {
        match self {
            Refusal::Unspecified => "unspecified address",
            Refusal::Multicast => "multicast address",
            Refusal::Broadcast => "broadcast address",
            Refusal::Loopback => "loopback address",
            Refusal::Private => "private address (RFC 1918)",
            Refusal::Shared => "shared address space (100.64.0.0/10)",
            Refusal::Metadata => "cloud metadata address",
            Refusal::LinkLocal => "link-local address",
            Refusal::UniqueLocal => "unique-local address (fc00::/7)",
            Refusal::Reserved => "reserved or documentation address",
            Refusal::EmbeddedV4 => "IPv6 address embedding an IPv4 address",
        }
    }

    /// Refused even when development mode or `allowed_targets` allows the address.
    fn always(self) -> bool {
        matches!(
            self,
            Refusal::Unspecified | Refusal::Multicast | Refusal::Broadcast
        )
    }
}

/// The class of a non-public IPv4 address, `None` for public unicast.
pub fn classify_v4(ip: Ipv4Addr) -> Option<Refusal> {
    let o = ip.octets();
    Some(if o[0] == 0 {
        Refusal::Unspecified
    } else if ip.is_broadcast() {
        Refusal::Broadcast
    } else if ip.is_multicast() {
        Refusal::Multicast
    } else if ip.is_loopback() {
        Refusal::Loopback
    } else if ip.is_private() {
        Refusal::Private
    } else if o[0] == 100 && (o[1] & 0xc0) == 64 {
        Refusal::Shared
    } else if o == [169, 254, 169, 254] {
        Refusal::Metadata
    } else if ip.is_link_local() {
        Refusal::LinkLocal
    } else if ip.is_documentation()
        || o[0] >= 240
        || (o[0] == 192 && o[1] == 0 && o[2] == 0)
        || (o[0] == 198 && (o[1] & 0xfe) == 18)
    {
        Refusal::Reserved
    } else {
        return None;
    })
}

/// The IPv4 address an IPv6 address carries, if it is of a form that embeds one:
/// (embedded address, whether the form itself is refused).
fn embedded_v4(v6: Ipv6Addr) -> Option<(Ipv4Addr, bool)> {
    let s = v6.segments();
    let low = Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8);
    if s[..5] == [0; 5] && s[5] == 0xffff {
        return Some((low, true)); // IPv4-mapped ::ffff:a.b.c.d
    }
    if s[..6] == [0; 6] && !(s[6] == 0 && s[7] <= 1) {
        return Some((low, true)); // IPv4-compatible ::a.b.c.d (deprecated)
    }
    if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        return Some((low, false)); // NAT64 well-known prefix
    }
    if s[0] == 0x2002 {
        let v4 = Ipv4Addr::new((s[1] >> 8) as u8, s[1] as u8, (s[2] >> 8) as u8, s[2] as u8);
        return Some((v4, false)); // 6to4
    }
    if s[0] == 0x2001 && s[1] == 0 {
        // Teredo: the client's address is the bit-inverted low 32 bits.
        let c = !((u32::from(s[6]) << 16) | u32::from(s[7]));
        return Some((Ipv4Addr::from(c), false));
    }
    None
}

/// The class of a non-public IPv6 address, `None` for public unicast.
pub fn classify_v6(ip: Ipv6Addr) -> Option<Refusal> {
    let s = ip.segments();
    Some(if ip.is_unspecified() {
        Refusal::Unspecified
    } else if ip.is_loopback() {
        Refusal::Loopback
    } else if ip.is_multicast() {
        Refusal::Multicast
    } else if ip == Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254) {
        Refusal::Metadata
    } else if (s[0] & 0xfe00) == 0xfc00 {
        Refusal::UniqueLocal
    } else if (s[0] & 0xffc0) == 0xfe80 {
        Refusal::LinkLocal
    } else if let Some((v4, refused_form)) = embedded_v4(ip) {
        match (classify_v4(v4), refused_form) {
            (Some(c), _) if c.always() => c,
            (_, true) | (Some(_), false) => Refusal::EmbeddedV4,
            (None, false) => return None,
        }
    } else if (s[0] == 0x2001 && s[1] == 0xdb8)
        || (s[0] == 0x100 && s[1..4] == [0, 0, 0])
        || (s[0] & 0xe000) != 0x2000
    {
        // Documentation 2001:db8::/32, discard-only 100::/64, anything outside global
        // unicast 2000::/3.
        Refusal::Reserved
    } else {
        return None;
    })
}

/// The class of a non-public address, `None` for public unicast.
pub fn classify(ip: IpAddr) -> Option<Refusal> {
    match ip {
        IpAddr::V4(v4) => classify_v4(v4),
        IpAddr::V6(v6) => classify_v6(v6),
    }
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.reason())
    }
}

/// Why a name gave no usable address.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ResolveError {
    /// Resolution failed or returned nothing.
    #[error("cannot resolve {0}: {1}")]
    Dns(String, String),
    /// Every address is refused by policy.
    #[error("{0} resolves only to refused addresses ({1})")]
    Forbidden(String, String),
}

impl TargetPolicy {
    /// Why `ip` is refused, if it is.
    pub fn refuses(&self, ip: IpAddr) -> Option<Refusal> {
        let class = classify(ip)?;
        if class.always() {
            return Some(class);
        }
        if self.allow_private {
            return None;
        }
        let embedded = match ip {
            IpAddr::V6(v6) => embedded_v4(v6).map(|(v4, _)| IpAddr::V4(v4)),
            IpAddr::V4(_) => None,
        };
        let allowed = self.allowed_targets.iter().any(|n| {
            // A metadata service is reachable only when named exactly (a /32 or /128), never
            // as a side effect of allowing a whole network.
            let exact = n.prefix_len() == n.max_prefix_len();
            (class != Refusal::Metadata || exact)
                && (n.contains(&ip) || embedded.is_some_and(|e| n.contains(&e)))
        });
        (!allowed).then_some(class)
    }

    /// Resolves `host:port` on this side (static `hosts` first, then DNS) and keeps the
    /// allowed addresses.
    pub async fn resolve(&self, host: &str, port: u16) -> Result<Vec<SocketAddr>, ResolveError> {
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let addrs: Vec<SocketAddr> = if let Ok(ip) = host.parse::<IpAddr>() {
            vec![SocketAddr::new(ip, port)]
        } else if let Some(ips) = self.hosts.get(&host.to_ascii_lowercase()) {
            ips.iter().map(|ip| SocketAddr::new(*ip, port)).collect()
        } else {
            tokio::net::lookup_host((host, port))
                .await
                .map_err(|e| ResolveError::Dns(host.to_string(), e.to_string()))?
                .collect()
        };
        if addrs.is_empty() {
            return Err(ResolveError::Dns(host.to_string(), "no addresses".into()));
        }
        let allowed: Vec<SocketAddr> = addrs
            .iter()
            .copied()
            .filter(|a| self.refuses(a.ip()).is_none())
            .collect();
        if allowed.is_empty() {
            let list = addrs
                .iter()
                .map(|a| match self.refuses(a.ip()) {
                    Some(why) => format!("{}: {why}", a.ip()),
                    None => a.ip().to_string(),
                })
                .collect::<Vec<_>>()
                .join(", ");
            return Err(ResolveError::Forbidden(host.to_string(), list));
        }
        Ok(allowed)
    }
}

/// The resolver hyper's connector uses: far-side DNS plus the address policy.
#[derive(Debug, Clone)]
pub struct PolicyResolver(pub Arc<TargetPolicy>);

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl tower_service::Service<Name> for PolicyResolver {
    type Response = std::vec::IntoIter<SocketAddr>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, name: Name) -> Self::Future {
        let policy = self.0.clone();
        Box::pin(async move {
            // Port 0: hyper's connector puts the request's port in.
            let addrs = policy.resolve(name.as_str(), 0).await?;
            Ok(addrs.into_iter())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn production() -> TargetPolicy {
        TargetPolicy::default()
    }

    fn class(ip: &str) -> Option<Refusal> {
        production().refuses(ip.parse().unwrap())
    }

    #[test]
    fn each_class_is_refused_in_production() {
        use Refusal::*;
        for (ip, want) in [
            ("0.0.0.0", Unspecified),
            ("0.1.2.3", Unspecified),
            ("::", Unspecified),
            ("127.0.0.1", Loopback),
            ("127.255.0.9", Loopback),
            ("::1", Loopback),
            ("10.1.2.3", Private),
            ("172.16.0.1", Private),
            ("172.31.255.254", Private),
            ("192.168.1.1", Private),
            ("100.64.0.1", Shared),
            ("100.127.255.254", Shared),
            ("169.254.169.254", Metadata),
            ("fd00:ec2::254", Metadata),
            ("169.254.1.1", LinkLocal),
            ("fe80::1", LinkLocal),
            ("febf::1", LinkLocal),
            ("fc00::1", UniqueLocal),
            ("fd12:3456::1", UniqueLocal),
            ("224.0.0.1", Multicast),
            ("239.255.255.250", Multicast),
            ("ff02::1", Multicast),
            ("255.255.255.255", Broadcast),
            ("240.0.0.1", Reserved),
            ("192.0.2.1", Reserved),
            ("198.51.100.1", Reserved),
            ("203.0.113.1", Reserved),
            ("198.18.0.1", Reserved),
            ("192.0.0.8", Reserved),
            ("2001:db8::1", Reserved),
            ("100::1", Reserved),
            ("::ffff:127.0.0.1", EmbeddedV4),
            ("::ffff:10.0.0.1", EmbeddedV4),
            // Mapped is refused even when the embedded address is public.
            ("::ffff:93.184.216.34", EmbeddedV4),
            ("::127.0.0.1", EmbeddedV4),
            ("::ffff:0.0.0.0", Unspecified),
            ("::ffff:255.255.255.255", Broadcast),
            ("64:ff9b::7f00:1", EmbeddedV4),
            ("2002:a00:1::1", EmbeddedV4),
            ("2002:7f00:1::1", EmbeddedV4),
            // Teredo client 192.168.0.1 is carried inverted: 3f57:fffe.
            ("2001:0:4136:e378:8000:63bf:3f57:fffe", EmbeddedV4),
        ] {
            assert_eq!(class(ip), Some(want), "{ip}");
        }
    }

    #[test]
    fn public_addresses_pass() {
        for ip in [
            "93.184.216.34",
            "1.1.1.1",
            "100.128.0.1",
            "172.32.0.1",
            "169.255.0.1",
            "2606:2800:220:1::1",
            "64:ff9b::5db8:d822",
            "2002:5db8:d822::1",
            "2001:0:4136:e378:8000:63bf:a247:27dd",
        ] {
            assert_eq!(class(ip), None, "{ip}");
        }
    }

    #[test]
    fn development_and_allow_list() {
        let dev = TargetPolicy {
            allow_private: true,
            ..TargetPolicy::default()
        };
        assert_eq!(dev.refuses("127.0.0.1".parse().unwrap()), None);
        assert_eq!(dev.refuses("::ffff:10.0.0.1".parse().unwrap()), None);
        for ip in ["0.0.0.0", "::", "224.0.0.1", "255.255.255.255"] {
            assert!(dev.refuses(ip.parse().unwrap()).is_some(), "{ip}");
        }
        let p = TargetPolicy {
            allowed_targets: vec![
                "10.20.0.0/16".parse().unwrap(),
                "fd00::/8".parse().unwrap(),
                "169.254.0.0/16".parse().unwrap(),
            ],
            ..TargetPolicy::default()
        };
        let r = |ip: &str| p.refuses(ip.parse().unwrap());
        assert_eq!(r("10.20.1.2"), None);
        assert_eq!(r("::ffff:10.20.1.2"), None);
        assert_eq!(r("10.21.1.2"), Some(Refusal::Private));
        assert_eq!(r("fd00::5"), None);
        assert_eq!(r("169.254.1.1"), None);
        // A metadata address is allowed only when listed exactly.
        assert_eq!(r("169.254.169.254"), Some(Refusal::Metadata));
        assert_eq!(r("fd00:ec2::254"), Some(Refusal::Metadata));
        let exact = TargetPolicy {
            allowed_targets: vec!["169.254.169.254/32".parse().unwrap()],
            ..TargetPolicy::default()
        };
        assert_eq!(exact.refuses("169.254.169.254".parse().unwrap()), None);
    }

    #[tokio::test]
    async fn resolve_checks_the_resolved_address() {
        let p = production();
        assert!(matches!(
            p.resolve("localhost", 80).await,
            Err(ResolveError::Forbidden(..))
        ));
        // A 64-byte label is rejected by the resolver library before any query is sent.
        let bad = format!("{}.example", "a".repeat(64));
        assert!(matches!(
            p.resolve(&bad, 80).await,
            Err(ResolveError::Dns(..))
        ));
        let dev = TargetPolicy {
            allow_private: true,
            ..TargetPolicy::default()
        };
        assert!(!dev.resolve("127.0.0.1", 80).await.unwrap().is_empty());
    }

    #[tokio::test]
    async fn static_hosts_answer_first_and_are_checked() {
        let mut p = production();
        p.hosts.insert(
            "origin.test".into(),
            vec![
                "127.0.0.1".parse().unwrap(),
                "93.184.216.34".parse().unwrap(),
            ],
        );
        p.hosts
            .insert("inside.test".into(), vec!["10.0.0.7".parse().unwrap()]);
        let got = p.resolve("Origin.TEST", 443).await.unwrap();
        assert_eq!(got, vec!["93.184.216.34:443".parse().unwrap()]);
        match p.resolve("inside.test", 80).await {
            Err(ResolveError::Forbidden(name, why)) => {
                assert_eq!(name, "inside.test");
                assert!(why.contains("10.0.0.7: private address"), "{why}");
            }
            other => panic!("{other:?}"),
        }
    }
}
