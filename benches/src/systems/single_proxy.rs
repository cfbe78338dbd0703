//! `single-proxy`: one Squid in the edge namespace, no parent (seed 001's "NZ only proxy").

use super::squid::{self, start_squid};
use super::{own_dir, Running, Start, System, SystemSpec, PORTS};
use crate::bed::Node;
use anyhow::Result;
use std::net::SocketAddr;

/// One near-side Squid that fetches from the origins itself.
pub struct SingleProxy;

impl System for SingleProxy {
    fn id(&self) -> &'static str {
        "single-proxy"
    }

    fn programs(&self) -> &'static [&'static str] {
        &[squid::PROGRAM]
    }

    fn start(&self, at: &Start<'_>, _spec: &SystemSpec, r: &mut Running) -> Result<()> {
        let listen = SocketAddr::new(at.bed.addr(Node::Edge), PORTS.single);
        let (c, p) = start_squid(
            at.bed,
            Node::Edge,
            &own_dir(at.dir, "single-proxy")?,
            listen,
            None,
            at.hosts,
        )?;
        r.children.push(("squid".into(), c));
        r.pid_files.push(p);
        r.proxy = Some(listen);
        Ok(())
    }
}
