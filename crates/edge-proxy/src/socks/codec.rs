//! The SOCKS5 wire format (RFC 1928) and its username/password sub-negotiation (RFC 1929),
//! sans-IO: parsers that take the bytes read so far and say "need more", "here is the message
//! and how many bytes it used", or why the bytes are not a valid message; encoders that produce
//! the server's messages.
//!
//! Every message has a bounded size (each variable field has a one-byte length), so a caller
//! that has buffered [`MAX_MESSAGE`] bytes without a complete message has a peer that is not
//! speaking SOCKS5. Wire codes are newtypes with named constants.
//!
//! It does NOT do I/O, time, authentication decisions or policy ([`super`] does), and parses no
//! GSSAPI messages.

use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};

use http1::target::Authority;

/// Protocol version byte of every SOCKS5 message.
pub const VERSION: u8 = 0x05;
/// Version byte of the RFC 1929 username/password sub-negotiation.
pub const AUTH_VERSION: u8 = 0x01;
/// Longest message a client sends: a request with a 255-byte domain name
/// (`VER CMD RSV ATYP LEN NAME PORT` = 4 + 1 + 255 + 2), an RFC 1929 request
/// (`VER ULEN UNAME PLEN PASSWD` = 3 + 255 + 255), a greeting (2 + 255).
pub const MAX_MESSAGE: usize = 3 + 255 + 255;
/// Longest domain name accepted (RFC 1035 §2.3.4: 253 characters in text form).
pub const MAX_DOMAIN: usize = 253;

/// An authentication method (RFC 1928 §3).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Method(pub u8);

impl Method {
    /// No authentication required.
    pub const NO_AUTH: Method = Method(0x00);
    /// GSSAPI (not supported).
    pub const GSSAPI: Method = Method(0x01);
    /// Username/password (RFC 1929).
    pub const USER_PASSWORD: Method = Method(0x02);
    /// No acceptable methods: the client must close.
    pub const NONE_ACCEPTABLE: Method = Method(0xFF);
}

impl fmt::Debug for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Method::NO_AUTH => f.write_str("NO_AUTH"),
            Method::GSSAPI => f.write_str("GSSAPI"),
            Method::USER_PASSWORD => f.write_str("USER_PASSWORD"),
            Method::NONE_ACCEPTABLE => f.write_str("NONE_ACCEPTABLE"),
            Method(n) => write!(f, "METHOD(0x{n:02x})"),
        }
    }
}

/// A request's command (RFC 1928 §4).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Command(pub u8);

impl Command {
    /// Open a TCP connection to the destination.
    pub const CONNECT: Command = Command(0x01);
    /// Accept one inbound connection (not supported).
    pub const BIND: Command = Command(0x02);
    /// Relay UDP datagrams (not supported).
    pub const UDP_ASSOCIATE: Command = Command(0x03);
}

impl fmt::Debug for Command {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Command::CONNECT => f.write_str("CONNECT"),
            Command::BIND => f.write_str("BIND"),
            Command::UDP_ASSOCIATE => f.write_str("UDP_ASSOCIATE"),
            Command(n) => write!(f, "COMMAND(0x{n:02x})"),
        }
    }
}

/// The reply field of a server reply (RFC 1928 §6). Unknown values print as `UNKNOWN(n)`.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Reply(pub u8);

impl Reply {
    /// Succeeded.
    pub const SUCCEEDED: Reply = Reply(0x00);
    /// General SOCKS server failure.
    pub const GENERAL_FAILURE: Reply = Reply(0x01);
    /// Connection not allowed by ruleset.
    pub const NOT_ALLOWED: Reply = Reply(0x02);
    /// Network unreachable.
    pub const NETWORK_UNREACHABLE: Reply = Reply(0x03);
    /// Host unreachable.
    pub const HOST_UNREACHABLE: Reply = Reply(0x04);
    /// Connection refused.
    pub const CONNECTION_REFUSED: Reply = Reply(0x05);
    /// TTL expired (used for timeouts, as common SOCKS servers do).
    pub const TTL_EXPIRED: Reply = Reply(0x06);
    /// Command not supported.
    pub const COMMAND_NOT_SUPPORTED: Reply = Reply(0x07);
    /// Address type not supported.
    pub const ADDRESS_TYPE_NOT_SUPPORTED: Reply = Reply(0x08);

