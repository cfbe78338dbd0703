//! The origin: a document root holding every workload's objects, a per-run test CA and server
//! certificate, and an nginx configuration serving each host name over HTTP (80) and HTTPS (443).
//!
//! Only files are written here; the runner starts nginx in the origin namespace with
//! [`Site::nginx_args`]. HTTPS offers `h2` and `http/1.1` by ALPN ([`OriginAlpn::H2`], as most
//! HTTPS sites do today) or `http/1.1` only ([`OriginAlpn::H1`], the origin of the results
//! before HTTP/2 was offered). Plain HTTP is HTTP/1.1 either way: browsers do not speak
//! cleartext HTTP/2.

use crate::workload::{self, Kind, Workload};
use anyhow::{Context, Result};
use std::fmt::Write as _;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

/// The site's directory under a profile's run directory.
pub const SITE_DIR: &str = "origin";
/// First extra origin address; host `k` (in [`Site::hosts`] order) gets `.10 + k`.
pub const FIRST_HOST_OCTET: u8 = 10;
/// Most host names one site serves (keeps the addresses inside 10.77.3.0/24).
pub const MAX_HOSTS: usize = 200;

/// What the HTTPS origin offers by ALPN.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OriginAlpn {
    /// `http/1.1` only: the origin of the results before HTTP/2 was offered.
    H1,
    /// `h2` and `http/1.1` (the default for new runs).
    #[default]
    H2,
}

impl OriginAlpn {
    /// Its name as `--origin-alpn` and the results give it (`h1`, `h2`).
    pub fn as_str(self) -> &'static str {
        match self {
            OriginAlpn::H1 => "h1",
            OriginAlpn::H2 => "h2",
        }
    }
}

impl std::str::FromStr for OriginAlpn {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> Result<OriginAlpn> {
        match s {
            "h1" => Ok(OriginAlpn::H1),
            "h2" => Ok(OriginAlpn::H2),
            _ => anyhow::bail!(
                "origin ALPN must be h1 (http/1.1 only) or h2 (h2 and http/1.1), not {s:?}"
            ),
        }
    }
}

impl std::fmt::Display for OriginAlpn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Files of one run's origin.
#[derive(Debug, Clone)]
pub struct Site {
    /// Directory holding everything.
    pub dir: PathBuf,
    /// Host names and the origin address each is served on.
    pub hosts: Vec<(String, IpAddr)>,
    /// PEM of the test CA the clients trust.
    pub ca_pem: PathBuf,
    /// Base64 SHA-256 of the server certificate's public key (Chromium's SPKI allow list).
    pub spki_sha256: String,
    /// What HTTPS offers by ALPN.
    pub alpn: OriginAlpn,
}

/// The address of the `k`-th host name.
pub fn host_addr(k: usize) -> IpAddr {
    IpAddr::from([10, 77, 3, FIRST_HOST_OCTET + k as u8])
}

impl Site {
    /// Writes the document root, certificates and nginx configuration for `workloads` under
    /// `dir` (created if missing); HTTPS offers `alpn`.
    pub fn prepare(dir: &Path, workloads: &[Workload], alpn: OriginAlpn) -> Result<Site> {
        std::fs::create_dir_all(dir.join("tmp"))
            .with_context(|| format!("creating {}", dir.display()))?;
        let mut hosts: Vec<String> = Vec::new();
        for w in workloads {
            for h in &w.hosts {
                if !hosts.contains(h) {
                    hosts.push(h.clone());
                }
            }
        }
        anyhow::ensure!(hosts.len() <= MAX_HOSTS, "at most {MAX_HOSTS} host names");
        let www = dir.join("www");
        for w in workloads {
            for (i, o) in w.objects.iter().enumerate() {
                let path = www.join(&o.host).join(o.path.trim_start_matches('/'));
                std::fs::create_dir_all(path.parent().expect("has a parent"))?;
                match o.kind {
                    Kind::Bulk => {
                        // Sparse: nginx serves zeros, nothing compresses them on the way.
                        let f = std::fs::File::create(&path)?;
                        f.set_len(o.size)?;
                    }
                    Kind::Image => {
                        // A valid PNG whose padding chunk is a hole in a sparse file.
                        use std::io::{Seek, SeekFrom, Write};
                        let png = workload::png(o.size);
                        let mut f = std::fs::File::create(&path)?;
                        f.write_all(&png.head)?;
                        f.seek(SeekFrom::Start(png.head.len() as u64 + png.zeros))?;
                        f.write_all(&png.tail)?;
                    }
                    _ => std::fs::write(&path, w.body(i))?,
                }
            }
        }
        let (ca_pem, spki) = write_certificates(dir, &hosts)?;
        let hosts: Vec<(String, IpAddr)> = hosts
            .into_iter()
            .enumerate()
            .map(|(k, h)| (h, host_addr(k)))
            .collect();
        std::fs::write(dir.join("nginx.conf"), nginx_conf(dir, &hosts, alpn))?;
        Ok(Site {
            dir: dir.to_path_buf(),
            hosts,
            ca_pem,
            spki_sha256: spki,
            alpn,
        })
    }

