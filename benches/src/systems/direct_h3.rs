//! `direct-h3`: no proxy; the client talks HTTP/3 over QUIC straight to the origins across the
//! long link, as a modern browser does with a modern site. An explicit proxy (every other
//! system) never sees that traffic: through them, browsers use TCP.
//!
//! The origin's QUIC side is `pageload h3-origin` ([`crate::http3`]) in the origin namespace,
//! beside nginx, on UDP 443 of every host address, serving the same files with the same
//! certificate. It is this system's process: it starts and stops with the system. HTTPS only
//! (HTTP/3 has no cleartext form).

use super::{own_dir, spawn, Running, Start, System, SystemSpec};
use crate::bed::Node;
use anyhow::{Context, Result};

/// Its id.
pub const ID: &str = "direct-h3";
/// UDP port the origin's HTTP/3 listens on (HTTPS's).
pub const PORT: u16 = 443;

/// The client over HTTP/3, straight to the origins.
pub struct DirectH3;

impl System for DirectH3 {
    fn id(&self) -> &'static str {
        ID
    }

    fn unsupported(&self, scheme: &str) -> Option<&'static str> {
        (scheme != "https").then_some("HTTP/3 is HTTPS only")
    }

    fn http3(&self) -> bool {
        true
    }

    fn start(&self, at: &Start<'_>, _spec: &SystemSpec, r: &mut Running) -> Result<()> {
        let site = at.dir.join(crate::origin::SITE_DIR);
        let dir = own_dir(at.dir, ID)?;
        let exe = std::env::current_exe().context("locating pageload for its h3-origin")?;
        let mut args: Vec<String> = vec![
            "h3-origin".into(),
            "--root".into(),
            site.join("www").display().to_string(),
            "--cert".into(),
            site.join("origin.pem").display().to_string(),
            "--key".into(),
            site.join("origin.key").display().to_string(),
        ];
        for (_, ip) in at.hosts {
            args.push("--listen".into());
            args.push(std::net::SocketAddr::new(*ip, PORT).to_string());
        }
        let child = spawn(
            at.bed,
            Node::Origin,
            &exe.display().to_string(),
            &args,
            &dir.join("h3-origin.log"),
        )?;
        r.children.push(("h3-origin".into(), child));
        r.proxy = None;
        Ok(())
    }
}