    /// The RFC's name of the code, for logs.
    pub fn name(self) -> &'static str {
        match self {
            Reply::SUCCEEDED => "succeeded",
            Reply::GENERAL_FAILURE => "general SOCKS server failure",
            Reply::NOT_ALLOWED => "connection not allowed by ruleset",
            Reply::NETWORK_UNREACHABLE => "network unreachable",
            Reply::HOST_UNREACHABLE => "host unreachable",
            Reply::CONNECTION_REFUSED => "connection refused",
            Reply::TTL_EXPIRED => "TTL expired",
            Reply::COMMAND_NOT_SUPPORTED => "command not supported",
            Reply::ADDRESS_TYPE_NOT_SUPPORTED => "address type not supported",
            _ => "unknown",
        }
    }
}

impl fmt::Debug for Reply {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            "unknown" => write!(f, "UNKNOWN({})", self.0),
            name => write!(f, "0x{:02x} ({name})", self.0),
        }
    }
}

impl fmt::Display for Reply {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// Address types (ATYP).
pub mod atyp {
    /// IPv4 address, 4 bytes.
    pub const IPV4: u8 = 0x01;
    /// Domain name: one length byte, then the name.
    pub const DOMAIN: u8 = 0x03;
    /// IPv6 address, 16 bytes.
    pub const IPV6: u8 = 0x04;
}

/// A request's destination address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Addr {
    /// An IPv4 literal.
    V4(Ipv4Addr),
    /// An IPv6 literal.
    V6(Ipv6Addr),
    /// A domain name, resolved on the far side (never here). Checked: 1 to [`MAX_DOMAIN`]
    /// characters of letters, digits, `-`, `.` and `_`, stored lower-case.
    Domain(String),
}

/// The client's method selection message: the methods it offers, in its order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Greeting {
    /// Offered methods (1 to 255).
    pub methods: Vec<Method>,
}

/// An RFC 1929 username/password request.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    /// User name, 1 to 255 bytes (not necessarily UTF-8).
    pub user: Vec<u8>,
    /// Password, 1 to 255 bytes.
    pub password: Vec<u8>,
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("user", &String::from_utf8_lossy(&self.user))
            .field("password", &"<redacted>")
            .finish()
    }
}

/// A client request (RFC 1928 §4), any command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// The command.
    pub command: Command,
    /// Destination address.
    pub addr: Addr,
    /// Destination port.
    pub port: u16,
}

impl Request {
    /// The destination as `host:port` (IPv6 literals in brackets): what a tunnel stream is
    /// opened to, exactly as for an HTTP CONNECT authority.
    pub fn authority(&self) -> Authority {
        let host = match &self.addr {
            Addr::V4(ip) => ip.to_string(),
            Addr::V6(ip) => ip.to_string(),
            Addr::Domain(name) => name.clone(),
        };
        Authority {
            host,
            port: self.port,
        }
    }
}

/// Why bytes are not a valid SOCKS5 message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Malformed {
    /// The version byte is not 5 (or not 1 in the RFC 1929 request).
    #[error("version byte 0x{0:02x} (expected 0x{1:02x})")]
    Version(u8, u8),
    /// A greeting that offers no method.
    #[error("the greeting offers no authentication method")]
    NoMethods,
    /// An empty user name or password.
    #[error("empty {0} in the username/password request")]
    EmptyField(&'static str),
    /// The reserved byte of a request is not zero.
    #[error("reserved byte 0x{0:02x} (must be 0x00)")]
    Reserved(u8),
    /// The address type is not one RFC 1928 defines.
    #[error("address type 0x{0:02x} is not supported")]
    AddressType(u8),
    /// The domain name is empty, too long or holds characters no host name has.
    #[error("bad domain name: {0}")]
    Domain(String),
    /// Port 0 is not a destination.
    #[error("destination port 0")]
    PortZero,
}