    /// Arguments for `nginx` (foreground, this site's configuration and prefix).
    pub fn nginx_args(&self) -> Vec<String> {
        vec![
            "-p".into(),
            self.dir.display().to_string(),
            "-c".into(),
            self.dir.join("nginx.conf").display().to_string(),
            "-e".into(),
            self.dir.join("nginx-error.log").display().to_string(),
        ]
    }
}

/// The nginx configuration: one server block per host name on its own address. HTTPS offers
/// TLS 1.3 (a one-round-trip handshake, as today's web servers do) besides 1.2: nginx before
/// 1.23.4, Debian 12's included, enables only up to TLS 1.2 by default, whose full handshake
/// takes two round trips. Every response carries `Timing-Allow-Origin: *` so that a page's
/// Resource Timing shows the body size of other host names' objects, which the Chromium client
/// checks (24 bytes more per response, for every system alike). A request with an `Origin`
/// header (a CORS request: fonts, and style sheets a page links from another host with
/// `crossorigin`) is answered with `Access-Control-Allow-Origin: *`, as font hosts and CDNs
/// answer it; a browser refuses a font from another host without it. Other responses (every
/// response of the seeds' pages) do not carry it. With [`OriginAlpn::H2`] the HTTPS listeners
/// also offer `h2` (nginx 1.22's `listen … ssl http2`) with nginx's defaults: 128 concurrent
/// streams per connection, 64 KiB initial stream window (raised by the client's SETTINGS),
/// 8 KiB DATA chunks.
pub fn nginx_conf(dir: &Path, hosts: &[(String, IpAddr)], alpn: OriginAlpn) -> String {
    let d = dir.display();
    let mut s = format!(
        "# generated by pageload\ndaemon off;\nmaster_process on;\nuser root;\nworker_processes 1;\n\
         pid {d}/nginx.pid;\nerror_log {d}/nginx-error.log warn;\n\
         events {{ worker_connections 4096; }}\n\
         http {{\n  access_log off;\n  sendfile on;\n  tcp_nopush on;\n  tcp_nodelay on;\n\
         \x20 keepalive_timeout 120s;\n  keepalive_requests 100000;\n\
         \x20 client_body_temp_path {d}/tmp/body;\n  proxy_temp_path {d}/tmp/proxy;\n\
         \x20 fastcgi_temp_path {d}/tmp/fastcgi;\n  uwsgi_temp_path {d}/tmp/uwsgi;\n  scgi_temp_path {d}/tmp/scgi;\n\
         \x20 types {{ text/html html; text/css css; application/javascript js; image/png png; font/woff2 woff2; application/octet-stream bin; }}\n\
         \x20 map $http_origin $longhaul_acao {{ \"\" \"\"; default \"*\"; }}\n\
         \x20 ssl_certificate {d}/origin.pem;\n  ssl_certificate_key {d}/origin.key;\n\
         \x20 ssl_protocols TLSv1.2 TLSv1.3;\n\
         \x20 ssl_session_cache off;\n  ssl_session_tickets off;\n"
    );
    let h2 = match alpn {
        OriginAlpn::H1 => "",
        OriginAlpn::H2 => " http2",
    };
    for (h, ip) in hosts {
        let _ = writeln!(
            s,
            "  server {{ listen {ip}:80; listen {ip}:443 ssl{h2}; server_name {h}; root {d}/www/{h}; etag off; add_header Timing-Allow-Origin \"*\" always; add_header Access-Control-Allow-Origin $longhaul_acao always; }}"
        );
    }
    s.push_str("}\n");
    s
}

