//! Request targets: absolute-form `http://` URIs, CONNECT authorities and `Host` values.
//!
//! Produces the `host:port` string a stream is opened to (IPv6 literals in brackets) and the
//! origin-form path forwarded to the origin. Does NOT resolve names: the far side does.

use std::net::IpAddr;

/// A parsed destination.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Authority {
    /// Host name or IP literal, without brackets.
    pub host: String,
    /// Port.
    pub port: u16,
}

impl Authority {
    /// `host:port`, with IPv6 literals in brackets.
    pub fn target(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }

    /// The value for a `Host` header (port omitted when it is the default `default_port`).
    pub fn host_header(&self, default_port: u16) -> String {
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        if self.port == default_port {
            host
        } else {
            format!("{host}:{}", self.port)
        }
    }

    /// The host as an IP address, if it is a literal.
    pub fn ip(&self) -> Option<IpAddr> {
        self.host.parse().ok()
    }
}

fn valid_host(host: &str) -> bool {
    !host.is_empty()
        && host.len() <= 253
        && host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.' || b == b'_')
}

/// Parses `host[:port]` (IPv6 literals in brackets); `default_port` when the port is absent.
pub fn parse_authority(s: &str, default_port: Option<u16>) -> Result<Authority, String> {
    let s = s.trim();
    if s.contains('@') {
        return Err("userinfo is not allowed in the authority".into());
    }
    let (host, port) = if let Some(rest) = s.strip_prefix('[') {
        let (h, after) = rest
            .split_once(']')
            .ok_or_else(|| format!("unclosed IPv6 literal in {s:?}"))?;
        let ip: std::net::Ipv6Addr = h
            .parse()
            .map_err(|_| format!("invalid IPv6 literal {h:?}"))?;
        let port = match after.strip_prefix(':') {
            Some(p) => Some(p),
            None if after.is_empty() => None,
            None => return Err(format!("junk after IPv6 literal in {s:?}")),
        };
        (ip.to_string(), port)
    } else {
        let (host, port) = match s.rsplit_once(':') {
            Some((h, p)) => (h.to_ascii_lowercase(), Some(p)),
            None => (s.to_ascii_lowercase(), None),
        };
        // Only a bracketed IPv6 literal may hold a colon; anything else is a name or an
        // IPv4 literal and must pass the host-name check.
        if !valid_host(&host) {
            return Err(format!("invalid host {host:?}"));
        }
        (host, port)
    };
    let port = match port {
        Some(p) => p
            .parse::<u16>()
            .ok()
            .filter(|&p| p != 0)
            .ok_or_else(|| format!("invalid port {p:?}"))?,
        None => default_port.ok_or_else(|| format!("port missing in {s:?}"))?,
    };
    Ok(Authority { host, port })
}

/// An absolute-form `http://` request target split into authority and origin-form path.
pub fn parse_absolute(target: &str) -> Result<(Authority, String), String> {
    let lower = target.get(..8).unwrap_or(target).to_ascii_lowercase();
    let rest = if lower.starts_with("http://") {
        &target[7..]
    } else if lower.starts_with("ws://") {
        // A WebSocket URI (RFC 6455 §3) sent in absolute-form: the same authority and path.
        &target[5..]
    } else if lower.starts_with("https://") {
        return Err("https:// URLs must be fetched through a CONNECT tunnel".into());
    } else if target.starts_with('/') {
        return Err(
            "a proxy needs an absolute request target (http://host/path), not a path".into(),
        );
    } else {
        return Err(format!("unsupported request target {target:?}"));
    };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let auth = parse_authority(&rest[..end], Some(80))?;
    let mut path = rest[end..]
        .split('#')
        .next()
        .unwrap_or_default()
        .to_string();
    if path.is_empty() || path.starts_with('?') {
        path.insert(0, '/');
    }
    if path.bytes().any(|b| b <= b' ' || b == 0x7f) {
        return Err("invalid characters in the request target".into());
    }
    Ok((auth, path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absolute_form() {
        let (a, p) = parse_absolute("http://Example.com/a/b?c=d").unwrap();
        assert_eq!(a.target(), "example.com:80");
        assert_eq!(p, "/a/b?c=d");
        let (a, p) = parse_absolute("http://127.0.0.1:8080").unwrap();
        assert_eq!(a.target(), "127.0.0.1:8080");
        assert_eq!(a.host_header(80), "127.0.0.1:8080");
        assert_eq!(p, "/");
        let (a, p) = parse_absolute("http://[::1]:81?q").unwrap();
        assert_eq!(a.target(), "[::1]:81");
        assert_eq!(p, "/?q");
        assert!(parse_absolute("https://x/").is_err());
        assert!(parse_absolute("/x").is_err());
        assert!(parse_absolute("http://user@x/").is_err());
        assert!(parse_absolute("http://x:0/").is_err());
        assert!(parse_absolute("http://x:99999/").is_err());
        assert!(parse_absolute("http:///").is_err());
        assert!(parse_absolute("ftp://x/").is_err());
    }

    #[test]
    fn connect_authority() {
        assert_eq!(
            parse_authority("example.com:443", None).unwrap().target(),
            "example.com:443"
        );
        assert!(parse_authority("example.com", None).is_err());
        assert_eq!(
            parse_authority("[2001:db8::1]:443", None).unwrap().host,
            "2001:db8::1"
        );
        assert!(parse_authority("bad host:1", None).is_err());
    }

    #[test]
    fn a_colon_outside_brackets_is_refused_as_a_host() {
        for bad in ["a:b:443", "x:y:80", "::1", "2001:db8::1:443", ":443"] {
            let err = parse_authority(bad, Some(80)).unwrap_err();
            assert!(err.contains("invalid host"), "{bad}: {err}");
        }
        let long = format!("http://{}:x:80/", "a".repeat(300));
        assert!(parse_absolute(&long).unwrap_err().contains("invalid host"));
        assert!(parse_authority(&format!("{}:80", "a".repeat(254)), None).is_err());
        assert_eq!(
            parse_authority(&format!("{}:80", "a".repeat(253)), None)
                .unwrap()
                .port,
            80
        );
    }
}