/// The result of parsing a buffer: a complete message and the bytes it used, or more needed.
pub type Parsed<T> = Result<Option<(T, usize)>, Malformed>;

/// Parses the method selection message `VER NMETHODS METHODS...`.
pub fn parse_greeting(b: &[u8]) -> Parsed<Greeting> {
    let Some(&ver) = b.first() else {
        return Ok(None);
    };
    if ver != VERSION {
        return Err(Malformed::Version(ver, VERSION));
    }
    let Some(&n) = b.get(1) else {
        return Ok(None);
    };
    if n == 0 {
        return Err(Malformed::NoMethods);
    }
    let end = 2 + n as usize;
    let Some(methods) = b.get(2..end) else {
        return Ok(None);
    };
    let methods = methods.iter().map(|&m| Method(m)).collect();
    Ok(Some((Greeting { methods }, end)))
}

/// Parses the RFC 1929 request `VER ULEN UNAME PLEN PASSWD`.
pub fn parse_credentials(b: &[u8]) -> Parsed<Credentials> {
    let Some(&ver) = b.first() else {
        return Ok(None);
    };
    if ver != AUTH_VERSION {
        return Err(Malformed::Version(ver, AUTH_VERSION));
    }
    let Some(&ulen) = b.get(1) else {
        return Ok(None);
    };
    if ulen == 0 {
        return Err(Malformed::EmptyField("user name"));
    }
    let uend = 2 + ulen as usize;
    let Some(&plen) = b.get(uend) else {
        return Ok(None);
    };
    if plen == 0 {
        return Err(Malformed::EmptyField("password"));
    }
    let end = uend + 1 + plen as usize;
    if b.len() < end {
        return Ok(None);
    }
    Ok(Some((
        Credentials {
            user: b[2..uend].to_vec(),
            password: b[uend + 1..end].to_vec(),
        },
        end,
    )))
}

/// Parses a request `VER CMD RSV ATYP DST.ADDR DST.PORT`, whatever its command (the caller
/// answers commands other than CONNECT). An unknown address type is
/// [`Malformed::AddressType`]: its length is unknown, so nothing after it can be read.
pub fn parse_request(b: &[u8]) -> Parsed<Request> {
    let Some(&ver) = b.first() else {
        return Ok(None);
    };
    if ver != VERSION {
        return Err(Malformed::Version(ver, VERSION));
    }
    if b.len() < 4 {
        return Ok(None);
    }
    let command = Command(b[1]);
    if b[2] != 0 {
        return Err(Malformed::Reserved(b[2]));
    }
    let (addr, at) = match b[3] {
        atyp::IPV4 => {
            let Some(a) = b.get(4..8) else {
                return Ok(None);
            };
            let a: [u8; 4] = a.try_into().expect("four bytes");
            (Addr::V4(Ipv4Addr::from(a)), 8)
        }
        atyp::IPV6 => {
            let Some(a) = b.get(4..20) else {
                return Ok(None);
            };
            let a: [u8; 16] = a.try_into().expect("sixteen bytes");
            (Addr::V6(Ipv6Addr::from(a)), 20)
        }
        atyp::DOMAIN => {
            let Some(&len) = b.get(4) else {
                return Ok(None);
            };
            let end = 5 + len as usize;
            let Some(name) = b.get(5..end) else {
                return Ok(None);
            };
            (Addr::Domain(check_domain(name)?), end)
        }
        other => return Err(Malformed::AddressType(other)),
    };
    let Some(p) = b.get(at..at + 2) else {
        return Ok(None);
    };
    let port = u16::from_be_bytes([p[0], p[1]]);
    if port == 0 {
        return Err(Malformed::PortZero);
    }
    Ok(Some((
        Request {
            command,
            addr,
            port,
        },
        at + 2,
    )))
}

