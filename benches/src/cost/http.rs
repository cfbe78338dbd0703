//! The cost runner's HTTP/1.1 client: one keep-alive connection, one GET at a time, the reply
//! read whole (`Content-Length` or chunked) and checked (status 200, the expected length)
//! before the next request goes out. Blocking I/O on a thread of its own: the least the client
//! can add to what is measured, the same for every system.
//!
//! It does not pipeline, follow redirects or speak TLS; a reply it cannot frame is an error,
//! never a short read taken for a whole one.

use anyhow::{bail, ensure, Context, Result};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// How long a read may wait before the request counts as failed.
pub const READ_TIMEOUT: Duration = Duration::from_secs(30);
/// Largest reply head accepted.
const MAX_HEAD: usize = 64 * 1024;

/// The bytes of a GET for `path` on `host`: absolute-form through a forward proxy, origin-form
/// when talking to the origin itself.
pub fn request(via_proxy: bool, host: &str, path: &str) -> Vec<u8> {
    let target = if via_proxy {
        format!("http://{host}{path}")
    } else {
        path.to_string()
    };
    format!("GET {target} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: longhaul-cost\r\n\r\n")
        .into_bytes()
}

/// How a reply's body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// `Content-Length` bytes.
    Length(u64),
    /// `Transfer-Encoding: chunked`.
    Chunked,
}

/// Parses a complete reply head: status and body framing. `Ok(None)` while `buf` holds no
/// complete head yet; otherwise also the head's length.
pub fn parse_head(buf: &[u8]) -> Result<Option<(u16, Framing, usize)>> {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut resp = httparse::Response::new(&mut headers);
    let n = match resp.parse(buf).context("reply head")? {
        httparse::Status::Complete(n) => n,
        httparse::Status::Partial => return Ok(None),
    };
    let status = resp.code.context("no status")?;
    let mut framing = None;
    for h in resp.headers.iter() {
        if h.name.eq_ignore_ascii_case("transfer-encoding") {
            let v = String::from_utf8_lossy(h.value).to_ascii_lowercase();
            ensure!(v.trim().ends_with("chunked"), "transfer-encoding {v}");
            framing = Some(Framing::Chunked);
        } else if h.name.eq_ignore_ascii_case("content-length") && framing.is_none() {
            let v = std::str::from_utf8(h.value)?.trim().parse()?;
            framing = Some(Framing::Length(v));
        }
    }
    let framing = framing.context("reply without Content-Length or chunked framing")?;
    Ok(Some((status, framing, n)))
}

/// One keep-alive client connection.
pub struct Conn {
    s: TcpStream,
    buf: Vec<u8>,
    /// Bytes of `buf` already consumed.
    at: usize,
}

impl Conn {
    /// Connects to `addr` (`TCP_NODELAY`, [`READ_TIMEOUT`]).
    pub fn connect(addr: SocketAddr) -> Result<Conn> {
        let s = TcpStream::connect_timeout(&addr, Duration::from_secs(5))
            .with_context(|| format!("connecting to {addr}"))?;
        s.set_nodelay(true)?;
        s.set_read_timeout(Some(READ_TIMEOUT))?;
        Ok(Conn {
            s,
            buf: Vec::with_capacity(64 * 1024),
            at: 0,
        })
    }

    /// The socket (to keep it open while idle).
    pub fn stream(&self) -> &TcpStream {
        &self.s
    }

    /// Sends `req` and reads the whole reply; fails unless it is a 200 of `expect` body bytes
    /// (any length when `None`). Returns the body length.
    pub fn get(&mut self, req: &[u8], expect: Option<u64>) -> Result<u64> {
        self.s.write_all(req).context("sending the request")?;
        let (status, framing) = loop {
            if let Some((st, f, n)) = parse_head(&self.buf[self.at..])? {
                self.at += n;
                break (st, f);
            }
            ensure!(self.buf.len() - self.at < MAX_HEAD, "reply head too large");
            self.fill()?;
        };
        let body = match framing {
            Framing::Length(n) => {
                self.skip(n)?;
                n
            }
            Framing::Chunked => self.chunked()?,
        };
        if status != 200 {
            bail!("status {status}");
        }
        if let Some(e) = expect {
            ensure!(body == e, "body of {body} bytes, expected {e}");
        }
        Ok(body)
    }