/// A fresh CA and a server certificate for `hosts`; returns the CA path and the server key's
/// SPKI SHA-256 in base64.
fn write_certificates(dir: &Path, hosts: &[String]) -> Result<(PathBuf, String)> {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, KeyUsagePurpose};
    let mut ca = CertificateParams::new(Vec::<String>::new())?;
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(DnType::CommonName, "longhaul pageload test CA");
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca_key = KeyPair::generate()?;
    let ca_cert = ca.self_signed(&ca_key)?;
    let mut leaf = CertificateParams::new(hosts.to_vec())?;
    leaf.distinguished_name.push(
        DnType::CommonName,
        hosts.first().map(String::as_str).unwrap_or("origin"),
    );
    let leaf_key = KeyPair::generate()?;
    let leaf_cert = leaf.signed_by(&leaf_key, &ca_cert, &ca_key)?;
    let ca_path = dir.join("ca.pem");
    std::fs::write(&ca_path, ca_cert.pem())?;
    std::fs::write(dir.join("origin.pem"), leaf_cert.pem())?;
    std::fs::write(dir.join("origin.key"), leaf_key.serialize_pem())?;
    let spki = ring::digest::digest(&ring::digest::SHA256, &leaf_key.public_key_der());
    Ok((ca_path, base64_encode(spki.as_ref())))
}

/// Standard base64 with padding.
pub fn base64_encode(bytes: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut s = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for c in bytes.chunks(3) {
        let n = (u32::from(c[0]) << 16)
            | (u32::from(*c.get(1).unwrap_or(&0)) << 8)
            | u32::from(*c.get(2).unwrap_or(&0));
        for k in 0..4 {
            if k <= c.len() {
                s.push(A[(n >> (18 - 6 * k)) as usize & 63] as char);
            } else {
                s.push('=');
            }
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::{generate_page, page_specs};

    #[test]
    fn base64_matches_the_rfc_vectors() {
        for (i, o) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64_encode(i.as_bytes()), o);
        }
    }

    #[test]
    fn site_files_have_the_workload_sizes_and_a_server_per_host() {
        let dir = std::env::temp_dir().join(format!("longhaul-site-test-{}", std::process::id()));
        let w = generate_page(&page_specs()[0]);
        let site = Site::prepare(&dir, std::slice::from_ref(&w), OriginAlpn::H1).unwrap();
        assert_eq!(site.hosts.len(), 2);
        for o in &w.objects {
            let p = dir
                .join("www")
                .join(&o.host)
                .join(o.path.trim_start_matches('/'));
            assert_eq!(
                std::fs::metadata(&p).unwrap().len(),
                o.size,
                "{}",
                p.display()
            );
        }
        let conf = std::fs::read_to_string(dir.join("nginx.conf")).unwrap();
        assert!(
            conf.contains("listen 10.77.3.10:443 ssl; server_name www.yahoo.test;"),
            "{conf}"
        );
        assert!(conf.contains("server_name l.yimg.test"));
        // CORS requests (an `Origin` header: fonts, cross-host style sheets) are allowed; other
        // responses carry no Access-Control header.
        assert!(
            conf.contains("map $http_origin $longhaul_acao { \"\" \"\"; default \"*\"; }"),
            "{conf}"
        );
        assert!(conf.contains("add_header Access-Control-Allow-Origin $longhaul_acao always;"));
        // Offering h2 changes only the HTTPS listeners.
        let h2 = nginx_conf(&dir, &site.hosts, OriginAlpn::H2);
        assert!(
            h2.contains("listen 10.77.3.10:80; listen 10.77.3.10:443 ssl http2; server_name www.yahoo.test;"),
            "{h2}"
        );
        assert_eq!(h2.matches(" http2;").count(), site.hosts.len());
        assert_eq!(conf.matches("http2").count(), 0);
        assert_eq!("h2".parse::<OriginAlpn>().unwrap(), OriginAlpn::H2);
        assert!("h3".parse::<OriginAlpn>().is_err());
        // nginx before 1.23.4 (Debian 12 ships 1.22) offers only TLS 1.2 unless told otherwise.
        assert!(conf.contains("ssl_protocols TLSv1.2 TLSv1.3;"), "{conf}");
        assert!(std::fs::read_to_string(&site.ca_pem)
            .unwrap()
            .contains("BEGIN CERTIFICATE"));
        assert_eq!(site.spki_sha256.len(), 44);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