/// A domain name as the far side may resolve it: 1 to [`MAX_DOMAIN`] bytes of ASCII letters,
/// digits, `-`, `.` and `_` (the host-name rule of HTTP targets), lower-cased.
fn check_domain(name: &[u8]) -> Result<String, Malformed> {
    if name.is_empty() {
        return Err(Malformed::Domain("empty".into()));
    }
    if name.len() > MAX_DOMAIN {
        return Err(Malformed::Domain(format!(
            "{} bytes, at most {MAX_DOMAIN}",
            name.len()
        )));
    }
    if let Some(&c) = name
        .iter()
        .find(|&&c| !(c.is_ascii_alphanumeric() || c == b'-' || c == b'.' || c == b'_'))
    {
        return Err(Malformed::Domain(format!(
            "byte 0x{c:02x} is not allowed in a host name"
        )));
    }
    Ok(String::from_utf8_lossy(name).to_ascii_lowercase())
}

/// The method selection reply `VER METHOD`.
pub fn encode_method(m: Method) -> [u8; 2] {
    [VERSION, m.0]
}

/// The RFC 1929 status reply `VER STATUS` (0 = success; anything else = failure, and the
/// server closes the connection).
pub fn encode_auth_status(ok: bool) -> [u8; 2] {
    [AUTH_VERSION, if ok { 0x00 } else { 0x01 }]
}

/// The address and port a reply reports as bound: `0.0.0.0:0`. The connection to the
/// destination is made on the far side, so no address of this host would be true; the field is
/// informative for CONNECT and clients ignore it (common practice among SOCKS servers).
pub const BOUND: (Ipv4Addr, u16) = (Ipv4Addr::UNSPECIFIED, 0);

/// A reply `VER REP RSV ATYP BND.ADDR BND.PORT` with [`BOUND`] as the bound address.
pub fn encode_reply(rep: Reply) -> [u8; 10] {
    let [a, b, c, d] = BOUND.0.octets();
    let [p0, p1] = BOUND.1.to_be_bytes();
    [VERSION, rep.0, 0x00, atyp::IPV4, a, b, c, d, p0, p1]
}

/// Encodes a request (the client's side; for tests and tools).
pub fn encode_request(r: &Request) -> Vec<u8> {
    let mut v = vec![VERSION, r.command.0, 0x00];
    match &r.addr {
        Addr::V4(ip) => {
            v.push(atyp::IPV4);
            v.extend_from_slice(&ip.octets());
        }
        Addr::V6(ip) => {
            v.push(atyp::IPV6);
            v.extend_from_slice(&ip.octets());
        }
        Addr::Domain(name) => {
            v.push(atyp::DOMAIN);
            v.push(u8::try_from(name.len()).expect("a checked domain is at most 253 bytes"));
            v.extend_from_slice(name.as_bytes());
        }
    }
    v.extend_from_slice(&r.port.to_be_bytes());
    v
}

/// Encodes a greeting (the client's side; for tests and tools).
pub fn encode_greeting(g: &Greeting) -> Vec<u8> {
    let mut v = vec![
        VERSION,
        u8::try_from(g.methods.len()).expect("at most 255 methods"),
    ];
    v.extend(g.methods.iter().map(|m| m.0));
    v
}

/// Encodes an RFC 1929 request (the client's side; for tests and tools).
pub fn encode_credentials(c: &Credentials) -> Vec<u8> {
    let mut v = vec![AUTH_VERSION];
    v.push(u8::try_from(c.user.len()).expect("at most 255 bytes"));
    v.extend_from_slice(&c.user);
    v.push(u8::try_from(c.password.len()).expect("at most 255 bytes"));
    v.extend_from_slice(&c.password);
    v
}

#[cfg(test)]
mod tests;
