//! Which origin addresses the remote may connect to, and far-side name resolution.
//!
//! Production refuses loopback, private (RFC 1918, unique-local), link-local (including the cloud
//! metadata address 169.254.169.254), shared (100.64/10), unspecified, multicast and broadcast
//! destinations; the check applies to the *resolved* address, so a public name that resolves to
//! a private address is refused too. Development mode (or `allow_private_targets`) allows
//! loopback and private origins. It does NOT cache DNS answers (the system resolver does).

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::task::{Context, Poll};

use hyper_util::client::legacy::connect::dns::Name;

/// The address policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TargetPolicy {
    /// Allow loopback, private and link-local destinations.
    pub allow_private: bool,
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

fn is_special_v4(ip: std::net::Ipv4Addr) -> bool {
    let o = ip.octets();
    ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_unspecified()
        || ip.is_broadcast()
        || ip.is_multicast()
        || ip.is_documentation()
        || o[0] == 0
        || (o[0] == 100 && (o[1] & 0xc0) == 64)
        || o[0] >= 240
}

impl TargetPolicy {
    /// Why `ip` is refused, if it is.
    pub fn refuses(&self, ip: IpAddr) -> Option<&'static str> {
        let ip = match ip {
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => IpAddr::V4(v4),
                None => IpAddr::V6(v6),
            },
            v4 => v4,
        };
        if ip.is_unspecified() || ip.is_multicast() {
            return Some("unspecified or multicast address");
        }
        if self.allow_private {
            return None;
        }
        let special = match ip {
            IpAddr::V4(v4) => is_special_v4(v4),
            IpAddr::V6(v6) => {
                let s = v6.segments();
                v6.is_loopback() || (s[0] & 0xfe00) == 0xfc00 || (s[0] & 0xffc0) == 0xfe80
            }
        };
        special.then_some("loopback, private, link-local or reserved address")
    }

    /// Resolves `host:port` on this side and keeps the allowed addresses.
    pub async fn resolve(&self, host: &str, port: u16) -> Result<Vec<SocketAddr>, ResolveError> {
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let addrs: Vec<SocketAddr> = match host.parse::<IpAddr>() {
            Ok(ip) => vec![SocketAddr::new(ip, port)],
            Err(_) => tokio::net::lookup_host((host, port))
                .await
                .map_err(|e| ResolveError::Dns(host.to_string(), e.to_string()))?
                .collect(),
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
                .map(|a| a.ip().to_string())
                .collect::<Vec<_>>()
                .join(", ");
            return Err(ResolveError::Forbidden(host.to_string(), list));
        }
        Ok(allowed)
    }
}

/// The resolver hyper's connector uses: far-side DNS plus the address policy.
#[derive(Debug, Clone, Copy)]
pub struct PolicyResolver(pub TargetPolicy);

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl tower_service::Service<Name> for PolicyResolver {
    type Response = std::vec::IntoIter<SocketAddr>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, name: Name) -> Self::Future {
        let policy = self.0;
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

    #[test]
    fn production_refuses_private_and_metadata() {
        let p = TargetPolicy {
            allow_private: false,
        };
        for ip in [
            "127.0.0.1",
            "10.1.2.3",
            "192.168.1.1",
            "172.16.0.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "::1",
            "fd00::1",
            "fe80::1",
            "::ffff:127.0.0.1",
        ] {
            assert!(p.refuses(ip.parse().unwrap()).is_some(), "{ip}");
        }
        for ip in ["93.184.216.34", "2606:2800:220:1::1"] {
            assert!(p.refuses(ip.parse().unwrap()).is_none(), "{ip}");
        }
        let dev = TargetPolicy {
            allow_private: true,
        };
        assert!(dev.refuses("127.0.0.1".parse().unwrap()).is_none());
        assert!(dev.refuses("0.0.0.0".parse().unwrap()).is_some());
    }

    #[tokio::test]
    async fn resolve_checks_the_resolved_address() {
        let p = TargetPolicy {
            allow_private: false,
        };
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
        };
        assert!(!dev.resolve("127.0.0.1", 80).await.unwrap().is_empty());
    }
}