    /// Reads more into the buffer, dropping what was consumed; fails at the end of the stream.
    fn fill(&mut self) -> Result<()> {
        if self.at > 0 {
            self.buf.drain(..self.at);
            self.at = 0;
        }
        let len = self.buf.len();
        self.buf.resize(len + 64 * 1024, 0);
        let n = self.s.read(&mut self.buf[len..]);
        let n = match n {
            Ok(n) => n,
            Err(e) => {
                self.buf.truncate(len);
                return Err(e).context("reading the reply");
            }
        };
        self.buf.truncate(len + n);
        ensure!(n > 0, "connection closed mid-reply");
        Ok(())
    }

    /// Consumes `n` body bytes.
    fn skip(&mut self, mut n: u64) -> Result<()> {
        loop {
            let have = (self.buf.len() - self.at) as u64;
            let take = have.min(n);
            self.at += take as usize;
            n -= take;
            if n == 0 {
                return Ok(());
            }
            self.fill()?;
        }
    }

    /// A CRLF-terminated line.
    fn line(&mut self) -> Result<String> {
        loop {
            if let Some(i) = self.buf[self.at..].windows(2).position(|w| w == b"\r\n") {
                let l = String::from_utf8_lossy(&self.buf[self.at..self.at + i]).into_owned();
                self.at += i + 2;
                return Ok(l);
            }
            ensure!(self.buf.len() - self.at < MAX_HEAD, "chunk line too long");
            self.fill()?;
        }
    }

    /// Consumes a chunked body (without trailers); returns its length.
    fn chunked(&mut self) -> Result<u64> {
        let mut total = 0;
        loop {
            let l = self.line()?;
            let size = u64::from_str_radix(l.split(';').next().unwrap_or("").trim(), 16)
                .with_context(|| format!("chunk size {l:?}"))?;
            if size == 0 {
                // Trailer section: lines until an empty one.
                while !self.line()?.is_empty() {}
                return Ok(total);
            }
            self.skip(size)?;
            ensure!(self.line()?.is_empty(), "chunk without CRLF");
            total += size;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    #[test]
    fn requests_take_the_form_of_their_hop() {
        let p = String::from_utf8(request(true, "10.77.3.10", "/1k")).unwrap();
        assert!(p.starts_with("GET http://10.77.3.10/1k HTTP/1.1\r\nHost: 10.77.3.10\r\n"));
        let d = String::from_utf8(request(false, "10.77.3.10", "/1k")).unwrap();
        assert!(d.starts_with("GET /1k HTTP/1.1\r\n"));
        assert!(d.ends_with("\r\n\r\n"));
    }

    #[test]
    fn heads_give_status_and_framing() {
        let h = b"HTTP/1.1 200 OK\r\nContent-Length: 12\r\n\r\nbody";
        assert_eq!(
            parse_head(h).unwrap(),
            Some((200, Framing::Length(12), h.len() - 4))
        );
        let c = b"HTTP/1.1 502 Bad\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n";
        assert_eq!(parse_head(c).unwrap().unwrap().1, Framing::Chunked);
        assert_eq!(parse_head(b"HTTP/1.1 200 OK\r\nConte").unwrap(), None);
        assert!(parse_head(b"HTTP/1.1 200 OK\r\n\r\n").is_err());
    }

    /// A server answering each request on one connection with the next of `replies`.
    fn serve(replies: Vec<&'static [u8]>) -> SocketAddr {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let a = l.local_addr().unwrap();
        std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            for r in replies {
                let mut got = Vec::new();
                let mut b = [0u8; 1024];
                while !got.ends_with(b"\r\n\r\n") {
                    let n = s.read(&mut b).unwrap();
                    if n == 0 {
                        return;
                    }
                    got.extend_from_slice(&b[..n]);
                }
                s.write_all(r).unwrap();
            }
        });
        a
    }

    #[test]
    fn a_keep_alive_connection_reads_each_reply_whole() {
        let a = serve(vec![
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2;x=y\r\nde\r\n0\r\n\r\n",
            b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 2\r\n\r\nno",
            b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort",
        ]);
        let mut c = Conn::connect(a).unwrap();
        let req = request(false, "h", "/");
        assert_eq!(c.get(&req, Some(5)).unwrap(), 5);
        assert_eq!(c.get(&req, None).unwrap(), 5);
        assert!(c.get(&req, None).unwrap_err().to_string().contains("502"));
        // The server closes after a short body: an error, never a whole reply.
        assert!(c.get(&req, Some(10)).is_err());
    }
}
